// SPDX-License-Identifier: Apache-2.0
// The CLI contract for remote locations: network and remote errors exit 3 with a message that
// names the repo or URL and what to do; a remote `inspect --json` exits 0; `download --hf-cache`
// publishes into the Hugging Face cache layout. The built
// `tensorfetch` binary runs against the in-process Hub-like server (tools/hubserver), whose
// request log shows what the binary sent (attempts, Authorization).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "hub_server.hpp"

using namespace clitest;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {


// Two F32 tensors and one BF16 tensor, with __metadata__.
const std::string kHeader =
    R"({"__metadata__":{"format":"pt"},)"
    R"("model.embed.weight":{"dtype":"F32","shape":[4,8],"data_offsets":[0,128]},)"
    R"("model.norm.weight":{"dtype":"BF16","shape":[8],"data_offsets":[128,144]},)"
    R"("lm_head.weight":{"dtype":"F32","shape":[2,8],"data_offsets":[144,208]}})";

// A Hub root with org/tiny (model.safetensors + config.json), the test's environment made
// hermetic (no token, no endpoint, no CA bundle from the developer's shell), and a server.
struct Remote {
  TempDir root;
  TempDir hf_home;  // empty: no $HF_HOME/token, no $HF_HOME/hub cache
  TempDir cache;    // TENSORFETCH_CACHE
  tftest::ScopedEnv env;
  std::string file_bytes;
  std::unique_ptr<HubServer> server;

  explicit Remote(tensorfetch::testing::Options options = {}) {
    fs::create_directories(root / "org" / "tiny");
    std::string data(208, '\0');
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
    file_bytes = make_safetensors(kHeader, data);
    write_file(root / "org" / "tiny" / "model.safetensors", file_bytes);
    write_file(root / "org" / "tiny" / "config.json", R"({"model_type":"llama"})");
    env.set("HF_TOKEN", std::nullopt);
    env.set("HF_HOME", hf_home.path().string());
    env.set("HF_ENDPOINT", std::nullopt);
    env.set("CURL_CA_BUNDLE", std::nullopt);
    env.set("HF_HUB_OFFLINE", std::nullopt);
    env.set("HF_HUB_CACHE", std::nullopt);
    env.set("TENSORFETCH_CACHE", cache.path().string());
    options.root = root.path();
    server = std::make_unique<HubServer>(options);
    server->start();
  }
  std::string endpoint() const { return server->endpoint(); }
};

std::string log_text(const std::vector<RequestRecord>& log) {
  std::string s;
  for (const auto& r : log) s += r.to_json() + "\n";
  return s;
}

// A port on 127.0.0.1 that refuses connections: bound (so nobody else takes it while the test
// runs) but not listening.
struct ClosedPort {
  int fd = -1;
  int port = 0;
  ClosedPort() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  ~ClosedPort() { ::close(fd); }
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
};

}  // namespace

TEST_CASE("cli remote: a repo that does not exist exits 3 and names the repo and the URL; no Authorization is sent",
          "[cli][remote]") {
  Remote r;
  const std::vector<std::string> args = {"inspect", "hf://org/nope", "--endpoint", r.endpoint(), "--retries", "0"};
  auto res = run(args);
  INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(r.server->log()));
  CHECK(res.exit_code == 3);
  CHECK(res.out.empty());
  CHECK_THAT(res.err, Catch::StartsWith("tensorfetch: error: "));
  CHECK_THAT(res.err, Catch::Contains("repository org/nope not found"));
  CHECK_THAT(res.err, Catch::Contains(r.endpoint() + "/org/nope/resolve/main/"));
  CHECK_THAT(res.err, Catch::Contains("HF_TOKEN"));  // the hint for private repos
  // Round 1 asks the three candidates at once; each says RepoNotFound.
  const auto log = r.server->log();
  CHECK(log.size() == 3);
  for (const auto& rec : log) {
    INFO(rec.to_json());
    CHECK(rec.kind == "resolve");
    CHECK(rec.status == 404);
    CHECK(rec.error_code == "RepoNotFound");
    CHECK_FALSE(rec.authorization);
  }
}

