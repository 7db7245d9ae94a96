//===- Module.cpp - A cubin loaded into a CUDA context ---------------------===//

#include "runtime/Module.h"
#include "compiler/support/Check.h"

namespace lcejit::runtime {

Module::Module(std::span<const uint8_t> image) : functions_(std::make_unique<Functions>()) {
  LCEJIT_CHECK_ARG(!image.empty(), "cannot load an empty cubin");
  const CudaDriver &d = cudaDriver();
  LCEJIT_CU(d.moduleLoadData(&module_, image.data()));
}

Module::~Module() { unload(); }

Module::Module(Module &&other) noexcept
    : module_(other.module_), functions_(std::move(other.functions_)) {
  other.module_ = nullptr;
}

Module &Module::operator=(Module &&other) noexcept {
  if (this != &other) {
    unload();
    module_ = other.module_;
    functions_ = std::move(other.functions_);
    other.module_ = nullptr;
  }
  return *this;
}

void Module::unload() noexcept {
  if (!module_)
    return;
  // Errors are ignored: at process exit the driver may already be shut down
  // (CUDA_ERROR_DEINITIALIZED), and a destructor must not throw.
  if (cudaAvailable())
    cudaDriver().moduleUnload(module_);
  module_ = nullptr;
}

CUfunction Module::function(const std::string &name) const {
  LCEJIT_CHECK(module_ != nullptr, "function('{}') on an unloaded Module", name);
  std::lock_guard<std::mutex> lock(functions_->mu);
  if (auto it = functions_->byName.find(name); it != functions_->byName.end())
    return it->second;
  const CudaDriver &d = cudaDriver();
  CUfunction f = nullptr;
  CUresult r = d.moduleGetFunction(&f, module_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    LCEJIT_THROW(Cuda, "the loaded module has no kernel named '{}' (CUDA_ERROR_NOT_FOUND)",
                 name);
  LCEJIT_CU(r);
  functions_->byName.emplace(name, f);
  return f;
}

void Module::reserveDynamicShared(CUfunction f, int32_t bytes) const {
  LCEJIT_CHECK(module_ != nullptr, "reserveDynamicShared on an unloaded Module");
  if (bytes <= kDefaultMaxDynamicShared)
    return;
  std::lock_guard<std::mutex> lock(functions_->mu);
  int32_t &allowed = functions_->maxDynamicShared[f];
  if (bytes <= allowed)
    return;
  LCEJIT_CU(cudaDriver().funcSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          bytes));
  allowed = bytes;
}

FunctionAttributes Module::attributes(CUfunction f) const {
  LCEJIT_CHECK(module_ != nullptr, "attributes() on an unloaded Module");
  const CudaDriver &d = cudaDriver();
  auto get = [&](CUfunction_attribute a) {
    int v = 0;
    LCEJIT_CU(d.funcGetAttribute(&v, a, f));
    return v;
  };
  FunctionAttributes fa;
  fa.registers = get(CU_FUNC_ATTRIBUTE_NUM_REGS);
  fa.staticSharedBytes = get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  fa.constBytes = get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
  fa.localBytes = get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  fa.maxThreadsPerBlock = get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  fa.maxDynamicSharedBytes = get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  fa.binaryVersion = get(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  return fa;
}

} // namespace lcejit::runtime
