// SPDX-License-Identifier: Apache-2.0
// Locations and resolve URLs (lib/hub, private): forms, revisions, encoding, refusals.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "hub/location.h"
#include "net/url.h"

using namespace tensorfetch;
using namespace tensorfetch::detail;

TEST_CASE("location: hf://ORG/NAME[@REV][/PATH], datasets, bare ORG/NAME, URLs and local paths", "[location]") {
  auto a = parse_location("hf://org/name", false);
  REQUIRE(a);
  CHECK(a->kind == LocationKind::Hub);
  CHECK(a->hub.repo_id == "org/name");
  CHECK(a->hub.revision == "main");
  CHECK_FALSE(a->hub.path);

  auto b = parse_location("hf://org/name@v1.0/sub/model.safetensors", false);
  REQUIRE(b);
  CHECK(b->hub.revision == "v1.0");
  CHECK(b->hub.path == "sub/model.safetensors");

  auto pr = parse_location("hf://org/name@refs/pr/12/model.safetensors", false);
  REQUIRE(pr);
  CHECK(pr->hub.revision == "refs/pr/12");
  CHECK(pr->hub.path == "model.safetensors");
  auto encoded = parse_location("hf://org/name@refs%2Fpr%2F12", false);
  REQUIRE(encoded);
  CHECK(encoded->hub.revision == "refs/pr/12");

  auto d = parse_location("hf://datasets/org/data", false);
  REQUIRE(d);
  CHECK(d->hub.dataset);

  auto bare = parse_location("org/name", false);
  REQUIRE(bare);
  CHECK(bare->kind == LocationKind::Hub);
  auto local = parse_location("org/name", true);  // exists on disk: a path
  REQUIRE(local);
  CHECK(local->kind == LocationKind::Local);
  CHECK(parse_location("./model", false)->kind == LocationKind::Local);
  CHECK(parse_location("https://example.org/x.safetensors", false)->kind == LocationKind::Http);
  // s3:// is the store layer's (store/s3.h parses bucket and key), even where a path exists.
  auto s3 = parse_location("s3://bucket/models/", true);
  REQUIRE(s3);
  CHECK(s3->kind == LocationKind::S3);
  CHECK(s3->url == "s3://bucket/models/");
}

TEST_CASE("location: invalid repo ids, empty revisions and unsafe paths are refused naming the part", "[location]") {
  for (const char* bad : {"hf://", "hf://@main", "hf://na me", "hf://..@main", "hf://org/na me", "hf://../x", "hf://org/name@", "hf://org/name/../x",
                          "hf://org/name/%2e%2e/x", "https://"}) {
    auto r = parse_location(bad, false);
    INFO(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ErrorCode::InvalidArgument);
    CHECK_THAT(r.error().message, Catch::Contains("location"));
  }
}

TEST_CASE("location: resolve URLs encode the revision whole and each path segment", "[location]") {
  HubRef repo{false, "org/name", "main", std::nullopt};
  CHECK(resolve_url("https://hf.co/", repo, "refs/pr/1", "a b/model.safetensors") ==
        "https://hf.co/org/name/resolve/refs%2Fpr%2F1/a%20b/model.safetensors");
  HubRef data{true, "org/d", "main", std::nullopt};
  CHECK(resolve_url("http://h:1", data, "main", "x.safetensors") == "http://h:1/datasets/org/d/resolve/main/x.safetensors");
  CHECK(sibling_url("https://h/a/b/model.safetensors.index.json?sig=1", "model-00001.safetensors") ==
        "https://h/a/b/model-00001.safetensors");
  CHECK(url_authority("https://User@Example.ORG:8443/x?y") == "https://example.org:8443");
  CHECK(url_authority("http://localhost:123") == "http://localhost:123");
}

