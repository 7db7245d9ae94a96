//===- lcejit/LinearCrossEntropy.h - The fused linear cross entropy --------===//
//
//   lcejit::LinearCrossEntropy lce({.hidden = 4096, .vocab = 128256,
//                                   .dtype = lcejit::DType::BF16});
//   float loss = lce.forwardBackward(H, W, y, dH, dW, stream);
//
// computes loss = mean_i(logsumexp_j z_ij − z_{i,y_i}) over rows whose target is not
// ignore_index, with z = H·Wᵀ (optionally softcapped: c·tanh(z/c)) in f32, and writes
// dH = ∂loss/∂H and dW = ∂loss/∂W, without ever holding the [N, V] logits. N (the number
// of tokens) may change on every call; calls whose N falls in an already compiled shape
// bucket never compile again (see docs/user-guide.md).
//
// Every failure is an lcejit::Error (lcejit/Error.h); bad arguments get
// ErrorKind::InvalidArgument with a message naming the argument and its value. Errors
// found on the device never trap (the CUDA context stays usable, the next call works):
//   - a target outside [0, V) that is not ignore_index: Error(DeviceCheck) naming the
//     LOWEST such row and its value;
//   - a kernel launched against its launch contract (block size, dynamic shared memory,
//     grid; a bug in lcejit): the kernel returns at once and the call raises
//     Error(Internal) naming the kernel and what its launch had.
// Both surface at the end of forwardBackward() / forward(), and from checkDeviceErrors()
// after an enqueue() or enqueueForward().
//
// Gradient accumulation (β = 1): pass Accumulate{.gradHidden, .gradWeight} to add the
// call's gradients to what the buffers hold, inside the kernels that write them (no extra
// pass); see docs/integration.md "Accumulating gradients".
//
// CUDA graphs: after prepare(N), enqueue() with N rows does no allocation, hashing,
// string building or synchronization and is capturable (cuStreamBeginCapture on a
// non-default stream); see docs/integration.md "CUDA graphs" for the rules.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit/DType.h"
#include "lcejit/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lcejit {

/// A dense tensor in device memory (or host memory for the reference path).
/// `strides` in elements; empty means contiguous row-major (the only layout supported
/// today: other strides are rejected with a clear error).
struct TensorRef {
  const void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

struct MutableTensorRef {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

enum class Reduction { Mean, Sum };

/// A factor on the gradients (not on the loss), applied inside the kernels (no extra pass
/// over dH or dW): `value`, or, when `device` is set, the f32 at that device address, read
/// when the kernels run (autograd's grad_output of the loss, a loss scale). The default,
/// 1 with no pointer, runs the unscaled Program; any other scale runs a Program with the
/// factor as an input, compiled on first use.
struct GradScale {
  float value = 1.0f;
  const void *device = nullptr; ///< f32, 4-byte aligned; overrides `value` when set
  bool isOne() const { return device == nullptr && value == 1.0f; }
};

/// Whether a call overwrites each gradient (β = 0, the default) or adds the call's
/// gradient to what the buffer already holds (β = 1: gradient accumulation across
/// micro-batches), chosen per call and per gradient. The addition happens inside the
/// kernel that writes the gradient (the one that writes it anyway, reading the old value
/// on the way): no extra pass over dH or dW, no other Program, no recompile. With a
/// GradScale the scaled gradient is added. Rounding: an f32 gradient adds in f32; a
/// bf16/f16 one is widened, added to the call's f32 gradient and rounded once
/// (docs/numerics.md).
struct Accumulate {
  bool gradHidden = false; ///< dH += ∂loss/∂H instead of dH = ∂loss/∂H
  bool gradWeight = false; ///< dW += ∂loss/∂W instead of dW = ∂loss/∂W
  bool any() const { return gradHidden || gradWeight; }
};

/// How bf16 gradients are computed (docs/numerics.md has the measured errors and costs).
enum class Precision {
  /// dZ = softmax − onehot is formed in f32 and rounded once to bf16, the operand of both
  /// backward GEMMs (f32 accumulation): dH and dW at the bf16 rounding floor.
  Fast,
  /// dZ is split into bf16 hi + lo and each backward GEMM runs on both: f32 outputs within
  /// 1e-4 of the exact gradient, at 1.3-1.5x the time of Fast.
  Exact,
};

struct LinearCrossEntropyOptions {
  int64_t hidden = 0;                       ///< D
  int64_t vocab = 0;                        ///< V
  DType dtype = DType::BF16;                ///< of H, W and dH: BF16, F16 or F32
  DType targetDType = DType::I64;           ///< of y: I32 or I64
  DType gradWeightDType = DType::F32;       ///< of dW: F32 or `dtype`
  std::optional<double> softcap;            ///< c > 0: logits become c·tanh(z/c)
  std::optional<int64_t> ignoreIndex = -100; ///< rows with this target are left out
  Reduction reduction = Reduction::Mean;
  /// Workspace budget in bytes; 0 = LCEJIT_WORKSPACE_MB or 512 MiB. Each call cuts its N
  /// rows into blocks and the vocabulary into chunks so that the workspace stays under it
  /// (workspaceBytes(N) says what a call uses; see docs/user-guide.md "Workspace").
  int64_t workspaceBudgetBytes = 0;
  /// bf16 inputs: Fast (default) or Exact gradients. f16 and f32 inputs always form dZ in
  /// f32 (Exact and Fast are the same there).
  Precision precision = Precision::Fast;
  /// The CUDA device the op runs on. -1 (the default): the device of the context current
  /// at the op's first GPU call. An ordinal: that device's primary context, whatever
  /// context the calling thread has current; each GPU call makes the op's context current
  /// for its duration and restores the caller's before it returns (an op bound to device 1
  /// works while device 0 is current). Tensors, workspace and stream of a call must
  /// belong to the op's device.
  int device = -1;
};

/// What a CPU reference run returns (fp64).
struct ReferenceResult {
  double loss = 0.0;
  std::vector<double> gradHidden; ///< [N, D]
  std::vector<double> gradWeight; ///< [V, D]
};

class LinearCrossEntropy {
public:
  /// Validates the options and compiles the loss graph through the pass pipeline (no
  /// kernel is compiled yet). Throws Error(InvalidArgument) naming a bad option.
  explicit LinearCrossEntropy(const LinearCrossEntropyOptions &options);
  ~LinearCrossEntropy();
  LinearCrossEntropy(const LinearCrossEntropy &) = delete;
  LinearCrossEntropy &operator=(const LinearCrossEntropy &) = delete;