TEST_CASE("cli remote: a gated repo without a token exits 3 and says to set HF_TOKEN; with HF_TOKEN it exits 0",
          "[cli][remote][token]") {
  Remote r;
  r.server->set_token("s3cret");
  r.server->set_gated_repos({"org/tiny"});
  const std::vector<std::string> args = {"inspect", "hf://org/tiny", "--endpoint", r.endpoint(), "--retries", "0"};
  {
    auto res = run(args);
    const auto log = r.server->take_log();
    INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(log));
    CHECK(res.exit_code == 3);
    CHECK(res.out.empty());
    CHECK_THAT(res.err, Catch::Contains("org/tiny is gated"));
    CHECK_THAT(res.err, Catch::Contains("set HF_TOKEN"));
    CHECK_THAT(res.err, Catch::Contains(r.endpoint() + "/org/tiny/resolve/main/"));
    REQUIRE_FALSE(log.empty());
    for (const auto& rec : log) {
      INFO(rec.to_json());
      CHECK_FALSE(rec.authorization);  // no token anywhere: none sent
      CHECK(rec.status == 403);
      CHECK(rec.error_code == "GatedRepo");
    }
  }
  {
    r.env.set("HF_TOKEN", "s3cret");  // the same command, now with the token
    auto res = run(args);
    const auto log = r.server->take_log();
    INFO(describe(args) << " with HF_TOKEN\nstderr: " << res.err << "\nserver log:\n" << log_text(log));
    CHECK(res.exit_code == 0);
    CHECK_THAT(res.out, Catch::Contains("model.embed.weight"));
    REQUIRE(std::count_if(log.begin(), log.end(), [](const auto& x) { return x.kind == "cdn"; }) == 1);
    for (const auto& rec : log) {
      INFO(rec.to_json());
      CHECK(rec.authorization == (rec.kind == "resolve"));  // to the Hub host, never to the CDN
    }
  }
}

TEST_CASE("cli remote: 429 on every attempt exits 3 after 1 + --retries attempts, waiting as Retry-After says",
          "[cli][remote][retry]") {
  Remote r;
  const std::vector<std::string> args = {"inspect", "hf://org/tiny/model.safetensors", "--endpoint", r.endpoint(),
                                         "--retries", "1"};
  SECTION("Retry-After: 1") {
    r.server->fail_next(-1, 429, 1, false, "model.safetensors");
    auto res = run(args);
    const auto log = r.server->log();
    INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(log));
    CHECK(res.exit_code == 3);
    CHECK(res.out.empty());
    CHECK_THAT(res.err, Catch::Contains("HTTP 429 (rate limited) after 2 attempts"));
    CHECK_THAT(res.err, Catch::Contains("rate limited"));
    CHECK_THAT(res.err, Catch::Contains(r.endpoint() + "/org/tiny/resolve/main/model.safetensors"));
    REQUIRE(log.size() == 2);  // the first attempt and one retry, nothing more
    for (const auto& rec : log) {
      CHECK(rec.status == 429);
      CHECK(rec.fault == "fail");
      CHECK(rec.retry_after == "1");
      CHECK(rec.target == "/org/tiny/resolve/main/model.safetensors");
    }
    CHECK(log[1].start_ms - log[0].end_ms >= 900);  // Retry-After: 1 honoured
  }
  SECTION("RateLimit: ...;t=0") {
    r.server->fail_next(-1, 429, 0, true, "model.safetensors");
    auto res = run(args);
    const auto log = r.server->log();
    INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(log));
    CHECK(res.exit_code == 3);
    CHECK_THAT(res.err, Catch::Contains("HTTP 429 (rate limited) after 2 attempts"));
    CHECK(log.size() == 2);
    for (const auto& rec : log) CHECK(rec.status == 429);
  }
  SECTION("--retries 0: a single attempt") {
    r.server->fail_next(-1, 429, 0, false, "model.safetensors");
    const std::vector<std::string> once = {"inspect", "hf://org/tiny/model.safetensors", "--endpoint", r.endpoint(),
                                           "--retries", "0"};
    auto res = run(once);
    INFO(describe(once) << "\nstderr: " << res.err);
    CHECK(res.exit_code == 3);
    CHECK_THAT(res.err, Catch::Contains("HTTP 429 (rate limited) after 1 attempt;"));
    CHECK(r.server->log().size() == 1);
  }
}

