//===- Nvrtc.cpp - CUDA C++ source to cubin with NVRTC ---------------------===//

#include "runtime/Nvrtc.h"
#include "runtime/DiskCache.h"
#include "compiler/support/Check.h"
#include "compiler/support/Knobs.h"
#include "compiler/support/ContentHash.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <cctype>
#include <link.h>
#include <map>
#include <mutex>
#include <set>
#include <sys/stat.h>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>

namespace lcejit::runtime {

namespace fs = std::filesystem;

namespace {

/// Throws Error(Nvrtc) for a failing NVRTC API call that is not the compile itself.
void checkNvrtc(nvrtcResult r, const char *call) {
  if (r != NVRTC_SUCCESS)
    LCEJIT_THROW(Nvrtc, "{} failed: {}", call, nvrtcGetErrorString(r));
}
#define LCEJIT_NVRTC(call) checkNvrtc((call), #call)

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { nvrtcDestroyProgram(&p); }
};
using ProgramHandle = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string programLog(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size == 0)
    return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS)
    return "";
  while (!log.empty() && log.back() == '\0')
    log.pop_back();
  return log;
}

/// Parses "sm_90a" / "sm_80" into 90 / 80; throws InvalidArgument otherwise.
int archNumber(std::string_view arch) {
  static const std::regex re(R"(sm_([0-9]{2,3})[af]?)");
  std::cmatch m;
  std::string a(arch);
  LCEJIT_CHECK_ARG(std::regex_match(a.c_str(), m, re),
                   "arch '{}' is not of the form sm_XY or sm_XYa", arch);
  return std::stoi(m[1].str());
}

std::string shellQuote(const std::string &s) {
  bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_=./:,+@", c);
  });
  if (plain)
    return s;
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string sanitizeForFileName(std::string_view s) {
  std::string r;
  for (char c : s)
    r.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_');
  return r.empty() ? "kernel" : r;
}

/// Writes the failing source, options and log; returns the source path or "" (and why).
std::string writeReproducer(const NvrtcRequest &req, const std::vector<std::string> &options,
                            const std::string &log, std::string *command, std::string *why) {
  std::error_code ec;
  fs::path dir = knobs::dumpDirIsSet() ? fs::path(knobs::dumpDir())
                                       : fs::temp_directory_path(ec) / "lcejit-failures";
  if (ec) {
    *why = ec.message();
    return "";
  }
  fs::create_directories(dir, ec);
  if (ec) {
    *why = fmt::format("cannot create {}: {}", dir.string(), ec.message());
    return "";
  }
  std::string stem = fmt::format("{}-{}-{}", sanitizeForFileName(req.label), req.arch,
                                 contentHashHex(req.source).substr(0, 12));
  fs::path src = dir / (stem + ".cu");
  auto write = [&](const fs::path &p, const std::string &text) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
    return static_cast<bool>(out.flush());
  };
  std::string optionText;
  for (const std::string &o : options)
    optionText += o + "\n";
  if (!write(src, req.source) || !write(dir / (stem + ".options"), optionText) ||
      !write(dir / (stem + ".log"), log)) {
    *why = fmt::format("cannot write to {}", dir.string());
    return "";
  }
  *command = nvccCommand(options, src.string(), (dir / (stem + ".cubin")).string());
  return src.string();
}

} // namespace

//===----------------------------------------------------------------------===//
// ptxas -v parsing
//===----------------------------------------------------------------------===//

