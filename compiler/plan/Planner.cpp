//===- Planner.cpp - Fused tx function -> Program -------------------------===//
//
// See [Note: levels] in Planner.h and [Note: the lean schedule] in Program.h.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/Planner.h"
#include "compiler/plan/Materialize.h"
#include "compiler/plan/SchedulePolicy.h"
#include "compiler/plan/TargetColumn.h"
#include "compiler/dialect/TxDialect.h"

#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

using namespace mlir;
namespace tx = lcejit::tx;

namespace lcejit::plan {
namespace {

/// The recompute's backward decision line starts with kRecomputeDecision; the
/// materialized schedule's line replaces it.
constexpr std::string_view kRecomputeDecision = "backward: vocab-chunked recompute";

DType dtypeOf(Type t) {
  if (t.isBF16()) return DType::BF16;
  if (t.isF16()) return DType::F16;
  if (t.isF32()) return DType::F32;
  if (t.isF64()) return DType::F64;
  if (t.isInteger(1)) return DType::I1;
  if (t.isInteger(32)) return DType::I32;
  return DType::I64;
}

/// Type a scalar instruction computes in: all floats are f32 on the device.
DType computeType(Type t) {
  DType d = dtypeOf(t);
  return isFloat(d) ? DType::F32 : d;
}

RankedTensorType ttype(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isScalarShape(ArrayRef<int64_t> s) {
  return s.empty() || llvm::all_of(s, [](int64_t d) { return d == 1; });
}

bool isRowShape(ArrayRef<int64_t> s) {
  if (s.empty() || !ShapedType::isDynamic(s[0]))
    return false;
  return llvm::all_of(s.drop_front(), [](int64_t d) { return d == 1; });
}

/// Builds one ScalarFunc and the operands its arguments read.
class FuncBuilder {
public:
  ScalarFunc func;
  std::vector<Operand> args;

  int32_t arg(const Operand &o, DType type) {
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i] == o)
        return argInst_[i];
    ScalarInst inst;
    inst.op = ScalarOp::Arg;
    inst.type = type;
    inst.argIndex = static_cast<int32_t>(args.size());
    args.push_back(o);
    argInst_.push_back(push(inst));
    return argInst_.back();
  }

  int32_t constF(double v) {
    ScalarInst i;
    i.op = ScalarOp::Const;
    i.type = DType::F32;
    i.fValue = v;
    return push(i);
  }

  int32_t constI(int64_t v, DType t) {
    ScalarInst i;
    i.op = ScalarOp::Const;
    i.type = t;
    i.iValue = v;
    return push(i);
  }

  int32_t op(ScalarOp o, DType type, int32_t a = -1, int32_t b = -1, int32_t c = -1) {
    ScalarInst i;
    i.op = o;
    i.type = type;
    i.operands[0] = a;
    i.operands[1] = b;
    i.operands[2] = c;
    return push(i);
  }

  DType typeOf(int32_t inst) const { return func.insts[static_cast<size_t>(inst)].type; }

  int32_t result(int32_t inst) {
    func.results.push_back(inst);
    return static_cast<int32_t>(func.results.size()) - 1;
  }

private:
  int32_t push(const ScalarInst &i) {
    func.insts.push_back(i);
    return static_cast<int32_t>(func.insts.size()) - 1;
  }
  std::vector<int32_t> argInst_;
};

ScalarOp cmpOp(tx::CmpPredicate p) {
  switch (p) {
  case tx::CmpPredicate::eq: return ScalarOp::CmpEq;
  case tx::CmpPredicate::ne: return ScalarOp::CmpNe;
  case tx::CmpPredicate::lt: return ScalarOp::CmpLt;
  case tx::CmpPredicate::le: return ScalarOp::CmpLe;
  case tx::CmpPredicate::gt: return ScalarOp::CmpGt;
  case tx::CmpPredicate::ge: return ScalarOp::CmpGe;
  }
  return ScalarOp::CmpEq;
}

class Planner {
public:
  Planner(func::FuncOp f, const PlanOptions &o) : func_(f), opt_(o) {}

  std::optional<Program> run(std::string *error) {
    if (!analyze() || !build()) {
      if (error)
        *error = err_;
      return std::nullopt;
    }
    return std::move(prog_);
  }

private:
  //===--------------------------------------------------------------------===//
  // Analysis
  //===--------------------------------------------------------------------===//

  bool fail(Operation *op, const std::string &msg) {
    std::string where;
    if (op) {
      std::string s;
      llvm::raw_string_ostream os(s);
      op->getLoc().print(os);
      where = fmt::format("'{}' at {}: ", op->getName().getStringRef().str(), os.str());
    }
    err_ = fmt::format("cannot plan @{}: {}{}", func_.getSymName().str(), where, msg);
    return false;
  }

  std::string argName(unsigned i) {
    if (auto n = func_.getArgAttrOfType<StringAttr>(i, "tx.name"))
      return n.str();
    return fmt::format("arg{}", i);
  }

  std::string resultName(unsigned i) {
    if (auto n = func_.getResultAttrOfType<StringAttr>(i, "tx.name"))
      return n.str();
    return fmt::format("result{}", i);
  }

  static std::string shapeText(RankedTensorType t) {
    std::vector<std::string> parts;
    for (int64_t d : t.getShape())
      parts.push_back(ShapedType::isDynamic(d) ? "N" : std::to_string(d));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }

  static std::vector<int64_t> specShape(RankedTensorType t) {
    std::vector<int64_t> s;
    for (int64_t d : t.getShape())
      s.push_back(ShapedType::isDynamic(d) ? -1 : d);
    return s;
  }

  bool isGlobalReduce(Operation *op) {
    if (!isa<tx::ReduceSumOp, tx::MeanOp, tx::ReduceMaxOp>(op))
      return false;
    Value in = op->getOperand(0);
    auto s = ttype(in).getShape();
    std::optional<int64_t> axis;
    if (auto a = op->getAttrOfType<IntegerAttr>("axis"))
      axis = a.getInt();
    if (axis)
      return ShapedType::isDynamic(s[static_cast<size_t>(*axis)]);
    return llvm::any_of(s, [](int64_t d) { return ShapedType::isDynamic(d); });
  }

  bool analyze() {
    Block &body = func_.getBody().front();
    for (BlockArgument a : body.getArguments()) {
      auto t = dyn_cast<RankedTensorType>(a.getType());
      if (!t)
        return fail(nullptr, fmt::format("argument {} is not a ranked tensor", a.getArgNumber()));
      prog_.inputs.push_back(TensorSpec{argName(a.getArgNumber()), dtypeOf(t.getElementType()),
                                        specShape(t)});
      level_[a] = 0;
    }
    for (Operation &op : body.without_terminator()) {
      if (failed(visit(&op)))
        return false;
    }
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      auto t = ttype(v);
      DType dt = dtypeOf(t.getElementType());
      if (i < opt_.outputTypes.size() && opt_.outputTypes[i])
        dt = *opt_.outputTypes[i];
      prog_.outputs.push_back(TensorSpec{resultName(static_cast<unsigned>(i)), dt, specShape(t)});
    }
    return true;
  }

  LogicalResult visit(Operation *op) {
    auto maxLevel = [&](ValueRange vs) {
      int64_t l = 0;
      for (Value v : vs)
        l = std::max(l, level_.lookup(v));
      return l;
    };
    if (auto g = dyn_cast<tx::GemmReduceOp>(op)) {
      if (!g.getLhs().getDefiningOp() && !g.getRhs().getDefiningOp()) {
        int64_t l = maxLevel(g.getSides());
        gemmLevel_[op] = l;
        for (Value r : g.getResults())
          level_[r] = l + 1;
        return success();
      }
      fail(op, "the operands of a fused GEMM must be function arguments");
      return failure();
    }
    if (auto g = dyn_cast<tx::GemmGradOp>(op)) {
      if (g.getLhs().getDefiningOp() || g.getRhs().getDefiningOp()) {
        fail(op, "the operands of a fused GEMM must be function arguments");
        return failure();
      }
      int64_t l = maxLevel(g.getSides());
      gemmLevel_[op] = l;
      level_[g.getDLhs()] = l + 1;
      level_[g.getDRhs()] = l + 1;
      return success();
    }
    if (auto c = dyn_cast<tx::CastOp>(op); c && isa_and_nonnull<tx::GemmGradOp>(c.getInput().getDefiningOp())) {
      level_[c.getResult()] = level_.lookup(c.getInput());
      return success();
    }
    if (isa<tx::MatmulOp>(op)) {
      fail(op, "this matmul was not fused (its [N, C] result has a consumer the fuser does not "
               "handle, or its layout is not lhs · rhsᵀ); run --tx-fuse and see its rules");
      return failure();
    }
    for (Value r : op->getResults()) {
      auto s = ttype(r).getShape();
      if (!isRowShape(s) && !isScalarShape(s)) {
        fail(op, fmt::format("result shape {} is neither a row [N, 1] nor a scalar; only "
                             "fused ops may produce larger tensors",
                             shapeText(ttype(r))));
        return failure();
      }
    }
    bool known = isa<tx::ConstantOp, tx::DimOp, tx::AddOp, tx::SubOp, tx::MulOp, tx::DivOp,
                     tx::MaxOp, tx::NegOp, tx::ExpOp, tx::LogOp, tx::TanhOp, tx::CmpOp,
                     tx::SelectOp, tx::CastOp, tx::BroadcastOp, tx::ReduceSumOp, tx::MeanOp,
                     tx::ReduceMaxOp, tx::LogSumExpOp>(op);
    if (!known) {
      fail(op, "op not supported outside fused GEMMs");
      return failure();
    }
    if (isGlobalReduce(op)) {
      if (isa<tx::ReduceMaxOp>(op)) {
        fail(op, "a maximum over rows is not supported yet");
        return failure();
      }
      level_[op->getResult(0)] = level_.lookup(op->getOperand(0)) + 1;
      return success();
    }
    level_[op->getResult(0)] = maxLevel(op->getOperands());
    return success();
  }

  //===--------------------------------------------------------------------===//
  // Building
  //===--------------------------------------------------------------------===//

  BufferRef addWorkspace(const std::string &name, int64_t perRow, int64_t fixed,
                         BufferInit init = BufferInit::None) {
    prog_.workspace.push_back(BufferSpec{name, perRow, fixed, init});
    return BufferRef{Space::Workspace, static_cast<int32_t>(prog_.workspace.size()) - 1};
  }

  int32_t newSlot() { return prog_.numScalarSlots++; }

  /// Uses of `v` that need it stored: a later level, a GEMM side, or a function result.
  bool needsStore(Value v) {
    if (isa<BlockArgument>(v))
      return false;
    Operation *def = v.getDefiningOp();
    if (isa<tx::ConstantOp, tx::DimOp>(def))
      return false;
    int64_t home = level_.lookup(v);
    for (OpOperand &use : v.getUses()) {
      Operation *u = use.getOwner();
      if (isa<tx::GemmReduceOp, tx::GemmGradOp>(u))
        return true;
      if (isa<func::ReturnOp>(u))
        continue; // outputs are written by their own sink
      if (isGlobalReduce(u))
        continue; // reduced inside the kernel of its level
      if (level_.lookup(u->getResult(0)) != home)
        return true;
    }
    return false;
  }

  struct PartialsRef {
    int32_t kernel;
    int32_t slot;
    ReduceKind kind;
    BufferRef buf;
    int32_t result = -1; ///< the GemmReduce epilogue result it reduces
  };
  /// The row operand reading a GemmReduce result (or one part of its logsumexp pair).
  static Operand partialsOperand(const PartialsRef &p, Operand::Component c) {
    Operand o;
    o.kind = Operand::Kind::Partials;
    o.buf = p.buf;
    o.slot = p.slot;
    o.reduce = static_cast<int32_t>(p.kind);
    o.partialsOf = p.kernel;
    o.dtype = DType::F32;
    o.component = c;
    return o;
  }

  /// Row kernel under construction for one level.
  struct RowBuild {
    int64_t level = 0;
    FuncBuilder fb;
    llvm::DenseMap<Value, int32_t> inst;
    std::vector<RowKernel::Sink> sinks;
  };

  int32_t rowValue(RowBuild &rb, Value v) {
    if (auto it = rb.inst.find(v); it != rb.inst.end())
      return it->second;
    int32_t r = rowValueUncached(rb, v);
    rb.inst[v] = r;
    return r;
  }

