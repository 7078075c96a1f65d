// SPDX-License-Identifier: Apache-2.0
// Hostile servers against the CLI (issue 14, items 1 and 2), through the in-process Hub-like
// server and its request log:
//  - a server-named X-Repo-Commit that is not a commit id (`../../../../WORK/sentinel/x`, `abc`, 41 hex
//    digits, a value with '/') is refused (exit 3, naming the URL and the value) before it
//    becomes a path: a sentinel tree outside every cache and the Hugging Face cache are byte-for-
//    byte unchanged, and `get` does not serve the sentinel's files as the repo's;
//  - a revision on the command line that breaks git's ref-name rules is refused before any
//    request;
//  - cache poisoning across servers: server B claims the sha256 of server A's file in
//    X-Linked-Etag (or a plain URL's ETag is 64 hex digits) while serving other bytes; A's
//    repo is then still served exactly A's bytes, fetched from A. Only a blob verified whole
//    against its sha256 is shared between origins.
#include <sys/stat.h>

#include <map>
#include <set>

#include "cli_util.hpp"
#include "hub_server.hpp"

using namespace clitest;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {

constexpr const char* kRepo = "org/llama";
const std::string kShard1 = "model-00001-of-00003.safetensors";  // holds model.layers.0.*
constexpr const char* kSelection = "model.layers.0.*";

std::uint64_t header_end(const std::string& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<std::size_t>(i)]);
  return 8 + n;
}

/// Every entry below `dir` (links not followed): mode, owner, and content or link target.
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st {};
    REQUIRE(::lstat(it->path().c_str(), &st) == 0);
    std::string v = std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + " ";
    if (S_ISLNK(st.st_mode)) v += "-> " + fs::read_symlink(it->path()).string();
    if (S_ISREG(st.st_mode)) v += sha256_hex(read_file(it->path()));
    out[fs::relative(it->path(), dir).string()] = v;
  }
  return out;
}

// Two servers of org/llama sharing one cache: A serves the reference sharded checkpoint; B the
// same headers with every tensor byte changed (XOR 0x5A).
struct TwoServers {
  fs::path reference;
  TempDir root_a, root_b, cache, hf_home, work;
  tftest::ScopedEnv env;
  std::unique_ptr<HubServer> a, b;

  explicit TwoServers(fs::path ref) : reference(std::move(ref)) {
    fs::create_directories(root_a / "org" / "llama");
    fs::create_directories(root_b / "org" / "llama");
    for (const auto& e : fs::directory_iterator(reference)) {
      std::string bytes = read_file(e.path());
      write_file(root_a.path() / "org" / "llama" / e.path().filename(), bytes);
      if (e.path().extension() == ".safetensors") {
        for (std::size_t i = header_end(bytes); i < bytes.size(); ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5A);
      }
      write_file(root_b.path() / "org" / "llama" / e.path().filename(), bytes);
    }
    for (const char* v : {"HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "CURL_CA_BUNDLE",
                          "XDG_CACHE_HOME", "TENSORFETCH_SHARED_CACHE"}) {
      env.set(v, std::nullopt);
    }
    env.set("HF_HOME", hf_home.path().string());
    env.set("TENSORFETCH_CACHE", (cache / "tf").string());
    for (auto* s : {&a, &b}) {
      tensorfetch::testing::Options o;
      o.root = s == &a ? root_a.path() : root_b.path();
      *s = std::make_unique<HubServer>(o);
      (*s)->start();
    }
  }
  ~TwoServers() {
    a->stop();
    b->stop();
  }

  std::string sha_a(const std::string& file) const { return a->file_sha256(kRepo, file); }

  RunResult get(const HubServer& server, const fs::path& out, const std::string& location = "hf://org/llama") const {
    return run({"get", location, kSelection, "-o", out.string(), "--endpoint", server.endpoint(), "--window", "4096",
                "-q"});
  }

  // What a get of the selection from the reference files on disk writes.
  std::string local_get() const {
    const fs::path out = work / "local.safetensors";
    auto r = run({"get", reference.string(), kSelection, "-o", out.string(), "-q"});
    REQUIRE(r.exit_code == 0);
    return read_file(out);
  }

};

