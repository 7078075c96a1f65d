// SPDX-License-Identifier: Apache-2.0
#include "store/aws_metadata.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/text.h"
#include "net/http_client.h"
#include "net/url.h"
#include "store/web_identity.h"

namespace tensorfetch::detail {

namespace {

constexpr const char* kEcsHost = "http://169.254.170.2";

std::string env_or(const EnvLookup& env, const char* name) { return env(name).value_or(""); }

// The host of an http(s) URL, lower case, without port or IPv6 brackets.
std::string url_host(std::string_view url) {
  std::string authority = url_authority(url);
  authority = authority.substr(authority.find("://") + 3);
  if (const auto at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  if (authority.starts_with('[')) return ascii_lower(authority.substr(1, authority.find(']') - 1));
  return ascii_lower(authority.substr(0, authority.find(':')));
}

// What the SDKs allow a FULL_URI over plain http to reach: loopback, and the ECS and EKS Pod
// Identity agents.
bool allowed_http_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "169.254.170.2" || host == "169.254.170.23" ||
      host == "fd00:ec2::23") {
    return true;
  }
  return host.starts_with("127.") && std::all_of(host.begin(), host.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
         });
}

// One small request to a metadata service: 1-second connect, short stall, no retry.
HttpOptions metadata_http(const EnvLookup& env) {
  HttpOptions options;
  options.max_parallel = 1;
  options.connect_timeout_ms = 1000;
  options.stall_timeout_ms = 5000;
  options.max_retries = 1;
  options.backoff_base_ms = 100;
  options.min_rate = 0;
  if (auto bundle = env("CURL_CA_BUNDLE")) options.ca_file = *bundle;
  return options;
}

Result<HttpResponse> ask(HttpClient& client, const std::string& url, const std::string& method,
                         std::vector<std::pair<std::string, std::string>> headers) {
  HttpRequest r;
  r.url = url;
  r.method = method;
  r.headers = std::move(headers);
  r.max_body = 64 << 10;
  r.max_redirects = 0;
  auto results = client.perform(std::vector<HttpRequest>{r});
  if (!results[0]) return fail(results[0].error());
  return std::move(*results[0]);
}

class ContainerProvider final : public CredentialProvider {
 public:
  explicit ContainerProvider(EnvLookup env) : env_(std::move(env)) {}

  Result<std::optional<AwsCredentials>> load(std::int64_t) override {
    auto target = container_credentials_target(env_);
    if (!target) return fail(target.error());
    if (!*target) return std::optional<AwsCredentials>();
    HttpClient client(metadata_http(env_));
    std::vector<std::pair<std::string, std::string>> headers;
    if (!(*target)->authorization.empty()) headers.emplace_back("Authorization", (*target)->authorization);
    const std::string where = "container credentials (" + (*target)->source + ")";
    auto r = ask(client, (*target)->url, "GET", std::move(headers));
    if (!r) return fail(ErrorCode::Unauthorized, where + ": the endpoint could not be reached (" + r.error().message + ")");
    if (r->status != 200) {
      return fail(ErrorCode::Unauthorized, where + ": the endpoint answered HTTP " + std::to_string(r->status));
    }
    auto c = parse_metadata_credentials(r->body, where);
    if (!c) return fail(c.error());
    return std::optional<AwsCredentials>(std::move(*c));
  }

  std::string where() const override {
    return "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, AWS_CONTAINER_CREDENTIALS_FULL_URI)";
  }

 private:
  EnvLookup env_;
};

class InstanceMetadataProvider final : public CredentialProvider {
 public:
  explicit InstanceMetadataProvider(EnvLookup env) : env_(std::move(env)) {}

  Result<std::optional<AwsCredentials>> load(std::int64_t) override {
    if (ascii_lower(env_or(env_, "AWS_EC2_METADATA_DISABLED")) == "true") return std::optional<AwsCredentials>();
    std::string endpoint = env_or(env_, "AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (endpoint.empty()) {
      endpoint = ascii_lower(env_or(env_, "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE")) == "ipv6" ? "http://[fd00:ec2::254]"
                                                                                             : "http://169.254.169.254";
    }
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    if (auto ok = check_url_text(endpoint, "AWS_EC2_METADATA_SERVICE_ENDPOINT"); !ok) return fail(ok.error());
    const std::string where = "EC2 instance metadata (" + endpoint + ")";
    HttpClient client(metadata_http(env_));
    // IMDSv2: a session token first. No answer at all: not on EC2, no credentials here.
    auto token = ask(client, endpoint + "/latest/api/token", "PUT", {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}});
    if (!token) return std::optional<AwsCredentials>();
    std::vector<std::pair<std::string, std::string>> headers;
    if (token->status == 200) {
      std::string t = token->body;
      while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
      if (t.empty() || !check_header_value(t, "the IMDS token")) {
        return fail(ErrorCode::BadResponse, where + ": the session token answered is not one");
      }
      headers.emplace_back("X-aws-ec2-metadata-token", t);
    } else if (token->status != 403 && token->status != 404 && token->status != 405) {
      // (403, 404, 405: IMDSv1 only, as the SDKs fall back to; anything else is an error)
      return fail(ErrorCode::Unauthorized, where + ": PUT /latest/api/token answered HTTP " + std::to_string(token->status));
    }
    const std::string base = endpoint + "/latest/meta-data/iam/security-credentials/";
    auto role = ask(client, base, "GET", headers);
    if (!role) return fail(ErrorCode::Unauthorized, where + ": the role could not be read (" + role.error().message + ")");
    if (role->status == 404) return std::optional<AwsCredentials>();  // no role attached to the instance
    if (role->status != 200) {
      return fail(ErrorCode::Unauthorized, where + ": reading the role answered HTTP " + std::to_string(role->status));
    }
    std::string name = role->body.substr(0, role->body.find_first_of("\r\n"));
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    if (name.empty() || name.size() > 128 ||
        !std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("+=,.@_-").find(c) != std::string_view::npos;
        })) {
      return fail(ErrorCode::BadResponse, where + ": the role name answered is not one");
    }
    const std::string role_where = "EC2 instance metadata (role " + name + ", " + endpoint + ")";
    auto creds = ask(client, base + name, "GET", headers);
    if (!creds) return fail(ErrorCode::Unauthorized, role_where + ": " + creds.error().message);
    if (creds->status != 200) {
      return fail(ErrorCode::Unauthorized, role_where + ": answered HTTP " + std::to_string(creds->status));
    }
    auto c = parse_metadata_credentials(creds->body, role_where);
    if (!c) return fail(c.error());
    return std::optional<AwsCredentials>(std::move(*c));
  }

  std::string where() const override {
    return "EC2 instance metadata (AWS_EC2_METADATA_SERVICE_ENDPOINT, else 169.254.169.254; "
           "AWS_EC2_METADATA_DISABLED)";
  }

 private:
  EnvLookup env_;
};

}  // namespace

