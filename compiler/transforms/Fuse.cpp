//===- Fuse.cpp - matmul + [N, C] consumers -> gemm_reduce / gemm_grad ----===//
//
// See TxFuse in Passes.td for the algorithm. Terms used below:
//  - anchor: acc = matmul(lhs [N, K], rhs [C, K], transpose_rhs);
//  - big value: a tensor of the anchor's shape [N, C];
//  - side: a value a fused body reads per row ([N, 1]), per column ([1, C]) or once
//    (rank 0); constants and iota along axis 1 are recomputed inside the body instead;
//  - root: an op outside the body that consumes a big value (a row reduction for
//    gemm_reduce, a backward matmul for gemm_grad).
//
// [Note: ordering] Fused ops are created just before the terminator, uses are replaced,
// and the block is then sorted topologically. All tx ops are pure, so any order that
// respects SSA is correct, and this avoids reasoning about where sides are defined.
//
//===----------------------------------------------------------------------===//

#include "compiler/dialect/TxBuilder.h"
#include "compiler/transforms/Passes.h"

#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>

namespace lcejit::tx {
#define GEN_PASS_DEF_TXFUSE
#include "compiler/transforms/Passes.h.inc"
} // namespace lcejit::tx

using namespace mlir;
using namespace lcejit::tx;

namespace {

bool isElementwise(Operation *op) {
  return isa<AddOp, SubOp, MulOp, DivOp, MaxOp, NegOp, ExpOp, LogOp, TanhOp, CmpOp, SelectOp,
             CastOp, BroadcastOp>(op);
}

/// One fusion candidate: an anchor matmul and what hangs off it.
class Cluster {
public:
  explicit Cluster(MatmulOp anchor) : anchor_(anchor) {
    auto t = TxBuilder::type(anchor.getResult());
    bigShape_.assign(t.getShape().begin(), t.getShape().end());
  }

  static bool isAnchor(MatmulOp m) {
    if (m.getTransposeLhs() || !m.getTransposeRhs())
      return false;
    auto a = TxBuilder::type(m.getLhs()), b = TxBuilder::type(m.getRhs());
    return ShapedType::isDynamic(a.getDimSize(0)) && !ShapedType::isDynamic(a.getDimSize(1)) &&
           b.hasStaticShape() && a.getElementType() == b.getElementType();
  }

  bool isBig(Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.getShape() == ArrayRef<int64_t>(bigShape_);
  }

  /// A value a body can read: a side, or something recomputed (constant, iota axis 1).
  bool isSideLike(Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t || isBig(v))
      return false;
    if (v.getDefiningOp<ConstantOp>())
      return true;
    if (isColumnIota(v))
      return true;
    int64_t n = bigShape_[0], c = bigShape_[1];
    auto s = t.getShape();
    return s.empty() || (s.size() == 2 && s[0] == n && s[1] == 1) ||
           (s.size() == 2 && s[0] == 1 && s[1] == c);
  }

  bool isColumnIota(Value v) {
    auto io = v.getDefiningOp<IotaOp>();
    return io && io.getAxis() == 1 && TxBuilder::shape(v) == ArrayRef<int64_t>{1, bigShape_[1]};
  }

  /// Fusible big values (memoized): the anchor, or elementwise ops over fusible big
  /// values and side-like values.
  bool fusible(Value v) {
    auto it = fusible_.find(v);
    if (it != fusible_.end())
      return it->second;
    bool ok = false;
    if (v == anchor_.getResult()) {
      ok = true;
    } else if (isBig(v)) {
      Operation *op = v.getDefiningOp();
      if (op && isElementwise(op)) {
        ok = llvm::all_of(op->getOperands(), [&](Value o) {
          return isBig(o) ? fusible(o) : isSideLike(o);
        });
      }
    }
    fusible_[v] = ok;
    return ok;
  }

  bool dependsOnAnchor(Value v) {
    if (v == anchor_.getResult())
      return true;
    auto it = depends_.find(v);
    if (it != depends_.end())
      return it->second;
    bool d = false;
    if (Operation *op = v.getDefiningOp(); op && isBig(v))
      d = llvm::any_of(op->getOperands(), [&](Value o) { return isBig(o) && dependsOnAnchor(o); });
    depends_[v] = d;
    return d;
  }

