// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for `*.safetensors.index.json` parsing and the shard-name safety rules.
//
// The input is parsed as an index; an accepted index must hold only shard names that pass
// check_shard_name, sorted and unique, and a weight_map sorted by name that points into
// them, and must agree with an independent JSON parser (nlohmann). The input is also given
// to check_shard_name directly, and a name it accepts must pass independent checks.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "tensorfetch/index.hpp"

namespace tf = tensorfetch;

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One round of percent-decoding (invalid escapes are kept as they are).
std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

bool scheme_like(std::string_view segment) {
  // RFC 3986 scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":"
  auto colon = segment.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  if (!std::isalpha(static_cast<unsigned char>(segment[0]))) return false;
  for (std::size_t i = 1; i < colon; ++i) {
    const auto c = static_cast<unsigned char>(segment[i]);
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return false;
  }
  return true;
}

// Independent statement of the rules for a name check_shard_name accepted.
void check_safe_name(std::string_view name) {
  const std::string n(name);
  FUZZ_CHECK(!name.empty(), "empty shard name accepted");
  FUZZ_CHECK(name.front() != '/', "absolute shard name accepted: " + n);
  FUZZ_CHECK(name.find('\\') == std::string_view::npos, "backslash accepted: " + n);
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    FUZZ_CHECK(u >= 0x20 && u != 0x7f, "control character accepted: " + n);
  }
  std::size_t start = 0;
  bool first = true;
  while (true) {
    const auto slash = name.find('/', start);
    const auto segment = name.substr(start, slash == std::string_view::npos ? name.npos
                                                                            : slash - start);
    FUZZ_CHECK(!segment.empty(), "empty segment accepted: " + n);
    const std::string decoded = percent_decode(segment);
    FUZZ_CHECK(decoded.find('/') == std::string::npos && decoded.find('\\') == std::string::npos,
               "encoded separator accepted: " + n);
    FUZZ_CHECK(decoded != "." && decoded != "..", "dot segment accepted: " + n);
    FUZZ_CHECK(segment != "." && segment != "..", "dot segment accepted: " + n);
    if (first) FUZZ_CHECK(!scheme_like(segment), "scheme-like first segment accepted: " + n);
    first = false;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (tf::check_shard_name(text)) check_safe_name(text);

  auto index = tf::parse_index(bytes);
  if (!index) {
    FUZZ_CHECK(!index.error().message.empty(), "error without a message");
    return 0;
  }
  const auto& shards = index->shards;
  FUZZ_CHECK(std::is_sorted(shards.begin(), shards.end()), "shards not sorted");
  FUZZ_CHECK(std::adjacent_find(shards.begin(), shards.end()) == shards.end(),
             "shards not unique");
  for (const auto& s : shards) {
    auto ok = tf::check_shard_name(s);
    FUZZ_CHECK(ok.has_value(), "accepted index holds an unsafe shard name: " + s);
    check_safe_name(s);
  }
  std::vector<bool> used(shards.size(), false);
  const auto& wm = index->weight_map;
  for (std::size_t i = 0; i < wm.size(); ++i) {
    FUZZ_CHECK(wm[i].second < shards.size(), "weight_map points past the shards");
    used[wm[i].second] = true;
    if (i > 0) FUZZ_CHECK(wm[i - 1].first < wm[i].first, "weight_map not sorted and unique");
  }
  FUZZ_CHECK(std::find(used.begin(), used.end(), false) == used.end(),
             "a shard no tensor lives in");

  // The same document read by nlohmann has the same weight_map.
  auto j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!j.is_discarded(), "accepted index is not JSON for nlohmann");
  FUZZ_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
             "accepted index without a weight_map object");
  const auto& jwm = j["weight_map"];
  FUZZ_CHECK(jwm.size() == wm.size(), "weight_map size differs from nlohmann's " +
                                          std::to_string(jwm.size()) +
                                          " (duplicate key accepted?)");
  for (const auto& [name, shard] : wm) {
    FUZZ_CHECK(jwm.contains(name), "tensor '" + name + "' not in nlohmann's weight_map");
    FUZZ_CHECK(jwm[name].is_string() && jwm[name].get<std::string>() == shards[shard],
               "tensor '" + name + "': shard differs");
  }
  return 0;
}
