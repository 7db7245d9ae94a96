//===- Program.h - The planned program: plain data ------------------------===//
//
// A Program is what the planner produces for one (fused graph, D, V, dtypes, options,
// arch, bucket(N)) and what everything downstream consumes: the CUDA emitter
// (compiler/codegen), the fp64 Program interpreter (compiler/reference) and the runtime
// executor (runtime/Executor). It is plain data: no MLIR, no CUDA. It has hash(), ==
// and toJson() (the dump shows the JSON). Neither cache keys on hash(): Programs are
// cached per op configuration and bucket ([Note: cache keys] in ops/lib/LceJit.h) and
// binaries by the content of the CUDA source the emitter makes from the Program
// (runtime/KernelCache.h).
//
// [Note: the lean schedule] The first schedule lcejit implements is the vocab-chunked
// recompute of docs/architecture.md. Kernels come in a few fixed kinds; what varies per
// loss is carried by ScalarFuncs (the fused epilogue and row computations):
//
//   RowKernel        per row i < N: evaluate a ScalarFunc on row values and scalars;
//                    store row values, reduce into scalar slots, raise device checks.
//   GemmReduceKernel acc = A·Bᵀ (A [N,K], B [C,K], both row-major), epilogue(acc, col,
//                    sides) -> values, each reduced along the row (sum, max,
//                    logsumexp) into partials [N, splits, slots].
//   GemmDzKernel     same GEMM for the columns of one chunk; epilogue -> dZ stored for
//                    the chunk, as two bf16 (hi + lo) or as f32.
//   GemmDLhsKernel   dA[N,K] (+)= dZ[N,chunk] · B[chunk,K]        (f32 accumulate)
//   GemmDRhsKernel   dB[chunk,K] = dZ[N,chunk]ᵀ · A[N,K]           (written once)
//   CastKernel       f32 [rows, K] -> output dtype.
//
// Host steps run kernels in order; a ChunkLoop step runs its kernels once per column
// chunk. N is a runtime argument everywhere; the Program depends on N only through the
// bucket, so one compiled Program serves every N of its bucket.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit/DType.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace lcejit::plan {

//===----------------------------------------------------------------------===//
// Scalar functions: the code of epilogues and row kernels.
//===----------------------------------------------------------------------===//

/// Opcodes of the scalar IR. Float values are f32 on the device and f64 in the
/// interpreter; integers are i32/i64; comparisons give i1.
enum class ScalarOp : uint8_t {
  Arg,   ///< argIndex-th argument of the function.
  Const, ///< fValue (float types) or iValue (integer types).
  RowCount, ///< the runtime N (i64).
  Add, Sub, Mul, Div, Max, Min, ///< binary; Max/Min propagate NaN.
  Neg, Exp, Log, Tanh, Expm1, Log1p, Abs, ///< unary float
  CmpEq, CmpNe, CmpLt, CmpLe, CmpGt, CmpGe, ///< binary -> i1 (ordered for floats)
  And, Or, Not,  ///< i1
  Select, ///< operands: cond (i1), true value, false value
  Cast,   ///< operand converted to `type`
};

const char *scalarOpName(ScalarOp op);

struct ScalarInst {
  ScalarOp op = ScalarOp::Const;
  DType type = DType::F32; ///< result type: F32, I32, I64 or I1
  int32_t operands[3] = {-1, -1, -1};
  int32_t argIndex = -1;
  double fValue = 0.0;
  int64_t iValue = 0;

  bool operator==(const ScalarInst &) const = default;
};

/// SSA list: instruction i may use only instructions < i. `results` index `insts`.
struct ScalarFunc {
  std::vector<ScalarInst> insts;
  std::vector<int32_t> results;

  int32_t numArgs() const;
  bool operator==(const ScalarFunc &) const = default;
};

//===----------------------------------------------------------------------===//
// Buffers.
//===----------------------------------------------------------------------===//

/// A program input or output tensor. Dimension -1 stands for N.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  bool operator==(const TensorSpec &) const = default;
};

enum class BufferInit : uint8_t { None, Zero };

/// A workspace buffer of `bytesPerRow * rows + bytesPerRowCol * rows * chunkCols +
/// bytesFixed` bytes, 256-byte aligned, where rows is N, or the rows of one row block for a
/// `blockLocal` buffer, and chunkCols the chunk width of the run (see [Note: the run
/// schedule]).
struct BufferSpec {
  std::string name;
  int64_t bytesPerRow = 0;
  int64_t bytesFixed = 0;
  BufferInit init = BufferInit::None;
  int64_t bytesPerRowCol = 0; ///< per row and chunk column (dZ chunk buffers)
  /// Sized for one row block and addressed from its start (row r of the block at row r):
  /// dZ chunks, the f32 dH accumulator. Other buffers with rows are indexed by the global
  /// row (row blocks see them offset by their first row).
  bool blockLocal = false;
  bool operator==(const BufferSpec &) const = default;
};

enum class Space : uint8_t { Input, Output, Workspace };

struct BufferRef {
  Space space = Space::Workspace;
  int32_t index = -1;
  bool valid() const { return index >= 0; }
  bool operator==(const BufferRef &) const = default;
};

/// Well-known workspace buffers every Program has (indices into Program::workspace).
inline constexpr int32_t kScalarSlotsBuffer = 0; ///< double[numScalarSlots], zeroed
/// u64[4]: the lowest failing row of a device check and its value ([0], [1]), a launch-
/// contract violation ([2], [3]); see runtime::decodeErrorWord and lcejit_common.cuh.
inline constexpr int32_t kErrorBuffer = 1;
inline constexpr int64_t kErrorWordBytes = 32;

/// What an argument of a ScalarFunc reads, per row / column / once.
struct Operand {
  enum class Kind : uint8_t {
    Row,      ///< buf[row] of dtype (buf has N elements)
    Col,      ///< buf[col] of dtype (buf has C elements, C static)
    Scalar,   ///< buf[0] of dtype if buf is valid, else scalar slot `slot` (a double)
    Partials, ///< combine partials[row, 0..splits) at `slot` with `reduce` (f32 result)
    Acc,      ///< GEMM epilogues only: the f32 accumulator
    ColIndex, ///< GEMM epilogues only: the global column index (i64)
    RowIndex, ///< the row index (i64)
  };
  Kind kind = Kind::Row;
  BufferRef buf;
  DType dtype = DType::F32;
  int32_t slot = -1;
  int32_t reduce = -1;     ///< ReduceKind for Partials
  int32_t partialsOf = -1; ///< for Partials: the GemmReduce kernel index that wrote buf
  /// For LogSumExp Partials: what of the combined pair (m, t) is read (see [Note: lse] in
  /// docs/program.md): the value m + log1p(t), the maximum m, or t = sum exp(x − m) − 1.
  enum class Component : uint8_t { Value, Max, RestSum };
  Component component = Component::Value;
  bool operator==(const Operand &) const = default;
};

enum class ReduceKind : uint8_t {
  Sum,       ///< one f32 slot
  Max,       ///< one f32 slot (NaN propagates)
  LogSumExp, ///< two f32 slots (m, t) with t = sum(exp(x - m)) - 1: see [Note: lse]
};
const char *reduceKindName(ReduceKind k);
int32_t reduceSlots(ReduceKind k);

//===----------------------------------------------------------------------===//
// Kernels.
//===----------------------------------------------------------------------===//

/// How a GEMM multiplies.
enum class MathMode : uint8_t {
  TensorCoreBF16, ///< mma.sync m16n8k16 bf16 x bf16 -> f32
  TensorCoreF16,  ///< mma.sync m16n8k16 f16 x f16 -> f32
  SimtF32,        ///< FFMA in f32 (operands converted to f32 on load)
  /// sm_90a: wgmma m64nNk16 bf16 x bf16 -> f32 on the warp-specialized TMA mainloop of
  /// runtime/device/lcejit_sm90.cuh ([Note: the Hopper mainloop] in docs/hopper.md). The
  /// tile is 128 x bn x 64 with 3 warpgroups (TileConfig warpsM = 3, warpsN = 4: one
  /// TMA producer, two consumers); operands come as tensor maps (Param::TensorMapA/B).
  WgmmaBF16,
};
const char *mathModeName(MathMode m);

