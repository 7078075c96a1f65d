// SPDX-License-Identifier: Apache-2.0
// Remote open (issue 3) against the in-process Hub-like server: results, and through the
// server's log the requests made: count, round trips, ranges, hosts and the token rule.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "checkpoint/checkpoint_internal.h"
#include "hub_server.hpp"
#include "net/http_client.h"
#include "support/env.hpp"
#include "support/files.hpp"
#include "tensorfetch/tensorfetch.hpp"

namespace fs = std::filesystem;
using namespace tensorfetch;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {

// The reference checkpoints, or an empty path (the tests that need them return early).
fs::path reference() { return tftest::reference_dir().value_or(fs::path()); }

// A temporary Hub root: org/llama-tiny-{sharded,single} from the reference checkpoints, plus
// small repos made by the test.
struct Root {
  tftest::TempDir tmp{"tf-remote"};
  fs::path dir = tmp.path();
  Root() {
    for (const char* name : {"llama-tiny-sharded", "llama-tiny-single"}) {
      tftest::copy_files(reference() / name, dir / "org" / name);
    }
    fs::create_directories(dir / "datasets" / "org" / "data");
    fs::copy_file(reference() / "dtypes" / "model.safetensors", dir / "datasets" / "org" / "data" / "model.safetensors");
    tftest::write_file(dir / "org" / "config-only" / "config.json", "{}");
    tftest::write_file(dir / "org" / "bad-index" / "model.safetensors.index.json", "{\"weight_map\": [1,");
    tftest::write_file(dir / "org" / "unsafe-index" / "model.safetensors.index.json",
                       R"({"weight_map":{"w":"../escape.safetensors"}})");
  }
};

struct Fixture {
  Root root;
  HubServer server;
  explicit Fixture(int latency_ms = 0) : server(options(root.dir, latency_ms)) { server.start(); }
  static testing::Options options(const fs::path& dir, int latency_ms) {
    testing::Options o;
    o.root = dir;
    o.latency_ms = latency_ms;
    return o;
  }
  OpenOptions open_options() const {
    OpenOptions o;
    o.endpoint = server.endpoint();
    o.token = std::string();  // never the developer's own token
    o.retry_backoff_ms = 20;
    return o;
  }
};

std::size_t count_kind(const std::vector<RequestRecord>& log, const std::string& kind) {
  return static_cast<std::size_t>(std::count_if(log.begin(), log.end(), [&](const auto& r) { return r.kind == kind; }));
}

}  // namespace

TEST_CASE("remote: a sharded Hub repo opens in 3 round trips and 3 + 2 per shard requests, pinned to one commit", "[remote]") {
  if (reference().empty()) return;
  Fixture f(40);
  auto ckpt = Checkpoint::open("hf://org/llama-tiny-sharded", f.open_options());
  REQUIRE(ckpt);
  CHECK(ckpt->sharded());
  CHECK(ckpt->tensors().size() == 57);
  CHECK(ckpt->files().size() == 3);
  const auto log = f.server.log();
  CHECK(log.size() == 3 + 2 * 3);
  CHECK(ckpt->requests() == log.size());
  CHECK(testing::round_trips(log) == 3);
  CHECK(count_kind(log, "cdn") == 3);
  const std::string commit = f.server.commit("org/llama-tiny-sharded");
  REQUIRE(ckpt->commit());
  CHECK(*ckpt->commit() == commit);
  for (const auto& r : log) {
    INFO(r.to_json());
    CHECK(r.method == "GET");  // no HEAD
    if (r.kind == "resolve" && r.file.find("model-0000") != std::string::npos) {
      CHECK(r.revision == commit);  // shards are resolved at the commit, not at "main"
    }
    // One read per shard, sized from the index (its tensors' names), not the whole window W:
    // the headers here are 2-6 KB.
    if (r.kind == "cdn") CHECK((r.range == "bytes=0-16383" || r.range == "bytes=0-20479"));
  }
  for (const auto& file : ckpt->files()) {
    CHECK(file.etag == "\"" + f.server.file_sha256("org/llama-tiny-sharded", file.path) + "\"");
    CHECK(file.url.find("/cdn/") != std::string::npos);
  }
}

