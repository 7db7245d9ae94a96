//===- ProgramInterpreter.cpp - fp64 interpreter of a planned Program -----===//
//
// See ProgramInterpreter.h and docs/program.md. Structure:
//  - Memory: one Buffer per input, output and workspace buffer. Values are doubles; a
//    workspace buffer is byte-sized (BufferSpec) and every access checks
//    (index + 1) * elementBytes <= bytes, and that the buffer is always accessed with
//    one element type.
//  - FuncEval: a validated ScalarFunc, evaluated per row / per GEMM element.
//  - One method per kernel kind, and the steps (Launch, ChunkLoop) on top.
//
//===----------------------------------------------------------------------===//

#include "compiler/reference/ProgramInterpreter.h"
#include "compiler/plan/SchedulePolicy.h"
#include "compiler/reference/RefMath.h"
#include "compiler/support/Check.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>

namespace lcejit::ref {

using namespace plan;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

[[noreturn]] void badProgram(const std::string &where, const std::string &msg) {
  throwError(
      ErrorKind::Internal,
      fmt::format("interpretProgram: {}: {} (the Program violates docs/program.md)", where, msg));
}

const char *spaceName(Space s) {
  switch (s) {
  case Space::Input: return "input";
  case Space::Output: return "output";
  case Space::Workspace: return "workspace";
  }
  return "?";
}

/// Wraps an integer to the width of `t` (I32 sign-extended, I1 low bit).
double wrapInt(int64_t v, DType t) {
  switch (t) {
  case DType::I1: return static_cast<double>(v & 1);
  case DType::I32: return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(v)));
  default: return static_cast<double>(v);
  }
}

/// Integer arithmetic of type `t` on exact integer values, wrapping (no UB on overflow).
template <typename F> double wrapping(double a, double b, DType t, F f) {
  uint64_t r = f(static_cast<uint64_t>(static_cast<int64_t>(a)),
                 static_cast<uint64_t>(static_cast<int64_t>(b)));
  return wrapInt(static_cast<int64_t>(r), t);
}

/// docs/program.md `Cast`: float->int truncates toward zero, int->float is exact here,
/// i1->x gives 0/1, x->i1 is x != 0.
double convert(double v, DType from, DType to) {
  if (to == DType::I1)
    return v != 0.0 ? 1.0 : 0.0;
  if (isFloat(to))
    return v;
  if (isFloat(from))
    return roundToDType(v, to); // truncates toward zero and wraps (NaN -> 0)
  return wrapInt(static_cast<int64_t>(v), to);
}

/// [Note: lse] in docs/program.md: (m, t) with t = sum(exp(x - m)) - 1.
struct LsePartial {
  double m = -kInf, t = -1.0; // empty

  static LsePartial of(const std::vector<double> &xs) {
    LsePartial p;
    size_t arg = xs.size();
    for (size_t i = 0; i < xs.size(); ++i) {
      if (std::isnan(xs[i]))
        return {kNaN, kNaN};
      if (arg == xs.size() || xs[i] > p.m) {
        p.m = xs[i];
        arg = i;
      }
    }
    if (arg == xs.size() || p.m == -kInf)
      return LsePartial{}; // no element, or only exp(-inf) = 0 terms
    Sum t;
    for (size_t i = 0; i < xs.size(); ++i)
      if (i != arg)
        t.add(std::exp(xs[i] - p.m)); // NaN for a second +inf, as IEEE says
    p.t = t.value();
    return p;
  }

  static LsePartial combine(const LsePartial &a, const LsePartial &b) {
    if (std::isnan(a.m) || std::isnan(b.m) || std::isnan(a.t) || std::isnan(b.t))
      return {kNaN, kNaN};
    if (b.m == -kInf)
      return a;
    if (a.m == -kInf)
      return b;
    const LsePartial &hi = a.m >= b.m ? a : b;
    const LsePartial &lo = a.m >= b.m ? b : a;
    return {hi.m, hi.t + (1.0 + lo.t) * std::exp(lo.m - hi.m)};
  }

  double value() const { return m + std::log1p(t); }
};

//===----------------------------------------------------------------------===//
// Scalar functions
//===----------------------------------------------------------------------===//

bool isComputeType(DType t) {
  return t == DType::F32 || t == DType::I32 || t == DType::I64 || t == DType::I1;
}

int numOperands(ScalarOp op) {
  switch (op) {
  case ScalarOp::Arg:
  case ScalarOp::Const:
  case ScalarOp::RowCount: return 0;
  case ScalarOp::Neg:
  case ScalarOp::Exp:
  case ScalarOp::Log:
  case ScalarOp::Tanh:
  case ScalarOp::Expm1:
  case ScalarOp::Log1p:
  case ScalarOp::Abs:
  case ScalarOp::Not:
  case ScalarOp::Cast: return 1;
  case ScalarOp::Select: return 3;
  default: return 2;
  }
}

/// A ScalarFunc checked once against the rules of docs/program.md, then evaluated many
/// times. `where` names the kernel in errors.
class FuncEval {
public:
  FuncEval(const ScalarFunc &f, std::string where) : f_(f), where_(std::move(where)) { validate(); }

  const ScalarFunc &func() const { return f_; }

  /// Evaluates every instruction; argValue(argIndex, argType) supplies Arg values.
  template <typename ArgFn>
  void run(ArgFn &&argValue, int64_t rowCount, std::vector<double> &v) const {
    v.resize(f_.insts.size());
    for (size_t i = 0; i < f_.insts.size(); ++i) {
      const ScalarInst &in = f_.insts[i];
      auto o = [&](int k) { return v[static_cast<size_t>(in.operands[k])]; };
      auto ot = [&](int k) { return f_.insts[static_cast<size_t>(in.operands[k])].type; };
      bool fl = in.type == DType::F32;
      double r = 0.0;
      switch (in.op) {
      case ScalarOp::Arg: r = argValue(in.argIndex, in.type); break;
      case ScalarOp::Const: r = fl ? in.fValue : wrapInt(in.iValue, in.type); break;
      case ScalarOp::RowCount: r = static_cast<double>(rowCount); break;
      case ScalarOp::Add:
        r = fl ? o(0) + o(1) : wrapping(o(0), o(1), in.type, std::plus<>());
        break;
      case ScalarOp::Sub:
        r = fl ? o(0) - o(1) : wrapping(o(0), o(1), in.type, std::minus<>());
        break;
      case ScalarOp::Mul:
        r = fl ? o(0) * o(1) : wrapping(o(0), o(1), in.type, std::multiplies<>());
        break;
      case ScalarOp::Div: r = o(0) / o(1); break;
      case ScalarOp::Max: r = fl ? maxNaN(o(0), o(1)) : std::max(o(0), o(1)); break;
      case ScalarOp::Min: r = fl ? minNaN(o(0), o(1)) : std::min(o(0), o(1)); break;
      case ScalarOp::Neg: r = -o(0); break;
      case ScalarOp::Exp: r = std::exp(o(0)); break;
      case ScalarOp::Log: r = std::log(o(0)); break;
      case ScalarOp::Tanh: r = std::tanh(o(0)); break;
      case ScalarOp::Expm1: r = std::expm1(o(0)); break;
      case ScalarOp::Log1p: r = std::log1p(o(0)); break;
      case ScalarOp::Abs: r = std::fabs(o(0)); break;
      case ScalarOp::CmpEq: r = o(0) == o(1); break;
      case ScalarOp::CmpNe: r = o(0) != o(1); break; // true for NaN
      case ScalarOp::CmpLt: r = o(0) < o(1); break;
      case ScalarOp::CmpLe: r = o(0) <= o(1); break;
      case ScalarOp::CmpGt: r = o(0) > o(1); break;
      case ScalarOp::CmpGe: r = o(0) >= o(1); break;
      case ScalarOp::And: r = (o(0) != 0.0 && o(1) != 0.0); break;
      case ScalarOp::Or: r = (o(0) != 0.0 || o(1) != 0.0); break;
      case ScalarOp::Not: r = o(0) == 0.0; break;
      case ScalarOp::Select: r = o(0) != 0.0 ? o(1) : o(2); break;
      case ScalarOp::Cast: r = convert(o(0), ot(0), in.type); break;
      }
      v[i] = r;
    }
  }

