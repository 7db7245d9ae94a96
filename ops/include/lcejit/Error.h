//===- lcejit/Error.h - The one exception type of the public API -----------===//
//
// Every failure that reaches a user is an lcejit::Error. Its kind says who is at fault:
// the caller (InvalidArgument: the message names the argument and its value), the
// environment (NoDevice, Unsupported, Cuda, Nvrtc), the data (DeviceCheck: a check run on
// the device, such as a target outside [0, V), failed), or lcejit itself (Internal).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <stdexcept>
#include <string>

namespace lcejit {

enum class ErrorKind {
  InvalidArgument, ///< Bad input: the message names the argument and its value.
  Unsupported,     ///< Valid request this build or this GPU cannot serve.
  NoDevice,        ///< No CUDA driver or no GPU.
  Cuda,            ///< A CUDA Driver API call failed (the message has the error name).
  Nvrtc,           ///< NVRTC failed (the message has the log and the source path).
  Cache,           ///< The kernel cache refused a compile (LCEJIT_ASSERT_NO_COMPILE=1).
  DeviceCheck,     ///< A check evaluated on the device failed (bad target value, ...).
  Internal,        ///< A broken invariant inside lcejit: a bug, please report it.
};

const char *errorKindName(ErrorKind kind);

class Error : public std::runtime_error {
public:
  Error(ErrorKind kind, const std::string &message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

private:
  ErrorKind kind_;
};

} // namespace lcejit
