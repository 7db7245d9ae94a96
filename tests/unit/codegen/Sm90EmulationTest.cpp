//===- Sm90EmulationTest.cpp - The sm_90a GEMMs run on the host ------------------===//
//
// The plain GEMMs of the Hopper path (compiler/codegen/Sm90GemmEmitter.h), the module
// text NVRTC compiles for the H200, built as host C++ under [Note: sm90 host emulation]
// and run on this machine (no GPU): every tile shape and consumer arrangement the bench
// and the fused kernels use, each operand layout, pairs sharing B by multicast, tails in
// m, n and k, k = 0, and grids of a few CTAs walking many tiles (the ring's phases run on
// across tiles; ping-pong consumers hand tiles to each other). The reference is the
// fp64 product of the same bf16 inputs; outputs are poisoned with NaN first.
//
// The launch geometry mirrors runtime/Sm90Launch.cpp (grid, pairs, block); the tensor
// maps are HostEmulation's emulatedSm90Map of the operands Sm90Launch describes.
//
//===----------------------------------------------------------------------===//

#include "HostEmulation.h"

#include "compiler/codegen/DeviceHeaders.h"
#include "compiler/codegen/Sm90GemmEmitter.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include <cmath>
#include <cstring>
#include <random>

namespace lcejit {
namespace {

using codegen::Sm90GemmSpec;

struct Layout {
  bool aKMajor, bKMajor;
  const char *name;
};
// Z = H Wt (both K-major), dH = G W (B MN-major), dW = Gt H (both MN-major).
const Layout kLayouts[] = {{true, true, "fwd"}, {true, false, "dh"}, {false, false, "dw"}};

struct Config {
  int bn, stages;
  DType out;
  bool pingpong = false;
  int bm = 128;
  int clusterM = 1;
};

std::string kernelName(const Layout &l, const Config &c) {
  return fmt::format("e_{}_{}x{}_{}_{}{}{}", l.name, c.bm, c.bn, c.stages, dtypeName(c.out),
                     c.pingpong ? "_pp" : "", c.clusterM > 1 ? "_pairs" : "");
}

std::string trampolines(const std::vector<Sm90GemmSpec> &specs) {
  std::string t;
  for (const Sm90GemmSpec &s : specs)
    t += fmt::format(R"(
extern "C" void emu_launch_{0}(const void *map_a, const void *map_b, void *out, long long ld,
                              long long m, long long n, long long k, int group,
                              long long grid, int block, int smem, int cluster) {{
  lcejit::sm90::TensorMap a, b;
  std::memcpy(&a, map_a, 128);
  std::memcpy(&b, map_b, 128);
  const long long g[3] = {{grid, 1, 1}};
  lcejit_emu::sm90::launch(g, block, smem, cluster, false,
                           [&] {{ {0}(a, b, out, ld, m, n, k, group); }});
}}
)",
                     s.name);
  return t;
}

using LaunchFn = void (*)(const void *, const void *, void *, long long, long long, long long,
                          long long, int, long long, int, int, int);

/// One emulated module with every kernel of the suite, built once (about a minute of the
/// host compiler).
struct Sm90HostModule {
  std::vector<Sm90GemmSpec> specs;
  std::unique_ptr<testing::HostLibrary> lib;
  void (*setMode)(int) = nullptr;
};

const Config kConfigs[] = {
    {256, 4, DType::BF16},           // dA, dB and the plain GEMMs: cooperative 128 x 256
    {256, 4, DType::F32},            //   with an f32 output
    {192, 4, DType::BF16},           // B's dA width
    {128, 6, DType::F32},            //
    {64, 2, DType::BF16},            // the smallest tile, a 2-stage ring
    {128, 6, DType::BF16, true},     // the forward's ping-pong 128 x 128
    {64, 3, DType::F32, true},       //   narrower, 3 stages: many ring wraps a tile
    {256, 5, DType::BF16, true, 64}, // 64-row ping-pong ([Note: sm90 64-row ping-pong])
    {192, 4, DType::BF16, false, 192}, // three consumers ([Note: sm90 three consumers])
    {128, 5, DType::F32, false, 192},  //   narrower, f32 out
};
// Pairs sharing B by TMA multicast ([Note: sm90 multicast]); the fwd layout only.
const Config kPairConfigs[] = {{128, 6, DType::BF16, true, 128, 2},
                               {256, 4, DType::F32, false, 128, 2},
                               {192, 4, DType::BF16, false, 192, 2}};

Sm90HostModule &hostModule() {
  static std::unique_ptr<Sm90HostModule> m = [] {
    auto mm = std::make_unique<Sm90HostModule>();
    auto add = [&](const Layout &l, const Config &c) {
      mm->specs.push_back({kernelName(l, c), c.bn, c.stages, l.aKMajor, l.bKMajor, c.out,
                           c.pingpong, c.bm, c.clusterM});
    };
    for (const Layout &l : kLayouts)
      for (const Config &c : kConfigs)
        add(l, c);
    for (const Config &c : kPairConfigs)
      add(kLayouts[0], c);
    const std::string source = "#include \"lcejit_emu.h\"\n" +
                               codegen::emitSm90GemmModule(mm->specs).source +
                               trampolines(mm->specs);
    mm->lib = std::make_unique<testing::HostLibrary>("sm90-gemm", source,
                                                     std::vector<std::string>{"LCEJIT_EMU_SM90"});
    mm->setMode = reinterpret_cast<void (*)(int)>(mm->lib->symbol("lcejit_emu_sm90_set_mode"));
    return mm;
  }();
  return *m;
}

uint16_t toBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
double fromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Shape {
  int64_t m, n, k;
  int32_t grid; ///< 0: min(tiles, kSms)
};
/// "SMs" of the emulated device: few, so that every CTA walks several tiles.
constexpr int64_t kSms = 4;

/// Runs one GEMM in emulation and checks it against fp64; returns the relative error.
void runOne(const Layout &l, const Config &c, const Shape &s, int group, bool late = true) {
  SCOPED_TRACE(fmt::format("{} m={} n={} k={} grid={} group={} {}", kernelName(l, c), s.m, s.n,
                           s.k, s.grid, group, late ? "late" : "early"));
  Sm90HostModule &mod = hostModule();
  const Sm90GemmSpec *spec = nullptr;
  for (const Sm90GemmSpec &sp : mod.specs)
    if (sp.name == kernelName(l, c))
      spec = &sp;
  ASSERT_NE(spec, nullptr);
  mod.setMode(late ? 1 : 0);

  // A stored [m, k] (K-major) or [k, m]; B [n, k] or [k, n].
  std::mt19937 rng(static_cast<unsigned>(s.m * 131 + s.n * 7 + s.k));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> a(static_cast<size_t>(std::max<int64_t>(s.m * s.k, 1))),
      b(static_cast<size_t>(std::max<int64_t>(s.n * s.k, 1)));
  for (uint16_t &x : a)
    x = toBf16(u(rng));
  for (uint16_t &x : b)
    x = toBf16(u(rng));
  const size_t outBytes = static_cast<size_t>(s.m * s.n) * dtypeSize(c.out);
  std::vector<unsigned char> out(outBytes, 0xFF); // NaN in bf16 and f32

  // The operands as the runtime describes them (runtime/Sm90Launch.cpp): A's box BM rows,
  // B's BN / clusterM.
  auto operand = [](const void *data, bool kMajor, int64_t rows, int64_t k, int boxRows) {
    runtime::Sm90Operand op;
    op.data = reinterpret_cast<CUdeviceptr>(data);
    op.kMajor = kMajor;
    op.rows = rows;
    op.k = k;
    op.ld = kMajor ? k : rows;
    op.boxRows = boxRows;
    return op;
  };
  const std::array<unsigned char, 128> mapA = testing::emulatedSm90Map(
      *mod.lib, operand(a.data(), l.aKMajor, s.m, s.k, c.bm));
  const std::array<unsigned char, 128> mapB = testing::emulatedSm90Map(
      *mod.lib, operand(b.data(), l.bKMajor, s.n, s.k, c.bn / c.clusterM));

  // runtime/Sm90Launch.cpp: the grid, and pairs only where CTAs 2i and 2i + 1 always hold
  // row tiles 2r and 2r + 1 of one column.
  const int64_t rowTiles = (s.m + c.bm - 1) / c.bm;
  const int64_t tiles = rowTiles * ((s.n + c.bn - 1) / c.bn);
  int64_t grid = s.grid > 0 ? s.grid : std::max<int64_t>(1, std::min(tiles, kSms));
  if (c.clusterM == 2 && s.grid == 0 && grid > 1 && grid % 2 == 1)
    --grid;
  const bool pairs =
      c.clusterM == 2 && s.k > 0 && rowTiles % 2 == 0 && group % 2 == 0 && grid % 2 == 0;
  auto launch = reinterpret_cast<LaunchFn>(mod.lib->symbol("emu_launch_" + spec->name));
  launch(mapA.data(), mapB.data(), out.data(), s.n, s.m, s.n, s.k, group, grid,
         codegen::sm90GemmThreads(*spec), codegen::sm90GemmSharedBytes(*spec), pairs ? 2 : 1);

  double errSq = 0, refSq = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double ref = 0;
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const double x = fromBf16(a[static_cast<size_t>(l.aKMajor ? i * s.k + kk : kk * s.m + i)]);
        const double y = fromBf16(b[static_cast<size_t>(l.bKMajor ? j * s.k + kk : kk * s.n + j)]);
        ref += x * y;
      }
      double got;
      if (c.out == DType::F32) {
        float f;
        std::memcpy(&f, out.data() + 4 * (i * s.n + j), 4);
        got = f;
      } else {
        uint16_t h;
        std::memcpy(&h, out.data() + 2 * (i * s.n + j), 2);
        got = fromBf16(h);
      }
      if (!std::isfinite(got)) {
        ++bad;
        continue;
      }
      errSq += (got - ref) * (got - ref);
      refSq += ref * ref;
    }
  EXPECT_EQ(bad, 0) << "elements left unwritten (NaN poison) or non-finite";
  if (s.k == 0) {
    EXPECT_EQ(errSq, 0.0) << "k = 0 must give exact zeros";
    return;
  }
  const double rel = std::sqrt(errSq / std::max(refSq, 1e-300));
  // bf16 output: its rounding (2^-9 relative, ~2^-9 / sqrt(3) in norm); f32: the
  // accumulation order's few ulps.
  EXPECT_LE(rel, c.out == DType::BF16 ? 3e-3 : 1e-5) << "relative error " << rel;
}

