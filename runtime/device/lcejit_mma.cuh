//===- lcejit_mma.cuh - mma.sync m16n8k16 (bf16/f16 -> f32) and fragments
//---===//
//
// The warp-level tensor-core MMA of the portable GEMM path (sm_80 and later)
// and the loaders that build its register fragments from shared-memory tiles.
//
// [Note: m16n8k16 fragments] From the PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type" (.f16 / .bf16 multiplicands, .f32
// accumulators). With
//   g = %laneid >> 2 (groupID),  t = %laneid % 4 (threadID_in_group):
//
//   A (16 x 16, row): four .b32 registers, two elements each, a0..a7 low to
//   high:
//     row(a_i) = g      for i in {0, 1, 4, 5},   g + 8 otherwise
//     col(a_i) = 2t + (i & 1)   for i < 4,       2t + (i & 1) + 8 for i >= 4
//     so  reg0 = A[g][2t, 2t+1]      reg1 = A[g+8][2t, 2t+1]
//         reg2 = A[g][2t+8, 2t+9]    reg3 = A[g+8][2t+8, 2t+9]
//   B (16 x 8, col): two .b32 registers, b0..b3 low to high:
//     row(b_i) = 2t + (i & 1)   for i < 2,       2t + (i & 1) + 8 for i >= 2
//     col(b_i) = g
//     so  reg0 = B[2t, 2t+1][g]      reg1 = B[2t+8, 2t+9][g]      (B indexed
//     [k][n])
//   C, D (16 x 8, f32): four registers c0..c3:
//     row(c_i) = g for i < 2, g + 8 otherwise;   col(c_i) = 2t + (i & 1)
//
// "Low to high": the element with the smaller index sits in bits [0, 16) of the
// .b32 register, i.e. a little-endian 32-bit load of two consecutive 16-bit
// elements gives the register directly; pack2() builds it from two separate
// elements.
//
// The loaders below read one 16x16 A fragment or one 16x8 B fragment (k range
// [k0, k0 + 16)) from a shared-memory tile in either layout:
//   K-major:  element (mn, k) at s[mn * ld + k]  -> 32-bit loads of k pairs
//   MN-major: element (mn, k) at s[k * ld + mn]  -> two 16-bit loads per
//   register
// (ldmatrix[.trans] would be faster; the later fast path will switch to it.)
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit_common.cuh"

namespace lcejit {

/// A 32-bit fragment register holding `lo` in bits [0, 16) and `hi` in [16,
/// 32).
__device__ __forceinline__ u32 pack2(u16 lo, u16 hi) {
  return (u32)lo | ((u32)hi << 16);
}

__device__ __forceinline__ u32 lds_u32(const u16 *p) {
  return *reinterpret_cast<const u32 *>(p);
}

/// D = A * B + D for one 16x8x16 tile, bf16 inputs, f32 accumulators (c0..c3
/// above).
__device__ __forceinline__ void mma_16816_bf16(float &c0, float &c1, float &c2,
                                               float &c3, const u32 (&a)[4],
                                               const u32 (&b)[2]) {
#ifdef LCEJIT_HOST_EMULATION
  lcejit_emu::mma_16816<true>(c0, c1, c2, c3, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/// Same with f16 inputs.
__device__ __forceinline__ void mma_16816_f16(float &c0, float &c1, float &c2,
                                              float &c3, const u32 (&a)[4],
                                              const u32 (&b)[2]) {
#ifdef LCEJIT_HOST_EMULATION
  lcejit_emu::mma_16816<false>(c0, c1, c2, c3, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/// mma_16816_bf16 (IS_BF16) or mma_16816_f16.
template <bool IS_BF16>
__device__ __forceinline__ void mma_16816(float &c0, float &c1, float &c2,
                                          float &c3, const u32 (&a)[4],
                                          const u32 (&b)[2]) {
  if (IS_BF16)
    mma_16816_bf16(c0, c1, c2, c3, a, b);
  else
    mma_16816_f16(c0, c1, c2, c3, a, b);
}

/// A fragment of rows [m0, m0 + 16), k [k0, k0 + 16) from a K-major tile.
/// Needs ld and k0 even (32-bit aligned pairs).
__device__ __forceinline__ void load_a_frag_kmajor(u32 (&a)[4], const u16 *s,
                                                   int ld, int m0, int k0,
                                                   int lane) {
  const int g = lane >> 2, t = lane & 3;
  a[0] = lds_u32(s + (m0 + g) * ld + k0 + 2 * t);
  a[1] = lds_u32(s + (m0 + g + 8) * ld + k0 + 2 * t);
  a[2] = lds_u32(s + (m0 + g) * ld + k0 + 2 * t + 8);
  a[3] = lds_u32(s + (m0 + g + 8) * ld + k0 + 2 * t + 8);
}

/// A fragment from an M-major tile (element (m, k) at s[k * ld + m]).
__device__ __forceinline__ void load_a_frag_mmajor(u32 (&a)[4], const u16 *s,
                                                   int ld, int m0, int k0,
                                                   int lane) {
  const int g = lane >> 2, t = lane & 3;
  const u16 *k_lo = s + (k0 + 2 * t) * ld;     // k = k0 + 2t
  const u16 *k_hi = s + (k0 + 2 * t + 8) * ld; // k = k0 + 2t + 8
  a[0] = pack2(k_lo[m0 + g], k_lo[ld + m0 + g]);
  a[1] = pack2(k_lo[m0 + g + 8], k_lo[ld + m0 + g + 8]);
  a[2] = pack2(k_hi[m0 + g], k_hi[ld + m0 + g]);
  a[3] = pack2(k_hi[m0 + g + 8], k_hi[ld + m0 + g + 8]);
}

/// B fragment of columns [n0, n0 + 8), k [k0, k0 + 16) from a K-major tile
/// (element (k, n) at s[n * ld + k]).
__device__ __forceinline__ void load_b_frag_kmajor(u32 (&b)[2], const u16 *s,
                                                   int ld, int n0, int k0,
                                                   int lane) {
  const int g = lane >> 2, t = lane & 3;
  b[0] = lds_u32(s + (n0 + g) * ld + k0 + 2 * t);
  b[1] = lds_u32(s + (n0 + g) * ld + k0 + 2 * t + 8);
}

/// B fragment from an N-major tile (element (k, n) at s[k * ld + n]).
__device__ __forceinline__ void load_b_frag_nmajor(u32 (&b)[2], const u16 *s,
                                                   int ld, int n0, int k0,
                                                   int lane) {
  const int g = lane >> 2, t = lane & 3;
  const u16 *k_lo = s + (k0 + 2 * t) * ld;
  const u16 *k_hi = s + (k0 + 2 * t + 8) * ld;
  b[0] = pack2(k_lo[n0 + g], k_lo[ld + n0 + g]);
  b[1] = pack2(k_hi[n0 + g], k_hi[ld + n0 + g]);
}

} // namespace lcejit
