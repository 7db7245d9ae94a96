//===- FrontendTest.cpp - Shape/dtype inference, errors, str, fingerprint -===//

#include "TestSupport.h"

#include "lcejit/Error.h"

using lcejit::testing::lowered;

using namespace lcejit;
using namespace lcejit::fe;

namespace {

/// Runs `f`, expects lcejit::Error of `kind` whose message contains every substring.
template <typename F>
::testing::AssertionResult throwsWith(F &&f, ErrorKind kind, std::vector<std::string> parts) {
  try {
    f();
  } catch (const Error &e) {
    std::string msg = e.what();
    if (e.kind() != kind)
      return ::testing::AssertionFailure()
             << "wrong kind " << errorKindName(e.kind()) << ": " << msg;
    for (const std::string &p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks '" << p << "': " << msg;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no lcejit::Error thrown";
}

#define EXPECT_INVALID(stmt, ...)                                                                  \
  EXPECT_TRUE(throwsWith([&] { stmt; }, ErrorKind::InvalidArgument, {__VA_ARGS__}))

TEST(Frontend, ShapeAndDtypeInference) {
  Graph g("t");
  Tensor H = g.input("H", {kN, 8}, DType::BF16);
  Tensor W = g.input("W", {13, 8}, DType::BF16);
  Tensor y = g.input("y", {kN, 1}, DType::I64);
  Tensor z = g.matmul(H, W, false, true);
  EXPECT_EQ(z.shape(), (Shape{kN, 13}));
  EXPECT_EQ(z.dtype(), DType::F32);
  EXPECT_EQ(g.matmul(H, H, true, false).shape(), (Shape{8, 8})); // contraction over N
  Tensor a = g.input("A", {5, kN}, DType::F32);
  EXPECT_EQ(g.matmul(a, H, false, false).shape(), (Shape{5, 8}));
  EXPECT_EQ(g.matmul(a, a, false, true).shape(), (Shape{5, 5}));
  EXPECT_EQ(g.matmul(a, a, true, false).shape(), (Shape{kN, kN}));

  Tensor lse = g.logsumexp(z, 1);
  EXPECT_EQ(lse.shape(), (Shape{kN, 1}));
  EXPECT_EQ(g.sum(z).shape(), Shape{});
  EXPECT_EQ(g.sum(z, 0).shape(), (Shape{1, 13}));
  EXPECT_EQ(g.mean(z, 1).shape(), (Shape{kN, 1}));
  EXPECT_EQ(g.maxReduce(z).shape(), Shape{});
  EXPECT_EQ(g.gather(z, y, 1).shape(), (Shape{kN, 1}));
  EXPECT_EQ(g.gather(z, y, 1).dtype(), DType::F32);
  Tensor c = g.compare(Cmp::Lt, lse, z);
  EXPECT_EQ(c.shape(), (Shape{kN, 13}));
  EXPECT_EQ(c.dtype(), DType::I1);
  EXPECT_EQ(g.select(c, z, g.constant(0.0)).shape(), (Shape{kN, 13}));
  EXPECT_EQ(g.add(lse, g.input("b", {1, 13}, DType::F32)).shape(), (Shape{kN, 13}));
  EXPECT_EQ((z * 2.0).shape(), (Shape{kN, 13}));
  EXPECT_EQ(g.cast(H, DType::F32).dtype(), DType::F32);
  EXPECT_EQ(g.cast(H, DType::BF16).id(), H.id()); // identity cast adds no node
  EXPECT_EQ(g.cast(y, DType::I32).dtype(), DType::I32);
  EXPECT_EQ(g.size(H, 0).shape(), Shape{});
  EXPECT_EQ(g.size(H, 0).dtype(), DType::I64);
  EXPECT_EQ(g.iota({1, 13}, 1).dtype(), DType::I64);
  EXPECT_EQ(g.broadcast(lse, {kN, 13}).shape(), (Shape{kN, 13}));
  Tensor loss = g.sum(lse);
  std::vector<Tensor> grads = g.grad(loss, {H, W});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[0].shape(), (Shape{kN, 8}));
  EXPECT_EQ(grads[1].shape(), (Shape{13, 8}));
  EXPECT_EQ(grads[0].dtype(), DType::F32);
  EXPECT_EQ(grads[1].dtype(), DType::F32);
}

TEST(Frontend, LceGraphSignature) {
  LceSpec s;
  s.hidden = 24;
  s.vocab = 257;
  s.softcap = 30.0;
  s.ignoreIndex = -100;
  auto g = buildLceGraph(s);
  ASSERT_EQ(g->inputs().size(), 3u);
  EXPECT_EQ(g->node(g->inputs()[0]).name, "H");
  EXPECT_EQ(g->node(g->inputs()[0]).shape, (Shape{kN, 24}));
  EXPECT_EQ(g->node(g->inputs()[1]).shape, (Shape{257, 24}));
  EXPECT_EQ(g->node(g->inputs()[2]).shape, (Shape{kN, 1}));
  ASSERT_EQ(g->outputs().size(), 3u);
  EXPECT_EQ(g->outputs()[0].first, "loss");
  EXPECT_EQ(g->node(g->outputs()[0].second).shape, Shape{});
  EXPECT_EQ(g->outputs()[1].first, "dH");
  EXPECT_EQ(g->node(g->outputs()[1].second).shape, (Shape{kN, 24}));
  EXPECT_EQ(g->outputs()[2].first, "dW");
  EXPECT_EQ(g->node(g->outputs()[2].second).dtype, DType::F32);
}

TEST(Frontend, ErrorsNameOpArgumentAndShapes) {
  Graph g("t");
  Tensor H = g.input("H", {kN, 8}, DType::BF16);
  Tensor W = g.input("W", {13, 8}, DType::BF16);
  Tensor y = g.input("y", {kN, 1}, DType::I64);
  Tensor f = g.input("f", {kN, 4}, DType::F32);
  Tensor f3 = g.input("f3", {kN, 3}, DType::F32);
  Tensor r3 = g.input("r3", {2, 3, 4}, DType::F32);

  // Inputs.
  EXPECT_INVALID(g.input("H", {kN, 8}, DType::BF16), "input", "'H'", "used twice");
  EXPECT_INVALID(g.input("Z", {0, 8}, DType::F32), "input 'Z'", "dimension 0", "[0, 8]");
  EXPECT_INVALID(g.input("Z", {kN, 8}, DType::F64), "input 'Z'", "f64");
  EXPECT_INVALID(g.input("", {kN, 8}, DType::F32), "input", "name");
  // Elementwise.
  EXPECT_INVALID(g.add(f, f3), "add", "[N, 4]", "[N, 3]", "do not broadcast", "dimension 1");
  EXPECT_INVALID(g.sub(f, r3), "sub", "[N, 4]", "[2, 3, 4]", "ranks");
  EXPECT_INVALID(g.mul(H, f), "mul", "dtypes differ", "bf16", "f32");
  EXPECT_INVALID(g.div(y, y), "div", "floating point", "i64");
  EXPECT_INVALID(g.max(g.compare(Cmp::Eq, y, y), g.compare(Cmp::Eq, y, y)), "max", "i1");
  EXPECT_INVALID(g.exp(y), "exp", "floating point", "i64");
  EXPECT_INVALID(g.log(y), "log", "i64");
  EXPECT_INVALID(g.tanh(y), "tanh", "i64");
  EXPECT_INVALID(g.neg(y), "neg", "i64");
  EXPECT_INVALID(g.compare(Cmp::Lt, y, f), "compare", "dtypes differ", "i64", "f32");
  EXPECT_INVALID(g.compare(Cmp::Lt, f, f3), "compare", "[N, 4]", "[N, 3]");
  EXPECT_INVALID(g.select(f, f, f), "select", "condition", "i1", "f32");
  EXPECT_INVALID(g.select(g.compare(Cmp::Lt, f, f), f, y), "select", "dtypes differ", "f32", "i64");
  EXPECT_INVALID(g.select(g.compare(Cmp::Lt, f, f), f, f3), "select", "[N, 4]", "[N, 3]");
  // Matmul.
  EXPECT_INVALID(g.matmul(H, W), "matmul", "contraction", "8", "13");
  EXPECT_INVALID(g.matmul(r3, W), "matmul", "rank 2", "[2, 3, 4]");
  EXPECT_INVALID(g.matmul(y, W, false, true), "matmul", "floating point", "i64");
  EXPECT_INVALID(g.matmul(f, H), "matmul", "contraction", "4 of a", "N of b");
  // Casts and broadcasts.
  EXPECT_INVALID(g.cast(f, DType::I64), "cast", "f32", "i64");
  EXPECT_INVALID(g.cast(y, DType::I1), "cast", "i64", "i1");
  EXPECT_INVALID(g.broadcast(f, {kN, 3}), "broadcast", "[N, 4]", "[N, 3]");
  EXPECT_INVALID(g.broadcast(f, {kN, 4, 2}), "broadcast", "[N, 4]", "[N, 4, 2]");
  // Reductions.
  EXPECT_INVALID(g.sum(f, 2), "sum", "axis 2", "[N, 4]");
  EXPECT_INVALID(g.sum(f, -1), "sum", "axis -1");
  EXPECT_INVALID(g.maxReduce(g.compare(Cmp::Eq, y, y)), "max_reduce", "i1");
  EXPECT_INVALID(g.mean(y, 0), "mean", "floating point", "i64");
  EXPECT_INVALID(g.logsumexp(y, 1), "logsumexp", "i64");
  EXPECT_INVALID(g.logsumexp(f, 3), "logsumexp", "axis 3");
  // Gather.
  EXPECT_INVALID(g.gather(f, f, 1), "gather", "index dtype", "f32");
  EXPECT_INVALID(g.gather(f, g.input("i3", {2, 3, 4}, DType::I64), 1), "gather", "[2, 3, 4]",
                 "[N, 4]", "rank");
  EXPECT_INVALID(g.gather(f, g.input("i", {3, 1}, DType::I32), 1), "gather", "[3, 1]", "[N, 4]",
                 "outside axis 1");
  EXPECT_INVALID(g.gather(f, y, 2), "gather", "axis 2");
  // Leaves.
  EXPECT_INVALID(g.iota({4, 4}, 2), "iota", "axis 2");
  EXPECT_INVALID(g.iota({kN, 4}, 0), "iota", "static", "[N, 4]");
  EXPECT_INVALID(g.iota({4}, 0, DType::F32), "iota", "dtype", "f32");
  EXPECT_INVALID(g.size(f, 2), "size", "axis 2", "[N, 4]");
  // Grad and outputs.
  EXPECT_INVALID(g.grad(f, {f}), "grad", "rank-0", "[N, 4]");
  EXPECT_INVALID(g.grad(g.sum(y), {f}), "grad", "rank-0 float", "i64");
  EXPECT_INVALID(g.grad(g.sum(f), {y}), "grad", "differentiate", "i64");
  EXPECT_INVALID(g.grad(g.sum(f), {}), "grad", "wrt");
  g.output("o", f);
  EXPECT_INVALID(g.output("o", f3), "output", "'o'", "twice");
  // Ownership.
  Graph other("other");
  Tensor x = other.input("x", {kN, 4}, DType::F32);
  EXPECT_INVALID(g.add(f, x), "add", "argument 'b'", "another graph");
  EXPECT_INVALID(g.exp(Tensor()), "exp", "argument 'x'", "empty");
  EXPECT_INVALID(Tensor() + f, "operator", "empty Tensor");
  EXPECT_INVALID(g.output("", f), "output", "name");
  EXPECT_INVALID(Graph(""), "Graph", "name");
  Graph noOutputs("none");
  noOutputs.exp(noOutputs.input("x", {kN, 2}, DType::F32));
  EXPECT_INVALID(lowered(noOutputs), "'none'", "no outputs");
  // LCE spec.
  LceSpec s;
  s.hidden = 8;
  s.vocab = 13;
  s.softcap = 0.0;
  EXPECT_INVALID(buildLceGraph(s), "softcap", "> 0");
  s.softcap.reset();
  s.hidden = 0;
  EXPECT_INVALID(buildLceGraph(s), "hidden", "0");
  s.hidden = 8;
  s.vocab = -2;
  EXPECT_INVALID(buildLceGraph(s), "vocab", "-2");
}

std::unique_ptr<Graph> lce(std::optional<double> softcap, std::optional<int64_t> ignore = -100,
                           LceReduction red = LceReduction::Mean, int64_t d = 8, int64_t v = 13,
                           DType dt = DType::BF16) {
  LceSpec s;
  s.hidden = d;
  s.vocab = v;
  s.softcap = softcap;
  s.ignoreIndex = ignore;
  s.reduction = red;
  s.dtype = dt;
  return buildLceGraph(s);
}

TEST(Frontend, StrListsNodes) {
  auto g = lce(30.0);
  std::string s = g->str();
  EXPECT_NE(s.find("graph @lce {"), std::string::npos) << s;
  EXPECT_NE(s.find("input \"H\" : bf16 [N, 8]"), std::string::npos) << s;
  EXPECT_NE(s.find("input \"y\" : i64 [N, 1]"), std::string::npos) << s;
  EXPECT_NE(s.find("matmul transpose_b"), std::string::npos) << s;
  EXPECT_NE(s.find("logsumexp"), std::string::npos) << s;
  EXPECT_NE(s.find("axis=1"), std::string::npos) << s;
  EXPECT_NE(s.find("constant 30"), std::string::npos) << s;
  EXPECT_NE(s.find("constant -100"), std::string::npos) << s;
  EXPECT_NE(s.find("output \"loss\""), std::string::npos) << s;
  EXPECT_NE(s.find("output \"dW\""), std::string::npos) << s;
}

TEST(Frontend, FingerprintIsStable) {
  auto a = lce(30.0), b = lce(30.0);
  EXPECT_EQ(a->str(), b->str());
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  std::string fp = a->fingerprint();
  EXPECT_EQ(fp.size(), 32u);
  EXPECT_TRUE(std::all_of(fp.begin(), fp.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c));
  })) << fp;
  // The fused graph keeps the frontend fingerprint.
  auto fg = pipeline::compileGraph(*a);
  EXPECT_EQ(fg->fingerprint(), a->fingerprint());
}

