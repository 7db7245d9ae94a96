//===- Knobs.cpp - The one registry of environment knobs -------------------===//

#include "compiler/support/Knobs.h"
#include "compiler/support/Check.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#ifndef LCEJIT_DEFAULT_CUDA_INCLUDE
#error "LCEJIT_DEFAULT_CUDA_INCLUDE must be defined by the build (compiler/CMakeLists.txt)"
#endif

namespace lcejit::knobs {

namespace {

constexpr std::string_view kCacheDir = "LCEJIT_CACHE_DIR";
constexpr std::string_view kCache = "LCEJIT_CACHE";
constexpr std::string_view kCacheMaxMB = "LCEJIT_CACHE_MAX_MB";
constexpr std::string_view kDump = "LCEJIT_DUMP";
constexpr std::string_view kDumpDir = "LCEJIT_DUMP_DIR";
constexpr std::string_view kAlwaysCompile = "LCEJIT_ALWAYS_COMPILE";
constexpr std::string_view kAssertNoCompile = "LCEJIT_ASSERT_NO_COMPILE";
constexpr std::string_view kLog = "LCEJIT_LOG";
constexpr std::string_view kCudaInclude = "LCEJIT_CUDA_INCLUDE";
constexpr std::string_view kWorkspaceMB = "LCEJIT_WORKSPACE_MB";
constexpr std::string_view kBlockRows = "LCEJIT_BLOCK_ROWS";
constexpr std::string_view kGemmTile = "LCEJIT_GEMM_TILE";
constexpr std::string_view kMainloop = "LCEJIT_MAINLOOP";
constexpr std::string_view kBackward = "LCEJIT_BACKWARD";
constexpr std::string_view kTargetResidual = "LCEJIT_TARGET_RESIDUAL";
constexpr std::string_view kTargetGroups = "LCEJIT_TARGET_GROUPS";
constexpr std::string_view kTmaStore = "LCEJIT_TMA_STORE";
constexpr std::string_view kLoadedSumsRows = "LCEJIT_LOADED_SUMS_ROWS";
constexpr std::string_view kExactTarget = "LCEJIT_EXACT_TARGET";
constexpr std::string_view kMulticast = "LCEJIT_MULTICAST";
constexpr std::string_view kRowScaled = "LCEJIT_ROW_SCALED";
constexpr std::string_view kSplitK = "LCEJIT_SPLIT_K";
constexpr std::string_view kDaStreamK = "LCEJIT_DA_STREAMK";
constexpr std::string_view kDaChain = "LCEJIT_DA_CHAIN";
constexpr std::string_view kStoreInOutput = "LCEJIT_STORE_IN_OUTPUT";
constexpr std::string_view kDaTile = "LCEJIT_DA_TILE";
constexpr std::string_view kFwdGroup = "LCEJIT_FWD_GROUP";
constexpr std::string_view kFwdL2 = "LCEJIT_FWD_L2";
constexpr std::string_view kFwdCluster = "LCEJIT_FWD_CLUSTER";
constexpr std::string_view kDbCluster = "LCEJIT_DB_CLUSTER";
constexpr std::string_view kFwdHalves = "LCEJIT_FWD_HALVES";

constexpr std::array<std::string_view, kNumDumpStages> kDumpStageNames = {
    "graph", "mlir", "passes", "plan", "cuda", "ptx", "sass"};
constexpr std::array<std::string_view, kNumLogTopics> kLogTopicNames = {"compile", "prepare"};

/// The parsed snapshot of every knob.
struct Values {
  std::string cacheDir;
  bool cacheEnabled = true;
  int64_t cacheMaxMB = 1024;
  std::array<bool, kNumDumpStages> dump{};
  std::string dumpDir;
  bool dumpDirIsSet = false;
  bool alwaysCompile = false;
  bool assertNoCompile = false;
  std::array<bool, kNumLogTopics> log{};
  std::vector<std::string> cudaIncludeDirs;
  std::optional<int64_t> workspaceMB;
  std::optional<int64_t> blockRows;
  std::optional<int64_t> loadedSumsRows;
  std::optional<int64_t> daTile;
  std::optional<int64_t> fwdGroup;
  std::optional<std::string> fwdL2;
  std::optional<int64_t> fwdCluster;
  std::optional<int64_t> dbCluster;
  std::optional<bool> fwdHalves;
  std::optional<std::array<int32_t, 6>> gemmTile;
  std::string mainloop = "auto";
  std::string backward = "materialized";
  bool targetResidual = true;
  bool targetGroups = true;
  bool tmaStore = true;
  bool exactTarget = true;
  bool multicast = true;
  bool rowScaled = true;
  bool splitK = true;
  bool daStreamK = true;
  bool daChain = true;
  bool storeInOutput = true;
};

/// The only getenv in lcejit. Unset and empty are the same: std::nullopt.
std::optional<std::string> readEnv(std::string_view name) {
  const char *v = std::getenv(std::string(name).c_str());
  if (!v || !*v)
    return std::nullopt;
  return std::string(v);
}

std::string lower(std::string_view s) {
  std::string r;
  for (char c : s)
    r.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return r;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos)
      end = s.size();
    std::string_view part = trim(s.substr(start, end - start));
    if (!part.empty())
      parts.emplace_back(part);
    start = end + 1;
  }
  return parts;
}

