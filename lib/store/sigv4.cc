// SPDX-License-Identifier: Apache-2.0
#include "store/sigv4.h"

#include <algorithm>
#include <ctime>

#include "base/hash.h"
#include "base/text.h"

namespace tensorfetch::detail {

namespace {

// A header value as SigV4 canonicalizes it: leading and trailing spaces removed, inner runs
// of spaces collapsed to one.
std::string canonical_value(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// Lower-case names, canonical values, sorted by name (stable: repeats keep their order).
SigV4Pairs canonical_headers(const SigV4Pairs& headers) {
  SigV4Pairs out;
  for (const auto& [name, value] : headers) out.emplace_back(ascii_lower(name), canonical_value(value));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace

std::string amz_date(std::int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string sigv4_canonical_query(const SigV4Pairs& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) encoded.emplace_back(percent_encode(name), percent_encode(value));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

std::string sigv4_signed_headers(const SigV4Pairs& headers) {
  std::string out;
  std::string last;
  for (const auto& [name, value] : canonical_headers(headers)) {
    if (!out.empty() && name == last) continue;
    if (!out.empty()) out += ';';
    out += name;
    last = name;
  }
  return out;
}

std::string sigv4_canonical_request(const SigV4Request& request) {
  std::string out = request.method + "\n";
  out += request.path.empty() ? "/" : request.path;
  out += "\n" + sigv4_canonical_query(request.query) + "\n";
  const SigV4Pairs headers = canonical_headers(request.headers);
  for (std::size_t i = 0; i < headers.size();) {
    std::string line = headers[i].first + ":" + headers[i].second;
    std::size_t j = i + 1;
    for (; j < headers.size() && headers[j].first == headers[i].first; ++j) line += "," + headers[j].second;
    out += line + "\n";
    i = j;
  }
  out += "\n" + sigv4_signed_headers(request.headers) + "\n" + request.payload_hash;
  return out;
}

std::string sigv4_credential_scope(std::string_view date, const SigV4Scope& scope) {
  return std::string(date.substr(0, 8)) + "/" + scope.region + "/" + scope.service + "/aws4_request";
}

std::string sigv4_string_to_sign(std::string_view canonical_request, std::string_view date, const SigV4Scope& scope) {
  return "AWS4-HMAC-SHA256\n" + std::string(date) + "\n" + sigv4_credential_scope(date, scope) + "\n" +
         sha256_hex(canonical_request);
}

std::string sigv4_signature(std::string_view secret, std::string_view date, const SigV4Scope& scope,
                            std::string_view string_to_sign) {
  const std::string k_date = hmac_sha256("AWS4" + std::string(secret), date.substr(0, 8));
  const std::string k_region = hmac_sha256(k_date, scope.region);
  const std::string k_service = hmac_sha256(k_region, scope.service);
  const std::string k_signing = hmac_sha256(k_service, "aws4_request");
  const std::string mac = hmac_sha256(k_signing, string_to_sign);
  return to_hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
}

SigV4Pairs sigv4_sign_headers(const SigV4Request& request, const AwsCredentials& credentials, const SigV4Scope& scope,
                              std::int64_t unix_seconds) {
  const std::string date = amz_date(unix_seconds);
  SigV4Pairs added{{"x-amz-date", date}};
  if (!credentials.session_token.empty()) added.emplace_back("x-amz-security-token", credentials.session_token);
  SigV4Request signed_request = request;
  signed_request.headers.insert(signed_request.headers.end(), added.begin(), added.end());
  const std::string canonical = sigv4_canonical_request(signed_request);
  const std::string signature =
      sigv4_signature(credentials.secret_access_key, date, scope, sigv4_string_to_sign(canonical, date, scope));
  added.emplace_back("Authorization", "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" +
                                          sigv4_credential_scope(date, scope) +
                                          ", SignedHeaders=" + sigv4_signed_headers(signed_request.headers) +
                                          ", Signature=" + signature);
  return added;
}

std::string sigv4_presign_query(SigV4Request request, const AwsCredentials& credentials, const SigV4Scope& scope,
                                std::int64_t unix_seconds, std::int64_t expires_seconds) {
  const std::string date = amz_date(unix_seconds);
  if (request.payload_hash.empty()) request.payload_hash = "UNSIGNED-PAYLOAD";
  request.query.emplace_back("X-Amz-Algorithm", "AWS4-HMAC-SHA256");
  request.query.emplace_back("X-Amz-Credential", credentials.access_key_id + "/" + sigv4_credential_scope(date, scope));
  request.query.emplace_back("X-Amz-Date", date);
  request.query.emplace_back("X-Amz-Expires", std::to_string(std::clamp<std::int64_t>(expires_seconds, 1, 604800)));
  request.query.emplace_back("X-Amz-SignedHeaders", sigv4_signed_headers(request.headers));
  if (!credentials.session_token.empty()) request.query.emplace_back("X-Amz-Security-Token", credentials.session_token);
  const std::string canonical = sigv4_canonical_request(request);
  const std::string signature =
      sigv4_signature(credentials.secret_access_key, date, scope, sigv4_string_to_sign(canonical, date, scope));
  return sigv4_canonical_query(request.query) + "&X-Amz-Signature=" + signature;
}

}  // namespace tensorfetch::detail