class Sm90Emulation : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Sm90Emulation, PlainGemmMatchesFp64OnTailShapes) {
  const Layout &l = kLayouts[std::get<0>(GetParam())];
  const Config &c = kConfigs[std::get<1>(GetParam())];
  // Tails in every dimension (contiguous extents multiples of 8, as TMA's 16-byte pitch
  // needs), k over several ring wraps, k = 0, and 3 CTAs over many tiles.
  const Shape shapes[] = {{200, 136, 264, 0}, {8, 8, 8, 0}, {264, 392, 520, 3}, {64, 64, 0, 0}};
  for (const Shape &s : shapes)
    runOne(l, c, s, 3);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Sm90Emulation,
    ::testing::Combine(::testing::Range(0, 3), ::testing::Range(0, int(std::size(kConfigs)))),
    [](const ::testing::TestParamInfo<std::tuple<int, int>> &i) {
      return kernelName(kLayouts[std::get<0>(i.param)], kConfigs[std::get<1>(i.param)]);
    });

/// Pairs: even row tiles and grids run as clusters of two CTAs at once (each loads half
/// of B and multicasts it); an odd grid runs single CTAs that load both halves.
class Sm90EmulationPairs : public ::testing::TestWithParam<int> {};

TEST_P(Sm90EmulationPairs, MatchesFp64AsClustersAndAlone) {
  const Config &c = kPairConfigs[GetParam()];
  // 768 rows: 4 to 6 row tiles, clusters over many tiles for 128- and 192-row tiles alike.
  const Shape shapes[] = {{512, 264, 520, 4}, {256, 136, 264, 0}, {384, 200, 136, 3},
                          {768, 264, 200, 4}, {256, 256, 0, 0}};
  for (const Shape &s : shapes)
    runOne(kLayouts[0], c, s, 4);
}

