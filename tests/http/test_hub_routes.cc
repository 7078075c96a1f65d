// SPDX-License-Identifier: Apache-2.0
// Routes of the test server: resolve (302 to the CDN / 200 direct), the CDN, ranges, HEAD,
// revisions, errors with X-Error-Code, the API and dataset routes; of the real-Hub profile:
// resolve-cache redirects, renamed repos and legacy ids, the Hub's access errors.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "http_util.hpp"

using namespace hubtest;
using tensorfetch::testing::default_commit;
using tensorfetch::testing::git_blob_sha1;
using tensorfetch::testing::summarize;

namespace {

const std::string kShard = "model-00002-of-00003.safetensors";

httplib::Headers range(const std::string& r) { return {{"Range", r}}; }

// A request and the status and X-Error-Code it must get.
struct ErrorCase {
  std::string target;
  int status;
  std::string code;
};

void check_error_codes(httplib::Client& hub, const std::vector<ErrorCase>& cases) {
  for (const auto& c : cases) {
    INFO(c.target);
    auto r = hub.Get(c.target.c_str());
    REQUIRE(r);
    CHECK(r->status == c.status);
    CHECK(r->get_header_value("X-Error-Code") == c.code);
  }
}

}  // namespace

TEST_CASE("git blob ids and default commits are computed like git", "[routes]") {
  CHECK(git_blob_sha1("") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  CHECK(git_blob_sha1("hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a");
  CHECK(default_commit("org/small").size() == 40);
  CHECK(default_commit("org/small") != default_commit("org/other"));
}

TEST_CASE("an LFS file resolves to a 302 to the CDN host with the Hub's headers", "[routes]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSharded, kShard));
  const std::string sha = sha256_hex(content);
  CHECK(s.file_sha256(kSharded, kShard) == sha);
  CHECK(s.endpoint() == "http://localhost:" + std::to_string(s.port()));
  CHECK(s.cdn_endpoint() == "http://127.0.0.1:" + std::to_string(s.port()));

  auto hub = f.hub();
  auto r = hub.Get(("/org/llama-tiny-sharded/resolve/main/" + kShard).c_str());
  REQUIRE(r);
  CHECK(r->status == 302);
  CHECK(r->get_header_value("X-Repo-Commit") == default_commit(kSharded));
  CHECK(r->get_header_value("X-Linked-Etag") == "\"" + sha + "\"");
  CHECK(r->get_header_value("X-Linked-Size") == std::to_string(content.size()));
  CHECK(r->get_header_value("ETag").size() == 42);  // quoted git id of the LFS pointer
  CHECK(r->get_header_value("ETag") != "\"" + sha + "\"");
  const std::string location = r->get_header_value("Location");
  CHECK(location.rfind(s.cdn_endpoint() + "/cdn/" + sha + "?expires=", 0) == 0);
  CHECK(location.find("&sig=") != std::string::npos);

  // Following it: the blob, with the sha256 as ETag.
  auto cdn = f.cdn();
  auto b = cdn.Get(target_of(location).c_str());
  REQUIRE(b);
  CHECK(b->status == 200);
  CHECK(b->body == content);
  CHECK(b->get_header_value("ETag") == "\"" + sha + "\"");
  CHECK(b->get_header_value("Accept-Ranges") == "bytes");
  CHECK(b->get_header_value("Content-Length") == std::to_string(content.size()));

  auto log = s.log();
  REQUIRE(log.size() == 2);
  CHECK(log[0].kind == "resolve");
  CHECK(log[0].host == "localhost:" + std::to_string(s.port()));
  CHECK(log[0].status == 302);
  CHECK(log[0].location == location);
  CHECK(log[0].repo == kSharded);
  CHECK(log[0].revision == "main");
  CHECK(log[0].file == kShard);
  CHECK(log[1].kind == "cdn");
  CHECK(log[1].host == "127.0.0.1:" + std::to_string(s.port()));
  CHECK(log[1].repo == kSharded);
  CHECK(log[1].file == kShard);
  CHECK(log[1].body_bytes == content.size());
  CHECK(log[1].etag == "\"" + sha + "\"");
}

TEST_CASE("CDN ranges: a-b, a-, -n, clamped ends, 416 and ignored forms", "[routes]") {
  Fixture f;
  const std::string content = read_file(f.root.file(kSharded, kShard));
  const std::string size = std::to_string(content.size());
  const std::string target = f.cdn_target(kSharded, kShard);
  auto cdn = f.cdn();

  auto r = cdn.Get(target.c_str(), range("bytes=0-7"));
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->get_header_value("Content-Range") == "bytes 0-7/" + size);
  CHECK(r->get_header_value("Content-Length") == "8");
  CHECK(r->body == content.substr(0, 8));

  r = cdn.Get(target.c_str(), range("bytes=100-"));
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->get_header_value("Content-Range") ==
        "bytes 100-" + std::to_string(content.size() - 1) + "/" + size);
  CHECK(r->body == content.substr(100));

  r = cdn.Get(target.c_str(), range("bytes=-10"));
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->body == content.substr(content.size() - 10));

  // An end past the size is clamped; a suffix longer than the file is the whole file.
  r = cdn.Get(target.c_str(), range("bytes=10-99999999"));
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->body == content.substr(10));
  r = cdn.Get(target.c_str(), range("bytes=-99999999"));
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->body == content);

  r = cdn.Get(target.c_str(), range("bytes=" + size + "-"));
  REQUIRE(r);
  CHECK(r->status == 416);
  CHECK(r->get_header_value("Content-Range") == "bytes */" + size);
  CHECK(r->body.empty());
  r = cdn.Get(target.c_str(), range("bytes=-0"));
  REQUIRE(r);
  CHECK(r->status == 416);

  // Several ranges and other units are ignored: 200 with the whole body and its real type.
  r = cdn.Get(target.c_str(), range("bytes=0-1,4-5"));
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == content);
  CHECK(r->get_header_value("Content-Type") == "binary/octet-stream");
  CHECK(r->get_header_value("Content-Range").empty());

  // If-Range with another ETag: the whole body.
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-3"}, {"If-Range", "\"other\""}});
  REQUIRE(r);
  CHECK(r->status == 200);

  auto log = f.server->log();
  REQUIRE(log.size() == 10);  // 1 resolve + 9 CDN
  CHECK(log[1].range == "bytes=0-7");
  CHECK(log[1].content_range == "bytes 0-7/" + size);
  CHECK(log[1].content_length == 8);
  CHECK(log[1].body_bytes == 8);
  CHECK(log[6].status == 416);
  CHECK(log[6].content_range == "bytes */" + size);
  CHECK(log[6].body_bytes == 0);
}

