//===- ProgramInterpreterTest.cpp - Planned Programs vs the unfused graph --===//
//
// The planner's decomposition (row kernels, GEMM epilogues, column splits and lse
// partials, the chunk loop) is checked by running its Program in fp64 and comparing
// with the unfused graph in the TxInterpreter: relative error <= kTolProgram.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "compiler/plan/SchedulePolicy.h"
#include "lcejit/Error.h"

#include <optional>

using namespace lcejit;
using namespace lcejit::testing;
using fe::kN;
using fe::Tensor;

namespace {

plan::PlanOptions options(int64_t tokens, int64_t budget = int64_t(1) << 30, int32_t sms = 132) {
  plan::PlanOptions o;
  o.tokens = tokens;
  o.workspaceBudgetBytes = budget;
  o.target.numSMs = sms;
  return o;
}

/// Options whose plans use chunks of exactly `chunk` columns.
plan::PlanOptions chunked(int64_t tokens, int64_t chunk) {
  plan::PlanOptions o = options(tokens);
  o.fixedChunkCols = chunk;
  return o;
}

/// `p` with a policy that cuts N >= 2 rows into blocks of a few rows (the LCE Program's
/// rows are blockable): exercises row blocks at the small sizes the interpreter can run.
plan::Program rowBlocked(plan::Program p, int64_t n) {
  p.schedule.fixedChunkCols = 0;
  p.schedule.minBlockRows = 2;
  p.schedule.rowAlign = 2;
  p.schedule.goodChunkCols = 128;
  p.schedule.budgetBytes = plan::workspaceBytesFor(p, n, 2, 128);
  return p;
}

::testing::AssertionResult matches(const ref::ProgramRunResult &got,
                                   const std::vector<RefTensor> &want, double tol,
                                   const std::string &what) {
  if (got.outputs.size() != want.size())
    return ::testing::AssertionFailure()
           << what << ": " << got.outputs.size() << " outputs, want " << want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    auto r = near(got.outputs[i], want[i], tol, what + " output " + std::to_string(i));
    if (!r)
      return r;
  }
  return ::testing::AssertionSuccess();
}

class LceProgram : public ::testing::TestWithParam<SpecCase> {};