  const LinearCrossEntropyOptions &options() const;

  /// Runs on the GPU on `stream` (a CUstream / cudaStream_t; null = the legacy default
  /// stream) and synchronizes it. hidden [N, D], weight [V, D], targets [N] or [N, 1],
  /// gradHidden [N, D] of `dtype`, gradWeight [V, D] of `gradWeightDType`. Returns the
  /// loss. A target outside [0, V) that is not ignore_index raises Error(DeviceCheck)
  /// naming the lowest such row and its value (the gradients are then unspecified); a
  /// device launch-contract violation raises Error(Internal). Not capturable in a CUDA
  /// graph (it synchronizes): called on a capturing stream it throws InvalidArgument.
  float forwardBackward(const TensorRef &hidden, const TensorRef &weight, const TensorRef &targets,
                        const MutableTensorRef &gradHidden, const MutableTensorRef &gradWeight,
                        void *stream = nullptr, const GradScale &gradScale = {});
  /// The same, adding the gradients to what gradHidden and/or gradWeight hold as
  /// `accumulate` says (Accumulate{} writes them, like the call above):
  ///
  ///   for (int i = 0; i < mb; ++i)   // mb micro-batches; dW accumulates over them
  ///     loss[i] = lce.forwardBackward(H[i], W, Y[i], DH[i], DW, stream, GradScale{1.f / mb},
  ///                                   Accumulate{.gradWeight = i > 0});
  ///
  /// A gradient that accumulates is read before it is written (NaN/inf in it stay, as
  /// with +=); one that does not is only written. A call that fails (Error(DeviceCheck):
  /// a bad target) leaves the gradients unspecified, accumulated ones included: keep a
  /// copy if a bad batch must not spoil the accumulator.
  float forwardBackward(const TensorRef &hidden, const TensorRef &weight, const TensorRef &targets,
                        const MutableTensorRef &gradHidden, const MutableTensorRef &gradWeight,
                        void *stream, const GradScale &gradScale, const Accumulate &accumulate);

