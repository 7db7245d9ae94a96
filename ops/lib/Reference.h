//===- Reference.h - The CPU oracles behind runReference and the tests -----===//
//
// Two fp64 references for the linear cross entropy (internal):
//  - runGraphReference: the differentiated, UNFUSED graph on the tx interpreter. This is
//    the oracle every numeric check compares against (at small shapes).
//  - runProgramReference: the PLANNED Program (fused epilogues, splits, chunk loop) on
//    the Program interpreter. It agrees with the graph reference to rounding, which
//    checks the fuser and the planner without a GPU.
// Both take inputs already representable in the options' dtype and return fp64 values.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit/LinearCrossEntropy.h"
#include "ops/lib/LceJit.h"

#include <vector>

namespace lcejit::ops {

ReferenceResult runGraphReference(const LinearCrossEntropyOptions &options,
                                  const std::vector<double> &hidden,
                                  const std::vector<double> &weight,
                                  const std::vector<int64_t> &targets);

/// What a call accumulates into (Accumulate, β = 1): the values dH / dW hold before the
/// call (N·D / V·D, representable in their dtypes), or null for a gradient that is written.
struct AccumulateInto {
  const std::vector<double> *gradHidden = nullptr;
  const std::vector<double> *gradWeight = nullptr;
};

/// Throws Error(DeviceCheck) for a bad target, like the GPU path.
/// `gradScale` feeds the grad_scale input of a scaled-gradients Program (ignored otherwise).
/// With `accumulate`, the returned gradients are the old values plus the call's, as the
/// Program computes them with the accumulate mask (the device's outputs 1 and 2).
/// `roundOutputs`: round the outputs to their dtypes (the device's output rounding).
ReferenceResult runProgramReference(LceJit &jit, const std::vector<double> &hidden,
                                    const std::vector<double> &weight,
                                    const std::vector<int64_t> &targets,
                                    double gradScale = 1.0, const AccumulateInto &accumulate = {},
                                    bool roundOutputs = false);

} // namespace lcejit::ops
