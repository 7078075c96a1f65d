// SPDX-License-Identifier: Apache-2.0
// The CLI against the test server's real-Hub profile (issue 9): the Hub as it answers today
// (Xet storage behind a CDN), asserted through exit codes, messages and the server's log.
//  - the four everyday failures: a URL whose ETag is a 64-hex Xet hash, a legacy id
//    (hf://gpt2), a CDN answering 416 to valid ranges, a 429 whose RateLimit says to wait;
//  - large files (302 without ETag, Xet ETags pinned with If-Match), small files (relative 307
//    to /api/resolve-cache/, token kept), renamed repos (one redirect, then the canonical name);
//  - rate limits: the wait is told and honoured, Ctrl-C still works, r>0 costs nothing;
//  - transient CDN faults (416, 400, 403 SignatureError): retried, re-resolved, or exit 3;
//  - every error the Hub sends, each with its own message (exit 3);
//  - the environment as huggingface_hub reads it.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <csignal>
#include <set>
#include <thread>

#include "support/process.hpp"
#include "cli_util.hpp"
#include "hub_server.hpp"

using namespace clitest;
using namespace std::chrono_literals;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {

constexpr const char* kToken = "hf_real_hub_token";
constexpr const char* kNoAccessToken = "hf_account_without_access";
constexpr const char* kShard1 = "model-00001-of-00003.safetensors";

std::string log_text(const std::vector<RequestRecord>& log) {
  std::string s;
  for (const auto& r : log) s += r.to_json() + "\n";
  return s;
}

std::size_t count(const std::vector<RequestRecord>& log, const std::function<bool(const RequestRecord&)>& pred) {
  return static_cast<std::size_t>(std::count_if(log.begin(), log.end(), pred));
}

// One server in the real-Hub profile:
//   org/llama                  the reference sharded checkpoint (3 shards, index, config.json)
//   openai-community/gpt2      the reference single file; `gpt2` is its legacy alias
//   org/gated, org/private, org/disabled   copies of the single file with access rules
// and a cache, HF_HOME and environment of the test's own.
struct RealHub {
  fs::path reference;
  TempDir root, cache, hf_home, work;
  tftest::ScopedEnv env;
  std::unique_ptr<HubServer> server;

  explicit RealHub(fs::path ref) : reference(std::move(ref)) {
    auto copy = [&](const fs::path& from, const std::string& repo) {
      fs::create_directories(root.path() / repo);
      for (const auto& e : fs::directory_iterator(from)) write_file(root.path() / repo / e.path().filename(), read_file(e.path()));
    };
    copy(reference / "llama-tiny-sharded", "org/llama");
    for (const char* repo : {"openai-community/gpt2", "org/gated", "org/private", "org/disabled"}) {
      copy(reference / "llama-tiny-single", repo);
    }
    for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT", "HF_HUB_OFFLINE",
                          "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "CURL_CA_BUNDLE",
                          "XDG_CACHE_HOME", "TENSORFETCH_SHARED_CACHE"}) {
      env.set(v, std::nullopt);
    }
    env.set("HF_HOME", hf_home.path().string());
    env.set("TENSORFETCH_CACHE", (cache / "tf").string());
    tensorfetch::testing::Options o;
    o.root = root.path();
    o.real_hub = true;
    o.token = kToken;
    o.other_tokens = {kNoAccessToken};
    o.gated_repos = {"org/gated"};
    o.private_repos = {"org/private"};
    o.disabled_repos = {"org/disabled"};
    o.repo_aliases = {{"gpt2", "openai-community/gpt2"}, {"old-org/llama", "org/llama"}};
    server = std::make_unique<HubServer>(o);
    server->start();
    env.set("HF_ENDPOINT", server->endpoint());
  }
  ~RealHub() { server->stop(); }

  // The bytes `get` of `selection` from the reference file on disk writes.
  std::string local_get(const std::string& checkpoint, const std::string& selection) const {
    const fs::path out = work / "local.safetensors";
    auto r = run({"get", (reference / checkpoint).string(), selection, "-o", out.string(), "-q"});
    REQUIRE(r.exit_code == 0);
    return read_file(out);
  }
};

}  // namespace

