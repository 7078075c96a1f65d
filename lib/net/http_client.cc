// SPDX-License-Identifier: Apache-2.0
#include "net/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <random>

#include "base/text.h"
#include "base/trace.h"
#include "net/url.h"

namespace tensorfetch::detail {

namespace {

using Clock = std::chrono::steady_clock;

/// Owners of libcurl handles: each freed with its own cleanup call, never by hand.
struct CurlEasyCleanup {
  void operator()(CURL* e) const noexcept { curl_easy_cleanup(e); }
};
struct CurlSlistFree {
  void operator()(curl_slist* l) const noexcept { curl_slist_free_all(l); }
};
struct CurlMultiCleanup {
  void operator()(CURLM* m) const noexcept { curl_multi_cleanup(m); }
};
using CurlEasy = std::unique_ptr<CURL, CurlEasyCleanup>;
using CurlSlist = std::unique_ptr<curl_slist, CurlSlistFree>;
using CurlMulti = std::unique_ptr<CURLM, CurlMultiCleanup>;

// Error bodies (4xx/5xx) are kept up to this size; the rest is discarded.
constexpr std::uint64_t kMaxErrorBody = 64 << 10;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool retryable_status(long status) {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

bool retryable_curl(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool tls_error(CURLcode code) {
  switch (code) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
      return true;
    default:
      return false;
  }
}

// The token bucket of `HttpOptions::max_rate`, shared by every transfer of a client: body bytes
// take tokens; a transfer that finds none left is paused (queued here, oldest first) until the
// bucket refills. The bucket may go into debt by one write (libcurl hands a write over whole),
// which the refill pays back first, so the rate over a fetch is the cap.
struct Throttle {
  double rate = 0;    // bytes per second; 0: no cap
  double burst = 0;   // most tokens held (a tenth of a second of bytes, at least 64 KiB)
  double tokens = 0;  // may be negative (debt)
  Clock::time_point last{};
  std::deque<std::size_t> paused;  // transfer ids, in the order they were paused

  void configure(std::uint64_t bytes_per_second) {
    if (static_cast<double>(bytes_per_second) == rate) return;  // same cap: the bucket goes on
    rate = static_cast<double>(bytes_per_second);
    burst = std::max(rate / 10, 64.0 * 1024);
    tokens = burst;
    last = Clock::now();
  }
  void refill(Clock::time_point now) {
    if (now <= last) return;
    tokens = std::min(burst, tokens + rate * std::chrono::duration<double>(now - last).count());
    last = now;
  }
  // How long until the bucket holds a token again (0: it does).
  [[nodiscard]] long wait_ms() const {
    if (tokens > 0) return 0;
    return std::max(1L, static_cast<long>(std::ceil((1 - tokens) / rate * 1000)));
  }
};

// One request's life: hops, attempts, and the response being received.
struct Transfer {
  HttpRequest request;       // as submitted (a copy; `sink` stays the caller's)
  std::size_t index = 0;
  bool done = false;         // its result was reported
  // Streaming: absolute end of what is still wanted (`shorten` moves it before the range's end),
  // and the range the current attempt asked for (a response is checked against what was sent).
  std::uint64_t end = 0;
  ByteRange sent;
  bool cut = false;          // stopped on purpose at `end` (shortened): the rest is not read
  Clock::time_point attempt_start{};
  std::uint32_t lane = 0;    // its row in a trace (base/trace.h), while an attempt runs
  std::optional<Clock::time_point> first_byte;  // of the current (or last) attempt's body
  Clock::time_point last_delivery{};            // when its last byte was delivered
  std::string url;           // current hop
  int attempt = 0;           // attempts of the current hop
  int restarts = 0;          // restarts from the request's URL after a CDN fault
  CurlEasy easy;             // while an attempt runs
  CurlSlist headers;         // its request headers
  HttpResponse response;     // accumulated (redirects) and current
  long status = 0;           // of the current attempt
  Headers current_headers;
  std::string body;
  bool truncated = false;    // cut on purpose (200 to a range request)
  bool overflow = false;     // cut because the body was longer than allowed
  Clock::time_point due{};   // for a scheduled retry
  char error[CURL_ERROR_SIZE] = {};
  // Streaming (request->sink): bytes handed to the sink over all attempts, whether the current
  // attempt's response was checked, and why it was refused.
  std::uint64_t delivered = 0;
  std::uint64_t delivered_before = 0;  // at the start of the current attempt
  bool validated = false;
  std::optional<Error> sink_error;
  // Stall detection: when a byte last arrived; true when the attempt was aborted for a stall.
  Clock::time_point last_byte{};
  curl_off_t last_dlnow = -1;
  long stall_ms = 0;
  bool stalled = false;
  // Rate check (HttpOptions::min_rate): the current window's start and body bytes at that
  // time; when the attempt was aborted as too slow, the rate it saw over its last window.
  std::uint64_t min_rate = 0;
  Clock::time_point window_start{};
  curl_off_t window_dlnow = 0;
  std::optional<double> slow_rate;
  // max_rate: the client's bucket (null: no cap), and whether (since when) the current attempt
  // is paused because the bucket was empty.
  Throttle* throttle = nullptr;
  bool paused = false;
  Clock::time_point paused_at{};

  // The range still wanted: the request's (up to `end` when streaming), minus what a sink
  // already has.
  [[nodiscard]] std::optional<ByteRange> range() const {
    if (!request.range) return std::nullopt;
    const std::uint64_t stop = request.sink ? end : request.range->end();
    return ByteRange{request.range->offset + delivered, stop - request.range->offset - delivered};
  }
  // Bytes a streaming request delivers in all: its range, up to `end`.
  [[nodiscard]] std::uint64_t stream_length() const { return end - request.range->offset; }
  // Streaming: absolute offset of the next byte to deliver.
  [[nodiscard]] std::uint64_t offset_of_next() const { return request.range->offset + delivered; }
};

std::string describe(const Transfer& t) {
  std::string s = t.url;
  if (auto r = t.range()) s += " (" + range_text(*r) + ")";
  return s;
}

std::string_view bare_etag_view(std::string_view etag) noexcept {
  etag = trim(etag);
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

// Checks a response before its first byte goes to a sink (see HttpRequest::sink).
std::optional<Error> validate_for_sink(const Transfer& t) {
  const auto& req = t.request;
  const ByteRange want = t.sent;
  const std::string where = describe(t);
  auto header = [&](const char* name) {
    auto it = t.current_headers.find(name);
    return it == t.current_headers.end() ? std::string() : it->second;
  };
  if (req.if_match) {
    const std::string etag = header("etag");
    if (!etag.empty() && !same_etag(etag, *req.if_match)) {
      return Error{ErrorCode::Integrity, where + ": the server sent ETag " + etag + " instead of the pinned " +
                                             *req.if_match + " (the file changed on the server)"};
    }
  }
  if (t.status == 200) {
    std::uint64_t length = 0;
    const bool whole = want.offset == 0 && parse_u64(header("content-length"), length) && length == want.length &&
                       (!req.expected_size || *req.expected_size == length);
    if (whole) return std::nullopt;
    return Error{ErrorCode::BadResponse, where + ": the server ignored the Range header (HTTP 200 with the whole file)"};
  }
  const std::string text = header("content-range");
  auto cr = parse_content_range(text);
  if (!cr) {
    return Error{ErrorCode::BadResponse, where + ": 206 with a missing or malformed Content-Range '" + text + "'"};
  }
  if (cr->first != want.offset || cr->last != want.end() - 1) {
    return Error{ErrorCode::BadResponse, where + ": server answered Content-Range '" + text + "' for the requested " +
                                             range_text(want)};
  }
  if (req.expected_size && cr->total != *req.expected_size) {
    return Error{ErrorCode::Integrity, where + ": the file's size is now " + std::to_string(cr->total) + ", not " +
                                           std::to_string(*req.expected_size) + " (the file changed on the server)"};
  }
  return std::nullopt;
}

// Streams a body piece to the request's sink; returns false to stop the transfer.
bool stream_to_sink(Transfer& t, const char* data, std::size_t n) {
  if (!t.validated) {
    if (auto e = validate_for_sink(t)) {
      t.sink_error = std::move(e);
      return false;
    }
    t.validated = true;
  }
  const ByteRange& asked = *t.request.range;
  if (t.offset_of_next() + n > t.sent.end()) {
    t.sink_error = Error{ErrorCode::BadResponse, describe(t) + ": response body is longer than the requested range (" +
                                                     std::to_string(t.sent.length) + " bytes)"};
    return false;
  }
  t.last_delivery = Clock::now();
  if (!t.first_byte) t.first_byte = t.last_delivery;
  // Shortened: deliver up to `end`, then stop reading (the connection is closed).
  const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(n, t.stream_length() - t.delivered));
  if (take > 0) {
    auto r = t.request.sink->write(asked.offset + t.delivered, std::as_bytes(std::span(data, take)));
    if (!r) {
      t.sink_error = r.error();
      return false;
    }
    t.delivered += take;
  }
  if (t.delivered == t.stream_length() && t.offset_of_next() < t.sent.end()) {
    t.cut = true;
    return false;
  }
  return true;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  std::string_view line(data, n);
  if (line.starts_with("HTTP/")) {  // a new response (e.g. after 100 Continue)
    t->current_headers.clear();
    return n;
  }
  auto colon = line.find(':');
  if (colon != std::string_view::npos) {
    t->current_headers[ascii_lower(trim(line.substr(0, colon)))] = std::string(trim(line.substr(colon + 1)));
  }
  return n;
}

// Aborts an attempt that received nothing for stall_ms (headers included): libcurl's own
// low-speed check averages over its whole window and notices a stall after a partial body late.
// Also aborts one that received less than min_rate bytes per second over a whole window of
// stall_ms, unless that was all there was still to come (`dltotal`, when known): a server
// dripping a few bytes a second is abandoned, and retried, instead of being waited for.
// Time paused by max_rate does not count (see `HttpClient::Impl::resume_paused`).
int on_progress(void* user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->paused) return 0;
  const auto now = Clock::now();
  if (dlnow != t->last_dlnow) {
    t->last_dlnow = dlnow;
    t->last_byte = now;
  } else if (now - t->last_byte > std::chrono::milliseconds(t->stall_ms)) {
    t->stalled = true;
    return 1;
  }
  const auto window = now - t->window_start;
  if (window >= std::chrono::milliseconds(t->stall_ms)) {
    const double seconds = std::chrono::duration<double>(window).count();
    const auto received = static_cast<double>(dlnow - t->window_dlnow);
    double needed = static_cast<double>(t->min_rate) * seconds;
    if (dltotal > 0) needed = std::min(needed, static_cast<double>(dltotal - t->window_dlnow));
    if (received < needed) {
      t->stalled = true;
      t->slow_rate = received / seconds;
      return 1;
    }
    t->window_start = now;
    t->window_dlnow = dlnow;
  }
  return 0;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  // Refused while libcurl handed held bytes over on a resume (see resume_paused), where a
  // failed write cannot end the transfer: this one does.
  if (t->sink_error) return 0;
  if (t->throttle != nullptr && n > 0) {
    // max_rate: no token left, so pause; libcurl hands the same bytes over again on resume.
    Throttle& bucket = *t->throttle;
    const auto now = Clock::now();
    bucket.refill(now);
    if (bucket.tokens <= 0) {
      t->paused = true;
      t->paused_at = now;
      bucket.paused.push_back(t->index);
      return CURL_WRITEFUNC_PAUSE;
    }
    bucket.tokens -= static_cast<double>(n);
  }
  long status = 0;
  curl_easy_getinfo(t->easy.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status >= 300 && status < 400) return n;  // redirect bodies are not kept
  const auto& req = t->request;
  if (req.sink && (status == 200 || status == 206)) {
    t->status = status;
    return stream_to_sink(*t, data, n) ? n : 0;
  }
  std::uint64_t limit = req.max_body;
  if (status >= 400) limit = kMaxErrorBody;
  if (req.range && (status == 200 || status == 206)) limit = std::min(limit, req.range->length);
  if (t->body.size() + n > limit) {
    t->body.append(data, static_cast<std::size_t>(limit - t->body.size()));
    if (status >= 400 || (status == 200 && req.range)) {
      t->truncated = status == 200;  // the prefix of a resource whose server ignored Range
      return 0;                      // stop reading: we have what we need
    }
    t->overflow = true;
    return 0;
  }
  t->body.append(data, n);
  return n;
}

}  // namespace

std::string bare_etag(std::string_view etag) { return std::string(bare_etag_view(etag)); }

bool same_etag(std::string_view a, std::string_view b) noexcept { return bare_etag_view(a) == bare_etag_view(b); }

std::string range_text(const ByteRange& range) {
  return "bytes=" + std::to_string(range.offset) + "-" + std::to_string(range.end() - 1);
}

std::optional<std::size_t> find_control(std::string_view text, bool space_too) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7F || (space_too && c == ' ')) return i;
  }
  return std::nullopt;
}

