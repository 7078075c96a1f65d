// SPDX-License-Identifier: Apache-2.0
// Locations and resolve URLs (lib/hub, private): forms, revisions, encoding, refusals.
#include <catch2/catch.hpp>

#include "hub/location.h"

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
}

TEST_CASE("location: invalid repo ids, empty revisions and unsafe paths are refused naming the part", "[location]") {
  for (const char* bad : {"hf://org", "hf://org/na me", "hf://../x", "hf://org/name@", "hf://org/name/../x",
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
