//===- PlannerTest.cpp - The planner is a pure, predictable function ------===//

#include "TestSupport.h"

#include "lcejit/Error.h"
#include "compiler/plan/SchedulePolicy.h"
#include "compiler/reference/ProgramInterpreter.h"

#include <nlohmann/json.hpp>

#include <map>
#include <set>

using namespace lcejit;
using namespace lcejit::testing;
using plan::KernelKind;
using plan::Param;

namespace {

/// Options on the portable mma.sync mainloop (the decisions most tests here check);
/// wgmmaOptions() for the sm_90a mainloop.
plan::PlanOptions options(int64_t tokens, int64_t budget = int64_t(1) << 30, int32_t sms = 132) {
  plan::PlanOptions o;
  o.tokens = tokens;
  o.workspaceBudgetBytes = budget;
  o.target.numSMs = sms;
  o.mainloop = plan::Mainloop::MmaSync;
  return o;
}

plan::PlanOptions wgmmaOptions(int64_t tokens) {
  plan::PlanOptions o = options(tokens);
  o.mainloop = plan::Mainloop::Auto;
  return o;
}

/// The first decision line of `p` that contains `what`, or "".
std::string decision(const plan::Program &p, const std::string &what) {
  for (const std::string &d : p.decisions)
    if (d.find(what) != std::string::npos)
      return d;
  return std::string();
}

std::unique_ptr<pipeline::FusedGraph> lceFused(int64_t d = 24, int64_t v = 257,
                                               DType dt = DType::BF16,
                                               std::optional<double> softcap = 30.0) {
  fe::LceSpec s;
  s.hidden = d;
  s.vocab = v;
  s.dtype = dt;
  s.softcap = softcap;
  s.ignoreIndex = -100;
  return pipeline::compileGraph(*fe::buildLceGraph(s));
}

TEST(Planner, Buckets) {
  using plan::bucketLowerBound;
  using plan::bucketOf;
  EXPECT_EQ(bucketOf(0), 256);
  EXPECT_EQ(bucketOf(1), 256);
  EXPECT_EQ(bucketOf(256), 256);
  EXPECT_EQ(bucketOf(257), 1024);
  EXPECT_EQ(bucketOf(1024), 1024);
  EXPECT_EQ(bucketOf(1025), 4096);
  EXPECT_EQ(bucketOf(4096), 4096);
  EXPECT_EQ(bucketOf(4097), 16384);
  EXPECT_EQ(bucketOf(33768), 65536);
  EXPECT_EQ(bucketLowerBound(256), 0);
  EXPECT_EQ(bucketLowerBound(1024), 257);
  EXPECT_EQ(bucketLowerBound(4096), 1025);
  EXPECT_EQ(bucketLowerBound(16384), 4097);
  EXPECT_EQ(bucketLowerBound(65536), 16385);
  // Every N lies in its bucket, and buckets tile the line.
  for (int64_t n : std::vector<int64_t>{0, 1, 255, 256, 257, 1000, 1024, 1025, 4096, 4097, 33768,
                                        65536, 65537, int64_t(1) << 40}) {
    int64_t b = bucketOf(n);
    EXPECT_LE(bucketLowerBound(b), n) << n;
    EXPECT_LE(n, b) << n;
    if (b > 256) {
      EXPECT_EQ(bucketOf(bucketLowerBound(b) - 1), b / 4) << n;
    }
  }
  EXPECT_THROW(bucketOf(-1), Error);
}

TEST(Planner, PureFunction) {
  auto a = lceFused(), b = lceFused();
  for (int64_t tokens : {1, 300, 5000, 70000}) {
    plan::Program p1 = a->plan(options(tokens)), p2 = a->plan(options(tokens));
    plan::Program p3 = b->plan(options(tokens)); // another context, same graph
    EXPECT_TRUE(p1 == p2);
    EXPECT_TRUE(p1 == p3);
    EXPECT_EQ(p1.hash(), p2.hash());
    EXPECT_EQ(p1.hash(), p3.hash());
    EXPECT_EQ(p1.toJson(), p3.toJson());
  }
  // Same bucket -> the same Program, whatever N inside it.
  EXPECT_TRUE(a->plan(options(1)) == a->plan(options(256)));
  EXPECT_TRUE(a->plan(options(257)) == a->plan(options(1024)));
  EXPECT_TRUE(a->plan(options(0)) == a->plan(options(100)));
  // A different graph -> a different Program.
  EXPECT_NE(lceFused(24, 257, DType::BF16, 20.0)->plan(options(100)).hash(),
            a->plan(options(100)).hash());
}

/// Programs of two buckets, with the fields a bucket is expected to change cleared.
plan::Program withoutBucket(plan::Program p) {
  p.bucket = p.bucketLow = 0;
  p.decisions.clear();
  return p;
}

TEST(Planner, BucketsChangeOnlyWhatTheyShould) {
  auto fg = lceFused();
  plan::Program small = fg->plan(options(100)), mid = fg->plan(options(1000));
  plan::Program big = fg->plan(options(70000));
  EXPECT_NE(small.hash(), mid.hash());
  EXPECT_EQ(small.bucket, 256);
  EXPECT_EQ(mid.bucket, 1024);
  EXPECT_EQ(mid.bucketLow, 257);
  // Up to 1024 rows the tiles and (with 3 column tiles) the splits are the same: only the
  // bucket differs.
  EXPECT_TRUE(withoutBucket(small) == withoutBucket(mid));
  // A big bucket has the large forward tile and a single split; the structure (buffers,
  // steps, kernel kinds and functions) is unchanged.
  EXPECT_EQ(big.splits, 1);
  EXPECT_EQ(small.splits, 3);
  ASSERT_EQ(big.kernels.size(), small.kernels.size());
  EXPECT_EQ(big.steps, small.steps);
  EXPECT_EQ(big.workspace.size(), small.workspace.size());
  for (size_t k = 0; k < big.kernels.size(); ++k) {
    EXPECT_EQ(big.kernels[k].kind(), small.kernels[k].kind());
    EXPECT_EQ(big.kernels[k].name, small.kernels[k].name);
    if (big.kernels[k].kind() == KernelKind::Row) {
      EXPECT_TRUE(big.kernels[k] == small.kernels[k]) << big.kernels[k].name;
    }
    if (big.kernels[k].kind() == KernelKind::GemmReduce) {
      const auto &gb = std::get<plan::GemmReduceKernel>(big.kernels[k].body);
      const auto &gs = std::get<plan::GemmReduceKernel>(small.kernels[k].body);
      EXPECT_EQ(gb.gemm.tile.bm, 128);
      EXPECT_EQ(gs.gemm.tile.bm, 64);
      EXPECT_TRUE(gb.gemm.epilogue == gs.gemm.epilogue);
      EXPECT_TRUE(gb.gemm.args == gs.gemm.args);
    }
  }
}

TEST(Planner, SplitsFollowBucketAndDevice) {
  auto fg = lceFused(24, 1000); // 8 column tiles of 128
  int32_t prev = 1 << 30;
  for (int64_t tokens : {1, 1000, 4000, 16000, 60000, 250000, 1000000}) {
    plan::Program p = fg->plan(options(tokens));
    EXPECT_GE(p.splits, 1);
    EXPECT_LE(p.splits, 8) << "more splits than column tiles";
    EXPECT_LE(p.splits, prev) << "splits grow with the bucket at " << tokens;
    prev = p.splits;
  }
  EXPECT_EQ(fg->plan(options(1)).splits, 8);
  EXPECT_EQ(fg->plan(options(20000)).splits, 3); // 129 row blocks of 128: ceil(264 / 129)
  EXPECT_EQ(fg->plan(options(1000000)).splits, 1);
  EXPECT_EQ(fg->plan(options(1, int64_t(1) << 30, 1)).splits, 2); // 1 SM, filled twice
  // f32 operands use the SIMT tile (bn = 64): 16 column tiles.
  EXPECT_EQ(lceFused(24, 1000, DType::F32)->plan(options(1)).splits, 16);
}

/// [Note: the Hopper mainloop]: on sm_90 with fast precision every bf16 GEMM kind runs
/// the wgmma mainloop; exact precision, sm_80, a caller's mma.sync request, f32 operands
/// and a vocabulary that is not a multiple of 8 keep the portable path.
TEST(Planner, WgmmaMainloopWhereItCanRun) {
  auto mathOf = [](const plan::Program &p) {
    std::vector<plan::MathMode> m;
    for (const plan::Kernel &k : p.kernels)
      if (plan::isGemmKind(k.kind()))
        m.push_back(plan::gemmMath(k));
    return m;
  };
  auto llama = lceFused(4096, 128256, DType::BF16, std::nullopt);
  plan::PlanOptions recompute = wgmmaOptions(8192);
  recompute.backward = plan::PlanOptions::Backward::Recompute;
  plan::Program p = llama->plan(recompute);
  std::vector<plan::MathMode> m = mathOf(p);
  ASSERT_EQ(m.size(), 4u) << "fwd, dz, dlhs, drhs";
  for (plan::MathMode mm : m)
    EXPECT_EQ(mm, plan::MathMode::WgmmaBF16);
  // 1002 column tiles of 128 -> 33 CTA splits (a quarter of the SMs) of about 31 tiles,
  // two partial entries (one per ping-pong consumer) each.
  EXPECT_EQ(p.splits, 66);
  plan::TileConfig pingpong{128, 128, 64, 3, 4, 6};
  pingpong.pingpong = true;
  for (int32_t k = 0; k < static_cast<int32_t>(p.kernels.size()); ++k) {
    const plan::Kernel &kernel = p.kernels[static_cast<size_t>(k)];
    if (!plan::isGemmKind(kernel.kind()))
      continue;
    const plan::TileConfig &t = plan::gemmTile(kernel);
    const bool fused = kernel.kind() == KernelKind::GemmReduce ||
                       kernel.kind() == KernelKind::GemmDz;
    // The function-evaluating kinds ping-pong; dA and dB are cooperative 128x256, and
    // dB's f32 dW leaves through shared memory and TMA ([Note: sm90 TMA store]).
    const bool drhs = kernel.kind() == KernelKind::GemmDRhs;
    const plan::TileConfig coop{128, 256, 64, 3, 4, 4};
    plan::TileConfig db = coop;
    db.tmaStore = true;
    // The forward's CTAs pair up in clusters ([Note: sm90 multicast]); the persistent dZ
    // GEMM's do not.
    plan::TileConfig fwd = pingpong;
    fwd.clusterM = 2;
    EXPECT_EQ(t, kernel.kind() == KernelKind::GemmReduce ? fwd
                 : fused                                 ? pingpong
                 : drhs                                  ? db
                                                         : coop)
        << kernel.name;
    std::vector<plan::Param> params = plan::kernelParams(kernel);
    ASSERT_GE(params.size(), 2u);
    EXPECT_EQ(params[0].kind, plan::Param::Kind::TensorMapA) << kernel.name;
    EXPECT_EQ(params[1].kind, plan::Param::Kind::TensorMapB) << kernel.name;
    EXPECT_EQ(params[2].kind == plan::Param::Kind::TensorMapOut, drhs) << kernel.name;
    plan::LaunchDims d = p.launchDims(k, 8192, 8192);
    EXPECT_EQ(d.block, 384);
    EXPECT_EQ(d.sharedBytes, fused  ? 1024 + 6 * (16384 + 16384) + 96
                             : drhs ? 1024 + 4 * (16384 + 32768) + 4 * 8192 + 64
                                    : 1024 + 4 * (16384 + 32768) + 64);
    if (kernel.kind() == KernelKind::GemmReduce) {
      EXPECT_EQ(d.grid[0], 64 * 33) << "one CTA per (row tile, split)";
      EXPECT_EQ(d.grid[1], 1);
      EXPECT_EQ(d.cluster, 2) << "64 row tiles pair up";
      // Row tiles that do not pair up launch single CTAs (each loads all of B); a call of
      // one row tile too.
      EXPECT_EQ(p.launchDims(k, 8192 - 128, 8192).cluster, 1);
      EXPECT_EQ(p.launchDims(k, 8192 - 127, 8192).cluster, 2) << "64 row tiles, the last partial";
      EXPECT_EQ(p.launchDims(k, 100, 8192).cluster, 1);
      EXPECT_EQ(p.launchDims(k, 200, 8192).cluster, 2);
    } else {
      EXPECT_EQ(d.grid[0], 132) << kernel.name << ": persistent, one CTA per SM";
      EXPECT_EQ(d.cluster, 1) << kernel.name;
    }
  }
  // [Note: sm90 split-K]: the materialized schedule's dA may split K (the recompute's, an
  // f32 accumulation per chunk, may not: above). A launch whose tiles would all run at
  // once split runs one tile per cluster of 2 or 4 CTAs (grid = tiles x split); 128 tiles
  // fill a round as they are; a short K is not split. LCEJIT_SPLIT_K=0: never.
  for (bool on : {true, false}) {
    plan::PlanOptions o = wgmmaOptions(8192);
    o.splitK = on;
    plan::Program q = llama->plan(o);
    int dlhs = 0;
    for (int32_t k = 0; k < static_cast<int32_t>(q.kernels.size()); ++k) {
      if (q.kernels[static_cast<size_t>(k)].kind() != KernelKind::GemmDLhs)
        continue;
      ++dlhs;
      EXPECT_EQ(plan::gemmTile(q.kernels[static_cast<size_t>(k)]).splitK, on ? 4 : 1);
      auto dims = [&](int64_t rows, int64_t kCols) { return q.launchDims(k, rows, kCols); };
      EXPECT_EQ(dims(1024, 8192).grid[0], 128);
      EXPECT_EQ(dims(1024, 8192).cluster, 1) << "8 x 16 tiles: one round unsplit";
      EXPECT_EQ(dims(512, 8192).grid[0], on ? 64 * 2 : 64);
      EXPECT_EQ(dims(512, 8192).cluster, on ? 2 : 1) << "64 tiles: halves in one round";
      EXPECT_EQ(dims(100, 8192).grid[0], on ? 16 * 4 : 16);
      EXPECT_EQ(dims(100, 8192).cluster, on ? 4 : 1) << "16 tiles: quarters in one round";
      EXPECT_EQ(dims(100, 1024).cluster, on ? 2 : 1) << "16 k-blocks: 8 per half";
      EXPECT_EQ(dims(100, 960).cluster, 1) << "15 k-blocks: too few for halves";
      EXPECT_EQ(dims(100, 960).grid[0], 16);
    }
    EXPECT_EQ(dlhs, 1);
  }
  // LCEJIT_MULTICAST=0: no clusters.
  {
    plan::PlanOptions o = recompute;
    o.multicast = false;
    plan::Program q = llama->plan(o);
    for (int32_t k = 0; k < static_cast<int32_t>(q.kernels.size()); ++k)
      if (plan::isGemmKind(q.kernels[static_cast<size_t>(k)].kind())) {
        EXPECT_EQ(plan::gemmTile(q.kernels[static_cast<size_t>(k)]).clusterM, 1);
        EXPECT_EQ(q.launchDims(k, 8192, 8192).cluster, 1);
      }
  }
  // LCEJIT_TMA_STORE=0: dB stores from registers; a bf16 dW never takes the TMA store.
  for (bool bf16dW : {false, true}) {
    plan::PlanOptions o = recompute;
    o.tmaStore = bf16dW;
    if (bf16dW)
      o.outputTypes = {DType::F32, DType::BF16, DType::BF16};
    for (const plan::Kernel &kernel : llama->plan(o).kernels)
      if (plan::isGemmKind(kernel.kind())) {
        EXPECT_FALSE(plan::gemmTile(kernel).tmaStore) << kernel.name;
        for (const plan::Param &prm : plan::kernelParams(kernel))
          EXPECT_NE(prm.kind, plan::Param::Kind::TensorMapOut) << kernel.name;
      }
  }
  // A short launch gets one CTA per tile.
  for (int32_t k = 0; k < static_cast<int32_t>(p.kernels.size()); ++k) {
    if (p.kernels[static_cast<size_t>(k)].kind() == KernelKind::GemmDLhs) {
      EXPECT_EQ(p.launchDims(k, 128, 8192).grid[0], 16); // 1 row tile x 4096 / 256
    }
  }

  auto allMma = [&](const plan::Program &q) {
    for (plan::MathMode mm : mathOf(q))
      EXPECT_NE(mm, plan::MathMode::WgmmaBF16);
  };
  plan::PlanOptions exact = wgmmaOptions(8192);
  exact.exactGradients = true;
  allMma(llama->plan(exact));
  plan::PlanOptions sm80 = wgmmaOptions(8192);
  sm80.target.smVersion = 80;
  allMma(llama->plan(sm80));
  allMma(llama->plan(options(8192)));
  allMma(lceFused(4096, 128255, DType::BF16, std::nullopt)->plan(wgmmaOptions(8192)));
  allMma(lceFused(64, 1000, DType::F32)->plan(wgmmaOptions(8192)));
}

/// [Note: row-scaled stored values]: a softcap bounds the forward's value to [-c, c]; with
/// c = 30 the planner stores against the constant 30 and wires the row scale into dA, the
/// scaled A into dB and the whole target column into the residual. Without the residual,
/// or with the option off, it keeps the tile maxima and DzForm's pass. (Without a bound,
/// or with a range wider than kRowScaledRange (c = 50), the per-row reference: the next
/// test.)
TEST(Planner, RowScaledStoredValuesForABoundedValue) {
  auto plan = [](std::optional<double> softcap, bool rowScaled, bool residual) {
    auto g = lceFused(4096, 128256, DType::BF16, softcap);
    plan::PlanOptions o = wgmmaOptions(8192);
    o.backward = plan::PlanOptions::Backward::Materialized;
    o.rowScaled = rowScaled;
    o.targetResidual = residual;
    return g->plan(o);
  };
  struct Parts {
    const plan::GemmReduceKernel *f = nullptr;
    const plan::DzFormKernel *z = nullptr;
    const plan::GemmDLhsKernel *dlhs = nullptr;
    const plan::GemmDRhsKernel *drhs = nullptr;
    const plan::TargetCorrectionKernel *corr = nullptr;
  };
  auto parts = [](const plan::Program &p) {
    Parts r;
    for (const plan::Kernel &k : p.kernels) {
      if (auto *x = std::get_if<plan::GemmReduceKernel>(&k.body))
        r.f = x;
      if (auto *x = std::get_if<plan::DzFormKernel>(&k.body))
        r.z = x;
      if (auto *x = std::get_if<plan::GemmDLhsKernel>(&k.body))
        r.dlhs = x;
      if (auto *x = std::get_if<plan::GemmDRhsKernel>(&k.body))
        r.drhs = x;
      if (auto *x = std::get_if<plan::TargetCorrectionKernel>(&k.body))
        r.corr = x;
    }
    return r;
  };
  auto hasBuffer = [](const plan::Program &p, const std::string &name) {
    for (const plan::BufferSpec &w : p.workspace)
      if (w.name == name)
        return true;
    return false;
  };
  {
    plan::Program p = plan(30.0, true, true);
    const std::string d = decision(p, "backward: materialized, row-scaled:");
    EXPECT_NE(d.find("at most 30 (within 64 of it)"), std::string::npos) << d;
    Parts k = parts(p);
    ASSERT_TRUE(k.f && k.f->stored && k.z && k.dlhs && k.drhs && k.corr) << p.toJson(2);
    EXPECT_TRUE(k.f->stored->rowScaled);
    EXPECT_EQ(k.f->stored->reference, 30.0);
    EXPECT_FALSE(k.f->stored->tileMax.valid());
    EXPECT_GE(k.f->stored->excludeArg, 0) << "the target column is stored as 0";
    EXPECT_FALSE(hasBuffer(p, "tile_max0"));
    EXPECT_TRUE(k.z->rowScaled);
    EXPECT_EQ(k.z->reference, 30.0);
    EXPECT_FALSE(k.z->tileMax.valid());
    ASSERT_TRUE(k.z->rowScale.valid() && k.z->aScaled.valid() && k.z->residual.valid());
    EXPECT_EQ(k.z->a, k.f->gemm.a);
    EXPECT_EQ(k.z->k, 4096);
    EXPECT_TRUE(p.workspace[static_cast<size_t>(k.z->aScaled.index)].blockLocal);
    EXPECT_EQ(p.workspace[static_cast<size_t>(k.z->aScaled.index)].bytesPerRow, 2 * 4096);
    // dA scales its rows and adds the residual; dB reads the scaled A and the
    // TargetCorrection the raw one, both with the same residual.
    EXPECT_EQ(k.dlhs->rowScale, k.z->rowScale);
    EXPECT_EQ(k.dlhs->residual.buf, k.z->residual);
    EXPECT_EQ(k.drhs->a, k.z->aScaled);
    EXPECT_EQ(k.drhs->dz, k.f->stored->values);
    EXPECT_EQ(k.corr->a, k.f->gemm.a);
    EXPECT_EQ(k.corr->residual.buf, k.z->residual);
  }
  for (int off = 0; off < 4; ++off) {
    SCOPED_TRACE(off);
    plan::Program p = off == 0   ? plan(std::nullopt, false, true)
                      : off == 1 ? plan(std::nullopt, true, false)
                      : off == 2 ? plan(30.0, false, true)
                                 : plan(30.0, true, false);
    EXPECT_NE(decision(p, "backward: materialized:"), "") << p.toJson(2);
    EXPECT_EQ(decision(p, "row-scaled"), "");
    Parts k = parts(p);
    ASSERT_TRUE(k.f && k.f->stored && k.z && k.dlhs && k.drhs);
    EXPECT_FALSE(k.f->stored->rowScaled);
    EXPECT_TRUE(k.f->stored->tileMax.valid());
    EXPECT_FALSE(k.z->rowScaled);
    EXPECT_FALSE(k.dlhs->rowScale.valid());
    EXPECT_EQ(k.drhs->a, k.f->gemm.a);
  }
}

/// [Note: a per-row reference]: without a bound on the forward's value (no softcap, or a
/// softcap of range 100 > kRowScaledRange) the values are stored against each row's target
/// value: the RowDot and a row kernel applying the value chain run before the forward,
/// which reads c_r as a row operand; the DzForm flags the rows it cannot hold and the dZ
/// GEMM stays first in the loop, filtered to them. [Note: a scaled A in column parts]: dB
/// runs in two column halves so that a 2048-row block still fits 512 MiB (four blocks at
/// N = 8192, as with the tile maxima).
TEST(Planner, PerRowReferenceWithoutABound) {
  for (std::optional<double> softcap : {std::optional<double>(), std::optional<double>(50.0)}) {
    SCOPED_TRACE(softcap.value_or(0.0));
    auto g = lceFused(4096, 128256, DType::BF16, softcap);
    plan::PlanOptions o = wgmmaOptions(8192);
    o.workspaceBudgetBytes = int64_t(512) << 20;
    o.backward = plan::PlanOptions::Backward::Materialized;
    plan::Program p = g->plan(o);
    const std::string d = decision(p, "backward: materialized, row-scaled against each row's");
    ASSERT_NE(d, "") << p.toJson(2);
    EXPECT_NE(d.find("loss exceeds 64"), std::string::npos) << d;
    const plan::GemmReduceKernel *f = nullptr;
    const plan::RowDotKernel *dot = nullptr;
    const plan::RowKernel *ref = nullptr;
    std::vector<const plan::DzFormKernel *> forms;
    std::vector<const plan::GemmDRhsKernel *> drhs;
    const plan::GemmDzKernel *z = nullptr;
    int fwdStep = -1, dotStep = -1, refStep = -1, loopStep = -1;
    for (size_t si = 0; si < p.steps.size(); ++si) {
      const plan::Step &st = p.steps[si];
      if (st.kind == plan::Step::Kind::ChunkLoop) {
        loopStep = static_cast<int>(si);
        ASSERT_FALSE(st.loopKernels.empty());
        z = std::get_if<plan::GemmDzKernel>(&p.kernels[static_cast<size_t>(st.loopKernels[0])].body);
        for (int32_t ki : st.loopKernels) {
          const plan::Kernel &k = p.kernels[static_cast<size_t>(ki)];
          if (auto *x = std::get_if<plan::GemmDRhsKernel>(&k.body))
            drhs.push_back(x);
          if (auto *x = std::get_if<plan::DzFormKernel>(&k.body))
            forms.push_back(x);
        }
        continue;
      }
      const plan::Kernel &k = p.kernels[static_cast<size_t>(st.kernel)];
      if (auto *x = std::get_if<plan::GemmReduceKernel>(&k.body)) {
        f = x;
        fwdStep = static_cast<int>(si);
      }
      if (auto *x = std::get_if<plan::RowDotKernel>(&k.body)) {
        dot = x;
        dotStep = static_cast<int>(si);
      }
      if (auto *x = std::get_if<plan::DzFormKernel>(&k.body))
        forms.insert(forms.begin(), x);
      if (k.name == "lce_ref0") {
        ref = std::get_if<plan::RowKernel>(&k.body);
        refStep = static_cast<int>(si);
      }
    }
    ASSERT_TRUE(f && f->stored && dot && ref && z) << p.toJson(2);
    EXPECT_LT(dotStep, refStep);
    EXPECT_LT(refStep, fwdStep);
    EXPECT_LT(fwdStep, loopStep);
    EXPECT_LT(refStep, p.schedule.firstBlockedStep) << "c_r of every row, once";
    // The forward stores against c_r, read as an f32 row operand that ref0 writes from
    // the RowDot's value through the chain (softcap's tanh included).
    const plan::StoredTile &st = *f->stored;
    EXPECT_TRUE(st.rowScaled);
    ASSERT_GE(st.referenceArg, 0);
    const plan::Operand &c = f->gemm.args[static_cast<size_t>(st.referenceArg)];
    EXPECT_EQ(c.kind, plan::Operand::Kind::Row);
    EXPECT_EQ(c.dtype, DType::F32);
    EXPECT_FALSE(st.tileMax.valid());
    ASSERT_EQ(ref->sinks.size(), 1u);
    EXPECT_EQ(ref->sinks[0].buf, c.buf);
    bool readsDot = false, tanh = false;
    for (const plan::Operand &o : ref->args)
      readsDot |= o.kind == plan::Operand::Kind::Row && o.buf == dot->out;
    for (const plan::ScalarInst &in : ref->func.insts)
      tanh |= in.op == plan::ScalarOp::Tanh;
    EXPECT_TRUE(readsDot);
    EXPECT_EQ(tanh, softcap.has_value());
    // The DzForm flags rows; the dZ GEMM writes the flagged ones.
    ASSERT_EQ(forms.size(), 2u) << "part 0 with the rows, part 1 A only";
    const plan::DzFormKernel &z0 = *forms[0];
    EXPECT_TRUE(z0.rowScaled && !z0.aOnly);
    EXPECT_EQ(z0.referenceRow, c.buf);
    ASSERT_TRUE(z0.recompute.valid() && z0.rowScale.valid() && z0.aScaled.valid());
    EXPECT_EQ(z->rowFilter, z0.recompute);
    EXPECT_EQ(z->dz, st.values);
    EXPECT_EQ(z->residual.buf, z0.residual);
    EXPECT_EQ(z->format, plan::DzFormat::BF16);
    // dB in two column halves of A, the second part's scaled A made between them.
    EXPECT_EQ(z0.k, 2048);
    EXPECT_EQ(z0.aLd, 4096);
    EXPECT_EQ(z0.aCol0, 0);
    EXPECT_EQ(p.workspace[static_cast<size_t>(z0.aScaled.index)].bytesPerRow, 2 * 2048);
    const plan::DzFormKernel &z1 = *forms[1];
    EXPECT_TRUE(z1.aOnly);
    EXPECT_EQ(z1.aCol0, 2048);
    EXPECT_EQ(z1.aScaled, z0.aScaled);
    EXPECT_FALSE(z1.rowScale.valid() || z1.residual.valid() || z1.recompute.valid());
    ASSERT_EQ(drhs.size(), 2u);
    for (int q = 0; q < 2; ++q) {
      EXPECT_EQ(drhs[static_cast<size_t>(q)]->k, 2048);
      EXPECT_EQ(drhs[static_cast<size_t>(q)]->outLd, 4096);
      EXPECT_EQ(drhs[static_cast<size_t>(q)]->outCol0, 2048 * q);
      EXPECT_EQ(drhs[static_cast<size_t>(q)]->a, z0.aScaled);
      EXPECT_TRUE(drhs[static_cast<size_t>(q)]->tile.tmaStore);
    }
    EXPECT_EQ(p.runSchedule(8192).rowsPerBlock, 2048) << p.runSchedule(8192).describe();
  }
  // Where the scaled H is no heavier than the tile maxima (D = 256, V = 32000: 512 against
  // 1000 bytes a row) dB runs once over all of D.
  {
    auto g = lceFused(256, 32000, DType::BF16, std::nullopt);
    plan::PlanOptions o = wgmmaOptions(4096);
    o.backward = plan::PlanOptions::Backward::Materialized;
    plan::Program p = g->plan(o);
    EXPECT_NE(decision(p, "row-scaled against each row's target value"), "") << p.toJson(2);
    int drhs = 0, aOnly = 0;
    for (const plan::Kernel &k : p.kernels) {
      if (const auto *d = std::get_if<plan::GemmDRhsKernel>(&k.body)) {
        ++drhs;
        EXPECT_EQ(d->k, 256);
        EXPECT_EQ(d->outLd, 0);
      }
      if (const auto *z = std::get_if<plan::DzFormKernel>(&k.body))
        aOnly += z->aOnly;
    }
    EXPECT_EQ(drhs, 1);
    EXPECT_EQ(aOnly, 0);
  }
  // Without the f64 target logit (LCEJIT_EXACT_TARGET=0) there is no reference to store
  // against: the tile maxima and DzForm, and no filtered dZ GEMM.
  {
    auto g = lceFused(4096, 128256, DType::BF16, std::nullopt);
    plan::PlanOptions o = wgmmaOptions(8192);
    o.backward = plan::PlanOptions::Backward::Materialized;
    o.exactTargetLogit = false;
    plan::Program p = g->plan(o);
    EXPECT_NE(decision(p, "backward: materialized: the forward GEMM stores fp16"), "")
        << p.toJson(2);
    for (const plan::Kernel &k : p.kernels) {
      EXPECT_NE(k.kind(), KernelKind::GemmDz) << k.name;
      if (const auto *f = std::get_if<plan::GemmReduceKernel>(&k.body); f && f->stored) {
        EXPECT_TRUE(!f->stored->rowScaled && f->stored->tileMax.valid());
      }
    }
  }
}

/// [Note: the materialized backward]: on the wgmma path, fast precision, whole column
/// tiles and a budget that holds at least 1024 rows of stored values, the dZ GEMM gives
/// way to the forward's stores, a row kernel and the DzForm pass; the per-element factor
/// is 1 without softcap and a function of the capped value with it.
TEST(Planner, MaterializedBackwardWhereItPays) {
  auto kinds = [](const plan::Program &p) {
    std::vector<KernelKind> k;
    for (const plan::Step &s : p.steps) {
      if (s.kind == plan::Step::Kind::Launch)
        k.push_back(p.kernels[static_cast<size_t>(s.kernel)].kind());
      else
        for (int32_t i : s.loopKernels)
          k.push_back(p.kernels[static_cast<size_t>(i)].kind());
    }
    return k;
  };
  for (std::optional<double> softcap : {std::optional<double>(), std::optional<double>(30.0)}) {
    auto g = lceFused(4096, 128256, DType::BF16, softcap);
    plan::PlanOptions o = wgmmaOptions(8192);
    o.workspaceBudgetBytes = int64_t(512) << 20;
    o.backward = plan::PlanOptions::Backward::Materialized;
    // (Row-scaled: [Note: row-scaled stored values] with softcap, and without it the
    // per-row reference, tested above; here the tile maxima without softcap.)
    o.rowScaled = softcap.has_value();
    plan::Program p = g->plan(o);
    EXPECT_NE(decision(p, softcap ? "backward: materialized, row-scaled:"
                                  : "backward: materialized:"),
              "")
        << p.toJson(2);
    // (The RowDot of [Note: the exact target logit] sums the target logit for the loss; the
    // first TargetCorrection finds the second's groups: [Note: a group's first and last
    // rows].)
    const std::vector<KernelKind> want = {
        KernelKind::Row,      KernelKind::GemmReduce,       KernelKind::RowDot,
        KernelKind::Row,      KernelKind::Row,              KernelKind::DzForm,
        KernelKind::GemmDLhs, KernelKind::GemmDRhs,         KernelKind::TargetCorrection,
        KernelKind::TargetCorrection, KernelKind::Row};
    EXPECT_EQ(kinds(p), want);
    const plan::GemmReduceKernel *f = nullptr;
    const plan::DzFormKernel *z = nullptr;
    for (const plan::Kernel &k : p.kernels) {
      if (auto *x = std::get_if<plan::GemmReduceKernel>(&k.body))
        f = x;
      if (auto *x = std::get_if<plan::DzFormKernel>(&k.body))
        z = x;
    }
    ASSERT_TRUE(f && f->stored && z);
    EXPECT_EQ(f->reductions.back(), plan::ReduceKind::Sum) << "the target logit's pick";
    EXPECT_EQ(f->stored->tileCols, 128);
    EXPECT_EQ(z->dz, f->stored->values);
    EXPECT_TRUE(z->target.valid());
    // The factor, evaluated: 1 without softcap, 1 - (v / 30)^2 with it.
    for (double v : {-29.0, -3.5, 0.0, 12.25}) {
      std::vector<double> args(f->gemm.args.size(), 0.0);
      for (size_t a = 0; a < args.size(); ++a)
        if (f->gemm.args[a].kind == plan::Operand::Kind::Acc)
          args[a] = v;
      const double got = ref::evaluateScalarFunc(f->stored->factor, args, 8192)[0];
      EXPECT_NEAR(got, softcap ? 1.0 - (v / 30.0) * (v / 30.0) : 1.0, 1e-12) << v;
    }
    plan::RunSchedule s = p.runSchedule(8192);
    EXPECT_EQ(s.chunks, 1);
    EXPECT_EQ(s.chunkCols, 128256);
    EXPECT_FALSE(s.overBudget) << s.describe();
    EXPECT_LE(s.workspaceBytes, int64_t(512) << 20);
  }
  // The default; one backward line, which keeps the recompute's f32 accumulator clause
  // (bf16 dH); where it is not taken, the plan says why; asked for the recompute, the
  // plan has no materialized line.
  auto llama = lceFused(4096, 128256, DType::BF16, std::nullopt);
  auto asked = [](plan::PlanOptions o) {
    o.backward = plan::PlanOptions::Backward::Materialized;
    return o;
  };
  {
    plan::Program p = llama->plan(wgmmaOptions(8192));
    int lines = 0;
    for (const std::string &d : p.decisions)
      lines += d.rfind("backward:", 0) == 0;
    EXPECT_EQ(lines, 1) << "one backward decision";
    EXPECT_NE(decision(p, "backward: materialized, row-scaled against each row's target"), "")
        << "the default";
    EXPECT_EQ(decision(p, "vocab-chunked recompute"), "");
    plan::PlanOptions recompute = wgmmaOptions(8192);
    recompute.backward = plan::PlanOptions::Backward::Recompute;
    plan::Program r = llama->plan(recompute);
    EXPECT_EQ(decision(r, "materialized"), "");
    EXPECT_NE(decision(r, "backward: vocab-chunked recompute"), "");
    // bf16 dH: one chunk, so dA writes it directly (no f32 accumulator, no cast kernel).
    plan::PlanOptions bf16dH = wgmmaOptions(8192);
    bf16dH.outputTypes = {DType::F32, DType::BF16, DType::F32};
    plan::Program b = llama->plan(bf16dH);
    EXPECT_NE(decision(b, "6*N*D*V of GEMM work; dA writes dH as bf16 directly"), "")
        << b.toJson(2);
    int casts = 0;
    for (const plan::Kernel &k : b.kernels) {
      casts += k.kind() == KernelKind::Cast;
      if (const auto *d = std::get_if<plan::GemmDLhsKernel>(&k.body)) {
        EXPECT_EQ(d->outType, DType::BF16);
        EXPECT_EQ(d->out.space, plan::Space::Output);
      }
    }
    EXPECT_EQ(casts, 0);
    for (const plan::BufferSpec &w : b.workspace)
      EXPECT_EQ(w.name.find("dlhs_acc"), std::string::npos) << "the f32 dH accumulator";
  }
  // A budget that holds fewer than 1024 rows: the slab-only Program ([Note: values scaled
  // in place]), or, with the values kept out of dW, the recompute.
  plan::PlanOptions small = asked(wgmmaOptions(8192));
  small.workspaceBudgetBytes = int64_t(64) << 20;
  const plan::Program lean = llama->plan(small);
  EXPECT_TRUE(lean.schedule.slabOnly);
  EXPECT_NE(decision(lean, "stored values in dW, scaled in place"), "");
  small.storeInOutput = false;
  const plan::Program leanOff = llama->plan(small);
  EXPECT_FALSE(leanOff.schedule.slabOnly);
  EXPECT_NE(decision(leanOff, "fewer than 1024 rows"), "");
  EXPECT_NE(decision(leanOff, "with the values in dW's memory: off"), "");
  plan::PlanOptions exact = asked(wgmmaOptions(8192));
  exact.exactGradients = true;
  EXPECT_NE(decision(llama->plan(exact), "materialized schedule not taken"), "");
  auto odd = lceFused(256, 32008, DType::BF16, std::nullopt); // 32008 % 128 != 0
  EXPECT_NE(decision(odd->plan(asked(wgmmaOptions(4096))),
                     "not a multiple of the 128-column tile"),
            "");
  // i32 targets compare the column cast to i32: still the one-hot of the target.
  fe::LceSpec spec;
  spec.hidden = 256;
  spec.vocab = 32000;
  spec.dtype = DType::BF16;
  spec.softcap = 30.0;
  spec.ignoreIndex = -100;
  spec.targetType = DType::I32;
  auto i32 = pipeline::compileGraph(*fe::buildLceGraph(spec));
  EXPECT_NE(decision(i32->plan(asked(wgmmaOptions(1500))), "backward: materialized, row-scaled:"),
            "");
}

/// [Note: the exact target logit]: the loss's row kernel reads the target logit summed
/// again in f64 by a RowDotKernel launched between the forward and it (per row block with
/// the forward), over the forward's own operands and target; with softcap the row function
/// applies the value chain (tanh) to it. Off (LCEJIT_EXACT_TARGET=0): no such kernel.
TEST(Planner, ExactTargetLogitForTheRowLoss) {
  for (std::optional<double> softcap : {std::optional<double>(), std::optional<double>(30.0)}) {
    auto g = lceFused(4096, 128256, DType::BF16, softcap);
    plan::Program p = g->plan(wgmmaOptions(8192));
    int fwd = -1, dot = -1, fwdStep = -1, dotStep = -1, loss = -1, lossStep = -1;
    for (size_t i = 0; i < p.kernels.size(); ++i) {
      if (p.kernels[i].kind() == KernelKind::GemmReduce)
        fwd = static_cast<int>(i);
      if (p.kernels[i].kind() == KernelKind::RowDot)
        dot = static_cast<int>(i);
    }
    ASSERT_GE(fwd, 0);
    ASSERT_GE(dot, 0) << p.toJson(2);
    const auto &F = std::get<plan::GemmReduceKernel>(p.kernels[static_cast<size_t>(fwd)].body);
    const auto &D = std::get<plan::RowDotKernel>(p.kernels[static_cast<size_t>(dot)].body);
    EXPECT_EQ(D.a, F.gemm.a);
    EXPECT_EQ(D.b, F.gemm.b);
    EXPECT_EQ(D.abType, DType::BF16);
    EXPECT_EQ(D.k, 4096);
    EXPECT_EQ(D.cols, 128256);
    EXPECT_EQ(D.targetType, DType::I64);
    // The target is the Row operand the forward compares its column with.
    bool targetIsForwardOperand = false;
    for (const plan::Operand &o : F.gemm.args)
      targetIsForwardOperand |= o.kind == plan::Operand::Kind::Row && o.buf == D.target;
    EXPECT_TRUE(targetIsForwardOperand);
    for (size_t si = 0; si < p.steps.size(); ++si) {
      const plan::Step &st = p.steps[si];
      if (st.kind != plan::Step::Kind::Launch)
        continue;
      if (st.kernel == fwd)
        fwdStep = static_cast<int>(si);
      if (st.kernel == dot)
        dotStep = static_cast<int>(si);
      if (const auto *r = std::get_if<plan::RowKernel>(&p.kernels[static_cast<size_t>(st.kernel)].body))
        for (const plan::Operand &o : r->args)
          if (o.kind == plan::Operand::Kind::Row && o.buf == D.out) {
            loss = st.kernel;
            lossStep = static_cast<int>(si);
          }
    }
    if (softcap)
      EXPECT_LT(fwdStep, dotStep);
    else // [Note: a per-row reference]: the forward stores against it
      EXPECT_LT(dotStep, fwdStep);
    ASSERT_GE(loss, 0) << "a row kernel reads the RowDot's output";
    EXPECT_LT(dotStep, lossStep);
    EXPECT_LE(dotStep, p.schedule.lastBlockedStep) << "it runs per row block with the forward";
    const auto &R = std::get<plan::RowKernel>(p.kernels[static_cast<size_t>(loss)].body);
    auto has = [&](plan::ScalarOp op) {
      return std::any_of(R.func.insts.begin(), R.func.insts.end(),
                         [&](const plan::ScalarInst &in) { return in.op == op; });
    };
    EXPECT_TRUE(has(plan::ScalarOp::Expm1) && has(plan::ScalarOp::Log1p)) << "log1p(exp(d)*S')";
    EXPECT_TRUE(has(plan::ScalarOp::CmpGt) && has(plan::ScalarOp::Select))
        << "[Note: a far target]: lse - v_y beyond kFarTarget";
    EXPECT_EQ(has(plan::ScalarOp::Tanh), softcap.has_value()) << "v_y = softcap(x_y)";
    EXPECT_NE(decision(p, "loss: lce_zy0 sums the target logit again in f64 (N*4096"), "");

    plan::PlanOptions off = wgmmaOptions(8192);
    off.exactTargetLogit = false;
    for (const plan::Kernel &k : g->plan(off).kernels)
      EXPECT_NE(k.kind(), KernelKind::RowDot) << k.name;
  }
}

/// [Note: the target column's dZ]: the recompute schedule (exact precision here) gets a
/// row kernel `<name>_dzt0` before the chunk loop, inside the row-blocked steps, that
/// stores each row's dZ at its target column from the forward's (m, t) pair, its pick and
/// the RowDot's f64 target logit (expm1 / log1p, no exp(z − lse) − 1); the dZ GEMM's
/// epilogue selects that value where the column is the target. The materialized schedule's
/// row kernel forms its target column the same way. Off (LCEJIT_EXACT_TARGET=0): neither.
TEST(Planner, TargetColumnDzFromTheLossTerms) {
  for (std::optional<double> softcap : {std::optional<double>(), std::optional<double>(30.0)}) {
    auto g = lceFused(4096, 128256, DType::BF16, softcap);
    plan::PlanOptions o = wgmmaOptions(8192);
    o.exactGradients = true;
    plan::Program p = g->plan(o);
    int dzt = -1, dztStep = -1, loopStep = -1, dot = -1;
    for (size_t i = 0; i < p.kernels.size(); ++i) {
      if (p.kernels[i].name == "lce_dzt0")
        dzt = static_cast<int>(i);
      if (p.kernels[i].kind() == KernelKind::RowDot)
        dot = static_cast<int>(i);
    }
    ASSERT_GE(dzt, 0) << p.toJson(2);
    ASSERT_GE(dot, 0);
    for (size_t si = 0; si < p.steps.size(); ++si) {
      if (p.steps[si].kind == plan::Step::Kind::ChunkLoop)
        loopStep = static_cast<int>(si);
      if (p.steps[si].kind == plan::Step::Kind::Launch && p.steps[si].kernel == dzt)
        dztStep = static_cast<int>(si);
    }
    ASSERT_GE(loopStep, 0);
    EXPECT_EQ(dztStep, loopStep - 1) << "right before the chunk loop";
    EXPECT_GE(dztStep, p.schedule.firstBlockedStep);
    const auto &R = std::get<plan::RowKernel>(p.kernels[static_cast<size_t>(dzt)].body);
    ASSERT_EQ(R.sinks.size(), 1u);
    EXPECT_EQ(R.sinks[0].kind, plan::RowKernel::Sink::Kind::StoreRow);
    const plan::BufferRef tdz = R.sinks[0].buf;
    auto has = [&](plan::ScalarOp op) {
      return std::any_of(R.func.insts.begin(), R.func.insts.end(),
                         [&](const plan::ScalarInst &in) { return in.op == op; });
    };
    EXPECT_TRUE(has(plan::ScalarOp::Expm1) && has(plan::ScalarOp::Log1p));
    EXPECT_EQ(has(plan::ScalarOp::Tanh), softcap.has_value()) << "v_y = softcap(x_y)";
    bool readsMax = false, readsRest = false, readsDot = false;
    const auto &D = std::get<plan::RowDotKernel>(p.kernels[static_cast<size_t>(dot)].body);
    for (const plan::Operand &a : R.args) {
      readsMax |= a.kind == plan::Operand::Kind::Partials &&
                  a.component == plan::Operand::Component::Max;
      readsRest |= a.kind == plan::Operand::Kind::Partials &&
                   a.component == plan::Operand::Component::RestSum;
      readsDot |= a.kind == plan::Operand::Kind::Row && a.buf == D.out;
    }
    EXPECT_TRUE(readsMax && readsRest && readsDot);
    // The dZ GEMM: its result selects the stored value on the target column.
    const plan::GemmDzKernel *dz = nullptr;
    for (const plan::Kernel &k : p.kernels)
      if (auto *x = std::get_if<plan::GemmDzKernel>(&k.body))
        dz = x;
    ASSERT_NE(dz, nullptr);
    const plan::ScalarFunc &f = dz->gemm.epilogue;
    const plan::ScalarInst &sel = f.insts[static_cast<size_t>(f.results[0])];
    ASSERT_EQ(sel.op, plan::ScalarOp::Select);
    const plan::ScalarInst &cmp = f.insts[static_cast<size_t>(sel.operands[0])];
    EXPECT_EQ(cmp.op, plan::ScalarOp::CmpEq);
    const plan::ScalarInst &arg = f.insts[static_cast<size_t>(sel.operands[1])];
    ASSERT_EQ(arg.op, plan::ScalarOp::Arg);
    EXPECT_EQ(dz->gemm.args[static_cast<size_t>(arg.argIndex)].kind, plan::Operand::Kind::Row);
    EXPECT_EQ(dz->gemm.args[static_cast<size_t>(arg.argIndex)].buf, tdz);
    EXPECT_NE(decision(p, "backward: lce_dzt0 forms dZ at each row's target column"), "");

    o.exactTargetLogit = false;
    for (const plan::Kernel &k : g->plan(o).kernels)
      EXPECT_NE(k.name, "lce_dzt0");
  }
  // The materialized schedule: the row kernel's target result takes the same form.
  auto g = lceFused(4096, 128256, DType::BF16, 30.0);
  for (bool exactTarget : {true, false}) {
    plan::PlanOptions o = wgmmaOptions(8192);
    o.backward = plan::PlanOptions::Backward::Materialized;
    o.exactTargetLogit = exactTarget;
    plan::Program p = g->plan(o);
    const plan::RowKernel *row = nullptr;
    for (const plan::Kernel &k : p.kernels)
      if (k.name == "lce_dzrow0")
        row = &std::get<plan::RowKernel>(k.body);
    ASSERT_NE(row, nullptr) << p.toJson(2);
    bool log1p = false;
    for (const plan::ScalarInst &in : row->func.insts)
      log1p |= in.op == plan::ScalarOp::Log1p;
    EXPECT_EQ(log1p, exactTarget);
    for (const plan::Kernel &k : p.kernels)
      EXPECT_NE(k.name, "lce_dzt0") << "the materialized schedule has no dZ GEMM";
  }
}

/// [Note: the target-column residual]: where dZ is one bf16 operand and the loss has a
/// target column, the dZ writer (GemmDz, or DzForm in the materialized schedule) stores the
/// residual, dA adds its rank-1 update in the last chunk and a TargetCorrection kernel adds
/// dW's after the loop (inside the row-blocked steps). Exact precision, f32 inputs and
/// LCEJIT_TARGET_RESIDUAL=0 have none; a bf16 dW gets its part through group sums that dB
/// adds before rounding ([Note: target group sums]), and the plan says so.
TEST(Planner, TargetResidualWhereDzIsOneBf16Operand) {
  auto g = lceFused(4096, 128256, DType::BF16, 30.0);
  for (plan::Mainloop m : {plan::Mainloop::MmaSync, plan::Mainloop::Auto})
    for (auto b : {plan::PlanOptions::Backward::Recompute,
                   plan::PlanOptions::Backward::Materialized}) {
      plan::PlanOptions o = options(8192, int64_t(512) << 20);
      o.mainloop = m;
      o.backward = b;
      plan::Program p = g->plan(o);
      const plan::GemmDzKernel *dz = nullptr;
      const plan::DzFormKernel *form = nullptr;
      const plan::GemmDLhsKernel *lhs = nullptr;
      const plan::TargetCorrectionKernel *tc = nullptr;
      int tcKernel = -1;
      for (size_t i = 0; i < p.kernels.size(); ++i) {
        const plan::Kernel &k = p.kernels[i];
        if (auto *x = std::get_if<plan::GemmDzKernel>(&k.body))
          dz = x;
        if (auto *x = std::get_if<plan::DzFormKernel>(&k.body))
          form = x;
        if (auto *x = std::get_if<plan::GemmDLhsKernel>(&k.body))
          lhs = x;
        if (auto *x = std::get_if<plan::TargetCorrectionKernel>(&k.body)) {
          tc = x;
          tcKernel = static_cast<int>(i);
        }
      }
      ASSERT_TRUE(lhs && tc) << p.toJson(2);
      EXPECT_EQ(tc->residual, lhs->residual);
      EXPECT_EQ(tc->cols, 128256);
      EXPECT_EQ(tc->k, 4096);
      EXPECT_EQ(tc->out.space, plan::Space::Output);
      EXPECT_EQ(tc->out.index, 2) << "dW";
      EXPECT_EQ(tc->a.space, plan::Space::Input);
      EXPECT_EQ(tc->a.index, 0) << "H";
      // The correction runs after the chunk loop, inside the blocked steps.
      int tcStep = -1, loopStep = -1;
      for (size_t si = 0; si < p.steps.size(); ++si) {
        if (p.steps[si].kind == plan::Step::Kind::ChunkLoop)
          loopStep = static_cast<int>(si);
        if (p.steps[si].kind == plan::Step::Kind::Launch && p.steps[si].kernel == tcKernel)
          tcStep = static_cast<int>(si);
      }
      EXPECT_GT(tcStep, loopStep);
      EXPECT_LE(tcStep, p.schedule.lastBlockedStep);
      ASSERT_TRUE(lhs->residual.valid());
      EXPECT_EQ(lhs->cols, 128256);
      EXPECT_EQ(lhs->residual.target.space, plan::Space::Workspace) << "the checked targets";
      if (form) { // materialized: DzForm rounds dZ and writes the residual
        EXPECT_EQ(dz, nullptr);
        EXPECT_EQ(form->residual, lhs->residual.buf);
        EXPECT_EQ(form->target, lhs->residual.target);
      } else {
        ASSERT_TRUE(dz);
        EXPECT_EQ(dz->residual, lhs->residual);
        EXPECT_EQ(dz->gemm.args[static_cast<size_t>(dz->residualArg)].buf,
                  lhs->residual.target);
      }
      EXPECT_NE(decision(p, "dZ residual: the target column's bf16 rounding of dZ, added back "
                            "as a rank-1 update in f32 (dH[r] += res[r]*W[t_r] in dA's last "
                            "chunk, dW[t_r] += res[r]*H[r] after the chunk loop, summed per "
                            "target in row order)"),
                "");
    }
  // None in exact precision, with f32 inputs, or when asked.
  plan::PlanOptions exact = options(8192);
  exact.exactGradients = true;
  plan::PlanOptions off = options(8192);
  off.targetResidual = false;
  for (const plan::Program &p :
       {g->plan(exact), g->plan(off), lceFused(4096, 128256, DType::F32, 30.0)->plan(options(8192))})
    for (const plan::Kernel &k : p.kernels) {
      EXPECT_NE(k.kind(), KernelKind::TargetCorrection) << k.name;
      if (auto *x = std::get_if<plan::GemmDLhsKernel>(&k.body)) {
        EXPECT_FALSE(x->residual.valid());
      }
      if (auto *x = std::get_if<plan::GemmDzKernel>(&k.body)) {
        EXPECT_FALSE(x->residual.valid());
      }
    }
  EXPECT_NE(decision(g->plan(off), "dZ residual: the target column's bf16 rounding of dZ, not "
                                   "added back (asked: LCEJIT_TARGET_RESIDUAL=0)"),
            "");
  // bf16 dW ([Note: target group sums]): dA's part, and in the chunk loop a group-sum
  // TargetCorrection after the dZ GEMM whose sums and heads dB's epilogue reads; no
  // correction after the loop (dW has no f32 copy to add to).
  for (plan::Mainloop m : {plan::Mainloop::MmaSync, plan::Mainloop::Auto}) {
    plan::PlanOptions bf16dW = options(8192);
    bf16dW.mainloop = m;
    bf16dW.outputTypes = {DType::F32, DType::BF16, DType::BF16};
    plan::Program b = g->plan(bf16dW);
    const plan::Step *loop = nullptr;
    for (const plan::Step &st : b.steps) {
      if (st.kind == plan::Step::Kind::ChunkLoop)
        loop = &st;
      else
        EXPECT_NE(b.kernels[static_cast<size_t>(st.kernel)].kind(),
                  KernelKind::TargetCorrection)
            << b.kernels[static_cast<size_t>(st.kernel)].name;
    }
    ASSERT_TRUE(loop);
    std::vector<KernelKind> kinds;
    for (int32_t ki : loop->loopKernels)
      kinds.push_back(b.kernels[static_cast<size_t>(ki)].kind());
    ASSERT_EQ(kinds, (std::vector<KernelKind>{KernelKind::GemmDz, KernelKind::GemmDLhs,
                                              KernelKind::TargetCorrection,
                                              KernelKind::GemmDRhs}));
    const auto &dz = std::get<plan::GemmDzKernel>(b.kernels[static_cast<size_t>(loop->loopKernels[0])].body);
    const auto &lhs = std::get<plan::GemmDLhsKernel>(b.kernels[static_cast<size_t>(loop->loopKernels[1])].body);
    const plan::Kernel &tcK = b.kernels[static_cast<size_t>(loop->loopKernels[2])];
    const auto &tc = std::get<plan::TargetCorrectionKernel>(tcK.body);
    const plan::Kernel &rhsK = b.kernels[static_cast<size_t>(loop->loopKernels[3])];
    const auto &rhs = std::get<plan::GemmDRhsKernel>(rhsK.body);
    EXPECT_TRUE(lhs.residual.valid());
    EXPECT_EQ(dz.residual, lhs.residual);
    EXPECT_EQ(tc.residual, lhs.residual);
    EXPECT_FALSE(tc.out.valid());
    ASSERT_TRUE(tc.sums.valid());
    EXPECT_EQ(rhs.targetSums, tc.sums);
    EXPECT_EQ(rhs.outType, DType::BF16);
    EXPECT_EQ(tc.sums.target, lhs.residual.target);
    EXPECT_EQ(tc.sums.cols, 128256);
    EXPECT_EQ(tc.a, rhs.a) << "the rows dB multiplies";
    // Workspace: bf16 sums per row, i32 heads per block of kTargetGroupRows rows.
    const plan::BufferSpec &sums = b.workspace[static_cast<size_t>(tc.sums.sums.index)];
    const plan::BufferSpec &head = b.workspace[static_cast<size_t>(tc.sums.head.index)];
    EXPECT_EQ(sums.bytesPerRow, 4096 * 2);
    EXPECT_EQ(sums.bytesFixed, plan::kTargetSumsPadBytes) << "dB's epilogue reads past row N - 1";
    EXPECT_EQ(head.bytesPerRow, (128256 * 4 + plan::kTargetGroupRows - 1) / plan::kTargetGroupRows);
    EXPECT_EQ(head.bytesFixed, 128256 * 4);
    EXPECT_GE(head.bytesPerRow * 8192 + head.bytesFixed,
              (8192 + plan::kTargetGroupRows - 1) / plan::kTargetGroupRows * 128256 * 4)
        << "room for ceil(N / kTargetGroupRows) rows of heads";
    // The ABI: the group sums read the chunk; dB reads sums, heads and targets.
    auto has = [](const plan::Kernel &k, plan::Param::Kind kind, const plan::BufferRef &buf) {
      for (const plan::Param &prm : plan::kernelParams(k))
        if (prm.kind == kind && (kind != plan::Param::Kind::Pointer || prm.buf == buf))
          return true;
      return false;
    };
    EXPECT_TRUE(has(tcK, plan::Param::Kind::ChunkBegin, {}));
    EXPECT_TRUE(has(tcK, plan::Param::Kind::ChunkCols, {}));
    EXPECT_TRUE(has(tcK, plan::Param::Kind::Pointer, tc.sums.head));
    for (const plan::BufferRef &r : {tc.sums.sums, tc.sums.head, tc.sums.target})
      EXPECT_TRUE(has(rhsK, plan::Param::Kind::Pointer, r));
    EXPECT_NE(decision(b, "dW is bf16, written once per chunk: its target rows get the sums of "
                          "res[r]*H[r] over the rows of each 2048-row block with that target"),
              "");
    // Off when asked, as the rest of the residual.
    bf16dW.targetResidual = false;
    for (const plan::Kernel &k : g->plan(bf16dW).kernels) {
      EXPECT_NE(k.kind(), KernelKind::TargetCorrection);
      if (auto *x = std::get_if<plan::GemmDRhsKernel>(&k.body)) {
        EXPECT_FALSE(x->targetSums.valid());
      }
    }
  }
}

TEST(Planner, ChunkSizeFollowsBudget) {
  auto fg = lceFused(24, 1000);
  plan::Program full = fg->plan(options(100));
  EXPECT_EQ(full.loopCols, 1000);
  plan::RunSchedule fs = full.runSchedule(100);
  EXPECT_EQ(fs.chunkCols, 1024); // all columns, rounded up to the tile
  EXPECT_EQ(fs.chunks, 1);
  EXPECT_EQ(fs.rowBlocks, 1);
  int64_t prevChunk = 0;
  int fitting = 0;
  for (int64_t budget = 0; budget <= (int64_t(2) << 20); budget += 16 << 10) {
    plan::Program p = fg->plan(options(100, budget));
    plan::RunSchedule s = p.runSchedule(100);
    EXPECT_EQ(s.chunkCols % 128, 0) << budget;
    EXPECT_GE(s.chunkCols, 128) << budget;
    EXPECT_LE(s.chunkCols, 1024) << budget;
    EXPECT_EQ(s.chunks, (1000 + s.chunkCols - 1) / s.chunkCols);
    if (s.overBudget) {
      EXPECT_EQ(s.chunkCols, 1024) << "over budget: the fallback chunk (2048, capped at V)";
      continue;
    }
    ++fitting;
    EXPECT_LE(s.workspaceBytes, budget);
    EXPECT_GE(s.chunkCols, prevChunk) << "chunk shrinks as the budget grows, at " << budget;
    prevChunk = s.chunkCols;
  }
  EXPECT_GE(fitting, 100);
  EXPECT_TRUE(fg->plan(options(100, 0)).runSchedule(100).overBudget);
}

/// Whenever the policy says a schedule fits, the workspace (as the executor lays it out)
/// is within the budget, for every N of the bucket, not only the one planned for.
TEST(Planner, WorkspaceFitsBudgetForEveryN) {
  auto fg = lceFused(24, 1000);
  int checked = 0;
  for (int64_t budget : {int64_t(64) << 10, int64_t(200) << 10, int64_t(1) << 20,
                         int64_t(3) << 20, int64_t(16) << 20})
    for (int64_t n : {1, 7, 300, 1000, 1024, 3000, 4096, 4097, 20000, 65536}) {
      plan::Program p = fg->plan(options(n, budget));
      plan::RunSchedule s = p.runSchedule(n);
      int64_t total = 0;
      p.workspaceOffsets(s, &total);
      EXPECT_EQ(total, s.workspaceBytes) << s.describe();
      EXPECT_EQ(s.overBudget, total > budget) << s.describe();
      if (!s.overBudget)
        ++checked;
      EXPECT_GE(s.rowsPerBlock * s.rowBlocks, n) << s.describe();
      EXPECT_LT(s.rowsPerBlock * (s.rowBlocks - 1), std::max<int64_t>(n, 1)) << s.describe();
    }
  EXPECT_GE(checked, 30);
}

/// [Note: dA tile width] as a table: (rows of a block, k = D) -> the dA tile width on 132
/// SMs; then the planner applies it to a materialized Program (the Gemma-2 head: a block
/// of 1024 rows) and says so, and leaves the Llama-3 head's 256.
TEST(Planner, LhsTileWidthTable) {
  struct Row {
    int64_t rows, k;
    int32_t want;
    const char *why;
  };
  const std::vector<Row> table = {
      {2048, 4096, 256, "16 x 16 = 256 tiles: 97 % of two waves"},
      {1024, 2304, 192, "8 x 12 = 96 tiles (73 %) against 8 x 9 = 72 (55 %)"},
      {1024, 8192, 256, "8 x 32 = 256 tiles"},
      {1408, 4096, 192, "11 x 22 = 242 tiles (92 % x 0.97 = 89 %) against 11 x 16 = 176 (67 %)"},
      {128, 4096, 128, "one wave either way: 32 tiles keep 24 % of the SMs busy (x 0.93), 16 "
                       "keep 12 %"},
      {512, 2304, 128, "4 x 18 = 72 tiles x 0.93 (51 %) against 4 x 9 = 36 (27 %), 4 x 12 = 48"},
  };
  for (const Row &r : table)
    EXPECT_EQ(plan::chooseLhsTileWidth(r.rows, r.k, 132), r.want)
        << r.rows << " rows, k = " << r.k << ": " << r.why;

  auto widthOf = [](const plan::Program &p) {
    for (const plan::Kernel &k : p.kernels)
      if (const auto *d = std::get_if<plan::GemmDLhsKernel>(&k.body))
        return d->tile.bn;
    return 0;
  };
  plan::PlanOptions o = wgmmaOptions(8192);
  o.workspaceBudgetBytes = int64_t(512) << 20;
  plan::Program gemma = lceFused(2304, 256000, DType::BF16, 30.0)->plan(o);
  ASSERT_EQ(gemma.runSchedule(8192).rowsPerBlock, 1024) << gemma.runSchedule(8192).describe();
  EXPECT_EQ(widthOf(gemma), 192);
  EXPECT_NE(decision(gemma, "dA tile: 128x192x64 instead of 128x256: over the dA launches of "
                            "calls with N = 4097, 8192, 16384"),
            "");
  plan::Program llama = lceFused(4096, 128256, DType::BF16, std::nullopt)->plan(o);
  EXPECT_EQ(widthOf(llama), 256);
  EXPECT_EQ(decision(llama, "dA tile:"), "");
  // The caller's width (LCEJIT_DA_TILE), said so.
  plan::PlanOptions given = o;
  given.lhsTileWidth = 128;
  const plan::Program g128 = lceFused(2304, 256000, DType::BF16, 30.0)->plan(given);
  EXPECT_EQ(widthOf(g128), 128);
  EXPECT_NE(decision(g128, "dA tile: 128x128x64, given by the caller (LCEJIT_DA_TILE)"), "");
}

/// [Note: dA tile width] over the launches of whole calls: the long slab block and the
/// short ordinary blocks after it weigh as their rounds of tiles do (Gemma-2's head: 4608
/// rows then 4 x 896 favour 128; 4608 then 11 x 1024 and 512 favour 192); on one launch
/// without a split it is the one-block choice; a split (Llama-3's 257 rows in halves) counts.
TEST(Planner, LhsTileWidthOverCalls) {
  double c[3];
  EXPECT_EQ(plan::chooseLhsTileWidth({4608, 896, 896, 896, 896}, 2304, 4000, 132, 4, c), 128);
  EXPECT_NEAR(c[1], (4 + 4) * 192 / 0.97, 1e-6) << "192: 432 tiles in 4 rounds, 84 in 1 each";
  EXPECT_NEAR(c[2], (5 + 4) * 128 / 0.93, 1e-6) << "128: 648 tiles in 5 rounds, 126 in 1 each";
  std::vector<int64_t> big = {4608};
  for (int i = 0; i < 11; ++i)
    big.push_back(1024);
  big.push_back(512);
  EXPECT_EQ(plan::chooseLhsTileWidth(big, 2304, 4000, 132, 4), 192);
  for (int64_t rows : {int64_t(2048), int64_t(1024), int64_t(1408), int64_t(128), int64_t(512)})
    for (int64_t k : {int64_t(2304), int64_t(4096), int64_t(8192)})
      EXPECT_EQ(plan::chooseLhsTileWidth({rows}, k, 4000, 132, 1),
                plan::chooseLhsTileWidth(rows, k, 132))
          << rows << " rows, k = " << k;
  EXPECT_NEAR((plan::chooseLhsTileWidth({257}, 4096, 2004, 132, 4, c), c[0]), 256.0 / 2, 1e-6)
      << "48 tiles of 256 in halves: one round of half tiles";
}

/// [Note: dA widths per launch]: a head of D = 768 and V = 256000 (the bucket of N = 4096)
/// gets a 192-wide copy of its 256-wide dA, and each row block's launch runs exactly one of
/// them: the 2048 rows of N = 2048 (one slab block, 512 of its rows in the tails: [Note:
/// slab tails]) the 192, N = 1025 (one block) the 256. Gemma-2's head (N = 8192: 5120
/// rows in slabs, then 3 x 1024) now keeps one width, the 192, for every launch; Llama-3's
/// head keeps one width, and so does a width given by the caller.
TEST(Planner, LhsWidthsPerLaunch) {
  plan::PlanOptions o = wgmmaOptions(4096);
  o.workspaceBudgetBytes = int64_t(512) << 20;
  const plan::Program g = lceFused(768, 256000, DType::BF16, std::nullopt)->plan(o);
  int32_t primary = -1, alt = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(g.kernels.size()); ++i)
    if (const auto *d = std::get_if<plan::GemmDLhsKernel>(&g.kernels[static_cast<size_t>(i)].body))
      (d->alternativeOf < 0 ? primary : alt) = i;
  ASSERT_GE(primary, 0);
  ASSERT_GE(alt, 0) << fmt::format("{}", fmt::join(g.decisions, "\n"));
  const auto &pd = std::get<plan::GemmDLhsKernel>(g.kernels[static_cast<size_t>(primary)].body);
  const auto &ad = std::get<plan::GemmDLhsKernel>(g.kernels[static_cast<size_t>(alt)].body);
  EXPECT_EQ(ad.alternativeOf, primary);
  EXPECT_EQ(pd.tile.bn, 256);
  EXPECT_EQ(ad.tile.bn, 192);
  EXPECT_EQ(g.kernels[static_cast<size_t>(alt)].name, "lce_dlhs0_w192");
  EXPECT_NE(decision(g, "dA widths per launch ([Note: dA widths per launch]): lce_dlhs0_w192 "
                        "also at 128x192x64"),
            "");
  // The dA launches of a run: (rows, width), one per row block.
  auto launches = [](const plan::Program &p, int64_t n) {
    const plan::RunSchedule s = p.runSchedule(n, /*outputFree=*/true);
    std::vector<std::pair<int64_t, int32_t>> out;
    for (const plan::LaunchItem &it : p.expand(s))
      if (const auto *d = std::get_if<plan::GemmDLhsKernel>(
              &p.kernels[static_cast<size_t>(it.kernel)].body))
        out.push_back({it.rows, d->tile.bn});
    EXPECT_EQ(static_cast<int64_t>(out.size()), s.rowBlocks) << s.describe();
    return out;
  };
  using L = std::vector<std::pair<int64_t, int32_t>>;
  EXPECT_EQ(g.runSchedule(2048, true).slabRows, 2048);
  EXPECT_EQ(g.runSchedule(2048, true).slabHead, 1536);
  EXPECT_EQ(launches(g, 2048), (L{{2048, 192}}));
  EXPECT_EQ(launches(g, 1025), (L{{1025, 256}}));
  // Gemma-2's head: one width for the slab block with tails and the blocks after it.
  plan::PlanOptions o8 = wgmmaOptions(8192);
  o8.workspaceBudgetBytes = int64_t(512) << 20;
  const plan::Program gemma = lceFused(2304, 256000, DType::BF16, 30.0)->plan(o8);
  EXPECT_EQ(launches(gemma, 8192), (L{{5120, 192}, {1024, 192}, {1024, 192}, {1024, 192}}));
  // Llama-3's head: one width; a width given by the caller: one width.
  const plan::Program llama = lceFused(4096, 128256, DType::BF16, std::nullopt)->plan(o);
  plan::PlanOptions given = o;
  given.lhsTileWidth = 192;
  const plan::Program g192 = lceFused(768, 256000, DType::BF16, std::nullopt)->plan(given);
  for (const plan::Program *p : {&llama, &g192, &gemma}) {
    int dAs = 0;
    for (const plan::Kernel &k : p->kernels)
      if (const auto *d = std::get_if<plan::GemmDLhsKernel>(&k.body)) {
        ++dAs;
        EXPECT_EQ(d->alternativeOf, -1);
      }
    EXPECT_EQ(dAs, 1);
  }
}

