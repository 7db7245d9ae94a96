//===- Program.cpp - Program hashing, JSON, ABI and launch geometry -------===//

#include "compiler/plan/Program.h"
#include "compiler/plan/SchedulePolicy.h"
#include "compiler/support/Check.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace lcejit::plan {

using json = nlohmann::json;

std::string_view l2HintName(L2Hint h) {
  switch (h) {
  case L2Hint::Normal: return "normal";
  case L2Hint::EvictFirst: return "first";
  case L2Hint::EvictLast: return "last";
  }
  return "?";
}

std::optional<L2Hint> parseL2Hint(std::string_view s) {
  for (L2Hint h : {L2Hint::Normal, L2Hint::EvictFirst, L2Hint::EvictLast})
    if (s == l2HintName(h))
      return h;
  return std::nullopt;
}

std::string L2Hints::str() const {
  return std::string(l2HintName(a)) + "," + std::string(l2HintName(b));
}

const char *scalarOpName(ScalarOp op) {
  switch (op) {
  case ScalarOp::Arg: return "arg";
  case ScalarOp::Const: return "const";
  case ScalarOp::RowCount: return "rowcount";
  case ScalarOp::Add: return "add";
  case ScalarOp::Sub: return "sub";
  case ScalarOp::Mul: return "mul";
  case ScalarOp::Div: return "div";
  case ScalarOp::Max: return "max";
  case ScalarOp::Min: return "min";
  case ScalarOp::Neg: return "neg";
  case ScalarOp::Exp: return "exp";
  case ScalarOp::Log: return "log";
  case ScalarOp::Tanh: return "tanh";
  case ScalarOp::Expm1: return "expm1";
  case ScalarOp::Log1p: return "log1p";
  case ScalarOp::Abs: return "abs";
  case ScalarOp::CmpEq: return "cmpeq";
  case ScalarOp::CmpNe: return "cmpne";
  case ScalarOp::CmpLt: return "cmplt";
  case ScalarOp::CmpLe: return "cmple";
  case ScalarOp::CmpGt: return "cmpgt";
  case ScalarOp::CmpGe: return "cmpge";
  case ScalarOp::And: return "and";
  case ScalarOp::Or: return "or";
  case ScalarOp::Not: return "not";
  case ScalarOp::Select: return "select";
  case ScalarOp::Cast: return "cast";
  }
  return "?";
}

const char *reduceKindName(ReduceKind k) {
  switch (k) {
  case ReduceKind::Sum: return "sum";
  case ReduceKind::Max: return "max";
  case ReduceKind::LogSumExp: return "logsumexp";
  }
  return "?";
}

int32_t reduceSlots(ReduceKind k) { return k == ReduceKind::LogSumExp ? 2 : 1; }

const char *mathModeName(MathMode m) {
  switch (m) {
  case MathMode::TensorCoreBF16: return "mma.sync.bf16";
  case MathMode::TensorCoreF16: return "mma.sync.f16";
  case MathMode::SimtF32: return "simt.f32";
  case MathMode::WgmmaBF16: return "wgmma.bf16";
  }
  return "?";
}

const char *dzFormatName(DzFormat f) {
  switch (f) {
  case DzFormat::SplitBF16: return "split_bf16";
  case DzFormat::F32: return "f32";
  case DzFormat::BF16: return "bf16";
  }
  return "?";
}

const char *kernelKindName(KernelKind k) {
  switch (k) {
  case KernelKind::Row: return "row";
  case KernelKind::GemmReduce: return "gemm_reduce";
  case KernelKind::GemmDz: return "gemm_dz";
  case KernelKind::GemmDLhs: return "gemm_dlhs";
  case KernelKind::GemmDRhs: return "gemm_drhs";
  case KernelKind::Cast: return "cast";
  case KernelKind::DzForm: return "dz_form";
  case KernelKind::TargetCorrection: return "target_correction";
  case KernelKind::RowDot: return "row_dot";
  }
  return "?";
}

int32_t ScalarFunc::numArgs() const {
  int32_t n = 0;
  for (const ScalarInst &i : insts)
    if (i.op == ScalarOp::Arg)
      n = std::max(n, i.argIndex + 1);
  return n;
}

int32_t GemmReduceKernel::slotsPerRow() const {
  int32_t n = 0;
  for (ReduceKind k : reductions)
    n += reduceSlots(k);
  return n;
}

int32_t GemmReduceKernel::slotOf(int32_t result) const {
  int32_t n = 0;
  for (int32_t i = 0; i < result; ++i)
    n += reduceSlots(reductions[static_cast<size_t>(i)]);
  return n;
}

