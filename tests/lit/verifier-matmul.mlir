// RUN: lcejit-opt %s -split-input-file -verify-diagnostics
//
// Negative cases for the verifier of tx.matmul.

func.func @matmul_rank1(%a: tensor<?x64xbf16>, %b: tensor<64xbf16>) {
  // expected-error @+1 {{'tx.matmul' op operands must be rank 2, got [N, 64] and [64]}}
  %0 = tx.matmul %a, %b : tensor<?x64xbf16>, tensor<64xbf16> -> tensor<?x1xf32>
  return
}

// -----

func.func @matmul_rank3(%a: tensor<2x?x64xf32>, %b: tensor<64x8xf32>) {
  // expected-error @+1 {{'tx.matmul' op operands must be rank 2, got [2, N, 64] and [64, 8]}}
  %0 = tx.matmul %a, %b : tensor<2x?x64xf32>, tensor<64x8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @matmul_int_operands(%a: tensor<?x64xi32>, %b: tensor<8x64xi32>) {
  // expected-error @+1 {{'tx.matmul' op operands must be floating point, got 'i32' and 'i32'}}
  %0 = tx.matmul %a, %b {transpose_rhs} : tensor<?x64xi32>, tensor<8x64xi32> -> tensor<?x8xf32>
  return
}

// -----

func.func @matmul_mixed_int(%a: tensor<?x64xf32>, %b: tensor<8x64xi64>) {
  // expected-error @+1 {{'tx.matmul' op operands must be floating point, got 'f32' and 'i64'}}
  %0 = tx.matmul %a, %b {transpose_rhs} : tensor<?x64xf32>, tensor<8x64xi64> -> tensor<?x8xf32>
  return
}

// -----

func.func @matmul_unsupported_operand_type(%a: tensor<?x64xf8E4M3FN>, %b: tensor<8x64xf8E4M3FN>) {
  // expected-error @+1 {{'tx.matmul' op unsupported element type 'f8E4M3FN' (tx supports bf16, f16, f32, f64, i1, i32, i64)}}
  %0 = tx.matmul %a, %b {transpose_rhs} : tensor<?x64xf8E4M3FN>, tensor<8x64xf8E4M3FN> -> tensor<?x8xf32>
  return
}

// -----

func.func @matmul_contraction_no_transpose(%a: tensor<?x64xbf16>, %b: tensor<8x64xbf16>) {
  // Without transpose_rhs the contraction is lhs dim 1 (64) vs rhs dim 0 (8).
  // expected-error @+1 {{'tx.matmul' op contraction sizes differ: [64] vs [8]}}
  %0 = tx.matmul %a, %b : tensor<?x64xbf16>, tensor<8x64xbf16> -> tensor<?x64xf32>
  return
}

// -----

func.func @matmul_contraction_transpose_lhs(%a: tensor<?x64xf32>, %b: tensor<8x64xf32>) {
  // transpose_lhs contracts lhs dim 0 (N) with rhs dim 0 (8).
  // expected-error @+1 {{'tx.matmul' op contraction sizes differ: [N] vs [8]}}
  %0 = tx.matmul %a, %b {transpose_lhs} : tensor<?x64xf32>, tensor<8x64xf32> -> tensor<64x64xf32>
  return
}

// -----

func.func @matmul_result_bf16(%a: tensor<?x64xbf16>, %b: tensor<8x64xbf16>) {
  // expected-error @+1 {{'tx.matmul' op result element type must be f32 (the accumulator), got 'bf16'}}
  %0 = tx.matmul %a, %b {transpose_rhs} : tensor<?x64xbf16>, tensor<8x64xbf16> -> tensor<?x8xbf16>
  return
}

// -----

func.func @matmul_result_shape(%a: tensor<?x64xbf16>, %b: tensor<8x64xbf16>) {
  // expected-error @+1 {{'tx.matmul' op result shape [N, 64] does not match the expected [N, 8]}}
  %0 = tx.matmul %a, %b {transpose_rhs} : tensor<?x64xbf16>, tensor<8x64xbf16> -> tensor<?x64xf32>
  return
}

// -----

func.func @matmul_result_shape_both_transposed(%a: tensor<64x?xf32>, %b: tensor<8x64xf32>) {
  // op(lhs) = [N, 64], op(rhs) = [64, 8]: the result is [N, 8], not [64, 8].
  // expected-error @+1 {{'tx.matmul' op result shape [64, 8] does not match the expected [N, 8]}}
  %0 = tx.matmul %a, %b {transpose_lhs, transpose_rhs} : tensor<64x?xf32>, tensor<8x64xf32> -> tensor<64x8xf32>
  return
}