std::string quote_url(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7F) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

Result<void> check_header_value(std::string_view value, std::string_view what) {
  if (auto at = find_control(value)) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(value[*at]));
    return fail(ErrorCode::InvalidArgument, std::string(what) + " contains a control character (" + byte +
                                                "); refused: it would break or inject HTTP header lines");
  }
  return {};
}

Result<void> check_url_text(std::string_view url, std::string_view what) {
  if (auto at = find_control(url, true)) {
    return fail(ErrorCode::InvalidArgument,
                std::string(what) + " '" + quote_url(url) + "' contains " +
                    (url[*at] == ' ' ? "a space" : "a control character") +
                    " (shown percent-encoded); refused: encode it (%20 for a space)");
  }
  return {};
}

std::optional<ContentRange> parse_content_range(std::string_view value) {
  value = trim(value);
  if (!value.starts_with("bytes ")) return std::nullopt;
  value.remove_prefix(6);
  auto dash = value.find('-');
  auto slash = value.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || dash > slash) return std::nullopt;
  ContentRange r;
  if (!parse_u64(trim(value.substr(0, dash)), r.first) ||
      !parse_u64(trim(value.substr(dash + 1, slash - dash - 1)), r.last) ||
      !parse_u64(trim(value.substr(slash + 1)), r.total)) {
    return std::nullopt;
  }
  if (r.first > r.last || r.last >= r.total) return std::nullopt;
  return r;
}

