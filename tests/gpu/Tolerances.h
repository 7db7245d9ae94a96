//===- Tolerances.h - Every numeric tolerance of the GPU suite, in one place ===//
//
// Relative-norm errors ||x − ref|| / ||ref|| against the fp64 reference computed from
// the same (upcast) inputs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit/DType.h"

namespace lcejit::gputest {

/// The loss (f32 accumulation of f32 row losses).
inline constexpr double kLossTolerance = 1e-5;

/// A gradient written as f32: f32 arithmetic for f32 inputs; for bf16 inputs the split
/// (hi + lo) bf16 dZ keeps about 16 bits, well under this.
inline constexpr double kF32GradTolerance = 1e-4;

/// A gradient written as bf16 or f16 may be off by at most this many times the error of
/// simply rounding the fp64 reference to that type (the floor, ~1.6e-3 for bf16).
inline constexpr double kRoundedGradFloorFactor = 2.0;

/// The fp64 GPU reference against the fp64 CPU interpreter (both fp64; summation order
/// differs).
inline constexpr double kReferenceAgreement = 1e-10;

/// Tolerance for an output of dtype `t` given its rounding floor.
inline double gradTolerance(DType t, double floor) {
  return t == DType::F32 ? kF32GradTolerance : kRoundedGradFloorFactor * floor;
}

} // namespace lcejit::gputest
