//===- Materialize.cpp - The recompute backward -> the materialized one -----===//
//
// [Note: the materialized backward] (Program.h) says what the kernels do; this file
// derives their functions from the planned recompute Program by algebra on the dZ
// function f(x, col, row operands):
//
//   1. f must use exp once on x, as E = exp(G(x) - L) with L a per-row value (the
//      logsumexp) and G the value the forward GEMM reduces with logsumexp;
//   2. f must be linear in E: f = a·E + b (a walk over the SSA: +, -, neg, · and / by
//      E-free values, select on E-free conditions);
//   3. a must factor into a per-element part (x, col and operands the forward can read)
//      times a per-row part (the rest), and the per-element part must be a function of
//      G(x) (it is recovered from G through the affine steps of G's chain: with softcap,
//      tanh(x / c) = G / c);
//   4. b must vanish off one target column: b = 0 once col == t is false, for a row
//      operand t of integer type (the one-hot of the cross entropy).
//
// Then dZ = factor(G)·exp(G - m)·[exp(m - L)·a_row] off the target column, and f(x_t, t)
// on it, with x_t picked by the forward (one more sum partial). The forward stores the
// first factor (fp16), a row kernel computes L, a_row and f(x_t, t), and the DzForm kernel
// assembles dZ. Anything else keeps the recompute schedule, and the reason is a decision
// line of the plan.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/Materialize.h"
#include "compiler/plan/SchedulePolicy.h"
#include "compiler/plan/TargetColumn.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

namespace lcejit::plan {
namespace {

/// The index of `o` in `args`, appended when it is not there yet.
int32_t argIndex(std::vector<Operand> &args, const Operand &o) {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == o)
      return static_cast<int32_t>(i);
  args.push_back(o);
  return static_cast<int32_t>(args.size()) - 1;
}

/// A ScalarFunc under construction: a copy of one function (indices kept) that new,
/// hash-consed instructions are appended to.
/// Materialize step 11: a GemmDLhs of the (one-chunk) loop that writes an f32 workspace
/// accumulator read only by a CastKernel into an output writes that output directly; the
/// cast kernel (and its step) and the accumulator buffer are removed.
void directLhs(Program &p) {
  for (size_t ci = 0; ci < p.kernels.size(); ++ci) {
    const auto *cast = std::get_if<CastKernel>(&p.kernels[ci].body);
    if (!cast || cast->in.space != Space::Workspace || cast->out.space != Space::Output)
      continue;
    const BufferRef acc = cast->in, out = cast->out;
    const DType outType = cast->outType;
    GemmDLhsKernel *lhs = nullptr;
    for (Kernel &k : p.kernels)
      if (auto *d = std::get_if<GemmDLhsKernel>(&k.body); d && d->out == acc)
        lhs = d;
    int users = 0;
    forEachBufferRef(p, [&](BufferRef &b) { users += b == acc; });
    if (!lhs || users != 2 || lhs->outType != DType::F32)
      continue;
    lhs->out = out;
    lhs->outType = outType;
    removeKernel(p, static_cast<int32_t>(ci));
    removeWorkspaceBuffer(p, acc.index);
    return;
  }
}

struct Expr {
  ScalarFunc f;
  std::map<std::tuple<int, int, int32_t, int32_t, int32_t, int32_t, double, int64_t>, int32_t>
      seen;

  explicit Expr(const ScalarFunc &base) : f(base) {
    for (int32_t i = 0; i < static_cast<int32_t>(f.insts.size()); ++i)
      seen.emplace(keyOf(f.insts[static_cast<size_t>(i)]), i);
  }
  static std::tuple<int, int, int32_t, int32_t, int32_t, int32_t, double, int64_t>
  keyOf(const ScalarInst &i) {
    return {static_cast<int>(i.op), static_cast<int>(i.type), i.operands[0], i.operands[1],
            i.operands[2], i.argIndex, i.fValue, i.iValue};
  }
  int32_t add(const ScalarInst &i) {
    auto [it, inserted] = seen.emplace(keyOf(i), static_cast<int32_t>(f.insts.size()));
    if (inserted)
      f.insts.push_back(i);
    return it->second;
  }
  int32_t op(ScalarOp o, DType t, int32_t a, int32_t b = -1, int32_t c = -1) {
    ScalarInst i;
    i.op = o;
    i.type = t;
    i.operands[0] = a;
    i.operands[1] = b;
    i.operands[2] = c;
    return add(i);
  }
  int32_t constF(double v) {
    ScalarInst i;
    i.op = ScalarOp::Const;
    i.type = DType::F32;
    i.fValue = v;
    return add(i);
  }
  const ScalarInst &at(int32_t i) const { return f.insts[static_cast<size_t>(i)]; }
  // None (-1) stands for 0 in sums and for 1 in products.
  int32_t sum(int32_t a, int32_t b) {
    if (a < 0) return b;
    if (b < 0) return a;
    return op(ScalarOp::Add, DType::F32, a, b);
  }
  int32_t diff(int32_t a, int32_t b) {
    if (b < 0) return a;
    if (a < 0) return op(ScalarOp::Neg, DType::F32, b);
    return op(ScalarOp::Sub, DType::F32, a, b);
  }
  int32_t prod(int32_t a, int32_t b) {
    if (a < 0) return b;
    if (b < 0) return a;
    return op(ScalarOp::Mul, DType::F32, a, b);
  }
};

/// Which arguments an instruction depends on (transitively).
std::vector<bool> dependsOn(const ScalarFunc &f, const std::function<bool(int32_t)> &argPred) {
  std::vector<bool> d(f.insts.size(), false);
  for (size_t i = 0; i < f.insts.size(); ++i) {
    const ScalarInst &in = f.insts[i];
    if (in.op == ScalarOp::Arg)
      d[i] = argPred(in.argIndex);
    for (int32_t o : in.operands)
      if (o >= 0)
        d[i] = d[i] || d[static_cast<size_t>(o)];
  }
  return d;
}

/// The function computing `root` alone, its Arg instructions renumbered by `argMap` (the
/// old argument index -> the new one) and instructions replaced by `subst` (old index ->
/// an instruction of the result, built by the callback with the given Expr).
class Extract {
public:
  Extract(const ScalarFunc &from) : from_(from), out_(ScalarFunc{}) {}

  std::function<int32_t(int32_t, Expr &)> subst;   ///< -2: no substitution
  std::function<int32_t(int32_t)> argMap;          ///< new argument index

  int32_t take(int32_t i) {
    if (auto it = done_.find(i); it != done_.end())
      return it->second;
    int32_t r = subst ? subst(i, out_) : -2;
    if (r == -2) {
      ScalarInst in = from_.insts[static_cast<size_t>(i)];
      if (in.op == ScalarOp::Arg)
        in.argIndex = argMap(in.argIndex);
      for (int32_t &o : in.operands)
        if (o >= 0)
          o = take(o);
      r = out_.add(in);
    }
    done_[i] = r;
    return r;
  }
  Expr &out() { return out_; }

private:
  const ScalarFunc &from_;
  Expr out_;
  std::map<int32_t, int32_t> done_;
};

bool sameExpr(const ScalarFunc &f1, int32_t i1, const std::vector<Operand> &a1,
              const ScalarFunc &f2, int32_t i2, const std::vector<Operand> &a2) {
  const ScalarInst &x = f1.insts[static_cast<size_t>(i1)];
  const ScalarInst &y = f2.insts[static_cast<size_t>(i2)];
  if (x.op != y.op || x.type != y.type)
    return false;
  if (x.op == ScalarOp::Const)
    return x.fValue == y.fValue && x.iValue == y.iValue;
  if (x.op == ScalarOp::Arg)
    return a1[static_cast<size_t>(x.argIndex)] == a2[static_cast<size_t>(y.argIndex)];
  for (int k = 0; k < 3; ++k) {
    if ((x.operands[k] < 0) != (y.operands[k] < 0))
      return false;
    if (x.operands[k] >= 0 && !sameExpr(f1, x.operands[k], a1, f2, y.operands[k], a2))
      return false;
  }
  return true;
}

struct Fail {
  std::string why;
};

} // namespace

