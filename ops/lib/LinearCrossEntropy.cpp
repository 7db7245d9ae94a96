//===- LinearCrossEntropy.cpp - The public op ------------------------------===//

#include "lcejit/LinearCrossEntropy.h"
#include "ops/lib/LceJit.h"
#include "ops/lib/Reference.h"
#include "compiler/support/Check.h"
#include "compiler/support/Knobs.h"
#include "compiler/plan/SchedulePolicy.h"
#include "runtime/CudaDriver.h"
#include "runtime/Executor.h"
#include "runtime/Module.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <map>
#include <functional>
#include <mutex>
#include <optional>

namespace lcejit {

namespace {

std::string shapeStr(const std::vector<int64_t> &s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

std::string pointerStr(const void *p) { return fmt::format("{}", p); }

// [Note: prepare log] LCEJIT_LOG=prepare prints one line on stderr for each piece of host
// work that a call does only the first time: the Program looked up (for its bucket) and
// its modules loaded, a run prepared (for its N and for whether it overwrites dW), the
// workspace allocated or grown, and a bind that encoded tensor maps (new pointers). Each
// line has its wall time, so a first call's host cost reads as their sum (the process's
// first call on a warm disk cache: docs/performance.md, session 24). A steady call does
// none of them; its only addition is the knob's read in the bind.
using PrepareClock = std::chrono::steady_clock;
double msSince(PrepareClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(PrepareClock::now() - t0).count();
}
bool prepareLogOn() { return knobs::logEnabled(knobs::LogTopic::Prepare); }
std::string bucketStr(const plan::Program &p) {
  return p.bucket > 0 ? fmt::format("[{}, {}]", p.bucketLow, p.bucket) : std::string("any N");
}

std::string shapeStr(std::initializer_list<int64_t> s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

/// Checks one tensor argument against an expected dtype, shape, contiguity and alignment.
/// Allocates nothing unless it throws (the warm call path, [Note: the warm path]).
template <typename Ref>
void checkTensor(const char *name, const Ref &t, DType dtype, std::initializer_list<int64_t> shape,
                 int64_t alignment, bool mayBeNull) {
  LCEJIT_CHECK_ARG(t.dtype == dtype, "{}.dtype is {}, expected {}", name, dtypeName(t.dtype),
                   dtypeName(dtype));
  LCEJIT_CHECK_ARG(std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()),
                   "{}.shape is {}, expected {}", name, shapeStr(t.shape), shapeStr(shape));
  if (!t.strides.empty()) {
    // Row-major contiguous: strides[i] = product of shape[i + 1 ..].
    bool contiguous = t.strides.size() == t.shape.size();
    int64_t expect = 1;
    for (size_t i = t.shape.size(); contiguous && i-- > 0;) {
      contiguous = t.strides[i] == expect;
      expect *= t.shape[i];
    }
    if (!contiguous) {
      std::vector<int64_t> want(t.shape.size(), 1);
      for (int64_t i = static_cast<int64_t>(t.shape.size()) - 2; i >= 0; --i)
        want[static_cast<size_t>(i)] =
            want[static_cast<size_t>(i + 1)] * t.shape[static_cast<size_t>(i + 1)];
      LCEJIT_CHECK_ARG(false,
                       "{}.strides are {}: only contiguous row-major tensors (strides {}) are "
                       "supported",
                       name, shapeStr(t.strides), shapeStr(want));
    }
  }
  if (!mayBeNull)
    LCEJIT_CHECK_ARG(t.data != nullptr, "{}.data is null", name);
  LCEJIT_CHECK_ARG(reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(alignment) == 0,
                   "{}.data = {} is not {}-byte aligned", name, pointerStr(t.data), alignment);
}

/// [Note: the op's context] Makes `ctx` current for the scope and restores the caller's
/// context after it, so that an op bound to one device works whatever the calling thread
/// has current (LinearCrossEntropyOptions::device). One cuCtxGetCurrent per call, and a
/// switch only when the contexts differ.
class ContextScope {
public:
  explicit ContextScope(CUcontext ctx) {
    const runtime::CudaDriver &d = runtime::cudaDriver();
    LCEJIT_CU(d.ctxGetCurrent(&previous_));
    if (previous_ != ctx) {
      LCEJIT_CU(d.ctxSetCurrent(ctx));
      switched_ = true;
    }
  }
  ~ContextScope() {
    if (switched_)
      runtime::cudaDriver().ctxSetCurrent(previous_); // best effort while unwinding
  }
  ContextScope(const ContextScope &) = delete;
  ContextScope &operator=(const ContextScope &) = delete;

private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};


/// A Program loaded into the current context, with the runs it has prepared.
struct LoadedProgram {
  std::shared_ptr<const ops::CompiledProgram> compiled;
  std::vector<runtime::Module> modules; ///< one per module part
  std::unique_ptr<runtime::Executor> executor;
  /// Prepared runs by N ([Note: prepared runs] in runtime/Executor.h), most recently
  /// built last; at most kRunsPerProgram (the oldest is dropped).
  std::vector<std::unique_ptr<runtime::PreparedRun>> runs;
  static constexpr size_t kRunsPerProgram = 8;
  /// [Note: values scaled in place] A slab-only Program: whether it serves a call of N rows
  /// that overwrites dW or not, keyed by 2 N + outputFree, most recent last (at most
  /// 2 x kRunsPerProgram entries).
  std::vector<std::pair<int64_t, bool>> serves;
};

/// Which of the op's graphs a call runs (LinearCrossEntropy::Impl::jitFor); the Recompute
/// kinds: the same graph's recompute Program, for the calls a slab-only Program does not
/// serve ([Note: values scaled in place] in plan/Program.h).
enum class CallKind : uint8_t {
  Plain = 0,
  Forward = 1,
  Scaled = 2,
  PlainRecompute = 3,
  ScaledRecompute = 4
};
constexpr size_t kCallKinds = 5;

/// [Note: the warm path] What a call needs, per op, kind and bucket: found by comparing
/// integers (N against the bucket's bounds, the knob generation), so a call whose Program
/// is loaded builds no cache key, hashes nothing and allocates nothing. A miss takes the
/// slow path once (the process-wide Program cache, compile, module load) and appends here.
struct CallPlan {
  int64_t lo = 0, hi = 0; ///< the bucket: N in [lo, hi] (hi = 0: any N, an unbucketed plan)
  int64_t knobGeneration = 0;
  LoadedProgram *loaded = nullptr;
};

} // namespace

struct LinearCrossEntropy::Impl {
  std::unique_ptr<ops::LceJit> jit;
  std::unique_ptr<ops::LceJit> forwardJit; ///< forward(): the loss-only graph, made on first use
  std::unique_ptr<ops::LceJit> scaledJit;  ///< calls with a GradScale other than 1

