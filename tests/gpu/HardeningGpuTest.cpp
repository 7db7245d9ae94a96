//===- HardeningGpuTest.cpp - Device errors, the warm path, CUDA graphs (issue 8) -===//
//
//   LceGpuHardening.LowestBadTargetRowIsReported
//   LceGpuHardening.LaunchContractViolationIsReportedAndTheContextStaysUsable
//   LceGpuHardening.WarmCallAllocatesNothingAndTakesNoSlowPath
//   LceGpuHardening.EnqueueCapturedInACudaGraphReplaysCorrectly
//   LceGpuHardening.WarmAccumulateCallAllocatesNothingAndAGraphKeepsItsMask
//   LceGpuHardening.GrowingNReallocatesTheWorkspaceOnlyWhenDoublingIsNotEnough
//
// The warm-call tests count this thread's heap allocations with
// tests/support/AllocationCounter (linked into the GPU runner: it replaces the global
// operator new there, and only counts).
//
//===----------------------------------------------------------------------===//

#include "ops/lib/LceJit.h"
#include "runtime/Executor.h"
#include "tests/gpu/GpuSupport.h"
#include "tests/gpu/Tolerances.h"

#include "tests/support/AllocationCounter.h"
#include "tests/support/ScopedEnv.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <regex>
#include <vector>

using lcejit::testsupport::allocationsOf;

namespace lcejit::gputest {
namespace {


void upload(const DeviceBuffer &b, const void *host, int64_t bytes) {
  LCEJIT_CU(runtime::cudaDriver().memcpyHtoD(b.ptr(), host, static_cast<size_t>(bytes)));
  // A pageable copy may still be in flight on return: work on other streams must see it.
  LCEJIT_CU(runtime::cudaDriver().ctxSynchronize());
}

/// The inputs and outputs of one call, filled with random values (never zeros).
struct Problem {
  LinearCrossEntropyOptions o;
  int64_t n = 0;
  DeviceBuffer h, w, y, dH, dW, loss;

  Problem(const LinearCrossEntropyOptions &opts, int64_t rows, uint64_t seed) : o(opts), n(rows) {
    const int64_t es = dtypeSize(o.dtype);
    h = DeviceBuffer(n * o.hidden * es);
    w = DeviceBuffer(o.vocab * o.hidden * es);
    y = DeviceBuffer(std::max<int64_t>(n, 1) * 8);
    dH = DeviceBuffer(n * o.hidden * es);
    dW = DeviceBuffer(o.vocab * o.hidden * dtypeSize(o.gradWeightDType));
    loss = DeviceBuffer(256);
    fill(seed);
  }
  void fill(uint64_t seed) {
    RefKernels &k = RefKernels::get();
    const double scale = 2.0 / std::pow(double(o.hidden), 0.25);
    k.fillRandom(h, o.dtype, n * o.hidden, seed, scale);
    k.fillRandom(w, o.dtype, o.vocab * o.hidden, seed + 1, scale);
    k.fillTargets(y, DType::I64, n, seed + 2, o.vocab, o.ignoreIndex.value_or(0), 7);
  }
  TensorRef H() const { return {h.data(), o.dtype, {n, o.hidden}, {}}; }
  TensorRef W() const { return {w.data(), o.dtype, {o.vocab, o.hidden}, {}}; }
  TensorRef Y() const { return {y.data(), DType::I64, {n}, {}}; }
  MutableTensorRef L() const { return {loss.data(), DType::F32, {}, {}}; }
  MutableTensorRef DH() const { return {dH.data(), o.dtype, {n, o.hidden}, {}}; }
  MutableTensorRef DW() const { return {dW.data(), o.gradWeightDType, {o.vocab, o.hidden}, {}}; }

