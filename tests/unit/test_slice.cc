// SPDX-License-Identifier: Apache-2.0
// Slices: parse_slice / parse_named_slice, and plan_slice turning a slice of a tensor into
// the minimal list of byte ranges (tables with exact expected ranges).
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tensorfetch/dtype.hpp"
#include "tensorfetch/format.hpp"
#include "tensorfetch/slice.hpp"
#include "test_util.hpp"

namespace tf = tensorfetch;
using tf::ByteRange;
using tf::DimSelect;
using tf::DType;
using tf::ErrorCode;
using Shape = std::vector<std::uint64_t>;
using Ranges = std::vector<ByteRange>;

namespace {

DimSelect idx(std::int64_t i) {
  DimSelect d;
  d.is_index = true;
  d.index = i;
  return d;
}

DimSelect rng(std::optional<std::uint64_t> start, std::optional<std::uint64_t> stop) {
  DimSelect d;
  d.start = start;
  d.stop = stop;
  return d;
}

std::string describe(const DimSelect& d) {
  if (d.is_index) return "index " + std::to_string(d.index);
  return "range " + (d.start ? std::to_string(*d.start) : std::string()) + ":" +
         (d.stop ? std::to_string(*d.stop) : std::string());
}

std::string describe(const std::vector<DimSelect>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + describe(dims[i]);
  return out + "]";
}

bool same(const DimSelect& a, const DimSelect& b) {
  if (a.is_index != b.is_index) return false;
  if (a.is_index) return a.index == b.index;
  return a.start == b.start && a.stop == b.stop;
}

bool same(const std::vector<DimSelect>& a, const std::vector<DimSelect>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!same(a[i], b[i])) return false;
  }
  return true;
}

/// A tensor named "t" of `dtype` and `shape` whose data starts at `begin` of the data section.
tf::TensorInfo tensor(DType dtype, Shape shape, std::uint64_t begin = 0) {
  return tftest::make_tensor("t", dtype, std::move(shape), begin);
}

/// Parses `spec` (which must parse) and plans it against `t`.
tf::Result<tf::SlicePlan> plan(const tf::TensorInfo& t, std::string_view spec) {
  auto s = tf::parse_slice(spec);
  if (!s) {
    FAIL_CHECK("slice '" << spec << "' did not parse: " << s.error().message);
    return tf::fail(s.error());
  }
  return tf::plan_slice(t, *s);
}

struct PlanCase {
  DType dtype;
  Shape shape;
  const char* spec;
  Shape expected_shape;
  Ranges expected_ranges;
};

void check_plans(const std::vector<PlanCase>& table) {
  for (const auto& c : table) {
    INFO("tensor " << tf::to_string(c.dtype) << " " << Catch::Detail::stringify(c.shape)
                   << ", slice '" << c.spec << "'");
    // The tensor's position in the data section must not matter: ranges are relative.
    for (std::uint64_t begin : {std::uint64_t{0}, std::uint64_t{1000}}) {
      INFO("tensor begins at data byte " << begin);
      auto p = plan(tensor(c.dtype, c.shape, begin), c.spec);
      if (!p) {
        FAIL_CHECK("plan_slice failed: " << p.error().message);
        continue;
      }
      CHECK(p->shape == c.expected_shape);
      CHECK(p->ranges == c.expected_ranges);
      std::uint64_t total = 0;
      for (const auto& r : c.expected_ranges) total += r.length;
      CHECK(p->nbytes == total);
    }
  }
}

}  // namespace

// --- parsing -------------------------------------------------------------------------------

TEST_CASE("slice: parse_slice reads ranges, open bounds and indices, with or without brackets",
          "[slice][parse]") {
  const std::vector<std::pair<const char*, std::vector<DimSelect>>> cases = {
      {"[0:128, :, 3]", {rng(0, 128), rng(std::nullopt, std::nullopt), idx(3)}},
      {"[0:128,:,3]", {rng(0, 128), rng(std::nullopt, std::nullopt), idx(3)}},
      {"1:2", {rng(1, 2)}},
      {"[1]", {idx(1)}},
      {"1", {idx(1)}},
      {"-1", {idx(-1)}},
      {"[-3, 0]", {idx(-3), idx(0)}},
      {":5", {rng(std::nullopt, 5)}},
      {"3:", {rng(3, std::nullopt)}},
      {":", {rng(std::nullopt, std::nullopt)}},
      {"[:, 2:4]", {rng(std::nullopt, std::nullopt), rng(2, 4)}},
      {"[0:0]", {rng(0, 0)}},
      {"[18446744073709551615:]", {rng(18446744073709551615u, std::nullopt)}},
  };
  for (const auto& [text, expected] : cases) {
    INFO("slice text: " << text);
    auto r = tf::parse_slice(text);
    if (!r) {
      FAIL_CHECK("refused: " << r.error().message);
      continue;
    }
    INFO("parsed: " << describe(r->dims) << ", expected: " << describe(expected));
    CHECK(same(r->dims, expected));
  }
}