  int32_t rowValueUncached(RowBuild &rb, Value v) {
    FuncBuilder &fb = rb.fb;
    auto t = ttype(v);
    DType ct = computeType(t.getElementType());
    DType dt = dtypeOf(t.getElementType());
    if (auto a = dyn_cast<BlockArgument>(v)) {
      BufferRef in{Space::Input, static_cast<int32_t>(a.getArgNumber())};
      Operand o;
      o.kind = isScalarShape(t.getShape()) ? Operand::Kind::Scalar : Operand::Kind::Row;
      o.buf = in;
      o.dtype = dt;
      return fb.arg(o, ct);
    }
    Operation *def = v.getDefiningOp();
    auto slotArg = [&](int32_t slot) {
      Operand o;
      o.kind = Operand::Kind::Scalar;
      o.slot = slot;
      o.dtype = DType::F64;
      return fb.arg(o, DType::F32);
    };
    auto castTo = [&](int32_t x, DType t) { return fb.typeOf(x) == t ? x : fb.op(ScalarOp::Cast, t, x); };
    auto globalValue = [&](const GlobalRef &g) {
      int32_t s = slotArg(g.slot);
      if (g.mean)
        s = fb.op(ScalarOp::Div, DType::F32, s,
                  fb.op(ScalarOp::Cast, DType::F32, fb.op(ScalarOp::RowCount, DType::I64)));
      return castTo(s, ct);
    };
    if (level_.lookup(v) < rb.level) {
      // Produced by an earlier level: it was stored there.
      if (auto it = rowBuffer_.find(v); it != rowBuffer_.end()) {
        Operand o;
        o.kind = Operand::Kind::Row;
        o.buf = it->second;
        o.dtype = dt == DType::I1 ? DType::I1 : ct;
        return fb.arg(o, ct);
      }
      if (auto it = scalarSlot_.find(v); it != scalarSlot_.end())
        return castTo(slotArg(it->second), ct);
      if (auto it = global_.find(v); it != global_.end())
        return globalValue(it->second);
      if (!isa<tx::ConstantOp, tx::DimOp>(def)) {
        fail(def, "internal: a value of an earlier level was not stored");
        return -1;
      }
    }
    if (isa<tx::GemmReduceOp>(def))
      return fb.arg(partialsOperand(partials_[v], Operand::Component::Value), DType::F32);
    if (isGlobalReduce(def))
      return globalValue(global_[v]);
    auto opnd = [&](unsigned i) { return rowValue(rb, def->getOperand(i)); };
    return llvm::TypeSwitch<Operation *, int32_t>(def)
        .Case<tx::ConstantOp>([&](tx::ConstantOp c) {
          if (auto f = dyn_cast<FloatAttr>(c.getValue()))
            return fb.constF(f.getValueAsDouble());
          return fb.constI(cast<IntegerAttr>(c.getValue()).getValue().getSExtValue(), ct);
        })
        .Case<tx::DimOp>([&](tx::DimOp d) {
          int64_t s = ttype(d.getInput()).getDimSize(static_cast<int64_t>(d.getAxis()));
          if (ShapedType::isDynamic(s))
            return fb.op(ScalarOp::RowCount, DType::I64);
          return fb.constI(s, DType::I64);
        })
        .Case<tx::AddOp>([&](auto) { return fb.op(ScalarOp::Add, ct, opnd(0), opnd(1)); })
        .Case<tx::SubOp>([&](tx::SubOp sub) {
          if (int32_t r = lseMinus(rb, sub); r >= 0)
            return r;
          return fb.op(ScalarOp::Sub, ct, opnd(0), opnd(1));
        })
        .Case<tx::MulOp>([&](auto) { return fb.op(ScalarOp::Mul, ct, opnd(0), opnd(1)); })
        .Case<tx::DivOp>([&](auto) { return fb.op(ScalarOp::Div, ct, opnd(0), opnd(1)); })
        .Case<tx::MaxOp>([&](auto) { return fb.op(ScalarOp::Max, ct, opnd(0), opnd(1)); })
        .Case<tx::NegOp>([&](auto) { return fb.op(ScalarOp::Neg, ct, opnd(0)); })
        .Case<tx::ExpOp>([&](auto) { return fb.op(ScalarOp::Exp, ct, opnd(0)); })
        .Case<tx::LogOp>([&](auto) { return fb.op(ScalarOp::Log, ct, opnd(0)); })
        .Case<tx::TanhOp>([&](auto) { return fb.op(ScalarOp::Tanh, ct, opnd(0)); })
        .Case<tx::CmpOp>([&](tx::CmpOp c) {
          return fb.op(cmpOp(c.getPredicate()), DType::I1, opnd(0), opnd(1));
        })
        .Case<tx::SelectOp>([&](auto) { return fb.op(ScalarOp::Select, ct, opnd(0), opnd(1), opnd(2)); })
        .Case<tx::CastOp>([&](auto) {
          int32_t x = opnd(0);
          return fb.typeOf(x) == ct ? x : fb.op(ScalarOp::Cast, ct, x);
        })
        // Reductions over size-1 dimensions and broadcasts are identities per row.
        .Case<tx::BroadcastOp, tx::ReduceSumOp, tx::MeanOp, tx::ReduceMaxOp, tx::LogSumExpOp>(
            [&](auto) { return opnd(0); })
        .Default([&](Operation *) { return -1; });
  }

  /// [Note: lse minus a logit] `logsumexp(x) − y` for a fused logsumexp is evaluated as
  /// `(m − y) + log1p(t)` from its partial pair (m = max, t = sum of exp(x − m) over the
  /// rest): when y is (close to) the maximum, as the target logit of a confident row is,
  /// m − y is exact and the result keeps full relative precision, where forming lse first
  /// and subtracting would cancel (the row loss of a peaked softmax). Returns -1 when the
  /// pattern does not apply.
  int32_t lseMinus(RowBuild &rb, tx::SubOp sub) {
    Value lhs = sub.getLhs();
    if (!isa_and_nonnull<tx::GemmReduceOp>(lhs.getDefiningOp()) || !partials_.count(lhs))
      return -1;
    const PartialsRef &p = partials_[lhs];
    if (p.kind != ReduceKind::LogSumExp || computeType(ttype(sub.getResult()).getElementType()) != DType::F32)
      return -1;
    FuncBuilder &fb = rb.fb;
    auto part = [&](Operand::Component c) { return fb.arg(partialsOperand(p, c), DType::F32); };
    int32_t y = rowValue(rb, sub.getRhs());
    if (y < 0 || fb.typeOf(y) != DType::F32)
      return -1;
    int32_t m = part(Operand::Component::Max);
    int32_t t = part(Operand::Component::RestSum);
    if (int32_t r = exactTargetLoss(rb, p, sub.getRhs(), m, t, y); r >= 0)
      return r;
    return fb.op(ScalarOp::Add, DType::F32, fb.op(ScalarOp::Sub, DType::F32, m, y),
                 fb.op(ScalarOp::Log1p, DType::F32, t));
  }

  /// [Note: the exact target logit] (Program.h): when y is the same forward's pick of the
  /// logsumexp's value v at a target column t (a sum of select(col == t, v, 0)), the row
  /// loss is log1p(exp(y − v_y)·S'), S' = expm1(m − y) + exp(m − y)·t, with v_y the value
  /// chain applied to A[r]·B[t_r] summed in f64 by a RowDotKernel. Returns -1 when the
  /// pattern does not apply (another pick, a value that reads per-column operands, or
  /// PlanOptions::exactTargetLogit off).
  int32_t exactTargetLoss(RowBuild &rb, const PartialsRef &lse, Value rhs, int32_t m, int32_t t,
                          int32_t y) {
    if (!opt_.exactTargetLogit || !isa_and_nonnull<tx::GemmReduceOp>(rhs.getDefiningOp()) ||
        !partials_.count(rhs))
      return -1;
    const PartialsRef &pick = partials_[rhs];
    if (pick.kernel != lse.kernel || pick.kind != ReduceKind::Sum || lse.result < 0 ||
        pick.result < 0)
      return -1;
    // Copies: rowDotFor adds a kernel, which moves prog_.kernels.
    const auto &F = std::get<GemmReduceKernel>(prog_.kernels[static_cast<size_t>(lse.kernel)].body);
    const ScalarFunc f = F.gemm.epilogue;
    const std::vector<Operand> args = F.gemm.args;
    auto inst = [&](int32_t i) -> const ScalarInst & { return f.insts[static_cast<size_t>(i)]; };
    const int32_t x = f.results[static_cast<size_t>(lse.result)];
    const ScalarInst &sel = inst(f.results[static_cast<size_t>(pick.result)]);
    const TargetColumn tc = findTargetColumn(f, args, [](const Operand &) { return true; });
    if (!tc.found() || sel.op != ScalarOp::Select)
      return -1;
    auto isZero = [&](int32_t i) {
      return inst(i).op == ScalarOp::Const && inst(i).type == DType::F32 && inst(i).fValue == 0.0;
    };
    auto isColIndex = [&](int32_t i) {
      if (inst(i).op == ScalarOp::Cast)
        i = inst(i).operands[0];
      return inst(i).op == ScalarOp::Arg &&
             args[static_cast<size_t>(inst(i).argIndex)].kind == Operand::Kind::ColIndex;
    };
    const ScalarInst &cond = inst(sel.operands[0]);
    const bool colVsT =
        (cond.operands[0] == tc.value && isColIndex(cond.operands[1])) ||
        (cond.operands[1] == tc.value && isColIndex(cond.operands[0]));
    const bool picks = (cond.op == ScalarOp::CmpEq && sel.operands[1] == x && isZero(sel.operands[2])) ||
                       (cond.op == ScalarOp::CmpNe && isZero(sel.operands[1]) && sel.operands[2] == x);
    if (!colVsT || !picks)
      return -1;
    // v's chain, read again per row: the accumulator becomes the RowDot's value, the column
    // index the target; row and scalar operands are the row kernel's own.
    const Operand target = args[static_cast<size_t>(tc.arg)];
    std::vector<bool> need(f.insts.size(), false); // the instructions v depends on
    need[static_cast<size_t>(x)] = true;
    for (int32_t i = x; i >= 0; --i)
      if (need[static_cast<size_t>(i)])
        for (int32_t o : inst(i).operands)
          if (o >= 0)
            need[static_cast<size_t>(o)] = true;
    for (int32_t i = 0; i <= x; ++i)
      if (need[static_cast<size_t>(i)] && inst(i).op == ScalarOp::Arg) {
        const Operand::Kind k = args[static_cast<size_t>(inst(i).argIndex)].kind;
        if (k != Operand::Kind::Acc && k != Operand::Kind::ColIndex &&
            k != Operand::Kind::Row && k != Operand::Kind::Scalar)
          return -1;
      }
    FuncBuilder &fb = rb.fb;
    Operand dotOp;
    dotOp.kind = Operand::Kind::Row;
    dotOp.buf = rowDotFor(lse.kernel, target);
    dotOp.dtype = DType::F32;
    Operand tOp;
    tOp.kind = Operand::Kind::Row;
    tOp.buf = target.buf;
    tOp.dtype = target.dtype;
    std::vector<int32_t> map(f.insts.size(), -1);
    for (int32_t i = 0; i <= x; ++i) {
      if (!need[static_cast<size_t>(i)])
        continue;
      const ScalarInst &in = inst(i);
      int32_t r = -1;
      if (in.op == ScalarOp::Arg) {
        const Operand &o = args[static_cast<size_t>(in.argIndex)];
        if (o.kind == Operand::Kind::Acc) {
          r = fb.arg(dotOp, DType::F32);
        } else if (o.kind == Operand::Kind::ColIndex) {
          r = fb.arg(tOp, tOp.dtype);
          if (fb.typeOf(r) != in.type)
            r = fb.op(ScalarOp::Cast, in.type, r);
        } else {
          r = fb.arg(o, in.type);
        }
      } else if (in.op == ScalarOp::Const) {
        r = in.type == DType::F32 ? fb.constF(in.fValue) : fb.constI(in.iValue, in.type);
      } else {
        int32_t ops[3] = {-1, -1, -1};
        for (int k = 0; k < 3; ++k)
          if (in.operands[k] >= 0)
            ops[k] = map[static_cast<size_t>(in.operands[k])];
        r = fb.op(in.op, in.type, ops[0], ops[1], ops[2]);
      }
      map[static_cast<size_t>(i)] = r;
    }
    const int32_t vy = map[static_cast<size_t>(x)];
    const int32_t d = fb.op(ScalarOp::Sub, DType::F32, m, y);
    const int32_t rest = fb.op(ScalarOp::Add, DType::F32, fb.op(ScalarOp::Expm1, DType::F32, d),
                               fb.op(ScalarOp::Mul, DType::F32,
                                     fb.op(ScalarOp::Exp, DType::F32, d), t));
    const int32_t shift = fb.op(ScalarOp::Exp, DType::F32, fb.op(ScalarOp::Sub, DType::F32, y, vy));
    const int32_t peaked =
        fb.op(ScalarOp::Log1p, DType::F32, fb.op(ScalarOp::Mul, DType::F32, shift, rest));
    // [Note: a far target]: a target more than kFarTarget below the row's maximum leaves
    // nothing to cancel (the loss is at least that large), and exp(m - y) would overflow
    // f32 beyond 88: there the loss is lse - v_y = (m - v_y) + log1p(t).
    const int32_t far = fb.op(ScalarOp::Add, DType::F32, fb.op(ScalarOp::Sub, DType::F32, m, vy),
                              fb.op(ScalarOp::Log1p, DType::F32, t));
    return fb.op(ScalarOp::Select, DType::F32,
                 fb.op(ScalarOp::CmpGt, DType::I1, d, fb.constF(kFarTarget)), far, peaked);
  }

  /// The RowDotKernel of GemmReduce `kernel` and target row operand `target` (one per
  /// pair), launched at this point of the steps (before the row kernel being built).
  BufferRef rowDotFor(int32_t kernel, const Operand &target) {
    for (const auto &[key, buf] : rowDots_)
      if (key.first == kernel && key.second == target.buf)
        return buf;
    const auto &g = std::get<GemmReduceKernel>(prog_.kernels[static_cast<size_t>(kernel)].body).gemm;
    RowDotKernel k;
    k.a = g.a;
    k.b = g.b;
    k.abType = g.abType;
    k.target = target.buf;
    k.targetType = target.dtype;
    k.k = g.k;
    k.cols = g.cols;
    k.out = addWorkspace(fmt::format("target_logit{}", rowDots_.size()), 4, 0);
    const BufferRef out = k.out;
    const int64_t depth = k.k;
    const std::string name = fmt::format("{}_zy{}", opt_.name, rowDots_.size());
    addKernel(name, std::move(k)); // (moves prog_.kernels: g is not used after this)
    rowDots_.push_back({{kernel, target.buf}, out});
    prog_.decisions.push_back(fmt::format(
        "loss: {} sums the target logit again in f64 (N*{} multiply-adds) for the row loss "
        "log1p(exp(z_y - v_y)*S'): on a peaked row the f32 GEMM's own z_y error would be a "
        "relative error of the loss ([Note: the exact target logit])",
        name, depth));
    return out;
  }

