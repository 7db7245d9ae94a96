// RUN: lcejit-opt %s -split-input-file --tx-autodiff -verify-diagnostics | FileCheck %s
//
// The derivative IR of --tx-autodiff, rule by rule, before any simplification (so the
// seed `broadcast(1.0)` and the `g * ...` products are visible). Every function except
// @no_grad starts with a tx.grad, and the CHECK-NOT after each label makes the test fail
// when the pass does not run. The last cases must fail with a diagnostic.

// CHECK-LABEL: func.func @mul
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>, %[[Y:.*]]: tensor<?x4xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[ONE:.*]] = tx.constant 1.000000e+00 : f32 : tensor<f32>
// CHECK-NEXT: %[[G:.*]] = tx.broadcast %[[ONE]] : tensor<f32> -> tensor<?x4xf32>
// CHECK-NEXT: %[[DX:.*]] = tx.mul %[[G]], %[[Y]] : tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?x4xf32>
// CHECK-NEXT: %[[DY:.*]] = tx.mul %[[G]], %[[X]] : tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?x4xf32>
// CHECK-NEXT: return %[[DX]], %[[DY]]
func.func @mul(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %p = tx.mul %x, %y : tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?x4xf32>
  %l = tx.reduce_sum %p : tensor<?x4xf32> -> tensor<f32>
  %dx, %dy = tx.grad %l wrt (%x, %y) : tensor<f32>, tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?x4xf32>, tensor<?x4xf32>
  return %dx, %dy : tensor<?x4xf32>, tensor<?x4xf32>
}

// A value used twice accumulates its contributions with tx.add.
// CHECK-LABEL: func.func @square
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[G:.*]] = tx.broadcast
// CHECK-NEXT: %[[A:.*]] = tx.mul %[[G]], %[[X]]
// CHECK-NEXT: %[[B:.*]] = tx.mul %[[G]], %[[X]]
// CHECK-NEXT: %[[S:.*]] = tx.add %[[A]], %[[B]] : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
// CHECK-NEXT: return %[[S]]
func.func @square(%x: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %0 = tx.mul %x, %x : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %0 : tensor<?x1xf32> -> tensor<f32>
  %g = tx.grad %l wrt (%x) : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>
  return %g : tensor<?x1xf32>
}

// d(x/y)/dx = g / y; d(x/y)/dy = -(g * (x/y)) / y, summed over the broadcast to rank 0.
// CHECK-LABEL: func.func @div
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>, %[[Y:.*]]: tensor<f32>)
// CHECK-NOT: tx.grad
// CHECK: %[[Q:.*]] = tx.div %[[X]], %[[Y]]
// CHECK: %[[G:.*]] = tx.broadcast
// CHECK-NEXT: %[[DX:.*]] = tx.div %[[G]], %[[Y]] : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[GQ:.*]] = tx.mul %[[G]], %[[Q]]
// CHECK-NEXT: %[[T:.*]] = tx.div %[[GQ]], %[[Y]]
// CHECK-NEXT: %[[N:.*]] = tx.neg %[[T]]
// CHECK-NEXT: %[[DY:.*]] = tx.reduce_sum %[[N]] : tensor<?x1xf32> -> tensor<f32>
// CHECK-NEXT: return %[[DX]], %[[DY]]
func.func @div(%x: tensor<?x1xf32>, %y: tensor<f32>) -> (tensor<?x1xf32>, tensor<f32>) {
  %q = tx.div %x, %y : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %q : tensor<?x1xf32> -> tensor<f32>
  %dx, %dy = tx.grad %l wrt (%x, %y) : tensor<f32>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>, tensor<f32>
  return %dx, %dy : tensor<?x1xf32>, tensor<f32>
}

