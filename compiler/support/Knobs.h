//===- Knobs.h - The one registry of environment knobs ---------------------===//
//
// Every LCEJIT_* environment variable lcejit reads is declared here, once, with its type,
// default and documentation. No other file calls getenv.
//
// [Note: read once] The environment is read lazily, on the first call of any accessor,
// into an immutable snapshot; later calls return values from that snapshot (one atomic
// load). The snapshot is built under a mutex, so concurrent first calls are safe. Tests
// that change the environment call reloadForTesting(), which makes the next accessor
// read the environment again. Snapshots are never freed, so references returned by an
// accessor stay valid for the life of the process, even across reloads.
//
// [Note: invalid values] A knob with a value that does not parse (LCEJIT_CACHE=maybe,
// LCEJIT_DUMP=ptxx, LCEJIT_WORKSPACE_MB=-3) makes every accessor throw
// Error(InvalidArgument) naming the variable, the value and what is accepted. A typo in
// a debugging knob is then noticed at once instead of silently ignored. An empty value
// means "unset".
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lcejit::knobs {

/// Documentation of one knob (for docs/runtime.md and `--help` of the tools).
struct KnobInfo {
  std::string_view name;         ///< e.g. "LCEJIT_CACHE_DIR"
  std::string_view type;         ///< "bool", "int", "path", "path list", "list of ..."
  std::string_view defaultValue; ///< human-readable default
  std::string_view doc;          ///< one sentence
};

/// All knobs, in a fixed order.
const std::vector<KnobInfo> &allKnobs();

/// A plain-text table of allKnobs() with their current values, for `--help`.
std::string describeKnobs();

/// Stages LCEJIT_DUMP can select.
enum class DumpStage : uint8_t { Graph, Mlir, Passes, Plan, Cuda, Ptx, Sass };
inline constexpr int kNumDumpStages = 7;
/// "graph", "mlir", "passes", "plan", "cuda", "ptx", "sass".
std::string_view dumpStageName(DumpStage stage);

/// Topics LCEJIT_LOG can select: "compile" (one line per NVRTC compile,
/// runtime/KernelCache.h) and "prepare" (one line per piece of host work a call does only
/// the first time, [Note: prepare log] in ops/lib/LinearCrossEntropy.cpp).
enum class LogTopic : uint8_t { Compile, Prepare };
inline constexpr int kNumLogTopics = 2;
std::string_view logTopicName(LogTopic topic);

/// LCEJIT_CACHE_DIR: root of the disk kernel cache.
/// Default $HOME/.cache/lcejit, or /tmp/lcejit-cache when HOME is unset.
const std::string &cacheDir();
/// LCEJIT_CACHE: false when set to 0 (disk cache disabled). Default true.
bool cacheEnabled();
/// LCEJIT_CACHE_MAX_MB: size cap of the disk kernel cache in MiB; 0 = no limit. Default
/// 1024. See [Note: eviction] in runtime/DiskCache.h.
int64_t cacheMaxMB();
/// LCEJIT_DUMP: whether a stage is to be dumped ("all" selects every stage).
bool dumpEnabled(DumpStage stage);
/// True when LCEJIT_DUMP selects at least one stage.
bool anyDumpEnabled();
/// LCEJIT_DUMP_DIR: where dumps go. Default "lcejit-dump" (relative to the working dir).
const std::string &dumpDir();
/// True when LCEJIT_DUMP_DIR is set explicitly (failure reproducers go there if so).
bool dumpDirIsSet();
/// LCEJIT_ALWAYS_COMPILE: compile even on a cache hit. Default false.
bool alwaysCompile();
/// LCEJIT_ASSERT_NO_COMPILE: a needed compile throws Error(Cache). Default false.
bool assertNoCompile();
/// LCEJIT_LOG: whether a topic is enabled ("all" selects every topic).
bool logEnabled(LogTopic topic);
/// LCEJIT_CUDA_INCLUDE: include directories passed to NVRTC (-I), in order.
/// Default: the CUDA toolkit's include dirs found at build time.
const std::vector<std::string> &cudaIncludeDirs();
/// LCEJIT_WORKSPACE_MB: workspace budget override in MiB (a positive integer), if set.
std::optional<int64_t> workspaceMB();
/// LCEJIT_BLOCK_ROWS: row blocks of this many rows where the budget holds them
/// (ScheduleSpec::blockRows), to measure other run schedules. Default: unset (the
/// policy's choice).
std::optional<int64_t> blockRows();
/// LCEJIT_LOADED_SUMS_ROWS: the most rows of K for which an accumulating wgmma dB loads its
/// tiles' old values and stores the sums (PlanOptions::loadedSumsMaxRows; 0: TMA
/// reduce-adds always), to measure other thresholds. Default: unset (1024).
std::optional<int64_t> loadedSumsRows();
/// LCEJIT_DA_TILE: the wgmma dA tile width of the materialized schedule (128, 192 or 256)
/// instead of the planner's choice ([Note: dA tile width]), to measure the others.
/// Default: unset.
std::optional<int64_t> daTile();
/// LCEJIT_FWD_GROUP: the wgmma forward's CTA order in groups of this many row tiles (even,
/// 2 to 64) instead of the planner's (16, or 8 on a memory interface narrower than 6144
/// bits: [Note: forward CTA order by card]), to measure other orders. Default: unset.
std::optional<int64_t> fwdGroup();
/// LCEJIT_FWD_L2: "a,b", the L2 eviction priority (normal, first or last) of the wgmma
/// forward's loads of H (a) and W (b) ([Note: sm90 L2 hints]), to measure them; normalized
/// to lower case without blanks. Default: unset (no hints).
const std::optional<std::string> &fwdL2();
/// LCEJIT_FWD_CLUSTER: the wgmma forward's cluster size along the rows (2 or 4) instead of
/// 2 ([Note: sm90 multicast]), to measure it. Default: unset.
std::optional<int64_t> fwdCluster();
/// LCEJIT_DB_CLUSTER: the wgmma dB's cluster size along its row tiles (1, 2 or 4) instead of
/// the planner's (plan::kDbCluster; [Note: dB multicast]), to measure it. Default: unset.
std::optional<int64_t> dbCluster();
/// LCEJIT_FWD_HALVES: whether the wgmma forward runs on column halves of a 128 x 256 tile
/// instead of ping-pong 128 x 128 tiles ([Note: sm90 column halves]), to measure either.
/// Default: unset (the planner's choice, [Note: forward tile by card]).
std::optional<bool> fwdHalves();
/// LCEJIT_GEMM_TILE: a tensor-core GEMM tile for every GEMM of a plan, for tuning:
/// "BMxBNxBK:WMxWN:STAGES" (e.g. "128x256x32:2x4:3") as {bm, bn, bk, warpsM, warpsN,
/// stages}. Unset: the planner's choice.
std::optional<std::array<int32_t, 6>> gemmTile();

/// LCEJIT_MAINLOOP: "auto" (default; wgmma on sm_90 where it can run), "mma" or "wgmma"
/// (plan::Mainloop). Anything else is Error(InvalidArgument) naming the variable.
const std::string &mainloop();

/// LCEJIT_BACKWARD: "materialized" (default) or "recompute" (plan::PlanOptions::Backward).
/// Anything else is Error(InvalidArgument) naming the variable.
const std::string &backward();

/// LCEJIT_TARGET_RESIDUAL (boolean, default on): fast precision adds dZ's target-column
/// rounding residual back ([Note: the target-column residual] in plan/Program.h); off only
/// to measure what it buys or costs.
bool targetResidual();

/// LCEJIT_TARGET_GROUPS (boolean, default on): the f32 dW correction of that residual finds
/// each target's first and last rows in a kernel of its own ([Note: a group's first and
/// last rows] in plan/Program.h) instead of scanning the rows; off only to measure what
/// that buys.
bool targetGroups();

/// LCEJIT_TMA_STORE (boolean, default on): on the wgmma mainloop, dB's f32 output tiles
/// leave through shared memory and TMA ([Note: sm90 TMA store]); off only to measure
/// what that buys.
bool tmaStore();

/// LCEJIT_EXACT_TARGET (boolean, default on): the row loss takes the target logit summed
/// again in f64 ([Note: the exact target logit] in plan/Program.h), and dZ's target column
/// is formed from the same terms ([Note: the target column's dZ]); off only to measure
/// what that buys.
bool exactTarget();

/// LCEJIT_MULTICAST (boolean, default on): the wgmma forward GEMM runs its CTAs in pairs
/// (thread-block clusters of 2) that share each W tile through TMA multicast ([Note: sm90
/// multicast] in lcejit_sm90.cuh); off only to measure what that buys.
bool multicast();

/// LCEJIT_ROW_SCALED (boolean, default on): where the forward's value is bounded (a
/// softcap), the materialized schedule stores it against a constant reference and scales
/// rows instead of forming dZ in a pass over the stored values ([Note: row-scaled stored
/// values] in plan/Program.h); off only to measure what that buys.
bool rowScaled();

/// LCEJIT_SPLIT_K (boolean, default on): a wgmma dA GEMM whose output tiles would leave
/// SMs idle runs each tile on a cluster of 2 or 4 CTAs, each over part of K ([Note: sm90
/// split-K] in lcejit_sm90.cuh); off only to measure what that buys.
bool splitK();

/// LCEJIT_DA_STREAMK (boolean, default on): a wgmma dA launch of T tiles, T a multiple of 3
/// that fills fewer than three quarters of the SMs, runs 3 tiles on each group of 4 CTAs
/// ([Note: dA stream-K] in plan/SchedulePolicy.h); off only to measure what that buys.
bool daStreamK();

/// LCEJIT_DA_CHAIN (boolean, default on): the slab block's wgmma dA launches run their last
/// round of tiles in chains of q tiles on q + 1 CTAs where the budget holds their slots
/// ([Note: dA stream-K chains] in plan/SchedulePolicy.h); off only to measure what that buys.
bool daChain();

/// LCEJIT_STORE_IN_OUTPUT (boolean, default on): the materialized schedule may keep a
/// call's stored values in the memory of the f32 dW it overwrites ([Note: stored values in
/// dW] in plan/SchedulePolicy.h); off only to measure what that buys.
bool storeInOutput();

/// Makes the next accessor call read the environment again. For tests only.
void reloadForTesting();

/// Counts reloadForTesting() calls: a cache of something derived from knobs (the op's
/// per-bucket call plans) compares it, an integer, instead of rebuilding a key.
int64_t generation();

} // namespace lcejit::knobs
