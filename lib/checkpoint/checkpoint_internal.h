// SPDX-License-Identifier: Apache-2.0
// Private: the state behind tensorfetch::Checkpoint, shared by its translation units.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/mapped_file.h"
#include "tensorfetch/checkpoint.hpp"

namespace tensorfetch {

/// Opens a remote checkpoint (Hub repo or http(s) URL) into `impl`. In remote.cc.
[[nodiscard]] Result<void> open_remote(Checkpoint::Impl& impl, std::string_view location,
                                       const OpenOptions& options);

struct Checkpoint::Impl {
  std::string location;                          // as given
  std::string root;                              // directory the file names are relative to
  std::string index_name;                        // index file name, when sharded
  std::optional<ShardIndex> index;               // when sharded
  std::vector<CheckpointFile> files;             // names relative to root
  std::vector<detail::MappedFile> maps;          // one per file
  std::vector<Header> headers;                   // one per file
  std::vector<TensorRef> tensors;                // natural name order
  std::unordered_map<std::string_view, std::size_t> by_name;  // into tensors
  bool remote = false;
  std::optional<std::string> commit;             // X-Repo-Commit
  std::optional<std::string> config_json;        // config.json, when found
  std::uint64_t requests = 0;                    // HTTP requests sent by open

  /// Indexes `tensors` of every header by natural name order; checks the index when sharded.
  [[nodiscard]] Result<void> finish_open();

  [[nodiscard]] std::string local_path(std::size_t file) const {
    return root.empty() ? files[file].path : root + "/" + files[file].path;
  }
};

}  // namespace tensorfetch
