//===- ReplayMain.cpp - Runs a fuzz target over files (no libFuzzer) --------===//
//
// Built with the normal compiler, so every build replays the seed corpus and the saved
// regressions through the fuzz targets (ctest fuzz.replay.*); scripts/fuzz builds the
// same targets with clang's libFuzzer to search for new inputs.
//
//===----------------------------------------------------------------------===//

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern "C" size_t lcejitFuzzPlanned; // defined by each target

int main(int argc, char **argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  size_t minPlanned = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--min-planned" && i + 1 < argc) {
      minPlanned = std::stoul(argv[++i]);
      continue;
    }
    fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto &e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file())
          files.push_back(e.path());
    } else {
      files.push_back(p);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--min-planned K] FILE|DIR...: no input files\n", argv[0]);
    return 2;
  }
  for (const fs::path &f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs, %zu reached a Program\n", files.size(), lcejitFuzzPlanned);
  if (lcejitFuzzPlanned < minPlanned) {
    std::fprintf(stderr, "only %zu inputs reached the planner, expected at least %zu: the "
                         "seeds no longer exercise the pipeline\n",
                 lcejitFuzzPlanned, minPlanned);
    return 1;
  }
  return 0;
}
