// SPDX-License-Identifier: Apache-2.0
// Readable Catch2 output for the plain values the suites compare (header-only; include it
// from Catch2 tests only: the rest of tests/support does not depend on Catch2).
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "tensorfetch/byte_range.hpp"

namespace Catch {
/// A byte range as "{offset O, length L}".
template <>
struct StringMaker<tensorfetch::ByteRange> {
  static std::string convert(const tensorfetch::ByteRange& r) {
    return "{offset " + std::to_string(r.offset) + ", length " + std::to_string(r.length) + "}";
  }
};
}  // namespace Catch
