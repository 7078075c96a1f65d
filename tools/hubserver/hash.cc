// SPDX-License-Identifier: Apache-2.0
// Digests of the test server (see hash_internal.h).
#include <fcntl.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <stdexcept>
#include <vector>

#include "hash_internal.h"
#include "hub_server.hpp"

namespace tensorfetch::testing {

namespace detail {

std::string hex(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

namespace {

std::string digest_hex(const EVP_MD* md, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out, &len, md, nullptr) != 1) {
    throw std::runtime_error("EVP_Digest failed");
  }
  return hex(out, len);
}

}  // namespace

std::string sha256_hex(std::string_view data) { return digest_hex(EVP_sha256(), data); }
std::string sha1_hex(std::string_view data) { return digest_hex(EVP_sha1(), data); }

std::string file_digest_hex(const std::filesystem::path& path, const EVP_MD* md,
                            std::string_view prefix) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  bool ok = ctx && EVP_DigestInit_ex(ctx.get(), md, nullptr) == 1 &&
            EVP_DigestUpdate(ctx.get(), prefix.data(), prefix.size()) == 1;
  std::vector<char> buf(1 << 20);
  while (ok) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    ok = EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(n)) == 1;
  }
  ::close(fd);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!ok || EVP_DigestFinal_ex(ctx.get(), out, &len) != 1) {
    throw std::runtime_error("cannot hash " + path.string());
  }
  return hex(out, len);
}

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> r(bytes);
  if (RAND_bytes(r.data(), static_cast<int>(r.size())) != 1) {
    throw std::runtime_error("RAND_bytes failed");
  }
  return hex(r.data(), r.size());
}

}  // namespace detail

std::string git_blob_sha1(std::string_view content) {
  std::string s = "blob " + std::to_string(content.size());
  s.push_back('\0');
  s.append(content);
  return detail::sha1_hex(s);
}

std::string default_commit(std::string_view repo_id) { return detail::sha1_hex(repo_id); }

}  // namespace tensorfetch::testing
