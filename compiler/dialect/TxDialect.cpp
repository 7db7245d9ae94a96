//===- TxDialect.cpp - tx ops and their verifiers -------------------------===//
//
// Every rule a verifier enforces has a negative lit test in tests/lit/verifier-*.mlir.
//
//===----------------------------------------------------------------------===//

#include "compiler/dialect/TxDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace lcejit::tx;

#include "compiler/dialect/TxDialect.cpp.inc"
#include "compiler/dialect/TxEnums.cpp.inc"

void TxDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/dialect/TxOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "compiler/dialect/TxOps.cpp.inc"

Operation *TxDialect::materializeConstant(OpBuilder &b, Attribute value, Type type,
                                          Location loc) {
  auto t = dyn_cast<RankedTensorType>(type);
  auto typed = dyn_cast<TypedAttr>(value);
  if (!t || t.getRank() != 0 || !typed || typed.getType() != t.getElementType())
    return nullptr;
  return ConstantOp::create(b, loc, t, typed);
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

namespace lcejit::tx {

void registerTxDialects(DialectRegistry &registry) {
  registry.insert<TxDialect, arith::ArithDialect, math::MathDialect, func::FuncDialect>();
}

std::optional<ReduceKind> parseReduceKind(llvm::StringRef s) {
  if (s == "sum")
    return ReduceKind::sum;
  if (s == "max")
    return ReduceKind::max;
  if (s == "logsumexp")
    return ReduceKind::logsumexp;
  return std::nullopt;
}

llvm::StringRef reduceKindName(ReduceKind k) {
  switch (k) {
  case ReduceKind::sum: return "sum";
  case ReduceKind::max: return "max";
  case ReduceKind::logsumexp: return "logsumexp";
  }
  return "?";
}

bool isTxElementType(Type t) {
  if (t.isBF16() || t.isF16() || t.isF32() || t.isF64())
    return true;
  if (auto i = dyn_cast<IntegerType>(t))
    return i.isSignless() && (i.getWidth() == 1 || i.getWidth() == 32 || i.getWidth() == 64);
  return false;
}

FailureOr<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  if (a.empty())
    return SmallVector<int64_t>(b.begin(), b.end());
  if (b.empty())
    return SmallVector<int64_t>(a.begin(), a.end());
  if (a.size() != b.size())
    return failure();
  SmallVector<int64_t> out;
  for (auto [x, y] : llvm::zip(a, b)) {
    if (x == y)
      out.push_back(x);
    else if (x == 1)
      out.push_back(y);
    else if (y == 1)
      out.push_back(x);
    else
      return failure(); // includes N vs a static size > 1
  }
  return out;
}

SmallVector<int64_t> reducedShape(ArrayRef<int64_t> shape, std::optional<int64_t> axis) {
  if (!axis)
    return {};
  SmallVector<int64_t> out(shape.begin(), shape.end());
  out[static_cast<size_t>(*axis)] = 1;
  return out;
}

} // namespace lcejit::tx

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }

static std::string shapeStr(ArrayRef<int64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i)
      out += ", ";
    out += ShapedType::isDynamic(s[i]) ? std::string("N") : std::to_string(s[i]);
  }
  return out + "]";
}

static LogicalResult checkElementTypes(Operation *op) {
  for (Value v : op->getOperands())
    if (auto t = dyn_cast<RankedTensorType>(v.getType()); t && !isTxElementType(t.getElementType()))
      return op->emitOpError() << "unsupported element type " << t.getElementType()
                               << " (tx supports bf16, f16, f32, f64, i1, i32, i64)";
  for (Value v : op->getResults())
    if (auto t = dyn_cast<RankedTensorType>(v.getType()); t && !isTxElementType(t.getElementType()))
      return op->emitOpError() << "unsupported result element type " << t.getElementType();
  return success();
}

/// Broadcast shape of all operands, or an error naming the two shapes that clash.
static FailureOr<SmallVector<int64_t>> broadcastAll(Operation *op, ValueRange operands) {
  SmallVector<int64_t> shape(tensorType(operands.front()).getShape());
  for (Value v : operands.drop_front()) {
    auto s = tensorType(v).getShape();
    auto b = broadcastShapes(shape, s);
    if (failed(b)) {
      op->emitOpError() << "operand shapes " << shapeStr(shape) << " and " << shapeStr(s)
                        << " do not broadcast";
      return failure();
    }
    shape = *b;
  }
  return shape;
}