namespace {
/// What materialize() does with the dZ function it has taken apart: the whole
/// materialized schedule, or only the target column's dZ of the recompute schedule
/// ([Note: the target column's dZ] in Program.h).
/// MaterializeInPlace: the materialized schedule with the values scaled in place ([Note:
/// values scaled in place] in Program.h) and no budget check (the caller's policy decides).
enum class Rewrite { Materialize, MaterializeInPlace, TargetOnly };
std::string materialize(Program &p, const std::string &name, Rewrite mode, bool exactTarget,
                        bool rowScaled);

std::string rewriteCopy(Program &program, const std::string &name, Rewrite mode,
                        bool exactTarget, bool rowScaled) {
  // Work on a copy: a refusal half-way leaves the Program as it was.
  Program p = program;
  std::string why = materialize(p, name, mode, exactTarget, rowScaled);
  if (why.empty())
    program = std::move(p);
  return why;
}
} // namespace

std::string materializeBackward(Program &program, const std::string &name, bool exactTarget,
                                bool rowScaled, bool scaleInPlace) {
  return rewriteCopy(program, name,
                     scaleInPlace ? Rewrite::MaterializeInPlace : Rewrite::Materialize,
                     exactTarget, rowScaled);
}

std::string targetColumnDz(Program &program, const std::string &name) {
  return rewriteCopy(program, name, Rewrite::TargetOnly, true, false);
}

namespace {
/// [Note: row-scaled stored values] The range of instruction `inst` of `f` over every
/// value of its arguments (an argument is any finite number): interval arithmetic,
/// std::nullopt where an operation or an argument leaves it unbounded. Enough to see
/// that c·tanh(x / c) lies in [−c, c].
std::optional<std::pair<double, double>> boundsOf(const ScalarFunc &f, int32_t inst) {
  using Range = std::optional<std::pair<double, double>>;
  std::vector<Range> r(static_cast<size_t>(inst) + 1);
  auto finite = [](double a, double b) -> Range {
    if (!std::isfinite(a) || !std::isfinite(b) || a > b)
      return std::nullopt;
    return std::pair<double, double>{a, b};
  };
  for (int32_t i = 0; i <= inst; ++i) {
    const ScalarInst &in = f.insts[static_cast<size_t>(i)];
    auto op = [&](int k) -> const Range & {
      return r[static_cast<size_t>(in.operands[k])];
    };
    Range &out = r[static_cast<size_t>(i)];
    if (in.type != DType::F32 && in.op != ScalarOp::Const)
      continue; // integers and predicates: not tracked
    switch (in.op) {
    case ScalarOp::Const:
      if (in.type == DType::F32)
        out = finite(in.fValue, in.fValue);
      break;
    case ScalarOp::Tanh: out = std::pair<double, double>{-1.0, 1.0};
      if (op(0))
        out = finite(std::tanh(op(0)->first), std::tanh(op(0)->second));
      break;
    case ScalarOp::Neg:
      if (op(0))
        out = finite(-op(0)->second, -op(0)->first);
      break;
    case ScalarOp::Exp:
      if (op(0))
        out = finite(std::exp(op(0)->first), std::exp(op(0)->second));
      break;
    case ScalarOp::Add:
    case ScalarOp::Sub:
      if (op(0) && op(1))
        out = in.op == ScalarOp::Add
                  ? finite(op(0)->first + op(1)->first, op(0)->second + op(1)->second)
                  : finite(op(0)->first - op(1)->second, op(0)->second - op(1)->first);
      break;
    case ScalarOp::Mul:
      if (op(0) && op(1)) {
        const double a[4] = {op(0)->first * op(1)->first, op(0)->first * op(1)->second,
                             op(0)->second * op(1)->first, op(0)->second * op(1)->second};
        out = finite(*std::min_element(a, a + 4), *std::max_element(a, a + 4));
      }
      break;
    case ScalarOp::Div:
      // By a constant only (an interval around 0 is unbounded).
      if (op(0) && op(1) && op(1)->first == op(1)->second && op(1)->first != 0.0) {
        const double c = op(1)->first;
        out = finite(std::min(op(0)->first / c, op(0)->second / c),
                     std::max(op(0)->first / c, op(0)->second / c));
      }
      break;
    case ScalarOp::Max:
    case ScalarOp::Min:
      if (op(0) && op(1))
        out = in.op == ScalarOp::Max
                  ? finite(std::max(op(0)->first, op(1)->first),
                           std::max(op(0)->second, op(1)->second))
                  : finite(std::min(op(0)->first, op(1)->first),
                           std::min(op(0)->second, op(1)->second));
      break;
    case ScalarOp::Select:
      if (op(1) && op(2))
        out = finite(std::min(op(1)->first, op(2)->first),
                     std::max(op(1)->second, op(2)->second));
      break;
    default: break; // Arg, Log, casts, ...: unbounded
    }
  }
  return r[static_cast<size_t>(inst)];
}

std::string materialize(Program &p, const std::string &name, Rewrite mode, bool exactTarget,
                        bool rowScaled) {
  const bool full = mode != Rewrite::TargetOnly;
  const bool inPlace = mode == Rewrite::MaterializeInPlace;
  // 1. The shape of the Program: one forward reduce, one chunk loop led by a GemmDz.
  int32_t fi = -1, loopStep = -1, fStep = -1;
  for (int32_t s = 0; s < static_cast<int32_t>(p.steps.size()); ++s) {
    const Step &st = p.steps[static_cast<size_t>(s)];
    if (st.kind == Step::Kind::ChunkLoop) {
      if (loopStep >= 0)
        return "more than one gradient loop";
      loopStep = s;
    } else if (p.kernels[static_cast<size_t>(st.kernel)].kind() == KernelKind::GemmReduce) {
      if (fi >= 0)
        return "more than one forward GEMM";
      fi = st.kernel;
      fStep = s;
    }
  }
  if (fi < 0 || loopStep < 0 || loopStep < fStep)
    return "no forward GEMM followed by a gradient loop";
  Step &loop = p.steps[static_cast<size_t>(loopStep)];
  const int32_t zi = loop.loopKernels.front();
  if (p.kernels[static_cast<size_t>(zi)].kind() != KernelKind::GemmDz)
    return "the gradient loop does not start with a dZ GEMM";
  auto &F = std::get<GemmReduceKernel>(p.kernels[static_cast<size_t>(fi)].body);
  const auto &Z = std::get<GemmDzKernel>(p.kernels[static_cast<size_t>(zi)].body);
  if (full && (F.gemm.math != MathMode::WgmmaBF16 || Z.gemm.math != MathMode::WgmmaBF16))
    return "the GEMMs are not on the wgmma mainloop";
  if (full && Z.format != DzFormat::BF16)
    return "dZ is not one bf16 operand (exact precision keeps the recompute)";
  if (!(F.gemm.a == Z.gemm.a) || !(F.gemm.b == Z.gemm.b) || F.gemm.k != Z.gemm.k ||
      F.gemm.cols != Z.gemm.cols)
    return "the forward and dZ GEMMs multiply different operands";
  if (full && F.gemm.cols % F.gemm.tile.bn != 0)
    return fmt::format("the vocabulary ({}) is not a multiple of the {}-column tile",
                       F.gemm.cols, F.gemm.tile.bn);
  int32_t lseResult = -1;
  for (size_t r = 0; r < F.reductions.size(); ++r) {
    if (F.reductions[r] == ReduceKind::LogSumExp && lseResult < 0)
      lseResult = static_cast<int32_t>(r);
    else if (F.reductions[r] != ReduceKind::Sum)
      return "the forward reduces more than one logsumexp and sums";
  }
  if (lseResult < 0)
    return "the forward reduces no logsumexp";
  for (size_t k = 1; full && k < loop.loopKernels.size(); ++k) {
    const Kernel &kk = p.kernels[static_cast<size_t>(loop.loopKernels[k])];
    if (auto *d = std::get_if<GemmDRhsKernel>(&kk.body); d && d->outType != DType::F32)
      return fmt::format("d{} is {} (row blocks accumulate it in f32 only)",
                         "W", dtypeName(d->outType));
  }

  // 2. What the forward can read: inputs, and buffers / slots written before it.
  std::vector<BufferRef> earlyBufs;
  std::vector<int32_t> earlySlots;
  for (int32_t s = 0; s < fStep; ++s) {
    const Step &st = p.steps[static_cast<size_t>(s)];
    if (st.kind != Step::Kind::Launch)
      continue;
    if (auto *r = std::get_if<RowKernel>(&p.kernels[static_cast<size_t>(st.kernel)].body))
      for (const RowKernel::Sink &sk : r->sinks) {
        if (sk.buf.valid())
          earlyBufs.push_back(sk.buf);
        if (sk.slot >= 0)
          earlySlots.push_back(sk.slot);
      }
  }
  const ScalarFunc &f = Z.gemm.epilogue;
  const std::vector<Operand> &args = Z.gemm.args;
  auto isEarly = [&](const Operand &o) {
    switch (o.kind) {
    case Operand::Kind::Acc:
    case Operand::Kind::ColIndex:
      return true;
    case Operand::Kind::Row:
    case Operand::Kind::Col:
    case Operand::Kind::Scalar:
      if (o.buf.valid())
        return o.buf.space == Space::Input ||
               std::find(earlyBufs.begin(), earlyBufs.end(), o.buf) != earlyBufs.end();
      return std::find(earlySlots.begin(), earlySlots.end(), o.slot) != earlySlots.end();
    default:
      return false;
    }
  };
  auto argIs = [&](Operand::Kind k) {
    return [&, k](int32_t a) { return args[static_cast<size_t>(a)].kind == k; };
  };
  const std::vector<bool> depX = dependsOn(f, argIs(Operand::Kind::Acc));
  const std::vector<bool> depC = dependsOn(f, argIs(Operand::Kind::ColIndex));
  const std::vector<bool> depLate =
      dependsOn(f, [&](int32_t a) { return !isEarly(args[static_cast<size_t>(a)]); });
  if (f.results.size() != 1)
    return "the dZ function has more than one result";

  // 3. E = exp(G - L).
  int32_t e = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(f.insts.size()); ++i)
    if (f.insts[static_cast<size_t>(i)].op == ScalarOp::Exp && depX[static_cast<size_t>(i)]) {
      if (e >= 0)
        return "dZ takes exp of the logits more than once";
      e = i;
    }
  if (e < 0)
    return "dZ has no exp of the logits";
  const ScalarInst &sub = f.insts[static_cast<size_t>(f.insts[static_cast<size_t>(e)].operands[0])];
  if (sub.op != ScalarOp::Sub)
    return "dZ's exp is not of a difference";
  const int32_t gi = sub.operands[0], li = sub.operands[1];
  if (depC[static_cast<size_t>(gi)] || depLate[static_cast<size_t>(gi)] ||
      depX[static_cast<size_t>(li)] || depC[static_cast<size_t>(li)])
    return "dZ's exp is not of (logit value) - (row value)";
  const ScalarFunc &ff = F.gemm.epilogue;
  if (!sameExpr(f, gi, args, ff, ff.results[static_cast<size_t>(lseResult)], F.gemm.args))
    return "dZ exponentiates another value than the forward's logsumexp";