struct TileConfig {
  int32_t bm = 128, bn = 128, bk = 32; ///< CTA tile
  int32_t warpsM = 2, warpsN = 4;      ///< warp grid; warp tile = bm/warpsM x bn/warpsN
  int32_t stages = 2;                  ///< shared-memory pipeline depth
  /// WgmmaBF16 only: the two consumer warpgroups take alternate tiles whole instead of
  /// splitting each tile, so one's epilogue overlaps the other's mainloop ([Note: sm90
  /// ping-pong] in lcejit_sm90.cuh); bn is then at most 128.
  bool pingpong = false;
  /// WgmmaBF16, cooperative, an f32 output: the epilogue stages the tile in shared
  /// memory (two f32 boxes of 64 x 32 per consumer, 32 KB after the stages) and writes or
  /// reduce-adds it with TMA through a third tensor map (Param::TensorMapOut), so the
  /// consumers go on to the next tile while the copies drain ([Note: sm90 TMA store] in
  /// lcejit_sm90.cuh). GemmDRhs only.
  bool tmaStore = false;
  /// WgmmaBF16 GemmReduce (ping-pong) only: 2 or 4 = the CTAs of adjacent row tiles of
  /// one column split run as a thread-block cluster of that many, each loading a part of
  /// every B tile and multicasting it to all ([Note: sm90 multicast] in lcejit_sm90.cuh);
  /// launched as clusters of clusterM when the call's row tiles are a multiple of it, else
  /// of the largest power of two that divides them (Program::launchDims), else one CTA
  /// loads every part. B's TMA box is then bn / clusterM rows.
  int32_t clusterM = 1;
  /// WgmmaBF16 cooperative GemmDLhs only: at most this many CTAs (2 or 4, a thread-block
  /// cluster) may share one output tile, each over its own k-blocks, rank 0 adding the
  /// others' partial sums through distributed shared memory in rank order ([Note: sm90
  /// split-K] in lcejit_sm90.cuh). Program::launchDims picks 1, 2 or 4 for the call's
  /// tile count (plan::chooseSplitK): a block whose tiles leave SMs idle runs split.
  int32_t splitK = 1;
  /// WgmmaBF16 GemmReduce only, bn = 256, not ping-pong: both consumers take every tile,
  /// each all of its rows and half of its columns, sharing the stage's A ([Note: sm90
  /// column halves] in lcejit_sm90.cuh): each consumer's epilogue then sees tiles of bn /
  /// 2 columns (epilogueCols), as a ping-pong consumer sees bn, and writes its own partial
  /// entry.
  bool halves = false;
  int32_t threads() const { return 32 * warpsM * warpsN; }
  /// The columns of a consumer's epilogue tile: the stored values' tile (their tile
  /// maxima, a slab's share) and the forward's partials are per this many columns.
  int32_t epilogueCols() const { return halves ? bn / 2 : bn; }
  /// Whether each consumer covers every row of a tile and writes its own partial entry
  /// (ping-pong or column halves): Program::splits counts two entries a CTA split.
  bool twoEntries() const { return pingpong || halves; }
  bool operator==(const TileConfig &) const = default;
};

struct RowKernel {
  /// What the function's results do.
  struct Sink {
    enum class Kind : uint8_t {
      StoreRow,    ///< buf[row] = result (converted to dtype)
      StoreScalar, ///< written once (row 0's thread) to buf[0] as dtype, or to slot
      SumScalar,   ///< slot += result (double atomics)
      CheckRow,    ///< if result (i1) is true: raise a device check with value `aux`
    };
    Kind kind = Kind::StoreRow;
    int32_t result = -1; ///< index into func.results
    BufferRef buf;       ///< StoreRow/StoreScalar to a buffer
    DType dtype = DType::F32;
    int32_t slot = -1;   ///< StoreScalar/SumScalar/MaxScalar to a scalar slot
    int32_t aux = -1;    ///< CheckRow: index into func.results of the offending value
    bool operator==(const Sink &) const = default;
  };
  ScalarFunc func;
  std::vector<Operand> args; ///< one per Arg index of func
  std::vector<Sink> sinks;
  bool operator==(const RowKernel &) const = default;
};

/// Common part of the GEMM kernels that recompute acc = A·Bᵀ.
struct FusedGemm {
  MathMode math = MathMode::TensorCoreBF16;
  DType abType = DType::BF16;
  TileConfig tile;
  int64_t k = 0;    ///< reduction length (D)
  int64_t cols = 0; ///< columns of acc (V), static
  BufferRef a;      ///< [N, k] row-major
  BufferRef b;      ///< [cols, k] row-major
  ScalarFunc epilogue;
  std::vector<Operand> args; ///< one per Arg of epilogue (Acc, ColIndex, Row, Col, Scalar)
  bool operator==(const FusedGemm &) const = default;
};

/// [Note: the materialized backward] With the materialized schedule the forward GEMM also
/// stores, for every element of its row block, the part of dZ that needs the element:
///
///   values[r][c] = fp16( factor(v) * exp(v - m[r][t]) )   t = c / tileCols,
///   tileMax[r][t] = max of v over the tile's columns c, except the row's target column
///                   (0 when there are none)
///
/// (the four lanes of a wgmma quad hold a row's columns of the tile: two shuffles give
/// the quad's maximum, and one f32 per tile and row keeps the workspace of a row at
/// 2·V + V / 32 bytes)
/// where v is the value whose logsumexp the kernel reduces (epilogue result `lseResult`)
/// and factor is the per-element factor of dZ (1 without softcap; 1 - tanh^2 with it),
/// written as a function of v. The backward then forms dZ from it in one elementwise pass
/// (DzFormKernel) instead of recomputing the logits: 6·N·D·V of GEMM work instead of 8.
/// The planner derives factor (and the per-row rest) from the dZ function by algebra
/// (plan/Materialize.cpp); the values buffer is the dZ buffer of the backward GEMMs, pitch
/// `cols` (one chunk of all columns).
/// [Note: row-scaled stored values] When the value v whose logsumexp the forward reduces
/// is bounded for every input, hi − lo <= kRowScaledRange (a softcap: v = c·tanh(x/c) lies
/// in [−c, c]), the stored values need no per-tile reference: with C = hi,
///   values[r][c] = bf16( factor(v)·exp(v − C) )   (0 at the row's target column)
/// lies in [exp(−kRowScaledRange), 1] times the factor, inside bf16's range, and
///   dZ[r][c] = s_r·values[r][c],   s_r = a_row[r]·exp(C − lse_r)   (c ≠ t_r)
/// is the stored value times one f32 per row. So no pass forms dZ over the N·V values:
///   dA[r] = s_r·(values·B)[r] + dz_y[r]·B[t_r]          (dA's epilogue, in f32)
///   dB    = valuesᵀ·(s ⊙ A) + Σ_r dz_y[r]·A[r] at t_r  (s ⊙ A rounded to bf16 per row
///                                                      block: N·k work; the target
///                                                      column by the TargetCorrection)
/// with dz_y the target column's dZ from the loss's own terms ([Note: the target column's
/// dZ]), never rounded. The rounding of dZ to one bf16 operand moves to the stored value
/// (one rounding of p·factor, as fast precision asks) plus one of s_r·A (each bf16
/// element of A times a row constant: a relative 2⁻⁹ per element of the dB operand, as
/// the dZ rounding it replaces). The forward's store needs no tile maximum (no quad
/// shuffles, no tileMax writes). Only with an f32 dB (the TargetCorrection adds the target
/// column) and a target column in the dZ function; LCEJIT_ROW_SCALED=0 keeps DzForm.
inline constexpr double kRowScaledRange = 64.0;

/// [Note: a per-row reference] Without a bound on v (no softcap) the values are stored
/// against a per-row reference instead: c_r = the row's target value v_y, from the f64
/// target logit of [Note: the exact target logit] (a RowDot and a row kernel that applies
/// the value chain, both before the forward):
///   values[r][c] = bf16( factor(v)·exp(v − c_r) ),   0 at the target column,
///   s_r = a_row[r]·exp(c_r − lse_r) = a_row[r]·exp(−loss_r).
/// Every stored value is at most exp(lse_r − c_r) = exp(loss_r), and a value far below
/// c_r contributes p = exp(v − lse) < exp(v − c_r) to the row, so bf16's range (the same
/// as f32's) holds the row whenever its loss is at most kRowScaledRange. A row whose loss is
/// larger (a target far below the row's maximum: rare, but any input can make it) is
/// written again by a dZ GEMM over that row's tile only (GemmDzKernel::rowFilter) with
/// s_r = 1, the target column rounded as in the recompute and its residual from there: the
/// answer never depends on the loss being small, only the cost (about 1/16 of the forward
/// per 128-row tile that holds such a row). Rows whose target lies outside [0, cols)
/// (ignore_index) store 0 and have s_r = 0.
inline constexpr int32_t kRowFilterSplits = 16;

