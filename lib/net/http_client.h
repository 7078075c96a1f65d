// SPDX-License-Identifier: Apache-2.0
// Private: HTTP(S) on libcurl's multi interface. Many requests run at once (bounded), share
// connections, follow redirects one hop at a time (so credentials never leave their host and
// each hop's headers are kept), and are retried with jittered exponential backoff that honours
// Retry-After and RateLimit. Bodies are bounded: nothing is ever read into memory unbounded.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorfetch/byte_range.hpp"
#include "tensorfetch/cancel.hpp"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// Response headers: lower-case names; a repeated header keeps its last value.
using Headers = std::map<std::string, std::string>;

/// A wait a server asked for (see `HttpOptions::on_wait`).
struct HttpWait {
  std::string url;                  ///< the URL that answered
  long status = 0;                  ///< 429 or 503
  long wait_ms = 0;                 ///< how long the retry waits
  const Headers* headers = nullptr; ///< the response's headers (RateLimit, Retry-After, ...)
};

/// What several `HttpClient`s share when given the same object (`HttpOptions::share`): the DNS
/// cache and TLS sessions (a new connection resumes a session instead of a full handshake with
/// certificate checks), e.g. a checkpoint's fetches resume the sessions its open made. Not the
/// connections themselves (see http_client.cc). Thread-safe: libcurl locks it through mutexes
/// owned here. Must outlive every client using it (they hold it by `shared_ptr`).
class HttpShare {
 public:
  /// Creates an empty share.
  HttpShare();
  HttpShare(const HttpShare&) = delete;
  HttpShare& operator=(const HttpShare&) = delete;
  ~HttpShare();