  // 4. f = a·E + b.
  Expr x(f);
  std::vector<bool> onE(f.insts.size(), false);
  for (size_t i = 0; i < f.insts.size(); ++i) {
    onE[i] = static_cast<int32_t>(i) == e;
    for (int32_t o : f.insts[i].operands)
      if (o >= 0)
        onE[i] = onE[i] || onE[static_cast<size_t>(o)];
  }
  std::map<int32_t, std::pair<int32_t, int32_t>> linMemo;
  std::function<std::pair<int32_t, int32_t>(int32_t)> lin =
      [&](int32_t i) -> std::pair<int32_t, int32_t> {
    if (!onE[static_cast<size_t>(i)])
      return {-1, i};
    if (i == e)
      return {x.constF(1.0), -1};
    if (auto it = linMemo.find(i); it != linMemo.end())
      return it->second;
    const ScalarInst in = f.insts[static_cast<size_t>(i)];
    const int32_t o0 = in.operands[0], o1 = in.operands[1], o2 = in.operands[2];
    auto on = [&](int32_t o) { return o >= 0 && onE[static_cast<size_t>(o)]; };
    std::pair<int32_t, int32_t> r;
    if (in.type != DType::F32)
      throw Fail{"dZ uses exp(...) in a non-f32 value"};
    switch (in.op) {
    case ScalarOp::Add: {
      auto [a0, b0] = lin(o0);
      auto [a1, b1] = lin(o1);
      r = {x.sum(a0, a1), x.sum(b0, b1)};
      break;
    }
    case ScalarOp::Sub: {
      auto [a0, b0] = lin(o0);
      auto [a1, b1] = lin(o1);
      r = {x.diff(a0, a1), x.diff(b0, b1)};
      break;
    }
    case ScalarOp::Neg: {
      auto [a0, b0] = lin(o0);
      r = {a0 < 0 ? -1 : x.op(ScalarOp::Neg, DType::F32, a0),
           b0 < 0 ? -1 : x.op(ScalarOp::Neg, DType::F32, b0)};
      break;
    }
    case ScalarOp::Mul: {
      if (on(o0) && on(o1))
        throw Fail{"dZ is not linear in exp(...)"};
      const int32_t k = on(o0) ? o1 : o0;
      auto [a0, b0] = lin(on(o0) ? o0 : o1);
      r = {x.prod(a0, k), b0 < 0 ? -1 : x.prod(b0, k)};
      break;
    }
    case ScalarOp::Div: {
      if (on(o1))
        throw Fail{"dZ divides by exp(...)"};
      auto [a0, b0] = lin(o0);
      r = {a0 < 0 ? -1 : x.op(ScalarOp::Div, DType::F32, a0, o1),
           b0 < 0 ? -1 : x.op(ScalarOp::Div, DType::F32, b0, o1)};
      break;
    }
    case ScalarOp::Select: {
      if (on(o0))
        throw Fail{"dZ selects on exp(...)"};
      auto [a1, b1] = lin(o1);
      auto [a2, b2] = lin(o2);
      const int32_t zero = x.constF(0.0);
      r = {(a1 < 0 && a2 < 0) ? -1
                              : x.op(ScalarOp::Select, DType::F32, o0, a1 < 0 ? zero : a1,
                                     a2 < 0 ? zero : a2),
           (b1 < 0 && b2 < 0) ? -1
                              : x.op(ScalarOp::Select, DType::F32, o0, b1 < 0 ? zero : b1,
                                     b2 < 0 ? zero : b2)};
      break;
    }
    default:
      throw Fail{fmt::format("dZ applies {} to exp(...)", scalarOpName(in.op))};
    }
    linMemo[i] = r;
    return r;
  };

