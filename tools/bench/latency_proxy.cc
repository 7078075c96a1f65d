// SPDX-License-Identifier: Apache-2.0
/// @file
/// tensorfetch-latency-proxy: a user-space TCP forwarder that makes loopback look like a real
/// network path, for tools/bench/real_network.sh (tc/netem is not available there).
///
/// Every accepted connection gets its own connection to the target. Each chunk read from one
/// side is written to the other side `--delay-ms` (the one-way delay) after it was read, in
/// order, so a request/response round trip costs 2 x delay. A connection's first client bytes
/// are also held as TCP's handshake would hold them: on a real path `connect()` returns one
/// round trip after the SYN, so client data cannot leave before accept + 2 x delay; here
/// `connect()` returns at once, so client bytes read before that time are sent as if they had
/// been written then (`--no-handshake-rtt` turns this off). Hence TCP + TLS 1.3 + one request
/// costs 3 round trips, as on the wire.
///
/// Backpressure: a direction stops reading from its source when `--buffer` bytes are waiting to
/// be delivered (a bounded window), so a slow receiver slows the sender as TCP would.
///
/// Straggler mode: with `--straggler-every K --straggler-target HOST:PORT`, connections number
/// P, P+K, P+2K, ... (counted from 1 since start or since the last SIGUSR1; P is
/// `--straggler-phase`, default 1) are forwarded to the straggler target instead (e.g. a second
/// rate-capped proxy), so a quarter of the flows can be made slow with K = 4.
///
/// Output: once listening, one line "ADDR:PORT" on stdout (the real port when `--listen` asked
/// for port 0). With `--log FILE`, one tab-separated line per connection when it closes:
/// `conn ordinal accept_ms close_ms bytes_up bytes_down straggler error`
/// (ms since the proxy started; up = client to target; error empty when it closed cleanly).
/// SIGUSR1 restarts the connection numbering (and writes a `# reset` line to the log);
/// SIGINT/SIGTERM end the proxy with a one-line summary on stderr.
///
/// Single-threaded: one epoll loop, one timerfd for the earliest pending delivery, one
/// signalfd. Data is copied through user space in pooled 128 KiB chunks.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

constexpr std::size_t kChunkBytes = 128 * 1024;
constexpr std::int64_t kCoalesceNs = 500'000;  // reads this close together share one chunk

/// CLOCK_MONOTONIC in ns: the clock the timerfd is armed on.
std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// An owned file descriptor, closed once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

[[noreturn]] void die(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

/// A resolved "HOST:PORT" (numeric or by name; IPv6 as "[::1]:PORT").
struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string text;
};

Endpoint resolve(const std::string& spec) {
  auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon + 1 == spec.size())
    throw std::runtime_error("'" + spec + "' is not HOST:PORT");
  std::string host = spec.substr(0, colon), port = spec.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    throw std::runtime_error("cannot resolve '" + spec + "': " + ::gai_strerror(rc));
  Endpoint ep;
  std::memcpy(&ep.addr, res->ai_addr, res->ai_addrlen);
  ep.len = res->ai_addrlen;
  ep.text = spec;
  ::freeaddrinfo(res);
  return ep;
}

