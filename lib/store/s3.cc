// SPDX-License-Identifier: Apache-2.0
#include "store/s3.h"

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <functional>

#include "base/text.h"
#include "net/http_client.h"
#include "net/url.h"
#include "store/xml.h"

namespace tensorfetch::detail {

namespace {

Error bad_location(std::string_view text, const std::string& why) {
  return {ErrorCode::InvalidArgument, "location " + quote_name(text) + ": " + why};
}

bool bucket_ok(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
          c == '.' || c == '_')) {
      return false;
    }
  }
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  return alnum(b.front()) && alnum(b.back()) && b.find("..") == std::string_view::npos;
}

// A URL taken apart: scheme://authority, the path as sent, and the decoded query parameters.
struct UrlParts {
  std::string authority;  // scheme://host[:port]
  std::string host;       // host[:port], as the Host header
  std::string path;
  SigV4Pairs query;
};

UrlParts split_url(std::string_view url) {
  UrlParts p;
  const auto scheme_end = url.find("://");
  const auto host_begin = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  const auto path_begin = url.find_first_of("/?#", host_begin);
  p.host = std::string(url.substr(host_begin, path_begin - host_begin));
  p.authority = std::string(url.substr(0, path_begin));
  if (path_begin == std::string_view::npos) return p;
  std::string_view rest = url.substr(path_begin);
  rest = rest.substr(0, rest.find('#'));
  const auto q = rest.find('?');
  p.path = std::string(rest.substr(0, q));
  if (q == std::string_view::npos) return p;
  std::string_view query = rest.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (!pair.empty()) {
      const auto eq = pair.find('=');
      p.query.emplace_back(percent_decode(pair.substr(0, eq)),
                           eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1)));
    }
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
  }
  return p;
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

}  // namespace

Result<S3Location> parse_s3_location(std::string_view text) {
  if (!text.starts_with("s3://")) return fail(bad_location(text, "not an s3:// location"));
  std::string_view rest = text.substr(5);
  const auto slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (!bucket_ok(loc.bucket)) {
    return fail(bad_location(text, quote_name(loc.bucket) +
                                       " is not a valid bucket name (3 to 63 lower-case letters, digits, '.', '-', "
                                       "starting and ending with a letter or digit)"));
  }
  if (slash != std::string_view::npos) loc.key = std::string(rest.substr(slash + 1));
  if (loc.key.starts_with('/')) return fail(bad_location(text, "the key starts with '/'"));
  if (find_control(loc.key)) return fail(bad_location(text, "the key contains a control character"));
  std::string_view k = loc.key;
  while (!k.empty()) {
    const auto s = k.find('/');
    const std::string_view seg = k.substr(0, s);
    if (seg == "." || seg == "..") return fail(bad_location(text, "the key has a '.' or '..' segment"));
    if (s != std::string_view::npos && seg.empty()) return fail(bad_location(text, "the key has an empty segment ('//')"));
    k = s == std::string_view::npos ? std::string_view{} : k.substr(s + 1);
  }
  return loc;
}

Result<S3Endpoint> resolve_s3_endpoint(const EnvLookup& env, const std::map<std::string, std::string>& profile,
                                       const S3Options& options) {
  S3Endpoint ep;
  auto setting = [&](const char* key) -> std::string {
    auto it = profile.find(key);
    return it == profile.end() ? std::string() : it->second;
  };
  if (auto r = env("AWS_REGION"); r && !r->empty()) {
    ep.region = *r;
  } else if (auto d = env("AWS_DEFAULT_REGION"); d && !d->empty()) {
    ep.region = *d;
  } else if (auto p = setting("region"); !p.empty()) {
    ep.region = p;
  }
  for (char c : ep.region) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) {
      return fail(ErrorCode::InvalidArgument, "AWS region " + quote_name(ep.region) + " is not a region name");
    }
  }
  if (!options.endpoint.empty()) {
    ep.endpoint = options.endpoint;
    ep.endpoint_source = "the S3 endpoint option";
  } else if (auto e = env("AWS_ENDPOINT_URL_S3"); e && !e->empty()) {
    ep.endpoint = *e;
    ep.endpoint_source = "AWS_ENDPOINT_URL_S3";
  } else if (auto g = env("AWS_ENDPOINT_URL"); g && !g->empty()) {
    ep.endpoint = *g;
    ep.endpoint_source = "AWS_ENDPOINT_URL";
  } else if (auto s = setting("s3.endpoint_url"); !s.empty()) {
    ep.endpoint = s;
    ep.endpoint_source = "the profile's s3 endpoint_url";
  } else if (auto u = setting("endpoint_url"); !u.empty()) {
    ep.endpoint = u;
    ep.endpoint_source = "the profile's endpoint_url";
  }
  while (!ep.endpoint.empty() && ep.endpoint.back() == '/') ep.endpoint.pop_back();
  if (ep.endpoint.empty()) {
    ep.endpoint = "https://s3." + ep.region + ".amazonaws.com";
    ep.path_style = false;
  } else {
    if (!(ep.endpoint.starts_with("http://") || ep.endpoint.starts_with("https://")) ||
        url_authority(ep.endpoint).empty() || find_control(ep.endpoint, true) ||
        ep.endpoint.find_first_of("?#", ep.endpoint.find("://") + 3) != std::string::npos) {
      return fail(ErrorCode::InvalidArgument, "S3 endpoint " + quote_name(ep.endpoint) + " (from " +
                                                  ep.endpoint_source + ") is not an http(s) URL without a query");
    }
    ep.path_style = true;
  }
  ep.anonymous = options.no_sign_request;
  return ep;
}

