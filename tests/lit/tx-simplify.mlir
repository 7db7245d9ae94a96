// RUN: lcejit-opt %s --tx-simplify | FileCheck %s
//
// Each rewrite of --tx-simplify, and the cases where it must not fire. Every function
// returns its result so that only the rewrite (not dead-code removal) can make the
// checked ops disappear. Without the pass all the CHECK-NOT lines below would fail.
//
// The "same type and shape only" guard of rule 1 cannot be reached through a neutral
// constant (tx.constant is rank 0, so it never widens the other operand); it is
// exercised for rule 5 instead (@select_same_broadcast_stays).

// Rule 1: neutral elements, on either side where the op commutes.

// CHECK-LABEL: func.func @mul_one
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK-NOT: tx.mul
// CHECK-NOT: tx.constant
// CHECK: return %[[X]], %[[X]] : tensor<?x4xf32>, tensor<?x4xf32>
func.func @mul_one(%x: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %one = tx.constant 1.0 : f32 : tensor<f32>
  %a = tx.mul %x, %one : tensor<?x4xf32>, tensor<f32> -> tensor<?x4xf32>
  %b = tx.mul %one, %x : tensor<f32>, tensor<?x4xf32> -> tensor<?x4xf32>
  return %a, %b : tensor<?x4xf32>, tensor<?x4xf32>
}

// CHECK-LABEL: func.func @mul_one_int
// CHECK-SAME: (%[[Y:.*]]: tensor<?x1xi64>)
// CHECK-NOT: tx.mul
// CHECK: return %[[Y]] : tensor<?x1xi64>
func.func @mul_one_int(%y: tensor<?x1xi64>) -> tensor<?x1xi64> {
  %one = tx.constant 1 : i64 : tensor<i64>
  %a = tx.mul %one, %y : tensor<i64>, tensor<?x1xi64> -> tensor<?x1xi64>
  return %a : tensor<?x1xi64>
}

// CHECK-LABEL: func.func @div_one
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xbf16>)
// CHECK-NOT: tx.div
// CHECK: return %[[X]] : tensor<?x1xbf16>
func.func @div_one(%x: tensor<?x1xbf16>) -> tensor<?x1xbf16> {
  %one = tx.constant 1.0 : bf16 : tensor<bf16>
  %a = tx.div %x, %one : tensor<?x1xbf16>, tensor<bf16> -> tensor<?x1xbf16>
  return %a : tensor<?x1xbf16>
}

// CHECK-LABEL: func.func @add_sub_zero
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK-NOT: tx.add
// CHECK-NOT: tx.sub
// CHECK: return %[[X]], %[[X]], %[[X]] : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>
func.func @add_sub_zero(%x: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) {
  %zero = tx.constant 0.0 : f32 : tensor<f32>
  %a = tx.add %x, %zero : tensor<?x4xf32>, tensor<f32> -> tensor<?x4xf32>
  %b = tx.add %zero, %x : tensor<f32>, tensor<?x4xf32> -> tensor<?x4xf32>
  %c = tx.sub %x, %zero : tensor<?x4xf32>, tensor<f32> -> tensor<?x4xf32>
  return %a, %b, %c : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>
}

// CHECK-LABEL: func.func @add_zero_int
// CHECK-SAME: (%[[Y:.*]]: tensor<?x1xi32>)
// CHECK-NOT: tx.add
// CHECK: return %[[Y]] : tensor<?x1xi32>
func.func @add_zero_int(%y: tensor<?x1xi32>) -> tensor<?x1xi32> {
  %zero = tx.constant 0 : i32 : tensor<i32>
  %a = tx.add %y, %zero : tensor<?x1xi32>, tensor<i32> -> tensor<?x1xi32>
  return %a : tensor<?x1xi32>
}

// Rule 1 fires repeatedly, to a fixed point.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK-NEXT: return %[[X]] : tensor<?x1xf32>
func.func @chain(%x: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %one = tx.constant 1.0 : f32 : tensor<f32>
  %zero = tx.constant 0.0 : f32 : tensor<f32>
  %a = tx.mul %x, %one : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %b = tx.add %zero, %a : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %c = tx.div %b, %one : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %d = tx.sub %c, %zero : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  return %d : tensor<?x1xf32>
}

