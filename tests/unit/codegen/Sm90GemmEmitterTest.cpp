//===- Sm90GemmEmitterTest.cpp - The Hopper GEMM module, without a GPU -----===//
//
// NVRTC compiles the generated sm_90a GEMMs here (no GPU needed): every kernel must have
// no spills and no stack, ptxas must not have dropped setmaxnreg (C7508) or serialized
// the wgmma pipeline (C751x), and the PTX must hold the instructions the design rests on
// (wgmma, TMA, mbarrier parity waits, setmaxnreg). The SASS check (HGMMA, UTMALDG) runs
// in the GPU suite, where cuobjdump is installed.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/Sm90GemmEmitter.h"
#include "lcejit/Error.h"
#include "runtime/Nvrtc.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <iostream>

using namespace lcejit;
using codegen::Sm90GemmSpec;

namespace {

std::vector<Sm90GemmSpec> allLayouts() {
  return {{"fwd", 256, 4, true, true, DType::BF16},
          {"dh", 256, 4, true, false, DType::F32},
          {"dw", 256, 4, false, false, DType::F32},
          {"dw128", 128, 6, false, false, DType::BF16},
          {"fwd192", 192, 4, true, true, DType::BF16},
          {"dh64", 64, 2, true, false, DType::F16},
          {"fwdpp", 128, 6, true, true, DType::BF16, true},
          {"dwpp", 64, 4, false, false, DType::F32, true},
          {"fwdpp64", 256, 5, true, true, DType::BF16, true, 64},
          {"dhpp64", 256, 5, true, false, DType::F32, true, 64},
          {"fwdpp64mc", 256, 5, true, true, DType::BF16, true, 64, 2}};
}

/// Compiles `m` for sm_90a and checks ptxas's report: setmaxnreg kept (no C7508) and the
/// wgmma pipeline not serialized (no C7509-C7518), no warning, one kernel for each of
/// `kernels` specs, each without spills or a stack frame in exactly `registers`.
runtime::NvrtcOutput compileWithoutSpills(const codegen::EmittedModule &m, size_t kernels,
                                          const char *label, int registers) {
  runtime::NvrtcOutput out =
      runtime::compileCuda(runtime::NvrtcRequest{m.source, "sm_90a", {}, label});
  std::cout << fmt::format("NVRTC {:.0f} ms for {} kernels\n", out.compileMs, kernels);
  for (const char *code : {"C7508", "C7509", "C7510", "C7511", "C7515", "C7517", "C7518"})
    EXPECT_EQ(out.log.find(code), std::string::npos) << code << " in:\n" << out.log;
  EXPECT_EQ(out.log.find("warning"), std::string::npos) << out.log;
  EXPECT_EQ(out.kernels.size(), kernels) << out.log;
  for (const runtime::PtxasKernelInfo &k : out.kernels) {
    std::cout << fmt::format("  {:<9} {} regs, stack {} B, spill {}/{} B\n", k.kernel,
                             k.registers, k.stackFrameBytes, k.spillStoreBytes,
                             k.spillLoadBytes);
    EXPECT_EQ(k.spillStoreBytes, 0) << k.kernel;
    EXPECT_EQ(k.spillLoadBytes, 0) << k.kernel;
    EXPECT_EQ(k.stackFrameBytes, 0) << k.kernel;
    EXPECT_EQ(k.registers, registers) << k.kernel;
  }
  return out;
}

TEST(Sm90GemmEmitter, CompilesForSm90aWithoutSpillsOrSerializedWgmma) {
  std::vector<Sm90GemmSpec> specs = allLayouts();
  codegen::EmittedModule m = codegen::emitSm90GemmModule(specs);
  // 384 threads at one CTA per SM: 65536 / 384 rounded down to 8 = 168 registers.
  const runtime::NvrtcOutput out = compileWithoutSpills(m, specs.size(), "sm90-gemm", 168);
  for (const char *inst :
       {"wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16",
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "mbarrier.try_wait.parity.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64",
        "setmaxnreg.inc.sync.aligned.u32 232", "setmaxnreg.dec.sync.aligned.u32 40",
        "wgmma.wait_group.sync.aligned 1", "prefetch.tensormap"})
    EXPECT_NE(out.ptx.find(inst), std::string::npos) << inst;
  for (const Sm90GemmSpec &s : specs)
    EXPECT_NE(out.ptx.find(".entry " + s.name), std::string::npos) << s.name;
}

// [Note: sm90 three consumers]: 192-row tiles run 512 threads, so the kernel's entry
// count is 65536 / 512 = 128 registers, the most ptxas allocates anywhere in the kernel
// (setmaxnreg does not raise it): a 192-column tile's 96 accumulators must fit without
// spilling, in every layout, with and without pairs. A 256-column tile does not
// (m64n256k16 needs 154 registers: ptxas stops with C7602), so the spec is refused.
TEST(Sm90GemmEmitter, ThreeConsumersCompileAt512ThreadsWithoutSpills) {
  const std::vector<Sm90GemmSpec> specs = {
      {"fwd3", 192, 4, true, true, DType::BF16, false, 192},
      {"fwd3mc", 192, 4, true, true, DType::BF16, false, 192, 2},
      {"dh3", 192, 4, true, false, DType::F32, false, 192},
      {"dw3", 192, 4, false, false, DType::BF16, false, 192},
      {"fwd3n128", 128, 5, true, true, DType::F16, false, 192}};
  codegen::EmittedModule m = codegen::emitSm90GemmModule(specs);
  for (const char *text :
       {"typedef lcejit::sm90::GemmConfig<192, 4, lcejit::K_MAJOR, lcejit::K_MAJOR, 0, 0, 1, 1, "
        "192> fwd3_config;",
        "static_assert(fwd3_config::THREADS == 512", "tile 192x192x64, 4 stages, three consumers",
        "extern \"C\" __global__ void __launch_bounds__(512, 1)\nfwd3("})
    EXPECT_NE(m.source.find(text), std::string::npos) << text;
  EXPECT_EQ(codegen::sm90GemmThreads(specs[0]), 512);
  EXPECT_EQ(codegen::sm90GemmThreads({"a", 256, 4, true, true, DType::BF16}), 384);
  // 1024 alignment slack + stages * (24 KB of A + bn * 128 B of B) + 16 B of barriers each.
  EXPECT_EQ(codegen::sm90GemmSharedBytes(specs[0]), 1024 + 4 * (24576 + 24576) + 64);
  const runtime::NvrtcOutput out = compileWithoutSpills(m, specs.size(), "sm90-gemm-192", 128);
  for (const char *inst : {"wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16",
                           "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
                           "setmaxnreg.inc.sync.aligned.u32 160",
                           "setmaxnreg.dec.sync.aligned.u32 32",
                           "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::"
                           "complete_tx::bytes.multicast::cluster"})
    EXPECT_NE(out.ptx.find(inst), std::string::npos) << inst;
  EXPECT_EQ(out.ptx.find("setmaxnreg.inc.sync.aligned.u32 232"), std::string::npos);
}

TEST(Sm90GemmEmitter, OtherArchsStopWithAClearError) {
  codegen::EmittedModule m = codegen::emitSm90GemmModule(allLayouts());
  try {
    runtime::compileCuda(runtime::NvrtcRequest{m.source, "sm_80", {}, "sm90-on-sm80"});
    FAIL() << "an sm90 module compiled for sm_80";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Nvrtc);
    EXPECT_NE(std::string(e.what()).find("need --gpu-architecture=sm_90a"), std::string::npos)
        << e.what();
  }
}

