// SPDX-License-Identifier: Apache-2.0
// Private: percent-decoding (RFC 3986), shared by shard-name checks and location parsing.
#pragma once

#include <string>
#include <string_view>

namespace tensorfetch::detail {

/// Decodes each valid %XX escape once; malformed escapes are kept as they are. Pure.
[[nodiscard]] std::string percent_decode(std::string_view s);

}  // namespace tensorfetch::detail