// Broadcast operands get their adjoints summed back: [N, 1] along axis 1, [1, 4] along
// axis 0, rank 0 over everything; sub negates the right operand's adjoint.
// CHECK-LABEL: func.func @unbroadcast
// CHECK-SAME: (%[[A:.*]]: tensor<?x1xf32>, %[[B:.*]]: tensor<1x4xf32>, %[[S:.*]]: tensor<f32>)
// CHECK-NOT: tx.grad
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x4xf32>
// CHECK-NEXT: %[[N:.*]] = tx.neg %[[G]]
// CHECK-NEXT: %[[DS:.*]] = tx.reduce_sum %[[N]] : tensor<?x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[DA:.*]] = tx.reduce_sum %[[G]] {axis = 1 : i64} : tensor<?x4xf32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[DB:.*]] = tx.reduce_sum %[[G]] {axis = 0 : i64} : tensor<?x4xf32> -> tensor<1x4xf32>
// CHECK-NEXT: return %[[DA]], %[[DB]], %[[DS]]
func.func @unbroadcast(%a: tensor<?x1xf32>, %b: tensor<1x4xf32>, %s: tensor<f32>) -> (tensor<?x1xf32>, tensor<1x4xf32>, tensor<f32>) {
  %0 = tx.add %a, %b : tensor<?x1xf32>, tensor<1x4xf32> -> tensor<?x4xf32>
  %1 = tx.sub %0, %s : tensor<?x4xf32>, tensor<f32> -> tensor<?x4xf32>
  %l = tx.reduce_sum %1 : tensor<?x4xf32> -> tensor<f32>
  %g:3 = tx.grad %l wrt (%a, %b, %s) : tensor<f32>, tensor<?x1xf32>, tensor<1x4xf32>, tensor<f32> -> tensor<?x1xf32>, tensor<1x4xf32>, tensor<f32>
  return %g#0, %g#1, %g#2 : tensor<?x1xf32>, tensor<1x4xf32>, tensor<f32>
}

// tanh' = 1 - t^2, with the bf16 forward value cast to f32; the cast's adjoint passes
// through unchanged.
// CHECK-LABEL: func.func @tanh
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xbf16>)
// CHECK-NOT: tx.grad
// CHECK: %[[T:.*]] = tx.tanh %[[X]] : tensor<?x1xbf16> -> tensor<?x1xbf16>
// CHECK: %[[G:.*]] = tx.broadcast
// CHECK-NEXT: %[[T32:.*]] = tx.cast %[[T]] : tensor<?x1xbf16> -> tensor<?x1xf32>
// CHECK-NEXT: %[[T2:.*]] = tx.mul %[[T32]], %[[T32]]
// CHECK-NEXT: %[[ONE:.*]] = tx.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[D:.*]] = tx.sub %[[ONE]], %[[T2]] : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[DX:.*]] = tx.mul %[[G]], %[[D]]
// CHECK-NEXT: return %[[DX]] : tensor<?x1xf32>
func.func @tanh(%x: tensor<?x1xbf16>) -> tensor<?x1xf32> {
  %t = tx.tanh %x : tensor<?x1xbf16> -> tensor<?x1xbf16>
  %c = tx.cast %t : tensor<?x1xbf16> -> tensor<?x1xf32>
  %l = tx.reduce_sum %c : tensor<?x1xf32> -> tensor<f32>
  %dx = tx.grad %l wrt (%x) : tensor<f32>, tensor<?x1xbf16> -> tensor<?x1xf32>
  return %dx : tensor<?x1xf32>
}

// exp' = exp (the forward result), log' = 1 / x, neg' = -1.
// CHECK-LABEL: func.func @exp_log_neg
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[E:.*]] = tx.exp %[[X]]
// CHECK: %[[G:.*]] = tx.broadcast
// CHECK-NEXT: %[[GN:.*]] = tx.neg %[[G]]
// CHECK-NEXT: %[[GL:.*]] = tx.div %[[GN]], %[[E]]
// CHECK-NEXT: %[[GE:.*]] = tx.mul %[[GL]], %[[E]]
// CHECK-NEXT: return %[[GE]]
func.func @exp_log_neg(%x: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %0 = tx.exp %x : tensor<?x1xf32> -> tensor<?x1xf32>
  %1 = tx.log %0 : tensor<?x1xf32> -> tensor<?x1xf32>
  %2 = tx.neg %1 : tensor<?x1xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %2 : tensor<?x1xf32> -> tensor<f32>
  %g = tx.grad %l wrt (%x) : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>
  return %g : tensor<?x1xf32>
}

