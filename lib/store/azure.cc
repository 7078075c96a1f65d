// SPDX-License-Identifier: Apache-2.0
#include "store/azure.h"

#include <cctype>
#include <cstdlib>
#include <ctime>
#include <optional>

#include "base/hash.h"
#include "base/text.h"
#include "hub/location.h"
#include "net/http_client.h"
#include "net/url.h"
#include "store/web_identity.h"
#include "store/xml.h"

namespace tensorfetch::detail {

namespace {

constexpr std::string_view kAzureHostSuffix = ".blob.core.windows.net";  // (hub/location.cc classifies)

Error bad_location(std::string_view shown, const std::string& why) {
  return {ErrorCode::InvalidArgument, "location " + quote_name(shown) + ": " + why};
}

bool lower_alnum(char c) {
  return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c));
}

bool account_ok(std::string_view a) {
  if (a.size() < 3 || a.size() > 24) return false;
  for (char c : a) {
    if (!lower_alnum(c)) return false;
  }
  return true;
}

// 3-63 of lower-case letters, digits and '-', starting and ending with a letter or digit, no
// "--"; or one of the special containers `$root`, `$web`.
bool container_ok(std::string_view c) {
  if (c == "$root" || c == "$web") return true;
  if (c.size() < 3 || c.size() > 63 || !lower_alnum(c.front()) || !lower_alnum(c.back())) return false;
  if (c.find("--") != std::string_view::npos) return false;
  for (char ch : c) {
    if (!(lower_alnum(ch) || ch == '-')) return false;
  }
  return true;
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool http_url_ok(std::string_view url) {
  return (url.starts_with("http://") || url.starts_with("https://")) && !url_authority(url).empty() &&
         !find_control(url, true) && url.find_first_of("?#", url.find("://") + 3) == std::string_view::npos;
}

// The value of `name` in a query (`a=1&b=2`), decoded; "" when absent.
std::string query_value(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1));
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
  }
  return {};
}

// Whether a SAS query looks like one (it has a signature) and carries nothing that could break
// the URL it is appended to.
bool sas_ok(std::string_view sas) {
  return query_value(sas, "sig").size() > 0 && !find_control(sas, true) &&
         sas.find_first_of(" #\"'<>") == std::string_view::npos;
}

}  // namespace

