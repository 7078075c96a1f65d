// SPDX-License-Identifier: Apache-2.0
// The switches of the test server (see switches_internal.h) and HubServer's runtime setters.
#include <algorithm>
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

Switches Switches::from(const Options& o) {
  Switches s;
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
                                      bool partial) {
  BodyFaults f;
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

std::string HubServer::changed_etag(std::string_view sha256) {
  return "\"" + detail::sha256_hex(std::string(sha256) + ":changed") + "\"";
}

}  // namespace tensorfetch::testing
