//===- DeviceMathGpuTest.cpp - The device helpers' own math, on the device -===//
//
//   DeviceMathGpu.TanhF32StaysWithinItsBoundsOverTheWholeRange
//
// The generated kernels evaluate the scalar IR's f32 Tanh with lcejit::tanh_f32 ([Note:
// f32 tanh] in lcejit_common.cuh: one ex2 and one rcp on the MUFU unit), whose error
// bounds are stated there. Host emulation runs the same formula with exact exp2 and
// division, so only the device shows the MUFU's own errors: this test compiles the device
// prelude with NVRTC, evaluates tanh_f32 (and libdevice's tanhf, for the log) on about
// 1.4 million inputs and checks every one against tanh in double.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/DeviceHeaders.h"
#include "runtime/CudaDriver.h"
#include "runtime/Module.h"
#include "runtime/Nvrtc.h"
#include "tests/gpu/GpuSupport.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <vector>

namespace lcejit::gputest {
namespace {

constexpr const char *kTanhKernel = R"(
extern "C" __global__ void tanh_sweep(const float *x, float *ours, float *libm, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    ours[i] = lcejit::tanh_f32(x[i]);
    libm[i] = tanhf(x[i]);
  }
}
)";

/// Inputs: a uniform grid over [-12, 12] (tanh's whole non-saturated range, steps of
/// ~2e-5), every power of two's neighbourhood from 2^-40 to 2^7 on both signs (small
/// arguments, where (1 - e) / (1 + e) loses relative precision), and the special values.
std::vector<float> tanhInputs() {
  std::vector<float> x;
  const int grid = 1 << 20;
  for (int i = 0; i <= grid; ++i)
    x.push_back(static_cast<float>(-12.0 + 24.0 * i / grid));
  for (int e = -40; e <= 7; ++e)
    for (int k = 0; k < 4096; ++k) {
      const float v = std::ldexp(1.0f + k / 4096.0f, e);
      x.push_back(v);
      x.push_back(-v);
    }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::denorm_min(), 1e-38f, 88.0f, -88.0f, 1e30f})
    x.push_back(v);
  return x;
}

TEST(DeviceMathGpu, TanhF32StaysWithinItsBoundsOverTheWholeRange) {
  runtime::ensureContext();
  runtime::NvrtcRequest req;
  req.source = codegen::deviceHeaderPrelude() + kTanhKernel;
  req.arch = runtime::targetFor(runtime::currentDeviceInfo()).archName();
  req.label = "tanh-sweep";
  const runtime::Module module(runtime::compileCuda(req).cubin);

  std::vector<float> x = tanhInputs();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  x.push_back(nan);
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t bytes = n * 4;
  DeviceBuffer dx(bytes), dours(bytes), dlibm(bytes);
  const runtime::CudaDriver &d = runtime::cudaDriver();
  LCEJIT_CU(d.memcpyHtoD(dx.ptr(), x.data(), static_cast<size_t>(bytes)));
  dours.poison();
  dlibm.poison();
  CUdeviceptr px = dx.ptr(), po = dours.ptr(), pl = dlibm.ptr();
  long long nn = n;
  std::vector<void *> args{&px, &po, &pl, &nn};
  CUlaunchConfig cfg{};
  cfg.gridDimX = static_cast<unsigned>((n + 255) / 256);
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 256;
  cfg.blockDimY = cfg.blockDimZ = 1;
  LCEJIT_CU(d.launchKernelEx(&cfg, module.function("tanh_sweep"), args.data(), nullptr));
  const std::vector<float> ours = dours.download<float>();
  const std::vector<float> libm = dlibm.download<float>();

  // The bounds of [Note: f32 tanh]: absolute error below 4e-7 everywhere, relative error
  // below 2^-20 where |tanh x| >= 0.5 (|x| >= 0.5494).
  const double absBound = 4e-7, relBound = std::ldexp(1.0, -20);
  double worstAbs = 0, worstRel = 0, libmAbs = 0;
  float worstAbsAt = 0, worstRelAt = 0;
  int64_t failures = 0;
  for (int64_t i = 0; i + 1 < n; ++i) { // the last input is the NaN
    const double ref = std::tanh(static_cast<double>(x[i]));
    const double err = std::fabs(static_cast<double>(ours[i]) - ref);
    libmAbs = std::max(libmAbs, std::fabs(static_cast<double>(libm[i]) - ref));
    const bool finite = std::isfinite(ours[i]);
    const bool signOk = std::signbit(ours[i]) == std::signbit(x[i]);
    const double rel = std::fabs(ref) >= 0.5 ? err / std::fabs(ref) : 0.0;
    if (err > worstAbs) {
      worstAbs = err;
      worstAbsAt = x[i];
    }
    if (rel > worstRel) {
      worstRel = rel;
      worstRelAt = x[i];
    }
    if (!finite || !signOk || err > absBound || rel > relBound) {
      if (++failures <= 10)
        ADD_FAILURE() << fmt::format("tanh_f32({:.9g}) = {:.9g}, tanh = {:.17g}: abs err {:.3g}, "
                                     "rel err {:.3g}{}",
                                     x[i], ours[i], ref, err, rel,
                                     signOk ? "" : ", wrong sign");
    }
  }
  EXPECT_EQ(failures, 0);
  // Exact where the formula is: the saturated ends and the signed zeros.
  auto at = [&](float v) {
    for (int64_t i = 0; i < n; ++i)
      if (std::memcmp(&x[i], &v, 4) == 0)
        return ours[i];
    ADD_FAILURE() << "no input " << v;
    return nan;
  };
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(at(inf), 1.0f);
  EXPECT_EQ(at(-inf), -1.0f);
  EXPECT_EQ(at(88.0f), 1.0f);
  EXPECT_EQ(at(-88.0f), -1.0f);
  EXPECT_EQ(at(0.0f), 0.0f);
  EXPECT_FALSE(std::signbit(at(0.0f)));
  EXPECT_TRUE(std::signbit(at(-0.0f)));
  EXPECT_TRUE(std::isnan(ours[static_cast<size_t>(n - 1)])) << "tanh_f32(NaN)";
  std::cout << fmt::format("tanh_f32 over {} inputs: max abs err {:.3g} (at {:.9g}), max rel "
                           "err where |tanh| >= 0.5 {:.3g} (at {:.9g}); libdevice tanhf max "
                           "abs err {:.3g}\n",
                           n - 1, worstAbs, worstAbsAt, worstRel, worstRelAt, libmAbs);
}

} // namespace
} // namespace lcejit::gputest
