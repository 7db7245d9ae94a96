//===- RefMath.h - fp64 helpers shared by the two reference interpreters ---===//
#pragma once

#include <cmath>
#include <limits>

namespace lcejit::ref {

/// NaN-propagating maximum / minimum (tx.max, arith.maximumf, ScalarOp::Max).
inline double maxNaN(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<double>::quiet_NaN();
  return a >= b ? a : b;
}
inline double minNaN(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<double>::quiet_NaN();
  return a <= b ? a : b;
}

/// Neumaier-compensated sum: the references should not lose digits to summation order.
class Sum {
public:
  void add(double x) {
    double t = s_ + x;
    if (std::isfinite(t))
      c_ += std::fabs(s_) >= std::fabs(x) ? (s_ - t) + x : (x - t) + s_;
    s_ = t;
  }
  double value() const { return std::isfinite(s_) ? s_ + c_ : s_; }

private:
  double s_ = 0.0, c_ = 0.0;
};

} // namespace lcejit::ref
