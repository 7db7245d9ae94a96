# liblcejit.so needs only the C/C++ runtime and NVRTC: never libcuda (loaded with dlopen,
# so the library loads without a GPU) and never LLVM/MLIR (linked inside).
execute_process(COMMAND readelf -d ${LIB} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d failed on ${LIB}")
endif()
string(REGEX MATCHALL "Shared library: \\[[^]]+\\]" needed "${out}")
set(names "")
foreach(n IN LISTS needed)
  string(REGEX REPLACE "Shared library: \\[([^]]+)\\]" "\\1" lib "${n}")
  list(APPEND names "${lib}")
  # ld-linux: glibc's dynamic loader (thread_local storage of the C ABI's last error).
  if(NOT lib MATCHES "^(libc|libstdc\\+\\+|libm|libgcc_s|libnvrtc)\\.so"
     AND NOT lib MATCHES "^ld-linux-x86-64\\.so")
    message(FATAL_ERROR "liblcejit.so needs ${lib}, which is not allowed (allowed: libc and "
                        "its loader, libstdc++, libm, libgcc_s, libnvrtc)")
  endif()
endforeach()
if(NOT names MATCHES "libnvrtc")
  message(FATAL_ERROR "liblcejit.so does not need libnvrtc: ${names}")
endif()
message(STATUS "liblcejit.so NEEDED: ${names}")