  /// The big value a row-reduction root reduces, or null.
  Value forwardRootInput(Operation *op) {
    auto rowAxis = [](std::optional<int64_t> a) { return a && *a == 1; };
    Value in = llvm::TypeSwitch<Operation *, Value>(op)
                   .Case<LogSumExpOp>([&](auto o) { return o.getAxis() == 1 ? o.getInput() : Value(); })
                   .Case<ReduceSumOp, ReduceMaxOp, MeanOp>(
                       [&](auto o) { return rowAxis(o.getAxis()) ? o.getInput() : Value(); })
                   .Case<GatherOp>([&](GatherOp o) {
                     return o.getAxis() == 1 && isSideLike(o.getIndex()) ? o.getSource() : Value();
                   })
                   .Default([](Operation *) { return Value(); });
    if (!in || !isBig(in) || !fusible(in) || !dependsOnAnchor(in))
      return {};
    if (!TxBuilder::elementType(op->getResult(0)).isF32())
      return {};
    return in;
  }

  /// Collects roots. Returns false when some big value escapes (all-or-nothing).
  bool collect() {
    Block *block = anchor_->getBlock();
    for (Operation &op : *block) {
      if (Value in = forwardRootInput(&op)) {
        forwardRoots_.push_back(&op);
        addSlice(in);
        continue;
      }
      if (auto m = dyn_cast<MatmulOp>(&op)) {
        Value g = m.getLhs();
        if (!isBig(g) || !fusible(g) || !dependsOnAnchor(g))
          continue;
        bool dLhs = !m.getTransposeLhs() && !m.getTransposeRhs() && m.getRhs() == anchor_.getRhs();
        bool dRhs = m.getTransposeLhs() && !m.getTransposeRhs() && m.getRhs() == anchor_.getLhs();
        if (!dLhs && !dRhs)
          continue;
        auto &pair = gradRoots_[g];
        (dLhs ? pair.first : pair.second) = m;
        if (!llvm::is_contained(gradOrder_, g))
          gradOrder_.push_back(g);
        addSlice(g);
      }
    }
    if (forwardRoots_.empty() && gradOrder_.empty())
      return false;
    // Every user of a big value of the slice must be in the slice or a root.
    llvm::DenseSet<Operation *> roots(forwardRoots_.begin(), forwardRoots_.end());
    for (auto &[g, pair] : gradRoots_) {
      if (pair.first)
        roots.insert(pair.first);
      if (pair.second)
        roots.insert(pair.second);
    }
    // Values that do not depend on the anchor are recomputed in the bodies from their
    // sides, so they may keep users elsewhere (e.g. a onehot shared by two heads).
    for (Value v : slice_) {
      if (!dependsOnAnchor(v))
        continue;
      for (Operation *user : v.getUsers())
        if (!roots.count(user) && !(user->getNumResults() == 1 && slice_.count(user->getResult(0))))
          return false;
    }
    return true;
  }

  void rewrite() {
    Block *block = anchor_->getBlock();
    OpBuilder b(block->getTerminator());
    TxBuilder tb(b, anchor_.getLoc());
    if (!forwardRoots_.empty())
      rewriteForward(b, tb);
    for (Value g : gradOrder_)
      rewriteGrad(b, g);
  }

private:
  void addSlice(Value v) {
    if (!isBig(v) || !slice_.insert(v))
      return;
    if (v == anchor_.getResult())
      return;
    for (Value o : v.getDefiningOp()->getOperands())
      addSlice(o);
  }

  /// Emits scalar code for fused bodies.
  class BodyEmitter {
  public:
    BodyEmitter(Cluster &c, Location loc) : c_(c), loc_(loc), block_(new Block()) {
      MLIRContext *ctx = loc.getContext();
      acc_ = block_->addArgument(Float32Type::get(ctx), loc);
      col_ = block_->addArgument(IntegerType::get(ctx, 64), loc);
      b_ = std::make_unique<OpBuilder>(ctx);
      b_->setInsertionPointToEnd(block_);
    }

    OpBuilder &b() { return *b_; }
    Value col() { return col_; }
    llvm::ArrayRef<Value> sides() { return sides_; }
    Block *takeBlock() { return block_; }

    Value emit(Value v) {
      if (Value m = memo_.lookup(v))
        return m;
      Value r = emitUncached(v);
      memo_[v] = r;
      return r;
    }

