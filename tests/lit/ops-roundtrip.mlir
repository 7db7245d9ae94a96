// RUN: lcejit-opt %s | lcejit-opt | FileCheck %s
// RUN: lcejit-opt %s -mlir-print-op-generic | lcejit-opt | FileCheck %s
//
// Every tx op parses, prints in its custom form, and parses back (also from the generic
// form). No pass runs: the IR must come back op for op.

// CHECK-LABEL: func.func @leaves
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
func.func @leaves(%x: tensor<?x4xf32>) -> (tensor<f32>, tensor<bf16>, tensor<i64>, tensor<i32>, tensor<i1>, tensor<1x4xi64>, tensor<4x1xi32>, tensor<i64>, tensor<i64>) {
  // CHECK: %[[C0:.*]] = tx.constant 3.000000e+01 : f32 : tensor<f32>
  // CHECK-NEXT: %[[C1:.*]] = tx.constant 1.000000e+00 : bf16 : tensor<bf16>
  // CHECK-NEXT: %[[C2:.*]] = tx.constant -100 : i64 : tensor<i64>
  // CHECK-NEXT: %[[C3:.*]] = tx.constant 7 : i32 : tensor<i32>
  // CHECK-NEXT: %[[C4:.*]] = tx.constant true : tensor<i1>
  // CHECK-NEXT: %[[I0:.*]] = tx.iota {axis = 1 : i64} : tensor<1x4xi64>
  // CHECK-NEXT: %[[I1:.*]] = tx.iota {axis = 0 : i64} : tensor<4x1xi32>
  // CHECK-NEXT: %[[D0:.*]] = tx.dim %[[X]] {axis = 0 : i64} : tensor<?x4xf32> -> tensor<i64>
  // CHECK-NEXT: %[[D1:.*]] = tx.dim %[[X]] {axis = 1 : i64} : tensor<?x4xf32> -> tensor<i64>
  // CHECK-NEXT: return %[[C0]], %[[C1]], %[[C2]], %[[C3]], %[[C4]], %[[I0]], %[[I1]], %[[D0]], %[[D1]]
  %c0 = tx.constant 30.0 : f32 : tensor<f32>
  %c1 = tx.constant 1.0 : bf16 : tensor<bf16>
  %c2 = tx.constant -100 : i64 : tensor<i64>
  %c3 = tx.constant 7 : i32 : tensor<i32>
  // An i1 value prints as a bare `true`, with no `: i1` of its own.
  %c4 = tx.constant true : tensor<i1>
  %i0 = tx.iota {axis = 1 : i64} : tensor<1x4xi64>
  %i1 = tx.iota {axis = 0 : i64} : tensor<4x1xi32>
  %d0 = tx.dim %x {axis = 0 : i64} : tensor<?x4xf32> -> tensor<i64>
  %d1 = tx.dim %x {axis = 1 : i64} : tensor<?x4xf32> -> tensor<i64>
  return %c0, %c1, %c2, %c3, %c4, %i0, %i1, %d0, %d1 : tensor<f32>, tensor<bf16>, tensor<i64>, tensor<i32>, tensor<i1>, tensor<1x4xi64>, tensor<4x1xi32>, tensor<i64>, tensor<i64>
}

// CHECK-LABEL: func.func @matmuls
// CHECK-SAME: (%[[H:.*]]: tensor<?x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>, %[[G:.*]]: tensor<?x1000xf32>)
func.func @matmuls(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %g: tensor<?x1000xf32>) -> (tensor<?x1000xf32>, tensor<?x64xf32>, tensor<1000x64xf32>, tensor<64x?xf32>) {
  // CHECK: tx.matmul %[[H]], %[[W]] {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  // CHECK-NEXT: tx.matmul %[[G]], %[[W]] : tensor<?x1000xf32>, tensor<1000x64xbf16> -> tensor<?x64xf32>
  // CHECK-NEXT: tx.matmul %[[G]], %[[H]] {transpose_lhs} : tensor<?x1000xf32>, tensor<?x64xbf16> -> tensor<1000x64xf32>
  // CHECK-NEXT: tx.matmul %[[W]], %[[G]] {transpose_lhs, transpose_rhs} : tensor<1000x64xbf16>, tensor<?x1000xf32> -> tensor<64x?xf32>
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %dh = tx.matmul %g, %w : tensor<?x1000xf32>, tensor<1000x64xbf16> -> tensor<?x64xf32>
  %dw = tx.matmul %g, %h {transpose_lhs} : tensor<?x1000xf32>, tensor<?x64xbf16> -> tensor<1000x64xf32>
  %t = tx.matmul %w, %g {transpose_lhs, transpose_rhs} : tensor<1000x64xbf16>, tensor<?x1000xf32> -> tensor<64x?xf32>
  return %z, %dh, %dw, %t : tensor<?x1000xf32>, tensor<?x64xf32>, tensor<1000x64xf32>, tensor<64x?xf32>
}

