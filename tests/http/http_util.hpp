// SPDX-License-Identifier: Apache-2.0
// Shared helpers of the test server's suite: a temporary repo root, clients, raw sockets.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "hub_server.hpp"
#include "support/bytes.hpp"
#include "support/files.hpp"

namespace hubtest {

namespace fs = std::filesystem;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::Options;
using tensorfetch::testing::RequestRecord;

// Shared with every suite (tests/support).
using tftest::read_file;
using tftest::sha256_hex;
using tftest::TempDir;

// Repos of the test root:
//   org/llama-tiny-sharded   the reference checkpoint (3 shards + index + configs)
//   org/small                model.safetensors (generated, 100000 bytes), config.json,
//                            sub/dir/notes.txt, a `.refs` with refs/pr/1
//   datasets/org/ds          data/train.safetensors (4096 bytes), README.md
inline constexpr const char* kSharded = "org/llama-tiny-sharded";
inline constexpr const char* kSmall = "org/small";
inline constexpr const char* kDataset = "datasets/org/ds";
inline constexpr const char* kPr1Commit = "1111111111111111111111111111111111111111";
inline constexpr std::uint64_t kSmallModelSize = 100000;

struct Root {
  Root();
  TempDir dir{"tf-http"};
  fs::path path() const { return dir / "root"; }
  fs::path file(const std::string& repo, const std::string& rel) const {
    return path() / repo / rel;
  }
};

// The reference checkpoints; fails the test when TENSORFETCH_REFERENCE_DIR holds none.
fs::path reference_dir();

// A server on a fresh root (latency etc. through the options).
struct Fixture {
  explicit Fixture(Options opt = {});
  ~Fixture();
  Root root;
  std::unique_ptr<HubServer> server;
  httplib::Client hub() const;  // keep-alive client to the Hub host name
  httplib::Client cdn() const;  // keep-alive client to the CDN host name
  // Resolves a file and returns the CDN path+query from the Location header (fails the test
  // if the answer is not a 302).
  std::string cdn_target(const std::string& repo, const std::string& file);
};

// Splits "http://host:port/path?q" → path?q.
std::string target_of(const std::string& url);

// One request on a fresh TCP connection; reads until the peer closes or `timeout` passes.
struct RawResult {
  std::string data;     // everything received (headers + body)
  bool closed = false;  // the server closed the connection
  double elapsed_ms = 0;
  std::string headers() const { return data.substr(0, data.find("\r\n\r\n") + 4); }
  std::string body() const {
    auto p = data.find("\r\n\r\n");
    return p == std::string::npos ? std::string() : data.substr(p + 4);
  }
};
RawResult raw_request(int port, const std::string& request,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));
std::string raw_get(const std::string& host, const std::string& target,
                    const std::vector<std::string>& extra_headers = {});

// Records of the log whose target contains `needle`.
std::vector<RequestRecord> find(const std::vector<RequestRecord>& log, const std::string& needle);

}  // namespace hubtest
