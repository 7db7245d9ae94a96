//===- Materialize.h - The materialized backward from the recompute one -----===//
//
// See [Note: the materialized backward] in Program.h and Materialize.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"

#include <string>

namespace lcejit::plan {

/// Rewrites a planned vocab-chunked recompute Program into the materialized schedule:
/// the forward GEMM stores its fp16 per-element part of dZ, a row kernel and a DzForm
/// kernel replace the dZ GEMM, and the backward GEMMs run over one chunk of all columns
/// per row block. Returns "" when it did; otherwise the reason it could not (the Program
/// is then unchanged). `name` prefixes the new kernels' names. With `exactTarget` the
/// row kernel forms the target column's dZ as [Note: the target column's dZ] says.
/// `rowScaled`: where the forward's value is bounded, store it against a constant
/// reference ([Note: row-scaled stored values] in Program.h), otherwise, where the Program
/// sums the f64 target logit, against each row's target value ([Note: a per-row
/// reference]); Program::decisions is not touched, the caller reads
/// StoredTile::rowScaled and StoredTile::referenceArg.
/// `scaleInPlace` ([Note: values scaled in place] in Program.h): dB reads the unscaled A
/// and a DzForm after dA scales the row-scaled values in place (no scaled copy of A); no
/// budget check: the caller keeps the Program only where its run schedules fit.
std::string materializeBackward(Program &program, const std::string &name,
                                bool exactTarget = true, bool rowScaled = true,
                                bool scaleInPlace = false);

/// [Note: the target column's dZ] for the recompute schedule: a row kernel before the
/// chunk loop stores each row's dZ at its target column (from the forward's (m, t) pair,
/// its pick and the f64 target logit where the Program sums one), and the dZ GEMM's
/// epilogue selects it at that column. Returns "" when it did; otherwise the reason (the
/// Program is then unchanged).
std::string targetColumnDz(Program &program, const std::string &name);

} // namespace lcejit::plan
