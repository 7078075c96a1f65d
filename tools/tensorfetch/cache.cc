// SPDX-License-Identifier: Apache-2.0
// `tensorfetch cache ls | verify | rm | prune`.
#include <algorithm>
#include <ctime>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "escape.h"
#include "progress.h"

namespace tensorfetch::cli {

namespace {

// A retired blob's name (`ID.retired-...`, see `CacheEntry::retired`).
bool is_retired_id(const std::string& id) { return id.find(".retired-") != std::string::npos; }

int list(const CacheOptions& o) {
  auto entries = cache_list(o.dir, o.shared);
  if (!entries) return report(entries.error());
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : *entries) {
      out.push_back({{"id", e.id},
                     {"url", e.url},
                     {"size", e.size},
                     {"present", e.present},
                     {"disk_bytes", e.disk_bytes},
                     {"complete", e.complete},
                     {"sha256", e.sha256 ? nlohmann::json(*e.sha256) : nlohmann::json(nullptr)},
                     {"last_used", e.last_used},
                     {"in_use", e.in_use},
                     {"origin", e.origin},
                     {"retired", e.retired}});
    }
    std::cout << out.dump(2) << '\n';
    return 0;
  }
  std::uint64_t disk = 0;
  std::cout << std::left << std::setw(83) << "BLOB" << std::setw(11) << "SIZE" << std::setw(9) << "PRESENT"
            << std::setw(11) << "ON DISK" << std::setw(18) << "LAST USED" << "URL\n";
  for (const auto& e : *entries) {
    disk += e.disk_bytes;
    char when[32] = "-";
    std::time_t t = e.last_used;
    if (std::tm tm{}; localtime_r(&t, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.0f%%", e.size ? 100.0 * static_cast<double>(e.present) / static_cast<double>(e.size) : 100.0);
    std::cout << std::setw(83) << escape_text(e.id) << std::setw(11) << human_bytes(static_cast<double>(e.size)) << std::setw(9)
              << (e.retired ? std::string("retired") : e.complete ? std::string("done") : std::string(pct)) << std::setw(11)
              << human_bytes(static_cast<double>(e.disk_bytes)) << std::setw(18) << when << escape_text(e.url)
              << (e.in_use ? "  (in use)" : "") << '\n';
  }
  std::cout << entries->size() << (entries->size() == 1 ? " blob, " : " blobs, ") << human_bytes(static_cast<double>(disk))
            << " on disk in " << escape_text(cache_root(o.dir)) << '\n';
  const auto retired = std::count_if(entries->begin(), entries->end(), [](const CacheEntry& e) { return e.retired; });
  if (retired > 0) {
    std::cout << retired << (retired == 1 ? " retired blob" : " retired blobs")
              << " (stale bytes of files rewritten on their server, never served): `tensorfetch cache prune` removes "
              << (retired == 1 ? "it" : "them") << '\n';
  }
  return 0;
}

int verify(const CacheOptions& o) {
  std::vector<std::string> ids = o.ids;
  if (ids.empty()) {
    auto entries = cache_list(o.dir, o.shared);
    if (!entries) return report(entries.error());
    for (const auto& e : *entries) ids.push_back(e.id);
  }
  int code = 0;
  for (const auto& id : ids) {
    if (is_retired_id(id)) {  // nothing in it is served, so nothing to verify
      std::cout << escape_text(id) << ": retired (stale bytes, never served)\n";
      continue;
    }
    auto r = cache_verify(id, o.dir, o.shared);
    if (!r) {
      code = std::max(code, report(r.error()));
    } else {
      std::cout << escape_text(id) << ": ok\n";
    }
  }
  return code;
}

int remove(const CacheOptions& o) {
  if (o.ids.empty()) return report(Error{ErrorCode::InvalidArgument, "cache rm: name the blobs to remove (see cache ls)"});
  int code = 0;
  for (const auto& id : o.ids) {
    if (auto r = cache_remove(id, o.dir, o.shared); !r) {
      code = std::max(code, report(r.error()));
    } else {
      std::cout << "removed " << escape_text(id) << '\n';
    }
  }
  return code;
}

int prune(const CacheOptions& o) {
  auto r = cache_prune(o.max_size, o.dir, o.shared);
  if (!r) return report(r.error());
  std::cout << "removed " << r->removed << (r->removed == 1 ? " blob" : " blobs") << " ("
            << human_bytes(static_cast<double>(r->freed_bytes)) << "); " << human_bytes(static_cast<double>(r->remaining_bytes))
            << " left";
  if (r->skipped_in_use) std::cout << "; " << r->skipped_in_use << " in use, kept";
  std::cout << '\n';
  return 0;
}

}  // namespace

int run_cache(const CacheOptions& options) {
  if (options.action == "ls") return list(options);
  if (options.action == "verify") return verify(options);
  if (options.action == "rm") return remove(options);
  if (options.action == "prune") return prune(options);
  return report(Error{ErrorCode::InvalidArgument, "cache: unknown action '" + options.action + "' (ls, verify, rm, prune)"});
}

}  // namespace tensorfetch::cli
