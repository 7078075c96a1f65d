// SPDX-License-Identifier: Apache-2.0
/// @file
/// The 22 safetensors element types and their sizes in bits.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tensorfetch/export.hpp"

namespace tensorfetch {

/// A safetensors dtype. The enumerator names match the on-disk strings exactly.
enum class DType : std::uint8_t {
  BOOL,
  F4,
  F6_E2M3,
  F6_E3M2,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,
  F64,
  I64,
  U64,
};

/// Number of dtypes (22).
inline constexpr std::size_t kDTypeCount = 22;

/// Every dtype, in declaration order.
[[nodiscard]] TENSORFETCH_API const std::array<DType, kDTypeCount>& all_dtypes() noexcept;

/// The on-disk name, e.g. "BF16".
[[nodiscard]] TENSORFETCH_API std::string_view to_string(DType dtype) noexcept;

/// Parses an on-disk name; exact and case-sensitive ("bf16" is not a dtype).
[[nodiscard]] TENSORFETCH_API std::optional<DType> parse_dtype(std::string_view name) noexcept;

/// Size of one element in bits (4 for F4, 6 for F6_*, 8 for BOOL, 64 for C64, ...).
[[nodiscard]] TENSORFETCH_API unsigned dtype_bits(DType dtype) noexcept;

}  // namespace tensorfetch
