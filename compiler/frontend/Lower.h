//===- Lower.h - Frontend graph -> tx dialect ------------------------------===//
#pragma once

#include "compiler/frontend/Graph.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace lcejit::fe {

/// Lowers `g` to a module with one func.func named after the graph: its arguments are
/// the graph inputs (attribute tx.name), its results the graph outputs (tx.name), every
/// kN dimension becomes `?`. `grad` becomes one tx.grad op. The context must have the tx
/// dialects loaded (tx::registerTxDialects).
mlir::OwningOpRef<mlir::ModuleOp> lowerToTx(const Graph &g, mlir::MLIRContext &ctx);

} // namespace lcejit::fe
