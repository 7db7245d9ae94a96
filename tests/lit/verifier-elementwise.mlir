// RUN: lcejit-opt %s -split-input-file -verify-diagnostics
//
// Negative cases for the elementwise verifiers: binary ops (add, sub, mul, div, max),
// unary float ops (neg, exp, log, tanh), tx.cmp and tx.select.

func.func @add_unsupported_operand(%a: tensor<?x1xi8>, %b: tensor<?x1xi8>) {
  // expected-error @+1 {{'tx.add' op unsupported element type 'i8' (tx supports bf16, f16, f32, f64, i1, i32, i64)}}
  %0 = tx.add %a, %b : tensor<?x1xi8>, tensor<?x1xi8> -> tensor<?x1xi8>
  return
}

// -----

func.func @add_element_types_differ(%a: tensor<?x1xf32>, %b: tensor<?x1xbf16>) {
  // expected-error @+1 {{'tx.add' op operand element types differ: 'f32' and 'bf16'}}
  %0 = tx.add %a, %b : tensor<?x1xf32>, tensor<?x1xbf16> -> tensor<?x1xf32>
  return
}

// -----

func.func @sub_i1(%a: tensor<?x1xi1>, %b: tensor<?x1xi1>) {
  // expected-error @+1 {{'tx.sub' op does not take i1 operands}}
  %0 = tx.sub %a, %b : tensor<?x1xi1>, tensor<?x1xi1> -> tensor<?x1xi1>
  return
}

// -----

func.func @mul_i1(%a: tensor<?x1xi1>, %b: tensor<i1>) {
  // expected-error @+1 {{'tx.mul' op does not take i1 operands}}
  %0 = tx.mul %a, %b : tensor<?x1xi1>, tensor<i1> -> tensor<?x1xi1>
  return
}

// -----

func.func @div_int(%a: tensor<?x1xi64>, %b: tensor<i64>) {
  // expected-error @+1 {{'tx.div' op operands must be floating point, got 'i64'}}
  %0 = tx.div %a, %b : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  return
}

// -----