TEST_CASE("cli remote: an unreachable host (a closed port) exits 3 and names the URL", "[cli][remote][errors]") {
  TempDir hf_home, cache;
  tftest::ScopedEnv env;
  env.set("HF_ENDPOINT", std::nullopt);
  env.set("HF_TOKEN", std::nullopt);
  env.set("HF_HOME", hf_home.path().string());
  env.set("HF_HUB_OFFLINE", std::nullopt);
  env.set("HF_HUB_CACHE", std::nullopt);
  env.set("TENSORFETCH_CACHE", cache.path().string());
  ClosedPort closed;
  const std::string host = "127.0.0.1:" + std::to_string(closed.port);
  SECTION("an http URL, no retry") {
    const std::vector<std::string> args = {"inspect", "http://" + host + "/model.safetensors", "--retries", "0"};
    auto res = run(args);
    INFO(describe(args) << "\nstderr: " << res.err);
    CHECK(res.exit_code == 3);
    CHECK(res.out.empty());
    CHECK_THAT(res.err, Catch::Contains("http://" + host + "/model.safetensors (bytes=0-262143)"));
    CHECK_THAT(res.err, Catch::Contains("onnect"));  // curl: "Couldn't connect to server" / "Failed to connect"
  }
  SECTION("a Hub endpoint, one retry") {
    const std::vector<std::string> args = {"inspect", "hf://org/tiny", "--endpoint", "http://" + host, "--retries", "1"};
    auto res = run(args);
    INFO(describe(args) << "\nstderr: " << res.err);
    CHECK(res.exit_code == 3);
    CHECK_THAT(res.err, Catch::Contains("http://" + host + "/org/tiny/resolve/main/"));
    CHECK_THAT(res.err, Catch::Contains("after 2 attempts"));  // a refused connection is retried
  }
}

TEST_CASE("cli remote: a TLS certificate the client does not trust exits 3 with a TLS failure; --cacert fixes it",
          "[cli][remote][tls]") {
  TempDir certs;
  const auto server_tls = tensorfetch::testing::generate_self_signed_cert(certs / "server");
  const auto other_tls = tensorfetch::testing::generate_self_signed_cert(certs / "other");
  tensorfetch::testing::Options o;
  o.tls_cert = server_tls.cert;
  o.tls_key = server_tls.key;
  Remote r(o);
  REQUIRE(r.endpoint().starts_with("https://localhost:"));
  const std::vector<std::string> base = {"inspect", "hf://org/tiny", "--endpoint", r.endpoint(), "--retries", "0"};
  for (const auto& [label, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"the system CAs", {}},
           {"--cacert of another self-signed certificate", {"--cacert", other_tls.cert.string()}}}) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    auto res = run(args);
    INFO(label << ": " << describe(args) << "\nstderr: " << res.err);
    CHECK(res.exit_code == 3);
    CHECK(res.out.empty());
    CHECK_THAT(res.err, Catch::Contains("TLS failure"));
    CHECK_THAT(res.err, Catch::Contains(r.endpoint() + "/org/tiny/resolve/main/"));
    // The handshake failed: no HTTP request reached the server.
    CHECK(r.server->log().empty());
  }
  auto args = base;
  args.insert(args.end(), {"--cacert", server_tls.cert.string()});
  auto ok = run(args);
  INFO(describe(args) << "\nstderr: " << ok.err);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.out, Catch::Contains("model.embed.weight"));
}

