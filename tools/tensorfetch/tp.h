// SPDX-License-Identifier: Apache-2.0
// The CLI's tensor-parallel helpers (`get --tp R/N`, `inspect --tp N`): the rules file, the
// bytes each rank needs, and the `__metadata__` a rank's output carries.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensorfetch/tensorfetch.hpp"

namespace tensorfetch::cli {

/// Reads and parses the rules file at `path` (none: no rules) and sets `expert_parallel`.
Result<TpRules> load_tp_rules(const std::optional<std::string>& path, bool expert_parallel);

/// What one rank needs.
struct RankBytes {
  std::size_t rank = 0;
  std::size_t tensors = 0;            ///< tensors it holds (whole or sliced)
  std::uint64_t bytes = 0;            ///< all of them
  std::uint64_t sliced_bytes = 0;     ///< of which slices
  std::uint64_t whole_bytes = 0;      ///< of which whole tensors (replicated, or its own experts)
};

/// The bytes every rank of a group of `world` needs.
Result<std::vector<RankBytes>> rank_bytes(const Checkpoint& ckpt, std::size_t world, const TpRules& rules);

/// `__metadata__` entries of a rank's output: tp_rank, tp_world, tp_rule (the convention) and
/// tp_slices (a JSON object: name -> the slice taken, for the sliced tensors).
Metadata tp_metadata(const std::optional<TpModel>& model, TpRank rank, const TpRules& rules,
                     std::span<const Selection> selection);

}  // namespace tensorfetch::cli