// CHECK-LABEL: func.func @casts_and_broadcasts
// CHECK-SAME: (%[[M:.*]]: tensor<?x1xi1>, %[[Y:.*]]: tensor<?x1xi64>, %[[S:.*]]: tensor<f32>, %[[R:.*]]: tensor<1x8xbf16>)
func.func @casts_and_broadcasts(%m: tensor<?x1xi1>, %y: tensor<?x1xi64>, %s: tensor<f32>, %r: tensor<1x8xbf16>) -> (tensor<?x1xf32>, tensor<?x1xi32>, tensor<?x1xi64>, tensor<1x8xf32>, tensor<f32>, tensor<?x8xf32>, tensor<?x8xbf16>) {
  // CHECK: tx.cast %[[M]] : tensor<?x1xi1> -> tensor<?x1xf32>
  // CHECK-NEXT: tx.cast %[[Y]] : tensor<?x1xi64> -> tensor<?x1xi32>
  // CHECK-NEXT: tx.cast %[[M]] : tensor<?x1xi1> -> tensor<?x1xi64>
  // CHECK-NEXT: tx.cast %[[R]] : tensor<1x8xbf16> -> tensor<1x8xf32>
  // CHECK-NEXT: tx.cast %[[S]] : tensor<f32> -> tensor<f32>
  // CHECK-NEXT: tx.broadcast %[[S]] : tensor<f32> -> tensor<?x8xf32>
  // CHECK-NEXT: tx.broadcast %[[R]] : tensor<1x8xbf16> -> tensor<?x8xbf16>
  %0 = tx.cast %m : tensor<?x1xi1> -> tensor<?x1xf32>
  %1 = tx.cast %y : tensor<?x1xi64> -> tensor<?x1xi32>
  %2 = tx.cast %m : tensor<?x1xi1> -> tensor<?x1xi64>
  %3 = tx.cast %r : tensor<1x8xbf16> -> tensor<1x8xf32>
  %4 = tx.cast %s : tensor<f32> -> tensor<f32>
  %5 = tx.broadcast %s : tensor<f32> -> tensor<?x8xf32>
  %6 = tx.broadcast %r : tensor<1x8xbf16> -> tensor<?x8xbf16>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<?x1xf32>, tensor<?x1xi32>, tensor<?x1xi64>, tensor<1x8xf32>, tensor<f32>, tensor<?x8xf32>, tensor<?x8xbf16>
}

// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: (%[[A:.*]]: tensor<?x1xf32>, %[[B:.*]]: tensor<1x8xf32>, %[[S:.*]]: tensor<f32>, %[[Y:.*]]: tensor<?x1xi64>, %[[K:.*]]: tensor<i64>)
func.func @elementwise(%a: tensor<?x1xf32>, %b: tensor<1x8xf32>, %s: tensor<f32>, %y: tensor<?x1xi64>, %k: tensor<i64>) {
  // CHECK: tx.add %[[A]], %[[B]] : tensor<?x1xf32>, tensor<1x8xf32> -> tensor<?x8xf32>
  // CHECK-NEXT: tx.sub %[[S]], %[[A]] : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>
  // CHECK-NEXT: tx.mul %[[B]], %[[S]] : tensor<1x8xf32>, tensor<f32> -> tensor<1x8xf32>
  // CHECK-NEXT: tx.div %[[A]], %[[S]] : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  // CHECK-NEXT: tx.max %[[S]], %[[S]] : tensor<f32>, tensor<f32> -> tensor<f32>
  // CHECK-NEXT: tx.add %[[Y]], %[[K]] : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  // CHECK-NEXT: tx.max %[[Y]], %[[K]] : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  // CHECK-NEXT: tx.neg %[[A]] : tensor<?x1xf32> -> tensor<?x1xf32>
  // CHECK-NEXT: tx.exp %[[B]] : tensor<1x8xf32> -> tensor<1x8xf32>
  // CHECK-NEXT: tx.log %[[S]] : tensor<f32> -> tensor<f32>
  // CHECK-NEXT: tx.tanh %[[A]] : tensor<?x1xf32> -> tensor<?x1xf32>
  %0 = tx.add %a, %b : tensor<?x1xf32>, tensor<1x8xf32> -> tensor<?x8xf32>
  %1 = tx.sub %s, %a : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %2 = tx.mul %b, %s : tensor<1x8xf32>, tensor<f32> -> tensor<1x8xf32>
  %3 = tx.div %a, %s : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %4 = tx.max %s, %s : tensor<f32>, tensor<f32> -> tensor<f32>
  %5 = tx.add %y, %k : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  %6 = tx.max %y, %k : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  %7 = tx.neg %a : tensor<?x1xf32> -> tensor<?x1xf32>
  %8 = tx.exp %b : tensor<1x8xf32> -> tensor<1x8xf32>
  %9 = tx.log %s : tensor<f32> -> tensor<f32>
  %10 = tx.tanh %a : tensor<?x1xf32> -> tensor<?x1xf32>
  // CHECK-NEXT: %[[EQ:.*]] = tx.cmp eq, %[[Y]], %[[K]] : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
  // CHECK-NEXT: tx.cmp ne, %[[Y]], %[[K]]
  // CHECK-NEXT: tx.cmp lt, %[[A]], %[[S]] : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xi1>
  // CHECK-NEXT: tx.cmp le, %[[A]], %[[B]] : tensor<?x1xf32>, tensor<1x8xf32> -> tensor<?x8xi1>
  // CHECK-NEXT: tx.cmp gt, %[[EQ]], %[[EQ]] : tensor<?x1xi1>, tensor<?x1xi1> -> tensor<?x1xi1>
  // CHECK-NEXT: tx.cmp ge, %[[S]], %[[S]]
  %c0 = tx.cmp eq, %y, %k : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
  %c1 = tx.cmp ne, %y, %k : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
  %c2 = tx.cmp lt, %a, %s : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xi1>
  %c3 = tx.cmp le, %a, %b : tensor<?x1xf32>, tensor<1x8xf32> -> tensor<?x8xi1>
  %c4 = tx.cmp gt, %c0, %c0 : tensor<?x1xi1>, tensor<?x1xi1> -> tensor<?x1xi1>
  %c5 = tx.cmp ge, %s, %s : tensor<f32>, tensor<f32> -> tensor<i1>
  // CHECK-NEXT: tx.select %[[EQ]], %[[A]], %[[S]] : tensor<?x1xi1>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  // CHECK-NEXT: tx.select %[[EQ]], %[[B]], %[[S]] : tensor<?x1xi1>, tensor<1x8xf32>, tensor<f32> -> tensor<?x8xf32>
  // CHECK-NEXT: tx.select %[[EQ]], %[[Y]], %[[K]] : tensor<?x1xi1>, tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  %s0 = tx.select %c0, %a, %s : tensor<?x1xi1>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %s1 = tx.select %c0, %b, %s : tensor<?x1xi1>, tensor<1x8xf32>, tensor<f32> -> tensor<?x8xf32>
  %s2 = tx.select %c0, %y, %k : tensor<?x1xi1>, tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  return
}

