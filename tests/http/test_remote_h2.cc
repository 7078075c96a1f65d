// SPDX-License-Identifier: Apache-2.0
// Remote open over HTTP/2 + TLS against a real server: nginx (Debian's nginx-light), started
// by the test as a single foreground process whose configuration, certificate, logs and
// temporary files all live in a temporary directory. It serves a sharded checkpoint made by
// tensorfetch-make-checkpoint; its access log (protocol, connection serial number, requests
// per connection, Range, status, bytes) shows what the client did on the wire.
// Without nginx the test is skipped with a WARN (CI installs nginx-light).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hub_server.hpp"  // generate_self_signed_cert
#include "support/files.hpp"
#include "tensorfetch/tensorfetch.hpp"

extern char** environ;

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using tensorfetch::Checkpoint;
using tensorfetch::OpenOptions;

namespace {

using tftest::TempDir;

// A file that may not exist yet (a log), as text ("" when missing).
std::string text_of(const fs::path& p) { return tftest::try_read_file(p).value_or(""); }

// nginx: $TENSORFETCH_NGINX, else /usr/sbin/nginx, else `nginx` on PATH; nullopt if none.
std::optional<fs::path> find_nginx() {
  if (const char* e = std::getenv("TENSORFETCH_NGINX"); e && *e) {
    return ::access(e, X_OK) == 0 ? std::optional<fs::path>(e) : std::nullopt;
  }
  if (::access("/usr/sbin/nginx", X_OK) == 0) return fs::path("/usr/sbin/nginx");
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      fs::path p = fs::path(dir.empty() ? "." : dir) / "nginx";
      if (::access(p.c_str(), X_OK) == 0) return p;
    }
  }
  return std::nullopt;
}

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  REQUIRE(ok);
  return ntohs(a.sin_port);
}

bool port_accepts(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// One line of the access log (format `tf` below).
struct AccessRecord {
  std::uint64_t connection = 0;           // $connection: serial number of the TCP connection
  std::uint64_t connection_requests = 0;  // $connection_requests: requests on it so far
  std::string protocol;                   // $server_protocol: "HTTP/2.0"
  std::string method;                     // $request_method
  std::string uri;                        // $request_uri
  std::string range;                      // $http_range ("-" when absent)
  int status = 0;                         // $status
  std::uint64_t body_bytes = 0;           // $body_bytes_sent
  std::string ssl_protocol;               // $ssl_protocol
  std::string session_reused;             // $ssl_session_reused: "r" when the TLS session was resumed
  std::string line;                       // the raw line, for messages
};

std::vector<AccessRecord> parse_access_log(const fs::path& file) {
  std::vector<AccessRecord> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string field;
    while (std::getline(ss, field, '|')) f.push_back(field);
    INFO("access log line: " << line);
    REQUIRE(f.size() == 10);
    AccessRecord r;
    r.connection = std::stoull(f[0]);
    r.connection_requests = std::stoull(f[1]);
    r.protocol = f[2];
    r.method = f[3];
    r.uri = f[4];
    r.range = f[5];
    r.status = std::stoi(f[6]);
    r.body_bytes = std::stoull(f[7]);
    r.ssl_protocol = f[8];
    r.session_reused = f[9];
    r.line = line;
    out.push_back(std::move(r));
  }
  return out;
}

// nginx serving `root` over HTTPS with HTTP/2 on 127.0.0.1, as one foreground process
// (`master_process off`: no privilege drop, no workers; the pid is the server). Everything it
// writes goes into `dir`. The destructor always stops it (SIGTERM, then SIGKILL) and reaps it.
class Nginx {
 public:
  Nginx(const fs::path& binary, const fs::path& dir, const fs::path& root, const fs::path& cert,
        const fs::path& key)
      : dir_(dir) {
    fs::create_directories(dir / "tmp");
    std::string last_error;
    for (int attempt = 0; attempt < 5; ++attempt) {  // a port taken in between: try another
      port_ = free_port();
      write_config(root, cert, key);
      spawn(binary);
      const auto deadline = std::chrono::steady_clock::now() + 15s;
      while (std::chrono::steady_clock::now() < deadline) {
        if (!alive()) break;
        if (port_accepts(port_)) return;
        std::this_thread::sleep_for(20ms);
      }
      last_error = text_of(dir / "error.log") + text_of(dir / "stderr.log");
      stop();
      if (last_error.find("Address already in use") == std::string::npos) break;
    }
    FAIL("nginx did not start; its error log:\n" << last_error);
  }
  ~Nginx() { stop(); }
  Nginx(const Nginx&) = delete;
  Nginx& operator=(const Nginx&) = delete;

