// SPDX-License-Identifier: Apache-2.0
// Shared by the http suites: the in-process Hub-like server over one repo that holds one
// model.safetensors (and, if asked, a config.json), with the open options a test of it starts
// from: the server's endpoint, no token, a cache and a Hugging Face cache of the fixture's own,
// online, fast retries.
#pragma once

#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "hub_server.hpp"
#include "support/files.hpp"
#include "tensorfetch/tensorfetch.hpp"

namespace tftest {

/// The server and its temporary root; stopped when the fixture goes.
struct OneFileRepo {
  TempDir tmp;
  std::string file;  ///< the model.safetensors bytes served
  std::unique_ptr<tensorfetch::testing::HubServer> server;

  OneFileRepo(const std::string& prefix, const std::string& repo, std::string model, bool config_json)
      : tmp(prefix), file(std::move(model)) {
    write_file(tmp / "root" / repo / "model.safetensors", file);
    if (config_json) write_file(tmp / "root" / repo / "config.json", "{\"model_type\": \"test\"}\n");
    std::filesystem::create_directories(tmp / "hf-home" / "hub");
    tensorfetch::testing::Options o;
    o.root = tmp / "root";
    server = std::make_unique<tensorfetch::testing::HubServer>(o);
    server->start();
  }
  OneFileRepo(const OneFileRepo&) = delete;
  OneFileRepo& operator=(const OneFileRepo&) = delete;
  ~OneFileRepo() { server->stop(); }

  /// The tensorfetch cache the open options name.
  [[nodiscard]] std::filesystem::path cache() const { return tmp / "cache"; }

  /// Open options for the server: its endpoint, no token, the fixture's caches, online, 10 ms
  /// retry backoff.
  [[nodiscard]] tensorfetch::OpenOptions open_options() const {
    tensorfetch::OpenOptions o;
    o.endpoint = server->endpoint();
    o.token = std::string();
    o.cache_dir = cache().string();
    o.hf_hub_cache = (tmp / "hf-home" / "hub").string();
    o.offline = false;
    o.retry_backoff_ms = 10;
    return o;
  }
};

/// Distinct client ports of `server`'s CDN requests of tensor data (not a header window, which
/// starts at byte 0): the TCP connections a fetch used.
inline std::size_t data_connections(const tensorfetch::testing::HubServer& server) {
  std::set<int> ports;
  for (const auto& r : server.log()) {
    if (r.kind == "cdn" && !r.range.starts_with("bytes=0-")) ports.insert(r.client_port);
  }
  return ports.size();
}

}  // namespace tftest
