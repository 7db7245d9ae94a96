//===- Module.h - A cubin loaded into a CUDA context -----------------------===//
//
// RAII owner of a CUmodule: loads a cubin into the current context (cuModuleLoadData),
// looks functions up by name (cached), raises a function's dynamic shared memory limit
// when a launch needs more than the default 48 KB, and unloads in the destructor.
//
// [Note: module contexts] A module belongs to the context that was current when it was
// loaded; its functions may only be launched there. Callers make the context current
// first (ensureContext()). Module is movable, not copyable, and its lookups are
// thread-safe.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/CudaDriver.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

namespace lcejit::runtime {

/// Dynamic shared memory a kernel may use without opting in.
inline constexpr int32_t kDefaultMaxDynamicShared = 48 * 1024;

/// What the driver reports about a loaded function (cuFuncGetAttribute). Unlike the
/// ptxas report of NVRTC (see [Note: compute cache] in Nvrtc.h) it is always available
/// once the module is loaded.
struct FunctionAttributes {
  int registers = 0;             ///< CU_FUNC_ATTRIBUTE_NUM_REGS
  int staticSharedBytes = 0;     ///< CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
  int constBytes = 0;            ///< CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES
  int localBytes = 0;            ///< CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES (stack + spills)
  int maxThreadsPerBlock = 0;    ///< CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
  int maxDynamicSharedBytes = 0; ///< CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  int binaryVersion = 0;         ///< CU_FUNC_ATTRIBUTE_BINARY_VERSION, e.g. 90
};

class Module {
public:
  Module() = default;
  /// Loads `image` (a cubin) into the current context. Throws Error(Cuda), e.g.
  /// CUDA_ERROR_NO_BINARY_FOR_GPU when the cubin's arch does not match the device.
  explicit Module(std::span<const uint8_t> image);
  ~Module();
  Module(Module &&other) noexcept;
  Module &operator=(Module &&other) noexcept;
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  bool loaded() const { return module_ != nullptr; }
  CUmodule handle() const { return module_; }

  /// The function named `name` (an extern "C" kernel name). Throws Error(Cuda) naming
  /// the kernel when the module has no such function.
  CUfunction function(const std::string &name) const;

  /// Allows `f` to use `bytes` of dynamic shared memory: sets
  /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES when bytes > 48 KB and more than
  /// already allowed. Cheap when nothing changes.
  void reserveDynamicShared(CUfunction f, int32_t bytes) const;

  /// The driver's view of a function of this module.
  FunctionAttributes attributes(CUfunction f) const;

private:
  struct Functions {
    std::mutex mu;
    std::unordered_map<std::string, CUfunction> byName;
    std::unordered_map<CUfunction, int32_t> maxDynamicShared;
  };
  void unload() noexcept;

  CUmodule module_ = nullptr;
  std::unique_ptr<Functions> functions_;
};

} // namespace lcejit::runtime
