//===- TxBuilder.cpp ------------------------------------------------------===//

#include "compiler/dialect/TxBuilder.h"

using namespace mlir;

namespace lcejit::tx {

RankedTensorType TxBuilder::broadcastType(ValueRange vs, Type et) {
  SmallVector<int64_t> s(shape(vs.front()));
  for (Value v : vs.drop_front()) {
    auto r = broadcastShapes(s, shape(v));
    // Invalid shapes are left for the verifier to report on the created op.
    if (succeeded(r))
      s = *r;
  }
  return tensorOf(s, et);
}

Value TxBuilder::constantF32(double v) { return constant(b_.getF32Type(), v, 0); }

Value TxBuilder::constant(Type et, double fv, int64_t iv) {
  TypedAttr attr;
  if (auto ft = dyn_cast<FloatType>(et))
    attr = b_.getFloatAttr(ft, fv);
  else
    attr = b_.getIntegerAttr(et, iv);
  return ConstantOp::create(b_, loc_, tensorOf({}, et), attr);
}

Value TxBuilder::iota(ArrayRef<int64_t> s, int64_t axis, Type et) {
  return IotaOp::create(b_, loc_, tensorOf(s, et), b_.getI64IntegerAttr(axis));
}

Value TxBuilder::dim(Value x, int64_t axis) {
  return DimOp::create(b_, loc_, tensorOf({}, b_.getI64Type()), x, b_.getI64IntegerAttr(axis));
}

#define TX_BINARY(NAME, OP)                                                    \
  Value TxBuilder::NAME(Value a, Value b) {                                    \
    return OP::create(b_, loc_, broadcastType({a, b}, elementType(a)), a, b);  \
  }
TX_BINARY(add, AddOp)
TX_BINARY(sub, SubOp)
TX_BINARY(mul, MulOp)
TX_BINARY(div, DivOp)
TX_BINARY(max, MaxOp)
#undef TX_BINARY

Value TxBuilder::neg(Value a) { return NegOp::create(b_, loc_, a.getType(), a); }
Value TxBuilder::exp(Value a) { return ExpOp::create(b_, loc_, a.getType(), a); }
Value TxBuilder::log(Value a) { return LogOp::create(b_, loc_, a.getType(), a); }
Value TxBuilder::tanh(Value a) { return TanhOp::create(b_, loc_, a.getType(), a); }

Value TxBuilder::cmp(CmpPredicate p, Value a, Value b) {
  return CmpOp::create(b_, loc_, broadcastType({a, b}, b_.getI1Type()), p, a, b);
}

Value TxBuilder::select(Value c, Value a, Value b) {
  return SelectOp::create(b_, loc_, broadcastType({c, a, b}, elementType(a)), c, a, b);
}

Value TxBuilder::cast(Value a, Type et) {
  if (elementType(a) == et)
    return a;
  return CastOp::create(b_, loc_, tensorOf(shape(a), et), a);
}

Value TxBuilder::broadcast(Value a, ArrayRef<int64_t> s) {
  if (shape(a) == s)
    return a;
  return BroadcastOp::create(b_, loc_, tensorOf(s, elementType(a)), a);
}

Value TxBuilder::matmul(Value a, Value b, bool ta, bool tb) {
  auto sa = shape(a), sb = shape(b);
  int64_t m = ta ? sa[1] : sa[0];
  int64_t n = tb ? sb[0] : sb[1];
  auto op = MatmulOp::create(b_, loc_, tensorOf({m, n}, b_.getF32Type()), a, b);
  if (ta)
    op.setTransposeLhs(true);
  if (tb)
    op.setTransposeRhs(true);
  return op;
}

static IntegerAttr axisAttr(OpBuilder &b, std::optional<int64_t> axis) {
  return axis ? b.getI64IntegerAttr(*axis) : IntegerAttr();
}

Value TxBuilder::reduceSum(Value a, std::optional<int64_t> axis) {
  return ReduceSumOp::create(b_, loc_, tensorOf(reducedShape(shape(a), axis), elementType(a)),
                             a, axisAttr(b_, axis));
}

Value TxBuilder::reduceMax(Value a, std::optional<int64_t> axis) {
  return ReduceMaxOp::create(b_, loc_, tensorOf(reducedShape(shape(a), axis), elementType(a)),
                             a, axisAttr(b_, axis));
}

Value TxBuilder::mean(Value a, std::optional<int64_t> axis) {
  return MeanOp::create(b_, loc_, tensorOf(reducedShape(shape(a), axis), elementType(a)), a,
                        axisAttr(b_, axis));
}

Value TxBuilder::logsumexp(Value a, int64_t axis) {
  return LogSumExpOp::create(b_, loc_, tensorOf(reducedShape(shape(a), axis), elementType(a)),
                             a, b_.getI64IntegerAttr(axis));
}

Value TxBuilder::gather(Value src, Value index, int64_t axis) {
  return GatherOp::create(b_, loc_, tensorOf(shape(index), elementType(src)), src, index,
                          b_.getI64IntegerAttr(axis));
}

Value TxBuilder::unbroadcast(Value v, ArrayRef<int64_t> target) {
  auto s = shape(v);
  if (s == target)
    return v;
  if (target.empty())
    return reduceSum(v, std::nullopt);
  for (size_t d = 0; d < target.size(); ++d)
    if (target[d] == 1 && shape(v)[d] != 1)
      v = reduceSum(v, static_cast<int64_t>(d));
  return v;
}

} // namespace lcejit::tx
