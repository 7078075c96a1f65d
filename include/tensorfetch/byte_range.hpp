// SPDX-License-Identifier: Apache-2.0
/// @file
/// A byte range of a file as a plain value.
#pragma once

#include <cstdint>

namespace tensorfetch {

/// `length` bytes starting at `offset`. A plain value; `end()` is one past the last byte.
struct ByteRange {
  std::uint64_t offset = 0;  ///< first byte
  std::uint64_t length = 0;  ///< number of bytes

  /// One past the last byte.
  [[nodiscard]] constexpr std::uint64_t end() const noexcept { return offset + length; }
  /// Field-wise equality.
  friend constexpr bool operator==(const ByteRange&, const ByteRange&) = default;
};

}  // namespace tensorfetch
