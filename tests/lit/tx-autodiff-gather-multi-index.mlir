// RUN: lcejit-opt %s --tx-autodiff -verify-diagnostics
//
// tx.gather allows several indices per row along the axis, but its adjoint is only
// implemented for one (the scatter select(iota == index, g, 0)): the pass must refuse
// with an error naming the gather instead of leaving invalid IR.

func.func @gather_two_per_row(%z: tensor<?x8xf32>, %y: tensor<?x2xi64>) -> tensor<?x8xf32> {
  // expected-error @+1 {{gather with more than one index along the axis is not differentiable yet (index size 2)}}
  %g = tx.gather %z, %y {axis = 1 : i64} : tensor<?x8xf32>, tensor<?x2xi64> -> tensor<?x2xf32>
  %l = tx.reduce_sum %g : tensor<?x2xf32> -> tensor<f32>
  %dz = tx.grad %l wrt (%z) : tensor<f32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %dz : tensor<?x8xf32>
}
