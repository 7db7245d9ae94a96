//===- OpsTest.cpp - The public op and its JIT, without a GPU --------------===//
//
// Bad-input errors (each names the argument and its value), cache-key components, the
// dynamic-N compile counts through the real kernel cache (NVRTC runs on the CPU), a warm
// disk cache in a second process, NVRTC compiles of every generated kernel for sm_90a and
// sm_80, and the CPU reference path.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/SchedulePolicy.h"
#include "compiler/support/Knobs.h"
#include "compiler/reference/ProgramInterpreter.h"
#include "compiler/reference/RefTensor.h"
#include "lcejit/LinearCrossEntropy.h"
#include "ops/lib/LceJit.h"
#include "ops/lib/Reference.h"
#include "runtime/CudaDriver.h"
#include "runtime/Executor.h"
#include "runtime/Nvrtc.h"
#include "tests/support/ScopedEnv.h"

#include <regex>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

namespace lcejit {
namespace {

namespace fs = std::filesystem;

std::string g_selfPath;

LinearCrossEntropyOptions base() {
  LinearCrossEntropyOptions o;
  o.hidden = 64;
  o.vocab = 1000;
  o.dtype = DType::BF16;
  return o;
}

/// Runs `f`, expects Error(kind) whose message contains every string of `needles`.
template <typename F>
void expectError(F f, ErrorKind kind, std::vector<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an lcejit::Error";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string &n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message lacks '" << n << "': " << e.what();
  }
}

//===----------------------------------------------------------------------===//
// Options and arguments
//===----------------------------------------------------------------------===//

TEST(OpsOptions, BadOptionsNameTheOptionAndValue) {
  auto make = [](LinearCrossEntropyOptions o) { return [o] { LinearCrossEntropy op(o); }; };
  LinearCrossEntropyOptions o = base();
  o.hidden = 0;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.hidden", "0"});
  o = base();
  o.hidden = 100;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.hidden", "100", "multiple of 8"});
  o = base();
  o.vocab = -5;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.vocab", "-5"});
  o = base();
  o.softcap = 0.0;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.softcap", "0"});
  o = base();
  o.softcap = -3.0;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.softcap", "-3"});
  o = base();
  o.dtype = DType::I32;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.dtype", "i32"});
  o = base();
  o.targetDType = DType::F32;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.targetDType", "f32"});
  o = base();
  o.gradWeightDType = DType::F16;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.gradWeightDType", "f16"});
  o = base();
  o.workspaceBudgetBytes = -1;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.workspaceBudgetBytes", "-1"});
  o = base();
  o.device = -2;
  expectError(make(o), ErrorKind::InvalidArgument, {"options.device", "-2"});
}

TEST(OpsOptions, BadPrecisionIsNamed) {
  LinearCrossEntropyOptions o = base();
  o.precision = static_cast<Precision>(7);
  expectError([o] { LinearCrossEntropy op(o); }, ErrorKind::InvalidArgument,
              {"options.precision", "7"});
}

/// The workspace query, the schedule summary and inspect() plan without a GPU; the
/// budget bounds what a call uses, and bad arguments are named.
TEST(OpsWorkspace, QueryScheduleAndInspectWithoutAGpu) {
  LinearCrossEntropyOptions o = base();
  o.workspaceBudgetBytes = int64_t(1) << 20; // 1 MiB
  LinearCrossEntropy op(o);
  for (int64_t n : {0, 1, 100, 1000, 5000}) {
    int64_t bytes = op.workspaceBytes(n);
    std::string s = op.scheduleSummary(n);
    EXPECT_GT(bytes, 0) << s;
    EXPECT_NE(s.find("N = " + std::to_string(n)), std::string::npos) << s;
    if (s.find("OVER BUDGET") == std::string::npos) {
      EXPECT_LE(bytes, o.workspaceBudgetBytes) << s;
    }
  }
  EXPECT_NE(op.scheduleSummary(5000).find("row block"), std::string::npos);
  expectError([&] { op.workspaceBytes(-2); }, ErrorKind::InvalidArgument, {"N", "-2"});
  expectError([&] { op.scheduleSummary(-3); }, ErrorKind::InvalidArgument, {"N", "-3"});
  std::string plan = op.inspect(100, "plan");
  EXPECT_NE(plan.find("// run schedule: N = 100"), std::string::npos) << plan;
  EXPECT_NE(plan.find("\"kernels\""), std::string::npos);
  std::string cuda = op.inspect(100, "cuda");
  EXPECT_NE(cuda.find("extern \"C\" __global__"), std::string::npos);
  expectError([&] { op.inspect(100, "ptx"); }, ErrorKind::InvalidArgument, {"what", "ptx"});
  expectError([&] { op.inspect(-1, "plan"); }, ErrorKind::InvalidArgument, {"N", "-1"});
}

/// Standard-normal H [n, D] and W [V, D] for the fp64 Program tests, from `seed`.
void normalInputs(const LinearCrossEntropyOptions &o, int64_t n, uint64_t seed,
                  std::vector<double> &h, std::vector<double> &w) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  h.resize(static_cast<size_t>(n * o.hidden));
  w.resize(static_cast<size_t>(o.vocab * o.hidden));
  for (double &x : h)
    x = nd(rng);
  for (double &x : w)
    x = nd(rng);
}

/// forward(): the loss-only graph plans one GEMM (2·N·D·V), no gradient kernels and one
/// output, keys apart from the full Program, and its fp64 interpretation gives the same
/// loss as the full Program's.
TEST(OpsForward, LossOnlyProgramHasOneGemmAndTheSameLoss) {
  LinearCrossEntropyOptions o;
  o.hidden = 24;
  o.vocab = 257;
  o.softcap = 30.0;
  o.ignoreIndex = -100;
  ops::LceJit full(o), fwd(o, {}, /*forwardOnly=*/true);
  const int64_t n = 37;
  const plan::Program &pf = fwd.lookup(n, ops::LceJit::defaultTarget(), false).compiled->program;
  const plan::Program &pa = full.lookup(n, ops::LceJit::defaultTarget(), false).compiled->program;
  EXPECT_NE(fwd.cacheKey(n, ops::LceJit::defaultTarget()),
            full.cacheKey(n, ops::LceJit::defaultTarget()));
  ASSERT_EQ(pf.outputs.size(), 1u);
  EXPECT_EQ(pf.outputs[0].name, pa.outputs[0].name);
  int gemms = 0;
  for (const plan::Kernel &k : pf.kernels) {
    EXPECT_NE(k.kind(), plan::KernelKind::GemmDz) << k.name;
    EXPECT_NE(k.kind(), plan::KernelKind::GemmDLhs) << k.name;
    EXPECT_NE(k.kind(), plan::KernelKind::GemmDRhs) << k.name;
    gemms += k.kind() == plan::KernelKind::GemmReduce;
  }
  EXPECT_EQ(gemms, 1);
  EXPECT_FALSE(pf.hasChunkLoop());
  std::vector<double> h, w;
  normalInputs(o, n, 5, h, w);
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i)
    y[i] = i % 5 == 0 ? -100 : (i * 31) % o.vocab;
  ReferenceResult a = ops::runProgramReference(full, h, w, y);
  ReferenceResult f = ops::runProgramReference(fwd, h, w, y);
  EXPECT_NEAR(f.loss, a.loss, 1e-12 * std::abs(a.loss));
  EXPECT_TRUE(f.gradHidden.empty());
}

/// GradScale: the scaled-gradients Program has a 4th input, grad_scale (rank 0), keys apart
/// from the plain one, and its fp64 interpretation gives the same loss and gradients
/// multiplied by the scale.
TEST(OpsGradScale, GradientsScaleAndTheLossDoesNot) {
  LinearCrossEntropyOptions o;
  o.hidden = 24;
  o.vocab = 257;
  o.softcap = 30.0;
  o.ignoreIndex = -100;
  ops::LceJit plain(o), scaled(o, {}, /*forwardOnly=*/false, /*scaledGradients=*/true);
  const int64_t n = 41;
  const plan::Program &ps = scaled.lookup(n, ops::LceJit::defaultTarget(), false).compiled->program;
  ASSERT_EQ(ps.inputs.size(), 4u);
  EXPECT_EQ(ps.inputs[3].name, "grad_scale");
  EXPECT_TRUE(ps.inputs[3].shape.empty()) << "rank 0";
  EXPECT_NE(scaled.cacheKey(n, ops::LceJit::defaultTarget()),
            plain.cacheKey(n, ops::LceJit::defaultTarget()));
  std::vector<double> h, w;
  normalInputs(o, n, 9, h, w);
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i)
    y[i] = i % 6 == 0 ? -100 : (i * 17) % o.vocab;
  ReferenceResult a = ops::runProgramReference(plain, h, w, y);
  for (double scale : {0.37, -2.5, 0.0}) {
    ReferenceResult s = ops::runProgramReference(scaled, h, w, y, scale);
    EXPECT_NEAR(s.loss, a.loss, 1e-12 * std::abs(a.loss)) << "the loss is not scaled";
    ASSERT_EQ(s.gradHidden.size(), a.gradHidden.size());
    double err = 0, ref = 0;
    for (size_t i = 0; i < a.gradHidden.size(); ++i) {
      err = std::max(err, std::abs(s.gradHidden[i] - scale * a.gradHidden[i]));
      ref = std::max(ref, std::abs(a.gradHidden[i]));
    }
    for (size_t i = 0; i < a.gradWeight.size(); ++i) {
      err = std::max(err, std::abs(s.gradWeight[i] - scale * a.gradWeight[i]));
      ref = std::max(ref, std::abs(a.gradWeight[i]));
    }
    EXPECT_LE(err, 1e-12 * ref) << "scale " << scale;
  }
}