  /// loss, dH and dW against the fp64 reference of the current inputs.
  void expectMatchesReference(float got, const std::string &what) const {
    GpuReference ref = gpuReference(o, h, w, y, n);
    RefKernels &k = RefKernels::get();
    Comparison ch = k.compare(dH, o.dtype, ref.dH, n * o.hidden);
    Comparison cw = k.compare(dW, o.gradWeightDType, ref.dW, o.vocab * o.hidden);
    EXPECT_LE(std::abs(double(got) - ref.loss), kLossTolerance * std::abs(ref.loss))
        << what << ": loss " << got << " vs fp64 " << ref.loss;
    EXPECT_EQ(ch.nonFinite, 0) << what << ": dH";
    EXPECT_EQ(cw.nonFinite, 0) << what << ": dW";
    EXPECT_LE(ch.relError, hiddenGradTolerance(o.dtype, false, false, ch.floor, ch.bf16Floor))
        << what << ": dH";
    EXPECT_LE(cw.relError, gradTolerance(o.gradWeightDType, false, false, cw.floor, cw.bf16Floor))
        << what << ": dW";
  }
};

LinearCrossEntropyOptions options(int64_t vocab) {
  LinearCrossEntropyOptions o;
  o.hidden = 256;
  o.vocab = vocab; // a multiple of 8: the wgmma path on sm_90; 32003: mma.sync everywhere
  o.dtype = DType::BF16;
  o.softcap = 30.0;
  o.ignoreIndex = -100;
  return o;
}

std::string errorOf(const std::function<void()> &f, ErrorKind want) {
  try {
    f();
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), want) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an lcejit::Error";
  return "";
}

/// Bad targets at rows 5000, 37 and 4096 of 8191: every path reports row 37 and its value
/// (which needs both 32-bit halves of the error word), whatever order the threads ran in.
/// Then the same op runs a good call correctly.
TEST(LceGpuHardening, LowestBadTargetRowIsReported) {
  for (int64_t vocab : {int64_t(32000), int64_t(32003)}) {
    SCOPED_TRACE(fmt::format("V = {}", vocab));
    Problem pr(options(vocab), 8191, 501);
    LinearCrossEntropy op(pr.o);
    std::vector<int64_t> good(static_cast<size_t>(pr.n));
    pr.y.downloadTo(good.data(), pr.n * 8);
    std::vector<int64_t> bad = good;
    bad[5000] = vocab;
    bad[37] = -5000000000LL; // below -2^32: the high half matters
    bad[4096] = -7;
    upload(pr.y, bad.data(), pr.n * 8);
    const std::string want = "targets[37] = -5000000000";
    std::string msg = errorOf([&] { op.forwardBackward(pr.H(), pr.W(), pr.Y(), pr.DH(), pr.DW()); },
                              ErrorKind::DeviceCheck);
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    msg = errorOf([&] { op.forward(pr.H(), pr.W(), pr.Y()); }, ErrorKind::DeviceCheck);
    EXPECT_NE(msg.find(want), std::string::npos) << "forward: " << msg;
    op.enqueue(pr.H(), pr.W(), pr.Y(), pr.L(), pr.DH(), pr.DW());
    LCEJIT_CU(runtime::cudaDriver().ctxSynchronize());
    msg = errorOf([&] { op.checkDeviceErrors(); }, ErrorKind::DeviceCheck);
    EXPECT_NE(msg.find(want), std::string::npos) << "enqueue: " << msg;
    EXPECT_NO_THROW(op.checkDeviceErrors()) << "an error is reported once";
    // Only row 4096 bad: that one.
    bad[37] = good[37];
    bad[5000] = good[5000];
    upload(pr.y, bad.data(), pr.n * 8);
    msg = errorOf([&] { op.forwardBackward(pr.H(), pr.W(), pr.Y(), pr.DH(), pr.DW()); },
                  ErrorKind::DeviceCheck);
    EXPECT_NE(msg.find("targets[4096] = -7"), std::string::npos) << msg;
    // Good targets: the same op computes the right answer.
    upload(pr.y, good.data(), pr.n * 8);
    pr.dH.poison();
    pr.dW.poison();
    float loss = op.forwardBackward(pr.H(), pr.W(), pr.Y(), pr.DH(), pr.DW());
    pr.expectMatchesReference(loss, "after the bad targets");
  }
}

/// Launches generated kernels of a compiled Program with a wrong block size, too little
/// dynamic shared memory and a wrong grid, through the Driver API: each records its
/// violation (kind, kernel) in the error word and returns — no trap, no hang — and the
/// process then runs a full op correctly on the same context.
TEST(LceGpuHardening, LaunchContractViolationIsReportedAndTheContextStaysUsable) {
  const runtime::CudaDriver &d = runtime::cudaDriver();
  for (int64_t vocab : {int64_t(32000), int64_t(32003)}) {
    SCOPED_TRACE(fmt::format("V = {}", vocab));
    Problem pr(options(vocab), 8191, 601);
    ops::LceJit jit(pr.o);
    ops::ProgramLookup l = jit.lookup(pr.n, ops::LceJit::deviceTarget());
    const plan::Program &p = l.compiled->program;
    std::vector<runtime::Module> modules;
    modules.reserve(l.compiled->parts.size());
    std::vector<const runtime::Module *> moduleOf(p.kernels.size(), nullptr);
    for (size_t i = 0; i < l.compiled->parts.size(); ++i) {
      modules.emplace_back(l.compiled->binaries[i]->cubin);
      for (int32_t k : l.compiled->parts[i].kernels)
        moduleOf[static_cast<size_t>(k)] = &modules.back();
    }
    runtime::Executor ex(p, moduleOf);
    runtime::PreparedRun run = ex.prepare(pr.n);
    DeviceBuffer ws(run.workspaceBytes);
    const CUdeviceptr in[3] = {pr.h.ptr(), pr.w.ptr(), pr.y.ptr()};
    const CUdeviceptr out[3] = {pr.loss.ptr(), pr.dH.ptr(), pr.dW.ptr()};
    runtime::bindRun(run, p, in, 3, out, 3, ws.ptr(), ws.bytes());
    const CUdeviceptr errWord = ws.ptr() + static_cast<CUdeviceptr>(run.errorWordOffset);
    auto readErrors = [&] {
      LCEJIT_CU(d.ctxSynchronize());
      int64_t word[4];
      LCEJIT_CU(d.memcpyDtoH(word, errWord, sizeof(word)));
      return runtime::decodeErrorWord(word);
    };
    // The executor's own launches satisfy every contract.
    pr.dH.poison();
    pr.dW.poison();
    ex.launch(run, nullptr);
    EXPECT_FALSE(readErrors().any()) << "a correct run reports nothing";
    // What the Program computes (its kernels are deterministic: no atomics, partials
    // combined in split order), to compare the run after the violations with, bit for bit.
    float lossBefore = 0;
    std::vector<unsigned char> dHBefore(static_cast<size_t>(pr.dH.bytes())),
        dWBefore(static_cast<size_t>(pr.dW.bytes()));
    pr.loss.downloadTo(&lossBefore, sizeof(float));
    pr.dH.downloadTo(dHBefore.data(), pr.dH.bytes());
    pr.dW.downloadTo(dWBefore.data(), pr.dW.bytes());

    // One launch of the run's list with its geometry changed.
    auto launchChanged = [&](const runtime::PreparedRun::Launch &la, int64_t block,
                             int64_t gridX, int64_t shared) {
      LCEJIT_CU(d.memsetD8Async(errWord, 0, plan::kErrorWordBytes, nullptr));
      void *params[64];
      for (size_t i = 0; i < la.args.size(); ++i)
        params[i] = la.args[i].type == runtime::KernelArg::Type::TensorMap
                        ? const_cast<CUtensorMap *>(&la.maps[static_cast<size_t>(la.args[i].value.i64)])
                        : const_cast<void *>(static_cast<const void *>(&la.args[i].value));
      CUlaunchConfig cfg{};
      cfg.gridDimX = static_cast<unsigned>(gridX);
      cfg.gridDimY = static_cast<unsigned>(la.dims.grid[1]);
      cfg.gridDimZ = static_cast<unsigned>(la.dims.grid[2]);
      cfg.blockDimX = static_cast<unsigned>(block);
      cfg.blockDimY = cfg.blockDimZ = 1;
      cfg.sharedMemBytes = static_cast<unsigned>(shared);
      CUfunction f = moduleOf[static_cast<size_t>(la.kernel)]->function(
          p.kernels[static_cast<size_t>(la.kernel)].name);
      LCEJIT_CU(d.launchKernelEx(&cfg, f, params, nullptr));
      return readErrors();
    };
    const runtime::PreparedRun::Launch *row = nullptr, *gemm = nullptr;
    for (const runtime::PreparedRun::Launch &la : run.launches) {
      const plan::KernelKind kind = p.kernels[static_cast<size_t>(la.kernel)].kind();
      if (!row && kind == plan::KernelKind::Row)
        row = &la;
      if (!gemm && kind == plan::KernelKind::GemmReduce)
        gemm = &la;
    }
    ASSERT_TRUE(row && gemm);
    const std::string gemmName = p.kernels[static_cast<size_t>(gemm->kernel)].name;

    runtime::DeviceErrors e =
        launchChanged(*gemm, gemm->dims.block / 2, gemm->dims.grid[0], gemm->dims.sharedBytes);
    EXPECT_EQ(e.contract, 1) << "block size";
    EXPECT_EQ(e.kernel, gemm->kernel);
    EXPECT_EQ(e.had & 0xFFFF, static_cast<uint64_t>(gemm->dims.block / 2));
    std::string text = runtime::describeContractViolation(p, e);
    EXPECT_NE(text.find("'" + gemmName + "'"), std::string::npos) << text;
    EXPECT_EQ(e.badRow, -1);

    e = launchChanged(*gemm, gemm->dims.block, gemm->dims.grid[0], gemm->dims.sharedBytes / 2);
    EXPECT_EQ(e.contract, 2) << "dynamic shared memory";
    EXPECT_EQ(e.kernel, gemm->kernel);
    EXPECT_EQ(e.had, static_cast<uint64_t>(gemm->dims.sharedBytes / 2));

    e = launchChanged(*gemm, gemm->dims.block, gemm->dims.grid[0] + 1, gemm->dims.sharedBytes);
    EXPECT_EQ(e.contract, 3) << "grid of the GemmReduce (one CTA per row tile and split)";
    EXPECT_EQ(e.kernel, gemm->kernel);

    e = launchChanged(*row, row->dims.block, row->dims.grid[0] + 1, row->dims.sharedBytes);
    EXPECT_EQ(e.contract, 3) << "grid of the row kernel";
    EXPECT_EQ(e.kernel, row->kernel);
    EXPECT_EQ(e.had & 0x7FFFFFFF, static_cast<uint64_t>(row->dims.grid[0] + 1));
    text = runtime::describeContractViolation(p, e);
    EXPECT_NE(text.find("grid of"), std::string::npos) << text;

    // The context is fine: a full op in the same process computes what the Program
    // computed before the violations, bit for bit, and that matches the fp64 reference.
    EXPECT_EQ(d.ctxSynchronize(), CUDA_SUCCESS);
    LinearCrossEntropy op(pr.o);
    pr.dH.poison();
    pr.dW.poison();
    float loss = op.forwardBackward(pr.H(), pr.W(), pr.Y(), pr.DH(), pr.DW());
    std::vector<unsigned char> dHAfter(dHBefore.size()), dWAfter(dWBefore.size());
    pr.dH.downloadTo(dHAfter.data(), pr.dH.bytes());
    pr.dW.downloadTo(dWAfter.data(), pr.dW.bytes());
    EXPECT_EQ(std::memcmp(&loss, &lossBefore, sizeof(float)), 0) << loss << " vs " << lossBefore;
    EXPECT_TRUE(dHAfter == dHBefore) << "dH differs from the run before the violations";
    EXPECT_TRUE(dWAfter == dWBefore) << "dW differs from the run before the violations";
    pr.expectMatchesReference(loss, "after the contract violations");
  }
}

/// [Note: workspace growth]: calls whose N drifts upwards in one bucket (123.5, 129.7, 135.9,
/// 142.0, then 247.0 MiB of workspace) allocate the op's workspace twice (the first call's
/// need, then double), not once per new high, and each still matches the fp64 reference.
TEST(LceGpuHardening, GrowingNReallocatesTheWorkspaceOnlyWhenDoublingIsNotEnough) {
  LinearCrossEntropyOptions o = options(32000);
  LinearCrossEntropy op(o);
  ops::CallPathCounters &c = ops::callPathCounters();
  const int64_t allocs = c.workspaceAllocs.load();
  uint64_t seed = 771;
  for (int64_t n : {int64_t(2000), int64_t(2100), int64_t(2200), int64_t(2300), int64_t(4000)}) {
    SCOPED_TRACE(fmt::format("N = {}", n));
    Problem pr(o, n, seed += 10);
    pr.dH.poison();
    pr.dW.poison();
    const float loss = op.forwardBackward(pr.H(), pr.W(), pr.Y(), pr.DH(), pr.DW());
    pr.expectMatchesReference(loss, fmt::format("N = {}", n));
  }
  EXPECT_EQ(c.workspaceAllocs.load() - allocs, 2)
      << "five growing N: the first call's workspace, then one doubling that holds the rest";
}

/// A warm call (Program loaded, run prepared for this N) allocates nothing on the host,
/// looks nothing up, builds no run; new pointers (another dH) change that not.
TEST(LceGpuHardening, WarmCallAllocatesNothingAndTakesNoSlowPath) {
  for (int64_t vocab : {int64_t(32000), int64_t(32003)}) {
    SCOPED_TRACE(fmt::format("V = {}", vocab));
    Problem pr(options(vocab), 3000, 701);
    LinearCrossEntropy op(pr.o);
    op.prepare(pr.n);
    op.enqueue(pr.H(), pr.W(), pr.Y(), pr.L(), pr.DH(), pr.DW());
    LCEJIT_CU(runtime::cudaDriver().ctxSynchronize());
    DeviceBuffer dH2(pr.dH.bytes());
    ops::CallPathCounters &c = ops::callPathCounters();
    const int64_t lookups = c.programLookups.load(), loads = c.programLoads.load(),
                  builds = c.runBuilds.load();
    // The tensor references (their shapes are vectors) are built outside the counted
    // calls: a framework keeps its own.
    const TensorRef H = pr.H(), W = pr.W(), Y = pr.Y();
    const MutableTensorRef L = pr.L(), DH = pr.DH(), DW = pr.DW();
    EXPECT_EQ(allocationsOf([&] { op.enqueue(H, W, Y, L, DH, DW); }), 0) << "warm enqueue";
    MutableTensorRef other{dH2.data(), pr.o.dtype, {pr.n, pr.o.hidden}, {}};
    EXPECT_EQ(allocationsOf([&] { op.enqueue(H, W, Y, L, other, DW); }), 0)
        << "warm enqueue on another dH";
    float loss = 0;
    EXPECT_EQ(allocationsOf([&] { loss = op.forwardBackward(H, W, Y, DH, DW); }), 0)
        << "warm forwardBackward";
    EXPECT_EQ(allocationsOf([&] { op.checkDeviceErrors(); }), 0);
    EXPECT_EQ(c.programLookups.load(), lookups) << "no Program cache key built";
    EXPECT_EQ(c.programLoads.load(), loads);
    EXPECT_EQ(c.runBuilds.load(), builds);
    pr.expectMatchesReference(loss, "warm call");
    // A new N of the bucket builds its run once, then is warm too.
    Problem small(pr.o, 2999, 702);
    op.forwardBackward(small.H(), small.W(), small.Y(), small.DH(), small.DW());
    EXPECT_EQ(c.runBuilds.load(), builds + 1);
    const TensorRef sH = small.H(), sW = small.W(), sY = small.Y();
    const MutableTensorRef sDH = small.DH(), sDW = small.DW();
    EXPECT_EQ(allocationsOf([&] { op.forwardBackward(sH, sW, sY, sDH, sDW); }), 0)
        << "warm forwardBackward, second N of the bucket";
  }
}

/// [Note: prepare log] LCEJIT_LOG=prepare on the device: a first call without prepare()
/// reports each first-time step (the Program loaded with its modules, the run prepared,
/// the workspace allocated, the run bound with its tensor maps encoded) with its time; the
/// same call again reports nothing; a call on another H re-encodes the maps of H only.
TEST(LceGpuHardening, PrepareLogReportsEachFirstTimeStepOnce) {
  lcejit::testing::ScopedEnv knob{{"LCEJIT_LOG", "prepare"}};
  Problem pr(options(32000), 3000, 951); // wgmma on sm_90: operands through tensor maps
  LinearCrossEntropy op(pr.o);
  ::testing::internal::CaptureStderr();
  float loss = op.forwardBackward(pr.H(), pr.W(), pr.Y(), pr.DH(), pr.DW());
  const std::string first = ::testing::internal::GetCapturedStderr();
  const std::string ms = R"([0-9]+\.[0-9]{2} ms)";
  for (const std::string &line :
       {R"(lcejit: prepare N=3000: Program '\S+' of bucket \[1025, 4096\] loaded, [0-9]+ modules, in )" +
            ms + R"( \(lookup )" + ms + R"(: (planned|cached), binaries from (compiled|disk|memory)\)\n)",
        R"(lcejit: prepare N=3000: run of Program '\S+' \(overwrites the gradients\) prepared in )" +
            ms + R"(: [0-9]+ launches, [0-9]+ bytes of workspace\n)",
        R"(lcejit: prepare: workspace of [0-9]+ bytes allocated in )" + ms +
            R"( \([0-9]+ needed, 0 held before\)\n)",
        R"(lcejit: prepare N=3000: run bound, [1-9][0-9]* tensor maps encoded in )" + ms + "\n"})
    EXPECT_TRUE(std::regex_search(first, std::regex(line))) << line << "\nnot in:\n" << first;
  pr.expectMatchesReference(loss, "first call");
  ::testing::internal::CaptureStderr();
  op.forwardBackward(pr.H(), pr.W(), pr.Y(), pr.DH(), pr.DW());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "a steady call logs nothing";
  DeviceBuffer h2(pr.h.bytes());
  std::vector<uint8_t> hostH(static_cast<size_t>(pr.h.bytes()));
  pr.h.downloadTo(hostH.data(), pr.h.bytes());
  upload(h2, hostH.data(), pr.h.bytes());
  ::testing::internal::CaptureStderr();
  op.forwardBackward({h2.data(), pr.o.dtype, {pr.n, pr.o.hidden}, {}}, pr.W(), pr.Y(), pr.DH(),
                     pr.DW());
  const std::string moved = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(std::regex_match(
      moved, std::regex(R"(lcejit: prepare N=3000: run bound, [1-9][0-9]* tensor maps encoded in )" +
                        ms + "\n")))
      << "another H: its maps only\n" << moved;
}

/// prepare(N), then enqueue captured into a CUDA graph on a non-default stream; three
/// replays with new inputs each time, every replay's loss, dH and dW against the fp64
/// reference of its inputs. forwardBackward during a capture is refused up front.
TEST(LceGpuHardening, EnqueueCapturedInACudaGraphReplaysCorrectly) {
  const runtime::CudaDriver &d = runtime::cudaDriver();
  for (int64_t vocab : {int64_t(32000), int64_t(32003)}) {
    SCOPED_TRACE(fmt::format("V = {}", vocab));
    Problem pr(options(vocab), 2048, 801);
    LinearCrossEntropy op(pr.o);
    op.prepare(pr.n);
    CUstream s = nullptr;
    LCEJIT_CU(d.streamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    LCEJIT_CU(d.streamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    std::string refused;
    try {
      op.enqueue(pr.H(), pr.W(), pr.Y(), pr.L(), pr.DH(), pr.DW(), s);
      try {
        op.forwardBackward(pr.H(), pr.W(), pr.Y(), pr.DH(), pr.DW(), s);
      } catch (const Error &e) {
        refused = e.what();
      }
    } catch (...) {
      d.streamEndCapture(s, &graph);
      throw;
    }
    LCEJIT_CU(d.streamEndCapture(s, &graph));
    EXPECT_NE(refused.find("cannot be captured"), std::string::npos) << refused;
    LCEJIT_CU(d.graphInstantiateWithFlags(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      SCOPED_TRACE(fmt::format("replay {}", replay));
      pr.fill(810 + 10 * replay); // new H, W and targets, same addresses
      pr.loss.poison();
      pr.dH.poison();
      pr.dW.poison();
      LCEJIT_CU(d.ctxSynchronize());
      LCEJIT_CU(d.graphLaunch(exec, s));
      LCEJIT_CU(d.streamSynchronize(s));
      EXPECT_NO_THROW(op.checkDeviceErrors());
      pr.expectMatchesReference(pr.loss.download<float>()[0], "graph replay");
    }
    // A bad target inside a replay is reported like one of enqueue.
    std::vector<int64_t> yy(static_cast<size_t>(pr.n));
    pr.y.downloadTo(yy.data(), pr.n * 8);
    yy[1234] = vocab + 1;
    yy[77] = -2;
    upload(pr.y, yy.data(), pr.n * 8);
    LCEJIT_CU(d.graphLaunch(exec, s));
    LCEJIT_CU(d.streamSynchronize(s));
    std::string msg = errorOf([&] { op.checkDeviceErrors(); }, ErrorKind::DeviceCheck);
    EXPECT_NE(msg.find("targets[77] = -2"), std::string::npos) << msg;
    // After the graph, eager calls of the op still work (and are ordered after it).
    pr.fill(899);
    LCEJIT_CU(d.ctxSynchronize()); // the fill ran on the legacy stream, s does not wait for it
    float loss = op.forwardBackward(pr.H(), pr.W(), pr.Y(), pr.DH(), pr.DW(), s);
    pr.expectMatchesReference(loss, "eager call after the graph");
    LCEJIT_CU(d.graphExecDestroy(exec));
    LCEJIT_CU(d.graphDestroy(graph));
    LCEJIT_CU(d.streamDestroy(s));
  }
}

/// Gradient accumulation (issue 7) on the warm path: after prepare(N) and one plain call,
/// enqueue and forwardBackward with Accumulate allocate nothing, look nothing up and build
/// no run (the mask is an argument of the prepared run, rewritten in place), and neither
/// does switching back to writing; each result is the prefill plus the fp64 gradients (or
/// the gradients, written). Then an accumulating enqueue captured in a CUDA graph: the
/// graph keeps the mask of its capture, so two replays add the gradient twice to dW while
/// dH, not accumulated, is written.
TEST(LceGpuHardening, WarmAccumulateCallAllocatesNothingAndAGraphKeepsItsMask) {
  const runtime::CudaDriver &d = runtime::cudaDriver();
  for (int64_t vocab : {int64_t(32000), int64_t(32003)}) {
    SCOPED_TRACE(fmt::format("V = {}", vocab));
    Problem pr(options(vocab), 3000, 901);
    const int64_t nd = pr.n * pr.o.hidden, vd = pr.o.vocab * pr.o.hidden;
    LinearCrossEntropy op(pr.o);
    op.prepare(pr.n);
    op.enqueue(pr.H(), pr.W(), pr.Y(), pr.L(), pr.DH(), pr.DW());
    LCEJIT_CU(d.ctxSynchronize());
    RefKernels &k = RefKernels::get();
    // The RMS of the gradients, to prefill with values of their size (never zeros).
    GpuReference g = gpuReference(pr.o, pr.h, pr.w, pr.y, pr.n);
    const double rmsH = k.compare(pr.dH, pr.o.dtype, g.dH, nd).refNorm / std::sqrt(double(nd));
    const double rmsW =
        k.compare(pr.dW, pr.o.gradWeightDType, g.dW, vd).refNorm / std::sqrt(double(vd));
    auto prefill = [&](uint64_t seed) {
      k.fillRandom(pr.dH, pr.o.dtype, nd, seed, std::sqrt(3.0) * rmsH);
      k.fillRandom(pr.dW, pr.o.gradWeightDType, vd, seed + 1, std::sqrt(3.0) * rmsW);
      LCEJIT_CU(d.ctxSynchronize());
    };
    // Expected: `times` · G, plus the current contents of dH / dW where `accH` / `accW`.
    auto expected = [&](double times, bool accH, bool accW) {
      GpuReference r = gpuReference(pr.o, pr.h, pr.w, pr.y, pr.n);
      k.scale(r.dH, times, nd);
      k.scale(r.dW, times, vd);
      if (accH)
        k.scaleAdd(r.dH, 1.0, pr.dH, pr.o.dtype, nd);
      if (accW)
        k.scaleAdd(r.dW, 1.0, pr.dW, pr.o.gradWeightDType, vd);
      LCEJIT_CU(d.ctxSynchronize());
      return r;
    };
    auto check = [&](const GpuReference &want, const std::string &what) {
      const Comparison ch = k.compare(pr.dH, pr.o.dtype, want.dH, nd);
      const Comparison cw = k.compare(pr.dW, pr.o.gradWeightDType, want.dW, vd);
      EXPECT_EQ(ch.nonFinite, 0) << what << ": dH";
      EXPECT_EQ(cw.nonFinite, 0) << what << ": dW";
      EXPECT_LE(ch.relError, hiddenGradTolerance(pr.o.dtype, false, false, ch.floor, ch.bf16Floor))
          << what << ": dH";
      EXPECT_LE(cw.relError,
                gradTolerance(pr.o.gradWeightDType, false, false, cw.floor, cw.bf16Floor))
          << what << ": dW";
    };

    ops::CallPathCounters &c = ops::callPathCounters();
    const int64_t lookups = c.programLookups.load(), loads = c.programLoads.load(),
                  builds = c.runBuilds.load();
    const TensorRef H = pr.H(), W = pr.W(), Y = pr.Y();
    const MutableTensorRef L = pr.L(), DH = pr.DH(), DW = pr.DW();
    const Accumulate both{true, true};

    prefill(911);
    GpuReference want = expected(1.0, true, true);
    EXPECT_EQ(allocationsOf([&] { op.enqueue(H, W, Y, L, DH, DW, nullptr, GradScale{}, both); }),
              0)
        << "warm accumulating enqueue";
    LCEJIT_CU(d.ctxSynchronize());
    EXPECT_NO_THROW(op.checkDeviceErrors());
    check(want, "warm accumulating enqueue");

    prefill(921);
    want = expected(1.0, true, true);
    float loss = 0;
    EXPECT_EQ(allocationsOf([&] {
                loss = op.forwardBackward(H, W, Y, DH, DW, nullptr, GradScale{}, both);
              }),
              0)
        << "warm accumulating forwardBackward";
    EXPECT_LE(std::abs(double(loss) - g.loss), kLossTolerance * std::abs(g.loss));
    check(want, "warm accumulating forwardBackward");

    prefill(931); // a plain call again: written, whatever the buffers held
    want = expected(1.0, false, false);
    EXPECT_EQ(allocationsOf([&] { op.enqueue(H, W, Y, L, DH, DW); }), 0)
        << "warm plain enqueue after accumulating ones";
    LCEJIT_CU(d.ctxSynchronize());
    check(want, "plain enqueue after accumulating ones");
    EXPECT_EQ(c.programLookups.load(), lookups) << "no Program cache key built";
    EXPECT_EQ(c.programLoads.load(), loads);
    EXPECT_EQ(c.runBuilds.load(), builds) << "accumulating shares the prepared run";

    // Captured: the graph keeps Accumulate{.gradWeight = true} of its capture.
    CUstream s = nullptr;
    LCEJIT_CU(d.streamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    LCEJIT_CU(d.streamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    try {
      op.enqueue(H, W, Y, L, DH, DW, s, GradScale{}, Accumulate{false, true});
    } catch (...) {
      d.streamEndCapture(s, &graph);
      throw;
    }
    LCEJIT_CU(d.streamEndCapture(s, &graph));
    LCEJIT_CU(d.graphInstantiateWithFlags(&exec, graph, 0));
    prefill(941);
    pr.dH.poison(); // written by every replay
    want = expected(2.0, false, true);
    k.scale(want.dH, 0.5, nd); // dH: G once
    LCEJIT_CU(d.ctxSynchronize());
    for (int replay = 0; replay < 2; ++replay) {
      LCEJIT_CU(d.graphLaunch(exec, s));
      LCEJIT_CU(d.streamSynchronize(s));
      EXPECT_NO_THROW(op.checkDeviceErrors());
    }
    check(want, "two replays of a captured accumulating enqueue (dW += 2 G, dH = G)");
    // A plain eager call afterwards writes again (the graph's mask is its own).
    prefill(951);
    want = expected(1.0, false, false);
    op.forwardBackward(H, W, Y, DH, DW, s);
    check(want, "eager plain call after the graph");
    LCEJIT_CU(d.graphExecDestroy(exec));
    LCEJIT_CU(d.graphDestroy(graph));
    LCEJIT_CU(d.streamDestroy(s));
  }
}

} // namespace
} // namespace lcejit::gputest
