// SPDX-License-Identifier: Apache-2.0
// Strict safetensors header parsing. Every refusal names the rule, the tensor and its
// offsets. No I/O.
#include <algorithm>
#include <cstring>
#include <string>

#include "format/huge_pages.h"
#include "format/json_internal.h"
#include "format/name_index.h"
#include "tensorfetch/format.hpp"

namespace tensorfetch {

using detail::quote_name;

namespace {
std::string offsets_text(std::uint64_t begin, std::uint64_t end) {
  return "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}
}  // namespace

std::uint64_t TensorInfo::num_elements() const noexcept {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

struct Header::Storage {
  detail::HugePageArena arena{64 << 10};  // declared first: destroyed last
  std::pmr::vector<TensorInfo> tensors{&arena};
  detail::NameIndex by_name{&arena};
};

Header::Header() : storage_(std::make_unique<Storage>()) {}
Header::Header(Header&&) noexcept = default;
Header& Header::operator=(Header&&) noexcept = default;
Header::~Header() = default;

const std::pmr::vector<TensorInfo>& Header::tensors() const noexcept {
  static const std::pmr::vector<TensorInfo> kEmpty;
  return storage_ ? storage_->tensors : kEmpty;
}

Result<void> Header::set_tensors(std::pmr::vector<TensorInfo> tensors) {
  if (!storage_) storage_ = std::make_unique<Storage>();
  storage_->tensors = std::move(tensors);
  return index_tensors();
}

Result<void> Header::index_tensors() {
  auto& tensors = storage_->tensors;
  auto& by_name = storage_->by_name;
  if (tensors.size() > detail::NameIndex::kMaxNames) {
    tensors.clear();
    return fail(ErrorCode::InvalidArgument, "too many tensors: " + std::to_string(tensors.size()));
  }
  by_name.reset(tensors.size());
  auto name_of = [&](std::size_t i) -> std::string_view { return tensors[i].name; };
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (auto other = by_name.insert(tensors[i].name, i, name_of)) {
      const auto& a = tensors[*other];
      const auto& b = tensors[i];
      std::string msg = "duplicate tensor name " + quote_name(b.name) + " (" +
                        offsets_text(a.begin, a.end) + " and " + offsets_text(b.begin, b.end) +
                        ")";
      tensors.clear();
      by_name.reset(0);
      return fail(ErrorCode::DuplicateKey, msg);
    }
  }
  return {};
}

const TensorInfo* Header::find(std::string_view name) const {
  if (!storage_) return nullptr;
  const auto& tensors = storage_->tensors;
  auto pos = storage_->by_name.find(name, [&](std::size_t i) -> std::string_view { return tensors[i].name; });
  return pos ? &tensors[*pos] : nullptr;
}

Result<std::uint64_t> parse_header_size(std::span<const std::byte> prefix,
                                        std::uint64_t file_size) {
  if (file_size < kPrefixSize || prefix.size() < kPrefixSize) {
    return fail(ErrorCode::FileTooSmall,
                "file is " + std::to_string(file_size) +
                    " bytes, smaller than the 8-byte header length prefix");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(prefix[i]);
  if (n > kMaxHeaderSize) {
    return fail(ErrorCode::HeaderTooLarge, "header length " + std::to_string(n) +
                                               " exceeds the limit of " +
                                               std::to_string(kMaxHeaderSize) + " bytes");
  }
  if (n > file_size - kPrefixSize) {
    return fail(ErrorCode::FileTooSmall,
                "header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(file_size) + " bytes; header would need bytes [8, " +
                    std::to_string(kPrefixSize + n) + "))");
  }
  return n;
}

namespace {

std::string describe(const TensorInfo& t) {
  return "tensor " + quote_name(t.name) + " (" + offsets_text(t.begin, t.end) + ")";
}

Result<Metadata> parse_metadata(simdjson::dom::element value) {
  auto obj = value.get_object();
  if (obj.error()) {
    return fail(ErrorCode::InvalidMetadata,
                "__metadata__ must be an object of strings or null, got " +
                    detail::excerpt(value));
  }
  if (auto r = detail::check_no_duplicate_keys(value, "__metadata__"); !r) return fail(r.error());
  Metadata out;
  for (auto field : obj.value_unsafe()) {
    std::string_view text;
    if (field.value.get_string().get(text)) {
      return fail(ErrorCode::InvalidMetadata, "__metadata__ value for key " + quote_name(field.key) +
                                                  " must be a string, got " +
                                                  detail::excerpt(field.value));
    }
    out.emplace(std::string(field.key), std::string(text));
  }
  return out;
}

// Parses one tensor entry into `t` (whose name is already set).
Result<void> parse_entry(simdjson::dom::element value, TensorInfo& t) {
  auto fail_entry = [&](ErrorCode code, const std::string& what) {
    return fail(code, "tensor " + quote_name(t.name) + ": " + what);
  };
  simdjson::dom::object obj;
  if (value.get_object().get(obj)) {
    return fail_entry(ErrorCode::InvalidEntry,
                      "entry must be an object, got " + detail::excerpt(value));
  }
  bool have_dtype = false, have_shape = false, have_offsets = false, has_unknown = false;
  std::uint64_t offsets[2] = {0, 0};
  for (auto field : obj) {
    const std::string_view key = field.key;
    if (key == "dtype") {
      if (have_dtype) return fail_entry(ErrorCode::DuplicateKey, "duplicate key 'dtype'");
      have_dtype = true;
      std::string_view name;
      if (field.value.get_string().get(name)) {
        return fail_entry(ErrorCode::InvalidDtype,
                          "dtype must be a string, got " + detail::excerpt(field.value));
      }
      auto dt = parse_dtype(name);
      if (!dt) return fail_entry(ErrorCode::InvalidDtype, "unknown dtype " + quote_name(name));
      t.dtype = *dt;
    } else if (key == "shape") {
      if (have_shape) return fail_entry(ErrorCode::DuplicateKey, "duplicate key 'shape'");
      have_shape = true;
      simdjson::dom::array arr;
      if (field.value.get_array().get(arr)) {
        return fail_entry(ErrorCode::InvalidShape,
                          "shape must be an array, got " + detail::excerpt(field.value));
      }
      t.shape.reserve(arr.size());
      for (auto dim : arr) {
        std::uint64_t d = 0;
        if (!detail::get_uint(dim, d)) {
          return fail_entry(ErrorCode::InvalidShape,
                            "shape must hold non-negative integers, got " +
                                detail::excerpt(field.value));
        }
        t.shape.push_back(d);
      }
    } else if (key == "data_offsets") {
      if (have_offsets) return fail_entry(ErrorCode::DuplicateKey, "duplicate key 'data_offsets'");
      have_offsets = true;
      simdjson::dom::array arr;
      std::size_t count = 0;
      bool ok = !field.value.get_array().get(arr);
      if (ok) {
        for (auto v : arr) {
          if (count >= 2 || !detail::get_uint(v, offsets[count])) {
            ok = false;
            break;
          }
          ++count;
        }
      }
      if (!ok || count != 2) {
        return fail_entry(ErrorCode::InvalidOffsets,
                          "data_offsets must be exactly two non-negative integers, got " +
                              detail::excerpt(field.value));
      }
    } else {
      has_unknown = true;  // ignored, but checked below for duplicate keys
    }
  }
  if (has_unknown) {
    if (auto r = detail::check_no_duplicate_keys(value, "tensor " + quote_name(t.name)); !r) return r;
  }
  if (!have_dtype) return fail_entry(ErrorCode::InvalidEntry, "missing 'dtype'");
  if (!have_shape) return fail_entry(ErrorCode::InvalidEntry, "missing 'shape'");
  if (!have_offsets) return fail_entry(ErrorCode::InvalidEntry, "missing 'data_offsets'");
  t.begin = offsets[0];
  t.end = offsets[1];
  if (t.begin > t.end) {
    return fail(ErrorCode::InvalidOffsets, describe(t) + ": begin is after end");
  }
  // elements x bits must be whole bytes and equal 8 x (end - begin); no overflow.
  std::uint64_t elements = 1;
  for (auto d : t.shape) {
    if (__builtin_mul_overflow(elements, d, &elements)) {
      return fail(ErrorCode::Overflow, describe(t) + ": element count of the shape overflows 64 bits");
    }
  }
  std::uint64_t bits = 0;
  if (__builtin_mul_overflow(elements, std::uint64_t{dtype_bits(t.dtype)}, &bits)) {
    return fail(ErrorCode::Overflow, describe(t) + ": size in bits of " + std::to_string(elements) +
                                         " elements overflows 64 bits");
  }
  if (bits % 8 != 0) {
    return fail(ErrorCode::SizeMismatch,
                describe(t) + ": " + std::to_string(elements) + " elements of " +
                    std::string(to_string(t.dtype)) + " are " + std::to_string(bits) +
                    " bits, not a whole number of bytes");
  }
  if (bits / 8 != t.end - t.begin) {
    return fail(ErrorCode::SizeMismatch,
                describe(t) + ": " + std::string(to_string(t.dtype)) + " with " +
                    std::to_string(elements) + " elements needs " + std::to_string(bits / 8) +
                    " bytes, but the offsets span " + std::to_string(t.end - t.begin));
  }
  return {};
}

// `-0` is an integer token with value 0 to simdjson's DOM, but the reference parser reads it as
// a float and refuses it in shape and data_offsets; so do we. The DOM keeps no token text, so
// when the header contains "-0" at all (rare), the on-demand API, which does, re-reads those
// fields. Returns the tensor whose shape or data_offsets holds a `-` token.
std::optional<std::string> tensor_with_negative_zero(std::span<const std::byte> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (text.find("-0") == std::string_view::npos) return std::nullopt;
  simdjson::padded_string padded(text);
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  simdjson::ondemand::object root;
  if (parser.iterate(padded).get(doc) || doc.get_object().get(root)) return std::nullopt;
  for (auto field : root) {
    std::string_view name;
    if (field.unescaped_key().get(name)) return std::nullopt;
    std::string tensor(name);
    simdjson::ondemand::object entry;
    if (field.value().get_object().get(entry)) continue;  // __metadata__ or already refused
    for (auto member : entry) {
      std::string_view key;
      if (member.unescaped_key().get(key)) return std::nullopt;
      if (key != "shape" && key != "data_offsets") continue;
      simdjson::ondemand::array arr;
      if (member.value().get_array().get(arr)) continue;
      for (auto v : arr) {
        std::string_view raw;
        if (v.raw_json_token().get(raw)) return std::nullopt;
        if (!raw.empty() && raw.front() == '-') return tensor;
      }
    }
  }
  return std::nullopt;
}

bool by_offsets(const TensorInfo& a, const TensorInfo& b) {
  return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
}

}  // namespace

struct HeaderParser::Impl {
  detail::JsonParser json;
};

HeaderParser::HeaderParser() : impl_(std::make_unique<Impl>()) {}
HeaderParser::HeaderParser(HeaderParser&&) noexcept = default;
HeaderParser& HeaderParser::operator=(HeaderParser&&) noexcept = default;
HeaderParser::~HeaderParser() = default;

Result<Header> parse_header(std::span<const std::byte> header_bytes, std::uint64_t file_size,
                            std::size_t readable_after) {
  return HeaderParser().parse(header_bytes, file_size, readable_after);
}

Result<Header> parse_file_prefix(std::span<const std::byte> bytes, std::uint64_t file_size) {
  return HeaderParser().parse_file_prefix(bytes, file_size);
}

Result<Header> HeaderParser::parse(std::span<const std::byte> header_bytes, std::uint64_t file_size,
                                   std::size_t readable_after) {
  const std::uint64_t n = header_bytes.size();
  if (n > kMaxHeaderSize) {
    return fail(ErrorCode::HeaderTooLarge, "header length " + std::to_string(n) +
                                               " exceeds the limit of " +
                                               std::to_string(kMaxHeaderSize) + " bytes");
  }
  if (file_size < kPrefixSize || n > file_size - kPrefixSize) {
    return fail(ErrorCode::FileTooSmall, "header length " + std::to_string(n) +
                                             " runs past the end of the file (" +
                                             std::to_string(file_size) + " bytes)");
  }
  if (n == 0 || header_bytes[0] != std::byte{'{'}) {
    return fail(ErrorCode::HeaderStart,
                "header must start with '{' (byte 8 of the file); leading whitespace or other "
                "bytes are refused");
  }
  if (!impl_) impl_ = std::make_unique<Impl>();  // moved-from parsers stay usable
  auto doc = impl_->json.parse(header_bytes, ErrorCode::HeaderJson, "header", readable_after);
  if (!doc) return fail(doc.error());
  simdjson::dom::object root;
  if (doc->get_object().get(root)) {
    return fail(ErrorCode::HeaderJson, "header must be a JSON object");
  }

  Header header;
  header.header_size = n;
  header.data_size = file_size - kPrefixSize - n;
  auto& tensors = header.storage_->tensors;
  std::pmr::memory_resource* arena = &header.storage_->arena;
  tensors.reserve(root.size());
  bool have_metadata = false;
  for (auto field : root) {
    if (field.key == "__metadata__") {
      if (have_metadata) {
        return fail(ErrorCode::DuplicateKey, "duplicate key '__metadata__' in the header");
      }
      have_metadata = true;
      if (field.value.is_null()) continue;
      auto md = parse_metadata(field.value);
      if (!md) return fail(md.error());
      header.metadata = std::move(*md);
      continue;
    }
    // TensorInfo is not allocator-aware: give its containers the arena explicitly.
    TensorInfo& t = tensors.emplace_back(TensorInfo{std::pmr::string(field.key, arena),
                                                    DType::U8, std::pmr::vector<std::uint64_t>(arena),
                                                    0, 0});
    if (auto r = parse_entry(field.value, t); !r) return fail(r.error());
  }

  if (!std::is_sorted(tensors.begin(), tensors.end(), by_offsets)) {
    std::sort(tensors.begin(), tensors.end(), by_offsets);
  }
  if (auto name = tensor_with_negative_zero(header_bytes)) {
    return fail(ErrorCode::InvalidShape, "tensor " + quote_name(*name) +
                                             ": '-0' in shape or data_offsets; they must be "
                                             "non-negative integers without a sign");
  }
  // Names first: a repeated entry is a duplicate key before it is an overlap.
  if (auto r = header.index_tensors(); !r) return fail(r.error());
  // The data section must be tiled exactly: start at 0, no hole, no overlap, end at its end.
  std::uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& t : tensors) {
    if (t.begin != expected) {
      std::string msg = describe(t);
      if (t.begin > expected) {
        msg += ": hole of " + std::to_string(t.begin - expected) + " bytes at data bytes [" +
               std::to_string(expected) + ", " + std::to_string(t.begin) + ")";
        msg += previous ? " after " + describe(*previous) : " before the first tensor";
      } else {
        msg += ": overlaps " + describe(*previous);
      }
      return fail(ErrorCode::HoleOrOverlap, msg);
    }
    expected = t.end;
    previous = &t;
  }
  if (expected != header.data_size) {
    std::string msg = "tensor data ends at byte " + std::to_string(expected) +
                      " of the data section";
    if (previous) msg += " (" + describe(*previous) + ")";
    msg += expected < header.data_size
               ? ", but the file has " + std::to_string(header.data_size - expected) +
                     " trailing bytes after it"
               : ", past the end of the file (data section is " +
                     std::to_string(header.data_size) + " bytes: truncated)";
    return fail(ErrorCode::DataSizeMismatch, msg);
  }
  return header;
}

Result<Header> HeaderParser::parse_file_prefix(std::span<const std::byte> bytes,
                                               std::uint64_t file_size) {
  auto n = parse_header_size(bytes, file_size);
  if (!n) return fail(n.error());
  if (bytes.size() < kPrefixSize + *n) {
    return fail(ErrorCode::FileTooSmall, "only " + std::to_string(bytes.size()) +
                                             " bytes given, the header needs " +
                                             std::to_string(kPrefixSize + *n));
  }
  return parse(bytes.subspan(kPrefixSize, *n), file_size, bytes.size() - kPrefixSize - *n);
}

}  // namespace tensorfetch