bool parseBool(std::string_view name, const std::optional<std::string> &value, bool dflt) {
  if (!value)
    return dflt;
  std::string v = lower(trim(*value));
  if (v == "1" || v == "true" || v == "yes" || v == "on")
    return true;
  if (v == "0" || v == "false" || v == "no" || v == "off")
    return false;
  LCEJIT_THROW(InvalidArgument,
               "environment variable {}='{}' is not a boolean (use 1/0, true/false, "
               "yes/no or on/off)",
               name, *value);
}

/// A comma list of names from `valid`, or "all". Returns one flag per valid name.
template <size_t K>
std::array<bool, K> parseNameList(std::string_view name, const std::optional<std::string> &value,
                                  const std::array<std::string_view, K> &valid) {
  std::array<bool, K> on{};
  if (!value)
    return on;
  for (const std::string &item : split(*value, ',')) {
    std::string v = lower(item);
    if (v == "all") {
      on.fill(true);
      continue;
    }
    auto it = std::find(valid.begin(), valid.end(), v);
    if (it == valid.end())
      LCEJIT_THROW(InvalidArgument,
                   "environment variable {}='{}': unknown item '{}' (valid: {}, all)", name,
                   *value, item, fmt::join(valid, ", "));
    on[static_cast<size_t>(it - valid.begin())] = true;
  }
  return on;
}

/// "BMxBNxBK:WMxWN:S": six positive integers (sizes up to 1024).
std::optional<std::array<int32_t, 6>> parseTile(std::string_view name,
                                                const std::optional<std::string> &value) {
  if (!value)
    return std::nullopt;
  std::array<int32_t, 6> t{};
  std::string v(trim(*value));
  int used = 0;
  int n = std::sscanf(v.c_str(), "%dx%dx%d:%dx%d:%d%n", &t[0], &t[1], &t[2], &t[3], &t[4],
                      &t[5], &used);
  bool ok = n == 6 && used == static_cast<int>(v.size());
  for (int32_t x : t)
    ok = ok && x > 0 && x <= 1024;
  if (!ok)
    LCEJIT_THROW(InvalidArgument,
                 "environment variable {}='{}' is not a tile BMxBNxBK:WMxWN:STAGES of positive "
                 "integers (e.g. 128x256x32:2x4:3)",
                 name, *value);
  return t;
}

/// An integer in [lo, hi], or std::nullopt when unset; anything else throws naming the
/// variable, its value and `what` it must be.
std::optional<int64_t> parseIntIn(std::string_view name, const std::optional<std::string> &value,
                                  int64_t lo, int64_t hi, std::string_view what) {
  if (!value)
    return std::nullopt;
  std::string_view v = trim(*value);
  int64_t x = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || ptr != v.data() + v.size() || v.empty() || x < lo || x > hi)
    LCEJIT_THROW(InvalidArgument, "environment variable {}='{}' is not {}", name, *value,
                 what);
  return x;
}

/// A positive count of `unit` (MiB, rows, ...) up to 2^20: 1 TiB of workspace in MiB, a
/// million rows or columns, is far beyond any GPU; larger is a typo.
std::optional<int64_t> parsePositiveInt(std::string_view name,
                                        const std::optional<std::string> &value,
                                        std::string_view unit) {
  constexpr int64_t kMax = int64_t(1) << 20;
  return parseIntIn(name, value, 1, kMax,
                    fmt::format("a positive integer number of {} (1..{})", unit, kMax));
}

