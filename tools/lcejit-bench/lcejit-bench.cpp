//===- lcejit-bench.cpp - The op against three cuBLAS GEMMs, same process ---===//
//
//   lcejit-bench [--tokens N] [--hidden D] [--vocab V] [--softcap C] [--iters K]
//                [--case A,B,C,Q,S,L,W | all] [--precision fast|exact] [--budget-mb M]
//                [--json FILE] [--series [--series-blas-first]] [--forward] [--check]
//                [--trace] [--paired] [--mode default|lean]
//                [--gemm-only [--gemm-config BN,STAGES,GROUP[,pp]/...]]
//
// (llvm::cl: `--help` lists every option with its default; tools/ToolOptions.h.)
//
// --forward: forward() (the loss only, 2·N·D·V) against the one cuBLAS GEMM Z = H·Wᵀ.
//
// --check: after timing, one more call on the same inputs (outputs poisoned with NaN) is
// compared with the fp64 reference of the GPU suite (tests/gpu/GpuSupport.h: the logits,
// loss and gradients from the definition, in fp64 on the device): the loss's relative
// error, dH against the error of rounding the reference to bf16 (its floor) and the f32
// dW against the bf16 floor, as the suite reports them. The reference holds the f64
// logits (8·N·V bytes) and multiplies in plain fp64, so cases above N·V·D = 2e13 (L) say
// "skipped". It runs between the timed loops and moves the clocks: time without it.
//
// --trace: after timing, one more call with the launch trace on ([Note: launch trace] in
// runtime/LaunchTrace.h): each launch's GPU time as it ran in the sequence, back to back at
// the card's power cap (ncu times kernels one at a time), and the idle gaps between
// launches; per kernel, the launches, total and mean; and each cuBLAS GEMM timed alone.
//
// --paired: after the medians, --iters pairs of one op call and its cuBLAS floor (the
// three GEMMs; with --forward, Z), each timed alone, in alternating order (the op first in
// even pairs, cuBLAS first in odd ones), so that both halves of a pair run in the same
// thermal and power state: the median of the pairs' ratios and their range, next to the
// medians' ratio. The medians time the op's runs first and cuBLAS's after, seconds apart,
// and a card at its power cap drifts between them ([Note: paired ratios]).
//
// --series: the 20-N series of issue 5 (20 random N in [4096, 33768], seed 2026, D = 4096,
// V = 128256): each N once through the op (synchronous, host-timed, compiles included)
// and the three cuBLAS GEMMs; prints the totals and the NVRTC compiles. Run it twice
// with the same LCEJIT_CACHE_DIR, first empty: the first run is the cold cache, the
// second (a new process) the warm disk cache, which must compile nothing. Per call it also
// shows what of it was LinearCrossEntropy::prepare (the host work of a new N) and the
// time of a second call at that N right after (not in the totals): a first call's cost
// at an N against a steady one. --series-blas-first runs cuBLAS's three GEMMs at each N
// before the op's calls instead of after (the order's share of a first call's cost).
// --series --trace traces both calls at each N: their kernels' GPU time and the gaps
// between their launches (where a first call's excess goes: GPU work or host time).
//
// Cases (issue 5): A N=8192 D=4096 V=128256; B N=8192 D=2304 V=256000 softcap 30;
// C N=32768 D=4096 V=128256; Q N=4096 D=4096 V=128256; S N=2048 D=4096 V=128256;
// L N=65536 D=4096 V=128256; W N=2048 D=8192 V=152064 (issue 6 calls it Q). Without --case,
// one case from --tokens/--hidden/--vocab.
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
#include "runtime/LaunchTrace.h"
#include "runtime/Module.h"
#include "runtime/Nvrtc.h"
#include "tests/gpu/GpuSupport.h"
#include "tools/ToolOptions.h"

#include "llvm/ADT/StringSwitch.h"

#include <fmt/format.h>

#include "compiler/codegen/Sm90GemmEmitter.h"
#include "runtime/Sm90Launch.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
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
__device__ float bf16_to_f32(unsigned short b) { return __uint_as_float((unsigned int)b << 16); }
// sums[0] += sum (x - ref)^2, sums[1] += sum ref^2 (x bf16 or f32, ref bf16).
template <class X> __device__ void diff_sums(const X *x, const unsigned short *ref, long long n,
                                             double *sums, float (*get)(X)) {
  double dd = 0, rr = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    double r = bf16_to_f32(ref[i]), e = (double)get(x[i]) - r;
    dd += e * e;
    rr += r * r;
  }
  for (int o = 16; o > 0; o >>= 1) {
    dd += __shfl_xor_sync(0xffffffffu, dd, o);
    rr += __shfl_xor_sync(0xffffffffu, rr, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums[0], dd);
    atomicAdd(&sums[1], rr);
  }
}
__device__ float get_bf16(unsigned short v) { return bf16_to_f32(v); }
__device__ float get_f32(float v) { return v; }
extern "C" __global__ void diff_bf16(const unsigned short *x, const unsigned short *ref, long long n,
                                     double *sums) {
  diff_sums<unsigned short>(x, ref, n, sums, get_bf16);
}
extern "C" __global__ void diff_f32(const float *x, const unsigned short *ref, long long n,
                                    double *sums) {
  diff_sums<float>(x, ref, n, sums, get_f32);
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
  DType gradWeight = DType::F32; ///< --grad-weight: dW's dtype
  bool peaked = false;           ///< --logits peaked: each row's target logit ~20 above the rest
  int64_t budgetMb = 0; ///< 0: the op's default
  std::string json;     ///< write the results as JSON here
  bool series = false;
  bool seriesBlasFirst = false; ///< --series-blas-first: cuBLAS before the op at each N
  bool gemmOnly = false;
  bool forward = false; ///< --forward: the loss only (forward()) against the one cuBLAS GEMM Z
  bool check = false;   ///< --check: errors against the fp64 reference
  bool trace = false;   ///< --trace: one call's launches, timed back to back
  bool paired = false;  ///< --paired: op and cuBLAS timed in alternating pairs
  /// --gemm-config BN,STAGES,GROUP[,FLAGS]/...: the 4th value's bits: 1 ping-pong
  /// consumers, 2 tiles of 64 rows (with 1), 4 pairs sharing B (Z only), 8 tiles of 192 rows
  /// on three cooperative consumers.
  std::vector<std::array<int, 4>> gemmConfigs{{256, 4, 8, 0}};
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
    {"W", 2048, 8192, 152064, {}}, // issue 6's "Q": a wide head (Qwen-like)
};

