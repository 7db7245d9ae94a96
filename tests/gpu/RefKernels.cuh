// fp64 reference and helper kernels for the GPU test suite (compiled at test start with
// NVRTC). The reference computes the loss and both gradients from the definition, in
// fp64, from the same (upcast) input values the op sees; it shares no code with the
// generated kernels. It is itself checked against the CPU interpreter at small shapes.
//
// Kept free of any include so it compiles quickly; dtype codes: 0 bf16, 1 f16, 2 f32.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u64 mix64(u64 x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Uniform in [-1, 1).
__device__ __forceinline__ double uniform(u64 seed, u64 i) {
  return double(mix64(seed * 0x100000001b3ull + i) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

__device__ __forceinline__ u16 f32_to_bf16_rn(float f) {
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u16(u >> 16);
}

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(u32(h) << 16); }

__device__ __forceinline__ u16 f32_to_f16_rn(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float f16_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ double load_as_f64(const void *p, int dtype, long long i) {
  if (dtype == 0)
    return bf16_to_f32(((const u16 *)p)[i]);
  if (dtype == 1)
    return f16_to_f32(((const u16 *)p)[i]);
  return ((const float *)p)[i];
}

/// Rounds an f64 value to dtype and back (the rounding floor of an output of dtype).
__device__ __forceinline__ double round_to(double v, int dtype) {
  float f = float(v); // f64 -> f32 round to nearest; then to the 16-bit type
  if (dtype == 0)
    return bf16_to_f32(f32_to_bf16_rn(f));
  if (dtype == 1)
    return f16_to_f32(f32_to_f16_rn(f));
  return f;
}

extern "C" __global__ void fill_random(void *out, int dtype, long long n, u64 seed, double scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    float v = float(uniform(seed, (u64)i) * scale);
    if (dtype == 0)
      ((u16 *)out)[i] = f32_to_bf16_rn(v);
    else if (dtype == 1)
      ((u16 *)out)[i] = f32_to_f16_rn(v);
    else
      ((float *)out)[i] = v;
  }
}

/// Targets in [0, V); every `ignoreEvery`-th row (if > 0) gets ignoreIndex; row `badRow`
/// (if >= 0) gets badValue.
extern "C" __global__ void fill_targets(void *out, int is64, long long n, u64 seed, long long vocab,
                                        long long ignoreIndex, int ignoreEvery, long long badRow,
                                        long long badValue) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long t = (long long)(mix64(seed ^ 0x5bd1e995ull * (u64)(i + 1)) % (u64)vocab);
    if (ignoreEvery > 0 && i % ignoreEvery == ignoreEvery - 1)
      t = ignoreIndex;
    if (i == badRow)
      t = badValue;
    if (is64)
      ((long long *)out)[i] = t;
    else
      ((int *)out)[i] = (int)t;
  }
}

extern "C" __global__ void to_f64(const void *in, int dtype, double *out, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = load_as_f64(in, dtype, i);
}

