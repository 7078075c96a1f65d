// SPDX-License-Identifier: Apache-2.0
/// @file
/// Slicing a tensor like safetensors' `get_slice`: per leading dimension a `start:stop`
/// range or a single index, turned into the minimal list of contiguous byte ranges.
/// Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensorfetch/byte_range.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"
#include "tensorfetch/format.hpp"

namespace tensorfetch {

/// The selection along one dimension. A plain value.
struct DimSelect {
  /// True: a single index (the dimension is dropped from the result's shape).
  bool is_index = false;
  /// For an index: the index; negative counts from the end (-1 is the last), as Python.
  std::int64_t index = 0;
  /// For a range: first element (default 0). Must be non-negative.
  std::optional<std::uint64_t> start;
  /// For a range: one past the last element (default: the dimension's size).
  std::optional<std::uint64_t> stop;
};

/// A slice: selections for the leading dimensions; the remaining ones are taken whole.
struct SliceSpec {
  std::vector<DimSelect> dims;  ///< one per leading dimension
};

/// Parses the text of a slice, with or without brackets: `"[0:128, :, 3]"`, `"1:2"`,
/// `"-1"`. Steps (`a:b:c`) are refused.
[[nodiscard]] TENSORFETCH_API Result<SliceSpec> parse_slice(std::string_view text);

/// A tensor name with an optional slice, as given on the command line: `NAME[0:128,:]`.
struct NamedSlice {
  std::string name;                ///< the tensor name or glob
  std::optional<SliceSpec> slice;  ///< the slice, if brackets were given
};

/// Splits `NAME[SLICE]` at its last `[` when the text ends in `]`.
[[nodiscard]] TENSORFETCH_API Result<NamedSlice> parse_named_slice(std::string_view text);

/// What a slice of a tensor resolves to. A plain value.
struct SlicePlan {
  std::vector<std::uint64_t> shape;  ///< the result's shape
  /// Minimal contiguous ranges, relative to the tensor's first byte, ascending and
  /// non-adjacent; concatenated they are the result's bytes in row-major order.
  std::vector<ByteRange> ranges;
  std::uint64_t nbytes = 0;  ///< total of the ranges
};

/// Resolves a slice against a tensor. Errors (never wraparound): more selections than
/// dimensions, an index or bound outside the dimension, start > stop, and for sub-byte
/// dtypes a run that does not start and end on a byte boundary.
[[nodiscard]] TENSORFETCH_API Result<SlicePlan> plan_slice(const TensorInfo& tensor, const SliceSpec& slice);

/// Renders a slice back to text, e.g. `[0:128, :, 3]`.
[[nodiscard]] TENSORFETCH_API std::string to_string(const SliceSpec& slice);

}  // namespace tensorfetch