TEST_CASE("slice: parse_slice refuses steps and garbage (InvalidArgument)", "[slice][parse]") {
  for (const char* text : {"0:4:2", "[0:4:1]", "::", "::2", "[1:2:]", "abc", "[1", "1]", "[x]",
                           "1.5", "[0:a]", "1 2", "--1", "[[1]]", "-1:", "0:-1", ":-2", "1,,2",
                           "[1e2]", "[0x10]", "99999999999999999999", "[0:99999999999999999999]",
                           "[+]"}) {
    INFO("slice text: '" << text << "'");
    CHECK_ERROR(tf::parse_slice(text), ErrorCode::InvalidArgument);
  }
}

TEST_CASE("slice: parse_named_slice splits NAME[SLICE] at the last bracket", "[slice][parse]") {
  SECTION("name with a slice") {
    auto r = tf::parse_named_slice("w[0:128, :]");
    REQUIRE(r.has_value());
    CHECK(r->name == "w");
    REQUIRE(r->slice.has_value());
    CHECK(same(r->slice->dims, {rng(0, 128), rng(std::nullopt, std::nullopt)}));
  }
  SECTION("name without a slice") {
    auto r = tf::parse_named_slice("model.layers.0.mlp.weight");
    REQUIRE(r.has_value());
    CHECK(r->name == "model.layers.0.mlp.weight");
    CHECK_FALSE(r->slice.has_value());
  }
  SECTION("glob with a negative index") {
    auto r = tf::parse_named_slice("model.experts.*.w[-1]");
    REQUIRE(r.has_value());
    CHECK(r->name == "model.experts.*.w");
    REQUIRE(r->slice.has_value());
    CHECK(same(r->slice->dims, {idx(-1)}));
  }
  SECTION("brackets inside the name: split at the last '['") {
    auto r = tf::parse_named_slice("a[b][1]");
    REQUIRE(r.has_value());
    CHECK(r->name == "a[b]");
    REQUIRE(r->slice.has_value());
    CHECK(same(r->slice->dims, {idx(1)}));
  }
  SECTION("no closing bracket at the end: all of it is the name") {
    auto r = tf::parse_named_slice("w[1");
    REQUIRE(r.has_value());
    CHECK(r->name == "w[1");
    CHECK_FALSE(r->slice.has_value());
  }
  SECTION("bad slices are refused") {
    CHECK_ERROR(tf::parse_named_slice("w[0:4:2]"), ErrorCode::InvalidArgument);
    CHECK_ERROR(tf::parse_named_slice("w[abc]"), ErrorCode::InvalidArgument);
    CHECK_ERROR(tf::parse_named_slice("w[1:x]"), ErrorCode::InvalidArgument);
  }
}

TEST_CASE("slice: to_string renders a slice that parses back to the same selections",
          "[slice][parse]") {
  for (const char* text : {"[0:128, :, 3]", "[-1]", "[:5, 3:]", "[0:0, 2]"}) {
    INFO("slice text: " << text);
    auto r = tf::parse_slice(text);
    REQUIRE(r.has_value());
    CHECK(tf::to_string(*r) == text);
    auto again = tf::parse_slice(tf::to_string(*r));
    REQUIRE(again.has_value());
    CHECK(same(again->dims, r->dims));
  }
}

// --- planning: 2-D ---------------------------------------------------------------------------

TEST_CASE("slice plan: the whole tensor is one range", "[slice][plan]") {
  // F32 [4, 8]: rows of 32 bytes, 128 bytes in all.
  check_plans({
      {DType::F32, {4, 8}, "", {4, 8}, {{0, 128}}},
      {DType::F32, {4, 8}, "[:]", {4, 8}, {{0, 128}}},
      {DType::F32, {4, 8}, "[:, :]", {4, 8}, {{0, 128}}},
      {DType::F32, {4, 8}, "[0:4, 0:8]", {4, 8}, {{0, 128}}},
      {DType::BF16, {3}, "", {3}, {{0, 6}}},
  });
  // An empty SliceSpec (no selections) also means the whole tensor.
  auto p = tf::plan_slice(tensor(DType::F32, {4, 8}), tf::SliceSpec{});
  REQUIRE(p.has_value());
  CHECK(p->shape == Shape{4, 8});
  CHECK(p->ranges == Ranges{{0, 128}});
  CHECK(p->nbytes == 128u);
}

