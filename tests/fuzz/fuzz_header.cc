// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the safetensors header parser.
//
// The input is used twice:
//  1. as a whole file: parse_file_prefix(input, input size);
//  2. as a header without its prefix: parse_header(input[8:], input size + X), where X is
//     the little-endian u64 in the first 8 bytes (saturating), so X is the data size the
//     header must describe. Seeds of the form LE64(data_size) + JSON are valid headers.
// Every accepted header must satisfy the format's invariants, agree with an independent
// JSON parser (nlohmann), round-trip through layout_file + parse_file_prefix, and never be
// recognised as another format (lib/format/sniff.h); a HeaderParser reused across all inputs
// must answer exactly as a fresh parse does.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/sniff.h"
#include "fuzz_check.h"
#include "tensorfetch/dtype.hpp"
#include "tensorfetch/format.hpp"
#include "tensorfetch/writer.hpp"

namespace tf = tensorfetch;

namespace {

std::span<const std::byte> as_bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// The name as a std::string, whatever string type TensorInfo uses.
std::string name_of(const tf::TensorInfo& t) { return std::string(std::string_view(t.name)); }

std::string describe(const tf::TensorInfo& t) {
  return "tensor '" + name_of(t) + "' [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
         ")";
}

// Format invariants of an accepted header of a file of `file_size` bytes.
void check_invariants(const tf::Header& h, std::uint64_t file_size) {
  FUZZ_CHECK(h.header_size <= tf::kMaxHeaderSize, std::to_string(h.header_size));
  FUZZ_CHECK(tf::kPrefixSize + h.header_size <= file_size, "header runs past the file");
  FUZZ_CHECK(tf::kPrefixSize + h.header_size + h.data_size == file_size,
             "8 + N + data_size != file size");
  FUZZ_CHECK(h.data_offset() == tf::kPrefixSize + h.header_size, "data_offset");
  std::uint64_t expected = 0;
  const auto& ts = h.tensors();
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const auto& t = ts[i];
    FUZZ_CHECK(name_of(t) != "__metadata__", "tensor named __metadata__");
    FUZZ_CHECK(t.begin == expected, describe(t) + ": not contiguous, expected begin " +
                                        std::to_string(expected));
    FUZZ_CHECK(t.begin <= t.end, describe(t));
    expected = t.end;
    // elements x bits / 8 == nbytes, computed here with overflow checks.
    std::uint64_t elements = 1;
    for (auto d : t.shape) {
      FUZZ_CHECK(!__builtin_mul_overflow(elements, d, &elements),
                 describe(t) + ": element count overflows");
    }
    FUZZ_CHECK(t.num_elements() == elements, describe(t) + ": num_elements");
    std::uint64_t bits = 0;
    FUZZ_CHECK(!__builtin_mul_overflow(elements, std::uint64_t{tf::dtype_bits(t.dtype)}, &bits),
               describe(t) + ": bit count overflows");
    FUZZ_CHECK(bits % 8 == 0, describe(t) + ": not whole bytes");
    FUZZ_CHECK(bits / 8 == t.nbytes(), describe(t) + ": nbytes != elements * bits / 8");
    const auto* found = h.find(t.name);
    FUZZ_CHECK(found == &t, describe(t) + ": find() does not return it");
    const auto r = h.file_range(t);
    FUZZ_CHECK(r.offset == h.data_offset() + t.begin && r.length == t.nbytes(), "file_range");
    FUZZ_CHECK(r.end() <= file_size, describe(t) + ": past the end of the file");
  }
  FUZZ_CHECK(expected == h.data_size, "last end " + std::to_string(expected) +
                                          " != data_size " + std::to_string(h.data_size));
}

