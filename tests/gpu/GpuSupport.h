//===- GpuSupport.h - Device buffers and reference kernels for GPU tests ---===//
#pragma once

#include "lcejit/LinearCrossEntropy.h"
#include "runtime/CudaDriver.h"
#include "runtime/Module.h"

#include <cublas_api.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lcejit::gputest {

/// Owning device allocation (or, made by view(), a non-owning one over memory someone else
/// owns: lcejit-bench --check hands its buffers to the reference this way).
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), owned_(o.owned_) {
    o.ptr_ = 0;
  }
  /// A buffer over [ptr, ptr + bytes) that is not freed with it.
  static DeviceBuffer view(CUdeviceptr ptr, int64_t bytes) {
    DeviceBuffer b;
    b.ptr_ = ptr;
    b.bytes_ = bytes;
    b.owned_ = false;
    return b;
  }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  void *data() const { return reinterpret_cast<void *>(static_cast<uintptr_t>(ptr_)); }
  int64_t bytes() const { return bytes_; }
  /// Fills every byte with 0xFF: NaN for bf16, f16 and f32 (poison before a run).
  void poison() const;
  template <typename T> std::vector<T> download() const {
    std::vector<T> v(static_cast<size_t>(bytes_) / sizeof(T));
    downloadTo(v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
    return v;
  }
  void downloadTo(void *host, int64_t bytes) const;

private:
  CUdeviceptr ptr_ = 0;
  int64_t bytes_ = 0;
  bool owned_ = true;
};

/// Errors of one output against the fp64 reference.
struct Comparison {
  double relError = 0;  ///< ||x − ref|| / ||ref||
  double floor = 0;     ///< ||round_to_dtype(ref) − ref|| / ||ref||: the rounding floor
  int64_t nonFinite = 0;
  double refNorm = 0;
  double bf16Floor = 0;   ///< the floor of rounding ref to bf16 (whatever x's dtype)
  double maxAbsError = 0; ///< max_i |x_i − ref_i| (finite elements)
  double maxAbsRef = 0;   ///< max_i |ref_i|
};

/// The helper kernels of RefKernels.cuh, compiled once per process with NVRTC.
class RefKernels {
public:
  static RefKernels &get();

  void fillRandom(const DeviceBuffer &out, DType dtype, int64_t n, uint64_t seed, double scale);
  void fillTargets(const DeviceBuffer &out, DType dtype, int64_t n, uint64_t seed, int64_t vocab,
                   int64_t ignoreIndex, int ignoreEvery, int64_t badRow = -1, int64_t badValue = 0);
  /// Raises each row's target logit by about `boost` (h[i] += boost·w[y_i]/|w[y_i]|²).
  void peakRows(const DeviceBuffer &h, const DeviceBuffer &w, DType dtype, const DeviceBuffer &y,
                DType targetType, int64_t n, int64_t d, int64_t vocab, double boost,
                int64_t every = 1);
  void toF64(const DeviceBuffer &in, DType dtype, const DeviceBuffer &out, int64_t n);
  /// layout 0: C = A·Bᵀ (A [M,K], B [N,K]); 1: C = A·B (B [K,N]); 2: C = Aᵀ·B (A [K,M]).
  void gemm(const DeviceBuffer &a, const DeviceBuffer &b, const DeviceBuffer &c, int64_t m,
            int64_t n, int64_t k, int layout);
  void lceRows(const DeviceBuffer &z, const DeviceBuffer &y, bool is64, int64_t n, int64_t v,
               double softcap, std::optional<int64_t> ignoreIndex, const DeviceBuffer &lse,
               const DeviceBuffer &rowLoss, const DeviceBuffer &valid);
  void lceDz(const DeviceBuffer &z, const DeviceBuffer &y, bool is64, int64_t n, int64_t v,
             double softcap, const DeviceBuffer &lse, const DeviceBuffer &valid, double scale);
  Comparison compare(const DeviceBuffer &x, DType dtype, const DeviceBuffer &ref, int64_t n);
  /// y = a·y + x for n elements: y f64, x of dtype (widened exactly).
  void scaleAdd(const DeviceBuffer &y, double a, const DeviceBuffer &x, DType dtype, int64_t n);
  /// y = a·y for n f64 elements.
  void scale(const DeviceBuffer &y, double a, int64_t n);

private:
  RefKernels();
  void launch(const char *name, int64_t gridX, int64_t gridY, int block, std::vector<void *> args);
  runtime::Module module_;
};

/// fp64 loss and gradients computed on the device from the definition.
struct GpuReference {
  double loss = 0;
  DeviceBuffer dH; ///< f64 [N, D]
  DeviceBuffer dW; ///< f64 [V, D]
};

GpuReference gpuReference(const LinearCrossEntropyOptions &o, const DeviceBuffer &hidden,
                          const DeviceBuffer &weight, const DeviceBuffer &targets, int64_t n);

/// cuBLAS through dlopen (libcublas.so.13, or .12): the GEMMs lcejit-bench times against,
/// and an independent tensor-core GEMM for cublasLogitLoss.
struct Cublas {
  using CreateFn = cublasStatus_t (*)(cublasHandle_t *);
  using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void *, const void *, cudaDataType, int,
                                      const void *, cudaDataType, int, const void *, void *,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  CreateFn create = nullptr;
  GemmExFn gemmEx = nullptr;
  cublasHandle_t handle = nullptr;
  std::string where; ///< the library that was loaded

  /// false, with why, when no libcublas can be loaded or its handle made.
  bool load(std::string *why);
  /// Row-major C[m, n] = op(A) · op(B), bf16 in, bf16 out (f32 with f32Out), f32
  /// accumulate (CUBLAS_COMPUTE_32F), on the default stream.
  void gemm(bool transA, bool transB, int m, int n, int k, const void *a, int lda, const void *b,
            int ldb, void *c, bool f32Out = false);
};

/// The loss that cuBLAS's logits give: Z = H·Wᵀ (bf16 [n, D] and [V, D]) by cublasGemmEx
/// into f32 (tensor cores, f32 accumulation), widened to f64, each row's target logit
/// replaced by its exact f64 dot product (as [Note: the exact target logit] does in lcejit),
/// then the fp64 reference's row losses and reduction. Against gpuReference's loss it is
/// the error that a bf16 GEMM with f32 accumulation leaves in the loss, whoever runs it
/// (docs/numerics.md). Targets of o.targetDType; needs n·V·12 bytes of device memory.
double cublasLogitLoss(const LinearCrossEntropyOptions &o, Cublas &blas, const DeviceBuffer &hidden,
                       const DeviceBuffer &weight, const DeviceBuffer &targets, int64_t n);

} // namespace lcejit::gputest