TEST_CASE("ranges that httplib itself refuses are still logged", "[routes]") {
  // cpp-httplib answers a Range header it cannot parse (first > last, other units) with a
  // bare 416 before the server sees the request.
  Fixture f;
  const std::string target = f.cdn_target(kSharded, kShard);
  auto cdn = f.cdn();
  auto r = cdn.Get(target.c_str(), range("bytes=9-2"));
  REQUIRE(r);
  CHECK(r->status == 416);
  r = cdn.Get(target.c_str(), range("items=0-1"));
  REQUIRE(r);
  CHECK(r->status == 416);
  r = cdn.Get(target.c_str(), range("bytes=0-1"));
  REQUIRE(r);
  CHECK(r->status == 206);
  auto log = f.server->log();
  REQUIRE(log.size() == 4);
  CHECK(log[1].range == "bytes=9-2");
  CHECK(log[1].kind == "cdn");
  CHECK(log[1].status == 416);
  CHECK(log[2].range == "items=0-1");
  CHECK(log[1].seq < log[2].seq);
  CHECK(log[2].seq < log[3].seq);
}

TEST_CASE("HEAD gives the same headers without a body", "[routes]") {
  Fixture f;
  const std::string content = read_file(f.root.file(kSharded, kShard));
  auto hub = f.hub();
  auto h = hub.Head(("/org/llama-tiny-sharded/resolve/main/" + kShard).c_str());
  REQUIRE(h);
  CHECK(h->status == 302);
  CHECK(h->get_header_value("X-Linked-Size") == std::to_string(content.size()));
  auto cdn = f.cdn();
  auto b = cdn.Head(target_of(h->get_header_value("Location")).c_str(), range("bytes=0-99"));
  REQUIRE(b);
  CHECK(b->status == 206);
  CHECK(b->get_header_value("Content-Length") == "100");
  CHECK(b->body.empty());
  auto c = hub.Head("/org/small/resolve/main/config.json");
  REQUIRE(c);
  CHECK(c->status == 200);
  CHECK(c->body.empty());
  auto log = f.server->log();
  REQUIRE(log.size() == 3);
  for (const auto& rec : log) {
    CHECK(rec.method == "HEAD");
    CHECK(rec.body_bytes == 0);
  }
}

TEST_CASE("small files are served directly with a git-blob ETag, ranges too", "[routes]") {
  Fixture f;
  const std::string index = read_file(f.root.file(kSharded, "model.safetensors.index.json"));
  auto hub = f.hub();
  auto r = hub.Get("/org/llama-tiny-sharded/resolve/main/model.safetensors.index.json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == index);
  CHECK(r->get_header_value("ETag") == "\"" + git_blob_sha1(index) + "\"");
  CHECK(r->get_header_value("X-Repo-Commit") == default_commit(kSharded));
  CHECK(r->get_header_value("Content-Type") == "application/json");
  CHECK_FALSE(r->has_header("Location"));
  CHECK_FALSE(r->has_header("X-Linked-Etag"));

  r = hub.Get("/org/llama-tiny-sharded/resolve/main/model.safetensors.index.json",
              range("bytes=2-11"));
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->body == index.substr(2, 10));
  CHECK(r->get_header_value("Content-Range") == "bytes 2-11/" + std::to_string(index.size()));

  r = hub.Get("/org/llama-tiny-sharded/resolve/main/config.json", range("bytes=100000-"));
  REQUIRE(r);
  CHECK(r->status == 416);
  CHECK(r->get_header_value("Content-Range") == "bytes */720");

  // Nested paths.
  r = hub.Get("/org/small/resolve/main/sub/dir/notes.txt");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "hello\n");
  CHECK(r->get_header_value("ETag") == "\"ce013625030ba8dba906f756967f9e9ca394464a\"");
}