INSTANTIATE_TEST_SUITE_P(Pairs, Sm90EmulationPairs,
                         ::testing::Range(0, int(std::size(kPairConfigs))),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return kernelName(kLayouts[0], kPairConfigs[i.param]);
                         });

/// A probe of the emulator itself: `source` (extern "C" emu_probe, calling the sm90
/// wrappers and lcejit_emu::sm90::launch) after the device headers, built with
/// LCEJIT_EMU_SM90.
struct Sm90Probe {
  Sm90Probe(const std::string &label, const std::string &source)
      : lib(label, "#include \"lcejit_emu.h\"\n" + codegen::deviceHeaderPrelude() + source,
            {"LCEJIT_EMU_SM90"}) {}
  template <class Fn> Fn entry() const { return reinterpret_cast<Fn>(lib.symbol("emu_probe")); }
  testing::HostLibrary lib;
};

/// With every async operation completed at issue (Early) the results are the same as in
/// the default Late mode; Late is what catches a stage freed too soon (next test).
TEST(Sm90EmulationModes, EarlyAndLateAgree) {
  runOne(kLayouts[1], kConfigs[0], {200, 264, 392, 2}, 3, /*late=*/false);
  runOne(kLayouts[0], kConfigs[5], {200, 264, 392, 2}, 3, /*late=*/false);
}

