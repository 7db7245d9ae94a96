//===- TxDialect.h - The tx dialect ----------------------------------------===//
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "compiler/dialect/TxDialect.h.inc"
#include "compiler/dialect/TxEnums.h.inc"

#define GET_OP_CLASSES
#include "compiler/dialect/TxOps.h.inc"

namespace lcejit::tx {

/// The NumPy-style broadcast of two shapes with the tx rules (equal ranks with 1s
/// stretching, or one side rank 0; dynamic dims are all the one symbolic N). Returns
/// failure when they do not broadcast.
mlir::FailureOr<llvm::SmallVector<int64_t>> broadcastShapes(llvm::ArrayRef<int64_t> a,
                                                            llvm::ArrayRef<int64_t> b);

/// Shape of a reduction of `shape` along `axis` (kept as 1), or rank 0 without axis.
llvm::SmallVector<int64_t> reducedShape(llvm::ArrayRef<int64_t> shape,
                                        std::optional<int64_t> axis);

/// Row reduction kinds of tx.gemm_reduce ("sum", "max", "logsumexp").
enum class ReduceKind { sum, max, logsumexp };
std::optional<ReduceKind> parseReduceKind(llvm::StringRef s);
llvm::StringRef reduceKindName(ReduceKind k);

/// Element types tx accepts: bf16, f16, f32, f64, i1, i32, i64.
bool isTxElementType(mlir::Type t);

/// Registers tx and the dialects its fused regions use (arith, math, func).
void registerTxDialects(mlir::DialectRegistry &registry);

} // namespace lcejit::tx
