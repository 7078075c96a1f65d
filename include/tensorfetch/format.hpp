// SPDX-License-Identifier: Apache-2.0
/// @file
/// The safetensors header: parsing and strict validation. Pure functions over bytes the
/// caller already holds; nothing here does I/O, so it is safe to call on untrusted input
/// from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorfetch/byte_range.hpp"
#include "tensorfetch/dtype.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"

namespace tensorfetch {

/// Largest accepted header length N, in bytes; larger values are refused before any
/// allocation.
inline constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

/// Size of the little-endian length prefix that starts every safetensors file.
inline constexpr std::uint64_t kPrefixSize = 8;

/// String-to-string metadata (`__metadata__`), sorted by key.
using Metadata = std::map<std::string, std::string>;

/// One tensor entry of a header: a small view. In a `Header`, `name` and `shape` point into
/// storage the header owns (valid as long as the header lives, also after it is moved), and
/// `name` is NUL-terminated there (`name.data()[name.size()] == '\0'`). A TensorInfo made by
/// hand points wherever its maker points it. Copies share what they point to.
struct TENSORFETCH_API TensorInfo {
  std::string_view name;                 ///< the JSON key
  DType dtype = DType::U8;               ///< element type
  std::span<const std::uint64_t> shape;  ///< dimensions; empty for a scalar
  std::uint64_t begin = 0;               ///< data_offsets[0], relative to the data section
  std::uint64_t end = 0;                 ///< data_offsets[1], relative to the data section

  /// Number of elements (product of the shape; 1 for a scalar). Validated headers
  /// guarantee it does not overflow.
  [[nodiscard]] std::uint64_t num_elements() const noexcept;
  /// Number of bytes, `end - begin`.
  [[nodiscard]] std::uint64_t nbytes() const noexcept { return end - begin; }
};

namespace detail {
class HeaderBuilder;  // builds headers without parsing (inside the library and its tests only)
}  // namespace detail

/// A parsed and validated header, made by `parse_header` (or `HeaderParser`). Owns all its data:
/// the tensor entries, their names and shapes live in one arena inside the library that moves
/// with the header (about 60 bytes per tensor plus its name and 8 bytes per dimension); what it
/// hands out are views of that arena (`TensorInfo`, spans), valid as long as the header lives.
/// Move-only. Const members are safe to call from several threads.
class TENSORFETCH_API Header {
 public:
  /// An empty header (no tensors, no metadata).
  Header();
  Header(Header&&) noexcept;
  Header& operator=(Header&&) noexcept;
  Header(const Header&) = delete;
  Header& operator=(const Header&) = delete;
  ~Header();

  /// Header length N as stored in the 8-byte prefix (JSON plus padding).
  std::uint64_t header_size = 0;
  /// Size of the data section: file size - 8 - N. Equals the last tensor's end.
  std::uint64_t data_size = 0;
  /// `__metadata__`, or nothing when absent or `null`.
  std::optional<Metadata> metadata;

  /// All tensors, sorted by `begin` (the order they are stored in).
  [[nodiscard]] std::span<const TensorInfo> tensors() const noexcept;
  /// The tensor with this exact name, or nullptr.
  [[nodiscard]] const TensorInfo* find(std::string_view name) const;
  /// Offset of the data section from the start of the file: 8 + N.
  [[nodiscard]] std::uint64_t data_offset() const noexcept { return kPrefixSize + header_size; }
  /// The tensor's bytes as a range of the whole file.
  [[nodiscard]] ByteRange file_range(const TensorInfo& t) const noexcept {
    return ByteRange{data_offset() + t.begin, t.nbytes()};
  }


 private:
  friend class HeaderParser;
  friend class detail::HeaderBuilder;
  struct Storage;  // the arena behind the tensors; defined in the library
  Result<void> index_tensors();
  std::unique_ptr<Storage> storage_;
};

/// Reusable parsing state. Parsing many headers with one `HeaderParser` reuses its buffers
/// (as simdjson advises for its own parser), which matters for checkpoints of many shards and
/// for very large headers. Not thread-safe: use one per thread. Results do not depend on it:
/// a `Header` owns all its data.
class TENSORFETCH_API HeaderParser {
 public:
  HeaderParser();
  HeaderParser(HeaderParser&&) noexcept;
  HeaderParser& operator=(HeaderParser&&) noexcept;
  ~HeaderParser();

  /// As the free function `parse_header`.
  [[nodiscard]] Result<Header> parse(std::span<const std::byte> header_bytes, std::uint64_t file_size,
                                     std::size_t readable_after = 0);
  /// As the free function `parse_file_prefix`.
  [[nodiscard]] Result<Header> parse_file_prefix(std::span<const std::byte> bytes,
                                                 std::uint64_t file_size);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Reads N from the first 8 bytes of a file (little-endian) and checks it against the cap
/// and the file size: refuses N > kMaxHeaderSize and 8 + N > file_size. When it refuses
/// bytes that are another known format (GGUF, a PyTorch zip or pickle, NumPy, HDF5, ONNX, an
/// archive, a Git LFS pointer, a web page), the message says so — "this is a GGUF file, not
/// safetensors" — under the same code; give more than 8 bytes to let it see more formats.
[[nodiscard]] TENSORFETCH_API Result<std::uint64_t> parse_header_size(std::span<const std::byte> prefix,
                                                      std::uint64_t file_size);

/// Parses and validates the N header bytes (the JSON and its padding, *without* the 8-byte
/// prefix) of a file of `file_size` bytes. Applies every format rule of DESIGN.md: starts
/// with `{`, valid UTF-8 JSON, no duplicate keys, exact dtypes, integer shapes and offsets,
/// sizes that match with overflow checks, contiguous data from 0 to exactly the end of the
/// file. Errors name the rule, the tensor and its offsets.
///
/// `readable_after`: how many bytes of allocated memory the caller guarantees right after
/// `header_bytes` (e.g. the rest of a mapped file; their content does not matter). With at
/// least 64 the header is parsed in place; otherwise it is copied first.
[[nodiscard]] TENSORFETCH_API Result<Header> parse_header(std::span<const std::byte> header_bytes,
                                          std::uint64_t file_size, std::size_t readable_after = 0);

/// Convenience: parses a file whose first `bytes.size()` bytes are given (at least 8 + N)
/// and whose total size is `file_size`. Bytes given beyond the header serve as padding, so a
/// whole mapped file is parsed without copying its header. A file of another known format
/// is refused with a message naming it, as by `parse_header_size`.
[[nodiscard]] TENSORFETCH_API Result<Header> parse_file_prefix(std::span<const std::byte> bytes,
                                               std::uint64_t file_size);

}  // namespace tensorfetch
