//===- CudaDriver.h - The CUDA Driver API, loaded at run time --------------===//
//
// lcejit never links libcuda: binaries must start (and CPU tests run) on machines with no
// GPU driver. libcuda.so.1 is opened with dlopen on first use, cuGetProcAddress_v2 is
// taken with dlsym, and every other entry point is fetched through it.
//
// [Note: driver ABI versions] cuGetProcAddress returns the entry point for an ABI
// version, not for a name: CUDA 13 added PFN_cuCtxSynchronize_v13000(CUcontext) next to
// the v2000 cuCtxSynchronize(void) that cuda.h declares, and calling the former through
// the latter's signature fails (CUDA_ERROR_CONTEXT_IS_DESTROYED; toolchain.md D3). So
// each entry point is requested at the version of the PFN_<name>_v<version> typedef it
// is called through. The table below names the typedef by pasting name and version, so a
// version that has no typedef does not compile, and a pointer can only be called with
// the signature of the version it was requested at.
//
// Members drop the `cu` prefix (memAlloc, launchKernelEx, ...): cuda.h #defines some
// of the prefixed names (cuMemAlloc -> cuMemAlloc_v2), which must not rewrite ours.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/plan/Program.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lcejit::runtime {

// X(member, cuName, version): the entry points lcejit uses, at their ABI versions.
#define LCEJIT_CUDA_DRIVER_ENTRY_POINTS(X)                                     \
  X(init, cuInit, 2000)                                                        \
  X(driverGetVersion, cuDriverGetVersion, 2020)                                \
  X(getErrorName, cuGetErrorName, 6000)                                        \
  X(getErrorString, cuGetErrorString, 6000)                                    \
  X(deviceGet, cuDeviceGet, 2000)                                              \
  X(deviceGetCount, cuDeviceGetCount, 2000)                                    \
  X(deviceGetAttribute, cuDeviceGetAttribute, 2000)                            \
  X(deviceGetName, cuDeviceGetName, 2000)                                      \
  X(deviceTotalMem, cuDeviceTotalMem, 3020)                                    \
  X(devicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000)                    \
  X(devicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 11000)                 \
  X(ctxSetCurrent, cuCtxSetCurrent, 4000)                                      \
  X(ctxGetCurrent, cuCtxGetCurrent, 4000)                                      \
  X(ctxGetDevice, cuCtxGetDevice, 2000)                                        \
  X(ctxSynchronize, cuCtxSynchronize, 2000)                                    \
  X(memAlloc, cuMemAlloc, 3020)                                                \
  X(memFree, cuMemFree, 3020)                                                  \
  X(memAllocHost, cuMemAllocHost, 3020)                                        \
  X(memFreeHost, cuMemFreeHost, 2000)                                          \
  X(memGetInfo, cuMemGetInfo, 3020)                                            \
  X(memcpyHtoD, cuMemcpyHtoD, 3020)                                            \
  X(memcpyDtoH, cuMemcpyDtoH, 3020)                                            \
  X(memcpyHtoDAsync, cuMemcpyHtoDAsync, 3020)                                  \
  X(memcpyDtoHAsync, cuMemcpyDtoHAsync, 3020)                                  \
  X(memsetD8Async, cuMemsetD8Async, 3020)                                      \
  X(memsetD32Async, cuMemsetD32Async, 3020)                                    \
  X(streamCreate, cuStreamCreate, 2000)                                        \
  X(streamDestroy, cuStreamDestroy, 4000)                                      \
  X(streamSynchronize, cuStreamSynchronize, 2000)                              \
  X(streamIsCapturing, cuStreamIsCapturing, 10000)                             \
  X(streamBeginCapture, cuStreamBeginCapture, 10010)                           \
  X(streamEndCapture, cuStreamEndCapture, 10000)                               \
  X(graphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040)             \
  X(graphLaunch, cuGraphLaunch, 10000)                                         \
  X(graphExecDestroy, cuGraphExecDestroy, 10000)                               \
  X(graphDestroy, cuGraphDestroy, 10000)                                       \
  X(eventCreate, cuEventCreate, 2000)                                          \
  X(eventRecord, cuEventRecord, 2000)                                          \
  X(eventRecordWithFlags, cuEventRecordWithFlags, 11010)                       \
  X(streamWaitEvent, cuStreamWaitEvent, 3020)                                  \
  X(eventSynchronize, cuEventSynchronize, 2000)                                \
  X(eventElapsedTime, cuEventElapsedTime, 2000)                                \
  X(eventDestroy, cuEventDestroy, 4000)                                        \
  X(moduleLoadData, cuModuleLoadData, 2000)                                    \
  X(moduleUnload, cuModuleUnload, 2000)                                        \
  X(moduleGetFunction, cuModuleGetFunction, 2000)                              \
  X(funcSetAttribute, cuFuncSetAttribute, 9000)                                \
  X(funcGetAttribute, cuFuncGetAttribute, 2020)                                \
  X(launchKernelEx, cuLaunchKernelEx, 11060)                                  \
  X(tensorMapEncodeTiled, cuTensorMapEncodeTiled, 12000)

