//===- GpuSupport.cpp ------------------------------------------------------===//

#include "tests/gpu/GpuSupport.h"
#include "compiler/support/Check.h"
#include "runtime/Nvrtc.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace lcejit::gputest {

namespace {
const char *kRefSource =
#include "tests/gpu/RefKernels.inc"
    ;

int dtypeCode(DType t) {
  switch (t) {
  case DType::BF16: return 0;
  case DType::F16: return 1;
  case DType::F32: return 2;
  default: LCEJIT_CHECK(false, "no reference dtype code for {}", dtypeName(t));
  }
  return -1;
}

int64_t gridFor(int64_t n, int block = 256) {
  return std::max<int64_t>(1, std::min<int64_t>((n + block - 1) / block, 65536));
}
} // namespace

DeviceBuffer::DeviceBuffer(int64_t bytes) : bytes_(bytes) {
  runtime::ensureContext();
  LCEJIT_CU(runtime::cudaDriver().memAlloc(&ptr_, static_cast<size_t>(std::max<int64_t>(bytes, 256))));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ && owned_)
    runtime::cudaDriver().memFree(ptr_);
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    if (ptr_ && owned_)
      runtime::cudaDriver().memFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    owned_ = o.owned_;
    o.ptr_ = 0;
  }
  return *this;
}

void DeviceBuffer::poison() const {
  const auto &d = runtime::cudaDriver();
  LCEJIT_CU(d.memsetD8Async(ptr_, 0xFF, static_cast<size_t>(bytes_), nullptr));
  LCEJIT_CU(d.ctxSynchronize());
}

void DeviceBuffer::downloadTo(void *host, int64_t bytes) const {
  const auto &d = runtime::cudaDriver();
  LCEJIT_CU(d.ctxSynchronize());
  if (bytes > 0)
    LCEJIT_CU(d.memcpyDtoH(host, ptr_, static_cast<size_t>(bytes)));
}

RefKernels &RefKernels::get() {
  static RefKernels k;
  return k;
}

RefKernels::RefKernels() {
  runtime::ensureContext();
  runtime::NvrtcRequest req;
  req.source = kRefSource;
  req.arch = runtime::targetFor(runtime::currentDeviceInfo()).archName();
  req.label = "gpu-test-reference";
  runtime::NvrtcOutput out = runtime::compileCuda(req);
  module_ = runtime::Module(out.cubin);
}

void RefKernels::launch(const char *name, int64_t gridX, int64_t gridY, int block,
                        std::vector<void *> args) {
  const auto &d = runtime::cudaDriver();
  CUlaunchConfig cfg{};
  cfg.gridDimX = static_cast<unsigned>(gridX);
  cfg.gridDimY = static_cast<unsigned>(gridY);
  cfg.gridDimZ = 1;
  cfg.blockDimX = static_cast<unsigned>(block);
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  LCEJIT_CU(d.launchKernelEx(&cfg, module_.function(name), args.data(), nullptr));
}

void RefKernels::fillRandom(const DeviceBuffer &out, DType dtype, int64_t n, uint64_t seed,
                            double scale) {
  CUdeviceptr p = out.ptr();
  int code = dtypeCode(dtype);
  long long nn = n;
  unsigned long long s = seed;
  launch("fill_random", gridFor(n), 1, 256, {&p, &code, &nn, &s, &scale});
}

void RefKernels::fillTargets(const DeviceBuffer &out, DType dtype, int64_t n, uint64_t seed,
                             int64_t vocab, int64_t ignoreIndex, int ignoreEvery, int64_t badRow,
                             int64_t badValue) {
  CUdeviceptr p = out.ptr();
  int is64 = dtype == DType::I64;
  long long nn = n, v = vocab, ii = ignoreIndex, br = badRow, bv = badValue;
  unsigned long long s = seed;
  launch("fill_targets", gridFor(n), 1, 256, {&p, &is64, &nn, &s, &v, &ii, &ignoreEvery, &br, &bv});
}

