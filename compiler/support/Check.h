//===- Check.h - User-error and invariant checks --------------------------===//
//
// Two tiers (see docs/architecture.md):
//  - LCEJIT_CHECK_ARG: the caller passed something bad. The message names the argument
//    and its value. Throws lcejit::Error(InvalidArgument).
//  - LCEJIT_CHECK: an internal invariant. Never compiled out (no assert()), throws
//    lcejit::Error(Internal) with file and line.
// MLIR code does not throw: it returns LogicalResult / emitOpError (MLIR builds with
// -fno-exceptions); these macros are for the plain C++ layers (plan, codegen, runtime, ops).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit/Error.h"

#include <fmt/format.h>

namespace lcejit {
[[noreturn]] void throwError(ErrorKind kind, const std::string &message);
} // namespace lcejit

#define LCEJIT_CHECK_ARG(cond, ...)                                            \
  do {                                                                         \
    if (!(cond))                                                               \
      ::lcejit::throwError(::lcejit::ErrorKind::InvalidArgument,               \
                           ::fmt::format(__VA_ARGS__));                        \
  } while (0)

#define LCEJIT_THROW(kind, ...)                                                \
  ::lcejit::throwError(::lcejit::ErrorKind::kind, ::fmt::format(__VA_ARGS__))

#define LCEJIT_CHECK(cond, ...)                                                \
  do {                                                                         \
    if (!(cond))                                                               \
      ::lcejit::throwError(                                                    \
          ::lcejit::ErrorKind::Internal,                                       \
          ::fmt::format("internal error at {}:{}: {} ({})", __FILE__,          \
                        __LINE__, ::fmt::format(__VA_ARGS__), #cond));         \
  } while (0)
