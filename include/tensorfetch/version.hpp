// SPDX-License-Identifier: Apache-2.0
/// @file
/// Library version.
#pragma once

#include "tensorfetch/export.hpp"

namespace tensorfetch {

/// The library's version string, e.g. "0.1.0".
[[nodiscard]] TENSORFETCH_API const char* version() noexcept;

}  // namespace tensorfetch
