//===- FuzzTxPipeline.cpp - libFuzzer target: tx text -> verify -> passes -> plan ===//
//
// The lcejit-opt input path on arbitrary bytes: parse as MLIR (tx, func, arith, math),
// verify, run the pass pipeline (pipeline::passPipeline(), in order), and plan every
// function that survives. Diagnostics and lcejit::Errors are expected outcomes; a crash,
// a hang, an assertion or a sanitizer report is a bug (scripts/fuzz, docs/testing.md).
//
//===----------------------------------------------------------------------===//

#include "compiler/pipeline/Pipeline.h"
#include "compiler/plan/Planner.h"
#include "lcejit/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

/// Inputs that reached the planner and got a Program (ReplayMain's --min-planned).
extern "C" {
size_t lcejitFuzzPlanned = 0; // read by ReplayMain.cpp
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static std::unique_ptr<mlir::MLIRContext> ctx = [] {
    auto c = lcejit::pipeline::makeContext();
    c->disableMultithreading(); // one thread: deterministic, and fast to start
    return c;
  }();
  mlir::ScopedDiagnosticHandler quiet(ctx.get(),
                                      [](mlir::Diagnostic &) { return mlir::success(); });
  // MLIR's recursive-descent parser recurses once per nesting level of [ ( { <, so a text
  // nested thousands deep overflows the stack in the parser itself (found by this target:
  // tests/fuzz/regressions/tx_pipeline-parser-recursion-depth, 7400 levels). That is
  // upstream MLIR, reachable only through lcejit-opt's text input, never through the op's
  // API (its graphs come from the frontend); the target skips such texts.
  int depth = 0, deepest = 0;
  for (size_t i = 0; i < size; ++i) {
    char c = static_cast<char>(data[i]);
    if (c == '[' || c == '(' || c == '{' || c == '<')
      deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == ')' || c == '}' || c == '>') && depth > 0)
      --depth;
  }
  if (deepest > 256)
    return 0;
  // The MLIR lexer expects a NUL after the buffer (as a file read by lcejit-opt has):
  // copy the bytes into a std::string, which provides it.
  const std::string text(reinterpret_cast<const char *>(data), size);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(llvm::StringRef(text.c_str(), text.size()),
                                               ctx.get());
  if (!module || mlir::failed(mlir::verify(*module)))
    return 0;
  for (const lcejit::pipeline::PassSpec &spec : lcejit::pipeline::passPipeline()) {
    mlir::PassManager pm(ctx.get());
    pm.addNestedPass<mlir::func::FuncOp>(spec.create());
    if (mlir::failed(pm.run(*module)))
      return 0;
  }
  for (auto func : module->getOps<mlir::func::FuncOp>()) {
    if (func.isDeclaration())
      continue;
    for (int64_t tokens : {int64_t(1), int64_t(5000)}) {
      lcejit::plan::PlanOptions o;
      o.tokens = tokens;
      o.outputTypes.resize(func.getNumResults());
      std::string error;
      try {
        auto program = lcejit::plan::planProgram(func, o, &error);
        if (program) {
          (void)program->runSchedule(tokens);
          ++lcejitFuzzPlanned;
        }
      } catch (const lcejit::Error &) {
        // A clear error is a valid answer to bad input.
      }
    }
  }
  return 0;
}
