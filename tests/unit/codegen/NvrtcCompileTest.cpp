//===- NvrtcCompileTest.cpp - Every generated module compiles with NVRTC
//---===//
//
// No GPU needed: NVRTC builds cubins for sm_90a and sm_80; ptxas reports
// registers, shared memory and spills per kernel (printed, and spills must be
// zero).
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "compiler/codegen/Emitter.h"
#include "runtime/Nvrtc.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <iostream>
#include <tuple>

using namespace lcejit;

namespace {

/// ptxas's report for kernel `k`, or null when it has none.
const runtime::PtxasKernelInfo *ptxasInfo(const runtime::NvrtcOutput &out,
                                          const std::string &k) {
  for (const runtime::PtxasKernelInfo &i : out.kernels)
    if (i.kernel == k)
      return &i;
  return nullptr;
}

class NvrtcPrograms
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(NvrtcPrograms, CompilesToCubinWithoutSpills) {
  const auto &[name, arch] = GetParam();
  plan::Program p = lcejit::testing::makeTestProgram(name);
  codegen::EmittedModule m = codegen::emitCuda(p);
  runtime::NvrtcOutput out =
      runtime::compileCuda(runtime::NvrtcRequest{m.source, arch, {}, name});
  ASSERT_GT(out.cubin.size(), 64u);
  EXPECT_EQ(std::string(out.cubin.begin(), out.cubin.begin() + 4), "\x7f"
                                                                   "ELF");
  EXPECT_EQ(out.log.find("warning"), std::string::npos) << out.log;
  std::cout << fmt::format("[{} {}] NVRTC {:.0f} ms, cubin {} bytes\n", name,
                           arch, out.compileMs, out.cubin.size());
  for (const std::string &k : m.kernelNames) {
    const runtime::PtxasKernelInfo *info = ptxasInfo(out, k);
    ASSERT_NE(info, nullptr) << "ptxas did not report " << k << "\n" << out.log;
    std::cout << fmt::format(
        "  {:<16} {:>3} regs  {:>6} B smem  {:>4} B stack  spill {}/{} B\n", k,
        info->registers, info->sharedBytes, info->stackFrameBytes,
        info->spillStoreBytes, info->spillLoadBytes);
    EXPECT_EQ(info->spillStoreBytes, 0) << k;
    EXPECT_EQ(info->spillLoadBytes, 0) << k;
    EXPECT_NE(out.ptx.find(".entry " + k), std::string::npos) << k;
  }
  bool tensorCores = false;
  for (const plan::Kernel &k : p.kernels) {
    if (const auto *g = std::get_if<plan::GemmReduceKernel>(&k.body))
      tensorCores |= g->gemm.math != plan::MathMode::SimtF32;
  }
  if (tensorCores) {
    EXPECT_NE(out.ptx.find("mma.sync.aligned.m16n8k16.row.col.f32"),
              std::string::npos);
  }
  EXPECT_NE(out.ptx.find("cp.async.cg.shared.global"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Programs, NvrtcPrograms,
    ::testing::Combine(::testing::ValuesIn(lcejit::testing::testProgramNames()),
                       ::testing::Values(std::string("sm_90a"),
                                         std::string("sm_80"))),
    [](const auto &info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param);
    });

} // namespace

namespace {

/// The LCE Program (softcap, so the epilogues are the heavier kind) with every
/// GEMM on one tile config; its kernels must compile without spills.
struct TileProgram {
  std::string name;
  lcejit::plan::TileConfig tile;
};

class NvrtcTiles
    : public ::testing::TestWithParam<std::tuple<TileProgram, std::string>> {};

TEST_P(NvrtcTiles, CompilesWithoutSpills) {
  const auto &[t, arch] = GetParam();
  lcejit::testing::LceOptions o;
  o.name = "tiles_" + t.name;
  o.softcap = 30.0;
  o.fwdTile = t.tile;
  o.bwdTile = t.tile;
  plan::Program p = lcejit::testing::makeLceProgram(o);
  codegen::EmittedModule m = codegen::emitCuda(p);
  runtime::NvrtcOutput out =
      runtime::compileCuda(runtime::NvrtcRequest{m.source, arch, {}, o.name});
  EXPECT_EQ(out.log.find("warning"), std::string::npos) << out.log;
  std::cout << fmt::format("[{} {}] tile {}x{}x{} warps {}x{} {} stages\n",
                           t.name, arch, t.tile.bm, t.tile.bn, t.tile.bk,
                           t.tile.warpsM, t.tile.warpsN, t.tile.stages);
  for (const std::string &k : m.kernelNames) {
    const runtime::PtxasKernelInfo *info = ptxasInfo(out, k);
    ASSERT_NE(info, nullptr) << "ptxas did not report " << k << "\n" << out.log;
    std::cout << fmt::format("  {:<24} {:>3} regs  {:>4} B stack  spill {}/{} B\n",
                             k, info->registers, info->stackFrameBytes,
                             info->spillStoreBytes, info->spillLoadBytes);
    EXPECT_EQ(info->spillStoreBytes, 0) << k;
    EXPECT_EQ(info->spillLoadBytes, 0) << k;
  }
  EXPECT_NE(out.ptx.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
            std::string::npos);
  EXPECT_NE(out.ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Tiles, NvrtcTiles,
    ::testing::Combine(
        ::testing::Values(TileProgram{"128x128x32", {128, 128, 32, 2, 4, 3}},
                          TileProgram{"64x128x32", {64, 128, 32, 1, 4, 3}},
                          TileProgram{"128x128x64", {128, 128, 64, 2, 4, 3}},
                          TileProgram{"128x256x32", {128, 256, 32, 2, 4, 3}},
                          TileProgram{"256x128x32", {256, 128, 32, 4, 2, 3}}),
        ::testing::Values(std::string("sm_90a"), std::string("sm_80"))),
    [](const auto &info) {
      return "t" + std::get<0>(info.param).name + "_" + std::get<1>(info.param);
    });

} // namespace
