// SPDX-License-Identifier: Apache-2.0
// Snapshot manifests: what a remote checkpoint was made of (files, sizes, ETags, blobs, the
// index and config.json), recorded in the cache after a fetch under the location's key (and
// its commit's), so that a later open with HF_HUB_OFFLINE=1 needs no request at all.
//
//   ROOT/snapshots/KEY.json   KEY = sha256 of (endpoint, repo, revision, path) or of the URL

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_internal.h"

namespace tensorfetch {

namespace {

std::string snapshot_path(const std::string& root, const std::string& key) {
  return root + "/snapshots/" + key + ".json";
}

nlohmann::json opt(const std::optional<std::string>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::optional<std::string> opt_string(const nlohmann::json& j, const char* name) {
  if (!j.contains(name) || !j[name].is_string()) return std::nullopt;
  return j[name].get<std::string>();
}

}  // namespace

Result<void> write_snapshot(const Checkpoint::Impl& impl) {
  nlohmann::json files = nlohmann::json::array();
  for (std::size_t i = 0; i < impl.files.size(); ++i) {
    const auto& f = impl.files[i];
    const auto& rf = impl.rfiles[i];
    files.push_back({{"path", f.path},
                     {"size", f.size},
                     {"etag", opt(f.etag)},
                     {"url", f.url},
                     {"resolve_url", rf.resolve_url},
                     {"range_etag", opt(rf.range_etag)},
                     {"linked_etag", opt(rf.linked_etag)},
                     {"header_bytes", impl.headers[i].data_offset()}});
  }
  nlohmann::json j = {{"version", 1},
                      {"location", impl.location},
                      {"commit", opt(impl.commit)},
                      {"index_name", impl.index ? nlohmann::json(impl.index_name) : nlohmann::json(nullptr)},
                      {"index_text", impl.index ? nlohmann::json(impl.index_text) : nlohmann::json(nullptr)},
                      {"config_json", opt(impl.config_json)},
                      {"files", files}};
  const std::string text = j.dump() + "\n";
  std::error_code ec;
  std::filesystem::create_directories(impl.cache_root + "/snapshots", ec);
  if (ec) return fail(ErrorCode::Io, impl.cache_root + "/snapshots: cannot create: " + ec.message());
  for (const auto& key : impl.snapshot_keys) {
    auto r = detail::write_file_atomically(snapshot_path(impl.cache_root, key), text);
    if (!r) return fail(r.error().with_context("the snapshot manifest"));
  }
  return {};
}

Result<void> open_offline(Checkpoint::Impl& impl, const std::vector<std::string>& keys) {
  std::string text, path;
  for (const auto& key : keys) {
    path = snapshot_path(impl.cache_root, key);
    std::ifstream f(path, std::ios::binary);
    if (!f) continue;
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
    break;
  }
  if (text.empty()) {
    return fail(ErrorCode::NotFetched, "offline (HF_HUB_OFFLINE): no earlier fetch of this location is recorded in " +
                                           impl.cache_root + "; run once online (with a commit-pinned revision to "
                                           "reuse it for that commit)");
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  auto bad = [&](const std::string& why) { return fail(ErrorCode::Io, path + ": unreadable snapshot manifest: " + why); };
  if (j.is_discarded() || !j.is_object() || !j.contains("files") || !j["files"].is_array()) return bad("not a manifest");
  try {
    impl.commit = opt_string(j, "commit");
    impl.config_json = opt_string(j, "config_json");
    if (auto index_name = opt_string(j, "index_name")) {
      impl.index_name = *index_name;
      impl.index_text = j.at("index_text").get<std::string>();
      auto index = parse_index(std::as_bytes(std::span(impl.index_text)));
      if (!index) return fail(index.error().with_context(path));
      impl.index = std::move(*index);
    }
    HeaderParser parser;
    for (const auto& jf : j["files"]) {
      CheckpointFile f;
      f.path = jf.at("path").get<std::string>();
      f.size = jf.at("size").get<std::uint64_t>();
      f.etag = opt_string(jf, "etag");
      f.url = jf.at("url").get<std::string>();
      RemoteFileState rf;
      rf.resolve_url = jf.at("resolve_url").get<std::string>();
      rf.range_etag = opt_string(jf, "range_etag");
      rf.linked_etag = opt_string(jf, "linked_etag");
      const std::uint64_t header_bytes = jf.at("header_bytes").get<std::uint64_t>();
      auto id = detail::blob_identity(rf.resolve_url, rf.linked_etag ? rf.linked_etag : rf.range_etag, f.size);
      if (!std::filesystem::exists(impl.cache_root + "/blobs/" + id.id + "/meta.json")) {
        return fail(ErrorCode::NotFetched, "offline: " + f.path + " is no longer in the cache (" + id.id + ")");
      }
      auto blob = detail::Blob::open(impl.cache_root, id, f.size, rf.resolve_url, f.etag);
      if (!blob) return fail(blob.error().with_context(f.path));
      if (header_bytes > f.size || !(*blob)->has(ByteRange{0, header_bytes})) {
        return fail(ErrorCode::NotFetched, "offline: the header of " + f.path + " is not in the cache");
      }
      auto map = (*blob)->map();
      if (!map) return fail(map.error());
      auto header = parser.parse_file_prefix(map->first(static_cast<std::size_t>(header_bytes)), f.size);
      if (!header) return fail(header.error().with_context(f.path + " (cache " + (*blob)->data_path() + ")"));
      rf.blob = std::move(*blob);
      impl.files.push_back(std::move(f));
      impl.rfiles.push_back(std::move(rf));
      impl.headers.push_back(std::move(*header));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  impl.requests = 0;
  return {};
}

}  // namespace tensorfetch