/// [Note: a scaled A in column parts] The row-scaled schedule gives dB a bf16 copy of A
/// scaled per row (2·k bytes per row of a block), where the tile maxima it replaces took
/// 4·cols/128 (k = 4096, V = 128256: 8192 against 4008 bytes): next to 2·V bytes of stored
/// values per row, enough to cut 2048-row blocks to 1664 at the default 512 MiB budget
/// (N = 8192: five blocks instead of four, each one more read-modify-write of the f32 dW
/// and a dA of 1.6 waves). So when the copy would outweigh the maxima it is made in
/// kScaledAParts column parts of k / kScaledAParts: the DzForm makes part 0, dB runs once per
/// part over its columns of dW (outCol0, outLd), and an aOnly DzForm makes each later part
/// in the same buffer before its dB. The dW traffic and the GEMM work stay the same.
inline constexpr int32_t kScaledAParts = 2;

/// [Note: values scaled in place] The materialized schedule needs, per row block, the
/// block's stored values (rows x V bf16) in the workspace, and it is refused where the
/// budget holds fewer than minBlockRows of them (each block re-reads and re-writes the f32
/// dW): at the lean 64 MiB on Llama-3's head, ~250 rows. But a call that overwrites an f32
/// dW keeps the values of up to 2·D rows in dW's memory ([Note: stored values in dW] in
/// SchedulePolicy.h), and needs only G slabs of workspace. What else it needed was dB's
/// bf16(rowScale x A), all rows and parts at once (N x D x 2 bytes: 64 MB at Llama-3's
/// N = 8192, the whole lean budget). So where the ordinary blocks are refused, the planner
/// builds the materialized Program with the row scale applied to the values themselves:
/// after dA (which scales its own rows' sums, unchanged), a DzForm with scaleValues
/// multiplies every stored value by its row's scale in place (bf16 in, bf16 out: a second
/// rounding of each value, where the scaled copy rounded the scaled A instead; one pass
/// over the values, 2 x 2 x N x V bytes), and dB reads them with the unscaled A (the input
/// itself: no copy, no column parts). Its workspace is the slabs' G and the row buffers.
/// Such a Program is slab-only (ScheduleSpec::slabOnly): it serves the calls whose run
/// schedule is one row block within the budget (plan::servesCall), and the op runs every
/// other call (one that adds to dW, or has more rows than a slab block holds) with the
/// recompute Program of the same bucket (LceJit's `recompute`, its own cache key), which is
/// what the lean budget ran before. The planner keeps it only if the largest N of the
/// bucket that a slab block holds is served. LCEJIT_STORE_IN_OUTPUT=0 turns it off with
/// the slabs.
struct StoredTile {
  BufferRef values;   ///< fp16 [rows of the block][cols] (block-local; bf16 dZ after DzForm)
  BufferRef tileMax;  ///< f32 [rows of the block][cols / tileCols] (block-local)
  int32_t lseResult = -1; ///< the epilogue result whose values are exponentiated
  int32_t tileCols = 128; ///< columns per tileMax entry (the GEMM's bn)
  /// The gemm.args index of the row's target column (an i32/i64 Row operand), left out of
  /// the maxima; -1: none. Its stored value is replaced by DzForm anyway, and on a peaked
  /// row (target logit far above the rest) a maximum that included it would put the
  /// lane's other values below fp16's range.
  int32_t excludeArg = -1;
  /// One result: the factor. Its Acc argument stands for v; other arguments index the
  /// GEMM's args (same operands as the epilogue).
  ScalarFunc factor;
  /// [Note: row-scaled stored values] When set, v is bounded above by `reference` (and
  /// below by reference − kRowScaledRange) for every input, and the values are
  ///   values[r][c] = bf16( factor(v) * exp(v - reference) ),   0 at the target column,
  /// with no tileMax: dZ is then rowScale[r]·values[r][c] off the target column, and the
  /// backward GEMMs read the values as they are (no DzForm pass over them).
  bool rowScaled = false;
  double reference = 0;
  /// [Note: a per-row reference] With rowScaled and referenceArg >= 0 the reference is per
  /// row: the gemm.args index of an f32 Row operand c_r (the row's target value, from the
  /// f64 target logit); `reference` is unused. Rows whose target (excludeArg) lies outside
  /// [0, cols) store 0.
  int32_t referenceArg = -1;
  /// [Note: stored values in dW] The values may be laid out in slabs of 128 columns
  /// (the kernel takes the SlabSplit, SlabStride and SlabBase parameters).
  bool slabs = false;
  bool operator==(const StoredTile &) const = default;
};

/// [Note: sm90 multicast] (lcejit_sm90.cuh): the wgmma forward's CTAs of this many
/// adjacent row tiles run as a cluster sharing each W tile (PlanOptions::forwardCluster,
/// LCEJIT_FWD_CLUSTER, for comparisons).
inline constexpr int32_t kForwardCluster = 2;

/// [Note: dB multicast] (lcejit_sm90.cuh): the wgmma dB's persistent CTAs walk the output
/// tiles in groups of this many row tiles (lcejit::sm90::DRHS_GROUP, the same number), so a
/// cluster of up to this many CTAs takes adjacent row tiles of one column tile. The device
/// headers' number is checked against this one by Emitter.DeviceConstantsMatchThePlanners.
inline constexpr int64_t kDRhsOrderGroup = 8;
/// [Note: dB multicast]: the wgmma dB's cluster along its row tiles when the caller gives
/// none (PlanOptions::dbCluster, LCEJIT_DB_CLUSTER): 1, no clusters. Measured on an H100
/// (session 39): pairs 2-3 % slower on Llama-3's 2048-row blocks (3.54-3.55 ms a block's dB
/// against 3.47-3.49), quads 3 %; Gemma-2's 1024-row blocks lose their loaded sums (2.98-3.03
/// against 2.49-2.56). Not yet run on an H200, where the blocks reduce-add anyway.
inline constexpr int32_t kDbCluster = 1;

/// [Note: forward CTA order] (lcejit_sm90.cuh): the wgmma forward's CTAs run in groups of
/// this many row tiles (each group over all its column splits before the next).
inline constexpr int32_t kForwardOrderGroup = 16;
/// [Note: forward CTA order by card] Groups of 16 were chosen on an H200 (6144-bit HBM3e,
/// 4.8 TB/s), where larger ones read H's row tiles again from DRAM (session 21). On an
/// H100 (5120-bit HBM3, 3.35 TB/s) the forward of Llama-3's 8192-row block in groups of 16
/// read 18.4-19.4 GB from DRAM (ncu; the H200 read 9.8) at 84 % tensor-pipe activity, and
/// ran 0.4-0.7 ms (3-5 %) slower than in groups of 8 or 4 in every one of six alternating
/// runs (session 29; B's, L's and S's forwards the same either way). So a device whose
/// memory interface is narrower than kWideMemoryBusBits runs groups of
/// kNarrowBusOrderGroup; an unknown one (Target::memoryBusBits = 0: lcejit-dump without a
/// GPU, the tests) is planned as the H200.
inline constexpr int32_t kWideMemoryBusBits = 6144;
inline constexpr int32_t kNarrowBusOrderGroup = 8;
/// [Note: forward tile by card] On an H100 the ping-pong forward runs the L2 at 89 % of its
/// peak throughput (ncu, Llama-3's 8192-row block: 104 GB read by the SMs, 23.4 bytes a
/// thousand MACs) and its consumers wait for stages; cuBLAS's Z runs it at 66 %. Column
/// halves of a 128 x 256 tile ([Note: sm90 column halves] in lcejit_sm90.cuh) read 16
/// bytes a thousand MACs: the L2 at 64 %, the clock 1.48 -> 1.58 GHz, the forward 12.7 ->
/// 11.9 ms alone and 14.1 -> 13.4 ms in the op (W's 8.6 -> 7.6), at the price of an
/// epilogue no other consumer's mainloop hides. With a softcap (a tanh per value, on
/// Gemma-2's K = 2304) that price is larger than the gain (B's forward 16.4 -> 17.9 ms).
/// So the planner takes column halves on a memory interface narrower than
/// kWideMemoryBusBits when the forward's values need no exp, log or tanh of their own and
/// the vocabulary is a multiple of 256 (session 30; at N = 2048 and 4096 too, session 31);
/// the H200 and an unknown device keep ping-pong. Measured on the H200 (session 31): its
/// ping-pong forward keeps the tensor pipe 97 % busy at 1.47 GHz, and halves, at 1.61 GHz
/// with a third fewer L2 reads but 87.8 % busy, are as fast alone and 1-12 % slower in the
/// op (A's forward 12.8 -> 13.9 ms). LCEJIT_FWD_HALVES=0/1 overrides.

/// [Note: sm90 L2 hints] (lcejit_sm90.cuh): the L2 eviction priority of a Hopper
/// mainloop's TMA loads of one operand (the device's L2_NORMAL, L2_EVICT_FIRST,
/// L2_EVICT_LAST: the same numbers).
enum class L2Hint : uint8_t { Normal = 0, EvictFirst = 1, EvictLast = 2 };
std::string_view l2HintName(L2Hint h); ///< "normal", "first", "last"
std::optional<L2Hint> parseL2Hint(std::string_view s);