TEST_CASE("cli remote: inspect --json over HTTP exits 0 and prints the documented object", "[cli][remote][json]") {
  Remote r;
  const std::vector<std::string> args = {"inspect", "hf://org/tiny", "--json", "--endpoint", r.endpoint()};
  auto res = run(args);
  const auto log = r.server->log();
  INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(log));
  REQUIRE(res.exit_code == 0);
  CHECK(res.err.empty());
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(res.out));
  CHECK(doc.at("location") == "hf://org/tiny");
  CHECK(doc.at("sharded") == false);
  REQUIRE(doc.at("files").size() == 1);
  const auto& file = doc.at("files")[0];
  CHECK(file.at("path") == "model.safetensors");
  CHECK(file.at("size") == r.file_bytes.size());
  CHECK(file.at("header_size") == kHeader.size());
  CHECK(file.at("etag") == "\"" + sha256_hex(r.file_bytes) + "\"");  // X-Linked-Etag: the sha256
  CHECK(doc.at("metadata") == json{{"format", "pt"}});
  const json expected_tensors = json::parse(R"([
    {"name":"lm_head.weight","dtype":"F32","shape":[2,8],"file":"model.safetensors","data_offsets":[144,208]},
    {"name":"model.embed.weight","dtype":"F32","shape":[4,8],"file":"model.safetensors","data_offsets":[0,128]},
    {"name":"model.norm.weight","dtype":"BF16","shape":[8],"file":"model.safetensors","data_offsets":[128,144]}
  ])");
  CHECK(doc.at("tensors") == expected_tensors);
  CHECK(doc.at("parameters") == json{{"BF16", 8}, {"F32", 48}});
  CHECK(doc.at("total_parameters") == 56);
  CHECK(doc.at("total_bytes") == 208);
  CHECK(doc.at("commit") == r.server->commit("org/tiny"));
  // The requests the binary reports are the ones the server saw: round 1 asks model.safetensors
  // (302 to the CDN, then its first bytes), the index (404) and config.json at once.
  CHECK(doc.at("requests") == log.size());
  CHECK(log.size() == 4);
  for (const auto& rec : log) {
    INFO(rec.to_json());
    CHECK(rec.method == "GET");
    CHECK_FALSE(rec.authorization);
    if (rec.kind == "cdn") CHECK(rec.range == "bytes=0-262143");
  }
}

TEST_CASE("cli remote: download --hf-cache publishes into $HF_HOME/hub (or $HF_HUB_CACHE) as huggingface_hub lays it out",
          "[cli][remote][hf-cache]") {
  Remote r;
  TempDir out;
  std::optional<TempDir> hub_cache;
  fs::path hub = r.hf_home / "hub";
  SECTION("$HF_HOME/hub") {}
  SECTION("$HF_HUB_CACHE wins over $HF_HOME") {
    hub_cache.emplace();
    hub = hub_cache->path() / "hub";
    r.env.set("HF_HUB_CACHE", hub.string());
  }
  const std::vector<std::string> args = {"download", "hf://org/tiny", "--endpoint", r.endpoint(), "-o",
                                         (out / "model").string(), "--hf-cache"};
  auto res = run(args);
  INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(r.server->log()));
  REQUIRE(res.exit_code == 0);
  CHECK_THAT(res.err, Catch::Contains("published 1 file into the Hugging Face cache"));
  CHECK(read_file(out / "model" / "model.safetensors") == r.file_bytes);
  CHECK(read_file(out / "model" / "config.json") == read_file(r.root / "org" / "tiny" / "config.json"));

  const fs::path repo = hub / "models--org--tiny";
  const std::string commit = r.server->commit("org/tiny");
  REQUIRE(commit.size() == 40);
  // refs/main: the commit the download was read at.
  CHECK(read_file(repo / "refs" / "main") == commit);
  // The safetensors file: blobs/<sha256>, byte-identical; the snapshot entry is a relative
  // symlink to it. config.json likewise, its blob named by its git blob sha1.
  const std::string config = read_file(r.root / "org" / "tiny" / "config.json");
  const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> files = {
      {"model.safetensors", {sha256_hex(r.file_bytes), r.file_bytes}},
      {"config.json", {tensorfetch::testing::git_blob_sha1(config), config}},
  };
  for (const auto& [name, blob] : files) {
    const auto& [blob_name, bytes] = blob;
    INFO(name << " -> blobs/" << blob_name);
    const fs::path blob_path = repo / "blobs" / blob_name;
    const fs::path link = repo / "snapshots" / commit / name;
    CHECK(fs::is_regular_file(fs::symlink_status(blob_path)));
    CHECK(read_file(blob_path) == bytes);
    REQUIRE(fs::is_symlink(fs::symlink_status(link)));
    CHECK(fs::read_symlink(link) == fs::path("../../blobs") / blob_name);
    CHECK(fs::equivalent(link, blob_path));
  }
  // Nothing else in the snapshot or the blobs, no temporary file anywhere.
  CHECK(list_dir(repo / "snapshots" / commit) == std::vector<std::string>{"config.json", "model.safetensors"});
  CHECK(list_dir(repo / "blobs").size() == 2);
  CHECK(temp_files(hub).empty());
  if (hub_cache) CHECK_FALSE(fs::exists(r.hf_home / "hub"));
}