std::optional<long> retry_after_ms(const Headers& headers, long long now) {
  if (auto it = headers.find("retry-after"); it != headers.end()) {
    std::uint64_t seconds = 0;
    if (parse_u64(trim(it->second), seconds)) {
      return static_cast<long>(std::min<std::uint64_t>(seconds, 86'400) * 1000);
    }
    time_t when = curl_getdate(it->second.c_str(), nullptr);
    if (when > 0) return static_cast<long>(std::max<long long>(0, when - now) * 1000);
  }
  if (auto it = headers.find("ratelimit"); it != headers.end()) {
    // e.g. "api";r=0;t=55 (IETF draft RateLimit header, as the Hub sends it)
    auto pos = it->second.find("t=");
    if (pos != std::string::npos) {
      std::string_view rest = std::string_view(it->second).substr(pos + 2);
      rest = rest.substr(0, rest.find_first_of(";, "));
      std::uint64_t seconds = 0;
      if (parse_u64(rest, seconds)) return static_cast<long>(std::min<std::uint64_t>(seconds, 86'400) * 1000);
    }
  }
  return std::nullopt;
}

bool SeenProtocols::wait_for(std::string_view url) const {
  if (!url.starts_with("https://")) return false;
  if (auto it = h2.find(url_authority(url)); it != h2.end()) return it->second;
  return last_h2.value_or(false);
}

void SeenProtocols::saw(std::string_view url, bool spoke_h2) {
  if (!url.starts_with("https://")) return;
  h2[url_authority(url)] = spoke_h2;
  last_h2 = spoke_h2;
}

namespace {

// What no request may carry to libcurl (see HttpRequest).
Result<void> check_request(const HttpRequest& r) {
  if (auto ok = check_url_text(r.url, "request URL"); !ok) return ok;
  if (auto ok = check_header_value(r.bearer_token, "the access token"); !ok) {
    return fail(ok.error().code, quote_url(r.url) + ": " + ok.error().message);
  }
  if (r.if_match) {
    if (auto ok = check_header_value(*r.if_match, "If-Match (the pinned ETag)"); !ok) {
      return fail(ok.error().code, quote_url(r.url) + ": " + ok.error().message);
    }
  }
  if (r.method != "GET" && !(r.method == "PUT" && r.max_redirects == 0 && !r.sink)) {
    return fail(ErrorCode::InvalidArgument, quote_url(r.url) + ": method " + quote_name(r.method) +
                                                " (only GET, and PUT without redirects or a sink)");
  }
  for (const auto& [name, value] : r.headers) {
    const bool token = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
    });
    if (!token) return fail(ErrorCode::InvalidArgument, quote_url(r.url) + ": header name " + quote_name(name));
    if (auto ok = check_header_value(value, "the header " + name); !ok) {
      return fail(ok.error().code, quote_url(r.url) + ": " + ok.error().message);
    }
  }
  return {};
}

}  // namespace

struct HttpClient::Impl {
  HttpOptions options;
  CurlMulti multi;
  HttpStats stats;
  std::mt19937_64 rng{std::random_device{}()};
  SeenProtocols seen;  // which hosts answered over HTTP/2 (whether to wait to multiplex)
  Throttle throttle;   // HttpOptions::max_rate

  explicit Impl(HttpOptions o) : options(std::move(o)) {
    global_init();
    throttle.configure(options.max_rate);
    multi.reset(curl_multi_init());
    curl_multi_setopt(multi.get(), CURLMOPT_PIPELINING, options.multiplex ? CURLPIPE_MULTIPLEX : CURLPIPE_NOTHING);
    keep_connections();
  }

  // Idle connections kept for reuse: enough for every slot (libcurl's default follows the
  // number of handles added, which here changes with every attempt).
  void keep_connections() {
    curl_multi_setopt(multi.get(), CURLMOPT_MAXCONNECTS, static_cast<long>(std::max<std::size_t>(64, 2 * options.max_parallel)));
  }

  long backoff_ms(int attempt) {
    const double cap = std::min<double>(static_cast<double>(options.backoff_max_ms),
                                        static_cast<double>(options.backoff_base_ms) * double(1u << std::min(attempt, 20)));
    std::uniform_real_distribution<double> jitter(0.5, 1.0);  // equal jitter: half fixed, half random
    return static_cast<long>(cap * jitter(rng));
  }

  void start(Transfer& t) {
    t.easy.reset(curl_easy_init());
    t.status = 0;
    t.current_headers.clear();
    t.body.clear();
    t.truncated = t.overflow = false;
    t.error[0] = '\0';
    t.validated = false;
    t.sink_error.reset();
    t.last_byte = Clock::now();
    t.last_dlnow = -1;
    t.stall_ms = options.stall_timeout_ms;
    t.stalled = false;
    t.min_rate = options.min_rate;
    t.window_start = t.last_byte;
    t.window_dlnow = 0;
    t.slow_rate.reset();
    t.throttle = options.max_rate > 0 ? &throttle : nullptr;
    t.paused = false;
    t.delivered_before = t.delivered;
    ++t.attempt;
    ++stats.requests;
    CURL* e = t.easy.get();
    curl_easy_setopt(e, CURLOPT_URL, t.url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, &t);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.error);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);  // hops are followed here, one at a time
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    // Multiplexed: HTTP/2 where TLS negotiates it. Not multiplexed (bulk data): HTTP/1.1, one
    // transfer per TCP connection.
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION,
                     static_cast<long>(options.multiplex ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, options.multiplex && seen.wait_for(t.url) ? 1L : 0L);
    if (options.share) curl_easy_setopt(e, CURLOPT_SHARE, options.share->handle());
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, options.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, &t);
    if (!t.throttle) {
      // Under max_rate, libcurl's check would count a paused transfer's time: on_progress
      // enforces the stall timeout alone then.
      curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
      curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, std::max(1L, (options.stall_timeout_ms + 999) / 1000));
    }
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!options.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options.ca_file.c_str());
    curl_easy_setopt(e, CURLOPT_USERAGENT, options.user_agent.c_str());
    curl_slist* h = nullptr;
    const auto& req = t.request;
    t.attempt_start = Clock::now();
    if (trace::on() && t.lane == 0) t.lane = trace::acquire_lane();
    t.first_byte.reset();
    t.cut = false;
    if (auto range = t.range()) {
      t.sent = *range;
      const std::string r = "Range: " + range_text(*range);
      h = curl_slist_append(h, r.c_str());
    }
    if (req.sink) {
      // Fewer, larger writes; under max_rate no larger than a sixteenth of a second of the cap
      // (at least 16 KiB), so that the paused transfers take short turns and each gets some
      // bytes often (a server may close a connection it could not write to for long).
      long buffer = 512L << 10;
      if (t.throttle) buffer = std::clamp(static_cast<long>(options.max_rate / 16), 16L << 10, buffer);
      curl_easy_setopt(e, CURLOPT_BUFFERSIZE, buffer);
    }
    if (req.if_match) h = curl_slist_append(h, ("If-Match: " + *req.if_match).c_str());
    for (const auto& [name, value] : req.headers) h = curl_slist_append(h, (name + ": " + value).c_str());
    if (req.method == "PUT") {
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
    }
    if (!req.bearer_token.empty() && !req.token_authority.empty() &&
        url_authority(t.url) == req.token_authority) {
      h = curl_slist_append(h, ("Authorization: Bearer " + req.bearer_token).c_str());
    }
    t.headers.reset(h);
    if (h) curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_multi_add_handle(multi.get(), e);
  }

  // Records the attempt that just ended on its connection's row of the trace: the whole request,
  // and within it, as libcurl timed them, the TCP connect, the TLS handshake, the wait for the
  // first byte and the body's arrival.
  void trace_attempt(const Transfer& t, CURLcode code) const {
    const auto now = Clock::now();
    const auto at = [&](CURLINFO info) {
      curl_off_t us = 0;
      curl_easy_getinfo(t.easy.get(), info, &us);
      return t.attempt_start + std::chrono::microseconds(us);
    };
    const auto connected = at(CURLINFO_CONNECT_TIME_T), tls = at(CURLINFO_APPCONNECT_TIME_T);
    const auto sent = at(CURLINFO_PRETRANSFER_TIME_T), first = at(CURLINFO_STARTTRANSFER_TIME_T);
    const auto range = t.range();
    std::vector<std::pair<std::string, std::string>> args = {
        {"url", quote_url(t.url.substr(0, t.url.find('?')))},
        {"status", std::to_string(t.status)},
        {"attempt", std::to_string(t.attempt)},
        {"bytes", std::to_string(t.body.size() + (t.delivered - t.delivered_before))}};
    if (range) args.emplace_back("range", range_text(t.sent));
    if (code != CURLE_OK) args.emplace_back("curl", curl_easy_strerror(code));
    trace::add({range ? "GET " + range_text(t.sent) : std::string("GET"), "http", 'X', t.attempt_start, now, t.lane,
                std::move(args)});
    const auto phase = [&](const char* name, Clock::time_point from, Clock::time_point to) {
      if (to > from && to <= now) trace::add({name, "http", 'X', from, to, t.lane, {}});
    };
    phase("connect (TCP)", t.attempt_start, connected);
    if (tls > connected) phase("TLS handshake", connected, tls);
    phase("wait for the first byte", sent, first);
    if (first > t.attempt_start) phase("receive", first, now);
  }

  // Learns whether the host of the attempt's URL spoke HTTP/2 (see `SeenProtocols`).
  void learn_protocol(const Transfer& t) {
    long version = CURL_HTTP_VERSION_NONE;
    if (curl_easy_getinfo(t.easy.get(), CURLINFO_HTTP_VERSION, &version) != CURLE_OK ||
        version == CURL_HTTP_VERSION_NONE) {
      return;
    }
    seen.saw(t.url, version == CURL_HTTP_VERSION_2_0);
  }

  // max_rate: resumes paused transfers, oldest first, while the bucket holds tokens. The time
  // each was paused is taken out of its stall and min_rate clocks: waiting for our own cap is
  // not a slow server. (Resuming hands the held bytes to on_body at once, which takes tokens.)
  void resume_paused() {
    if (throttle.paused.empty()) return;
    const auto now = Clock::now();
    throttle.refill(now);
    while (throttle.tokens > 0 && !throttle.paused.empty()) {
      Transfer& t = transfers[throttle.paused.front()];
      throttle.paused.pop_front();
      if (!t.easy || !t.paused) continue;  // finished, or an entry of an earlier pause
      t.paused = false;
      const auto paused_for = now - t.paused_at;
      t.last_byte += paused_for;
      t.window_start += paused_for;
      curl_easy_pause(t.easy.get(), CURLPAUSE_CONT);
    }
  }

  void finish_attempt(Transfer& t) {
    trace::release_lane(t.lane);
    t.lane = 0;
    t.paused = false;
    curl_multi_remove_handle(multi.get(), t.easy.get());
    t.easy.reset();
    t.headers.reset();
  }

  // The resource's full size as far as this response and its hops tell: the request's
  // expected size, a 416's `Content-Range: bytes */N`, or a size header on a redirect hop.
  std::optional<std::uint64_t> known_size(const Transfer& t) const {
    if (t.request.expected_size) return t.request.expected_size;
    if (auto it = t.current_headers.find("content-range"); it != t.current_headers.end()) {
      std::string_view v = trim(it->second);
      std::uint64_t n = 0;
      if (v.starts_with("bytes */") && parse_u64(v.substr(8), n)) return n;
    }
    for (const auto& hop : t.response.redirects) {
      for (const auto& name : options.size_headers) {
        std::uint64_t n = 0;
        if (auto it = hop.headers.find(name); it != hop.headers.end() && parse_u64(trim(it->second), n)) return n;
      }
    }
    return std::nullopt;
  }

  // A fault a CDN is known to answer now and then to a valid request: a 416 to a range the
  // resource holds (a 416 is believed only when the size really is smaller), a 400 to a range
  // request of a known resource or after a redirect, a 403 after a redirect that may be resolved
  // again (an expired or refused signature).
  bool transient_fault(const Transfer& t) const {
    const auto& req = t.request;
    // Redirected to another host (a CDN): a fault there is not the origin's word.
    const bool redirected = !t.response.redirects.empty() && url_authority(t.url) != url_authority(req.url);
    if (t.status == 416 && req.range) {
      auto size = known_size(t);
      return size && t.range()->offset < *size;
    }
    if (t.status == 400 && req.range) return redirected || req.expected_size.has_value();
    if (t.status == 403) return redirected && req.restart_after_redirect_fault;
    return false;
  }

  enum class Next { Done, Retry, Redirect };

  // Decides what follows a finished attempt; fills `result` when done.
  Next evaluate(Transfer& t, CURLcode code, std::optional<Result<HttpResponse>>& result, long& wait_ms) {
    const auto& req = t.request;
    curl_easy_getinfo(t.easy.get(), CURLINFO_RESPONSE_CODE, &t.status);
    if (t.lane != 0) trace_attempt(t, code);
    stats.bytes += t.body.size() + (t.delivered - t.delivered_before);
    if (t.sink_error) {  // refused before or while streaming: final, never retried
      result = fail(*t.sink_error);
      return Next::Done;
    }
    const bool cut_on_purpose = code == CURLE_WRITE_ERROR && !t.overflow;
    if (code != CURLE_OK && !cut_on_purpose) {
      if (t.overflow) {
        result = fail(ErrorCode::BadResponse,
                      describe(t) + ": response body is longer than " +
                          (req.range ? "the requested range (" + std::to_string(req.range->length) + " bytes)"
                                     : "the limit of " + std::to_string(req.max_body) + " bytes"));
        return Next::Done;
      }
      std::string what = t.error[0] ? t.error : curl_easy_strerror(code);
      if (t.slow_rate) {
        char rate[32];
        std::snprintf(rate, sizeof rate, "%.1f", *t.slow_rate);
        what = std::string("too slow: ") + rate + " B/s over the last " + std::to_string(t.stall_ms) +
               " ms, below the minimum of " + std::to_string(t.min_rate) + " B/s";
      } else if (t.stalled) {
        what = "stalled: nothing received for " + std::to_string(t.stall_ms) + " ms";
      }
      if ((retryable_curl(code) || t.stalled) && t.attempt <= options.max_retries) {
        wait_ms = backoff_ms(t.attempt - 1);
        return Next::Retry;
      }
      std::string msg = describe(t) + ": " + (tls_error(code) ? "TLS failure: " : "") + what;
      if (t.attempt > 1) msg += " (after " + std::to_string(t.attempt) + " attempts)";
      result = fail(ErrorCode::Network, msg);
      return Next::Done;
    }
    if (t.status >= 300 && t.status < 400 && t.status != 304) {
      char* target = nullptr;
      curl_easy_getinfo(t.easy.get(), CURLINFO_REDIRECT_URL, &target);
      if (target == nullptr || *target == '\0') {
        result = fail(ErrorCode::BadResponse, describe(t) + ": " + std::to_string(t.status) +
                                                  " redirect without a Location");
        return Next::Done;
      }
      if (static_cast<int>(t.response.redirects.size()) >= req.max_redirects) {
        result = fail(ErrorCode::BadResponse, describe(t) + ": more than " +
                                                  std::to_string(req.max_redirects) + " redirects");
        return Next::Done;
      }
      if (ascii_lower(std::string_view(t.url).substr(0, 8)) == "https://" &&
          ascii_lower(std::string_view(target).substr(0, 8)) != "https://") {
        result = fail(ErrorCode::BadResponse, describe(t) + ": refused the redirect from https to " +
                                                  quote_url(target) + " (a downgrade from TLS)");
        return Next::Done;
      }
      if (find_control(target, true)) {
        result = fail(ErrorCode::BadResponse, describe(t) + ": refused the redirect to " + quote_url(target) +
                                                  " (a space or control character in the URL)");
        return Next::Done;
      }
      t.response.redirects.push_back(HttpHop{t.status, t.url, std::move(t.current_headers)});
      t.url = target;
      t.attempt = 0;
      return Next::Redirect;
    }
    if (transient_fault(t)) {
      // A CDN's transient fault: retried (from the request's URL when the response came through a
      // redirect that may be resolved again), then handed to the caller with its status.
      if (req.restart_after_redirect_fault && !t.response.redirects.empty() &&
          url_authority(t.url) != url_authority(req.url)) {
        if (t.restarts < options.max_retries) {
          ++t.restarts;
          wait_ms = backoff_ms(t.restarts - 1);
          t.url = req.url;
          t.response.redirects.clear();
          t.attempt = 0;
          return Next::Retry;
        }
      } else if (t.attempt <= options.max_retries) {
        wait_ms = backoff_ms(t.attempt - 1);
        return Next::Retry;
      }
    }
    if (retryable_status(t.status) && t.attempt <= options.max_retries) {
      auto asked = retry_after_ms(t.current_headers, static_cast<long long>(std::time(nullptr)));
      if (!asked || *asked <= options.retry_after_max_ms) {
        if (asked && !t.current_headers.count("retry-after")) *asked += 1000;  // RateLimit's t: one more second
        wait_ms = asked ? *asked + backoff_ms(0) / 4 : backoff_ms(t.attempt - 1);
        if (asked && wait_ms >= 1000 && options.on_wait) {
          options.on_wait(HttpWait{t.url, t.status, wait_ms, &t.current_headers});
        }
        return Next::Retry;
      }
    }
    if (req.sink && (t.status == 200 || t.status == 206) && t.delivered < t.stream_length()) {
      // The response ended early without a transport error (or before any byte): resume.
      if (t.attempt <= options.max_retries) {
        wait_ms = backoff_ms(t.attempt - 1);
        return Next::Retry;
      }
      result = fail(ErrorCode::BadResponse, describe(t) + ": the response ended after " + std::to_string(t.delivered) +
                                                " of " + std::to_string(t.stream_length()) + " bytes");
      return Next::Done;
    }
    HttpResponse& r = t.response;
    r.status = t.status;
    r.url = t.url;
    r.headers = std::move(t.current_headers);
    r.body = std::move(t.body);
    r.truncated = t.truncated;
    r.attempts = t.attempt + t.restarts;
    if (r.status == 206 && !req.sink) {
      auto it = r.headers.find("content-range");
      r.content_range = it == r.headers.end() ? std::nullopt : parse_content_range(it->second);
      if (!r.content_range) {
        result = fail(ErrorCode::BadResponse,
                      describe(t) + ": 206 with a missing or malformed Content-Range '" +
                          (it == r.headers.end() ? std::string() : it->second) + "'");
        return Next::Done;
      }
      const auto& cr = *r.content_range;
      if (req.range) {
        const std::uint64_t want_last = std::min(req.range->end() - 1, cr.total - 1);
        if (cr.first != req.range->offset || cr.last != want_last) {
          result = fail(ErrorCode::BadResponse,
                        describe(t) + ": server answered Content-Range bytes " + std::to_string(cr.first) +
                            "-" + std::to_string(cr.last) + "/" + std::to_string(cr.total) +
                            " for the requested " + range_text(*req.range));
          return Next::Done;
        }
      }
      if (r.body.size() != cr.last - cr.first + 1) {
        result = fail(ErrorCode::BadResponse,
                      describe(t) + ": body of " + std::to_string(r.body.size()) +
                          " bytes for Content-Range bytes " + std::to_string(cr.first) + "-" +
                          std::to_string(cr.last));
        return Next::Done;
      }
    }
    result = std::move(r);
    return Next::Done;
  }

  // The current run: its requests (ids are positions), those ready to start, those waiting
  // for a retry, and results not yet reported (refused at submission).
  std::deque<Transfer> transfers;
  std::deque<std::size_t> ready;
  std::vector<std::size_t> waiting;
  std::vector<std::pair<std::size_t, Result<HttpResponse>>> early;
  std::size_t active = 0;

  std::size_t submit(HttpRequest request) {
    const std::size_t id = transfers.size();
    Transfer& t = transfers.emplace_back();
    t.request = std::move(request);
    t.index = id;
    t.url = t.request.url;
    if (t.request.range) t.end = t.request.range->end();
    if ((t.request.range && t.request.range->length == 0) || (t.request.sink && !t.request.range)) {
      early.emplace_back(id, fail(ErrorCode::InvalidArgument, quote_url(t.request.url) + ": empty or missing byte range"));
    } else if (auto bad = check_request(t.request); !bad) {
      early.emplace_back(id, fail(bad.error()));
    } else {
      ready.push_back(id);
    }
    return id;
  }

  bool shorten(std::size_t id, std::uint64_t end) {
    if (id >= transfers.size()) return false;
    Transfer& t = transfers[id];
    if (t.done || !t.request.sink || !t.request.range) return false;
    if (end <= t.offset_of_next() || end >= t.end) return false;
    t.end = end;
    return true;
  }

  std::optional<TransferState> state(std::size_t id) const {
    if (id >= transfers.size()) return std::nullopt;
    const Transfer& t = transfers[id];
    TransferState s;
    s.running = static_cast<bool>(t.easy);
    s.done = t.done;
    if (t.request.range && t.request.sink) {
      s.next = t.offset_of_next();
      s.end = t.end;
    }
    if (s.running || t.done) {
      // While running: until now. Done: the last attempt, from its first to its last byte.
      const auto now = s.running ? Clock::now() : t.last_delivery;
      s.attempt_bytes = t.delivered - t.delivered_before;
      if (t.first_byte) {
        s.receiving_seconds = std::chrono::duration<double>(now - *t.first_byte).count();
        s.first_byte_seconds = std::chrono::duration<double>(*t.first_byte - t.attempt_start).count();
      } else if (s.running) {
        s.first_byte_seconds = std::chrono::duration<double>(now - t.attempt_start).count();
      }
    }
    return s;
  }

  void report(Transfer& t, Result<HttpResponse> result, const DoneCallback& on_done, bool& cancelled) {
    t.done = true;
    if (on_done && !on_done(t.index, result)) cancelled = true;
  }

  void run(const DoneCallback& on_done, const std::function<void()>& on_tick) {
    bool cancelled = false;
    while (true) {
      for (auto& [id, result] : std::exchange(early, {})) {
        if (!cancelled) report(transfers[id], std::move(result), on_done, cancelled);
        transfers[id].done = true;
      }
      if (cancelled || options.cancel.cancelled()) break;
      const auto now = Clock::now();
      for (auto it = waiting.begin(); it != waiting.end();) {
        if (transfers[*it].due <= now) {
          ready.push_back(*it);
          it = waiting.erase(it);
        } else {
          ++it;
        }
      }
      while (active < options.max_parallel && !ready.empty()) {
        start(transfers[ready.front()]);
        ready.pop_front();
        ++active;
      }
      resume_paused();
      int running = 0;
      curl_multi_perform(multi.get(), &running);
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi.get(), &left)) {
        if (msg->msg != CURLMSG_DONE) continue;
        Transfer* t = nullptr;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
        const CURLcode code = msg->data.result;
        long wait_ms = 0;
        std::optional<Result<HttpResponse>> result;
        learn_protocol(*t);  // before `evaluate` moves a redirected transfer's URL on
        const Next next = evaluate(*t, code, result, wait_ms);
        finish_attempt(*t);
        --active;
        switch (next) {
          case Next::Done:
            if (!cancelled) report(*t, std::move(*result), on_done, cancelled);
            t->done = true;
            break;
          case Next::Redirect:
            ready.push_front(t->index);
            break;
          case Next::Retry:
            ++stats.retries;
            t->due = Clock::now() + std::chrono::milliseconds(wait_ms);
            waiting.push_back(t->index);
            break;
        }
      }
      if (!cancelled && on_tick) on_tick();
      if (cancelled || options.cancel.cancelled()) break;
      if (active == 0 && ready.empty() && waiting.empty() && early.empty()) break;
      long timeout_ms = options.cancel.cancellable() || on_tick ? 100 : 1000;
      if ((!ready.empty() && active < options.max_parallel) || !early.empty()) timeout_ms = 0;
      for (auto i : waiting) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(transfers[i].due - Clock::now()).count();
        timeout_ms = std::clamp<long>(static_cast<long>(ms), 0, timeout_ms);
      }
      if (!throttle.paused.empty()) {
        // Paused transfers have no socket to wake us: wake when the bucket holds a token again.
        throttle.refill(Clock::now());
        timeout_ms = std::min(timeout_ms, throttle.wait_ms());
      }
      if (timeout_ms > 0 || active > 0) curl_multi_poll(multi.get(), nullptr, 0, static_cast<int>(timeout_ms), nullptr);
    }
    // Cancelled: stop what runs, and report the rest as cancelled (except when the caller
    // cancelled through `on_done`, which wants no more reports). What a stopped transfer had
    // delivered to its sink stays delivered (`TransferState::next` tells how far it got).
    for (auto& t : transfers) {
      if (t.easy) {
        finish_attempt(t);
        --active;
      }
    }
    for (auto& t : transfers) {
      if (!t.done) {
        t.done = true;
        if (on_done && !cancelled) on_done(t.index, fail(ErrorCode::Cancelled, describe(t) + ": cancelled"));
      }
    }
    transfers.clear();
    ready.clear();
    waiting.clear();
    early.clear();
    throttle.paused.clear();
    active = 0;
  }

  std::vector<Result<HttpResponse>> perform(std::span<const HttpRequest> requests, const DoneCallback& on_done) {
    std::vector<std::optional<Result<HttpResponse>>> results(requests.size());
    const std::size_t base = transfers.size();
    for (const auto& r : requests) submit(r);
    run(
        [&](std::size_t id, const Result<HttpResponse>& result) {
          results[id - base] = result;
          return !on_done || on_done(id - base, result);
        },
        {});
    std::vector<Result<HttpResponse>> out;
    out.reserve(results.size());
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (results[i]) {
        out.push_back(std::move(*results[i]));
      } else {
        out.push_back(fail(ErrorCode::Cancelled, quote_url(requests[i].url) + ": cancelled"));
      }
    }
    return out;
  }
};