/// The hints of A's and B's loads (the forward: H's row tiles and W's column tiles).
struct L2Hints {
  L2Hint a = L2Hint::Normal, b = L2Hint::Normal;
  /// The device template's L2 argument: A's in bits 0-1, B's in bits 2-3.
  int32_t code() const { return int32_t(a) | int32_t(b) << 2; }
  bool none() const { return code() == 0; }
  std::string str() const; ///< "a,b", e.g. "last,normal"
  bool operator==(const L2Hints &) const = default;
};

struct GemmReduceKernel {
  FusedGemm gemm;
  std::vector<ReduceKind> reductions; ///< one per epilogue result
  BufferRef partials;                 ///< f32 [N, splits, slotsPerRow()]
  std::optional<StoredTile> stored;   ///< the materialized schedule's forward store
  /// WgmmaBF16: row tiles per group of the CTA order, even ([Note: forward CTA order];
  /// kForwardOrderGroup unless asked: PlanOptions::forwardOrderGroup, LCEJIT_FWD_GROUP).
  int32_t orderGroup = kForwardOrderGroup;
  /// WgmmaBF16: the L2 hints of the mainloop's loads ([Note: sm90 L2 hints]; none unless
  /// asked: PlanOptions::forwardL2, LCEJIT_FWD_L2).
  L2Hints l2;
  int32_t slotsPerRow() const;
  int32_t slotOf(int32_t result) const; ///< first slot of a result's partial
  bool operator==(const GemmReduceKernel &) const = default;
};

enum class DzFormat : uint8_t {
  SplitBF16, ///< hi = bf16(dz), lo = bf16(dz - hi): two [N, chunk] bf16 arrays (exact mode)
  F32,       ///< one [N, chunk] f32 array
  BF16,      ///< one [N, chunk] bf16 array, dz rounded once from f32 (fast mode)
};
const char *dzFormatName(DzFormat f);

/// [Note: the target-column residual] In fast precision dZ is rounded to one bf16
/// operand, and each row's largest element by far is usually its target column's (p_y − 1,
/// times the row's scales): its rounding alone puts a bf16 dH at ~1.4× the output
/// rounding floor (docs/numerics.md). The kernel that rounds dZ also stores, per row, what
/// rounding took off that one element,
///   residual[r] = dz[r][t_r] − f32(bf16(dz[r][t_r]))      t_r = the row's target column,
/// and the backward adds it back as a rank-1 update in f32, before any output rounding:
/// dA[r] += residual[r]·B[t_r] (GemmDLhs, in its last chunk) and, for an f32 dB,
/// dB[t_r] += residual[r]·A[r] (TargetCorrectionKernel). So the backward GEMMs see dZ with
/// its target column exact. Rows that share a target add to one row of dB: the
/// TargetCorrection sums each group in row order and adds it once, so the result stays
/// deterministic (no float atomics). Rows whose target lies outside [0, cols)
/// (ignore_index) never get a residual and are skipped by its readers.
struct Residual {
  BufferRef buf;    ///< f32 [N] residual[r] (written for rows with 0 <= t_r < cols)
  BufferRef target; ///< [N] t_r (Row operand buffer)
  DType targetType = DType::I64;
  bool valid() const { return buf.valid(); }
  bool operator==(const Residual &) const = default;
};

/// [Note: target group sums] The dB half of [Note: the target-column residual] for a dB
/// that is written once, rounded from its f32 sum (bf16 or f16: no f32 copy of dB to add a
/// correction to afterwards). The correction must reach dB's epilogue before the rounding,
/// in an order that does not depend on scheduling, with bounded work per element:
///   - the rows of a launch are cut into blocks of groupRows rows (kTargetGroupRows: the
///     planner's choice; tests use fewer); in block b,
///     the rows with target t form a group whose leader is its first row g;
///   - a TargetCorrection with `sums` (in the chunk loop, after the dZ GEMM that wrote the
///     chunk's residuals, before dB) handles the groups whose target lies in the chunk: the
///     leader's warp writes sums[g][j] = bf16(Σ_{r in the group, in row order}
///     residual[r]·A[r][j]) and head[b][t] = g;
///   - dB's epilogue adds, to each f32 sum of an element (v, j) of its tile, before the one
///     rounding, Σ_{b in order} f32(sums[head[b][v]][j]) over the blocks whose head is valid.
/// head is never cleared: an entry counts only if it names a row g of block b with
/// target[g] == v, and such a row exists only if block b has a group for v, whose leader
/// wrote the entry in this run. So dB reads at most ceil(n / groupRows) entries per
/// row of its tile, whatever the targets. A bf16 sum is enough: the correction is about
/// 2⁻⁹ of the element it corrects, so its own rounding is ~2⁻¹⁸ of it.
inline constexpr int64_t kTargetGroupRows = 2048;
/// Bytes after the last row of TargetSums::sums: dB's wgmma epilogue reads a row's
/// columns up to its tile's end (BN <= 256) without masking those past k.
inline constexpr int64_t kTargetSumsPadBytes = 1024;
struct TargetSums {
  BufferRef sums;   ///< bf16 [rows of the launch, k] (+ kTargetSumsPadBytes): a group's sum
                    ///< at its leader's row
  BufferRef head;   ///< i32 [ceil(rows / groupRows), cols]: head[b][t] = leader
  BufferRef target; ///< [N] t_r (the residual's target)
  DType targetType = DType::I64;
  int64_t cols = 0; ///< columns of the loop (rows of dB)
  int64_t groupRows = kTargetGroupRows; ///< rows of a group block (> 0)
  bool valid() const { return sums.valid(); }
  bool operator==(const TargetSums &) const = default;
};

struct GemmDzKernel {
  FusedGemm gemm;  ///< epilogue has exactly one result: dZ
  DzFormat format = DzFormat::SplitBF16;
  BufferRef dz;    ///< hi (or f32) [N, chunkCols]
  BufferRef dzLo;  ///< lo for SplitBF16
  /// BF16 only: the target-column residual of the chunk holding t_r ([Note: the target-
  /// column residual]); residualArg is the gemm.args index of the target's Row operand.
  Residual residual;
  int32_t residualArg = -1;
  /// [Note: a per-row reference] When valid, i32 [N]: only the rows r with rowFilter[r] != 0
  /// are written (dZ and residual), and a launch is kRowFilterSplits CTAs per 128-row tile,
  /// each of which returns at once when its tile has no such row (wgmma only).
  BufferRef rowFilter;
  /// [Note: stored values in dW] dz is the forward's stored values, possibly in slabs.
  bool slabs = false;
  bool operator==(const GemmDzKernel &) const = default;
};

struct GemmDLhsKernel {
  MathMode math = MathMode::TensorCoreBF16;
  TileConfig tile;
  DzFormat format = DzFormat::SplitBF16;
  DType bType = DType::BF16; ///< dtype of B
  int64_t k = 0;             ///< K of the forward GEMM (columns of dA)
  BufferRef dz, dzLo;        ///< [N, chunkCols]
  BufferRef b;               ///< [cols, k]; rows [chunkBegin, chunkBegin + chunkCols) used
  /// [N, k] of outType. f32: overwritten on the first chunk, then +=. Another type
  /// (bf16, f16) is written once, rounded from the f32 sum: only in a Program whose chunk
  /// loop is one chunk of all columns (ScheduleSpec::wholeRows), where no accumulator
  /// across chunks is needed ([Note: accumulating outputs] for round(old + sum)).
  BufferRef out;
  DType outType = DType::F32;
  /// When valid, the launch of the last chunk (chunkBegin + chunkCols == cols) adds
  /// residual[r]·b[t_r][j] to the f32 sum before writing ([Note: the target-column
  /// residual]).
  Residual residual;
  int64_t cols = 0; ///< rows of b (the loop's columns); with residual only
  /// When valid, f32 [N]: each row's sum is multiplied by rowScale[r] before the residual
  /// is added ([Note: row-scaled stored values]; a loop of one chunk only).
  BufferRef rowScale;
  /// [Note: stored values in dW] dz is the forward's stored values, possibly in slabs
  /// (SlabSplit, TensorMapA2).
  bool slabs = false;
  /// [Note: dA widths per launch] >= 0: this kernel is kernel `alternativeOf` (the
  /// Program's dA) with another tile width; each launch of the loop runs exactly one of
  /// them (Program::launches).
  int32_t alternativeOf = -1;
  /// [Note: dA stream-K] (SchedulePolicy.h) When valid, the workspace scratch
  /// (lhsStreamKBytes, zeroed) through which a launch that plan::lhsStreamK takes hands
  /// partial tiles from CTA to CTA; such launches run 4 T / 3 CTAs.
  BufferRef streamK;
  /// [Note: dA stream-K chains] When valid, the chain's buffer (ScheduleSpec::lhsChain):
  /// a slab-block launch of a schedule with RunSchedule::lhsChainBytes that plan::lhsChainQ
  /// takes runs its last round chained (lhsChainCtas CTAs, cooperative); every other
  /// launch gets a null pointer.
  BufferRef chain;
  bool operator==(const GemmDLhsKernel &) const = default;
};