struct Result {
  std::string name;
  int64_t n, d, v;
  std::optional<double> softcap;
  double opMs = 0, blasMs = 0;
  int64_t workspace = 0;
  std::string schedule;
  /// --check: errors against the fp64 reference (negative: not checked).
  double lossErr = -1, dhErr = -1, dhFloor = -1, dwErr = -1, dwBf16Floor = -1;
  /// --check with cuBLAS: the loss from cuBLAS's f32 logits (bf16 tensor cores, f32
  /// accumulation) finished in fp64 with the exact target logit, against the reference:
  /// what the logits' GEMM alone leaves in the loss (negative: not measured).
  double blasLogitLossErr = -1;
  std::string checkNote; ///< why a case was not checked
  std::string trace;     ///< --trace: the report of one traced call
  /// --paired: the medians of the pairs' op and cuBLAS times and of their ratios, and the
  /// ratios' range (negative: not measured).
  double pairedOpMs = -1, pairedBlasMs = -1, pairedRatio = -1, pairedLo = -1, pairedHi = -1;
};

namespace cl = llvm::cl;

cl::OptionCategory kCategory("lcejit-bench options");

cl::opt<int64_t> tokensOpt("tokens", cl::value_desc("N"), cl::desc("token count (default: 8192)"),
                           cl::init(8192), cl::cat(kCategory));
cl::opt<int64_t> hiddenOpt("hidden", cl::value_desc("D"), cl::desc("hidden size (default: 4096)"),
                           cl::init(4096), cl::cat(kCategory));
cl::opt<int64_t> vocabOpt("vocab", cl::value_desc("V"),
                          cl::desc("vocabulary size (default: 128256)"), cl::init(128256),
                          cl::cat(kCategory));
cl::opt<double> softcapOpt("softcap", cl::value_desc("C"),
                           cl::desc("logits become C*tanh(z/C) (default: none)"),
                           cl::cat(kCategory));
cl::opt<int> itersOpt("iters", cl::value_desc("K"),
                      cl::desc("timed runs per measurement, the median is reported (default: 10)"),
                      cl::init(10), cl::cat(kCategory));
/// --case values: kCases in order, and "all".
enum class CaseArg { A, B, C, Q, S, L, W, All };
static_assert(std::size(kCases) == size_t(CaseArg::All));
cl::list<CaseArg> caseOpt(
    "case", cl::CommaSeparated,
    cl::desc("named shapes (issue 5); without --case, the one shape of --tokens/--hidden/--vocab"),
    cl::values(clEnumValN(CaseArg::A, "A", "N=8192 D=4096 V=128256"),
               clEnumValN(CaseArg::B, "B", "N=8192 D=2304 V=256000 softcap 30"),
               clEnumValN(CaseArg::C, "C", "N=32768 D=4096 V=128256"),
               clEnumValN(CaseArg::Q, "Q", "N=4096 D=4096 V=128256"),
               clEnumValN(CaseArg::S, "S", "N=2048 D=4096 V=128256"),
               clEnumValN(CaseArg::L, "L", "N=65536 D=4096 V=128256"),
               clEnumValN(CaseArg::W, "W", "N=2048 D=8192 V=152064 (issue 6's Q)"),
               clEnumValN(CaseArg::All, "all", "A,B,C,Q,S,L,W")),
    cl::cat(kCategory));
cl::opt<Precision> precisionOpt(
    "precision", cl::desc("gradient precision of bf16 inputs (default: fast)"),
    cl::init(Precision::Fast),
    cl::values(clEnumValN(Precision::Fast, "fast", "dZ rounded once to bf16"),
               clEnumValN(Precision::Exact, "exact", "dZ as a hi+lo bf16 pair")),
    cl::cat(kCategory));
cl::opt<DType> gradWeightOpt(
    "grad-weight", cl::desc("dW's dtype (default: f32)"), cl::init(DType::F32),
    cl::values(clEnumValN(DType::F32, "f32", "an f32 dW (the materialized schedule)"),
               clEnumValN(DType::BF16, "bf16",
                          "a bf16 dW, written once (the vocab-chunked recompute)")),
    cl::cat(kCategory));
enum class LogitsArg { Random, Peaked };
cl::opt<LogitsArg> logitsOpt(
    "logits", cl::desc("the data (default: random)"), cl::init(LogitsArg::Random),
    cl::values(clEnumValN(LogitsArg::Random, "random", "random bf16 H and W, random targets"),
               clEnumValN(LogitsArg::Peaked, "peaked",
                          "each row's target logit raised ~20 over the rest (softmax near "
                          "one-hot: issue 5's peaked data)")),
    cl::cat(kCategory));
cl::opt<int64_t> budgetMbOpt("budget-mb", cl::value_desc("M"),
                             cl::desc("workspace budget in MiB (default: 0, the op's default)"),
                             cl::init(0), cl::cat(kCategory));
/// --mode lean: the lean schedule of issue 5, the planner's choice under a 64 MiB workspace
/// budget (the vocab-chunked recompute with row blocks); --budget-mb sets another budget.
enum class ModeArg { Default, Lean };
cl::opt<ModeArg> modeOpt("mode", cl::desc("schedule (default: the op's, under its budget)"),
                         cl::values(clEnumValN(ModeArg::Default, "default",
                                               "the op's default budget (512 MiB)"),
                                    clEnumValN(ModeArg::Lean, "lean",
                                               "a 64 MiB budget unless --budget-mb says "
                                               "otherwise: the lean recompute schedule")),
                         cl::init(ModeArg::Default), cl::cat(kCategory));
cl::opt<std::string> jsonOpt("json", cl::value_desc("FILE"),
                             cl::desc("write the results as JSON here"), cl::cat(kCategory));
cl::opt<bool> seriesOpt("series",
                        cl::desc("the 20-N series of issue 5 (compiles included): cold, then "
                                 "warm disk cache"),
                        cl::cat(kCategory));
cl::opt<bool> seriesBlasFirstOpt(
    "series-blas-first",
    cl::desc("with --series: per N, the three cuBLAS GEMMs before the op's calls instead of "
             "after (the op's first call at an N then follows cuBLAS's at the same N)"),
    cl::cat(kCategory));
cl::opt<bool> forwardOpt("forward",
                         cl::desc("forward() (the loss only) against the one cuBLAS GEMM Z = H*W^T"),
                         cl::cat(kCategory));
cl::opt<bool> traceOpt("trace",
                       cl::desc("also trace one call: each launch's GPU time back to back, the "
                                "gaps between launches, and each cuBLAS GEMM alone (with "
                                "--series: both calls at each N, kernels and gaps)"),
                       cl::cat(kCategory));
cl::opt<bool> pairedOpt("paired",
                        cl::desc("also time --iters pairs of one op call and the three cuBLAS "
                                 "GEMMs, alternating which goes first: the median of the pairs' "
                                 "ratios and their range"),
                        cl::cat(kCategory));
