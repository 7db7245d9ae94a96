//===- UserLossTest.cpp - Losses users write, checked at every stage -------===//
//
// Each loss goes through the three oracles: autodiff vs finite differences on the
// unfused graph, fused vs unfused, and the planned Program vs unfused (several plans).
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "lcejit/Error.h"

using namespace lcejit;
using namespace lcejit::testing;
using fe::Cmp;
using fe::kN;
using fe::Tensor;

namespace {

constexpr int64_t kD = 8, kV = 257;

struct UserLoss {
  std::string name;
  /// Builds the loss from H [N, D], W [V, D] (bf16), y [N, 1] (i64) and the extra inputs.
  std::function<Tensor(fe::Graph &, Tensor H, Tensor W, Tensor y, std::vector<Tensor> &extra)> loss;
  std::vector<std::pair<std::string, fe::Shape>> extra = {}; ///< f32 inputs after y
};

std::ostream &operator<<(std::ostream &os, const UserLoss &l) { return os << l.name; }

std::unique_ptr<fe::Graph> build(const UserLoss &u) {
  auto g = std::make_unique<fe::Graph>(u.name);
  Tensor H = g->input("H", {kN, kD}, DType::BF16);
  Tensor W = g->input("W", {kV, kD}, DType::BF16);
  Tensor y = g->input("y", {kN, 1}, DType::I64);
  std::vector<Tensor> extra;
  for (auto &[name, shape] : u.extra)
    extra.push_back(g->input(name, shape, DType::F32));
  Tensor loss = u.loss(*g, H, W, y, extra);
  auto grads = g->grad(loss, {H, W});
  g->output("loss", loss);
  g->output("dH", grads[0]);
  g->output("dW", grads[1]);
  return g;
}

std::vector<RefTensor> inputsFor(const UserLoss &u, int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<RefTensor> in = {rng.normal({n, kD}, DType::BF16, 0.7),
                               rng.normal({kV, kD}, DType::BF16, 0.7),
                               rng.integers({n, 1}, DType::I64, 0, kV)};
  for (auto &[name, shape] : u.extra) {
    std::vector<int64_t> s;
    for (int64_t d : shape)
      s.push_back(d == kN ? n : d);
    in.push_back(rng.uniform(s, DType::F32, 0.5, 1.5));
  }
  return in;
}

std::vector<UserLoss> losses() {
  using G = fe::Graph;
  using V = std::vector<Tensor>;
  auto ce = [](G &g, Tensor z, Tensor y) { return g.logsumexp(z, 1) - g.gather(z, y, 1); };
  std::vector<UserLoss> l;
  l.push_back({"row_weights",
               [=](G &g, Tensor H, Tensor W, Tensor y, V &x) {
                 Tensor z = g.matmul(H, W, false, true);
                 return g.sum(ce(g, z, y) * x[0]) / g.sum(x[0]);
               },
               {{"weight", {kN, 1}}}});
  l.push_back({"variance_penalty",
               [=](G &g, Tensor H, Tensor W, Tensor y, V &) {
                 Tensor z = g.matmul(H, W, false, true);
                 Tensor row = ce(g, z, y);
                 Tensor centered = row - g.mean(row);
                 return g.mean(row) + 0.1 * g.mean(centered * centered);
               },
               {}});
  l.push_back({"learned_temperature",
               [=](G &g, Tensor H, Tensor W, Tensor y, V &x) {
                 Tensor z = g.matmul(H, W, false, true) / g.exp(x[0]);
                 return g.mean(ce(g, z, y));
               },
               {{"log_temp", {}}}});
  l.push_back({"hinge_floor",
               [=](G &g, Tensor H, Tensor W, Tensor y, V &) {
                 Tensor z = g.matmul(H, W, false, true);
                 return g.sum(g.max(ce(g, z, y), g.constant(4.0)));
               },
               {}});
  l.push_back({"z_loss_and_max",
               [=](G &g, Tensor H, Tensor W, Tensor y, V &) {
                 Tensor z = g.matmul(H, W, false, true);
                 Tensor lse = g.logsumexp(z, 1);
                 Tensor mx = g.maxReduce(z, 1);
                 return g.mean(lse - g.gather(z, y, 1) + 1e-2 * lse * lse + 0.05 * (lse - mx));
               },
               {}});
  l.push_back({"focal_like",
               [=](G &g, Tensor H, Tensor W, Tensor y, V &) {
                 Tensor z = g.matmul(H, W, false, true);
                 Tensor nll = ce(g, z, y);
                 Tensor p = g.exp(g.neg(nll));
                 Tensor w = (1.0 - p) * (1.0 - p);
                 return g.sum(w * nll);
               },
               {}});
  l.push_back({"column_scale_and_ignore",
               [=](G &g, Tensor H, Tensor W, Tensor y, V &x) {
                 Tensor z = g.matmul(H, W, false, true) * x[0];
                 Tensor valid = g.compare(Cmp::Lt, y, g.constant(200, DType::I64));
                 Tensor row = g.select(valid, ce(g, z, y), g.constant(0.0));
                 return g.sum(row) / g.max(g.sum(g.cast(valid, DType::F32)), g.constant(1.0));
               },
               {{"col_scale", {1, kV}}}});
  return l;
}

class UserLosses : public ::testing::TestWithParam<UserLoss> {};

TEST_P(UserLosses, AutodiffMatchesFiniteDifferences) {
  const UserLoss &u = GetParam();
  auto g = build(u);
  Module m = unfused(*g);
  checkGradients(m, inputsFor(u, 5, 17), {0, 1}, u.name, 150);
}

TEST_P(UserLosses, FusedMatchesUnfused) {
  const UserLoss &u = GetParam();
  auto g = build(u);
  Module ref = unfused(*g);
  auto fg = pipeline::compileGraph(*g);
  std::string text = fg->str();
  EXPECT_EQ(text.find("tx.matmul"), std::string::npos) << u.name << " was not fused:\n" << text;
  for (int64_t n : {0, 1, 7, 33}) {
    auto in = inputsFor(u, n, 100 + static_cast<uint64_t>(n));
    auto want = ref::interpretTx(ref.func(), in);
    auto got = ref::interpretTx(fg->module(), in);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(near(got[i], want[i], kTolFused,
                       u.name + "_N" + std::to_string(n) + " output " + std::to_string(i)));
  }
}

TEST_P(UserLosses, ProgramMatchesUnfused) {
  const UserLoss &u = GetParam();
  auto g = build(u);
  Module ref = unfused(*g);
  auto fg = pipeline::compileGraph(*g);
  for (int64_t n : {1, 7, 33}) {
    auto in = inputsFor(u, n, 200 + static_cast<uint64_t>(n));
    auto want = ref::interpretTx(ref.func(), in);
    for (auto [tokens, budget, sms] :
         {std::tuple<int64_t, int64_t, int32_t>{n, int64_t(1) << 30, 132},
          {n, 0, 1},
          {100000, 0, 132}}) {
      plan::PlanOptions o;
      o.tokens = tokens;
      o.workspaceBudgetBytes = budget;
      o.target.numSMs = sms;
      std::string what =
          fmt::format("{}_N{}_tokens{}_budget{}_sms{}", u.name, n, tokens, budget, sms);
      plan::Program p;
      try {
        p = fg->plan(o);
      } catch (const Error &e) {
        ADD_FAILURE() << what << ": planner: " << e.what();
        return;
      }
      ref::ProgramRunResult got;
      try {
        got = ref::interpretProgram(p, in, n);
      } catch (const Error &e) {
        ADD_FAILURE() << what << ": " << e.what();
        return;
      }
      ASSERT_EQ(got.outputs.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(
            near(got.outputs[i], want[i], kTolProgram, what + " output " + std::to_string(i)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Losses, UserLosses, ::testing::ValuesIn(losses()),
                         [](const ::testing::TestParamInfo<UserLoss> &i) { return i.param.name; });

} // namespace