static LogicalResult checkResultShape(Operation *op, ArrayRef<int64_t> expected) {
  auto rt = cast<RankedTensorType>(op->getResult(0).getType());
  if (rt.getShape() != expected)
    return op->emitOpError() << "result shape " << shapeStr(rt.getShape())
                             << " does not match the expected " << shapeStr(expected);
  return success();
}

static LogicalResult checkAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError() << "axis " << axis << " out of range for rank " << rank;
  return success();
}

//===----------------------------------------------------------------------===//
// Leaves
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::verify() {
  if (failed(checkElementTypes(*this)))
    return failure();
  auto rt = getResult().getType();
  auto t = cast<RankedTensorType>(rt);
  if (t.getRank() != 0)
    return emitOpError() << "result must be rank 0, got " << shapeStr(t.getShape());
  if (getValue().getType() != t.getElementType())
    return emitOpError() << "value type " << getValue().getType()
                         << " does not match the element type " << t.getElementType();
  return success();
}

LogicalResult IotaOp::verify() {
  if (failed(checkElementTypes(*this)))
    return failure();
  auto t = cast<RankedTensorType>(getResult().getType());
  if (!t.hasStaticShape())
    return emitOpError() << "result shape " << shapeStr(t.getShape()) << " must be static";
  if (!isa<IntegerType>(t.getElementType()) || t.getElementType().isInteger(1))
    return emitOpError() << "result element type must be i32 or i64, got " << t.getElementType();
  return checkAxis(*this, getAxis(), t.getRank());
}

LogicalResult DimOp::verify() {
  if (failed(checkAxis(*this, getAxis(), tensorType(getInput()).getRank())))
    return failure();
  auto t = cast<RankedTensorType>(getResult().getType());
  if (t.getRank() != 0 || !t.getElementType().isInteger(64))
    return emitOpError() << "result must be tensor<i64>";
  return success();
}

//===----------------------------------------------------------------------===//
// Matmul and cast
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::verify() {
  if (failed(checkElementTypes(*this)))
    return failure();
  auto a = tensorType(getLhs()), b = tensorType(getRhs());
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOpError() << "operands must be rank 2, got " << shapeStr(a.getShape()) << " and "
                         << shapeStr(b.getShape());
  if (!isa<FloatType>(a.getElementType()) || !isa<FloatType>(b.getElementType()))
    return emitOpError() << "operands must be floating point, got " << a.getElementType()
                         << " and " << b.getElementType();
  int64_t m = getTransposeLhs() ? a.getDimSize(1) : a.getDimSize(0);
  int64_t ka = getTransposeLhs() ? a.getDimSize(0) : a.getDimSize(1);
  int64_t kb = getTransposeRhs() ? b.getDimSize(1) : b.getDimSize(0);
  int64_t n = getTransposeRhs() ? b.getDimSize(0) : b.getDimSize(1);
  if (ka != kb)
    return emitOpError() << "contraction sizes differ: " << shapeStr({ka}) << " vs "
                         << shapeStr({kb});
  auto r = cast<RankedTensorType>(getResult().getType());
  if (!r.getElementType().isF32())
    return emitOpError() << "result element type must be f32 (the accumulator), got "
                         << r.getElementType();
  return checkResultShape(*this, {m, n});
}

static bool castAllowed(Type from, Type to) {
  if (isa<FloatType>(to))
    return true; // float->float, int/i1->float
  if (isa<IntegerType>(to) && !to.isInteger(1))
    return isa<IntegerType>(from); // int<->int, i1->int
  return from == to;
}

LogicalResult CastOp::verify() {
  if (failed(checkElementTypes(*this)))
    return failure();
  auto in = tensorType(getInput());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getShape() != out.getShape())
    return emitOpError() << "shape changes from " << shapeStr(in.getShape()) << " to "
                         << shapeStr(out.getShape());
  if (!castAllowed(in.getElementType(), out.getElementType()))
    return emitOpError() << "cannot cast " << in.getElementType() << " to "
                         << out.getElementType();
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

