//===- GemmEmitter.cpp - The four GEMM kinds -> config + functor + wrapper
//-===//
//
// Generated shape (docs/codegen.md):
//
//   typedef lcejit::GemmConfig<BM, BN, BK, WARPS_M, WARPS_N, STAGES, MATH,
//                              ElemA, NUM_A, MAJOR_A, ElemB, MAJOR_B>
//                              <name>_config;
//   static_assert(<name>_config::SMEM_BYTES ==
//   <plan::launchDims().sharedBytes>, ...); struct <name>_epilogue { ... };
//   GemmReduce and GemmDz only extern "C" __global__ void <name>(<params>) {
//     <fill the epilogue from the parameters>
//     lcejit::gemm_<kind>_kernel<<name>_config, ...>(...);
//   }
//
// The epilogue functor (interface in lcejit_kernels.cuh):
//   members      the buffers its operands read (named like the kernel
//   parameters), n,
//                and one `a<i>` per Scalar operand (load_scalars(): once per
//                CTA)
//   struct Row   one `a<i>` per Row operand;    load_row(row), rows < n only
//   struct Col   one `a<i>` per Col operand;    load_col(col), columns in range
//   only accumulate / value   the ScalarFunc per (row, col): Acc -> acc,
//   ColIndex -> col,
//                RowIndex -> row, Row -> r.a<i>, Col -> c.a<i>, Scalar -> a<i>
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/KernelEmitters.h"
#include "compiler/codegen/ScalarEmitter.h"
#include "compiler/support/Check.h"

#include <fmt/ranges.h>

#include <cmath>

