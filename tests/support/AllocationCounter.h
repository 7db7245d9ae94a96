//===- AllocationCounter.h - Counts a thread's heap allocations (tests) ----===//
//
// For the tests that prove a call allocates nothing ([Note: the warm path] in
// ops/lib/LinearCrossEntropy.cpp): AllocationCounter.cpp replaces the global operator
// new/delete of the test binary it is linked into (one per binary: lcejit-warm-path-tests
// and lcejit-gpu-tests) and counts the calling thread's allocations while asked to; it
// only counts.
//
//===----------------------------------------------------------------------===//
#pragma once

namespace lcejit::testsupport {

/// Starts counting this thread's operator new calls from zero.
void beginCountingAllocations();
/// Stops counting; returns the count since beginCountingAllocations().
long endCountingAllocations();

/// The allocations `f` makes on this thread (an exception stops the count and passes).
template <typename F> long allocationsOf(F &&f) {
  beginCountingAllocations();
  try {
    f();
  } catch (...) {
    endCountingAllocations();
    throw;
  }
  return endCountingAllocations();
}

} // namespace lcejit::testsupport