std::vector<PtxasKernelInfo> parsePtxasInfo(std::string_view log) {
  static const std::regex entryRe(R"(Compiling entry function '([^']+)' for '([^']+)')");
  static const std::regex propsRe(R"(Function properties for (\S+))");
  static const std::regex stackRe(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex regsRe(R"(Used (\d+) registers)");
  static const std::regex barriersRe(R"(used (\d+) barriers)");
  static const std::regex smemRe(R"((\d+) bytes smem)");
  static const std::regex cmemRe(R"((\d+) bytes cmem\[0\])");
  static const std::regex timeRe(R"(Compile time = ([0-9.]+) ms)");

  std::vector<PtxasKernelInfo> kernels;
  PtxasKernelInfo *current = nullptr;
  bool propsForCurrent = false; // "Function properties" may describe a device function
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string_view::npos)
      end = log.size();
    std::string line(log.substr(start, end - start));
    start = end + 1;
    if (line.rfind("ptxas", 0) != 0)
      continue;
    std::smatch m;
    if (std::regex_search(line, m, entryRe)) {
      kernels.emplace_back();
      current = &kernels.back();
      current->kernel = m[1].str();
      current->arch = m[2].str();
      current->lines.push_back(line);
      propsForCurrent = false;
      continue;
    }
    if (!current)
      continue;
    if (std::regex_search(line, m, propsRe)) {
      propsForCurrent = m[1].str() == current->kernel;
      if (propsForCurrent)
        current->lines.push_back(line);
      continue;
    }
    if (std::regex_search(line, m, stackRe)) {
      if (propsForCurrent) {
        current->stackFrameBytes = std::stoll(m[1].str());
        current->spillStoreBytes = std::stoll(m[2].str());
        current->spillLoadBytes = std::stoll(m[3].str());
        current->lines.push_back(line);
      }
      continue;
    }
    bool used = false;
    if (std::regex_search(line, m, regsRe)) {
      current->registers = std::stoi(m[1].str());
      used = true;
    }
    if (std::regex_search(line, m, barriersRe)) {
      current->barriers = std::stoi(m[1].str());
      used = true;
    }
    if (std::regex_search(line, m, smemRe)) {
      current->sharedBytes = std::stoll(m[1].str());
      used = true;
    }
    if (std::regex_search(line, m, cmemRe)) {
      current->constBytes = std::stoll(m[1].str());
      used = true;
    }
    if (std::regex_search(line, m, timeRe)) {
      current->ptxasMs = std::stod(m[1].str());
      used = true;
    }
    if (used)
      current->lines.push_back(line);
  }
  return kernels;
}

//===----------------------------------------------------------------------===//
// Compilation
//===----------------------------------------------------------------------===//

std::vector<std::string> nvrtcOptions(std::string_view arch,
                                      const std::vector<std::string> &extra) {
  std::vector<std::string> opts = {fmt::format("--gpu-architecture={}", arch), "-std=c++17",
                                   "--ptxas-options=-v"};
  for (const std::string &dir : knobs::cudaIncludeDirs())
    opts.push_back("-I" + dir);
  opts.insert(opts.end(), extra.begin(), extra.end());
  return opts;
}

const std::string &nvrtcVersion() {
  static const std::string version = [] {
    int major = 0, minor = 0;
    LCEJIT_NVRTC(::nvrtcVersion(&major, &minor));
    return fmt::format("{}.{}", major, minor);
  }();
  return version;
}