  int port() const { return port_; }
  fs::path access_log() const { return dir_ / "access.log"; }
  std::string error_log() const { return text_of(dir_ / "error.log"); }

  // Waits until the access log holds at least `n` lines (nginx writes a line when it
  // finalizes a request, which may be just after the client saw the end of the response).
  std::vector<AccessRecord> wait_for_records(std::size_t n) const {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    std::vector<AccessRecord> log = parse_access_log(access_log());
    while (log.size() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
      log = parse_access_log(access_log());
    }
    // A moment more, so that a request beyond the expected ones would show up too.
    std::this_thread::sleep_for(200ms);
    return parse_access_log(access_log());
  }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    int status = 0;
    while (true) {
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    pid_ = -1;
  }

 private:
  bool alive() {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  void write_config(const fs::path& root, const fs::path& cert, const fs::path& key) {
    const std::string d = dir_.string();
    std::ofstream conf(dir_ / "nginx.conf", std::ios::trunc);
    conf << "daemon off;\n"
         << "master_process off;\n"
         << "pid " << d << "/nginx.pid;\n"
         << "lock_file " << d << "/nginx.lock;\n"
         << "error_log " << d << "/error.log info;\n"
         << "events { worker_connections 256; }\n"
         << "http {\n"
         << "  default_type application/octet-stream;\n"
         << "  types { application/json json; }\n"
         << "  client_body_temp_path " << d << "/tmp/body;\n"
         << "  proxy_temp_path " << d << "/tmp/proxy;\n"
         << "  fastcgi_temp_path " << d << "/tmp/fastcgi;\n"
         << "  uwsgi_temp_path " << d << "/tmp/uwsgi;\n"
         << "  scgi_temp_path " << d << "/tmp/scgi;\n"
         << "  log_format tf '$connection|$connection_requests|$server_protocol|$request_method|"
            "$request_uri|$http_range|$status|$body_bytes_sent|$ssl_protocol|$ssl_session_reused';\n"
         << "  access_log " << d << "/access.log tf;\n"
         << "  server {\n"
         << "    listen 127.0.0.1:" << port_ << " ssl http2;\n"
         << "    server_name localhost;\n"
         << "    ssl_certificate " << cert.string() << ";\n"
         << "    ssl_certificate_key " << key.string() << ";\n"
         << "    ssl_protocols TLSv1.2 TLSv1.3;\n"  // as a CDN speaks (nginx 1.22 leaves 1.3 off)
         << "    ssl_session_cache shared:tf:1m;\n"  // sessions can be resumed
         << "    root " << root.string() << ";\n"
         << "    location / { }\n"
         << "  }\n"
         << "}\n";
  }

  // fork + exec rather than posix_spawn, so that the child can ask to be killed when this
  // process dies without running destructors (a crash, or meson's timeout killing the test).
  void spawn(const fs::path& binary) {
    const std::string bin = binary.string(), prefix = dir_.string() + "/",
                      conf = (dir_ / "nginx.conf").string(), err = (dir_ / "error.log").string(),
                      out = (dir_ / "stderr.log").string();
    // -e: the log for messages before the configuration is read (default: /var/log/nginx).
    std::vector<std::string> args = {bin, "-p", prefix, "-c", conf, "-e", err};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) FAIL("fork: " << std::strerror(errno));
    if (pid_ == 0) {  // the child: async-signal-safe calls only
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent is already gone
      int in = ::open("/dev/null", O_RDONLY);
      int log = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (in < 0 || log < 0) ::_exit(127);
      ::dup2(in, 0);
      ::dup2(log, 1);
      ::dup2(log, 2);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
  }

  fs::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// Runs tensorfetch-make-checkpoint (TENSORFETCH_MAKE_CHECKPOINT_BIN) with these arguments.
void make_checkpoint(const std::vector<std::string>& extra) {
  const char* bin = std::getenv("TENSORFETCH_MAKE_CHECKPOINT_BIN");
  if (bin == nullptr || *bin == '\0') FAIL("TENSORFETCH_MAKE_CHECKPOINT_BIN is not set (run through meson test)");
  std::vector<std::string> args = {bin};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, bin, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

std::string hex(std::uint64_t v) {
  std::ostringstream os;
  os << std::hex << v;
  return os.str();
}

}  // namespace

TEST_CASE("remote over HTTP/2 + TLS (nginx): a sharded checkpoint opens with every request on HTTP/2, "
          "the shard headers multiplexed on one connection, each asking one first read sized from the index",
          "[remote][h2]") {
  const auto nginx_bin = find_nginx();
  if (!nginx_bin) {
    WARN("SKIPPED: nginx not found (/usr/sbin/nginx, $PATH or $TENSORFETCH_NGINX); install nginx-light "
         "(tools/install-deps.sh does) to run the HTTP/2 + TLS test");
    return;
  }
  TempDir tmp;
  const fs::path www = tmp.path() / "www";
  constexpr unsigned kShards = 8;
  // 8 layers of hidden size 128: about 4.7 MB of BF16 in 8 shards of ~600 KB, each larger than
  // the 256 KiB header window; the index names a handful of tensors per shard, so each shard's
  // first read is the smallest estimate (16 KiB), a 206 of exactly that many bytes.
  make_checkpoint({"-o", www.string(), "--layers", "8", "--hidden", "128", "--shards", std::to_string(kShards),
                   "--seed", "7"});
  auto local = Checkpoint::open(www.string());
  INFO((local ? std::string() : local.error().message));
  REQUIRE(local);
  REQUIRE(local->sharded());
  REQUIRE(local->files().size() == kShards);
  for (const auto& f : local->files()) REQUIRE(f.size > 262144);

  const auto tls = tensorfetch::testing::generate_self_signed_cert(tmp.path() / "tls");
  Nginx nginx(*nginx_bin, tmp.path() / "nginx", www, tls.cert, tls.key);

  OpenOptions o;
  o.token = std::string();  // never the developer's own token
  o.ca_file = tls.cert.string();
  o.max_retries = 0;  // a failure must show, not be retried away
  o.cache_dir = (tmp.path() / "cache").string();
  const std::string base = "https://127.0.0.1:" + std::to_string(nginx.port()) + "/";
  auto remote = Checkpoint::open(base + "model.safetensors.index.json", o);
  INFO("nginx error log:\n" << nginx.error_log());
  INFO((remote ? std::string() : remote.error().message));
  REQUIRE(remote);

  // What was read is what was generated: the same files, sizes, tensors, dtypes, shapes, offsets.
  CHECK(remote->remote());
  CHECK(remote->sharded());
  REQUIRE(remote->files().size() == local->files().size());
  for (std::size_t i = 0; i < local->files().size(); ++i) {
    const auto& rf = remote->files()[i];
    const auto& lf = local->files()[i];
    INFO(rf.path);
    CHECK(rf.path == lf.path);
    CHECK(rf.size == lf.size);
    CHECK(rf.url == base + lf.path);
    // nginx's ETag is "<mtime hex>-<size hex>".
    REQUIRE(rf.etag);
    CHECK(rf.etag->ends_with("-" + hex(lf.size) + "\""));
  }
  REQUIRE(remote->tensors().size() == local->tensors().size());
  CHECK(local->tensors().size() == 1 + 9 * 8 + 2);  // embeddings, 8 layers of 9, norm, lm_head
  for (std::size_t i = 0; i < local->tensors().size(); ++i) {
    const auto& r = remote->tensors()[i];
    const auto& l = local->tensors()[i];
    INFO(l.info->name);
    CHECK(r.info->name == l.info->name);
    CHECK(r.info->dtype == l.info->dtype);
    CHECK(std::vector<std::uint64_t>(r.info->shape.begin(), r.info->shape.end()) ==
          std::vector<std::uint64_t>(l.info->shape.begin(), l.info->shape.end()));
    CHECK(r.info->begin == l.info->begin);
    CHECK(r.info->end == l.info->end);
    CHECK(remote->files()[r.file].path == local->files()[l.file].path);
  }
  CHECK(remote->requests() == 1 + kShards);

  // The wire, as nginx saw it.
  const auto log = nginx.wait_for_records(1 + kShards);
  std::string lines;
  for (const auto& r : log) lines += r.line + "\n";
  INFO("access log ($connection|$connection_requests|$server_protocol|$request_method|$request_uri|"
       "$http_range|$status|$body_bytes_sent|$ssl_protocol|$ssl_session_reused):\n" << lines);
  REQUIRE(log.size() == 1 + kShards);
  std::set<std::uint64_t> all_connections, shard_connections;
  std::map<std::uint64_t, std::uint64_t> requests_per_connection;
  std::set<std::string> shard_uris;
  for (const auto& r : log) {
    INFO(r.line);
    CHECK(r.protocol == "HTTP/2.0");
    CHECK(r.method == "GET");  // no HEAD
    CHECK(r.ssl_protocol == "TLSv1.3");
    all_connections.insert(r.connection);
    auto& most = requests_per_connection[r.connection];
    most = std::max(most, r.connection_requests);
    if (r.uri == "/model.safetensors.index.json") {
      CHECK(r.range == "-");  // the index is read whole
      CHECK(r.status == 200);
      CHECK(r.body_bytes == fs::file_size(www / "model.safetensors.index.json"));
    } else {
      shard_uris.insert(r.uri);
      shard_connections.insert(r.connection);
      CHECK(r.range == "bytes=0-16383");
      CHECK(r.status == 206);
      CHECK(r.body_bytes == 16384);
    }
  }
  CHECK(shard_uris.size() == kShards);
  // The index (round 1) precedes the shards (round 2) in the log.
  CHECK(log.front().uri == "/model.safetensors.index.json");

  // Multiplexing: with PIPEWAIT the 8 shard requests wait for the connection that can carry
  // them all instead of opening one connection each. Observed: one TLS connection for all 9
  // requests (the index's connection is kept and reused), $connection_requests 1..9.
  std::ostringstream seen;
  for (const auto& [conn, n] : requests_per_connection) seen << " #" << conn << ": " << n << " requests;";
  WARN("HTTP/2 multiplexing observed: " << log.size() << " requests on " << all_connections.size()
                                        << " connection(s); the " << kShards << " shard headers on "
                                        << shard_connections.size() << " connection(s):" << seen.str());
  CHECK(shard_connections.size() == 1);
  CHECK(all_connections.size() == 1);
  CHECK(requests_per_connection.begin()->second == 1 + kShards);

  // Tensor data: each transfer on a TCP connection of its own (HTTP/1.1: a CDN caps every flow,
  // and HTTP/2 would multiplex all of them onto the one connection above), N at a time. Two
  // fetches: the layers first, then the rest.
  constexpr std::size_t kConnections = 4;
  tensorfetch::FetchOptions fo;
  fo.connections = kConnections;
  std::vector<tensorfetch::FetchStats> fetches;
  for (const char* pattern : {"model.layers.*", "*"}) {
    auto sel = remote->select(std::vector<tensorfetch::Selector>{{pattern, std::nullopt}});
    REQUIRE(sel);
    auto fetched = remote->fetch(*sel, fo);
    INFO(pattern << ": " << (fetched ? std::string() : fetched.error().message));
    REQUIRE(fetched);
    fetches.push_back(*fetched);
  }
  const std::size_t chunks = fetches[0].chunks + fetches[1].chunks;
  CHECK(fetches[0].chunks >= kConnections);
  const auto wire = nginx.wait_for_records(1 + kShards + chunks);
  std::string wire_lines;
  for (const auto& r : wire) wire_lines += r.line + "\n";
  INFO("access log after the fetches:\n" << wire_lines);
  REQUIRE(wire.size() == 1 + kShards + chunks);
  std::set<std::uint64_t> first_connections, second_connections, first_resumed;
  std::uint64_t data_bytes = 0;
  for (std::size_t i = 1 + kShards; i < wire.size(); ++i) {
    const auto& r = wire[i];
    INFO(r.line);
    CHECK(r.protocol == "HTTP/1.1");
    CHECK(r.ssl_protocol == "TLSv1.3");
    CHECK(r.status == 206);
    CHECK_FALSE(r.range.starts_with("bytes=0-"));
    CHECK_FALSE(all_connections.count(r.connection));  // not the multiplexed metadata connection
    const bool second = i >= 1 + kShards + fetches[0].chunks;
    (second ? second_connections : first_connections).insert(r.connection);
    if (!second && r.session_reused == "r") first_resumed.insert(r.connection);
    data_bytes += r.body_bytes;
  }
  CHECK(first_connections.size() == kConnections);  // N flows at once
  // The data connections resume the TLS session the open made (one share per checkpoint, and the
  // open's connection kept open so that its session stays resumable): no certificate or
  // signature again. Not necessarily all of them: OpenSSL uses a TLS 1.3 ticket once on the
  // client (a resumed handshake that finishes makes it not resumable) and libcurl 7.88 keeps one
  // ticket per host, so a connection whose ClientHello leaves after another one finished resuming
  // does a full handshake (over a real RTT all N hellos leave first; over a busy loopback not
  // always). The first connection to finish its handshake always resumes: at least one here.
  INFO("data connections that resumed the open's TLS session: " << first_resumed.size() << " of "
                                                                << first_connections.size());
  CHECK(first_resumed.size() >= 1);
  CHECK(second_connections.size() <= kConnections);
  CHECK(data_bytes == fetches[0].bytes_transferred + fetches[1].bytes_transferred);
  for (const auto& t : remote->tensors()) {
    auto v = remote->view(t);
    auto lv = local->view(*local->find(std::string(t.info->name)));
    REQUIRE(v);
    REQUIRE(lv);
    REQUIRE(v->bytes.size() == lv->bytes.size());
    CHECK(std::memcmp(v->bytes.data(), lv->bytes.data(), v->bytes.size()) == 0);
  }
}

TEST_CASE("remote (nginx): a file rewritten with the same size within one second keeps nginx's ETag; the next open "
          "finds the cached bytes stale, retires them, says so, and serves the new bytes",
          "[remote][h2][stale]") {
  const auto nginx_bin = find_nginx();
  if (!nginx_bin) {
    WARN("SKIPPED: nginx not found (/usr/sbin/nginx, $PATH or $TENSORFETCH_NGINX); install nginx-light");
    return;
  }
  TempDir tmp;
  const fs::path www = tmp.path() / "www", v2 = tmp.path() / "v2";
  // Two versions of one model.safetensors: the same tensors (so the same header and size),
  // other values (another seed). Larger than the 256 KiB first window, which holds tensor bytes.
  make_checkpoint({"-o", www.string(), "--layers", "2", "--hidden", "128", "--shards", "1", "--seed", "7"});
  make_checkpoint({"-o", v2.string(), "--layers", "2", "--hidden", "128", "--shards", "1", "--seed", "8"});
  const fs::path served = www / "model.safetensors";
  const std::string old_bytes = tftest::read_file(served), new_bytes = tftest::read_file(v2 / "model.safetensors");
  REQUIRE(old_bytes.size() == new_bytes.size());
  REQUIRE(old_bytes.size() > 2 * 262144);
  REQUIRE(old_bytes != new_bytes);

  const auto tls = tensorfetch::testing::generate_self_signed_cert(tmp.path() / "tls");
  Nginx nginx(*nginx_bin, tmp.path() / "nginx", www, tls.cert, tls.key);
  std::vector<tensorfetch::StaleCache> told;
  OpenOptions o;
  o.token = std::string();
  o.ca_file = tls.cert.string();
  o.max_retries = 0;
  o.cache_dir = (tmp.path() / "cache").string();
  o.on_stale_cache = [&told](const tensorfetch::StaleCache& s) { told.push_back(s); };
  const std::string url = "https://127.0.0.1:" + std::to_string(nginx.port()) + "/model.safetensors";

  // The last tensor in the file lies past the first window: fetched by range requests.
  auto last_of = [](const Checkpoint& c) {
    const tensorfetch::TensorRef* last = &c.tensors().front();
    for (const auto& t : c.tensors()) last = t.info->begin > last->info->begin ? &t : last;
    return last;
  };
  auto fetch_last = [&](Checkpoint& c) -> std::string {
    const tensorfetch::TensorRef* last = last_of(c);
    const std::vector<tensorfetch::Selector> selectors{tensorfetch::Selector{std::string(last->info->name), std::nullopt}};
    auto sel = c.select(selectors);
    INFO((sel ? std::string() : sel.error().message));
    REQUIRE(sel);
    auto fetched = c.fetch(*sel);
    INFO((fetched ? std::string() : fetched.error().message));
    REQUIRE(fetched);
    auto view = c.view(*last);
    REQUIRE(view);
    return std::string(reinterpret_cast<const char*>(view->bytes.data()), view->bytes.size());
  };
  std::optional<std::string> etag;
  std::uint64_t begin = 0, end = 0;
  {
    auto first = Checkpoint::open(url, o);
    INFO((first ? std::string() : first.error().message));
    REQUIRE(first);
    etag = first->files()[0].etag;
    const std::string got = fetch_last(*first);
    const std::uint64_t data = first->header(0)->data_offset();
    begin = data + last_of(*first)->info->begin;
    end = data + last_of(*first)->info->end;
    CHECK(got == old_bytes.substr(begin, end - begin));
  }
  REQUIRE(told.empty());
  REQUIRE(begin > 262144);

  // Rewritten within the same second: the same size and modification time, so the same ETag.
  struct stat st {};
  REQUIRE(::stat(served.c_str(), &st) == 0);
  {
    std::fstream f(served, std::ios::in | std::ios::out | std::ios::binary);
    f.write(new_bytes.data(), static_cast<std::streamsize>(new_bytes.size()));
  }
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, served.c_str(), times, 0) == 0);
  const std::size_t before = nginx.wait_for_records(1).size();