TEST_CASE("revisions: main, the commit sha, refs from .refs (encoded or not), set_ref",
          "[routes]") {
  Fixture f;
  auto& s = *f.server;
  auto hub = f.hub();
  const std::string main = default_commit(kSmall);
  CHECK(s.commit(kSmall) == main);
  CHECK(s.commit(kSmall, "refs/pr/1") == kPr1Commit);
  CHECK(s.commit("org/none").empty());

  auto r = hub.Get(("/org/small/resolve/" + main + "/config.json").c_str());
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("X-Repo-Commit") == main);

  r = hub.Get("/org/small/resolve/refs%2Fpr%2F1/config.json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("X-Repo-Commit") == kPr1Commit);
  r = hub.Get("/org/small/resolve/refs/pr/1/config.json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("X-Repo-Commit") == kPr1Commit);

  r = hub.Get("/org/small/resolve/v2/config.json");
  REQUIRE(r);
  CHECK(r->status == 404);
  CHECK(r->get_header_value("X-Error-Code") == "RevisionNotFound");
  r = hub.Get("/org/small/resolve/0123456789012345678901234567890123456789/config.json");
  REQUIRE(r);
  CHECK(r->get_header_value("X-Error-Code") == "RevisionNotFound");

  // A branch that moves: main names the new commit, the old one still resolves.
  const std::string next = "2222222222222222222222222222222222222222";
  s.set_ref(kSmall, "main", next);
  r = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(r);
  CHECK(r->get_header_value("X-Repo-Commit") == next);
  r = hub.Get(("/org/small/resolve/" + main + "/model.safetensors").c_str());
  REQUIRE(r);
  CHECK(r->status == 302);
  CHECK(r->get_header_value("X-Repo-Commit") == main);

  // Moving after n requests: the next one still sees the old commit, the one after the new.
  const std::string third = "3333333333333333333333333333333333333333";
  s.move_ref_after(kSmall, "main", third, 1);
  r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->get_header_value("X-Repo-Commit") == next);
  r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->get_header_value("X-Repo-Commit") == third);
  CHECK(s.commit(kSmall, next) == next);

  auto log = s.log();
  REQUIRE(log.size() == 9);
  CHECK(log[1].revision == "refs/pr/1");
  CHECK(log[1].target == "/org/small/resolve/refs%2Fpr%2F1/config.json");
  CHECK(log[2].revision == "refs/pr/1");
  CHECK(log[2].file == "config.json");
  CHECK(log[3].error_code == "RevisionNotFound");
}

TEST_CASE("a .commit file sets the commit of main", "[routes]") {
  Root root;
  const std::string sha = "abcdefabcdefabcdefabcdefabcdefabcdefabcd";
  { std::ofstream(root.file(kSmall, ".commit")) << sha << "\n"; }
  Options opt;
  opt.root = root.path();
  HubServer s(opt);
  s.start();
  httplib::Client c("localhost", s.port());
  auto r = c.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->get_header_value("X-Repo-Commit") == sha);
  // Control files are never served.
  r = c.Get("/org/small/resolve/main/.commit");
  REQUIRE(r);
  CHECK(r->status == 404);
  CHECK(r->get_header_value("X-Error-Code") == "EntryNotFound");
  r = c.Get("/org/small/resolve/main/.refs");
  REQUIRE(r);
  CHECK(r->status == 404);
}

TEST_CASE("errors carry X-Error-Code", "[routes]") {
  Fixture f;
  auto hub = f.hub();
  const std::vector<ErrorCase> cases = {
      {"/org/nope/resolve/main/config.json", 404, "RepoNotFound"},
      {"/nope/small/resolve/main/config.json", 404, "RepoNotFound"},
      {"/org/small/resolve/main/missing.json", 404, "EntryNotFound"},
      {"/org/small/resolve/main/sub", 404, "EntryNotFound"},  // a directory
      {"/org/small/resolve/main/../small/config.json", 404, "EntryNotFound"},
      {"/org/small/resolve/main/sub/%2E%2E/config.json", 404, "EntryNotFound"},
      {"/org/small/resolve/main/sub//dir/notes.txt", 404, "EntryNotFound"},
      {"/org/%2E%2E/resolve/main/config.json", 404, "RepoNotFound"},
      {"/datasets/org/nope/resolve/main/README.md", 404, "RepoNotFound"},
      {"/org/small/blob/main/config.json", 404, ""},
      {"/", 404, ""},
  };
  check_error_codes(hub, cases);
  // EntryNotFound still names the commit, like the Hub.
  auto r = hub.Get("/org/small/resolve/main/missing.json");
  REQUIRE(r);
  CHECK(r->get_header_value("X-Repo-Commit") == default_commit(kSmall));
  CHECK(r->get_header_value("Content-Type") == "application/json");
  CHECK(r->body.find("\"error\"") != std::string::npos);

  auto log = f.server->log();
  REQUIRE(log.size() == cases.size() + 1);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CHECK(log[i].status == cases[i].status);
    CHECK(log[i].error_code == cases[i].code);
  }
}