TEST_CASE("real hub: download of a URL whose 64-hex ETag is a Xet hash, not the sha256: exit 0, right bytes, "
          "and it says what was verified",
          "[cli][realhub][xet]") {
  auto ref = reference_dir();
  if (!ref) return;
  RealHub hub(*ref);
  const std::string shard_sha = hub.server->file_sha256("org/llama", kShard1);
  // 1. The CDN URL itself: a plain URL whose only validator is the Xet ETag.
  const std::string cdn = hub.server->cdn_url("org/llama", kShard1);
  auto r = run({"download", cdn, "-o", (hub.work / "plain").string()});
  INFO(r.err << "\n" << log_text(hub.server->log()));
  REQUIRE(r.exit_code == 0);
  // Named after the URL's last segment (here the CDN's blob name).
  std::vector<fs::path> written;
  for (const auto& e : fs::directory_iterator(hub.work / "plain")) written.push_back(e.path());
  REQUIRE(written.size() == 1);
  CHECK(sha256_hex(read_file(written[0])) == shard_sha);
  CHECK_THAT(r.err, Catch::Contains("no sha256 from the server") && Catch::Contains("checked by size and ETag only"));
  for (const auto& rec : hub.server->take_log()) {
    if (rec.kind != "cdn") continue;
    CHECK(rec.etag == HubServer::xet_etag(shard_sha));  // the Xet hash, not "<sha256>"
    CHECK(rec.etag != "\"" + shard_sha + "\"");
    // The first read and the warm-ups of the data connections (one byte each) come before any
    // ETag is known; every tensor range after them is pinned.
    if (rec.range.starts_with("bytes=") && rec.range != "bytes=0-262143" && rec.range != "bytes=0-0") {
      CHECK(rec.if_match == rec.etag);
    }
  }
  // 2. The Hub's resolve URL of the same file: X-Linked-Etag names the sha256; verified.
  const std::string resolve = hub.server->endpoint() + "/org/llama/resolve/main/" + kShard1;
  r = run({"download", resolve, "-o", (hub.work / "resolved").string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(sha256_hex(read_file(hub.work / "resolved" / kShard1)) == shard_sha);
  CHECK_THAT(r.err, Catch::Contains("every file verified against the sha256"));
  // 3. A whole repo: every shard verified, If-Match carries the CDN's Xet ETag.
  r = run({"download", "hf://org/llama", "-o", (hub.work / "repo").string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("every file verified against the sha256"));
  auto ls = run({"cache", "ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  std::set<std::string> shas;
  for (const auto& e : json::parse(ls.out)) {
    if (e["sha256"].is_string()) shas.insert(e["sha256"].get<std::string>());
  }
  CHECK(shas.count(shard_sha) == 1);  // named by X-Linked-Etag, never by the Xet ETag
  for (const auto& e : json::parse(ls.out)) CHECK(e["id"].get<std::string>().find(HubServer::xet_etag(shard_sha).substr(1, 64)) == std::string::npos);
}

TEST_CASE("real hub: legacy ids and renamed repos are followed, then resolved by their canonical name",
          "[cli][realhub][legacy]") {
  auto ref = reference_dir();
  if (!ref) return;
  RealHub hub(*ref);
  for (const std::string location : {"hf://gpt2", "gpt2"}) {
    DYNAMIC_SECTION("inspect " << location) {
      auto r = run({"inspect", location, "--json"}, hub.work.path());
      const auto log = hub.server->take_log();
      INFO(r.err << "\n" << log_text(log));
      REQUIRE(r.exit_code == 0);
      auto j = json::parse(r.out);
      CHECK(j["tensors"].size() == 57);
      // /gpt2/resolve/... answered a relative 307 to the canonical name, which answered.
      CHECK(count(log, [](const auto& x) { return x.target.starts_with("/gpt2/resolve/") && x.status == 307; }) >= 1);
      CHECK(count(log, [](const auto& x) { return x.target.starts_with("/openai-community/gpt2/resolve/"); }) >= 1);
    }
  }
  SECTION("a renamed sharded repo: one redirect per first-round file, then every shard by its new name") {
    auto r = run({"inspect", "hf://old-org/llama", "--json"});
    const auto log = hub.server->take_log();
    INFO(r.err << "\n" << log_text(log));
    REQUIRE(r.exit_code == 0);
    CHECK(json::parse(r.out)["files"].size() == 3);
    // Only the first round (model.safetensors, the index, config.json) asks the old name.
    CHECK(count(log, [](const auto& x) { return x.target.starts_with("/old-org/llama/"); }) == 3);
    CHECK(count(log, [](const auto& x) { return x.kind == "resolve" && x.file.starts_with("model-0000"); }) == 3);
    for (const auto& x : log) {
      if (x.kind == "resolve" && x.file.starts_with("model-0000")) CHECK(x.target.starts_with("/org/llama/resolve/"));
    }
  }
  SECTION("get through a legacy id moves the selected bytes only and writes them exactly") {
    auto r = run({"get", "hf://gpt2", "model.layers.0.*", "-o", (hub.work / "g.safetensors").string(), "-q"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(read_file(hub.work / "g.safetensors") == hub.local_get("llama-tiny-single", "model.layers.0.*"));
  }
  SECTION("a bare word that is neither a local path nor a repo says both") {
    auto r = run({"inspect", "no-such-model"}, hub.work.path());
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains("repository no-such-model not found") &&
                          Catch::Contains("no local file or directory 'no-such-model' exists either"));
  }
}

TEST_CASE("real hub: small files come through a relative 307 to /api/resolve-cache/, with the token kept",
          "[cli][realhub][resolvecache]") {
  auto ref = reference_dir();
  if (!ref) return;
  RealHub hub(*ref);
  hub.env.set("HF_TOKEN", std::string(kToken));
  hub.server->set_private_repos({"org/llama"});
  auto r = run({"inspect", "hf://org/llama", "--json"});
  const auto log = hub.server->take_log();
  INFO(r.err << "\n" << log_text(log));
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["index_metadata"].is_object());
  std::size_t cached = 0;
  for (const auto& x : log) {
    if (x.kind == "resolve" && (x.file == "config.json" || x.file == "model.safetensors.index.json")) {
      CHECK(x.status == 307);
      CHECK(x.location.starts_with("/api/resolve-cache/models/org/llama/"));
    }
    if (x.kind == "resolve_cache") {
      ++cached;
      CHECK(x.status == 200);
      CHECK(x.authorization);  // same host: the token goes along
      CHECK(x.etag.size() == 42);  // a quoted git sha1
    }
    if (x.kind == "cdn") CHECK_FALSE(x.authorization);
  }
  CHECK(cached == 2);
}

TEST_CASE("real hub: a CDN answering 416, 400 or 403 SignatureError to valid ranges is retried and re-resolved; "
          "a persistent fault is exit 3, never 2 or 4",
          "[cli][realhub][cdnfault]") {
  auto ref = reference_dir();
  if (!ref) return;
  RealHub hub(*ref);
  const std::string want = hub.local_get("llama-tiny-sharded", "model.layers.0.*");
  for (int status : {416, 400, 403}) {
    DYNAMIC_SECTION("HTTP " << status << " to a few header and data ranges: exit 0, exact bytes") {
      hub.server->cdn_fault(status, 3, kShard1);
      const fs::path out = hub.work / ("f" + std::to_string(status) + ".safetensors");
      auto r = run({"get", "hf://org/llama", "model.layers.0.*", "-o", out.string(), "--window", "4096", "--chunk-size",
                    "65536", "--retries", "3", "--cache-dir", (hub.cache / std::to_string(status)).string(), "-q"});
      const auto log = hub.server->take_log();
      INFO(r.err << "\n" << log_text(log));
      CHECK(r.exit_code == 0);
      CHECK(read_file(out) == want);
      CHECK(count(log, [](const auto& x) { return x.fault == "cdn_fault"; }) == 3);
    }
  }
  SECTION("416 on every request of a shard: exit 3 naming the file and range, not 'empty file' or integrity") {
    const fs::path cache = hub.cache / "persistent";
    hub.server->cdn_fault(416, -1, kShard1);
    const fs::path out = hub.work / "never.safetensors";
    auto r = run({"get", "hf://org/llama", "model.layers.0.*", "-o", out.string(), "--retries", "1", "--cache-dir",
                  cache.string(), "-q"});
    const auto log = hub.server->take_log();
    INFO(r.err << "\n" << log_text(log));
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains("HTTP 416 for bytes 0-") && Catch::Contains("a CDN fault that persisted") &&
                          Catch::Contains(kShard1));
    CHECK_FALSE(fs::exists(out));
    // Retried, then resolved again, then retried on the fresh URL.
    CHECK(count(log, [](const auto& x) { return x.kind == "resolve" && x.file == kShard1; }) >= 2);
    hub.server->cdn_fault(0, 0, "");
  }
  SECTION("416 on every data range (headers already known): retried, re-resolved, then exit 3, not integrity") {
    const fs::path cache = hub.cache / "data-fault";
    // A first get records the checkpoint's headers: the next one asks the CDN for data only.
    REQUIRE(run({"get", "hf://org/llama", "lm_head.weight", "-o", (hub.work / "warm.safetensors").string(),
                 "--cache-dir", cache.string(), "-q"}).exit_code == 0);
    hub.server->clear_log();
    hub.server->cdn_fault(416, -1, kShard1);
    const fs::path out = hub.work / "never2.safetensors";
    auto r = run({"get", "hf://org/llama", "model.layers.0.*", "-o", out.string(), "--retries", "1", "--cache-dir",
                  cache.string(), "-q"});
    const auto log = hub.server->take_log();
    INFO(r.err << "\n" << log_text(log));
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains("HTTP 416 for a range inside the") && Catch::Contains("bytes=") &&
                          Catch::Contains("fresh download URLs"));
    CHECK_FALSE(fs::exists(out));
    CHECK(count(log, [](const auto& x) { return x.kind == "resolve" && x.file == kShard1; }) >= 2);
    CHECK(count(log, [](const auto& x) { return x.kind == "cdn" && x.range == "bytes=0-262143"; }) == 0);
    hub.server->cdn_fault(0, 0, "");
  }
  SECTION("416 on the first window of a file the Hub says is not empty: retried (not 'empty file', exit 2)") {
    hub.server->cdn_fault(416, 2, "model-00002");
    auto r = run({"inspect", "hf://org/llama", "--json", "--retries", "3"});
    const auto log = hub.server->take_log();
    INFO(r.err << "\n" << log_text(log));
    CHECK(r.exit_code == 0);
    CHECK(count(log, [](const auto& x) { return x.fault == "cdn_fault" && x.status == 416; }) == 2);
  }
}

TEST_CASE("real hub: a 429 whose RateLimit says to wait is waited for (t + 1 s), told on stderr, then goes on",
          "[cli][realhub][ratelimit]") {
  auto ref = reference_dir();
  if (!ref) return;
  RealHub hub(*ref);
  SECTION("a 2-second window: the open waits it out and succeeds") {
    hub.server->set_rate_limit(4, 2);  // model.safetensors, index, config.json, one shard; then 429
    const auto start = std::chrono::steady_clock::now();
    auto r = run({"inspect", "hf://org/llama", "--json"});
    const auto took = std::chrono::steady_clock::now() - start;
    const auto log = hub.server->take_log();
    INFO(r.err << "\n" << log_text(log));
    REQUIRE(r.exit_code == 0);
    CHECK(json::parse(r.out)["files"].size() == 3);
    CHECK_THAT(r.err, Catch::Contains("HTTP 429 (rate limited)") && Catch::Contains("\"resolvers\" window") &&
                          Catch::Contains("before retrying (Ctrl-C to stop)"));
    const auto limited = count(log, [](const auto& x) { return x.status == 429; });
    CHECK(limited >= 1);
    for (const auto& x : log) {
      if (x.status == 429) CHECK(x.retry_after.find("r=0;t=") != std::string::npos);  // RateLimit, no Retry-After
    }
    // Each limited request was asked again once, after the window: not hammered.
    CHECK(count(log, [](const auto& x) { return x.kind == "resolve"; }) <= 6 + limited);
    CHECK(took < 15s);
  }
  SECTION("a long window (t = 125 s): the wait is told, and Ctrl-C ends it at once (exit 130)") {
    hub.server->set_rate_limit(3, 125);
    tftest::Child child(tensorfetch_bin(), {"inspect", "hf://org/llama"},
                        tftest::ChildIo{"", (hub.work / "out.txt").string(), (hub.work / "err.txt").string()});
    // Wait until it says it is waiting.
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (read_file(hub.work / "err.txt").find("waiting") == std::string::npos && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(50ms);
    }
    const std::string err = read_file(hub.work / "err.txt");
    INFO(err << "\n" << log_text(hub.server->log()));
    CHECK_THAT(err, Catch::Contains("waiting 12"));  // t + 1 = 126 s (or 125 as the window runs)
    const auto start = std::chrono::steady_clock::now();
    child.signal(SIGINT);
    auto rc = child.wait_for(3s);
    REQUIRE(rc);
    CHECK(*rc == 130);
    CHECK(std::chrono::steady_clock::now() - start < 1s);
  }
  SECTION("RateLimit with r > 0 on ordinary responses costs no wait") {
    hub.server->set_rate_limit(3000, 300);
    const auto start = std::chrono::steady_clock::now();
    auto r = run({"inspect", "hf://org/llama"});
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("waiting") == std::string::npos);
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    for (const auto& x : hub.server->take_log()) {
      if (x.kind == "resolve") CHECK(x.retry_after.find("\"resolvers\";r=") == 0);
    }
  }
}

TEST_CASE("real hub: every error the Hub sends gets its own message and exit 3", "[cli][realhub][errors]") {
  auto ref = reference_dir();
  if (!ref) return;
  RealHub hub(*ref);
  struct Row {
    const char* what;
    std::string location;
    std::optional<std::string> token;
    int status;
    std::string words;
  };
  const std::vector<Row> rows = {
      {"unknown repo, anonymous", "hf://org/nope", std::nullopt, 401, "repository org/nope not found (HTTP 401); if it is private or gated, set HF_TOKEN"},
      {"unknown repo, valid token", "hf://org/nope", kToken, 404, "cannot see it (HTTP 404)"},
      {"private repo, anonymous", "hf://org/private", std::nullopt, 401, "repository org/private not found (HTTP 401)"},
      {"revision not found", "hf://org/llama@v9", std::nullopt, 404, "revision 'v9' not found in org/llama"},
      {"entry not found", "hf://org/llama/nope.safetensors", std::nullopt, 404, "has no file nope.safetensors"},
      {"gated, anonymous", "hf://org/gated", std::nullopt, 401, "org/gated is gated (HTTP 401): accept its conditions"},
      {"gated, token without access", "hf://org/gated", kNoAccessToken, 403, "has no access (HTTP 403)"},
      {"invalid token", "hf://org/llama", std::string("hf_not_a_real_token"), 401, "refused the token from HF_TOKEN as invalid"},
      {"disabled repo", "hf://org/disabled", std::nullopt, 403, "org/disabled has been disabled on the Hub"},
  };
  std::set<std::string> messages;
  for (const auto& row : rows) {
    hub.env.set("HF_TOKEN", row.token);
    auto r = run({"inspect", row.location});
    const auto log = hub.server->take_log();
    INFO(row.what << "\n" << r.err << "\n" << log_text(log));
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains(row.words));
    CHECK(count(log, [&](const auto& x) { return x.status == row.status; }) >= 1);
    messages.insert(r.err.substr(0, r.err.find(" (http")));
    // Nothing reached the CDN, and the token never left the Hub's host.
    CHECK(count(log, [](const auto& x) { return x.kind == "cdn"; }) == 0);
  }
  CHECK(messages.size() == rows.size());
  SECTION("with the token that has access, the gated repo opens") {
    hub.env.set("HF_TOKEN", std::string(kToken));
    CHECK(run({"inspect", "hf://org/gated"}).exit_code == 0);
  }
}

TEST_CASE("real hub: the environment as huggingface_hub reads it", "[cli][realhub][env]") {
  auto ref = reference_dir();
  if (!ref) return;
  RealHub hub(*ref);
  hub.server->set_private_repos({"org/llama"});
  const std::string expected_auth = sha256_hex(std::string("Bearer ") + kToken);
  auto sent_token = [&](const std::vector<RequestRecord>& log) {
    for (const auto& x : log) {
      if (x.kind == "resolve" && x.authorization_sha256 != expected_auth) return false;
    }
    return !log.empty();
  };
  SECTION("HUGGING_FACE_HUB_TOKEN (legacy)") {
    hub.env.set("HUGGING_FACE_HUB_TOKEN", std::string(kToken));
    auto r = run({"inspect", "hf://org/llama"});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(sent_token(hub.server->take_log()));
  }
  SECTION("HF_TOKEN_PATH") {
    write_file(hub.work / "my-token", std::string(kToken) + "\n");
    hub.env.set("HF_TOKEN_PATH", (hub.work / "my-token").string());
    auto r = run({"inspect", "hf://org/llama"});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(sent_token(hub.server->take_log()));
  }
  SECTION("HF_HOME defaults to $XDG_CACHE_HOME/huggingface (its token file)") {
    hub.env.set("HF_HOME", std::nullopt);
    hub.env.set("XDG_CACHE_HOME", (hub.work / "xdg").string());
    fs::create_directories(hub.work / "xdg" / "huggingface");
    write_file(hub.work / "xdg" / "huggingface" / "token", kToken);
    auto r = run({"inspect", "hf://org/llama"});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(sent_token(hub.server->take_log()));
  }
  SECTION("TRANSFORMERS_OFFLINE=1 makes no request (after a commit-pinned fetch)") {
    hub.env.set("HF_TOKEN", std::string(kToken));
    const std::string commit = hub.server->commit("org/llama");
    const std::string loc = "hf://org/llama@" + commit;
    REQUIRE(run({"get", loc, "model.layers.0.*", "-o", (hub.work / "a.safetensors").string(), "-q"}).exit_code == 0);
    hub.server->clear_log();
    hub.env.set("TRANSFORMERS_OFFLINE", std::string("1"));
    auto r = run({"get", loc, "model.layers.0.*", "-o", (hub.work / "b.safetensors").string(), "-q"});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(hub.server->log().empty());
    CHECK(read_file(hub.work / "a.safetensors") == read_file(hub.work / "b.safetensors"));
  }
  SECTION("HUGGINGFACE_HUB_CACHE (legacy) is where files already downloaded are found") {
    hub.env.set("HF_TOKEN", std::string(kToken));
    const fs::path legacy = hub.work / "legacy-hub-cache";
    hub.env.set("HUGGINGFACE_HUB_CACHE", legacy.string());
    REQUIRE(run({"download", "hf://org/llama", "-o", (hub.work / "dl2").string(), "--hf-cache", "-q"}).exit_code == 0);
    CHECK(fs::is_directory(legacy / "models--org--llama" / "snapshots"));
  }
}
