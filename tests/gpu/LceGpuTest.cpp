//===- LceGpuTest.cpp - The op on the GPU against the fp64 reference -------===//
//
// Every case: fresh random inputs (never zeros), outputs poisoned with NaN before the
// run, loss/dH/dW compared by relative norm against the fp64 reference computed on the
// device from the definition (GpuSupport.h). At small shapes the fp64 device reference
// itself is checked against the CPU interpreter of the unfused graph.
//
//===----------------------------------------------------------------------===//

#include "compiler/support/Knobs.h"
#include "ops/lib/Reference.h"
#include "runtime/LaunchTrace.h"
#include "tests/gpu/GpuSupport.h"
#include "tests/gpu/Tolerances.h"
#include "tests/support/ScopedEnv.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace lcejit::gputest {
namespace {

enum class Logits {
  Random,     ///< |z| of a few units
  Peaked,     ///< the target logit ~20 above the rest (softmax near one-hot)
  Saturating, ///< std(z) ~ 30 with softcap 30: tanh saturates
  /// Every 5th row's target logit 100 below the rest (row loss ~100): [Note: a per-row
  /// reference] recomputes those rows (their values would leave bf16's range).
  Far,
};

struct Case {
  const char *name;
  DType dtype;
  int64_t n, d, v;
  std::optional<double> softcap;
  int ignoreEvery; ///< every k-th row ignored (0: none)
  Reduction reduction;
  DType gradWeight;
  DType target = DType::I64;
  bool ignoreIndexOption = true; ///< false: no ignore_index at all
  Precision precision = Precision::Fast;
  Logits logits = Logits::Random;
  int64_t budgetMb = 0; ///< 0: the default workspace budget
  /// > 0: targets drawn from the first targetCols columns only: groups of many rows that
  /// share a target ([Note: a group's first and last rows]).
  int64_t targetCols = 0;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

float bf16ToF32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16ToF32(uint16_t h) {
  uint32_t s = (h >> 15) & 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v;
  if (e == 0)
    v = std::ldexp(float(m), -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = std::ldexp(float(m | 0x400), int(e) - 25);
  return s ? -v : v;
}

std::vector<double> hostValues(const DeviceBuffer &b, DType t, int64_t count) {
  std::vector<double> out(static_cast<size_t>(count));
  if (t == DType::F32) {
    std::vector<float> f(static_cast<size_t>(count));
    b.downloadTo(f.data(), count * 4);
    for (size_t i = 0; i < f.size(); ++i)
      out[i] = f[i];
  } else {
    std::vector<uint16_t> h(static_cast<size_t>(count));
    b.downloadTo(h.data(), count * 2);
    for (size_t i = 0; i < h.size(); ++i)
      out[i] = t == DType::BF16 ? bf16ToF32(h[i]) : f16ToF32(h[i]);
  }
  return out;
}

class LceGpu : public ::testing::TestWithParam<Case> {};

TEST_P(LceGpu, MatchesFp64Reference) {
  const Case &c = GetParam();
  LinearCrossEntropyOptions o;
  o.hidden = c.d;
  o.vocab = c.v;
  o.dtype = c.dtype;
  o.targetDType = c.target;
  o.gradWeightDType = c.gradWeight;
  o.softcap = c.softcap;
  o.reduction = c.reduction;
  if (!c.ignoreIndexOption)
    o.ignoreIndex.reset();
  o.precision = c.precision;
  o.workspaceBudgetBytes = c.budgetMb << 20;
  // The backward schedule: the default (materialized where the planner can derive it)
  // unless the name asks: "bf16_mat_" must run the materialized backward, "bf16_rec_" runs
  // the vocab-chunked recompute (LCEJIT_BACKWARD=recompute).
  const bool materialized = std::string(c.name).rfind("bf16_mat_", 0) == 0;
  const bool recompute = std::string(c.name).rfind("bf16_rec_", 0) == 0;
  lcejit::testing::ScopedEnv knob;
  knob.set("LCEJIT_BACKWARD", recompute ? "recompute" : "materialized");
  LinearCrossEntropy op(o);
  const bool exact = c.precision == Precision::Exact || c.dtype != DType::BF16;
  RefKernels &k = RefKernels::get();

  const int64_t es = dtypeSize(c.dtype);
  DeviceBuffer h(c.n * c.d * es), w(c.v * c.d * es), y(c.n * dtypeSize(c.target));
  // A "bf16_mat_" or "bf16_rec_" case shares its data with the case of the same name
  // without "mat_" or "rec_", so the two schedules compare on the same inputs.
  std::string seedName = c.name;
  if (materialized || recompute)
    seedName.replace(0, std::string("bf16_mat_").size(), "bf16_");
  uint64_t seed = std::hash<std::string>{}(seedName);
  // Logits of order a few units: |z| ~ sqrt(D) * sh * sw (uniform in [-scale, scale]:
  // std scale / sqrt(3)); saturating: std(z) ~ 30.
  double scale = c.logits == Logits::Saturating ? std::sqrt(3.0 * 30.0 / std::sqrt(double(c.d)))
                                                : 2.0 / std::pow(double(c.d), 0.25);
  k.fillRandom(h, c.dtype, c.n * c.d, seed, scale);
  k.fillRandom(w, c.dtype, c.v * c.d, seed + 1, scale);
  k.fillTargets(y, c.target, c.n, seed + 2, c.targetCols > 0 ? c.targetCols : c.v,
                o.ignoreIndex.value_or(0),
                c.ignoreIndexOption ? c.ignoreEvery : 0);
  if (c.logits == Logits::Peaked)
    k.peakRows(h, w, c.dtype, y, c.target, c.n, c.d, c.v, 20.0);
  if (c.logits == Logits::Far)
    k.peakRows(h, w, c.dtype, y, c.target, c.n, c.d, c.v, -100.0, 5);

  DeviceBuffer dH(c.n * c.d * es), dW(c.v * c.d * dtypeSize(c.gradWeight));
  dH.poison();
  dW.poison();
  TensorRef H{h.data(), c.dtype, {c.n, c.d}, {}};
  TensorRef W{w.data(), c.dtype, {c.v, c.d}, {}};
  TensorRef Y{y.data(), c.target, {c.n}, {}};
  MutableTensorRef DH{dH.data(), c.dtype, {c.n, c.d}, {}};
  MutableTensorRef DW{dW.data(), c.gradWeight, {c.v, c.d}, {}};
  float loss = op.forwardBackward(H, W, Y, DH, DW);

  GpuReference ref = gpuReference(o, h, w, y, c.n);
  double lossErr = std::abs(double(loss) - ref.loss) / std::max(std::abs(ref.loss), 1e-30);
  Comparison ch = k.compare(dH, c.dtype, ref.dH, c.n * c.d);
  Comparison cw = k.compare(dW, c.gradWeight, ref.dW, c.v * c.d);
  std::string report = fmt::format(
      "{}: loss {:.9g} (ref {:.12g}, rel err {:.3g}); dH rel err {:.3g} (floor {:.3g}, x{:.2f}, "
      "max |err| {:.2f} bf16 ulp of max); dW rel err {:.3g} (floor {:.3g}, bf16 floor {:.3g}, "
      "x{:.2f} of the bf16 floor, max |err| {:.2f} bf16 ulp); {}",
      c.name, loss, ref.loss, lossErr, ch.relError, ch.floor, ch.relError / ch.floor,
      ch.maxAbsError / bf16Ulp(ch.maxAbsRef), cw.relError, cw.floor, cw.bf16Floor,
      cw.relError / cw.bf16Floor, cw.maxAbsError / bf16Ulp(cw.maxAbsRef),
      op.scheduleSummary(c.n));
  std::cout << report << "\n";
  RecordProperty("errors", report);
  if (materialized) {
    EXPECT_NE(op.scheduleSummary(c.n).find("materialized"), std::string::npos)
        << "this case is meant to run the materialized backward: " << op.scheduleSummary(c.n);
  }
  if (materialized && c.logits == Logits::Far) {
    EXPECT_NE(op.inspect(c.n, "plan").find("row-scaled against each row's target value"),
              std::string::npos)
        << "this case is meant to store against a per-row reference and recompute its far rows";
  }
  if (std::string(c.name).find("_slabs_") != std::string::npos) {
    EXPECT_NE(op.scheduleSummary(c.n).find("in the gradient's memory"), std::string::npos)
        << "this case is meant to keep its stored values in dW: " << op.scheduleSummary(c.n);
    if (std::string(c.name).find("_mixed_") != std::string::npos) {
      EXPECT_NE(op.scheduleSummary(c.n).find(" slabs, then "), std::string::npos)
          << "this case is meant to run ordinary blocks after its slabs: "
          << op.scheduleSummary(c.n);
    }
    if (std::string(c.name).find("_tails_") != std::string::npos) {
      EXPECT_NE(op.scheduleSummary(c.n).find("in the workspace's tails"), std::string::npos)
          << "this case is meant to keep rows of its slabs in the workspace's tails: "
          << op.scheduleSummary(c.n);
    }
    if (std::string(c.name).find("_inplace_") != std::string::npos) {
      EXPECT_NE(op.inspect(c.n, "plan").find("[Note: values scaled in place]"),
                std::string::npos)
          << "this case is meant to scale its values in place";
    }
  }
  if (c.targetCols > 0) {
    EXPECT_NE(op.inspect(c.n, "plan").find("first and last rows found by"), std::string::npos)
        << "this case is meant to find its target groups in a kernel of their own";
  }
  if (std::string(c.name).find("_widths_") != std::string::npos) {
    EXPECT_NE(op.inspect(c.n, "plan").find("dA widths per launch"), std::string::npos)
        << "this case is meant to have two dA widths";
  }
  if (recompute) {
    EXPECT_EQ(op.scheduleSummary(c.n).find("materialized"), std::string::npos)
        << "this case is meant to run the recompute: " << op.scheduleSummary(c.n);
  }
  EXPECT_EQ(ch.nonFinite, 0) << "dH has NaN/inf (unwritten poison?)";
  EXPECT_EQ(cw.nonFinite, 0) << "dW has NaN/inf (unwritten poison?)";
  const bool peaked = c.logits == Logits::Peaked;
  EXPECT_LE(lossErr, peaked && c.dtype != DType::F32 ? peakedLossTolerance(c.d) : kLossTolerance);
  if (c.n > 0) {
    EXPECT_LE(ch.relError, hiddenGradTolerance(c.dtype, exact, peaked, ch.floor, ch.bf16Floor));
    EXPECT_LE(cw.relError, gradTolerance(c.gradWeight, exact, peaked, cw.floor, cw.bf16Floor));
    if (c.dtype == DType::BF16) {
      EXPECT_LE(ch.maxAbsError, kMaxBf16UlpsOfLargest * bf16Ulp(ch.maxAbsRef));
      EXPECT_LE(cw.maxAbsError, kMaxBf16UlpsOfLargest * bf16Ulp(cw.maxAbsRef));
    }
  }

  // At small shapes, check the fp64 device reference against the CPU interpreter of the
  // unfused graph (fp64): the oracle is itself tested.
  if (c.n * c.v * c.d <= int64_t(300) * 1000 * 1000) {
    std::vector<double> hh = hostValues(h, c.dtype, c.n * c.d);
    std::vector<double> ww = hostValues(w, c.dtype, c.v * c.d);
    std::vector<int64_t> yy(static_cast<size_t>(c.n));
    if (c.target == DType::I64) {
      y.downloadTo(yy.data(), c.n * 8);
    } else {
      std::vector<int32_t> y32(static_cast<size_t>(c.n));
      y.downloadTo(y32.data(), c.n * 4);
      for (size_t i = 0; i < y32.size(); ++i)
        yy[i] = y32[i];
    }
    ReferenceResult cpu = ops::runGraphReference(o, hh, ww, yy);
    std::vector<double> gh = ref.dH.download<double>(), gw = ref.dW.download<double>();
    auto rel = [](const std::vector<double> &a, const std::vector<double> &b) {
      double d2 = 0, r2 = 0;
      for (size_t i = 0; i < b.size(); ++i) {
        d2 += (a[i] - b[i]) * (a[i] - b[i]);
        r2 += b[i] * b[i];
      }
      return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
    };
    EXPECT_LE(std::abs(ref.loss - cpu.loss), kReferenceAgreement * std::max(1.0, std::abs(cpu.loss)));
    gh.resize(cpu.gradHidden.size());
    gw.resize(cpu.gradWeight.size());
    EXPECT_LE(rel(gh, cpu.gradHidden), kReferenceAgreement);
    EXPECT_LE(rel(gw, cpu.gradWeight), kReferenceAgreement);
  }
}

using R = Reduction;
constexpr DType BF = DType::BF16, F32 = DType::F32, F16 = DType::F16, I32 = DType::I32;

INSTANTIATE_TEST_SUITE_P(
    Shapes, LceGpu,
    ::testing::Values(
        Case{"bf16_n1_d64_v1000", BF, 1, 64, 1000, {}, 0, R::Mean, F32},
        Case{"bf16_n7_d200_v1000_softcap_ignore_dWbf16", BF, 7, 200, 1000, 30.0, 3, R::Mean, BF},
        Case{"bf16_n127_d64_v32003_softcap_ignore_sum", BF, 127, 64, 32003, 30.0, 5, R::Sum, F32},
        Case{"bf16_n1000_d200_v32003_ignore_i32", BF, 1000, 200, 32003, {}, 7, R::Mean, F32, I32},
        Case{"bf16_n4097_d4096_v128256_softcap_ignore", BF, 4097, 4096, 128256, 30.0, 9, R::Mean, F32},
        Case{"bf16_rec_n4097_d4096_v128256_softcap_ignore", BF, 4097, 4096, 128256, 30.0, 9,
             R::Mean, F32},
        Case{"bf16_n1000_d4096_v128256_sum_dWbf16", BF, 1000, 4096, 128256, {}, 0, R::Sum, BF},
        Case{"bf16_n4097_d200_v1000_noignore", BF, 4097, 200, 1000, {}, 0, R::Mean, F32, DType::I64, false},
        Case{"f32_n7_d64_v1000", F32, 7, 64, 1000, {}, 0, R::Mean, F32},
        Case{"f32_n127_d200_v32003_softcap_ignore_sum", F32, 127, 200, 32003, 30.0, 4, R::Sum, F32},
        Case{"f32_n1000_d4096_v32003", F32, 1000, 4096, 32003, {}, 0, R::Mean, F32},
        Case{"f32_n4097_d64_v128256_softcap_ignore", F32, 4097, 64, 128256, 30.0, 11, R::Mean, F32},
        Case{"f16_n127_d200_v32003_ignore", F16, 127, 200, 32003, {}, 6, R::Mean, F32},
        Case{"f16_n1000_d64_v1000_softcap_dWf16", F16, 1000, 64, 1000, 30.0, 0, R::Mean, F16},
        // Precision modes, peaked and saturating logits (issue 5).
        Case{"bf16_exact_n4097_d4096_v128256_softcap_ignore", BF, 4097, 4096, 128256, 30.0, 9,
             R::Mean, F32, DType::I64, true, Precision::Exact},
        Case{"bf16_exact_n1000_d200_v32003_dWbf16", BF, 1000, 200, 32003, {}, 0, R::Mean, BF,
             DType::I64, true, Precision::Exact},
        Case{"bf16_peaked_n2048_d4096_v128256", BF, 2048, 4096, 128256, {}, 0, R::Mean, F32,
             DType::I64, true, Precision::Fast, Logits::Peaked},
        Case{"bf16_peaked_n1000_d512_v32003_dWbf16", BF, 1000, 512, 32003, {}, 0, R::Mean, BF,
             DType::I64, true, Precision::Fast, Logits::Peaked},
        Case{"bf16_exact_peaked_n1000_d512_v32003", BF, 1000, 512, 32003, {}, 0, R::Mean, F32,
             DType::I64, true, Precision::Exact, Logits::Peaked},
        Case{"bf16_exact_peaked_n2048_d4096_v128256_softcap", BF, 2048, 4096, 128256, 30.0, 0,
             R::Mean, F32, DType::I64, true, Precision::Exact, Logits::Peaked},
        // f32 inputs, peaked: the logits by FFMA (f32 rounding to nearest, no tensor cores),
        // held to the random-logit loss bound (see peakedLossTolerance).
        Case{"f32_peaked_n1000_d4096_v32003", F32, 1000, 4096, 32003, {}, 0, R::Mean, F32,
             DType::I64, true, Precision::Fast, Logits::Peaked},
        Case{"bf16_saturating_softcap_n2048_d2304_v256000", BF, 2048, 2304, 256000, 30.0, 0,
             R::Mean, F32, DType::I64, true, Precision::Fast, Logits::Saturating},
        // Bucket edges: 1024 | 1025 and 16384 | 16385.
        Case{"bf16_n1024_d256_v32003_edge", BF, 1024, 256, 32003, {}, 0, R::Mean, F32},
        Case{"bf16_n1025_d256_v32003_edge", BF, 1025, 256, 32003, {}, 0, R::Mean, F32},
        Case{"bf16_n16384_d256_v32003_edge", BF, 16384, 256, 32003, 30.0, 5, R::Mean, F32},
        Case{"bf16_n16385_d256_v32003_edge", BF, 16385, 256, 32003, 30.0, 5, R::Mean, F32},
        // Row blocks: a 4 MiB budget cuts 4097 rows into blocks (dW accumulates over them).
        Case{"bf16_rowblocks_n4097_d256_v32003_budget4", BF, 4097, 256, 32003, 30.0, 7, R::Mean,
             F32, DType::I64, true, Precision::Fast, Logits::Random, 4},
        Case{"bf16_exact_rowblocks_n3001_d256_v32003_budget4", BF, 3001, 256, 32003, {}, 0,
             R::Sum, F32, DType::I64, true, Precision::Exact, Logits::Random, 4},
        // [Note: a group's first and last rows]: targets from 40 columns (~100 rows each,
        // more than the 64 members a leader keeps), in one block and in three.
        Case{"bf16_mat_fewtargets_n4097_d256_v32000", BF, 4097, 256, 32000, {}, 7, R::Mean,
             F32, DType::I64, true, Precision::Fast, Logits::Random, 0, 40},
        Case{"bf16_mat_fewtargets_rowblocks_n4097_d256_v32000_i32_budget100", BF, 4097, 256,
             32000, 30.0, 0, R::Sum, F32, I32, true, Precision::Fast, Logits::Random, 100, 40},
        // The materialized backward ([Note: the materialized backward]; the default where
        // V is a multiple of 128 and dW is f32, so the bf16 cases above with V = 128256
        // run it too): row blocks (a 100 MiB budget cuts 4097 rows of 32000 columns into
        // three), tail rows, peaked and saturating-softcap logits, i32 targets; "rec_"
        // twins run the recompute on the same inputs.
        Case{"bf16_mat_rowblocks_n4097_d256_v32000_softcap_ignore_budget100", BF, 4097, 256,
             32000, 30.0, 7, R::Mean, F32, DType::I64, true, Precision::Fast, Logits::Random,
             100},
        Case{"bf16_mat_peaked_n2000_d512_v32000", BF, 2000, 512, 32000, {}, 0, R::Mean, F32,
             DType::I64, true, Precision::Fast, Logits::Peaked},
        Case{"bf16_rec_peaked_n2000_d512_v32000", BF, 2000, 512, 32000, {}, 0, R::Mean, F32,
             DType::I64, true, Precision::Fast, Logits::Peaked},
        Case{"bf16_mat_saturating_softcap_n1500_d256_v32000_i32", BF, 1500, 256, 32000, 30.0, 0,
             R::Sum, F32, I32, true, Precision::Fast, Logits::Saturating},
        Case{"bf16_mat_n1000_d4096_v128256_softcap_ignore", BF, 1000, 4096, 128256, 30.0, 3,
             R::Mean, F32},
        // [Note: row-scaled stored values] on a peaked row: the whole target column goes
        // through the residual (the stored value there is 0).
        Case{"bf16_mat_peaked_softcap_n2000_d512_v32000", BF, 2000, 512, 32000, 30.0, 0,
             R::Mean, F32, DType::I64, true, Precision::Fast, Logits::Peaked},
        // [Note: a per-row reference]: rows whose loss (~100) is too large for the values
        // stored against their target logit, mixed with ordinary rows in the same tiles;
        // the dZ GEMM writes them instead. Row blocks, ignored rows, i32 targets; the
        // "rec_" twin runs the recompute on the same inputs.
        Case{"bf16_mat_far_n2000_d512_v32000", BF, 2000, 512, 32000, {}, 0, R::Mean, F32,
             DType::I64, true, Precision::Fast, Logits::Far},
        Case{"bf16_rec_far_n2000_d512_v32000", BF, 2000, 512, 32000, {}, 0, R::Mean, F32,
             DType::I64, true, Precision::Fast, Logits::Far},
        Case{"bf16_mat_far_rowblocks_n4097_d256_v32000_ignore_budget100", BF, 4097, 256, 32000,
             {}, 7, R::Sum, F32, I32, true, Precision::Fast, Logits::Far, 100},
        // [Note: stored values in dW]: budgets that block these rows in the ordinary
        // schedule, N <= 2·D: one block whose stored values live in dW's memory (the
        // filtered dZ GEMM writes the far rows into the slabs too); tail rows, ignored rows,
        // i32 targets, peaked logits. The Llama-3-head cases with N = 4097 above take it too.
        Case{"bf16_mat_slabs_n2000_d1024_v32000_softcap_ignore_budget100", BF, 2000, 1024,
             32000, 30.0, 7, R::Mean, F32, DType::I64, true, Precision::Fast, Logits::Random,
             100},
        Case{"bf16_mat_slabs_far_n1999_d1024_v32000_i32_budget100", BF, 1999, 1024, 32000, {},
             0, R::Sum, F32, I32, true, Precision::Fast, Logits::Far, 100},
        Case{"bf16_mat_slabs_peaked_n1500_d768_v32000_budget80", BF, 1500, 768, 32000, {}, 0,
             R::Mean, F32, DType::I64, true, Precision::Fast, Logits::Peaked, 80},
        // More rows than a slab holds (2·D): that many in slabs, the rest in ordinary
        // blocks that add to the dW the slab block wrote; far rows in both. [Note: slab
        // tails]: where it saves a block, the rows past 2·D of every slab in the
        // workspace's tails (6000: 4736 rows in slabs and 1 block instead of 2; 3500: 2560
        // and 1; 2500: all rows in one block, 452 in the tails); 5000: no tails (they would
        // not save a block), 2 blocks of 1536 after 2048 rows in slabs.
        Case{"bf16_mat_slabs_tails_mixed_n6000_d2048_v32000_softcap_ignore_budget100", BF, 6000,
             2048, 32000, 30.0, 5, R::Mean, F32, DType::I64, true, Precision::Fast,
             Logits::Random, 100},
        Case{"bf16_mat_slabs_tails_mixed_far_n3500_d1024_v32000_i32_budget72", BF, 3500, 1024,
             32000, {}, 0, R::Sum, F32, I32, true, Precision::Fast, Logits::Far, 72},
        Case{"bf16_mat_slabs_tails_far_n2500_d1024_v32000_ignore_budget100", BF, 2500, 1024,
             32000, {}, 7, R::Mean, F32, DType::I64, true, Precision::Fast, Logits::Far, 100},
        Case{"bf16_mat_slabs_mixed_peaked_n5000_d1024_v32000_budget100", BF, 5000, 1024, 32000,
             {}, 0, R::Mean, F32, DType::I64, true, Precision::Fast, Logits::Peaked, 100},
        // [Note: values scaled in place]: budgets too small for the ordinary materialized
        // blocks: the slab-only Program, the values scaled in place after dA and dB over
        // the unscaled A (softcap's constant reference, the per-row reference with far rows
        // the filtered dZ GEMM writes into the slabs, peaked rows, the lean Llama-3 head).
        Case{"bf16_mat_slabs_inplace_n2000_d1024_v32000_softcap_ignore_budget32", BF, 2000,
             1024, 32000, 30.0, 7, R::Mean, F32, DType::I64, true, Precision::Fast,
             Logits::Random, 32},
        Case{"bf16_mat_slabs_inplace_far_n1999_d1024_v32000_i32_budget32", BF, 1999, 1024,
             32000, {}, 0, R::Sum, F32, I32, true, Precision::Fast, Logits::Far, 32},
        Case{"bf16_mat_slabs_inplace_peaked_n1500_d768_v32000_budget24", BF, 1500, 768, 32000,
             {}, 0, R::Mean, F32, DType::I64, true, Precision::Fast, Logits::Peaked, 24},
        Case{"bf16_mat_slabs_inplace_n4097_d4096_v128256_ignore_budget64", BF, 4097, 4096,
             128256, {}, 5, R::Mean, F32, DType::I64, true, Precision::Fast, Logits::Random,
             64},
        // [Note: dA widths per launch]: Programs with a second dA width; the first runs
        // it for its one block (1025 rows), the second for its one slab block, 512 of
        // whose rows lie in the tails (Planner.LhsWidthsPerLaunch checks the choices).
        Case{"bf16_mat_widths_n1025_d768_v32000", BF, 1025, 768, 32000, {}, 0, R::Mean, F32},
        Case{"bf16_mat_widths_slabs_tails_n2048_d768_v256000", BF, 2048, 768, 256000, {}, 0,
             R::Mean, F32},
        // The Gemma-2 head at N = 8192: 5120 rows in slabs (512 in the tails), then 3 x 1024.
        Case{"bf16_mat_slabs_tails_mixed_n8192_d2304_v256000_softcap_ignore", BF, 8192, 2304,
             256000, 30.0, 9, R::Mean, F32},
        // N * V > 2^31 (element indices past int32).
        Case{"bf16_n20000_d64_v128256_nv_over_2e31", BF, 20000, 64, 128256, {}, 0, R::Mean,
             F32}),
    [](const ::testing::TestParamInfo<Case> &i) { return std::string(i.param.name); });

LinearCrossEntropyOptions smallOptions() {
  LinearCrossEntropyOptions o;
  o.hidden = 64;
  o.vocab = 1000;
  o.dtype = DType::BF16;
  return o;
}

/// forward(): the loss only (one GEMM's work) matches the fp64 reference like the full
/// call's loss does, and equals it; enqueueForward writes the same loss to device memory.
/// On the wgmma path (V a multiple of 8) and the mma.sync one (V = 32003).
TEST(LceGpuForward, LossMatchesTheReferenceAndForwardBackward) {
  struct Shape {
    int64_t n, d, v;
    std::optional<double> softcap;
  };
  for (const Shape &sh : {Shape{4097, 4096, 128256, 30.0}, Shape{1000, 256, 32003, {}},
                          Shape{7, 64, 1000, {}}}) {
    SCOPED_TRACE(fmt::format("N={} D={} V={}", sh.n, sh.d, sh.v));
    LinearCrossEntropyOptions o;
    o.hidden = sh.d;
    o.vocab = sh.v;
    o.dtype = DType::BF16;
    o.softcap = sh.softcap;
    o.ignoreIndex = -100;
    LinearCrossEntropy op(o);
    RefKernels &k = RefKernels::get();
    const int64_t n = sh.n;
    DeviceBuffer h(n * o.hidden * 2), w(o.vocab * o.hidden * 2), y(n * 8),
        dH(n * o.hidden * 2), dW(o.vocab * o.hidden * 4), lossDev(256);
    k.fillRandom(h, o.dtype, n * o.hidden, 61, 2.0 / std::pow(double(o.hidden), 0.25));
    k.fillRandom(w, o.dtype, o.vocab * o.hidden, 62, 2.0 / std::pow(double(o.hidden), 0.25));
    k.fillTargets(y, DType::I64, n, 63, o.vocab, -100, 7);
    TensorRef H{h.data(), o.dtype, {n, o.hidden}, {}};
    TensorRef W{w.data(), o.dtype, {o.vocab, o.hidden}, {}};
    TensorRef Y{y.data(), DType::I64, {n}, {}};
    const float lossF = op.forward(H, W, Y);
    lossDev.poison();
    op.enqueueForward(H, W, Y, MutableTensorRef{lossDev.data(), DType::F32, {}, {}});
    LCEJIT_CU(runtime::cudaDriver().ctxSynchronize());
    op.checkDeviceErrors();
    const float lossE = lossDev.download<float>()[0];
    const float lossFB = op.forwardBackward(
        H, W, Y, MutableTensorRef{dH.data(), o.dtype, {n, o.hidden}, {}},
        MutableTensorRef{dW.data(), DType::F32, {o.vocab, o.hidden}, {}});
    GpuReference ref = gpuReference(o, h, w, y, n);
    EXPECT_LE(std::abs(lossF - ref.loss), kLossTolerance * std::abs(ref.loss))
        << "forward " << lossF << " vs fp64 " << ref.loss;
    EXPECT_NEAR(lossE, lossF, 1e-6 * std::abs(lossF)) << "enqueueForward and forward";
    EXPECT_NEAR(lossF, lossFB, 1e-6 * std::abs(lossFB)) << "forward and forwardBackward";
  }
}

/// One bf16 softcap-30 call with random data (seeds s, s + 1, s + 2; every `ignoreEvery`-th
/// target ignored), run with knob `name` set to each value asked for: the loss, dH and an
/// f32 dW as bits, and the plan. The comparisons of two code paths that must agree.
class KnobRuns {
public:
  struct Result {
    float loss;
    std::vector<uint16_t> dH;
    std::vector<uint32_t> dW;
    std::string plan;
  };
  /// budgetMb > 0: the op's workspace budget (the default otherwise).
  KnobRuns(int64_t n, int64_t hidden, uint64_t seed, int64_t ignoreEvery, int64_t budgetMb = 0)
      : n_(n), h_(n * hidden * 2), w_(kVocab * hidden * 2), y_(n * 8), dH_(n * hidden * 2),
        dW_(kVocab * hidden * 4) {
    if (budgetMb > 0)
      o_.workspaceBudgetBytes = budgetMb << 20;
    o_.hidden = hidden;
    o_.vocab = kVocab;
    o_.dtype = DType::BF16;
    o_.softcap = 30.0;
    o_.ignoreIndex = -100;
    RefKernels &k = RefKernels::get();
    const double scale = 2.0 / std::pow(double(hidden), 0.25);
    k.fillRandom(h_, o_.dtype, n * hidden, seed, scale);
    k.fillRandom(w_, o_.dtype, kVocab * hidden, seed + 1, scale);
    k.fillTargets(y_, DType::I64, n, seed + 2, kVocab, -100, ignoreEvery);
  }
  Result run(const char *name, const char *value) {
    lcejit::testing::ScopedEnv knob;
    knob.set(name, value);
    LinearCrossEntropy op(o_);
    dH_.poison();
    dW_.poison();
    Result r;
    r.loss = op.forwardBackward(TensorRef{h_.data(), o_.dtype, {n_, o_.hidden}, {}},
                                TensorRef{w_.data(), o_.dtype, {kVocab, o_.hidden}, {}},
                                TensorRef{y_.data(), DType::I64, {n_}, {}},
                                MutableTensorRef{dH_.data(), o_.dtype, {n_, o_.hidden}, {}},
                                MutableTensorRef{dW_.data(), DType::F32, {kVocab, o_.hidden}, {}});
    r.dH = dH_.download<uint16_t>();
    r.dW = dW_.download<uint32_t>();
    r.plan = op.inspect(n_, "plan");
    return r;
  }
  /// A call that overwrites dW, then one that adds to it (its own run schedule: ordinary
  /// blocks where the first had slabs), with the knob set; dW after both.
  std::vector<float> runTwiceAdding(const char *name, const char *value) {
    lcejit::testing::ScopedEnv knob;
    knob.set(name, value);
    LinearCrossEntropy op(o_);
    dH_.poison();
    dW_.poison();
    for (bool add : {false, true})
      op.forwardBackward(TensorRef{h_.data(), o_.dtype, {n_, o_.hidden}, {}},
                         TensorRef{w_.data(), o_.dtype, {kVocab, o_.hidden}, {}},
                         TensorRef{y_.data(), DType::I64, {n_}, {}},
                         MutableTensorRef{dH_.data(), o_.dtype, {n_, o_.hidden}, {}},
                         MutableTensorRef{dW_.data(), DType::F32, {kVocab, o_.hidden}, {}},
                         nullptr, GradScale{}, Accumulate{false, add});
    return dW_.download<float>();
  }

private:
  static constexpr int64_t kVocab = 32000; // a multiple of 8 (wgmma) and of 128 (materialized)
  int64_t n_;
  LinearCrossEntropyOptions o_;
  DeviceBuffer h_, w_, y_, dH_, dW_;
};

/// [Note: sm90 multicast]: the forward's cluster pairs share each W tile through TMA
/// multicast. That changes where a stage's bytes come from, not the arithmetic, so the
/// loss and both gradients must be bit-identical to single CTAs (LCEJIT_MULTICAST=0), for
/// row tiles that pair up (N = 256, 1000) and that do not (N = 384: launched without
/// clusters), with softcap on the materialized schedule. A wrong half, stage or barrier
/// in the pair's protocol changes bits here (or hangs, which the suite's timeout reports).
TEST(LceGpuClusters, MulticastChangesNoBit) {
  for (int64_t n : {256, 384, 1000}) {
    SCOPED_TRACE(fmt::format("N = {}", n));
    KnobRuns runs(n, 256, 71, 9);
    using Result = KnobRuns::Result;
    auto run = [&](bool multicast) { return runs.run("LCEJIT_MULTICAST", multicast ? "1" : "0"); };
    const Result pairs = run(true), single = run(false);
    ASSERT_TRUE(std::isfinite(pairs.loss));
    uint32_t a, b;
    std::memcpy(&a, &pairs.loss, 4);
    std::memcpy(&b, &single.loss, 4);
    EXPECT_EQ(a, b) << "loss " << pairs.loss << " vs " << single.loss;
    size_t dHDiff = 0, dWDiff = 0, poisoned = 0;
    for (size_t i = 0; i < pairs.dH.size(); ++i) {
      dHDiff += pairs.dH[i] != single.dH[i];
      poisoned += (pairs.dH[i] & 0x7FFF) > 0x7F80; // a bf16 NaN: an element never written
    }
    for (size_t i = 0; i < pairs.dW.size(); ++i) {
      dWDiff += pairs.dW[i] != single.dW[i];
      poisoned += (pairs.dW[i] & 0x7FFFFFFFu) > 0x7F800000u;
    }
    EXPECT_EQ(poisoned, 0u);
    EXPECT_EQ(dHDiff, 0u) << "of " << pairs.dH.size() << " dH elements";
    EXPECT_EQ(dWDiff, 0u) << "of " << pairs.dW.size() << " dW elements";
  }
}

/// What a dA that sums K in another order (split-K clusters, [Note: dA stream-K]) may
/// change against one CTA per tile (`whole`): `changed` and `again` (the same knob, run
/// twice) give the same bits; the loss and dW are `whole`'s bit for bit; dH has no
/// unwritten element, and each moves by at most one bf16 ulp (f32 sums of V terms in
/// another order, rounded once, plus what they may differ by where they cancel: far below
/// an ulp of the largest element); some element does move, which shows `what` ran.
static void expectOnlyDhSumOrderChanged(const KnobRuns::Result &changed,
                                        const KnobRuns::Result &again,
                                        const KnobRuns::Result &whole, const char *what) {
  ASSERT_TRUE(std::isfinite(changed.loss));
  uint32_t a, b, c;
  std::memcpy(&a, &changed.loss, 4);
  std::memcpy(&b, &again.loss, 4);
  std::memcpy(&c, &whole.loss, 4);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c) << "the loss does not depend on dA";
  auto value = [](uint16_t bits) {
    const uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return double(f);
  };
  double maxAbs = 0;
  for (uint16_t x : whole.dH)
    maxAbs = std::max(maxAbs, std::abs(value(x)));
  size_t poisoned = 0, rerun = 0, moved = 0, far = 0, dWDiff = 0;
  for (size_t i = 0; i < changed.dH.size(); ++i) {
    poisoned += (changed.dH[i] & 0x7FFF) > 0x7F80; // a bf16 NaN: an element never written
    rerun += changed.dH[i] != again.dH[i];
    if (changed.dH[i] != whole.dH[i]) {
      ++moved;
      const double x = value(changed.dH[i]), y = value(whole.dH[i]);
      far += std::abs(x - y) >
             bf16Ulp(std::max(std::abs(x), std::abs(y))) + bf16Ulp(maxAbs) / 16;
    }
  }
  for (size_t i = 0; i < changed.dW.size(); ++i)
    dWDiff += changed.dW[i] != whole.dW[i];
  EXPECT_EQ(poisoned, 0u);
  EXPECT_EQ(rerun, 0u) << "of " << changed.dH.size() << " dH elements: " << what
                       << " is not deterministic";
  EXPECT_EQ(far, 0u) << "dH elements more than one bf16 ulp from one CTA per tile";
  EXPECT_GT(moved, 0u) << "no dH element changed: did " << what << " run?";
  EXPECT_EQ(dWDiff, 0u) << "of " << changed.dW.size() << " dW elements";
}

/// [Note: sm90 split-K]: dA on clusters of CTAs that each sum part of K, rank 0 adding
/// the others' partial tiles through distributed shared memory. At D = 2304, N = 64 makes
/// 18 dA tiles of 128 x 128, which the launch splits four ways, N = 200 36 and N = 500 48
/// (of 128 x 192), in halves; the split must give the same bits on every run (the partials are added in rank order),
/// change nothing but dH (loss and dW bit for bit), and move each dH element by at most one
/// bf16 ulp from the unsplit sum (f32 sums in another order, rounded once). That some
/// elements do move shows the split ran.
TEST(LceGpuClusters, SplitKIsDeterministicAndChangesOnlyTheSumOrder) {
  for (int64_t n : {64, 200, 500}) {
    SCOPED_TRACE(fmt::format("N = {}", n));
    KnobRuns runs(n, 2304, 91, 7);
    using Result = KnobRuns::Result;
    auto run = [&](bool split) { return runs.run("LCEJIT_SPLIT_K", split ? "1" : "0"); };
    const Result split = run(true), again = run(true), whole = run(false);
    ASSERT_NE(split.plan.find("\"split_k\": 4"), std::string::npos) << "dA may split";
    ASSERT_EQ(whole.plan.find("\"split_k\""), std::string::npos) << "LCEJIT_SPLIT_K=0";
    expectOnlyDhSumOrderChanged(split, again, whole, "the split");
  }
}

/// [Note: dA stream-K]: a dA launch of 96 tiles (N = 1024 or 1000 at D = 2304: 8 row tiles
/// x 12 of 128 x 192) runs on 128 CTAs, 3 tiles to each group of 4, every CTA over 3/4 of
/// K, a helper CTA's partial tile handed to the owner through the workspace; at N = 1536
/// (144 tiles) and 2380 (228) a round of 132 tiles first, then a tail of 12 and 96 tiles
/// the same way (Planner.LhsStreamKLaunchesOfTheGpuTest pins these launches). It must give
/// the same bits on every run (the owner adds the helper's part in a fixed order), change
/// nothing but dH (loss and dW bit for bit), and move each dH element by at most one bf16
/// ulp from one CTA per tile (f32 sums in another order, rounded once). That some elements
/// do move shows the hand-over ran; N = 1000 and 2380 have a partial last row tile.
TEST(LceGpuClusters, StreamKIsDeterministicAndChangesOnlyTheSumOrder) {
  for (int64_t n : {1024, 1000, 1536, 2380}) {
    SCOPED_TRACE(fmt::format("N = {}", n));
    KnobRuns runs(n, 2304, 93, 11);
    using Result = KnobRuns::Result;
    auto run = [&](bool on) { return runs.run("LCEJIT_DA_STREAMK", on ? "1" : "0"); };
    const Result stream = run(true), again = run(true), whole = run(false);
    ASSERT_NE(stream.plan.find("\"stream_k\""), std::string::npos) << "dA may run stream-K";
    ASSERT_EQ(whole.plan.find("\"stream_k\""), std::string::npos) << "LCEJIT_DA_STREAMK=0";
    expectOnlyDhSumOrderChanged(stream, again, whole, "the stream-K hand-over");
  }
}

/// [Note: dA stream-K chains]: under a small budget, calls at D = 2304 keep their stored
/// values in dW's memory (one slab block) with room for the chain's slots, and the slab
/// block's dA runs its last round in chains (Planner.LhsChains pins plan::lhsChainQ): at
/// 100 MiB with tiles of 128 x 192 (12 a row tile), N = 3000: 2 rounds, then 24 tiles in
/// pairs (q = 1); N = 3500: 2 rounds, then 72 in chains of 2; N = 2380: a round, then 96 in
/// chains of 3; at 24 MiB with tiles of 128 x 256 (LCEJIT_DA_TILE=256, 9 a row tile), N =
/// 1100: one round of 81 tiles, 40 chains of 2 and one of 1. Every N has a partial last
/// row tile. It must give the same bits on every run (the owner adds the helper's part in a
/// fixed order), change nothing but dH (loss and dW bit for bit), and move each dH element
/// by at most one bf16 ulp from one CTA per tile. That some elements do move shows the
/// hand-over ran; a helper that wrote the wrong slot or an owner that read it early would
/// move them much further (or leave poison). At N = 3500 the same op then adds to dW
/// (ordinary blocks, no slots: the chain's pointer null).
TEST(LceGpuClusters, ChainsAreDeterministicAndChangeOnlyTheSumOrder) {
  struct Case {
    int64_t n, budgetMb;
    const char *tile;
  };
  for (const Case &c : {Case{3000, 100, nullptr}, Case{3500, 100, nullptr},
                        Case{2380, 100, nullptr}, Case{1100, 24, "256"}}) {
    SCOPED_TRACE(fmt::format("N = {}, {} MiB{}", c.n, c.budgetMb,
                             c.tile ? fmt::format(", dA tiles 128x{}", c.tile) : ""));
    lcejit::testing::ScopedEnv tile;
    if (c.tile)
      tile.set("LCEJIT_DA_TILE", c.tile);
    KnobRuns runs(c.n, 2304, 97, 13, c.budgetMb);
    using Result = KnobRuns::Result;
    auto run = [&](bool on) { return runs.run("LCEJIT_DA_CHAIN", on ? "1" : "0"); };
    const Result chain = run(true), again = run(true), whole = run(false);
    ASSERT_NE(chain.plan.find("\"chain\":"), std::string::npos) << "dA may chain";
    ASSERT_NE(chain.plan.find("dA's last round in chains"), std::string::npos)
        << "this call's schedule has the slots";
    ASSERT_EQ(whole.plan.find("\"chain\":"), std::string::npos) << "LCEJIT_DA_CHAIN=0";
    expectOnlyDhSumOrderChanged(chain, again, whole, "the chain's hand-over");
    if (c.n == 3500) {
      // The same op adding to dW: its ordinary blocks' dA gets no slots (a null pointer);
      // dW ends at twice the first call's within f32 sums of another order.
      const std::vector<float> twice = runs.runTwiceAdding("LCEJIT_DA_CHAIN", "1");
      double e2 = 0, r2 = 0;
      for (size_t i = 0; i < twice.size(); ++i) {
        float once;
        std::memcpy(&once, &chain.dW[i], 4);
        ASSERT_TRUE(std::isfinite(twice[i])) << "dW element " << i;
        e2 += (double(twice[i]) - 2.0 * once) * (double(twice[i]) - 2.0 * once);
        r2 += 4.0 * double(once) * once;
      }
      EXPECT_LE(std::sqrt(e2 / r2), 1e-3) << "dW after a call that adds to it";
    }
  }
}

/// [Note: launch trace] (runtime/LaunchTrace.h): with the trace on, a call records every
/// launch of its schedule in order (N = 3000 in two row blocks under a 100 MiB budget:
/// the blocked kernels twice), each with a positive GPU time and a gap of at least zero; the traced call's
/// loss is the untraced one's bit for bit; the trace is emptied by taking it, and a call
/// with it off records nothing.
TEST(LceGpuLaunchTrace, TimesEveryLaunchOfACall) {
  const int64_t n = 3000;
  LinearCrossEntropyOptions o;
  o.hidden = 256;
  o.vocab = 32000;
  o.dtype = DType::BF16;
  o.workspaceBudgetBytes = int64_t(100) << 20;
  RefKernels &k = RefKernels::get();
  DeviceBuffer h(n * o.hidden * 2), w(o.vocab * o.hidden * 2), y(n * 8), dH(n * o.hidden * 2),
      dW(o.vocab * o.hidden * 4);
  const double scale = 2.0 / std::pow(double(o.hidden), 0.25);
  k.fillRandom(h, o.dtype, n * o.hidden, 81, scale);
  k.fillRandom(w, o.dtype, o.vocab * o.hidden, 82, scale);
  k.fillTargets(y, DType::I64, n, 83, o.vocab, -100, 0);
  LinearCrossEntropy op(o);
  auto call = [&] {
    return op.forwardBackward(TensorRef{h.data(), o.dtype, {n, o.hidden}, {}},
                              TensorRef{w.data(), o.dtype, {o.vocab, o.hidden}, {}},
                              TensorRef{y.data(), DType::I64, {n}, {}},
                              MutableTensorRef{dH.data(), o.dtype, {n, o.hidden}, {}},
                              MutableTensorRef{dW.data(), DType::F32, {o.vocab, o.hidden}, {}});
  };
  (void)runtime::takeLaunchTrace(); // nothing left from earlier tests
  const float plain = call();
  EXPECT_TRUE(runtime::takeLaunchTrace().empty()) << "the trace is off by default";
  runtime::setLaunchTrace(true);
  const float traced = call();
  runtime::setLaunchTrace(false);
  const std::vector<runtime::LaunchTraceEntry> t = runtime::takeLaunchTrace();
  uint32_t a, b;
  std::memcpy(&a, &plain, 4);
  std::memcpy(&b, &traced, 4);
  EXPECT_EQ(a, b) << "tracing changes no result";
  ASSERT_FALSE(t.empty());
  int forwards = 0, lhs = 0, rhs = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    SCOPED_TRACE(fmt::format("launch {}: {}", i, t[i].kernel));
    EXPECT_GT(t[i].ms, 0.0);
    EXPECT_GE(t[i].gapMs, 0.0);
    if (i == 0) {
      EXPECT_EQ(t[i].gapMs, 0.0);
    }
    forwards += t[i].kernel.find("_fwd") != std::string::npos;
    lhs += t[i].kernel.find("_dlhs") != std::string::npos;
    rhs += t[i].kernel.find("_drhs") != std::string::npos;
  }
  std::cout << op.scheduleSummary(n) << ": " << t.size() << " launches traced\n";
  const int64_t blocks = op.scheduleSummary(n).find("2 row blocks") != std::string::npos ? 2 : 1;
  EXPECT_EQ(blocks, 2) << "the budget is meant to block the rows: " << op.scheduleSummary(n);
  EXPECT_EQ(forwards, blocks) << "one forward per row block";
  EXPECT_GE(lhs, blocks);
  EXPECT_EQ(lhs, rhs) << "dA and dB once per chunk of each block";
  EXPECT_TRUE(runtime::takeLaunchTrace().empty()) << "taking the trace empties it";
}

/// GradScale (issue 7): a host value or a device pointer multiplies dH and dW, not the
/// loss. Scales that are powers of two are exact in floating point, so the scaled
/// gradients must equal the unscaled ones times the scale bit for bit; 0.37 within bf16
/// rounding. On the wgmma path (V a multiple of 8) and the mma.sync one.
TEST(LceGpuGradScale, HostAndDeviceScalesMultiplyTheGradientsOnly) {
  for (int64_t vocab : {int64_t(32768), int64_t(32003)}) {
    SCOPED_TRACE(fmt::format("V = {}", vocab));
    LinearCrossEntropyOptions o;
    o.hidden = 256;
    o.vocab = vocab;
    o.dtype = DType::BF16;
    o.softcap = 30.0;
    o.ignoreIndex = -100;
    LinearCrossEntropy op(o);
    RefKernels &k = RefKernels::get();
    const int64_t n = 1500;
    DeviceBuffer h(n * o.hidden * 2), w(o.vocab * o.hidden * 2), y(n * 8), dH(n * o.hidden * 2),
        dW(o.vocab * o.hidden * 4), scaleDev(256);
    k.fillRandom(h, o.dtype, n * o.hidden, 71, 0.5);
    k.fillRandom(w, o.dtype, o.vocab * o.hidden, 72, 0.5);
    k.fillTargets(y, DType::I64, n, 73, o.vocab, -100, 9);
    TensorRef H{h.data(), o.dtype, {n, o.hidden}, {}};
    TensorRef W{w.data(), o.dtype, {o.vocab, o.hidden}, {}};
    TensorRef Y{y.data(), DType::I64, {n}, {}};
    MutableTensorRef DH{dH.data(), o.dtype, {n, o.hidden}, {}};
    MutableTensorRef DW{dW.data(), DType::F32, {o.vocab, o.hidden}, {}};
    auto run = [&](const GradScale &g, float *loss) {
      dH.poison();
      dW.poison();
      *loss = op.forwardBackward(H, W, Y, DH, DW, nullptr, g);
      return std::make_pair(dH.download<uint16_t>(), dW.download<float>());
    };
    float l0 = 0, l1 = 0, l2 = 0, l3 = 0;
    auto base = run(GradScale{}, &l0);
    auto quarter = run(GradScale{0.25f, nullptr}, &l1);
    const float minusHalf = -0.5f;
    LCEJIT_CU(runtime::cudaDriver().memcpyHtoD(scaleDev.ptr(), &minusHalf, 4));
    auto dev = run(GradScale{123.0f, scaleDev.data()}, &l2); // the pointer wins
    auto odd = run(GradScale{0.37f, nullptr}, &l3);
    for (float l : {l1, l2, l3})
      EXPECT_NEAR(l, l0, 1e-6 * std::abs(l0)) << "the loss is not scaled";
    auto bf16 = [](uint16_t v) { return bf16ToF32(v); };
    size_t badQ = 0, badD = 0;
    for (size_t i = 0; i < base.first.size(); ++i) {
      badQ += bf16(quarter.first[i]) != 0.25f * bf16(base.first[i]);
      badD += bf16(dev.first[i]) != -0.5f * bf16(base.first[i]);
    }
    for (size_t i = 0; i < base.second.size(); ++i) {
      badQ += quarter.second[i] != 0.25f * base.second[i];
      badD += dev.second[i] != -0.5f * base.second[i];
    }
    EXPECT_EQ(badQ, 0u) << "host scale 0.25: elements not exactly 0.25x the unscaled call";
    EXPECT_EQ(badD, 0u) << "device scale -0.5: elements not exactly -0.5x the unscaled call";
    double num = 0, den = 0;
    for (size_t i = 0; i < base.second.size(); ++i) {
      const double r = 0.37 * base.second[i], e = odd.second[i] - r;
      num += e * e;
      den += r * r;
    }
    EXPECT_LE(std::sqrt(num / den), 1e-2) << "host scale 0.37 on dW";
  }
}

TEST(LceGpuEdge, EmptyBatchGivesZeroLossAndZeroGradients) {
  LinearCrossEntropyOptions o = smallOptions();
  LinearCrossEntropy op(o);
  DeviceBuffer w(o.vocab * o.hidden * 2), dW(o.vocab * o.hidden * 4);
  RefKernels::get().fillRandom(w, o.dtype, o.vocab * o.hidden, 7, 0.5);
  dW.poison();
  float loss = op.forwardBackward(TensorRef{nullptr, o.dtype, {0, o.hidden}, {}},
                                  TensorRef{w.data(), o.dtype, {o.vocab, o.hidden}, {}},
                                  TensorRef{nullptr, DType::I64, {0}, {}},
                                  MutableTensorRef{nullptr, o.dtype, {0, o.hidden}, {}},
                                  MutableTensorRef{dW.data(), DType::F32, {o.vocab, o.hidden}, {}});
  EXPECT_EQ(loss, 0.0f);
  std::vector<float> g = dW.download<float>();
  for (float x : g)
    ASSERT_EQ(x, 0.0f);
}

TEST(LceGpuEdge, AllRowsIgnoredGivesZeroLossAndZeroGradients) {
  LinearCrossEntropyOptions o = smallOptions();
  LinearCrossEntropy op(o);
  const int64_t n = 33;
  RefKernels &k = RefKernels::get();
  DeviceBuffer h(n * o.hidden * 2), w(o.vocab * o.hidden * 2), y(n * 8);
  DeviceBuffer dH(n * o.hidden * 2), dW(o.vocab * o.hidden * 4);
  k.fillRandom(h, o.dtype, n * o.hidden, 11, 0.5);
  k.fillRandom(w, o.dtype, o.vocab * o.hidden, 12, 0.5);
  k.fillTargets(y, DType::I64, n, 13, o.vocab, *o.ignoreIndex, /*ignoreEvery=*/1);
  dH.poison();
  dW.poison();
  float loss = op.forwardBackward(TensorRef{h.data(), o.dtype, {n, o.hidden}, {}},
                                  TensorRef{w.data(), o.dtype, {o.vocab, o.hidden}, {}},
                                  TensorRef{y.data(), DType::I64, {n}, {}},
                                  MutableTensorRef{dH.data(), o.dtype, {n, o.hidden}, {}},
                                  MutableTensorRef{dW.data(), DType::F32, {o.vocab, o.hidden}, {}});
  EXPECT_EQ(loss, 0.0f);
  for (uint16_t x : dH.download<uint16_t>())
    ASSERT_EQ(x & 0x7fff, 0) << "dH must be exactly zero";
  for (float x : dW.download<float>())
    ASSERT_EQ(x, 0.0f);
}

TEST(LceGpuEdge, TargetOutOfRangeIsReportedWithRowAndValue) {
  LinearCrossEntropyOptions o = smallOptions();
  LinearCrossEntropy op(o);
  const int64_t n = 100;
  RefKernels &k = RefKernels::get();
  DeviceBuffer h(n * o.hidden * 2), w(o.vocab * o.hidden * 2), y(n * 8);
  DeviceBuffer dH(n * o.hidden * 2), dW(o.vocab * o.hidden * 4);
  k.fillRandom(h, o.dtype, n * o.hidden, 21, 0.5);
  k.fillRandom(w, o.dtype, o.vocab * o.hidden, 22, 0.5);
  k.fillTargets(y, DType::I64, n, 23, o.vocab, *o.ignoreIndex, 0, /*badRow=*/42, /*badValue=*/o.vocab);
  try {
    op.forwardBackward(TensorRef{h.data(), o.dtype, {n, o.hidden}, {}},
                       TensorRef{w.data(), o.dtype, {o.vocab, o.hidden}, {}},
                       TensorRef{y.data(), DType::I64, {n}, {}},
                       MutableTensorRef{dH.data(), o.dtype, {n, o.hidden}, {}},
                       MutableTensorRef{dW.data(), DType::F32, {o.vocab, o.hidden}, {}});
    FAIL() << "expected Error(DeviceCheck)";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::DeviceCheck);
    EXPECT_NE(std::string(e.what()).find("targets[42] = 1000"), std::string::npos) << e.what();
  }
  // A later good call works and reports nothing.
  k.fillTargets(y, DType::I64, n, 23, o.vocab, *o.ignoreIndex, 0);
  float loss = op.forwardBackward(TensorRef{h.data(), o.dtype, {n, o.hidden}, {}},
                                  TensorRef{w.data(), o.dtype, {o.vocab, o.hidden}, {}},
                                  TensorRef{y.data(), DType::I64, {n}, {}},
                                  MutableTensorRef{dH.data(), o.dtype, {n, o.hidden}, {}},
                                  MutableTensorRef{dW.data(), DType::F32, {o.vocab, o.hidden}, {}});
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0.0f);
}

