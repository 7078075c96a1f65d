// SPDX-License-Identifier: Apache-2.0
// Private: building a Header without parsing one (tests, and tools inside the library).
#pragma once

#include <span>

#include "tensorfetch/format.hpp"

namespace tensorfetch::detail {

/// Builds headers directly, bypassing the parser and its validation. Not part of the public
/// API: a Header outside the library comes from the parser only.
class HeaderBuilder {
 public:
  /// Replaces the tensors of `header` with copies of `tensors` (their names and shapes copied
  /// into the header's storage; expected sorted by begin) and indexes them by name; refuses
  /// duplicate names (`DuplicateKey`, leaving the header without tensors). No other validation.
  [[nodiscard]] static Result<void> set_tensors(Header& header, std::span<const TensorInfo> tensors);
};

}  // namespace tensorfetch::detail