  /// Asynchronous form: the loss (f32 [1] or rank 0) is written in device memory; call
  /// checkDeviceErrors() after synchronizing the stream to surface bad targets.
  ///
  /// CUDA graphs: after prepare(N) (same op, same N), a call is capturable on a
  /// non-default stream and its replays compute with whatever the captured buffers hold
  /// then; replays are ordered with the op's other calls like calls are. A call that
  /// would have to load kernels or grow the workspace during a capture throws
  /// InvalidArgument instead. The graph holds the op's workspace and scratch memory:
  /// destroy it before the op.
  ///
  /// Threads and streams: one op may be called from several threads and on several
  /// streams at once. Calls are ordered: each holds the op's lock while it enqueues
  /// (forwardBackward for the whole call) and its stream first waits for the previous
  /// call's work, on whatever stream that ran, so calls never share the op's workspace
  /// at the same time and every result is that of its own inputs. Calls of one op do
  /// not overlap on the device; use one op per stream for concurrency. The op stays on
  /// its device (LinearCrossEntropyOptions::device: an ordinal, or the device of the
  /// first call) and runs every call in that device's context, whichever thread calls and
  /// whatever it has current. checkDeviceErrors() reports the most recent enqueue.
  void enqueue(const TensorRef &hidden, const TensorRef &weight, const TensorRef &targets,
               const MutableTensorRef &loss, const MutableTensorRef &gradHidden,
               const MutableTensorRef &gradWeight, void *stream = nullptr,
               const GradScale &gradScale = {});
  /// enqueue() adding to gradHidden and/or gradWeight as `accumulate` says (see the
  /// accumulating forwardBackward). Warm and capturable like enqueue(): the choice is a
  /// kernel argument (a captured graph keeps the one of its capture).
  void enqueue(const TensorRef &hidden, const TensorRef &weight, const TensorRef &targets,
               const MutableTensorRef &loss, const MutableTensorRef &gradHidden,
               const MutableTensorRef &gradWeight, void *stream, const GradScale &gradScale,
               const Accumulate &accumulate);
  /// The loss only, for evaluation: one GEMM's work (2·N·D·V) and no gradient buffers;
  /// synchronizes `stream` and returns the loss. Same checks, errors and thread rules as
  /// forwardBackward. Its kernels are compiled on the first call (a separate Program).
  float forward(const TensorRef &hidden, const TensorRef &weight, const TensorRef &targets,
                void *stream = nullptr);
  /// Asynchronous form of forward(): the loss (f32 [1] or rank 0) in device memory.
  void enqueueForward(const TensorRef &hidden, const TensorRef &weight,
                      const TensorRef &targets, const MutableTensorRef &loss,
                      void *stream = nullptr);

  /// Reports, once, what the device found in the last run that reached the host (an
  /// enqueue, or a replay of a captured one): Error(DeviceCheck) for a bad target (the
  /// lowest row and its value), Error(Internal) for a launch-contract violation. Call it
  /// after the stream has reached that point.
  void checkDeviceErrors();

  /// Plans and compiles (without running) what a call with N tokens needs. Returns true
  /// when NVRTC actually compiled (false on a memory or disk cache hit). With a GPU it
  /// also readies the op for plain calls (GradScale 1) with N rows: device state, the
  /// loaded kernels, the launch list, the workspace (unless setWorkspace gave one) — after
  /// it such a call's host side allocates nothing and enqueue() is capturable in a CUDA
  /// graph, with or without Accumulate. forward() and scaled calls are readied by one call
  /// of their kind.
  bool prepare(int64_t n);

  /// Bytes of device workspace a call with N tokens uses (plans without compiling; on the
  /// current GPU's target, or the default H200 target without a GPU): the most of a call
  /// that overwrites gradWeight and one that adds to it. It stays within the budget unless
  /// the budget is too small for any schedule (scheduleSummary says so).
  int64_t workspaceBytes(int64_t n);
  /// One line: how a call with N tokens is cut (row blocks, vocabulary chunks), the
  /// workspace it uses and why; a call that overwrites gradWeight (no Accumulate of it),
  /// and, where a call that adds to it is cut otherwise, that one too.
  std::string scheduleSummary(int64_t n);

  /// Makes calls use `bytes` of caller-owned device memory at `data` (256-byte aligned) as
  /// their workspace instead of memory the op allocates, e.g. from a framework's caching
  /// allocator. The memory must stay valid, and unused by anything else, until the work
  /// enqueued with it has finished. A call whose N needs more than `bytes` throws
  /// Error(InvalidArgument) naming the bytes needed. setWorkspace(nullptr, 0) returns to
  /// the op's own allocation.
  void setWorkspace(void *data, int64_t bytes);

  /// The same plan, run by the fp64 Program interpreter on host data (no GPU needed).
  /// hidden/weight hold N·D and V·D values (already representable in `dtype`), targets N.
  ReferenceResult runReference(const std::vector<double> &hidden, const std::vector<double> &weight,
                               const std::vector<int64_t> &targets);

  /// What the compiler makes for a call with N tokens, as text, without a GPU: `what` is
  /// "plan" (the Program as JSON, with the planner's decisions and the run schedule) or
  /// "cuda" (the generated CUDA C++). Error(InvalidArgument) for anything else.
  std::string inspect(int64_t n, const std::string &what);

  /// Whether a CUDA driver and a GPU lcejit can use are present; if not, `why` (may be
  /// null) says what is missing. Never throws.
  static bool deviceAvailable(std::string *why = nullptr);

  /// Shape bucket of N: calls with N in the same bucket share one compiled program.
  static int64_t bucketOf(int64_t n);
  /// Programs compiled in this process (all ops share one kernel cache): a call that had
  /// to run NVRTC for its bucket counts once, although a Program compiles as several
  /// modules in parallel threads (one per GEMM kernel, one for the row kernels).
  static int64_t compileCount();

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

} // namespace lcejit
