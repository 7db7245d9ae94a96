# Every dynamic symbol liblcejit.so defines is part of the public API (ops/lcejit.map):
# no LLVM, MLIR, fmt or lcejit-internal symbol leaks into the processes that load it.
execute_process(COMMAND nm -D --defined-only --demangle ${LIB}
  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -D failed on ${LIB}")
endif()
string(REPLACE "\n" ";" lines "${out}")
set(count 0)
set(bad "")
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  # "<address> <type> <name>"; the version node LCEJIT_0 shows as an absolute symbol.
  string(REGEX REPLACE "^[0-9a-f]+ [A-Za-z] " "" name "${line}")
  string(REGEX REPLACE "@@?LCEJIT_0$" "" name "${name}")
  if(name STREQUAL "LCEJIT_0")
    continue()
  endif()
  math(EXPR count "${count} + 1")
  if(NOT name MATCHES "^lcejit_[a-z_]+$"
     AND NOT name MATCHES "^lcejit::LinearCrossEntropy::"
     AND NOT name MATCHES "^lcejit::(errorKindName|dtypeSize|isFloat|isInteger|dtypeName|parseDType)\\("
     AND NOT name MATCHES "^(typeinfo|typeinfo name|vtable) for lcejit::Error$")
    list(APPEND bad "${name}")
  endif()
endforeach()
if(bad)
  list(LENGTH bad nbad)
  list(SUBLIST bad 0 20 shown)
  string(REPLACE ";" "\n  " shown "${shown}")
  message(FATAL_ERROR "${nbad} exported symbols outside the public API, e.g.:\n  ${shown}")
endif()
if(count LESS 20)
  message(FATAL_ERROR "only ${count} exported symbols: the public API is missing")
endif()
# The allowlist the other way round: every entry point of lcejit/lcejit.h (0.2.0) and the
# C++ calls with gradient accumulation must be exported.
set(required lcejit_version lcejit_last_error_message lcejit_last_error_kind
    lcejit_options_init lcejit_create lcejit_destroy lcejit_forward_backward lcejit_enqueue
    lcejit_forward_backward_scaled lcejit_enqueue_scaled lcejit_forward_backward_accumulate
    lcejit_enqueue_accumulate lcejit_forward lcejit_enqueue_forward
    lcejit_check_device_errors lcejit_prepare lcejit_workspace_bytes lcejit_set_workspace)
foreach(name IN LISTS required)
  if(NOT out MATCHES "[ \n]${name}(@@?LCEJIT_0)?\n")
    message(FATAL_ERROR "liblcejit.so does not export ${name}")
  endif()
endforeach()
foreach(call forwardBackward enqueue)
  if(NOT out MATCHES "lcejit::LinearCrossEntropy::${call}\\([^\n]*lcejit::Accumulate const&\\)")
    message(FATAL_ERROR "liblcejit.so does not export LinearCrossEntropy::${call} with "
                        "lcejit::Accumulate")
  endif()
endforeach()
message(STATUS "liblcejit.so exports ${count} symbols, all public API")
