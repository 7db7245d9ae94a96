//===- Planner.h - Fused tx function -> Program ---------------------------===//
//
// planProgram is a pure function of (fused function, options): the same inputs give an
// equal Program. Its decisions (tiles, splits, chunk size, why) are listed in
// Program::decisions and shown by `lcejit-dump --emit=plan` and `--tx-print-plan`.
//
// [Note: levels] Every value outside the fused ops is a row value ([N, 1]) or a scalar
// (rank 0). level(v) is the number of "barriers" it waits for: a global reduction over
// rows, or a fused GEMM. Row kernel l evaluates every op of level l per row (scalars
// redundantly), stores what later levels, GEMM sides or outputs need, and accumulates
// the global reductions whose results are level l + 1. The GEMMs of level l run after
// row kernel l and their results are level l + 1.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <optional>
#include <string>
#include <vector>

namespace lcejit::plan {

/// A device-side check on a row input (e.g. targets in [0, V) unless ignore_index).
struct InputCheck {
  int32_t input = -1; ///< index of the function argument ([N, 1] integer)
  int64_t lo = 0, hi = 0; ///< valid values are lo <= x < hi ...
  std::optional<int64_t> exempt; ///< ... or exactly this one
};

/// Which GEMM mainloop bf16 GEMMs use ([Note: the Hopper mainloop] in docs/hopper.md).
enum class Mainloop : uint8_t {
  Auto,    ///< wgmma on sm_90 when the shapes and precision allow it, else mma.sync
  MmaSync, ///< always the portable mma.sync mainloop
  Wgmma,   ///< wgmma wherever it can run (the plan's decisions say where it could not)
};

struct PlanOptions {
  std::string name = "lce";
  int64_t tokens = 8192; ///< any N of the bucket to plan for
  Target target;
  int64_t workspaceBudgetBytes = int64_t(512) << 20;
  /// bf16 GEMMs: false (fast) stores dZ as one bf16 operand, rounded once from f32;
  /// true (exact) splits it into bf16 hi + lo (each backward GEMM runs twice).
  bool exactGradients = false;
  /// Fast precision: add each row's target-column rounding residual of dZ back as a
  /// rank-1 update ([Note: the target-column residual] in Program.h). Off only for
  /// comparisons (LCEJIT_TARGET_RESIDUAL=0).
  bool targetResidual = true;
  /// The f32 dB correction of that residual finds each target's first and last rows in a
  /// kernel of its own instead of scanning the rows ([Note: a group's first and last rows]
  /// in Program.h). Off only for comparisons (LCEJIT_TARGET_GROUPS=0).
  bool targetGroups = true;
  /// The row loss of a peaked softmax from the target logit summed again in f64 ([Note:
  /// the exact target logit] in Program.h), and dZ's target column from the same terms
  /// ([Note: the target column's dZ]). Off only for comparisons (LCEJIT_EXACT_TARGET=0).
  bool exactTargetLogit = true;
  /// wgmma: dB's f32 output tiles leave through shared memory and TMA ([Note: sm90 TMA
  /// store] in lcejit_sm90.cuh). Off only for comparisons (LCEJIT_TMA_STORE=0).
  bool tmaStore = true;
  /// wgmma, with tmaStore: an accumulating dB over at most this many rows of K loads its
  /// tiles' old values and stores the sums ([Note: sm90 loaded sums]); 0: reduce-adds
  /// always. Unset: by card ([Note: loaded sums by card] in Program.h),
  /// kLoadedSumsMaxRows on a memory interface narrower than kWideMemoryBusBits, else 0
  /// (comparisons: LCEJIT_LOADED_SUMS_ROWS).
  std::optional<int64_t> loadedSumsMaxRows;
  /// wgmma: the forward GEMM's CTAs run in clusters of 2 on adjacent row tiles and share
  /// each B tile through TMA multicast ([Note: sm90 multicast] in lcejit_sm90.cuh). Off
  /// only for comparisons (LCEJIT_MULTICAST=0).
  bool multicast = true;
  /// > 0 (2 or 4): the wgmma forward's cluster size along the rows instead of
  /// kForwardCluster ([Note: sm90 multicast]; comparisons: LCEJIT_FWD_CLUSTER). Needs
  /// `multicast`.
  int32_t forwardCluster = 0;
  /// > 0 (1, 2 or 4): the wgmma dB's cluster along its row tiles, whose CTAs share each H
  /// tile by TMA multicast, instead of kDbCluster ([Note: dB multicast] in lcejit_sm90.cuh;
  /// comparisons: LCEJIT_DB_CLUSTER). Above 1 it needs `multicast`, and the dB adds to dW
  /// by reduce-adds only ([Note: sm90 loaded sums] needs one CTA a tile).
  int32_t dbCluster = 0;
  /// Whether the wgmma forward runs on a cooperative 128 x 256 tile whose consumers take
  /// column halves instead of ping-pong 128 x 128 tiles ([Note: sm90 column halves]); unset:
  /// the planner's choice ([Note: forward tile by card] in Program.h); LCEJIT_FWD_HALVES.
  /// Only where the vocabulary is a multiple of 256.
  std::optional<bool> forwardHalves;
  /// The materialized schedule stores a bounded value (a softcap) against a constant
  /// reference, any other against each row's target value ([Note: a per-row reference]),
  /// and the backward scales rows instead of forming dZ in a pass over the stored values
  /// ([Note: row-scaled stored values] in Program.h). Off only for comparisons
  /// (LCEJIT_ROW_SCALED=0).
  bool rowScaled = true;
  /// wgmma: dA's output tiles may be shared by clusters of up to 4 CTAs, each over part of
  /// K, when the call's tiles would leave SMs idle ([Note: sm90 split-K] in
  /// lcejit_sm90.cuh). Off only for comparisons (LCEJIT_SPLIT_K=0).
  bool splitK = true;
  /// wgmma: a dA launch whose 3k tiles fill fewer than three quarters of the SMs runs 3
  /// tiles on each group of 4 CTAs ([Note: dA stream-K] in SchedulePolicy.h). Off only for
  /// comparisons (LCEJIT_DA_STREAMK=0).
  bool daStreamK = true;
  /// wgmma: the slab block's dA runs its last round in chains of q tiles on q + 1 CTAs where
  /// the budget holds their slots ([Note: dA stream-K chains] in SchedulePolicy.h). Off only
  /// for comparisons (LCEJIT_DA_CHAIN=0).
  bool daChain = true;
  /// The materialized schedule may keep a call's stored values in the memory of the f32 dW
  /// it overwrites ([Note: stored values in dW] in SchedulePolicy.h). Off only for
  /// comparisons (LCEJIT_STORE_IN_OUTPUT=0).
  bool storeInOutput = true;
  /// > 0: a fixed chunk width instead of the budget's (tests).
  int64_t fixedChunkCols = 0;
  /// > 0: row blocks of this many rows where the budget holds them, instead of the run
  /// schedule's choice (ScheduleSpec::blockRows; comparisons and tuning: LCEJIT_BLOCK_ROWS).
  int64_t blockRows = 0;
  /// > 0: the materialized schedule's wgmma dA tile width (128, 192 or 256) instead of the
  /// planner's choice ([Note: dA tile width]; comparisons: LCEJIT_DA_TILE).
  int32_t lhsTileWidth = 0;
  /// > 0 (even): the wgmma forward's CTA order in groups of this many row tiles instead of
  /// kForwardOrderGroup ([Note: forward CTA order]; comparisons: LCEJIT_FWD_GROUP).
  int32_t forwardOrderGroup = 0;
  /// The wgmma forward's L2 hints for its loads of H (a) and W (b) instead of none
  /// ([Note: sm90 L2 hints]; comparisons: LCEJIT_FWD_L2).
  std::optional<L2Hints> forwardL2;
  /// A tile for every tensor-core GEMM instead of the planner's (tuning: LCEJIT_GEMM_TILE).
  std::optional<TileConfig> tensorCoreTile;
  Mainloop mainloop = Mainloop::Auto;
  /// The backward schedule: Materialized (the default) takes the materialized one where
  /// the planner can derive it and the budget holds enough rows ([Note: the materialized
  /// backward] in Program.h), else the plan says why and keeps the vocab-chunked
  /// recompute; Recompute asks for the recompute (LCEJIT_BACKWARD=recompute: the lean
  /// schedule, and comparisons). Measured on the H200 the materialized one is 1.12-1.24x
  /// the cuBLAS floor (Llama-3 head) where the recompute is 1.48x, with the same errors
  /// (docs/performance.md).
  enum class Backward : uint8_t { Recompute, Materialized };
  Backward backward = Backward::Materialized;
  /// Element type each function result is written as; empty = the result's own type
  /// (a float result that is a tx.cast of a gradient keeps the cast's type).
  std::vector<std::optional<DType>> outputTypes;
  std::vector<InputCheck> checks;
};

/// Plans a fused function. On failure returns std::nullopt and sets `error` to a message
/// that names the op that could not be planned.
std::optional<Program> planProgram(mlir::func::FuncOp func, const PlanOptions &options,
                                   std::string *error);

} // namespace lcejit::plan