std::string Target::archName() const {
  if (smVersion == 90)
    return "sm_90a";
  return fmt::format("sm_{}", smVersion);
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

static json toJ(const BufferRef &b) {
  static const char *names[] = {"input", "output", "workspace"};
  return json{{"space", names[static_cast<int>(b.space)]}, {"index", b.index}};
}

static json toJ(const Residual &r) {
  return json{{"buffer", toJ(r.buf)}, {"target", toJ(r.target)},
              {"target_type", std::string(dtypeName(r.targetType))}};
}

static json toJ(const TargetSums &t) {
  return json{{"sums", toJ(t.sums)}, {"head", toJ(t.head)}, {"target", toJ(t.target)},
              {"target_type", std::string(dtypeName(t.targetType))}, {"cols", t.cols},
              {"group_rows", t.groupRows}};
}

static json toJ(const ScalarFunc &f) {
  json insts = json::array();
  for (const ScalarInst &i : f.insts) {
    json j{{"op", scalarOpName(i.op)}, {"type", std::string(dtypeName(i.type))}};
    json ops = json::array();
    for (int32_t o : i.operands)
      if (o >= 0)
        ops.push_back(o);
    if (!ops.empty())
      j["operands"] = ops;
    if (i.op == ScalarOp::Arg)
      j["arg"] = i.argIndex;
    if (i.op == ScalarOp::Const) {
      if (isFloat(i.type))
        j["value"] = i.fValue;
      else
        j["value"] = i.iValue;
    }
    insts.push_back(j);
  }
  return json{{"insts", insts}, {"results", f.results}};
}

static json toJ(const Operand &o) {
  static const char *kinds[] = {"row", "col", "scalar", "partials", "acc", "col_index", "row_index"};
  json j{{"kind", kinds[static_cast<int>(o.kind)]}, {"dtype", std::string(dtypeName(o.dtype))}};
  if (o.buf.valid())
    j["buffer"] = toJ(o.buf);
  if (o.slot >= 0)
    j["slot"] = o.slot;
  if (o.reduce >= 0)
    j["reduce"] = reduceKindName(static_cast<ReduceKind>(o.reduce));
  if (o.partialsOf >= 0)
    j["partials_of"] = o.partialsOf;
  if (o.component != Operand::Component::Value)
    j["component"] = o.component == Operand::Component::Max ? "max" : "rest_sum";
  return j;
}

static json toJ(const TileConfig &t) {
  json j{{"bm", t.bm}, {"bn", t.bn}, {"bk", t.bk}, {"warps_m", t.warpsM},
         {"warps_n", t.warpsN}, {"stages", t.stages}};
  if (t.pingpong)
    j["pingpong"] = true;
  if (t.tmaStore)
    j["tma_store"] = true;
  if (t.clusterM != 1)
    j["cluster_m"] = t.clusterM;
  if (t.splitK != 1)
    j["split_k"] = t.splitK;
  if (t.halves)
    j["halves"] = true;
  return j;
}

static json toJ(const FusedGemm &g) {
  json args = json::array();
  for (const Operand &o : g.args)
    args.push_back(toJ(o));
  return json{{"math", mathModeName(g.math)}, {"ab_type", std::string(dtypeName(g.abType))},
              {"tile", toJ(g.tile)}, {"k", g.k}, {"cols", g.cols}, {"a", toJ(g.a)},
              {"b", toJ(g.b)}, {"epilogue", toJ(g.epilogue)}, {"args", args}};
}

static json kernelBodyJson(const Kernel &k) {
  json j;
  std::visit(
      [&](const auto &b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, RowKernel>) {
          static const char *sinkKinds[] = {"store_row", "store_scalar", "sum_scalar",
                                            "check_row"};
          json args = json::array(), sinks = json::array();
          for (const Operand &o : b.args)
            args.push_back(toJ(o));
          for (const RowKernel::Sink &s : b.sinks) {
            json sj{{"kind", sinkKinds[static_cast<int>(s.kind)]}, {"result", s.result}};
            if (s.buf.valid()) {
              sj["buffer"] = toJ(s.buf);
              sj["dtype"] = std::string(dtypeName(s.dtype));
            }
            if (s.slot >= 0)
              sj["slot"] = s.slot;
            if (s.aux >= 0)
              sj["aux"] = s.aux;
            sinks.push_back(sj);
          }
          j = json{{"func", toJ(b.func)}, {"args", args}, {"sinks", sinks}};
        } else if constexpr (std::is_same_v<T, GemmReduceKernel>) {
          json red = json::array();
          for (ReduceKind r : b.reductions)
            red.push_back(reduceKindName(r));
          j = json{{"gemm", toJ(b.gemm)}, {"reductions", red}, {"partials", toJ(b.partials)}};
          if (b.orderGroup != kForwardOrderGroup)
            j["order_group"] = b.orderGroup;
          if (!b.l2.none())
            j["l2"] = b.l2.str();
          if (b.stored)
            j["stored"] = json{{"values", toJ(b.stored->values)},
                               {"tile_max", toJ(b.stored->tileMax)},
                               {"lse_result", b.stored->lseResult},
                               {"tile_cols", b.stored->tileCols},
                               {"exclude_arg", b.stored->excludeArg},
                               {"factor", toJ(b.stored->factor)}};
          if (b.stored && b.stored->rowScaled && b.stored->referenceArg >= 0)
            j["stored"]["row_scaled_reference_arg"] = b.stored->referenceArg;
          else if (b.stored && b.stored->rowScaled)
            j["stored"]["row_scaled_reference"] = b.stored->reference;
          if (b.stored && b.stored->slabs)
            j["stored"]["slabs"] = true;
        } else if constexpr (std::is_same_v<T, GemmDzKernel>) {
          j = json{{"gemm", toJ(b.gemm)}, {"format", dzFormatName(b.format)}, {"dz", toJ(b.dz)}};
          if (b.dzLo.valid())
            j["dz_lo"] = toJ(b.dzLo);
          if (b.residual.valid()) {
            j["residual"] = toJ(b.residual);
            j["residual_arg"] = b.residualArg;
          }
          if (b.rowFilter.valid())
            j["row_filter"] = toJ(b.rowFilter);
          if (b.slabs)
            j["slabs"] = true;
        } else if constexpr (std::is_same_v<T, GemmDLhsKernel>) {
          j = json{{"math", mathModeName(b.math)}, {"tile", toJ(b.tile)},
                   {"format", dzFormatName(b.format)}, {"b_type", std::string(dtypeName(b.bType))},
                   {"k", b.k}, {"dz", toJ(b.dz)}, {"b", toJ(b.b)}, {"out", toJ(b.out)},
                   {"out_type", std::string(dtypeName(b.outType))}};
          if (b.dzLo.valid())
            j["dz_lo"] = toJ(b.dzLo);
          if (b.residual.valid()) {
            j["residual"] = toJ(b.residual);
            j["cols"] = b.cols;
          }
          if (b.rowScale.valid())
            j["row_scale"] = toJ(b.rowScale);
          if (b.slabs)
            j["slabs"] = true;
          if (b.alternativeOf >= 0)
            j["alternative_of"] = b.alternativeOf;
          if (b.streamK.valid())
            j["stream_k"] = toJ(b.streamK);
          if (b.chain.valid())
            j["chain"] = toJ(b.chain);
        } else if constexpr (std::is_same_v<T, GemmDRhsKernel>) {
          j = json{{"math", mathModeName(b.math)}, {"tile", toJ(b.tile)},
                   {"format", dzFormatName(b.format)}, {"a_type", std::string(dtypeName(b.aType))},
                   {"k", b.k}, {"dz", toJ(b.dz)}, {"a", toJ(b.a)}, {"out", toJ(b.out)},
                   {"out_type", std::string(dtypeName(b.outType))},
                   {"accumulate_row_blocks", b.accumulateRowBlocks}};
          if (b.dzLo.valid())
            j["dz_lo"] = toJ(b.dzLo);
          if (b.outCol0 != 0 || b.outLd != 0) {
            j["out_col0"] = b.outCol0;
            j["out_ld"] = b.outLd;
          }
          if (b.targetSums.valid())
            j["target_sums"] = toJ(b.targetSums);
          if (b.slabs)
            j["slabs"] = true;
          if (b.loadedSumsMaxRows > 0)
            j["loaded_sums_max_rows"] = b.loadedSumsMaxRows;
        } else if constexpr (std::is_same_v<T, DzFormKernel>) {
          j = json{{"dz", toJ(b.dz)},         {"tile_max", toJ(b.tileMax)},
                   {"cols", b.cols},          {"tile_cols", b.tileCols},
                   {"lse", toJ(b.lse)},       {"scale", toJ(b.scale)},
                   {"target_dz", toJ(b.targetDz)}};
          if (b.target.valid()) {
            j["target"] = toJ(b.target);
            j["target_type"] = std::string(dtypeName(b.targetType));
          }
          if (b.residual.valid())
            j["residual"] = toJ(b.residual);
          if (b.rowScaled) {
            j["row_scaled"] = json{{"row_scale", toJ(b.rowScale)}};
            if (b.referenceRow.valid()) {
              j["row_scaled"]["reference_row"] = toJ(b.referenceRow);
              j["row_scaled"]["recompute"] = toJ(b.recompute);
            } else {
              j["row_scaled"]["reference"] = b.reference;
            }
            if (b.aScaled.valid()) {
              j["row_scaled"]["a"] = toJ(b.a);
              j["row_scaled"]["a_scaled"] = toJ(b.aScaled);
              j["row_scaled"]["a_type"] = std::string(dtypeName(b.aType));
              j["row_scaled"]["k"] = b.k;
              if (b.aCol0 != 0 || b.aLd != 0) {
                j["row_scaled"]["a_col0"] = b.aCol0;
                j["row_scaled"]["a_ld"] = b.aLd;
              }
            }
            if (b.aOnly)
              j["row_scaled"]["a_only"] = true;
            if (b.scaleValues)
              j["row_scaled"]["scale_values"] = true;
          }
          if (b.slabs)
            j["slabs"] = true;
        } else if constexpr (std::is_same_v<T, TargetCorrectionKernel>) {
          j = json{{"residual", toJ(b.residual)}, {"a", toJ(b.a)},
                   {"a_type", std::string(dtypeName(b.aType))}, {"k", b.k}, {"cols", b.cols}};
          if (b.out.valid())
            j["out"] = toJ(b.out);
          if (b.sums.valid())
            j["sums"] = toJ(b.sums);
          if (b.groups.valid())
            j["groups"] = toJ(b.groups);
          if (b.findGroups)
            j["find_groups"] = true;
        } else if constexpr (std::is_same_v<T, RowDotKernel>) {
          j = json{{"a", toJ(b.a)}, {"b", toJ(b.b)}, {"ab_type", std::string(dtypeName(b.abType))},
                   {"target", toJ(b.target)},
                   {"target_type", std::string(dtypeName(b.targetType))}, {"out", toJ(b.out)},
                   {"k", b.k}, {"cols", b.cols}};
        } else if constexpr (std::is_same_v<T, CastKernel>) {
          j = json{{"in", toJ(b.in)}, {"out", toJ(b.out)},
                   {"out_type", std::string(dtypeName(b.outType))}, {"k", b.k}};
          if (b.rows >= 0)
            j["rows"] = b.rows;
        }
      },
      k.body);
  return j;
}

