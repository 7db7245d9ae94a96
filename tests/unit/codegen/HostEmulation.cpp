//===- HostEmulation.cpp - Run a generated module on the host (tests only)
//-===//

#include "HostEmulation.h"

#include "compiler/codegen/CodeWriter.h"
#include "compiler/codegen/Emitter.h"
#include "compiler/support/ContentHash.h"
#include "lcejit/Error.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace lcejit::testing {

namespace fs = std::filesystem;

namespace {

/// [Note: sm90 host emulation]: a Program with WgmmaBF16 GEMMs compiles with
/// LCEJIT_EMU_SM90, and then every kernel of it runs under lcejit_emu::sm90::launch (each
/// CTA its own shared memory).
bool usesSm90(const plan::Program &program) {
  for (const plan::Kernel &k : program.kernels)
    if (plan::isGemmKind(k.kind()) && plan::gemmMath(k) == plan::MathMode::WgmmaBF16)
      return true;
  return false;
}

std::string trampolines(const plan::Program &program) {
  const bool sm90 = usesSm90(program);
  codegen::CodeWriter w;
  w.comment("Host launchers (tests/unit/codegen/HostEmulation.cpp).");
  if (!sm90)
    w.line("namespace lcejit {{ alignas(16) unsigned char "
           "lcejit_dynamic_smem[{}]; }}",
           program.target.maxSharedPerBlock);
  w.line("extern \"C\" void emu_set_async_mode(int late) {{");
  w.line("  lcejit_emu::async_mode = late ? lcejit_emu::AsyncMode::Late : "
         "lcejit_emu::AsyncMode::Early;");
  if (sm90)
    w.line("  lcejit_emu_sm90_set_mode(late);");
  w.line("}}");
  for (const plan::Kernel &k : program.kernels) {
    std::vector<std::string> args;
    std::vector<plan::Param> params = plan::kernelParams(k);
    for (size_t i = 0; i < params.size(); ++i) {
      switch (params[i].kind) {
      case plan::Param::Kind::Pointer:
      case plan::Param::Kind::SlabBase:
        args.push_back(
            fmt::format("reinterpret_cast<void *>(*static_cast<unsigned long "
                        "long *>(args[{}]))",
                        i));
        break;
      case plan::Param::Kind::Splits:
        args.push_back(fmt::format("*static_cast<int *>(args[{}])", i));
        break;
      case plan::Param::Kind::TensorMapA:
      case plan::Param::Kind::TensorMapB:
      case plan::Param::Kind::TensorMapOut:
      case plan::Param::Kind::TensorMapA2:
      case plan::Param::Kind::TensorMapTail:
        // HostModule::run passes the 128 bytes of the emulated map.
        args.push_back(
            fmt::format("*static_cast<const lcejit::sm90::TensorMap *>(args[{}])", i));
        break;
      default:
        args.push_back(fmt::format("*static_cast<long long *>(args[{}])", i));
      }
    }
    auto b = w.block(fmt::format(
        "extern \"C\" void emu_launch_{}(void **args, const long long "
        "*grid, int block, int smem, int cluster, int cooperative)",
        k.name));
    if (sm90) {
      w.line("lcejit_emu::sm90::launch(grid, block, smem, cluster, cooperative != 0, [&] {{ "
             "{}({}); }});",
             k.name, fmt::join(args, ", "));
    } else {
      w.line("lcejit_emu::shared_base = lcejit::lcejit_dynamic_smem;");
      w.line("lcejit_emu::launch(grid, block, smem, [&] {{ {}({}); }});", k.name,
             fmt::join(args, ", "));
    }
  }
  return w.take();
}

/// The emulation headers (tests/unit/codegen/emu), in name order.
const std::vector<fs::path> &emulationHeaderFiles() {
  static const std::vector<fs::path> files = [] {
    std::vector<fs::path> all;
    for (const auto &entry : fs::directory_iterator(LCEJIT_TEST_EMU_DIR))
      all.push_back(entry.path());
    std::sort(all.begin(), all.end());
    return all;
  }();
  return files;
}

/// The directory of the precompiled emulation header for this variant (the build's
/// lcejit-emu-pch target), or "" where it is missing or older than an emulation header:
/// GCC would take a stale .gch without a word.
std::string emulationPchDir(bool sm90) {
  const fs::path dir = fs::path(LCEJIT_TEST_EMU_PCH_DIR) / (sm90 ? "sm90" : "plain");
  std::error_code ec;
  const auto built = fs::last_write_time(dir / "lcejit_emu.h.gch", ec);
  if (ec)
    return "";
  for (const fs::path &header : emulationHeaderFiles()) {
    const auto changed = fs::last_write_time(header, ec);
    if (ec || changed > built)
      return "";
  }
  return dir.string();
}

/// Every emulation header's name and bytes (a compiled module embeds them).
const std::string &emulationHeaders() {
  static const std::string all = [] {
    std::string text;
    for (const fs::path &f : emulationHeaderFiles()) {
      std::ifstream in(f, std::ios::binary);
      text += f.filename().string() + '\0';
      text.append(std::istreambuf_iterator<char>(in), {});
      text += '\0';
    }
    return text;
  }();
  return all;
}

/// [Note: emulated module cache] A compiled module, by the XXH3-128 of everything it is
/// made of (compiler, flags, defines, the source, the emulation headers), is kept in the
/// build tree: the 24 plain-GEMM emulation tests share one module, and a test run again
/// compiles nothing. Entries are written whole (a temporary, then a rename), used by
/// copying them (each HostLibrary its own instance of the module's globals), touched on
/// use, and the least recently used are removed past 2000. LCEJIT_EMU_CACHE=0 turns it off.
class ModuleCache {
public:
  explicit ModuleCache(const std::string &recipe)
      : enabled_(enabled()),
        path_(fs::path(LCEJIT_TEST_EMU_CACHE_DIR) /
              (lcejit::contentHashHex(recipe + '\0' + emulationHeaders()) + ".so")) {}

