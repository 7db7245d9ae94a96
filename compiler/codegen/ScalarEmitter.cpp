//===- ScalarEmitter.cpp - ScalarFunc -> CUDA C++ statements
//---------------===//

#include "compiler/codegen/ScalarEmitter.h"
#include "compiler/support/Check.h"

#include <cmath>
#include <optional>
#include <limits>
#include <set>

namespace lcejit::codegen {

using plan::ScalarFunc;
using plan::ScalarInst;
using plan::ScalarOp;

const char *valueCType(DType t) {
  switch (t) {
  case DType::BF16:
  case DType::F16:
  case DType::F32:
    return "float";
  case DType::F64:
    return "double";
  case DType::I32:
    return "int";
  case DType::I64:
    return "long long";
  case DType::I1:
    return "bool";
  }
  LCEJIT_CHECK(false, "bad dtype {}", static_cast<int>(t));
  return "";
}

DType valueTypeOf(DType storage) {
  return storage == DType::BF16 || storage == DType::F16 ? DType::F32 : storage;
}

static bool isFloatValue(DType t) { return t == DType::F32 || t == DType::F64; }
static bool isIntValue(DType t) { return t == DType::I32 || t == DType::I64; }

std::string f32Literal(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(f))
    return "lcejit::f32_nan()";
  if (std::isinf(f))
    return f > 0 ? "lcejit::f32_inf()" : "(-lcejit::f32_inf())";
  std::string s = fmt::format("{}", f); // shortest text that reads back as f
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s + "f";
}