    Value toF32(Value s) {
      Type t = s.getType();
      if (t.isF32())
        return s;
      if (auto ft = dyn_cast<FloatType>(t))
        return ft.getWidth() < 32 ? arith::ExtFOp::create(*b_, loc_, b_->getF32Type(), s).getResult()
                                  : arith::TruncFOp::create(*b_, loc_, b_->getF32Type(), s).getResult();
      if (t.isInteger(1))
        return arith::UIToFPOp::create(*b_, loc_, b_->getF32Type(), s);
      return arith::SIToFPOp::create(*b_, loc_, b_->getF32Type(), s);
    }

    Value toI64(Value s) {
      if (s.getType().isInteger(64))
        return s;
      return arith::ExtSIOp::create(*b_, loc_, b_->getI64Type(), s);
    }

  private:
    Value emitUncached(Value v) {
      if (v == c_.anchor_.getResult())
        return acc_;
      if (auto cst = v.getDefiningOp<ConstantOp>())
        return arith::ConstantOp::create(*b_, loc_, cst.getValue());
      if (c_.isColumnIota(v)) {
        Type et = TxBuilder::elementType(v);
        if (et.isInteger(64))
          return col_;
        return arith::TruncIOp::create(*b_, loc_, et, col_);
      }
      if (!c_.isBig(v)) {
        // A side operand: one block argument per distinct value.
        sides_.push_back(v);
        return block_->addArgument(TxBuilder::elementType(v), loc_);
      }
      Operation *op = v.getDefiningOp();
      SmallVector<Value> in;
      for (Value o : op->getOperands())
        in.push_back(emit(o));
      return scalarOp(op, in);
    }

    Value scalarOp(Operation *op, ArrayRef<Value> in) {
      OpBuilder &b = *b_;
      Location l = loc_;
      Type et = TxBuilder::elementType(op->getResult(0));
      bool fl = isa<FloatType>(et);
      return llvm::TypeSwitch<Operation *, Value>(op)
          .Case<AddOp>([&](auto) -> Value {
            return fl ? arith::AddFOp::create(b, l, in[0], in[1]).getResult()
                      : arith::AddIOp::create(b, l, in[0], in[1]).getResult();
          })
          .Case<SubOp>([&](auto) -> Value {
            return fl ? arith::SubFOp::create(b, l, in[0], in[1]).getResult()
                      : arith::SubIOp::create(b, l, in[0], in[1]).getResult();
          })
          .Case<MulOp>([&](auto) -> Value {
            return fl ? arith::MulFOp::create(b, l, in[0], in[1]).getResult()
                      : arith::MulIOp::create(b, l, in[0], in[1]).getResult();
          })
          .Case<DivOp>([&](auto) -> Value { return arith::DivFOp::create(b, l, in[0], in[1]); })
          .Case<MaxOp>([&](auto) -> Value {
            return fl ? arith::MaximumFOp::create(b, l, in[0], in[1]).getResult()
                      : arith::MaxSIOp::create(b, l, in[0], in[1]).getResult();
          })
          .Case<NegOp>([&](auto) -> Value { return arith::NegFOp::create(b, l, in[0]); })
          .Case<ExpOp>([&](auto) -> Value { return math::ExpOp::create(b, l, in[0]); })
          .Case<LogOp>([&](auto) -> Value { return math::LogOp::create(b, l, in[0]); })
          .Case<TanhOp>([&](auto) -> Value { return math::TanhOp::create(b, l, in[0]); })
          .Case<CmpOp>([&](CmpOp c) -> Value {
            Type ot = in[0].getType();
            if (isa<FloatType>(ot)) {
              static const arith::CmpFPredicate fp[] = {
                  arith::CmpFPredicate::OEQ, arith::CmpFPredicate::UNE, arith::CmpFPredicate::OLT,
                  arith::CmpFPredicate::OLE, arith::CmpFPredicate::OGT, arith::CmpFPredicate::OGE};
              return arith::CmpFOp::create(b, l, fp[static_cast<int>(c.getPredicate())], in[0], in[1]);
            }
            static const arith::CmpIPredicate ip[] = {
                arith::CmpIPredicate::eq, arith::CmpIPredicate::ne, arith::CmpIPredicate::slt,
                arith::CmpIPredicate::sle, arith::CmpIPredicate::sgt, arith::CmpIPredicate::sge};
            return arith::CmpIOp::create(b, l, ip[static_cast<int>(c.getPredicate())], in[0], in[1]);
          })
          .Case<SelectOp>([&](auto) -> Value { return arith::SelectOp::create(b, l, in[0], in[1], in[2]); })
          .Case<BroadcastOp>([&](auto) -> Value { return in[0]; })
          .Case<CastOp>([&](auto) -> Value { return castScalar(in[0], et); })
          .Default([](Operation *) -> Value { return {}; });
    }

