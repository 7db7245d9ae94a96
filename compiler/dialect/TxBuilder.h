//===- TxBuilder.h - Create tx ops with inferred result types -------------===//
//
// A thin helper over OpBuilder used by the frontend lowering and by the passes: each
// method infers the result type with the dialect's rules (broadcast, keepdim) so callers
// never spell tensor types by hand. Shapes must already be valid (callers check user
// input before; the verifier checks again).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/dialect/TxDialect.h"

#include <optional>

namespace lcejit::tx {

class TxBuilder {
public:
  TxBuilder(mlir::OpBuilder &b, mlir::Location loc) : b_(b), loc_(loc) {}

  mlir::OpBuilder &builder() { return b_; }
  mlir::Location loc() const { return loc_; }
  void setLoc(mlir::Location loc) { loc_ = loc; }

  static mlir::RankedTensorType type(mlir::Value v) {
    return mlir::cast<mlir::RankedTensorType>(v.getType());
  }
  static llvm::ArrayRef<int64_t> shape(mlir::Value v) { return type(v).getShape(); }
  static mlir::Type elementType(mlir::Value v) { return type(v).getElementType(); }

  mlir::Value constantF32(double v);
  mlir::Value constant(mlir::Type elementType, double fv, int64_t iv);
  mlir::Value iota(llvm::ArrayRef<int64_t> shape, int64_t axis, mlir::Type elementType);
  mlir::Value dim(mlir::Value x, int64_t axis);

  mlir::Value add(mlir::Value a, mlir::Value b);
  mlir::Value sub(mlir::Value a, mlir::Value b);
  mlir::Value mul(mlir::Value a, mlir::Value b);
  mlir::Value div(mlir::Value a, mlir::Value b);
  mlir::Value max(mlir::Value a, mlir::Value b);
  mlir::Value neg(mlir::Value a);
  mlir::Value exp(mlir::Value a);
  mlir::Value log(mlir::Value a);
  mlir::Value tanh(mlir::Value a);
  mlir::Value cmp(CmpPredicate p, mlir::Value a, mlir::Value b);
  mlir::Value select(mlir::Value c, mlir::Value a, mlir::Value b);
  mlir::Value cast(mlir::Value a, mlir::Type elementType);
  mlir::Value toF32(mlir::Value a) { return cast(a, b_.getF32Type()); }
  mlir::Value broadcast(mlir::Value a, llvm::ArrayRef<int64_t> shape);
  mlir::Value matmul(mlir::Value a, mlir::Value b, bool transposeA, bool transposeB);
  mlir::Value reduceSum(mlir::Value a, std::optional<int64_t> axis);
  mlir::Value reduceMax(mlir::Value a, std::optional<int64_t> axis);
  mlir::Value mean(mlir::Value a, std::optional<int64_t> axis);
  mlir::Value logsumexp(mlir::Value a, int64_t axis);
  mlir::Value gather(mlir::Value src, mlir::Value index, int64_t axis);
  /// Sum `v` over the dimensions where `target` has size 1 and `v` does not (or all
  /// of them when `target` is rank 0): the adjoint of a broadcast.
  mlir::Value unbroadcast(mlir::Value v, llvm::ArrayRef<int64_t> target);

private:
  mlir::RankedTensorType tensorOf(llvm::ArrayRef<int64_t> shape, mlir::Type et) {
    return mlir::RankedTensorType::get(shape, et);
  }
  mlir::RankedTensorType broadcastType(mlir::ValueRange vs, mlir::Type et);

  mlir::OpBuilder &b_;
  mlir::Location loc_;
};

} // namespace lcejit::tx