// The accepted header bytes must be JSON for an independent parser too, with the same
// tensors and metadata (this also catches a duplicate key the parser let through).
void check_against_nlohmann(const tf::Header& h, std::span<const std::byte> header_bytes) {
  const auto* p = reinterpret_cast<const char*>(header_bytes.data());
  FUZZ_CHECK(!header_bytes.empty() && p[0] == '{', "accepted header does not start with '{'");
  auto j = nlohmann::json::parse(p, p + header_bytes.size(), nullptr,
                                 /*allow_exceptions=*/false);
  FUZZ_CHECK(!j.is_discarded(), "accepted header is not JSON for nlohmann");
  FUZZ_CHECK(j.is_object(), "accepted header is not a JSON object");
  std::size_t tensor_keys = 0;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) {
        FUZZ_CHECK(!h.metadata.has_value(), "null __metadata__ parsed as present");
        continue;
      }
      FUZZ_CHECK(value.is_object() && h.metadata.has_value(), "__metadata__ lost");
      FUZZ_CHECK(value.size() == h.metadata->size(), "__metadata__ size differs");
      for (const auto& [mk, mv] : value.items()) {
        auto it = h.metadata->find(mk);
        FUZZ_CHECK(it != h.metadata->end(), "__metadata__ key '" + mk + "' lost");
        FUZZ_CHECK(mv.is_string() && mv.get<std::string>() == it->second,
                   "__metadata__ value for '" + mk + "' differs");
      }
      continue;
    }
    ++tensor_keys;
    const auto* t = h.find(key);
    FUZZ_CHECK(t != nullptr, "key '" + key + "' is not a tensor of the header");
    FUZZ_CHECK(value.is_object(), key);
    const auto& dt = value.at("dtype");
    FUZZ_CHECK(dt.is_string() && dt.get<std::string>() == tf::to_string(t->dtype),
               describe(*t) + ": dtype differs");
    const auto& shape = value.at("shape");
    FUZZ_CHECK(shape.is_array() && shape.size() == t->shape.size(),
               describe(*t) + ": shape differs");
    for (std::size_t i = 0; i < shape.size(); ++i) {
      FUZZ_CHECK(shape[i].is_number_unsigned() || shape[i].is_number_integer(),
                 describe(*t) + ": shape holds a non-integer");
      FUZZ_CHECK(!shape[i].is_number_float(), describe(*t) + ": float in shape");
      FUZZ_CHECK(shape[i].get<std::uint64_t>() == t->shape[i], describe(*t) + ": dim differs");
    }
    const auto& off = value.at("data_offsets");
    FUZZ_CHECK(off.is_array() && off.size() == 2, describe(*t) + ": data_offsets");
    FUZZ_CHECK(!off[0].is_number_float() && !off[1].is_number_float() &&
                   off[0].is_number() && off[1].is_number(),
               describe(*t) + ": non-integer offsets");
    FUZZ_CHECK(off[0].get<std::uint64_t>() == t->begin && off[1].get<std::uint64_t>() == t->end,
               describe(*t) + ": offsets differ");
  }
  if (!j.contains("__metadata__")) FUZZ_CHECK(!h.metadata.has_value(), "phantom __metadata__");
  FUZZ_CHECK(tensor_keys == h.tensors().size(), "tensor count differs from nlohmann's " +
                                                    std::to_string(tensor_keys) +
                                                    " (duplicate key accepted?)");
}

// layout_file of the same tensors and metadata re-parses to the same header.
void check_round_trip(const tf::Header& h) {
  std::vector<tf::OutputTensor> out;
  out.reserve(h.tensors().size());
  for (const auto& t : h.tensors()) {
    out.push_back({name_of(t), t.dtype, {t.shape.begin(), t.shape.end()}});
  }
  auto layout = tf::layout_file(out, h.metadata);
  if (!layout && layout.error().code == tf::ErrorCode::Overflow &&
      h.data_size > UINT64_MAX / 2) {
    return;  // a data size near 2^64 plus a (larger) new header can overflow: fine
  }
  FUZZ_CHECK(layout.has_value(), "layout_file refused a valid header: " + layout.error().message);
  const auto& prefix = layout->prefix;
  FUZZ_CHECK(prefix.size() >= tf::kPrefixSize && prefix.size() % 8 == 0,
             "prefix size " + std::to_string(prefix.size()) + " is not a multiple of 8");
  FUZZ_CHECK(layout->file_size == prefix.size() + h.data_size,
             "layout file_size " + std::to_string(layout->file_size));
  FUZZ_CHECK(layout->tensor_ranges.size() == out.size(), "tensor_ranges size");
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(prefix.data()),
                                         prefix.size());
  auto again = tf::parse_file_prefix(bytes, layout->file_size);
  FUZZ_CHECK(again.has_value(), "written header does not re-parse: " + again.error().message);
  FUZZ_CHECK(again->header_size + tf::kPrefixSize == prefix.size(), "re-parsed header_size");
  FUZZ_CHECK(again->data_size == h.data_size, "re-parsed data_size");
  FUZZ_CHECK(again->tensors().size() == h.tensors().size(), "re-parsed tensor count");
  FUZZ_CHECK(again->metadata.value_or(tf::Metadata{}) == h.metadata.value_or(tf::Metadata{}),
             "re-parsed metadata differs");
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto& t = h.tensors()[i];
    const auto* u = again->find(t.name);
    FUZZ_CHECK(u != nullptr, describe(t) + ": lost by the round trip");
    FUZZ_CHECK(u->dtype == t.dtype && std::ranges::equal(u->shape, t.shape) && u->begin == t.begin &&
                   u->end == t.end,
               describe(t) + ": changed by the round trip to " + describe(*u));
    FUZZ_CHECK(layout->tensor_ranges[i] == again->file_range(*u),
               describe(t) + ": layout range differs from the re-parsed one");
  }
  check_invariants(*again, layout->file_size);
}

