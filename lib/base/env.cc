// SPDX-License-Identifier: Apache-2.0
#include "base/env.h"

#include <cstdlib>

namespace tensorfetch::detail {

EnvLookup process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

}  // namespace tensorfetch::detail