std::string s3_object_url(const S3Endpoint& ep, std::string_view bucket, std::string_view key) {
  if (ep.path_style || bucket.find('.') != std::string_view::npos) {
    return ep.endpoint + "/" + std::string(bucket) + "/" + encode_path(key);
  }
  const auto scheme_end = ep.endpoint.find("://") + 3;
  return ep.endpoint.substr(0, scheme_end) + std::string(bucket) + "." + ep.endpoint.substr(scheme_end) + "/" +
         encode_path(key);
}

std::string s3_list_url(const S3Endpoint& ep, std::string_view bucket, std::string_view prefix,
                        std::string_view continuation) {
  std::string url = s3_object_url(ep, bucket, "");
  SigV4Pairs query{{"list-type", "2"}, {"delimiter", "/"}, {"prefix", std::string(prefix)}};
  if (!continuation.empty()) query.emplace_back("continuation-token", std::string(continuation));
  return url + "?" + sigv4_canonical_query(query);
}

S3Signer::S3Signer(S3Endpoint endpoint, std::shared_ptr<CredentialChain> chain)
    : endpoint_(std::move(endpoint)), chain_(std::move(chain)) {}

Result<std::string> S3Signer::presign(std::string_view url, std::int64_t now, std::int64_t expires_seconds) const {
  if (endpoint_.anonymous || !chain_) return std::string(url);
  auto credentials = chain_->get(now);
  if (!credentials) return fail(credentials.error());
  UrlParts parts = split_url(url);
  SigV4Request request;
  request.method = "GET";
  request.path = parts.path;
  request.query = std::move(parts.query);
  request.headers = {{"host", parts.host}};
  const std::string query =
      sigv4_presign_query(std::move(request), *credentials, SigV4Scope{endpoint_.region, "s3"}, now, expires_seconds);
  return parts.authority + (parts.path.empty() ? "/" : parts.path) + "?" + query;
}

std::shared_ptr<S3Signer> S3Signer::in_region(const std::string& region) const {
  S3Endpoint moved = endpoint_;
  moved.region = region;
  if (moved.endpoint_source.empty()) moved.endpoint = "https://s3." + region + ".amazonaws.com";
  return std::make_shared<S3Signer>(std::move(moved), chain_);
}

std::string S3Signer::credentials_source(std::int64_t now) const {
  if (endpoint_.anonymous || !chain_) return {};
  auto c = chain_->get(now);
  return c ? "the access key " + c->access_key_id + " from " + c->source : std::string();
}

Result<S3ListPage> parse_list_objects_v2(std::string_view xml) {
  auto events = xml_events(xml, "ListObjectsV2");
  if (!events) return fail(events.error());
  if (events->empty() || events->front().path != "ListBucketResult") {
    return fail(ErrorCode::BadResponse, "ListObjectsV2: the answer is not a ListBucketResult");
  }
  S3ListPage page;
  std::optional<S3Object> object;
  for (const auto& e : *events) {
    if (!e.end) {
      if (e.path == "ListBucketResult/Contents") object.emplace();
      continue;
    }
    if (e.path == "ListBucketResult/Contents") {
      if (object) page.objects.push_back(std::move(*object));
      object.reset();
    } else if (object && e.path == "ListBucketResult/Contents/Key") {
      object->key = e.text;
    } else if (object && e.path == "ListBucketResult/Contents/Size") {
      const std::string s = trimmed(e.text);
      char* end = nullptr;
      object->size = std::strtoull(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0') {
        return fail(ErrorCode::BadResponse, "ListObjectsV2: the size of " + quote_name(object->key) +
                                                " is not a number: " + quote_name(s));
      }
    } else if (object && e.path == "ListBucketResult/Contents/ETag") {
      object->etag = trimmed(e.text);
    } else if (e.path == "ListBucketResult/CommonPrefixes/Prefix") {
      page.common_prefixes.push_back(e.text);
    } else if (e.path == "ListBucketResult/IsTruncated") {
      page.truncated = trimmed(e.text) == "true";
    } else if (e.path == "ListBucketResult/NextContinuationToken") {
      page.continuation = trimmed(e.text);
    }
  }
  if (page.truncated && page.continuation.empty()) {
    return fail(ErrorCode::BadResponse, "ListObjectsV2: a truncated listing without a NextContinuationToken");
  }
  return page;
}