std::string Program::toJson(int indent) const {
  json j;
  j["name"] = name;
  j["bucket"] = json{{"low", bucketLow}, {"high", bucket}};
  j["target"] = json{{"arch", target.archName()}, {"sms", target.numSMs},
                     {"max_shared_per_block", target.maxSharedPerBlock}};
  if (target.memoryBusBits > 0)
    j["target"]["memory_bus_bits"] = target.memoryBusBits;
  auto tensors = [](const std::vector<TensorSpec> &ts) {
    json a = json::array();
    for (const TensorSpec &t : ts)
      a.push_back(json{{"name", t.name}, {"dtype", std::string(dtypeName(t.dtype))},
                       {"shape", t.shape}});
    return a;
  };
  j["inputs"] = tensors(inputs);
  j["outputs"] = tensors(outputs);
  json ws = json::array();
  for (const BufferSpec &b : workspace)
    ws.push_back(json{{"name", b.name}, {"bytes_per_row", b.bytesPerRow},
                      {"bytes_per_row_col", b.bytesPerRowCol}, {"bytes_fixed", b.bytesFixed},
                      {"block_local", b.blockLocal},
                      {"init", b.init == BufferInit::Zero ? "zero" : "none"}});
  j["workspace"] = ws;
  j["scalar_slots"] = numScalarSlots;
  json ks = json::array();
  for (const Kernel &k : kernels)
    ks.push_back(json{{"name", k.name}, {"kind", kernelKindName(k.kind())},
                      {"body", kernelBodyJson(k)}});
  j["kernels"] = ks;
  json st = json::array();
  for (const Step &s : steps) {
    if (s.kind == Step::Kind::Launch)
      st.push_back(json{{"launch", kernels[static_cast<size_t>(s.kernel)].name}});
    else {
      json names = json::array();
      for (int32_t k : s.loopKernels)
        names.push_back(kernels[static_cast<size_t>(k)].name);
      st.push_back(json{{"chunk_loop", names}});
    }
  }
  j["steps"] = st;
  j["loop_cols"] = loopCols;
  j["schedule"] = json{{"budget_bytes", schedule.budgetBytes},
                       {"chunk_align", schedule.chunkAlign},
                       {"fixed_chunk_cols", schedule.fixedChunkCols},
                       {"row_align", schedule.rowAlign},
                       {"min_block_rows", schedule.minBlockRows},
                       {"block_rows", schedule.blockRows},
                       {"good_chunk_cols", schedule.goodChunkCols},
                       {"fallback_chunk_cols", schedule.fallbackChunkCols},
                       {"whole_rows", schedule.wholeRows},
                       {"blocked_steps", json::array({schedule.firstBlockedStep,
                                                      schedule.lastBlockedStep})}};
  if (schedule.slabValues >= 0)
    j["schedule"]["slabs"] = json{{"values", schedule.slabValues},
                                  {"output", schedule.slabOutput},
                                  {"scaled_a", schedule.slabScaledA},
                                  {"scaled_a_parts", schedule.slabScaledAParts}};
  if (schedule.slabOnly)
    j["schedule"]["slab_only"] = true;
  if (schedule.lhsChain >= 0)
    j["schedule"]["dlhs_chain"] = schedule.lhsChain;
  j["splits"] = splits;
  j["decisions"] = decisions;
  return j.dump(indent);
}

