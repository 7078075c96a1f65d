// SPDX-License-Identifier: Apache-2.0
// Request parsing of the test server: route classification of a request target, percent
// decoding, the Range header, If-Match, and small text helpers. Pure functions, no state.
// Private to tools/hubserver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tensorfetch::testing::detail {

/// A request target, split into decoded segments, classified.
struct Route {
  std::string kind = "other";             ///< resolve, resolve_cache, cdn, api, admin, other
  std::string repo;                       ///< "org/name", "datasets/org/name"; legacy: "gpt2",
                                          ///< "datasets/squad"
  std::string repo_rel;                   ///< directory relative to the root
  std::vector<std::string> rev_segments;  ///< resolve: decoded segments after "resolve"
  std::string revision;                   ///< resolve: first guess (decoded segment); api: revision
  std::string file;                       ///< resolve: segments after the revision, joined
  std::string blob;                       ///< cdn: sha256
  std::string admin;                      ///< admin: command
  bool bad_repo_name = false;             ///< an org or name segment that cannot name a directory
  bool legacy_id = false;                 ///< the repo id has no org ("gpt2")
  bool dataset = false;                   ///< a dataset repo
  std::size_t repo_end = 0;               ///< offset in the raw target just past the repo id
};

/// Classifies a raw request target (path + query, still percent-encoded).
Route classify(std::string_view target);

/// Splits a raw path at '/' (a leading '/' dropped) and percent-decodes each segment; `ends`,
/// if given, receives the raw offset just past each segment.
std::vector<std::string> split_path(std::string_view raw_path,
                                    std::vector<std::size_t>* ends = nullptr);
/// Percent-encodes everything but RFC 3986 unreserved characters (and '/' if keep_slash).
std::string pct_encode(std::string_view s, bool keep_slash);
/// Joins v[from, to) with `sep`.
std::string join(const std::vector<std::string>& v, std::size_t from, std::size_t to,
                 char sep = '/');
/// Percent-decodes one path segment; invalid escapes stay literal.
std::string pct_decode(std::string_view s);
/// `s` without leading and trailing white space.
std::string trim(std::string_view s);
/// A Host header without its port ("[::1]:80" → "[::1]").
std::string strip_port(std::string_view host);
/// 40 lower-case hex digits (a commit sha).
bool is_hex40(std::string_view s);
/// A decimal without sign, at most 19 digits.
std::optional<std::uint64_t> parse_u64(std::string_view s);

/// A `Range` header parsed against a size.
struct RangeSpec {
  enum Kind { None, Ok, Unsatisfiable } kind = None;
  std::uint64_t first = 0, last = 0;  ///< inclusive, when Ok
};
/// Single "bytes=a-b", "bytes=a-", "bytes=-n"; anything else (several ranges, other units,
/// garbage) is None (answered 200), as RFC 9110 allows.
RangeSpec parse_range(std::string_view header, std::uint64_t size);

/// Whether an If-Match header (a list, `*`, W/ prefixes) matches `etag` (quoted).
bool etag_matches(std::string_view header, std::string_view etag);

/// Milliseconds since the Unix epoch (CDN URL expiry).
std::int64_t epoch_ms();

}  // namespace tensorfetch::testing::detail
