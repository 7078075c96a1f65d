// SPDX-License-Identifier: Apache-2.0
// Private: the layout of a new file from tensors given by view, so that a writer of a million
// tensors need not copy every name and shape into OutputTensor values first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>

#include "tensorfetch/writer.hpp"

namespace tensorfetch::detail {

/// A tensor to lay out; `name` and `shape` must stay valid during the call.
struct OutputTensorView {
  std::string_view name;
  DType dtype = DType::U8;
  std::span<const std::uint64_t> shape;
};

/// As `layout_file`, for the `count` tensors `at(0) ... at(count - 1)` (each may be asked for
/// more than once). Time and memory linear in the tensors.
[[nodiscard]] Result<FileLayout> layout_file_views(std::size_t count,
                                                   const std::function<OutputTensorView(std::size_t)>& at,
                                                   const std::optional<Metadata>& metadata);

}  // namespace tensorfetch::detail
