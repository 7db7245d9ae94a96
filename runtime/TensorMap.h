//===- TensorMap.h - TMA tensor maps for the sm_90a GEMM operands ----------===//
//
// The Hopper mainloop (runtime/device/lcejit_sm90.cuh) reads its operands with TMA.
// A tensor map describes one row-major bf16 matrix and the box one TMA copies; it is
// encoded on the host with cuTensorMapEncodeTiled (the driver entry point, loaded
// like the others) and passed to the kernel by value as a __grid_constant__ parameter.
//
// [Note: sm90 operand maps] An operand of the GEMM acc(m, n) = sum_k A(m, k) B(n, k)
// is `rows` x `k` (rows = m for A, n for B), stored row-major with `ld` elements
// between rows of memory:
//   K-major   element (r, kk) at p[r * ld + kk]: dims (k, rows), box (64, boxRows)
//   MN-major  element (r, kk) at p[kk * ld + r]: dims (rows, k), box (64, 64)
// both with the 128-byte swizzle, which is what the descriptors of the wgmma path
// expect ([Note: sm90 shared memory]); out-of-bounds elements read as zero. A map with
// a zero dimension is encoded with that dimension 1: the kernel issues no load through
// it (no tiles, or no k-blocks).
//
// [Note: sm90 output map] With TileConfig::tmaStore the GEMM's f32 output is a third map
// (`f32Out`): `rows` x `k` f32, row-major with `ld` elements between rows, dims (k, rows),
// box (32, 64) with the 128-byte swizzle (32 f32 = 128 bytes, the most a swizzled box row
// may hold): the image [Note: sm90 TMA store] in lcejit_sm90.cuh stages. Stores and
// reduce-adds through it clip out-of-bounds elements, so `rows` is exactly the rows the
// launch owns (dB: the chunk's rows of dW, its base at the chunk's first row).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/CudaDriver.h"

#include <cstdint>

namespace lcejit::runtime {

struct Sm90Operand {
  CUdeviceptr data = 0;
  bool kMajor = true;
  int64_t rows = 0; ///< m (A) or n (B)
  int64_t k = 0;
  int64_t ld = 0;   ///< elements between consecutive rows of memory
  int32_t boxRows = 128; ///< K-major box height: BM (A) or BN (B)
  bool f32Out = false;   ///< the f32 output map of [Note: sm90 output map] (boxRows unused)
  /// [Note: stored values in dW] > 0: the operand lies in this many slabs of 128
  /// columns of the stored values (k = the block's columns for K-major dA, rows = the
  /// columns for MN-major dB), slabStride elements apart, each row-major with 128
  /// elements a row (ld unused): dims (128, rows or k, slabs), box (64, boxRows or 64, 1).
  int64_t slabs = 0;
  int64_t slabStride = 0;
};

/// Encodes the tensor map of `op` (a bf16 operand, or the f32 output). Throws Error(InvalidArgument) naming the field
/// for a pointer that is not 16-byte aligned, ld not a multiple of 8 elements (TMA needs
/// 16-byte row pitches), ld smaller than the contiguous extent, a negative size, or a
/// box the hardware cannot copy; Error(Cuda) if the driver rejects it.
CUtensorMap encodeSm90Operand(const Sm90Operand &op);

} // namespace lcejit::runtime
