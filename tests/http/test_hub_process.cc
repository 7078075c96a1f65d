// SPDX-License-Identifier: Apache-2.0
// `tensorfetch-test-server` as a process: endpoint line on stdout, flags, log file, SIGTERM.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "http_util.hpp"

extern char** environ;

using namespace hubtest;
using tensorfetch::testing::read_log_file;

namespace {

fs::path server_bin() {
  const char* env = std::getenv("TENSORFETCH_TEST_SERVER_BIN");
  REQUIRE(env != nullptr);
  return env;
}

// A running server process; killed (SIGKILL) if the test did not stop it.
struct Process {
  pid_t pid = -1;
  int out = -1;
  fs::path err;

  Process(const std::vector<std::string>& args, const fs::path& stderr_file) : err(stderr_file) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 2, stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    out = fds[0];
    REQUIRE(rc == 0);
  }
  ~Process() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out >= 0) ::close(out);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // The first stdout line ("" on timeout or EOF).
  std::string first_line(int timeout_ms = 10000) {
    std::string line;
    auto t0 = std::chrono::steady_clock::now();
    while (line.find('\n') == std::string::npos) {
      auto left = timeout_ms - std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count();
      pollfd p{out, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return {};
      char c[256];
      ssize_t n = ::read(out, c, sizeof c);
      if (n <= 0) return {};
      line.append(c, static_cast<std::size_t>(n));
    }
    return line.substr(0, line.find('\n'));
  }

  // The port of the endpoint the server printed ("http://localhost:PORT"); fails the test
  // otherwise, showing its stderr.
  int http_port() {
    const std::string endpoint = first_line();
    INFO(hubtest::read_file(err));
    REQUIRE(endpoint.rfind("http://localhost:", 0) == 0);
    return std::atoi(endpoint.substr(endpoint.rfind(':') + 1).c_str());
  }

  // Waits for the process to exit; returns its exit status (-1 if it did not exit normally).
  int wait() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Sends SIGTERM and returns the exit status (-1 if it did not exit normally).
  int terminate() {
    ::kill(pid, SIGTERM);
    return wait();
  }
};

int port_of(const std::string& endpoint) {
  return std::atoi(endpoint.substr(endpoint.rfind(':') + 1).c_str());
}

}  // namespace

TEST_CASE("the server process prints its endpoint, serves, logs, and stops on SIGTERM",
          "[process]") {
  Root root;
  TempDir tmp;
  const fs::path log = tmp.path() / "log.jsonl";
  Process p({server_bin().string(), "--root", root.path().string(), "--latency-ms", "20", "--log",
             log.string(), "--cdn-host", "127.0.0.1", "--summary"},
            tmp.path() / "stderr.txt");
  const int port = p.http_port();

  httplib::Client hub("localhost", port);
  auto r = hub.Get("/org/llama-tiny-sharded/resolve/main/model-00001-of-00003.safetensors");
  REQUIRE(r);
  CHECK(r->status == 302);
  const std::string location = r->get_header_value("Location");
  CHECK(location.rfind("http://127.0.0.1:" + std::to_string(port) + "/cdn/", 0) == 0);
  httplib::Client cdn("127.0.0.1", port);
  auto b = cdn.Get(target_of(location).c_str(), {{"Range", "bytes=0-7"}});
  REQUIRE(b);
  CHECK(b->status == 206);
  // Switches at run time through the admin route.
  REQUIRE(hub.Get("/_admin/set?fail_next=1&status=503"));
  r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 503);

  CHECK(p.terminate() == 0);
  auto records = read_log_file(log);
  REQUIRE(records.size() == 3);
  CHECK(records[0].kind == "resolve");
  CHECK(records[1].kind == "cdn");
  CHECK(records[1].body_bytes == 8);
  CHECK(records[1].end_ms - records[1].start_ms >= 19);
  CHECK(records[2].fault == "fail");
  std::string err = read_file(tmp.path() / "stderr.txt");
  auto summary = nlohmann::json::parse(err.substr(err.find('{')));
  CHECK(summary["requests"] == 3);
}

