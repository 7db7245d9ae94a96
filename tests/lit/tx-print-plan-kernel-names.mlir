// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="output-types=-,bf16" -o /dev/null | FileCheck %s
//
// Regression test: docs/architecture.md names the kernels of
// the LCE lce_row0, lce_fwd0, lce_row1, lce_dz0, lce_dlhs0, lce_drhs0, lce_cast0,
// lce_row2 (and tests/unit/codegen/TestPrograms.cpp builds them so), but the planner
// numbers forward and backward GEMMs with one counter (gemmCount_), so the backward of
// the one matmul is lce_dz1, lce_dlhs1, lce_drhs1, lce_cast1 (workspace dz1, dz_lo1,
// dlhs_acc1). Either count gemm_reduce and gemm_grad separately or update the docs (then
// delete this test).

// CHECK-LABEL: // plan @lce
// CHECK: "chunk_loop": [
// CHECK-NEXT: "lce_dz0",
// CHECK-NEXT: "lce_dlhs0",
// CHECK-NEXT: "lce_drhs0"
// CHECK-NEXT: ]
// CHECK: "launch": "lce_cast0"
func.func @lce(%H: tensor<?x64xbf16>, %W: tensor<1000x64xbf16>, %y: tensor<?x1xi64>) -> (tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>) {
  %z = tx.matmul %H, %W {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %zy = tx.gather %z, %y {axis = 1 : i64} : tensor<?x1000xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  %l = tx.sub %lse, %zy : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %loss = tx.mean %l : tensor<?x1xf32> -> tensor<f32>
  %dH, %dW = tx.grad %loss wrt (%H, %W) : tensor<f32>, tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32>
  return %loss, %dH, %dW : tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>
}
