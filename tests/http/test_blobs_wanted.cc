// SPDX-License-Identifier: Apache-2.0
// Cache blobs only for what is wanted (issue 14, item 6, the cache part): a 2-tensor fetch from a
// generated repo of 300 shards creates exactly the blobs of the 2 shards holding those tensors;
// every header is recorded in the snapshot manifest, so an offline open (no request at all)
// still lists every tensor and serves the fetched ones, and an online open at the same commit
// asks for no shard header again.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hub_server.hpp"
#include "support/bytes.hpp"
#include "support/files.hpp"
#include "tensorfetch/tensorfetch.hpp"

namespace fs = std::filesystem;
using namespace tensorfetch;
using tensorfetch::testing::HubServer;

namespace {

using tftest::le64;
using tftest::sha256_hex;
using tftest::TempDir;
using tftest::write_file;

constexpr int kShards = 300;
constexpr std::uint64_t kElems = 64;  // F32 [64]: 256 bytes per tensor

std::string shard_name(int i) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, kShards);
  return buf;
}

// Shard i holds layers.i.a and layers.i.b, their bytes a pattern of i.
std::string shard_bytes(int i) {
  nlohmann::ordered_json h;
  const std::string p = "layers." + std::to_string(i) + ".";
  h[p + "a"] = {{"dtype", "F32"}, {"shape", {kElems}}, {"data_offsets", {0, kElems * 4}}};
  h[p + "b"] = {{"dtype", "F32"}, {"shape", {kElems}}, {"data_offsets", {kElems * 4, kElems * 8}}};
  std::string text = h.dump();
  while (text.size() % 8) text.push_back(' ');
  std::string data(kElems * 8, '\0');
  for (std::size_t k = 0; k < data.size(); ++k) data[k] = static_cast<char>((k * 31 + static_cast<std::size_t>(i) * 7) & 0xff);
  return le64(text.size()) + text + data;
}

std::vector<std::string> blob_dirs(const fs::path& cache) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache / "blobs", ec)) out.push_back(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("fetch: 2 tensors of a 300-shard repo create exactly the 2 blobs of their shards; offline re-open "
          "lists every tensor and serves them with no request",
          "[fetch][blobs][shards]") {
  TempDir tmp;
  const fs::path root = tmp.path() / "root";
  nlohmann::json index = {{"metadata", {{"total_size", kShards * kElems * 8}}}, {"weight_map", nlohmann::json::object()}};
  for (int i = 0; i < kShards; ++i) {
    write_file(root / "org" / "many" / shard_name(i), shard_bytes(i));
    index["weight_map"]["layers." + std::to_string(i) + ".a"] = shard_name(i);
    index["weight_map"]["layers." + std::to_string(i) + ".b"] = shard_name(i);
  }
  write_file(root / "org" / "many" / "model.safetensors.index.json", index.dump());
  testing::Options so;
  so.root = root;
  so.threads = 512;  // one per open connection: the open uses ~128 (header_connections, two hosts)
  HubServer server(so);
  server.start();

  OpenOptions o;
  o.endpoint = server.endpoint();
  o.token = std::string();
  o.cache_dir = (tmp.path() / "cache").string();
  o.hf_hub_cache = (tmp.path() / "hf-hub").string();
  o.offline = false;
  o.header_window = 4096;
  const std::string commit = server.commit("org/many");
  const std::string location = "hf://org/many@" + commit;
  std::vector<Selector> want{{"layers.7.b", std::nullopt}, {"layers.123.a", std::nullopt}};
  {
    auto c = Checkpoint::open(location, o);
    INFO((c ? std::string() : c.error().message));
    REQUIRE(c);
    REQUIRE(c->files().size() == kShards);
    auto sel = c->select(want);
    REQUIRE(sel);
    auto st = c->fetch(*sel);
    INFO((st ? std::string() : st.error().message));
    REQUIRE(st);
  }
  std::set<std::string> ids;
  for (const auto& id : blob_dirs(tmp.path() / "cache")) ids.insert(id.substr(0, 64));
  CHECK(ids == std::set<std::string>{sha256_hex(shard_bytes(7)), sha256_hex(shard_bytes(123))});

  // Offline: not one request, every tensor listed, the fetched ones served exactly.
  server.clear_log();
  OpenOptions off = o;
  off.offline = true;
  auto c = Checkpoint::open(location, off);
  INFO((c ? std::string() : c.error().message));
  REQUIRE(c);
  CHECK(c->tensors().size() == 2 * kShards);
  CHECK(c->requests() == 0);
  for (const auto& [name, shard, offset] : {std::tuple{"layers.7.b", 7, kElems * 4}, std::tuple{"layers.123.a", 123, std::uint64_t{0}}}) {
    const TensorRef* t = c->find(name);
    REQUIRE(t);
    auto v = c->view(*t);
    INFO(name << ": " << (v ? std::string() : v.error().message));
    REQUIRE(v);
    const std::string bytes = shard_bytes(shard);
    const std::uint64_t base = bytes.size() - kElems * 8;
    CHECK(std::string(reinterpret_cast<const char*>(v->bytes.data()), v->bytes.size()) ==
          bytes.substr(base + offset, kElems * 4));
  }
  auto other = c->view(*c->find("layers.8.a"));
  REQUIRE_FALSE(other);
  CHECK(other.error().code == ErrorCode::NotFetched);
  std::vector<Selector> more{{"layers.8.a", std::nullopt}};
  auto sel = c->select(more);
  REQUIRE(sel);
  auto refused = c->fetch(*sel);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == ErrorCode::NotFetched);
  CHECK(blob_dirs(tmp.path() / "cache").size() == 2);  // offline creates nothing
  CHECK(server.log().empty());

  // Online at the same commit: the index only; no shard header is asked for again.
  auto again = Checkpoint::open(location, o);
  REQUIRE(again);
  std::size_t cdn = 0;
  for (const auto& r : server.log()) cdn += r.kind == "cdn" ? 1 : 0;
  CHECK(cdn == 0);
  CHECK(again->requests() <= 3);
  server.stop();
}
