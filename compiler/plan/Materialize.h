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
/// is then unchanged). `name` prefixes the new kernels' names.
std::string materializeBackward(Program &program, const std::string &name);

} // namespace lcejit::plan