TEST_CASE("remote: a sharded open over slow flows reads only what the index says the shard headers need, "
          "not a 256 KiB window each", "[remote][straggler]") {
  if (reference().empty()) return;
  Fixture f;
  // Every TCP connection's file bodies paced at 32 KiB/s, as a CDN's straggling flow: a 256 KiB
  // window per shard would take 8 s; the headers here are 2-6 KB.
  f.server.slow_connections(32 << 10, 1, 1);
  const auto t0 = std::chrono::steady_clock::now();
  auto ckpt = Checkpoint::open("hf://org/llama-tiny-sharded", f.open_options());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(ckpt);
  CHECK(ckpt->tensors().size() == 57);
  const auto log = f.server.log();
  std::uint64_t cdn_bytes = 0;
  for (const auto& r : log) {
    if (r.kind == "cdn") cdn_bytes += r.body_bytes;
  }
  CHECK(count_kind(log, "cdn") == 3);  // still one read per shard
  CHECK(cdn_bytes <= 3 * (20 << 10));
  CHECK(seconds < 3.0);
}

TEST_CASE("remote: a single-file repo opens in 2 round trips with 4 requests (file via 302, index 404, config)", "[remote]") {
  if (reference().empty()) return;
  Fixture f(40);
  auto ckpt = Checkpoint::open("org/llama-tiny-single", f.open_options());  // bare ORG/NAME
  REQUIRE(ckpt);
  CHECK_FALSE(ckpt->sharded());
  CHECK(ckpt->tensors().size() == 57);
  CHECK(ckpt->config_json());
  const auto log = f.server.log();
  CHECK(log.size() == 4);
  CHECK(testing::round_trips(log) == 2);
}

TEST_CASE("remote: a header ending at, just before or just after the window W needs 1, 1 or 2 CDN reads", "[remote]") {
  if (reference().empty()) return;
  // llama-tiny-single's header: N = 5920, so the header ends at byte 8 + N = 5928.
  for (const auto& [window, cdn_reads] : std::vector<std::pair<std::uint64_t, std::size_t>>{
           {5927, 2}, {5928, 1}, {5929, 1}, {64, 2}}) {
    Fixture f;
    auto o = f.open_options();
    o.header_window = window;
    auto ckpt = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", o);
    INFO("W = " << window);
    REQUIRE(ckpt);
    CHECK(ckpt->tensors().size() == 57);
    CHECK(count_kind(f.server.log(), "cdn") == cdn_reads);
  }
}

TEST_CASE("remote: the token goes to the endpoint host only, never to the CDN host it redirects to", "[remote][token]") {
  if (reference().empty()) return;
  Fixture f;
  f.server.set_token("s3cret");
  f.server.set_private_repos({"org/llama-tiny-sharded"});
  auto o = f.open_options();
  o.token = "s3cret";
  auto ckpt = Checkpoint::open("hf://org/llama-tiny-sharded", o);
  REQUIRE(ckpt);
  const auto log = f.server.log();
  REQUIRE(count_kind(log, "cdn") == 3);
  for (const auto& r : log) {
    INFO(r.to_json());
    CHECK(r.authorization == (r.kind == "resolve"));
    if (r.kind == "cdn") CHECK(r.host.starts_with("127.0.0.1:"));
    if (r.kind == "resolve") CHECK(r.host.starts_with("localhost:"));
  }
}