namespace {

/// The release and build lines NVRTC writes at the top of PTX, "V13.0.88, CL-36424714,
/// NVVM 7.0.1", from an empty program; "no PTX banner (<why>)" if that fails.
std::string ptxBanner() {
  const std::vector<int> &archs = nvrtcSupportedArchs();
  if (archs.empty())
    return "no PTX banner (no supported arch)";
  nvrtcProgram raw = nullptr;
  if (nvrtcCreateProgram(&raw, "", "lcejit_version_probe.cu", 0, nullptr, nullptr) !=
      NVRTC_SUCCESS)
    return "no PTX banner (nvrtcCreateProgram failed)";
  ProgramHandle prog(raw);
  std::string arch = fmt::format("--gpu-architecture=compute_{}",
                                 *std::min_element(archs.begin(), archs.end()));
  const char *opts[] = {arch.c_str()};
  nvrtcResult r = nvrtcCompileProgram(prog.get(), 1, opts);
  size_t size = 0;
  if (r != NVRTC_SUCCESS || nvrtcGetPTXSize(prog.get(), &size) != NVRTC_SUCCESS)
    return fmt::format("no PTX banner ({})", nvrtcGetErrorString(r));
  std::string ptx(size, '\0');
  if (nvrtcGetPTX(prog.get(), ptx.data()) != NVRTC_SUCCESS)
    return "no PTX banner (nvrtcGetPTX failed)";
  static const std::regex release(R"(release [0-9.]+, (V[0-9][0-9.]*))");
  static const std::regex build(R"(Compiler Build ID: (\S+))");
  static const std::regex nvvm(R"(Based on (NVVM [0-9][0-9.]*))");
  std::vector<std::string> parts;
  std::smatch m;
  for (const std::regex *re : {&release, &build, &nvvm})
    if (std::regex_search(ptx, m, *re))
      parts.push_back(m[1].str());
  if (parts.empty()) // an unknown banner format: keep its comment lines verbatim
    for (size_t pos = 0; pos < ptx.size() && ptx.compare(pos, 2, "//") == 0;) {
      size_t end = ptx.find('\n', pos);
      std::string line = ptx.substr(pos + 2, end == std::string::npos ? end : end - pos - 2);
      if (line.find_first_not_of(' ') != std::string::npos)
        parts.push_back(line.substr(line.find_first_not_of(' ')));
      pos = end == std::string::npos ? ptx.size() : end + 1;
    }
  return parts.empty() ? "no PTX banner (none in the PTX)" : fmt::format("{}", fmt::join(parts, ", "));
}

/// The resolved path of the loaded libnvrtc (found with dl_iterate_phdr), or "".
std::string loadedNvrtcPath() {
  std::string path;
  dl_iterate_phdr(
      [](struct dl_phdr_info *info, size_t, void *data) -> int {
        if (!info->dlpi_name)
          return 0;
        std::string_view name = info->dlpi_name;
        size_t slash = name.rfind('/');
        std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
        if (base.rfind("libnvrtc.", 0) == 0 || base.rfind("libnvrtc64", 0) == 0) {
          *static_cast<std::string *>(data) = std::string(name);
          return 1;
        }
        return 0;
      },
      &path);
  if (path.empty())
    return "";
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  return ec ? path : real.string();
}

/// "<file name> <size> bytes" of the loaded libnvrtc, or "libnvrtc file unknown".
std::string nvrtcLibraryFile() {
  const std::string path = loadedNvrtcPath();
  if (path.empty())
    return "libnvrtc file unknown (statically linked?)";
  const fs::path real(path);
  std::error_code ec;
  uintmax_t size = fs::file_size(real, ec);
  if (ec)
    return fmt::format("{} (size unknown)", real.filename().string());
  return fmt::format("{} {} bytes", real.filename().string(), size);
}

} // namespace

std::string nvrtcProbeFullVersion() {
  return fmt::format("{} ({}; {})", nvrtcVersion(), ptxBanner(), nvrtcLibraryFile());
}

std::string nvrtcLibraryIdentity() {
  const std::string path = loadedNvrtcPath();
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0)
    return "";
  // ctime cannot be set from user space: a file rewritten in place, then given its old
  // size and mtime back, still gets a new one.
  return fmt::format("nvrtc {}; {}; size {}; mtime {}.{:09d}; ctime {}.{:09d}; dev {}; ino {}",
                     nvrtcVersion(), path, int64_t(st.st_size), int64_t(st.st_mtim.tv_sec),
                     st.st_mtim.tv_nsec, int64_t(st.st_ctim.tv_sec), st.st_ctim.tv_nsec,
                     uint64_t(st.st_dev), uint64_t(st.st_ino));
}

NvrtcFullVersion resolveNvrtcFullVersion(const std::optional<fs::path> &memoRoot,
                                         std::string_view libraryIdentity,
                                         const std::function<std::string()> &probe) {
  const bool memo = memoRoot.has_value() && !libraryIdentity.empty();
  if (memo)
    if (std::optional<std::string> v = loadMemo(*memoRoot, kNvrtcVersionMemo, libraryIdentity))
      return {std::move(*v), /*fromMemo=*/true, /*stored=*/false};
  NvrtcFullVersion out{probe(), false, false};
  // A probe that failed ("no PTX banner (...)") may succeed next time: not kept.
  if (memo && out.value.find("no PTX banner") == std::string::npos)
    out.stored = storeMemo(*memoRoot, kNvrtcVersionMemo, libraryIdentity, out.value);
  return out;
}

