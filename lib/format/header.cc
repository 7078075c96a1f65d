// SPDX-License-Identifier: Apache-2.0
// Strict safetensors header parsing. Every refusal names the rule, the tensor and its
// offsets. No I/O.
//
// The header is read with simdjson's On-Demand API in one forward pass, straight into the
// header's arena: no document tree is built (a DOM of a 100 MB header costs about three times
// the text), so the memory of a parse is the text, simdjson's structural index (4 bytes per
// token) and the tensors themselves. Strictness does not rely on a tree either: every value is
// read or walked completely (`validate_value`), so malformed JSON anywhere is refused, and a
// value of the wrong type is first checked to be well-formed JSON, so that the error code says
// which rule was broken.
#include <algorithm>
#include <cstring>
#include <memory_resource>
#include <string>
#include <unordered_set>
#include <vector>

#include "format/header_internal.h"
#include "format/huge_pages.h"
#include "format/json_depth.h"
#include "format/json_internal.h"
#include "format/name_index.h"
#include "format/sniff.h"
#include "tensorfetch/format.hpp"

namespace tensorfetch {

using detail::quote_name;
namespace od = simdjson::ondemand;

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
  // Names and shapes: bump-allocated, released together (through the arena's deallocate, which
  // under AddressSanitizer frees each block).
  std::pmr::monotonic_buffer_resource pool{64 << 10, &arena};
  std::pmr::vector<TensorInfo> tensors{&arena};
  detail::NameIndex by_name{&arena};

  // A copy of `name`, NUL-terminated, in the pool.
  std::string_view keep(std::string_view name) {
    auto* p = static_cast<char*>(pool.allocate(name.size() + 1, 1));
    if (!name.empty()) std::memcpy(p, name.data(), name.size());
    p[name.size()] = '\0';
    return {p, name.size()};
  }
  // A copy of `dims` in the pool.
  std::span<const std::uint64_t> keep(std::span<const std::uint64_t> dims) {
    if (dims.empty()) return {};
    auto* p = static_cast<std::uint64_t*>(pool.allocate(dims.size_bytes(), alignof(std::uint64_t)));
    std::memcpy(p, dims.data(), dims.size_bytes());
    return {p, dims.size()};
  }
};

Header::Header() : storage_(std::make_unique<Storage>()) {}
Header::Header(Header&&) noexcept = default;
Header& Header::operator=(Header&&) noexcept = default;
Header::~Header() = default;

std::span<const TensorInfo> Header::tensors() const noexcept {
  if (!storage_) return {};
  return storage_->tensors;
}