// Rule 2: zero products are kept (NaN * 0 must stay NaN), and other constants stay.
// CHECK-LABEL: func.func @mul_zero_stays
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK-DAG: %[[Z:.*]] = tx.constant 0.000000e+00 : f32 : tensor<f32>
// CHECK-DAG: %[[T:.*]] = tx.constant 2.000000e+00 : f32 : tensor<f32>
// CHECK: %[[A:.*]] = tx.mul %[[X]], %[[Z]]
// CHECK: %[[B:.*]] = tx.mul %[[Z]], %[[X]]
// CHECK: %[[C:.*]] = tx.div %[[X]], %[[T]]
// CHECK: %[[D:.*]] = tx.sub %[[T]], %[[X]]
// CHECK: %[[E:.*]] = tx.div %[[T]], %[[X]]
// CHECK: return %[[A]], %[[B]], %[[C]], %[[D]], %[[E]]
func.func @mul_zero_stays(%x: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) {
  %zero = tx.constant 0.0 : f32 : tensor<f32>
  %two = tx.constant 2.0 : f32 : tensor<f32>
  %a = tx.mul %x, %zero : tensor<?x4xf32>, tensor<f32> -> tensor<?x4xf32>
  %b = tx.mul %zero, %x : tensor<f32>, tensor<?x4xf32> -> tensor<?x4xf32>
  %c = tx.div %x, %two : tensor<?x4xf32>, tensor<f32> -> tensor<?x4xf32>
  %d = tx.sub %two, %x : tensor<f32>, tensor<?x4xf32> -> tensor<?x4xf32>
  %e = tx.div %two, %x : tensor<f32>, tensor<?x4xf32> -> tensor<?x4xf32>
  return %a, %b, %c, %d, %e : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>
}

// Must not fire: only the right operand of sub and div is neutral.
// CHECK-LABEL: func.func @noncommutative_left_stays
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK: %[[ONE:.*]] = tx.constant 1.000000e+00
// CHECK: %[[D:.*]] = tx.div %[[ONE]], %[[X]]
// CHECK: return %[[D]]
func.func @noncommutative_left_stays(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %one = tx.constant 1.0 : f32 : tensor<f32>
  %d = tx.div %one, %x : tensor<f32>, tensor<?x4xf32> -> tensor<?x4xf32>
  return %d : tensor<?x4xf32>
}

// Rule 3: neg(neg(x)) -> x.
// CHECK-LABEL: func.func @neg_neg
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK-NOT: tx.neg
// CHECK: return %[[X]] : tensor<?x1xf32>
func.func @neg_neg(%x: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %a = tx.neg %x : tensor<?x1xf32> -> tensor<?x1xf32>
  %b = tx.neg %a : tensor<?x1xf32> -> tensor<?x1xf32>
  return %b : tensor<?x1xf32>
}

// A single neg stays.
// CHECK-LABEL: func.func @neg_once
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK: %[[N:.*]] = tx.neg %[[X]]
// CHECK: return %[[N]]
func.func @neg_once(%x: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %a = tx.neg %x : tensor<?x1xf32> -> tensor<?x1xf32>
  return %a : tensor<?x1xf32>
}

// Rule 3: 0 - x -> neg(x).
// CHECK-LABEL: func.func @zero_minus
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK-NOT: tx.sub
// CHECK-NOT: tx.constant
// CHECK: %[[N:.*]] = tx.neg %[[X]] : tensor<?x4xf32> -> tensor<?x4xf32>
// CHECK-NEXT: return %[[N]]
func.func @zero_minus(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %zero = tx.constant 0.0 : f32 : tensor<f32>
  %a = tx.sub %zero, %x : tensor<f32>, tensor<?x4xf32> -> tensor<?x4xf32>
  return %a : tensor<?x4xf32>
}

