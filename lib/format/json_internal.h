// SPDX-License-Identifier: Apache-2.0
// Private: strict JSON helpers shared by the header and index parsers (simdjson DOM).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "base/text.h"
#include "format/huge_pages.h"
#include "format/json_depth.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// A reusable strict JSON parser (simdjson DOM), refusing nesting deeper than kMaxJsonDepth
/// (so the walks over its documents, which recurse, stay within that). Its buffers, and a padded copy of the input,
/// are kept between calls and grown as needed; large ones are huge-page-advised. Not
/// thread-safe. Results stay valid until the next `parse`.
class JsonParser {
 public:
  /// Parses `bytes` as one JSON document. Errors are reported with `code`, prefixed by
  /// `what` ("header", "index"). When the caller guarantees `readable_after` >= 64 bytes of
  /// allocated memory after `bytes` (their content does not matter), the input is parsed in
  /// place; otherwise it is first copied into a padded buffer.
  [[nodiscard]] Result<simdjson::dom::element> parse(std::span<const std::byte> bytes,
                                                     ErrorCode code, std::string_view what,
                                                     std::size_t readable_after = 0);

 private:
  simdjson::dom::parser parser_;
  HugeBuffer padded_;
  std::size_t capacity_ = 0;
};

/// Refuses duplicate keys in `value` and in everything nested inside it. `where` names the
/// value in error messages (e.g. "tensor 'x'").
[[nodiscard]] Result<void> check_no_duplicate_keys(simdjson::dom::element value,
                                                   std::string_view where);

/// A non-negative JSON integer (no fraction, no exponent, no sign), or nothing.
[[nodiscard]] bool get_uint(simdjson::dom::element value, std::uint64_t& out) noexcept;

/// A short, printable rendering of a JSON value for error messages (at most ~60 chars).
[[nodiscard]] std::string excerpt(simdjson::dom::element value);

}  // namespace tensorfetch::detail
