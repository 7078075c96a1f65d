// SPDX-License-Identifier: Apache-2.0
// Every JSON document the library reads is refused past 128 levels of nesting (the reference
// parser's limit, serde_json's recursion limit), with a message naming the limit, and never by
// a crash: at 129 levels and at 100,000 (a 200 KB document that once overflowed the stack of
// the header parser's recursive walk). 128 levels are still read. One section per entry point:
// the safetensors header (every place a nested value can sit), the index, config.json (for
// --tp and for parameter counts), --tp-rules, and the nlohmann reader of the cache's meta.json
// and the snapshot manifests (which the cluster's manifest over MPI is too).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "format/json_depth.h"
#include "tensorfetch/format.hpp"
#include "tensorfetch/index.hpp"
#include "tensorfetch/parameters.hpp"
#include "tensorfetch/tp.hpp"
#include "test_util.hpp"

namespace tf = tensorfetch;
using tf::ErrorCode;
using tftest::le64;
using tftest::to_bytes;

namespace {

/// `levels` arrays nested in one another around `inner`: `[[[1]]]` is nested(3, "1").
std::string nested(std::size_t levels, std::string_view inner = "1") {
  return std::string(levels, '[') + std::string(inner) + std::string(levels, ']');
}

/// Parses `json` as a header of a file with `data` bytes after it.
tf::Result<tf::Header> header(const std::string& json, std::size_t data = 0) {
  const std::string file = le64(json.size()) + json;
  return tf::parse_file_prefix(to_bytes(file), file.size() + data);
}

constexpr std::string_view kLimitWords = "deeper than 128 levels";

}  // namespace

