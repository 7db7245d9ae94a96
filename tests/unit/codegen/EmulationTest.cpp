//===- EmulationTest.cpp - Generated kernels vs an fp64 reference, on host
//-===//
//
// Runs LCE-shaped Programs (TestPrograms.h) through the emitted CUDA, compiled
// for the host with the emulation of emu/lcejit_emu.h ([Note: host emulation]):
// mma.sync from the PTX fragment tables, cp.async with late or early
// completion, CTAs as threads. Shapes have tails everywhere: N not a multiple
// of bm, k not a multiple of bk, V not a multiple of bn, a last chunk whose
// width is not a multiple of 8 (scalar loads of dZ). The reference is the loss,
// dH and dW of the mean cross entropy in fp64 on the exact (rounded) inputs.
//
//===----------------------------------------------------------------------===//

#include "HostEmulation.h"
#include "compiler/frontend/LceGraph.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/plan/Planner.h"
#include "compiler/plan/SchedulePolicy.h"
#include "TestPrograms.h"
#include "../../gpu/Tolerances.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>

#include <unistd.h>

using namespace lcejit;
using namespace lcejit::plan;
using lcejit::testing::HostModule;
using lcejit::testing::LceOptions;

namespace {

/// A host buffer of `bytes`, 256-byte aligned, freed at scope exit.
struct HostBuffer {
  explicit HostBuffer(size_t bytes) {
    size_t b = std::max<size_t>((bytes + 255) / 256 * 256, 256);
    p = std::aligned_alloc(256, b);
    std::memset(p, 0xA5, b); // garbage: nothing may rely on zeroed memory
  }
  ~HostBuffer() { std::free(p); }
  HostBuffer(const HostBuffer &) = delete;
  HostBuffer &operator=(const HostBuffer &) = delete;
  CUdeviceptr ptr() const { return reinterpret_cast<CUdeviceptr>(p); }
  template <class T> T *as() const { return static_cast<T *>(p); }
  void *p;
};

/// v rounded to bf16 (through f32, as the kernels' conversions see it), as a double.
double roundToBf16(double v) {
  return static_cast<double>(__bfloat162float(__float2bfloat16_rn(static_cast<float>(v))));
}

/// Rounds to `t` and returns the exact value of the stored element.
double storeAs(DType t, void *base, size_t i, double v) {
  switch (t) {
  case DType::BF16: {
    __nv_bfloat16 b = __float2bfloat16_rn(static_cast<float>(v));
    static_cast<__nv_bfloat16 *>(base)[i] = b;
    return __bfloat162float(b);
  }
  case DType::F16: {
    __half h = __float2half_rn(static_cast<float>(v));
    static_cast<__half *>(base)[i] = h;
    return __half2float(h);
  }
  case DType::F32:
    static_cast<float *>(base)[i] = static_cast<float>(v);
    return static_cast<float>(v);
  default:
    break;
  }
  ADD_FAILURE() << "storeAs " << dtypeName(t);
  return 0;
}

double loadAs(DType t, const void *base, size_t i) {
  switch (t) {
  case DType::BF16:
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[i]);
  case DType::F16:
    return __half2float(static_cast<const __half *>(base)[i]);
  case DType::F32:
    return static_cast<const float *>(base)[i];
  default:
    break;
  }
  ADD_FAILURE() << "loadAs " << dtypeName(t);
  return 0;
}

/// Relative tolerance of the final rounding to `t`: one ulp (half an ulp is
/// reached, and accumulation error can push an element across a rounding
/// boundary).
double roundingOf(DType t) {
  switch (t) {
  case DType::BF16:
    return std::ldexp(1.0, -7);
  case DType::F16:
    return std::ldexp(1.0, -10);
  default:
    return 0;
  }
}

struct Reference {
  double loss = 0;
  std::vector<double> lse, dh, dw;
};

/// `roundDz`: every element of dZ but the target column's rounded to bf16 before the
/// backward products, the rounding fast precision makes (the target column reaches both
/// GEMMs exact: [Note: the target-column residual]): the floor of its gradients.
/// `roundScale` K rounds K * g instead and divides by K again: the same rounding of a
/// differently scaled value (expectedDzFloor).
Reference reference(const LceOptions &o, int64_t n,
                    const std::vector<double> &h, const std::vector<double> &w,
                    const std::vector<int64_t> &y, bool roundDz = false,
                    double roundScale = 1.0) {
  const int64_t d = o.d, v = o.v;
  Reference r;
  r.lse.assign(static_cast<size_t>(n), 0);
  r.dh.assign(static_cast<size_t>(n * d), 0);
  r.dw.assign(static_cast<size_t>(v * d), 0);
  std::vector<double> z(static_cast<size_t>(v)),
      dz(static_cast<size_t>(n * v), 0);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i)
    count += y[static_cast<size_t>(i)] != -100;
  const double inv = 1.0 / std::max<int64_t>(count, 1);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY;
    for (int64_t c = 0; c < v; ++c) {
      double acc = 0;
      for (int64_t k = 0; k < d; ++k)
        acc += h[static_cast<size_t>(i * d + k)] *
               w[static_cast<size_t>(c * d + k)];
      z[static_cast<size_t>(c)] =
          o.softcap > 0 ? o.softcap * std::tanh(acc / o.softcap) : acc;
      m = std::max(m, z[static_cast<size_t>(c)]);
    }
    double s = 0;
    for (int64_t c = 0; c < v; ++c)
      s += std::exp(z[static_cast<size_t>(c)] - m);
    const double lse = m + std::log(s);
    r.lse[static_cast<size_t>(i)] = lse;
    const int64_t yi = y[static_cast<size_t>(i)];
    if (yi == -100)
      continue;
    total += lse - z[static_cast<size_t>(yi)];
    for (int64_t c = 0; c < v; ++c) {
      double g =
          (std::exp(z[static_cast<size_t>(c)] - lse) - (c == yi ? 1.0 : 0.0)) *
          inv;
      if (o.softcap > 0) {
        double t = z[static_cast<size_t>(c)] / o.softcap;
        g *= 1 - t * t;
      }
      if (roundDz && c != yi)
        g = roundToBf16(roundScale * g) / roundScale;
      dz[static_cast<size_t>(i * v + c)] = g;
    }
  }
  r.loss = total * inv;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < v; ++c) {
      const double g = dz[static_cast<size_t>(i * v + c)];
      if (g == 0)
        continue;
      for (int64_t k = 0; k < d; ++k) {
        r.dh[static_cast<size_t>(i * d + k)] +=
            g * w[static_cast<size_t>(c * d + k)];
        r.dw[static_cast<size_t>(c * d + k)] +=
            g * h[static_cast<size_t>(i * d + k)];
      }
    }
  return r;
}

/// Checks got (stored as `t`) against ref: |got - ref| <= rounding(t) |ref| +
/// atol, atol = 1e-4 * max |ref| (f32 accumulation of the split-bf16 or f32
/// dZ).
void expectClose(const char *what, DType t, const void *got,
                 const std::vector<double> &ref) {
  double maxRef = 0;
  for (double x : ref)
    maxRef = std::max(maxRef, std::fabs(x));
  const double atol = 1e-4 * maxRef + 1e-30;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = loadAs(t, got, i);
    const double err = std::fabs(g - ref[i]);
    const double tol = roundingOf(t) * std::fabs(ref[i]) + atol;
    worst = std::max(worst, err / tol);
    if (!(err <= tol) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << g << ", reference "
                    << ref[i] << " (tolerance " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size()
                    << " elements off";
  std::cout << fmt::format(
      "    {:<12} max |ref| {:.3e}, worst error / tolerance {:.3f}\n", what,
      maxRef, worst);
}

/// Inputs, outputs and workspace of one LCE run on the host. With
/// `misalignBytes` > 0 the hidden and weight inputs start that many bytes past
/// a 256-byte boundary (not 16-byte aligned: their tiles take the element path
/// of the loader).
struct LceRun {
  /// `outputFree`: the workspace of a call that overwrites its outputs (HostModule::run).
  LceRun(const Program &p, const LceOptions &o, int64_t n,
         size_t misalignBytes = 0, bool outputFree = false)
      : n(n), hb(bytes(n * o.d, o.abType)), wb(bytes(o.v * o.d, o.abType)),
        yb(bytes(n, DType::I64)), loss(4), dh(bytes(n * o.d, o.dhType)),
        dw(bytes(o.v * o.d, o.dwType)),
        ws(static_cast<size_t>(runtime::prepareRun(p, n, outputFree).workspaceBytes)) {
    std::mt19937_64 rng(1234 + static_cast<uint64_t>(n));
    std::normal_distribution<double> normal;
    h.resize(static_cast<size_t>(n * o.d));
    w.resize(static_cast<size_t>(o.v * o.d));
    void *hp = hb.as<char>() + misalignBytes;
    void *wp = wb.as<char>() + misalignBytes;
    for (size_t i = 0; i < h.size(); ++i)
      h[i] = storeAs(o.abType, hp, i, normal(rng));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = storeAs(o.abType, wp, i,
                     normal(rng) * 2.0 / std::sqrt(double(o.d)));
    y.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      y[static_cast<size_t>(i)] =
          static_cast<int64_t>(rng() % static_cast<uint64_t>(o.v));
    if (n >= 3)
      y[1] = -100; // ignored row
    if (n >= 5)
      y[4] = o.v - 1; // last column: the tail tile of the vocabulary
    buffers.inputs = {reinterpret_cast<CUdeviceptr>(hp),
                      reinterpret_cast<CUdeviceptr>(wp), yb.ptr()};
    buffers.outputs = {loss.ptr(), dh.ptr(), dw.ptr()};
    buffers.workspace = ws.ptr();
    buffers.workspaceBytes = runtime::prepareRun(p, n, outputFree).workspaceBytes;
  }
  static size_t bytes(int64_t elems, DType t) {
    return static_cast<size_t>(elems * dtypeSize(t)) + 16;
  }
  void run(HostModule &m, bool outputFree = false,
           const std::function<void(runtime::LaunchRecord &)> &edit = {}) {
    if (!y.empty()) // memcpy from a null y.data() (N = 0) is undefined (UBSan)
      std::memcpy(yb.p, y.data(), y.size() * 8);
    m.run(buffers, n, outputFree, edit);
  }
  const int64_t *errorWord(const Program &p) const {
    return reinterpret_cast<const int64_t *>(ws.as<char>() +
                                             runtime::errorWordOffset(p, n));
  }

  int64_t n;
  HostBuffer hb, wb, yb, loss, dh, dw, ws;
  std::vector<double> h, w;
  std::vector<int64_t> y;
  runtime::ProgramBuffers buffers;
};

struct Case {
  std::string name;
  LceOptions options;
  std::vector<int64_t> ns;
  bool lateCopies = true;
  size_t misalignBytes = 0; ///< see LceRun
};

void runCase(const Case &c, HostModule &module) {
  const LceOptions &o = c.options;
  Program p = lcejit::testing::makeLceProgram(o);
  module.setLateAsyncCopies(c.lateCopies);
  for (int64_t n : c.ns) {
    SCOPED_TRACE(fmt::format("{} N = {}", c.name, n));
    LceRun r(p, o, n, c.misalignBytes);
    r.run(module);
    Reference ref = reference(o, n, r.h, r.w, r.y);
    std::cout << fmt::format("  [{} N={}] loss {:.9g} (reference {:.9g})\n",
                             c.name, n, r.loss.as<float>()[0], ref.loss);
    EXPECT_NEAR(r.loss.as<float>()[0], ref.loss,
                1e-4 * std::max(1.0, std::fabs(ref.loss)));
    const int64_t *err = r.errorWord(p);
    EXPECT_EQ(err[0], 0) << "device check raised for row " << err[0] - 1
                         << " value " << err[1];
    std::vector<int64_t> offs = p.workspaceOffsets(n, nullptr);
    const float *lse =
        reinterpret_cast<const float *>(r.ws.as<char>() + offs[3]);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(lse[i], ref.lse[static_cast<size_t>(i)],
                  1e-5 *
                      std::max(1.0, std::fabs(ref.lse[static_cast<size_t>(i)])))
          << "lse of row " << i;
    expectClose("grad_hidden", o.dhType, r.dh.p, ref.dh);
    expectClose("grad_weight", o.dwType, r.dw.p, ref.dw);
  }
}

void runCase(const Case &c) {
  HostModule module(lcejit::testing::makeLceProgram(c.options));
  runCase(c, module);
}

/// Skips when the host toolchain the emulation needs is not where the build
/// found it (e.g. a test binary carried to another machine).
#define SKIP_WITHOUT_HOST_TOOLCHAIN()                                          \
  do {                                                                         \
    if (!std::filesystem::exists(LCEJIT_TEST_EMU_DIR "/lcejit_emu.h") ||       \
        !std::filesystem::exists(LCEJIT_TEST_HOST_CXX) ||                      \
        !std::filesystem::exists(LCEJIT_TEST_CUDA_INCLUDE "/cuda_bf16.h"))     \
      GTEST_SKIP() << "host emulation needs " << LCEJIT_TEST_HOST_CXX          \
                   << " and " << LCEJIT_TEST_EMU_DIR;                          \
  } while (0)

/// The frontend's LCE (ignore_index -100) for o's D and V with operands of `ab`, planned
/// for the portable mainloop (the one the host emulation runs) with o's output types;
/// `options` sets the rest (name, precision, ...) before planning.
Program plannedLce(const LceOptions &o, DType ab,
                   const std::function<void(plan::PlanOptions &)> &options) {
  fe::LceSpec spec;
  spec.hidden = o.d;
  spec.vocab = o.v;
  spec.dtype = ab;
  spec.ignoreIndex = -100;
  if (o.softcap > 0)
    spec.softcap = o.softcap;
  auto fg = pipeline::compileGraph(*fe::buildLceGraph(spec));
  plan::PlanOptions po;
  po.tokens = 100;
  po.mainloop = plan::Mainloop::MmaSync;
  po.outputTypes = {DType::F32, o.dhType, o.dwType};
  options(po);
  return fg->plan(po);
}

LceOptions smallLce() {
  LceOptions o;
  o.name = "emu";
  o.bucket = 256;    // N in [0, 256]
  o.d = 72;          // k tail: 72 = 2 * 32 + 8
  o.v = 300;         // column tail: 300 = 2 * 128 + 44
  o.chunkCols = 128; // chunks 128, 128, 44 (44: scalar dZ loads)
  o.splits = 3;
  return o;
}

} // namespace