TEST_CASE("remote: auth and not-found failures name the repo, revision or file and map to network errors (exit 3)", "[remote][errors]") {
  if (reference().empty()) return;
  Fixture f;
  f.server.set_token("s3cret");
  f.server.set_private_repos({"org/llama-tiny-single"});
  f.server.set_gated_repos({"org/llama-tiny-sharded"});
  struct Case {
    const char* location;
    ErrorCode code;
    const char* mention;
  };
  for (const auto& c : std::vector<Case>{
           {"hf://org/nope", ErrorCode::RemoteNotFound, "org/nope"},
           // A private repo without a token: 401 + RepoNotFound, as the Hub answers.
           {"hf://org/llama-tiny-single@v9", ErrorCode::RemoteNotFound, "HF_TOKEN"},
           {"hf://org/llama-tiny-sharded", ErrorCode::Unauthorized, "gated"},
           {"hf://org/config-only", ErrorCode::RemoteNotFound, "not a safetensors repo"},
           {"hf://org/llama-tiny-sharded/missing.safetensors", ErrorCode::Unauthorized, "gated"},
       }) {
    auto r = Checkpoint::open(c.location, f.open_options());
    INFO(c.location);
    REQUIRE_FALSE(r);
    INFO(r.error().message);
    CHECK(r.error().code == c.code);
    CHECK(exit_code(r.error().code) == 3);
    CHECK_THAT(r.error().message, Catch::Contains(c.mention));
  }
  f.server.set_private_repos({});
  f.server.set_gated_repos({});
  auto rev = Checkpoint::open("hf://org/llama-tiny-single@v9", f.open_options());
  REQUIRE_FALSE(rev);
  CHECK(rev.error().code == ErrorCode::RemoteNotFound);
  CHECK_THAT(rev.error().message, Catch::Contains("revision 'v9'"));
  auto file = Checkpoint::open("hf://org/llama-tiny-single/missing.safetensors", f.open_options());
  REQUIRE_FALSE(file);
  CHECK(file.error().code == ErrorCode::RemoteNotFound);
  CHECK_THAT(file.error().message, Catch::Contains("missing.safetensors"));
}

TEST_CASE("remote: an index with an unsafe shard name is refused as a bad index (exit 2) before any shard request", "[remote][errors]") {
  Fixture f;
  auto r = Checkpoint::open("hf://org/unsafe-index", f.open_options());
  REQUIRE_FALSE(r);
  CHECK(r.error().code == ErrorCode::UnsafeShardName);
  CHECK(exit_code(r.error().code) == 2);
  CHECK(count_kind(f.server.log(), "cdn") == 0);
}

TEST_CASE("remote: 429 with Retry-After is retried after the wait; still 429 after every retry is RateLimited", "[remote][retry]") {
  if (reference().empty()) return;
  Fixture f;
  f.server.fail_next(2, 429, 1, false, "model.safetensors");
  auto o = f.open_options();
  auto ckpt = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", o);
  REQUIRE(ckpt);
  auto log = f.server.log();
  REQUIRE(log.size() >= 4);
  CHECK(log[0].status == 429);
  CHECK(log[1].status == 429);
  CHECK(log[1].start_ms - log[0].end_ms >= 900);  // Retry-After: 1 honoured
  CHECK(log[2].status == 302);

  f.server.clear_log();
  f.server.fail_next(-1, 429, 0, true, "model.safetensors");  // RateLimit: ...;t=0
  o.max_retries = 2;
  auto limited = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", o);
  REQUIRE_FALSE(limited);
  CHECK(limited.error().code == ErrorCode::RateLimited);
  CHECK_THAT(limited.error().message, Catch::Contains("3 attempts"));
  CHECK(f.server.log().size() == 3);
  f.server.reset_switches();
}

TEST_CASE("remote: a server that ignores Range still yields the header without reading the whole file into memory", "[remote][faults]") {
  if (reference().empty()) return;
  Fixture f;
  f.server.set_ignore_range(true);
  auto o = f.open_options();
  o.header_window = 8192;
  auto ckpt = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", o);
  REQUIRE(ckpt);
  CHECK(ckpt->files()[0].size == 830888);
  CHECK(ckpt->tensors().size() == 57);
}

TEST_CASE("remote: a 206 whose Content-Range is not the requested range is a BadResponse naming the URL and range, not retried", "[remote][faults]") {
  if (reference().empty()) return;
  Fixture f;
  f.server.wrong_content_range(1, "/cdn/");
  auto r = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", f.open_options());
  REQUIRE_FALSE(r);
  INFO(r.error().message);
  CHECK(r.error().code == ErrorCode::BadResponse);
  CHECK(exit_code(r.error().code) == 3);
  CHECK_THAT(r.error().message, Catch::Contains("bytes=0-262143") && Catch::Contains("/cdn/"));
  // Only the first CDN request was shaped; a retry would have succeeded, and none was made.
  const auto log = f.server.log();
  REQUIRE(count_kind(log, "cdn") == 1);
  CHECK(log.back().fault == "wrong_content_range");
}

