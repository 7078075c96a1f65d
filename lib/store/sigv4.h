// SPDX-License-Identifier: Apache-2.0
// Private: AWS Signature Version 4, as pure functions of (request, credentials, time): the
// canonical request, the string to sign, the signing key and signature, and the two forms a
// signed request takes -- headers (`Authorization`, `x-amz-date`, `x-amz-security-token`) and a
// presigned URL's query (`X-Amz-Algorithm` ... `X-Amz-Signature`). HMAC and SHA-256 are
// OpenSSL's (base/hash.h). No I/O, no clock: the caller passes the time.
//
// The secret key is an input only: nothing returned here contains it (the signature and the
// signing key derived from it are one-way).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tensorfetch::detail {

/// An access key, its secret and the session token of temporary credentials. A plain value;
/// never printed, logged or written anywhere (`source` and `access_key_id` may be).
struct AwsCredentials {
  std::string access_key_id;      ///< AKIA... / ASIA...; may be named in messages
  std::string secret_access_key;  ///< secret
  std::string session_token;      ///< secret; empty for long-term keys
  /// When temporary credentials stop working (seconds since the epoch); 0: never.
  std::int64_t expires_at = 0;
  /// Where they came from, for messages ("the environment (AWS_ACCESS_KEY_ID)", "profile
  /// 'dev' of the shared credentials file /home/u/.aws/credentials", ...). Never a secret.
  std::string source;
};

/// Name/value pairs in the order given (headers, query parameters): names may repeat.
using SigV4Pairs = std::vector<std::pair<std::string, std::string>>;

/// A request as SigV4 sees it. A plain value.
struct SigV4Request {
  std::string method = "GET";  ///< upper case
  /// The URI path exactly as sent, already percent-encoded (S3: each key segment encoded once,
  /// `/` kept; never normalized). Empty means `/`.
  std::string path;
  SigV4Pairs query;    ///< decoded names and values (encoded here, sorted by encoded name, then value)
  SigV4Pairs headers;  ///< the headers to sign, `host` included (names any case; values trimmed here)
  /// Hex sha256 of the body, or `UNSIGNED-PAYLOAD`.
  std::string payload_hash;
};

/// Who signs and for what: the credential scope's region and service. A plain value.
struct SigV4Scope {
  std::string region;   ///< us-east-1, ...
  std::string service;  ///< s3, sts, ...
};

/// Hex sha256 of an empty body.
inline constexpr std::string_view kEmptyPayloadHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// `YYYYMMDDTHHMMSSZ` of `unix_seconds` (UTC). Pure.
[[nodiscard]] std::string amz_date(std::int64_t unix_seconds);

/// The canonical request: method, path, sorted encoded query, canonical headers (lower-case
/// names, trimmed values with inner runs of spaces collapsed, repeats joined by `,`, sorted),
/// signed header names, payload hash; joined by newlines. Pure.
[[nodiscard]] std::string sigv4_canonical_request(const SigV4Request& request);

/// `host;range;x-amz-date`: the sorted lower-case names of `headers`. Pure.
[[nodiscard]] std::string sigv4_signed_headers(const SigV4Pairs& headers);

/// `DATE/REGION/SERVICE/aws4_request` for the day of `amz_date` (`YYYYMMDD...`). Pure.
[[nodiscard]] std::string sigv4_credential_scope(std::string_view amz_date, const SigV4Scope& scope);

/// `AWS4-HMAC-SHA256\nAMZDATE\nSCOPE\nhex(sha256(canonical_request))`. Pure.
[[nodiscard]] std::string sigv4_string_to_sign(std::string_view canonical_request, std::string_view amz_date,
                                               const SigV4Scope& scope);

/// Hex HMAC-SHA256 of `string_to_sign` under the key derived from `secret` for the day of
/// `amz_date` and `scope` (kDate, kRegion, kService, kSigning). Pure.
[[nodiscard]] std::string sigv4_signature(std::string_view secret, std::string_view amz_date, const SigV4Scope& scope,
                                          std::string_view string_to_sign);

/// Header signing: the headers to add to `request` (its own `headers` plus these are what was
/// signed): `x-amz-date`, `x-amz-security-token` (temporary credentials) and `Authorization:
/// AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`. `request.headers` must
/// hold `host` (and, for S3, `x-amz-content-sha256` with the payload hash). Pure.
[[nodiscard]] SigV4Pairs sigv4_sign_headers(const SigV4Request& request, const AwsCredentials& credentials,
                                            const SigV4Scope& scope, std::int64_t unix_seconds);

/// Query signing (a presigned URL, valid `expires_seconds` from `unix_seconds`, 1 to 604800):
/// the encoded, sorted query string to put after `?` -- the request's own parameters plus
/// `X-Amz-Algorithm`, `X-Amz-Credential`, `X-Amz-Date`, `X-Amz-Expires`, `X-Amz-SignedHeaders`,
/// `X-Amz-Security-Token` (temporary credentials) and `X-Amz-Signature`. Signs the headers of
/// `request` (at least `host`) with payload `UNSIGNED-PAYLOAD` (S3's rule for presigned URLs)
/// unless `request.payload_hash` is set. Pure.
[[nodiscard]] std::string sigv4_presign_query(SigV4Request request, const AwsCredentials& credentials,
                                              const SigV4Scope& scope, std::int64_t unix_seconds,
                                              std::int64_t expires_seconds);

/// The canonical (encoded, sorted) query string of `query`. Pure.
[[nodiscard]] std::string sigv4_canonical_query(const SigV4Pairs& query);

}  // namespace tensorfetch::detail
