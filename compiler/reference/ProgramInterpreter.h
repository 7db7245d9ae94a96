//===- ProgramInterpreter.h - fp64 interpreter of a planned Program -------===//
//
// The CPU oracle for the planner: runs a plan::Program on host tensors in fp64,
// following docs/program.md to the letter (workspace buffers, scalar slots, row kernels
// and their sinks, GemmReduce with the real column splits and the (m, t) logsumexp
// partials, the chunk loop, GemmDz / GemmDLhs / GemmDRhs, Cast). It checks the
// planner's decomposition of the math, not device rounding:
//  - every float is fp64; dZ is stored unrounded (SplitBF16: hi = dz, lo = 0);
//  - outputs are not rounded unless InterpretOptions::roundOutputs;
//  - buffers the Program never initialized read as NaN (InterpretOptions::poison), so a
//    missing write shows up in the results instead of passing silently;
//  - every access is bounds-checked against the buffer's size for the given N (workspace
//    sizes from BufferSpec), and a buffer is always accessed with one element type.
// A failed device check (CheckRow) is a result (badRow/badValue), not an exception; a
// malformed Program or bad inputs throw lcejit::Error naming the kernel or input.
//
// No MLIR here: this file is part of lcejit_program_interp, usable without the compiler.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"
#include "compiler/reference/RefTensor.h"

#include <cstdint>
#include <vector>

namespace lcejit::ref {

struct InterpretOptions {
  /// Round each output to its dtype at the end (bf16/f16/f32 round to nearest even), to
  /// model the output rounding floor of the device.
  bool roundOutputs = false;
  /// Round dZ to bf16 where the device keeps it as one bf16 operand (a GemmDz of
  /// DzFormat::BF16, the DzForm pass), as the device does; the target-column residual
  /// ([Note: the target-column residual] in Program.h) then carries what that took off the
  /// target column. Off, dZ stays fp64 and every residual is 0.
  bool roundDz = false;
  /// Fill workspace buffers with init = None and the outputs with NaN before the run.
  bool poison = true;
  /// [Note: accumulating outputs] in Program.h: bit i set, output i starts from
  /// initialOutputs[i] (its dtype and shape, N substituted) and the run adds to it, as the
  /// device does (GemmDLhs/GemmDRhs/Cast read the old value). Only outputs in
  /// plan::accumulableOutputs; anything else is Error(InvalidArgument).
  uint64_t accumulateOutputs = 0;
  std::vector<RefTensor> initialOutputs; ///< indexed like Program::outputs
};

struct ProgramRunResult {
  std::vector<RefTensor> outputs; ///< one per Program::outputs, N substituted
  int64_t badRow = 0;             ///< first failing row + 1 of a device check; 0 = ok
  int64_t badValue = 0;           ///< the offending value reported by that check
  bool ok() const { return badRow == 0; }
};

/// Runs `program` for `n` rows on `inputs` (one per Program::inputs, with its dtype and
/// shape, N = n). Any n >= 0 is accepted (the bucket only matters for performance).
ProgramRunResult interpretProgram(const plan::Program &program,
                                  const std::vector<RefTensor> &inputs, int64_t n,
                                  const InterpretOptions &options = {});

/// Evaluates a ScalarFunc once with the values of its arguments (one per Arg index,
/// already of the Arg's type) and N = `rowCount`; returns the values of its results.
/// The semantics of docs/program.md "Scalar functions", in fp64.
std::vector<double> evaluateScalarFunc(const plan::ScalarFunc &func,
                                       const std::vector<double> &args, int64_t rowCount = 0);

} // namespace lcejit::ref
