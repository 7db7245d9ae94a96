//===- lcejit_gemm.cuh - Tiled GEMM: config, tile loaders, mainloops
//-------===//
//
// The CTA-level GEMM every GEMM kernel template (lcejit_kernels.cuh) runs:
//
//   acc[BM x BN] = sum over k of A[m0 + m][k] * B[k][n0 + n]      (f32
//   accumulators)
//
// with A given as one or two operands (NUM_A = 2 for split bf16 hi + lo: both
// multiply the same B tile and accumulate into the same accumulators), each
// operand either K-major (k contiguous) or MN-major (m or n contiguous) in
// global memory.
//
// [Note: shared memory layout] Dynamic shared memory holds STAGES stages, each
//   [A tile] x NUM_A, then [B tile]
// where an operand tile is stored as in global memory, unpadded: K-major
// [BM][BK], MN-major [BK][BM] (for B: BN instead of BM), its 16-byte chunks
// permuted within each row by the swizzle of [Note: swizzle]. Both layouts have
// the same size, BM * BK (BN * BK) elements. After the stages comes a scratch
// area of BM * WARPS_N * 16 bytes: in all exactly plan::gemmSharedBytes() of
// compiler/plan/Program.cpp, which the executor launches with. Entry points check
// %dynamic_smem_size against GemmConfig::SMEM_BYTES (launch_ok): with less they
// record a contract violation in the error word and return.
// After the mainloop all of it is free; the GemmReduce epilogue reuses it for
// its cross-warp exchange.
//
// [Note: swizzle] A tile row of CHUNKS 16-byte chunks (CHUNKS = inner elements
// * element bytes / 16) keeps its logical chunk c at physical chunk
//   swizzle_chunk<CHUNKS>(r, c) = c ^ swizzle_key<CHUNKS>(r)    of the same row,
//   key(r) = r & 7                                  CHUNKS a multiple of 8,
//            (r / (8 / CHUNKS)) & (CHUNKS - 1)      CHUNKS in {1, 2, 4}.
// Shared memory has 32 banks of 4 bytes; a 16-byte access covers the 4 banks of
// "bank group" (address / 16) % 8, and a warp's 16-byte accesses are served 8
// lanes at a time (8 lanes of a vector store; the 8 row addresses of one 8x8
// matrix of ldmatrix), without conflicts iff those 8 hit distinct groups.
//   - ldmatrix reads 8 consecutive rows r0 .. r0 + 7 (r0 % 8 == 0) at one
//     logical chunk. CHUNKS >= 8: every row starts a 128-byte line and the 8
//     keys r & 7 are distinct. CHUNKS < 8: P = 8 / CHUNKS rows share a line,
//     row r in slot r % P, and the group is (r % P) * CHUNKS + (c ^ ((r / P) %
//     CHUNKS)): distinct over the 8 rows. Both layouts are read this way (rows
//     = m or n with k contiguous, or rows = k with .trans).
//   - load_tile's 8 consecutive threads store 8 consecutive vectors in row-major
//     order, starting at a multiple of 8: CHUNKS >= 8: 8 aligned chunks of one
//     row, XORed with one key; CHUNKS < 8: P whole rows: distinct groups.
//   - key(r) depends on r & 7 only, so the ldmatrix offsets of a lane are
//     computed once per lane and shifted by multiples of 8 rows (GemmMainloop).
// The vector (cp.async and zero-fill) and the element writes of load_tile and
// the SIMT reads all go through swizzled_index(); the tensor-core reads through
// the per-lane offsets of [Note: fragment addresses].
//
// [Note: tile loads] A tile is OUTER rows of INNER contiguous elements, element
// (o, i) at global ptr[(o0 + o) * ld + i0 + i], valid when o0 + o < outer_limit
// and i0 + i < inner_limit; everything else is zero-filled (both operands, so a
// tail in k multiplies 0 by 0, never by stale shared memory). Thread t loads
// chunk t % CHUNKS of rows t / CHUNKS + p * (THREADS / CHUNKS), p = 0, 1, ...
// When the source allows it (ld, inner_limit and the base pointer all multiples
// of 16 bytes) a thread moves 16-byte vectors with cp.async (a vector is then
// either entirely in bounds or entirely out, because every tile origin i0 is a
// multiple of 8 elements); otherwise it falls back to element loads and shared
// stores. Both kinds of writes happen after the barrier that frees the stage
// and before the barrier that publishes it, so they mix safely.
//
// [Note: pipeline] Multi-stage cp.async ring (STAGES >= 2). The prologue issues
// tiles 0 .. STAGES-2, one commit group each (a group may be empty; committing
// anyway keeps the count uniform). Iteration kt waits until at most STAGES-2
// groups are pending (so tile kt has landed for this thread), then
// __syncthreads (tile kt is visible to all, and everyone is done with tile
// kt-1, whose stage is (kt + STAGES - 1) % STAGES), then issues tile kt +
// STAGES - 1 into that stage, then computes tile kt. The loop ends with
// wait_group 0 and a barrier, so shared memory is free when run() returns.
//
// [Note: fragment addresses] Tensor cores: per 16-wide k step, one ldmatrix
// .x4 per 16x16 A fragment (mma row tile mt) and one per pair p of 8-column B
// mma tiles (2p, 2p + 1), plus an .x2 for a last odd tile; .trans for MN-major
// tiles. Matrix orders ([Note: ldmatrix] in lcejit_mma.cuh): A (m 0-7, k 0-7),
// (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15) = a[0..3]; B (n 0-7, k
// 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) = b[2p][0..1],
// b[2p+1][0..1], so that every fragment is a run of consecutive registers.
// The row a lane supplies, with r16 = lane & 15, hi = lane >> 4, r8x2 = (lane
// & 7) + 8 hi, half = (lane >> 3) & 1 (org: the warp's first m or n):
//   A K-major  (rows m):  row org + 16 mt + r16,   chunk 2 ks + hi
//   A M-major  (rows k):  row 16 ks + r8x2,        chunk (org + 16 mt) / 8 + half
//   B K-major  (rows n):  row org + 16 p + r8x2,   chunk 2 ks + half
//   B N-major  (rows k):  row 16 ks + r16,         chunk (org + 16 p) / 8 + hi
//   .x2 of tile nt (lanes 0-15): K-major row org + 8 nt + (lane & 7), chunk
//   2 ks + half; N-major row 16 ks + r16, chunk (org + 8 nt) / 8.
// The parts that vary in the mainloop (16 mt, 16 p, 8 nt, 16 ks rows) are
// multiples of 8 rows, which leave the swizzle key unchanged: each lane
// computes one byte offset per k step (K-major) or per mt / p (MN-major) once
// and adds compile-time multiples of the row size.
//
// [Note: accumulator layout] Each thread holds acc[TR][TC]: rows row_of(i),
// columns col_of(j) (local to the CTA tile), the full product of the two sets.
// The four lanes with the same lane >> 2 hold the same rows (they differ in
// lane & 3); row reductions shuffle over lane masks 1 and 2.
//   tensor cores: warp tile WM x WN of (WM/16) x (WN/8) mma tiles;
//     i = 2 * mt + h: row  warp_m * WM + 16 mt + 8 h + (lane >> 2)
//     j = 2 * nt + e: col  warp_n * WN + 8 nt + 2 (lane & 3) + e
//     (c0, c1, c2, c3) of mma tile (mt, nt) = acc[2mt][2nt], [2mt][2nt+1],
//     [2mt+1][2nt], [2mt+1][2nt+1]  (see [Note: m16n8k16 fragments] in
//     lcejit_mma.cuh).
//   SIMT f32: lanes as 8 (m) x 4 (n); thread tile (WM/8) x (WN/4), strided:
//     row warp_m * WM + 8 i + (lane >> 2),  col warp_n * WN + 4 j + (lane & 3).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit_common.cuh"
#include "lcejit_mma.cuh"