TEST_CASE("cli remote: get of empty tensors (and of a file of only empty tensors) writes them with their dtype and "
          "shape, and asks no byte of them",
          "[cli][remote][empty]") {
  Remote r;
  // a [0,7] first; a 280,000-byte tensor (past the open's first read); c [3,0] and a scalar after it.
  const std::string mixed_header = R"({"a":{"dtype":"F32","shape":[0,7],"data_offsets":[0,0]},)"
                                   R"("b":{"dtype":"F32","shape":[70000],"data_offsets":[0,280000]},)"
                                   R"("c":{"dtype":"I64","shape":[3,0],"data_offsets":[280000,280000]},)"
                                   R"("s":{"dtype":"F32","shape":[],"data_offsets":[280000,280004]}})";
  fs::create_directories(r.root / "org" / "empties");
  write_file(r.root / "org" / "empties" / "model.safetensors", make_safetensors(mixed_header, std::string(280004, 'x')));
  write_file(r.root / "org" / "empties" / "config.json", R"({"model_type":"llama"})");
  const std::string all_empty_header = R"({"x":{"dtype":"BF16","shape":[0],"data_offsets":[0,0]},)"
                                       R"("y":{"dtype":"U8","shape":[2,0,3],"data_offsets":[0,0]},)"
                                       R"("z":{"dtype":"F64","shape":[0,1],"data_offsets":[0,0]}})";
  fs::create_directories(r.root / "org" / "all-empty");
  write_file(r.root / "org" / "all-empty" / "model.safetensors", make_safetensors(all_empty_header, ""));
  TempDir out;
  write_file(out / "rules.json", R"({"c": {"dim": 1}, "*": "replicate"})");

  // Every request the server saw asked for the file's first bytes (the open's header read, a warm
  // connection's first byte) or for no range (config.json, the index probe): none for the tensors.
  auto check_no_tensor_request = [&](const std::vector<RequestRecord>& log) {
    INFO("server log:\n" << log_text(log));
    for (const auto& rec : log) {
      if (!rec.range.empty()) CHECK(rec.range.starts_with("bytes=0-"));
      CHECK(rec.body_bytes <= 262144);
    }
  };
  struct Case {
    const char* name;
    std::vector<std::string> args;  // after the location
    std::map<std::string, std::pair<std::string, std::vector<std::uint64_t>>> want;
    bool url = false;
  };
  const std::vector<Case> cases = {
      {"two empty tensors of a repo", {"a", "c"}, {{"a", {"F32", {0, 7}}}, {"c", {"I64", {3, 0}}}}},
      {"two empty tensors of a URL", {"a", "c"}, {{"a", {"F32", {0, 7}}}, {"c", {"I64", {3, 0}}}}, true},
      {"an empty tensor split for --tp 1/2", {"c", "--tp", "1/2", "--tp-rules", (out / "rules.json").string()},
       {{"c", {"I64", {3, 0}}}}},
  };
  for (const auto& c : cases) {
    SECTION(c.name) {
      const std::string location =
          c.url ? r.endpoint() + "/org/empties/resolve/main/model.safetensors" : std::string("hf://org/empties");
      const fs::path o = out / "out.safetensors";
      std::vector<std::string> args = {"get", location};
      args.insert(args.end(), c.args.begin(), c.args.end());
      args.insert(args.end(), {"-o", o.string(), "--endpoint", r.endpoint(), "-q"});
      r.server->clear_log();
      auto res = run(args);
      INFO(describe(args) << "\nstderr: " << res.err);
      REQUIRE(res.exit_code == 0);
      check_no_tensor_request(r.server->log());
      const auto st = read_safetensors(o);
      REQUIRE(st.tensors.size() == c.want.size());
      for (const auto& [name, want] : c.want) {
        INFO(name);
        REQUIRE(st.tensors.count(name) == 1);
        CHECK(st.tensors.at(name).dtype == want.first);
        CHECK(st.tensors.at(name).shape == want.second);
        CHECK(st.tensors.at(name).bytes.empty());
      }
    }
  }
  SECTION("a file whose every tensor is empty, whole") {
    const fs::path o = out / "all.safetensors";
    const std::vector<std::string> args = {"get", "hf://org/all-empty", "-o", o.string(), "--endpoint", r.endpoint(), "-q"};
    r.server->clear_log();
    auto res = run(args);
    INFO(describe(args) << "\nstderr: " << res.err);
    REQUIRE(res.exit_code == 0);
    check_no_tensor_request(r.server->log());
    const auto st = read_safetensors(o);
    REQUIRE(st.tensors.size() == 3);
    CHECK(st.tensors.at("x").shape == std::vector<std::uint64_t>{0});
    CHECK(st.tensors.at("y").shape == std::vector<std::uint64_t>{2, 0, 3});
    CHECK(st.tensors.at("z").dtype == "F64");
    CHECK(st.file_size == fs::file_size(o));
  }
}

