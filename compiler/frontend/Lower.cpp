//===- Lower.cpp - Frontend graph -> tx dialect ----------------------------===//

#include "compiler/frontend/Lower.h"
#include "compiler/dialect/TxBuilder.h"
#include "compiler/support/Check.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <fmt/format.h>

using namespace mlir;

namespace lcejit::fe {

static Type elementType(MLIRContext &ctx, DType t) {
  Builder b(&ctx);
  switch (t) {
  case DType::BF16: return b.getBF16Type();
  case DType::F16: return b.getF16Type();
  case DType::F32: return b.getF32Type();
  case DType::F64: return b.getF64Type();
  case DType::I1: return b.getI1Type();
  case DType::I32: return b.getI32Type();
  case DType::I64: return b.getI64Type();
  }
  return {};
}

static RankedTensorType tensorType(MLIRContext &ctx, const Node &n) {
  SmallVector<int64_t> s;
  for (int64_t d : n.shape)
    s.push_back(d == kN ? ShapedType::kDynamic : d);
  return RankedTensorType::get(s, elementType(ctx, n.dtype));
}

static tx::CmpPredicate predicate(Cmp c) {
  switch (c) {
  case Cmp::Eq: return tx::CmpPredicate::eq;
  case Cmp::Ne: return tx::CmpPredicate::ne;
  case Cmp::Lt: return tx::CmpPredicate::lt;
  case Cmp::Le: return tx::CmpPredicate::le;
  case Cmp::Gt: return tx::CmpPredicate::gt;
  case Cmp::Ge: return tx::CmpPredicate::ge;
  }
  return tx::CmpPredicate::eq;
}

OwningOpRef<ModuleOp> lowerToTx(const Graph &g, MLIRContext &ctx) {
  LCEJIT_CHECK_ARG(!g.outputs().empty(), "graph '{}' has no outputs", g.name());
  ctx.getOrLoadDialect<tx::TxDialect>();
  ctx.getOrLoadDialect<func::FuncDialect>();
  Location loc = FileLineColLoc::get(&ctx, g.name(), 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(&ctx);
  b.setInsertionPointToEnd(module->getBody());

  SmallVector<Type> argTypes, resultTypes;
  for (int32_t id : g.inputs())
    argTypes.push_back(tensorType(ctx, g.node(id)));
  for (auto &[name, id] : g.outputs())
    resultTypes.push_back(tensorType(ctx, g.node(id)));
  auto func = func::FuncOp::create(b, loc, g.name(), b.getFunctionType(argTypes, resultTypes));
  for (auto [i, id] : llvm::enumerate(g.inputs()))
    func.setArgAttr(static_cast<unsigned>(i), "tx.name", b.getStringAttr(g.node(id).name));
  for (auto [i, out] : llvm::enumerate(g.outputs()))
    func.setResultAttr(static_cast<unsigned>(i), "tx.name", b.getStringAttr(out.first));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToEnd(entry);

  std::vector<Value> values(g.nodes().size());
  for (auto [i, id] : llvm::enumerate(g.inputs()))
    values[static_cast<size_t>(id)] = entry->getArgument(static_cast<unsigned>(i));
  tx::TxBuilder tb(b, loc);
  auto in = [&](const Node &n, size_t i) { return values[static_cast<size_t>(n.inputs[i])]; };

  for (size_t id = 0; id < g.nodes().size(); ++id) {
    const Node &n = g.nodes()[id];
    tb.setLoc(NameLoc::get(b.getStringAttr(fmt::format("%{} {}", id, opKindName(n.kind))), loc));
    Value v;
    switch (n.kind) {
    case OpKind::Input: continue;
    case OpKind::Constant:
      v = tb.constant(elementType(ctx, n.dtype), n.fValue, n.iValue);
      break;
    case OpKind::Iota:
      v = tb.iota(tensorType(ctx, n).getShape(), *n.axis, elementType(ctx, n.dtype));
      break;
    case OpKind::Dim: v = tb.dim(in(n, 0), *n.axis); break;
    case OpKind::Matmul: v = tb.matmul(in(n, 0), in(n, 1), n.transposeA, n.transposeB); break;
    case OpKind::Cast: v = tb.cast(in(n, 0), elementType(ctx, n.dtype)); break;
    case OpKind::Broadcast: v = tb.broadcast(in(n, 0), tensorType(ctx, n).getShape()); break;
    case OpKind::Add: v = tb.add(in(n, 0), in(n, 1)); break;
    case OpKind::Sub: v = tb.sub(in(n, 0), in(n, 1)); break;
    case OpKind::Mul: v = tb.mul(in(n, 0), in(n, 1)); break;
    case OpKind::Div: v = tb.div(in(n, 0), in(n, 1)); break;
    case OpKind::Max: v = tb.max(in(n, 0), in(n, 1)); break;
    case OpKind::Neg: v = tb.neg(in(n, 0)); break;
    case OpKind::Exp: v = tb.exp(in(n, 0)); break;
    case OpKind::Log: v = tb.log(in(n, 0)); break;
    case OpKind::Tanh: v = tb.tanh(in(n, 0)); break;
    case OpKind::Cmp: v = tb.cmp(predicate(n.cmp), in(n, 0), in(n, 1)); break;
    case OpKind::Select: v = tb.select(in(n, 0), in(n, 1), in(n, 2)); break;
    case OpKind::Sum: v = tb.reduceSum(in(n, 0), n.axis); break;
    case OpKind::MaxReduce: v = tb.reduceMax(in(n, 0), n.axis); break;
    case OpKind::Mean: v = tb.mean(in(n, 0), n.axis); break;
    case OpKind::LogSumExp: v = tb.logsumexp(in(n, 0), *n.axis); break;
    case OpKind::Gather: v = tb.gather(in(n, 0), in(n, 1), *n.axis); break;
    case OpKind::Grad: {
      SmallVector<Value> wrt;
      SmallVector<Type> types;
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        Value w = in(n, i);
        wrt.push_back(w);
        types.push_back(RankedTensorType::get(tx::TxBuilder::shape(w), b.getF32Type()));
      }
      auto grad = tx::GradOp::create(b, tb.loc(), types, in(n, 0), wrt);
      // GradResult nodes follow; remember the op through its first result.
      for (size_t i = 0; i < grad.getNumResults(); ++i)
        values[id + 1 + i] = grad.getResult(static_cast<unsigned>(i));
      continue;
    }
    case OpKind::GradResult:
      continue; // filled in by the Grad node
    }
    values[id] = v;
  }
  SmallVector<Value> results;
  for (auto &[name, id] : g.outputs())
    results.push_back(values[static_cast<size_t>(id)]);
  func::ReturnOp::create(b, loc, results);
  return module;
}

} // namespace lcejit::fe