TEST_CASE("slice plan: a row range of a 2-D tensor is one range", "[slice][plan]") {
  check_plans({
      {DType::F32, {4, 8}, "[1:3]", {2, 8}, {{32, 64}}},
      {DType::F32, {4, 8}, "[1:3, :]", {2, 8}, {{32, 64}}},
      {DType::F32, {4, 8}, "[:2]", {2, 8}, {{0, 64}}},
      {DType::F32, {4, 8}, "[3:]", {1, 8}, {{96, 32}}},
      {DType::F32, {4, 8}, "[1:3, 0:8]", {2, 8}, {{32, 64}}},
  });
}

TEST_CASE("slice plan: a column range of a 2-D tensor is one range per row, adjacent ones merged",
          "[slice][plan]") {
  check_plans({
      {DType::F32, {4, 8}, "[:, 2:5]", {4, 3}, {{8, 12}, {40, 12}, {72, 12}, {104, 12}}},
      {DType::F32, {4, 8}, "[1:3, 0:1]", {2, 1}, {{32, 4}, {64, 4}}},
      {DType::F32, {4, 8}, "[:, 7:]", {4, 1}, {{28, 4}, {60, 4}, {92, 4}, {124, 4}}},
      // Full rows touch each other and merge.
      {DType::F32, {4, 8}, "[:, 0:8]", {4, 8}, {{0, 128}}},
      {DType::F32, {4, 8}, "[2:4, 0:]", {2, 8}, {{64, 64}}},
  });
}

TEST_CASE("slice plan: a single index drops its dimension; negative indices count from the end",
          "[slice][plan]") {
  check_plans({
      {DType::F32, {4, 8}, "[2]", {8}, {{64, 32}}},
      {DType::F32, {4, 8}, "[0]", {8}, {{0, 32}}},
      {DType::F32, {4, 8}, "[-1]", {8}, {{96, 32}}},
      {DType::F32, {4, 8}, "[-4]", {8}, {{0, 32}}},
      {DType::F32, {4, 8}, "[2, 3]", {}, {{76, 4}}},
      {DType::F32, {4, 8}, "[:, -1]", {4}, {{28, 4}, {60, 4}, {92, 4}, {124, 4}}},
      {DType::F32, {4, 8}, "[-2, -8]", {}, {{64, 4}}},
      {DType::I64, {5}, "[-5]", {}, {{0, 8}}},
  });
}

TEST_CASE("slice plan: indices and bounds outside the dimension are refused (SliceOutOfRange)",
          "[slice][plan]") {
  const auto t = tensor(DType::F32, {4, 8});
  for (const char* spec : {"[4]", "[-5]", "[100]", "[:, 8]", "[:, -9]", "[3:1]", "[0:5]", "[5:]",
                           "[5:5]", "[:, 2:9]", "[:, 9:]", "[2:1, :]", "[18446744073709551615:]",
                           "[0:18446744073709551615]", "[-9223372036854775807]"}) {
    INFO("slice: " << spec);
    auto p = plan(t, spec);
    CHECK_ERROR(p, ErrorCode::SliceOutOfRange);
  }
}

TEST_CASE("slice plan: the most negative index does not wrap around", "[slice][plan]") {
  tf::SliceSpec direct;
  direct.dims.push_back(idx(INT64_MIN));
  CHECK_ERROR(tf::plan_slice(tensor(DType::U8, {4}), direct), ErrorCode::SliceOutOfRange);
  // Parsing the text may refuse it outright; if it parses, planning must refuse it.
  auto s = tf::parse_slice("[-9223372036854775808]");
  if (s) {
    CHECK_ERROR(tf::plan_slice(tensor(DType::U8, {4}), *s), ErrorCode::SliceOutOfRange);
  } else {
    CHECK(s.error().code == ErrorCode::InvalidArgument);
  }
}