/// The emulator itself: in mode Late a wgmma reads its operands when its group retires
/// and checks that they are what they were at issue, so shared memory overwritten between
/// the commit and the wait (a stage freed before its wgmma retired) stops the test naming
/// the race; in mode Early the operands are read at issue. A warpgroup multiplies A (64 x
/// 16 of ones) by B (64 x 16 of ones) and, when asked, zeroes A before waiting.
TEST(Sm90EmulationModes, LateModeNamesAStageWrittenBeforeItsWgmmaRetired) {
  const std::string probe = R"(
extern "C" void emu_probe(float *out, int overwrite, int late) {
  lcejit_emu::sm90::mode = late ? lcejit_emu::sm90::Mode::Late : lcejit_emu::sm90::Mode::Early;
  const long long grid[3] = {1, 1, 1};
  lcejit_emu::sm90::launch(grid, 128, 20480, 1, false, [&] {
    using namespace lcejit::sm90;
    const lcejit::u32 base = smem_base();
    unsigned short *tile = reinterpret_cast<unsigned short *>(
        lcejit_dynamic_smem + (base - smem_addr(lcejit_dynamic_smem)));
    for (int i = threadIdx.x; i < 8192; i += 128)
      tile[i] = 0x3F80; // bf16 1.0: A at base, B 8 KB on
    __syncthreads();
    float acc[32];
    wgmma_fence();
    wgmma_m64n64k16<0, 0>(acc, sw128_desc(base, 16, 1024), sw128_desc(base + 8192, 16, 1024), 0);
    wgmma_commit();
    if (overwrite) {
      __syncthreads();
      for (int i = threadIdx.x; i < 4096; i += 128)
        tile[i] = 0;
      __syncthreads();
    }
    wgmma_wait<0>();
    for (int i = 0; i < 32; ++i)
      out[threadIdx.x * 32 + i] = acc[i];
  });
}
)";
  const Sm90Probe lib("sm90-probe", probe);
  auto run = lib.entry<void (*)(float *, int, int)>();
  auto every = [&](int overwrite, int late, float want) {
    std::vector<float> out(128 * 32, -1.f);
    run(out.data(), overwrite, late);
    for (float v : out)
      ASSERT_EQ(v, want) << "overwrite " << overwrite << " late " << late;
  };
  every(0, 1, 16.f); // 16 products of ones
  every(1, 0, 16.f); // Early: read at issue, before the zeros
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> out(128 * 32);
  EXPECT_DEATH(run(out.data(), 1, 1),
               "the shared memory a wgmma reads changed between wgmma.mma_async and the "
               "wait_group that retired it");
}

