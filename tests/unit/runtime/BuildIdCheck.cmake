# ctest build-id.reproducible: the build id is a content hash ([Note: build id] in
# compiler/support/BuildId.h), so
#   1. hashing the listed sources again gives the id this build compiled in;
#   2. a copy of the sources under another root (another checkout, another build) gives
#      the same id;
#   3. one changed byte in one of them gives another id.
# Invoked as: cmake -DROOT= -DLIST= -DHEADER= -DSCRIPT= -DVERSION= -DWORK= -P BuildIdCheck.cmake
function(id_of root list out var)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${root} -DLIST=${list} -DVERSION=${VERSION}
                          -DOUT=${out} -P ${SCRIPT} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "BuildId.cmake failed (${rc}) for ${list}")
  endif()
  file(STRINGS ${out} line REGEX "^#define LCEJIT_BUILD_ID ")
  set(${var} "${line}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(STRINGS ${HEADER} built REGEX "^#define LCEJIT_BUILD_ID ")
id_of(${ROOT} ${LIST} ${WORK}/again.h again)
if(NOT again STREQUAL built)
  message(FATAL_ERROR "hashing the sources again gives '${again}', the build has '${built}' "
                      "(a source changed since the last build? rebuild and rerun)")
endif()

file(STRINGS ${LIST} files)
set(copies "")
foreach(f IN LISTS files)
  file(RELATIVE_PATH rel ${ROOT} ${f})
  get_filename_component(dir ${WORK}/tree/${rel} DIRECTORY)
  file(MAKE_DIRECTORY ${dir})
  file(COPY_FILE ${f} ${WORK}/tree/${rel})
  list(APPEND copies ${WORK}/tree/${rel})
endforeach()
string(REPLACE ";" "\n" text "${copies}")
file(WRITE ${WORK}/copies.txt "${text}\n")
id_of(${WORK}/tree ${WORK}/copies.txt ${WORK}/copy.h copy)
if(NOT copy STREQUAL built)
  message(FATAL_ERROR "the same sources under ${WORK}/tree give '${copy}', not '${built}'")
endif()

list(GET copies 0 victim)
file(APPEND ${victim} " ")
id_of(${WORK}/tree ${WORK}/copies.txt ${WORK}/changed.h changed)
if(changed STREQUAL built)
  message(FATAL_ERROR "one more byte in ${victim} left the id at '${changed}'")
endif()
list(LENGTH files n)
message(STATUS "build id ${built}: reproduced from ${n} files, relocated, changed by one byte")
file(REMOVE_RECURSE ${WORK})