TEST_CASE("slice plan: more selections than dimensions are refused", "[slice][plan]") {
  // The contract names the refusal but not its code: either a bad slice from the caller
  // (InvalidArgument) or a selection outside the shape (SliceOutOfRange).
  CHECK_ERROR_IN(plan(tensor(DType::F32, {4, 8}), "[0, 0, 0]"), ErrorCode::InvalidArgument,
                 ErrorCode::SliceOutOfRange);
  CHECK_ERROR_IN(plan(tensor(DType::F32, {4, 8}), "[:, :, :]"), ErrorCode::InvalidArgument,
                 ErrorCode::SliceOutOfRange);
  CHECK_ERROR_IN(plan(tensor(DType::F32, {}), "[0]"), ErrorCode::InvalidArgument,
                 ErrorCode::SliceOutOfRange);
  CHECK_ERROR_IN(plan(tensor(DType::F32, {}), "[:]"), ErrorCode::InvalidArgument,
                 ErrorCode::SliceOutOfRange);
}

TEST_CASE("slice plan: an empty selection (start == stop) gives a 0 in the shape and no ranges",
          "[slice][plan]") {
  check_plans({
      {DType::F32, {4, 8}, "[1:1]", {0, 8}, {}},
      {DType::F32, {4, 8}, "[0:0]", {0, 8}, {}},
      {DType::F32, {4, 8}, "[4:4]", {0, 8}, {}},
      {DType::F32, {4, 8}, "[:, 3:3]", {4, 0}, {}},
      {DType::F32, {4, 8}, "[2, 8:8]", {0}, {}},
      {DType::F32, {0, 7}, "", {0, 7}, {}},
      {DType::F32, {0, 7}, "[0:0, 1:3]", {0, 2}, {}},
      {DType::F32, {3, 0}, "[1]", {0}, {}},
  });
}

TEST_CASE("slice plan: a scalar with an empty slice is its whole 4 bytes", "[slice][plan]") {
  check_plans({
      {DType::F32, {}, "", {}, {{0, 4}}},
      {DType::U8, {}, "", {}, {{0, 1}}},
  });
}

// --- planning: sub-byte dtypes ----------------------------------------------------------------

TEST_CASE("slice plan: F4 slices that start and end on a byte are planned", "[slice][plan][subbyte]") {
  // F4 [4, 4]: 2 bytes per row, 8 bytes in all.
  check_plans({
      {DType::F4, {4, 4}, "", {4, 4}, {{0, 8}}},
      {DType::F4, {4, 4}, "[1:3]", {2, 4}, {{2, 4}}},
      {DType::F4, {4, 4}, "[-1]", {4}, {{6, 2}}},
      {DType::F4, {4, 4}, "[:, 2:4]", {4, 2}, {{1, 1}, {3, 1}, {5, 1}, {7, 1}}},
      {DType::F4, {4, 4}, "[:, 0:2]", {4, 2}, {{0, 1}, {2, 1}, {4, 1}, {6, 1}}},
      {DType::F4, {4, 4}, "[1, 2:4]", {2}, {{3, 1}}},
      {DType::F4, {2, 3}, "[0:2]", {2, 3}, {{0, 3}}},
      {DType::F4, {8}, "[2:6]", {4}, {{1, 2}}},
      // F6: four elements are three bytes.
      {DType::F6_E2M3, {8}, "[0:4]", {4}, {{0, 3}}},
      {DType::F6_E2M3, {8}, "[4:8]", {4}, {{3, 3}}},
      {DType::F6_E3M2, {2, 4}, "[1]", {4}, {{3, 3}}},
      {DType::F4, {4, 4}, "[1:1]", {0, 4}, {}},
  });
}

TEST_CASE("slice plan: F4/F6 slices that split a byte are refused (SliceMisaligned)",
          "[slice][plan][subbyte]") {
  const std::vector<std::tuple<DType, Shape, const char*>> cases = {
      {DType::F4, {4, 4}, "[:, 1:3]"},  // starts at bit 4 of each row
      {DType::F4, {4, 4}, "[:, 0:1]"},  // ends at bit 4
      {DType::F4, {4, 4}, "[:, 1]"},    // one nibble
      {DType::F4, {4, 4}, "[0, 3]"},
      {DType::F4, {2, 3}, "[0]"},       // a 12-bit row ends mid-byte
      {DType::F4, {2, 3}, "[1]"},       // and the next one starts mid-byte
      {DType::F4, {8}, "[1:5]"},
      {DType::F6_E2M3, {8}, "[1:4]"},
      {DType::F6_E2M3, {8}, "[0:3]"},
      {DType::F6_E3M2, {2, 4}, "[:, 0:2]"},
  };
  for (const auto& [dtype, shape, spec] : cases) {
    INFO("tensor " << tf::to_string(dtype) << " " << Catch::Detail::stringify(shape) << ", slice "
                   << spec);
    CHECK_ERROR(plan(tensor(dtype, shape), spec), ErrorCode::SliceMisaligned);
  }
}

