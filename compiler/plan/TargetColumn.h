//===- TargetColumn.h - The row operand an epilogue compares its column with ==//
//
// The one-hot of a cross entropy reaches a fused epilogue as `col == t` (or `!=`) for an
// integer Row operand t, the row's target column. The materialized schedule's algebra
// (Materialize.cpp) and the target-column residual ([Note: the target-column residual]
// in Program.h) both need to know which operand that is.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"

#include <functional>

namespace lcejit::plan {

struct TargetColumn {
  int32_t argInst = -1; ///< the Arg instruction of t in the function (-1: none)
  int32_t value = -1;   ///< the instruction compared with the column (the Arg or its cast)
  int32_t arg = -1;     ///< t's index into the operands
  /// The column is compared with two different row operands (no single target).
  bool ambiguous = false;
  bool found() const { return argInst >= 0 && !ambiguous; }
};

/// Finds t in `f` (whose arguments are `args`): an integer (i32/i64) Row operand, accepted
/// by `accept`, that f compares for equality or inequality with its ColIndex argument
/// (either side of the compare, each possibly through a Cast).
TargetColumn findTargetColumn(const ScalarFunc &f, const std::vector<Operand> &args,
                              const std::function<bool(const Operand &)> &accept);

} // namespace lcejit::plan
