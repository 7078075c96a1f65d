// SPDX-License-Identifier: Apache-2.0
// Private: what the Hub's response headers say about a file. A `/resolve/` request answers
// with these on the redirect to the CDN (or on the final response of a small file):
//
//   X-Repo-Commit   the commit the revision resolved to (40 lower-case hex digits)
//   X-Linked-Etag   "<sha256>" of an LFS/Xet file (the CDN's own ETag is NOT the sha256)
//   X-Linked-Size   the file's size in bytes
//
// Each is read from the final response first, then from the redirect hops, last hop first.
// Pure; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "net/http_client.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// A header (lower-case `name`) of the final response or, failing that, of a redirect hop
/// (the last one first); "" when none carries it.
[[nodiscard]] std::string find_header(const HttpResponse& response, std::string_view name);

/// What one response chain says about the file it served. A plain value.
struct HubFileFacts {
  std::string commit;       ///< X-Repo-Commit, checked to be a commit id ("" = not named)
  std::string linked_etag;  ///< X-Linked-Etag as sent, quotes included ("" = not named)
  std::string linked_size;  ///< X-Linked-Size as sent ("" = not named)

  /// X-Linked-Size as a number (nullopt when not named).
  [[nodiscard]] std::optional<std::uint64_t> size() const;
};

/// The facts of `response`. `BadResponse` naming `what` and the URL when the commit it names is
/// not a commit id (40 lower-case hex digits): such a string is never used anywhere.
[[nodiscard]] Result<HubFileFacts> hub_file_facts(const HttpResponse& response, const std::string& what);

}  // namespace tensorfetch::detail
