//===- CastEmitter.cpp - CastKernel -> cast_kernel wrapper
//------------------===//

#include "compiler/codegen/KernelEmitters.h"
#include "compiler/codegen/ScalarEmitter.h"
#include "compiler/support/Check.h"

namespace lcejit::codegen::detail {

using plan::Param;

void emitCastKernel(CodeWriter &w, const KernelContext &ctx) {
  const plan::CastKernel &k = std::get<plan::CastKernel>(ctx.kernel().body);
  const char *tag = nullptr;
  switch (k.outType) {
  case DType::BF16:
    tag = "lcejit::elem_bf16";
    break;
  case DType::F16:
    tag = "lcejit::elem_f16";
    break;
  case DType::F32:
    tag = "lcejit::elem_f32";
    break;
  default:
    LCEJIT_CHECK(false, "cast kernel '{}': output type {} (bf16, f16 or f32)",
                 ctx.name(), dtypeName(k.outType));
  }
  LCEJIT_CHECK(k.k > 0, "cast kernel '{}': k = {}", ctx.name(), k.k);
  ParamRoles roles;
  roles.add(ctx.bufferName(k.in), fmt::format("in f32 [N, {}]", k.k));
  roles.add(ctx.bufferName(k.out),
            fmt::format("out {} [N, {}]", dtypeName(k.outType), k.k));
  std::vector<std::string> about = {
      fmt::format("out[i] = {}(in[i]) (round to nearest even) for i < N * {}",
                  dtypeName(k.outType), k.k),
      "block 256, grid-stride loop (grid min(ceil(N * k / 1024), 65536))"};
  if (k.out.space == plan::Space::Output)
    about.push_back(fmt::format("a run that accumulates into this output writes "
                                "out[i] = {}(out[i] + in[i]) (one rounding)",
                                dtypeName(k.outType)));
  emitKernelHeader(w, ctx, about, roles);
  auto kb = openKernel(w, ctx, 256);
  w.line("lcejit::cast_kernel<{}>({}, {}, {} * {}LL, {});", tag,
         ctx.bufferName(k.in), ctx.bufferName(k.out),
         k.rows >= 0 ? fmt::format("{}LL", k.rows)
                     : ctx.scalarParamName(Param::Kind::N),
         k.k, ctx.accumulatesInto(k.out));
}

/// [Note: row-scaled stored values]: the per-row form of the DzForm kernel.
static void emitDzRowScaleKernel(CodeWriter &w, const KernelContext &ctx,
                                 const plan::DzFormKernel &k) {
  LCEJIT_CHECK(k.target.valid() && (k.aOnly || (k.residual.valid() && k.rowScale.valid())) &&
                   (k.targetType == DType::I32 || k.targetType == DType::I64) &&
                   (!k.aOnly || k.aScaled.valid()),
               "dz_form kernel '{}': the row-scaled form needs a target (i32/i64), a "
               "residual and a row scale (or, a_only, a scaled A)",
               ctx.name());
  const int64_t aLd = k.aLd > 0 ? k.aLd : k.k;
  LCEJIT_CHECK(!k.aScaled.valid() || (k.aCol0 >= 0 && k.aCol0 % 8 == 0 && aLd % 8 == 0 &&
                                      k.aCol0 + k.k <= aLd),
               "dz_form kernel '{}': A columns [{}, +{}) of rows {} wide (multiples of 8, "
               "inside the row)",
               ctx.name(), k.aCol0, k.k, aLd);
  LCEJIT_CHECK(!k.aScaled.valid() || (k.a.valid() && k.aType == DType::BF16 && k.k > 0 &&
                                      k.k % 8 == 0),
               "dz_form kernel '{}': the scaled A needs a bf16 A with k a positive multiple "
               "of 8 (a {}, k = {})",
               ctx.name(), dtypeName(k.aType), k.k);
  ParamRoles roles;
  roles.add(ctx.bufferName(k.lse), "f32 [N] row logsumexp");
  roles.add(ctx.bufferName(k.scale), "f32 [N] per-row factor of dZ");
  if (!k.aOnly)
    roles.add(ctx.bufferName(k.targetDz), "f32 [N] dZ at the target column");
  roles.add(ctx.bufferName(k.target), fmt::format("{} [N] target column", dtypeName(k.targetType)));
  if (!k.aOnly) {
    roles.add(ctx.bufferName(k.residual), "f32 [N] residual = target_dz (the stored target "
                                          "column is 0)");
    roles.add(ctx.bufferName(k.rowScale), "f32 [N] row scale of the stored values");
  }
  const bool perRow = k.referenceRow.valid();
  LCEJIT_CHECK(perRow == (k.recompute.valid() || k.aOnly),
               "dz_form kernel '{}': a per-row reference and the recompute flags go together",
               ctx.name());
  if (perRow) {
    roles.add(ctx.bufferName(k.referenceRow), "f32 [N] the row's reference c (its target value)");
    if (!k.aOnly)
      roles.add(ctx.bufferName(k.recompute),
              fmt::format("out i32 [N] 1 where the stored values cannot hold the row (lse - c > "
                          "{:g} or not finite): the filtered dZ GEMM writes it",
                          plan::kRowScaledRange));
  }
  if (k.aScaled.valid()) {
    roles.add(ctx.bufferName(k.a), fmt::format("A bf16 [N, {}]", aLd));
    roles.add(ctx.bufferName(k.aScaled),
              fmt::format("out bf16 [rows of the block, {}]: row_scale[r] * A[r][{} + j]", k.k,
                          k.aCol0));
  }
  std::vector<std::string> about = {
      "the materialized schedule's row-scaled dZ ([Note: row-scaled stored values] in "
      "Program.h): the stored values stay;",
      perRow ? fmt::format("row_scale[r] = scale[r] * exp(c[r] - lse[r]) (1 where recompute[r], "
                           "0 for a target outside [0, {0})); residual[r] = target_dz[r] for "
                           "0 <= target[r] < {0} ([Note: a per-row reference])",
                           k.cols)
             : fmt::format("row_scale[r] = scale[r] * exp({:.17g} - lse[r]); residual[r] = "
                           "target_dz[r] for 0 <= target[r] < {}",
                           k.reference, k.cols),
      k.aScaled.valid() ? "a_scaled[r][j] = bf16(row_scale[r] * A[r][j]); block 256, "
                          "grid-stride over rows, then over 8-element vectors"
                        : "block 256, grid-stride over rows"};
  if (k.aOnly)
    about.insert(about.begin() + 1, fmt::format("a_only: writes a_scaled (columns [{}, {}) of "
                                                "A) and nothing else ([Note: a scaled A in "
                                                "column parts])",
                                                k.aCol0, k.aCol0 + k.k));
  emitKernelHeader(w, ctx, about, roles);
  auto kb = openKernel(w, ctx, 256);
  const std::string none = "nullptr";
  const bool part = k.aCol0 != 0 || k.aLd != 0;
  w.line("lcejit::dz_row_scale_kernel<{}>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}LL, {}LL, {}, "
         "{}, {}, {}{});",
         valueCType(k.targetType), ctx.bufferName(k.lse), ctx.bufferName(k.scale),
         k.aOnly ? none : ctx.bufferName(k.targetDz), ctx.bufferName(k.target),
         k.aOnly ? none : ctx.bufferName(k.residual),
         k.aOnly ? none : ctx.bufferName(k.rowScale),
         k.aScaled.valid() ? ctx.bufferName(k.a) : std::string("nullptr"),
         k.aScaled.valid() ? ctx.bufferName(k.aScaled) : std::string("nullptr"),
         ctx.scalarParamName(Param::Kind::N), k.aScaled.valid() ? k.k : 0, k.cols,
         f32Literal(perRow ? 0.0 : k.reference),
         perRow ? ctx.bufferName(k.referenceRow) : std::string("nullptr"),
         perRow && !k.aOnly ? ctx.bufferName(k.recompute) : std::string("nullptr"),
         f32Literal(plan::kRowScaledRange),
         part ? fmt::format(", {}LL, {}LL", k.aCol0, aLd) : std::string());
}

/// [Note: values scaled in place]: the stored values times their row's scale, in place.
static void emitDzScaleValuesKernel(CodeWriter &w, const KernelContext &ctx,
                                    const plan::DzFormKernel &k) {
  LCEJIT_CHECK(k.dz.valid() && k.rowScale.valid() && k.cols > 0 && k.cols % 8 == 0 &&
                   !k.aScaled.valid() && !k.residual.valid() && !k.aOnly,
               "dz_form kernel '{}': scaling the values in place needs the values, a row "
               "scale and cols a positive multiple of 8 (cols = {}), and nothing else",
               ctx.name(), k.cols);
  ParamRoles roles;
  roles.add(ctx.bufferName(k.dz),
            fmt::format("in and out bf16 stored values [rows of the block, {}]{}", k.cols,
                        k.slabs ? ", or slabs of 128 columns ([Note: stored values in dW])"
                                : ""));
  roles.add(ctx.bufferName(k.rowScale), "f32 [N] row scale (the row form's)");
  emitKernelHeader(w, ctx,
                   {"the materialized schedule's values scaled in place ([Note: values "
                    "scaled in place] in Program.h), after dA, before dB:",
                    "dz[r][c] = bf16(row_scale[r] * dz[r][c]); dB then reads dZ and the "
                    "unscaled A",
                    "block 256, y over 128-column groups, x strided over rows (16-byte "
                    "loads and stores)"},
                   roles);
  auto kb = openKernel(w, ctx, 256);
  if (k.slabs)
    w.line("lcejit::dz_scale_values_kernel({}, {}, {}, {}LL, {}, {}, {}, {});",
           ctx.bufferName(k.dz), ctx.bufferName(k.rowScale),
           ctx.scalarParamName(Param::Kind::N), k.cols,
           ctx.scalarParamName(Param::Kind::SlabSplit),
           ctx.scalarParamName(Param::Kind::SlabStride),
           ctx.scalarParamName(Param::Kind::SlabBase),
           ctx.scalarParamName(Param::Kind::SlabHead));
  else
    w.line("lcejit::dz_scale_values_kernel({}, {}, {}, {}LL, -1LL, 0LL, nullptr, 0LL);",
           ctx.bufferName(k.dz), ctx.bufferName(k.rowScale),
           ctx.scalarParamName(Param::Kind::N), k.cols);
}

void emitDzFormKernel(CodeWriter &w, const KernelContext &ctx) {
  const plan::DzFormKernel &k = std::get<plan::DzFormKernel>(ctx.kernel().body);
  if (k.rowScaled && k.scaleValues) {
    emitDzScaleValuesKernel(w, ctx, k);
    return;
  }
  if (k.rowScaled) {
    emitDzRowScaleKernel(w, ctx, k);
    return;
  }
  LCEJIT_CHECK(k.cols > 0 && k.cols % 8 == 0 && k.tileCols > 0 && k.tileCols % 8 == 0,
               "dz_form kernel '{}': cols = {} and tile_cols = {} must be positive "
               "multiples of 8",
               ctx.name(), k.cols, k.tileCols);
  LCEJIT_CHECK(!k.target.valid() || k.targetType == DType::I32 || k.targetType == DType::I64,
               "dz_form kernel '{}': target type {} (i32 or i64)", ctx.name(),
               dtypeName(k.targetType));
  const int64_t tiles = (k.cols + k.tileCols - 1) / k.tileCols;
  ParamRoles roles;
  roles.add(ctx.bufferName(k.dz),
            fmt::format("in fp16 stored values, out bf16 dZ [N, {}] (in place)", k.cols));
  roles.add(ctx.bufferName(k.tileMax), fmt::format("f32 tile maxima [N, {}]", tiles));
  roles.add(ctx.bufferName(k.lse), "f32 [N] row logsumexp");
  roles.add(ctx.bufferName(k.scale), "f32 [N] per-row factor of dZ");
  roles.add(ctx.bufferName(k.targetDz), "f32 [N] dZ at the target column");
  if (k.target.valid())
    roles.add(ctx.bufferName(k.target), fmt::format("{} [N] target column", dtypeName(k.targetType)));
  LCEJIT_CHECK(!k.residual.valid() || k.target.valid(),
               "dz_form kernel '{}': a residual without a target", ctx.name());
  if (k.residual.valid())
    roles.add(ctx.bufferName(k.residual),
              "f32 [N] residual = target_dz - bf16(target_dz) ([Note: the target-column "
              "residual])");
  std::vector<std::string> about = {
      "the materialized schedule's dZ ([Note: the materialized backward] in Program.h):",
      fmt::format("dz[r][c] = bf16(c == target[r] ? target_dz[r] : values[r][c] * scale[r] * "
                  "exp(tile_max[r][c / {}] - lse[r]))",
                  k.tileCols),
      "block 256, grid-stride over 8-column vectors (16-byte loads and stores)"};
  emitKernelHeader(w, ctx, about, roles);
  auto kb = openKernel(w, ctx, 256);
  w.line("lcejit::dz_form_kernel<{}>({}, {}, {}, {}, {}, {}, {}, {}LL, {}, {});",
         !k.target.valid() ? "void" : valueCType(k.targetType),
         ctx.bufferName(k.dz), ctx.bufferName(k.tileMax), ctx.bufferName(k.lse),
         ctx.bufferName(k.scale), ctx.bufferName(k.targetDz),
         k.target.valid() ? ctx.bufferName(k.target) : std::string("nullptr"),
         ctx.scalarParamName(Param::Kind::N), k.cols, k.tileCols,
         k.residual.valid() ? ctx.bufferName(k.residual) : std::string("nullptr"));
}

void emitTargetCorrectionKernel(CodeWriter &w, const KernelContext &ctx) {
  const auto &k = std::get<plan::TargetCorrectionKernel>(ctx.kernel().body);
  if (k.findGroups) {
    // [Note: a group's first and last rows] (Program.h).
    LCEJIT_CHECK(k.groups.valid() && k.cols > 0 && !k.out.valid() && !k.sums.valid() &&
                     (k.residual.targetType == DType::I32 ||
                      k.residual.targetType == DType::I64),
                 "target_correction kernel '{}': finding groups needs groups and cols > 0 "
                 "(cols = {}), no out or sums, targets of {} (i32 or i64)",
                 ctx.name(), k.cols, dtypeName(k.residual.targetType));
    ParamRoles roles;
    roles.add(ctx.bufferName(k.residual.target),
              fmt::format("{} [N] target column", dtypeName(k.residual.targetType)));
    roles.add(ctx.bufferName(k.groups),
              fmt::format("groups u32 [2, {}]: ~first row, last row + 1 per target", k.cols));
    std::vector<std::string> about = {
        "the groups of the target-column correction ([Note: a group's first and last rows], "
        "Program.h):",
        fmt::format("for rows r < N with 0 <= target[r] = t < {}: groups[t] = max(groups[t], "
                    "~r), groups[{} + t] = max(groups[{} + t], r + 1) (atomic maxima)",
                    k.cols, k.cols, k.cols),
        "block 256, one thread per row, grid-stride"};
    emitKernelHeader(w, ctx, about, roles);
    auto kb = openKernel(w, ctx, 256);
    w.line("lcejit::target_groups_kernel<{}>({}, {}, {}, {}LL);",
           valueCType(k.residual.targetType), ctx.bufferName(k.residual.target),
           ctx.bufferName(k.groups), ctx.scalarParamName(Param::Kind::N), k.cols);
    return;
  }
  const char *aTag = gemmElemTag(k.aType);
  LCEJIT_CHECK(aTag != nullptr && k.k > 0 && k.cols > 0 &&
                   (k.residual.targetType == DType::I32 ||
                    k.residual.targetType == DType::I64),
               "target_correction kernel '{}': a of {} (bf16, f16 or f32), k = {}, cols = {}, "
               "targets of {} (i32 or i64)",
               ctx.name(), dtypeName(k.aType), k.k, k.cols, dtypeName(k.residual.targetType));
  ParamRoles roles;
  roles.add(ctx.bufferName(k.residual.buf), "f32 [N] dZ's target-column residual");
  roles.add(ctx.bufferName(k.residual.target),
            fmt::format("{} [N] target column", dtypeName(k.residual.targetType)));
  roles.add(ctx.bufferName(k.a), fmt::format("A {} [N, {}]", dtypeName(k.aType), k.k));
  if (k.sums.valid()) {
    // [Note: target group sums] (Program.h): the groups of the chunk's targets.
    LCEJIT_CHECK(!k.out.valid() && k.sums.head.valid() && k.sums.cols == k.cols &&
                     k.sums.target == k.residual.target && k.sums.groupRows > 0,
                 "target_correction kernel '{}': group sums write sums and heads (no out) for "
                 "the residual's targets, cols = {} (the sums say {})",
                 ctx.name(), k.cols, k.sums.cols);
    roles.add(ctx.bufferName(k.sums.sums),
              fmt::format("sums bf16 [N, {}]: a group's sum at its leader's row", k.k));
    roles.add(ctx.bufferName(k.sums.head),
              fmt::format("head i32 [ceil(N / {}), {}]: the leader of block b's rows with "
                          "target t",
                          k.sums.groupRows, k.cols));
    std::vector<std::string> about = {
        "the B-gradient part of [Note: the target-column residual] for a dB rounded once "
        "([Note: target group sums], Program.h):",
        fmt::format("for the rows of each {}-row block whose target t lies in [chunk_begin, "
                    "chunk_begin + chunk_cols): sums[g][j] = bf16(sum over the block's rows r "
                    "with target t (in row order) of residual[r] * A[r][j]), j < {}, and "
                    "head[block][t] = g, g the group's first row",
                    k.sums.groupRows, k.k),
        "block 256, one warp per group leader, grid-stride"};
    emitKernelHeader(w, ctx, about, roles);
    auto kb = openKernel(w, ctx, 256);
    w.line("lcejit::target_group_sums_kernel<{}, {}>({}, {}, {}, {}, {}, {}, {}LL, {}LL, {}, "
           "{}, {}LL);",
           aTag, valueCType(k.residual.targetType), ctx.bufferName(k.residual.buf),
           ctx.bufferName(k.residual.target), ctx.bufferName(k.a), ctx.bufferName(k.sums.sums),
           ctx.bufferName(k.sums.head), ctx.scalarParamName(Param::Kind::N), k.k, k.cols,
           ctx.scalarParamName(Param::Kind::ChunkBegin),
           ctx.scalarParamName(Param::Kind::ChunkCols), k.sums.groupRows);
    return;
  }
  roles.add(ctx.bufferName(k.out), fmt::format("out f32 [{}, {}]", k.cols, k.k));
  if (k.groups.valid())
    roles.add(ctx.bufferName(k.groups),
              fmt::format("groups u32 [2, {}]: each target's first and last rows, cleared "
                          "by its leader",
                          k.cols));
  std::vector<std::string> about = {
      "the B-gradient part of [Note: the target-column residual] (Program.h):",
      fmt::format("out[t][j] += sum over rows r < N with target[r] == t (in row order) of "
                  "residual[r] * A[r][j], 0 <= t < {}, j < {}: one add per element",
                  k.cols, k.k),
      k.groups.valid()
          ? "block 256, one warp per group leader (the group's first row, read from groups: "
            "[Note: a group's first and last rows]), grid-stride"
          : "block 256, one warp per group leader (the group's first row), grid-stride"};
  emitKernelHeader(w, ctx, about, roles);
  auto kb = openKernel(w, ctx, 256);
  w.line("lcejit::target_correction_kernel<{}, {}>({}, {}, {}, {}, {}, {}, {}LL, {}LL);", aTag,
         valueCType(k.residual.targetType),
         ctx.bufferName(k.residual.buf), ctx.bufferName(k.residual.target),
         ctx.bufferName(k.a), ctx.bufferName(k.out),
         k.groups.valid() ? ctx.bufferName(k.groups) : std::string("nullptr"),
         ctx.scalarParamName(Param::Kind::N), k.k, k.cols);
}

void emitRowDotKernel(CodeWriter &w, const KernelContext &ctx) {
  const auto &k = std::get<plan::RowDotKernel>(ctx.kernel().body);
  const char *tag = gemmElemTag(k.abType);
  LCEJIT_CHECK(tag != nullptr && k.k > 0 && k.cols > 0 &&
                   (k.targetType == DType::I32 || k.targetType == DType::I64),
               "row_dot kernel '{}': operands of {} (bf16, f16 or f32), k = {}, cols = {}, "
               "targets of {} (i32 or i64)",
               ctx.name(), dtypeName(k.abType), k.k, k.cols, dtypeName(k.targetType));
  ParamRoles roles;
  roles.add(ctx.bufferName(k.a), fmt::format("A {} [N, {}]", dtypeName(k.abType), k.k));
  roles.add(ctx.bufferName(k.b), fmt::format("B {} [{}, {}]", dtypeName(k.abType), k.cols, k.k));
  roles.add(ctx.bufferName(k.target), fmt::format("{} [N] target column", dtypeName(k.targetType)));
  roles.add(ctx.bufferName(k.out), "f32 [N] A[r]·B[t_r], summed in f64");
  std::vector<std::string> about = {
      "[Note: the exact target logit] (Program.h): the target logit again, with f64 "
      "accumulation, for the loss of a peaked row",
      fmt::format("out[r] = f32(sum_j f64(A[r][j]) * f64(B[t_r][j])), j < {}, for 0 <= t_r < {}; "
                  "0 otherwise",
                  k.k, k.cols),
      "block 256, one warp per row, grid-stride"};
  emitKernelHeader(w, ctx, about, roles);
  auto kb = openKernel(w, ctx, 256);
  w.line("lcejit::row_dot_kernel<{}, {}>({}, {}, {}, {}, {}, {}LL, {}LL);", tag,
         valueCType(k.targetType), ctx.bufferName(k.a),
         ctx.bufferName(k.b), ctx.bufferName(k.target), ctx.bufferName(k.out),
         ctx.scalarParamName(Param::Kind::N), k.k, k.cols);
}

} // namespace lcejit::codegen::detail