uint64_t Program::hash() const {
  std::string s = toJson(-1);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

//===----------------------------------------------------------------------===//
// ABI
//===----------------------------------------------------------------------===//

static std::string bufferParamName(const BufferRef &b) {
  static const char *prefix[] = {"in", "out", "ws"};
  return fmt::format("{}{}", prefix[static_cast<int>(b.space)], b.index);
}

namespace {
struct ParamList {
  std::vector<Param> params;
  void addBuffer(const BufferRef &b) {
    if (!b.valid())
      return;
    for (const Param &p : params)
      if (p.kind == Param::Kind::Pointer && p.buf == b)
        return;
    params.push_back(Param{Param::Kind::Pointer, b, bufferParamName(b)});
  }
  void addOperands(const std::vector<Operand> &ops) {
    for (const Operand &o : ops)
      addBuffer(o.buf);
  }
  void add(Param::Kind k, const char *name) { params.push_back(Param{k, BufferRef{}, name}); }
};
/// [Note: stored values in dW] What a kernel that writes the stored values needs to find
/// an element's slab.
void addSlabParams(ParamList &pl) {
  pl.add(Param::Kind::SlabSplit, "slab_split");
  pl.add(Param::Kind::SlabStride, "slab_stride");
  pl.add(Param::Kind::SlabBase, "slab_base");
  pl.add(Param::Kind::SlabHead, "slab_head");
}
} // namespace

std::vector<Param> kernelParams(const Kernel &kernel) {
  ParamList pl;
  if (isGemmKind(kernel.kind()) && gemmMath(kernel) == MathMode::WgmmaBF16) {
    pl.add(Param::Kind::TensorMapA, "map_a");
    pl.add(Param::Kind::TensorMapB, "map_b");
    if (gemmTile(kernel).tmaStore)
      pl.add(Param::Kind::TensorMapOut, "map_out");
    if (const auto *d = std::get_if<GemmDLhsKernel>(&kernel.body); d && d->slabs) {
      pl.add(Param::Kind::TensorMapA2, "map_a2");
      pl.add(Param::Kind::TensorMapTail, "map_tail");
    }
    if (const auto *d = std::get_if<GemmDRhsKernel>(&kernel.body); d && d->slabs)
      pl.add(Param::Kind::TensorMapTail, "map_tail");
  }
  const BufferRef scalars{Space::Workspace, kScalarSlotsBuffer};
  const BufferRef errors{Space::Workspace, kErrorBuffer};
  switch (kernel.kind()) {
  case KernelKind::Row: {
    const auto &k = std::get<RowKernel>(kernel.body);
    pl.addOperands(k.args);
    for (const RowKernel::Sink &s : k.sinks)
      pl.addBuffer(s.buf);
    pl.addBuffer(scalars);
    pl.addBuffer(errors);
    pl.add(Param::Kind::N, "n");
    pl.add(Param::Kind::TotalRows, "n_total");
    pl.add(Param::Kind::Splits, "splits");
    break;
  }
  case KernelKind::GemmReduce: {
    const auto &k = std::get<GemmReduceKernel>(kernel.body);
    pl.addBuffer(k.gemm.a);
    pl.addBuffer(k.gemm.b);
    pl.addOperands(k.gemm.args);
    pl.addBuffer(scalars);
    pl.addBuffer(k.partials);
    if (k.stored) {
      pl.addBuffer(k.stored->values);
      pl.addBuffer(k.stored->tileMax);
    }
    pl.addBuffer(errors); // the launch contract (launch_ok)
    pl.add(Param::Kind::N, "n");
    pl.add(Param::Kind::TotalRows, "n_total");
    pl.add(Param::Kind::Splits, "splits");
    if (k.stored && k.stored->slabs)
      addSlabParams(pl);
    break;
  }
  case KernelKind::GemmDz: {
    const auto &k = std::get<GemmDzKernel>(kernel.body);
    pl.addBuffer(k.gemm.a);
    pl.addBuffer(k.gemm.b);
    pl.addOperands(k.gemm.args);
    pl.addBuffer(scalars);
    pl.addBuffer(k.dz);
    pl.addBuffer(k.dzLo);
    pl.addBuffer(k.residual.buf);
    pl.addBuffer(k.rowFilter);
    pl.addBuffer(errors); // the launch contract (launch_ok)
    pl.add(Param::Kind::N, "n");
    pl.add(Param::Kind::TotalRows, "n_total");
    pl.add(Param::Kind::ChunkBegin, "chunk_begin");
    pl.add(Param::Kind::ChunkCols, "chunk_cols");
    if (k.slabs)
      addSlabParams(pl);
    break;
  }
  case KernelKind::GemmDLhs: {
    const auto &k = std::get<GemmDLhsKernel>(kernel.body);
    pl.addBuffer(k.dz);
    pl.addBuffer(k.dzLo);
    pl.addBuffer(k.b);
    pl.addBuffer(k.out);
    pl.addBuffer(k.residual.buf);
    pl.addBuffer(k.residual.target);
    pl.addBuffer(k.rowScale);
    pl.addBuffer(k.streamK);
    pl.addBuffer(k.chain);
    pl.addBuffer(errors); // the launch contract (launch_ok)
    pl.add(Param::Kind::N, "n");
    pl.add(Param::Kind::ChunkBegin, "chunk_begin");
    pl.add(Param::Kind::ChunkCols, "chunk_cols");
    pl.add(Param::Kind::ChunkIndex, "chunk_index");
    if (k.out.space == Space::Output)
      pl.add(Param::Kind::AccumulateOutputs, "accumulate_outputs");
    if (k.slabs) {
      pl.add(Param::Kind::SlabSplit, "slab_split");
      pl.add(Param::Kind::SlabHead, "slab_head");
    }
    break;
  }
  case KernelKind::GemmDRhs: {
    const auto &k = std::get<GemmDRhsKernel>(kernel.body);
    pl.addBuffer(k.dz);
    pl.addBuffer(k.dzLo);
    pl.addBuffer(k.a);
    pl.addBuffer(k.out);
    pl.addBuffer(k.targetSums.sums);
    pl.addBuffer(k.targetSums.head);
    pl.addBuffer(k.targetSums.target);
    pl.addBuffer(errors); // the launch contract (launch_ok)
    pl.add(Param::Kind::N, "n");
    pl.add(Param::Kind::ChunkBegin, "chunk_begin");
    pl.add(Param::Kind::ChunkCols, "chunk_cols");
    pl.add(Param::Kind::RowBlock, "row_block");
    if (k.out.space == Space::Output)
      pl.add(Param::Kind::AccumulateOutputs, "accumulate_outputs");
    if (k.slabs) {
      pl.add(Param::Kind::SlabSplit, "slab_split");
      pl.add(Param::Kind::SlabHead, "slab_head");
    }
    break;
  }
  case KernelKind::DzForm: {
    const auto &k = std::get<DzFormKernel>(kernel.body);
    pl.addBuffer(k.dz);
    pl.addBuffer(k.tileMax);
    pl.addBuffer(k.lse);
    pl.addBuffer(k.scale);
    pl.addBuffer(k.targetDz);
    pl.addBuffer(k.target); // grid-stride: any launch shape is correct
    pl.addBuffer(k.residual);
    pl.addBuffer(k.rowScale);
    pl.addBuffer(k.a);
    pl.addBuffer(k.aScaled);
    pl.addBuffer(k.referenceRow);
    pl.addBuffer(k.recompute);
    pl.add(Param::Kind::N, "n");
    if (k.slabs) // [Note: values scaled in place]
      addSlabParams(pl);
    break;
  }
  case KernelKind::TargetCorrection: {
    const auto &k = std::get<TargetCorrectionKernel>(kernel.body);
    if (k.findGroups) { // [Note: a group's first and last rows]
      pl.addBuffer(k.residual.target);
      pl.addBuffer(k.groups); // grid-stride over rows
      pl.add(Param::Kind::N, "n");
      break;
    }
    pl.addBuffer(k.residual.buf);
    pl.addBuffer(k.residual.target);
    pl.addBuffer(k.a);
    pl.addBuffer(k.out); // grid-stride over rows: any launch shape is correct
    pl.addBuffer(k.sums.sums);
    pl.addBuffer(k.sums.head);
    pl.addBuffer(k.groups);
    pl.add(Param::Kind::N, "n");
    if (k.sums.valid()) { // [Note: target group sums]: the groups of the chunk's targets
      pl.add(Param::Kind::ChunkBegin, "chunk_begin");
      pl.add(Param::Kind::ChunkCols, "chunk_cols");
    }
    break;
  }
  case KernelKind::RowDot: {
    const auto &k = std::get<RowDotKernel>(kernel.body);
    pl.addBuffer(k.a);
    pl.addBuffer(k.b);
    pl.addBuffer(k.target);
    pl.addBuffer(k.out); // grid-stride over rows
    pl.add(Param::Kind::N, "n");
    break;
  }

  case KernelKind::Cast: {
    const auto &k = std::get<CastKernel>(kernel.body);
    pl.addBuffer(k.in);
    pl.addBuffer(k.out); // grid-stride: any launch shape is correct, no contract to check
    pl.add(Param::Kind::N, "n");
    if (k.out.space == Space::Output)
      pl.add(Param::Kind::AccumulateOutputs, "accumulate_outputs");
    break;
  }
  }
  return pl.params;
}

uint64_t accumulableOutputs(const Program &program) {
  // Per output: written by some kernel, and only by kernels that read the mask.
  std::vector<uint8_t> written(program.outputs.size(), 0), other(program.outputs.size(), 0);
  auto mark = [&](const BufferRef &b, bool accumulates) {
    if (b.space != Space::Output || b.index < 0 ||
        b.index >= static_cast<int32_t>(program.outputs.size()))
      return;
    (accumulates ? written : other)[static_cast<size_t>(b.index)] = 1;
  };
  for (const Kernel &k : program.kernels)
    std::visit(
        [&](const auto &b) {
          using T = std::decay_t<decltype(b)>;
          // (A TargetCorrection adds to what its out holds in either case.)
          if constexpr (std::is_same_v<T, GemmDLhsKernel> || std::is_same_v<T, GemmDRhsKernel> ||
                        std::is_same_v<T, CastKernel> ||
                        std::is_same_v<T, TargetCorrectionKernel>)
            mark(b.out, true);
          else if constexpr (std::is_same_v<T, RowKernel>)
            for (const RowKernel::Sink &s : b.sinks)
              mark(s.buf, false);
          else if constexpr (std::is_same_v<T, GemmReduceKernel>) {
            mark(b.partials, false);
            if (b.stored) {
              mark(b.stored->values, false);
              mark(b.stored->tileMax, false);
            }
          } else if constexpr (std::is_same_v<T, DzFormKernel>)
            mark(b.dz, false);
          else if constexpr (std::is_same_v<T, GemmDzKernel>) {
            mark(b.dz, false);
            mark(b.dzLo, false);
          }
        },
        k.body);
  uint64_t mask = 0;
  for (size_t i = 0; i < program.outputs.size() && i < 64; ++i)
    if (written[i] && !other[i])
      mask |= uint64_t(1) << i;
  return mask;
}

//===----------------------------------------------------------------------===//
// Launch geometry and workspace
//===----------------------------------------------------------------------===//

static int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t tileElems(int64_t x, int64_t bk) {
  // An x-by-bk operand tile, unpadded in either layout: [x][bk] (K contiguous) or [bk][x]
  // (MN contiguous); lcejit_gemm.cuh swizzles 16-byte chunks within rows instead of
  // padding them ([Note: swizzle]).
  return x * bk;
}

/// lcejit::sm90::GemmConfig's STAGE_BYTES (a 128 x 64 A and a bn x 64 B, bf16) and
/// BOX_BYTES (one 64 x 32 f32 box of the TMA store).
static int64_t wgmmaStageBytes(const TileConfig &t) {
  return int64_t(128) * 64 * 2 + int64_t(t.bn) * 64 * 2;
}
constexpr int64_t kWgmmaF32BoxBytes = 64 * 32 * 4;

int32_t wgmmaSharedBytes(const TileConfig &t) {
  const int64_t epilogue = t.tmaStore ? 2 * 2 * kWgmmaF32BoxBytes : 0;
  return static_cast<int32_t>(1024 + t.stages * wgmmaStageBytes(t) + epilogue +
                              2 * t.stages * 8);
}

bool wgmmaLoadedSums(const TileConfig &t) {
  if (!t.tmaStore || t.clusterM != 1 || t.splitK != 1 || t.pingpong || t.bm != 128)
    return false;
  const int64_t boxes = t.bn / 32, stageBoxes = wgmmaStageBytes(t) / kWgmmaF32BoxBytes / 2;
  const int64_t loadStages = ceilDiv(boxes, stageBoxes);
  return t.stages > loadStages;
}

MathMode gemmMath(const Kernel &kernel) {
  switch (kernel.kind()) {
  case KernelKind::GemmReduce: return std::get<GemmReduceKernel>(kernel.body).gemm.math;
  case KernelKind::GemmDz: return std::get<GemmDzKernel>(kernel.body).gemm.math;
  case KernelKind::GemmDLhs: return std::get<GemmDLhsKernel>(kernel.body).math;
  case KernelKind::GemmDRhs: return std::get<GemmDRhsKernel>(kernel.body).math;
  default: break;
  }
  LCEJIT_CHECK(false, "kernel '{}' is not a GEMM", kernel.name);
  return MathMode::SimtF32;
}

const TileConfig &gemmTile(const Kernel &kernel) {
  switch (kernel.kind()) {
  case KernelKind::GemmReduce: return std::get<GemmReduceKernel>(kernel.body).gemm.tile;
  case KernelKind::GemmDz: return std::get<GemmDzKernel>(kernel.body).gemm.tile;
  case KernelKind::GemmDLhs: return std::get<GemmDLhsKernel>(kernel.body).tile;
  case KernelKind::GemmDRhs: return std::get<GemmDRhsKernel>(kernel.body).tile;
  default: break;
  }
  LCEJIT_CHECK(false, "kernel '{}' is not a GEMM", kernel.name);
  static const TileConfig none;
  return none;
}

int32_t gemmSharedBytes(const TileConfig &t, int64_t aBytes, int64_t bBytes, int32_t numA) {
  int64_t stage = numA * tileElems(t.bm, t.bk) * aBytes + tileElems(t.bn, t.bk) * bBytes;
  int64_t scratch = int64_t(t.bm) * t.warpsN * 4 * 4; // row-reduction exchange, 4 floats
  return static_cast<int32_t>(t.stages * stage + scratch);
}

bool Program::hasChunkLoop() const {
  return std::any_of(steps.begin(), steps.end(),
                     [](const Step &s) { return s.kind == Step::Kind::ChunkLoop; });
}

RunSchedule Program::runSchedule(int64_t n, bool outputFree) const {
  return chooseRunSchedule(*this, n, outputFree);
}

std::vector<LaunchItem> Program::expand(const RunSchedule &s) const {
  std::vector<LaunchItem> items;
  LCEJIT_CHECK(!hasChunkLoop() || (s.chunkCols > 0 && loopCols > 0),
               "program '{}': a chunk loop with chunkCols = {}, loopCols = {}", name,
               s.chunkCols, loopCols);
  const int32_t first = schedule.firstBlockedStep, last = schedule.lastBlockedStep;
  LCEJIT_CHECK(first < 0 || (first <= last && last < static_cast<int32_t>(steps.size())),
               "program '{}': blocked steps [{}, {}] of {}", name, first, last, steps.size());
  auto emitStep = [&](int32_t si, int64_t rowBegin, int64_t rows, int64_t block) {
    const Step &step = steps[static_cast<size_t>(si)];
    LaunchItem it;
    it.step = si;
    it.splits = s.splits;
    it.rowBegin = rowBegin;
    it.rows = rows;
    it.rowBlock = block;
    if (step.kind == Step::Kind::Launch) {
      it.kernel = step.kernel;
      it.chunkCols = loopCols;
      items.push_back(it);
      return;
    }
    if (s.slabGroup > 0 && block == 0) {
      // [Note: stored values in dW]: one chunk of all columns; the kernels other than dB
      // in order, then dB in launches of at most slabGroup slabs, aligned from the last
      // (the chunk of a dB launch is its slabs' columns), each launch's parts in order.
      it.chunkIndex = 0;
      it.chunkBegin = 0;
      it.chunkCols = loopCols;
      auto isSlabDb = [&](int32_t k) {
        const auto *d = std::get_if<GemmDRhsKernel>(&kernels[static_cast<size_t>(k)].body);
        return d && d->slabs;
      };
      for (int32_t k : step.loopKernels)
        if (!isSlabDb(k) && launches(k, rows, loopCols)) {
          it.kernel = k;
          items.push_back(it);
        }
      std::vector<int64_t> starts;
      for (int64_t b = s.slabSplit; b > 0; b -= s.slabGroup)
        starts.push_back(std::max<int64_t>(b - s.slabGroup, 0));
      std::reverse(starts.begin(), starts.end());
      starts.push_back(s.slabSplit); // the workspace's slabs, to the last
      for (size_t g = 0; g < starts.size(); ++g) {
        const int64_t a = starts[g];
        const int64_t b = g + 1 < starts.size() ? starts[g + 1] : s.slabs;
        it.chunkIndex = static_cast<int64_t>(g);
        it.chunkBegin = a * kSlabCols;
        it.chunkCols = std::min(b * kSlabCols, loopCols) - it.chunkBegin;
        for (int32_t k : step.loopKernels)
          if (isSlabDb(k)) {
            it.kernel = k;
            items.push_back(it);
          }
      }
      return;
    }
    for (int64_t c = 0; c < s.chunks; ++c) {
      it.chunkIndex = c;
      it.chunkBegin = c * s.chunkCols;
      it.chunkCols = std::min(s.chunkCols, loopCols - it.chunkBegin);
      for (int32_t k : step.loopKernels) {
        if (!launches(k, rows, it.chunkCols))
          continue;
        it.kernel = k;
        items.push_back(it);
      }
    }
  };
  for (int32_t i = 0; i < static_cast<int32_t>(steps.size());) {
    if (i == first && s.rowBlocks > 1) {
      // [Note: stored values in dW]: the first block of slabRows rows, then ordinary ones.
      const int64_t head = s.slabGroup > 0 ? s.slabRows : 0;
      for (int64_t b = 0; b < s.rowBlocks; ++b) {
        int64_t begin = head > 0 ? (b == 0 ? 0 : head + (b - 1) * s.rowsPerBlock)
                                 : b * s.rowsPerBlock;
        int64_t rows = head > 0 && b == 0 ? head : std::min(s.rowsPerBlock, s.n - begin);
        for (int32_t j = first; j <= last; ++j)
          emitStep(j, begin, rows, b);
      }
      i = last + 1;
      continue;
    }
    emitStep(i, 0, s.n, 0);
    ++i;
  }
  return items;
}

bool Program::launches(int32_t k, int64_t rows, int64_t cols) const {
  const auto *d = std::get_if<GemmDLhsKernel>(&kernels.at(static_cast<size_t>(k)).body);
  if (!d)
    return true;
  const int32_t primary = d->alternativeOf >= 0 ? d->alternativeOf : k;
  int32_t best = -1;
  double bestCost = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(kernels.size()); ++i) {
    const auto *e = std::get_if<GemmDLhsKernel>(&kernels[static_cast<size_t>(i)].body);
    if (!e || (i != primary && e->alternativeOf != primary))
      continue;
    const double c = lhsLaunchCost(rows, e->k, (cols + 63) / 64, target.numSMs,
                                   std::max(e->tile.splitK, 1), e->tile.bn);
    if (best < 0 || c < bestCost * (1 - 1e-9)) { // the primary (first) on a tie
      best = i;
      bestCost = c;
    }
  }
  return best == k;
}

