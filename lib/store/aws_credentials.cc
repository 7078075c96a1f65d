// SPDX-License-Identifier: Apache-2.0
#include "store/aws_credentials.h"

#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "base/text.h"
#include "store/aws_metadata.h"
#include "store/web_identity.h"

namespace tensorfetch::detail {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The file's text; empty when it does not exist; an error when it exists but cannot be read.
Result<std::string> read_optional_file(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return std::string();
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!in || !(text << in.rdbuf())) {
    if (st.st_size == 0) return std::string();
    return fail(ErrorCode::Io, path + ": the AWS shared file could not be read");
  }
  return text.str();
}

class EnvironmentProvider final : public CredentialProvider {
 public:
  explicit EnvironmentProvider(EnvLookup env) : env_(std::move(env)) {}

  Result<std::optional<AwsCredentials>> load(std::int64_t) override {
    auto id = env_("AWS_ACCESS_KEY_ID");
    auto secret = env_("AWS_SECRET_ACCESS_KEY");
    if ((!id || id->empty()) && (!secret || secret->empty())) return std::optional<AwsCredentials>();
    if (!id || id->empty() || !secret || secret->empty()) {
      return fail(ErrorCode::Unauthorized, std::string("the environment sets ") +
                                               (id && !id->empty() ? "AWS_ACCESS_KEY_ID but not AWS_SECRET_ACCESS_KEY"
                                                                   : "AWS_SECRET_ACCESS_KEY but not AWS_ACCESS_KEY_ID"));
    }
    AwsCredentials c;
    c.access_key_id = *id;
    c.secret_access_key = *secret;
    c.session_token = env_("AWS_SESSION_TOKEN").value_or("");
    c.source = "the environment (AWS_ACCESS_KEY_ID)";
    return std::optional<AwsCredentials>(std::move(c));
  }

  std::string where() const override { return "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"; }

 private:
  EnvLookup env_;
};

class ProfileProvider final : public CredentialProvider {
 public:
  explicit ProfileProvider(AwsSharedFiles files) : files_(std::move(files)) {}

  Result<std::optional<AwsCredentials>> load(std::int64_t) override {
    auto creds_text = read_optional_file(files_.credentials_path);
    if (!creds_text) return fail(creds_text.error());
    auto config_text = read_optional_file(files_.config_path);
    if (!config_text) return fail(config_text.error());
    const auto creds = parse_aws_ini(*creds_text);
    const auto config = parse_aws_ini(*config_text);
    const std::string config_name = files_.profile == "default" ? "default" : "profile " + files_.profile;
    auto from = [&](const AwsIniSections& sections, const std::string& section,
                    const std::string& file) -> Result<std::optional<AwsCredentials>> {
      auto it = sections.find(section);
      if (it == sections.end()) return std::optional<AwsCredentials>();
      const auto& kv = it->second;
      auto get = [&](const char* key) {
        auto k = kv.find(key);
        return k == kv.end() ? std::string() : k->second;
      };
      const std::string id = get("aws_access_key_id"), secret = get("aws_secret_access_key");
      if (id.empty() && secret.empty()) return std::optional<AwsCredentials>();
      const std::string where = "profile '" + files_.profile + "' of " + file;
      if (id.empty() || secret.empty()) {
        return fail(ErrorCode::Unauthorized, where + " has " +
                                                 (id.empty() ? "aws_secret_access_key but no aws_access_key_id"
                                                             : "aws_access_key_id but no aws_secret_access_key"));
      }
      AwsCredentials c;
      c.access_key_id = id;
      c.secret_access_key = secret;
      c.session_token = get("aws_session_token");
      c.source = where;
      return std::optional<AwsCredentials>(std::move(c));
    };
    auto found = from(creds, files_.profile, "the shared credentials file " + files_.credentials_path);
    if (!found || *found) return found;
    return from(config, config_name, "the config file " + files_.config_path);
  }

  std::string where() const override {
    return "profile '" + files_.profile + "' of the shared credentials file " + files_.credentials_path +
           " and of the config file " + files_.config_path + " (AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE)";
  }

 private:
  AwsSharedFiles files_;
};

}  // namespace

