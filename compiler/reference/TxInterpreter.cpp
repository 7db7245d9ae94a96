//===- TxInterpreter.cpp - fp64 interpreter of the tx dialect -------------===//
//
// See TxInterpreter.h. The interpreter walks the entry block of the function once, in
// order, keeping one RefTensor per SSA value. Fused bodies are compiled once into a flat
// list of scalar instructions (ScalarCode) and evaluated per element of acc.
//
// Integers live in doubles as exact values normalized to their width: i1 as 0/1, i32
// sign-extended, i64 as is. Arith ops that read integers as signed or unsigned (extsi on
// i1 gives -1, uitofp on a negative i32 gives 2^32 - x, ...) reinterpret at the use.
//
//===----------------------------------------------------------------------===//

#include "compiler/reference/TxInterpreter.h"
#include "compiler/reference/RefMath.h"
#include "compiler/dialect/TxDialect.h"
#include "compiler/support/Check.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

using namespace mlir;
namespace tx = lcejit::tx;

namespace lcejit::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

//===----------------------------------------------------------------------===//
// Types and integers
//===----------------------------------------------------------------------===//

std::optional<DType> dtypeOf(Type t) {
  if (t.isBF16())
    return DType::BF16;
  if (t.isF16())
    return DType::F16;
  if (t.isF32())
    return DType::F32;
  if (t.isF64())
    return DType::F64;
  if (t.isInteger(1))
    return DType::I1;
  if (t.isInteger(32))
    return DType::I32;
  if (t.isInteger(64))
    return DType::I64;
  return std::nullopt;
}

/// An integer value normalized to the storage convention of `t`.
double normInt(int64_t v, DType t) {
  switch (t) {
  case DType::I1: return static_cast<double>(v & 1);
  case DType::I32: return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(v)));
  default: return static_cast<double>(v);
  }
}

int64_t toI64(double x) { return static_cast<int64_t>(x); }

/// The value read as a signed integer of `t` (i1 true is -1).
int64_t asSigned(double x, DType t) {
  int64_t v = toI64(x);
  return t == DType::I1 ? -(v & 1) : v;
}

/// The value read as an unsigned integer of `t`.
uint64_t asUnsigned(double x, DType t) {
  int64_t v = toI64(x);
  switch (t) {
  case DType::I1: return static_cast<uint64_t>(v & 1);
  case DType::I32: return static_cast<uint32_t>(v);
  default: return static_cast<uint64_t>(v);
  }
}

double wrapAdd(double a, double b, DType t) {
  return normInt(
      static_cast<int64_t>(static_cast<uint64_t>(toI64(a)) + static_cast<uint64_t>(toI64(b))), t);
}
double wrapSub(double a, double b, DType t) {
  return normInt(
      static_cast<int64_t>(static_cast<uint64_t>(toI64(a)) - static_cast<uint64_t>(toI64(b))), t);
}
double wrapMul(double a, double b, DType t) {
  return normInt(
      static_cast<int64_t>(static_cast<uint64_t>(toI64(a)) * static_cast<uint64_t>(toI64(b))), t);
}

/// Stable log(sum(exp(x))): the maximum plus log1p of the other terms (one maximal
/// element is left out, so a peaked row keeps full relative precision).
double logSumExp(const std::vector<double> &xs) {
  double m = -kInf;
  size_t arg = xs.size();
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isnan(xs[i]))
      return kNaN;
    if (arg == xs.size() || xs[i] > m) {
      m = xs[i];
      arg = i;
    }
  }
  if (arg == xs.size() || m == -kInf)
    return -kInf; // empty, or every term is exp(-inf) = 0
  if (m == kInf)
    return kInf;
  Sum t;
  for (size_t i = 0; i < xs.size(); ++i)
    if (i != arg)
      t.add(std::exp(xs[i] - m));
  return m + std::log1p(t.value());
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

std::string locString(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->getLoc().print(os);
  return s;
}

[[noreturn]] void opError(Operation *op, ErrorKind kind, const std::string &msg) {
  throwError(kind, fmt::format("interpretTx: '{}' at {}: {}", op->getName().getStringRef().str(),
                               locString(op), msg));
}

//===----------------------------------------------------------------------===//
// Shapes and broadcasting
//===----------------------------------------------------------------------===//

using Shape = std::vector<int64_t>;

std::vector<int64_t> rowMajorStrides(const Shape &s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d)
    st[static_cast<size_t>(d)] = st[static_cast<size_t>(d + 1)] * s[static_cast<size_t>(d + 1)];
  return st;
}

/// Calls f(flatOut, index) for every index of `shape` in row-major order.
template <typename F> void forEachIndex(const Shape &shape, F &&f) {
  int64_t total = RefTensor::numelOf(shape);
  if (total == 0)
    return;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t flat = 0; flat < total; ++flat) {
    f(flat, idx);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      size_t u = static_cast<size_t>(d);
      if (++idx[u] < shape[u])
        break;
      idx[u] = 0;
    }
  }
}

class Interpreter {
public:
  explicit Interpreter(func::FuncOp f) : func_(f) {}