int64_t Program::rowStrideBytes(const BufferRef &b) const {
  auto tensorRow = [](const TensorSpec &t) -> int64_t {
    if (t.shape.empty() || t.shape[0] >= 0)
      return 0;
    int64_t e = dtypeSize(t.dtype);
    for (size_t i = 1; i < t.shape.size(); ++i)
      e *= t.shape[i];
    return e;
  };
  switch (b.space) {
  case Space::Input:
    return tensorRow(inputs.at(static_cast<size_t>(b.index)));
  case Space::Output:
    return tensorRow(outputs.at(static_cast<size_t>(b.index)));
  case Space::Workspace: {
    const BufferSpec &w = workspace.at(static_cast<size_t>(b.index));
    return w.blockLocal ? 0 : w.bytesPerRow;
  }
  }
  return 0;
}

static int64_t dzBytes(DzFormat f) { return f == DzFormat::F32 ? 4 : 2; }

namespace {
/// [Note: sm90 multicast], [Note: dB multicast]: the cluster a launch gets, clusterM or the
/// largest power of two below it for which `fits(c)` (the launch's tiles group into
/// clusters of c), else 1 (no cluster).
template <class Fits> int32_t largestCluster(int32_t clusterM, Fits fits) {
  for (int32_t c = clusterM; c > 1; c /= 2)
    if (fits(c))
      return c;
  return 1;
}
} // namespace

