// SPDX-License-Identifier: Apache-2.0
// The tree of checkpoints the object-store suites (cli_s3, cli_azure) upload to their emulators:
// one file, an index with two shards, loose files without an index, a prefix with no checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include "cli_util.hpp"

namespace clitest {

/// A checkpoint of `n` U8 tensors of `size` bytes each, named layers.I.weight (I from `first`),
/// tensor I's bytes `tftest::pattern_bytes(size, seed + I)`.
inline std::string store_checkpoint(int first, int n, std::size_t size, std::uint32_t seed) {
  json header = json::object();
  std::string data;
  for (int i = first; i < first + n; ++i) {
    header["layers." + std::to_string(i) + ".weight"] = {
        {"dtype", "U8"}, {"shape", {size}}, {"data_offsets", {data.size(), data.size() + size}}};
    data += tftest::pattern_bytes(size, seed + static_cast<std::uint32_t>(i));
  }
  return make_safetensors(header.dump(), data);
}

/// Writes under `root`: single/model.safetensors (4 tensors of 300,000 bytes, seed 1); sharded/
/// (an index and two shards of 2 tensors of 200,000 bytes, seed 2); loose/ (two .safetensors
/// files of one 1000-byte tensor, seed 3, and a text file); empty/ (no checkpoint).
inline void make_store_tree(const fs::path& root) {
  tftest::write_file(root / "single/model.safetensors", store_checkpoint(0, 4, 300'000, 1));
  tftest::write_file(root / "sharded/model-00001-of-00002.safetensors", store_checkpoint(0, 2, 200'000, 2));
  tftest::write_file(root / "sharded/model-00002-of-00002.safetensors", store_checkpoint(2, 2, 200'000, 2));
  json index = {{"metadata", {{"total_size", 800'000}}},
                {"weight_map",
                 {{"layers.0.weight", "model-00001-of-00002.safetensors"},
                  {"layers.1.weight", "model-00001-of-00002.safetensors"},
                  {"layers.2.weight", "model-00002-of-00002.safetensors"},
                  {"layers.3.weight", "model-00002-of-00002.safetensors"}}}};
  tftest::write_file(root / "sharded/model.safetensors.index.json", index.dump());
  tftest::write_file(root / "loose/part-a.safetensors", store_checkpoint(0, 1, 1000, 3));
  tftest::write_file(root / "loose/part-b.safetensors", store_checkpoint(1, 1, 1000, 3));
  tftest::write_file(root / "loose/notes.txt", "not a checkpoint");
  tftest::write_file(root / "empty/readme.md", "nothing here");
}

}  // namespace clitest
