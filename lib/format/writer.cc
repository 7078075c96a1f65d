// SPDX-License-Identifier: Apache-2.0
// Layout of new safetensors files and index text. No I/O.
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "format/json_internal.h"
#include "tensorfetch/writer.hpp"

namespace tensorfetch {

Result<FileLayout> layout_file(std::span<const OutputTensor> tensors,
                               const std::optional<Metadata>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (metadata) {
    auto& md = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [key, value] : *metadata) md[key] = value;
  }
  FileLayout layout;
  layout.tensor_ranges.reserve(tensors.size());
  std::unordered_set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") {
      return fail(ErrorCode::InvalidArgument, "a tensor cannot be named '__metadata__'");
    }
    if (!names.insert(t.name).second) {
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
    header[t.name] = {{"dtype", std::string(to_string(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, end}}};
    layout.tensor_ranges.push_back(ByteRange{offset, end - offset});
    offset = end;
  }
  std::string text;
  try {
    text = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::json::exception& e) {
    return fail(ErrorCode::InvalidArgument, std::string("cannot encode header: ") + e.what());
  }
  while (text.size() % 8 != 0) text += ' ';
  if (text.size() > kMaxHeaderSize) {
    return fail(ErrorCode::HeaderTooLarge, "header of " + std::to_string(text.size()) +
                                               " bytes exceeds the limit of " +
                                               std::to_string(kMaxHeaderSize));
  }
  const std::uint64_t n = text.size();
  layout.prefix.resize(kPrefixSize);
  for (int i = 0; i < 8; ++i) layout.prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  layout.prefix += text;
  for (auto& r : layout.tensor_ranges) r.offset += layout.prefix.size();
  if (__builtin_add_overflow(offset, layout.prefix.size(), &layout.file_size)) {
    return fail(ErrorCode::Overflow, "file size overflows");
  }
  return layout;
}

std::string build_index_json(const std::map<std::string, std::string>& weight_map,
                             std::uint64_t total_size,
                             std::optional<std::uint64_t> total_parameters) {
  nlohmann::ordered_json index;
  auto& md = index["metadata"] = nlohmann::ordered_json::object();
  if (total_parameters) md["total_parameters"] = *total_parameters;
  md["total_size"] = total_size;
  auto& wm = index["weight_map"] = nlohmann::ordered_json::object();
  for (const auto& [name, shard] : weight_map) wm[name] = shard;
  return index.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace tensorfetch
