//===- LceJit.h - The JIT behind LinearCrossEntropy (internal) -------------===//
//
// Ties the stages together for one op configuration:
//   graph (buildLceGraph) -> compileGraph (passes, once) -> plan per bucket ->
//   emitCuda -> KernelCache (memory, disk, NVRTC) -> module -> Executor.
//
// [Note: cache keys] Programs are cached in memory, process-wide, under
//   (graph fingerprint, D, V, dtypes, plan options, target, bucket(N)).
// The graph fingerprint covers the loss itself (softcap value, ignore_index, reduction,
// dtypes, shapes); plan options add the output dtypes, the workspace budget, the
// precision mode, an LCEJIT_GEMM_TILE override and the device checks; the target is
// every field of plan::Target: the arch (SM version), the SM count (it sets the column
// splits) and the opt-in shared memory per block (it bounds tiles and stages), so two
// GPUs of one arch but different sizes never share a plan. Binaries are cached by
// KernelCache under an XXH3-128 of the CUDA source, NVRTC's full identity and options, the
// arch, the device-header and included-header content hashes, the cache format version
// and lcejit's build id ([Note: cache keys] in runtime/DiskCache.h), so two buckets whose
// Programs emit the same source share one cubin and one compile.
//
// Internal: used by ops/, tools/ and tests, not installed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/frontend/Graph.h"
#include "compiler/frontend/LceGraph.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/plan/Program.h"
#include "lcejit/LinearCrossEntropy.h"
#include "compiler/codegen/Emitter.h"
#include "runtime/CudaDriver.h"
#include "runtime/KernelCache.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>
#include <string>

namespace lcejit::ops {

/// A planned, emitted and compiled Program for one bucket.
struct CompiledProgram {
  plan::Program program;
  /// The whole CUDA module (device headers included), for dumps and inspect(): emitted on
  /// first use, not by the lookup (what is compiled is `parts`; emitting the whole module
  /// too was about a third of a first call's lookup on a warm cache). Thread-safe.
  const std::string &source() const {
    std::call_once(sourceOnce_, [this] { source_ = codegen::emitCuda(program).source; });
    return source_;
  }
  std::string cacheKey; ///< plan-level key (see [Note: cache keys])
  /// What is compiled: the module parts ([Note: module parts] in codegen/Emitter.h) and,
  /// once compiled, one binary per part.
  std::vector<codegen::EmittedPart> parts;
  std::vector<std::shared_ptr<const runtime::CompiledBinary>> binaries;

private:
  mutable std::once_flag sourceOnce_;
  mutable std::string source_;
};

/// What a lookup did, for logs and `lcejit-dump --n-series`.
struct ProgramLookup {
  std::shared_ptr<const CompiledProgram> compiled;
  bool planned = false;  ///< the Program was not in the memory cache
  runtime::CacheOrigin binaryOrigin = runtime::CacheOrigin::Memory;
};

class LceJit {
public:
  /// Validates options (Error(InvalidArgument) naming the option), builds the graph and
  /// runs the pass pipeline; `trace` sees every stage (dumps).
  /// `forwardOnly`: the loss only; `scaledGradients`: a 4th input, grad_scale (rank-0
  /// f32 on the device), multiplies the gradients (fe::LceSpec::gradScale).
  /// `recompute`: plan the vocab-chunked recompute backward whatever LCEJIT_BACKWARD says
  /// (part of the cache key): the Program of the calls a slab-only Program does not serve
  /// ([Note: values scaled in place] in plan/Program.h).
  explicit LceJit(const LinearCrossEntropyOptions &options, pipeline::TraceSink trace = {},
                  bool forwardOnly = false, bool scaledGradients = false,
                  bool recompute = false);

  /// The loss only (LinearCrossEntropy::forward): no gradient outputs.
  bool forwardOnly() const { return forwardOnly_; }
  bool scaledGradients() const { return scaledGradients_; }

  const LinearCrossEntropyOptions &options() const { return options_; }
  const fe::Graph &graph() const { return *graph_; }
  const pipeline::FusedGraph &fused() const { return *fused_; }

  plan::PlanOptions planOptions(int64_t n, const plan::Target &target) const;
  /// Key of the process-wide Program cache for N on `target`.
  std::string cacheKey(int64_t n, const plan::Target &target) const;

  /// The Program for N (planned once per bucket and target, process-wide), emitted and
  /// compiled when `compile` is set (then binary is non-null).
  ProgramLookup lookup(int64_t n, const plan::Target &target, bool compile = true);

  /// The target to plan for when no GPU is present (the H200 of docs/performance.md).
  static plan::Target defaultTarget();

  /// Programs compiled in this process: lookups that had to run NVRTC for at least one
  /// module part (so one new bucket counts once, however many parts it has).
  static int64_t programCompileCount();
  /// The target of the current CUDA device (requires a GPU; see targetForDevice).
  static plan::Target deviceTarget();
  /// The target for a device, or Error(Unsupported) naming the GPU when lcejit cannot
  /// run on it (compute capability below 8.0).
  static plan::Target targetForDevice(const runtime::DeviceInfo &info);

private:
  LinearCrossEntropyOptions options_;
  bool forwardOnly_ = false;
  bool scaledGradients_ = false;
  bool recompute_ = false;
  pipeline::TraceSink trace_;
  std::unique_ptr<fe::Graph> graph_;
  std::unique_ptr<pipeline::FusedGraph> fused_;
};

/// Slow-path work of the op's call path, process-wide, for tests: a warm call ([Note: the
/// warm path] in LinearCrossEntropy.cpp) does none of it.
struct CallPathCounters {
  std::atomic<int64_t> programLookups{0}; ///< LceJit::lookup: a key built, the cache searched
  std::atomic<int64_t> programLoads{0};   ///< a Program's modules loaded into an op
  std::atomic<int64_t> runBuilds{0};      ///< a runtime::PreparedRun built for an op and N
  std::atomic<int64_t> workspaceAllocs{0}; ///< the op's own workspace (re)allocated
};
CallPathCounters &callPathCounters();

/// The size the op's own workspace grows to when a call needs `needed` bytes and it holds
/// `held` (0: none yet). [Note: workspace growth]: the first allocation is what the call
/// needs; a later one at least doubles, up to the budget, so that a run whose N drifts
/// upwards (packed sequences, the 20-N series) reallocates a few times, not on every new
/// high — each reallocation waits for the previous call and frees the old buffer, a host
/// stall in an otherwise asynchronous loop. Never below `needed`, even over the budget (a
/// budget too small for any schedule is the planner's to report).
int64_t grownWorkspaceBytes(int64_t held, int64_t needed, int64_t budget);

/// Validates and normalizes options (fills defaults); throws Error(InvalidArgument).
LinearCrossEntropyOptions validateOptions(const LinearCrossEntropyOptions &options);

/// The frontend description of the loss the options ask for.
fe::LceSpec lceSpecOf(const LinearCrossEntropyOptions &options);

/// Throws Error(DeviceCheck) for a bad target found by the device check (row, value).
[[noreturn]] void throwBadTarget(const LinearCrossEntropyOptions &options, int64_t row,
                                 int64_t value);

/// A TraceSink writing the stages selected by LCEJIT_DUMP into LCEJIT_DUMP_DIR, or an
/// empty sink when LCEJIT_DUMP is unset.
pipeline::TraceSink dumpSinkFromKnobs(const std::string &prefix);

} // namespace lcejit::ops