/// [Note: emulated module cache]: a module compiled once is taken from the cache by the
/// next HostLibrary of the same source (no compile), each with its own globals; another
/// source compiles; LCEJIT_EMU_CACHE=0 compiles again. The source carries this process's
/// id and the time, so the first build is a miss whatever an earlier run left.
TEST(Emulation, ModuleCacheCompilesEachSourceOnce) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  const std::string source =
      fmt::format("// {} {}\nextern \"C\" int emu_bump() {{ static int n = 0; return ++n; }}\n",
                  ::getpid(), std::chrono::steady_clock::now().time_since_epoch().count());
  using Bump = int (*)();
  const int before = lcejit::testing::HostLibrary::compiles();
  lcejit::testing::HostLibrary a("cache-a", source);
  EXPECT_EQ(lcejit::testing::HostLibrary::compiles(), before + 1);
  const Bump bumpA = reinterpret_cast<Bump>(a.symbol("emu_bump"));
  EXPECT_EQ(bumpA(), 1);
  EXPECT_EQ(bumpA(), 2);
  lcejit::testing::HostLibrary b("cache-b", source);
  EXPECT_EQ(lcejit::testing::HostLibrary::compiles(), before + 1) << "the same source compiled again";
  EXPECT_EQ(reinterpret_cast<Bump>(b.symbol("emu_bump"))(), 1) << "globals shared with a";
  lcejit::testing::HostLibrary c("cache-c", source + "// another source\n");
  EXPECT_EQ(lcejit::testing::HostLibrary::compiles(), before + 2);
  ::setenv("LCEJIT_EMU_CACHE", "0", 1);
  lcejit::testing::HostLibrary d("cache-d", source);
  ::unsetenv("LCEJIT_EMU_CACHE");
  EXPECT_EQ(lcejit::testing::HostLibrary::compiles(), before + 3) << "LCEJIT_EMU_CACHE=0 must compile";
}

TEST(Emulation, Bf16TensorCores) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  Case c{"bf16", smallLce(), {1, 7, 130}, true};
  runCase(c);
}

TEST(Emulation, Bf16TensorCoresEarlyCopies) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  Case c{"bf16 early", smallLce(), {37}, false};
  runCase(c);
}

TEST(Emulation, Bf16SoftcapSmallTilesF32Grads) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  LceOptions o = smallLce();
  o.softcap = 5.0;
  o.fwdTile = TileConfig{64, 128, 32, 1, 4, 3};
  o.bwdTile = TileConfig{64, 128, 32, 1, 4, 2};
  o.dwType = DType::F32;
  o.dhType = DType::F32;
  o.splits = 2;
  Case c{"bf16 softcap", o, {77}, true};
  runCase(c);
}

TEST(Emulation, F32Simt) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  LceOptions o = smallLce();
  o.abType = DType::F32;
  o.d = 40; // 2.5 tiles of bk = 16
  o.fwdTile = TileConfig{64, 64, 16, 2, 4, 2};
  o.bwdTile = TileConfig{64, 64, 16, 2, 4, 3};
  o.fwdMath = MathMode::SimtF32;
  o.bwdMath = MathMode::SimtF32;
  o.dzFormat = DzFormat::F32;
  o.dwType = DType::F32;
  o.dhType = DType::F32;
  o.chunkCols = 128;
  o.v = 203; // chunks 128, 75 (75 f32: scalar dZ loads)
  Case c{"f32 simt", o, {70}, true};
  runCase(c);
}

TEST(Emulation, F16TensorCoreForwardSimtBackward) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  LceOptions o = smallLce();
  o.abType = DType::F16;
  o.fwdMath = MathMode::TensorCoreF16;
  o.bwdMath = MathMode::SimtF32;
  o.bwdTile = TileConfig{64, 64, 16, 2, 4, 2};
  o.dzFormat = DzFormat::F32;
  o.dwType = DType::F16;
  o.dhType = DType::F16;
  Case c{"f16", o, {66}, true};
  runCase(c);
}

TEST(Emulation, DeviceCheckAndEmptyBatch) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  LceOptions o = smallLce();
  Program p = lcejit::testing::makeLceProgram(o);
  HostModule module(p);
  {
    LceRun r(p, o, 9);
    r.y[6] = o.v + 5; // outside [0, V) and not ignore_index
    r.run(module);
    runtime::DeviceErrors e = runtime::decodeErrorWord(r.errorWord(p));
    EXPECT_EQ(e.badRow, 6);
    EXPECT_EQ(e.badValue, o.v + 5);
    EXPECT_EQ(e.contract, 0);
  }
  {
    // Several bad rows, their threads running concurrently: the lowest one, with its value
    // (one that needs both 32-bit halves of the error word).
    LceRun r(p, o, 9);
    r.y[8] = -3;
    r.y[2] = -(int64_t(1) << 40) - 5;
    r.y[6] = o.v;
    r.run(module);
    runtime::DeviceErrors e = runtime::decodeErrorWord(r.errorWord(p));
    EXPECT_EQ(e.badRow, 2);
    EXPECT_EQ(e.badValue, -(int64_t(1) << 40) - 5);
  }
  {
    LceRun r(
        p, o,
        0); // N = 0: row kernels still run (loss = 0), dW is written as zeros
    r.run(module);
    EXPECT_EQ(r.loss.as<float>()[0], 0.0f);
    EXPECT_FALSE(runtime::decodeErrorWord(r.errorWord(p)).any());
    std::vector<double> zeros(static_cast<size_t>(o.v * o.d), 0.0);
    expectClose("grad_weight", o.dwType, r.dw.p, zeros);
  }
}

