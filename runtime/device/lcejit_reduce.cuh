//===- lcejit_reduce.cuh - Row reductions: sum, max, online logsumexp
//------===//
//
// The three ReduceKinds of a GemmReduce epilogue (docs/program.md), each as a
// partial with init / add (one element) / combine (two partials) / value, plus
// the warp shuffle and the split combination the row kernels use to read a
// Partials operand.
//
// [Note: lse] (docs/program.md) A LogSumExp partial is (m, t): m the maximum of
// the elements seen, t = sum(exp(x - m)) - 1, i.e. the term of one maximal
// element (exactly 1) is left out, so t keeps full relative precision when the
// distribution is peaked.
//   combine((m1, t1), (m2, t2)) with m1 >= m2:  m = m1, t = t1 + (1 + t2) *
//   exp(m2 - m1) add(x) = combine with (x, 0);  empty = (-inf, -1);  value = m
//   + log1p(t).
// Edge cases, as compiler/reference/ProgramInterpreter (the fp64 oracle)
// defines them:
//   - NaN in m or t on either side gives (NaN, NaN): a NaN element makes the
//   value NaN;
//   - a side with m = -inf (empty, or only -inf elements: exp(-inf) = 0 terms)
//   returns
//     the other side unchanged, so adding -inf elements keeps a partial empty
//     and all -inf gives the value -inf;
//   - otherwise the formula above in IEEE arithmetic: a second +inf element
//   gives
//     exp(inf - inf) = NaN, hence the value NaN (a single +inf gives +inf).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit_common.cuh"

namespace lcejit {

//===----------------------------------------------------------------------===//
// Sum (one f32 slot, empty = 0).
//===----------------------------------------------------------------------===//

__device__ __forceinline__ void sum_init(float &s) { s = 0.f; }
__device__ __forceinline__ void sum_add(float &s, float x) { s += x; }
__device__ __forceinline__ void sum_combine(float &s, float other) {
  s += other;
}

//===----------------------------------------------------------------------===//
// Max (one f32 slot, NaN-propagating, empty = -inf).
//===----------------------------------------------------------------------===//

__device__ __forceinline__ void max_init(float &s) { s = -f32_inf(); }
__device__ __forceinline__ void max_add(float &s, float x) {
  s = max_nan(s, x);
}
__device__ __forceinline__ void max_combine(float &s, float other) {
  s = max_nan(s, other);
}

//===----------------------------------------------------------------------===//
// LogSumExp (two f32 slots (m, t), see [Note: lse]).
//===----------------------------------------------------------------------===//

__device__ __forceinline__ void lse_init(float &m, float &t) {
  m = -f32_inf();
  t = -1.f;
}

__device__ __forceinline__ void lse_combine(float &m, float &t, float m2,
                                            float t2) {
  if (m != m || t != t || m2 != m2 ||
      t2 != t2) { // NaN anywhere: the result is NaN
    m = f32_nan();
    t = f32_nan();
    return;
  }
  if (m2 == -f32_inf()) // the other side is empty (or only -inf elements)
    return;
  if (m == -f32_inf()) {
    m = m2;
    t = t2;
    return;
  }
  if (m >= m2) {
    t = t + (1.f + t2) * expf(m2 - m);
  } else {
    t = t2 + (1.f + t) * expf(m - m2);
    m = m2;
  }
}

/// lse_combine(m, t, x, 0.f), without branches: the GEMM epilogues call it per
/// element, and a data-dependent branch there makes ptxas serialize the wgmma
/// pipeline of the sm_90a mainloop (C7518). Same results in every case: NaN in
/// m, t or x gives NaN; x = -inf changes nothing; an empty pair takes (x, 0);
/// otherwise t grows by exp(x - m) or is rescaled by exp(m - x).
__device__ __forceinline__ void lse_add(float &m, float &t, float x) {
  const bool nan = (m != m) || (t != t) || (x != x);
  const bool skip = x == -f32_inf();
  const bool ge = m >= x;
  const float e = expf(ge ? x - m : m - x);
  const float t_new = ge ? t + e : (1.f + t) * e;
  const float m_new = ge ? m : x;
  t = nan ? f32_nan() : (skip ? t : t_new);
  m = nan ? f32_nan() : (skip ? m : m_new);
}

/// lse_combine without branches, for the GEMM epilogues (see lse_add): NaN
/// anywhere gives NaN; an empty or all -inf (m2, t2) changes nothing; an empty
/// (m, t) takes (m2, t2) (there exp(m - m2) = 0 makes it the general formula).
__device__ __forceinline__ void lse_merge(float &m, float &t, float m2,
                                          float t2) {
  const bool nan = (m != m) || (t != t) || (m2 != m2) || (t2 != t2);
  const bool skip = m2 == -f32_inf();
  const bool ge = m >= m2;
  const float e = expf(ge ? m2 - m : m - m2);
  const float t_new = ge ? t + (1.f + t2) * e : t2 + (1.f + t) * e;
  const float m_new = ge ? m : m2;
  t = nan ? f32_nan() : (skip ? t : t_new);
  m = nan ? f32_nan() : (skip ? m : m_new);
}

/// The logsumexp of the NV values x(0) .. x(NV - 1) as a partial (m, t), in two
/// passes ([Note: sm90 reduce by fragments]): the max, then one exp per value
/// and a sum. One value equal to the max is left out of the sum (the others
/// equal to it count 1 each), so lse = m + log1p(t) as for lse_add, with t's
/// precision on a peaked row. The same answers as lse_add value by value, up
/// to rounding: NaN anywhere gives t = NaN; all -inf gives m = -inf (an empty
/// partial for lse_merge); one +inf gives (+inf, 0) and two give NaN.
template <int NV, class X>
__device__ __forceinline__ void lse_of_values(float &m, float &t, const X &x) {
  float mx = -f32_inf();
#pragma unroll
  for (int k = 0; k < NV; ++k)
    mx = fmaxf(mx, x(k));
  const float base = mx == -f32_inf() ? 0.f : mx;
  float sum = 0.f, tops = 0.f;
  const ExpFrom exp_from(base);
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const float v = x(k);
    const bool top = v == mx;
    sum += top ? 0.f : exp_from(v);
    tops += top ? 1.f : 0.f;
  }
  m = mx;
  t = (mx == f32_inf() && tops > 1.f) ? f32_nan() : sum + (tops - 1.f);
}