  ops::LceJit &jitFor(bool gradients, bool scaled) {
    if (!gradients) {
      if (!forwardJit)
        forwardJit = std::make_unique<ops::LceJit>(
            jit->options(), ops::dumpSinkFromKnobs("lce-fwd"), /*forwardOnly=*/true);
      return *forwardJit;
    }
    if (!scaled)
      return *jit;
    if (!scaledJit)
      scaledJit = std::make_unique<ops::LceJit>(jit->options(),
                                                ops::dumpSinkFromKnobs("lce-scaled"),
                                                /*forwardOnly=*/false, /*scaledGradients=*/true);
    return *scaledJit;
  }
  std::unique_ptr<ops::LceJit> recomputeJit, scaledRecomputeJit; ///< made on first use
  std::mutex recomputeJitMu;
  ops::LceJit &jitOf(CallKind kind) {
    switch (kind) {
    case CallKind::Forward: return jitFor(false, false);
    case CallKind::Scaled: return jitFor(true, true);
    case CallKind::PlainRecompute:
    case CallKind::ScaledRecompute: {
      const bool scaled = kind == CallKind::ScaledRecompute;
      std::unique_ptr<ops::LceJit> &j = scaled ? scaledRecomputeJit : recomputeJit;
      // Also asked outside `mu` (workspaceBytes, scheduleSummary, prepare's plan).
      std::lock_guard<std::mutex> lock(recomputeJitMu);
      if (!j)
        j = std::make_unique<ops::LceJit>(
            jit->options(), ops::dumpSinkFromKnobs(scaled ? "lce-scaled-recompute" : "lce-recompute"),
            /*forwardOnly=*/false, scaled, /*recompute=*/true);
      return *j;
    }
    case CallKind::Plain: break;
    }
    return jitFor(true, false);
  }
  /// The recompute Program of N's bucket, planned (not compiled) on first use.
  std::function<const plan::Program &()> recomputeProgram(int64_t n, int device) {
    auto hold = std::make_shared<ops::ProgramLookup>(); // keeps the answer alive
    return [this, n, device, hold]() -> const plan::Program & {
      if (!hold->compiled)
        *hold = jitOf(CallKind::PlainRecompute).lookup(n, callTarget(device),
                                                      /*compile=*/false);
      return hold->compiled->program;
    };
  }
  /// [Note: values scaled in place] Whether a call of N rows (overwriting dW or not) runs
  /// the recompute Program instead of `p`, a slab-only Program that does not serve it.
  static bool needsRecompute(const plan::Program &p, int64_t n, bool outputFree) {
    return p.schedule.slabOnly && !plan::servesCall(p, p.runSchedule(n, outputFree));
  }
  /// The op's context ([Note: the op's context]): the primary context of
  /// options.device, or the one current at the first GPU call; set once.
  CUcontext ctx = nullptr;
  /// Enters the op's context for a GPU call (with `mu` held); nothing without a GPU, so
  /// that argument errors come first there.
  void enter(std::optional<ContextScope> &scope, int device) {
    if (runtime::cudaAvailable())
      scope.emplace(context(device));
  }
  /// The target a call plans for: the op's device (its context, or options.device's
  /// primary context before the first call), the current GPU for device -1 before the
  /// first call, or the default H200 without a GPU.
  plan::Target callTarget(int device) {
    if (!runtime::cudaAvailable())
      return ops::LceJit::defaultTarget();
    CUcontext c = ctx;
    if (!c && device >= 0)
      c = context(device);
    if (!c)
      return ops::LceJit::deviceTarget();
    ContextScope scope(c);
    return ops::LceJit::deviceTarget();
  }
  CUcontext context(int device) {
    if (ctx)
      return ctx;
    if (device >= 0) {
      std::lock_guard<std::mutex> lock(ctxMu);
      if (ctx)
        return ctx;
      int count = 0;
      LCEJIT_CU(runtime::cudaDriver().deviceGetCount(&count));
      LCEJIT_CHECK_ARG(device < count,
                       "options.device = {} is out of range: this machine has {} CUDA "
                       "device(s)",
                       device, count);
      ctx = runtime::primaryContext(device);
    } else {
      std::lock_guard<std::mutex> lock(ctxMu);
      if (ctx)
        return ctx;
      ctx = runtime::ensureContext();
    }
    return ctx;
  }
  std::mutex ctxMu; ///< guards the first setting of ctx
  // Device state, created on the first GPU call.
  bool deviceReady = false;
  plan::Target target;
  std::map<const ops::CompiledProgram *, std::unique_ptr<LoadedProgram>> loaded;
  std::vector<CallPlan> plans[kCallKinds]; ///< per CallKind ([Note: the warm path])
  CUdeviceptr workspace = 0; ///< the op's own allocation
  int64_t workspaceBytes = 0;
  CUdeviceptr userWorkspace = 0; ///< setWorkspace(): caller-owned, used instead
  int64_t userWorkspaceBytes = 0;
  CUdeviceptr lossScratch = 0;
  int64_t *hostError = nullptr; ///< pinned int64[4]: the error word of the last run
  float *hostLoss = nullptr;    ///< pinned f32
  /// The Program of the last enqueued call (names the kernel of a contract violation).
  const plan::Program *lastProgram = nullptr;
  /// A call was captured into a CUDA graph: the graph holds the workspace's address, so a
  /// workspace that must grow is kept (in `retired`) until the op is destroyed.
  bool captured = false;
  std::vector<CUdeviceptr> retired;
  /// [Note: one op, many threads and streams] Every call holds `mu` while it enqueues
  /// (forwardBackward for the whole call, readback included), makes its stream wait for
  /// `lastDone` (recorded at the end of the previous call, on whatever stream that ran),
  /// and records `lastDone` on its own stream when it is enqueued. So calls on different
  /// streams run one after the other on the device and never share the workspace, the
  /// loss scratch or the error word at the same time; memory is freed only after
  /// `lastDone` has completed.
  std::mutex mu;
  CUevent lastDone = nullptr;
  bool anyCall = false;

