// RUN: lcejit-opt %s -split-input-file -verify-diagnostics
//
// Negative cases for the verifier of tx.grad.

func.func @grad_loss_not_rank0(%x: tensor<?x1xf32>) {
  // expected-error @+1 {{'tx.grad' op loss must be a rank-0 float tensor, got 'tensor<?x1xf32>'}}
  %g = tx.grad %x wrt (%x) : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  return
}

// -----

func.func @grad_loss_int(%l: tensor<i64>, %x: tensor<?x1xf32>) {
  // expected-error @+1 {{'tx.grad' op loss must be a rank-0 float tensor, got 'tensor<i64>'}}
  %g = tx.grad %l wrt (%x) : tensor<i64>, tensor<?x1xf32> -> tensor<?x1xf32>
  return
}

// -----

func.func @grad_too_few_results(%l: tensor<f32>, %x: tensor<?x1xf32>, %w: tensor<4x1xf32>) {
  // expected-error @+1 {{'tx.grad' op has 2 wrt values but 1 results}}
  %g = tx.grad %l wrt (%x, %w) : tensor<f32>, tensor<?x1xf32>, tensor<4x1xf32> -> tensor<?x1xf32>
  return
}

// -----

func.func @grad_too_many_results(%l: tensor<f32>, %x: tensor<?x1xf32>) {
  // expected-error @+1 {{'tx.grad' op has 1 wrt values but 2 results}}
  %g:2 = tx.grad %l wrt (%x) : tensor<f32>, tensor<?x1xf32> -> tensor<?x1xf32>, tensor<?x1xf32>
  return
}

// -----

func.func @grad_wrt_int(%l: tensor<f32>, %y: tensor<?x1xi64>) {
  // expected-error @+1 {{'tx.grad' op cannot differentiate with respect to a 'i64' value}}
  %g = tx.grad %l wrt (%y) : tensor<f32>, tensor<?x1xi64> -> tensor<?x1xf32>
  return
}

// -----

func.func @grad_wrt_i1(%l: tensor<f32>, %x: tensor<?x64xbf16>, %m: tensor<?x1xi1>) {
  // The first wrt is fine; the error names the second.
  // expected-error @+1 {{'tx.grad' op cannot differentiate with respect to a 'i1' value}}
  %g:2 = tx.grad %l wrt (%x, %m) : tensor<f32>, tensor<?x64xbf16>, tensor<?x1xi1> -> tensor<?x64xf32>, tensor<?x1xf32>
  return
}

// -----

func.func @grad_result_not_f32(%l: tensor<f32>, %x: tensor<?x64xbf16>) {
  // Gradients are always f32, whatever the type of the wrt value.
  // expected-error @+1 {{'tx.grad' op gradient type 'tensor<?x64xbf16>' must be f32 with shape [N, 64]}}
  %g = tx.grad %l wrt (%x) : tensor<f32>, tensor<?x64xbf16> -> tensor<?x64xbf16>
  return
}

// -----

func.func @grad_result_shape(%l: tensor<f32>, %w: tensor<1000x64xbf16>) {
  // expected-error @+1 {{'tx.grad' op gradient type 'tensor<64x1000xf32>' must be f32 with shape [1000, 64]}}
  %g = tx.grad %l wrt (%w) : tensor<f32>, tensor<1000x64xbf16> -> tensor<64x1000xf32>
  return
}

// -----

func.func @grad_unsupported_type(%l: tensor<f32>, %x: tensor<?x4xf8E4M3FN>) {
  // expected-error @+1 {{'tx.grad' op unsupported element type 'f8E4M3FN'}}
  %g = tx.grad %l wrt (%x) : tensor<f32>, tensor<?x4xf8E4M3FN> -> tensor<?x4xf32>
  return
}