// Must not fire: tx.neg is float-only, so an integer 0 - y stays a sub.
// CHECK-LABEL: func.func @zero_minus_int_stays
// CHECK-SAME: (%[[Y:.*]]: tensor<?x1xi64>)
// CHECK: %[[Z:.*]] = tx.constant 0 : i64
// CHECK: %[[S:.*]] = tx.sub %[[Z]], %[[Y]]
// CHECK-NOT: tx.neg
// CHECK: return %[[S]]
func.func @zero_minus_int_stays(%y: tensor<?x1xi64>) -> tensor<?x1xi64> {
  %zero = tx.constant 0 : i64 : tensor<i64>
  %a = tx.sub %zero, %y : tensor<i64>, tensor<?x1xi64> -> tensor<?x1xi64>
  return %a : tensor<?x1xi64>
}

// Rule 3: x - neg(y) -> x + y.
// CHECK-LABEL: func.func @minus_neg
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>, %[[Y:.*]]: tensor<?x1xf32>)
// CHECK-NOT: tx.neg
// CHECK-NOT: tx.sub
// CHECK: %[[A:.*]] = tx.add %[[X]], %[[Y]] : tensor<?x4xf32>, tensor<?x1xf32> -> tensor<?x4xf32>
// CHECK-NEXT: return %[[A]]
func.func @minus_neg(%x: tensor<?x4xf32>, %y: tensor<?x1xf32>) -> tensor<?x4xf32> {
  %n = tx.neg %y : tensor<?x1xf32> -> tensor<?x1xf32>
  %a = tx.sub %x, %n : tensor<?x4xf32>, tensor<?x1xf32> -> tensor<?x4xf32>
  return %a : tensor<?x4xf32>
}

// Must not fire: neg(x) - y is not x - neg(y).
// CHECK-LABEL: func.func @neg_minus_stays
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>, %[[Y:.*]]: tensor<?x1xf32>)
// CHECK: %[[N:.*]] = tx.neg %[[X]]
// CHECK: %[[S:.*]] = tx.sub %[[N]], %[[Y]]
// CHECK: return %[[S]]
func.func @neg_minus_stays(%x: tensor<?x1xf32>, %y: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %n = tx.neg %x : tensor<?x1xf32> -> tensor<?x1xf32>
  %a = tx.sub %n, %y : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  return %a : tensor<?x1xf32>
}

// Rule 4: a cast of a widening float cast skips the inner cast; back to the original
// type it disappears.
// CHECK-LABEL: func.func @cast_widen_then_back
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xbf16>)
// CHECK-NOT: tx.cast
// CHECK: return %[[X]] : tensor<?x1xbf16>
func.func @cast_widen_then_back(%x: tensor<?x1xbf16>) -> tensor<?x1xbf16> {
  %a = tx.cast %x : tensor<?x1xbf16> -> tensor<?x1xf32>
  %b = tx.cast %a : tensor<?x1xf32> -> tensor<?x1xbf16>
  return %b : tensor<?x1xbf16>
}

// CHECK-LABEL: func.func @cast_widen_twice
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf16>)
// CHECK: %[[C:.*]] = tx.cast %[[X]] : tensor<?x1xf16> -> tensor<?x1xf64>
// CHECK-NOT: tx.cast
// CHECK: return %[[C]] : tensor<?x1xf64>
func.func @cast_widen_twice(%x: tensor<?x1xf16>) -> tensor<?x1xf64> {
  %a = tx.cast %x : tensor<?x1xf16> -> tensor<?x1xf32>
  %b = tx.cast %a : tensor<?x1xf32> -> tensor<?x1xf64>
  return %b : tensor<?x1xf64>
}

// Identity casts fold away.
// CHECK-LABEL: func.func @cast_identity
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK-NOT: tx.cast
// CHECK: return %[[X]] : tensor<?x1xf32>
func.func @cast_identity(%x: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %a = tx.cast %x : tensor<?x1xf32> -> tensor<?x1xf32>
  return %a : tensor<?x1xf32>
}

// Must not fire: a narrowing inner cast rounds, so both casts stay.
// CHECK-LABEL: func.func @cast_narrow_stays
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK: %[[A:.*]] = tx.cast %[[X]] : tensor<?x1xf32> -> tensor<?x1xbf16>
// CHECK: %[[B:.*]] = tx.cast %[[A]] : tensor<?x1xbf16> -> tensor<?x1xf32>
// CHECK: return %[[B]]
func.func @cast_narrow_stays(%x: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %a = tx.cast %x : tensor<?x1xf32> -> tensor<?x1xbf16>
  %b = tx.cast %a : tensor<?x1xbf16> -> tensor<?x1xf32>
  return %b : tensor<?x1xf32>
}

