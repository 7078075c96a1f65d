// SPDX-License-Identifier: Apache-2.0
// The switches of the test server: what Options set at start and the runtime setters change,
// and the faults they shape responses with. Private to tools/hubserver.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "hub_server.hpp"

namespace tensorfetch::testing::detail {

/// A fault armed for `remaining` matching requests (0 off, -1 every one).
struct Trigger {
  int remaining = 0;
  std::string match;  ///< substring of the raw target or of "org/name/path" ("" = all)
  /// Whether this request is hit; counts it.
  bool take(const std::string& target, const std::string& file);
};

/// How one response body is cut, slowed or lengthened (chosen by Switches::take_body_faults).
struct BodyFaults {
  std::optional<std::uint64_t> drop_at, stall_at;
  int stall_ms = -1;
  std::uint64_t drip_bytes = 0;  ///< > 0: send this many bytes per drip_ms
  int drip_ms = 0;
  std::uint64_t pace_rate = 0;   ///< > 0: the body goes out at this many bytes per second
  std::uint64_t extra = 0;
  std::optional<OverlongMode> overlong;
  std::int64_t content_range_shift = 0;
  std::string fault;  ///< the log's name of the last fault applied ("" = none)
};

/// A fixed-window request counter ("resolvers" on the Hub).
struct RateWindow {
  int quota = 0;  ///< requests per window (0: off)
  int window_s = 300;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::int64_t window = 0;  ///< index of the current window since start
  int count = 0;            ///< requests counted in the current window

  /// The headers of one counted request.
  struct Verdict {
    bool limited = false;   ///< past the quota: answer 429
    std::string ratelimit;  ///< "resolvers";r=R;t=T
    std::string policy;     ///< "fixed window";"resolvers";q=Q;w=W
  };
  /// Restarts the window now.
  void configure(int quota, int window_s);
  /// Counts one request now; nullopt when off.
  std::optional<Verdict> count_one();
  /// The policy header for Q and W (the Hub's 3000 and 300 when off).
  std::string policy() const;
};

/// Every switch. Guarded by SwitchBoard.
struct Switches {
  int latency_ms = 0;
  bool ignore_range = false;
  std::string token;
  std::set<std::string> gated, priv;
  bool unknown_repo_401 = false;
  std::int64_t cdn_url_ttl_ms = 0;

  // Faults: each a Trigger and its parameters.
  struct Fail {  ///< fail_next: an error status instead of the answer
    Trigger when;
    int status = 503;
    int retry_after_s = 1;
    bool ratelimit_header = false;
  } fail;
  struct Drop {  ///< drop_after: close after `bytes` body bytes
    Trigger when;
    std::uint64_t bytes = 0;
  } drop;
  struct Stall {  ///< stall_after: `bytes`, then a pause of `ms` (-1: until stop), then close
    Trigger when;
    std::uint64_t bytes = 0;
    int ms = -1;
  } stall;
  struct Shift {  ///< wrong_content_range: Content-Range of a 206 shifted by `shift`
    Trigger when;
    std::int64_t shift = 1;
  } wrong_cr;
  struct Overlong {  ///< overlong_body: `extra` bytes more than declared, framed as `mode`
    Trigger when;
    std::uint64_t extra = 0;
    OverlongMode mode = OverlongMode::ContentLength;
  } overlong;
  struct Drip {  ///< drip: `bytes` body bytes per `interval_ms`
    Trigger when;
    std::uint64_t bytes = 1;
    int interval_ms = 1000;
  } drip;
  struct SlowFlows {  ///< slow_connections: file bodies on every `every`-th TCP connection paced
    std::uint64_t rate = 0;            ///< bytes per second (0: off)
    int every = 0;
    int phase = 1;                     ///< connections phase, phase + every, ... (from 1)
    std::map<int, int> ordinal;        ///< client port -> connection number (from 1)
  } slow;
  struct Header {  ///< set_header: response header `name` replaced by `value`
    Trigger when;
    std::string name, value;
  } header;
  struct Claim {  ///< a value claimed instead of the true one
    Trigger when;
    std::string value;
  };
  Claim linked_lie;  ///< resolve: X-Linked-Etag claims value (a sha256)
  Claim cdn_etag;    ///< cdn: ETag "value" instead of "<sha256>"

  int etag_change_after = -1;  ///< change_etag_after (-1 off)
  std::int64_t cdn_count = 0;  ///< CDN requests since change_etag_after was set
  std::string cdn_base;        ///< redirects to the CDN use this instead of scheme://cdn_host:port
  std::string hostile_commit;  ///< sent as X-Repo-Commit instead of the real one ("" = off)

  // The real Hub (Options::real_hub and its parts).
  bool lfs_without_etag = false;
  bool xet_etags = false;
  bool resolve_cache = false;
  bool hub_errors = false;
  std::map<std::string, std::string> aliases;
  std::set<std::string> other_tokens, disabled;
  RateWindow ratelimit;
  struct CdnFault {  ///< cdn_fault: STATUS instead of the blob
    Trigger when;
    int status = 0;
  } cdn_fault;

  /// The switches Options ask for (faults off). Throws std::invalid_argument for bad aliases
  /// or a bad CDN fault status.
  static Switches from(const Options& o);
  /// Turns the profile's behaviours on or off (real_hub).
  void set_real_hub(bool on);

  /// The body faults hitting this request (counted); `partial`: the answer is a 206.
  /// `client_port` tells the TCP connection (slow_connections).
  BodyFaults take_body_faults(const std::string& target, const std::string& file, bool partial,
                              int client_port = 0);
  /// An injected error status for this request, if fail_next hits it (counted).
  std::optional<Fail> take_fail(const std::string& target, const std::string& file);
};

/// Checks an alias OLD → NEW (forms and kinds); throws std::invalid_argument.
void check_alias(const std::string& old_id, const std::string& new_id);
/// Checks a cdn_fault status (0, 400, 403, 416); throws std::invalid_argument.
void check_cdn_fault_status(int status);

/// The switches behind a mutex. Thread-safe.
class SwitchBoard {
 public:
  explicit SwitchBoard(const Options& o) : sw_(Switches::from(o)) {}
  /// Calls f(Switches&) under the lock; returns what f returns.
  template <class F>
  auto with(F f) {
    std::lock_guard lk(mu_);
    return f(sw_);
  }

 private:
  std::mutex mu_;
  Switches sw_;
};

}  // namespace tensorfetch::testing::detail
