//===- Autodiff.cpp - Reverse-mode differentiation of tx ------------------===//
//
// See TxAutodiff in Passes.td for the algorithm. Adjoints are f32 tensors with the shape
// of their primal value. Forward values of other float types are cast to f32 where a
// rule multiplies by them, so the derivative graph is exact at the graph level; the
// planner decides later how much precision each kernel keeps.
//
//===----------------------------------------------------------------------===//

#include "compiler/dialect/TxBuilder.h"
#include "compiler/transforms/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

namespace lcejit::tx {
#define GEN_PASS_DEF_TXAUTODIFF
#include "compiler/transforms/Passes.h.inc"
} // namespace lcejit::tx

using namespace mlir;
using namespace lcejit::tx;

namespace {

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

class Differentiator {
public:
  Differentiator(GradOp grad) : grad_(grad), builder_(grad), tb_(builder_, grad.getLoc()) {}

  LogicalResult run() {
    Block *block = grad_->getBlock();
    // 1. Varied values: reachable from wrt through float results.
    for (Value w : grad_.getWrt())
      varied_.insert(w);
    SmallVector<Operation *> ops;
    for (Operation &op : *block) {
      if (&op == grad_.getOperation())
        break;
      ops.push_back(&op);
      bool anyVaried = llvm::any_of(op.getOperands(), [&](Value v) { return varied_.count(v); });
      if (!anyVaried)
        continue;
      for (Value r : op.getResults())
        if (isFloatTensor(r))
          varied_.insert(r);
    }
    // 2. Seed and sweep backwards.
    Value loss = grad_.getLoss();
    if (varied_.count(loss))
      accumulate(loss, tb_.constantF32(1.0));
    for (Operation *op : llvm::reverse(ops)) {
      bool hasAdjoint = llvm::any_of(op->getResults(), [&](Value r) { return adj_.count(r); });
      if (!hasAdjoint)
        continue;
      tb_.setLoc(op->getLoc());
      if (failed(visit(op)))
        return failure();
    }
    // 3. Replace the grad results.
    tb_.setLoc(grad_.getLoc());
    for (auto [w, g] : llvm::zip(grad_.getWrt(), grad_.getGrads())) {
      Value a = adj_.lookup(w);
      if (!a) {
        // The loss does not depend on w: a zero gradient.
        a = tb_.broadcast(tb_.constantF32(0.0), TxBuilder::shape(w));
      }
      g.replaceAllUsesWith(a);
    }
    grad_.erase();
    return success();
  }

private:
  bool active(Value v) { return varied_.count(v) && isFloatTensor(v); }

  void accumulate(Value primal, Value contribution) {
    auto it = adj_.find(primal);
    if (it == adj_.end())
      adj_[primal] = contribution;
    else
      it->second = tb_.add(it->second, contribution);
  }

  /// Adds `g` (broadcast shape) to the adjoint of operand `x`, summing broadcast dims.
  void give(Value x, Value g) {
    if (!active(x))
      return;
    accumulate(x, tb_.unbroadcast(g, TxBuilder::shape(x)));
  }

  Value f32(Value v) { return tb_.toF32(v); }

  LogicalResult visit(Operation *op) {
    Value g = adj_.lookup(op->getResult(0));
    if (op->getNumResults() != 1)
      return op->emitOpError("cannot be differentiated (more than one result)");
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case<AddOp>([&](AddOp o) {
          give(o.getLhs(), g);
          give(o.getRhs(), g);
          return success();
        })
        .Case<SubOp>([&](SubOp o) {
          give(o.getLhs(), g);
          if (active(o.getRhs()))
            give(o.getRhs(), tb_.neg(g));
          return success();
        })
        .Case<MulOp>([&](MulOp o) {
          if (active(o.getLhs()))
            give(o.getLhs(), tb_.mul(g, f32(o.getRhs())));
          if (active(o.getRhs()))
            give(o.getRhs(), tb_.mul(g, f32(o.getLhs())));
          return success();
        })
        .Case<DivOp>([&](DivOp o) {
          Value y = f32(o.getRhs());
          if (active(o.getLhs()))
            give(o.getLhs(), tb_.div(g, y));
          if (active(o.getRhs()))
            give(o.getRhs(), tb_.neg(tb_.div(tb_.mul(g, f32(o.getResult())), y)));
          return success();
        })
        .Case<MaxOp>([&](MaxOp o) {
          // Ties go to the left operand.
          Value takeLeft = tb_.cmp(CmpPredicate::ge, o.getLhs(), o.getRhs());
          Value zero = tb_.constantF32(0.0);
          if (active(o.getLhs()))
            give(o.getLhs(), tb_.select(takeLeft, g, zero));
          if (active(o.getRhs()))
            give(o.getRhs(), tb_.select(takeLeft, zero, g));
          return success();
        })
        .Case<NegOp>([&](NegOp o) {
          give(o.getInput(), tb_.neg(g));
          return success();
        })
        .Case<ExpOp>([&](ExpOp o) {
          give(o.getInput(), tb_.mul(g, f32(o.getResult())));
          return success();
        })
        .Case<LogOp>([&](LogOp o) {
          give(o.getInput(), tb_.div(g, f32(o.getInput())));
          return success();
        })
        .Case<TanhOp>([&](TanhOp o) {
          Value t = f32(o.getResult());
          give(o.getInput(), tb_.mul(g, tb_.sub(tb_.constantF32(1.0), tb_.mul(t, t))));
          return success();
        })
        .Case<SelectOp>([&](SelectOp o) {
          Value zero = tb_.constantF32(0.0);
          if (active(o.getTrueValue()))
            give(o.getTrueValue(), tb_.select(o.getCond(), g, zero));
          if (active(o.getFalseValue()))
            give(o.getFalseValue(), tb_.select(o.getCond(), zero, g));
          return success();
        })
        .Case<CastOp>([&](CastOp o) {
          give(o.getInput(), g);
          return success();
        })
        .Case<BroadcastOp>([&](BroadcastOp o) {
          give(o.getInput(), g);
          return success();
        })
        .Case<MatmulOp>([&](MatmulOp o) { return visitMatmul(o, g); })
        .Case<ReduceSumOp>([&](ReduceSumOp o) {
          give(o.getInput(), tb_.broadcast(g, TxBuilder::shape(o.getInput())));
          return success();
        })
        .Case<MeanOp>([&](MeanOp o) {
          Value scaled = tb_.div(g, count(o.getInput(), o.getAxis()));
          give(o.getInput(), tb_.broadcast(scaled, TxBuilder::shape(o.getInput())));
          return success();
        })
        .Case<ReduceMaxOp>([&](ReduceMaxOp o) {
          // Every element equal to the maximum receives the gradient.
          Value isMax = tb_.cmp(CmpPredicate::eq, o.getInput(), o.getResult());
          Value gb = tb_.broadcast(g, TxBuilder::shape(isMax));
          give(o.getInput(), tb_.select(isMax, gb, tb_.constantF32(0.0)));
          return success();
        })
        .Case<LogSumExpOp>([&](LogSumExpOp o) {
          Value p = tb_.exp(tb_.sub(f32(o.getInput()), f32(o.getResult())));
          give(o.getInput(), tb_.mul(g, p));
          return success();
        })
        .Case<GatherOp>([&](GatherOp o) { return visitGather(o, g); })
        .Default([&](Operation *other) {
          return other->emitOpError("cannot be differentiated by --tx-autodiff");
        });
  }