AwsIniSections parse_aws_ini(std::string_view text) {
  AwsIniSections out;
  std::string section, parent;
  bool in_section = false;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const bool indented = !raw.empty() && (raw.front() == ' ' || raw.front() == '\t');
    std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      const auto close = line.find(']');
      if (close == std::string_view::npos) {
        in_section = false;
        continue;
      }
      section = std::string(trim(line.substr(1, close - 1)));
      // `[profile   NAME]`: one space, as the SDKs read it.
      if (section.starts_with("profile ")) section = "profile " + std::string(trim(std::string_view(section).substr(8)));
      out[section];
      in_section = true;
      parent.clear();
      continue;
    }
    if (!in_section) continue;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string key = ascii_lower(trim(line.substr(0, eq)));
    const std::string value(trim(line.substr(eq + 1)));
    if (indented && !parent.empty()) {
      out[section][parent + "." + key] = value;
    } else {
      out[section][key] = value;
      parent = value.empty() ? key : std::string();
    }
  }
  return out;
}

AwsSharedFiles AwsSharedFiles::from(const EnvLookup& env) {
  AwsSharedFiles f;
  if (auto p = env("AWS_PROFILE"); p && !p->empty()) f.profile = *p;
  const std::string home = env("HOME").value_or("");
  auto path_of = [&](const char* var, const char* name) {
    if (auto v = env(var); v && !v->empty()) {
      if (v->starts_with("~/") && !home.empty()) return home + v->substr(1);
      return *v;
    }
    return home.empty() ? std::string() : home + "/.aws/" + name;
  };
  f.credentials_path = path_of("AWS_SHARED_CREDENTIALS_FILE", "credentials");
  f.config_path = path_of("AWS_CONFIG_FILE", "config");
  return f;
}

Result<std::map<std::string, std::string>> AwsSharedFiles::settings() const {
  auto config_text = read_optional_file(config_path);
  if (!config_text) return fail(config_text.error());
  auto creds_text = read_optional_file(credentials_path);
  if (!creds_text) return fail(creds_text.error());
  std::map<std::string, std::string> out;
  const auto config = parse_aws_ini(*config_text);
  if (auto it = config.find(profile == "default" ? "default" : "profile " + profile); it != config.end()) out = it->second;
  const auto creds = parse_aws_ini(*creds_text);
  if (auto it = creds.find(profile); it != creds.end()) {
    for (const auto& [k, v] : it->second) out[k] = v;
  }
  return out;
}

std::unique_ptr<CredentialProvider> environment_credentials(EnvLookup env) {
  return std::make_unique<EnvironmentProvider>(std::move(env));
}

std::unique_ptr<CredentialProvider> profile_credentials(AwsSharedFiles files) {
  return std::make_unique<ProfileProvider>(std::move(files));
}

CredentialChain::CredentialChain(std::vector<std::unique_ptr<CredentialProvider>> providers)
    : providers_(std::move(providers)) {}

Result<AwsCredentials> CredentialChain::get(std::int64_t now) {
  std::lock_guard lock(mutex_);
  constexpr std::int64_t kRefreshBefore = 300;
  if (cached_ && (cached_->expires_at == 0 || now < cached_->expires_at - kRefreshBefore)) return *cached_;
  cached_.reset();
  std::string looked;
  for (const auto& p : providers_) {
    auto c = p->load(now);
    if (!c) return fail(c.error());
    if (*c) {
      cached_ = std::move(**c);
      return *cached_;
    }
    looked += (looked.empty() ? "" : "; ") + p->where();
  }
  return fail(ErrorCode::Unauthorized,
              "no AWS credentials found: looked in " + looked +
                  " (for a public bucket, --no-sign-request / OpenOptions::s3_no_sign_request)");
}

std::shared_ptr<CredentialChain> default_credential_chain(const EnvLookup& env) {
  std::vector<std::unique_ptr<CredentialProvider>> providers;
  providers.push_back(environment_credentials(env));
  providers.push_back(web_identity_credentials(env));
  providers.push_back(profile_credentials(AwsSharedFiles::from(env)));
  providers.push_back(container_credentials(env));
  providers.push_back(instance_metadata_credentials(env));
  return std::make_shared<CredentialChain>(std::move(providers));
}

}  // namespace tensorfetch::detail
