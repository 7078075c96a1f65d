// SPDX-License-Identifier: Apache-2.0
// Writing: layout_file round trips through parse_header; build_index_json through
// parse_index.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensorfetch/dtype.hpp"
#include "tensorfetch/format.hpp"
#include "tensorfetch/index.hpp"
#include "tensorfetch/writer.hpp"
#include "test_util.hpp"

namespace tf = tensorfetch;
using tf::DType;
using tf::ErrorCode;
using tf::OutputTensor;
using Shape = std::vector<std::uint64_t>;

namespace {

OutputTensor out(std::string name, DType dtype, Shape shape) {
  OutputTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

std::uint64_t nbytes(const OutputTensor& t) {
  std::uint64_t n = 1;
  for (auto d : t.shape) n *= d;
  return n * tf::dtype_bits(t.dtype) / 8;
}

std::uint64_t read_le64(const std::string& s) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(s[static_cast<std::size_t>(i)]);
  return n;
}

/// Checks the layout's own invariants, then builds the file (prefix + zeroed data), parses it
/// and checks that it describes `tensors` and `metadata` exactly.
void check_round_trip(const std::vector<OutputTensor>& tensors,
                      const std::optional<tf::Metadata>& metadata) {
  auto layout = tf::layout_file(tensors, metadata);
  if (!layout) FAIL("layout_file failed: " << layout.error().message);

  // The prefix: 8-byte N, then JSON starting with '{', padded with spaces to a multiple of 8.
  const std::string& prefix = layout->prefix;
  INFO("prefix: " << prefix.substr(std::min<std::size_t>(8, prefix.size())));
  REQUIRE(prefix.size() >= 8 + 2);
  CHECK(prefix.size() % 8 == 0u);
  CHECK(read_le64(prefix) == prefix.size() - 8);
  CHECK(prefix[8] == '{');
  const auto close = prefix.find_last_not_of(' ');
  REQUIRE(close != std::string::npos);
  CHECK(prefix[close] == '}');
  CHECK(prefix.size() - 1 - close < 8u);  // no more padding than needed

  // Tensor ranges: in input order, contiguous from the end of the prefix.
  REQUIRE(layout->tensor_ranges.size() == tensors.size());
  std::uint64_t offset = prefix.size();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    INFO("tensor " << tensors[i].name);
    CHECK(layout->tensor_ranges[i] == tf::ByteRange{offset, nbytes(tensors[i])});
    offset += nbytes(tensors[i]);
  }
  CHECK(layout->file_size == offset);

  // The file parses back to the same tensors.
  std::string file = prefix;
  file.resize(layout->file_size, '\0');
  const auto bytes = tftest::to_bytes(file);
  auto header = tf::parse_file_prefix(bytes, bytes.size());
  if (!header) FAIL("the written file does not parse: " << header.error().message);
  CHECK(header->header_size == prefix.size() - 8);
  CHECK(header->data_offset() == prefix.size());
  CHECK(header->tensors().size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    INFO("tensor " << tensors[i].name);
    const auto* t = header->find(tensors[i].name);
    REQUIRE(t != nullptr);
    CHECK(t->dtype == tensors[i].dtype);
    CHECK(tftest::dims(t->shape) == tensors[i].shape);
    CHECK(header->file_range(*t) == layout->tensor_ranges[i]);
  }
  CHECK(header->metadata == metadata);

  // And it is plain JSON to any other reader too.
  const auto json = nlohmann::json::parse(prefix.substr(8));
  CHECK(json.is_object());
  CHECK(json.size() == tensors.size() + (metadata ? 1 : 0));
  CHECK(json.contains("__metadata__") == metadata.has_value());
}

}  // namespace

TEST_CASE("writer: layout_file round trips names, dtypes, shapes, offsets and metadata",
          "[writer]") {
  const std::vector<OutputTensor> tensors = {
      out("model.layers.0.weight", DType::F32, {2, 3}),
      out("b", DType::BF16, {4}),
      out("scalar", DType::U8, {}),
      out("packed", DType::F4, {4}),
      out("empty", DType::F32, {0, 7}),
      out("six", DType::F6_E2M3, {4}),
      out("last", DType::C64, {3}),
  };
  check_round_trip(tensors, tf::Metadata{{"format", "pt"}, {"note", "dtype zoo"}});
  check_round_trip(tensors, std::nullopt);
}

TEST_CASE("writer: every dtype round trips through layout_file", "[writer]") {
  std::vector<OutputTensor> tensors;
  for (DType dt : tf::all_dtypes()) {
    tensors.push_back(out("t_" + std::string(tf::to_string(dt)), dt, {2, 4}));
  }
  check_round_trip(tensors, std::nullopt);
}