TEST_CASE("unknown repos can answer 401 like the real Hub", "[routes]") {
  Options opt;
  opt.unknown_repo_401 = true;
  Fixture f(opt);
  auto hub = f.hub();
  auto r = hub.Get("/org/nope/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 401);
  CHECK(r->get_header_value("X-Error-Code") == "RepoNotFound");
  r = hub.Get("/org/nope/resolve/main/config.json", {{"Authorization", "Bearer x"}});
  REQUIRE(r);
  CHECK(r->status == 404);
  f.server->set_unknown_repo_401(false);
  r = hub.Get("/org/nope/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 404);
}

TEST_CASE("dataset repos and the API routes", "[routes]") {
  Fixture f;
  auto hub = f.hub();
  auto r = hub.Get("/datasets/org/ds/resolve/main/README.md");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "# ds\n");
  CHECK(r->get_header_value("X-Repo-Commit") == default_commit(kDataset));
  r = hub.Get("/datasets/org/ds/resolve/main/data/train.safetensors");
  REQUIRE(r);
  CHECK(r->status == 302);
  const std::string data = read_file(f.root.file(kDataset, "data/train.safetensors"));
  CHECK(r->get_header_value("X-Linked-Etag") == "\"" + sha256_hex(data) + "\"");
  auto cdn = f.cdn();
  auto b = cdn.Get(target_of(r->get_header_value("Location")).c_str(), range("bytes=0-15"));
  REQUIRE(b);
  CHECK(b->body == data.substr(0, 16));

  auto a = hub.Get("/api/models/org/small");
  REQUIRE(a);
  CHECK(a->status == 200);
  auto j = nlohmann::json::parse(a->body);
  CHECK(j["id"] == "org/small");
  CHECK(j["sha"] == default_commit(kSmall));
  std::vector<std::string> files;
  for (const auto& s : j["siblings"]) files.push_back(s["rfilename"]);
  CHECK(files == std::vector<std::string>{"config.json", "model.safetensors", "sub/dir/notes.txt"});
  a = hub.Get("/api/models/org/small/revision/refs%2Fpr%2F1");
  REQUIRE(a);
  CHECK(nlohmann::json::parse(a->body)["sha"] == kPr1Commit);
  a = hub.Get("/api/models/org/small/revision/nope");
  REQUIRE(a);
  CHECK(a->status == 404);
  CHECK(a->get_header_value("X-Error-Code") == "RevisionNotFound");
  a = hub.Get("/api/datasets/org/ds");
  REQUIRE(a);
  CHECK(nlohmann::json::parse(a->body)["id"] == "org/ds");
  a = hub.Get("/api/models/org/nope");
  REQUIRE(a);
  CHECK(a->get_header_value("X-Error-Code") == "RepoNotFound");

  auto log = f.server->log();
  REQUIRE(log.size() == 8);
  CHECK(log[0].repo == kDataset);
  CHECK(log[3].kind == "api");
  CHECK(log[3].repo == kSmall);
}

TEST_CASE("API with ?blobs=true: each file's size and blobId, and lfs{sha256, size, pointerSize} for LFS files, "
          "as the Hub answers huggingface_hub's files_metadata=True",
          "[routes]") {
  Fixture f;
  auto hub = f.hub();
  auto plain = hub.Get("/api/models/org/small");
  REQUIRE(plain);
  const auto plain_doc = nlohmann::json::parse(plain->body);
  for (const auto& s : plain_doc["siblings"]) CHECK(s.size() == 1);  // rfilename only
  auto a = hub.Get("/api/models/org/small/revision/main?blobs=true");
  REQUIRE(a);
  CHECK(a->status == 200);
  INFO(a->body);
  const auto doc = nlohmann::json::parse(a->body);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& s : doc["siblings"]) by_name[s["rfilename"].get<std::string>()] = s;
  REQUIRE(by_name.size() == 3);
  for (const auto& [name, s] : by_name) {
    INFO(name);
    const std::string content = read_file(f.root.file(kSmall, name));
    CHECK(s["size"] == content.size());
    CHECK(s["blobId"].get<std::string>().size() == 40);
    if (name == "model.safetensors") {
      CHECK(s["lfs"]["sha256"] == sha256_hex(content));
      CHECK(s["lfs"]["size"] == content.size());
      CHECK(s["lfs"]["pointerSize"].get<std::uint64_t>() > 0);
    } else {
      CHECK_FALSE(s.contains("lfs"));
      // A git file's blobId is the ETag /resolve/ serves it with.
      auto r = hub.Get(("/org/small/resolve/main/" + name).c_str());
      REQUIRE(r);
      CHECK(r->get_header_value("ETag") == "\"" + s["blobId"].get<std::string>() + "\"");
    }
  }
}