namespace lcejit::codegen::detail {

using plan::BufferRef;
using plan::DzFormat;
using plan::FusedGemm;
using plan::MathMode;
using plan::Operand;
using plan::ScalarFunc;
using plan::ScalarInst;
using plan::ScalarOp;
using plan::Param;
using plan::Space;
using plan::TileConfig;

namespace {

const char *elemTag(DType t) {
  const char *tag = gemmElemTag(t);
  LCEJIT_CHECK(tag != nullptr, "no GEMM element type for {}", dtypeName(t));
  return tag;
}

const char *mathEnum(MathMode m) {
  switch (m) {
  case MathMode::TensorCoreBF16:
    return "lcejit::MATH_TC_BF16";
  case MathMode::TensorCoreF16:
    return "lcejit::MATH_TC_F16";
  case MathMode::SimtF32:
    return "lcejit::MATH_SIMT_F32";
  case MathMode::WgmmaBF16:
    break; // lcejit::sm90::GemmConfig has no math parameter
  }
  return "?";
}

std::string dzElemName(DzFormat f) {
  return f == DzFormat::F32 ? "f32" : "bf16";
}
DType dzElem(DzFormat f) {
  return f == DzFormat::F32 ? DType::F32 : DType::BF16;
}
const char *dzFormatTag(DzFormat f) {
  switch (f) {
  case DzFormat::SplitBF16:
    return "DZ_SPLIT_BF16";
  case DzFormat::F32:
    return "DZ_F32";
  case DzFormat::BF16:
    return "DZ_BF16";
  }
  return "?";
}

/// The static shape of one GEMM: everything GemmConfig<> takes.
struct GemmShape {
  MathMode math = MathMode::TensorCoreBF16;
  TileConfig tile;
  DType aElem = DType::BF16;
  int32_t numA = 1;
  bool aKMajor = true;
  DType bElem = DType::BF16;
  bool bKMajor = true;
};

/// Rejects shapes the templates cannot run, with the reason (the device-side
/// static_asserts say the same, later and less clearly).
void checkShape(const GemmShape &s, const std::string &what) {
  const TileConfig &t = s.tile;
  if (s.math == MathMode::WgmmaBF16) {
    LCEJIT_CHECK(t.bm == 128 && t.bk == 64 && t.warpsM == 3 && t.warpsN == 4,
                 "{}: the wgmma mainloop runs 128 x bn x 64 tiles on 3 x 4 warps, not "
                 "{}x{}x{} on {}x{}",
                 what, t.bm, t.bn, t.bk, t.warpsM, t.warpsN);
    LCEJIT_CHECK(t.bn == 64 || t.bn == 128 || t.bn == 192 || t.bn == 256,
                 "{}: wgmma tile width bn = {} (64, 128, 192 or 256)", what, t.bn);
    LCEJIT_CHECK(!t.pingpong || t.bn <= 128,
                 "{}: a ping-pong wgmma tile is at most 128 wide, not {}", what, t.bn);
    LCEJIT_CHECK(t.stages >= 2 && t.stages <= 8, "{}: {} stages (2 to 8)", what, t.stages);
    LCEJIT_CHECK(!t.halves || (t.bn == 256 && !t.pingpong && !t.tmaStore && t.splitK == 1 &&
                               s.bKMajor),
                 "{}: column halves are a cooperative 128 x 256 tile with a K-major B, "
                 "without a TMA store or split-K ([Note: sm90 column halves])",
                 what);
    LCEJIT_CHECK(!t.tmaStore || !t.pingpong,
                 "{}: the TMA store epilogue runs on cooperative consumers only", what);
    LCEJIT_CHECK(t.clusterM == 1 ||
                     ((t.clusterM == 2 || t.clusterM == 4) &&
                      (s.bKMajor || (t.bn / 64) % t.clusterM == 0)),
                 "{}: clusterM = {} (1, or 2 or 4 with a K-major B or an MN-major B of a "
                 "multiple of clusterM 64-column boxes, bn = {}: [Note: sm90 multicast])",
                 what, t.clusterM, t.bn);
    LCEJIT_CHECK(t.splitK == 1 || ((t.splitK == 2 || t.splitK == 4) && !t.pingpong &&
                                   !t.tmaStore && t.clusterM == 1),
                 "{}: splitK = {} (1, or 2 or 4 on cooperative consumers without clusters "
                 "or a TMA store: [Note: sm90 split-K])",
                 what, t.splitK);
    LCEJIT_CHECK(plan::wgmmaSharedBytes(t) <= 232448,
                 "{}: {} bytes of shared memory for bn = {} and {} stages", what,
                 plan::wgmmaSharedBytes(t), t.bn, t.stages);
    LCEJIT_CHECK(s.aElem == DType::BF16 && s.bElem == DType::BF16 && s.numA == 1,
                 "{}: the wgmma mainloop takes one bf16 A operand and a bf16 B, not {} x{} "
                 "and {}",
                 what, dtypeName(s.aElem), s.numA, dtypeName(s.bElem));
    return;
  }
  LCEJIT_CHECK(!t.pingpong, "{}: ping-pong consumers exist only on the wgmma mainloop", what);
  LCEJIT_CHECK(t.bm > 0 && t.bn > 0 && t.bk > 0 && t.warpsM > 0 && t.warpsN > 0,
               "{}: tile {}x{}x{} warps {}x{}", what, t.bm, t.bn, t.bk,
               t.warpsM, t.warpsN);
  LCEJIT_CHECK(t.bm % 8 == 0 && t.bn % 8 == 0 && t.bk % 8 == 0,
               "{}: tile {}x{}x{}: every size must be a multiple of 8", what,
               t.bm, t.bn, t.bk);
  LCEJIT_CHECK(t.bm % t.warpsM == 0 && t.bn % t.warpsN == 0,
               "{}: warps {}x{} do not divide the tile {}x{}", what, t.warpsM,
               t.warpsN, t.bm, t.bn);
  LCEJIT_CHECK(t.stages >= 2, "{}: {} stages; the pipeline needs at least 2",
               what, t.stages);
  LCEJIT_CHECK(t.threads() <= 1024, "{}: {} threads per block", what,
               t.threads());
  LCEJIT_CHECK(s.numA == 1 || s.numA == 2, "{}: {} A operands", what, s.numA);
  const int wm = t.bm / t.warpsM, wn = t.bn / t.warpsN;
  if (s.math == MathMode::SimtF32) {
    LCEJIT_CHECK(wm % 8 == 0 && wn % 4 == 0,
                 "{}: SIMT warp tile {}x{} must be a multiple of 8x4", what, wm,
                 wn);
    for (DType e : {s.aElem, s.bElem})
      LCEJIT_CHECK(e == DType::BF16 || e == DType::F16 || e == DType::F32,
                   "{}: SIMT operand type {}", what, dtypeName(e));
  } else {
    DType want = s.math == MathMode::TensorCoreBF16 ? DType::BF16 : DType::F16;
    LCEJIT_CHECK(s.aElem == want && s.bElem == want,
                 "{}: math {} needs {} operands, got A {} and B {}", what,
                 plan::mathModeName(s.math), dtypeName(want),
                 dtypeName(s.aElem), dtypeName(s.bElem));
    LCEJIT_CHECK(wm % 16 == 0 && wn % 8 == 0 && t.bk % 16 == 0,
                 "{}: mma.sync m16n8k16 needs a warp tile multiple of 16x8 and "
                 "BK multiple "
                 "of 16 (warp tile {}x{}, BK {})",
                 what, wm, wn, t.bk);
  }
}

void emitConfig(CodeWriter &w, const KernelContext &ctx, const GemmShape &s) {
  const TileConfig &t = s.tile;
  const std::string cfg = ctx.name() + "_config";
  LCEJIT_CHECK(!t.tmaStore || (s.math == MathMode::WgmmaBF16 &&
                               ctx.kernel().kind() == plan::KernelKind::GemmDRhs),
               "kernel '{}': only a wgmma GemmDRhs writes its output through TMA (tmaStore)",
               ctx.name());
  LCEJIT_CHECK(t.clusterM == 1 || (s.math == MathMode::WgmmaBF16 &&
                                     (ctx.kernel().kind() == plan::KernelKind::GemmReduce ||
                                      ctx.kernel().kind() == plan::KernelKind::GemmDRhs)),
               "kernel '{}': only a wgmma GemmReduce or GemmDRhs runs as clusters "
               "(clusterM = {}: [Note: sm90 multicast], [Note: dB multicast])",
               ctx.name(), t.clusterM);
  LCEJIT_CHECK(!t.halves || ctx.kernel().kind() == plan::KernelKind::GemmReduce,
               "kernel '{}': only a wgmma GemmReduce runs column halves", ctx.name());
  LCEJIT_CHECK(t.splitK == 1 || (s.math == MathMode::WgmmaBF16 &&
                                  ctx.kernel().kind() == plan::KernelKind::GemmDLhs),
               "kernel '{}': only a wgmma GemmDLhs splits K over a cluster (splitK = {})",
               ctx.name(), t.splitK);
  if (s.math == MathMode::WgmmaBF16) {
    w.line("#if !defined(LCEJIT_SM90)");
    w.line("#error \"kernel {} runs the sm_90a mainloop: compile with "
           "--gpu-architecture=sm_90a\"",
           ctx.name());
    w.line("#endif");
    w.line("{}", sm90GemmConfigTypedef(cfg, t.bn, t.stages, s.aKMajor, s.bKMajor, t.pingpong,
                                       t.tmaStore, t.clusterM, t.splitK, t.bm, t.halves));
    w.line("static_assert({}::SMEM_BYTES == {}, \"shared-memory layout must match "
           "plan::wgmmaSharedBytes\");",
           cfg, ctx.launchDims().sharedBytes);
    if (t.tmaStore)
      w.line("static_assert({}::LOADED_SUMS == {}, \"the accumulating epilogue must match "
             "plan::wgmmaLoadedSums\");",
             cfg, plan::wgmmaLoadedSums(t) ? "true" : "false");
    w.blank();
    return;
  }
  w.line("typedef lcejit::GemmConfig<{}, {}, {}, {}, {}, {}, {},", t.bm, t.bn,
         t.bk, t.warpsM, t.warpsN, t.stages, mathEnum(s.math));
  w.line("                           {}, {}, lcejit::{},", elemTag(s.aElem),
         s.numA, s.aKMajor ? "K_MAJOR" : "MN_MAJOR");
  w.line("                           {}, lcejit::{}>", elemTag(s.bElem),
         s.bKMajor ? "K_MAJOR" : "MN_MAJOR");
  w.line("    {};", cfg);
  w.line(
      "static_assert({}::SMEM_BYTES == {}, \"shared-memory layout must match "
      "plan::gemmSharedBytes\");",
      cfg, ctx.launchDims().sharedBytes);
  w.blank();
}

std::string tileText(const GemmShape &s) {
  const TileConfig &t = s.tile;
  if (s.math == MathMode::WgmmaBF16)
    return fmt::format("math {}, tile {}x{}x{}, 384 threads (TMA producer warpgroup + 2 "
                       "wgmma consumer warpgroups, {}), {} stages{}{}{}",
                       plan::mathModeName(s.math), t.bm, t.bn, t.bk,
                       t.pingpong ? "ping-pong: alternate tiles"
                       : t.halves ? "cooperative: each consumer all rows, half the columns"
                                  : "cooperative",
                       t.stages,
                       t.tmaStore ? (plan::wgmmaLoadedSums(t)
                                         ? "; f32 tiles out through shared memory and TMA "
                                           "(an accumulating tile adds to its old values, "
                                           "loaded through the ring)"
                                         : "; f32 tiles out through shared memory and TMA")
                                  : "",
                       t.clusterM > 1 ? fmt::format("; clusters of {} along the rows share "
                                                    "each B tile by TMA multicast when the "
                                                    "row tiles group so",
                                                    t.clusterM)
                                      : "",
                       t.splitK > 1 ? fmt::format("; up to {} CTAs (a cluster) per tile, each "
                                                  "over part of K, when the call's tiles leave "
                                                  "SMs idle ([Note: sm90 split-K])",
                                                  t.splitK)
                                    : "");
  return fmt::format(
      "math {}, tile {}x{}x{}, warps {}x{} ({} threads), {} stages",
      plan::mathModeName(s.math), t.bm, t.bn, t.bk, t.warpsM, t.warpsN,
      t.threads(), t.stages);
}

std::string smemText(const KernelContext &ctx) {
  const bool wgmma = plan::gemmMath(ctx.kernel()) == MathMode::WgmmaBF16;
  return fmt::format("dynamic shared memory: {} bytes (plan::{})",
                     ctx.launchDims().sharedBytes,
                     wgmma ? "wgmmaSharedBytes" : "gemmSharedBytes");
}

bool isWgmma(const KernelContext &ctx) {
  return plan::gemmMath(ctx.kernel()) == MathMode::WgmmaBF16;
}

/// The grid line of a kernel's header comment.
std::string gridText(const KernelContext &ctx, const char *mmaGrid) {
  return isWgmma(ctx) ? "grid: persistent, min(output tiles, SMs) CTAs walking the tiles in "
                        "groups of 8 tile rows"
                      : mmaGrid;
}

/// The kernel's opening line: 384 threads at one CTA per SM for wgmma (setmaxnreg needs
/// the register count fixed at entry).
/// Then, first in the body, the launch contract (launch_ok in lcejit_common.cuh): the
/// block size and dynamic shared memory of the config, and the grid the template assumes
/// (Program::launchDims): mma.sync kernels one CTA per output tile, wgmma GemmReduce one
/// per (row tile, split), the other wgmma kernels persistent (any x). A violation is
/// recorded in the error word with the kernel's index, and the kernel returns.
CodeWriter::Block openGemmKernel(CodeWriter &w, const KernelContext &ctx, int threads) {
  CodeWriter::Block b =
      isWgmma(ctx) ? openKernel(w, ctx, 384, 1) : openKernel(w, ctx, threads);
  const std::string cfg = ctx.name() + "_config";
  const std::string &n = ctx.scalarParamName(Param::Kind::N);
  auto ceil = [&](const std::string &x, const char *tile) {
    return fmt::format("lcejit::ceil_div({}, {}::{})", x, cfg, tile);
  };
  std::string gx = "-1", gy = "1";
  switch (ctx.kernel().kind()) {
  case plan::KernelKind::GemmReduce:
    if (isWgmma(ctx)) {
      // Ping-pong or column halves: two partial entries per CTA split, so splits is even
      // (an odd one expects no grid at all: 0 never matches a launch).
      const std::string &sp = ctx.scalarParamName(Param::Kind::Splits);
      gx = fmt::format("({0}::ALL_ROWS && {1} % 2 != 0 ? 0LL : {2} * ({0}::ALL_ROWS ? {1} / 2 : {1}))",
                       cfg, sp, ceil(n, "BM"));
    } else {
      gx = ceil(n, "BM");
      gy = ctx.scalarParamName(Param::Kind::Splits);
    }
    break;
  case plan::KernelKind::GemmDz:
    if (!isWgmma(ctx)) {
      gx = ceil(n, "BM");
      gy = ceil(ctx.scalarParamName(Param::Kind::ChunkCols), "BN");
    } else if (std::get<plan::GemmDzKernel>(ctx.kernel().body).rowFilter.valid()) {
      gx = fmt::format("{} * {}", ceil(n, "BM"), plan::kRowFilterSplits);
    }
    break;
  case plan::KernelKind::GemmDLhs:
    if (!isWgmma(ctx)) {
      gx = ceil(n, "BM");
      gy = ceil(fmt::format("{}LL", std::get<plan::GemmDLhsKernel>(ctx.kernel().body).k), "BN");
    }
    break;
  case plan::KernelKind::GemmDRhs:
    if (!isWgmma(ctx)) {
      gx = ceil(ctx.scalarParamName(Param::Kind::ChunkCols), "BM");
      gy = ceil(fmt::format("{}LL", std::get<plan::GemmDRhsKernel>(ctx.kernel().body).k), "BN");
    }
    break;
  default:
    LCEJIT_CHECK(false, "kernel '{}' is not a GEMM", ctx.name());
  }
  w.line("if (!lcejit::launch_ok({}, {}, {}::SMEM_BYTES, {}::THREADS, {}, {}))",
         ctx.bufferName(BufferRef{plan::Space::Workspace, plan::kErrorBuffer}), ctx.index(), cfg,
         cfg, gx, gy);
  w.line("  return; // recorded in the error word (kernel {}); the host reports it", ctx.index());
  return b;
}

//===----------------------------------------------------------------------===//
// Epilogue functors (GemmReduce, GemmDz)
//===----------------------------------------------------------------------===//

class EpilogueEmitter {
public:
  /// `extra`: another function over the same operands emitted into the functor (the
  /// materialized store's factor); its operands are loaded too.
  EpilogueEmitter(CodeWriter &w, const KernelContext &ctx, const FusedGemm &g,
                  const plan::ScalarFunc *extra = nullptr, int32_t extraArg = -1)
      : w_(w), ctx_(ctx), g_(g),
        what_(fmt::format("epilogue of kernel '{}'", ctx.name())),
        structName_(ctx.name() + "_epilogue") {
    verifyScalarFunc(g.epilogue, what_);
    LCEJIT_CHECK(
        static_cast<int32_t>(g.args.size()) >= g.epilogue.numArgs(),
        "{}: the function reads {} arguments but {} operands are given", what_,
        g.epilogue.numArgs(), g.args.size());
    live_ = liveArgs(g.epilogue);
    if (extra) {
      verifyScalarFunc(*extra, what_ + " (stored factor)");
      LCEJIT_CHECK(static_cast<int32_t>(g.args.size()) >= extra->numArgs(),
                   "{}: the stored factor reads {} arguments but {} operands are given",
                   what_, extra->numArgs(), g.args.size());
      for (int32_t a : liveArgs(*extra))
        if (std::find(live_.begin(), live_.end(), a) == live_.end())
          live_.push_back(a);
      std::sort(live_.begin(), live_.end());
    }
    if (extraArg >= 0) {
      // An operand the kind-specific members read directly (the stored values' per-row
      // reference).
      LCEJIT_CHECK(extraArg < static_cast<int32_t>(g.args.size()), "{}: operand a{} of {}",
                   what_, extraArg, g.args.size());
      if (std::find(live_.begin(), live_.end(), extraArg) == live_.end())
        live_.push_back(extraArg);
      std::sort(live_.begin(), live_.end());
    }
    for (int32_t a : live_) {
      const Operand &o = g.args[static_cast<size_t>(a)];
      switch (o.kind) {
      case Operand::Kind::Row:
      case Operand::Kind::Col:
        LCEJIT_CHECK(o.buf.valid(), "{}: operand a{} has no buffer", what_, a);
        addBuffer(o.buf);
        break;
      case Operand::Kind::Scalar:
        addBuffer(o.buf.valid()
                      ? o.buf
                      : BufferRef{Space::Workspace, plan::kScalarSlotsBuffer});
        break;
      case Operand::Kind::Acc:
      case Operand::Kind::ColIndex:
      case Operand::Kind::RowIndex:
        break;
      case Operand::Kind::Partials:
        LCEJIT_CHECK(
            false,
            "{}: operand a{} is a Partials operand; those appear only in row "
            "kernels",
            what_, a);
      }
    }
  }