    Value castScalar(Value s, Type to) {
      OpBuilder &b = *b_;
      Type from = s.getType();
      if (from == to)
        return s;
      if (auto tf = dyn_cast<FloatType>(to)) {
        if (auto ff = dyn_cast<FloatType>(from)) {
          if (ff.getWidth() == tf.getWidth()) // bf16 <-> f16: through f32
            return castScalar(castScalar(s, b.getF32Type()), to);
          return ff.getWidth() < tf.getWidth() ? arith::ExtFOp::create(b, loc_, to, s).getResult()
                                               : arith::TruncFOp::create(b, loc_, to, s).getResult();
        }
        if (from.isInteger(1))
          return arith::UIToFPOp::create(b, loc_, to, s);
        return arith::SIToFPOp::create(b, loc_, to, s);
      }
      unsigned wf = from.getIntOrFloatBitWidth(), wt = to.getIntOrFloatBitWidth();
      if (wf < wt)
        return from.isInteger(1) ? arith::ExtUIOp::create(b, loc_, to, s).getResult()
                                 : arith::ExtSIOp::create(b, loc_, to, s).getResult();
      return arith::TruncIOp::create(b, loc_, to, s);
    }

    Cluster &c_;
    Location loc_;
    Block *block_;
    std::unique_ptr<OpBuilder> b_;
    Value acc_, col_;
    SmallVector<Value> sides_;
    llvm::DenseMap<Value, Value> memo_;
  };

  /// Splits the forward roots into waves: a root whose body reads (through a side) the
  /// result of another root of this anchor goes into a later gemm_reduce than that root.
  SmallVector<SmallVector<Operation *>> forwardWaves() {
    llvm::DenseMap<Operation *, int> wave;
    llvm::DenseSet<Operation *> roots(forwardRoots_.begin(), forwardRoots_.end());
    // Latest wave among the roots a value depends on, through non-big ops (-1: none).
    llvm::DenseMap<Value, int> memo;
    std::function<int(Value)> dependsOn = [&](Value v) -> int {
      if (auto it = memo.find(v); it != memo.end())
        return it->second;
      memo[v] = -1;
      int w = -1;
      if (Operation *def = v.getDefiningOp()) {
        if (roots.count(def))
          w = wave.count(def) ? wave[def] : 0;
        else
          for (Value o : def->getOperands())
            w = std::max(w, dependsOn(o));
      }
      memo[v] = w;
      return w;
    };
    int maxWave = 0;
    // Roots are in program order, so a root's dependencies are assigned first.
    for (Operation *root : forwardRoots_) {
      int w = 0;
      SmallVector<Value> stack{forwardRootInput(root)};
      if (auto g = dyn_cast<GatherOp>(root))
        stack.push_back(g.getIndex());
      llvm::DenseSet<Value> seen;
      while (!stack.empty()) {
        Value v = stack.pop_back_val();
        if (!seen.insert(v).second)
          continue;
        if (isBig(v) && v != anchor_.getResult()) {
          for (Value o : v.getDefiningOp()->getOperands())
            stack.push_back(o);
        } else if (!isBig(v)) {
          memo.clear();
          int d = dependsOn(v);
          if (d >= 0)
            w = std::max(w, d + 1);
        }
      }
      wave[root] = w;
      maxWave = std::max(maxWave, w);
    }
    SmallVector<SmallVector<Operation *>> waves(static_cast<size_t>(maxWave + 1));
    for (Operation *root : forwardRoots_)
      waves[static_cast<size_t>(wave[root])].push_back(root);
    return waves;
  }

  void rewriteForward(OpBuilder &b, TxBuilder &tb) {
    for (const SmallVector<Operation *> &roots : forwardWaves())
      if (!roots.empty())
        rewriteForwardWave(b, tb, roots);
  }

