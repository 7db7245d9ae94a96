//===- LaunchTrace.cpp - GPU time of each launch, back to back --------------===//
//
// See [Note: launch trace] in LaunchTrace.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/LaunchTrace.h"

#include "compiler/support/Check.h"

#include <atomic>
#include <mutex>

namespace lcejit::runtime {
namespace {

struct Pending {
  std::string kernel;
  int64_t rowBlock = 0, chunk = 0;
  CUevent before = nullptr, after = nullptr;
};

std::atomic<bool> gOn{false};
std::mutex gMutex;
std::vector<Pending> gPending;

} // namespace

void setLaunchTrace(bool on) { gOn.store(on, std::memory_order_relaxed); }

bool launchTraceOn() { return gOn.load(std::memory_order_relaxed); }

CUevent traceEvent(CUstream stream) {
  const CudaDriver &d = cudaDriver();
  CUevent e = nullptr;
  LCEJIT_CU(d.eventCreate(&e, 0));
  LCEJIT_CU(d.eventRecord(e, stream));
  return e;
}

void traceLaunch(std::string kernel, int64_t rowBlock, int64_t chunk, CUevent before,
                 CUevent after) {
  std::lock_guard<std::mutex> lock(gMutex);
  gPending.push_back(Pending{std::move(kernel), rowBlock, chunk, before, after});
}

std::vector<LaunchTraceEntry> takeLaunchTrace() {
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    pending.swap(gPending);
  }
  std::vector<LaunchTraceEntry> out;
  if (pending.empty())
    return out;
  const CudaDriver &d = cudaDriver();
  out.reserve(pending.size());
  for (size_t i = 0; i < pending.size(); ++i) {
    const Pending &p = pending[i];
    LCEJIT_CU(d.eventSynchronize(p.after));
    float ms = 0, gap = 0;
    LCEJIT_CU(d.eventElapsedTime(&ms, p.before, p.after));
    if (i > 0)
      LCEJIT_CU(d.eventElapsedTime(&gap, pending[i - 1].after, p.before));
    out.push_back(LaunchTraceEntry{p.kernel, p.rowBlock, p.chunk, ms, gap});
  }
  for (const Pending &p : pending) {
    d.eventDestroy(p.before);
    d.eventDestroy(p.after);
  }
  return out;
}

} // namespace lcejit::runtime