/// The emulator itself ([Note: emulated threads as fibers]): when every thread waits and
/// nothing can change, the launch stops at once, naming each waiting thread and what it
/// waits on, and printing the mbarriers (here: all 128 wait on an mbarrier that nobody
/// arrives at), instead of hanging until a timeout.
TEST(Sm90EmulationModes, ADeadlockStopsAtOnceNamingTheWaits) {
  const std::string probe = R"(
extern "C" void emu_probe() {
  const long long grid[3] = {1, 1, 1};
  lcejit_emu::sm90::launch(grid, 128, 1024, 1, false, [&] {
    using namespace lcejit::sm90;
    const lcejit::u32 bar = smem_base();
    if (threadIdx.x == 0) {
      mbar_init(bar, 1);
      mbar_fence_init();
    }
    __syncthreads();
    mbar_wait(bar, 0);
  });
}
)";
  const Sm90Probe lib("sm90-deadlock-probe", probe);
  auto run = lib.entry<void (*)()>();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(run(), "a deadlock: every thread waits and none made progress");
  EXPECT_DEATH(run(), "block \\(0, 0, 0\\) thread [0-9]+ waits on mbarrier.try_wait.parity 0");
  EXPECT_DEATH(run(), "mbarrier 0x[0-9a-f]+: phase 0, 1 of 1 arrivals pending");
}

/// The emulator itself: a thread that spins on a flag nobody sets (its __nanosleep gives
/// the others their turns, so it is never "blocked") stops the launch once nothing has
/// made progress for LCEJIT_EMU_TIMEOUT seconds (1 here), naming the spinning thread.
TEST(Sm90EmulationModes, ASpinThatNeverEndsStopsAfterTheTimeout) {
  const std::string probe = R"(
extern "C" void emu_probe() {
  static lcejit::u32 flag = 0;
  const long long grid[3] = {1, 1, 1};
  lcejit_emu::sm90::launch(grid, 128, 1024, 1, false, [&] {
    using namespace lcejit::sm90;
    if (threadIdx.x == 5)
      while (ld_acquire_u32(&flag) == 0u)
        __nanosleep(64);
  });
}
)";
  const Sm90Probe lib("sm90-spin-probe", probe);
  auto run = lib.entry<void (*)()>();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::setenv("LCEJIT_EMU_TIMEOUT", "1", 1); // read by the module in the death test's child
  EXPECT_DEATH(run(), "no progress within LCEJIT_EMU_TIMEOUT seconds \\(threads spinning\\)"
                      "(.|\n)*block \\(0, 0, 0\\) thread 5 spins \\(a __nanosleep loop\\)\n");
  ::unsetenv("LCEJIT_EMU_TIMEOUT");
}

