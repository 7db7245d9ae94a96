//===- lcejit-demo.cpp - The main job ---------------------------------------===//
//
// 1. For a Llama-3-like and a Gemma-2-like loss (softcap 30) at a small shape: run the
//    planned Program on the fp64 CPU interpreter and the unfused differentiated graph on
//    the fp64 tx interpreter, and print the loss and the relative errors of the Program
//    (checks fusion + planning without a GPU).
// 2. Where a GPU is present: run the op on the device at the same shapes against the
//    same reference, then time it at the Llama-3 head shape (N=8192, D=4096, V=128256).
//
//===----------------------------------------------------------------------===//

#include "compiler/reference/RefTensor.h"
#include "lcejit/LinearCrossEntropy.h"
#include "ops/lib/Reference.h"
#include "runtime/CudaDriver.h"
#include "tools/ToolOptions.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

using namespace lcejit;

namespace {

struct Problem {
  const char *name;
  LinearCrossEntropyOptions options;
  int64_t n;
};

double relNorm(const std::vector<double> &x, const std::vector<double> &ref) {
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d2 += (x[i] - ref[i]) * (x[i] - ref[i]);
    r2 += ref[i] * ref[i];
  }
  return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
}

struct Inputs {
  std::vector<double> hidden, weight;
  std::vector<int64_t> targets;
};

Inputs randomInputs(const LinearCrossEntropyOptions &o, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  double scale = 2.0 / std::pow(double(o.hidden), 0.25);
  std::uniform_real_distribution<double> u(-scale, scale);
  Inputs in;
  in.hidden.resize(static_cast<size_t>(n * o.hidden));
  in.weight.resize(static_cast<size_t>(o.vocab * o.hidden));
  for (double &x : in.hidden)
    x = ref::roundToDType(u(rng), o.dtype);
  for (double &x : in.weight)
    x = ref::roundToDType(u(rng), o.dtype);
  std::uniform_int_distribution<int64_t> t(0, o.vocab - 1);
  for (int64_t i = 0; i < n; ++i)
    in.targets.push_back(o.ignoreIndex && i % 5 == 4 ? *o.ignoreIndex : t(rng));
  return in;
}