/// [Note: sm90 split-K] as a table: (tiles, k-blocks, SMs) -> CTAs per tile; then the
/// planner's decisions for the Gemma-2 head (a block of 1024 rows: 96 tiles of 128 x 192,
/// unsplit) and the Llama-3 head in the bucket of N = 300 (N = 257: 48 tiles, halves).
TEST(Planner, SplitKTable) {
  struct Row {
    int64_t tiles, kblocks;
    int32_t sms, maxSplit, want;
    const char *why;
  };
  const std::vector<Row> table = {
      {96, 4000, 132, 4, 1, "Gemma-2's dA: 96 tiles fill a round unsplit; split needs three"},
      {96, 4000, 132, 2, 1, "halves: 192 CTAs, two rounds"},
      {256, 2004, 132, 4, 1, "Llama-3's dA: two rounds unsplit"},
      {208, 168, 132, 4, 1, "lean's 1664-row blocks: two rounds unsplit"},
      {128, 4000, 132, 4, 1, "one round of 128: nothing to gain"},
      {64, 4000, 132, 4, 2, "64 tiles: 128 CTAs in halves, one round"},
      {66, 4000, 132, 4, 2, "66 tiles: 132 CTAs in halves"},
      {67, 4000, 132, 4, 1, "67 tiles: halves would need two rounds"},
      {29, 4000, 132, 4, 4, "29 tiles: 116 CTAs in quarters, within 0.9 of the SMs"},
      {30, 4000, 132, 4, 2, "30 tiles: 120 CTAs in quarters is over 0.9 of the SMs"},
      {16, 4000, 132, 4, 4, "16 tiles: quarters"},
      {16, 4000, 132, 2, 2, "16 tiles, at most halves"},
      {16, 31, 132, 4, 2, "31 k-blocks: under 8 per rank for quarters, enough for halves"},
      {16, 16, 132, 4, 2, "16 k-blocks: 8 per half"},
      {16, 15, 132, 4, 1, "15 k-blocks: under 8 per rank for halves"},
      {96, 4000, 132, 1, 1, "no split allowed"},
      {0, 4000, 132, 4, 1, "no tiles"},
      {1, 4000, 1, 4, 1, "one SM"},
  };
  for (const Row &r : table)
    EXPECT_EQ(plan::chooseSplitK(r.tiles, r.kblocks, r.sms, r.maxSplit), r.want)
        << r.tiles << " tiles, " << r.kblocks << " k-blocks, " << r.sms << " SMs: " << r.why;

  plan::PlanOptions o = wgmmaOptions(8192);
  o.workspaceBudgetBytes = int64_t(512) << 20;
  plan::Program gemma = lceFused(2304, 256000, DType::BF16, 30.0)->plan(o);
  EXPECT_NE(decision(gemma, "dA split-K (example): N = 16384: 1024 rows a block make 96 tiles of "
                            "128x192 on 132 SMs: one CTA per tile"),
            "");
  plan::Program llama = lceFused(4096, 128256, DType::BF16, std::nullopt)->plan(wgmmaOptions(300));
  EXPECT_NE(decision(llama, "dA split-K (example): N = 257: 257 rows a block make 48 tiles of "
                            "128x256 on 132 SMs: clusters of 2 CTAs per tile"),
            "");
  EXPECT_NE(decision(llama, "dA split-K (example): N = 1024: 1024 rows a block make 128 tiles "
                            "of 128x256 on 132 SMs: one CTA per tile"),
            "");
}