// Must not fire: bf16 -> f16 has the same width but fewer exponent bits (lossy).
// CHECK-LABEL: func.func @cast_same_width_stays
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xbf16>)
// CHECK: %[[A:.*]] = tx.cast %[[X]] : tensor<?x1xbf16> -> tensor<?x1xf16>
// CHECK: %[[B:.*]] = tx.cast %[[A]] : tensor<?x1xf16> -> tensor<?x1xf32>
// CHECK: return %[[B]]
func.func @cast_same_width_stays(%x: tensor<?x1xbf16>) -> tensor<?x1xf32> {
  %a = tx.cast %x : tensor<?x1xbf16> -> tensor<?x1xf16>
  %b = tx.cast %a : tensor<?x1xf16> -> tensor<?x1xf32>
  return %b : tensor<?x1xf32>
}

// Must not fire: the inner cast is not float -> float (i1 -> f32 -> f64 could be
// folded, but the rule only knows float widening; i64 -> i32 truncates).
// CHECK-LABEL: func.func @cast_int_chain_stays
// CHECK-SAME: (%[[M:.*]]: tensor<?x1xi1>, %[[Y:.*]]: tensor<?x1xi64>)
// CHECK: %[[A:.*]] = tx.cast %[[M]] : tensor<?x1xi1> -> tensor<?x1xf32>
// CHECK: %[[B:.*]] = tx.cast %[[A]] : tensor<?x1xf32> -> tensor<?x1xf64>
// CHECK: %[[C:.*]] = tx.cast %[[Y]] : tensor<?x1xi64> -> tensor<?x1xi32>
// CHECK: %[[D:.*]] = tx.cast %[[C]] : tensor<?x1xi32> -> tensor<?x1xi64>
// CHECK: return %[[B]], %[[D]]
func.func @cast_int_chain_stays(%m: tensor<?x1xi1>, %y: tensor<?x1xi64>) -> (tensor<?x1xf64>, tensor<?x1xi64>) {
  %a = tx.cast %m : tensor<?x1xi1> -> tensor<?x1xf32>
  %b = tx.cast %a : tensor<?x1xf32> -> tensor<?x1xf64>
  %c = tx.cast %y : tensor<?x1xi64> -> tensor<?x1xi32>
  %d = tx.cast %c : tensor<?x1xi32> -> tensor<?x1xi64>
  return %b, %d : tensor<?x1xf64>, tensor<?x1xi64>
}

// Rule 5: select(c, x, x) -> x.
// CHECK-LABEL: func.func @select_same
// CHECK-SAME: (%[[C:.*]]: tensor<?x1xi1>, %[[X:.*]]: tensor<?x1xf32>)
// CHECK-NOT: tx.select
// CHECK: return %[[X]] : tensor<?x1xf32>
func.func @select_same(%c: tensor<?x1xi1>, %x: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %a = tx.select %c, %x, %x : tensor<?x1xi1>, tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  return %a : tensor<?x1xf32>
}

// Must not fire: the condition broadcasts x from [1, 4] to [N, 4], so the select is
// not the identity on types.
// CHECK-LABEL: func.func @select_same_broadcast_stays
// CHECK-SAME: (%[[C:.*]]: tensor<?x1xi1>, %[[X:.*]]: tensor<1x4xf32>)
// CHECK: %[[S:.*]] = tx.select %[[C]], %[[X]], %[[X]] : tensor<?x1xi1>, tensor<1x4xf32>, tensor<1x4xf32> -> tensor<?x4xf32>
// CHECK: return %[[S]]
func.func @select_same_broadcast_stays(%c: tensor<?x1xi1>, %x: tensor<1x4xf32>) -> tensor<?x4xf32> {
  %a = tx.select %c, %x, %x : tensor<?x1xi1>, tensor<1x4xf32>, tensor<1x4xf32> -> tensor<?x4xf32>
  return %a : tensor<?x4xf32>
}