/// Host values -> device bytes of dtype.
std::vector<uint8_t> pack(const std::vector<double> &v, DType t) {
  std::vector<uint8_t> out(v.size() * static_cast<size_t>(dtypeSize(t)));
  for (size_t i = 0; i < v.size(); ++i) {
    float f = static_cast<float>(v[i]);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (t == DType::F32) {
      std::memcpy(&out[i * 4], &f, 4);
    } else if (t == DType::BF16) {
      uint16_t h = static_cast<uint16_t>(u >> 16); // exact: values are bf16 already
      std::memcpy(&out[i * 2], &h, 2);
    } else {
      // f16: values are representable; convert exactly.
      int e;
      double m = std::frexp(std::fabs(v[i]), &e);
      uint16_t h = 0;
      if (v[i] != 0) {
        int ex = e - 1 + 15;
        if (ex <= 0)
          h = static_cast<uint16_t>(std::ldexp(std::fabs(v[i]), 24));
        else
          h = static_cast<uint16_t>((ex << 10) | (static_cast<int>(std::ldexp(m, 11)) & 0x3ff));
      }
      if (v[i] < 0)
        h |= 0x8000;
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

std::vector<double> unpack(const std::vector<uint8_t> &b, DType t) {
  size_t n = b.size() / static_cast<size_t>(dtypeSize(t));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == DType::F32) {
      float f;
      std::memcpy(&f, &b[i * 4], 4);
      out[i] = f;
    } else if (t == DType::BF16) {
      uint16_t h;
      std::memcpy(&h, &b[i * 2], 2);
      uint32_t u = uint32_t(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      out[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, &b[i * 2], 2);
      int e = (h >> 10) & 0x1f, m = h & 0x3ff;
      double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(m | 0x400, e - 25);
      out[i] = (h & 0x8000) ? -v : v;
    }
  }
  return out;
}

class DeviceMem {
public:
  explicit DeviceMem(size_t bytes) {
    runtime::ensureContext();
    check(runtime::cudaDriver().memAlloc(&p_, std::max<size_t>(bytes, 256)));
  }
  ~DeviceMem() { runtime::cudaDriver().memFree(p_); }
  void *data() const { return reinterpret_cast<void *>(static_cast<uintptr_t>(p_)); }
  CUdeviceptr ptr() const { return p_; }
  void upload(const std::vector<uint8_t> &b) {
    if (!b.empty())
      check(runtime::cudaDriver().memcpyHtoD(p_, b.data(), b.size()));
  }
  std::vector<uint8_t> download(size_t bytes) const {
    std::vector<uint8_t> b(bytes);
    if (bytes)
      check(runtime::cudaDriver().memcpyDtoH(b.data(), p_, bytes));
    return b;
  }
  static void check(CUresult r) {
    if (r != CUDA_SUCCESS)
      runtime::throwCudaError(r, "demo", __FILE__, __LINE__);
  }

private:
  CUdeviceptr p_ = 0;
};

void runCpu(const Problem &p) {
  const auto &o = p.options;
  Inputs in = randomInputs(o, p.n, 42);
  auto t0 = std::chrono::steady_clock::now();
  ReferenceResult graph = ops::runGraphReference(o, in.hidden, in.weight, in.targets);
  LinearCrossEntropy op(o);
  ReferenceResult prog = op.runReference(in.hidden, in.weight, in.targets);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("{:<32} N={} D={} V={}  loss {:.10f}  Program vs unfused graph (fp64): loss {:.2e}  "
             "dH {:.2e}  dW {:.2e}  ({:.1f} s)\n",
             p.name, p.n, o.hidden, o.vocab, graph.loss,
             std::abs(prog.loss - graph.loss) / std::abs(graph.loss),
             relNorm(prog.gradHidden, graph.gradHidden), relNorm(prog.gradWeight, graph.gradWeight),
             secs);
}

void runGpuCheck(const Problem &p) {
  const auto &o = p.options;
  Inputs in = randomInputs(o, p.n, 43);
  ReferenceResult ref = ops::runGraphReference(o, in.hidden, in.weight, in.targets);
  LinearCrossEntropy op(o);
  size_t es = static_cast<size_t>(dtypeSize(o.dtype));
  DeviceMem h(in.hidden.size() * es), w(in.weight.size() * es), y(in.targets.size() * 8),
      dh(in.hidden.size() * es), dw(in.weight.size() * static_cast<size_t>(dtypeSize(o.gradWeightDType)));
  h.upload(pack(in.hidden, o.dtype));
  w.upload(pack(in.weight, o.dtype));
  std::vector<uint8_t> yb(in.targets.size() * 8);
  std::memcpy(yb.data(), in.targets.data(), yb.size());
  y.upload(yb);
  float loss = op.forwardBackward({h.data(), o.dtype, {p.n, o.hidden}, {}},
                                  {w.data(), o.dtype, {o.vocab, o.hidden}, {}},
                                  {y.data(), DType::I64, {p.n}, {}},
                                  {dh.data(), o.dtype, {p.n, o.hidden}, {}},
                                  {dw.data(), o.gradWeightDType, {o.vocab, o.hidden}, {}});
  std::vector<double> gh = unpack(dh.download(in.hidden.size() * es), o.dtype);
  std::vector<double> gw = unpack(dw.download(in.weight.size() * static_cast<size_t>(dtypeSize(o.gradWeightDType))),
                                  o.gradWeightDType);
  fmt::print("{:<32} GPU vs fp64 reference: loss {:.2e}  dH {:.2e}  dW {:.2e}\n", p.name,
             std::abs(double(loss) - ref.loss) / std::abs(ref.loss), relNorm(gh, ref.gradHidden),
             relNorm(gw, ref.gradWeight));
}

void timeGpu(const char *name, LinearCrossEntropyOptions o, int64_t n) {
  LinearCrossEntropy op(o);
  size_t es = static_cast<size_t>(dtypeSize(o.dtype));
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-0.25f, 0.25f);
  auto randomBytes = [&](size_t count) {
    std::vector<double> v(count);
    for (double &x : v)
      x = ref::roundToDType(u(rng), o.dtype);
    return pack(v, o.dtype);
  };
  DeviceMem h(size_t(n * o.hidden) * es), w(size_t(o.vocab * o.hidden) * es), y(size_t(n) * 8),
      dh(size_t(n * o.hidden) * es), dw(size_t(o.vocab * o.hidden) * 4);
  h.upload(randomBytes(size_t(n * o.hidden)));
  w.upload(randomBytes(size_t(o.vocab * o.hidden)));
  std::vector<int64_t> t(static_cast<size_t>(n));
  std::uniform_int_distribution<int64_t> ti(0, o.vocab - 1);
  for (auto &x : t)
    x = ti(rng);
  std::vector<uint8_t> yb(t.size() * 8);
  std::memcpy(yb.data(), t.data(), yb.size());
  y.upload(yb);
  auto run = [&] {
    return op.forwardBackward({h.data(), o.dtype, {n, o.hidden}, {}},
                              {w.data(), o.dtype, {o.vocab, o.hidden}, {}},
                              {y.data(), DType::I64, {n}, {}}, {dh.data(), o.dtype, {n, o.hidden}, {}},
                              {dw.data(), DType::F32, {o.vocab, o.hidden}, {}});
  };
  run(); // compile + warm up
  std::vector<double> ms;
  float loss = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    loss = run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  double flops3 = 6.0 * double(n) * double(o.hidden) * double(o.vocab);
  fmt::print("{}: N={} D={} V={}: forward+backward {:.1f} ms (median of 5, host-timed, synchronous), "
             "loss {:.6f}; 6·N·D·V / time = {:.0f} TFLOP/s\n",
             name, n, o.hidden, o.vocab, ms[ms.size() / 2], loss, flops3 / (ms[ms.size() / 2] * 1e-3) / 1e12);
}

llvm::cl::OptionCategory kCategory("lcejit-demo options");

} // namespace

