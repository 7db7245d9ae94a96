// RUN: lcejit-opt %s -split-input-file --tx-fuse | FileCheck %s
//
// --tx-fuse on the LCE graphs after `--tx-autodiff --tx-simplify --cse` (inputs copied
// from that pipeline: softcap 30 + ignore_index -100, and a plain variant), then small
// cases for each root kind and each case where the fuser must leave the matmul alone.
// Every fused case has a CHECK-NOT: tx.matmul, so the test fails without the pass.

// CHECK-LABEL: func.func @lce
// CHECK-SAME: (%[[H:.*]]: tensor<?x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>, %[[Y:.*]]: tensor<?x1xi64>)
// CHECK-NOT: tx.matmul
// CHECK: %[[VALID:.*]] = tx.cmp ne, %[[Y]], %{{.*}} : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
// CHECK: %[[YC:.*]] = tx.select %[[VALID]], %[[Y]], %{{.*}} : tensor<?x1xi1>, tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
// CHECK: %[[GV:.*]] = tx.select %[[VALID]], %{{.*}} -> tensor<?x1xf32>
// CHECK-NEXT: %[[NGV:.*]] = tx.neg %[[GV]]
// The forward cluster: logsumexp(z) and gather(z, yc) -> one gemm_reduce, sides = yc.
// CHECK-NEXT: %[[R:.*]]:2 = tx.gemm_reduce %[[H]], %[[W]] sides(%[[YC]] : tensor<?x1xi64>) {kinds = ["logsumexp", "sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32>, tensor<?x1xf32> {
// CHECK-NEXT: ^bb0(%[[ACC:.*]]: f32, %[[COL:.*]]: i64, %[[T:.*]]: i64):
// CHECK-NEXT:   %[[CAP:.*]] = arith.constant 3.000000e+01 : f32
// CHECK-NEXT:   %[[D:.*]] = arith.divf %[[ACC]], %[[CAP]] : f32
// CHECK-NEXT:   %[[TH:.*]] = math.tanh %[[D]] : f32
// CHECK-NEXT:   %[[Z:.*]] = arith.mulf %[[CAP]], %[[TH]] : f32
// CHECK-NEXT:   %[[HIT:.*]] = arith.cmpi eq, %[[COL]], %[[T]] : i64
// CHECK-NEXT:   %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:   %[[PICK:.*]] = arith.select %[[HIT]], %[[Z]], %[[ZERO]] : f32
// CHECK-NEXT:   tx.yield %[[Z]], %[[PICK]] : f32, f32
// CHECK-NEXT: }
// The gradient cluster: both matmuls of dZ -> one gemm_grad; sides are the clamped
// target, -g·valid (one-hot term), g·valid (softmax term) and the logsumexp.
// CHECK-NEXT: %[[DH:.*]], %[[DW:.*]] = tx.gemm_grad %[[H]], %[[W]] sides(%[[YC]], %[[NGV]], %[[GV]], %[[R]]#0 : tensor<?x1xi64>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>) : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
// CHECK-NEXT: ^bb0(%[[ACC2:.*]]: f32, %[[COL2:.*]]: i64, %[[T2:.*]]: i64, %[[ONEHOT:.*]]: f32, %[[SCALE:.*]]: f32, %[[LSE:.*]]: f32):
// CHECK-NEXT:   %[[HIT2:.*]] = arith.cmpi eq, %[[COL2]], %[[T2]] : i64
// CHECK-NEXT:   %[[ZERO2:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:   %[[G1:.*]] = arith.select %[[HIT2]], %[[ONEHOT]], %[[ZERO2]] : f32
// CHECK-NEXT:   %[[CAP2:.*]] = arith.constant 3.000000e+01 : f32
// CHECK-NEXT:   %[[D2:.*]] = arith.divf %[[ACC2]], %[[CAP2]] : f32
// CHECK-NEXT:   %[[TH2:.*]] = math.tanh %[[D2]] : f32
// CHECK-NEXT:   %[[Z2:.*]] = arith.mulf %[[CAP2]], %[[TH2]] : f32
// CHECK-NEXT:   %[[ZL:.*]] = arith.subf %[[Z2]], %[[LSE]] : f32
// CHECK-NEXT:   %[[P:.*]] = math.exp %[[ZL]] : f32
// CHECK-NEXT:   %[[G2:.*]] = arith.mulf %[[SCALE]], %[[P]] : f32
// CHECK-NEXT:   %[[DZ:.*]] = arith.addf %[[G1]], %[[G2]] : f32
// CHECK-NEXT:   %[[DT:.*]] = arith.mulf %[[DZ]], %[[CAP2]] : f32
// CHECK-NEXT:   %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:   %[[T2SQ:.*]] = arith.mulf %[[TH2]], %[[TH2]] : f32
// CHECK-NEXT:   %[[DTANH:.*]] = arith.subf %[[ONE]], %[[T2SQ]] : f32
// CHECK-NEXT:   %[[DD:.*]] = arith.mulf %[[DT]], %[[DTANH]] : f32
// CHECK-NEXT:   %[[DACC:.*]] = arith.divf %[[DD]], %[[CAP2]] : f32
// CHECK-NEXT:   tx.yield %[[DACC]] : f32
// CHECK-NEXT: }
// The loss rows read the two reductions; the [N, 1000] ops are gone.
// CHECK-NEXT: %[[L:.*]] = tx.sub %[[R]]#0, %[[R]]#1 : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
// CHECK-NOT: tensor<?x1000x
// CHECK: return %{{.*}}, %[[DH]], %[[DW]] : tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>
func.func @lce(%arg0: tensor<?x64xbf16>, %arg1: tensor<1000x64xbf16>, %arg2: tensor<?x1xi64>) -> (tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>) {
  %0 = tx.matmul %arg0, %arg1 {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %1 = tx.constant 3.000000e+01 : f32 : tensor<f32>
  %2 = tx.div %0, %1 : tensor<?x1000xf32>, tensor<f32> -> tensor<?x1000xf32>
  %3 = tx.tanh %2 : tensor<?x1000xf32> -> tensor<?x1000xf32>
  %4 = tx.mul %1, %3 : tensor<f32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %5 = tx.logsumexp %4 {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %6 = tx.constant -100 : i64 : tensor<i64>
  %7 = tx.cmp ne, %arg2, %6 : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
  %8 = tx.constant 0 : i64 : tensor<i64>
  %9 = tx.select %7, %arg2, %8 : tensor<?x1xi1>, tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  %10 = tx.gather %4, %9 {axis = 1 : i64} : tensor<?x1000xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  %11 = tx.sub %5, %10 : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %12 = tx.constant 0.000000e+00 : f32 : tensor<f32>
  %13 = tx.select %7, %11, %12 : tensor<?x1xi1>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %14 = tx.reduce_sum %13 : tensor<?x1xf32> -> tensor<f32>
  %15 = tx.cast %7 : tensor<?x1xi1> -> tensor<?x1xf32>
  %16 = tx.reduce_sum %15 : tensor<?x1xf32> -> tensor<f32>
  %17 = tx.constant 1.000000e+00 : f32 : tensor<f32>
  %18 = tx.max %16, %17 : tensor<f32>, tensor<f32> -> tensor<f32>
  %19 = tx.div %14, %18 : tensor<f32>, tensor<f32> -> tensor<f32>
  %20 = tx.div %17, %18 : tensor<f32>, tensor<f32> -> tensor<f32>
  %21 = tx.broadcast %20 : tensor<f32> -> tensor<?x1xf32>
  %22 = tx.select %7, %21, %12 : tensor<?x1xi1>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %23 = tx.neg %22 : tensor<?x1xf32> -> tensor<?x1xf32>
  %24 = tx.iota {axis = 1 : i64} : tensor<1x1000xi64>
  %25 = tx.cmp eq, %24, %9 : tensor<1x1000xi64>, tensor<?x1xi64> -> tensor<?x1000xi1>
  %26 = tx.select %25, %23, %12 : tensor<?x1000xi1>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1000xf32>
  %27 = tx.sub %4, %5 : tensor<?x1000xf32>, tensor<?x1xf32> -> tensor<?x1000xf32>
  %28 = tx.exp %27 : tensor<?x1000xf32> -> tensor<?x1000xf32>
  %29 = tx.mul %22, %28 : tensor<?x1xf32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %30 = tx.add %26, %29 : tensor<?x1000xf32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %31 = tx.mul %30, %1 : tensor<?x1000xf32>, tensor<f32> -> tensor<?x1000xf32>
  %32 = tx.mul %3, %3 : tensor<?x1000xf32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %33 = tx.sub %17, %32 : tensor<f32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %34 = tx.mul %31, %33 : tensor<?x1000xf32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %35 = tx.div %34, %1 : tensor<?x1000xf32>, tensor<f32> -> tensor<?x1000xf32>
  %36 = tx.matmul %35, %arg1 : tensor<?x1000xf32>, tensor<1000x64xbf16> -> tensor<?x64xf32>
  %37 = tx.matmul %35, %arg0 {transpose_lhs} : tensor<?x1000xf32>, tensor<?x64xbf16> -> tensor<1000x64xf32>
  return %19, %36, %37 : tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>
}

// -----

// No softcap, no ignore_index, mean over rows: the body reads acc directly, and the
// target is a side as it is (no select before it).
// CHECK-LABEL: func.func @lce_plain
// CHECK-SAME: (%[[H:.*]]: tensor<?x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>, %[[Y:.*]]: tensor<?x1xi64>)
// CHECK-NOT: tx.matmul
// CHECK: %[[R:.*]]:2 = tx.gemm_reduce %[[H]], %[[W]] sides(%[[Y]] : tensor<?x1xi64>) {kinds = ["logsumexp", "sum"]}
// CHECK-NEXT: ^bb0(%[[ACC:.*]]: f32, %[[COL:.*]]: i64, %[[T:.*]]: i64):
// CHECK-NEXT:   %[[HIT:.*]] = arith.cmpi eq, %[[COL]], %[[T]] : i64
// CHECK-NEXT:   %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:   %[[PICK:.*]] = arith.select %[[HIT]], %[[ACC]], %[[ZERO]] : f32
// CHECK-NEXT:   tx.yield %[[ACC]], %[[PICK]] : f32, f32
// CHECK-NEXT: }
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[NG:.*]] = tx.neg %[[G]]
// CHECK-NEXT: %[[DH:.*]], %[[DW:.*]] = tx.gemm_grad %[[H]], %[[W]] sides(%[[Y]], %[[NG]], %[[G]], %[[R]]#0 : tensor<?x1xi64>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>)
// CHECK-NEXT: ^bb0(%[[ACC2:.*]]: f32, %[[COL2:.*]]: i64, %[[T2:.*]]: i64, %[[ONEHOT:.*]]: f32, %[[SCALE:.*]]: f32, %[[LSE:.*]]: f32):
// CHECK-NEXT:   %[[HIT2:.*]] = arith.cmpi eq, %[[COL2]], %[[T2]] : i64
// CHECK-NEXT:   %[[ZERO2:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:   %[[G1:.*]] = arith.select %[[HIT2]], %[[ONEHOT]], %[[ZERO2]] : f32
// CHECK-NEXT:   %[[ZL:.*]] = arith.subf %[[ACC2]], %[[LSE]] : f32
// CHECK-NEXT:   %[[P:.*]] = math.exp %[[ZL]] : f32
// CHECK-NEXT:   %[[G2:.*]] = arith.mulf %[[SCALE]], %[[P]] : f32
// CHECK-NEXT:   %[[DZ:.*]] = arith.addf %[[G1]], %[[G2]] : f32
// CHECK-NEXT:   tx.yield %[[DZ]] : f32
// CHECK-NEXT: }
// CHECK-NOT: tensor<?x1000x
// CHECK: return %{{.*}}, %[[DH]], %[[DW]]
func.func @lce_plain(%arg0: tensor<?x64xbf16>, %arg1: tensor<1000x64xbf16>, %arg2: tensor<?x1xi64>) -> (tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>) {
  %0 = tx.matmul %arg0, %arg1 {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %1 = tx.logsumexp %0 {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %2 = tx.gather %0, %arg2 {axis = 1 : i64} : tensor<?x1000xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  %3 = tx.sub %1, %2 : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %4 = tx.mean %3 : tensor<?x1xf32> -> tensor<f32>
  %5 = tx.constant 1.000000e+00 : f32 : tensor<f32>
  %6 = tx.dim %3 {axis = 0 : i64} : tensor<?x1xf32> -> tensor<i64>
  %7 = tx.cast %6 : tensor<i64> -> tensor<f32>
  %8 = tx.div %5, %7 : tensor<f32>, tensor<f32> -> tensor<f32>
  %9 = tx.broadcast %8 : tensor<f32> -> tensor<?x1xf32>
  %10 = tx.neg %9 : tensor<?x1xf32> -> tensor<?x1xf32>
  %11 = tx.iota {axis = 1 : i64} : tensor<1x1000xi64>
  %12 = tx.cmp eq, %11, %arg2 : tensor<1x1000xi64>, tensor<?x1xi64> -> tensor<?x1000xi1>
  %13 = tx.constant 0.000000e+00 : f32 : tensor<f32>
  %14 = tx.select %12, %10, %13 : tensor<?x1000xi1>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1000xf32>
  %15 = tx.sub %0, %1 : tensor<?x1000xf32>, tensor<?x1xf32> -> tensor<?x1000xf32>
  %16 = tx.exp %15 : tensor<?x1000xf32> -> tensor<?x1000xf32>
  %17 = tx.mul %9, %16 : tensor<?x1xf32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %18 = tx.add %14, %17 : tensor<?x1000xf32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %19 = tx.matmul %18, %arg1 : tensor<?x1000xf32>, tensor<1000x64xbf16> -> tensor<?x64xf32>
  %20 = tx.matmul %18, %arg0 {transpose_lhs} : tensor<?x1000xf32>, tensor<?x64xbf16> -> tensor<1000x64xf32>
  return %4, %19, %20 : tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>
}

// -----

// mean along axis 1 becomes a "sum" kind followed by a division by C = 1000; a column
// side [1, C] (a bias) is read per column; both roots share one body value.
// CHECK-LABEL: func.func @mean_max_bias
// CHECK-SAME: (%[[H:.*]]: tensor<?x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>, %[[B:.*]]: tensor<1x1000xf32>)
// CHECK-NOT: tx.matmul
// CHECK: %[[R:.*]]:2 = tx.gemm_reduce %[[H]], %[[W]] sides(%[[B]] : tensor<1x1000xf32>) {kinds = ["sum", "max"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32>, tensor<?x1xf32> {
// CHECK-NEXT: ^bb0(%[[ACC:.*]]: f32, %{{.*}}: i64, %[[BJ:.*]]: f32):
// CHECK-NEXT:   %[[ZB:.*]] = arith.addf %[[ACC]], %[[BJ]] : f32
// CHECK-NEXT:   tx.yield %[[ZB]], %[[ZB]] : f32, f32
// CHECK-NEXT: }
// CHECK-NEXT: %[[C:.*]] = tx.constant 1.000000e+03 : f32 : tensor<f32>
// CHECK-NEXT: %[[M:.*]] = tx.div %[[R]]#0, %[[C]] : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
// CHECK-NOT: tx.mean
// CHECK-NOT: tx.reduce_max
// CHECK: return %[[M]], %[[R]]#1
func.func @mean_max_bias(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %b: tensor<1x1000xf32>) -> (tensor<?x1xf32>, tensor<?x1xf32>) {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %zb = tx.add %z, %b : tensor<?x1000xf32>, tensor<1x1000xf32> -> tensor<?x1000xf32>
  %m = tx.mean %zb {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %x = tx.reduce_max %zb {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %m, %x : tensor<?x1xf32>, tensor<?x1xf32>
}

// -----

// An explicit iota along the columns is recomputed in the body from the col argument
// (no side), including its truncation to i32.
// CHECK-LABEL: func.func @column_iota
// CHECK-SAME: (%[[H:.*]]: tensor<?x64xf32>, %[[W:.*]]: tensor<8x64xf32>, %[[Y:.*]]: tensor<?x1xi32>)
// CHECK-NOT: tx.matmul
// CHECK-NOT: tx.iota
// CHECK: tx.gemm_reduce %[[H]], %[[W]] sides(%[[Y]] : tensor<?x1xi32>) {kinds = ["sum"]}
// CHECK-NEXT: ^bb0(%[[ACC:.*]]: f32, %[[COL:.*]]: i64, %[[YI:.*]]: i32):
// CHECK-NEXT:   %[[C32:.*]] = arith.trunci %[[COL]] : i64 to i32
// CHECK-NEXT:   %[[LT:.*]] = arith.cmpi slt, %[[C32]], %[[YI]] : i32
// CHECK-NEXT:   %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:   %[[SEL:.*]] = arith.select %[[LT]], %[[ACC]], %[[ZERO]] : f32
// CHECK-NEXT:   tx.yield %[[SEL]] : f32
func.func @column_iota(%h: tensor<?x64xf32>, %w: tensor<8x64xf32>, %y: tensor<?x1xi32>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xf32>, tensor<8x64xf32> -> tensor<?x8xf32>
  %i = tx.iota {axis = 1 : i64} : tensor<1x8xi32>
  %lt = tx.cmp lt, %i, %y : tensor<1x8xi32>, tensor<?x1xi32> -> tensor<?x8xi1>
  %zero = tx.constant 0.0 : f32 : tensor<f32>
  %s = tx.select %lt, %z, %zero : tensor<?x8xi1>, tensor<?x8xf32>, tensor<f32> -> tensor<?x8xf32>
  %r = tx.reduce_sum %s {axis = 1 : i64} : tensor<?x8xf32> -> tensor<?x1xf32>
  return %r : tensor<?x1xf32>
}

// -----

// A gradient cluster with only the d_lhs matmul: d_rhs of the gemm_grad stays unused.
// CHECK-LABEL: func.func @grad_only_dlhs
// CHECK-SAME: (%[[H:.*]]: tensor<?x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>, %[[G:.*]]: tensor<?x1xf32>)
// CHECK-NOT: tx.matmul
// CHECK: %[[DH:.*]], %{{.*}} = tx.gemm_grad %[[H]], %[[W]] sides(%[[G]] : tensor<?x1xf32>)
// CHECK-NEXT: ^bb0(%[[ACC:.*]]: f32, %{{.*}}: i64, %[[GI:.*]]: f32):
// CHECK-NEXT:   %[[E:.*]] = math.exp %[[ACC]] : f32
// CHECK-NEXT:   %[[D:.*]] = arith.mulf %[[GI]], %[[E]] : f32
// CHECK-NEXT:   tx.yield %[[D]] : f32
// CHECK-NEXT: }
// CHECK-NEXT: return %[[DH]] : tensor<?x64xf32>
func.func @grad_only_dlhs(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %g: tensor<?x1xf32>) -> tensor<?x64xf32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %e = tx.exp %z : tensor<?x1000xf32> -> tensor<?x1000xf32>
  %d = tx.mul %g, %e : tensor<?x1xf32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %dh = tx.matmul %d, %w : tensor<?x1000xf32>, tensor<1000x64xbf16> -> tensor<?x64xf32>
  return %dh : tensor<?x64xf32>
}

// -----

// Two anchors in one function become two independent gemm_reduce ops.
// CHECK-LABEL: func.func @two_anchors
// CHECK-SAME: (%[[H:.*]]: tensor<?x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>, %[[V:.*]]: tensor<500x64xbf16>)
// CHECK-NOT: tx.matmul
// CHECK: %[[A:.*]] = tx.gemm_reduce %[[H]], %[[W]] {kinds = ["logsumexp"]}
// CHECK: %[[B:.*]] = tx.gemm_reduce %[[H]], %[[V]] {kinds = ["max"]}
// CHECK: return %[[A]], %[[B]]
func.func @two_anchors(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %v: tensor<500x64xbf16>) -> (tensor<?x1xf32>, tensor<?x1xf32>) {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %a = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %u = tx.matmul %h, %v {transpose_rhs} : tensor<?x64xbf16>, tensor<500x64xbf16> -> tensor<?x500xf32>
  %b = tx.reduce_max %u {axis = 1 : i64} : tensor<?x500xf32> -> tensor<?x1xf32>
  return %a, %b : tensor<?x1xf32>, tensor<?x1xf32>
}

// -----

// Must not fire (all or nothing): a big value derived from the matmul is also returned,
// so even the logsumexp root stays unfused.
// CHECK-LABEL: func.func @big_value_returned
// CHECK-NOT: tx.gemm_reduce
// CHECK: %[[Z:.*]] = tx.matmul %{{.*}}, %{{.*}} {transpose_rhs}
// CHECK-NEXT: %[[E:.*]] = tx.exp %[[Z]]
// CHECK-NEXT: %[[L:.*]] = tx.logsumexp %[[Z]] {axis = 1 : i64}
// CHECK-NEXT: return %[[L]], %[[E]]
func.func @big_value_returned(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> (tensor<?x1xf32>, tensor<?x1000xf32>) {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %e = tx.exp %z : tensor<?x1000xf32> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse, %e : tensor<?x1xf32>, tensor<?x1000xf32>
}

// -----

// Must not fire: the anchor itself is returned.
// CHECK-LABEL: func.func @anchor_returned
// CHECK-NOT: tx.gemm_reduce
// CHECK: %[[Z:.*]] = tx.matmul
// CHECK-NEXT: %[[L:.*]] = tx.logsumexp %[[Z]]
// CHECK-NEXT: return %[[L]], %[[Z]]
func.func @anchor_returned(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> (tensor<?x1xf32>, tensor<?x1000xf32>) {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse, %z : tensor<?x1xf32>, tensor<?x1000xf32>
}

// -----

// Must not fire: a reduction along axis 0 (over rows) is not a root, and it uses the
// [N, C] value, so nothing is fused.
// CHECK-LABEL: func.func @reduce_axis0
// CHECK-NOT: tx.gemm_reduce
// CHECK: %[[Z:.*]] = tx.matmul
// CHECK-NEXT: %[[L:.*]] = tx.logsumexp %[[Z]] {axis = 1 : i64}
// CHECK-NEXT: %[[C:.*]] = tx.reduce_sum %[[Z]] {axis = 0 : i64}
// CHECK-NEXT: return %[[L]], %[[C]]
func.func @reduce_axis0(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> (tensor<?x1xf32>, tensor<1x1000xf32>) {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %c = tx.reduce_sum %z {axis = 0 : i64} : tensor<?x1000xf32> -> tensor<1x1000xf32>
  return %lse, %c : tensor<?x1xf32>, tensor<1x1000xf32>
}

// -----

// Must not fire: a full reduction (no axis) is not a row reduction.
// CHECK-LABEL: func.func @reduce_all
// CHECK-NOT: tx.gemm_reduce
// CHECK: %[[Z:.*]] = tx.matmul
// CHECK-NEXT: tx.reduce_sum %[[Z]] : tensor<?x1000xf32> -> tensor<f32>
func.func @reduce_all(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> tensor<f32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %s = tx.reduce_sum %z : tensor<?x1000xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Must not fire: without transpose_rhs the matmul is not an anchor (rhs must be [C, K]).
// CHECK-LABEL: func.func @no_transpose_rhs
// CHECK-NOT: tx.gemm_reduce
// CHECK: %[[Z:.*]] = tx.matmul %{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<64x1000xbf16> -> tensor<?x1000xf32>
// CHECK-NEXT: tx.logsumexp %[[Z]]
func.func @no_transpose_rhs(%h: tensor<?x64xbf16>, %w: tensor<64x1000xbf16>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w : tensor<?x64xbf16>, tensor<64x1000xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse : tensor<?x1xf32>
}

// -----

// Must not fire: transpose_lhs is not an anchor either.
// CHECK-LABEL: func.func @transpose_lhs
// CHECK-NOT: tx.gemm_reduce
// CHECK: %[[Z:.*]] = tx.matmul %{{.*}}, %{{.*}} {transpose_lhs, transpose_rhs}
// CHECK-NEXT: tx.logsumexp %[[Z]]
func.func @transpose_lhs(%h: tensor<64x?xbf16>, %w: tensor<1000x64xbf16>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w {transpose_lhs, transpose_rhs} : tensor<64x?xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse : tensor<?x1xf32>
}

// -----

// Must not fire: a static N is not the token dimension.
// CHECK-LABEL: func.func @static_n
// CHECK-NOT: tx.gemm_reduce
// CHECK: %[[Z:.*]] = tx.matmul %{{.*}}, %{{.*}} {transpose_rhs} : tensor<8x64xbf16>, tensor<1000x64xbf16> -> tensor<8x1000xf32>
// CHECK-NEXT: tx.logsumexp %[[Z]]
func.func @static_n(%h: tensor<8x64xbf16>, %w: tensor<1000x64xbf16>) -> tensor<8x1xf32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<8x64xbf16>, tensor<1000x64xbf16> -> tensor<8x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<8x1000xf32> -> tensor<8x1xf32>
  return %lse : tensor<8x1xf32>
}

// -----

// Must not fire: the fused GEMM needs one operand type (f32 lhs, bf16 rhs here).
// CHECK-LABEL: func.func @mixed_operand_types
// CHECK-NOT: tx.gemm_reduce
// CHECK: %[[Z:.*]] = tx.matmul %{{.*}}, %{{.*}} {transpose_rhs} : tensor<?x64xf32>, tensor<1000x64xbf16>
// CHECK-NEXT: tx.logsumexp %[[Z]]
func.func @mixed_operand_types(%h: tensor<?x64xf32>, %w: tensor<1000x64xbf16>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xf32>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse : tensor<?x1xf32>
}

// -----

// Must not fire: a row reduction with a bf16 result is not a root (fused results are
// f32), so its bf16 input escapes and the cluster is dropped.
// CHECK-LABEL: func.func @bf16_root
// CHECK-NOT: tx.gemm_reduce
// CHECK: %[[Z:.*]] = tx.matmul
// CHECK-NEXT: %[[C:.*]] = tx.cast %[[Z]] : tensor<?x1000xf32> -> tensor<?x1000xbf16>
// CHECK-NEXT: tx.reduce_sum %[[C]] {axis = 1 : i64} : tensor<?x1000xbf16> -> tensor<?x1xbf16>
func.func @bf16_root(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> tensor<?x1xbf16> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %zb = tx.cast %z : tensor<?x1000xf32> -> tensor<?x1000xbf16>
  %s = tx.reduce_sum %zb {axis = 1 : i64} : tensor<?x1000xbf16> -> tensor<?x1xbf16>
  return %s : tensor<?x1xbf16>
}

// -----

// Must not fire: a [N, C] operand that is not a side (another matmul's result) makes
// the elementwise op unfusible.
// CHECK-LABEL: func.func @two_big_inputs
// CHECK-NOT: tx.gemm_reduce
// CHECK: tx.matmul
// CHECK: tx.matmul
// CHECK: tx.add
// CHECK: tx.logsumexp
func.func @two_big_inputs(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %v: tensor<1000x64xbf16>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %u = tx.matmul %h, %v {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %s = tx.add %z, %u : tensor<?x1000xf32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %s {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse : tensor<?x1xf32>
}
