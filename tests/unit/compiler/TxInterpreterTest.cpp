//===- TxInterpreterTest.cpp - The tx interpreter against hand computations ===//

#include "TestSupport.h"

#include "lcejit/Error.h"

using namespace lcejit;
using namespace lcejit::testing;
using ref::interpretTx;

namespace {

RefTensor t2(std::vector<int64_t> shape, std::vector<double> v, DType dt = DType::F32) {
  RefTensor r(std::move(shape), dt);
  r.data = std::move(v);
  return r;
}

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "<no error>";
}

TEST(TxInterpreter, ElementwiseBroadcastReduce) {
  Module m = parse(R"(
func.func @f(%a: tensor<?x3xf32>, %b: tensor<1x3xf32>, %s: tensor<f32>)
    -> (tensor<?x3xf32>, tensor<?x1xf32>, tensor<1x3xf32>, tensor<f32>, tensor<?x1xf32>, tensor<f32>,
        tensor<?x3xf32>, tensor<?x3xf32>) {
  %0 = tx.add %a, %b : tensor<?x3xf32>, tensor<1x3xf32> -> tensor<?x3xf32>
  %1 = tx.mul %0, %s : tensor<?x3xf32>, tensor<f32> -> tensor<?x3xf32>
  %2 = tx.reduce_sum %1 {axis = 1 : i64} : tensor<?x3xf32> -> tensor<?x1xf32>
  %3 = tx.mean %1 {axis = 0 : i64} : tensor<?x3xf32> -> tensor<1x3xf32>
  %4 = tx.reduce_max %1 : tensor<?x3xf32> -> tensor<f32>
  %5 = tx.logsumexp %1 {axis = 1 : i64} : tensor<?x3xf32> -> tensor<?x1xf32>
  %6 = tx.mean %1 : tensor<?x3xf32> -> tensor<f32>
  %7 = tx.sub %2, %a : tensor<?x1xf32>, tensor<?x3xf32> -> tensor<?x3xf32>
  %8 = tx.div %7, %b : tensor<?x3xf32>, tensor<1x3xf32> -> tensor<?x3xf32>
  %9 = tx.broadcast %b : tensor<1x3xf32> -> tensor<?x3xf32>
  %10 = tx.neg %9 : tensor<?x3xf32> -> tensor<?x3xf32>
  %11 = tx.exp %10 : tensor<?x3xf32> -> tensor<?x3xf32>
  %12 = tx.log %11 : tensor<?x3xf32> -> tensor<?x3xf32>
  %13 = tx.tanh %8 : tensor<?x3xf32> -> tensor<?x3xf32>
  return %1, %2, %3, %4, %5, %6, %12, %13
      : tensor<?x3xf32>, tensor<?x1xf32>, tensor<1x3xf32>, tensor<f32>, tensor<?x1xf32>, tensor<f32>,
        tensor<?x3xf32>, tensor<?x3xf32>
})");
  RefTensor a = t2({2, 3}, {1, 2, 3, 4, 5, 6});
  RefTensor b = t2({1, 3}, {0.5, -1, 2});
  RefTensor s = RefTensor::scalar(2.0);
  auto out = interpretTx(*m.module, {a, b, s});
  ASSERT_EQ(out.size(), 8u);
  std::vector<double> v1 = {3, 2, 10, 9, 8, 16};
  EXPECT_EQ(out[0].data, v1);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out[1].data, (std::vector<double>{15, 33}));
  EXPECT_EQ(out[2].data, (std::vector<double>{6, 5, 13}));
  EXPECT_EQ(out[3].data, (std::vector<double>{16}));
  EXPECT_TRUE(out[3].shape.empty());
  double l0 = std::log(std::exp(3.0) + std::exp(2.0) + std::exp(10.0));
  double l1 = std::log(std::exp(9.0) + std::exp(8.0) + std::exp(16.0));
  EXPECT_NEAR(out[4].data[0], l0, 1e-14);
  EXPECT_NEAR(out[4].data[1], l1, 1e-14);
  EXPECT_DOUBLE_EQ(out[5].data[0], 48.0 / 6.0);
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(out[6].data[i], -b.data[i % 3], 1e-15);
    double sub = out[1].data[i / 3] - a.data[i];
    EXPECT_NEAR(out[7].data[i], std::tanh(sub / b.data[i % 3]), 1e-15);
  }
}

