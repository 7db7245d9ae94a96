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

#include <string>
#include <vector>

namespace lcejit::testing {

class HostModule {
public:
  explicit HostModule(const plan::Program &program);
  ~HostModule();
  HostModule(const HostModule &) = delete;
  HostModule &operator=(const HostModule &) = delete;

  /// cp.async copies land when waited for (true) or when issued (false).
  void setLateAsyncCopies(bool late);
  /// Runs every step for N rows, like runtime::Executor::run.
  void run(const runtime::ProgramBuffers &buffers, int64_t n);
  /// One launch of a planned run with its geometry changed (launch-contract tests): block
  /// threads, grid x and dynamic shared bytes instead of the record's.
  void launchWith(const runtime::LaunchRecord &rec, int block, long long gridX, int smem);

private:
  using LaunchFn = void (*)(void **args, const long long *grid, int block,
                            int smem);
  plan::Program program_;
  std::string dir_;
  void *handle_ = nullptr;
  std::vector<LaunchFn> launchers_;
  void (*setMode_)(int) = nullptr;
};

} // namespace lcejit::testing
