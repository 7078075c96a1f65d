// SPDX-License-Identifier: Apache-2.0
// The /_admin routes of the test server (never logged): the log, stats, clear, and
// /_admin/set, which maps query parameters onto HubServer's runtime setters.
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "server_internal.h"

namespace tensorfetch::testing {

namespace {

// "a,b,c" → {a, b, c}; "" → {}.
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (!s.empty() && i <= s.size()) {
    auto j = std::min(s.find(',', i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

void HubServer::Impl::handle_admin(const httplib::Request& req, httplib::Response& res,
                                   const PendingPtr& p, const detail::Route& r, HubServer& self) {
  res.status = 200;
  if (r.admin == "log") {
    std::string out;
    for (const auto& rec : self.log()) out += rec.to_json() + "\n";
    set_body(res, p, out, "application/x-ndjson");
  } else if (r.admin == "clear") {
    self.clear_log();
    set_body(res, p, "{}", "application/json");
  } else if (r.admin == "stats") {
    set_body(res, p, summarize(self.log()).to_json(), "application/json");
  } else if (r.admin == "set") {
    try {
      apply_admin_set(req, self);
      set_body(res, p, "{}", "application/json");
    } catch (const std::exception& e) {
      res.status = 400;
      set_body(res, p, nlohmann::json{{"error", e.what()}}.dump(), "application/json");
    }
  } else {
    res.status = 404;
    set_body(res, p, "unknown admin command", "text/plain");
  }
}

void HubServer::Impl::apply_admin_set(const httplib::Request& req, HubServer& self) {
  auto has = [&](const char* k) { return req.has_param(k); };
  auto str = [&](const char* k) { return req.get_param_value(k); };
  auto num = [&](const char* k, long long dflt) -> long long {
    if (!req.has_param(k)) return dflt;
    std::size_t used = 0;
    long long v = std::stoll(req.get_param_value(k), &used);
    if (used != req.get_param_value(k).size()) throw std::invalid_argument(k);
    return v;
  };
  auto i32 = [&](const char* k, long long dflt) { return static_cast<int>(num(k, dflt)); };
  auto u64 = [&](const char* k, long long dflt) {
    return static_cast<std::uint64_t>(num(k, dflt));
  };
  std::string match = has("match") ? str("match") : "";
  int n = i32("n", 1);
  if (has("reset")) self.reset_switches();
  if (has("latency_ms")) self.set_latency_ms(i32("latency_ms", 0));
  if (has("ignore_range")) self.set_ignore_range(num("ignore_range", 0) != 0);
  if (has("fail_next")) {
    self.fail_next(i32("fail_next", 0), i32("status", 503), i32("retry_after", 1),
                   num("ratelimit", 0) != 0, match);
  }
  if (has("drop_after")) self.drop_after(u64("drop_after", 0), n, match);
  if (has("stall_after")) self.stall_after(u64("stall_after", 0), n, match, i32("stall_ms", -1));
  if (has("wrong_content_range")) {
    self.wrong_content_range(i32("wrong_content_range", 1), match, num("shift", 1));
  }
  if (has("overlong")) {
    std::string mode = has("mode") ? str("mode") : "length";
    OverlongMode m = mode == "chunked" ? OverlongMode::Chunked
                     : mode == "close" ? OverlongMode::CloseDelimited
                                       : OverlongMode::ContentLength;
    self.overlong_body(u64("overlong", 0), n, match, m);
  }
  if (has("change_etag_after")) self.change_etag_after(i32("change_etag_after", -1));
  if (has("cdn_url_ttl_ms")) self.set_cdn_url_ttl_ms(num("cdn_url_ttl_ms", 0));
  if (has("slow_connections")) {
    self.slow_connections(u64("slow_connections", 0), i32("every", 4), i32("phase", 1));
  }
  if (has("drip")) self.drip(u64("drip", 1), i32("interval_ms", 1000), n, match);
  if (has("cdn_base")) self.set_cdn_base(str("cdn_base"));
  if (has("header")) self.set_header(str("header"), str("value"), n, match);
  if (has("token")) self.set_token(str("token"));
  if (has("hostile_commit")) self.set_hostile_commit(str("hostile_commit"));
  if (has("linked_etag")) self.set_linked_etag(str("linked_etag"), match);
  if (has("cdn_etag")) self.set_cdn_etag(str("cdn_etag"), match);
  if (has("unknown_repo_401")) self.set_unknown_repo_401(num("unknown_repo_401", 0) != 0);
  // The real Hub.
  if (has("real_hub")) self.set_real_hub(num("real_hub", 0) != 0);
  if (has("lfs_without_etag")) self.set_lfs_without_etag(num("lfs_without_etag", 0) != 0);
  if (has("xet_etags")) self.set_xet_etags(num("xet_etags", 0) != 0);
  if (has("resolve_cache")) self.set_resolve_cache(num("resolve_cache", 0) != 0);
  if (has("hub_errors")) self.set_hub_errors(num("hub_errors", 0) != 0);
  if (has("alias")) self.set_repo_alias(str("alias"), has("to") ? str("to") : "");
  if (has("rate_limit")) self.set_rate_limit(i32("rate_limit", 0), i32("window_s", 300));
  if (has("other_tokens")) self.set_other_tokens(split_list(str("other_tokens")));
  if (has("disabled")) self.set_disabled_repos(split_list(str("disabled")));
  if (has("cdn_fault")) self.cdn_fault(i32("cdn_fault", 0), n, match);
}

}  // namespace tensorfetch::testing