  auto second = Checkpoint::open(url, o);
  INFO((second ? std::string() : second.error().message));
  REQUIRE(second);
  CHECK(second->files()[0].etag == etag);
  REQUIRE(told.size() == 1);
  CHECK(told[0].file == "model.safetensors");
  CHECK(told[0].url == url);
  CHECK(told[0].offset >= second->header(0)->data_offset());  // the header is the same; tensor bytes differ
  CHECK(told[0].blob.find(".retired-") != std::string::npos);
  CHECK(fs::is_directory(tmp.path() / "cache" / "blobs" / told[0].blob));
  // The stale bytes are not served.
  auto stale = second->view(*last_of(*second));
  REQUIRE_FALSE(stale);
  CHECK(stale.error().code == tensorfetch::ErrorCode::NotFetched);
  CHECK(fetch_last(*second) == new_bytes.substr(begin, end - begin));
  // On the wire: the tensor's range was asked for again after the rewrite.
  const auto log = nginx.wait_for_records(before + 2);
  bool asked = false;
  for (std::size_t i = before; i < log.size(); ++i) {
    const auto& r = log[i];
    if (r.status == 206 && r.range.starts_with("bytes=") && std::stoull(r.range.substr(6)) <= begin &&
        std::stoull(r.range.substr(r.range.find('-') + 1)) + 1 >= end) {
      asked = true;
    }
  }
  CHECK(asked);
}
