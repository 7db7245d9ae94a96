//===- Embedded.h - Device headers embedded at build time
//------------------===//
//
// The device helpers under runtime/device/*.cuh are real headers (nvcc compiles
// each on its own in a unit test). At build time cmake/EmbedScript.cmake turns
// them into a C++ translation unit that defines files() below (library
// lcejit_device_headers); the emitter prepends their text to every generated
// CUDA module (DeviceHeaders.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <vector>

namespace lcejit::embedded {

struct EmbeddedFile {
  const char *name; ///< file name without directory, e.g. "lcejit_common.cuh"
  const char *text; ///< the whole file
};

/// Every embedded file, sorted by name (the glob order of the build).
const std::vector<EmbeddedFile> &files();

} // namespace lcejit::embedded
