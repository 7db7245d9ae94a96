//===- Emitter.h - plan::Program -> one CUDA C++ module
//--------------------===//
//
// The CUDA emitter: the last compiler stage before NVRTC. A module is
//
//   a banner comment (program, bucket, target, kernel list)
//   the device-helper prelude (runtime/device/*.cuh as text, DeviceHeaders.h)
//   per kernel, in Program order: header comment, GemmConfig typedef, functor
//   from the ScalarFunc, and an extern "C" __global__ wrapper named
//   Kernel::name whose parameters are plan::kernelParams() and whose body calls
//   one fixed template of lcejit_kernels.cuh.
//
// Output is deterministic: the same Program gives byte-identical text (the disk
// cache keys on it). Layout and how to read a dump: docs/codegen.md.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"

#include <string>
#include <vector>

namespace lcejit::codegen {

struct EmittedModule {
  std::string source; ///< the whole CUDA module, prelude included
  std::vector<std::string>
      kernelNames; ///< extern "C" entry points, Program order
};

/// One CUDA module with every kernel of `program`. Throws Error(Internal) for a
/// Program the templates cannot run (the message names the kernel and the
/// reason).
EmittedModule emitCuda(const plan::Program &program);

/// [Note: module parts] The unit of NVRTC compilation. The whole module (emitCuda) is
/// what dumps show; the op compiles a Program as several smaller modules, each the
/// prelude plus some kernels, in parallel threads: every GEMM kernel alone (their
/// unrolled epilogues dominate ptxas time), and all row and cast kernels together. The
/// first call of a bucket then waits for the slowest kernel, not for the sum.
///
/// A part's text is a function of its kernels alone: its banner names neither the bucket
/// nor the Program's other kernels. Buckets plan the same kernels where the shapes allow
/// (Llama-3's head plans [4097, 16384] and [16385, 65536] alike), and the kernel cache,
/// keyed by the text, then compiles each once: a new bucket's first call compiles only
/// what is new in it.
///
/// A GEMM kernel whose section is another's but for its name, its index and its comments
/// (dB's second column half, [Note: a scaled A in column parts]) is not compiled again:
/// it joins that kernel's part, which lists the other's entry point for it. A launch
/// contract it breaks is then reported under the other's index and name (the two take
/// the same launch, so both would break it).
struct EmittedPart {
  std::string source;                   ///< prelude + this part's kernels
  std::vector<int32_t> kernels;         ///< Program kernel indices, in Program order
  std::vector<std::string> kernelNames; ///< the entry point of each (may repeat)
  /// kernelNames without repeats, in order: what the module defines.
  std::vector<std::string> entryPoints() const;
};
std::vector<EmittedPart> emitCudaParts(const plan::Program &program);

/// Only the generated part of kernel `kernelIndex` (no prelude): for dumps and
/// tests.
std::string emitKernelSource(const plan::Program &program, int32_t kernelIndex);

} // namespace lcejit::codegen