TEST_CASE("CDN: If-Match, signatures, unknown blobs", "[routes]") {
  Fixture f;
  const std::string content = read_file(f.root.file(kSharded, kShard));
  const std::string sha = sha256_hex(content);
  const std::string target = f.cdn_target(kSharded, kShard);
  auto cdn = f.cdn();

  auto r = cdn.Get(target.c_str(), {{"Range", "bytes=0-3"}, {"If-Match", "\"" + sha + "\""}});
  REQUIRE(r);
  CHECK(r->status == 206);
  r = cdn.Get(target.c_str(), {{"If-Match", "\"deadbeef\", \"" + sha + "\""}});
  REQUIRE(r);
  CHECK(r->status == 200);
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-3"}, {"If-Match", "\"deadbeef\""}});
  REQUIRE(r);
  CHECK(r->status == 412);
  CHECK(r->body.empty());

  std::string tampered = target;
  tampered[tampered.size() - 1] = tampered.back() == '0' ? '1' : '0';
  r = cdn.Get(tampered.c_str());
  REQUIRE(r);
  CHECK(r->status == 403);
  r = cdn.Get(("/cdn/" + sha).c_str());
  REQUIRE(r);
  CHECK(r->status == 403);
  // Another blob's signature.
  r = cdn.Get(("/cdn/" + std::string(64, 'a') + target.substr(target.find('?'))).c_str());
  REQUIRE(r);
  CHECK(r->status == 403);

  auto log = f.server->log();
  REQUIRE(log.size() == 7);
  CHECK(log[1].if_match == "\"" + sha + "\"");
  CHECK(log[3].status == 412);
  CHECK(log[4].fault == "bad_signature");
  CHECK(log[5].fault == "bad_signature");
}

TEST_CASE("cdn_url() signs a URL without a resolve request", "[routes]") {
  Fixture f;
  std::string url = f.server->cdn_url(kSmall, "model.safetensors");
  CHECK(url.rfind(f.server->cdn_endpoint() + "/cdn/", 0) == 0);
  auto cdn = f.cdn();
  auto r = cdn.Get(target_of(url).c_str(), range("bytes=0-0"));
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(f.server->cdn_url(kSmall, "missing").empty());
  CHECK(f.server->log().size() == 1);
}

TEST_CASE("every response header is sent once", "[routes]") {
  Fixture f;
  auto& s = *f.server;
  const std::string host = "localhost:" + std::to_string(s.port());
  const std::string target = f.cdn_target(kSharded, kShard);
  std::vector<std::string> requests = {
      raw_get(host, "/org/llama-tiny-sharded/resolve/main/" + kShard, {"Connection: close"}),
      raw_get(host, "/org/small/resolve/main/config.json",
              {"Range: bytes=0-1", "Connection: close"}),
      raw_get(host, "/org/small/resolve/main/none", {"Connection: close"}),
      raw_get("127.0.0.1:" + std::to_string(s.port()), target,
              {"Range: bytes=0-1,3-4", "Connection: close"}),
      raw_get("127.0.0.1:" + std::to_string(s.port()), target,
              {"Range: bytes=5-", "Connection: close"}),
  };
  for (const auto& req : requests) {
    auto raw = raw_request(s.port(), req);
    INFO(raw.headers());
    REQUIRE(raw.closed);
    std::map<std::string, int> count;
    std::istringstream in(raw.headers());
    std::string line;
    std::getline(in, line);  // status line
    while (std::getline(in, line) && line != "\r") {
      std::string name = line.substr(0, line.find(':'));
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      ++count[name];
    }
    CHECK(count["content-type"] == 1);
    CHECK(count["content-length"] == 1);
    for (const auto& [name, n] : count) {
      INFO(name);
      CHECK(n == 1);
    }
  }
}

TEST_CASE("warm_up hashes every file of every repo before any request", "[routes]") {
  Fixture f;
  // 6 files in the sharded repo, 3 in org/small, 2 in the dataset.
  CHECK(f.server->warm_up() == 11);
  // The blobs are known to the CDN without a resolve.
  const std::string sha = sha256_hex(read_file(f.root.file(kDataset, "data/train.safetensors")));
  CHECK(f.server->file_sha256(kDataset, "data/train.safetensors") == sha);
  CHECK(f.server->log().empty());
}

// ---------------------------------------------------------------- the real Hub (issue 9)