struct HttpShare::Impl {
  struct Cleanup {
    void operator()(CURLSH* s) const noexcept { curl_share_cleanup(s); }
  };
  // One mutex per kind of shared data (libcurl locks each kind on its own).
  std::array<std::mutex, CURL_LOCK_DATA_LAST> locks;
  std::unique_ptr<CURLSH, Cleanup> handle;

  static void lock(CURL*, curl_lock_data data, curl_lock_access, void* user) {
    static_cast<Impl*>(user)->locks[static_cast<std::size_t>(data)].lock();
  }
  static void unlock(CURL*, curl_lock_data data, void* user) {
    static_cast<Impl*>(user)->locks[static_cast<std::size_t>(data)].unlock();
  }
};

HttpShare::HttpShare() : impl_(std::make_unique<Impl>()) {
  global_init();
  impl_->handle.reset(curl_share_init());
  CURLSH* s = impl_->handle.get();
  curl_share_setopt(s, CURLSHOPT_LOCKFUNC, &Impl::lock);
  curl_share_setopt(s, CURLSHOPT_UNLOCKFUNC, &Impl::unlock);
  curl_share_setopt(s, CURLSHOPT_USERDATA, impl_.get());
  curl_share_setopt(s, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(s, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  // Not CURL_LOCK_DATA_CONNECT: with a shared connection cache, libcurl 7.88's multi interface
  // runs a host's HTTP/1.1 transfers one after another on one connection instead of opening one
  // per transfer (seen in the data-plane tests), which is what bulk data needs.
}

HttpShare::~HttpShare() = default;

void* HttpShare::handle() const noexcept { return impl_->handle.get(); }

HttpClient::HttpClient(HttpOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
HttpClient::HttpClient(HttpClient&&) noexcept = default;
HttpClient& HttpClient::operator=(HttpClient&&) noexcept = default;
HttpClient::~HttpClient() = default;

std::vector<Result<HttpResponse>> HttpClient::perform(std::span<const HttpRequest> requests) {
  return impl_->perform(requests, nullptr);
}

std::vector<Result<HttpResponse>> HttpClient::perform(std::span<const HttpRequest> requests,
                                                      const DoneCallback& on_done) {
  return impl_->perform(requests, on_done);
}

std::size_t HttpClient::submit(HttpRequest request) { return impl_->submit(std::move(request)); }

void HttpClient::run(const DoneCallback& on_done, const std::function<void()>& on_tick) { impl_->run(on_done, on_tick); }

bool HttpClient::shorten(std::size_t id, std::uint64_t end) { return impl_->shorten(id, end); }

std::optional<TransferState> HttpClient::state(std::size_t id) const { return impl_->state(id); }

bool HttpClient::reconfigure(HttpOptions options) {
  if (!impl_->transfers.empty() || options.multiplex != impl_->options.multiplex) return false;
  impl_->options = std::move(options);
  impl_->throttle.configure(impl_->options.max_rate);
  impl_->keep_connections();
  return true;
}

std::size_t HttpClient::active() const noexcept { return impl_->active; }

bool HttpClient::throttled() const noexcept { return !impl_->throttle.paused.empty(); }

const HttpStats& HttpClient::stats() const noexcept { return impl_->stats; }
const SeenProtocols& HttpClient::seen_protocols() const noexcept { return impl_->seen; }
const HttpOptions& HttpClient::options() const noexcept { return impl_->options; }

}  // namespace tensorfetch::detail
