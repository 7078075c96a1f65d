// SPDX-License-Identifier: Apache-2.0
// Private: S3 (and compatibles: MinIO, R2, Ceph, s3rver) as tensorfetch reads it. Locations
// `s3://BUCKET/KEY` and `s3://BUCKET/PREFIX/`; the region and endpoint as the AWS SDKs find
// them; object and ListObjectsV2 URLs (virtual-hosted on AWS, path-style elsewhere); every
// request presigned (SigV4 query form), so the data plane sends plain GETs; ListObjectsV2
// answers read with expat; S3's error codes mapped to tensorfetch's kinds, S3's words kept.
//
// Why presigned URLs for everything: the data plane (libcurl multi, retries, resumes, If-Match)
// then needs no per-request signing hook, `get --plan` hands out URLs another program can fetch
// with no credentials, and a URL is signed afresh (from the credential chain, which refreshes
// temporary credentials) for every open and every fetch. Only the object's plain URL (no query)
// is kept: in the cache's blob identity, snapshots and messages; a signed URL appears nowhere the
// project writes (see `redact_signed_urls`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "store/aws_credentials.h"
#include "store/url_signer.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// `s3://BUCKET/KEY` (an object) or `s3://BUCKET/PREFIX/` / `s3://BUCKET` (a directory). A
/// plain value.
struct S3Location {
  std::string bucket;  ///< DNS-style bucket name
  std::string key;     ///< object key or prefix (decoded; may be empty: the bucket's root)
  /// Read as a directory: the key is empty or ends with `/`.
  [[nodiscard]] bool is_prefix() const noexcept { return key.empty() || key.ends_with('/'); }
};

/// Parses `s3://BUCKET[/KEY]`. `InvalidArgument` naming the location: an invalid bucket name
/// (3-63 of `a-z0-9.-`, starting and ending with a letter or digit), a key with a control
/// character or a `.`/`..` segment. Pure.
[[nodiscard]] Result<S3Location> parse_s3_location(std::string_view text);

/// How to reach S3: region, endpoint, addressing, and whether to sign. A plain value.
struct S3Endpoint {
  std::string region = "us-east-1";  ///< AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`
  /// scheme://host[:port], no trailing slash. Default: https://s3.REGION.amazonaws.com.
  std::string endpoint;
  std::string endpoint_source;  ///< where the endpoint came from (messages); "" = AWS's default
  /// Path-style (`ENDPOINT/BUCKET/KEY`): any endpoint but AWS's own, or a bucket with a dot.
  /// Else virtual-hosted (`https://BUCKET.s3.REGION.amazonaws.com/KEY`).
  bool path_style = false;
  bool anonymous = false;  ///< --no-sign-request: send unsigned requests
};

/// Settings an open may give (they win over the environment). A plain value.
struct S3Options {
  std::string endpoint;          ///< e.g. http://127.0.0.1:9000 ("" = from the environment)
  bool no_sign_request = false;  ///< anonymous (public buckets)
};

/// The endpoint: `options.endpoint`, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else the
/// profile's `s3.endpoint_url` or `endpoint_url`, else AWS's; the region from AWS_REGION,
/// AWS_DEFAULT_REGION or the profile (default us-east-1). `profile` is the profile's settings
/// (`AwsSharedFiles::settings`). `InvalidArgument` for an endpoint that is not an http(s) URL.
[[nodiscard]] Result<S3Endpoint> resolve_s3_endpoint(const EnvLookup& env,
                                                     const std::map<std::string, std::string>& profile,
                                                     const S3Options& options);

/// The object's plain URL (no query): the key's segments percent-encoded, `/` kept. Pure.
[[nodiscard]] std::string s3_object_url(const S3Endpoint& endpoint, std::string_view bucket, std::string_view key);

/// The plain ListObjectsV2 URL of `prefix` (delimiter `/`), continuing at `continuation` when
/// not empty. Pure.
[[nodiscard]] std::string s3_list_url(const S3Endpoint& endpoint, std::string_view bucket, std::string_view prefix,
                                      std::string_view continuation);

/// Signs plain S3 URLs into presigned ones. Thread-safe (the chain is).
class S3Signer final : public UrlSigner {
 public:
  /// Signs for `endpoint` with credentials from `chain` (null or `endpoint.anonymous`: unsigned).
  S3Signer(S3Endpoint endpoint, std::shared_ptr<CredentialChain> chain);

