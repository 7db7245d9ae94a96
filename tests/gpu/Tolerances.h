//===- Tolerances.h - Every numeric tolerance of the GPU suite, in one place ===//
//
// Relative-norm errors ||x − ref|| / ||ref|| against the fp64 reference computed from
// the same (upcast) inputs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit/DType.h"

#include <cmath>

namespace lcejit::gputest {

/// The loss (f32 accumulation of f32 row losses), on random, peaked (row losses ~1e-4:
/// formed as (m − z_y) + log1p(t), see [Note: lse minus a logit] in Planner.cpp) and
/// saturating-softcap logits.
inline constexpr double kLossTolerance = 2e-6;

/// Exact precision (dZ as bf16 hi + lo): a gradient written as f32.
inline constexpr double kExactF32GradTolerance = 1e-4;

/// Fast precision (dZ one bf16 operand): a gradient written as f32 may be off by at most
/// this many times the error of rounding the fp64 reference to bf16.
inline constexpr double kFastF32GradFloorFactor = 1.2;

/// A gradient written as bf16 or f16 may be off by at most this many times the error of
/// simply rounding the fp64 reference to that type (the floor, ~1.1e-3 for bf16).
inline constexpr double kRoundedGradFloorFactor = 1.5;

/// Per element: max |x_i − ref_i| may be at most this many bf16 ulps of max |ref_i| (an
/// output rounded once is off by half an ulp of its own magnitude or less; dZ rounding
/// adds about as much again). A dropped correction term breaks this at once.
inline constexpr double kMaxBf16UlpsOfLargest = 2.0;

/// The fp64 GPU reference against the fp64 CPU interpreter (both fp64; summation order
/// differs).
inline constexpr double kReferenceAgreement = 1e-10;

/// Relative-norm tolerance for an output of dtype `t` (floors from GpuSupport's compare).
inline double gradTolerance(DType t, bool exact, double floor, double bf16Floor) {
  if (t != DType::F32)
    return kRoundedGradFloorFactor * floor;
  return exact ? kExactF32GradTolerance : kFastF32GradFloorFactor * bf16Floor;
}

/// The bf16 ulp of x (> 0): 2^(floor(log2 x) − 7).
inline double bf16Ulp(double x) { return x > 0 ? std::ldexp(1.0, std::ilogb(x) - 7) : 0.0; }

} // namespace lcejit::gputest
