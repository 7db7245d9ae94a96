//===- SchedulePolicy.h - How a call with N rows is cut into blocks and chunks ===//
//
// The run-schedule policy: a pure function of a planned Program (its workspace buffers,
// ScheduleSpec and chunk loop) and the N of the call. It runs on the host at every launch
// (so it is cheap and allocation-light), in the executor, the fp64 Program interpreter,
// the op's workspace query and `lcejit-dump --emit=plan`. See [Note: the run schedule] in
// Program.h and docs/architecture.md "The schedule".
//
// [Note: choosing blocks and chunks] Work is the same for every choice (the GEMMs see every
// (row, column) once); what changes is the extra memory traffic and the workspace:
//   - a vocabulary chunk of C columns costs one read-modify-write of the f32 dH
//     accumulator per chunk: 8·R·D bytes, (V / C) times per row block;
//   - a row block of R rows costs one read-modify-write of the f32 dW (8·V·D bytes) per
//     block after the first;
//   - the workspace is about R·(bytes of f32 dH per row + C·bytes of dZ per element).
// With the budget B, traffic 8·N·V·D·(1/C + 1/R) is smallest near R = C; both stay far
// below the GEMMs' time once C and R are several thousand. What does not stay small is
// how the tiles of a block fill the SMs: dA's output is R x D, a few hundred tiles, and a
// block of 1536 rows at Llama-3's head (192 tiles of 128 x 256, 1.45 waves of 132 SMs)
// took 30 % longer than cuBLAS's dH (docs/performance.md, session 15). So: rows are not
// blocked while a chunk of at least goodChunkCols columns fits with all N rows (one block:
// dW written once); otherwise the rule is the fewest equal blocks that leave room for
// such chunks, chunks then as wide as the budget allows, evened out. On the wgmma path
// the estimate of [Note: estimated run time] ranks the other block sizes (at least
// minBlockRows, at most what leaves room for chunks of fallbackChunkCols) and chunk widths
// (the widest, or narrower up to half as many chunks again: a narrower chunk may fill the
// last wave of the dZ and dB GEMMs' tiles better), and the policy takes the estimate's
// best over the rule when it is at least 2 % cheaper. The materialized schedule (one
// chunk of all columns) does the same over blocks of half the rows the budget holds up to
// all of them. When nothing fits (the rows' own buffers alone exceed the budget, e.g. the
// f32 dH accumulator of all rows when rows cannot be blocked), chunks of fallbackChunkCols
// are used: narrower ones would make the chunk loop, not the GEMMs, the cost.
// RunSchedule::overBudget says so, and the workspace query reports the real size.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"

#include <optional>
#include <vector>