/// A size in MiB where 0 means "no limit": a non-negative integer up to 2^30 (1 PiB).
int64_t parseNonNegativeMB(std::string_view name, const std::optional<std::string> &value,
                           int64_t dflt) {
  constexpr int64_t kMax = int64_t(1) << 30;
  return parseIntIn(name, value, 0, kMax,
                    fmt::format("a non-negative integer number of MiB (0..{}; 0 = no limit)",
                                kMax))
      .value_or(dflt);
}

/// A number of rows where 0 means "none": a non-negative integer up to 2^31.
std::optional<int64_t> parseNonNegativeRows(std::string_view name,
                                            const std::optional<std::string> &value) {
  constexpr int64_t kMax = int64_t(1) << 31;
  return parseIntIn(name, value, 0, kMax,
                    fmt::format("a non-negative integer number of rows (0..{})", kMax));
}

std::string defaultCacheDir() {
  if (std::optional<std::string> home = readEnv("HOME"))
    return *home + "/.cache/lcejit";
  return "/tmp/lcejit-cache";
}

std::unique_ptr<Values> readAll() {
  auto v = std::make_unique<Values>();
  v->cacheDir = readEnv(kCacheDir).value_or(defaultCacheDir());
  v->cacheEnabled = parseBool(kCache, readEnv(kCache), true);
  v->cacheMaxMB = parseNonNegativeMB(kCacheMaxMB, readEnv(kCacheMaxMB), 1024);
  v->dump = parseNameList(kDump, readEnv(kDump), kDumpStageNames);
  std::optional<std::string> dumpDir = readEnv(kDumpDir);
  v->dumpDirIsSet = dumpDir.has_value();
  v->dumpDir = dumpDir.value_or("lcejit-dump");
  v->alwaysCompile = parseBool(kAlwaysCompile, readEnv(kAlwaysCompile), false);
  v->assertNoCompile = parseBool(kAssertNoCompile, readEnv(kAssertNoCompile), false);
  v->log = parseNameList(kLog, readEnv(kLog), kLogTopicNames);
  v->cudaIncludeDirs =
      split(readEnv(kCudaInclude).value_or(LCEJIT_DEFAULT_CUDA_INCLUDE), ':');
  v->workspaceMB = parsePositiveInt(kWorkspaceMB, readEnv(kWorkspaceMB), "MiB");
  v->blockRows = parsePositiveInt(kBlockRows, readEnv(kBlockRows), "rows");
  v->loadedSumsRows = parseNonNegativeRows(kLoadedSumsRows, readEnv(kLoadedSumsRows));
  v->daTile = parsePositiveInt(kDaTile, readEnv(kDaTile), "columns");
  if (v->daTile && *v->daTile != 128 && *v->daTile != 192 && *v->daTile != 256)
    LCEJIT_THROW(InvalidArgument, "environment variable {}='{}' must be 128, 192 or 256",
                 kDaTile, *v->daTile);
  v->fwdGroup = parsePositiveInt(kFwdGroup, readEnv(kFwdGroup), "row tiles");
  if (v->fwdGroup && (*v->fwdGroup % 2 != 0 || *v->fwdGroup > 64))
    LCEJIT_THROW(InvalidArgument, "environment variable {}='{}' must be even, 2 to 64",
                 kFwdGroup, *v->fwdGroup);
  v->fwdCluster = parsePositiveInt(kFwdCluster, readEnv(kFwdCluster), "CTAs");
  if (v->fwdCluster && *v->fwdCluster != 2 && *v->fwdCluster != 4)
    LCEJIT_THROW(InvalidArgument, "environment variable {}='{}' must be 2 or 4", kFwdCluster,
                 *v->fwdCluster);
  v->dbCluster = parsePositiveInt(kDbCluster, readEnv(kDbCluster), "CTAs");
  if (v->dbCluster && *v->dbCluster != 1 && *v->dbCluster != 2 && *v->dbCluster != 4)
    LCEJIT_THROW(InvalidArgument, "environment variable {}='{}' must be 1, 2 or 4", kDbCluster,
                 *v->dbCluster);
  if (std::optional<std::string> h = readEnv(kFwdL2)) {
    // "a,b": H's and W's hint, each normal, first or last ([Note: sm90 L2 hints]).
    const std::vector<std::string> parts = split(lower(trim(*h)), ',');
    auto hint = [](const std::string &x) {
      return x == "normal" || x == "first" || x == "last";
    };
    if (parts.size() != 2 || !hint(parts[0]) || !hint(parts[1]))
      LCEJIT_THROW(InvalidArgument,
                   "environment variable {}='{}' must be two of normal, first, last: the "
                   "hints of H's and W's loads, e.g. 'last,normal'",
                   kFwdL2, *h);
    v->fwdL2 = parts[0] + "," + parts[1];
  }
  v->gemmTile = parseTile(kGemmTile, readEnv(kGemmTile));
  if (std::optional<std::string> m = readEnv(kMainloop)) {
    std::string t(trim(*m));
    if (t != "auto" && t != "mma" && t != "wgmma")
      LCEJIT_THROW(InvalidArgument,
                   "environment variable {}='{}' must be auto, mma or wgmma", kMainloop, *m);
    v->mainloop = t;
  }
  if (std::optional<std::string> m = readEnv(kBackward)) {
    std::string t(trim(*m));
    if (t != "recompute" && t != "materialized")
      LCEJIT_THROW(InvalidArgument,
                   "environment variable {}='{}' must be recompute or materialized", kBackward,
                   *m);
    v->backward = t;
  }
  v->targetResidual = parseBool(kTargetResidual, readEnv(kTargetResidual), true);
  v->targetGroups = parseBool(kTargetGroups, readEnv(kTargetGroups), true);
  v->tmaStore = parseBool(kTmaStore, readEnv(kTmaStore), true);
  v->exactTarget = parseBool(kExactTarget, readEnv(kExactTarget), true);
  v->multicast = parseBool(kMulticast, readEnv(kMulticast), true);
  v->rowScaled = parseBool(kRowScaled, readEnv(kRowScaled), true);
  v->splitK = parseBool(kSplitK, readEnv(kSplitK), true);
  v->daStreamK = parseBool(kDaStreamK, readEnv(kDaStreamK), true);
  v->daChain = parseBool(kDaChain, readEnv(kDaChain), true);
  v->storeInOutput = parseBool(kStoreInOutput, readEnv(kStoreInOutput), true);
  if (std::optional<std::string> h = readEnv(kFwdHalves))
    v->fwdHalves = parseBool(kFwdHalves, h, false);
  return v;
}

