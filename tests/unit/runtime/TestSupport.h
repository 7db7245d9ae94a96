//===- TestSupport.h - Helpers for the runtime unit tests ------------------===//
#pragma once

#include "compiler/support/Knobs.h"
#include "tests/support/ScopedEnv.h"
#include "lcejit/Error.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>

namespace lcejit::testing {

/// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lcejit-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::filesystem::path &path() const { return path_; }

private:
  std::filesystem::path path_;
};

/// A line of CUDA that makes the PTX of a source unique to this call. With a CUDA driver
/// present NVRTC reuses the driver's compute cache (keyed on the PTX) and then reports
/// no ptxas lines (see [Note: compute cache] in runtime/Nvrtc.h); tests that check the
/// ptxas report compile PTX that no earlier run has compiled. A comment would not do:
/// it does not reach the PTX.
inline std::string uniqueSourceTag() {
  static std::random_device rd;
  static int counter = 0;
  return "__device__ unsigned long long lcejit_test_nonce" + std::to_string(counter++) +
         " = " + std::to_string(rd()) + "ull * 4294967296ull + " + std::to_string(rd()) +
         "ull;\n";
}

/// Runs `f`, expects it to throw lcejit::Error of `kind`, and returns the message.
template <typename F> std::string expectError(ErrorKind kind, F &&f) {
  try {
    f();
  } catch (const Error &e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind))
        << "wrong kind " << errorKindName(e.kind()) << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected lcejit::Error(" << errorKindName(kind) << "), nothing thrown";
  return "";
}

} // namespace lcejit::testing
