//===- Sm90GemmGpuTest.cpp - The generated sm_90a GEMM against fp64 --------===//
//
// Every (operand layout, tile width, stage count, output type) the bench and the fused
// kernels use, on shapes with tails in m, n and k, with k = 0, and with a grid of three
// CTAs so that every CTA walks many tiles (the ring's phases run on across tiles).
// Inputs are fresh random bf16, outputs poisoned with NaN first; the reference is the
// fp64 product of the same bf16 values (RefKernels::gemm). Skipped on devices that are
// not sm_90.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/Sm90GemmEmitter.h"
#include "runtime/Nvrtc.h"
#include "runtime/Sm90Launch.h"
#include "tests/gpu/GpuSupport.h"
#include "tests/gpu/Tolerances.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <optional>
#include <unistd.h>
#include <memory>

namespace lcejit::gputest {
namespace {

/// RefKernels::gemm layouts: 0 A [M,K] B [N,K]; 1 A [M,K] B [K,N]; 2 A [K,M] B [K,N].
struct Layout {
  int ref;
  bool aKMajor, bKMajor;
  const char *name;
};
const Layout kLayouts[] = {{0, true, true, "fwd"}, {1, true, false, "dh"}, {2, false, false, "dw"}};

struct Config {
  int bn, stages;
  DType out;
  bool pingpong = false;
  int bm = 128;
  int clusterM = 1; ///< 2: pairs sharing B (K-major B only: the fwd layout)
};
// Then 64-row ping-pong tiles ([Note: sm90 64-row ping-pong]), 256 and 128 wide, and
// 192-row tiles on three consumers ([Note: sm90 three consumers]), 192 and 128 wide.
const Config kConfigs[] = {{256, 4, DType::BF16},        {256, 4, DType::F32},
                           {192, 4, DType::BF16},        {128, 6, DType::F32},
                           {64, 2, DType::BF16},         {128, 6, DType::BF16, true},
                           {64, 3, DType::F32, true},    {256, 5, DType::BF16, true, 64},
                           {128, 3, DType::F32, true, 64}, {192, 4, DType::BF16, false, 192},
                           {128, 5, DType::F32, false, 192}};
// Pairs sharing B by TMA multicast ([Note: sm90 multicast]); the fwd layout only.
const Config kPairConfigs[] = {{128, 6, DType::BF16, true, 128, 2},
                               {256, 5, DType::BF16, true, 64, 2},
                               {256, 4, DType::F32, false, 128, 2},
                               {192, 4, DType::BF16, false, 192, 2}};

std::string specName(const Layout &l, const Config &c) {
  return fmt::format("t_{}_{}x{}_{}_{}{}{}", l.name, c.bm, c.bn, c.stages, dtypeName(c.out),
                     c.pingpong ? "_pingpong" : "", c.clusterM > 1 ? "_pairs" : "");
}

/// One module with every kernel of the test, compiled once.
struct Sm90Module {
  std::vector<codegen::Sm90GemmSpec> specs;
  runtime::Module module;
};

Sm90Module &sm90Module() {
  static std::unique_ptr<Sm90Module> m = [] {
    auto mm = std::make_unique<Sm90Module>();
    auto add = [&](const Layout &l, const Config &c) {
      mm->specs.push_back({specName(l, c), c.bn, c.stages, l.aKMajor, l.bKMajor, c.out,
                           c.pingpong, c.bm, c.clusterM});
    };
    for (const Layout &l : kLayouts)
      for (const Config &c : kConfigs)
        add(l, c);
    for (const Config &c : kPairConfigs)
      add(kLayouts[0], c);
    runtime::NvrtcRequest req;
    req.source = codegen::emitSm90GemmModule(mm->specs).source;
    req.arch = "sm_90a";
    req.label = "sm90-gemm-test";
    mm->module = runtime::Module(runtime::compileCuda(req).cubin);
    return mm;
  }();
  return *m;
}

bool isSm90() { return runtime::deviceInfo(0).smVersion() == 90; }

struct Shape {
  int64_t m, n, k;
  int32_t grid; ///< 0: the default (min(tiles, SMs))
};

void runOne(const Layout &l, const Config &c, const Shape &s, int group = 3) {
  SCOPED_TRACE(fmt::format("{} m={} n={} k={} grid={}", specName(l, c), s.m, s.n, s.k, s.grid));
  runtime::ensureContext();
  RefKernels &ref = RefKernels::get();
  Sm90Module &mod = sm90Module();
  const codegen::Sm90GemmSpec *spec = nullptr;
  for (const auto &sp : mod.specs)
    if (sp.name == specName(l, c))
      spec = &sp;
  ASSERT_NE(spec, nullptr);

  // A is stored [M,K] (K-major) or [K,M]; B [N,K] or [K,N]. Sizes at least 1 element.
  const int64_t aElems = std::max<int64_t>(s.m * s.k, 1), bElems = std::max<int64_t>(s.n * s.k, 1);
  DeviceBuffer a(aElems * 2), b(bElems * 2), out(s.m * s.n * dtypeSize(c.out));
  static uint64_t seed = 100;
  ref.fillRandom(a, DType::BF16, aElems, ++seed, 1.0);
  ref.fillRandom(b, DType::BF16, bElems, ++seed, 1.0);
  out.poison();

  runtime::Sm90GemmLaunch launch;
  launch.a = a.ptr();
  launch.b = b.ptr();
  launch.out = out.ptr();
  launch.aKMajor = l.aKMajor;
  launch.bKMajor = l.bKMajor;
  launch.lda = l.aKMajor ? s.k : s.m;
  launch.ldb = l.bKMajor ? s.k : s.n;
  launch.ldOut = s.n;
  launch.m = s.m;
  launch.n = s.n;
  launch.k = s.k;
  launch.bn = c.bn;
  launch.bm = c.bm;
  launch.clusterM = c.clusterM;
  launch.sharedBytes = codegen::sm90GemmSharedBytes(*spec);
  launch.threads = codegen::sm90GemmThreads(*spec);
  launch.group = group;
  launch.grid = s.grid;
  runtime::launchSm90Gemm(mod.module, mod.module.function(spec->name), launch, nullptr);
  LCEJIT_CU(runtime::cudaDriver().ctxSynchronize());

  DeviceBuffer a64(aElems * 8), b64(bElems * 8), r64(std::max<int64_t>(s.m * s.n, 1) * 8);
  ref.toF64(a, DType::BF16, a64, aElems);
  ref.toF64(b, DType::BF16, b64, bElems);
  LCEJIT_CU(runtime::cudaDriver().memsetD8Async(r64.ptr(), 0, size_t(r64.bytes()), nullptr));
  ref.gemm(a64, b64, r64, s.m, s.n, s.k, l.ref);
  Comparison cmp = ref.compare(out, c.out, r64, s.m * s.n);
  EXPECT_EQ(cmp.nonFinite, 0) << "elements left unwritten (NaN poison) or non-finite";
  if (s.k == 0) {
    EXPECT_EQ(cmp.maxAbsError, 0.0) << "k = 0 must give exact zeros";
    return;
  }
  if (c.out == DType::BF16)
    EXPECT_LE(cmp.relError, kGemmBf16FloorFactor * cmp.floor)
        << "rel error " << cmp.relError << ", bf16 rounding floor " << cmp.floor;
  else
    EXPECT_LE(cmp.relError, kGemmF32Tolerance) << "rel error " << cmp.relError;
}

class Sm90Gemm : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Sm90Gemm, MatchesFp64OnTailShapes) {
  if (!isSm90())
    GTEST_SKIP() << "the sm90 GEMM needs an sm_90 device; this is sm_"
                 << runtime::deviceInfo(0).smVersion();
  const Layout &l = kLayouts[std::get<0>(GetParam())];
  const Config &c = kConfigs[std::get<1>(GetParam())];
  // Sizes: tails in every dimension (multiples of 8 only where TMA needs a 16-byte pitch:
  // the contiguous extent of each operand), one exact multiple of the tile, a long k,
  // k = 0, and a 3-CTA grid over many tiles.
  const Shape shapes[] = {{200, 136, 264, 0}, {8, 8, 8, 0},        {384, 512, 4096, 0},
                          {1000, 520, 1032, 0}, {264, 776, 520, 3}, {64, 64, 0, 0}};
  for (const Shape &s : shapes)
    runOne(l, c, s);
}

/// Pairs: even row tiles and grids run as clusters (odd ones as single CTAs that load
/// both halves of B); group 3 in runOne is odd, so these launches set their own.
class Sm90GemmPairs : public ::testing::TestWithParam<int> {};

TEST_P(Sm90GemmPairs, MatchesFp64OnTailShapes) {
  if (!isSm90())
    GTEST_SKIP() << "the sm90 GEMM needs an sm_90 device; this is sm_"
                 << runtime::deviceInfo(0).smVersion();
  const Config &c = kPairConfigs[GetParam()];
  // Even row tiles with the default grid and with 4 CTAs over many tiles (clusters); odd
  // row tiles and an odd grid (single CTAs); k = 0.
  const Shape shapes[] = {{1000, 520, 1032, 0}, {512, 1288, 520, 4}, {328, 136, 264, 0},
                          {384, 776, 4096, 3},   {256, 256, 0, 0}};
  for (const Shape &s : shapes)
    runOne(kLayouts[0], c, s, 4);
}

INSTANTIATE_TEST_SUITE_P(Pairs, Sm90GemmPairs,
                         ::testing::Range(0, int(std::size(kPairConfigs))),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return specName(kLayouts[0], kPairConfigs[i.param]);
                         });

