// SPDX-License-Identifier: Apache-2.0
// Private: the nesting limit of every JSON document the library reads, and a nlohmann::json
// parse that keeps to it (for the cache's meta.json and the snapshot manifests). The simdjson
// readers (headers, indexes, config.json, --tp-rules) apply the same limit themselves.
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// The deepest nesting of arrays and objects accepted in any JSON document: the reference
/// parser's (serde_json's recursion limit of 128). The outermost array or object is level 1, so
/// `[[1]]` is 2 levels deep. Deeper documents are refused before anything walks them, so no
/// reader of the library recurses more than this.
inline constexpr std::size_t kMaxJsonDepth = 128;

/// Parses `text` as one strict JSON document (no comments, nothing after it) with
/// nlohmann::json, refusing nesting deeper than kMaxJsonDepth while parsing (the parser keeps
/// its own stack; nothing recurses). Errors have `code` and a message starting with `what`
/// (the file's name) that says why, e.g. the limit.
[[nodiscard]] Result<nlohmann::json> parse_json(std::string_view text, ErrorCode code, std::string_view what);

}  // namespace tensorfetch::detail