cl::opt<bool> checkOpt("check",
                       cl::desc("also compare one call per case with the fp64 reference "
                                "(loss, dH, dW errors; cases up to N*V*D = 2e13)"),
                       cl::cat(kCategory));
cl::opt<bool> gemmOnlyOpt("gemm-only",
                          cl::desc("the three GEMMs on the generated sm_90a mainloop next to "
                                   "cuBLAS"),
                          cl::cat(kCategory));
cl::opt<std::string> gemmConfigOpt(
    "gemm-config", cl::value_desc("BN,STAGES,GROUP[,pp|pp64|mc|ppmc|pp64mc|m192|m192mc]/..."),
    cl::desc("--gemm-only configs, '/'-separated; pp: ping-pong consumers, pp64: ping-pong "
             "consumers of 64-row tiles, mc: Z in clusters of 2 sharing each W tile, m192: "
             "192-row tiles on three cooperative consumers (default: 256,4,8)"),
    cl::cat(kCategory));

/// One --gemm-config entry: "BN,STAGES,GROUP" or "BN,STAGES,GROUP,FLAGS" (Args::gemmConfigs).
std::optional<std::array<int, 4>> parseGemmConfig(llvm::StringRef one) {
  llvm::SmallVector<llvm::StringRef, 4> parts;
  one.split(parts, ',');
  if (parts.size() != 3 && parts.size() != 4)
    return std::nullopt;
  std::array<int, 4> c{};
  for (int i = 0; i < 3; ++i)
    if (parts[i].getAsInteger(10, c[i]) || c[i] <= 0)
      return std::nullopt;
  if (parts.size() == 4) {
    const llvm::StringRef f = parts[3];
    c[3] = llvm::StringSwitch<int>(f)
               .Case("pp", 1)
               .Case("pp64", 3)
               .Case("mc", 4)
               .Case("ppmc", 5)
               .Case("pp64mc", 7)
               .Case("m192", 8)
               .Case("m192mc", 12)
               .Default(-1);
    if (c[3] < 0)
      return std::nullopt;
  }
  return c;
}