namespace lcejit {

/// How a GEMM multiplies (plan::MathMode).
enum {
  MATH_TC_BF16 = 0,  ///< mma.sync m16n8k16 bf16 x bf16 -> f32
  MATH_TC_F16 = 1,   ///< mma.sync m16n8k16 f16 x f16 -> f32
  MATH_SIMT_F32 = 2, ///< f32 FFMA, operands widened from their storage type
};

/// Operand layout in global (and shared) memory.
enum {
  K_MAJOR = 0,  ///< k contiguous
  MN_MAJOR = 1, ///< m (for A) or n (for B) contiguous
};

__host__ __device__ constexpr int cmax(int a, int b) { return a > b ? a : b; }

//===----------------------------------------------------------------------===//
// The swizzle of shared-memory tiles. See [Note: swizzle].
//===----------------------------------------------------------------------===//

/// Row widths (in 16-byte chunks) the swizzle supports.
__host__ __device__ constexpr bool swizzle_supports(int chunks) {
  return chunks == 1 || chunks == 2 || chunks == 4 ||
         (chunks > 0 && chunks % 8 == 0);
}

/// The XOR key of row `row` of a tile with CHUNKS chunks per row.
template <int CHUNKS>
__host__ __device__ constexpr int swizzle_key(int row) {
  static_assert(swizzle_supports(CHUNKS),
                "swizzled tile rows: 1, 2, 4 or a multiple of 8 chunks");
  return CHUNKS >= 8 ? (row & 7) : (row / (8 / CHUNKS)) & (CHUNKS - 1);
}

/// Physical chunk of logical chunk `chunk` of row `row`.
template <int CHUNKS>
__host__ __device__ constexpr int swizzle_chunk(int row, int chunk) {
  return chunk ^ swizzle_key<CHUNKS>(row);
}

/// Index (in elements) of element (o, i) of a swizzled tile of rows of INNER
/// elements of BYTES bytes.
template <int INNER, int BYTES>
__host__ __device__ constexpr int swizzled_index(int o, int i) {
  static_assert((INNER * BYTES) % 16 == 0, "tile rows are whole 16-byte chunks");
  constexpr int VEC = 16 / BYTES;
  constexpr int CHUNKS = INNER / VEC;
  return o * INNER + swizzle_chunk<CHUNKS>(o, i / VEC) * VEC + i % VEC;
}

/// Everything static about one GEMM kernel. See the [Note]s above.
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_,
          int MATH_, class ElemA_, int NUM_A_, int MAJOR_A_, class ElemB_,
          int MAJOR_B_>
struct GemmConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int MATH = MATH_;
  typedef ElemA_ ElemA;
  typedef ElemB_ ElemB;
  static constexpr int NUM_A = NUM_A_, MAJOR_A = MAJOR_A_, MAJOR_B = MAJOR_B_;

  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; ///< warp tile
  static constexpr bool TENSOR_CORES = MATH != MATH_SIMT_F32;