TEST_CASE("the server process serves HTTPS with --tls-self-signed", "[process]") {
  Root root;
  TempDir tmp;
  Process p({server_bin().string(), "--root", root.path().string(), "--tls-self-signed",
             (tmp.path() / "tls").string()},
            tmp.path() / "stderr.txt");
  const std::string endpoint = p.first_line();
  INFO(read_file(tmp.path() / "stderr.txt"));
  REQUIRE(endpoint.rfind("https://localhost:", 0) == 0);
  httplib::SSLClient c("localhost", port_of(endpoint));
  c.set_ca_cert_path((tmp.path() / "tls" / "cert.pem").c_str());
  c.enable_server_certificate_verification(true);
  auto r = c.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(p.terminate() == 0);
}

TEST_CASE("the server process refuses bad arguments", "[process]") {
  TempDir tmp;
  Process p({server_bin().string(), "--root", (tmp.path() / "missing").string()},
            tmp.path() / "stderr.txt");
  CHECK(p.first_line(5000).empty());
  const int code = p.wait();
  CHECK(code != 0);
  CHECK(code != -1);
}

TEST_CASE("the server process answers as the real Hub with --real-hub, --alias, --disabled, "
          "--other-token, --rate-limit and --cdn-fault",
          "[process][real_hub]") {
  Root root;
  TempDir tmp;
  Process p({server_bin().string(), "--root", root.path().string(), "--real-hub", "--alias",
             "gpt2=org/small", "--alias", "datasets/squad=datasets/org/ds", "--disabled",
             "org/llama-tiny-sharded", "--other-token", "hf_other", "--rate-limit", "100",
             "--rate-window", "60", "--cdn-fault", "416", "--cdn-fault-n", "1"},
            tmp.path() / "stderr.txt");
  const int port = p.http_port();
  httplib::Client hub("localhost", port);
  auto r = hub.Get("/gpt2/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->get_header_value("RateLimit") == "\"resolvers\";r=99;t=60");
  CHECK(r->status == 307);
  CHECK(r->get_header_value("Location") == "/org/small/resolve/main/config.json");
  CHECK(r->get_header_value("RateLimit-Policy") == "\"fixed window\";\"resolvers\";q=100;w=60");
  r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 307);  // to the resolve cache
  CHECK(hub.Get("/datasets/squad/resolve/main/README.md")->status == 307);
  r = hub.Get("/org/llama-tiny-sharded/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 403);
  CHECK(r->get_header_value("X-Error-Message") == "Access to this resource is disabled.");
  CHECK(hub.Get("/org/nope/resolve/main/config.json")->status == 401);
  CHECK(hub.Get("/org/nope/resolve/main/config.json", {{"Authorization", "Bearer hf_other"}})->status ==
        404);
  r = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(r);
  CHECK(r->status == 302);
  CHECK_FALSE(r->has_header("ETag"));
  httplib::Client cdn("127.0.0.1", port);
  const std::string blob = target_of(r->get_header_value("Location"));
  auto b = cdn.Get(blob.c_str(), {{"Range", "bytes=0-0"}});
  REQUIRE(b);
  CHECK(b->status == 416);
  CHECK(b->get_header_value("Content-Range") == "bytes */" + std::to_string(kSmallModelSize));
  b = cdn.Get(blob.c_str(), {{"Range", "bytes=0-0"}});
  REQUIRE(b);
  CHECK(b->status == 206);
  CHECK(b->get_header_value("ETag").size() == 66);
  CHECK(p.terminate() == 0);
}

TEST_CASE("the server process refuses a malformed --alias", "[process][real_hub]") {
  Root root;
  TempDir tmp;
  for (const char* alias : {"gpt2", "gpt2=noorg"}) {
    INFO(alias);
    Process p({server_bin().string(), "--root", root.path().string(), "--alias", alias},
              tmp.path() / "stderr.txt");
    CHECK(p.first_line(5000).empty());
    CHECK(p.wait() == 1);
    CHECK_THAT(read_file(tmp.path() / "stderr.txt"), Catch::Contains("alias"));
  }
}