TEST(LceGpuEdge, MisalignedPointerIsRejectedBeforeAnyLaunch) {
  LinearCrossEntropyOptions o = smallOptions();
  LinearCrossEntropy op(o);
  DeviceBuffer h(8 * o.hidden * 2 + 16), w(o.vocab * o.hidden * 2), y(8 * 8), dH(8 * o.hidden * 2),
      dW(o.vocab * o.hidden * 4);
  char *bad = static_cast<char *>(h.data()) + 2;
  try {
    op.forwardBackward(TensorRef{bad, o.dtype, {8, o.hidden}, {}},
                       TensorRef{w.data(), o.dtype, {o.vocab, o.hidden}, {}},
                       TensorRef{y.data(), DType::I64, {8}, {}},
                       MutableTensorRef{dH.data(), o.dtype, {8, o.hidden}, {}},
                       MutableTensorRef{dW.data(), DType::F32, {o.vocab, o.hidden}, {}});
    FAIL() << "expected Error(InvalidArgument)";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("hidden.data"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << e.what();
  }
}

TEST(LceGpuEdge, NewBucketCompilesOnceFromAnEmptyCacheAndSameBucketNever) {
  LinearCrossEntropyOptions o = smallOptions();
  o.hidden = 72; // a shape no other test uses: its programs are not cached yet
  LinearCrossEntropy op(o);
  RefKernels &k = RefKernels::get();
  auto run = [&](int64_t n) {
    DeviceBuffer h(n * o.hidden * 2), w(o.vocab * o.hidden * 2), y(n * 8), dH(n * o.hidden * 2),
        dW(o.vocab * o.hidden * 4);
    k.fillRandom(h, o.dtype, n * o.hidden, uint64_t(n), 0.5);
    k.fillRandom(w, o.dtype, o.vocab * o.hidden, 5, 0.5);
    k.fillTargets(y, DType::I64, n, uint64_t(n) + 1, o.vocab, -100, 0);
    return op.forwardBackward(TensorRef{h.data(), o.dtype, {n, o.hidden}, {}},
                              TensorRef{w.data(), o.dtype, {o.vocab, o.hidden}, {}},
                              TensorRef{y.data(), DType::I64, {n}, {}},
                              MutableTensorRef{dH.data(), o.dtype, {n, o.hidden}, {}},
                              MutableTensorRef{dW.data(), DType::F32, {o.vocab, o.hidden}, {}});
  };
  // An empty disk cache: the first N of a new bucket compiles exactly once.
  char dirTemplate[] = "/tmp/lcejit-gpu-cache-XXXXXX";
  ASSERT_NE(::mkdtemp(dirTemplate), nullptr);
  const char *old = std::getenv("LCEJIT_CACHE_DIR");
  std::string saved = old ? old : "";
  ::setenv("LCEJIT_CACHE_DIR", dirTemplate, 1);
  knobs::reloadForTesting();
  int64_t c0 = LinearCrossEntropy::compileCount();
  run(300);
  int64_t c1 = LinearCrossEntropy::compileCount();
  run(301);
  run(1000);
  int64_t c2 = LinearCrossEntropy::compileCount();
  run(1025); // the next bucket (1025..4096): one more, unless its kernels are the same
  int64_t c3 = LinearCrossEntropy::compileCount();
  // [Note: module parts]: a new bucket compiles only kernels whose code is new.
  auto kernelsOf = [&](int64_t n) {
    const std::string m = op.inspect(n, "cuda");
    return m.substr(m.find("// ==== generated kernels ===="));
  };
  const bool newCode = kernelsOf(1025) != kernelsOf(1000);
  if (old)
    ::setenv("LCEJIT_CACHE_DIR", saved.c_str(), 1);
  else
    ::unsetenv("LCEJIT_CACHE_DIR");
  knobs::reloadForTesting();
  std::filesystem::remove_all(dirTemplate);
  EXPECT_EQ(c1 - c0, 1); // a new bucket, an empty cache dir: exactly one compile
  EXPECT_EQ(c2, c1);     // same bucket (257..1024): no compile
  EXPECT_EQ(c3 - c2, newCode ? 1 : 0) << "a new bucket compiles once where its code is new";
}

/// Issue 5's peaked loss against the floor that the logits' GEMM sets: the loss that
/// cuBLAS's own logits give (bf16 tensor cores, f32 accumulation; cublasLogitLoss) on the
/// same peaked data. The tensor cores' accumulation truncates, and on a peaked row every
/// logit's error is a relative error of the loss, so at D = 4096 any bf16 GEMM with f32
/// accumulation leaves ~7e-6 there (issue 5 asked 2e-6): lcejit's fast and exact precision
/// must be within kTensorCoreLossFloorFactor of that floor, at D = 512 and 4096, and the
/// floor must show at D = 4096 (else the test measures nothing).
TEST(LceGpuNumerics, PeakedLossIsAtTheFloorOfCublasLogits) {
  Cublas blas;
  std::string why;
  if (!blas.load(&why))
    GTEST_SKIP() << "no cuBLAS to set the floor: " << why;
  RefKernels &k = RefKernels::get();
  for (int64_t d : {int64_t(512), int64_t(4096)})
    for (Precision prec : {Precision::Fast, Precision::Exact}) {
      const int64_t n = 512, v = 8192;
      LinearCrossEntropyOptions o;
      o.hidden = d;
      o.vocab = v;
      o.dtype = DType::BF16;
      o.precision = prec;
      LinearCrossEntropy op(o);
      DeviceBuffer h(n * d * 2), w(v * d * 2), y(n * 8), dH(n * d * 2), dW(v * d * 4);
      const uint64_t seed = 5150 + static_cast<uint64_t>(d);
      const double scale = 2.0 / std::pow(double(d), 0.25);
      k.fillRandom(h, DType::BF16, n * d, seed, scale);
      k.fillRandom(w, DType::BF16, v * d, seed + 1, scale);
      k.fillTargets(y, DType::I64, n, seed + 2, v, o.ignoreIndex.value_or(0), 7);
      k.peakRows(h, w, DType::BF16, y, DType::I64, n, d, v, 20.0);
      dH.poison();
      dW.poison();
      const float loss = op.forwardBackward({h.data(), DType::BF16, {n, d}, {}},
                                            {w.data(), DType::BF16, {v, d}, {}},
                                            {y.data(), DType::I64, {n}, {}},
                                            {dH.data(), DType::BF16, {n, d}, {}},
                                            {dW.data(), DType::F32, {v, d}, {}});
      const GpuReference ref = gpuReference(o, h, w, y, n);
      const double floorLoss = cublasLogitLoss(o, blas, h, w, y, n);
      const double err = std::abs(double(loss) - ref.loss) / std::abs(ref.loss);
      const double floorErr = std::abs(floorLoss - ref.loss) / std::abs(ref.loss);
      const std::string what =
          fmt::format("peaked D = {} {}: loss rel err {:.3g}, cuBLAS's logits {:.3g} (ref {:.9g})",
                      d, prec == Precision::Exact ? "exact" : "fast", err, floorErr, ref.loss);
      std::cout << what << "\n";
      ASSERT_LT(ref.loss, 1e-2) << what << ": the rows must be peaked";
      EXPECT_LE(err, kTensorCoreLossFloorFactor * floorErr + kLossFloorSlack) << what;
      if (d == 4096) {
        EXPECT_GT(floorErr, kLossTolerance) << what << ": the floor must show at D = 4096";
      }
    }
}

} // namespace
} // namespace lcejit::gputest
