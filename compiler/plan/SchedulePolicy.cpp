//===- SchedulePolicy.cpp - Row blocks and chunks for one N ----------------===//
//
// See [Note: choosing blocks and chunks] in SchedulePolicy.h.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/SchedulePolicy.h"
#include "compiler/support/Check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
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

// [Note: estimated run time] The units: one 128 x 256 x 64 k-block of bf16 MMA on one SM.
/// What a partly filled last wave costs, as a share of a full one: the SMs left idle in
/// it are not free at the power cap (the busy ones clock up), nor are they fully lost.
constexpr double kTailWaveCost = 0.5;
/// Bytes of extra DRAM traffic (the f32 read-modify-writes) per unit: A's f32 dW pass,
/// 4.2 GB, measured at ~0.6-0.75 ms a row block (sessions 13 and 15), ~1000 units.
constexpr double kBytesPerUnit = 4.2e6;
/// Every GEMM launch: its ramp-up and drain (~5 us).
constexpr double kUnitsPerLaunch = 6.0;
/// The estimated gain that makes the policy leave its rule for the estimate's choice.
constexpr double kClearGain = 0.02;

double waves(double ctas, int32_t sms) {
  const double w = ctas / std::max<int32_t>(sms, 1);
  return w + kTailWaveCost * (std::ceil(w) - w);
}

/// One launch of GEMM kernel `k` over `r` rows and a chunk of `cc` columns, with `splits`
/// partial entries per row (GemmReduce); 0 for other kernels.
double launchUnits(const Program &p, const Kernel &kernel, int64_t r, int64_t cc,
                   int32_t splits) {
  if (!isGemmKind(kernel.kind()) || r <= 0)
    return 0;
  const TileConfig &t = gemmTile(kernel);
  const int32_t sms = p.target.numSMs;
  const double tile = double(t.bm) * t.bn / (128.0 * 256.0);
  const int64_t rowTiles = ceilDiv(r, t.bm);
  double u = kUnitsPerLaunch;
  switch (kernel.kind()) {
  case KernelKind::GemmReduce: {
    const auto &g = std::get<GemmReduceKernel>(kernel.body).gemm;
    const int64_t per = t.twoEntries() ? 2 : 1, sc = std::max<int64_t>(splits / per, 1);
    const int64_t perCta = ceilDiv(ceilDiv(g.cols, t.bn), sc);
    u += waves(double(rowTiles * sc), sms) * double(perCta * ceilDiv(g.k, 64)) * tile;
    break;
  }
  case KernelKind::GemmDz: {
    const auto &z = std::get<GemmDzKernel>(kernel.body);
    if (z.rowFilter.valid()) // [Note: a per-row reference]: rows that rarely exist
      return 0;
    u += waves(double(rowTiles * ceilDiv(cc, t.bn)), sms) * double(ceilDiv(z.gemm.k, 64)) * tile;
    break;
  }
  case KernelKind::GemmDLhs: {
    const auto &d = std::get<GemmDLhsKernel>(kernel.body);
    const int64_t tiles = rowTiles * ceilDiv(d.k, t.bn), kb = ceilDiv(cc, 64);
    const int32_t split = t.splitK > 1 ? chooseSplitK(tiles, kb, sms, t.splitK) : 1;
    u += waves(double(tiles * split), sms) * double(ceilDiv(kb, split)) * tile;
    break;
  }
  case KernelKind::GemmDRhs: {
    const auto &d = std::get<GemmDRhsKernel>(kernel.body);
    u += waves(double(ceilDiv(cc, t.bm) * ceilDiv(d.k, t.bn)), sms) * double(ceilDiv(r, 64)) *
         tile;
    break;
  }
  default: break;
  }
  return u;
}

