//===- Executor.h - Runs a plan::Program on a stream -----------------------===//
//
// The executor is the host half of a Program: given device pointers for the program's
// inputs, outputs and workspace and the runtime N, it enqueues on a stream
//   1. one memset of every workspace buffer whose init is Zero (adjacent ones merged);
//   2. the launches of Program::expand(runSchedule(N)), in order: steps run once, the
//      blocked steps once per row block, a ChunkLoop's kernels once per column chunk
//      (chunkBegin = c * chunkCols, cols = min(chunkCols, loopCols - chunkBegin)); see
//      [Note: the run schedule] in compiler/plan/Program.h.
// Launches whose grid has a zero dimension (N = 0) are skipped.
//
// [Note: argument packing] plan::kernelParams() is the kernel ABI: the emitter prints the
// parameter list from it and the executor packs values in the same order. Pointer ->
// CUdeviceptr of the buffer (inputs and outputs as given, workspace buffers at base +
// workspaceOffsets(N)[index]), each offset by rowBegin * rowStrideBytes() inside a row
// block; N (the launch's rows), TotalRows (the call's N), ChunkBegin, ChunkCols,
// ChunkIndex, RowBlock -> int64_t; Splits -> int32_t (Program::splits); TensorMapA/B -> the
// operand of a WgmmaBF16 GEMM kind, described as in its kernel template (lcejit_sm90.cuh):
//   GemmReduce  A = a [n, k] K-major                B = b [cols, k] K-major
//   GemmDz      A = a [n, k] K-major                B = b rows of the chunk [chunk, k] K-major
//   GemmDLhs    A = dz [n, chunk] K-major           B = b rows of the chunk, MN-major (rows k)
//   GemmDRhs    A = dz^T: dz [n, chunk] MN-major    B = a [n, k] MN-major (rows k), K = n A Launch step (outside any chunk loop) gets chunkBegin 0,
// chunkCols = loopCols and chunkIndex 0: it is the single chunk that covers everything.
//
// planExecution() computes all of this as plain data with no GPU, so unit tests check the
// packing, the chunk arithmetic and the workspace layout on the CPU; Executor::run()
// only walks that list and calls the driver.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"
#include "runtime/Module.h"
#include "runtime/TensorMap.h"

#include <cstdint>
#include <vector>

namespace lcejit::runtime {

/// Device memory for one run of a Program.
struct ProgramBuffers {
  std::vector<CUdeviceptr> inputs;  ///< indexed like Program::inputs
  std::vector<CUdeviceptr> outputs; ///< indexed like Program::outputs
  CUdeviceptr workspace = 0;        ///< 256-byte aligned, at least workspaceBytes(N)
  int64_t workspaceBytes = 0;       ///< size of the workspace allocation
};

/// Bytes of workspace a run with N rows needs (Program::workspaceOffsets' total).
int64_t workspaceBytes(const plan::Program &program, int64_t n);

/// Byte offset of the error word (workspace buffer kErrorBuffer, int64[2]) for N rows.
int64_t errorWordOffset(const plan::Program &program, int64_t n);

/// One packed kernel argument. See [Note: argument packing].
struct KernelArg {
  /// TensorMap: value.i64 indexes LaunchRecord::maps; run() encodes the map and passes
  /// the 128-byte CUtensorMap by value.
  enum class Type : uint8_t { Pointer, I64, I32, TensorMap };
  Type type = Type::I64;
  union {
    CUdeviceptr pointer;
    int64_t i64;
    int32_t i32;
  } value{};

  static KernelArg makePointer(CUdeviceptr p);
  static KernelArg makeI64(int64_t v);
  static KernelArg makeI32(int32_t v);
  static KernelArg makeTensorMap(int64_t mapIndex);
  /// What cuLaunchKernelEx's kernelParams[i] points to.
  void *address() { return &value; }
};

struct LaunchRecord {
  int32_t kernel = -1; ///< index into Program::kernels
  int64_t chunk = -1;  ///< chunk index in a ChunkLoop step, -1 for a Launch step
  int64_t rowBlock = 0; ///< row block (0 when rows are not blocked)
  plan::LaunchDims dims;
  std::vector<KernelArg> args;
  /// The operands of a WgmmaBF16 GEMM as plain data ([Note: sm90 operand maps]); encoded
  /// into tensor maps only by run(), so planExecution stays a pure host computation.
  std::vector<Sm90Operand> maps;
};

struct MemsetRecord {
  CUdeviceptr pointer = 0;
  int64_t bytes = 0;
};

/// Everything one run enqueues, in order: the memsets, then the launches.
struct ExecutionPlan {
  plan::RunSchedule schedule; ///< row blocks and chunks chosen for this N
  std::vector<MemsetRecord> memsets;
  std::vector<LaunchRecord> launches;
  int64_t skippedLaunches = 0; ///< launches dropped because a grid dimension was 0
};

/// Pure host computation of a run. Throws Error(InvalidArgument) for a wrong number of
/// buffers, a null pointer where a kernel uses the buffer, a workspace that is missing,
/// too small or misaligned, or N outside the program's bucket; Error(Internal) for a
/// malformed Program.
ExecutionPlan planExecution(const plan::Program &program, const ProgramBuffers &buffers,
                            int64_t n);

class Executor {
public:
  /// Resolves every kernel of `program` in `module` (fails early if one is missing).
  /// `module` must outlive the Executor; the Program is copied.
  Executor(plan::Program program, const Module &module);
  /// The same with each kernel in its own module: moduleOfKernel[k] holds kernel k
  /// ([Note: module parts] in compiler/codegen/Emitter.h). The modules must outlive it.
  Executor(plan::Program program, std::vector<const Module *> moduleOfKernel);

  /// Enqueues one run on `stream` (see the file comment). Asynchronous: device checks
  /// raised by kernels land in the error word, read with enqueueErrorReadback().
  void run(const ProgramBuffers &buffers, int64_t n, CUstream stream) const;

  /// Enqueues a copy of the error word into host memory (ideally pinned, see
  /// cuMemAllocHost): host[0] = first bad row + 1 (0 = no error), host[1] = bad value.
  /// Valid after the stream reaches this point.
  void enqueueErrorReadback(const ProgramBuffers &buffers, int64_t n, CUstream stream,
                            int64_t *hostErrorWord) const;

  const plan::Program &program() const { return program_; }

private:
  plan::Program program_;
  std::vector<const Module *> modules_; ///< indexed like Program::kernels
  std::vector<CUfunction> functions_;   ///< indexed like Program::kernels
};

} // namespace lcejit::runtime
