// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the unit tests (header-only; each test file is its own executable): Catch2
// output for the library's value types and error checks. What every suite shares (le64,
// read_file, reference_dir, TempDir, ...) is in tests/support, included here.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/bytes.hpp"
#include "support/catch_strings.hpp"
#include "support/files.hpp"
#include "tensorfetch/byte_range.hpp"
#include "tensorfetch/dtype.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/format.hpp"

// Readable failure output for the library's value types.
namespace Catch {
template <>
struct StringMaker<tensorfetch::ErrorCode> {
  static std::string convert(tensorfetch::ErrorCode code) {
    return std::string(tensorfetch::to_string(code));
  }
};
template <>
struct StringMaker<tensorfetch::DType> {
  static std::string convert(tensorfetch::DType dtype) {
    return std::string(tensorfetch::to_string(dtype));
  }
};
}  // namespace Catch

namespace tftest {

/// A shape (a span, or any range of dimensions) as a plain std::vector, for comparisons and printing.
template <class V>
std::vector<std::uint64_t> dims(const V& v) {
  return std::vector<std::uint64_t>(v.begin(), v.end());
}

/// A name (a string_view, or anything convertible to one) as a plain std::string.
template <class S>
std::string str(const S& s) {
  return std::string(std::string_view(s));
}

/// The bytes of a string, as the library's parsers take them.
inline std::vector<std::byte> to_bytes(std::string_view text) {
  std::vector<std::byte> out(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<std::byte>(text[i]);
  return out;
}

/// Checks that `r` failed with `code` and that its message mentions every string of
/// `mentions`. Reports the caller's location through CHECK_ERROR.
template <class T>
void check_error(const tensorfetch::Result<T>& r, tensorfetch::ErrorCode code,
                 std::initializer_list<std::string_view> mentions) {
  if (r.has_value()) {
    FAIL_CHECK("expected error " << tensorfetch::to_string(code) << ", but the call succeeded");
    return;
  }
  INFO("error message: " << r.error().message);
  CHECK(r.error().code == code);
  CHECK_FALSE(r.error().message.empty());
  for (std::string_view m : mentions) {
    CHECK_THAT(r.error().message, Catch::Matchers::Contains(std::string(m)));
  }
}

/// Checks that `r` failed with one of `codes` (for contracts that leave the exact code
/// open) and mentions every string of `mentions`.
template <class T>
void check_error_in(const tensorfetch::Result<T>& r,
                    std::initializer_list<tensorfetch::ErrorCode> codes,
                    std::initializer_list<std::string_view> mentions) {
  if (r.has_value()) {
    FAIL_CHECK("expected an error, but the call succeeded");
    return;
  }
  INFO("error message: " << r.error().message);
  INFO("error code: " << tensorfetch::to_string(r.error().code));
  bool found = false;
  for (auto c : codes) found = found || c == r.error().code;
  CHECK(found);
  for (std::string_view m : mentions) {
    CHECK_THAT(r.error().message, Catch::Matchers::Contains(std::string(m)));
  }
}

/// A hand-made header entry: `name`, `dtype`, `shape`, its data at `begin` of the data section
/// (and as long as its elements need). A TensorInfo is a view: its name and shape are kept alive
/// here for the whole test run. Not thread-safe (the unit tests run on one thread).
inline tensorfetch::TensorInfo make_tensor(std::string_view name, tensorfetch::DType dtype,
                                           std::vector<std::uint64_t> shape, std::uint64_t begin = 0) {
  static std::deque<std::string> names;
  static std::deque<std::vector<std::uint64_t>> shapes;
  tensorfetch::TensorInfo t;
  t.name = names.emplace_back(name);
  t.dtype = dtype;
  t.shape = shapes.emplace_back(std::move(shape));
  t.begin = begin;
  t.end = begin + t.num_elements() * tensorfetch::dtype_bits(dtype) / 8;
  return t;
}

}  // namespace tftest

/// CHECK_ERROR(result, ErrorCode::X, "mention", ...): the call failed with exactly X and the
/// message names each mention.
#define CHECK_ERROR(result, code, ...)                                   \
  do {                                                                   \
    INFO("checked at " << __FILE__ << ":" << __LINE__);                  \
    ::tftest::check_error((result), (code), {__VA_ARGS__});              \
  } while (false)

/// CHECK_ERROR_IN(result, ErrorCode::A, ErrorCode::B, ...): failed with one of the codes
/// (for contracts that leave the exact code open).
#define CHECK_ERROR_IN(result, ...)                                      \
  do {                                                                   \
    INFO("checked at " << __FILE__ << ":" << __LINE__);                  \
    ::tftest::check_error_in((result), {__VA_ARGS__}, {});               \
  } while (false)
