//===- lcejit-opt.cpp - Pass driver for lit tests --------------------------===//
//
// Runs any tx pass (and upstream canonicalize/cse) over a .mlir file. Every pass has its
// own lit test in tests/lit/<pass-flag>.mlir.
//
//===----------------------------------------------------------------------===//

#include "compiler/dialect/TxDialect.h"
#include "compiler/transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  lcejit::tx::registerTxDialects(registry);
  lcejit::tx::registerTxPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "lcejit optimizer driver\n", registry));
}
