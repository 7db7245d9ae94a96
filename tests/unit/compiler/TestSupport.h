//===- TestSupport.h - Helpers of the compiler unit tests -----------------===//
//
// Graph -> module at each stage (unfused after autodiff, fused by the real pipeline),
// deterministic random inputs, and the one place where tolerances live.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/frontend/Graph.h"
#include "compiler/frontend/LceGraph.h"
#include "compiler/frontend/Lower.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/reference/ProgramInterpreter.h"
#include "compiler/reference/RefTensor.h"
#include "compiler/reference/TxInterpreter.h"
#include "compiler/transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace lcejit::testing {

using ref::RefTensor;

//===----------------------------------------------------------------------===//
// Tolerances (relative, infinity norm): one place.
//===----------------------------------------------------------------------===//

inline constexpr double kTolFiniteDiff = 1e-6; ///< autodiff vs central differences
inline constexpr double kTolFused = 1e-12;     ///< fused vs unfused TxInterpreter
inline constexpr double kTolProgram = 1e-10;   ///< ProgramInterpreter vs unfused

/// max|a - b| / max(max|b|, floor) over the finite pairs. Non-finite values must match
/// exactly (NaN with NaN, +inf with +inf), else +inf; a size mismatch gives +inf.
inline double relError(const std::vector<double> &a, const std::vector<double> &b,
                       double floor = 1e-300) {
  if (a.size() != b.size())
    return INFINITY;
  double num = 0.0, den = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
      if (!same)
        return INFINITY;
      continue;
    }
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

/// Compares two tensors (shape, dtype and values) with a message naming `what`.
inline ::testing::AssertionResult near(const RefTensor &got, const RefTensor &want, double tol,
                                       const std::string &what) {
  if (got.shape != want.shape)
    return ::testing::AssertionFailure() << what << ": shape " << ref::shapeStr(got.shape)
                                         << " vs expected " << ref::shapeStr(want.shape);
  double e = relError(got.data, want.data);
  if (!(e <= tol)) {
    auto f = ::testing::AssertionFailure();
    f << what << ": relative error " << e << " > " << tol;
    for (size_t i = 0; i < got.data.size() && i < 6; ++i)
      f << (i ? ", " : " (first values got/want: ") << got.data[i] << "/" << want.data[i];
    if (!got.data.empty())
      f << ")";
    return f;
  }
  return ::testing::AssertionSuccess();
}

//===----------------------------------------------------------------------===//
// Stages
//===----------------------------------------------------------------------===//

/// A module with its context.
struct Module {
  std::unique_ptr<mlir::MLIRContext> ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp func() {
    mlir::func::FuncOp f;
    for (auto g : module->getOps<mlir::func::FuncOp>())
      f = g;
    return f;
  }
  std::string str() {
    std::string s;
    llvm::raw_string_ostream os(s);
    module->print(os);
    return s;
  }
};

/// Runs the given pass flags in order ("tx-autodiff", "tx-simplify", "cse", "tx-fuse").
inline void runPasses(Module &m, const std::vector<std::string> &flags) {
  std::string diags;
  mlir::ScopedDiagnosticHandler h(m.ctx.get(), [&](mlir::Diagnostic &d) {
    llvm::raw_string_ostream os(diags);
    os << d << "\n";
    return mlir::success();
  });
  for (const std::string &flag : flags) {
    mlir::PassManager pm(m.ctx.get());
    if (flag == "tx-autodiff")
      pm.addNestedPass<mlir::func::FuncOp>(tx::createTxAutodiff());
    else if (flag == "tx-simplify")
      pm.addNestedPass<mlir::func::FuncOp>(tx::createTxSimplify());
    else if (flag == "cse")
      pm.addNestedPass<mlir::func::FuncOp>(mlir::createCSEPass());
    else if (flag == "tx-fuse")
      pm.addNestedPass<mlir::func::FuncOp>(tx::createTxFuse());
    else
      throw std::runtime_error("unknown pass " + flag);
    if (mlir::failed(pm.run(*m.module)))
      throw std::runtime_error("pass --" + flag + " failed: " + diags);
  }
}

/// The graph lowered to tx, before any pass (still has tx.grad).
inline Module lowered(const fe::Graph &g) {
  Module m;
  m.ctx = pipeline::makeContext();
  m.module = fe::lowerToTx(g, *m.ctx);
  if (mlir::failed(mlir::verify(*m.module)))
    throw std::runtime_error("lowered module does not verify");
  return m;
}

/// The graph after tx-autodiff, tx-simplify and cse: the unfused reference form.
inline Module unfused(const fe::Graph &g) {
  Module m = lowered(g);
  runPasses(m, {"tx-autodiff", "tx-simplify", "cse"});
  return m;
}

/// Parses MLIR text into a fresh context with the tx dialects.
inline Module parse(const std::string &text) {
  Module m;
  m.ctx = pipeline::makeContext();
  std::string diags;
  mlir::ScopedDiagnosticHandler h(m.ctx.get(), [&](mlir::Diagnostic &d) {
    llvm::raw_string_ostream os(diags);
    os << d << "\n";
    return mlir::success();
  });
  m.module = mlir::parseSourceString<mlir::ModuleOp>(text, m.ctx.get());
  if (!m.module)
    throw std::runtime_error("cannot parse:\n" + text + "\n" + diags);
  return m;
}

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

