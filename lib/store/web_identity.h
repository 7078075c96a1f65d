// SPDX-License-Identifier: Apache-2.0
// Private: AWS credentials from a web identity (EKS IRSA and other OIDC federations): the token
// in AWS_WEB_IDENTITY_TOKEN_FILE exchanged for temporary credentials of AWS_ROLE_ARN by STS
// AssumeRoleWithWebIdentity (an unsigned request; the token is the proof). One provider of the
// chain (aws_credentials.h); the chain refreshes what it gives before it expires.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/env.h"
#include "store/aws_credentials.h"

namespace tensorfetch::detail {

/// The STS answer's credentials: `<AssumeRoleWithWebIdentityResult><Credentials>` (AccessKeyId,
/// SecretAccessKey, SessionToken, Expiration), or an error naming STS's `<Error><Code>` and
/// message. `source` becomes the credentials' source. Pure.
[[nodiscard]] Result<AwsCredentials> parse_assume_role_with_web_identity(std::string_view xml, long status,
                                                                        const std::string& source);

/// `2026-11-27T05:00:00Z` (ISO 8601, UTC, optional fraction) as seconds since the epoch. Pure.
[[nodiscard]] std::optional<std::int64_t> parse_iso8601_utc(std::string_view text);

/// AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME): none when either is
/// unset. STS at AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else https://sts.REGION.amazonaws.com
/// (AWS_REGION / AWS_DEFAULT_REGION; https://sts.amazonaws.com without one).
[[nodiscard]] std::unique_ptr<CredentialProvider> web_identity_credentials(EnvLookup env);

}  // namespace tensorfetch::detail