/// [Note: dA stream-K] as a table (plan::lhsStreamK), then what the planner does with it:
/// Gemma-2's head gets the scratch and its 1024-row dA launches run 128 CTAs
/// cooperatively, its slab block's 480 tiles 132 (3 whole rounds, then 84 tiles on 112 of
/// them); Llama-3's head gets no scratch
/// (none of its sampled launches is one, and its workspace is unchanged); LCEJIT_DA_STREAMK
/// off leaves Gemma-2's launches at one CTA per tile.
TEST(Planner, LhsStreamK) {
  struct Row {
    int64_t tiles, kblocks;
    int32_t sms;
    bool want;
    const char *why;
  };
  const std::vector<Row> table = {
      {96, 4000, 132, true, "Gemma-2's 1024-row blocks: 128 CTAs"},
      {99, 4000, 132, true, "132 CTAs, every SM"},
      {102, 4000, 132, false, "136 CTAs: more than the SMs"},
      {97, 4000, 132, false, "not a multiple of 3"},
      {128, 4000, 132, false, "not a multiple of 3 (and a full round)"},
      {480, 4000, 132, true, "Gemma-2's slab block: 3 rounds, then 84 tiles on 112 CTAs"},
      {132 + 99, 4000, 132, true, "a round, then 99 tiles on every SM"},
      {132 + 102, 4000, 132, false, "a tail of 102: 136 CTAs"},
      {264, 4000, 132, false, "whole rounds: no tail"},
      {1024, 4000, 132, false, "Llama-3's slab block: a tail of 100, not a multiple of 3"},
      {480, 15, 132, false, "15 k-blocks, however many rounds"},
      {72, 4000, 132, true, "96 CTAs (a launch that does not split K)"},
      {96, 16, 132, true, "16 k-blocks: quarters of 4"},
      {96, 15, 132, false, "15 k-blocks: a quarter under 4"},
      {0, 4000, 132, false, "no tiles"},
      {3, 4000, 4, true, "one group on 4 SMs"},
      {3, 4000, 3, false, "4 CTAs on 3 SMs"},
  };
  for (const Row &r : table)
    EXPECT_EQ(plan::lhsStreamK(r.tiles, r.kblocks, r.sms), r.want)
        << r.tiles << " tiles, " << r.kblocks << " k-blocks, " << r.sms << " SMs: " << r.why;
  // 33 groups on 132 SMs, each a slot of 2 x 128 x 96 floats, after the flags.
  EXPECT_EQ(plan::lhsStreamKBytes(192, 132), plan::kStreamKFlagBytes + 33 * 2 * 128 * 96 * 4);

  plan::PlanOptions o = wgmmaOptions(8192);
  o.workspaceBudgetBytes = int64_t(512) << 20;
  auto dlhs = [](const plan::Program &p) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < static_cast<int32_t>(p.kernels.size()); ++i)
      if (std::holds_alternative<plan::GemmDLhsKernel>(p.kernels[static_cast<size_t>(i)].body))
        out.push_back(i);
    return out;
  };
  plan::Program gemma = lceFused(2304, 256000, DType::BF16, 30.0)->plan(o);
  ASSERT_FALSE(dlhs(gemma).empty());
  for (int32_t k : dlhs(gemma)) {
    const auto &d = std::get<plan::GemmDLhsKernel>(gemma.kernels[static_cast<size_t>(k)].body);
    ASSERT_TRUE(d.streamK.valid()) << gemma.kernels[static_cast<size_t>(k)].name;
    const plan::BufferSpec &b = gemma.workspace[static_cast<size_t>(d.streamK.index)];
    EXPECT_EQ(b.init, plan::BufferInit::Zero) << "the flags start at 0";
    EXPECT_EQ(b.bytesPerRow, 0);
    EXPECT_EQ(b.bytesFixed, plan::lhsStreamKBytes(192, 132));
  }
  const int32_t k0 = dlhs(gemma).front();
  const plan::LaunchDims block = gemma.launchDims(k0, 1024, 256000);
  EXPECT_EQ(block.grid[0], 128) << "96 tiles of 128x192: 32 groups of 4 CTAs";
  EXPECT_TRUE(block.cooperative);
  EXPECT_EQ(block.cluster, 1);
  const plan::LaunchDims slab = gemma.launchDims(k0, 5120, 256000);
  EXPECT_EQ(slab.grid[0], 132) << "480 tiles: 3 rounds on every SM, then the tail";
  EXPECT_TRUE(slab.cooperative);
  EXPECT_EQ(slab.cluster, 1);
  const plan::LaunchDims whole = gemma.launchDims(k0, 128 * 11 * 2, 256000);
  EXPECT_EQ(whole.grid[0], 132) << "264 tiles: two whole rounds";
  EXPECT_FALSE(whole.cooperative);
  EXPECT_NE(decision(gemma, "dA stream-K ([Note: dA stream-K]): a launch of T tiles"), "");
  // The run schedules are the ones without the scratch (the planner checks; so does this).
  const plan::RunSchedule s = plan::chooseRunSchedule(gemma, 8192, true);
  EXPECT_EQ(s.slabRows, 5120);
  EXPECT_EQ(s.rowsPerBlock, 1024);
  EXPECT_LE(s.workspaceBytes, int64_t(512) << 20);

  plan::Program llama = lceFused(4096, 128256, DType::BF16, std::nullopt)->plan(o);
  for (int32_t k : dlhs(llama))
    EXPECT_FALSE(std::get<plan::GemmDLhsKernel>(llama.kernels[static_cast<size_t>(k)].body)
                     .streamK.valid());
  for (const plan::BufferSpec &b : llama.workspace)
    EXPECT_NE(b.name, "dlhs_stream_k");

  // A scratch of more than 1 % of the budget is not taken, though launches would take it
  // (D = 2048 at 100 MiB: 3.2 MB; the schedules of N between the sampled ones may change).
  plan::PlanOptions small = wgmmaOptions(6000);
  small.workspaceBudgetBytes = int64_t(100) << 20;
  plan::Program tight = lceFused(2048, 32000, DType::BF16, 30.0)->plan(small);
  EXPECT_NE(decision(tight, fmt::format("not taken: its {} bytes of scratch are more than 1 % "
                                        "of the 104857600-byte budget",
                                        plan::lhsStreamKBytes(192, 132))),
            "");
  for (int32_t k : dlhs(tight))
    EXPECT_FALSE(std::get<plan::GemmDLhsKernel>(tight.kernels[static_cast<size_t>(k)].body)
                     .streamK.valid());

  o.daStreamK = false;
  plan::Program off = lceFused(2304, 256000, DType::BF16, 30.0)->plan(o);
  const int32_t k1 = dlhs(off).front();
  EXPECT_FALSE(std::get<plan::GemmDLhsKernel>(off.kernels[static_cast<size_t>(k1)].body)
                   .streamK.valid());
  const plan::LaunchDims plain = off.launchDims(k1, 1024, 256000);
  EXPECT_EQ(plain.grid[0], 96);
  EXPECT_FALSE(plain.cooperative);
  EXPECT_FALSE(off.launchDims(k1, 5120, 256000).cooperative);
}

