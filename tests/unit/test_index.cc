// SPDX-License-Identifier: Apache-2.0
// `*.safetensors.index.json`: parse_index and the shard-name safety rules.
#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/index_internal.h"
#include "tensorfetch/format.hpp"
#include "tensorfetch/index.hpp"
#include "test_util.hpp"

namespace tf = tensorfetch;
using tf::ErrorCode;
using tftest::to_bytes;

namespace {

tf::Result<tf::ShardIndex> parse(std::string_view json) {
  const auto bytes = to_bytes(json);
  return tf::parse_index(bytes);
}

using WeightMap = std::vector<std::pair<std::string, std::size_t>>;

}  // namespace

TEST_CASE("index: a valid index gives sorted unique shards, a sorted weight_map and metadata",
          "[index]") {
  const std::string json = R"({
    "metadata": {"total_size": 123456, "total_parameters": 61728, "format": "pt", "n": 7,
                 "flag": true},
    "weight_map": {
      "model.layers.1.w": "model-00002-of-00002.safetensors",
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "model.embed.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.w": "model-00001-of-00002.safetensors"
    }
  })";
  auto r = parse(json);
  if (!r) FAIL("parse_index failed: " << r.error().message);
  CHECK(r->shards == std::vector<std::string>{"model-00001-of-00002.safetensors",
                                              "model-00002-of-00002.safetensors"});
  CHECK(r->weight_map == WeightMap{{"lm_head.weight", 1},
                                   {"model.embed.weight", 0},
                                   {"model.layers.0.w", 0},
                                   {"model.layers.1.w", 1}});
  REQUIRE(r->total_size.has_value());
  CHECK(*r->total_size == 123456u);
  REQUIRE(r->total_parameters.has_value());
  CHECK(*r->total_parameters == 61728u);
  // Other scalar metadata entries are kept; numbers and booleans as their JSON text.
  CHECK(r->extra_metadata.count("total_size") == 0u);
  CHECK(r->extra_metadata.count("total_parameters") == 0u);
  CHECK(r->extra_metadata.at("format") == "pt");
  CHECK(r->extra_metadata.at("n") == "7");
  CHECK(r->extra_metadata.at("flag") == "true");
}

TEST_CASE("index: metadata is optional; total_size and total_parameters independently so",
          "[index]") {
  SECTION("no metadata") {
    auto r = parse(R"({"weight_map": {"a": "model.safetensors"}})");
    REQUIRE(r.has_value());
    CHECK_FALSE(r->total_size.has_value());
    CHECK_FALSE(r->total_parameters.has_value());
    CHECK(r->extra_metadata.empty());
    CHECK(r->shards == std::vector<std::string>{"model.safetensors"});
    CHECK(r->weight_map == WeightMap{{"a", 0}});
  }
  SECTION("total_size only") {
    auto r = parse(R"({"metadata": {"total_size": 8}, "weight_map": {"a": "s.safetensors"}})");
    REQUIRE(r.has_value());
    REQUIRE(r->total_size.has_value());
    CHECK(*r->total_size == 8u);
    CHECK_FALSE(r->total_parameters.has_value());
  }
  SECTION("total_parameters only, weight_map before metadata") {
    auto r = parse(R"({"weight_map": {"a": "s.safetensors"}, "metadata": {"total_parameters": 4}})");
    REQUIRE(r.has_value());
    CHECK_FALSE(r->total_size.has_value());
    REQUIRE(r->total_parameters.has_value());
    CHECK(*r->total_parameters == 4u);
  }
  SECTION("a total_size above 2^53 is read exactly") {
    auto r = parse(
        R"({"metadata": {"total_size": 9007199254740993}, "weight_map": {"a": "s.safetensors"}})");
    REQUIRE(r.has_value());
    REQUIRE(r->total_size.has_value());
    CHECK(*r->total_size == 9007199254740993u);
  }
}

TEST_CASE("index: unknown top-level keys are ignored", "[index]") {
  auto r = parse(R"({"version": 2, "extra": {"nested": [1, {"x": null}]}, "note": "hi",
                     "weight_map": {"a": "dir/s.safetensors"}})");
  REQUIRE(r.has_value());
  CHECK(r->shards == std::vector<std::string>{"dir/s.safetensors"});
  CHECK(r->weight_map == WeightMap{{"a", 0}});
}