/// [Note: dA widths per launch] A dA launch of R rows is ceil(R / 128) x ceil(k / bn)
/// output tiles, and one tile width cannot suit every launch of a bucket: Gemma-2's head
/// at N = 8192 runs dA over 4608 rows (the slabs) and 4 x 896, where 128-wide tiles fill
/// the SMs (648 tiles in 5 rounds, 126 in one) and 192-wide ones do not (432 in 4, 84 in
/// one: 64 % of the SMs); at N = 16384 its 1024-row blocks want 192 (96 tiles in one round,
/// against 144 in two). Measured at N = 8192 (docs/performance.md, session 17): dA 18.09
/// ms at 192, 15.03 at 128. So the planner may give a Program's dA a second width, a copy
/// of the kernel with another tile (alternativeOf), when over the launches of calls at the
/// bucket's low end, middle and top choosing per launch saves at least kLhsAlternativeGain
/// of the estimated dA time; per launch the executor runs the width plan::lhsLaunchCost
/// puts lowest for its rows. One more NVRTC module, compiled in parallel with the others:
/// taken where the estimate saves at least 8 % (Gemma-2's head: 9 %, measured 17 % of dA
/// at N = 8192), not for the few-percent gains it finds at a bucket's smallest N (Llama-3's
/// 1025 rows: 6 %), which no measurement has confirmed.
inline constexpr double kLhsAlternativeGain = 0.08;

struct GemmDRhsKernel {
  MathMode math = MathMode::TensorCoreBF16;
  TileConfig tile;
  DzFormat format = DzFormat::SplitBF16;
  DType aType = DType::BF16; ///< dtype of A
  int64_t k = 0;
  BufferRef dz, dzLo; ///< [N, chunkCols]
  BufferRef a;        ///< [N, k]
  BufferRef out;      ///< [cols, k] of outType; rows of the chunk written
  DType outType = DType::F32;
  /// Row blocks after the first add to out instead of overwriting it (out is then f32).
  bool accumulateRowBlocks = false;
  /// [Note: a scaled A in column parts] Output column j of this launch is column
  /// outCol0 + j of out, whose rows are outLd wide (0: k); a of pitch k. Only with the
  /// wgmma mainloop's TMA store.
  int64_t outCol0 = 0;
  int64_t outLd = 0;
  /// [Note: target group sums]: when valid (a bf16/f16 out written once), each element's
  /// f32 sum gets the target-column correction of its row before the rounding.
  TargetSums targetSums;
  /// [Note: stored values in dW] dz is the forward's stored values, possibly in slabs
  /// (SlabSplit: a launch then covers a group of slabs, its chunk).
  bool slabs = false;
  /// [Note: sm90 loaded sums] With the TMA store on a tile that allows it
  /// (wgmmaLoadedSums): a launch that adds to out over at most this many rows of K (a row
  /// block) loads the old values through the ring and stores the sums; longer launches,
  /// and every launch where it is 0, reduce-add.
  int64_t loadedSumsMaxRows = 0;
  bool operator==(const GemmDRhsKernel &) const = default;
};

/// The materialized schedule's dZ pass ([Note: the materialized backward]), per element of
/// the row block, in place:
///   dz[r][c] = bf16( c == target[r] ? targetDz[r]
///                    : values[r][c] * scale[r] * exp(tileMax[r][c / tileCols] - lse[r]) )
/// values / dz: [rows of the block][cols], fp16 in and bf16 out. lse, scale and targetDz are
/// f32 per row (global row index); target (i32 or i64) is optional: without it no column is
/// special.
struct DzFormKernel {
  BufferRef dz;       ///< the forward's StoredTile::values
  BufferRef tileMax;  ///< the forward's StoredTile::tileMax ([rows][tiles])
  int64_t cols = 0;
  int32_t tileCols = 128;
  BufferRef lse, scale, targetDz, target;
  DType targetType = DType::I64;
  /// When valid (its target is `target`): residual[r] = targetDz[r] − f32(bf16(targetDz[r]))
  /// for rows with 0 <= target[r] < cols ([Note: the target-column residual]).
  BufferRef residual;
  /// [Note: row-scaled stored values] With rowScaled the values stay as the forward
  /// stored them (bf16, the target column 0) and the kernel is per row, O(N·k):
  ///   rowScale[r]    = scale[r] * exp(reference - lse[r])
  ///   residual[r]    = targetDz[r]                  (rows with 0 <= target[r] < cols)
  ///   aScaled[r][j]  = bf16(rowScale[r] * a[r][j])  (j < k; when aScaled is valid)
  /// dA's GEMM multiplies its rows by rowScale, dB's reads aScaled as its B operand, and
  /// both add the whole target column through the residual.
  bool rowScaled = false;
  double reference = 0;
  BufferRef rowScale;     ///< f32 [N]
  BufferRef a;            ///< [N, k] of aType: the forward's A operand
  BufferRef aScaled;      ///< bf16 [rows of the block][k] (block-local)
  DType aType = DType::BF16;
  int64_t k = 0;
  /// [Note: a per-row reference] When valid, f32 [N]: the reference c_r of each row
  /// (`reference` is unused), and `recompute` (i32 [N]) is set where the stored values do
  /// not hold the row: lse[r] − c_r > kRowScaledRange or not finite. Those rows get
  /// rowScale 1 and the GemmDz filtered by `recompute` writes their dZ; the others
  /// rowScale[r] = scale[r]·exp(c_r − lse[r]).
  BufferRef referenceRow;
  BufferRef recompute;
  /// [Note: a scaled A in column parts] aScaled[r][j] = bf16(rowScale[r]·a[r][aCol0 + j]),
  /// a of pitch aLd (0: k), j < k; with aOnly the kernel writes aScaled and nothing else
  /// (the row scale computed again from the same inputs, the same bits).
  int64_t aCol0 = 0;
  int64_t aLd = 0;
  bool aOnly = false;
  /// [Note: values scaled in place] With rowScaled and scaleValues the kernel does one
  /// thing, after dA has read the stored values and before dB does:
  ///   dz[r][c] = bf16(rowScale[r] * dz[r][c])      (r < rows of the block, c < cols)
  /// (rowScale from the row form of the block, an earlier DzForm), so that dB reads dZ
  /// itself and the unscaled A: no scaled copy of A. With `slabs` the values may lie in
  /// slabs of 128 columns ([Note: stored values in dW]: SlabSplit, SlabStride, SlabBase).
  bool scaleValues = false;
  bool slabs = false;
  bool operator==(const DzFormKernel &) const = default;
};

/// [Note: a group's first and last rows] The f32 TargetCorrection's warp of row r must
/// know whether an earlier row of the launch has the same target (then r adds nothing)
/// and, when it leads, which rows follow with it. Found by scans that is ~N²/2 target
/// reads each way (0.22-0.25 ms of Llama-3's head at N = 8192, a launch of one block;
/// quadratic in a block's rows). Instead a launch with `groups` (u32 [2, cols]) runs in
/// two kernels:
///   - `findGroups`: one thread a row, for rows with 0 <= t < cols,
///       groups[t] = max(groups[t], ~r)      (~r: the first row holds the largest)
///       groups[cols + t] = max(groups[cols + t], r + 1)
///     (atomic maxima: the same words in any order);
///   - the correction: row r returns at once unless ~groups[t] == r (it leads); a leader
///     reads last = groups[cols + t] − 1, adds the one row itself when last == r (no
///     scan: nearly every row of random or natural targets, V ≫ N) and otherwise gathers
///     the members from [r, last] in row order as before; then it sets both words to 0.
/// The sums are the same, in the same order, as with the scans: the same bits. Every
/// word a find sets is cleared by its group's leader, so a launch leaves `groups` as it
/// found it, zero (BufferInit::Zero, set once per call): row blocks need no memset of
/// their own. A row that reads a cleared word sees first = 0xFFFFFFFF, never a row of
/// the launch, and returns. Launches of 2³¹ − 1 rows or more keep the scans (a row must
/// fit 31 bits) and leave `groups` alone. The planner takes the words only within 1 % of
/// the budget and where they leave the sampled run schedules as they were; between the
/// samples they may still move the slab split of a call that overwrites dW (Llama-3's
/// bucket of 8192: 106 of its 24576 calls, by 33 of 1002 slabs), never its blocks
/// (Planner.TargetGroupsLeaveEveryBlockOfTheBucketAlone). Off only for comparisons
/// (PlanOptions::targetGroups, LCEJIT_TARGET_GROUPS=0).
///
/// The dB part of [Note: the target-column residual]: for the rows r of the launch with
/// 0 <= t_r < cols, grouped by t_r, out[t][j] += Σ_{r in the group, in row order}
/// residual[r]·a[r][j] (f32, j < k), one add per element: deterministic. Runs after the
/// chunk loop of a row block (the GemmDRhs wrote or accumulated out).
/// With `sums` valid ([Note: target group sums]) it runs inside the chunk loop instead,
/// for the rows whose target lies in the chunk, and writes the groups' sums and heads for
/// dB's epilogue (out is not valid then).
/// With `groups` valid ([Note: a group's first and last rows]) an f32 correction reads
/// each target's first and last rows from it; with `findGroups` too the kernel only finds
/// them (it reads the residual's targets and writes `groups`, nothing else).
struct TargetCorrectionKernel {
  Residual residual;
  BufferRef a;   ///< [N, k] of aType: the forward's A operand
  DType aType = DType::BF16;
  BufferRef out; ///< f32 [cols, k]
  int64_t k = 0, cols = 0;
  TargetSums sums;
  BufferRef groups; ///< u32 [2, cols], zero between launches
  bool findGroups = false;
  bool operator==(const TargetCorrectionKernel &) const = default;
};