  try {
    // (Plain variables: lambdas below use them, and C++17 compilers cannot capture
    // structured bindings.)
    int32_t aIdx = -1, bIdx = -1;
    std::tie(aIdx, bIdx) = lin(f.results[0]);
    if (aIdx < 0)
      return "dZ does not depend on exp(...)";
    // Dependencies of the grown function.
    auto grow = [&](std::function<bool(int32_t)> pred) { return dependsOn(x.f, pred); };
    const std::vector<bool> gX = grow(argIs(Operand::Kind::Acc));
    const std::vector<bool> gC = grow(argIs(Operand::Kind::ColIndex));
    const std::vector<bool> gLate =
        grow([&](int32_t a) { return !isEarly(args[static_cast<size_t>(a)]); });

    // 5. a = a_elem · a_row.
    std::function<std::pair<int32_t, int32_t>(int32_t)> factor =
        [&](int32_t i) -> std::pair<int32_t, int32_t> {
      const size_t u = static_cast<size_t>(i);
      if (!gX[u] && !gC[u])
        return {-1, i};
      if (!gLate[u])
        return {i, -1};
      const ScalarInst in = x.at(i);
      switch (in.op) {
      case ScalarOp::Mul: {
        auto [e0, r0] = factor(in.operands[0]);
        auto [e1, r1] = factor(in.operands[1]);
        return {x.prod(e0, e1), x.prod(r0, r1)};
      }
      case ScalarOp::Div: {
        const size_t d = static_cast<size_t>(in.operands[1]);
        if (gX[d] || gC[d])
          throw Fail{"dZ's factor divides by a per-element value"};
        auto [e0, r0] = factor(in.operands[0]);
        return {e0, x.op(ScalarOp::Div, DType::F32, r0 < 0 ? x.constF(1.0) : r0,
                         in.operands[1])};
      }
      case ScalarOp::Neg: {
        auto [e0, r0] = factor(in.operands[0]);
        return {e0, x.op(ScalarOp::Neg, DType::F32, r0 < 0 ? x.constF(1.0) : r0)};
      }
      default:
        throw Fail{"dZ's factor mixes per-element and per-row values other than by a product"};
      }
    };
    int32_t aElem = -1, aRow = -1;
    if (full)
      std::tie(aElem, aRow) = factor(aIdx);

    // 6. b vanishes off the target column.
    const TargetColumn tcol = findTargetColumn(f, args, isEarly);
    if (tcol.ambiguous)
      throw Fail{"dZ compares the column with two different row values"};
    const int32_t targetArg = tcol.argInst; // the target's Arg instruction in f
    const int32_t targetVal = tcol.value;   // the i64 value compared with col
    // Under col != target: is instruction i zero?
    std::function<std::optional<bool>(int32_t)> truth = [&](int32_t i) -> std::optional<bool> {
      const ScalarInst &in = x.at(i);
      auto isCol = [&](int32_t o) {
        if (x.at(o).op == ScalarOp::Cast) // col as i32 (exact: V < 2^31)
          o = x.at(o).operands[0];
        const ScalarInst &c = x.at(o);
        return c.op == ScalarOp::Arg &&
               args[static_cast<size_t>(c.argIndex)].kind == Operand::Kind::ColIndex;
      };
      if ((in.op == ScalarOp::CmpEq || in.op == ScalarOp::CmpNe) && targetVal >= 0 &&
          ((isCol(in.operands[0]) && in.operands[1] == targetVal) ||
           (isCol(in.operands[1]) && in.operands[0] == targetVal)))
        return in.op == ScalarOp::CmpNe;
      if (in.op == ScalarOp::Not)
        if (auto v = truth(in.operands[0]))
          return !*v;
      if (in.op == ScalarOp::And) {
        auto a = truth(in.operands[0]), b = truth(in.operands[1]);
        if ((a && !*a) || (b && !*b))
          return false;
        if (a && b)
          return true;
      }
      if (in.op == ScalarOp::Or) {
        auto a = truth(in.operands[0]), b = truth(in.operands[1]);
        if ((a && *a) || (b && *b))
          return true;
        if (a && b)
          return false;
      }
      return std::nullopt;
    };
    std::function<bool(int32_t)> zeroOff = [&](int32_t i) -> bool {
      const ScalarInst &in = x.at(i);
      switch (in.op) {
      case ScalarOp::Const: return in.fValue == 0.0 && in.iValue == 0;
      case ScalarOp::Select:
        if (auto c = truth(in.operands[0]))
          return zeroOff(*c ? in.operands[1] : in.operands[2]);
        return zeroOff(in.operands[1]) && zeroOff(in.operands[2]);
      case ScalarOp::Mul: return zeroOff(in.operands[0]) || zeroOff(in.operands[1]);
      case ScalarOp::Div:
      case ScalarOp::Neg:
      case ScalarOp::Cast: return zeroOff(in.operands[0]);
      case ScalarOp::Add:
      case ScalarOp::Sub: return zeroOff(in.operands[0]) && zeroOff(in.operands[1]);
      default: return false;
      }
    };
    if (bIdx >= 0 && !zeroOff(bIdx))
      return "the rest of dZ (besides the exp term) is not zero off a target column";
    const bool hasTarget = bIdx >= 0;
    if (!full && (!hasTarget || targetVal < 0))
      return "dZ has no target column";

    // 7. The per-element factor as a function of G: recover G's chain.
    std::map<int32_t, std::function<int32_t(Expr &, int32_t)>> spine; // f inst -> from v
    {
      int32_t s = gi;
      std::function<int32_t(Expr &, int32_t)> from = [](Expr &, int32_t v) { return v; };
      for (;;) {
        spine[s] = from;
        const ScalarInst &in = f.insts[static_cast<size_t>(s)];
        auto isConst = [&](int32_t o) { return f.insts[static_cast<size_t>(o)].op == ScalarOp::Const; };
        if (in.op == ScalarOp::Mul && (isConst(in.operands[0]) || isConst(in.operands[1]))) {
          const int32_t c = isConst(in.operands[0]) ? in.operands[0] : in.operands[1];
          const int32_t u = c == in.operands[0] ? in.operands[1] : in.operands[0];
          const double cv = f.insts[static_cast<size_t>(c)].fValue;
          if (cv == 0.0)
            break;
          from = [from, cv](Expr &o, int32_t v) {
            return o.op(ScalarOp::Div, DType::F32, from(o, v), o.constF(cv));
          };
          s = u;
        } else if ((in.op == ScalarOp::Add || in.op == ScalarOp::Sub) &&
                   isConst(in.operands[1])) {
          const double cv = f.insts[static_cast<size_t>(in.operands[1])].fValue;
          const ScalarOp inv = in.op == ScalarOp::Add ? ScalarOp::Sub : ScalarOp::Add;
          from = [from, cv, inv](Expr &o, int32_t v) {
            return o.op(inv, DType::F32, from(o, v), o.constF(cv));
          };
          s = in.operands[0];
        } else if (in.op == ScalarOp::Neg) {
          from = [from](Expr &o, int32_t v) {
            return o.op(ScalarOp::Neg, DType::F32, from(o, v));
          };
          s = in.operands[0];
        } else {
          break;
        }
      }
    }
    // The factor over the forward's operands (Acc = v).
    auto fwdArg = [&](const Operand &o) { return argIndex(F.gemm.args, o); };
    Operand accOp;
    accOp.kind = Operand::Kind::Acc;
    const int32_t vArg = fwdArg(accOp);
    ScalarFunc factorFn;
    if (full) {
      Extract ex(x.f);
      ex.argMap = [&](int32_t a) { return fwdArg(args[static_cast<size_t>(a)]); };
      int32_t vInst = -1;
      ex.subst = [&](int32_t i, Expr &o) -> int32_t {
        auto it = spine.find(i);
        if (it == spine.end() || i >= static_cast<int32_t>(f.insts.size())) {
          const ScalarInst &in = x.at(i);
          if (in.op == ScalarOp::Arg &&
              args[static_cast<size_t>(in.argIndex)].kind == Operand::Kind::Acc)
            throw Fail{"the per-element factor of dZ needs the logit itself, not only the "
                       "value the forward reduces"};
          return -2;
        }
        if (vInst < 0) {
          ScalarInst a;
          a.op = ScalarOp::Arg;
          a.type = DType::F32;
          a.argIndex = vArg;
          vInst = o.add(a);
        }
        return it->second(o, vInst);
      };
      int32_t r = aElem < 0 ? ex.out().constF(1.0) : ex.take(aElem);
      factorFn = ex.out().f;
      factorFn.results = {r};
    }

    // 8. The forward: the target column's value v = G(x) as a sum partial (the loss
    //    already picks it; otherwise one more sum), from which the row function recovers
    //    what it needs of x, like the factor does.
    int32_t pickResult = -1;
    if (hasTarget) {
      const Operand &to = args[static_cast<size_t>(x.at(targetArg).argIndex)];
      ScalarFunc &fe = F.gemm.epilogue;
      const int32_t gF = fe.results[static_cast<size_t>(lseResult)];
      auto isTargetCmp = [&](int32_t c) {
        const ScalarInst &in = fe.insts[static_cast<size_t>(c)];
        if (in.op != ScalarOp::CmpEq)
          return false;
        for (int k = 0; k < 2; ++k) {
          int32_t ai = in.operands[k];
          if (fe.insts[static_cast<size_t>(ai)].op == ScalarOp::Cast)
            ai = fe.insts[static_cast<size_t>(ai)].operands[0];
          const ScalarInst &a = fe.insts[static_cast<size_t>(ai)];
          int32_t tt = in.operands[1 - k];
          if (fe.insts[static_cast<size_t>(tt)].op == ScalarOp::Cast)
            tt = fe.insts[static_cast<size_t>(tt)].operands[0];
          const ScalarInst &b = fe.insts[static_cast<size_t>(tt)];
          if (a.op == ScalarOp::Arg &&
              F.gemm.args[static_cast<size_t>(a.argIndex)].kind == Operand::Kind::ColIndex &&
              b.op == ScalarOp::Arg && F.gemm.args[static_cast<size_t>(b.argIndex)] == to)
            return true;
        }
        return false;
      };
      for (size_t r = 0; r < fe.results.size() && pickResult < 0; ++r) {
        const ScalarInst &in = fe.insts[static_cast<size_t>(fe.results[r])];
        if (F.reductions[r] != ReduceKind::Sum || in.op != ScalarOp::Select)
          continue;
        const ScalarInst &zero = fe.insts[static_cast<size_t>(in.operands[2])];
        if (isTargetCmp(in.operands[0]) && zero.op == ScalarOp::Const && zero.fValue == 0.0 &&
            sameExpr(fe, in.operands[1], F.gemm.args, fe, gF, F.gemm.args))
          pickResult = static_cast<int32_t>(r);
      }
      if (pickResult < 0) {
        Operand colOp;
        colOp.kind = Operand::Kind::ColIndex;
        colOp.dtype = DType::I64;
        auto push = [&](ScalarInst in) {
          fe.insts.push_back(in);
          return static_cast<int32_t>(fe.insts.size()) - 1;
        };
        ScalarInst a;
        a.op = ScalarOp::Arg;
        a.type = DType::I64;
        a.argIndex = fwdArg(colOp);
        const int32_t colI = push(a);
        a.type = to.dtype == DType::I64 ? DType::I64 : DType::I32;
        a.argIndex = fwdArg(to);
        int32_t tI = push(a);
        if (a.type != DType::I64) {
          ScalarInst c;
          c.op = ScalarOp::Cast;
          c.type = DType::I64;
          c.operands[0] = tI;
          tI = push(c);
        }
        ScalarInst cmp;
        cmp.op = ScalarOp::CmpEq;
        cmp.type = DType::I1;
        cmp.operands[0] = colI;
        cmp.operands[1] = tI;
        const int32_t cmpI = push(cmp);
        ScalarInst z;
        z.op = ScalarOp::Const;
        z.type = DType::F32;
        const int32_t zI = push(z);
        ScalarInst sel;
        sel.op = ScalarOp::Select;
        sel.type = DType::F32;
        sel.operands[0] = cmpI;
        sel.operands[1] = gF;
        sel.operands[2] = zI;
        fe.results.push_back(push(sel));
        F.reductions.push_back(ReduceKind::Sum);
        pickResult = static_cast<int32_t>(fe.results.size()) - 1;
        p.workspace[static_cast<size_t>(F.partials.index)].bytesPerRow =
            int64_t(4) * p.splits * F.slotsPerRow();
      }
    }
    auto addBuf = [&](std::string bname, int64_t perRow, bool blockLocal) {
      BufferSpec b;
      b.name = std::move(bname);
      b.bytesPerRow = perRow;
      b.blockLocal = blockLocal;
      p.workspace.push_back(b);
      return BufferRef{Space::Workspace, static_cast<int32_t>(p.workspace.size()) - 1};
    };
    // [Note: the exact target logit]: the RowDot of this forward and target, and G's chain
    // applied to it (v_y) where the chain reads per-row values only. `argOf` maps an
    // operand of the dZ function (and the dot) to an argument of the function being built.
    BufferRef dot;
    const std::vector<bool> gCone = [&] {
      std::vector<bool> need(f.insts.size(), false);
      need[static_cast<size_t>(gi)] = true;
      for (int32_t i = gi; i >= 0; --i)
        if (need[static_cast<size_t>(i)])
          for (int32_t op : f.insts[static_cast<size_t>(i)].operands)
            if (op >= 0)
              need[static_cast<size_t>(op)] = true;
      return need;
    }();
    bool gRowOnly = true;
    for (int32_t i = 0; i <= gi; ++i) {
      const ScalarInst &in = f.insts[static_cast<size_t>(i)];
      if (gCone[static_cast<size_t>(i)] && in.op == ScalarOp::Arg) {
        const Operand::Kind k = args[static_cast<size_t>(in.argIndex)].kind;
        gRowOnly = gRowOnly && (k == Operand::Kind::Acc || k == Operand::Kind::Row ||
                                k == Operand::Kind::Scalar);
      }
    }
    if (hasTarget) {
      const Operand &to = args[static_cast<size_t>(x.at(targetArg).argIndex)];
      for (const Kernel &k : p.kernels)
        if (const auto *d = std::get_if<RowDotKernel>(&k.body);
            d && d->target == to.buf && d->a == F.gemm.a && d->b == F.gemm.b)
          dot = d->out;
    }
    Operand dotOp;
    dotOp.kind = Operand::Kind::Row;
    dotOp.buf = dot;
    dotOp.dtype = DType::F32;
    auto chainOnDot = [&](Expr &o, const std::function<int32_t(const Operand &)> &argOf) {
      std::vector<int32_t> map(f.insts.size(), -1);
      for (int32_t i = 0; i <= gi; ++i) {
        if (!gCone[static_cast<size_t>(i)])
          continue;
        ScalarInst in = f.insts[static_cast<size_t>(i)];
        if (in.op == ScalarOp::Arg) {
          const Operand &op = args[static_cast<size_t>(in.argIndex)];
          in.argIndex = argOf(op.kind == Operand::Kind::Acc ? dotOp : op);
        }
        for (int32_t &op : in.operands)
          if (op >= 0)
            op = map[static_cast<size_t>(op)];
        map[static_cast<size_t>(i)] = o.add(in);
      }
      return map[static_cast<size_t>(gi)];
    };

    int32_t dbPart = -1; // [Note: a scaled A in column parts]: dB's kernel, when split
    int32_t dbInPlace = -1; // [Note: values scaled in place]: dB's kernel
    StoredTile st;
    BufferRef rowReference; // [Note: a per-row reference]: c_r, f32 per row
    std::optional<RowKernel> refKernel; // ... and the row kernel that writes it
    if (full) {
      st.values = Z.dz;
      st.tileCols = F.gemm.tile.epilogueCols();
      st.lseResult = lseResult;
      st.factor = std::move(factorFn);
      if (hasTarget)
        st.excludeArg = fwdArg(args[static_cast<size_t>(x.at(targetArg).argIndex)]);
      // [Note: row-scaled stored values]: a bounded value, a target column whose whole dZ
      // the residual carries (dA's epilogue, dB's TargetCorrection: an f32 dB, checked
      // above) and a bf16 A that dB can read scaled.
      const auto range = boundsOf(ff, ff.results[static_cast<size_t>(lseResult)]);
      bool lhsWgmma = true;
      for (int32_t ki : loop.loopKernels)
        if (const auto *d = std::get_if<GemmDLhsKernel>(&p.kernels[static_cast<size_t>(ki)].body))
          lhsWgmma = lhsWgmma && d->math == MathMode::WgmmaBF16;
      const bool canScale = rowScaled && hasTarget && st.excludeArg >= 0 &&
                            Z.residual.valid() && F.gemm.abType == DType::BF16 &&
                            F.gemm.k % 8 == 0 && lhsWgmma;
      const bool bounded = range && range->second - range->first <= kRowScaledRange;
      // [Note: a per-row reference]: the f64 target logit through G's chain, before the
      // forward; the dZ GEMM stays for the rows whose loss is too large for it.
      const bool perRow = canScale && !bounded && exactTarget && dot.valid() && gRowOnly &&
                          Z.format == DzFormat::BF16 && Z.residual.valid();
      st.rowScaled = canScale && (bounded || perRow);
      if (st.rowScaled && bounded) {
        st.reference = range->second;
      } else if (st.rowScaled) {
        RowKernel ref;
        auto refArg = [&](const Operand &o) { return argIndex(ref.args, o); };
        Expr o{ScalarFunc{}};
        const int32_t vy = chainOnDot(o, refArg);
        const int32_t res = o.f.insts[static_cast<size_t>(vy)].type == DType::F32
                                ? vy
                                : o.op(ScalarOp::Cast, DType::F32, vy);
        ref.func = o.f;
        ref.func.results = {res};
        rowReference = addBuf("row_reference0", 4, false);
        RowKernel::Sink sk;
        sk.kind = RowKernel::Sink::Kind::StoreRow;
        sk.result = 0;
        sk.buf = rowReference;
        sk.dtype = DType::F32;
        ref.sinks.push_back(sk);
        Operand refOp;
        refOp.kind = Operand::Kind::Row;
        refOp.buf = rowReference;
        refOp.dtype = DType::F32;
        st.referenceArg = fwdArg(refOp);
        refKernel = std::move(ref);
      }
      if (!st.rowScaled)
        st.tileMax =
            addBuf("tile_max0", int64_t(4) * (F.gemm.cols / F.gemm.tile.epilogueCols()), true);
    }

    // 9. The row kernel: L, a_row and dZ on the target column.
    RowKernel rk;
    {
      Extract ex(x.f);
      auto rowArg = [&](const Operand &o) { return argIndex(rk.args, o); };
      ex.argMap = [&](int32_t a) {
        const Operand &o = args[static_cast<size_t>(a)];
        if (o.kind == Operand::Kind::Acc || o.kind == Operand::Kind::ColIndex)
          throw Fail{"internal: a per-element operand in a row function"};
        if (o.kind == Operand::Kind::Col)
          throw Fail{"dZ's row part reads a per-column operand"};
        return rowArg(o);
      };
      // The forward's partial of `result` (its `c` component), read by the row kernel as
      // an f32 argument.
      auto forwardPartial = [&](Expr &o, int32_t result, ReduceKind kind,
                                Operand::Component c) {
        Operand op;
        op.kind = Operand::Kind::Partials;
        op.buf = F.partials;
        op.slot = F.slotOf(result);
        op.reduce = static_cast<int32_t>(kind);
        op.partialsOf = fi;
        op.dtype = DType::F32;
        op.component = c;
        ScalarInst a;
        a.op = ScalarOp::Arg;
        a.type = DType::F32;
        a.argIndex = rowArg(op);
        return o.add(a);
      };
      int32_t vPick = -1;
      ex.subst = [&](int32_t i, Expr &o) -> int32_t {
        if (auto it = spine.find(i); it != spine.end() && i < static_cast<int32_t>(f.insts.size())) {
          if (!hasTarget)
            throw Fail{"internal: the logit in a row function without a target"};
          if (vPick < 0)
            vPick = forwardPartial(o, pickResult, ReduceKind::Sum, Operand::Component::Value);
          return it->second(o, vPick);
        }
        const ScalarInst &in = x.at(i);
        if (in.op != ScalarOp::Arg)
          return -2;
        const Operand &op = args[static_cast<size_t>(in.argIndex)];
        if (op.kind == Operand::Kind::Acc)
          throw Fail{"dZ on the target column needs the logit itself, not only the value the "
                     "forward reduces"};
        if (op.kind == Operand::Kind::ColIndex) {
          if (!hasTarget)
            throw Fail{"internal: the column in a row function without a target"};
          const Operand &to = args[static_cast<size_t>(x.at(targetArg).argIndex)];
          ScalarInst a;
          a.op = ScalarOp::Arg;
          a.type = to.dtype == DType::I64 ? DType::I64 : DType::I32;
          a.argIndex = rowArg(to);
          int32_t t = o.add(a);
          if (a.type != DType::I64)
            t = o.op(ScalarOp::Cast, DType::I64, t);
          return t;
        }
        return -2;
      };
      // [Note: the target column's dZ] (Program.h): f = a·E + b at the target column as
      // a·expm1(−ℓ) + (a + b), ℓ = lse' − v_y from the forward's (m, t) pair and pick
      // and, where the Program sums it, the f64 target logit.
      auto targetDz = [&]() -> int32_t {
        Expr &o = ex.out();
        const int32_t aT = ex.take(aIdx);
        const int32_t bT = ex.take(bIdx);
        const int32_t v = ex.take(gi); // G at the target: the forward's pick
        const int32_t m =
            forwardPartial(o, lseResult, ReduceKind::LogSumExp, Operand::Component::Max);
        const int32_t t =
            forwardPartial(o, lseResult, ReduceKind::LogSumExp, Operand::Component::RestSum);
        // v_y: G's chain on the RowDot's f64 target logit, where the Program has one for
        // this forward and target and the chain reads per-row values only.
        const int32_t vy = dot.valid() && gRowOnly ? chainOnDot(o, rowArg) : v;
        const int32_t d = o.op(ScalarOp::Sub, DType::F32, m, v);
        const int32_t rest =
            o.op(ScalarOp::Add, DType::F32, o.op(ScalarOp::Expm1, DType::F32, d),
                 o.op(ScalarOp::Mul, DType::F32, o.op(ScalarOp::Exp, DType::F32, d), t));
        const int32_t big = o.op(ScalarOp::Mul, DType::F32,
                                 o.op(ScalarOp::Exp, DType::F32, o.op(ScalarOp::Sub, DType::F32, v, vy)),
                                 rest);
        // [Note: a far target]: beyond kFarTarget p_y < exp(-kFarTarget) is below dz_y's
        // rounding, and X's exp(m - z_y)·t can overflow (inf·0 where t is 0): there
        // expm1(-log1p(X)) is taken as -1 (dz_y = b).
        const int32_t em1 = o.op(
            ScalarOp::Select, DType::F32,
            o.op(ScalarOp::CmpGt, DType::I1, d, o.constF(kFarTarget)), o.constF(-1.0),
            o.op(ScalarOp::Expm1, DType::F32,
                 o.op(ScalarOp::Neg, DType::F32, o.op(ScalarOp::Log1p, DType::F32, big))));
        return o.op(ScalarOp::Add, DType::F32, o.op(ScalarOp::Mul, DType::F32, aT, em1),
                    o.op(ScalarOp::Add, DType::F32, aT, bT));
      };
      const int32_t tI = !hasTarget    ? ex.out().constF(0.0)
                         : exactTarget ? targetDz()
                                       : ex.take(f.results[0]);
      if (full) {
        const int32_t lI = ex.take(li);
        const int32_t sI = aRow < 0 ? ex.out().constF(1.0) : ex.take(aRow);
        rk.func = ex.out().f;
        rk.func.results = {lI, sI, tI};
      } else {
        rk.func = ex.out().f;
        rk.func.results = {tI};
      }
    }
    if (!full) {
      // The recompute schedule: a row kernel before the loop stores the target column's
      // dZ, and the dZ GEMM's epilogue takes it there.
      const BufferRef tdz = addBuf("target_dz0", 4, false);
      RowKernel::Sink sk;
      sk.kind = RowKernel::Sink::Kind::StoreRow;
      sk.result = 0;
      sk.buf = tdz;
      sk.dtype = DType::F32;
      rk.sinks.push_back(sk);
      auto &Zm = std::get<GemmDzKernel>(p.kernels[static_cast<size_t>(zi)].body);
      ScalarFunc &fz = Zm.gemm.epilogue;
      const std::vector<Operand> &za = Zm.gemm.args;
      auto isColArg = [&](int32_t i) {
        if (fz.insts[static_cast<size_t>(i)].op == ScalarOp::Cast)
          i = fz.insts[static_cast<size_t>(i)].operands[0];
        const ScalarInst &c = fz.insts[static_cast<size_t>(i)];
        return c.op == ScalarOp::Arg &&
               za[static_cast<size_t>(c.argIndex)].kind == Operand::Kind::ColIndex;
      };
      int32_t cmp = -1;
      for (int32_t i = 0; i < static_cast<int32_t>(fz.insts.size()) && cmp < 0; ++i) {
        const ScalarInst &in = fz.insts[static_cast<size_t>(i)];
        if ((in.op == ScalarOp::CmpEq || in.op == ScalarOp::CmpNe) &&
            ((isColArg(in.operands[0]) && in.operands[1] == targetVal) ||
             (isColArg(in.operands[1]) && in.operands[0] == targetVal)))
          cmp = i;
      }
      if (cmp < 0)
        return "internal: no column compare with the target in dZ";
      const bool eq = fz.insts[static_cast<size_t>(cmp)].op == ScalarOp::CmpEq;
      Operand tdzOp;
      tdzOp.kind = Operand::Kind::Row;
      tdzOp.buf = tdz;
      tdzOp.dtype = DType::F32;
      Zm.gemm.args.push_back(tdzOp);
      ScalarInst a;
      a.op = ScalarOp::Arg;
      a.type = DType::F32;
      a.argIndex = static_cast<int32_t>(Zm.gemm.args.size()) - 1;
      fz.insts.push_back(a);
      const int32_t aI = static_cast<int32_t>(fz.insts.size()) - 1;
      ScalarInst sel;
      sel.op = ScalarOp::Select;
      sel.type = DType::F32;
      sel.operands[0] = cmp;
      sel.operands[1] = eq ? aI : fz.results[0];
      sel.operands[2] = eq ? fz.results[0] : aI;
      fz.insts.push_back(sel);
      fz.results[0] = static_cast<int32_t>(fz.insts.size()) - 1;
      p.kernels.push_back(Kernel{name + "_dzt0", std::move(rk)});
      p.steps.insert(p.steps.begin() + loopStep,
                     Step{Step::Kind::Launch, static_cast<int32_t>(p.kernels.size()) - 1, {}});
      return "";
    }
    DzFormKernel dzf;
    dzf.dz = Z.dz;
    dzf.tileMax = st.tileMax;
    dzf.cols = F.gemm.cols;
    dzf.tileCols = st.tileCols;
    dzf.lse = addBuf("dzrow_lse0", 4, false);
    dzf.scale = addBuf("dzrow_scale0", 4, false);
    dzf.targetDz = addBuf("dzrow_target0", 4, false);
    if (hasTarget) {
      const Operand &to = args[static_cast<size_t>(x.at(targetArg).argIndex)];
      dzf.target = to.buf;
      dzf.targetType = to.dtype;
    }
    // [Note: the target-column residual]: DzForm rounds dZ now, so it writes the residual.
    if (Z.residual.valid()) {
      if (!hasTarget || !(Z.residual.target == dzf.target))
        throw Fail{"internal: the dZ residual's target is not the stored tile's"};
      dzf.residual = Z.residual.buf;
    }
    for (int k = 0; k < 3; ++k) {
      RowKernel::Sink s;
      s.kind = RowKernel::Sink::Kind::StoreRow;
      s.result = k;
      s.buf = k == 0 ? dzf.lse : k == 1 ? dzf.scale : dzf.targetDz;
      s.dtype = DType::F32;
      rk.sinks.push_back(s);
    }
    if (st.rowScaled) {
      // [Note: row-scaled stored values]: the row scale for dA's epilogue, the scaled A
      // for dB's B operand; the stored values are dZ's operand as they are.
      dzf.rowScaled = true;
      dzf.reference = st.reference;
      dzf.tileMax = BufferRef{};
      dzf.rowScale = addBuf("dzrow_row_scale0", 4, false);
      if (refKernel) {
        // [Note: a per-row reference]: the rows the stored values cannot hold are flagged,
        // and the dZ GEMM writes those rows only.
        dzf.referenceRow = rowReference;
        dzf.recompute = addBuf("dzrow_recompute0", 4, false);
        auto &Zm = std::get<GemmDzKernel>(p.kernels[static_cast<size_t>(zi)].body);
        Zm.rowFilter = dzf.recompute;
        // A small cooperative tile: the kernel rarely runs, and its epilogue, unrolled over
        // a consumer's accumulators, is what NVRTC spends its time on (64 per thread here,
        // against 128 with ping-pong's 128x128: the module is on the first call's path).
        Zm.gemm.tile.bn = 64;
        Zm.gemm.tile.pingpong = false;
        Zm.gemm.tile.halves = false;
        if (!(Zm.residual.buf == dzf.residual) || !(Zm.dz == st.values))
          throw Fail{"internal: the dZ GEMM does not write the stored values and residual"};
      }
      for (int32_t ki : loop.loopKernels) {
        Kernel &kk = p.kernels[static_cast<size_t>(ki)];
        if (auto *d = std::get_if<GemmDLhsKernel>(&kk.body)) {
          if (!d->residual.valid())
            throw Fail{"internal: dA has no target-column residual"};
          d->rowScale = dzf.rowScale;
        } else if (auto *d = std::get_if<GemmDRhsKernel>(&kk.body)) {
          if (!(d->a == F.gemm.a) || d->aType != DType::BF16)
            throw Fail{"internal: dB's B operand is not the forward's bf16 A"};
          if (inPlace) {
            // [Note: values scaled in place]: dB reads the unscaled A, and a DzForm before
            // it scales the values (inserted below).
            if (dbInPlace >= 0)
              throw Fail{"internal: two dB GEMMs over the stored values"};
            dbInPlace = ki;
            continue;
          }
          // [Note: a scaled A in column parts]: in parts when the copy would outweigh the
          // tile maxima (the per-row reference's case at LLM heads).
          const int64_t part = F.gemm.k / kScaledAParts;
          const bool inParts = refKernel && d->math == MathMode::WgmmaBF16 &&
                               d->tile.tmaStore && part % 64 == 0 &&
                               part * kScaledAParts == F.gemm.k &&
                               int64_t(2) * F.gemm.k > int64_t(4) * (F.gemm.cols / F.gemm.tile.epilogueCols());
          if (!dzf.aScaled.valid()) {
            dzf.aScaled =
                addBuf("dzrow_a_scaled0", int64_t(2) * (inParts ? part : F.gemm.k), true);
            dzf.a = F.gemm.a;
            dzf.aType = F.gemm.abType;
            dzf.k = inParts ? part : F.gemm.k;
            dzf.aLd = inParts ? F.gemm.k : 0;
          }
          d->a = dzf.aScaled;
          if (inParts) {
            d->k = part;
            d->outLd = F.gemm.k;
            dbPart = ki;
          }
        }
      }
    }
    F.stored = std::move(st);
    // What the values scaled in place need (F refers into p.kernels, which grows below).
    const BufferRef inPlaceValues = F.stored->values;
    const bool inPlaceRowScaled = F.stored->rowScaled;
    const int64_t inPlaceCols = F.gemm.cols;
    const BufferRef inPlaceScale = dzf.rowScale;

    // 10. Kernels and steps: the dZ GEMM goes, the row kernel and DzForm come before the
    //     loop, whose one chunk is all columns.
    p.kernels.push_back(Kernel{name + "_dzrow0", std::move(rk)});
    const int32_t rowK = static_cast<int32_t>(p.kernels.size()) - 1;
    std::optional<DzFormKernel> later; // the aOnly form of the later parts
    if (dbPart >= 0) {
      later = dzf;
      later->aOnly = true;
      later->residual = later->rowScale = later->targetDz = later->recompute = BufferRef{};
    }
    p.kernels.push_back(Kernel{name + "_dzform0", std::move(dzf)});
    const int32_t formK = static_cast<int32_t>(p.kernels.size()) - 1;
    if (dbPart >= 0) {
      // [Note: a scaled A in column parts]: after dB over part 0, each later part's scaled
      // A (the same buffer) and dB over its columns.
      auto at = std::find(loop.loopKernels.begin(), loop.loopKernels.end(), dbPart);
      if (at == loop.loopKernels.end())
        throw Fail{"internal: dB is not in the loop"};
      std::vector<int32_t> added;
      for (int32_t q = 1; q < kScaledAParts; ++q) {
        DzFormKernel fq = *later;
        fq.aCol0 = q * fq.k;
        Kernel dq = p.kernels[static_cast<size_t>(dbPart)];
        std::get<GemmDRhsKernel>(dq.body).outCol0 = q * fq.k;
        dq.name += fmt::format("_part{}", q);
        p.kernels.push_back(Kernel{fmt::format("{}_ascale{}", name, q), std::move(fq)});
        added.push_back(static_cast<int32_t>(p.kernels.size()) - 1);
        p.kernels.push_back(std::move(dq));
        added.push_back(static_cast<int32_t>(p.kernels.size()) - 1);
      }
      loop.loopKernels.insert(at + 1, added.begin(), added.end());
    }
    if (inPlace) {
      // [Note: values scaled in place]: after dA (which scales its own rows), before dB.
      if (!inPlaceRowScaled || dbInPlace < 0 || !inPlaceScale.valid())
        throw Fail{"the values are not row-scaled (no row scale to apply in place)"};
      DzFormKernel sv;
      sv.dz = inPlaceValues;
      sv.cols = inPlaceCols;
      sv.rowScaled = true;
      sv.scaleValues = true;
      sv.rowScale = inPlaceScale;
      if (sv.cols % 8 != 0)
        throw Fail{fmt::format("{} columns are not a multiple of 8", sv.cols)};
      auto at = std::find(loop.loopKernels.begin(), loop.loopKernels.end(), dbInPlace);
      if (at == loop.loopKernels.end())
        throw Fail{"internal: dB is not in the loop"};
      p.kernels.push_back(Kernel{name + "_dzscale0", std::move(sv)});
      loop.loopKernels.insert(at, static_cast<int32_t>(p.kernels.size()) - 1);
    }
    // [Note: a per-row reference]: the dZ GEMM stays first in the loop (one chunk of all
    // columns), filtered to the flagged rows.
    if (!refKernel)
      loop.loopKernels.erase(loop.loopKernels.begin());
    p.steps.insert(p.steps.begin() + loopStep, {Step{Step::Kind::Launch, rowK, {}},
                                                Step{Step::Kind::Launch, formK, {}}});
    if (refKernel) {
      // The RowDot (it reads inputs only) and the reference's row kernel run before the
      // forward, which reads c_r.
      int32_t dotStep = -1;
      for (int32_t i = 0; i < static_cast<int32_t>(p.steps.size()); ++i) {
        const Step &stp = p.steps[static_cast<size_t>(i)];
        if (stp.kind == Step::Kind::Launch)
          if (const auto *d =
                  std::get_if<RowDotKernel>(&p.kernels[static_cast<size_t>(stp.kernel)].body);
              d && d->out == dot)
            dotStep = i;
      }
      if (dotStep < 0)
        throw Fail{"internal: the target logit's RowDot is not launched"};
      const Step dotLaunch = p.steps[static_cast<size_t>(dotStep)];
      p.steps.erase(p.steps.begin() + dotStep);
      if (dotStep < fStep)
        --fStep;
      p.kernels.push_back(Kernel{name + "_ref0", std::move(*refKernel)});
      p.steps.insert(p.steps.begin() + fStep,
                     {dotLaunch,
                      Step{Step::Kind::Launch, static_cast<int32_t>(p.kernels.size()) - 1, {}}});
    } else {
      // Remove the dZ GEMM (already out of the loop's kernels) and renumber.
      removeKernel(p, zi);
    }
    p.schedule.wholeRows = true;
    // 11. One chunk of all columns: dA sums over all of V in one launch, so a bf16/f16 dA
    //     is written by it directly, rounded once; the recompute's f32 accumulator across
    //     chunks (4·D bytes per row of a block) and its cast kernel go.
    directLhs(p);
    // [Note: materialize or recompute] A row block of R rows stores R·V values; every
    // block after the first re-reads and re-writes the f32 dW (8·V·D bytes), where the
    // recompute spends 2·R·D·V flops on those rows instead. At ~3 TB/s against ~650
    // TFLOP/s (H200) the two are even near R = 870: below minBlockRows (1024) rows per
    // block the recompute is kept.
    const int64_t ra = std::max<int64_t>(p.schedule.rowAlign, 1);
    const int64_t want = std::max<int64_t>(p.schedule.minBlockRows, ra);
    if (!inPlace && workspaceBytesFor(p, want, want, p.loopCols) > p.schedule.budgetBytes)
      return fmt::format("the {} MiB budget holds the stored values of fewer than {} rows "
                         "(each row block re-reads and re-writes dW: below that the "
                         "recompute costs less)",
                         p.schedule.budgetBytes >> 20, want);
  } catch (const Fail &fail) {
    return fail.why;
  }
  return "";
}
} // namespace

} // namespace lcejit::plan