/// One row of the entry-point table.
struct DriverEntryPoint {
  const char *name; ///< the Driver API name, e.g. "cuMemAlloc"
  int version;      ///< the ABI version requested from cuGetProcAddress
  void *pointer;    ///< what cuGetProcAddress returned (null before loading)
};

/// The loaded driver: one function pointer per entry point. Obtain it with cudaDriver().
struct CudaDriver {
#define LCEJIT_DECLARE_ENTRY_POINT(member, cuName, version)                    \
  PFN_##cuName##_v##version member = nullptr;
  LCEJIT_CUDA_DRIVER_ENTRY_POINTS(LCEJIT_DECLARE_ENTRY_POINT)
#undef LCEJIT_DECLARE_ENTRY_POINT

  int driverVersion = 0; ///< cuDriverGetVersion, e.g. 13000
  void *libraryHandle = nullptr;

  /// The table of (name, version, pointer), in declaration order.
  std::vector<DriverEntryPoint> entryPoints() const;
};

/// The process's driver, loaded and cuInit'ed on first call (thread-safe).
/// Throws Error(NoDevice) when there is no driver or no GPU, e.g.
///   "no CUDA driver: dlopen(libcuda.so.1) failed: <dlerror>"
///   "no GPU: cuInit returned CUDA_ERROR_NO_DEVICE"
/// The outcome is decided once per process; later calls throw the same error.
const CudaDriver &cudaDriver();

/// True when cudaDriver() would succeed; otherwise stores the reason in *why.
bool cudaAvailable(std::string *why = nullptr);

/// Loads a driver library without caching it in the process state, or returns null and
/// stores the reason. Exposed for tests (for example of the toolkit's stub libcuda).
std::unique_ptr<CudaDriver> loadCudaDriver(const std::string &libraryName, std::string *why);

/// The name of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"); "CUresult <n>" without a driver.
std::string cudaErrorName(CUresult result);

/// Throws Error(Cuda): "<NAME> (<code>: <description>) from `<call>` at <file>:<line>".
[[noreturn]] void throwCudaError(CUresult result, const char *call, const char *file, int line);

/// Checks a Driver API call: LCEJIT_CU(drv.memAlloc(&ptr, bytes));
#define LCEJIT_CU(call)                                                        \
  do {                                                                         \
    CUresult lcejitCuResult_ = (call);                                         \
    if (lcejitCuResult_ != CUDA_SUCCESS)                                       \
      ::lcejit::runtime::throwCudaError(lcejitCuResult_, #call, __FILE__,      \
                                        __LINE__);                             \
  } while (0)

/// What lcejit needs to know about a device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int smMajor = 0, smMinor = 0;
  int numSMs = 0;
  int maxSharedPerBlock = 0;      ///< without opt-in (48 KB)
  int maxSharedPerBlockOptin = 0; ///< with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  int64_t totalMemoryBytes = 0;
  int memoryBusBits = 0; ///< CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
  int driverVersion = 0;
  int smVersion() const { return smMajor * 10 + smMinor; }
};

/// Device properties of ordinal `ordinal`.
DeviceInfo deviceInfo(int ordinal);
/// Device properties of the device of the current context (ensureContext() first).
DeviceInfo currentDeviceInfo();
/// The planner's view of a device: smVersion = major * 10 + minor, SMs, opt-in shared.
plan::Target targetFor(const DeviceInfo &info);

/// The primary context of a device, retained once per process and never released.
CUcontext primaryContext(int ordinal);

/// [Note: contexts] Makes sure the calling thread has a current context and returns it.
/// If the caller already made one current (PyTorch does: it uses the primary context),
/// that one is kept; otherwise the primary context of `ordinal` is made current. Contexts
/// are per thread: every thread that launches lcejit kernels goes through here.
CUcontext ensureContext(int ordinal = 0);

} // namespace lcejit::runtime
