# Installs the build into a fresh prefix, then builds examples/ against it twice, with
# find_package(lcejit) and with pkg-config, and runs what needs no GPU (inspect, the C
# ABI test) and train_step (which trains on a GPU, or says clearly that there is none).
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/lcejit/LinearCrossEntropy.h include/lcejit/lcejit.h bin/lcejit-dump
          lib/cmake/lcejit/lcejitConfig.cmake lib/cmake/lcejit/lcejitConfigVersion.cmake
          lib/pkgconfig/lcejit.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install has no ${f}")
  endif()
endforeach()
file(GLOB libs ${prefix}/lib/liblcejit.so*)
if(NOT libs)
  message(FATAL_ERROR "the install has no liblcejit.so")
endif()

# find_package(lcejit)
run(${CMAKE_COMMAND} -G ${GENERATOR} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/capi_test)
message(STATUS "${last_out}")
run(${WORK_DIR}/build/inspect 1000 64 1000 30)
foreach(want "run schedule: N = 1000" "decision: bucket" "lce_fwd0")
  string(FIND "${last_out}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "inspect printed no '${want}':\n${last_out}")
  endif()
endforeach()
# An lcejit::Error thrown inside liblcejit.so is caught as lcejit::Error by the consumer.
execute_process(COMMAND ${WORK_DIR}/build/inspect 10 0 10 RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${err}" "options.hidden (D) must be positive, got 0" at)
if(NOT rc EQUAL 1 OR at EQUAL -1)
  message(FATAL_ERROR "inspect with D = 0: exit ${rc}, stderr:\n${err}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/train_step RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(rc EQUAL 3)
  string(FIND "${err}" "no usable GPU" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "train_step exited 3 without saying why:\n${err}")
  endif()
  message(STATUS "train_step without a GPU: ${err}")
elseif(rc EQUAL 0)
  string(FIND "${out}" "loss fell" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "train_step exited 0 without a falling loss:\n${out}")
  endif()
  message(STATUS "train_step on the GPU:\n${out}")
else()
  message(FATAL_ERROR "train_step failed (${rc}):\n${out}\n${err}")
endif()

# pkg-config: compile the C test by hand with the flags the .pc file gives.
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
run(pkg-config --cflags --libs lcejit)
string(STRIP "${last_out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CC} -std=c11 -Wall -Wextra -pedantic -Werror ${SOURCE_DIR}/examples/capi_test.c ${flags}
    -Wl,-rpath,${prefix}/lib -o ${WORK_DIR}/capi_test_pkgconfig)
run(${WORK_DIR}/capi_test_pkgconfig)
message(STATUS "the package installs and builds its consumers")
