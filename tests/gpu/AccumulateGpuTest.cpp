//===- AccumulateGpuTest.cpp - Gradient accumulation (β = 1) on the GPU (issue 7) ===//
//
//   Cases/LceGpuAccumulate.AddsTheGradientsToPrefilledBuffers/<case>
//   LceGpuAccumulateLoop.MicroBatchesEqualTheWholeBatch
//
// Every case: random inputs; a fresh call (gradients written, checked against fp64 like
// LceGpu.*); then dH and dW prefilled with random values (never zeros) of the RMS of the
// gradient, and the same call with Accumulate: a gradient it accumulates must equal the
// prefill plus the fp64 gradient (times the GradScale), one it does not the fp64
// gradient, and the loss is the fresh call's. Where an f32 output element is written once
// by one add (f32 dW without row blocks, f32 dH in one chunk), the accumulated value must
// be fl(prefill + fresh) bit for bit (the kernels are deterministic). The warm path and
// CUDA graph capture of accumulating calls are in HardeningGpuTest.cpp (it owns the
// allocation counter of this binary).
//
//===----------------------------------------------------------------------===//

#include "ops/lib/LceJit.h"
#include "tests/gpu/GpuSupport.h"
#include "tests/gpu/Tolerances.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lcejit::gputest {
namespace {

struct AccCase {
  const char *name;
  DType dtype;
  int64_t n, d, v;
  std::optional<double> softcap;
  int ignoreEvery; ///< every k-th row ignored (0: none)
  DType gradWeight;
  bool accHidden, accWeight; ///< Accumulate{gradHidden, gradWeight}
  float scale = 1.0f;        ///< GradScale
  bool deviceScale = false;  ///< the scale through a device pointer
  Precision precision = Precision::Fast;
  bool peaked = false;  ///< target logit raised by 20 (softmax near one-hot)
  int64_t budgetMb = 0; ///< 0: the default workspace budget
  /// What the schedule must be (checked, so the case tests what it says): > 1 row blocks,
  /// > 1 chunks.
  bool wantRowBlocks = false, wantChunks = false;
};

void PrintTo(const AccCase &c, std::ostream *os) { *os << c.name; }

class LceGpuAccumulate : public ::testing::TestWithParam<AccCase> {};

/// fl(old + fresh) == acc for every element (f32 buffers of `count` floats), except in the
/// rows listed in `twoRoundings` (rows of `rowLength` elements): there acc = fl(fl(old + g)
/// + c) and fresh = fl(g + c), c the target-column residual's correction, which is added
/// after the GEMM wrote or accumulated g ([Note: the target-column residual] in
/// plan/Program.h: the dW rows that are some row's target). Those elements are held to
/// the two roundings' bound, |acc − (old + fresh)| <= 2^-22·(|old| + |fresh| + |acc|);
/// a lost or doubled term is off by far more.
void expectBitwiseSum(const DeviceBuffer &old, const DeviceBuffer &fresh,
                      const DeviceBuffer &acc, int64_t count, const char *what,
                      const std::set<int64_t> &twoRoundings = {}, int64_t rowLength = 1) {
  std::vector<float> o(static_cast<size_t>(count)), f(o.size()), a(o.size());
  old.downloadTo(o.data(), count * 4);
  fresh.downloadTo(f.data(), count * 4);
  acc.downloadTo(a.data(), count * 4);
  int64_t bad = 0, first = -1, loose = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const float want = o[i] + f[i];
    bool ok = std::memcmp(&want, &a[i], 4) == 0;
    if (!ok && twoRoundings.count(static_cast<int64_t>(i) / rowLength)) {
      const double bound = std::ldexp(std::abs(double(o[i])) + std::abs(double(f[i])) +
                                          std::abs(double(a[i])),
                                      -22);
      ok = std::abs(double(a[i]) - (double(o[i]) + double(f[i]))) <= bound;
      loose += ok;
    }
    if (!ok) {
      if (first < 0)
        first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements are not fl(prefill + fresh); first "
                    << first << (first >= 0 ? fmt::format(": {} + {} -> {}", o[size_t(first)],
                                                          f[size_t(first)], a[size_t(first)])
                                            : std::string());
  if (twoRoundings.empty())
    return;
  std::cout << what << ": " << loose << " elements of " << twoRoundings.size()
            << " target rows within two roundings, the rest bit for bit\n";
}

/// A copy of an f32 device buffer (through the host).
DeviceBuffer copyOf(const DeviceBuffer &b) {
  DeviceBuffer c(b.bytes());
  std::vector<unsigned char> host(static_cast<size_t>(b.bytes()));
  b.downloadTo(host.data(), b.bytes());
  LCEJIT_CU(runtime::cudaDriver().memcpyHtoD(c.ptr(), host.data(), host.size()));
  LCEJIT_CU(runtime::cudaDriver().ctxSynchronize());
  return c;
}

TEST_P(LceGpuAccumulate, AddsTheGradientsToPrefilledBuffers) {
  const AccCase &c = GetParam();
  LinearCrossEntropyOptions o;
  o.hidden = c.d;
  o.vocab = c.v;
  o.dtype = c.dtype;
  o.gradWeightDType = c.gradWeight;
  o.softcap = c.softcap;
  o.ignoreIndex = -100;
  o.precision = c.precision;
  o.workspaceBudgetBytes = c.budgetMb << 20;
  LinearCrossEntropy op(o);
  const bool exact = c.precision == Precision::Exact || c.dtype != DType::BF16;
  RefKernels &k = RefKernels::get();
  const runtime::CudaDriver &drv = runtime::cudaDriver();

  // The run schedule of this N (the op plans the same Program for the device).
  ops::LceJit jit(o);
  const plan::RunSchedule sched =
      jit.lookup(c.n, ops::LceJit::deviceTarget(), /*compile=*/false).compiled->program.runSchedule(c.n);
  SCOPED_TRACE(sched.describe());
  if (c.wantRowBlocks) {
    ASSERT_GT(sched.rowBlocks, 1) << "the case must cut its rows into blocks";
  }
  if (c.wantChunks) {
    ASSERT_GT(sched.chunks, 1) << "the case must cut the vocabulary into chunks";
  }
  if (std::string(c.name).find("_slabs_") != std::string::npos) {
    ASSERT_NE(op.scheduleSummary(c.n).find("in the gradient's memory"), std::string::npos)
        << "the case must keep its stored values in dW: " << op.scheduleSummary(c.n);
    if (std::string(c.name).find("_mixed_") != std::string::npos) {
      ASSERT_NE(op.scheduleSummary(c.n).find(" slabs, then "), std::string::npos)
          << "the case must run ordinary blocks after its slabs: " << op.scheduleSummary(c.n);
    }
    if (std::string(c.name).find("_tails_") != std::string::npos) {
      ASSERT_NE(op.scheduleSummary(c.n).find("in the workspace's tails"), std::string::npos)
          << "the case must keep rows of its slabs in the workspace's tails: "
          << op.scheduleSummary(c.n);
    }
    if (std::string(c.name).find("_inplace_") != std::string::npos) {
      ASSERT_NE(op.scheduleSummary(c.n).find("a call that adds to dW: the recompute Program"),
                std::string::npos)
          << "the accumulating call must run the recompute Program: " << op.scheduleSummary(c.n);
    }
  }

  const int64_t es = dtypeSize(c.dtype), nd = c.n * c.d, vd = c.v * c.d;
  DeviceBuffer h(nd * es), w(vd * es), y(c.n * 8), dH(nd * es), dW(vd * dtypeSize(c.gradWeight)),
      scaleDev(256);
  const uint64_t seed = std::hash<std::string>{}(c.name);
  const double inputScale = 2.0 / std::pow(double(c.d), 0.25);
  k.fillRandom(h, c.dtype, nd, seed, inputScale);
  k.fillRandom(w, c.dtype, vd, seed + 1, inputScale);
  k.fillTargets(y, DType::I64, c.n, seed + 2, c.v, -100, c.ignoreEvery);
  if (c.peaked)
    k.peakRows(h, w, c.dtype, y, DType::I64, c.n, c.d, c.v, 20.0);
  GradScale gs{c.scale, nullptr};
  if (c.deviceScale) {
    LCEJIT_CU(drv.memcpyHtoD(scaleDev.ptr(), &c.scale, 4));
    gs = GradScale{123.0f, scaleDev.data()}; // the pointer wins
  }
  const TensorRef H{h.data(), c.dtype, {c.n, c.d}, {}};
  const TensorRef W{w.data(), c.dtype, {c.v, c.d}, {}};
  const TensorRef Y{y.data(), DType::I64, {c.n}, {}};
  const MutableTensorRef DH{dH.data(), c.dtype, {c.n, c.d}, {}};
  const MutableTensorRef DW{dW.data(), c.gradWeight, {c.v, c.d}, {}};
  const bool peaked = c.peaked;

  // 1. A fresh call: scale · G, written.
  dH.poison();
  dW.poison();
  const float loss0 = op.forwardBackward(H, W, Y, DH, DW, nullptr, gs);
  GpuReference ref = gpuReference(o, h, w, y, c.n);
  k.scale(ref.dH, c.scale, nd);
  k.scale(ref.dW, c.scale, vd);
  const Comparison fh = k.compare(dH, c.dtype, ref.dH, nd);
  const Comparison fw = k.compare(dW, c.gradWeight, ref.dW, vd);
  EXPECT_LE(std::abs(double(loss0) - ref.loss),
            (peaked ? peakedLossTolerance(c.d) : kLossTolerance) * std::abs(ref.loss));
  EXPECT_EQ(fh.nonFinite, 0);
  EXPECT_EQ(fw.nonFinite, 0);
  EXPECT_LE(fh.relError, hiddenGradTolerance(c.dtype, exact, peaked, fh.floor, fh.bf16Floor)) << "fresh dH";
  EXPECT_LE(fw.relError, gradTolerance(c.gradWeight, exact, peaked, fw.floor, fw.bf16Floor))
      << "fresh dW";
  // Fresh f32 results, for the bitwise checks below.
  const bool bitwiseW = c.accWeight && c.gradWeight == DType::F32 && sched.rowBlocks == 1;
  const bool bitwiseH = c.accHidden && c.dtype == DType::F32 && sched.chunks <= 1;
  std::optional<DeviceBuffer> freshW, freshH;
  if (bitwiseW)
    freshW = copyOf(dW);
  if (bitwiseH)
    freshH = copyOf(dH);

  // 2. Prefill: uniform in [-a, a] with a = √3 · RMS of the gradient (so the prefill has
  // the gradient's RMS); never zeros. The expected values: prefill + scale · G for the
  // gradients that accumulate, scale · G for the others.
  const double rmsH = fh.refNorm / std::sqrt(double(std::max<int64_t>(nd, 1)));
  const double rmsW = fw.refNorm / std::sqrt(double(vd));
  ASSERT_GT(rmsW, 0.0);
  k.fillRandom(dH, c.dtype, nd, seed + 3, std::sqrt(3.0) * rmsH);
  k.fillRandom(dW, c.gradWeight, vd, seed + 4, std::sqrt(3.0) * rmsW);
  if (c.accHidden)
    k.scaleAdd(ref.dH, 1.0, dH, c.dtype, nd);
  if (c.accWeight)
    k.scaleAdd(ref.dW, 1.0, dW, c.gradWeight, vd);
  std::optional<DeviceBuffer> oldW, oldH;
  if (bitwiseW)
    oldW = copyOf(dW);
  if (bitwiseH)
    oldH = copyOf(dH);

  // 3. The same call, accumulating.
  const Accumulate acc{c.accHidden, c.accWeight};
  const float loss1 = op.forwardBackward(H, W, Y, DH, DW, nullptr, gs, acc);
  EXPECT_NEAR(loss1, loss0, 1e-6 * std::abs(loss0)) << "the loss is not accumulated";
  const Comparison ah = k.compare(dH, c.dtype, ref.dH, nd);
  const Comparison aw = k.compare(dW, c.gradWeight, ref.dW, vd);
  const std::string report = fmt::format(
      "{}: dH {} rel err {:.3g} (floor {:.3g}, bf16 floor {:.3g}; fresh {:.3g}), dW {} rel err "
      "{:.3g} (floor {:.3g}, bf16 floor {:.3g}; fresh {:.3g}); max |err| dH {:.3g} dW {:.3g}; "
      "{}",
      c.name, c.accHidden ? "accumulated" : "written", ah.relError, ah.floor, ah.bf16Floor,
      fh.relError, c.accWeight ? "accumulated" : "written", aw.relError, aw.floor,
      aw.bf16Floor, fw.relError, ah.maxAbsError, aw.maxAbsError, sched.describe());
  std::cout << report << "\n";
  RecordProperty("errors", report);
  EXPECT_EQ(ah.nonFinite, 0) << "dH";
  EXPECT_EQ(aw.nonFinite, 0) << "dW";
  EXPECT_LE(ah.relError, hiddenGradTolerance(c.dtype, exact, peaked, ah.floor, ah.bf16Floor)) << "dH";
  EXPECT_LE(aw.relError, gradTolerance(c.gradWeight, exact, peaked, aw.floor, aw.bf16Floor))
      << "dW";
  if (c.dtype == DType::BF16) {
    EXPECT_LE(ah.maxAbsError, c.accHidden
                                  ? accumulatedMaxAbsTolerance(c.dtype, ah.maxAbsRef, fh.maxAbsRef)
                                  : kMaxBf16UlpsOfLargest * bf16Ulp(ah.maxAbsRef))
        << "dH, per element";
    EXPECT_LE(aw.maxAbsError,
              c.accWeight ? accumulatedMaxAbsTolerance(c.gradWeight, aw.maxAbsRef, fw.maxAbsRef)
                          : kMaxBf16UlpsOfLargest * bf16Ulp(aw.maxAbsRef))
        << "dW, per element";
  }
  if (bitwiseW) {
    // In fast precision (bf16 inputs) the dW rows that are targets take the residual's
    // correction after the GEMM's sum: two roundings there.
    std::set<int64_t> targetRows;
    if (!exact) {
      std::vector<int64_t> yy(static_cast<size_t>(c.n));
      y.downloadTo(yy.data(), c.n * 8);
      for (int64_t t : yy)
        if (t >= 0 && t < c.v)
          targetRows.insert(t);
    }
    expectBitwiseSum(*oldW, *freshW, dW, vd, "dW (f32, one row block)", targetRows, c.d);
  }
  if (bitwiseH)
    expectBitwiseSum(*oldH, *freshH, dH, nd, "dH (f32, one chunk)");
}

constexpr DType BF = DType::BF16, F32 = DType::F32, F16 = DType::F16;

INSTANTIATE_TEST_SUITE_P(
    Cases, LceGpuAccumulate,
    ::testing::Values(
        // wgmma path (V a multiple of 8), f32 dW: F32OutEpilogue adds; dH bf16 via the cast.
        AccCase{"bf16_wgmma_softcap_ignore_dWf32_both", BF, 1500, 256, 32000, 30.0, 9, F32, true,
                true},
        // mma.sync path (V = 32003), bf16 dW read, added in f32 and rounded once; a host scale.
        AccCase{"bf16_mma_dWbf16_both_scale037", BF, 1000, 256, 32003, {}, 7, BF, true, true,
                0.37f},
        // wgmma, bf16 dW (RoundedOutEpilogue<bf16, true>), a device scale, dW only.
        AccCase{"bf16_wgmma_dWbf16_dWonly_devscale", BF, 1000, 256, 32000, 30.0, 5, BF, false,
                true, -0.5f, true},
        // Peaked logits (softmax near one-hot), bf16 dW, both.
        AccCase{"bf16_peaked_wgmma_dWbf16_both", BF, 1000, 512, 32000, {}, 0, BF, true, true,
                1.0f, false, Precision::Fast, true},
        // The Llama hidden size, dH only (dW written).
        // In exact precision: in fast precision this case's fresh call (before anything is
        // accumulated) measured dH 1.82x and f32 dW 1.40x the bf16 floors, on both
        // mainloops and at V = 32000 and 128256 alike, above the suite's fast-mode factors
        // (1.6, 1.2): an open fast-mode numerics finding (docs/numerics.md), not an
        // accumulation one.
        AccCase{"bf16_exact_n4097_d4096_dHonly", BF, 4097, 4096, 32000, 30.0, 11, F32, true, false,
                1.0f, false, Precision::Exact},
        // The materialized dA adding round(old + acc) to a bf16 dH with more output tiles
        // than SMs (the slab block's 4096 rows: 256 tiles of 128x256, persistent CTAs
        // taking one or two each): no other case accumulates through a materialized dA of
        // several tiles a CTA.
        AccCase{"bf16_slabs_n4097_d2048_v128256_dHonly", BF, 4097, 2048, 128256, {}, 0, F32,
                true, false, 0.5f},
        // A 4 MiB budget: row blocks (dW f32 added by block 0 too) and vocabulary chunks, on
        // both mainloops.
        AccCase{"bf16_budget4_rowblocks_chunks_wgmma", BF, 4097, 256, 32000, 30.0, 7, F32, true,
                true, 1.0f, false, Precision::Fast, false, 4, true, true},
        AccCase{"bf16_budget4_rowblocks_chunks_mma_scaled", BF, 4097, 256, 32003, {}, 0, F32, true,
                true, 0.25f, false, Precision::Fast, false, 4, true, true},
        // [Note: stored values in dW]: a 100 MiB budget blocks these 2000 rows in the
        // ordinary schedule; a call that overwrites dW keeps them in one block in dW's
        // memory. Both: the fresh call takes the slabs, the accumulating one the blocks
        // (one op, two prepared runs); dH only: both calls take the slabs.
        AccCase{"bf16_slabs_n2000_d1024_both_budget100", BF, 2000, 1024, 32000, 30.0, 7, F32,
                true, true, 1.0f, false, Precision::Fast, false, 100, true, false},
        AccCase{"bf16_slabs_n2000_d1024_dHonly_budget100", BF, 2000, 1024, 32000, {}, 0, F32,
                true, false, 0.5f, false, Precision::Fast, false, 100, true, false},
        // 2560 rows in slabs (512 in the tails: [Note: slab tails]), an ordinary block
        // after them; the accumulating call: blocks.
        AccCase{"bf16_slabs_tails_mixed_n3500_d1024_both_budget72", BF, 3500, 1024, 32000, 30.0, 3,
                F32, true, true, 1.0f, false, Precision::Fast, false, 72, true, false},
        // [Note: values scaled in place]: a budget too small for the ordinary materialized
        // blocks: the fresh call runs the slab-only Program, the accumulating one the
        // recompute Program of the bucket (one op, two Programs); with a gradient scale,
        // the scaled graph's two.
        AccCase{"bf16_slabs_inplace_n2000_d1024_both_budget32", BF, 2000, 1024, 32000, 30.0, 7,
                F32, true, true, 1.0f, false, Precision::Fast, false, 32, false, false},
        AccCase{"bf16_slabs_inplace_n1999_d1024_both_scaled_budget32", BF, 1999, 1024, 32000,
                {}, 0, F32, true, true, 0.5f, false, Precision::Fast, false, 32, false, false},
        // bf16 dW never blocks its rows; a small budget still chunks the vocabulary.
        AccCase{"bf16_budget4_dWbf16_chunks", BF, 2000, 256, 32000, 30.0, 3, BF, true, true, 1.0f,
                false, Precision::Fast, false, 4, false, true},
        // Exact precision (hi + lo dZ, mma.sync), f32 dW.
        AccCase{"bf16_exact_dWf32_both", BF, 1000, 256, 32003, 30.0, 6, F32, true, true, 1.0f,
                false, Precision::Exact},
        // f32 inputs: dH is the dLhs GEMM's own output (chunk 0 adds), SIMT.
        AccCase{"f32_dH_direct_both", F32, 127, 200, 1000, 30.0, 4, F32, true, true},
        AccCase{"f32_chunks_both_budget1", F32, 300, 64, 32003, {}, 5, F32, true, true, 1.0f,
                false, Precision::Fast, false, 1, false, true},
        // f16 inputs, f16 dW: the f16 read-add-round in the dRhs epilogue and the cast.
        AccCase{"f16_dWf16_both", F16, 300, 64, 1000, 30.0, 0, F16, true, true},
        AccCase{"f16_dWf32_dHonly", F16, 127, 200, 32003, {}, 6, F32, true, false}),
    [](const ::testing::TestParamInfo<AccCase> &i) { return std::string(i.param.name); });

/// The framework's loop: three micro-batches of one batch (Sum reduction), dW accumulated
/// over them (Accumulate{.gradWeight = i > 0}) and each dH written into its rows of the
/// batch's dH. The sum of the losses, the rows of dH and the accumulated dW match the fp64
/// reference of the whole batch, and dW matches one call on the whole batch to f32
/// summation order (dZ does not depend on how rows are grouped).
TEST(LceGpuAccumulateLoop, MicroBatchesEqualTheWholeBatch) {
  for (int64_t vocab : {int64_t(32000), int64_t(32003)}) {
    SCOPED_TRACE(fmt::format("V = {}", vocab));
    LinearCrossEntropyOptions o;
    o.hidden = 256;
    o.vocab = vocab;
    o.dtype = DType::BF16;
    o.softcap = 30.0;
    o.ignoreIndex = -100;
    o.reduction = Reduction::Sum;
    LinearCrossEntropy op(o);
    RefKernels &k = RefKernels::get();
    const int64_t sizes[3] = {1000, 1500, 37};
    const int64_t n = sizes[0] + sizes[1] + sizes[2], d = o.hidden, v = o.vocab;
    DeviceBuffer h(n * d * 2), w(v * d * 2), y(n * 8), dH(n * d * 2), dW(v * d * 4),
        dHAll(n * d * 2), dWAll(v * d * 4);
    const double inputScale = 2.0 / std::pow(double(d), 0.25);
    k.fillRandom(h, o.dtype, n * d, 1101, inputScale);
    k.fillRandom(w, o.dtype, v * d, 1102, inputScale);
    k.fillTargets(y, DType::I64, n, 1103, v, -100, 8);
    dH.poison();
    dW.poison(); // the first micro-batch writes dW: nothing of the poison may stay
    const TensorRef W{w.data(), o.dtype, {v, d}, {}};
    const MutableTensorRef DW{dW.data(), DType::F32, {v, d}, {}};
    double lossSum = 0;
    int64_t row0 = 0;
    for (int i = 0; i < 3; ++i) {
      const int64_t rows = sizes[i];
      char *hp = static_cast<char *>(h.data()) + row0 * d * 2;
      char *yp = static_cast<char *>(y.data()) + row0 * 8;
      char *dhp = static_cast<char *>(dH.data()) + row0 * d * 2;
      lossSum += op.forwardBackward(TensorRef{hp, o.dtype, {rows, d}, {}}, W,
                                    TensorRef{yp, DType::I64, {rows}, {}},
                                    MutableTensorRef{dhp, o.dtype, {rows, d}, {}}, DW, nullptr,
                                    GradScale{}, Accumulate{false, i > 0});
      row0 += rows;
    }
    GpuReference ref = gpuReference(o, h, w, y, n);
    EXPECT_LE(std::abs(lossSum - ref.loss), kLossTolerance * std::abs(ref.loss))
        << "sum of the micro-batch losses " << lossSum << " vs the batch's " << ref.loss;
    const Comparison ch = k.compare(dH, o.dtype, ref.dH, n * d);
    const Comparison cw = k.compare(dW, DType::F32, ref.dW, v * d);
    EXPECT_EQ(ch.nonFinite, 0);
    EXPECT_EQ(cw.nonFinite, 0);
    EXPECT_LE(ch.relError, hiddenGradTolerance(o.dtype, false, false, ch.floor, ch.bf16Floor)) << "dH";
    EXPECT_LE(cw.relError, gradTolerance(DType::F32, false, false, cw.floor, cw.bf16Floor))
        << "dW accumulated over the micro-batches";
    EXPECT_LE(cw.maxAbsError, kMaxBf16UlpsOfLargest * bf16Ulp(cw.maxAbsRef));
    // One call on the whole batch: the same dZ, summed in another order.
    op.forwardBackward(TensorRef{h.data(), o.dtype, {n, d}, {}}, W,
                       TensorRef{y.data(), DType::I64, {n}, {}},
                       MutableTensorRef{dHAll.data(), o.dtype, {n, d}, {}},
                       MutableTensorRef{dWAll.data(), DType::F32, {v, d}, {}});
    std::vector<float> a = dW.download<float>(), b = dWAll.download<float>();
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      e2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      r2 += double(b[i]) * b[i];
    }
    EXPECT_LE(std::sqrt(e2 / r2), kRegroupedF32SumTolerance)
        << "micro-batched dW vs one call on the batch (f32 summation order only)";
  }
}

} // namespace
} // namespace lcejit::gputest