  // Shared-memory tiles: OUTER rows of INNER contiguous elements, unpadded and
  // swizzled (CHUNKS 16-byte chunks per row).
  static constexpr int A_OUTER = MAJOR_A == K_MAJOR ? BM : BK;
  static constexpr int A_INNER = MAJOR_A == K_MAJOR ? BK : BM;
  static constexpr int A_CHUNKS = A_INNER * ElemA::BYTES / 16;
  static constexpr int B_OUTER = MAJOR_B == K_MAJOR ? BN : BK;
  static constexpr int B_INNER = MAJOR_B == K_MAJOR ? BK : BN;
  static constexpr int B_CHUNKS = B_INNER * ElemB::BYTES / 16;
  static constexpr int A_TILE_BYTES = BM * BK * ElemA::BYTES;
  static constexpr int B_TILE_BYTES = BN * BK * ElemB::BYTES;
  static constexpr int STAGE_BYTES = NUM_A * A_TILE_BYTES + B_TILE_BYTES;
  static constexpr int SCRATCH_BYTES = BM * WARPS_N * 16;
  /// == plan::gemmSharedBytes(tile, sizeof A, sizeof B, NUM_A).
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + SCRATCH_BYTES;

  static_assert(BM % WARPS_M == 0 && BN % WARPS_N == 0,
                "warp grid must divide the tile");
  static_assert(BM % 8 == 0 && BN % 8 == 0 && BK % 8 == 0,
                "tile sizes: multiples of 8");
  static_assert(STAGES >= 2, "the pipeline needs at least 2 stages");
  static_assert(NUM_A == 1 || NUM_A == 2, "one A operand, or split hi + lo");
  static_assert((A_INNER * ElemA::BYTES) % 16 == 0 &&
                    (B_INNER * ElemB::BYTES) % 16 == 0,
                "tile rows are whole 16-byte chunks (cp.async vectors)");
  static_assert(swizzle_supports(A_CHUNKS) && swizzle_supports(B_CHUNKS),
                "swizzled tile rows: 16, 32, 64 bytes or a multiple of 128");
  static_assert(THREADS % A_CHUNKS == 0 && THREADS % B_CHUNKS == 0,
                "load_tile: a tile row is at most one row of the CTA's threads");
  static_assert(
      !TENSOR_CORES || (WM % 16 == 0 && WN % 8 == 0 && BK % 16 == 0),
      "mma.sync m16n8k16: warp tile multiple of 16x8, BK multiple of 16");
  static_assert(!TENSOR_CORES || (ElemA::BYTES == 2 && ElemB::BYTES == 2),
                "tensor-core operands are 16-bit");
  static_assert(TENSOR_CORES || (WM % 8 == 0 && WN % 4 == 0),
                "SIMT: warp tile multiple of 8x4 (lanes as 8 x 4)");
};