/// The executor describes the operands of every wgmma GEMM launch as plain data (the
/// table in runtime/Executor.h), checked here without a GPU on a planned LCE Program with
/// several chunks: pointers (chunk offsets of W included), majorness, sizes, pitches and
/// the box height (BM for A, BN for B), and dW's f32 output map of the TMA store epilogue
/// ([Note: sm90 output map]): the chunk's rows of dW, as the third map.
TEST(OpsExecutor, WgmmaOperandsFollowTheKernelTemplates) {
  LinearCrossEntropyOptions o;
  o.hidden = 256;
  o.vocab = 32768;
  o.workspaceBudgetBytes = int64_t(8) << 20; // chunks of the vocabulary
  ops::LceJit jit(o);
  const int64_t n = 3000, D = o.hidden;
  const plan::Program &p = jit.lookup(n, ops::LceJit::defaultTarget(), false).compiled->program;
  runtime::ProgramBuffers b;
  const CUdeviceptr H = 0x10000000, W = 0x20000000, Y = 0x30000000, L = 0x40000000,
                    DH = 0x50000000, DW = 0x60000000, WS = 0x70000000;
  b.inputs = {H, W, Y};
  b.outputs = {L, DH, DW};
  b.workspace = WS;
  b.workspaceBytes = runtime::workspaceBytes(p, n);
  runtime::ExecutionPlan ep = runtime::planExecution(p, b, n);
  ASSERT_GT(ep.schedule.chunks, 1) << ep.schedule.describe();
  int seen[4] = {0, 0, 0, 0};
  for (const runtime::LaunchRecord &r : ep.launches) {
    const plan::Kernel &k = p.kernels[static_cast<size_t>(r.kernel)];
    if (!plan::isGemmKind(k.kind())) {
      EXPECT_TRUE(r.maps.empty()) << k.name;
      continue;
    }
    ASSERT_EQ(plan::gemmMath(k), plan::MathMode::WgmmaBF16) << k.name;
    const bool tmaStore = plan::gemmTile(k).tmaStore;
    EXPECT_EQ(tmaStore, k.kind() == plan::KernelKind::GemmDRhs) << k.name;
    ASSERT_EQ(r.maps.size(), tmaStore ? 3u : 2u) << k.name;
    ASSERT_GE(r.args.size(), 2u);
    EXPECT_EQ(r.args[0].type, runtime::KernelArg::Type::TensorMap);
    EXPECT_EQ(r.args[0].value.i64, 0);
    EXPECT_EQ(r.args[1].type, runtime::KernelArg::Type::TensorMap);
    EXPECT_EQ(r.args[1].value.i64, 1);
    const runtime::Sm90Operand &a = r.maps[0], &bop = r.maps[1];
    const int32_t bn = plan::gemmTile(k).bn;
    EXPECT_EQ(a.boxRows, 128) << k.name;
    // The forward's B arrives in halves, one per CTA of a cluster pair ([Note: sm90
    // multicast]).
    EXPECT_EQ(bop.boxRows, k.kind() == plan::KernelKind::GemmReduce ? bn / 2 : bn) << k.name;

    // The launch's chunk: its begin and width follow from the dz pointer's chunk argument.
    int64_t cc = -1, begin = -1, rows = -1;
    const std::vector<plan::Param> params = plan::kernelParams(k);
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].kind == plan::Param::Kind::ChunkCols)
        cc = r.args[i].value.i64;
      if (params[i].kind == plan::Param::Kind::ChunkBegin)
        begin = r.args[i].value.i64;
      if (params[i].kind == plan::Param::Kind::N)
        rows = r.args[i].value.i64; // the row block's rows
    }
    // Pairs of row tiles launch as clusters of 2; a dA whose tiles are few splits K over
    // clusters ([Note: sm90 split-K]: plan::chooseSplitK, 132 SMs).
    const int64_t lhsSplit =
        k.kind() == plan::KernelKind::GemmDLhs
            ? plan::chooseSplitK((rows + 127) / 128 * ((D + bn - 1) / bn), (cc + 63) / 64, p.target.numSMs,
                                 plan::gemmTile(k).splitK)
            : 1;
    EXPECT_EQ(r.dims.cluster,
              k.kind() == plan::KernelKind::GemmReduce && (rows + 127) / 128 % 2 == 0 ? 2
                                                                                      : lhsSplit)
        << k.name << ", " << rows << " rows";
    if (k.kind() == plan::KernelKind::GemmDLhs) {
      EXPECT_EQ(r.dims.grid[0], lhsSplit > 1 ? (rows + 127) / 128 * ((D + bn - 1) / bn) * lhsSplit
                                             : std::min<int64_t>((rows + 127) / 128 *
                                                                     ((D + bn - 1) / bn),
                                                                 p.target.numSMs))
          << k.name;
    }
    // Row-indexed inputs start at the block's first row.
    const CUdeviceptr Hb =
        H + static_cast<CUdeviceptr>(r.rowBlock * ep.schedule.rowsPerBlock * D * 2);
    SCOPED_TRACE(fmt::format("{} row block {} ({} rows), chunk {} (begin {}, {} columns)",
                             k.name, r.rowBlock, rows, r.chunk, begin, cc));
    switch (k.kind()) {
    case plan::KernelKind::GemmReduce:
      ++seen[0];
      EXPECT_EQ(a.data, Hb);
      EXPECT_TRUE(a.kMajor && bop.kMajor);
      EXPECT_EQ(a.rows, rows);
      EXPECT_EQ(a.k, D);
      EXPECT_EQ(a.ld, D);
      EXPECT_EQ(bop.data, W);
      EXPECT_EQ(bop.rows, o.vocab);
      EXPECT_EQ(bop.ld, D);
      break;
    case plan::KernelKind::GemmDz:
      ++seen[1];
      EXPECT_EQ(a.data, Hb);
      EXPECT_EQ(a.rows, rows);
      EXPECT_TRUE(a.kMajor && bop.kMajor);
      EXPECT_EQ(bop.data, W + static_cast<CUdeviceptr>(begin * D * 2));
      EXPECT_EQ(bop.rows, cc);
      EXPECT_EQ(bop.k, D);
      break;
    case plan::KernelKind::GemmDLhs:
      ++seen[2];
      EXPECT_TRUE(a.kMajor);
      EXPECT_FALSE(bop.kMajor);
      EXPECT_GE(a.data, WS);
      EXPECT_EQ(a.rows, rows);
      EXPECT_EQ(a.k, cc);
      EXPECT_EQ(a.ld, cc);
      EXPECT_EQ(bop.data, W + static_cast<CUdeviceptr>(begin * D * 2));
      EXPECT_EQ(bop.rows, D);
      EXPECT_EQ(bop.k, cc);
      EXPECT_EQ(bop.ld, D);
      break;
    case plan::KernelKind::GemmDRhs:
      ++seen[3];
      EXPECT_FALSE(a.kMajor);
      EXPECT_FALSE(bop.kMajor);
      EXPECT_GE(a.data, WS);
      EXPECT_EQ(a.rows, cc);
      EXPECT_EQ(a.k, rows);
      EXPECT_EQ(a.ld, cc);
      EXPECT_EQ(bop.data, Hb);
      EXPECT_EQ(bop.rows, D);
      EXPECT_EQ(bop.k, rows);
      EXPECT_EQ(bop.ld, D);
      {
        // The third map is argument 2 and describes dW's rows of the chunk, in f32.
        ASSERT_GE(r.args.size(), 3u);
        EXPECT_EQ(r.args[2].type, runtime::KernelArg::Type::TensorMap);
        EXPECT_EQ(r.args[2].value.i64, 2);
        const runtime::Sm90Operand &out = r.maps[2];
        EXPECT_TRUE(out.f32Out);
        EXPECT_EQ(out.data, DW + static_cast<CUdeviceptr>(begin * D * 4));
        EXPECT_EQ(out.rows, cc);
        EXPECT_EQ(out.k, D);
        EXPECT_EQ(out.ld, D);
      }
      break;
    default:
      break;
    }
  }
  EXPECT_EQ(seen[0], ep.schedule.rowBlocks);
  EXPECT_EQ(seen[1], ep.schedule.chunks * ep.schedule.rowBlocks);
  EXPECT_EQ(seen[2], seen[1]);
  EXPECT_EQ(seen[3], seen[1]);
}

/// [NaN and inf semantics] (issue 8), on the planned Program in fp64 (the GPU kernels
/// evaluate the same ScalarFuncs with NaN-propagating max; their device test is still to
/// run): as in PyTorch, a NaN anywhere in a row of H gives a NaN loss, NaN in that row of
/// dH and in every element of dW (each sums over all rows); the other rows of dH stay
/// finite. A NaN in an ignored row stays out of the loss, but, as in PyTorch (whose
/// log_softmax backward computes dy − softmax(x)·Σdy with a zero dy row), its dZ row is
/// 0 · NaN = NaN: that row of dH and all of dW are NaN, the other rows of dH finite.
TEST(OpsNaN, ANaNRowPoisonsTheLossItsDHRowAndDW) {
  LinearCrossEntropyOptions o;
  o.hidden = 16;
  o.vocab = 64;
  o.ignoreIndex = -100;
  ops::LceJit jit(o);
  const int64_t n = 9;
  std::vector<double> h, w;
  normalInputs(o, n, 3, h, w);
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i)
    y[i] = (i * 7) % o.vocab;
  h[4 * o.hidden + 3] = std::nan("");
  ReferenceResult r = ops::runProgramReference(jit, h, w, y);
  EXPECT_TRUE(std::isnan(r.loss));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < o.hidden; ++d)
      EXPECT_EQ(std::isnan(r.gradHidden[i * o.hidden + d]), i == 4) << "row " << i;
  for (double g : r.gradWeight)
    ASSERT_TRUE(std::isnan(g));
  // The same row ignored: a finite loss; NaN stays in row 4 of dH and in dW.
  y[4] = -100;
  r = ops::runProgramReference(jit, h, w, y);
  EXPECT_TRUE(std::isfinite(r.loss));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < o.hidden; ++d)
      EXPECT_EQ(std::isnan(r.gradHidden[i * o.hidden + d]), i == 4) << "ignored, row " << i;
  EXPECT_TRUE(std::isnan(r.gradWeight[0]));
  y[4] = (4 * 7) % o.vocab;
  // +inf in a logit's input: still a NaN row (inf - inf in the logsumexp), same pattern.
  h[4 * o.hidden + 3] = std::numeric_limits<double>::infinity();
  r = ops::runProgramReference(jit, h, w, y);
  EXPECT_TRUE(std::isnan(r.loss) || std::isinf(r.loss));
  EXPECT_FALSE(std::isfinite(r.gradWeight[0]));
}

TEST(OpsWorkspace, SetWorkspaceChecksItsArguments) {
  LinearCrossEntropy op(base());
  expectError([&] { op.setWorkspace(nullptr, 5); }, ErrorKind::InvalidArgument,
              {"setWorkspace", "null", "5"});
  expectError([&] { op.setWorkspace(reinterpret_cast<void *>(0x1000), 0); },
              ErrorKind::InvalidArgument, {"setWorkspace", "bytes = 0"});
  expectError([&] { op.setWorkspace(reinterpret_cast<void *>(0x1010), 4096); },
              ErrorKind::InvalidArgument, {"setWorkspace", "256-byte aligned"});
  EXPECT_NO_THROW(op.setWorkspace(reinterpret_cast<void *>(0x10000), 4096));
  EXPECT_NO_THROW(op.setWorkspace(nullptr, 0));
}

/// [Note: workspace growth]: the op's own workspace is what the first call needs, then at
/// least doubles (up to the budget) when a later call needs more.
TEST(OpsWorkspace, GrowthDoublesUpToTheBudgetAndNeverBelowTheNeed) {
  const int64_t MiB = int64_t(1) << 20, budget = 512 * MiB;
  // First allocation: exactly the need (a small call does not take the whole budget).
  EXPECT_EQ(ops::grownWorkspaceBytes(0, 3 * MiB, budget), 3 * MiB);
  EXPECT_EQ(ops::grownWorkspaceBytes(0, 0, budget), 256);
  // Growth doubles what is held...
  EXPECT_EQ(ops::grownWorkspaceBytes(3 * MiB, 3 * MiB + 1, budget), 6 * MiB);
  // ...or takes the need when it is larger than double...
  EXPECT_EQ(ops::grownWorkspaceBytes(3 * MiB, 100 * MiB, budget), 100 * MiB);
  // ...and stops at the budget: the 20-N series (510.8 MiB, then 511.0) allocates twice.
  const int64_t first = 535602688, second = 535772416, third = 535908864;
  const int64_t grown = ops::grownWorkspaceBytes(first, second, budget);
  EXPECT_EQ(grown, budget);
  EXPECT_GE(grown, third) << "a later, larger N of the series fits without a third allocation";
  // A budget below the need (too small for any schedule) never shrinks the need.
  EXPECT_EQ(ops::grownWorkspaceBytes(64 * MiB, 700 * MiB, budget), 700 * MiB);
  EXPECT_EQ(ops::grownWorkspaceBytes(int64_t(1) << 62, (int64_t(1) << 62) + 1, budget),
            (int64_t(1) << 62) + 1);
  expectError([&] { ops::grownWorkspaceBytes(-1, 5, budget); }, ErrorKind::InvalidArgument,
              {"held -1", "needed 5"});
}

TEST(OpsDevice, DeviceAvailableSaysWhyNot) {
  std::string why;
  bool ok = LinearCrossEntropy::deviceAvailable(&why);
  if (ok)
    GTEST_SKIP() << "a GPU is present: the no-GPU answer cannot be checked here";
  EXPECT_FALSE(why.empty());
  EXPECT_FALSE(LinearCrossEntropy::deviceAvailable(nullptr));
}

/// Fake device pointers: validation happens before any device access, so these are
/// never dereferenced (and the tests need no GPU).
void *fakePtr(uintptr_t v) { return reinterpret_cast<void *>(v); }

struct Args {
  TensorRef h, w, y;
  MutableTensorRef loss, dh, dw;
};

Args goodArgs(const LinearCrossEntropyOptions &o, int64_t n) {
  Args a;
  a.h = {fakePtr(0x10000), o.dtype, {n, o.hidden}, {}};
  a.w = {fakePtr(0x20000), o.dtype, {o.vocab, o.hidden}, {}};
  a.y = {fakePtr(0x30000), o.targetDType, {n}, {}};
  a.loss = {fakePtr(0x40000), DType::F32, {}, {}};
  a.dh = {fakePtr(0x50000), o.dtype, {n, o.hidden}, {}};
  a.dw = {fakePtr(0x60000), o.gradWeightDType, {o.vocab, o.hidden}, {}};
  return a;
}

TEST(OpsArguments, BadTensorsAreRejectedBeforeAnyDeviceWork) {
  LinearCrossEntropyOptions o = base();
  LinearCrossEntropy op(o);
  auto call = [&](Args a) { return [&op, a] { op.enqueue(a.h, a.w, a.y, a.loss, a.dh, a.dw); }; };
  Args a = goodArgs(o, 16);
  a.h.shape = {-3, 64};
  expectError(call(a), ErrorKind::InvalidArgument, {"hidden.shape[0]", "-3"});
  a = goodArgs(o, 16);
  a.h.shape = {16, 32};
  expectError(call(a), ErrorKind::InvalidArgument, {"hidden.shape", "[16, 32]", "[16, 64]"});
  a = goodArgs(o, 16);
  a.h.dtype = DType::F32;
  expectError(call(a), ErrorKind::InvalidArgument, {"hidden.dtype", "f32", "bf16"});
  a = goodArgs(o, 16);
  a.w.shape = {999, 64};
  expectError(call(a), ErrorKind::InvalidArgument, {"weight.shape", "[999, 64]", "[1000, 64]"});
  a = goodArgs(o, 16);
  a.y.shape = {15};
  expectError(call(a), ErrorKind::InvalidArgument, {"targets.shape", "[15]", "[16]"});
  a = goodArgs(o, 16);
  a.y.dtype = DType::I32;
  expectError(call(a), ErrorKind::InvalidArgument, {"targets.dtype", "i32", "i64"});
  a = goodArgs(o, 16);
  a.dh.dtype = DType::F32;
  expectError(call(a), ErrorKind::InvalidArgument, {"gradHidden.dtype", "f32"});
  a = goodArgs(o, 16);
  a.dw.shape = {1000, 63};
  expectError(call(a), ErrorKind::InvalidArgument, {"gradWeight.shape", "[1000, 63]"});
  a = goodArgs(o, 16);
  a.h.data = fakePtr(0x10008);
  expectError(call(a), ErrorKind::InvalidArgument, {"hidden.data", "0x10008", "16-byte aligned"});
  a = goodArgs(o, 16);
  a.y.data = fakePtr(0x30004);
  expectError(call(a), ErrorKind::InvalidArgument, {"targets.data", "0x30004", "8-byte aligned"});
  a = goodArgs(o, 16);
  a.w.data = nullptr;
  expectError(call(a), ErrorKind::InvalidArgument, {"weight.data is null"});
  a = goodArgs(o, 16);
  a.h.strides = {1, 16};
  expectError(call(a), ErrorKind::InvalidArgument, {"hidden.strides", "[1, 16]", "contiguous"});
  a = goodArgs(o, 16);
  a.loss.shape = {2};
  expectError(call(a), ErrorKind::InvalidArgument, {"loss.shape", "[2]"});
  // A device gradient scale must be 4-byte aligned (an f32).
  a = goodArgs(o, 16);
  expectError(
      [&op, a] {
        op.enqueue(a.h, a.w, a.y, a.loss, a.dh, a.dw, nullptr, GradScale{1.0f, fakePtr(0x50002)});
      },
      ErrorKind::InvalidArgument, {"gradScale.device", "0x50002", "4-byte aligned"});
}