// ---------------------------------------------------------------------------------------------
// get --plan (issue 20, item 4) and --max-rate (item 3)

namespace {

// org/plan/model.safetensors: F32 tensors a [65536] (256 KiB), b and c [131072] (512 KiB each),
// random-looking bytes; the open's first read (256 KiB) holds the header and most of a, so a
// plan has work left for every tensor but a.
struct PlanRepo : Remote {
  std::string plan_file;
  PlanRepo() {
    const std::string header = R"({"a":{"dtype":"F32","shape":[65536],"data_offsets":[0,262144]},)"
                               R"("b":{"dtype":"F32","shape":[131072],"data_offsets":[262144,786432]},)"
                               R"("c":{"dtype":"F32","shape":[131072],"data_offsets":[786432,1310720]}})";
    plan_file = make_safetensors(header, tftest::pattern_bytes(1310720, 5));
    write_file(root / "org" / "plan" / "model.safetensors", plan_file);
    write_file(root / "org" / "plan" / "config.json", R"({"model_type":"llama"})");
  }
};

struct PlannedRange {
  std::uint64_t offset = 0, length = 0;
  bool operator<(const PlannedRange& o) const { return std::tie(offset, length) < std::tie(o.offset, o.length); }
  bool operator==(const PlannedRange& o) const = default;
};

// The Range headers of the CDN requests of tensor data in `log` (not an open's window, which
// starts at byte 0), as ranges, sorted.
std::vector<PlannedRange> data_ranges(const std::vector<RequestRecord>& log) {
  std::vector<PlannedRange> out;
  for (const auto& rec : log) {
    if (rec.kind != "cdn" || rec.range.starts_with("bytes=0-")) continue;
    const auto dash = rec.range.find('-');
    REQUIRE(rec.range.starts_with("bytes="));
    REQUIRE(dash != std::string::npos);
    const std::uint64_t first = std::stoull(rec.range.substr(6, dash - 6));
    const std::uint64_t last = std::stoull(rec.range.substr(dash + 1));
    out.push_back({first, last - first + 1});
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A download manager: fetches each planned transfer as the plan says (GET url, Range, If-Match,
// no token unless send_token) with cpp-httplib, expecting exactly a 206 of that range. Returns
// the bodies in plan order.
std::vector<std::string> replay(const json& plan) {
  std::vector<std::string> bodies;
  for (const auto& t : plan.at("transfers")) {
    const std::string url = t.at("url");
    INFO("replaying " << t.dump());
    REQUIRE(url.starts_with("http://"));
    const auto slash = url.find('/', 7);
    REQUIRE(slash != std::string::npos);
    httplib::Client client(url.substr(0, slash));
    httplib::Headers headers = {{"Range", t.at("range").get<std::string>()}};
    if (!t.at("if_match").is_null()) headers.emplace("If-Match", t.at("if_match").get<std::string>());
    CHECK_FALSE(t.at("send_token").get<bool>());  // the CDN is another host than the endpoint
    auto res = client.Get(url.substr(slash), headers);
    REQUIRE(res);
    REQUIRE(res->status == 206);
    const std::uint64_t offset = t.at("offset"), length = t.at("length");
    CHECK(res->get_header_value("Content-Range").starts_with("bytes " + std::to_string(offset) + "-" +
                                                             std::to_string(offset + length - 1) + "/"));
    REQUIRE(res->body.size() == length);
    bodies.push_back(res->body);
  }
  return bodies;
}

}  // namespace

TEST_CASE("cli remote: get --plan prints the transfers a get then makes, fetching nothing; a download manager "
          "replaying them gets the file's bytes",
          "[cli][remote][plan]") {
  PlanRepo r;
  TempDir out;
  std::vector<std::string> selection;
  SECTION("names, chunked, no coalescing") {
    selection = {"a", "c", "--coalesce-gap", "0", "--chunk-size", "128KiB"};
  }
  SECTION("a glob") { selection = {"[bc]*"}; }
  SECTION("slices") { selection = {"c[1024:2048]", "--slice", "b[0:16]"}; }
  SECTION("--tp 1/2 with rules") {
    write_file(out / "rules.json", R"({"*": {"dim": 0}})");
    selection = {"--tp", "1/2", "--tp-rules", (out / "rules.json").string()};
  }
  const std::string location = "hf://org/plan";
  const std::vector<std::string> common = {"--endpoint", r.endpoint(), "--retries", "0"};
  auto with = [&](std::vector<std::string> head, const std::vector<std::string>& tail) {
    head.insert(head.end(), selection.begin(), selection.end());
    head.insert(head.end(), common.begin(), common.end());
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };

  // What the open alone asks: an inspect of the same location, into another cache.
  TempDir other_cache;
  auto inspected = run({"inspect", location, "--endpoint", r.endpoint(), "--cache-dir", other_cache.path().string()});
  REQUIRE(inspected.exit_code == 0);
  const std::size_t open_requests = r.server->take_log().size();

  const auto plan_args = with({"get", location}, {"--plan"});
  auto planned = run(plan_args);
  const auto plan_log = r.server->take_log();
  INFO(describe(plan_args) << "\nstdout: " << planned.out << "\nstderr: " << planned.err << "\nserver log:\n"
                           << log_text(plan_log));
  REQUIRE(planned.exit_code == 0);
  CHECK(planned.err.empty());
  // Nothing requested beyond the open's own requests: no tensor byte, no warm-up.
  CHECK(plan_log.size() == open_requests);
  CHECK(data_ranges(plan_log).empty());

  const json plan = json::parse(planned.out);
  CHECK(plan.at("location") == location);
  REQUIRE_FALSE(plan.at("transfers").empty());
  const std::string sha = r.server->file_sha256("org/plan", "model.safetensors");
  std::vector<PlannedRange> ranges;
  std::uint64_t bytes = 0;
  for (const auto& t : plan.at("transfers")) {
    INFO(t.dump());
    CHECK(t.at("file") == "model.safetensors");
    CHECK(t.at("file_index") == 0);
    CHECK_THAT(t.at("url").get<std::string>(), Catch::StartsWith(r.server->cdn_endpoint() + "/cdn/" + sha));
    const std::uint64_t offset = t.at("offset"), length = t.at("length");
    CHECK(length > 0);
    CHECK(offset + length <= r.plan_file.size());
    CHECK(t.at("range") == "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1));
    CHECK(t.at("if_match") == "\"" + sha + "\"");
    CHECK(t.at("send_token") == false);
    ranges.push_back({offset, length});
    bytes += length;
  }
  CHECK(plan.at("bytes") == bytes);
  std::sort(ranges.begin(), ranges.end());

  // A download manager running the plan itself gets exactly the file's bytes there.
  const auto bodies = replay(plan);
  std::string replayed, expected;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    replayed += bodies[i];
    expected += r.plan_file.substr(plan.at("transfers")[i].at("offset"), plan.at("transfers")[i].at("length"));
  }
  CHECK(sha256_hex(replayed) == sha256_hex(expected));
  r.server->clear_log();

  // The get that follows (same cache: the plan fetched nothing into it) asks for exactly the
  // planned ranges.
  const auto get_args = with({"get", location}, {"-o", (out / "out.safetensors").string(), "-q"});
  auto got = run(get_args);
  const auto get_log = r.server->take_log();
  INFO(describe(get_args) << "\nstderr: " << got.err << "\nserver log:\n" << log_text(get_log));
  REQUIRE(got.exit_code == 0);
  CHECK(data_ranges(get_log) == ranges);
}

TEST_CASE("cli remote: get --plan of a local checkpoint or of bytes already cached prints no transfers",
          "[cli][remote][plan]") {
  PlanRepo r;
  TempDir out;
  const std::string file = (r.root / "org" / "plan" / "model.safetensors").string();
  auto local = run({"get", file, "--plan"});
  INFO("stderr: " << local.err);
  REQUIRE(local.exit_code == 0);
  CHECK(json::parse(local.out) == json{{"location", file}, {"transfers", json::array()}, {"bytes", 0}});

  const std::vector<std::string> get = {"get", "hf://org/plan", "b", "--endpoint", r.endpoint(), "-q",
                                        "-o", (out / "b.safetensors").string()};
  REQUIRE(run(get).exit_code == 0);
  auto again = run({"get", "hf://org/plan", "b", "--endpoint", r.endpoint(), "--plan"});
  INFO("stderr: " << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK(json::parse(again.out).at("transfers").empty());
}

TEST_CASE("cli remote: get --max-rate caps the fetch (1 MiB at 1M = 1,000,000 bytes/s: about a second)",
          "[cli][remote][max_rate]") {
  PlanRepo r;
  TempDir out;
  const std::vector<std::string> args = {"get", "hf://org/plan", "b", "c", "--endpoint", r.endpoint(), "-q",
                                         "--max-rate", "1M", "-o", (out / "bc.safetensors").string()};
  const auto start = std::chrono::steady_clock::now();
  auto res = run(args);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(describe(args) << "\nstderr: " << res.err << "\ntook " << seconds << " s");
  REQUIRE(res.exit_code == 0);
  // 1 MiB less the bucket's first tenth of a second, at 1,000,000 bytes/s: at least 0.9 s.
  CHECK(seconds >= 0.85);
  const auto written = read_file(out / "bc.safetensors");
  CHECK(written.find(r.plan_file.substr(r.plan_file.size() - 1048576)) != std::string::npos);
}

TEST_CASE("cli remote: get --trace writes a Chrome trace of the run: process start, open, every request with its "
          "phases on its connection's row, the fetch, commits, the output",
          "[cli][remote][trace]") {
  PlanRepo r;
  TempDir out;
  const auto trace = out / "run.trace.json";
  const std::vector<std::string> args = {"get", "hf://org/plan", "b", "c", "--endpoint", r.endpoint(), "-q",
                                         "--trace", trace.string(), "-o", (out / "bc.safetensors").string()};
  auto res = run(args);
  INFO(describe(args) << "\nstderr: " << res.err);
  REQUIRE(res.exit_code == 0);
  const auto doc = nlohmann::json::parse(read_file(trace));
  REQUIRE(doc.contains("traceEvents"));
  std::set<std::string> names, categories, rows;
  std::size_t gets = 0, data_gets = 0, receives = 0;
  std::map<int, std::string> row_names;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") row_names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
      continue;
    }
    names.insert(e["name"].get<std::string>());
    categories.insert(e["cat"].get<std::string>());
    CHECK(e["ts"].get<double>() >= -60e6);  // microseconds from the trace's start (process start: before it)
    if (e["ph"] == "X") CHECK(e["dur"].get<double>() >= 0);
    const std::string name = e["name"].get<std::string>();
    if (name.starts_with("GET")) {
      ++gets;
      CHECK(e["args"].contains("url"));
      CHECK(e["args"].contains("status"));
      CHECK(e["tid"].get<int>() > 1000);  // on a connection's row
      if (e["args"].contains("range") && !e["args"]["range"].get<std::string>().starts_with("bytes=0-")) ++data_gets;
    }
    if (name == "receive") ++receives;
  }
  INFO("events: " << doc["traceEvents"].dump().substr(0, 3000));
  for (const char* want : {"process start (exec to main)", "open (index, headers, config.json)", "fetch",
                           "fetch ranges", "write the output file", "get"}) {
    CHECK(names.count(want) == 1);
  }
  CHECK(categories.count("http") == 1);
  CHECK(categories.count("commit") == 1);
  // Every request of the server's log is in the trace (the open's window, the data chunks).
  CHECK(gets == r.server->log().size());
  CHECK(data_gets == data_ranges(r.server->log()).size());
  CHECK(receives >= data_gets);
  CHECK(row_names[1] == "main");
  CHECK(row_names[1001] == "connection 1");
}

TEST_CASE("cli remote: --trace to a file that cannot be written exits 1 after the command, naming the file",
          "[cli][remote][trace]") {
  PlanRepo r;
  TempDir out;
  const std::vector<std::string> args = {"inspect", "hf://org/plan", "--endpoint", r.endpoint(), "--trace",
                                         (out / "no-such-dir" / "t.json").string()};
  auto res = run(args);
  INFO(describe(args) << "\nstderr: " << res.err);
  CHECK(res.exit_code == 1);
  CHECK(res.err.find("--trace") != std::string::npos);
  CHECK(res.err.find("no-such-dir") != std::string::npos);
  CHECK(res.out.find("b") != std::string::npos);  // the command itself ran
}
