// RUN: lcejit-opt %s --tx-print-plan="output-types=-,bf17" -verify-diagnostics -o /dev/null
//
// A bad --tx-print-plan option is reported on the function, before any planning.

// expected-error @+1 {{unknown dtype 'bf17' in output-types}}
func.func @bad_output_type(%x: tensor<?x1xf32>) -> (tensor<f32>, tensor<?x1xf32>) {
  %s = tx.reduce_sum %x : tensor<?x1xf32> -> tensor<f32>
  return %s, %x : tensor<f32>, tensor<?x1xf32>
}
