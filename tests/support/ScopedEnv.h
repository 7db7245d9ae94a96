//===- ScopedEnv.h - Environment variables (and the knobs) for one scope ----===//
//
// Shared by the unit tests and the GPU suite.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/support/Knobs.h"

#include <cstdlib>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace lcejit::testing {

/// Sets (or, with std::nullopt, unsets) environment variables for one scope, reloads the
/// knobs, and restores the previous values (and reloads again) at scope exit.
class ScopedEnv {
public:
  ScopedEnv() = default;
  ScopedEnv(std::initializer_list<std::pair<const char *, std::optional<std::string>>> vars) {
    for (const auto &[name, value] : vars)
      set(name, value);
  }
  ~ScopedEnv() {
    for (const auto &[name, old] : saved_) {
      if (old)
        ::setenv(name.c_str(), old->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
    knobs::reloadForTesting();
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

  void set(const std::string &name, const std::optional<std::string> &value) {
    if (!saved_.count(name)) {
      const char *old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
    knobs::reloadForTesting();
  }

private:
  std::map<std::string, std::optional<std::string>> saved_;
};

} // namespace lcejit::testing