TEST_CASE("resolve_cache: a small file answers a relative 307 to /api/resolve-cache/..., which "
          "serves it with a git-sha1 ETag and X-Repo-Commit",
          "[routes][real_hub]") {
  const std::string commit = default_commit(kSmall);
  Options opt;
  opt.resolve_cache = true;
  Fixture f(opt);
  auto& s = *f.server;
  const std::string config = read_file(f.root.file(kSmall, "config.json"));
  const std::string git = git_blob_sha1(config);
  const std::string location = "/api/resolve-cache/models/org/small/" + commit +
                               "/config.json?%2Forg%2Fsmall%2Fresolve%2Fmain%2Fconfig.json=&etag=%22" +
                               git + "%22";
  auto hub = f.hub();
  auto r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 307);
  // cpp-httplib's client percent-decodes Location: the log has the header as sent.
  CHECK(s.log().back().location == location);
  CHECK(r->get_header_value("X-Repo-Commit") == commit);
  CHECK_FALSE(r->has_header("ETag"));
  CHECK(r->body == "Temporary Redirect. Redirecting to " + location);
  auto c = hub.Get(location.c_str());
  REQUIRE(c);
  CHECK(c->status == 200);
  CHECK(c->body == config);
  CHECK(c->get_header_value("ETag") == "\"" + git + "\"");
  CHECK(c->get_header_value("X-Repo-Commit") == commit);
  CHECK(c->get_header_value("Content-Type") == "application/json");
  c = hub.Get(location.c_str(), range("bytes=2-5"));
  REQUIRE(c);
  CHECK(c->status == 206);
  CHECK(c->body == config.substr(2, 4));
  CHECK(c->get_header_value("Content-Range") == "bytes 2-5/" + std::to_string(config.size()));
  // Nested paths, datasets; LFS files still go to the CDN.
  r = hub.Get("/org/small/resolve/main/sub/dir/notes.txt");
  REQUIRE(r);
  CHECK_THAT(r->get_header_value("Location"),
             Catch::StartsWith("/api/resolve-cache/models/org/small/" + commit + "/sub/dir/notes.txt?"));
  CHECK(hub.Get(r->get_header_value("Location").c_str())->body == "hello\n");
  r = hub.Get("/datasets/org/ds/resolve/main/README.md");
  REQUIRE(r);
  CHECK_THAT(r->get_header_value("Location"),
             Catch::StartsWith("/api/resolve-cache/datasets/org/ds/" + default_commit(kDataset) +
                               "/README.md?"));
  CHECK(hub.Get(r->get_header_value("Location").c_str())->body == "# ds\n");
  CHECK(hub.Get("/org/small/resolve/main/model.safetensors")->status == 302);
  // Errors of the cache route, and the access rules of resolve.
  check_error_codes(hub, {
      {"/api/resolve-cache/models/org/small/" + commit + "/missing.json", 404, "EntryNotFound"},
      {"/api/resolve-cache/models/org/small/" + std::string(40, 'e') + "/config.json", 404,
       "RevisionNotFound"},
      {"/api/resolve-cache/models/org/nope/" + commit + "/config.json", 404, "RepoNotFound"},
      {"/api/resolve-cache/models/org/small/" + commit + "/.refs", 404, "EntryNotFound"},
  });
  s.set_token("tok");
  s.set_private_repos({kSmall});
  CHECK(hub.Get(location.c_str())->status == 401);
  CHECK(hub.Get(location.c_str(), {{"Authorization", "Bearer tok"}})->status == 200);
  s.set_gated_repos({kSmall});
  s.set_private_repos({});
  CHECK(hub.Get(location.c_str())->get_header_value("X-Error-Code") == "GatedRepo");

  auto log = s.log();
  REQUIRE(log.size() == 15);
  CHECK(log[0].kind == "resolve");
  CHECK(log[0].status == 307);
  CHECK(log[0].location == location);
  CHECK(log[0].etag.empty());
  CHECK(log[1].kind == "resolve_cache");
  CHECK(log[1].repo == kSmall);
  CHECK(log[1].revision == commit);
  CHECK(log[1].file == "config.json");
  CHECK(log[1].etag == "\"" + git + "\"");
  CHECK(log[2].kind == "resolve_cache");
  CHECK(log[2].content_range == "bytes 2-5/" + std::to_string(config.size()));
  CHECK(summarize(log).resolve_requests == 4);  // resolve_cache is not a resolve
  // Off at run time: served directly again.
  s.set_gated_repos({});
  s.set_resolve_cache(false);
  CHECK(hub.Get("/org/small/resolve/main/config.json")->status == 200);
}