// select routes the adjoint by the condition; max gives ties to the left operand.
// CHECK-LABEL: func.func @max_select
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>, %[[Y:.*]]: tensor<?x1xf32>, %[[C:.*]]: tensor<?x1xi1>)
// CHECK-NOT: tx.grad
// CHECK: %[[G:.*]] = tx.broadcast
// CHECK-NEXT: %[[Z:.*]] = tx.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[GM:.*]] = tx.select %[[C]], %[[G]], %[[Z]]
// CHECK-NEXT: %[[GY1:.*]] = tx.select %[[C]], %[[Z]], %[[G]]
// CHECK-NEXT: %[[L:.*]] = tx.cmp ge, %[[X]], %[[Y]] : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xi1>
// CHECK-NEXT: %[[Z2:.*]] = tx.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[DX:.*]] = tx.select %[[L]], %[[GM]], %[[Z2]]
// CHECK-NEXT: %[[GY2:.*]] = tx.select %[[L]], %[[Z2]], %[[GM]]
// CHECK-NEXT: %[[DY:.*]] = tx.add %[[GY1]], %[[GY2]]
// CHECK-NEXT: return %[[DX]], %[[DY]]
func.func @max_select(%x: tensor<?x1xf32>, %y: tensor<?x1xf32>, %c: tensor<?x1xi1>) -> (tensor<?x1xf32>, tensor<?x1xf32>) {
  %0 = tx.max %x, %y : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %1 = tx.select %c, %0, %y : tensor<?x1xi1>, tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %1 : tensor<?x1xf32> -> tensor<f32>
  %g:2 = tx.grad %l wrt (%x, %y) : tensor<f32>, tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>, tensor<?x1xf32>
  return %g#0, %g#1 : tensor<?x1xf32>, tensor<?x1xf32>
}

// logsumexp' = exp(x - lse), scaled by the row adjoint.
// CHECK-LABEL: func.func @logsumexp
// CHECK-SAME: (%[[Z:.*]]: tensor<?x8xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[LSE:.*]] = tx.logsumexp %[[Z]] {axis = 1 : i64}
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[D:.*]] = tx.sub %[[Z]], %[[LSE]] : tensor<?x8xf32>, tensor<?x1xf32> -> tensor<?x8xf32>
// CHECK-NEXT: %[[P:.*]] = tx.exp %[[D]]
// CHECK-NEXT: %[[DZ:.*]] = tx.mul %[[G]], %[[P]] : tensor<?x1xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT: return %[[DZ]]
func.func @logsumexp(%z: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x8xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %lse : tensor<?x1xf32> -> tensor<f32>
  %dz = tx.grad %l wrt (%z) : tensor<f32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %dz : tensor<?x8xf32>
}

// gather scatters its adjoint as select(iota == index, g, 0); the iota has the index's
// element type.
// CHECK-LABEL: func.func @gather
// CHECK-SAME: (%[[Z:.*]]: tensor<?x8xf32>, %[[Y:.*]]: tensor<?x1xi32>)
// CHECK-NOT: tx.grad
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[I:.*]] = tx.iota {axis = 1 : i64} : tensor<1x8xi32>
// CHECK-NEXT: %[[HIT:.*]] = tx.cmp eq, %[[I]], %[[Y]] : tensor<1x8xi32>, tensor<?x1xi32> -> tensor<?x8xi1>
// CHECK-NEXT: %[[ZERO:.*]] = tx.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[DZ:.*]] = tx.select %[[HIT]], %[[G]], %[[ZERO]] : tensor<?x8xi1>, tensor<?x1xf32>, tensor<f32> -> tensor<?x8xf32>
// CHECK-NEXT: return %[[DZ]]
func.func @gather(%z: tensor<?x8xf32>, %y: tensor<?x1xi32>) -> tensor<?x8xf32> {
  %g = tx.gather %z, %y {axis = 1 : i64} : tensor<?x8xf32>, tensor<?x1xi32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %g : tensor<?x1xf32> -> tensor<f32>
  %dz = tx.grad %l wrt (%z) : tensor<f32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %dz : tensor<?x8xf32>
}

