// SPDX-License-Identifier: Apache-2.0
#include "tensorfetch/dtype.hpp"

namespace tensorfetch {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  unsigned bits;
};

// One row per dtype, in enum order; `all_dtypes()` and the lookups derive from it.
constexpr std::array<DTypeRow, kDTypeCount> kRows{{
    {DType::BOOL, "BOOL", 8},
    {DType::F4, "F4", 4},
    {DType::F6_E2M3, "F6_E2M3", 6},
    {DType::F6_E3M2, "F6_E3M2", 6},
    {DType::U8, "U8", 8},
    {DType::I8, "I8", 8},
    {DType::F8_E5M2, "F8_E5M2", 8},
    {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E8M0, "F8_E8M0", 8},
    {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {DType::I16, "I16", 16},
    {DType::U16, "U16", 16},
    {DType::F16, "F16", 16},
    {DType::BF16, "BF16", 16},
    {DType::I32, "I32", 32},
    {DType::U32, "U32", 32},
    {DType::F32, "F32", 32},
    {DType::C64, "C64", 64},
    {DType::F64, "F64", 64},
    {DType::I64, "I64", 64},
    {DType::U64, "U64", 64},
}};

constexpr bool rows_in_enum_order() {
  for (std::size_t i = 0; i < kRows.size(); ++i) {
    if (static_cast<std::size_t>(kRows[i].dtype) != i) return false;
  }
  return true;
}
static_assert(rows_in_enum_order(), "kRows must follow the DType enum order");

constexpr std::array<DType, kDTypeCount> make_all() {
  std::array<DType, kDTypeCount> out{};
  for (std::size_t i = 0; i < kRows.size(); ++i) out[i] = kRows[i].dtype;
  return out;
}
constexpr std::array<DType, kDTypeCount> kAll = make_all();

}  // namespace

const std::array<DType, kDTypeCount>& all_dtypes() noexcept { return kAll; }

std::string_view to_string(DType dtype) noexcept {
  return kRows[static_cast<std::size_t>(dtype)].name;
}

unsigned dtype_bits(DType dtype) noexcept { return kRows[static_cast<std::size_t>(dtype)].bits; }

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (const auto& row : kRows) {
    if (row.name == name) return row.dtype;
  }
  return std::nullopt;
}

}  // namespace tensorfetch