TEST(OpsArguments, OldGpusAreRejectedByName) {
  runtime::DeviceInfo turing;
  turing.name = "Tesla T4";
  turing.smMajor = 7;
  turing.smMinor = 5;
  turing.numSMs = 40;
  expectError([&] { ops::LceJit::targetForDevice(turing); }, ErrorKind::Unsupported,
              {"Tesla T4", "compute capability 7.5", "8.0 or newer"});
  runtime::DeviceInfo hopper;
  hopper.name = "NVIDIA H200";
  hopper.smMajor = 9;
  hopper.smMinor = 0;
  hopper.numSMs = 132;
  hopper.maxSharedPerBlockOptin = 232448;
  plan::Target t = ops::LceJit::targetForDevice(hopper);
  EXPECT_EQ(t.archName(), "sm_90a");
  EXPECT_EQ(t.numSMs, 132);
}

TEST(OpsArguments, WithoutAGpuTheOpSaysSoClearly) {
  std::string why;
  if (runtime::cudaAvailable(&why))
    GTEST_SKIP() << "a GPU is present: this test checks the no-GPU error";
  LinearCrossEntropyOptions o = base();
  LinearCrossEntropy op(o);
  Args a = goodArgs(o, 16);
  expectError([&] { op.enqueue(a.h, a.w, a.y, a.loss, a.dh, a.dw); }, ErrorKind::NoDevice,
              {"libcuda.so.1"});
}

//===----------------------------------------------------------------------===//
// Cache keys
//===----------------------------------------------------------------------===//

TEST(OpsCacheKey, EveryComponentChangesTheKeyAndNOnlyThroughItsBucket) {
  plan::Target t;
  auto key = [&](LinearCrossEntropyOptions o, int64_t n, plan::Target tt) {
    return ops::LceJit(o).cacheKey(n, tt);
  };
  LinearCrossEntropyOptions o = base();
  std::string k0 = key(o, 5000, t);
  EXPECT_EQ(k0, key(o, 5001, t)) << "same bucket";
  EXPECT_EQ(k0, key(o, 16384, t)) << "same bucket (upper bound)";
  EXPECT_NE(k0, key(o, 4096, t)) << "bucket";
  EXPECT_NE(k0, key(o, 16385, t)) << "bucket";
  std::set<std::string> keys = {k0};
  auto distinct = [&](LinearCrossEntropyOptions v, plan::Target tt, const char *what) {
    EXPECT_TRUE(keys.insert(key(v, 5000, tt)).second) << what << " does not change the key";
  };
  LinearCrossEntropyOptions v = base();
  v.hidden = 72;
  distinct(v, t, "D");
  v = base();
  v.vocab = 1001;
  distinct(v, t, "V");
  v = base();
  v.dtype = DType::F32;
  distinct(v, t, "dtype");
  v = base();
  v.targetDType = DType::I32;
  distinct(v, t, "target dtype");
  v = base();
  v.gradWeightDType = DType::BF16;
  distinct(v, t, "dW dtype");
  v = base();
  v.softcap = 30.0;
  distinct(v, t, "softcap");
  v.softcap = 50.0;
  distinct(v, t, "softcap value");
  v = base();
  v.ignoreIndex = -1;
  distinct(v, t, "ignore_index");
  v.ignoreIndex.reset();
  distinct(v, t, "no ignore_index");
  v = base();
  v.reduction = Reduction::Sum;
  distinct(v, t, "reduction");
  v = base();
  v.workspaceBudgetBytes = 64 << 20;
  distinct(v, t, "workspace budget");
  plan::Target ampere;
  ampere.smVersion = 80;
  distinct(base(), ampere, "arch");
  // Every other field of the target changes the plan (the SM count sets the splits, the
  // shared memory limit the tiles), so each must change the key.
  plan::Target fewerSMs;
  fewerSMs.numSMs = 114; // an H100 PCIe instead of the 132 of an H100/H200 SXM
  distinct(base(), fewerSMs, "SM count");
  plan::Target lessSmem;
  lessSmem.maxSharedPerBlock = 101376;
  distinct(base(), lessSmem, "shared memory per block");
}

/// [Note: module parts]: a part's text names no bucket, so buckets that plan the same
/// kernels (a small head plans N = 300, 1025 and 5000 alike) compile them once: the first
/// bucket's lookup compiles (an empty cache directory), the others find every part in
/// memory, though each is a Program of its own (planned, keyed by its bucket). The whole
/// module of a dump still names its bucket.
TEST(OpsCacheKey, BucketsThatPlanTheSameKernelsCompileThemOnce) {
  char dir[] = "/tmp/lcejit-ops-cache-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  {
    lcejit::testing::ScopedEnv env{{"LCEJIT_CACHE_DIR", dir}};
    LinearCrossEntropyOptions o;
    o.hidden = 64;
    o.vocab = 1000;
    ops::LceJit jit(o);
    const plan::Target t = ops::LceJit::defaultTarget();
    ops::ProgramLookup first = jit.lookup(300, t, true);
    EXPECT_TRUE(first.planned);
    EXPECT_EQ(first.binaryOrigin, runtime::CacheOrigin::Compiled);
    for (int64_t n : {1025, 5000}) {
      SCOPED_TRACE(fmt::format("N = {}", n));
      ops::ProgramLookup next = jit.lookup(n, t, true);
      EXPECT_TRUE(next.planned) << "a bucket of its own";
      EXPECT_NE(next.compiled->program.bucket, first.compiled->program.bucket);
      EXPECT_NE(next.compiled->source(), first.compiled->source()) << "the dump names the bucket";
      ASSERT_EQ(next.compiled->parts.size(), first.compiled->parts.size());
      for (size_t i = 0; i < next.compiled->parts.size(); ++i)
        EXPECT_EQ(next.compiled->parts[i].source, first.compiled->parts[i].source) << i;
      EXPECT_EQ(next.binaryOrigin, runtime::CacheOrigin::Memory) << "nothing compiled";
    }
  }
  std::filesystem::remove_all(dir);
}

/// [Note: prepare log] LCEJIT_LOG=prepare: prepare(N) says what its lookup did and how long
/// it took (here, without a GPU, the lookup is all it does): planned and compiled in an
/// empty cache, then for another N of the bucket cached with its binaries from memory;
/// without the knob, nothing.
TEST(OpsCacheKey, PrepareLogSaysWhatTheLookupDid) {
  char dir[] = "/tmp/lcejit-ops-prepare-log-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  {
    lcejit::testing::ScopedEnv env{{"LCEJIT_CACHE_DIR", dir}, {"LCEJIT_LOG", "prepare"}};
    LinearCrossEntropyOptions o;
    o.hidden = 64;
    o.vocab = 1000;
    LinearCrossEntropy op(o);
    ::testing::internal::CaptureStderr();
    op.prepare(300);
    op.prepare(301);
    const std::string log = ::testing::internal::GetCapturedStderr();
    std::regex first(R"(lcejit: prepare N=300: Program '\S+' of bucket \[257, 1024\] looked up )"
                     R"(in [0-9]+\.[0-9]{2} ms \(planned, binaries from compiled\)\n)");
    std::regex second(R"(lcejit: prepare N=301: Program '\S+' of bucket \[257, 1024\] looked up )"
                      R"(in [0-9]+\.[0-9]{2} ms \(cached, binaries from memory\)\n)");
    EXPECT_TRUE(std::regex_search(log, first)) << log;
    EXPECT_TRUE(std::regex_search(log, second)) << log;
    env.set("LCEJIT_LOG", std::nullopt);
    ::testing::internal::CaptureStderr();
    op.prepare(302);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "the knob is off";
  }
  std::filesystem::remove_all(dir);
}

TEST(OpsCacheKey, SMCountChangesThePlanItKeys) {
  // Why the SM count is in the key: the planner sizes column splits by it (the mma.sync
  // schedule of sm_80 fills every SM twice). A wide vocabulary and a small N leave room.
  LinearCrossEntropyOptions o = base();
  o.vocab = 32000;
  ops::LceJit jit(o);
  plan::Target big, small;
  big.smVersion = small.smVersion = 80;
  small.numSMs = 8;
  plan::Program a = jit.lookup(100, big, false).compiled->program;
  plan::Program b = jit.lookup(100, small, false).compiled->program;
  EXPECT_NE(jit.cacheKey(100, big), jit.cacheKey(100, small));
  EXPECT_EQ(a.target.numSMs, 132);
  EXPECT_EQ(b.target.numSMs, 8) << "the cached Program was planned for the other GPU";
  EXPECT_GT(a.splits, b.splits) << "fewer SMs, fewer column splits";
}

//===----------------------------------------------------------------------===//
// Dynamic N: compile counts through the real cache
//===----------------------------------------------------------------------===//

fs::path freshCacheDir(const char *tag) {
  fs::path p = fs::temp_directory_path() / fmt::format("lcejit-ops-test-{}-{}", tag, ::getpid());
  fs::remove_all(p);
  return p;
}