TEST_CASE("renamed repos and legacy ids: a relative 307 to the same path under the new id",
          "[routes][real_hub]") {
  Options opt;
  opt.repo_aliases = {{"gpt2", "org/small"}, {"old/small", "org/small"}};
  Fixture f(opt);
  auto& s = *f.server;
  auto hub = f.hub();
  struct Case {
    std::string from, to;
  };
  const std::vector<Case> cases = {
      {"/gpt2/resolve/main/config.json?download=true", "/org/small/resolve/main/config.json?download=true"},
      {"/gpt2/resolve/refs%2Fpr%2F1/sub/dir/notes.txt", "/org/small/resolve/refs%2Fpr%2F1/sub/dir/notes.txt"},
      {"/old/small/resolve/main/model.safetensors", "/org/small/resolve/main/model.safetensors"},
      {"/api/models/gpt2", "/api/models/org/small"},
      {"/api/models/gpt2/revision/main", "/api/models/org/small/revision/main"},
      {"/api/models/old/small?expand=sha", "/api/models/org/small?expand=sha"},
  };
  for (const auto& c : cases) {
    INFO(c.from);
    auto r = hub.Get(c.from.c_str());
    REQUIRE(r);
    CHECK(r->status == 307);
    CHECK(s.log().back().location == c.to);  // as sent (the client decodes Location)
    CHECK_FALSE(r->has_header("X-Repo-Commit"));
    CHECK_FALSE(r->has_header("X-Error-Code"));
    CHECK(hub.Get(c.to.c_str())->status / 100 != 4);  // the new path answers
  }
  auto log = s.log();
  REQUIRE(log.size() == 2 * cases.size());
  CHECK(log[0].kind == "resolve");
  CHECK(log[0].repo == "gpt2");
  CHECK(log[0].status == 307);
  CHECK(log[0].location == cases[0].to);
  CHECK(log[6].kind == "api");
  CHECK(log[6].repo == "gpt2");
  s.clear_log();

  // Legacy ids are routed without an alias too: the Hub's RepoNotFound. An org's directory is
  // no repo.
  for (const char* target : {"/bert-base-uncased/resolve/main/config.json", "/org/resolve/main/config.json",
                             "/api/models/bert-base-uncased"}) {
    INFO(target);
    auto r = hub.Get(target);
    REQUIRE(r);
    CHECK(r->status == 404);
    CHECK(r->get_header_value("X-Error-Code") == "RepoNotFound");
  }
  CHECK(s.log()[0].kind == "resolve");
  CHECK(s.log()[0].repo == "bert-base-uncased");

  // Datasets, removal, /_admin/set.
  s.set_repo_alias("datasets/squad", "datasets/org/ds");
  auto r = hub.Get("/datasets/squad/resolve/main/README.md");
  REQUIRE(r);
  CHECK(r->get_header_value("Location") == "/datasets/org/ds/resolve/main/README.md");
  CHECK(hub.Get("/api/datasets/squad")->get_header_value("Location") == "/api/datasets/org/ds");
  s.set_repo_alias("gpt2", "");
  CHECK(hub.Get("/gpt2/resolve/main/config.json")->get_header_value("X-Error-Code") == "RepoNotFound");
  REQUIRE(hub.Get("/_admin/set?alias=gpt2&to=org%2Fllama-tiny-sharded")->status == 200);
  CHECK(hub.Get("/gpt2/resolve/main/config.json")->get_header_value("Location") ==
        "/org/llama-tiny-sharded/resolve/main/config.json");
  // Malformed aliases are refused, nothing changes.
  CHECK_THROWS_AS(s.set_repo_alias("gpt2", "datasets/org/ds"), std::invalid_argument);
  CHECK_THROWS_AS(s.set_repo_alias("gpt2", "noorg"), std::invalid_argument);
  CHECK_THROWS_AS(s.set_repo_alias("a/b/c", "org/small"), std::invalid_argument);
  CHECK_THROWS_AS(s.set_repo_alias("../x", "org/small"), std::invalid_argument);
  CHECK_THROWS_AS(s.set_repo_aliases({{"ok", "org/small"}, {"bad", "x"}}), std::invalid_argument);
  CHECK(hub.Get("/_admin/set?alias=gpt2&to=nope")->status == 400);
  CHECK(hub.Get("/gpt2/resolve/main/config.json")->get_header_value("Location") ==
        "/org/llama-tiny-sharded/resolve/main/config.json");
  Options bad;
  bad.repo_aliases = {{"gpt2", "gpt2"}};
  CHECK_THROWS_AS(HubServer(bad), std::invalid_argument);
}

