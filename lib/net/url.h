// SPDX-License-Identifier: Apache-2.0
// Private: URLs as the HTTP client and the layers above take them apart and put them
// together (percent-coding itself is base/text.h). Pure.
#pragma once

#include <string>
#include <string_view>

namespace tensorfetch::detail {

/// The URL of `relative` (a shard named by an index) next to `base_url` (the index's URL):
/// the base's directory (query and fragment dropped) plus the encoded relative path.
[[nodiscard]] std::string sibling_url(std::string_view base_url, std::string_view relative);

/// The scheme://host[:port] of a URL, lower-cased host; empty if it has none.
[[nodiscard]] std::string url_authority(std::string_view url);

}  // namespace tensorfetch::detail