/// Runs this test binary again with a filter and extra environment; returns its exit code.
int runChild(const std::string &filter, const std::vector<std::pair<std::string, std::string>> &env) {
  pid_t pid = ::fork();
  if (pid == 0) {
    for (auto &[k, v] : env)
      ::setenv(k.c_str(), v.c_str(), 1);
    std::string f = "--gtest_filter=" + filter;
    ::execl(g_selfPath.c_str(), g_selfPath.c_str(), f.c_str(), "--gtest_also_run_disabled_tests",
            static_cast<char *>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

std::vector<int64_t> randomNs() {
  std::mt19937_64 rng(2026);
  std::uniform_int_distribution<int64_t> d(4096, 33768);
  std::vector<int64_t> ns;
  for (int i = 0; i < 20; ++i)
    ns.push_back(d(rng));
  return ns;
}

LinearCrossEntropyOptions llama() {
  LinearCrossEntropyOptions o;
  o.hidden = 4096;
  o.vocab = 128256;
  o.dtype = DType::BF16;
  return o;
}

// [Note: child processes] The kernel cache reads LCEJIT_CACHE_DIR once per process, so
// each scenario runs in a fresh child process of this binary with its own environment.
TEST(OpsDynamicN, TwentyRandomNCompileAtMostOncePerBucketAndAWarmProcessCompilesNothing) {
  fs::path dir = freshCacheDir("dyn");
  // 1. Cold cache: 1 <= compiles <= distinct buckets; preparing again compiles nothing.
  EXPECT_EQ(runChild("OpsDynamicN.DISABLED_Child", {{"LCEJIT_CACHE_DIR", dir.string()},
                                           {"LCEJIT_TEST_CHILD", "cold"}}),
            0);
  // 2. A second process with the warm disk cache compiles nothing (it would throw).
  EXPECT_EQ(runChild("OpsDynamicN.DISABLED_Child", {{"LCEJIT_CACHE_DIR", dir.string()},
                                           {"LCEJIT_ASSERT_NO_COMPILE", "1"},
                                           {"LCEJIT_TEST_CHILD", "warm"}}),
            0);
  // 3. The same child against an empty cache must fail: the check can fail.
  fs::path empty = freshCacheDir("empty");
  EXPECT_NE(runChild("OpsDynamicN.DISABLED_Child", {{"LCEJIT_CACHE_DIR", empty.string()},
                                           {"LCEJIT_ASSERT_NO_COMPILE", "1"},
                                           {"LCEJIT_TEST_CHILD", "warm"}}),
            0);
  fs::remove_all(dir);
  fs::remove_all(empty);
}

// Disabled: runs only as a child process of the test above (see [Note: child processes]).
TEST(OpsDynamicN, DISABLED_Child) {
  const char *mode = std::getenv("LCEJIT_TEST_CHILD");
  ASSERT_NE(mode, nullptr) << "LCEJIT_TEST_CHILD must be cold or warm";
  LinearCrossEntropy op(llama());
  std::set<int64_t> buckets;
  for (int64_t n : randomNs()) {
    op.prepare(n);
    buckets.insert(LinearCrossEntropy::bucketOf(n));
  }
  int64_t compiles = LinearCrossEntropy::compileCount();
  std::cout << fmt::format("child ({}): {} compiles for {} buckets\n", mode, compiles, buckets.size());
  if (std::string(mode) == "cold") {
    EXPECT_GE(compiles, 1);
    EXPECT_LE(compiles, static_cast<int64_t>(buckets.size()));
    EXPECT_GE(buckets.size(), 2u) << "the series should cross a bucket boundary";
  } else {
    EXPECT_EQ(compiles, 0);
  }
  for (int64_t n : randomNs())
    EXPECT_FALSE(op.prepare(n)) << "N = " << n << " compiled again";
  EXPECT_EQ(LinearCrossEntropy::compileCount(), compiles);
}

//===----------------------------------------------------------------------===//
// Every generated kernel compiles with NVRTC
//===----------------------------------------------------------------------===//

struct CompileCase {
  const char *name;
  LinearCrossEntropyOptions options;
  int64_t n;
};

void PrintTo(const CompileCase &c, std::ostream *os) { *os << c.name; }

class OpsNvrtc : public ::testing::TestWithParam<CompileCase> {};

/// The PTX of one entry: from its `.entry` line to the next `.entry` (or the end).
std::string entryBody(const std::string &ptx, const std::string &name) {
  const size_t at = ptx.find(".entry " + name + "(");
  if (at == std::string::npos)
    return {};
  const size_t next = ptx.find(".entry ", at + 1);
  return ptx.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

TEST_P(OpsNvrtc, EveryGeneratedKernelCompilesForSm90aAndSm80) {
  const CompileCase &c = GetParam();
  // The materialized backward is the default where it can be derived (V a multiple of
  // 128 here); a case named "recompute" asks for the vocab-chunked recompute.
  lcejit::testing::ScopedEnv knob;
  knob.set("LCEJIT_BACKWARD", std::string(c.name).find("recompute") != std::string::npos
                                  ? "recompute"
                                  : "materialized");
  // A case named "l2hints" gives the wgmma forward's loads L2 hints ([Note: sm90 L2 hints]).
  const bool l2hints = std::string(c.name).find("l2hints") != std::string::npos;
  knob.set("LCEJIT_FWD_L2", l2hints ? std::optional<std::string>("last,first") : std::nullopt);
  ops::LceJit jit(c.options);
  for (int sm : {90, 80}) {
    plan::Target t;
    t.smVersion = sm;
    ops::ProgramLookup l = jit.lookup(c.n, t, /*compile=*/false);
    runtime::NvrtcRequest req;
    req.source = l.compiled->source();
    req.arch = t.archName();
    req.label = c.name;
    runtime::NvrtcOutput out = runtime::compileCuda(req);
    ASSERT_GT(out.cubin.size(), 1000u);
    EXPECT_EQ(out.cubin[0], 0x7f);
    EXPECT_EQ(out.cubin[1], 'E');
    EXPECT_NE(out.ptx.find(".target " + t.archName()), std::string::npos);
    // ptxas must not have serialized the wgmma pipeline (C7510-C7518) or dropped
    // setmaxnreg (C7508): both cost the Hopper path its overlap silently.
    for (const char *code : {"C7508", "C7510", "C7511", "C7515", "C7517", "C7518"})
      EXPECT_EQ(out.log.find(code), std::string::npos) << code << " on " << t.archName()
                                                        << ":\n" << out.log;
    for (const plan::Kernel &k : l.compiled->program.kernels) {
      EXPECT_NE(out.ptx.find(".entry " + k.name), std::string::npos) << k.name;
      // [Note: sm90 multicast]: a forward planned as cluster pairs carries the multicast
      // copy, the peer's barrier arrive and the cluster barriers.
      if (sm == 90 && plan::isGemmKind(k.kind()) &&
          plan::gemmMath(k) == plan::MathMode::WgmmaBF16 && plan::gemmTile(k).clusterM == 2) {
        const std::string body = entryBody(out.ptx, k.name);
        for (const char *want : {".multicast::cluster", "mapa.shared::cluster",
                                 "mbarrier.arrive.shared::cluster", "barrier.cluster.arrive",
                                 "%cluster_nctarank"})
          EXPECT_NE(body.find(want), std::string::npos) << k.name << " lacks " << want;
      }
      if (sm == 90 && std::holds_alternative<plan::GemmReduceKernel>(k.body) &&
          plan::gemmMath(k) == plan::MathMode::WgmmaBF16) {
        const std::string body = entryBody(out.ptx, k.name);
        ASSERT_FALSE(body.empty()) << k.name;
        // [Note: sm90 L2 hints]: the forward's loads carry the policies only when asked.
        for (const char *want : {"createpolicy.fractional.L2::evict_last",
                                 "createpolicy.fractional.L2::evict_first", ".L2::cache_hint"})
          EXPECT_EQ(body.find(want) != std::string::npos, l2hints)
              << k.name << (l2hints ? " lacks " : " has ") << want;
        // [Note: stored values in pairs of lanes]: a materialized forward stores its values
        // 8 bytes a lane (evict-first), never 4.
        if (std::get<plan::GemmReduceKernel>(k.body).stored) {
          EXPECT_NE(body.find("st.global.cs.v2.b32"), std::string::npos) << k.name;
          EXPECT_EQ(body.find("st.global.cs.b32"), std::string::npos) << k.name;
        }
      }
      bool found = false;
      for (const runtime::PtxasKernelInfo &info : out.kernels)
        if (info.kernel == k.name) {
          found = true;
          EXPECT_GT(info.registers, 0) << k.name;
          // No kernel spills. The materialized forward (wgmma ping-pong, 128 accumulators
          // per thread, plus the stored values) kept up to 48 bytes in local memory until
          // its wgmma descriptors moved to uniform registers ([Note: sm90 descriptor
          // arithmetic] in lcejit_sm90.cuh); a spill now is a regression.
          EXPECT_EQ(info.spillStoreBytes, 0) << k.name << " spills on " << t.archName();
        }
      EXPECT_TRUE(found) << "no ptxas line for " << k.name;
    }
  }
}

CompileCase compileCase(const char *name, DType dt, std::optional<double> cap, bool ignore,
                        Reduction r, DType gw, int64_t n, int64_t vocab = 32003,
                        int64_t hidden = 200) {
  LinearCrossEntropyOptions o;
  o.hidden = hidden;
  o.vocab = vocab;
  o.dtype = dt;
  o.softcap = cap;
  if (!ignore)
    o.ignoreIndex.reset();
  o.reduction = r;
  o.gradWeightDType = gw;
  return {name, o, n};
}

INSTANTIATE_TEST_SUITE_P(
    Configs, OpsNvrtc,
    ::testing::Values(
        compileCase("bf16_mean_ignore_small", DType::BF16, {}, true, Reduction::Mean, DType::F32, 100),
        compileCase("bf16_softcap_large", DType::BF16, 30.0, true, Reduction::Mean, DType::F32, 8192),
        compileCase("bf16_l2hints_large", DType::BF16, {}, true, Reduction::Mean, DType::F32, 8192, 32000),
        compileCase("bf16_sum_noignore_dWbf16", DType::BF16, {}, false, Reduction::Sum, DType::BF16, 5000),
        compileCase("f16_softcap", DType::F16, 30.0, true, Reduction::Mean, DType::F16, 1000),
        compileCase("f32_softcap_sum", DType::F32, 30.0, true, Reduction::Sum, DType::F32, 3000),
        // V a multiple of 128: the materialized backward (stored values, DzForm).
        compileCase("bf16_materialized", DType::BF16, {}, true, Reduction::Mean, DType::F32,
                    8192, 32000),
        compileCase("bf16_materialized_softcap", DType::BF16, 30.0, true, Reduction::Sum,
                    DType::F32, 3000, 32000),
        compileCase("bf16_recompute_softcap", DType::BF16, 30.0, true, Reduction::Mean,
                    DType::F32, 8192, 32000),
        // The heads the benchmarks run: their dA carries 128 (Llama-3) or 96 (Gemma-2)
        // accumulators a thread with the split-K exchange and the residual epilogue, where
        // the small heads above carry 32.
        compileCase("bf16_llama3_head", DType::BF16, {}, true, Reduction::Mean, DType::F32,
                    8192, 128256, 4096),
        compileCase("bf16_gemma2_head_softcap", DType::BF16, 30.0, true, Reduction::Mean,
                    DType::F32, 8192, 256000, 2304),
        // A bf16 dW on the wgmma mainloop: dB's 128 accumulators a thread with the group
        // sums' epilogue ([Note: target group sums]).
        compileCase("bf16_llama3_head_dWbf16", DType::BF16, {}, true, Reduction::Mean,
                    DType::BF16, 8192, 128256, 4096)),
    [](const ::testing::TestParamInfo<CompileCase> &i) { return std::string(i.param.name); });

//===----------------------------------------------------------------------===//
// The CPU reference path of the public op
//===----------------------------------------------------------------------===//

double relNorm(const std::vector<double> &x, const std::vector<double> &r) {
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    d2 += (x[i] - r[i]) * (x[i] - r[i]);
    r2 += r[i] * r[i];
  }
  return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
}

/// Random bf16-representable H and W (uniform in [-amp, amp]) and targets, drawn in that
/// order from one seeded generator; every `period`-th row from `phase` is ignored (-100).
struct RandomProblem {
  std::vector<double> h, w;
  std::vector<int64_t> y;
};
RandomProblem randomProblem(const LinearCrossEntropyOptions &o, int64_t n, uint64_t seed,
                            double amp, int64_t period, int64_t phase) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-amp, amp);
  RandomProblem p;
  p.h.resize(size_t(n * o.hidden));
  p.w.resize(size_t(o.vocab * o.hidden));
  for (double &x : p.h)
    x = ref::roundToDType(u(rng), o.dtype);
  for (double &x : p.w)
    x = ref::roundToDType(u(rng), o.dtype);
  for (int64_t i = 0; i < n; ++i)
    p.y.push_back(i % period == phase ? -100 : int64_t(rng() % uint64_t(o.vocab)));
  return p;
}

/// The materialized backward's Program ([Note: the materialized backward]) in fp64: the
/// planner's algebra (stored factor, row functions, target column) gives the unfused
/// graph's gradients, with and without softcap, with ignored rows.
TEST(OpsReference, MaterializedProgramMatchesTheUnfusedGraph) {
  for (bool softcap : {false, true}) {
    LinearCrossEntropyOptions o = base();
    o.hidden = 24;
    o.vocab = 384; // three 128-column tiles
    if (softcap)
      o.softcap = 7.5;
    const int64_t n = 45;
    auto [h, w, y] = randomProblem(o, n, 11, 1.5, 5, 2);
    y[0] = 0;
    y[1] = o.vocab - 1;
    lcejit::testing::ScopedEnv knob{{"LCEJIT_BACKWARD", "materialized"}};
    LinearCrossEntropy op(o);
    ASSERT_NE(op.scheduleSummary(n).find("materialized"), std::string::npos)
        << op.scheduleSummary(n);
    ReferenceResult prog = op.runReference(h, w, y);
    ReferenceResult graph = ops::runGraphReference(o, h, w, y);
    EXPECT_NEAR(prog.loss, graph.loss, 1e-12 * std::abs(graph.loss));
    EXPECT_LE(relNorm(prog.gradHidden, graph.gradHidden), 1e-11) << "softcap " << softcap;
    EXPECT_LE(relNorm(prog.gradWeight, graph.gradWeight), 1e-11) << "softcap " << softcap;
  }
}

TEST(OpsReference, PlannedProgramMatchesTheUnfusedGraph) {
  for (bool softcap : {false, true}) {
    LinearCrossEntropyOptions o = base();
    o.hidden = 24;
    o.vocab = 257;
    if (softcap)
      o.softcap = 7.5;
    o.workspaceBudgetBytes = 40000; // forces several vocab chunks
    const int64_t n = 33;
    auto [h, w, y] = randomProblem(o, n, 5, 1.0, 4, 3);
    LinearCrossEntropy op(o);
    ReferenceResult prog = op.runReference(h, w, y);
    ReferenceResult graph = ops::runGraphReference(o, h, w, y);
    EXPECT_NEAR(prog.loss, graph.loss, 1e-12 * std::abs(graph.loss));
    EXPECT_LE(relNorm(prog.gradHidden, graph.gradHidden), 1e-11);
    EXPECT_LE(relNorm(prog.gradWeight, graph.gradWeight), 1e-11);
    EXPECT_GT(graph.loss, 0.0);
    // A bad target is reported like on the device.
    y[7] = o.vocab + 3;
    expectError([&] { op.runReference(h, w, y); }, ErrorKind::DeviceCheck,
                {"targets[7] = 260", "outside [0, V = 257)"});
    // Several bad rows: the lowest one is reported, as on the device.
    y[30] = -1;
    y[19] = int64_t(1) << 40;
    y[7] = -5;
    expectError([&] { op.runReference(h, w, y); }, ErrorKind::DeviceCheck, {"targets[7] = -5"});
    y[7] = 0;
    expectError([&] { op.runReference(h, w, y); }, ErrorKind::DeviceCheck,
                {"targets[19] = 1099511627776"});
  }
}

//===----------------------------------------------------------------------===//
// Gradient accumulation (Accumulate, β = 1; [Note: accumulating outputs] in Program.h)
//===----------------------------------------------------------------------===//

/// The planned Program of `jit` for N rows, its schedule shrunk (blocks of 32 rows, chunks
/// of at most 128 columns) so that small shapes run the row blocks and chunks a large call
/// would; bf16 dW never blocks its rows.
plan::Program smallScheduleProgram(ops::LceJit &jit, int64_t n) {
  plan::Program p = jit.lookup(n, ops::LceJit::defaultTarget(), false).compiled->program;
  p.schedule.minBlockRows = 32;
  p.schedule.rowAlign = 32;
  p.schedule.goodChunkCols = 128;
  p.schedule.chunkAlign = 64;
  p.schedule.budgetBytes = plan::workspaceBytesFor(p, std::max<int64_t>(n, 1), 32, 128);
  if (p.schedule.firstBlockedStep < 0)
    p.schedule.fixedChunkCols = 128; // rows never blocked: over the budget, chunks anyway
  return p;
}

/// Random values of `dtype` (rounded to it), never zero, of about `scale`.
std::vector<double> randomValues(size_t count, DType dtype, double scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.25, 1.0);
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = ref::roundToDType((rng() & 1 ? 1 : -1) * u(rng) * scale, dtype);
  return v;
}

