//===- FuseTest.cpp - Fused and unfused graphs agree in the fp64 reference -===//
//
// The same inputs through the TxInterpreter before tx-fuse (tx-autodiff, tx-simplify,
// cse) and after the whole pipeline (pipeline::compileGraph): relative error
// <= kTolFused on every output.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

using namespace lcejit;
using namespace lcejit::testing;
using fe::Cmp;
using fe::kN;
using fe::Tensor;

namespace {

size_t count(const std::string &s, const std::string &what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1))
    ++n;
  return n;
}

/// Runs both forms on `inputs` and compares every output.
void compareFused(const fe::Graph &g, const std::vector<RefTensor> &inputs, const std::string &what,
                  bool expectFusedGrad = true) {
  Module ref = unfused(g);
  auto fused = pipeline::compileGraph(g);
  std::string text = fused->str();
  ASSERT_GE(count(text, "tx.gemm_reduce"), 1u) << what << ": nothing was fused\n" << text;
  if (expectFusedGrad) {
    ASSERT_GE(count(text, "tx.gemm_grad"), 1u) << what << ": the gradient was not fused\n" << text;
  }
  ASSERT_EQ(count(text, "tx.matmul"), 0u) << what << ": a matmul is left\n" << text;
  auto want = ref::interpretTx(ref.func(), inputs);
  auto got = ref::interpretTx(fused->module(), inputs);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].dtype, want[i].dtype) << what << " output " << i;
    EXPECT_TRUE(near(got[i], want[i], kTolFused, what + " output " + std::to_string(i)));
  }
}

class LceFuse : public ::testing::TestWithParam<SpecCase> {};

TEST_P(LceFuse, FusedMatchesUnfused) {
  const SpecCase &c = GetParam();
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
      for (int64_t n : {0, 1, 7, 33})
        compareFused(*g, lceInputs(s, n, 77 + static_cast<uint64_t>(n + d + v), 0.7),
                     specName(s) + "_N" + std::to_string(n));
    }
}

INSTANTIATE_TEST_SUITE_P(
    Lce, LceFuse,
    ::testing::Values(SpecCase{std::nullopt, std::nullopt, fe::LceReduction::Mean, DType::BF16},
                      SpecCase{std::nullopt, std::nullopt, fe::LceReduction::Sum, DType::BF16},
                      SpecCase{30.0, std::nullopt, fe::LceReduction::Mean, DType::BF16},
                      SpecCase{1.5, -100, fe::LceReduction::Mean, DType::BF16},
                      SpecCase{std::nullopt, -100, fe::LceReduction::Sum, DType::BF16},
                      SpecCase{30.0, -1, fe::LceReduction::Sum, DType::F32},
                      SpecCase{std::nullopt, -100, fe::LceReduction::Mean, DType::F16}));

/// A user-written loss: label smoothing, z-loss, a per-column bias, a temperature.
std::unique_ptr<fe::Graph> fancyLoss(int64_t d, int64_t v) {
  auto g = std::make_unique<fe::Graph>("fancy");
  Tensor H = g->input("H", {kN, d}, DType::BF16);
  Tensor W = g->input("W", {v, d}, DType::BF16);
  Tensor y = g->input("y", {kN, 1}, DType::I64);
  Tensor bias = g->input("bias", {1, v}, DType::F32);
  Tensor temp = g->input("temp", {}, DType::F32);
  Tensor z = g->matmul(H, W, false, true) / temp + bias;
  Tensor lse = g->logsumexp(z, 1);
  Tensor nll = lse - g->gather(z, y, 1);
  Tensor smooth = lse - g->mean(z, 1);
  Tensor row = 0.9 * nll + 0.1 * smooth + 1e-2 * (lse * lse);
  Tensor loss = g->mean(row);
  auto grads = g->grad(loss, {H, W});
  g->output("loss", loss);
  g->output("dH", grads[0]);
  g->output("dW", grads[1]);
  return g;
}