TEST_CASE("index: the reference llama-tiny-sharded index parses and agrees with MANIFEST.json",
          "[index][reference]") {
  const auto dir = tftest::reference_dir();
  if (!dir) {
    WARN("TENSORFETCH_REFERENCE_DIR is unset or has no MANIFEST.json; reference index skipped");
    return;
  }
  const auto text = tftest::try_read_file(*dir / "llama-tiny-sharded" / "model.safetensors.index.json");
  REQUIRE(text.has_value());
  auto r = parse(*text);
  if (!r) FAIL("parse_index failed: " << r.error().message);
  CHECK(r->shards == std::vector<std::string>{"model-00001-of-00003.safetensors",
                                              "model-00002-of-00003.safetensors",
                                              "model-00003-of-00003.safetensors"});
  REQUIRE(r->total_parameters.has_value());
  CHECK(*r->total_parameters == 412480u);
  REQUIRE(r->total_size.has_value());
  CHECK(*r->total_size == 824960u);

  const auto manifest = nlohmann::json::parse(*tftest::try_read_file(*dir / "MANIFEST.json"));
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;
  for (const auto& shard : r->shards) {
    const auto& info = manifest.at("llama-tiny-sharded/" + shard);
    for (const auto& [name, t] : info.at("tensors").items()) {
      INFO("tensor " << name << " in " << shard);
      ++tensors;
      bytes += t.at("nbytes").get<std::uint64_t>();
      auto it = std::lower_bound(r->weight_map.begin(), r->weight_map.end(),
                                 std::pair<std::string, std::size_t>{name, 0},
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
      REQUIRE(it != r->weight_map.end());
      CHECK(it->first == name);
      REQUIRE(it->second < r->shards.size());
      CHECK(r->shards[it->second] == shard);
    }
  }
  CHECK(r->weight_map.size() == tensors);
  CHECK(bytes == *r->total_size);
  // Sorted by name, names unique.
  for (std::size_t i = 1; i < r->weight_map.size(); ++i) {
    CHECK(r->weight_map[i - 1].first < r->weight_map[i].first);
  }
}

TEST_CASE("index: a missing or non-object weight_map is refused (InvalidIndex)", "[index]") {
  CHECK_ERROR(parse(R"({"metadata": {"total_size": 0}})"), ErrorCode::InvalidIndex, "weight_map");
  CHECK_ERROR(parse(R"({})"), ErrorCode::InvalidIndex, "weight_map");
  CHECK_ERROR(parse(R"({"Weight_Map": {"a": "s.safetensors"}})"), ErrorCode::InvalidIndex,
              "weight_map");
  for (const char* value : {"[]", "[\"s.safetensors\"]", "\"s.safetensors\"", "1", "null", "true"}) {
    INFO("weight_map: " << value);
    CHECK_ERROR(parse(std::string(R"({"weight_map": )") + value + "}"), ErrorCode::InvalidIndex,
                "weight_map");
  }
}

TEST_CASE("index: a shard name that is not a string is refused (InvalidIndex) naming the tensor",
          "[index]") {
  for (const char* value : {"1", "null", "true", "{}", "[\"s.safetensors\"]"}) {
    INFO("shard value: " << value);
    CHECK_ERROR(parse(std::string(R"({"weight_map": {"ok": "s.safetensors", "bad.tensor": )") +
                      value + "}}"),
                ErrorCode::InvalidIndex, "bad.tensor");
  }
}

TEST_CASE("index: malformed JSON, a non-object root or a non-object metadata is refused",
          "[index]") {
  for (const char* json : {"", "{", "{\"weight_map\": {\"a\": \"s\",}}", "[]", "\"x\"", "null",
                           "{\"weight_map\": {\"a\": \"s.safetensors\"}} x",
                           "{\"weight_map\": {\"a\": \"s\xff.safetensors\"}}"}) {
    INFO("index: " << json);
    CHECK_ERROR(parse(json), ErrorCode::InvalidIndex);
  }
  for (const char* md : {"1", "\"x\"", "[]"}) {
    INFO("metadata: " << md);
    CHECK_ERROR(parse(std::string(R"({"metadata": )") + md +
                      R"(, "weight_map": {"a": "s.safetensors"}})"),
                ErrorCode::InvalidIndex, "metadata");
  }
}

TEST_CASE("index: duplicate keys anywhere are refused, naming the key", "[index][duplicate]") {
  // index.hpp does not pin the code: DuplicateKey (the same key twice in one object) and
  // InvalidIndex (not a valid index) both describe it; both exit with 2.
  const std::vector<std::tuple<const char*, const char*, const char*>> cases = {
      {"the same tensor twice in weight_map",
       R"({"weight_map": {"dup.tensor": "a.safetensors", "dup.tensor": "b.safetensors"}})",
       "dup.tensor"},
      {"the same tensor twice with the same shard",
       R"({"weight_map": {"dup.tensor": "a.safetensors", "dup.tensor": "a.safetensors"}})",
       "dup.tensor"},
      {"weight_map twice",
       R"({"weight_map": {"x": "a.safetensors"}, "weight_map": {"y": "a.safetensors"}})",
       "weight_map"},
      {"metadata twice",
       R"({"metadata": {}, "weight_map": {"x": "a.safetensors"}, "metadata": {}})", "metadata"},
      {"total_size twice in metadata",
       R"({"metadata": {"total_size": 1, "total_size": 2}, "weight_map": {"x": "a.safetensors"}})",
       "total_size"},
      {"a duplicate key inside an unknown top-level field",
       R"({"extra": {"dup_k": 1, "dup_k": 2}, "weight_map": {"x": "a.safetensors"}})", "dup_k"},
  };
  for (const auto& [what, json, key] : cases) {
    INFO("case: " << what);
    auto r = parse(json);
    CHECK_ERROR_IN(r, ErrorCode::DuplicateKey, ErrorCode::InvalidIndex);
    if (!r) CHECK_THAT(r.error().message, Catch::Matchers::Contains(key));
  }
}

TEST_CASE("index: an unsafe shard name in weight_map is refused (UnsafeShardName)", "[index]") {
  for (const char* shard : {"../model.safetensors", "/etc/passwd", "a/../../b.safetensors",
                            "https://evil.example/x.safetensors", ""}) {
    INFO("shard: " << shard);
    CHECK_ERROR(parse(std::string(R"({"weight_map": {"w": ")") + shard + "\"}}"),
                ErrorCode::UnsafeShardName);
  }
  CHECK_ERROR(parse(R"({"weight_map": {"w": "ok.safetensors", "v": "../up.safetensors"}})"),
              ErrorCode::UnsafeShardName, "../up.safetensors");
  // A JSON escape that decodes to a separator or dot-segment is checked after decoding.
  CHECK_ERROR(parse(R"({"weight_map": {"w": "\u002e\u002e/x.safetensors"}})"),
              ErrorCode::UnsafeShardName);
  CHECK_ERROR(parse(R"({"weight_map": {"w": "a\\b.safetensors"}})"), ErrorCode::UnsafeShardName);
}

TEST_CASE("shard names: safe relative paths are accepted", "[index][shard-name]") {
  for (const char* name : {"model-00001-of-00003.safetensors",
                           "transformer/diffusion_pytorch_model.safetensors",
                           "model.safetensors", "unet/diffusion_pytorch_model.fp16.safetensors",
                           "a..b.safetensors", "..hidden.safetensors", "dir.v2/x.safetensors",
                           "a/b/c/d.safetensors"}) {
    INFO("shard name: " << name);
    auto r = tf::check_shard_name(name);
    if (!r) FAIL_CHECK("refused: " << r.error().message);
  }
}

TEST_CASE("shard names: names that could escape the directory are refused (UnsafeShardName)",
          "[index][shard-name]") {
  using namespace std::string_literals;
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"empty", ""},
      {"absolute path", "/abs"},
      {"absolute path to a shard", "/models/x.safetensors"},
      {"dot-dot", ".."},
      {"dot", "."},
      {"dot-dot in the middle", "a/../b"},
      {"dot-dot at the end", "a/.."},
      {"dot segment first", "./x"},
      {"dot segment in the middle", "a/./x"},
      {"percent-encoded dot-dot (lower case)", "%2e%2e/x"},
      {"percent-encoded dot-dot (mixed)", "%2E./x"},
      {"percent-encoded dot-dot (second half)", ".%2e/x"},
      {"percent-encoded single dot", "%2e/x"},
      {"percent-encoded slash", "a%2fb"},
      {"percent-encoded slash (upper case)", "a%2Fb"},
      {"percent-encoded backslash", "a%5cb"},
      {"backslash", "a\\b"},
      {"backslash dot-dot", "..\\x"},
      {"control character", "a\x01" "b"},
      {"newline", "a\nb"},
      {"NUL byte", "a\0b"s},
      {"DEL", "a\x7f" "b"},
      {"URL scheme", "http://x"},
      {"https URL", "https://host/x.safetensors"},
      {"drive letter", "C:foo"},
      {"drive letter with backslash", "C:\\foo"},
      {"scheme-like first segment", "file:x.safetensors"},
      {"empty segment", "a//b"},
      {"trailing slash", "a/"},
  };
  for (const auto& [what, name] : cases) {
    INFO("case: " << what);
    CHECK_ERROR(tf::check_shard_name(name), ErrorCode::UnsafeShardName);
  }
  // The message names the shard when it is printable.
  CHECK_ERROR(tf::check_shard_name("a/../secret.safetensors"), ErrorCode::UnsafeShardName,
              "a/../secret.safetensors");
}

