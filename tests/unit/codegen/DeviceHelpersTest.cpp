//===- DeviceHelpersTest.cpp - runtime/device helpers, run on the host
//-----===//
//
// The scalar helpers of the device headers compiled as host code through the
// emulation shim ([Note: host emulation]): the logsumexp partial and its edge
// cases ([Note: lse]), NaN-propagating max/min, split combination, element
// conversions.
//
//===----------------------------------------------------------------------===//

#include "lcejit_emu.h" // before the device headers: CUDA qualifiers as plain C++

#include "runtime/device/lcejit_reduce.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace {

const float kInf = std::numeric_limits<float>::infinity();

float lseOf(const std::vector<float> &xs) {
  float m, t;
  lcejit::lse_init(m, t);
  for (float x : xs)
    lcejit::lse_add(m, t, x);
  return lcejit::lse_value(m, t);
}

double lseRef(const std::vector<float> &xs) {
  double m = -INFINITY;
  for (float x : xs)
    m = std::max<double>(m, x);
  double s = 0;
  for (float x : xs)
    s += std::exp(double(x) - m);
  return m + std::log(s);
}

} // namespace

TEST(DeviceHelpers, LogSumExpMatchesReference) {
  std::vector<float> xs = {1.f, -3.f, 7.5f, 7.5f, 0.25f, -100.f, 30.f, 29.f};
  EXPECT_NEAR(lseOf(xs), lseRef(xs), 1e-5);
  // Order and grouping do not matter (up to rounding): combine two halves.
  float m1, t1, m2, t2;
  lcejit::lse_init(m1, t1);
  lcejit::lse_init(m2, t2);
  for (size_t i = 0; i < xs.size(); ++i)
    lcejit::lse_add(i % 2 ? m1 : m2, i % 2 ? t1 : t2, xs[i]);
  lcejit::lse_combine(m1, t1, m2, t2);
  EXPECT_NEAR(lcejit::lse_value(m1, t1), lseRef(xs), 1e-5);
}

TEST(DeviceHelpers, LogSumExpKeepsPrecisionWhenPeaked) {
  // One dominant element: lse = 50 + log1p(exp(-40)); t carries exp(-40)
  // exactly enough.
  float m, t;
  lcejit::lse_init(m, t);
  lcejit::lse_add(m, t, 10.f);
  lcejit::lse_add(m, t, 50.f);
  EXPECT_EQ(m, 50.f);
  EXPECT_NEAR(t, std::exp(-40.0), 1e-24);
}

TEST(DeviceHelpers, LogSumExpEdgeCases) {
  float m, t, em, et;
  lcejit::lse_init(em, et);
  EXPECT_EQ(em, -kInf);
  EXPECT_EQ(et, -1.f);
  // empty (+) empty = empty, value -inf.
  m = em, t = et;
  lcejit::lse_combine(m, t, em, et);
  EXPECT_EQ(m, -kInf);
  EXPECT_EQ(t, -1.f);
  EXPECT_EQ(lcejit::lse_value(m, t), -kInf);
  // empty (+) x = x, both orders.
  m = em, t = et;
  lcejit::lse_combine(m, t, 3.f, 0.5f);
  EXPECT_EQ(m, 3.f);
  EXPECT_EQ(t, 0.5f);
  m = 3.f, t = 0.5f;
  lcejit::lse_combine(m, t, em, et);
  EXPECT_EQ(m, 3.f);
  EXPECT_EQ(t, 0.5f);
  // Adding -inf elements keeps a partial empty; all -inf: value -inf, not NaN.
  m = em, t = et;
  lcejit::lse_add(m, t, -kInf);
  EXPECT_EQ(m, -kInf);
  EXPECT_EQ(t, -1.f);
  EXPECT_EQ(lseOf({-kInf, -kInf}), -kInf);
  EXPECT_EQ(lseOf({-kInf, 2.f}), 2.f);
  // One +inf wins: value +inf. A second +inf: exp(inf - inf) = NaN, as the fp64
  // oracle (compiler/reference/ProgramInterpreter) says, following IEEE through
  // the formula.
  EXPECT_EQ(lseOf({1.f, kInf, 2.f}), kInf);
  EXPECT_TRUE(std::isnan(lseOf({kInf, kInf})));
  EXPECT_TRUE(std::isnan(lseOf({kInf, 1.f, kInf})));
  // NaN anywhere: NaN.
  EXPECT_TRUE(std::isnan(lseOf({1.f, NAN, 2.f})));
  EXPECT_TRUE(std::isnan(lseOf({NAN})));
  EXPECT_TRUE(std::isnan(lseOf({kInf, NAN})));
  EXPECT_TRUE(std::isnan(lseOf({NAN, -kInf})));
}

