//===- Simplify.cpp - Algebraic simplification of tx ----------------------===//
//
// See TxSimplify in Passes.td. Every rule keeps the value's type and shape, and none
// drops a NaN (no x·0 → 0).
//
//===----------------------------------------------------------------------===//

#include "compiler/dialect/TxBuilder.h"
#include "compiler/transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lcejit::tx {
#define GEN_PASS_DEF_TXSIMPLIFY
#include "compiler/transforms/Passes.h.inc"
} // namespace lcejit::tx

using namespace mlir;
using namespace lcejit::tx;

namespace {

/// The value of a rank-0 tx.constant, if `v` is one.
std::optional<double> constantValue(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  if (auto f = dyn_cast<FloatAttr>(c.getValue()))
    return f.getValueAsDouble();
  if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
    return static_cast<double>(i.getValue().getSExtValue());
  return std::nullopt;
}

bool isConstant(Value v, double x) {
  auto c = constantValue(v);
  return c && *c == x;
}

/// `op(x, k)` → x (or `op(k, x)` when commutative) for the neutral constant k.
template <typename OpT>
struct DropNeutral : OpRewritePattern<OpT> {
  DropNeutral(MLIRContext *ctx, double neutral, bool commutative)
      : OpRewritePattern<OpT>(ctx), neutral_(neutral), commutative_(commutative) {}
  LogicalResult matchAndRewrite(OpT op, PatternRewriter &rw) const override {
    Value l = op.getLhs(), r = op.getRhs();
    if (isConstant(r, neutral_) && l.getType() == op.getType()) {
      rw.replaceOp(op, l);
      return success();
    }
    if (commutative_ && isConstant(l, neutral_) && r.getType() == op.getType()) {
      rw.replaceOp(op, r);
      return success();
    }
    return failure();
  }
  double neutral_;
  bool commutative_;
};

struct NegNeg : OpRewritePattern<NegOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(NegOp op, PatternRewriter &rw) const override {
    auto inner = op.getInput().getDefiningOp<NegOp>();
    if (!inner)
      return failure();
    rw.replaceOp(op, inner.getInput());
    return success();
  }
};

struct SubRules : OpRewritePattern<SubOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SubOp op, PatternRewriter &rw) const override {
    // 0 - x -> neg(x)
    if (isConstant(op.getLhs(), 0.0) && op.getRhs().getType() == op.getType() &&
        isa<FloatType>(TxBuilder::elementType(op.getRhs()))) {
      rw.replaceOpWithNewOp<NegOp>(op, op.getType(), op.getRhs());
      return success();
    }
    // x - neg(y) -> x + y
    if (auto n = op.getRhs().getDefiningOp<NegOp>()) {
      rw.replaceOpWithNewOp<AddOp>(op, op.getType(), op.getLhs(), n.getInput());
      return success();
    }
    return failure();
  }
};

struct CastCast : OpRewritePattern<CastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CastOp op, PatternRewriter &rw) const override {
    auto inner = op.getInput().getDefiningOp<CastOp>();
    if (!inner)
      return failure();
    Type a = TxBuilder::elementType(inner.getInput());
    Type b = TxBuilder::elementType(inner.getResult());
    // Only an exact (widening float) inner cast may be skipped.
    auto fa = dyn_cast<FloatType>(a), fb = dyn_cast<FloatType>(b);
    if (!fa || !fb || fb.getWidth() <= fa.getWidth() ||
        fb.getFPMantissaWidth() < fa.getFPMantissaWidth())
      return failure();
    if (inner.getInput().getType() == op.getType())
      rw.replaceOp(op, inner.getInput());
    else
      rw.replaceOpWithNewOp<CastOp>(op, op.getType(), inner.getInput());
    return success();
  }
};

struct SelectSame : OpRewritePattern<SelectOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SelectOp op, PatternRewriter &rw) const override {
    if (op.getTrueValue() != op.getFalseValue() || op.getTrueValue().getType() != op.getType())
      return failure();
    rw.replaceOp(op, op.getTrueValue());
    return success();
  }
};

struct BroadcastBroadcast : OpRewritePattern<BroadcastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BroadcastOp op, PatternRewriter &rw) const override {
    auto inner = op.getInput().getDefiningOp<BroadcastOp>();
    if (!inner)
      return failure();
    rw.replaceOpWithNewOp<BroadcastOp>(op, op.getType(), inner.getInput());
    return success();
  }
};

struct SimplifyPass : lcejit::tx::impl::TxSimplifyBase<SimplifyPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    RewritePatternSet patterns(ctx);
    patterns.add<DropNeutral<AddOp>>(ctx, 0.0, true);
    patterns.add<DropNeutral<SubOp>>(ctx, 0.0, false);
    patterns.add<DropNeutral<MulOp>>(ctx, 1.0, true);
    patterns.add<DropNeutral<DivOp>>(ctx, 1.0, false);
    patterns.add<NegNeg, SubRules, CastCast, SelectSame, BroadcastBroadcast>(ctx);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