LaunchDims Program::launchDims(int32_t idx, int64_t n, int64_t cc, int32_t runSplits,
                               bool chain) const {
  LCEJIT_CHECK(idx >= 0 && idx < static_cast<int32_t>(kernels.size()), "kernel index {}", idx);
  LCEJIT_CHECK(runSplits >= 0 && runSplits <= splits, "kernel index {}: {} splits of at most {}",
               idx, runSplits, splits);
  const int32_t splits = runSplits > 0 ? runSplits : this->splits;
  LaunchDims d;
  const Kernel &kernel = kernels[static_cast<size_t>(idx)];
  if (isGemmKind(kernel.kind()) && gemmMath(kernel) == MathMode::WgmmaBF16) {
    // [Note: the Hopper mainloop]: 384 threads; GemmReduce runs one CTA per (row tile,
    // split), the others are persistent over their output tiles.
    const TileConfig &t = gemmTile(kernel);
    d.block = 384;
    d.sharedBytes = wgmmaSharedBytes(t);
    int64_t rows = 0, cols = 0;
    switch (kernel.kind()) {
    case KernelKind::GemmReduce:
      // One CTA per (row tile, split), grouped order; with ping-pong each CTA split fills
      // two partial entries (one per consumer), so it has splits / 2 of them.
      d.grid[0] = ceilDiv(n, 128) * (t.twoEntries() ? splits / 2 : splits);
      // [Note: sm90 multicast]: clusters of c CTAs on row tiles (c i .. c i + c - 1) of one
      // split, which the grouped order makes consecutive when the row tiles are a multiple
      // of c: c = clusterM, else the largest power of two below it that divides them
      // (quads fall back to pairs; the kernel loads the parts a smaller cluster leaves).
      d.cluster = largestCluster(t.clusterM, [&](int32_t c) { return ceilDiv(n, 128) % c == 0; });
      return d;
    case KernelKind::GemmDz:
      // [Note: a per-row reference]: a filtered dZ GEMM runs kRowFilterSplits CTAs per row
      // tile (most return at once).
      if (std::get<GemmDzKernel>(kernel.body).rowFilter.valid()) {
        d.grid[0] = ceilDiv(n, 128) * kRowFilterSplits;
        return d;
      }
      rows = n;
      cols = cc;
      break;
    case KernelKind::GemmDLhs: {
      rows = n;
      cols = std::get<GemmDLhsKernel>(kernel.body).k;
      // [Note: sm90 split-K]: a cluster of `split` CTAs per tile, one tile per cluster.
      const int32_t split = t.splitK > 1 ? chooseSplitK(ceilDiv(rows, 128) * ceilDiv(cols, t.bn),
                                                        ceilDiv(cc, 64), target.numSMs, t.splitK)
                                         : 1;
      if (split > 1) {
        d.grid[0] = ceilDiv(rows, 128) * ceilDiv(cols, t.bn) * split;
        d.cluster = split;
        return d;
      }
      const int64_t tiles = ceilDiv(rows, 128) * ceilDiv(cols, t.bn);
      // [Note: dA stream-K chains]: the last round in chains of q tiles on q + 1 CTAs, all
      // resident at once.
      if (chain && std::get<GemmDLhsKernel>(kernel.body).chain.valid())
        if (const int64_t ctas = lhsChainCtas(tiles, ceilDiv(cc, 64), target.numSMs); ctas > 0) {
          d.grid[0] = ctas;
          d.cooperative = true;
          return d;
        }
      // [Note: dA stream-K]: 3 tiles to each group of 4 CTAs, all resident at once; a
      // launch of more tiles than SMs runs its whole rounds on every SM first.
      if (std::get<GemmDLhsKernel>(kernel.body).streamK.valid() &&
          lhsStreamK(tiles, ceilDiv(cc, 64), target.numSMs)) {
        const int64_t sms = std::max<int32_t>(target.numSMs, 1);
        d.grid[0] = tiles <= sms ? tiles / 3 * 4 : sms;
        d.cooperative = true;
        return d;
      }
      break;
    }
    case KernelKind::GemmDRhs: rows = cc; cols = std::get<GemmDRhsKernel>(kernel.body).k; break;
    default: break;
    }
    const int64_t tiles = ceilDiv(rows, 128) * ceilDiv(cols, t.bn);
    d.grid[0] = std::min<int64_t>(tiles, std::max<int32_t>(target.numSMs, 1));
    // [Note: dB multicast]: clusters of c CTAs where every cluster walks c adjacent row
    // tiles of one column tile: the row tiles, the CTAs and the order's group of 8 each a
    // multiple of c (c = clusterM, else the largest power of two below it that fits).
    if (kernel.kind() == KernelKind::GemmDRhs)
      d.cluster = largestCluster(t.clusterM, [&](int32_t c) {
        return ceilDiv(rows, 128) % c == 0 && d.grid[0] % c == 0 && kDRhsOrderGroup % c == 0;
      });
    return d;
  }
  switch (kernel.kind()) {
  case KernelKind::Row:
    d.block = 256;
    d.grid[0] = std::max<int64_t>(1, ceilDiv(n, 256));
    break;
  case KernelKind::GemmReduce: {
    const auto &k = std::get<GemmReduceKernel>(kernel.body);
    d.block = k.gemm.tile.threads();
    d.grid[0] = ceilDiv(n, k.gemm.tile.bm);
    d.grid[1] = splits;
    int64_t s = dtypeSize(k.gemm.abType);
    d.sharedBytes = gemmSharedBytes(k.gemm.tile, s, s, 1);
    break;
  }
  case KernelKind::GemmDz: {
    const auto &k = std::get<GemmDzKernel>(kernel.body);
    d.block = k.gemm.tile.threads();
    d.grid[0] = ceilDiv(n, k.gemm.tile.bm);
    d.grid[1] = ceilDiv(cc, k.gemm.tile.bn);
    int64_t s = dtypeSize(k.gemm.abType);
    d.sharedBytes = gemmSharedBytes(k.gemm.tile, s, s, 1);
    break;
  }
  case KernelKind::GemmDLhs: {
    const auto &k = std::get<GemmDLhsKernel>(kernel.body);
    d.block = k.tile.threads();
    d.grid[0] = ceilDiv(n, k.tile.bm);
    d.grid[1] = ceilDiv(k.k, k.tile.bn);
    int32_t numA = k.format == DzFormat::SplitBF16 ? 2 : 1;
    d.sharedBytes = gemmSharedBytes(k.tile, dzBytes(k.format), dtypeSize(k.bType), numA);
    break;
  }
  case KernelKind::GemmDRhs: {
    const auto &k = std::get<GemmDRhsKernel>(kernel.body);
    d.block = k.tile.threads();
    d.grid[0] = ceilDiv(cc, k.tile.bm);
    d.grid[1] = ceilDiv(k.k, k.tile.bn);
    int32_t numA = k.format == DzFormat::SplitBF16 ? 2 : 1;
    d.sharedBytes = gemmSharedBytes(k.tile, dzBytes(k.format), dtypeSize(k.aType), numA);
    break;
  }
  case KernelKind::DzForm: {
    // Grid-stride over 8-column vectors (row-scaled: over rows and 8-element vectors of A).
    const auto &k = std::get<DzFormKernel>(kernel.body);
    d.block = 256;
    if (k.scaleValues) {
      // [Note: values scaled in place]: y over the 128-column groups (slabs), x over the
      // rows, 16 threads a row of the group (16 bytes each), grid-stride over rows.
      d.grid[0] = std::min<int64_t>(ceilDiv(n, 32), 16);
      d.grid[1] = ceilDiv(k.cols, 128);
      break;
    }
    const int64_t vecs = k.rowScaled ? std::max<int64_t>(k.aScaled.valid() ? k.k / 8 : 1, 1)
                                     : k.cols / 8;
    d.grid[0] = std::min<int64_t>(ceilDiv(n * vecs, 256 * 2), int64_t(132) * 16);
    break;
  }
  case KernelKind::TargetCorrection:
    if (std::get<TargetCorrectionKernel>(kernel.body).findGroups) {
      // [Note: a group's first and last rows]: one thread per row (grid-stride).
      d.block = 256;
      d.grid[0] = std::min<int64_t>(ceilDiv(n, 256), int64_t(132) * 8);
      break;
    }
    [[fallthrough]];
  case KernelKind::RowDot: {
    // One warp per row of the launch (grid-stride), 8 warps a block.
    d.block = 256;
    d.grid[0] = std::min<int64_t>(ceilDiv(n, 8), int64_t(132) * 8);
    break;
  }
  case KernelKind::Cast: {
    const auto &k = std::get<CastKernel>(kernel.body);
    d.block = 256;
    d.grid[0] = std::min<int64_t>(ceilDiv((k.rows >= 0 ? k.rows : n) * k.k, 256 * 4),
                                  int64_t(1) << 16);
    break;
  }
  }
  return d;
}