  ~Impl() {
    if (!deviceReady)
      return;
    std::optional<ContextScope> scope;
    try {
      scope.emplace(ctx);
    } catch (...) {
      return; // the context is gone, and with it everything below
    }
    const runtime::CudaDriver &d = runtime::cudaDriver();
    // Best effort: errors while tearing down are not reported. Work still queued may
    // use the memory below: wait for the last call first.
    if (lastDone) {
      if (anyCall)
        d.eventSynchronize(lastDone);
      d.eventDestroy(lastDone);
    }
    if (workspace)
      d.memFree(workspace);
    for (CUdeviceptr p : retired)
      d.memFree(p);
    if (lossScratch)
      d.memFree(lossScratch);
    if (hostError)
      d.memFreeHost(hostError);
    if (hostLoss)
      d.memFreeHost(hostLoss);
  }

  void ensureDevice() {
    if (deviceReady)
      return;
    target = ops::LceJit::deviceTarget(); // ensures the context; rejects old GPUs
    const runtime::CudaDriver &d = runtime::cudaDriver();
    // All or nothing: whatever was allocated is freed again if a later step fails, so a
    // failed first call leaks nothing and the next call starts over.
    void *err = nullptr, *loss = nullptr;
    CUdeviceptr scratch = 0;
    CUevent done = nullptr;
    try {
      LCEJIT_CU(d.memAllocHost(&err, plan::kErrorWordBytes));
      LCEJIT_CU(d.memAllocHost(&loss, sizeof(float)));
      LCEJIT_CU(d.memAlloc(&scratch, 256));
      LCEJIT_CU(d.eventCreate(&done, CU_EVENT_DISABLE_TIMING));
    } catch (...) {
      if (err)
        d.memFreeHost(err);
      if (loss)
        d.memFreeHost(loss);
      if (scratch)
        d.memFree(scratch);
      throw;
    }
    hostError = static_cast<int64_t *>(err);
    std::memset(hostError, 0, plan::kErrorWordBytes);
    hostLoss = static_cast<float *>(loss);
    lossScratch = scratch;
    lastDone = done;
    deviceReady = true;
  }

  LoadedProgram &load(const std::shared_ptr<const ops::CompiledProgram> &cp) {
    auto it = loaded.find(cp.get());
    if (it != loaded.end())
      return *it->second;
    auto lp = std::make_unique<LoadedProgram>();
    lp->compiled = cp;
    LCEJIT_CHECK(cp->binaries.size() == cp->parts.size() && !cp->parts.empty(),
                 "program '{}' has {} binaries for {} module parts", cp->program.name,
                 cp->binaries.size(), cp->parts.size());
    lp->modules.reserve(cp->parts.size());
    std::vector<const runtime::Module *> moduleOfKernel(cp->program.kernels.size(), nullptr);
    std::vector<std::string> entryOfKernel(cp->program.kernels.size());
    for (size_t i = 0; i < cp->parts.size(); ++i) {
      lp->modules.emplace_back(cp->binaries[i]->cubin);
      for (size_t j = 0; j < cp->parts[i].kernels.size(); ++j) {
        const auto k = static_cast<size_t>(cp->parts[i].kernels[j]);
        moduleOfKernel[k] = &lp->modules.back();
        entryOfKernel[k] = cp->parts[i].kernelNames[j]; // [Note: module parts]: may be shared
      }
    }
    lp->executor = std::make_unique<runtime::Executor>(cp->program, std::move(moduleOfKernel),
                                                       std::move(entryOfKernel));
    ops::callPathCounters().programLoads.fetch_add(1, std::memory_order_relaxed);
    return *loaded.emplace(cp.get(), std::move(lp)).first->second;
  }

