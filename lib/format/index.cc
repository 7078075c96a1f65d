// SPDX-License-Identifier: Apache-2.0
// `*.safetensors.index.json` parsing and shard-name safety. No I/O.
#include <algorithm>
#include <cctype>
#include <map>

#include "base/text.h"
#include "format/index_internal.h"
#include "format/json_internal.h"
#include "tensorfetch/index.hpp"

namespace tensorfetch {

using detail::percent_decode;
using detail::quote_name;

namespace {

Result<void> unsafe(std::string_view name, const std::string& why) {
  return fail(ErrorCode::UnsafeShardName, "unsafe shard name " + quote_name(name) + ": " + why);
}

// The checks that apply to a name both as written and once percent-decoded.
Result<void> check_plain(std::string_view original, std::string_view name, bool decoded) {
  const char* form = decoded ? " (once percent-decoded)" : "";
  if (name.empty()) return unsafe(original, std::string("empty name") + form);
  if (name.front() == '/') return unsafe(original, std::string("absolute path") + form);
  for (char c : name) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return unsafe(original, std::string("control character") + form);
    if (c == '\\') return unsafe(original, std::string("backslash") + form);
  }
  // Segments: none empty, none "." or "..".
  std::size_t start = 0;
  bool first = true;
  while (true) {
    std::size_t slash = name.find('/', start);
    std::string_view seg = name.substr(start, slash == std::string_view::npos ? name.npos : slash - start);
    if (seg.empty()) return unsafe(original, std::string("empty path segment") + form);
    if (seg == "." || seg == "..") {
      return unsafe(original, "'" + std::string(seg) + "' path segment" + form);
    }
    if (first) {
      // Scheme-like first segment: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":" ...
      auto colon = seg.find(':');
      if (colon != std::string_view::npos) {
        return unsafe(original, std::string("scheme-like or drive-like first segment") + form);
      }
      first = false;
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return {};
}

}  // namespace

Result<void> check_shard_name(std::string_view name) {
  if (auto r = check_plain(name, name, false); !r) return r;
  std::string decoded = percent_decode(name);
  if (decoded != name) {
    // An encoded separator would change the segments once a server decodes it.
    const std::string lower = detail::ascii_lower(name);
    if (lower.find("%2f") != std::string::npos || lower.find("%5c") != std::string::npos) {
      return unsafe(name, "percent-encoded path separator");
    }
    if (decoded.find('%') != std::string::npos && percent_decode(decoded) != decoded) {
      return unsafe(name, "double percent-encoding");
    }
    if (auto r = check_plain(name, decoded, true); !r) return r;
  }
  return {};
}

Result<ShardIndex> parse_index(std::span<const std::byte> json) {
  if (json.size() > kMaxIndexSize) {
    return fail(ErrorCode::InvalidIndex, "index is " + std::to_string(json.size()) +
                                             " bytes, over the limit of " +
                                             std::to_string(kMaxIndexSize));
  }
  detail::JsonParser parser;
  auto doc = parser.parse(json, ErrorCode::InvalidIndex, "index");
  if (!doc) return fail(doc.error());
  if (auto r = detail::check_no_duplicate_keys(*doc, "the index"); !r) {
    return fail(ErrorCode::InvalidIndex, r.error().message);
  }
  simdjson::dom::object root;
  if (doc->get_object().get(root)) return fail(ErrorCode::InvalidIndex, "index must be a JSON object");

  ShardIndex out;
  simdjson::dom::element weight_map;
  if (root["weight_map"].get(weight_map)) {
    return fail(ErrorCode::InvalidIndex, "index has no 'weight_map'");
  }
  simdjson::dom::object wm;
  if (weight_map.get_object().get(wm)) {
    return fail(ErrorCode::InvalidIndex, "'weight_map' must be an object, got " + detail::excerpt(weight_map));
  }
  std::map<std::string, std::size_t, std::less<>> shard_ids;
  std::vector<std::pair<std::string, std::string>> entries;
  entries.reserve(wm.size());
  for (auto field : wm) {
    std::string_view shard;
    if (field.value.get_string().get(shard)) {
      return fail(ErrorCode::InvalidIndex, "weight_map entry " + quote_name(field.key) +
                                               " must name a shard file, got " +
                                               detail::excerpt(field.value));
    }
    if (auto r = check_shard_name(shard); !r) {
      return fail(r.error().with_context("weight_map entry " + quote_name(field.key)));
    }
    shard_ids.emplace(std::string(shard), 0);
    entries.emplace_back(std::string(field.key), std::string(shard));
  }
  if (entries.empty()) return fail(ErrorCode::InvalidIndex, "'weight_map' is empty");
  for (auto& [name, id] : shard_ids) {
    id = out.shards.size();
    out.shards.push_back(name);
  }
  out.weight_map.reserve(entries.size());
  for (auto& [tensor, shard] : entries) {
    out.weight_map.emplace_back(std::move(tensor), shard_ids.find(shard)->second);
  }
  std::sort(out.weight_map.begin(), out.weight_map.end());

  simdjson::dom::element metadata;
  if (!root["metadata"].get(metadata) && !metadata.is_null()) {
    simdjson::dom::object md;
    if (metadata.get_object().get(md)) {
      return fail(ErrorCode::InvalidIndex, "'metadata' must be an object, got " + detail::excerpt(metadata));
    }
    for (auto field : md) {
      std::uint64_t value = 0;
      const bool is_uint = detail::get_uint(field.value, value);
      if (field.key == "total_size" || field.key == "total_parameters") {
        if (!is_uint) {
          return fail(ErrorCode::InvalidIndex, "metadata." + std::string(field.key) +
                                                   " must be a non-negative integer, got " +
                                                   detail::excerpt(field.value));
        }
        (field.key == "total_size" ? out.total_size : out.total_parameters) = value;
        continue;
      }
      std::string_view text;
      if (!field.value.get_string().get(text)) {
        out.extra_metadata.emplace(std::string(field.key), std::string(text));
      } else if (field.value.is_number() || field.value.is_bool()) {
        out.extra_metadata.emplace(std::string(field.key), simdjson::minify(field.value));
      }
    }
  }
  return out;
}

}  // namespace tensorfetch

namespace tensorfetch::detail {

std::vector<std::uint64_t> estimate_shard_header_sizes(const ShardIndex& index) {
  std::vector<std::uint64_t> bytes(index.shards.size(), 0);
  for (const auto& [name, shard] : index.weight_map) bytes[shard] += name.size() + kHeaderBytesPerTensor;
  for (auto& b : bytes) {
    const std::uint64_t padded = (8 + b + kHeaderMetadataRoom) * 5 / 4;
    b = std::max(kMinHeaderEstimate, (padded + 4095) / 4096 * 4096);
  }
  return bytes;
}

}  // namespace tensorfetch::detail
