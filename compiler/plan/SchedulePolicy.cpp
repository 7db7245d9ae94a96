//===- SchedulePolicy.cpp - Row blocks and chunks for one N ----------------===//
//
// See [Note: choosing blocks and chunks] in SchedulePolicy.h.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/SchedulePolicy.h"
#include "compiler/support/Check.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace lcejit::plan {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t roundUp(int64_t a, int64_t b) { return ceilDiv(a, b) * b; }
int64_t align256(int64_t a) { return roundUp(a, 256); }

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

/// Bytes per chunk column for blocks of R rows (the slope of workspaceBytesFor in C).
int64_t perChunkCol(const Program &p, int64_t r) {
  int64_t s = 0;
  for (const BufferSpec &b : p.workspace)
    s += b.bytesPerRowCol * r;
  return s;
}

/// The widest chunk (a multiple of `align`, at most `maxCols`) that keeps the workspace of
/// R-row blocks within the budget; 0 when not even `align` columns fit.
int64_t widestChunk(const Program &p, int64_t n, int64_t r, int64_t align, int64_t maxCols) {
  const int64_t budget = p.schedule.budgetBytes;
  const int64_t base = workspaceBytesFor(p, n, r, 0);
  const int64_t slope = perChunkCol(p, r);
  if (slope == 0)
    return base <= budget ? maxCols : 0;
  int64_t left = budget - base;
  if (left <= 0)
    return 0;
  // An upper bound (alignment only adds bytes), then down to what really fits.
  int64_t c = std::min(maxCols, left / slope / align * align);
  while (c > 0 && workspaceBytesFor(p, n, r, c) > budget)
    c -= align;
  return std::max<int64_t>(c, 0);
}

RunSchedule chooseBlocksAndChunks(const Program &p, int64_t n);

/// ScheduleSpec::blockRows as a multiple of rowAlign (at least one), or 0: the policy.
int64_t blockRowsCap(const ScheduleSpec &spec) {
  const int64_t ra = std::max<int64_t>(spec.rowAlign, 1);
  return spec.blockRows > 0 ? std::max(ra, spec.blockRows / ra * ra) : 0;
}

} // namespace

std::string RunSchedule::describe() const {
  if (chunks == 0)
    return fmt::format("N = {}: {}; workspace {}", n, reason, mib(workspaceBytes));
  return fmt::format("N = {}: {} row block{} of {} rows, {} chunk{} of {} columns; "
                     "workspace {} of the {} budget{}; {}",
                     n, rowBlocks, rowBlocks == 1 ? "" : "s", rowsPerBlock, chunks,
                     chunks == 1 ? "" : "s", chunkCols, mib(workspaceBytes), mib(budgetBytes),
                     overBudget ? " (OVER BUDGET)" : "", reason);
}

int64_t bufferBytes(const BufferSpec &b, int64_t n, int64_t r, int64_t c) {
  return b.bytesPerRow * (b.blockLocal ? r : n) + b.bytesPerRowCol * r * c + b.bytesFixed;
}

int64_t workspaceBytesFor(const Program &p, int64_t n, int64_t r, int64_t c) {
  int64_t total = 0;
  for (const BufferSpec &b : p.workspace)
    total += align256(bufferBytes(b, n, r, c));
  return total;
}

int32_t chooseColumnSplits(const Program &p, int64_t rows) {
  const GemmReduceKernel *reduce = nullptr;
  for (const Kernel &k : p.kernels)
    if (const auto *g = std::get_if<GemmReduceKernel>(&k.body);
        g && g->gemm.math == MathMode::WgmmaBF16) {
      reduce = g;
      break;
    }
  if (!reduce || rows <= 0 || p.splits < 1)
    return std::max(p.splits, 1);
  const TileConfig &t = reduce->gemm.tile;
  const int64_t perCta = t.pingpong ? 2 : 1; // partial entries per CTA split
  const int64_t most = std::max<int64_t>(p.splits / perCta, 1);
  const int64_t tiles = ceilDiv(reduce->gemm.cols, t.bn);
  const int64_t rowTiles = ceilDiv(rows, t.bm);
  const int64_t sms = std::max<int32_t>(p.target.numSMs, 1);
  // Time ~ waves x column tiles per CTA; the fewest splits considered keep a CTA's run
  // within 4x of the plan's (L2: the CTAs resident together share fewer B tiles).
  int64_t best = most, bestCost = -1;
  for (int64_t s = most; s >= std::max<int64_t>(1, ceilDiv(most, 4)); --s) {
    const int64_t cost = ceilDiv(rowTiles * s, sms) * ceilDiv(tiles, s);
    if (bestCost < 0 || cost < bestCost) {
      best = s;
      bestCost = cost;
    }
  }
  return static_cast<int32_t>(best * perCta);
}

