// RUN: lcejit-opt %s -split-input-file --tx-autodiff --tx-simplify --cse --tx-fuse \
// RUN:   --tx-simplify --cse --tx-print-plan -verify-diagnostics -o /dev/null
//
// Functions the planner must refuse, each with an error that names the function, the op
// and its location, and the reason. They run through the whole pass pipeline first.

// The LCE logits are also returned: the fuser leaves the matmul alone (all or nothing)
// and the planner reports it at the matmul's own location (column 8, not the
// function's); the other cases match any location.
// expected-error-re @+1 {{cannot plan @logits_returned: 'tx.matmul' at loc({{.*}}tx-print-plan-errors.mlir":{{[0-9]+}}:8): this matmul was not fused (its [N, C] result has a consumer the fuser does not handle, or its layout is not lhs · rhsᵀ); run --tx-fuse and see its rules}}
func.func @logits_returned(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %y: tensor<?x1xi64>) -> (tensor<f32>, tensor<?x1000xf32>, tensor<?x64xf32>) {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %zy = tx.gather %z, %y {axis = 1 : i64} : tensor<?x1000xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  %l = tx.sub %lse, %zy : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %loss = tx.mean %l : tensor<?x1xf32> -> tensor<f32>
  %dh = tx.grad %loss wrt (%h) : tensor<f32>, tensor<?x64xbf16> -> tensor<?x64xf32>
  return %loss, %z, %dh : tensor<f32>, tensor<?x1000xf32>, tensor<?x64xf32>
}

// -----

// A matmul that is not H · Wᵀ is never fused.
// expected-error-re @+1 {{cannot plan @not_transposed: 'tx.matmul' at loc({{.*}}): this matmul was not fused}}
func.func @not_transposed(%h: tensor<?x64xbf16>, %w: tensor<64x1000xbf16>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w : tensor<?x64xbf16>, tensor<64x1000xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse : tensor<?x1xf32>
}

// -----

// expected-error-re @+1 {{cannot plan @k_not_multiple_of_8: 'tx.gemm_reduce' at loc({{.*}}): K = 60 must be a multiple of 8 (16-byte rows)}}
func.func @k_not_multiple_of_8(%h: tensor<?x60xbf16>, %w: tensor<1000x60xbf16>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x60xbf16>, tensor<1000x60xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse : tensor<?x1xf32>
}

// -----

// expected-error-re @+1 {{cannot plan @f64_gemm: 'tx.gemm_reduce' at loc({{.*}}): GEMM operands of type f64 are not supported}}
func.func @f64_gemm(%h: tensor<?x64xf64>, %w: tensor<1000x64xf64>) -> tensor<?x1xf32> {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xf64>, tensor<1000x64xf64> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse : tensor<?x1xf32>
}

// -----

// expected-error-re @+1 {{cannot plan @global_max: 'tx.reduce_max' at loc({{.*}}): a maximum over rows is not supported yet}}
func.func @global_max(%x: tensor<?x1xf32>) -> tensor<f32> {
  %m = tx.reduce_max %x : tensor<?x1xf32> -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// expected-error-re @+1 {{cannot plan @wide_row: 'tx.exp' at loc({{.*}}): result shape [N, 4] is neither a row [N, 1] nor a scalar; only fused ops may produce larger tensors}}
func.func @wide_row(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %e = tx.exp %x : tensor<?x4xf32> -> tensor<?x4xf32>
  return %e : tensor<?x4xf32>
}

// -----

// A GEMM operand that is not a function argument: the op producing it is refused first.
// expected-error-re @+1 {{cannot plan @gemm_operand_not_arg: 'tx.cast' at loc({{.*}}): result shape [N, 64] is neither a row [N, 1] nor a scalar}}
func.func @gemm_operand_not_arg(%h: tensor<?x64xf32>, %w: tensor<1000x64xbf16>) -> tensor<?x1xf32> {
  %hb = tx.cast %h : tensor<?x64xf32> -> tensor<?x64xbf16>
  %z = tx.matmul %hb, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  return %lse : tensor<?x1xf32>
}

// -----

// expected-error-re @+1 {{cannot plan @grad_consumed: 'tx.reduce_sum' at loc({{.*}}): a gradient from a fused GEMM may only be returned (optionally cast)}}
func.func @grad_consumed(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %g: tensor<?x1xf32>) -> tensor<f32> {
  %dl, %dr = tx.gemm_grad %h, %w sides(%g : tensor<?x1xf32>) : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32> {
  ^bb0(%acc: f32, %col: i64, %gi: f32):
    %0 = arith.mulf %acc, %gi : f32
    tx.yield %0 : f32
  }
  %s = tx.reduce_sum %dr : tensor<1000x64xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// expected-error-re @+1 {{cannot plan @gather_rows: 'tx.gather' at loc({{.*}}): op not supported outside fused GEMMs}}
func.func @gather_rows(%x: tensor<?x1xf32>, %i: tensor<?x1xi64>) -> tensor<?x1xf32> {
  %g = tx.gather %x, %i {axis = 1 : i64} : tensor<?x1xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  return %g : tensor<?x1xf32>
}

// -----

// expected-error-re @+1 {{cannot plan @epilogue_op: 'arith.remf' at loc({{.*}}): op not supported in a fused epilogue}}
func.func @epilogue_op(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>) -> tensor<?x1xf32> {
  %r = tx.gemm_reduce %h, %w {kinds = ["sum"]} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1xf32> {
  ^bb0(%acc: f32, %col: i64):
    %c = arith.constant 7.0 : f32
    %0 = arith.remf %acc, %c : f32
    tx.yield %0 : f32
  }
  return %r : tensor<?x1xf32>
}