// --- planning: 3-D ---------------------------------------------------------------------------

TEST_CASE("slice plan: 3-D U8 [2, 3, 4] mixed ranges and indices give exact byte ranges",
          "[slice][plan]") {
  // Element (i, j, k) is byte 12 i + 4 j + k.
  check_plans({
      {DType::U8, {2, 3, 4}, "[:, 1:3]", {2, 2, 4}, {{4, 8}, {16, 8}}},
      {DType::U8, {2, 3, 4}, "[1, :, 1:3]", {3, 2}, {{13, 2}, {17, 2}, {21, 2}}},
      {DType::U8, {2, 3, 4}, "[0:2, 1]", {2, 4}, {{4, 4}, {16, 4}}},
      {DType::U8, {2, 3, 4}, "[-1, -1]", {4}, {{20, 4}}},
      {DType::U8, {2, 3, 4}, "[:, :, 0:4]", {2, 3, 4}, {{0, 24}}},
      {DType::U8, {2, 3, 4}, "[:, 0:3, 2:4]", {2, 3, 2},
       {{2, 2}, {6, 2}, {10, 2}, {14, 2}, {18, 2}, {22, 2}}},
      {DType::U8, {2, 3, 4}, "[1:2, 0:3]", {1, 3, 4}, {{12, 12}}},
      {DType::U8, {2, 3, 4}, "[0, 2, 3]", {}, {{11, 1}}},
      {DType::U8, {2, 3, 4}, "[:, 2:3, 0:4]", {2, 1, 4}, {{8, 4}, {20, 4}}},
      {DType::U8, {2, 3, 4}, "[0:2, 2:3, 1]", {2, 1}, {{9, 1}, {21, 1}}},
      {DType::U8, {2, 3, 4}, "[:, 2:3, 2:4]", {2, 1, 2}, {{10, 2}, {22, 2}}},
      {DType::U8, {2, 3, 4}, "[0, 1:3, :]", {2, 4}, {{4, 8}}},
      {DType::U8, {2, 3, 4}, "[:, 1:1]", {2, 0, 4}, {}},
  });
}

TEST_CASE("slice plan: 3-D F32 [2, 3, 4] mixed ranges and indices give exact byte ranges",
          "[slice][plan]") {
  // Element (i, j, k) is at byte 48 i + 16 j + 4 k.
  check_plans({
      {DType::F32, {2, 3, 4}, "[1, 1:3, :]", {2, 4}, {{64, 32}}},
      {DType::F32, {2, 3, 4}, "[:, :, 1:2]", {2, 3, 1},
       {{4, 4}, {20, 4}, {36, 4}, {52, 4}, {68, 4}, {84, 4}}},
      {DType::F32, {2, 3, 4}, "[0:2, 0:3, 0:4]", {2, 3, 4}, {{0, 96}}},
      {DType::F32, {2, 3, 4}, "[:, 2]", {2, 4}, {{32, 16}, {80, 16}}},
      {DType::F32, {2, 3, 4}, "[1, -1, -1]", {}, {{92, 4}}},
      {DType::F32, {2, 3, 4}, "[:, 2:3]", {2, 1, 4}, {{32, 16}, {80, 16}}},
      {DType::F32, {2, 3, 4}, "[0:2, 1:3, 3:]", {2, 2, 1}, {{28, 4}, {44, 4}, {76, 4}, {92, 4}}},
  });
}

TEST_CASE("slice plan: ranges are ascending, non-adjacent and add up to the result's size",
          "[slice][plan]") {
  const auto t = tensor(DType::BF16, {6, 5, 7});
  for (const char* spec : {"", "[1:4]", "[:, 1:3]", "[:, :, 2:5]", "[2, 1:5, 0:7]", "[-1, 0, 6]",
                           "[0:6, 0:5, 1:7]", "[1:5, 4:5, 0:3]"}) {
    INFO("slice " << spec);
    auto p = plan(t, spec);
    REQUIRE(p.has_value());
    std::uint64_t elements = 1;
    for (auto d : p->shape) elements *= d;
    CHECK(p->nbytes == elements * 2);
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < p->ranges.size(); ++i) {
      CHECK(p->ranges[i].length > 0u);
      CHECK(p->ranges[i].end() <= t.nbytes());
      if (i > 0) CHECK(p->ranges[i - 1].end() < p->ranges[i].offset);
      total += p->ranges[i].length;
    }
    CHECK(total == p->nbytes);
  }
}