std::mutex &snapshotMutex() {
  static std::mutex m;
  return m;
}
std::atomic<const Values *> gCurrent{nullptr};

const Values &current() {
  if (const Values *v = gCurrent.load(std::memory_order_acquire))
    return *v;
  std::lock_guard<std::mutex> lock(snapshotMutex());
  if (const Values *v = gCurrent.load(std::memory_order_relaxed))
    return *v;
  // Leaked on purpose: see [Note: read once] (references must outlive reloads).
  static auto *all = new std::vector<std::unique_ptr<Values>>();
  all->push_back(readAll());
  gCurrent.store(all->back().get(), std::memory_order_release);
  return *all->back();
}

} // namespace

const std::vector<KnobInfo> &allKnobs() {
  static const std::vector<KnobInfo> knobs = {
      {kCacheDir, "path", "$HOME/.cache/lcejit (/tmp/lcejit-cache if HOME is unset)",
       "Root directory of the on-disk kernel cache."},
      {kCache, "bool", "1", "0 disables the on-disk kernel cache (the in-memory one stays)."},
      {kCacheMaxMB, "non-negative int (MiB)", "1024",
       "Size cap of the on-disk kernel cache: after a store, least recently used entries are "
       "evicted until it fits; 0 = no limit."},
      {kDump, "list of graph,mlir,passes,plan,cuda,ptx,sass,all", "(none)",
       "Compilation stages to write to LCEJIT_DUMP_DIR."},
      {kDumpDir, "path", "lcejit-dump",
       "Where dumps go; NVRTC failure reproducers go here too when it is set."},
      {kAlwaysCompile, "bool", "0",
       "Compile with NVRTC even on a cache hit (keeps dumps complete; counts as a compile)."},
      {kAssertNoCompile, "bool", "0",
       "Any compile that is needed throws Error(Cache) naming the kernel and the reason."},
      {kLog, "list of compile,prepare,all", "(none)",
       "compile: one line per NVRTC compile on stderr (label, key, bucket, time, why); "
       "prepare: one line per first-time host step of a call (Program lookup and module "
       "load, prepared run, workspace, tensor maps) with its time."},
      {kCudaInclude, "path list (colon-separated)", LCEJIT_DEFAULT_CUDA_INCLUDE,
       "Include directories for NVRTC (it has no built-in headers)."},
      {kWorkspaceMB, "positive int (MiB)", "512",
       "Workspace budget of ops whose options leave it 0."},
      {kBlockRows, "positive int (rows)", "(the run schedule's choice)",
       "Row blocks of this many rows (rounded down to a multiple of 128; fewer where the "
       "budget holds fewer) where the rows are blocked: to measure other run schedules than "
       "the policy's (part of the cache key)."},
      {kLoadedSumsRows, "non-negative int (rows)",
       "(planner's choice: 1024 below a 6144-bit memory bus, else 0)",
       "wgmma dB: an accumulating launch over at most this many rows of K loads its tiles' "
       "old f32 values through the ring and stores the sums instead of TMA reduce-adds "
       "([Note: sm90 loaded sums]); 0: reduce-adds always. To measure other thresholds "
       "(part of the cache key)."},
      {kDaTile, "128 | 192 | 256", "(planner's choice)",
       "The materialized schedule's wgmma dA tile width instead of the planner's choice "
       "([Note: dA tile width]): to measure the others (part of the cache key)."},
      {kFwdGroup, "even, 2 to 64", "(planner's choice: 16, 8 below a 6144-bit memory bus)",
       "The wgmma forward's CTA order in groups of this many row tiles ([Note: forward CTA "
       "order]): to measure other orders (part of the cache key)."},
      {kFwdCluster, "2 | 4", "2",
       "The wgmma forward's CTAs of this many adjacent row tiles as a cluster sharing each W "
       "tile by TMA multicast ([Note: sm90 multicast]): to measure them (part of the cache "
       "key; LCEJIT_MULTICAST=0 turns clusters off)."},
      {kDbCluster, "1 | 2 | 4", "1",
       "The wgmma dB's CTAs of this many adjacent row tiles as a cluster sharing each H tile "
       "by TMA multicast ([Note: dB multicast]); 1: no clusters. To measure them (part of "
       "the cache key; LCEJIT_MULTICAST=0 turns clusters off)."},
      {kFwdHalves, "bool", "(planner's choice: 1 below a 6144-bit memory bus without softcap)",
       "The wgmma forward on a cooperative 128 x 256 tile whose consumers take column halves "
       "and share H's k-block, instead of ping-pong 128 x 128 tiles ([Note: sm90 column "
       "halves]; where the vocabulary is a multiple of 256): to measure it (part of the "
       "cache key)."},
      {kFwdL2, "H,W: each normal | first | last", "normal,normal",
       "The L2 eviction priority of the wgmma forward's TMA loads of H's row tiles and W's "
       "column tiles ([Note: sm90 L2 hints]): to measure them (part of the cache key)."},
      {kGemmTile, "BMxBNxBK:WMxWN:STAGES", "(planner's choice)",
       "Tensor-core GEMM tile for every GEMM of a plan (tuning; part of the cache key)."},
      {kMainloop, "auto | mma | wgmma", "auto",
       "bf16 GEMM mainloop: auto takes the sm_90a wgmma path where it can run, mma keeps "
       "the portable mma.sync one (comparisons; part of the cache key)."},
      {kBackward, "materialized | recompute", "materialized",
       "Backward schedule: materialized (the default: the forward stores fp16 values that "
       "the backward forms dZ from, 6*N*D*V of GEMM work; taken where the planner can "
       "derive it and the budget holds enough rows, else the plan says why and keeps the "
       "recompute) or recompute (vocab-chunked, the lean schedule; part of the cache key)."},
      {kTargetResidual, "bool", "1",
       "Fast precision: add dZ's target-column bf16 rounding residual back as a rank-1 "
       "update (0: leave it out, to measure what it buys; part of the cache key)."},
      {kTargetGroups, "bool", "1",
       "f32 dW: the target-column correction finds each target's first and last rows in a "
       "kernel of its own instead of scanning the launch's rows for them (0: scan, to "
       "measure what it buys; part of the cache key)."},
      {kSplitK, "bool", "1",
       "wgmma dA: tiles that would leave SMs idle run on clusters of 2 or 4 CTAs, each over "
       "part of K, summed in a fixed order (0: never split, to measure what it buys; part of "
       "the cache key)."},
      {kDaStreamK, "bool", "1",
       "wgmma dA: a launch of 3k tiles that would fill fewer than three quarters of the SMs "
       "runs 3 tiles on each group of 4 CTAs, each over 3/4 of K, the parts summed in a fixed "
       "order (0: never, to measure what it buys; part of the cache key)."},
      {kDaChain, "bool", "1",
       "wgmma dA: the slab block's last round of tiles runs in chains of q tiles on q + 1 "
       "CTAs, each over q/(q+1) of K, where the budget holds a slot per tile (0: never, to "
       "measure what it buys; part of the cache key)."},
      {kStoreInOutput, "bool", "1",
       "Materialized schedule: a call that overwrites an f32 dW may keep the forward's stored "
       "values of its first 2*D rows in dW's memory, in one block (0: never, to measure what it "
       "buys; part of the cache key)."},
  };
  return knobs;
}