/// [Note: dA stream-K chains] as a table (plan::lhsChainQ, lhsChainCtas), then what the
/// planner and the run schedules do with it: Gemma-2's head chains its slab block's dA (3
/// rounds, then 84 tiles in chains of 2 on 126 CTAs) with a slot for each of those 84
/// tiles on top of the schedule it had without, which stays as it was; the call that adds
/// to dW (ordinary blocks) and the lean budget (no room) have no slots; Llama-3's head would
/// need chains of 4 (100 tiles), longer than kChainMaxQ, and plans none; LCEJIT_DA_CHAIN off
/// plans none.
TEST(Planner, LhsChains) {
  struct Row {
    int64_t tiles, kblocks;
    int32_t sms;
    int32_t q;
    int64_t ctas;
    const char *why;
  };
  const std::vector<Row> table = {
      {480, 4000, 132, 2, 132, "Gemma-2's slab block: 3 rounds, then 84 tiles on 126 CTAs"},
      {1024, 2004, 132, 0, 0, "Llama-3's slab block: 100 tiles need chains of 4"},
      {512, 2004, 132, 0, 0, "N = 4096 at Llama-3's head: 116 tiles need chains of 8"},
      {132 + 99, 2004, 132, 3, 132, "a round, then 99 tiles in chains of 3 on every SM"},
      {264, 2004, 132, 0, 0, "whole rounds: no tail"},
      {100, 2004, 132, 0, 0, "one round of 100 tiles: chains of 4"},
      {96, 16, 132, 3, 128, "one round of 96: chains of 3, 16 k-blocks (quarters of 4)"},
      {96, 15, 132, 0, 0, "15 k-blocks"},
      {32, 2004, 132, 1, 64, "one round of 32: pairs, 64 CTAs"},
      {66, 2004, 132, 1, 132, "one round of 66: pairs on every SM"},
      {67, 2004, 132, 2, 101, "one round of 67: 33 chains of 2 and one of 1"},
      {0, 2004, 132, 0, 0, "no tiles"},
      {1, 2004, 2, 1, 2, "one tile on 2 SMs"},
      {1, 2004, 1, 0, 0, "one tile on 1 SM"},
      {480, 4000, 600, 0, 0, "more SMs than the flags hold"},
  };
  for (const Row &r : table) {
    EXPECT_EQ(plan::lhsChainQ(r.tiles, r.kblocks, r.sms), r.q)
        << r.tiles << " tiles, " << r.kblocks << " k-blocks, " << r.sms << " SMs: " << r.why;
    EXPECT_EQ(plan::lhsChainCtas(r.tiles, r.kblocks, r.sms), r.ctas)
        << r.tiles << " tiles, " << r.kblocks << " k-blocks, " << r.sms << " SMs: " << r.why;
  }
  // The chain's q is the smallest that fits the SMs: q - 1 does not.
  for (int64_t tiles = 1; tiles <= 600; ++tiles)
    if (const int32_t q = plan::lhsChainQ(tiles, 4000, 132); q > 1) {
      const int64_t tail = plan::lhsStreamKTail(tiles, 132);
      EXPECT_LE(tail + (tail + q - 1) / q, 132) << tiles;
      EXPECT_GT(tail + (tail + q - 2) / (q - 1), 132) << tiles;
      EXPECT_LE(q, plan::kChainMaxQ) << tiles;
    }

  plan::PlanOptions o = wgmmaOptions(8192);
  o.workspaceBudgetBytes = int64_t(512) << 20;
  plan::Program gemma = lceFused(2304, 256000, DType::BF16, 30.0)->plan(o);
  ASSERT_GE(gemma.schedule.lhsChain, 0);
  const plan::BufferSpec &buf = gemma.workspace[static_cast<size_t>(gemma.schedule.lhsChain)];
  EXPECT_EQ(buf.bytesPerRow + buf.bytesFixed + buf.bytesPerRowCol, 0)
      << "no bytes of its own: the slab union holds the slots";
  int32_t k = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(gemma.kernels.size()); ++i)
    if (const auto *d = std::get_if<plan::GemmDLhsKernel>(&gemma.kernels[static_cast<size_t>(i)].body)) {
      EXPECT_TRUE(d->chain.valid()) << gemma.kernels[static_cast<size_t>(i)].name;
      if (k < 0)
        k = i;
    }
  ASSERT_GE(k, 0);
  const int32_t bn = std::get<plan::GemmDLhsKernel>(gemma.kernels[static_cast<size_t>(k)].body).tile.bn;
  EXPECT_EQ(bn, 192);
  EXPECT_NE(decision(gemma, "3 whole rounds, then 84 tiles in chains of 2 on 126 CTAs"), "");
  const plan::RunSchedule over = plan::chooseRunSchedule(gemma, 8192, true);
  EXPECT_EQ(over.slabRows, 5120);
  EXPECT_EQ(over.lhsChainBytes, plan::kChainFlagBytes + 84 * 128 * 192 * 4);
  EXPECT_LE(over.workspaceBytes, int64_t(512) << 20);
  EXPECT_EQ(gemma.slabUnionOffset(over, gemma.schedule.lhsChain) +
                (over.lhsChainBytes + 255) / 256 * 256,
            gemma.slabUnionBytes(over))
      << "the slots last in the union";
  const plan::LaunchDims chained = gemma.launchDims(k, 5120, 256000, 0, true);
  EXPECT_EQ(chained.grid[0], 132);
  EXPECT_TRUE(chained.cooperative);
  EXPECT_EQ(chained.cluster, 1);
  // One round of 72 tiles (768 rows; too many to split K): chains of 2 on 108 CTAs with the
  // slots, the 3-on-4 groups (96 CTAs) without.
  const plan::LaunchDims round = gemma.launchDims(k, 768, 256000, 0, true);
  EXPECT_EQ(round.grid[0], 108);
  EXPECT_TRUE(round.cooperative);
  EXPECT_EQ(round.cluster, 1);
  EXPECT_EQ(gemma.launchDims(k, 768, 256000, 0, false).grid[0], 96);
  const plan::RunSchedule adds = plan::chooseRunSchedule(gemma, 8192, false);
  EXPECT_EQ(adds.lhsChainBytes, 0) << "ordinary blocks: no slots";

  // Llama-3's head: N = 8192's slab block would need chains of 4 and has no slots; other
  // calls of the bucket chain (N = 4864: 80 tail tiles in chains of 2), so the kernel can.
  plan::Program llama = lceFused(4096, 128256, DType::BF16, std::nullopt)->plan(o);
  EXPECT_GE(llama.schedule.lhsChain, 0);
  EXPECT_EQ(plan::chooseRunSchedule(llama, 8192, true).lhsChainBytes, 0);
  EXPECT_GT(plan::chooseRunSchedule(llama, 4864, true).lhsChainBytes, 0);
  EXPECT_NE(decision(llama, "N = 4864: its 4864 rows make 608 tiles of 128x256 on 132 SMs: 4 "
                            "whole rounds, then 80 tiles in chains of 2 on 120 CTAs"),
            "");
  // The lean Llama-3 A (64 MiB) has no room for slots.
  plan::PlanOptions leanLlama = wgmmaOptions(8192);
  leanLlama.workspaceBudgetBytes = int64_t(64) << 20;
  plan::Program leanL = lceFused(4096, 128256, DType::BF16, std::nullopt)->plan(leanLlama);
  EXPECT_EQ(plan::chooseRunSchedule(leanL, 8192, true).lhsChainBytes, 0);
  // A budget no call of the bucket has room in: the planner says so and plans no chain
  // (D = 1024, V = 32000 at 24 MiB, N up to 4096).
  plan::PlanOptions tiny = wgmmaOptions(4096);
  tiny.workspaceBudgetBytes = int64_t(24) << 20;
  plan::Program none = lceFused(1024, 32000, DType::BF16, std::nullopt)->plan(tiny);
  EXPECT_EQ(none.schedule.lhsChain, -1);
  EXPECT_NE(decision(none, "dA stream-K chains ([Note: dA stream-K chains]): not taken"), "");

  o.daChain = false;
  plan::Program off = lceFused(2304, 256000, DType::BF16, 30.0)->plan(o);
  EXPECT_EQ(off.schedule.lhsChain, -1);
  for (const plan::Kernel &kk : off.kernels)
    if (const auto *d = std::get_if<plan::GemmDLhsKernel>(&kk.body)) {
      EXPECT_FALSE(d->chain.valid());
    }
  // The schedules with the slots are the ones without them, plus the slots.
  for (int64_t n : {4097, 6000, 8192, 12000, 16384})
    for (bool free : {true, false}) {
      plan::RunSchedule with = plan::chooseRunSchedule(gemma, n, free);
      const plan::RunSchedule without = plan::chooseRunSchedule(off, n, free);
      EXPECT_LE(with.workspaceBytes, int64_t(512) << 20) << n;
      // At most the slots more (the slab union may still fit the ordinary blocks' values).
      EXPECT_GE(with.workspaceBytes, without.workspaceBytes) << n;
      EXPECT_LE(with.workspaceBytes - without.workspaceBytes, (with.lhsChainBytes + 255) / 256 * 256)
          << n << (free ? " overwriting" : " adding");
      with.lhsChainBytes = 0;
      with.workspaceBytes = without.workspaceBytes;
      EXPECT_EQ(with.describe(), without.describe()) << n;
    }

  // The lean budget: no slab schedule has room for the slots.
  plan::PlanOptions lean = wgmmaOptions(8192);
  lean.workspaceBudgetBytes = int64_t(64) << 20;
  plan::Program small = lceFused(2304, 256000, DType::BF16, 30.0)->plan(lean);
  EXPECT_EQ(plan::chooseRunSchedule(small, 8192, true).lhsChainBytes, 0);
}

