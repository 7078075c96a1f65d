// SPDX-License-Identifier: Apache-2.0
// Private: what the layers above see of an object store's request signing. Every store hands
// the data plane self-authorizing URLs (S3: SigV4 query signing; Azure: a SAS), so the fetcher,
// `get --plan` and the mount send plain GETs; only an object's plain URL (no query) is kept in
// blob identities, snapshots and messages, and `redact_signed_urls` takes any signature out of a
// message that might hold one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// Turns a store's plain URLs (an object, a listing) into URLs another program can fetch with
/// no credentials. Implementations are thread-safe and hold their secrets privately: nothing
/// they return but the signed URL carries one.
class UrlSigner {
 public:
  virtual ~UrlSigner() = default;

  /// `url` signed at `now` (seconds since the epoch), valid `expires_seconds`; unchanged when
  /// the requests are anonymous. Fails when no credentials can be had.
  [[nodiscard]] virtual Result<std::string> presign(std::string_view url, std::int64_t now,
                                                    std::int64_t expires_seconds) const = 0;

  /// Where the credentials came from, for messages ("" when anonymous). Never a secret.
  [[nodiscard]] virtual std::string credentials_source(std::int64_t now) const = 0;

  /// When a URL signed at `now` for `expires_seconds` stops working (seconds since the epoch);
  /// 0 when it does not expire (anonymous requests).
  [[nodiscard]] virtual std::int64_t expires_at(std::int64_t now, std::int64_t expires_seconds) const = 0;
};

/// Seconds since the epoch now (the signers' clock).
[[nodiscard]] std::int64_t unix_now();

/// `url` without its query and fragment. Pure.
[[nodiscard]] std::string without_query(std::string_view url);

/// `text` with the query of every signed URL in it removed (from the `?` before an `X-Amz-`
/// parameter -- S3 -- or a `sig=` parameter -- an Azure SAS -- to the end of the URL), so that no
/// session token or signature reaches a message. Pure.
[[nodiscard]] std::string redact_signed_urls(std::string_view text);

}  // namespace tensorfetch::detail