std::string describeKnobs() {
  std::string out = "lcejit environment knobs:\n";
  for (const KnobInfo &k : allKnobs()) {
    std::optional<std::string> v = readEnv(k.name);
    out += fmt::format("  {} ({}; default {})\n      {}\n      current: {}\n", k.name, k.type,
                       k.defaultValue, k.doc, v ? "'" + *v + "'" : std::string("unset"));
  }
  return out;
}

std::string_view dumpStageName(DumpStage stage) {
  return kDumpStageNames[static_cast<size_t>(stage)];
}

std::string_view logTopicName(LogTopic topic) {
  return kLogTopicNames[static_cast<size_t>(topic)];
}

const std::string &cacheDir() { return current().cacheDir; }
bool cacheEnabled() { return current().cacheEnabled; }
int64_t cacheMaxMB() { return current().cacheMaxMB; }
bool dumpEnabled(DumpStage stage) { return current().dump[static_cast<size_t>(stage)]; }
bool anyDumpEnabled() {
  const auto &d = current().dump;
  return std::any_of(d.begin(), d.end(), [](bool b) { return b; });
}
const std::string &dumpDir() { return current().dumpDir; }
bool dumpDirIsSet() { return current().dumpDirIsSet; }
bool alwaysCompile() { return current().alwaysCompile; }
bool assertNoCompile() { return current().assertNoCompile; }
bool logEnabled(LogTopic topic) { return current().log[static_cast<size_t>(topic)]; }
const std::vector<std::string> &cudaIncludeDirs() { return current().cudaIncludeDirs; }
std::optional<int64_t> workspaceMB() { return current().workspaceMB; }
std::optional<int64_t> blockRows() { return current().blockRows; }
std::optional<int64_t> loadedSumsRows() { return current().loadedSumsRows; }
std::optional<int64_t> daTile() { return current().daTile; }
std::optional<int64_t> fwdGroup() { return current().fwdGroup; }
const std::optional<std::string> &fwdL2() { return current().fwdL2; }
std::optional<int64_t> fwdCluster() { return current().fwdCluster; }
std::optional<int64_t> dbCluster() { return current().dbCluster; }
std::optional<bool> fwdHalves() { return current().fwdHalves; }
std::optional<std::array<int32_t, 6>> gemmTile() { return current().gemmTile; }
const std::string &mainloop() { return current().mainloop; }
const std::string &backward() { return current().backward; }
bool targetResidual() { return current().targetResidual; }
bool targetGroups() { return current().targetGroups; }
bool tmaStore() { return current().tmaStore; }
bool exactTarget() { return current().exactTarget; }
bool multicast() { return current().multicast; }
bool rowScaled() { return current().rowScaled; }
bool splitK() { return current().splitK; }
bool daStreamK() { return current().daStreamK; }
bool daChain() { return current().daChain; }
bool storeInOutput() { return current().storeInOutput; }

namespace {
std::atomic<int64_t> gGeneration{0};
} // namespace

void reloadForTesting() {
  std::lock_guard<std::mutex> lock(snapshotMutex());
  gCurrent.store(nullptr, std::memory_order_release);
  gGeneration.fetch_add(1, std::memory_order_acq_rel);
}

int64_t generation() { return gGeneration.load(std::memory_order_acquire); }

} // namespace lcejit::knobs
