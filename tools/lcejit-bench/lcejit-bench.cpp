//===- lcejit-bench.cpp - The op against three cuBLAS GEMMs, same process ---===//
//
//   lcejit-bench [--tokens N] [--hidden D] [--vocab V] [--softcap C] [--iters K]
//                [--case A,B,C,Q,S,L | all] [--precision fast|exact] [--budget-mb M]
//                [--json FILE] [--series]
//
// --series: the 20-N series of issue 5 (20 random N in [4096, 33768], seed 2026, D = 4096,
// V = 128256): each N once through the op (synchronous, host-timed, compiles included)
// and the three cuBLAS GEMMs; prints the totals and the NVRTC compiles. Run it twice
// with the same LCEJIT_CACHE_DIR, first empty: the first run is the cold cache, the
// second (a new process) the warm disk cache, which must compile nothing.
//
// Cases (issue 5): A N=8192 D=4096 V=128256; B N=8192 D=2304 V=256000 softcap 30;
// C N=32768 D=4096 V=128256; Q N=4096 D=4096 V=128256; S N=2048 D=4096 V=128256;
// L N=65536 D=4096 V=128256. Without --case, one case from --tokens/--hidden/--vocab.
//
// Times forward+backward of lcejit::LinearCrossEntropy (bf16 inputs, f32 dW) and the
// three bf16 cuBLAS GEMMs of the same shapes (Z = H·Wᵀ, dH = dZ·W, dW = dZᵀ·H, bf16 in
// and out, f32 accumulate) in the same process, with CUDA events, on random data
// (never zeros), after warm-up; prints medians, the ratio op/cuBLAS and TFLOP/s
// counted as 6·N·D·V. cuBLAS is loaded with dlopen (libcublas.so.13), like libcuda.
//
//===----------------------------------------------------------------------===//

#include "lcejit/LinearCrossEntropy.h"
#include "runtime/CudaDriver.h"
#include "runtime/Module.h"
#include "runtime/Nvrtc.h"

#include <cublas_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <tuple>
#include <cstdio>
#include <optional>
#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

using namespace lcejit;

