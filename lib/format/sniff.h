// SPDX-License-Identifier: Apache-2.0
// Private: recognises files that are not safetensors by their first bytes (GGUF, PyTorch zip
// and pickle checkpoints, NumPy, HDF5, ONNX, compressed archives, Git LFS pointers, web
// pages), so that such a file is refused with "this is a GGUF file, not safetensors" instead
// of a puzzling header length. Pure functions over bytes the caller holds; no I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// A file format other than safetensors that `sniff_other_format` recognises.
enum class OtherFormat {
  Gguf,           ///< llama.cpp's GGUF (`GGUF` + version)
  Ggml,           ///< GGUF's predecessors (`ggml`, `ggmf`, `ggjt` magics)
  PyTorchZip,     ///< torch.save / torch.jit.save since PyTorch 1.6: a zip of `ARCHIVE/data.pkl`, …
  NumpyZip,       ///< numpy.savez: a zip of `.npy` files
  Zip,            ///< any other zip archive
  PyTorchPickle,  ///< torch.save's legacy format: a pickle that starts with its magic number
  Pickle,         ///< any other Python pickle of protocol 2 to 5
  Npy,            ///< NumPy `.npy` (`\x93NUMPY`)
  Hdf5,           ///< HDF5 (Keras `.h5`), signature at offset 0, 512, 1024 or 2048
  Onnx,           ///< ONNX ModelProto (protobuf), by the fields it starts with
  Gzip,           ///< gzip-compressed data
  Zstd,           ///< Zstandard-compressed data
  Xz,             ///< xz-compressed data
  Bzip2,          ///< bzip2-compressed data
  SevenZip,       ///< a 7z archive
  Tar,            ///< a POSIX or GNU tar archive (`ustar` at offset 257)
  GitLfsPointer,  ///< a Git LFS pointer file standing in for the real one
  Html,           ///< a web page
  Json,           ///< a JSON object (a config.json, an index under another name, …)
};

/// What `sniff_other_format` recognised.
struct SniffedFormat {
  OtherFormat format;  ///< the format
  std::string what;    ///< how a message names it: "a GGUF file (version 3)"
  std::string hint;    ///< what the user may do about it, or empty
};

/// Says which other format a file is, from its first bytes (as many as the caller holds, of
/// which at most the first 4 KiB are looked at: 8 are enough for most magics; a zip's first
/// entry name, a tar header, ONNX's first fields or an HDF5 signature at offset 2048 need more).
/// Nothing is decompressed or decoded beyond a zip's first entry name and a few protobuf fields.
/// Returns nothing for bytes it does not recognise, and for bytes that could start a valid
/// safetensors file (a header length of at most kMaxHeaderSize followed by `{`, or fewer than
/// 9 bytes whose length is plausible): call it only once the safetensors checks have refused
/// the file, so that a valid file whose first bytes happen to match a magic is never
/// rejected. Pure; thread-safe.
[[nodiscard]] std::optional<SniffedFormat> sniff_other_format(std::span<const std::byte> first_bytes);

/// `error` (a refusal of a file's first bytes as safetensors) with its message replaced by
/// "this is X, not safetensors (tensorfetch reads only safetensors)" (plus a hint) when
/// `first_bytes` are another recognised format; otherwise `error` unchanged. The code is kept,
/// so the refusal stays an invalid-safetensors error (exit 2). Pure; thread-safe.
[[nodiscard]] Error explain_other_format(Error error, std::span<const std::byte> first_bytes);

}  // namespace tensorfetch::detail