  /// The libcurl share handle (`CURLSH*`), for `HttpClient` only.
  [[nodiscard]] void* handle() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Settings of an `HttpClient`. A plain value.
struct HttpOptions {
  std::size_t max_parallel = 16;       ///< transfers in flight at once
  /// true: HTTP/2 where TLS negotiates it, transfers to one host multiplexed on one connection
  /// (metadata: many small requests, one handshake). false: HTTP/1.1, every transfer in flight
  /// on a TCP connection of its own (bulk data: a CDN caps each flow, so N flows carry N times
  /// what one multiplexed connection does).
  bool multiplex = true;
  /// Shared DNS cache, TLS sessions and connections (see `HttpShare`); null: this client's own.
  std::shared_ptr<HttpShare> share;
  long connect_timeout_ms = 10'000;    ///< TCP + TLS connect
  long stall_timeout_ms = 30'000;      ///< no byte received for this long: the attempt fails
  /// Slowest acceptable transfer, in bytes per second, measured over each stall window
  /// (`stall_timeout_ms`): an attempt that received less in a window (and less than what was
  /// still to come) fails and is retried, resuming; after the retries the error names the URL,
  /// the range and the rate seen. 0: only a window without any byte fails.
  std::uint64_t min_rate = 1024;
  /// Cap on the body bytes per second of all this client's transfers together (0: none): one
  /// token bucket shared by every transfer in flight, holding at most a tenth of a second of
  /// bytes (at least 64 KiB). A transfer that finds it empty is paused (its write callback
  /// returns CURL_WRITEFUNC_PAUSE: libcurl stops reading its socket, and TCP flow control slows
  /// the sender), and the paused transfers are resumed oldest first as the bucket refills, so
  /// they share the cap evenly (streaming reads are then at most a sixteenth of a second of the
  /// cap, at least 16 KiB: short turns). Time a transfer spends paused by the cap counts neither as a
  /// stall nor against `min_rate` (libcurl's own low-speed check is off then: `stall_timeout_ms`
  /// is enforced here). The bucket lives as long as the client, across runs and `reconfigure`s
  /// that keep the rate: consecutive fetches on one client stay under the cap together.
  std::uint64_t max_rate = 0;
  int max_retries = 5;                 ///< retries after the first attempt
  long backoff_base_ms = 250;          ///< first backoff; doubles per retry, jittered
  long backoff_max_ms = 20'000;        ///< cap of one backoff
  /// A server asking to wait longer than this (Retry-After, RateLimit) is not waited for: the
  /// request fails at once. The default covers the Hub's fixed 5-minute rate-limit window.
  long retry_after_max_ms = 330'000;
  /// Response headers that name a resource's full size on a redirect hop (the Hub's
  /// `x-linked-size`, lower case): with `expected_size` and a 416's `Content-Range: bytes */N`
  /// they tell whether a 416 to a range is believable (see `HttpClient::perform`).
  std::vector<std::string> size_headers;
  std::string ca_file;                 ///< CA bundle (`--cacert`, CURL_CA_BUNDLE); empty: system
  std::string user_agent = "tensorfetch";
  /// When cancelled, `perform` stops every request within about 100 ms (they fail with
  /// `Cancelled`); a cancellable token also shortens the wait between polls to 100 ms.
  CancelToken cancel;
  /// Told before a retry that waits because the server asked (429/503 with Retry-After or
  /// RateLimit) for at least a second: the URL, status, headers and the wait. Called on the
  /// thread that runs `perform`; the wait itself still ends early when `cancel` is cancelled.
  std::function<void(const HttpWait&)> on_wait;
};

/// Receives the body of a validated 2xx response to a range request, piece by piece, instead of
/// memory: `HttpRequest::sink`. Called on the thread that runs `HttpClient::perform`.
class BodySink {
 public:
  virtual ~BodySink() = default;
  /// `data` holds the resource's bytes from `offset` on (absolute, not relative to the range).
  /// Pieces arrive in order; after a retry they continue where the last one stopped. An error
  /// stops the request at once, without a retry, and becomes its result.
  virtual Result<void> write(std::uint64_t offset, std::span<const std::byte> data) = 0;
};

/// One request. A plain value. `perform` refuses, without sending anything, a URL with a
/// space or a control character, and a token or `If-Match` with a control character (see
/// `check_url_text`, `check_header_value`).
struct HttpRequest {
  std::string url;                      ///< absolute http(s) URL
  std::optional<ByteRange> range;       ///< `Range: bytes=offset-(end-1)`; length > 0
  std::string bearer_token;             ///< sent as `Authorization: Bearer` to `token_authority` only
  std::string token_authority;          ///< scheme://host[:port] allowed to receive the token
  std::optional<std::string> if_match;  ///< `If-Match` (quoted ETag)
  std::uint64_t max_body = 1 << 20;     ///< bodies larger than this are refused (see HttpResponse)
  int max_redirects = 10;               ///< 3xx hops followed
  /// Streams the body here instead of `HttpResponse::body` (requires `range`). Before the first
  /// byte is handed over the response must be a `206` whose Content-Range is exactly the range
  /// still wanted (or a `200` when that is the whole resource), whose total is `expected_size`
  /// when set, and whose ETag (if sent) is `if_match`; otherwise the request fails without a
  /// retry. A retry after a partial body asks only for the bytes not yet received.
  BodySink* sink = nullptr;
  std::optional<std::uint64_t> expected_size;  ///< with `sink`: the resource's size
  /// A CDN fault on a response reached through a redirect (400, 403, or a 416 to a range the
  /// resource holds) is retried from `url`, resolving the redirect again, instead of from the
  /// redirect's target (a signed URL may have expired or been refused).
  bool restart_after_redirect_fault = false;
  /// `GET`, or `PUT` sent with an empty body (the EC2 metadata service's token request; no
  /// redirect is followed for it: `max_redirects` must be 0).
  std::string method = "GET";
  /// More request headers, as (name, value): names of letters, digits and `-`, values without
  /// control characters (`check_header_value`); never logged.
  std::vector<std::pair<std::string, std::string>> headers;
};

/// A redirect hop: the 3xx response and where it pointed.
struct HttpHop {
  long status = 0;        ///< 301, 302, 303, 307 or 308
  std::string url;        ///< the URL that answered it
  Headers headers;        ///< its headers
};

/// `Content-Range: bytes first-last/total`.
struct ContentRange {
  std::uint64_t first = 0;  ///< first byte
  std::uint64_t last = 0;   ///< last byte (inclusive)
  std::uint64_t total = 0;  ///< size of the whole resource
};

/// A response. A plain value.
struct HttpResponse {
  long status = 0;                           ///< final status
  std::string url;                           ///< final URL (after redirects)
  Headers headers;                           ///< final response's headers
  std::vector<HttpHop> redirects;            ///< 3xx hops, in order
  std::string body;                          ///< at most `max_body` bytes
  std::optional<ContentRange> content_range; ///< parsed, on a 206
  /// The body was cut at the requested length: a `200` to a range request (the server ignored
  /// Range). `body` then holds the first bytes of the resource.
  bool truncated = false;
  int attempts = 1;                          ///< tries of the final hop (1 + retries)
};

/// Counters, for tests and benchmarks.
struct HttpStats {
  std::uint64_t requests = 0;  ///< HTTP requests sent (every hop and retry)
  std::uint64_t retries = 0;   ///< of which retries
  std::uint64_t bytes = 0;     ///< body bytes received (kept, streamed to sinks, or errors)
};

/// The state of a submitted request during `HttpClient::run` (see `HttpClient::state`). A plain
/// value.
struct TransferState {
  bool running = false;              ///< an attempt is in flight (else queued or waiting to retry)
  bool done = false;                 ///< finished (its result was reported)
  std::uint64_t next = 0;            ///< streaming: absolute offset of the next byte to deliver
  std::uint64_t end = 0;             ///< streaming: absolute end of what is still wanted
  std::uint64_t attempt_bytes = 0;   ///< bytes the current (done: the last) attempt delivered
  /// Seconds since the current attempt's first body byte (0 before it arrived); once done, from
  /// the last attempt's first body byte to its last.
  double receiving_seconds = 0;
  /// Seconds the current attempt waited for its first body byte (connect, TLS, request), once
  /// it arrived; else the time waited so far.
  double first_byte_seconds = 0;
};

/// Which HTTPS hosts answered over HTTP/2, to decide whether a multiplexing client's request
/// waits for a connection it may share (libcurl's PIPEWAIT) or opens its own. Waiting pays off
/// toward a host that multiplexes (one handshake for many requests); toward a host that answers
/// HTTP/1.1 every waiting request pays the first connection's TCP + TLS handshakes and then
/// opens its own anyway. A plain value, not thread-safe.
struct SeenProtocols {
  std::map<std::string, bool> h2;  ///< per authority (scheme://host:port): answered over HTTP/2
  std::optional<bool> last_h2;     ///< whether the host that answered last spoke HTTP/2