TEST(Sm90GemmEmitter, ModuleTextNamesEveryDecision) {
  codegen::EmittedModule m =
      codegen::emitSm90GemmModule({{"dw", 128, 6, false, false, DType::F32}});
  ASSERT_EQ(m.kernelNames, std::vector<std::string>{"dw"});
  for (const char *text :
       {"// lcejit: plain GEMMs on the sm_90a mainloop",
        "dw: tile 128x128x64, 6 stages, A MN-major, B MN-major, out f32, 197728 bytes shared",
        "typedef lcejit::sm90::GemmConfig<128, 6, lcejit::MN_MAJOR, lcejit::MN_MAJOR> "
        "dw_config;",
        "static_assert(dw_config::SMEM_BYTES == 197728",
        "extern \"C\" __global__ void __launch_bounds__(384, 1)",
        "lcejit::sm90::StoreEpilogue<lcejit::elem_f32> epi{out, ld_out, m, n};",
        "lcejit::sm90::gemm<dw_config>(map_a, map_b, epi, m, n, k, group);"})
    EXPECT_NE(m.source.find(text), std::string::npos) << text;
}

TEST(Sm90GemmEmitter, SharedBytesFollowTheTile) {
  // 1024 alignment slack + stages * (16 KB of A + bn * 128 B of B) + 16 B of barriers each.
  EXPECT_EQ(codegen::sm90GemmSharedBytes({"a", 256, 4, true, true, DType::BF16}),
            1024 + 4 * (16384 + 32768) + 64);
  EXPECT_EQ(codegen::sm90GemmSharedBytes({"a", 64, 2, true, true, DType::BF16}),
            1024 + 2 * (16384 + 8192) + 32);
  // A 64-row tile: 8 KB of A a stage.
  EXPECT_EQ(codegen::sm90GemmSharedBytes({"a", 256, 5, true, true, DType::BF16, true, 64}),
            1024 + 5 * (8192 + 32768) + 80);
}

