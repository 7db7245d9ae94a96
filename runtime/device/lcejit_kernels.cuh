//===- lcejit_kernels.cuh - The fixed kernel templates
//---------------------===//
//
// One template per plan::KernelKind (semantics: docs/program.md). The emitter
// (compiler/codegen) generates, per kernel, only what varies: a functor
// evaluating the kernel's ScalarFunc, a GemmConfig typedef, and a thin extern
// "C" __global__ wrapper whose parameters are plan::kernelParams() and whose
// body first checks its launch (launch_ok in lcejit_common.cuh: block size,
// dynamic shared memory and the grid each template below assumes; a violation
// is recorded in the error word and the kernel returns) and then calls one of
// these:
//
//   row_kernel<Fn>                     RowKernel
//   gemm_reduce_kernel<Cfg, Epi>       GemmReduceKernel
//   gemm_dz_kernel<Cfg, FORMAT, Epi>   GemmDzKernel
//   gemm_dlhs_kernel<Cfg, OutElem, ...> GemmDLhsKernel
//   gemm_drhs_kernel<Cfg, OutElem>     GemmDRhsKernel
//   cast_kernel<OutElem>               CastKernel
//   dz_form_kernel<TargetT>            DzFormKernel
//   dz_row_scale_kernel<TargetT>       DzFormKernel (rowScaled)
//   dz_scale_values_kernel             DzFormKernel (rowScaled, scaleValues)
//   target_correction_kernel<A, T>     TargetCorrectionKernel
//   target_groups_kernel<T>            TargetCorrectionKernel (findGroups)
//   target_group_sums_kernel<A, T>     TargetCorrectionKernel (group sums)
//   row_dot_kernel<A, T>               RowDotKernel
//
// What a GEMM epilogue functor Epi provides (generated, see docs/codegen.md):
//   struct Row, struct Col            operand values loaded once per row / per
//   column Row load_row(i64 row)             called only for rows < n Col
//   load_col(i64 col)             called only for columns in range (global
//   index) gemm_reduce: static constexpr int SLOTS; static init(float
//   (&)[SLOTS]);
//     accumulate(float (&)[SLOTS], float acc, i64 row, i64 col, const Row &,
//     const Col &); static combine(float (&)[SLOTS], const float (&)[SLOTS])
//   gemm_dz: float value(float acc, i64 row, i64 col, const Row &, const Col &);
//     static constexpr bool RESIDUAL; i64 residual_target(const Row &) (the
//     row's target column, [Note: the target-column residual])
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit_common.cuh"
#include "lcejit_gemm.cuh"
#include "lcejit_reduce.cuh"