TEST_P(LceProgram, MatchesUnfusedGraph) {
  const SpecCase &c = GetParam();
  int multiChunk = 0, narrowLast = 0, multiSplit = 0, multiBlock = 0;
  for (int64_t d : {8, 24})
    for (int64_t v : {13, 100, 257}) {
      fe::LceSpec s;
      s.hidden = d;
      s.vocab = v;
      s.softcap = c.softcap;
      s.ignoreIndex = c.ignore;
      s.reduction = c.reduction;
      s.dtype = c.dtype;
      auto g = fe::buildLceGraph(s);
      Module ref = unfused(*g);
      auto fg = pipeline::compileGraph(*g);
      for (int64_t n : {0, 1, 7, 33}) {
        auto in = lceInputs(s, n, 500 + static_cast<uint64_t>(n * 7 + d + v), 0.7);
        auto want = ref::interpretTx(ref.func(), in);
        // Plans: the natural bucket; large buckets (fewer splits, bigger tiles); few SMs
        // (other splits); budgets giving the smallest chunk, two tiles, and everything.
        std::vector<plan::PlanOptions> plans = {options(n), options(20000), options(100000),
                                                options(n, int64_t(1) << 30, 1), options(n, 0)};
        plans.push_back(chunked(n, 128));
        plans.push_back(chunked(n, 256));
        std::vector<plan::Program> programs;
        for (const plan::PlanOptions &o : plans)
          programs.push_back(fg->plan(o));
        programs.push_back(rowBlocked(programs.back(), n));
        for (const plan::Program &p : programs) {
          plan::RunSchedule rs = p.runSchedule(n);
          std::string what = specName(s) + "_N" + std::to_string(n) + "_bucket" +
                             std::to_string(p.bucket) + "_sms" +
                             std::to_string(p.target.numSMs) + " (" + rs.describe() + ", splits " +
                             std::to_string(p.splits) + ")";
          auto got = ref::interpretProgram(p, in, n);
          EXPECT_TRUE(matches(got, want, kTolProgram, what));
          EXPECT_EQ(got.badRow, 0) << what;
          multiChunk += rs.chunks > 1;
          narrowLast += rs.chunks > 1 && p.loopCols % rs.chunkCols != 0;
          multiSplit += p.splits > 1;
          multiBlock += rs.rowBlocks > 1;
        }
      }
    }
  // The sweep must have exercised what it claims to.
  EXPECT_GT(multiChunk, 0);
  EXPECT_GT(narrowLast, 0);
  EXPECT_GT(multiSplit, 0);
  EXPECT_GT(multiBlock, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Lce, LceProgram,
    ::testing::Values(SpecCase{std::nullopt, std::nullopt, fe::LceReduction::Mean, DType::BF16},
                      SpecCase{std::nullopt, std::nullopt, fe::LceReduction::Sum, DType::BF16},
                      SpecCase{30.0, -100, fe::LceReduction::Mean, DType::BF16},
                      SpecCase{1.5, -100, fe::LceReduction::Sum, DType::BF16},
                      SpecCase{std::nullopt, -100, fe::LceReduction::Mean, DType::F32},
                      SpecCase{2.0, std::nullopt, fe::LceReduction::Mean, DType::F16}));

fe::LceSpec spec(int64_t d, int64_t v, std::optional<int64_t> ignore = -100,
                 fe::LceReduction red = fe::LceReduction::Mean, DType targets = DType::I64) {
  fe::LceSpec s;
  s.hidden = d;
  s.vocab = v;
  s.ignoreIndex = ignore;
  s.reduction = red;
  s.targetType = targets;
  return s;
}

TEST(ProgramInterpreter, EmptySplitsAndLargeLogits) {
  // 600 columns = 5 tiles of 128; 2 SMs at bucket 256 -> 4 splits of 2 tiles: the last
  // split is empty and must give empty partials.
  fe::LceSpec s = spec(24, 600, std::nullopt);
  auto g = fe::buildLceGraph(s);
  Module ref = unfused(*g);
  auto fg = pipeline::compileGraph(*g);
  plan::PlanOptions o = options(33, int64_t(1) << 30, 2);
  o.mainloop = plan::Mainloop::MmaSync; // the mma.sync tile: 128 columns per tile
  plan::Program p = fg->plan(o);
  ASSERT_EQ(p.splits, 4);
  for (double scale : {0.7, 4.0}) { // logits up to ~±100 at scale 4
    auto in = lceInputs(s, 33, 8, scale);
    auto want = ref::interpretTx(ref.func(), in);
    EXPECT_TRUE(matches(ref::interpretProgram(p, in, 33), want, kTolProgram,
                        "scale " + std::to_string(scale)));
  }
}

TEST(ProgramInterpreter, ZeroRowsGiveZeroLossAndGradients) {
  for (auto red : {fe::LceReduction::Mean, fe::LceReduction::Sum})
    for (std::optional<int64_t> ignore : {std::optional<int64_t>(), std::optional<int64_t>(-100)}) {
      fe::LceSpec s = spec(8, 100, ignore, red);
      auto g = fe::buildLceGraph(s);
      auto fg = pipeline::compileGraph(*g);
      auto in = lceInputs(s, 0, 1);
      for (int64_t budget : {int64_t(0), int64_t(1) << 30}) {
        auto got = ref::interpretProgram(fg->plan(options(0, budget)), in, 0);
        std::string what = specName(s);
        ASSERT_EQ(got.outputs.size(), 3u);
        EXPECT_EQ(got.outputs[0].data, std::vector<double>{0.0}) << what;
        EXPECT_EQ(got.outputs[1].shape, (std::vector<int64_t>{0, 8})) << what;
        EXPECT_EQ(got.outputs[2].data, std::vector<double>(800, 0.0)) << what;
        EXPECT_EQ(got.badRow, 0);
      }
    }
}

TEST(ProgramInterpreter, AllRowsIgnored) {
  for (auto red : {fe::LceReduction::Mean, fe::LceReduction::Sum}) {
    fe::LceSpec s = spec(8, 257, -100, red);
    auto g = fe::buildLceGraph(s);
    Module ref = unfused(*g);
    auto fg = pipeline::compileGraph(*g);
    auto in = lceInputs(s, 7, 3);
    for (double &y : in[2].data)
      y = -100;
    auto want = ref::interpretTx(ref.func(), in);
    EXPECT_EQ(want[0].data[0], 0.0);
    auto got = ref::interpretProgram(fg->plan(chunked(7, 128)), in, 7);
    EXPECT_TRUE(matches(got, want, kTolProgram, specName(s)));
    EXPECT_EQ(got.outputs[0].data[0], 0.0);
    EXPECT_EQ(got.outputs[1].data, std::vector<double>(56, 0.0));
    EXPECT_EQ(got.outputs[2].data, std::vector<double>(257 * 8, 0.0));
  }
}

TEST(ProgramInterpreter, DeviceCheckReportsFirstBadTarget) {
  for (DType targets : {DType::I64, DType::I32}) {
    fe::LceSpec s = spec(8, 13, -100, fe::LceReduction::Mean, targets);
    auto g = fe::buildLceGraph(s);
    Module ref = unfused(*g);
    auto fg = pipeline::compileGraph(*g);
    plan::PlanOptions o = options(7);
    o.checks.push_back(plan::InputCheck{2, 0, 13, -100});
    plan::Program checked = fg->plan(o);
    plan::Program unchecked = fg->plan(options(7));
    auto in = lceInputs(s, 7, 4);
    // Valid targets, ignored rows included: no error, same result as without checks.
    auto ok = ref::interpretProgram(checked, in, 7);
    EXPECT_EQ(ok.badRow, 0);
    EXPECT_TRUE(matches(ok, ref::interpretTx(ref.func(), in), kTolProgram, "valid"));
    // Rows 3 and 5 are bad: the first one (row 3, value 13 = V) is reported.
    in[2].data[3] = 13;
    in[2].data[5] = -7;
    auto bad = ref::interpretProgram(checked, in, 7);
    EXPECT_EQ(bad.badRow, 4);
    EXPECT_EQ(bad.badValue, 13);
    in[2].data[3] = 2;
    bad = ref::interpretProgram(checked, in, 7);
    EXPECT_EQ(bad.badRow, 6);
    EXPECT_EQ(bad.badValue, -7);
    EXPECT_FALSE(bad.ok());
    // Bad rows 6, 1 and 5: always the lowest one (the device reports the same).
    in[2].data[6] = 99;
    in[2].data[1] = -3;
    bad = ref::interpretProgram(checked, in, 7);
    EXPECT_EQ(bad.badRow, 2);
    EXPECT_EQ(bad.badValue, -3);
    in[2].data[1] = 0;
    in[2].data[6] = 0;
    // Without the check the Program runs; out-of-range gathers pick 0 like the graph.
    auto quiet = ref::interpretProgram(unchecked, in, 7);
    EXPECT_EQ(quiet.badRow, 0);
    EXPECT_TRUE(matches(quiet, ref::interpretTx(ref.func(), in), kTolProgram, "unchecked"));
    // N = 0: nothing to check.
    EXPECT_EQ(ref::interpretProgram(checked, lceInputs(s, 0, 4), 0).badRow, 0);
  }
}

TEST(ProgramInterpreter, OutputRoundingAndCastKernel) {
  fe::LceSpec s = spec(24, 257);
  auto g = fe::buildLceGraph(s);
  Module ref = unfused(*g);
  auto fg = pipeline::compileGraph(*g);
  plan::PlanOptions o = chunked(33, 128);
  o.outputTypes = {std::nullopt, DType::BF16, DType::BF16};
  plan::Program p = fg->plan(o);
  bool hasCast = false;
  for (const plan::Kernel &k : p.kernels)
    hasCast |= k.kind() == plan::KernelKind::Cast;
  EXPECT_TRUE(hasCast) << "a bf16 dH needs an f32 accumulator and a cast";
  EXPECT_EQ(p.outputs[1].dtype, DType::BF16);
  auto in = lceInputs(s, 33, 21);
  auto want = ref::interpretTx(ref.func(), in);
  auto exact = ref::interpretProgram(p, in, 33);
  EXPECT_EQ(exact.outputs[1].dtype, DType::BF16);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(near(exact.outputs[i], want[i], kTolProgram, "unrounded " + std::to_string(i)));
  ref::InterpretOptions ro;
  ro.roundOutputs = true;
  auto rounded = ref::interpretProgram(p, in, 33, ro);
  for (size_t i = 1; i < 3; ++i) {
    size_t changed = 0;
    for (size_t e = 0; e < want[i].data.size(); ++e) {
      double x = rounded.outputs[i].data[e], w = want[i].data[e];
      EXPECT_EQ(ref::roundToDType(x, DType::BF16), x) << "not a bf16 value";
      EXPECT_LE(std::fabs(x - w), 0x1p-8 * std::fabs(w)) << "output " << i << " element " << e;
      changed += x != w;
    }
    EXPECT_GT(changed, want[i].data.size() / 2) << "rounding had no effect";
  }
  // The loss output is f32: rounded to float.
  EXPECT_EQ(rounded.outputs[0].data[0], static_cast<double>(static_cast<float>(want[0].data[0])));
}

//===----------------------------------------------------------------------===//
// The interpreter rejects broken Programs and bad inputs (oracle self-tests)
//===----------------------------------------------------------------------===//

struct Fixture {
  fe::LceSpec s = spec(8, 257);
  std::unique_ptr<fe::Graph> g = fe::buildLceGraph(s);
  std::unique_ptr<pipeline::FusedGraph> fg = pipeline::compileGraph(*g);
  plan::Program p = fg->plan(chunked(7, 128));
  std::vector<RefTensor> in = lceInputs(s, 7, 9);
};

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "<no error>";
}

