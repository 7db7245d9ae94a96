# lcejit_embed_files(<target> <namespace> <files...>)
#
# Turns real source files (the device helpers under runtime/device/*.cuh) into a C++
# translation unit that defines `lcejit::embedded::files()`, a list of {name, text}.
# The files stay ordinary headers: nvcc compiles them on their own in a unit test, and the
# emitter prepends their text to every generated kernel.
set(LCEJIT_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/EmbedScript.cmake)

function(lcejit_embed_files target)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${target}_embedded.cpp)
  set(abs_files)
  foreach(f ${ARGN})
    get_filename_component(af ${f} ABSOLUTE)
    list(APPEND abs_files ${af})
  endforeach()
  string(REPLACE ";" "|" file_arg "${abs_files}")
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} "-DFILES=${file_arg}" -P ${LCEJIT_EMBED_SCRIPT}
    DEPENDS ${abs_files} ${LCEJIT_EMBED_SCRIPT}
    COMMENT "Embedding device headers for ${target}"
    VERBATIM) # quotes the "a|b|c" file list for the shell
  add_library(${target} STATIC ${out})
endfunction()