TEST(Frontend, FingerprintIsSensitive) {
  std::string base = lce(30.0)->fingerprint();
  EXPECT_NE(lce(30.000001)->fingerprint(), base);
  EXPECT_NE(lce(50.0)->fingerprint(), base);
  EXPECT_NE(lce(std::nullopt)->fingerprint(), base);
  EXPECT_NE(lce(30.0, -1)->fingerprint(), base);
  EXPECT_NE(lce(30.0, std::nullopt)->fingerprint(), base);
  EXPECT_NE(lce(30.0, -100, LceReduction::Sum)->fingerprint(), base);
  EXPECT_NE(lce(30.0, -100, LceReduction::Mean, 16)->fingerprint(), base);
  EXPECT_NE(lce(30.0, -100, LceReduction::Mean, 8, 14)->fingerprint(), base);
  EXPECT_NE(lce(30.0, -100, LceReduction::Mean, 8, 13, DType::F16)->fingerprint(), base);
  // Graph name and input names are part of the identity too.
  Graph g1("a"), g2("b");
  g1.output("o", g1.exp(g1.input("x", {kN, 4}, DType::F32)));
  g2.output("o", g2.exp(g2.input("x", {kN, 4}, DType::F32)));
  EXPECT_NE(g1.fingerprint(), g2.fingerprint());
}

} // namespace
