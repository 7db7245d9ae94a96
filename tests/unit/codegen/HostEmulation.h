//===- HostEmulation.h - Run a generated module on the host (tests only)
//---===//
//
// See [Note: host emulation] in emu/lcejit_emu.h. HostModule compiles
// emitCuda(program) as host C++ into a shared library (the system C++ compiler,
// -DLCEJIT_HOST_EMULATION), loads it, and runs the Program's steps with
// runtime::planExecution(), the same launch list the real executor uses
// (buffers are host pointers).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"
#include "runtime/Executor.h"

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lcejit::testing {

/// `source` (which includes "lcejit_emu.h" first) built by the system C++ compiler as a
/// shared library with -DLCEJIT_HOST_EMULATION and `defines`, and loaded; its directory is
/// removed with it. Throws with the compiler's log when the build fails.
class HostLibrary {
public:
  HostLibrary(const std::string &label, const std::string &source,
              const std::vector<std::string> &defines = {});
  ~HostLibrary();
  HostLibrary(const HostLibrary &) = delete;
  HostLibrary &operator=(const HostLibrary &) = delete;
  /// The address of an extern "C" symbol; throws when it is missing.
  void *symbol(const std::string &name) const;
  /// Host compiles this process has run (the others came from the module cache).
  static int compiles() { return compiles_.load(); }

private:
  void open(const std::string &lib);
  static std::atomic<int> compiles_;
  std::string dir_;
  void *handle_ = nullptr;
};

/// [Note: sm90 host emulation] The emulated tensor map of `op`, as runtime/TensorMap.cpp's
/// encodeSm90Operand builds the driver's (the same dims, strides and boxes; bf16, or f32 for
/// the output map; the 128-byte swizzle; out-of-bounds elements read as zero), encoded by
/// `lib`, a library built with LCEJIT_EMU_SM90.
std::array<unsigned char, 128> emulatedSm90Map(const HostLibrary &lib,
                                               const runtime::Sm90Operand &op);

class HostModule {
public:
  explicit HostModule(const plan::Program &program);
  ~HostModule();
  HostModule(const HostModule &) = delete;
  HostModule &operator=(const HostModule &) = delete;

  /// cp.async copies land when waited for (true) or when issued (false).
  void setLateAsyncCopies(bool late);
  /// Runs every step for N rows, like runtime::Executor::run (memsets, then the launches in
  /// order; a WgmmaBF16 GEMM's operands as emulated tensor maps).
  /// `outputFree`: the call overwrites its outputs, so the schedule may keep its stored
  /// values in dW's memory ([Note: stored values in dW]), as the op's prepared runs do.
  /// `edit`, when given, may change each launch record before it runs (tests of launches
  /// outside the host's contract).
  void run(const runtime::ProgramBuffers &buffers, int64_t n, bool outputFree = false,
           const std::function<void(runtime::LaunchRecord &)> &edit = {});
  /// One launch of a planned run with its geometry changed (launch-contract tests): block
  /// threads, grid x and dynamic shared bytes instead of the record's.
  void launchWith(const runtime::LaunchRecord &rec, int block, long long gridX, int smem);

  /// Whether the Program runs WgmmaBF16 GEMMs, under [Note: sm90 host emulation].
  bool sm90() const { return sm90_; }

private:
  using LaunchFn = void (*)(void **args, const long long *grid, int block, int smem,
                            int cluster, int cooperative);
  /// One launch of `rec` with that geometry; tensor-map arguments get emulated maps.
  void launch(runtime::LaunchRecord &rec, int block, long long gridX, int smem);
  plan::Program program_;
  bool sm90_ = false;
  std::unique_ptr<HostLibrary> library_;
  std::vector<LaunchFn> launchers_;
  void (*setMode_)(int) = nullptr;
};

} // namespace lcejit::testing
