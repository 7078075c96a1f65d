// SPDX-License-Identifier: Apache-2.0
// The HTTP layer against hostile servers (issue 14, items 5 and 7), asserted through the test
// servers' request logs:
//  - an https → http redirect is refused at the hop, for plain and streamed (sink) requests:
//    the plaintext server sees nothing;
//  - a dripping server is abandoned once a stall window brings less than `min_rate`, retried
//    from the last byte received, and finally reported with the URL, the range and the rate; a
//    slow but acceptable server is not;
//  - a fetch from a dripping server fails cleanly: nothing partial is served or marked complete;
//  - URLs and header values with control characters never reach libcurl.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <set>
#include <span>
#include <thread>

#include <nlohmann/json.hpp>

#include "http_util.hpp"
#include "net/http_client.h"
#include "tensorfetch/tensorfetch.hpp"

using namespace hubtest;
using tensorfetch::ErrorCode;
using tensorfetch::detail::BodySink;
using tensorfetch::detail::HttpClient;
using tensorfetch::detail::HttpOptions;
using tensorfetch::detail::HttpRequest;

namespace {

// Keeps what a streamed request delivered, checking that pieces are contiguous.
struct RecordingSink : BodySink {
  std::uint64_t start = 0;
  std::string bytes;
  tensorfetch::Result<void> write(std::uint64_t offset, std::span<const std::byte> data) override {
    if (offset != start + bytes.size()) return tensorfetch::fail(ErrorCode::Io, "not contiguous");
    bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
    return {};
  }
};

HttpOptions quick_options() {
  HttpOptions o;
  o.stall_timeout_ms = 1000;
  o.min_rate = 1024;
  o.max_retries = 2;
  o.backoff_base_ms = 20;
  return o;
}

std::string log_text(const std::vector<RequestRecord>& log) {
  std::string s;
  for (const auto& r : log) s += r.to_json() + "\n";
  return s;
}

// The records of `server`'s log whose target contains `needle`, once there are `count` of them
// (or after 5 s): a request the client abandoned enters the log when the server notices.
std::vector<RequestRecord> await_log(const HubServer& server, const std::string& needle, std::size_t count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (true) {
    auto found = find(server.log(), needle);
    if (found.size() >= count || std::chrono::steady_clock::now() > deadline) return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("net: an https redirect to http:// is refused, naming both URLs; the plaintext server sees nothing",
          "[net][tls][downgrade]") {
  TempDir certs;
  const auto tls = tensorfetch::testing::generate_self_signed_cert(certs.path() / "tls");
  Options o;
  o.tls_cert = tls.cert;
  o.tls_key = tls.key;
  Fixture hub(o);
  Fixture plain;
  const std::string plain_base = "http://127.0.0.1:" + std::to_string(plain.server->port());
  hub.server->set_cdn_base(plain_base);

  HttpOptions options = quick_options();
  options.ca_file = tls.cert.string();
  HttpClient client(options);
  const std::string url = hub.server->endpoint() + "/org/small/resolve/main/model.safetensors";
  RecordingSink sink;
  std::vector<HttpRequest> requests(2);
  requests[0].url = url;  // a header read: body in memory
  requests[0].range = tensorfetch::ByteRange{0, 4096};
  requests[1].url = url;  // a fetch: body streamed into the cache
  requests[1].range = tensorfetch::ByteRange{0, 4096};
  requests[1].sink = &sink;
  requests[1].expected_size = kSmallModelSize;
  auto results = client.perform(requests);
  INFO("TLS log:\n" << log_text(hub.server->log()) << "plain log:\n" << log_text(plain.server->log()));
  for (const auto& r : results) {
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ErrorCode::BadResponse);
    CHECK(tensorfetch::exit_code(r.error().code) == 3);
    CHECK_THAT(r.error().message, Catch::StartsWith(url + " (bytes=0-4095): refused the redirect from https to " +
                                                    plain_base + "/cdn/"));
    CHECK_THAT(r.error().message, Catch::Contains("downgrade"));
  }
  CHECK(sink.bytes.empty());
  CHECK(plain.server->log().empty());
  CHECK(hub.server->log().size() == 2);  // the two resolves, nothing after
  CHECK(client.stats().requests == 2);

  // https → https (the server's own CDN host) is followed as before.
  hub.server->set_cdn_base("");
  RecordingSink ok_sink;
  requests[1].sink = &ok_sink;
  auto ok = client.perform(std::span(requests).subspan(1));
  REQUIRE(ok[0]);
  CHECK(ok[0]->status == 206);
  CHECK(ok_sink.bytes == read_file(hub.root.file(kSmall, "model.safetensors")).substr(0, 4096));
}

TEST_CASE("net: a dripping server is abandoned per stall window, resumed, and reported with URL, range and rate",
          "[net][drip]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  s.drip(2, 100, -1, "/cdn/");  // 20 B/s
  HttpClient client(quick_options());
  RecordingSink sink;
  HttpRequest request;
  request.url = s.endpoint() + "/org/small/resolve/main/model.safetensors";
  request.range = tensorfetch::ByteRange{1000, 50000};
  request.sink = &sink;
  request.expected_size = kSmallModelSize;
  sink.start = 1000;
  const auto t0 = std::chrono::steady_clock::now();
  auto results = client.perform(std::span(&request, 1));
  const double seconds = seconds_since(t0);
  const auto log = s.log();
  INFO("log:\n" << log_text(log) << "seconds: " << seconds);
  REQUIRE_FALSE(results[0]);
  const auto& e = results[0].error();
  INFO(e.message);
  CHECK(e.code == ErrorCode::Network);
  CHECK_THAT(e.message, Catch::Contains("/cdn/") && Catch::Contains("(bytes=" + std::to_string(1000 + sink.bytes.size()) +
                                                                   "-50999): too slow: "));
  CHECK_THAT(e.message, Catch::Contains(" B/s over the last 1000 ms, below the minimum of 1024 B/s (after 3 attempts)"));
  CHECK(seconds < 6);  // 3 windows of 1 s and short backoffs
  // What arrived is the file's bytes, in order, across the attempts: each retry resumed.
  CHECK(sink.bytes.size() >= 3 * 10);
  CHECK(sink.bytes.size() < 200);
  CHECK(sink.bytes == content.substr(1000, sink.bytes.size()));
  const auto cdn = await_log(s, "/cdn/", 3);
  REQUIRE(cdn.size() == 3);
  // Each attempt resumed after what the previous one delivered (the server may have written a
  // few bytes more than the client read before it hung up).
  std::uint64_t previous_start = 0, previous_sent = 0;
  for (std::size_t i = 0; i < cdn.size(); ++i) {
    const auto& rec = cdn[i];
    INFO(rec.to_json());
    CHECK(rec.fault == "drip");
    REQUIRE(rec.range.starts_with("bytes="));
    CHECK_THAT(rec.range, Catch::EndsWith("-50999"));
    const std::uint64_t start = std::stoull(rec.range.substr(6));
    if (i == 0) {
      CHECK(start == 1000);
    } else {
      CHECK(start > previous_start);
      CHECK(start <= previous_start + previous_sent);
    }
    CHECK(rec.body_bytes >= 10);  // about 20 bytes per window
    previous_start = start;
    previous_sent = rec.body_bytes;
  }
  CHECK(previous_start + cdn.back().body_bytes >= 1000 + sink.bytes.size());
  CHECK(find(log, "/resolve/").size() == 1);  // the redirect is followed once, then only the CDN hop is retried
}

TEST_CASE("net: a slow but acceptable transfer is not abandoned; min_rate 0 keeps only the no-byte stall",
          "[net][drip]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string url = s.endpoint() + "/org/small/resolve/main/model.safetensors";
  SECTION("8 KiB per 100 ms (80 KB/s) against a minimum of 1 KiB/s, over two windows") {
    s.drip(8192, 100, -1, "/cdn/");
    HttpClient client(quick_options());
    RecordingSink sink;
    HttpRequest request;
    request.url = url;
    request.range = tensorfetch::ByteRange{0, kSmallModelSize};
    request.sink = &sink;
    auto results = client.perform(std::span(&request, 1));
    REQUIRE(results[0]);
    CHECK(results[0]->attempts == 1);
    CHECK(sink.bytes == content);
  }
  SECTION("min_rate 0: 20 B/s for 1.5 s is waited for") {
    s.drip(2, 100, -1, "/cdn/");
    HttpOptions o = quick_options();
    o.min_rate = 0;
    HttpClient client(o);
    RecordingSink sink;
    HttpRequest request;
    request.url = url;
    request.range = tensorfetch::ByteRange{0, 30};
    request.sink = &sink;
    auto results = client.perform(std::span(&request, 1));
    REQUIRE(results[0]);
    CHECK(results[0]->attempts == 1);
    CHECK(sink.bytes == content.substr(0, 30));
  }
}

TEST_CASE("net: URLs, tokens and If-Match values with control characters never reach libcurl", "[net][inject]") {
  Fixture f;
  auto& s = *f.server;
  HttpClient client(quick_options());
  const std::string url = s.endpoint() + "/org/small/resolve/main/config.json";
  std::vector<HttpRequest> requests(5);
  requests[0].url = url + "\r\nX-Evil: 1";
  requests[1].url = s.endpoint() + "/org/small/resolve/main/con fig.json";
  requests[2].url = url;
  requests[2].bearer_token = "hf_secret\r\nX-Evil: 1";
  requests[2].token_authority = s.endpoint();
  requests[3].url = url;
  requests[3].if_match = "\"x\"\r\nX-Evil: 1";
  requests[4].url = url;  // a clean one, for contrast
  requests[4].bearer_token = "hf_clean";
  requests[4].token_authority = s.endpoint();
  auto results = client.perform(requests);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("request " << i);
    REQUIRE_FALSE(results[i]);
    CHECK(results[i].error().code == ErrorCode::InvalidArgument);
    CHECK_THAT(results[i].error().message, !Catch::Contains("hf_secret") && !Catch::Contains("\r"));
  }
  REQUIRE(results[4]);
  const auto log = s.log();
  INFO(log_text(log));
  REQUIRE(log.size() == 1);  // only the clean request was sent
  CHECK(log[0].authorization_sha256 == sha256_hex("Bearer hf_clean"));
}

TEST_CASE("net: a redirect to a URL with a control character is refused", "[net][inject]") {
  Fixture f;
  auto& s = *f.server;
  s.set_header("Location", "http://127.0.0.1:" + std::to_string(s.port()) + "/cdn/x\x1b[2J", 1, "/resolve/");
  HttpClient client(quick_options());
  HttpRequest request;
  request.url = s.endpoint() + "/org/small/resolve/main/model.safetensors";
  request.range = tensorfetch::ByteRange{0, 100};
  auto results = client.perform(std::span(&request, 1));
  const auto log = s.log();
  INFO(log_text(log));
  REQUIRE_FALSE(results[0]);
  CHECK(results[0].error().code == ErrorCode::BadResponse);
  CHECK_THAT(results[0].error().message, Catch::Contains("/cdn/x%1B[2J"));
  CHECK(log.size() == 1);
}

TEST_CASE("fetch from a dripping server: exit-3 error, nothing partial served, a later fetch completes it",
          "[net][drip][fetch]") {
  Fixture f;
  auto& s = *f.server;
  // org/drip: one 64 KiB tensor after a small header.
  nlohmann::ordered_json header;
  header["w"] = {{"dtype", "U8"}, {"shape", {65536}}, {"data_offsets", {0, 65536}}};
  std::string text = header.dump();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  std::string data(65536, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  file += text + data;
  {
    fs::create_directories(f.root.path() / "org" / "drip");
    std::ofstream(f.root.path() / "org" / "drip" / "model.safetensors", std::ios::binary) << file;
  }
  TempDir cache;
  tensorfetch::OpenOptions o;
  o.endpoint = s.endpoint();
  o.token = "";
  o.cache_dir = cache.path().string();
  o.hf_hub_cache = (cache.path() / "hf").string();
  o.offline = false;
  o.header_window = 64;  // the tensor's bytes are left for the fetch
  o.stall_timeout_ms = 1000;
  o.min_rate = 1024;
  o.max_retries = 1;
  o.retry_backoff_ms = 20;
  auto ckpt = tensorfetch::Checkpoint::open("hf://org/drip", o);
  REQUIRE(ckpt);
  auto sel = ckpt->select(std::vector<tensorfetch::Selector>{{"w", std::nullopt}});
  REQUIRE(sel);
  s.clear_log();
  s.drip(2, 100, -1, "/cdn/");
  const auto t0 = std::chrono::steady_clock::now();
  auto fetched = ckpt->fetch(*sel);
  const double seconds = seconds_since(t0);
  INFO("log:\n" << log_text(s.log()) << "seconds: " << seconds);
  REQUIRE_FALSE(fetched);
  CHECK(tensorfetch::exit_code(fetched.error().code) == 3);
  CHECK_THAT(fetched.error().message, Catch::Contains("too slow") && Catch::Contains("bytes="));
  CHECK(seconds < 6);
  CHECK(await_log(s, "/cdn/", 2).size() == 2);  // 1 + max_retries attempts
  auto view = ckpt->view(ckpt->tensors()[0]);
  REQUIRE_FALSE(view);
  CHECK(view.error().code == ErrorCode::NotFetched);
  auto entries = tensorfetch::cache_list(cache.path().string());
  REQUIRE(entries);
  for (const auto& e : *entries) CHECK_FALSE(e.complete);

  // The server recovers: the fetch resumes after the bytes that arrived in order (validated
  // 206 bytes of the pinned ETag, kept as a partial extent), completes, and serves exactly the
  // file's bytes.
  s.reset_switches();
  s.clear_log();
  fetched = ckpt->fetch(*sel);
  REQUIRE(fetched);
  const auto resumed = find(s.log(), "/cdn/");
  REQUIRE(resumed.size() == 1);
  const std::uint64_t data_start = 8 + text.size();
  CHECK(resumed[0].range.starts_with("bytes="));
  CHECK(std::stoull(resumed[0].range.substr(6)) > data_start);
  CHECK_THAT(resumed[0].range, Catch::EndsWith("-" + std::to_string(file.size() - 1)));
  view = ckpt->view(ckpt->tensors()[0]);
  REQUIRE(view);
  CHECK(std::string(reinterpret_cast<const char*>(view->bytes.data()), view->bytes.size()) == data);
}

TEST_CASE("net: a request waits to multiplex only toward a host seen to speak HTTP/2, or a new host after one that "
          "did (SeenProtocols)", "[net][multiplex]") {
  using tensorfetch::detail::SeenProtocols;
  const std::string hub = "https://hub.example", cdn = "https://cdn.example/x", other = "https://other.example:8443/y";
  SeenProtocols seen;
  // Nothing answered yet: no wait (the first requests open a connection each).
  CHECK_FALSE(seen.wait_for(hub + "/a"));
  CHECK_FALSE(seen.wait_for("http://plain.example/a"));
  seen.saw(hub + "/index.json", true);
  CHECK(seen.wait_for(hub + "/shard"));  // seen to multiplex
  CHECK(seen.wait_for(cdn));             // not seen, after an HTTP/2 answer
  seen.saw(cdn, false);
  CHECK_FALSE(seen.wait_for(cdn));    // seen to answer HTTP/1.1
  CHECK(seen.wait_for(hub + "/b"));   // still HTTP/2
  CHECK_FALSE(seen.wait_for(other));  // not seen, after an HTTP/1.1 answer
  seen.saw("http://plain.example/a", true);  // plain http is never waited for, nor recorded
  CHECK_FALSE(seen.wait_for("http://plain.example/a"));
  CHECK(seen.h2.size() == 2);
}

TEST_CASE("net: over an HTTP/1.1-only TLS Hub and CDN, a multiplexing client learns both speak HTTP/1.1 and sends "
          "parallel requests on a connection each", "[net][tls][multiplex]") {
  TempDir certs;
  const auto tls = tensorfetch::testing::generate_self_signed_cert(certs.path() / "tls");
  Options o;
  o.tls_cert = tls.cert;
  o.tls_key = tls.key;
  o.latency_ms = 100;  // every request still in flight when the others start: no connection reuse
  Fixture hub(o);
  HttpOptions options = quick_options();
  options.ca_file = tls.cert.string();
  options.multiplex = true;
  HttpClient client(options);
  const std::string url = hub.server->endpoint() + "/org/small/resolve/main/model.safetensors";
  std::vector<HttpRequest> requests(8);
  for (auto& r : requests) {
    r.url = url;  // a resolve on the Hub, redirected to the CDN host
    r.range = tensorfetch::ByteRange{0, 4096};
  }
  for (const auto& r : client.perform(requests)) {
    REQUIRE(r);
    CHECK(r->status == 206);
  }
  const auto& seen = client.seen_protocols();
  INFO(log_text(hub.server->log()));
  REQUIRE(seen.h2.size() == 2);  // the Hub and the CDN host
  for (const auto& [authority, h2] : seen.h2) CHECK_FALSE(h2);
  CHECK_FALSE(seen.wait_for(url));
  std::set<int> hub_ports, cdn_ports;
  for (const auto& r : hub.server->log()) (r.kind == "cdn" ? cdn_ports : hub_ports).insert(r.client_port);
  CHECK(hub_ports.size() == requests.size());
  CHECK(cdn_ports.size() == requests.size());
}