TEST(ProgramInterpreter, MissingKernelShowsAsNaN) {
  Fixture f;
  ASSERT_GT(f.p.runSchedule(7).chunks, 1);
  // Drop the dRhs GEMM from the chunk loop: dW is never written.
  for (plan::Step &st : f.p.steps)
    if (st.kind == plan::Step::Kind::ChunkLoop)
      std::erase_if(st.loopKernels, [&](int32_t k) {
        return f.p.kernels[static_cast<size_t>(k)].kind() == plan::KernelKind::GemmDRhs;
      });
  auto r = ref::interpretProgram(f.p, f.in, 7);
  EXPECT_TRUE(std::isnan(r.outputs[2].data[0]));
  EXPECT_FALSE(std::isnan(r.outputs[1].data[0]));
}

TEST(ProgramInterpreter, RejectsBrokenPrograms) {
  {
    Fixture f; // dZ buffer too small for a chunk
    for (plan::BufferSpec &b : f.p.workspace)
      if (b.name.rfind("dz", 0) == 0)
        b.bytesPerRowCol /= 2; // bf16 dZ -> one byte per element
    std::string e = errorOf([&] { ref::interpretProgram(f.p, f.in, 7); });
    EXPECT_NE(e.find("bytes at N = 7"), std::string::npos) << e;
    EXPECT_NE(e.find("lce_dz"), std::string::npos) << e;
  }
  {
    Fixture f; // a kernel reads a buffer that does not exist
    auto &k = std::get<plan::GemmDRhsKernel>(
        std::find_if(f.p.kernels.begin(), f.p.kernels.end(), [](const plan::Kernel &k) {
          return k.kind() == plan::KernelKind::GemmDRhs;
        })->body);
    k.out.index = 9;
    std::string e = errorOf([&] { ref::interpretProgram(f.p, f.in, 7); });
    EXPECT_NE(e.find("output buffer 9"), std::string::npos) << e;
    EXPECT_NE(e.find("lce_drhs"), std::string::npos) << e;
  }
  {
    Fixture f; // an instruction uses a later one
    auto &rk = std::get<plan::RowKernel>(f.p.kernels[0].body);
    ASSERT_GE(rk.func.insts.size(), 3u);
    rk.func.insts.push_back(plan::ScalarInst{plan::ScalarOp::Neg, DType::F32, {99, -1, -1}});
    std::string e = errorOf([&] { ref::interpretProgram(f.p, f.in, 7); });
    EXPECT_NE(e.find("not an earlier instruction"), std::string::npos) << e;
  }
  {
    Fixture f;
    std::string e = errorOf([&] { ref::interpretProgram(f.p, {f.in[0], f.in[1]}, 7); });
    EXPECT_NE(e.find("takes 3 inputs, got 2"), std::string::npos) << e;
    e = errorOf([&] { ref::interpretProgram(f.p, f.in, 8); });
    EXPECT_NE(e.find("input 0"), std::string::npos) << e;
    EXPECT_NE(e.find("[8, 8] (N = 8)"), std::string::npos) << e;
    auto bad = f.in;
    bad[2].dtype = DType::I32;
    e = errorOf([&] { ref::interpretProgram(f.p, bad, 7); });
    EXPECT_NE(e.find("must be i64, got i32 [7, 1]"), std::string::npos) << e;
  }
}

