//===- CastEmitter.cpp - CastKernel -> cast_kernel wrapper
//------------------===//

#include "compiler/codegen/KernelEmitters.h"
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

} // namespace lcejit::codegen::detail
