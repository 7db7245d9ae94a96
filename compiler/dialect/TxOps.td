//===- TxOps.td - The tx dialect: tensor expressions for the loss ---------===//
//
// Ops on ranked tensors. Every dynamic dimension (`?`) is the one symbolic size N (the
// token count); D, V and everything else are static. Elementwise ops broadcast like
// NumPy with equal ranks (a dimension of 1 stretches) or a rank-0 operand.
// Reductions keep the reduced dimension (size 1) when given an axis and reduce to rank 0
// without one. Scalar work inside fused ops uses upstream `arith` and `math`.
//
//===----------------------------------------------------------------------===//

#ifndef LCEJIT_TX_OPS
#define LCEJIT_TX_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

def Tx_Dialect : Dialect {
  let name = "tx";
  let cppNamespace = "::lcejit::tx";
  let summary = "Tensor expressions for the fused linear cross entropy";
  let description = [{
    Ranked-tensor ops for writing losses over hidden states H [N, D], a weight W [V, D]
    and targets y [N, 1]. `tx.grad` asks for gradients; the autodiff pass replaces it.
    The fusion pass turns a matmul consumed by elementwise ops and row reductions into
    `tx.gemm_reduce`, and the gradient of that matmul into `tx.gemm_grad`.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
  let hasConstantMaterializer = 1;
}

class Tx_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tx_Dialect, mnemonic, traits>;

def Tx_CmpPredicate : I64EnumAttr<"CmpPredicate", "comparison predicate", [
    I64EnumAttrCase<"eq", 0>, I64EnumAttrCase<"ne", 1>, I64EnumAttrCase<"lt", 2>,
    I64EnumAttrCase<"le", 3>, I64EnumAttrCase<"gt", 4>, I64EnumAttrCase<"ge", 5>]> {
  let cppNamespace = "::lcejit::tx";
}


//===----------------------------------------------------------------------===//
// Leaves
//===----------------------------------------------------------------------===//

def Tx_ConstantOp : Tx_Op<"constant", [Pure, ConstantLike]> {
  let summary = "rank-0 constant";
  let arguments = (ins TypedAttrInterface:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tx_IotaOp : Tx_Op<"iota", [Pure]> {
  let summary = "indices 0, 1, ... along an axis of a static shape";
  let arguments = (ins I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tx_DimOp : Tx_Op<"dim", [Pure]> {
  let summary = "size of one dimension (the runtime N for a dynamic one), as i64";
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Matmul and casts
//===----------------------------------------------------------------------===//

def Tx_MatmulOp : Tx_Op<"matmul", [Pure]> {
  let summary = "matrix product op(lhs) · op(rhs), accumulated in f32";
  let description = [{
    `op(x)` is `x` or its transpose. Operands may have different floating-point types
    (the autodiff pass multiplies f32 adjoints by bf16 weights); products are exact and
    accumulated in the f32 result.
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs,
                   UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tx_CastOp : Tx_Op<"cast", [Pure]> {
  let summary = "element type conversion (float<->float, int/i1->float, int<->int)";
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tx_BroadcastOp : Tx_Op<"broadcast", [Pure]> {
  let summary = "stretch size-1 dimensions (or a rank-0 value) to the result shape";
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Tx_BinaryOp<string mnemonic, list<Trait> traits = []>
    : Tx_Op<mnemonic, !listconcat([Pure], traits)> {
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tx_AddOp : Tx_BinaryOp<"add"> { let summary = "elementwise sum"; }
def Tx_SubOp : Tx_BinaryOp<"sub"> { let summary = "elementwise difference"; }
def Tx_MulOp : Tx_BinaryOp<"mul"> { let summary = "elementwise product"; }
def Tx_DivOp : Tx_BinaryOp<"div"> { let summary = "elementwise quotient (floats)"; }
def Tx_MaxOp : Tx_BinaryOp<"max"> { let summary = "elementwise maximum (NaN propagates)"; }

class Tx_UnaryOp<string mnemonic> : Tx_Op<mnemonic, [Pure]> {
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Tx_NegOp : Tx_UnaryOp<"neg"> { let summary = "elementwise negation"; }
def Tx_ExpOp : Tx_UnaryOp<"exp"> { let summary = "elementwise e^x"; }
def Tx_LogOp : Tx_UnaryOp<"log"> { let summary = "elementwise natural log"; }
def Tx_TanhOp : Tx_UnaryOp<"tanh"> { let summary = "elementwise tanh"; }

def Tx_CmpOp : Tx_Op<"cmp", [Pure]> {
  let summary = "elementwise comparison, i1 result";
  let arguments = (ins Tx_CmpPredicate:$predicate, AnyRankedTensor:$lhs,
                   AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $predicate `,` $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tx_SelectOp : Tx_Op<"select", [Pure]> {
  let summary = "elementwise cond ? a : b";
  let arguments = (ins AnyRankedTensor:$cond, AnyRankedTensor:$true_value,
                   AnyRankedTensor:$false_value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $cond `,` $true_value `,` $false_value attr-dict `:` type($cond) `,`
    type($true_value) `,` type($false_value) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions and gather
//===----------------------------------------------------------------------===//

class Tx_ReduceOp<string mnemonic> : Tx_Op<mnemonic, [Pure]> {
  let arguments = (ins AnyRankedTensor:$input, OptionalAttr<I64Attr>:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Tx_ReduceSumOp : Tx_ReduceOp<"reduce_sum"> { let summary = "sum along an axis (kept) or of all"; }
def Tx_ReduceMaxOp : Tx_ReduceOp<"reduce_max"> { let summary = "max along an axis (kept) or of all"; }
def Tx_MeanOp : Tx_ReduceOp<"mean"> { let summary = "mean along an axis (kept) or of all"; }

def Tx_LogSumExpOp : Tx_Op<"logsumexp", [Pure]> {
  let summary = "log(sum(exp(x))) along an axis (kept), computed stably";
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Tx_GatherOp : Tx_Op<"gather", [Pure]> {
  let summary = "pick source[..., index[...], ...] along an axis";
  let description = [{
    `index` has the rank of `source` and the same sizes except along `axis`; the result
    has the shape of `index`. An index outside [0, size) picks 0 (the loss graphs
    select a valid index first; the runtime checks user targets separately).
  }];
  let arguments = (ins AnyRankedTensor:$source, AnyRankedTensor:$index, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $source `,` $index attr-dict `:` type($source) `,` type($index) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Differentiation
//===----------------------------------------------------------------------===//

def Tx_GradOp : Tx_Op<"grad", [Pure]> {
  let summary = "gradients of a rank-0 loss with respect to some values (f32)";
  let description = [{
    Replaced by the reverse-mode autodiff pass (`--tx-autodiff`). Each result has the
    shape of the corresponding `wrt` value and element type f32.
  }];
  let arguments = (ins AnyRankedTensor:$loss, Variadic<AnyRankedTensor>:$wrt);
  let results = (outs Variadic<AnyRankedTensor>:$grads);
  let assemblyFormat = [{
    $loss `wrt` `(` $wrt `)` attr-dict `:` type($loss) `,` type($wrt) `->` type($grads)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fused ops (produced by --tx-fuse)
//===----------------------------------------------------------------------===//

def Tx_YieldOp : Tx_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["GemmReduceOp", "GemmGradOp"]>]> {
  let summary = "the scalar results of a fused epilogue";
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ /* no values */ }]>];
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

def Tx_GemmReduceOp : Tx_Op<"gemm_reduce", [IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "acc = lhs · rhsᵀ, a scalar epilogue per element, row reductions";
  let description = [{
    For every element (i, j) of acc = lhs · rhsᵀ (f32), the body computes scalar values
    from block arguments (acc: f32, col: i64, then one element of each side operand:
    row sides [N, 1] are read at row i, column sides [1, C] at column j, rank-0 sides
    once). The k-th yielded value is reduced along the row with `kinds[k]`; the k-th
    result [N, 1] holds that reduction (`kinds` are "sum", "max" or "logsumexp"). The
    [N, C] tensor is never materialized. The body is isolated from above: constants
    live inside it.
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs,
                   Variadic<AnyRankedTensor>:$sides, StrArrayAttr:$kinds);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $lhs `,` $rhs (`sides` `(` $sides^ `:` type($sides) `)`)? attr-dict `:`
    type($lhs) `,` type($rhs) `->` type($results) $body
  }];
  let hasVerifier = 1;
}

def Tx_GemmGradOp : Tx_Op<"gemm_grad", [IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "dZ = epilogue(lhs · rhsᵀ, ...); returns dZ · rhs and dZᵀ · lhs";
  let description = [{
    The body computes one f32 value dZ(i, j) per element of acc = lhs · rhsᵀ, with the
    block arguments of `tx.gemm_reduce`. The results are the gradients of the two
    operands of the matmul: d_lhs = dZ · rhs ([N, K], f32) and d_rhs = dZᵀ · lhs
    ([C, K], f32). dZ is never materialized whole.
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs,
                   Variadic<AnyRankedTensor>:$sides);
  let results = (outs AnyRankedTensor:$d_lhs, AnyRankedTensor:$d_rhs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $lhs `,` $rhs (`sides` `(` $sides^ `:` type($sides) `)`)? attr-dict `:`
    type($lhs) `,` type($rhs) `->` type($d_lhs) `,` type($d_rhs) $body
  }];
  let hasVerifier = 1;
}

#endif // LCEJIT_TX_OPS
