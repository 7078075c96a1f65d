// SPDX-License-Identifier: Apache-2.0
// Private: small text helpers every layer shares: quoting names for messages, ASCII
// lower-casing, and percent-coding (RFC 3986). Percent-coding lives here, not in `net`,
// because the format layer (below net) must decode shard names to refuse `%2e%2e`. Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tensorfetch::detail {

/// Quotes a name for messages, escaping control characters: 'name' (at most 200 characters,
/// then "..."). Pure.
[[nodiscard]] std::string quote_name(std::string_view name);

/// Decodes each valid %XX escape once; malformed escapes are kept as they are. Pure.
[[nodiscard]] std::string percent_decode(std::string_view s);

/// Percent-encodes everything but RFC 3986 unreserved characters. Pure.
[[nodiscard]] std::string percent_encode(std::string_view s);

/// Percent-encodes each `/`-separated segment of a relative path (the slashes stay). Pure.
[[nodiscard]] std::string encode_path(std::string_view path);

/// Standard base64 (RFC 4648, `+/`, padded) of `bytes`. Pure.
[[nodiscard]] std::string base64_encode(std::string_view bytes);

/// The bytes of standard base64 `text` (padding optional, no whitespace); nullopt when `text` is
/// not base64. Pure.
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);

/// ASCII lower-case copy (header names, hosts, method names); other bytes unchanged. Pure.
[[nodiscard]] std::string ascii_lower(std::string_view s);

}  // namespace tensorfetch::detail
