// SPDX-License-Identifier: Apache-2.0
// The public cache API (tensorfetch/cache.hpp) over the private blob store.
#include <algorithm>

#include "cache/blob.h"
#include "tensorfetch/cache.hpp"

namespace tensorfetch {

std::string cache_root(const std::string& dir) { return dir.empty() ? detail::default_cache_root() : dir; }

Result<std::vector<CacheEntry>> cache_list(const std::string& dir) {
  auto blobs = detail::list_blobs(cache_root(dir));
  if (!blobs) return fail(blobs.error());
  std::vector<CacheEntry> out;
  for (auto& b : *blobs) {
    out.push_back(CacheEntry{b.id, b.meta.url, b.meta.size, b.present, b.disk_bytes, b.meta.complete, b.meta.sha256,
                             b.last_used, b.in_use});
  }
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.id < b.id;
  });
  return out;
}

Result<void> cache_verify(const std::string& id, const std::string& dir) {
  return detail::verify_blob(cache_root(dir), id);
}

Result<void> cache_remove(const std::string& id, const std::string& dir) {
  return detail::remove_blob(cache_root(dir), id);
}

Result<PruneReport> cache_prune(std::uint64_t max_bytes, const std::string& dir) {
  auto entries = cache_list(dir);
  if (!entries) return fail(entries.error());
  PruneReport report;
  for (const auto& e : *entries) report.remaining_bytes += e.disk_bytes;
  for (const auto& e : *entries) {  // least recently used first
    if (report.remaining_bytes <= max_bytes) break;
    if (e.in_use) {
      ++report.skipped_in_use;
      continue;
    }
    auto r = detail::remove_blob(cache_root(dir), e.id);
    if (!r) {
      if (r.error().code == ErrorCode::InvalidArgument) {  // became in use meanwhile
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
