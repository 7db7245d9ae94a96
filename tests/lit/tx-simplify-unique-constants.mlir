// RUN: lcejit-opt %s --tx-simplify | FileCheck %s
//
// Regression test: Passes.td promises for --tx-simplify
// "6. Constants are uniqued (CSE does the rest in the pipeline)", but equal tx.constant
// ops survive the pass: tx.constant has neither the ConstantLike trait nor a folder, so
// the greedy driver's constant folder never sees it. Either implement it (ConstantLike +
// fold + the dialect's materializeConstant) or drop rule 6 from the description (then
// delete this test).

// CHECK-LABEL: func.func @equal_constants
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK: %[[C:.*]] = tx.constant 2.000000e+00 : f32 : tensor<f32>
// CHECK-NOT: tx.constant
// CHECK: tx.mul %[[X]], %[[C]]
// CHECK: tx.mul %[[X]], %[[C]]
func.func @equal_constants(%x: tensor<?x1xf32>) -> (tensor<?x1xf32>, tensor<?x1xf32>) {
  %c1 = tx.constant 2.0 : f32 : tensor<f32>
  %c2 = tx.constant 2.0 : f32 : tensor<f32>
  %a = tx.mul %x, %c1 : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %b = tx.mul %x, %c2 : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  return %a, %b : tensor<?x1xf32>, tensor<?x1xf32>
}