  void rewriteForwardWave(OpBuilder &b, TxBuilder &tb, ArrayRef<Operation *> roots) {
    BodyEmitter e(*this, anchor_.getLoc());
    SmallVector<Value> yields;
    SmallVector<Attribute> kinds;
    auto kindAttr = [&](ReduceKind k) { return b.getStringAttr(reduceKindName(k)); };
    for (Operation *root : roots) {
      Value in = forwardRootInput(root);
      Value x = e.toF32(e.emit(in));
      llvm::TypeSwitch<Operation *>(root)
          .Case<LogSumExpOp>([&](auto) { yields.push_back(x); kinds.push_back(kindAttr(ReduceKind::logsumexp)); })
          .Case<ReduceSumOp, MeanOp>([&](auto) { yields.push_back(x); kinds.push_back(kindAttr(ReduceKind::sum)); })
          .Case<ReduceMaxOp>([&](auto) { yields.push_back(x); kinds.push_back(kindAttr(ReduceKind::max)); })
          .Case<GatherOp>([&](GatherOp g) {
            Value idx = e.toI64(e.emit(g.getIndex()));
            Value hit = arith::CmpIOp::create(e.b(), anchor_.getLoc(), arith::CmpIPredicate::eq,
                                              e.col(), idx);
            Value zero = arith::ConstantOp::create(e.b(), anchor_.getLoc(), e.b().getF32FloatAttr(0.0f));
            yields.push_back(arith::SelectOp::create(e.b(), anchor_.getLoc(), hit, x, zero));
            kinds.push_back(kindAttr(ReduceKind::sum));
          });
    }
    YieldOp::create(e.b(), anchor_.getLoc(), yields);
    SmallVector<Type> resultTypes(roots.size(),
                                  RankedTensorType::get({bigShape_[0], 1}, b.getF32Type()));
    auto fused = GemmReduceOp::create(b, anchor_.getLoc(), resultTypes, anchor_.getLhs(),
                                      anchor_.getRhs(), e.sides(), b.getArrayAttr(kinds));
    fused.getBody().push_back(e.takeBlock());
    for (auto [root, res] : llvm::zip(roots, fused.getResults())) {
      Value replacement = res;
      if (isa<MeanOp>(root))
        replacement = tb.div(res, tb.constantF32(static_cast<double>(bigShape_[1])));
      root->getResult(0).replaceAllUsesWith(replacement);
    }
  }

  void rewriteGrad(OpBuilder &b, Value g) {
    BodyEmitter e(*this, g.getLoc());
    Value x = e.toF32(e.emit(g));
    YieldOp::create(e.b(), g.getLoc(), ValueRange{x});
    auto lt = TxBuilder::type(anchor_.getLhs()), rt = TxBuilder::type(anchor_.getRhs());
    auto fused = GemmGradOp::create(
        b, g.getLoc(), RankedTensorType::get(lt.getShape(), b.getF32Type()),
        RankedTensorType::get(rt.getShape(), b.getF32Type()), anchor_.getLhs(), anchor_.getRhs(),
        e.sides());
    fused.getBody().push_back(e.takeBlock());
    auto [dLhs, dRhs] = gradRoots_[g];
    if (dLhs)
      dLhs.getResult().replaceAllUsesWith(fused.getDLhs());
    if (dRhs)
      dRhs.getResult().replaceAllUsesWith(fused.getDRhs());
  }

  MatmulOp anchor_;
  SmallVector<int64_t> bigShape_;
  llvm::DenseMap<Value, bool> fusible_, depends_;
  SmallVector<Operation *> forwardRoots_;
  llvm::DenseMap<Value, std::pair<MatmulOp, MatmulOp>> gradRoots_;
  SmallVector<Value> gradOrder_;
  llvm::SetVector<Value> slice_;
};

void eraseDeadOps(Block &block) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
      if (isOpTriviallyDead(&op)) {
        op.erase();
        changed = true;
      }
  }
}

struct FusePass : lcejit::tx::impl::TxFuseBase<FusePass> {
  void runOnOperation() override {
    func::FuncOp f = getOperation();
    SmallVector<MatmulOp> anchors;
    f.walk([&](MatmulOp m) {
      if (Cluster::isAnchor(m))
        anchors.push_back(m);
    });
    for (MatmulOp anchor : anchors) {
      if (!anchor->getBlock())
        continue; // erased as part of an earlier cluster
      Cluster c(anchor);
      if (!c.collect())
        continue;
      Block *block = anchor->getBlock();
      c.rewrite();
      eraseDeadOps(*block);
      if (!sortTopologically(block)) {
        f.emitError("tx-fuse: could not order the fused function");
        return signalPassFailure();
      }
    }
  }
};

} // namespace