/// Extra traffic of one launch in row block `block` and chunk `chunk`: a GemmDRhs with an
/// f32 output adds to it from the second row block on, a GemmDLhs with an f32 output (the
/// recompute's dH accumulator) from the second chunk on.
double rmwUnits(const Kernel &kernel, int64_t r, int64_t cc, int64_t block, int64_t chunk) {
  if (const auto *d = std::get_if<GemmDRhsKernel>(&kernel.body);
      d && block > 0 && d->outType == DType::F32)
    return 8.0 * double(cc) * double(d->k) / kBytesPerUnit;
  if (const auto *d = std::get_if<GemmDLhsKernel>(&kernel.body);
      d && chunk > 0 && d->outType == DType::F32)
    return 8.0 * double(r) * double(d->k) / kBytesPerUnit;
  return 0;
}

} // namespace

double estimateRunUnits(const Program &p, int64_t n, int64_t rowsPerBlock, int64_t chunkCols) {
  LCEJIT_CHECK(n >= 0 && rowsPerBlock > 0, "estimateRunUnits: N = {}, {} rows a block", n,
               rowsPerBlock);
  const int64_t cols = std::max<int64_t>(p.loopCols, 1);
  const int64_t cc = chunkCols > 0 ? std::min(chunkCols, cols) : cols;
  const int32_t splits = chooseColumnSplits(p, std::min(n, rowsPerBlock));
  const int32_t first = p.schedule.firstBlockedStep, last = p.schedule.lastBlockedStep;
  // Blocks of rowsPerBlock rows and the rest; chunks of cc columns and the rest: two sizes
  // each, each costed once and counted.
  const int64_t fullBlocks = n / rowsPerBlock, restRows = n % rowsPerBlock;
  const int64_t fullChunks = cols / cc, restCols = cols % cc;
  double total = 0;
  auto step = [&](const Step &s, int64_t r, int64_t block) {
    if (s.kind == Step::Kind::Launch) {
      const Kernel &k = p.kernels[static_cast<size_t>(s.kernel)];
      return launchUnits(p, k, r, cols, splits) + rmwUnits(k, r, cols, block, 0);
    }
    double u = 0;
    for (int32_t ki : s.loopKernels) {
      const Kernel &k = p.kernels[static_cast<size_t>(ki)];
      if (!p.launches(ki, r, cc)) // [Note: dA widths per launch]
        continue;
      const double full = launchUnits(p, k, r, cc, splits);
      const double rest = restCols > 0 ? launchUnits(p, k, r, restCols, splits) : 0;
      u += double(fullChunks) * full + rest;
      // The first chunk, the other full ones, the rest.
      u += rmwUnits(k, r, cc, block, 0);
      if (fullChunks > 1)
        u += double(fullChunks - 1) * rmwUnits(k, r, cc, block, 1);
      if (restCols > 0)
        u += rmwUnits(k, r, restCols, block, fullChunks > 0 ? 1 : 0);
    }
    return u;
  };
  for (int32_t i = 0; i < static_cast<int32_t>(p.steps.size()); ++i) {
    const Step &s = p.steps[static_cast<size_t>(i)];
    if (first >= 0 && i >= first && i <= last && n > rowsPerBlock) {
      // The first block (no read-modify-write of dW), the other full ones, the rest.
      total += step(s, rowsPerBlock, 0);
      if (fullBlocks > 1)
        total += double(fullBlocks - 1) * step(s, rowsPerBlock, 1);
      if (restRows > 0)
        total += step(s, restRows, 1);
    } else {
      total += step(s, n, 0);
    }
  }
  return total;
}

namespace {

/// ScheduleSpec::blockRows as a multiple of rowAlign (at least one), or 0: the policy.
int64_t blockRowsCap(const ScheduleSpec &spec) {
  const int64_t ra = std::max<int64_t>(spec.rowAlign, 1);
  return spec.blockRows > 0 ? std::max(ra, spec.blockRows / ra * ra) : 0;
}

} // namespace