// A body longer than the requested range (tools/hubserver's overlong_body switch) must never be
// taken as data beyond the range, never read without bound, and the result must be either
// exactly the right bytes or a BadResponse naming the URL and the range. What the client does
// depends on how the server frames the body:
//  - Content-Length (= the range's length): curl reads exactly that many bytes and hangs up;
//    the extra bytes are never read. The result is exactly the requested bytes.
//  - chunked, or delimited by the connection's close: nothing bounds the body but the client's
//    own limit (the requested length): at the first byte past it the transfer is aborted and
//    the request fails with BadResponse "response body is longer than the requested range".
// In both cases there is no retry (like a wrong Content-Range: the server's answer is wrong,
// not transient). Each mode is checked twice: through Checkpoint::open (extra = 100 bytes,
// retries allowed), and through the client itself (extra = 64 MiB, to see that the client
// stops reading: the server's record shows the connection dropped long before the 64 MiB).
namespace {

using tensorfetch::testing::OverlongMode;

constexpr std::uint64_t kSingleSize = 830888;  // llama-tiny-single/model.safetensors
constexpr std::uint64_t kBigExtra = 64 << 20;

std::string read_bytes(const fs::path& p, std::uint64_t n) {
  std::ifstream in(p, std::ios::binary);
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<std::size_t>(in.gcount()));
  return s;
}

