// SPDX-License-Identifier: Apache-2.0
// Private: what fetches learned about the hosts that served data (how many connections carried
// a host's data best, and the rate they carried), kept in the cache root's hosts.json so that
// the next fetch from that host starts there instead of probing again.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "cache/blob.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// What a fetch learned about a host's data path. A plain value.
struct HostMemory {
  std::size_t connections = 0;  ///< the number of connections the fetch settled on
  double rate = 0;              ///< the aggregate bytes per second they carried
};

/// Hosts remembered at most (the oldest are forgotten first).
inline constexpr std::size_t kMaxRememberedHosts = 256;

/// What `cache`'s hosts.json remembers of `authority` (`scheme://host:port`), if anything. A
/// missing or unreadable file is nothing remembered (it is advice, never needed).
[[nodiscard]] std::optional<HostMemory> recall_host(const CacheDir& cache, std::string_view authority);

/// Records `memory` for `authority` in `cache`'s hosts.json (replaced atomically; the last
/// writer of concurrent fetches wins). Written only when it changes what was remembered.
[[nodiscard]] Result<void> remember_host(const CacheDir& cache, std::string_view authority, const HostMemory& memory);

}  // namespace tensorfetch::detail