  /// Copies the cached module to `lib`; false on a miss.
  bool fetch(const std::string &lib) const {
    std::error_code ec;
    if (!enabled_ || !fs::copy_file(path_, lib, fs::copy_options::overwrite_existing, ec))
      return false;
    fs::last_write_time(path_, fs::file_time_type::clock::now(), ec);
    return true;
  }

  void store(const std::string &lib) const {
    if (!enabled_)
      return;
    std::error_code ec;
    fs::create_directories(path_.parent_path(), ec);
    static std::atomic<int> counter{0};
    const fs::path tmp =
        path_.string() + fmt::format(".tmp.{}.{}", ::getpid(), counter++);
    if (!fs::copy_file(lib, tmp, ec)) {
      fs::remove(tmp, ec);
      return;
    }
    fs::rename(tmp, path_, ec);
    if (ec)
      fs::remove(tmp, ec);
    prune();
  }

private:
  static bool enabled() {
    const char *v = std::getenv("LCEJIT_EMU_CACHE");
    return !(v && std::string(v) == "0");
  }
  void prune() const {
    constexpr size_t kMax = 2000, kKeep = 1500;
    std::error_code ec;
    std::vector<std::pair<fs::file_time_type, fs::path>> entries;
    for (const auto &e : fs::directory_iterator(path_.parent_path(), ec))
      entries.emplace_back(fs::last_write_time(e.path(), ec), e.path());
    if (entries.size() <= kMax)
      return;
    std::sort(entries.begin(), entries.end());
    for (size_t i = 0; i + kKeep < entries.size(); ++i)
      fs::remove(entries[i].second, ec);
  }

  bool enabled_;
  fs::path path_;
};

} // namespace

HostLibrary::HostLibrary(const std::string &label, const std::string &source,
                         const std::vector<std::string> &defines) {
  static std::atomic<int> counter{0};
  dir_ = (fs::temp_directory_path() /
          fmt::format("lcejit-emu-{}-{}-{}", ::getpid(), label, counter++))
             .string();
  fs::create_directories(dir_);
  const std::string src = dir_ + "/module.cpp", lib = dir_ + "/module.so";
  {
    std::ofstream out(src);
    out << source;
  }
  std::string flags;
  for (const std::string &d : defines)
    flags += " -D" + d;
  const bool sm90 = std::find(defines.begin(), defines.end(), "LCEJIT_EMU_SM90") != defines.end();
  const std::string pch = emulationPchDir(sm90);
  const std::string compiler =
      fmt::format("{} {}{} -I{} -I{} -shared", LCEJIT_TEST_HOST_CXX, LCEJIT_TEST_EMU_FLAGS,
                  flags, LCEJIT_TEST_EMU_DIR, LCEJIT_TEST_CUDA_INCLUDE);
  const ModuleCache cache(compiler + '\0' + source);
  if (cache.fetch(lib)) {
    open(lib);
    return;
  }
  // The precompiled header changes only how fast it compiles, so it is not in the key.
  const std::string cmd =
      fmt::format("{} {}{}{} -I{} -I{} -shared {} -o {} > {}/compile.log 2>&1",
                  LCEJIT_TEST_HOST_CXX, LCEJIT_TEST_EMU_FLAGS, flags,
                  pch.empty() ? "" : " -I" + pch, LCEJIT_TEST_EMU_DIR,
                  LCEJIT_TEST_CUDA_INCLUDE, src, lib, dir_);
  ++compiles_;
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir_ + "/compile.log");
    std::string text((std::istreambuf_iterator<char>(log)), {});
    throw std::runtime_error("host compile of the generated module failed: " +
                             cmd + "\n" + text.substr(0, 4000));
  }
  cache.store(lib);
  open(lib);
}

void HostLibrary::open(const std::string &lib) {
  handle_ = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_)
    throw std::runtime_error(std::string("dlopen: ") + ::dlerror());
}

std::atomic<int> HostLibrary::compiles_{0};