// The server's record of the last CDN request, once the server has finished writing it (the
// record of a response framed by Content-Length enters the log before its extra bytes are
// written, and is amended when the write ends or fails).
RequestRecord settled_cdn_record(const HubServer& server, std::uint64_t full_body) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    const auto log = server.log();
    auto it = std::find_if(log.rbegin(), log.rend(), [](const auto& r) { return r.kind == "cdn"; });
    const bool done = it != log.rend() && (it->dropped || it->body_bytes == full_body);
    if (done || std::chrono::steady_clock::now() > deadline) {
      REQUIRE(it != log.rend());
      return *it;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void check_overlong(OverlongMode mode, bool exact_bytes) {
  Fixture f;
  const fs::path file = f.root.dir / "org" / "llama-tiny-single" / "model.safetensors";
  const std::string window = read_bytes(file, 262144);
  const std::string whole = read_bytes(file, kSingleSize);
  REQUIRE(whole.size() == kSingleSize);

  // 1. The library's open path, with retries allowed.
  f.server.overlong_body(100, 1, "/cdn/", mode);
  auto o = f.open_options();
  o.max_retries = 2;
  auto r = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", o);
  // A response the client abandoned (chunked, close-delimited) enters the log when the server
  // notices the closed connection, which may be just after open returns.
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       f.server.request_count() < 2 && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto log = f.server.take_log();
  std::string log_text;
  for (const auto& rec : log) log_text += rec.to_json() + "\n";
  INFO("server log of the open:\n" << log_text);
  if (exact_bytes) {
    INFO((r ? std::string() : r.error().message));
    REQUIRE(r);
    CHECK(r->files()[0].size == kSingleSize);
    CHECK(r->tensors().size() == 57);
    CHECK(r->requests() == 2);
  } else {
    REQUIRE_FALSE(r);
    INFO(r.error().message);
    CHECK(r.error().code == ErrorCode::BadResponse);
    CHECK(exit_code(r.error().code) == 3);
    CHECK_THAT(r.error().message, Catch::Contains("/cdn/") && Catch::Contains("(bytes=0-262143)") &&
                                      Catch::Contains("longer than the requested range"));
  }
  REQUIRE(log.size() == 2);  // resolve (302) and one CDN read: no retry
  CHECK(log[0].kind == "resolve");
  CHECK(log[1].kind == "cdn");
  CHECK(log[1].fault == "overlong");
  CHECK(log[1].status == 206);
  CHECK(log[1].content_range == "bytes 0-262143/830888");
  CHECK(log[1].content_length == (mode == OverlongMode::ContentLength ? 262144 : -1));

  // 2. The client itself: a window inside the file, 64 MiB of extra bytes.
  const std::string url = f.server.cdn_url("org/llama-tiny-single", "model.safetensors");
  REQUIRE_FALSE(url.empty());
  f.server.overlong_body(kBigExtra, 1, "/cdn/", mode);
  {
    tensorfetch::detail::HttpOptions ho;
    ho.max_retries = 2;
    ho.backoff_base_ms = 20;
    tensorfetch::detail::HttpClient client(ho);
    std::vector<tensorfetch::detail::HttpRequest> reqs(1);
    reqs[0].url = url;
    reqs[0].range = ByteRange{0, 262144};
    reqs[0].max_body = 262144;
    auto results = client.perform(reqs);
    CHECK(client.stats().requests == 1);  // no retry
    CHECK(client.stats().bytes <= 262144);  // nothing past the range was kept
    if (exact_bytes) {
      INFO((results[0] ? std::string() : results[0].error().message));
      REQUIRE(results[0]);
      CHECK(results[0]->status == 206);
      CHECK(results[0]->body.size() == 262144);
      CHECK(results[0]->body == window);
      CHECK(results[0]->attempts == 1);
    } else {
      REQUIRE_FALSE(results[0]);
      INFO(results[0].error().message);
      CHECK(results[0].error().code == ErrorCode::BadResponse);
      CHECK_THAT(results[0].error().message, Catch::StartsWith(url + " (bytes=0-262143): ") &&
                                                 Catch::Contains("longer than the requested range (262144 bytes)"));
    }
  }  // the client is gone: its connections are closed
  const auto big = settled_cdn_record(f.server, 262144 + kBigExtra);
  INFO(big.to_json());
  CHECK(big.fault == "overlong");
  CHECK(big.dropped);                     // the client hung up ...
  CHECK(big.body_bytes < kBigExtra / 4);  // ... long before the extra bytes were all sent
  CHECK(count_kind(f.server.take_log(), "cdn") == 1);

  // 3. The client itself: a range past the end of the file (the server answers the file's
  // 830888 bytes, Content-Range bytes 0-830887/830888) and 100 extra bytes, which still fit
  // in the requested length: the body must agree with Content-Range.
  f.server.overlong_body(100, 1, "/cdn/", mode);
  {
    tensorfetch::detail::HttpClient client(tensorfetch::detail::HttpOptions{});
    std::vector<tensorfetch::detail::HttpRequest> reqs(1);
    reqs[0].url = url;
    reqs[0].range = ByteRange{0, 1 << 20};
    reqs[0].max_body = 1 << 20;
    auto results = client.perform(reqs);
    CHECK(client.stats().requests == 1);
    if (exact_bytes) {
      INFO((results[0] ? std::string() : results[0].error().message));
      REQUIRE(results[0]);
      CHECK(results[0]->status == 206);
      REQUIRE(results[0]->content_range);
      CHECK(results[0]->content_range->last == kSingleSize - 1);
      CHECK(results[0]->body == whole);
    } else {
      REQUIRE_FALSE(results[0]);
      INFO(results[0].error().message);
      CHECK(results[0].error().code == ErrorCode::BadResponse);
      CHECK_THAT(results[0].error().message,
                 Catch::StartsWith(url + " (bytes=0-1048575): ") &&
                     Catch::Contains("body of 830988 bytes for Content-Range bytes 0-830887"));
    }
  }
  const auto past = f.server.log();
  REQUIRE(past.size() == 1);
  CHECK(past[0].fault == "overlong");
  CHECK(past[0].content_range == "bytes 0-830887/830888");
  f.server.reset_switches();
}

}  // namespace

TEST_CASE("remote: an overlong body framed by Content-Length yields exactly the requested bytes; the extra bytes are never read", "[remote][faults]") {
  if (reference().empty()) return;
  check_overlong(OverlongMode::ContentLength, true);
}

TEST_CASE("remote: an overlong chunked body is a BadResponse naming the URL and range, not retried, read no further than the range", "[remote][faults]") {
  if (reference().empty()) return;
  check_overlong(OverlongMode::Chunked, false);
}

TEST_CASE("remote: an overlong close-delimited body is a BadResponse naming the URL and range, not retried, read no further than the range", "[remote][faults]") {
  if (reference().empty()) return;
  check_overlong(OverlongMode::CloseDelimited, false);
}

