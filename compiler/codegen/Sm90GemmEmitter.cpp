//===- Sm90GemmEmitter.cpp - Plain GEMMs on the Hopper mainloop ------------===//

#include "compiler/codegen/Sm90GemmEmitter.h"

#include "compiler/codegen/CodeWriter.h"
#include "compiler/codegen/DeviceHeaders.h"
#include "compiler/codegen/KernelEmitters.h"
#include "compiler/support/Check.h"

#include <set>

namespace lcejit::codegen {

namespace {

std::string configName(const Sm90GemmSpec &s) { return s.name + "_config"; }

} // namespace

void checkSm90GemmSpec(const Sm90GemmSpec &s) {
  LCEJIT_CHECK_ARG(detail::isCIdentifier(s.name), "sm90 GEMM name '{}' is not a C identifier",
                   s.name);
  LCEJIT_CHECK_ARG(s.name.rfind("lcejit", 0) != 0,
                   "sm90 GEMM name '{}' uses the reserved prefix 'lcejit'", s.name);
  LCEJIT_CHECK_ARG(s.bn == 64 || s.bn == 128 || s.bn == 192 || s.bn == 256,
                   "sm90 GEMM '{}': bn = {} (64, 128, 192 or 256)", s.name, s.bn);
  LCEJIT_CHECK_ARG(s.stages >= 2 && s.stages <= 8, "sm90 GEMM '{}': stages = {} (2 to 8)",
                   s.name, s.stages);
  LCEJIT_CHECK_ARG(s.bm == 128 || (s.bm == 64 && s.pingpong) || (s.bm == 192 && !s.pingpong),
                   "sm90 GEMM '{}': bm = {} (128, 64 with ping-pong consumers, or 192 with "
                   "cooperative ones)",
                   s.name, s.bm);
  LCEJIT_CHECK_ARG(s.bm != 192 || s.bn <= 192,
                   "sm90 GEMM '{}': bn = {} with three consumers (at most 192: ptxas compiles "
                   "a 512-thread kernel in 128 registers)",
                   s.name, s.bn);
  LCEJIT_CHECK_ARG(!s.pingpong || s.bn * s.bm <= 128 * 128,
                   "sm90 GEMM '{}': bn = {} with ping-pong consumers of {} rows (at most {})",
                   s.name, s.bn, s.bm, 128 * 128 / s.bm);
  LCEJIT_CHECK_ARG(s.clusterM == 1 || (s.clusterM == 2 && s.bKMajor),
                   "sm90 GEMM '{}': clusterM = {} (1, or 2 with a K-major B)", s.name,
                   s.clusterM);
  LCEJIT_CHECK_ARG(detail::gemmElemTag(s.out) != nullptr,
                   "sm90 GEMM '{}': output type {} (bf16, f16, f32)",
                   s.name, dtypeName(s.out));
  LCEJIT_CHECK_ARG(sm90GemmSharedBytes(s) <= 232448,
                   "sm90 GEMM '{}': {} bytes of shared memory for bn = {} and {} stages (at "
                   "most 232448)",
                   s.name, sm90GemmSharedBytes(s), s.bn, s.stages);
}

int32_t sm90GemmThreads(const Sm90GemmSpec &s) {
  // Mirrors lcejit::sm90::GemmConfig::THREADS ([Note: sm90 three consumers]).
  return s.bm == 192 && !s.pingpong ? 512 : 384;
}

int32_t sm90GemmSharedBytes(const Sm90GemmSpec &s) {
  // Mirrors lcejit::sm90::GemmConfig: alignment slack, stages of A and B, barriers.
  const int32_t stage = s.bm * 64 * 2 + s.bn * 64 * 2;
  return 1024 + s.stages * stage + 2 * s.stages * 8;
}

std::string describe(const Sm90GemmSpec &s) {
  return fmt::format("tile {}x{}x64, {} stages{}{}{}, A {}, B {}, out {}, {} bytes shared", s.bm,
                     s.bn, s.stages, s.pingpong ? ", ping-pong" : "",
                     sm90GemmThreads(s) == 512 ? ", three consumers" : "",
                     s.clusterM > 1 ? ", pairs sharing B" : "", s.aKMajor ? "K-major" : "MN-major",
                     s.bKMajor ? "K-major" : "MN-major", dtypeName(s.out),
                     sm90GemmSharedBytes(s));
}

EmittedModule emitSm90GemmModule(const std::vector<Sm90GemmSpec> &specs) {
  LCEJIT_CHECK_ARG(!specs.empty(), "an sm90 GEMM module needs at least one kernel");
  std::set<std::string> names;
  for (const Sm90GemmSpec &s : specs) {
    checkSm90GemmSpec(s);
    LCEJIT_CHECK_ARG(names.insert(s.name).second, "two sm90 GEMMs are named '{}'", s.name);
  }

  EmittedModule m;
  CodeWriter w;
  w.comment("lcejit: plain GEMMs on the sm_90a mainloop (compiler/codegen/Sm90GemmEmitter.h)");
  for (const Sm90GemmSpec &s : specs)
    w.comment(fmt::format("  {}: {}", s.name, describe(s)));
  w.blank();
  w.raw(deviceHeaderPrelude());
  w.blank();
  w.line("#if !defined(LCEJIT_SM90)");
  w.line("#error \"the sm90 GEMM kernels need --gpu-architecture=sm_90a\"");
  w.line("#endif");
  for (const Sm90GemmSpec &s : specs) {
    w.blank();
    w.comment(fmt::format("{}: {}", s.name, describe(s)));
    w.line("{}", detail::sm90GemmConfigTypedef(configName(s), s.bn, s.stages, s.aKMajor,
                                               s.bKMajor, s.pingpong, false, s.clusterM, 1,
                                               s.bm));
    w.line("static_assert({}::SMEM_BYTES == {}, \"shared memory must match "
           "codegen::sm90GemmSharedBytes\");",
           configName(s), sm90GemmSharedBytes(s));
    w.line("static_assert({}::THREADS == {}, \"threads must match "
           "codegen::sm90GemmThreads\");",
           configName(s), sm90GemmThreads(s));
    w.line("extern \"C\" __global__ void __launch_bounds__({}, 1)", sm90GemmThreads(s));
    w.line("{}(const __grid_constant__ lcejit::sm90::TensorMap map_a,", s.name);
    w.line("    const __grid_constant__ lcejit::sm90::TensorMap map_b, void *out,");
    w.line("    long long ld_out, long long m, long long n, long long k, int group) {{");
    w.indent();
    w.line("if (!lcejit::launch_ok(nullptr, 0, {0}::SMEM_BYTES, {0}::THREADS, -1, 1))",
           configName(s));
    w.line("  return; // no error word here: a wrong launch writes nothing");
    w.line("lcejit::sm90::StoreEpilogue<{}> epi{{out, ld_out, m, n}};",
           detail::gemmElemTag(s.out));
    w.line("lcejit::sm90::gemm<{}>(map_a, map_b, epi, m, n, k, group);", configName(s));
    w.dedent();
    w.line("}}");
    m.kernelNames.push_back(s.name);
  }
  m.source = w.str();
  return m;
}

} // namespace lcejit::codegen