/// The launch contract of the generated entry points (launch_ok): a kernel launched with
/// a wrong block size, too little dynamic shared memory or a wrong grid records the
/// violation (kind, kernel index, what it had) in the error word and returns without
/// trapping or waiting at a barrier; the next correct run is unaffected.
TEST(Emulation, LaunchContractViolationsAreRecordedNotTrapped) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  LceOptions o = smallLce();
  Program p = lcejit::testing::makeLceProgram(o);
  HostModule module(p);
  LceRun r(p, o, 200);
  r.run(module); // a correct run: nothing recorded
  ASSERT_FALSE(runtime::decodeErrorWord(r.errorWord(p)).any());
  runtime::ExecutionPlan plan = runtime::planExecution(p, r.buffers, r.n);
  const runtime::LaunchRecord *row = nullptr, *gemm = nullptr;
  for (const runtime::LaunchRecord &rec : plan.launches) {
    const plan::KernelKind kind = p.kernels[static_cast<size_t>(rec.kernel)].kind();
    if (!row && kind == plan::KernelKind::Row)
      row = &rec;
    if (!gemm && kind == plan::KernelKind::GemmReduce)
      gemm = &rec;
  }
  ASSERT_TRUE(row && gemm);
  int64_t *word = const_cast<int64_t *>(r.errorWord(p));
  auto launch = [&](const runtime::LaunchRecord &rec, int block, long long gridX, int smem) {
    std::memset(word, 0, plan::kErrorWordBytes);
    module.launchWith(rec, block, gridX, smem);
    return runtime::decodeErrorWord(word);
  };
  runtime::DeviceErrors e =
      launch(*gemm, gemm->dims.block / 2, gemm->dims.grid[0], gemm->dims.sharedBytes);
  EXPECT_EQ(e.contract, 1);
  EXPECT_EQ(e.kernel, gemm->kernel);
  EXPECT_EQ(e.had, static_cast<uint64_t>(gemm->dims.block / 2) | (1u << 16) | (uint64_t(1) << 32))
      << "x | y << 16 | z << 32";
  EXPECT_NE(runtime::describeContractViolation(p, e).find(
                fmt::format("'{}'", p.kernels[static_cast<size_t>(gemm->kernel)].name)),
            std::string::npos);
  e = launch(*gemm, gemm->dims.block, gemm->dims.grid[0], gemm->dims.sharedBytes / 2);
  EXPECT_EQ(e.contract, 2);
  EXPECT_EQ(e.had, static_cast<uint64_t>(gemm->dims.sharedBytes / 2));
  e = launch(*gemm, gemm->dims.block, gemm->dims.grid[0] + 1, gemm->dims.sharedBytes);
  EXPECT_EQ(e.contract, 3);
  e = launch(*row, row->dims.block, row->dims.grid[0] + 1, row->dims.sharedBytes);
  EXPECT_EQ(e.contract, 3);
  EXPECT_EQ(e.kernel, row->kernel);
  EXPECT_EQ(e.had & 0x7FFFFFFF, static_cast<uint64_t>(row->dims.grid[0] + 1));
  // The exact geometry passes.
  e = launch(*gemm, gemm->dims.block, gemm->dims.grid[0], gemm->dims.sharedBytes);
  EXPECT_FALSE(e.any());
  // And a whole run afterwards is right.
  r.run(module);
  EXPECT_FALSE(runtime::decodeErrorWord(r.errorWord(p)).any());
  Reference ref = reference(o, r.n, r.h, r.w, r.y);
  EXPECT_NEAR(r.loss.as<float>()[0], ref.loss, 1e-5 * std::max(1.0, std::fabs(ref.loss)));
}

/// A gradient of a fast-precision run (dZ one bf16 operand): every element within 2^-8
/// of the largest (about one bf16 ulp of it; small elements carry the rounding of the
/// large dZ entries they sum), and something rounded.
namespace {
void expectBf16DzBound(const char *what, DType t, const void *got,
                       const std::vector<double> &want) {
  double maxRef = 0, maxErr = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    maxRef = std::max(maxRef, std::fabs(want[i]));
    maxErr = std::max(maxErr, std::fabs(loadAs(t, got, i) - want[i]));
  }
  std::cout << fmt::format("      {:<12} max |ref| {:.3e}, max |error| {:.3e}\n", what, maxRef,
                           maxErr);
  EXPECT_LE(maxErr, 0x1p-8 * maxRef) << what;
  EXPECT_GT(maxErr, 0.0) << what << ": a bf16 dZ must round something";
}
} // namespace

/// A Program the planner produced (not a hand-built one) from the LCE graph, in the
/// default fast precision (dZ one bf16 operand) and in exact mode, with a run schedule
/// that cuts the rows into blocks (dW accumulated over them) and the vocabulary into
/// chunks: the generated CUDA, run under the host emulation, against fp64.
TEST(Emulation, PlannedProgramRowBlocksAndChunks) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  for (bool exact : {false, true}) {
    LceOptions o = smallLce();
    o.dwType = DType::F32; // row blocks accumulate dW in f32
    o.dhType = DType::BF16;
    const std::string name = exact ? "planned_exact" : "planned_fast";
    Program p = plannedLce(o, DType::BF16, [&](plan::PlanOptions &po) {
      po.name = name;
      po.exactGradients = exact;
    });
    ASSERT_GE(p.schedule.firstBlockedStep, 0) << "the LCE Program's rows are blockable";
    // Blocks of 32 rows and chunks of at most 128 columns.
    p.schedule.minBlockRows = 32;
    p.schedule.rowAlign = 32;
    p.schedule.goodChunkCols = 128;
    const int64_t n = 77;
    p.schedule.budgetBytes = plan::workspaceBytesFor(p, n, 32, 128);
    plan::RunSchedule s = p.runSchedule(n);
    ASSERT_GT(s.rowBlocks, 1) << s.describe();
    ASSERT_GT(s.chunks, 1) << s.describe();
    HostModule module(p);
    SCOPED_TRACE(fmt::format("{}: {}", name, s.describe()));
    LceRun r(p, o, n);
    r.run(module);
    Reference ref = reference(o, n, r.h, r.w, r.y);
    EXPECT_NEAR(r.loss.as<float>()[0], ref.loss, 1e-5 * std::max(1.0, std::fabs(ref.loss)));
    EXPECT_EQ(r.errorWord(p)[0], 0);
    if (exact) {
      expectClose("grad_hidden", o.dhType, r.dh.p, ref.dh);
      expectClose("grad_weight", o.dwType, r.dw.p, ref.dw);
    } else {
      expectBf16DzBound("grad_hidden", o.dhType, r.dh.p, ref.dh);
      expectBf16DzBound("grad_weight", o.dwType, r.dw.p, ref.dw);
    }
  }
}
/// Peaks every row with a target: h[i] += lift · w[y_i] / |w[y_i]|² (bf16-rounded, as the
/// kernels read it), which raises the target logit by about `lift` over the rest.
void peakRows(LceRun &r, const LceOptions &o, double lift) {
  void *hp = r.hb.as<char>();
  for (int64_t i = 0; i < r.n; ++i) {
    const int64_t t = r.y[static_cast<size_t>(i)];
    if (t < 0)
      continue;
    double norm2 = 0;
    for (int64_t k = 0; k < o.d; ++k)
      norm2 += r.w[static_cast<size_t>(t * o.d + k)] * r.w[static_cast<size_t>(t * o.d + k)];
    for (int64_t k = 0; k < o.d; ++k) {
      const size_t idx = static_cast<size_t>(i * o.d + k);
      r.h[idx] = storeAs(o.abType, hp, idx,
                         r.h[idx] + lift * r.w[static_cast<size_t>(t * o.d + k)] / norm2);
    }
  }
}

double relativeNorm(DType t, const void *got, const std::vector<double> &want) {
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = loadAs(t, got, i) - want[i];
    e2 += d * d;
    r2 += want[i] * want[i];
  }
  return std::sqrt(e2 / std::max(r2, 1e-300));
}

/// [Note: the exact target logit] on the CPU: a planned Program's generated CUDA (the
/// RowDot kernel and the loss's row function) under the host emulation, on peaked rows
/// (each row's target logit raised by 20 over the rest, as in the GPU suite), against
/// fp64. The emulated GEMM accumulates in f32 as the device does, so without the f64
/// target logit its own error in z_y (|z_y| ~ 20 over 1024 products) is a relative error
/// of the row losses of order 1e-6; with it the loss is several times closer to fp64
/// (the host's f32 adds round to nearest, so the gap is smaller than the device's).
TEST(Emulation, PeakedLossTakesTheExactTargetLogit) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  double err[2] = {0, 0};
  for (bool exactTarget : {true, false}) {
    LceOptions o = smallLce();
    o.d = 1024;
    o.dwType = DType::F32;
    o.dhType = DType::BF16;
    Program p = plannedLce(o, DType::BF16, [&](plan::PlanOptions &po) {
      po.name = exactTarget ? "peaked_exact" : "peaked_f32";
      po.exactTargetLogit = exactTarget;
    });
    bool hasRowDot = false;
    for (const plan::Kernel &k : p.kernels)
      hasRowDot |= k.kind() == plan::KernelKind::RowDot;
    ASSERT_EQ(hasRowDot, exactTarget);
    HostModule module(p);
    const int64_t n = 8;
    LceRun r(p, o, n);
    peakRows(r, o, 20.0);
    r.run(module);
    Reference ref = reference(o, n, r.h, r.w, r.y);
    ASSERT_LT(ref.loss, 1e-3) << "the rows are peaked";
    err[exactTarget ? 0 : 1] = std::fabs(r.loss.as<float>()[0] - ref.loss) / ref.loss;
    EXPECT_EQ(r.errorWord(p)[0], 0);
  }
  std::cout << fmt::format("    peaked loss rel err: exact target {:.2e}, f32 pick {:.2e}\n",
                           err[0], err[1]);
  // Measured: 2.7e-8 with the f64 target logit, 3.5e-6 without it.
  EXPECT_LT(err[0], 2e-7);
  EXPECT_GT(err[1], 10 * err[0]) << "the f64 target logit must matter on peaked rows";
}

/// [Note: the target column's dZ] on the CPU: exact precision (dZ as bf16 hi + lo, the
/// recompute schedule) on peaked rows, with softcap and without. There the gradients are
/// dominated by the target columns' p_y − 1 ≈ −(the row loss), which `exp(z − lse) − 1`
/// in f32 gets to a few ulp of 1 only, with lse's own f32 rounding on top: with V = 300
/// columns ~20 below the target, 1 − p_y ≈ 1e-6–1e-4 and that form is off by 1 % and more.
/// The planned row kernel (`<name>_dzt0`) forms it as a·expm1(−log1p(X)) instead; the
/// outputs must come within exact precision's 1e-4 (relative norm against fp64), and the
/// old form must be far off on the same data, or the test does not show anything.
TEST(Emulation, PeakedTargetColumnDzKeepsItsRelativePrecision) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  for (double softcap : {0.0, 30.0}) {
    double errW[2] = {0, 0}, errH[2] = {0, 0};
    for (bool exactTarget : {true, false}) {
      LceOptions o = smallLce();
      o.d = 256;
      o.softcap = softcap;
      o.dwType = DType::F32;
      o.dhType = DType::F32;
      Program p = plannedLce(o, DType::BF16, [&](plan::PlanOptions &po) {
        po.name = exactTarget ? "tdz_exact" : "tdz_f32";
        po.exactTargetLogit = exactTarget;
        po.exactGradients = true;
      });
      bool hasTargetDz = false;
      for (const plan::Kernel &k : p.kernels)
        hasTargetDz |= k.name == "tdz_exact_dzt0";
      ASSERT_EQ(hasTargetDz, exactTarget);
      HostModule module(p);
      const int64_t n = 9;
      LceRun r(p, o, n);
      peakRows(r, o, 20.0);
      r.run(module);
      Reference ref = reference(o, n, r.h, r.w, r.y);
      ASSERT_LT(ref.loss, 1e-3) << "the rows are peaked";
      EXPECT_EQ(r.errorWord(p)[0], 0);
      errW[exactTarget ? 0 : 1] = relativeNorm(o.dwType, r.dw.p, ref.dw);
      errH[exactTarget ? 0 : 1] = relativeNorm(o.dhType, r.dh.p, ref.dh);
    }
    std::cout << fmt::format("    softcap {}: dW rel err {:.2e} (expm1 form) vs {:.2e} "
                             "(exp - 1), dH {:.2e} vs {:.2e}\n",
                             softcap, errW[0], errW[1], errH[0], errH[1]);
    EXPECT_LT(errW[0], 1e-4) << "softcap " << softcap;
    EXPECT_LT(errH[0], 1e-4) << "softcap " << softcap;
    EXPECT_GT(errW[1], 10 * errW[0]) << "the target column's form must matter on peaked rows";
  }
}