void RefKernels::peakRows(const DeviceBuffer &h, const DeviceBuffer &w, DType dtype,
                          const DeviceBuffer &y, DType targetType, int64_t n, int64_t d,
                          int64_t vocab, double boost, int64_t every) {
  CUdeviceptr ph = h.ptr(), pw = w.ptr(), py = y.ptr();
  int code = dtypeCode(dtype), is64 = targetType == DType::I64;
  long long nn = n, dd = d, vv = vocab, ev = every;
  if (n > 0)
    launch("peak_rows", static_cast<unsigned>(n), 1, 256,
           {&ph, &pw, &code, &py, &is64, &nn, &dd, &vv, &boost, &ev});
}

void RefKernels::toF64(const DeviceBuffer &in, DType dtype, const DeviceBuffer &out, int64_t n) {
  CUdeviceptr a = in.ptr(), b = out.ptr();
  int code = dtypeCode(dtype);
  long long nn = n;
  launch("to_f64", gridFor(n), 1, 256, {&a, &code, &b, &nn});
}

void RefKernels::gemm(const DeviceBuffer &a, const DeviceBuffer &b, const DeviceBuffer &c,
                      int64_t m, int64_t n, int64_t k, int layout) {
  CUdeviceptr pa = a.ptr(), pb = b.ptr(), pc = c.ptr();
  long long mm = m, nn = n, kk = k;
  if (m == 0 || n == 0)
    return;
  launch("gemm_f64", (n + 63) / 64, (m + 63) / 64, 256, {&pa, &pb, &pc, &mm, &nn, &kk, &layout});
}

void RefKernels::lceRows(const DeviceBuffer &z, const DeviceBuffer &y, bool is64, int64_t n,
                         int64_t v, double softcap, std::optional<int64_t> ignoreIndex,
                         const DeviceBuffer &lse, const DeviceBuffer &rowLoss,
                         const DeviceBuffer &valid) {
  if (n == 0)
    return;
  CUdeviceptr pz = z.ptr(), py = y.ptr(), pl = lse.ptr(), pr = rowLoss.ptr(), pv = valid.ptr();
  int i64 = is64, has = ignoreIndex.has_value();
  long long nn = n, vv = v, ii = ignoreIndex.value_or(0);
  launch("lce_rows_f64", n, 1, 256, {&pz, &py, &i64, &nn, &vv, &softcap, &ii, &has, &pl, &pr, &pv});
}

void RefKernels::lceDz(const DeviceBuffer &z, const DeviceBuffer &y, bool is64, int64_t n,
                       int64_t v, double softcap, const DeviceBuffer &lse,
                       const DeviceBuffer &valid, double scale) {
  if (n == 0)
    return;
  CUdeviceptr pz = z.ptr(), py = y.ptr(), pl = lse.ptr(), pv = valid.ptr();
  int i64 = is64;
  long long nn = n, vv = v;
  launch("lce_dz_f64", gridFor(n * v), 1, 256, {&pz, &py, &i64, &nn, &vv, &softcap, &pl, &pv, &scale});
}

void RefKernels::scaleAdd(const DeviceBuffer &y, double a, const DeviceBuffer &x, DType dtype,
                          int64_t n) {
  CUdeviceptr py = y.ptr(), px = x.ptr();
  int code = dtypeCode(dtype);
  long long nn = n;
  if (n > 0)
    launch("scale_add_f64", gridFor(n), 1, 256, {&py, &a, &px, &code, &nn});
}

void RefKernels::scale(const DeviceBuffer &y, double a, int64_t n) {
  CUdeviceptr py = y.ptr(), px = 0;
  int code = 2;
  long long nn = n;
  if (n > 0)
    launch("scale_add_f64", gridFor(n), 1, 256, {&py, &a, &px, &code, &nn});
}