const std::string &nvrtcFullVersion() {
  static const std::string version =
      resolveNvrtcFullVersion(knobs::cacheEnabled()
                                  ? std::optional<fs::path>(knobs::cacheDir())
                                  : std::nullopt,
                              nvrtcLibraryIdentity(), nvrtcProbeFullVersion)
          .value;
  return version;
}

//===----------------------------------------------------------------------===//
// Included headers
//===----------------------------------------------------------------------===//

namespace {

struct IncludeLine {
  bool angled = false;
  std::string name;
};

/// Every `#include <x>` / `#include "x"` line of a text (spaces allowed around `#`).
std::vector<IncludeLine> includeLines(std::string_view text) {
  std::vector<IncludeLine> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos)
      end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    size_t i = line.find_first_not_of(" \t");
    if (i == std::string_view::npos || line[i] != '#')
      continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string_view::npos || line.compare(i, 7, "include") != 0)
      continue;
    i = line.find_first_not_of(" \t", i + 7);
    if (i == std::string_view::npos || (line[i] != '<' && line[i] != '"'))
      continue;
    char close = line[i] == '<' ? '>' : '"';
    size_t j = line.find(close, i + 1);
    if (j == std::string_view::npos || j == i + 1)
      continue;
    out.push_back({line[i] == '<', std::string(line.substr(i + 1, j - i - 1))});
  }
  return out;
}

/// A header file as last read: its identity on disk, content hash and includes.
struct HeaderFile {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  int64_t mtimeNs = -1, ctimeNs = -1;
  std::string hash; ///< "unreadable" when it could not be read
  std::vector<IncludeLine> includes;
};

/// The cached entry for `path`, re-read when the file changed. Returns false if absent.
bool headerFile(const std::string &path, HeaderFile *out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return false;
  static std::mutex mu;
  static std::map<std::string, HeaderFile> cache;
  auto ns = [](const struct timespec &t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; };
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(path);
    if (it != cache.end() && it->second.dev == st.st_dev && it->second.ino == st.st_ino &&
        it->second.size == st.st_size && it->second.mtimeNs == ns(st.st_mtim) &&
        it->second.ctimeNs == ns(st.st_ctim)) {
      *out = it->second;
      return true;
    }
  }
  HeaderFile f;
  f.dev = st.st_dev;
  f.ino = st.st_ino;
  f.size = st.st_size;
  f.mtimeNs = ns(st.st_mtim);
  f.ctimeNs = ns(st.st_ctim);
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    f.hash = "unreadable";
  } else {
    f.hash = contentHashHex(text);
    f.includes = includeLines(text);
  }
  std::lock_guard<std::mutex> lock(mu);
  cache[path] = f;
  *out = std::move(f);
  return true;
}

} // namespace

IncludedHeaders includedHeaders(std::string_view source,
                                const std::vector<std::string> &includeDirs) {
  IncludedHeaders result;
  ContentHash h;
  std::set<std::string> visited;
  auto visit = [&](auto &&self, const std::vector<IncludeLine> &lines,
                   const std::string &fromDir) -> void {
    for (const IncludeLine &inc : lines) {
      std::vector<std::string> candidates;
      if (!inc.angled && !fromDir.empty())
        candidates.push_back((fs::path(fromDir) / inc.name).string());
      for (const std::string &dir : includeDirs)
        candidates.push_back((fs::path(dir) / inc.name).string());
      HeaderFile file;
      std::string found;
      for (const std::string &c : candidates)
        if (headerFile(c, &file)) {
          found = c;
          break;
        }
      std::string mark = inc.angled ? "<" + inc.name + ">" : "\"" + inc.name + "\"";
      if (found.empty()) {
        h.update(fmt::format("{} builtin\n", mark));
        if (std::find(result.builtin.begin(), result.builtin.end(), inc.name) ==
            result.builtin.end())
          result.builtin.push_back(inc.name);
        continue;
      }
      std::string canonical = fs::path(found).lexically_normal().string();
      h.update(fmt::format("{} {}\n", mark, file.hash));
      if (!visited.insert(canonical).second)
        continue;
      result.files.push_back(canonical);
      self(self, file.includes, fs::path(canonical).parent_path().string());
    }
  };
  visit(visit, includeLines(source), "");
  result.hash = h.finishHex();
  return result;
}