namespace {

const char *kFillSource = R"(
extern "C" __global__ void fill_bf16(unsigned short *out, long long n, unsigned long long seed,
                                     float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    unsigned long long x = (unsigned long long)i * 0x9e3779b97f4a7c15ull + seed;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    float v = (float((x >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * scale;
    unsigned int u = __float_as_uint(v);
    u += 0x7fffu + ((u >> 16) & 1u);
    out[i] = (unsigned short)(u >> 16);
  }
}
extern "C" __global__ void fill_targets(long long *out, long long n, long long vocab) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = (i * 2654435761ll) % vocab;
}
)";

struct Args {
  int64_t n = 8192, d = 4096, v = 128256;
  std::optional<double> softcap;
  int iters = 10;
  std::vector<std::string> cases; ///< named cases; empty: the one given by the sizes
  Precision precision = Precision::Fast;
  int64_t budgetMb = 0; ///< 0: the op's default
  std::string json;     ///< write the results as JSON here
  bool series = false;
};

struct CaseShape {
  std::string name;
  int64_t n, d, v;
  std::optional<double> softcap;
};

const CaseShape kCases[] = {
    {"A", 8192, 4096, 128256, {}},  {"B", 8192, 2304, 256000, 30.0},
    {"C", 32768, 4096, 128256, {}}, {"Q", 4096, 4096, 128256, {}},
    {"S", 2048, 4096, 128256, {}},  {"L", 65536, 4096, 128256, {}},
};

struct Result {
  std::string name;
  int64_t n, d, v;
  std::optional<double> softcap;
  double opMs = 0, blasMs = 0;
  int64_t workspace = 0;
  std::string schedule;
};

[[noreturn]] void usage(const std::string &msg) {
  std::cerr << "lcejit-bench: " << msg
            << "\nusage: lcejit-bench [--tokens N] [--hidden D] [--vocab V] [--softcap C] [--iters K]\n"
               "                    [--case A,B,C,Q,S,L|all] [--precision fast|exact] [--budget-mb M]\n"
               "                    [--json FILE] [--series]\n";
  std::exit(2);
}

Args parse(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "--series") {
      a.series = true;
      continue;
    }
    if (i + 1 >= argc)
      usage(f + " needs a value");
    std::string v = argv[++i];
    try {
      if (f == "--tokens") a.n = std::stoll(v);
      else if (f == "--hidden") a.d = std::stoll(v);
      else if (f == "--vocab") a.v = std::stoll(v);
      else if (f == "--softcap") a.softcap = std::stod(v);
      else if (f == "--iters") a.iters = std::stoi(v);
      else if (f == "--budget-mb") a.budgetMb = std::stoll(v);
      else if (f == "--json") a.json = v;
      else if (f == "--precision") {
        if (v == "fast") a.precision = Precision::Fast;
        else if (v == "exact") a.precision = Precision::Exact;
        else usage("--precision must be fast or exact, got '" + v + "'");
      } else if (f == "--case") {
        std::string rest = v;
        if (rest == "all")
          rest = "A,B,C,Q,S,L";
        size_t pos = 0;
        while (pos <= rest.size()) {
          size_t comma = rest.find(',', pos);
          std::string c = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
          bool known = false;
          for (const CaseShape &k : kCases)
            known |= k.name == c;
          if (!known)
            usage("--case: unknown case '" + c + "' (A, B, C, Q, S, L or all)");
          a.cases.push_back(c);
          if (comma == std::string::npos)
            break;
          pos = comma + 1;
        }
      } else usage("unknown option " + f);
    } catch (const std::logic_error &) {
      usage(f + ": bad value '" + v + "'");
    }
  }
  if (a.n <= 0 || a.d <= 0 || a.v <= 0 || a.iters <= 0 || a.budgetMb < 0)
    usage("sizes and --iters must be positive, --budget-mb >= 0");
  return a;
}

void cu(CUresult r, const char *what) {
  if (r != CUDA_SUCCESS)
    runtime::throwCudaError(r, what, __FILE__, __LINE__);
}

struct Mem {
  explicit Mem(size_t bytes) { cu(runtime::cudaDriver().memAlloc(&p, bytes), "memAlloc"); }
  ~Mem() { runtime::cudaDriver().memFree(p); }
  void *data() const { return reinterpret_cast<void *>(static_cast<uintptr_t>(p)); }
  CUdeviceptr p = 0;
};

/// cuBLAS through dlopen: only what the benchmark needs.
struct Cublas {
  using CreateFn = cublasStatus_t (*)(cublasHandle_t *);
  using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
  using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void *, const void *, cudaDataType, int,
                                      const void *, cudaDataType, int, const void *, void *,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  CreateFn create = nullptr;
  SetStreamFn setStream = nullptr;
  GemmExFn gemmEx = nullptr;
  cublasHandle_t handle = nullptr;
  std::string where;

  bool load(std::string *why) {
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
    setStream = reinterpret_cast<SetStreamFn>(::dlsym(h, "cublasSetStream_v2"));
    gemmEx = reinterpret_cast<GemmExFn>(::dlsym(h, "cublasGemmEx"));
    if (!create || !setStream || !gemmEx) {
      *why = "libcublas lacks cublasCreate_v2/cublasSetStream_v2/cublasGemmEx";
      return false;
    }
    if (create(&handle) != CUBLAS_STATUS_SUCCESS) {
      *why = "cublasCreate failed";
      return false;
    }
    return true;
  }