  /// The loaded Program of a call with N rows ([Note: the warm path]); the slow path
  /// (lookup, compile, load) only on a miss, which `capturing` forbids.
  LoadedProgram &loadedFor(CallKind kind, int64_t n, bool capturing) {
    std::vector<CallPlan> &ps = plans[static_cast<size_t>(kind)];
    const int64_t gen = knobs::generation();
    for (const CallPlan &p : ps)
      if (p.knobGeneration == gen && n >= p.lo && (p.hi == 0 || n <= p.hi))
        return *p.loaded;
    LCEJIT_CHECK_ARG(!capturing,
                     "enqueue during CUDA graph capture with N = {}: the op has not loaded the "
                     "kernels of its bucket yet (loading is not capturable); call prepare({}) "
                     "first (for forward() or a GradScale other than 1, one call of that kind)",
                     n, n);
    ops::LceJit &j = jitOf(kind);
    const PrepareClock::time_point t0 = PrepareClock::now();
    ops::ProgramLookup l = j.lookup(n, target);
    const double lookupMs = msSince(t0);
    const bool wasLoaded = loaded.count(l.compiled.get()) > 0;
    const PrepareClock::time_point t1 = PrepareClock::now();
    LoadedProgram &lp = load(l.compiled);
    const plan::Program &prog = l.compiled->program;
    if (prepareLogOn()) // [Note: prepare log]
      fmt::print(stderr,
                 "lcejit: prepare N={}: Program '{}' of bucket {} {} in {:.2f} ms (lookup "
                 "{:.2f} ms: {}, binaries from {})\n",
                 n, prog.name, bucketStr(prog),
                 wasLoaded ? "already loaded"
                           : fmt::format("loaded, {} modules,", lp.modules.size()),
                 msSince(t1), lookupMs, l.planned ? "planned" : "cached",
                 runtime::cacheOriginName(l.binaryOrigin));
    CallPlan p;
    p.lo = prog.bucket > 0 ? prog.bucketLow : 0;
    p.hi = prog.bucket > 0 ? prog.bucket : 0;
    p.knobGeneration = gen;
    p.loaded = &lp;
    ps.push_back(p);
    return lp;
  }

  /// The loaded Program of a gradient call ([Note: values scaled in place]): the kind's,
  /// or the recompute Program of its bucket where that is slab-only and does not serve the
  /// call (decided once per N and outputFree, then found by comparing integers).
  LoadedProgram &programFor(CallKind kind, int64_t n, bool outputFree, bool capturing) {
    LoadedProgram &lp = loadedFor(kind, n, capturing);
    const plan::Program &p = lp.executor->program();
    if (!p.schedule.slabOnly)
      return lp;
    const int64_t key = 2 * n + (outputFree ? 1 : 0);
    bool serves = false, found = false;
    for (const auto &[k, v] : lp.serves)
      if (k == key) {
        serves = v;
        found = true;
      }
    if (!found) {
      serves = !needsRecompute(p, n, outputFree);
      if (lp.serves.size() >= 2 * LoadedProgram::kRunsPerProgram)
        lp.serves.erase(lp.serves.begin());
      lp.serves.emplace_back(key, serves);
    }
    if (serves)
      return lp;
    return loadedFor(kind == CallKind::Scaled ? CallKind::ScaledRecompute
                                              : CallKind::PlainRecompute,
                     n, capturing);
  }

  /// The prepared run of N (built on a miss: host work and allocation, once per N and
  /// `outputFree`: whether the call overwrites the gradient whose memory may hold the
  /// stored values, [Note: stored values in dW]).
  runtime::PreparedRun &runFor(LoadedProgram &lp, int64_t n, bool outputFree = true) {
    // A Program that never keeps them there, and a call whose schedule does not, share
    // one run: a call that adds to dW takes any run of N without slabs.
    if (lp.executor->program().schedule.slabValues < 0)
      outputFree = true;
    for (auto &r : lp.runs)
      if (r->n == n && (outputFree ? r->outputFree : r->schedule.slabGroup == 0))
        return *r;
    if (lp.runs.size() >= LoadedProgram::kRunsPerProgram)
      lp.runs.erase(lp.runs.begin());
    const PrepareClock::time_point t0 = PrepareClock::now();
    lp.runs.push_back(
        std::make_unique<runtime::PreparedRun>(lp.executor->prepare(n, outputFree)));
    ops::callPathCounters().runBuilds.fetch_add(1, std::memory_order_relaxed);
    if (prepareLogOn()) // [Note: prepare log]
      fmt::print(stderr,
                 "lcejit: prepare N={}: run of Program '{}' ({} the gradients) prepared in "
                 "{:.2f} ms: {} launches, {} bytes of workspace\n",
                 n, lp.executor->program().name, outputFree ? "overwrites" : "adds to",
                 msSince(t0), lp.runs.back()->launches.size(), lp.runs.back()->workspaceBytes);
    return *lp.runs.back();
  }

  /// Whether `stream` is capturing into a CUDA graph (cuStreamIsCapturing: legal during
  /// a capture, no synchronization).
  static bool isCapturing(CUstream stream) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    LCEJIT_CU(runtime::cudaDriver().streamIsCapturing(stream, &status));
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
  }

  /// [Note: one op, many threads and streams]: the call's stream waits for the previous
  /// call. In a capture the wait is an external event-wait node of the graph: each replay
  /// waits for whatever call of the op recorded `lastDone` last.
  void waitForPrevious(CUstream stream, bool capturing) {
    if (capturing)
      LCEJIT_CU(runtime::cudaDriver().streamWaitEvent(stream, lastDone, CU_EVENT_WAIT_EXTERNAL));
    else if (anyCall)
      LCEJIT_CU(runtime::cudaDriver().streamWaitEvent(stream, lastDone, 0));
  }

  /// Marks the end of a call on `stream` ([Note: one op, many threads and streams]); in a
  /// capture, as an external event-record node that each replay executes.
  void recordDone(CUstream stream, bool capturing = false) {
    if (capturing) {
      LCEJIT_CU(runtime::cudaDriver().eventRecordWithFlags(lastDone, stream,
                                                          CU_EVENT_RECORD_EXTERNAL));
      captured = true;
    } else {
      LCEJIT_CU(runtime::cudaDriver().eventRecord(lastDone, stream));
    }
    anyCall = true;
  }