/// [Note: the exact target logit] The row loss of a cross entropy is lse − z_y, formed from
/// the forward's (max m, rest sum t) pair and the target logit z_y^g that the same
/// epilogue picks ([Note: lse minus a logit] in Planner.cpp): its terms are
/// exp(z_c − z_y), so every error of z_y^g is a relative error of the loss. On a peaked
/// row (p_y → 1, a loss ~ 1e-3) the f32 accumulation of z_y^g itself dominates: |z_y| ≈ 25
/// summed over D = 4096 products is off by ~4e-5 absolute, the loss by as much relative
/// (measured 6.8e-5 on the H200). The kernel below computes x_y = A[r]·B[t_r] again with
/// f64 accumulation (N·D work, a gather of B's target rows); the loss's row function
/// applies the epilogue's value chain to it (v_y^e = f(x_y)) and uses it only where the
/// common error of z_y^g enters:
///   S'  = Σ_{c≠y} exp(z_c^g − z_y^g) = expm1(m − z_y^g) + exp(m − z_y^g)·t
///   loss = log(1 + exp(z_y^g − v_y^e)·S')
/// (each term then carries only the error of its own z_c; S' is exact in form when y is
/// the argmax, where m − z_y^g = 0). Rows whose target is outside [0, cols) get 0.
/// [Note: a far target] When the target lies far below the row's maximum (d = m − z_y >
/// kFarTarget) nothing cancels: the loss is at least d and p_y < exp(−d). The forms above
/// would overflow there (exp(d) beyond 88 in f32; exp(d)·t is inf·0 when every other column
/// underflows), so the row loss is taken as lse − v_y = (m − v_y) + log1p(t), and the target
/// column's expm1(−log1p(X)) as −1 (dz_y = b, off by a·p_y, below its own rounding). Found by
/// the GPU suite's far rows (loss ~120: the loss was inf).
inline constexpr double kFarTarget = 30.0;
/// [Note: the target column's dZ] The cross entropy's dZ is f = a·E + b per element, E =
/// exp(G(x) − L) with L the row's logsumexp, b the one-hot's part (−a at the target column,
/// 0 elsewhere; Materialize.cpp finds a and b by algebra). At the target column of a
/// peaked row p_y = E → 1 and f = a·(E − 1) cancels: E carries the f32 rounding of L
/// (|L| ≈ 25: ~1e-6 absolute) and of exp, and 1 − p_y ≈ the row loss (~1e-3), so the
/// target's gradient kept ~1e-3 relative (exact precision's peaked f32 dW: 5.5e-4, its
/// own bound 1e-4). The target column is instead formed per row from what the loss uses
/// ([Note: the exact target logit]):
///   X   = Σ_{c≠y} exp(z_c − v_y) = exp(z_y^g − v_y)·S',  S' = expm1(m − z_y^g) + exp(m − z_y^g)·t
///   f_y = a·expm1(−log1p(X)) + (a + b)        (p_y − 1 = 1/(1 + X) − 1; a + b = 0 for the LCE)
/// with (m, t) the forward's logsumexp pair, z_y^g its pick and v_y the f64 target logit
/// through G's chain where the Program has a RowDot for it (else v_y = z_y^g). Every
/// factor keeps its relative precision, and the gradient is the one of the loss as
/// computed (lse' − v_y). The materialized schedule's row kernel stores it for DzForm; in
/// the recompute schedule a row kernel (`<name>_dzt0`) stores it before the chunk loop and
/// the dZ GEMM's epilogue selects it at the target column. PlanOptions::exactTargetLogit
/// (LCEJIT_EXACT_TARGET=0) keeps `a·E + b` in f32, for comparisons.
struct RowDotKernel {
  BufferRef a; ///< [N, k] of abType (the GEMM's A)
  BufferRef b; ///< [cols, k] of abType (the GEMM's B)
  DType abType = DType::BF16;
  BufferRef target; ///< [N] t_r (a Row operand buffer of the GEMM)
  DType targetType = DType::I64;
  BufferRef out; ///< f32 [N]: f32(Σ_k f64(a[r][k])·f64(b[t_r][k]))
  int64_t k = 0, cols = 0;
  bool operator==(const RowDotKernel &) const = default;
};

struct CastKernel {
  BufferRef in;  ///< f32 [rows, k]
  BufferRef out;
  DType outType = DType::BF16;
  int64_t k = 0;
  int64_t rows = -1; ///< -1: the rows of the launch (N, or the row block's)
  bool operator==(const CastKernel &) const = default;
};

using KernelBody =
    std::variant<RowKernel, GemmReduceKernel, GemmDzKernel, GemmDLhsKernel, GemmDRhsKernel,
                 CastKernel, DzFormKernel, TargetCorrectionKernel, RowDotKernel>;

enum class KernelKind : uint8_t {
  Row,
  GemmReduce,
  GemmDz,
  GemmDLhs,
  GemmDRhs,
  Cast,
  DzForm,
  TargetCorrection,
  RowDot,
};
/// The four GEMM kinds (the others are elementwise or per row).
inline bool isGemmKind(KernelKind k) {
  return k == KernelKind::GemmReduce || k == KernelKind::GemmDz || k == KernelKind::GemmDLhs ||
         k == KernelKind::GemmDRhs;
}
const char *kernelKindName(KernelKind k);

struct Kernel {
  std::string name; ///< the CUDA entry point, unique in the Program
  KernelBody body;
  KernelKind kind() const { return static_cast<KernelKind>(body.index()); }
  bool operator==(const Kernel &) const = default;
};

//===----------------------------------------------------------------------===//
// Kernel ABI: one function defines the parameter list; the emitter prints it and the
// executor packs arguments in the same order.
//===----------------------------------------------------------------------===//

struct Param {
  enum class Kind : uint8_t {
    Pointer,    ///< a buffer's base address
    N,          ///< int64 rows
    ChunkBegin, ///< int64 first column of the chunk
    ChunkCols,  ///< int64 columns in this chunk
    ChunkIndex, ///< int64 index of the chunk (0 = first)
    Splits,     ///< int32 column splits of a GemmReduce
    TotalRows,  ///< int64 N of the whole call (ScalarOp::RowCount); `n` is the launch's rows
    RowBlock,   ///< int64 index of the row block (0 = first)
    TensorMapA, ///< WgmmaBF16 GEMMs: the TMA map of the A operand (128-byte CUtensorMap)
    TensorMapB, ///< ... and of the B operand. See [Note: sm90 operand maps].
    /// ... and of the f32 output, with TileConfig::tmaStore ([Note: sm90 output map]).
    TensorMapOut,
    /// int64 mask of the outputs the run accumulates into (bit i: Program::outputs[i]);
    /// a kernel that writes an output reads its own bit. See [Note: accumulating outputs].
    AccumulateOutputs,
    /// [Note: stored values in dW] Kernels with `slabs` set: int64, the first slab of 128
    /// columns that lives in the workspace (SlabBase), or -1: the stored values are
    /// row-major [rows][cols] at their own buffer (the ordinary schedule).
    SlabSplit,
    /// int64 elements between the slabs below SlabSplit (those in the output's memory).
    SlabStride,
    /// Pointer: the workspace's slabs (slab SlabSplit first, rows x 128 elements each).
    SlabBase,
    /// GemmDLhs with `slabs`: the TMA map of the workspace's slabs (slab >= SlabSplit).
    TensorMapA2,
    /// [Note: slab tails] Kernels with `slabs`: int64 rows of each slab before its tail
    /// (rows at or past it lie in the workspace's tails, after its slabs); at least the
    /// launch's rows where there are no tails.
    SlabHead,
    /// GemmDLhs and GemmDRhs with `slabs`: the TMA map of the slabs' tails ([Note: slab
    /// tails]; any valid map where there are none).
    TensorMapTail,
  };
  Kind kind = Kind::Pointer;
  BufferRef buf;
  std::string name; ///< C identifier in the emitted kernel
  bool operator==(const Param &) const = default;
};