TEST_CASE("hub_errors: every access error as the Hub sends it (status, X-Error-Code, X-Error-Message, "
          "JSON body)",
          "[routes][real_hub]") {
  Options opt;
  opt.hub_errors = true;
  opt.token = "hf_full";
  opt.other_tokens = {"hf_other"};
  opt.gated_repos = {kSharded};
  opt.private_repos = {kDataset};
  opt.disabled_repos = {"org/off"};
  Fixture f(opt);
  fs::create_directories(f.root.path() / "org" / "off");
  std::ofstream(f.root.path() / "org" / "off" / "config.json") << "{}\n";
  const std::string anonymous;
  const std::string full = "Bearer hf_full", other = "Bearer hf_other", bad = "Bearer hf_bad";
  const std::string gated_401 =
      "Access to model org/llama-tiny-sharded is restricted. You must have access to it and be "
      "authenticated to access it. Please log in.";
  const std::string gated_403 =
      "Access to model org/llama-tiny-sharded is restricted and you are not in the authorized "
      "list. Visit https://huggingface.co/org/llama-tiny-sharded to ask for access.";
  const std::string ds_cache = "/api/resolve-cache/datasets/org/ds/" + default_commit(kDataset) + "/README.md";
  struct Case {
    std::string name, target, auth;
    int status;
    std::string code, message;
  };
  const std::vector<Case> cases = {
      {"unknown repo, anonymous", "/org/nope/resolve/main/config.json", anonymous, 401, "RepoNotFound",
       "Invalid username or password."},
      {"unknown repo, valid token", "/org/nope/resolve/main/config.json", other, 404, "RepoNotFound",
       "Repository not found"},
      {"unknown repo, full token", "/api/models/org/nope", full, 404, "RepoNotFound",
       "Repository not found"},
      {"unknown repo (api), anonymous", "/api/models/org/nope", anonymous, 401, "RepoNotFound",
       "Invalid username or password."},
      {"invalid token, public repo", "/org/small/resolve/main/config.json", bad, 401, "",
       "Invalid credentials in Authorization header"},
      {"invalid token, unknown repo", "/org/nope/resolve/main/config.json", bad, 401, "",
       "Invalid credentials in Authorization header"},
      {"invalid token, api", "/api/models/org/small", "Basic eDp5", 401, "",
       "Invalid credentials in Authorization header"},
      {"private, anonymous", "/datasets/org/ds/resolve/main/README.md", anonymous, 401, "RepoNotFound",
       "Invalid username or password."},
      {"private, valid token", "/datasets/org/ds/resolve/main/README.md", other, 404, "RepoNotFound",
       "Repository not found"},
      {"private, full token", "/datasets/org/ds/resolve/main/README.md", full, 200, "", ""},
      {"private resolve-cache, anonymous", ds_cache, anonymous, 401, "RepoNotFound",
       "Invalid username or password."},
      {"private resolve-cache, full token", ds_cache, full, 200, "", ""},
      {"gated, anonymous", "/org/llama-tiny-sharded/resolve/main/config.json", anonymous, 401, "GatedRepo",
       gated_401},
      {"gated, valid token", "/org/llama-tiny-sharded/resolve/main/config.json", other, 403, "GatedRepo",
       gated_403},
      {"gated, full token", "/org/llama-tiny-sharded/resolve/main/config.json", full, 200, "", ""},
      {"gated metadata is public", "/api/models/org/llama-tiny-sharded", anonymous, 200, "", ""},
      {"disabled, anonymous", "/org/off/resolve/main/config.json", anonymous, 403, "",
       "Access to this resource is disabled."},
      {"disabled, full token", "/api/models/org/off", full, 403, "", "Access to this resource is disabled."},
      {"revision", "/org/small/resolve/v9/config.json", anonymous, 404, "RevisionNotFound",
       "Invalid rev id: v9"},
      {"entry", "/org/small/resolve/main/nope.json", other, 404, "EntryNotFound",
       "nope.json does not exist on \"main\""},
  };
  auto hub = f.hub();
  for (const auto& c : cases) {
    INFO(c.name << ": " << c.target);
    httplib::Headers h;
    if (!c.auth.empty()) h.emplace("Authorization", c.auth);
    auto r = hub.Get(c.target.c_str(), h);
    REQUIRE(r);
    CHECK(r->status == c.status);
    CHECK(r->get_header_value("X-Error-Code") == c.code);
    CHECK(r->has_header("X-Error-Code") == !c.code.empty());
    CHECK(r->get_header_value("X-Error-Message") == c.message);
    if (c.status >= 400) {
      CHECK(r->get_header_value("Content-Type") == "application/json");
      CHECK(r->body == nlohmann::json{{"error", c.message}}.dump());
    }
  }
  // EntryNotFound names the commit.
  CHECK(hub.Get("/org/small/resolve/main/nope.json")->get_header_value("X-Repo-Commit") ==
        default_commit(kSmall));
  auto gated = nlohmann::json::parse(hub.Get("/api/models/org/llama-tiny-sharded")->body);
  CHECK(gated["gated"] == "manual");
  auto log = f.server->log();
  REQUIRE(log.size() == cases.size() + 2);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].name);
    CHECK(log[i].status == cases[i].status);
    CHECK(log[i].error_code == cases[i].code);
    CHECK(log[i].authorization == !cases[i].auth.empty());
  }
  // Off at run time: the test server's older answers (an unknown repo is a 404; a bad token on a
  // public repo is ignored).
  f.server->set_hub_errors(false);
  CHECK(hub.Get("/org/nope/resolve/main/config.json")->status == 404);
  CHECK(hub.Get("/org/small/resolve/main/config.json", {{"Authorization", bad}})->status == 200);
  REQUIRE(hub.Get("/_admin/set?hub_errors=1&other_tokens=hf_x,hf_y")->status == 200);
  CHECK(hub.Get("/org/nope/resolve/main/config.json", {{"Authorization", "Bearer hf_y"}})->status == 404);
  CHECK(hub.Get("/org/nope/resolve/main/config.json", {{"Authorization", other}})->status == 401);
}
