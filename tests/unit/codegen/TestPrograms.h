//===- TestPrograms.h - Hand-built Programs for the emitter tests
//----------===//
//
// Programs shaped like what the planner produces for the fused linear cross
// entropy (docs/program.md), built by hand so the emitter is tested without
// MLIR: a bf16 LCE (row check + counts, GemmReduce logsumexp + target sum, loss
// rows, GemmDz split bf16, GemmDLhs, GemmDRhs bf16, Cast), an f32 SIMT one, an
// f16 one (tensor-core forward, SIMT backward on f32 dZ), a small-bucket one
// (64x128 tiles, 1x4 warps, f32 dW), and a row kernel that uses every scalar
// op.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"

#include <string>
#include <vector>

namespace lcejit::testing {

/// Small builder for ScalarFuncs.
class FuncBuilder {
public:
  int32_t arg(int32_t index, DType type);
  int32_t constF(double v);
  int32_t constI(int64_t v, DType type);
  int32_t rowCount();
  int32_t op(plan::ScalarOp op, DType type, int32_t a, int32_t b = -1,
             int32_t c = -1);
  /// Adds a result; returns its result index.
  int32_t result(int32_t inst);
  plan::ScalarFunc take() { return std::move(f_); }

private:
  int32_t push(plan::ScalarInst i);
  plan::ScalarFunc f_;
};

struct LceOptions {
  std::string name = "lce";
  DType abType = DType::BF16;
  int64_t d = 4096;
  int64_t v = 32003;
  int64_t bucket = 4096;
  plan::TileConfig fwdTile{128, 128, 32, 2, 4, 3};
  plan::TileConfig bwdTile{128, 128, 32, 2, 4, 3};
  plan::MathMode fwdMath = plan::MathMode::TensorCoreBF16;
  plan::MathMode bwdMath = plan::MathMode::TensorCoreBF16;
  plan::DzFormat dzFormat = plan::DzFormat::SplitBF16;
  DType dwType = DType::BF16; ///< output type of the GemmDRhs
  DType dhType = DType::BF16; ///< output type of the Cast
  double softcap = 0;         ///< > 0: z = softcap * tanh(acc / softcap)
  int32_t splits = 4;
  int64_t chunkCols = 8192;
};

/// An LCE-shaped Program (see the file comment).
plan::Program makeLceProgram(const LceOptions &options);

/// The named test programs: "bf16", "f32_simt", "f16", "small_bucket",
/// "all_ops".
std::vector<std::string> testProgramNames();
plan::Program makeTestProgram(const std::string &name);

} // namespace lcejit::testing
