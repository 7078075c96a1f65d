// SPDX-License-Identifier: Apache-2.0
// Snapshot manifests: what a remote checkpoint was made of (files, sizes, ETags, every file's
// header, the index and config.json), recorded in the cache after a fetch under the location's
// key (and its commit's), so that a later open at that commit skips the header requests, and
// one with HF_HUB_OFFLINE=1 needs no request at all. Headers live here, not in cache blobs:
// only the files whose bytes were wanted have blobs.
//
//   ROOT/snapshots/KEY.json   KEY = sha256 of (endpoint, repo, revision, path) or of the URL
//
// Version 1 manifests (before headers were recorded here) read the header from the file's blob.

#include <fcntl.h>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_internal.h"
#include "format/json_depth.h"

namespace tensorfetch {

namespace {

constexpr std::uint64_t kMaxManifestSize = std::uint64_t{16} << 30;

nlohmann::json opt(const std::optional<std::string>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::optional<std::string> opt_string(const nlohmann::json& j, const char* name) {
  if (!j.contains(name) || !j[name].is_string()) return std::nullopt;
  return j[name].get<std::string>();
}

std::string le64(std::uint64_t n) {
  std::string out(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

Result<std::string> snapshot_text(const Checkpoint::Impl& impl) {
  nlohmann::json files = nlohmann::json::array();
  for (std::size_t i = 0; i < impl.files.size(); ++i) {
    const auto& f = impl.files[i].info;
    const auto& rf = impl.files[i].remote;
    const std::uint64_t header_bytes = impl.files[i].header.data_offset();
    if (rf.prefix.size() < header_bytes) {
      return fail(ErrorCode::Io, f.path + ": the header is not in memory; the snapshot manifest was not written");
    }
    // The header text (valid UTF-8 JSON: the parser checked it), without its 8-byte length.
    files.push_back({{"path", f.path},
                     {"size", f.size},
                     {"etag", opt(f.etag)},
                     {"url", f.url},
                     {"resolve_url", rf.resolve_url},
                     {"range_etag", opt(rf.range_etag)},
                     {"linked_etag", opt(rf.linked_etag)},
                     {"header_bytes", header_bytes},
                     {"header", std::string_view(rf.prefix).substr(8, static_cast<std::size_t>(header_bytes) - 8)}});
  }
  nlohmann::json j = {{"version", 2},
                      {"location", impl.location},
                      {"commit", opt(impl.commit)},
                      {"index_name", impl.index ? nlohmann::json(impl.index_name) : nlohmann::json(nullptr)},
                      {"index_text", impl.index ? nlohmann::json(impl.index_text) : nlohmann::json(nullptr)},
                      {"config_json", opt(impl.config_json)},
                      {"files", files}};
  std::string text;
  try {
    text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict) + "\n";
  } catch (const nlohmann::json::exception& e) {
    return fail(ErrorCode::Io, impl.location + ": cannot record the snapshot manifest: " + e.what());
  }
  return text;
}

Result<void> write_snapshot(Checkpoint::Impl& impl) {
  auto text = snapshot_text(impl);
  if (!text) return fail(text.error());
  auto cache = impl.open_cache(true);
  if (!cache) return fail(cache.error());
  for (const auto& key : impl.snapshot_keys) {
    auto r = detail::write_file_atomically_at((*cache)->snapshots_fd(), key + ".json", *text, (*cache)->modes().file,
                                              (*cache)->snapshots_path());
    if (!r) return fail(r.error().with_context("the snapshot manifest"));
  }
  return {};
}

Result<void> open_offline(Checkpoint::Impl& impl, const std::vector<std::string>& keys) {
  auto not_recorded = [&] {
    return fail(ErrorCode::NotFetched, "offline (HF_HUB_OFFLINE): no earlier fetch of this location is recorded in " +
                                           impl.cache_root + "; run once online (with a commit-pinned revision to "
                                           "reuse it for that commit)");
  };
  auto cache = impl.open_cache(false);
  if (!cache) {
    if (cache.error().code == ErrorCode::NotFound) return not_recorded();
    return fail(cache.error());
  }
  if ((*cache)->snapshots_fd() < 0) return not_recorded();
  std::string text, path;
  for (const auto& key : keys) {
    path = (*cache)->snapshots_path() + "/" + key + ".json";
    auto t = detail::read_file_at((*cache)->snapshots_fd(), key + ".json", kMaxManifestSize, (*cache)->snapshots_path());
    if (!t) {
      if (t.error().code == ErrorCode::NotFound) continue;
      return fail(t.error());
    }
    text = std::move(*t);
    break;
  }
  if (text.empty()) return not_recorded();
  if (auto r = load_snapshot(impl, text, path, *cache); !r) return r;
  impl.requests = 0;
  return {};
}

Result<void> load_snapshot(Checkpoint::Impl& impl, std::string_view text, const std::string& path,
                           const std::shared_ptr<const detail::CacheDir>& cache) {
  auto bad = [&](const std::string& why) { return fail(ErrorCode::Io, path + ": unreadable snapshot manifest: " + why); };
  auto parsed = detail::parse_json(text, ErrorCode::Io, "it");
  if (!parsed) return bad(parsed.error().message);
  nlohmann::json& j = *parsed;
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array()) return bad("not a manifest");
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
      if (auto r = check_shard_name(f.path); !r) return bad(r.error().message);
      f.size = jf.at("size").get<std::uint64_t>();
      f.etag = opt_string(jf, "etag");
      f.url = jf.at("url").get<std::string>();
      RemoteFileState rf;
      rf.resolve_url = jf.at("resolve_url").get<std::string>();
      rf.range_etag = opt_string(jf, "range_etag");
      rf.linked_etag = opt_string(jf, "linked_etag");
      const std::uint64_t header_bytes = jf.at("header_bytes").get<std::uint64_t>();
      if (header_bytes < 8 || header_bytes > f.size) return bad(f.path + ": header_bytes out of range");
      if (auto header = opt_string(jf, "header")) {
        if (header->size() != header_bytes - 8) return bad(f.path + ": the header's length disagrees with header_bytes");
        rf.prefix = le64(header->size()) + *header;
      } else {
        // Version 1: the header was recorded in the file's blob (found again only if its identity
        // did not change: not for sha256 blobs, now kept per origin).
        if (!cache) return bad(f.path + ": no header recorded");
        const auto id = detail::blob_identity(rf.resolve_url, rf.linked_etag, rf.range_etag, f.size);
        auto blob = detail::Blob::open(cache, id, f.size, rf.resolve_url, f.etag, detail::BlobCreate::No);
        if (!blob) {
          if (blob.error().code == ErrorCode::NotFound) {
            return fail(ErrorCode::NotFetched, "offline: " + f.path + " is no longer in the cache (" + id.id + ")");
          }
          return fail(blob.error().with_context(f.path));
        }
        auto held = (*blob)->holds(ByteRange{0, header_bytes});
        if (!held) return fail(held.error().with_context(f.path));
        if (!*held) {
          return fail(ErrorCode::NotFetched, "offline: the header of " + f.path + " is not in the cache");
        }
        auto map = (*blob)->map();
        if (!map) return fail(map.error());
        rf.prefix.assign(reinterpret_cast<const char*>(map->data()), static_cast<std::size_t>(header_bytes));
        rf.blob = std::move(*blob);
      }
      auto header = parser.parse_file_prefix(std::as_bytes(std::span(rf.prefix)), f.size);
      if (!header) return fail(header.error().with_context(f.path + " (" + path + ")"));
      impl.files.push_back(OpenFile{std::move(f), std::move(*header), {}, std::move(rf)});
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  return {};
}

}  // namespace tensorfetch
