//===- CudaDriverTest.cpp - Loading the driver; GPU parts skip without one ---===//

#include "TestSupport.h"

#include "runtime/CudaDriver.h"

#include <dlfcn.h>
#include <filesystem>
#include <map>
#include <set>

using namespace lcejit;
using namespace lcejit::runtime;
using lcejit::testing::expectError;

namespace {

#define SKIP_WITHOUT_GPU()                                                     \
  do {                                                                         \
    std::string why_;                                                          \
    if (!cudaAvailable(&why_))                                                 \
      GTEST_SKIP() << "needs a GPU: " << why_;                                 \
  } while (0)

/// Whether this machine has any libcuda.so.1 at all (independently of our loader).
bool systemHasLibcuda() {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h)
    h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h)
    dlclose(h);
  return h != nullptr;
}

TEST(CudaDriverTest, EntryPointTableUsesThePfnVersions) {
  CudaDriver unloaded;
  std::vector<DriverEntryPoint> table = unloaded.entryPoints();
  std::map<std::string, int> version;
  for (const DriverEntryPoint &e : table) {
    EXPECT_TRUE(version.emplace(e.name, e.version).second) << "duplicate " << e.name;
    EXPECT_EQ(e.pointer, nullptr);
  }
  // toolchain.md D3: each symbol at the version of the typedef it is called through.
  const std::map<std::string, int> expected = {
      {"cuInit", 2000},          {"cuCtxSynchronize", 2000},
      {"cuMemAlloc", 3020},      {"cuMemFree", 3020},
      {"cuMemcpyHtoD", 3020},    {"cuMemcpyDtoH", 3020},
      {"cuDevicePrimaryCtxRetain", 7000}, {"cuCtxSetCurrent", 4000},
      {"cuModuleLoadData", 2000}, {"cuModuleGetFunction", 2000},
      {"cuLaunchKernelEx", 11060}, {"cuGetErrorName", 6000},
      {"cuCtxGetDevice", 2000},  {"cuStreamDestroy", 4000},
      {"cuEventDestroy", 4000},  {"cuFuncSetAttribute", 9000}};
  for (const auto &[name, v] : expected) {
    ASSERT_TRUE(version.count(name)) << name << " missing from the table";
    EXPECT_EQ(version[name], v) << name;
  }
  for (const char *needed :
       {"cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetAttribute",
        "cuDeviceGetName", "cuCtxGetCurrent", "cuMemAllocHost", "cuMemFreeHost",
        "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemsetD8Async", "cuMemsetD32Async",
        "cuStreamSynchronize", "cuStreamCreate", "cuEventCreate", "cuEventRecord",
        "cuEventSynchronize", "cuEventElapsedTime", "cuModuleUnload", "cuFuncGetAttribute",
        "cuGetErrorString"})
    EXPECT_TRUE(version.count(needed)) << needed;
}

TEST(CudaDriverTest, WithoutDriverEverythingSaysWhy) {
  std::string why;
  if (cudaAvailable(&why))
    GTEST_SKIP() << "a CUDA driver and GPU are present";
  ASSERT_FALSE(why.empty());
  if (!systemHasLibcuda()) {
    EXPECT_NE(why.find("libcuda.so.1"), std::string::npos) << why;
    EXPECT_NE(why.find("dlopen(libcuda.so.1) failed"), std::string::npos) << why;
  }
  std::string msg = expectError(ErrorKind::NoDevice, [] { cudaDriver(); });
  EXPECT_NE(msg.find(why), std::string::npos) << msg;
  // Same answer every time: the outcome is decided once.
  expectError(ErrorKind::NoDevice, [] { cudaDriver(); });
  expectError(ErrorKind::NoDevice, [] { ensureContext(); });
  expectError(ErrorKind::NoDevice, [] { deviceInfo(0); });
}

TEST(CudaDriverTest, MissingLibraryIsReported) {
  std::string why;
  EXPECT_EQ(loadCudaDriver("/nonexistent/libcuda.so.1", &why), nullptr);
  EXPECT_NE(why.find("no CUDA driver: dlopen(/nonexistent/libcuda.so.1) failed:"),
            std::string::npos)
      << why;
}

TEST(CudaDriverTest, ToolkitStubIsRecognized) {
  // Decide the process driver first: the stub's SONAME is libcuda.so.1, and once it is
  // loaded a later dlopen("libcuda.so.1") in this process would find it.
  cudaAvailable();
  const std::filesystem::path stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (!std::filesystem::exists(stub))
    GTEST_SKIP() << stub << " not present";
  std::string why;
  EXPECT_EQ(loadCudaDriver(stub.string(), &why), nullptr);
  EXPECT_NE(why.find("CUDA_ERROR_STUB_LIBRARY"), std::string::npos) << why;
  EXPECT_NE(why.find("stub"), std::string::npos) << why;
}

