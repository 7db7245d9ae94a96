// RUN: lcejit-opt %s -split-input-file -verify-diagnostics
//
// Negative cases for the verifiers of the fused ops tx.gemm_reduce and tx.gemm_grad
// (the common checks of verifyFusedGemm, then each op's own result checks) and of
// tx.yield.

func.func @fused_rank1(%h: tensor<?x64xbf16>, %w: tensor<64xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op operands must be rank 2}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_types_differ(%h: tensor<?x64xbf16>, %w: tensor<1000x64xf32>) {
  // Unlike tx.matmul, a fused GEMM takes one operand type.
  // expected-error @+1 {{'tx.gemm_reduce' op operands must share one floating-point type, got 'bf16' and 'f32'}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xf32> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_int_operands(%h: tensor<?x64xi32>, %w: tensor<1000x64xi32>) {
  // expected-error @+1 {{'tx.gemm_grad' op operands must share one floating-point type, got 'i32' and 'i32'}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x64xi32>, tensor<1000x64xi32> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_k_differs(%h: tensor<?x64xbf16>, %w: tensor<1000x32xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op lhs [N, 64] and rhs [1000, 32] need one static K}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x32xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_k_dynamic(%h: tensor<?x?xbf16>, %w: tensor<1000x?xbf16>) {
  // expected-error @+1 {{'tx.gemm_grad' op lhs [N, N] and rhs [1000, N] need one static K}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x?xbf16>, tensor<1000x?xbf16> -> tensor<?x?xf32>, tensor<1000x?xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_rhs_rows_dynamic(%h: tensor<?x64xbf16>, %w: tensor<?x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op rhs rows must be static}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_side_shape(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %s: tensor<?x2xf32>) {
  // expected-error @+1 {{'tx.gemm_reduce' op side operand shape [N, 2] is none of row [N, 1], column [1, 1000] or rank 0}}
  %r = tx.gemm_reduce %h, %w sides(%s : tensor<?x2xf32>) {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64, %x: f32):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_side_column_wrong_c(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %s: tensor<1x999xf32>) {
  // expected-error @+1 {{'tx.gemm_grad' op side operand shape [1, 999] is none of row [N, 1], column [1, 1000] or rank 0}}
  %dl, %dr = tx.gemm_grad %h, %w sides(%s : tensor<1x999xf32>) : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64, %x: f32):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_side_unsupported_type(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %s: tensor<?x1xi8>) {
  // expected-error @+1 {{'tx.gemm_reduce' op unsupported element type 'i8'}}
  %r = tx.gemm_reduce %h, %w sides(%s : tensor<?x1xi8>) {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64, %x: i8):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_body_arg_count(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %y: tensor<?x1xi64>) {
  // expected-error @+1 {{'tx.gemm_reduce' op body must take 2 + 1 arguments, takes 2}}
  %r = tx.gemm_reduce %h, %w sides(%y : tensor<?x1xi64>) {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_body_acc_type(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // The accumulator is f32 even for bf16 operands.
  // expected-error @+1 {{'tx.gemm_grad' op body arguments must start with (f32 acc, i64 col)}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: bf16, %col: i64):
    %0 = arith.extf %acc : bf16 to f32
    tx.yield %0 : f32
  }
  return
}

// -----

func.func @fused_body_col_type(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op body arguments must start with (f32 acc, i64 col)}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i32):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_body_side_arg_type(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %y: tensor<?x1xi64>, %s: tensor<f32>) {
  // expected-error @+1 {{'tx.gemm_reduce' op body argument 3 must have type 'f32'}}
  %r = tx.gemm_reduce %h, %w sides(%y, %s : tensor<?x1xi64>, tensor<f32>) {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64, %yi: i64, %sv: bf16):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_yield_count(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // One yielded value per kind.
  // expected-error @+1 {{'tx.gemm_reduce' op body must yield 2 values, yields 1}}
  %r:2 = tx.gemm_reduce %h, %w {kinds = ["logsumexp", "sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32>, tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_grad_yield_count(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // gemm_grad yields exactly one value: dZ.
  // expected-error @+1 {{'tx.gemm_grad' op body must yield 1 values, yields 2}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc, %acc : f32, f32
  }
  return
}

// -----

func.func @fused_yield_type(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op body must yield f32 values, yields 'i64'}}
  %r = tx.gemm_reduce %h, %w {kinds = ["max"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %col : i64
  }
  return
}

// -----

func.func @fused_body_tx_op(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op body may contain only arith and math ops, found tx.constant}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    %c = tx.constant 1.0 : f32 : tensor<f32>
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_body_func_op(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_grad' op body may contain only arith and math ops, found func.call}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64):
    %0 = func.call @scale(%acc) : (f32) -> f32
    tx.yield %0 : f32
  }
  return
}
func.func private @scale(f32) -> f32

// -----

func.func @fused_isolated(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  %c = arith.constant 2.0 : f32
  // expected-note @+1 {{required by region isolation constraints}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    // expected-error @+1 {{'arith.mulf' op using value defined outside the region}}
    %0 = arith.mulf %acc, %c : f32
    tx.yield %0 : f32
  }
  return
}

// -----

func.func @fused_unknown_kind(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op unknown reduction kind "min" (expected "sum", "max" or "logsumexp")}}
  %r = tx.gemm_reduce %h, %w {kinds = ["min"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_kinds_not_strings(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op attribute 'kinds' failed to satisfy constraint: string array attribute}}
  %r = tx.gemm_reduce %h, %w {kinds = [1 : i64]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_kinds_vs_results(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op has 2 kinds but 1 results}}
  %r = tx.gemm_reduce %h, %w {kinds = ["logsumexp", "sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc, %acc : f32, f32
  }
  return
}

// -----

func.func @fused_result_bf16(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_reduce' op results must be f32 [N, 1], got 'tensor<?x1xbf16>'}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xbf16> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_result_shape(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // The [N, C] tensor is never a result: each kind reduces along the row.
  // expected-error @+1 {{'tx.gemm_reduce' op results must be f32 [N, 1], got 'tensor<?x1000xf32>'}}
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_d_lhs_type(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_grad' op d_lhs must be f32 [N, 64]}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xbf16>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_d_lhs_shape(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_grad' op d_lhs must be f32 [N, 64]}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_d_rhs_shape(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_grad' op d_rhs must be f32 [1000, 64]}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<64x1000xf32> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @fused_d_rhs_type(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.gemm_grad' op d_rhs must be f32 [1000, 64]}}
  %dl, %dr = tx.gemm_grad %h, %w : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf16> {
  ^bb0(%acc: f32, %col: i64):
    tx.yield %acc : f32
  }
  return
}

// -----

func.func @yield_outside_fused(%x: f32) {
  // expected-error @+1 {{'tx.yield' op expects parent op to be one of 'tx.gemm_reduce, tx.gemm_grad'}}
  tx.yield %x : f32
}