std::vector<int64_t> Program::workspaceOffsets(int64_t n, int64_t *totalBytes) const {
  return workspaceOffsets(runSchedule(n), totalBytes);
}

int64_t Program::slabValuesBytes(const RunSchedule &s) const {
  if (s.slabGroup <= 0 || schedule.slabValues < 0)
    return 0;
  const BufferSpec &b = workspace.at(static_cast<size_t>(schedule.slabValues));
  // The workspace's slabs (slabHead rows each), then every slab's tail ([Note: slab tails]).
  const int64_t head = std::min(s.slabHead, s.slabRows);
  return (b.bytesPerRowCol * kSlabCols *
              (head * (s.slabs - s.slabSplit) + (s.slabRows - head) * s.slabs) +
          255) / 256 * 256;
}

int64_t Program::slabScaledABytes(const RunSchedule &s) const {
  if (s.slabGroup <= 0 || schedule.slabScaledA < 0)
    return 0;
  const BufferSpec &b = workspace.at(static_cast<size_t>(schedule.slabScaledA));
  return bufferBytes(b, s.n, s.slabRows, s.chunkCols) * std::max(schedule.slabScaledAParts, 1);
}

int64_t Program::slabUnionOffset(const RunSchedule &s, int32_t index) const {
  if (s.slabGroup <= 0 || index < 0 || index >= static_cast<int32_t>(workspace.size()) ||
      index == schedule.slabValues || !workspace[static_cast<size_t>(index)].blockLocal)
    return -1;
  if (index == schedule.slabScaledA)
    return slabValuesBytes(s);
  // [Note: dA stream-K chains]: the chain's slots after everything else, only where the
  // schedule has them.
  const bool chain = index == schedule.lhsChain;
  if (chain && s.lhsChainBytes <= 0)
    return -1;
  int64_t off = slabValuesBytes(s) + (slabScaledABytes(s) + 255) / 256 * 256;
  for (int32_t i = 0; i < static_cast<int32_t>(workspace.size()) && (chain || i < index); ++i) {
    const BufferSpec &b = workspace[static_cast<size_t>(i)];
    if (i != schedule.slabValues && i != schedule.slabScaledA && i != schedule.lhsChain &&
        b.blockLocal)
      off += (bufferBytes(b, s.n, s.slabRows, s.chunkCols) + 255) / 256 * 256;
  }
  return off;
}

int64_t Program::slabUnionBytes(const RunSchedule &s) const {
  if (s.slabGroup <= 0)
    return 0;
  int64_t bytes = slabValuesBytes(s) + (slabScaledABytes(s) + 255) / 256 * 256;
  for (int32_t i = 0; i < static_cast<int32_t>(workspace.size()); ++i) {
    const BufferSpec &b = workspace[static_cast<size_t>(i)];
    if (i != schedule.slabValues && i != schedule.slabScaledA && i != schedule.lhsChain &&
        b.blockLocal)
      bytes += (bufferBytes(b, s.n, s.slabRows, s.chunkCols) + 255) / 256 * 256;
  }
  // [Note: dA stream-K chains]: the chain's slots last.
  return bytes + (s.lhsChainBytes + 255) / 256 * 256;
}