/// [Note: target group sums] on the CPU: a planned fast-precision Program with a bf16 dW
/// (the mma.sync dB epilogue adding the sums, the group-sum kernel in the chunk loop), in
/// blocks of 16 rows, on targets drawn from four columns in three chunks (groups of many
/// rows, blocks without some of them, ignored rows). dW against fp64, as a multiple of its
/// own bf16 rounding floor: with the sums at the floor, without them (the same Program,
/// LCEJIT_TARGET_RESIDUAL=0) clearly above it. Then heads left by a run with other targets:
/// a second run on the same workspace writes the bits a fresh workspace gives.
TEST(Emulation, TargetGroupSumsPutABf16DwAtItsFloor) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  LceOptions o = smallLce();
  o.d = 64;
  o.dwType = DType::BF16;
  o.dhType = DType::F32;
  const int64_t n = 150;
  auto plan = [&](bool sums) {
    Program p = plannedLce(o, DType::BF16, [&](plan::PlanOptions &po) {
      po.name = sums ? "tsum_on" : "tsum_off";
      po.targetResidual = sums;
      po.fixedChunkCols = 128;
    });
    setTargetGroupRows(p, 16);
    return p;
  };
  const Program on = plan(true), off = plan(false);
  int sums = 0;
  for (const plan::Kernel &k : on.kernels)
    if (const auto *d = std::get_if<plan::GemmDRhsKernel>(&k.body))
      sums += d->targetSums.valid() && d->targetSums.groupRows == 16;
  ASSERT_EQ(sums, 1);
  const int64_t cols[] = {7, 130, 131, 299};
  auto targets = [&](LceRun &r, int salt) {
    for (int64_t i = 0; i < n; ++i)
      r.y[static_cast<size_t>(i)] =
          i % 13 == 3 ? -100 : cols[(i * i + salt * (i / 16)) % 4];
  };
  double err[2] = {0, 0}, floorW = 0;
  for (bool withSums : {true, false}) {
    const Program &p = withSums ? on : off;
    HostModule module(p);
    LceRun r(p, o, n);
    targets(r, 0);
    r.run(module);
    EXPECT_EQ(r.errorWord(p)[0], 0);
    Reference ref = reference(o, n, r.h, r.w, r.y);
    HostBuffer fl(ref.dw.size() * 2);
    for (size_t i = 0; i < ref.dw.size(); ++i)
      storeAs(DType::BF16, fl.p, i, ref.dw[i]);
    floorW = relativeNorm(DType::BF16, fl.p, ref.dw);
    err[withSums ? 0 : 1] = relativeNorm(DType::BF16, r.dw.p, ref.dw) / floorW;
    if (!withSums)
      continue;
    // Stale heads: run other targets first, then these again on the same workspace.
    LceRun fresh(p, o, n), reused(p, o, n);
    targets(fresh, 1);
    fresh.run(module);
    targets(reused, 2);
    reused.run(module);
    targets(reused, 1);
    reused.run(module);
    EXPECT_EQ(std::memcmp(fresh.dw.p, reused.dw.p, static_cast<size_t>(o.v * o.d) * 2), 0)
        << "a head left by the previous run's targets changed dW";
  }
  std::cout << fmt::format("    bf16 dW: {:.3f}x its bf16 floor ({:.2e}) with the group sums, "
                           "{:.3f}x without\n",
                           err[0], floorW, err[1]);
  EXPECT_LT(err[0], 1.1);
  EXPECT_GT(err[1], 1.2) << "the data must show the target columns' rounding";
}

/// [Note: a group's first and last rows] on the CPU: a planned fast-precision Program with
/// an f32 dW in row blocks of 256 rows, its groups found by `<name>_dzgrp0`, against the
/// same Program planned with the scans (PlanOptions::targetGroups off): the same dW, dH
/// and loss bits, on targets that give every block groups of one row, of two to 64 rows
/// and of more than 64 (kept and scanned again), and ignored rows; A's rows 16-byte
/// aligned (the vector path) and not. The groups' words are zero again after a call, and
/// a second call on the same workspace writes the same bits.
TEST(Emulation, TargetGroupsAddWhatTheScansAdd) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  LceOptions o = smallLce();
  o.dwType = DType::F32;
  const int64_t n = 600, blockRows = 256;
  auto plan = [&](bool groups) {
    return plannedLce(o, DType::BF16, [&](plan::PlanOptions &po) {
      po.name = groups ? "tgrp_on" : "tgrp_off";
      po.tokens = n;
      po.blockRows = blockRows;
      po.targetGroups = groups;
    });
  };
  const Program on = plan(true), off = plan(false);
  int32_t groupsBuffer = -1;
  int finds = 0, readers = 0;
  for (const plan::Kernel &k : on.kernels)
    if (const auto *t = std::get_if<plan::TargetCorrectionKernel>(&k.body); t && t->groups.valid()) {
      (t->findGroups ? finds : readers) += 1;
      groupsBuffer = t->groups.index;
    }
  ASSERT_EQ(finds, 1);
  ASSERT_EQ(readers, 1);
  for (const plan::Kernel &k : off.kernels) {
    if (const auto *t = std::get_if<plan::TargetCorrectionKernel>(&k.body)) {
      EXPECT_FALSE(t->groups.valid() || t->findGroups) << k.name;
    }
  }
  ASSERT_EQ(on.runSchedule(n, false).rowBlocks, 3);
  ASSERT_EQ(off.runSchedule(n, false).rowBlocks, 3);

  auto targets = [&](LceRun &r) {
    for (int64_t i = 0; i < n; ++i)
      r.y[static_cast<size_t>(i)] = i % 13 == 3  ? -100
                                    : i % 2 == 0 ? 7
                                    : i % 6 == 1 ? 130 + i / blockRows
                                                 : (i * 37 + 11) % o.v;
  };
  { // The data has every kind of group in every block.
    LceRun r(on, o, n);
    targets(r);
    for (int64_t b = 0; b * blockRows < n; ++b) {
      std::map<int64_t, int> size;
      for (int64_t i = b * blockRows; i < std::min(n, (b + 1) * blockRows); ++i)
        if (r.y[static_cast<size_t>(i)] >= 0)
          ++size[r.y[static_cast<size_t>(i)]];
      int one = 0, few = 0, many = 0;
      for (auto [t, c] : size)
        (c == 1 ? one : c <= 64 ? few : many) += 1;
      EXPECT_GT(one, 0) << "block " << b;
      EXPECT_GT(few, 0) << "block " << b;
      if ((b + 1) * blockRows <= n) {
        EXPECT_GT(many, 0) << "block " << b;
      }
    }
  }
  HostModule modOn(on), modOff(off);
  for (size_t misalign : {size_t(0), size_t(2)}) {
    SCOPED_TRACE(fmt::format("A misaligned by {} bytes", misalign));
    LceRun a(on, o, n, misalign), b(off, o, n, misalign);
    targets(a);
    targets(b);
    a.run(modOn);
    b.run(modOff);
    EXPECT_EQ(a.errorWord(on)[0], 0);
    EXPECT_EQ(b.errorWord(off)[0], 0);
    const size_t dwBytes = static_cast<size_t>(o.v * o.d) * 4;
    EXPECT_EQ(std::memcmp(a.dw.p, b.dw.p, dwBytes), 0) << "dW differs from the scans'";
    EXPECT_EQ(std::memcmp(a.dh.p, b.dh.p, static_cast<size_t>(n * o.d * dtypeSize(o.dhType))),
              0);
    EXPECT_EQ(std::memcmp(a.loss.p, b.loss.p, 4), 0);
    // Against fp64 with dZ rounded as fast precision rounds it, its target column exact
    // (what the residual and this correction restore): f32 sums only.
    Reference ref = reference(o, n, a.h, a.w, a.y, /*roundDz=*/true);
    expectClose("grad_weight", o.dwType, a.dw.p, ref.dw);
    // The words are zero again, and a second call on the same workspace writes the same.
    const int64_t at = on.workspaceOffsets(n, nullptr)[static_cast<size_t>(groupsBuffer)];
    const auto *words = reinterpret_cast<const uint32_t *>(a.ws.as<char>() + at);
    int64_t set = 0;
    for (int64_t i = 0; i < 2 * o.v; ++i)
      set += words[i] != 0;
    EXPECT_EQ(set, 0) << "words left set by the call";
    std::vector<char> first(a.dw.as<char>(), a.dw.as<char>() + dwBytes);
    std::memset(a.dw.p, 0x7f, dwBytes); // poison: the call must write every element
    a.run(modOn);
    EXPECT_EQ(std::memcmp(first.data(), a.dw.p, dwBytes), 0) << "the second call's dW";
  }
}