/// On the planned Program in fp64, for several plans (bf16 with f32 or bf16 dW, fast and
/// exact, f16 and f32 inputs, scaled gradients; ignored rows, softcap; row blocks and
/// vocabulary chunks, one row, no row): a call that accumulates into dH, dW or both
/// returns the old values plus what a plain call returns, and writes the other gradient as
/// a plain call does; the loss is the same.
TEST(OpsAccumulate, TheProgramAddsItsGradientsToTheOldValues) {
  struct Plan {
    const char *name;
    DType dtype, dw;
    Precision precision;
    bool scaled;
  };
  for (const Plan &pl : {Plan{"bf16 dW f32 fast", DType::BF16, DType::F32, Precision::Fast, false},
                         Plan{"bf16 dW bf16 fast", DType::BF16, DType::BF16, Precision::Fast, false},
                         Plan{"bf16 dW f32 exact", DType::BF16, DType::F32, Precision::Exact, false},
                         Plan{"bf16 dW f32 scaled", DType::BF16, DType::F32, Precision::Fast, true},
                         Plan{"f32", DType::F32, DType::F32, Precision::Fast, false},
                         Plan{"f16 dW f16", DType::F16, DType::F16, Precision::Fast, false}}) {
    LinearCrossEntropyOptions o;
    o.hidden = 16;
    o.vocab = 300;
    o.dtype = pl.dtype;
    o.gradWeightDType = pl.dw;
    o.precision = pl.precision;
    o.softcap = 20.0;
    o.ignoreIndex = -100;
    ops::LceJit jit(o, {}, /*forwardOnly=*/false, /*scaledGradients=*/pl.scaled);
    for (int64_t n : {int64_t(77), int64_t(1), int64_t(0)}) {
      plan::Program p = smallScheduleProgram(jit, n);
      const plan::RunSchedule s = p.runSchedule(n);
      SCOPED_TRACE(fmt::format("{}, {}", pl.name, s.describe()));
      ASSERT_EQ(plan::accumulableOutputs(p), 6u) << "dH (output 1) and dW (output 2)";
      if (n == 77) {
        EXPECT_GT(s.chunks, 1);
        EXPECT_EQ(s.rowBlocks > 1, pl.dw == DType::F32) << "f32 dW: row blocks";
      }
      std::vector<double> h, w;
      normalInputs(o, n, 31 + uint64_t(n), h, w);
      for (double &x : h)
        x = ref::roundToDType(x, o.dtype);
      for (double &x : w)
        x = ref::roundToDType(x, o.dtype);
      ref::RefTensor H({n, o.hidden}, o.dtype), W({o.vocab, o.hidden}, o.dtype),
          Y({n, 1}, o.targetDType), scale({}, DType::F32);
      H.data = h;
      W.data = w;
      for (int64_t i = 0; i < n; ++i)
        Y.data[size_t(i)] = i % 5 == 2 ? -100.0 : double((i * 37 + 11) % o.vocab);
      scale.data = {-0.75};
      std::vector<ref::RefTensor> inputs = {H, W, Y};
      if (pl.scaled)
        inputs.push_back(scale);
      const ref::ProgramRunResult fresh = ref::interpretProgram(p, inputs, n);
      ASSERT_TRUE(fresh.ok());
      ref::RefTensor oldH({n, o.hidden}, o.dtype), oldW({o.vocab, o.hidden}, o.gradWeightDType);
      oldH.data = randomValues(size_t(n * o.hidden), o.dtype, 0.01, 41);
      oldW.data = randomValues(size_t(o.vocab * o.hidden), o.gradWeightDType, 0.01, 42);
      for (uint64_t mask : {2u, 4u, 6u}) {
        SCOPED_TRACE(fmt::format("accumulate mask {}", mask));
        ref::InterpretOptions io;
        io.accumulateOutputs = mask;
        io.initialOutputs = {ref::RefTensor(), oldH, oldW};
        const ref::ProgramRunResult acc = ref::interpretProgram(p, inputs, n, io);
        ASSERT_TRUE(acc.ok());
        EXPECT_EQ(acc.outputs[0].data, fresh.outputs[0].data) << "the loss";
        for (size_t out : {size_t(1), size_t(2)}) {
          const std::vector<double> &f = fresh.outputs[out].data, &a = acc.outputs[out].data,
                                    &old = out == 1 ? oldH.data : oldW.data;
          ASSERT_EQ(a.size(), f.size());
          if (!(mask >> out & 1)) {
            EXPECT_EQ(a, f) << "output " << out << " is written, not accumulated";
            continue;
          }
          double maxAbs = 0, maxErr = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            maxAbs = std::max({maxAbs, std::abs(old[i]), std::abs(f[i])});
            maxErr = std::max(maxErr, std::abs(a[i] - (old[i] + f[i])));
            ASSERT_FALSE(std::isnan(a[i])) << "output " << out << " element " << i;
          }
          EXPECT_LE(maxErr, 1e-13 * maxAbs) << "output " << out << " = old + fresh";
          if (n == 0) {
            EXPECT_EQ(a, old) << "no rows: the old values stay";
          }
        }
      }
    }
  }
}

/// The planned Program through the public reference path (ops::runProgramReference): the
/// old values plus the gradients of the unfused graph, with the outputs rounded once to
/// their dtypes as the device rounds them (bf16 dW: one rounding of old + new).
TEST(OpsAccumulate, ReferencePathAddsToOldValuesWithOneRounding) {
  LinearCrossEntropyOptions o = base();
  o.hidden = 24;
  o.vocab = 257;
  o.gradWeightDType = DType::BF16;
  o.workspaceBudgetBytes = 40000; // several vocab chunks
  const int64_t n = 33;
  std::vector<double> h, w;
  normalInputs(o, n, 77, h, w);
  for (double &x : h)
    x = ref::roundToDType(x, o.dtype);
  for (double &x : w)
    x = ref::roundToDType(x, o.dtype);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i)
    y.push_back(i % 4 == 3 ? -100 : (i * 29) % o.vocab);
  ops::LceJit jit(o);
  const ReferenceResult graph = ops::runGraphReference(o, h, w, y);
  const std::vector<double> oldH = randomValues(size_t(n * o.hidden), o.dtype, 0.02, 5),
                            oldW = randomValues(size_t(o.vocab * o.hidden), o.gradWeightDType,
                                                0.02, 6);
  ops::AccumulateInto acc;
  acc.gradHidden = &oldH;
  acc.gradWeight = &oldW;
  const ReferenceResult r = ops::runProgramReference(jit, h, w, y, 1.0, acc, /*roundOutputs=*/true);
  EXPECT_NEAR(r.loss, graph.loss, 1e-6 * graph.loss);
  // Exactly round(old + new) up to the fp64 sums (a tie of the rounding is improbable).
  size_t bad = 0;
  for (size_t i = 0; i < oldH.size(); ++i)
    bad += r.gradHidden[i] != ref::roundToDType(oldH[i] + graph.gradHidden[i], o.dtype);
  for (size_t i = 0; i < oldW.size(); ++i)
    bad += r.gradWeight[i] != ref::roundToDType(oldW[i] + graph.gradWeight[i], o.gradWeightDType);
  EXPECT_LE(bad, size_t(2)) << "elements that are not round(old + gradient)";
  // A wrong number of old values is named.
  std::vector<double> shortH(oldH.begin(), oldH.end() - 1);
  acc.gradHidden = &shortH;
  expectError([&] { ops::runProgramReference(jit, h, w, y, 1.0, acc); },
              ErrorKind::InvalidArgument, {"gradHidden", std::to_string(shortH.size())});
}

/// Outputs that cannot accumulate are named, by the interpreter, the executor's planner and
/// prepared runs: the loss (a row kernel's), outputs the Program does not have (the
/// forward-only Program has no gradient), and a mask without old values.
TEST(OpsAccumulate, OutputsThatCannotAccumulateAreNamed) {
  LinearCrossEntropyOptions o = base();
  ops::LceJit full(o), fwd(o, {}, /*forwardOnly=*/true);
  const int64_t n = 40;
  const plan::Program &p = full.lookup(n, ops::LceJit::defaultTarget(), false).compiled->program;
  const plan::Program &pf = fwd.lookup(n, ops::LceJit::defaultTarget(), false).compiled->program;
  EXPECT_EQ(plan::accumulableOutputs(p), 6u);
  EXPECT_EQ(plan::accumulableOutputs(pf), 0u) << "the loss only";
  std::vector<double> h, w;
  normalInputs(o, n, 3, h, w);
  ref::RefTensor H({n, o.hidden}, o.dtype), W({o.vocab, o.hidden}, o.dtype), Y({n, 1}, DType::I64);
  H.data = h;
  W.data = w;
  const std::vector<ref::RefTensor> inputs = {H, W, Y};
  ref::InterpretOptions io;
  io.accumulateOutputs = 1;
  expectError([&] { ref::interpretProgram(p, inputs, n, io); }, ErrorKind::InvalidArgument,
              {"output 0 'loss'", "cannot be accumulated"});
  io.accumulateOutputs = 2; // dH, but no old values
  expectError([&] { ref::interpretProgram(p, inputs, n, io); }, ErrorKind::InvalidArgument,
              {"initialOutputs"});
  io.accumulateOutputs = 8;
  expectError([&] { ref::interpretProgram(p, inputs, n, io); }, ErrorKind::InvalidArgument,
              {"0x8", "3 outputs"});
  io.accumulateOutputs = 4;
  expectError([&] { ref::interpretProgram(pf, inputs, n, io); }, ErrorKind::InvalidArgument,
              {"1 outputs"});
  runtime::ProgramBuffers b;
  b.inputs = {0x10000, 0x20000, 0x30000};
  b.outputs = {0x40000, 0x50000, 0x60000};
  b.workspace = 0x70000000;
  b.workspaceBytes = runtime::workspaceBytes(p, n);
  b.accumulateOutputs = 1;
  expectError([&] { runtime::planExecution(p, b, n); }, ErrorKind::InvalidArgument,
              {"output 0 ('loss')", "cannot be added to"});
  runtime::PreparedRun r = runtime::prepareRun(pf, n);
  const CUdeviceptr loss = 0x40000;
  expectError(
      [&] {
        runtime::bindRun(r, pf, b.inputs.data(), 3, &loss, 1, b.workspace,
                         runtime::workspaceBytes(pf, n), 4);
      },
      ErrorKind::InvalidArgument, {"has 1 outputs, no output 2"});
}

