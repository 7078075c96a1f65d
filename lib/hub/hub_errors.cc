// SPDX-License-Identifier: Apache-2.0
#include "hub/hub_errors.h"

#include <charconv>

namespace tensorfetch::detail {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<std::uint64_t> number(std::string_view s) {
  s = trim(s);
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Calls f(key, value) for every `key=value` parameter and f("", item) for every bare item of
// a structured-field list such as `"fixed window";"resolvers";q=3000;w=300`.
template <class F>
void for_each_param(std::string_view text, F f) {
  while (!text.empty()) {
    auto end = text.find_first_of(";,");
    std::string_view item = trim(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      if (item.size() >= 2 && item.front() == '"' && item.back() == '"') item = item.substr(1, item.size() - 2);
      f(std::string_view{}, item);
    } else {
      f(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
    }
  }
}

bool hex_of_length(std::string_view s, std::size_t n) noexcept {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string plural(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::optional<RateLimitInfo> parse_rate_limit(std::string_view ratelimit, std::string_view policy) {
  RateLimitInfo info;
  bool any = false;
  for_each_param(ratelimit, [&](std::string_view key, std::string_view value) {
    if (key.empty()) {
      if (info.bucket.empty()) info.bucket = std::string(value);
    } else if (key == "r") {
      info.remaining = number(value);
      any = any || info.remaining.has_value();
    } else if (key == "t") {
      info.reset_s = number(value);
      any = any || info.reset_s.has_value();
    }
  });
  if (!any) return std::nullopt;
  for_each_param(policy, [&](std::string_view key, std::string_view value) {
    if (key == "q") info.quota = number(value);
    if (key == "w") info.window_s = number(value);
  });
  return info;
}

std::string describe_rate_limit(const RateLimitInfo& info) {
  std::string s = "(";
  if (info.remaining) {
    s += std::to_string(*info.remaining);
    if (info.quota) s += " of " + std::to_string(*info.quota);
    s += " requests left";
    if (info.window_s) s += " in the " + std::to_string(*info.window_s) + " s";
    if (!info.bucket.empty()) s += std::string(info.window_s ? " " : " in the ") + "\"" + info.bucket + "\"";
    if (info.window_s || !info.bucket.empty()) s += " window";
  }
  if (info.reset_s) {
    if (s.size() > 1) s += ", which ";
    s += "resets in " + plural(*info.reset_s, "second", "seconds");
  }
  return s + ")";
}

bool hub_error_is_final(const HubReply& r) noexcept {
  return r.error_code == "RepoNotFound" || r.error_code == "RevisionNotFound" || r.error_code == "GatedRepo" ||
         r.status == 401 || r.status == 403 || r.status == 429 || r.status >= 500;
}

Error hub_error(const HubReply& r, const HubAsk& ask) {
  const std::string status = "HTTP " + std::to_string(r.status);
  const std::string where = (ask.what.empty() ? std::string() : ask.what + " ") + "(" + r.url + ")";
  const std::string repo = ask.repo.empty() ? std::string("the repository") : ask.repo;
  const bool token = !ask.token_source.empty();
  const std::string repo_page = ask.endpoint.empty() || ask.repo_path.empty() ? std::string()
                                                                              : " at " + ask.endpoint + "/" + ask.repo_path;
  // A bad token is said first: with it, the Hub answers 401 whatever was asked.
  if (r.status == 401 && r.error_message.starts_with("Invalid credentials")) {
    return {ErrorCode::Unauthorized,
            "the Hub refused the token from " + (token ? ask.token_source : std::string("the request")) +
                " as invalid (" + status + " \"" + r.error_message + "\"): it may be expired or revoked; "
                "create a new one at https://huggingface.co/settings/tokens, or unset it to read public repos: " +
                where};
  }
  if (r.error_message == "Access to this resource is disabled.") {
    return {ErrorCode::Unauthorized, repo + " has been disabled on the Hub (" + status + "): " + where};
  }
  if (r.error_code == "GatedRepo") {
    if (!token) {
      return {ErrorCode::Unauthorized, repo + " is gated (" + status + "): accept its conditions on the Hub" + repo_page +
                                           ", then set HF_TOKEN to a token of that account: " + where};
    }
    return {ErrorCode::Unauthorized, repo + " is gated and the account of the token from " + ask.token_source +
                                         " has no access (" + status + "): accept its conditions" + repo_page +
                                         " (access may await approval): " + where};
  }
  if (r.error_code == "RevisionNotFound") {
    return {ErrorCode::RemoteNotFound,
            "revision '" + ask.revision + "' not found in " + repo + " (" + status + "): " + where};
  }
  if (r.error_code == "EntryNotFound") {
    return {ErrorCode::RemoteNotFound, repo + " at revision '" + ask.revision + "' has no file " +
                                           (ask.what.empty() ? std::string("there") : ask.what) + " (" + status +
                                           "): " + r.url};
  }
  if (r.error_code == "RepoNotFound" || (r.status == 401 && !ask.repo.empty())) {
    if (!token) {
      return {ErrorCode::RemoteNotFound, "repository " + repo + " not found (" + status +
                                             "); if it is private or gated, set HF_TOKEN (or log in with `hf auth "
                                             "login`): " + where};
    }
    return {ErrorCode::RemoteNotFound, "repository " + repo + " not found, or the account of the token from " +
                                           ask.token_source +
                                           " cannot see it (" + status + "): " + where};
  }
  if (r.status == 401) {
    return {ErrorCode::Unauthorized, status + (token ? ": the token from " + ask.token_source + " was not accepted: "
                                                     : ": authentication required; set HF_TOKEN: ") + where};
  }
  if (r.status == 403) {
    return {ErrorCode::Unauthorized,
            status + " forbidden" + (token ? " (the token from " + ask.token_source + " may lack read access)" : "") +
                ": " + where};
  }
  if (r.status == 404) return {ErrorCode::RemoteNotFound, "not found (" + status + "): " + where};
  if (r.status == 429 || r.status == 503) {
    std::string msg = status + (r.status == 429 ? " (rate limited)" : " (service unavailable)") + " after " +
                      plural(static_cast<std::uint64_t>(r.attempts), "attempt", "attempts");
    if (auto info = parse_rate_limit(r.ratelimit, r.ratelimit_policy)) msg += " " + describe_rate_limit(*info);
    if (r.status == 429 && !token && !ask.repo.empty()) msg += "; a token (HF_TOKEN) raises the Hub's limits";
    return {ErrorCode::RateLimited, msg + ": " + where};
  }
  if (r.status >= 500) return {ErrorCode::Network, "server error " + status + ": " + where};
  return {ErrorCode::BadResponse, "unexpected " + status + ": " + where};
}

std::string describe_wait(const HttpWait& w) {
  if (!w.headers) return {};
  auto get = [&](const char* name) {
    auto it = w.headers->find(name);
    return it == w.headers->end() ? std::string() : it->second;
  };
  if (auto info = parse_rate_limit(get("ratelimit"), get("ratelimit-policy"))) return describe_rate_limit(*info);
  if (auto ra = get("retry-after"); !ra.empty()) return "(Retry-After: " + ra + ")";
  return {};
}

bool is_commit_id(std::string_view s) noexcept { return hex_of_length(s, 40); }

bool is_sha256_hex(std::string_view s) noexcept { return hex_of_length(s, 64); }

}  // namespace tensorfetch::detail
