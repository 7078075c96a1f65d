// SPDX-License-Identifier: Apache-2.0
#include "store/web_identity.h"

#include <ctime>
#include <fstream>
#include <sstream>

#include "base/text.h"
#include "net/http_client.h"
#include "store/s3.h"
#include "store/xml.h"

namespace tensorfetch::detail {

namespace {

class WebIdentityProvider final : public CredentialProvider {
 public:
  explicit WebIdentityProvider(EnvLookup env) : env_(std::move(env)) {}

  Result<std::optional<AwsCredentials>> load(std::int64_t now) override {
    const std::string token_file = env_("AWS_WEB_IDENTITY_TOKEN_FILE").value_or("");
    const std::string role = env_("AWS_ROLE_ARN").value_or("");
    if (token_file.empty() || role.empty()) return std::optional<AwsCredentials>();
    std::ifstream in(token_file, std::ios::binary);
    std::ostringstream text;
    if (!in || !(text << in.rdbuf())) {
      return fail(ErrorCode::Unauthorized, "AWS_WEB_IDENTITY_TOKEN_FILE " + quote_name(token_file) + " cannot be read");
    }
    std::string token = text.str();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    std::string session = env_("AWS_ROLE_SESSION_NAME").value_or("");
    if (session.empty()) session = "tensorfetch-" + std::to_string(now);
    std::string endpoint = env_("AWS_ENDPOINT_URL_STS").value_or("");
    if (endpoint.empty()) endpoint = env_("AWS_ENDPOINT_URL").value_or("");
    if (endpoint.empty()) {
      std::string region = env_("AWS_REGION").value_or("");
      if (region.empty()) region = env_("AWS_DEFAULT_REGION").value_or("");
      endpoint = region.empty() ? "https://sts.amazonaws.com" : "https://sts." + region + ".amazonaws.com";
    }
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    if (auto ok = check_url_text(endpoint, "the STS endpoint"); !ok) return fail(ok.error());
    const std::string url = endpoint + "/?" +
                            sigv4_canonical_query({{"Action", "AssumeRoleWithWebIdentity"},
                                                   {"Version", "2011-06-15"},
                                                   {"RoleArn", role},
                                                   {"RoleSessionName", session},
                                                   {"WebIdentityToken", token}});
    HttpOptions options;
    options.max_parallel = 1;
    if (auto bundle = env_("CURL_CA_BUNDLE")) options.ca_file = *bundle;
    HttpClient client(options);
    HttpRequest request;
    request.url = url;
    request.max_body = 1 << 20;
    request.max_redirects = 0;
    auto results = client.perform(std::vector<HttpRequest>{request});
    const std::string where = "web identity (role " + role + ", AWS_WEB_IDENTITY_TOKEN_FILE " + token_file + ", STS " +
                              endpoint + ")";
    // (the URL holds the web identity token: never quoted in a message)
    if (!results[0]) return fail(ErrorCode::Network, where + ": STS could not be reached");
    auto credentials = parse_assume_role_with_web_identity(results[0]->body, results[0]->status, where);
    if (!credentials) return fail(credentials.error());
    return std::optional<AwsCredentials>(std::move(*credentials));
  }

  std::string where() const override {
    return "web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN)";
  }

 private:
  EnvLookup env_;
};

}  // namespace

std::optional<std::int64_t> parse_iso8601_utc(std::string_view text) {
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  char t = 0;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%c%2d:%2d:%2d", &year, &month, &day, &t, &hour, &minute, &second) != 7 ||
      (t != 'T' && t != 't' && t != ' ') || s.back() != 'Z') {
    return std::nullopt;
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  return static_cast<std::int64_t>(::timegm(&tm));
}

Result<AwsCredentials> parse_assume_role_with_web_identity(std::string_view xml, long status, const std::string& source) {
  auto events = xml_events(xml, "STS AssumeRoleWithWebIdentity");
  if (status != 200 || !events) {
    std::string code, message;
    if (events) {
      for (const auto& e : *events) {
        if (e.end && e.path.ends_with("Error/Code")) code = e.text;
        if (e.end && e.path.ends_with("Error/Message")) message = e.text;
      }
    }
    return fail(status == 200 ? ErrorCode::BadResponse : ErrorCode::Unauthorized,
                source + ": STS answered HTTP " + std::to_string(status) + (code.empty() ? "" : " " + code) +
                    (message.empty() ? "" : " (\"" + message + "\")"));
  }
  AwsCredentials c;
  std::string expiration;
  const std::string prefix = "AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/Credentials/";
  for (const auto& e : *events) {
    if (!e.end || !e.path.starts_with(prefix)) continue;
    const std::string_view field = std::string_view(e.path).substr(prefix.size());
    if (field == "AccessKeyId") c.access_key_id = e.text;
    if (field == "SecretAccessKey") c.secret_access_key = e.text;
    if (field == "SessionToken") c.session_token = e.text;
    if (field == "Expiration") expiration = e.text;
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return fail(ErrorCode::BadResponse, source + ": STS answered without credentials");
  }
  auto expires = parse_iso8601_utc(expiration);
  if (!expires) return fail(ErrorCode::BadResponse, source + ": STS answered an Expiration that is not a UTC time");
  c.expires_at = *expires;
  c.source = source;
  return c;
}

std::unique_ptr<CredentialProvider> web_identity_credentials(EnvLookup env) {
  return std::make_unique<WebIdentityProvider>(std::move(env));
}

}  // namespace tensorfetch::detail