TEST_CASE("writer: names and metadata that need JSON escaping round trip", "[writer]") {
  const std::vector<OutputTensor> tensors = {
      out("quote\"back\\slash", DType::U8, {1}),
      out("tab\tnewline\nname", DType::U8, {2}),
      out("caf\xC3\xA9 \xE2\x82\xAC", DType::U8, {3}),
      out("ctl\x01" "char", DType::U8, {4}),
      out("slash/name", DType::U8, {5}),
  };
  check_round_trip(tensors, tf::Metadata{{"k\"ey", "va\\l\nue"}, {"empty", ""}});
}

TEST_CASE("writer: the prefix is padded with spaces to a multiple of 8 for every JSON length",
          "[writer]") {
  // Names of 1..16 characters move the JSON length through every residue mod 8.
  for (std::size_t len = 1; len <= 16; ++len) {
    INFO("name length " << len);
    check_round_trip({out(std::string(len, 'x'), DType::F32, {1})}, std::nullopt);
  }
}

TEST_CASE("writer: zero tensors give a valid empty file", "[writer]") {
  check_round_trip({}, std::nullopt);
  check_round_trip({}, tf::Metadata{{"format", "pt"}});
  auto layout = tf::layout_file({}, std::nullopt);
  REQUIRE(layout.has_value());
  CHECK(layout->file_size == layout->prefix.size());
  CHECK(layout->tensor_ranges.empty());
}

TEST_CASE("writer: many tensors are laid out contiguously in input order", "[writer]") {
  std::vector<OutputTensor> tensors;
  const auto& dtypes = tf::all_dtypes();
  for (std::size_t i = 0; i < 200; ++i) {
    // Names deliberately not in sorted order; every dtype; some empty tensors.
    const DType dt = dtypes[i % dtypes.size()];
    const std::uint64_t rows = i % 7;
    tensors.push_back(out("t" + std::to_string((i * 37) % 200) + "_" + std::to_string(i), dt,
                          {rows, 8}));
  }
  check_round_trip(tensors, tf::Metadata{{"format", "pt"}});
}

TEST_CASE("writer: duplicate names are refused naming the tensor", "[writer]") {
  const std::vector<OutputTensor> tensors = {out("dup_name", DType::U8, {1}),
                                             out("other", DType::U8, {1}),
                                             out("dup_name", DType::U8, {2})};
  auto r = tf::layout_file(tensors, std::nullopt);
  CHECK_ERROR_IN(r, ErrorCode::DuplicateKey, ErrorCode::InvalidArgument);
  if (!r) CHECK_THAT(r.error().message, Catch::Matchers::Contains("dup_name"));
}

TEST_CASE("writer: a tensor named __metadata__ is refused", "[writer]") {
  const std::vector<OutputTensor> tensors = {out("__metadata__", DType::U8, {1})};
  auto r = tf::layout_file(tensors, std::nullopt);
  CHECK_ERROR_IN(r, ErrorCode::InvalidArgument, ErrorCode::InvalidEntry, ErrorCode::DuplicateKey);
  if (!r) CHECK_THAT(r.error().message, Catch::Matchers::Contains("__metadata__"));
  // Also when real metadata is given.
  auto with_md = tf::layout_file(tensors, tf::Metadata{{"a", "b"}});
  CHECK_FALSE(with_md.has_value());
}

TEST_CASE("writer: sub-byte tensors that are not whole bytes are refused", "[writer]") {
  for (const auto& t : {out("nibbles", DType::F4, {3}), out("nibbles", DType::F4, {3, 3}),
                        out("nibbles", DType::F6_E3M2, {2}), out("nibbles", DType::F6_E2M3, {5})}) {
    INFO(tf::to_string(t.dtype) << " " << Catch::Detail::stringify(t.shape));
    const std::vector<OutputTensor> tensors = {out("fine", DType::U8, {1}), t};
    auto r = tf::layout_file(tensors, std::nullopt);
    CHECK_ERROR_IN(r, ErrorCode::SizeMismatch, ErrorCode::InvalidArgument);
    if (!r) CHECK_THAT(r.error().message, Catch::Matchers::Contains("nibbles"));
  }
}

