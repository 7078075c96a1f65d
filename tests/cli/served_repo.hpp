// SPDX-License-Identifier: Apache-2.0
// For the CLI suites that link the in-process Hub-like server (`server` in meson.build): a
// checkpoint directory served as the Hub repo org/llama, with a cache, an HF home and a work
// directory of the test's own, and the environment cleared of what would reach another Hub or
// cache. Header-only (the other suites do not link the server).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "hub_server.hpp"

namespace clitest {

/// `reference` (a checkpoint directory) served as org/llama by a started HubServer; every
/// member is the test's own and goes with the object. Not thread-safe.
struct ServedRepo {
  fs::path reference;
  TempDir root, cache, hf_home, work;
  tftest::ScopedEnv env;
  std::unique_ptr<tensorfetch::testing::HubServer> server;

  explicit ServedRepo(fs::path ref) : reference(std::move(ref)) {
    fs::create_directories(root / "org" / "llama");
    for (const auto& e : fs::directory_iterator(reference)) {
      fs::copy_file(e.path(), root.path() / "org" / "llama" / e.path().filename());
    }
    for (const char* v : {"HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "CURL_CA_BUNDLE",
                          "XDG_CACHE_HOME"}) {
      env.set(v, std::nullopt);
    }
    env.set("HF_HOME", hf_home.path().string());
    env.set("TENSORFETCH_CACHE", cache.path().string());
    tensorfetch::testing::Options o;
    o.root = root.path();
    server = std::make_unique<tensorfetch::testing::HubServer>(o);
    server->start();
  }
  ~ServedRepo() { server->stop(); }
  ServedRepo(const ServedRepo&) = delete;
  ServedRepo& operator=(const ServedRepo&) = delete;

  /// `args` plus `--endpoint` and the server's endpoint.
  [[nodiscard]] std::vector<std::string> with_endpoint(std::vector<std::string> args) const {
    args.push_back("--endpoint");
    args.push_back(server->endpoint());
    return args;
  }
};

}  // namespace clitest
