//===- Pipeline.h - The pass order, written once ---------------------------===//
//
// frontend graph -> tx (lowerToTx) -> passPipeline() -> planProgram -> emitCuda.
// lcejit-dump's --emit stages follow Stage, in this order.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/frontend/Graph.h"
#include "compiler/plan/Planner.h"
#include "compiler/support/Knobs.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlir {
class Pass;
class MLIRContext;
class ModuleOp;
} // namespace mlir

namespace lcejit::pipeline {

/// Compilation stages in pipeline order (what lcejit-dump --emit= and LCEJIT_DUMP name):
/// the one enum of knobs::DumpStage.
using Stage = knobs::DumpStage;
inline constexpr Stage kAllStages[] = {Stage::Graph, Stage::Mlir, Stage::Passes, Stage::Plan,
                                       Stage::Cuda, Stage::Ptx, Stage::Sass};
inline std::string_view stageName(Stage s) { return knobs::dumpStageName(s); }
std::optional<Stage> parseStage(std::string_view name);

struct PassSpec {
  std::string flag; ///< the lcejit-opt flag
  std::function<std::unique_ptr<mlir::Pass>()> create;
};

/// THE pass order: autodiff, simplify, cse, fuse, simplify, cse.
const std::vector<PassSpec> &passPipeline();

struct TraceSink;

/// A graph after the pass pipeline: owns its MLIR context and module.
class FusedGraph {
public:
  ~FusedGraph();
  FusedGraph(const FusedGraph &) = delete;
  FusedGraph &operator=(const FusedGraph &) = delete;

  /// The fused module as text.
  std::string str() const;
  const std::string &fingerprint() const { return fingerprint_; }
  /// Plans one bucket (throws Error(Unsupported) with the planner's message).
  plan::Program plan(const plan::PlanOptions &options) const;
  mlir::ModuleOp module() const;

private:
  friend std::unique_ptr<FusedGraph> compileGraph(const fe::Graph &, const TraceSink &,
                                                  std::string_view);
  FusedGraph();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string fingerprint_;
};

/// Receives the text of each stage (the dump tool and LCEJIT_DUMP use it).
struct TraceSink {
  std::function<void(Stage, std::string_view title, std::string_view text)> emit;
  explicit operator bool() const { return static_cast<bool>(emit); }
};

/// Lowers `graph` and runs passPipeline() (up to, not including, the first pass named
/// `stopBefore` if given: "tx-fuse" gives the differentiated, unfused graph that the
/// fp64 reference interprets). Throws Error(InvalidArgument) with the MLIR diagnostics
/// if a verifier or pass fails.
std::unique_ptr<FusedGraph> compileGraph(const fe::Graph &graph, const TraceSink &trace = {},
                                         std::string_view stopBefore = {});

/// Registers the tx dialects and passes on a fresh context.
std::unique_ptr<mlir::MLIRContext> makeContext();

} // namespace lcejit::pipeline
