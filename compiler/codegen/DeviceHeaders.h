//===- DeviceHeaders.h - The device-helper prelude of generated modules
//----===//
//
// [Note: prelude] NVRTC gets one source string and no files, so the device
// helpers (runtime/device/*.cuh, embedded at build time) are prepended as text.
// They include each other with `#include "lcejit_x.cuh"` so nvcc can compile
// each on its own; here every file is placed after the files it includes (a
// depth-first order, ties by name), its local includes and `#pragma once` are
// turned into comments, and each file is framed by begin/end marker lines so a
// dump shows where helper code ends. They include no system header ([Note: no
// system headers] in lcejit_common.cuh).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace lcejit::codegen {

/// The embedded device headers in prelude order (names only).
std::vector<std::string> deviceHeaderOrder();

/// The prelude text (deterministic: a function of the embedded files only).
const std::string &deviceHeaderPrelude();

/// XXH3-128 (hex) of the embedded device headers' names and bytes, in name order: the
/// identity of the helpers every emitted module was built with. Part of the disk cache
/// key (runtime/DiskCache.h, [Note: cache keys]).
const std::string &deviceHeaderHash();

} // namespace lcejit::codegen