TEST(TxInterpreter, MatmulTransposesAndMixedTypes) {
  Module m = parse(R"(
func.func @f(%a: tensor<?x3xbf16>, %at: tensor<3x?xf32>, %b: tensor<3x2xf32>, %bt: tensor<2x3xbf16>)
    -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<3x3xf32>) {
  %0 = tx.matmul %a, %b : tensor<?x3xbf16>, tensor<3x2xf32> -> tensor<?x2xf32>
  %1 = tx.matmul %a, %bt {transpose_rhs} : tensor<?x3xbf16>, tensor<2x3xbf16> -> tensor<?x2xf32>
  %2 = tx.matmul %at, %b {transpose_lhs} : tensor<3x?xf32>, tensor<3x2xf32> -> tensor<?x2xf32>
  %3 = tx.matmul %at, %bt {transpose_lhs, transpose_rhs} : tensor<3x?xf32>, tensor<2x3xbf16> -> tensor<?x2xf32>
  %4 = tx.matmul %a, %at {transpose_lhs, transpose_rhs} : tensor<?x3xbf16>, tensor<3x?xf32> -> tensor<3x3xf32>
  return %0, %1, %2, %3, %4 : tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<3x3xf32>
})");
  const int64_t n = 4;
  Rng rng(7);
  RefTensor a = rng.normal({n, 3}, DType::BF16);
  RefTensor b = rng.normal({3, 2}, DType::F32);
  RefTensor at({3, n}, DType::F32), bt({2, 3}, DType::BF16);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < 3; ++k)
      at.at(k, i) = a.at(i, k);
  for (int64_t k = 0; k < 3; ++k)
    for (int64_t j = 0; j < 2; ++j)
      bt.at(j, k) = b.at(k, j);
  auto out = interpretTx(*m.module, {a, at, b, bt});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      double want = 0;
      for (int64_t k = 0; k < 3; ++k)
        want += a.at(i, k) * b.at(k, j);
      for (int q = 0; q < 4; ++q)
        EXPECT_NEAR(out[q].at(i, j), want, 1e-14) << "combination " << q;
    }
  // aᵀ · atᵀ = aᵀ a (contraction over N).
  for (int64_t p = 0; p < 3; ++p)
    for (int64_t q = 0; q < 3; ++q) {
      double want = 0;
      for (int64_t i = 0; i < n; ++i)
        want += a.at(i, p) * a.at(i, q);
      EXPECT_NEAR(out[4].at(p, q), want, 1e-14);
    }
}

TEST(TxInterpreter, LogSumExpIsStable) {
  Module m = parse(R"(
func.func @f(%a: tensor<?x2xf32>) -> tensor<?x1xf32> {
  %0 = tx.logsumexp %a {axis = 1 : i64} : tensor<?x2xf32> -> tensor<?x1xf32>
  return %0 : tensor<?x1xf32>
})");
  double inf = INFINITY;
  RefTensor a = t2({5, 2}, {1000, 1000, -1000, -1001, -inf, -inf, NAN, 1, inf, 3});
  auto out = interpretTx(*m.module, {a});
  EXPECT_DOUBLE_EQ(out[0].data[0], 1000 + std::log(2.0));
  EXPECT_DOUBLE_EQ(out[0].data[1], -1000 + std::log1p(std::exp(-1.0)));
  EXPECT_EQ(out[0].data[2], -inf);
  EXPECT_TRUE(std::isnan(out[0].data[3]));
  EXPECT_EQ(out[0].data[4], inf);
}