TEST(ProgramInterpreter, ScalarFuncSemantics) {
  using plan::ScalarInst;
  using plan::ScalarOp;
  plan::ScalarFunc f;
  auto push = [&](ScalarOp op, DType t, int a = -1, int b = -1, int c = -1) {
    ScalarInst i;
    i.op = op;
    i.type = t;
    i.operands[0] = a;
    i.operands[1] = b;
    i.operands[2] = c;
    f.insts.push_back(i);
    return static_cast<int>(f.insts.size()) - 1;
  };
  auto arg = [&](int idx, DType t) {
    int i = push(ScalarOp::Arg, t);
    f.insts.back().argIndex = idx;
    return i;
  };
  auto cst = [&](double fv, int64_t iv, DType t) {
    int i = push(ScalarOp::Const, t);
    f.insts.back().fValue = fv;
    f.insts.back().iValue = iv;
    return i;
  };
  int x = arg(0, DType::F32);                                                      // -2.7
  int nan = arg(1, DType::F32);                                                    // NaN
  int big = arg(2, DType::I32);                                                    // 2147483647
  int r0 = push(ScalarOp::Cast, DType::I64, x);                                    // -2
  int r1 = push(ScalarOp::Cast, DType::I1, nan);                                   // 1
  int r2 = push(ScalarOp::Max, DType::F32, x, nan);                                // NaN
  int r3 = push(ScalarOp::CmpNe, DType::I1, nan, nan);                             // 1
  int r4 = push(ScalarOp::CmpEq, DType::I1, nan, nan);                             // 0
  int r5 = push(ScalarOp::Add, DType::I32, big, cst(0, 1, DType::I32));            // wraps
  int r6 = push(ScalarOp::Select, DType::F32, r3, x, nan);                         // -2.7
  int r7 = push(ScalarOp::RowCount, DType::I64);                                   // 7
  int r8 = push(ScalarOp::And, DType::I1, r3, push(ScalarOp::Not, DType::I1, r4)); // 1
  int r9 = push(ScalarOp::Min, DType::F32, x, cst(1.0, 0, DType::F32));            // -2.7
  int r10 = push(ScalarOp::Log1p, DType::F32, push(ScalarOp::Abs, DType::F32, x));
  int r11 = push(ScalarOp::Expm1, DType::F32, x);
  int r12 = push(ScalarOp::Cast, DType::F32, r1);  // 1
  int r13 = push(ScalarOp::Or, DType::I1, r4, r4); // 0
  f.results = {r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13};
  auto v = ref::evaluateScalarFunc(f, {-2.7, NAN, 2147483647.0}, 7);
  EXPECT_EQ(v[0], -2);
  EXPECT_EQ(v[1], 1);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[3], 1);
  EXPECT_EQ(v[4], 0);
  EXPECT_EQ(v[5], -2147483648.0);
  EXPECT_EQ(v[6], -2.7);
  EXPECT_EQ(v[7], 7);
  EXPECT_EQ(v[8], 1);
  EXPECT_EQ(v[9], -2.7);
  EXPECT_DOUBLE_EQ(v[10], std::log1p(2.7));
  EXPECT_DOUBLE_EQ(v[11], std::expm1(-2.7));
  EXPECT_EQ(v[12], 1);
  EXPECT_EQ(v[13], 0);

  plan::ScalarFunc bad;
  bad.insts.push_back(ScalarInst{ScalarOp::Const, DType::I64});
  bad.insts.push_back(ScalarInst{ScalarOp::Div, DType::I64, {0, 0, -1}});
  bad.results = {1};
  std::string e = errorOf([&] { ref::evaluateScalarFunc(bad, {}); });
  EXPECT_NE(e.find("integer division"), std::string::npos) << e;
  bad.insts[1] = ScalarInst{ScalarOp::Add, DType::F32, {0, 0, -1}};
  e = errorOf([&] { ref::evaluateScalarFunc(bad, {}); });
  EXPECT_NE(e.find("differ from the result type"), std::string::npos) << e;
}

} // namespace

namespace {

/// Plans `g` for N = n with the given options and compares with the unfused graph, or
/// reports the planner's error.
void planAndCompare(const fe::Graph &g, const std::vector<RefTensor> &in, int64_t n,
                    const plan::PlanOptions &o, const std::string &what) {
  Module ref = unfused(g);
  auto fg = pipeline::compileGraph(g);
  plan::Program p;
  try {
    p = fg->plan(o);
  } catch (const Error &e) {
    ADD_FAILURE() << what << ": the planner failed: " << e.what();
    return;
  }
  auto want = ref::interpretTx(ref.func(), in);
  ref::ProgramRunResult got;
  try {
    got = ref::interpretProgram(p, in, n);
  } catch (const Error &e) {
    ADD_FAILURE() << what << ": the Program is malformed: " << e.what() << "\n" << p.toJson();
    return;
  }
  EXPECT_TRUE(matches(got, want, kTolProgram, what));
}

/// Two LM heads of different vocabularies in one loss: two GEMM clusters with their own
/// column counts (splits and chunking must be per cluster).
std::unique_ptr<fe::Graph> twoHeads(int64_t d, int64_t v1, int64_t v2) {
  auto g = std::make_unique<fe::Graph>("two_heads");
  Tensor H1 = g->input("H1", {kN, d}, DType::BF16);
  Tensor W1 = g->input("W1", {v1, d}, DType::BF16);
  Tensor H2 = g->input("H2", {kN, d}, DType::BF16);
  Tensor W2 = g->input("W2", {v2, d}, DType::BF16);
  Tensor y = g->input("y", {kN, 1}, DType::I64);
  auto ce = [&](Tensor H, Tensor W) {
    Tensor z = g->matmul(H, W, false, true);
    return g->sum(g->logsumexp(z, 1) - g->gather(z, y, 1));
  };
  Tensor loss = ce(H1, W1) + 0.5 * ce(H2, W2);
  auto grads = g->grad(loss, {H1, W1, H2, W2});
  g->output("loss", loss);
  g->output("dH1", grads[0]);
  g->output("dW1", grads[1]);
  g->output("dH2", grads[2]);
  g->output("dW2", grads[3]);
  return g;
}

TEST(ProgramGraphs, TwoHeadsSameVocab) {
  auto g = twoHeads(8, 100, 100);
  for (int64_t n : {1, 33}) {
    Rng rng(60 + static_cast<uint64_t>(n));
    std::vector<RefTensor> in = {rng.normal({n, 8}, DType::BF16), rng.normal({100, 8}, DType::BF16),
                                 rng.normal({n, 8}, DType::BF16), rng.normal({100, 8}, DType::BF16),
                                 rng.integers({n, 1}, DType::I64, 0, 100)};
    planAndCompare(*g, in, n, options(n), "two_heads_same_N" + std::to_string(n));
  }
}

/// Heads of different widths would need one chunk loop geometry each; the planner
/// refuses them with a clear error instead of mis-planning (see [Note: one chunk loop
/// geometry] in Planner.cpp).
TEST(ProgramGraphs, TwoHeadsDifferentVocabAreRefused) {
  auto g = twoHeads(8, 13, 1000);
  auto fg = pipeline::compileGraph(*g);
  try {
    fg->plan(options(33));
    ADD_FAILURE() << "expected Error(Unsupported)";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("one chunk loop geometry per Program"), std::string::npos)
        << e.what();
  }
}

