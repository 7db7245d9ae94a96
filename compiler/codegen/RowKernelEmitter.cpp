//===- RowKernelEmitter.cpp - RowKernel -> functor + row_kernel wrapper
//----===//
//
// Generated shape (docs/codegen.md):
//
//   struct <name>_row_fn {
//     <every kernel parameter, same names and types>;
//     __device__ void run(long long row, bool valid, bool scalar_thread) const
//     {
//       <operands a<i>: row operands only when valid, else 0>
//       <the ScalarFunc: const T v<i> = ...;>
//       if (valid) { <StoreRow / SumScalar / CheckRow sinks, in order> }
//       if (scalar_thread) { <StoreScalar sinks, in order> }
//     }
//   };
//   extern "C" __global__ void <name>(<params>) {
//     if (!lcejit::launch_ok(<error word>, <kernel index>, 0, 256, <grid>, 1)) return;
//     lcejit::row_kernel(fn, n);
//   }
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/KernelEmitters.h"
#include "compiler/codegen/ScalarEmitter.h"
#include "compiler/support/Check.h"

#include <fmt/ranges.h>

#include <map>
#include <tuple>

namespace lcejit::codegen::detail {

using plan::BufferRef;
using plan::Operand;
using plan::Param;
using plan::RowKernel;
using plan::Space;

static std::string zeroOf(DType t) {
  switch (valueTypeOf(t)) {
  case DType::F32:
    return "0.0f";
  case DType::F64:
    return "0.0";
  case DType::I32:
    return "0";
  case DType::I64:
    return "0LL";
  case DType::I1:
    return "false";
  default:
    break;
  }
  LCEJIT_CHECK(false, "no zero of {}", dtypeName(t));
  return "";
}

static const char *sinkKindName(RowKernel::Sink::Kind k) {
  switch (k) {
  case RowKernel::Sink::Kind::StoreRow:
    return "store_row";
  case RowKernel::Sink::Kind::StoreScalar:
    return "store_scalar";
  case RowKernel::Sink::Kind::SumScalar:
    return "sum_scalar";
  case RowKernel::Sink::Kind::CheckRow:
    return "check_row";
  }
  return "?";
}

/// The partials-combining helper of lcejit_reduce.cuh for a ReduceKind.
static const char *partialsHelper(const Operand &o) {
  const bool value = o.component == Operand::Component::Value;
  LCEJIT_CHECK(value || o.reduce == static_cast<int32_t>(plan::ReduceKind::LogSumExp),
               "a partials component other than the value of a {} partial",
               plan::reduceKindName(static_cast<plan::ReduceKind>(o.reduce)));
  switch (static_cast<plan::ReduceKind>(o.reduce)) {
  case plan::ReduceKind::Sum:
    return "lcejit::partials_sum";
  case plan::ReduceKind::Max:
    return "lcejit::partials_max";
  case plan::ReduceKind::LogSumExp:
    return value ? "lcejit::partials_logsumexp"
           : o.component == Operand::Component::Max ? "lcejit::partials_logsumexp_max"
                                                    : "lcejit::partials_logsumexp_rest";
  }
  int32_t reduce = o.reduce;
  LCEJIT_CHECK(false, "bad ReduceKind {}", reduce);
  return "";
}

void emitRowKernel(CodeWriter &w, const KernelContext &ctx) {
  const RowKernel &k = std::get<RowKernel>(ctx.kernel().body);
  const plan::Program &program = ctx.program();
  const std::string what = fmt::format("row kernel '{}'", ctx.name());
  verifyScalarFunc(k.func, what);
  LCEJIT_CHECK(static_cast<int32_t>(k.args.size()) >= k.func.numArgs(),
               "{}: the function reads {} arguments but {} operands are given",
               what, k.func.numArgs(), k.args.size());

  const std::string &scalars =
      ctx.bufferName(BufferRef{Space::Workspace, plan::kScalarSlotsBuffer});
  const std::string &errors =
      ctx.bufferName(BufferRef{Space::Workspace, plan::kErrorBuffer});
  const std::string &n = ctx.scalarParamName(Param::Kind::N);
  const std::string &splits = ctx.scalarParamName(Param::Kind::Splits);

  // Header.
  ParamRoles roles;
  roles.add(scalars, "scalar slots (double)");
  roles.add(errors, "error word {lowest bad row and value, launch contract}");
  for (size_t i = 0; i < k.args.size(); ++i)
    if (k.args[i].buf.valid())
      roles.add(ctx.bufferName(k.args[i].buf),
                fmt::format("a{}: {}", i, describeOperand(program, k.args[i])));
  std::vector<std::string> about = {
      "one thread per row: block 256, grid max(1, ceil(N / 256)); rows >= N "
      "read no row",
      "operand; block 0 thread 0 applies the store_scalar sinks (also when N "
      "== 0)",
      fmt::format("function: {} instructions, {} results", k.func.insts.size(),
                  k.func.results.size())};
  for (size_t i = 0; i < k.sinks.size(); ++i) {
    const RowKernel::Sink &s = k.sinks[i];
    std::string target =
        s.buf.valid()
            ? fmt::format("{} as {}", ctx.bufferName(s.buf), dtypeName(s.dtype))
        : s.slot >= 0 ? fmt::format("slot {}", s.slot)
                      : std::string("error word");
    if (s.kind == RowKernel::Sink::Kind::CheckRow)
      target = fmt::format("error word, value = result {}", s.aux);
    about.push_back(fmt::format("sink {}: {} result {} -> {}", i,
                                sinkKindName(s.kind), s.result, target));
    if (s.buf.valid())
      roles.add(ctx.bufferName(s.buf),
                fmt::format("sink {} ({})", i, sinkKindName(s.kind)));
  }
  emitKernelHeader(w, ctx, about, roles);

  const std::string fnName = ctx.name() + "_row_fn";
  {
    auto st = w.block(fmt::format("struct {}", fnName), ";");
    for (const Param &p : ctx.params())
      w.line("{}{};", paramCType(p), p.name);
    w.blank();
    auto fn = w.block(
        "__device__ __forceinline__ void run(long long row, bool valid, "
        "bool scalar_thread) const");
    std::vector<int32_t> live = liveArgs(k.func);
    if (!live.empty())
      w.comment("Operands (rows >= n read none: they use 0).");
    // Components of one logsumexp partial (its value, m, t) read by several operands share
    // one pass over the row's entries: the pair is combined once (the same combine in the
    // same order as each helper would do alone, so the same bits).
    auto lseKey = [](const Operand &o) {
      return std::tuple<int, int32_t, int32_t, int32_t>(static_cast<int>(o.buf.space),
                                                        o.buf.index, o.slot, o.partialsOf);
    };
    std::map<std::tuple<int, int32_t, int32_t, int32_t>, std::vector<int32_t>> lseReaders;
    for (int32_t a : live) {
      const Operand &o = k.args[static_cast<size_t>(a)];
      if (o.kind == Operand::Kind::Partials &&
          o.reduce == static_cast<int32_t>(plan::ReduceKind::LogSumExp))
        lseReaders[lseKey(o)].push_back(a);
    }
    for (int32_t a : live) {
      const Operand &o = k.args[static_cast<size_t>(a)];
      switch (o.kind) {
      case Operand::Kind::Row:
        LCEJIT_CHECK(o.buf.valid(), "{}: row operand a{} has no buffer", what,
                     a);
        w.line("const {} a{} = valid ? {} : {};",
               valueCType(valueTypeOf(o.dtype)), a,
               loadElement(o.dtype, ctx.bufferName(o.buf), "row"),
               zeroOf(o.dtype));
        break;
      case Operand::Kind::Scalar:
        if (o.buf.valid())
          w.line("const {} a{} = {};", valueCType(valueTypeOf(o.dtype)), a,
                 loadElement(o.dtype, ctx.bufferName(o.buf), "0"));
        else {
          LCEJIT_CHECK(o.slot >= 0 &&
                           o.slot < std::max(program.numScalarSlots, 1),
                       "{}: scalar operand a{} reads slot {} of {}", what, a,
                       o.slot, program.numScalarSlots);
          w.line("const double a{} = {};", a,
                 loadElement(DType::F64, scalars, std::to_string(o.slot)));
        }
        break;
      case Operand::Kind::Partials: {
        LCEJIT_CHECK(
            o.partialsOf >= 0 &&
                o.partialsOf < static_cast<int32_t>(program.kernels.size()) &&
                program.kernels[static_cast<size_t>(o.partialsOf)].kind() ==
                    plan::KernelKind::GemmReduce,
            "{}: partials operand a{} names kernel {}, not a gemm_reduce", what,
            a, o.partialsOf);
        const auto &gr = std::get<plan::GemmReduceKernel>(
            program.kernels[static_cast<size_t>(o.partialsOf)].body);
        LCEJIT_CHECK(gr.partials == o.buf,
                     "{}: partials operand a{} reads another buffer "
                     "than kernel {} writes",
                     what, a, o.partialsOf);
        LCEJIT_CHECK(o.slot >= 0 && o.slot + plan::reduceSlots(
                                                 static_cast<plan::ReduceKind>(
                                                     o.reduce)) <=
                                        gr.slotsPerRow(),
                     "{}: partials operand a{} slot {} out of {}", what, a,
                     o.slot, gr.slotsPerRow());
        if (auto it = lseReaders.find(lseKey(o));
            o.reduce == static_cast<int32_t>(plan::ReduceKind::LogSumExp) &&
            it != lseReaders.end() && it->second.size() > 1) {
          const int32_t first = it->second.front();
          if (a == first) {
            std::vector<std::string> names;
            for (int32_t r : it->second)
              names.push_back(fmt::format("a{}", r));
            w.comment(fmt::format("The (m, t) pair of this logsumexp partial, combined once "
                                  "for {}",
                                  fmt::join(names, ", ")));
            w.line("float a{0}_m = 0.0f, a{0}_t = 0.0f;", first);
            w.line("if (valid)");
            w.line("  lcejit::partials_lse_pair({}, row, {}, {}, {}, a{}_m, a{}_t);",
                   ctx.bufferName(o.buf), splits, gr.slotsPerRow(), o.slot, first, first);
          }
          const std::string expr =
              o.component == Operand::Component::Value
                  ? fmt::format("lcejit::lse_value(a{0}_m, a{0}_t)", first)
              : o.component == Operand::Component::Max ? fmt::format("a{}_m", first)
                                                       : fmt::format("a{}_t", first);
          w.line("const float a{} = valid ? {} : 0.0f;", a, expr);
          break;
        }
        w.line("const float a{} = valid ? {}({}, row, {}, {}, {}) : 0.0f;", a,
               partialsHelper(o), ctx.bufferName(o.buf), splits,
               gr.slotsPerRow(), o.slot);
        break;
      }
      case Operand::Kind::RowIndex:
        w.line("const long long a{} = row;", a);
        break;
      case Operand::Kind::Col:
      case Operand::Kind::Acc:
      case Operand::Kind::ColIndex:
        LCEJIT_CHECK(false,
                     "{}: operand a{} ({}) is only valid in a GEMM epilogue",
                     what, a, describeOperand(program, o));
      }
    }
    w.comment("Function.");
    std::vector<std::string> results = emitScalarBody(
        w, k.func,
        [&](int32_t a) {
          const Operand &o = k.args[static_cast<size_t>(a)];
          DType t = o.kind == Operand::Kind::Partials   ? DType::F32
                    : o.kind == Operand::Kind::RowIndex ? DType::I64
                    : o.kind == Operand::Kind::Scalar && !o.buf.valid()
                        ? DType::F64
                        : valueTypeOf(o.dtype);
          return ArgValue{fmt::format("a{}", a), t};
        },
        ctx.scalarParamName(Param::Kind::TotalRows));
    auto resultType = [&](int32_t r) {
      LCEJIT_CHECK(r >= 0 && static_cast<size_t>(r) < results.size(),
                   "{}: a sink uses result {} of {}", what, r, results.size());
      return k.func
          .insts[static_cast<size_t>(k.func.results[static_cast<size_t>(r)])]
          .type;
    };
    auto result = [&](int32_t r) {
      resultType(r);
      return results[static_cast<size_t>(r)];
    };

    bool anyRow = false, anyScalar = false;
    for (const RowKernel::Sink &s : k.sinks)
      (s.kind == RowKernel::Sink::Kind::StoreScalar ? anyScalar : anyRow) =
          true;
    if (anyRow) {
      auto b = w.block("if (valid)");
      for (const RowKernel::Sink &s : k.sinks) {
        switch (s.kind) {
        case RowKernel::Sink::Kind::StoreRow:
          LCEJIT_CHECK(s.buf.valid(), "{}: store_row sink without a buffer",
                       what);
          w.text(storeElement(s.dtype, ctx.bufferName(s.buf), "row",
                              result(s.result), resultType(s.result)));
          break;
        case RowKernel::Sink::Kind::SumScalar:
          LCEJIT_CHECK(s.slot >= 0 &&
                           s.slot < std::max(program.numScalarSlots, 1),
                       "{}: sum_scalar sink into slot {} of {}", what, s.slot,
                       program.numScalarSlots);
          w.line(
              "atomicAdd(static_cast<double *>({}) + {}, {});", scalars, s.slot,
              convertValue(result(s.result), resultType(s.result), DType::F64));
          break;
        case RowKernel::Sink::Kind::CheckRow:
          w.line("if ({})", convertValue(result(s.result), resultType(s.result),
                                         DType::I1));
          w.indent();
          w.line("lcejit::raise_row_check({}, row, {});", errors,
                 convertValue(result(s.aux), resultType(s.aux), DType::I64));
          w.dedent();
          break;
        case RowKernel::Sink::Kind::StoreScalar:
          break;
        }
      }
    }
    if (anyScalar) {
      auto b = w.block("if (scalar_thread)");
      for (const RowKernel::Sink &s : k.sinks) {
        if (s.kind != RowKernel::Sink::Kind::StoreScalar)
          continue;
        if (s.buf.valid()) {
          w.text(storeElement(s.dtype, ctx.bufferName(s.buf), "0",
                              result(s.result), resultType(s.result)));
        } else {
          LCEJIT_CHECK(s.slot >= 0 &&
                           s.slot < std::max(program.numScalarSlots, 1),
                       "{}: store_scalar sink into slot {} of {}", what, s.slot,
                       program.numScalarSlots);
          w.text(storeElement(DType::F64, scalars, std::to_string(s.slot),
                              result(s.result), resultType(s.result)));
        }
      }
    }
  }
  w.blank();
  {
    auto kb = openKernel(w, ctx, 256);
    // The launch contract (lcejit_common.cuh): 256 threads, one per row, in
    // max(1, ceil(n / 256)) blocks (Program::launchDims).
    w.line("if (!lcejit::launch_ok({}, {}, 0, 256, {} > 0 ? lcejit::ceil_div({}, 256) : 1, 1))",
           errors, ctx.index(), n, n);
    w.line("  return; // recorded in the error word (kernel {}); the host reports it",
           ctx.index());
    std::vector<std::string> names;
    for (const Param &p : ctx.params())
      names.push_back(p.name);
    w.line("const {} fn = {{{}}};", fnName,
           fmt::format("{}", fmt::join(names, ", ")));
    w.line("lcejit::row_kernel(fn, {});", n);
  }
}

} // namespace lcejit::codegen::detail
