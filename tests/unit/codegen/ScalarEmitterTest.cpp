//===- ScalarEmitterTest.cpp - ScalarFunc -> CUDA statements
//---------------===//

#include "TestPrograms.h"

#include "compiler/codegen/ScalarEmitter.h"
#include "lcejit/Error.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

using namespace lcejit;
using namespace lcejit::codegen;
using lcejit::plan::ScalarOp;
using lcejit::testing::FuncBuilder;

namespace {

/// Parses an f32 literal the emitter printed ("1.5f") back to a float.
float parseF32(const std::string &s) {
  EXPECT_EQ(s.back(), 'f') << s;
  return std::strtof(s.substr(0, s.size() - 1).c_str(), nullptr);
}

} // namespace

TEST(ScalarEmitter, F32LiteralsRoundTrip) {
  const double values[] = {0.0,    1.0,       -3.0,    0.1,       1.0 / 3.0,
                           1e30,   -1e-30,    1.4e-45, 3e38,      30.0,
                           2.5e-8, 123456789, -0.0,    16777217.0};
  for (double v : values) {
    std::string lit = f32Literal(v);
    EXPECT_NE(lit.find_first_of(".e"), std::string::npos) << lit;
    float back = parseF32(lit);
    float fv = static_cast<float>(v);
    EXPECT_EQ(std::memcmp(&back, &fv, sizeof(float)), 0) << v << " -> " << lit;
  }
  EXPECT_EQ(f32Literal(std::numeric_limits<double>::infinity()),
            "lcejit::f32_inf()");
  EXPECT_EQ(f32Literal(-std::numeric_limits<double>::infinity()),
            "(-lcejit::f32_inf())");
  EXPECT_EQ(f32Literal(std::nan("")), "lcejit::f32_nan()");
  EXPECT_EQ(f32Literal(1e300), "lcejit::f32_inf()"); // overflows f32
}

TEST(ScalarEmitter, IntLiterals) {
  EXPECT_EQ(intLiteral(7, DType::I64), "7LL");
  EXPECT_EQ(intLiteral(-7, DType::I32), "-7");
  EXPECT_EQ(intLiteral(std::numeric_limits<int64_t>::min(), DType::I64),
            "(-9223372036854775807LL - 1)");
  EXPECT_EQ(intLiteral(std::numeric_limits<int32_t>::min(), DType::I32),
            "(-2147483647 - 1)");
  EXPECT_EQ(intLiteral(2, DType::I1), "true");
  EXPECT_EQ(intLiteral(0, DType::I1), "false");
}

TEST(ScalarEmitter, Conversions) {
  EXPECT_EQ(convertValue("x", DType::F32, DType::F32), "x");
  EXPECT_EQ(convertValue("x", DType::BF16, DType::F32), "x");
  EXPECT_EQ(convertValue("x", DType::F32, DType::I64), "__float2ll_rz(x)");
  EXPECT_EQ(convertValue("x", DType::F32, DType::I32), "__float2int_rz(x)");
  EXPECT_EQ(convertValue("x", DType::F64, DType::I64), "__double2ll_rz(x)");
  EXPECT_EQ(convertValue("x", DType::I64, DType::F32), "static_cast<float>(x)");
  EXPECT_EQ(convertValue("x", DType::F32, DType::I1), "(x != 0.0f)");
  EXPECT_EQ(convertValue("x", DType::I32, DType::I1), "(x != 0)");
  EXPECT_EQ(convertValue("b", DType::I1, DType::F32), "static_cast<float>(b)");
  EXPECT_EQ(convertValue("d", DType::F64, DType::F32), "static_cast<float>(d)");
}

TEST(ScalarEmitter, LoadsAndStores) {
  EXPECT_EQ(loadElement(DType::BF16, "in0", "row"),
            "lcejit::load_f32<lcejit::elem_bf16>(in0, row)");
  EXPECT_EQ(loadElement(DType::I64, "in2", "row"),
            "static_cast<const long long *>(in2)[row]");
  EXPECT_EQ(loadElement(DType::I1, "ws4", "row"),
            "(static_cast<const unsigned char *>(ws4)[row] != 0)");
  EXPECT_EQ(storeElement(DType::F16, "out1", "row", "v3", DType::F32),
            "lcejit::store_f32<lcejit::elem_f16>(out1, row, v3);");
  EXPECT_EQ(storeElement(DType::I1, "ws4", "row", "v2", DType::I1),
            "static_cast<unsigned char *>(ws4)[row] = v2 ? 1 : 0;");
  EXPECT_EQ(storeElement(DType::F64, "ws0", "2", "v5", DType::F32),
            "static_cast<double *>(ws0)[2] = static_cast<double>(v5);");
}

