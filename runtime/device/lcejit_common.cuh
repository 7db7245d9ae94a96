//===- lcejit_common.cuh - Types, conversions, small numeric helpers
//-------===//
//
// Part of the device helpers of lcejit (runtime/device/*.cuh). These are real
// headers: each one compiles on its own with nvcc (tests/unit/codegen), and the
// emitter prepends their text, in include order and with the `#include
// "lcejit_*.cuh"` lines removed, to every generated CUDA module
// (docs/codegen.md). They must stay free of anything NVRTC cannot find: only
// <cuda_bf16.h> and <cuda_fp16.h>, no CCCL, no <cstdint>. Keep this file ASCII
// (it is embedded as a C++ raw string).
//
// LCEJIT_HOST_EMULATION: the codegen unit tests run generated modules on the
// host (tests/unit/codegen/emu/lcejit_emu.h, [Note: host emulation]). The only
// code that differs there is inline PTX: %dynamic_smem_size here, mma.sync and
// ldmatrix (and the shared-window address ldmatrix takes) in lcejit_mma.cuh and
// cp.async in lcejit_gemm.cuh call lcejit_emu:: instead. NVRTC never defines
// it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace lcejit {

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

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
  static __device__ __forceinline__ raw_t from_f32(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
};

struct elem_f16 {
  typedef u16 raw_t;
  static constexpr int BYTES = 2;
  static __device__ __forceinline__ float to_f32(raw_t r) {
    return __half2float(__ushort_as_half(r));
  }
  static __device__ __forceinline__ raw_t from_f32(float x) {
    return __half_as_ushort(__float2half_rn(x));
  }
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

/// Traps unless the launch gave at least `bytes` of dynamic shared memory and
/// exactly `threads` threads per block. A kernel that silently ran with less
/// shared memory or another block size would compute garbage or corrupt memory;
/// a trap is a clean error.
__device__ __forceinline__ void require_launch(u32 bytes, u32 threads) {
  if (dynamic_smem_size() < bytes || blockDim.x != threads || blockDim.y != 1 ||
      blockDim.z != 1)
    __trap();
}

//===----------------------------------------------------------------------===//
// Device checks (Workspace[1]: int64 {first bad row + 1, bad value}, 0 = none).
//===----------------------------------------------------------------------===//

/// Records a failed check of `row` with `value` unless one is already recorded:
/// the compare-and-swap on the first word picks one winner, which then stores
/// the value.
__device__ __forceinline__ void raise_row_check(void *error_word, i64 row,
                                                i64 value) {
  u64 *w = static_cast<u64 *>(error_word);
  if (atomicCAS(w, 0ull, (u64)(row + 1)) == 0ull)
    w[1] = (u64)value;
}

} // namespace lcejit
