//===- LceGraph.cpp - The linear cross entropy, written with the frontend -===//

#include "compiler/frontend/LceGraph.h"
#include "compiler/support/Check.h"

namespace lcejit::fe {

std::unique_ptr<Graph> buildLceGraph(const LceSpec &s) {
  LCEJIT_CHECK_ARG(s.hidden > 0, "hidden (D) must be positive, got {}", s.hidden);
  LCEJIT_CHECK_ARG(s.vocab > 0, "vocab (V) must be positive, got {}", s.vocab);
  LCEJIT_CHECK_ARG(!s.softcap || *s.softcap > 0.0, "softcap must be > 0, got {}", s.softcap.value_or(0.0));
  auto g = std::make_unique<Graph>("lce");
  Tensor H = g->input("H", {kN, s.hidden}, s.dtype);
  Tensor W = g->input("W", {s.vocab, s.hidden}, s.dtype);
  Tensor y = g->input("y", {kN, 1}, s.targetType);

  Tensor z = g->matmul(H, W, /*transposeA=*/false, /*transposeB=*/true); // [N, V] f32
  if (s.softcap)
    z = *s.softcap * g->tanh(z / *s.softcap);
  Tensor lse = g->logsumexp(z, 1); // [N, 1]

  Tensor rowLoss;
  Tensor loss;
  if (s.ignoreIndex) {
    Tensor valid = g->compare(Cmp::Ne, y, g->constant(double(*s.ignoreIndex), s.targetType));
    Tensor target = g->select(valid, y, g->constant(0, s.targetType));
    rowLoss = g->select(valid, lse - g->gather(z, target, 1), g->constant(0.0));
    Tensor total = g->sum(rowLoss);
    if (s.reduction == LceReduction::Mean) {
      Tensor count = g->sum(g->cast(valid, DType::F32));
      loss = total / g->max(count, g->constant(1.0));
    } else {
      loss = total;
    }
  } else {
    rowLoss = lse - g->gather(z, y, 1);
    Tensor total = g->sum(rowLoss);
    if (s.reduction == LceReduction::Mean) {
      Tensor rows = g->cast(g->size(H, 0), DType::F32);
      loss = total / g->max(rows, g->constant(1.0)); // N = 0 gives 0, not 0/0
    } else {
      loss = total;
    }
  }
  g->output("loss", loss);
  if (!s.gradients)
    return g;
  Tensor root = loss;
  if (s.gradScale)
    root = loss * g->input("grad_scale", {}, DType::F32);
  std::vector<Tensor> grads = g->grad(root, {H, W});
  g->output("dH", grads[0]);
  g->output("dW", grads[1]);
  return g;
}

} // namespace lcejit::fe