  /// Wait to multiplex toward `url`'s host: an https host seen to speak HTTP/2; never one seen
  /// to speak HTTP/1.1, nor plain http; a host not seen yet only when the one that answered
  /// last spoke HTTP/2 (a Hub that speaks it redirects to a CDN that does) — not while nothing
  /// has answered (the first requests of a run each open a connection rather than wait a
  /// handshake to learn whether they could have shared one). Pure.
  [[nodiscard]] bool wait_for(std::string_view url) const;
  /// Records that `url`'s host answered over HTTP/2 (`spoke_h2`) or HTTP/1.x; https only.
  void saw(std::string_view url, bool spoke_h2);
};

/// A libcurl multi client. Not thread-safe: one thread drives `perform` or `run` (and calls
/// `submit`, `shorten` and `state`, also from inside their callbacks).
class HttpClient {
 public:
  /// Creates the client (curl is initialised once per process).
  explicit HttpClient(HttpOptions options = {});
  HttpClient(HttpClient&&) noexcept;
  HttpClient& operator=(HttpClient&&) noexcept;
  ~HttpClient();

  /// Runs every request concurrently (at most `max_parallel` at once), following redirects
  /// and retrying 429, 5xx, stalls, too slow transfers (`HttpOptions::min_rate`) and connection
  /// failures. A redirect from https to anything else (a downgrade to plaintext) is refused
  /// (`BadResponse`, naming both URLs), as is a redirect to a URL with a space or a control
  /// character. Returns one result per request,
  /// in order: the final response (any status, e.g. 404 with its headers), or an error for
  /// what no status describes (connection, TLS, timeout after retries; a 206 whose
  /// Content-Range is not what was asked; a body longer than the range or than `max_body`).
  /// Errors name the URL and the byte range.
  [[nodiscard]] std::vector<Result<HttpResponse>> perform(std::span<const HttpRequest> requests);

  /// Called as each request finishes, with its position and result; returning false cancels
  /// every request still queued or in flight (their results are `Cancelled` errors).
  using DoneCallback = std::function<bool(std::size_t index, const Result<HttpResponse>& result)>;

