# Compiles one runtime/device/*.cuh on its own with nvcc (CRAFT.md item 10).
# Invoked as: cmake -DNVCC=<nvcc> -DHEADER=<file.cuh> -DWORK_DIR=<dir> -P CompileDeviceHeader.cmake
get_filename_component(name ${HEADER} NAME_WE)
file(MAKE_DIRECTORY ${WORK_DIR})
set(cu ${WORK_DIR}/${name}.cu)
file(WRITE ${cu} "// Checks that ${name}.cuh compiles on its own.\n#include \"${HEADER}\"\n")
execute_process(
  COMMAND ${NVCC} -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror all-warnings
          -c ${cu} -o ${WORK_DIR}/${name}.o
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nvcc failed on ${HEADER} (exit ${rc}):\n${out}\n${err}")
endif()
message(STATUS "${name}.cuh compiles on its own")