static LogicalResult verifyBinary(Operation *op, bool floatOnly) {
  if (failed(checkElementTypes(op)))
    return failure();
  Type ea = tensorType(op->getOperand(0)).getElementType();
  Type eb = tensorType(op->getOperand(1)).getElementType();
  if (ea != eb)
    return op->emitOpError() << "operand element types differ: " << ea << " and " << eb;
  if (ea.isInteger(1))
    return op->emitOpError() << "does not take i1 operands";
  if (floatOnly && !isa<FloatType>(ea))
    return op->emitOpError() << "operands must be floating point, got " << ea;
  auto shape = broadcastAll(op, op->getOperands());
  if (failed(shape))
    return failure();
  Type er = cast<RankedTensorType>(op->getResult(0).getType()).getElementType();
  if (er != ea)
    return op->emitOpError() << "result element type " << er << " must be " << ea;
  return checkResultShape(op, *shape);
}

LogicalResult AddOp::verify() { return verifyBinary(*this, false); }
LogicalResult SubOp::verify() { return verifyBinary(*this, false); }
LogicalResult MulOp::verify() { return verifyBinary(*this, false); }
LogicalResult DivOp::verify() { return verifyBinary(*this, true); }
LogicalResult MaxOp::verify() { return verifyBinary(*this, false); }

static LogicalResult verifyUnaryFloat(Operation *op) {
  if (failed(checkElementTypes(op)))
    return failure();
  auto in = tensorType(op->getOperand(0));
  if (!isa<FloatType>(in.getElementType()))
    return op->emitOpError() << "operand must be floating point, got " << in.getElementType();
  if (op->getResult(0).getType() != in)
    return op->emitOpError() << "result type " << op->getResult(0).getType() << " must be "
                             << in;
  return success();
}

LogicalResult NegOp::verify() { return verifyUnaryFloat(*this); }
LogicalResult ExpOp::verify() { return verifyUnaryFloat(*this); }
LogicalResult LogOp::verify() { return verifyUnaryFloat(*this); }
LogicalResult TanhOp::verify() { return verifyUnaryFloat(*this); }

LogicalResult CmpOp::verify() {
  if (failed(checkElementTypes(*this)))
    return failure();
  Type ea = tensorType(getLhs()).getElementType(), eb = tensorType(getRhs()).getElementType();
  if (ea != eb)
    return emitOpError() << "operand element types differ: " << ea << " and " << eb;
  auto shape = broadcastAll(*this, getOperands());
  if (failed(shape))
    return failure();
  if (!cast<RankedTensorType>(getResult().getType()).getElementType().isInteger(1))
    return emitOpError() << "result element type must be i1";
  return checkResultShape(*this, *shape);
}

LogicalResult SelectOp::verify() {
  if (failed(checkElementTypes(*this)))
    return failure();
  if (!tensorType(getCond()).getElementType().isInteger(1))
    return emitOpError() << "condition must be i1, got " << tensorType(getCond()).getElementType();
  Type ea = tensorType(getTrueValue()).getElementType();
  Type eb = tensorType(getFalseValue()).getElementType();
  if (ea != eb)
    return emitOpError() << "value element types differ: " << ea << " and " << eb;
  auto shape = broadcastAll(*this, getOperands());
  if (failed(shape))
    return failure();
  if (cast<RankedTensorType>(getResult().getType()).getElementType() != ea)
    return emitOpError() << "result element type must be " << ea;
  return checkResultShape(*this, *shape);
}

//===----------------------------------------------------------------------===//
// Reductions and gather
//===----------------------------------------------------------------------===//

static LogicalResult verifyReduce(Operation *op, std::optional<int64_t> axis, bool floatOnly) {
  if (failed(checkElementTypes(op)))
    return failure();
  auto in = tensorType(op->getOperand(0));
  if (axis && failed(checkAxis(op, *axis, in.getRank())))
    return failure();
  if (in.getElementType().isInteger(1))
    return op->emitOpError() << "does not reduce i1 values (cast them first)";
  if (floatOnly && !isa<FloatType>(in.getElementType()))
    return op->emitOpError() << "operand must be floating point, got " << in.getElementType();
  auto rt = cast<RankedTensorType>(op->getResult(0).getType());
  if (rt.getElementType() != in.getElementType())
    return op->emitOpError() << "result element type " << rt.getElementType() << " must be "
                             << in.getElementType();
  return checkResultShape(op, reducedShape(in.getShape(), axis));
}