TEST(ProgramGraphs, UserLossWithSidesAndMeanRoot) {
  auto g = std::make_unique<fe::Graph>("fancy");
  Tensor H = g->input("H", {kN, 8}, DType::BF16);
  Tensor W = g->input("W", {257, 8}, DType::BF16);
  Tensor y = g->input("y", {kN, 1}, DType::I64);
  Tensor bias = g->input("bias", {1, 257}, DType::F32);
  Tensor temp = g->input("temp", {}, DType::F32);
  Tensor z = g->matmul(H, W, false, true) / temp + bias;
  Tensor lse = g->logsumexp(z, 1);
  Tensor row = 0.9 * (lse - g->gather(z, y, 1)) + 0.1 * (lse - g->mean(z, 1)) + 1e-2 * (lse * lse);
  Tensor loss = g->mean(row);
  auto grads = g->grad(loss, {H, W});
  g->output("loss", loss);
  g->output("dH", grads[0]);
  g->output("dW", grads[1]);
  for (int64_t n : {1, 7, 33}) {
    Rng rng(80 + static_cast<uint64_t>(n));
    std::vector<RefTensor> in = {rng.normal({n, 8}, DType::BF16, 0.7),
                                 rng.normal({257, 8}, DType::BF16, 0.7),
                                 rng.integers({n, 1}, DType::I64, 0, 257),
                                 rng.normal({1, 257}, DType::F32, 0.3), RefTensor::scalar(0.8)};
    planAndCompare(*g, in, n, options(n), "fancy_N" + std::to_string(n));
    planAndCompare(*g, in, n, options(n, 0, 1), "fancy_chunked_N" + std::to_string(n));
  }
}

TEST(ProgramGraphs, RowMaxRoot) {
  fe::Graph g("rowmax");
  Tensor H = g.input("H", {kN, 8}, DType::F32);
  Tensor W = g.input("W", {100, 8}, DType::F32);
  Tensor z = g.matmul(H, W, false, true);
  Tensor mx = g.maxReduce(z, 1);
  Tensor loss = g.sum(g.logsumexp(z, 1) - mx) + g.sum(g.tanh(mx));
  auto grads = g.grad(loss, {H, W});
  g.output("loss", loss);
  g.output("dH", grads[0]);
  g.output("dW", grads[1]);
  for (int64_t n : {1, 33}) {
    Rng rng(90 + static_cast<uint64_t>(n));
    planAndCompare(g, {rng.normal({n, 8}, DType::F32), rng.normal({100, 8}, DType::F32)}, n,
                   options(n, 0, 2), "rowmax_N" + std::to_string(n));
  }
}

} // namespace

/// [Note: the target-column residual] (plan/Program.h): with dZ rounded to bf16 as the
/// device rounds it (InterpretOptions::roundDz), the residual's rank-1 update brings dH
/// and dW back near the unrounded ones (measured here: 8-22x smaller errors); without it
/// (PlanOptions::targetResidual off) the target columns' rounding shows. Every schedule that rounds dZ once: the recompute on both mainloops in
/// chunks (the residual is written in the chunk holding the target and added in the
/// last), the materialized one, row blocks; i32 and i64 targets, softcap, ignore_index.
TEST(ProgramInterpreter, TargetResidualRestoresTheTargetColumn) {
  int materialized = 0, recompute = 0, blocked = 0;
  for (std::optional<double> softcap : {std::optional<double>(), std::optional<double>(30.0)})
    for (DType targets : {DType::I64, DType::I32}) {
      fe::LceSpec s = spec(32, 2048, -100, fe::LceReduction::Mean, targets);
      s.softcap = softcap;
      auto g = fe::buildLceGraph(s);
      Module ref = unfused(*g);
      auto fg = pipeline::compileGraph(*g);
      const int64_t n = 64;
      // Logits of std ~1.4 over 2048 columns: p is small off the target, whose p - 1
      // dominates each dZ row, as at an LLM head.
      auto in = lceInputs(s, n, 4242 + static_cast<uint64_t>(targets), 0.5);
      auto want = ref::interpretTx(ref.func(), in);
      auto variants = [&](bool residual) {
        std::vector<plan::Program> ps;
        for (int m = 0; m < 3; ++m) {
          plan::PlanOptions o = options(n);
          o.targetResidual = residual;
          if (m < 2) {
            o.backward = plan::PlanOptions::Backward::Recompute;
            o.fixedChunkCols = 128;
            o.mainloop = m == 0 ? plan::Mainloop::MmaSync : plan::Mainloop::Auto;
          }
          ps.push_back(fg->plan(o));
        }
        ps.push_back(rowBlocked(ps.back(), n));
        return ps;
      };
      const std::vector<plan::Program> on = variants(true), off = variants(false);
      ref::InterpretOptions rounded;
      rounded.roundDz = true;
      for (size_t i = 0; i < on.size(); ++i) {
        const plan::Program &p = on[i];
        const plan::RunSchedule rs = p.runSchedule(n);
        const std::string what = specName(s) + " plan " + std::to_string(i) + " (" +
                                 rs.describe() + ")";
        auto residualOf = [](const plan::Program &q) {
          int parts = 0;
          for (const plan::Kernel &k : q.kernels) {
            if (const auto *d = std::get_if<plan::GemmDLhsKernel>(&k.body))
              parts += d->residual.valid();
            if (const auto *t = std::get_if<plan::TargetCorrectionKernel>(&k.body))
              parts += !t->findGroups; // a find only helps the correction that follows
          }
          return parts;
        };
        EXPECT_EQ(residualOf(p), 2) << what << ": dA's and dW's parts";
        EXPECT_EQ(residualOf(off[i]), 0) << what;
        materialized += p.schedule.wholeRows;
        recompute += !p.schedule.wholeRows && rs.chunks > 1;
        blocked += rs.rowBlocks > 1;
        // Unrounded, the residual is 0 and the Program computes the graph.
        EXPECT_TRUE(matches(ref::interpretProgram(p, in, n), want, kTolProgram, what));
        auto withIt = ref::interpretProgram(p, in, n, rounded);
        auto without = ref::interpretProgram(off[i], in, n, rounded);
        for (size_t out : {size_t(1), size_t(2)}) { // dH, dW
          const double eOn = relError(withIt.outputs[out].data, want[out].data);
          const double eOff = relError(without.outputs[out].data, want[out].data);
          EXPECT_GT(eOff, 1e-4) << what << " output " << out << ": bf16 dZ must show";
          EXPECT_LT(eOn, 0.2 * eOff) << what << " output " << out << ": " << eOn << " vs "
                                     << eOff << " without the residual";
        }
      }
    }
  EXPECT_GT(materialized, 0);
  EXPECT_GT(recompute, 0);
  EXPECT_GT(blocked, 0);
}

