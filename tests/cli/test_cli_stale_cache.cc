// SPDX-License-Identifier: Apache-2.0
// Stale cache detection (issue 19, item 3), end to end through the CLI and the in-process
// Hub-like server: a plain URL (the server's CDN URL, whose ETag is the sha256 of the bytes it
// first served) is rewritten with the same size while its URL and ETag stay the same, as nginx's
// ETag (mtime in seconds + size) does for a rewrite within one second. The next open's first
// window disagrees with the cached bytes: they are retired (`cache ls` shows it, `prune` removes
// it), stderr says so, and the new bytes are fetched and served. Checked through the outputs,
// stderr and the server's log (what moved).
#include "cli_util.hpp"
#include "hub_server.hpp"

using namespace clitest;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {

constexpr const char* kRepo = "org/llama";
constexpr const char* kFile = "model.safetensors";
constexpr const char* kSelection = "model.layers.0.*";

std::uint64_t header_end(const std::string& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<std::size_t>(i)]);
  return 8 + n;
}

// The same file with every tensor byte changed (XOR 0x5A) and, with `header`, its metadata's
// `"format":"pt"` written as `"format":"np"`: the same size either way.
std::string rewritten(std::string bytes, bool header) {
  const std::uint64_t end = header_end(bytes);
  if (header) {
    const auto at = bytes.find("\"format\":\"pt\"");
    REQUIRE(at != std::string::npos);
    REQUIRE(at < end);
    bytes.replace(at, 13, "\"format\":\"np\"");
  }
  for (std::size_t i = end; i < bytes.size(); ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5A);
  return bytes;
}

// Body bytes of 206 answers for the file's tensor data (ranges starting past its header).
std::uint64_t data_bytes(const std::vector<RequestRecord>& log, std::uint64_t header) {
  std::uint64_t n = 0;
  for (const auto& r : log) {
    if (r.kind != "cdn" || r.status != 206) continue;
    const auto eq = r.range.find('=');
    if (eq != std::string::npos && std::stoull(r.range.substr(eq + 1)) >= header) n += r.body_bytes;
  }
  return n;
}

// llama-tiny-single served as org/llama; its CDN URL is the plain URL under test.
struct Served {
  fs::path reference;
  TempDir root, cache, hf_home, work;
  tftest::ScopedEnv env;
  std::unique_ptr<HubServer> server;
  std::string url;
  std::string name;  // the file's name in the checkpoint: the URL's last segment
  std::string original;

  explicit Served(fs::path ref) : reference(std::move(ref)) {
    fs::create_directories(root / "org" / "llama");
    original = read_file(reference / kFile);
    write_file(root.path() / "org" / "llama" / kFile, original);
    for (const char* v : {"HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "CURL_CA_BUNDLE",
                          "XDG_CACHE_HOME", "TENSORFETCH_SHARED_CACHE"}) {
      env.set(v, std::nullopt);
    }
    env.set("HF_HOME", hf_home.path().string());
    env.set("TENSORFETCH_CACHE", (cache / "tf").string());
    tensorfetch::testing::Options o;
    o.root = root.path();
    server = std::make_unique<HubServer>(o);
    server->start();
    url = server->cdn_url(kRepo, kFile);
    const std::string path = url.substr(0, url.find('?'));
    name = path.substr(path.rfind('/') + 1);
  }
  ~Served() { server->stop(); }

  RunResult get(const fs::path& out, std::vector<std::string> more = {}) const {
    std::vector<std::string> args{"get", url, kSelection, "-o", out.string(), "-q"};
    args.insert(args.end(), more.begin(), more.end());
    return run(args);
  }

  // What `get` of the selection writes from `bytes` as a local file.
  std::string local_get(const std::string& bytes, const std::string& name) const {
    const fs::path in = work / (name + ".safetensors"), out = work / (name + "-out.safetensors");
    write_file(in, bytes);
    auto r = run({"get", in.string(), kSelection, "-o", out.string(), "-q"});
    REQUIRE(r.exit_code == 0);
    return read_file(out);
  }

};

