//===- Pipeline.cpp - The pass order, written once -------------------------===//

#include "compiler/pipeline/Pipeline.h"
#include "compiler/dialect/TxDialect.h"
#include "compiler/frontend/Lower.h"
#include "compiler/support/Check.h"
#include "compiler/transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/raw_ostream.h"

namespace lcejit::pipeline {

std::optional<Stage> parseStage(std::string_view name) {
  for (Stage s : kAllStages)
    if (stageName(s) == name)
      return s;
  return std::nullopt;
}

const std::vector<PassSpec> &passPipeline() {
  static const std::vector<PassSpec> kPasses = {
      {"tx-autodiff", [] { return tx::createTxAutodiff(); }},
      {"tx-simplify", [] { return tx::createTxSimplify(); }},
      {"cse", [] { return mlir::createCSEPass(); }},
      {"tx-fuse", [] { return tx::createTxFuse(); }},
      {"tx-simplify", [] { return tx::createTxSimplify(); }},
      {"cse", [] { return mlir::createCSEPass(); }},
  };
  return kPasses;
}

std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  tx::registerTxDialects(registry);
  auto ctx = std::make_unique<mlir::MLIRContext>(registry);
  ctx->loadAllAvailableDialects();
  // One compile at a time per context; no thread pool needed for these small modules.
  ctx->disableMultithreading();
  return ctx;
}

struct FusedGraph::Impl {
  std::unique_ptr<mlir::MLIRContext> ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

FusedGraph::FusedGraph() : impl_(std::make_unique<Impl>()) {}
FusedGraph::~FusedGraph() = default;

mlir::ModuleOp FusedGraph::module() const { return *impl_->module; }

static std::string printOp(mlir::Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

std::string FusedGraph::str() const { return printOp(*impl_->module); }

plan::Program FusedGraph::plan(const plan::PlanOptions &options) const {
  mlir::func::FuncOp func;
  for (auto f : impl_->module->getOps<mlir::func::FuncOp>())
    func = f;
  LCEJIT_CHECK(func, "fused module has no function");
  std::string error;
  std::optional<plan::Program> p = plan::planProgram(func, options, &error);
  if (!p)
    LCEJIT_THROW(Unsupported, "{}", error);
  return std::move(*p);
}

std::unique_ptr<FusedGraph> compileGraph(const fe::Graph &graph, const TraceSink &trace,
                                         std::string_view stopBefore) {
  std::unique_ptr<FusedGraph> fg(new FusedGraph());
  fg->fingerprint_ = graph.fingerprint();
  fg->impl_->ctx = makeContext();
  mlir::MLIRContext &ctx = *fg->impl_->ctx;

  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    llvm::raw_string_ostream os(diagnostics);
    os << d.getLocation() << ": " << d << "\n";
    return mlir::success();
  });

  if (trace)
    trace.emit(Stage::Graph, "frontend graph", graph.str());
  fg->impl_->module = fe::lowerToTx(graph, ctx);
  mlir::ModuleOp module = *fg->impl_->module;
  if (mlir::failed(mlir::verify(module)))
    LCEJIT_THROW(InvalidArgument, "the graph '{}' does not verify as tx:\n{}", graph.name(), diagnostics);
  if (trace)
    trace.emit(Stage::Mlir, "tx dialect (lowered from the graph)", printOp(module));

  // Each pass runs in its own PassManager so every stage can be shown.
  for (const PassSpec &spec : passPipeline()) {
    if (!stopBefore.empty() && spec.flag == stopBefore)
      break;
    mlir::PassManager pm(&ctx);
    pm.addNestedPass<mlir::func::FuncOp>(spec.create());
    if (mlir::failed(pm.run(module)))
      LCEJIT_THROW(InvalidArgument, "pass --{} failed on graph '{}':\n{}", spec.flag, graph.name(),
                   diagnostics);
    if (trace)
      trace.emit(Stage::Passes, "after --" + spec.flag, printOp(module));
  }
  return fg;
}

} // namespace lcejit::pipeline