TEST(TxInterpreter, MaxPropagatesNaNAndGatherPicksZeroOutOfRange) {
  Module m = parse(R"(
func.func @f(%a: tensor<?x3xf32>, %b: tensor<?x3xf32>, %i: tensor<?x1xi32>)
    -> (tensor<?x3xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<f32>) {
  %0 = tx.max %a, %b : tensor<?x3xf32>, tensor<?x3xf32> -> tensor<?x3xf32>
  %1 = tx.gather %a, %i {axis = 1 : i64} : tensor<?x3xf32>, tensor<?x1xi32> -> tensor<?x1xf32>
  %2 = tx.reduce_max %0 {axis = 1 : i64} : tensor<?x3xf32> -> tensor<?x1xf32>
  %3 = tx.reduce_max %a : tensor<?x3xf32> -> tensor<f32>
  return %0, %1, %2, %3 : tensor<?x3xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<f32>
})");
  RefTensor a = t2({3, 3}, {1, NAN, 3, 4, 5, 6, -1, -2, -3});
  RefTensor b = t2({3, 3}, {2, 0, NAN, 1, 7, 6, -2, -1, -4});
  RefTensor i = t2({3, 1}, {2, 3, -1}, DType::I32);
  auto out = interpretTx(*m.module, {a, b, i});
  EXPECT_EQ(out[0].data[0], 2);
  EXPECT_TRUE(std::isnan(out[0].data[1]));
  EXPECT_TRUE(std::isnan(out[0].data[2]));
  EXPECT_EQ(out[0].data[4], 7);
  EXPECT_EQ(out[1].data, (std::vector<double>{3, 0, 0}));
  EXPECT_TRUE(std::isnan(out[2].data[0]));
  EXPECT_EQ(out[2].data[1], 7);
  EXPECT_EQ(out[2].data[2], -1);
  EXPECT_TRUE(std::isnan(out[3].data[0]));
}