/// Gradient accumulation ([Note: accumulating outputs] in Program.h): planned Programs'
/// generated CUDA, run under the host emulation with row blocks (f32 dW) and vocabulary
/// chunks, with the output mask of a run that accumulates into dH, dW or both. Each
/// accumulated output equals what it held plus what a plain run writes (a bf16 output is
/// rounded once after the addition: within one rounding of old + fresh), and against
/// fp64: old + the gradient. An output that does not accumulate is written exactly as by
/// a plain run. Covers the mma.sync dRhs epilogue (f32 and bf16 outputs, row block 0
/// adding too), the cast (bf16 dH), and the SIMT dLhs GEMM writing an f32 dH itself
/// (chunk 0 adding too).
TEST(Emulation, AccumulateAddsTheGradientsToWhatTheOutputsHold) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  struct Plan {
    const char *name;
    DType ab, dh, dw;
    bool exact;
    /// The Hopper path ([Note: sm90 host emulation]): V = 384 (whole 128-column tiles),
    /// the materialized backward in row blocks of 32; dW added through TMA reduce-adds.
    bool sm90 = false;
  };
  for (const Plan &pc : {Plan{"bf16 fast dW f32", DType::BF16, DType::BF16, DType::F32, false},
                         Plan{"bf16 fast dW bf16", DType::BF16, DType::BF16, DType::BF16, false},
                         Plan{"bf16 exact dW f32", DType::BF16, DType::BF16, DType::F32, true},
                         Plan{"f32 simt", DType::F32, DType::F32, DType::F32, false},
                         Plan{"bf16 fast dW f32 sm90", DType::BF16, DType::BF16, DType::F32,
                              false, true}}) {
    LceOptions o = smallLce();
    o.abType = pc.ab;
    o.dhType = pc.dh;
    o.dwType = pc.dw;
    if (pc.sm90)
      o.v = 384;
    Program p = plannedLce(o, pc.ab, [&](plan::PlanOptions &po) {
      po.name = pc.sm90 ? "accumulate_sm90" : "accumulate";
      po.exactGradients = pc.exact;
      if (pc.sm90) {
        po.mainloop = plan::Mainloop::Wgmma;
        po.target.numSMs = 4;
      }
    });
    ASSERT_EQ(plan::accumulableOutputs(p), 6u) << pc.name;
    p.schedule.minBlockRows = 32;
    p.schedule.rowAlign = 32;
    p.schedule.goodChunkCols = 128;
    const int64_t n = 77;
    p.schedule.budgetBytes = plan::workspaceBytesFor(p, n, 32, pc.sm90 ? o.v : 128);
    if (p.schedule.firstBlockedStep < 0)
      p.schedule.fixedChunkCols = 128; // bf16 dW: rows never blocked, chunks anyway
    plan::RunSchedule s = p.runSchedule(n);
    SCOPED_TRACE(fmt::format("{}: {}", pc.name, s.describe()));
    ASSERT_GT(s.chunks, pc.sm90 ? 0 : 1); // the materialized backward: one chunk
    ASSERT_EQ(s.rowBlocks > 1, pc.dw == DType::F32) << "f32 dW blocks its rows, bf16 dW not";
    HostModule module(p);
    ASSERT_EQ(module.sm90(), pc.sm90);
    LceRun r(p, o, n);
    r.run(module);
    const int64_t nh = n * o.d, nw = o.v * o.d;
    auto values = [](DType t, const void *base, int64_t count) {
      std::vector<double> v(static_cast<size_t>(count));
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = loadAs(t, base, i);
      return v;
    };
    const std::vector<double> freshH = values(o.dhType, r.dh.p, nh),
                              freshW = values(o.dwType, r.dw.p, nw);
    const Reference ref = reference(o, n, r.h, r.w, r.y);
    for (uint64_t mask : {6u, 4u, 2u}) {
      SCOPED_TRACE(fmt::format("accumulate mask {}", mask));
      // Old values of the gradients' size, stored as the outputs' dtypes (never zero).
      std::mt19937_64 rng(mask);
      std::uniform_real_distribution<double> u(0.5, 1.0);
      auto prefill = [&](DType t, void *base, const std::vector<double> &like) {
        double m = 0;
        for (double x : like)
          m = std::max(m, std::fabs(x));
        std::vector<double> old(like.size());
        for (size_t i = 0; i < old.size(); ++i)
          old[i] = storeAs(t, base, i, (rng() & 1 ? 1 : -1) * u(rng) * m);
        return old;
      };
      const std::vector<double> oldH = prefill(o.dhType, r.dh.p, freshH),
                                oldW = prefill(o.dwType, r.dw.p, freshW);
      r.buffers.accumulateOutputs = mask;
      r.run(module);
      r.buffers.accumulateOutputs = 0;
      auto check = [&](const char *what, DType t, const void *got, const std::vector<double> &old,
                       const std::vector<double> &fresh, const std::vector<double> &exact,
                       bool accumulates) {
        const std::vector<double> a = values(t, got, static_cast<int64_t>(old.size()));
        if (!accumulates) {
          EXPECT_EQ(a, fresh) << what << " is written as by a plain run";
          return;
        }
        double maxOld = 0, maxFresh = 0, maxRef = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          maxOld = std::max(maxOld, std::fabs(old[i]));
          maxFresh = std::max(maxFresh, std::fabs(fresh[i]));
          maxRef = std::max(maxRef, std::fabs(exact[i]));
        }
        int bad = 0, badRef = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          // One rounding of old + the f32 gradient (the plain run rounded that gradient:
          // both roundings in the bound), f32 sums grouped otherwise (row blocks, chunks).
          const double tol = roundingOf(t) * (std::fabs(old[i]) + std::fabs(fresh[i])) +
                             1e-6 * (maxOld + maxFresh);
          if (!(std::fabs(a[i] - (old[i] + fresh[i])) <= tol) && bad++ < 3)
            ADD_FAILURE() << what << "[" << i << "] = " << a[i] << ", old " << old[i]
                          << " + fresh " << fresh[i];
          // Against fp64: the plain run's error (a bf16 dZ: 2^-8 of the largest element,
          // as in PlannedProgramRowBlocksAndChunks) and the rounding of the sum.
          const double tolRef =
              0x1p-8 * maxRef + roundingOf(t) * std::fabs(old[i] + exact[i]) + 1e-30;
          if (!(std::fabs(a[i] - (old[i] + exact[i])) <= tolRef) && badRef++ < 3)
            ADD_FAILURE() << what << "[" << i << "] = " << a[i] << ", old " << old[i]
                          << " + fp64 " << exact[i];
        }
        EXPECT_EQ(bad, 0) << what << ": elements not old + fresh";
        EXPECT_EQ(badRef, 0) << what << ": elements not old + the fp64 gradient";
      };
      check("grad_hidden", o.dhType, r.dh.p, oldH, freshH, ref.dh, mask & 2);
      check("grad_weight", o.dwType, r.dw.p, oldW, freshW, ref.dw, mask & 4);
      EXPECT_EQ(r.errorWord(p)[0], 0);
    }
  }
}

//===----------------------------------------------------------------------===//
// Every tile config of the mainloop (GemmMainloop in lcejit_gemm.cuh), in all
// four GEMM kernels of an LCE, against fp64: tails in M, N and K everywhere,
// and operands that take the element path of the tile loader (rows not a
// multiple of 16 bytes; base pointers not 16-byte aligned).
//===----------------------------------------------------------------------===//

namespace {

struct TileCase {
  std::string name;
  TileConfig fwd, bwd;
  bool simt = false; ///< f32 operands, SIMT math; else bf16 tensor cores
};

void PrintTo(const TileCase &c, std::ostream *os) { *os << c.name; }

class EmulationTiles : public ::testing::TestWithParam<TileCase> {};

TEST_P(EmulationTiles, MatchesReference) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  const TileCase &t = GetParam();
  LceOptions o = smallLce();
  o.name = "tiles";
  o.fwdTile = t.fwd;
  o.bwdTile = t.bwd;
  o.v = 300;         // column tails for bn = 64, 96, 128 and 256
  o.chunkCols = 128; // chunks 128, 128, 44 (44: dZ rows take the element path)
  o.splits = 3;      // with bn = 256: two column tiles, one split left empty
  // k tails: 72 = 2 * 32 + 8 = 64 + 8 (16-bit), 40 = 2 * 16 + 8 (f32).
  int64_t alignedD = 72, unalignedD = 77;
  size_t misalign = 2;
  if (t.simt) {
    o.abType = DType::F32;
    o.fwdMath = MathMode::SimtF32;
    o.bwdMath = MathMode::SimtF32;
    o.dzFormat = DzFormat::F32;
    o.dwType = DType::F32;
    o.dhType = DType::F32;
    alignedD = 40;
    unalignedD = 37;
    misalign = 4;
  }
  // Rows of H and W whose byte size is a multiple of 16: vector copies, except
  // when their base pointers are misaligned.
  o.d = alignedD;
  {
    HostModule module(lcejit::testing::makeLceProgram(o));
    runCase(Case{t.name + " aligned", o, {37, 200}, true, 0}, module);
    runCase(Case{t.name + " misaligned base", o, {200}, true, misalign},
            module);
  }
  // d = 77 (37): rows of H and W are not whole 16-byte vectors: element loads
  // of both operands in every GEMM; k tails and n tails (dlhs, drhs).
  o.d = unalignedD;
  runCase(Case{t.name + " unaligned rows", o, {130}, true, 0});
}

INSTANTIATE_TEST_SUITE_P(
    Configs, EmulationTiles,
    ::testing::Values(
        TileCase{"tc128x128x32", {128, 128, 32, 2, 4, 3}, {128, 128, 32, 2, 4, 3}},
        TileCase{"tc64x128x32", {64, 128, 32, 1, 4, 3}, {64, 128, 32, 1, 4, 3}},
        TileCase{"tc128x128x64", {128, 128, 64, 2, 4, 3}, {128, 128, 64, 2, 4, 3}},
        TileCase{"tc128x256x32", {128, 256, 32, 2, 4, 3}, {128, 256, 32, 2, 4, 3}},
        TileCase{"tc256x128x32", {256, 128, 32, 4, 2, 3}, {256, 128, 32, 4, 2, 3}},
        // Odd numbers of 8-column mma tiles per warp (ldmatrix .x2): 3 in the
        // forward (K-major B), 1 in the backward (N-major B; M-major dZ^T rows
        // of 4 chunks).
        TileCase{"tc_odd_n_tiles", {64, 96, 32, 2, 4, 2}, {32, 64, 32, 1, 8, 2}},
        TileCase{"simt64x64x16", {64, 64, 16, 2, 4, 2}, {64, 64, 16, 2, 4, 2}, true}),
    [](const auto &info) { return info.param.name; });

} // namespace

