//===- HostEmulation.cpp - Run a generated module on the host (tests only)
//-===//

#include "HostEmulation.h"

#include "compiler/codegen/CodeWriter.h"
#include "compiler/codegen/Emitter.h"
#include "lcejit/Error.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace lcejit::testing {

namespace fs = std::filesystem;

namespace {

std::string trampolines(const plan::Program &program) {
  codegen::CodeWriter w;
  w.comment("Host launchers (tests/unit/codegen/HostEmulation.cpp).");
  w.line("namespace lcejit {{ alignas(16) unsigned char "
         "lcejit_dynamic_smem[{}]; }}",
         program.target.maxSharedPerBlock);
  w.line("extern \"C\" void emu_set_async_mode(int late) {{");
  w.line("  lcejit_emu::async_mode = late ? lcejit_emu::AsyncMode::Late : "
         "lcejit_emu::AsyncMode::Early;");
  w.line("}}");
  for (const plan::Kernel &k : program.kernels) {
    std::vector<std::string> args;
    std::vector<plan::Param> params = plan::kernelParams(k);
    for (size_t i = 0; i < params.size(); ++i) {
      switch (params[i].kind) {
      case plan::Param::Kind::Pointer:
        args.push_back(
            fmt::format("reinterpret_cast<void *>(*static_cast<unsigned long "
                        "long *>(args[{}]))",
                        i));
        break;
      case plan::Param::Kind::Splits:
        args.push_back(fmt::format("*static_cast<int *>(args[{}])", i));
        break;
      default:
        args.push_back(fmt::format("*static_cast<long long *>(args[{}])", i));
      }
    }
    auto b = w.block(fmt::format(
        "extern \"C\" void emu_launch_{}(void **args, const long long "
        "*grid, int block, int smem)",
        k.name));
    w.line("lcejit_emu::shared_base = lcejit::lcejit_dynamic_smem;");
    w.line("lcejit_emu::launch(grid, block, smem, [&] {{ {}({}); }});", k.name,
           fmt::join(args, ", "));
  }
  return w.take();
}

} // namespace

HostModule::HostModule(const plan::Program &program) : program_(program) {
  static int counter = 0;
  dir_ =
      (fs::temp_directory_path() /
       fmt::format("lcejit-emu-{}-{}-{}", ::getpid(), program.name, counter++))
          .string();
  fs::create_directories(dir_);
  const std::string src = dir_ + "/module.cpp", lib = dir_ + "/module.so";
  {
    std::ofstream out(src);
    out << "#include \"lcejit_emu.h\"\n"
        << codegen::emitCuda(program).source << "\n"
        << trampolines(program);
  }
  const std::string cmd =
      fmt::format("{} -std=c++17 -O1 -fPIC -shared -w -DLCEJIT_HOST_EMULATION "
                  "-I{} -I{} {} -o {} "
                  "-lpthread > {}/compile.log 2>&1",
                  LCEJIT_TEST_HOST_CXX, LCEJIT_TEST_EMU_DIR,
                  LCEJIT_TEST_CUDA_INCLUDE, src, lib, dir_);
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir_ + "/compile.log");
    std::string text((std::istreambuf_iterator<char>(log)), {});
    throw std::runtime_error("host compile of the generated module failed: " +
                             cmd + "\n" + text.substr(0, 4000));
  }
  handle_ = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_)
    throw std::runtime_error(std::string("dlopen: ") + ::dlerror());
  for (const plan::Kernel &k : program.kernels) {
    void *f = ::dlsym(handle_, ("emu_launch_" + k.name).c_str());
    if (!f)
      throw std::runtime_error("no launcher for " + k.name);
    launchers_.push_back(reinterpret_cast<LaunchFn>(f));
  }
  setMode_ =
      reinterpret_cast<void (*)(int)>(::dlsym(handle_, "emu_set_async_mode"));
}

HostModule::~HostModule() {
  if (handle_)
    ::dlclose(handle_);
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void HostModule::setLateAsyncCopies(bool late) { setMode_(late ? 1 : 0); }

void HostModule::run(const runtime::ProgramBuffers &buffers, int64_t n) {
  runtime::ExecutionPlan plan = runtime::planExecution(program_, buffers, n);
  for (const runtime::MemsetRecord &m : plan.memsets)
    std::memset(reinterpret_cast<void *>(m.pointer), 0,
                static_cast<size_t>(m.bytes));
  for (runtime::LaunchRecord &rec : plan.launches) {
    std::vector<void *> args;
    for (runtime::KernelArg &a : rec.args)
      args.push_back(a.address());
    long long grid[3] = {rec.dims.grid[0], rec.dims.grid[1], rec.dims.grid[2]};
    launchers_[static_cast<size_t>(rec.kernel)](
        args.data(), grid, rec.dims.block, rec.dims.sharedBytes);
  }
}

void HostModule::launchWith(const runtime::LaunchRecord &rec, int block, long long gridX,
                            int smem) {
  std::vector<void *> args;
  std::vector<runtime::KernelArg> copy = rec.args;
  for (runtime::KernelArg &a : copy)
    args.push_back(a.address());
  long long grid[3] = {gridX, rec.dims.grid[1], rec.dims.grid[2]};
  launchers_[static_cast<size_t>(rec.kernel)](args.data(), grid, block, smem);
}

} // namespace lcejit::testing