func.func @max_no_broadcast(%a: tensor<?x4xf32>, %b: tensor<?x3xf32>) {
  // expected-error @+1 {{'tx.max' op operand shapes [N, 4] and [N, 3] do not broadcast}}
  %0 = tx.max %a, %b : tensor<?x4xf32>, tensor<?x3xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @add_rank_mismatch(%a: tensor<?x4xf32>, %b: tensor<4xf32>) {
  // Ranks must be equal unless one operand is rank 0 (no NumPy rank promotion).
  // expected-error @+1 {{'tx.add' op operand shapes [N, 4] and [4] do not broadcast}}
  %0 = tx.add %a, %b : tensor<?x4xf32>, tensor<4xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @add_dynamic_vs_static(%a: tensor<?x4xf32>, %b: tensor<8x4xf32>) {
  // N never broadcasts against a static size > 1.
  // expected-error @+1 {{'tx.add' op operand shapes [N, 4] and [8, 4] do not broadcast}}
  %0 = tx.add %a, %b : tensor<?x4xf32>, tensor<8x4xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @mul_result_element_type(%a: tensor<?x4xbf16>, %b: tensor<bf16>) {
  // expected-error @+1 {{'tx.mul' op result element type 'f32' must be 'bf16'}}
  %0 = tx.mul %a, %b : tensor<?x4xbf16>, tensor<bf16> -> tensor<?x4xf32>
  return
}

// -----

func.func @sub_result_shape(%a: tensor<?x1xf32>, %b: tensor<1x4xf32>) {
  // expected-error @+1 {{'tx.sub' op result shape [N, 1] does not match the expected [N, 4]}}
  %0 = tx.sub %a, %b : tensor<?x1xf32>, tensor<1x4xf32> -> tensor<?x1xf32>
  return
}

// -----

func.func @add_unsupported_result(%a: tensor<?x1xf32>, %b: tensor<?x1xf32>) {
  // expected-error @+1 {{'tx.add' op unsupported result element type 'f80'}}
  %0 = tx.add %a, %b : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf80>
  return
}

// -----

func.func @neg_int(%a: tensor<?x1xi64>) {
  // expected-error @+1 {{'tx.neg' op operand must be floating point, got 'i64'}}
  %0 = tx.neg %a : tensor<?x1xi64> -> tensor<?x1xi64>
  return
}

// -----

func.func @exp_i1(%a: tensor<?x1xi1>) {
  // expected-error @+1 {{'tx.exp' op operand must be floating point, got 'i1'}}
  %0 = tx.exp %a : tensor<?x1xi1> -> tensor<?x1xi1>
  return
}

// -----

func.func @log_result_type(%a: tensor<?x1xbf16>) {
  // expected-error @+1 {{'tx.log' op result type 'tensor<?x1xf32>' must be 'tensor<?x1xbf16>'}}
  %0 = tx.log %a : tensor<?x1xbf16> -> tensor<?x1xf32>
  return
}

// -----

func.func @tanh_result_shape(%a: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.tanh' op result type 'tensor<?x1xf32>' must be 'tensor<?x4xf32>'}}
  %0 = tx.tanh %a : tensor<?x4xf32> -> tensor<?x1xf32>
  return
}

// -----

func.func @cmp_element_types_differ(%a: tensor<?x1xi64>, %b: tensor<i32>) {
  // expected-error @+1 {{'tx.cmp' op operand element types differ: 'i64' and 'i32'}}
  %0 = tx.cmp eq, %a, %b : tensor<?x1xi64>, tensor<i32> -> tensor<?x1xi1>
  return
}

// -----

func.func @cmp_no_broadcast(%a: tensor<1x4xi64>, %b: tensor<1x5xi64>) {
  // expected-error @+1 {{'tx.cmp' op operand shapes [1, 4] and [1, 5] do not broadcast}}
  %0 = tx.cmp eq, %a, %b : tensor<1x4xi64>, tensor<1x5xi64> -> tensor<1x4xi1>
  return
}

// -----

func.func @cmp_result_not_i1(%a: tensor<?x1xf32>, %b: tensor<f32>) {
  // expected-error @+1 {{'tx.cmp' op result element type must be i1}}
  %0 = tx.cmp lt, %a, %b : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  return
}

// -----

func.func @cmp_result_shape(%a: tensor<1x4xi64>, %b: tensor<?x1xi64>) {
  // expected-error @+1 {{'tx.cmp' op result shape [N, 1] does not match the expected [N, 4]}}
  %0 = tx.cmp eq, %a, %b : tensor<1x4xi64>, tensor<?x1xi64> -> tensor<?x1xi1>
  return
}

// -----

func.func @cmp_unsupported_operand(%a: tensor<?x1xi16>, %b: tensor<i16>) {
  // expected-error @+1 {{'tx.cmp' op unsupported element type 'i16'}}
  %0 = tx.cmp ne, %a, %b : tensor<?x1xi16>, tensor<i16> -> tensor<?x1xi1>
  return
}

// -----

func.func @cmp_bad_predicate(%a: tensor<?x1xi64>, %b: tensor<i64>) {
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'predicate' [eq, ne, lt, le, gt, ge]}}
  %0 = tx.cmp ult, %a, %b : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
  return
}

// -----

func.func @select_cond_not_i1(%c: tensor<?x1xi64>, %a: tensor<?x1xf32>, %b: tensor<f32>) {
  // expected-error @+1 {{'tx.select' op condition must be i1, got 'i64'}}
  %0 = tx.select %c, %a, %b : tensor<?x1xi64>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  return
}

// -----

func.func @select_value_types_differ(%c: tensor<?x1xi1>, %a: tensor<?x1xf32>, %b: tensor<bf16>) {
  // expected-error @+1 {{'tx.select' op value element types differ: 'f32' and 'bf16'}}
  %0 = tx.select %c, %a, %b : tensor<?x1xi1>, tensor<?x1xf32>, tensor<bf16> -> tensor<?x1xf32>
  return
}

// -----

func.func @select_no_broadcast(%c: tensor<?x1xi1>, %a: tensor<1x4xf32>, %b: tensor<1x8xf32>) {
  // The condition takes part in the broadcast: [N, 1] x [1, 4] = [N, 4], then [1, 8] clashes.
  // expected-error @+1 {{'tx.select' op operand shapes [N, 4] and [1, 8] do not broadcast}}
  %0 = tx.select %c, %a, %b : tensor<?x1xi1>, tensor<1x4xf32>, tensor<1x8xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @select_cond_no_broadcast(%c: tensor<1x3xi1>, %a: tensor<?x4xf32>, %b: tensor<f32>) {
  // expected-error @+1 {{'tx.select' op operand shapes [1, 3] and [N, 4] do not broadcast}}
  %0 = tx.select %c, %a, %b : tensor<1x3xi1>, tensor<?x4xf32>, tensor<f32> -> tensor<?x4xf32>
  return
}

// -----

func.func @select_result_element_type(%c: tensor<?x1xi1>, %a: tensor<?x1xi64>, %b: tensor<i64>) {
  // expected-error @+1 {{'tx.select' op result element type must be 'i64'}}
  %0 = tx.select %c, %a, %b : tensor<?x1xi1>, tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi32>
  return
}

// -----

func.func @select_result_shape(%c: tensor<?x1xi1>, %a: tensor<1x4xf32>, %b: tensor<f32>) {
  // expected-error @+1 {{'tx.select' op result shape [1, 4] does not match the expected [N, 4]}}
  %0 = tx.select %c, %a, %b : tensor<?x1xi1>, tensor<1x4xf32>, tensor<f32> -> tensor<1x4xf32>
  return
}
