// SPDX-License-Identifier: Apache-2.0
// Shared by every test suite: byte encodings and digests the tests compute independently of
// the library (the library's own are what is under test).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tftest {

/// The 8-byte little-endian encoding of `n` (a safetensors file's header length prefix).
std::string le64(std::uint64_t n);

/// A safetensors file: le64(header size), the header text verbatim (no padding added), then
/// the data bytes.
std::string make_safetensors(std::string_view header, std::string_view data);

/// `n` deterministic, random-looking bytes (xorshift32 from `seed`): tensor data whose every
/// byte matters, so a misplaced range shows.
std::string pattern_bytes(std::size_t n, std::uint32_t seed);

/// A safetensors file of `count` F32 tensors `t0`, `t1`, ... of `tensor_bytes` bytes each (a
/// multiple of 4), laid out in order, the header padded to 8 bytes, the data `pattern_bytes`
/// from `seed`: a file whose tensors each fill a known byte range.
std::string uniform_f32_model(int count, std::uint64_t tensor_bytes, std::uint32_t seed);

/// Lower-case hex sha256 of the bytes (OpenSSL).
std::string sha256_hex(std::string_view bytes);

/// Lower-case hex sha1 of the bytes (OpenSSL).
std::string sha1_hex(std::string_view bytes);

/// The git blob id of the bytes, sha1("blob LEN\0" + bytes): how huggingface_hub names the
/// blobs of small (non-LFS) files in its cache.
std::string git_blob_sha1_hex(std::string_view bytes);

}  // namespace tftest