// z = H · Wᵀ: dH = G · W (no transposes), dW = Gᵀ · H (transpose_lhs).
// CHECK-LABEL: func.func @matmul_transpose_rhs
// CHECK-SAME: (%[[H:.*]]: tensor<?x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>)
// CHECK-NOT: tx.grad
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x1000xf32>
// CHECK-NEXT: %[[DH:.*]] = tx.matmul %[[G]], %[[W]] : tensor<?x1000xf32>, tensor<1000x64xbf16> -> tensor<?x64xf32>
// CHECK-NEXT: %[[DW:.*]] = tx.matmul %[[G]], %[[H]] {transpose_lhs} : tensor<?x1000xf32>, tensor<?x64xbf16> -> tensor<1000x64xf32>
// CHECK-NEXT: return %[[DH]], %[[DW]]
func.func @matmul_transpose_rhs(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> (tensor<?x64xf32>, tensor<1000x64xf32>) {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %l = tx.reduce_sum %z : tensor<?x1000xf32> -> tensor<f32>
  %dh, %dw = tx.grad %l wrt (%h, %w) : tensor<f32>, tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32>
  return %dh, %dw : tensor<?x64xf32>, tensor<1000x64xf32>
}

// z = Aᵀ · B: dA = B · Gᵀ (transpose_rhs), dB = A · G (no transposes).
// CHECK-LABEL: func.func @matmul_transpose_lhs
// CHECK-SAME: (%[[A:.*]]: tensor<64x?xf32>, %[[B:.*]]: tensor<64x8xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x8xf32>
// CHECK-NEXT: %[[DA:.*]] = tx.matmul %[[B]], %[[G]] {transpose_rhs} : tensor<64x8xf32>, tensor<?x8xf32> -> tensor<64x?xf32>
// CHECK-NEXT: %[[DB:.*]] = tx.matmul %[[A]], %[[G]] : tensor<64x?xf32>, tensor<?x8xf32> -> tensor<64x8xf32>
// CHECK-NEXT: return %[[DA]], %[[DB]]
func.func @matmul_transpose_lhs(%a: tensor<64x?xf32>, %b: tensor<64x8xf32>) -> (tensor<64x?xf32>, tensor<64x8xf32>) {
  %z = tx.matmul %a, %b {transpose_lhs} : tensor<64x?xf32>, tensor<64x8xf32> -> tensor<?x8xf32>
  %l = tx.reduce_sum %z : tensor<?x8xf32> -> tensor<f32>
  %g:2 = tx.grad %l wrt (%a, %b) : tensor<f32>, tensor<64x?xf32>, tensor<64x8xf32> -> tensor<64x?xf32>, tensor<64x8xf32>
  return %g#0, %g#1 : tensor<64x?xf32>, tensor<64x8xf32>
}

// z = A · B: dA = G · Bᵀ, dB = Aᵀ · G.
// CHECK-LABEL: func.func @matmul_plain
// CHECK-SAME: (%[[A:.*]]: tensor<?x64xf32>, %[[B:.*]]: tensor<64x8xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x8xf32>
// CHECK-NEXT: %[[DA:.*]] = tx.matmul %[[G]], %[[B]] {transpose_rhs} : tensor<?x8xf32>, tensor<64x8xf32> -> tensor<?x64xf32>
// CHECK-NEXT: %[[DB:.*]] = tx.matmul %[[A]], %[[G]] {transpose_lhs} : tensor<?x64xf32>, tensor<?x8xf32> -> tensor<64x8xf32>
// CHECK-NEXT: return %[[DA]], %[[DB]]
func.func @matmul_plain(%a: tensor<?x64xf32>, %b: tensor<64x8xf32>) -> (tensor<?x64xf32>, tensor<64x8xf32>) {
  %z = tx.matmul %a, %b : tensor<?x64xf32>, tensor<64x8xf32> -> tensor<?x8xf32>
  %l = tx.reduce_sum %z : tensor<?x8xf32> -> tensor<f32>
  %g:2 = tx.grad %l wrt (%a, %b) : tensor<f32>, tensor<?x64xf32>, tensor<64x8xf32> -> tensor<?x64xf32>, tensor<64x8xf32>
  return %g#0, %g#1 : tensor<?x64xf32>, tensor<64x8xf32>
}

// reduce_sum broadcasts its adjoint back to the input shape.
// CHECK-LABEL: func.func @reduce_sum_axis
// CHECK-SAME: (%[[Z:.*]]: tensor<?x8xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[DZ:.*]] = tx.broadcast %[[G]] : tensor<?x1xf32> -> tensor<?x8xf32>
// CHECK-NEXT: return %[[DZ]]
func.func @reduce_sum_axis(%z: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %s = tx.reduce_sum %z {axis = 1 : i64} : tensor<?x8xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %s : tensor<?x1xf32> -> tensor<f32>
  %dz = tx.grad %l wrt (%z) : tensor<f32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %dz : tensor<?x8xf32>
}

// mean over everything with a dynamic N divides by tx.dim(x, 0) * 4 at run time.
// CHECK-LABEL: func.func @mean_dynamic
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[ONE:.*]] = tx.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[N:.*]] = tx.dim %[[X]] {axis = 0 : i64} : tensor<?x4xf32> -> tensor<i64>
// CHECK-NEXT: %[[NF:.*]] = tx.cast %[[N]] : tensor<i64> -> tensor<f32>
// CHECK-NEXT: %[[FOUR:.*]] = tx.constant 4.000000e+00 : f32
// CHECK-NEXT: %[[CNT:.*]] = tx.mul %[[NF]], %[[FOUR]]
// CHECK-NEXT: %[[S:.*]] = tx.div %[[ONE]], %[[CNT]]
// CHECK-NEXT: %[[DX:.*]] = tx.broadcast %[[S]] : tensor<f32> -> tensor<?x4xf32>
// CHECK-NEXT: return %[[DX]]
func.func @mean_dynamic(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %m = tx.mean %x : tensor<?x4xf32> -> tensor<f32>
  %dx = tx.grad %m wrt (%x) : tensor<f32>, tensor<?x4xf32> -> tensor<?x4xf32>
  return %dx : tensor<?x4xf32>
}

