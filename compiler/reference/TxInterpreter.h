//===- TxInterpreter.h - fp64 interpreter of the tx dialect ---------------===//
//
// The CPU oracle for graphs (docs/architecture.md, "CPU reference"): runs one
// func.func of the tx dialect on host tensors in fp64, before or after --tx-fuse.
//
//  - Every tx op has its documented semantics (TxOps.td): NumPy-style broadcasting with
//    equal ranks or rank 0, reductions that keep the axis or reduce all, a stable
//    logsumexp, gather that picks 0 for an index outside [0, size), NaN-propagating max.
//  - Float casts are exact identities: the reference computes the ideal math, never the
//    rounding of bf16/f16/f32. Integer and i1 conversions are real (wrap, 0/1).
//  - tx.gemm_reduce / tx.gemm_grad evaluate their arith/math body per element of
//    acc = lhs · rhsᵀ, then reduce each yield along the row (sum, max, logsumexp), or
//    form d_lhs = dZ · rhs and d_rhs = dZᵀ · lhs.
//  - tx.grad is an error: run --tx-autodiff first.
//
// N, the one symbolic size, is read from the inputs' dynamic dimensions (they must all
// agree). Errors throw lcejit::Error naming the op (InvalidArgument for bad inputs,
// Unsupported for an op the interpreter does not know).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/reference/RefTensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace lcejit::ref {

/// Runs `func` on `inputs` (one per argument, in order, with the argument's dtype and
/// shape, N for every dynamic dimension). Returns one tensor per function result.
std::vector<RefTensor> interpretTx(mlir::func::FuncOp func, const std::vector<RefTensor> &inputs);

/// Runs the function named `name` of `module` (or its only function when `name` is empty).
std::vector<RefTensor> interpretTx(mlir::ModuleOp module, const std::vector<RefTensor> &inputs,
                                   const std::string &name = "");

} // namespace lcejit::ref