/// The emulator itself: bytes a thread writes with st.shared reach TMA (the async proxy)
/// only after its fence.proxy.async, so a TMA store of them before the fence stops the
/// test naming the writer; with the fence the store writes them.
TEST(Sm90EmulationModes, ATmaStoreOfUnfencedSharedWritesIsARace) {
  const std::string probe = R"(
extern "C" void emu_probe(float *out, int fence) {
  alignas(64) unsigned char map[128];
  const unsigned long long dims[2] = {32, 64}, strides[1] = {128};
  const unsigned box[2] = {32, 64};
  lcejit_emu::sm90::encode_tensor_map(map, out, 2, dims, strides, box, 4, 0);
  const long long grid[3] = {1, 1, 1};
  lcejit_emu::sm90::launch(grid, 128, 16384, 1, false, [&] {
    using namespace lcejit::sm90;
    const TensorMap *m = reinterpret_cast<const TensorMap *>(map);
    const lcejit::u32 base = smem_base();
    for (int i = threadIdx.x; i < 1024; i += 128) // 64 x 32 floats, two a call
      st_shared_f32x2(base + 8 * i, float(2 * i), float(2 * i + 1));
    if (fence)
      fence_proxy_async_shared();
    __syncthreads();
    if (threadIdx.x == 0) {
      tma_store_2d<false>(m, base, 0, 0);
      bulk_commit();
      bulk_wait<0>();
    }
  });
}
)";
  const Sm90Probe lib("sm90-proxy-probe", probe);
  auto run = lib.entry<void (*)(float *, int)>();
  std::vector<float> out(64 * 32, -1.f);
  run(out.data(), 1);
  for (int i = 0; i < 64 * 32; ++i)
    ASSERT_EQ(out[static_cast<size_t>(i)], float(i));
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(run(out.data(), 0), "a TMA store touches shared memory .* that thread [0-9]+ of "
                                   "CTA rank 0 wrote by st.shared .* without a fence.proxy.async");
}

/// The emulator itself: a thread's ld.shared of bytes a TMA load wrote must follow its own
/// wait on the load's mbarrier that saw the load's phase complete ([Note: sm90 loaded
/// sums] reads dW's old values so): waiting, it reads the box as the 128-byte swizzle
/// places it; without the wait the test stops naming the read and the barrier, even where
/// the load has already landed (mode Early).
TEST(Sm90EmulationModes, AGenericReadOfTmaLoadedBytesNeedsTheWait) {
  const std::string probe = R"(
extern "C" void emu_probe(float *out, int wait, int late) {
  lcejit_emu::sm90::mode = late ? lcejit_emu::sm90::Mode::Late : lcejit_emu::sm90::Mode::Early;
  static float vals[64 * 32];
  for (int i = 0; i < 64 * 32; ++i)
    vals[i] = float(i);
  alignas(64) unsigned char map[128];
  const unsigned long long dims[2] = {32, 64}, strides[1] = {128};
  const unsigned box[2] = {32, 64};
  lcejit_emu::sm90::encode_tensor_map(map, vals, 2, dims, strides, box, 4, 128);
  const long long grid[3] = {1, 1, 1};
  lcejit_emu::sm90::launch(grid, 128, 16384, 1, false, [&] {
    using namespace lcejit::sm90;
    const TensorMap *m = reinterpret_cast<const TensorMap *>(map);
    const lcejit::u32 base = smem_base(), bar = base + 8192;
    if (threadIdx.x == 0) {
      mbar_init(bar, 1);
      mbar_fence_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      mbar_expect_tx(bar, 8192);
      tma_load_2d(base, m, bar, 0, 0);
    }
    if (wait)
      mbar_wait(bar, 0);
    else
      __syncthreads(); // ordered after the issue, but not after the load's phase
    const float2 v = ld_shared_f32x2(base + 8 * threadIdx.x);
    out[2 * threadIdx.x] = v.x;
    out[2 * threadIdx.x + 1] = v.y;
  });
  lcejit_emu::sm90::mode = lcejit_emu::sm90::Mode::Late;
}
)";
  const Sm90Probe lib("sm90-ld-shared-probe", probe);
  auto run = lib.entry<void (*)(float *, int, int)>();
  for (int late : {0, 1}) {
    std::vector<float> out(256, -1.f);
    run(out.data(), 1, late);
    // Byte 8 t of the box: row t / 16, 16-byte chunk c = (t % 16) / 2 holding the row's
    // chunk c ^ (row & 7), its elements 2 (t % 2) and 2 (t % 2) + 1.
    for (int t = 0; t < 128; ++t) {
      const int row = t / 16, chunk = ((t % 16) / 2) ^ (row & 7);
      const int col = 4 * chunk + 2 * (t % 2);
      ASSERT_EQ(out[2 * t], float(row * 32 + col)) << "thread " << t << " late " << late;
      ASSERT_EQ(out[2 * t + 1], float(row * 32 + col + 1)) << "thread " << t;
    }
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> out(256, -1.f);
  for (int late : {0, 1})
    EXPECT_DEATH(run(out.data(), 0, late),
                 "ld.shared.v2.f32 at 0x[0-9a-f]+ reads what a TMA load wrote for phase 1 of "
                 "mbarrier 0x[0-9a-f]+ before a wait on it saw that phase complete")
        << "late " << late;
}