  /// `url` (an http(s) URL, its query decoded into parameters) presigned at `now` for
  /// `expires_seconds`; unchanged when anonymous. Fails only when no credentials are found.
  [[nodiscard]] Result<std::string> presign(std::string_view url, std::int64_t now,
                                            std::int64_t expires_seconds) const override;

  /// "the access key AKID... from SOURCE" ("" when none were found, or anonymous), for messages.
  [[nodiscard]] std::string credentials_source(std::int64_t now) const override;

  /// `now + expires_seconds`, or 0 when anonymous (an unsigned URL does not expire).
  [[nodiscard]] std::int64_t expires_at(std::int64_t now, std::int64_t expires_seconds) const override {
    return endpoint_.anonymous || !chain_ ? 0 : now + expires_seconds;
  }

  /// The endpoint settings.
  [[nodiscard]] const S3Endpoint& endpoint() const noexcept { return endpoint_; }

  /// A signer for the same store and credentials in `region` (AWS's own endpoint follows the
  /// region: https://s3.REGION.amazonaws.com; another endpoint stays).
  [[nodiscard]] std::shared_ptr<S3Signer> in_region(const std::string& region) const;

 private:
  S3Endpoint endpoint_;
  std::shared_ptr<CredentialChain> chain_;
};

/// One object of a listing. A plain value.
struct S3Object {
  std::string key;       ///< the full key
  std::uint64_t size = 0;
  std::string etag;      ///< as listed (quoted)
};

/// One page of ListObjectsV2. A plain value.
struct S3ListPage {
  std::vector<S3Object> objects;
  std::vector<std::string> common_prefixes;  ///< "subdirectories" under the delimiter
  bool truncated = false;                    ///< IsTruncated: ask again with `continuation`
  std::string continuation;                  ///< NextContinuationToken
};

/// Parses a ListObjectsV2 answer (XML, with expat; at most 16 levels deep, no entities
/// expanded). `BadResponse` for what is not a ListBucketResult. Pure.
[[nodiscard]] Result<S3ListPage> parse_list_objects_v2(std::string_view xml);

/// An S3 error answer: `<Error><Code>..</Code><Message>..</Message>...`. A plain value.
struct S3ErrorBody {
  std::string code;      ///< NoSuchKey, AccessDenied, ... ("" when the body is not one)
  std::string message;   ///< S3's words
  std::string region;    ///< <Region> of a PermanentRedirect / AuthorizationHeaderMalformed
  std::string endpoint;  ///< <Endpoint> of a PermanentRedirect
};

/// Parses an error body (XML); an empty value when it is not an S3 error. Pure.
[[nodiscard]] S3ErrorBody parse_s3_error(std::string_view xml);

/// What an S3 error answer means, in words. A plain value.
struct S3Reply {
  long status = 0;             ///< HTTP status
  std::string body;            ///< the answer's body (XML), maybe empty (HEAD-like answers)
  std::string bucket_region;   ///< x-amz-bucket-region, if any
};

/// The error for an S3 answer to a request about `what` (`s3://BUCKET/KEY` and the file's
/// role), naming the credentials as `S3Signer::credentials_source` does (`source`; "" =
/// unsigned): NoSuchKey/NoSuchBucket -> RemoteNotFound; AccessDenied, InvalidAccessKeyId,
/// SignatureDoesNotMatch ("the secret key does not match the access key"), ExpiredToken,
/// InvalidToken -> Unauthorized; SlowDown/503 -> RateLimited (after the HTTP client's retries
/// with backoff, as for 429); PermanentRedirect and wrong-region answers -> Network naming the
/// bucket's region. S3's code and message are kept. Never contains a secret. Pure.
[[nodiscard]] Error s3_error(const S3Reply& reply, const std::string& what, const std::string& source);

/// The region S3 says the bucket is in, when an answer refuses a request for being sent to or
/// signed for another one (301 PermanentRedirect, 400 AuthorizationHeaderMalformed or
/// AuthorizationQueryParametersError, with `x-amz-bucket-region` or `<Region>`); else "". Only a
/// plain region name is returned. Pure.
[[nodiscard]] std::string s3_region_hint(const S3Reply& reply);

}  // namespace tensorfetch::detail