namespace {

/// lse_of_values over the NV values of xs, as a value.
template <int NV> float lseTwoPass(const std::vector<float> &xs) {
  float m, t;
  lcejit::lse_of_values<NV>(m, t, [&](int k) { return xs[k]; });
  return lcejit::lse_value(m, t);
}

} // namespace

// [Note: sm90 reduce by fragments]: the two-pass fragment logsumexp and the
// branch-free merge give what lse_add and lse_combine give, edge cases included.
TEST(DeviceHelpers, TwoPassLogSumExpMatchesElementByElement) {
  const std::vector<float> xs = {1.f, -3.f, 7.5f, 7.5f, 0.25f, -100.f, 30.f, 29.f};
  EXPECT_NEAR(lseTwoPass<8>(xs), lseRef(xs), 1e-5);
  // Peaked: t keeps exp(-40) (the max is left out of the sum).
  float m, t;
  const std::vector<float> peaked = {10.f, 50.f};
  lcejit::lse_of_values<2>(m, t, [&](int k) { return peaked[k]; });
  EXPECT_EQ(m, 50.f);
  EXPECT_NEAR(t, std::exp(-40.0), 1e-24);
  // Ties at the max count 1 each: lse of {2, 2, 2} = 2 + log 3.
  EXPECT_NEAR(lseTwoPass<3>({2.f, 2.f, 2.f}), 2.0 + std::log(3.0), 1e-6);
  // The edge cases of LogSumExpEdgeCases, the same answers.
  lcejit::lse_of_values<2>(m, t, [](int) { return -kInf; });
  EXPECT_EQ(m, -kInf); // an empty partial: lse_merge skips it
  EXPECT_EQ(lseTwoPass<2>({-kInf, 2.f}), 2.f);
  EXPECT_EQ(lseTwoPass<3>({1.f, kInf, 2.f}), kInf);
  EXPECT_TRUE(std::isnan(lseTwoPass<2>({kInf, kInf})));
  EXPECT_TRUE(std::isnan(lseTwoPass<3>({kInf, 1.f, kInf})));
  EXPECT_TRUE(std::isnan(lseTwoPass<3>({1.f, NAN, 2.f})));
  EXPECT_TRUE(std::isnan(lseTwoPass<1>({NAN})));
  EXPECT_TRUE(std::isnan(lseTwoPass<2>({kInf, NAN})));
  EXPECT_TRUE(std::isnan(lseTwoPass<2>({NAN, -kInf})));
}

TEST(DeviceHelpers, BranchFreeMergeMatchesCombine) {
  const float em = -kInf, et = -1.f; // lse_init
  struct P {
    float m, t;
  };
  const P cases[] = {{em, et}, {3.f, 0.5f}, {-2.f, 0.f}, {40.f, 1e-9f},
                     {kInf, 0.f}, {NAN, 0.f}, {1.f, NAN}};
  for (const P &a : cases)
    for (const P &b : cases) {
      float m1 = a.m, t1 = a.t, m2 = a.m, t2 = a.t;
      lcejit::lse_combine(m1, t1, b.m, b.t);
      lcejit::lse_merge(m2, t2, b.m, b.t);
      const float v1 = lcejit::lse_value(m1, t1), v2 = lcejit::lse_value(m2, t2);
      if (std::isnan(v1)) {
        EXPECT_TRUE(std::isnan(v2)) << a.m << "," << a.t << " + " << b.m << "," << b.t;
      } else {
        EXPECT_EQ(m1, m2) << a.m << "," << a.t << " + " << b.m << "," << b.t;
        EXPECT_FLOAT_EQ(t1, t2) << a.m << "," << a.t << " + " << b.m << "," << b.t;
      }
    }
}

