//===- Sm90GemmEmitter.h - Plain GEMMs on the Hopper mainloop --------------===//
//
// The sm_90a GEMM of runtime/device/lcejit_sm90.cuh as generated kernels with a store
// epilogue: out[m][n] = sum_k A(m, k) B(n, k), rounded to the output type. These are the
// first kernels of the Hopper path (issue 6, "first as plain GEMMs"): `lcejit-bench
// --gemm-only` runs them as the three FLCE GEMMs next to cuBLAS, and the GPU suite checks
// them against an fp64 reference; the fused epilogues build on the same mainloop.
//
// Kernel ABI of every generated entry (runtime/Sm90Launch.h packs it):
//
//   extern "C" __global__ void __launch_bounds__(sm90GemmThreads(spec), 1)
//   <name>(const __grid_constant__ lcejit::sm90::TensorMap map_a,
//          const __grid_constant__ lcejit::sm90::TensorMap map_b,
//          void *out, long long ld_out, long long m, long long n, long long k, int group)
//
// block sm90GemmThreads(spec) threads (384, or 512 for 192-row tiles), dynamic shared
// memory sm90GemmSharedBytes(spec), any grid (the
// kernel is persistent; one CTA per SM is the intended launch).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/codegen/Emitter.h"
#include "lcejit/DType.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lcejit::codegen {

struct Sm90GemmSpec {
  std::string name;
  int32_t bn = 256;       ///< tile columns: 64, 128, 192 or 256 (BK = 64)
  int32_t stages = 4;     ///< shared-memory ring depth, 2 to 8
  bool aKMajor = true;    ///< A(m, k) at a[m * ld + k] (else a[k * ld + m])
  bool bKMajor = true;    ///< B(n, k) at b[n * ld + k] (else b[k * ld + n])
  DType out = DType::BF16; ///< BF16, F16 or F32
  bool pingpong = false;   ///< consumers take alternate tiles ([Note: sm90 ping-pong]), bn <= 128
  /// Tile rows: 128; 64 with ping-pong consumers, then bn up to 256 ([Note: sm90 64-row
  /// ping-pong]); or 192 with three cooperative consumers and 512 threads ([Note: sm90 three
  /// consumers]).
  int32_t bm = 128;
  /// 2: clusters of two CTAs along M share each B tile by TMA multicast (a K-major B;
  /// [Note: sm90 multicast]) where the launch pairs its row tiles (runtime::
  /// Sm90GemmLaunch::clusterM).
  int32_t clusterM = 1;
  bool operator==(const Sm90GemmSpec &) const = default;
};

/// Throws Error(InvalidArgument) naming the field for a spec the template cannot run.
void checkSm90GemmSpec(const Sm90GemmSpec &spec);

/// Threads of a CTA (lcejit::sm90::GemmConfig::THREADS): 384, or 512 for bm = 192.
int32_t sm90GemmThreads(const Sm90GemmSpec &spec);

/// Dynamic shared memory of the kernel (lcejit::sm90::GemmConfig::SMEM_BYTES).
int32_t sm90GemmSharedBytes(const Sm90GemmSpec &spec);

/// "tile 128x256x64, 4 stages, A K-major, B MN-major, out bf16, 197664 bytes shared".
std::string describe(const Sm90GemmSpec &spec);

/// One module (prelude + one kernel per spec). It compiles for sm_90a only: the source
/// stops with #error on any other target.
EmittedModule emitSm90GemmModule(const std::vector<Sm90GemmSpec> &specs);

} // namespace lcejit::codegen
