// SPDX-License-Identifier: Apache-2.0
// Private: Azure Blob Storage as tensorfetch reads it. Locations `az://ACCOUNT/CONTAINER/PATH`
// and `https://ACCOUNT.blob.core.windows.net/CONTAINER/PATH` (a SAS URL's query is its
// credential); a PATH ending in `/` (or none) is a directory, listed with List Blobs (delimiter
// `/`, paginated with NextMarker, read with expat). Credentials as Azure's own tools find them:
// a SAS in the location's URL, AZURE_STORAGE_CONNECTION_STRING (AccountKey or
// SharedAccessSignature; its BlobEndpoint gives the endpoint: azurite, Azure Stack),
// AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN, else anonymous (a public container).
//
// As for S3 (s3.h), every request goes out as a self-authorizing URL: with an account key, a
// service SAS (HMAC-SHA256 with the key, OpenSSL) is made per blob (read) or per container (list),
// valid `--presign-expires`; with a SAS it is appended. The data plane then sends plain GETs, and
// `get --plan` hands out URLs another program fetches with no credentials. The key and any SAS
// stay in the signer: messages, caches and snapshots hold the plain URL only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "store/url_signer.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// The `sv` of the service SAS made with an account key (its string to sign is that of versions
/// 2020-12-06 and later).
inline constexpr std::string_view kAzureSasVersion = "2022-11-02";

/// A blob or a "directory" of a container. A plain value.
struct AzureLocation {
  std::string account;    ///< storage account name (3-24 lower-case letters and digits)
  std::string container;  ///< container name
  std::string blob;       ///< blob name or prefix (decoded; may be empty: the container's root)
  /// The `https://ACCOUNT.blob.core.windows.net` of the https form ("" for `az://`).
  std::string endpoint;
  std::string sas;  ///< a SAS URL's query, without `?` (secret; "" when none)
  /// Read as a directory: the blob name is empty or ends with `/`.
  [[nodiscard]] bool is_prefix() const noexcept { return blob.empty() || blob.ends_with('/'); }
  /// `az://ACCOUNT/CONTAINER/BLOB` (never the SAS), for messages.
  [[nodiscard]] std::string text() const { return "az://" + account + "/" + container + "/" + blob; }
};

/// Parses `az://ACCOUNT/CONTAINER[/PATH]` or `https://ACCOUNT.blob.core.windows.net/CONTAINER[/PATH][?SAS]`.
/// `InvalidArgument` naming the location (never its SAS): an invalid account or container name,
/// a path with a control character, an empty, `.` or `..` segment. Pure.
[[nodiscard]] Result<AzureLocation> parse_azure_location(std::string_view text);

/// The `key=value;...` settings of a connection string (names as written). `InvalidArgument`
/// naming `variable` (never a value) for a part without `=`. Pure.
[[nodiscard]] Result<std::map<std::string, std::string>> parse_azure_connection_string(std::string_view text,
                                                                                      const char* variable);

/// How requests are authorized.
enum class AzureAuth {
  SharedKey,  ///< a service SAS made per request with the account key
  Sas,        ///< a SAS token appended to every URL
  Anonymous,  ///< unsigned (a container with public read access)
};

/// Where the blobs are and how to sign for them. Holds secrets (`account_key`, `sas`): kept in
/// the signer, never printed.
struct AzureSetup {
  std::string account;          ///< the account the SAS is made for (the location's)
  std::string endpoint;         ///< scheme://host[:port][/path], no trailing slash
  std::string endpoint_source;  ///< where the endpoint came from, for messages
  AzureAuth auth = AzureAuth::Anonymous;
  std::string account_key;  ///< the decoded key (SharedKey; secret)
  std::string sas;          ///< the SAS query without `?` (Sas; secret)
  std::string source;       ///< where the credentials came from ("" anonymous); never a secret
};

/// The endpoint and credentials for `location` from the environment, in this order: the SAS
/// of the location's URL; AZURE_STORAGE_CONNECTION_STRING (its AccountName must be the
/// location's; AccountKey, else SharedAccessSignature; the endpoint from BlobEndpoint, else
/// DefaultEndpointsProtocol/EndpointSuffix; one with neither gives only the endpoint and the
/// search goes on); AZURE_STORAGE_ACCOUNT_KEY (when
/// AZURE_STORAGE_ACCOUNT is unset or the location's account); AZURE_STORAGE_SAS_TOKEN; else
/// anonymous. `anonymous` (--no-sign-request) looks for no credentials. The endpoint is the https
/// form's host, else the connection string's, else https://ACCOUNT.blob.core.windows.net.
/// `InvalidArgument` naming the variable (never its value): a key that is not base64, a
/// connection string for another account, an endpoint that is not an http(s) URL.
[[nodiscard]] Result<AzureSetup> resolve_azure(const EnvLookup& env, const AzureLocation& location, bool anonymous);