// Must not fire: different values.
// CHECK-LABEL: func.func @select_different_stays
// CHECK-SAME: (%[[C:.*]]: tensor<?x1xi1>, %[[X:.*]]: tensor<?x1xf32>, %[[Y:.*]]: tensor<?x1xf32>)
// CHECK: %[[S:.*]] = tx.select %[[C]], %[[X]], %[[Y]]
// CHECK: return %[[S]]
func.func @select_different_stays(%c: tensor<?x1xi1>, %x: tensor<?x1xf32>, %y: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %a = tx.select %c, %x, %y : tensor<?x1xi1>, tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  return %a : tensor<?x1xf32>
}

// broadcast(broadcast(x)) -> broadcast(x); an identity broadcast folds away.
// CHECK-LABEL: func.func @broadcast_broadcast
// CHECK-SAME: (%[[S:.*]]: tensor<f32>, %[[R:.*]]: tensor<?x4xf32>)
// CHECK: %[[B:.*]] = tx.broadcast %[[S]] : tensor<f32> -> tensor<?x4xf32>
// CHECK-NOT: tx.broadcast
// CHECK: return %[[B]], %[[R]] : tensor<?x4xf32>, tensor<?x4xf32>
func.func @broadcast_broadcast(%s: tensor<f32>, %r: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %a = tx.broadcast %s : tensor<f32> -> tensor<?x1xf32>
  %b = tx.broadcast %a : tensor<?x1xf32> -> tensor<?x4xf32>
  %c = tx.broadcast %r : tensor<?x4xf32> -> tensor<?x4xf32>
  return %b, %c : tensor<?x4xf32>, tensor<?x4xf32>
}

// Must not fire: one broadcast alone stays.
// CHECK-LABEL: func.func @broadcast_once_stays
// CHECK-SAME: (%[[S:.*]]: tensor<?x1xf32>)
// CHECK: %[[B:.*]] = tx.broadcast %[[S]] : tensor<?x1xf32> -> tensor<?x4xf32>
// CHECK: return %[[B]]
func.func @broadcast_once_stays(%s: tensor<?x1xf32>) -> tensor<?x4xf32> {
  %a = tx.broadcast %s : tensor<?x1xf32> -> tensor<?x4xf32>
  return %a : tensor<?x4xf32>
}

// Dead pure ops are erased once their users are gone; live ones stay.
// CHECK-LABEL: func.func @dead_ops
// CHECK-SAME: (%[[X:.*]]: tensor<?x1xf32>)
// CHECK-NEXT: %[[E:.*]] = tx.exp %[[X]]
// CHECK-NEXT: return %[[E]]
func.func @dead_ops(%x: tensor<?x1xf32>) -> tensor<?x1xf32> {
  %unused = tx.log %x : tensor<?x1xf32> -> tensor<?x1xf32>
  %e = tx.exp %x : tensor<?x1xf32> -> tensor<?x1xf32>
  return %e : tensor<?x1xf32>
}

// Rules combine: the shape of the adjoint chains --tx-autodiff emits (1 * g, 0 - g,
// neg of a neg, g / 1).
// CHECK-LABEL: func.func @adjoint_cleanup
// CHECK-SAME: (%[[G:.*]]: tensor<?x1xf32>, %[[P:.*]]: tensor<?x8xf32>)
// CHECK: %[[M:.*]] = tx.mul %[[G]], %[[P]]
// CHECK-NEXT: return %[[M]]
func.func @adjoint_cleanup(%g: tensor<?x1xf32>, %p: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %one = tx.constant 1.0 : f32 : tensor<f32>
  %zero = tx.constant 0.0 : f32 : tensor<f32>
  %a = tx.mul %one, %g : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %b = tx.sub %zero, %a : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %c = tx.neg %b : tensor<?x1xf32> -> tensor<?x1xf32>
  %d = tx.mul %c, %p : tensor<?x1xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  %e = tx.div %d, %one : tensor<?x8xf32>, tensor<f32> -> tensor<?x8xf32>
  return %e : tensor<?x8xf32>
}
