// SPDX-License-Identifier: Apache-2.0
// Layout of new safetensors files and index text. No I/O.
//
// The header is assembled entry by entry rather than built as one nlohmann object: an
// ordered_json object looks keys up linearly, which made a 100,000-tensor header quadratic,
// and a DOM of a million entries costs several times the text. Every string (names, metadata)
// is still encoded by nlohmann's serializer, so the bytes are exactly what `dump()` of the
// equivalent ordered object gives.
#include <charconv>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "format/name_index.h"
#include "format/writer_internal.h"
#include "tensorfetch/writer.hpp"

namespace tensorfetch {

namespace {

/// Appends `value` as a JSON string (quoted, escaped by nlohmann; invalid UTF-8 throws).
void append_json_string(std::string& out, std::string_view value) {
  out += nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
}

void append_uint(std::string& out, std::uint64_t value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  (void)ec;  // 24 bytes always hold a uint64
  out.append(buf, end);
}

}  // namespace

Result<FileLayout> layout_file(std::span<const OutputTensor> tensors,
                               const std::optional<Metadata>& metadata) {
  return detail::layout_file_views(
      tensors.size(),
      [&](std::size_t i) {
        return detail::OutputTensorView{tensors[i].name, tensors[i].dtype, tensors[i].shape};
      },
      metadata);
}

Result<FileLayout> detail::layout_file_views(std::size_t count,
                                             const std::function<OutputTensorView(std::size_t)>& at,
                                             const std::optional<Metadata>& metadata) {
  FileLayout layout;
  layout.tensor_ranges.reserve(count);
  if (count > NameIndex::kMaxNames) {
    return fail(ErrorCode::InvalidArgument, "too many tensors: " + std::to_string(count));
  }
  NameIndex names;  // 8 to 16 bytes per name
  names.reset(count);
  auto name_of = [&](std::size_t i) { return at(i).name; };
  // The 8-byte length prefix is filled in at the end.
  std::string& text = layout.prefix;
  text.assign(kPrefixSize, '\0');
  text += '{';
  bool first = true;
  auto key = [&](std::string_view name) {
    if (!first) text += ',';
    first = false;
    append_json_string(text, name);
    text += ':';
  };
  try {
    if (metadata) {
      key("__metadata__");
      text += '{';
      bool first_md = true;
      for (const auto& [k, v] : *metadata) {
        if (!first_md) text += ',';
        first_md = false;
        append_json_string(text, k);
        text += ':';
        append_json_string(text, v);
      }
      text += '}';
    }
  } catch (const nlohmann::json::exception& e) {
    return fail(ErrorCode::InvalidArgument, std::string("cannot encode __metadata__: ") + e.what());
  }
  std::uint64_t offset = 0;
  for (std::size_t index = 0; index < count; ++index) {
    const OutputTensorView t = at(index);
    if (t.name == "__metadata__") {
      return fail(ErrorCode::InvalidArgument, "a tensor cannot be named '__metadata__'");
    }
    if (names.insert(t.name, index, name_of)) {
      return fail(ErrorCode::DuplicateKey, "duplicate tensor name " + detail::quote_name(t.name));
    }
    std::uint64_t elements = 1, bits = 0, end = 0;
    for (auto d : t.shape) {
      if (__builtin_mul_overflow(elements, d, &elements)) {
        return fail(ErrorCode::Overflow, "tensor " + detail::quote_name(t.name) + ": element count overflows");
      }
    }
    if (__builtin_mul_overflow(elements, std::uint64_t{dtype_bits(t.dtype)}, &bits)) {
      return fail(ErrorCode::Overflow, "tensor " + detail::quote_name(t.name) + ": size overflows");
    }
    if (bits % 8 != 0) {
      return fail(ErrorCode::SizeMismatch, "tensor " + detail::quote_name(t.name) + ": " +
                                               std::to_string(elements) + " elements of " +
                                               std::string(to_string(t.dtype)) +
                                               " are not a whole number of bytes");
    }
    if (__builtin_add_overflow(offset, bits / 8, &end)) {
      return fail(ErrorCode::Overflow, "tensor " + detail::quote_name(t.name) + ": file size overflows");
    }
    try {
      key(t.name);
    } catch (const nlohmann::json::exception& e) {
      return fail(ErrorCode::InvalidArgument,
                  "cannot encode header: tensor " + detail::quote_name(t.name) + ": " + e.what());
    }
    text += R"({"dtype":")";
    text += to_string(t.dtype);  // a fixed ASCII name: nothing to escape
    text += R"(","shape":[)";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i > 0) text += ',';
      append_uint(text, t.shape[i]);
    }
    text += R"(],"data_offsets":[)";
    append_uint(text, offset);
    text += ',';
    append_uint(text, end);
    text += "]}";
    // Checked as it grows, so that a header far over the cap is not built whole first.
    if (text.size() - kPrefixSize > kMaxHeaderSize) {
      return fail(ErrorCode::HeaderTooLarge, "header of more than " + std::to_string(kMaxHeaderSize) +
                                                 " bytes (at tensor " + detail::quote_name(t.name) +
                                                 ", number " + std::to_string(layout.tensor_ranges.size() + 1) +
                                                 " of " + std::to_string(count) + ")");
    }
    layout.tensor_ranges.push_back(ByteRange{offset, end - offset});
    offset = end;
  }
  text += '}';
  while (text.size() % 8 != 0) text += ' ';
  const std::uint64_t n = text.size() - kPrefixSize;
  if (n > kMaxHeaderSize) {
    return fail(ErrorCode::HeaderTooLarge, "header of " + std::to_string(n) + " bytes exceeds the limit of " +
                                               std::to_string(kMaxHeaderSize));
  }
  for (std::size_t i = 0; i < kPrefixSize; ++i) text[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  for (auto& r : layout.tensor_ranges) r.offset += text.size();
  if (__builtin_add_overflow(offset, text.size(), &layout.file_size)) {
    return fail(ErrorCode::Overflow, "file size overflows");
  }
  return layout;
}

std::string build_index_json(const std::map<std::string, std::string>& weight_map,
                             std::uint64_t total_size,
                             std::optional<std::uint64_t> total_parameters) {
  // A plain (sorted) json object, not ordered_json, whose insertion searches its keys linearly.
  // Sorted order is also the order wanted: "metadata" before "weight_map", "total_parameters"
  // before "total_size", tensor names as in `weight_map`.
  nlohmann::json index = nlohmann::json::object();
  auto& md = index["metadata"] = nlohmann::json::object();
  if (total_parameters) md["total_parameters"] = *total_parameters;
  md["total_size"] = total_size;
  auto& wm = index["weight_map"] = nlohmann::json::object();
  for (const auto& [name, shard] : weight_map) wm.emplace(name, shard);
  return index.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace tensorfetch