  const std::string &structName() const { return structName_; }
  const std::vector<std::string> &buffers() const { return buffers_; }

  /// Parameter roles and the "epilogue args" header line.
  void describe(ParamRoles &roles, std::vector<std::string> &about) const {
    std::vector<std::string> args;
    for (int32_t a : live_) {
      const Operand &o = g_.args[static_cast<size_t>(a)];
      args.push_back(
          fmt::format("a{} {}", a, describeOperand(ctx_.program(), o)));
      if (o.kind == Operand::Kind::Row || o.kind == Operand::Kind::Col ||
          (o.kind == Operand::Kind::Scalar && o.buf.valid()))
        roles.add(
            ctx_.bufferName(o.buf),
            fmt::format("a{}: {}", a, describeOperand(ctx_.program(), o)));
      if (o.kind == Operand::Kind::Scalar && !o.buf.valid())
        roles.add(ctx_.bufferName(
                      BufferRef{Space::Workspace, plan::kScalarSlotsBuffer}),
                  "scalar slots (double)");
    }
    about.push_back(fmt::format("epilogue: {} instructions, {} results",
                                g_.epilogue.insts.size(),
                                g_.epilogue.results.size()));
    for (const std::string &s : args)
      about.push_back(fmt::format("  {}", s));
  }

  /// struct <name>_epilogue { members, load_scalars, Row, Col, load_row,
  /// load_col ... `body` writes the kind-specific members.
  template <class Body> void emit(Body body) {
    auto st = w_.block(fmt::format("struct {}", structName_), ";");
    for (const std::string &b : buffers_)
      w_.line("const void *{};", b);
    w_.line("long long {};", n());
    w_.line("long long {}; // N of the whole call (RowCount)", nTotal());
    for (int32_t a : live_) {
      const Operand &o = arg(a);
      if (o.kind == Operand::Kind::Scalar)
        w_.line("{} a{}; // {}", valueCType(scalarType(o)), a,
                describeOperand(ctx_.program(), o));
    }
    w_.blank();
    emitStruct("Row", Operand::Kind::Row);
    emitStruct("Col", Operand::Kind::Col);
    w_.blank();
    {
      auto f = w_.block("__device__ __forceinline__ void load_scalars()");
      for (int32_t a : live_) {
        const Operand &o = arg(a);
        if (o.kind != Operand::Kind::Scalar)
          continue;
        if (o.buf.valid())
          w_.line("a{} = {};", a,
                  loadElement(o.dtype, ctx_.bufferName(o.buf), "0"));
        else
          w_.line("a{} = {};", a,
                  loadElement(DType::F64,
                              ctx_.bufferName(BufferRef{
                                  Space::Workspace, plan::kScalarSlotsBuffer}),
                              std::to_string(o.slot)));
      }
    }
    emitLoader("Row", "load_row", "row", Operand::Kind::Row);
    emitLoader("Col", "load_col", "col", Operand::Kind::Col);
    body();
  }

  /// The ScalarFunc body inside accumulate()/value(); returns the result value
  /// names.
  std::vector<std::string> emitBody() { return emitBodyOf(g_.epilogue); }
  std::vector<std::string> emitBodyOf(const plan::ScalarFunc &func) {
    return emitScalarBody(
        w_, func,
        [&](int32_t a) {
          const Operand &o = arg(a);
          switch (o.kind) {
          case Operand::Kind::Acc:
            return ArgValue{"acc", DType::F32};
          case Operand::Kind::ColIndex:
            return ArgValue{"col", DType::I64};
          case Operand::Kind::RowIndex:
            return ArgValue{"row", DType::I64};
          case Operand::Kind::Row:
            return ArgValue{fmt::format("r.a{}", a), valueTypeOf(o.dtype)};
          case Operand::Kind::Col:
            return ArgValue{fmt::format("c.a{}", a), valueTypeOf(o.dtype)};
          case Operand::Kind::Scalar:
            return ArgValue{fmt::format("a{}", a), scalarType(o)};
          case Operand::Kind::Partials:
            break;
          }
          LCEJIT_CHECK(false, "{}: bad operand a{}", what_, a);
          return ArgValue{};
        },
        nTotal());
  }

  DType resultType(size_t r) const { return resultTypeOf(g_.epilogue, r); }
  bool isLive(int32_t a) const { return std::find(live_.begin(), live_.end(), a) != live_.end(); }
  static DType resultTypeOf(const plan::ScalarFunc &f, size_t r) {
    return f.insts[static_cast<size_t>(f.results[r])].type;
  }

  const std::string &n() const { return ctx_.scalarParamName(Param::Kind::N); }
  const std::string &nTotal() const {
    return ctx_.scalarParamName(Param::Kind::TotalRows);
  }

private:
  const Operand &arg(int32_t a) const {
    return g_.args[static_cast<size_t>(a)];
  }
  static DType scalarType(const Operand &o) {
    return o.buf.valid() ? valueTypeOf(o.dtype) : DType::F64;
  }
  void addBuffer(const BufferRef &b) {
    const std::string &name = ctx_.bufferName(b);
    if (std::find(buffers_.begin(), buffers_.end(), name) == buffers_.end())
      buffers_.push_back(name);
  }
  void emitStruct(const char *name, Operand::Kind kind) {
    std::vector<int32_t> fields;
    for (int32_t a : live_)
      if (arg(a).kind == kind)
        fields.push_back(a);
    if (fields.empty()) {
      w_.line("struct {} {{}};", name);
      return;
    }
    auto st = w_.block(fmt::format("struct {}", name), ";");
    for (int32_t a : fields)
      w_.line("{} a{}; // {}", valueCType(valueTypeOf(arg(a).dtype)), a,
              describeOperand(ctx_.program(), arg(a)));
  }
  void emitLoader(const char *type, const char *fn, const char *index,
                  Operand::Kind kind) {
    auto f = w_.block(
        fmt::format("__device__ __forceinline__ {} {}(long long {}) const",
                    type, fn, index));
    w_.line("{} v = {{}};", type);
    for (int32_t a : live_)
      if (arg(a).kind == kind)
        w_.line("v.a{} = {};", a,
                loadElement(arg(a).dtype, ctx_.bufferName(arg(a).buf), index));
    if (std::none_of(live_.begin(), live_.end(),
                     [&](int32_t a) { return arg(a).kind == kind; }))
      w_.line("(void){};", index);
    w_.line("return v;");
  }

