// SPDX-License-Identifier: Apache-2.0
// Digests of the test server (OpenSSL EVP): hex encoding, sha256/sha1 of bytes and of files.
// git_blob_sha1 and default_commit are public (hub_server.hpp). Private to tools/hubserver.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace tensorfetch::testing::detail {

/// Lower-case hex of n bytes.
std::string hex(const unsigned char* p, std::size_t n);
/// Hex sha256 of `data`.
std::string sha256_hex(std::string_view data);
/// Hex sha1 of `data`.
std::string sha1_hex(std::string_view data);
/// Streams a file through digest `md`; `prefix` is hashed first (the git blob header).
/// Throws std::runtime_error when the file cannot be read.
std::string file_digest_hex(const std::filesystem::path& path, const EVP_MD* md,
                            std::string_view prefix);
/// 32 random bytes as hex (the CDN URL signing secret). Throws when OpenSSL has no entropy.
std::string random_hex(std::size_t bytes);

}  // namespace tensorfetch::testing::detail