  /// As above, reporting each result as soon as it is known.
  [[nodiscard]] std::vector<Result<HttpResponse>> perform(std::span<const HttpRequest> requests,
                                                          const DoneCallback& on_done);

  /// Queues a request for the next (or the running) `run`; returns its id (0, 1, ... in the
  /// order of submission within one run). A request `perform` would refuse fails at once.
  std::size_t submit(HttpRequest request);

  /// Runs every submitted request (at most `max_parallel` at once; `submit` may add more while
  /// it runs) as `perform` does, until none is left. Reports each result to `on_done` (returning
  /// false cancels the rest, which report `Cancelled`). `on_tick` is called after every round of
  /// I/O (about every 100 ms at most when nothing happens): the place to submit more requests or
  /// shorten running ones. Returns when every request has reported; ids start at 0 again.
  void run(const DoneCallback& on_done, const std::function<void()>& on_tick = {});

  /// Ends a streaming request (one with a sink) early: only bytes before `end` (absolute) are
  /// delivered, and when the last of them has, the request completes as if its range had ended
  /// there (the connection is closed: the server's remaining bytes are not read). Refused
  /// (false) when `end` is not after the next byte to deliver or not before the current end,
  /// or the request is done.
  bool shorten(std::size_t id, std::uint64_t end);

  /// The state of request `id` of the current run; nullopt for an unknown id.
  [[nodiscard]] std::optional<TransferState> state(std::size_t id) const;

  /// Replaces the settings between runs (nothing submitted or running), keeping the idle
  /// connections for the next run. `multiplex` must stay as it was (false: refused).
  bool reconfigure(HttpOptions options);

  /// Requests of the current run with an attempt in flight.
  [[nodiscard]] std::size_t active() const noexcept;

  /// True while some transfer is paused by `HttpOptions::max_rate`: the cap, not the network,
  /// is what limits the transfers now (their rates say nothing about the links).
  [[nodiscard]] bool throttled() const noexcept;

  /// Counters since construction.
  [[nodiscard]] const HttpStats& stats() const noexcept;

  /// The HTTPS hosts' protocols seen since construction (whether requests wait to multiplex).
  [[nodiscard]] const SeenProtocols& seen_protocols() const noexcept;

  /// The options in force.
  [[nodiscard]] const HttpOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Parses `bytes a-b/total` (total may not be `*` here). Pure.
[[nodiscard]] std::optional<ContentRange> parse_content_range(std::string_view value);

/// Milliseconds a 429/503 response asks to wait: `Retry-After` (seconds or an HTTP date), else
/// `RateLimit: ...;t=SECONDS`. `now` is the current time in seconds since the epoch. Pure.
[[nodiscard]] std::optional<long> retry_after_ms(const Headers& headers, long long now);

/// An ETag without a `W/` prefix, quotes and surrounding space. Pure.
[[nodiscard]] std::string bare_etag(std::string_view etag);

/// True when two ETags name the same version: compared without `W/`, quotes and space. Pure.
[[nodiscard]] bool same_etag(std::string_view a, std::string_view b) noexcept;

/// The `bytes=a-b` text of a range.
[[nodiscard]] std::string range_text(const ByteRange& range);

/// The first control character of `text` (C0 or DEL; with `space_too`, also a space), or
/// nullopt. Such bytes would end or inject an HTTP header line, or split a URL. Pure.
[[nodiscard]] std::optional<std::size_t> find_control(std::string_view text, bool space_too = false);

/// `text` with its control characters, spaces, `%` and bytes above 0x7E percent-encoded: a
/// URL as it may be quoted in a message, whatever a server put in it. Pure.
[[nodiscard]] std::string quote_url(std::string_view text);

/// Checks a value that goes into an HTTP request header (`Authorization`, `If-Match`, ...):
/// no control character. `what` names it in the error (`InvalidArgument`), which never
/// contains the value itself (it may be a secret). Pure.
[[nodiscard]] Result<void> check_header_value(std::string_view value, std::string_view what);

/// Checks a URL before libcurl sees it: no space and no control character. `what` names it
/// (e.g. `HF_ENDPOINT`); the error (`InvalidArgument`) quotes it with `quote_url`. Pure.
[[nodiscard]] Result<void> check_url_text(std::string_view url, std::string_view what);

}  // namespace tensorfetch::detail