Args parse(int argc, char **argv) {
  tools::parseToolOptions(
      argc, argv, kCategory,
      "times lcejit::LinearCrossEntropy against the three cuBLAS GEMMs of the same shapes, "
      "in one process (needs a GPU)\n");
  auto positive = [](const auto &opt) {
    if (opt <= 0)
      tools::failOption(opt, fmt::format("must be > 0, got {}", opt.getValue()));
  };
  positive(tokensOpt);
  positive(hiddenOpt);
  positive(vocabOpt);
  positive(itersOpt);
  if (budgetMbOpt < 0)
    tools::failOption(budgetMbOpt, fmt::format("must be >= 0, got {}", budgetMbOpt.getValue()));
  Args a;
  a.n = tokensOpt;
  a.d = hiddenOpt;
  a.v = vocabOpt;
  if (softcapOpt.getNumOccurrences())
    a.softcap = softcapOpt;
  a.iters = itersOpt;
  for (CaseArg c : caseOpt) {
    if (c == CaseArg::All)
      for (const CaseShape &k : kCases)
        a.cases.push_back(k.name);
    else
      a.cases.push_back(kCases[static_cast<size_t>(c)].name);
  }
  a.precision = precisionOpt;
  a.gradWeight = gradWeightOpt;
  a.peaked = logitsOpt == LogitsArg::Peaked;
  a.budgetMb = budgetMbOpt;
  if (modeOpt == ModeArg::Lean && !budgetMbOpt.getNumOccurrences())
    a.budgetMb = 64;
  a.json = jsonOpt;
  a.series = seriesOpt;
  a.seriesBlasFirst = seriesBlasFirstOpt;
  if (a.seriesBlasFirst && !a.series)
    tools::failOption(seriesBlasFirstOpt, "needs --series");
  a.gemmOnly = gemmOnlyOpt;
  a.forward = forwardOpt;
  a.check = checkOpt;
  a.trace = traceOpt;
  a.paired = pairedOpt;
  if (a.paired && (a.series || a.gemmOnly))
    tools::failOption(pairedOpt, fmt::format("times the cases' op against cuBLAS, not {}",
                                             a.series ? "--series" : "--gemm-only"));
  if (gemmConfigOpt.getNumOccurrences()) {
    a.gemmConfigs.clear();
    llvm::SmallVector<llvm::StringRef, 8> configs;
    llvm::StringRef(gemmConfigOpt.getValue()).split(configs, '/');
    for (llvm::StringRef one : configs) {
      std::optional<std::array<int, 4>> c = parseGemmConfig(one);
      if (!c)
        tools::failOption(gemmConfigOpt, "'" + one + "' is not BN,STAGES,GROUP or "
                                                     "BN,STAGES,GROUP,FLAGS (positive integers; "
                                                     "FLAGS pp, pp64, mc, ppmc, pp64mc, m192 or m192mc)");
      a.gemmConfigs.push_back(*c);
    }
  }
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

/// Two events that time what one stream runs between them (RAII).
struct EventTimer {
  CUevent e0 = nullptr, e1 = nullptr;
  EventTimer() {
    const auto &d = runtime::cudaDriver();
    cu(d.eventCreate(&e0, 0), "eventCreate");
    cu(d.eventCreate(&e1, 0), "eventCreate");
  }
  ~EventTimer() {
    const auto &d = runtime::cudaDriver();
    d.eventDestroy(e0);
    d.eventDestroy(e1);
  }
  EventTimer(const EventTimer &) = delete;
  EventTimer &operator=(const EventTimer &) = delete;
  /// The GPU time of what `f` enqueues on `s`, waited for.
  template <typename F> double ms(CUstream s, F &&f) {
    const auto &d = runtime::cudaDriver();
    cu(d.eventRecord(e0, s), "eventRecord");
    f();
    cu(d.eventRecord(e1, s), "eventRecord");
    cu(d.eventSynchronize(e1), "eventSynchronize");
    float t = 0;
    cu(d.eventElapsedTime(&t, e0, e1), "eventElapsedTime");
    return double(t);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <typename F> double medianMs(int iters, CUstream s, F f) {
  EventTimer timer;
  f();
  f(); // warm-up
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i)
    ms.push_back(timer.ms(s, f));
  return median(std::move(ms));
}

/// [Note: paired ratios] The medians time `iters` op calls and then `iters` cuBLAS
/// triples; on a card at its power cap the clock drifts over the seconds between them
/// (an H100 moved cuBLAS's own floor by up to 10 % between runs of one binary, session
/// 32), and the ratio of two medians carries that drift. --paired times one op call and
/// one cuBLAS triple back to back, `iters` times, the op first in even pairs and cuBLAS
/// first in odd ones (so that neither always runs on the other's heat), and reports the
/// median of the pairs' ratios and their range: each ratio compares two runs a few
/// milliseconds apart.
template <typename Op, typename Blas>
void pairedRatios(int iters, CUstream s, Op op, Blas blas, Result &r) {
  EventTimer timer;
  std::vector<double> opMs, blasMs, ratios;
  for (int i = 0; i < iters; ++i) {
    double o, b;
    if (i % 2 == 0) {
      o = timer.ms(s, op);
      b = timer.ms(s, blas);
    } else {
      b = timer.ms(s, blas);
      o = timer.ms(s, op);
    }
    opMs.push_back(o);
    blasMs.push_back(b);
    ratios.push_back(b > 0 ? o / b : 0.0);
  }
  r.pairedOpMs = median(opMs);
  r.pairedBlasMs = median(blasMs);
  r.pairedRatio = median(ratios);
  r.pairedLo = *std::min_element(ratios.begin(), ratios.end());
  r.pairedHi = *std::max_element(ratios.begin(), ratios.end());
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

/// The op's options for a benchmark shape (bf16 inputs, dW of --grad-weight).
LinearCrossEntropyOptions benchOptions(const Args &a, int64_t d, int64_t v,
                                       std::optional<double> softcap) {
  LinearCrossEntropyOptions o;
  o.hidden = d;
  o.vocab = v;
  o.dtype = DType::BF16;
  o.softcap = softcap;
  o.precision = a.precision;
  o.gradWeightDType = a.gradWeight;
  o.workspaceBudgetBytes = a.budgetMb << 20;
  return o;
}

/// --check: one more call with poisoned outputs, against the fp64 reference.
void checkCase(const Args &a, const CaseShape &cs, LinearCrossEntropy &op, const Mem &h,
               const Mem &w, const Mem &y, const Mem &dh, const Mem &dw, const Mem &loss,
               gputest::Cublas *blas, Result &r) {
  const long long N = cs.n, D = cs.d, V = cs.v;
  if (double(N) * double(V) * double(D) > 2e13) {
    r.checkNote = fmt::format("skipped: N*V*D = {:.1e} (the f64 logits alone are {:.0f} GB)",
                              double(N) * double(V) * double(D), 8e-9 * double(N) * double(V));
    return;
  }
  using gputest::DeviceBuffer;
  const auto &d = runtime::cudaDriver();
  cu(d.memsetD8Async(dh.p, 0xFF, size_t(N * D) * 2, nullptr), "poison dH");
  cu(d.memsetD8Async(dw.p, 0xFF, size_t(V * D) * dtypeSize(a.gradWeight), nullptr),
     "poison dW");
  op.enqueue({h.data(), DType::BF16, {N, D}, {}}, {w.data(), DType::BF16, {V, D}, {}},
             {y.data(), DType::I64, {N}, {}}, {loss.data(), DType::F32, {}, {}},
             {dh.data(), DType::BF16, {N, D}, {}}, {dw.data(), a.gradWeight, {V, D}, {}}, nullptr);
  op.checkDeviceErrors();
  float l = 0;
  cu(d.memcpyDtoH(&l, loss.p, 4), "loss");
  const LinearCrossEntropyOptions o = benchOptions(a, D, V, cs.softcap);
  gputest::GpuReference ref =
      gputest::gpuReference(o, DeviceBuffer::view(h.p, N * D * 2),
                            DeviceBuffer::view(w.p, V * D * 2), DeviceBuffer::view(y.p, N * 8), N);
  gputest::RefKernels &k = gputest::RefKernels::get();
  const gputest::Comparison ch = k.compare(DeviceBuffer::view(dh.p, N * D * 2), DType::BF16, ref.dH, N * D);
  const gputest::Comparison cw = k.compare(
      DeviceBuffer::view(dw.p, V * D * dtypeSize(a.gradWeight)), a.gradWeight, ref.dW, V * D);
  r.lossErr = std::abs(double(l) - ref.loss) / std::max(std::abs(ref.loss), 1e-30);
  if (blas)
    r.blasLogitLossErr =
        std::abs(gputest::cublasLogitLoss(o, *blas, DeviceBuffer::view(h.p, N * D * 2),
                                          DeviceBuffer::view(w.p, V * D * 2),
                                          DeviceBuffer::view(y.p, N * 8), N) -
                 ref.loss) /
        std::max(std::abs(ref.loss), 1e-30);
  r.dhErr = ch.relError;
  r.dhFloor = ch.floor;
  r.dwErr = cw.relError;
  r.dwBf16Floor = cw.bf16Floor;
  if (ch.nonFinite || cw.nonFinite)
    r.checkNote = fmt::format("NON-FINITE: dH {} dW {} elements (unwritten poison?)",
                              ch.nonFinite, cw.nonFinite);
}

/// --trace: one traced call, per kernel name (in order of first launch): launches, total
/// and mean GPU time, share; the idle gaps between launches; and per row block, each
/// kernel's launches and time.
std::string traceReport(const std::vector<runtime::LaunchTraceEntry> &entries) {
  struct Row {
    std::string kernel;
    int launches = 0;
    double ms = 0;
  };
  // One launch into a table of kernels (in order of first launch).
  auto tally = [](std::vector<Row> &rows, const runtime::LaunchTraceEntry &e) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row &r) { return r.kernel == e.kernel; });
    if (it == rows.end())
      it = rows.insert(rows.end(), Row{e.kernel, 0, 0});
    ++it->launches;
    it->ms += e.ms;
  };
  std::vector<Row> rows;
  double kernelMs = 0, gapMs = 0, maxGap = 0;
  std::string maxGapBefore;
  for (const runtime::LaunchTraceEntry &e : entries) {
    tally(rows, e);
    kernelMs += e.ms;
    gapMs += e.gapMs;
    if (e.gapMs > maxGap) {
      maxGap = e.gapMs;
      maxGapBefore = e.kernel;
    }
  }
  std::string out = fmt::format(
      "  one call, {} launches back to back: {:.2f} ms in kernels + {:.3f} ms of gaps between "
      "launches (largest {:.3f} ms, before {})\n  | kernel | launches | total ms | mean ms | "
      "share |\n  |---|---|---|---|---|\n",
      entries.size(), kernelMs, gapMs, maxGap, maxGapBefore.empty() ? "-" : maxGapBefore);
  for (const Row &r : rows)
    out += fmt::format("  | {} | {} | {:.3f} | {:.3f} | {:.1f} % |\n", r.kernel, r.launches, r.ms,
                       r.ms / r.launches, kernelMs > 0 ? 100.0 * r.ms / kernelMs : 0.0);
  // Per row block (in the order run; the steps outside the blocks count with block 0):
  // what each block's kernels took at the power cap, where ncu times them one at a time.
  struct Block {
    int64_t block = 0;
    int launches = 0;
    double ms = 0;
    std::vector<Row> kernels;
  };
  std::vector<Block> blocks;
  for (const runtime::LaunchTraceEntry &e : entries) {
    auto b = std::find_if(blocks.begin(), blocks.end(),
                          [&](const Block &x) { return x.block == e.rowBlock; });
    if (b == blocks.end())
      b = blocks.insert(blocks.end(), Block{e.rowBlock, 0, 0, {}});
    ++b->launches;
    b->ms += e.ms;
    tally(b->kernels, e);
  }
  if (blocks.size() > 1) {
    out += "  per row block:\n  | block | launches | ms | kernels: launches x, ms |\n"
           "  |---|---|---|---|\n";
    for (const Block &b : blocks) {
      std::string ks;
      for (const Row &k : b.kernels)
        ks += fmt::format("{}{} {}x {:.3f}", ks.empty() ? "" : ", ", k.kernel, k.launches, k.ms);
      out += fmt::format("  | {} | {} | {:.3f} | {} |\n", b.block, b.launches, b.ms, ks);
    }
  }
  return out;
}