Result<std::optional<ContainerCredentialsTarget>> container_credentials_target(const EnvLookup& env) {
  ContainerCredentialsTarget t;
  const std::string relative = env_or(env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  const std::string full = env_or(env, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (!relative.empty()) {
    t.url = std::string(kEcsHost) + (relative.starts_with('/') ? "" : "/") + relative;
    t.source = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";
  } else if (!full.empty()) {
    t.url = full;
    t.source = "AWS_CONTAINER_CREDENTIALS_FULL_URI";
    const bool https = full.starts_with("https://");
    if (!(https || full.starts_with("http://")) || url_authority(full).empty()) {
      return fail(ErrorCode::Unauthorized, "AWS_CONTAINER_CREDENTIALS_FULL_URI " + quote_name(full) + " is not an http(s) URL");
    }
    if (!https && !allowed_http_host(url_host(full))) {
      return fail(ErrorCode::Unauthorized, "AWS_CONTAINER_CREDENTIALS_FULL_URI " + quote_name(full) +
                                               ": plain http is allowed only to a loopback address or the ECS/EKS "
                                               "agents (169.254.170.2, 169.254.170.23, fd00:ec2::23)");
    }
  } else {
    return std::optional<ContainerCredentialsTarget>();
  }
  if (auto ok = check_url_text(t.url, t.source.c_str()); !ok) return fail(ok.error());
  const std::string token_file = env_or(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  if (!token_file.empty()) {
    std::ifstream in(token_file, std::ios::binary);
    std::ostringstream text;
    if (!in || !(text << in.rdbuf())) {
      return fail(ErrorCode::Unauthorized, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " + quote_name(token_file) +
                                               " cannot be read");
    }
    t.authorization = text.str();
    t.source += ", the token of AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " + token_file;
  } else {
    t.authorization = env_or(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN");
    if (!t.authorization.empty()) t.source += ", the token of AWS_CONTAINER_AUTHORIZATION_TOKEN";
  }
  while (!t.authorization.empty() && std::isspace(static_cast<unsigned char>(t.authorization.back()))) {
    t.authorization.pop_back();
  }
  if (t.authorization.find_first_of("\r\n") != std::string::npos ||
      !check_header_value(t.authorization, "the container authorization token")) {
    return fail(ErrorCode::Unauthorized, "the container authorization token (" + t.source +
                                             ") holds a control character");
  }
  return std::optional<ContainerCredentialsTarget>(std::move(t));
}

Result<AwsCredentials> parse_metadata_credentials(std::string_view text, const std::string& source) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return fail(ErrorCode::BadResponse, source + ": the answer is not a JSON object");
  }
  auto field = [&](const char* name) -> std::string {
    auto it = j.find(name);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (const std::string code = field("Code"); !code.empty() && code != "Success") {
    return fail(ErrorCode::Unauthorized, source + ": the service answered Code " + quote_name(code) +
                                             (field("Message").empty() ? "" : " (\"" + field("Message") + "\")"));
  }
  AwsCredentials c;
  c.access_key_id = field("AccessKeyId");
  c.secret_access_key = field("SecretAccessKey");
  c.session_token = field("Token");
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return fail(ErrorCode::BadResponse, source + ": the answer holds no AccessKeyId and SecretAccessKey");
  }
  if (const std::string expiration = field("Expiration"); !expiration.empty()) {
    auto at = parse_iso8601_utc(expiration);
    if (!at) return fail(ErrorCode::BadResponse, source + ": the answer's Expiration is not a UTC time");
    c.expires_at = *at;
  }
  c.source = source;
  return c;
}

std::unique_ptr<CredentialProvider> container_credentials(EnvLookup env) {
  return std::make_unique<ContainerProvider>(std::move(env));
}

std::unique_ptr<CredentialProvider> instance_metadata_credentials(EnvLookup env) {
  return std::make_unique<InstanceMetadataProvider>(std::move(env));
}

}  // namespace tensorfetch::detail
