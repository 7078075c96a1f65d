// SPDX-License-Identifier: Apache-2.0
// Private: AWS credentials found as the AWS SDKs find them. Each source is a small provider with
// one job; a chain asks them in the SDKs' order and keeps what the first one with credentials
// gave until shortly before it expires (aws-c-auth's design). Sources, in this order: the
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), web identity
// (web_identity.h: STS AssumeRoleWithWebIdentity), the shared files (AWS_PROFILE,
// AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE; `[NAME]` in the credentials file, `[profile
// NAME]` or `[default]` in the config file), container credentials and EC2 instance metadata
// (aws_metadata.h). Secrets never appear in an error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "store/sigv4.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// Sections of an AWS shared file (`[name]` -> key -> value; keys lower case). A plain value.
using AwsIniSections = std::map<std::string, std::map<std::string, std::string>>;

/// Parses an AWS shared credentials or config file: `[section]` lines, `key = value` lines,
/// `#`/`;` comments; indented lines (nested settings such as `s3 =` blocks) are kept under
/// `parent.key`. Never fails: lines it does not understand are skipped. Pure.
[[nodiscard]] AwsIniSections parse_aws_ini(std::string_view text);

/// Where the shared files are and which profile to read. A plain value.
struct AwsSharedFiles {
  std::string profile = "default";  ///< AWS_PROFILE, else `default`
  std::string credentials_path;     ///< AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials
  std::string config_path;          ///< AWS_CONFIG_FILE, else ~/.aws/config

  /// From the environment (HOME for the defaults).
  [[nodiscard]] static AwsSharedFiles from(const EnvLookup& env);

  /// The profile's settings: the config file's `[profile NAME]` (or `[default]`) overlaid with
  /// the credentials file's `[NAME]`. Missing files read as empty; an unreadable one is an
  /// error naming it. Reads the files.
  [[nodiscard]] Result<std::map<std::string, std::string>> settings() const;
};

/// One source of credentials. Implementations are not thread-safe; `CredentialChain` serializes.
class CredentialProvider {
 public:
  virtual ~CredentialProvider() = default;
  /// The credentials this source holds, nullopt when it holds none (the chain asks the next),
  /// an error when it holds broken ones (half a key pair). `now`: seconds since the epoch.
  [[nodiscard]] virtual Result<std::optional<AwsCredentials>> load(std::int64_t now) = 0;
  /// Where it looks, for the "no credentials found" message.
  [[nodiscard]] virtual std::string where() const = 0;
};

/// AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN).
[[nodiscard]] std::unique_ptr<CredentialProvider> environment_credentials(EnvLookup env);

/// The profile's `aws_access_key_id` + `aws_secret_access_key` (+ `aws_session_token`) in the
/// shared credentials file, else in the config file.
[[nodiscard]] std::unique_ptr<CredentialProvider> profile_credentials(AwsSharedFiles files);

/// Providers asked in order; the first that has credentials wins, and they are kept until 5
/// minutes before they expire (then asked again: temporary credentials are refreshed during a
/// long fetch). Thread-safe.
class CredentialChain {
 public:
  /// A chain of `providers`, asked in this order.
  explicit CredentialChain(std::vector<std::unique_ptr<CredentialProvider>> providers);

  /// The credentials, or `Unauthorized` "no AWS credentials found" listing where it looked.
  [[nodiscard]] Result<AwsCredentials> get(std::int64_t now);

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<CredentialProvider>> providers_;
  std::optional<AwsCredentials> cached_;
};

/// The SDKs' chain: environment, web identity, the shared files, container credentials, EC2
/// instance metadata (IMDSv2).
[[nodiscard]] std::shared_ptr<CredentialChain> default_credential_chain(const EnvLookup& env);

}  // namespace tensorfetch::detail
