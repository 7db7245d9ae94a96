//===- FuzzFrontend.cpp - libFuzzer target: random frontend graphs -> compile -> plan ===//
//
// Reads the bytes as a little program for the frontend builder (fe::Graph): inputs of
// small shapes with a symbolic N, then ops picked by the bytes among every builder method,
// operands picked among the tensors built so far; a rank-0 float result may become the
// loss with grad(). Builder errors (lcejit::Error, InvalidArgument) are expected; the
// built graph then goes through compileGraph() and the planner. A crash, hang or
// sanitizer report is a bug.
//
//===----------------------------------------------------------------------===//

#include "compiler/frontend/Graph.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/plan/Planner.h"
#include "lcejit/Error.h"

#include <cstddef>
#include <cstdint>
#include <vector>

/// Inputs whose graph compiled and planned (ReplayMain's --min-planned).
extern "C" {
size_t lcejitFuzzPlanned = 0; // read by ReplayMain.cpp
}

namespace {

class Bytes {
public:
  Bytes(const uint8_t *d, size_t n) : d_(d), n_(n) {}
  bool empty() const { return i_ >= n_; }
  uint8_t next() { return i_ < n_ ? d_[i_++] : 0; }
  size_t pick(size_t count) { return count ? next() % count : 0; }

private:
  const uint8_t *d_;
  size_t n_, i_ = 0;
};

using lcejit::DType;
using lcejit::fe::Graph;
using lcejit::fe::Tensor;

DType pickType(Bytes &b) {
  static const DType types[] = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64,
                                DType::I1};
  return types[b.pick(6)];
}

lcejit::fe::Shape pickShape(Bytes &b) {
  static const int64_t dims[] = {lcejit::fe::kN, 1, 2, 3, 8, 16};
  lcejit::fe::Shape s;
  size_t rank = b.pick(3);
  for (size_t i = 0; i < rank; ++i)
    s.push_back(dims[b.pick(6)]);
  return s;
}

void build(Bytes &b) {
  Graph g("fuzz");
  std::vector<Tensor> ts;
  size_t numInputs = 1 + b.pick(3);
  for (size_t i = 0; i < numInputs; ++i)
    ts.push_back(g.input("x" + std::to_string(i), pickShape(b), pickType(b)));
  auto any = [&]() { return ts[b.pick(ts.size())]; };
  auto optionalAxis = [&]() -> std::optional<int64_t> {
    if (b.next() & 1)
      return static_cast<int64_t>(b.pick(3));
    return std::nullopt;
  };
  for (int step = 0; step < 24 && !b.empty(); ++step) {
    try {
      switch (b.pick(24)) {
      case 0: ts.push_back(g.constant(static_cast<double>(b.next()) - 128.0, pickType(b))); break;
      case 1: ts.push_back(g.iota(pickShape(b), b.pick(3), pickType(b))); break;
      case 2: ts.push_back(g.size(any(), b.pick(3))); break;
      case 3: ts.push_back(g.matmul(any(), any(), b.next() & 1, b.next() & 1)); break;
      case 4: ts.push_back(g.cast(any(), pickType(b))); break;
      case 5: ts.push_back(g.broadcast(any(), pickShape(b))); break;
      case 6: ts.push_back(g.add(any(), any())); break;
      case 7: ts.push_back(g.sub(any(), any())); break;
      case 8: ts.push_back(g.mul(any(), any())); break;
      case 9: ts.push_back(g.div(any(), any())); break;
      case 10: ts.push_back(g.max(any(), any())); break;
      case 11: ts.push_back(g.neg(any())); break;
      case 12: ts.push_back(g.exp(any())); break;
      case 13: ts.push_back(g.log(any())); break;
      case 14: ts.push_back(g.tanh(any())); break;
      case 15:
        ts.push_back(g.compare(static_cast<lcejit::fe::Cmp>(b.pick(6)), any(), any()));
        break;
      case 16: ts.push_back(g.select(any(), any(), any())); break;
      case 17: {
        std::optional<int64_t> axis = optionalAxis();
        ts.push_back(g.sum(any(), axis));
        break;
      }
      case 18: {
        std::optional<int64_t> axis = optionalAxis();
        ts.push_back(g.mean(any(), axis));
        break;
      }
      case 19: ts.push_back(g.logsumexp(any(), b.pick(3))); break;
      case 20: ts.push_back(g.gather(any(), any(), b.pick(3))); break;
      case 21: ts.push_back(g.upcast(any())); break;
      case 22: {
        Tensor loss = any();
        std::vector<Tensor> wrt;
        for (size_t i = 0; i < numInputs; ++i)
          if (b.next() & 1)
            wrt.push_back(ts[i]);
        for (Tensor t : g.grad(loss, wrt))
          ts.push_back(t);
        break;
      }
      default: g.output("out" + std::to_string(step), any()); break;
      }
    } catch (const lcejit::Error &) {
      // The builder refused (shapes, dtypes, ...): keep building with what is there.
    }
  }
  if (g.outputs().empty())
    return;
  try {
    auto fused = lcejit::pipeline::compileGraph(g);
    for (int64_t tokens : {int64_t(1), int64_t(3000)}) {
      lcejit::plan::PlanOptions o;
      o.tokens = tokens;
      (void)fused->plan(o).runSchedule(tokens);
    }
    ++lcejitFuzzPlanned;
  } catch (const lcejit::Error &) {
    // Verifier, pass or planner errors are answers, not bugs.
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Bytes b(data, size);
  build(b);
  return 0;
}
