//===- lcejit_common.cuh - Types, conversions, small numeric helpers
//-------===//
//
// Part of the device helpers of lcejit (runtime/device/*.cuh). These are real
// headers: each one compiles on its own with nvcc (tests/unit/codegen), and the
// emitter prepends their text, in include order and with the `#include
// "lcejit_*.cuh"` lines removed, to every generated CUDA module
// (docs/codegen.md). They include nothing of the system, not even <cuda_bf16.h>
// and <cuda_fp16.h> ([Note: no system headers] below), no CCCL, no <cstdint>. Keep
// this file ASCII (it is embedded as a C++ raw string).
//
// LCEJIT_HOST_EMULATION: the codegen unit tests run generated modules on the
// host (tests/unit/codegen/emu/lcejit_emu.h, [Note: host emulation]). The only
// code that differs there is inline PTX: %dynamic_smem_size here, mma.sync and
// ldmatrix (and the shared-window address ldmatrix takes) in lcejit_mma.cuh and
// cp.async in lcejit_gemm.cuh call lcejit_emu:: instead; with LCEJIT_EMU_SM90 too,
// every PTX wrapper of lcejit_sm90.cuh ([Note: sm90 host emulation]). NVRTC never
// defines either.
//
//===----------------------------------------------------------------------===//
#pragma once

