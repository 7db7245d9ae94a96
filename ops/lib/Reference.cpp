//===- Reference.cpp -------------------------------------------------------===//

#include "ops/lib/Reference.h"
#include "compiler/frontend/LceGraph.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/reference/ProgramInterpreter.h"
#include "compiler/reference/TxInterpreter.h"
#include "compiler/support/Check.h"

namespace lcejit::ops {

namespace {

std::vector<ref::RefTensor> makeInputs(const LinearCrossEntropyOptions &o,
                                       const std::vector<double> &hidden,
                                       const std::vector<double> &weight,
                                       const std::vector<int64_t> &targets) {
  const int64_t n = static_cast<int64_t>(targets.size());
  LCEJIT_CHECK_ARG(static_cast<int64_t>(hidden.size()) == n * o.hidden,
                   "hidden has {} values, expected N·D = {}·{}", hidden.size(), n, o.hidden);
  LCEJIT_CHECK_ARG(static_cast<int64_t>(weight.size()) == o.vocab * o.hidden,
                   "weight has {} values, expected V·D = {}·{}", weight.size(), o.vocab, o.hidden);
  ref::RefTensor h({n, o.hidden}, o.dtype), w({o.vocab, o.hidden}, o.dtype), y({n, 1}, o.targetDType);
  h.data = hidden;
  w.data = weight;
  for (int64_t i = 0; i < n; ++i)
    y.data[static_cast<size_t>(i)] = static_cast<double>(targets[static_cast<size_t>(i)]);
  return {h, w, y};
}

/// The loss and, for the full graph, the gradients (a forward-only graph has 1 output).
ReferenceResult toResult(const std::vector<ref::RefTensor> &outs) {
  LCEJIT_CHECK(outs.size() == 3 || outs.size() == 1, "the LCE graph has 3 outputs (or 1, "
               "forward only), got {}", outs.size());
  ReferenceResult r;
  r.loss = outs[0].data.at(0);
  if (outs.size() == 1)
    return r;
  r.gradHidden = outs[1].data;
  r.gradWeight = outs[2].data;
  return r;
}

} // namespace

ReferenceResult runGraphReference(const LinearCrossEntropyOptions &options,
                                  const std::vector<double> &hidden,
                                  const std::vector<double> &weight,
                                  const std::vector<int64_t> &targets) {
  LinearCrossEntropyOptions o = validateOptions(options);
  std::unique_ptr<fe::Graph> g = fe::buildLceGraph(lceSpecOf(o));
  std::unique_ptr<pipeline::FusedGraph> unfused = pipeline::compileGraph(*g, {}, "tx-fuse");
  return toResult(ref::interpretTx(unfused->module(), makeInputs(o, hidden, weight, targets)));
}

ReferenceResult runProgramReference(LceJit &jit, const std::vector<double> &hidden,
                                    const std::vector<double> &weight,
                                    const std::vector<int64_t> &targets, double gradScale,
                                    const AccumulateInto &accumulate, bool roundOutputs) {
  const LinearCrossEntropyOptions &o = jit.options();
  const int64_t n = static_cast<int64_t>(targets.size());
  ProgramLookup l = jit.lookup(n, LceJit::defaultTarget(), /*compile=*/false);
  std::vector<ref::RefTensor> inputs = makeInputs(o, hidden, weight, targets);
  if (l.compiled->program.inputs.size() == 4) { // grad_scale (LceJit scaledGradients)
    ref::RefTensor s({}, DType::F32);
    s.data = {gradScale};
    inputs.push_back(s);
  }
  ref::InterpretOptions opts;
  opts.roundOutputs = roundOutputs;
  if (accumulate.gradHidden || accumulate.gradWeight) {
    // [Note: accumulating outputs]: outputs 1 (dH) and 2 (dW) start from the given values.
    const plan::Program &p = l.compiled->program;
    LCEJIT_CHECK(p.outputs.size() == 3, "accumulate: the program has {} outputs, not 3",
                 p.outputs.size());
    opts.initialOutputs.resize(3);
    auto init = [&](size_t i, const std::vector<double> *v, int64_t rows, const char *what) {
      if (!v)
        return;
      LCEJIT_CHECK_ARG(static_cast<int64_t>(v->size()) == rows * o.hidden,
                       "accumulate: {} has {} values, expected {}·{}", what, v->size(), rows,
                       o.hidden);
      ref::RefTensor t({rows, o.hidden}, p.outputs[i].dtype);
      t.data = *v;
      opts.initialOutputs[i] = std::move(t);
      opts.accumulateOutputs |= uint64_t(1) << i;
    };
    init(1, accumulate.gradHidden, n, "gradHidden");
    init(2, accumulate.gradWeight, o.vocab, "gradWeight");
  }
  ref::ProgramRunResult run = ref::interpretProgram(l.compiled->program, inputs, n, opts);
  if (run.badRow != 0)
    throwBadTarget(o, run.badRow - 1, run.badValue);
  return toResult(run.outputs);
}

} // namespace lcejit::ops