  /// Row-major C[m, n] = op(A) · op(B), bf16 in/out, f32 accumulate, via col-major Cᵀ.
  void gemm(bool transA, bool transB, int m, int n, int k, const void *a, int lda, const void *b,
            int ldb, void *c) {
    float one = 1.0f, zero = 0.0f;
    // Cᵀ = op(B)ᵀ · op(A)ᵀ in column-major terms.
    cublasStatus_t s = gemmEx(handle, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                              n, m, k, &one, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &zero, c,
                              CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      throw Error(ErrorKind::Cuda, fmt::format("cublasGemmEx failed with status {}", int(s)));
  }
};

template <typename F> double medianMs(int iters, CUstream s, F f) {
  const auto &d = runtime::cudaDriver();
  CUevent e0, e1;
  cu(d.eventCreate(&e0, 0), "eventCreate");
  cu(d.eventCreate(&e1, 0), "eventCreate");
  f();
  f(); // warm-up
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    cu(d.eventRecord(e0, s), "eventRecord");
    f();
    cu(d.eventRecord(e1, s), "eventRecord");
    cu(d.eventSynchronize(e1), "eventSynchronize");
    float t = 0;
    cu(d.eventElapsedTime(&t, e0, e1), "eventElapsedTime");
    ms.push_back(t);
  }
  d.eventDestroy(e0);
  d.eventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

} // namespace

/// Random device data from the kernels of kFillSource (never zeros).
struct Filler {
  const runtime::Module &module;
  void launch(const char *fn, void **args, unsigned grid) const {
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 256;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cu(runtime::cudaDriver().launchKernelEx(&cfg, module.function(fn), args, nullptr), "fill");
  }
  /// n bf16 values uniform in [-scale, scale].
  void bf16(const Mem &m, long long n, unsigned long long seed, float scale) const {
    CUdeviceptr p = m.p;
    void *args[] = {&p, &n, &seed, &scale};
    launch("fill_bf16", args, 4096);
  }
  /// n i64 targets in [0, vocab).
  void targets(const Mem &m, long long n, long long vocab) const {
    CUdeviceptr p = m.p;
    void *args[] = {&p, &n, &vocab};
    launch("fill_targets", args, 1024);
  }
};

/// The op's options for a benchmark shape (bf16 inputs, f32 dW).
LinearCrossEntropyOptions benchOptions(const Args &a, int64_t d, int64_t v,
                                       std::optional<double> softcap) {
  LinearCrossEntropyOptions o;
  o.hidden = d;
  o.vocab = v;
  o.dtype = DType::BF16;
  o.softcap = softcap;
  o.precision = a.precision;
  o.workspaceBudgetBytes = a.budgetMb << 20;
  return o;
}

Result runCase(const Args &a, const CaseShape &cs, const Filler &fill, Cublas *blas) {
  const auto &d = runtime::cudaDriver();
  const long long N = cs.n, D = cs.d, V = cs.v;
  Result r;
  r.name = cs.name;
  r.n = N;
  r.d = D;
  r.v = V;
  r.softcap = cs.softcap;
  Mem h(size_t(N * D) * 2), w(size_t(V * D) * 2), y(size_t(N) * 8), dh(size_t(N * D) * 2),
      dw(size_t(V * D) * 4), loss(256);
  float scale = 2.0f / std::pow(float(D), 0.25f);
  fill.bf16(h, N * D, 1, scale);
  fill.bf16(w, V * D, 2, scale);
  fill.targets(y, N, V);
  cu(d.ctxSynchronize(), "sync");

  LinearCrossEntropy op(benchOptions(a, D, V, cs.softcap));
  r.workspace = op.workspaceBytes(N);
  r.schedule = op.scheduleSummary(N);
  CUstream s = nullptr;
  r.opMs = medianMs(a.iters, s, [&] {
    op.enqueue({h.data(), DType::BF16, {N, D}, {}}, {w.data(), DType::BF16, {V, D}, {}},
               {y.data(), DType::I64, {N}, {}}, {loss.data(), DType::F32, {}, {}},
               {dh.data(), DType::BF16, {N, D}, {}}, {dw.data(), DType::F32, {V, D}, {}}, s);
  });
  op.checkDeviceErrors();
  if (blas) {
    Mem z(size_t(N * V) * 2), dwb(size_t(V * D) * 2);
    fill.bf16(z, N * V, 3, 1e-3f);
    r.blasMs = medianMs(a.iters, s, [&] {
      blas->gemm(false, true, int(N), int(V), int(D), h.data(), int(D), w.data(), int(D), z.data());
      blas->gemm(false, false, int(N), int(D), int(V), z.data(), int(V), w.data(), int(D), dh.data());
      blas->gemm(true, false, int(V), int(D), int(N), z.data(), int(V), h.data(), int(D), dwb.data());
    });
  }
  return r;
}