/// The mask is a kernel argument of exactly the kernels that write a gradient output (the
/// dW GEMM and dH's cast on the default sm_90a plan; the f32 dH GEMM of f32 inputs), with
/// the run's value in every launch; the emitted kernels read their own bit.
TEST(OpsAccumulate, TheMaskReachesEveryKernelThatWritesAGradient) {
  for (DType dtype : {DType::BF16, DType::F32}) {
    LinearCrossEntropyOptions o = base();
    o.dtype = dtype;
    o.vocab = 32000;
    o.workspaceBudgetBytes = int64_t(4) << 20;
    ops::LceJit jit(o);
    const int64_t n = 3000;
    ops::ProgramLookup l = jit.lookup(n, ops::LceJit::defaultTarget(), false);
    const plan::Program &p = l.compiled->program;
    runtime::ProgramBuffers b;
    b.inputs = {0x10000000, 0x20000000, 0x30000000};
    b.outputs = {0x40000000, 0x50000000, 0x60000000};
    b.workspace = 0x70000000;
    b.workspaceBytes = runtime::workspaceBytes(p, n);
    b.accumulateOutputs = 6;
    runtime::ExecutionPlan ep = runtime::planExecution(p, b, n);
    ASSERT_GT(ep.schedule.chunks, 1) << ep.schedule.describe();
    int writers = 0;
    for (const runtime::LaunchRecord &r : ep.launches) {
      const plan::Kernel &k = p.kernels[static_cast<size_t>(r.kernel)];
      const std::vector<plan::Param> params = plan::kernelParams(k);
      int masks = 0;
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].kind == plan::Param::Kind::AccumulateOutputs) {
          ++masks;
          EXPECT_EQ(r.args[i].type, runtime::KernelArg::Type::I64) << k.name;
          EXPECT_EQ(r.args[i].value.i64, 6) << k.name;
        }
      bool writesOutput = false;
      if (auto *d = std::get_if<plan::GemmDRhsKernel>(&k.body))
        writesOutput = d->out.space == plan::Space::Output;
      if (auto *d = std::get_if<plan::GemmDLhsKernel>(&k.body))
        writesOutput = d->out.space == plan::Space::Output;
      if (auto *c = std::get_if<plan::CastKernel>(&k.body))
        writesOutput = c->out.space == plan::Space::Output;
      EXPECT_EQ(masks, writesOutput ? 1 : 0) << k.name;
      writers += writesOutput;
    }
    EXPECT_GT(writers, 0);
    const std::string cuda = l.compiled->source();
    EXPECT_NE(cuda.find("(((accumulate_outputs >> 2) & 1) != 0)"), std::string::npos)
        << "the dW GEMM reads bit 2";
    EXPECT_NE(cuda.find("(((accumulate_outputs >> 1) & 1) != 0)"), std::string::npos)
        << "the writer of dH reads bit 1";
  }
}

//===----------------------------------------------------------------------===//
// [Note: stored values in dW] (plan/SchedulePolicy.h)
//===----------------------------------------------------------------------===//

struct SlabShape {
  int64_t n, d, v, budgetMb;
  std::optional<double> softcap;
};

/// The planned Program of the sm_90a default target for a shape.
ops::ProgramLookup slabLookup(ops::LceJit &jit, int64_t n) {
  return jit.lookup(n, ops::LceJit::defaultTarget(), /*compile=*/false);
}

LinearCrossEntropyOptions slabOptions(const SlabShape &s) {
  LinearCrossEntropyOptions o = base();
  o.hidden = s.d;
  o.vocab = s.v;
  o.softcap = s.softcap;
  o.workspaceBudgetBytes = s.budgetMb << 20;
  return o;
}

/// The slabs are taken exactly where they may be: a call that overwrites the f32 dW
/// (outputFree), an ordinary schedule of several row blocks, N <= 2·D, the workspace no
/// larger than the ordinary schedule's; never for a bf16 dW, with the knob off, or with
/// N > 2·D. The schedule says so in scheduleSummary and the dump's plan.
TEST(OpsSlabs, TakenExactlyWhereTheCallOverwritesAnF32DwAndTheRowsFit) {
  const SlabShape a{8192, 4096, 128256, 512, std::nullopt};
  ops::LceJit jit(slabOptions(a));
  const plan::Program &p = slabLookup(jit, a.n).compiled->program;
  ASSERT_GE(p.schedule.slabValues, 0) << "the planner allows the slabs on the Llama-3 head";
  EXPECT_EQ(plan::slabRowsMax(p), 2 * a.d);
  for (int64_t n : {int64_t(4097), int64_t(6000), int64_t(8192)}) {
    const plan::RunSchedule ordinary = p.runSchedule(n), free = p.runSchedule(n, true);
    ASSERT_GT(ordinary.rowBlocks, 1) << ordinary.describe();
    EXPECT_EQ(ordinary.slabGroup, 0);
    ASSERT_GT(free.slabGroup, 0) << free.describe();
    EXPECT_EQ(free.rowBlocks, 1);
    EXPECT_EQ(free.rowsPerBlock, n);
    EXPECT_EQ(free.slabs, 1002);
    EXPECT_EQ(free.slabSplit, 1002 - free.slabGroup);
    EXPECT_EQ(free.slabStride, 128 * a.d * 2) << "bf16 elements per 128 rows of the f32 dW";
    EXPECT_LE(free.workspaceBytes, int64_t(512) << 20);
    EXPECT_EQ(free.slabOrdinaryWorkspaceBytes, ordinary.workspaceBytes);
    // Whole waves of dB tiles a launch: 8 tiles a slab (a part of 2048 columns, 256 wide).
    EXPECT_EQ(free.slabGroup % 33, 0) << free.slabGroup;
    EXPECT_NE(free.describe().find("slabs of 128 columns"), std::string::npos)
        << free.describe();
  }
  // More rows than a slab holds: the most a slab holds first (its head), and the rows past
  // it in the workspace's tails where that saves an ordinary block ([Note: slab tails]);
  // ordinary blocks after, fewer (f32 passes of dW) than the ordinary schedule's, no more
  // workspace than the budget.
  for (int64_t n : {int64_t(8193), int64_t(8400), int64_t(10000), int64_t(12000),
                    int64_t(20000), int64_t(32768)}) {
    SCOPED_TRACE(n);
    const plan::Program &q = slabLookup(jit, n).compiled->program;
    const plan::RunSchedule ordinary = q.runSchedule(n), free = q.runSchedule(n, true);
    ASSERT_GT(free.slabGroup, 0) << free.describe();
    EXPECT_EQ(free.slabHead, 8192) << free.describe();
    EXPECT_GE(free.slabRows, 8192) << free.describe();
    EXPECT_EQ(free.rowBlocks,
              free.slabRows == n ? 1
                                 : 1 + (n - free.slabRows + free.rowsPerBlock - 1) /
                                           free.rowsPerBlock);
    EXPECT_LT(free.rowBlocks, ordinary.rowBlocks) << free.describe();
    EXPECT_LE(free.workspaceBytes, int64_t(512) << 20);
    if (free.slabRows < n) {
      EXPECT_LE(free.rowsPerBlock, ordinary.rowsPerBlock);
      EXPECT_EQ(free.rowsPerBlock % 128, 0);
      EXPECT_NE(free.describe().find("then "), std::string::npos) << free.describe();
      // Tails only where they save a block: without them the rest takes more blocks of
      // at most the ordinary schedule's rows (and at most as many rows as these).
      if (free.slabRows > 8192) {
        EXPECT_GT((n - 8192 + free.rowsPerBlock - 1) / free.rowsPerBlock, free.rowBlocks - 1)
            << free.describe();
      }
      // The tails are the fewest rows that leave this many blocks: 128 rows fewer would
      // need another (or exceed the ordinary blocks' rows).
      if (free.slabRows > 8192) {
        EXPECT_GT(n - (free.slabRows - 128), (free.rowBlocks - 1) * free.rowsPerBlock)
            << free.describe();
      }
    }
    if (free.slabRows > 8192) {
      EXPECT_NE(free.describe().find("rows 8192 on of each slab in the workspace's tails"),
                std::string::npos)
          << free.describe();
    }
  }
  // A few rows past 2·D: one block, their values in the tails.
  {
    const plan::RunSchedule free = slabLookup(jit, 8193).compiled->program.runSchedule(8193, true);
    EXPECT_EQ(free.rowBlocks, 1) << free.describe();
    EXPECT_EQ(free.slabRows, 8193);
    EXPECT_NE(free.describe().find("materialized: one row block"), std::string::npos)
        << free.describe();
  }
  // Gemma-2's head: 4608 rows (2·D) in each slab's region, 512 more in its tail, then 3
  // ordinary blocks of 1024 rows (without tails: 4 of 896).
  const SlabShape b{8192, 2304, 256000, 512, 30.0};
  ops::LceJit jitB(slabOptions(b));
  const plan::Program &pb = slabLookup(jitB, b.n).compiled->program;
  const plan::RunSchedule ob = pb.runSchedule(b.n), fb = pb.runSchedule(b.n, true);
  ASSERT_GT(fb.slabGroup, 0) << fb.describe();
  EXPECT_EQ(fb.slabHead, 4608);
  EXPECT_EQ(fb.slabRows, 5120) << fb.describe();
  EXPECT_EQ(fb.rowBlocks, 4) << fb.describe();
  EXPECT_EQ(fb.rowsPerBlock, 1024) << fb.describe();
  EXPECT_LT(fb.rowBlocks, ob.rowBlocks) << fb.describe() << " against " << ob.describe();
  EXPECT_LE(fb.workspaceBytes, int64_t(512) << 20);
  // The op's workspace query answers for both kinds of call.
  LinearCrossEntropy opB(slabOptions(b));
  EXPECT_EQ(opB.workspaceBytes(b.n), std::max(ob.workspaceBytes, fb.workspaceBytes));
  // One ordinary block already: nothing to gain.
  const plan::Program &small = slabLookup(jit, 2048).compiled->program;
  EXPECT_EQ(small.runSchedule(2048).rowBlocks, 1);
  EXPECT_EQ(small.runSchedule(2048, true).slabGroup, 0);
  // The op's summary shows a plain call's schedule, and the other when they differ.
  LinearCrossEntropy op(slabOptions(a));
  const std::string summary = op.scheduleSummary(a.n);
  EXPECT_NE(summary.find("in the gradient's memory"), std::string::npos) << summary;
  EXPECT_NE(summary.find("a call that adds to dW: N = 8192: 4 row blocks"), std::string::npos)
      << summary;
  EXPECT_NE(op.inspect(a.n, "plan").find("stored values in dW: a call that overwrites dW"),
            std::string::npos);
  // A bf16 dW: no room for them.
  LinearCrossEntropyOptions bf = slabOptions(a);
  bf.gradWeightDType = DType::BF16;
  ops::LceJit jitBf(bf);
  EXPECT_EQ(slabLookup(jitBf, a.n).compiled->program.schedule.slabValues, -1);
  // The knob: off, and in the cache key.
  lcejit::testing::ScopedEnv knob{{"LCEJIT_STORE_IN_OUTPUT", "0"}};
  ops::LceJit jitOff(slabOptions(a));
  const ops::ProgramLookup off = slabLookup(jitOff, a.n);
  EXPECT_EQ(off.compiled->program.schedule.slabValues, -1);
  EXPECT_EQ(off.compiled->program.runSchedule(a.n, true).slabGroup, 0);
  EXPECT_NE(off.compiled->cacheKey.find("|no-store-in-output"), std::string::npos);
}

/// [Note: values scaled in place]: at the lean 64 MiB the ordinary materialized blocks
/// would hold ~250 rows, so the planner makes a slab-only Program: a call that overwrites
/// dW with N <= 2·D runs it (the values in dW's memory, scaled in place, dB over the
/// unscaled A, the workspace within the budget); every other call (adding to dW, more
/// rows) runs the recompute Program of the bucket, and the op's queries say so.
TEST(OpsSlabs, LeanBudgetServesOnlyTheCallsWhoseValuesFitDw) {
  const SlabShape a{8192, 4096, 128256, 64, std::nullopt};
  ops::LceJit jit(slabOptions(a));
  const plan::Program &p = slabLookup(jit, a.n).compiled->program;
  ASSERT_TRUE(p.schedule.slabOnly) << fmt::format("{}", fmt::join(p.decisions, "\n"));
  EXPECT_EQ(p.schedule.slabScaledA, -1) << "no scaled copy of A";
  // The loop: the filtered dZ GEMM, dA, the scale pass, dB over the input A.
  const plan::Step *loop = nullptr;
  for (const plan::Step &st : p.steps)
    if (st.kind == plan::Step::Kind::ChunkLoop)
      loop = &st;
  ASSERT_NE(loop, nullptr);
  std::vector<plan::KernelKind> kinds;
  for (int32_t k : loop->loopKernels)
    kinds.push_back(p.kernels[static_cast<size_t>(k)].kind());
  EXPECT_EQ(kinds, (std::vector<plan::KernelKind>{plan::KernelKind::GemmDz,
                                                  plan::KernelKind::GemmDLhs,
                                                  plan::KernelKind::DzForm,
                                                  plan::KernelKind::GemmDRhs}));
  for (const plan::Kernel &k : p.kernels)
    if (const auto *d = std::get_if<plan::GemmDRhsKernel>(&k.body)) {
      EXPECT_EQ(d->a.space, plan::Space::Input);
      EXPECT_EQ(d->k, a.d);
    }
  for (int64_t n : {int64_t(1), int64_t(300), int64_t(4097), int64_t(8192)}) {
    SCOPED_TRACE(n);
    const plan::Program &q = slabLookup(jit, n).compiled->program;
    ASSERT_TRUE(q.schedule.slabOnly);
    const plan::RunSchedule free = q.runSchedule(n, true), add = q.runSchedule(n);
    EXPECT_TRUE(plan::servesCall(q, free)) << free.describe();
    EXPECT_LE(free.workspaceBytes, int64_t(64) << 20) << free.describe();
    EXPECT_EQ(free.rowBlocks, 1);
    if (n >= 4097) {
      EXPECT_GT(free.slabGroup, 0) << free.describe();
      EXPECT_FALSE(plan::servesCall(q, add)) << add.describe();
    }
  }
  // Lean A: 24 slabs a dB launch (384 tiles of 128 x 256, 2.9 waves on 132 SMs), not the
  // 28 that fit (3.4).
  EXPECT_EQ(p.runSchedule(a.n, true).slabGroup, 24);
  // More rows than a slab block holds: not served either way.
  const plan::Program &big = slabLookup(jit, 16384).compiled->program;
  EXPECT_FALSE(plan::servesCall(big, big.runSchedule(16384, true)));
  // The op: both kinds of call in its summary and its workspace query, within the budget.
  LinearCrossEntropy op(slabOptions(a));
  const std::string summary = op.scheduleSummary(a.n);
  EXPECT_NE(summary.find("in the gradient's memory"), std::string::npos) << summary;
  EXPECT_NE(summary.find("a call that adds to dW: the recompute Program of the bucket: N = "
                         "8192: "),
            std::string::npos)
      << summary;
  EXPECT_NE(op.scheduleSummary(16384).find("the recompute Program of the bucket: N = 16384"),
            std::string::npos)
      << op.scheduleSummary(16384);
  EXPECT_NE(op.inspect(a.n, "plan").find("scaled in place ([Note: values scaled in place])"),
            std::string::npos);
  for (int64_t n : {int64_t(8192), int64_t(16384)})
    EXPECT_LE(op.workspaceBytes(n), int64_t(64) << 20) << n;
  ops::LceJit rec(slabOptions(a), {}, false, false, /*recompute=*/true);
  const ops::ProgramLookup r = slabLookup(rec, a.n);
  EXPECT_FALSE(r.compiled->program.schedule.wholeRows) << "the recompute's chunk loop";
  EXPECT_NE(r.compiled->cacheKey.find("|backward=recompute"), std::string::npos);
  EXPECT_EQ(op.workspaceBytes(a.n),
            std::max(p.runSchedule(a.n, true).workspaceBytes,
                     runtime::workspaceBytes(r.compiled->program, a.n)));
  // The default budget keeps its scaled A (no scale pass), and the knob turns both off.
  ops::LceJit def(slabOptions(SlabShape{8192, 4096, 128256, 512, std::nullopt}));
  EXPECT_FALSE(slabLookup(def, a.n).compiled->program.schedule.slabOnly);
  lcejit::testing::ScopedEnv knob{{"LCEJIT_STORE_IN_OUTPUT", "0"}};
  ops::LceJit off(slabOptions(a));
  const plan::Program &po = slabLookup(off, a.n).compiled->program;
  EXPECT_FALSE(po.schedule.slabOnly);
  EXPECT_FALSE(po.schedule.wholeRows) << "the recompute, as before";
}

