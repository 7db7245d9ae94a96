// RUN: lcejit-opt %s --tx-fuse | FileCheck %s
//
// Regression test: two row reductions of one anchor where
// the second reads the first (the row entropy lse - sum(softmax · z)) are put into ONE
// tx.gemm_reduce whose side operand is its own result #0; the IR is invalid ("operand
// #2 does not dominate this use").
//
// The fuser puts such roots into waves: one gemm_reduce for the logsumexp, then one for
// the sum, which reads the first one's result as a side.

// CHECK-LABEL: func.func @row_entropy
// CHECK: [[LSE:%.*]] = tx.gemm_reduce %arg0, %arg1 {kinds = ["logsumexp"]}
// CHECK: [[SUM:%.*]] = tx.gemm_reduce %arg0, %arg1 sides([[LSE]] : tensor<?x1xf32>) {kinds = ["sum"]}
// CHECK: math.exp
// CHECK: tx.sub [[LSE]], [[SUM]]
// CHECK-NOT: tx.matmul
// CHECK: return
func.func @row_entropy(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %d = tx.sub %z, %lse : tensor<?x1000xf32>, tensor<?x1xf32> -> tensor<?x1000xf32>
  %p = tx.exp %d : tensor<?x1000xf32> -> tensor<?x1000xf32>
  %pz = tx.mul %p, %z : tensor<?x1000xf32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %s = tx.reduce_sum %pz {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %e = tx.sub %lse, %s : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  return %e : tensor<?x1xf32>
}
