// SPDX-License-Identifier: Apache-2.0
// Private: the process environment as the layers read it: through a lookup function, so that
// tests hand each reader the variables they mean (and nothing of the test machine's own).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace tensorfetch::detail {

/// Looks an environment variable up: its value, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

/// The process environment (`std::getenv`).
[[nodiscard]] EnvLookup process_environment();

}  // namespace tensorfetch::detail
