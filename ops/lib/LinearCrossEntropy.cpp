//===- LinearCrossEntropy.cpp - The public op ------------------------------===//

#include "lcejit/LinearCrossEntropy.h"
#include "ops/lib/LceJit.h"
#include "ops/lib/Reference.h"
#include "compiler/support/Check.h"
#include "runtime/CudaDriver.h"
#include "runtime/Executor.h"
#include "runtime/Module.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <map>
#include <mutex>

namespace lcejit {

namespace {

std::string shapeStr(const std::vector<int64_t> &s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

std::string pointerStr(const void *p) { return fmt::format("{}", p); }

/// Checks one tensor argument against an expected dtype, shape (-1 = any size >= 0, taken
/// from the tensor), contiguity and alignment. Returns the shape.
template <typename Ref>
void checkTensor(const char *name, const Ref &t, DType dtype, const std::vector<int64_t> &shape,
                 int64_t alignment, bool mayBeNull) {
  LCEJIT_CHECK_ARG(t.dtype == dtype, "{}.dtype is {}, expected {}", name, dtypeName(t.dtype),
                   dtypeName(dtype));
  LCEJIT_CHECK_ARG(t.shape == shape, "{}.shape is {}, expected {}", name, shapeStr(t.shape),
                   shapeStr(shape));
  if (!t.strides.empty()) {
    std::vector<int64_t> contiguous(t.shape.size(), 1);
    for (int64_t i = static_cast<int64_t>(t.shape.size()) - 2; i >= 0; --i)
      contiguous[static_cast<size_t>(i)] =
          contiguous[static_cast<size_t>(i + 1)] * t.shape[static_cast<size_t>(i + 1)];
    LCEJIT_CHECK_ARG(t.strides == contiguous,
                     "{}.strides are {}: only contiguous row-major tensors (strides {}) are "
                     "supported",
                     name, shapeStr(t.strides), shapeStr(contiguous));
  }
  if (!mayBeNull)
    LCEJIT_CHECK_ARG(t.data != nullptr, "{}.data is null", name);
  LCEJIT_CHECK_ARG(reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(alignment) == 0,
                   "{}.data = {} is not {}-byte aligned", name, pointerStr(t.data), alignment);
}

/// The target to plan for: the current GPU, or the default H200 without one.
plan::Target callTarget() {
  return runtime::cudaAvailable() ? ops::LceJit::deviceTarget() : ops::LceJit::defaultTarget();
}

/// A Program loaded into the current context.
struct LoadedProgram {
  std::vector<runtime::Module> modules; ///< one per module part
  std::unique_ptr<runtime::Executor> executor;
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
  // Device state, created on the first GPU call.
  bool deviceReady = false;
  plan::Target target;
  std::map<const ops::CompiledProgram *, std::unique_ptr<LoadedProgram>> loaded;
  CUdeviceptr workspace = 0; ///< the op's own allocation
  int64_t workspaceBytes = 0;
  CUdeviceptr userWorkspace = 0; ///< setWorkspace(): caller-owned, used instead
  int64_t userWorkspaceBytes = 0;
  CUdeviceptr lossScratch = 0;
  int64_t *hostError = nullptr; ///< pinned int64[2]
  float *hostLoss = nullptr;    ///< pinned f32
  bool errorPending = false;
  int64_t lastN = 0;
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
      LCEJIT_CU(d.memAllocHost(&err, 2 * sizeof(int64_t)));
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
    hostLoss = static_cast<float *>(loss);
    lossScratch = scratch;
    lastDone = done;
    deviceReady = true;
  }

  LoadedProgram &load(const ops::CompiledProgram &cp) {
    auto it = loaded.find(&cp);
    if (it != loaded.end())
      return *it->second;
    auto lp = std::make_unique<LoadedProgram>();
    LCEJIT_CHECK(cp.binaries.size() == cp.parts.size() && !cp.parts.empty(),
                 "program '{}' has {} binaries for {} module parts", cp.program.name,
                 cp.binaries.size(), cp.parts.size());
    lp->modules.reserve(cp.parts.size());
    std::vector<const runtime::Module *> moduleOfKernel(cp.program.kernels.size(), nullptr);
    for (size_t i = 0; i < cp.parts.size(); ++i) {
      lp->modules.emplace_back(cp.binaries[i]->cubin);
      for (int32_t k : cp.parts[i].kernels)
        moduleOfKernel[static_cast<size_t>(k)] = &lp->modules.back();
    }
    lp->executor = std::make_unique<runtime::Executor>(cp.program, std::move(moduleOfKernel));
    return *loaded.emplace(&cp, std::move(lp)).first->second;
  }

  /// Marks the end of a call on `stream` ([Note: one op, many threads and streams]).
  void recordDone(CUstream stream) {
    LCEJIT_CU(runtime::cudaDriver().eventRecord(lastDone, stream));
    anyCall = true;
  }

  void ensureWorkspace(int64_t bytes, CUstream stream) {
    if (bytes <= workspaceBytes)
      return;
    const runtime::CudaDriver &d = runtime::cudaDriver();
    if (workspace) {
      // The old buffer may still be in use by the previous call, on any stream.
      (void)stream;
      if (anyCall)
        LCEJIT_CU(d.eventSynchronize(lastDone));
      LCEJIT_CU(d.memFree(workspace));
      workspace = 0;
      workspaceBytes = 0;
    }
    LCEJIT_CU(d.memAlloc(&workspace, static_cast<size_t>(std::max<int64_t>(bytes, 256))));
    workspaceBytes = std::max<int64_t>(bytes, 256);
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
  return impl_->jit->lookup(n, callTarget()).binaryOrigin == runtime::CacheOrigin::Compiled;
}

int64_t LinearCrossEntropy::workspaceBytes(int64_t n) {
  LCEJIT_CHECK_ARG(n >= 0, "N must be >= 0, got {}", n);
  ops::ProgramLookup l = impl_->jit->lookup(n, callTarget(), /*compile=*/false);
  return runtime::workspaceBytes(l.compiled->program, n);
}

std::string LinearCrossEntropy::scheduleSummary(int64_t n) {
  LCEJIT_CHECK_ARG(n >= 0, "N must be >= 0, got {}", n);
  ops::ProgramLookup l = impl_->jit->lookup(n, callTarget(), /*compile=*/false);
  return l.compiled->program.runSchedule(n).describe();
}

std::string LinearCrossEntropy::inspect(int64_t n, const std::string &what) {
  LCEJIT_CHECK_ARG(n >= 0, "N must be >= 0, got {}", n);
  LCEJIT_CHECK_ARG(what == "plan" || what == "cuda",
                   "inspect: what = '{}' must be \"plan\" or \"cuda\"", what);
  ops::ProgramLookup l = impl_->jit->lookup(n, callTarget(), /*compile=*/false);
  const plan::Program &p = l.compiled->program;
  if (what == "cuda")
    return l.compiled->source;
  std::string text;
  for (const std::string &d : p.decisions)
    text += "// decision: " + d + "\n";
  text += "// run schedule: " + p.runSchedule(n).describe() + "\n";
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
void enqueueLocked(LinearCrossEntropy::Impl &im, const LinearCrossEntropyOptions &o,
                   const TensorRef &hidden, const TensorRef &weight, const TensorRef &targets,
                   const MutableTensorRef &loss, const MutableTensorRef &gradHidden,
                   const MutableTensorRef &gradWeight, void *stream, bool gradients = true,
                   const GradScale &gradScale = {}) {
  LCEJIT_CHECK_ARG(hidden.shape.size() == 2, "hidden.shape is {}, expected [N, {}]",
                   shapeStr(hidden.shape), o.hidden);
  int64_t n = hidden.shape[0];
  LCEJIT_CHECK_ARG(n >= 0, "N = hidden.shape[0] = {} must be >= 0", n);
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
  im.ensureDevice();
  auto cu = [](const void *p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); };
  ops::ProgramLookup l = im.jitFor(gradients, scaled).lookup(n, im.target);
  LoadedProgram &lp = im.load(*l.compiled);
  CUstream s = static_cast<CUstream>(stream);
  // [Note: one op, many threads and streams]: after the previous call, on any stream.
  if (im.anyCall)
    LCEJIT_CU(runtime::cudaDriver().streamWaitEvent(s, im.lastDone, 0));
  runtime::ProgramBuffers buffers;
  const int64_t need = runtime::workspaceBytes(l.compiled->program, n);
  if (im.userWorkspace) {
    LCEJIT_CHECK_ARG(im.userWorkspaceBytes >= need,
                     "the workspace given to setWorkspace() has {} bytes; a call with N = {} "
                     "needs {} (workspaceBytes({}))",
                     im.userWorkspaceBytes, n, need, n);
    buffers.workspace = im.userWorkspace;
    buffers.workspaceBytes = im.userWorkspaceBytes;
  } else {
    im.ensureWorkspace(need, s);
    buffers.workspace = im.workspace;
    buffers.workspaceBytes = im.workspaceBytes;
  }
  buffers.inputs = {cu(hidden.data), cu(weight.data), cu(targets.data)};
  if (scaled) {
    CUdeviceptr scale = cu(gradScale.device);
    if (!scale) {
      // The value, as the f32 bit pattern, into the op's scalar (captured at enqueue time,
      // so a later call cannot change it while this one waits on the stream).
      uint32_t bits = 0;
      std::memcpy(&bits, &gradScale.value, 4);
      scale = im.lossScratch + 64;
      LCEJIT_CU(runtime::cudaDriver().memsetD32Async(scale, bits, 1, s));
    }
    buffers.inputs.push_back(scale);
  }
  if (gradients)
    buffers.outputs = {cu(loss.data), cu(gradHidden.data), cu(gradWeight.data)};
  else
    buffers.outputs = {cu(loss.data)};
  lp.executor->run(buffers, n, s);
  im.hostError[0] = im.hostError[1] = 0;
  lp.executor->enqueueErrorReadback(buffers, n, s, im.hostError);
  im.errorPending = true;
  im.lastN = n;
}

void checkDeviceErrorsLocked(LinearCrossEntropy::Impl &im, const LinearCrossEntropyOptions &o) {
  if (!im.errorPending)
    return;
  im.errorPending = false;
  if (im.hostError[0] == 0)
    return;
  ops::throwBadTarget(o, im.hostError[0] - 1, im.hostError[1]);
}

} // namespace

void LinearCrossEntropy::enqueue(const TensorRef &hidden, const TensorRef &weight,
                                 const TensorRef &targets, const MutableTensorRef &loss,
                                 const MutableTensorRef &gradHidden,
                                 const MutableTensorRef &gradWeight, void *stream,
                                 const GradScale &gradScale) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  enqueueLocked(*impl_, options(), hidden, weight, targets, loss, gradHidden, gradWeight,
                stream, /*gradients=*/true, gradScale);
  impl_->recordDone(static_cast<CUstream>(stream));
}



void LinearCrossEntropy::checkDeviceErrors() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  checkDeviceErrorsLocked(*impl_, options());
}


