//===- Passes.h - tx passes ------------------------------------------------===//
#pragma once

#include "compiler/dialect/TxDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace lcejit::tx {

#define GEN_PASS_DECL
#include "compiler/transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/transforms/Passes.h.inc"

} // namespace lcejit::tx
