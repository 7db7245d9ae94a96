//===- LceGraph.h - The linear cross entropy, written with the frontend ---===//
#pragma once

#include "compiler/frontend/Graph.h"

#include <memory>
#include <optional>

namespace lcejit::fe {

enum class LceReduction { Mean, Sum };

struct LceSpec {
  int64_t hidden = 0;                ///< D
  int64_t vocab = 0;                 ///< V
  DType dtype = DType::BF16;         ///< H and W
  DType targetType = DType::I64;     ///< y
  std::optional<double> softcap;     ///< logits -> c·tanh(z / c)
  std::optional<int64_t> ignoreIndex;///< rows whose target equals it are left out
  LceReduction reduction = LceReduction::Mean;
  /// false: the loss only (evaluation): no gradient outputs, 2·N·D·V of tensor work.
  bool gradients = true;
  /// true: a rank-0 f32 input "grad_scale" multiplies the gradients (not the loss): the
  /// gradients are those of grad_scale · loss, so the factor reaches the per-row gradient
  /// scales and the dZ epilogue, with no extra pass.
  bool gradScale = false;
};

/// loss = reduce_i(lse_i − z_{i, y_i}) over rows whose target is not ignore_index, with
/// z = softcap(H · Wᵀ) in f32, and gradients dH, dW. Inputs "H" [N, D], "W" [V, D],
/// "y" [N, 1]; outputs "loss" (rank 0), "dH" [N, D], "dW" [V, D] (f32 in the graph).
///
/// Mean over zero valid rows: the sum is 0 and the count is clamped to 1, so the loss is
/// 0 and every gradient is 0 (PyTorch returns NaN there; see docs/numerics.md).
std::unique_ptr<Graph> buildLceGraph(const LceSpec &spec);

} // namespace lcejit::fe
