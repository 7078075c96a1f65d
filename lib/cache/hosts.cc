// SPDX-License-Identifier: Apache-2.0
#include "cache/hosts.h"

#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "base/fs.h"
#include "format/json_depth.h"

namespace tensorfetch::detail {

namespace {

constexpr std::uint64_t kMaxHostsFile = 1 << 20;
constexpr const char* kHostsFile = "hosts.json";

// The file's hosts object, or an empty one when it is missing or not what it should be.
nlohmann::json read_hosts(const CacheDir& cache) {
  auto text = read_file_at(cache.root_fd(), kHostsFile, kMaxHostsFile, cache.path());
  if (!text) return nlohmann::json::object();
  auto parsed = parse_json(*text, ErrorCode::Io, kHostsFile);
  if (!parsed || !parsed->is_object() || !parsed->contains("hosts") || !(*parsed)["hosts"].is_object()) {
    return nlohmann::json::object();
  }
  return (*parsed)["hosts"];
}

std::optional<HostMemory> entry(const nlohmann::json& e) {
  if (!e.is_object()) return std::nullopt;
  auto n = e.find("connections");
  auto r = e.find("rate");
  if (n == e.end() || !n->is_number_unsigned() || r == e.end() || !r->is_number()) return std::nullopt;
  HostMemory m{n->get<std::size_t>(), r->get<double>()};
  if (m.connections == 0 || m.connections > 4096 || !std::isfinite(m.rate) || m.rate < 0) return std::nullopt;
  return m;
}

}  // namespace

std::optional<HostMemory> recall_host(const CacheDir& cache, std::string_view authority) {
  if (cache.root_fd() < 0) return std::nullopt;
  const auto hosts = read_hosts(cache);
  auto it = hosts.find(std::string(authority));
  return it == hosts.end() ? std::nullopt : entry(*it);
}

Result<void> remember_host(const CacheDir& cache, std::string_view authority, const HostMemory& memory) {
  if (cache.root_fd() < 0) return {};
  auto hosts = read_hosts(cache);
  const std::string key(authority);
  if (auto it = hosts.find(key); it != hosts.end()) {
    // Unchanged (the same number; the rate within a tenth): nothing to write.
    if (auto old = entry(*it); old && old->connections == memory.connections &&
                               std::abs(old->rate - memory.rate) <= 0.1 * std::max(old->rate, memory.rate)) {
      return {};
    }
  }
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  hosts[key] = {{"connections", memory.connections}, {"rate", std::round(memory.rate)}, {"updated", now}};
  // Forget the hosts not updated for longest beyond the limit.
  const auto updated = [](const nlohmann::json& e) {
    auto u = e.is_object() ? e.find("updated") : e.end();
    return e.is_object() && u != e.end() && u->is_number() ? u->get<double>() : 0.0;
  };
  while (hosts.size() > kMaxRememberedHosts) {
    auto oldest = hosts.begin();
    for (auto it = hosts.begin(); it != hosts.end(); ++it) {
      if (updated(*it) < updated(*oldest)) oldest = it;
    }
    hosts.erase(oldest);
  }
  const nlohmann::json doc = {{"version", 1}, {"hosts", hosts}};
  return write_file_atomically_at(cache.root_fd(), kHostsFile, doc.dump(1) + "\n", cache.modes().file, cache.path());
}

}  // namespace tensorfetch::detail