/// The kernel's parameters in order. Pure function of the kernel.
std::vector<Param> kernelParams(const Kernel &kernel);

/// [Note: accumulating outputs] A run may add its results to what some outputs already
/// hold instead of overwriting them (β = 1: gradient accumulation across micro-batches).
/// Which outputs is a runtime argument, not part of the Program: the mask
/// (Param::Kind::AccumulateOutputs, bit i = output i) reaches every kernel that writes an
/// output of its own (GemmDLhs and GemmDRhs into an output, Cast), and each reads its
/// output's bit:
///   - GemmDLhs: chunk 0 adds to `out` too (`out = old + Σ chunks`, in f32); a bf16/f16
///     `out` (one chunk) is read, widened, added in f32 and rounded once;
///   - GemmDRhs: row block 0 adds too; a bf16/f16 `out` is read, widened, added in f32 and
///     rounded once (`out = round(old + Σ rows)`): the output is still written once;
///   - Cast: `out = round(old + in)`, one rounding.
/// So accumulating costs no extra pass over the output, only the read of its old value
/// inside the kernel that writes it. An output may accumulate only if every kernel that
/// writes it is one of these (accumulableOutputs); the loss, written by a row kernel,
/// cannot.
struct Program;
uint64_t accumulableOutputs(const Program &program);

//===----------------------------------------------------------------------===//
// Steps and the Program.
//===----------------------------------------------------------------------===//

struct Step {
  enum class Kind : uint8_t { Launch, ChunkLoop };
  Kind kind = Kind::Launch;
  int32_t kernel = -1;               ///< Launch
  std::vector<int32_t> loopKernels;  ///< ChunkLoop: launched in order for each chunk
  bool operator==(const Step &) const = default;
};

/// Launch geometry of a kernel for given runtime sizes (grid dims may be 0: skip).
struct LaunchDims {
  int64_t grid[3] = {1, 1, 1};
  int32_t block = 128;
  int32_t sharedBytes = 0;
  int32_t cluster = 1; ///< CTAs per thread-block cluster along x (TileConfig::clusterM)
  /// Every CTA must be resident at once ([Note: dA stream-K]: CTAs wait on each other's
  /// partial tiles): launched cooperatively, so the driver refuses a grid that cannot be.
  bool cooperative = false;
};

/// [Note: the run schedule] A Program is planned once per bucket, but how a call with N
/// rows is cut into row blocks and vocabulary chunks is decided at launch from that N, by
/// the pure policy plan::chooseRunSchedule (SchedulePolicy.h), from this data and the
/// workspace buffers. Steps [firstBlockedStep, lastBlockedStep] run once per row block
/// (kernels see `n` = the block's rows and row-indexed buffers offset to its first row);
/// every ChunkLoop runs its kernels once per chunk of columns.
struct ScheduleSpec {
  int64_t budgetBytes = 0;     ///< workspace budget the policy keeps to when it can
  int64_t chunkAlign = 128;    ///< chunk widths are multiples of this (tile widths)
  int64_t fixedChunkCols = 0;  ///< > 0: always this chunk width (tests, overrides)
  int64_t rowAlign = 128;      ///< rows per block: a multiple of this
  int64_t minBlockRows = 1024; ///< never cut blocks smaller than this
  /// > 0: row blocks of this many rows (rounded down to rowAlign, at least rowAlign), or
  /// of the most the budget holds when it holds fewer, instead of the policy's choice:
  /// comparisons and tuning (LCEJIT_BLOCK_ROWS).
  int64_t blockRows = 0;
  int64_t goodChunkCols = 8192; ///< below this the chunk loop costs more than row blocks
  int64_t fallbackChunkCols = 2048; ///< the chunk width when no schedule fits the budget
  /// The materialized schedule: one chunk of all columns always; rows are blocked (in
  /// multiples of rowAlign, at least minBlockRows when N allows) to fit the budget.
  bool wholeRows = false;
  int32_t firstBlockedStep = -1; ///< -1: rows are never blocked
  int32_t lastBlockedStep = -1;
  /// [Note: stored values in dW] >= 0: the workspace buffer of the forward's stored values,
  /// which a call that overwrites output `slabOutput` (f32) may keep in that output's
  /// memory instead; -1: never.
  int32_t slabValues = -1;
  int32_t slabOutput = -1;
  /// The scaled-A copy dB reads ([Note: a scaled A in column parts]) and its parts: with
  /// the slabs every part is kept at once (part q at q x rows x its row bytes).
  int32_t slabScaledA = -1;
  int32_t slabScaledAParts = 1;
  /// [Note: values scaled in place] The Program serves only the calls whose run schedule
  /// is one row block (its stored values in slabs, or all in the workspace) within the
  /// budget (plan::servesCall); the op runs every other call with the recompute Program of
  /// the same bucket. Set where the budget is too small for the ordinary materialized
  /// blocks (the lean 64 MiB: a call that adds to dW would run blocks of ~250 rows).
  bool slabOnly = false;
  /// [Note: dA stream-K chains] >= 0: the workspace buffer of the chain's flags and slots
  /// (no bytes of its own: RunSchedule::lhsChainBytes of them in the slab union of a
  /// schedule that has them, none anywhere else); -1: none.
  int32_t lhsChain = -1;
  bool operator==(const ScheduleSpec &) const = default;
};

/// What the policy chose for one N (see [Note: the run schedule]).
struct RunSchedule {
  int64_t n = 0;
  int64_t rowsPerBlock = 0;  ///< == n when rows are not blocked (at least 1)
  int64_t rowBlocks = 1;
  int64_t chunkCols = 0;     ///< 0 when the Program has no chunk loop
  int64_t chunks = 0;
  int64_t workspaceBytes = 0;
  bool overBudget = false;   ///< even the smallest schedule needs more than the budget
  int64_t budgetBytes = 0;   ///< the budget it was chosen for
  const char *reason = "";   ///< why (a static string: choosing builds no text)
  /// When the estimate of [Note: estimated run time] chose the blocks (and chunks) over the
  /// policy's rule: the rule's rows a block and chunk width, and how much cheaper the
  /// estimate put its choice (a fraction); 0 otherwise.
  int64_t ruleRowsPerBlock = 0, ruleChunkCols = 0;
  double estimatedGain = 0;
  /// Partial entries per row of the GemmReduce kernels for this call (<= Program::splits,
  /// which sizes the partials buffer; [Note: column splits per call] in SchedulePolicy.h).
  int32_t splits = 1;
  /// [Note: stored values in dW] > 0: the first block, of slabRows rows, keeps its stored
  /// values in slabs of 128 columns: slab i < slabSplit in the output's region i +
  /// slabGroup (rows 128 (i + slabGroup) .. of it), slabs >= slabSplit in the workspace;
  /// its dB runs in launches of at most slabGroup slabs aligned from the last. The other
  /// rowBlocks - 1 blocks (rowsPerBlock rows each, the last the rest) are ordinary, their
  /// dB adding to what the first wrote. 0: the ordinary layout.
  int64_t slabGroup = 0;
  int64_t slabRows = 0;
  int64_t slabSplit = 0;
  int64_t slabs = 0;     ///< ceil(cols / 128)
  /// [Note: slab tails] Rows of each slab in its region (or in the workspace's slabs):
  /// slabRows where they fit one region, else the most a region holds in whole row tiles,
  /// the rows past it in the workspace's tails.
  int64_t slabHead = 0;
  int64_t slabStride = 0; ///< elements (of the stored values) between regions of the output
  /// The workspace of the ordinary schedule, which a call that adds to the output takes
  /// (at least workspaceBytes: the slabs are taken only where they need no more).
  int64_t slabOrdinaryWorkspaceBytes = 0;
  /// [Note: dA stream-K chains] (SchedulePolicy.h) The slab block's dA launches chain
  /// their last round through the slots of ScheduleSpec::lhsChain, after the slab union's
  /// other buffers: their bytes (plan::lhsChainScheduleBytes), set where the budget holds
  /// them on top of the schedule chosen without; 0: none.
  int64_t lhsChainBytes = 0;
  /// One line for people: the choice, the workspace against the budget, and the reason.
  std::string describe() const;
};