/// The emulator itself: in mode Late a TMA load lands rounds of the scheduler after its
/// issue, so a wgmma issued without waiting on the load's mbarrier reads what the stage
/// held before (zeros here); waiting, it reads the loaded ones. The delay is fixed at 50
/// rounds for the test (the default draws 0-2 per box).
TEST(Sm90EmulationModes, LateModeLandsTmaLoadsAfterTheIssue) {
  const std::string probe = R"(
extern "C" void emu_probe(float *out, int wait) {
  lcejit_emu::sm90::mode = lcejit_emu::sm90::Mode::Late;
  lcejit_emu::sm90::tma_delay_min = 50;
  lcejit_emu::sm90::tma_delay_span = 1;
  static unsigned short ones[64 * 64];
  for (unsigned short &v : ones)
    v = 0x3F80; // bf16 1.0
  alignas(64) unsigned char map[128];
  const unsigned long long dims[2] = {64, 64}, strides[1] = {128};
  const unsigned box[2] = {64, 64};
  lcejit_emu::sm90::encode_tensor_map(map, ones, 2, dims, strides, box, 2, 128);
  const long long grid[3] = {1, 1, 1};
  lcejit_emu::sm90::launch(grid, 128, 20480, 1, false, [&] {
    using namespace lcejit::sm90;
    const TensorMap *m = reinterpret_cast<const TensorMap *>(map);
    const lcejit::u32 base = smem_base(), bar = base + 16384;
    unsigned short *tile = reinterpret_cast<unsigned short *>(
        lcejit_dynamic_smem + (base - smem_addr(lcejit_dynamic_smem)));
    for (int i = threadIdx.x; i < 8192; i += 128)
      tile[i] = 0;
    if (threadIdx.x == 0) {
      mbar_init(bar, 1);
      mbar_fence_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      mbar_expect_tx(bar, 16384);
      tma_load_2d(base, m, bar, 0, 0);        // A
      tma_load_2d(base + 8192, m, bar, 0, 0); // B
    }
    if (wait)
      mbar_wait(bar, 0);
    float acc[32];
    wgmma_fence();
    wgmma_m64n64k16<0, 0>(acc, sw128_desc(base, 16, 1024), sw128_desc(base + 8192, 16, 1024), 0);
    wgmma_commit();
    wgmma_wait<0>();
    for (int i = 0; i < 32; ++i)
      out[threadIdx.x * 32 + i] = acc[i];
  });
  lcejit_emu::sm90::tma_delay_min = 0;
  lcejit_emu::sm90::tma_delay_span = 3;
}
)";
  const Sm90Probe lib("sm90-tma-probe", probe);
  auto run = lib.entry<void (*)(float *, int)>();
  for (int wait : {1, 0}) {
    std::vector<float> out(128 * 32, -1.f);
    run(out.data(), wait);
    const float want = wait ? 16.f : 0.f; // 16 products of ones, or of the zeros
    for (float v : out)
      ASSERT_EQ(v, want) << "wait " << wait;
  }
}

} // namespace
} // namespace lcejit