S3ErrorBody parse_s3_error(std::string_view xml) {
  S3ErrorBody out;
  auto events = xml_events(xml, "S3 error");
  if (!events) return out;
  for (const auto& e : *events) {
    if (!e.end) continue;
    if (e.path == "Error/Code") out.code = trimmed(e.text);
    if (e.path == "Error/Message") out.message = trimmed(e.text);
    if (e.path == "Error/Region") out.region = trimmed(e.text);
    if (e.path == "Error/Endpoint") out.endpoint = trimmed(e.text);
  }
  return out;
}

Error s3_error(const S3Reply& reply, const std::string& what, const std::string& source) {
  const S3ErrorBody body = parse_s3_error(reply.body);
  std::string code = body.code;
  if (code.empty()) {
    code = reply.status == 404 ? "NotFound" : reply.status == 403 ? "Forbidden" : reply.status == 503 ? "SlowDown" : "";
  }
  const std::string creds = source.empty() ? "an unsigned request (no credentials)" : source;
  std::string text = what + ": S3 answered HTTP " + std::to_string(reply.status) + (code.empty() ? "" : " " + code) +
                     (body.message.empty() ? "" : " (\"" + body.message + "\")");
  ErrorCode kind = ErrorCode::Network;
  if (code == "NoSuchKey" || code == "NotFound") {
    kind = ErrorCode::RemoteNotFound;
    text += ": no such key in the bucket";
  } else if (code == "NoSuchBucket") {
    kind = ErrorCode::RemoteNotFound;
    text += ": no such bucket";
  } else if (code == "AccessDenied" || code == "Forbidden" || code == "AllAccessDisabled") {
    kind = ErrorCode::Unauthorized;
    text += ": access denied to " + creds;
  } else if (code == "InvalidAccessKeyId") {
    kind = ErrorCode::Unauthorized;
    text += ": the store does not know " + creds;
  } else if (code == "SignatureDoesNotMatch") {
    kind = ErrorCode::Unauthorized;
    text += ": the secret key does not match the access key (" + creds + ")";
  } else if (code == "ExpiredToken" || code == "TokenRefreshRequired") {
    kind = ErrorCode::Unauthorized;
    text += ": the session token of " + creds + " has expired; refresh the credentials";
  } else if (code == "InvalidToken") {
    kind = ErrorCode::Unauthorized;
    text += ": the session token of " + creds + " is not valid";
  } else if (code == "SlowDown" || reply.status == 503 || reply.status == 429) {
    kind = ErrorCode::RateLimited;
    text += ": the store asked to slow down, and still did after every retry";
  } else if (code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" ||
             code == "AuthorizationQueryParametersError" || reply.status == 301) {
    const std::string region = !reply.bucket_region.empty() ? reply.bucket_region : body.region;
    text += region.empty() ? ": the bucket is in another region or behind another endpoint"
                           : ": the bucket is in region " + region + " (set AWS_REGION=" + region + ")";
  } else if (reply.status == 412) {
    kind = ErrorCode::Integrity;
    text += ": the object changed since it was opened (ETag no longer matches)";
  }
  return {kind, redact_signed_urls(text)};
}

std::string s3_region_hint(const S3Reply& reply) {
  if (reply.status != 301 && reply.status != 400) return {};
  const S3ErrorBody body = parse_s3_error(reply.body);
  if (reply.status == 400 && body.code != "AuthorizationHeaderMalformed" &&
      body.code != "AuthorizationQueryParametersError") {
    return {};
  }
  const std::string region = !reply.bucket_region.empty() ? reply.bucket_region : body.region;
  if (region.empty() || region.size() > 32) return {};
  for (char c : region) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
      return {};
    }
  }
  return region;
}

}  // namespace tensorfetch::detail