TEST_CASE("index: a shard's first header read is estimated from the names the index maps to it", "[index][estimate]") {
  using tf::detail::estimate_shard_header_sizes;
  struct Row {
    const char* what;
    std::vector<std::pair<std::size_t, std::size_t>> tensors;  // (shard, name length) per tensor
    std::vector<std::uint64_t> want;
  };
  // (8 + sum(name + 160) + 8192) * 5 / 4, rounded up to 4 KiB, at least 16 KiB.
  const std::vector<Row> rows = {
      {"one short name: the floor", {{0, 1}}, {16 << 10}},
      {"shards of 1 and 20 tensors", {{0, 10}, {1, 40}, {1, 40}, {1, 40}, {1, 40}, {1, 40}, {1, 40}, {1, 40},
                                      {1, 40}, {1, 40}, {1, 40}, {1, 40}, {1, 40}, {1, 40}, {1, 40}, {1, 40},
                                      {1, 40}, {1, 40}, {1, 40}, {1, 40}, {1, 40}},
       {16 << 10, 16 << 10}},
      {"200 tensors of 60-byte names: (8 + 44000 + 8192) * 1.25 = 65250 -> 65536", {}, {65536}},
  };
  for (auto row : rows) {
    INFO(row.what);
    if (row.tensors.empty()) row.tensors.assign(200, {0, 60});
    tf::ShardIndex index;
    for (std::size_t i = 0; i < row.want.size(); ++i) index.shards.push_back("s" + std::to_string(i));
    for (std::size_t k = 0; k < row.tensors.size(); ++k) {
      std::string name = std::to_string(k);
      name.resize(row.tensors[k].second, 'x');
      index.weight_map.emplace_back(name, row.tensors[k].first);
    }
    CHECK(estimate_shard_header_sizes(index) == row.want);
  }
}