// mean along the static axis divides by a constant, with no tx.dim.
// CHECK-LABEL: func.func @mean_static_axis
// CHECK-SAME: (%[[Z:.*]]: tensor<?x8xf32>)
// CHECK-NOT: tx.grad
// CHECK-NOT: tx.dim
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[EIGHT:.*]] = tx.constant 8.000000e+00 : f32
// CHECK-NEXT: %[[S:.*]] = tx.div %[[G]], %[[EIGHT]]
// CHECK-NEXT: %[[DZ:.*]] = tx.broadcast %[[S]] : tensor<?x1xf32> -> tensor<?x8xf32>
// CHECK-NEXT: return %[[DZ]]
func.func @mean_static_axis(%z: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %m = tx.mean %z {axis = 1 : i64} : tensor<?x8xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %m : tensor<?x1xf32> -> tensor<f32>
  %dz = tx.grad %l wrt (%z) : tensor<f32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %dz : tensor<?x8xf32>
}

// reduce_max: every element equal to the maximum receives the adjoint.
// CHECK-LABEL: func.func @reduce_max
// CHECK-SAME: (%[[Z:.*]]: tensor<?x8xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[M:.*]] = tx.reduce_max %[[Z]] {axis = 1 : i64}
// CHECK: %[[G:.*]] = tx.broadcast %{{.*}} : tensor<f32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[IS:.*]] = tx.cmp eq, %[[Z]], %[[M]] : tensor<?x8xf32>, tensor<?x1xf32> -> tensor<?x8xi1>
// CHECK-NEXT: %[[GB:.*]] = tx.broadcast %[[G]] : tensor<?x1xf32> -> tensor<?x8xf32>
// CHECK-NEXT: %[[ZERO:.*]] = tx.constant 0.000000e+00
// CHECK-NEXT: %[[DZ:.*]] = tx.select %[[IS]], %[[GB]], %[[ZERO]]
// CHECK-NEXT: return %[[DZ]]
func.func @reduce_max(%z: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %m = tx.reduce_max %z {axis = 1 : i64} : tensor<?x8xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %m : tensor<?x1xf32> -> tensor<f32>
  %dz = tx.grad %l wrt (%z) : tensor<f32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %dz : tensor<?x8xf32>
}

// A loss that does not depend on a wrt value gives it broadcast(0); integer values
// (the targets) are never active, so differentiating through cmp/select/cast of them
// adds nothing.
// CHECK-LABEL: func.func @independent
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>, %[[W:.*]]: tensor<8x4xbf16>, %[[Y:.*]]: tensor<?x1xi64>)
// CHECK-NOT: tx.grad
// CHECK: %[[VF:.*]] = tx.cast %{{.*}} : tensor<?x1xi1> -> tensor<?x1xf32>
// CHECK: %[[ONE:.*]] = tx.constant 1.000000e+00
// CHECK-NEXT: %[[G:.*]] = tx.broadcast %[[ONE]] : tensor<f32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[GS:.*]] = tx.mul %[[G]], %[[VF]]
// CHECK-NEXT: %[[DX:.*]] = tx.broadcast %[[GS]] : tensor<?x1xf32> -> tensor<?x4xf32>
// CHECK-NEXT: %[[ZERO:.*]] = tx.constant 0.000000e+00 : f32 : tensor<f32>
// CHECK-NEXT: %[[DW:.*]] = tx.broadcast %[[ZERO]] : tensor<f32> -> tensor<8x4xf32>
// CHECK-NEXT: return %[[DX]], %[[DW]]
func.func @independent(%x: tensor<?x4xf32>, %w: tensor<8x4xbf16>, %y: tensor<?x1xi64>) -> (tensor<?x4xf32>, tensor<8x4xf32>) {
  %s = tx.reduce_sum %x {axis = 1 : i64} : tensor<?x4xf32> -> tensor<?x1xf32>
  %k = tx.constant 0 : i64 : tensor<i64>
  %v = tx.cmp ne, %y, %k : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
  %vf = tx.cast %v : tensor<?x1xi1> -> tensor<?x1xf32>
  %m = tx.mul %s, %vf : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %m : tensor<?x1xf32> -> tensor<f32>
  %dx, %dw = tx.grad %l wrt (%x, %w) : tensor<f32>, tensor<?x4xf32>, tensor<8x4xbf16> -> tensor<?x4xf32>, tensor<8x4xf32>
  return %dx, %dw : tensor<?x4xf32>, tensor<8x4xf32>
}

