// SPDX-License-Identifier: Apache-2.0
// HTTPS: the generated self-signed certificate, both host names verified, redirects in https.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "http_util.hpp"

using namespace hubtest;
using tensorfetch::testing::generate_self_signed_cert;

namespace {

httplib::Client verified_client(const std::string& host, int port, const fs::path& ca) {
  httplib::Client c("https://" + host + ":" + std::to_string(port));
  c.set_ca_cert_path(ca.c_str());
  c.enable_server_certificate_verification(true);
  c.set_read_timeout(10, 0);
  return c;
}

}  // namespace

TEST_CASE("HTTPS with a generated certificate for localhost and 127.0.0.1", "[tls]") {
  TempDir tmp;
  auto files = generate_self_signed_cert(tmp.path() / "tls");
  CHECK(fs::exists(files.cert));
  CHECK(fs::exists(files.key));
  CHECK(read_file(files.cert).rfind("-----BEGIN CERTIFICATE-----", 0) == 0);

  Options opt;
  opt.tls_cert = files.cert;
  opt.tls_key = files.key;
  Fixture f(opt);
  auto& s = *f.server;
  CHECK(s.tls());
  CHECK(s.endpoint() == "https://localhost:" + std::to_string(s.port()));

  auto hub = verified_client("localhost", s.port(), files.cert);
  auto r = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(r);
  CHECK(r->status == 302);
  const std::string location = r->get_header_value("Location");
  CHECK(location.rfind("https://127.0.0.1:" + std::to_string(s.port()) + "/cdn/", 0) == 0);

  auto cdn = verified_client("127.0.0.1", s.port(), files.cert);
  auto b = cdn.Get(target_of(location).c_str(), {{"Range", "bytes=0-99"}});
  REQUIRE(b);
  CHECK(b->status == 206);
  CHECK(b->body == read_file(f.root.file(kSmall, "model.safetensors")).substr(0, 100));

  // Not trusted without the certificate.
  httplib::SSLClient untrusted("localhost", s.port());
  untrusted.enable_server_certificate_verification(true);
  auto u = untrusted.Get("/org/small/resolve/main/config.json");
  CHECK_FALSE(u);

  // libcurl (what the library uses) accepts it as a CA bundle, for both names.
  if (std::system("command -v curl > /dev/null 2>&1") == 0) {
    auto out = tmp.path() / "curl.out";
    for (const std::string& url :
         {s.endpoint() + "/org/small/resolve/main/config.json", location}) {
      std::string cmd = "curl -sS --fail -o '" + out.string() + "' --cacert '" +
                        files.cert.string() + "' '" + url + "'";
      INFO(cmd);
      CHECK(std::system(cmd.c_str()) == 0);
    }
    CHECK(read_file(out) == read_file(f.root.file(kSmall, "model.safetensors")));
  }

  auto log = s.log();
  CHECK(log.size() >= 3);
  CHECK(log[0].host == "localhost:" + std::to_string(s.port()));
  CHECK(log[1].host == "127.0.0.1:" + std::to_string(s.port()));
}

TEST_CASE("start() refuses missing TLS files", "[tls]") {
  TempDir tmp;
  Options opt;
  opt.tls_cert = tmp.path() / "missing.pem";
  opt.tls_key = tmp.path() / "missing-key.pem";
  HubServer s(opt);
  CHECK_THROWS_AS(s.start(), std::runtime_error);
  Options half;
  half.tls_cert = tmp.path() / "missing.pem";
  HubServer t(half);
  CHECK_THROWS_AS(t.start(), std::runtime_error);
}