TEST(Sm90GemmEmitter, SixtyFourRowPingPongPassesItsRowsToTheConfig) {
  codegen::EmittedModule m =
      codegen::emitSm90GemmModule({{"pp64", 256, 5, true, false, DType::BF16, true, 64}});
  for (const char *text :
       {"typedef lcejit::sm90::GemmConfig<256, 5, lcejit::K_MAJOR, lcejit::MN_MAJOR, 1, 0, 1, "
        "1, 64> pp64_config;",
        "static_assert(pp64_config::SMEM_BYTES == 205904", "tile 64x256x64, 5 stages, ping-pong"})
    EXPECT_NE(m.source.find(text), std::string::npos) << text;
}

void expectRejected(const Sm90GemmSpec &s, const std::string &needle) {
  try {
    codegen::checkSm90GemmSpec(s);
    FAIL() << "accepted: " << needle;
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Sm90GemmEmitter, BadSpecsAreRejectedNamingTheField) {
  expectRejected({"x", 96, 4, true, true, DType::BF16}, "bn = 96");
  expectRejected({"x", 256, 1, true, true, DType::BF16}, "stages = 1");
  expectRejected({"x", 256, 9, true, true, DType::BF16}, "stages = 9");
  expectRejected({"x", 256, 5, true, true, DType::BF16}, "bytes of shared memory");
  expectRejected({"x", 256, 4, true, true, DType::I64}, "output type i64");
  expectRejected({"x", 256, 4, true, true, DType::BF16, true}, "bn = 256 with ping-pong");
  expectRejected({"x", 256, 4, true, true, DType::BF16, false, 64},
                 "bm = 64 (128, 64 with ping-pong consumers, or 192 with cooperative ones)");
  expectRejected({"x", 128, 4, true, true, DType::BF16, true, 96}, "bm = 96");
  expectRejected({"x", 64, 4, true, true, DType::BF16, true, 192}, "bm = 192");
  expectRejected({"x", 256, 4, true, true, DType::BF16, false, 192},
                 "bn = 256 with three consumers (at most 192");
  expectRejected({"x", 128, 4, true, false, DType::BF16, true, 128, 2},
                 "clusterM = 2 (1, or 2 with a K-major B)");
  expectRejected({"1x", 256, 4, true, true, DType::BF16}, "'1x' is not a C identifier");
  expectRejected({"lcejit_x", 256, 4, true, true, DType::BF16}, "reserved prefix");
  EXPECT_THROW(codegen::emitSm90GemmModule({}), Error);
  EXPECT_THROW(codegen::emitSm90GemmModule({{"a", 256, 4, true, true, DType::BF16},
                                            {"a", 128, 4, true, true, DType::BF16}}),
               Error);
}

} // namespace
