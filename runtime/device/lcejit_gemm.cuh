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
// where an operand tile is stored as in global memory: K-major [BM][BK + 8],
// MN-major [BK][BM + 8] (8 elements of padding per row). Every tile is given
// the larger of the two sizes, and after the stages comes a scratch area of BM
// * WARPS_N * 16 bytes: exactly plan::gemmSharedBytes() of
// compiler/plan/Program.cpp, which the executor launches with. Kernels check
// %dynamic_smem_size against GemmConfig::SMEM_BYTES and trap if it is smaller.
// After the mainloop all of it is free; the GemmReduce epilogue reuses it for
// its cross-warp exchange.
//
// [Note: tile loads] A tile is OUTER rows of INNER contiguous elements, element
// (o, i) at global ptr[(o0 + o) * ld + i0 + i], valid when o0 + o < outer_limit
// and i0 + i < inner_limit; everything else is zero-filled (both operands, so a
// tail in k multiplies 0 by 0, never by stale shared memory). When the source
// allows it (ld, inner_limit and the base pointer all multiples of 16 bytes) a
// thread moves 16-byte vectors with cp.async (a vector is then either entirely
// in bounds or entirely out, because every tile origin i0 is a multiple of 8
// elements); otherwise it falls back to element loads and shared stores. Both
// kinds of writes happen after the barrier that frees the stage and before the
// barrier that publishes it, so they mix safely.
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

/// Padding, in elements, at the end of every shared-memory tile row.
constexpr int SMEM_PAD = 8;

__host__ __device__ constexpr int cmax(int a, int b) { return a > b ? a : b; }

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

  // Shared-memory tiles: OUTER rows of INNER contiguous elements, row stride
  // LD.
  static constexpr int A_OUTER = MAJOR_A == K_MAJOR ? BM : BK;
  static constexpr int A_INNER = MAJOR_A == K_MAJOR ? BK : BM;
  static constexpr int A_LD = A_INNER + SMEM_PAD;
  static constexpr int B_OUTER = MAJOR_B == K_MAJOR ? BN : BK;
  static constexpr int B_INNER = MAJOR_B == K_MAJOR ? BK : BN;
  static constexpr int B_LD = B_INNER + SMEM_PAD;
  static constexpr int A_TILE_BYTES =
      cmax(BM * (BK + SMEM_PAD), BK *(BM + SMEM_PAD)) * ElemA::BYTES;
  static constexpr int B_TILE_BYTES =
      cmax(BN * (BK + SMEM_PAD), BK *(BN + SMEM_PAD)) * ElemB::BYTES;
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
  static_assert(A_TILE_BYTES % 16 == 0 && B_TILE_BYTES % 16 == 0,
                "16-byte aligned tiles");
  static_assert((A_LD * ElemA::BYTES) % 16 == 0 &&
                    (B_LD * ElemB::BYTES) % 16 == 0,
                "16-byte aligned tile rows (cp.async destinations)");
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