namespace lcejit {

/// A row's target column (i32 or i64 targets; void: none).
template <class T> struct target_of {
  static __device__ __forceinline__ i64 at(const void *p, i64 r) {
    return static_cast<i64>(static_cast<const T *>(p)[r]);
  }
};
template <> struct target_of<void> {
  static __device__ __forceinline__ i64 at(const void *, i64) { return -1; }
};

/// [Note: the target-column residual] (plan/Program.h): what rounding v to bf16
/// takes off it.
__device__ __forceinline__ float bf16_residual(float v) {
  return v - elem_bf16::to_f32(elem_bf16::from_f32(v));
}

/// [Note: target group sums]: the row of block b that leads the group of target v, or -1
/// when head[b][v] names no row of block b with target v (no such group).
template <class TargetT>
__device__ __forceinline__ i64 target_group_leader(const void *head, const void *target,
                                                   i64 b, i64 v, i64 n, i64 cols,
                                                   i64 group_rows) {
  const i64 g = static_cast<const int *>(head)[b * cols + v];
  const i64 lo = b * group_rows;
  const i64 hi = lo + group_rows < n ? lo + group_rows : n;
  return g >= lo && g < hi && target_of<TargetT>::at(target, g) == v ? g : -1;
}

/// dZ storage (plan::DzFormat).
enum {
  DZ_SPLIT_BF16 =
      0,      ///< hi = bf16_rn(dz), lo = bf16_rn(dz - hi): two bf16 arrays
  DZ_F32 = 1, ///< one f32 array
  DZ_BF16 = 2, ///< one bf16 array, bf16_rn(dz) (fast mode)
};

//===----------------------------------------------------------------------===//
// RowKernel: one thread per row; block 256, grid max(1, ceil(n / 256)).
//
// Fn::run(row, valid, scalar_thread) evaluates the function once: with valid =
// row < n it may read row operands and apply the per-row sinks; with
// scalar_thread (block 0, thread 0, also when n == 0) it applies the
// StoreScalar sinks.
//===----------------------------------------------------------------------===//

template <class Fn>
__device__ __forceinline__ void row_kernel(const Fn &fn, i64 n) {
  const i64 row = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool valid = row < n;
  const bool scalar_thread = blockIdx.x == 0 && threadIdx.x == 0;
  if (valid || scalar_thread)
    fn.run(row, valid, scalar_thread);
}

//===----------------------------------------------------------------------===//
// GemmReduceKernel: grid (ceil(n / BM), splits).
//
// acc = A [n, k] * B [cols, k]^T (both K-major). Split s = blockIdx.y owns the
// contiguous column tiles [s * per, min((s + 1) * per, tiles)), per =
// ceil(tiles / splits). Every thread keeps a running partial per accumulator
// row over all its columns of all those tiles; at the end the partials are
// combined across the lanes of a row (shuffles), then across the WARPS_N warps
// of a row (shared memory, in warp order), and written to partials[row][s][0 ..
// SLOTS) for rows < n. An empty range writes empty partials.
//===----------------------------------------------------------------------===//

template <class Cfg, class Epi>
__device__ __forceinline__ void
gemm_reduce_kernel(const Epi &epi, const void *a, const void *b, void *partials,
                   i64 n, i64 cols, i64 k, int splits) {
  typedef GemmMainloop<Cfg> Mainloop;
  constexpr int SLOTS = Epi::SLOTS;
  constexpr int BM = Cfg::BM, BN = Cfg::BN;
  static_assert(Cfg::NUM_A == 1 && Cfg::MAJOR_A == K_MAJOR &&
                    Cfg::MAJOR_B == K_MAJOR,
                "gemm_reduce: A [n, k] and B [cols, k], both K-major");
  static_assert(
      Cfg::WARPS_N * BM * SLOTS * 4 <= Cfg::SMEM_BYTES,
      "gemm_reduce: the cross-warp exchange must fit in shared memory");
  unsigned char *smem = lcejit_dynamic_smem;

  Mainloop ml;
  const i64 m0 = static_cast<i64>(blockIdx.x) * BM;
  const int split = static_cast<int>(blockIdx.y);
  const i64 tiles = (cols + BN - 1) / BN;
  const i64 per = (tiles + splits - 1) / splits;
  const i64 t_begin = min_i64(static_cast<i64>(split) * per, tiles);
  const i64 t_end = min_i64(t_begin + per, tiles);
  const TileSource src_a[1] = {
      make_tile_source<typename Cfg::ElemA>(a, k, n, k)};
  const TileSource src_b = make_tile_source<typename Cfg::ElemB>(b, k, cols, k);

  typename Epi::Row rows[Mainloop::TR];
  float part[Mainloop::TR][SLOTS];
#pragma unroll
  for (int i = 0; i < Mainloop::TR; ++i) {
    const i64 row = m0 + ml.row_of(i);
    rows[i] = row < n ? epi.load_row(row) : typename Epi::Row();
    Epi::init(part[i]);
  }

  for (i64 t = t_begin; t < t_end; ++t) {
    const i64 n0 = t * BN;
    ml.run(smem, src_a, src_b, m0, n0, k);
    typename Epi::Col colv[Mainloop::TC_COLS];
#pragma unroll
    for (int j = 0; j < Mainloop::TC_COLS; ++j) {
      const i64 col = n0 + ml.col_of(j);
      colv[j] = col < cols ? epi.load_col(col) : typename Epi::Col();
    }
#pragma unroll
    for (int i = 0; i < Mainloop::TR; ++i) {
      const i64 row = m0 + ml.row_of(i);
#pragma unroll
      for (int j = 0; j < Mainloop::TC_COLS; ++j) {
        const i64 col = n0 + ml.col_of(j);
        if (col < cols)
          epi.accumulate(part[i], ml.acc[i][j], row, col, rows[i], colv[j]);
      }
    }
  }

  // Lanes holding the same rows.
#pragma unroll
  for (int i = 0; i < Mainloop::TR; ++i) {
#pragma unroll
    for (int mask = 1; mask < Mainloop::ROW_LANES; mask <<= 1) {
      float other[SLOTS];
#pragma unroll
      for (int s = 0; s < SLOTS; ++s)
        other[s] = shfl_xor(part[i][s], mask);
      Epi::combine(part[i], other);
    }
  }

  // Warps holding the same rows: exchange [WARPS_N][BM][SLOTS] in shared memory
  // (free: run() ends with a barrier, and this barrier orders a CTA that ran no
  // tile).
  __syncthreads();
  float *red = reinterpret_cast<float *>(smem);
  if (ml.row_writer()) {
#pragma unroll
    for (int i = 0; i < Mainloop::TR; ++i)
#pragma unroll
      for (int s = 0; s < SLOTS; ++s)
        red[(ml.warp_n * BM + ml.row_of(i)) * SLOTS + s] = part[i][s];
  }
  __syncthreads();
  for (int r = static_cast<int>(threadIdx.x); r < BM; r += Cfg::THREADS) {
    const i64 row = m0 + r;
    if (row >= n)
      break;
    float p[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s)
      p[s] = red[r * SLOTS + s];
#pragma unroll
    for (int w = 1; w < Cfg::WARPS_N; ++w) {
      float q[SLOTS];
#pragma unroll
      for (int s = 0; s < SLOTS; ++s)
        q[s] = red[(w * BM + r) * SLOTS + s];
      Epi::combine(p, q);
    }
    float *out =
        static_cast<float *>(partials) + (row * splits + split) * SLOTS;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s)
      out[s] = p[s];
  }
}

//===----------------------------------------------------------------------===//
// GemmDzKernel: grid (ceil(n / BM), ceil(chunk_cols / BN)).
//
// acc = A [n, k] * B[chunk_begin .. chunk_begin + chunk_cols)^T; dz =
// Epi::value(acc) stored at [row][col - chunk_begin] of the chunk's
// [n][chunk_cols] array(s).
//===----------------------------------------------------------------------===//

