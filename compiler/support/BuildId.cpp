//===- BuildId.cpp - Identity of this lcejit build -------------------------===//

#include "compiler/support/BuildId.h"

#ifndef LCEJIT_BUILD_ID
#error "LCEJIT_BUILD_ID must be defined by the build (compiler/CMakeLists.txt)"
#endif

namespace lcejit {

std::string_view buildId() { return LCEJIT_BUILD_ID; }

} // namespace lcejit