TEST_CASE("json depth: a safetensors header is read to 128 levels and refused past them (HeaderJson, naming the "
          "limit and the byte)",
          "[json][depth][header]") {
  // Where a nested value can sit, with the levels the header itself adds above it: the root
  // object is level 1, a tensor entry or __metadata__ level 2, a field of either level 3.
  struct Place {
    const char* name;
    std::size_t above;                                  // levels enclosing the nested arrays
    std::string (*make)(const std::string& arrays);     // the header holding them
    std::optional<ErrorCode> at_limit;                  // what 128 levels give (none: accepted)
  };
  const Place places[] = {
      {"an unknown field of a tensor entry", 2,
       [](const std::string& a) {
         return R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"extra":)" + a + "}}";
       },
       std::nullopt},
      {"a __metadata__ value", 2, [](const std::string& a) { return R"({"__metadata__":{"k":)" + a + "}}"; },
       ErrorCode::InvalidMetadata},
      {"__metadata__ itself", 1, [](const std::string& a) { return R"({"__metadata__":)" + a + "}"; },
       ErrorCode::InvalidMetadata},
      {"a tensor entry itself", 1, [](const std::string& a) { return R"({"t":)" + a + "}"; }, ErrorCode::InvalidEntry},
      {"a dtype", 2,
       [](const std::string& a) { return R"({"t":{"dtype":)" + a + R"(,"shape":[0],"data_offsets":[0,0]}})"; },
       ErrorCode::InvalidDtype},
      {"an element of a shape", 3,
       [](const std::string& a) { return R"({"t":{"dtype":"U8","shape":[)" + a + R"(],"data_offsets":[0,0]}})"; },
       ErrorCode::InvalidShape},
      {"data_offsets", 2,
       [](const std::string& a) { return R"({"t":{"dtype":"U8","shape":[0],"data_offsets":)" + a + "}}"; },
       ErrorCode::InvalidOffsets},
  };
  for (const auto& place : places) {
    DYNAMIC_SECTION(place.name) {
      {
        INFO("128 levels: read as JSON; what the header makes of the value decides");
        auto r = header(place.make(nested(128 - place.above)));
        if (!place.at_limit) {
          CHECK(r.has_value());
        } else {
          REQUIRE(!r);
          CHECK(r.error().code == *place.at_limit);
        }
      }
      for (std::size_t levels : {std::size_t{129}, std::size_t{100'000}}) {
        INFO(levels << " levels");
        auto r = header(place.make(nested(levels - place.above)));
        REQUIRE(!r);
        CHECK(r.error().code == ErrorCode::HeaderJson);
        CHECK_THAT(r.error().message, Catch::Contains(std::string(kLimitWords)));
        CHECK_THAT(r.error().message, Catch::Contains("of the file"));  // where it is
      }
    }
  }
  SECTION("objects count as arrays do") {
    std::string objects;
    for (int i = 0; i < 127; ++i) objects += R"({"o":)";
    objects += "1" + std::string(127, '}');
    const std::string deep = R"({"__metadata__":{"k":)" + objects + "}}";  // 2 + 127 = 129 levels
    auto r = header(deep);
    REQUIRE(!r);
    CHECK(r.error().code == ErrorCode::HeaderJson);
    CHECK_THAT(r.error().message, Catch::Contains(std::string(kLimitWords)));
  }
}

TEST_CASE("json depth: an index is read to 128 levels and refused past them (InvalidIndex)", "[json][depth][index]") {
  const auto index = [](const std::string& arrays) {
    return R"({"weight_map":{"a":"a.safetensors"},"extra":)" + arrays + "}";
  };
  // The innermost array empty or not: simdjson's own limit counts only the second, so both are checked.
  for (std::string_view inner : {"1", ""}) {
    INFO("innermost: [" << inner << "]");
    CHECK(tf::parse_index(to_bytes(index(nested(127, inner)))).has_value());  // 1 + 127 = 128 levels
    for (std::size_t levels : {std::size_t{129}, std::size_t{130}, std::size_t{100'000}}) {
      INFO(levels << " levels");
      auto r = tf::parse_index(to_bytes(index(nested(levels - 1, inner))));
      REQUIRE(!r);
      CHECK(r.error().code == ErrorCode::InvalidIndex);
      CHECK_THAT(r.error().message, Catch::Contains("index") && Catch::Contains(std::string(kLimitWords)));
    }
  }
  SECTION("numbers (two tape words each) and objects do not throw the count off") {
    std::string objects;
    for (int i = 0; i < 125; ++i) objects += R"({"n":1.5,"m":-2,"u":18446744073709551615,"o":)";
    const std::string close(125, '}');
    // the root, the array, 125 objects, the innermost {}: 128 levels; one array more: 129.
    CHECK(tf::parse_index(to_bytes(index("[1.5," + objects + "{}" + close + "]"))).has_value());
    auto r = tf::parse_index(to_bytes(index("[1.5,[" + objects + "{}" + close + "]]")));
    REQUIRE(!r);
    CHECK_THAT(r.error().message, Catch::Contains(std::string(kLimitWords)));
  }
}

TEST_CASE("json depth: config.json (--tp, parameter counts) and --tp-rules are refused past 128 levels",
          "[json][depth][config][tp]") {
  const auto config = [](const std::string& arrays) { return R"({"model_type":"llama","extra":)" + arrays + "}"; };
  SECTION("config.json for --tp: InvalidArgument naming config.json and the limit") {
    CHECK(tf::parse_tp_model(config(nested(127))).has_value());
    for (std::size_t levels : {std::size_t{129}, std::size_t{100'000}}) {
      INFO(levels << " levels");
      auto r = tf::parse_tp_model(config(nested(levels - 1)));
      REQUIRE(!r);
      CHECK(r.error().code == ErrorCode::InvalidArgument);
      CHECK_THAT(r.error().message, Catch::Contains("config.json") && Catch::Contains(std::string(kLimitWords)));
    }
  }
  SECTION("config.json for parameter counts: a warning naming the limit; the stored counts stand") {
    tf::TensorInfo t;
    t.name = "w";
    t.dtype = tf::DType::F32;
    static const std::uint64_t shape[] = {2, 3};
    t.shape = shape;
    t.begin = 0;
    t.end = 24;
    const tf::TensorInfo* tensors[] = {&t};
    auto at_limit = tf::count_parameters(tensors, config(nested(127)));
    CHECK(!at_limit.config_warning);
    for (std::size_t levels : {std::size_t{129}, std::size_t{100'000}}) {
      INFO(levels << " levels");
      auto p = tf::count_parameters(tensors, config(nested(levels - 1)));
      CHECK(p.total == 6);
      REQUIRE(p.config_warning);
      CHECK_THAT(*p.config_warning, Catch::Contains("config.json") && Catch::Contains(std::string(kLimitWords)));
    }
  }
  SECTION("--tp-rules: InvalidArgument (a usage error) naming the rules file and the limit") {
    for (std::size_t levels : {std::size_t{129}, std::size_t{100'000}}) {
      INFO(levels << " levels");
      auto r = tf::parse_tp_rules(R"({"*.w":)" + nested(levels - 1) + "}", "rules.json");
      REQUIRE(!r);
      CHECK(r.error().code == ErrorCode::InvalidArgument);
      CHECK_THAT(r.error().message, Catch::Contains("rules.json") && Catch::Contains(std::string(kLimitWords)));
    }
  }
}

TEST_CASE("json depth: the nlohmann reader (meta.json, snapshot and MPI manifests) keeps to 128 levels while "
          "parsing",
          "[json][depth][cache]") {
  auto ok = tf::detail::parse_json(R"({"a":)" + nested(127) + "}", ErrorCode::Io, "meta.json");
  REQUIRE(ok.has_value());
  CHECK((*ok)["a"].is_array());
  for (std::size_t levels : {std::size_t{129}, std::size_t{100'000}}) {
    INFO(levels << " levels");
    auto r = tf::detail::parse_json(R"({"a":)" + nested(levels - 1) + "}", ErrorCode::Io, "meta.json");
    REQUIRE(!r);
    CHECK(r.error().code == ErrorCode::Io);
    CHECK_THAT(r.error().message, Catch::Contains("meta.json") && Catch::Contains(std::string(kLimitWords)));
  }
  SECTION("malformed JSON, a comment or a second document is refused with the parser's words") {
    for (const char* bad : {"{\"a\":", "{} // c", "{} {}", ""}) {
      INFO(bad);
      auto r = tf::detail::parse_json(bad, ErrorCode::Io, "meta.json");
      REQUIRE(!r);
      CHECK_THAT(r.error().message, Catch::StartsWith("meta.json is not valid JSON: "));
    }
  }
}