LogicalResult ReduceSumOp::verify() { return verifyReduce(*this, getAxis(), false); }
LogicalResult ReduceMaxOp::verify() { return verifyReduce(*this, getAxis(), false); }
LogicalResult MeanOp::verify() { return verifyReduce(*this, getAxis(), true); }
LogicalResult LogSumExpOp::verify() { return verifyReduce(*this, getAxis(), true); }

LogicalResult GatherOp::verify() {
  if (failed(checkElementTypes(*this)))
    return failure();
  auto src = tensorType(getSource()), idx = tensorType(getIndex());
  if (failed(checkAxis(*this, getAxis(), src.getRank())))
    return failure();
  if (!isa<IntegerType>(idx.getElementType()) || idx.getElementType().isInteger(1))
    return emitOpError() << "index element type must be i32 or i64, got " << idx.getElementType();
  if (src.getRank() != idx.getRank())
    return emitOpError() << "index rank " << idx.getRank() << " differs from source rank "
                         << src.getRank();
  for (int64_t d = 0; d < src.getRank(); ++d)
    if (d != static_cast<int64_t>(getAxis()) && src.getDimSize(d) != idx.getDimSize(d))
      return emitOpError() << "index shape " << shapeStr(idx.getShape())
                           << " differs from source shape " << shapeStr(src.getShape())
                           << " outside axis " << getAxis();
  auto rt = cast<RankedTensorType>(getResult().getType());
  if (rt.getElementType() != src.getElementType())
    return emitOpError() << "result element type must be " << src.getElementType();
  return checkResultShape(*this, idx.getShape());
}

//===----------------------------------------------------------------------===//
// grad
//===----------------------------------------------------------------------===//