namespace {
/// A planned Program on the Hopper path ([Note: sm90 host emulation]), planned for a
/// device of 4 SMs so that persistent CTAs walk several tiles, and one call of it that
/// overwrites dW.
struct Sm90Case {
  int64_t v;
  double softcap;
  int64_t n;
  int64_t align = 0;    ///< > 0: rows a block in multiples of this, at least this many
  int64_t budgetKb = 0; ///< > 0: the workspace budget
  bool smallChunks = false;
  const char *expect;   ///< in the schedule's description
  int64_t d = 72;
  int64_t planBudgetKb = 0; ///< > 0: the budget the planner plans for
  int32_t orderGroup = 0;   ///< > 0: PlanOptions::forwardOrderGroup
  std::optional<plan::L2Hints> l2 = std::nullopt; ///< PlanOptions::forwardL2
  int32_t cluster = 0;             ///< > 0: PlanOptions::forwardCluster
  std::optional<bool> halves = std::nullopt; ///< PlanOptions::forwardHalves
  std::optional<int64_t> loadedRows = std::nullopt; ///< PlanOptions::loadedSumsMaxRows
  int32_t dbCluster = 0; ///< > 0: PlanOptions::dbCluster ([Note: dB multicast])
};
/// What the launches of the calls run so far did.
struct Sm90Seen {
  bool pairs = false, quads = false, tmaStore = false, splitK = false, streamK = false,
       inPlace = false, loadedSums = false, reduceAdds = false;
  /// [Note: dB multicast]: a dB in clusters of 2 and of 4, an accumulating one in clusters.
  bool dbPairs = false, dbQuads = false, dbClusterAdds = false;
};
/// [Note: the expected dZ floor]
/// The floor of fast precision's gradients is the error that one bf16 rounding of dZ
/// leaves, but one rounding of one dZ is one draw: where a handful of elements dominate a
/// gradient (rows peaked by 30 at V = 512: a row's few runners-up carry its non-target
/// columns, and each such element's rounding moves a whole row of dW), whether those few
/// round far or near decides the norm. The same rounding of K * dZ (the value scaled by K
/// in [1, 2), then divided again) is an equally valid draw: at V = 512, D = 72, N = 300,
/// peaked, eight such draws of dW's floor span 0.64-1.48x their root mean square, where
/// dense data (saturating softcap logits) spans 0.93-1.07x. The row-scaled stored values
/// round exp(v - c) where the floor rounds a * p: the same relative precision, another
/// draw; a bit-exact fp64 model of them matches the kernels to 0.006x of the floor and
/// lands where they do, 1.44x (dH) and 2.57x (dW) of the K = 1 draw (session 30's open
/// finding, docs/numerics.md), 1.05x and 1.12x of the largest of the eight. So the bound
/// is kFastDzFloorFactor times the largest of kFloorScalings draws, K = 2^(q /
/// kFloorScalings), which move the rounding's position in the mantissa evenly over an
/// octave.
constexpr int kFloorScalings = 8;
/// The relative-norm errors of the gradients of `floors` (reference(..., roundDz = true,
/// K) for each K), each rounded to the output's type: their root mean square and range.
struct DzFloor {
  double rms = 0, lo = INFINITY, hi = 0;
};
DzFloor dzFloor(DType t, const std::vector<double> &ref,
                const std::vector<const std::vector<double> *> &floors) {
  HostBuffer rounded(ref.size() * 4); // the floor in the output's type: its rounding too
  DzFloor f;
  for (const std::vector<double> *floor : floors) {
    for (size_t i = 0; i < ref.size(); ++i)
      storeAs(t, rounded.p, i, (*floor)[i]);
    const double e = relativeNorm(t, rounded.p, ref);
    f.rms += e * e;
    f.lo = std::min(f.lo, e);
    f.hi = std::max(f.hi, e);
  }
  f.rms = std::sqrt(f.rms / static_cast<double>(floors.size()));
  return f;
}
/// A fast-precision gradient against fp64 on peaked or saturating data: its relative norm
/// error within kFastDzFloorFactor of the floor's largest draw ([Note: the expected dZ
/// floor]: fp64 gradients of the same inputs with dZ rounded as fast precision rounds it,
/// then rounded to the output's type), and every element within the GPU suite's
/// kMaxBf16UlpsOfLargest bf16 ulps of the largest (tests/gpu/Tolerances.h). The factor
/// allows two roundings of the same size (sqrt 2): the materialized Hopper backward's dB
/// reads bf16(scale * H) next to the rounded values ([Note: row-scaled stored values]).
/// Measured on the CPU (session 31): peaked rows 0.63-1.05x the largest draw (dH) and
/// 0.81-1.24x (dW), saturating softcap logits 1.00x (dH) and 0.92x (the recompute
/// backward's dW) and 1.33-1.35x (the materialized dW, whose second rounding is the
/// sqrt 2); the largest error 0.3-1.0 ulp. (The GPU suite's bounds against the output's own
/// bf16 rounding, calibrated on vocabularies of 32000 and more, do not carry to V = 384
/// with rows peaked by 30, where the non-target columns of dZ dominate the gradients:
/// 1.2-2.0 of that floor, on both paths.)
constexpr double kFastDzFloorFactor = 1.5;
/// How far the row-scaled backward may be from the fp64 model of its design
/// (rowScaledModel), in the floor's RMS: measured 0.006x (dH) and 0.001x (dW) at V = 512.
constexpr double kOffTheDesign = 0.05;
double norm(const std::vector<double> &x) {
  double s = 0;
  for (double e : x)
    s += e * e;
  return std::sqrt(s);
}
void expectAtTheDzFloor(const char *what, DType t, const void *got,
                        const std::vector<double> &ref, const DzFloor &floor) {
  double maxRef = 0, maxErr = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    maxRef = std::max(maxRef, std::fabs(ref[i]));
    maxErr = std::max(maxErr, std::fabs(loadAs(t, got, i) - ref[i]));
  }
  const double err = relativeNorm(t, got, ref);
  std::cout << fmt::format("      {:<12} rel err {:.3e} = {:.3f}x the dZ floor's largest draw, "
                           "{:.3f}x its rms {:.3e} (draws {:.2f}-{:.2f}x the rms); max |err| "
                           "{:.2f} bf16 ulp of max |ref| {:.3e}\n",
                           what, err, err / floor.hi, err / floor.rms, floor.rms,
                           floor.lo / floor.rms, floor.hi / floor.rms,
                           maxErr / gputest::bf16Ulp(maxRef), maxRef);
  EXPECT_LE(err, kFastDzFloorFactor * floor.hi) << what;
  EXPECT_LE(maxErr, gputest::kMaxBf16UlpsOfLargest * gputest::bf16Ulp(maxRef)) << what;
  EXPECT_GT(floor.lo, 0.0) << what << ": the data must round something";
}

/// Plans case `c`, runs it under the sm90 emulation on the default random data changed
/// by `data` (which also checks that the data is what the caller means), and checks it
/// against fp64: the loss, and dH and dW within the bound of a bf16 dZ (`suiteBounds`:
/// for peaked and saturating data, the GPU suite's loss tolerance and expectAtTheDzFloor).
/// [Note: the expected dZ floor]: the gradients the materialized backward's row-scaled
/// stored values give by design, in fp64 ([Note: row-scaled stored values], [Note: a
/// per-row reference]; no softcap): s = bf16(exp(v - c)) with c the target logit in f32,
/// 0 at the target column; scale = a exp(c - lse); dH = scale sum_j s W_j + dZ_t W_t, then
/// bf16; dW = sum_r s bf16(scale H_r) + dZ_t H_r, with the target column's dZ_t exact.
void rowScaledModel(const LceRun &r, const LceOptions &o, std::vector<double> &dh,
                    std::vector<double> &dw) {
  const int64_t n = r.n, d = o.d, v = o.v;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i)
    count += r.y[static_cast<size_t>(i)] != -100;
  const double a = 1.0 / static_cast<double>(std::max<int64_t>(count, 1));
  dh.assign(static_cast<size_t>(n * d), 0);
  dw.assign(static_cast<size_t>(v * d), 0);
  std::vector<double> z(static_cast<size_t>(v)), sh(static_cast<size_t>(d));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = r.y[static_cast<size_t>(i)];
    if (t < 0)
      continue;
    double m = -INFINITY;
    for (int64_t j = 0; j < v; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < d; ++k)
        acc += r.h[static_cast<size_t>(i * d + k)] * r.w[static_cast<size_t>(j * d + k)];
      z[static_cast<size_t>(j)] = acc;
      m = std::max(m, acc);
    }
    double sum = 0;
    for (int64_t j = 0; j < v; ++j)
      sum += std::exp(z[static_cast<size_t>(j)] - m);
    const double lse = m + std::log(sum);
    const double c = static_cast<float>(z[static_cast<size_t>(t)]);
    const double scale = static_cast<float>(a * std::exp(c - lse));
    const double dzt = (std::exp(z[static_cast<size_t>(t)] - lse) - 1.0) * a;
    for (int64_t k = 0; k < d; ++k)
      sh[static_cast<size_t>(k)] = roundToBf16(scale * r.h[static_cast<size_t>(i * d + k)]);
    for (int64_t j = 0; j < v; ++j) {
      const double sv = j == t ? 0.0 : roundToBf16(std::exp(z[static_cast<size_t>(j)] - c));
      const double g = j == t ? dzt : scale * sv;
      for (int64_t k = 0; k < d; ++k) {
        dh[static_cast<size_t>(i * d + k)] += g * r.w[static_cast<size_t>(j * d + k)];
        dw[static_cast<size_t>(j * d + k)] +=
            j == t ? dzt * r.h[static_cast<size_t>(i * d + k)] : sv * sh[static_cast<size_t>(k)];
      }
    }
  }
  for (double &x : dh)
    x = roundToBf16(x);
}

