//===- BuildId.h - Identity of this lcejit build ---------------------------===//
//
// The build id salts the disk kernel cache (runtime/DiskCache.h): a rebuilt lcejit must
// never reuse a cubin that an older build of the emitter produced. It comes from the
// compile definition LCEJIT_BUILD_ID that compiler/CMakeLists.txt sets on lcejit_support
// (version, git revision, configure time stamp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string_view>

namespace lcejit {

/// E.g. "0.1.0-1a2b3c4d5e6f-20261130120000". Never empty.
std::string_view buildId();

} // namespace lcejit