const std::vector<int> &nvrtcSupportedArchs() {
  static const std::vector<int> archs = [] {
    int n = 0;
    LCEJIT_NVRTC(nvrtcGetNumSupportedArchs(&n));
    std::vector<int> a(static_cast<size_t>(n));
    if (n > 0)
      LCEJIT_NVRTC(nvrtcGetSupportedArchs(a.data()));
    return a;
  }();
  return archs;
}

std::string nvccCommand(const std::vector<std::string> &options, const std::string &sourcePath,
                        const std::string &cubinPath) {
  static const std::vector<std::string_view> nvrtcOnly = {
      "-default-device", "--device-as-default-execution-space", "-pch", "--pch"};
  std::string cmd = "nvcc -cubin";
  for (const std::string &o : options) {
    bool drop = std::find(nvrtcOnly.begin(), nvrtcOnly.end(), o) != nvrtcOnly.end() ||
                o.rfind("--use-pch", 0) == 0 || o.rfind("--create-pch", 0) == 0 ||
                o.rfind("--pch-dir", 0) == 0;
    if (!drop)
      cmd.append(" ").append(shellQuote(o));
  }
  return fmt::format("{} {} -o {}", cmd, shellQuote(sourcePath), shellQuote(cubinPath));
}

NvrtcOutput compileCuda(const NvrtcRequest &req) {
  int sm = archNumber(req.arch);
  const std::vector<int> &supported = nvrtcSupportedArchs();
  if (std::find(supported.begin(), supported.end(), sm) == supported.end())
    LCEJIT_THROW(Unsupported, "NVRTC {} cannot compile for {} (supported: sm_{})",
                 nvrtcVersion(), req.arch, fmt::join(supported, ", sm_"));

  NvrtcOutput out;
  out.arch = req.arch;
  out.options = nvrtcOptions(req.arch, req.extraOptions);
  out.nvrtcVersion = nvrtcVersion();

  nvrtcProgram raw = nullptr;
  std::string programName = sanitizeForFileName(req.label) + ".cu";
  LCEJIT_NVRTC(nvrtcCreateProgram(&raw, req.source.c_str(), programName.c_str(), 0, nullptr,
                                  nullptr));
  ProgramHandle prog(raw);

  std::vector<const char *> argv;
  for (const std::string &o : out.options)
    argv.push_back(o.c_str());
  auto t0 = std::chrono::steady_clock::now();
  nvrtcResult r = nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  out.compileMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  out.log = programLog(prog.get());

  if (r != NVRTC_SUCCESS) {
    std::string command, why;
    std::string path = writeReproducer(req, out.options, out.log, &command, &why);
    std::string where = path.empty()
                            ? fmt::format("source: (not written: {})", why)
                            : fmt::format("source: {}\nrecompile: {}", path, command);
    LCEJIT_THROW(Nvrtc, "NVRTC failed to compile '{}' for {} ({})\n{}\nlog:\n{}", req.label,
                 req.arch, nvrtcGetErrorString(r), where, out.log);
  }

  size_t size = 0;
  LCEJIT_NVRTC(nvrtcGetCUBINSize(prog.get(), &size));
  out.cubin.resize(size);
  LCEJIT_NVRTC(nvrtcGetCUBIN(prog.get(), reinterpret_cast<char *>(out.cubin.data())));
  size = 0;
  LCEJIT_NVRTC(nvrtcGetPTXSize(prog.get(), &size));
  out.ptx.resize(size);
  LCEJIT_NVRTC(nvrtcGetPTX(prog.get(), out.ptx.data()));
  while (!out.ptx.empty() && out.ptx.back() == '\0')
    out.ptx.pop_back();
  out.kernels = parsePtxasInfo(out.log);
  return out;
}

} // namespace lcejit::runtime