  std::vector<RefTensor> run(const std::vector<RefTensor> &inputs) {
    verifyFunction();
    Block &body = func_.getBody().front();
    bindInputs(body, inputs);
    for (Operation &op : body) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        std::vector<RefTensor> out;
        for (Value v : ret.getOperands())
          out.push_back(get(&op, v));
        return out;
      }
      evaluate(&op);
    }
    throwError(ErrorKind::InvalidArgument,
               fmt::format("interpretTx: @{} has no func.return", func_.getSymName().str()));
  }

private:
  /// The interpreter relies on the verifiers (shapes, types, bodies): check them first.
  void verifyFunction() {
    std::string diags;
    {
      ScopedDiagnosticHandler h(func_.getContext(), [&](Diagnostic &d) {
        llvm::raw_string_ostream os(diags);
        os << d.getLocation() << ": " << d << "\n";
        return success();
      });
      if (succeeded(mlir::verify(func_.getOperation())))
        return;
    }
    throwError(ErrorKind::InvalidArgument, fmt::format("interpretTx: @{} does not verify:\n{}",
                                                       func_.getSymName().str(), diags));
  }

  //===--------------------------------------------------------------------===//
  // Values
  //===--------------------------------------------------------------------===//

  void bindInputs(Block &body, const std::vector<RefTensor> &inputs) {
    std::string fname = func_.getSymName().str();
    LCEJIT_CHECK_ARG(inputs.size() == body.getNumArguments(),
                     "interpretTx: @{} takes {} inputs, got {}", fname, body.getNumArguments(),
                     inputs.size());
    for (BlockArgument a : body.getArguments()) {
      const RefTensor &in = inputs[a.getArgNumber()];
      std::string name = argName(a.getArgNumber());
      auto t = dyn_cast<RankedTensorType>(a.getType());
      LCEJIT_CHECK_ARG(t, "interpretTx: @{} argument '{}' is not a ranked tensor", fname, name);
      std::optional<DType> dt = dtypeOf(t.getElementType());
      LCEJIT_CHECK_ARG(dt, "interpretTx: @{} argument '{}' has an unsupported element type", fname,
                       name);
      LCEJIT_CHECK_ARG(in.dtype == *dt, "interpretTx: input '{}' of @{} must be {}, got {}", name,
                       fname, dtypeName(*dt), describe(in));
      LCEJIT_CHECK_ARG(in.rank() == t.getRank(),
                       "interpretTx: input '{}' of @{} must have rank {} ({}), got {}", name, fname,
                       t.getRank(), typeShape(t), describe(in));
      LCEJIT_CHECK_ARG(static_cast<int64_t>(in.data.size()) == in.numel(),
                       "interpretTx: input '{}' has {} values for shape {}", name, in.data.size(),
                       shapeStr(in.shape));
      for (int64_t d = 0; d < t.getRank(); ++d) {
        int64_t want = t.getDimSize(d), got = in.shape[static_cast<size_t>(d)];
        if (ShapedType::isDynamic(want)) {
          LCEJIT_CHECK_ARG(got >= 0, "interpretTx: input '{}' has a negative size {}", name, got);
          if (!n_) {
            n_ = got;
            nFrom_ = name;
          }
          LCEJIT_CHECK_ARG(*n_ == got,
                           "interpretTx: inputs disagree on N: '{}' has N = {} but '{}' has {} "
                           "in dimension {} ({})",
                           nFrom_, *n_, name, got, d, describe(in));
        } else {
          LCEJIT_CHECK_ARG(want == got, "interpretTx: input '{}' of @{} must have shape {}, got {}",
                           name, fname, typeShape(t), describe(in));
        }
      }
      if (isInteger(in.dtype))
        for (double x : in.data)
          LCEJIT_CHECK_ARG(normInt(toI64(x), in.dtype) == x,
                           "interpretTx: input '{}' ({}) holds {}, not a value of its type", name,
                           dtypeName(in.dtype), x);
      values_[a] = in;
    }
  }

  std::string argName(unsigned i) {
    if (auto n = func_.getArgAttrOfType<StringAttr>(i, "tx.name"))
      return n.str();
    return fmt::format("arg{}", i);
  }

  static std::string typeShape(RankedTensorType t) {
    std::string s = "[";
    for (int64_t d = 0; d < t.getRank(); ++d)
      s += (d ? ", " : "") + (ShapedType::isDynamic(t.getDimSize(d))
                                  ? std::string("N")
                                  : std::to_string(t.getDimSize(d)));
    return s + "]";
  }

  const RefTensor &get(Operation *user, Value v) {
    auto it = values_.find(v);
    if (it == values_.end())
      opError(user, ErrorKind::InvalidArgument,
              "an operand has no value (defined later or in another region)");
    return it->second;
  }

  int64_t n(Operation *op) {
    if (!n_)
      opError(op, ErrorKind::InvalidArgument,
              "needs N, but no input has a dynamic dimension to take it from");
    return *n_;
  }

  /// The concrete shape of a tensor type (N for dynamic dimensions).
  Shape concreteShape(Operation *op, Type type) {
    auto t = cast<RankedTensorType>(type);
    Shape s;
    for (int64_t d : t.getShape())
      s.push_back(ShapedType::isDynamic(d) ? n(op) : d);
    return s;
  }

  DType elemType(Operation *op, Type type) {
    auto t = dyn_cast<RankedTensorType>(type);
    std::optional<DType> d = t ? dtypeOf(t.getElementType()) : dtypeOf(type);
    if (!d)
      opError(op, ErrorKind::Unsupported, "unsupported element type");
    return *d;
  }

  /// A fresh result tensor for result `i` of `op`, typed and shaped by the IR.
  RefTensor resultTensor(Operation *op, unsigned i = 0) {
    Type t = op->getResult(i).getType();
    return RefTensor(concreteShape(op, t), elemType(op, t));
  }

  void set(Operation *op, unsigned i, RefTensor t) {
    Shape want = concreteShape(op, op->getResult(i).getType());
    if (t.shape != want)
      opError(op, ErrorKind::Internal,
              fmt::format("computed shape {} but the result type says {}", shapeStr(t.shape),
                          shapeStr(want)));
    values_[op->getResult(i)] = std::move(t);
  }

  //===--------------------------------------------------------------------===//
  // Ops
  //===--------------------------------------------------------------------===//

  void evaluate(Operation *op) {
    llvm::TypeSwitch<Operation *>(op)
        .Case<tx::ConstantOp>([&](tx::ConstantOp c) {
          RefTensor r = resultTensor(op);
          r.data[0] = attrValue(op, c.getValue());
          set(op, 0, std::move(r));
        })
        .Case<tx::IotaOp>([&](tx::IotaOp o) {
          RefTensor r = resultTensor(op);
          size_t axis = static_cast<size_t>(o.getAxis());
          forEachIndex(r.shape, [&](int64_t flat, const std::vector<int64_t> &idx) {
            r.data[static_cast<size_t>(flat)] = normInt(idx[axis], r.dtype);
          });
          set(op, 0, std::move(r));
        })
        .Case<tx::DimOp>([&](tx::DimOp o) {
          const RefTensor &in = get(op, o.getInput());
          RefTensor r = resultTensor(op);
          r.data[0] = static_cast<double>(in.shape[static_cast<size_t>(o.getAxis())]);
          set(op, 0, std::move(r));
        })
        .Case<tx::MatmulOp>([&](tx::MatmulOp o) { matmul(o); })
        .Case<tx::CastOp>([&](tx::CastOp o) {
          DType from = elemType(op, o.getInput().getType());
          DType to = elemType(op, o.getType());
          RefTensor r = get(op, o.getInput());
          r.dtype = to;
          if (!isFloat(to))
            for (double &x : r.data)
              x = castInt(op, x, from, to);
          set(op, 0, std::move(r));
        })
        .Case<tx::BroadcastOp>(
            [&](tx::BroadcastOp o) { elementwise(op, [](const double *x) { return x[0]; }); })
        .Case<tx::AddOp>([&](auto) {
          binary(
              op, [](double a, double b) { return a + b; }, wrapAdd);
        })
        .Case<tx::SubOp>([&](auto) {
          binary(
              op, [](double a, double b) { return a - b; }, wrapSub);
        })
        .Case<tx::MulOp>([&](auto) {
          binary(
              op, [](double a, double b) { return a * b; }, wrapMul);
        })
        .Case<tx::DivOp>([&](auto) {
          if (!isFloat(elemType(op, op->getResult(0).getType())))
            opError(op, ErrorKind::InvalidArgument, "integer division is not defined in tx");
          elementwise(op, [](const double *x) { return x[0] / x[1]; });
        })
        .Case<tx::MaxOp>([&](auto) {
          if (isFloat(elemType(op, op->getResult(0).getType())))
            elementwise(op, [](const double *x) { return maxNaN(x[0], x[1]); });
          else
            elementwise(op, [](const double *x) { return std::max(x[0], x[1]); });
        })
        .Case<tx::NegOp>([&](auto) { elementwise(op, [](const double *x) { return -x[0]; }); })
        .Case<tx::ExpOp>(
            [&](auto) { elementwise(op, [](const double *x) { return std::exp(x[0]); }); })
        .Case<tx::LogOp>(
            [&](auto) { elementwise(op, [](const double *x) { return std::log(x[0]); }); })
        .Case<tx::TanhOp>(
            [&](auto) { elementwise(op, [](const double *x) { return std::tanh(x[0]); }); })
        .Case<tx::CmpOp>([&](tx::CmpOp c) {
          tx::CmpPredicate p = c.getPredicate();
          elementwise(op, [p](const double *x) { return compare(p, x[0], x[1]) ? 1.0 : 0.0; });
        })
        .Case<tx::SelectOp>([&](auto) {
          elementwise(op, [](const double *x) { return x[0] != 0.0 ? x[1] : x[2]; });
        })
        .Case<tx::ReduceSumOp>([&](tx::ReduceSumOp o) { reduce(op, o.getAxis(), Reduce::Sum); })
        .Case<tx::ReduceMaxOp>([&](tx::ReduceMaxOp o) { reduce(op, o.getAxis(), Reduce::Max); })
        .Case<tx::MeanOp>([&](tx::MeanOp o) { reduce(op, o.getAxis(), Reduce::Mean); })
        .Case<tx::LogSumExpOp>([&](tx::LogSumExpOp o) {
          reduce(op, static_cast<int64_t>(o.getAxis()), Reduce::LogSumExp);
        })
        .Case<tx::GatherOp>([&](tx::GatherOp o) { gather(o); })
        .Case<tx::GemmReduceOp>([&](tx::GemmReduceOp o) { gemmReduce(o); })
        .Case<tx::GemmGradOp>([&](tx::GemmGradOp o) { gemmGrad(o); })
        .Case<tx::GradOp>([&](auto) {
          opError(op, ErrorKind::InvalidArgument,
                  "tx.grad cannot be interpreted: run --tx-autodiff first");
        })
        .Default([&](Operation *) {
          opError(op, ErrorKind::Unsupported, "op not supported by the tx interpreter");
        });
  }

  double attrValue(Operation *op, Attribute a) {
    if (auto f = dyn_cast<FloatAttr>(a))
      return f.getValueAsDouble();
    if (auto i = dyn_cast<IntegerAttr>(a)) {
      if (i.getType().isInteger(1))
        return static_cast<double>(i.getValue().getZExtValue() & 1);
      return static_cast<double>(i.getValue().getSExtValue());
    }
    opError(op, ErrorKind::Unsupported, "constant value is neither a float nor an integer");
  }

  /// tx.cast to an integer type: int <-> int wraps (i1 -> int is 0/1).
  double castInt(Operation *op, double x, DType from, DType to) {
    if (isFloat(from))
      opError(op, ErrorKind::InvalidArgument, "float to integer casts are not defined in tx");
    if (from == DType::I1)
      return x;
    return normInt(toI64(x), to);
  }

  static bool compare(tx::CmpPredicate p, double a, double b) {
    switch (p) {
    case tx::CmpPredicate::eq: return a == b;
    case tx::CmpPredicate::ne: return a != b; // true for NaN
    case tx::CmpPredicate::lt: return a < b;
    case tx::CmpPredicate::le: return a <= b;
    case tx::CmpPredicate::gt: return a > b;
    case tx::CmpPredicate::ge: return a >= b;
    }
    return false;
  }

  /// Evaluates f(operand values) per element of the result with tx broadcasting.
  template <typename F> void elementwise(Operation *op, F &&f) {
    RefTensor r = resultTensor(op);
    std::vector<const RefTensor *> ins;
    std::vector<std::vector<int64_t>> strides;
    for (Value v : op->getOperands()) {
      const RefTensor &in = get(op, v);
      ins.push_back(&in);
      strides.push_back(broadcastStrides(op, in.shape, r.shape));
    }
    std::vector<double> args(ins.size());
    forEachIndex(r.shape, [&](int64_t flat, const std::vector<int64_t> &idx) {
      for (size_t k = 0; k < ins.size(); ++k) {
        int64_t off = 0;
        for (size_t d = 0; d < idx.size(); ++d)
          off += idx[d] * strides[k][d];
        args[k] = ins[k]->data[static_cast<size_t>(off)];
      }
      r.data[static_cast<size_t>(flat)] = f(args.data());
    });
    set(op, 0, std::move(r));
  }

  template <typename F, typename G> void binary(Operation *op, F &&floatOp, G &&intOp) {
    DType t = elemType(op, op->getResult(0).getType());
    if (isFloat(t))
      elementwise(op, [&](const double *x) { return floatOp(x[0], x[1]); });
    else
      elementwise(op, [&](const double *x) { return intOp(x[0], x[1], t); });
  }

  /// Strides that read `in` at an index of `out` (0 along broadcast dimensions).
  std::vector<int64_t> broadcastStrides(Operation *op, const Shape &in, const Shape &out) {
    std::vector<int64_t> st(out.size(), 0);
    if (in.empty())
      return st;
    if (in.size() != out.size())
      opError(
          op, ErrorKind::InvalidArgument,
          fmt::format("operand shape {} does not broadcast to {}", shapeStr(in), shapeStr(out)));
    std::vector<int64_t> rs = rowMajorStrides(in);
    for (size_t d = 0; d < in.size(); ++d) {
      if (in[d] == out[d])
        st[d] = rs[d];
      else if (in[d] == 1)
        st[d] = 0;
      else
        opError(
            op, ErrorKind::InvalidArgument,
            fmt::format("operand shape {} does not broadcast to {}", shapeStr(in), shapeStr(out)));
    }
    return st;
  }

  void matmul(tx::MatmulOp o) {
    Operation *op = o;
    const RefTensor &a = get(op, o.getLhs()), &b = get(op, o.getRhs());
    bool ta = o.getTransposeLhs(), tb = o.getTransposeRhs();
    int64_t m = ta ? a.shape[1] : a.shape[0], ka = ta ? a.shape[0] : a.shape[1];
    int64_t kb = tb ? b.shape[1] : b.shape[0], n = tb ? b.shape[0] : b.shape[1];
    if (ka != kb)
      opError(op, ErrorKind::InvalidArgument,
              fmt::format("contraction sizes differ: {} vs {}", ka, kb));
    RefTensor r = resultTensor(op);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        Sum s;
        for (int64_t p = 0; p < ka; ++p)
          s.add((ta ? a.at(p, i) : a.at(i, p)) * (tb ? b.at(j, p) : b.at(p, j)));
        r.at(i, j) = s.value();
      }
    set(op, 0, std::move(r));
  }

  enum class Reduce { Sum, Max, Mean, LogSumExp };

  void reduce(Operation *op, std::optional<int64_t> axis, Reduce kind) {
    const RefTensor &in = get(op, op->getOperand(0));
    RefTensor r = resultTensor(op);
    std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
    // The elements reduced into each result element: all of `in`, or a line along axis.
    int64_t len = axis ? in.shape[static_cast<size_t>(*axis)] : in.numel();
    int64_t step = axis ? inStrides[static_cast<size_t>(*axis)] : 1;
    bool isInt = !isFloat(in.dtype);
    std::vector<double> line(static_cast<size_t>(len));
    auto reduceLine = [&]() -> double {
      switch (kind) {
      case Reduce::Sum:
      case Reduce::Mean: {
        if (isInt) {
          double acc = 0.0;
          for (double x : line)
            acc = wrapAdd(acc, x, in.dtype);
          return acc;
        }
        Sum s;
        for (double x : line)
          s.add(x);
        return kind == Reduce::Mean ? s.value() / static_cast<double>(len) : s.value();
      }
      case Reduce::Max: {
        double m = isInt ? (in.dtype == DType::I32 ? double(std::numeric_limits<int32_t>::min())
                                                   : double(std::numeric_limits<int64_t>::min()))
                         : -kInf;
        for (double x : line)
          m = isInt ? std::max(m, x) : maxNaN(m, x);
        return m;
      }
      case Reduce::LogSumExp: return logSumExp(line);
      }
      return kNaN;
    };
    forEachIndex(r.shape, [&](int64_t flat, const std::vector<int64_t> &idx) {
      int64_t base = 0;
      if (axis)
        for (size_t d = 0; d < idx.size(); ++d)
          base += idx[d] * inStrides[d];
      for (int64_t e = 0; e < len; ++e)
        line[static_cast<size_t>(e)] = in.data[static_cast<size_t>(base + e * step)];
      r.data[static_cast<size_t>(flat)] = reduceLine();
    });
    set(op, 0, std::move(r));
  }

  void gather(tx::GatherOp o) {
    Operation *op = o;
    const RefTensor &src = get(op, o.getSource()), &index = get(op, o.getIndex());
    size_t axis = static_cast<size_t>(o.getAxis());
    RefTensor r = resultTensor(op);
    std::vector<int64_t> ss = rowMajorStrides(src.shape);
    forEachIndex(r.shape, [&](int64_t flat, const std::vector<int64_t> &idx) {
      int64_t k = toI64(index.data[static_cast<size_t>(flat)]);
      if (k < 0 || k >= src.shape[axis]) {
        r.data[static_cast<size_t>(flat)] = 0.0; // out of range picks 0
        return;
      }
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        off += (d == axis ? k : idx[d]) * ss[d];
      r.data[static_cast<size_t>(flat)] = src.data[static_cast<size_t>(off)];
    });
    set(op, 0, std::move(r));
  }

  //===--------------------------------------------------------------------===//
  // Fused ops
  //===--------------------------------------------------------------------===//

  /// A fused body compiled to a flat instruction list over a register file. Registers
  /// 0 and 1 are acc and col, then one per side, then one per op result.
  struct ScalarCode {
    struct Inst {
      Operation *op;
      int kind; ///< which evaluation rule (see exec)
      int a = -1, b = -1, c = -1;
      DType in = DType::F32; ///< operand type (integer reinterpretations)
      DType out = DType::F32;
      int pred = 0;
      double value = 0.0;
      int dst = -1;
    };
    std::vector<Inst> insts;
    std::vector<int> yields;
    int numRegs = 0;
  };

  enum InstKind {
    kConst,
    kAddF,
    kSubF,
    kMulF,
    kDivF,
    kMaxF,
    kMinF,
    kMaxNumF,
    kMinNumF,
    kNegF,
    kAddI,
    kSubI,
    kMulI,
    kMaxSI,
    kMinSI,
    kMaxUI,
    kMinUI,
    kCmpF,
    kCmpI,
    kSelect,
    kCopy,
    kSIToFP,
    kUIToFP,
    kExtSI,
    kExtUI,
    kTruncI,
    kExp,
    kLog,
    kTanh,
    kExpm1,
    kLog1p,
    kAbsF
  };

  ScalarCode compileBody(Operation *fused, Block &blk) {
    ScalarCode code;
    llvm::DenseMap<Value, int> reg;
    for (BlockArgument a : blk.getArguments())
      reg[a] = code.numRegs++;
    auto r = [&](Operation *op, unsigned i) {
      auto it = reg.find(op->getOperand(i));
      if (it == reg.end())
        opError(op, ErrorKind::InvalidArgument, "operand defined outside the fused body");
      return it->second;
    };
    for (Operation &inner : blk) {
      Operation *op = &inner;
      if (auto y = dyn_cast<tx::YieldOp>(op)) {
        for (unsigned i = 0; i < op->getNumOperands(); ++i)
          code.yields.push_back(r(op, i));
        break;
      }
      if (op->getNumResults() != 1)
        opError(op, ErrorKind::Unsupported, "fused body ops must have one result");
      ScalarCode::Inst in;
      in.op = op;
      in.out = elemType(op, op->getResult(0).getType());
      if (op->getNumOperands() > 0)
        in.in = elemType(op, op->getOperand(0).getType());
      unsigned nops = op->getNumOperands();
      if (nops > 0)
        in.a = r(op, 0);
      if (nops > 1)
        in.b = r(op, 1);
      if (nops > 2)
        in.c = r(op, 2);
      in.kind =
          llvm::TypeSwitch<Operation *, int>(op)
              .Case<arith::ConstantOp>([&](arith::ConstantOp c) {
                in.value = attrValue(op, c.getValue());
                return kConst;
              })
              .Case<arith::AddFOp>([](auto) { return kAddF; })
              .Case<arith::SubFOp>([](auto) { return kSubF; })
              .Case<arith::MulFOp>([](auto) { return kMulF; })
              .Case<arith::DivFOp>([](auto) { return kDivF; })
              .Case<arith::MaximumFOp>([](auto) { return kMaxF; })
              .Case<arith::MinimumFOp>([](auto) { return kMinF; })
              .Case<arith::MaxNumFOp>([](auto) { return kMaxNumF; })
              .Case<arith::MinNumFOp>([](auto) { return kMinNumF; })
              .Case<arith::NegFOp>([](auto) { return kNegF; })
              .Case<arith::AddIOp>([](auto) { return kAddI; })
              .Case<arith::SubIOp>([](auto) { return kSubI; })
              .Case<arith::MulIOp>([](auto) { return kMulI; })
              .Case<arith::MaxSIOp>([](auto) { return kMaxSI; })
              .Case<arith::MinSIOp>([](auto) { return kMinSI; })
              .Case<arith::MaxUIOp>([](auto) { return kMaxUI; })
              .Case<arith::MinUIOp>([](auto) { return kMinUI; })
              .Case<arith::CmpFOp>([&](arith::CmpFOp c) {
                in.pred = static_cast<int>(c.getPredicate());
                return kCmpF;
              })
              .Case<arith::CmpIOp>([&](arith::CmpIOp c) {
                in.pred = static_cast<int>(c.getPredicate());
                return kCmpI;
              })
              .Case<arith::SelectOp>([](auto) { return kSelect; })
              .Case<arith::ExtFOp, arith::TruncFOp>([](auto) { return kCopy; }) // exact in fp64
              .Case<arith::SIToFPOp>([](auto) { return kSIToFP; })
              .Case<arith::UIToFPOp>([](auto) { return kUIToFP; })
              .Case<arith::ExtSIOp>([](auto) { return kExtSI; })
              .Case<arith::ExtUIOp>([](auto) { return kExtUI; })
              .Case<arith::TruncIOp>([](auto) { return kTruncI; })
              .Case<math::ExpOp>([](auto) { return kExp; })
              .Case<math::LogOp>([](auto) { return kLog; })
              .Case<math::TanhOp>([](auto) { return kTanh; })
              .Case<math::ExpM1Op>([](auto) { return kExpm1; })
              .Case<math::Log1pOp>([](auto) { return kLog1p; })
              .Case<math::AbsFOp>([](auto) { return kAbsF; })
              .Default([&](Operation *) -> int {
                opError(op, ErrorKind::Unsupported,
                        fmt::format(
                            "op not supported in a fused body by the tx interpreter (inside '{}')",
                            fused->getName().getStringRef().str()));
              });
      in.dst = code.numRegs++;
      reg[op->getResult(0)] = in.dst;
      code.insts.push_back(in);
    }
    return code;
  }

  static bool cmpF(int pred, double a, double b) {
    bool unord = std::isnan(a) || std::isnan(b);
    switch (static_cast<arith::CmpFPredicate>(pred)) {
    case arith::CmpFPredicate::AlwaysFalse: return false;
    case arith::CmpFPredicate::OEQ: return !unord && a == b;
    case arith::CmpFPredicate::OGT: return !unord && a > b;
    case arith::CmpFPredicate::OGE: return !unord && a >= b;
    case arith::CmpFPredicate::OLT: return !unord && a < b;
    case arith::CmpFPredicate::OLE: return !unord && a <= b;
    case arith::CmpFPredicate::ONE: return !unord && a != b;
    case arith::CmpFPredicate::ORD: return !unord;
    case arith::CmpFPredicate::UEQ: return unord || a == b;
    case arith::CmpFPredicate::UGT: return unord || a > b;
    case arith::CmpFPredicate::UGE: return unord || a >= b;
    case arith::CmpFPredicate::ULT: return unord || a < b;
    case arith::CmpFPredicate::ULE: return unord || a <= b;
    case arith::CmpFPredicate::UNE: return unord || a != b;
    case arith::CmpFPredicate::UNO: return unord;
    case arith::CmpFPredicate::AlwaysTrue: return true;
    }
    return false;
  }

  static bool cmpI(int pred, double a, double b, DType t) {
    int64_t sa = asSigned(a, t), sb = asSigned(b, t);
    uint64_t ua = asUnsigned(a, t), ub = asUnsigned(b, t);
    switch (static_cast<arith::CmpIPredicate>(pred)) {
    case arith::CmpIPredicate::eq: return ua == ub;
    case arith::CmpIPredicate::ne: return ua != ub;
    case arith::CmpIPredicate::slt: return sa < sb;
    case arith::CmpIPredicate::sle: return sa <= sb;
    case arith::CmpIPredicate::sgt: return sa > sb;
    case arith::CmpIPredicate::sge: return sa >= sb;
    case arith::CmpIPredicate::ult: return ua < ub;
    case arith::CmpIPredicate::ule: return ua <= ub;
    case arith::CmpIPredicate::ugt: return ua > ub;
    case arith::CmpIPredicate::uge: return ua >= ub;
    }
    return false;
  }

  static void exec(const ScalarCode &code, std::vector<double> &regs) {
    for (const ScalarCode::Inst &i : code.insts) {
      double a = i.a >= 0 ? regs[static_cast<size_t>(i.a)] : 0.0;
      double b = i.b >= 0 ? regs[static_cast<size_t>(i.b)] : 0.0;
      double v = 0.0;
      switch (i.kind) {
      case kConst: v = i.value; break;
      case kAddF: v = a + b; break;
      case kSubF: v = a - b; break;
      case kMulF: v = a * b; break;
      case kDivF: v = a / b; break;
      case kMaxF: v = maxNaN(a, b); break;
      case kMinF: v = minNaN(a, b); break;
      case kMaxNumF: v = std::fmax(a, b); break;
      case kMinNumF: v = std::fmin(a, b); break;
      case kNegF: v = -a; break;
      case kAddI: v = wrapAdd(a, b, i.out); break;
      case kSubI: v = wrapSub(a, b, i.out); break;
      case kMulI: v = wrapMul(a, b, i.out); break;
      case kMaxSI: v = asSigned(a, i.in) >= asSigned(b, i.in) ? a : b; break;
      case kMinSI: v = asSigned(a, i.in) <= asSigned(b, i.in) ? a : b; break;
      case kMaxUI: v = asUnsigned(a, i.in) >= asUnsigned(b, i.in) ? a : b; break;
      case kMinUI: v = asUnsigned(a, i.in) <= asUnsigned(b, i.in) ? a : b; break;
      case kCmpF: v = cmpF(i.pred, a, b) ? 1.0 : 0.0; break;
      case kCmpI: v = cmpI(i.pred, a, b, i.in) ? 1.0 : 0.0; break;
      case kSelect: v = a != 0.0 ? b : regs[static_cast<size_t>(i.c)]; break;
      case kCopy: v = a; break;
      case kSIToFP: v = static_cast<double>(asSigned(a, i.in)); break;
      case kUIToFP: v = static_cast<double>(asUnsigned(a, i.in)); break;
      case kExtSI: v = normInt(asSigned(a, i.in), i.out); break;
      case kExtUI: v = normInt(static_cast<int64_t>(asUnsigned(a, i.in)), i.out); break;
      case kTruncI: v = normInt(toI64(a), i.out); break;
      case kExp: v = std::exp(a); break;
      case kLog: v = std::log(a); break;
      case kTanh: v = std::tanh(a); break;
      case kExpm1: v = std::expm1(a); break;
      case kLog1p: v = std::log1p(a); break;
      case kAbsF: v = std::fabs(a); break;
      }
      regs[static_cast<size_t>(i.dst)] = v;
    }
  }

  /// How the body reads side operand `s` at element (row, col).
  struct SideReader {
    const RefTensor *t;
    enum { Row, Col, Once } kind;
    double at(int64_t row, int64_t col) const {
      switch (kind) {
      case Row: return t->data[static_cast<size_t>(row)];
      case Col: return t->data[static_cast<size_t>(col)];
      case Once: return t->data[0];
      }
      return 0.0;
    }
  };

  /// Shared part of the fused ops: calls f(row, col, yields) for every element.
  template <typename F>
  void forEachFusedElement(Operation *op, Value lhsV, Value rhsV, ValueRange sides, Block &blk,
                           F &&f) {
    const RefTensor &lhs = get(op, lhsV), &rhs = get(op, rhsV);
    int64_t rows = lhs.shape[0], cols = rhs.shape[0], k = lhs.shape[1];
    if (rhs.shape[1] != k)
      opError(
          op, ErrorKind::InvalidArgument,
          fmt::format("lhs {} and rhs {} differ in K", shapeStr(lhs.shape), shapeStr(rhs.shape)));
    std::vector<SideReader> readers;
    for (Value s : sides) {
      const RefTensor &t = get(op, s);
      SideReader r{&t, SideReader::Once};
      if (t.rank() == 2 && t.shape[0] == rows && t.shape[1] == 1)
        r.kind = SideReader::Row;
      else if (t.rank() == 2 && t.shape[0] == 1 && t.shape[1] == cols)
        r.kind = SideReader::Col;
      else if (t.rank() != 0)
        opError(op, ErrorKind::InvalidArgument,
                fmt::format("side operand {} is none of row [{}, 1], column [1, {}] or rank 0",
                            shapeStr(t.shape), rows, cols));
      readers.push_back(r);
    }
    ScalarCode code = compileBody(op, blk);
    std::vector<double> regs(static_cast<size_t>(code.numRegs), 0.0);
    std::vector<double> yields(code.yields.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        Sum acc;
        for (int64_t p = 0; p < k; ++p)
          acc.add(lhs.at(i, p) * rhs.at(j, p));
        regs[0] = acc.value();
        regs[1] = static_cast<double>(j);
        for (size_t s = 0; s < readers.size(); ++s)
          regs[2 + s] = readers[s].at(i, j);
        exec(code, regs);
        for (size_t y = 0; y < yields.size(); ++y)
          yields[y] = regs[static_cast<size_t>(code.yields[y])];
        f(i, j, yields);
      }
  }

  void gemmReduce(tx::GemmReduceOp o) {
    Operation *op = o;
    std::vector<tx::ReduceKind> kinds;
    for (Attribute a : o.getKinds()) {
      auto k = tx::parseReduceKind(cast<StringAttr>(a).getValue());
      if (!k)
        opError(op, ErrorKind::InvalidArgument, "unknown reduction kind");
      kinds.push_back(*k);
    }
    int64_t rows = get(op, o.getLhs()).shape[0];
    int64_t cols = get(op, o.getRhs()).shape[0];
    // values[k][row * cols + col]: the yields, reduced per row below.
    std::vector<std::vector<double>> values(kinds.size(),
                                            std::vector<double>(static_cast<size_t>(rows * cols)));
    forEachFusedElement(op, o.getLhs(), o.getRhs(), o.getSides(), o.getBody().front(),
                        [&](int64_t i, int64_t j, const std::vector<double> &y) {
                          if (y.size() != kinds.size())
                            opError(op, ErrorKind::InvalidArgument,
                                    "the body yields a different number of values than kinds");
                          for (size_t k = 0; k < kinds.size(); ++k)
                            values[k][static_cast<size_t>(i * cols + j)] = y[k];
                        });
    for (size_t k = 0; k < kinds.size(); ++k) {
      RefTensor r = resultTensor(op, static_cast<unsigned>(k));
      std::vector<double> line(static_cast<size_t>(cols));
      for (int64_t i = 0; i < rows; ++i) {
        std::copy(values[k].begin() + i * cols, values[k].begin() + (i + 1) * cols, line.begin());
        double v = 0.0;
        switch (kinds[k]) {
        case tx::ReduceKind::sum: {
          Sum s;
          for (double x : line)
            s.add(x);
          v = s.value();
          break;
        }
        case tx::ReduceKind::max:
          v = -kInf;
          for (double x : line)
            v = maxNaN(v, x);
          break;
        case tx::ReduceKind::logsumexp: v = logSumExp(line); break;
        }
        r.data[static_cast<size_t>(i)] = v;
      }
      set(op, static_cast<unsigned>(k), std::move(r));
    }
  }

  void gemmGrad(tx::GemmGradOp o) {
    Operation *op = o;
    const RefTensor &lhs = get(op, o.getLhs()), &rhs = get(op, o.getRhs());
    int64_t rows = lhs.shape[0], cols = rhs.shape[0], k = lhs.shape[1];
    std::vector<double> dz(static_cast<size_t>(rows * cols));
    forEachFusedElement(op, o.getLhs(), o.getRhs(), o.getSides(), o.getBody().front(),
                        [&](int64_t i, int64_t j, const std::vector<double> &y) {
                          if (y.size() != 1)
                            opError(op, ErrorKind::InvalidArgument,
                                    "the body must yield one value");
                          dz[static_cast<size_t>(i * cols + j)] = y[0];
                        });
    RefTensor dl = resultTensor(op, 0), dr = resultTensor(op, 1);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t p = 0; p < k; ++p) {
        Sum s;
        for (int64_t j = 0; j < cols; ++j)
          s.add(dz[static_cast<size_t>(i * cols + j)] * rhs.at(j, p));
        dl.at(i, p) = s.value();
      }
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t p = 0; p < k; ++p) {
        Sum s;
        for (int64_t i = 0; i < rows; ++i)
          s.add(dz[static_cast<size_t>(i * cols + j)] * lhs.at(i, p));
        dr.at(j, p) = s.value();
      }
    set(op, 0, std::move(dl));
    set(op, 1, std::move(dr));
  }

  func::FuncOp func_;
  std::optional<int64_t> n_;
  std::string nFrom_;
  llvm::DenseMap<Value, RefTensor> values_;
};

} // namespace

std::vector<RefTensor> interpretTx(func::FuncOp func, const std::vector<RefTensor> &inputs) {
  LCEJIT_CHECK_ARG(func && !func.getBody().empty(), "interpretTx: no function body to run");
  Interpreter interp(func);
  return interp.run(inputs);
}

std::vector<RefTensor> interpretTx(ModuleOp module, const std::vector<RefTensor> &inputs,
                                   const std::string &name) {
  func::FuncOp found;
  int count = 0;
  for (auto f : module.getOps<func::FuncOp>()) {
    ++count;
    if (name.empty() || f.getSymName() == name)
      found = f;
  }
  LCEJIT_CHECK_ARG(found, "interpretTx: the module has no function named '{}'", name);
  LCEJIT_CHECK_ARG(!name.empty() || count == 1,
                   "interpretTx: the module has {} functions; name the one to run", count);
  return interpretTx(found, inputs);
}

} // namespace lcejit::ref
