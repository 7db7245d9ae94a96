//===- PrintPlan.cpp - Test-only: print the planner's Program --------------===//
//
// Makes planner decisions visible to lit (CRAFT: "the plan is data").
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/Planner.h"
#include "compiler/transforms/Passes.h"

#include "llvm/Support/raw_ostream.h"

namespace lcejit::tx {
#define GEN_PASS_DEF_TXPRINTPLAN
#include "compiler/transforms/Passes.h.inc"
} // namespace lcejit::tx

using namespace mlir;

namespace {

struct PrintPlanPass : lcejit::tx::impl::TxPrintPlanBase<PrintPlanPass> {
  using TxPrintPlanBase::TxPrintPlanBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      lcejit::plan::PlanOptions o;
      o.name = func.getSymName().str();
      o.tokens = tokens;
      o.target.smVersion = arch;
      if (arch != 90) {
        o.target.numSMs = 108; // an A100-class part
        o.target.maxSharedPerBlock = 166912;
      }
      o.workspaceBudgetBytes = budgetMb * (int64_t(1) << 20);
      o.exactGradients = exact;
      if (mainloop == "mma")
        o.mainloop = lcejit::plan::Mainloop::MmaSync;
      else if (mainloop == "wgmma")
        o.mainloop = lcejit::plan::Mainloop::Wgmma;
      else if (mainloop != "auto") {
        func.emitError() << "mainloop must be auto, mma or wgmma, got '" << mainloop << "'";
        return signalPassFailure();
      }
      if (backward == "recompute")
        o.backward = lcejit::plan::PlanOptions::Backward::Recompute;
      else if (backward == "materialized")
        o.backward = lcejit::plan::PlanOptions::Backward::Materialized;
      else {
        func.emitError() << "backward must be materialized or recompute, got '" << backward
                         << "'";
        return signalPassFailure();
      }
      o.outputTypes.resize(func.getNumResults());
      for (size_t i = 0; i < outputTypes.size() && i < o.outputTypes.size(); ++i) {
        if (outputTypes[i] == "-")
          continue;
        auto t = lcejit::parseDType(outputTypes[i]);
        if (!t) {
          func.emitError() << "unknown dtype '" << outputTypes[i] << "' in output-types";
          return signalPassFailure();
        }
        o.outputTypes[i] = t;
      }
      std::string error;
      auto program = lcejit::plan::planProgram(func, o, &error);
      if (!program) {
        func.emitError() << error;
        return signalPassFailure();
      }
      llvm::outs() << "// plan @" << o.name << "\n";
      for (const std::string &d : program->decisions)
        llvm::outs() << "// decision: " << d << "\n";
      llvm::outs() << program->toJson(2) << "\n";
    }
  }
};

} // namespace