TEST(DeviceHelpers, NanPropagatingMaxMin) {
  EXPECT_TRUE(std::isnan(lcejit::max_nan(NAN, 1.f)));
  EXPECT_TRUE(std::isnan(lcejit::max_nan(1.f, NAN)));
  EXPECT_TRUE(std::isnan(lcejit::min_nan(NAN, 1.f)));
  EXPECT_TRUE(std::isnan(lcejit::min_nan(1.f, NAN)));
  EXPECT_EQ(lcejit::max_nan(1.f, 2.f), 2.f);
  EXPECT_EQ(lcejit::min_nan(1.f, 2.f), 1.f);
  float s;
  lcejit::max_init(s);
  EXPECT_EQ(s, -kInf);
  lcejit::max_add(s, 3.f);
  lcejit::max_add(s, NAN);
  lcejit::max_add(s, 5.f);
  EXPECT_TRUE(std::isnan(s));
}

TEST(DeviceHelpers, PartialsCombineSplitsInOrder) {
  // partials[row][split][slot], 3 slots: (m, t) logsumexp then a sum; 3 splits,
  // 2 rows.
  const int splits = 3, slots = 3;
  std::vector<float> xs[2][3] = {{{1.f, 2.f}, {}, {5.f}},
                                 {{-1.f}, {0.f, 4.f}, {3.f}}};
  std::vector<float> buf(2 * splits * slots);
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < splits; ++s) {
      float *p = &buf[(r * splits + s) * slots];
      lcejit::lse_init(p[0], p[1]);
      lcejit::sum_init(p[2]);
      for (float x : xs[r][s]) {
        lcejit::lse_add(p[0], p[1], x);
        lcejit::sum_add(p[2], x);
      }
    }
  EXPECT_NEAR(lcejit::partials_logsumexp(buf.data(), 0, splits, slots, 0),
              lseRef({1.f, 2.f, 5.f}), 1e-6);
  EXPECT_NEAR(lcejit::partials_logsumexp(buf.data(), 1, splits, slots, 0),
              lseRef({-1.f, 0.f, 4.f, 3.f}), 1e-6);
  EXPECT_EQ(lcejit::partials_sum(buf.data(), 0, splits, slots, 2), 8.f);
  EXPECT_EQ(lcejit::partials_sum(buf.data(), 1, splits, slots, 2), 6.f);
  EXPECT_EQ(lcejit::partials_max(buf.data(), 1, splits, slots, 2),
            4.f); // max of -1, 4, 3
}

/// partials_each loads 8 entries ahead: with 19 splits (two batches and a remainder of 3,
/// the Gemma-2 forward has 66 entries) every partial_* answer must equal, bit for bit, the
/// combine of the entries one at a time in split order: the order is what makes a row's
/// result deterministic, and the suite's tolerances would not see a reordering.
TEST(DeviceHelpers, PartialsLoadedAheadKeepSplitOrderBitForBit) {
  const int splits = 19, slots = 3, rows = 4;
  std::vector<float> buf(static_cast<size_t>(rows * splits * slots));
  uint32_t state = 12345;
  auto next = [&] { // a fixed LCG: values of mixed magnitude and sign
    state = state * 1664525u + 1013904223u;
    return (static_cast<float>(state >> 8) / 16777216.f - 0.5f) * 40.f;
  };
  for (int r = 0; r < rows; ++r)
    for (int s = 0; s < splits; ++s) {
      float *p = &buf[static_cast<size_t>((r * splits + s) * slots)];
      lcejit::lse_init(p[0], p[1]);
      lcejit::sum_init(p[2]);
      for (int e = 0; e < 1 + (s + r) % 4; ++e) {
        const float x = next();
        lcejit::lse_add(p[0], p[1], x);
        lcejit::sum_add(p[2], x);
      }
    }
  auto bits = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  };
  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE(r);
    float m, t, sum, mx;
    lcejit::lse_init(m, t);
    lcejit::sum_init(sum);
    lcejit::max_init(mx);
    for (int s = 0; s < splits; ++s) {
      const float *p = &buf[static_cast<size_t>((r * splits + s) * slots)];
      lcejit::lse_combine(m, t, p[0], p[1]);
      lcejit::sum_combine(sum, p[2]);
      lcejit::max_combine(mx, p[2]);
    }
    EXPECT_EQ(bits(lcejit::partials_logsumexp(buf.data(), r, splits, slots, 0)),
              bits(lcejit::lse_value(m, t)));
    EXPECT_EQ(bits(lcejit::partials_logsumexp_max(buf.data(), r, splits, slots, 0)), bits(m));
    EXPECT_EQ(bits(lcejit::partials_logsumexp_rest(buf.data(), r, splits, slots, 0)), bits(t));
    EXPECT_EQ(bits(lcejit::partials_sum(buf.data(), r, splits, slots, 2)), bits(sum));
    EXPECT_EQ(bits(lcejit::partials_max(buf.data(), r, splits, slots, 2)), bits(mx));
  }
  // Fewer entries than one batch, and none.
  float m, t;
  lcejit::partials_lse_pair(buf.data(), 0, 0, slots, 0, m, t);
  float m0, t0;
  lcejit::lse_init(m0, t0);
  EXPECT_EQ(bits(m), bits(m0));
  EXPECT_EQ(bits(t), bits(t0));
  EXPECT_EQ(lcejit::partials_sum(buf.data(), 0, 2, slots, 2),
            buf[2] + buf[static_cast<size_t>(slots) + 2]);
}