/// A double literal (only Const instructions of type f64 need one).
static std::string f64Literal(double v) {
  if (!std::isfinite(v))
    return fmt::format("static_cast<double>({})", f32Literal(v));
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

std::string intLiteral(int64_t v, DType t) {
  switch (t) {
  case DType::I1:
    return v != 0 ? "true" : "false";
  case DType::I32: {
    int32_t x = static_cast<int32_t>(v);
    if (x == std::numeric_limits<int32_t>::min())
      return "(-2147483647 - 1)";
    return fmt::format("{}", x);
  }
  case DType::I64:
    if (v == std::numeric_limits<int64_t>::min())
      return "(-9223372036854775807LL - 1)";
    return fmt::format("{}LL", v);
  default:
    break;
  }
  LCEJIT_CHECK(false, "intLiteral of type {}", dtypeName(t));
  return "";
}

std::string convertValue(const std::string &expr, DType from, DType to) {
  from = valueTypeOf(from);
  to = valueTypeOf(to);
  if (from == to)
    return expr;
  if (to == DType::I1) {
    if (from == DType::F32)
      return fmt::format("({} != 0.0f)", expr);
    if (from == DType::F64)
      return fmt::format("({} != 0.0)", expr);
    return fmt::format("({} != 0)", expr);
  }
  if (from == DType::I1)
    return fmt::format("static_cast<{}>({})", valueCType(to), expr); // 0 or 1
  if (isFloatValue(from) && isIntValue(to)) {
    // Truncate toward zero, saturating, NaN -> 0 (cvt.rzi): never C++ UB.
    const char *fn =
        from == DType::F32
            ? (to == DType::I64 ? "__float2ll_rz" : "__float2int_rz")
            : (to == DType::I64 ? "__double2ll_rz" : "__double2int_rz");
    return fmt::format("{}({})", fn, expr);
  }
  // int -> float (round to nearest), f64 <-> f32 (round to nearest), i32 <->
  // i64.
  return fmt::format("static_cast<{}>({})", valueCType(to), expr);
}

static const char *elemTag(DType storage) {
  switch (storage) {
  case DType::BF16:
    return "lcejit::elem_bf16";
  case DType::F16:
    return "lcejit::elem_f16";
  default:
    return nullptr;
  }
}

std::string loadElement(DType storage, std::string_view ptr,
                        std::string_view index) {
  switch (storage) {
  case DType::BF16:
  case DType::F16:
    return fmt::format("lcejit::load_f32<{}>({}, {})", elemTag(storage), ptr,
                       index);
  case DType::I1:
    return fmt::format("(static_cast<const unsigned char *>({})[{}] != 0)", ptr,
                       index);
  default:
    return fmt::format("static_cast<const {} *>({})[{}]", valueCType(storage),
                       ptr, index);
  }
}

std::string storeElement(DType storage, std::string_view ptr,
                         std::string_view index, const std::string &value,
                         DType from) {
  switch (storage) {
  case DType::BF16:
  case DType::F16:
    return fmt::format("lcejit::store_f32<{}>({}, {}, {});", elemTag(storage),
                       ptr, index, convertValue(value, from, DType::F32));
  case DType::I1:
    return fmt::format("static_cast<unsigned char *>({})[{}] = {} ? 1 : 0;",
                       ptr, index, convertValue(value, from, DType::I1));
  default:
    return fmt::format("static_cast<{} *>({})[{}] = {};", valueCType(storage),
                       ptr, index, convertValue(value, from, storage));
  }
}

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

static int arity(ScalarOp op) {
  switch (op) {
  case ScalarOp::Arg:
  case ScalarOp::Const:
  case ScalarOp::RowCount:
    return 0;
  case ScalarOp::Neg:
  case ScalarOp::Exp:
  case ScalarOp::Log:
  case ScalarOp::Tanh:
  case ScalarOp::Expm1:
  case ScalarOp::Log1p:
  case ScalarOp::Abs:
  case ScalarOp::Not:
  case ScalarOp::Cast:
    return 1;
  case ScalarOp::Select:
    return 3;
  default:
    return 2;
  }
}

void verifyScalarFunc(const ScalarFunc &f, std::string_view what) {
  for (size_t i = 0; i < f.insts.size(); ++i) {
    const ScalarInst &in = f.insts[i];
    int n = arity(in.op);
    for (int o = 0; o < 3; ++o) {
      int32_t x = in.operands[o];
      if (o < n)
        LCEJIT_CHECK(x >= 0 && static_cast<size_t>(x) < i,
                     "{}: instruction {} ({}) operand {} is {}, not an earlier "
                     "instruction",
                     what, i, plan::scalarOpName(in.op), o, x);
    }
    if (in.op == ScalarOp::Arg)
      LCEJIT_CHECK(in.argIndex >= 0, "{}: instruction {} (arg) has argIndex {}",
                   what, i, in.argIndex);
    LCEJIT_CHECK(in.type == DType::F32 || in.type == DType::F64 ||
                     in.type == DType::I32 || in.type == DType::I64 ||
                     in.type == DType::I1,
                 "{}: instruction {} ({}) has type {}, not f32/i32/i64/i1",
                 what, i, plan::scalarOpName(in.op), dtypeName(in.type));
  }
  for (int32_t r : f.results)
    LCEJIT_CHECK(r >= 0 && static_cast<size_t>(r) < f.insts.size(),
                 "{}: result {} is not an instruction of {}", what, r,
                 f.insts.size());
}

namespace {

// [Note: f32 division by a constant]
// An f32 `x / c` with a constant c is emitted as `x * (1/c)`, the reciprocal
// rounded to f32 here: at most one ulp from the IEEE quotient (exact when c is
// a power of two), and one FMUL instead of div.rn.f32. The IEEE division is
// not cheap on the device: its range check branches to a slow-path
// subroutine, and a possible call in an unrolled epilogue keeps ptxas from
// interleaving the elements of a tile, so every element paid its whole
// latency chain (measured: the softcap forward and dZ kernels at 51 % and 28 %
// tensor-pipe activity on the H200, docs/hopper.md). Division by a value that
// is not a constant stays IEEE, and so does f64. The constant is then not an
// operand of the division (liveInsts), so it is not emitted unless used
// elsewhere.
std::optional<float> f32ReciprocalOfConst(const ScalarFunc &f,
                                          const ScalarInst &in) {
  if (in.op != ScalarOp::Div || in.type != DType::F32)
    return std::nullopt;
  const int32_t o = in.operands[1];
  if (o < 0 || static_cast<size_t>(o) >= f.insts.size())
    return std::nullopt;
  const ScalarInst &d = f.insts[static_cast<size_t>(o)];
  if (d.op != ScalarOp::Const || !isFloatValue(d.type))
    return std::nullopt;
  const float c = static_cast<float>(d.fValue); // the divisor as emitted
  const float r = static_cast<float>(1.0 / static_cast<double>(c));
  if (!std::isnormal(c) || !std::isnormal(r))
    return std::nullopt; // 0, inf, NaN, subnormal: keep the IEEE division
  return r;
}

} // namespace

std::vector<bool> liveInsts(const ScalarFunc &f) {
  std::vector<bool> live(f.insts.size(), false);
  for (int32_t r : f.results)
    if (r >= 0 && static_cast<size_t>(r) < live.size())
      live[static_cast<size_t>(r)] = true;
  for (size_t i = f.insts.size(); i-- > 0;) {
    if (!live[i])
      continue;
    const ScalarInst &in = f.insts[i];
    const int used = f32ReciprocalOfConst(f, in) ? 1 : arity(in.op);
    for (int o = 0; o < used; ++o)
      if (in.operands[o] >= 0 && static_cast<size_t>(in.operands[o]) < i)
        live[static_cast<size_t>(in.operands[o])] = true;
  }
  return live;
}

std::vector<int32_t> liveArgs(const ScalarFunc &f) {
  std::vector<bool> live = liveInsts(f);
  std::set<int32_t> args;
  for (size_t i = 0; i < f.insts.size(); ++i)
    if (live[i] && f.insts[i].op == ScalarOp::Arg)
      args.insert(f.insts[i].argIndex);
  return {args.begin(), args.end()};
}

namespace {

class BodyEmitter {
public:
  BodyEmitter(const ScalarFunc &f, const ArgFn &arg, std::string_view rowCount)
      : f_(f), arg_(arg), rowCount_(rowCount) {}

  std::string name(int32_t i) const { return fmt::format("v{}", i); }
  DType type(int32_t i) const { return f_.insts[static_cast<size_t>(i)].type; }
  /// Operand o of `in` converted to type `t`.
  std::string operand(const ScalarInst &in, int o, DType t) const {
    return convertValue(name(in.operands[o]), type(in.operands[o]), t);
  }

  std::string expr(size_t idx) const {
    const ScalarInst &in = f_.insts[idx];
    const DType t = in.type;
    const bool fl = isFloatValue(t);
    auto a = [&](DType ty) { return operand(in, 0, ty); };
    auto b = [&](DType ty) { return operand(in, 1, ty); };
    auto needFloat = [&] {
      LCEJIT_CHECK(fl, "scalar instruction {} ({}) needs a float type, has {}",
                   idx, plan::scalarOpName(in.op), dtypeName(t));
    };
    auto needBool = [&] {
      LCEJIT_CHECK(t == DType::I1,
                   "scalar instruction {} ({}) needs type i1, has {}", idx,
                   plan::scalarOpName(in.op), dtypeName(t));
    };
    auto needNumber = [&] {
      LCEJIT_CHECK(t != DType::I1,
                   "scalar instruction {} ({}) cannot have type i1", idx,
                   plan::scalarOpName(in.op));
    };
    // Unary float functions: f32 names (the f64 interpreter is not on the
    // device).
    auto unaryFloat = [&](const char *f32fn, const char *f64fn) {
      needFloat();
      return fmt::format("{}({})", t == DType::F64 ? f64fn : f32fn, a(t));
    };
    switch (in.op) {
    case ScalarOp::Arg: {
      ArgValue v = arg_(in.argIndex);
      return convertValue(v.expr, v.type, t);
    }
    case ScalarOp::Const:
      if (t == DType::F32)
        return f32Literal(in.fValue);
      if (t == DType::F64)
        return f64Literal(in.fValue);
      return intLiteral(in.iValue, t);
    case ScalarOp::RowCount:
      return convertValue(std::string(rowCount_), DType::I64, t);
    case ScalarOp::Add:
      needNumber();
      return fl ? fmt::format("{} + {}", a(t), b(t))
                : fmt::format("lcejit::wrap_add({}, {})", a(t), b(t));
    case ScalarOp::Sub:
      needNumber();
      return fl ? fmt::format("{} - {}", a(t), b(t))
                : fmt::format("lcejit::wrap_sub({}, {})", a(t), b(t));
    case ScalarOp::Mul:
      needNumber();
      return fl ? fmt::format("{} * {}", a(t), b(t))
                : fmt::format("lcejit::wrap_mul({}, {})", a(t), b(t));
    case ScalarOp::Div: {
      needFloat();
      if (std::optional<float> r = f32ReciprocalOfConst(f_, in))
        return fmt::format("{} * {}", a(t), f32Literal(*r));
      return fmt::format("{} / {}", a(t), b(t));
    }
    case ScalarOp::Max:
      needNumber();
      return fl ? fmt::format("{}({}, {})",
                              t == DType::F64 ? "fmax" : "lcejit::max_nan",
                              a(t), b(t))
                : fmt::format("({0} > {1} ? {0} : {1})", a(t), b(t));
    case ScalarOp::Min:
      needNumber();
      return fl ? fmt::format("{}({}, {})",
                              t == DType::F64 ? "fmin" : "lcejit::min_nan",
                              a(t), b(t))
                : fmt::format("({0} < {1} ? {0} : {1})", a(t), b(t));
    case ScalarOp::Neg:
      needNumber();
      return fl ? fmt::format("-{}", a(t))
                : fmt::format("lcejit::wrap_sub({}, {})", intLiteral(0, t),
                              a(t));
    case ScalarOp::Abs:
      needNumber();
      return fl ? fmt::format("{}({})", t == DType::F64 ? "fabs" : "fabsf",
                              a(t))
                : fmt::format("({0} < 0 ? lcejit::wrap_sub({1}, {0}) : {0})",
                              a(t), intLiteral(0, t));
    case ScalarOp::Exp:
      return unaryFloat("expf", "exp");
    case ScalarOp::Log:
      return unaryFloat("logf", "log");
    case ScalarOp::Tanh:
      return unaryFloat("lcejit::tanh_f32", "tanh"); // [Note: f32 tanh] (lcejit_common.cuh)
    case ScalarOp::Expm1:
      return unaryFloat("expm1f", "expm1");
    case ScalarOp::Log1p:
      return unaryFloat("log1pf", "log1p");
    case ScalarOp::CmpEq:
    case ScalarOp::CmpNe:
    case ScalarOp::CmpLt:
    case ScalarOp::CmpLe:
    case ScalarOp::CmpGt:
    case ScalarOp::CmpGe: {
      needBool();
      static const char *ops[] = {"==", "!=", "<", "<=", ">", ">="};
      const char *op =
          ops[static_cast<int>(in.op) - static_cast<int>(ScalarOp::CmpEq)];
      DType ct = type(in.operands[0]);
      return fmt::format("({} {} {})", a(ct), op, b(ct));
    }
    case ScalarOp::And:
      needBool();
      return fmt::format("({} && {})", a(DType::I1), b(DType::I1));
    case ScalarOp::Or:
      needBool();
      return fmt::format("({} || {})", a(DType::I1), b(DType::I1));
    case ScalarOp::Not:
      needBool();
      return fmt::format("!{}", a(DType::I1));
    case ScalarOp::Select:
      return fmt::format("({} ? {} : {})", operand(in, 0, DType::I1),
                         operand(in, 1, t), operand(in, 2, t));
    case ScalarOp::Cast:
      return operand(in, 0, t);
    }
    LCEJIT_CHECK(false, "unknown scalar op {}", static_cast<int>(in.op));
    return "";
  }

private:
  const ScalarFunc &f_;
  const ArgFn &arg_;
  std::string_view rowCount_;
};

} // namespace

std::vector<std::string> emitScalarBody(CodeWriter &w, const ScalarFunc &f,
                                        const ArgFn &arg,
                                        std::string_view rowCount) {
  verifyScalarFunc(f, "scalar function");
  std::vector<bool> live = liveInsts(f);
  BodyEmitter e(f, arg, rowCount);
  for (size_t i = 0; i < f.insts.size(); ++i) {
    if (!live[i])
      continue;
    const ScalarInst &in = f.insts[i];
    w.line("const {} {} = {};", valueCType(in.type),
           e.name(static_cast<int32_t>(i)), e.expr(i));
  }
  std::vector<std::string> results;
  for (int32_t r : f.results)
    results.push_back(e.name(r));
  return results;
}

} // namespace lcejit::codegen