// Body bytes of CDN requests for `file` that start past its header (tensor data).
std::uint64_t data_bytes(const std::vector<RequestRecord>& log, const std::string& file, std::uint64_t header) {
  std::uint64_t n = 0;
  for (const auto& r : log) {
    if (r.kind != "cdn" || r.file != file || r.status != 206) continue;
    const auto eq = r.range.find('=');
    if (eq != std::string::npos && std::stoull(r.range.substr(eq + 1)) >= header) n += r.body_bytes;
  }
  return n;
}

std::uint64_t cdn_bytes(const std::vector<RequestRecord>& log, const std::string& file) {
  std::uint64_t n = 0;
  for (const auto& r : log) n += (r.kind == "cdn" && r.file == file) ? r.body_bytes : 0;
  return n;
}

}  // namespace

TEST_CASE("cli: a hostile X-Repo-Commit is refused (exit 3) before it becomes a path: nothing outside the caches "
          "changes, the Hugging Face cache does not change, no local file is served as the repo's",
          "[cli][hostile][commit]") {
  auto ref = reference_dir();
  if (!ref) return;
  TwoServers s(*ref / "llama-tiny-sharded");
  // From HF_HOME/hub/models--org--llama/snapshots, four levels up is the temporary directory
  // that holds both HF_HOME and the work directory: this value leads to WORK/sentinel/x.
  REQUIRE(s.hf_home.path().parent_path() == s.work.path().parent_path());
  const std::string escape = "../../../../" + s.work.path().filename().string() + "/sentinel/x";
  const std::vector<std::pair<const char*, std::string>> values = {
      {"../../../../WORK/sentinel/x", escape},  // leads from snapshots/ to WORK/sentinel/x
      {"abc", "abc"},                           // too short
      {"41 hex digits", "0123456789abcdef0123456789abcdef012345678"},
      {"a commit, then /x", "0123456789abcdef0123456789abcdef01234567/x"},
  };
  for (const auto& [label, value] : values) {
    DYNAMIC_SECTION("X-Repo-Commit: " << label) {  // (a stable name: `escape` differs per run)
      // The sentinel: files at exactly the names a publish or a snapshot read would use -- the
      // shards (valid safetensors with other tensor bytes: B's), config.json as a symlink.
      const fs::path sentinel = s.work / "sentinel" / "x";
      fs::create_directories(sentinel);
      for (const auto& e : fs::directory_iterator(s.root_b.path() / "org" / "llama")) {
        write_file(sentinel / e.path().filename(), read_file(e.path()));
      }
      write_file(s.work / "sentinel" / "target.txt", "the user's file");
      fs::remove(sentinel / "config.json");
      fs::create_symlink(s.work / "sentinel" / "target.txt", sentinel / "config.json");
      // A Hugging Face cache with something in it already.
      const fs::path repo_dir = s.hf_home / "hub" / "models--org--llama";
      fs::create_directories(repo_dir / "snapshots");
      fs::create_directories(repo_dir / "refs");
      fs::create_directories(repo_dir / "blobs");
      write_file(repo_dir / "refs" / "main", std::string(40, '1'));
      write_file(repo_dir / "blobs" / "keep", "kept");
      const auto sentinel_before = tree(s.work / "sentinel");
      const auto hf_before = tree(s.hf_home.path());
      s.a->set_hostile_commit(value);

      const auto dl = run({"download", "hf://org/llama", "-o", (s.work / "dl").string(), "--hf-cache", "--endpoint",
                           s.a->endpoint(), "-q"});
      INFO("download stderr: " << dl.err);
      CHECK(dl.exit_code == 3);
      CHECK_THAT(dl.err, Catch::Contains("'" + value + "'") && Catch::Contains("X-Repo-Commit") &&
                             Catch::Contains(s.a->endpoint() + "/org/llama/resolve/"));
      const auto got = s.get(*s.a, s.work / "out.safetensors");
      INFO("get stderr: " << got.err);
      CHECK(got.exit_code == 3);
      CHECK_THAT(got.err, Catch::Contains("'" + value + "'") && Catch::Contains("not a commit id"));
      CHECK_FALSE(fs::exists(s.work / "out.safetensors"));
      CHECK_FALSE(fs::exists(s.work / "dl" / kShard1));
      CHECK(tree(s.work / "sentinel") == sentinel_before);
      CHECK(tree(s.hf_home.path()) == hf_before);
      // Refused at the first response: nothing was asked at that "commit".
      for (const auto& r : s.a->log()) CHECK(r.revision == "main");
      s.a->set_hostile_commit("");
      s.a->clear_log();
    }
  }
}