std::string RunSchedule::describe() const {
  if (chunks == 0)
    return fmt::format("N = {}: {}; workspace {}", n, reason, mib(workspaceBytes));
  if (slabGroup > 0) {
    const std::string rest =
        rowBlocks > 1 ? fmt::format(", then {} row block{} of {} rows", rowBlocks - 1,
                                    rowBlocks == 2 ? "" : "s", rowsPerBlock)
                      : std::string();
    // [Note: slab tails]
    const std::string tails =
        slabRows > slabHead ? fmt::format(" (rows {} on of each slab in the workspace's tails)",
                                          slabHead)
                            : std::string();
    return fmt::format("N = {}: 1 row block of {} rows, {} slabs of 128 columns, the first {} "
                       "in the gradient's memory, the last {} in the workspace{}, dB in "
                       "launches of up to {} slabs{}{}; workspace {} of the {} budget; {}",
                       n, slabRows, slabs, slabSplit, slabs - slabSplit, tails, slabGroup, rest,
                       lhsChainBytes > 0
                           ? ", dA's last round in chains ([Note: dA stream-K chains])"
                           : "",
                       mib(workspaceBytes), mib(budgetBytes), reason);
  }
  std::string estimate;
  if (ruleRowsPerBlock > 0)
    estimate = fmt::format(" (the estimated run time's choice, {:.1f} % below the rule's blocks "
                           "of {} rows{})",
                           100 * estimatedGain, ruleRowsPerBlock,
                           ruleChunkCols > 0 ? fmt::format(", chunks of {}", ruleChunkCols)
                                             : std::string());
  return fmt::format("N = {}: {} row block{} of {} rows, {} chunk{} of {} columns; "
                     "workspace {} of the {} budget{}; {}{}",
                     n, rowBlocks, rowBlocks == 1 ? "" : "s", rowsPerBlock, chunks,
                     chunks == 1 ? "" : "s", chunkCols, mib(workspaceBytes), mib(budgetBytes),
                     overBudget ? " (OVER BUDGET)" : "", reason, estimate);
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
  const int64_t perCta = t.twoEntries() ? 2 : 1; // partial entries per CTA split
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

namespace {
/// [Note: dA tile width]'s tile-efficiency of a width (256, 192 or 128).
double lhsTileEfficiency(int32_t bn) { return bn == 256 ? 1.0 : bn == 192 ? 0.97 : 0.93; }
} // namespace

int32_t chooseLhsTileWidth(int64_t rows, int64_t k, int32_t numSMs) {
  const int64_t sms = std::max<int32_t>(numSMs, 1);
  const int64_t rowTiles = ceilDiv(std::max<int64_t>(rows, 1), 128);
  int32_t best = 256;
  double bestScore = -1;
  for (int32_t bn : {256, 192, 128}) {
    const int64_t tiles = rowTiles * ceilDiv(std::max<int64_t>(k, 1), bn);
    const double waves = static_cast<double>(ceilDiv(tiles, sms));
    const double score = static_cast<double>(tiles) / (static_cast<double>(sms) * waves) *
                         lhsTileEfficiency(bn);
    if (score > bestScore + 1e-9) {
      best = bn;
      bestScore = score;
    }
  }
  return best;
}

double lhsLaunchCost(int64_t rows, int64_t k, int64_t kblocks, int32_t numSMs,
                     int32_t maxSplit, int32_t bn) {
  const int64_t sms = std::max<int32_t>(numSMs, 1);
  const double tileEff = lhsTileEfficiency(bn);
  const int64_t tiles =
      ceilDiv(std::max<int64_t>(rows, 1), 128) * ceilDiv(std::max<int64_t>(k, 1), bn);
  const int32_t split = chooseSplitK(tiles, kblocks, numSMs, maxSplit);
  return static_cast<double>(ceilDiv(tiles * split, sms)) * bn / (tileEff * split);
}

int32_t chooseLhsTileWidth(const std::vector<int64_t> &blockRows, int64_t k, int64_t kblocks,
                           int32_t numSMs, int32_t maxSplit, double *costs) {
  int32_t best = 256;
  double bestCost = -1;
  int i = 0;
  for (int32_t bn : {256, 192, 128}) {
    double cost = 0;
    for (int64_t rows : blockRows)
      cost += lhsLaunchCost(rows, k, kblocks, numSMs, maxSplit, bn);
    if (costs)
      costs[i] = cost;
    ++i;
    if (bestCost < 0 || cost < bestCost * (1 - 1e-9)) {
      best = bn;
      bestCost = cost;
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

int64_t lhsStreamKTail(int64_t tiles, int32_t numSMs) {
  const int64_t sms = std::max<int32_t>(numSMs, 1);
  return tiles <= sms ? tiles : tiles % sms;
}

bool lhsStreamK(int64_t tiles, int64_t kblocks, int32_t numSMs) {
  if (tiles <= 0 || kblocks < 16)
    return false;
  // One round on 4 T / 3 CTAs, or rounds of all SMs and a tail the groups of 4 can take
  // (lcejit_sm90.cuh's dlhs_tiles tests the same).
  const int64_t tail = lhsStreamKTail(tiles, numSMs);
  return tail > 0 && tail % 3 == 0 && tail / 3 * 4 <= std::max<int32_t>(numSMs, 1);
}

int64_t lhsStreamKBytes(int32_t bn, int32_t numSMs) {
  const int64_t groups = std::max<int32_t>(numSMs, 4) / 4;
  return kStreamKFlagBytes + groups * 2 * 128 * (bn / 2) * 4;
}

int32_t lhsChainQ(int64_t tiles, int64_t kblocks, int32_t numSMs) {
  const int64_t sms = std::max<int32_t>(numSMs, 1);
  if (tiles <= 0 || kblocks < 16 || sms > kChainFlagBytes / 8)
    return 0;
  // lcejit_sm90.cuh's StreamKChain::q computes the same from the launch's grid.
  const int64_t tail = lhsStreamKTail(tiles, numSMs);
  if (tail <= 0)
    return 0;
  for (int64_t q = 1; q <= std::min<int64_t>(tail, kChainMaxQ); ++q)
    if (tail + (tail + q - 1) / q <= sms)
      return kblocks >= 4 * (q + 1) ? static_cast<int32_t>(q) : 0;
  return 0;
}

int64_t lhsChainCtas(int64_t tiles, int64_t kblocks, int32_t numSMs) {
  const int32_t q = lhsChainQ(tiles, kblocks, numSMs);
  const int64_t sms = std::max<int32_t>(numSMs, 1);
  if (q == 0)
    return 0;
  return tiles > sms ? sms : tiles + (tiles + q - 1) / q;
}

int64_t lhsChainBytes(int32_t bn, int32_t numSMs) {
  return kChainFlagBytes + int64_t(std::max<int32_t>(numSMs - 1, 1)) * 128 * bn * 4;
}

int64_t lhsChainScheduleBytes(const Program &p, const RunSchedule &s) {
  if (p.schedule.lhsChain < 0 || s.slabGroup <= 0 || s.slabRows <= 0 || p.loopCols <= 0)
    return 0;
  const int64_t kblocks = (p.loopCols + 63) / 64;
  const int64_t sms = std::max<int32_t>(p.target.numSMs, 1);
  int64_t slots = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(p.kernels.size()); ++i) {
    const auto *d = std::get_if<GemmDLhsKernel>(&p.kernels[static_cast<size_t>(i)].body);
    if (!d || !d->chain.valid() || !p.launches(i, s.slabRows, p.loopCols))
      continue;
    const int64_t tiles = ((s.slabRows + 127) / 128) * ((d->k + d->tile.bn - 1) / d->tile.bn);
    // One run of the Program splits no chained launch (chooseSplitK: one CTA a tile).
    if (d->tile.splitK > 1 && chooseSplitK(tiles, kblocks, p.target.numSMs, d->tile.splitK) > 1)
      continue;
    if (lhsChainQ(tiles, kblocks, p.target.numSMs) > 0)
      slots = std::max(slots, lhsStreamKTail(tiles, static_cast<int32_t>(sms)) * 128 *
                                  d->tile.bn * 4);
  }
  return slots > 0 ? kChainFlagBytes + slots : 0;
}

RunSchedule chooseRunSchedule(const Program &p, int64_t n, bool outputFree) {
  RunSchedule s = chooseBlocksAndChunks(p, n);
  if (outputFree)
    if (std::optional<RunSchedule> slab = chooseSlabs(p, s)) {
      s = *slab;
      // [Note: dA stream-K chains]: the slots on top of the schedule chosen without them,
      // where the budget (without one, the ordinary schedule's workspace) still holds it.
      if (const int64_t chain = lhsChainScheduleBytes(p, s); chain > 0) {
        RunSchedule c = s;
        c.lhsChainBytes = chain;
        int64_t total = 0;
        p.workspaceOffsets(c, &total);
        const int64_t limit = p.schedule.budgetBytes > 0 ? p.schedule.budgetBytes
                                                         : s.slabOrdinaryWorkspaceBytes;
        if (total <= std::max(limit, s.workspaceBytes)) {
          c.workspaceBytes = std::max(total, s.workspaceBytes);
          s = c;
        }
      }
    }
  s.splits = chooseColumnSplits(p, s.rowsPerBlock);
  return s;
}

int64_t slabRegionBytes(const Program &p) {
  const ScheduleSpec &spec = p.schedule;
  if (spec.slabOutput < 0 || spec.slabOutput >= static_cast<int32_t>(p.outputs.size()))
    return 0;
  const TensorSpec &out = p.outputs[static_cast<size_t>(spec.slabOutput)];
  if (out.shape.size() != 2 || out.shape[0] < 0 || out.shape[1] <= 0)
    return 0;
  return kSlabCols * out.shape[1] * dtypeSize(out.dtype);
}

int64_t slabRowsMax(const Program &p) { return slabRegionBytes(p) / (kSlabCols * 2); }

namespace {
/// [Note: stored values in dW] The dB GEMM whose A operand is the stored values.
const GemmDRhsKernel *slabDRhs(const Program &p) {
  for (const Kernel &k : p.kernels)
    if (const auto *d = std::get_if<GemmDRhsKernel>(&k.body); d && d->slabs)
      return d;
  return nullptr;
}
} // namespace

bool servesCall(const Program &p, const RunSchedule &s) {
  return !p.schedule.slabOnly || (s.rowBlocks == 1 && !s.overBudget);
}

std::optional<RunSchedule> chooseSlabs(const Program &p, const RunSchedule &ordinary) {
  const ScheduleSpec &spec = p.schedule;
  const int64_t n = ordinary.n;
  const GemmDRhsKernel *db = slabDRhs(p);
  const int64_t rowsMax = slabRowsMax(p);
  // One block within the budget needs no slabs ([Note: values scaled in place]: a
  // slab-only Program serves it as it is).
  const bool oneBlock = ordinary.rowBlocks <= 1 && !ordinary.overBudget;
  if (spec.slabValues < 0 || !db || !spec.wholeRows || oneBlock || n <= 0 ||
      p.loopCols <= 0 || rowsMax <= 0)
    return std::nullopt;
  // Whole slabs: the materialized schedule's columns are a multiple of its 128-column tiles
  // (a partial last slab would need its columns past the last zeroed for dA's K).
  if (p.loopCols % kSlabCols != 0)
    return std::nullopt;
  const int64_t slabs = p.loopCols / kSlabCols;
  const int64_t full = slabs; // every slab's dW region is whole
  if (full < 2)
    return std::nullopt;
  // The slab block: all rows, or (more than a slab holds) the most a slab holds, in whole
  // row tiles, and ordinary blocks for the rest.
  const int64_t align = std::max<int64_t>(spec.rowAlign, 1);
  const bool mixed = n > rowsMax;
  // [Note: values scaled in place]: such a Program serves one block only.
  if (mixed && spec.slabOnly)
    return std::nullopt;
  // [Note: slab tails]: a region's rows in whole row tiles of dA (128) and of the block.
  const int64_t tileRows = std::lcm(align, int64_t(128));
  const int64_t head = mixed ? rowsMax / tileRows * tileRows : n;
  if (mixed && head < std::max(spec.minBlockRows, align))
    return std::nullopt; // a short slab block saves less than it costs
  RunSchedule s = ordinary;
  s.slabRows = head;
  s.slabHead = head;
  s.rowsPerBlock = n;
  s.rowBlocks = 1;
  s.chunkCols = p.loopCols;
  s.chunks = 1;
  s.ruleRowsPerBlock = s.ruleChunkCols = 0;
  s.estimatedGain = 0;
  s.slabs = slabs;
  s.slabStride = slabRegionBytes(p) / 2;
  // The workspace with G slabs in it, ordinary blocks of `rows` and a slab block of
  // `slabRows` rows (at least head: the rows past it are tails).
  auto workspaceOf = [&](int64_t g, int64_t rows, int64_t slabRows) {
    RunSchedule t = s;
    t.slabGroup = g;
    t.slabSplit = full - g;
    t.slabRows = slabRows;
    if (slabRows < n) {
      t.rowsPerBlock = rows;
      t.rowBlocks = 1 + (n - slabRows + rows - 1) / rows;
    } else {
      t.rowsPerBlock = n;
      t.rowBlocks = 1;
    }
    int64_t total = 0;
    p.workspaceOffsets(t, &total);
    return total;
  };
  // Within the budget (without one, no more than the ordinary schedule's workspace).
  const int64_t limit = spec.budgetBytes > 0 ? spec.budgetBytes : ordinary.workspaceBytes;
  // G slabs a dB launch: whole waves of tiles (dB's tiles of one slab: ceil(k / bn)), as
  // many as the workspace holds (fewer launches).
  const int64_t perSlab = std::max<int64_t>((db->k + db->tile.bn - 1) / db->tile.bn, 1);
  const int64_t sms = std::max<int64_t>(p.target.numSMs, 1);
  const int64_t unit = sms / std::gcd(sms, perSlab);
  const int64_t gMin = std::min(unit, full - 1);
  // The workspace grows with G and with the ordinary blocks' rows: the most of either that
  // fits, by bisection (this runs for every new N).
  auto most = [](int64_t lo, int64_t hi, auto fits) {
    // The largest x in [lo, hi] with fits(x), given fits(lo) (monotone); lo if none above.
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid))
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  };
  int64_t rows = n, slabRows = head;
  if (mixed) {
    // The ordinary blocks: the most rows (at most the ordinary schedule's) that leave room
    // for a slab block of gMin slabs, evened out over the blocks the rest needs.
    const int64_t rest = n - head;
    // Whole row tiles (the ordinary schedule's rows a block are, and so is the rest
    // rounded up).
    const int64_t top = std::min(ordinary.rowsPerBlock, (rest + align - 1) / align * align);
    if (top < align || workspaceOf(gMin, align, head) > limit)
      return std::nullopt;
    const int64_t cap = align * most(1, top / align, [&](int64_t t) {
                          return workspaceOf(gMin, t * align, head) <= limit;
                        });
    // [Note: slab tails]: the most rows the slab block takes with gMin slabs in the
    // workspace, the fewest ordinary blocks that leaves, and the fewest slab rows that
    // still leave only that many (the largest G).
    const int64_t longest =
        head + tileRows * most(0, (rest + tileRows - 1) / tileRows, [&](int64_t t) {
          return workspaceOf(gMin, cap, head + t * tileRows) <= limit;
        });
    const int64_t blocks = longest >= n ? 0 : (n - longest + cap - 1) / cap;
    if (blocks == 0) {
      slabRows = n;
    } else {
      const int64_t least = std::max(head, n - blocks * cap);
      slabRows = std::min(longest, (least + tileRows - 1) / tileRows * tileRows);
      const int64_t left = n - slabRows;
      rows = std::min(cap, ((left + blocks - 1) / blocks + align - 1) / align * align);
    }
    if (slabRows >= n) {
      slabRows = n; // one block: the slabs' tails hold the rows past the head
      rows = n;
      s.rowsPerBlock = n;
      s.rowBlocks = 1;
    } else {
      s.rowsPerBlock = rows;
      s.rowBlocks = 1 + (n - slabRows + rows - 1) / rows;
    }
    s.slabRows = slabRows;
    if (s.rowBlocks >= ordinary.rowBlocks)
      return std::nullopt; // no f32 pass saved
  }
  if (workspaceOf(1, rows, slabRows) > limit)
    return std::nullopt;
  int64_t g = most(1, full - 1,
                   [&](int64_t x) { return workspaceOf(x, rows, slabRows) <= limit; });
  if (g >= unit) {
    g -= g % unit;
  } else if (spec.slabOnly) {
    // Less than a whole number of waves: the G with the fullest last wave (the most tiles
    // per wave of its launches), the largest on a tie (lean A: 24 slabs of 16 tiles, 2.9
    // waves, not 28, 3.4). Only here so far: the default budget's schedules with G below a
    // wave's unit (Gemma-2's head) were measured with the most that fits.
    int64_t best = g;
    auto fill = [&](int64_t x) { return double(x * perSlab) / double((x * perSlab + sms - 1) / sms); };
    for (int64_t x = g; x >= 1; --x)
      if (fill(x) > fill(best) * 1.0001)
        best = x;
    g = best;
  }
  s.slabGroup = g;
  s.slabSplit = full - g;
  s.workspaceBytes = workspaceOf(g, rows, slabRows);
  s.slabOrdinaryWorkspaceBytes = ordinary.workspaceBytes;
  s.overBudget = false;
  s.reason = s.rowBlocks > 1
                 ? "materialized: the first row block's stored values in the gradient's "
                   "memory ([Note: stored values in dW]), the other blocks' in the workspace"
                 : "materialized: one row block, its stored values in the gradient's memory "
                   "([Note: stored values in dW])";
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
  // The estimate is calibrated on the wgmma mainloop (the H200); the mma.sync path keeps
  // the rules it had.
  const bool modeled = std::any_of(p.kernels.begin(), p.kernels.end(), [](const Kernel &k) {
    return isGemmKind(k.kind()) && gemmMath(k) == MathMode::WgmmaBF16;
  });
  // The evened chunk width for blocks of r rows (the recompute), or all columns.
  auto chunkFor = [&](int64_t r, bool chunked) {
    if (!chunked)
      return p.loopCols;
    const int64_t c = widestChunk(p, n, r, align, maxCols);
    return c < align ? c : std::min(maxCols, roundUp(ceilDiv(p.loopCols, ceilDiv(p.loopCols, c)), align));
  };
  // [Note: estimated run time] The rows a block (multiples of rowAlign in [loR, hiR], and
  // each one's evened form: the fewest blocks of that many rows made equal) with the least
  // estimated time; the larger on a tie.
  // Chunks: the widest evened, or (chunked) narrower ones, up to half as many again: the
  // dZ and dB GEMMs of a chunk are R x C and C x D outputs, whose tiles may fill the SMs'
  // last wave better at a narrower width.
  auto cheapest = [&](int64_t loR, int64_t hiR, bool chunked) {
    const int64_t ra = std::max<int64_t>(spec.rowAlign, 1);
    std::pair<int64_t, int64_t> best{std::min(n, hiR), chunkFor(std::min(n, hiR), chunked)};
    double bestUnits = -1;
    auto consider = [&](int64_t r, int64_t c) {
      if (r <= 0 || c <= 0)
        return;
      const double u = estimateRunUnits(p, n, r, c);
      if (bestUnits < 0 || u < bestUnits * (1 - 1e-9) ||
          (u <= bestUnits * (1 + 1e-9) && (r > best.first || (r == best.first && c > best.second)))) {
        best = {r, c};
        bestUnits = u;
      }
    };
    auto rows = [&](int64_t r) {
      r = std::min(r, n);
      const int64_t widest = chunkFor(r, chunked);
      consider(r, widest);
      if (!chunked || widest < align)
        return;
      const int64_t fewest = ceilDiv(p.loopCols, widest);
      for (int64_t k = fewest + 1; k <= fewest + fewest / 2 + 1; ++k)
        consider(r, std::min(maxCols, roundUp(ceilDiv(p.loopCols, k), align)));
    };
    // Every multiple of rowAlign in [loR, hiR] is a candidate; an evened form is one more
    // only below loR (each such once).
    const int64_t low = std::max(ra, loR);
    int64_t lastEvened = -1;
    for (int64_t r = hiR; r >= low; r -= ra) {
      rows(r);
      if (const int64_t e = roundUp(ceilDiv(n, ceilDiv(n, r)), ra); e < low && e != lastEvened) {
        rows(e);
        lastEvened = e;
      }
    }
    return best;
  };
  // The rule's rows, unless the estimate's best is clearly cheaper: the estimate is good
  // to a few percent (its calibration, docs/performance.md session 15), so a smaller gain
  // is not worth leaving the rule that measured well for.
  auto unlessCheaper = [&](int64_t rule, std::pair<int64_t, int64_t> best, bool chunked) {
    const std::pair<int64_t, int64_t> r{rule, chunkFor(rule, chunked)};
    if (best == r)
      return r;
    const double ur = estimateRunUnits(p, n, r.first, r.second);
    const double ub = estimateRunUnits(p, n, best.first, best.second);
    if (!(ub < ur * (1 - kClearGain)))
      return r;
    s.ruleRowsPerBlock = r.first;
    s.ruleChunkCols = chunked ? r.second : 0;
    s.estimatedGain = 1 - ub / ur;
    return best;
  };
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
        // Rows asked for (ScheduleSpec::blockRows) are taken as they are: blocks of `lo`
        // rows, the last one the rest. Otherwise the least estimated time ([Note:
        // estimated run time]) among blocks of lo/2 to lo rows.
        if (cap > 0) {
          s.rowsPerBlock = std::min(n, lo);
        } else {
          // The rule: the fewest blocks, evened out; an even number of row tiles when that
          // still fits (the last block takes what is left).
          s.rowsPerBlock = std::min({n, lo, roundUp(ceilDiv(n, ceilDiv(n, lo)), ra)});
          if (const int64_t even = roundUp(s.rowsPerBlock, 2 * ra);
              even != s.rowsPerBlock && even <= lo && even < n)
            s.rowsPerBlock = even;
          if (modeled)
            s.rowsPerBlock = unlessCheaper(s.rowsPerBlock, cheapest(lo / 2, lo, false), false).first;
        }
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
  const int64_t lo0 = lo;
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
  int64_t chosenCols = 0; // the estimate's chunk width, when it chose one
  if (capped) {
    r = cap;
    while (r > ra && widestChunk(p, n, r, align, maxCols) < align)
      r -= ra;
    s.rowsPerBlock = std::min(n, r);
  } else {
    // The rule: the fewest blocks of at most r rows, evened out.
    s.rowsPerBlock = std::min({n, r, roundUp(ceilDiv(n, ceilDiv(n, r)), ra)});
    if (modeled) {
      // Or the least estimated time among blocks of minBlockRows up to the rows that still
      // leave room for chunks of fallbackChunkCols columns, chunks as wide as the budget
      // allows for each.
      // (At most twice r: blocks that large leave chunks far narrower than goodChunkCols.)
      int64_t most = r;
      while (most + ra < roundUp(n, ra) && most + ra <= 2 * r &&
             widestChunk(p, n, most + ra, align, maxCols) >= fallback)
        most += ra;
      const auto [rows, cols] = unlessCheaper(s.rowsPerBlock, cheapest(lo0, most, true), true);
      s.rowsPerBlock = rows;
      chosenCols = cols;
    }
  }
  s.rowBlocks = ceilDiv(n, s.rowsPerBlock);
  c = widestChunk(p, n, s.rowsPerBlock, align, maxCols);
  s.chunkCols = c >= align ? (chosenCols > 0 ? std::min(chosenCols, c) : c) : fallback;
  return finish(c < align ? "the budget is too small for any schedule"
                 : capped  ? "rows blocked at ScheduleSpec::blockRows (LCEJIT_BLOCK_ROWS)"
                           : "rows blocked to leave room for wide chunks");
}

} // namespace

} // namespace lcejit::plan
