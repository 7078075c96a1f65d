// SPDX-License-Identifier: Apache-2.0
// The switches of the test server (see switches_internal.h) and HubServer's runtime setters.
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "hash_internal.h"
#include "server_internal.h"

namespace tensorfetch::testing {

namespace detail {

bool Trigger::take(const std::string& target, const std::string& file) {
  if (remaining == 0) return false;
  if (!match.empty() && target.find(match) == std::string::npos &&
      file.find(match) == std::string::npos) {
    return false;
  }
  if (remaining > 0) --remaining;
  return true;
}

namespace {

constexpr int kHubQuota = 3000;   // the Hub's "resolvers" quota ...
constexpr int kHubWindowS = 300;  // ... per fixed window of 5 minutes

// Segments of a repo id after an optional "datasets/"; empty if malformed.
std::vector<std::string_view> id_parts(std::string_view id, bool& dataset) {
  dataset = id.rfind("datasets/", 0) == 0;
  if (dataset) id.remove_prefix(9);
  std::vector<std::string_view> parts;
  std::size_t i = 0;
  while (i <= id.size()) {
    auto j = std::min(id.find('/', i), id.size());
    std::string_view part = id.substr(i, j - i);
    bool ok = !part.empty() && part != "." && part != ".." &&
              std::none_of(part.begin(), part.end(), [](char c) {
                return static_cast<unsigned char>(c) < 0x21 || c == '\\' || c == '?' || c == '#';
              });
    if (!ok) return {};
    parts.push_back(part);
    i = j + 1;
  }
  return parts.size() <= 2 ? parts : std::vector<std::string_view>{};
}

}  // namespace

void check_alias(const std::string& old_id, const std::string& new_id) {
  bool old_dataset = false, new_dataset = false;
  auto from = id_parts(old_id, old_dataset);
  auto to = id_parts(new_id, new_dataset);
  if (from.empty()) throw std::invalid_argument("alias: bad repo id '" + old_id + "'");
  if (to.size() != 2) throw std::invalid_argument("alias: '" + new_id + "' is not ORG/NAME");
  if (old_dataset != new_dataset) {
    throw std::invalid_argument("alias: " + old_id + " and " + new_id + " are of different kinds");
  }
  if (old_id == new_id) throw std::invalid_argument("alias: " + old_id + " names itself");
}

void check_cdn_fault_status(int status) {
  if (status != 0 && status != 400 && status != 403 && status != 416) {
    throw std::invalid_argument("cdn_fault: status " + std::to_string(status) +
                                " is not 400, 403 or 416");
  }
}

void RateWindow::configure(int q, int w) {
  quota = std::max(q, 0);
  window_s = std::max(w, 1);
  start = std::chrono::steady_clock::now();
  window = 0;
  count = 0;
}

std::string RateWindow::policy() const {
  int q = quota > 0 ? quota : kHubQuota;
  int w = quota > 0 ? window_s : kHubWindowS;
  return "\"fixed window\";\"resolvers\";q=" + std::to_string(q) + ";w=" + std::to_string(w);
}

std::optional<RateWindow::Verdict> RateWindow::count_one() {
  if (quota <= 0) return std::nullopt;
  const std::int64_t window_ms = std::int64_t{window_s} * 1000;
  const std::int64_t elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count();
  const std::int64_t k = elapsed / window_ms;
  if (k != window) {
    window = k;
    count = 0;
  }
  ++count;
  const std::int64_t left_s = ((k + 1) * window_ms - elapsed + 999) / 1000;
  Verdict v;
  v.limited = count > quota;
  v.ratelimit = "\"resolvers\";r=" + std::to_string(std::max(quota - count, 0)) +
                ";t=" + std::to_string(left_s);
  v.policy = policy();
  return v;
}

void Switches::set_real_hub(bool on) {
  lfs_without_etag = xet_etags = resolve_cache = hub_errors = on;
  if (!on)
    ratelimit.configure(0, ratelimit.window_s);
  else if (ratelimit.quota == 0)
    ratelimit.configure(kHubQuota, kHubWindowS);
}

Switches Switches::from(const Options& o) {
  for (const auto& [old_id, new_id] : o.repo_aliases) check_alias(old_id, new_id);
  check_cdn_fault_status(o.cdn_fault_status);
  Switches s;
  s.ratelimit.configure(o.ratelimit_quota, o.ratelimit_window_s);
  if (o.real_hub) s.set_real_hub(true);
  s.lfs_without_etag |= o.lfs_without_etag;
  s.xet_etags |= o.xet_etags;
  s.resolve_cache |= o.resolve_cache;
  s.hub_errors |= o.hub_errors;
  s.aliases = o.repo_aliases;
  s.other_tokens = {o.other_tokens.begin(), o.other_tokens.end()};
  s.disabled = {o.disabled_repos.begin(), o.disabled_repos.end()};
  if (o.cdn_fault_status != 0)
    s.cdn_fault = {{o.cdn_fault_n, o.cdn_fault_match}, o.cdn_fault_status};
  s.latency_ms = o.latency_ms;
  s.ignore_range = o.ignore_range;
  s.token = o.token;
  s.gated = {o.gated_repos.begin(), o.gated_repos.end()};
  s.priv = {o.private_repos.begin(), o.private_repos.end()};
  s.unknown_repo_401 = o.unknown_repo_401;
  s.cdn_url_ttl_ms = o.cdn_url_ttl_ms;
  return s;
}

BodyFaults Switches::take_body_faults(const std::string& target, const std::string& file,
                                      bool partial, int client_port) {
  BodyFaults f;
  if (slow.rate > 0 && slow.every > 0) {
    auto [it, fresh] = slow.ordinal.emplace(client_port, static_cast<int>(slow.ordinal.size()) + 1);
    (void)fresh;
    if ((it->second - slow.phase) % slow.every == 0 && it->second >= slow.phase) {
      f.pace_rate = slow.rate;
      f.fault = "slow_connection";
    }
  }
  if (stall.when.take(target, file)) {
    f.stall_at = stall.bytes;
    f.stall_ms = stall.ms;
    f.fault = "stall";
  }
  if (drop.when.take(target, file)) {
    f.drop_at = drop.bytes;
    f.fault = "drop";
  }
  if (drip.when.take(target, file)) {
    f.drip_bytes = std::max<std::uint64_t>(1, drip.bytes);
    f.drip_ms = drip.interval_ms;
    f.fault = "drip";
  }
  if (overlong.when.take(target, file)) {
    f.extra = overlong.extra;
    f.overlong = overlong.mode;
    f.fault = "overlong";
  }
  if (partial && wrong_cr.when.take(target, file)) {
    f.content_range_shift = wrong_cr.shift;
    f.fault = "wrong_content_range";
  }
  return f;
}

std::optional<Switches::Fail> Switches::take_fail(const std::string& target,
                                                  const std::string& file) {
  if (!fail.when.take(target, file)) return std::nullopt;
  return fail;
}

}  // namespace detail

using detail::Switches;

void HubServer::set_latency_ms(int ms) {
  impl_->switches.with([&](Switches& sw) { sw.latency_ms = std::max(ms, 0); });
}
void HubServer::set_ignore_range(bool on) {
  impl_->switches.with([&](Switches& sw) { sw.ignore_range = on; });
}
void HubServer::fail_next(int n, int status, int retry_after_s, bool use_ratelimit_header,
                          std::string match) {
  impl_->switches.with([&](Switches& sw) {
    sw.fail = {{n, std::move(match)}, status, retry_after_s, use_ratelimit_header};
  });
}
void HubServer::drop_after(std::uint64_t bytes, int n, std::string match) {
  impl_->switches.with([&](Switches& sw) { sw.drop = {{n, std::move(match)}, bytes}; });
}
void HubServer::stall_after(std::uint64_t bytes, int n, std::string match, int stall_ms) {
  impl_->switches.with([&](Switches& sw) { sw.stall = {{n, std::move(match)}, bytes, stall_ms}; });
}
void HubServer::wrong_content_range(int n, std::string match, std::int64_t shift) {
  impl_->switches.with([&](Switches& sw) { sw.wrong_cr = {{n, std::move(match)}, shift}; });
}
void HubServer::overlong_body(std::uint64_t extra, int n, std::string match, OverlongMode mode) {
  impl_->switches.with([&](Switches& sw) { sw.overlong = {{n, std::move(match)}, extra, mode}; });
}
void HubServer::drip(std::uint64_t bytes, int interval_ms, int n, std::string match) {
  impl_->switches.with([&](Switches& sw) {
    sw.drip = {{n, std::move(match)}, bytes, interval_ms};
  });
}
void HubServer::slow_connections(std::uint64_t rate, int every, int phase) {
  impl_->switches.with([&](Switches& sw) {
    sw.slow = {};
    sw.slow.rate = rate;
    sw.slow.every = every;
    sw.slow.phase = phase;
  });
}
void HubServer::set_header(std::string name, std::string value, int n, std::string match) {
  impl_->switches.with([&](Switches& sw) {
    sw.header = {{n, std::move(match)}, std::move(name), std::move(value)};
  });
}
void HubServer::set_linked_etag(std::string sha256, std::string match) {
  impl_->switches.with([&](Switches& sw) {
    sw.linked_lie = {{sha256.empty() ? 0 : -1, std::move(match)}, std::move(sha256)};
  });
}
void HubServer::set_cdn_etag(std::string etag, std::string match) {
  impl_->switches.with([&](Switches& sw) {
    sw.cdn_etag = {{etag.empty() ? 0 : -1, std::move(match)}, std::move(etag)};
  });
}
void HubServer::change_etag_after(int cdn_requests) {
  impl_->switches.with([&](Switches& sw) {
    sw.etag_change_after = cdn_requests;
    sw.cdn_count = 0;
  });
}
void HubServer::set_token(std::string token) {
  impl_->switches.with([&](Switches& sw) { sw.token = std::move(token); });
}
void HubServer::set_gated_repos(std::vector<std::string> repos) {
  impl_->switches.with([&](Switches& sw) { sw.gated = {repos.begin(), repos.end()}; });
}
void HubServer::set_private_repos(std::vector<std::string> repos) {
  impl_->switches.with([&](Switches& sw) { sw.priv = {repos.begin(), repos.end()}; });
}
void HubServer::set_unknown_repo_401(bool on) {
  impl_->switches.with([&](Switches& sw) { sw.unknown_repo_401 = on; });
}
void HubServer::set_cdn_url_ttl_ms(std::int64_t ms) {
  impl_->switches.with([&](Switches& sw) { sw.cdn_url_ttl_ms = ms; });
}
void HubServer::set_cdn_base(std::string base) {
  impl_->switches.with([&](Switches& sw) { sw.cdn_base = std::move(base); });
}
void HubServer::set_hostile_commit(std::string value) {
  impl_->switches.with([&](Switches& sw) { sw.hostile_commit = std::move(value); });
}
void HubServer::reset_switches() {
  impl_->switches.with([&](Switches& sw) { sw = Switches::from(impl_->opt); });
}

void HubServer::set_real_hub(bool on) {
  impl_->switches.with([&](Switches& sw) { sw.set_real_hub(on); });
}
void HubServer::set_lfs_without_etag(bool on) {
  impl_->switches.with([&](Switches& sw) { sw.lfs_without_etag = on; });
}
void HubServer::set_xet_etags(bool on) {
  impl_->switches.with([&](Switches& sw) { sw.xet_etags = on; });
}
void HubServer::set_resolve_cache(bool on) {
  impl_->switches.with([&](Switches& sw) { sw.resolve_cache = on; });
}
void HubServer::set_hub_errors(bool on) {
  impl_->switches.with([&](Switches& sw) { sw.hub_errors = on; });
}
void HubServer::set_repo_alias(std::string old_id, std::string new_id) {
  if (!new_id.empty()) detail::check_alias(old_id, new_id);
  impl_->switches.with([&](Switches& sw) {
    if (new_id.empty())
      sw.aliases.erase(old_id);
    else
      sw.aliases[old_id] = std::move(new_id);
  });
}
void HubServer::set_repo_aliases(std::map<std::string, std::string> aliases) {
  for (const auto& [old_id, new_id] : aliases) detail::check_alias(old_id, new_id);
  impl_->switches.with([&](Switches& sw) { sw.aliases = std::move(aliases); });
}
void HubServer::set_rate_limit(int quota, int window_s) {
  impl_->switches.with([&](Switches& sw) { sw.ratelimit.configure(quota, window_s); });
}
void HubServer::set_other_tokens(std::vector<std::string> tokens) {
  impl_->switches.with([&](Switches& sw) { sw.other_tokens = {tokens.begin(), tokens.end()}; });
}
void HubServer::set_disabled_repos(std::vector<std::string> repos) {
  impl_->switches.with([&](Switches& sw) { sw.disabled = {repos.begin(), repos.end()}; });
}
void HubServer::cdn_fault(int status, int n, std::string match) {
  detail::check_cdn_fault_status(status);
  impl_->switches.with([&](Switches& sw) {
    sw.cdn_fault = {{status == 0 ? 0 : n, std::move(match)}, status};
  });
}

std::string HubServer::xet_etag(std::string_view sha256) {
  return "\"" + detail::sha256_hex("xet:" + std::string(sha256)) + "\"";
}

std::string HubServer::changed_etag(std::string_view sha256) {
  return "\"" + detail::sha256_hex(std::string(sha256) + ":changed") + "\"";
}

}  // namespace tensorfetch::testing