/// [Note: target group sums]: a bf16 dW, written once per chunk, gets dW's part of the
/// target-column residual from group sums that dB adds before its rounding. Targets drawn
/// from a few columns (groups of several rows, in several blocks, some blocks without a
/// column's rows), some rows ignored; chunks of 128 columns (the groups' targets in
/// different chunks), both mainloops' plans, i64 and i32 targets, blocks of 16 rows and the
/// planner's 2048 (one block). Unrounded the sums are 0 and the Program computes the graph;
/// with dZ rounded to bf16, dW's error falls to a fraction of what it is without them.
TEST(ProgramInterpreter, TargetGroupSumsRestoreABf16DwsTargetRows) {
  int plans = 0;
  for (DType targets : {DType::I64, DType::I32}) {
    fe::LceSpec s = spec(32, 700, -100, fe::LceReduction::Mean, targets);
    auto g = fe::buildLceGraph(s);
    Module ref = unfused(*g);
    auto fg = pipeline::compileGraph(*g);
    const int64_t n = 70;
    auto in = lceInputs(s, n, 977 + static_cast<uint64_t>(targets), 0.5);
    const int64_t cols[] = {3, 130, 131, 520, 699};
    for (int64_t r = 0; r < n; ++r)
      in[2].data[static_cast<size_t>(r)] =
          r % 11 == 5 ? -100.0 : static_cast<double>(cols[(r * r + r / 3) % 5]);
    auto want = ref::interpretTx(ref.func(), in);
    ref::InterpretOptions rounded;
    rounded.roundDz = true;
    for (plan::Mainloop m : {plan::Mainloop::MmaSync, plan::Mainloop::Auto})
      for (int64_t groupRows : {int64_t(16), plan::kTargetGroupRows}) {
        plan::PlanOptions o = chunked(n, 128);
        o.mainloop = m;
        o.backward = plan::PlanOptions::Backward::Recompute;
        o.outputTypes = {DType::F32, DType::F32, DType::BF16};
        plan::Program on = fg->plan(o);
        o.targetResidual = false;
        const plan::Program off = fg->plan(o);
        int sums = 0;
        for (const plan::Kernel &k : on.kernels)
          if (const auto *d = std::get_if<plan::GemmDRhsKernel>(&k.body))
            sums += d->targetSums.valid();
        ASSERT_EQ(sums, 1) << on.toJson(2);
        plan::setTargetGroupRows(on, groupRows);
        const std::string what = specName(s) + (m == plan::Mainloop::Auto ? " auto" : " mma") +
                                 ", blocks of " + std::to_string(groupRows) + " rows";
        EXPECT_TRUE(matches(ref::interpretProgram(on, in, n), want, kTolProgram, what));
        auto withIt = ref::interpretProgram(on, in, n, rounded);
        auto without = ref::interpretProgram(off, in, n, rounded);
        const double eOn = relError(withIt.outputs[2].data, want[2].data);
        const double eOff = relError(without.outputs[2].data, want[2].data);
        EXPECT_GT(eOff, 1e-4) << what << ": bf16 dZ must show";
        EXPECT_LT(eOn, 0.2 * eOff) << what << ": dW " << eOn << " vs " << eOff
                                   << " without the sums";
        ++plans;
      }
  }
  EXPECT_EQ(plans, 8);
}

/// [Note: row-scaled stored values]: with softcap the materialized Program stores against
/// the constant 30, scales rows in dA and H in dB, and carries each target column whole
/// in the residual. Unrounded it computes the graph (tail rows, ignored rows, row blocks,
/// logits of std ~ 30 that saturate tanh, logits far below the cap); with bf16 rounding
/// where the device rounds (the stored values and the scaled H) its gradient errors stay
/// those of the tile-maximum form that rounds dZ itself (within 1.5x of them).
TEST(ProgramInterpreter, RowScaledStoredValuesComputeTheGraph) {
  int rowScaled = 0;
  for (double scale : {0.5, 2.0, 0.02})
    for (bool blocked : {false, true}) {
      fe::LceSpec s = spec(32, 1024, -100, fe::LceReduction::Mean, DType::I64);
      s.softcap = 30.0;
      auto g = fe::buildLceGraph(s);
      Module ref = unfused(*g);
      auto fg = pipeline::compileGraph(*g);
      const int64_t n = 77;
      auto in = lceInputs(s, n, 99 + static_cast<uint64_t>(scale * 10), scale);
      auto want = ref::interpretTx(ref.func(), in);
      auto planned = [&](bool on) {
        plan::PlanOptions o = options(n);
        o.rowScaled = on;
        plan::Program p = fg->plan(o);
        return blocked ? rowBlocked(p, n) : p;
      };
      const plan::Program on = planned(true), off = planned(false);
      const std::string what = fmt::format("scale {} {} ({})", scale,
                                           blocked ? "row-blocked" : "one block",
                                           on.runSchedule(n).describe());
      bool isRowScaled = false, offRowScaled = false;
      for (const plan::Kernel &k : on.kernels)
        if (const auto *f = std::get_if<plan::GemmReduceKernel>(&k.body); f && f->stored)
          isRowScaled = f->stored->rowScaled;
      for (const plan::Kernel &k : off.kernels)
        if (const auto *f = std::get_if<plan::GemmReduceKernel>(&k.body); f && f->stored)
          offRowScaled = f->stored->rowScaled;
      ASSERT_TRUE(isRowScaled) << what;
      ASSERT_FALSE(offRowScaled) << what;
      EXPECT_EQ(blocked, on.runSchedule(n).rowBlocks > 1) << what;
      rowScaled += isRowScaled;
      EXPECT_TRUE(matches(ref::interpretProgram(on, in, n), want, kTolProgram, what));
      ref::InterpretOptions rounded;
      rounded.roundDz = true;
      auto a = ref::interpretProgram(on, in, n, rounded);
      auto b = ref::interpretProgram(off, in, n, rounded);
      EXPECT_NEAR(a.outputs[0].data[0], want[0].data[0], 1e-9 * std::abs(want[0].data[0]))
          << what << ": the loss does not see the stored values";
      for (size_t out : {size_t(1), size_t(2)}) { // dH, dW
        const double eOn = relError(a.outputs[out].data, want[out].data);
        const double eOff = relError(b.outputs[out].data, want[out].data);
        EXPECT_GT(eOn, 0.0) << what << " output " << out << ": bf16 rounding must show";
        EXPECT_LT(eOn, 1.5 * eOff + 1e-7) << what << " output " << out << ": " << eOn
                                          << " vs " << eOff << " with the tile maxima";
      }
    }
  EXPECT_EQ(rowScaled, 6);
}