Comparison RefKernels::compare(const DeviceBuffer &x, DType dtype, const DeviceBuffer &ref, int64_t n) {
  DeviceBuffer acc(7 * sizeof(double));
  const auto &d = runtime::cudaDriver();
  LCEJIT_CU(d.memsetD8Async(acc.ptr(), 0, 7 * sizeof(double), nullptr));
  CUdeviceptr px = x.ptr(), pr = ref.ptr(), pa = acc.ptr();
  int code = dtypeCode(dtype);
  long long nn = n;
  if (n > 0)
    launch("compare_f64", gridFor(n), 1, 256, {&px, &code, &pr, &nn, &pa});
  std::vector<double> h = acc.download<double>();
  Comparison c;
  c.refNorm = std::sqrt(h[1]);
  c.relError = h[1] > 0 ? std::sqrt(h[0] / h[1]) : std::sqrt(h[0]);
  c.floor = h[1] > 0 ? std::sqrt(h[2] / h[1]) : 0.0;
  c.nonFinite = static_cast<int64_t>(h[3]);
  c.bf16Floor = h[1] > 0 ? std::sqrt(h[4] / h[1]) : 0.0;
  c.maxAbsError = h[5];
  c.maxAbsRef = h[6];
  return c;
}

/// The loss from lce_rows_f64's row losses and valid flags: their sum, divided by the count
/// of valid rows (Mean with an ignore index), N (Mean without) or 1 (Sum); *den gets the
/// divisor.
static double reducedLoss(const LinearCrossEntropyOptions &o, const DeviceBuffer &rowLoss,
                          const DeviceBuffer &valid, int64_t n, double *den) {
  std::vector<double> rl(static_cast<size_t>(n)), va(static_cast<size_t>(n));
  if (n > 0) {
    rowLoss.downloadTo(rl.data(), n * 8);
    valid.downloadTo(va.data(), n * 8);
  }
  double total = 0, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    total += rl[static_cast<size_t>(i)];
    count += va[static_cast<size_t>(i)];
  }
  double dv = 1.0;
  if (o.reduction == Reduction::Mean)
    dv = o.ignoreIndex ? std::max(count, 1.0) : std::max<double>(static_cast<double>(n), 1.0);
  if (den)
    *den = dv;
  return total / dv;
}

GpuReference gpuReference(const LinearCrossEntropyOptions &o, const DeviceBuffer &hidden,
                          const DeviceBuffer &weight, const DeviceBuffer &targets, int64_t n) {
  RefKernels &k = RefKernels::get();
  const int64_t d = o.hidden, v = o.vocab;
  DeviceBuffer h64(n * d * 8), w64(v * d * 8), z(n * v * 8);
  k.toF64(hidden, o.dtype, h64, n * d);
  k.toF64(weight, o.dtype, w64, v * d);
  k.gemm(h64, w64, z, n, v, d, /*layout=*/0);
  DeviceBuffer lse(n * 8), rowLoss(n * 8), valid(n * 8);
  bool is64 = o.targetDType == DType::I64;
  double cap = o.softcap.value_or(0.0);
  k.lceRows(z, targets, is64, n, v, cap, o.ignoreIndex, lse, rowLoss, valid);
  GpuReference r;
  double den = 1.0;
  r.loss = reducedLoss(o, rowLoss, valid, n, &den);
  k.lceDz(z, targets, is64, n, v, cap, lse, valid, 1.0 / den);
  r.dH = DeviceBuffer(n * d * 8);
  r.dW = DeviceBuffer(v * d * 8);
  k.gemm(z, w64, r.dH, n, d, v, /*layout=*/1);
  if (n > 0) {
    k.gemm(z, h64, r.dW, v, d, n, /*layout=*/2);
  } else {
    LCEJIT_CU(runtime::cudaDriver().memsetD8Async(r.dW.ptr(), 0, static_cast<size_t>(v * d * 8), nullptr));
  }
  LCEJIT_CU(runtime::cudaDriver().ctxSynchronize());
  return r;
}