/// Deterministic random tensors; float values are rounded to their dtype so that the
/// same data is meaningful for a device run.
class Rng {
public:
  explicit Rng(uint64_t seed) : gen_(seed) {}

  RefTensor normal(std::vector<int64_t> shape, DType t, double scale = 1.0) {
    RefTensor r(std::move(shape), t);
    std::normal_distribution<double> d(0.0, scale);
    for (double &x : r.data)
      x = ref::roundToDType(d(gen_), t);
    return r;
  }

  RefTensor uniform(std::vector<int64_t> shape, DType t, double lo, double hi) {
    RefTensor r(std::move(shape), t);
    std::uniform_real_distribution<double> d(lo, hi);
    for (double &x : r.data)
      x = ref::roundToDType(d(gen_), t);
    return r;
  }

  RefTensor integers(std::vector<int64_t> shape, DType t, int64_t lo, int64_t hi) {
    RefTensor r(std::move(shape), t);
    std::uniform_int_distribution<int64_t> d(lo, hi - 1);
    for (double &x : r.data)
      x = static_cast<double>(d(gen_));
    return r;
  }

  std::mt19937_64 &gen() { return gen_; }

private:
  std::mt19937_64 gen_;
};

/// Inputs of the LCE graph: H [N, D], W [V, D] (dtype of the spec), y [N, 1] in [0, V);
/// with an ignore index, every third row (starting at row 1) is ignored.
inline std::vector<RefTensor> lceInputs(const fe::LceSpec &s, int64_t n, uint64_t seed,
                                        double scale = 0.5) {
  Rng rng(seed);
  std::vector<RefTensor> in;
  in.push_back(rng.normal({n, s.hidden}, s.dtype, scale));
  in.push_back(rng.normal({s.vocab, s.hidden}, s.dtype, scale));
  RefTensor y = rng.integers({n, 1}, s.targetType, 0, s.vocab);
  if (s.ignoreIndex)
    for (int64_t i = 1; i < n; i += 3)
      y.data[static_cast<size_t>(i)] = static_cast<double>(*s.ignoreIndex);
  in.push_back(std::move(y));
  return in;
}

inline std::string specName(const fe::LceSpec &s) {
  return fmt::format("D{}_V{}_{}{}{}{}", s.hidden, s.vocab, dtypeName(s.dtype),
                     s.softcap ? fmt::format("_softcap{}", *s.softcap) : std::string(),
                     s.ignoreIndex ? "_ignore" : "",
                     s.reduction == fe::LceReduction::Mean ? "_mean" : "_sum");
}

//===----------------------------------------------------------------------===//
// Finite differences
//===----------------------------------------------------------------------===//

/// Compares the gradient outputs (outputs 1..) of `m` with central differences of the
/// loss (output 0) with respect to inputs `wrt` (indices into `inputs`). At most
/// `maxEntries` entries per input are probed (a deterministic sample).
inline void checkGradients(Module &m, std::vector<RefTensor> inputs, const std::vector<int> &wrt,
                           const std::string &what, size_t maxEntries = 400) {
  auto out = ref::interpretTx(m.func(), inputs);
  ASSERT_EQ(out.size(), 1 + wrt.size()) << what;
  auto loss = [&](const std::vector<RefTensor> &in) {
    return ref::interpretTx(m.func(), in)[0].data[0];
  };
  double l0 = loss(inputs);
  ASSERT_TRUE(std::isfinite(l0)) << what;
  for (size_t w = 0; w < wrt.size(); ++w) {
    RefTensor &x = inputs[static_cast<size_t>(wrt[w])];
    const RefTensor &g = out[1 + w];
    ASSERT_EQ(g.shape, x.shape) << what << ": gradient " << w << " shape";
    ASSERT_EQ(g.dtype, DType::F32) << what;
    std::vector<size_t> entries(x.data.size());
    for (size_t e = 0; e < entries.size(); ++e)
      entries[e] = e;
    if (entries.size() > maxEntries) {
      std::mt19937_64 gen(99 + w);
      std::shuffle(entries.begin(), entries.end(), gen);
      entries.resize(maxEntries);
    }
    std::vector<double> fd, ad;
    for (size_t e : entries) {
      double x0 = x.data[e];
      double h = 1e-5 * std::max(1.0, std::fabs(x0));
      x.data[e] = x0 + h;
      double lp = loss(inputs);
      x.data[e] = x0 - h;
      double lm = loss(inputs);
      x.data[e] = x0;
      fd.push_back((lp - lm) / (2 * h));
      ad.push_back(g.data[e]);
    }
    double gmax = 0;
    for (double v : g.data)
      gmax = std::max(gmax, std::fabs(v));
    double err = relError(fd, ad, 1e-12);
    EXPECT_LE(err, kTolFiniteDiff)
        << what << ": gradient of input " << wrt[w] << " (max |g| = " << gmax << ")";
  }
}

/// One LCE variant of the parameterized suites (FuseTest, ProgramInterpreterTest).
struct SpecCase {
  std::optional<double> softcap;
  std::optional<int64_t> ignore;
  fe::LceReduction reduction;
  DType dtype;
};

inline std::ostream &operator<<(std::ostream &os, const SpecCase &c) {
  return os << dtypeName(c.dtype) << (c.softcap ? fmt::format("_softcap{}", *c.softcap) : "")
            << (c.ignore ? fmt::format("_ignore{}", *c.ignore) : "")
            << (c.reduction == fe::LceReduction::Mean ? "_mean" : "_sum");
}

} // namespace lcejit::testing
