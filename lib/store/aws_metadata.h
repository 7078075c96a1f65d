// SPDX-License-Identifier: Apache-2.0
// Private: AWS credentials from the two metadata services, the last providers of the chain
// (aws_credentials.h), as the SDKs read them:
//  - container credentials (ECS task roles, EKS Pod Identity): GET
//    AWS_CONTAINER_CREDENTIALS_RELATIVE_URI on http://169.254.170.2, else
//    AWS_CONTAINER_CREDENTIALS_FULL_URI (https, or http to a loopback address or the ECS/EKS
//    agents' link-local ones), with `Authorization:` from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
//    (read at every refresh) or AWS_CONTAINER_AUTHORIZATION_TOKEN; a JSON answer
//    (AccessKeyId, SecretAccessKey, Token, Expiration);
//  - EC2 instance metadata (IMDSv2): PUT /latest/api/token (a session token, 6 hours), then GET
//    /latest/meta-data/iam/security-credentials/ (the role) and .../ROLE (JSON, as above) with
//    the token; at AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254 (or
//    http://[fd00:ec2::254] with AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6); off with
//    AWS_EC2_METADATA_DISABLED=true. A service that cannot be reached means no credentials here
//    (off EC2), after a 1-second connect timeout, as the SDKs do.
// Both give temporary credentials: the chain refreshes them 5 minutes before they expire, also
// during a long fetch. No token or secret appears in any error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/env.h"
#include "store/aws_credentials.h"

namespace tensorfetch::detail {

/// Where the container credentials are: the URL, and the `Authorization` value to send (""
/// none). A plain value; `authorization` is a secret.
struct ContainerCredentialsTarget {
  std::string url;
  std::string authorization;
  std::string source;  ///< for messages: which variable gave the URL (and the token), never the token
};

/// The container credentials' target from the environment, nullopt when neither URI variable is
/// set. `Unauthorized` naming the variable: a FULL_URI over http to a host that is not loopback
/// or the ECS/EKS agents' (169.254.170.2, 169.254.170.23, fd00:ec2::23); a token file that
/// cannot be read; a token with a CR or LF. Reads the token file.
[[nodiscard]] Result<std::optional<ContainerCredentialsTarget>> container_credentials_target(const EnvLookup& env);

/// Parses a container or instance-metadata credentials answer (JSON: AccessKeyId,
/// SecretAccessKey, Token, Expiration; `Code` other than `Success` refused). `source` names where
/// it came from. `BadResponse` or `Unauthorized` naming `source`, never a value. Pure.
[[nodiscard]] Result<AwsCredentials> parse_metadata_credentials(std::string_view json, const std::string& source);

/// The container credentials provider (see the top of this file).
[[nodiscard]] std::unique_ptr<CredentialProvider> container_credentials(EnvLookup env);

/// The EC2 instance metadata (IMDSv2) provider (see the top of this file).
[[nodiscard]] std::unique_ptr<CredentialProvider> instance_metadata_credentials(EnvLookup env);

}  // namespace tensorfetch::detail
