// SPDX-License-Identifier: Apache-2.0
#include "base/hash.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <string>

namespace tensorfetch::detail {

std::string to_hex(const unsigned char* bytes, std::size_t len) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (std::size_t i = 0; i < len; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  return to_hex(md, len);
}

std::string git_blob_id_hex(std::string_view bytes) {
  const std::string prefix = "blob " + std::to_string(bytes.size()) + std::string(1, '\0');
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx) return {};
  EVP_DigestInit_ex(ctx, EVP_sha1(), nullptr);
  EVP_DigestUpdate(ctx, prefix.data(), prefix.size());
  EVP_DigestUpdate(ctx, bytes.data(), bytes.size());
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  return to_hex(md, len);
}

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), md, &len);
  return std::string(reinterpret_cast<const char*>(md), len);
}

}  // namespace tensorfetch::detail
