// RUN: lcejit-opt %s -split-input-file -verify-diagnostics
//
// Negative cases for the verifiers of reduce_sum, reduce_max, mean, logsumexp and gather.

func.func @reduce_sum_axis_out_of_range(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.reduce_sum' op axis 2 out of range for rank 2}}
  %0 = tx.reduce_sum %x {axis = 2 : i64} : tensor<?x4xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @reduce_max_axis_negative(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.reduce_max' op axis -1 out of range for rank 2}}
  %0 = tx.reduce_max %x {axis = -1 : i64} : tensor<?x4xf32> -> tensor<?x1xf32>
  return
}

// -----

func.func @reduce_sum_i1(%x: tensor<?x1xi1>) {
  // expected-error @+1 {{'tx.reduce_sum' op does not reduce i1 values (cast them first)}}
  %0 = tx.reduce_sum %x : tensor<?x1xi1> -> tensor<i1>
  return
}

// -----

func.func @reduce_max_i1(%x: tensor<?x4xi1>) {
  // expected-error @+1 {{'tx.reduce_max' op does not reduce i1 values (cast them first)}}
  %0 = tx.reduce_max %x {axis = 1 : i64} : tensor<?x4xi1> -> tensor<?x1xi1>
  return
}

// -----

func.func @mean_int(%x: tensor<?x1xi64>) {
  // expected-error @+1 {{'tx.mean' op operand must be floating point, got 'i64'}}
  %0 = tx.mean %x : tensor<?x1xi64> -> tensor<i64>
  return
}

// -----

func.func @reduce_sum_result_element_type(%x: tensor<?x1xbf16>) {
  // Reductions keep the element type; widen with tx.cast first.
  // expected-error @+1 {{'tx.reduce_sum' op result element type 'f32' must be 'bf16'}}
  %0 = tx.reduce_sum %x : tensor<?x1xbf16> -> tensor<f32>
  return
}

// -----

func.func @reduce_sum_axis_not_kept(%x: tensor<?x4xf32>) {
  // With an axis, the reduced dimension is kept with size 1.
  // expected-error @+1 {{'tx.reduce_sum' op result shape [N] does not match the expected [N, 1]}}
  %0 = tx.reduce_sum %x {axis = 1 : i64} : tensor<?x4xf32> -> tensor<?xf32>
  return
}

// -----

func.func @mean_all_not_rank0(%x: tensor<?x4xf32>) {
  // Without an axis, everything is reduced to rank 0.
  // expected-error @+1 {{'tx.mean' op result shape [1, 1] does not match the expected []}}
  %0 = tx.mean %x : tensor<?x4xf32> -> tensor<1x1xf32>
  return
}

// -----

func.func @reduce_max_unsupported(%x: tensor<?x4xui8>) {
  // expected-error @+1 {{'tx.reduce_max' op unsupported element type 'ui8'}}
  %0 = tx.reduce_max %x : tensor<?x4xui8> -> tensor<ui8>
  return
}

// -----

func.func @logsumexp_needs_axis(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.logsumexp' op requires attribute 'axis'}}
  %0 = tx.logsumexp %x : tensor<?x4xf32> -> tensor<f32>
  return
}

// -----

func.func @logsumexp_axis_out_of_range(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.logsumexp' op axis 3 out of range for rank 2}}
  %0 = tx.logsumexp %x {axis = 3 : i64} : tensor<?x4xf32> -> tensor<?x1xf32>
  return
}

// -----

func.func @logsumexp_int(%x: tensor<?x4xi32>) {
  // expected-error @+1 {{'tx.logsumexp' op operand must be floating point, got 'i32'}}
  %0 = tx.logsumexp %x {axis = 1 : i64} : tensor<?x4xi32> -> tensor<?x1xi32>
  return
}

// -----

func.func @logsumexp_i1(%x: tensor<?x4xi1>) {
  // expected-error @+1 {{'tx.logsumexp' op does not reduce i1 values (cast them first)}}
  %0 = tx.logsumexp %x {axis = 1 : i64} : tensor<?x4xi1> -> tensor<?x1xi1>
  return
}

// -----

func.func @logsumexp_result_type(%x: tensor<?x4xbf16>) {
  // expected-error @+1 {{'tx.logsumexp' op result element type 'f32' must be 'bf16'}}
  %0 = tx.logsumexp %x {axis = 1 : i64} : tensor<?x4xbf16> -> tensor<?x1xf32>
  return
}

// -----

func.func @logsumexp_result_shape(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'tx.logsumexp' op result shape [N, 4] does not match the expected [1, 4]}}
  %0 = tx.logsumexp %x {axis = 0 : i64} : tensor<?x4xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @gather_axis_out_of_range(%x: tensor<?x4xf32>, %i: tensor<?x1xi64>) {
  // expected-error @+1 {{'tx.gather' op axis 2 out of range for rank 2}}
  %0 = tx.gather %x, %i {axis = 2 : i64} : tensor<?x4xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  return
}