HostLibrary::~HostLibrary() {
  if (handle_)
    ::dlclose(handle_);
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void *HostLibrary::symbol(const std::string &name) const {
  void *f = ::dlsym(handle_, name.c_str());
  if (!f)
    throw std::runtime_error("no symbol " + name + " in the emulated module");
  return f;
}

HostModule::HostModule(const plan::Program &program) : program_(program) {
  sm90_ = usesSm90(program);
  library_ = std::make_unique<HostLibrary>(
      program.name, "#include \"lcejit_emu.h\"\n" + codegen::emitCuda(program).source + "\n" +
                        trampolines(program),
      sm90_ ? std::vector<std::string>{"LCEJIT_EMU_SM90"} : std::vector<std::string>{});
  for (const plan::Kernel &k : program.kernels)
    launchers_.push_back(
        reinterpret_cast<LaunchFn>(library_->symbol("emu_launch_" + k.name)));
  setMode_ = reinterpret_cast<void (*)(int)>(library_->symbol("emu_set_async_mode"));
}

HostModule::~HostModule() = default;

void HostModule::setLateAsyncCopies(bool late) { setMode_(late ? 1 : 0); }

std::array<unsigned char, 128> emulatedSm90Map(const HostLibrary &lib,
                                               const runtime::Sm90Operand &op) {
  using EncodeFn = void (*)(void *, const void *, unsigned, const unsigned long long *,
                            const unsigned long long *, const unsigned *, unsigned, unsigned);
  const auto encode = reinterpret_cast<EncodeFn>(lib.symbol("lcejit_emu_sm90_encode"));
  std::array<unsigned char, 128> bytes{};
  using U64 = unsigned long long;
  const void *data = reinterpret_cast<const void *>(static_cast<uintptr_t>(op.data));
  const U64 rows = static_cast<U64>(std::max<int64_t>(op.rows, 1));
  const U64 k = static_cast<U64>(std::max<int64_t>(op.k, 1));
  if (op.f32Out) {
    const U64 dims[2] = {k, rows};
    const U64 strides[1] = {static_cast<U64>(op.ld) * 4};
    const unsigned box[2] = {32, 64};
    encode(bytes.data(), data, 2, dims, strides, box, 4, 128);
  } else if (op.slabs > 0) {
    const U64 slabRows = static_cast<U64>(std::max<int64_t>(op.kMajor ? op.rows : op.k, 1));
    const U64 dims[3] = {128, slabRows, static_cast<U64>(op.slabs)};
    const U64 strides[2] = {256, static_cast<U64>(op.slabStride) * 2};
    const unsigned box[3] = {64, op.kMajor ? static_cast<unsigned>(op.boxRows) : 64u, 1};
    encode(bytes.data(), data, 3, dims, strides, box, 2, 128);
  } else {
    const U64 dims[2] = {op.kMajor ? k : rows, op.kMajor ? rows : k};
    const U64 strides[1] = {static_cast<U64>(op.ld) * 2};
    const unsigned box[2] = {64, op.kMajor ? static_cast<unsigned>(op.boxRows) : 64u};
    encode(bytes.data(), data, 2, dims, strides, box, 2, 128);
  }
  return bytes;
}

void HostModule::launch(runtime::LaunchRecord &rec, int block, long long gridX, int smem) {
  std::vector<std::array<unsigned char, 128>> maps;
  for (const runtime::Sm90Operand &op : rec.maps)
    maps.push_back(emulatedSm90Map(*library_, op));
  std::vector<void *> args;
  for (runtime::KernelArg &a : rec.args)
    args.push_back(a.type == runtime::KernelArg::Type::TensorMap
                       ? static_cast<void *>(maps.at(static_cast<size_t>(a.value.i64)).data())
                       : a.address());
  long long grid[3] = {gridX, rec.dims.grid[1], rec.dims.grid[2]};
  launchers_[static_cast<size_t>(rec.kernel)](args.data(), grid, block, smem, rec.dims.cluster,
                                              rec.dims.cooperative ? 1 : 0);
}

void HostModule::run(const runtime::ProgramBuffers &buffers, int64_t n, bool outputFree,
                     const std::function<void(runtime::LaunchRecord &)> &edit) {
  runtime::ExecutionPlan plan =
      runtime::planExecution(program_, buffers, program_.runSchedule(n, outputFree));
  for (const runtime::MemsetRecord &m : plan.memsets)
    std::memset(reinterpret_cast<void *>(m.pointer), 0,
                static_cast<size_t>(m.bytes));
  for (runtime::LaunchRecord &rec : plan.launches) {
    if (edit)
      edit(rec);
    launch(rec, rec.dims.block, rec.dims.grid[0], rec.dims.sharedBytes);
  }
}

void HostModule::launchWith(const runtime::LaunchRecord &rec, int block, long long gridX,
                            int smem) {
  runtime::LaunchRecord copy = rec;
  launch(copy, block, gridX, smem);
}

} // namespace lcejit::testing