/// The LCE graph of `s`, fused, with N = n rows of lceInputs(s, n, seed, scale) and the
/// unfused graph's outputs on them: what a planned Program is compared with.
struct LceRun {
  std::unique_ptr<fe::Graph> graph;
  std::unique_ptr<pipeline::FusedGraph> fused;
  std::vector<RefTensor> in, want;
};
LceRun lceRun(const fe::LceSpec &s, int64_t n, uint64_t seed, double scale) {
  LceRun r;
  r.graph = fe::buildLceGraph(s);
  Module ref = unfused(*r.graph);
  r.fused = pipeline::compileGraph(*r.graph);
  r.in = lceInputs(s, n, seed, scale);
  r.want = ref::interpretTx(ref.func(), r.in);
  return r;
}

/// [Note: values scaled in place]: at a budget too small for the materialized blocks (1 MiB
/// holds fewer than 1024 rows of 1024 values) the planner makes the slab-only Program: dB
/// reads the unscaled A, and a DzForm after dA multiplies the stored values by the row
/// scale in place. In the ordinary layout (the interpreter keeps no slabs), unrounded, it
/// computes the graph, with softcap (a constant reference) and without (per-row), in one
/// block and in row blocks; without the scale pass it does not.
TEST(ProgramInterpreter, ValuesScaledInPlaceComputeTheGraph) {
  int plans = 0;
  for (std::optional<double> softcap : {std::optional<double>(30.0), std::optional<double>()})
    for (bool blocked : {false, true}) {
      fe::LceSpec s = spec(128, 1024, -100, fe::LceReduction::Mean, DType::I64);
      s.softcap = softcap;
      const int64_t n = 77;
      const LceRun run = lceRun(s, n, 5151, 0.7);
      const std::vector<RefTensor> &in = run.in, &want = run.want;
      plan::Program p = run.fused->plan(options(n, int64_t(1) << 20));
      ASSERT_TRUE(p.schedule.slabOnly) << fmt::format("{}", fmt::join(p.decisions, "\n"));
      if (blocked)
        p = rowBlocked(p, n);
      const std::string what = fmt::format("softcap {} {} ({})", softcap.has_value(),
                                           blocked ? "row-blocked" : "one block",
                                           p.runSchedule(n).describe());
      EXPECT_EQ(blocked, p.runSchedule(n).rowBlocks > 1) << what;
      for (const plan::Kernel &k : p.kernels)
        if (const auto *d = std::get_if<plan::GemmDRhsKernel>(&k.body)) {
          EXPECT_EQ(d->a.space, plan::Space::Input) << what << ": dB reads the unscaled A";
        }
      EXPECT_TRUE(matches(ref::interpretProgram(p, in, n), want, kTolProgram, what));
      // Rounded where the device rounds, the errors stay small (a second bf16 rounding
      // of each value, where the scaled copy rounded the scaled A instead).
      ref::InterpretOptions rounded;
      rounded.roundDz = true;
      auto r = ref::interpretProgram(p, in, n, rounded);
      for (size_t out : {size_t(1), size_t(2)})
        EXPECT_LT(relError(r.outputs[out].data, want[out].data), 1e-2) << what << " " << out;
      // Without the scale pass.
      plan::Program q = p;
      bool removed = false;
      for (plan::Step &st : q.steps)
        if (st.kind == plan::Step::Kind::ChunkLoop)
          std::erase_if(st.loopKernels, [&](int32_t ki) {
            const plan::Kernel &k = q.kernels[static_cast<size_t>(ki)];
            const bool hit = k.kind() == plan::KernelKind::DzForm &&
                             std::get<plan::DzFormKernel>(k.body).scaleValues;
            removed |= hit;
            return hit;
          });
      ASSERT_TRUE(removed) << what;
      EXPECT_FALSE(matches(ref::interpretProgram(q, in, n), want, kTolProgram, what))
          << what << ": without the scale pass dB must be wrong";
      ++plans;
    }
  EXPECT_EQ(plans, 4);
}

