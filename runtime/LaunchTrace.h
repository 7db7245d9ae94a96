//===- LaunchTrace.h - GPU time of each launch, back to back ----------------===//
//
// [Note: launch trace] A diagnostic for the question ncu cannot answer: ncu replays one
// kernel at a time with the GPU idle in between (cooler, faster clocks), so its per-kernel
// times add up to less than a call that runs them back to back at the card's power cap.
// While the trace is on, Executor::launch records a CUDA event on the launch's stream just
// before and just after every kernel launch; takeLaunchTrace() waits for them and returns,
// per launch in launch order, the GPU time between its two events (the kernel, as it ran
// in the sequence) and the time since the previous traced launch's end event (the idle
// gap the host or a dependency left). Two event records per launch cost a few
// microseconds of GPU time each; the trace is for lcejit-bench --trace and tests, not for
// production, and not for a stream being captured into a CUDA graph (off by default).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/CudaDriver.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lcejit::runtime {

struct LaunchTraceEntry {
  std::string kernel;   ///< the kernel's name in its Program
  int64_t rowBlock = 0; ///< as in the launch list (Program::expand)
  int64_t chunk = 0;
  double ms = 0;    ///< between the events around the launch
  double gapMs = 0; ///< since the previous entry's end event (0 for the first)
};

/// Process-wide switch (default off).
void setLaunchTrace(bool on);
bool launchTraceOn();

/// Executor::launch: an event recorded on `stream` (the trace owns it).
CUevent traceEvent(CUstream stream);
/// Executor::launch: one launch's events, in launch order.
void traceLaunch(std::string kernel, int64_t rowBlock, int64_t chunk, CUevent before,
                 CUevent after);

/// Waits for the recorded events, returns the entries in launch order and clears the
/// trace (its events are destroyed).
std::vector<LaunchTraceEntry> takeLaunchTrace();

} // namespace lcejit::runtime