Result runCase(const Args &a, const CaseShape &cs, const Filler &fill, gputest::Cublas *blas) {
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
  if (a.peaked) {
    using gputest::DeviceBuffer;
    gputest::RefKernels::get().peakRows(DeviceBuffer::view(h.p, N * D * 2),
                                        DeviceBuffer::view(w.p, V * D * 2), DType::BF16,
                                        DeviceBuffer::view(y.p, N * 8), DType::I64, N, D, V, 20.0);
  }
  cu(d.ctxSynchronize(), "sync");

  LinearCrossEntropy op(benchOptions(a, D, V, cs.softcap));
  r.workspace = op.workspaceBytes(N);
  r.schedule = op.scheduleSummary(N);
  CUstream s = nullptr;
  if (a.forward) {
    r.workspace = 0; // workspaceBytes() is that of forwardBackward; not reported here
    r.schedule = "forward only";
    auto forwardCall = [&] {
      op.enqueueForward({h.data(), DType::BF16, {N, D}, {}}, {w.data(), DType::BF16, {V, D}, {}},
                        {y.data(), DType::I64, {N}, {}}, {loss.data(), DType::F32, {}, {}}, s);
    };
    r.opMs = medianMs(a.iters, s, forwardCall);
    op.checkDeviceErrors();
    if (blas) {
      Mem z(size_t(N * V) * 2);
      auto blasCall = [&] {
        blas->gemm(false, true, int(N), int(V), int(D), h.data(), int(D), w.data(), int(D), z.data());
      };
      r.blasMs = medianMs(a.iters, s, blasCall);
      if (a.paired) {
        pairedRatios(a.iters, s, forwardCall, blasCall, r);
        op.checkDeviceErrors();
      }
    }
    return r;
  }
  auto opCall = [&] {
    op.enqueue({h.data(), DType::BF16, {N, D}, {}}, {w.data(), DType::BF16, {V, D}, {}},
               {y.data(), DType::I64, {N}, {}}, {loss.data(), DType::F32, {}, {}},
               {dh.data(), DType::BF16, {N, D}, {}}, {dw.data(), a.gradWeight, {V, D}, {}}, s);
  };
  r.opMs = medianMs(a.iters, s, opCall);
  op.checkDeviceErrors();
  if (a.check)
    checkCase(a, cs, op, h, w, y, dh, dw, loss, blas, r);
  if (a.trace) {
    runtime::setLaunchTrace(true);
    op.enqueue({h.data(), DType::BF16, {N, D}, {}}, {w.data(), DType::BF16, {V, D}, {}},
               {y.data(), DType::I64, {N}, {}}, {loss.data(), DType::F32, {}, {}},
               {dh.data(), DType::BF16, {N, D}, {}}, {dw.data(), a.gradWeight, {V, D}, {}}, s);
    runtime::setLaunchTrace(false);
    r.trace = traceReport(runtime::takeLaunchTrace());
    op.checkDeviceErrors();
  }
  if (blas) {
    Mem z(size_t(N * V) * 2), dwb(size_t(V * D) * 2);
    fill.bf16(z, N * V, 3, 1e-3f);
    // The floor's three GEMMs, each also timed alone under --trace.
    auto zGemm = [&] {
      blas->gemm(false, true, int(N), int(V), int(D), h.data(), int(D), w.data(), int(D), z.data());
    };
    auto dhGemm = [&] {
      blas->gemm(false, false, int(N), int(D), int(V), z.data(), int(V), w.data(), int(D), dh.data());
    };
    auto dwGemm = [&] {
      blas->gemm(true, false, int(V), int(D), int(N), z.data(), int(V), h.data(), int(D), dwb.data());
    };
    auto blasCall = [&] {
      zGemm();
      dhGemm();
      dwGemm();
    };
    r.blasMs = medianMs(a.iters, s, blasCall);
    if (a.trace) {
      const double zMs = medianMs(a.iters, s, zGemm);
      const double dhMs = medianMs(a.iters, s, dhGemm);
      const double dwMs = medianMs(a.iters, s, dwGemm);
      r.trace += fmt::format("  cuBLAS, each GEMM alone (median of {}): Z {:.2f} ms, dH {:.2f} ms, "
                             "dW {:.2f} ms (sum {:.2f}; the three back to back: {:.2f})\n",
                             a.iters, zMs, dhMs, dwMs, zMs + dhMs + dwMs, r.blasMs);
    }
    if (a.paired) {
      pairedRatios(a.iters, s, opCall, blasCall, r);
      op.checkDeviceErrors();
    }
  }
  return r;
}

/// ||x − ref|| / ||ref|| on the device (ref bf16; x bf16 or f32).
double relDiff(const runtime::Module &m, CUdeviceptr x, bool xF32, CUdeviceptr ref, long long n) {
  const auto &d = runtime::cudaDriver();
  Mem sums(16);
  cu(d.memsetD8Async(sums.p, 0, 16, nullptr), "memset");
  CUdeviceptr px = x, pr = ref, ps = sums.p;
  void *args[] = {&px, &pr, &n, &ps};
  CUlaunchConfig cfg{};
  cfg.gridDimX = 2048;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 256;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cu(d.launchKernelEx(&cfg, m.function(xF32 ? "diff_f32" : "diff_bf16"), args, nullptr), "diff");
  double h[2] = {0, 0};
  cu(d.memcpyDtoH(h, sums.p, 16), "memcpyDtoH");
  return h[1] > 0 ? std::sqrt(h[0] / h[1]) : std::sqrt(h[0]);
}