/// Copies 16 bytes global -> shared asynchronously (L2 only, .cg).
__device__ __forceinline__ void cp_async_16(void *smem_dst,
                                            const void *gmem_src) {
#ifdef LCEJIT_HOST_EMULATION
  lcejit_emu::cp_async_16(smem_dst, gmem_src);
#else
  const u32 dst = static_cast<u32>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
               "l"(gmem_src)
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

/// Loads the OUTER x INNER tile at (o0, i0) of `src` into `dst` ([OUTER][INNER
/// + PAD]), zero-filling everything out of bounds. All THREADS threads of the
/// CTA call it.
template <class Elem, int OUTER, int INNER, int THREADS>
__device__ __forceinline__ void
load_tile(typename Elem::raw_t *dst, const TileSource &src, i64 o0, i64 i0) {
  typedef typename Elem::raw_t raw_t;
  constexpr int VEC = 16 / Elem::BYTES;
  constexpr int LD = INNER + SMEM_PAD;
  constexpr int VECS_PER_ROW = INNER / VEC;
  constexpr int TOTAL = OUTER * VECS_PER_ROW;
  constexpr int ITERS = (TOTAL + THREADS - 1) / THREADS;
  static_assert(INNER % VEC == 0, "tile rows are whole 16-byte vectors");
  const raw_t *g = static_cast<const raw_t *>(src.ptr);
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int v = it * THREADS + static_cast<int>(threadIdx.x);
    if (TOTAL % THREADS != 0 && v >= TOTAL)
      break;
    const int o = v / VECS_PER_ROW;
    const int i = (v % VECS_PER_ROW) * VEC;
    const i64 go = o0 + o, gi = i0 + i;
    raw_t *d = dst + o * LD + i;
    if (src.vec) {
      if (go < src.outer_limit && gi < src.inner_limit)
        cp_async_16(d, g + go * src.ld + gi);
      else
        *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
    } else {
      const bool row_ok = go < src.outer_limit;
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

extern __shared__ __align__(16) unsigned char lcejit_dynamic_smem[];

template <class Cfg> struct GemmMainloop {
  typedef typename Cfg::ElemA ElemA;
  typedef typename Cfg::ElemB ElemB;
  typedef typename ElemA::raw_t RawA;
  typedef typename ElemB::raw_t RawB;
  static constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK;
  static constexpr int WM = Cfg::WM, WN = Cfg::WN;
  static constexpr bool TC = Cfg::TENSOR_CORES;
  static constexpr int MT = WM / 16, NT = WN / 8; // mma tiles per warp (TC)
  static constexpr int SIMT_TM = WM / 8, SIMT_TN = WN / 4; // thread tile (SIMT)
  static constexpr int TR = TC ? 2 * MT : SIMT_TM;         // rows per thread
  static constexpr int TC_COLS = TC ? 2 * NT : SIMT_TN;    // columns per thread
  /// Lane masks that reach the other lanes holding the same rows.
  static constexpr int ROW_LANES = 4;

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

  /// acc += the k tile held in `stage`, tensor cores.
  __device__ __forceinline__ void compute_stage_tc(unsigned char *smem,
                                                   int stage) {
    const RawB *sb = b_tile(smem, stage);
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      u32 bf[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int n = warp_n * WN + nt * 8;
        if (Cfg::MAJOR_B == K_MAJOR)
          load_b_frag_kmajor(bf[nt], sb, Cfg::B_LD, n, kk, lane);
        else
          load_b_frag_nmajor(bf[nt], sb, Cfg::B_LD, n, kk, lane);
      }
#pragma unroll
      for (int x = 0; x < Cfg::NUM_A; ++x) {
        const RawA *sa = a_tile(smem, stage, x);
        u32 af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int m = warp_m * WM + mt * 16;
          if (Cfg::MAJOR_A == K_MAJOR)
            load_a_frag_kmajor(af[mt], sa, Cfg::A_LD, m, kk, lane);
          else
            load_a_frag_mmajor(af[mt], sa, Cfg::A_LD, m, kk, lane);
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
        bv[j] = ElemB::to_f32(Cfg::MAJOR_B == K_MAJOR ? sb[n * Cfg::B_LD + kk]
                                                      : sb[kk * Cfg::B_LD + n]);
      }
#pragma unroll
      for (int x = 0; x < Cfg::NUM_A; ++x) {
        const RawA *sa = a_tile(smem, stage, x);
        float av[SIMT_TM];
#pragma unroll
        for (int i = 0; i < SIMT_TM; ++i) {
          const int m = row_of(i);
          av[i] =
              ElemA::to_f32(Cfg::MAJOR_A == K_MAJOR ? sa[m * Cfg::A_LD + kk]
                                                    : sa[kk * Cfg::A_LD + m]);
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
    const i64 k_tiles = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < Cfg::STAGES - 1; ++s) {
      if (s < k_tiles)
        load_stage(smem, s, a, b, m0, n0, static_cast<i64>(s) * BK);
      cp_async_commit();
    }
    for (i64 kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<Cfg::STAGES - 2>();
      __syncthreads();
      const i64 next = kt + Cfg::STAGES - 1;
      if (next < k_tiles)
        load_stage(smem, static_cast<int>(next % Cfg::STAGES), a, b, m0, n0,
                   next * BK);
      cp_async_commit();
      if constexpr (TC)
        compute_stage_tc(smem, static_cast<int>(kt % Cfg::STAGES));
      else
        compute_stage_simt(smem, static_cast<int>(kt % Cfg::STAGES));
    }
    cp_async_wait<0>();
    __syncthreads();
  }
};

} // namespace lcejit
