// SPDX-License-Identifier: Apache-2.0
// Private: the hashes the layers share (OpenSSL underneath; its headers stay in hash.cc): the
// cache's blob identities and verification, and the store layer's request signing (SigV4).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tensorfetch::detail {

/// Lower-case hex of `len` bytes. Pure.
[[nodiscard]] std::string to_hex(const unsigned char* bytes, std::size_t len);

/// Lower-case hex sha256 of `bytes` (OpenSSL). Pure, thread-safe.
[[nodiscard]] std::string sha256_hex(std::string_view bytes);

/// Lower-case hex of the git blob id of `bytes`: sha1 of `blob <size>\0` followed by them, as git
/// (and the Hub's `blobId`, the ETag of a small file) names a file's content. Pure, thread-safe.
[[nodiscard]] std::string git_blob_id_hex(std::string_view bytes);

/// The raw 32-byte HMAC-SHA256 of `message` under `key` (OpenSSL), as a byte string. Pure,
/// thread-safe.
[[nodiscard]] std::string hmac_sha256(std::string_view key, std::string_view message);

}  // namespace tensorfetch::detail
