// SPDX-License-Identifier: Apache-2.0
// Private: strict JSON helpers shared by the header and index parsers (simdjson DOM).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// Parses `bytes` as one JSON document with `parser` (which owns the result). Errors are
/// reported with `code`, prefixed by `what` ("header", "index").
[[nodiscard]] Result<simdjson::dom::element> parse_json(simdjson::dom::parser& parser,
                                                        std::span<const std::byte> bytes,
                                                        ErrorCode code, std::string_view what);

/// Refuses duplicate keys in `value` and in everything nested inside it. `where` names the
/// value in error messages (e.g. "tensor 'x'").
[[nodiscard]] Result<void> check_no_duplicate_keys(simdjson::dom::element value,
                                                   std::string_view where);

/// A non-negative JSON integer (no fraction, no exponent, no sign), or nothing.
[[nodiscard]] bool get_uint(simdjson::dom::element value, std::uint64_t& out) noexcept;

/// A short, printable rendering of a JSON value for error messages (at most ~60 chars).
[[nodiscard]] std::string excerpt(simdjson::dom::element value);

/// Quotes a name for messages, escaping control characters: 'name'.
[[nodiscard]] std::string quote_name(std::string_view name);

}  // namespace tensorfetch::detail