/// [Note: column splits per call] as a table: the Llama-3 head on the wgmma path (ping-
/// pong forward reduce: two partial entries per CTA split; the plan sizes the partials for
/// 66 entries: 33 CTA splits, a quarter of the SMs), rows of a block -> partial entries.
/// The rows pin the cost model (waves of 132 CTAs x column tiles per CTA, at least a
/// quarter of the plan's splits); the properties below say why they are right.
TEST(Planner, ColumnSplitsPerCallTable) {
  auto llama = lceFused(4096, 128256, DType::BF16, std::nullopt);
  plan::PlanOptions o = wgmmaOptions(8192);
  o.workspaceBudgetBytes = int64_t(512) << 20; // the default budget
  plan::Program p = llama->plan(o);
  ASSERT_EQ(p.splits, 66);
  const std::vector<std::pair<int64_t, int32_t>> table = {
      {1, 66},     // one row tile: all 33 CTA splits fit one wave
      {128, 66},   //
      {1024, 66},  // 8 row tiles x 33 = 264 CTAs: two whole waves of 31 column tiles
      {1408, 48},  // 11 x 24 = 264 CTAs, two full waves (ties with 11 x 12 keep more splits)
      {1664, 20},  // 13 x 10 = 130 CTAs: one wave (33 CTA splits would be 3.25 waves)
      {2048, 66},  // 16 x 33 = 528 CTAs, 4 whole waves of 31 tiles (24: 2.9 waves of 42)
      {8192, 66},  // 64 x 33 = 2112 CTAs, 16 whole waves of 31 tiles (32: 15.5 waves of 32)
  };
  const int64_t tiles = (128256 + 127) / 128;
  for (const auto &[rows, want] : table) {
    const int32_t got = plan::chooseColumnSplits(p, rows);
    EXPECT_EQ(got, want) << rows << " rows";
    EXPECT_EQ(got % 2, 0) << "ping-pong: two entries per CTA split";
    EXPECT_LE(got, p.splits) << "the partials buffer holds p.splits entries";
    EXPECT_GE(got, p.splits / 4);
    // Never worse than the plan's count under the model: waves x column tiles per CTA.
    auto cost = [&](int64_t entries) {
      const int64_t s = entries / 2, rowTiles = (rows + 127) / 128;
      return ((rowTiles * s + 131) / 132) * ((tiles + s - 1) / s);
    };
    EXPECT_LE(cost(got), cost(p.splits)) << rows << " rows";
  }
  // The materialized schedule's row blocks launch with the count: N = 8192 runs 4 blocks
  // of 2048 rows, N = 6656 3 of 2048 and one of 512 (the rule's 4 of 1792, 224 dA tiles
  // on 132 SMs, are estimated 2 % dearer), and N = 12725 7 of 2048 (balanced 1920 = 15
  // row tiles; the last block 437 rows).
  for (auto [n, rows, splits] : {std::tuple<int64_t, int64_t, int32_t>{8192, 2048, 66},
                                 {6656, 2048, 66},
                                 {12725, 2048, 66}}) {
    plan::RunSchedule s = p.runSchedule(n);
    EXPECT_EQ(s.rowsPerBlock, rows) << s.describe();
    EXPECT_EQ(s.splits, splits);
    for (const plan::LaunchItem &it : p.expand(s))
      EXPECT_EQ(it.splits, splits);
  }
  // mma.sync has no wgmma reduce: the plan's count, whatever the rows.
  plan::Program m = llama->plan(options(8192));
  for (int64_t rows : {1, 1664, 8192})
    EXPECT_EQ(plan::chooseColumnSplits(m, rows), m.splits);
}