  void ensureWorkspace(int64_t bytes, bool capturing) {
    if (bytes <= workspaceBytes)
      return;
    const int64_t held = workspaceBytes, budget = jit->options().workspaceBudgetBytes;
    LCEJIT_CHECK_ARG(!capturing,
                     "enqueue during CUDA graph capture needs {} bytes of workspace, the op has "
                     "{} (allocating is not capturable): call prepare(N) with the largest N "
                     "first, or give it memory with setWorkspace()",
                     bytes, workspaceBytes);
    const runtime::CudaDriver &d = runtime::cudaDriver();
    if (workspace) {
      // The old buffer may still be in use by the previous call, on any stream; a captured
      // graph keeps its address for good.
      if (anyCall)
        LCEJIT_CU(d.eventSynchronize(lastDone));
      if (captured)
        retired.push_back(workspace);
      else
        LCEJIT_CU(d.memFree(workspace));
      workspace = 0;
      workspaceBytes = 0;
    }
    const int64_t grown = ops::grownWorkspaceBytes(held, bytes, budget);
    const PrepareClock::time_point t0 = PrepareClock::now();
    LCEJIT_CU(d.memAlloc(&workspace, static_cast<size_t>(grown)));
    workspaceBytes = grown;
    ops::callPathCounters().workspaceAllocs.fetch_add(1, std::memory_order_relaxed);
    if (prepareLogOn()) // [Note: prepare log]
      fmt::print(stderr,
                 "lcejit: prepare: workspace of {} bytes allocated in {:.2f} ms ({} needed, "
                 "{} held before)\n",
                 grown, msSince(t0), bytes, held);
  }
};

LinearCrossEntropy::LinearCrossEntropy(const LinearCrossEntropyOptions &options)
    : impl_(std::make_unique<Impl>()) {
  impl_->jit = std::make_unique<ops::LceJit>(options, ops::dumpSinkFromKnobs("lce"));
}

LinearCrossEntropy::~LinearCrossEntropy() = default;

const LinearCrossEntropyOptions &LinearCrossEntropy::options() const { return impl_->jit->options(); }

int64_t LinearCrossEntropy::bucketOf(int64_t n) {
  LCEJIT_CHECK_ARG(n >= 0, "N must be >= 0, got {}", n);
  return plan::bucketOf(n);
}

int64_t LinearCrossEntropy::compileCount() { return ops::LceJit::programCompileCount(); }

bool LinearCrossEntropy::prepare(int64_t n) {
  LCEJIT_CHECK_ARG(n >= 0, "N must be >= 0, got {}", n);
  const plan::Target target = impl_->callTarget(options().device);
  const PrepareClock::time_point t0 = PrepareClock::now();
  const ops::ProgramLookup l = impl_->jit->lookup(n, target);
  if (prepareLogOn()) // [Note: prepare log]
    fmt::print(stderr,
               "lcejit: prepare N={}: Program '{}' of bucket {} looked up in {:.2f} ms ({}, "
               "binaries from {})\n",
               n, l.compiled->program.name, bucketStr(l.compiled->program), msSince(t0),
               l.planned ? "planned" : "cached", runtime::cacheOriginName(l.binaryOrigin));
  bool compiled = l.binaryOrigin == runtime::CacheOrigin::Compiled;
  // [Note: values scaled in place]: the recompute Program of the calls it does not serve.
  const plan::Program &p = l.compiled->program;
  if (Impl::needsRecompute(p, n, true) || Impl::needsRecompute(p, n, false))
    compiled = impl_->jitOf(CallKind::PlainRecompute).lookup(n, target).binaryOrigin ==
                   runtime::CacheOrigin::Compiled ||
               compiled;
  if (!runtime::cudaAvailable())
    return compiled;
  // With a GPU: everything a plain call with N rows needs besides the launches (device
  // state, module load, the prepared run, the workspace), so that enqueue() after it is
  // capturable in a CUDA graph ([Note: the warm path]).
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl &im = *impl_;
  std::optional<ContextScope> scope;
  im.enter(scope, options().device);
  im.ensureDevice();
  LoadedProgram &lp = im.programFor(CallKind::Plain, n, /*outputFree=*/true, false);
  runtime::PreparedRun &run = im.runFor(lp, n);
  // A call that adds to dW too ([Note: stored values in dW]: where one that overwrites it
  // keeps the stored values there, the other is cut otherwise, with more workspace, or
  // runs the recompute Program: [Note: values scaled in place]).
  int64_t bytes = run.workspaceBytes;
  LoadedProgram &la = im.programFor(CallKind::Plain, n, /*outputFree=*/false, false);
  if (&la != &lp || run.schedule.slabGroup > 0)
    bytes = std::max(bytes, im.runFor(la, n, /*outputFree=*/false).workspaceBytes);
  if (!im.userWorkspace)
    im.ensureWorkspace(bytes, /*capturing=*/false);
  return compiled;
}

int64_t LinearCrossEntropy::workspaceBytes(int64_t n) {
  LCEJIT_CHECK_ARG(n >= 0, "N must be >= 0, got {}", n);
  ops::ProgramLookup l =
      impl_->jit->lookup(n, impl_->callTarget(options().device), /*compile=*/false);
  // A call that overwrites dW and one that adds to it may be cut differently ([Note:
  // stored values in dW]): the larger, so that the answer serves both.
  const plan::Program &p = l.compiled->program;
  int64_t bytes = 0;
  for (bool outputFree : {true, false}) {
    if (Impl::needsRecompute(p, n, outputFree)) {
      // [Note: values scaled in place]: that call runs the recompute Program.
      const ops::ProgramLookup r = impl_->jitOf(CallKind::PlainRecompute)
                                       .lookup(n, impl_->callTarget(options().device),
                                               /*compile=*/false);
      bytes = std::max(bytes, runtime::workspaceBytes(r.compiled->program, n));
    } else {
      bytes = std::max(bytes, p.runSchedule(n, outputFree).workspaceBytes);
    }
  }
  return bytes;
}

namespace {
/// The schedule of a call that overwrites dW and, where it differs ([Note: stored values
/// in dW]), of one that adds to it.
/// [Note: values scaled in place]: `recompute` gives the recompute Program of the bucket,
/// which runs the calls a slab-only `p` does not serve.
std::string scheduleText(const plan::Program &p, int64_t n,
                         const std::function<const plan::Program &()> &recompute) {
  auto one = [&](bool outputFree) {
    if (LinearCrossEntropy::Impl::needsRecompute(p, n, outputFree))
      return "the recompute Program of the bucket: " +
             recompute().runSchedule(n).describe();
    return p.runSchedule(n, outputFree).describe();
  };
  const plan::RunSchedule free = p.runSchedule(n, /*outputFree=*/true);
  if (free.slabGroup == 0 && !p.schedule.slabOnly)
    return free.describe();
  const std::string dw = p.outputs[static_cast<size_t>(p.schedule.slabOutput)].name;
  return one(true) + "; a call that adds to " + dw + ": " + one(false);
}
} // namespace

std::string LinearCrossEntropy::scheduleSummary(int64_t n) {
  LCEJIT_CHECK_ARG(n >= 0, "N must be >= 0, got {}", n);
  ops::ProgramLookup l =
      impl_->jit->lookup(n, impl_->callTarget(options().device), /*compile=*/false);
  return scheduleText(l.compiled->program, n, impl_->recomputeProgram(n, options().device));
}

std::string LinearCrossEntropy::inspect(int64_t n, const std::string &what) {
  LCEJIT_CHECK_ARG(n >= 0, "N must be >= 0, got {}", n);
  LCEJIT_CHECK_ARG(what == "plan" || what == "cuda",
                   "inspect: what = '{}' must be \"plan\" or \"cuda\"", what);
  ops::ProgramLookup l =
      impl_->jit->lookup(n, impl_->callTarget(options().device), /*compile=*/false);
  const plan::Program &p = l.compiled->program;
  if (what == "cuda")
    return l.compiled->source();
  std::string text;
  for (const std::string &d : p.decisions)
    text += "// decision: " + d + "\n";
  text += "// run schedule: " +
          scheduleText(p, n, impl_->recomputeProgram(n, options().device)) + "\n";
  return text + p.toJson(2) + "\n";
}

bool LinearCrossEntropy::deviceAvailable(std::string *why) {
  try {
    std::string w;
    if (!runtime::cudaAvailable(&w)) {
      if (why)
        *why = w;
      return false;
    }
    ops::LceJit::deviceTarget(); // rejects GPUs below compute capability 8.0
    return true;
  } catch (const std::exception &e) {
    if (why)
      *why = e.what();
    return false;
  }
}

void LinearCrossEntropy::setWorkspace(void *data, int64_t bytes) {
  auto p = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(data));
  if (!data) {
    LCEJIT_CHECK_ARG(bytes == 0, "setWorkspace: data is null but bytes = {} (use 0 to return "
                                 "to the op's own workspace)",
                     bytes);
  } else {
    LCEJIT_CHECK_ARG(bytes > 0, "setWorkspace: bytes = {} must be positive", bytes);
    LCEJIT_CHECK_ARG(p % 256 == 0, "setWorkspace: data = {} is not 256-byte aligned", data);
  }
  impl_->userWorkspace = p;
  impl_->userWorkspaceBytes = bytes;
}

