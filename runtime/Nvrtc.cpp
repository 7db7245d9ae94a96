//===- Nvrtc.cpp - CUDA C++ source to cubin with NVRTC ---------------------===//

#include "runtime/Nvrtc.h"
#include "compiler/support/Check.h"
#include "compiler/support/Knobs.h"
#include "compiler/support/Sha256.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <cctype>
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
                                 sha256Hex(req.source).substr(0, 12));
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