TEST_CASE("cli: a revision that breaks git's ref-name rules is refused before any request (exit 1)",
          "[cli][hostile][revision]") {
  auto ref = reference_dir();
  if (!ref) return;
  TwoServers s(*ref / "llama-tiny-sharded");
  for (const char* rev : {"..%2F..%2F..%2Ftmp%2Fx", "refs%2Fpr%2F.x", "a%20b", "x.lock", "a@{1}", "a%0Ab", "a~1"}) {
    DYNAMIC_SECTION("@" << rev) {
      for (const char* command : {"inspect", "get", "download"}) {
        std::vector<std::string> args{command, std::string("hf://org/llama@") + rev};
        if (std::string(command) == "get") args.insert(args.end(), {"-o", (s.work / "o.safetensors").string()});
        if (std::string(command) == "download") args.insert(args.end(), {"-o", (s.work / "dl").string(), "--hf-cache"});
        args.insert(args.end(), {"--endpoint", s.a->endpoint()});
        const auto r = run(args);
        INFO(describe(args) << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.err, Catch::Contains("revision") && Catch::Contains("git ref name"));
        CHECK(r.err.find('\n') == r.err.size() - 1);  // one line: control characters escaped
      }
      CHECK(s.a->log().empty());
      CHECK_FALSE(fs::exists(s.cache / "tf"));
      CHECK(fs::is_empty(s.hf_home.path()));
    }
  }
}

TEST_CASE("cli: server B claims the sha256 of A's file (lying X-Linked-Etag): after a partial get through B, a get "
          "through A serves A's exact bytes, fetched from A",
          "[cli][hostile][provenance]") {
  auto ref = reference_dir();
  if (!ref) return;
  TwoServers s(*ref / "llama-tiny-sharded");
  const std::string local = s.local_get();
  const std::uint64_t header = header_end(read_file(s.reference / kShard1));
  s.b->set_linked_etag(s.sha_a(kShard1), kShard1);

  const auto via_b = s.get(*s.b, s.work / "b.safetensors");
  INFO(via_b.err);
  REQUIRE(via_b.exit_code == 0);
  CHECK(read_file(s.work / "b.safetensors") != local);  // B's bytes, served to who asked B
  CHECK(data_bytes(s.b->log(), kShard1, header) > 0);

  const auto via_a = s.get(*s.a, s.work / "a.safetensors");
  INFO(via_a.err);
  REQUIRE(via_a.exit_code == 0);
  CHECK(read_file(s.work / "a.safetensors") == local);
  CHECK(data_bytes(s.a->log(), kShard1, header) > 0);  // from A, not from the cache B filled
  // One blob per origin for that sha256, neither complete.
  const json ls = cache_ls();
  std::set<std::string> origins;
  for (const auto& blob : ls) {
    CHECK(blob["sha256"] == s.sha_a(kShard1));
    CHECK(blob["id"].get<std::string>().starts_with(s.sha_a(kShard1) + "-"));
    CHECK_FALSE(blob["complete"].get<bool>());
    origins.insert(blob["origin"].get<std::string>());
  }
  CHECK(origins == std::set<std::string>{s.a->endpoint(), s.b->endpoint()});
}