namespace lcejit {

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

//===----------------------------------------------------------------------===//
// [Note: no system headers] bf16 and f16 conversions, one cvt each (what <cuda_bf16.h>
// and <cuda_fp16.h> compile to on sm_80 and later, to the bit). Parsing those two
// headers took 0.41 s of every NVRTC compile (nvcc --time, CUDA 13.0: cicc 0.41 s for
// an empty kernel that includes them, 0.45 s for the whole prelude), on the path of a
// bucket's first call, whose modules compile in parallel and wait for the slowest. The
// host emulation of the codegen tests (lcejit_emu.h) takes the headers' own functions.
//===----------------------------------------------------------------------===//

#if defined(LCEJIT_HOST_EMULATION)
__device__ __forceinline__ u16 bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ u16 f16_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ float f16_to_f32(u16 b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ u32 bf16x2_bits(float lo, float hi) {
  return u32(bf16_bits(lo)) | (u32(bf16_bits(hi)) << 16);
}
__device__ __forceinline__ u32 f16x2_bits(float lo, float hi) {
  return u32(f16_bits(lo)) | (u32(f16_bits(hi)) << 16);
}
#else
/// x rounded to the nearest bf16 (ties to even), as bits.
__device__ __forceinline__ u16 bf16_bits(float x) {
  u16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}
/// x rounded to the nearest f16 (ties to even), as bits.
__device__ __forceinline__ u16 f16_bits(float x) {
  u16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}
/// The f16 with bits b, exactly.
__device__ __forceinline__ float f16_to_f32(u16 b) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
  return f;
}
/// Two bf16 in one word, `lo` in the low half (one cvt.rn.bf16x2.f32).
__device__ __forceinline__ u32 bf16x2_bits(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/// Two f16 in one word, `lo` in the low half (one cvt.rn.f16x2.f32).
__device__ __forceinline__ u32 f16x2_bits(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif

//===----------------------------------------------------------------------===//
// Float helpers. Floats are computed in f32 with IEEE semantics (no fast-math).
//===----------------------------------------------------------------------===//

__device__ __forceinline__ float f32_inf() {
  return __int_as_float(0x7f800000);
}
__device__ __forceinline__ float f32_nan() {
  return __int_as_float(0x7fffffff);
}
__device__ __forceinline__ bool is_nan(float x) { return x != x; }

/// max/min that propagate NaN: max_nan(NaN, x) = max_nan(x, NaN) = NaN.
/// (fmaxf/fminf return the other operand instead, which would hide a NaN.)
__device__ __forceinline__ float max_nan(float a, float b) {
  return (a > b || a != a) ? a : b;
}
__device__ __forceinline__ float min_nan(float a, float b) {
  return (a < b || a != a) ? a : b;
}

/// 2^x on the MUFU unit (relative error about 2^-22; results below 2^-126
/// flush to 0).
__device__ __forceinline__ float exp2_approx(float x) {
#ifdef LCEJIT_HOST_EMULATION
  const float y = std::exp2(x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.f : y;
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// exp(v - base) for many v against one base, as 2^(v log2 e - base log2 e): one FFMA
/// and one ex2 per value (the GEMM epilogues' logsumexp and stored values).
struct ExpFrom {
  float neg_base_log2e;
  __device__ __forceinline__ explicit ExpFrom(float base)
      : neg_base_log2e(-base * 1.4426950408889634f) {}
  __device__ __forceinline__ float operator()(float v) const {
    return exp2_approx(fmaf(v, 1.4426950408889634f, neg_base_log2e));
  }
};

/// [Note: f32 tanh] The scalar IR's f32 Tanh: tanh|x| = (1 - e) / (1 + e) with
/// e = exp(-2|x|) in (0, 1] (one ex2 and one rcp on the MUFU unit, no overflow), the
/// sign put back: 7 instructions where libdevice's tanhf takes 16 (the same ex2/rcp
/// form for |x| >= 0.6 plus a polynomial for smaller |x| and a select). Bounds, checked
/// on 1.4 M inputs by DeviceMathGpu.TanhF32StaysWithinItsBoundsOverTheWholeRange:
/// absolute error below 4e-7 (measured 1.3e-7 on the H200, tanhf 9.8e-8) and relative
/// error below 2^-20 where |tanh x| >= 0.5 (measured 2.3e-7); for small |x| only the
/// absolute bound holds. A softcap c * tanh(z / c) is therefore off by at most c * 4e-7 in
/// absolute terms (1.2e-5 at c = 30, against bf16's 2^-9 relative rounding of the
/// logits). Saturates exactly: tanh(+-inf) = tanh(+-88) = +-1; tanh(+-0) = +-0,
/// tanh(NaN) = NaN. The forward's softcap paid tanhf on every logit: Gemma-2's forward
/// 17.6 -> 16.2 ms with this and one FFMA per exp (docs/hopper.md, session 18).
__device__ __forceinline__ float tanh_f32(float x) {
  const float e = exp2_approx(fabsf(x) * -2.8853900817779268f);
#ifdef LCEJIT_HOST_EMULATION
  const float r = (1.f - e) / (1.f + e);
#else
  const float r = __fdividef(1.f - e, 1.f + e);
#endif
  return copysignf(r, x);
}

__device__ __forceinline__ i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }

/// Integer arithmetic of the scalar IR wraps (two's complement): do it
/// unsigned.
__device__ __forceinline__ i64 wrap_add(i64 a, i64 b) {
  return (i64)((u64)a + (u64)b);
}
__device__ __forceinline__ i64 wrap_sub(i64 a, i64 b) {
  return (i64)((u64)a - (u64)b);
}
__device__ __forceinline__ i64 wrap_mul(i64 a, i64 b) {
  return (i64)((u64)a * (u64)b);
}
__device__ __forceinline__ int wrap_add(int a, int b) {
  return (int)((u32)a + (u32)b);
}
__device__ __forceinline__ int wrap_sub(int a, int b) {
  return (int)((u32)a - (u32)b);
}
__device__ __forceinline__ int wrap_mul(int a, int b) {
  return (int)((u32)a * (u32)b);
}

//===----------------------------------------------------------------------===//
// Element types of GEMM operands and outputs.
//
// A tag names a storage type: raw_t is its bit pattern (what tile loaders copy
// and what shared memory holds), to_f32 widens exactly, from_f32 rounds to
// nearest even.
//===----------------------------------------------------------------------===//

struct elem_bf16 {
  typedef u16 raw_t;
  static constexpr int BYTES = 2;
  static __device__ __forceinline__ float to_f32(raw_t r) {
    return __uint_as_float(((u32)r)
                           << 16); // bf16 is the top half of an f32: exact
  }
  static __device__ __forceinline__ raw_t from_f32(float x) { return bf16_bits(x); }
};

struct elem_f16 {
  typedef u16 raw_t;
  static constexpr int BYTES = 2;
  static __device__ __forceinline__ float to_f32(raw_t r) { return f16_to_f32(r); }
  static __device__ __forceinline__ raw_t from_f32(float x) { return f16_bits(x); }
};

struct elem_f32 {
  typedef u32 raw_t;
  static constexpr int BYTES = 4;
  static __device__ __forceinline__ float to_f32(raw_t r) {
    return __uint_as_float(r);
  }
  static __device__ __forceinline__ raw_t from_f32(float x) {
    return __float_as_uint(x);
  }
};

/// Loads element `i` of a buffer of `Elem` and widens it to f32.
template <class Elem>
__device__ __forceinline__ float load_f32(const void *p, i64 i) {
  return Elem::to_f32(static_cast<const typename Elem::raw_t *>(p)[i]);
}

/// Stores `x` rounded to `Elem` (round to nearest even) at element `i`.
template <class Elem>
__device__ __forceinline__ void store_f32(void *p, i64 i, float x) {
  static_cast<typename Elem::raw_t *>(p)[i] = Elem::from_f32(x);
}

/// `p` advanced by `elems` elements of `Elem`.
template <class Elem>
__device__ __forceinline__ const void *offset_elems(const void *p, i64 elems) {
  return static_cast<const char *>(p) + elems * Elem::BYTES;
}

//===----------------------------------------------------------------------===//
// Launch-configuration checks.
//===----------------------------------------------------------------------===//

/// Bytes of dynamic shared memory this launch was given (PTX
/// %dynamic_smem_size).
__device__ __forceinline__ u32 dynamic_smem_size() {
#ifdef LCEJIT_HOST_EMULATION
  return lcejit_emu::dynamic_smem_size();
#else
  u32 r;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
#endif
}

__device__ __forceinline__ i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

//===----------------------------------------------------------------------===//
// The error word: workspace buffer 1, u64[4], zeroed before every run, read by
// the host after the run (runtime::decodeErrorWord). Nothing here traps: a
// kernel that finds a problem records it and the host reports it, so the
// context stays usable.
//
//   [0], [1]  a failed device check (CheckRow: a bad target), the LOWEST
//             failing row and its value. A failing thread folds the key
//             row << 32 | half of its value into each word with atomicMax of
//             ~key ([0]: the low 32 bits of the value, [1]: the high 32 bits):
//             the lowest row has the largest ~key, so both words end up
//             holding that row's halves, whatever order the threads ran in.
//             0 = no failure (rows are clamped below 2^32 - 1).
//   [2]       a launch-contract violation: kind << 32 | (kernel index + 1),
//             the first one recorded wins; 0 = none.
//   [3]       what that launch had (see the CONTRACT_* kinds).
//===----------------------------------------------------------------------===//

/// Kinds of launch-contract violations (error word [2] >> 32) and what [3]
/// then holds.
enum {
  CONTRACT_BLOCK = 1,  ///< blockDim != (threads, 1, 1); [3] = x | y << 16 | z << 32
  CONTRACT_SHARED = 2, ///< too little dynamic shared memory; [3] = the bytes given
  CONTRACT_GRID = 3,   ///< gridDim != the expected one; [3] = x | y << 31 | z << 47
};

/// Records launch-contract violation `kind` of kernel `kernel` (its index in
/// the Program) unless one is already recorded. A null error word records
/// nothing (kernels outside a Program).
__device__ __forceinline__ void raise_contract(void *error_word, int kind,
                                               int kernel, u64 had) {
  if (error_word == nullptr)
    return;
  u64 *w = static_cast<u64 *>(error_word);
  const u64 code = (static_cast<u64>(kind) << 32) |
                   static_cast<u64>(static_cast<u32>(kernel + 1));
  if (atomicCAS(w + 2, 0ull, code) == 0ull)
    w[3] = had;
}

/// The launch contract of a kernel entry point: exactly `threads` threads per
/// block in x (y = z = 1), at least `bytes` of dynamic shared memory, and a
/// grid of exactly grid_x x grid_y x 1 blocks (an expectation < 0 is not
/// checked). A kernel that silently ran with another shape would compute
/// garbage or corrupt memory. Every thread of every block computes the same
/// answer from launch constants; on a violation thread 0 of each block records
/// it in the error word and all return false, and the entry point returns at
/// once: it is called first, before any barrier or mbarrier, so no block is
/// left waiting and nothing is written.
__device__ __forceinline__ bool launch_ok(void *error_word, int kernel,
                                          u32 bytes, u32 threads,
                                          i64 grid_x = -1, i64 grid_y = -1) {
  int kind = 0;
  u64 had = 0;
  if (blockDim.x != threads || blockDim.y != 1 || blockDim.z != 1) {
    kind = CONTRACT_BLOCK;
    had = static_cast<u64>(blockDim.x) | (static_cast<u64>(blockDim.y) << 16) |
          (static_cast<u64>(blockDim.z) << 32);
  } else if (dynamic_smem_size() < bytes) {
    kind = CONTRACT_SHARED;
    had = dynamic_smem_size();
  } else if ((grid_x >= 0 && static_cast<i64>(gridDim.x) != grid_x) ||
             (grid_y >= 0 && static_cast<i64>(gridDim.y) != grid_y) ||
             gridDim.z != 1) {
    kind = CONTRACT_GRID;
    had = static_cast<u64>(gridDim.x) | (static_cast<u64>(gridDim.y) << 31) |
          (static_cast<u64>(gridDim.z) << 47);
  }
  if (kind == 0)
    return true;
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
    raise_contract(error_word, kind, kernel, had);
  return false;
}

//===----------------------------------------------------------------------===//
// Device checks (error word [0], [1], above).
//===----------------------------------------------------------------------===//

/// Records a failed check of `row` with `value`; of all failing rows of a run
/// the lowest one is kept, with its value (see the error word above).
__device__ __forceinline__ void raise_row_check(void *error_word, i64 row,
                                                i64 value) {
  u64 *w = static_cast<u64 *>(error_word);
  const u64 r = row < 0xFFFFFFFELL ? static_cast<u64>(row) : 0xFFFFFFFEull;
  const u64 v = static_cast<u64>(value);
  atomicMax(w, ~((r << 32) | (v & 0xFFFFFFFFull)));
  atomicMax(w + 1, ~((r << 32) | (v >> 32)));
}

/// [Note: stored values in dW] (plan/SchedulePolicy.h) Where the stored values' element
/// (row, col) of a launch of n rows lies: row-major [n][cols] at `values` (split < 0), or
/// in slabs of 128 columns, each row 128 elements: rows below h = min(head, n) of slab
/// s < split at values + s * stride, of the others at slabs2 + (s - split) * h * 128;
/// rows from h on ([Note: slab tails]) in slab s's tail, after the workspace's slabs at
/// slabs2 + (slabs - split) * h * 128 + s * (n - h) * 128.
__device__ __forceinline__ u16 *stored_at(void *values, void *slabs2, i64 split, i64 stride,
                                          i64 head, i64 n, i64 cols, i64 row, i64 col) {
  if (split < 0)
    return static_cast<u16 *>(values) + row * cols + col;
  const i64 s = col >> 7;
  const i64 h = head < n ? head : n;
  u16 *base;
  if (row < h) {
    base = s < split ? static_cast<u16 *>(values) + s * stride
                     : static_cast<u16 *>(slabs2) + (s - split) * h * 128;
  } else {
    const i64 slabs = (cols + 127) >> 7;
    base = static_cast<u16 *>(slabs2) + ((slabs - split) * h + s * (n - h) - h) * 128;
  }
  return base + row * 128 + (col & 127);
}

} // namespace lcejit