TEST(CudaDriverTest, CuMacroThrowsCudaErrorWithNameCallAndLocation) {
  auto failing = [] { return CUDA_ERROR_INVALID_VALUE; };
  std::string msg = expectError(ErrorKind::Cuda, [&] { LCEJIT_CU(failing()); });
  EXPECT_NE(msg.find("CUDA_ERROR_INVALID_VALUE"), std::string::npos) << msg;
  EXPECT_NE(msg.find("failing()"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CudaDriverTest.cpp:"), std::string::npos) << msg;
  auto ok = [] { return CUDA_SUCCESS; };
  LCEJIT_CU(ok());
  EXPECT_EQ(cudaErrorName(CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(cudaErrorName(CUDA_ERROR_NO_DEVICE), "CUDA_ERROR_NO_DEVICE");
}

TEST(CudaDriverTest, TargetFromDeviceInfo) {
  DeviceInfo h200;
  h200.smMajor = 9;
  h200.smMinor = 0;
  h200.numSMs = 132;
  h200.maxSharedPerBlockOptin = 232448;
  h200.memoryBusBits = 6144;
  plan::Target t = targetFor(h200);
  EXPECT_EQ(t.smVersion, 90);
  EXPECT_EQ(t.archName(), "sm_90a");
  EXPECT_EQ(t.numSMs, 132);
  EXPECT_EQ(t.maxSharedPerBlock, 232448);
  EXPECT_EQ(t.memoryBusBits, 6144);
  DeviceInfo a100;
  a100.smMajor = 8;
  a100.smMinor = 6;
  EXPECT_EQ(targetFor(a100).archName(), "sm_86");
}

//===----------------------------------------------------------------------===//
// GPU only
//===----------------------------------------------------------------------===//

TEST(CudaDriverGpuTest, EveryEntryPointResolved) {
  SKIP_WITHOUT_GPU();
  const CudaDriver &d = cudaDriver();
  for (const DriverEntryPoint &e : d.entryPoints())
    EXPECT_NE(e.pointer, nullptr) << e.name;
  EXPECT_GE(d.driverVersion, 12000);
}

TEST(CudaDriverGpuTest, DeviceInfoAndContext) {
  SKIP_WITHOUT_GPU();
  CUcontext ctx = ensureContext();
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ensureContext(), ctx) << "an already-current context is kept";
  EXPECT_EQ(primaryContext(0), ctx);
  DeviceInfo info = currentDeviceInfo();
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.smVersion(), 70);
  EXPECT_GT(info.numSMs, 0);
  EXPECT_GE(info.maxSharedPerBlockOptin, info.maxSharedPerBlock);
  EXPECT_GT(info.totalMemoryBytes, 0);
  EXPECT_GT(info.memoryBusBits, 0);
  EXPECT_EQ(targetFor(info).memoryBusBits, info.memoryBusBits);
  EXPECT_EQ(info.driverVersion, cudaDriver().driverVersion);
  expectError(ErrorKind::InvalidArgument, [] { deviceInfo(1000); });
  // The D3 pitfall: cuCtxSynchronize called through the v2000 signature works.
  LCEJIT_CU(cudaDriver().ctxSynchronize());
}

TEST(CudaDriverGpuTest, MemoryRoundTripAndErrorNames) {
  SKIP_WITHOUT_GPU();
  ensureContext();
  const CudaDriver &d = cudaDriver();
  CUdeviceptr p = 0;
  LCEJIT_CU(d.memAlloc(&p, 1024));
  std::vector<uint32_t> in(256), out(256, 0);
  for (uint32_t i = 0; i < 256; ++i)
    in[i] = i * 2654435761u;
  LCEJIT_CU(d.memcpyHtoD(p, in.data(), 1024));
  LCEJIT_CU(d.memcpyDtoH(out.data(), p, 1024));
  EXPECT_EQ(in, out);
  CUstream s = nullptr;
  LCEJIT_CU(d.streamCreate(&s, CU_STREAM_NON_BLOCKING));
  LCEJIT_CU(d.memsetD32Async(p, 7u, 256, s));
  LCEJIT_CU(d.memcpyDtoHAsync(out.data(), p, 1024, s));
  LCEJIT_CU(d.streamSynchronize(s));
  EXPECT_EQ(out, std::vector<uint32_t>(256, 7u));
  LCEJIT_CU(d.streamDestroy(s));
  LCEJIT_CU(d.memFree(p));
  std::string msg = expectError(ErrorKind::Cuda, [&] {
    CUdeviceptr huge = 0;
    LCEJIT_CU(d.memAlloc(&huge, size_t(1) << 50));
  });
  EXPECT_NE(msg.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of memory"), std::string::npos) << "description: " << msg;
}

} // namespace