TEST_CASE("cli: a whole download through the lying server ends exit 4 and nothing of it is served later",
          "[cli][hostile][provenance]") {
  auto ref = reference_dir();
  if (!ref) return;
  TwoServers s(*ref / "llama-tiny-sharded");
  const std::string local = s.local_get();
  const std::uint64_t header = header_end(read_file(s.reference / kShard1));
  s.b->set_linked_etag(s.sha_a(kShard1), kShard1);

  const auto dl = run({"download", "hf://org/llama", "-o", (s.work / "dl").string(), "--endpoint", s.b->endpoint(), "-q"});
  INFO(dl.err);
  CHECK(dl.exit_code == 4);
  CHECK_THAT(dl.err, Catch::Contains("sha256") && Catch::Contains(s.sha_a(kShard1)) && Catch::Contains("discarded"));
  for (const auto& blob : cache_ls()) {
    if (blob["sha256"] == s.sha_a(kShard1)) CHECK(blob["present"] == 0);
  }
  const auto via_a = s.get(*s.a, s.work / "a.safetensors");
  INFO(via_a.err);
  REQUIRE(via_a.exit_code == 0);
  CHECK(read_file(s.work / "a.safetensors") == local);
  CHECK(data_bytes(s.a->log(), kShard1, header) > 0);
  // Through B again: the discarded bytes are fetched again, not served from the cache.
  s.b->clear_log();
  const auto via_b = s.get(*s.b, s.work / "b.safetensors");
  REQUIRE(via_b.exit_code == 0);
  CHECK(data_bytes(s.b->log(), kShard1, header) > 0);
}

TEST_CASE("cli: a plain URL whose ETag is 64 hex digits but not the content's sha256 downloads exactly (no guessed "
          "hash) and cannot poison the Hub repo's blob",
          "[cli][hostile][provenance][etag]") {
  auto ref = reference_dir();
  if (!ref) return;
  TwoServers s(*ref / "llama-tiny-sharded");
  const std::string local = s.local_get();
  const std::uint64_t header = header_end(read_file(s.reference / kShard1));
  // B's CDN names A's shard's sha256 as its ETag (a Xet CDN's ETag is 64 hex and not a sha256).
  s.b->set_cdn_etag(s.sha_a(kShard1), kShard1);
  const std::string url = s.b->cdn_url(kRepo, kShard1);
  const auto dl = run({"download", url, "-o", (s.work / "dl").string(), "-q"});
  INFO(dl.err);
  REQUIRE(dl.exit_code == 0);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(s.work / "dl")) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  CHECK(read_file(files[0]) == read_file(s.root_b.path() / "org" / "llama" / kShard1));
  const json ls = cache_ls();
  REQUIRE(ls.size() == 1);
  CHECK(ls[0]["id"].get<std::string>().starts_with("u"));
  CHECK(ls[0]["sha256"].is_null());
  CHECK(ls[0]["complete"].get<bool>());

  const auto via_a = s.get(*s.a, s.work / "a.safetensors");
  INFO(via_a.err);
  REQUIRE(via_a.exit_code == 0);
  CHECK(read_file(s.work / "a.safetensors") == local);
  CHECK(data_bytes(s.a->log(), kShard1, header) > 0);
}

TEST_CASE("cli: after an honest full download through A, another origin claiming that sha256 reuses the verified "
          "blob (no tensor bytes from it)",
          "[cli][hostile][provenance][shared]") {
  auto ref = reference_dir();
  if (!ref) return;
  TwoServers s(*ref / "llama-tiny-sharded");
  const std::string local = s.local_get();
  const std::uint64_t header = header_end(read_file(s.reference / kShard1));
  const auto dl = run({"download", "hf://org/llama", "-o", (s.work / "dl").string(), "--endpoint", s.a->endpoint(), "-q"});
  INFO(dl.err);
  REQUIRE(dl.exit_code == 0);
  bool verified = false;
  for (const auto& blob : cache_ls()) verified = verified || blob["id"] == s.sha_a(kShard1);
  CHECK(verified);

  s.b->set_linked_etag(s.sha_a(kShard1), kShard1);
  const auto via_b = s.get(*s.b, s.work / "b.safetensors");
  INFO(via_b.err);
  REQUIRE(via_b.exit_code == 0);
  CHECK(read_file(s.work / "b.safetensors") == local);  // the verified bytes, not B's
  CHECK(data_bytes(s.b->log(), kShard1, header) == 0);
  CHECK(cdn_bytes(s.b->log(), kShard1) <= 4096);  // only its header window
}
