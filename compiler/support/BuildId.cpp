//===- BuildId.cpp - Identity of this lcejit build -------------------------===//

#include "compiler/support/BuildId.h"

// Generated at build time by compiler/support/BuildId.cmake (see [Note: build id]).
#include "compiler/support/BuildIdValue.h"

#ifndef LCEJIT_BUILD_ID
#error "LCEJIT_BUILD_ID must be defined by the generated BuildIdValue.h"
#endif

namespace lcejit {

std::string_view buildId() { return LCEJIT_BUILD_ID; }

int buildIdFileCount() { return LCEJIT_BUILD_ID_FILES; }

} // namespace lcejit
