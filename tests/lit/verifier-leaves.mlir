// RUN: lcejit-opt %s -split-input-file -verify-diagnostics
//
// Negative cases for the verifiers of tx.constant, tx.iota and tx.dim, and for the
// element-type check that every tx op runs first (checkElementTypes).

func.func @constant_not_rank0() {
  // expected-error @+1 {{'tx.constant' op result must be rank 0, got [2]}}
  %0 = tx.constant 1.0 : f32 : tensor<2xf32>
  return
}

// -----

func.func @constant_dynamic_not_rank0() {
  // expected-error @+1 {{'tx.constant' op result must be rank 0, got [N, 1]}}
  %0 = tx.constant 1.0 : f32 : tensor<?x1xf32>
  return
}

// -----

func.func @constant_value_type_mismatch() {
  // expected-error @+1 {{'tx.constant' op value type 'f64' does not match the element type 'f32'}}
  %0 = tx.constant 1.0 : f64 : tensor<f32>
  return
}

// -----

func.func @constant_int_value_for_float() {
  // expected-error @+1 {{'tx.constant' op value type 'i64' does not match the element type 'f32'}}
  %0 = tx.constant 1 : i64 : tensor<f32>
  return
}

// -----

func.func @constant_unsupported_result_type() {
  // expected-error @+1 {{'tx.constant' op unsupported result element type 'i8'}}
  %0 = tx.constant 1 : i8 : tensor<i8>
  return
}

// -----

func.func @constant_unsigned_result_type() {
  // Only signless integers are tx element types.
  // expected-error @+1 {{'tx.constant' op unsupported result element type 'ui32'}}
  %0 = tx.constant 1 : ui32 : tensor<ui32>
  return
}

// -----

func.func @iota_dynamic_shape() {
  // expected-error @+1 {{'tx.iota' op result shape [N, 4] must be static}}
  %0 = tx.iota {axis = 1 : i64} : tensor<?x4xi64>
  return
}

// -----

func.func @iota_float() {
  // expected-error @+1 {{'tx.iota' op result element type must be i32 or i64, got 'f32'}}
  %0 = tx.iota {axis = 1 : i64} : tensor<1x4xf32>
  return
}

// -----

func.func @iota_i1() {
  // expected-error @+1 {{'tx.iota' op result element type must be i32 or i64, got 'i1'}}
  %0 = tx.iota {axis = 1 : i64} : tensor<1x4xi1>
  return
}

// -----

func.func @iota_axis_too_big() {
  // expected-error @+1 {{'tx.iota' op axis 2 out of range for rank 2}}
  %0 = tx.iota {axis = 2 : i64} : tensor<1x4xi32>
  return
}

// -----

func.func @iota_axis_negative() {
  // expected-error @+1 {{'tx.iota' op axis -1 out of range for rank 2}}
  %0 = tx.iota {axis = -1 : i64} : tensor<1x4xi64>
  return
}

// -----

func.func @iota_unsupported_type() {
  // expected-error @+1 {{'tx.iota' op unsupported result element type 'i16'}}
  %0 = tx.iota {axis = 0 : i64} : tensor<4xi16>
  return
}

// -----

func.func @dim_axis_out_of_range(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.dim' op axis 2 out of range for rank 2}}
  %0 = tx.dim %x {axis = 2 : i64} : tensor<?x4xf32> -> tensor<i64>
  return
}

// -----

func.func @dim_axis_negative(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.dim' op axis -1 out of range for rank 2}}
  %0 = tx.dim %x {axis = -1 : i64} : tensor<?x4xf32> -> tensor<i64>
  return
}

// -----

func.func @dim_result_i32(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.dim' op result must be tensor<i64>}}
  %0 = tx.dim %x {axis = 0 : i64} : tensor<?x4xf32> -> tensor<i32>
  return
}

// -----

func.func @dim_result_not_rank0(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.dim' op result must be tensor<i64>}}
  %0 = tx.dim %x {axis = 0 : i64} : tensor<?x4xf32> -> tensor<1xi64>
  return
}
