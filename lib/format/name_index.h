// SPDX-License-Identifier: Apache-2.0
// Private: an open-addressing index from names to positions in a caller-owned array. One
// flat array of 64-bit slots (a hash tag and the position), so inserting a million names
// costs about one cache miss each and no allocation per name.
#pragma once

#include <bit>
#include <cstdint>
#include <functional>
#include <memory_resource>
#include <optional>
#include <string_view>
#include <vector>

namespace tensorfetch::detail {

class NameIndex {
 public:
  /// Largest number of names (positions must fit 32 bits).
  static constexpr std::size_t kMaxNames = std::size_t{1} << 31;

  explicit NameIndex(std::pmr::memory_resource* mr = std::pmr::get_default_resource()) : slots_(mr) {}

  /// Empties the index and sizes it for `n` names (n <= kMaxNames).
  void reset(std::size_t n) {
    const std::size_t size = std::bit_ceil(std::max<std::size_t>(16, n * 2));
    slots_.assign(size, 0);
    mask_ = size - 1;
  }

  /// Adds `name` at `pos`, unless present: then returns the position already stored.
  /// `name_of(p)` gives the name stored at position p.
  template <class NameOf>
  std::optional<std::size_t> insert(std::string_view name, std::size_t pos, NameOf&& name_of) {
    const std::uint64_t h = std::hash<std::string_view>{}(name);
    const std::uint64_t tag = h >> 32;
    for (std::uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      std::uint64_t& slot = slots_[i];
      if (slot == 0) {
        slot = (tag << 32) | (pos + 1);
        return std::nullopt;
      }
      if ((slot >> 32) == tag) {
        const std::size_t other = (slot & 0xffffffffu) - 1;
        if (name_of(other) == name) return other;
      }
    }
  }

  /// The position of `name`, if present.
  template <class NameOf>
  [[nodiscard]] std::optional<std::size_t> find(std::string_view name, NameOf&& name_of) const {
    if (slots_.empty()) return std::nullopt;
    const std::uint64_t h = std::hash<std::string_view>{}(name);
    const std::uint64_t tag = h >> 32;
    for (std::uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const std::uint64_t slot = slots_[i];
      if (slot == 0) return std::nullopt;
      if ((slot >> 32) == tag) {
        const std::size_t pos = (slot & 0xffffffffu) - 1;
        if (name_of(pos) == name) return pos;
      }
    }
  }

 private:
  std::pmr::vector<std::uint64_t> slots_;
  std::uint64_t mask_ = 0;
};

}  // namespace tensorfetch::detail
