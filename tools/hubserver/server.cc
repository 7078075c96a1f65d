// SPDX-License-Identifier: Apache-2.0
// The test server's lifecycle (see hub_server.hpp): start, stop, endpoints, the log calls.
//
// Notes on cpp-httplib 0.11.4 (the Debian build, compiled as a shared library):
// - The logger runs on the worker thread after the body was written (or the connection
//   dropped); the handler leaves its half-built record in a thread_local for it
//   (request_log.cc).
// - Requests httplib refuses before routing (a syntactically bad Range → 416, bad request
//   line → 400) reach only the logger; they are recorded too.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

#include "server_internal.h"

namespace tensorfetch::testing {

namespace fs = std::filesystem;

// ================================================================ Impl

HubServer::Impl::Impl(Options o)
    : opt(std::move(o)), log(opt.log_authorization_values), switches(opt), repos(opt) {}

bool HubServer::Impl::sleep_or_stop(std::chrono::milliseconds d) {
  std::unique_lock lk(stop_mu);
  return stop_cv.wait_for(lk, d, [&] { return stopping.load(); });
}

void HubServer::Impl::wait_for_stop() {
  std::unique_lock lk(stop_mu);
  stop_cv.wait(lk, [&] { return stopping.load(); });
}

void HubServer::Impl::shutdown_connections() const {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/self/fd", ec)) {
    int fd = std::atoi(e.path().filename().c_str());
    if (fd < 0 || fd == listen_fd) continue;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    int lport = -1;
    if (local.ss_family == AF_INET)
      lport = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    else if (local.ss_family == AF_INET6)
      lport = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
    if (lport != port) continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    ::shutdown(fd, SHUT_RDWR);
  }
}

// ================================================================ HubServer

HubServer::HubServer(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HubServer::~HubServer() { stop(); }

int HubServer::start() {
  Impl& m = *impl_;
  if (m.started.exchange(true)) throw std::runtime_error("HubServer already started");
  // httplib writes with send(..., 0): a client closing mid-body would raise SIGPIPE and kill
  // the process. Ignore it unless the program installed its own handler.
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
  const bool tls = !m.opt.tls_cert.empty() || !m.opt.tls_key.empty();
  if (tls) {
    if (m.opt.tls_cert.empty() || m.opt.tls_key.empty()) {
      throw std::runtime_error("TLS needs both a certificate and a key");
    }
    m.svr = std::make_unique<httplib::SSLServer>(m.opt.tls_cert.c_str(), m.opt.tls_key.c_str());
  } else {
    m.svr = std::make_unique<httplib::Server>();
  }
  if (!m.svr->is_valid()) {
    m.svr.reset();
    throw std::runtime_error("cannot load TLS certificate/key " + m.opt.tls_cert.string() + ", " +
                             m.opt.tls_key.string());
  }
  std::size_t threads = std::max<std::size_t>(m.opt.threads, 2);
  m.svr->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  m.svr->set_keep_alive_max_count(m.opt.keep_alive_max_count);
  m.svr->set_keep_alive_timeout(m.opt.keep_alive_timeout_s);
  // Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm and the
  // client's delayed ACK add ~40 ms to many responses. Accepted sockets inherit it on Linux.
  m.svr->set_tcp_nodelay(true);
  m.svr->set_socket_options([&m](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    m.listen_fd = sock;
  });
  m.svr->set_logger(
      [&m](const httplib::Request& req, const httplib::Response& res) { m.log.finish(req, res); });
  m.svr->set_post_routing_handler([&m](const httplib::Request& req, httplib::Response& res) {
    m.log.before_headers(req, res);
  });
  m.svr->set_exception_handler(
      [&m](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        res.status = 500;
        m.error(res, m.log.current(req), 500, "", "internal error: " + what);
      });
  m.svr->Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
    impl_->handle(req, res, *this);
  });

  if (!m.opt.log_file.empty()) m.log.open_file(m.opt.log_file);
  m.log.restart_clock();
  int port = -1;
  if (m.opt.port == 0) {
    port = m.svr->bind_to_any_port(m.opt.bind_address);
  } else if (m.svr->bind_to_port(m.opt.bind_address, m.opt.port)) {
    port = m.opt.port;
  }
  if (port <= 0) {
    m.svr.reset();
    throw std::runtime_error("cannot listen on " + m.opt.bind_address + ":" +
                             std::to_string(m.opt.port) + ": " + std::strerror(errno));
  }
  // httplib listens with a backlog of 5: a burst of parallel connects would overflow it and
  // cost the client a 1 s SYN retransmit. Listening again raises it.
  if (m.listen_fd >= 0) ::listen(m.listen_fd, 1024);
  m.port = port;
  m.th = std::thread([&m] {
    m.svr->listen_after_bind();
    m.listen_done = true;
  });
  for (int i = 0; i < 5000 && !m.svr->is_running() && !m.listen_done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return port;
}

void HubServer::stop() {
  Impl& m = *impl_;
  if (!m.svr) return;
  {
    std::lock_guard lk(m.stop_mu);
    m.stopping = true;
  }
  m.stop_cv.notify_all();
  m.svr->stop();
  while (!m.listen_done) {
    m.shutdown_connections();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (m.th.joinable()) m.th.join();
  m.svr.reset();
  m.log.close_file();
}

bool HubServer::running() const { return impl_->svr && !impl_->stopping && !impl_->listen_done; }
int HubServer::port() const { return impl_->port; }
bool HubServer::tls() const { return !impl_->opt.tls_cert.empty(); }

std::string HubServer::endpoint() const {
  return impl_->scheme() + "://" + impl_->opt.hub_host + ":" + std::to_string(impl_->port);
}

std::string HubServer::cdn_endpoint() const {
  return impl_->scheme() + "://" + impl_->opt.cdn_host + ":" + std::to_string(impl_->port);
}

std::vector<RequestRecord> HubServer::log() const { return impl_->log.records(); }
std::vector<RequestRecord> HubServer::take_log() { return impl_->log.take(); }
void HubServer::clear_log() { impl_->log.clear(); }
std::size_t HubServer::request_count() const { return impl_->log.size(); }

}  // namespace tensorfetch::testing