/// The 20-N series: every N once (host-timed, synchronous), the op then cuBLAS.
int runSeries(const Args &a, const Filler &fill, Cublas *blas) {
  const auto &d = runtime::cudaDriver();
  std::mt19937_64 rng(2026);
  std::uniform_int_distribution<int64_t> dist(4096, 33768);
  std::vector<int64_t> ns;
  for (int i = 0; i < 20; ++i)
    ns.push_back(dist(rng));
  const long long D = 4096, V = 128256, NMAX = *std::max_element(ns.begin(), ns.end());
  Mem h(size_t(NMAX * D) * 2), w(size_t(V * D) * 2), y(size_t(NMAX) * 8),
      dh(size_t(NMAX * D) * 2), dw(size_t(V * D) * 4), loss(256), z(size_t(NMAX * V) * 2),
      dwb(size_t(V * D) * 2);
  float scale = 2.0f / std::pow(float(D), 0.25f);
  fill.bf16(h, NMAX * D, 1, scale);
  fill.bf16(w, V * D, 2, scale);
  fill.bf16(z, NMAX * V, 3, 1e-3f);
  fill.targets(y, NMAX, V);
  cu(d.ctxSynchronize(), "sync");
  LinearCrossEntropy op(benchOptions(a, D, V, std::nullopt));
  const int64_t compiles0 = LinearCrossEntropy::compileCount();
  double opTotal = 0, blasTotal = 0, firstMs = 0;
  for (size_t i = 0; i < ns.size(); ++i) {
    const long long N = ns[i];
    auto t0 = std::chrono::steady_clock::now();
    op.forwardBackward({h.data(), DType::BF16, {N, D}, {}}, {w.data(), DType::BF16, {V, D}, {}},
                       {y.data(), DType::I64, {N}, {}}, {dh.data(), DType::BF16, {N, D}, {}},
                       {dw.data(), DType::F32, {V, D}, {}});
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0)
      firstMs = ms;
    opTotal += ms;
    if (blas) {
      cu(d.ctxSynchronize(), "sync");
      auto b0 = std::chrono::steady_clock::now();
      blas->gemm(false, true, int(N), int(V), int(D), h.data(), int(D), w.data(), int(D), z.data());
      blas->gemm(false, false, int(N), int(D), int(V), z.data(), int(V), w.data(), int(D), dh.data());
      blas->gemm(true, false, int(V), int(D), int(N), z.data(), int(V), h.data(), int(D), dwb.data());
      cu(d.ctxSynchronize(), "sync");
      blasTotal += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - b0).count();
    }
  }
  const int64_t compiles = LinearCrossEntropy::compileCount() - compiles0;
  fmt::print("series: 20 N in [4096, 33768] (D=4096 V=128256): lcejit {:.1f} ms total (first call "
             "{:.1f} ms), cuBLAS 3 GEMMs {:.1f} ms total, ratio {:.2f}; NVRTC compiles {}\n",
             opTotal, firstMs, blasTotal, blasTotal > 0 ? opTotal / blasTotal : 0.0, compiles);
  if (!a.json.empty()) {
    FILE *f = std::fopen(a.json.c_str(), "w");
    if (!f)
      throw Error(ErrorKind::InvalidArgument, "--json: cannot write " + a.json);
    std::fprintf(f, "{\"series_lcejit_ms\": %.3f, \"series_cublas_ms\": %.3f, \"compiles\": %lld, \"first_call_ms\": %.3f}\n",
                 opTotal, blasTotal, static_cast<long long>(compiles), firstMs);
    std::fclose(f);
  }
  return 0;
}

