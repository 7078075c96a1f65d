// SPDX-License-Identifier: Apache-2.0
// What the object-store suites (cli_s3, cli_azure) share: the tree of checkpoints they upload to
// their emulators (one file, an index with two shards, loose files without an index, a prefix
// with no checkpoint), and the fixture process (a Python proxy in front of the emulator) they
// start and read the request log of.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.hpp"
#include "support/process.hpp"

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

/// The upload arguments (`NAME=DIR`) of the tree of make_store_tree, written under `tmp`, as
/// bucket or container `models` and each of `more` (the same tree).
inline std::vector<std::string> store_tree_uploads(const TempDir& tmp, const std::vector<std::string>& more = {}) {
  make_store_tree(tmp / "tree");
  std::vector<std::string> out{"models=" + (tmp / "tree").string()};
  for (const auto& name : more) out.push_back(name + "=" + (tmp / "tree").string());
  return out;
}

/// A store fixture: `/usr/bin/python3 SOURCE_DIR/SCRIPT --root R --ready F --log L ARGS...`, a
/// proxy on a free port in front of an emulator, started in a temporary directory (`{dir}` in
/// an argument stands for that directory, e.g. for a file the fixture writes). The
/// constructor waits (up to `start_seconds`) for it to write its port to the ready file, and
/// FAILs with its stderr if it exits or times out first; the destructor stops it (SIGTERM, then
/// SIGKILL after 10 s). `what` names it in that failure.
class StoreFixture {
 public:
  StoreFixture(const std::string& what, const std::string& script, const std::vector<std::string>& args,
               int start_seconds)
      : dir_("tf-store") {
    std::vector<std::string> argv{tftest::required_env("TENSORFETCH_SOURCE_DIR") + "/" + script,
                                  "--root", (dir_ / "root").string(), "--ready", (dir_ / "ready").string(),
                                  "--log", log().string()};
    for (std::string a : args) {
      for (auto at = a.find("{dir}"); at != std::string::npos; at = a.find("{dir}", at)) {
        a.replace(at, 5, dir_.path().string());
      }
      argv.push_back(std::move(a));
    }
    child_.emplace("/usr/bin/python3", argv, tftest::ChildIo{"", (dir_ / "out").string(), (dir_ / "err").string()});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(start_seconds);
    while (!fs::exists(dir_ / "ready")) {
      if (!child_->running() || std::chrono::steady_clock::now() > deadline) {
        FAIL("the " << what << " fixture did not start: " << tftest::try_read_file(dir_ / "err").value_or(""));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    port_ = std::stoi(read_file(dir_ / "ready"));
  }
  ~StoreFixture() {
    if (child_) child_->signal(SIGTERM);
    if (child_ && !child_->wait_for(std::chrono::seconds(10))) child_->signal(SIGKILL);
  }
  StoreFixture(const StoreFixture&) = delete;
  StoreFixture& operator=(const StoreFixture&) = delete;

  /// The proxy's port on 127.0.0.1.
  [[nodiscard]] int port() const { return port_; }
  /// The fixture's temporary directory (files it writes besides the log, e.g. a SAS).
  [[nodiscard]] const fs::path& dir() const { return dir_.path(); }
  /// The request log: one JSON object a line.
  [[nodiscard]] fs::path log() const { return dir_ / "requests.jsonl"; }

  /// The requests logged since the last clear, one JSON object each.
  [[nodiscard]] std::vector<json> requests() const {
    std::vector<json> out;
    std::ifstream in(log());
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) out.push_back(json::parse(line));
    }
    return out;
  }
  /// Empties the request log.
  void clear() const { std::ofstream(log(), std::ios::trunc); }

 private:
  TempDir dir_;
  std::optional<tftest::Child> child_;
  int port_ = 0;
};

}  // namespace clitest
