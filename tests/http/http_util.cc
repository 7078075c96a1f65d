// SPDX-License-Identifier: Apache-2.0
#include "http_util.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <stdexcept>

namespace hubtest {

fs::path reference_dir() {
  auto dir = tftest::reference_dir();
  if (!dir) FAIL("TENSORFETCH_REFERENCE_DIR is unset or holds no MANIFEST.json (run the tests through meson test)");
  return *dir;
}

using tftest::pattern_bytes;
using tftest::write_file;

Root::Root() {
  tftest::copy_files(reference_dir() / "llama-tiny-sharded", path() / kSharded);
  write_file(path() / kSmall / "model.safetensors", pattern_bytes(kSmallModelSize, 1));
  write_file(path() / kSmall / "config.json", "{\"model_type\": \"llama\"}\n");
  write_file(path() / kSmall / "sub" / "dir" / "notes.txt", "hello\n");
  write_file(path() / kSmall / ".refs", std::string("refs/pr/1 ") + kPr1Commit + "\n");
  write_file(path() / kDataset / "data" / "train.safetensors", pattern_bytes(4096, 2));
  write_file(path() / kDataset / "README.md", "# ds\n");
}

Fixture::Fixture(Options opt) {
  opt.root = root.path();
  server = std::make_unique<HubServer>(opt);
  server->start();
}

Fixture::~Fixture() { server->stop(); }

httplib::Client Fixture::hub() const {
  httplib::Client c("localhost", server->port());
  c.set_keep_alive(true);
  c.set_read_timeout(10, 0);
  return c;
}

httplib::Client Fixture::cdn() const {
  httplib::Client c("127.0.0.1", server->port());
  c.set_keep_alive(true);
  c.set_read_timeout(10, 0);
  return c;
}

std::string target_of(const std::string& url) {
  auto scheme = url.find("://");
  auto slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return slash == std::string::npos ? "/" : url.substr(slash);
}

std::string Fixture::cdn_target(const std::string& repo, const std::string& file) {
  auto c = hub();
  auto r = c.Get(("/" + repo + "/resolve/main/" + file).c_str());
  REQUIRE(r);
  REQUIRE(r->status == 302);
  return target_of(r->get_header_value("Location"));
}

RawResult raw_request(int port, const std::string& request, std::chrono::milliseconds timeout) {
  RawResult res;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto t0 = std::chrono::steady_clock::now();
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("connect");
  }
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  char buf[65536];
  for (;;) {
    auto left = timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - t0);
    if (left.count() <= 0) break;
    pollfd pfd{fd, POLLIN, 0};
    int pr = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (pr <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      res.closed = true;
      break;
    }
    res.data.append(buf, static_cast<std::size_t>(n));
  }
  res.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  return res;
}

std::string raw_get(const std::string& host, const std::string& target,
                    const std::vector<std::string>& extra_headers) {
  std::string s = "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n";
  for (const auto& h : extra_headers) s += h + "\r\n";
  return s + "\r\n";
}

std::vector<RequestRecord> find(const std::vector<RequestRecord>& log, const std::string& needle) {
  std::vector<RequestRecord> out;
  for (const auto& r : log) {
    if (r.target.find(needle) != std::string::npos) out.push_back(r);
  }
  return out;
}

}  // namespace hubtest
