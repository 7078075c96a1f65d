// SPDX-License-Identifier: Apache-2.0
// Private: what the Hub's error responses mean, as huggingface_hub reads them, turned into
// errors that say what is wrong and what to do. Pure; no I/O.
//
//   X-Error-Code: RepoNotFound     401 anonymous (missing or private), 404 with a token
//   X-Error-Code: RevisionNotFound 404
//   X-Error-Code: EntryNotFound    404 (the repo and revision exist; the file does not)
//   X-Error-Code: GatedRepo        401 anonymous, 403 with a token of an account without access
//   X-Error-Message: "Invalid credentials in Authorization header"   401: the token is bad
//   X-Error-Message: "Access to this resource is disabled."          403: a disabled repo
//   429 + RateLimit: "resolvers";r=0;t=SECONDS (+ RateLimit-Policy "fixed window";...;q=N;w=S)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "net/http_client.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// The IETF draft `RateLimit` / `RateLimit-Policy` headers as the Hub sends them.
struct RateLimitInfo {
  std::string bucket;                   ///< e.g. "resolvers", "api" ("" if not named)
  std::optional<std::uint64_t> remaining;  ///< r: requests left in the window
  std::optional<std::uint64_t> reset_s;    ///< t: seconds until the window resets
  std::optional<std::uint64_t> quota;      ///< q (policy): requests per window
  std::optional<std::uint64_t> window_s;   ///< w (policy): window length in seconds
};

/// Parses `RateLimit` (e.g. `"resolvers";r=0;t=258`) and, if given, `RateLimit-Policy`
/// (e.g. `"fixed window";"resolvers";q=3000;w=300`). Nullopt when `ratelimit` has neither
/// r nor t.
[[nodiscard]] std::optional<RateLimitInfo> parse_rate_limit(std::string_view ratelimit,
                                                            std::string_view policy = {});

/// "(0 of 3000 requests left in the 300 s "resolvers" window, which resets in 258 s)".
[[nodiscard]] std::string describe_rate_limit(const RateLimitInfo& info);

/// A non-success response from the Hub (or its CDN), as far as errors are concerned.
struct HubReply {
  long status = 0;
  std::string url;                  ///< the URL that answered
  std::string error_code;           ///< X-Error-Code
  std::string error_message;        ///< X-Error-Message
  std::string ratelimit;            ///< RateLimit
  std::string ratelimit_policy;     ///< RateLimit-Policy
  int attempts = 1;                 ///< tries made (1 + retries)
};

/// What was being asked for, for the message.
struct HubAsk {
  std::string repo;          ///< "org/name" or "dataset org/name" ("" for a plain URL)
  std::string revision;      ///< as given
  std::string what;          ///< the file (repo path) or "config.json", ...
  std::string endpoint;      ///< e.g. https://huggingface.co (for "accept its conditions at ...")
  std::string repo_path;     ///< "org/name" or "datasets/org/name" in URLs ("" for a plain URL)
  std::string token_source;  ///< where the token came from; "" = no token was sent
};

/// The error for a non-success reply: its code (RemoteNotFound, Unauthorized, RateLimited,
/// Network or BadResponse: all exit 3) and a message naming the repo, revision, file, URL and
/// what to do.
[[nodiscard]] Error hub_error(const HubReply& reply, const HubAsk& ask);

/// True when the reply decides the whole open at once (the repo, revision or access is
/// wrong, or the server refuses service): no point asking for other files.
[[nodiscard]] bool hub_error_is_final(const HubReply& reply) noexcept;

/// What a server said when it asked for a wait: its rate limit described from the `RateLimit` /
/// `RateLimit-Policy` headers ("(0 of 3000 requests left ...)"), else "(Retry-After: N)", else
/// "". The public `ServerWait::detail`.
[[nodiscard]] std::string describe_wait(const HttpWait& wait);

/// True when `s` is a commit id: exactly 40 lower-case hex digits.
[[nodiscard]] bool is_commit_id(std::string_view s) noexcept;

/// True when `s` is a sha256: exactly 64 lower-case hex digits.
[[nodiscard]] bool is_sha256_hex(std::string_view s) noexcept;

}  // namespace tensorfetch::detail