template <class Cfg, int FORMAT, class Epi>
__device__ __forceinline__ void
gemm_dz_kernel(const Epi &epi, const void *a, const void *b, void *dz,
               void *dz_lo, void *residual, i64 n, i64 k, i64 chunk_begin,
               i64 chunk_cols) {
  static_assert(!Epi::RESIDUAL || FORMAT == DZ_BF16,
                "gemm_dz: a target-column residual is of a bf16 dZ");
  typedef GemmMainloop<Cfg> Mainloop;
  static_assert(Cfg::NUM_A == 1 && Cfg::MAJOR_A == K_MAJOR &&
                    Cfg::MAJOR_B == K_MAJOR,
                "gemm_dz: A [n, k] and B [cols, k], both K-major");
  static_assert(FORMAT == DZ_SPLIT_BF16 || FORMAT == DZ_F32 || FORMAT == DZ_BF16,
                "dz format");
  unsigned char *smem = lcejit_dynamic_smem;

  Mainloop ml;
  const i64 m0 = static_cast<i64>(blockIdx.x) * Cfg::BM;
  const i64 n0 =
      static_cast<i64>(blockIdx.y) * Cfg::BN; // column within the chunk
  const TileSource src_a[1] = {
      make_tile_source<typename Cfg::ElemA>(a, k, n, k)};
  const TileSource src_b = make_tile_source<typename Cfg::ElemB>(
      offset_elems<typename Cfg::ElemB>(b, chunk_begin * k), k, chunk_cols, k);
  ml.run(smem, src_a, src_b, m0, n0, k);

  typename Epi::Row rows[Mainloop::TR];
#pragma unroll
  for (int i = 0; i < Mainloop::TR; ++i) {
    const i64 row = m0 + ml.row_of(i);
    rows[i] = row < n ? epi.load_row(row) : typename Epi::Row();
  }
  typename Epi::Col colv[Mainloop::TC_COLS];
#pragma unroll
  for (int j = 0; j < Mainloop::TC_COLS; ++j) {
    const i64 c = n0 + ml.col_of(j);
    colv[j] =
        c < chunk_cols ? epi.load_col(chunk_begin + c) : typename Epi::Col();
  }
#pragma unroll
  for (int i = 0; i < Mainloop::TR; ++i) {
    const i64 row = m0 + ml.row_of(i);
    if (row >= n)
      continue;
#pragma unroll
    for (int j = 0; j < Mainloop::TC_COLS; ++j) {
      const i64 c = n0 + ml.col_of(j);
      if (c >= chunk_cols)
        continue;
      const float v =
          epi.value(ml.acc[i][j], row, chunk_begin + c, rows[i], colv[j]);
      const i64 idx = row * chunk_cols + c;
      if (FORMAT == DZ_SPLIT_BF16) {
        const u16 hi = bf16_bits(v);
        const u16 lo = bf16_bits(v - elem_bf16::to_f32(hi));
        static_cast<u16 *>(dz)[idx] = hi;
        static_cast<u16 *>(dz_lo)[idx] = lo;
      } else if (FORMAT == DZ_BF16) {
        static_cast<u16 *>(dz)[idx] = bf16_bits(v);
        if constexpr (Epi::RESIDUAL)
          if (chunk_begin + c == epi.residual_target(rows[i]))
            static_cast<float *>(residual)[row] = bf16_residual(v);
      } else {
        static_cast<float *>(dz)[idx] = v;
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// GemmDLhsKernel: grid (ceil(n / BM), ceil(k / BN)).
//
// out[r][j] (+)= sum_{c < chunk_cols} dz[r][c] * B[chunk_begin + c][j]: A = dZ
// [n][chunk_cols] (K-major, one or two operands), B = rows of [cols][k]
// (N-major). out is OutElem [n][k]: overwritten, or, when `accumulate` (chunks
// after the first; also the first when the call accumulates into an output
// dA, [Note: accumulating outputs]), added to: the old value widened to f32,
// one rounding (a bf16/f16 out comes from a loop of one chunk).
//===----------------------------------------------------------------------===//

template <class Cfg, class OutElem = elem_f32, bool RESIDUAL = false,
          class TargetT = long long>
__device__ __forceinline__ void
gemm_dlhs_kernel(const void *dz, const void *dz_lo, const void *b, void *out,
                 i64 n, i64 k, i64 chunk_begin, i64 chunk_cols,
                 bool accumulate, const void *residual = nullptr,
                 const void *target = nullptr, i64 cols = 0) {
  typedef GemmMainloop<Cfg> Mainloop;
  typedef typename Cfg::ElemA ElemA;
  static_assert(
      Cfg::MAJOR_A == K_MAJOR && Cfg::MAJOR_B == MN_MAJOR,
      "gemm_dlhs: A = dZ [n, chunk] K-major, B = W rows [chunk, k] N-major");
  unsigned char *smem = lcejit_dynamic_smem;

  Mainloop ml;
  const i64 m0 = static_cast<i64>(blockIdx.x) * Cfg::BM;
  const i64 n0 = static_cast<i64>(blockIdx.y) * Cfg::BN;
  TileSource src_a[Cfg::NUM_A];
  src_a[0] = make_tile_source<ElemA>(dz, chunk_cols, n, chunk_cols);
  if constexpr (Cfg::NUM_A == 2)
    src_a[1] = make_tile_source<ElemA>(dz_lo, chunk_cols, n, chunk_cols);
  const TileSource src_b = make_tile_source<typename Cfg::ElemB>(
      offset_elems<typename Cfg::ElemB>(b, chunk_begin * k), k, chunk_cols, k);
  ml.run(smem, src_a, src_b, m0, n0, chunk_cols);

  // [Note: the target-column residual]: the last chunk adds residual[row] *
  // B[t_row][col] to the f32 sum (rows with a target in [0, cols)).
  const bool last = RESIDUAL && chunk_begin + chunk_cols == cols;
#pragma unroll
  for (int i = 0; i < Mainloop::TR; ++i) {
    const i64 row = m0 + ml.row_of(i);
    if (row >= n)
      continue;
    float res = 0.f;
    i64 tr = -1;
    if (last) {
      const i64 tt = target_of<TargetT>::at(target, row);
      if (tt >= 0 && tt < cols) {
        tr = tt;
        res = static_cast<const float *>(residual)[row];
      }
    }
#pragma unroll
    for (int j = 0; j < Mainloop::TC_COLS; ++j) {
      const i64 col = n0 + ml.col_of(j);
      if (col >= k)
        continue;
      const i64 idx = row * k + col;
      float sum = ml.acc[i][j];
      if (tr >= 0)
        sum += res * load_f32<typename Cfg::ElemB>(b, tr * k + col);
      store_f32<OutElem>(out, idx, (accumulate ? load_f32<OutElem>(out, idx) : 0.f) + sum);
    }
  }
}

//===----------------------------------------------------------------------===//
// GemmDRhsKernel: grid (ceil(chunk_cols / BM), ceil(k / BN)).
//
// out[chunk_begin + c][j] = sum_{r < n} dz[r][c] * A[r][j]: A operand = dZ^T
// (element (c, r) at dz[r * chunk_cols + c]: M-major, one or two operands), B
// operand = the forward A [n][k] (N-major), K = n. Written as OutElem, or, when
// `accumulate` (row blocks after the first of an f32 out; any out when the call
// accumulates into it, [Note: accumulating outputs]), added to what out holds:
// old widened to f32, plus the sum, rounded once to OutElem. n == 0 writes zeros
// (or adds nothing). With GROUP_SUMS ([Note: target group sums] in
// plan/Program.h), each element's f32 sum first adds, in block order, the group
// sums sums[g][col] (bf16) of the blocks b whose head names a leader g of target
// chunk_begin + c (target_group_leader).
//===----------------------------------------------------------------------===//

template <class Cfg, class OutElem, bool GROUP_SUMS = false, class TargetT = long long>
__device__ __forceinline__ void
gemm_drhs_kernel(const void *dz, const void *dz_lo, const void *a, void *out,
                 i64 n, i64 k, i64 chunk_begin, i64 chunk_cols, bool accumulate,
                 const void *sums = nullptr, const void *head = nullptr,
                 const void *target = nullptr, i64 cols = 0, i64 group_rows = 1) {
  typedef GemmMainloop<Cfg> Mainloop;
  typedef typename Cfg::ElemA ElemA;
  static_assert(
      Cfg::MAJOR_A == MN_MAJOR && Cfg::MAJOR_B == MN_MAJOR,
      "gemm_drhs: A = dZ^T (M-major), B = the forward A [n, k] (N-major)");
  unsigned char *smem = lcejit_dynamic_smem;

  Mainloop ml;
  const i64 m0 = static_cast<i64>(blockIdx.x) * Cfg::BM; // column of the chunk
  const i64 n0 = static_cast<i64>(blockIdx.y) * Cfg::BN; // column of k
  TileSource src_a[Cfg::NUM_A];
  src_a[0] = make_tile_source<ElemA>(dz, chunk_cols, n, chunk_cols);
  if constexpr (Cfg::NUM_A == 2)
    src_a[1] = make_tile_source<ElemA>(dz_lo, chunk_cols, n, chunk_cols);
  const TileSource src_b = make_tile_source<typename Cfg::ElemB>(a, k, n, k);
  ml.run(smem, src_a, src_b, m0, n0, n);

#pragma unroll
  for (int i = 0; i < Mainloop::TR; ++i) {
    const i64 c = m0 + ml.row_of(i);
    if (c >= chunk_cols)
      continue;
    if constexpr (GROUP_SUMS) {
      const i64 blocks = (n + group_rows - 1) / group_rows;
      for (i64 b = 0; b < blocks; ++b) {
        const i64 g =
            target_group_leader<TargetT>(head, target, b, chunk_begin + c, n, cols, group_rows);
        if (g < 0)
          continue;
#pragma unroll
        for (int j = 0; j < Mainloop::TC_COLS; ++j) {
          const i64 col = n0 + ml.col_of(j);
          if (col < k)
            ml.acc[i][j] += elem_bf16::to_f32(static_cast<const u16 *>(sums)[g * k + col]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < Mainloop::TC_COLS; ++j) {
      const i64 col = n0 + ml.col_of(j);
      if (col >= k)
        continue;
      const i64 idx = (chunk_begin + c) * k + col;
      if (accumulate)
        store_f32<OutElem>(out, idx, load_f32<OutElem>(out, idx) + ml.acc[i][j]);
      else
        store_f32<OutElem>(out, idx, ml.acc[i][j]);
    }
  }
}

//===----------------------------------------------------------------------===//
// CastKernel: block 256, grid-stride over count = n * k elements of f32.
// out[i] = round(in[i]), or, when `accumulate` ([Note: accumulating outputs]),
// round(out[i] + in[i]): the old value widened to f32, one rounding.
//===----------------------------------------------------------------------===//

template <class OutElem>
__device__ __forceinline__ void cast_kernel(const void *in, void *out,
                                            i64 count, bool accumulate) {
  const float *src = static_cast<const float *>(in);
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  if (accumulate) {
    for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < count; i += stride)
      store_f32<OutElem>(out, i, load_f32<OutElem>(out, i) + src[i]);
    return;
  }
  for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += stride)
    store_f32<OutElem>(out, i, src[i]);
}

//===----------------------------------------------------------------------===//
// DzFormKernel ([Note: the materialized backward] in plan/Program.h): dZ from the
// forward's stored fp16 values, in place, 8 columns (16 bytes) per step.
//===----------------------------------------------------------------------===//


template <class TargetT>
__device__ __forceinline__ void
dz_form_kernel(void *dz, const void *tile_max, const void *lse, const void *scale,
               const void *target_dz, const void *target, i64 n, i64 cols,
               int tile_cols, void *residual = nullptr) {
  const i64 vecs = cols / 8;
  const i64 tiles = (cols + tile_cols - 1) / tile_cols;
  const i64 total = n * vecs;
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  const float *tm = static_cast<const float *>(tile_max);
  for (i64 v = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; v < total;
       v += stride) {
    const i64 r = v / vecs;
    const i64 c0 = (v - r * vecs) * 8;
    // One reference per row and tile of the forward (a vector lies in one tile).
    const float s = static_cast<const float *>(scale)[r] *
                    expf(tm[r * tiles + c0 / tile_cols] - static_cast<const float *>(lse)[r]);
    uint4 *p = reinterpret_cast<uint4 *>(static_cast<u16 *>(dz) + r * cols + c0);
    uint4 in = *p;
    u32 w[4] = {in.x, in.y, in.z, in.w};
    const i64 tc = target_of<TargetT>::at(target, r) - c0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float a = elem_f16::to_f32(static_cast<u16>(w[q] & 0xffffu)) * s;
      float b = elem_f16::to_f32(static_cast<u16>(w[q] >> 16)) * s;
      if (tc == 2 * q)
        a = static_cast<const float *>(target_dz)[r];
      if (tc == 2 * q + 1)
        b = static_cast<const float *>(target_dz)[r];
      // [Note: the target-column residual]
      if (residual != nullptr && (tc == 2 * q || tc == 2 * q + 1))
        static_cast<float *>(residual)[r] = bf16_residual(tc == 2 * q ? a : b);
      w[q] = (u32)elem_bf16::from_f32(a) | ((u32)elem_bf16::from_f32(b) << 16);
    }
    *p = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/// Eight bf16 (16 bytes) times s, each rounded to bf16 again.
__device__ __forceinline__ uint4 scale_bf16x8(uint4 in, float s) {
  const u32 w[4] = {in.x, in.y, in.z, in.w};
  u32 o[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float x = elem_bf16::to_f32(static_cast<u16>(w[q] & 0xffffu)) * s;
    const float y = elem_bf16::to_f32(static_cast<u16>(w[q] >> 16)) * s;
    o[q] = (u32)elem_bf16::from_f32(x) | ((u32)elem_bf16::from_f32(y) << 16);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

/// DzFormKernel with rowScaled ([Note: row-scaled stored values] in plan/Program.h): the
/// stored values stay; per row r < n, row_scale[r] = scale[r] * exp(reference - lse[r]),
/// residual[r] = target_dz[r] (the whole target column, for rows whose target lies in
/// [0, cols)) and a_scaled[r][j] = bf16(row_scale[r] * a[r][j]) (bf16 a; a_scaled may be
/// null when no dB reads it). Grid-stride over 8-element vectors of a (k % 8 == 0).
/// With reference_row ([Note: a per-row reference]) the reference is reference_row[r], and
/// recompute[r] = 1 (row scale 1: a filtered dZ GEMM writes the row) where the stored values
/// cannot hold the row: its target in [0, cols) and lse[r] - reference_row[r] not at most
/// `range` (NaN included), or its target outside and scale[r] != 0; else 0 (row scale 0 for
/// a target outside).
template <class TargetT>
__device__ __forceinline__ void
dz_row_scale_kernel(const void *lse, const void *scale, const void *target_dz,
                    const void *target, void *residual, void *row_scale, const void *a,
                    void *a_scaled, i64 n, i64 k, i64 cols, float reference,
                    const void *reference_row, void *recompute, float range,
                    i64 a_col0 = 0, i64 a_ld = 0) {
  // The row's scale and whether it is recomputed; every thread that needs a row's scale
  // computes it (the same bits), none reads another's.
  auto scale_of = [&](i64 r, bool &redo) {
    const float l = static_cast<const float *>(lse)[r];
    const float sc = static_cast<const float *>(scale)[r];
    if (reference_row == nullptr) {
      redo = false;
      return sc * expf(reference - l);
    }
    const float c = static_cast<const float *>(reference_row)[r];
    const i64 t = target_of<TargetT>::at(target, r);
    if (t < 0 || t >= cols) {
      redo = sc != 0.f;
      return redo ? 1.f : 0.f;
    }
    redo = !(l - c <= range);
    return redo ? 1.f : sc * expf(c - l);
  };
  const i64 vecs = k / 8;
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  const i64 first = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  // row_scale null: a_scaled only ([Note: a scaled A in column parts]).
  for (i64 r = first; row_scale != nullptr && r < n; r += stride) {
    bool redo;
    static_cast<float *>(row_scale)[r] = scale_of(r, redo);
    if (recompute != nullptr)
      static_cast<int *>(recompute)[r] = redo ? 1 : 0;
    const i64 t = target_of<TargetT>::at(target, r);
    if (residual != nullptr && t >= 0 && t < cols)
      static_cast<float *>(residual)[r] = static_cast<const float *>(target_dz)[r];
  }
  if (a_scaled == nullptr)
    return;
  // Columns [a_col0, a_col0 + k) of a, rows a_ld wide (0: k).
  const i64 ld = a_ld > 0 ? a_ld : k;
  for (i64 v = first; v < n * vecs; v += stride) {
    const i64 r = v / vecs;
    bool redo;
    const float s = scale_of(r, redo);
    const uint4 in = *reinterpret_cast<const uint4 *>(static_cast<const u16 *>(a) + r * ld +
                                                      a_col0 + (v - r * vecs) * 8);
    reinterpret_cast<uint4 *>(a_scaled)[v] = scale_bf16x8(in, s);
  }
}

/// DzFormKernel with scaleValues ([Note: values scaled in place] in plan/Program.h): the
/// stored values of a block of n rows, multiplied in place by their row's scale:
/// values[r][c] = bf16(row_scale[r] * values[r][c]) for r < n, c < cols, in either layout
/// (stored_at: split < 0 row-major, else slabs of 128 columns). Grid: y = the 128-column
/// group, x strided over rows; 16 threads a row of the group, 8 columns (16 bytes) each,
/// two rows a thread per step (both loads before the stores). cols % 8 == 0.
__device__ __forceinline__ void dz_scale_values_kernel(void *values, const void *row_scale,
                                                       i64 n, i64 cols, i64 split,
                                                       i64 stride, void *slabs2, i64 head) {
  const i64 c0 = static_cast<i64>(blockIdx.y) * 128 + (threadIdx.x & 15) * 8;
  if (c0 >= cols)
    return;
  const float *rs = static_cast<const float *>(row_scale);
  const i64 step = static_cast<i64>(gridDim.x) * 32;
  for (i64 r = static_cast<i64>(blockIdx.x) * 32 + (threadIdx.x >> 4); r < n; r += step) {
    const i64 r2 = r + 16;
    uint4 *p = reinterpret_cast<uint4 *>(stored_at(values, slabs2, split, stride, head, n, cols, r, c0));
    uint4 *p2 = r2 < n ? reinterpret_cast<uint4 *>(
                             stored_at(values, slabs2, split, stride, head, n, cols, r2, c0))
                       : nullptr;
    const uint4 a = *p;
    const float sa = rs[r];
    uint4 b = make_uint4(0, 0, 0, 0);
    float sb = 0.f;
    if (p2) {
      b = *p2;
      sb = rs[r2];
    }
    *p = scale_bf16x8(a, sa);
    if (p2)
      *p2 = scale_bf16x8(b, sb);
  }
}

//===----------------------------------------------------------------------===//
// TargetCorrectionKernel ([Note: the target-column residual] in
// plan/Program.h): out[t][j] += sum over the rows r < n with target t, in row
// order, of residual[r] * a[r][j], for 0 <= t < cols; f32 out. Block 256, one
// warp per row (grid-stride); the warp of a group's first row (its leader)
// owns the group: it gathers the members by ballots over the targets, in row
// order (up to 64 kept in registers, two per lane; a larger group is scanned
// again per column chunk), and adds each column's sum once. No float atomics:
// the result does not depend on scheduling. With `groups` ([Note: a group's
// first and last rows]) the leader and the group's last row are read, not
// scanned for, and a group of one row is added without any scan.
//===----------------------------------------------------------------------===//

/// [Note: 16-byte rows] Rows of 2-byte elements whose length is a multiple of 8 and whose
/// base is 16-byte aligned are read 8 elements (one uint4) a lane at a time: the per-row
/// kernels below (one warp a row) were bound by their 2-byte loads' round trips (a row
/// of 4096 in 128 loads a lane; Llama-3's 8192 target logits took 0.19 ms). Elements
/// are widened exactly as load_f32 does.
template <class Elem>
__device__ __forceinline__ bool rows16(const void *p, i64 k) {
  return Elem::BYTES == 2 && k % 8 == 0 && (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}
template <class Elem>
__device__ __forceinline__ float elem_of(const uint4 &v, int e) {
  const unsigned w = e < 4 ? (e < 2 ? v.x : v.y) : (e < 6 ? v.z : v.w);
  return Elem::to_f32(static_cast<typename Elem::raw_t>(e % 2 ? w >> 16 : w & 0xFFFFu));
}

/// The group of row r among the rows [lo, hi) that share its target t, r in [lo, hi):
/// returns false, having done nothing else, when an earlier row of [lo, r) has target t
/// (r is not the group's leader); otherwise calls sink(j0, acc) for each chunk of 32 * CH
/// columns from j0, acc[c] = the f32 sum, over the members m in row order, of
/// residual[m] * a[m][j0 + 32 c + lane] (0 for columns >= k), and returns true. One warp:
/// every lane must call it with the same r.
template <class AElem, class TargetT, int CH, class Sink>
__device__ __forceinline__ bool target_group(const float *res, const void *target,
                                             const void *a, i64 r, i64 t, i64 lo, i64 hi,
                                             i64 k, int lane, Sink &&sink,
                                             bool wide = false) {
  constexpr int U = 8; // targets per lane per vote round
  // The leader is the group's first row. Each lane loads U targets before the
  // warp votes, so a scan of R rows waits on R / (32 U) round trips, not R / 32.
  bool earlier = false;
  for (i64 b = lo; b < r && !earlier; b += 32 * U) {
    bool hit = false;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const i64 q = b + 32 * u + lane;
      hit = hit || (q < r && target_of<TargetT>::at(target, q) == t);
    }
    earlier = __any_sync(0xffffffffu, hit);
  }
  if (earlier)
    return false;
  // The members, in row order: member i is kept by lane i % 32 (slot i / 32).
  int count = 0;
  long long kept0 = 0, kept1 = 0;
  for (i64 b = r; b < hi; b += 32 * U) {
    bool is[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const i64 q = b + 32 * u + lane;
      is[u] = q < hi && target_of<TargetT>::at(target, q) == t;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      unsigned mask = __ballot_sync(0xffffffffu, is[u]);
      while (mask) {
        const int bit = __ffs(static_cast<int>(mask)) - 1;
        mask &= mask - 1;
        if (count % 32 == lane) {
          if (count < 32)
            kept0 = b + 32 * u + bit;
          else if (count < 64)
            kept1 = b + 32 * u + bit;
        }
        ++count;
      }
    }
  }
  for (i64 j0 = 0; j0 < k; j0 += 32 * CH) {
    float acc[CH];
#pragma unroll
    for (int c = 0; c < CH; ++c)
      acc[c] = 0.f;
    auto add = [&](i64 m) {
      const float rm = res[m];
      if (wide) {
        // [Note: 16-byte rows]: lane l's CH = 8 columns are j0 + 8 l .. + 7 (one uint4).
        const i64 j = j0 + 8 * lane;
        if (j < k) {
          const uint4 v = *reinterpret_cast<const uint4 *>(static_cast<const char *>(a) +
                                                            (m * k + j) * AElem::BYTES);
#pragma unroll
          for (int c = 0; c < CH; ++c)
            acc[c] += rm * elem_of<AElem>(v, c);
        }
        return;
      }
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const i64 j = j0 + 32 * c + lane;
        if (j < k)
          acc[c] += rm * load_f32<AElem>(a, m * k + j);
      }
    };
    if (count <= 64) {
      for (int i = 0; i < count; ++i)
        add(__shfl_sync(0xffffffffu, i < 32 ? kept0 : kept1, i % 32));
    } else {
      for (i64 b = r; b < hi; b += 32) {
        const i64 q = b + lane;
        unsigned mask =
            __ballot_sync(0xffffffffu, q < hi && target_of<TargetT>::at(target, q) == t);
        while (mask) {
          const int bit = __ffs(static_cast<int>(mask)) - 1;
          mask &= mask - 1;
          add(b + bit);
        }
      }
    }
    sink(j0, acc);
  }
  return true;
}

/// [Note: a group's first and last rows] (plan/Program.h): whether a launch of n rows
/// uses `groups` (each row as 31 bits: ~r is never 0, r + 1 does not wrap).
__device__ __forceinline__ bool groups_usable(const void *groups, i64 n) {
  return groups != nullptr && n < 0x7FFFFFFFll;
}

/// TargetCorrectionKernel with findGroups: for rows r < n with 0 <= t < cols,
/// groups[t] = max(groups[t], ~r) and groups[cols + t] = max(groups[cols + t], r + 1).
/// Block 256, one thread per row (grid-stride).
template <class TargetT>
__device__ __forceinline__ void target_groups_kernel(const void *target, void *groups, i64 n,
                                                     i64 cols) {
  if (!groups_usable(groups, n))
    return;
  u32 *g = static_cast<u32 *>(groups);
  for (i64 r = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 t = target_of<TargetT>::at(target, r);
    if (t < 0 || t >= cols)
      continue;
    atomicMax(g + t, ~static_cast<u32>(r));
    atomicMax(g + cols + t, static_cast<u32>(r) + 1u);
  }
}

/// out_t[j] += rm * a[m][j] for j < k, each as target_group's sink adds a group of the one
/// row m (acc = 0, acc += rm * a, out += acc: the same bits). One warp; wide as there,
/// four vectors a lane in flight before the adds.
template <class AElem>
__device__ __forceinline__ void add_one_row(float *o_t, const void *a, i64 m, float rm, i64 k,
                                            int lane, bool wide) {
  if (wide) {
    constexpr int U = 4;
    const uint4 *pa =
        reinterpret_cast<const uint4 *>(static_cast<const char *>(a) + m * k * AElem::BYTES);
    float4 *po = reinterpret_cast<float4 *>(o_t);
    const i64 vecs = k / 8;
    for (i64 v0 = lane; v0 < vecs; v0 += 32 * U) {
      uint4 x[U];
      float4 lo[U], hi[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const i64 v = v0 + 32 * u;
        if (v < vecs) {
          x[u] = pa[v];
          lo[u] = po[2 * v];
          hi[u] = po[2 * v + 1];
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const i64 v = v0 + 32 * u;
        if (v >= vecs)
          continue;
        float acc[8];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          acc[c] = 0.f;
          acc[c] += rm * elem_of<AElem>(x[u], c);
        }
        lo[u].x += acc[0];
        lo[u].y += acc[1];
        lo[u].z += acc[2];
        lo[u].w += acc[3];
        hi[u].x += acc[4];
        hi[u].y += acc[5];
        hi[u].z += acc[6];
        hi[u].w += acc[7];
        po[2 * v] = lo[u];
        po[2 * v + 1] = hi[u];
      }
    }
    return;
  }
#pragma unroll 4
  for (i64 j = lane; j < k; j += 32) {
    float acc = 0.f;
    acc += rm * load_f32<AElem>(a, m * k + j);
    o_t[j] += acc;
  }
}

template <class AElem, class TargetT>
__device__ __forceinline__ void
target_correction_kernel(const void *residual, const void *target, const void *a,
                         void *out, void *groups, i64 n, i64 k, i64 cols) {
  constexpr int CH = 8; // columns per lane per chunk: 256 per chunk
  const int lane = static_cast<int>(threadIdx.x % 32);
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
  const float *res = static_cast<const float *>(residual);
  float *o = static_cast<float *>(out);
  // [Note: 16-byte rows]: a's rows 8 columns a lane, out's (f32, k % 8 == 0, 16-byte
  // aligned) as two float4; each column's sum is the same either way.
  const bool wide =
      rows16<AElem>(a, k) && (reinterpret_cast<unsigned long long>(out) & 15) == 0;
  const bool grouped = groups_usable(groups, n);
  u32 *g = static_cast<u32 *>(groups);
  for (i64 r = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < n;
       r += warps) {
    const i64 t = target_of<TargetT>::at(target, r);
    if (t < 0 || t >= cols)
      continue; // the same for the whole warp
    i64 lo = 0, hi = n;
    if (grouped) {
      // [Note: a group's first and last rows]: lane 0 reads the words and, for the
      // leader, clears them; -1: another row leads.
      i64 end = -1;
      if (lane == 0 && ~g[t] == static_cast<u32>(r)) {
        end = static_cast<i64>(g[cols + t]);
        g[t] = 0u;
        g[cols + t] = 0u;
      }
      end = __shfl_sync(0xffffffffu, end, 0);
      if (end < 0)
        continue;
      lo = r;
      hi = end > r + 1 ? (end < n ? end : n) : r + 1;
      if (hi == r + 1) {
        add_one_row<AElem>(o + t * k, a, r, res[r], k, lane, wide);
        continue;
      }
    }
    target_group<AElem, TargetT, CH>(
        res, target, a, r, t, lo, hi, k, lane,
        [&](i64 j0, const float (&acc)[CH]) {
          if (wide) {
            const i64 j = j0 + 8 * lane;
            if (j < k) {
              float4 *q = reinterpret_cast<float4 *>(o + t * k + j);
              float4 lo = q[0], hi = q[1];
              lo.x += acc[0];
              lo.y += acc[1];
              lo.z += acc[2];
              lo.w += acc[3];
              hi.x += acc[4];
              hi.y += acc[5];
              hi.z += acc[6];
              hi.w += acc[7];
              q[0] = lo;
              q[1] = hi;
            }
            return;
          }
#pragma unroll
          for (int c = 0; c < CH; ++c) {
            const i64 j = j0 + 32 * c + lane;
            if (j < k)
              o[t * k + j] += acc[c];
          }
        },
        wide);
  }
}

//===----------------------------------------------------------------------===//
// TargetCorrectionKernel with group sums ([Note: target group sums] in
// plan/Program.h): for each row r < n whose target t lies in [chunk_begin,
// chunk_begin + chunk_cols) and [0, cols), in the block of group_rows rows that
// holds r, the group of the block's rows with target t: its leader g (first
// row) writes sums[g][j] = bf16(sum over the group in row order of residual[r] *
// a[r][j]) and head[g / group_rows][t] = g. Block 256, one warp per row
// (grid-stride); no atomics.
//===----------------------------------------------------------------------===//

template <class AElem, class TargetT>
__device__ __forceinline__ void
target_group_sums_kernel(const void *residual, const void *target, const void *a, void *sums,
                         void *head, i64 n, i64 k, i64 cols, i64 chunk_begin, i64 chunk_cols,
                         i64 group_rows) {
  constexpr int CH = 8;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
  const float *res = static_cast<const float *>(residual);
  u16 *o = static_cast<u16 *>(sums);
  for (i64 r = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < n;
       r += warps) {
    const i64 t = target_of<TargetT>::at(target, r);
    if (t < 0 || t >= cols || t < chunk_begin || t >= chunk_begin + chunk_cols)
      continue; // the same for the whole warp
    const i64 blk = r / group_rows;
    const i64 lo = blk * group_rows;
    const i64 hi = lo + group_rows < n ? lo + group_rows : n;
    const bool leader = target_group<AElem, TargetT, CH>(
        res, target, a, r, t, lo, hi, k, lane, [&](i64 j0, const float (&acc)[CH]) {
#pragma unroll
          for (int c = 0; c < CH; ++c) {
            const i64 j = j0 + 32 * c + lane;
            if (j < k)
              o[r * k + j] = elem_bf16::from_f32(acc[c]);
          }
        });
    if (leader && lane == 0)
      static_cast<int *>(head)[blk * cols + t] = static_cast<int>(r);
  }
}


//===----------------------------------------------------------------------===//
// RowDotKernel ([Note: the exact target logit] in plan/Program.h): out[r] =
// f32(sum over j < k of f64(a[r][j]) * f64(b[t_r][j])) for the rows r < n with
// 0 <= t_r < cols, 0 for the others. Block 256, one warp per row (grid-stride):
// each lane sums its columns in f64 (a product of two bf16 or f16 values is exact
// there), then the warp adds the lanes' sums by a fixed butterfly, so the result
// does not depend on scheduling.
//===----------------------------------------------------------------------===//

template <class AElem, class TargetT>
__device__ __forceinline__ void row_dot_kernel(const void *a, const void *b, const void *target,
                                               void *out, i64 n, i64 k, i64 cols) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
  float *o = static_cast<float *>(out);
  const bool wide = rows16<AElem>(a, k) && rows16<AElem>(b, k);
  for (i64 r = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < n;
       r += warps) {
    const i64 t = target_of<TargetT>::at(target, r);
    double s = 0.0;
    if (t >= 0 && t < cols && wide) { // the same for the whole warp
      // [Note: 16-byte rows]: lane l takes elements 8 (l + 32 i) .. + 7; four vectors of
      // each row in flight before the sums.
      const uint4 *pa = reinterpret_cast<const uint4 *>(static_cast<const char *>(a) +
                                                        r * k * AElem::BYTES);
      const uint4 *pb = reinterpret_cast<const uint4 *>(static_cast<const char *>(b) +
                                                        t * k * AElem::BYTES);
      const i64 vecs = k / 8;
      for (i64 v0 = lane; v0 < vecs; v0 += 32 * 4) {
        uint4 x[4], y[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const i64 v = v0 + 32 * u;
          x[u] = v < vecs ? pa[v] : make_uint4(0, 0, 0, 0);
          y[u] = v < vecs ? pb[v] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int e = 0; e < 8; ++e)
            s += static_cast<double>(elem_of<AElem>(x[u], e)) *
                 static_cast<double>(elem_of<AElem>(y[u], e));
      }
    } else if (t >= 0 && t < cols) {
#pragma unroll 4
      for (i64 j = lane; j < k; j += 32)
        s += static_cast<double>(load_f32<AElem>(a, r * k + j)) *
             static_cast<double>(load_f32<AElem>(b, t * k + j));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0)
      o[r] = static_cast<float>(s);
  }
}

} // namespace lcejit