TEST_CASE("remote: an unreachable host is a Network error naming the URL", "[remote][errors]") {
  OpenOptions o;
  o.endpoint = "http://127.0.0.1:1";
  o.token = std::string();
  o.max_retries = 0;
  auto r = Checkpoint::open("hf://org/x", o);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == ErrorCode::Network);
  CHECK_THAT(r.error().message, Catch::Contains("127.0.0.1:1"));
}

TEST_CASE("remote: http(s) URLs of a file or an index, and dataset repos", "[remote]") {
  if (reference().empty()) return;
  Fixture f;
  const std::string base = f.server.endpoint() + "/org/llama-tiny-sharded/resolve/main/";
  auto sharded = Checkpoint::open(base + "model.safetensors.index.json", f.open_options());
  REQUIRE(sharded);
  CHECK(sharded->tensors().size() == 57);
  auto single = Checkpoint::open(f.server.endpoint() + "/org/llama-tiny-single/resolve/main/model.safetensors", f.open_options());
  REQUIRE(single);
  CHECK(single->tensors().size() == 57);
  auto data = Checkpoint::open("hf://datasets/org/data", f.open_options());
  REQUIRE(data);
  CHECK(data->tensors().size() == 19);
}

TEST_CASE("remote: HTTPS is verified: the test CA passes, no CA is a TLS failure", "[remote][tls]") {
  if (reference().empty()) return;
  Root root;
  tftest::TempDir tls_dir("tf-tls");
  const fs::path dir = tls_dir.path();
  auto tls = testing::generate_self_signed_cert(dir);
  testing::Options so;
  so.root = root.dir;
  so.tls_cert = tls.cert;
  so.tls_key = tls.key;
  HubServer server(so);
  server.start();
  OpenOptions o;
  o.endpoint = server.endpoint();
  o.token = std::string();
  o.max_retries = 0;
  o.ca_file = "/nonexistent-ca.pem";
  auto bad = Checkpoint::open("hf://org/llama-tiny-single", o);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == ErrorCode::Network);
  o.ca_file = tls.cert.string();
  auto ok = Checkpoint::open("hf://org/llama-tiny-single", o);
  INFO((ok ? std::string() : ok.error().message));
  REQUIRE(ok);
  CHECK(ok->tensors().size() == 57);
  // CURL_CA_BUNDLE is honoured when no CA file is given.
  o.ca_file.clear();
  {
    tftest::ScopedEnv env("CURL_CA_BUNDLE", tls.cert.string());
    auto via_env = Checkpoint::open("hf://org/llama-tiny-single", o);
    CHECK(via_env);
  }
  server.stop();
}

TEST_CASE("remote: a malformed index is refused as a bad index (exit 2) naming the file", "[remote][errors]") {
  Fixture f;
  auto r = Checkpoint::open("hf://org/bad-index", f.open_options());
  REQUIRE_FALSE(r);
  CHECK(r.error().code == ErrorCode::InvalidIndex);
  CHECK(exit_code(r.error().code) == 2);
  CHECK_THAT(r.error().message, Catch::Contains("model.safetensors.index.json"));
}