namespace {

/// `gradients` false: forward() (gradHidden and gradWeight are not used).
/// [Note: the warm path] When the op has loaded the bucket's Program and prepared a run
/// for this N, this function allocates nothing, builds no string and hashes nothing; its
/// only driver calls are the capture query, the event wait and record, the memsets and
/// launches, and the error word's copy into pinned memory — all capturable.
void enqueueLocked(LinearCrossEntropy::Impl &im, const LinearCrossEntropyOptions &o,
                   const TensorRef &hidden, const TensorRef &weight, const TensorRef &targets,
                   const MutableTensorRef &loss, const MutableTensorRef &gradHidden,
                   const MutableTensorRef &gradWeight, void *stream, bool capturing,
                   bool gradients = true, const GradScale &gradScale = {},
                   const Accumulate &accumulate = {}) {
  LCEJIT_CHECK_ARG(hidden.shape.size() == 2, "hidden.shape is {}, expected [N, {}]",
                   shapeStr(hidden.shape), o.hidden);
  int64_t n = hidden.shape[0];
  LCEJIT_CHECK_ARG(n >= 0, "N = hidden.shape[0] = {} must be >= 0", n);
  // Rows are reported by the device checks as 32-bit numbers (lcejit_common.cuh).
  LCEJIT_CHECK_ARG(n < (int64_t(1) << 32) - 1, "N = hidden.shape[0] = {} must be below 2^32 - 1",
                   n);
  bool empty = n == 0;
  checkTensor("hidden", hidden, o.dtype, {n, o.hidden}, 16, empty);
  checkTensor("weight", weight, o.dtype, {o.vocab, o.hidden}, 16, false);
  if (targets.shape.size() == 2)
    checkTensor("targets", targets, o.targetDType, {n, 1}, dtypeSize(o.targetDType), empty);
  else
    checkTensor("targets", targets, o.targetDType, {n}, dtypeSize(o.targetDType), empty);
  if (loss.shape.empty())
    checkTensor("loss", loss, DType::F32, {}, 4, false);
  else
    checkTensor("loss", loss, DType::F32, {1}, 4, false);
  if (gradients) {
    checkTensor("gradHidden", gradHidden, o.dtype, {n, o.hidden}, 16, empty);
    checkTensor("gradWeight", gradWeight, o.gradWeightDType, {o.vocab, o.hidden}, 16, false);
  }

  const bool scaled = gradients && !gradScale.isOne();
  if (scaled && gradScale.device)
    LCEJIT_CHECK_ARG(reinterpret_cast<uintptr_t>(gradScale.device) % 4 == 0,
                     "gradScale.device = {} is not 4-byte aligned", gradScale.device);
  LCEJIT_CHECK_ARG(im.deviceReady || !capturing,
                   "enqueue during CUDA graph capture before the op's first GPU call: call "
                   "prepare(N) first (it allocates the op's device state)");
  im.ensureDevice();
  auto cu = [](const void *p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); };
  const CallKind kind = !gradients ? CallKind::Forward : scaled ? CallKind::Scaled : CallKind::Plain;
  // [Note: stored values in dW]: a call that overwrites dW may keep the forward's stored
  // values in dW's memory until dB writes it; [Note: values scaled in place]: a call that
  // a slab-only Program does not serve runs the recompute Program of its bucket.
  const bool outputFree = gradients && !accumulate.gradWeight;
  LoadedProgram &lp = gradients ? im.programFor(kind, n, outputFree, capturing)
                                : im.loadedFor(kind, n, capturing);
  runtime::PreparedRun &run = im.runFor(lp, n, outputFree);
  const plan::Program &program = lp.executor->program();
  CUstream s = static_cast<CUstream>(stream);
  const runtime::CudaDriver &d = runtime::cudaDriver();
  // [Note: one op, many threads and streams]: after the previous call, on any stream.
  im.waitForPrevious(s, capturing);
  CUdeviceptr ws = 0;
  int64_t wsBytes = 0;
  if (im.userWorkspace) {
    LCEJIT_CHECK_ARG(im.userWorkspaceBytes >= run.workspaceBytes,
                     "the workspace given to setWorkspace() has {} bytes; a call with N = {} "
                     "needs {} (workspaceBytes({}))",
                     im.userWorkspaceBytes, n, run.workspaceBytes, n);
    ws = im.userWorkspace;
    wsBytes = im.userWorkspaceBytes;
  } else {
    im.ensureWorkspace(run.workspaceBytes, capturing);
    ws = im.workspace;
    wsBytes = im.workspaceBytes;
  }
  CUdeviceptr inputs[4] = {cu(hidden.data), cu(weight.data), cu(targets.data), 0};
  size_t numInputs = 3;
  if (scaled) {
    CUdeviceptr scale = cu(gradScale.device);
    if (!scale) {
      // The value, as the f32 bit pattern, into the op's scalar (captured at enqueue time,
      // so a later call cannot change it while this one waits on the stream).
      uint32_t bits = 0;
      std::memcpy(&bits, &gradScale.value, 4);
      scale = im.lossScratch + 64;
      LCEJIT_CU(d.memsetD32Async(scale, bits, 1, s));
    }
    inputs[numInputs++] = scale;
  }
  CUdeviceptr outputs[3] = {cu(loss.data), cu(gradHidden.data), cu(gradWeight.data)};
  const size_t numOutputs = gradients ? 3 : 1;
  // [Note: accumulating outputs]: outputs 1 (dH) and 2 (dW) of the LCE Program.
  const uint64_t accumulateMask =
      gradients ? (accumulate.gradHidden ? uint64_t(1) << 1 : 0) |
                      (accumulate.gradWeight ? uint64_t(1) << 2 : 0)
                : 0;
  const bool logOn = prepareLogOn(); // [Note: prepare log]
  const int64_t encodes = run.mapEncodes;
  const PrepareClock::time_point t0 = logOn ? PrepareClock::now() : PrepareClock::time_point{};
  runtime::bindRun(run, program, inputs, numInputs, outputs, numOutputs, ws, wsBytes,
                   accumulateMask);
  if (logOn && run.mapEncodes != encodes)
    fmt::print(stderr, "lcejit: prepare N={}: run bound, {} tensor maps encoded in {:.2f} ms\n",
               n, run.mapEncodes - encodes, msSince(t0));
  lp.executor->launch(run, s);
  if (!capturing)
    std::memset(im.hostError, 0, plan::kErrorWordBytes);
  lp.executor->enqueueErrorReadback(run, s, im.hostError);
  im.lastProgram = &program;
}