void runSm90Case(const Sm90Case &c, Sm90Seen &seen,
                 const std::function<void(LceRun &, const LceOptions &)> &data = {},
                 bool suiteBounds = false, bool rowScaledDesign = false) {
  LceOptions o = smallLce();
  o.v = c.v;
  o.d = c.d;
  o.softcap = c.softcap;
  o.dwType = DType::F32;
  o.dhType = DType::BF16;
  const std::string name = fmt::format("sm90_v{}_d{}_n{}", c.v, c.d, c.n);
  Program q = plannedLce(o, DType::BF16, [&](plan::PlanOptions &po) {
    po.name = name;
    po.tokens = c.n;
    po.mainloop = plan::Mainloop::Wgmma;
    po.target.numSMs = 4;
    if (c.planBudgetKb > 0)
      po.workspaceBudgetBytes = c.planBudgetKb * 1024;
    // The planner keeps the f32 correction's groups where they leave the plan's budget's
    // schedules alone ([Note: a group's first and last rows]); a case that sets a budget
    // after planning is meant to run a schedule of that budget without them.
    po.targetGroups = c.budgetKb == 0;
    po.forwardOrderGroup = c.orderGroup;
    po.forwardL2 = c.l2;
    po.forwardCluster = c.cluster;
    po.forwardHalves = c.halves;
    if (c.loadedRows)
      po.loadedSumsMaxRows = *c.loadedRows;
    po.dbCluster = c.dbCluster;
  });
  if (c.halves.value_or(false)) {
    // [Note: sm90 column halves]: the plan took them.
    bool halves = false;
    for (const plan::Kernel &k : q.kernels)
      if (const auto *f = std::get_if<plan::GemmReduceKernel>(&k.body))
        halves |= f->gemm.tile.halves;
    EXPECT_TRUE(halves) << "the forward does not run on column halves";
  }
  if (c.l2) {
    // [Note: sm90 L2 hints]: the plan carries them to the generated call.
    bool hinted = false;
    for (const plan::Kernel &k : q.kernels)
      if (const auto *f = std::get_if<plan::GemmReduceKernel>(&k.body))
        hinted |= f->l2 == *c.l2;
    EXPECT_TRUE(hinted) << "no forward took the L2 hints " << c.l2->str();
  }
  for (const plan::Kernel &k : q.kernels)
    if (const auto *f = std::get_if<plan::DzFormKernel>(&k.body); f && f->scaleValues)
      seen.inPlace = true;
  if (c.align > 0) {
    q.schedule.minBlockRows = c.align;
    q.schedule.rowAlign = c.align;
  }
  if (c.smallChunks) {
    q.schedule.goodChunkCols = 128;
    q.schedule.budgetBytes = plan::workspaceBytesFor(q, c.n, 64, 128);
  }
  if (c.budgetKb > 0)
    q.schedule.budgetBytes = c.budgetKb * 1024;
  HostModule module(q);
  ASSERT_TRUE(module.sm90()) << "the planner took no WgmmaBF16 GEMM";
  LceRun r(q, o, c.n, 0, /*outputFree=*/true);
  if (data)
    data(r, o);
  // The schedule of this call (it overwrites dW: its memory is free for the values).
  const runtime::ExecutionPlan ep =
      runtime::planExecution(q, r.buffers, q.runSchedule(c.n, /*outputFree=*/true));
  const std::string schedule = ep.schedule.describe();
  SCOPED_TRACE(fmt::format("{} softcap {}: {}", name, c.softcap, schedule));
  std::cout << fmt::format("    {} softcap {}: {}\n", name, c.softcap, schedule);
  EXPECT_NE(schedule.find(c.expect), std::string::npos) << "this case is meant to run '"
                                                        << c.expect << "'";
  EXPECT_EQ(schedule.find("OVER BUDGET"), std::string::npos);
  for (const runtime::LaunchRecord &l : ep.launches) {
    const plan::Kernel &kernel = q.kernels[static_cast<size_t>(l.kernel)];
    const bool dA = std::holds_alternative<plan::GemmDLhsKernel>(kernel.body);
    const bool fwd = std::holds_alternative<plan::GemmReduceKernel>(kernel.body);
    const bool dB = std::holds_alternative<plan::GemmDRhsKernel>(kernel.body);
    seen.pairs |= fwd && l.dims.cluster == 2;
    seen.quads |= fwd && l.dims.cluster == 4;
    seen.dbPairs |= dB && l.dims.cluster == 2;
    seen.dbQuads |= dB && l.dims.cluster == 4;
    seen.dbClusterAdds |= dB && l.dims.cluster > 1 && l.rowBlock > 0;
    EXPECT_TRUE(dB || dA || fwd || l.dims.cluster == 1) << kernel.name << " in clusters";
    seen.splitK |= dA && l.dims.cluster > 1;
    seen.streamK |= dA && l.dims.cooperative;
    seen.tmaStore |= l.maps.size() == 3;
    // [Note: sm90 loaded sums]: a later row block's dB adds to old values it loaded
    // where the block's rows (the launch's N) are at most the kernel's threshold, else by
    // TMA reduce-adds.
    if (const auto *db = std::get_if<plan::GemmDRhsKernel>(
            &q.kernels[static_cast<size_t>(l.kernel)].body);
        db && l.maps.size() == 3 && l.rowBlock > 0) {
      const std::vector<plan::Param> params =
          plan::kernelParams(q.kernels[static_cast<size_t>(l.kernel)]);
      int64_t rows = -1;
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].kind == plan::Param::Kind::N)
          rows = l.args[i].value.i64;
      ASSERT_GT(rows, 0) << "no N among the dB launch's arguments";
      const bool loaded = plan::wgmmaLoadedSums(db->tile) && rows <= db->loadedSumsMaxRows;
      seen.loadedSums |= loaded;
      seen.reduceAdds |= !loaded;
    }
  }
  r.run(module, /*outputFree=*/true);
  const runtime::PreparedRun prepared = runtime::prepareRun(q, c.n, /*outputFree=*/true);
  EXPECT_EQ(reinterpret_cast<const int64_t *>(r.ws.as<char>() + prepared.errorWordOffset)[0],
            0);
  Reference ref = reference(o, c.n, r.h, r.w, r.y);
  if (suiteBounds) {
    EXPECT_LE(std::fabs(r.loss.as<float>()[0] - ref.loss),
              gputest::kLossTolerance * std::fabs(ref.loss) + 1e-12);
    std::vector<Reference> floors;
    for (int q = 0; q < kFloorScalings; ++q)
      floors.push_back(reference(o, c.n, r.h, r.w, r.y, /*roundDz=*/true,
                                 std::exp2(static_cast<double>(q) / kFloorScalings)));
    std::vector<const std::vector<double> *> dh, dw;
    for (const Reference &f : floors) {
      dh.push_back(&f.dh);
      dw.push_back(&f.dw);
    }
    const DzFloor floorH = dzFloor(o.dhType, ref.dh, dh), floorW = dzFloor(o.dwType, ref.dw, dw);
    expectAtTheDzFloor("grad_hidden", o.dhType, r.dh.p, ref.dh, floorH);
    expectAtTheDzFloor("grad_weight", o.dwType, r.dw.p, ref.dw, floorW);
    if (rowScaledDesign) {
      // The kernels against the fp64 model of their design: what is left is the f32
      // accumulation order (and the bf16 dH it can flip), far under the floor.
      std::vector<double> modelH, modelW;
      rowScaledModel(r, o, modelH, modelW);
      const double offH = relativeNorm(o.dhType, r.dh.p, modelH) * norm(modelH) / norm(ref.dh);
      const double offW = relativeNorm(o.dwType, r.dw.p, modelW) * norm(modelW) / norm(ref.dw);
      std::cout << fmt::format("      off the row-scaled design: dH {:.4f}x, dW {:.4f}x the "
                               "floor's rms\n",
                               offH / floorH.rms, offW / floorW.rms);
      EXPECT_LE(offH, kOffTheDesign * floorH.rms) << "grad_hidden against its design";
      EXPECT_LE(offW, kOffTheDesign * floorW.rms) << "grad_weight against its design";
    }
    return;
  }
  EXPECT_NEAR(r.loss.as<float>()[0], ref.loss, 1e-5 * std::max(1.0, std::fabs(ref.loss)));
  expectBf16DzBound("grad_hidden", o.dhType, r.dh.p, ref.dh);
  expectBf16DzBound("grad_weight", o.dwType, r.dw.p, ref.dw);
}
} // namespace

/// [Note: sm90 host emulation] The Hopper path on the CPU: the Programs the planner makes
/// for an H200 (WgmmaBF16 GEMMs through TMA: the forward's reduce on ping-pong consumers in
/// cluster pairs, dA and dB on cooperative ones, dB's f32 output through TMA), planned for
/// a device of 4 SMs so that persistent CTAs walk several tiles, their generated CUDA run
/// under the sm90 emulation against fp64 on the schedules a call can take. A vocabulary
/// of 296 (a column tail) takes the recompute backward (the dZ GEMM recomputes the
/// logits), in one block and in blocks and chunks cut by a small budget; one of 384 (whole
/// 128-column tiles) the materialized backward, with budgets that keep the stored values
/// in dW's memory as slabs ([Note: stored values in dW]: N <= 2 D = 144), then ordinary
/// blocks after such a block, then a block whose slabs have tails in the workspace
/// ([Note: slab tails]); and one of 1024, where dA's 16 k-blocks split over a cluster
/// pair (one tile), run as stream-K groups (three tiles on four CTAs) or, at D = 320, end
/// in chains; and the lean form, which scales the stored values in place.
TEST(Emulation, Sm90PlannedProgramsMatchFp64) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  const Sm90Case cases[] = {
      {296, 0.0, 77, 0, 0, false, "one block, one chunk"},
      // Its later blocks' dB loads its sums at the H100's threshold ([Note: loaded sums by
      // card]; the planner's for an unknown card, the H200's, is to reduce-add).
      {296, 5.0, 200, 32, 0, true, "row blocks of 32 rows, 2 chunks of 256 columns", 72, 0, 0,
       std::nullopt, 0, std::nullopt, plan::kLoadedSumsMaxRows},
      // Loaded sums with 10 tiles of vocabulary rows a dB launch on 4 CTAs: a CTA's next
      // tile refills the stages its loaded sums gave back, so a stage given back before
      // its stores have read it shows (a mutation that did so failed here, not above).
      {1280, 0.0, 200, 32, 200, false, "then 2 row blocks of 64 rows", 72, 0, 0, std::nullopt, 0,
       std::nullopt, plan::kLoadedSumsMaxRows},
      {384, 5.0, 140, 32, 72, false, "its stored values in the gradient's memory"},
      {384, 0.0, 200, 32, 116, false, "then 1 row block of 96 rows"},
      {384, 5.0, 300, 128, 244, false, "in the workspace's tails"},
      // dA over 16 k-blocks: one tile split over a cluster pair ([Note: sm90 split-K]);
      // three tiles on four CTAs ([Note: dA stream-K]), a cooperative launch.
      {1024, 0.0, 100, 0, 0, false, "one row block"},
      {1024, 5.0, 300, 0, 0, false, "one row block"},
      // D = 320: 6 dA tiles of 128 x 256 on 4 SMs, a round and a tail of 2 in chains
      // ([Note: dA stream-K chains]), their slots after the slab block's buffers.
      {1024, 0.0, 257, 0, 0, false, "dA's last round in chains", 320, 256},
      // Planned for 56 KB, the lean form: no scaled copy of A, the values scaled in place
      // by a DzForm pass ([Note: values scaled in place]).
      {384, 5.0, 140, 0, 0, false, "its stored values in the gradient's memory", 72, 56},
      // [Note: forward CTA order] in groups of 2 row tiles (LCEJIT_FWD_GROUP): 4 row tiles
      // in two groups, still in cluster pairs.
      {384, 0.0, 512, 0, 0, false, "one row block", 72, 0, 2},
      // [Note: sm90 L2 hints] (LCEJIT_FWD_L2): the forward's loads of H evict-last and of
      // W evict-first, in groups of 2 (the template's group written out before the code).
      {384, 5.0, 512, 0, 0, false, "one row block", 72, 0, 2,
       plan::L2Hints{plan::L2Hint::EvictLast, plan::L2Hint::EvictFirst}},
      // [Note: sm90 multicast] in clusters of 4 (LCEJIT_FWD_CLUSTER=4): 8 row tiles in two
      // quads, each CTA loading a quarter of every W tile; 6 row tiles as pairs, each CTA
      // loading two quarters; 3 row tiles as single CTAs loading all four.
      {384, 5.0, 1024, 0, 0, false, "one row block", 72, 0, 0, std::nullopt, 4},
      {384, 0.0, 768, 0, 0, false, "one row block", 72, 0, 0, std::nullopt, 4},
      {384, 0.0, 300, 0, 0, false, "one row block", 72, 0, 0, std::nullopt, 4},
      // [Note: sm90 column halves] (LCEJIT_FWD_HALVES): the forward on 128 x 256 tiles,
      // each consumer all rows of its 128 columns: single CTAs (3 row tiles), pairs (4),
      // and the stored values in dW's memory as slabs.
      {512, 5.0, 300, 0, 0, false, "one row block", 72, 0, 0, std::nullopt, 0, true},
      {1024, 0.0, 512, 0, 0, false, "one row block", 72, 0, 0, std::nullopt, 0, true},
      {512, 5.0, 140, 32, 96, false, "its stored values in the gradient's memory", 72, 0, 0,
       std::nullopt, 0, true},
      // [Note: sm90 loaded sums] (LCEJIT_LOADED_SUMS_ROWS): an accumulating dB by TMA
      // reduce-adds, always (0) or past the threshold (blocks of 96 rows against 64).
      {296, 5.0, 200, 32, 0, true, "row blocks of 32 rows, 2 chunks of 256 columns", 72, 0,
       0, std::nullopt, 0, std::nullopt, 0},
      {384, 0.0, 200, 32, 116, false, "then 1 row block of 96 rows", 72, 0, 0, std::nullopt, 0,
       std::nullopt, 64},
      // [Note: dB multicast] (LCEJIT_DB_CLUSTER): dB's CTAs of adjacent row tiles in clusters
      // sharing each H tile. 8 row tiles of 2 column tiles (a tail of 64) on 4 CTAs in
      // quads; launches of 2 slabs in pairs; blocks whose dB adds by reduce-adds in pairs;
      // quads asked for, chunks of 2 row tiles in pairs and of 1 alone.
      {1024, 5.0, 300, 0, 0, false, "one row block", 320, 0, 0, std::nullopt, 0, std::nullopt,
       std::nullopt, 4},
      {1024, 0.0, 257, 0, 0, false, "dA's last round in chains", 320, 256, 0, std::nullopt, 0,
       std::nullopt, std::nullopt, 2},
      {512, 0.0, 200, 32, 116, false, "rows blocked so that a block's stored values fit", 72,
       0, 0, std::nullopt, 0, std::nullopt, std::nullopt, 2},
      {296, 5.0, 200, 32, 0, true, "row blocks of 32 rows, 2 chunks of 256 columns", 72, 0, 0,
       std::nullopt, 0, std::nullopt, std::nullopt, 4},
  };
  Sm90Seen seen;
  for (const Sm90Case &c : cases)
    runSm90Case(c, seen);
  EXPECT_TRUE(seen.pairs) << "no forward ran in cluster pairs";
  EXPECT_TRUE(seen.quads) << "no forward ran in clusters of 4";
  EXPECT_TRUE(seen.tmaStore) << "no dB wrote through a TMA output map";
  EXPECT_TRUE(seen.loadedSums)
      << "no accumulating dB added its tile to old values loaded through the ring";
  EXPECT_TRUE(seen.reduceAdds) << "no accumulating dB added its tile by TMA reduce-adds";
  EXPECT_TRUE(seen.splitK) << "no dA split its k-blocks over a cluster";
  EXPECT_TRUE(seen.streamK) << "no dA ran stream-K groups or chains";
  EXPECT_TRUE(seen.inPlace) << "no Program scaled its stored values in place";
  EXPECT_TRUE(seen.dbPairs) << "no dB ran in cluster pairs";
  EXPECT_TRUE(seen.dbQuads) << "no dB ran in clusters of 4";
  EXPECT_TRUE(seen.dbClusterAdds) << "no accumulating dB ran in clusters";
}

