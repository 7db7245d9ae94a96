// RUN: lcejit-opt %s -split-input-file -verify-diagnostics
//
// Negative cases for the verifiers of tx.cast and tx.broadcast.

func.func @cast_shape_change(%x: tensor<?x1xf32>) {
  // expected-error @+1 {{'tx.cast' op shape changes from [N, 1] to [N, 2]}}
  %0 = tx.cast %x : tensor<?x1xf32> -> tensor<?x2xbf16>
  return
}

// -----

func.func @cast_float_to_int(%x: tensor<?x1xf32>) {
  // expected-error @+1 {{'tx.cast' op cannot cast 'f32' to 'i64'}}
  %0 = tx.cast %x : tensor<?x1xf32> -> tensor<?x1xi64>
  return
}

// -----

func.func @cast_int_to_i1(%x: tensor<?x1xi64>) {
  // expected-error @+1 {{'tx.cast' op cannot cast 'i64' to 'i1'}}
  %0 = tx.cast %x : tensor<?x1xi64> -> tensor<?x1xi1>
  return
}

// -----

func.func @cast_float_to_i1(%x: tensor<?x1xbf16>) {
  // expected-error @+1 {{'tx.cast' op cannot cast 'bf16' to 'i1'}}
  %0 = tx.cast %x : tensor<?x1xbf16> -> tensor<?x1xi1>
  return
}

// -----

func.func @cast_unsupported_result(%x: tensor<?x1xf32>) {
  // expected-error @+1 {{'tx.cast' op unsupported result element type 'f8E5M2'}}
  %0 = tx.cast %x : tensor<?x1xf32> -> tensor<?x1xf8E5M2>
  return
}

// -----

func.func @broadcast_element_type(%x: tensor<f32>) {
  // expected-error @+1 {{'tx.broadcast' op element type changes from 'f32' to 'bf16'}}
  %0 = tx.broadcast %x : tensor<f32> -> tensor<?x1xbf16>
  return
}

// -----

func.func @broadcast_static_to_other(%x: tensor<1x3xf32>) {
  // expected-error @+1 {{'tx.broadcast' op cannot broadcast [1, 3] to [N, 4]}}
  %0 = tx.broadcast %x : tensor<1x3xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @broadcast_shrinks(%x: tensor<?x1xf32>) {
  // A broadcast never removes N: [N, 1] -> [1, 1] is a reduction, not a broadcast.
  // expected-error @+1 {{'tx.broadcast' op cannot broadcast [N, 1] to [1, 1]}}
  %0 = tx.broadcast %x : tensor<?x1xf32> -> tensor<1x1xf32>
  return
}

// -----

func.func @broadcast_rank_change(%x: tensor<4xf32>) {
  // expected-error @+1 {{'tx.broadcast' op cannot broadcast [4] to [N, 4]}}
  %0 = tx.broadcast %x : tensor<4xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @broadcast_to_rank0(%x: tensor<1xf32>) {
  // expected-error @+1 {{'tx.broadcast' op cannot broadcast [1] to []}}
  %0 = tx.broadcast %x : tensor<1xf32> -> tensor<f32>
  return
}
