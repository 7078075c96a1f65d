// SPDX-License-Identifier: Apache-2.0
/// @file
/// Writing safetensors: the layout of a new file (its header bytes and where each tensor's
/// data goes) and the text of an index. Pure functions; the caller writes the bytes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensorfetch/byte_range.hpp"
#include "tensorfetch/dtype.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"
#include "tensorfetch/format.hpp"

namespace tensorfetch {

/// A tensor to be written. A plain value.
struct OutputTensor {
  std::string name;                  ///< unique, not `__metadata__`
  DType dtype = DType::U8;           ///< element type
  std::vector<std::uint64_t> shape;  ///< dimensions; empty for a scalar
};

/// The layout of a file to write. A plain value.
struct FileLayout {
  /// The first bytes of the file: the 8-byte length prefix and the JSON header padded with
  /// spaces to a multiple of 8.
  std::string prefix;
  /// For each input tensor, in input order, where its bytes go in the file (absolute).
  std::vector<ByteRange> tensor_ranges;
  /// Total size of the file.
  std::uint64_t file_size = 0;
};

/// Lays out `tensors` contiguously in the order given, with `__metadata__` when present.
/// Refuses duplicate names, the name `__metadata__`, sizes that are not whole bytes, and
/// overflow. The result re-parses with `parse_header` to the same tensors.
[[nodiscard]] TENSORFETCH_API Result<FileLayout> layout_file(std::span<const OutputTensor> tensors,
                                             const std::optional<Metadata>& metadata);

/// The text of a `model.safetensors.index.json`: `metadata` (`total_size`, and
/// `total_parameters` when given) and the `weight_map` of tensor name to shard file.
[[nodiscard]] TENSORFETCH_API std::string build_index_json(const std::map<std::string, std::string>& weight_map,
                                           std::uint64_t total_size,
                                           std::optional<std::uint64_t> total_parameters);

}  // namespace tensorfetch