/// The property that makes the slabs safe, on the launches and addresses the executor
/// makes (synthetic buffers): the forward writes every slab (its head and, [Note: slab
/// tails], its tail) where dA's maps and each dB launch's maps read it; dA runs before any
/// dB; every dB launch reads slabs nothing has overwritten, in one place, and writes only
/// bytes of dW whose slabs every reader has read already; the tails and the workspace's
/// slabs lie in the workspace, clear of dB's other operand; the dB launches of each part
/// cover dW's rows once.
TEST(OpsSlabs, DbOverwritesOnlySlabsEveryReaderHasRead) {
  for (const SlabShape &s : {SlabShape{8192, 4096, 128256, 512, std::nullopt},
                             SlabShape{4097, 4096, 128256, 512, 30.0},
                             SlabShape{2000, 1024, 32000, 100, std::nullopt},
                             SlabShape{1500, 768, 32000, 80, 30.0},
                             // Rows after the slabs, in ordinary blocks.
                             SlabShape{10000, 4096, 128256, 512, std::nullopt},
                             SlabShape{8192, 2304, 256000, 512, 30.0},
                             SlabShape{5000, 1024, 32000, 100, std::nullopt},
                             // [Note: slab tails]: one block, and blocks after the tails.
                             SlabShape{8193, 4096, 128256, 512, std::nullopt},
                             SlabShape{2500, 1024, 32000, 100, 30.0},
                             // [Note: values scaled in place]: slab-only Programs.
                             SlabShape{8192, 4096, 128256, 64, std::nullopt},
                             SlabShape{4097, 4096, 128256, 64, 30.0},
                             SlabShape{1999, 1024, 32000, 32, std::nullopt},
                             SlabShape{1500, 768, 32000, 24, 30.0}}) {
    SCOPED_TRACE(fmt::format("N = {} D = {} V = {} budget {} MiB", s.n, s.d, s.v, s.budgetMb));
    ops::LceJit jit(slabOptions(s));
    const plan::Program &p = slabLookup(jit, s.n).compiled->program;
    const plan::RunSchedule sched = p.runSchedule(s.n, true);
    ASSERT_GT(sched.slabGroup, 0) << sched.describe();
    runtime::ProgramBuffers b;
    b.inputs = {0x10000000000, 0x20000000000, 0x30000000000};
    const CUdeviceptr dw = 0x60000000000;
    b.outputs = {0x40000000000, 0x50000000000, dw};
    b.workspace = 0x70000000000;
    b.workspaceBytes = sched.workspaceBytes;
    runtime::ExecutionPlan ep = runtime::planExecution(p, b, sched);
    const int64_t head = std::min(sched.slabHead, sched.slabRows);
    const int64_t slabBytes = head * 256, tailBytes = (sched.slabRows - head) * 256,
                  regionBytes = 128 * s.d * 4;
    size_t lastSlabGemm = 0, firstOrdinary = std::numeric_limits<size_t>::max();
    // Where the forward puts slab i's head and tail (its SlabSplit, SlabStride, SlabBase,
    // SlabHead and values pointer).
    std::vector<CUdeviceptr> at, tailAt;
    int fwd = -1, dA = -1, firstDb = -1, scale = -1;
    CUdeviceptr chainAt = 0;
    size_t chainLaunch = 0;
    std::vector<std::pair<size_t, CUdeviceptr>> slabBlockPointers;
    std::vector<std::pair<CUdeviceptr, CUdeviceptr>> dbOperands; // [lo, hi) of dB's B
    std::vector<std::pair<size_t, std::vector<std::pair<CUdeviceptr, int64_t>>>> writes;
    std::map<int64_t, std::vector<size_t>> readers; // slab -> launches reading it
    std::map<int64_t, int64_t> coverage;            // part column 0 -> rows of dW covered
    for (size_t li = 0; li < ep.launches.size(); ++li) {
      const runtime::LaunchRecord &r = ep.launches[li];
      const plan::Kernel &k = p.kernels[static_cast<size_t>(r.kernel)];
      const std::vector<plan::Param> params = plan::kernelParams(k);
      auto arg = [&](plan::Param::Kind kind) -> const runtime::KernelArg & {
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].kind == kind)
            return r.args[i];
        ADD_FAILURE() << k.name << " has no parameter of kind " << int(kind);
        return r.args[0];
      };
      const bool ordinaryBlock = r.rowBlock > 0;
      // [Note: dA stream-K chains]: the chain's slots reach the slab block's dA alone.
      if (const auto *d = std::get_if<plan::GemmDLhsKernel>(&k.body); d && d->chain.valid()) {
        CUdeviceptr chain = 0;
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].kind == plan::Param::Kind::Pointer && params[i].buf == d->chain)
            chain = r.args[i].value.pointer;
        if (ordinaryBlock || sched.lhsChainBytes == 0) {
          EXPECT_EQ(chain, 0u) << k.name << " in row block " << r.rowBlock;
        } else {
          EXPECT_NE(chain, 0u) << k.name;
          chainAt = chain;
          chainLaunch = li;
        }
      }
      if (!ordinaryBlock)
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].kind == plan::Param::Kind::Pointer)
            slabBlockPointers.push_back({li, r.args[i].value.pointer});
      if (ordinaryBlock)
        firstOrdinary = std::min(firstOrdinary, li);
      else if (plan::isGemmKind(k.kind()))
        lastSlabGemm = li;
      if (ordinaryBlock && plan::isGemmKind(k.kind())) {
        // The ordinary layout: no slab parameter, no slab map; the forward writes its block's
        // values into the workspace's buffer (where the slab block's slabs were), dB adds to
        // all of dW.
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].kind == plan::Param::Kind::SlabSplit) {
            EXPECT_EQ(r.args[i].value.i64, -1) << k.name;
          }
        if (const auto *g = std::get_if<plan::GemmReduceKernel>(&k.body); g && g->stored) {
          for (size_t i = 0; i < params.size(); ++i)
            if (params[i].kind == plan::Param::Kind::Pointer && params[i].buf == g->stored->values)
              writes.push_back({li, {{r.args[i].value.pointer,
                                      s.v * 2 * arg(plan::Param::Kind::N).value.i64}}});
        }
        if (std::get_if<plan::GemmDRhsKernel>(&k.body)) {
          EXPECT_EQ(r.maps[0].slabs, 0);
          writes.push_back({li, {{dw, s.v * s.d * 4}}});
        }
        continue;
      }
      if (const auto *g = std::get_if<plan::GemmReduceKernel>(&k.body); g && g->stored) {
        fwd = static_cast<int>(li);
        ASSERT_TRUE(g->stored->slabs);
        const int64_t split = arg(plan::Param::Kind::SlabSplit).value.i64;
        const int64_t stride = arg(plan::Param::Kind::SlabStride).value.i64;
        const CUdeviceptr base2 = arg(plan::Param::Kind::SlabBase).value.pointer;
        CUdeviceptr values = 0;
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].kind == plan::Param::Kind::Pointer && params[i].buf == g->stored->values)
            values = r.args[i].value.pointer;
        EXPECT_EQ(split, sched.slabSplit);
        EXPECT_EQ(arg(plan::Param::Kind::SlabHead).value.i64, head);
        const CUdeviceptr tails = base2 + static_cast<CUdeviceptr>((sched.slabs - split) * slabBytes);
        for (int64_t i = 0; i < sched.slabs; ++i) {
          at.push_back(i < split ? values + static_cast<CUdeviceptr>(i * stride * 2)
                                 : base2 + static_cast<CUdeviceptr>((i - split) * slabBytes));
          tailAt.push_back(tails + static_cast<CUdeviceptr>(i * tailBytes));
        }
        // The workspace's slabs and the tails lie in the workspace.
        EXPECT_LE(tails + static_cast<CUdeviceptr>(sched.slabs * tailBytes),
                  b.workspace + static_cast<CUdeviceptr>(sched.workspaceBytes));
        // Slabs in dW lie inside it, one per region, and shifted by the group.
        for (int64_t i = 0; i < split; ++i) {
          EXPECT_EQ(at[static_cast<size_t>(i)], dw + static_cast<CUdeviceptr>((i + sched.slabGroup) * regionBytes));
          EXPECT_LE(slabBytes, regionBytes);
        }
        for (int64_t i = split; i < sched.slabs; ++i)
          EXPECT_GE(at[static_cast<size_t>(i)], b.workspace);
      } else if (const auto *d = std::get_if<plan::GemmDLhsKernel>(&k.body)) {
        dA = static_cast<int>(li);
        ASSERT_EQ(r.maps.size(), 4u);
        const runtime::Sm90Operand &a1 = r.maps[0], &a2 = r.maps[2], &tail = r.maps[3];
        EXPECT_EQ(a1.slabs + a2.slabs, sched.slabs);
        EXPECT_EQ(arg(plan::Param::Kind::SlabSplit).value.i64, a1.slabs);
        EXPECT_EQ(arg(plan::Param::Kind::SlabHead).value.i64, head);
        EXPECT_EQ(arg(plan::Param::Kind::N).value.i64, sched.slabRows);
        if (tailBytes > 0) {
          EXPECT_EQ(head % 128, 0) << "dA's row tiles lie wholly in the heads or the tails";
        }
        for (int64_t i = 0; i < sched.slabs; ++i) {
          const runtime::Sm90Operand &m = i < a1.slabs ? a1 : a2;
          const int64_t j = i < a1.slabs ? i : i - a1.slabs;
          EXPECT_EQ(m.data + static_cast<CUdeviceptr>(j * m.slabStride * 2), at[static_cast<size_t>(i)]) << "slab " << i;
          EXPECT_EQ(m.rows, head);
          if (tailBytes > 0) {
            EXPECT_EQ(tail.data + static_cast<CUdeviceptr>(i * tail.slabStride * 2),
                      tailAt[static_cast<size_t>(i)]) << "slab " << i;
            EXPECT_EQ(tail.rows, sched.slabRows - head);
            EXPECT_EQ(tail.slabs, sched.slabs);
          }
          readers[i].push_back(li);
        }
        (void)d;
      } else if (const auto *f = std::get_if<plan::DzFormKernel>(&k.body);
                 f && f->scaleValues) {
        // [Note: values scaled in place]: one launch over every slab, where the forward
        // put it (its writes are the values dB reads, so they are not a hazard: the order
        // is checked below).
        ASSERT_TRUE(p.schedule.slabOnly);
        ASSERT_TRUE(f->slabs);
        EXPECT_EQ(scale, -1) << "one scale pass";
        scale = static_cast<int>(li);
        const int64_t split = arg(plan::Param::Kind::SlabSplit).value.i64;
        const int64_t stride = arg(plan::Param::Kind::SlabStride).value.i64;
        const CUdeviceptr base2 = arg(plan::Param::Kind::SlabBase).value.pointer;
        CUdeviceptr values = 0;
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].kind == plan::Param::Kind::Pointer && params[i].buf == f->dz)
            values = r.args[i].value.pointer;
        EXPECT_EQ(arg(plan::Param::Kind::N).value.i64, sched.slabRows);
        EXPECT_EQ(arg(plan::Param::Kind::SlabHead).value.i64, head);
        EXPECT_EQ(r.dims.grid[1], sched.slabs) << "a y block per slab";
        ASSERT_EQ(static_cast<int64_t>(at.size()), sched.slabs);
        for (int64_t i = 0; i < sched.slabs; ++i)
          EXPECT_EQ(i < split ? values + static_cast<CUdeviceptr>(i * stride * 2)
                              : base2 + static_cast<CUdeviceptr>((i - split) * slabBytes),
                    at[static_cast<size_t>(i)])
              << "slab " << i;
      } else if (const auto *d = std::get_if<plan::GemmDRhsKernel>(&k.body)) {
        if (firstDb < 0)
          firstDb = static_cast<int>(li);
        const runtime::Sm90Operand &a = r.maps[0], &out = r.maps[2], &tail = r.maps.back();
        ASSERT_EQ(r.maps.size(), 4u);
        EXPECT_EQ(arg(plan::Param::Kind::SlabHead).value.i64, head);
        if (p.schedule.slabOnly) {
          // dB's B operand: the unscaled A (the input H, all of its columns).
          EXPECT_EQ(r.maps[1].data, b.inputs[0]);
          EXPECT_EQ(r.maps[1].rows, s.d);
          EXPECT_EQ(r.maps[1].ld, s.d);
          EXPECT_EQ(r.maps[1].k, sched.slabRows);
          EXPECT_EQ(d->outCol0, 0);
        }
        ASSERT_GT(a.slabs, 0);
        ASSERT_TRUE(out.f32Out);
        // The launch's columns: its chunk.
        const int64_t c0 = arg(plan::Param::Kind::ChunkBegin).value.i64;
        const int64_t cc = arg(plan::Param::Kind::ChunkCols).value.i64;
        EXPECT_EQ(c0 % 128, 0);
        EXPECT_EQ(a.slabs, (cc + 127) / 128);
        EXPECT_LE(a.slabs, sched.slabGroup + 1);
        EXPECT_EQ(a.k, head);
        if (tailBytes > 0) {
          EXPECT_EQ(head % 64, 0) << "dB's k-blocks lie wholly in the heads or the tails";
        }
        for (int64_t j = 0; j < a.slabs; ++j) {
          EXPECT_EQ(a.data + static_cast<CUdeviceptr>(j * a.slabStride * 2),
                    at[static_cast<size_t>(c0 / 128 + j)]) << "slab " << c0 / 128 + j;
          if (tailBytes > 0) {
            EXPECT_EQ(tail.k, sched.slabRows - head);
            EXPECT_EQ(tail.slabs, a.slabs);
            EXPECT_EQ(tail.data + static_cast<CUdeviceptr>(j * tail.slabStride * 2),
                      tailAt[static_cast<size_t>(c0 / 128 + j)]) << "slab " << c0 / 128 + j;
          }
          readers[c0 / 128 + j].push_back(li);
        }
        // dB's other operand (the scaled A, in the values' buffer after the slabs and the
        // tails, or the input) overlaps no slab of the workspace and no tail.
        const runtime::Sm90Operand &bop = r.maps[1];
        const CUdeviceptr bLo = bop.data, bHi = bop.data + static_cast<CUdeviceptr>(bop.k * bop.ld * 2);
        dbOperands.push_back({bLo, bHi});
        for (int64_t i = 0; i < sched.slabs; ++i) {
          const CUdeviceptr hs = at[static_cast<size_t>(i)], ts = tailAt[static_cast<size_t>(i)];
          EXPECT_FALSE(bLo < hs + static_cast<CUdeviceptr>(slabBytes) && hs < bHi) << "slab " << i;
          if (tailBytes > 0) {
            EXPECT_FALSE(bLo < ts + static_cast<CUdeviceptr>(tailBytes) && ts < bHi)
                << "tail " << i;
          }
        }
        EXPECT_EQ(out.rows, cc);
        EXPECT_EQ(out.data, dw + static_cast<CUdeviceptr>((c0 * out.ld + d->outCol0) * 4));
        std::vector<std::pair<CUdeviceptr, int64_t>> w;
        for (int64_t row = 0; row < cc; ++row)
          w.push_back({out.data + static_cast<CUdeviceptr>(row * out.ld * 4), out.k * 4});
        writes.push_back({li, w});
        EXPECT_EQ(coverage[d->outCol0], c0) << "dB launches of a part run in order, adjacent";
        coverage[d->outCol0] = c0 + cc;
      }
    }
    ASSERT_GE(fwd, 0);
    ASSERT_GE(dA, 0);
    ASSERT_GT(firstDb, dA) << "dA reads every slab before any dB writes";
    ASSERT_LT(fwd, dA);
    if (p.schedule.slabOnly) {
      EXPECT_LE(sched.workspaceBytes, s.budgetMb << 20);
      ASSERT_GT(scale, dA) << "dA reads the values before they are scaled";
      ASSERT_LT(scale, firstDb) << "dB reads them scaled";
    } else {
      EXPECT_EQ(scale, -1);
    }
    // Every launch of the slab block's GEMMs before the ordinary blocks' first.
    EXPECT_EQ(firstOrdinary < ep.launches.size(), sched.rowBlocks > 1);
    EXPECT_LT(lastSlabGemm, firstOrdinary);
    for (const auto &[col0, end] : coverage)
      EXPECT_EQ(end, s.v) << "part at column " << col0;
    // Every write: the slabs it overlaps have no reader at or after this launch.
    for (const auto &[li, ranges] : writes)
      for (const auto &[lo, bytes] : ranges)
        for (int64_t i = 0; i < sched.slabs; ++i) {
          const CUdeviceptr sl = at[static_cast<size_t>(i)], tl = tailAt[static_cast<size_t>(i)];
          const CUdeviceptr hi = lo + static_cast<CUdeviceptr>(bytes);
          if (!(lo < sl + static_cast<CUdeviceptr>(slabBytes) && sl < hi) &&
              !(tailBytes > 0 && lo < tl + static_cast<CUdeviceptr>(tailBytes) && tl < hi))
            continue;
          for (size_t reader : readers[i])
            ASSERT_LT(reader, li) << "launch " << li << " overwrites slab " << i
                                  << " that launch " << reader << " reads";
        }
    // [Note: dA stream-K chains]: where the schedule has the slots, the slab block's dA runs
    // the chain (cooperative, plan::lhsChainCtas CTAs) with them after every other byte the
    // slab block uses, inside the workspace, their flags zeroed by the call's memsets.
    if (sched.lhsChainBytes > 0) {
      ASSERT_NE(chainAt, 0u);
      const CUdeviceptr chainEnd = chainAt + static_cast<CUdeviceptr>(sched.lhsChainBytes);
      EXPECT_LE(chainEnd, b.workspace + static_cast<CUdeviceptr>(sched.workspaceBytes));
      EXPECT_GE(chainAt, b.workspace);
      EXPECT_EQ(static_cast<int>(chainLaunch), dA);
      const runtime::LaunchRecord &r = ep.launches[chainLaunch];
      const plan::Kernel &k = p.kernels[static_cast<size_t>(r.kernel)];
      const auto &d = std::get<plan::GemmDLhsKernel>(k.body);
      const int64_t tiles = (sched.slabRows + 127) / 128 * ((d.k + d.tile.bn - 1) / d.tile.bn);
      EXPECT_EQ(r.dims.grid[0], plan::lhsChainCtas(tiles, (s.v + 63) / 64, 132));
      EXPECT_TRUE(r.dims.cooperative);
      EXPECT_GE(sched.lhsChainBytes, plan::kChainFlagBytes +
                                         plan::lhsStreamKTail(tiles, 132) * 128 * d.tile.bn * 4)
          << "a slot for every tile of the last round";
      for (int64_t i = 0; i < sched.slabs; ++i) {
        const CUdeviceptr hs = at[static_cast<size_t>(i)], ts = tailAt[static_cast<size_t>(i)];
        EXPECT_FALSE(chainAt < hs + static_cast<CUdeviceptr>(slabBytes) && hs < chainEnd) << "slab " << i;
        if (tailBytes > 0) {
          EXPECT_FALSE(chainAt < ts + static_cast<CUdeviceptr>(tailBytes) && ts < chainEnd)
              << "tail " << i;
        }
      }
      for (const auto &[lo, hi] : dbOperands)
        EXPECT_FALSE(chainAt < hi && lo < chainEnd) << "dB's scaled A";
      for (const auto &[li, ptr] : slabBlockPointers)
        if (ptr != chainAt) {
          EXPECT_FALSE(ptr >= chainAt && ptr < chainEnd)
              << "launch " << li << "'s buffer at 0x" << std::hex << ptr << " in the slots";
        }
      bool zeroed = false;
      for (const runtime::MemsetRecord &m : ep.memsets)
        zeroed = zeroed || (m.pointer <= chainAt &&
                            chainAt + plan::kChainFlagBytes <=
                                m.pointer + static_cast<CUdeviceptr>(m.bytes));
      EXPECT_TRUE(zeroed) << "the flags are zeroed before the call";
    } else {
      EXPECT_EQ(chainAt, 0u);
    }
    // [Note: slab tails]: the shapes meant to take them do.
    if (s.n == 8193 || s.n == 2500 || s.v == 256000) {
      EXPECT_GT(sched.slabRows, head) << sched.describe();
    }
    if (s.budgetMb == 512 && s.v == 256000) {
      EXPECT_GT(sched.lhsChainBytes, 0) << "Gemma-2's head chains: " << sched.describe();
    }
  }
}