/// [Note: dA widths per launch]: a dA with a second width runs once per row block (the
/// one Program::launches picks), and the Program still computes the graph, in one block and
/// in row blocks; the copy not marked an alternative runs in every block too.
TEST(ProgramInterpreter, DaWidthsPerLaunchRunOnce) {
  for (bool blocked : {false, true}) {
    fe::LceSpec s = spec(128, 1024, -100, fe::LceReduction::Mean, DType::I64);
    s.softcap = 30.0;
    const int64_t n = 77;
    const LceRun run = lceRun(s, n, 777, 0.7);
    const std::vector<RefTensor> &in = run.in, &want = run.want;
    plan::Program p = run.fused->plan(options(n));
    if (blocked)
      p = rowBlocked(p, n);
    const std::string what = fmt::format("{} ({})", blocked ? "row-blocked" : "one block",
                                         p.runSchedule(n).describe());
    int32_t primary = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(p.kernels.size()); ++i)
      if (std::holds_alternative<plan::GemmDLhsKernel>(p.kernels[static_cast<size_t>(i)].body))
        primary = i;
    ASSERT_GE(primary, 0) << what;
    plan::Kernel copy = p.kernels[static_cast<size_t>(primary)];
    auto &cd = std::get<plan::GemmDLhsKernel>(copy.body);
    cd.tile.bn = cd.tile.bn == 128 ? 256 : 128;
    cd.alternativeOf = primary;
    copy.name += "_alt";
    p.kernels.push_back(copy);
    for (plan::Step &st : p.steps)
      if (st.kind == plan::Step::Kind::ChunkLoop)
        st.loopKernels.push_back(static_cast<int32_t>(p.kernels.size()) - 1);
    auto dALaunches = [&](const plan::Program &q) {
      int count = 0;
      for (const plan::LaunchItem &it : q.expand(q.runSchedule(n)))
        count += std::holds_alternative<plan::GemmDLhsKernel>(
            q.kernels[static_cast<size_t>(it.kernel)].body);
      return count;
    };
    const int64_t blocks = p.runSchedule(n).rowBlocks;
    EXPECT_EQ(dALaunches(p), blocks) << what << ": one dA launch a block";
    EXPECT_TRUE(matches(ref::interpretProgram(p, in, n), want, kTolProgram, what));
    plan::Program q = p;
    std::get<plan::GemmDLhsKernel>(q.kernels.back().body).alternativeOf = -1;
    EXPECT_EQ(dALaunches(q), 2 * blocks) << what << ": unmarked, both widths run";
  }
}

/// [Note: a per-row reference]: without softcap the materialized Program stores against
/// each row's target value c_r. Every fifth counted row has its target logit pushed 100
/// below the rest (row loss > kRowScaledRange: values the stored form cannot hold), mixed
/// in the same tiles with ordinary and ignored rows; D = 128 gives dB in two column parts
/// ([Note: a scaled A in column parts]). Unrounded it computes the graph, in one block and
/// in row blocks. It fails when the filtered dZ GEMM that writes the far rows is taken out
/// of the loop, and when the second part's scaled A is not made: both checked here.
TEST(ProgramInterpreter, PerRowReferenceComputesTheGraph) {
  for (bool blocked : {false, true}) {
    fe::LceSpec s = spec(128, 1024, -100, fe::LceReduction::Mean, DType::I64);
    auto g = fe::buildLceGraph(s);
    Module ref = unfused(*g);
    auto fg = pipeline::compileGraph(*g);
    const int64_t n = 77, d = s.hidden, v = s.vocab;
    auto in = lceInputs(s, n, 4242, 0.5);
    std::vector<double> &h = in[0].data, &w = in[1].data, &y = in[2].data;
    std::vector<int64_t> far;
    for (int64_t r = 0; r < n; r += 5) {
      const int64_t t = static_cast<int64_t>(y[static_cast<size_t>(r)]);
      if (t < 0)
        continue;
      double norm = 0;
      for (int64_t j = 0; j < d; ++j)
        norm += w[static_cast<size_t>(t * d + j)] * w[static_cast<size_t>(t * d + j)];
      for (int64_t j = 0; j < d; ++j)
        h[static_cast<size_t>(r * d + j)] -= 100.0 * w[static_cast<size_t>(t * d + j)] / norm;
      far.push_back(r);
    }
    // The far rows' losses are beyond the stored form's range (so the test reaches the
    // recompute), the others well inside it.
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = static_cast<int64_t>(y[static_cast<size_t>(r)]);
      if (t < 0)
        continue;
      std::vector<double> z(static_cast<size_t>(v));
      double m = -1e300;
      for (int64_t c = 0; c < v; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < d; ++j)
          acc += h[static_cast<size_t>(r * d + j)] * w[static_cast<size_t>(c * d + j)];
        z[static_cast<size_t>(c)] = acc;
        m = std::max(m, acc);
      }
      double se = 0;
      for (double zc : z)
        se += std::exp(zc - m);
      const double loss = m + std::log(se) - z[static_cast<size_t>(t)];
      const bool isFar = std::find(far.begin(), far.end(), r) != far.end();
      if (isFar)
        ASSERT_GT(loss, plan::kRowScaledRange + 10) << "row " << r;
      else
        ASSERT_LT(loss, plan::kRowScaledRange - 10) << "row " << r;
    }
    ASSERT_GE(far.size(), 10u);
    auto want = ref::interpretTx(ref.func(), in);
    plan::Program p = fg->plan(options(n));
    if (blocked)
      p = rowBlocked(p, n);
    const std::string what = fmt::format("{} ({})", blocked ? "row-blocked" : "one block",
                                         p.runSchedule(n).describe());
    bool perRow = false;
    for (const plan::Kernel &k : p.kernels)
      if (const auto *f = std::get_if<plan::GemmReduceKernel>(&k.body); f && f->stored)
        perRow = f->stored->rowScaled && f->stored->referenceArg >= 0;
    ASSERT_TRUE(perRow) << what << "\n" << p.toJson(2);
    EXPECT_EQ(blocked, p.runSchedule(n).rowBlocks > 1) << what;
    EXPECT_TRUE(matches(ref::interpretProgram(p, in, n), want, kTolProgram, what));

    // Mutations: without the far rows' dZ GEMM, or without the second part's scaled A.
    for (int mutation = 0; mutation < 2; ++mutation) {
      plan::Program q = p;
      bool removed = false;
      for (plan::Step &st : q.steps)
        if (st.kind == plan::Step::Kind::ChunkLoop)
          std::erase_if(st.loopKernels, [&](int32_t ki) {
            const plan::Kernel &k = q.kernels[static_cast<size_t>(ki)];
            const bool hit =
                mutation == 0 ? k.kind() == plan::KernelKind::GemmDz
                              : k.kind() == plan::KernelKind::DzForm &&
                                    std::get<plan::DzFormKernel>(k.body).aOnly;
            removed |= hit;
            return hit;
          });
      ASSERT_TRUE(removed) << what << " mutation " << mutation;
      ref::ProgramRunResult got;
      try {
        got = ref::interpretProgram(q, in, n);
      } catch (const std::exception &) {
        continue; // an unwritten buffer read: failing is what a mutation must do
      }
      EXPECT_FALSE(matches(got, want, kTolProgram, what))
          << what << ": mutation " << mutation << " must change the result";
    }
  }
}
