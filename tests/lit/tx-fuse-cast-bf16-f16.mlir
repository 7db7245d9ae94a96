// RUN: lcejit-opt %s --tx-fuse | FileCheck %s
//
// Regression test: a tx.cast between the two 16-bit float
// types (bf16 -> f16, both ways) inside a fused chain becomes `arith.truncf %x : bf16
// to f16` in the body (castScalar picks truncf whenever the width does not grow), which
// arith rejects ("operand type 'bf16' and result type 'f16' are cast incompatible").
// Suggested fix: for equal widths, extf to f32 and truncf to the target.
//
// Correct behaviour checked here: the pass succeeds (so the body verified) and the body
// still rounds to bf16 and then to f16.

// CHECK-LABEL: func.func @bf16_to_f16
// CHECK-NOT: tx.matmul
// CHECK: tx.gemm_reduce
// CHECK: arith.truncf %{{.*}} to bf16
// CHECK: arith.truncf %{{.*}} to f16
// CHECK: tx.yield
func.func @bf16_to_f16(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %a = tx.cast %z : tensor<?x1000xf32> -> tensor<?x1000xbf16>
  %b = tx.cast %a : tensor<?x1000xbf16> -> tensor<?x1000xf16>
  %c = tx.cast %b : tensor<?x1000xf16> -> tensor<?x1000xf32>
  %s = tx.reduce_sum %c {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %s : tensor<?x1xf32>
}