// CHECK-LABEL: func.func @reductions
// CHECK-SAME: (%[[Z:.*]]: tensor<?x8xf32>, %[[B:.*]]: tensor<?x8xbf16>, %[[Y:.*]]: tensor<?x1xi64>, %[[Q:.*]]: tensor<?x8xi32>)
func.func @reductions(%z: tensor<?x8xf32>, %b: tensor<?x8xbf16>, %y: tensor<?x1xi64>, %q: tensor<?x8xi32>) {
  // CHECK: tx.reduce_sum %[[Z]] : tensor<?x8xf32> -> tensor<f32>
  // CHECK-NEXT: tx.reduce_sum %[[Z]] {axis = 0 : i64} : tensor<?x8xf32> -> tensor<1x8xf32>
  // CHECK-NEXT: tx.reduce_sum %[[Q]] {axis = 1 : i64} : tensor<?x8xi32> -> tensor<?x1xi32>
  // CHECK-NEXT: tx.reduce_max %[[B]] {axis = 1 : i64} : tensor<?x8xbf16> -> tensor<?x1xbf16>
  // CHECK-NEXT: tx.reduce_max %[[Q]] : tensor<?x8xi32> -> tensor<i32>
  // CHECK-NEXT: tx.mean %[[Z]] {axis = 1 : i64} : tensor<?x8xf32> -> tensor<?x1xf32>
  // CHECK-NEXT: tx.mean %[[B]] : tensor<?x8xbf16> -> tensor<bf16>
  // CHECK-NEXT: tx.logsumexp %[[Z]] {axis = 1 : i64} : tensor<?x8xf32> -> tensor<?x1xf32>
  // CHECK-NEXT: tx.logsumexp %[[B]] {axis = 0 : i64} : tensor<?x8xbf16> -> tensor<1x8xbf16>
  // CHECK-NEXT: tx.gather %[[Z]], %[[Y]] {axis = 1 : i64} : tensor<?x8xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  // CHECK-NEXT: tx.gather %[[B]], %[[Q]] {axis = 1 : i64} : tensor<?x8xbf16>, tensor<?x8xi32> -> tensor<?x8xbf16>
  %0 = tx.reduce_sum %z : tensor<?x8xf32> -> tensor<f32>
  %1 = tx.reduce_sum %z {axis = 0 : i64} : tensor<?x8xf32> -> tensor<1x8xf32>
  %2 = tx.reduce_sum %q {axis = 1 : i64} : tensor<?x8xi32> -> tensor<?x1xi32>
  %3 = tx.reduce_max %b {axis = 1 : i64} : tensor<?x8xbf16> -> tensor<?x1xbf16>
  %4 = tx.reduce_max %q : tensor<?x8xi32> -> tensor<i32>
  %5 = tx.mean %z {axis = 1 : i64} : tensor<?x8xf32> -> tensor<?x1xf32>
  %6 = tx.mean %b : tensor<?x8xbf16> -> tensor<bf16>
  %7 = tx.logsumexp %z {axis = 1 : i64} : tensor<?x8xf32> -> tensor<?x1xf32>
  %8 = tx.logsumexp %b {axis = 0 : i64} : tensor<?x8xbf16> -> tensor<1x8xbf16>
  %9 = tx.gather %z, %y {axis = 1 : i64} : tensor<?x8xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  %10 = tx.gather %b, %q {axis = 1 : i64} : tensor<?x8xbf16>, tensor<?x8xi32> -> tensor<?x8xbf16>
  return
}

