//===- RefTensor.h - Host tensors of the fp64 reference interpreters ------===//
//
// The plain tensor type shared by the two CPU oracles (no MLIR here):
//  - TxInterpreter (TxInterpreter.h) runs a tx function, before or after fusion;
//  - ProgramInterpreter (ProgramInterpreter.h) runs a planned plan::Program.
//
// Values are fp64 whatever the dtype: the reference computes the ideal math, so a float
// value is never rounded to its dtype (the dtype says what the value stands for and is
// checked against the function / Program signature). Integer and i1 values are stored as
// doubles holding exact integers (i1 as 0 or 1). Layout is dense row-major.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit/DType.h"

#include <algorithm>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace lcejit::ref {

struct RefTensor {
  std::vector<int64_t> shape; ///< static sizes (no -1 here: N is concrete)
  std::vector<double> data;   ///< row-major, numel() values
  DType dtype = DType::F32;

  RefTensor() = default;
  RefTensor(std::vector<int64_t> s, DType t, double fill = 0.0)
      : shape(std::move(s)), data(static_cast<size_t>(numelOf(shape)), fill), dtype(t) {}

  static int64_t numelOf(const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  int64_t numel() const { return numelOf(shape); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }

  /// Element at a 2-D index (row-major); rank must be 2.
  double &at(int64_t i, int64_t j) { return data[static_cast<size_t>(i * shape[1] + j)]; }
  double at(int64_t i, int64_t j) const { return data[static_cast<size_t>(i * shape[1] + j)]; }

  /// A rank-0 tensor.
  static RefTensor scalar(double v, DType t = DType::F32) {
    RefTensor r({}, t);
    r.data[0] = v;
    return r;
  }
};

/// "[7, 13]" (for error messages).
inline std::string shapeStr(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// "f32 [7, 13]" (for error messages).
inline std::string describe(const RefTensor &t) {
  return std::string(dtypeName(t.dtype)) + " " + shapeStr(t.shape);
}

/// Rounds `x` to a binary floating-point format with `precision` significand bits
/// (implicit bit included), minimum normal exponent `emin` and largest finite value
/// `maxFinite`: round to nearest even, subnormals kept, overflow to infinity.
inline double roundToFormat(double x, int precision, int emin, double maxFinite) {
  if (!std::isfinite(x) || x == 0.0)
    return x;
  int e = 0;
  (void)std::frexp(x, &e); // |x| = f * 2^e, f in [0.5, 1): leading bit at 2^(e-1)
  int lead = std::max(e - 1, emin);
  double quantum = std::ldexp(1.0, lead - (precision - 1));
  double r = std::nearbyint(x / quantum) * quantum; // exact scaling; nearbyint is RNE
  if (std::fabs(r) > maxFinite)
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

/// Converts an fp64 value to the nearest value of `t`: bf16, f16 and f32 round to
/// nearest even (overflow to infinity, subnormals kept), f64 is exact; integer types
/// truncate toward zero and wrap to their width (NaN gives 0); i1 is `x != 0`.
inline double roundToDType(double x, DType t) {
  switch (t) {
  case DType::BF16: return roundToFormat(x, 8, -126, 0x1.fep127);
  case DType::F16: return roundToFormat(x, 11, -14, 65504.0);
  case DType::F32: return roundToFormat(x, 24, -126, 0x1.fffffep127);
  case DType::F64: return x;
  case DType::I1: return x != 0.0 ? 1.0 : 0.0;
  case DType::I32:
  case DType::I64: {
    if (std::isnan(x))
      return 0.0;
    double tr = std::trunc(x);
    // Out-of-range values saturate before wrapping (the C++ cast would be undefined).
    if (tr >= 0x1p63)
      tr = 0x1p63 - 1024.0;
    if (tr < -0x1p63)
      tr = -0x1p63;
    int64_t v = static_cast<int64_t>(tr);
    if (t == DType::I32)
      v = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
    return static_cast<double>(v);
  }
  }
  return x;
}

} // namespace lcejit::ref