TEST(ScalarEmitter, BodyEmitsOnlyLiveInstructionsInOrder) {
  FuncBuilder fb;
  int32_t a = fb.arg(0, DType::F32);
  int32_t dead = fb.op(ScalarOp::Exp, DType::F32, a);
  int32_t c = fb.constF(2.0);
  int32_t m = fb.op(ScalarOp::Max, DType::F32, a, c);
  int32_t y = fb.arg(1, DType::I64);
  int32_t cmp =
      fb.op(ScalarOp::CmpNe, DType::I1, y, fb.constI(-100, DType::I64));
  int32_t sel = fb.op(ScalarOp::Select, DType::F32, cmp, m, fb.constF(0.0));
  fb.result(sel);
  fb.result(fb.op(ScalarOp::Add, DType::I64, y, fb.rowCount()));
  plan::ScalarFunc f = fb.take();
  (void)dead;
  EXPECT_EQ(liveArgs(f), (std::vector<int32_t>{0, 1}));
  CodeWriter w;
  std::vector<std::string> results = emitScalarBody(
      w, f,
      [](int32_t i) {
        return ArgValue{fmt::format("a{}", i),
                        i == 0 ? DType::F32 : DType::I32};
      },
      "n");
  EXPECT_EQ(results, (std::vector<std::string>{"v8", "v10"}));
  EXPECT_EQ(w.str(), "const float v0 = a0;\n"
                     "const float v2 = 2.0f;\n"
                     "const float v3 = lcejit::max_nan(v0, v2);\n"
                     "const long long v4 = static_cast<long long>(a1);\n"
                     "const long long v5 = -100LL;\n"
                     "const bool v6 = (v4 != v5);\n"
                     "const float v7 = 0.0f;\n"
                     "const float v8 = (v6 ? v3 : v7);\n"
                     "const long long v9 = n;\n"
                     "const long long v10 = lcejit::wrap_add(v4, v9);\n");
}

// [Note: f32 division by a constant]: x / 30 is x * f32(1/30); a divisor that
// is not a constant, a zero, an infinite or a subnormal one (or one whose
// reciprocal is subnormal), and every f64 division stay IEEE divisions.
TEST(ScalarEmitter, F32DivisionByAConstantIsAMultiplyByItsReciprocal) {
  FuncBuilder fb;
  int32_t x = fb.arg(0, DType::F32);
  int32_t y = fb.arg(1, DType::F32);
  fb.result(fb.op(ScalarOp::Div, DType::F32, x, fb.constF(30.0)));
  fb.result(fb.op(ScalarOp::Div, DType::F32, x, fb.constF(-0.25)));
  fb.result(fb.op(ScalarOp::Div, DType::F32, x, y));
  fb.result(fb.op(ScalarOp::Div, DType::F32, x, fb.constF(0.0)));
  fb.result(fb.op(ScalarOp::Div, DType::F32, x,
                  fb.constF(std::numeric_limits<double>::infinity())));
  fb.result(fb.op(ScalarOp::Div, DType::F32, x, fb.constF(1e-39)));
  fb.result(fb.op(ScalarOp::Div, DType::F32, x, fb.constF(1e38))); // 1/c subnormal
  int32_t xd = fb.op(ScalarOp::Cast, DType::F64, x);
  fb.result(fb.op(ScalarOp::Div, DType::F64, xd,
                  fb.op(ScalarOp::Cast, DType::F64, fb.constF(7.0))));
  plan::ScalarFunc f = fb.take();
  CodeWriter w;
  std::vector<std::string> r = emitScalarBody(
      w, f, [](int32_t i) { return ArgValue{fmt::format("a{}", i), DType::F32}; },
      "n");
  ASSERT_EQ(r.size(), 8u);
  auto line = [&](const std::string &v) {
    const std::string text = w.str();
    const std::string key = " " + v + " = ";
    size_t at = text.find(key);
    EXPECT_NE(at, std::string::npos) << v << " in\n" << text;
    size_t end = text.find(";\n", at);
    return text.substr(at + key.size(), end - at - key.size());
  };
  // The reciprocal literal reads back as the f32 rounding of 1 / f32(30).
  const std::string mul = line(r[0]);
  ASSERT_NE(mul.rfind(" * "), std::string::npos) << mul;
  const std::string lit = mul.substr(mul.rfind(" * ") + 3);
  EXPECT_EQ(parseF32(lit), static_cast<float>(1.0 / static_cast<double>(30.0f)));
  EXPECT_EQ(line(r[1]).substr(line(r[1]).rfind(" * ") + 3), "-4.0f");
  // A constant that only divides is not emitted (no unused variable); one an
  // IEEE division still reads is.
  EXPECT_EQ(w.str().find("= 30.0f;"), std::string::npos) << w.str();
  EXPECT_EQ(w.str().find("= -0.25f;"), std::string::npos) << w.str();
  EXPECT_NE(w.str().find("= 0.0f;"), std::string::npos) << w.str();
  for (int i : {2, 3, 4, 5, 6, 7})
    EXPECT_NE(line(r[static_cast<size_t>(i)]).find(" / "), std::string::npos)
        << "result " << i << ": " << line(r[static_cast<size_t>(i)]);
}

TEST(ScalarEmitter, RejectsMalformedFunctions) {
  FuncBuilder fb;
  int32_t a = fb.arg(0, DType::F32);
  fb.result(
      fb.op(ScalarOp::Add, DType::F32, a, 5)); // operand 5 does not exist yet
  plan::ScalarFunc f = fb.take();
  CodeWriter w;
  EXPECT_THROW(emitScalarBody(
                   w, f,
                   [](int32_t) {
                     return ArgValue{"a", DType::F32};
                   },
                   "n"),
               Error);
  FuncBuilder ib;
  int32_t x = ib.arg(0, DType::I64);
  ib.result(ib.op(ScalarOp::Exp, DType::I64, x)); // exp of an integer
  plan::ScalarFunc g = ib.take();
  EXPECT_THROW(emitScalarBody(
                   w, g,
                   [](int32_t) {
                     return ArgValue{"a", DType::I64};
                   },
                   "n"),
               Error);
}