TEST_CASE("index: the estimate holds the whole header of shards as writers make them (long names, 4-d shapes, "
          "large offsets, metadata)", "[index][estimate]") {
  // The header a safetensors writer makes for `n` tensors named `prefix.K.suffix`, with shapes and
  // offsets as large as real checkpoints have (up to 405B parameters, 4-d, 12-digit offsets).
  for (const std::size_t n : {1u, 7u, 100u, 1000u, 5000u}) {
    INFO(n << " tensors");
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}};
    tf::ShardIndex index;
    index.shards = {"model-00001-of-00001.safetensors"};
    std::uint64_t offset = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const std::string name = "model.layers." + std::to_string(k) + ".block_sparse_moe.experts.127.w2.weight";
      const std::uint64_t bytes = 16384ull * 53248 * 2;
      header[name] = {{"dtype", "F8_E4M3FNUZ"},
                      {"shape", {16384, 53248, 1024, 4096}},
                      {"data_offsets", {offset + 400'000'000'000ull, offset + bytes + 400'000'000'000ull}}};
      offset += bytes;
      index.weight_map.emplace_back(name, 0);
    }
    const std::uint64_t actual = 8 + header.dump().size();
    const auto estimate = tf::detail::estimate_shard_header_sizes(index);
    REQUIRE(estimate.size() == 1);
    CHECK(estimate[0] >= actual);
  }
}