float LinearCrossEntropy::forwardBackward(const TensorRef &hidden, const TensorRef &weight,
                                          const TensorRef &targets,
                                          const MutableTensorRef &gradHidden,
                                          const MutableTensorRef &gradWeight, void *stream,
                                          const GradScale &gradScale) {
  // The whole call under the op's lock: the loss scratch, the pinned loss and error
  // words belong to this call until it returns.
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ensureDevice();
  MutableTensorRef loss{reinterpret_cast<void *>(static_cast<uintptr_t>(impl_->lossScratch)),
                        DType::F32, {}, {}};
  enqueueLocked(*impl_, options(), hidden, weight, targets, loss, gradHidden, gradWeight,
                stream, /*gradients=*/true, gradScale);
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
  impl_->ensureDevice();
  MutableTensorRef loss{reinterpret_cast<void *>(static_cast<uintptr_t>(impl_->lossScratch)),
                        DType::F32, {}, {}};
  enqueueLocked(*impl_, options(), hidden, weight, targets, loss, {}, {}, stream,
                /*gradients=*/false);
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
  enqueueLocked(*impl_, options(), hidden, weight, targets, loss, {}, {}, stream,
                /*gradients=*/false);
  impl_->recordDone(static_cast<CUstream>(stream));
}

ReferenceResult LinearCrossEntropy::runReference(const std::vector<double> &hidden,
                                                 const std::vector<double> &weight,
                                                 const std::vector<int64_t> &targets) {
  return ops::runProgramReference(*impl_->jit, hidden, weight, targets);
}

} // namespace lcejit