/// --gemm-only: the three FLCE GEMMs on the generated sm_90a mainloop next to cuBLAS.
int runGemmOnly(const Args &a, const std::vector<CaseShape> &shapes, const runtime::Module &fillModule,
                const Filler &fill, gputest::Cublas *blas, const runtime::DeviceInfo &info) {
  if (info.smVersion() != 90) {
    fmt::print("--gemm-only: the sm90 mainloop needs an sm_90 device; this is sm_{}\n",
               info.smVersion());
    return 77;
  }
  std::vector<codegen::Sm90GemmSpec> specs;
  for (size_t c = 0; c < a.gemmConfigs.size(); ++c) {
    const auto &g = a.gemmConfigs[c];
    const std::string p = fmt::format("g{}_", c);
    const bool pp = (g[3] & 1) != 0;
    const int bm = (g[3] & 2) != 0 ? 64 : (g[3] & 8) != 0 ? 192 : 128;
    specs.push_back({p + "fwd", g[0], g[1], true, true, DType::BF16, pp, bm, (g[3] & 4) ? 2 : 1});
    specs.push_back({p + "dh", g[0], g[1], true, false, DType::BF16, pp, bm});
    specs.push_back({p + "dw", g[0], g[1], false, false, DType::BF16, pp, bm});
    specs.push_back({p + "dwf", g[0], g[1], false, false, DType::F32, pp, bm});
  }
  codegen::EmittedModule em = codegen::emitSm90GemmModule(specs);
  runtime::NvrtcRequest req;
  req.source = em.source;
  req.arch = "sm_90a";
  req.label = "bench-sm90-gemm";
  runtime::NvrtcOutput compiled = runtime::compileCuda(req);
  fmt::print("sm90 GEMM module: {} kernels compiled in {:.0f} ms\n", specs.size(), compiled.compileMs);
  for (const runtime::PtxasKernelInfo &k : compiled.kernels)
    fmt::print("  {}: {} registers, {} bytes stack, {} bytes spilled\n", k.kernel, k.registers,
               k.stackFrameBytes, k.spillStoreBytes);
  runtime::Module mod(compiled.cubin);

  const auto &d = runtime::cudaDriver();
  CUstream s = nullptr;
  std::string json = "[";
  fmt::print("\n| case | GEMM | M x N x K | config | cuBLAS ms | TFLOP/s | lcejit ms | TFLOP/s | "
             "lcejit/cuBLAS | rel diff |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const CaseShape &cs : shapes) {
    const long long N = cs.n, D = cs.d, V = cs.v;
    Mem h(size_t(N * D) * 2), w(size_t(V * D) * 2), g(size_t(N * V) * 2);
    Mem zb(size_t(N * V) * 2), z(size_t(N * V) * 2), dhb(size_t(N * D) * 2), dh(size_t(N * D) * 2),
        dwb(size_t(V * D) * 2), dw(size_t(V * D) * 2), dwf(size_t(V * D) * 4);
    float scale = 2.0f / std::pow(float(D), 0.25f);
    fill.bf16(h, N * D, 1, scale);
    fill.bf16(w, V * D, 2, scale);
    fill.bf16(g, N * V, 3, 1.0f);
    cu(d.ctxSynchronize(), "sync");
    struct Gemm {
      const char *name;
      long long m, n, k;
      std::function<void()> blasCall;
      CUdeviceptr a, b;
      bool aK, bK;
      long long lda, ldb;
      CUdeviceptr ref;
    };
    std::vector<Gemm> gemms = {
        {"Z = H Wt", N, V, D,
         [&] { blas->gemm(false, true, int(N), int(V), int(D), h.data(), int(D), w.data(), int(D), zb.data()); },
         h.p, w.p, true, true, D, D, zb.p},
        {"dH = G W", N, D, V,
         [&] { blas->gemm(false, false, int(N), int(D), int(V), g.data(), int(V), w.data(), int(D), dhb.data()); },
         g.p, w.p, true, false, V, D, dhb.p},
        {"dW = Gt H", V, D, N,
         [&] { blas->gemm(true, false, int(V), int(D), int(N), g.data(), int(V), h.data(), int(D), dwb.data()); },
         g.p, h.p, false, false, V, D, dwb.p},
    };
    for (size_t gi = 0; gi < gemms.size(); ++gi) {
      const Gemm &gm = gemms[gi];
      const double flops = 2.0 * double(gm.m) * double(gm.n) * double(gm.k);
      const double blasMs = blas ? medianMs(a.iters, s, gm.blasCall) : 0.0;
      for (size_t c = 0; c < a.gemmConfigs.size(); ++c) {
        // dW runs twice: bf16 output (as cuBLAS) and f32 output (what the FLCE wants).
        for (int variant = 0; variant < (gi == 2 ? 2 : 1); ++variant) {
          const codegen::Sm90GemmSpec &spec = specs[c * 4 + gi + size_t(variant)];
          CUdeviceptr out = gi == 0 ? z.p : gi == 1 ? dh.p : variant ? dwf.p : dw.p;
          runtime::Sm90GemmLaunch l;
          l.a = gm.a;
          l.b = gm.b;
          l.out = out;
          l.aKMajor = gm.aK;
          l.bKMajor = gm.bK;
          l.lda = gm.lda;
          l.ldb = gm.ldb;
          l.ldOut = gm.n;
          l.m = gm.m;
          l.n = gm.n;
          l.k = gm.k;
          l.bn = spec.bn;
          l.bm = spec.bm;
          l.clusterM = spec.clusterM;
          l.sharedBytes = codegen::sm90GemmSharedBytes(spec);
          l.threads = codegen::sm90GemmThreads(spec);
          l.group = a.gemmConfigs[c][2];
          CUfunction f = mod.function(spec.name);
          cu(d.memsetD8Async(out, 0xFF, size_t(gm.m * gm.n) * (variant ? 4 : 2), s), "poison");
          const double ms = medianMs(a.iters, s, [&] { runtime::launchSm90Gemm(mod, f, l, s); });
          cu(d.ctxSynchronize(), "sync");
          const double err = blas ? relDiff(fillModule, out, variant == 1, gm.ref, gm.m * gm.n) : -1.0;
          const std::string cfgText = fmt::format("{}x{} s{} g{}{}{}{}", spec.bm, spec.bn, spec.stages,
                                                  l.group, spec.pingpong ? " ping-pong" : "",
                                                  spec.clusterM > 1 ? " pairs" : "",
                                                  variant ? " f32 out" : "");
          fmt::print("| {} | {} | {}x{}x{} | {} | {:.3f} | {:.0f} | {:.3f} | {:.0f} | {:.3f} | {:.2e} |\n",
                     cs.name, gm.name, gm.m, gm.n, gm.k, cfgText, blasMs,
                     blasMs > 0 ? flops / (blasMs * 1e-3) / 1e12 : 0.0, ms, flops / (ms * 1e-3) / 1e12,
                     blasMs > 0 ? ms / blasMs : 0.0, err);
          std::fflush(stdout);
          json += fmt::format("{}{{\"case\": \"{}\", \"gemm\": \"{}\", \"m\": {}, \"n\": {}, \"k\": {}, "
                              "\"config\": \"{}\", \"cublas_ms\": {:.4f}, \"lcejit_ms\": {:.4f}, "
                              "\"rel_diff\": {:.3e}}}",
                              json.size() > 1 ? ", " : "", cs.name, gm.name, gm.m, gm.n, gm.k, cfgText,
                              blasMs, ms, err);
        }
      }
    }
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
}

/// The 20-N series: every N once (host-timed, synchronous), the op then cuBLAS.
int runSeries(const Args &a, const Filler &fill, gputest::Cublas *blas) {
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
  // cuBLAS's own first call (library state, kernel loads, heuristics) is not part of the
  // floor: one untimed triple at an N outside the series (the op's first call, which loads
  // or compiles its kernels, stays in: issue 5 counts it).
  if (blas) {
    const int wn = 4096;
    blas->gemm(false, true, wn, int(V), int(D), h.data(), int(D), w.data(), int(D), z.data());
    blas->gemm(false, false, wn, int(D), int(V), z.data(), int(V), w.data(), int(D), dh.data());
    blas->gemm(true, false, int(V), int(D), wn, z.data(), int(V), h.data(), int(D), dwb.data());
    cu(d.ctxSynchronize(), "sync");
  }
  const int64_t compiles0 = LinearCrossEntropy::compileCount();
  double opTotal = 0, blasTotal = 0, firstMs = 0;
  std::vector<double> opMs(ns.size(), 0.0), blasMs(ns.size(), 0.0), prepMs(ns.size(), 0.0),
      againMs(ns.size(), 0.0);
  std::vector<int64_t> compilesAt(ns.size(), 0);
  // --series --trace: both calls at each N traced ([Note: launch trace]): their kernels'
  // GPU time and the idle gaps between their launches, so that a first call's excess
  // over the call again shows as GPU work or as host time around the launches.
  struct Traced {
    double kernelMs = 0, gapMs = 0;
    std::vector<runtime::LaunchTraceEntry> entries;
  };
  std::vector<Traced> firstTrace(ns.size()), againTrace(ns.size());
  auto traced = [&](auto &&fn, Traced &out) {
    if (a.trace)
      runtime::setLaunchTrace(true);
    fn();
    if (!a.trace)
      return;
    runtime::setLaunchTrace(false);
    out.entries = runtime::takeLaunchTrace();
    for (const runtime::LaunchTraceEntry &e : out.entries) {
      out.kernelMs += e.ms;
      out.gapMs += e.gapMs;
    }
  };
  // The launch of the first call that took longest against the same launch of the call
  // again (the same launch list: one prepared run per N).
  auto worstLaunch = [](const Traced &first, const Traced &again) -> std::string {
    if (first.entries.size() != again.entries.size())
      return fmt::format("{} launches, again {}", first.entries.size(), again.entries.size());
    double worst = 0;
    size_t at = 0;
    for (size_t j = 0; j < first.entries.size(); ++j)
      if (first.entries[j].ms - again.entries[j].ms > worst) {
        worst = first.entries[j].ms - again.entries[j].ms;
        at = j;
      }
    if (first.entries.empty())
      return "";
    const runtime::LaunchTraceEntry &e = first.entries[at];
    return fmt::format("#{} {} (block {}): {:.2f} ms, again {:.2f}", at, e.kernel, e.rowBlock,
                       e.ms, again.entries[at].ms);
  };
  for (size_t i = 0; i < ns.size(); ++i) {
    const int64_t compilesBefore = LinearCrossEntropy::compileCount();
    const long long N = ns[i];
    auto call = [&] {
      op.forwardBackward({h.data(), DType::BF16, {N, D}, {}},
                         {w.data(), DType::BF16, {V, D}, {}}, {y.data(), DType::I64, {N}, {}},
                         {dh.data(), DType::BF16, {N, D}, {}}, {dw.data(), a.gradWeight, {V, D}, {}});
    };
    auto blasTriple = [&] {
      if (!blas)
        return;
      cu(d.ctxSynchronize(), "sync");
      auto b0 = std::chrono::steady_clock::now();
      blas->gemm(false, true, int(N), int(V), int(D), h.data(), int(D), w.data(), int(D), z.data());
      blas->gemm(false, false, int(N), int(D), int(V), z.data(), int(V), w.data(), int(D), dh.data());
      blas->gemm(true, false, int(V), int(D), int(N), z.data(), int(V), h.data(), int(D), dwb.data());
      cu(d.ctxSynchronize(), "sync");
      blasMs[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - b0).count();
      blasTotal += blasMs[i];
    };
    // --series-blas-first: the floor's GEMMs at this N before the op's calls, so that the
    // op's first call at an N follows cuBLAS at that N rather than at the previous one (a
    // first call's cost against the order of the measurement).
    if (a.seriesBlasFirst)
      blasTriple();
    // The call as a user makes it, timed whole; of it, what a new N costs on the host before
    // any launch (LinearCrossEntropy::prepare: the kernels' lookup, the prepared run, the
    // workspace), which a call makes itself when not asked first.
    auto t0 = std::chrono::steady_clock::now();
    op.prepare(N);
    auto t1 = std::chrono::steady_clock::now();
    traced(call, firstTrace[i]);
    auto t2 = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(t2 - t0).count();
    prepMs[i] = std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (i == 0)
      firstMs = ms;
    opTotal += ms;
    opMs[i] = ms;
    compilesAt[i] = LinearCrossEntropy::compileCount() - compilesBefore;
    // The same N again, prepared (not in the series' total): a steady call at that N.
    auto t3 = std::chrono::steady_clock::now();
    traced(call, againTrace[i]);
    againMs[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t3).count();
    if (!a.seriesBlasFirst)
      blasTriple();
  }
  // Per call, in the order run: where the total's excess over the floor comes from (a first
  // call per bucket loads its modules, from the disk cache when warm).
  // "again": the same N called once more right after (not in the totals), so a call's
  // first-time cost at an N shows against a steady call.
  fmt::print("| # | N | lcejit ms | of it, prepare ms | again ms | cuBLAS ms | ratio | again ratio | "
             "compiles |{}\n|---|---|---|---|---|---|---|---|---|{}\n",
             a.trace ? " first: kernels ms, gaps ms | again: kernels ms, gaps ms | the first "
                       "call's launch most over its again |"
                     : "",
             a.trace ? "---|---|---|" : "");
  double againTotal = 0;
  for (size_t i = 0; i < ns.size(); ++i) {
    againTotal += againMs[i];
    fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.3f} | {:.3f} | {} |{}\n", i,
               ns[i], opMs[i], prepMs[i], againMs[i], blasMs[i],
               blasMs[i] > 0 ? opMs[i] / blasMs[i] : 0.0,
               blasMs[i] > 0 ? againMs[i] / blasMs[i] : 0.0, compilesAt[i],
               a.trace ? fmt::format(" {:.2f}, {:.3f} | {:.2f}, {:.3f} | {} |", firstTrace[i].kernelMs,
                                     firstTrace[i].gapMs, againTrace[i].kernelMs,
                                     againTrace[i].gapMs, worstLaunch(firstTrace[i], againTrace[i]))
                       : std::string());
  }
  fmt::print("series, each N called again right after: lcejit {:.1f} ms total, ratio {:.2f}\n",
             againTotal, blasTotal > 0 ? againTotal / blasTotal : 0.0);
  const int64_t compiles = LinearCrossEntropy::compileCount() - compiles0;
  fmt::print("series{}: 20 N in [4096, 33768] (D=4096 V=128256): lcejit {:.1f} ms total (first "
             "call {:.1f} ms), cuBLAS 3 GEMMs {:.1f} ms total, ratio {:.2f}; NVRTC compiles {}\n",
             a.seriesBlasFirst ? " (cuBLAS first at each N)" : "", opTotal, firstMs, blasTotal,
             blasTotal > 0 ? opTotal / blasTotal : 0.0, compiles);
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
    gputest::Cublas blas;
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
    if (a.gemmOnly)
      return runGemmOnly(a, shapes, fillModule, fill, haveBlas ? &blas : nullptr, info);
    fmt::print("device: {} (sm_{}, {} SMs, {}-bit memory); precision {}; dW {}; logits {}; "
               "budget {}; cuBLAS {}\n",
               info.name, info.smVersion(), info.numSMs, info.memoryBusBits,
               a.precision == Precision::Exact ? "exact" : "fast", dtypeName(a.gradWeight),
               a.peaked ? "peaked" : "random",
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
               "workspace MiB |{}\n|---|---|---|---|---|---|---|---|---|---|---|{}\n",
               a.check ? " loss rel err | loss rel err of cuBLAS's logits | dH rel err (x bf16 "
                         "floor) | dW rel err (x bf16 floor) |"
                       : "",
               a.check ? "---|---|---|---|" : "");
    std::string json = "[";
    for (const Result &r : results) {
      double flops = (a.forward ? 2.0 : 6.0) * double(r.n) * double(r.d) * double(r.v);
      double ratio = r.blasMs > 0 ? r.opMs / r.blasMs : 0.0;
      std::string errs;
      if (a.check)
        errs = r.lossErr < 0
                   ? fmt::format(" {} | | | |", r.checkNote)
                   : fmt::format(" {:.2g} | {} | {:.3g} (x{:.2f}) | {:.3g} (x{:.2f}) |{}",
                                 r.lossErr,
                                 r.blasLogitLossErr < 0 ? std::string("-")
                                                        : fmt::format("{:.2g}", r.blasLogitLossErr),
                                 r.dhErr, r.dhErr / r.dhFloor, r.dwErr, r.dwErr / r.dwBf16Floor,
                                 r.checkNote.empty() ? "" : " " + r.checkNote);
      fmt::print("| {} | {} | {} | {} | {} | {:.1f} | {:.0f} | {:.1f} | {:.0f} | {:.2f} | {:.0f} |{}\n",
                 r.name, r.n, r.d, r.v, r.softcap ? fmt::format("{}", *r.softcap) : "-", r.opMs,
                 flops / (r.opMs * 1e-3) / 1e12, r.blasMs,
                 r.blasMs > 0 ? flops / (r.blasMs * 1e-3) / 1e12 : 0.0, ratio,
                 double(r.workspace) / (1 << 20), errs);
      std::string check;
      if (r.lossErr >= 0)
        check = fmt::format(", \"loss_rel_err\": {:.3e}, \"dh_rel_err\": {:.4e}, "
                            "\"dh_floor\": {:.4e}, \"dw_rel_err\": {:.4e}, "
                            "\"dw_bf16_floor\": {:.4e}",
                            r.lossErr, r.dhErr, r.dhFloor, r.dwErr, r.dwBf16Floor);
      if (r.blasLogitLossErr >= 0)
        check += fmt::format(", \"cublas_logit_loss_rel_err\": {:.3e}", r.blasLogitLossErr);
      if (!r.checkNote.empty())
        check += fmt::format(", \"check\": \"{}\"", r.checkNote);
      if (r.pairedRatio >= 0)
        check += fmt::format(", \"paired_lcejit_ms\": {:.4f}, \"paired_cublas_ms\": {:.4f}, "
                             "\"paired_ratio\": {:.4f}, \"paired_ratio_min\": {:.4f}, "
                             "\"paired_ratio_max\": {:.4f}",
                             r.pairedOpMs, r.pairedBlasMs, r.pairedRatio, r.pairedLo, r.pairedHi);
      json += fmt::format("{}{{\"case\": \"{}\", \"n\": {}, \"d\": {}, \"v\": {}, \"softcap\": {}, "
                          "\"lcejit_ms\": {:.4f}, \"cublas_ms\": {:.4f}, \"ratio\": {:.4f}, "
                          "\"workspace_bytes\": {}, \"schedule\": \"{}\"{}}}",
                          json.size() > 1 ? ", " : "", r.name, r.n, r.d, r.v,
                          r.softcap ? fmt::format("{}", *r.softcap) : "null", r.opMs, r.blasMs,
                          ratio, r.workspace, r.schedule, check);
    }
    json += "]\n";
    if (a.paired) {
      // [Note: paired ratios]
      fmt::print("\npaired, {} pairs of one op call and {}, alternating which goes first:\n"
                 "| case | lcejit ms | cuBLAS ms | ratio (median of the pairs') | range | ratio "
                 "of the medians above |\n|---|---|---|---|---|---|\n",
                 a.iters, a.forward ? "cuBLAS's Z" : "the three cuBLAS GEMMs");
      for (const Result &r : results)
        if (r.pairedRatio >= 0)
          fmt::print("| {} | {:.1f} | {:.1f} | {:.3f} | {:.3f}-{:.3f} | {:.3f} |\n", r.name,
                     r.pairedOpMs, r.pairedBlasMs, r.pairedRatio, r.pairedLo, r.pairedHi,
                     r.blasMs > 0 ? r.opMs / r.blasMs : 0.0);
        else
          fmt::print("| {} | not measured (no cuBLAS) | | | | |\n", r.name);
    }
    for (const Result &r : results)
      if (!r.trace.empty())
        fmt::print("\n{} trace:\n{}", r.name, r.trace);
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