std::string endpoint_text(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  unsigned port = 0;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
  ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
  port = ntohs(in6->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

/// Fixed-size buffers, reused (allocating 128 KiB per read would mmap/munmap each time).
class BufferPool {
 public:
  std::unique_ptr<char[]> take() {
    if (free_.empty()) return std::make_unique<char[]>(kChunkBytes);
    auto b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void give(std::unique_ptr<char[]> b) {
    if (b && free_.size() < 1024) free_.push_back(std::move(b));
  }

 private:
  std::vector<std::unique_ptr<char[]>> free_;
};

/// Bytes read from one side, due on the other side at `due_ns`; `eof` marks the source's FIN.
struct Chunk {
  std::unique_ptr<char[]> data;
  std::size_t len = 0;
  std::size_t off = 0;
  std::int64_t due_ns = 0;
  bool eof = false;
};

/// One direction of a connection: what was read from `src` and waits to be written to `dst`.
struct Pipe {
  std::deque<Chunk> queue;
  std::size_t queued = 0;  ///< bytes read, not yet written
  bool src_eof = false;    ///< the source sent FIN (queued as an eof chunk)
  bool dst_shut = false;   ///< FIN passed on to the destination
  std::uint64_t bytes = 0; ///< bytes written to the destination
  std::int64_t last_due = 0;
};

enum Side : int { kClient = 0, kTarget = 1 };

struct Conn {
  std::uint64_t id = 0;
  std::uint64_t ordinal = 0;
  bool straggler = false;
  bool connected = false;  ///< the connection to the target is established
  std::int64_t accept_ns = 0;
  Fd fd[2];
  std::uint32_t mask[2] = {0, 0};  ///< the epoll interest set of fd[side]; 0: not registered
  Pipe pipe[2];                    ///< pipe[side]: read from fd[side], written to the other
};

struct Config {
  Endpoint listen;
  Endpoint target;
  std::optional<Endpoint> straggler_target;
  std::uint64_t straggler_every = 0;
  std::uint64_t straggler_phase = 1;
  double delay_ms = 0;
  bool handshake_rtt = true;
  std::size_t buffer = 8 * 1024 * 1024;
  std::string log_file;
};

class Proxy {
 public:
  explicit Proxy(Config cfg) : cfg_(std::move(cfg)), delay_ns_(static_cast<std::int64_t>(cfg_.delay_ms * 1e6)) {
    start_ns_ = now_ns();
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (epoll_.get() < 0) die("epoll_create1");
    timer_ = Fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (timer_.get() < 0) die("timerfd_create");
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) die("sigprocmask");
    signals_ = Fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
    if (signals_.get() < 0) die("signalfd");
    ::signal(SIGPIPE, SIG_IGN);

    listen_ = Fd(::socket(cfg_.listen.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (listen_.get() < 0) die("socket");
    int one = 1;
    ::setsockopt(listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_.get(), reinterpret_cast<const sockaddr*>(&cfg_.listen.addr), cfg_.listen.len) != 0)
      die("cannot listen on " + cfg_.listen.text);
    if (::listen(listen_.get(), 1024) != 0) die("listen");
    sockaddr_storage bound{};
    socklen_t blen = sizeof bound;
    ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&bound), &blen);
    bound_ = endpoint_text(bound);

    if (!cfg_.log_file.empty()) {
      log_.open(cfg_.log_file, std::ios::app);
      if (!log_) die("cannot open log " + cfg_.log_file);
      log_ << "# conn\tordinal\taccept_ms\tclose_ms\tbytes_up\tbytes_down\tstraggler\terror\n" << std::flush;
    }
    add(listen_.get(), EPOLLIN, kListenTag);
    add(timer_.get(), EPOLLIN, kTimerTag);
    add(signals_.get(), EPOLLIN, kSignalTag);
  }

  const std::string& bound() const { return bound_; }

  /// Runs until SIGINT/SIGTERM; returns the summary line.
  std::string run() {
    std::vector<epoll_event> events(256);
    while (!stop_) {
      int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        die("epoll_wait");
      }
      for (int i = 0; i < n; ++i) dispatch(events[static_cast<std::size_t>(i)]);
    }
    std::string summary = "latency_proxy " + bound_ + ": " + std::to_string(accepted_) + " connections, " +
                          std::to_string(total_up_) + " bytes up, " + std::to_string(total_down_) +
                          " bytes down, " + std::to_string(conns_.size()) + " open at exit";
    while (!conns_.empty()) close_conn(conns_.begin()->first, "proxy stopped");
    return summary;
  }

 private:
  static constexpr std::uint64_t kListenTag = ~std::uint64_t{0};
  static constexpr std::uint64_t kTimerTag = kListenTag - 1;
  static constexpr std::uint64_t kSignalTag = kListenTag - 2;

  static std::uint64_t tag(std::uint64_t id, int side) { return (id << 1) | static_cast<std::uint64_t>(side); }

  void add(int fd, std::uint32_t events, std::uint64_t data) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = data;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl add");
  }

  void dispatch(const epoll_event& ev) {
    const std::uint64_t t = ev.data.u64;
    if (t == kListenTag) return accept_all();
    if (t == kTimerTag) return on_timer();
    if (t == kSignalTag) return on_signal();
    const std::uint64_t id = t >> 1;
    const int side = static_cast<int>(t & 1);
    auto it = conns_.find(id);
    if (it == conns_.end()) return;  // closed earlier in this batch
    Conn& c = *it->second;
    if (side == kTarget && !c.connected) {
      if (ev.events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(c.fd[kTarget].get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          errno = err;
          return close_conn(id, std::string("connect: ") + std::strerror(err));
        }
        c.connected = true;
        if (!flush(c, kClient)) return;  // client bytes that were already due
        update(c);
      }
      return;
    }
    if (ev.events & EPOLLERR) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(c.fd[side].get(), SOL_SOCKET, SO_ERROR, &err, &len);
      return close_conn(id, std::string(side == kClient ? "client: " : "target: ") + std::strerror(err));
    }
    if (ev.events & EPOLLOUT) {
      // fd[side] is writable: drain the pipe that writes to it.
      if (!flush(c, 1 - side)) return;
    }
    if (ev.events & (EPOLLIN | EPOLLHUP)) {
      if (!read_side(c, side)) return;
    }
    if (!maybe_finish(c)) return;
    update(c);
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        if (errno == ECONNABORTED || errno == EPROTO) continue;
        std::perror("latency_proxy: accept");
        return;
      }
      auto c = std::make_unique<Conn>();
      c->id = next_id_++;
      c->ordinal = ++ordinal_;
      c->accept_ns = now_ns();
      c->fd[kClient] = Fd(fd);
      ++accepted_;
      c->straggler = cfg_.straggler_every > 0 && cfg_.straggler_target && c->ordinal >= cfg_.straggler_phase &&
                     (c->ordinal - cfg_.straggler_phase) % cfg_.straggler_every == 0;
      const Endpoint& to = c->straggler ? *cfg_.straggler_target : cfg_.target;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      int up = ::socket(to.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (up < 0) {
        std::perror("latency_proxy: socket");
        continue;  // c (and the client fd) closed
      }
      c->fd[kTarget] = Fd(up);
      ::setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const std::uint64_t id = c->id;
      Conn& ref = *c;
      conns_.emplace(id, std::move(c));
      int rc = ::connect(up, reinterpret_cast<const sockaddr*>(&to.addr), to.len);
      if (rc != 0 && errno != EINPROGRESS) {
        close_conn(id, std::string("connect ") + to.text + ": " + std::strerror(errno));
        continue;
      }
      ref.connected = rc == 0;
      update(ref);
    }
  }

  /// Reads what fd[side] has (up to the window) into pipe[side]. False: the connection closed.
  bool read_side(Conn& c, int side) {
    Pipe& p = c.pipe[side];
    while (!p.src_eof && p.queued < cfg_.buffer) {
      const std::int64_t now = now_ns();
      std::int64_t due = now;
      if (side == kClient && cfg_.handshake_rtt) due = std::max(due, c.accept_ns + 2 * delay_ns_);
      due = std::max(due + delay_ns_, p.last_due);
      Chunk* tail = p.queue.empty() ? nullptr : &p.queue.back();
      const bool append = tail && !tail->eof && tail->len < kChunkBytes && due - tail->due_ns < kCoalesceNs;
      Chunk fresh;
      if (!append) {
        fresh.data = pool_.take();
        fresh.due_ns = due;
      }
      Chunk& into = append ? *tail : fresh;
      ssize_t n = ::read(c.fd[side].get(), into.data.get() + into.len, kChunkBytes - into.len);
      if (n < 0) {
        if (!append) pool_.give(std::move(fresh.data));
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        close_conn(c.id, std::string(side == kClient ? "client read: " : "target read: ") + std::strerror(errno));
        return false;
      }
      if (n == 0) {
        if (!append) pool_.give(std::move(fresh.data));
        p.src_eof = true;
        Chunk eof;
        eof.eof = true;
        eof.due_ns = due;
        enqueue(c, side, std::move(eof));
        break;
      }
      into.len += static_cast<std::size_t>(n);
      p.queued += static_cast<std::size_t>(n);
      if (!append) enqueue(c, side, std::move(fresh));
    }
    return flush(c, side);
  }

  void enqueue(Conn& c, int side, Chunk chunk) {
    Pipe& p = c.pipe[side];
    p.last_due = chunk.due_ns;
    if (chunk.due_ns > now_ns()) schedule(chunk.due_ns, c.id);
    p.queue.push_back(std::move(chunk));
  }

  /// Writes the due chunks of pipe[side] to the other fd. False: the connection closed.
  bool flush(Conn& c, int side) {
    Pipe& p = c.pipe[side];
    const int dst = 1 - side;
    if (dst == kTarget && !c.connected) return true;
    const std::int64_t now = now_ns();
    while (!p.queue.empty() && p.queue.front().due_ns <= now) {
      Chunk& ch = p.queue.front();
      if (ch.eof) {
        ::shutdown(c.fd[dst].get(), SHUT_WR);
        p.dst_shut = true;
        p.queue.pop_front();
        continue;
      }
      while (ch.off < ch.len) {
        ssize_t n = ::send(c.fd[dst].get(), ch.data.get() + ch.off, ch.len - ch.off, MSG_NOSIGNAL);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return true;  // update() asks for EPOLLOUT
          close_conn(c.id, std::string(dst == kClient ? "client write: " : "target write: ") + std::strerror(errno));
          return false;
        }
        ch.off += static_cast<std::size_t>(n);
        p.queued -= static_cast<std::size_t>(n);
        p.bytes += static_cast<std::uint64_t>(n);
        (side == kClient ? total_up_ : total_down_) += static_cast<std::uint64_t>(n);
      }
      pool_.give(std::move(ch.data));
      p.queue.pop_front();
    }
    return true;
  }

  /// Closes the connection when both directions have passed their FIN on. False: it closed.
  bool maybe_finish(Conn& c) {
    if (c.pipe[kClient].dst_shut && c.pipe[kTarget].dst_shut) {
      close_conn(c.id, "");
      return false;
    }
    return true;
  }

  /// Sets the epoll interest of both fds from the pipes' state.
  void update(Conn& c) {
    for (int side : {kClient, kTarget}) {
      std::uint32_t want = 0;
      const Pipe& in = c.pipe[side];       // read from this fd into it
      const Pipe& out = c.pipe[1 - side];  // written to this fd
      const bool can = side == kClient || c.connected;
      if (!can) {
        want = EPOLLOUT;  // connect completion
      } else {
        if (!in.src_eof && in.queued < cfg_.buffer) want |= EPOLLIN;
        if (!out.queue.empty() && out.queue.front().due_ns <= now_ns()) want |= EPOLLOUT;
      }
      // An fd with nothing to wait for leaves the epoll set: a hung-up socket would otherwise be
      // reported (EPOLLHUP) on every wait while its pipe's window is full.
      if (want != c.mask[side]) {
        epoll_event ev{};
        ev.events = want;
        ev.data.u64 = tag(c.id, side);
        const int op = want == 0 ? EPOLL_CTL_DEL : c.mask[side] == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
        if (::epoll_ctl(epoll_.get(), op, c.fd[side].get(), &ev) != 0) die("epoll_ctl");
        c.mask[side] = want;
      }
    }
  }

  void schedule(std::int64_t due, std::uint64_t id) {
    const bool earlier = timers_.empty() || due < timers_.top().first;
    timers_.emplace(due, id);
    if (earlier) arm(due);
  }

  void arm(std::int64_t due) {
    itimerspec its{};
    its.it_value.tv_sec = due / 1'000'000'000;
    its.it_value.tv_nsec = due % 1'000'000'000;
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
    if (::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &its, nullptr) != 0) die("timerfd_settime");
  }

  void on_timer() {
    std::uint64_t expirations = 0;
    (void)!::read(timer_.get(), &expirations, sizeof expirations);
    const std::int64_t now = now_ns();
    std::vector<std::uint64_t> due_ids;
    while (!timers_.empty() && timers_.top().first <= now) {
      due_ids.push_back(timers_.top().second);
      timers_.pop();
    }
    for (std::uint64_t id : due_ids) {
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      Conn& c = *it->second;
      if (flush(c, kClient) && flush(c, kTarget) && maybe_finish(c)) update(c);
    }
    if (!timers_.empty()) arm(timers_.top().first);
  }

  void on_signal() {
    signalfd_siginfo si{};
    while (::read(signals_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      if (si.ssi_signo == SIGUSR1) {
        ordinal_ = 0;
        if (log_) log_ << "# reset\t" << ms(now_ns()) << "\n" << std::flush;
      } else {
        stop_ = true;
      }
    }
  }

  double ms(std::int64_t t) const { return static_cast<double>(t - start_ns_) / 1e6; }

  void close_conn(std::uint64_t id, const std::string& error) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    std::unique_ptr<Conn> c = std::move(it->second);
    conns_.erase(it);
    for (auto& p : c->pipe)
      for (auto& ch : p.queue) pool_.give(std::move(ch.data));
    if (log_) {
      char line[256];
      std::snprintf(line, sizeof line, "%llu\t%llu\t%.3f\t%.3f\t%llu\t%llu\t%d\t",
                    static_cast<unsigned long long>(c->id), static_cast<unsigned long long>(c->ordinal),
                    ms(c->accept_ns), ms(now_ns()), static_cast<unsigned long long>(c->pipe[kClient].bytes),
                    static_cast<unsigned long long>(c->pipe[kTarget].bytes), c->straggler ? 1 : 0);
      log_ << line << error << "\n" << std::flush;
    }
    // The Fds close with c; closing removes them from the epoll set.
  }

  Config cfg_;
  std::int64_t delay_ns_;
  std::int64_t start_ns_ = 0;
  Fd epoll_, timer_, signals_, listen_;
  std::string bound_;
  std::ofstream log_;
  BufferPool pool_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns_;
  std::priority_queue<std::pair<std::int64_t, std::uint64_t>, std::vector<std::pair<std::int64_t, std::uint64_t>>,
                      std::greater<>>
      timers_;
  std::uint64_t next_id_ = 1;
  std::uint64_t ordinal_ = 0;
  std::uint64_t accepted_ = 0;
  std::uint64_t total_up_ = 0, total_down_ = 0;
  bool stop_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  std::string listen, target, straggler_target;
  Config cfg;
  CLI::App app{
      "TCP forwarder that adds a one-way delay to every chunk in both directions and holds a\n"
      "connection's first client bytes one extra round trip (TCP's handshake), for benchmarks.\n"
      "Prints the listening ADDR:PORT on stdout. SIGUSR1 restarts the connection numbering."};
  app.add_option("--listen", listen, "ADDR:PORT to listen on (port 0: ephemeral)")->required();
  app.add_option("--target", target, "HOST:PORT to forward to")->required();
  app.add_option("--delay-ms", cfg.delay_ms, "One-way delay per direction (RTT = 2 x this)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60000.0));
  app.add_flag("--handshake-rtt,!--no-handshake-rtt", cfg.handshake_rtt,
               "Hold client bytes until one round trip after accept, as TCP's handshake does (default on)");
  app.add_option("--buffer", cfg.buffer, "Bytes waiting per direction before reading pauses")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{65536}, std::size_t{1} << 32));
  app.add_option("--straggler-every", cfg.straggler_every,
                 "Send every K-th connection to --straggler-target (0: never)")
      ->capture_default_str();
  app.add_option("--straggler-phase", cfg.straggler_phase,
                 "The first straggler connection's number, from 1 (then every K-th)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--straggler-target", straggler_target, "HOST:PORT for straggler connections");
  app.add_option("--log", cfg.log_file, "Append one tab-separated line per closed connection");
  CLI11_PARSE(app, argc, argv);
  try {
    if (cfg.straggler_every > 0 && straggler_target.empty())
      throw std::runtime_error("--straggler-every needs --straggler-target");
    if (cfg.straggler_every > 0 && cfg.straggler_phase > cfg.straggler_every)
      throw std::runtime_error("--straggler-phase must be between 1 and --straggler-every");
    cfg.listen = resolve(listen);
    cfg.target = resolve(target);
    if (!straggler_target.empty()) cfg.straggler_target = resolve(straggler_target);
    Proxy proxy(std::move(cfg));
    std::cout << proxy.bound() << std::endl;
    std::cerr << proxy.run() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "tensorfetch-latency-proxy: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
