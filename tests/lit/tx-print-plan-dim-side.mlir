// RUN: lcejit-opt %s --tx-print-plan -o /dev/null | FileCheck %s
//
// Regression test: a fused GEMM whose side operand is a
// tx.dim (or a tx.constant) directly is refused with "side operand 1 is not available as
// a stored value": needsStore() returns false for tx.constant / tx.dim before looking
// at GEMM users, and translateBody only finds stored values. --tx-fuse produces such a
// side from any [N, C] expression that reads dim(N) without a cast in between. Fix:
// let translateBody read a tx.dim side as RowCount (and a constant as a Const), or make
// needsStore check GEMM users first.

// CHECK-LABEL: // plan @dim_side
// CHECK: "kind": "gemm_reduce",
func.func @dim_side(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %c: tensor<?x1xi1>) -> tensor<?x1xf32> {
  %n = tx.dim %h {axis = 0 : i64} : tensor<?x64xbf16> -> tensor<i64>
  %r = tx.gemm_reduce %h, %w sides(%c, %n : tensor<?x1xi1>, tensor<i64>) {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64, %ci: i1, %ni: i64):
    %0 = arith.select %ci, %col, %ni : i64
    %1 = arith.sitofp %0 : i64 to f32
    %2 = arith.mulf %acc, %1 : f32
    tx.yield %2 : f32
  }
  return %r : tensor<?x1xf32>
}