TEST(DeviceHelpers, ElementConversionsRoundToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(lcejit::elem_bf16::from_f32(1.00390625f), 0x3f80);
  EXPECT_EQ(lcejit::elem_bf16::from_f32(1.01171875f),
            0x3f82); // 1 + 3 * 2^-8 -> up, even
  EXPECT_EQ(lcejit::elem_bf16::to_f32(0x3f81), 1.0078125f);
  EXPECT_EQ(lcejit::elem_f16::to_f32(lcejit::elem_f16::from_f32(0.1f)),
            0.0999755859375f);
  EXPECT_EQ(lcejit::elem_f32::to_f32(lcejit::elem_f32::from_f32(-2.5f)), -2.5f);
  EXPECT_EQ(lcejit::wrap_add(std::numeric_limits<long long>::max(), 1LL),
            std::numeric_limits<long long>::min());
}

/// [Note: f32 tanh]: the formula of lcejit::tanh_f32 (here with the host's exp2 and an
/// exact division; the device's ex2.approx and rcp are checked on the device by
/// DeviceMathGpu.TanhF32StaysWithinItsBoundsOverTheWholeRange) stays within the note's
/// bounds over the non-saturated range and small arguments, keeps the sign, saturates to
/// exactly +-1, and passes +-0 and NaN through.
TEST(DeviceHelpers, TanhF32FormulaIsWithinItsBounds) {
  double worstAbs = 0, worstRel = 0;
  auto check = [&](float x) {
    const float y = lcejit::tanh_f32(x);
    const double ref = std::tanh(static_cast<double>(x));
    const double err = std::fabs(static_cast<double>(y) - ref);
    worstAbs = std::max(worstAbs, err);
    if (std::fabs(ref) >= 0.5)
      worstRel = std::max(worstRel, err / std::fabs(ref));
    EXPECT_EQ(std::signbit(y), std::signbit(x)) << x;
  };
  for (int i = -200000; i <= 200000; ++i)
    check(static_cast<float>(i) * 6e-5f); // [-12, 12]
  for (int e = -40; e <= 7; ++e)
    for (int k = 0; k < 64; ++k) {
      check(std::ldexp(1.0f + k / 64.0f, e));
      check(-std::ldexp(1.0f + k / 64.0f, e));
    }
  EXPECT_LT(worstAbs, 4e-7);
  EXPECT_LT(worstRel, std::ldexp(1.0, -20));
  EXPECT_EQ(lcejit::tanh_f32(kInf), 1.0f);
  EXPECT_EQ(lcejit::tanh_f32(-kInf), -1.0f);
  EXPECT_EQ(lcejit::tanh_f32(88.0f), 1.0f);
  EXPECT_EQ(lcejit::tanh_f32(-1e30f), -1.0f);
  EXPECT_EQ(lcejit::tanh_f32(0.0f), 0.0f);
  EXPECT_FALSE(std::signbit(lcejit::tanh_f32(0.0f)));
  EXPECT_TRUE(std::signbit(lcejit::tanh_f32(-0.0f)));
  EXPECT_TRUE(std::isnan(lcejit::tanh_f32(std::numeric_limits<float>::quiet_NaN())));
}