// -----

// Must not fire: a function without tx.grad is left exactly as it is.
// CHECK-LABEL: func.func @no_grad
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK-NEXT: %[[S:.*]] = tx.mul %[[X]], %[[X]] : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
// CHECK-NEXT: %[[L:.*]] = tx.reduce_sum %[[S]] : tensor<?x1xf32> -> tensor<f32>
// CHECK-NEXT: return %[[L]] : tensor<f32>
// CHECK-NEXT: }
func.func @no_grad(%x: tensor<?x1xf32>) -> tensor<f32> {
  %0 = tx.mul %x, %x : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %0 : tensor<?x1xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Must not fire on ops after the tx.grad or off the path to the loss: only the ops
// between a wrt value and the loss get adjoints.
// CHECK-LABEL: func.func @inactive_ops_untouched
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>, %[[Y:.*]]: tensor<?x1xf32>)
// CHECK-NOT: tx.grad
// CHECK: %[[E:.*]] = tx.exp %[[X]]
// CHECK: %[[ONE:.*]] = tx.constant 1.000000e+00
// CHECK-NEXT: %[[G:.*]] = tx.broadcast %[[ONE]]
// CHECK-NEXT: %[[DX:.*]] = tx.mul %[[G]], %[[Y]]
// CHECK-NEXT: %[[AFTER:.*]] = tx.tanh %[[DX]]
// CHECK-NEXT: return %[[AFTER]], %[[E]]
func.func @inactive_ops_untouched(%x: tensor<?x1xf32>, %y: tensor<?x1xf32>) -> (tensor<?x1xf32>, tensor<?x1xf32>) {
  %e = tx.exp %x : tensor<?x1xf32> -> tensor<?x1xf32>
  %p = tx.mul %x, %y : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %l = tx.reduce_sum %p : tensor<?x1xf32> -> tensor<f32>
  %dx = tx.grad %l wrt (%x) : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %after = tx.tanh %dx : tensor<?x1xf32> -> tensor<?x1xf32>
  return %after, %e : tensor<?x1xf32>, tensor<?x1xf32>
}

// -----

// Error: a fused op has no derivative rule (differentiate before --tx-fuse).
func.func @through_gemm_reduce(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tx.gemm_reduce' op cannot be differentiated by --tx-autodiff}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  %l = tx.reduce_sum %r : tensor<?x1xf32> -> tensor<f32>
  %dh = tx.grad %l wrt (%h) : tensor<f32>, tensor<?x64xbf16> -> tensor<?x64xf32>
  return %dh : tensor<?x64xf32>
}

// -----

// Error: an op with several results on the path to the loss.
func.func @through_gemm_grad(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'tx.gemm_grad' op cannot be differentiated (more than one result)}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  %l = tx.reduce_sum %dl : tensor<?x64xf32> -> tensor<f32>
  %dh = tx.grad %l wrt (%h) : tensor<f32>, tensor<?x64xbf16> -> tensor<?x64xf32>
  return %dh : tensor<?x64xf32>
}

// -----

// Error: the scatter of a gather needs a static size along the gather axis.
func.func @gather_dynamic_axis(%z: tensor<?x8xf32>, %y: tensor<1x8xi64>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'tx.gather' op gather along the dynamic dimension is not differentiable}}
  %g = tx.gather %z, %y {axis = 0 : i64} : tensor<?x8xf32>, tensor<1x8xi64> -> tensor<1x8xf32>
  %l = tx.reduce_sum %g : tensor<1x8xf32> -> tensor<f32>
  %dz = tx.grad %l wrt (%z) : tensor<f32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %dz : tensor<?x8xf32>
}
