// SPDX-License-Identifier: Apache-2.0
#include "bytes.hpp"

#include <openssl/evp.h>

#include <stdexcept>

namespace tftest {

namespace {

std::string hex(const unsigned char* md, unsigned len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * len);
  for (unsigned i = 0; i < len; ++i) {
    s.push_back(kDigits[md[i] >> 4]);
    s.push_back(kDigits[md[i] & 15]);
  }
  return s;
}

// Digest of the concatenated parts.
std::string digest_hex(const EVP_MD* md, std::string_view a, std::string_view b = {}) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, md, nullptr) == 1 &&
                  EVP_DigestUpdate(ctx, a.data(), a.size()) == 1 && EVP_DigestUpdate(ctx, b.data(), b.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx, out, &len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) throw std::runtime_error("OpenSSL digest failed");
  return hex(out, len);
}

}  // namespace

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

std::string make_safetensors(std::string_view header, std::string_view data) {
  std::string s = le64(header.size());
  s += header;
  s += data;
  return s;
}

std::string pattern_bytes(std::size_t n, std::uint32_t seed) {
  std::string s(n, '\0');
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (auto& c : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x >> 11);
  }
  return s;
}

std::string sha256_hex(std::string_view bytes) { return digest_hex(EVP_sha256(), bytes); }

std::string sha1_hex(std::string_view bytes) { return digest_hex(EVP_sha1(), bytes); }

std::string git_blob_sha1_hex(std::string_view bytes) {
  const std::string prefix = "blob " + std::to_string(bytes.size());
  return digest_hex(EVP_sha1(), std::string_view(prefix.c_str(), prefix.size() + 1), bytes);  // with the NUL
}

std::string uniform_f32_model(int count, std::uint64_t tensor_bytes, std::uint32_t seed) {
  std::string header = "{";
  for (int i = 0; i < count; ++i) {
    const std::uint64_t begin = tensor_bytes * static_cast<std::uint64_t>(i);
    if (i > 0) header += ",";
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(tensor_bytes / 4) +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(begin + tensor_bytes) + "]}";
  }
  header += "}";
  while (header.size() % 8 != 0) header.push_back(' ');
  return le64(header.size()) + header + pattern_bytes(static_cast<std::size_t>(tensor_bytes) * static_cast<std::size_t>(count), seed);
}

}  // namespace tftest