// A revision becomes part of a path (refs/REV in the Hugging Face cache) and of every resolve
// URL: git's ref-name rules are applied when the location is parsed, before any request.
TEST_CASE("location: revisions follow git's ref-name rules (checked at parse time, after percent-decoding)",
          "[location][revision]") {
  struct Row {
    const char* revision;  // as written after '@' (percent-encoded where noted)
    const char* why;       // a word of the refusal; nullptr: valid
  };
  const std::vector<Row> rows = {
      {"main", nullptr},
      {"v1.0", nullptr},
      {"release-2026_01", nullptr},
      {"0123456789abcdef0123456789abcdef01234567", nullptr},
      {"refs/pr/1", nullptr},
      {"refs/convert/parquet", nullptr},
      {"refs%2Fpr%2F7", nullptr},
      {"feature%2Fx", nullptr},
      {"..", ".."},
      {"..%2F..%2F..%2Ftmp%2Fx", ".."},
      {"a..b", ".."},
      {".hidden", "starts with '.'"},
      {"refs/pr/.x", "starts with '.'"},
      {"feature%2F.x", "starts with '.'"},
      {"x.lock", ".lock"},
      {"refs/pr/1.lock", ".lock"},
      {"feature%2F", "ends with '/'"},
      {"feature%2F%2Fx", "empty"},
      {"%2Fabs", "empty"},
      {"x.", "ends with '.'"},
      {"a%20b", "' '"},
      {"a~1", "'~'"},
      {"a^", "'^'"},
      {"a:b", "':'"},
      {"a%3F", "'?'"},
      {"a*", "'*'"},
      {"a[0]", "'['"},
      {"a%5Cb", "'\\'"},
      {"a@{1}", "@{"},
      {"@", "'@'"},
      {"a%00b", "control character"},
      {"a%0Ab", "control character"},
      {"a%7Fb", "control character"},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION("@" << row.revision) {
      const std::string text = std::string("hf://org/name@") + row.revision;
      auto r = parse_location(text, false);
      if (row.why == nullptr) {
        INFO((r ? std::string() : r.error().message));
        REQUIRE(r);
        CHECK(check_revision(r->hub.revision));
      } else {
        REQUIRE_FALSE(r);
        INFO(r.error().message);
        CHECK(r.error().code == ErrorCode::InvalidArgument);
        CHECK_THAT(r.error().message, Catch::Contains("revision") && Catch::Contains(row.why));
        // Control characters are escaped in the message.
        CHECK(r.error().message.find('\n') == std::string::npos);
        CHECK(r.error().message.find('\0') == std::string::npos);
      }
    }
  }
  CHECK_FALSE(check_revision(""));
  CHECK_FALSE(check_revision(std::string(256, 'a')));
  CHECK(check_revision(std::string(255, 'a')));
}

TEST_CASE("location: legacy repo ids without an organization (hf://gpt2, bare gpt2)", "[location][legacy]") {
  auto a = parse_location("hf://gpt2", false);
  REQUIRE(a);
  CHECK(a->kind == LocationKind::Hub);
  CHECK(a->hub.repo_id == "gpt2");
  CHECK(a->hub.revision == "main");
  CHECK_FALSE(a->hub.path);
  auto b = parse_location("hf://bert-base-uncased@0a6aa9128b6194f4f3c4db429b6cb4891cdb421b/model.safetensors", false);
  REQUIRE(b);
  CHECK(b->hub.repo_id == "bert-base-uncased");
  CHECK(b->hub.revision == "0a6aa9128b6194f4f3c4db429b6cb4891cdb421b");
  CHECK(b->hub.path == "model.safetensors");
  auto d = parse_location("hf://datasets/squad", false);
  REQUIRE(d);
  CHECK(d->hub.dataset);
  CHECK(d->hub.repo_id == "squad");
  CHECK(resolve_url("https://hf.co", a->hub, "main", "config.json") == "https://hf.co/gpt2/resolve/main/config.json");
  // Bare: a single word is a legacy id when nothing of that name exists here...
  auto bare = parse_location("gpt2", false);
  REQUIRE(bare);
  CHECK(bare->kind == LocationKind::Hub);
  CHECK(bare->hub.repo_id == "gpt2");
  CHECK(parse_location("gpt2@main", false)->kind == LocationKind::Hub);
  // ...but a file-like word stays a local path, and something on disk is always local.
  for (const char* local : {"model.safetensors", "model.safetensors.index.json", "weights.bin", "x.gguf"}) {
    INFO(local);
    CHECK(parse_location(local, false)->kind == LocationKind::Local);
  }
  CHECK(parse_location("gpt2", true)->kind == LocationKind::Local);
  // With a path, the first word is an organization.
  auto org = parse_location("hf://gpt2/model.safetensors", false);
  REQUIRE(org);
  CHECK(org->hub.repo_id == "gpt2/model.safetensors");
}