int main(int argc, char **argv) {
  // No options of its own: --help, --version, and a clear error for anything else.
  tools::parseToolOptions(
      argc, argv, kCategory,
      "the main job: the planned Program on the fp64 CPU interpreter against the unfused "
      "graph for a Llama-3-like and a Gemma-2-like loss, then, where a GPU is present, the "
      "op on the device against the same reference and its time at the Llama-3 head shape\n");
  try {
    LinearCrossEntropyOptions llama;
    llama.hidden = 64;
    llama.vocab = 1000;
    llama.dtype = DType::BF16;
    LinearCrossEntropyOptions gemma = llama;
    gemma.hidden = 48;
    gemma.vocab = 1536;
    gemma.softcap = 30.0;
    std::vector<Problem> problems = {{"llama3-like (bf16, mean)", llama, 37},
                                     {"gemma2-like (bf16, softcap 30)", gemma, 29}};
    fmt::print("== CPU: planned Program on the fp64 interpreter vs the unfused graph ==\n");
    for (const Problem &p : problems)
      runCpu(p);
    std::string why;
    if (!runtime::cudaAvailable(&why)) {
      fmt::print("== GPU: skipped ({}) ==\n", why);
      return 0;
    }
    fmt::print("== GPU: the op vs the fp64 reference ==\n");
    for (const Problem &p : problems)
      runGpuCheck(p);
    LinearCrossEntropyOptions big;
    big.hidden = 4096;
    big.vocab = 128256;
    big.dtype = DType::BF16;
    timeGpu("llama3 head (bf16)", big, 8192);
    return 0;
  } catch (const Error &e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}
