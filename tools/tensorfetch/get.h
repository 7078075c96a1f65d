// SPDX-License-Identifier: Apache-2.0
// The steps of `tensorfetch get`, shared by its plain and its --mpi form: check the output,
// choose the selection (names, globs, slices, or a tensor-parallel rank's), write it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "commands.h"

namespace tensorfetch::cli {

/// Where `get` writes: a file, a directory of shards, or standard output.
struct GetOutput {
  std::string path;          ///< -o without trailing '/'
  bool to_stdout = false;    ///< -o -
  WriteOptions write;        ///< sharded output, cancellation, metadata (set by `choose` for --tp)
};

/// Checks, before anything is fetched, that `output` can be written; decides file or directory.
Result<GetOutput> prepare_output(const std::string& output);

/// The selection `options` asks for from `ckpt`: rank `tp`'s slices (and sets the
/// `__metadata__` of the output in `write_options`), the names and slices given, or every tensor.
Result<std::vector<Selection>> choose(const Checkpoint& ckpt, const GetOptions& options, const std::optional<TpRank>& tp,
                                      const TpRules& rules, WriteOptions& write_options);

/// Writes `selection` to `output` (a file, a directory of shards, or a stream).
Result<void> write_output(const Checkpoint& ckpt, std::span<const Selection> selection, const GetOutput& output);

/// Bytes of tensor data in `selection`.
std::uint64_t selected_bytes(std::span<const Selection> selection);

}  // namespace tensorfetch::cli