__device__ __forceinline__ float lse_value(float m, float t) {
  return m + log1pf(t);
}

//===----------------------------------------------------------------------===//
// Warp shuffles (all 32 lanes must take part).
//===----------------------------------------------------------------------===//

__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

//===----------------------------------------------------------------------===//
// Partials operands of row kernels: combine partials[row][0..splits)[slot..] in
// split order (deterministic). `slots` is the slotsPerRow() of the GemmReduce
// that wrote them.
//===----------------------------------------------------------------------===//

__device__ __forceinline__ const float *
partials_row(const void *buf, i64 row, int splits, int slots, int slot) {
  return static_cast<const float *>(buf) + (row * splits) * slots + slot;
}

/// Calls f(x0, x1) for the entries i = 0 .. splits - 1 of a row in order (x0 = entry i's
/// value at `slot`, x1 its next slot's, or 0 when W = 1), loading 8 entries ahead:
/// the combines stay in split order (the same results as one entry at a time), but a
/// row's loads are no longer one L2 round trip each. (A row kernel thread reads its row's
/// 2 x 33 entries of the Gemma-2 forward three times: 60 us per 1024-row block before.)
template <int W, class F>
__device__ __forceinline__ void partials_each(const void *buf, i64 row, int splits,
                                              int slots, int slot, const F &f) {
  const float *p = partials_row(buf, row, splits, slots, slot);
  constexpr int AHEAD = 8;
  int i = 0;
  for (; i + AHEAD <= splits; i += AHEAD) {
    float x0[AHEAD], x1[AHEAD];
#pragma unroll
    for (int j = 0; j < AHEAD; ++j) {
      x0[j] = p[static_cast<i64>(i + j) * slots];
      x1[j] = W > 1 ? p[static_cast<i64>(i + j) * slots + 1] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < AHEAD; ++j)
      f(x0[j], x1[j]);
  }
  for (; i < splits; ++i)
    f(p[static_cast<i64>(i) * slots], W > 1 ? p[static_cast<i64>(i) * slots + 1] : 0.f);
}

__device__ __forceinline__ float partials_sum(const void *buf, i64 row,
                                              int splits, int slots, int slot) {
  float s;
  sum_init(s);
  partials_each<1>(buf, row, splits, slots, slot,
                   [&](float x, float) { sum_combine(s, x); });
  return s;
}

__device__ __forceinline__ float partials_max(const void *buf, i64 row,
                                              int splits, int slots, int slot) {
  float s;
  max_init(s);
  partials_each<1>(buf, row, splits, slots, slot,
                   [&](float x, float) { max_combine(s, x); });
  return s;
}

/// The combined (m, t) pair of a LogSumExp partial.
__device__ __forceinline__ void partials_lse_pair(const void *buf, i64 row,
                                                  int splits, int slots,
                                                  int slot, float &m,
                                                  float &t) {
  lse_init(m, t);
  partials_each<2>(buf, row, splits, slots, slot,
                   [&](float m2, float t2) { lse_combine(m, t, m2, t2); });
}

__device__ __forceinline__ float
partials_logsumexp(const void *buf, i64 row, int splits, int slots, int slot) {
  float m, t;
  partials_lse_pair(buf, row, splits, slots, slot, m, t);
  return lse_value(m, t);
}

/// m of the pair: the largest element (so lse - x = (m - x) + log1p(t) keeps full
/// precision when x is close to m, e.g. the target logit of a peaked row).
__device__ __forceinline__ float partials_logsumexp_max(const void *buf, i64 row,
                                                        int splits, int slots,
                                                        int slot) {
  float m, t;
  partials_lse_pair(buf, row, splits, slots, slot, m, t);
  return m;
}

/// t of the pair: sum of exp(x - m) over the elements but one maximal one.
__device__ __forceinline__ float partials_logsumexp_rest(const void *buf,
                                                         i64 row, int splits,
                                                         int slots, int slot) {
  float m, t;
  partials_lse_pair(buf, row, splits, slots, slot, m, t);
  return t;
}

} // namespace lcejit
