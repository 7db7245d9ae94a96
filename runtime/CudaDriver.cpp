//===- CudaDriver.cpp - The CUDA Driver API, loaded at run time ------------===//

#include "runtime/CudaDriver.h"
#include "compiler/support/Check.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <map>
#include <mutex>

namespace lcejit::runtime {

namespace {

/// Names of the results that can come back before cuGetErrorName is usable (a stub
/// library answers CUDA_ERROR_STUB_LIBRARY to cuGetErrorName too).
const char *fallbackErrorName(CUresult r) {
  switch (r) {
  case CUDA_SUCCESS: return "CUDA_SUCCESS";
  case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
  case CUDA_ERROR_DEINITIALIZED: return "CUDA_ERROR_DEINITIALIZED";
  case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
  case CUDA_ERROR_DEVICE_UNAVAILABLE: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
  case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
  case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
  case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
  case CUDA_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN";
  case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
  case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
  case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
  case CUDA_ERROR_NO_BINARY_FOR_GPU: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
  case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
  case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
  case CUDA_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
  case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
  case CUDA_ERROR_LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
  default: return nullptr;
  }
}

std::string errorNameWith(const CudaDriver *d, CUresult r) {
  const char *name = nullptr;
  if (d && d->getErrorName && d->getErrorName(r, &name) == CUDA_SUCCESS && name)
    return name;
  if (const char *f = fallbackErrorName(r))
    return f;
  return fmt::format("CUresult {}", static_cast<int>(r));
}

std::string errorDescriptionWith(const CudaDriver *d, CUresult r) {
  const char *text = nullptr;
  if (d && d->getErrorString && d->getErrorString(r, &text) == CUDA_SUCCESS && text)
    return text;
  return "no description";
}

struct EntryPointSpec {
  const char *name;
  int version;
  void **slot;
};

std::vector<EntryPointSpec> entryPointSpecs(CudaDriver &d) {
  return {
#define LCEJIT_ENTRY_POINT_SPEC(member, cuName, version)                       \
  EntryPointSpec{#cuName, version, reinterpret_cast<void **>(&d.member)},
      LCEJIT_CUDA_DRIVER_ENTRY_POINTS(LCEJIT_ENTRY_POINT_SPEC)
#undef LCEJIT_ENTRY_POINT_SPEC
  };
}

/// Fills every entry point through cuGetProcAddress_v2. Returns "" or the reason.
std::string resolveEntryPoints(CudaDriver &d, PFN_cuGetProcAddress_v12000 getProc,
                               const std::string &libraryName) {
  for (const EntryPointSpec &e : entryPointSpecs(d)) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = getProc(e.name, e.slot, e.version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (r == CUDA_ERROR_STUB_LIBRARY)
      return fmt::format("no CUDA driver: {} is the CUDA toolkit's stub library "
                         "(CUDA_ERROR_STUB_LIBRARY), not an NVIDIA driver",
                         libraryName);
    if (r != CUDA_SUCCESS)
      return fmt::format("no usable CUDA driver: cuGetProcAddress({}, {}) returned {}", e.name,
                         e.version, errorNameWith(nullptr, r));
    if (found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
      return fmt::format("CUDA driver too old: {} has no {} at ABI version {}", libraryName,
                         e.name, e.version);
    if (found != CU_GET_PROC_ADDRESS_SUCCESS || *e.slot == nullptr)
      return fmt::format("CUDA driver too old: {} does not provide {}", libraryName, e.name);
  }
  return "";
}

struct DriverState {
  std::unique_ptr<CudaDriver> driver;
  std::string error;
};

const DriverState &processDriver() {
  static const DriverState state = [] {
    DriverState s;
    s.driver = loadCudaDriver("libcuda.so.1", &s.error);
    return s;
  }();
  return state;
}

} // namespace

std::vector<DriverEntryPoint> CudaDriver::entryPoints() const {
  return {
#define LCEJIT_ENTRY_POINT_ROW(member, cuName, version)                        \
  DriverEntryPoint{#cuName, version, reinterpret_cast<void *>(member)},
      LCEJIT_CUDA_DRIVER_ENTRY_POINTS(LCEJIT_ENTRY_POINT_ROW)
#undef LCEJIT_ENTRY_POINT_ROW
  };
}

std::unique_ptr<CudaDriver> loadCudaDriver(const std::string &libraryName, std::string *why) {
  auto fail = [&](std::string reason) -> std::unique_ptr<CudaDriver> {
    if (why)
      *why = std::move(reason);
    return nullptr;
  };
  dlerror();
  void *handle = dlopen(libraryName.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *err = dlerror();
    return fail(fmt::format("no CUDA driver: dlopen({}) failed: {}", libraryName,
                            err ? err : "unknown error"));
  }
  auto getProc =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
  if (!getProc) {
    dlclose(handle);
    return fail(fmt::format("CUDA driver too old: {} has no cuGetProcAddress_v2 (need a "
                            "driver for CUDA 12.0 or newer)",
                            libraryName));
  }
  auto d = std::make_unique<CudaDriver>();
  if (std::string err = resolveEntryPoints(*d, getProc, libraryName); !err.empty()) {
    dlclose(handle);
    return fail(std::move(err));
  }
  d->libraryHandle = handle; // never dlclose'd: the driver lives as long as the process

  CUresult r = d->init(0);
  if (r == CUDA_ERROR_NO_DEVICE)
    return fail("no GPU: cuInit returned CUDA_ERROR_NO_DEVICE");
  if (r == CUDA_ERROR_STUB_LIBRARY)
    return fail(fmt::format("no CUDA driver: {} is the CUDA toolkit's stub library "
                            "(cuInit returned CUDA_ERROR_STUB_LIBRARY)",
                            libraryName));
  if (r != CUDA_SUCCESS)
    return fail(fmt::format("no usable GPU: cuInit returned {} ({})", errorNameWith(d.get(), r),
                            errorDescriptionWith(d.get(), r)));
  if (d->driverGetVersion(&d->driverVersion) != CUDA_SUCCESS)
    d->driverVersion = 0;
  return d;
}

const CudaDriver &cudaDriver() {
  const DriverState &s = processDriver();
  if (!s.driver)
    LCEJIT_THROW(NoDevice, "{}", s.error);
  return *s.driver;
}

bool cudaAvailable(std::string *why) {
  const DriverState &s = processDriver();
  if (!s.driver && why)
    *why = s.error;
  return s.driver != nullptr;
}

std::string cudaErrorName(CUresult result) {
  return errorNameWith(processDriver().driver.get(), result);
}

void throwCudaError(CUresult result, const char *call, const char *file, int line) {
  const CudaDriver *d = processDriver().driver.get();
  LCEJIT_THROW(Cuda, "{} ({}: {}) from `{}` at {}:{}", errorNameWith(d, result),
               static_cast<int>(result), errorDescriptionWith(d, result), call, file, line);
}

//===----------------------------------------------------------------------===//
// Devices and contexts
//===----------------------------------------------------------------------===//

DeviceInfo deviceInfo(int ordinal) {
  const CudaDriver &d = cudaDriver();
  int count = 0;
  LCEJIT_CU(d.deviceGetCount(&count));
  LCEJIT_CHECK_ARG(ordinal >= 0 && ordinal < count,
                   "device ordinal {} is out of range: this machine has {} CUDA device(s)",
                   ordinal, count);
  CUdevice dev = 0;
  LCEJIT_CU(d.deviceGet(&dev, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  LCEJIT_CU(d.deviceGetName(name, sizeof(name) - 1, dev));
  info.name = name;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    LCEJIT_CU(d.deviceGetAttribute(&v, a, dev));
    return v;
  };
  info.smMajor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.smMinor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.numSMs = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.maxSharedPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  info.maxSharedPerBlockOptin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  info.memoryBusBits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  size_t total = 0;
  LCEJIT_CU(d.deviceTotalMem(&total, dev));
  info.totalMemoryBytes = static_cast<int64_t>(total);
  info.driverVersion = d.driverVersion;
  return info;
}

DeviceInfo currentDeviceInfo() {
  const CudaDriver &d = cudaDriver();
  ensureContext();
  CUdevice dev = 0;
  LCEJIT_CU(d.ctxGetDevice(&dev));
  // CUdevice is the ordinal for the devices the driver exposes to this process.
  return deviceInfo(static_cast<int>(dev));
}

plan::Target targetFor(const DeviceInfo &info) {
  plan::Target t;
  t.smVersion = info.smVersion();
  t.numSMs = info.numSMs;
  t.maxSharedPerBlock = info.maxSharedPerBlockOptin;
  t.memoryBusBits = info.memoryBusBits;
  return t;
}

CUcontext primaryContext(int ordinal) {
  const CudaDriver &d = cudaDriver();
  static std::mutex mu;
  static std::map<int, CUcontext> retained;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = retained.find(ordinal); it != retained.end())
    return it->second;
  int count = 0;
  LCEJIT_CU(d.deviceGetCount(&count));
  LCEJIT_CHECK_ARG(ordinal >= 0 && ordinal < count,
                   "device ordinal {} is out of range: this machine has {} CUDA device(s)",
                   ordinal, count);
  CUdevice dev = 0;
  LCEJIT_CU(d.deviceGet(&dev, ordinal));
  CUcontext ctx = nullptr;
  LCEJIT_CU(d.devicePrimaryCtxRetain(&ctx, dev));
  retained.emplace(ordinal, ctx);
  return ctx;
}

CUcontext ensureContext(int ordinal) {
  const CudaDriver &d = cudaDriver();
  CUcontext current = nullptr;
  LCEJIT_CU(d.ctxGetCurrent(&current));
  if (current)
    return current;
  CUcontext ctx = primaryContext(ordinal);
  LCEJIT_CU(d.ctxSetCurrent(ctx));
  return ctx;
}

} // namespace lcejit::runtime