int32_t chooseLhsTileWidth(int64_t rows, int64_t k, int32_t numSMs) {
  const int64_t sms = std::max<int32_t>(numSMs, 1);
  const int64_t rowTiles = ceilDiv(std::max<int64_t>(rows, 1), 128);
  int32_t best = 256;
  double bestScore = -1;
  for (auto [bn, tileEff] : {std::pair<int32_t, double>{256, 1.0}, {192, 0.97}, {128, 0.93}}) {
    const int64_t tiles = rowTiles * ceilDiv(std::max<int64_t>(k, 1), bn);
    const double waves = static_cast<double>(ceilDiv(tiles, sms));
    const double score = static_cast<double>(tiles) / (static_cast<double>(sms) * waves) * tileEff;
    if (score > bestScore + 1e-9) {
      best = bn;
      bestScore = score;
    }
  }
  return best;
}

int32_t chooseSplitK(int64_t tiles, int64_t kblocks, int32_t numSMs, int32_t maxSplit) {
  const int64_t sms = std::max<int32_t>(numSMs, 1);
  if (tiles <= 0)
    return 1;
  int32_t best = 1;
  for (int32_t s : {2, 4}) {
    // Clusters of 2 are a TPC's two SMs: SMs / 2 of them fit at once. Clusters of 4 must
    // fit a GPC whole, which a harvested GPC of 14 or 18 SMs does not evenly: keep a
    // tenth of the SMs in reserve.
    const int64_t fit = s == 2 ? sms : sms * 9 / 10;
    if (s <= maxSplit && kblocks >= int64_t(8) * s && tiles * s <= fit)
      best = s;
  }
  return best;
}

RunSchedule chooseRunSchedule(const Program &p, int64_t n) {
  RunSchedule s = chooseBlocksAndChunks(p, n);
  s.splits = chooseColumnSplits(p, s.rowsPerBlock);
  return s;
}