/// Reports what the error word of the last run that reached the host says, once: a
/// launch-contract violation as Error(Internal), a bad target as Error(DeviceCheck).
void checkDeviceErrorsLocked(LinearCrossEntropy::Impl &im, const LinearCrossEntropyOptions &o) {
  if (!im.hostError)
    return;
  int64_t word[4];
  std::memcpy(word, im.hostError, sizeof(word));
  if (word[0] == 0 && word[2] == 0)
    return;
  std::memset(im.hostError, 0, plan::kErrorWordBytes); // reported once
  const runtime::DeviceErrors e = runtime::decodeErrorWord(word);
  if (e.contract != 0) {
    std::string what = im.lastProgram
                           ? runtime::describeContractViolation(*im.lastProgram, e)
                           : fmt::format("kernel {} reported launch-contract violation {}",
                                         e.kernel, e.contract);
    LCEJIT_THROW(Internal,
                 "device launch-contract violation: {}. The kernel returned without computing "
                 "(the call's outputs are unspecified); the op and the CUDA context stay "
                 "usable. This is a bug in lcejit: please report it",
                 what);
  }
  ops::throwBadTarget(o, e.badRow, e.badValue);
}

} // namespace

void LinearCrossEntropy::enqueue(const TensorRef &hidden, const TensorRef &weight,
                                 const TensorRef &targets, const MutableTensorRef &loss,
                                 const MutableTensorRef &gradHidden,
                                 const MutableTensorRef &gradWeight, void *stream,
                                 const GradScale &gradScale) {
  enqueue(hidden, weight, targets, loss, gradHidden, gradWeight, stream, gradScale,
          Accumulate{});
}

