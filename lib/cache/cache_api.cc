// SPDX-License-Identifier: Apache-2.0
// The public cache API (tensorfetch/cache.hpp) over the private blob store.
#include <algorithm>

#include "cache/blob.h"
#include "tensorfetch/cache.hpp"

namespace tensorfetch {

namespace {

detail::Sharing sharing_of(std::optional<bool> shared) {
  if (!shared) return detail::default_cache_sharing();
  return *shared ? detail::Sharing::Group : detail::Sharing::Private;
}

// The cache, opened (never created: listing or removing makes nothing); nothing when absent.
Result<std::shared_ptr<const detail::CacheDir>> open_cache(const std::string& dir, std::optional<bool> shared) {
  auto cache = detail::CacheDir::open(cache_root(dir), sharing_of(shared), false);
  if (!cache && cache.error().code == ErrorCode::NotFound) return std::shared_ptr<const detail::CacheDir>();
  return cache;
}

}  // namespace

std::string cache_root(const std::string& dir) { return dir.empty() ? detail::default_cache_root() : dir; }

Result<std::vector<CacheEntry>> cache_list(const std::string& dir, std::optional<bool> shared) {
  auto cache = open_cache(dir, shared);
  if (!cache) return fail(cache.error());
  std::vector<CacheEntry> out;
  if (!*cache) return out;
  auto blobs = detail::list_blobs(**cache);
  if (!blobs) return fail(blobs.error());
  for (auto& b : *blobs) {
    out.push_back(CacheEntry{b.id, b.meta.url, b.meta.size, b.present, b.disk_bytes, b.meta.complete, b.meta.sha256,
                             b.last_used, b.in_use, b.meta.origin.value_or(""), b.retired});
  }
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.id < b.id;
  });
  return out;
}

Result<void> cache_verify(const std::string& id, const std::string& dir, std::optional<bool> shared) {
  auto cache = open_cache(dir, shared);
  if (!cache) return fail(cache.error());
  if (!*cache) return fail(ErrorCode::NotFound, cache_root(dir) + "/blobs/" + id + ": no such cache blob");
  return detail::verify_blob(**cache, id);
}

Result<void> cache_remove(const std::string& id, const std::string& dir, std::optional<bool> shared) {
  auto cache = open_cache(dir, shared);
  if (!cache) return fail(cache.error());
  if (!*cache) return fail(ErrorCode::NotFound, cache_root(dir) + "/blobs/" + id + ": no such cache blob");
  return detail::remove_blob(**cache, id);
}

Result<PruneReport> cache_prune(std::uint64_t max_bytes, const std::string& dir, std::optional<bool> shared) {
  auto cache = open_cache(dir, shared);
  if (!cache) return fail(cache.error());
  PruneReport report;
  if (!*cache) return report;
  auto entries = cache_list(dir, shared);
  if (!entries) return fail(entries.error());
  for (const auto& e : *entries) report.remaining_bytes += e.disk_bytes;
  // Retired blobs first, whatever the limit (their bytes are never served), then the least
  // recently used.
  std::stable_partition(entries->begin(), entries->end(), [](const CacheEntry& e) { return e.retired; });
  for (const auto& e : *entries) {
    if (report.remaining_bytes <= max_bytes && !e.retired) break;
    if (e.in_use) {
      ++report.skipped_in_use;
      continue;
    }
    auto r = detail::remove_blob(**cache, e.id);
    if (!r) {
      if (r.error().code == ErrorCode::Busy) {  // became in use meanwhile
        ++report.skipped_in_use;
        continue;
      }
      return fail(r.error());
    }
    ++report.removed;
    report.freed_bytes += e.disk_bytes;
    report.remaining_bytes -= e.disk_bytes;
  }
  return report;
}

}  // namespace tensorfetch