/// [Note: choosing blocks and chunks] as a table: (N, D, V, budget, dtype, dW) ->
/// (row blocks, chunks, over budget). The rows pin the policy; the property test below
/// says why these numbers are right.
TEST(Planner, RunScheduleTable) {
  struct Row {
    int64_t n, d, v, budgetMb;
    DType dtype, dw;
    bool exact;
    int64_t rowBlocks, chunks;
    bool over;
  };
  const DType bf = DType::BF16, f32 = DType::F32;
  const Row rows[] = {
      // Llama-3 head, f32 dW (the benchmark cases S, Q, A, C, L and the largest bucket).
      {2048, 4096, 128256, 512, bf, f32, false, 1, 2, false},
      {4096, 4096, 128256, 512, bf, f32, false, 1, 3, false},
      {8192, 4096, 128256, 512, bf, f32, false, 1, 6, false},
      // (Row buffers that only the blocked steps touch, the forward's partials among them,
      // hold one block's rows: wider chunks once rows are blocked.)
      {32768, 4096, 128256, 512, bf, f32, false, 3, 8, false},
      {65536, 4096, 128256, 512, bf, f32, false, 5, 11, false},
      {131072, 4096, 128256, 512, bf, f32, false, 9, 13, false},
      // Exact mode: two bf16 dZ arrays, so narrower chunks.
      {8192, 4096, 128256, 512, bf, f32, true, 1, 11, false},
      // Gemma-2 head (case B).
      {8192, 2304, 256000, 512, bf, f32, false, 1, 10, false},
      // A lean budget (64 MiB): the largest blocks (1664 rows) that leave room for chunks
      // of at least 8192 columns.
      {8192, 4096, 128256, 64, bf, f32, false, 5, 11, false},
      // 16 MiB: the f32 dH accumulator of a minimum block (1024 rows) alone needs 16 MiB.
      {8192, 4096, 128256, 16, bf, f32, false, 8, 63, true},
      // bf16 dW: rows cannot be blocked; at N = 65536 the f32 dH accumulator alone is
      // 1 GiB, so the schedule goes over budget with 2048-column chunks. The target group
      // sums ([Note: target group sums]: 8443 B per row) leave less room for dZ chunks.
      {8192, 4096, 128256, 512, bf, bf, false, 1, 7, false},
      {65536, 4096, 128256, 512, bf, bf, false, 1, 63, true},
      // f32 inputs: f32 dZ and f32 dH (no accumulator).
      {8192, 4096, 32000, 512, f32, f32, false, 1, 2, false},
  };
  for (const Row &r : rows) {
    fe::LceSpec spec;
    spec.hidden = r.d;
    spec.vocab = r.v;
    spec.dtype = r.dtype;
    spec.ignoreIndex = -100;
    auto fg = pipeline::compileGraph(*fe::buildLceGraph(spec));
    plan::PlanOptions o = options(r.n, r.budgetMb << 20);
    o.exactGradients = r.exact;
    o.outputTypes = {DType::F32, r.dtype, r.dw};
    plan::Program p = fg->plan(o);
    plan::RunSchedule s = p.runSchedule(r.n);
    SCOPED_TRACE(s.describe());
    EXPECT_EQ(s.rowBlocks, r.rowBlocks);
    EXPECT_EQ(s.chunks, r.chunks);
    EXPECT_EQ(s.overBudget, r.over);
    EXPECT_EQ(s.overBudget, s.workspaceBytes > (r.budgetMb << 20));
  }
}

/// [Note: estimated run time]: the estimate reproduces the H200 measurements it was
/// calibrated on (ratios of one call's time to the time with blocks of 2048 rows, Llama-3's
/// head, docs/performance.md session 15) to 2 %, and ranks what the policy chooses.
TEST(Planner, EstimatedRunTimeMatchesItsCalibration) {
  auto g = lceFused(4096, 128256, DType::BF16, std::nullopt);
  plan::PlanOptions o = wgmmaOptions(8192);
  o.workspaceBudgetBytes = int64_t(512) << 20;
  o.backward = plan::PlanOptions::Backward::Materialized;
  o.outputTypes = {DType::F32, DType::BF16, DType::F32}; // the op's: bf16 dH, f32 dW
  const plan::Program p = g->plan(o);
  struct Row {
    int64_t n, rows;
    double measured; // time / time with 2048 rows a block
  };
  // Measured when the plan held 32 CTA splits (64 partial entries; now 33, a quarter of
  // the SMs: [Note: column splits per call]): the estimate is checked under that count.
  plan::Program p15 = p;
  p15.splits = 64;
  for (const Row &r : {Row{4526, 1536, 1.049}, Row{4526, 1024, 1.067}, Row{4526, 1792, 0.991},
                       Row{24625, 1792, 1.025}}) {
    const double ratio = plan::estimateRunUnits(p15, r.n, r.rows, 0) /
                         plan::estimateRunUnits(p15, r.n, 2048, 0);
    EXPECT_NEAR(ratio, r.measured, 0.025) << "N = " << r.n << ", " << r.rows << " rows";
  }
  // More rows of work, more time; a block of dW read-modify-write more, more time.
  EXPECT_LT(plan::estimateRunUnits(p, 8192, 2048, 0), plan::estimateRunUnits(p, 8320, 2048, 0));
  EXPECT_LT(plan::estimateRunUnits(p, 8192, 2048, 0), plan::estimateRunUnits(p, 8192, 1024, 0));
  // The choices it makes (the policy leaves its rule only for a 2 % estimated gain): N =
  // 4526 in 2048 + 2048 + 430 rows, not the rule's three of 1536 (192 dA tiles, 1.45 waves).
  EXPECT_EQ(p.runSchedule(4526).rowsPerBlock, 2048) << p.runSchedule(4526).describe();
  EXPECT_EQ(p.runSchedule(8192).rowsPerBlock, 2048);
  // (N = 65536 with its own bucket's Program: this one's may hold the correction's groups,
  // [Note: a group's first and last rows], which fit its bucket's budget and not 65536's.)
  EXPECT_EQ(g->plan([&] {
               plan::PlanOptions o65 = o;
               o65.tokens = 65536;
               return o65;
             }())
                .runSchedule(65536)
                .rowsPerBlock,
            2048);
  // Gemma-2's head: the budget's 1024 rows.
  auto gemma = lceFused(2304, 256000, DType::BF16, 30.0);
  const plan::Program b = gemma->plan(o);
  EXPECT_EQ(b.runSchedule(8192).rowsPerBlock, 1024) << b.runSchedule(8192).describe();
  // The lean recompute (64 MiB): 4 blocks of 2048 rows (256 dA tiles a chunk, 1.94 waves)
  // instead of the rule's 5 of 1664 (208 tiles, 1.58 waves): measured 57.3 against 59.0 ms;
  // chunks of 7168 columns, not the widest that fit (7680): the dZ GEMM's 16 x 56 tiles and
  // dB's 56 x 16 fill 6.8 waves of 132 SMs, where 16 x 60 were 7.3.
  o.backward = plan::PlanOptions::Backward::Recompute;
  o.workspaceBudgetBytes = int64_t(64) << 20;
  const plan::Program lean = g->plan(o);
  const plan::RunSchedule s = lean.runSchedule(8192);
  EXPECT_EQ(s.rowsPerBlock, 2048) << s.describe();
  EXPECT_EQ(s.chunkCols, 7168) << s.describe();
  EXPECT_LE(s.workspaceBytes, o.workspaceBudgetBytes);
  // The schedule says that the estimate chose it, over what, by how much.
  EXPECT_EQ(s.ruleRowsPerBlock, 1664);
  EXPECT_EQ(s.ruleChunkCols, 10752);
  EXPECT_GT(s.estimatedGain, 0.02);
  EXPECT_NE(s.describe().find("below the rule's blocks of 1664 rows, chunks of 10752"),
            std::string::npos)
      << s.describe();
  // Where the rule stands, nothing of the kind.
  EXPECT_EQ(p.runSchedule(8192).ruleRowsPerBlock, 0);
  EXPECT_EQ(p.runSchedule(8192).describe().find("estimated"), std::string::npos);
  EXPECT_LT(plan::estimateRunUnits(lean, 8192, 2048, s.chunkCols),
            plan::estimateRunUnits(lean, 8192, 1664, 10752));
  // Bad input names itself.
  try {
    plan::estimateRunUnits(p, 8192, 0, 0);
    ADD_FAILURE() << "0 rows a block accepted";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("0 rows a block"), std::string::npos) << e.what();
  }
}

/// ScheduleSpec::blockRows (LCEJIT_BLOCK_ROWS): where rows can be blocked, blocks of the
/// rows asked for (rounded down to the row alignment), or of the most the budget holds;
/// the workspace stays within the budget; where rows cannot be blocked (a bf16 dW) it is
/// ignored.
TEST(Planner, BlockRowsCapWhereRowsAreBlocked) {
  auto plan = [](int64_t budgetMb, DType dw, bool materialized, int64_t cap) {
    auto g = lceFused(4096, 128256, DType::BF16, std::nullopt);
    plan::PlanOptions o = wgmmaOptions(8192);
    o.workspaceBudgetBytes = budgetMb << 20;
    o.backward = materialized ? plan::PlanOptions::Backward::Materialized
                              : plan::PlanOptions::Backward::Recompute;
    o.outputTypes = {DType::F32, DType::BF16, dw};
    o.blockRows = cap;
    return g->plan(o);
  };
  struct Row {
    int64_t budgetMb;
    bool materialized;
    int64_t cap, n;
    int64_t rowsPerBlock, rowBlocks;
  };
  const Row rows[] = {
      // The materialized schedule (A): the policy's 4 blocks of 2048, then capped.
      {512, true, 0, 8192, 2048, 4},
      {512, true, 1024, 8192, 1024, 8},
      {512, true, 1000, 8192, 896, 10},  // 1000 -> 896 (7 row tiles)
      {512, true, 4096, 8192, 2048, 4},  // above what the budget holds: what it holds
      {512, true, 1024, 700, 700, 1},    // N below the cap: one block
      {512, true, 64, 300, 128, 3},      // below one row tile: one row tile
      // The lean recompute (64 MiB): the policy's 4 blocks of 2048 (chunks of 7680), or 8
      // of 1024; 4096 rows leave no room for a chunk: the most that do (3712 rows with
      // chunks of 256 columns: a knob for measuring, not a policy).
      {64, false, 0, 8192, 2048, 4}, // (chunks of 7168: the estimate's, see above)
      {64, false, 2048, 8192, 2048, 4},
      {64, false, 1024, 8192, 1024, 8},
      {64, false, 4096, 8192, 3712, 3},
  };
  for (const Row &r : rows) {
    plan::Program p = plan(r.budgetMb, DType::F32, r.materialized, r.cap);
    EXPECT_EQ(p.schedule.blockRows, r.cap);
    plan::RunSchedule s = p.runSchedule(r.n);
    SCOPED_TRACE(s.describe());
    EXPECT_EQ(s.rowsPerBlock, r.rowsPerBlock);
    EXPECT_EQ(s.rowBlocks, r.rowBlocks);
    EXPECT_FALSE(s.overBudget);
    EXPECT_LE(s.workspaceBytes, r.budgetMb << 20);
    if (r.cap > 0 && r.rowBlocks > 1 && r.rowsPerBlock == r.cap / 128 * 128) {
      EXPECT_NE(s.describe().find("LCEJIT_BLOCK_ROWS"), std::string::npos);
    }
  }
  // Different caps, different Programs (the cap is part of what the cache key hashes).
  EXPECT_NE(plan(512, DType::F32, true, 0).hash(), plan(512, DType::F32, true, 1024).hash());
  // A bf16 dW: rows are not blocked (the recompute's one block); the cap is ignored.
  plan::Program bf = plan(512, DType::BF16, false, 1024);
  EXPECT_EQ(bf.runSchedule(8192).rowBlocks, 1) << bf.runSchedule(8192).describe();
}

/// No cliff: at the Llama-3 head with the default budget, every N from 1 to 131072 gets
/// chunks of at least goodChunkCols columns (or one chunk of everything) within the
/// budget, so the chunk loop's extra traffic stays a few percent of the GEMMs at any N.
TEST(Planner, NoScheduleCliffAcrossN) {
  fe::LceSpec spec;
  spec.hidden = 4096;
  spec.vocab = 128256;
  spec.dtype = DType::BF16;
  spec.ignoreIndex = -100;
  auto fg = pipeline::compileGraph(*fe::buildLceGraph(spec));
  std::map<int64_t, plan::Program> byBucket;
  for (int64_t n = 1; n <= 131072; n = n * 5 / 4 + 1) {
    int64_t b = plan::bucketOf(n);
    if (!byBucket.count(b))
      byBucket.emplace(b, fg->plan(options(n, int64_t(512) << 20)));
    const plan::Program &p = byBucket.at(b);
    plan::RunSchedule s = p.runSchedule(n);
    SCOPED_TRACE(s.describe());
    EXPECT_FALSE(s.overBudget);
    // Chunks evened out may be a little narrower than goodChunkCols, never more of them.
    EXPECT_LE(s.chunks, (128256 + p.schedule.goodChunkCols - 1) / p.schedule.goodChunkCols);
    EXPECT_TRUE(s.rowBlocks == 1 || s.rowsPerBlock >= p.schedule.minBlockRows);
  }
  EXPECT_GE(byBucket.size(), 6u);
}

/// [Note: estimated run time] as a property, on the wgmma path over N from 1 to 131072
/// (materialized at 512 MiB, the recompute at 64 MiB): a schedule the estimate chose is
/// within the budget wherever the rule's is, at least 2 % cheaper under the estimate than
/// the rule's (the gain it states), its chunks never narrower than fallbackChunkCols;
/// where the rule stands, the schedule says nothing of an estimate.
TEST(Planner, EstimateLeavesTheRuleOnlyForACheaperScheduleWithinTheBudget) {
  auto fg = lceFused(4096, 128256, DType::BF16, std::nullopt);
  int chosen = 0;
  for (auto [budgetMb, backward] :
       {std::pair<int64_t, plan::PlanOptions::Backward>{512,
                                                        plan::PlanOptions::Backward::Materialized},
        {64, plan::PlanOptions::Backward::Recompute}}) {
    std::map<int64_t, plan::Program> byBucket;
    for (int64_t n = 1; n <= 131072; n = n * 9 / 8 + 1) {
      const int64_t b = plan::bucketOf(n);
      if (!byBucket.count(b)) {
        plan::PlanOptions o = wgmmaOptions(n);
        o.workspaceBudgetBytes = budgetMb << 20;
        o.backward = backward;
        o.outputTypes = {DType::F32, DType::BF16, DType::F32};
        byBucket.emplace(b, fg->plan(o));
      }
      const plan::Program &p = byBucket.at(b);
      const plan::RunSchedule s = p.runSchedule(n);
      SCOPED_TRACE(s.describe());
      EXPECT_FALSE(s.overBudget);
      if (s.ruleRowsPerBlock == 0) {
        EXPECT_EQ(s.estimatedGain, 0);
        EXPECT_EQ(s.describe().find("estimated"), std::string::npos);
        continue;
      }
      ++chosen;
      const double rule = plan::estimateRunUnits(p, n, s.ruleRowsPerBlock, s.ruleChunkCols);
      const double mine = plan::estimateRunUnits(p, n, s.rowsPerBlock,
                                                 s.chunks > 1 ? s.chunkCols : 0);
      EXPECT_GE(s.estimatedGain, 0.02);
      EXPECT_NEAR(1 - mine / rule, s.estimatedGain, 1e-9);
      if (s.chunks > 1) {
        EXPECT_GE(s.chunkCols, p.schedule.fallbackChunkCols) << "chunks narrower than the "
                                                                 "fallback: the loop's cost";
      }
    }
  }
  EXPECT_GT(chosen, 0) << "the sweep never left the rule: the property was not exercised";
}