//===----------------------------------------------------------------------===//
// cp.async
//===----------------------------------------------------------------------===//

/// Copies 16 bytes global -> shared asynchronously (L2 only, .cg): the first
/// `src_bytes` (0 or 16) from `gmem_src`, zeros for the rest (PTX src-size;
/// nothing is read when it is 0). The zeros land with the copy, at
/// cp.async.wait_group.
__device__ __forceinline__ void cp_async_16(void *smem_dst, const void *gmem_src,
                                            u32 src_bytes) {
#ifdef LCEJIT_HOST_EMULATION
  lcejit_emu::cp_async_16(smem_dst, gmem_src, src_bytes);
#else
  const u32 dst = static_cast<u32>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
#endif
}

/// Closes this thread's current group of cp.async copies.
__device__ __forceinline__ void cp_async_commit() {
#ifdef LCEJIT_HOST_EMULATION
  lcejit_emu::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until at most N of this thread's commit groups are pending.
template <int N> __device__ __forceinline__ void cp_async_wait() {
#ifdef LCEJIT_HOST_EMULATION
  lcejit_emu::cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

//===----------------------------------------------------------------------===//
// Global -> shared tile loads. See [Note: tile loads].
//===----------------------------------------------------------------------===//

/// A global operand seen as rows of contiguous elements.
struct TileSource {
  const void *ptr; ///< element (o, i) at ptr[o * ld + i]
  i64 ld;          ///< elements between consecutive rows
  i64 outer_limit; ///< rows o < outer_limit exist
  i64 inner_limit; ///< elements i < inner_limit exist
  bool vec;        ///< 16-byte vector copies allowed
};

template <class Elem>
__device__ __forceinline__ TileSource make_tile_source(const void *ptr, i64 ld,
                                                       i64 outer_limit,
                                                       i64 inner_limit) {
  constexpr int VEC = 16 / Elem::BYTES;
  TileSource s;
  s.ptr = ptr;
  s.ld = ld;
  s.outer_limit = outer_limit;
  s.inner_limit = inner_limit;
  s.vec = ld % VEC == 0 && inner_limit % VEC == 0 &&
          (reinterpret_cast<u64>(ptr) & 15) == 0;
  return s;
}

/// Loads the OUTER x INNER tile at (o0, i0) of `src` into `dst` (swizzled,
/// [Note: swizzle]), zero-filling everything out of bounds. All THREADS
/// threads of the CTA call it.
template <class Elem, int OUTER, int INNER, int THREADS>
__device__ __forceinline__ void
load_tile(typename Elem::raw_t *dst, const TileSource &src, i64 o0, i64 i0) {
  typedef typename Elem::raw_t raw_t;
  constexpr int VEC = 16 / Elem::BYTES;
  constexpr int CHUNKS = INNER / VEC; // 16-byte vectors per row
  static_assert(INNER % VEC == 0, "tile rows are whole 16-byte vectors");
  static_assert(THREADS % CHUNKS == 0, "a row is loaded in one pass");
  constexpr int ROWS_PER_PASS = THREADS / CHUNKS;
  constexpr int PASSES = (OUTER + ROWS_PER_PASS - 1) / ROWS_PER_PASS;
  const int tid = static_cast<int>(threadIdx.x);
  const int c = tid % CHUNKS;  // this thread's chunk in every row it loads
  const int r0 = tid / CHUNKS; // and its first row; then every ROWS_PER_PASS
  const raw_t *g = static_cast<const raw_t *>(src.ptr);
  const i64 gi = i0 + c * VEC;
  // Pass p is in bounds in the outer dimension iff p * ROWS_PER_PASS <
  // rows_left (clamped to int: at most OUTER matters).
  const i64 rows_left_64 = src.outer_limit - (o0 + r0);
  const int rows_left =
      rows_left_64 < OUTER ? static_cast<int>(rows_left_64) : OUTER;
  if (src.vec) {
    const bool inner_ok = gi < src.inner_limit; // the whole vector, or none
    const raw_t *q = g + (o0 + r0) * src.ld + gi;
    const i64 step = static_cast<i64>(ROWS_PER_PASS) * src.ld;
#pragma unroll
    for (int p = 0; p < PASSES; ++p, q += step) {
      const int o = r0 + p * ROWS_PER_PASS;
      if (OUTER % ROWS_PER_PASS != 0 && o >= OUTER)
        break;
      const bool ok = inner_ok && p * ROWS_PER_PASS < rows_left;
      // Out of bounds: src-size 0 (zero fill) from the operand's base.
      cp_async_16(dst + swizzled_index<INNER, Elem::BYTES>(o, c * VEC),
                  ok ? q : g, ok ? 16u : 0u);
    }
  } else {
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
      const int o = r0 + p * ROWS_PER_PASS;
      if (OUTER % ROWS_PER_PASS != 0 && o >= OUTER)
        break;
      const bool row_ok = p * ROWS_PER_PASS < rows_left;
      const i64 go = o0 + o;
      raw_t *d = dst + swizzled_index<INNER, Elem::BYTES>(o, c * VEC);
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        d[e] = (row_ok && gi + e < src.inner_limit) ? g[go * src.ld + gi + e]
                                                    : raw_t(0);
    }
  }
}

//===----------------------------------------------------------------------===//
// The mainloop. See [Note: pipeline] and [Note: accumulator layout].
//===----------------------------------------------------------------------===//

#ifndef lcejit_dynamic_smem // the sm90 host emulation: one array per CTA ([Note: sm90 host emulation])
extern __shared__ __align__(16) unsigned char lcejit_dynamic_smem[];
#endif

template <class Cfg> struct GemmMainloop {
  typedef typename Cfg::ElemA ElemA;
  typedef typename Cfg::ElemB ElemB;
  typedef typename ElemA::raw_t RawA;
  typedef typename ElemB::raw_t RawB;
  static constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK;
  static constexpr int WM = Cfg::WM, WN = Cfg::WN;
  static constexpr bool TC = Cfg::TENSOR_CORES;
  static constexpr int MT = WM / 16, NT = WN / 8; // mma tiles per warp (TC)
  static constexpr int KS = BK / 16;              // k steps per stage (TC)
  static constexpr int NP = NT / 2;         // B .x4 loads per k step (TC)
  static constexpr bool NT_ODD = NT % 2 != 0; // plus one .x2
  static constexpr int SIMT_TM = WM / 8, SIMT_TN = WN / 4; // thread tile (SIMT)
  static constexpr int TR = TC ? 2 * MT : SIMT_TM;         // rows per thread
  static constexpr int TC_COLS = TC ? 2 * NT : SIMT_TN;    // columns per thread
  /// Lane masks that reach the other lanes holding the same rows.
  static constexpr int ROW_LANES = 4;
  static constexpr int A_ROW_BYTES = Cfg::A_INNER * ElemA::BYTES;
  static constexpr int B_ROW_BYTES = Cfg::B_INNER * ElemB::BYTES;
  static constexpr bool A_TRANS = Cfg::MAJOR_A == MN_MAJOR;
  static constexpr bool B_TRANS = Cfg::MAJOR_B == MN_MAJOR;

  float acc[TR][TC_COLS];
  int lane, warp_m, warp_n;

  __device__ __forceinline__ GemmMainloop() {
    const int warp = static_cast<int>(threadIdx.x) >> 5;
    lane = static_cast<int>(threadIdx.x) & 31;
    warp_m = warp / Cfg::WARPS_N;
    warp_n = warp % Cfg::WARPS_N;
  }

  /// Row (local to the CTA tile) of accumulator row i.
  __device__ __forceinline__ int row_of(int i) const {
    if (TC)
      return warp_m * WM + (i >> 1) * 16 + (i & 1) * 8 + (lane >> 2);
    return warp_m * WM + i * 8 + (lane >> 2);
  }
  /// Column (local to the CTA tile) of accumulator column j.
  __device__ __forceinline__ int col_of(int j) const {
    if (TC)
      return warp_n * WN + (j >> 1) * 8 + 2 * (lane & 3) + (j & 1);
    return warp_n * WN + j * 4 + (lane & 3);
  }
  /// True for the one lane of each group of ROW_LANES that writes row results.
  __device__ __forceinline__ bool row_writer() const { return (lane & 3) == 0; }

  __device__ __forceinline__ static RawA *a_tile(unsigned char *smem, int stage,
                                                 int which) {
    return reinterpret_cast<RawA *>(smem + stage * Cfg::STAGE_BYTES +
                                    which * Cfg::A_TILE_BYTES);
  }
  __device__ __forceinline__ static RawB *b_tile(unsigned char *smem,
                                                 int stage) {
    return reinterpret_cast<RawB *>(smem + stage * Cfg::STAGE_BYTES +
                                    Cfg::NUM_A * Cfg::A_TILE_BYTES);
  }

  /// Issues the loads of k tile [k0, k0 + BK) into `stage`.
  __device__ __forceinline__ void load_stage(unsigned char *smem, int stage,
                                             const TileSource (&a)[Cfg::NUM_A],
                                             const TileSource &b, i64 m0,
                                             i64 n0, i64 k0) const {
#pragma unroll
    for (int x = 0; x < Cfg::NUM_A; ++x) {
      if (Cfg::MAJOR_A == K_MAJOR)
        load_tile<ElemA, Cfg::A_OUTER, Cfg::A_INNER, Cfg::THREADS>(
            a_tile(smem, stage, x), a[x], m0, k0);
      else
        load_tile<ElemA, Cfg::A_OUTER, Cfg::A_INNER, Cfg::THREADS>(
            a_tile(smem, stage, x), a[x], k0, m0);
    }
    if (Cfg::MAJOR_B == K_MAJOR)
      load_tile<ElemB, Cfg::B_OUTER, Cfg::B_INNER, Cfg::THREADS>(
          b_tile(smem, stage), b, n0, k0);
    else
      load_tile<ElemB, Cfg::B_OUTER, Cfg::B_INNER, Cfg::THREADS>(
          b_tile(smem, stage), b, k0, n0);
  }

  //===--------------------------------------------------------------------===//
  // Tensor cores: ldmatrix + mma.sync. See [Note: fragment addresses].
  //===--------------------------------------------------------------------===//

  /// Byte offset, in a tile of CHUNKS-chunk rows, of logical chunk `chunk` of
  /// row `row`.
  template <int CHUNKS>
  __device__ __forceinline__ static u32 chunk_offset(int row, int chunk) {
    return static_cast<u32>((row * CHUNKS + swizzle_chunk<CHUNKS>(row, chunk)) *
                            16);
  }

  /// This lane's ldmatrix row offsets (bytes within a tile). K-major: one per
  /// k step (the block adds 16 rows each); MN-major: one per block (the k step
  /// adds 16 rows each).
  struct FragOffsets {
    u32 a[cmax(A_TRANS ? MT : KS, 1)];
    u32 b[cmax(B_TRANS ? NP : KS, 1)];
    u32 b2; ///< MN-major B: the .x2 of a last odd mma tile
  };

  __device__ __forceinline__ FragOffsets frag_offsets() const {
    FragOffsets f;
    const int m_org = warp_m * WM, n_org = warp_n * WN;
    // Lanes 8j .. 8j + 7 address matrix j ([Note: ldmatrix]); the two orders:
    const int r16 = lane & 15, hi = lane >> 4;                 // j = 2 hi + (r16 >> 3)
    const int r8x2 = (lane & 7) + 8 * hi, half = (lane >> 3) & 1; // j = 2 (r8x2 >> 3) + half
    // A (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15).
    if (!A_TRANS) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
        f.a[ks] = chunk_offset<Cfg::A_CHUNKS>(m_org + r16, 2 * ks + hi);
    } else {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        f.a[mt] =
            chunk_offset<Cfg::A_CHUNKS>(r8x2, (m_org + 16 * mt) / 8 + half);
    }
    // B (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15), so
    // that b[nt] is a register pair; the .x2 of a last odd tile uses the first
    // two (lanes 0-15).
    if (!B_TRANS) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
        f.b[ks] = chunk_offset<Cfg::B_CHUNKS>(n_org + r8x2, 2 * ks + half);
      f.b2 = 0;
    } else {
#pragma unroll
      for (int p = 0; p < NP; ++p)
        f.b[p] = chunk_offset<Cfg::B_CHUNKS>(r16, (n_org + 16 * p) / 8 + hi);
      f.b2 = chunk_offset<Cfg::B_CHUNKS>(r16, (n_org + 8 * (NT - 1)) / 8);
    }
    return f;
  }

  /// acc += the k tile held in the stage at `stage` (its shared address).
  __device__ __forceinline__ void compute_stage_tc(smem_addr_t stage,
                                                   const FragOffsets &f) {
    const smem_addr_t sb = stage + Cfg::NUM_A * Cfg::A_TILE_BYTES;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      u32 bf[NT][2];
#pragma unroll
      for (int p = 0; p < NP; ++p) {
        u32 r[4];
        if (!B_TRANS)
          ldmatrix<4, false>(r, (sb + f.b[ks]) + p * 16 * B_ROW_BYTES);
        else
          ldmatrix<4, true>(r, (sb + f.b[p]) + ks * 16 * B_ROW_BYTES);
        bf[2 * p][0] = r[0];
        bf[2 * p][1] = r[1];
        bf[2 * p + 1][0] = r[2];
        bf[2 * p + 1][1] = r[3];
      }
      if (NT_ODD) {
        if (!B_TRANS)
          ldmatrix<2, false>(bf[NT - 1],
                             (sb + f.b[ks]) + (NT - 1) * 8 * B_ROW_BYTES);
        else
          ldmatrix<2, true>(bf[NT - 1], (sb + f.b2) + ks * 16 * B_ROW_BYTES);
      }
#pragma unroll
      for (int x = 0; x < Cfg::NUM_A; ++x) {
        const smem_addr_t sa = stage + x * Cfg::A_TILE_BYTES;
        u32 af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if (!A_TRANS)
            ldmatrix<4, false>(af[mt], (sa + f.a[ks]) + mt * 16 * A_ROW_BYTES);
          else
            ldmatrix<4, true>(af[mt], (sa + f.a[mt]) + ks * 16 * A_ROW_BYTES);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            mma_16816<Cfg::MATH == MATH_TC_BF16>(
                acc[2 * mt][2 * nt], acc[2 * mt][2 * nt + 1],
                acc[2 * mt + 1][2 * nt], acc[2 * mt + 1][2 * nt + 1], af[mt],
                bf[nt]);
      }
    }
  }

  //===--------------------------------------------------------------------===//
  // SIMT f32.
  //===--------------------------------------------------------------------===//

  /// acc += the k tile held in `stage`, f32 FFMA.
  __device__ __forceinline__ void compute_stage_simt(unsigned char *smem,
                                                     int stage) {
    const RawB *sb = b_tile(smem, stage);
#pragma unroll 4
    for (int kk = 0; kk < BK; ++kk) {
      float bv[SIMT_TN];
#pragma unroll
      for (int j = 0; j < SIMT_TN; ++j) {
        const int n = col_of(j);
        bv[j] = ElemB::to_f32(
            Cfg::MAJOR_B == K_MAJOR
                ? sb[swizzled_index<Cfg::B_INNER, ElemB::BYTES>(n, kk)]
                : sb[swizzled_index<Cfg::B_INNER, ElemB::BYTES>(kk, n)]);
      }
#pragma unroll
      for (int x = 0; x < Cfg::NUM_A; ++x) {
        const RawA *sa = a_tile(smem, stage, x);
        float av[SIMT_TM];
#pragma unroll
        for (int i = 0; i < SIMT_TM; ++i) {
          const int m = row_of(i);
          av[i] = ElemA::to_f32(
              Cfg::MAJOR_A == K_MAJOR
                  ? sa[swizzled_index<Cfg::A_INNER, ElemA::BYTES>(m, kk)]
                  : sa[swizzled_index<Cfg::A_INNER, ElemA::BYTES>(kk, m)]);
        }
#pragma unroll
        for (int i = 0; i < SIMT_TM; ++i)
#pragma unroll
          for (int j = 0; j < SIMT_TN; ++j)
            acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    }
  }

  /// acc = A[m0 .. m0 + BM) x B[n0 .. n0 + BN) over k in [0, K). All threads
  /// call it; shared memory is free again when it returns.
  __device__ __forceinline__ void run(unsigned char *smem,
                                      const TileSource (&a)[Cfg::NUM_A],
                                      const TileSource &b, i64 m0, i64 n0,
                                      i64 K) {
#pragma unroll
    for (int i = 0; i < TR; ++i)
#pragma unroll
      for (int j = 0; j < TC_COLS; ++j)
        acc[i][j] = 0.f;
    FragOffsets frag;
    if constexpr (TC)
      frag = frag_offsets();
    const smem_addr_t smem_addr = to_smem_addr(smem);
    const i64 k_tiles = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < Cfg::STAGES - 1; ++s) {
      if (s < k_tiles)
        load_stage(smem, s, a, b, m0, n0, static_cast<i64>(s) * BK);
      cp_async_commit();
    }
    int read_stage = 0, write_stage = Cfg::STAGES - 1;
    for (i64 kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<Cfg::STAGES - 2>();
      __syncthreads();
      const i64 next = kt + Cfg::STAGES - 1;
      if (next < k_tiles)
        load_stage(smem, write_stage, a, b, m0, n0, next * BK);
      cp_async_commit();
      if constexpr (TC)
        compute_stage_tc(smem_addr + static_cast<u32>(read_stage) *
                                         static_cast<u32>(Cfg::STAGE_BYTES),
                         frag);
      else
        compute_stage_simt(smem, read_stage);
      read_stage = read_stage == Cfg::STAGES - 1 ? 0 : read_stage + 1;
      write_stage = write_stage == Cfg::STAGES - 1 ? 0 : write_stage + 1;
    }
    cp_async_wait<0>();
    __syncthreads();
  }
};

} // namespace lcejit