bool Cublas::load(std::string *why) {
  void *h = nullptr;
  for (const char *name : {"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13",
                           "libcublas.so.12", "libcublas.so"}) {
    if ((h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
      where = name;
      break;
    }
  }
  if (!h) {
    *why = std::string("dlopen(libcublas.so.13) failed: ") + ::dlerror();
    return false;
  }
  create = reinterpret_cast<CreateFn>(::dlsym(h, "cublasCreate_v2"));
  gemmEx = reinterpret_cast<GemmExFn>(::dlsym(h, "cublasGemmEx"));
  if (!create || !gemmEx) {
    *why = "libcublas lacks cublasCreate_v2/cublasGemmEx";
    return false;
  }
  if (create(&handle) != CUBLAS_STATUS_SUCCESS) {
    *why = "cublasCreate failed";
    return false;
  }
  return true;
}

void Cublas::gemm(bool transA, bool transB, int m, int n, int k, const void *a, int lda,
                  const void *b, int ldb, void *c, bool f32Out) {
  float one = 1.0f, zero = 0.0f;
  // Cᵀ = op(B)ᵀ · op(A)ᵀ in column-major terms.
  cublasStatus_t s = gemmEx(handle, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                            transA ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_16BF, ldb,
                            a, CUDA_R_16BF, lda, &zero, c, f32Out ? CUDA_R_32F : CUDA_R_16BF, n,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorKind::Cuda, fmt::format("cublasGemmEx failed with status {}", int(s)));
}

double cublasLogitLoss(const LinearCrossEntropyOptions &o, Cublas &blas, const DeviceBuffer &hidden,
                       const DeviceBuffer &weight, const DeviceBuffer &targets, int64_t n) {
  const auto &d = runtime::cudaDriver();
  const int64_t dd = o.hidden, v = o.vocab;
  LCEJIT_CHECK(o.dtype == DType::BF16, "cublasLogitLoss: bf16 inputs, not {}", dtypeName(o.dtype));
  RefKernels &k = RefKernels::get();
  DeviceBuffer z64(n * v * 8);
  {
    DeviceBuffer z32(n * v * 4);
    blas.gemm(false, true, static_cast<int>(n), static_cast<int>(v), static_cast<int>(dd),
              hidden.data(), static_cast<int>(dd), weight.data(), static_cast<int>(dd),
              z32.data(), /*f32Out=*/true);
    k.toF64(z32, DType::F32, z64, n * v);
    LCEJIT_CU(d.ctxSynchronize());
  }
  const bool is64 = o.targetDType == DType::I64;
  std::vector<int64_t> y(static_cast<size_t>(n), -1);
  if (is64) {
    targets.downloadTo(y.data(), n * 8);
  } else {
    std::vector<int32_t> y32(static_cast<size_t>(n));
    targets.downloadTo(y32.data(), n * 4);
    std::copy(y32.begin(), y32.end(), y.begin());
  }
  std::vector<uint16_t> h(static_cast<size_t>(n * dd)), wr(static_cast<size_t>(dd));
  hidden.downloadTo(h.data(), n * dd * 2);
  auto f = [](uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return static_cast<double>(x);
  };
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = y[static_cast<size_t>(r)];
    if (t < 0 || t >= v)
      continue;
    LCEJIT_CU(d.memcpyDtoH(wr.data(), weight.ptr() + static_cast<CUdeviceptr>(t * dd * 2),
                           static_cast<size_t>(dd) * 2));
    double zy = 0; // bf16 products are exact in f64
    for (int64_t j = 0; j < dd; ++j)
      zy += f(h[static_cast<size_t>(r * dd + j)]) * f(wr[static_cast<size_t>(j)]);
    LCEJIT_CU(d.memcpyHtoD(z64.ptr() + static_cast<CUdeviceptr>((r * v + t) * 8), &zy, 8));
  }
  DeviceBuffer lse(n * 8), rowLoss(n * 8), valid(n * 8);
  k.lceRows(z64, targets, is64, n, v, o.softcap.value_or(0.0), o.ignoreIndex, lse, rowLoss, valid);
  return reducedLoss(o, rowLoss, valid, n, nullptr);
}

} // namespace lcejit::gputest