void check_accepted(const tf::Header& h, std::span<const std::byte> header_bytes,
                    std::uint64_t file_size) {
  FUZZ_CHECK(h.header_size == header_bytes.size(), "header_size");
  check_invariants(h, file_size);
  check_against_nlohmann(h, header_bytes);
  check_round_trip(h);
}

// A HeaderParser reused across inputs must give exactly what a fresh parse gives: no state
// from an earlier (possibly larger, possibly failed) parse may leak into a later one.
void check_same(const tf::Result<tf::Header>& cold, const tf::Result<tf::Header>& warm) {
  FUZZ_CHECK(cold.has_value() == warm.has_value(),
             std::string("a reused HeaderParser ") + (warm ? "accepted" : "refused") +
                 " what a fresh one " + (cold ? "accepted" : "refused") + ": " +
                 (cold ? warm.error().message : cold.error().message));
  if (!cold) {
    FUZZ_CHECK(cold.error().code == warm.error().code &&
                   cold.error().message == warm.error().message,
               "reused parser error '" + warm.error().message + "' != '" +
                   cold.error().message + "'");
    return;
  }
  FUZZ_CHECK(cold->header_size == warm->header_size && cold->data_size == warm->data_size &&
                 cold->metadata == warm->metadata &&
                 cold->tensors().size() == warm->tensors().size(),
             "reused parser gives another header");
  for (std::size_t i = 0; i < cold->tensors().size(); ++i) {
    const auto &a = cold->tensors()[i], &b = warm->tensors()[i];
    FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && std::ranges::equal(a.shape, b.shape) &&
                   a.begin == b.begin && a.end == b.end,
               describe(a) + ": reused parser gives " + describe(b));
  }
}

tf::HeaderParser& reused_parser() {
  static tf::HeaderParser parser;
  return parser;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = as_bytes(data, size);

  // 1. The input is a whole file (the bytes after the header may be parsed in place as
  //    simdjson's padding).
  auto h = tf::parse_file_prefix(bytes, size);
  if (h) {
    auto n = tf::parse_header_size(bytes, size);
    FUZZ_CHECK(n.has_value() && *n == h->header_size, "parse_header_size disagrees");
    check_accepted(*h, bytes.subspan(tf::kPrefixSize, h->header_size), size);
    // A valid file is never taken for another format, whatever its first bytes.
    auto other = tf::detail::sniff_other_format(bytes);
    FUZZ_CHECK(!other, "a valid safetensors file is recognised as " + (other ? other->what : ""));
  } else {
    FUZZ_CHECK(!h.error().message.empty(), "error without a message");
    // Another format is named only for a refused length prefix or a missing '{'.
    const auto code = h.error().code;
    FUZZ_CHECK(!h.error().message.starts_with("this is ") ||
                   code == tf::ErrorCode::HeaderTooLarge || code == tf::ErrorCode::FileTooSmall ||
                   code == tf::ErrorCode::HeaderStart,
               "another format named for " + std::string(tf::to_string(code)) + ": " + h.error().message);
  }
  check_same(h, reused_parser().parse_file_prefix(bytes, size));

  // 2. The input after 8 bytes is a header; the first 8 bytes give the data size.
  if (size >= tf::kPrefixSize) {
    std::uint64_t extra = 0;
    for (int i = 7; i >= 0; --i) extra = (extra << 8) | data[i];
    std::uint64_t file_size = 0;
    if (__builtin_add_overflow(std::uint64_t{size}, extra, &file_size)) file_size = UINT64_MAX;
    const auto header_bytes = bytes.subspan(tf::kPrefixSize);
    auto h2 = tf::parse_header(header_bytes, file_size);
    if (h2) check_accepted(*h2, header_bytes, file_size);
    check_same(h2, reused_parser().parse(header_bytes, file_size));
  }
  return 0;
}
