//===- Sm90Launch.h - Launching the sm_90a GEMM kernels --------------------===//
//
// Host half of the kernel ABI in compiler/codegen/Sm90GemmEmitter.h: encodes the two
// operand tensor maps ([Note: sm90 operand maps] in runtime/TensorMap.h), reserves the
// dynamic shared memory and launches CTAs of the kernel's threads (its spec's
// codegen::sm90GemmThreads: 384, or 512 for 192-row tiles), one per SM or one per tile
// when there are fewer tiles.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Module.h"
#include "runtime/TensorMap.h"

#include <cstdint>

namespace lcejit::runtime {

struct Sm90GemmLaunch {
  CUdeviceptr a = 0, b = 0, out = 0;
  bool aKMajor = true, bKMajor = true;
  int64_t lda = 0, ldb = 0, ldOut = 0; ///< elements between rows of memory
  int64_t m = 0, n = 0, k = 0;
  int32_t bn = 256;          ///< the kernel's tile columns (Sm90GemmSpec::bn)
  int32_t bm = 128;          ///< the kernel's tile rows (Sm90GemmSpec::bm): 128, 64 or 192
                             ///< (192: 512 threads, three consumers)
  /// Sm90GemmSpec::clusterM of the kernel. With 2, the launch runs clusters of two CTAs
  /// (B copied in halves of bn / 2 rows) when the row tiles, group and grid are even, else
  /// single CTAs (each then loads both halves).
  int32_t clusterM = 1;
  int32_t sharedBytes = 0;   ///< codegen::sm90GemmSharedBytes of the kernel's spec
  int32_t threads = 0;       ///< codegen::sm90GemmThreads of the kernel's spec
  int32_t group = 8;         ///< tile rows per group of the tile order
  int32_t grid = 0;          ///< CTAs; 0: min(tiles, SMs of the device)
};

/// The number of CTAs a launch uses (grid, or min(tiles, numSMs)).
int64_t sm90GridSize(const Sm90GemmLaunch &l, int numSMs);

/// Throws Error(InvalidArgument) naming the field for sizes, a tile width or row count, a
/// cluster, an output pitch or a group the kernels cannot take (launchSm90Gemm checks this
/// first; it needs no driver).
void checkSm90GemmLaunch(const Sm90GemmLaunch &l);

/// Encodes the maps and enqueues the kernel on `stream`. Throws Error(InvalidArgument) for
/// bad sizes or pointers (naming them), Error(Cuda) for a failed launch.
void launchSm90Gemm(const Module &module, CUfunction f, const Sm90GemmLaunch &l,
                    CUstream stream);

} // namespace lcejit::runtime