std::size_t count_retired(const json& ls) {
  std::size_t n = 0;
  for (const auto& b : ls) n += b["retired"].get<bool>() ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("cli: a plain URL rewritten with the same size and ETag: the next get warns, retires the stale blob and "
          "writes the new bytes; prune removes the retired blob",
          "[cli][cache][stale]") {
  auto ref = reference_dir();
  if (!ref) return;
  Served s(*ref / "llama-tiny-single");
  const std::string old_out = s.local_get(s.original, "old");
  const std::string now = rewritten(s.original, true);
  const std::string new_out = s.local_get(now, "new");
  REQUIRE(old_out != new_out);
  const std::uint64_t header = header_end(s.original);

  // 1. The cache is filled from the original (a small window: only the header is read first).
  auto first = s.get(s.work / "1.safetensors", {"--window", "4096"});
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  CHECK(read_file(s.work / "1.safetensors") == old_out);
  CHECK(first.err.find("warning") == std::string::npos);
  auto ls = cache_ls();
  REQUIRE(ls.size() == 1);
  const std::string old_id = ls[0]["id"].get<std::string>();
  CHECK(old_id.starts_with("u"));
  CHECK_FALSE(ls[0]["retired"].get<bool>());

  REQUIRE_FALSE(s.server->log().empty());
  const std::string etag = s.server->log().front().etag;
  REQUIRE_FALSE(etag.empty());

  // 2. Rewritten in place: same URL, same ETag, same size; another header and other tensor bytes.
  s.server->rewrite_file_same_etag(kRepo, kFile, now);
  s.server->clear_log();
  auto second = s.get(s.work / "2.safetensors", {"--window", "4096"});
  INFO(second.err);
  REQUIRE(second.exit_code == 0);
  CHECK(read_file(s.work / "2.safetensors") == new_out);
  CHECK(second.err.find("tensorfetch: warning: " + s.name + ": the cache held other bytes than") != std::string::npos);
  CHECK(second.err.find("rewritten on the server without its ETag changing") != std::string::npos);
  CHECK(second.err.find("retired") != std::string::npos);
  CHECK(second.err.find(old_id + ".retired-") != std::string::npos);
  // Every tensor byte of the selection came from the server again (none from the stale blob).
  CHECK(data_bytes(s.server->log(), header) >= new_out.size() - header_end(new_out));
  for (const auto& r : s.server->log()) {  // one URL and ETag throughout
    INFO(r.target << " " << r.range);
    if (r.kind != "cdn") continue;  // (config.json beside the URL)
    CHECK(r.status == 206);
    CHECK(r.etag == etag);
  }
  ls = cache_ls();
  REQUIRE(ls.size() == 2);
  CHECK(count_retired(ls) == 1);
  for (const auto& b : ls) {
    const std::string id = b["id"].get<std::string>();
    if (b["retired"].get<bool>()) {
      CHECK(id.starts_with(old_id + ".retired-"));
      CHECK(b["present"].get<std::uint64_t>() == 0);  // nothing in it is served
      CHECK_FALSE(b["complete"].get<bool>());
    } else {
      CHECK(id == old_id);  // a fresh blob of the same identity
    }
  }
  auto text = run({"cache", "ls"});
  CHECK(text.out.find("retired") != std::string::npos);

  // 3. Once more: no warning, and nothing fetched (the fresh blob holds the new bytes).
  s.server->clear_log();
  auto third = s.get(s.work / "3.safetensors", {"--window", "4096"});
  INFO(third.err);
  REQUIRE(third.exit_code == 0);
  CHECK(read_file(s.work / "3.safetensors") == new_out);
  CHECK(third.err.find("warning") == std::string::npos);
  CHECK(data_bytes(s.server->log(), header) == 0);

  // 4. verify says what it is; prune removes it whatever the size limit, and keeps the fresh one.
  auto verified = run({"cache", "verify"});
  CHECK(verified.exit_code == 0);
  CHECK(verified.out.find(": retired (stale bytes, never served)") != std::string::npos);
  auto pruned = run({"cache", "prune", "--max-size", "1GB"});
  INFO(pruned.err);
  REQUIRE(pruned.exit_code == 0);
  CHECK(pruned.out.find("removed 1 blob") != std::string::npos);
  ls = cache_ls();
  REQUIRE(ls.size() == 1);
  CHECK(ls[0]["id"] == old_id);
  CHECK(count_retired(ls) == 0);
}

TEST_CASE("cli: a rewrite that keeps the header but changes tensor bytes the open's window covers is detected too",
          "[cli][cache][stale]") {
  auto ref = reference_dir();
  if (!ref) return;
  Served s(*ref / "llama-tiny-single");
  const std::string now = rewritten(s.original, false);  // the same header
  REQUIRE(header_end(now) == header_end(s.original));
  const std::string new_out = s.local_get(now, "new");
  // The default window (256 KiB) holds the header and the first tensors: the first get commits
  // all of it to the cache, so the next open compares tensor bytes as well.
  auto first = s.get(s.work / "1.safetensors");
  REQUIRE(first.exit_code == 0);
  s.server->rewrite_file_same_etag(kRepo, kFile, now);
  auto second = s.get(s.work / "2.safetensors");
  INFO(second.err);
  REQUIRE(second.exit_code == 0);
  CHECK(second.err.find("tensorfetch: warning: " + s.name + ": the cache held other bytes") != std::string::npos);
  CHECK(read_file(s.work / "2.safetensors") == new_out);
  CHECK(count_retired(cache_ls()) == 1);
}

TEST_CASE("cli: inspect alone retires stale bytes; an offline get serves nothing stale and never puts a recorded "
          "header together with the new bytes; rm removes a retired blob",
          "[cli][cache][stale][offline]") {
  auto ref = reference_dir();
  if (!ref) return;
  Served s(*ref / "llama-tiny-single");
  const std::string now = rewritten(s.original, true);
  const std::string new_out = s.local_get(now, "new");
  auto first = s.get(s.work / "1.safetensors", {"--window", "4096"});
  REQUIRE(first.exit_code == 0);
  // The snapshot manifest (files, ETags, headers) this get recorded, with the old header.
  std::vector<fs::path> manifests;
  for (const auto& e : fs::directory_iterator(s.cache / "tf" / "snapshots")) manifests.push_back(e.path());
  REQUIRE(manifests.size() == 1);
  const std::string old_manifest = read_file(manifests[0]);
  s.server->rewrite_file_same_etag(kRepo, kFile, now);

  // An open without a fetch finds the stale bytes too: told on stderr, retired.
  auto inspected = run({"inspect", s.url, "--window", "4096"});
  INFO(inspected.err);
  REQUIRE(inspected.exit_code == 0);
  CHECK(inspected.err.find("tensorfetch: warning: " + s.name + ": the cache held other bytes") != std::string::npos);
  auto ls = cache_ls();
  REQUIRE(ls.size() == 1);
  REQUIRE(ls[0]["retired"].get<bool>());
  const std::string retired_id = ls[0]["id"].get<std::string>();

  // Offline, the manifest still has the old header, and the cache no bytes for it: not fetched.
  auto offline = s.get(s.work / "off.safetensors", {"--offline"});
  INFO(offline.err);
  CHECK(offline.exit_code == 1);
  CHECK(offline.err.find("not in the cache") != std::string::npos);
  CHECK_FALSE(fs::exists(s.work / "off.safetensors"));

  // Online, the new bytes are fetched into a fresh blob, and the manifest records the new header.
  auto online = s.get(s.work / "2.safetensors", {"--window", "4096"});
  INFO(online.err);
  REQUIRE(online.exit_code == 0);
  CHECK(read_file(s.work / "2.safetensors") == new_out);
  CHECK(online.err.find("warning") == std::string::npos);  // (told once, by the open that retired them)

  // A process that read the old header finishes last and records its manifest after that (put
  // back here): offline, its header and the fresh blob's bytes disagree -- exit 4, never a mix.
  write_file(manifests[0], old_manifest);
  auto mixed = s.get(s.work / "m.safetensors", {"--offline"});
  INFO(mixed.err);
  CHECK(mixed.exit_code == 4);
  CHECK(mixed.err.find("snapshot manifest") != std::string::npos);
  CHECK_FALSE(fs::exists(s.work / "m.safetensors"));

  auto removed = run({"cache", "rm", retired_id});
  INFO(removed.err);
  CHECK(removed.exit_code == 0);
  ls = cache_ls();
  REQUIRE(ls.size() == 1);
  CHECK(ls[0]["id"] != retired_id);
  CHECK_FALSE(ls[0]["retired"].get<bool>());
}
