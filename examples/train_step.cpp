// train_step: a small language-model head trained for a few SGD steps on random data,
// with lcejit computing the loss and dW on the GPU. The loss must fall.
//
// Exit codes: 0 trained (loss fell), 1 the loss did not fall or an lcejit error,
// 3 no usable GPU (the message says why).
#include <lcejit/LinearCrossEntropy.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {
void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "train_step: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
} // namespace

int main() {
  std::string why;
  if (!lcejit::LinearCrossEntropy::deviceAvailable(&why)) {
    std::fprintf(stderr, "train_step: no usable GPU: %s\n", why.c_str());
    return 3;
  }
  const int64_t n = 512, d = 64, v = 1000;
  lcejit::LinearCrossEntropyOptions o;
  o.hidden = d;
  o.vocab = v;
  o.dtype = lcejit::DType::F32; // f32 keeps the example free of bf16 conversions
  lcejit::LinearCrossEntropy op(o);

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> h(n * d), w(v * d), dw(v * d);
  std::vector<int64_t> y(n);
  for (float &x : h)
    x = normal(rng);
  for (float &x : w)
    x = 0.05f * normal(rng);
  for (int64_t &t : y)
    t = static_cast<int64_t>(rng() % 16); // a learnable target distribution

  float *dH = nullptr, *dWt = nullptr, *dG = nullptr, *dGW = nullptr;
  int64_t *dY = nullptr;
  check(cudaMalloc(&dH, h.size() * 4), "cudaMalloc");
  check(cudaMalloc(&dWt, w.size() * 4), "cudaMalloc");
  check(cudaMalloc(&dG, h.size() * 4), "cudaMalloc");
  check(cudaMalloc(&dGW, w.size() * 4), "cudaMalloc");
  check(cudaMalloc(&dY, y.size() * 8), "cudaMalloc");
  check(cudaMemcpy(dH, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(dY, y.data(), y.size() * 8, cudaMemcpyHostToDevice), "copy");

  float first = 0, last = 0;
  const float lr = 2.0f;
  try {
    for (int step = 0; step < 8; ++step) {
      check(cudaMemcpy(dWt, w.data(), w.size() * 4, cudaMemcpyHostToDevice), "copy");
      float loss = op.forwardBackward({dH, o.dtype, {n, d}, {}}, {dWt, o.dtype, {v, d}, {}},
                                      {dY, lcejit::DType::I64, {n}, {}},
                                      {dG, o.dtype, {n, d}, {}}, {dGW, lcejit::DType::F32, {v, d}, {}});
      check(cudaMemcpy(dw.data(), dGW, dw.size() * 4, cudaMemcpyDeviceToHost), "copy");
      for (size_t i = 0; i < w.size(); ++i)
        w[i] -= lr * dw[i];
      std::printf("step %d: loss %.6f\n", step, loss);
      if (step == 0)
        first = loss;
      last = loss;
    }
  } catch (const lcejit::Error &e) {
    std::fprintf(stderr, "train_step: %s\n", e.what());
    return 1;
  }
  cudaFree(dH);
  cudaFree(dWt);
  cudaFree(dG);
  cudaFree(dGW);
  cudaFree(dY);
  if (!(last < first)) {
    std::fprintf(stderr, "train_step: the loss did not fall (%f -> %f)\n", first, last);
    return 1;
  }
  std::printf("loss fell from %.6f to %.6f\n", first, last);
  return 0;
}
