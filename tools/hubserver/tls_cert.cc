// SPDX-License-Identifier: Apache-2.0
// A self-signed certificate for the test server, made with the OpenSSL C API (no network,
// no `openssl` binary).
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "hub_server.hpp"

namespace tensorfetch::testing {

namespace {

template <class T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using PKeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("generate_self_signed_cert: ") + what);
}

void add_ext(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  check(ext != nullptr, "extension");
  check(X509_add_ext(cert, ext.get(), -1) == 1, "add extension");
}

void write_pem(const std::filesystem::path& path, bool key, EVP_PKEY* pkey, X509* cert) {
  FILE* f = std::fopen(path.c_str(), "wb");
  check(f != nullptr, "cannot create output file");
  bool ok = key ? PEM_write_PrivateKey(f, pkey, nullptr, nullptr, 0, nullptr, nullptr) == 1
                : PEM_write_X509(f, cert) == 1;
  ok = std::fclose(f) == 0 && ok;
  check(ok, "cannot write PEM");
}

}  // namespace

TlsFiles generate_self_signed_cert(const std::filesystem::path& dir, int valid_days) {
  std::filesystem::create_directories(dir);
  PKeyPtr pkey(EVP_EC_gen("P-256"));
  check(pkey != nullptr, "key generation");

  X509Ptr cert(X509_new());
  check(cert != nullptr, "X509_new");
  check(X509_set_version(cert.get(), 2) == 1, "version");
  unsigned char serial[16];
  FILE* urandom = std::fopen("/dev/urandom", "rb");
  check(urandom != nullptr && std::fread(serial, 1, sizeof serial, urandom) == sizeof serial,
        "serial");
  std::fclose(urandom);
  serial[0] &= 0x7f;
  std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>> bn(BN_bin2bn(serial, sizeof serial, nullptr));
  check(bn && BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) != nullptr,
        "serial number");
  check(X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr, "notBefore");
  check(X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400L * valid_days) != nullptr,
        "notAfter");
  check(X509_set_pubkey(cert.get(), pkey.get()) == 1, "public key");

  X509_NAME* name = X509_get_subject_name(cert.get());
  check(X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>("tensorfetch test"), -1,
                                   -1, 0) == 1 &&
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                       reinterpret_cast<const unsigned char*>("localhost"), -1, -1,
                                       0) == 1,
        "subject");
  check(X509_set_issuer_name(cert.get(), name) == 1, "issuer");

  // Its own CA (so a client can use the certificate itself as the CA bundle) and a server.
  add_ext(cert.get(), NID_basic_constraints, "critical,CA:TRUE");
  add_ext(cert.get(), NID_key_usage, "critical,digitalSignature,keyCertSign");
  add_ext(cert.get(), NID_ext_key_usage, "serverAuth");
  add_ext(cert.get(), NID_subject_key_identifier, "hash");
  add_ext(cert.get(), NID_authority_key_identifier, "keyid:always");
  add_ext(cert.get(), NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1,IP:::1");

  check(X509_sign(cert.get(), pkey.get(), EVP_sha256()) > 0, "sign");

  TlsFiles files{dir / "cert.pem", dir / "key.pem"};
  write_pem(files.key, true, pkey.get(), nullptr);
  write_pem(files.cert, false, nullptr, cert.get());
  return files;
}

}  // namespace tensorfetch::testing
