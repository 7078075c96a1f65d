// SPDX-License-Identifier: Apache-2.0
// Other formats by their magic bytes (see sniff.h). Every check reads only the bytes it is
// given, bounds-checked; nothing is decompressed, unpickled or decoded beyond a few fields.
//
// Which magics can collide with a safetensors file: its first 8 bytes are a little-endian
// header length N <= 100,000,000 (< 2^27), so bytes 4..7 are zero and byte 3 is at most 5,
// and byte 8 is `{`. GGUF, GGML, `.npy`, HDF5, zstd, xz, bzip2, 7z and text formats have a
// non-zero byte among 3..7, so they never look like a valid length. A zip (`PK\3\4` with
// version and flags 0: N = 67,324,752), a pickle (`\x80\x02` + opcode: N = 0x??0280, e.g. 640
// for a 640-byte header), a gzip file without a time stamp (N = 559,903), a tar archive with
// a short first name, or a protobuf can: such bytes are recognised only when byte 8 is not
// `{` (`could_be_safetensors`), and only after the safetensors checks refused the file.
#include "format/sniff.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

#include "tensorfetch/format.hpp"

namespace tensorfetch::detail {

namespace {

// The bytes as characters, for comparisons with magic strings.
std::string_view chars(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::uint8_t u8(std::string_view s, std::size_t i) { return static_cast<std::uint8_t>(s[i]); }

std::uint32_t le16(std::string_view s, std::size_t i) {
  return static_cast<std::uint32_t>(u8(s, i)) | static_cast<std::uint32_t>(u8(s, i + 1)) << 8;
}

std::uint32_t le32(std::string_view s, std::size_t i) { return le16(s, i) | le16(s, i + 2) << 16; }

bool at(std::string_view s, std::size_t offset, std::string_view magic) {
  return s.size() >= offset + magic.size() && s.substr(offset, magic.size()) == magic;
}

// Bytes that may start a valid safetensors file: a header length within the cap, then `{`
// (or not enough bytes to see byte 8).
bool could_be_safetensors(std::string_view s) {
  if (s.size() < kPrefixSize) return false;  // a file this short is no safetensors file
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | u8(s, static_cast<std::size_t>(i));
  return n <= kMaxHeaderSize && (s.size() == kPrefixSize || s[kPrefixSize] == '{');
}

SniffedFormat found(OtherFormat f, std::string what, std::string hint = {}) {
  return SniffedFormat{f, std::move(what), std::move(hint)};
}

// --- zip: the first local file header's name says whose archive it is ---

std::optional<SniffedFormat> zip(std::string_view s) {
  if (at(s, 0, "PK\x05\x06")) return found(OtherFormat::Zip, "an empty zip archive");
  if (!at(s, 0, "PK\x03\x04")) return std::nullopt;
  // Local file header: name length at 26, extra length at 28, the name at 30.
  constexpr std::size_t kName = 30;
  if (s.size() < kName) return found(OtherFormat::Zip, "a zip archive");
  const std::size_t len = le16(s, 26);
  if (len == 0 || s.size() < kName + len) return found(OtherFormat::Zip, "a zip archive");
  const std::string_view name = s.substr(kName, len);
  // torch.save / torch.jit.save: every record is ARCHIVE/RECORD, data.pkl (or a tensor's
  // data/N, or byteorder, version, ...) first.
  const auto slash = name.find('/');
  const std::string_view record = slash == std::string_view::npos ? name : name.substr(slash + 1);
  static constexpr std::array<std::string_view, 6> kRecords = {
      "data.pkl", "byteorder", "version", ".format_version", "constants.pkl", ".data/version"};
  const bool torch = std::find(kRecords.begin(), kRecords.end(), record) != kRecords.end() ||
                     (slash != std::string_view::npos &&
                      (record.starts_with("data/") || record.starts_with("code/") || record.starts_with(".data/")));
  if (torch) return found(OtherFormat::PyTorchZip, "a PyTorch checkpoint (zip)");
  if (name.ends_with(".npy")) return found(OtherFormat::NumpyZip, "a NumPy .npz archive (zip)");
  return found(OtherFormat::Zip, "a zip archive");
}

// --- pickle: PROTO 2..5, then an opcode; torch.save's legacy format pickles a magic number ---

// Every opcode of pickle protocols 0 to 5 (pickletools).
bool pickle_opcode(std::uint8_t op) {
  static constexpr std::string_view kText = "(.012FIJKLMNPQRSTUVXabcd}eghijl]opqrst)uGBC";
  return (op >= 0x80 && op <= 0x98) || kText.find(static_cast<char>(op)) != std::string_view::npos;
}

std::optional<SniffedFormat> pickle(std::string_view s) {
  if (s.size() < 3 || u8(s, 0) != 0x80 || u8(s, 1) < 2 || u8(s, 1) > 5 || !pickle_opcode(u8(s, 2))) {
    return std::nullopt;
  }
  // LONG1 of torch.serialization's MAGIC_NUMBER 0x1950a86a20f9469cfc6c.
  if (at(s, 2, "\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19")) {
    return found(OtherFormat::PyTorchPickle, "a PyTorch checkpoint (legacy pickle format)");
  }
  return found(OtherFormat::Pickle, "a Python pickle (protocol " + std::to_string(u8(s, 1)) + ")");
}

// --- ONNX: a protobuf ModelProto, recognised by a walk over its first fields ---

// A base-128 varint at `pos`; advances it. Nothing when truncated or longer than 10 bytes.
std::optional<std::uint64_t> varint(std::string_view s, std::size_t& pos) {
  std::uint64_t v = 0;
  for (unsigned shift = 0; shift < 70 && pos < s.size(); shift += 7) {
    const std::uint8_t b = u8(s, pos++);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  return std::nullopt;
}

// A string field of ModelProto (producer_name, producer_version, domain): short, printable.
bool plausible_name(std::string_view v) {
  return v.size() <= 256 && std::all_of(v.begin(), v.end(), [](char c) {
           const auto b = static_cast<std::uint8_t>(c);
           return b >= 0x20 && b != 0x7f;  // printable ASCII or UTF-8 bytes
         });
}

// The file starts with ir_version (field 1, a small varint), then further ModelProto fields in
// field order (as protobuf serializers write them), each with its own wire type, until the
// bytes end. At least two fields must be seen. Protobuf has no magic: this is as robust as a
// prefix check gets, and runs only on files already refused as safetensors.
std::optional<SniffedFormat> onnx(std::string_view s) {
  if (s.size() < 4 || u8(s, 0) != 0x08) return std::nullopt;
  std::size_t pos = 1;
  auto ir = varint(s, pos);
  if (!ir || *ir < 1 || *ir > 64) return std::nullopt;
  // ModelProto: field number -> wire type (0 varint, 2 length-delimited).
  auto wire_type_of = [](std::uint64_t field) -> int {
    switch (field) {
      case 1: case 5: return 0;                                  // ir_version, model_version
      case 2: case 3: case 4: case 6: case 7: case 8: return 2;  // names, doc, graph, opset_import
      case 14: case 20: case 25: return 2;                       // metadata_props, training_info, functions
      default: return -1;
    }
  };
  int fields = 1;
  std::uint64_t last = 1;
  while (pos < s.size()) {
    auto tag = varint(s, pos);
    if (!tag) break;  // the bytes end inside a tag
    const std::uint64_t field = *tag >> 3;
    const int type = static_cast<int>(*tag & 7);
    if (field < last || wire_type_of(field) != type) return std::nullopt;
    last = field;
    if (type == 0) {
      if (!varint(s, pos) && pos < s.size()) return std::nullopt;
    } else {
      auto len = varint(s, pos);
      if (!len) break;
      if (*len > s.size() - pos) {  // runs past the bytes held: the walk ends here
        ++fields;
        break;
      }
      const std::string_view value = s.substr(pos, static_cast<std::size_t>(*len));
      if ((field == 2 || field == 3 || field == 4) && !plausible_name(value)) return std::nullopt;
      pos += static_cast<std::size_t>(*len);
    }
    ++fields;
  }
  if (fields < 2) return std::nullopt;
  return found(OtherFormat::Onnx, "an ONNX model (IR version " + std::to_string(*ir) + ")");
}

// --- text: Git LFS pointers, web pages, JSON ---

std::optional<SniffedFormat> text(std::string_view s) {
  constexpr std::string_view kLfs = "version https://git-lfs.github.com/spec/v1\n";
  if (at(s, 0, kLfs)) {
    std::string what = "a Git LFS pointer file";
    // "size N" names the real file's size.
    const std::string_view head = s.substr(0, std::min<std::size_t>(s.size(), 1024));
    if (auto p = head.find("\nsize "); p != std::string_view::npos) {
      const std::string_view rest = head.substr(p + 6);
      const std::size_t digits = std::min(rest.find_first_not_of("0123456789"), rest.size());
      if (digits > 0 && digits <= 20) what += " (for a file of " + std::string(rest.substr(0, digits)) + " bytes)";
    }
    return found(OtherFormat::GitLfsPointer, std::move(what),
                 "the real file is stored in Git LFS: run `git lfs pull` in a clone, or read it where Git "
                 "LFS serves it (hf://ORG/NAME for a Hub repo)");
  }
  // Leading white space and a UTF-8 byte order mark are skipped.
  std::size_t i = at(s, 0, "\xef\xbb\xbf") ? 3 : 0;
  while (i < s.size() && i < 1024 && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  std::string start(s.substr(i, std::min<std::size_t>(s.size() - i, 14)));
  for (auto& c : start) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (start.starts_with("<!doctype html") || start.starts_with("<html")) {
    return found(OtherFormat::Html, "a web page (HTML)",
                 "perhaps a sign-in or error page, or the URL of a web page rather than of the file");
  }
  if (i < s.size() && s[i] == '{') {
    std::size_t j = i + 1;
    while (j < s.size() && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r' || s[j] == '\n')) ++j;
    if (j < s.size() && (s[j] == '"' || s[j] == '}')) return found(OtherFormat::Json, "a JSON document");
  }
  return std::nullopt;
}

}  // namespace

std::optional<SniffedFormat> sniff_other_format(std::span<const std::byte> first_bytes) {
  // A local file is given whole (its mapping): look at its beginning only.
  constexpr std::size_t kLookAt = 4096;
  const std::string_view s = chars(first_bytes.first(std::min(first_bytes.size(), kLookAt)));
  if (could_be_safetensors(s)) return std::nullopt;

  if (at(s, 0, "GGUF")) {
    const std::uint32_t version = s.size() >= 8 ? le32(s, 4) : 0;
    if (version >= 1 && version <= 3) {
      return found(OtherFormat::Gguf, "a GGUF file (version " + std::to_string(version) + ")");
    }
    return found(OtherFormat::Gguf, "a GGUF file");
  }
  // The legacy llama.cpp magics, written as little-endian u32s.
  if (at(s, 0, "lmgg") || at(s, 0, "fmgg") || at(s, 0, "tjgg")) {
    return found(OtherFormat::Ggml, "a GGML file (the llama.cpp format before GGUF)");
  }
  if (auto z = zip(s)) return z;
  if (auto p = pickle(s)) return p;
  if (at(s, 0, "\x93NUMPY") && s.size() >= 8 && u8(s, 6) >= 1 && u8(s, 6) <= 3) {
    return found(OtherFormat::Npy, "a NumPy .npy file");
  }
  for (std::size_t offset : std::array<std::size_t, 4>{0, 512, 1024, 2048}) {
    if (at(s, offset, "\x89HDF\r\n\x1a\n")) return found(OtherFormat::Hdf5, "an HDF5 file");
  }
  if (at(s, 0, "\x1f\x8b\x08")) return found(OtherFormat::Gzip, "a gzip-compressed file");
  if (at(s, 0, "\x28\xb5\x2f\xfd")) return found(OtherFormat::Zstd, "a Zstandard-compressed file");
  if (at(s, 0, std::string_view("\xfd" "7zXZ\x00", 6))) return found(OtherFormat::Xz, "an xz-compressed file");
  if (at(s, 0, "BZh") && s.size() >= 4 && s[3] >= '1' && s[3] <= '9') {
    return found(OtherFormat::Bzip2, "a bzip2-compressed file");
  }
  if (at(s, 0, "7z\xbc\xaf\x27\x1c")) return found(OtherFormat::SevenZip, "a 7z archive");
  if (at(s, 257, std::string_view("ustar\0", 6)) || at(s, 257, "ustar ")) {
    return found(OtherFormat::Tar, "a tar archive");
  }
  if (auto o = onnx(s)) return o;
  return text(s);
}

Error explain_other_format(Error error, std::span<const std::byte> first_bytes) {
  auto sniffed = sniff_other_format(first_bytes);
  if (!sniffed) return error;
  std::string message = "this is " + sniffed->what + ", not safetensors (tensorfetch reads only safetensors)";
  if (!sniffed->hint.empty()) message += "; " + sniffed->hint;
  return Error{error.code, std::move(message)};
}

}  // namespace tensorfetch::detail