std::vector<int64_t> Program::workspaceOffsets(const RunSchedule &s, int64_t *totalBytes) const {
  std::vector<int64_t> offs;
  int64_t off = 0;
  for (size_t i = 0; i < workspace.size(); ++i) {
    const BufferSpec &b = workspace[i];
    offs.push_back(off);
    int64_t bytes = bufferBytes(b, s.n, s.rowsPerBlock, s.chunkCols);
    if (s.slabGroup > 0) {
      // [Note: stored values in dW]: what the ordinary blocks need, or the slab block:
      // the slabs from slabSplit on and, after them in the same buffer, every part of the
      // scaled A (slabScaledA itself then serves the ordinary blocks alone).
      // The slab block's other block-local buffers live in the values' buffer too.
      if (s.rowBlocks <= 1 && b.blockLocal)
        bytes = 0;
      if (static_cast<int32_t>(i) == schedule.slabValues)
        bytes = std::max(bytes, slabUnionBytes(s));
    }
    off += (bytes + 255) / 256 * 256;
  }
  if (totalBytes)
    *totalBytes = off;
  return offs;
}

//===----------------------------------------------------------------------===//
// Buckets
//===----------------------------------------------------------------------===//

int64_t bucketOf(int64_t n) {
  LCEJIT_CHECK(n >= 0, "bucketOf({})", n);
  int64_t b = 256;
  while (b < n)
    b *= 4;
  return b;
}

int64_t bucketLowerBound(int64_t bucket) { return bucket <= 256 ? 0 : bucket / 4 + 1; }

void forEachBufferRef(Program &p, const std::function<void(BufferRef &)> &f) {
  for (Kernel &k : p.kernels)
    forEachBufferRef(k, f);
}

void forEachBufferRef(Kernel &k, const std::function<void(BufferRef &)> &f) {
  auto operands = [&](std::vector<Operand> &ops) {
    for (Operand &o : ops)
      f(o.buf);
  };
  auto gemm = [&](FusedGemm &g) {
    f(g.a);
    f(g.b);
    operands(g.args);
  };
  std::visit(
        [&](auto &b) {
          using T = std::decay_t<decltype(b)>;
          if constexpr (std::is_same_v<T, RowKernel>) {
            operands(b.args);
            for (RowKernel::Sink &s : b.sinks)
              f(s.buf);
          } else if constexpr (std::is_same_v<T, GemmReduceKernel>) {
            gemm(b.gemm);
            f(b.partials);
            if (b.stored) {
              f(b.stored->values);
              f(b.stored->tileMax);
            }
          } else if constexpr (std::is_same_v<T, GemmDzKernel>) {
            gemm(b.gemm);
            f(b.dz);
            f(b.dzLo);
            f(b.residual.buf);
            f(b.residual.target);
            f(b.rowFilter);
          } else if constexpr (std::is_same_v<T, TargetCorrectionKernel>) {
            f(b.residual.buf);
            f(b.residual.target);
            f(b.a);
            f(b.out);
            f(b.sums.sums);
            f(b.sums.head);
            f(b.sums.target);
            f(b.groups);
          } else if constexpr (std::is_same_v<T, RowDotKernel>) {
            f(b.a);
            f(b.b);
            f(b.target);
            f(b.out);
          } else if constexpr (std::is_same_v<T, GemmDLhsKernel>) {
            f(b.dz);
            f(b.dzLo);
            f(b.b);
            f(b.out);
            f(b.residual.buf);
            f(b.residual.target);
            f(b.rowScale);
            f(b.streamK);
            f(b.chain);
          } else if constexpr (std::is_same_v<T, GemmDRhsKernel>) {
            f(b.dz);
            f(b.dzLo);
            f(b.a);
            f(b.out);
            f(b.targetSums.sums);
            f(b.targetSums.head);
            f(b.targetSums.target);
          } else if constexpr (std::is_same_v<T, DzFormKernel>) {
            f(b.dz);
            f(b.tileMax);
            f(b.lse);
            f(b.scale);
            f(b.targetDz);
            f(b.target);
            f(b.residual);
            f(b.rowScale);
            f(b.a);
            f(b.aScaled);
            f(b.referenceRow);
            f(b.recompute);
          } else if constexpr (std::is_same_v<T, CastKernel>) {
            f(b.in);
            f(b.out);
          }
        },
        k.body);
}

void removeKernel(Program &p, int32_t index) {
  LCEJIT_CHECK(index >= 0 && index < static_cast<int32_t>(p.kernels.size()),
               "removeKernel: index {} of {} kernels", index, p.kernels.size());
  auto remap = [&](int32_t &k) {
    if (k > index)
      --k;
  };
  for (auto it = p.steps.begin(); it != p.steps.end();) {
    if (it->kind == Step::Kind::Launch && it->kernel == index) {
      // Keep the blocked step range on the same steps.
      const int32_t at = static_cast<int32_t>(it - p.steps.begin());
      ScheduleSpec &sc = p.schedule;
      if (sc.firstBlockedStep >= 0) {
        if (sc.firstBlockedStep > at)
          --sc.firstBlockedStep;
        if (sc.lastBlockedStep >= at)
          --sc.lastBlockedStep;
        if (sc.lastBlockedStep < sc.firstBlockedStep)
          sc.firstBlockedStep = sc.lastBlockedStep = -1;
      }
      it = p.steps.erase(it);
      continue;
    }
    std::erase(it->loopKernels, index);
    if (it->kind == Step::Kind::Launch)
      remap(it->kernel);
    for (int32_t &k : it->loopKernels)
      remap(k);
    ++it;
  }
  p.kernels.erase(p.kernels.begin() + index);
  for (Kernel &k : p.kernels) {
    auto fix = [&](std::vector<Operand> &ops) {
      for (Operand &o : ops) {
        LCEJIT_CHECK(o.partialsOf != index, "removeKernel: kernel {}'s partials are still read",
                     index);
        if (o.partialsOf >= 0)
          remap(o.partialsOf);
      }
    };
    if (auto *r = std::get_if<RowKernel>(&k.body))
      fix(r->args);
    else if (auto *g = std::get_if<GemmReduceKernel>(&k.body))
      fix(g->gemm.args);
    else if (auto *d = std::get_if<GemmDzKernel>(&k.body))
      fix(d->gemm.args);
  }
}

void setTargetGroupRows(Program &p, int64_t rows) {
  LCEJIT_CHECK(rows > 0, "setTargetGroupRows: rows = {}", rows);
  for (Kernel &k : p.kernels) {
    if (auto *t = std::get_if<TargetCorrectionKernel>(&k.body); t && t->sums.valid()) {
      t->sums.groupRows = rows;
      p.workspace.at(static_cast<size_t>(t->sums.head.index)).bytesPerRow =
          (t->sums.cols * 4 + rows - 1) / rows;
    }
    if (auto *d = std::get_if<GemmDRhsKernel>(&k.body); d && d->targetSums.valid())
      d->targetSums.groupRows = rows;
  }
}

void removeWorkspaceBuffer(Program &p, int32_t index) {
  LCEJIT_CHECK(index > kErrorBuffer && index < static_cast<int32_t>(p.workspace.size()),
               "removeWorkspaceBuffer: index {} of {} buffers", index, p.workspace.size());
  const std::string name = p.workspace[static_cast<size_t>(index)].name;
  forEachBufferRef(p, [&](BufferRef &b) {
    if (b.space != Space::Workspace || b.index < index)
      return;
    LCEJIT_CHECK(b.index != index, "removeWorkspaceBuffer: buffer '{}' is still used", name);
    --b.index;
  });
  // The schedule's buffer indices too.
  for (int32_t *i : {&p.schedule.slabValues, &p.schedule.slabScaledA, &p.schedule.lhsChain}) {
    LCEJIT_CHECK(*i != index, "removeWorkspaceBuffer: buffer '{}' is still used by the schedule",
                 name);
    if (*i > index)
      --*i;
  }
  p.workspace.erase(p.workspace.begin() + index);
}

} // namespace lcejit::plan
