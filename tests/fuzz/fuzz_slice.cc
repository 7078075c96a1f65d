// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for slice parsing and planning.
//
// The input is slice text (`[0:128, :, 3]`). An accepted slice must render back with
// to_string to text that parses to the same slice, and is planned against a fixed set of
// tensors (sub-byte dtypes, zero-sized dimensions, a scalar, a 1 EiB tensor of 2^63 bits).
// Every plan is compared with a reference model computed here: the same success or failure, the same
// shape, and the same byte ranges (inside the tensor, ascending, non-adjacent, summing to
// nbytes == product(shape) * bits / 8).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "tensorfetch/dtype.hpp"
#include "tensorfetch/format.hpp"
#include "tensorfetch/slice.hpp"

namespace tf = tensorfetch;

namespace {

// A TensorInfo is a view: what it points to lives for the whole run.
tf::TensorInfo make_tensor(std::string name, tf::DType dtype, std::vector<std::uint64_t> shape,
                           std::uint64_t begin) {
  static std::deque<std::string> names;
  static std::deque<std::vector<std::uint64_t>> shapes;
  tf::TensorInfo t;
  t.name = names.emplace_back(std::move(name));
  t.dtype = dtype;
  t.shape = shapes.emplace_back(std::move(shape));
  t.begin = begin;
  std::uint64_t elements = 1;
  for (auto d : t.shape) elements *= d;
  t.end = begin + elements * tf::dtype_bits(dtype) / 8;
  return t;
}

const std::vector<tf::TensorInfo>& tensors() {
  static const std::vector<tf::TensorInfo> kTensors = [] {
    using tf::DType;
    std::vector<tf::TensorInfo> v;
    v.push_back(make_tensor("f32_4x6x5", DType::F32, {4, 6, 5}, 1000));
    v.push_back(make_tensor("bf16_3x0x7", DType::BF16, {3, 0, 7}, 1480));
    v.push_back(make_tensor("f4_6x4", DType::F4, {6, 4}, 1480));
    v.push_back(make_tensor("f4_3x2x3", DType::F4, {3, 2, 3}, 1492));
    v.push_back(make_tensor("f6_4x4", DType::F6_E2M3, {4, 4}, 1501));
    v.push_back(make_tensor("f6_1x8", DType::F6_E3M2, {1, 8}, 1513));
    v.push_back(make_tensor("u8_scalar", DType::U8, {}, 1519));
    v.push_back(make_tensor("f64_10", DType::F64, {10}, 1520));
    v.push_back(make_tensor("i8_2x3x4x5", DType::I8, {2, 3, 4, 5}, 1600));
    v.push_back(make_tensor("bool_0", DType::BOOL, {0}, 1720));
    v.push_back(make_tensor("u16_1024x33x3", DType::U16, {1024, 33, 3}, 1720));
    v.push_back(make_tensor("f32_2^28x2^30", DType::F32, {1ull << 28, 1ull << 30}, 0));
    v.push_back(make_tensor("c64_1x1x1x1x1", DType::C64, {1, 1, 1, 1, 1}, 8));
    return v;
  }();
  return kTensors;
}

// Plans with more ranges than this are not asked for (the huge tensor could need 2^28).
constexpr std::uint64_t kMaxRanges = 1 << 16;

struct Expected {
  enum Kind { Ok, OutOfRange, Misaligned, TooMany } kind = Ok;
  std::vector<std::uint64_t> shape;
  std::vector<tf::ByteRange> ranges;
  std::uint64_t nbytes = 0;
};

Expected failed(Expected::Kind kind) {
  Expected e;
  e.kind = kind;
  return e;
}

// The reference model of plan_slice.
Expected reference_plan(const tf::TensorInfo& t, const tf::SliceSpec& spec) {
  Expected e;
  const auto& dims = t.shape;
  const std::size_t n = dims.size();
  if (spec.dims.size() > n) return failed(Expected::OutOfRange);
  std::vector<std::uint64_t> start(n, 0), count(dims.begin(), dims.end());
  for (std::size_t i = 0; i < spec.dims.size(); ++i) {
    const auto& s = spec.dims[i];
    const std::uint64_t d = dims[i];
    if (s.is_index) {
      __int128 idx = s.index;
      if (idx < 0) idx += static_cast<__int128>(d);
      if (idx < 0 || idx >= static_cast<__int128>(d)) return failed(Expected::OutOfRange);
      start[i] = static_cast<std::uint64_t>(idx);
      count[i] = 1;
    } else {
      const std::uint64_t a = s.start.value_or(0), b = s.stop.value_or(d);
      if (a > b || b > d) return failed(Expected::OutOfRange);
      start[i] = a;
      count[i] = b - a;
      e.shape.push_back(count[i]);
    }
  }
  for (std::size_t i = spec.dims.size(); i < n; ++i) e.shape.push_back(dims[i]);

  std::uint64_t total = 1;
  for (auto c : count) total *= c;  // <= the tensor's elements: no overflow
  const std::uint64_t bits = tf::dtype_bits(t.dtype);
  e.nbytes = total * bits / 8;
  if (total == 0) return e;

  // k: the innermost dimension that is not taken whole (-1: the whole tensor).
  std::ptrdiff_t k = static_cast<std::ptrdiff_t>(n) - 1;
  while (k >= 0 && count[k] == dims[k]) --k;
  if (k < 0) {
    e.ranges.push_back({0, t.nbytes()});
    return e;
  }
  std::vector<std::uint64_t> stride(n, 1);
  for (std::size_t i = n - 1; i > 0; --i) stride[i - 1] = stride[i] * dims[i];
  std::uint64_t blocks = 1;
  for (std::ptrdiff_t i = 0; i < k; ++i) blocks *= count[i];
  if (blocks > kMaxRanges) return failed(Expected::TooMany);
  const std::uint64_t run = count[k] * stride[k];  // elements per block
  std::vector<std::uint64_t> outer(static_cast<std::size_t>(k), 0);
  for (std::uint64_t b = 0; b < blocks; ++b) {
    std::uint64_t first = start[k] * stride[k];
    for (std::ptrdiff_t i = 0; i < k; ++i) first += (start[i] + outer[i]) * stride[i];
    const std::uint64_t bit_begin = first * bits, bit_end = (first + run) * bits;
    if (bit_begin % 8 != 0 || bit_end % 8 != 0) return failed(Expected::Misaligned);
    e.ranges.push_back({bit_begin / 8, (bit_end - bit_begin) / 8});
    for (std::ptrdiff_t i = k - 1; i >= 0; --i) {  // next outer index, row-major
      if (++outer[i] < count[i]) break;
      outer[i] = 0;
    }
  }
  return e;
}

std::string ranges_text(const std::vector<tf::ByteRange>& rs) {
  std::string s;
  for (std::size_t i = 0; i < rs.size() && i < 8; ++i) {
    s += "[" + std::to_string(rs[i].offset) + "+" + std::to_string(rs[i].length) + "]";
  }
  if (rs.size() > 8) s += "... (" + std::to_string(rs.size()) + ")";
  return s;
}

void check_plan(const tf::TensorInfo& t, const tf::SliceSpec& spec) {
  const Expected want = reference_plan(t, spec);
  if (want.kind == Expected::TooMany) return;
  const std::string what = std::string(std::string_view(t.name)) + tf::to_string(spec);
  auto plan = tf::plan_slice(t, spec);
  if (want.kind == Expected::OutOfRange) {
    FUZZ_CHECK(!plan.has_value(), what + ": out-of-range slice accepted");
    FUZZ_CHECK(plan.error().code != tf::ErrorCode::SliceMisaligned,
               what + ": out of range reported as misaligned");
    return;
  }
  if (want.kind == Expected::Misaligned) {
    FUZZ_CHECK(!plan.has_value(), what + ": misaligned sub-byte slice accepted: " +
                                      (plan ? ranges_text(plan->ranges) : std::string()));
    FUZZ_CHECK(plan.error().code == tf::ErrorCode::SliceMisaligned,
               what + ": misaligned slice refused as " +
                   std::string(tf::to_string(plan.error().code)));
    return;
  }
  FUZZ_CHECK(plan.has_value(), what + ": valid slice refused: " + plan.error().message);
  // Structural properties, stated on their own...
  std::uint64_t sum = 0, elements = 1;
  for (auto d : plan->shape) elements *= d;
  const std::vector<std::uint64_t> shape(plan->shape.begin(), plan->shape.end());
  for (std::size_t i = 0; i < plan->ranges.size(); ++i) {
    const auto& r = plan->ranges[i];
    FUZZ_CHECK(r.length > 0, what + ": empty range");
    FUZZ_CHECK(r.offset <= t.nbytes() && r.length <= t.nbytes() - r.offset,
               what + ": range outside the tensor: " + ranges_text(plan->ranges));
    if (i > 0) {
      FUZZ_CHECK(plan->ranges[i - 1].end() < r.offset,
                 what + ": ranges not ascending and non-adjacent: " + ranges_text(plan->ranges));
    }
    sum += r.length;
  }
  FUZZ_CHECK(sum == plan->nbytes, what + ": ranges do not sum to nbytes");
  FUZZ_CHECK(elements * tf::dtype_bits(t.dtype) % 8 == 0, what + ": not whole bytes");
  FUZZ_CHECK(plan->nbytes == elements * tf::dtype_bits(t.dtype) / 8,
             what + ": nbytes != product(shape) * bits / 8");
  // ...and against the reference.
  FUZZ_CHECK(shape == want.shape, what + ": shape differs from the reference");
  FUZZ_CHECK(plan->nbytes == want.nbytes, what + ": nbytes differs from the reference");
  FUZZ_CHECK(plan->ranges == want.ranges, what + ": ranges " + ranges_text(plan->ranges) +
                                              " differ from the reference " +
                                              ranges_text(want.ranges));
}

bool same_slice(const tf::SliceSpec& a, const tf::SliceSpec& b) {
  if (a.dims.size() != b.dims.size()) return false;
  for (std::size_t i = 0; i < a.dims.size(); ++i) {
    const auto &x = a.dims[i], &y = b.dims[i];
    if (x.is_index != y.is_index) return false;
    if (x.is_index ? x.index != y.index : (x.start != y.start || x.stop != y.stop)) return false;
  }
  return true;
}

void check_slice(const tf::SliceSpec& spec) {
  const std::string text = tf::to_string(spec);
  auto again = tf::parse_slice(text);
  FUZZ_CHECK(again.has_value(), "to_string output '" + text + "' does not parse");
  FUZZ_CHECK(same_slice(spec, *again), "'" + text + "' parses to another slice");
  for (const auto& t : tensors()) check_plan(t, spec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto spec = tf::parse_slice(text)) {
    check_slice(*spec);
  } else {
    FUZZ_CHECK(!spec.error().message.empty(), "error without a message");
  }
  if (auto named = tf::parse_named_slice(text)) {
    if (named->slice) check_slice(*named->slice);
  }
  return 0;
}