namespace {
RunSchedule chooseBlocksAndChunks(const Program &p, int64_t n) {
  LCEJIT_CHECK(n >= 0, "chooseRunSchedule: N = {}", n);
  const ScheduleSpec &spec = p.schedule;
  RunSchedule s;
  s.n = n;
  s.budgetBytes = spec.budgetBytes;
  s.rowsPerBlock = n;
  s.rowBlocks = 1;
  const bool blockable = spec.firstBlockedStep >= 0;
  if (!p.hasChunkLoop()) {
    s.workspaceBytes = workspaceBytesFor(p, n, n, 0);
    s.overBudget = spec.budgetBytes > 0 && s.workspaceBytes > spec.budgetBytes;
    s.reason = "no chunk loop";
    return s;
  }
  const int64_t align = std::max<int64_t>(spec.chunkAlign, 1);
  const int64_t maxCols = roundUp(p.loopCols, align);
  const int64_t cap = blockable ? blockRowsCap(spec) : 0;
  auto finish = [&](const char *reason) {
    s.chunks = ceilDiv(p.loopCols, s.chunkCols);
    // Even the chunks out: the same count, the narrowest aligned width.
    if (spec.fixedChunkCols <= 0)
      s.chunkCols = std::min(maxCols, roundUp(ceilDiv(p.loopCols, s.chunks), align));
    s.chunks = ceilDiv(p.loopCols, s.chunkCols);
    s.workspaceBytes = workspaceBytesFor(p, n, s.rowsPerBlock, s.chunkCols);
    s.overBudget = s.workspaceBytes > spec.budgetBytes;
    s.reason = reason;
    return s;
  };
  if (spec.wholeRows) {
    // The materialized schedule ([Note: the materialized backward]): one chunk of all
    // columns; rows blocked as little as the budget allows (each block after the first
    // re-reads and re-writes the f32 dW).
    s.chunkCols = p.loopCols;
    s.chunks = 1;
    auto fits = [&](int64_t r) {
      return (cap == 0 || r <= cap) &&
             workspaceBytesFor(p, n, r, p.loopCols) <= spec.budgetBytes;
    };
    const char *reason = "materialized: one row block";
    if (n > 0 && !fits(n)) {
      const int64_t ra = std::max<int64_t>(spec.rowAlign, 1);
      if (!blockable || !fits(ra)) {
        s.rowsPerBlock = blockable ? std::min(n, ra) : n;
        reason = blockable ? "materialized: the budget is too small for one row tile of "
                             "stored values"
                           : "materialized: rows cannot be blocked in this Program";
      } else {
        int64_t lo = ra, hi = roundUp(n, ra); // lo fits, hi does not
        while (hi - lo > ra) {
          int64_t mid = (lo + hi) / 2 / ra * ra;
          if (mid <= lo)
            mid = lo + ra;
          (fits(mid) ? lo : hi) = mid;
        }
        s.rowBlocks = ceilDiv(n, lo);
        // Rows asked for (ScheduleSpec::blockRows) are taken as they are: blocks of `lo`
        // rows, the last one the rest.
        s.rowsPerBlock = cap > 0 ? std::min(n, lo)
                                 : std::min({n, lo, roundUp(ceilDiv(n, s.rowBlocks), ra)});
        // An even number of row tiles when it fits: an odd count (1920 rows = 15 tiles)
        // loses the forward's cluster pairs and fills 1.82 waves of 132 SMs; measured 5-6 %
        // dearer per row than 2048 (docs/performance.md, session 13). The block count
        // stays; the last block takes what is left.
        if (const int64_t even = roundUp(s.rowsPerBlock, 2 * ra);
            even != s.rowsPerBlock && even <= lo && even < n)
          s.rowsPerBlock = even;
        reason = cap > 0 && lo == cap
                     ? "materialized: rows blocked at ScheduleSpec::blockRows (LCEJIT_BLOCK_ROWS)"
                     : "materialized: rows blocked so that a block's stored values fit the budget";
      }
      s.rowBlocks = ceilDiv(n, std::max<int64_t>(s.rowsPerBlock, 1));
    }
    s.workspaceBytes = workspaceBytesFor(p, n, s.rowsPerBlock, s.chunkCols);
    s.overBudget = s.workspaceBytes > spec.budgetBytes;
    s.reason = reason;
    return s;
  }
  if (spec.fixedChunkCols > 0) {
    s.chunkCols = spec.fixedChunkCols;
    return finish("fixed chunk width");
  }
  const int64_t good = std::min(maxCols, roundUp(spec.goodChunkCols, align));
  // When nothing fits, chunks narrower than this would make the chunk loop, not the GEMMs,
  // the cost (each chunk re-reads and re-writes the f32 dH accumulator).
  const int64_t fallback = std::min(maxCols, roundUp(spec.fallbackChunkCols, align));
  // 1. All rows in one block.
  int64_t c = widestChunk(p, n, n, align, maxCols);
  const bool oneBlock = cap > 0 ? n <= cap && c >= align
                                : c >= good || !blockable || n <= spec.minBlockRows;
  if (oneBlock) {
    if (c >= align) {
      s.chunkCols = c;
      return finish(c == maxCols ? "one block, one chunk: everything fits"
                                 : "one block: dW is written once");
    }
    s.chunkCols = fallback;
    return finish(blockable ? "the budget is too small for any schedule"
                            : "rows cannot be blocked in this Program and the budget is too "
                              "small: over budget by the least that keeps chunks efficient");
  }
  // 2. Row blocks: the largest R (a multiple of rowAlign, at least minBlockRows) that
  //    leaves room for `good` columns, then the fewest equal blocks of at most R rows.
  const int64_t ra = std::max<int64_t>(spec.rowAlign, 1);
  int64_t lo = std::max<int64_t>(ra, roundUp(spec.minBlockRows, ra));
  int64_t r = lo;
  if (workspaceBytesFor(p, n, lo, good) <= spec.budgetBytes) {
    int64_t hi = roundUp(n, ra); // known not to fit (step 1)
    while (hi - lo > ra) {       // invariant: lo fits, hi does not
      int64_t mid = (lo + hi) / 2 / ra * ra;
      if (mid <= lo)
        mid = lo + ra;
      if (workspaceBytesFor(p, n, mid, good) <= spec.budgetBytes)
        lo = mid;
      else
        hi = mid;
    }
    r = lo;
  }
  // Rows asked for (ScheduleSpec::blockRows): that many, or the most that leave room for
  // the narrowest chunk.
  const bool capped = cap > 0;
  if (capped) {
    r = cap;
    while (r > ra && widestChunk(p, n, r, align, maxCols) < align)
      r -= ra;
  }
  s.rowBlocks = ceilDiv(n, r);
  // Even the blocks out, never above r (which is what fits); rows asked for are taken as
  // they are.
  s.rowsPerBlock = capped ? std::min(n, r) : std::min({n, r, roundUp(ceilDiv(n, s.rowBlocks), ra)});
  s.rowBlocks = ceilDiv(n, s.rowsPerBlock);
  c = widestChunk(p, n, s.rowsPerBlock, align, maxCols);
  s.chunkCols = c >= align ? c : fallback;
  return finish(c < align ? "the budget is too small for any schedule"
                 : capped  ? "rows blocked at ScheduleSpec::blockRows (LCEJIT_BLOCK_ROWS)"
                           : "rows blocked to leave room for wide chunks");
}

} // namespace

} // namespace lcejit::plan