// -----

func.func @gather_float_index(%x: tensor<?x4xf32>, %i: tensor<?x1xf32>) {
  // expected-error @+1 {{'tx.gather' op index element type must be i32 or i64, got 'f32'}}
  %0 = tx.gather %x, %i {axis = 1 : i64} : tensor<?x4xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  return
}

// -----

func.func @gather_i1_index(%x: tensor<?x4xf32>, %i: tensor<?x1xi1>) {
  // expected-error @+1 {{'tx.gather' op index element type must be i32 or i64, got 'i1'}}
  %0 = tx.gather %x, %i {axis = 1 : i64} : tensor<?x4xf32>, tensor<?x1xi1> -> tensor<?x1xf32>
  return
}

// -----

func.func @gather_index_rank(%x: tensor<?x4xf32>, %i: tensor<?xi64>) {
  // expected-error @+1 {{'tx.gather' op index rank 1 differs from source rank 2}}
  %0 = tx.gather %x, %i {axis = 1 : i64} : tensor<?x4xf32>, tensor<?xi64> -> tensor<?xf32>
  return
}

// -----

func.func @gather_index_shape(%x: tensor<?x4xf32>, %i: tensor<1x1xi64>) {
  // Outside the gather axis the index must have the source's sizes (N here).
  // expected-error @+1 {{'tx.gather' op index shape [1, 1] differs from source shape [N, 4] outside axis 1}}
  %0 = tx.gather %x, %i {axis = 1 : i64} : tensor<?x4xf32>, tensor<1x1xi64> -> tensor<1x1xf32>
  return
}

// -----

func.func @gather_result_element_type(%x: tensor<?x4xbf16>, %i: tensor<?x1xi32>) {
  // expected-error @+1 {{'tx.gather' op result element type must be 'bf16'}}
  %0 = tx.gather %x, %i {axis = 1 : i64} : tensor<?x4xbf16>, tensor<?x1xi32> -> tensor<?x1xf32>
  return
}

// -----

func.func @gather_result_shape(%x: tensor<?x4xf32>, %i: tensor<?x2xi64>) {
  // The result has the shape of the index.
  // expected-error @+1 {{'tx.gather' op result shape [N, 1] does not match the expected [N, 2]}}
  %0 = tx.gather %x, %i {axis = 1 : i64} : tensor<?x4xf32>, tensor<?x2xi64> -> tensor<?x1xf32>
  return
}

// -----

func.func @gather_unsupported_index(%x: tensor<?x4xf32>, %i: tensor<?x1xi8>) {
  // expected-error @+1 {{'tx.gather' op unsupported element type 'i8'}}
  %0 = tx.gather %x, %i {axis = 1 : i64} : tensor<?x4xf32>, tensor<?x1xi8> -> tensor<?x1xf32>
  return
}
