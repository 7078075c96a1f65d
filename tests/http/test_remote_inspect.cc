// SPDX-License-Identifier: Apache-2.0
// Remote open (issue 3) against the in-process Hub-like server: results, and through the
// server's log the requests made: count, round trips, ranges, hosts and the token rule.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "hub_server.hpp"
#include "tensorfetch/tensorfetch.hpp"

namespace fs = std::filesystem;
using namespace tensorfetch;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {

fs::path reference() {
  const char* dir = std::getenv("TENSORFETCH_REFERENCE_DIR");
  return dir ? fs::path(dir) : fs::path();
}

// A temporary Hub root: org/llama-tiny-{sharded,single} from the reference checkpoints, plus
// small repos made by the test.
struct Root {
  fs::path dir;
  Root() {
    char tmpl[] = "/tmp/tf-remote-XXXXXX";
    dir = ::mkdtemp(tmpl);
    for (const char* name : {"llama-tiny-sharded", "llama-tiny-single"}) {
      fs::create_directories(dir / "org" / name);
      for (const auto& e : fs::directory_iterator(reference() / name)) {
        fs::copy_file(e.path(), dir / "org" / name / e.path().filename());
      }
    }
    fs::create_directories(dir / "datasets" / "org" / "data");
    fs::copy_file(reference() / "dtypes" / "model.safetensors", dir / "datasets" / "org" / "data" / "model.safetensors");
    fs::create_directories(dir / "org" / "config-only");
    std::ofstream(dir / "org" / "config-only" / "config.json") << "{}";
    fs::create_directories(dir / "org" / "bad-index");
    std::ofstream(dir / "org" / "bad-index" / "model.safetensors.index.json") << "{\"weight_map\": [1,";
    fs::create_directories(dir / "org" / "unsafe-index");
    std::ofstream(dir / "org" / "unsafe-index" / "model.safetensors.index.json")
        << R"({"weight_map":{"w":"../escape.safetensors"}})";
  }
  ~Root() { fs::remove_all(dir); }
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
    if (r.kind == "cdn") CHECK(r.range == "bytes=0-262143");
  }
  for (const auto& file : ckpt->files()) {
    CHECK(file.etag == "\"" + f.server.file_sha256("org/llama-tiny-sharded", file.path) + "\"");
    CHECK(file.url.find("/cdn/") != std::string::npos);
  }
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

TEST_CASE("remote: a wrong Content-Range or a body longer than the range is a clean BadResponse naming the URL and range", "[remote][faults]") {
  if (reference().empty()) return;
  Fixture f;
  f.server.wrong_content_range(1, "/cdn/");
  auto r = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", f.open_options());
  REQUIRE_FALSE(r);
  CHECK(r.error().code == ErrorCode::BadResponse);
  CHECK_THAT(r.error().message, Catch::Contains("bytes=0-262143") && Catch::Contains("/cdn/"));
  f.server.reset_switches();
  f.server.overlong_body(100, 1, "/cdn/");
  auto o = f.open_options();
  o.max_retries = 0;
  auto r2 = Checkpoint::open("hf://org/llama-tiny-single/model.safetensors", o);
  if (!r2) {
    CHECK((r2.error().code == ErrorCode::BadResponse || r2.error().code == ErrorCode::Network));
    CHECK_THAT(r2.error().message, Catch::Contains("/cdn/"));
  }
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
  char tmpl[] = "/tmp/tf-tls-XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
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
  ::setenv("CURL_CA_BUNDLE", tls.cert.c_str(), 1);
  auto via_env = Checkpoint::open("hf://org/llama-tiny-single", o);
  ::unsetenv("CURL_CA_BUNDLE");
  CHECK(via_env);
  server.stop();
  fs::remove_all(dir);
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
  char tmpl[] = "/tmp/tf-hfhome-XXXXXX";
  fs::path home = ::mkdtemp(tmpl);
  std::ofstream(home / "token") << "from-file\n";
  ::unsetenv("HF_TOKEN");
  ::setenv("HF_HOME", home.c_str(), 1);
  auto o = f.open_options();
  o.token.reset();
  auto ok = Checkpoint::open("hf://org/llama-tiny-single", o);
  CHECK(ok);
  ::setenv("HF_TOKEN", "wrong", 1);  // HF_TOKEN wins over the file
  auto wrong = Checkpoint::open("hf://org/llama-tiny-single", o);
  CHECK_FALSE(wrong);
  ::unsetenv("HF_TOKEN");
  ::unsetenv("HF_HOME");
  fs::remove_all(home);
}
