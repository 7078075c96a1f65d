// SPDX-License-Identifier: Apache-2.0
// Private: small text helpers shared by the format, hub and net layers: percent-decoding
// (RFC 3986) and ASCII lower-casing.
#pragma once

#include <string>
#include <string_view>

namespace tensorfetch::detail {

/// Decodes each valid %XX escape once; malformed escapes are kept as they are. Pure.
[[nodiscard]] std::string percent_decode(std::string_view s);

/// ASCII lower-case copy (header names, hosts, method names); other bytes unchanged. Pure.
[[nodiscard]] std::string ascii_lower(std::string_view s);

}  // namespace tensorfetch::detail