TEST_CASE("remote: a connection dropped mid-body and a stalled transfer are retried and the open succeeds", "[remote][faults]") {
  if (reference().empty()) return;
  Fixture f;
  f.server.drop_after(100, 1, "/cdn/");
  auto o = f.open_options();
  auto dropped = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", o);
  REQUIRE(dropped);
  auto log = f.server.take_log();
  CHECK(std::count_if(log.begin(), log.end(), [](const auto& r) { return r.dropped; }) == 1);
  CHECK(count_kind(log, "cdn") == 2);

  f.server.stall_after(100, 1, "/cdn/", 20'000);
  o.stall_timeout_ms = 1000;
  auto stalled = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", o);
  REQUIRE(stalled);
  CHECK(stalled->tensors().size() == 57);
  // The stalled attempt is still hanging on the server (its record lands when it ends); the
  // client gave up on it after the stall timeout and sent one more CDN request.
  CHECK(stalled->requests() == 2 + 1);  // resolve (302), the stalled CDN read, its retry
  CHECK(count_kind(f.server.take_log(), "cdn") == 1);
  f.server.reset_switches();
}

TEST_CASE("remote: without an explicit token, $HF_TOKEN and then $HF_HOME/token are used", "[remote][token]") {
  if (reference().empty()) return;
  Fixture f;
  f.server.set_token("from-file");
  f.server.set_private_repos({"org/llama-tiny-single"});
  tftest::TempDir home("tf-hfhome");
  tftest::write_file(home / "token", "from-file\n");
  tftest::ScopedEnv env;
  env.unset("HF_TOKEN");
  env.set("HF_HOME", home.path().string());
  auto o = f.open_options();
  o.token.reset();
  auto ok = Checkpoint::open("hf://org/llama-tiny-single", o);
  CHECK(ok);
  env.set("HF_TOKEN", "wrong");  // HF_TOKEN wins over the file
  auto wrong = Checkpoint::open("hf://org/llama-tiny-single", o);
  CHECK_FALSE(wrong);
}

// ---- the data connections a fetch gets from a warming open (detail::DataConnections) --------

namespace {

// The client ports of the server's log records of `range` (a record is in the log before its
// client sees the end of the response).
std::set<int> ports_of(const HubServer& server, const std::string& range) {
  std::set<int> ports;
  for (const auto& r : server.log()) {
    if (r.range == range) ports.insert(r.client_port);
  }
  return ports;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("data connections: a fetch that asks for the client while warm-ups still run waits for them and gets their "
          "connections; warm-ups that never end cost it kWarmWait; a cancelled fetch does not wait",
          "[remote][warm]") {
  if (reference().empty()) return;
  using detail::DataConnections;
  Fixture f;
  detail::HttpRequest warm;
  warm.url = f.server.cdn_url("org/llama-tiny-single", "model.safetensors");
  REQUIRE_FALSE(warm.url.empty());
  warm.range = ByteRange{0, 1};
  warm.max_redirects = 0;
  constexpr std::size_t kN = 3;
  const auto started = std::chrono::steady_clock::now();
  SECTION("warm-ups of 400 ms: waited for, then the next requests ride their connections") {
    f.server.set_latency_ms(400);
    DataConnections data(detail::HttpOptions{}, warm, kN);
    detail::HttpClient& client = data.client(CancelToken{});
    const double waited = seconds_since(started);
    INFO("client() returned after " << waited << " s");
    CHECK(waited >= 0.35);
    CHECK(waited < DataConnections::kWarmWait.count() / 1000.0);
    const std::set<int> warm_ports = ports_of(f.server, "bytes=0-0");
    CHECK(warm_ports.size() == kN);  // all three answered, each on a connection of its own
    f.server.set_latency_ms(0);
    detail::HttpRequest next = warm;
    next.range = ByteRange{1, 2};
    const auto results = client.perform(std::vector<detail::HttpRequest>(kN, next));
    for (const auto& r : results) CHECK(r);
    const std::set<int> next_ports = ports_of(f.server, "bytes=1-2");
    CHECK_FALSE(next_ports.empty());
    for (int port : next_ports) CHECK(warm_ports.count(port) == 1);  // no new connection
  }
  SECTION("warm-ups that never end: the fetch waits kWarmWait, then stops them") {
    f.server.stall_after(0, -1, "/cdn/", 10000);
    DataConnections data(detail::HttpOptions{}, warm, kN);
    (void)data.client(CancelToken{});
    const double waited = seconds_since(started);
    INFO("client() returned after " << waited << " s");
    CHECK(waited >= DataConnections::kWarmWait.count() / 1000.0);
    CHECK(waited < DataConnections::kWarmWait.count() / 1000.0 + 0.8);
    f.server.reset_switches();
  }
  SECTION("a cancelled fetch stops them at once") {
    f.server.stall_after(0, -1, "/cdn/", 10000);
    DataConnections data(detail::HttpOptions{}, warm, kN);
    auto cancel = CancelToken::make();
    cancel.cancel();
    (void)data.client(cancel);
    const double waited = seconds_since(started);
    INFO("client() returned after " << waited << " s");
    CHECK(waited < 0.5);
    f.server.reset_switches();
  }
}