  /// Number of elements a mean averages, as an f32 rank-0 tensor.
  Value count(Value x, std::optional<int64_t> axis) {
    auto s = TxBuilder::shape(x);
    SmallVector<int64_t> axes;
    if (axis)
      axes.push_back(*axis);
    else
      for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
        axes.push_back(d);
    double staticCount = 1.0;
    Value dynamic;
    for (int64_t d : axes) {
      if (ShapedType::isDynamic(s[d])) {
        Value n = tb_.toF32(tb_.dim(x, d));
        dynamic = dynamic ? tb_.mul(dynamic, n) : n;
      } else {
        staticCount *= static_cast<double>(s[d]);
      }
    }
    Value c = tb_.constantF32(staticCount);
    return dynamic ? tb_.mul(dynamic, c) : c;
  }

  LogicalResult visitMatmul(MatmulOp o, Value g) {
    Value a = o.getLhs(), b = o.getRhs();
    bool ta = o.getTransposeLhs(), tbr = o.getTransposeRhs();
    if (active(a)) {
      // da = g · op(B)ᵀ; dA = da or daᵀ.
      Value dA = ta ? tb_.matmul(b, g, tbr, true) : tb_.matmul(g, b, false, !tbr);
      give(a, dA);
    }
    if (active(b)) {
      // db = op(A)ᵀ · g; dB = db or dbᵀ.
      Value dB = tbr ? tb_.matmul(g, a, true, ta) : tb_.matmul(a, g, !ta, false);
      give(b, dB);
    }
    return success();
  }

  LogicalResult visitGather(GatherOp o, Value g) {
    Value src = o.getSource();
    if (!active(src))
      return success();
    auto s = TxBuilder::shape(src);
    int64_t axis = o.getAxis();
    if (ShapedType::isDynamic(s[axis]))
      return o.emitOpError("gather along the dynamic dimension is not differentiable");
    if (TxBuilder::shape(o.getIndex())[axis] != 1)
      return o.emitOpError("gather with more than one index along the axis is not "
                           "differentiable yet (index size ")
             << TxBuilder::shape(o.getIndex())[axis] << ")";
    SmallVector<int64_t> iotaShape(s.size(), 1);
    iotaShape[axis] = s[axis];
    Value idx = o.getIndex();
    Value positions = tb_.iota(iotaShape, axis, TxBuilder::elementType(idx));
    Value hit = tb_.cmp(CmpPredicate::eq, positions, idx);
    give(src, tb_.select(hit, g, tb_.constantF32(0.0)));
    return success();
  }

  GradOp grad_;
  OpBuilder builder_;
  TxBuilder tb_;
  llvm::DenseSet<Value> varied_;
  llvm::DenseMap<Value, Value> adj_;
};

struct AutodiffPass : lcejit::tx::impl::TxAutodiffBase<AutodiffPass> {
  void runOnOperation() override {
    SmallVector<GradOp> grads;
    getOperation().walk([&](GradOp g) { grads.push_back(g); });
    for (GradOp g : grads) {
      Differentiator d(g);
      if (failed(d.run()))
        return signalPassFailure();
    }
  }
};

} // namespace