TEST(TxInterpreter, IntegersCastsIotaDim) {
  Module m = parse(R"(
func.func @f(%x: tensor<?x1xi64>, %h: tensor<?x5xbf16>)
    -> (tensor<?x1xi32>, tensor<?x1xi64>, tensor<?x1xf32>, tensor<?x1xi64>, tensor<?x1xi64>,
        tensor<i64>, tensor<2x3xi32>, tensor<?x5xf32>, tensor<?x1xi32>) {
  %0 = tx.cast %x : tensor<?x1xi64> -> tensor<?x1xi32>
  %c = tx.constant 3 : i64 : tensor<i64>
  %1 = tx.mul %x, %c : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  %2 = tx.cmp lt, %x, %c : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
  %3 = tx.cast %2 : tensor<?x1xi1> -> tensor<?x1xf32>
  %4 = tx.cast %2 : tensor<?x1xi1> -> tensor<?x1xi64>
  %5 = tx.max %x, %c : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  %6 = tx.dim %h {axis = 0 : i64} : tensor<?x5xbf16> -> tensor<i64>
  %7 = tx.iota {axis = 1 : i64} : tensor<2x3xi32>
  %8 = tx.cast %h : tensor<?x5xbf16> -> tensor<?x5xf32>
  %9 = tx.add %0, %0 : tensor<?x1xi32>, tensor<?x1xi32> -> tensor<?x1xi32>
  return %0, %1, %3, %4, %5, %6, %7, %8, %9 : tensor<?x1xi32>, tensor<?x1xi64>, tensor<?x1xf32>,
      tensor<?x1xi64>, tensor<?x1xi64>, tensor<i64>, tensor<2x3xi32>, tensor<?x5xf32>, tensor<?x1xi32>
})");
  RefTensor x = t2({4, 1}, {4294967297.0, -5, 3, 2147483648.0}, DType::I64);
  Rng rng(3);
  RefTensor h = rng.normal({4, 5}, DType::BF16);
  auto out = interpretTx(*m.module, {x, h});
  EXPECT_EQ(out[0].data, (std::vector<double>{1, -5, 3, -2147483648.0}));
  EXPECT_EQ(out[0].dtype, DType::I32);
  EXPECT_EQ(out[1].data, (std::vector<double>{12884901891.0, -15, 9, 6442450944.0}));
  EXPECT_EQ(out[2].data, (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(out[3].data, (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(out[4].data, (std::vector<double>{4294967297.0, 3, 3, 2147483648.0}));
  EXPECT_EQ(out[5].data, (std::vector<double>{4}));
  EXPECT_EQ(out[6].data, (std::vector<double>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(out[7].data, h.data); // float casts are exact in the reference
  EXPECT_EQ(out[8].data, (std::vector<double>{2, -10, 6, 0})); // i32 wraps
}

TEST(TxInterpreter, ZeroRows) {
  Module m = parse(R"(
func.func @f(%a: tensor<?x3xf32>) -> (tensor<f32>, tensor<f32>, tensor<1x3xf32>, tensor<?x1xf32>) {
  %0 = tx.reduce_sum %a : tensor<?x3xf32> -> tensor<f32>
  %1 = tx.reduce_max %a : tensor<?x3xf32> -> tensor<f32>
  %2 = tx.reduce_sum %a {axis = 0 : i64} : tensor<?x3xf32> -> tensor<1x3xf32>
  %3 = tx.logsumexp %a {axis = 1 : i64} : tensor<?x3xf32> -> tensor<?x1xf32>
  return %0, %1, %2, %3 : tensor<f32>, tensor<f32>, tensor<1x3xf32>, tensor<?x1xf32>
})");
  auto out = interpretTx(*m.module, {RefTensor({0, 3}, DType::F32)});
  EXPECT_EQ(out[0].data, (std::vector<double>{0}));
  EXPECT_EQ(out[1].data, (std::vector<double>{-INFINITY}));
  EXPECT_EQ(out[2].data, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(out[3].shape, (std::vector<int64_t>{0, 1}));
}

TEST(TxInterpreter, Errors) {
  Module m = parse(R"(
func.func @f(%a: tensor<?x3xf32> {tx.name = "A"}, %b: tensor<?x1xi64> {tx.name = "B"}) -> tensor<?x3xf32> {
  return %a : tensor<?x3xf32>
})");
  RefTensor a({2, 3}, DType::F32, 1.0), b({2, 1}, DType::I64, 1.0);
  EXPECT_EQ(interpretTx(*m.module, {a, b})[0].data, a.data);
  std::string e = errorOf([&] { interpretTx(*m.module, {a}); });
  EXPECT_NE(e.find("takes 2 inputs, got 1"), std::string::npos) << e;
  e = errorOf([&] { interpretTx(*m.module, {a, RefTensor({3, 1}, DType::I64)}); });
  EXPECT_NE(e.find("disagree on N"), std::string::npos) << e;
  EXPECT_NE(e.find("'A' has N = 2"), std::string::npos) << e;
  EXPECT_NE(e.find("'B' has 3"), std::string::npos) << e;
  e = errorOf([&] { interpretTx(*m.module, {a, RefTensor({2, 1}, DType::I32)}); });
  EXPECT_NE(e.find("input 'B'"), std::string::npos) << e;
  EXPECT_NE(e.find("must be i64, got i32 [2, 1]"), std::string::npos) << e;
  e = errorOf([&] { interpretTx(*m.module, {RefTensor({2, 4}, DType::F32), b}); });
  EXPECT_NE(e.find("input 'A'"), std::string::npos) << e;
  EXPECT_NE(e.find("[N, 3]"), std::string::npos) << e;
  e = errorOf([&] { interpretTx(*m.module, {a, RefTensor({2, 1}, DType::I64, 0.5)}); });
  EXPECT_NE(e.find("not a value of its type"), std::string::npos) << e;

  Module g = parse(R"(
func.func @f(%a: tensor<?x3xf32>) -> tensor<?x3xf32> {
  %l = tx.reduce_sum %a : tensor<?x3xf32> -> tensor<f32>
  %g = tx.grad %l wrt (%a) : tensor<f32>, tensor<?x3xf32> -> tensor<?x3xf32>
  return %g : tensor<?x3xf32>
})");
  e = errorOf([&] { interpretTx(*g.module, {a}); });
  EXPECT_NE(e.find("tx.grad"), std::string::npos) << e;
  EXPECT_NE(e.find("run --tx-autodiff first"), std::string::npos) << e;

  Module u = parse(R"(
func.func @f(%a: tensor<?x8xf32>, %w: tensor<4x8xf32>) -> tensor<?x1xf32> {
  %r = tx.gemm_reduce %a, %w {kinds = ["sum"]} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    %x = arith.remf %acc, %acc : f32
    tx.yield %x : f32
  }
  return %r : tensor<?x1xf32>
})");
  e = errorOf([&] {
    interpretTx(*u.module, {RefTensor({2, 8}, DType::F32), RefTensor({4, 8}, DType::F32)});
  });
  EXPECT_NE(e.find("arith.remf"), std::string::npos) << e;
  EXPECT_NE(e.find("tx.gemm_reduce"), std::string::npos) << e;
}

/// Exercises the arith/math ops a fused body may contain, against direct C++.
TEST(TxInterpreter, FusedBodySemantics) {
  Module m = parse(R"(
func.func @f(%a: tensor<?x2xf32>, %w: tensor<4x2xf32>, %r: tensor<?x1xi32>, %c: tensor<1x4xf32>, %s: tensor<f32>)
    -> (tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>,
        tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>,
        tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>) {
  %o:16 = tx.gemm_reduce %a, %w sides(%r, %c, %s : tensor<?x1xi32>, tensor<1x4xf32>, tensor<f32>)
      {kinds = ["sum", "sum", "sum", "sum", "sum", "sum", "sum", "sum", "sum", "sum", "sum", "sum",
                "sum", "max", "logsumexp", "sum"]}
      : tensor<?x2xf32>, tensor<4x2xf32> -> tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>,
        tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>,
        tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>,
        tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64, %ri: i32, %cv: f32, %sv: f32):
    %y0 = arith.uitofp %ri : i32 to f32
    %y1 = arith.sitofp %ri : i32 to f32
    %t = arith.trunci %col : i64 to i1
    %y2 = arith.uitofp %t : i1 to f32
    %y3 = arith.sitofp %t : i1 to f32
    %e = arith.extsi %ri : i32 to i64
    %lt = arith.cmpi ult, %e, %col : i64
    %y4 = arith.uitofp %lt : i1 to f32
    %sl = arith.cmpi slt, %e, %col : i64
    %y5 = arith.uitofp %sl : i1 to f32
    %u = arith.extui %ri : i32 to i64
    %y6 = arith.sitofp %u : i64 to f32
    %y7 = arith.maximumf %acc, %cv : f32
    %y8 = arith.minimumf %acc, %cv : f32
    %tenth = arith.constant 0.1 : f32
    %sc = arith.mulf %acc, %tenth : f32
    %y9 = math.expm1 %sc : f32
    %ab = math.absf %acc : f32
    %y10 = math.log1p %ab : f32
    %gt = arith.cmpf ogt, %acc, %sv : f32
    %zero = arith.constant 0.0 : f32
    %y11 = arith.select %gt, %acc, %zero : f32
    %bf = arith.truncf %acc : f32 to bf16
    %y12 = arith.extf %bf : bf16 to f32
    %ts = arith.extsi %t : i1 to i64
    %ad = arith.addi %ts, %col : i64
    %mu = arith.muli %ad, %e : i64
    %seven = arith.constant 7 : i64
    %mx = arith.maxsi %mu, %seven : i64
    %two = arith.constant 2 : i64
    %sb = arith.subi %mx, %two : i64
    %one = arith.constant 1 : i64
    %mn = arith.minsi %sb, %one : i64
    %mi = arith.addi %sb, %mn : i64
    %y15 = arith.sitofp %mi : i64 to f32
    %half = arith.constant 0.5 : f32
    %hs = arith.mulf %acc, %half : f32
    %d = arith.divf %acc, %cv : f32
    %ng = arith.negf %d : f32
    %sub = arith.subf %ng, %sv : f32
    %add = arith.addf %sub, %y12 : f32
    %une = arith.cmpf une, %acc, %cv : f32
    %uf = arith.uitofp %une : i1 to f32
    %y13 = arith.addf %add, %uf : f32
    tx.yield %y0, %y1, %y2, %y3, %y4, %y5, %y6, %y7, %y8, %y9, %y10, %y11, %y13, %acc, %hs, %y15
        : f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32
  }
  return %o#0, %o#1, %o#2, %o#3, %o#4, %o#5, %o#6, %o#7, %o#8, %o#9, %o#10, %o#11, %o#12, %o#13, %o#14, %o#15
      : tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>,
        tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>,
        tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>
})");
  const int64_t n = 3, cols = 4;
  RefTensor a = t2({n, 2}, {1, 2, -1, 0.5, 3, -2});
  RefTensor w = t2({cols, 2}, {1, 1, 2, -1, 0, 1, -3, 0.25});
  RefTensor r = t2({n, 1}, {-1, 2, 5}, DType::I32);
  RefTensor c = t2({1, cols}, {0.5, -1, 2, 4});
  RefTensor s = RefTensor::scalar(0.25);
  auto out = interpretTx(*m.module, {a, w, r, c, s});
  ASSERT_EQ(out.size(), 16u);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> want(16, 0.0);
    double mx = -INFINITY;
    std::vector<double> lse;
    int64_t ri = static_cast<int64_t>(r.data[i]);
    double riU = ri < 0 ? ri + 4294967296.0 : ri;
    for (int64_t j = 0; j < cols; ++j) {
      double acc = a.at(i, 0) * w.at(j, 0) + a.at(i, 1) * w.at(j, 1);
      double cv = c.data[j], sv = s.data[0];
      int64_t t = j & 1;
      want[0] += riU;
      want[1] += ri;
      want[2] += t;
      want[3] += -t;
      want[4] += (static_cast<uint64_t>(ri) < static_cast<uint64_t>(j)) ? 1 : 0;
      want[5] += ri < j ? 1 : 0;
      want[6] += riU;
      want[7] += std::max(acc, cv);
      want[8] += std::min(acc, cv);
      want[9] += std::expm1(acc * static_cast<double>(0.1f)); // an f32 attribute
      want[10] += std::log1p(std::fabs(acc));
      want[11] += acc > sv ? acc : 0.0;
      want[12] += -(acc / cv) - sv + acc + (acc != cv ? 1 : 0);
      mx = std::max(mx, acc);
      lse.push_back(acc * 0.5);
      int64_t mu = (-t + j) * ri;
      int64_t sb = std::max<int64_t>(mu, 7) - 2;
      want[15] += static_cast<double>(sb + std::min<int64_t>(sb, 1));
    }
    want[13] = mx;
    double m0 = *std::max_element(lse.begin(), lse.end()), sum = 0;
    for (double x : lse)
      sum += std::exp(x - m0);
    want[14] = m0 + std::log(sum);
    for (int k = 0; k < 16; ++k)
      EXPECT_NEAR(out[k].data[i], want[k], 1e-12 * std::max(1.0, std::fabs(want[k])))
          << "yield " << k << " row " << i;
  }
}

TEST(TxInterpreter, GemmGradMatchesExplicitProducts) {
  Module m = parse(R"(
func.func @f(%a: tensor<?x3xbf16>, %w: tensor<5x3xbf16>, %g: tensor<?x1xf32>, %b: tensor<1x5xf32>)
    -> (tensor<?x3xf32>, tensor<5x3xf32>) {
  %dl, %dr = tx.gemm_grad %a, %w sides(%g, %b : tensor<?x1xf32>, tensor<1x5xf32>)
      : tensor<?x3xbf16>, tensor<5x3xbf16> -> tensor<?x3xf32>, tensor<5x3xf32> {
  ^bb0(%acc: f32, %col: i64, %gv: f32, %bv: f32):
    %t = math.tanh %acc : f32
    %p = arith.mulf %t, %gv : f32
    %q = arith.subf %p, %bv : f32
    tx.yield %q : f32
  }
  return %dl, %dr : tensor<?x3xf32>, tensor<5x3xf32>
})");
  const int64_t n = 6;
  Rng rng(11);
  RefTensor a = rng.normal({n, 3}, DType::BF16), w = rng.normal({5, 3}, DType::BF16);
  RefTensor g = rng.normal({n, 1}, DType::F32), b = rng.normal({1, 5}, DType::F32);
  auto out = interpretTx(*m.module, {a, w, g, b});
  std::vector<double> dz(n * 5);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double acc = 0;
      for (int k = 0; k < 3; ++k)
        acc += a.at(i, k) * w.at(j, k);
      dz[i * 5 + j] = std::tanh(acc) * g.data[i] - b.data[j];
    }
  for (int64_t i = 0; i < n; ++i)
    for (int k = 0; k < 3; ++k) {
      double want = 0;
      for (int64_t j = 0; j < 5; ++j)
        want += dz[i * 5 + j] * w.at(j, k);
      EXPECT_NEAR(out[0].at(i, k), want, 1e-13);
    }
  for (int64_t j = 0; j < 5; ++j)
    for (int k = 0; k < 3; ++k) {
      double want = 0;
      for (int64_t i = 0; i < n; ++i)
        want += dz[i * 5 + j] * a.at(i, k);
      EXPECT_NEAR(out[1].at(j, k), want, 1e-13);
    }
  // Zero rows: d_lhs is empty and d_rhs is zero.
  auto z =
      interpretTx(*m.module, {RefTensor({0, 3}, DType::BF16), w, RefTensor({0, 1}, DType::F32), b});
  EXPECT_EQ(z[0].shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(z[1].data, std::vector<double>(15, 0.0));
}

TEST(RefTensor, RoundToDType) {
  // bf16: 8 significant bits, ties to even.
  EXPECT_EQ(ref::roundToDType(1.0 + 1.0 / 256, DType::BF16), 1.0);             // tie -> even
  EXPECT_EQ(ref::roundToDType(1.0 + 3.0 / 256, DType::BF16), 1.0 + 4.0 / 256); // tie -> even
  EXPECT_EQ(ref::roundToDType(1.0 + 1.5 / 256, DType::BF16), 1.0 + 2.0 / 256);
  EXPECT_EQ(ref::roundToDType(-3.14159, DType::BF16), -3.140625);
  EXPECT_EQ(ref::roundToDType(3.5e38, DType::BF16), INFINITY);
  EXPECT_EQ(ref::roundToDType(0x1p-133, DType::BF16), 0x1p-133); // subnormal kept
  EXPECT_EQ(ref::roundToDType(0x1.01p-133, DType::BF16), 0x1p-133);
  // f16: 11 bits, max 65504.
  EXPECT_EQ(ref::roundToDType(65519.0, DType::F16), 65504.0);
  EXPECT_EQ(ref::roundToDType(65520.0, DType::F16), INFINITY);
  EXPECT_EQ(ref::roundToDType(1.0 + 1.0 / 2048, DType::F16), 1.0);
  EXPECT_EQ(ref::roundToDType(0x1p-24, DType::F16), 0x1p-24);
  EXPECT_EQ(ref::roundToDType(0x1p-26, DType::F16), 0.0);
  // f32 agrees with the hardware conversion.
  Rng rng(5);
  std::normal_distribution<double> d(0.0, 100.0);
  for (int i = 0; i < 1000; ++i) {
    double x = d(rng.gen());
    EXPECT_EQ(ref::roundToDType(x, DType::F32), static_cast<double>(static_cast<float>(x)));
  }
  EXPECT_TRUE(std::isnan(ref::roundToDType(NAN, DType::BF16)));
  EXPECT_EQ(ref::roundToDType(-7.9, DType::I32), -7.0);
  EXPECT_EQ(ref::roundToDType(4294967297.0, DType::I32), 1.0);
  EXPECT_EQ(ref::roundToDType(0.5, DType::I1), 1.0);
}

} // namespace
