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
// ChunkIndex, RowBlock -> int64_t; AccumulateOutputs -> int64_t (the run's mask,
// ProgramBuffers::accumulateOutputs); Splits -> int32_t (Program::splits); TensorMapA/B -> the
// operand of a WgmmaBF16 GEMM kind, described as in its kernel template (lcejit_sm90.cuh):
//   GemmReduce  A = a [n, k] K-major                B = b [cols, k] K-major
//   GemmDz      A = a [n, k] K-major                B = b rows of the chunk [chunk, k] K-major
//   GemmDLhs    A = dz [n, chunk] K-major           B = b rows of the chunk, MN-major (rows k)
//   GemmDRhs    A = dz^T: dz [n, chunk] MN-major    B = a [n, k] MN-major (rows k), K = n
//               TensorMapOut (TileConfig::tmaStore): out's chunk rows, f32 [chunk, k]
//               ([Note: sm90 output map] in TensorMap.h)
// A Launch step (outside any chunk loop) gets chunkBegin 0, chunkCols = loopCols and
// chunkIndex 0: it is the single chunk that covers everything.
//
// With the launch trace on ([Note: launch trace] in LaunchTrace.h, a diagnostic, off by
// default) each launch is bracketed by two CUDA events.
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
#include <string>
#include <vector>

namespace lcejit::runtime {

/// Device memory for one run of a Program.
struct ProgramBuffers {
  std::vector<CUdeviceptr> inputs;  ///< indexed like Program::inputs
  std::vector<CUdeviceptr> outputs; ///< indexed like Program::outputs
  CUdeviceptr workspace = 0;        ///< 256-byte aligned, at least workspaceBytes(N)
  int64_t workspaceBytes = 0;       ///< size of the workspace allocation
  /// Bit i set: the run adds to what output i holds instead of overwriting it
  /// ([Note: accumulating outputs] in compiler/plan/Program.h); only outputs in
  /// plan::accumulableOutputs(program).
  uint64_t accumulateOutputs = 0;
};

/// Bytes of workspace a run with N rows needs (Program::workspaceOffsets' total).
int64_t workspaceBytes(const plan::Program &program, int64_t n);

/// Byte offset of the error word (workspace buffer kErrorBuffer, u64[4]) for N rows.
int64_t errorWordOffset(const plan::Program &program, int64_t n);

/// What the error word of a finished run says ([Note: the error word] in
/// runtime/device/lcejit_common.cuh): the lowest row whose device check failed, with its
/// value, and a launch-contract violation a kernel found at its entry (it then returned
/// without touching memory; nothing traps, the context stays usable).
struct DeviceErrors {
  int64_t badRow = -1;  ///< lowest failing row of a device check; -1 = none
  int64_t badValue = 0; ///< that row's value (the target)
  int32_t contract = 0; ///< 0 = none, 1 block size, 2 dynamic shared memory, 3 grid
  int32_t kernel = -1;  ///< index into Program::kernels of the kernel that found it
  uint64_t had = 0;     ///< what that launch had (block dims, bytes, grid dims; packed)
  bool any() const { return badRow >= 0 || contract != 0; }
};

/// Decodes the four words the device wrote. A malformed word (the two halves of a bad
/// row disagreeing) is Error(Internal).
DeviceErrors decodeErrorWord(const int64_t word[4]);

/// "kernel 'lce_fwd0' (kernel 1 of program 'lce') was launched with 128 threads per block
/// (1 x 1), its launch contract wants 384" — for Error(Internal) messages.
std::string describeContractViolation(const plan::Program &program, const DeviceErrors &e);

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
/// The same for a schedule already chosen: `schedule` must be program.runSchedule(schedule.n)
/// (prepareRun chooses it once for the workspace size, the launches and the error word).
ExecutionPlan planExecution(const plan::Program &program, const ProgramBuffers &buffers,
                            const plan::RunSchedule &schedule);

/// [Note: prepared runs] A run of a Program for one N, prepared once: the launch list of
/// planExecution with its arguments packed, every pointer argument and tensor-map base
/// kept as (buffer, byte offset) so that bindRun() re-points it at new buffers in place.
/// Building it allocates (once per op and N); binding and launching it allocate nothing,
/// hash nothing and build no string, so a warm call costs the driver calls alone and can
/// be captured in a CUDA graph.
struct PreparedRun {
  /// Where a pointer comes from: base index (inputs, then outputs, then the workspace)
  /// and the byte offset added to it.
  struct Reloc {
    int32_t base = -1; ///< -1: not a pointer
    uint64_t offset = 0;
  };
  struct Memset {
    Reloc at;
    int64_t bytes = 0;
  };
  struct Launch {
    int32_t kernel = -1;
    int64_t chunk = -1;
    int64_t rowBlock = 0;
    plan::LaunchDims dims;
    std::vector<KernelArg> args;
    std::vector<Reloc> argRelocs; ///< one per arg
    std::vector<Sm90Operand> operands; ///< wgmma: A and B (data bound by bindRun)
    std::vector<Reloc> operandRelocs;
    std::vector<CUtensorMap> maps; ///< encoded by bindRun when an operand's base changed
    int32_t accumulateArg = -1; ///< index of the AccumulateOutputs argument (-1: none)
  };