  /// Emits the row kernel of `level` if it has any sink.
  void buildRowKernel(int64_t level, Block &body, func::ReturnOp ret) {
    RowBuild rb; // (not list-initialized: DenseMap's default constructor is explicit)
    rb.level = level;
    auto addSink = [&](RowKernel::Sink s) { rb.sinks.push_back(s); };
    // Device checks on inputs run in the first row kernel.
    if (level == 0) {
      for (const InputCheck &c : opt_.checks) {
        Value in = body.getArgument(static_cast<unsigned>(c.input));
        FuncBuilder &fb = rb.fb;
        int32_t x = rowValue(rb, in);
        DType t = fb.typeOf(x);
        int32_t bad = fb.op(ScalarOp::Or, DType::I1, fb.op(ScalarOp::CmpLt, DType::I1, x, fb.constI(c.lo, t)),
                            fb.op(ScalarOp::CmpGe, DType::I1, x, fb.constI(c.hi, t)));
        if (c.exempt)
          bad = fb.op(ScalarOp::And, DType::I1, bad,
                      fb.op(ScalarOp::CmpNe, DType::I1, x, fb.constI(*c.exempt, t)));
        RowKernel::Sink s;
        s.kind = RowKernel::Sink::Kind::CheckRow;
        s.result = fb.result(bad);
        s.aux = fb.result(fb.typeOf(x) == DType::I64 ? x : fb.op(ScalarOp::Cast, DType::I64, x));
        addSink(s);
      }
    }
    for (Operation &op : body.without_terminator()) {
      if (isa<tx::GemmGradOp>(op) ||
          (isa<tx::CastOp>(op) && isa_and_nonnull<tx::GemmGradOp>(op.getOperand(0).getDefiningOp())))
        continue;
      // Global reductions whose input lives at this level.
      if (isGlobalReduce(&op) && level_.lookup(op.getOperand(0)) == level) {
        GlobalRef g{newSlot(), isa<tx::MeanOp>(op)};
        global_[op.getResult(0)] = g;
        RowKernel::Sink s;
        s.kind = RowKernel::Sink::Kind::SumScalar;
        int32_t x = rowValue(rb, op.getOperand(0));
        if (rb.fb.typeOf(x) != DType::F32)
          x = rb.fb.op(ScalarOp::Cast, DType::F32, x);
        s.result = rb.fb.result(x);
        s.slot = g.slot;
        addSink(s);
      }
      for (Value r : op.getResults()) {
        if (level_.lookup(r) != level || !needsStore(r) || isa<tx::GemmGradOp>(op))
          continue;
        auto t = ttype(r);
        int32_t x = rowValue(rb, r);
        RowKernel::Sink s;
        s.result = rb.fb.result(x);
        if (isScalarShape(t.getShape())) {
          s.kind = RowKernel::Sink::Kind::StoreScalar;
          s.slot = newSlot();
          scalarSlot_[r] = s.slot;
        } else {
          s.kind = RowKernel::Sink::Kind::StoreRow;
          DType dt = computeType(t.getElementType());
          s.dtype = dt;
          s.buf = addWorkspace(fmt::format("row_l{}_{}", level, rowBuffer_.size()), dtypeSize(dt), 0);
          rowBuffer_[r] = s.buf;
        }
        addSink(s);
      }
    }
    // Function results that are row values or scalars.
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      auto t = ttype(v);
      if (level_.lookup(v) != level)
        continue;
      Operation *def = v.getDefiningOp();
      if (def && (isa<tx::GemmGradOp>(def) ||
                  (isa<tx::CastOp>(def) &&
                   isa_and_nonnull<tx::GemmGradOp>(def->getOperand(0).getDefiningOp()))))
        continue;
      if (!isRowShape(t.getShape()) && !isScalarShape(t.getShape()))
        continue;
      RowKernel::Sink s;
      s.kind = isScalarShape(t.getShape()) ? RowKernel::Sink::Kind::StoreScalar
                                           : RowKernel::Sink::Kind::StoreRow;
      s.buf = BufferRef{Space::Output, static_cast<int32_t>(i)};
      s.dtype = prog_.outputs[i].dtype;
      int32_t x = rowValue(rb, v);
      DType want = isFloat(s.dtype) ? DType::F32 : s.dtype;
      if (rb.fb.typeOf(x) != want)
        x = rb.fb.op(ScalarOp::Cast, want, x);
      s.result = rb.fb.result(x);
      addSink(s);
    }
    if (rb.sinks.empty())
      return;
    RowKernel k;
    k.func = std::move(rb.fb.func);
    k.args = std::move(rb.fb.args);
    k.sinks = std::move(rb.sinks);
    addKernel(fmt::format("{}_row{}", opt_.name, level), std::move(k));
  }

  int32_t addKernel(std::string name, KernelBody body) {
    prog_.kernels.push_back(Kernel{std::move(name), std::move(body)});
    int32_t idx = static_cast<int32_t>(prog_.kernels.size()) - 1;
    prog_.steps.push_back(Step{Step::Kind::Launch, idx, {}});
    return idx;
  }

  /// Translates a fused body (arith/math) into a ScalarFunc with GEMM operands.
  bool translateBody(Operation *gemm, Block &blk, ValueRange sides, FusedGemm &g,
                     std::vector<int32_t> &results) {
    FuncBuilder fb;
    llvm::DenseMap<Value, int32_t> inst;
    Operand acc;
    acc.kind = Operand::Kind::Acc;
    inst[blk.getArgument(0)] = fb.arg(acc, DType::F32);
    Operand col;
    col.kind = Operand::Kind::ColIndex;
    col.dtype = DType::I64;
    inst[blk.getArgument(1)] = fb.arg(col, DType::I64);
    for (auto [i, s] : llvm::enumerate(sides)) {
      Operand o;
      auto t = ttype(s);
      o.dtype = computeType(t.getElementType());
      auto shape = t.getShape();
      if (auto d = s.getDefiningOp<tx::DimOp>()) {
        // Sizes are known (static) or the runtime N: computed in the epilogue.
        int64_t size = ttype(d.getInput()).getDimSize(static_cast<int64_t>(d.getAxis()));
        inst[blk.getArgument(static_cast<unsigned>(2 + i))] =
            ShapedType::isDynamic(size) ? fb.op(ScalarOp::RowCount, DType::I64)
                                        : fb.constI(size, DType::I64);
        continue;
      }
      if (auto c = s.getDefiningOp<tx::ConstantOp>()) {
        DType ct = computeType(t.getElementType());
        inst[blk.getArgument(static_cast<unsigned>(2 + i))] =
            isa<FloatAttr>(c.getValue())
                ? fb.constF(cast<FloatAttr>(c.getValue()).getValueAsDouble())
                : fb.constI(cast<IntegerAttr>(c.getValue()).getValue().getSExtValue(), ct);
        continue;
      }
      if (auto a = dyn_cast<BlockArgument>(s)) {
        o.buf = BufferRef{Space::Input, static_cast<int32_t>(a.getArgNumber())};
        o.dtype = dtypeOf(t.getElementType());
        o.kind = shape.empty() ? Operand::Kind::Scalar
                 : isRowShape(shape) ? Operand::Kind::Row : Operand::Kind::Col;
      } else if (auto it = rowBuffer_.find(s); it != rowBuffer_.end()) {
        o.kind = Operand::Kind::Row;
        o.buf = it->second;
      } else if (auto it2 = scalarSlot_.find(s); it2 != scalarSlot_.end()) {
        o.kind = Operand::Kind::Scalar;
        o.slot = it2->second;
        o.dtype = DType::F64;
      } else if (auto it3 = global_.find(s); it3 != global_.end() && !it3->second.mean) {
        o.kind = Operand::Kind::Scalar;
        o.slot = it3->second.slot;
        o.dtype = DType::F64;
      } else {
        return fail(gemm, fmt::format("side operand {} is not available as a stored value", i));
      }
      int32_t x = fb.arg(o, o.dtype == DType::F64 ? DType::F32 : computeType(t.getElementType()));
      DType ct = computeType(t.getElementType());
      if (fb.typeOf(x) != ct)
        x = fb.op(ScalarOp::Cast, ct, x);
      inst[blk.getArgument(static_cast<unsigned>(2 + i))] = x;
    }
    for (Operation &op : blk.without_terminator()) {
      auto in = [&](unsigned i) { return inst.lookup(op.getOperand(i)); };
      DType ct = op.getNumResults() ? computeType(op.getResult(0).getType()) : DType::F32;
      int32_t r = llvm::TypeSwitch<Operation *, int32_t>(&op)
          .Case<arith::ConstantOp>([&](arith::ConstantOp c) {
            if (auto f = dyn_cast<FloatAttr>(c.getValue()))
              return fb.constF(f.getValueAsDouble());
            if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
              return fb.constI(i.getValue().getSExtValue(), ct);
            return -1;
          })
          .Case<arith::AddFOp, arith::AddIOp>([&](auto) { return fb.op(ScalarOp::Add, ct, in(0), in(1)); })
          .Case<arith::SubFOp, arith::SubIOp>([&](auto) { return fb.op(ScalarOp::Sub, ct, in(0), in(1)); })
          .Case<arith::MulFOp, arith::MulIOp>([&](auto) { return fb.op(ScalarOp::Mul, ct, in(0), in(1)); })
          .Case<arith::DivFOp>([&](auto) { return fb.op(ScalarOp::Div, ct, in(0), in(1)); })
          .Case<arith::MaximumFOp, arith::MaxSIOp>([&](auto) { return fb.op(ScalarOp::Max, ct, in(0), in(1)); })
          .Case<arith::MinimumFOp, arith::MinSIOp>([&](auto) { return fb.op(ScalarOp::Min, ct, in(0), in(1)); })
          .Case<arith::NegFOp>([&](auto) { return fb.op(ScalarOp::Neg, ct, in(0)); })
          .Case<math::ExpOp>([&](auto) { return fb.op(ScalarOp::Exp, ct, in(0)); })
          .Case<math::LogOp>([&](auto) { return fb.op(ScalarOp::Log, ct, in(0)); })
          .Case<math::TanhOp>([&](auto) { return fb.op(ScalarOp::Tanh, ct, in(0)); })
          .Case<math::ExpM1Op>([&](auto) { return fb.op(ScalarOp::Expm1, ct, in(0)); })
          .Case<math::Log1pOp>([&](auto) { return fb.op(ScalarOp::Log1p, ct, in(0)); })
          .Case<math::AbsFOp>([&](auto) { return fb.op(ScalarOp::Abs, ct, in(0)); })
          .Case<arith::CmpFOp>([&](arith::CmpFOp c) {
            ScalarOp o;
            switch (c.getPredicate()) {
            case arith::CmpFPredicate::OEQ: o = ScalarOp::CmpEq; break;
            case arith::CmpFPredicate::UNE: o = ScalarOp::CmpNe; break;
            case arith::CmpFPredicate::OLT: o = ScalarOp::CmpLt; break;
            case arith::CmpFPredicate::OLE: o = ScalarOp::CmpLe; break;
            case arith::CmpFPredicate::OGT: o = ScalarOp::CmpGt; break;
            case arith::CmpFPredicate::OGE: o = ScalarOp::CmpGe; break;
            default: return -1;
            }
            return fb.op(o, DType::I1, in(0), in(1));
          })
          .Case<arith::CmpIOp>([&](arith::CmpIOp c) {
            ScalarOp o;
            switch (c.getPredicate()) {
            case arith::CmpIPredicate::eq: o = ScalarOp::CmpEq; break;
            case arith::CmpIPredicate::ne: o = ScalarOp::CmpNe; break;
            case arith::CmpIPredicate::slt: o = ScalarOp::CmpLt; break;
            case arith::CmpIPredicate::sle: o = ScalarOp::CmpLe; break;
            case arith::CmpIPredicate::sgt: o = ScalarOp::CmpGt; break;
            case arith::CmpIPredicate::sge: o = ScalarOp::CmpGe; break;
            default: return -1;
            }
            return fb.op(o, DType::I1, in(0), in(1));
          })
          .Case<arith::SelectOp>([&](auto) { return fb.op(ScalarOp::Select, ct, in(0), in(1), in(2)); })
          .Case<arith::ExtFOp, arith::TruncFOp, arith::SIToFPOp, arith::UIToFPOp, arith::ExtSIOp,
                arith::ExtUIOp, arith::TruncIOp>([&](auto) {
            int32_t x = in(0);
            return fb.typeOf(x) == ct ? x : fb.op(ScalarOp::Cast, ct, x);
          })
          .Default([](Operation *) { return -1; });
      if (r < 0)
        return fail(&op, "op not supported in a fused epilogue");
      inst[op.getResult(0)] = r;
    }
    auto yield = cast<tx::YieldOp>(blk.getTerminator());
    for (Value y : yield.getValues())
      results.push_back(fb.result(inst.lookup(y)));
    g.epilogue = std::move(fb.func);
    g.args = std::move(fb.args);
    return true;
  }

  bool setupGemm(Operation *op, Value lhs, Value rhs, FusedGemm &g) {
    auto a = ttype(lhs), b = ttype(rhs);
    g.abType = dtypeOf(a.getElementType());
    g.k = a.getDimSize(1);
    g.cols = b.getDimSize(0);
    g.a = BufferRef{Space::Input, static_cast<int32_t>(cast<BlockArgument>(lhs).getArgNumber())};
    g.b = BufferRef{Space::Input, static_cast<int32_t>(cast<BlockArgument>(rhs).getArgNumber())};
    switch (g.abType) {
    case DType::BF16:
      if (wgmmaFor(g.k, g.cols)) {
        g.math = MathMode::WgmmaBF16;
        g.tile = wgmmaPingPongTile();
        // [Note: sm90 multicast]: the forward reduce's CTAs walk the same column tiles
        // in pairs of row tiles; the persistent dZ GEMM's CTAs do not.
        // [Note: sm90 column halves]: the forward on a cooperative 128 x 256 tile whose
        // consumers share H's k-block, where the caller asks and the columns fill whole
        // 256-column tiles (the stored values need whole tiles).
        if (isa<tx::GemmReduceOp>(op) && g.cols % 256 == 0 &&
            opt_.forwardHalves.value_or(halvesByCard(op)))
          g.tile = wgmmaHalvesTile();
        if (opt_.multicast && isa<tx::GemmReduceOp>(op))
          g.tile.clusterM = opt_.forwardCluster > 0 ? opt_.forwardCluster : kForwardCluster;
        if (g.tile.clusterM != 1 && g.tile.clusterM != 2 && g.tile.clusterM != 4)
          return fail(op, fmt::format("the forward's cluster size {} must be 2 or 4",
                                      g.tile.clusterM));
      } else {
        g.math = MathMode::TensorCoreBF16;
        g.tile = tcTile();
      }
      break;
    case DType::F16: g.math = MathMode::TensorCoreF16; g.tile = tcTile(); break;
    case DType::F32: g.math = MathMode::SimtF32; g.tile = simtTile(); break;
    default: return fail(op, fmt::format("GEMM operands of type {} are not supported",
                                          dtypeName(g.abType)));
    }
    if (g.k % 8 != 0)
      return fail(op, fmt::format("K = {} must be a multiple of 8 (16-byte rows)", g.k));
    return true;
  }

  /// [Note: the Hopper mainloop] bf16 GEMMs run on the sm_90a wgmma mainloop when the
  /// target is sm_90, the caller did not ask for mma.sync (or an mma.sync tile), dZ is one
  /// bf16 operand (fast precision; exact mode's hi + lo stay on mma.sync), and every row
  /// pitch a tensor map needs is a multiple of 16 bytes: K (rows of A and B) and the
  /// vocabulary (the dZ chunk pitch of the last chunk).
  bool wgmmaFor(int64_t k, int64_t cols) const {
    if (opt_.mainloop == Mainloop::MmaSync || opt_.tensorCoreTile)
      return false;
    return opt_.target.smVersion == 90 && !opt_.exactGradients && k % 8 == 0 && cols % 8 == 0;
  }
  std::string wgmmaDecision() const {
    if (opt_.mainloop == Mainloop::MmaSync)
      return "mainloop: mma.sync (asked for by the caller)";
    if (opt_.tensorCoreTile)
      return "mainloop: mma.sync (a tensor-core tile was given)";
    if (opt_.target.smVersion != 90)
      return fmt::format("mainloop: mma.sync (sm_{} has no wgmma)", opt_.target.smVersion);
    if (opt_.exactGradients)
      return "mainloop: mma.sync (exact precision: dZ is two bf16 operands)";
    return "";
  }
  /// 128 x 256 x 64, 4 stages, cooperative: the fastest plain GEMM of the gemm-only sweep
  /// (docs/performance.md); the backward dA and dB GEMMs, whose epilogues are stores.
  static TileConfig wgmmaTile() { return TileConfig{128, 256, 64, 3, 4, 4}; }
  /// The forward-reduce and dZ GEMMs evaluate the loss's function per element: 128 x 128
  /// x 64 tiles, 6 stages, ping-pong consumers, so that one consumer's epilogue runs under
  /// the other's mainloop.
  /// A known memory interface narrower than kWideMemoryBusBits (an H100's): [Note: forward
  /// CTA order by card] and [Note: forward tile by card] in Program.h.
  bool narrowMemoryBus() const {
    return opt_.target.memoryBusBits > 0 && opt_.target.memoryBusBits < kWideMemoryBusBits;
  }
  /// [Note: dB multicast]: the wgmma dB's cluster, the caller's or kDbCluster.
  int32_t dbCluster() const { return opt_.dbCluster > 0 ? opt_.dbCluster : kDbCluster; }
  /// The rows of K up to which an accumulating dB loads its sums: the caller's, else
  /// [Note: loaded sums by card] (Program.h).
  int64_t loadedSumsMaxRows() const {
    return opt_.loadedSumsMaxRows.value_or(narrowMemoryBus() ? kLoadedSumsMaxRows : 0);
  }
  /// [Note: forward tile by card] (Program.h): column halves on a memory interface narrower
  /// than kWideMemoryBusBits when the forward's values need no exp, log or tanh of their
  /// own (no softcap).
  bool halvesByCard(Operation *op) const {
    if (!narrowMemoryBus())
      return false;
    bool transcendental = false;
    op->walk([&](Operation *o) {
      transcendental |= isa<tx::TanhOp, tx::ExpOp, tx::LogOp, math::TanhOp, math::ExpOp,
                            math::LogOp, math::Log1pOp, math::ExpM1Op>(o);
    });
    return !transcendental;
  }
  /// [Note: sm90 column halves]: 128 x 256 x 64, 4 stages (48 KB each), both consumers on
  /// every tile, each all rows and 128 columns.
  static TileConfig wgmmaHalvesTile() {
    TileConfig t{128, 256, 64, 3, 4, 4};
    t.halves = true;
    return t;
  }
  static TileConfig wgmmaPingPongTile() {
    TileConfig t{128, 128, 64, 3, 4, 6};
    t.pingpong = true;
    return t;
  }

  TileConfig tcTile() const {
    if (opt_.tensorCoreTile)
      return *opt_.tensorCoreTile;
    if (bucket_ <= 1024)
      return TileConfig{64, 128, 32, 1, 4, 3};
    return tcLargeTile();
  }
  static TileConfig simtTile() { return TileConfig{64, 64, 16, 2, 4, 2}; }
  TileConfig tcLargeTile() const {
    if (opt_.tensorCoreTile)
      return *opt_.tensorCoreTile;
    // Measured on the H200 (docs/performance.md, LCEJIT_GEMM_TILE sweep): BK = 64 beats
    // BK = 32 (128x128x32: A 3.50x cuBLAS) and the 128x256 / 256x128 tiles (3.11x, 3.14x;
    // both much slower at D = 2304): A 2.98x, B 3.13x, C 3.10x.
    return TileConfig{128, 128, 64, 2, 4, 3};
  }

  bool buildGemmReduce(tx::GemmReduceOp op) {
    GemmReduceKernel k;
    if (!setupGemm(op, op.getLhs(), op.getRhs(), k.gemm))
      return false;
    std::vector<int32_t> results;
    if (!translateBody(op, op.getBody().front(), op.getSides(), k.gemm, results))
      return false;
    for (Attribute a : op.getKinds()) {
      auto kind = *tx::parseReduceKind(cast<StringAttr>(a).getValue());
      k.reductions.push_back(kind == tx::ReduceKind::sum ? ReduceKind::Sum
                             : kind == tx::ReduceKind::max ? ReduceKind::Max
                                                           : ReduceKind::LogSumExp);
    }
    k.partials = addWorkspace(fmt::format("partials{}", fwdCount_),
                              int64_t(4) * prog_.splits * k.slotsPerRow(), 0);
    if (opt_.forwardOrderGroup > 0 && k.gemm.math == MathMode::WgmmaBF16) {
      // [Note: forward CTA order]: the caller's group (comparisons).
      k.orderGroup = opt_.forwardOrderGroup;
      prog_.decisions.push_back(fmt::format(
          "forward CTA order: groups of {} row tiles, given by the caller (LCEJIT_FWD_GROUP), "
          "not the planner's",
          k.orderGroup));
    } else if (k.gemm.math == MathMode::WgmmaBF16 && narrowMemoryBus()) {
      k.orderGroup = kNarrowBusOrderGroup;
      prog_.decisions.push_back(fmt::format(
          "forward CTA order ([Note: forward CTA order by card]): groups of {} row tiles on a "
          "{}-bit memory interface (an H100's is 5120), {} on {} bits or more",
          k.orderGroup, opt_.target.memoryBusBits, kForwardOrderGroup, kWideMemoryBusBits));
    }
    if (k.gemm.tile.clusterM > 2 && k.orderGroup % k.gemm.tile.clusterM != 0) {
      // [Note: sm90 multicast]: a cluster's CTAs must be one group's row tiles of one split.
      prog_.decisions.push_back(fmt::format(
          "forward clusters: pairs, not {}: groups of {} row tiles do not hold whole clusters",
          k.gemm.tile.clusterM, k.orderGroup));
      k.gemm.tile.clusterM = 2;
    }
    if (opt_.forwardL2 && !opt_.forwardL2->none() && k.gemm.math == MathMode::WgmmaBF16) {
      // [Note: sm90 L2 hints]: the caller's (comparisons).
      k.l2 = *opt_.forwardL2;
      prog_.decisions.push_back(fmt::format(
          "forward L2 hints ([Note: sm90 L2 hints]): H's loads evict-{}, W's evict-{}, given "
          "by the caller (LCEJIT_FWD_L2)",
          l2HintName(k.l2.a), l2HintName(k.l2.b)));
    }
    int32_t idx = addKernel(fmt::format("{}_fwd{}", opt_.name, fwdCount_++), std::move(k));
    const auto &kk = std::get<GemmReduceKernel>(prog_.kernels[static_cast<size_t>(idx)].body);
    for (auto [i, r] : llvm::enumerate(op.getResults()))
      partials_[r] = PartialsRef{idx, kk.slotOf(static_cast<int32_t>(i)), kk.reductions[i],
                                 kk.partials, static_cast<int32_t>(i)};
    return true;
  }

  /// One split count serves every GemmReduce kernel of the Program (it is a launch
  /// parameter of all of them), so it is decided before any partials buffer is sized.
  bool decideSplits(Block &body) {
    bool pingpong = false;
    for (Operation &op : body.without_terminator())
      if (auto g = dyn_cast<tx::GemmReduceOp>(op)) {
        FusedGemm fg;
        if (!setupGemm(&op, g.getLhs(), g.getRhs(), fg))
          return false;
        decideSplits(fg);
        pingpong |= fg.tile.twoEntries();
      }
    // A ping-pong (or column-halves) reduce fills two entries per CTA split: the shared
    // count must be even.
    if (pingpong && prog_.splits % 2 != 0)
      ++prog_.splits;
    return true;
  }

  void decideSplits(const FusedGemm &g) {
    int64_t tiles = (g.cols + g.tile.bn - 1) / g.tile.bn;
    if (g.math == MathMode::WgmmaBF16) {
      // One CTA per (row tile, split), each over about 32 column tiles (16 per ping-pong
      // consumer): short enough that ceil(N / 128) * splits CTAs fill the SMs in many
      // waves at most N, long enough that a CTA's pipeline fill and first tile (when the
      // second consumer waits) stay a few percent of its work.
      // With ping-pong each consumer writes its own partial entry: Program::splits (the
      // entries per row) is twice the CTA splits.
      // [Note: column splits per call]: at least a quarter of the SMs, as long as each
      // split keeps perSplit / 2 tiles, so that a block of a multiple of 4 row tiles (512
      // rows) can fill whole waves (Llama-3's 1002 tiles alone would give 32 splits: 64
      // row tiles x 32 = 15.5 waves; 33 make 16).
      // [Note: sm90 column halves]: 16 tiles of 256 columns, the same columns a CTA as 32
      // of ping-pong's 128.
      const int64_t perSplit = g.tile.halves ? 16 : g.tile.pingpong ? 32 : 8;
      const int64_t quarter =
          std::min<int64_t>((int64_t(opt_.target.numSMs) + 3) / 4, tiles / (perSplit / 2));
      const int32_t ctaSplits = static_cast<int32_t>(std::clamp<int64_t>(
          std::max((tiles + perSplit - 1) / perSplit, quarter), 1, tiles));
      const int32_t entries = g.tile.twoEntries() ? 2 * ctaSplits : ctaSplits;
      prog_.splits = std::max(prog_.splits, entries);
      prog_.decisions.push_back(fmt::format(
          "forward GEMM: tile {}x{}x{} ({}, {} stages, 384 threads{}), {} column tiles -> {} "
          "column splits of about {} tiles, one CTA per (row tile, split); {} partial "
          "entries per row; {}",
          g.tile.bm, g.tile.bn, g.tile.bk, mathModeName(g.math), g.tile.stages,
          g.tile.pingpong ? ", ping-pong consumers"
          : g.tile.halves
              ? (opt_.forwardHalves
                     ? std::string(", consumers on column halves ([Note: sm90 column halves]), "
                                   "given by the caller (LCEJIT_FWD_HALVES)")
                     : fmt::format(", consumers on column halves ([Note: forward tile by card]: "
                                   "a {}-bit memory interface, values without exp, log or tanh)",
                                   opt_.target.memoryBusBits))
              : std::string(),
          tiles, prog_.splits / (g.tile.twoEntries() ? 2 : 1),
          (tiles + ctaSplits - 1) / ctaSplits, prog_.splits,
          g.tile.clusterM > 1
              ? fmt::format("CTAs of {} adjacent row tiles as clusters sharing each W tile by "
                            "TMA multicast when a call's row tiles are a multiple of {}{}{}",
                            g.tile.clusterM, g.tile.clusterM,
                            g.tile.clusterM > 2 ? " (else pairs where they pair up)" : "",
                            opt_.forwardCluster > 0 ? ", given by the caller (LCEJIT_FWD_CLUSTER)"
                                                    : "")
              : opt_.multicast ? "no clusters" : "no clusters (LCEJIT_MULTICAST=0)"));
      return;
    }
    int64_t rowBlocks = std::max<int64_t>(1, (std::max<int64_t>(bucketLow_, 1) + g.tile.bm - 1) / g.tile.bm);
    int64_t want = (2 * int64_t(opt_.target.numSMs) + rowBlocks - 1) / rowBlocks;
    int32_t splits = static_cast<int32_t>(std::clamp<int64_t>(want, 1, tiles));
    prog_.splits = std::max(prog_.splits, splits);
    prog_.decisions.push_back(fmt::format(
        "forward GEMM: tile {}x{}x{} ({} warps, {} stages, {}), {} column tiles; {} row blocks "
        "at N = {} (bucket low) -> {} column splits to fill {} SMs twice",
        g.tile.bm, g.tile.bn, g.tile.bk, g.tile.warpsM * g.tile.warpsN, g.tile.stages,
        mathModeName(g.math), tiles, rowBlocks, std::max<int64_t>(bucketLow_, 1), prog_.splits,
        opt_.target.numSMs));
  }

  bool buildGemmGrad(tx::GemmGradOp op, func::ReturnOp ret) {
    GemmDzKernel dz;
    if (!setupGemm(op, op.getLhs(), op.getRhs(), dz.gemm))
      return false;
    std::vector<int32_t> results;
    if (!translateBody(op, op.getBody().front(), op.getSides(), dz.gemm, results))
      return false;
    bool bf16 = dz.gemm.abType == DType::BF16;
    dz.format = !bf16 ? DzFormat::F32 : opt_.exactGradients ? DzFormat::SplitBF16 : DzFormat::BF16;
    const bool wgmma = dz.gemm.math == MathMode::WgmmaBF16;
    MathMode bwdMath = wgmma  ? MathMode::WgmmaBF16
                       : bf16 ? MathMode::TensorCoreBF16
                              : MathMode::SimtF32;
    TileConfig bwdTile = wgmma ? wgmmaTile() : bf16 ? tcLargeTile() : simtTile();
    // Which gradients are used, and as which outputs.
    auto outputOf = [&](Value v, DType *type) -> int32_t {
      for (OpOperand &u : v.getUses()) {
        Operation *o = u.getOwner();
        if (auto r = dyn_cast<func::ReturnOp>(o)) {
          *type = prog_.outputs[u.getOperandNumber()].dtype;
          return static_cast<int32_t>(u.getOperandNumber());
        }
        if (auto c = dyn_cast<tx::CastOp>(o))
          for (OpOperand &cu : c.getResult().getUses())
            if (isa<func::ReturnOp>(cu.getOwner())) {
              *type = prog_.outputs[cu.getOperandNumber()].dtype;
              return static_cast<int32_t>(cu.getOperandNumber());
            }
      }
      return -1;
    };
    for (Value g : {op.getDLhs(), op.getDRhs()})
      for (Operation *u : g.getUsers())
        if (!isa<func::ReturnOp>(u) && !(isa<tx::CastOp>(u) && llvm::all_of(u->getUsers(), [](Operation *x) { return isa<func::ReturnOp>(x); })))
          return fail(u, "a gradient from a fused GEMM may only be returned (optionally cast)");
    DType lhsType = DType::F32, rhsType = DType::F32;
    int32_t lhsOut = outputOf(op.getDLhs(), &lhsType);
    int32_t rhsOut = outputOf(op.getDRhs(), &rhsType);
    if (lhsOut < 0 && rhsOut < 0)
      return true;

    int64_t k = dz.gemm.k, cols = dz.gemm.cols;
    // [Note: one chunk loop geometry] loopCols is Program-wide (the executor, emitter and
    // interpreter read it there), so every gradient cluster must loop over the same
    // columns; heads of different widths are refused rather than mis-planned.
    if (prog_.loopCols != 0 && prog_.loopCols != cols)
      return fail(op, fmt::format("a second fused gradient over {} columns (the first has {}): "
                                  "one chunk loop geometry per Program is supported",
                                  cols, prog_.loopCols));
    prog_.loopCols = cols;
    prog_.schedule.chunkAlign =
        std::max<int64_t>({prog_.schedule.chunkAlign, dz.gemm.tile.bn, bwdTile.bn});
    bool lhsAcc = lhsOut >= 0 && lhsType != DType::F32;
    prog_.decisions.push_back(fmt::format(
        "{}; dZ as {} ({}); chunk width and row blocks chosen per call from N and the {} MiB "
        "budget (see 'run schedule'){}",
        kRecomputeDecision,
        dzFormatName(dz.format),
        dz.format == DzFormat::BF16        ? "fast: one bf16 operand, rounded once from f32"
        : dz.format == DzFormat::SplitBF16 ? "exact: bf16 hi + lo, each backward GEMM twice"
                                           : "f32 operands, SIMT backward",
        opt_.workspaceBudgetBytes >> 20,
        lhsAcc ? fmt::format("; an f32 accumulator for d{} ({} B per row of a block)",
                             prog_.inputs[static_cast<size_t>(dz.gemm.a.index)].name, k * 4)
               : std::string()));
    // [Note: the target-column residual] (Program.h): fast precision only, where dZ is
    // rounded to one bf16 operand and the function has a target column.
    Residual residual;
    std::string residualNote;
    if (dz.format == DzFormat::BF16) {
      const TargetColumn tc =
          findTargetColumn(dz.gemm.epilogue, dz.gemm.args, [](const Operand &) { return true; });
      if (!opt_.targetResidual)
        residualNote = "not added back (asked: LCEJIT_TARGET_RESIDUAL=0)";
      else if (!tc.found())
        residualNote = tc.ambiguous ? "none: dZ compares the column with two row values"
                                    : "none: dZ has no target column";
      else {
        const Operand &t = dz.gemm.args[static_cast<size_t>(tc.arg)];
        residual.buf = addWorkspace(fmt::format("dz_residual{}", gradCount_), 4, 0);
        residual.target = t.buf;
        residual.targetType = t.dtype;
        dz.residual = residual;
        dz.residualArg = tc.arg;
      }
    }
    const int64_t dzElem = dz.format == DzFormat::F32 ? 4 : 2;
    dz.dz = addWorkspace(fmt::format("dz{}", gradCount_), 0, 0);
    prog_.workspace.back().bytesPerRowCol = dzElem;
    prog_.workspace.back().blockLocal = true;
    if (dz.format == DzFormat::SplitBF16) {
      dz.dzLo = addWorkspace(fmt::format("dz_lo{}", gradCount_), 0, 0);
      prog_.workspace.back().bytesPerRowCol = 2;
      prog_.workspace.back().blockLocal = true;
    }
    Step loop{Step::Kind::ChunkLoop, -1, {}};
    int32_t gi = gradCount_++;
    auto push = [&](std::string name, KernelBody body) {
      prog_.kernels.push_back(Kernel{std::move(name), std::move(body)});
      loop.loopKernels.push_back(static_cast<int32_t>(prog_.kernels.size()) - 1);
    };
    BufferRef dzBuf = dz.dz, dzLo = dz.dzLo;
    DzFormat fmtDz = dz.format;
    DType abType = dz.gemm.abType;
    BufferRef aBuf = dz.gemm.a, bBuf = dz.gemm.b;
    // dB's part of the residual: added to an f32 `out` after the loop, or, with `sums`,
    // summed per group for dB's epilogue inside it ([Note: target group sums]).
    auto correction = [&](BufferRef out, TargetSums sums) {
      TargetCorrectionKernel c;
      c.residual = residual;
      c.a = aBuf;
      c.aType = abType;
      c.out = out;
      c.k = k;
      c.cols = cols;
      c.sums = std::move(sums);
      return c;
    };
    push(fmt::format("{}_dz{}", opt_.name, gi), std::move(dz));
    BufferRef lhsAccBuf;
    int64_t sumsBytesPerRow = 0; // [Note: target group sums]: sums and heads, per row
    if (lhsOut >= 0) {
      GemmDLhsKernel d;
      d.math = bwdMath;
      d.tile = bwdTile;
      d.format = fmtDz;
      d.bType = abType;
      d.k = k;
      d.dz = dzBuf;
      d.dzLo = dzLo;
      d.b = bBuf;
      if (lhsAcc) {
        lhsAccBuf = addWorkspace(fmt::format("dlhs_acc{}", gi), k * 4, 0);
        prog_.workspace.back().blockLocal = true;
        d.out = lhsAccBuf;
      } else {
        d.out = BufferRef{Space::Output, lhsOut};
      }
      if (residual.valid()) {
        d.residual = residual;
        d.cols = cols;
      }
      push(fmt::format("{}_dlhs{}", opt_.name, gi), std::move(d));
    }
    if (rhsOut >= 0) {
      GemmDRhsKernel d;
      d.math = bwdMath;
      d.tile = bwdTile;
      d.format = fmtDz;
      d.aType = abType;
      d.k = k;
      d.dz = dzBuf;
      d.dzLo = dzLo;
      d.a = aBuf;
      d.out = BufferRef{Space::Output, rhsOut};
      d.outType = rhsType;
      d.accumulateRowBlocks = rhsType == DType::F32;
      // [Note: sm90 TMA store]: an f32 dB leaves through shared memory and TMA.
      d.tile.tmaStore = bwdMath == MathMode::WgmmaBF16 && rhsType == DType::F32 &&
                        opt_.tmaStore;
      // [Note: dB multicast]: clusters along the row tiles sharing each H tile.
      if (opt_.dbCluster != 0 && opt_.dbCluster != 1 && opt_.dbCluster != 2 &&
          opt_.dbCluster != 4)
        return fail(op, fmt::format("PlanOptions::dbCluster must be 1, 2 or 4 (CTAs), not {}",
                                    opt_.dbCluster));
      if (bwdMath == MathMode::WgmmaBF16 && opt_.multicast)
        d.tile.clusterM = dbCluster();
      // [Note: sm90 loaded sums]
      if (loadedSumsMaxRows() < 0)
        return fail(op, fmt::format("PlanOptions::loadedSumsMaxRows must be >= 0 (rows), "
                                    "not {}",
                                    loadedSumsMaxRows()));
      d.loadedSumsMaxRows =
          d.tile.tmaStore && wgmmaLoadedSums(d.tile) ? loadedSumsMaxRows() : 0;
      if (residual.valid() && rhsType != DType::F32) {
        // [Note: target group sums] (Program.h): dB is written once per chunk, rounded
        // from its f32 sum; the groups of the chunk's targets are summed before it.
        TargetSums ts;
        ts.sums = addWorkspace(fmt::format("dz_target_sums{}", gi), k * 2,
                               kTargetSumsPadBytes);
        prog_.workspace.back().blockLocal = true;
        ts.head = addWorkspace(fmt::format("dz_target_heads{}", gi),
                               (cols * 4 + ts.groupRows - 1) / ts.groupRows, cols * 4);
        prog_.workspace.back().blockLocal = true;
        sumsBytesPerRow = prog_.workspace[static_cast<size_t>(ts.sums.index)].bytesPerRow +
                          prog_.workspace.back().bytesPerRow;
        ts.target = residual.target;
        ts.targetType = residual.targetType;
        ts.cols = cols;
        push(fmt::format("{}_dzsum{}", opt_.name, gi), correction(BufferRef{}, ts));
        d.targetSums = ts;
      }
      push(fmt::format("{}_drhs{}", opt_.name, gi), std::move(d));
    }
    prog_.steps.push_back(std::move(loop));
    if (residual.valid()) {
      const std::string &a = prog_.inputs[static_cast<size_t>(aBuf.index)].name;
      const std::string &b = prog_.inputs[static_cast<size_t>(bBuf.index)].name;
      std::vector<std::string> parts;
      if (lhsOut >= 0)
        parts.push_back(fmt::format("d{}[r] += res[r]*{}[t_r] in dA's last chunk", a, b));
      if (rhsOut >= 0 && rhsType == DType::F32) {
        TargetCorrectionKernel c = correction(BufferRef{Space::Output, rhsOut}, TargetSums{});
        if (opt_.targetGroups) {
          // [Note: a group's first and last rows]: zero once per call, left zero by each
          // launch (every row block's pair of kernels).
          // No bytes until keepTargetGroups(), which gives them 8 * cols where the run
          // schedules stay as they are.
          c.groups = addWorkspace(fmt::format("dz_target_groups{}", gi), 0, 0,
                                  BufferInit::Zero);
          TargetCorrectionKernel find;
          find.residual.target = residual.target;
          find.residual.targetType = residual.targetType;
          find.k = k;
          find.cols = cols;
          find.groups = c.groups;
          find.findGroups = true;
          addKernel(fmt::format("{}_dzgrp{}", opt_.name, gi), std::move(find));
        }
        addKernel(fmt::format("{}_dzres{}", opt_.name, gi), std::move(c));
        parts.push_back(fmt::format("d{}[t_r] += res[r]*{}[r] after the chunk loop, summed per "
                                    "target in row order",
                                    b, a));
      }
      if (rhsOut >= 0 && rhsType != DType::F32)
        parts.push_back(fmt::format(
            "d{} is {}, written once per chunk: its target rows get the sums of res[r]*{}[r] "
            "over the rows of each {}-row block with that target (summed per chunk in row "
            "order after the dZ GEMM, {} B per row of workspace) in dB's epilogue, before the "
            "rounding",
            b, dtypeName(rhsType), a, kTargetGroupRows, sumsBytesPerRow));
      residualNote = fmt::format("added back as a rank-1 update in f32 ({})", fmt::join(parts, ", "));
    }
    if (!residualNote.empty())
      prog_.decisions.push_back(
          "dZ residual: the target column's bf16 rounding of dZ, " + residualNote);
    if (lhsAcc) {
      CastKernel c;
      c.in = lhsAccBuf;
      c.out = BufferRef{Space::Output, lhsOut};
      c.outType = lhsType;
      c.k = k;
      addKernel(fmt::format("{}_cast{}", opt_.name, gi), std::move(c));
    }
    return true;
  }

  bool build() {
    bucket_ = bucketOf(std::max<int64_t>(opt_.tokens, 0));
    bucketLow_ = bucketLowerBound(bucket_);
    prog_.name = opt_.name;
    prog_.bucket = bucket_;
    prog_.bucketLow = bucketLow_;
    prog_.target = opt_.target;
    prog_.schedule.budgetBytes = opt_.workspaceBudgetBytes;
    prog_.schedule.fixedChunkCols = opt_.fixedChunkCols;
    prog_.schedule.blockRows = opt_.blockRows;
    addWorkspace("scalar_slots", 0, 0, BufferInit::Zero); // size fixed at the end
    addWorkspace("error_word", 0, kErrorWordBytes, BufferInit::Zero);
    prog_.decisions.push_back(fmt::format("bucket: N in [{}, {}] (powers of four from 256)",
                                          bucketLow_, bucket_));
    if (const auto &t = opt_.tensorCoreTile)
      prog_.decisions.push_back(fmt::format(
          "tensor-core tile {}x{}x{} ({}x{} warps, {} stages) given by the caller "
          "(LCEJIT_GEMM_TILE), not chosen",
          t->bm, t->bn, t->bk, t->warpsM, t->warpsN, t->stages));
    TileConfig dbTile = wgmmaTile(); // dB's, with the TMA store ([Note: sm90 loaded sums])
    dbTile.tmaStore = true;
    dbTile.clusterM = opt_.multicast ? dbCluster() : 1; // [Note: dB multicast]
    // How an f32 dB adds to dW ([Note: sm90 loaded sums]); with the caller's threshold unset
    // the decision says the card chose it ([Note: loaded sums by card]).
    const int64_t loadedRows = loadedSumsMaxRows();
    const bool byCard = !opt_.loadedSumsMaxRows;
    std::string dbOut;
    if (!opt_.tmaStore)
      dbOut = "; dB stores from registers (LCEJIT_TMA_STORE=0)";
    else if (loadedRows > 0 && wgmmaLoadedSums(dbTile))
      dbOut = fmt::format("; an f32 dB leaves through shared memory and TMA, and adds to dW "
                          "over at most {} rows by loading the old values through the ring "
                          "([Note: sm90 loaded sums]{}), over more by TMA reduce-adds",
                          loadedRows,
                          byCard ? fmt::format("; a memory interface narrower than {} bits: "
                                               "[Note: loaded sums by card]",
                                               kWideMemoryBusBits)
                                 : std::string());
    else if (dbTile.clusterM > 1)
      dbOut = "; an f32 dB leaves through shared memory and TMA and adds to dW by TMA "
              "reduce-adds (its clusters cannot load their sums)";
    else
      dbOut = std::string("; an f32 dB leaves through shared memory and TMA") +
              (byCard ? " and adds to dW by TMA reduce-adds ([Note: loaded sums by card])"
                      : "");
    if (dbTile.clusterM > 1)
      dbOut += fmt::format("; dB's CTAs of {} adjacent row tiles as clusters sharing each H "
                           "tile by TMA multicast where a launch's row tiles and CTAs are "
                           "multiples of {}{} ([Note: dB multicast]{})",
                           dbTile.clusterM, dbTile.clusterM,
                           dbTile.clusterM > 2 ? " (else pairs where they pair up)" : "",
                           opt_.dbCluster > 0 ? "; given by the caller, LCEJIT_DB_CLUSTER"
                                              : "");
    if (std::string why = wgmmaDecision(); !why.empty())
      prog_.decisions.push_back(why);
    else
      prog_.decisions.push_back(fmt::format(
          "mainloop: wgmma for bf16 GEMMs whose K and column count are multiples of 8 (TMA "
          "operands, producer + 2 consumer warpgroups): forward and dZ 128x{}x64, {} stages, "
          "ping-pong; dA and dB 128x{}x64, {} stages, cooperative{}",
          wgmmaPingPongTile().bn, wgmmaPingPongTile().stages, wgmmaTile().bn,
          wgmmaTile().stages, dbOut));
    Block &body = func_.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    if (!decideSplits(body))
      return false;
    int64_t maxLevel = 0;
    for (auto &[v, l] : level_)
      maxLevel = std::max(maxLevel, l);
    for (int64_t l = 0; l <= maxLevel; ++l) {
      buildRowKernel(l, body, ret);
      if (!err_.empty())
        return false;
      for (Operation &op : body.without_terminator()) {
        auto it = gemmLevel_.find(&op);
        if (it == gemmLevel_.end() || it->second != l)
          continue;
        if (auto g = dyn_cast<tx::GemmReduceOp>(op)) {
          if (!buildGemmReduce(g))
            return false;
        } else if (auto gg = dyn_cast<tx::GemmGradOp>(op)) {
          if (!buildGemmGrad(gg, ret))
            return false;
        }
      }
    }
    prog_.workspace[kScalarSlotsBuffer].bytesFixed = 8 * std::max<int64_t>(prog_.numScalarSlots, 1);
    if (!err_.empty())
      return false;
    if (prog_.hasChunkLoop()) {
      bool materialized = false;
      if (opt_.backward == PlanOptions::Backward::Recompute) {
        // The default: no decision line (the recompute's own line says what it does).
      } else if (opt_.fixedChunkCols > 0) {
        prog_.decisions.push_back("backward: materialized schedule not taken: a fixed chunk "
                                  "width was given");
      } else if (std::string why = materializeBackward(prog_, opt_.name, opt_.exactTargetLogit,
                                                       opt_.rowScaled);
                 !why.empty()) {
        if (std::string inPlace = materializeInPlace(); !inPlace.empty())
          prog_.decisions.push_back("backward: materialized schedule not taken: " + why +
                                    (inPlace == why ? std::string()
                                                    : "; with the values in dW's memory: " +
                                                          inPlace));
        else
          materialized = true;
      } else {
        materialized = true;
      }
      if (materialized) {
        // One backward line: the materialized one replaces the recompute's.
        std::erase_if(prog_.decisions, [](const std::string &d) {
          return d.rfind(kRecomputeDecision, 0) == 0;
        });
        std::string lhs;
        for (const Kernel &k : prog_.kernels)
          if (const auto *d = std::get_if<GemmDLhsKernel>(&k.body);
              d && d->outType != DType::F32 && d->out.space == Space::Output)
            lhs = fmt::format("; dA writes {} as {} directly (one chunk: no f32 accumulator)",
                              prog_.outputs[static_cast<size_t>(d->out.index)].name,
                              dtypeName(d->outType));
        const std::string targetCol =
            opt_.exactTargetLogit ? "as a*expm1(-log1p(X)) + (a + b) from the forward's (max, "
                                    "rest) pair and the target logit: [Note: the target "
                                    "column's dZ]"
                                  : "from the f32 target logit";
        const StoredTile *st = nullptr;
        for (const Kernel &k : prog_.kernels)
          if (const auto *g = std::get_if<GemmReduceKernel>(&k.body); g && g->stored)
            st = &*g->stored;
        if (st && st->rowScaled && st->referenceArg >= 0)
          prog_.decisions.push_back(fmt::format(
              "backward: materialized, row-scaled against each row's target value "
              "([Note: a per-row reference]): {0}_ref0 applies the value chain to the f64 "
              "target logit ({0}_zy0, both before the forward), the forward GEMM stores bf16 "
              "factor(v)*exp(v - c_r) per element (0 at the target column, no tile maxima); a "
              "row kernel forms each row's scale a*exp(c_r - lse) and the target column's dZ "
              "({1}), dA multiplies its rows by the scale and dB reads {4}; a row whose loss "
              "exceeds {2:g} (its values would leave bf16's range) is flagged, and {0}_dz0, "
              "filtered to the tiles that hold one, writes its dZ instead; dA and dB run over "
              "one chunk of all columns per row block: 6*N*D*V of GEMM work{3}",
              opt_.name, targetCol, kRowScaledRange, lhs,
              prog_.schedule.slabOnly
                  ? "the values scaled in place and A (see below)"
                  : "bf16(scale * A): no pass over the stored values"));
        else if (st && st->rowScaled)
          prog_.decisions.push_back(fmt::format(
              "backward: materialized, row-scaled: the forward's value is at most {0:g} (within "
              "{1:g} of it), so the forward GEMM stores bf16 factor(v)*exp(v - {0:g}) per "
              "element (the dZ operand as it is, 0 at the target column) and no tile maxima; "
              "a row kernel forms each row's scale a*exp({0:g} - lse) and the target "
              "column's dZ ({2}), dA multiplies its rows by the scale and dB reads {4}; dA "
              "and dB run over one chunk of all columns per row block: 6*N*D*V of GEMM work "
              "([Note: row-scaled stored values]){3}",
              st->reference, kRowScaledRange, targetCol, lhs,
              prog_.schedule.slabOnly
                  ? "the values scaled in place and A (see below)"
                  : "bf16(scale * A): no pass over the stored values"));
        else
          prog_.decisions.push_back(
              "backward: materialized: the forward GEMM stores fp16 factor(v)*exp(v - tile "
              "max) per element (the dZ buffer) and the tile maxima; a row kernel and an "
              "elementwise pass form dZ as one bf16 operand (the target column " +
              targetCol +
              "); dA and dB run over one chunk of all columns per row block: 6*N*D*V of GEMM "
              "work" +
              lhs);
        if (prog_.schedule.slabOnly)
          prog_.decisions.push_back(fmt::format(
              "stored values in dW, scaled in place ([Note: values scaled in place]): the {} "
              "MiB budget holds the stored values of too few rows for blocks, so this "
              "Program serves the calls that overwrite {} with N <= {} (one row block, its "
              "stored values in slabs in {}'s memory, dB in launches that overwrite only "
              "slabs already read); after dA, {}_dzscale0 multiplies them by the row scale "
              "in place and dB reads them with the unscaled A (no scaled copy of A); every "
              "other call runs the recompute Program of this bucket",
              prog_.schedule.budgetBytes >> 20,
              prog_.outputs[static_cast<size_t>(prog_.schedule.slabOutput)].name,
              slabRowsMax(prog_),
              prog_.outputs[static_cast<size_t>(prog_.schedule.slabOutput)].name, opt_.name));
        else if (!opt_.storeInOutput)
          prog_.decisions.push_back("stored values in dW: off (LCEJIT_STORE_IN_OUTPUT=0)");
        else if (std::string why = allowSlabs(); !why.empty())
          prog_.decisions.push_back("stored values in dW: not taken: " + why);
        else
          prog_.decisions.push_back(fmt::format(
              "stored values in dW: a call that overwrites {} keeps the stored values of up to "
              "{} rows (its first block) in its memory, in slabs of 128 columns, dB in "
              "launches that overwrite only slabs already read; where that saves an ordinary "
              "block, the first block takes more rows, their values in the workspace's tails "
              "([Note: slab tails]); the rows after them run in ordinary blocks ([Note: "
              "stored values in dW])",
              prog_.outputs[static_cast<size_t>(prog_.schedule.slabOutput)].name,
              slabRowsMax(prog_)));
      }
      if (!materialized && opt_.exactTargetLogit) {
        if (std::string why = targetColumnDz(prog_, opt_.name); why.empty())
          prog_.decisions.push_back(fmt::format(
              "backward: {}_dzt0 forms dZ at each row's target column as "
              "a*expm1(-log1p(X)) + (a + b), X = the other columns' exp(z - z_y) summed from "
              "the forward's (max, rest) pair and the target logit; the dZ GEMM takes it "
              "there: no cancellation in p_y - 1 on a peaked row ([Note: the target column's "
              "dZ])",
              opt_.name));
        else
          prog_.decisions.push_back("backward: the target column's dZ stays exp(z - lse) "
                                    "- 1 in the dZ GEMM: " + why);
      }
    }
    decideRowBlocks();
    tuneLhsTile();
    keepTargetGroups(); // after the dA scratch buffers: those come first where both do not fit
    if (prog_.hasChunkLoop())
      for (int64_t n : {std::max<int64_t>(bucketLow_, 1), bucket_}) {
        if (!servesCall(prog_, exampleSchedule(n))) {
          prog_.decisions.push_back(fmt::format(
              "run schedule (example): N = {}: not served by this Program (more rows than a "
              "slab block holds, or the slabs do not fit): the recompute Program of the "
              "bucket runs it",
              n));
          continue;
        }
        prog_.decisions.push_back("run schedule (example): " + exampleSchedule(n).describe());
        describeLhsSplit(n);
      }
    return true;
  }

  /// The N of the calls whose run schedules stand for the bucket's: its low end, middle and
  /// top (a slab-only Program's served calls only).
  std::vector<int64_t> sampledNs() const {
    const int64_t top = prog_.schedule.slabOnly ? std::min(bucket_, slabRowsMax(prog_)) : bucket_;
    const int64_t low = std::max<int64_t>(bucketLow_, 1);
    return {low, std::max(low, top / 2), top};
  }

  /// [Note: a group's first and last rows] (Program.h): the f32 corrections keep their
  /// groups only where the words (8 bytes a column, zeroed once per call) are at most 1 %
  /// of the budget and leave the run schedules of the sampledNs() calls as they were, those
  /// that overwrite dW and those that add to it. Where the stored values fill the budget
  /// they would cost rows of every block (Llama-3's 2048-row blocks became 1920, L's 32
  /// blocks 35); blocks that short keep the scans, which are quadratic in a block's rows.
  void keepTargetGroups() {
    if (!opt_.targetGroups) {
      for (const Kernel &k : prog_.kernels)
        if (const auto *t = std::get_if<TargetCorrectionKernel>(&k.body); t && t->out.valid()) {
          prog_.decisions.push_back(
              "target groups ([Note: a group's first and last rows]): off "
              "(LCEJIT_TARGET_GROUPS=0): the f32 correction finds each row's group by scanning "
              "the rows of its block");
          break;
        }
      return;
    }
    std::vector<int32_t> finds, buffers;
    for (int32_t i = 0; i < static_cast<int32_t>(prog_.kernels.size()); ++i)
      if (const auto *t =
              std::get_if<TargetCorrectionKernel>(&prog_.kernels[static_cast<size_t>(i)].body);
          t && t->findGroups) {
        finds.push_back(i);
        buffers.push_back(t->groups.index);
      }
    if (finds.empty())
      return;
    const std::vector<int64_t> ns = sampledNs();
    auto schedules = [&] {
      auto s = sampledSchedules(ns, /*free=*/false);
      if (prog_.schedule.slabValues >= 0) {
        auto f = sampledSchedules(ns, /*free=*/true);
        s.insert(s.end(), f.begin(), f.end());
      }
      return s;
    };
    const auto without = schedules();
    int64_t bytes = 0;
    for (size_t i = 0; i < buffers.size(); ++i) {
      const auto &t = std::get<TargetCorrectionKernel>(
          prog_.kernels[static_cast<size_t>(finds[i])].body);
      prog_.workspace[static_cast<size_t>(buffers[i])].bytesFixed = 8 * t.cols;
      bytes += 8 * t.cols;
    }
    const auto with = schedules();
    std::vector<std::string> names;
    for (int32_t f : finds)
      names.push_back(prog_.kernels[static_cast<size_t>(f)].name);
    // As the dA scratch: the sampled calls are samples, so the words are taken only
    // within 1 % of the budget.
    const bool small = bytes * 100 <= prog_.schedule.budgetBytes;
    if (small && with == without) {
      prog_.decisions.push_back(fmt::format(
          "target groups ([Note: a group's first and last rows]): each target's first and last "
          "rows found by {} for the f32 correction ({} bytes, zeroed once per call): a row "
          "whose target no other row has is added without a scan",
          fmt::join(names, ", "), bytes));
      return;
    }
    for (Kernel &k : prog_.kernels)
      if (auto *t = std::get_if<TargetCorrectionKernel>(&k.body); t && !t->findGroups)
        t->groups = BufferRef{};
    const int32_t lastBlocked = prog_.schedule.lastBlockedStep;
    for (auto f = finds.rbegin(); f != finds.rend(); ++f)
      removeKernel(prog_, *f);
    std::sort(buffers.begin(), buffers.end());
    for (auto b = buffers.rbegin(); b != buffers.rend(); ++b)
      removeWorkspaceBuffer(prog_, *b);
    // decideRowBlocks() named the blocked steps with the finds among them.
    if (lastBlocked != prog_.schedule.lastBlockedStep)
      for (std::string &d : prog_.decisions)
        if (d.rfind(fmt::format("rows: steps {}..{} ", prog_.schedule.firstBlockedStep,
                                lastBlocked),
                    0) == 0)
          d = fmt::format("rows: steps {}..{} ", prog_.schedule.firstBlockedStep,
                          prog_.schedule.lastBlockedStep) +
              d.substr(d.find(' ', std::string("rows: steps ").size()) + 1);
    prog_.decisions.push_back(fmt::format(
        "target groups ([Note: a group's first and last rows]): not taken: their {} bytes {}; "
        "the f32 correction finds each row's group by scanning the rows of its block",
        bytes,
        small ? fmt::format("would change the run schedules of calls with N = {}",
                            fmt::join(ns, ", "))
              : fmt::format("are more than 1 % of the {}-byte budget",
                            prog_.schedule.budgetBytes)));
  }

  /// The run schedule of a call with N rows for the decisions: the one of a call that
  /// overwrites dW where the Program serves only those ([Note: values scaled in place]).
  RunSchedule exampleSchedule(int64_t n) const {
    return prog_.runSchedule(n, /*outputFree=*/prog_.schedule.slabOnly);
  }

  /// [Note: values scaled in place] (Program.h): where the budget holds the stored values
  /// of too few rows for the materialized blocks, the materialized schedule with the values
  /// in dW's memory and scaled there, for the calls it serves (plan::servesCall); "" when
  /// taken, else why not (the Program is then as it was).
  std::string materializeInPlace() {
    if (!opt_.storeInOutput)
      return "off (LCEJIT_STORE_IN_OUTPUT=0)";
    Program saved = prog_;
    std::string why = materializeBackward(prog_, opt_.name, opt_.exactTargetLogit,
                                          opt_.rowScaled, /*scaleInPlace=*/true);
    if (why.empty())
      why = allowSlabs();
    if (why.empty()) {
      prog_.schedule.slabOnly = true;
      // The workspace grows with N: if the largest N of the bucket that a slab block holds
      // is served, so is every smaller one. (Asked of a copy with its row blocks decided,
      // as they will be below.)
      const int64_t top = std::min(bucket_, slabRowsMax(prog_));
      Program trial = prog_;
      std::swap(prog_, trial);
      decideRowBlocks();
      const bool serves = servesCall(prog_, prog_.runSchedule(top, /*outputFree=*/true));
      std::swap(prog_, trial);
      if (top < std::max<int64_t>(bucketLow_, 1))
        why = fmt::format("no N of the bucket fits a slab block (at most {} rows)",
                          slabRowsMax(prog_));
      else if (!serves)
        why = fmt::format("at N = {} the slabs do not fit the budget", top);
    }
    if (!why.empty())
      prog_ = std::move(saved);
    return why;
  }

  /// [Note: stored values in dW] (SchedulePolicy.h): marks the materialized schedule's
  /// kernels that touch the stored values and the ScheduleSpec fields that let a call keep
  /// them in dW's memory; returns why not ("" when done). Only the row-scaled wgmma
  /// schedule (its stored values are dZ's operand as they are) with an f32 dW written
  /// through TMA.
  std::string allowSlabs() {
    GemmReduceKernel *fwd = nullptr;
    for (Kernel &k : prog_.kernels)
      if (auto *g = std::get_if<GemmReduceKernel>(&k.body); g && g->stored)
        fwd = g;
    if (!fwd || !fwd->stored->rowScaled)
      return "the stored values are formed into dZ in place (tile maxima)";
    if (fwd->gemm.math != MathMode::WgmmaBF16 || fwd->gemm.tile.epilogueCols() > kSlabCols ||
        kSlabCols % fwd->gemm.tile.epilogueCols() != 0)
      return "the forward is not a wgmma GEMM whose tiles lie in one slab";
    const BufferRef values = fwd->stored->values;
    if (values.space != Space::Workspace)
      return "the stored values are not a workspace buffer";
    int32_t out = -1, lhs = 0, rhs = 0;
    std::string why;
    for (Kernel &k : prog_.kernels) {
      if (auto *z = std::get_if<GemmDzKernel>(&k.body); z && z->dz == values) {
        if (z->gemm.math != MathMode::WgmmaBF16 || !z->rowFilter.valid() ||
            kSlabCols % z->gemm.tile.bn != 0 || z->dzLo.valid())
          why = "a dZ GEMM writes the stored values other than filtered by rows";
      } else if (auto *d = std::get_if<GemmDLhsKernel>(&k.body); d && d->dz == values) {
        ++lhs;
        if (d->math != MathMode::WgmmaBF16 || d->dzLo.valid())
          why = "dA does not read the stored values through TMA";
      } else if (auto *d = std::get_if<GemmDRhsKernel>(&k.body); d && d->dz == values) {
        ++rhs;
        if (d->math != MathMode::WgmmaBF16 || !d->tile.tmaStore || d->dzLo.valid() ||
            d->out.space != Space::Output || d->targetSums.valid())
          why = "dB does not write an output of f32 through TMA";
        else if (out >= 0 && out != d->out.index)
          why = "dB writes two outputs";
        else
          out = d->out.index;
      }
    }
    if (!why.empty())
      return why;
    if (lhs != 1 || rhs < 1 || out < 0)
      return "no dA and dB over the stored values";
    const TensorSpec &dw = prog_.outputs[static_cast<size_t>(out)];
    if (dw.dtype != DType::F32 || dw.shape.size() != 2 || dw.shape[0] != prog_.loopCols)
      return fmt::format("{} is not an f32 [{}, k] output", dw.name, prog_.loopCols);
    fwd->stored->slabs = true;
    for (Kernel &k : prog_.kernels) {
      if (auto *z = std::get_if<GemmDzKernel>(&k.body); z && z->dz == values)
        z->slabs = true;
      else if (auto *d = std::get_if<GemmDLhsKernel>(&k.body); d && d->dz == values)
        d->slabs = true;
      else if (auto *d = std::get_if<GemmDRhsKernel>(&k.body); d && d->dz == values)
        d->slabs = true;
      else if (auto *f = std::get_if<DzFormKernel>(&k.body);
               f && f->scaleValues && f->dz == values)
        f->slabs = true; // [Note: values scaled in place]
    }
    ScheduleSpec &spec = prog_.schedule;
    spec.slabValues = values.index;
    spec.slabOutput = out;
    spec.slabScaledA = -1;
    spec.slabScaledAParts = 1;
    for (const Kernel &k : prog_.kernels)
      if (const auto *f = std::get_if<DzFormKernel>(&k.body);
          f && f->aScaled.valid() && f->aLd > 0 && f->k > 0) {
        spec.slabScaledA = f->aScaled.index;
        spec.slabScaledAParts = static_cast<int32_t>(f->aLd / f->k);
      }
    return "";
  }

  /// [Note: sm90 split-K]: what the launch of a full row block's dA does at N = n (the
  /// split is the launch's: Program::launchDims for the block's rows).
  void describeLhsSplit(int64_t n) {
    const RunSchedule s = exampleSchedule(n);
    for (int32_t k = 0; k < static_cast<int32_t>(prog_.kernels.size()); ++k) {
      const auto *d = std::get_if<GemmDLhsKernel>(&prog_.kernels[static_cast<size_t>(k)].body);
      if (!d || d->math != MathMode::WgmmaBF16 || d->tile.splitK <= 1 || s.chunkCols <= 0)
        continue;
      const int64_t rows = std::min(s.rowsPerBlock, n);
      if (!prog_.launches(k, rows, s.chunkCols)) // [Note: dA widths per launch]
        continue;
      const int64_t tiles = ((rows + 127) / 128) * ((d->k + d->tile.bn - 1) / d->tile.bn);
      const int64_t kblocks = (s.chunkCols + 63) / 64;
      const int32_t split = prog_.launchDims(k, rows, s.chunkCols).cluster;
      prog_.decisions.push_back(fmt::format(
          "dA split-K (example): N = {}: {} rows a block make {} tiles of 128x{} on {} SMs: "
          "{}",
          n, rows, tiles, d->tile.bn, opt_.target.numSMs,
          split > 1 ? fmt::format("clusters of {} CTAs per tile, each over about {} of the "
                                  "{} k-blocks, summed through distributed shared memory",
                                  split, kblocks / split, kblocks)
                    : std::string("one CTA per tile (split, the tiles would not all run at "
                                  "once: [Note: sm90 split-K])")));
    }
  }

  /// [Note: dA tile width] (SchedulePolicy.h): the materialized schedule's wgmma dA runs
  /// over the whole vocabulary per row block; its tile width is chosen from the rows of a
  /// block at the top of the bucket.
  ///
  /// [Note: sm90 split-K]: it may also split K over clusters when a call's tiles are few.
  /// Only here: the recompute's dA, an f32 accumulation per chunk, spills 16 bytes with
  /// the exchange compiled in (sm_90a, softcap).
  void tuneLhsTile() {
    if (!prog_.schedule.wholeRows || !prog_.hasChunkLoop())
      return;
    // The dA launches of calls at the bucket's low end, middle and top, as their run
    // schedules cut them: a call that overwrites dW where the Program may keep its stored
    // values in slabs (one long block, then ordinary ones), else the ordinary blocks; a
    // slab-only Program's served calls only.
    const bool free = prog_.schedule.slabValues >= 0;
    const std::vector<int64_t> ns = sampledNs();
    std::vector<int64_t> blocks;
    for (int64_t n : ns) {
      const RunSchedule s = prog_.runSchedule(n, free);
      if (!servesCall(prog_, s))
        continue;
      const int64_t head = s.slabGroup > 0 ? s.slabRows : 0;
      if (head > 0)
        blocks.push_back(head);
      for (int64_t begin = head; begin < n; begin += s.rowsPerBlock)
        blocks.push_back(std::min(s.rowsPerBlock, n - begin));
    }
    if (blocks.empty())
      return;
    std::vector<std::pair<int32_t, Kernel>> altKernels; // added after the loop below
    for (Kernel &kernel : prog_.kernels) {
      auto *d = std::get_if<GemmDLhsKernel>(&kernel.body);
      if (!d || d->math != MathMode::WgmmaBF16)
        continue;
      if (opt_.splitK && !d->tile.pingpong)
        d->tile.splitK = 4;
      if (opt_.lhsTileWidth > 0) { // one width: the caller's
        prog_.decisions.push_back(fmt::format("dA tile: 128x{}x64, given by the caller "
                                              "(LCEJIT_DA_TILE), not chosen",
                                              opt_.lhsTileWidth));
        d->tile.bn = opt_.lhsTileWidth;
        continue;
      }
      double costs[3] = {0, 0, 0};
      const int32_t bn = chooseLhsTileWidth(blocks, d->k, (prog_.loopCols + 63) / 64,
                                            opt_.target.numSMs, d->tile.splitK, costs);
      auto costOf = [&](int32_t w) { return costs[w == 256 ? 0 : w == 192 ? 1 : 2]; };
      if (bn != d->tile.bn)
        prog_.decisions.push_back(fmt::format(
            "dA tile: 128x{}x64 instead of 128x{}: over the dA launches of calls with N = {} "
            "({} launches of {} rows) the estimated dA time is {:.0f} % below ([Note: dA "
            "tile width])",
            bn, d->tile.bn, fmt::join(ns, ", "), blocks.size(), fmt::join(blocks, ", "),
            100.0 * (1.0 - costOf(bn) / costOf(d->tile.bn))));
      d->tile.bn = bn;
      // [Note: dA widths per launch]: a second width where choosing per launch pays.
      const int64_t kblocks = (prog_.loopCols + 63) / 64;
      const int32_t sms = opt_.target.numSMs, maxSplit = d->tile.splitK;
      int32_t alt = 0;
      double altCost = costOf(bn);
      for (int32_t w : {256, 192, 128}) {
        if (w == bn)
          continue;
        double c = 0;
        for (int64_t r : blocks)
          c += std::min(lhsLaunchCost(r, d->k, kblocks, sms, maxSplit, bn),
                        lhsLaunchCost(r, d->k, kblocks, sms, maxSplit, w));
        if (c < altCost * (1 - 1e-9)) {
          alt = w;
          altCost = c;
        }
      }
      if (alt == 0 || altCost > costOf(bn) * (1 - kLhsAlternativeGain))
        continue;
      std::vector<int64_t> altRows;
      for (int64_t r : blocks)
        if (lhsLaunchCost(r, d->k, kblocks, sms, maxSplit, alt) <
                lhsLaunchCost(r, d->k, kblocks, sms, maxSplit, bn) * (1 - 1e-9) &&
            std::find(altRows.begin(), altRows.end(), r) == altRows.end())
          altRows.push_back(r);
      const int32_t primary = static_cast<int32_t>(&kernel - prog_.kernels.data());
      Kernel copy = kernel;
      auto &cd = std::get<GemmDLhsKernel>(copy.body);
      cd.tile.bn = alt;
      cd.alternativeOf = primary;
      copy.name += fmt::format("_w{}", alt);
      prog_.decisions.push_back(fmt::format(
          "dA widths per launch ([Note: dA widths per launch]): {} also at 128x{}x64, run for "
          "the launches whose rows it suits (of the sampled ones: {} rows); over the launches "
          "of calls with N = {} the estimated dA time is {:.0f} % below one width",
          copy.name, alt, fmt::join(altRows, ", "), fmt::join(ns, ", "),
          100.0 * (1.0 - altCost / costOf(bn))));
      altKernels.push_back({primary, std::move(copy)});
    }
    for (auto &[primary, copy] : altKernels) {
      prog_.kernels.push_back(std::move(copy));
      const int32_t idx = static_cast<int32_t>(prog_.kernels.size()) - 1;
      for (Step &st : prog_.steps)
        if (st.kind == Step::Kind::ChunkLoop)
          if (auto at = std::find(st.loopKernels.begin(), st.loopKernels.end(), primary);
              at != st.loopKernels.end())
            st.loopKernels.insert(at + 1, idx);
    }
    addLhsStreamK(ns, blocks, free);
    addLhsChain(ns);
  }

  /// [Note: dA stream-K chains] (SchedulePolicy.h): the chain's buffer, for the dA kernels
  /// that run slab-block launches, where a sampled call that overwrites dW has the room for
  /// it on top of its schedule (plan::chooseRunSchedule adds it only there, so no schedule
  /// changes: checked below all the same).
  void addLhsChain(const std::vector<int64_t> &ns) {
    if (!opt_.daChain || prog_.schedule.slabValues < 0)
      return;
    const int32_t sms = opt_.target.numSMs;
    std::vector<int32_t> takers;
    int32_t widest = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(prog_.kernels.size()); ++i) {
      const auto *d = std::get_if<GemmDLhsKernel>(&prog_.kernels[static_cast<size_t>(i)].body);
      if (!d || !d->slabs || d->math != MathMode::WgmmaBF16 || d->tile.pingpong ||
          d->tile.clusterM != 1)
        continue;
      takers.push_back(i);
      widest = std::max(widest, d->tile.bn);
    }
    if (takers.empty())
      return;
    auto schedules = [&] { return sampledSchedules(ns, true); };
    const auto before = schedules();
    const int64_t bytes = lhsChainBytes(widest, sms);
    // No bytes of its own: a schedule's slab union holds RunSchedule::lhsChainBytes.
    const BufferRef buf = addWorkspace("dlhs_chain", 0, 0);
    prog_.workspace.back().blockLocal = true;
    prog_.schedule.lhsChain = buf.index;
    for (int32_t i : takers) // lhsChainScheduleBytes looks for them
      std::get<GemmDLhsKernel>(prog_.kernels[static_cast<size_t>(i)].body).chain = buf;
    // An example: the first call whose schedule has the slots, its slab block's dA, of the
    // sampled N and 16 more across the bucket (the slots cost no memory where they are not
    // taken, but the kernel compiles the chain's mainloop: only where some call runs it).
    std::vector<int64_t> probe = ns;
    const int64_t low = std::max<int64_t>(bucketLow_, 1);
    for (int i = 1; i < 16; ++i)
      probe.push_back(low + (bucket_ - low) * i / 16);
    std::string example;
    for (int64_t n : probe) {
      const RunSchedule r = prog_.runSchedule(n, true);
      if (r.lhsChainBytes <= 0)
        continue;
      for (int32_t i : takers) {
        const auto &d = std::get<GemmDLhsKernel>(prog_.kernels[static_cast<size_t>(i)].body);
        const int64_t kblocks = (prog_.loopCols + 63) / 64;
        const int64_t tiles = ((r.slabRows + 127) / 128) * ((d.k + d.tile.bn - 1) / d.tile.bn);
        if (!prog_.launches(i, r.slabRows, prog_.loopCols))
          continue;
        const int32_t q = lhsChainQ(tiles, kblocks, sms);
        if (q == 0)
          continue;
        const int64_t tail = lhsStreamKTail(tiles, sms);
        example = fmt::format("N = {}: its {} rows make {} tiles of 128x{} on {} SMs: {}{} tiles "
                              "in chains of {} on {} CTAs, {}/{} of a round",
                              n, r.slabRows, tiles, d.tile.bn, sms,
                              tiles > sms ? fmt::format("{} whole round{}, then ", tiles / sms,
                                                        tiles / sms == 1 ? "" : "s")
                                          : "",
                              tail, q, tail + (tail + q - 1) / q, q, q + 1);
        break;
      }
      if (!example.empty())
        break;
    }
    if (example.empty() || schedules() != before) {
      for (int32_t i : takers)
        std::get<GemmDLhsKernel>(prog_.kernels[static_cast<size_t>(i)].body).chain = {};
      prog_.workspace.pop_back();
      prog_.schedule.lhsChain = -1;
      prog_.decisions.push_back(fmt::format(
          "dA stream-K chains ([Note: dA stream-K chains]): not taken: {}",
          example.empty() ? fmt::format("no call that overwrites dW of 19 across the bucket "
                                        "(N = {}, ...) chains its slab block's dA with room for "
                                        "the slots",
                                        fmt::join(ns, ", "))
                          : std::string("the slots would change a sampled run schedule")));
      return;
    }
    prog_.decisions.push_back(fmt::format(
        "dA stream-K chains ([Note: dA stream-K chains]): the slab block's dA runs its last "
        "round in chains of q tiles on q + 1 CTAs (each over q/(q+1) of K; a helper hands "
        "the end of a tile to its owner through the tile's slot) where the budget holds the "
        "flags and slots (at most {} bytes) after the slab union (for example {})",
        bytes, example));
  }

  /// What a scratch buffer must leave as it was: the run schedules of calls with N in `ns`
  /// (overwriting dW when `free`), their blocks, chunks, splits and slabs.
  std::vector<std::array<int64_t, 10>> sampledSchedules(const std::vector<int64_t> &ns,
                                                        bool free) const {
    std::vector<std::array<int64_t, 10>> out;
    for (int64_t n : ns) {
      const RunSchedule r = prog_.runSchedule(n, free);
      out.push_back({r.rowsPerBlock, r.rowBlocks, r.chunkCols, r.chunks, r.splits, r.slabGroup,
                     r.slabRows, r.slabSplit, r.slabHead, r.overBudget});
    }
    return out;
  }

  /// [Note: dA stream-K] (SchedulePolicy.h): the scratch of the dA launches plan::lhsStreamK
  /// takes, where one of the sampled launches (`blocks`, of calls with N in `ns`) is one,
  /// and only where the scratch leaves every sampled run schedule as it was (the budget's
  /// rows are worth more than the stream-K).
  void addLhsStreamK(const std::vector<int64_t> &ns, const std::vector<int64_t> &blocks,
                     bool free) {
    if (!opt_.daStreamK)
      return;
    const int64_t kblocks = (prog_.loopCols + 63) / 64;
    const int32_t sms = opt_.target.numSMs;
    std::vector<int32_t> takers;
    int32_t widest = 0;
    int64_t example = 0, exampleTiles = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(prog_.kernels.size()); ++i) {
      const auto *d = std::get_if<GemmDLhsKernel>(&prog_.kernels[static_cast<size_t>(i)].body);
      if (!d || d->math != MathMode::WgmmaBF16 || d->tile.pingpong || d->tile.clusterM != 1)
        continue;
      takers.push_back(i);
      for (int64_t rows : blocks) {
        const int64_t tiles = ((rows + 127) / 128) * ((d->k + d->tile.bn - 1) / d->tile.bn);
        if (chooseSplitK(tiles, kblocks, sms, d->tile.splitK) == 1 &&
            lhsStreamK(tiles, kblocks, sms)) {
          widest = std::max(widest, d->tile.bn);
          if (example == 0) {
            example = rows;
            exampleTiles = tiles;
          }
        }
      }
    }
    if (widest == 0)
      return;
    auto schedules = [&] { return sampledSchedules(ns, free); };
    const int64_t bytes = lhsStreamKBytes(widest, sms);
    // The schedules compared below are samples of the bucket: a scratch that is a visible
    // share of the budget can still take rows from a call between them (a 100 MiB budget
    // lost the slab tails of N = 6000 to 3.2 MB), so it is taken only within 1 % of it.
    if (bytes * 100 > prog_.schedule.budgetBytes) {
      prog_.decisions.push_back(fmt::format(
          "dA stream-K ([Note: dA stream-K]): not taken: its {} bytes of scratch are more "
          "than 1 % of the {}-byte budget",
          bytes, prog_.schedule.budgetBytes));
      return;
    }
    const auto before = schedules();
    const BufferRef scratch = addWorkspace("dlhs_stream_k", 0, bytes, BufferInit::Zero);
    if (schedules() != before) {
      prog_.workspace.pop_back();
      prog_.decisions.push_back(fmt::format(
          "dA stream-K ([Note: dA stream-K]): not taken: its {} bytes of scratch would change "
          "the run schedules of calls with N = {}",
          bytes, fmt::join(ns, ", ")));
      return;
    }
    for (int32_t i : takers)
      std::get<GemmDLhsKernel>(prog_.kernels[static_cast<size_t>(i)].body).streamK = scratch;
    const int64_t tail = lhsStreamKTail(exampleTiles, sms);
    prog_.decisions.push_back(fmt::format(
        "dA stream-K ([Note: dA stream-K]): a launch of T tiles, T a multiple of 3 that does "
        "not split K, on 4 T / 3 CTAs: 3 tiles to each group of 4, every CTA over 3/4 of K; a "
        "launch of more tiles than SMs the same way for a last round of such a T (of the "
        "sampled launches: {} rows, {} tiles of 128x{} on {} SMs: {}{} tiles on {} CTAs); {} "
        "bytes of scratch",
        example, exampleTiles, widest, sms,
        exampleTiles > sms ? fmt::format("{} whole rounds, then ", exampleTiles / sms) : "",
        tail, tail / 3 * 4, bytes));
  }

  /// [Note: row blocks] The steps from the first fused GEMM to the last step of the
  /// gradients may run once per block of rows when nothing in them needs all rows at once:
  /// no device check or row index (they would see block-relative rows), no scalar that a
  /// kernel of the range sums up and another reads inside it, and every dRhs gradient
  /// accumulates in f32 (row blocks after the first add to it). Then a large N needs
  /// workspace for one block only. Whether a call is blocked, and how, is decided per N
  /// (SchedulePolicy.h).
  void decideRowBlocks() {
    int32_t first = -1, last = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(prog_.steps.size()); ++i) {
      const Step &st = prog_.steps[static_cast<size_t>(i)];
      bool gemm = st.kind == Step::Kind::ChunkLoop ||
                  prog_.kernels[static_cast<size_t>(st.kernel)].kind() == KernelKind::GemmReduce;
      bool blockCast = false;
      if (st.kind == Step::Kind::Launch)
        if (auto *c = std::get_if<CastKernel>(&prog_.kernels[static_cast<size_t>(st.kernel)].body))
          blockCast = c->in.space == Space::Workspace &&
                      prog_.workspace[static_cast<size_t>(c->in.index)].blockLocal;
      const bool correction =
          st.kind == Step::Kind::Launch &&
          prog_.kernels[static_cast<size_t>(st.kernel)].kind() == KernelKind::TargetCorrection;
      if (gemm && first < 0)
        first = i;
      if (st.kind == Step::Kind::ChunkLoop || blockCast || correction)
        last = i;
    }
    if (first < 0 || last < first || !prog_.hasChunkLoop())
      return;
    std::vector<int32_t> kernels;
    for (int32_t i = first; i <= last; ++i) {
      const Step &st = prog_.steps[static_cast<size_t>(i)];
      if (st.kind == Step::Kind::Launch)
        kernels.push_back(st.kernel);
      else
        kernels.insert(kernels.end(), st.loopKernels.begin(), st.loopKernels.end());
    }
    std::vector<int32_t> summed;
    std::string why;
    auto operandsOf = [](const Kernel &k) -> const std::vector<Operand> * {
      if (auto *r = std::get_if<RowKernel>(&k.body))
        return &r->args;
      if (auto *g = std::get_if<GemmReduceKernel>(&k.body))
        return &g->gemm.args;
      if (auto *g = std::get_if<GemmDzKernel>(&k.body))
        return &g->gemm.args;
      return nullptr;
    };
    for (int32_t ki : kernels) {
      const Kernel &k = prog_.kernels[static_cast<size_t>(ki)];
      if (auto *r = std::get_if<RowKernel>(&k.body))
        for (const RowKernel::Sink &sk : r->sinks) {
          if (sk.kind == RowKernel::Sink::Kind::CheckRow)
            why = fmt::format("kernel '{}' checks rows", k.name);
          if (sk.kind == RowKernel::Sink::Kind::SumScalar)
            summed.push_back(sk.slot);
        }
      if (auto *d = std::get_if<GemmDRhsKernel>(&k.body); d && d->outType != DType::F32)
        why = fmt::format("kernel '{}' writes a {} gradient (row blocks would need an f32 "
                          "accumulator of its full size)",
                          k.name, dtypeName(d->outType));
    }
    for (int32_t ki : kernels) {
      const Kernel &k = prog_.kernels[static_cast<size_t>(ki)];
      if (const auto *ops = operandsOf(k))
        for (const Operand &o : *ops) {
          if (o.kind == Operand::Kind::RowIndex)
            why = fmt::format("kernel '{}' reads the row index", k.name);
          if (o.kind == Operand::Kind::Scalar && !o.buf.valid() &&
              std::find(summed.begin(), summed.end(), o.slot) != summed.end())
            why = fmt::format("kernel '{}' reads scalar slot {}, a sum over rows made in the "
                              "same steps",
                              k.name, o.slot);
        }
    }
    if (!why.empty()) {
      prog_.decisions.push_back(fmt::format("rows: never blocked: {}", why));
      return;
    }
    prog_.schedule.firstBlockedStep = first;
    prog_.schedule.lastBlockedStep = last;
    // A row buffer that only kernels of these steps touch needs one block's rows (the
    // kernels see it from the block's first row either way).
    std::vector<uint8_t> outside(prog_.workspace.size(), 0);
    for (int32_t ki = 0; ki < static_cast<int32_t>(prog_.kernels.size()); ++ki)
      if (std::find(kernels.begin(), kernels.end(), ki) == kernels.end())
        forEachBufferRef(prog_.kernels[static_cast<size_t>(ki)], [&](BufferRef &b) {
          if (b.space == Space::Workspace && b.index >= 0)
            outside[static_cast<size_t>(b.index)] = 1;
        });
    std::vector<std::string> local;
    for (size_t i = kErrorBuffer + 1; i < prog_.workspace.size(); ++i) {
      BufferSpec &b = prog_.workspace[i];
      if (!outside[i] && !b.blockLocal && b.bytesPerRow > 0 && b.bytesPerRowCol == 0 &&
          b.init == BufferInit::None) {
        b.blockLocal = true;
        local.push_back(b.name);
      }
    }
    prog_.decisions.push_back(fmt::format(
        "rows: steps {}..{} may run per block of rows (at least {} rows) when the budget "
        "needs it{}",
        first, last, prog_.schedule.minBlockRows,
        local.empty() ? std::string()
                      : fmt::format("; {} hold one block's rows", fmt::join(local, ", "))));
  }

  struct GlobalRef {
    int32_t slot;
    bool mean;
  };

  /// RowDotKernels made so far: (GemmReduce kernel, target buffer) -> their output.
  std::vector<std::pair<std::pair<int32_t, BufferRef>, BufferRef>> rowDots_;
  func::FuncOp func_;
  PlanOptions opt_;
  Program prog_;
  std::string err_;
  int64_t bucket_ = 0, bucketLow_ = 0;
  int32_t fwdCount_ = 0, gradCount_ = 0;
  llvm::DenseMap<Value, int64_t> level_;
  llvm::DenseMap<Operation *, int64_t> gemmLevel_;
  llvm::DenseMap<Value, BufferRef> rowBuffer_;
  llvm::DenseMap<Value, int32_t> scalarSlot_;
  llvm::DenseMap<Value, PartialsRef> partials_;
  llvm::DenseMap<Value, GlobalRef> global_;
};

} // namespace

std::optional<Program> planProgram(func::FuncOp func, const PlanOptions &options,
                                   std::string *error) {
  Planner p(func, options);
  return p.run(error);
}

} // namespace lcejit::plan