// CHECK-LABEL: func.func @grad
// CHECK-SAME: (%[[L:.*]]: tensor<f32>, %[[H:.*]]: tensor<?x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>)
func.func @grad(%l: tensor<f32>, %h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> (tensor<?x64xf32>, tensor<1000x64xf32>, tensor<f32>) {
  // CHECK: %[[G:.*]]:2 = tx.grad %[[L]] wrt(%[[H]], %[[W]]) : tensor<f32>, tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32>
  // CHECK-NEXT: %[[G1:.*]] = tx.grad %[[L]] wrt(%[[L]]) : tensor<f32>, tensor<f32> -> tensor<f32>
  // CHECK-NEXT: return %[[G]]#0, %[[G]]#1, %[[G1]]
  %dh, %dw = tx.grad %l wrt (%h, %w) : tensor<f32>, tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32>
  %dl = tx.grad %l wrt (%l) : tensor<f32>, tensor<f32> -> tensor<f32>
  return %dh, %dw, %dl : tensor<?x64xf32>, tensor<1000x64xf32>, tensor<f32>
}

// CHECK-LABEL: func.func @fused
// CHECK-SAME: (%[[H:.*]]: tensor<?x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>, %[[Y:.*]]: tensor<?x1xi64>, %[[C:.*]]: tensor<1x1000xf32>, %[[S:.*]]: tensor<f32>)
func.func @fused(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %y: tensor<?x1xi64>, %c: tensor<1x1000xf32>, %s: tensor<f32>) -> (tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x64xf32>, tensor<1000x64xf32>, tensor<?x64xf32>) {
  // CHECK: %[[R:.*]]:3 = tx.gemm_reduce %[[H]], %[[W]] sides(%[[Y]], %[[C]], %[[S]] : tensor<?x1xi64>, tensor<1x1000xf32>, tensor<f32>) {kinds = ["logsumexp", "sum", "max"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32> {
  // CHECK-NEXT: ^bb0(%[[ACC:.*]]: f32, %[[COL:.*]]: i64, %[[YI:.*]]: i64, %[[CJ:.*]]: f32, %[[SV:.*]]: f32):
  // CHECK-NEXT:   %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
  // CHECK-NEXT:   %[[HIT:.*]] = arith.cmpi eq, %[[COL]], %[[YI]] : i64
  // CHECK-NEXT:   %[[PICK:.*]] = arith.select %[[HIT]], %[[ACC]], %[[ZERO]] : f32
  // CHECK-NEXT:   %[[BIAS:.*]] = arith.addf %[[ACC]], %[[CJ]] : f32
  // CHECK-NEXT:   %[[SC:.*]] = arith.mulf %[[BIAS]], %[[SV]] : f32
  // CHECK-NEXT:   tx.yield %[[SC]], %[[PICK]], %[[ACC]] : f32, f32, f32
  // CHECK-NEXT: }
  %r:3 = tx.gemm_reduce %h, %w sides(%y, %c, %s : tensor<?x1xi64>, tensor<1x1000xf32>, tensor<f32>) {kinds = ["logsumexp", "sum", "max"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64, %yi: i64, %cj: f32, %sv: f32):
    %zero = arith.constant 0.0 : f32
    %hit = arith.cmpi eq, %col, %yi : i64
    %pick = arith.select %hit, %acc, %zero : f32
    %bias = arith.addf %acc, %cj : f32
    %sc = arith.mulf %bias, %sv : f32
    tx.yield %sc, %pick, %acc : f32, f32, f32
  }
  // CHECK: %[[R1:.*]] = tx.gemm_reduce %[[H]], %[[W]] {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  // CHECK-NEXT: ^bb0(%[[ACC1:.*]]: f32, %{{.*}}: i64):
  // CHECK-NEXT:   %[[E:.*]] = math.exp %[[ACC1]] : f32
  // CHECK-NEXT:   tx.yield %[[E]] : f32
  // CHECK-NEXT: }
  %r1 = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    %e = math.exp %acc : f32
    tx.yield %e : f32
  }
  // CHECK: %[[DL:.*]], %[[DR:.*]] = tx.gemm_grad %[[H]], %[[W]] sides(%[[Y]], %[[R]]#0 : tensor<?x1xi64>, tensor<?x1xf32>) : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  // CHECK-NEXT: ^bb0(%[[ACC2:.*]]: f32, %[[COL2:.*]]: i64, %[[YI2:.*]]: i64, %[[LSE:.*]]: f32):
  // CHECK-NEXT:   %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
  // CHECK-NEXT:   %[[ZERO2:.*]] = arith.constant 0.000000e+00 : f32
  // CHECK-NEXT:   %[[D:.*]] = arith.subf %[[ACC2]], %[[LSE]] : f32
  // CHECK-NEXT:   %[[P:.*]] = math.exp %[[D]] : f32
  // CHECK-NEXT:   %[[HIT2:.*]] = arith.cmpi eq, %[[COL2]], %[[YI2]] : i64
  // CHECK-NEXT:   %[[OH:.*]] = arith.select %[[HIT2]], %[[ONE]], %[[ZERO2]] : f32
  // CHECK-NEXT:   %[[DZ:.*]] = arith.subf %[[P]], %[[OH]] : f32
  // CHECK-NEXT:   tx.yield %[[DZ]] : f32
  // CHECK-NEXT: }
  %dl, %dr = tx.gemm_grad %h, %w sides(%y, %r#0 : tensor<?x1xi64>, tensor<?x1xf32>) : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64, %yi: i64, %lse: f32):
    %one = arith.constant 1.0 : f32
    %zero = arith.constant 0.0 : f32
    %d = arith.subf %acc, %lse : f32
    %p = math.exp %d : f32
    %hit = arith.cmpi eq, %col, %yi : i64
    %oh = arith.select %hit, %one, %zero : f32
    %dz = arith.subf %p, %oh : f32
    tx.yield %dz : f32
  }
  // CHECK: %[[DL2:.*]], %{{.*}} = tx.gemm_grad %[[H]], %[[W]] : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  // CHECK-NEXT: ^bb0(%[[ACC3:.*]]: f32, %{{.*}}: i64):
  // CHECK-NEXT:   tx.yield %[[ACC3]] : f32
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[R]]#0, %[[R]]#1, %[[R]]#2, %[[R1]], %[[DL]], %[[DR]], %[[DL2]]
  %dl2, %dr2 = tx.gemm_grad %h, %w : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return %r#0, %r#1, %r#2, %r1, %dl, %dr, %dl2 : tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x1xf32>, tensor<?x64xf32>, tensor<1000x64xf32>, tensor<?x64xf32>
}