/// [Note: dB multicast]: a dB launched in cluster pairs outside the host's contract (3 row
/// tiles of 2 column tiles on 4 CTAs, so that the second pair's CTAs take row tile 2 of
/// column tile 0 and row tile 0 of column tile 1) notices it and runs each CTA alone: the
/// gradients match fp64 and the run as planned (no clusters) bit for bit.
TEST(Emulation, Sm90DbClustersOutsideTheContractRunAlone) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  LceOptions o = smallLce();
  o.v = 384;
  o.d = 320;
  o.dwType = DType::F32;
  o.dhType = DType::BF16;
  const int64_t n = 300;
  Program q = plannedLce(o, DType::BF16, [&](plan::PlanOptions &po) {
    po.name = "sm90_db_pairs_off_contract";
    po.tokens = n;
    po.mainloop = plan::Mainloop::Wgmma;
    po.target.numSMs = 4;
    po.dbCluster = 2;
  });
  HostModule module(q);
  ASSERT_TRUE(module.sm90());
  LceRun r(q, o, n, 0, /*outputFree=*/true);
  int forced = 0;
  r.run(module, /*outputFree=*/true, [&](runtime::LaunchRecord &l) {
    if (!std::holds_alternative<plan::GemmDRhsKernel>(
            q.kernels[static_cast<size_t>(l.kernel)].body))
      return;
    EXPECT_EQ(l.dims.cluster, 1) << "3 row tiles do not pair up";
    if (l.dims.grid[0] % 2 == 0) {
      l.dims.cluster = 2;
      ++forced;
    }
  });
  ASSERT_GT(forced, 0) << "no dB launch of an even grid to force into pairs";
  EXPECT_FALSE(runtime::decodeErrorWord(r.errorWord(q)).any());
  const std::vector<char> forcedDw(r.dw.as<char>(), r.dw.as<char>() + o.v * o.d * 4);
  Reference ref = reference(o, n, r.h, r.w, r.y);
  expectBf16DzBound("grad_weight", o.dwType, r.dw.p, ref.dw);
  r.run(module, /*outputFree=*/true);
  EXPECT_EQ(std::memcmp(forcedDw.data(), r.dw.p, forcedDw.size()), 0)
      << "the forced pairs' dW differs from the planned launch's";
}

/// The Hopper path on the data the GPU suite uses to find numerical trouble: peaked rows
/// (each target logit raised by 30 over the rest, so the gradients are the target
/// columns' p_y - 1 of about minus the row loss: [Note: the target column's dZ]) and
/// saturating softcap logits (std(z) about 90 against a softcap of 30: tanh flat, the
/// stored values' factor near zero), each on the materialized backward's slabs and
/// ordinary blocks and on the recompute backward. The loss against fp64 with the GPU
/// suite's tolerance, dH and dW against the floor of fast precision's rounding of dZ
/// (expectAtTheDzFloor); each case first checks that its data is what it says. Then three
/// cases on the forward's column halves ([Note: sm90 column halves]), and peaked rows in
/// one row block of stored values at three vocabularies ([Note: the expected dZ floor]).
TEST(Emulation, Sm90PeakedAndSaturatingLogitsStayWithinTheBound) {
  SKIP_WITHOUT_HOST_TOOLCHAIN();
  const auto peaked = [](LceRun &r, const LceOptions &o) {
    peakRows(r, o, 30.0);
    const Reference ref = reference(o, r.n, r.h, r.w, r.y);
    ASSERT_LT(ref.loss, 1e-4) << "the rows are peaked";
  };
  const auto saturating = [](LceRun &r, const LceOptions &o) {
    // z's std is 2 on the default data (std(h) 1, std(w) 2 / sqrt(D)); times 45: 90.
    void *hp = r.hb.as<char>();
    for (size_t i = 0; i < r.h.size(); ++i)
      r.h[i] = storeAs(o.abType, hp, i, r.h[i] * 45.0);
    int64_t beyond = 0;
    for (int64_t i = 0; i < r.n; ++i)
      for (int64_t j = 0; j < o.v; ++j) {
        double z = 0;
        for (int64_t k = 0; k < o.d; ++k)
          z += r.h[static_cast<size_t>(i * o.d + k)] * r.w[static_cast<size_t>(j * o.d + k)];
        beyond += std::fabs(z) > 2 * o.softcap;
      }
    ASSERT_GT(beyond, r.n * o.v / 3) << "a third of the logits past twice the softcap";
  };
  Sm90Seen seen;
  runSm90Case({384, 0.0, 140, 32, 72, false, "its stored values in the gradient's memory"},
              seen, peaked, true);
  runSm90Case({384, 30.0, 200, 32, 116, false, "then 1 row block of 96 rows"}, seen, peaked,
              true);
  runSm90Case({296, 30.0, 77, 0, 0, false, "one block, one chunk"}, seen, peaked, true);
  runSm90Case({384, 30.0, 140, 32, 72, false, "its stored values in the gradient's memory"},
              seen, saturating, true);
  runSm90Case({384, 30.0, 200, 32, 116, false, "then 1 row block of 96 rows"}, seen,
              saturating, true);
  runSm90Case({296, 30.0, 200, 32, 0, true, "row blocks of 32 rows, 2 chunks of 256 columns"},
              seen, saturating, true);
  // [Note: sm90 column halves] (the H100's forward without softcap): peaked rows as slabs in
  // dW's memory and in two blocks, and saturating softcap logits (halves asked for).
  runSm90Case({512, 0.0, 140, 32, 96, false, "its stored values in the gradient's memory", 72,
               0, 0, std::nullopt, 0, true},
              seen, peaked, true);
  runSm90Case({512, 30.0, 200, 32, 155, false, "then 1 row block", 72, 0, 0, std::nullopt, 0,
               true},
              seen, peaked, true);
  runSm90Case({512, 30.0, 300, 0, 0, false, "one row block", 72, 0, 0, std::nullopt, 0, true},
              seen, saturating, true);
  // The materialized backward in one row block on peaked rows (no slabs: the stored values
  // row-scaled in the workspace), at three vocabularies, the forward on ping-pong and on
  // column halves: against one draw of the floor these were 1.24x-2.57x ([Note: the
  // expected dZ floor]).
  // Each also against the fp64 model of its design (rowScaledModel).
  runSm90Case({384, 0.0, 300, 0, 0, false, "one row block"}, seen, peaked, true, true);
  runSm90Case({512, 0.0, 300, 0, 0, false, "one row block"}, seen, peaked, true, true);
  runSm90Case({512, 0.0, 300, 0, 0, false, "one row block", 72, 0, 0, std::nullopt, 0, true},
              seen, peaked, true, true);
  runSm90Case({1024, 0.0, 300, 0, 0, false, "one row block", 256}, seen, peaked, true, true);
}
