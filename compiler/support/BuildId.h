//===- BuildId.h - Identity of this lcejit build ---------------------------===//
//
// The build id salts the disk kernel cache (runtime/DiskCache.h): a changed lcejit must
// never reuse a cubin that another version of the emitter, the NVRTC driver code or the
// cache format produced.
//
// [Note: build id] The id is "<project version>-src.<16 hex>", the hex being the first
// digits of a SHA-256 over the sources that decide the generated code or how it is
// compiled and cached: compiler/** (.cpp, .h, .td, .cmake, CMakeLists.txt), the device
// headers runtime/device/*.cuh, runtime/{Nvrtc,DiskCache,KernelCache}.{h,cpp} and the
// embedding scripts (cmake/LcejitEmbed.cmake, cmake/EmbedScript.cmake). Each file enters
// as its path relative to the source root and the SHA-256 of its bytes, sorted by path.
// compiler/support/BuildId.cmake computes it at build time (a custom command that
// depends on every input and rewrites the generated header only when the id changes), so:
//   - two builds of one tree (other build directory, other day, a reconfigure) share one
//     id, and with it the disk cache;
//   - any edit to one of those files changes the id (the next build recompiles
//     BuildId.cpp), even without a commit.
// There is no time stamp and no git revision in it. Files outside the list (docs, tests,
// tools, ops/) do not change the id: what they change reaches the cache through the CUDA
// source, which is itself part of the key.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string_view>

namespace lcejit {

/// E.g. "0.1.0-src.1a2b3c4d5e6f7a8b". Never empty; the same for two builds of one tree.
std::string_view buildId();

/// How many source files the build id hashes (for tests and `--version` style output).
int buildIdFileCount();

} // namespace lcejit
