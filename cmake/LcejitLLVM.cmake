# MLIR/LLVM 22 from Debian (llvm-22-dev, libmlir-22-dev, mlir-22-tools).
#
# [Note: static LLVM] Debian builds LLVM with LLVM_LINK_LLVM_DYLIB=ON, so every exported MLIR
# target links the shared `LLVM` target (libLLVM.so.22.1, 150 MB). The GPU machine has no
# LLVM 22 and can install nothing, so our binaries link the static component archives
# instead: we rewrite `LLVM` out of the MLIR targets' link interfaces and put an INTERFACE
# target holding the static components in its place. Project code links `lcejit_mlir`,
# never `LLVM` or `MLIR` directly (two copies of LLVM would mean two registries).

find_package(MLIR 22.1 REQUIRED CONFIG HINTS /usr/lib/llvm-22/lib/cmake/mlir)
if(NOT LLVM_VERSION_MAJOR EQUAL 22)
  message(FATAL_ERROR "lcejit needs LLVM/MLIR 22, found ${LLVM_PACKAGE_VERSION}")
endif()
list(APPEND CMAKE_MODULE_PATH ${MLIR_CMAKE_DIR} ${LLVM_CMAKE_DIR})
include(TableGen)
include(AddLLVM)
include(AddMLIR)
separate_arguments(LCEJIT_LLVM_DEFS NATIVE_COMMAND "${LLVM_DEFINITIONS}")

option(LCEJIT_STATIC_LLVM "Link static LLVM component archives instead of libLLVM.so" ON)
set(LCEJIT_LLVM_COMPONENTS Support Core CACHE STRING "LLVM components (llvm-config names)")
add_library(lcejit_llvm INTERFACE)
if(LCEJIT_STATIC_LLVM)
  llvm_map_components_to_libnames(_lcejit_llvm_libs ${LCEJIT_LLVM_COMPONENTS})
  target_link_libraries(lcejit_llvm INTERFACE ${_lcejit_llvm_libs})
  foreach(_t IN LISTS MLIR_EXPORTED_TARGETS)
    if(TARGET ${_t})
      get_target_property(_deps ${_t} INTERFACE_LINK_LIBRARIES)
      if(_deps)
        list(TRANSFORM _deps REPLACE "^LLVM$" lcejit_llvm)
        set_target_properties(${_t} PROPERTIES INTERFACE_LINK_LIBRARIES "${_deps}")
      endif()
    endif()
  endforeach()
  # LLVMSupport exports zstd::libzstd_shared (libzstd-dev is not installed) and libz3.so.
  find_library(LCEJIT_ZLIB NAMES libz.a z REQUIRED)
  find_library(LCEJIT_ZSTD NAMES libzstd.a libzstd.so.1 REQUIRED)
  set_property(TARGET LLVMSupport PROPERTY INTERFACE_LINK_LIBRARIES
    "rt;dl;m;${LCEJIT_ZLIB};${LCEJIT_ZSTD};LLVMDemangle")
else()
  target_link_libraries(lcejit_llvm INTERFACE LLVM)
endif()

add_library(lcejit_mlir INTERFACE)
target_include_directories(lcejit_mlir SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
target_compile_definitions(lcejit_mlir INTERFACE ${LCEJIT_LLVM_DEFS})
target_link_libraries(lcejit_mlir INTERFACE
  MLIROptLib MLIRFuncDialect MLIRArithDialect MLIRMathDialect MLIRParser MLIRPass
  MLIRTransforms MLIRTransformUtils MLIRAnalysis MLIRRewrite MLIRInferTypeOpInterface
  MLIRSideEffectInterfaces MLIRBytecodeOpInterface MLIRIR MLIRSupport lcejit_llvm)

# Debian ships no llvm-lit; lit lives in llvm-22-tools.
set(LCEJIT_LIT /usr/lib/llvm-22/bin/lit CACHE FILEPATH "lit executable")
set(LLVM_EXTERNAL_LIT ${LCEJIT_LIT} CACHE STRING "" FORCE)