  CodeWriter &w_;
  const KernelContext &ctx_;
  const FusedGemm &g_;
  std::string what_;
  std::string structName_;
  std::vector<int32_t> live_;
  std::vector<std::string> buffers_;
};

/// `epi.<buffer> = <buffer>; ... epi.n = n; epi.load_scalars();`
void emitEpilogueSetup(CodeWriter &w, const EpilogueEmitter &e) {
  w.line("{} epi;", e.structName());
  for (const std::string &b : e.buffers())
    w.line("epi.{0} = {0};", b);
  w.line("epi.{0} = {0};", e.n());
  w.line("epi.{0} = {0};", e.nTotal());
  w.line("epi.load_scalars();");
}

const char *reduceAddFn(plan::ReduceKind k) {
  switch (k) {
  case plan::ReduceKind::Sum:
    return "lcejit::sum_add";
  case plan::ReduceKind::Max:
    return "lcejit::max_add";
  case plan::ReduceKind::LogSumExp:
    return "lcejit::lse_add";
  }
  return "?";
}

std::string slotArgs(plan::ReduceKind k, int32_t slot, const char *p) {
  if (k == plan::ReduceKind::LogSumExp)
    return fmt::format("{0}[{1}], {0}[{2}]", p, slot, slot + 1);
  return fmt::format("{}[{}]", p, slot);
}

//===----------------------------------------------------------------------===//
// The kinds
//===----------------------------------------------------------------------===//

GemmShape fusedShape(const FusedGemm &g) {
  GemmShape s;
  s.math = g.math;
  s.tile = g.tile;
  s.aElem = g.abType;
  s.bElem = g.abType;
  return s;
}

/// [Note: the target pick by fragments] A sum reduction of select(col == t[row], v, 0),
/// v the logsumexp's own value and t an i64 row operand (the loss's target logit, as
/// the frontend writes it), has one nonzero term per row. The per-element form costs
/// each element a 64-bit column, a 64-bit compare, a select and an add (5-6 of the
/// ~25-30 instructions of Gemma-2's element); on the fragment path the sm90 reduce
/// epilogue instead finds the target's element once per row and tile and adds that one
/// value (PICK_SLOT, pick_column): the same sum, bit for bit (0 + ... + v + 0 = v).
/// Returns the row operand's arg index, or -1 when result `r` is not such a pick.
static int32_t targetPickArg(const FusedGemm &g, int32_t r, int32_t lse) {
  const ScalarFunc &f = g.epilogue;
  auto inst = [&](int32_t i) -> const ScalarInst * {
    return i >= 0 && i < static_cast<int32_t>(f.insts.size()) ? &f.insts[static_cast<size_t>(i)]
                                                             : nullptr;
  };
  auto argKind = [&](int32_t i, Operand::Kind kind, DType dt) -> int32_t {
    const ScalarInst *a = inst(i);
    if (!a || a->op != ScalarOp::Arg || a->argIndex < 0 ||
        a->argIndex >= static_cast<int32_t>(g.args.size()))
      return -1;
    const Operand &o = g.args[static_cast<size_t>(a->argIndex)];
    return o.kind == kind && (kind != Operand::Kind::Row || o.dtype == dt) ? a->argIndex : -1;
  };
  const ScalarInst *sel = inst(f.results[static_cast<size_t>(r)]);
  if (!sel || sel->op != ScalarOp::Select || sel->type != DType::F32 ||
      sel->operands[1] != f.results[static_cast<size_t>(lse)])
    return -1;
  const ScalarInst *v = inst(sel->operands[1]);
  const ScalarInst *zero = inst(sel->operands[2]);
  const ScalarInst *cmp = inst(sel->operands[0]);
  if (!v || v->type != DType::F32 || !zero || zero->op != ScalarOp::Const ||
      zero->fValue != 0.0 || std::signbit(zero->fValue) || !cmp || cmp->op != ScalarOp::CmpEq)
    return -1;
  for (int side = 0; side < 2; ++side)
    if (argKind(cmp->operands[side], Operand::Kind::ColIndex, DType::I64) >= 0)
      return argKind(cmp->operands[1 - side], Operand::Kind::Row, DType::I64);
  return -1;
}

/// The sm90 reduce epilogue's fragment interface ([Note: sm90 reduce by
/// fragments] in lcejit_sm90.cuh). With exactly one logsumexp reduction and
/// only sums besides it, FRAGMENT_LSE_SLOT names the logsumexp's slot and
/// fragment_value() adds the element's sum inputs to the row's partials and
/// returns its logsumexp input; otherwise FRAGMENT_LSE_SLOT is -1 and only
/// accumulate() is used.
template <class Epi>
static void emitFragmentValue(CodeWriter &w, const plan::GemmReduceKernel &k,
                              Epi &epi) {
  int lse = -1;
  bool onlySums = true;
  for (size_t r = 0; r < k.reductions.size(); ++r) {
    if (k.reductions[r] == plan::ReduceKind::LogSumExp && lse < 0)
      lse = static_cast<int>(r);
    else if (k.reductions[r] != plan::ReduceKind::Sum)
      onlySums = false;
  }
  const bool fragments = lse >= 0 && onlySums;
  w.line("static constexpr int FRAGMENT_LSE_SLOT = {};",
         fragments ? k.slotOf(lse) : -1);
  LCEJIT_CHECK(!k.stored || (fragments && k.stored->lseResult == lse),
               "the stored values of a gemm_reduce need its fragment path (one logsumexp "
               "result, {}, and sums): lse result {}",
               k.stored ? k.stored->lseResult : -1, lse);
  w.line("static constexpr bool STORE = {};", k.stored ? "true" : "false");
  // [Note: row-scaled stored values]: bf16 values against a constant reference, or one
  // per row ([Note: a per-row reference]).
  const bool rowScaled = k.stored && k.stored->rowScaled;
  const bool perRow = rowScaled && k.stored->referenceArg >= 0;
  w.line("static constexpr bool STORE_ROW_SCALED = {};", rowScaled ? "true" : "false");
  std::string ref = fmt::format("{:.17g}", rowScaled && !perRow ? k.stored->reference : 0.0);
  if (ref.find_first_of(".eEn") == std::string::npos)
    ref += ".0"; // a double literal
  w.line("static constexpr double STORE_REFERENCE = {};", ref);
  w.line("static constexpr bool STORE_ROW_REFERENCE = {};", perRow ? "true" : "false");
  if (k.stored) {
    auto f = w.block("__device__ __forceinline__ float store_reference(const Row &r) const");
    if (perRow) {
      const int32_t a = k.stored->referenceArg;
      LCEJIT_CHECK(a < static_cast<int32_t>(k.gemm.args.size()) &&
                       k.gemm.args[static_cast<size_t>(a)].kind == Operand::Kind::Row &&
                       k.gemm.args[static_cast<size_t>(a)].dtype == DType::F32 &&
                       epi.isLive(a),
                   "the stored values' per-row reference must be a live f32 row operand "
                   "(a{})",
                   a);
      w.line("return r.a{};", a);
    } else {
      w.line("(void)r;");
      w.line("return static_cast<float>(STORE_REFERENCE);");
    }
  }
  if (k.stored) {
    if (k.stored->rowScaled)
      w.line("void *store_values;   // bf16 [n][cols] (the materialized dZ buffer)");
    else
      w.line("void *store_values;   // fp16 [n][cols] (the materialized dZ buffer)");
    w.line("void *store_tile_max; // f32 [n][cols / BN] (not with STORE_ROW_SCALED)");
    // [Note: stored values in dW]: >= 0: the values lie in slabs of 128 columns.
    w.line("long long store_split = -1, store_stride = 0, store_head = 0;");
    w.line("void *store_slabs2 = nullptr;");
    auto f = w.block("__device__ __forceinline__ float store_factor(float acc, long long "
                     "row, long long col, const Row &r, const Col &c) const");
    std::vector<std::string> results = epi.emitBodyOf(k.stored->factor);
    LCEJIT_CHECK(results.size() == 1, "the stored factor has {} results, not 1",
                 results.size());
    w.line("(void)row; (void)col; (void)r; (void)c;");
    w.line("return {};", convertValue(results[0], epi.resultTypeOf(k.stored->factor, 0),
                                      DType::F32));
  }
  if (k.stored) {
    auto f = w.block("__device__ __forceinline__ long long store_target(const Row &r) const");
    const int32_t a = k.stored->excludeArg;
    if (a >= 0) {
      LCEJIT_CHECK(a < static_cast<int32_t>(k.gemm.args.size()) &&
                       k.gemm.args[static_cast<size_t>(a)].kind == Operand::Kind::Row &&
                       epi.isLive(a),
                   "the stored values' excluded column must be a live row operand (a{})", a);
      w.line("return static_cast<long long>(r.a{});", a);
    } else {
      w.line("(void)r;");
      w.line("return -1;");
    }
  }
  if (!fragments)
    return;
  // [Note: the target pick by fragments]: the first such sum, if any.
  int32_t pick = -1, pickArg = -1;
  for (size_t r = 0; r < k.reductions.size() && pick < 0; ++r)
    if (static_cast<int>(r) != lse) {
      const int32_t a = targetPickArg(k.gemm, static_cast<int32_t>(r), lse);
      if (a >= 0 && epi.isLive(a)) {
        pick = static_cast<int32_t>(r);
        pickArg = a;
      }
    }
  w.line("static constexpr int PICK_SLOT = {};", pick >= 0 ? k.slotOf(pick) : -1);
  {
    auto f = w.block("__device__ __forceinline__ long long pick_column(const Row &r) const");
    if (pick >= 0) {
      w.line("return static_cast<long long>(r.a{});", pickArg);
    } else {
      w.line("(void)r;");
      w.line("return -1;");
    }
  }
  auto f = w.block("__device__ __forceinline__ float fragment_value(float "
                   "(&p)[SLOTS], float acc, long long row, long long col, "
                   "const Row &r, const Col &c) const");
  std::vector<std::string> results = epi.emitBody();
  for (size_t r = 0; r < k.reductions.size(); ++r)
    if (static_cast<int>(r) != lse && static_cast<int32_t>(r) != pick)
      w.line("lcejit::sum_add({}, {});",
             slotArgs(k.reductions[r], k.slotOf(static_cast<int32_t>(r)), "p"),
             convertValue(results[r], epi.resultType(r), DType::F32));
  w.line("return {};", convertValue(results[static_cast<size_t>(lse)],
                                    epi.resultType(static_cast<size_t>(lse)),
                                    DType::F32));
}

void emitGemmReduce(CodeWriter &w, const KernelContext &ctx,
                    const plan::GemmReduceKernel &k) {
  const std::string what = fmt::format("gemm_reduce kernel '{}'", ctx.name());
  const FusedGemm &g = k.gemm;
  GemmShape s = fusedShape(g);
  checkShape(s, what);
  LCEJIT_CHECK(k.reductions.size() == g.epilogue.results.size(),
               "{}: {} reductions for {} epilogue results", what,
               k.reductions.size(), g.epilogue.results.size());
  LCEJIT_CHECK(!k.reductions.empty(), "{}: no reductions", what);
  LCEJIT_CHECK(g.k > 0 && g.cols > 0, "{}: k = {}, cols = {}", what, g.k,
               g.cols);
  const int32_t slots = k.slotsPerRow();
  LCEJIT_CHECK(
      isWgmma(ctx) || int64_t(g.tile.warpsN) * g.tile.bm * slots * 4 <=
          ctx.launchDims().sharedBytes,
      "{}: the cross-warp exchange of {} slots does not fit in shared memory",
      what, slots);

  LCEJIT_CHECK(!k.stored || (isWgmma(ctx) && g.cols % g.tile.bn == 0 &&
                              k.stored->tileCols == g.tile.epilogueCols()),
               "{}: stored values need the wgmma mainloop and whole column tiles (cols = "
               "{}, bn = {}, tile_cols = {})",
               what, g.cols, g.tile.bn, k.stored ? k.stored->tileCols : 0);
  EpilogueEmitter epi(w, ctx, g, k.stored ? &k.stored->factor : nullptr,
                      k.stored && k.stored->rowScaled ? k.stored->referenceArg : -1);
  ParamRoles roles;
  roles.add(
      ctx.bufferName(BufferRef{Space::Workspace, plan::kScalarSlotsBuffer}),
      "scalar slots (double)");
  roles.add(ctx.bufferName(g.a), "A [N, k] (K-major)");
  roles.add(ctx.bufferName(g.b), "B [cols, k] (K-major)");
  roles.add(ctx.bufferName(k.partials),
            fmt::format("partials f32 [N][splits][{}]", slots));
  if (k.stored && k.stored->rowScaled && k.stored->referenceArg >= 0) {
    roles.add(ctx.bufferName(k.stored->values),
              fmt::format("stored bf16 factor(v) * exp(v - c[row]) [N][{}] (c: a{}), 0 at the "
                          "target column",
                          g.cols, k.stored->referenceArg));
  } else if (k.stored && k.stored->rowScaled) {
    roles.add(ctx.bufferName(k.stored->values),
              fmt::format("stored bf16 factor(v) * exp(v - {:.17g}) [N][{}], 0 at the target "
                          "column",
                          k.stored->reference, g.cols));
  } else if (k.stored) {
    roles.add(ctx.bufferName(k.stored->values),
              fmt::format("stored fp16 factor(v) * exp(v - tile max) [N][{}]", g.cols));
    roles.add(ctx.bufferName(k.stored->tileMax),
              fmt::format("f32 tile maxima [N][{}]", g.cols / g.tile.epilogueCols()));
  }
  std::vector<std::string> about = {
      fmt::format(
          "acc = A * B^T, k = {}, cols = {}; {} of A and B, f32 accumulate",
          g.k, g.cols, dtypeName(g.abType)),
      tileText(s), smemText(ctx),
      "grid (ceil(N / bm), splits); split s reduces the column tiles [s * per, "
      "(s + 1) * per)",
      "of per = ceil(ceil(cols / bn) / splits) into partials[row][s][...]"};
  std::vector<std::string> reds;
  for (size_t r = 0; r < k.reductions.size(); ++r)
    reds.push_back(fmt::format("result {} {} -> slot {}", r,
                               plan::reduceKindName(k.reductions[r]),
                               k.slotOf(static_cast<int32_t>(r))));
  about.push_back(fmt::format("reductions: {} ({} slots per row)",
                              fmt::join(reds, ", "), slots));
  if (k.stored && k.stored->rowScaled && k.stored->referenceArg >= 0)
    about.push_back(fmt::format(
        "materialized, row-scaled: stores bf16 factor(v) * exp(v - c[row]) of result {} per "
        "element, c = a{} (the row's target value; 0 where the target is outside [0, {})): "
        "[Note: a per-row reference]",
        k.stored->lseResult, k.stored->referenceArg, g.cols));
  else if (k.stored && k.stored->rowScaled)
    about.push_back(fmt::format(
        "materialized, row-scaled: stores bf16 factor(v) * exp(v - {:.17g}) of result {} per "
        "element (v <= {:.17g}; [Note: row-scaled stored values])",
        k.stored->reference, k.stored->lseResult, k.stored->reference));
  else if (k.stored)
    about.push_back(fmt::format(
        "materialized: stores fp16 factor(v) * exp(v - m) of result {} per element and m "
        "per (row, {}-column tile)",
        k.stored->lseResult, k.stored->tileCols));
  epi.describe(roles, about);
  emitKernelHeader(w, ctx, about, roles);
  emitConfig(w, ctx, s);

  epi.emit([&] {
    w.blank();
    w.line("static constexpr int SLOTS = {};", slots);
    {
      auto f = w.block(
          "static __device__ __forceinline__ void init(float (&p)[SLOTS])");
      for (size_t r = 0; r < k.reductions.size(); ++r) {
        plan::ReduceKind rk = k.reductions[r];
        const char *fn = rk == plan::ReduceKind::Sum   ? "lcejit::sum_init"
                         : rk == plan::ReduceKind::Max ? "lcejit::max_init"
                                                       : "lcejit::lse_init";
        w.line("{}({});", fn,
               slotArgs(rk, k.slotOf(static_cast<int32_t>(r)), "p"));
      }
    }
    {
      auto f = w.block(
          "static __device__ __forceinline__ void combine(float (&p)[SLOTS], "
          "const float (&q)[SLOTS])");
      for (size_t r = 0; r < k.reductions.size(); ++r) {
        plan::ReduceKind rk = k.reductions[r];
        int32_t slot = k.slotOf(static_cast<int32_t>(r));
        const char *fn = rk == plan::ReduceKind::Sum   ? "lcejit::sum_combine"
                         : rk == plan::ReduceKind::Max ? "lcejit::max_combine"
                                                       : "lcejit::lse_combine";
        w.line("{}({}, {});", fn, slotArgs(rk, slot, "p"),
               slotArgs(rk, slot, "q"));
      }
    }
    {
      auto f = w.block(
          "__device__ __forceinline__ void accumulate(float (&p)[SLOTS], float "
          "acc, "
          "long long row, long long col, const Row &r, const Col &c) const");
      std::vector<std::string> results = epi.emitBody();
      for (size_t r = 0; r < k.reductions.size(); ++r)
        w.line(
            "{}({}, {});", reduceAddFn(k.reductions[r]),
            slotArgs(k.reductions[r], k.slotOf(static_cast<int32_t>(r)), "p"),
            convertValue(results[r], epi.resultType(r), DType::F32));
    }
    if (isWgmma(ctx))
      emitFragmentValue(w, k, epi);
  });
  w.blank();
  auto kb = openGemmKernel(w, ctx, g.tile.threads());
  emitEpilogueSetup(w, epi);
  if (k.stored) {
    w.line("epi.store_values = {};", ctx.bufferName(k.stored->values));
    w.line("epi.store_tile_max = {};", k.stored->rowScaled
                                           ? std::string("nullptr")
                                           : ctx.bufferName(k.stored->tileMax));
    if (k.stored->slabs) {
      LCEJIT_CHECK(isWgmma(ctx) && g.tile.epilogueCols() <= 128 &&
                       128 % g.tile.epilogueCols() == 0,
                   "{}: stored values in slabs need a wgmma forward whose epilogue tiles lie "
                   "in one slab (their width {})",
                   ctx.name(), g.tile.epilogueCols());
      w.line("epi.store_split = {};", ctx.scalarParamName(Param::Kind::SlabSplit));
      w.line("epi.store_stride = {};", ctx.scalarParamName(Param::Kind::SlabStride));
      w.line("epi.store_slabs2 = {};", ctx.scalarParamName(Param::Kind::SlabBase));
      w.line("epi.store_head = {};", ctx.scalarParamName(Param::Kind::SlabHead));
    }
  }
  if (isWgmma(ctx)) {
    // [Note: forward CTA order]: the group of the order when it is not the default.
    LCEJIT_CHECK(k.orderGroup >= 2 && k.orderGroup % 2 == 0,
                 "gemm_reduce kernel '{}': order group {} (an even count, at least 2)",
                 ctx.name(), k.orderGroup);
    // [Note: sm90 L2 hints]: the hints' code after the group, when there are any.
    std::string targs;
    if (!k.l2.none())
      targs = fmt::format(", {}, {} /* L2 {} */", k.orderGroup, k.l2.code(), k.l2.str());
    else if (k.orderGroup != plan::kForwardOrderGroup)
      targs = fmt::format(", {}", k.orderGroup);
    w.line("lcejit::sm90::gemm_reduce_kernel<{}_config{}>(map_a, map_b, epi, {}, {}, {}LL, "
           "{}LL, {});",
           ctx.name(), targs,
           ctx.bufferName(k.partials), epi.n(), g.cols, g.k,
           ctx.scalarParamName(Param::Kind::Splits));
  } else {
    w.line("lcejit::gemm_reduce_kernel<{}_config>(epi, {}, {}, {}, {}, {}LL, "
           "{}LL, {});",
           ctx.name(), ctx.bufferName(g.a), ctx.bufferName(g.b),
           ctx.bufferName(k.partials), epi.n(), g.cols, g.k,
           ctx.scalarParamName(Param::Kind::Splits));
  }
}

/// Live exp/log/tanh-like instructions of an epilogue function: the length of
/// its per-element latency chain, roughly.
static int transcendentalCount(const plan::ScalarFunc &f) {
  const std::vector<bool> live = liveInsts(f);
  int n = 0;
  for (size_t i = 0; i < f.insts.size(); ++i) {
    if (!live[i])
      continue;
    switch (f.insts[i].op) {
    case plan::ScalarOp::Exp:
    case plan::ScalarOp::Log:
    case plan::ScalarOp::Tanh:
    case plan::ScalarOp::Expm1:
    case plan::ScalarOp::Log1p:
      ++n;
      break;
    default:
      break;
    }
  }
  return n;
}

void emitGemmDz(CodeWriter &w, const KernelContext &ctx,
                const plan::GemmDzKernel &k) {
  const std::string what = fmt::format("gemm_dz kernel '{}'", ctx.name());
  const FusedGemm &g = k.gemm;
  GemmShape s = fusedShape(g);
  checkShape(s, what);
  LCEJIT_CHECK(g.epilogue.results.size() == 1,
               "{}: the epilogue has {} results, needs 1 (dZ)", what,
               g.epilogue.results.size());
  LCEJIT_CHECK(g.k > 0, "{}: k = {}", what, g.k);
  LCEJIT_CHECK(k.format != DzFormat::SplitBF16 || k.dzLo.valid(),
               "{}: split bf16 dZ without a lo buffer", what);
  const bool split = k.format == DzFormat::SplitBF16;
  LCEJIT_CHECK(!k.residual.valid() || k.format == DzFormat::BF16,
               "{}: a target-column residual needs a bf16 dZ", what);
  const std::string residual =
      k.residual.valid() ? ctx.bufferName(k.residual.buf) : std::string("nullptr");
  LCEJIT_CHECK(!k.rowFilter.valid() || isWgmma(ctx),
               "{}: a row filter needs the wgmma mainloop", what);

  EpilogueEmitter epi(w, ctx, g);
  ParamRoles roles;
  roles.add(
      ctx.bufferName(BufferRef{Space::Workspace, plan::kScalarSlotsBuffer}),
      "scalar slots (double)");
  roles.add(ctx.bufferName(g.a), "A [N, k] (K-major)");
  roles.add(ctx.bufferName(g.b), "B [cols, k] (K-major), rows of the chunk");
  roles.add(ctx.bufferName(k.dz),
            split ? "dZ hi, bf16 [N][chunk_cols]"
                  : fmt::format("dZ, {} [N][chunk_cols]", dzElemName(k.format)));
  if (split)
    roles.add(ctx.bufferName(k.dzLo),
              "dZ lo = bf16(dz - hi), bf16 [N][chunk_cols]");
  if (k.rowFilter.valid())
    roles.add(ctx.bufferName(k.rowFilter),
              "i32 [N] row filter: only rows with a nonzero entry are written");
  std::vector<std::string> about = {
      fmt::format("acc = A * B[chunk]^T, k = {}, cols = {}; {} of A and B, f32 "
                  "accumulate",
                  g.k, g.cols, dtypeName(g.abType)),
      tileText(s), smemText(ctx),
      k.rowFilter.valid()
          ? fmt::format("grid ceil(N / 128) * {} CTAs, one per (row tile, column split); a CTA "
                        "whose row tile has no flagged row returns at once ([Note: a per-row "
                        "reference])",
                        plan::kRowFilterSplits)
          : gridText(ctx, "grid (ceil(N / bm), ceil(chunk_cols / bn))"),
      fmt::format("dZ = epilogue(acc) stored as {}{}",
                  plan::dzFormatName(k.format),
                  k.residual.valid() ? "; residual[r] = dz - bf16(dz) at the row's target "
                                       "column ([Note: the target-column residual])"
                                     : "")};
  epi.describe(roles, about);
  emitKernelHeader(w, ctx, about, roles);
  emitConfig(w, ctx, s);

  epi.emit([&] {
    if (isWgmma(ctx)) {
      // [Note: sm90 dZ full tiles] in lcejit_sm90.cuh: the unchecked two-pass
      // path pays for a long per-element chain (measured: softcap's tanh and
      // exp, 63 -> 73 % tensor-pipe activity) and costs a plain exp (its
      // stores bunch at the end of the tile: 89 -> 85 %).
      const int chain = transcendentalCount(g.epilogue);
      w.line("static constexpr bool FULL_TILE_PASSES = {}; // {} transcendental op{} "
             "per element",
             chain >= 2 ? "true" : "false", chain, chain == 1 ? "" : "s");
    }
    // [Note: the target-column residual] in Program.h.
    w.line("static constexpr bool RESIDUAL = {};", k.residual.valid() ? "true" : "false");
    {
      auto f = w.block("__device__ __forceinline__ long long residual_target(const Row &r) "
                       "const");
      if (k.residual.valid()) {
        const int32_t a = k.residualArg;
        LCEJIT_CHECK(a >= 0 && a < static_cast<int32_t>(g.args.size()) &&
                         g.args[static_cast<size_t>(a)].kind == Operand::Kind::Row &&
                         g.args[static_cast<size_t>(a)].buf == k.residual.target &&
                         epi.isLive(a),
                     "{}: the residual's target must be a live row operand (a{}) of its "
                     "buffer",
                     what, a);
        w.line("return static_cast<long long>(r.a{});", a);
      } else {
        w.line("(void)r;");
        w.line("return -1;");
      }
    }
    auto f = w.block(
        "__device__ __forceinline__ float value(float acc, long long row, "
        "long long col, const Row &r, const Col &c) const");
    std::vector<std::string> results = epi.emitBody();
    w.line("return {};",
           convertValue(results[0], epi.resultType(0), DType::F32));
  });
  w.blank();
  auto kb = openGemmKernel(w, ctx, g.tile.threads());
  emitEpilogueSetup(w, epi);
  if (isWgmma(ctx)) {
    LCEJIT_CHECK(!split, "{}: the wgmma mainloop takes one dZ operand", what);
    if (k.rowFilter.valid()) {
      // [Note: stored values in dW]: the slab parameters when dz is the stored values.
      const std::string slabArgs =
          k.slabs ? fmt::format(", {}, {}, {}, {}", ctx.scalarParamName(Param::Kind::SlabSplit),
                                ctx.scalarParamName(Param::Kind::SlabStride),
                                ctx.scalarParamName(Param::Kind::SlabBase),
                                ctx.scalarParamName(Param::Kind::SlabHead))
                  : std::string();
      w.line("lcejit::sm90::gemm_dz_filtered_kernel<{}_config, lcejit::{}, {}>(map_a, map_b, "
             "epi, {}, {}, {}, {}, {}LL, {}, {}{});",
             ctx.name(), dzFormatTag(k.format), plan::kRowFilterSplits, ctx.bufferName(k.dz),
             residual, ctx.bufferName(k.rowFilter), epi.n(), g.k,
             ctx.scalarParamName(Param::Kind::ChunkBegin),
             ctx.scalarParamName(Param::Kind::ChunkCols), slabArgs);
      return;
    }
    LCEJIT_CHECK(!k.slabs, "{}: stored values in slabs are written by the filtered dZ GEMM only",
                 what);
    w.line("lcejit::sm90::gemm_dz_kernel<{}_config, lcejit::{}>(map_a, map_b, epi, {}, {}, "
           "{}, {}LL, {}, {});",
           ctx.name(), dzFormatTag(k.format), ctx.bufferName(k.dz), residual, epi.n(), g.k,
           ctx.scalarParamName(Param::Kind::ChunkBegin),
           ctx.scalarParamName(Param::Kind::ChunkCols));
    return;
  }
  w.line("lcejit::gemm_dz_kernel<{}_config, lcejit::{}>(epi, {}, {}, {}, {}, "
         "{}, {}, {}LL, {}, {});",
         ctx.name(), dzFormatTag(k.format), ctx.bufferName(g.a),
         ctx.bufferName(g.b), ctx.bufferName(k.dz),
         split ? ctx.bufferName(k.dzLo) : "nullptr", residual, epi.n(), g.k,
         ctx.scalarParamName(Param::Kind::ChunkBegin),
         ctx.scalarParamName(Param::Kind::ChunkCols));
}

void emitGemmDLhs(CodeWriter &w, const KernelContext &ctx,
                  const plan::GemmDLhsKernel &k) {
  const std::string what = fmt::format("gemm_dlhs kernel '{}'", ctx.name());
  const bool split = k.format == DzFormat::SplitBF16;
  GemmShape s;
  s.math = k.math;
  s.tile = k.tile;
  s.aElem = dzElem(k.format);
  s.numA = split ? 2 : 1;
  s.aKMajor = true;
  s.bElem = k.bType;
  s.bKMajor = false;
  checkShape(s, what);
  LCEJIT_CHECK(!split || k.dzLo.valid(),
               "{}: split bf16 dZ without a lo buffer", what);
  LCEJIT_CHECK(k.k > 0, "{}: k = {}", what, k.k);
  LCEJIT_CHECK(k.outType == DType::F32 || k.outType == DType::BF16 ||
                   k.outType == DType::F16,
               "{}: output type {}", what, dtypeName(k.outType));
  const bool rounded = k.outType != DType::F32;
  const bool res = k.residual.valid();
  LCEJIT_CHECK(!res || (k.cols > 0 && (k.residual.targetType == DType::I32 ||
                                       k.residual.targetType == DType::I64)),
               "{}: a residual needs cols > 0 (got {}) and i32/i64 targets", what, k.cols);
  const bool rowScale = k.rowScale.valid();
  LCEJIT_CHECK(!rowScale || (res && isWgmma(ctx)),
               "{}: a row scale needs the wgmma mainloop and a residual ([Note: row-scaled "
               "stored values])",
               what);

  ParamRoles roles;
  roles.add(ctx.bufferName(k.dz),
            fmt::format("A = dZ{} {} [N][chunk_cols] (K-major)",
                        split ? " hi" : "", dzElemName(k.format)));
  if (split)
    roles.add(ctx.bufferName(k.dzLo),
              "A = dZ lo bf16 [N][chunk_cols] (K-major)");
  roles.add(ctx.bufferName(k.b),
            fmt::format("B = rows [chunk_begin, +chunk_cols) of [cols, {}] "
                        "(N-major)",
                        k.k));
  roles.add(ctx.bufferName(k.out), fmt::format("out {} [N, {}]", dtypeName(k.outType), k.k));
  if (res) {
    roles.add(ctx.bufferName(k.residual.buf), "f32 [N] dZ's target-column residual");
    roles.add(ctx.bufferName(k.residual.target),
              fmt::format("{} [N] target column", dtypeName(k.residual.targetType)));
  }
  if (rowScale)
    roles.add(ctx.bufferName(k.rowScale), "f32 [N] row scale of dZ ([Note: row-scaled "
                                          "stored values])");
  LCEJIT_CHECK((!k.streamK.valid() && !k.chain.valid()) ||
                   (isWgmma(ctx) && !k.tile.pingpong && k.tile.clusterM == 1),
               "{}: dA stream-K needs the wgmma mainloop on cooperative consumers without a "
               "cluster ([Note: dA stream-K])",
               what);
  if (k.streamK.valid())
    roles.add(ctx.bufferName(k.streamK),
              "stream-K scratch: flags (zeroed) and one partial-tile slot per group of 4 CTAs "
              "([Note: dA stream-K])");
  if (k.chain.valid())
    roles.add(ctx.bufferName(k.chain),
              "chain slots: flags (zeroed per call) and one partial-tile slot per tail tile, "
              "null outside the slab block ([Note: dA stream-K chains])");
  std::vector<std::string> about = {
      fmt::format(
          "out[r][j] (+)= {}sum_c dz[r][c] * B[chunk_begin + c][j], k = {}{}",
          rowScale ? "row_scale[r] * " : "",
          k.k, split ? "; dz = hi + lo, each multiplied" : ""),
      tileText(s), smemText(ctx), gridText(ctx, "grid (ceil(N / bm), ceil(k / bn))"),
      rounded ? fmt::format("written once as {} (round to nearest even): the one chunk "
                            "is all columns{}",
                            dtypeName(k.outType),
                            k.out.space == plan::Space::Output
                                ? "; a run that accumulates into this output adds to it "
                                  "(old + sum, rounded once)"
                                : "")
      : k.out.space == plan::Space::Output
          ? "out is overwritten for chunk_index == 0 and accumulated for later "
            "chunks; all chunks add to it when the run accumulates into this output"
          : "out is overwritten for chunk_index == 0 and accumulated for later "
            "chunks"};
  if (res)
    about.push_back(fmt::format("the last chunk (chunk_begin + chunk_cols == {}) adds "
                                "residual[r] * B[target[r]][j] for 0 <= target[r] < {} "
                                "([Note: the target-column residual])",
                                k.cols, k.cols));
  if (k.streamK.valid())
    about.push_back("a launch of T tiles on a grid of 4 T / 3 CTAs runs 3 tiles on each group of "
                    "4 CTAs, each over 3/4 of K, the parts summed through the stream-K slots "
                    "([Note: dA stream-K])");
  if (k.chain.valid())
    about.push_back("with the chain's slots (a slab-block launch), the last round of tiles runs "
                    "in chains of q tiles on q + 1 CTAs, each over q/(q+1) of K ([Note: dA "
                    "stream-K chains])");
  emitKernelHeader(w, ctx, about, roles);
  emitConfig(w, ctx, s);
  auto kb = openGemmKernel(w, ctx, k.tile.threads());
  // Added to (not overwritten): chunks after the first, and every chunk of a run that
  // accumulates into this output ([Note: accumulating outputs]).
  std::string accumulate =
      fmt::format("{} > 0", ctx.scalarParamName(Param::Kind::ChunkIndex));
  if (k.out.space == plan::Space::Output)
    accumulate = fmt::format("{} || {}", accumulate, ctx.accumulatesInto(k.out));
  if (isWgmma(ctx)) {
    const std::string &cb = ctx.scalarParamName(Param::Kind::ChunkBegin);
    const std::string &cc = ctx.scalarParamName(Param::Kind::ChunkCols);
    // [Note: dA stream-K]: the scratch and [Note: dA stream-K chains]' slots, last, after
    // every argument before them.
    // The template's mask: lcejit::sm90::kStreamKGroups | kStreamKChain.
    const bool streamK = k.streamK.valid() || k.chain.valid();
    const std::string streamMask =
        k.streamK.valid() && k.chain.valid()
            ? "lcejit::sm90::kStreamKGroups | lcejit::sm90::kStreamKChain"
            : k.streamK.valid() ? "lcejit::sm90::kStreamKGroups" : "lcejit::sm90::kStreamKChain";
    const std::string streamArg =
        streamK ? fmt::format(", {}, {}",
                              k.streamK.valid() ? ctx.bufferName(k.streamK) : "nullptr",
                              k.chain.valid() ? ctx.bufferName(k.chain) : "nullptr")
                : std::string();
    if (res) {
      // [Note: stored values in dW]: the second map and the first slab it holds.
      std::string slabArgs;
      if (k.slabs)
        slabArgs = fmt::format("{}, lcejit::sm90::SlabA{{&map_a2, {}, &map_tail, {}}}",
                               rowScale ? "" : ", nullptr",
                               ctx.scalarParamName(Param::Kind::SlabSplit),
                               ctx.scalarParamName(Param::Kind::SlabHead));
      else if (streamK)
        slabArgs = fmt::format("{}, lcejit::sm90::SlabA{{}}", rowScale ? "" : ", nullptr");
      // (slabArgs and streamArg start with their own comma)
      w.line("lcejit::sm90::gemm_dlhs_kernel<{}_config, {}, true, {}{}>(map_a, map_b, {}, "
             "{}, {}LL, {}, {}, {}, {}, {}, {}LL, {} + {} == {}LL{}{}{});",
             ctx.name(), elemTag(k.outType), valueCType(k.residual.targetType),
             streamK ? ", " + streamMask : std::string(), ctx.bufferName(k.out),
             ctx.scalarParamName(Param::Kind::N), k.k, cc, accumulate,
             ctx.bufferName(k.residual.buf), ctx.bufferName(k.residual.target),
             ctx.bufferName(k.b), k.cols, cb, cc, k.cols,
             rowScale ? ", " + ctx.bufferName(k.rowScale) : std::string(), slabArgs,
             streamArg);
      return;
    }
    LCEJIT_CHECK(!k.slabs, "{}: dA over slabs takes the residual epilogue", what);
    if (streamK)
      w.line("lcejit::sm90::gemm_dlhs_kernel<{}_config, {}, false, long long, {}>(map_a, "
             "map_b, {}, {}, {}LL, {}, {}, nullptr, nullptr, nullptr, 0, false, nullptr, "
             "lcejit::sm90::SlabA{{}}{});",
             ctx.name(), elemTag(k.outType), streamMask, ctx.bufferName(k.out),
             ctx.scalarParamName(Param::Kind::N), k.k, cc, accumulate, streamArg);
    else
      w.line("lcejit::sm90::gemm_dlhs_kernel<{}_config, {}>(map_a, map_b, {}, {}, {}LL, {}, "
             "{});",
             ctx.name(), elemTag(k.outType), ctx.bufferName(k.out),
             ctx.scalarParamName(Param::Kind::N), k.k, cc, accumulate);
    return;
  }
  if (res) {
    w.line("lcejit::gemm_dlhs_kernel<{}_config, {}, true, {}>({}, {}, {}, {}, {}, {}LL, {}, "
           "{}, {}, {}, {}, {}LL);",
           ctx.name(), elemTag(k.outType),
           valueCType(k.residual.targetType), ctx.bufferName(k.dz),
           split ? ctx.bufferName(k.dzLo) : "nullptr", ctx.bufferName(k.b),
           ctx.bufferName(k.out), ctx.scalarParamName(Param::Kind::N), k.k,
           ctx.scalarParamName(Param::Kind::ChunkBegin),
           ctx.scalarParamName(Param::Kind::ChunkCols), accumulate,
           ctx.bufferName(k.residual.buf), ctx.bufferName(k.residual.target), k.cols);
    return;
  }
  w.line("lcejit::gemm_dlhs_kernel<{}_config, {}>({}, {}, {}, {}, {}, {}LL, {}, "
         "{}, {});",
         ctx.name(), elemTag(k.outType), ctx.bufferName(k.dz),
         split ? ctx.bufferName(k.dzLo) : "nullptr", ctx.bufferName(k.b),
         ctx.bufferName(k.out), ctx.scalarParamName(Param::Kind::N), k.k,
         ctx.scalarParamName(Param::Kind::ChunkBegin),
         ctx.scalarParamName(Param::Kind::ChunkCols), accumulate);
}

void emitGemmDRhs(CodeWriter &w, const KernelContext &ctx,
                  const plan::GemmDRhsKernel &k) {
  const std::string what = fmt::format("gemm_drhs kernel '{}'", ctx.name());
  const bool split = k.format == DzFormat::SplitBF16;
  GemmShape s;
  s.math = k.math;
  s.tile = k.tile;
  s.aElem = dzElem(k.format);
  s.numA = split ? 2 : 1;
  s.aKMajor = false;
  s.bElem = k.aType;
  s.bKMajor = false;
  checkShape(s, what);
  LCEJIT_CHECK(!split || k.dzLo.valid(),
               "{}: split bf16 dZ without a lo buffer", what);
  LCEJIT_CHECK(k.k > 0, "{}: k = {}", what, k.k);
  LCEJIT_CHECK(k.outType == DType::F32 || k.outType == DType::BF16 ||
                   k.outType == DType::F16,
               "{}: output type {}", what, dtypeName(k.outType));
  const bool part = k.outCol0 != 0 || k.outLd != 0;
  LCEJIT_CHECK(!part || (isWgmma(ctx) && k.tile.tmaStore && k.outCol0 >= 0 &&
                         k.outLd >= k.outCol0 + k.k && k.outCol0 % 4 == 0),
               "{}: output columns [{}, +{}) of rows {} wide need the TMA store, inside the "
               "row and 16-byte aligned",
               what, k.outCol0, k.k, k.outLd);

  ParamRoles roles;
  roles.add(ctx.bufferName(k.dz),
            fmt::format("A = dZ{}^T, {} [N][chunk_cols] (M-major)",
                        split ? " hi" : "", dzElemName(k.format)));
  if (split)
    roles.add(ctx.bufferName(k.dzLo),
              "A = dZ lo^T, bf16 [N][chunk_cols] (M-major)");
  roles.add(ctx.bufferName(k.a),
            fmt::format("B = the forward A [N, {}] (N-major)", k.k));
  roles.add(ctx.bufferName(k.out),
            part ? fmt::format("out {} [cols, {}], rows of the chunk, columns [{}, {}) ([Note: "
                               "a scaled A in column parts])",
                               dtypeName(k.outType), k.outLd, k.outCol0, k.outCol0 + k.k)
                 : fmt::format("out {} [cols, {}], rows of the chunk",
                               dtypeName(k.outType), k.k));
  const plan::TargetSums &ts = k.targetSums;
  if (ts.valid()) {
    LCEJIT_CHECK(k.outType != DType::F32 && !k.accumulateRowBlocks && !k.tile.tmaStore &&
                     !part && ts.head.valid() && ts.target.valid() && ts.cols > 0 && ts.groupRows > 0 &&
                     (ts.targetType == DType::I32 || ts.targetType == DType::I64) &&
                     k.format == DzFormat::BF16,
                 "{}: target group sums are for a bf16/f16 out written once from one bf16 dZ, "
                 "targets i32 or i64 (out {}, dZ {}, targets {})",
                 what, dtypeName(k.outType), plan::dzFormatName(k.format),
                 dtypeName(ts.targetType));
    roles.add(ctx.bufferName(ts.sums), fmt::format("group sums bf16 [N, {}] ([Note: target "
                                                   "group sums])",
                                                   k.k));
    roles.add(ctx.bufferName(ts.head),
              fmt::format("group heads i32 [ceil(N / {}), {}]", ts.groupRows, ts.cols));
    roles.add(ctx.bufferName(ts.target),
              fmt::format("{} [N] target column", dtypeName(ts.targetType)));
  }
  std::vector<std::string> about = {
      fmt::format(
          "out[chunk_begin + c][j] = sum_r dz[r][c] * A[r][j], k = {}{}", k.k,
          split ? "; dz = hi + lo, each multiplied" : ""),
      tileText(s), smemText(ctx),
      gridText(ctx, "grid (ceil(chunk_cols / bm), ceil(k / bn))"),
      (k.accumulateRowBlocks
           ? fmt::format("written as {} by row block 0, accumulated (f32) by later "
                         "row blocks",
                         dtypeName(k.outType))
           : fmt::format("written once as {} (round to nearest even)",
                         dtypeName(k.outType))) +
          (k.out.space == plan::Space::Output
               ? "; a run that accumulates into this output adds to it (old + sum, "
                 "rounded once)"
               : "")};
  if (ts.valid())
    about.push_back(fmt::format(
        "before the rounding, element (v, j) adds sum over blocks b < ceil(N / {}) of "
        "sums[head[b][v]][j] where head[b][v] is a row of block b with target v ([Note: "
        "target group sums])",
        ts.groupRows));
  emitKernelHeader(w, ctx, about, roles);
  emitConfig(w, ctx, s);
  auto kb = openGemmKernel(w, ctx, k.tile.threads());
  LCEJIT_CHECK(!k.accumulateRowBlocks || k.outType == DType::F32,
               "{}: row blocks accumulate into an f32 output only, not {}", what,
               dtypeName(k.outType));
  // Added to (not overwritten): row blocks after the first, and every launch of a run that
  // accumulates into this output ([Note: accumulating outputs]).
  std::vector<std::string> terms;
  if (k.accumulateRowBlocks)
    terms.push_back(fmt::format("{} > 0", ctx.scalarParamName(Param::Kind::RowBlock)));
  if (k.out.space == plan::Space::Output)
    terms.push_back(ctx.accumulatesInto(k.out));
  const std::string accumulate =
      terms.empty() ? std::string("false") : fmt::format("{}", fmt::join(terms, " || "));
  if (isWgmma(ctx) && k.tile.tmaStore) {
    LCEJIT_CHECK(k.outType == DType::F32,
                 "{}: the TMA store epilogue writes an f32 output, not {}", what,
                 dtypeName(k.outType));
    // [Note: sm90 loaded sums]: the most rows of K whose accumulating tiles load their old
    // values (0: reduce-adds); the config's static_assert ties it to the tile.
    LCEJIT_CHECK(k.loadedSumsMaxRows >= 0 &&
                     (k.loadedSumsMaxRows == 0 || plan::wgmmaLoadedSums(k.tile)),
                 "{}: loadedSumsMaxRows {} on a tile that cannot load its sums through the "
                 "ring",
                 what, k.loadedSumsMaxRows);
    w.line("lcejit::sm90::gemm_drhs_tma_kernel<{}_config>(map_a, map_b, map_out, {}, {}LL, "
           "{}, {}, {}LL{});",
           ctx.name(), ctx.scalarParamName(Param::Kind::N), k.k,
           ctx.scalarParamName(Param::Kind::ChunkCols), accumulate, k.loadedSumsMaxRows,
           k.slabs ? fmt::format(", {}, &map_tail, {}",
                                 ctx.scalarParamName(Param::Kind::SlabSplit),
                                 ctx.scalarParamName(Param::Kind::SlabHead))
                   : std::string());
    return;
  }
  LCEJIT_CHECK(!k.slabs, "{}: dB over slabs writes an f32 output through TMA", what);
  // [Note: target group sums]: the template flag, the target type and the trailing
  // arguments of the group-sum epilogue.
  LCEJIT_CHECK(!ts.valid() || !isWgmma(ctx) || k.tile.bn * 2 <= plan::kTargetSumsPadBytes,
               "{}: a {}-column tile reads past the group sums' padding ({} bytes)", what,
               k.tile.bn, plan::kTargetSumsPadBytes);
  const std::string sumsTemplate =
      ts.valid() ? fmt::format(", true, {}", valueCType(ts.targetType)) : std::string();
  const std::string sumsArgs =
      ts.valid() ? fmt::format(", {}, {}, {}, {}LL, {}LL", ctx.bufferName(ts.sums),
                               ctx.bufferName(ts.head), ctx.bufferName(ts.target), ts.cols,
                               ts.groupRows)
                 : std::string();
  if (isWgmma(ctx)) {
    w.line("lcejit::sm90::gemm_drhs_kernel<{}_config, {}{}>(map_a, map_b, {}, {}, {}LL, {}, "
           "{}, {}{});",
           ctx.name(), elemTag(k.outType), sumsTemplate, ctx.bufferName(k.out),
           ctx.scalarParamName(Param::Kind::N), k.k,
           ctx.scalarParamName(Param::Kind::ChunkBegin),
           ctx.scalarParamName(Param::Kind::ChunkCols), accumulate, sumsArgs);
    return;
  }
  w.line("lcejit::gemm_drhs_kernel<{}_config, {}{}>({}, {}, {}, {}, {}, {}LL, "
         "{}, {}, {}{});",
         ctx.name(), elemTag(k.outType), sumsTemplate, ctx.bufferName(k.dz),
         split ? ctx.bufferName(k.dzLo) : "nullptr", ctx.bufferName(k.a),
         ctx.bufferName(k.out), ctx.scalarParamName(Param::Kind::N), k.k,
         ctx.scalarParamName(Param::Kind::ChunkBegin),
         ctx.scalarParamName(Param::Kind::ChunkCols), accumulate, sumsArgs);
}

} // namespace

void emitGemmKernel(CodeWriter &w, const KernelContext &ctx) {
  std::visit(
      [&](const auto &body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, plan::GemmReduceKernel>)
          emitGemmReduce(w, ctx, body);
        else if constexpr (std::is_same_v<T, plan::GemmDzKernel>)
          emitGemmDz(w, ctx, body);
        else if constexpr (std::is_same_v<T, plan::GemmDLhsKernel>)
          emitGemmDLhs(w, ctx, body);
        else if constexpr (std::is_same_v<T, plan::GemmDRhsKernel>)
          emitGemmDRhs(w, ctx, body);
        else
          LCEJIT_CHECK(false, "kernel '{}' is not a GEMM", ctx.name());
      },
      ctx.kernel().body);
}

} // namespace lcejit::codegen::detail