TEST_CASE("writer: sizes that overflow 64 bits are refused", "[writer]") {
  for (const auto& t : {out("huge", DType::U8, {4294967296, 4294967296, 2}),
                        out("huge", DType::F64, {288230376151711744}),
                        out("huge", DType::U8, {2305843009213693952})}) {
    INFO(tf::to_string(t.dtype) << " " << Catch::Detail::stringify(t.shape));
    const std::vector<OutputTensor> tensors = {t};
    auto r = tf::layout_file(tensors, std::nullopt);
    CHECK_ERROR_IN(r, ErrorCode::Overflow, ErrorCode::InvalidArgument);
  }
  // Sizes that each fit but whose sum overflows the file size are refused too:
  // nine tensors of 2^61 - 1 bytes.
  const std::vector<OutputTensor> nine(9, out("big", DType::U8, {(std::uint64_t{1} << 61) - 1}));
  std::vector<OutputTensor> named = nine;
  for (std::size_t i = 0; i < named.size(); ++i) named[i].name += std::to_string(i);
  CHECK_ERROR_IN(tf::layout_file(named, std::nullopt), ErrorCode::Overflow,
                 ErrorCode::InvalidArgument);
}

TEST_CASE("writer: names or metadata that are not valid UTF-8 are refused, not written",
          "[writer]") {
  // The result must re-parse to the same tensors, and the reader refuses invalid UTF-8.
  const std::vector<OutputTensor> bad_name = {out("bad\xFFname", DType::U8, {1})};
  CHECK_FALSE(tf::layout_file(bad_name, std::nullopt).has_value());
  const std::vector<OutputTensor> fine = {out("fine", DType::U8, {1})};
  CHECK_FALSE(tf::layout_file(fine, tf::Metadata{{"k", "v\xC0\xAF"}}).has_value());
  CHECK_FALSE(tf::layout_file(fine, tf::Metadata{{"k\xFF", "v"}}).has_value());
}

// --- index ---------------------------------------------------------------------------------

TEST_CASE("writer: build_index_json re-parses with parse_index to the same map and totals",
          "[writer][index]") {
  const std::map<std::string, std::string> weight_map = {
      {"model.embed.weight", "model-00001-of-00002.safetensors"},
      {"lm_head.weight", "model-00002-of-00002.safetensors"},
      {"model.layers.0.w", "model-00001-of-00002.safetensors"},
      {"quote\"name", "sub/model-00002-of-00002.safetensors"},
  };
  SECTION("with total_parameters") {
    const std::string text = tf::build_index_json(weight_map, 1234, 42);
    const auto bytes = tftest::to_bytes(text);
    auto idx = tf::parse_index(bytes);
    if (!idx) FAIL("parse_index failed: " << idx.error().message << "\n" << text);
    CHECK(idx->shards == std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors",
                                                  "sub/model-00002-of-00002.safetensors"});
    REQUIRE(idx->weight_map.size() == weight_map.size());
    for (const auto& [name, shard_pos] : idx->weight_map) {
      INFO("tensor " << name);
      REQUIRE(weight_map.count(name) == 1u);
      REQUIRE(shard_pos < idx->shards.size());
      CHECK(idx->shards[shard_pos] == weight_map.at(name));
    }
    REQUIRE(idx->total_size.has_value());
    CHECK(*idx->total_size == 1234u);
    REQUIRE(idx->total_parameters.has_value());
    CHECK(*idx->total_parameters == 42u);

    const auto json = nlohmann::json::parse(text);
    CHECK(json.at("metadata").at("total_size") == 1234);
    CHECK(json.at("metadata").at("total_parameters") == 42);
    CHECK(json.at("weight_map").size() == weight_map.size());
    CHECK(json.at("weight_map").at("quote\"name") == "sub/model-00002-of-00002.safetensors");
  }
  SECTION("without total_parameters") {
    const std::string text = tf::build_index_json(weight_map, 0, std::nullopt);
    const auto bytes = tftest::to_bytes(text);
    auto idx = tf::parse_index(bytes);
    if (!idx) FAIL("parse_index failed: " << idx.error().message << "\n" << text);
    REQUIRE(idx->total_size.has_value());
    CHECK(*idx->total_size == 0u);
    CHECK_FALSE(idx->total_parameters.has_value());
    const auto json = nlohmann::json::parse(text);
    CHECK_FALSE(json.at("metadata").contains("total_parameters"));
  }
  SECTION("a total_size above 2^53 is written exactly") {
    const std::uint64_t big = (std::uint64_t{1} << 53) + 1;
    const std::string text = tf::build_index_json(weight_map, big, big);
    const auto bytes = tftest::to_bytes(text);
    auto idx = tf::parse_index(bytes);
    REQUIRE(idx.has_value());
    CHECK(idx->total_size == big);
    CHECK(idx->total_parameters == big);
  }
}
