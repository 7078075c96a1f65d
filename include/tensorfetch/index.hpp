// SPDX-License-Identifier: Apache-2.0
/// @file
/// `*.safetensors.index.json`: parsing, and the safety rules for the shard names it holds.
/// Pure functions; no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"
#include "tensorfetch/format.hpp"

namespace tensorfetch {

/// Largest index file accepted, in bytes (the same cap as a header).
inline constexpr std::uint64_t kMaxIndexSize = kMaxHeaderSize;

/// A parsed index. A plain value.
struct ShardIndex {
  /// Shard file names (relative paths, checked by `check_shard_name`), sorted, unique.
  std::vector<std::string> shards;
  /// `weight_map`: tensor name and the position of its shard in `shards`, sorted by name.
  std::vector<std::pair<std::string, std::size_t>> weight_map;
  /// `metadata.total_size`, if present (bytes of tensor data, as the writer claimed).
  std::optional<std::uint64_t> total_size;
  /// `metadata.total_parameters`, if present (never trusted above a computed count).
  std::optional<std::uint64_t> total_parameters;
  /// Other scalar `metadata` entries, numbers and booleans written as JSON text.
  Metadata extra_metadata;
};

/// Parses and validates an index: a JSON object with a `weight_map` object of tensor name
/// to shard name (every shard name must pass `check_shard_name`), an optional `metadata`
/// object; duplicate keys anywhere are refused; unknown top-level keys are ignored.
[[nodiscard]] TENSORFETCH_API Result<ShardIndex> parse_index(std::span<const std::byte> json);

/// Checks that a shard name from an untrusted index is a safe relative path: not empty,
/// not absolute, no `.` or `..` segments (also percent-encoded), no empty segments, no
/// backslashes, no control characters, no encoded separators, no scheme-like first segment.
[[nodiscard]] TENSORFETCH_API Result<void> check_shard_name(std::string_view name);

}  // namespace tensorfetch