std::vector<RefTensor> fancyInputs(int64_t n, int64_t d, int64_t v, uint64_t seed) {
  Rng rng(seed);
  std::vector<RefTensor> in;
  in.push_back(rng.normal({n, d}, DType::BF16, 0.7));
  in.push_back(rng.normal({v, d}, DType::BF16, 0.7));
  in.push_back(rng.integers({n, 1}, DType::I64, 0, v));
  in.push_back(rng.normal({1, v}, DType::F32, 0.3));
  in.push_back(RefTensor::scalar(0.8));
  return in;
}

TEST(Fuse, UserLossWithSidesAndMeanRoot) {
  for (int64_t v : {13, 257}) {
    auto g = fancyLoss(8, v);
    for (int64_t n : {0, 1, 7, 33})
      compareFused(*g, fancyInputs(n, 8, v, 5 + static_cast<uint64_t>(n)),
                   "fancy_V" + std::to_string(v) + "_N" + std::to_string(n));
  }
}

/// A row maximum as a fused reduction ("max" kind), differentiated through.
TEST(Fuse, RowMaxRoot) {
  fe::Graph g("rowmax");
  Tensor H = g.input("H", {kN, 8}, DType::F32);
  Tensor W = g.input("W", {100, 8}, DType::F32);
  Tensor z = g.matmul(H, W, false, true);
  Tensor mx = g.maxReduce(z, 1);
  Tensor lse = g.logsumexp(z, 1);
  Tensor loss = g.sum(lse - mx) + g.sum(g.tanh(mx));
  auto grads = g.grad(loss, {H, W});
  g.output("loss", loss);
  g.output("dH", grads[0]);
  g.output("dW", grads[1]);
  for (int64_t n : {0, 1, 7, 33}) {
    Rng rng(900 + static_cast<uint64_t>(n));
    compareFused(g, {rng.normal({n, 8}, DType::F32), rng.normal({100, 8}, DType::F32)},
                 "rowmax_N" + std::to_string(n));
  }
}

/// Forward only: no gradient cluster, several reductions of one anchor.
TEST(Fuse, ForwardOnlyReductions) {
  fe::Graph g("fwd");
  Tensor H = g.input("H", {kN, 24}, DType::BF16);
  Tensor W = g.input("W", {257, 24}, DType::BF16);
  Tensor y = g.input("y", {kN, 1}, DType::I32);
  Tensor z = g.matmul(H, W, false, true);
  Tensor col = g.iota({1, 257}, 1, DType::I64);
  Tensor low = g.compare(Cmp::Lt, g.cast(col, DType::I32), g.constant(100, DType::I32));
  Tensor zz = g.select(low, g.exp(z / 4.0), g.neg(z));
  g.output("lse", g.logsumexp(zz, 1));
  g.output("sum", g.sum(zz, 1));
  g.output("max", g.maxReduce(z, 1));
  g.output("mean", g.mean(g.tanh(z), 1));
  g.output("pick", g.gather(zz, y, 1));
  for (int64_t n : {0, 1, 33}) {
    Rng rng(31 + static_cast<uint64_t>(n));
    compareFused(g,
                 {rng.normal({n, 24}, DType::BF16, 0.5), rng.normal({257, 24}, DType::BF16, 0.5),
                  rng.integers({n, 1}, DType::I32, -2, 259)},
                 "fwd_N" + std::to_string(n), /*expectFusedGrad=*/false);
  }
}

} // namespace

namespace {

/// The tests' unfused form is the pipeline's own stage before tx-fuse (what the ops
/// library's reference backend interprets).
TEST(Fuse, UnfusedHelperIsThePipelineStage) {
  fe::LceSpec s;
  s.hidden = 8;
  s.vocab = 100;
  s.softcap = 30.0;
  s.ignoreIndex = -100;
  auto g = fe::buildLceGraph(s);
  Module mine = unfused(*g);
  auto stage = pipeline::compileGraph(*g, {}, "tx-fuse");
  std::string text = stage->str();
  EXPECT_EQ(text.find("tx.gemm"), std::string::npos) << text;
  EXPECT_EQ(text.find("tx.grad"), std::string::npos) << text;
  EXPECT_EQ(mine.str(), text);
  auto in = lceInputs(s, 7, 3);
  auto a = ref::interpretTx(mine.func(), in);
  auto b = ref::interpretTx(stage->module(), in);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].data, b[i].data);
}

} // namespace