  double result(const std::vector<double> &v, int32_t r) const {
    return v[static_cast<size_t>(f_.results[static_cast<size_t>(r)])];
  }
  DType resultType(int32_t r) const {
    return f_.insts[static_cast<size_t>(f_.results[static_cast<size_t>(r)])].type;
  }
  int32_t numResults() const { return static_cast<int32_t>(f_.results.size()); }

  /// Whether result `r` depends on an Arg whose index satisfies `pred`.
  template <typename Pred> bool resultDependsOn(int32_t r, Pred &&pred) const {
    std::vector<char> dep(f_.insts.size(), 0);
    for (size_t i = 0; i < f_.insts.size(); ++i) {
      const ScalarInst &in = f_.insts[i];
      if (in.op == ScalarOp::Arg)
        dep[i] = pred(in.argIndex);
      for (int k = 0; k < numOperands(in.op); ++k)
        dep[i] |= dep[static_cast<size_t>(in.operands[k])];
    }
    return dep[static_cast<size_t>(f_.results[static_cast<size_t>(r)])];
  }

  void checkResult(int32_t r, const char *what) const {
    if (r < 0 || r >= numResults())
      badProgram(where_, fmt::format("{} refers to result {} of a function with {} results", what,
                                     r, numResults()));
  }

private:
  void validate() const {
    auto err = [&](size_t i, const std::string &m) {
      badProgram(where_, fmt::format("instruction {} ({} {}): {}", i, scalarOpName(f_.insts[i].op),
                                     dtypeName(f_.insts[i].type), m));
    };
    for (size_t i = 0; i < f_.insts.size(); ++i) {
      const ScalarInst &in = f_.insts[i];
      if (!isComputeType(in.type))
        err(i, "the type must be f32, i32, i64 or i1");
      int n = numOperands(in.op);
      for (int k = 0; k < n; ++k)
        if (in.operands[k] < 0 || in.operands[k] >= static_cast<int32_t>(i))
          err(i, fmt::format("operand {} is {}, not an earlier instruction", k, in.operands[k]));
      auto ot = [&](int k) { return f_.insts[static_cast<size_t>(in.operands[k])].type; };
      bool fl = in.type == DType::F32;
      switch (in.op) {
      case ScalarOp::Arg:
        if (in.argIndex < 0)
          err(i, "no argIndex");
        break;
      case ScalarOp::Const: break;
      case ScalarOp::RowCount:
        if (in.type != DType::I64)
          err(i, "RowCount is i64");
        break;
      case ScalarOp::Add:
      case ScalarOp::Sub:
      case ScalarOp::Mul:
      case ScalarOp::Div:
      case ScalarOp::Max:
      case ScalarOp::Min:
        if (in.type == DType::I1)
          err(i, "arithmetic on i1");
        if (in.op == ScalarOp::Div && !fl)
          err(i, "integer division is not defined");
        if (ot(0) != in.type || ot(1) != in.type)
          err(i, fmt::format("operand types {} and {} differ from the result type",
                             dtypeName(ot(0)), dtypeName(ot(1))));
        break;
      case ScalarOp::Neg:
      case ScalarOp::Exp:
      case ScalarOp::Log:
      case ScalarOp::Tanh:
      case ScalarOp::Expm1:
      case ScalarOp::Log1p:
      case ScalarOp::Abs:
        if (!fl || ot(0) != DType::F32)
          err(i, "float unary ops take and give f32");
        break;
      case ScalarOp::CmpEq:
      case ScalarOp::CmpNe:
      case ScalarOp::CmpLt:
      case ScalarOp::CmpLe:
      case ScalarOp::CmpGt:
      case ScalarOp::CmpGe:
        if (in.type != DType::I1)
          err(i, "comparisons give i1");
        if (ot(0) != ot(1))
          err(i, fmt::format("compares {} with {}", dtypeName(ot(0)), dtypeName(ot(1))));
        break;
      case ScalarOp::And:
      case ScalarOp::Or:
      case ScalarOp::Not:
        if (in.type != DType::I1 || ot(0) != DType::I1 || (n > 1 && ot(1) != DType::I1))
          err(i, "logical ops take and give i1");
        break;
      case ScalarOp::Select:
        if (ot(0) != DType::I1)
          err(i, "the condition must be i1");
        if (ot(1) != in.type || ot(2) != in.type)
          err(i, fmt::format("selects between {} and {}", dtypeName(ot(1)), dtypeName(ot(2))));
        break;
      case ScalarOp::Cast: break;
      }
    }
    for (int32_t r : f_.results)
      if (r < 0 || r >= static_cast<int32_t>(f_.insts.size()))
        badProgram(where_,
                   fmt::format("result refers to instruction {} of {}", r, f_.insts.size()));
  }

  const ScalarFunc &f_;
  std::string where_;
};

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

struct Buffer {
  std::string name;
  std::vector<double> data;
  int64_t bytes = 0;          ///< workspace: its size; input/output: numel * dtype size
  std::optional<DType> dtype; ///< inputs/outputs: fixed; workspace: set by first access
  bool typed = false;         ///< input/output: index in elements, dtype must match
};

/// Where an access happens, for error messages.
struct Site {
  const std::string &kernel;
  const char *what;
};

class Machine {
public:
  Machine(const Program &p, int64_t n, const InterpretOptions &opt)
      : p_(p), n_(n), opt_(opt), sched_(p.runSchedule(std::max<int64_t>(n, 0))), rows_(n) {}

  ProgramRunResult run(const std::vector<RefTensor> &inputs) {
    setupBuffers(inputs);
    if (p_.hasChunkLoop() && (sched_.chunkCols <= 0 || p_.loopCols <= 0))
      badProgram("steps", fmt::format("a chunk loop with chunkCols = {} and loopCols = {}",
                                      sched_.chunkCols, p_.loopCols));
    // The launches exactly as the executor makes them ([Note: the run schedule]).
    for (const LaunchItem &it : p_.expand(sched_)) {
      rows_ = it.rows;
      rowBegin_ = it.rowBegin;
      rowBlock_ = it.rowBlock;
      splits_ = it.splits;
      launch(checkKernel(it.kernel, static_cast<size_t>(it.step)), it.chunkBegin, it.chunkCols,
             it.chunkIndex);
    }
    rows_ = n_;
    rowBegin_ = 0;
    ProgramRunResult res;
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      const TensorSpec &spec = p_.outputs[i];
      RefTensor t(concrete(spec.shape), spec.dtype);
      t.data = out_[i].data;
      if (opt_.roundOutputs)
        for (double &x : t.data)
          x = roundToDType(x, spec.dtype);
      res.outputs.push_back(std::move(t));
    }
    const Buffer &err = ws_[kErrorBuffer];
    res.badRow = static_cast<int64_t>(err.data[0]);
    res.badValue = static_cast<int64_t>(err.data[1]);
    return res;
  }