// C[M, N] = op(A) · op(B) in fp64, 64x64 tiles, 256 threads, 4x4 outputs per thread.
// layout 0 (NT): A [M, K], B [N, K];  1 (NN): A [M, K], B [K, N];  2 (TN): A [K, M], B [K, N].
extern "C" __global__ void __launch_bounds__(256) gemm_f64(const double *A, const double *B,
                                                           double *C, long long M, long long N,
                                                           long long K, int layout) {
  __shared__ double As[16][64 + 1];
  __shared__ double Bs[16][64 + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long m0 = (long long)blockIdx.y * 64, n0 = (long long)blockIdx.x * 64;
  double acc[4][4] = {};
  for (long long k0 = 0; k0 < K; k0 += 16) {
    for (int e = threadIdx.x; e < 16 * 64; e += 256) {
      int kk = e / 64, mm = e % 64;
      long long m = m0 + mm, n = n0 + mm, k = k0 + kk;
      double a = 0, b = 0;
      if (m < M && k < K)
        a = layout == 2 ? A[k * M + m] : A[m * K + k];
      if (n < N && k < K)
        b = layout == 0 ? B[n * K + k] : B[k * N + n];
      As[kk][mm] = a;
      Bs[kk][mm] = b;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      double a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = As[kk][ty * 4 + i];
        b[i] = Bs[kk][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      long long m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
      if (m < M && n < N)
        C[m * N + n] = acc[i][j];
    }
}

__device__ __forceinline__ long long load_target(const void *y, int is64, long long i) {
  return is64 ? ((const long long *)y)[i] : (long long)((const int *)y)[i];
}

/// One block per row: Z holds raw logits (H·Wᵀ). Writes lse, the row loss (0 if ignored)
/// and valid (1/0).
extern "C" __global__ void lce_rows_f64(const double *Z, const void *y, int is64, long long N,
                                        long long V, double softcap, long long ignoreIndex,
                                        int hasIgnore, double *lse, double *rowLoss,
                                        double *valid) {
  __shared__ double red[256];
  long long i = blockIdx.x;
  if (i >= N)
    return;
  const double *z = Z + i * V;
  double m = -1.0 / 0.0;
  for (long long j = threadIdx.x; j < V; j += blockDim.x) {
    double v = softcap > 0 ? softcap * tanh(z[j] / softcap) : z[j];
    m = fmax(m, v);
  }
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      red[threadIdx.x] = fmax(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  double s = 0;
  for (long long j = threadIdx.x; j < V; j += blockDim.x) {
    double v = softcap > 0 ? softcap * tanh(z[j] / softcap) : z[j];
    s += exp(v - m);
  }
  red[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k)
      red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double l = m + log(red[0]);
    long long t = load_target(y, is64, i);
    bool ok = !(hasIgnore && t == ignoreIndex);
    double zt = 0;
    if (ok) {
      double raw = z[t];
      zt = softcap > 0 ? softcap * tanh(raw / softcap) : raw;
    }
    lse[i] = l;
    rowLoss[i] = ok ? l - zt : 0.0;
    valid[i] = ok ? 1.0 : 0.0;
  }
}

/// In place: Z (raw logits) -> dZ = g·(softmax − onehot)·softcap'(raw), g = scale if the
/// row is valid, else 0.
extern "C" __global__ void lce_dz_f64(double *Z, const void *y, int is64, long long N,
                                      long long V, double softcap, const double *lse,
                                      const double *valid, double scale) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < N * V;
       e += (long long)gridDim.x * blockDim.x) {
    long long i = e / V, j = e % V;
    double raw = Z[e];
    double v = raw, d = 1.0;
    if (softcap > 0) {
      double t = tanh(raw / softcap);
      v = softcap * t;
      d = 1.0 - t * t;
    }
    double g = valid[i] * scale;
    double p = exp(v - lse[i]);
    double onehot = load_target(y, is64, i) == j ? 1.0 : 0.0;
    Z[e] = g * (p - onehot) * d;
  }
}

/// y[i] = a · y[i] + x[i] (x read as dtype, widened exactly; a null x adds nothing): the
/// reference of an accumulated gradient, old + scale · fresh, from the fp64 fresh gradient
/// in y.
extern "C" __global__ void scale_add_f64(double *y, double a, const void *x, int dtype,
                                         long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = a * y[i] + (x ? load_as_f64(x, dtype, i) : 0.0);
}

/// Accumulates over i < n: out[0] += (x_i − ref_i)², out[1] += ref_i², out[2] +=
/// (round_to(ref_i, dtype) − ref_i)², out[3] += !isfinite(x_i), out[4] += (bf16(ref_i) −
/// ref_i)²; out[5] = max |x_i − ref_i|, out[6] = max |ref_i| (as the bits of non-negative
/// doubles, which order like the values).
extern "C" __global__ void compare_f64(const void *x, int dtype, const double *ref, long long n,
                                       double *out) {
  double d2 = 0, r2 = 0, f2 = 0, bad = 0, b2 = 0, emax = 0, rmax = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    double v = load_as_f64(x, dtype, i), r = ref[i];
    if (!isfinite(v))
      bad += 1;
    d2 += (v - r) * (v - r);
    r2 += r * r;
    double q = round_to(r, dtype) - r;
    f2 += q * q;
    double qb = round_to(r, 0) - r;
    b2 += qb * qb;
    emax = fmax(emax, fabs(v - r));
    rmax = fmax(rmax, fabs(r));
  }
  for (int o = 16; o > 0; o /= 2) {
    d2 += __shfl_down_sync(0xffffffffu, d2, o);
    r2 += __shfl_down_sync(0xffffffffu, r2, o);
    f2 += __shfl_down_sync(0xffffffffu, f2, o);
    bad += __shfl_down_sync(0xffffffffu, bad, o);
    b2 += __shfl_down_sync(0xffffffffu, b2, o);
    emax = fmax(emax, __shfl_down_sync(0xffffffffu, emax, o));
    rmax = fmax(rmax, __shfl_down_sync(0xffffffffu, rmax, o));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(out + 0, d2);
    atomicAdd(out + 1, r2);
    atomicAdd(out + 2, f2);
    atomicAdd(out + 3, bad);
    atomicAdd(out + 4, b2);
    // NaN errors (unwritten poison) are counted in out[3]; keep the max finite.
    if (emax == emax)
      atomicMax((unsigned long long *)(out + 5), (unsigned long long)__double_as_longlong(emax));
    atomicMax((unsigned long long *)(out + 6), (unsigned long long)__double_as_longlong(rmax));
  }
}

/// Peaked logits: for each row i, h[i] += boost * w[y_i] / |w[y_i]|² (rounded to dtype), so
/// the target logit rises by about `boost` over the rest. One block of 256 per row; rows
/// with a target outside [0, vocab) are left alone.
extern "C" __global__ void __launch_bounds__(256) peak_rows(void *h, const void *w, int dtype,
                                                           const void *y, int is64, long long n,
                                                           long long d, long long vocab,
                                                           double boost, long long every) {
  __shared__ double part[256];
  long long i = blockIdx.x;
  if (i >= n || i % every != 0)
    return;
  long long t = is64 ? ((const long long *)y)[i] : ((const int *)y)[i];
  if (t < 0 || t >= vocab)
    return;
  double s = 0;
  for (long long j = threadIdx.x; j < d; j += blockDim.x) {
    double v = load_as_f64(w, dtype, t * d + j);
    s += v * v;
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = 128; o > 0; o /= 2) {
    if ((int)threadIdx.x < o)
      part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  double a = part[0] > 0 ? boost / part[0] : 0.0;
  for (long long j = threadIdx.x; j < d; j += blockDim.x) {
    float v = float(load_as_f64(h, dtype, i * d + j) + a * load_as_f64(w, dtype, t * d + j));
    if (dtype == 0)
      ((u16 *)h)[i * d + j] = f32_to_bf16_rn(v);
    else if (dtype == 1)
      ((u16 *)h)[i * d + j] = f32_to_f16_rn(v);
    else
      ((float *)h)[i * d + j] = v;
  }
}