LogicalResult GradOp::verify() {
  if (failed(checkElementTypes(*this)))
    return failure();
  auto loss = tensorType(getLoss());
  if (loss.getRank() != 0 || !isa<FloatType>(loss.getElementType()))
    return emitOpError() << "loss must be a rank-0 float tensor, got " << loss;
  if (getWrt().size() != getGrads().size())
    return emitOpError() << "has " << getWrt().size() << " wrt values but "
                         << getGrads().size() << " results";
  for (auto [w, g] : llvm::zip(getWrt(), getGrads())) {
    auto wt = tensorType(w);
    auto gt = cast<RankedTensorType>(g.getType());
    if (!isa<FloatType>(wt.getElementType()))
      return emitOpError() << "cannot differentiate with respect to a " << wt.getElementType()
                           << " value";
    if (gt.getShape() != wt.getShape() || !gt.getElementType().isF32())
      return emitOpError() << "gradient type " << gt << " must be f32 with shape "
                           << shapeStr(wt.getShape());
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

/// Common checks of gemm_reduce / gemm_grad: lhs [N, K], rhs [C, K], sides, body.
static LogicalResult verifyFusedGemm(Operation *op, Value lhs, Value rhs, ValueRange sides,
                                     Region &body, size_t numYields) {
  if (failed(checkElementTypes(op)))
    return failure();
  auto a = tensorType(lhs), b = tensorType(rhs);
  if (a.getRank() != 2 || b.getRank() != 2)
    return op->emitOpError() << "operands must be rank 2";
  if (a.getElementType() != b.getElementType() || !isa<FloatType>(a.getElementType()))
    return op->emitOpError() << "operands must share one floating-point type, got "
                             << a.getElementType() << " and " << b.getElementType();
  if (a.getDimSize(1) != b.getDimSize(1) || ShapedType::isDynamic(a.getDimSize(1)))
    return op->emitOpError() << "lhs " << shapeStr(a.getShape()) << " and rhs "
                             << shapeStr(b.getShape()) << " need one static K";
  if (ShapedType::isDynamic(b.getDimSize(0)))
    return op->emitOpError() << "rhs rows must be static";
  int64_t n = a.getDimSize(0), c = b.getDimSize(0);
  for (Value s : sides) {
    auto t = tensorType(s);
    bool row = t.getRank() == 2 && t.getDimSize(0) == n && t.getDimSize(1) == 1;
    bool col = t.getRank() == 2 && t.getDimSize(0) == 1 && t.getDimSize(1) == c;
    bool scalar = t.getRank() == 0;
    if (!row && !col && !scalar)
      return op->emitOpError() << "side operand shape " << shapeStr(t.getShape())
                               << " is none of row " << shapeStr({n, 1}) << ", column "
                               << shapeStr({1, c}) << " or rank 0";
  }
  Block &blk = body.front();
  if (blk.getNumArguments() != 2 + sides.size())
    return op->emitOpError() << "body must take 2 + " << sides.size() << " arguments, takes "
                             << blk.getNumArguments();
  if (!blk.getArgument(0).getType().isF32() || !blk.getArgument(1).getType().isInteger(64))
    return op->emitOpError() << "body arguments must start with (f32 acc, i64 col)";
  for (auto [i, s] : llvm::enumerate(sides))
    if (blk.getArgument(2 + i).getType() != tensorType(s).getElementType())
      return op->emitOpError() << "body argument " << 2 + i << " must have type "
                               << tensorType(s).getElementType();
  auto yield = cast<YieldOp>(blk.getTerminator());
  if (yield.getValues().size() != numYields)
    return op->emitOpError() << "body must yield " << numYields << " values, yields "
                             << yield.getValues().size();
  for (Value v : yield.getValues())
    if (!v.getType().isF32())
      return op->emitOpError() << "body must yield f32 values, yields " << v.getType();
  for (Operation &inner : blk.without_terminator())
    if (!isa<arith::ArithDialect, math::MathDialect>(inner.getDialect()))
      return op->emitOpError() << "body may contain only arith and math ops, found "
                               << inner.getName();
  return success();
}

LogicalResult GemmReduceOp::verify() {
  if (failed(verifyFusedGemm(*this, getLhs(), getRhs(), getSides(), getBody(),
                             getKinds().size())))
    return failure();
  for (Attribute k : getKinds())
    if (!parseReduceKind(cast<StringAttr>(k).getValue()))
      return emitOpError() << "unknown reduction kind " << k
                           << " (expected \"sum\", \"max\" or \"logsumexp\")";
  if (getResults().size() != getKinds().size())
    return emitOpError() << "has " << getKinds().size() << " kinds but " << getResults().size()
                         << " results";
  int64_t n = tensorType(getLhs()).getDimSize(0);
  for (Value r : getResults()) {
    auto t = cast<RankedTensorType>(r.getType());
    if (t.getShape() != ArrayRef<int64_t>{n, 1} || !t.getElementType().isF32())
      return emitOpError() << "results must be f32 " << shapeStr({n, 1}) << ", got " << t;
  }
  return success();
}

LogicalResult GemmGradOp::verify() {
  if (failed(verifyFusedGemm(*this, getLhs(), getRhs(), getSides(), getBody(), 1)))
    return failure();
  auto a = tensorType(getLhs()), b = tensorType(getRhs());
  auto dl = cast<RankedTensorType>(getDLhs().getType());
  auto dr = cast<RankedTensorType>(getDRhs().getType());
  if (dl.getShape() != a.getShape() || !dl.getElementType().isF32())
    return emitOpError() << "d_lhs must be f32 " << shapeStr(a.getShape());
  if (dr.getShape() != b.getShape() || !dr.getElementType().isF32())
    return emitOpError() << "d_rhs must be f32 " << shapeStr(b.getShape());
  return success();
}

LogicalResult BroadcastOp::verify() {
  if (failed(checkElementTypes(*this)))
    return failure();
  auto in = tensorType(getInput());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "element type changes from " << in.getElementType() << " to "
                         << out.getElementType();
  auto b = broadcastShapes(in.getShape(), out.getShape());
  if (failed(b) || ArrayRef<int64_t>(*b) != out.getShape())
    return emitOpError() << "cannot broadcast " << shapeStr(in.getShape()) << " to "
                         << shapeStr(out.getShape());
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}