private:
  std::vector<int64_t> concrete(const std::vector<int64_t> &shape) const {
    std::vector<int64_t> s;
    for (int64_t d : shape)
      s.push_back(d == -1 ? n_ : d);
    return s;
  }

  void setupBuffers(const std::vector<RefTensor> &inputs) {
    LCEJIT_CHECK_ARG(n_ >= 0, "interpretProgram: N must be >= 0, got {}", n_);
    LCEJIT_CHECK_ARG(inputs.size() == p_.inputs.size(),
                     "interpretProgram: program '{}' takes {} inputs, got {}", p_.name,
                     p_.inputs.size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorSpec &spec = p_.inputs[i];
      const RefTensor &t = inputs[i];
      std::vector<int64_t> want = concrete(spec.shape);
      LCEJIT_CHECK_ARG(t.dtype == spec.dtype, "interpretProgram: input {} '{}' must be {}, got {}",
                       i, spec.name, dtypeName(spec.dtype), describe(t));
      LCEJIT_CHECK_ARG(t.shape == want,
                       "interpretProgram: input {} '{}' must have shape {} (N = {}), got {}", i,
                       spec.name, shapeStr(want), n_, describe(t));
      LCEJIT_CHECK_ARG(static_cast<int64_t>(t.data.size()) == t.numel(),
                       "interpretProgram: input {} '{}' has {} values for shape {}", i, spec.name,
                       t.data.size(), shapeStr(t.shape));
      Buffer b;
      b.name = "input '" + spec.name + "'";
      b.data = t.data;
      b.dtype = spec.dtype;
      b.typed = true;
      b.bytes = t.numel() * dtypeSize(spec.dtype);
      in_.push_back(std::move(b));
    }
    const uint64_t accumulable = accumulableOutputs(p_);
    for (size_t i = 0; i < p_.outputs.size() && i < 64; ++i)
      if ((opt_.accumulateOutputs >> i & 1) && !(accumulable >> i & 1))
        LCEJIT_CHECK_ARG(false,
                         "interpretProgram: output {} '{}' of program '{}' cannot be "
                         "accumulated into (it is not written by GemmDLhs/GemmDRhs/Cast)",
                         i, p_.outputs[i].name, p_.name);
    LCEJIT_CHECK_ARG(p_.outputs.size() >= 64 || (opt_.accumulateOutputs >> p_.outputs.size()) == 0,
                     "interpretProgram: accumulate mask 0x{:x} names outputs program '{}' does "
                     "not have ({} outputs)",
                     opt_.accumulateOutputs, p_.name, p_.outputs.size());
    for (size_t oi = 0; oi < p_.outputs.size(); ++oi) {
      const TensorSpec &spec = p_.outputs[oi];
      Buffer b;
      b.name = "output '" + spec.name + "'";
      int64_t numel = RefTensor::numelOf(concrete(spec.shape));
      b.data.assign(static_cast<size_t>(numel), opt_.poison ? kNaN : 0.0);
      if (accumulates(static_cast<int32_t>(oi))) {
        LCEJIT_CHECK_ARG(oi < opt_.initialOutputs.size(),
                         "interpretProgram: output {} '{}' accumulates but initialOutputs has "
                         "{} tensors",
                         oi, spec.name, opt_.initialOutputs.size());
        const RefTensor &t = opt_.initialOutputs[oi];
        LCEJIT_CHECK_ARG(t.dtype == spec.dtype && t.shape == concrete(spec.shape) &&
                             static_cast<int64_t>(t.data.size()) == numel,
                         "interpretProgram: initialOutputs[{}] ('{}') must be {} {} (N = {}), "
                         "got {}",
                         oi, spec.name, dtypeName(spec.dtype), shapeStr(concrete(spec.shape)),
                         n_, describe(t));
        b.data = t.data;
      }
      b.dtype = spec.dtype;
      b.typed = true;
      b.bytes = numel * dtypeSize(spec.dtype);
      out_.push_back(std::move(b));
    }
    if (p_.workspace.size() < 2)
      badProgram("workspace", "buffers 0 (scalar slots) and 1 (error word) are missing");
    for (const BufferSpec &spec : p_.workspace) {
      Buffer b;
      b.name = "workspace '" + spec.name + "'";
      b.bytes = bufferBytes(spec, n_, sched_.rowsPerBlock, sched_.chunkCols);
      if (b.bytes < 0)
        badProgram(b.name, fmt::format("negative size {}", b.bytes));
      bool zero = spec.init == BufferInit::Zero || !opt_.poison;
      b.data.assign(static_cast<size_t>(b.bytes), zero ? 0.0 : kNaN);
      ws_.push_back(std::move(b));
    }
    if (p_.workspace[kScalarSlotsBuffer].init != BufferInit::Zero)
      badProgram("workspace 0", "the scalar slots must be zero-initialized");
    if (p_.workspace[kErrorBuffer].init != BufferInit::Zero)
      badProgram("workspace 1", "the error word must be zero-initialized");
    if (ws_[kScalarSlotsBuffer].bytes < 8 * int64_t(p_.numScalarSlots))
      badProgram("workspace 0", fmt::format("{} bytes hold fewer than the {} scalar slots",
                                            ws_[kScalarSlotsBuffer].bytes, p_.numScalarSlots));
    if (ws_[kErrorBuffer].bytes < 16)
      badProgram("workspace 1", "the error word needs 16 bytes");
    ws_[kScalarSlotsBuffer].dtype = DType::F64;
    ws_[kErrorBuffer].dtype = DType::I64;
  }

  const Kernel &checkKernel(int32_t k, size_t step) const {
    if (k < 0 || k >= static_cast<int32_t>(p_.kernels.size()))
      badProgram(fmt::format("step {}", step),
                 fmt::format("kernel index {} of {}", k, p_.kernels.size()));
    return p_.kernels[static_cast<size_t>(k)];
  }

  Buffer &buffer(const BufferRef &ref, const Site &site) {
    std::vector<Buffer> *space = ref.space == Space::Input    ? &in_
                                 : ref.space == Space::Output ? &out_
                                                              : &ws_;
    if (ref.index < 0 || ref.index >= static_cast<int32_t>(space->size()))
      badProgram(site.kernel, fmt::format("{} refers to {} buffer {} of {}", site.what,
                                          spaceName(ref.space), ref.index, space->size()));
    return (*space)[static_cast<size_t>(ref.index)];
  }

  /// Checks an access of element `index` as `dtype` and returns the value's slot.
  double &element(const BufferRef &ref, int64_t index, DType dtype, const Site &site) {
    Buffer &b = buffer(ref, site);
    if (b.typed) {
      if (dtype != *b.dtype)
        badProgram(site.kernel, fmt::format("{} accesses {} ({}) as {}", site.what, b.name,
                                            dtypeName(*b.dtype), dtypeName(dtype)));
    } else {
      if (!b.dtype)
        b.dtype = dtype;
      else if (*b.dtype != dtype)
        badProgram(site.kernel, fmt::format("{} accesses {} as {}, but it holds {}", site.what,
                                            b.name, dtypeName(dtype), dtypeName(*b.dtype)));
    }
    int64_t size = dtypeSize(dtype);
    if (rowBegin_ > 0 && index >= 0) {
      // Inside a row block, buffers indexed by the global row start at its first row.
      int64_t stride = p_.rowStrideBytes(ref);
      if (stride % size != 0)
        badProgram(site.kernel, fmt::format("{}: a row of {} ({} bytes) is not a whole number "
                                            "of {}", site.what, b.name, stride, dtypeName(dtype)));
      index += rowBegin_ * (stride / size);
    }
    if (index < 0 || (index + 1) * size > b.bytes)
      badProgram(
          site.kernel,
          fmt::format("{} accesses element {} ({} bytes each) of {}, which has {} bytes at N = {}",
                      site.what, index, size, b.name, b.bytes, n_));
    return b.data[static_cast<size_t>(index)];
  }

  double read(const BufferRef &ref, int64_t index, DType dtype, const Site &site) {
    double v = element(ref, index, dtype, site);
    // Unwritten memory is NaN (poison): a float read propagates it to the outputs, an
    // integer read has no NaN to carry it, so it is reported here.
    if (!isFloat(dtype) && std::isnan(v))
      badProgram(site.kernel, fmt::format("{} reads element {} of {} before anything wrote it",
                                          site.what, index, buffer(ref, site).name));
    return v;
  }

  void write(const BufferRef &ref, int64_t index, DType dtype, double v, const Site &site) {
    element(ref, index, dtype, site) = isFloat(dtype) ? v : roundToDType(v, dtype);
  }

  double &slot(int32_t s, const Site &site) {
    if (s < 0 || s >= p_.numScalarSlots)
      badProgram(site.kernel,
                 fmt::format("{} uses scalar slot {} of {}", site.what, s, p_.numScalarSlots));
    return element(BufferRef{Space::Workspace, kScalarSlotsBuffer}, s, DType::F64, site);
  }

  //===--------------------------------------------------------------------===//
  // Operands
  //===--------------------------------------------------------------------===//

  struct Point {
    int64_t row = 0, col = 0;
    double acc = 0.0;
    bool rowValid = true; ///< false: a StoreScalar evaluation; row operands read 0
  };

  static bool isRowOperand(const Operand &o) {
    return o.kind == Operand::Kind::Row || o.kind == Operand::Kind::Partials ||
           o.kind == Operand::Kind::RowIndex;
  }

  /// The value of operand `o` at `pt`, converted to `type`.
  double operand(const Operand &o, DType type, const Point &pt, const std::string &kernel,
                 bool gemm) {
    Site site{kernel, "an operand"};
    auto needGemm = [&]() {
      if (!gemm)
        badProgram(kernel, fmt::format("operand kind {} is for GEMM epilogues only", int(o.kind)));
    };
    double v = 0.0;
    DType from = o.dtype;
    switch (o.kind) {
    case Operand::Kind::Row: v = pt.rowValid ? read(o.buf, pt.row, o.dtype, site) : 0.0; break;
    case Operand::Kind::Col:
      needGemm();
      v = read(o.buf, pt.col, o.dtype, site);
      break;
    case Operand::Kind::Scalar:
      if (o.buf.valid()) {
        v = read(o.buf, 0, o.dtype, site);
      } else {
        v = slot(o.slot, site);
        from = DType::F64;
      }
      break;
    case Operand::Kind::Partials:
      v = pt.rowValid ? partials(o, pt.row, kernel) : 0.0;
      from = DType::F32;
      break;
    case Operand::Kind::Acc:
      needGemm();
      v = pt.acc;
      from = DType::F32;
      break;
    case Operand::Kind::ColIndex:
      needGemm();
      v = static_cast<double>(pt.col);
      from = DType::I64;
      break;
    case Operand::Kind::RowIndex:
      v = pt.rowValid ? static_cast<double>(pt.row) : 0.0;
      from = DType::I64;
      break;
    }
    return convert(v, from, type);
  }

  /// Combines the partials of `row` over all splits (docs/program.md, Operands).
  double partials(const Operand &o, int64_t row, const std::string &kernel) {
    if (o.partialsOf < 0 || o.partialsOf >= static_cast<int32_t>(p_.kernels.size()) ||
        p_.kernels[static_cast<size_t>(o.partialsOf)].kind() != KernelKind::GemmReduce)
      badProgram(kernel,
                 fmt::format("a partials operand names kernel {}, not a GemmReduce", o.partialsOf));
    const auto &g = std::get<GemmReduceKernel>(p_.kernels[static_cast<size_t>(o.partialsOf)].body);
    if (!(g.partials == o.buf))
      badProgram(kernel, "a partials operand reads another buffer than its kernel writes");
    auto kind = static_cast<ReduceKind>(o.reduce);
    if (o.component != Operand::Component::Value && kind != ReduceKind::LogSumExp)
      badProgram(kernel, "a partials component other than the value of a logsumexp partial");
    bool found = false;
    for (size_t j = 0; j < g.reductions.size(); ++j)
      found |= g.slotOf(static_cast<int32_t>(j)) == o.slot && g.reductions[j] == kind;
    if (!found)
      badProgram(kernel, fmt::format("no {} result of kernel {} starts at partial slot {}",
                                     o.reduce >= 0 && o.reduce <= 2 ? reduceKindName(kind) : "?",
                                     o.partialsOf, o.slot));
    Site site{kernel, "a partials operand"};
    int64_t spr = g.slotsPerRow();
    auto at = [&](int64_t s, int32_t k) {
      return read(o.buf, (row * splits_ + s) * spr + o.slot + k, DType::F32, site);
    };
    switch (kind) {
    case ReduceKind::Sum: {
      Sum sum;
      for (int64_t s = 0; s < splits_; ++s)
        sum.add(at(s, 0));
      return sum.value();
    }
    case ReduceKind::Max: {
      double m = -kInf;
      for (int64_t s = 0; s < splits_; ++s)
        m = maxNaN(m, at(s, 0));
      return m;
    }
    case ReduceKind::LogSumExp: {
      LsePartial p;
      for (int64_t s = 0; s < splits_; ++s)
        p = LsePartial::combine(p, LsePartial{at(s, 0), at(s, 1)});
      switch (o.component) {
      case Operand::Component::Value: return p.value();
      case Operand::Component::Max: return p.m;
      case Operand::Component::RestSum: return p.t;
      }
      return p.value();
    }
    }
    return kNaN;
  }

  void checkArgs(const FuncEval &f, const std::vector<Operand> &args, const std::string &kernel) {
    if (f.func().numArgs() > static_cast<int32_t>(args.size()))
      badProgram(kernel,
                 fmt::format("the function reads {} arguments but the kernel has {} operands",
                             f.func().numArgs(), args.size()));
  }

  //===--------------------------------------------------------------------===//
  // Kernels
  //===--------------------------------------------------------------------===//

  void launch(const Kernel &k, int64_t chunkBegin, int64_t chunkCols, int64_t chunkIndex) {
    int32_t idx = static_cast<int32_t>(&k - p_.kernels.data());
    LaunchDims d = p_.launchDims(idx, rows_, chunkCols, splits_);
    if (d.grid[0] == 0 || d.grid[1] == 0 || d.grid[2] == 0)
      return; // a launch with a zero grid dimension is skipped
    std::visit(
        [&](const auto &body) {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, RowKernel>)
            rowKernel(k.name, body);
          else if constexpr (std::is_same_v<T, GemmReduceKernel>)
            gemmReduce(k.name, body);
          else if constexpr (std::is_same_v<T, GemmDzKernel>)
            gemmDz(k.name, body, chunkBegin, chunkCols);
          else if constexpr (std::is_same_v<T, GemmDLhsKernel>)
            gemmDLhs(k.name, body, chunkBegin, chunkCols, chunkIndex);
          else if constexpr (std::is_same_v<T, GemmDRhsKernel>)
            gemmDRhs(k.name, body, chunkBegin, chunkCols);
          else if constexpr (std::is_same_v<T, CastKernel>)
            castKernel(k.name, body);
          else if constexpr (std::is_same_v<T, DzFormKernel>)
            dzForm(k.name, body);
          else if constexpr (std::is_same_v<T, TargetCorrectionKernel>)
            targetCorrection(k.name, body, chunkBegin, chunkCols);
          else if constexpr (std::is_same_v<T, RowDotKernel>)
            rowDot(k.name, body);

        },
        k.body);
  }

  void rowKernel(const std::string &name, const RowKernel &k) {
    FuncEval f(k.func, "kernel '" + name + "'");
    checkArgs(f, k.args, name);
    using SK = RowKernel::Sink::Kind;
    // Static rules: StoreScalar results never depend on row operands, and no scalar slot
    // is both read and written by one kernel (that would be a race on the device).
    std::vector<int32_t> writtenSlots;
    for (const RowKernel::Sink &s : k.sinks) {
      f.checkResult(s.result, "a sink");
      if (s.kind == SK::CheckRow)
        f.checkResult(s.aux, "a check's value");
      if (s.kind == SK::StoreScalar && f.resultDependsOn(s.result, [&](int32_t a) {
            return isRowOperand(k.args[static_cast<size_t>(a)]);
          }))
        badProgram(
            name, fmt::format("a StoreScalar sink (result {}) depends on a row operand", s.result));
      if ((s.kind == SK::StoreScalar && !s.buf.valid()) || s.kind == SK::SumScalar)
        writtenSlots.push_back(s.slot);
    }
    for (const Operand &o : k.args)
      if (o.kind == Operand::Kind::Scalar && !o.buf.valid() &&
          std::find(writtenSlots.begin(), writtenSlots.end(), o.slot) != writtenSlots.end())
        badProgram(name,
                   fmt::format("scalar slot {} is read and written by the same kernel", o.slot));

    std::vector<double> v;
    auto eval = [&](const Point &pt) {
      f.run([&](int32_t a,
                DType t) { return operand(k.args[static_cast<size_t>(a)], t, pt, name, false); },
            n_, v);
    };
    for (int64_t r = 0; r < rows_; ++r) {
      Point pt;
      pt.row = r;
      eval(pt);
      for (const RowKernel::Sink &s : k.sinks) {
        double x = f.result(v, s.result);
        Site site{name, "a sink"};
        switch (s.kind) {
        case SK::StoreRow: write(s.buf, r, s.dtype, x, site); break;
        case SK::SumScalar: slot(s.slot, site) += x; break;
        case SK::CheckRow: {
          double &first = element(BufferRef{Space::Workspace, kErrorBuffer}, 0, DType::I64, site);
          double &value = element(BufferRef{Space::Workspace, kErrorBuffer}, 1, DType::I64, site);
          if (x != 0.0 && first == 0.0) {
            first = static_cast<double>(r + 1);
            value = convert(f.result(v, s.aux), f.resultType(s.aux), DType::I64);
          }
          break;
        }
        case SK::StoreScalar: break;
        }
      }
    }
    // StoreScalar: once, by row 0's thread, also when N == 0 (row operands read 0).
    bool any = std::any_of(k.sinks.begin(), k.sinks.end(),
                           [](const RowKernel::Sink &s) { return s.kind == SK::StoreScalar; });
    if (any) {
      Point pt;
      pt.rowValid = false;
      eval(pt);
      for (const RowKernel::Sink &s : k.sinks) {
        if (s.kind != SK::StoreScalar)
          continue;
        Site site{name, "a StoreScalar sink"};
        double x = f.result(v, s.result);
        if (s.buf.valid())
          write(s.buf, 0, s.dtype, x, site);
        else
          slot(s.slot, site) = x;
      }
    }
  }

  /// acc(r, c) = A[r] · B[c] in fp64.
  double acc(const FusedGemm &g, int64_t r, int64_t c, const Site &site) {
    Sum s;
    for (int64_t p = 0; p < g.k; ++p)
      s.add(read(g.a, r * g.k + p, g.abType, site) * read(g.b, c * g.k + p, g.abType, site));
    return s.value();
  }

  void checkGemm(const std::string &name, const FusedGemm &g) {
    if (g.k <= 0 || g.cols <= 0)
      badProgram(name, fmt::format("k = {} and cols = {} must be positive", g.k, g.cols));
    if (g.tile.bm <= 0 || g.tile.bn <= 0)
      badProgram(name, "tile sizes must be positive");
  }

  void gemmReduce(const std::string &name, const GemmReduceKernel &k) {
    const FusedGemm &g = k.gemm;
    checkGemm(name, g);
    FuncEval f(g.epilogue, "kernel '" + name + "' epilogue");
    checkArgs(f, g.args, name);
    if (k.reductions.size() != g.epilogue.results.size())
      badProgram(name, fmt::format("{} reductions for {} epilogue results", k.reductions.size(),
                                   g.epilogue.results.size()));
    int64_t splits = splits_; // the call's (RunSchedule::splits)
    if (splits < 1)
      badProgram(name, fmt::format("splits = {}", splits));
    int64_t tiles = (g.cols + g.tile.bn - 1) / g.tile.bn;
    int64_t perSplit = (tiles + splits - 1) / splits;
    int64_t spr = k.slotsPerRow();
    Site site{name, "the GEMM"};
    Site psite{name, "a partials store"};
    std::vector<double> v;
    std::vector<std::vector<double>> vals(k.reductions.size());
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t s = 0; s < splits; ++s) {
        int64_t c0 = std::min(s * perSplit * g.tile.bn, g.cols);
        int64_t c1 = std::min((s + 1) * perSplit * g.tile.bn, g.cols);
        for (auto &x : vals)
          x.clear();
        for (int64_t c = c0; c < c1; ++c) {
          Point pt;
          pt.row = r;
          pt.col = c;
          pt.acc = acc(g, r, c, site);
          f.run([&](int32_t a,
                    DType t) { return operand(g.args[static_cast<size_t>(a)], t, pt, name, true); },
                n_, v);
          for (size_t j = 0; j < vals.size(); ++j)
            vals[j].push_back(f.result(v, static_cast<int32_t>(j)));
        }
        for (size_t j = 0; j < vals.size(); ++j) {
          int64_t base = (r * splits + s) * spr + k.slotOf(static_cast<int32_t>(j));
          switch (k.reductions[j]) {
          case ReduceKind::Sum: {
            Sum sum;
            for (double x : vals[j])
              sum.add(x);
            write(k.partials, base, DType::F32, sum.value(), psite);
            break;
          }
          case ReduceKind::Max: {
            double m = -kInf;
            for (double x : vals[j])
              m = maxNaN(m, x);
            write(k.partials, base, DType::F32, m, psite);
            break;
          }
          case ReduceKind::LogSumExp: {
            LsePartial p = LsePartial::of(vals[j]);
            write(k.partials, base, DType::F32, p.m, psite);
            write(k.partials, base + 1, DType::F32, p.t, psite);
            break;
          }
          }
        }
      }
    }
    if (k.stored)
      storeTile(name, k);
  }

  /// [Note: the materialized backward]: values = factor(v) * exp(v - m) per element and
  /// m per (row, column tile), in fp64 (the device rounds values to fp16). The dZ buffer is
  /// accessed as bf16 here and by the backward GEMMs (the interpreter does not round).
  void storeTile(const std::string &name, const GemmReduceKernel &k) {
    const FusedGemm &g = k.gemm;
    const StoredTile &st = *k.stored;
    if (st.tileCols <= 0 || g.cols % st.tileCols != 0)
      badProgram(name, fmt::format("stored tiles of {} columns over {} columns", st.tileCols,
                                   g.cols));
    if (st.lseResult < 0 || st.lseResult >= static_cast<int32_t>(k.reductions.size()) ||
        k.reductions[static_cast<size_t>(st.lseResult)] != ReduceKind::LogSumExp)
      badProgram(name, fmt::format("stored result {} is not a logsumexp", st.lseResult));
    FuncEval f(g.epilogue, "kernel '" + name + "' epilogue");
    FuncEval fac(st.factor, "kernel '" + name + "' stored factor");
    checkArgs(fac, g.args, name);
    if (fac.numResults() != 1)
      badProgram(name, "the stored factor has more than one result");
    Site site{name, "the GEMM"}, vsite{name, "the stored values"};
    const int64_t tiles = g.cols / st.tileCols;
    std::vector<double> v, fv, vals(static_cast<size_t>(st.tileCols));
    if (st.rowScaled) {
      // [Note: row-scaled stored values]: factor(v)·exp(v − C), 0 at the target column;
      // the planner proved v <= C for every input, and a value above it is a planner bug.
      // [Note: a per-row reference]: C = c_r, +inf (0 stored) for a target outside
      // [0, cols); no bound is assumed (a row whose values leave the range is recomputed).
      const bool perRow = st.referenceArg >= 0;
      if (perRow && (st.referenceArg >= static_cast<int32_t>(g.args.size()) ||
                     g.args[static_cast<size_t>(st.referenceArg)].kind != Operand::Kind::Row ||
                     st.excludeArg < 0))
        badProgram(name, "a per-row reference needs a row operand and a target");
      for (int64_t r = 0; r < rows_; ++r)
        for (int64_t c = 0; c < g.cols; ++c) {
          Point pt;
          pt.row = r;
          pt.col = c;
          pt.acc = acc(g, r, c, site);
          f.run([&](int32_t a, DType ty) {
            return operand(g.args[static_cast<size_t>(a)], ty, pt, name, true);
          }, n_, v);
          const double val = f.result(v, st.lseResult);
          const int64_t target =
              st.excludeArg >= 0
                  ? static_cast<int64_t>(operand(g.args[static_cast<size_t>(st.excludeArg)],
                                                 DType::I64, pt, name, true))
                  : -1;
          double ref = st.reference;
          if (perRow) {
            ref = target >= 0 && target < g.cols
                      ? operand(g.args[static_cast<size_t>(st.referenceArg)], DType::F32, pt,
                                name, true)
                      : kInf;
          } else if (val > st.reference + 1e-9 * (1.0 + std::abs(st.reference)) ||
                     val < st.reference - kRowScaledRange -
                               1e-9 * (1.0 + std::abs(st.reference))) {
            badProgram(name, fmt::format("row {}, column {}: the stored value's v = {} lies "
                                         "outside the bound [{}, {}] the plan assumed",
                                         r, c, val, st.reference - kRowScaledRange,
                                         st.reference));
          }
          const bool excluded = target == c;
          pt.acc = val; // the factor's Acc is v
          fac.run([&](int32_t a, DType ty) {
            return operand(g.args[static_cast<size_t>(a)], ty, pt, name, true);
          }, n_, fv);
          const double x = excluded || ref == kInf
                               ? 0.0
                               : fac.result(fv, 0) * std::exp(val - ref);
          write(st.values, r * g.cols + c, DType::BF16,
                opt_.roundDz ? roundToDType(x, DType::BF16) : x, vsite);
        }
      return;
    }
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t t = 0; t < tiles; ++t) {
        // One maximum per tile of the row, the target column left out.
        double m = -kInf;
        for (int64_t j = 0; j < st.tileCols; ++j) {
          Point pt;
          pt.row = r;
          pt.col = t * st.tileCols + j;
          pt.acc = acc(g, r, pt.col, site);
          f.run([&](int32_t a, DType ty) {
            return operand(g.args[static_cast<size_t>(a)], ty, pt, name, true);
          }, n_, v);
          vals[static_cast<size_t>(j)] = f.result(v, st.lseResult);
          const bool excluded =
              st.excludeArg >= 0 &&
              static_cast<int64_t>(operand(g.args[static_cast<size_t>(st.excludeArg)],
                                           DType::I64, pt, name, true)) == pt.col;
          if (!excluded)
            m = maxNaN(m, vals[static_cast<size_t>(j)]);
        }
        // The reference of the tile: its maximum without the target column, 0 if none.
        const double base = m == -kInf ? 0.0 : m;
        write(st.tileMax, r * tiles + t, DType::F32, base, vsite);
        for (int64_t j = 0; j < st.tileCols; ++j) {
          Point pt;
          pt.row = r;
          pt.col = t * st.tileCols + j;
          pt.acc = vals[static_cast<size_t>(j)]; // the factor's Acc is v
          fac.run([&](int32_t a, DType ty) {
            return operand(g.args[static_cast<size_t>(a)], ty, pt, name, true);
          }, n_, fv);
          write(st.values, r * g.cols + pt.col, DType::BF16,
                fac.result(fv, 0) * std::exp(pt.acc - base), vsite);
        }
      }
  }

  void dzForm(const std::string &name, const DzFormKernel &k) {
    if (k.rowScaled && k.scaleValues) {
      // [Note: values scaled in place]: each stored value times its row's scale, rounded
      // to bf16 again (the ordinary layout: the interpreter keeps no slabs).
      Site site{name, "the values scaled in place"};
      if (!k.rowScale.valid() || !k.dz.valid() || k.aScaled.valid() || k.residual.valid())
        badProgram(name, "scaling the values in place needs the values and a row scale, and "
                         "nothing else");
      for (int64_t r = 0; r < rows_; ++r) {
        const double s = read(k.rowScale, r, DType::F32, site);
        for (int64_t c = 0; c < k.cols; ++c) {
          double &x = element(k.dz, r * k.cols + c, DType::BF16, site);
          const double y = s * x;
          x = opt_.roundDz ? roundToDType(y, DType::BF16) : y;
        }
      }
      return;
    }
    if (k.rowScaled) {
      // [Note: row-scaled stored values]: per row; the stored values stay.
      Site site{name, "the row scale"};
      if ((!k.aOnly && (!k.rowScale.valid() || !k.residual.valid())) || !k.target.valid() ||
          (k.aOnly && !k.aScaled.valid()))
        badProgram(name, "the row-scaled form needs a row scale, a residual and a target (or "
                         "only a scaled A)");
      if (k.referenceRow.valid() != (k.recompute.valid() || k.aOnly))
        badProgram(name, "a per-row reference and the recompute flags go together");
      for (int64_t r = 0; r < rows_; ++r) {
        const double lse = read(k.lse, r, DType::F32, site);
        const double scale = read(k.scale, r, DType::F32, site);
        const int64_t t = static_cast<int64_t>(read(k.target, r, k.targetType, site));
        double s = scale * std::exp(k.reference - lse);
        if (k.referenceRow.valid()) {
          // [Note: a per-row reference]: the rows the stored values cannot hold are
          // recomputed (row scale 1), the others scaled by exp(c_r − lse).
          const double c = read(k.referenceRow, r, DType::F32, site);
          const bool inside = t >= 0 && t < k.cols;
          const bool redo = inside ? !(lse - c <= kRowScaledRange) : scale != 0.0;
          if (!k.aOnly)
            write(k.recompute, r, DType::I32, redo ? 1.0 : 0.0, site);
          s = redo ? 1.0 : inside ? scale * std::exp(c - lse) : 0.0;
        }
        if (!k.aOnly) {
          write(k.rowScale, r, DType::F32, s, site);
          if (t >= 0 && t < k.cols)
            write(k.residual, r, DType::F32, read(k.targetDz, r, DType::F32, site), site);
        }
        // [Note: a scaled A in column parts]: columns [aCol0, aCol0 + k) of A.
        const int64_t ald = k.aLd > 0 ? k.aLd : k.k;
        if (ald < k.aCol0 + k.k)
          badProgram(name, fmt::format("A columns [{}, {}) of rows {} wide", k.aCol0,
                                       k.aCol0 + k.k, ald));
        if (k.aScaled.valid())
          for (int64_t j = 0; j < k.k; ++j) {
            const double x = s * read(k.a, r * ald + k.aCol0 + j, k.aType, site);
            write(k.aScaled, r * k.k + j, DType::BF16,
                  opt_.roundDz ? roundToDType(x, DType::BF16) : x, site);
          }
      }
      return;
    }
    if (k.tileCols <= 0 || k.cols % k.tileCols != 0)
      badProgram(name, fmt::format("tiles of {} columns over {} columns", k.tileCols, k.cols));
    Site site{name, "the dZ pass"};
    const int64_t tiles = k.cols / k.tileCols;
    for (int64_t r = 0; r < rows_; ++r) {
      const double lse = read(k.lse, r, DType::F32, site);
      const double scale = read(k.scale, r, DType::F32, site);
      const int64_t t = k.target.valid()
                            ? static_cast<int64_t>(read(k.target, r, k.targetType, site))
                            : -1;
      for (int64_t c = 0; c < k.cols; ++c) {
        double &x = element(k.dz, r * k.cols + c, DType::BF16, site);
        const double dz =
            c == t ? read(k.targetDz, r, DType::F32, site)
                   : x * scale *
                         std::exp(read(k.tileMax, r * tiles + c / k.tileCols, DType::F32, site) -
                                  lse);
        x = opt_.roundDz ? roundToDType(dz, DType::BF16) : dz;
        if (c == t && k.residual.valid())
          write(k.residual, r, DType::F32, dz - x, site);
      }
    }
  }

  void checkChunk(const std::string &name, int64_t begin, int64_t cols, int64_t total) {
    if (begin < 0 || cols < 0 || begin + cols > total)
      badProgram(name,
                 fmt::format("chunk [{}, {}) outside the {} columns", begin, begin + cols, total));
  }

  DType dzType(DzFormat f) const { return f == DzFormat::F32 ? DType::F32 : DType::BF16; }

  void gemmDz(const std::string &name, const GemmDzKernel &k, int64_t begin, int64_t cols) {
    const FusedGemm &g = k.gemm;
    checkGemm(name, g);
    checkChunk(name, begin, cols, g.cols);
    FuncEval f(g.epilogue, "kernel '" + name + "' epilogue");
    checkArgs(f, g.args, name);
    if (g.epilogue.results.size() != 1)
      badProgram(name,
                 fmt::format("the dZ epilogue has {} results, not 1", g.epilogue.results.size()));
    if (k.format == DzFormat::SplitBF16 && !k.dzLo.valid())
      badProgram(name, "SplitBF16 needs a lo buffer");
    Site site{name, "the GEMM"};
    Site dsite{name, "the dZ store"};
    DType dt = dzType(k.format);
    std::vector<double> v;
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        // [Note: a per-row reference]: the flagged rows only.
        if (k.rowFilter.valid() && read(k.rowFilter, r, DType::I32, dsite) == 0.0)
          break;
        Point pt;
        pt.row = r;
        pt.col = begin + c;
        pt.acc = acc(g, r, begin + c, site);
        f.run([&](int32_t a,
                  DType t) { return operand(g.args[static_cast<size_t>(a)], t, pt, name, true); },
              n_, v);
        double dz = f.result(v, 0);
        // fp64, unrounded: hi carries all of dz and lo is 0 (the split is a device detail).
        // One bf16 operand is rounded as on the device when asked (roundDz).
        const double stored =
            k.format == DzFormat::BF16 && opt_.roundDz ? roundToDType(dz, DType::BF16) : dz;
        write(k.dz, r * cols + c, dt, stored, dsite);
        if (k.format == DzFormat::SplitBF16)
          write(k.dzLo, r * cols + c, dt, 0.0, dsite);
        if (k.residual.valid() && targetOf(k.residual, r, dsite) == begin + c)
          write(k.residual.buf, r, DType::F32, dz - stored, dsite);
      }
  }

  /// t_r of a residual's row (global column index; may lie outside [0, cols)).
  int64_t targetOf(const Residual &res, int64_t r, const Site &site) {
    return static_cast<int64_t>(read(res.target, r, res.targetType, site));
  }

  /// [Note: the target-column residual]: out[t][j] += the row-ordered sum of residual[r] *
  /// a[r][j] over the launch's rows r with t_r = t.
  void targetCorrection(const std::string &name, const TargetCorrectionKernel &k,
                        int64_t begin, int64_t cols) {
    Site site{name, "the target-column correction"};
    if (k.k <= 0 || k.cols <= 0)
      badProgram(name, fmt::format("k = {}, cols = {}", k.k, k.cols));
    if (k.findGroups || k.groups.valid()) {
      // [Note: a group's first and last rows]: the groups only say where the kernels find
      // a group's rows; the sums below find them by their targets, the same rows in the
      // same order, so a find adds nothing here.
      if (!k.groups.valid() || k.sums.valid() || (k.findGroups && k.out.valid()) ||
          (!k.findGroups && !k.out.valid()))
        badProgram(name, "groups are found for, and read by, an f32 correction with an out");
      if (k.findGroups)
        return;
    }
    if (k.sums.valid()) {
      // [Note: target group sums]: per block of groupRows rows, the groups of the
      // chunk's targets; the leader (first row) holds the sum and is the block's head.
      if (k.out.valid() || !k.sums.head.valid() || k.sums.cols != k.cols)
        badProgram(name, "group sums write sums and heads, no out, over the loop's columns");
      for (int64_t r = 0; r < rows_; ++r) {
        const int64_t t = targetOf(k.residual, r, site);
        if (t < 0 || t >= k.cols || t < begin || t >= begin + cols)
          continue;
        const int64_t gr = k.sums.groupRows;
        if (gr <= 0)
          badProgram(name, fmt::format("group rows = {}", gr));
        const int64_t blk = r / gr;
        const int64_t lo = blk * gr;
        const int64_t hi = std::min(rows_, lo + gr);
        bool leader = true;
        for (int64_t q = lo; q < r && leader; ++q)
          leader = targetOf(k.residual, q, site) != t;
        if (!leader)
          continue;
        std::vector<int64_t> members;
        for (int64_t q = r; q < hi; ++q)
          if (targetOf(k.residual, q, site) == t)
            members.push_back(q);
        for (int64_t j = 0; j < k.k; ++j) {
          Sum s;
          for (int64_t m : members)
            s.add(read(k.residual.buf, m, DType::F32, site) *
                  read(k.a, m * k.k + j, k.aType, site));
          write(k.sums.sums, r * k.k + j, DType::BF16, s.value(), site);
        }
        write(k.sums.head, blk * k.cols + t, DType::I32, static_cast<double>(r), site);
      }
      return;
    }
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t t = targetOf(k.residual, r, site);
      if (t < 0 || t >= k.cols)
        continue;
      const double res = read(k.residual.buf, r, DType::F32, site);
      for (int64_t j = 0; j < k.k; ++j)
        element(k.out, t * k.k + j, DType::F32, site) +=
            res * read(k.a, r * k.k + j, k.aType, site);
    }
  }

  /// [Note: the exact target logit]: out[r] = A[r]·B[t_r] (fp64 here, as every sum), 0
  /// for rows whose target is outside [0, cols).
  void rowDot(const std::string &name, const RowDotKernel &k) {
    Site site{name, "the target logit's dot product"};
    if (k.k <= 0 || k.cols <= 0)
      badProgram(name, fmt::format("k = {}, cols = {}", k.k, k.cols));
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t t = static_cast<int64_t>(read(k.target, r, k.targetType, site));
      double s = 0.0;
      if (t >= 0 && t < k.cols)
        for (int64_t j = 0; j < k.k; ++j)
          s += read(k.a, r * k.k + j, k.abType, site) * read(k.b, t * k.k + j, k.abType, site);
      element(k.out, r, DType::F32, site) = s;
    }
  }

  double dzAt(const BufferRef &hi, const BufferRef &lo, DzFormat fmtDz, int64_t index,
              const Site &site) {
    double x = read(hi, index, dzType(fmtDz), site);
    if (fmtDz == DzFormat::SplitBF16)
      x += read(lo, index, dzType(fmtDz), site);
    return x;
  }

  void gemmDLhs(const std::string &name, const GemmDLhsKernel &k, int64_t begin, int64_t cols,
                int64_t chunkIndex) {
    Site site{name, "the dLhs GEMM"};
    if (k.k <= 0)
      badProgram(name, fmt::format("k = {}", k.k));
    if (k.format == DzFormat::SplitBF16 && !k.dzLo.valid())
      badProgram(name, "SplitBF16 needs a lo buffer");
    const bool lastChunk = begin + cols == k.cols;
    if (k.residual.valid() && k.cols <= 0)
      badProgram(name, fmt::format("a residual with cols = {}", k.cols));
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t j = 0; j < k.k; ++j) {
        Sum s;
        for (int64_t c = 0; c < cols; ++c)
          s.add(dzAt(k.dz, k.dzLo, k.format, r * cols + c, site) *
                read(k.b, (begin + c) * k.k + j, k.bType, site));
        if (k.rowScale.valid()) {
          // [Note: row-scaled stored values]: the row's sum times its scale.
          const double scaled = s.value() * read(k.rowScale, r, DType::F32, site);
          s = Sum();
          s.add(scaled);
        }
        if (k.residual.valid() && lastChunk) {
          // [Note: the target-column residual]: the rank-1 update, in the f32 sum.
          const int64_t t = targetOf(k.residual, r, site);
          if (t >= 0 && t < k.cols)
            s.add(read(k.residual.buf, r, DType::F32, site) * read(k.b, t * k.k + j, k.bType, site));
        }
        if (k.outType != DType::F32) {
          // Written once, rounded once on the device: one chunk of all columns only.
          if (chunkIndex != 0 || cols != p_.loopCols)
            badProgram(name, fmt::format("a {} dLhs output in a loop of more than one chunk",
                                         dtypeName(k.outType)));
          if (accumulatesInto(k.out))
            element(k.out, r * k.k + j, k.outType, site) += s.value();
          else
            write(k.out, r * k.k + j, k.outType, s.value(), site);
          continue;
        }
        double &out = element(k.out, r * k.k + j, DType::F32, site);
        out = chunkIndex == 0 && !accumulatesInto(k.out) ? s.value() : out + s.value();
      }
  }

  void gemmDRhs(const std::string &name, const GemmDRhsKernel &k, int64_t begin, int64_t cols) {
    Site site{name, "the dRhs GEMM"};
    if (k.k <= 0)
      badProgram(name, fmt::format("k = {}", k.k));
    if (k.format == DzFormat::SplitBF16 && !k.dzLo.valid())
      badProgram(name, "SplitBF16 needs a lo buffer");
    // [Note: a scaled A in column parts]: columns [outCol0, outCol0 + k) of rows ld wide.
    const int64_t ld = k.outLd > 0 ? k.outLd : k.k;
    if (k.outCol0 < 0 || k.outCol0 + k.k > ld)
      badProgram(name, fmt::format("output columns [{}, {}) of rows {} wide", k.outCol0,
                                   k.outCol0 + k.k, ld));
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t j = 0; j < k.k; ++j) {
        Sum s;
        for (int64_t r = 0; r < rows_; ++r)
          s.add(dzAt(k.dz, k.dzLo, k.format, r * cols + c, site) *
                read(k.a, r * k.k + j, k.aType, site));
        if (k.targetSums.valid()) {
          // [Note: target group sums]: the blocks whose head names a leader of this
          // column's target, in block order. Unwritten heads read NaN: no leader.
          const TargetSums &ts = k.targetSums;
          if (ts.groupRows <= 0)
            badProgram(name, fmt::format("group rows = {}", ts.groupRows));
          for (int64_t b = 0; b * ts.groupRows < rows_; ++b) {
            const double g = element(ts.head, b * ts.cols + begin + c, DType::I32, site);
            const int64_t lo = b * ts.groupRows;
            if (std::isnan(g) || g < static_cast<double>(lo) ||
                g >= static_cast<double>(std::min(rows_, lo + ts.groupRows)))
              continue;
            const int64_t gr = static_cast<int64_t>(g);
            if (static_cast<int64_t>(read(ts.target, gr, ts.targetType, site)) != begin + c)
              continue;
            s.add(read(ts.sums, gr * k.k + j, DType::BF16, site));
          }
        }
        const int64_t at = (begin + c) * ld + k.outCol0 + j;
        if (k.accumulateRowBlocks && rowBlock_ > 0 && k.outType != DType::F32)
          badProgram(name, "row blocks accumulate into an f32 dRhs only");
        if ((k.accumulateRowBlocks && rowBlock_ > 0) || accumulatesInto(k.out)) {
          // The device widens the old value, adds in f32 and rounds once.
          element(k.out, at, k.outType, site) += s.value();
        } else {
          write(k.out, at, k.outType, s.value(), site);
        }
      }
  }

  void castKernel(const std::string &name, const CastKernel &k) {
    Site site{name, "the cast"};
    const bool add = accumulatesInto(k.out);
    for (int64_t i = 0; i < (k.rows >= 0 ? k.rows : rows_) * k.k; ++i) {
      const double v = read(k.in, i, DType::F32, site);
      if (add)
        element(k.out, i, k.outType, site) += v;
      else
        write(k.out, i, k.outType, v, site);
    }
  }

  /// Whether output `index` starts from its initial value and is added to.
  bool accumulates(int32_t index) const {
    return index >= 0 && index < 64 && (opt_.accumulateOutputs >> index & 1);
  }
  bool accumulatesInto(const BufferRef &b) const {
    return b.space == Space::Output && accumulates(b.index);
  }

  const Program &p_;
  int64_t n_;
  InterpretOptions opt_;
  RunSchedule sched_;
  int32_t splits_ = 1; ///< the current launch's partial entries per row
  int64_t rows_ = 0, rowBegin_ = 0, rowBlock_ = 0; ///< the current launch's row block
  std::vector<Buffer> in_, out_, ws_;
};

} // namespace

ProgramRunResult interpretProgram(const Program &program, const std::vector<RefTensor> &inputs,
                                  int64_t n, const InterpretOptions &options) {
  Machine m(program, n, options);
  return m.run(inputs);
}

std::vector<double> evaluateScalarFunc(const ScalarFunc &func, const std::vector<double> &args,
                                       int64_t rowCount) {
  FuncEval f(func, "evaluateScalarFunc");
  LCEJIT_CHECK_ARG(func.numArgs() <= static_cast<int32_t>(args.size()),
                   "evaluateScalarFunc: the function reads {} arguments, got {}", func.numArgs(),
                   args.size());
  std::vector<double> v;
  f.run([&](int32_t a, DType) { return args[static_cast<size_t>(a)]; }, rowCount, v);
  std::vector<double> out;
  for (int32_t r = 0; r < f.numResults(); ++r)
    out.push_back(f.result(v, r));
  return out;
}

} // namespace lcejit::ref
