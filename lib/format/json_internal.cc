// SPDX-License-Identifier: Apache-2.0
#include "format/json_internal.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include <vector>

namespace tensorfetch::detail {

namespace {
// Below this, 4 KiB pages are fine.
constexpr std::size_t kAdviseThreshold = std::size_t{4} << 20;

// simdjson's depth limit counts a scalar inside the innermost container as a level, but not an
// empty array or object: with max_depth kMaxJsonDepth + 1 it refuses every document nested past
// kMaxJsonDepth except one whose level kMaxJsonDepth + 1 is an empty container. That one is
// found here, on the parsed document's tape (one word per token; numbers take two), before
// anything else walks the document.
bool nested_deeper_than(const simdjson::dom::document& doc, std::size_t limit) {
  const std::uint64_t* tape = doc.tape.get();
  const std::uint64_t end = tape[0] & simdjson::internal::JSON_VALUE_MASK;  // the root's closing word
  std::size_t depth = 0;
  for (std::uint64_t i = 1; i < end; ++i) {
    switch (static_cast<char>(tape[i] >> 56)) {
      case '[':
      case '{':
        if (++depth > limit) return true;
        break;
      case ']':
      case '}':
        --depth;
        break;
      case 'l':
      case 'u':
      case 'd':
        ++i;  // the number's value word
        break;
      default:
        break;
    }
  }
  return false;
}
}  // namespace

Result<simdjson::dom::element> JsonParser::parse(std::span<const std::byte> bytes, ErrorCode code,
                                                 std::string_view what, std::size_t readable_after) {
  simdjson::dom::element doc;
  const std::size_t len = bytes.size();
  // The input in place when padding is readable after it, else a padded copy; the parser's
  // buffers sized up front; all large buffers huge-page-advised: with 4 KiB pages, first-touch
  // faults cost more than the parse itself on some VMs.
  const std::byte* input = bytes.data();
  if (readable_after < simdjson::SIMDJSON_PADDING) {
    if (padded_.size() < len + simdjson::SIMDJSON_PADDING) {
      padded_ = HugeBuffer(len + simdjson::SIMDJSON_PADDING);
    }
    if (len > 0) std::memcpy(padded_.data(), bytes.data(), len);
    input = padded_.data();
  }
  if (capacity_ < len || capacity_ == 0) {
    const std::size_t capacity = std::max<std::size_t>(len, 64);
    // The parser allocates its document lazily inside parse(); allocate it now so that its
    // buffers exist when they are advised.
    if (auto err = parser_.allocate(capacity, kMaxJsonDepth + 1); err || (err = parser_.doc.allocate(capacity))) {
      capacity_ = 0;
      return fail(code, std::string(what) + " cannot be parsed: " +
                            std::string(simdjson::error_message(err)));
    }
    if (capacity >= kAdviseThreshold) {
      advise_huge_pages(parser_.implementation->structural_indexes.get(), capacity * sizeof(std::uint32_t));
      advise_huge_pages(parser_.doc.tape.get(), capacity * sizeof(std::uint64_t));
      advise_huge_pages(parser_.doc.string_buf.get(), 5 * capacity / 3);
    }
    capacity_ = capacity;
  }
  const auto* data = reinterpret_cast<const std::uint8_t*>(input);
  auto err = parser_.parse(data, len, /*realloc_if_needed=*/false).get(doc);
  if (err == simdjson::DEPTH_ERROR || (!err && nested_deeper_than(parser_.doc, kMaxJsonDepth))) {
    return fail(code, std::string(what) + " nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) +
                          " levels (the reference parser's limit)");
  }
  if (err) {
    return fail(code, std::string(what) + " is not valid JSON: " +
                          std::string(simdjson::error_message(err)));
  }
  return doc;
}

namespace {

Result<void> check_object_keys(simdjson::dom::object obj, std::string_view where) {
  // Small objects (the common case: tensor entries) compare linearly; big ones hash.
  constexpr std::size_t kLinearLimit = 16;
  std::vector<std::string_view> small;
  std::unordered_set<std::string_view> big;
  bool use_hash = obj.size() > kLinearLimit;
  if (use_hash) big.reserve(obj.size());
  for (auto field : obj) {
    bool dup = false;
    if (use_hash) {
      dup = !big.insert(field.key).second;
    } else {
      dup = std::find(small.begin(), small.end(), field.key) != small.end();
      small.push_back(field.key);
    }
    if (dup) {
      return fail(ErrorCode::DuplicateKey,
                  "duplicate key " + quote_name(field.key) + " in " + std::string(where));
    }
    if (auto r = check_no_duplicate_keys(field.value, where); !r) return r;
  }
  return {};
}

}  // namespace

Result<void> check_no_duplicate_keys(simdjson::dom::element value, std::string_view where) {
  simdjson::dom::object obj;
  if (!value.get_object().get(obj)) return check_object_keys(obj, where);
  simdjson::dom::array arr;
  if (!value.get_array().get(arr)) {
    for (auto item : arr) {
      if (auto r = check_no_duplicate_keys(item, where); !r) return r;
    }
  }
  return {};
}

bool get_uint(simdjson::dom::element value, std::uint64_t& out) noexcept {
  // Only integer tokens: doubles (fractions, exponents), strings, ... are refused.
  if (!value.is_int64() && !value.is_uint64()) return false;
  return !value.get_uint64().get(out);  // fails for negative int64
}

std::string excerpt(simdjson::dom::element value) {
  std::string text = simdjson::minify(value);
  constexpr std::size_t kMax = 60;
  if (text.size() > kMax) {
    text.resize(kMax);
    text += "...";
  }
  std::string out = quote_name(text);  // escapes control characters
  out.front() = '`';
  out.back() = '`';
  return out;
}

}  // namespace tensorfetch::detail