  int64_t n = -1;
  /// Prepared for a call that overwrites ScheduleSpec::slabOutput, whose memory may then
  /// hold the stored values ([Note: stored values in dW]): where the schedule keeps them
  /// there (schedule.slabGroup > 0), bindRun refuses a mask that adds to that output.
  bool outputFree = false;
  plan::RunSchedule schedule;
  int64_t workspaceBytes = 0;  ///< needed (workspaceBytes(program, n))
  int64_t errorWordOffset = 0; ///< errorWordOffset(program, n)
  int32_t numInputs = 0, numOutputs = 0;
  std::vector<Memset> memsets;
  std::vector<Launch> launches;
  int64_t skippedLaunches = 0;
  /// Per base: used by some launch or memset; may be null (an empty tensor at this N).
  std::vector<uint8_t> baseUsed, baseMayBeNull;
  /// The buffers bound now (0 = not bound yet): inputs, outputs, workspace.
  std::vector<CUdeviceptr> bound;
  int64_t boundWorkspaceBytes = 0;
  uint64_t accumulable = 0;     ///< plan::accumulableOutputs(program)
  uint64_t boundAccumulate = 0; ///< the accumulate mask bound now
  int64_t binds = 0;      ///< bindRun calls that changed a pointer
  int64_t mapEncodes = 0; ///< tensor maps encoded by bindRun
};

/// Builds the prepared run of N (pure host work, no driver). Same errors as
/// planExecution for N outside the bucket or a malformed Program.
PreparedRun prepareRun(const plan::Program &program, int64_t n, bool outputFree = false);

/// Points `run` at `buffers`: checks them like planExecution (counts, nulls where a kernel
/// uses a buffer, workspace null/misaligned/small, an accumulate mask with an output that
/// cannot accumulate: Error(InvalidArgument)), rewrites the arguments of the bases that
/// changed and re-encodes the tensor maps on them, and sets the AccumulateOutputs
/// arguments to `accumulateOutputs` (ProgramBuffers::accumulateOutputs). Allocates
/// nothing; a call with the buffers and mask of the last one does nothing.
/// `inputs`/`outputs` have numInputs/numOutputs entries.
void bindRun(PreparedRun &run, const plan::Program &program, const CUdeviceptr *inputs,
             size_t numInputs, const CUdeviceptr *outputs, size_t numOutputs,
             CUdeviceptr workspace, int64_t workspaceBytes, uint64_t accumulateOutputs = 0);

/// Error(InvalidArgument) naming the first output of `mask` that is not in `accumulable`
/// (plan::accumulableOutputs) and why; allocates nothing when the mask is fine.
void checkAccumulateMask(const plan::Program &program, uint64_t mask, uint64_t accumulable);

class Executor {
public:
  /// Resolves every kernel of `program` in `module` (fails early if one is missing).
  /// `module` must outlive the Executor; the Program is copied.
  Executor(plan::Program program, const Module &module);
  /// The same with each kernel in its own module: moduleOfKernel[k] holds kernel k
  /// ([Note: module parts] in compiler/codegen/Emitter.h) under the entry point
  /// entryOfKernel[k] (empty: the kernels' own names; a kernel whose code another kernel's
  /// entry point already is may be given that one). The modules must outlive it.
  Executor(plan::Program program, std::vector<const Module *> moduleOfKernel,
           std::vector<std::string> entryOfKernel = {});

  /// Enqueues one run on `stream` (see the file comment). Asynchronous: device checks
  /// raised by kernels land in the error word, read with enqueueErrorReadback().
  /// (prepare + bindRun + launch: the convenient, allocating form.)
  void run(const ProgramBuffers &buffers, int64_t n, CUstream stream) const;

  /// prepareRun(), and raises the dynamic shared memory limit of every kernel it launches
  /// (so launch() calls nothing but the launches and memsets).
  PreparedRun prepare(int64_t n, bool outputFree = false) const;
  /// Enqueues a prepared, bound run: its memsets and launches, nothing else (no
  /// allocation, no synchronization: capturable in a CUDA graph).
  void launch(const PreparedRun &run, CUstream stream) const;

  /// Enqueues a copy of the error word (int64[4], decodeErrorWord) into host memory
  /// (pinned, see cuMemAllocHost, for a copy that is asynchronous and capturable).
  /// Valid after the stream reaches this point.
  void enqueueErrorReadback(const ProgramBuffers &buffers, int64_t n, CUstream stream,
                            int64_t *hostErrorWord) const;
  /// The same for a bound prepared run (no allocation).
  void enqueueErrorReadback(const PreparedRun &run, CUstream stream,
                            int64_t *hostErrorWord) const;

  const plan::Program &program() const { return program_; }

private:
  plan::Program program_;
  std::vector<const Module *> modules_; ///< indexed like Program::kernels
  std::vector<CUfunction> functions_;   ///< indexed like Program::kernels
};

} // namespace lcejit::runtime