TEST(Planner, JsonParsesAndNamesKernels) {
  auto fg = lceFused();
  plan::Program p = fg->plan(options(100));
  nlohmann::json j = nlohmann::json::parse(p.toJson());
  EXPECT_EQ(j["name"], "lce");
  EXPECT_EQ(j["bucket"]["high"], 256);
  EXPECT_EQ(j["splits"], p.splits);
  ASSERT_EQ(j["kernels"].size(), p.kernels.size());
  std::set<std::string> kinds;
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    EXPECT_EQ(j["kernels"][k]["name"], p.kernels[k].name);
    EXPECT_EQ(j["kernels"][k]["kind"], plan::kernelKindName(p.kernels[k].kind()));
    kinds.insert(j["kernels"][k]["kind"].get<std::string>());
  }
  for (const char *k : {"row", "gemm_reduce", "gemm_dz", "gemm_dlhs", "gemm_drhs"})
    EXPECT_TRUE(kinds.count(k)) << k;
  EXPECT_EQ(nlohmann::json::parse(p.toJson(-1)), j); // compact form, same content
  EXPECT_FALSE(j["decisions"].empty());
  // The hash sees every field.
  plan::Program q = p;
  q.schedule.budgetBytes += 128;
  EXPECT_NE(q.hash(), p.hash());
  // A float constant of an epilogue, changed in its last digits.
  q = p;
  bool changed = false;
  for (plan::Kernel &k : q.kernels)
    if (auto *g = std::get_if<plan::GemmReduceKernel>(&k.body))
      for (plan::ScalarInst &i : g->gemm.epilogue.insts)
        if (!changed && i.op == plan::ScalarOp::Const && i.type == DType::F32 && i.fValue != 0.0) {
          i.fValue = std::nextafter(i.fValue, INFINITY);
          changed = true;
        }
  ASSERT_TRUE(changed);
  EXPECT_NE(q.hash(), p.hash()) << "a constant changed but the hash did not";
  EXPECT_FALSE(q == p);
}

/// The ABI: buffers first (deduplicated, named by space and index), then the integers
/// of the kind, in the documented order.
TEST(Planner, KernelParamsOrder) {
  auto fg = lceFused();
  plan::PlanOptions o = options(100);
  o.outputTypes = {std::nullopt, DType::BF16, DType::BF16}; // adds a Cast kernel
  plan::Program p = fg->plan(o);
  std::set<KernelKind> seen;
  for (const plan::Kernel &k : p.kernels) {
    std::vector<Param> ps = plan::kernelParams(k);
    seen.insert(k.kind());
    std::vector<Param::Kind> ints;
    std::set<std::string> names;
    bool pointersDone = false;
    for (const Param &q : ps) {
      EXPECT_TRUE(names.insert(q.name).second) << k.name << ": duplicate " << q.name;
      if (q.kind == Param::Kind::Pointer) {
        EXPECT_FALSE(pointersDone) << k.name << ": pointer after an integer";
        static const char *prefix[] = {"in", "out", "ws"};
        EXPECT_EQ(q.name, prefix[static_cast<int>(q.buf.space)] + std::to_string(q.buf.index));
      } else {
        pointersDone = true;
        ints.push_back(q.kind);
      }
    }
    using PK = Param::Kind;
    std::vector<PK> want;
    switch (k.kind()) {
    case KernelKind::Row: want = {PK::N, PK::TotalRows, PK::Splits}; break;
    case KernelKind::GemmReduce: want = {PK::N, PK::TotalRows, PK::Splits}; break;
    case KernelKind::GemmDz: want = {PK::N, PK::TotalRows, PK::ChunkBegin, PK::ChunkCols}; break;
    case KernelKind::GemmDLhs: want = {PK::N, PK::ChunkBegin, PK::ChunkCols, PK::ChunkIndex}; break;
    case KernelKind::GemmDRhs:
      want = {PK::N, PK::ChunkBegin, PK::ChunkCols, PK::RowBlock};
      break;
    case KernelKind::Cast: want = {PK::N}; break;
    case KernelKind::RowDot: want = {PK::N}; break;
    // [Note: target group sums]: the group-sum form runs in the chunk loop.
    case KernelKind::TargetCorrection: want = {PK::N, PK::ChunkBegin, PK::ChunkCols}; break;
    default: ADD_FAILURE() << k.name << ": a kernel kind this test does not expect"; break;
    }
    // A kernel that writes an output takes the run's accumulate mask last ([Note:
    // accumulating outputs]): here the dRhs GEMM (dW) and the cast (dH); the dLhs GEMM
    // writes the f32 dH accumulator, a workspace buffer.
    if (k.kind() == KernelKind::GemmDRhs || k.kind() == KernelKind::Cast)
      want.push_back(PK::AccumulateOutputs);
    EXPECT_EQ(ints, want) << k.name;
    // Specific buffers are present.
    auto hasBuf = [&](const plan::BufferRef &b) {
      return std::any_of(ps.begin(), ps.end(),
                         [&](const Param &q) { return q.kind == PK::Pointer && q.buf == b; });
    };
    if (auto *g = std::get_if<plan::GemmReduceKernel>(&k.body)) {
      EXPECT_TRUE(hasBuf(g->gemm.a) && hasBuf(g->gemm.b) && hasBuf(g->partials)) << k.name;
      EXPECT_EQ(ps[0].buf, g->gemm.a);
      EXPECT_EQ(ps[1].buf, g->gemm.b);
    }
    if (auto *d = std::get_if<plan::GemmDLhsKernel>(&k.body)) {
      EXPECT_TRUE(hasBuf(d->dz) && hasBuf(d->b) && hasBuf(d->out)) << k.name;
      EXPECT_EQ(d->dzLo.valid(), d->format == plan::DzFormat::SplitBF16) << k.name;
      if (d->dzLo.valid()) {
        EXPECT_TRUE(hasBuf(d->dzLo)) << k.name;
      }
    }
    if (auto *r = std::get_if<plan::RowKernel>(&k.body)) {
      for (const plan::Operand &a : r->args) {
        if (a.buf.valid()) {
          EXPECT_TRUE(hasBuf(a.buf)) << k.name;
        }
      }
      for (const auto &s : r->sinks) {
        if (s.buf.valid()) {
          EXPECT_TRUE(hasBuf(s.buf)) << k.name;
        }
      }
    }
    if (auto *r = std::get_if<plan::RowDotKernel>(&k.body)) {
      EXPECT_TRUE(hasBuf(r->a) && hasBuf(r->b) && hasBuf(r->target) && hasBuf(r->out)) << k.name;
    }
    if (auto *t = std::get_if<plan::TargetCorrectionKernel>(&k.body)) {
      EXPECT_TRUE(hasBuf(t->residual.buf) && hasBuf(t->residual.target) && hasBuf(t->a) &&
                  hasBuf(t->sums.sums) && hasBuf(t->sums.head))
          << k.name;
    }
    if (auto *d = std::get_if<plan::GemmDRhsKernel>(&k.body)) {
      ASSERT_TRUE(d->targetSums.valid()) << k.name << ": fast precision, a bf16 dW";
      EXPECT_TRUE(hasBuf(d->targetSums.sums) && hasBuf(d->targetSums.head) &&
                  hasBuf(d->targetSums.target))
          << k.name;
    }
    // Every kernel with a launch contract (all but the grid-stride Cast, RowDot and
    // TargetCorrection) gets the error word: row kernels for their device checks too,
    // GEMMs for launch_ok alone.
    EXPECT_EQ(hasBuf({plan::Space::Workspace, plan::kErrorBuffer}),
              k.kind() != KernelKind::Cast && k.kind() != KernelKind::RowDot &&
                  k.kind() != KernelKind::TargetCorrection)
        << k.name;
  }
  for (KernelKind kk : {KernelKind::Row, KernelKind::GemmReduce, KernelKind::GemmDz,
                        KernelKind::GemmDLhs, KernelKind::GemmDRhs, KernelKind::Cast,
                        KernelKind::RowDot, KernelKind::TargetCorrection})
    EXPECT_TRUE(seen.count(kk)) << plan::kernelKindName(kk);
}

TEST(Planner, LaunchDims) {
  auto fg = lceFused();
  plan::PlanOptions o = options(100);
  o.outputTypes = {std::nullopt, DType::BF16, DType::BF16};
  plan::Program p = fg->plan(o);
  for (int32_t k = 0; k < static_cast<int32_t>(p.kernels.size()); ++k) {
    KernelKind kind = p.kernels[static_cast<size_t>(k)].kind();
    plan::LaunchDims z = p.launchDims(k, 0, p.loopCols);
    plan::LaunchDims d = p.launchDims(k, 100, p.loopCols);
    plan::LaunchDims big = p.launchDims(k, 1000, 129);
    std::string name = p.kernels[static_cast<size_t>(k)].name;
    EXPECT_GT(d.block, 0) << name;
    switch (kind) {
    case KernelKind::Row:
      EXPECT_EQ(z.grid[0], 1) << name;
      EXPECT_EQ(d.grid[0], 1) << name;
      EXPECT_EQ(big.grid[0], 4) << name;
      EXPECT_EQ(d.block, 256);
      break;
    case KernelKind::GemmReduce: {
      const auto &g = std::get<plan::GemmReduceKernel>(p.kernels[static_cast<size_t>(k)].body);
      EXPECT_EQ(z.grid[0], 0) << name;
      EXPECT_EQ(d.grid[0], (100 + g.gemm.tile.bm - 1) / g.gemm.tile.bm);
      EXPECT_EQ(d.grid[1], p.splits);
      EXPECT_EQ(d.block, g.gemm.tile.threads());
      EXPECT_GT(d.sharedBytes, 0);
      EXPECT_LE(d.sharedBytes, p.target.maxSharedPerBlock);
      break;
    }
    case KernelKind::GemmDz: {
      const auto &g = std::get<plan::GemmDzKernel>(p.kernels[static_cast<size_t>(k)].body);
      EXPECT_EQ(z.grid[0], 0) << name;
      EXPECT_EQ(big.grid[1], (129 + g.gemm.tile.bn - 1) / g.gemm.tile.bn);
      EXPECT_LE(d.sharedBytes, p.target.maxSharedPerBlock);
      break;
    }
    case KernelKind::GemmDLhs:
      EXPECT_EQ(z.grid[0], 0) << name;
      EXPECT_GT(d.grid[0], 0);
      EXPECT_LE(d.sharedBytes, p.target.maxSharedPerBlock);
      break;
    case KernelKind::GemmDRhs:
      // N = 0 still writes zeros: the grid runs over the chunk's columns.
      EXPECT_GT(z.grid[0], 0) << name;
      EXPECT_GT(z.grid[1], 0) << name;
      EXPECT_LE(d.sharedBytes, p.target.maxSharedPerBlock);
      break;
    case KernelKind::Cast:
      EXPECT_EQ(z.grid[0], 0) << name;
      EXPECT_GE(d.grid[0], 1) << name;
      break;
    case KernelKind::DzForm:
    case KernelKind::TargetCorrection:
    case KernelKind::RowDot:
      // Grid-stride kernels: 256 threads, a grid that grows with N and is capped.
      EXPECT_EQ(d.block, 256) << name;
      EXPECT_GE(d.grid[0], 1) << name;
      EXPECT_GE(big.grid[0], d.grid[0]) << name;
      EXPECT_LE(big.grid[0], int64_t(132) * 16) << name;
      break;
    }
  }
  EXPECT_THROW(p.launchDims(static_cast<int32_t>(p.kernels.size()), 1, 1), Error);
}

TEST(Planner, ErrorsNameTheOp) {
  // A matmul the fuser leaves alone (its [N, C] value escapes as an output).
  fe::Graph g("escape");
  auto H = g.input("H", {fe::kN, 8}, DType::BF16);
  auto W = g.input("W", {13, 8}, DType::BF16);
  auto z = g.matmul(H, W, false, true);
  g.output("z", z);
  g.output("lse", g.logsumexp(z, 1));
  auto fg = pipeline::compileGraph(g);
  try {
    fg->plan(options(100));
    FAIL() << "planned an unfused matmul";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    std::string m = e.what();
    EXPECT_NE(m.find("tx.matmul"), std::string::npos) << m;
    EXPECT_NE(m.find("@escape"), std::string::npos) << m;
  }
}

} // namespace

/// The premise of the GPU test LceGpuClusters.StreamKIsDeterministicAndChangesOnlyTheSumOrder
/// (KnobRuns: D = 2304, V = 32000, softcap 30, an f32 dW the call overwrites): its dA
/// launches at N = 1024 and 1000 are one round of 96 tiles on 128 CTAs; at N = 1536 (144
/// tiles) and 2380 (228: a partial last row tile) a round on 132 CTAs, then a tail of 12
/// and 96 tiles ([Note: dA stream-K]); cooperative launches each.
TEST(Planner, LhsStreamKLaunchesOfTheGpuTest) {
  auto g = lceFused(2304, 32000, DType::BF16, 30.0);
  for (auto [n, rows, grid] : {std::tuple<int64_t, int64_t, int64_t>{1024, 1024, 128},
                               {1000, 1000, 128},
                               {1536, 1536, 132},
                               {2380, 2380, 132}}) {
    SCOPED_TRACE(fmt::format("N = {}", n));
    plan::PlanOptions o = wgmmaOptions(n);
    o.outputTypes = {DType::F32, DType::BF16, DType::F32};
    const plan::Program p = g->plan(o);
    int launches = 0;
    for (const plan::LaunchItem &it : p.expand(p.runSchedule(n, true))) {
      const auto *d = std::get_if<plan::GemmDLhsKernel>(&p.kernels[size_t(it.kernel)].body);
      if (!d)
        continue;
      ++launches;
      EXPECT_EQ(it.rows, rows);
      EXPECT_EQ(d->tile.bn, 192);
      const plan::LaunchDims dims = p.launchDims(it.kernel, it.rows, it.chunkCols);
      EXPECT_EQ(dims.grid[0], grid);
      EXPECT_TRUE(dims.cooperative);
      EXPECT_EQ(dims.cluster, 1);
    }
    EXPECT_EQ(launches, 1);
  }
}

/// [Note: sm90 column halves]: LCEJIT_FWD_HALVES runs the forward on 128 x 256 tiles whose
/// two consumers each write a partial entry, so every count of entries a call chooses
/// ([Note: column splits per call]) is even and the launch's grid is its row tiles times
/// half of it (an odd count or a grid of every entry is what the kernel's launch contract
/// rejects); a vocabulary that is not a multiple of 256 keeps ping-pong.
TEST(Planner, ColumnHalvesKeepTwoEntriesPerCtaSplit) {
  plan::PlanOptions o = wgmmaOptions(8192);
  o.forwardHalves = true;
  const plan::Program p = lceFused(4096, 128256, DType::BF16, std::nullopt)->plan(o);
  int32_t f = -1;
  for (int32_t k = 0; k < static_cast<int32_t>(p.kernels.size()); ++k)
    if (std::holds_alternative<plan::GemmReduceKernel>(p.kernels[static_cast<size_t>(k)].body))
      f = k;
  ASSERT_GE(f, 0);
  const plan::TileConfig &t = plan::gemmTile(p.kernels[static_cast<size_t>(f)]);
  EXPECT_TRUE(t.halves);
  EXPECT_EQ(t.bn, 256);
  EXPECT_EQ(t.epilogueCols(), 128);
  EXPECT_TRUE(t.twoEntries());
  EXPECT_EQ(p.splits, 66) << "33 CTA splits of about 16 tiles of 256 columns";
  for (int64_t rows : {128, 1000, 1664, 2048, 3500, 4097, 8192}) {
    const int32_t splits = plan::chooseColumnSplits(p, rows);
    EXPECT_EQ(splits % 2, 0) << rows << " rows";
    const plan::LaunchDims d = p.launchDims(f, rows, 128256, splits);
    EXPECT_EQ(d.grid[0], (rows + 127) / 128 * (splits / 2)) << rows << " rows";
  }
  const plan::Program q = lceFused(4096, 128128, DType::BF16, std::nullopt)->plan(o);
  for (const plan::Kernel &k : q.kernels) {
    if (std::holds_alternative<plan::GemmReduceKernel>(k.body)) {
      EXPECT_FALSE(plan::gemmTile(k).halves) << "128128 columns are not whole 256-column tiles";
    }
  }
}

/// [Note: forward tile by card]: unasked, the planner takes column halves on a memory
/// interface narrower than 6144 bits (an H100's 5120) when the forward's values need no
/// transcendental of their own (Llama-3's head), and keeps ping-pong with a softcap
/// (Gemma-2's), on 6144 bits or more, on an unknown device, or when the caller says no.
TEST(Planner, ColumnHalvesByCard) {
  auto halves = [](int64_t d, int64_t v, std::optional<double> softcap, int32_t bus,
                   std::optional<bool> asked) {
    plan::PlanOptions o = wgmmaOptions(8192);
    o.target.memoryBusBits = bus;
    o.forwardHalves = asked;
    const plan::Program p = lceFused(d, v, DType::BF16, softcap)->plan(o);
    for (const plan::Kernel &k : p.kernels)
      if (std::holds_alternative<plan::GemmReduceKernel>(k.body)) {
        const bool h = plan::gemmTile(k).halves;
        const std::string why = decision(p, "forward GEMM");
        EXPECT_EQ(why.find("[Note: forward tile by card]") != std::string::npos,
                  h && !asked)
            << why;
        return h;
      }
    ADD_FAILURE() << "no forward GEMM";
    return false;
  };
  EXPECT_TRUE(halves(4096, 128256, std::nullopt, 5120, std::nullopt)) << "Llama-3 on an H100";
  EXPECT_FALSE(halves(2304, 256000, 30.0, 5120, std::nullopt)) << "Gemma-2 (softcap)";
  EXPECT_FALSE(halves(4096, 128256, std::nullopt, 6144, std::nullopt)) << "an H200";
  EXPECT_FALSE(halves(4096, 128256, std::nullopt, 0, std::nullopt)) << "an unknown device";
  EXPECT_FALSE(halves(4096, 128256, std::nullopt, 5120, false)) << "asked for ping-pong";
  EXPECT_TRUE(halves(2304, 256000, 30.0, 6144, true)) << "asked for halves";
  EXPECT_FALSE(halves(4096, 128128, std::nullopt, 5120, std::nullopt)) << "V % 256 != 0";
}