/// [Note: dA stream-K chains]: a prepared run (the op's warm path) of Gemma-2's head: the
/// ordinary blocks' dA (all of a call that adds to dW, the blocks after the slab block of
/// one that overwrites it) gets a null chain pointer, which stays null through the
/// relocation (not a buffer to re-point); the slab block's is relocated into the workspace
/// like any buffer.
TEST(OpsSlabs, PreparedRunsKeepTheChainsNullPointer) {
  const SlabShape a{8192, 2304, 256000, 512, 30.0};
  ops::LceJit jit(slabOptions(a));
  const plan::Program &p = slabLookup(jit, a.n).compiled->program;
  ASSERT_GE(p.schedule.lhsChain, 0);
  for (bool free : {false, true}) {
    SCOPED_TRACE(free ? "overwrites dW" : "adds to dW");
    const runtime::PreparedRun r = runtime::prepareRun(p, a.n, free);
    EXPECT_EQ(r.schedule.lhsChainBytes > 0, free);
    int chained = 0;
    for (const runtime::PreparedRun::Launch &l : r.launches) {
      const plan::Kernel &k = p.kernels[static_cast<size_t>(l.kernel)];
      const auto *d = std::get_if<plan::GemmDLhsKernel>(&k.body);
      if (!d)
        continue;
      ASSERT_TRUE(d->chain.valid());
      const std::vector<plan::Param> params = plan::kernelParams(k);
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].kind == plan::Param::Kind::Pointer && params[i].buf == d->chain) {
          if (free && l.rowBlock == 0) {
            EXPECT_EQ(l.argRelocs[i].base, r.numInputs + r.numOutputs) << "the workspace";
            ++chained;
          } else {
            EXPECT_EQ(l.args[i].value.pointer, 0u);
            EXPECT_EQ(l.argRelocs[i].base, -1) << "null: nothing to re-point";
          }
        }
      if (free && l.rowBlock == 0) {
        EXPECT_TRUE(l.dims.cooperative) << k.name;
      }
    }
    EXPECT_EQ(chained, free ? 1 : 0) << "the slab block's dA";
  }
}

/// Accumulate is checked with the other arguments, before any device work: bad tensors are
/// named as in a plain call, and good ones reach the device (none here).
TEST(OpsAccumulate, ArgumentsAreCheckedBeforeAnyDeviceWork) {
  LinearCrossEntropyOptions o = base();
  LinearCrossEntropy op(o);
  Args a = goodArgs(o, 16);
  a.dw.dtype = DType::BF16;
  expectError(
      [&] {
        op.enqueue(a.h, a.w, a.y, a.loss, a.dh, a.dw, nullptr, GradScale{}, Accumulate{true, true});
      },
      ErrorKind::InvalidArgument, {"gradWeight.dtype", "bf16", "f32"});
  if (runtime::cudaAvailable())
    GTEST_SKIP() << "a GPU is present: the no-GPU answer cannot be checked here";
  a = goodArgs(o, 16);
  expectError(
      [&] {
        op.enqueue(a.h, a.w, a.y, a.loss, a.dh, a.dw, nullptr, GradScale{0.5f},
                   Accumulate{false, true});
      },
      ErrorKind::NoDevice, {"libcuda.so.1"});
}

} // namespace
} // namespace lcejit

int main(int argc, char **argv) {
  lcejit::g_selfPath = std::filesystem::canonical("/proc/self/exe").string();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