/// The blob's plain URL (no query): ENDPOINT/CONTAINER/BLOB, each segment percent-encoded. Pure.
[[nodiscard]] std::string azure_blob_url(std::string_view endpoint, std::string_view container, std::string_view blob);

/// The plain List Blobs URL of `prefix` in `container` (delimiter `/`), continuing at `marker`
/// when not empty. Pure.
[[nodiscard]] std::string azure_list_url(std::string_view endpoint, std::string_view container, std::string_view prefix,
                                         std::string_view marker);

/// The service SAS query (without `?`) granting `permissions` (`r`, `l`) on
/// `/blob/ACCOUNT/CONTAINER[/BLOB]` (`sr=b` for a blob, `sr=c` for the container when `blob` is
/// empty) until `expiry` (seconds since the epoch), signed with `key` (decoded): `sv`, `sr`,
/// `sp`, `se`, `sig`. Pure.
[[nodiscard]] std::string azure_service_sas(std::string_view account, std::string_view key, std::string_view container,
                                            std::string_view blob, std::string_view permissions, std::int64_t expiry);

/// `2026-11-27T09:00:00Z` of `unix_seconds` (UTC). Pure.
[[nodiscard]] std::string azure_time(std::int64_t unix_seconds);

/// Signs Azure Blob URLs (on `setup.endpoint`) into self-authorizing ones. Thread-safe (const).
class AzureSigner final : public UrlSigner {
 public:
  /// Signs for `setup`.
  explicit AzureSigner(AzureSetup setup);

  /// `url` with a SAS: a fresh service SAS (a blob: read; a List Blobs URL: list) valid
  /// `expires_seconds`, or the given SAS; unchanged when anonymous. `InvalidArgument` for a URL
  /// that is not on the endpoint.
  [[nodiscard]] Result<std::string> presign(std::string_view url, std::int64_t now,
                                            std::int64_t expires_seconds) const override;

  /// "the account key from SOURCE", "the SAS from SOURCE", or "" when anonymous.
  [[nodiscard]] std::string credentials_source(std::int64_t now) const override;

  /// Account key: `now + expires_seconds`; a given SAS: its `se`; anonymous: 0.
  [[nodiscard]] std::int64_t expires_at(std::int64_t now, std::int64_t expires_seconds) const override;

  /// The endpoint, account and how requests are authorized (secrets included: do not print).
  [[nodiscard]] const AzureSetup& setup() const noexcept { return setup_; }

 private:
  AzureSetup setup_;
};

/// One blob of a listing. A plain value.
struct AzureBlob {
  std::string name;  ///< the full blob name
  std::uint64_t size = 0;
  std::string etag;
};

/// One page of List Blobs. A plain value.
struct AzureListPage {
  std::vector<AzureBlob> blobs;
  std::vector<std::string> prefixes;  ///< BlobPrefix names ("subdirectories")
  std::string next_marker;            ///< NextMarker: ask again with it when not empty
};

/// Parses a List Blobs answer (`EnumerationResults`; expat, depth-bounded, no entities).
/// `BadResponse` for what is not one. Pure.
[[nodiscard]] Result<AzureListPage> parse_list_blobs(std::string_view xml);

/// An Azure error answer, as far as the client needs it. A plain value.
struct AzureReply {
  long status = 0;         ///< HTTP status
  std::string body;        ///< `<Error><Code>..</Code><Message>..</Message></Error>`, maybe empty
  std::string error_code;  ///< x-ms-error-code, if any
};

/// The error for an Azure answer to a request about `what` (`az://ACCOUNT/CONTAINER/BLOB` and
/// the file's role), naming the credentials as `AzureSigner::credentials_source` does (`source`;
/// "" = anonymous): BlobNotFound, ContainerNotFound, ResourceNotFound -> RemoteNotFound;
/// AuthenticationFailed ("the signature was refused": the key does not match the account, or
/// the SAS is not valid), AuthorizationFailure, AuthorizationPermissionMismatch,
/// NoAuthenticationInformation, PublicAccessNotPermitted -> Unauthorized; ServerBusy, 503, 429 ->
/// RateLimited; 412 -> Integrity. Azure's code and the first line of its message are kept (never
/// AuthenticationErrorDetail, which quotes the signature). Pure.
[[nodiscard]] Error azure_error(const AzureReply& reply, const std::string& what, const std::string& source);

}  // namespace tensorfetch::detail