Result<AzureLocation> parse_azure_location(std::string_view text) {
  AzureLocation loc;
  std::string_view rest;
  // Messages show the location without its SAS.
  const std::string_view shown = text.substr(0, text.find('?'));
  if (text.starts_with("az://")) {
    rest = text.substr(5);
    const auto slash = rest.find('/');
    loc.account = std::string(rest.substr(0, slash));
    rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
    if (rest.find_first_of("?#") != std::string_view::npos) {
      return fail(bad_location(shown, "an az:// location has no query (give a SAS in AZURE_STORAGE_SAS_TOKEN)"));
    }
  } else if (classify_location(text) == LocationKind::Azure) {
    rest = text.substr(8);
    const auto host_end = rest.find_first_of("/?#");
    const std::string_view host = rest.substr(0, host_end);
    loc.account = std::string(host.substr(0, host.size() - kAzureHostSuffix.size()));
    loc.endpoint = "https://" + std::string(host);
    rest = host_end == std::string_view::npos ? std::string_view{} : rest.substr(host_end);
    if (rest.starts_with('/')) rest.remove_prefix(1);
    if (const auto hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
    if (const auto q = rest.find('?'); q != std::string_view::npos) {
      loc.sas = std::string(rest.substr(q + 1));
      rest = rest.substr(0, q);
      if (!loc.sas.empty() && !sas_ok(loc.sas)) {
        return fail(bad_location(shown, "the URL's query is not a SAS (no sig=, or characters a URL cannot hold)"));
      }
    }
  } else {
    return fail(bad_location(shown, "not an az:// location or an https://ACCOUNT.blob.core.windows.net URL"));
  }
  if (!account_ok(loc.account)) {
    return fail(bad_location(shown, quote_name(loc.account) +
                                        " is not a valid storage account name (3 to 24 lower-case letters and digits)"));
  }
  const auto slash = rest.find('/');
  loc.container = percent_decode(rest.substr(0, slash));
  if (loc.container.empty()) return fail(bad_location(shown, "no container named (az://ACCOUNT/CONTAINER/PATH)"));
  if (!container_ok(loc.container)) {
    return fail(bad_location(shown, quote_name(loc.container) +
                                        " is not a valid container name (3 to 63 lower-case letters, digits and "
                                        "single '-', starting and ending with a letter or digit)"));
  }
  if (slash != std::string_view::npos) loc.blob = percent_decode(rest.substr(slash + 1));
  if (loc.blob.starts_with('/')) return fail(bad_location(shown, "the blob name starts with '/'"));
  if (find_control(loc.blob)) return fail(bad_location(shown, "the blob name contains a control character"));
  std::string_view b = loc.blob;
  while (!b.empty()) {
    const auto s = b.find('/');
    const std::string_view seg = b.substr(0, s);
    if (seg == "." || seg == "..") return fail(bad_location(shown, "the blob name has a '.' or '..' segment"));
    if (s != std::string_view::npos && seg.empty()) return fail(bad_location(shown, "the blob name has an empty segment ('//')"));
    b = s == std::string_view::npos ? std::string_view{} : b.substr(s + 1);
  }
  return loc;
}

Result<std::map<std::string, std::string>> parse_azure_connection_string(std::string_view text, const char* variable) {
  std::map<std::string, std::string> out;
  while (!text.empty()) {
    const auto semi = text.find(';');
    const std::string part = trimmed(std::string(text.substr(0, semi)));
    text = semi == std::string_view::npos ? std::string_view{} : text.substr(semi + 1);
    if (part.empty()) continue;
    const auto eq = part.find('=');
    if (eq == std::string::npos || eq == 0) {
      return fail(ErrorCode::InvalidArgument, std::string(variable) +
                                                  " is not a connection string (a part is not NAME=VALUE; "
                                                  "parts are separated by ';')");
    }
    out[part.substr(0, eq)] = part.substr(eq + 1);  // a base64 key may end with '='
  }
  return out;
}

Result<AzureSetup> resolve_azure(const EnvLookup& env, const AzureLocation& location, bool anonymous) {
  AzureSetup setup;
  setup.account = location.account;
  auto var = [&](const char* name) -> std::string {
    auto v = env(name);
    return v ? *v : std::string();
  };
  auto use_key = [&](const std::string& encoded, const std::string& source) -> Result<void> {
    auto key = base64_decode(trimmed(encoded));
    if (!key || key->empty()) return fail(ErrorCode::InvalidArgument, "the account key in " + source + " is not base64");
    setup.auth = AzureAuth::SharedKey;
    setup.account_key = std::move(*key);
    setup.source = source;
    return {};
  };
  auto use_sas = [&](std::string sas, const std::string& source) -> Result<void> {
    sas = trimmed(std::move(sas));
    if (sas.starts_with('?')) sas.erase(0, 1);
    if (!sas_ok(sas)) {
      return fail(ErrorCode::InvalidArgument, "the SAS in " + source + " is not one (no sig=, or characters a URL cannot hold)");
    }
    setup.auth = AzureAuth::Sas;
    setup.sas = std::move(sas);
    setup.source = source;
    return {};
  };

  std::map<std::string, std::string> cs;
  const std::string cs_text = var("AZURE_STORAGE_CONNECTION_STRING");
  if (!cs_text.empty()) {
    auto parsed = parse_azure_connection_string(cs_text, "AZURE_STORAGE_CONNECTION_STRING");
    if (!parsed) return fail(parsed.error());
    cs = std::move(*parsed);
    if (auto it = cs.find("AccountName"); it != cs.end() && it->second != location.account) {
      return fail(ErrorCode::InvalidArgument, "AZURE_STORAGE_CONNECTION_STRING is for the account " +
                                                  quote_name(it->second) + ", the location names " +
                                                  quote_name(location.account));
    }
  }
  // The endpoint.
  if (!location.endpoint.empty()) {
    setup.endpoint = location.endpoint;
    setup.endpoint_source = "the location";
  } else if (auto it = cs.find("BlobEndpoint"); it != cs.end()) {
    setup.endpoint = it->second;
    setup.endpoint_source = "the BlobEndpoint of AZURE_STORAGE_CONNECTION_STRING";
  } else {
    std::string protocol = "https", suffix = "core.windows.net";
    if (auto p = cs.find("DefaultEndpointsProtocol"); p != cs.end()) protocol = p->second;
    if (auto s = cs.find("EndpointSuffix"); s != cs.end()) suffix = s->second;
    setup.endpoint = protocol + "://" + location.account + ".blob." + suffix;
    setup.endpoint_source = cs.empty() ? "Azure's default" : "AZURE_STORAGE_CONNECTION_STRING";
  }
  while (!setup.endpoint.empty() && setup.endpoint.back() == '/') setup.endpoint.pop_back();
  if (!http_url_ok(setup.endpoint)) {
    return fail(ErrorCode::InvalidArgument, "the Azure blob endpoint " + quote_name(setup.endpoint) + " (from " +
                                                setup.endpoint_source + ") is not an http(s) URL without a query");
  }
  // The credentials.
  if (anonymous) return setup;
  Result<void> used;
  // (A connection string without a key or SAS gives only the endpoint: the search goes on.)
  const auto cs_key = cs.find("AccountKey");
  const auto cs_sas = cs.find("SharedAccessSignature");
  if (!location.sas.empty()) {
    used = use_sas(location.sas, "the location's URL");
  } else if (cs_key != cs.end()) {
    used = use_key(cs_key->second, "AZURE_STORAGE_CONNECTION_STRING");
  } else if (cs_sas != cs.end()) {
    used = use_sas(cs_sas->second, "AZURE_STORAGE_CONNECTION_STRING");
  } else if (const std::string key = var("AZURE_STORAGE_ACCOUNT_KEY");
             !key.empty() && (var("AZURE_STORAGE_ACCOUNT").empty() || var("AZURE_STORAGE_ACCOUNT") == location.account)) {
    used = use_key(key, "AZURE_STORAGE_ACCOUNT_KEY");
  } else if (const std::string sas = var("AZURE_STORAGE_SAS_TOKEN"); !sas.empty()) {
    used = use_sas(sas, "AZURE_STORAGE_SAS_TOKEN");
  }
  if (!used) return fail(used.error());
  return setup;
}

std::string azure_blob_url(std::string_view endpoint, std::string_view container, std::string_view blob) {
  return std::string(endpoint) + "/" + percent_encode(container) + "/" + encode_path(blob);
}

std::string azure_list_url(std::string_view endpoint, std::string_view container, std::string_view prefix,
                           std::string_view marker) {
  std::string url = std::string(endpoint) + "/" + percent_encode(container) +
                    "?restype=container&comp=list&delimiter=%2F&prefix=" + percent_encode(prefix);
  if (!marker.empty()) url += "&marker=" + percent_encode(marker);
  return url;
}

std::string azure_time(std::int64_t unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string azure_service_sas(std::string_view account, std::string_view key, std::string_view container,
                              std::string_view blob, std::string_view permissions, std::int64_t expiry) {
  const std::string resource = blob.empty() ? "c" : "b";
  const std::string se = azure_time(expiry);
  std::string canonical = "/blob/" + std::string(account) + "/" + std::string(container);
  if (!blob.empty()) canonical += "/" + std::string(blob);
  // Versions 2020-12-06 and later: sp, st, se, canonicalized resource, si, sip, spr, sv, sr,
  // snapshot time, ses, rscc, rscd, rsce, rscl, rsct.
  const std::string to_sign = std::string(permissions) + "\n\n" + se + "\n" + canonical + "\n\n\n\n" +
                              std::string(kAzureSasVersion) + "\n" + resource + "\n\n\n\n\n\n\n";
  const std::string sig = base64_encode(hmac_sha256(key, to_sign));
  return "sv=" + std::string(kAzureSasVersion) + "&sr=" + resource + "&sp=" + std::string(permissions) +
         "&se=" + percent_encode(se) + "&sig=" + percent_encode(sig);
}

AzureSigner::AzureSigner(AzureSetup setup) : setup_(std::move(setup)) {}

Result<std::string> AzureSigner::presign(std::string_view url, std::int64_t now, std::int64_t expires_seconds) const {
  if (setup_.auth == AzureAuth::Anonymous) return std::string(url);
  const auto q = url.find('?');
  if (setup_.auth == AzureAuth::Sas) return std::string(url) + (q == std::string_view::npos ? "?" : "&") + setup_.sas;
  const std::string_view plain = url.substr(0, q);
  if (!plain.starts_with(setup_.endpoint + "/")) {
    return fail(ErrorCode::InvalidArgument, "cannot sign " + without_query(url) + ": not on the Azure endpoint " +
                                                setup_.endpoint);
  }
  const std::string_view path = plain.substr(setup_.endpoint.size() + 1);
  const auto slash = path.find('/');
  const std::string container = percent_decode(path.substr(0, slash));
  const std::string blob = slash == std::string_view::npos ? std::string() : percent_decode(path.substr(slash + 1));
  const std::string sas = azure_service_sas(setup_.account, setup_.account_key, container, blob,
                                            blob.empty() ? "l" : "r", now + expires_seconds);
  return std::string(url) + (q == std::string_view::npos ? "?" : "&") + sas;
}

std::string AzureSigner::credentials_source(std::int64_t) const {
  switch (setup_.auth) {
    case AzureAuth::SharedKey:
      return "the account key of " + setup_.account + " from " + setup_.source;
    case AzureAuth::Sas:
      return "the SAS from " + setup_.source;
    case AzureAuth::Anonymous:
      break;
  }
  return {};
}

std::int64_t AzureSigner::expires_at(std::int64_t now, std::int64_t expires_seconds) const {
  switch (setup_.auth) {
    case AzureAuth::SharedKey:
      return now + expires_seconds;
    case AzureAuth::Sas:
      return parse_iso8601_utc(query_value(setup_.sas, "se")).value_or(0);
    case AzureAuth::Anonymous:
      break;
  }
  return 0;
}

Result<AzureListPage> parse_list_blobs(std::string_view xml) {
  auto events = xml_events(xml, "List Blobs");
  if (!events) return fail(events.error());
  if (events->empty() || events->front().path != "EnumerationResults") {
    return fail(ErrorCode::BadResponse, "List Blobs: the answer is not an EnumerationResults");
  }
  AzureListPage page;
  std::optional<AzureBlob> blob;
  for (const auto& e : *events) {
    if (!e.end) {
      if (e.path == "EnumerationResults/Blobs/Blob") blob.emplace();
      continue;
    }
    if (e.path == "EnumerationResults/Blobs/Blob") {
      if (blob) page.blobs.push_back(std::move(*blob));
      blob.reset();
    } else if (blob && e.path == "EnumerationResults/Blobs/Blob/Name") {
      blob->name = e.text;
    } else if (blob && e.path == "EnumerationResults/Blobs/Blob/Properties/Content-Length") {
      const std::string s = trimmed(e.text);
      char* end = nullptr;
      blob->size = std::strtoull(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0') {
        return fail(ErrorCode::BadResponse, "List Blobs: the size of " + quote_name(blob->name) +
                                                " is not a number: " + quote_name(s));
      }
    } else if (blob && e.path == "EnumerationResults/Blobs/Blob/Properties/Etag") {
      blob->etag = trimmed(e.text);
    } else if (e.path == "EnumerationResults/Blobs/BlobPrefix/Name") {
      page.prefixes.push_back(e.text);
    } else if (e.path == "EnumerationResults/NextMarker") {
      page.next_marker = trimmed(e.text);
    }
  }
  return page;
}

Error azure_error(const AzureReply& reply, const std::string& what, const std::string& source) {
  std::string code = reply.error_code, message;
  if (auto events = xml_events(reply.body, "Azure error")) {
    for (const auto& e : *events) {
      if (!e.end) continue;
      if (e.path == "Error/Code" && code.empty()) code = trimmed(e.text);
      if (e.path == "Error/Message") message = trimmed(e.text);
    }
  }
  // Azure's message goes on with "RequestId:...\nTime:...": its first line is the words.
  message = message.substr(0, message.find_first_of("\r\n"));
  if (message.size() > 300) message = message.substr(0, 300) + "...";
  if (code.size() > 100 || find_control(code)) code.clear();
  if (code.empty()) {
    code = reply.status == 404 ? "NotFound" : reply.status == 403 ? "Forbidden" : reply.status == 503 ? "ServerBusy" : "";
  }
  const std::string creds = source.empty() ? "an anonymous request (no credentials)" : source;
  std::string text = what + ": Azure answered HTTP " + std::to_string(reply.status) + (code.empty() ? "" : " " + code) +
                     (message.empty() ? "" : " (\"" + message + "\")");
  ErrorCode kind = ErrorCode::Network;
  if (code == "BlobNotFound") {
    kind = ErrorCode::RemoteNotFound;
    text += ": no such blob in the container";
  } else if (code == "ContainerNotFound") {
    kind = ErrorCode::RemoteNotFound;
    text += ": no such container in the account";
  } else if (code == "ResourceNotFound" || code == "NotFound") {
    kind = ErrorCode::RemoteNotFound;
    text += source.empty() ? ": not found (or not readable anonymously: give credentials)" : ": not found";
  } else if ((code == "AuthenticationFailed" || code == "AuthorizationFailure") && !source.empty()) {
    // (Azure says AuthenticationFailed for a signature it cannot match; azurite AuthorizationFailure.)
    kind = ErrorCode::Unauthorized;
    text += source.starts_with("the account key")
                ? ": the signature was refused: the account key does not match the account's (" + creds + ")"
                : ": the signature was refused: the SAS is not valid for this resource, or has expired (" + creds + ")";
  } else if (code == "NoAuthenticationInformation" || code == "PublicAccessNotPermitted" ||
             (source.empty() && (reply.status == 401 || reply.status == 403))) {
    kind = ErrorCode::Unauthorized;
    text += ": the container is not public: give credentials (AZURE_STORAGE_CONNECTION_STRING, "
            "AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN)";
  } else if (code.starts_with("Authorization") || code == "Forbidden" || code == "InsufficientAccountPermissions") {
    kind = ErrorCode::Unauthorized;
    text += ": access denied to " + creds;
  } else if (code == "ServerBusy" || reply.status == 503 || reply.status == 429) {
    kind = ErrorCode::RateLimited;
    text += ": the store asked to slow down, and still did after every retry";
  } else if (reply.status == 412 || code == "ConditionNotMet") {
    kind = ErrorCode::Integrity;
    text += ": the blob changed since it was opened (ETag no longer matches)";
  }
  return {kind, redact_signed_urls(text)};
}

}  // namespace tensorfetch::detail
