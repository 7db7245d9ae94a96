//===- Passes.td - tx passes ----------------------------------------------===//
//
// The pass order is written once, in compiler/pipeline/Pipeline.cpp. Each pass has a lit
// test tests/lit/<flag>.mlir with CHECK lines and at least one case where it must not
// fire.
//
//===----------------------------------------------------------------------===//

#ifndef LCEJIT_TX_PASSES
#define LCEJIT_TX_PASSES

include "mlir/Pass/PassBase.td"

def TxAutodiff : Pass<"tx-autodiff", "::mlir::func::FuncOp"> {
  let summary = "Replace tx.grad with reverse-mode derivatives";
  let description = [{
    1. For each `tx.grad %loss wrt (%x...)`, find the ops on a path from some `%x` to
       `%loss` (forward slice of the wrt values ∩ backward slice of the loss): the active
       ops. Integer and i1 values are never active.
    2. Seed the adjoint of `%loss` with 1.0 (f32) and visit the active ops in reverse
       program order, adding each op's vector-Jacobian product to its active operands'
       adjoints (all adjoints are f32 tensors of the operand's shape).
    3. Where an operand was broadcast, its adjoint is summed back over the broadcast
       dimensions (`tx.reduce_sum` with the axis kept, or over everything for rank 0).
    4. Rules: add/sub/neg/mul/div/max (ties go to the left operand), exp, log, tanh,
       select, cast (adjoint cast back to f32), matmul (two matmuls with transposes),
       reduce_sum/mean (broadcast back), reduce_max (every element equal to the maximum
       receives the whole adjoint: with ties the gradients add up; documented in
       docs/numerics.md), logsumexp (g · exp(x − lse)), gather (scatter as
       select(iota == index, g, 0)).
    5. Replace each result of `tx.grad` with the adjoint of its wrt value (zeros when the
       loss does not depend on it) and erase the `tx.grad`.
  }];
  let dependentDialects = ["::lcejit::tx::TxDialect"];
}

def TxSimplify : Pass<"tx-simplify", "::mlir::func::FuncOp"> {
  let summary = "Algebraic simplification of tx ops";
  let description = [{
    Rewrites, applied greedily to a fixed point, then dead pure ops are erased:
    1. `x · 1`, `1 · x`, `x / 1`, `x + 0`, `0 + x`, `x − 0` → `x` (same type and shape only).
    2. `x · 0`-free rules only: zero products are kept (NaN · 0 must stay NaN).
    3. `neg(neg(x))` → `x`; `0 − x` → `neg(x)`; `x − neg(y)` → `x + y`.
    4. `cast(cast(x))` → `cast(x)` when the inner cast widens; identity casts fold away.
    5. `select(c, x, x)` → `x`.
    6. Equal constants are uniqued (tx.constant is ConstantLike and folds to its value).
  }];
  let dependentDialects = ["::lcejit::tx::TxDialect"];
}

def TxFuse : Pass<"tx-fuse", "::mlir::func::FuncOp"> {
  let summary = "Fuse a matmul and its [N, C] consumers into gemm_reduce / gemm_grad";
  let description = [{
    1. Anchors: every `tx.matmul` with `transpose_rhs` (and not `transpose_lhs`) whose lhs
       is [N, K] with dynamic N and rhs [C, K] static: acc = lhs · rhsᵀ is [N, C].
    2. Big values are the [N, C] tensors. A big value is fusible when it is the anchor,
       an `iota` along axis 1, or an elementwise op (add, sub, mul, div, max, neg, exp,
       log, tanh, cmp, select, cast) whose operands are fusible big values or sides
       (row [N, 1], column [1, C] or rank-0 values defined outside).
    3. Forward cluster: row reductions along axis 1 (reduce_sum, reduce_max, mean,
       logsumexp, gather with an [N, 1] index) of fusible big values that depend on the
       anchor become one `tx.gemm_reduce`; its body recomputes the scalar chain with
       arith/math ops (gather becomes sum(select(col == index, x, 0)), mean a sum
       divided by C).
    4. Gradient cluster: a pair `matmul(G, rhs)` and `matmul(G, lhs, transpose_lhs)`
       (either may be missing) where G is a fusible big value depending on the anchor
       becomes one `tx.gemm_grad` whose body computes G; a missing partner is unused.
    5. The fusion is all or nothing per anchor: if some big value that depends on the
       anchor has any other user, nothing is rewritten for that anchor (the planner then
       reports it). Big values that do not depend on the anchor are recomputed in the
       bodies and may keep other users.
    6. The rewritten ops are erased when dead.
  }];
  let dependentDialects = ["::lcejit::tx::TxDialect", "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

def TxPrintPlan : Pass<"tx-print-plan", "::mlir::ModuleOp"> {
  let summary = "Test only: run the planner on each function and print the Program";
  let description = [{
    1. For every func.func, call the planner (compiler/plan/Planner.h) with the options
       below and print `// plan @name` followed by the decisions and the Program JSON.
    2. The IR is not changed.
  }];
  let options = [
    Option<"tokens", "tokens", "int64_t", "8192", "N used to choose the bucket">,
    Option<"arch", "arch", "int", "90", "SM version (90 = sm_90a, 80 = sm_80)">,
    Option<"budgetMb", "budget-mb", "int64_t", "512", "workspace budget in MiB">,
    Option<"exact", "exact", "bool", "false",
           "bf16 gradients: split dZ into hi + lo (exact) instead of one bf16 operand">,
    Option<"mainloop", "mainloop", "std::string", "\"auto\"",
           "bf16 GEMM mainloop: auto (wgmma on sm_90 where it can run), mma or wgmma">,
    Option<"backward", "backward", "std::string", "\"materialized\"",
           "backward schedule: materialized (where it can be derived) or recompute">,
    ListOption<"outputTypes", "output-types", "std::string",
               "dtype each function result is written as (f32, bf16, f16, ...; '-' keeps it)">,
  ];
}

#endif // LCEJIT_TX_PASSES