namespace lcejit::plan {

/// The schedule for a call with `n` rows (n >= 0). Pure and deterministic. `outputFree`:
/// the call overwrites ScheduleSpec::slabOutput (chooseSlabs may keep the stored values
/// there).
RunSchedule chooseRunSchedule(const Program &program, int64_t n, bool outputFree = false);

/// [Note: stored values in dW] The materialized schedule's stored values are rows x V
/// bf16, and the budget holds a block of them: every block after the first then re-reads
/// and re-writes the f32 dW, and short blocks leave dA's SMs idle (A 1.09x cuBLAS in blocks
/// of 2048 rows, 1.04x in one of 8192; B 1.26x against 1.10x: docs/performance.md, session
/// 16). A call that overwrites an f32 dW hands the op V x D x 4 bytes that hold nothing
/// until dB writes them: room for the values of up to 2·D rows. Laid out in slabs of
/// kSlabCols columns (slab i: the rows x 128 values of columns 128i.., row-major, 256 bytes
/// a row), slab i lives in dW's region i + G (its rows 128 (i + G) .. 128 (i + G) + 127,
/// 128 x D x 4 bytes) for i < slabSplit = (whole regions) - G, the others in the workspace.
/// dB runs in launches of at most G slabs aligned from the last, in order: the launch over
/// slabs [a, b) reads them (regions [a + G, b + G), not yet written, or the workspace) and
/// writes regions [a, b), which held slabs [a - G, b - G), read by earlier launches. So
/// kernel boundaries order every overwrite after the last read of what it overwrites.
/// The forward and the filtered dZ GEMM find a value's slab from its column (SlabSplit,
/// SlabStride, SlabBase), dA reads slabs below SlabSplit through one tensor map and the
/// rest through a second (TensorMapA2), each dB launch through one. The scaled A dB reads
/// keeps every column part at once, after the workspace's slabs in their buffer (part q at
/// q x rows x its row bytes): memory the ordinary blocks use for their stored values.
/// More rows than a slab holds (N > 2·D): the first block takes the most a slab holds (in
/// whole row tiles, at least minBlockRows) and, where it saves an ordinary block, more
/// ([Note: slab tails]); the rest run in ordinary blocks after it (RunSchedule::slabRows,
/// rowsPerBlock), each adding to the dW the first wrote: one f32 pass per ordinary block
/// instead of one per block after the first (Gemma-2's head: 5120 rows in slabs and 3
/// blocks of 1024 instead of 8 of 1024).
///
/// [Note: slab tails] A region holds H = slabHead rows of a slab (2·D, in whole row tiles).
/// A slab block of R > H rows keeps rows [H, R) of every slab in the workspace: the tails,
/// after the workspace's slabs (each of H rows then), slab i's tail at (R - H) x 128
/// elements x i from their start. dB never writes the workspace, so the tails need no
/// order; each costs T x 256 bytes a row (T slabs), which the workspace pays with fewer
/// slabs of its own (a smaller G, more dB launches). The forward, the filtered dZ GEMM and
/// the scale pass find an element through stored_at (SlabHead); dA takes a row tile at or
/// past H from the tails' map (H is a multiple of its 128 rows), dB its k-blocks at or past
/// H (a multiple of 64). Taken when it saves an ordinary block: the slab block's rows are
/// then the fewest that leave that many blocks of at most the ordinary blocks' rows, so G
/// stays the largest it can (B: rows 4608 + 512, G 176 of 2000 slabs, 3 ordinary blocks of
/// 1024 rows instead of 4 of 896).
/// Taken when: the Program allows it (ScheduleSpec::slabValues, set by the planner for the
/// row-scaled wgmma schedule with an f32 dW; LCEJIT_STORE_IN_OUTPUT=0 turns it off), the
/// call overwrites dW (outputFree), the ordinary schedule would block rows, the slabs
/// leave fewer blocks than it, and the workspace stays within the budget: the ordinary
/// blocks take the most rows (up to the ordinary schedule's) that leave room for G = one
/// whole wave's worth of slabs, evened out; then G is the most whole waves of dB tiles
/// that fit.
std::optional<RunSchedule> chooseSlabs(const Program &program, const RunSchedule &ordinary);
/// [Note: values scaled in place] (Program.h): whether `program` serves a call with this
/// run schedule (always, unless ScheduleSpec::slabOnly: then one row block within the
/// budget); the op runs the others with the recompute Program of the bucket.
bool servesCall(const Program &program, const RunSchedule &schedule);
/// Columns of a slab.
inline constexpr int64_t kSlabCols = 128;
/// Bytes of one region of the slab output (kSlabCols of its rows); 0 without one.
int64_t slabRegionBytes(const Program &program);
/// The most rows whose slabs fit a region (2·D for an f32 [V, D] dW).
int64_t slabRowsMax(const Program &program);

/// [Note: estimated run time] How long a call of `n` rows takes with blocks of
/// `rowsPerBlock` rows (the last one the rest) and chunks of `chunkCols` columns (0: one
/// chunk of all), in units of one 128 x 256 x 64 bf16 k-block on one SM: a comparison
/// between schedules of one Program, not a prediction in seconds. Each GEMM launch costs
/// its waves of CTAs (tiles, or CTAs of the forward's column splits, over the SMs; a
/// partly filled last wave at half the cost of a full one: at the power cap the idle SMs
/// let the busy ones clock up) times the k-blocks each runs, scaled by the tile's area, plus
/// a few units of ramp-up; the f32 read-modify-writes (dW per row block after the first,
/// the recompute's dH accumulator per chunk after the first) cost their bytes at 4.2 MB a
/// unit. Calibrated on the H200 (docs/performance.md, session 15): at N = 4526 (Llama-3's
/// head) blocks of 1536, 1024, 1792 rows were measured at 1.049, 1.067, 0.991 the time of
/// blocks of 2048, estimated 1.049, 1.06, 1.015; N = 24625 with 1792 rows at 1.025,
/// estimated 1.024. What it leaves out (the row kernels, whose work does not depend on the
/// blocks; the forward's cluster pairs; a dB of a few k-blocks a tile, bound by its f32
/// reduce-adds) is the same for the schedules it compares, or small: measured where it
/// leaves the rule, lean A −3.6 %, N = 6656 −3 to −4.5 %, N = 4526 +5 % to −5 % over three
/// leases (0.5 % slower on average, inside the spread between machines).
double estimateRunUnits(const Program &program, int64_t n, int64_t rowsPerBlock,
                        int64_t chunkCols);

/// [Note: column splits per call] A wgmma GemmReduce runs one CTA per (row tile, column
/// split), so a launch of R rows is ceil(R / 128) x splits CTAs, in waves of one CTA per
/// SM. The plan's split count (Program::splits, which sizes the partials buffer) suits
/// many row tiles; a row block of the materialized schedule has few (1664 rows: 13 x 32 =
/// 416 CTAs, 3.15 waves of 132, so the fourth wave runs 15 % full and the forward took 27 %
/// longer than its work). Per call the split count s <= the plan's is the one with the
/// least waves x column tiles per CTA (13 row tiles: s = 10, 130 CTAs in one wave), among
/// s >= a quarter of the plan's. Every kernel of the call reads the same count (the Splits
/// parameter), so the partials' row stride follows it. The plan's count is at least a
/// quarter of the SMs where each split keeps 16 tiles (Llama-3's head: 33, not 32), so that
/// blocks of a multiple of 512 rows can fill whole waves, and a CTA split takes floor or
/// ceil(tiles / s) column tiles. Measured (H200, session 21): neutral at N = 8192 (the
/// forward 13.02 ms both ways, 16 whole waves against 13.6: at the power cap a partly idle
/// last wave lets the busy SMs clock up), L 1 % faster. Returns partial entries per row
/// (2 per CTA split with ping-pong consumers); Program::splits where no wgmma reduce runs.
int32_t chooseColumnSplits(const Program &program, int64_t rowsPerBlock);

/// [Note: dA tile width] The materialized schedule's dA GEMM is rows x k (K = the whole
/// vocabulary) per row block, with few output tiles: a block of 1024 rows at D = 2304 (the
/// Gemma-2 head, where V = 256000 leaves 1024 rows in the budget) is 8 x 9 = 72 tiles of
/// 128 x 256 on 132 SMs, so 45 % of the chip idles for the whole GEMM (ncu, H200: 2.30
/// ms per block at 99 % tensor activity on the busy SMs, against 1.82 for the same FLOPs
/// in dB). Among the widths the wgmma mainloop takes, the one with the best
/// waves-efficiency x tile-efficiency wins: waves-efficiency = tiles / (SMs x waves);
/// tile-efficiency charges narrower tiles for their shared-memory and L2 traffic per MAC
/// ((128 + bn) / (128 bn): +11 % at 192, +33 % at 128), 0.97 at 192 and 0.93 at 128.
/// Llama-3 shapes keep 256 (2048 rows: 256 tiles, 97 %); Gemma-2 takes 192 (96 tiles,
/// 73 % x 0.97 against 55 %). Pure; a table test pins it.
int32_t chooseLhsTileWidth(int64_t rows, int64_t k, int32_t numSMs);
/// The same choice over the row blocks of whole calls (a call with the stored values in
/// slabs is one long block and a few short ones: Gemma-2's head at N = 8192 runs dA over
/// 4608 rows, then 4 x 896): the width with the least estimated dA time summed over the
/// launches of `blockRows` rows each (K = `kblocks` k-blocks), a launch costing its rounds
/// of CTAs (ceil(tiles x split / SMs)) times a tile's k-blocks over its split, divided by
/// the tile-efficiency above, with split = chooseSplitK(tiles, kblocks, SMs, maxSplit).
/// Gemma-2 at N = 8192: 128 (5 + 4 rounds of 128-wide tiles) against 192 (4 + 4 rounds of
/// 192-wide ones): 22 % less. The cost of each width goes to `costs` (256, 192, 128) when
/// given. On one launch without a split it is chooseLhsTileWidth.
int32_t chooseLhsTileWidth(const std::vector<int64_t> &blockRows, int64_t k, int64_t kblocks,
                           int32_t numSMs, int32_t maxSplit, double *costs = nullptr);
/// The estimate above for one dA launch of `rows` rows with tiles `bn` wide (256, 192 or
/// 128): rounds of CTAs x bn / (tile-efficiency x split). [Note: dA widths per launch].
double lhsLaunchCost(int64_t rows, int64_t k, int64_t kblocks, int32_t numSMs,
                     int32_t maxSplit, int32_t bn);

/// [Note: sm90 split-K] How many CTAs (1, 2 or 4, at most `maxSplit`) share each of a
/// wgmma GemmDLhs launch's `tiles` output tiles of `kblocks` k-blocks, as a thread-block
/// cluster: the most that still run every tile at once (tiles x split CTAs resident in
/// one round) and give every rank at least 8 k-blocks. A launch of few tiles (a short
/// call, the last row block of a call) then finishes in 1 / split of the time.
///
/// Not when the split needs more than one round, though the count of rounds says it
/// should pay: Gemma-2's dA (96 tiles of 128 x 192 on 132 SMs, 96 SMs busy) in clusters of
/// 4, three rounds of quarter tiles, ran 7 % slower than unsplit on the H200 (2.48–2.54
/// against 2.31–2.33 ms a block, docs/performance.md, session 11): each round holds a
/// third of the tiles, so the block's stored values are read from DRAM three times
/// instead of once, and clusters of 4 do not pack the harvested GPCs evenly. Pure; a
/// table test pins it.
int32_t chooseSplitK(int64_t tiles, int64_t kblocks, int32_t numSMs, int32_t maxSplit);

/// [Note: dA stream-K] A wgmma dA launch of one round of tiles leaves SMs idle for all of
/// K (V k-blocks): Gemma-2's 1024-row blocks are 96 tiles of 128 x 192 on 132 SMs. Those
/// SMs cost time: the same blocks at 1408 rows (132 tiles) ran dA in 2.37 ms against 2.35
/// at 1024 (docs/performance.md, session 20), so dA alone is not held by the power cap (the
/// dB of session 12's overlap was). Clusters of 4 splitting K over three rounds measured 7 %
/// slower ([Note: sm90 split-K] above), and a 144-wide tile needs the 32-byte swizzle,
/// which halved the mainloop (docs/hopper.md, session 20). So such a launch of T tiles
/// (T a multiple of 3) runs on 4 T / 3 CTAs, every one resident at once: each group of 4
/// CTAs takes 3 tiles, every CTA 3/4 of a tile's k-blocks, the two parts of a split tile
/// ending together and summed in a fixed order through a slot of the workspace
/// (StreamKTiles in lcejit_sm90.cuh has the schedule): one round of CTAs that ends in 3/4
/// of the time of one round of tiles, less the exchanges. Taken where chooseSplitK does not
/// split (T > SMs / 2), 4 T / 3 fits the SMs and a CTA's shortest part is at least 4
/// k-blocks. A launch of more tiles than SMs (Gemma-2's slab block: 480 tiles, 3 rounds and
/// 84) runs its whole rounds on all SMs and its last round the same way when that tail is a
/// multiple of 3 of at most 3 SMs / 4 (84 tiles on 112 CTAs: 3/4 of a round instead of
/// one). Pure; a table test pins it.
bool lhsStreamK(int64_t tiles, int64_t kblocks, int32_t numSMs);
/// The tiles of such a launch that run 3 to a group of 4 CTAs: all of one round (T <= SMs),
/// else the last round's T mod SMs.
int64_t lhsStreamKTail(int64_t tiles, int32_t numSMs);
/// Bytes of the dA stream-K scratch for tiles `bn` wide on `numSMs` SMs: the groups' flags
/// (kStreamKFlagBytes, zeroed) and one slot of 2 x 128 x bn / 2 floats per group of 4 SMs.
int64_t lhsStreamKBytes(int32_t bn, int32_t numSMs);
inline constexpr int64_t kStreamKFlagBytes = 1024; ///< lcejit_sm90.cuh STREAM_K_FLAG_BYTES

/// [Note: dA stream-K chains] The 3-on-4 groups above need a tail that is a multiple of 3
/// of at most 3 SMs / 4 and end at 3/4 of a round whatever the tail. A chain runs a group of q tail tiles on q + 1 CTAs, each over q / (q + 1) of K: CTA r of
/// the group first takes the end of tile r - 1 (a helper: it hands its partial to the
/// tile's own slot and goes on) and then the start of tile r (the owner: it ends last,
/// adds the helper's partial, which is long written, and runs the epilogue), so no CTA
/// waits for another; the split points move along the chain (tile j's owner part is
/// (q - j) / (q + 1) of K) so that every CTA runs the same k-blocks. The last group takes
/// the T mod q tiles left on one CTA more, and ends sooner. q is the smallest that fits
/// T + ceil(T / q) CTAs on the SMs, and a CTA's shortest part is at least 4 k-blocks.
/// Every tail tile needs its own slot (a helper writes early, the owner reads at the end):
/// 128 x bn floats, so the chain runs only where a schedule has that memory without giving
/// anything up: the slab block's launches, the slots after the slab union's other buffers
/// where the budget leaves room (RunSchedule::lhsChainBytes). StreamKChain in
/// lcejit_sm90.cuh walks it.
/// Measured (docs/performance.md, session 23, each alternating with LCEJIT_DA_CHAIN=0):
/// Gemma-2's slab block (84 tail tiles, q = 2 instead of the 3-on-4 groups) B 46.9-47.4 →
/// 46.5-46.8 ms; Llama-3's (100 tiles, q = 4) the same either way (39.2-39.4 ms); N = 4096
/// at Llama-3's head (116 tiles, q = 8) 20.0-20.1 → 20.7-20.9 ms, slower. Long chains lose
/// more than the idle SMs cost: a chain's CTAs read K at their own offsets, where a round of
/// whole tiles reads each k-block in step from L2 (ncu, dA alone: chains of 4 read 22 GB
/// from DRAM against 17 and ran 5 % slower, chains of 8 15 GB against 6.7 and 20 % slower),
/// and under the power cap a partial last round runs its busy SMs at a higher clock. So q is
/// at most kChainMaxQ (3: the 3-on-4 groups' balance, measured a gain since session 20).
/// Pure; a table test pins it. 0: no chain for this launch.
int32_t lhsChainQ(int64_t tiles, int64_t kblocks, int32_t numSMs);
/// The grid of a chained launch: all SMs when it has whole rounds, else T + ceil(T / q).
int64_t lhsChainCtas(int64_t tiles, int64_t kblocks, int32_t numSMs);
/// Bytes of the chain's buffer for tiles `bn` wide: the flags (kChainFlagBytes, zeroed per
/// call) and a slot of 128 x bn floats for each of at most numSMs - 1 tail tiles.
int64_t lhsChainBytes(int32_t bn, int32_t numSMs);
/// The chain's flags and slots that run schedule `s` needs (its slab block's dA launch, the
/// tiles of its last round), 0 when that launch does not chain.
int64_t lhsChainScheduleBytes(const Program &p, const RunSchedule &s);
inline constexpr int64_t kChainFlagBytes = 4096; ///< lcejit_sm90.cuh StreamKChain::FLAG_BYTES
inline constexpr int32_t kChainMaxQ = 3;         ///< lcejit_sm90.cuh StreamKChain::MAX_Q

/// Bytes of one workspace buffer for `n` rows, blocks of `rowsPerBlock` rows and chunks of
/// `chunkCols` columns, before alignment.
int64_t bufferBytes(const BufferSpec &b, int64_t n, int64_t rowsPerBlock, int64_t chunkCols);

/// Workspace bytes of `program` for `n` rows cut into blocks of `rowsPerBlock` rows and
/// chunks of `chunkCols` columns (every buffer 256-byte aligned).
int64_t workspaceBytesFor(const Program &program, int64_t n, int64_t rowsPerBlock,
                          int64_t chunkCols);

} // namespace lcejit::plan