void LinearCrossEntropy::enqueue(const TensorRef &hidden, const TensorRef &weight,
                                 const TensorRef &targets, const MutableTensorRef &loss,
                                 const MutableTensorRef &gradHidden,
                                 const MutableTensorRef &gradWeight, void *stream,
                                 const GradScale &gradScale, const Accumulate &accumulate) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::optional<ContextScope> scope;
  impl_->enter(scope, options().device);
  const bool capturing = runtime::cudaAvailable() && Impl::isCapturing(static_cast<CUstream>(stream));
  enqueueLocked(*impl_, options(), hidden, weight, targets, loss, gradHidden, gradWeight,
                stream, capturing, /*gradients=*/true, gradScale, accumulate);
  impl_->recordDone(static_cast<CUstream>(stream), capturing);
}

void LinearCrossEntropy::checkDeviceErrors() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  checkDeviceErrorsLocked(*impl_, options());
}

namespace {
/// forwardBackward and forward wait for their stream: not capturable.
void rejectCapture(void *stream, const char *call) {
  if (runtime::cudaAvailable())
    LCEJIT_CHECK_ARG(!LinearCrossEntropy::Impl::isCapturing(static_cast<CUstream>(stream)),
                     "{}() synchronizes its stream and cannot be captured in a CUDA graph: "
                     "capture enqueue() or enqueueForward() (after prepare(N))",
                     call);
}
} // namespace

float LinearCrossEntropy::forwardBackward(const TensorRef &hidden, const TensorRef &weight,
                                          const TensorRef &targets,
                                          const MutableTensorRef &gradHidden,
                                          const MutableTensorRef &gradWeight, void *stream,
                                          const GradScale &gradScale) {
  return forwardBackward(hidden, weight, targets, gradHidden, gradWeight, stream, gradScale,
                         Accumulate{});
}

float LinearCrossEntropy::forwardBackward(const TensorRef &hidden, const TensorRef &weight,
                                          const TensorRef &targets,
                                          const MutableTensorRef &gradHidden,
                                          const MutableTensorRef &gradWeight, void *stream,
                                          const GradScale &gradScale,
                                          const Accumulate &accumulate) {
  // The whole call under the op's lock: the loss scratch, the pinned loss and error
  // words belong to this call until it returns.
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::optional<ContextScope> scope;
  impl_->enter(scope, options().device);
  rejectCapture(stream, "forwardBackward");
  impl_->ensureDevice();
  MutableTensorRef loss{reinterpret_cast<void *>(static_cast<uintptr_t>(impl_->lossScratch)),
                        DType::F32, {}, {}};
  enqueueLocked(*impl_, options(), hidden, weight, targets, loss, gradHidden, gradWeight,
                stream, /*capturing=*/false, /*gradients=*/true, gradScale, accumulate);
  const runtime::CudaDriver &d = runtime::cudaDriver();
  CUstream s = static_cast<CUstream>(stream);
  LCEJIT_CU(d.memcpyDtoHAsync(impl_->hostLoss, impl_->lossScratch, sizeof(float), s));
  impl_->recordDone(s);
  LCEJIT_CU(d.streamSynchronize(s));
  checkDeviceErrorsLocked(*impl_, options());
  return *impl_->hostLoss;
}

float LinearCrossEntropy::forward(const TensorRef &hidden, const TensorRef &weight,
                                  const TensorRef &targets, void *stream) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::optional<ContextScope> scope;
  impl_->enter(scope, options().device);
  rejectCapture(stream, "forward");
  impl_->ensureDevice();
  MutableTensorRef loss{reinterpret_cast<void *>(static_cast<uintptr_t>(impl_->lossScratch)),
                        DType::F32, {}, {}};
  enqueueLocked(*impl_, options(), hidden, weight, targets, loss, {}, {}, stream,
                /*capturing=*/false, /*gradients=*/false);
  const runtime::CudaDriver &d = runtime::cudaDriver();
  CUstream s = static_cast<CUstream>(stream);
  LCEJIT_CU(d.memcpyDtoHAsync(impl_->hostLoss, impl_->lossScratch, sizeof(float), s));
  impl_->recordDone(s);
  LCEJIT_CU(d.streamSynchronize(s));
  checkDeviceErrorsLocked(*impl_, options());
  return *impl_->hostLoss;
}

void LinearCrossEntropy::enqueueForward(const TensorRef &hidden, const TensorRef &weight,
                                        const TensorRef &targets, const MutableTensorRef &loss,
                                        void *stream) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::optional<ContextScope> scope;
  impl_->enter(scope, options().device);
  const bool capturing = runtime::cudaAvailable() && Impl::isCapturing(static_cast<CUstream>(stream));
  enqueueLocked(*impl_, options(), hidden, weight, targets, loss, {}, {}, stream, capturing,
                /*gradients=*/false);
  impl_->recordDone(static_cast<CUstream>(stream), capturing);
}

ReferenceResult LinearCrossEntropy::runReference(const std::vector<double> &hidden,
                                                 const std::vector<double> &weight,
                                                 const std::vector<int64_t> &targets) {
  return ops::runProgramReference(*impl_->jit, hidden, weight, targets);
}

} // namespace lcejit