/// One kernel launch of a run, in order (Program::expand).
struct LaunchItem {
  int32_t kernel = -1;
  int32_t step = -1;
  int64_t rowBegin = 0, rows = 0; ///< the row block
  int64_t rowBlock = 0;
  int64_t chunkIndex = 0, chunkBegin = 0, chunkCols = 0;
  int32_t splits = 1; ///< RunSchedule::splits: the Splits parameter and the reduce's grid
};

struct Target {
  int32_t smVersion = 90;   ///< 90 = sm_90a, 80 = sm_80, ...
  int32_t numSMs = 132;
  int32_t maxSharedPerBlock = 232448;
  /// The DRAM interface's width in bits (CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH): an
  /// H100 5120, an H200 6144; 0 = unknown (planned as the H200 on which the defaults were
  /// measured). It picks the forward's CTA order ([Note: forward CTA order by card]).
  int32_t memoryBusBits = 0;
  std::string archName() const; ///< "sm_90a" for 90, else "sm_XY"
  bool operator==(const Target &) const = default;
};

struct Program {
  std::string name;      ///< e.g. "lce"
  int64_t bucket = 0;    ///< upper bound of N this plan was made for
  int64_t bucketLow = 0; ///< lower bound (inclusive)
  Target target;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<BufferSpec> workspace; ///< [0] scalar slots, [1] error word, then others
  int32_t numScalarSlots = 0;
  std::vector<Kernel> kernels;
  std::vector<Step> steps;
  int64_t loopCols = 0;    ///< total columns the chunk loop covers (V)
  int32_t splits = 1;      ///< column splits of GemmReduce kernels (the most a call uses)
  ScheduleSpec schedule;   ///< see [Note: the run schedule]
  /// Human-readable notes on the planner's decisions (shown in the dump).
  std::vector<std::string> decisions;

  bool operator==(const Program &) const = default;
  /// Stable hash over everything above (FNV-1a over the canonical JSON).
  uint64_t hash() const;
  /// Canonical JSON (sorted keys, no whitespace variance).
  std::string toJson(int indent = 2) const;

  bool hasChunkLoop() const;
  /// Row blocks and chunks for a call with N rows (plan::chooseRunSchedule).
  /// `outputFree`: the call overwrites ScheduleSpec::slabOutput, whose memory may then
  /// hold the stored values ([Note: stored values in dW]).
  RunSchedule runSchedule(int64_t n, bool outputFree = false) const;
  /// Every launch of a run with this schedule, in order.
  std::vector<LaunchItem> expand(const RunSchedule &s) const;
  /// [Note: dA widths per launch] Whether loop kernel `k` runs in a launch of `rows` rows
  /// and `cols` columns: always, unless it is one of a dA's widths (GemmDLhsKernel::
  /// alternativeOf), of which only the one with the least estimated time for those rows
  /// runs (plan::lhsLaunchCost; the Program's own dA on a tie).
  bool launches(int32_t k, int64_t rows, int64_t cols) const;
  /// Launch geometry of kernel `k` for `rows` rows and a chunk of `chunkCols` columns, with
  /// `runSplits` partial entries per row (RunSchedule::splits; 0: Program::splits).
  /// `chain`: the launch has the chain's slots ([Note: dA stream-K chains]: a slab-block
  /// launch of a schedule with RunSchedule::lhsChainBytes).
  LaunchDims launchDims(int32_t k, int64_t rows, int64_t chunkCols,
                        int32_t runSplits = 0, bool chain = false) const;
  /// Byte offsets of workspace buffers for a schedule, and the total, 256-byte aligned.
  std::vector<int64_t> workspaceOffsets(const RunSchedule &s, int64_t *totalBytes) const;
  /// The same for the schedule runSchedule(n) chooses.
  std::vector<int64_t> workspaceOffsets(int64_t n, int64_t *totalBytes) const;
  /// [Note: stored values in dW] In a schedule with slabs, within ScheduleSpec::slabValues'
  /// buffer: the bytes of the workspace's slabs (256-aligned), then of every part of the
  /// scaled A of the slab block (ScheduleSpec::slabScaledA; 0 without).
  int64_t slabValuesBytes(const RunSchedule &s) const;
  int64_t slabScaledABytes(const RunSchedule &s) const;
  /// The slab block's other block-local buffers live there too, after those, in index
  /// order: the byte offset of workspace buffer `index` in that buffer (-1: not one of
  /// them), and the bytes of all of it.
  int64_t slabUnionOffset(const RunSchedule &s, int32_t index) const;
  int64_t slabUnionBytes(const RunSchedule &s) const;
  /// Bytes one row of a row-indexed buffer spans (0: not indexed by the global row).
  int64_t rowStrideBytes(const BufferRef &b) const;
};

/// The shared-memory bytes a GEMM tile config needs for its operand dtype size.
int32_t gemmSharedBytes(const TileConfig &tile, int64_t aBytes, int64_t bBytes,
                        int32_t numA);

/// The shared memory of a WgmmaBF16 GEMM (lcejit::sm90::GemmConfig::SMEM_BYTES): 1024
/// bytes of alignment slack, stages of [128 x 64 A][bn x 64 B] bf16, with tmaStore 32 KB
/// of f32 boxes, 16 bytes of barriers per stage.
int32_t wgmmaSharedBytes(const TileConfig &tile);

/// [Note: sm90 loaded sums] The most rows of K (a row block) for which an accumulating
/// wgmma dB loads its tiles' old values and stores the sums instead of reduce-adding them.
/// Measured on an H100 (docs/performance.md, session 34): a 1024-row block of Gemma-2's
/// head runs its dB in 2.44 ms instead of 2.87 (the L2's reduce-adds move dW at 2.2 TB/s
/// there, against 2.9-3.0 for loads and stores), but a 2048-row block of Llama-3's in 3.8-4.5 ms
/// instead of 3.6-4.3: with twice the MACs a byte the reduce-adds hide under the next
/// tile's mainloop, while the loads' latency and the ring stages they hold do not.
inline constexpr int64_t kLoadedSumsMaxRows = 1024;
/// [Note: loaded sums by card] kLoadedSumsMaxRows is the H100's. On an H200 (session 36)
/// the L2's reduce-adds move dW at 2.81-2.84 TB/s, 7 % under the loaded path's bulk load,
/// add and store (3.03; the H100: 2.17 against 2.9-3.0), and a 1024-row block of Gemma-2's
/// head runs its dB in 2.43-2.44 ms by reduce-adds against 2.54-2.55 loaded: the three
/// ring stages the old values hold cost more than the reduce-adds' slower bytes. So the
/// planner (PlanOptions::loadedSumsMaxRows unset) loads the sums only on a memory
/// interface narrower than kWideMemoryBusBits; the H200 and an unknown device (planned as
/// the H200) reduce-add. LCEJIT_LOADED_SUMS_ROWS overrides on any card.

/// Whether a WgmmaBF16 dB with this tile adds to its f32 output by loading the old values
/// through the ring and storing the sums (lcejit::sm90::GemmConfig::LOADED_SUMS, [Note:
/// sm90 loaded sums]) rather than by TMA reduce-adds: a TMA-store tile without clusters or
/// split-K whose stages hold both consumers' old f32 boxes with one stage to spare.
bool wgmmaLoadedSums(const TileConfig &tile);

/// The math mode of a GEMM kernel (kernel must be one of the four GEMM kinds).
MathMode gemmMath(const Kernel &kernel);
/// The tile of a GEMM kernel.
const TileConfig &gemmTile(const Kernel &kernel);

/// Shape buckets: N in (b/4, b] with b a power of four, b >= 256; N <= 256 -> 256.
int64_t bucketOf(int64_t n);
int64_t bucketLowerBound(int64_t bucket);

/// Calls `f` on every BufferRef of every kernel of `p` (operands, sinks, GEMM operands and
/// outputs, stored tiles, partials), in a fixed order.
void forEachBufferRef(Program &p, const std::function<void(BufferRef &)> &f);
/// The same for one kernel.
void forEachBufferRef(Kernel &k, const std::function<void(BufferRef &)> &f);

/// Removes kernel `index`, the Launch steps of it and its place in chunk loops, and
/// renumbers the references to the kernels after it (steps, Operand::partialsOf).
void removeKernel(Program &p, int32_t index);

/// Removes workspace buffer `index` (no kernel may still use it: checked) and renumbers the
/// references to the buffers after it.
void removeWorkspaceBuffer(Program &p, int32_t index);

/// [Note: target group sums] with blocks of `rows` rows (> 0) instead of the planner's
/// kTargetGroupRows, in the group-sum kernels, the dB that reads them and the size of the
/// heads buffer: so that a test's few rows make several blocks.
void setTargetGroupRows(Program &p, int64_t rows);

} // namespace lcejit::plan
