//===- lcejit_mma.cuh - mma.sync m16n8k16 (bf16/f16 -> f32) and ldmatrix
//----===//
//
// The warp-level tensor-core MMA of the portable GEMM path (sm_80 and later)
// and ldmatrix, which builds its register fragments from shared memory.
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
// .b32 register.
//
// [Note: ldmatrix] From the PTX ISA, "ldmatrix": ldmatrix.sync.aligned.m8n8
// .x1/.x2/.x4{.trans}.shared.b16 loads 1, 2 or 4 matrices of 8 x 8 16-bit
// elements. Every row of matrix j is 16 contiguous, 16-byte aligned bytes whose
// address is supplied by lane 8j + row (lanes 0-7 for .x1, 0-15 for .x2, all
// 32 for .x4; the other lanes' addresses are ignored). Register j of every
// lane receives a fragment of matrix j: lane l holds row l >> 2, columns
// 2 (l % 4) and 2 (l % 4) + 1 (low half first). With .trans the matrix is read
// column-major: the 8 addresses are its columns, so lane l receives elements
// (2 (l % 4), l >> 2) and (2 (l % 4) + 1, l >> 2) of the rows as stored.
//
// Hence one .x4 loads a whole 16 x 16 A fragment, or the B fragments of two
// adjacent 8-column mma tiles, from a tile in either layout (GemmMainloop in
// lcejit_gemm.cuh gives each lane its row address):
//   K-major tile (rows = m or n, k contiguous): no .trans; a stored row is a
//     row of A (a 16-wide k range of it) or a column of B.
//   MN-major tile (rows = k, m or n contiguous): .trans; a stored row is a
//     column of A or a row of B.
// GemmMainloop chooses the matrix order so that each fragment lands in
// consecutive registers ([Note: fragment addresses] in lcejit_gemm.cuh).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit_common.cuh"

namespace lcejit {

/// A shared-memory address as ldmatrix takes it: the 32-bit shared-window
/// address on the device, a pointer in host emulation. Offsets add to either.
#ifdef LCEJIT_HOST_EMULATION
typedef const unsigned char *smem_addr_t;
#else
typedef u32 smem_addr_t;
#endif

/// The smem_addr_t of a generic pointer into shared memory.
__device__ __forceinline__ smem_addr_t to_smem_addr(const void *p) {
#ifdef LCEJIT_HOST_EMULATION
  return static_cast<const unsigned char *>(p);
#else
  return static_cast<u32>(__cvta_generic_to_shared(p));
#endif
}

/// ldmatrix.sync.aligned.m8n8.x<NUM>{.trans}.shared.b16 (NUM in {1, 2, 4}):
/// `row` is the row address this lane supplies ([Note: ldmatrix]), r[j] its
/// fragment of matrix j. All 32 lanes of the warp must call it together.
template <int NUM, bool TRANS>
__device__ __forceinline__ void ldmatrix(u32 (&r)[NUM], smem_addr_t row) {
  static_assert(NUM == 1 || NUM == 2 || NUM == 4, "ldmatrix .x1, .x2 or .x4");
#ifdef LCEJIT_HOST_EMULATION
  lcejit_emu::ldmatrix<NUM, TRANS>(r, row);
#else
  if constexpr (NUM == 4 && !TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
  else if constexpr (NUM == 4 && TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
  else if constexpr (NUM == 2 && !TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(row));
  else if constexpr (NUM == 2 && TRANS)
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
        : "=r"(r[0]), "=r"(r[1])
        : "r"(row));
  else if constexpr (!TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(row));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(row));
#endif
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

} // namespace lcejit