Result<void> detail::HeaderBuilder::set_tensors(Header& header, std::span<const TensorInfo> tensors) {
  // A fresh storage: the old names and shapes go with the old one.
  auto& storage = header.storage_;
  storage = std::make_unique<Header::Storage>();
  auto& kept = storage->tensors;
  kept.reserve(tensors.size());
  for (const auto& t : tensors) {
    kept.push_back(TensorInfo{storage->keep(t.name), t.dtype, storage->keep(t.shape), t.begin, t.end});
  }
  return header.index_tensors();
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

namespace {

// parse_header_size without naming another format.
Result<std::uint64_t> read_header_size(std::span<const std::byte> prefix, std::uint64_t file_size) {
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

}  // namespace

Result<std::uint64_t> parse_header_size(std::span<const std::byte> prefix,
                                        std::uint64_t file_size) {
  auto n = read_header_size(prefix, file_size);
  // Refused: a GGUF file, a PyTorch checkpoint, ... says what it is instead.
  if (!n) return fail(detail::explain_other_format(std::move(n.error()), prefix));
  return n;
}

namespace {

std::string describe(const TensorInfo& t) {
  return "tensor " + quote_name(t.name) + " (" + offsets_text(t.begin, t.end) + ")";
}

// The nesting level of a tensor entry and of `__metadata__` (the root object is level 1).
constexpr std::size_t kEntryDepth = 2;

// A type mismatch on a well-formed value, as opposed to malformed JSON.
bool is_type_error(simdjson::error_code e) {
  return e == simdjson::INCORRECT_TYPE || e == simdjson::NUMBER_OUT_OF_RANGE;
}

// The state of one parse: the document being read, where its text lies.
struct Reader {
  od::document& doc;
  const char* text;  // the header's first byte
  std::size_t size;  // header bytes

  // Malformed JSON: the simdjson error, and where reading stopped.
  Error json_error(simdjson::error_code e) {
    std::string msg = "header is not valid JSON: " + std::string(simdjson::error_message(e));
    const char* at = nullptr;
    if (!doc.current_location().get(at) && at >= text && at <= text + size) {
      msg += " (near byte " + std::to_string(kPrefixSize + static_cast<std::size_t>(at - text)) + " of the file)";
    }
    return Error{ErrorCode::HeaderJson, std::move(msg)};
  }

  // An array or object at `at` nested deeper than kMaxJsonDepth, inside `where`.
  Error too_deep(const char* at, std::string_view where) {
    std::string msg = "header nests arrays and objects deeper than " + std::to_string(detail::kMaxJsonDepth) +
                      " levels (the reference parser's limit), in " + std::string(where);
    if (at >= text && at <= text + size) {
      msg += " at byte " + std::to_string(kPrefixSize + static_cast<std::size_t>(at - text)) + " of the file";
    }
    return Error{ErrorCode::HeaderJson, std::move(msg)};
  }

  // Where reading is now (the next token), or `fallback` when simdjson cannot say.
  const char* location(const char* fallback) {
    const char* at = nullptr;
    if (doc.current_location().get(at) || at < text || at > text + size) return fallback;
    return at;
  }

  // The text from `start` to where reading is now, for messages: trailing spaces dropped,
  // control characters escaped, at most ~60 characters.
  std::string excerpt(const char* start) {
    const char* end = location(start);
    std::string_view raw(start, static_cast<std::size_t>(std::max(end, start) - start));
    while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t')) {
      raw.remove_suffix(1);
    }
    constexpr std::size_t kMax = 60;
    std::string text(raw.substr(0, kMax));
    if (raw.size() > kMax) text += "...";
    std::string out = quote_name(text);
    out.front() = '`';
    out.back() = '`';
    return out;
  }
};

// One step of iterating an object: the field and its unescaped key (valid until the next
// unescape). Malformed JSON is HeaderJson.
Result<void> read_field(Reader& rd, simdjson::simdjson_result<od::field> step, od::field& field, std::string_view& key) {
  if (auto e = std::move(step).get(field)) return fail(rd.json_error(e));
  if (auto e = field.unescaped_key().get(key)) return fail(rd.json_error(e));
  return {};
}

Result<void> validate_value(Reader& rd, od::value value, std::string_view where, std::size_t depth);

// Refuses a key seen before in the same object. Small objects compare linearly; big ones hash.
class KeySet {
 public:
  bool insert(std::string_view key) {
    if (!big_.empty() || small_.size() >= 16) {
      if (big_.empty()) big_.insert(small_.begin(), small_.end());
      return big_.insert(key).second;
    }
    if (std::find(small_.begin(), small_.end(), key) != small_.end()) return false;
    small_.push_back(key);
    return true;
  }

 private:
  std::vector<std::string_view> small_;  // views into simdjson's string buffer (valid while it parses)
  std::unordered_set<std::string_view> big_;
};

// Walks `value` completely: every string unescaped, every number and literal parsed, every
// object checked for duplicate keys (named with `where`). Malformed JSON is HeaderJson.
// `depth` is the nesting level `value` has if it is an array or an object (the header's root
// object is level 1): past kMaxJsonDepth it is refused (HeaderJson), so the recursion is bounded.
Result<void> validate_value(Reader& rd, od::value value, std::string_view where, std::size_t depth) {
  od::json_type type{};
  if (auto e = value.type().get(type)) return fail(rd.json_error(e));
  if ((type == od::json_type::object || type == od::json_type::array) && depth > detail::kMaxJsonDepth) {
    return fail(rd.too_deep(value.raw_json_token().data(), where));
  }
  switch (type) {
    case od::json_type::object: {
      od::object obj;
      if (auto e = value.get_object().get(obj)) return fail(rd.json_error(e));
      KeySet keys;
      for (auto field_result : obj) {
        od::field field;
        std::string_view key;
        if (auto r = read_field(rd, std::move(field_result), field, key); !r) return fail(r.error());
        if (!keys.insert(key)) {
          return fail(ErrorCode::DuplicateKey, "duplicate key " + quote_name(key) + " in " + std::string(where));
        }
        if (auto r = validate_value(rd, field.value(), where, depth + 1); !r) return r;
      }
      return {};
    }
    case od::json_type::array: {
      od::array arr;
      if (auto e = value.get_array().get(arr)) return fail(rd.json_error(e));
      for (auto item_result : arr) {
        od::value item;
        if (auto e = std::move(item_result).get(item)) return fail(rd.json_error(e));
        if (auto r = validate_value(rd, item, where, depth + 1); !r) return r;
      }
      return {};
    }
    case od::json_type::string: {
      std::string_view s;
      if (auto e = value.get_string().get(s)) return fail(rd.json_error(e));
      return {};
    }
    case od::json_type::number: {
      double d = 0;
      if (auto e = value.get_double().get(d)) return fail(rd.json_error(e));
      return {};
    }
    case od::json_type::boolean: {
      bool b = false;
      if (auto e = value.get_bool().get(b)) return fail(rd.json_error(e));
      return {};
    }
    case od::json_type::null: {
      bool is_null = false;
      if (auto e = value.is_null().get(is_null)) return fail(rd.json_error(e));
      if (!is_null) return fail(rd.json_error(simdjson::N_ATOM_ERROR));
      return {};
    }
  }
  return fail(rd.json_error(simdjson::TAPE_ERROR));
}

// A value of the wrong type: checks it is well-formed JSON (else HeaderJson), then returns
// the excerpt of its text for the caller's message. `depth` as for validate_value.
Result<std::string> wrong_value(Reader& rd, od::value value, std::string_view where, std::size_t depth) {
  const char* start = value.raw_json_token().data();
  if (auto r = validate_value(rd, value, where, depth); !r) return fail(r.error());
  return rd.excerpt(start);
}

Result<Metadata> parse_metadata(Reader& rd, od::value value) {
  const char* start = value.raw_json_token().data();
  od::object obj;
  if (auto e = value.get_object().get(obj)) {
    if (!is_type_error(e)) return fail(rd.json_error(e));
    if (auto r = validate_value(rd, value, "__metadata__", kEntryDepth); !r) return fail(r.error());
    return fail(ErrorCode::InvalidMetadata,
                "__metadata__ must be an object of strings or null, got " + rd.excerpt(start));
  }
  Metadata out;
  for (auto field_result : obj) {
    od::field field;
    std::string_view key;
    if (auto r = read_field(rd, std::move(field_result), field, key); !r) return fail(r.error());
    std::string k(key);  // the next unescape may reuse simdjson's buffer
    std::string_view text;
    if (auto e = field.value().get_string().get(text)) {
      if (!is_type_error(e)) return fail(rd.json_error(e));
      auto got = wrong_value(rd, field.value(), "__metadata__", kEntryDepth + 1);
      if (!got) return fail(got.error());
      return fail(ErrorCode::InvalidMetadata,
                  "__metadata__ value for key " + quote_name(k) + " must be a string, got " + *got);
    }
    if (!out.emplace(std::move(k), std::string(text)).second) {
      return fail(ErrorCode::DuplicateKey, "duplicate key " + quote_name(key) + " in __metadata__");
    }
  }
  return out;
}

// What a shape or data_offsets array held: its integers, or why it is not an array of
// non-negative integers (excerpt set; `negative_zero` when a `-0` was the reason).
struct UintArray {
  bool ok = true;
  bool negative_zero = false;
  std::string excerpt;
};

// Reads an array of non-negative integers into `out` (cleared first), walking it to its end
// even after a bad element, so that malformed JSON anywhere in it is still HeaderJson.
Result<UintArray> read_uints(Reader& rd, od::value value, std::string_view tensor, std::vector<std::uint64_t>& out) {
  // Messages only: built when something is wrong, not for every tensor.
  auto where = [&] { return "tensor " + quote_name(tensor); };
  out.clear();
  UintArray result;
  const char* start = value.raw_json_token().data();
  od::array arr;
  if (auto e = value.get_array().get(arr)) {
    if (!is_type_error(e)) return fail(rd.json_error(e));
    auto got = wrong_value(rd, value, where(), kEntryDepth + 1);
    if (!got) return fail(got.error());
    result.ok = false;
    result.excerpt = std::move(*got);
    return result;
  }
  for (auto item_result : arr) {
    od::value item;
    if (auto e = std::move(item_result).get(item)) return fail(rd.json_error(e));
    if (result.ok) {
      // `-0` is an integer to simdjson (and would read as 0), but the reference parser refuses
      // it, as it does any sign: look at the token itself.
      const std::string_view token = item.raw_json_token();
      std::uint64_t d = 0;
      if (!token.empty() && token.front() == '-') {
        result.ok = false;
        result.negative_zero = token.size() >= 2 && token[1] == '0' &&
                               (token.size() == 2 || token[2] == ' ' || token[2] == ',' || token[2] == ']' ||
                                token[2] == '\n' || token[2] == '\r' || token[2] == '\t');
      } else if (auto e = item.get_uint64().get(d)) {
        if (!is_type_error(e)) return fail(rd.json_error(e));
        result.ok = false;
      } else {
        out.push_back(d);
        continue;
      }
    }
    if (auto r = validate_value(rd, item, where(), kEntryDepth + 2); !r) return fail(r.error());
  }
  if (!result.ok) result.excerpt = rd.excerpt(start);
  return result;
}

// Parses one tensor entry into `t` (whose name is already set); `dims` is scratch space for
// the shape, which the caller stores, `offsets` for data_offsets.
Result<void> parse_entry(Reader& rd, od::value value, TensorInfo& t, std::vector<std::uint64_t>& dims,
                         std::vector<std::uint64_t>& offsets) {
  // Messages only: built when something is wrong, not for every tensor.
  auto where = [&] { return "tensor " + quote_name(t.name); };
  auto fail_entry = [&](ErrorCode code, const std::string& what) { return fail(code, where() + ": " + what); };
  // `shape` or `data_offsets` (`key`): non-negative integers, `count` of them unless 0.
  auto read_list = [&](od::field& field, bool& seen, std::vector<std::uint64_t>& out, ErrorCode code, const char* key,
                       const char* subject, const char* rule, std::size_t count) -> Result<void> {
    if (seen) return fail_entry(ErrorCode::DuplicateKey, std::string("duplicate key '") + key + "'");
    seen = true;
    auto got = read_uints(rd, field.value(), t.name, out);
    if (!got) return fail(got.error());
    if (got->negative_zero) {
      return fail_entry(code, std::string("'-0' in ") + key + " " + got->excerpt + "; " + subject +
                                  " non-negative integers without a sign");
    }
    if (!got->ok || (count != 0 && out.size() != count)) {
      return fail_entry(code, std::string(key) + " " + rule + ", got " + got->excerpt);
    }
    return {};
  };
  const char* start = value.raw_json_token().data();
  od::object obj;
  if (auto e = value.get_object().get(obj)) {
    if (!is_type_error(e)) return fail(rd.json_error(e));
    if (auto r = validate_value(rd, value, where(), kEntryDepth); !r) return r;
    return fail_entry(ErrorCode::InvalidEntry, "entry must be an object, got " + rd.excerpt(start));
  }
  bool have_dtype = false, have_shape = false, have_offsets = false;
  std::vector<std::string> unknown;  // other keys, checked for repeats (rare: copies are fine)
  for (auto field_result : obj) {
    od::field field;
    if (auto e = std::move(field_result).get(field)) return fail(rd.json_error(e));
    // The three known keys are recognized in the raw text (no copy into simdjson's string
    // buffer: for a million tensors that is 25 MB); anything else, including a known key
    // written with escapes, is unescaped and compared.
    std::string_view key;
    const od::raw_json_string raw = field.key();
    if (raw.unsafe_is_equal("dtype")) {
      key = "dtype";
    } else if (raw.unsafe_is_equal("shape")) {
      key = "shape";
    } else if (raw.unsafe_is_equal("data_offsets")) {
      key = "data_offsets";
    } else if (auto e = field.unescaped_key().get(key)) {
      return fail(rd.json_error(e));
    }
    if (key == "dtype") {
      if (have_dtype) return fail_entry(ErrorCode::DuplicateKey, "duplicate key 'dtype'");
      have_dtype = true;
      std::string_view name;
      if (auto e = field.value().get_string().get(name)) {
        if (!is_type_error(e)) return fail(rd.json_error(e));
        auto got = wrong_value(rd, field.value(), where(), kEntryDepth + 1);
        if (!got) return fail(got.error());
        return fail_entry(ErrorCode::InvalidDtype, "dtype must be a string, got " + *got);
      }
      auto dt = parse_dtype(name);
      if (!dt) return fail_entry(ErrorCode::InvalidDtype, "unknown dtype " + quote_name(name));
      t.dtype = *dt;
    } else if (key == "shape") {
      if (auto r = read_list(field, have_shape, dims, ErrorCode::InvalidShape, "shape", "it must hold",
                             "must hold non-negative integers", 0);
          !r) {
        return fail(r.error());
      }
    } else if (key == "data_offsets") {
      if (auto r = read_list(field, have_offsets, offsets, ErrorCode::InvalidOffsets, "data_offsets", "they must be",
                             "must be exactly two non-negative integers", 2);
          !r) {
        return fail(r.error());
      }
    } else {
      // Ignored, but well-formed and without repeated keys, here or nested.
      if (std::find(unknown.begin(), unknown.end(), key) != unknown.end()) {
        return fail(ErrorCode::DuplicateKey, "duplicate key " + quote_name(key) + " in " + where());
      }
      unknown.emplace_back(key);
      if (auto r = validate_value(rd, field.value(), where(), kEntryDepth + 1); !r) return r;
    }
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
  for (auto d : dims) {
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

bool by_offsets(const TensorInfo& a, const TensorInfo& b) {
  return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
}

}  // namespace

// Headers this large release the parser's buffers once read (see HeaderParser::parse).
constexpr std::uint64_t kKeepBuffersBelow = std::uint64_t{16} << 20;

struct HeaderParser::Impl {
  od::parser parser;
  detail::HugeBuffer padded;  // a padded copy of the input, when it cannot be parsed in place
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
  // In place when simdjson's padding is readable after the header, else a padded copy.
  const std::byte* input = header_bytes.data();
  if (readable_after < simdjson::SIMDJSON_PADDING) {
    if (impl_->padded.size() < n + simdjson::SIMDJSON_PADDING) {
      impl_->padded = detail::HugeBuffer(n + simdjson::SIMDJSON_PADDING);
    }
    std::memcpy(impl_->padded.data(), header_bytes.data(), n);
    std::memset(impl_->padded.data() + n, ' ', simdjson::SIMDJSON_PADDING);
    input = impl_->padded.data();
  }
  const char* text = reinterpret_cast<const char*>(input);
  od::document doc;
  if (auto e = impl_->parser.iterate(text, n, n + simdjson::SIMDJSON_PADDING).get(doc)) {
    return fail(ErrorCode::HeaderJson, "header is not valid JSON: " + std::string(simdjson::error_message(e)));
  }
  Reader rd{doc, text, n};
  od::object root;
  if (auto e = doc.get_object().get(root)) {
    if (is_type_error(e)) return fail(ErrorCode::HeaderJson, "header must be a JSON object");
    return fail(rd.json_error(e));
  }
  // Room for as many entries as the text can hold (the shortest valid entry,
  // `"":{"dtype":"U8","shape":[],"data_offsets":[0,0]}`, is 49 bytes), so the vector never
  // moves; the arena maps it lazily, so only what is filled becomes resident. (Counting the
  // fields first would cost a second pass over the text.)
  const std::size_t fields = static_cast<std::size_t>(n / 49 + 1);

  Header header;
  header.header_size = n;
  header.data_size = file_size - kPrefixSize - n;
  Header::Storage& storage = *header.storage_;
  auto& tensors = storage.tensors;
  tensors.reserve(fields);
  bool have_metadata = false;
  std::vector<std::uint64_t> dims, offsets;
  for (auto field_result : root) {
    od::field field;
    std::string_view key;
    if (auto r = read_field(rd, std::move(field_result), field, key); !r) return fail(r.error());
    if (key == "__metadata__") {
      if (have_metadata) {
        return fail(ErrorCode::DuplicateKey, "duplicate key '__metadata__' in the header");
      }
      have_metadata = true;
      bool is_null = false;
      if (auto e = field.value().is_null().get(is_null)) return fail(rd.json_error(e));
      if (is_null) continue;
      auto md = parse_metadata(rd, field.value());
      if (!md) return fail(md.error());
      header.metadata = std::move(*md);
      continue;
    }
    TensorInfo& t = tensors.emplace_back();
    t.name = storage.keep(key);
    if (auto r = parse_entry(rd, field.value(), t, dims, offsets); !r) return fail(r.error());
    t.shape = storage.keep(dims);
  }
  // Past the root object there must be no token left (simdjson 3.0 has no document::at_end:
  // current_location() is OUT_OF_BOUNDS exactly at the end).
  if (const char* trailing = nullptr; !doc.current_location().get(trailing)) {
    return fail(ErrorCode::HeaderJson,
                "header is not valid JSON: " + std::string(simdjson::error_message(simdjson::TRAILING_CONTENT)) +
                    " at byte " + std::to_string(kPrefixSize + static_cast<std::size_t>(trailing - text)) +
                    " of the file; only spaces may follow the JSON object");
  }

  // The text has been read. simdjson's buffers (4 bytes per token, plus the unescaped
  // strings) are kept for the next parse, which is what makes many shards cheap, unless they
  // are large: then they go now, before the name index is built, to keep the peak down.
  if (n >= kKeepBuffersBelow) impl_->parser = od::parser{};
  if (impl_->padded.size() >= kKeepBuffersBelow) impl_->padded = detail::HugeBuffer();

  if (!std::is_sorted(tensors.begin(), tensors.end(), by_offsets)) {
    std::sort(tensors.begin(), tensors.end(), by_offsets);
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
  auto header = parse(bytes.subspan(kPrefixSize, *n), file_size, bytes.size() - kPrefixSize - *n);
  // A plausible length but no `{` after it: perhaps another format (a zip, a pickle, ...).
  if (!header && header.error().code == ErrorCode::HeaderStart) {
    return fail(detail::explain_other_format(std::move(header.error()), bytes));
  }
  return header;
}

}  // namespace tensorfetch