/// [Note: sm90 multicast]: LCEJIT_FWD_CLUSTER=4 runs the forward's CTAs as clusters of 4
/// adjacent row tiles sharing each W tile; a call whose row tiles are not a multiple of 4
/// launches pairs where they pair up, single CTAs where they do not; groups of row tiles
/// that cannot hold whole clusters of 4 keep pairs. The default is pairs.
TEST(Planner, ForwardClustersOfFourFallBackToPairs) {
  auto g = lceFused(4096, 128256, DType::BF16, std::nullopt);
  auto plan = [&](int32_t cluster, int32_t group) {
    plan::PlanOptions o = wgmmaOptions(8192);
    o.forwardCluster = cluster;
    o.forwardOrderGroup = group;
    return g->plan(o);
  };
  auto forward = [](const plan::Program &p) -> int32_t {
    for (int32_t k = 0; k < static_cast<int32_t>(p.kernels.size()); ++k)
      if (std::holds_alternative<plan::GemmReduceKernel>(p.kernels[static_cast<size_t>(k)].body))
        return k;
    ADD_FAILURE() << "no forward GEMM";
    return 0;
  };
  const plan::Program pairs = plan(0, 0);
  EXPECT_EQ(plan::gemmTile(pairs.kernels[static_cast<size_t>(forward(pairs))]).clusterM,
            plan::kForwardCluster);
  EXPECT_EQ(plan::kForwardCluster, 2);

  const plan::Program quads = plan(4, 0);
  const int32_t f = forward(quads);
  EXPECT_EQ(plan::gemmTile(quads.kernels[static_cast<size_t>(f)]).clusterM, 4);
  const std::string why = decision(quads, "forward GEMM");
  EXPECT_NE(why.find("CTAs of 4 adjacent row tiles as clusters sharing each W tile by TMA "
                     "multicast when a call's row tiles are a multiple of 4 (else pairs where "
                     "they pair up), given by the caller (LCEJIT_FWD_CLUSTER)"),
            std::string::npos)
      << why;
  // Row tiles (128 rows each) -> cluster size: 64 -> 4, 62 -> 2, 63 -> 1, 4 -> 4, 2 -> 2,
  // 1 -> 1; the grid is a whole number of clusters in every case.
  for (const auto &[n, cluster] : std::vector<std::pair<int64_t, int32_t>>{
           {8192, 4}, {8192 - 127, 4}, {8192 - 256, 2}, {8192 - 128, 1}, {512, 4},
           {256, 2}, {100, 1}}) {
    const plan::LaunchDims d = quads.launchDims(f, n, 8192);
    EXPECT_EQ(d.cluster, cluster) << "N = " << n;
    EXPECT_EQ(d.grid[0] % d.cluster, 0) << "N = " << n;
  }
  // Groups of 6 row tiles cannot hold whole clusters of 4: pairs, and the plan says why.
  const plan::Program six = plan(4, 6);
  EXPECT_EQ(plan::gemmTile(six.kernels[static_cast<size_t>(forward(six))]).clusterM, 2);
  EXPECT_EQ(decision(six, "forward clusters"),
            "forward clusters: pairs, not 4: groups of 6 row tiles do not hold whole clusters");
  EXPECT_EQ(decision(quads, "forward clusters"), "");
}

/// [Note: dB multicast]: PlanOptions::dbCluster (LCEJIT_DB_CLUSTER) runs every wgmma dB as
/// clusters of 2 or 4 adjacent row tiles sharing each H tile; such a dB adds to dW by
/// reduce-adds even where the card would load its sums (clusters cannot), and the plan
/// says so. A launch gets clusters where its row tiles and CTAs are multiples of the size
/// (quads fall back to pairs), else none; without multicast, or by default
/// (kDbCluster = 1), no dB has clusters; a size other than 1, 2 or 4 is refused.
TEST(Planner, DbClustersShareHAlongTheRowTiles) {
  auto g = lceFused(4096, 128256, DType::BF16, std::nullopt);
  auto plan = [&](int32_t cluster, bool multicast = true, int32_t sms = 132) {
    plan::PlanOptions o = wgmmaOptions(8192);
    o.outputTypes = {DType::F32, DType::BF16, DType::F32}; // f32 dW through the TMA store
    o.target.memoryBusBits = 5120;                         // the H100: loaded sums by card
    o.target.numSMs = sms;
    o.dbCluster = cluster;
    o.multicast = multicast;
    return g->plan(o);
  };
  auto dbs = [](const plan::Program &p) {
    std::vector<int32_t> k;
    for (int32_t i = 0; i < static_cast<int32_t>(p.kernels.size()); ++i)
      if (std::holds_alternative<plan::GemmDRhsKernel>(p.kernels[static_cast<size_t>(i)].body))
        k.push_back(i);
    EXPECT_FALSE(k.empty()) << "no dB";
    return k;
  };
  EXPECT_EQ(plan::kDbCluster, 1);
  for (const plan::Program &p : {plan(0), plan(1), plan(2, false)})
    for (int32_t k : dbs(p)) {
      const auto &d = std::get<plan::GemmDRhsKernel>(p.kernels[static_cast<size_t>(k)].body);
      EXPECT_EQ(d.tile.clusterM, 1) << p.kernels[static_cast<size_t>(k)].name;
      EXPECT_EQ(d.loadedSumsMaxRows, plan::kLoadedSumsMaxRows) << "the H100 loads its sums";
      EXPECT_EQ(p.launchDims(k, 2048, 128256).cluster, 1);
    }
  EXPECT_EQ(decision(plan(0), "[Note: dB multicast]"), "");

  const plan::Program pairs = plan(2);
  for (int32_t k : dbs(pairs)) {
    const auto &d = std::get<plan::GemmDRhsKernel>(pairs.kernels[static_cast<size_t>(k)].body);
    EXPECT_EQ(d.tile.clusterM, 2);
    EXPECT_EQ(d.loadedSumsMaxRows, 0) << "a cluster's dB reduce-adds";
    EXPECT_FALSE(plan::wgmmaLoadedSums(d.tile));
  }
  EXPECT_NE(decision(pairs, "adds to dW by TMA reduce-adds (its clusters cannot load their "
                            "sums); dB's CTAs of 2 adjacent row tiles as clusters sharing each "
                            "H tile by TMA multicast where a launch's row tiles and CTAs are "
                            "multiples of 2 ([Note: dB multicast]; given by the caller, "
                            "LCEJIT_DB_CLUSTER)"),
            "");
  EXPECT_EQ(decision(pairs, "by loading the old values"), "");
  const plan::Program quads = plan(4);
  const int32_t q = dbs(quads).front(), p2 = dbs(pairs).front();
  // Chunk columns (128 a row tile) -> cluster: 1002 row tiles (16 column tiles: 132 CTAs)
  // -> 2 of 4, 2; 1001 -> 1; 4 -> 4, 2; 6 -> 2; 2 -> 2; 1 -> 1.
  for (const auto &[cc, quad, pair] : std::vector<std::tuple<int64_t, int32_t, int32_t>>{
           {128256, 2, 2}, {128128, 1, 1}, {512, 4, 2}, {700, 2, 2}, {256, 2, 2}, {100, 1, 1}}) {
    const plan::LaunchDims dq = quads.launchDims(q, 2048, cc), dp = pairs.launchDims(p2, 2048, cc);
    EXPECT_EQ(dq.cluster, quad) << "cc = " << cc;
    EXPECT_EQ(dp.cluster, pair) << "cc = " << cc;
    EXPECT_EQ(dq.grid[0] % dq.cluster, 0) << "cc = " << cc;
    EXPECT_EQ(dq.grid[0], dp.grid[0]) << "cc = " << cc;
  }
  // An odd number of CTAs (a device of 131 SMs) cannot pair up.
  const plan::Program odd = plan(2, true, 131);
  EXPECT_EQ(odd.launchDims(dbs(odd).front(), 2048, 128256).grid[0], 131);
  EXPECT_EQ(odd.launchDims(dbs(odd).front(), 2048, 128256).cluster, 1);
  EXPECT_EQ(odd.launchDims(dbs(odd).front(), 2048, 256).cluster, 2) << "32 tiles, 32 CTAs";

  try {
    (void)plan(3);
    ADD_FAILURE() << "a dB cluster of 3 was planned";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("PlanOptions::dbCluster must be 1, 2 or 4 (CTAs), "
                                         "not 3"),
              std::string::npos)
        << e.what();
  }
}

/// [Note: forward CTA order by card]: the wgmma forward runs its CTAs in groups of 16 row
/// tiles on a device with a memory interface of 6144 bits or more (an H200) or an unknown
/// one, and of 8 on a narrower one (an H100's 5120), saying so; a caller's group
/// (LCEJIT_FWD_GROUP) wins on any device; the mma.sync forward has no such order.
TEST(Planner, ForwardOrderGroupFollowsTheMemoryInterface) {
  auto g = lceFused(4096, 128256, DType::BF16, std::nullopt);
  auto forward = [&](int32_t busBits, int32_t asked, plan::Mainloop mainloop) {
    plan::PlanOptions o = wgmmaOptions(8192);
    o.mainloop = mainloop;
    o.target.memoryBusBits = busBits;
    o.forwardOrderGroup = asked;
    plan::Program p = g->plan(o);
    for (const plan::Kernel &k : p.kernels)
      if (const auto *f = std::get_if<plan::GemmReduceKernel>(&k.body))
        return std::make_pair(f->orderGroup, decision(p, "forward CTA order"));
    ADD_FAILURE() << "no forward GEMM";
    return std::make_pair(0, std::string());
  };
  for (int32_t bus : {0, 6144, 8192}) {
    const auto [group, why] = forward(bus, 0, plan::Mainloop::Auto);
    EXPECT_EQ(group, plan::kForwardOrderGroup) << bus << " bits";
    EXPECT_EQ(why, "") << bus << " bits";
  }
  const auto [narrow, why] = forward(5120, 0, plan::Mainloop::Auto);
  EXPECT_EQ(narrow, 8);
  EXPECT_EQ(why, "forward CTA order ([Note: forward CTA order by card]): groups of 8 row tiles "
                 "on a 5120-bit memory interface (an H100's is 5120), 16 on 6144 bits or more");
  const auto [asked, askedWhy] = forward(5120, 4, plan::Mainloop::Auto);
  EXPECT_EQ(asked, 4);
  EXPECT_NE(askedWhy.find("given by the caller (LCEJIT_FWD_GROUP)"), std::string::npos)
      << askedWhy;
  const auto [mma, mmaWhy] = forward(5120, 0, plan::Mainloop::MmaSync);
  EXPECT_EQ(mma, plan::kForwardOrderGroup) << "the mma.sync forward has no CTA order group";
  EXPECT_EQ(mmaWhy, "");
}

/// [Note: a group's first and last rows]: the planner takes the groups' words only where they
/// leave the sampled run schedules alone. Between the samples they may still move a slab
/// schedule's split (as dA's stream-K scratch may): for Llama-3's head in the bucket of
/// N = 8192 (where it takes them) every N of the bucket runs the same row blocks, chunks
/// and splits with and without them, calls that overwrite dW and calls that add to it
/// alike; where the slab split moves (measured: 106 of 24576 calls, all overwriting dW,
/// by 33 slabs of 1002, some of them then with dA chains) the first block holds the same
/// rows and no call runs an f32 pass more.
TEST(Planner, TargetGroupsLeaveEveryBlockOfTheBucketAlone) {
  auto g = lceFused(4096, 128256, DType::BF16, std::nullopt);
  plan::PlanOptions o = wgmmaOptions(8192);
  o.workspaceBudgetBytes = int64_t(512) << 20;           // the op's default
  o.outputTypes = {DType::F32, DType::BF16, DType::F32}; // the op's: bf16 dH, f32 dW
  const plan::Program with = g->plan(o);
  o.targetGroups = false;
  const plan::Program without = g->plan(o);
  ASSERT_NE(decision(with, "each target's first and last rows found by"), "")
      << "the groups must be taken in this bucket";
  ASSERT_EQ(with.bucketLow, without.bucketLow);
  int64_t checked = 0, moved = 0, bad = 0;
  for (int64_t n = with.bucketLow; n <= with.bucket; ++n)
    for (bool free : {false, true}) {
      const plan::RunSchedule a = with.runSchedule(n, free), b = without.runSchedule(n, free);
      auto blocks = [](const plan::RunSchedule &r) {
        return std::vector<int64_t>{r.rowsPerBlock, r.rowBlocks, r.chunkCols, r.chunks,
                                    r.splits,       r.slabRows,  r.slabHead,  r.overBudget};
      };
      if (blocks(a) != blocks(b) && bad++ < 3)
        ADD_FAILURE() << "N = " << n << (free ? ", overwriting dW" : "") << ": "
                      << a.describe() << " against " << b.describe();
      moved += a.slabSplit != b.slabSplit || a.slabGroup != b.slabGroup;
      ++checked;
    }
  EXPECT_EQ(checked, 2 * (with.bucket - with.bucketLow + 1));
  EXPECT_EQ(bad, 0);
  EXPECT_LE(moved * 100, checked) << "slab splits moved at more than 1 % of the calls";
}

/// [Note: sm90 loaded sums]: a wgmma dB that writes an f32 dW through the TMA store adds
/// to it by loading its tiles' old values over launches of at most kLoadedSumsMaxRows
/// rows of K on a memory interface narrower than kWideMemoryBusBits (an H100), by
/// reduce-adds on the H200 and an unknown device ([Note: loaded sums by card]), or over
/// PlanOptions::loadedSumsMaxRows rows on any card; without the TMA store, or where the
/// tile's stages cannot hold the old values with one to spare, it never does; a negative
/// threshold is refused naming the option.
TEST(Planner, AnAccumulatingDbLoadsItsSumsUpToTheRowThreshold) {
  auto g = lceFused(4096, 128256, DType::BF16, std::nullopt);
  auto thresholds = [&](const plan::PlanOptions &o, int64_t expected) {
    std::vector<int64_t> t;
    for (const plan::Kernel &k : g->plan(o).kernels)
      if (const auto *d = std::get_if<plan::GemmDRhsKernel>(&k.body)) {
        t.push_back(d->loadedSumsMaxRows);
        EXPECT_EQ(d->loadedSumsMaxRows > 0, plan::wgmmaLoadedSums(d->tile) && expected > 0)
            << k.name;
      }
    return t;
  };
  plan::PlanOptions o = wgmmaOptions(8192);
  o.outputTypes = {DType::F32, DType::BF16, DType::F32}; // the op's: bf16 dH, f32 dW
  // By card: an H100's 5120-bit interface loads the sums up to kLoadedSumsMaxRows rows.
  o.target.memoryBusBits = 5120;
  const std::vector<int64_t> narrow = thresholds(o, plan::kLoadedSumsMaxRows);
  ASSERT_FALSE(narrow.empty()) << "no dB";
  for (int64_t t : narrow)
    EXPECT_EQ(t, plan::kLoadedSumsMaxRows);
  // lcejit-dump's decisions say it, and why.
  EXPECT_NE(decision(g->plan(o), "adds to dW over at most 1024 rows by loading the old "
                                 "values through the ring ([Note: sm90 loaded sums]; a "
                                 "memory interface narrower than 6144 bits"),
            "");
  // The H200's 6144 bits and an unknown device (planned as the H200): reduce-adds.
  for (int32_t bus : {6144, 0}) {
    o.target.memoryBusBits = bus;
    for (int64_t t : thresholds(o, 0))
      EXPECT_EQ(t, 0) << "bus " << bus;
    EXPECT_EQ(decision(g->plan(o), "by loading the old values"), "") << "bus " << bus;
    EXPECT_NE(decision(g->plan(o), "an f32 dB leaves through shared memory and TMA and adds "
                                   "to dW by TMA reduce-adds ([Note: loaded sums by card])"),
              "")
        << "bus " << bus;
  }
  // The caller's threshold holds on any card.
  for (int32_t bus : {5120, 6144, 0}) {
    o.target.memoryBusBits = bus;
    o.loadedSumsMaxRows = 2048;
    for (int64_t t : thresholds(o, 2048))
      EXPECT_EQ(t, 2048) << "bus " << bus;
    EXPECT_NE(decision(g->plan(o), "adds to dW over at most 2048 rows by loading the old "
                                   "values through the ring ([Note: sm90 loaded sums]), over"),
              "")
        << "bus " << bus;
    o.loadedSumsMaxRows = 0;
    for (int64_t t : thresholds(o, 0))
      EXPECT_EQ(t, 0) << "bus " << bus;
    EXPECT_EQ(decision(g->plan(o), "by loading the old values"), "");
    EXPECT_EQ(decision(g->plan(o), "loaded sums by card"), "");
  }
  o.target.memoryBusBits = 0;
  o.loadedSumsMaxRows = plan::kLoadedSumsMaxRows;
  o.tmaStore = false;
  for (int64_t t : thresholds(o, 0))
    EXPECT_EQ(t, 0) << "dB stores from registers";
  o.tmaStore = true;
  o.loadedSumsMaxRows = -1;
  try {
    (void)g->plan(o);
    ADD_FAILURE() << "a negative loadedSumsMaxRows was planned";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("PlanOptions::loadedSumsMaxRows must be >= 0 (rows), "
                                         "not -1"),
              std::string::npos)
        << e.what();
  }

  // The tiles: the old values of a 128 x 256 tile take 3 of its 48 KB stages, of a 128 x
  // 128 tile 2 of its 32 KB ones; one stage must be left over; no clusters, no split-K.
  plan::TileConfig t;
  t.bm = 128;
  t.bn = 256;
  t.stages = 4;
  t.tmaStore = true;
  EXPECT_TRUE(plan::wgmmaLoadedSums(t));
  t.stages = 3;
  EXPECT_FALSE(plan::wgmmaLoadedSums(t));
  t.bn = 128;
  EXPECT_TRUE(plan::wgmmaLoadedSums(t));
  t.stages = 2;
  EXPECT_FALSE(plan::wgmmaLoadedSums(t));
  t.stages = 4;
  t.clusterM = 2;
  EXPECT_FALSE(plan::wgmmaLoadedSums(t));
  t.clusterM = 1;
  t.tmaStore = false;
  EXPECT_FALSE(plan::wgmmaLoadedSums(t));
}