INSTANTIATE_TEST_SUITE_P(
    Layouts, Sm90Gemm,
    ::testing::Combine(::testing::Range(0, 3), ::testing::Range(0, int(std::size(kConfigs)))),
    [](const ::testing::TestParamInfo<std::tuple<int, int>> &i) {
      return specName(kLayouts[std::get<0>(i.param)], kConfigs[std::get<1>(i.param)]);
    });

/// The stdout of `cmd`, or nullopt when it could not run or failed.
std::optional<std::string> commandOutput(const std::string &cmd) {
  FILE *p = ::popen(cmd.c_str(), "r");
  if (!p)
    return std::nullopt;
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, got);
  return ::pclose(p) == 0 ? std::optional<std::string>(out) : std::nullopt;
}

TEST(Sm90GemmSass, UsesHgmmaAndTmaLoads) {
  // Independent of the device: the cubin is for sm_90a; cuobjdump is on the GPU machine.
  if (!commandOutput("cuobjdump --version"))
    GTEST_SKIP() << "cuobjdump is not on PATH";
  std::vector<codegen::Sm90GemmSpec> specs = {
      {"sass_fwd", 256, 4, true, true, DType::BF16},
      {"sass_dw", 256, 4, false, false, DType::F32},
      {"sass_fwd3", 192, 4, true, true, DType::BF16, false, 192}};
  runtime::NvrtcRequest req;
  req.source = codegen::emitSm90GemmModule(specs).source;
  req.arch = "sm_90a";
  req.label = "sm90-sass";
  runtime::NvrtcOutput out = runtime::compileCuda(req);
  const std::string path = fmt::format("/tmp/lcejit-sm90-sass-{}.cubin", ::getpid());
  {
    FILE *f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    std::fwrite(out.cubin.data(), 1, out.cubin.size(), f);
    std::fclose(f);
  }
  std::optional<std::string> sass = commandOutput("cuobjdump -sass " + path);
  std::remove(path.c_str());
  ASSERT_TRUE(sass.has_value()) << "cuobjdump -sass failed";
  for (const char *op : {"HGMMA.64x256x16.F32.BF16", "HGMMA.64x192x16.F32.BF16", "UTMALDG.2D",
                         "SYNCS"})
    EXPECT_NE(sass->find(op), std::string::npos) << op << " not in the SASS";
  EXPECT_EQ(sass->find("LDL"), std::string::npos) << "local-memory loads in the SASS";
  EXPECT_EQ(sass->find("STL"), std::string::npos) << "local-memory stores in the SASS";
}

TEST(Sm90GemmLaunch, RejectsMisalignedPitchNamingIt) {
  if (!isSm90())
    GTEST_SKIP() << "needs an sm_90 device";
  runtime::ensureContext();
  Sm90Module &mod = sm90Module();
  DeviceBuffer a(64 * 64 * 2), b(64 * 64 * 2), out(64 * 64 * 2);
  runtime::Sm90GemmLaunch launch;
  launch.a = a.ptr();
  launch.b = b.ptr();
  launch.out = out.ptr();
  launch.lda = 60; // not a multiple of 8 elements
  launch.ldb = 64;
  launch.ldOut = 64;
  launch.m = 64;
  launch.n = 64;
  launch.k = 60;
  launch.bn = 256;
  launch.sharedBytes = codegen::sm90GemmSharedBytes(mod.specs[0]);
  launch.threads = codegen::sm90GemmThreads(mod.specs[0]);
  try {
    runtime::launchSm90Gemm(mod.module, mod.module.function(mod.specs[0].name), launch, nullptr);
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ld = 60"), std::string::npos) << e.what();
  }
}

} // namespace
} // namespace lcejit::gputest