int main(int argc, char **argv) {
  Args a = parse(argc, argv);
  try {
    runtime::ensureContext();
    runtime::DeviceInfo info = runtime::currentDeviceInfo();
    runtime::NvrtcRequest req;
    req.source = kFillSource;
    req.arch = runtime::targetFor(info).archName();
    req.label = "bench-fill";
    runtime::Module fillModule(runtime::compileCuda(req).cubin);
    Filler fill{fillModule};
    Cublas blas;
    std::string why;
    bool haveBlas = blas.load(&why);
    if (a.series)
      return runSeries(a, fill, haveBlas ? &blas : nullptr);
    std::vector<CaseShape> shapes;
    for (const std::string &c : a.cases)
      for (const CaseShape &k : kCases)
        if (k.name == c)
          shapes.push_back(k);
    if (shapes.empty())
      shapes.push_back(CaseShape{"custom", a.n, a.d, a.v, a.softcap});
    fmt::print("device: {} (sm_{}, {} SMs); precision {}; budget {}; cuBLAS {}\n", info.name,
               info.smVersion(), info.numSMs, a.precision == Precision::Exact ? "exact" : "fast",
               a.budgetMb ? fmt::format("{} MiB", a.budgetMb) : std::string("default"),
               haveBlas ? blas.where : "not measured: " + why);
    std::vector<Result> results;
    for (const CaseShape &cs : shapes) {
      Result r = runCase(a, cs, fill, haveBlas ? &blas : nullptr);
      fmt::print("{}: {}\n", r.name, r.schedule);
      std::fflush(stdout);
      results.push_back(r);
    }
    fmt::print("\n| case | N | D | V | softcap | lcejit ms | TFLOP/s | cuBLAS ms | TFLOP/s | ratio | "
               "workspace MiB |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::string json = "[";
    for (const Result &r : results) {
      double flops = 6.0 * double(r.n) * double(r.d) * double(r.v);
      double ratio = r.blasMs > 0 ? r.opMs / r.blasMs : 0.0;
      fmt::print("| {} | {} | {} | {} | {} | {:.1f} | {:.0f} | {:.1f} | {:.0f} | {:.2f} | {:.0f} |\n",
                 r.name, r.n, r.d, r.v, r.softcap ? fmt::format("{}", *r.softcap) : "-", r.opMs,
                 flops / (r.opMs * 1e-3) / 1e12, r.blasMs,
                 r.blasMs > 0 ? flops / (r.blasMs * 1e-3) / 1e12 : 0.0, ratio,
                 double(r.workspace) / (1 << 20));
      json += fmt::format("{}{{\"case\": \"{}\", \"n\": {}, \"d\": {}, \"v\": {}, \"softcap\": {}, "
                          "\"lcejit_ms\": {:.4f}, \"cublas_ms\": {:.4f}, \"ratio\": {:.4f}, "
                          "\"workspace_bytes\": {}, \"schedule\": \"{}\"}}",
                          json.size() > 1 ? ", " : "", r.name, r.n, r.d, r.v,
                          r.softcap ? fmt::format("{}", *r.softcap) : "null", r.opMs, r.blasMs,
                          ratio, r.workspace, r.schedule);
    }
    json += "]\n";
    if (!a.json.empty()) {
      FILE *f = std::fopen(a.json.c_str(), "w");
      if (!f)
        throw Error(ErrorKind::InvalidArgument, "--json: cannot write " + a.json);
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
    return 0;
  } catch (const Error &e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
