// SPDX-License-Identifier: Apache-2.0
// The Hub-like test server (see hub_server.hpp).
//
// Implementation notes on cpp-httplib 0.11.4 (the Debian build, compiled as a shared library):
// - Every body is sent through a content provider *without* a length, with Content-Length
//   (and Content-Range) set by us: httplib then neither slices ranges nor compresses, so the
//   server controls every byte (needed for the faults) and can count what it wrote.
// - The logger runs on the worker thread after the body was written (or the connection
//   dropped); the handler leaves its half-built record in a thread_local for it.
// - Requests httplib refuses before routing (a syntactically bad Range → 416, bad request
//   line → 400) reach only the logger; they are recorded too.
#include "hub_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_set>

namespace tensorfetch::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// ---------------------------------------------------------------- small helpers

std::string hex(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

std::string digest_hex(const EVP_MD* md, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out, &len, md, nullptr) != 1) {
    throw std::runtime_error("EVP_Digest failed");
  }
  return hex(out, len);
}

std::string sha256_hex(std::string_view data) { return digest_hex(EVP_sha256(), data); }
std::string sha1_hex(std::string_view data) { return digest_hex(EVP_sha1(), data); }

// Streams a file through a digest; `prefix` is hashed first (git blob header).
std::string file_digest_hex(const fs::path& path, const EVP_MD* md, std::string_view prefix) {
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

bool is_hex40(std::string_view s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes one path segment; invalid escapes stay literal.
std::string pct_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hexval(s[i + 1]) * 16 + hexval(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string strip_port(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return std::string(host.substr(0, close == std::string_view::npos ? host.size() : close + 1));
  }
  auto colon = host.rfind(':');
  return std::string(colon == std::string_view::npos ? host : host.substr(0, colon));
}

bool valid_name_segment(std::string_view s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s) {
    if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return false;
  }
  return true;
}

std::int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------- request parsing

// A request target, split into decoded segments, classified.
struct Route {
  std::string kind = "other";             // resolve, cdn, api, admin, other
  std::string repo;                       // "org/name" or "datasets/org/name"
  std::string repo_rel;                   // directory relative to root
  std::vector<std::string> rev_segments;  // resolve: decoded segments after "resolve"
  std::string revision;                   // resolve: first guess (decoded segment), api: revision
  std::string file;                       // resolve: segments after the revision, joined
  std::string blob;                       // cdn: sha256
  std::string admin;                      // admin: command
  bool bad_repo_name = false;
};

std::vector<std::string> split_path(std::string_view raw_path) {
  std::vector<std::string> segs;
  std::size_t i = 0;
  if (!raw_path.empty() && raw_path.front() == '/') i = 1;
  while (i <= raw_path.size()) {
    auto j = raw_path.find('/', i);
    if (j == std::string_view::npos) j = raw_path.size();
    segs.push_back(pct_decode(raw_path.substr(i, j - i)));
    i = j + 1;
  }
  return segs;
}

std::string join(const std::vector<std::string>& v, std::size_t from, std::size_t to,
                 char sep = '/') {
  std::string s;
  for (std::size_t i = from; i < to && i < v.size(); ++i) {
    if (i > from) s.push_back(sep);
    s += v[i];
  }
  return s;
}

Route classify(std::string_view target) {
  Route r;
  auto q = target.find('?');
  auto segs = split_path(target.substr(0, q));
  if (segs.empty()) return r;
  if (segs[0] == "_admin" && segs.size() >= 2) {
    r.kind = "admin";
    r.admin = segs[1];
    return r;
  }
  if (segs[0] == "cdn" && segs.size() >= 2) {
    r.kind = "cdn";
    r.blob = segs[1];
    return r;
  }
  auto set_repo = [&](bool dataset, std::size_t at) {
    const auto& org = segs[at];
    const auto& name = segs[at + 1];
    r.bad_repo_name = !valid_name_segment(org) || !valid_name_segment(name);
    r.repo = (dataset ? "datasets/" : "") + org + "/" + name;
    r.repo_rel = r.repo;
  };
  if (segs[0] == "api" && segs.size() >= 4 && (segs[1] == "models" || segs[1] == "datasets")) {
    r.kind = "api";
    set_repo(segs[1] == "datasets", 2);
    if (segs.size() >= 6 && segs[4] == "revision")
      r.revision = join(segs, 5, segs.size());
    else if (segs.size() == 4)
      r.revision = "main";
    else
      r.kind = "other";
    return r;
  }
  bool dataset = segs[0] == "datasets";
  std::size_t base = dataset ? 1 : 0;
  if (segs.size() >= base + 5 && segs[base + 2] == "resolve") {
    r.kind = "resolve";
    set_repo(dataset, base);
    r.rev_segments.assign(segs.begin() + static_cast<std::ptrdiff_t>(base + 3), segs.end());
    r.revision = r.rev_segments[0];
    r.file = join(r.rev_segments, 1, r.rev_segments.size());
  }
  return r;
}

std::string query_param(const httplib::Request& req, const char* key) {
  return req.has_param(key) ? req.get_param_value(key) : std::string();
}

// Parsed `Range` header against a size.
struct RangeSpec {
  enum Kind { None, Ok, Unsatisfiable } kind = None;
  std::uint64_t first = 0, last = 0;
};

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

// Single "bytes=a-b", "bytes=a-", "bytes=-n"; anything else (several ranges, other units,
// garbage) is ignored (200), as RFC 9110 allows.
RangeSpec parse_range(std::string_view h, std::uint64_t size) {
  RangeSpec r;
  std::string s = trim(h);
  if (s.rfind("bytes=", 0) != 0) return r;
  std::string spec = trim(std::string_view(s).substr(6));
  if (spec.find(',') != std::string::npos) return r;
  auto dash = spec.find('-');
  if (dash == std::string::npos) return r;
  std::string a = trim(std::string_view(spec).substr(0, dash));
  std::string b = trim(std::string_view(spec).substr(dash + 1));
  if (a.empty()) {
    auto n = parse_u64(b);
    if (!n) return r;
    if (*n == 0 || size == 0) {
      r.kind = RangeSpec::Unsatisfiable;
      return r;
    }
    r.kind = RangeSpec::Ok;
    r.first = size - std::min(*n, size);
    r.last = size - 1;
    return r;
  }
  auto first = parse_u64(a);
  if (!first) return r;
  std::optional<std::uint64_t> last;
  if (!b.empty()) {
    last = parse_u64(b);
    if (!last || *last < *first) return r;
  }
  if (*first >= size) {
    r.kind = RangeSpec::Unsatisfiable;
    return r;
  }
  r.kind = RangeSpec::Ok;
  r.first = *first;
  r.last = last ? std::min(*last, size - 1) : size - 1;
  return r;
}

bool etag_matches(std::string_view header, std::string_view etag) {
  std::size_t i = 0;
  while (i <= header.size()) {
    auto j = header.find(',', i);
    if (j == std::string_view::npos) j = header.size();
    std::string t = trim(header.substr(i, j - i));
    if (t.rfind("W/", 0) == 0) t = t.substr(2);
    if (t == "*" || t == etag) return true;
    i = j + 1;
  }
  return false;
}

// ---------------------------------------------------------------- switches

struct Trigger {
  int remaining = 0;  // 0 off, -1 always
  std::string match;
  bool take(const std::string& target, const std::string& file) {
    if (remaining == 0) return false;
    if (!match.empty() && target.find(match) == std::string::npos &&
        file.find(match) == std::string::npos) {
      return false;
    }
    if (remaining > 0) --remaining;
    return true;
  }
};

struct Switches {
  int latency_ms = 0;
  bool ignore_range = false;
  std::string token;
  std::set<std::string> gated, priv;
  bool unknown_repo_401 = false;
  std::int64_t cdn_url_ttl_ms = 0;

  Trigger fail;
  int fail_status = 503;
  int fail_retry_after = 1;
  bool fail_ratelimit = false;
  Trigger drop;
  std::uint64_t drop_bytes = 0;
  Trigger stall;
  std::uint64_t stall_bytes = 0;
  int stall_ms = -1;
  Trigger wrong_cr;
  std::int64_t wrong_cr_shift = 1;
  Trigger overlong;
  std::uint64_t overlong_extra = 0;
  OverlongMode overlong_mode = OverlongMode::ContentLength;
  int etag_change_after = -1;
  std::int64_t cdn_count = 0;
  Trigger drip;
  std::uint64_t drip_bytes = 1;
  int drip_interval_ms = 1000;
  std::string cdn_base;  // redirects to the CDN use this instead of scheme://cdn_host:port
  Trigger header;
  std::string header_name, header_value;
  std::string hostile_commit;  // sent as X-Repo-Commit instead of the real one ("" = off)
  Trigger linked_lie;          // resolve: X-Linked-Etag claims linked_lie_sha256
  std::string linked_lie_sha256;
  Trigger cdn_etag;            // cdn: ETag "cdn_etag_value" instead of "<sha256>"
  std::string cdn_etag_value;

  static Switches from(const Options& o) {
    Switches s;
    s.latency_ms = o.latency_ms;
    s.ignore_range = o.ignore_range;
    s.token = o.token;
    s.gated = {o.gated_repos.begin(), o.gated_repos.end()};
    s.priv = {o.private_repos.begin(), o.private_repos.end()};
    s.unknown_repo_401 = o.unknown_repo_401;
    s.cdn_url_ttl_ms = o.cdn_url_ttl_ms;
    return s;
  }
};

// ---------------------------------------------------------------- per-request state

struct Pending {
  RequestRecord rec;
  bool skip = false;         // admin: not logged
  bool committed = false;    // in the log
  std::string content_type;  // restored after httplib's multi-range rewrite
  std::uint64_t bytes = 0;
  bool dropped = false;
};

thread_local std::shared_ptr<Pending> tl_pending;

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

struct RepoRefs {
  std::map<std::string, std::string> refs;
  std::set<std::string> shas;
};

struct HashEntry {
  std::mutex mu;
  bool done = false;
  std::uint64_t size = 0;
  std::int64_t mtime = 0;
  std::string value;
};

struct BlobInfo {
  fs::path path;
  std::string repo;  // the repo and file that last named this blob
  std::string file;
};

}  // namespace

// ================================================================ Impl

struct HubServer::Impl {
  Options opt;
  std::unique_ptr<httplib::Server> svr;
  std::thread th;
  std::atomic<bool> started{false}, stopping{false}, listen_done{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  int port = 0;
  int listen_fd = -1;
  Clock::time_point t0 = Clock::now();
  std::atomic<std::uint64_t> seq{0};
  std::string secret;

  mutable std::mutex log_mu;
  std::vector<RequestRecord> records;
  std::ofstream log_out;

  mutable std::mutex sw_mu;
  Switches sw;

  mutable std::mutex refs_mu;
  std::map<std::string, RepoRefs> refs;
  struct RefMove {
    std::string repo, ref, sha;
    int remaining;
  };
  std::vector<RefMove> moves;  // pending move_ref_after()

  std::mutex hash_mu;
  std::map<std::string, std::shared_ptr<HashEntry>> hashes;
  std::mutex blob_mu;
  std::map<std::string, BlobInfo> blobs;

  template <class F>
  void with_switches(F f) {
    std::lock_guard lk(sw_mu);
    f(sw);
  }

  explicit Impl(Options o) : opt(std::move(o)), sw(Switches::from(opt)) {
    unsigned char r[16];
    if (RAND_bytes(r, sizeof r) != 1) throw std::runtime_error("RAND_bytes failed");
    secret = hex(r, sizeof r);
  }

  std::string scheme() const { return opt.tls_cert.empty() ? "http" : "https"; }

  double now_ms() const {
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return static_cast<double>(static_cast<std::int64_t>(ms * 1000.0)) / 1000.0;
  }

  // Waits d (or until stop); true if stopping.
  bool sleep_or_stop(std::chrono::milliseconds d) {
    std::unique_lock lk(stop_mu);
    return stop_cv.wait_for(lk, d, [&] { return stopping.load(); });
  }
  void wait_for_stop() {
    std::unique_lock lk(stop_mu);
    stop_cv.wait(lk, [&] { return stopping.load(); });
  }

  // ------------------------------------------------------------ repos

  fs::path repo_dir(const std::string& repo_rel) const { return opt.root / repo_rel; }

  bool repo_exists(const std::string& repo_rel) const {
    std::error_code ec;
    return !opt.root.empty() && fs::is_directory(repo_dir(repo_rel), ec);
  }

  // Loads (once) the refs of an existing repo. Caller holds refs_mu.
  RepoRefs* refs_of_locked(const std::string& repo) {
    auto it = refs.find(repo);
    if (it != refs.end()) return &it->second;
    if (!repo_exists(repo)) return nullptr;
    RepoRefs r;
    std::string main = default_commit(repo);
    {
      std::ifstream in(repo_dir(repo) / ".commit");
      std::string line;
      if (in && std::getline(in, line) && is_hex40(trim(line))) main = trim(line);
    }
    r.refs["main"] = main;
    {
      std::ifstream in(repo_dir(repo) / ".refs");
      std::string line;
      while (in && std::getline(in, line)) {
        std::istringstream ls(line);
        std::string name, sha;
        if (ls >> name >> sha && is_hex40(sha)) r.refs[name] = sha;
      }
    }
    for (auto& [_, sha] : r.refs) r.shas.insert(sha);
    return &refs.emplace(repo, std::move(r)).first->second;
  }

  // Counts a resolve/api request of `repo` for move_ref_after(); applies due moves.
  void count_request(const std::string& repo) {
    std::lock_guard lk(refs_mu);
    for (auto it = moves.begin(); it != moves.end();) {
      if (it->repo != repo) {
        ++it;
      } else if (it->remaining > 0) {
        --it->remaining;
        ++it;
      } else {
        if (RepoRefs* r = refs_of_locked(repo)) {
          r->refs[it->ref] = it->sha;
          r->shas.insert(it->sha);
        }
        it = moves.erase(it);
      }
    }
  }

  std::string resolve_rev(const std::string& repo, const std::string& rev) {
    std::lock_guard lk(refs_mu);
    RepoRefs* r = refs_of_locked(repo);
    if (!r) return {};
    if (is_hex40(rev) && r->shas.count(rev)) return rev;
    auto it = r->refs.find(rev);
    return it == r->refs.end() ? std::string() : it->second;
  }

  // ------------------------------------------------------------ hashing

  // Cached digest of a file; kind "sha256" or "gitblob".
  std::string cached_digest(const fs::path& path, const std::string& kind) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + path.string());
    std::shared_ptr<HashEntry> e;
    {
      std::lock_guard lk(hash_mu);
      auto& slot = hashes[kind + ":" + path.string()];
      if (!slot) slot = std::make_shared<HashEntry>();
      e = slot;
    }
    std::lock_guard lk(e->mu);
    auto size = static_cast<std::uint64_t>(st.st_size);
    std::int64_t mtime =
        static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (!e->done || e->size != size || e->mtime != mtime) {
      if (kind == "sha256") {
        e->value = file_digest_hex(path, EVP_sha256(), {});
      } else {
        std::string prefix = "blob " + std::to_string(size);
        prefix.push_back('\0');
        e->value = file_digest_hex(path, EVP_sha1(), prefix);
      }
      e->size = size;
      e->mtime = mtime;
      e->done = true;
    }
    return e->value;
  }

  bool is_lfs(const std::string& file, std::uint64_t size) const {
    if (size >= opt.lfs_threshold) return true;
    for (const auto& s : opt.lfs_suffixes) {
      if (file.size() >= s.size() && file.compare(file.size() - s.size(), s.size(), s) == 0) {
        return true;
      }
    }
    return false;
  }

  std::string sign(const std::string& sha, const std::string& expires) const {
    return sha256_hex(secret + "/" + sha + "/" + expires).substr(0, 32);
  }

  std::string make_cdn_url(const std::string& sha) {
    std::int64_t ttl;
    {
      std::lock_guard lk(sw_mu);
      ttl = sw.cdn_url_ttl_ms;
    }
    if (ttl <= 0) ttl = 365LL * 24 * 3600 * 1000;
    std::string base;
    {
      std::lock_guard lk(sw_mu);
      base = sw.cdn_base;
    }
    if (base.empty()) base = scheme() + "://" + opt.cdn_host + ":" + std::to_string(port);
    std::string expires = std::to_string(epoch_ms() + ttl);
    return base + "/cdn/" + sha + "?expires=" + expires + "&sig=" + sign(sha, expires);
  }

  // Registers a file as a CDN blob; returns its sha256.
  std::string register_blob(const fs::path& path, const std::string& repo,
                            const std::string& file) {
    std::string sha = cached_digest(path, "sha256");
    std::lock_guard lk(blob_mu);
    blobs[sha] = BlobInfo{path, repo, file};
    return sha;
  }

  // ------------------------------------------------------------ log
  //
  // A record must be in the log before the client can see the end of its response (tests
  // look at the log right after a response). So it is committed just before the last bytes
  // are written: by the post-routing hook (called right before the headers are written) when
  // there is no body, else by the body writer before its final write. A response that ends
  // otherwise (dropped, stalled, client gone) is committed by the logger, which httplib calls
  // before it closes the connection; the logger also amends a record whose last write failed.

  void fill_request(RequestRecord& rec, const httplib::Request& req) {
    rec.method = req.method;
    rec.host = req.get_header_value("Host");
    rec.target = req.target;
    rec.range = req.get_header_value("Range");
    rec.if_match = req.get_header_value("If-Match");
    rec.user_agent = req.get_header_value("User-Agent");
    rec.client_port = req.remote_port;
    if (req.has_header("Authorization")) {
      rec.authorization = true;
      std::string v = req.get_header_value("Authorization");
      rec.authorization_sha256 = sha256_hex(v);
      if (opt.log_authorization_values) rec.authorization_value = v;
    }
    Route r = classify(req.target);
    rec.kind = r.kind == "admin" ? "other" : r.kind;
    rec.repo = r.repo;
    rec.revision = r.revision;
    rec.file = r.file;
  }

  static void capture_response(RequestRecord& rec, const httplib::Response& res) {
    rec.status = res.status;
    rec.content_range = res.get_header_value("Content-Range");
    rec.content_length = -1;
    if (res.has_header("Content-Length")) {
      rec.content_length =
          std::strtoll(res.get_header_value("Content-Length").c_str(), nullptr, 10);
    }
    rec.etag = res.get_header_value("ETag");
    rec.location = res.get_header_value("Location");
    rec.error_code = res.get_header_value("X-Error-Code");
    rec.retry_after = res.has_header("Retry-After") ? res.get_header_value("Retry-After")
                                                    : res.get_header_value("RateLimit");
  }

  // The pending record of this thread's current request (made here for requests httplib
  // answered without calling the handler).
  std::shared_ptr<Pending> current(const httplib::Request& req) {
    std::shared_ptr<Pending> p = tl_pending;
    if (p && (p->rec.method != req.method || p->rec.target != req.target ||
              p->rec.client_port != req.remote_port)) {
      p.reset();  // stale: belonged to an earlier request on this thread
    }
    if (!p) {
      p = std::make_shared<Pending>();
      p->rec.seq = ++seq;
      p->rec.start_ms = now_ms();
      fill_request(p->rec, req);
      tl_pending = p;
    }
    return p;
  }

  // Puts the record in the log, counting `about_to_write` more body bytes.
  void commit(Pending& p, std::uint64_t about_to_write = 0) {
    if (p.skip || p.committed) return;
    p.rec.end_ms = now_ms();
    p.rec.body_bytes = p.bytes + about_to_write;
    p.rec.dropped = p.dropped;
    p.committed = true;
    std::lock_guard lk(log_mu);
    records.push_back(p.rec);
    write_line(p.rec);
  }

  // Appends a record to the log file. Caller holds log_mu.
  void write_line(const RequestRecord& rec) {
    if (!log_out.is_open()) return;
    log_out << rec.to_json() << '\n';
    log_out.flush();
  }

  // Called by httplib just before the status line and headers are written.
  void before_headers(const httplib::Request& req, httplib::Response& res) {
    auto p = current(req);
    if (p->skip) return;
    // httplib rewrites Content-Type for multi-range requests; we answered those with 200.
    if (!p->content_type.empty()) {
      res.headers.erase("Content-Type");
      res.set_header("Content-Type", p->content_type);
    }
    capture_response(p->rec, res);
    bool body = req.method != "HEAD" && res.status != 204 && res.status != 304 &&
                (res.content_provider_ || !res.body.empty()) &&
                res.get_header_value("Content-Length") != "0";
    if (!body) commit(*p);
  }

  // httplib's logger: after the body was written or the connection dropped.
  void finish(const httplib::Request& req, const httplib::Response& res) {
    auto p = current(req);
    tl_pending.reset();
    if (p->skip) return;
    if (!p->committed) {
      capture_response(p->rec, res);
      commit(*p);
    } else if (p->bytes != p->rec.body_bytes || p->dropped != p->rec.dropped) {
      p->rec.end_ms = now_ms();
      p->rec.body_bytes = p->bytes;
      p->rec.dropped = p->dropped;
      std::lock_guard lk(log_mu);
      for (auto it = records.rbegin(); it != records.rend(); ++it) {
        if (it->seq == p->rec.seq) {
          *it = p->rec;
          break;
        }
      }
      write_line(p->rec);  // the same seq again: read_log_file keeps the last
    }
  }

  // ------------------------------------------------------------ responses

  // Writes the bytes that complete the response, committing the record first.
  bool final_write(httplib::DataSink& sink, Pending& p, const char* d, std::size_t n,
                   bool payload) {
    commit(p, payload ? n : 0);
    if (n > 0 && !sink.write(d, n)) {
      p.dropped = true;
      return false;
    }
    if (payload) p.bytes += n;
    return true;
  }

  // Small in-memory body, framed with Content-Length.
  void set_body(httplib::Response& res, const std::shared_ptr<Pending>& p, std::string body,
                const char* content_type) {
    res.set_header("Content-Length", std::to_string(body.size()));
    p->content_type = content_type;
    auto data = std::make_shared<std::string>(std::move(body));
    res.set_content_provider(content_type, [this, data, p](std::size_t, httplib::DataSink& sink) {
      if (!final_write(sink, *p, data->data(), data->size(), true)) {
        return false;
      }
      sink.done();
      return true;
    });
  }

  void error(httplib::Response& res, const std::shared_ptr<Pending>& p, int status,
             const std::string& code, const std::string& message) {
    res.status = status;
    if (!code.empty()) res.set_header("X-Error-Code", code);
    res.set_header("X-Error-Message", message);
    set_body(res, p, json{{"error", message}}.dump(), "application/json");
  }

  // Body-shaping faults chosen for one response.
  struct BodyPlan {
    int fd = -1;
    std::shared_ptr<Fd> file;
    std::uint64_t offset = 0, length = 0, file_size = 0;
    bool xor_change = false;
    std::optional<std::uint64_t> drop_at, stall_at;
    int stall_ms = -1;
    std::uint64_t drip_bytes = 0;  // > 0: send this many bytes per drip_ms
    int drip_ms = 0;
    std::uint64_t extra = 0;
    std::optional<OverlongMode> overlong;
  };

  // Writes the body of `plan`; returns what the content provider must return.
  bool write_body(const BodyPlan& plan, Pending& p, httplib::DataSink& sink) {
    const bool chunked = plan.overlong == OverlongMode::Chunked;
    std::uint64_t total = plan.length + plan.extra;
    std::uint64_t limit = total;
    if (plan.drop_at) limit = std::min(limit, *plan.drop_at);
    if (plan.stall_at) limit = std::min(limit, *plan.stall_at);
    std::vector<char> buf(256 * 1024);
    std::uint64_t sent = 0;
    // A client that trusts Content-Length is done before the extra bytes arrive.
    if (plan.overlong == OverlongMode::ContentLength) commit(p);
    while (sent < limit) {
      if (stopping) {
        p.dropped = true;
        return false;
      }
      std::size_t want =
          static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), limit - sent));
      if (plan.drip_bytes > 0) {
        want = static_cast<std::size_t>(std::min<std::uint64_t>(want, plan.drip_bytes));
        if (sent > 0 && sleep_or_stop(std::chrono::milliseconds(plan.drip_ms))) {
          p.dropped = true;
          return false;
        }
      }
      std::uint64_t pos = plan.offset + sent;
      std::size_t got = 0;
      if (pos < plan.file_size) {
        std::size_t from_file =
            static_cast<std::size_t>(std::min<std::uint64_t>(want, plan.file_size - pos));
        while (got < from_file) {
          ssize_t n =
              ::pread(plan.fd, buf.data() + got, from_file - got, static_cast<off_t>(pos + got));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) break;
          got += static_cast<std::size_t>(n);
        }
        if (got < from_file) {  // file shrank under us
          p.dropped = true;
          return false;
        }
        if (plan.xor_change) {
          for (std::size_t i = 0; i < got; ++i) buf[i] = static_cast<char>(buf[i] ^ kChangedXor);
        }
      }
      if (got < want) {  // overlong bytes past the end of the file
        std::fill(buf.begin() + static_cast<std::ptrdiff_t>(got),
                  buf.begin() + static_cast<std::ptrdiff_t>(want), 'X');
        got = want;
      }
      bool ok;
      if (chunked) {
        char head[32];
        std::snprintf(head, sizeof head, "%zx\r\n", got);
        ok = sink.write(head, std::strlen(head)) && sink.write(buf.data(), got) &&
             sink.write("\r\n", 2);
        if (ok) p.bytes += got;
      } else if (sent + got == total) {  // completes the response
        ok = final_write(sink, p, buf.data(), got, true);
      } else {
        ok = sink.write(buf.data(), got);
        if (ok) p.bytes += got;
      }
      if (!ok) {
        p.dropped = true;
        return false;
      }
      sent += got;
    }
    if (plan.stall_at && sent >= *plan.stall_at && sent < total) {
      if (plan.stall_ms < 0)
        wait_for_stop();
      else
        sleep_or_stop(std::chrono::milliseconds(plan.stall_ms));
      p.dropped = true;
      return false;
    }
    if (plan.drop_at && sent >= *plan.drop_at && sent < total) {
      p.dropped = true;
      return false;
    }
    if (chunked) {
      if (!final_write(sink, p, "0\r\n\r\n", 5, false)) {
        p.dropped = true;
        return false;
      }
    }
    sink.done();
    if (plan.overlong && !chunked) return false;  // close: the extra bytes poison the connection
    return true;
  }

  // Serves a file (or a range of it) with `etag`; shared by the Hub's small files and the CDN.
  void serve_file(const httplib::Request& req, httplib::Response& res,
                  const std::shared_ptr<Pending>& p, const fs::path& path, const std::string& etag,
                  bool xor_change, const std::string& content_type, const std::string& match_file) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      if (fd >= 0) ::close(fd);
      error(res, p, 500, "", "cannot read " + path.filename().string());
      return;
    }
    auto file = std::make_shared<Fd>(fd);
    const auto size = static_cast<std::uint64_t>(st.st_size);
    res.set_header("ETag", etag);
    res.set_header("Accept-Ranges", "bytes");

    if (req.has_header("If-Match") && !etag_matches(req.get_header_value("If-Match"), etag)) {
      res.status = 412;
      set_body(res, p, "", content_type.c_str());
      return;
    }

    RangeSpec range;
    bool ignore_range;
    {
      std::lock_guard lk(sw_mu);
      ignore_range = sw.ignore_range;
    }
    if (req.has_header("Range")) {
      bool if_range_ok =
          !req.has_header("If-Range") || trim(req.get_header_value("If-Range")) == etag;
      if (ignore_range) {
        p->rec.fault = "ignore_range";
      } else if (if_range_ok) {
        range = parse_range(req.get_header_value("Range"), size);
      }
    }
    if (range.kind == RangeSpec::Unsatisfiable) {
      res.status = 416;
      res.set_header("Content-Range", "bytes */" + std::to_string(size));
      set_body(res, p, "", content_type.c_str());
      return;
    }

    BodyPlan plan;
    plan.fd = fd;
    plan.file = file;
    plan.file_size = size;
    plan.xor_change = xor_change;
    if (range.kind == RangeSpec::Ok) {
      plan.offset = range.first;
      plan.length = range.last - range.first + 1;
      res.status = 206;
    } else {
      plan.offset = 0;
      plan.length = size;
      res.status = 200;
    }
    std::int64_t cr_shift = 0;
    if (req.method != "HEAD") {
      std::lock_guard lk(sw_mu);
      const std::string& t = req.target;
      if (sw.stall.take(t, match_file)) {
        plan.stall_at = sw.stall_bytes;
        plan.stall_ms = sw.stall_ms;
        p->rec.fault = "stall";
      }
      if (sw.drop.take(t, match_file)) {
        plan.drop_at = sw.drop_bytes;
        p->rec.fault = "drop";
      }
      if (sw.drip.take(t, match_file)) {
        plan.drip_bytes = std::max<std::uint64_t>(1, sw.drip_bytes);
        plan.drip_ms = sw.drip_interval_ms;
        p->rec.fault = "drip";
      }
      if (sw.overlong.take(t, match_file)) {
        plan.extra = sw.overlong_extra;
        plan.overlong = sw.overlong_mode;
        p->rec.fault = "overlong";
      }
      if (res.status == 206 && sw.wrong_cr.take(t, match_file)) {
        cr_shift = sw.wrong_cr_shift;
        p->rec.fault = "wrong_content_range";
      }
    }
    if (res.status == 206) {
      auto a = static_cast<std::int64_t>(plan.offset) + cr_shift;
      auto b = static_cast<std::int64_t>(plan.offset + plan.length - 1) + cr_shift;
      res.set_header("Content-Range", "bytes " + std::to_string(a) + "-" + std::to_string(b) + "/" +
                                          std::to_string(size));
    }
    if (!plan.overlong || *plan.overlong == OverlongMode::ContentLength) {
      res.set_header("Content-Length", std::to_string(plan.length));
    }
    if (plan.overlong == OverlongMode::Chunked) res.set_header("Transfer-Encoding", "chunked");
    if (plan.overlong && *plan.overlong != OverlongMode::Chunked) {
      res.set_header("Connection", "close");
    }
    p->content_type = content_type;
    res.set_content_provider(content_type.c_str(),
                             [this, plan, p](std::size_t, httplib::DataSink& sink) {
                               return write_body(plan, *p, sink);
                             });
  }

  // ------------------------------------------------------------ routes

  // Access checks shared by resolve and api. Returns false after writing an error.
  bool check_repo(const httplib::Request& req, httplib::Response& res,
                  const std::shared_ptr<Pending>& p, const Route& r) {
    std::string auth = req.get_header_value("Authorization");
    bool has_auth = req.has_header("Authorization");
    std::string token;
    bool gated, priv, unknown_401;
    {
      std::lock_guard lk(sw_mu);
      token = sw.token;
      gated = sw.gated.count(r.repo) > 0;
      priv = sw.priv.count(r.repo) > 0;
      unknown_401 = sw.unknown_repo_401;
    }
    bool authorized = !token.empty() && auth == "Bearer " + token;
    if (r.bad_repo_name || !repo_exists(r.repo_rel)) {
      if (unknown_401 && !has_auth) {
        error(res, p, 401, "RepoNotFound",
              "Repository not found (401: invalid or missing credentials)");
      } else {
        error(res, p, 404, "RepoNotFound", "Repository not found");
      }
      return false;
    }
    if (priv && !authorized) {
      error(res, p, 401, "RepoNotFound",
            has_auth ? "Invalid credentials in Authorization header" : "Repository not found");
      return false;
    }
    if (gated && !authorized) {
      error(res, p, 403, "GatedRepo",
            "Access to model " + r.repo +
                " is restricted. You must have access to it and be authenticated to access it.");
      return false;
    }
    return true;
  }

  // The X-Repo-Commit value to send: the real commit, or what set_hostile_commit() asked for.
  std::string commit_header(const std::string& commit, const std::shared_ptr<Pending>& p) {
    std::lock_guard lk(sw_mu);
    if (sw.hostile_commit.empty()) return commit;
    p->rec.fault = "hostile_commit";
    return sw.hostile_commit;
  }

  bool host_ok(const httplib::Request& req, httplib::Response& res,
               const std::shared_ptr<Pending>& p, bool cdn_route) {
    if (!opt.enforce_hosts || opt.hub_host == opt.cdn_host) return true;
    std::string host = strip_port(req.get_header_value("Host"));
    const std::string& want = cdn_route ? opt.cdn_host : opt.hub_host;
    if (host == want) return true;
    p->rec.fault = "misdirected";
    error(res, p, 421, "", "Misdirected request: " + host + " does not serve this route");
    return false;
  }

  void handle_resolve(const httplib::Request& req, httplib::Response& res,
                      const std::shared_ptr<Pending>& p, Route r) {
    if (!host_ok(req, res, p, false) || !check_repo(req, res, p, r)) return;
    count_request(r.repo);
    // Revision: the first segment (refs%2Fpr%2F1 is one segment), or refs/x/y unencoded.
    std::string commit = resolve_rev(r.repo, r.revision);
    std::size_t file_from = 1;
    if (commit.empty() && r.rev_segments[0] == "refs" && r.rev_segments.size() >= 4) {
      std::string rev3 = join(r.rev_segments, 0, 3);
      commit = resolve_rev(r.repo, rev3);
      if (!commit.empty()) {
        r.revision = rev3;
        file_from = 3;
      }
    }
    r.file = join(r.rev_segments, file_from, r.rev_segments.size());
    p->rec.revision = r.revision;
    p->rec.file = r.file;
    if (commit.empty()) {
      error(res, p, 404, "RevisionNotFound", "Invalid rev id: " + r.revision);
      return;
    }
    res.set_header("X-Repo-Commit", commit_header(commit, p));
    bool safe = file_from < r.rev_segments.size();
    for (std::size_t i = file_from; i < r.rev_segments.size(); ++i) {
      const auto& s = r.rev_segments[i];
      if (s.empty() || s == "." || s == "..") safe = false;
      for (char c : s) {
        if (static_cast<unsigned char>(c) < 0x20) safe = false;
      }
    }
    if (r.file == ".commit" || r.file == ".refs") safe = false;
    fs::path path = repo_dir(r.repo_rel) / r.file;
    std::error_code ec;
    if (!safe || !fs::is_regular_file(path, ec)) {
      error(res, p, 404, "EntryNotFound", r.file + " does not exist on \"" + r.revision + "\"");
      return;
    }
    auto size = static_cast<std::uint64_t>(fs::file_size(path, ec));
    std::string repo_file = r.repo + "/" + r.file;
    if (is_lfs(r.file, size)) {
      std::string sha = register_blob(path, r.repo, r.file);
      std::string pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" + sha +
                            "\nsize " + std::to_string(size) + "\n";
      std::string url = make_cdn_url(sha);
      res.status = 302;
      res.set_header("Location", url);
      std::string claimed = sha;
      {
        std::lock_guard lk(sw_mu);
        if (sw.linked_lie.take(req.target, repo_file)) {
          claimed = sw.linked_lie_sha256;
          p->rec.fault = "linked_etag";
        }
      }
      res.set_header("X-Linked-Etag", "\"" + claimed + "\"");
      res.set_header("X-Linked-Size", std::to_string(size));
      res.set_header("ETag", "\"" + git_blob_sha1(pointer) + "\"");
      res.set_header("Accept-Ranges", "bytes");
      set_body(res, p, "Found. Redirecting to " + url, "text/plain; charset=utf-8");
      return;
    }
    std::string etag = "\"" + cached_digest(path, "gitblob") + "\"";
    std::string ctype = r.file.size() >= 5 && r.file.compare(r.file.size() - 5, 5, ".json") == 0
                            ? "application/json"
                            : "text/plain; charset=utf-8";
    serve_file(req, res, p, path, etag, false, ctype, repo_file);
  }

  void handle_cdn(const httplib::Request& req, httplib::Response& res,
                  const std::shared_ptr<Pending>& p, const Route& r) {
    if (!host_ok(req, res, p, true)) return;
    auto cdn_error = [&](int status, const std::string& code, const std::string& msg) {
      res.status = status;
      set_body(res, p,
               "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code +
                   "</Code><Message>" + msg + "</Message></Error>",
               "application/xml");
    };
    std::string expires = query_param(req, "expires");
    std::string sig = query_param(req, "sig");
    if (expires.empty() || sig != sign(r.blob, expires)) {
      p->rec.fault = "bad_signature";
      cdn_error(403, "AccessDenied", "Invalid signature");
      return;
    }
    if (epoch_ms() > std::strtoll(expires.c_str(), nullptr, 10)) {
      p->rec.fault = "expired";
      cdn_error(403, "AccessDenied", "Request has expired");
      return;
    }
    BlobInfo blob;
    {
      std::lock_guard lk(blob_mu);
      auto it = blobs.find(r.blob);
      if (it == blobs.end()) {
        cdn_error(404, "NoSuchKey", "The specified key does not exist.");
        return;
      }
      blob = it->second;
    }
    p->rec.repo = blob.repo;
    p->rec.file = blob.file;
    bool changed;
    {
      std::lock_guard lk(sw_mu);
      ++sw.cdn_count;
      changed = sw.etag_change_after >= 0 && sw.cdn_count > sw.etag_change_after;
    }
    std::string etag = changed ? changed_etag(r.blob) : "\"" + r.blob + "\"";
    if (changed) p->rec.fault = "etag_changed";
    {
      std::lock_guard lk(sw_mu);
      if (!changed && sw.cdn_etag.take(req.target, blob.repo + "/" + blob.file)) {
        etag = "\"" + sw.cdn_etag_value + "\"";
        p->rec.fault = "cdn_etag";
      }
    }
    serve_file(req, res, p, blob.path, etag, changed, "binary/octet-stream",
               blob.repo + "/" + blob.file);
  }

  void list_files(const fs::path& dir, const fs::path& rel, json& out) {
    std::vector<fs::directory_entry> entries;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e);
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) {
      std::string name = e.path().filename().string();
      if (rel.empty() && (name == ".commit" || name == ".refs")) continue;
      if (e.is_directory(ec))
        list_files(e.path(), rel / name, out);
      else if (e.is_regular_file(ec))
        out.push_back({{"rfilename", (rel / name).generic_string()}});
    }
  }

  void handle_api(const httplib::Request& req, httplib::Response& res,
                  const std::shared_ptr<Pending>& p, const Route& r) {
    if (!host_ok(req, res, p, false) || !check_repo(req, res, p, r)) return;
    count_request(r.repo);
    std::string commit = resolve_rev(r.repo, r.revision);
    if (commit.empty()) {
      error(res, p, 404, "RevisionNotFound", "Invalid rev id: " + r.revision);
      return;
    }
    bool gated, priv;
    {
      std::lock_guard lk(sw_mu);
      gated = sw.gated.count(r.repo) > 0;
      priv = sw.priv.count(r.repo) > 0;
    }
    std::string id = r.repo.rfind("datasets/", 0) == 0 ? r.repo.substr(9) : r.repo;
    json siblings = json::array();
    list_files(repo_dir(r.repo_rel), {}, siblings);
    json body = {{"_id", id},         {"id", id},
                 {"modelId", id},     {"sha", commit},
                 {"private", priv},   {"gated", gated ? json("manual") : json(false)},
                 {"disabled", false}, {"siblings", siblings}};
    res.status = 200;
    res.set_header("X-Repo-Commit", commit_header(commit, p));
    set_body(res, p, body.dump(), "application/json; charset=utf-8");
  }

  void handle_admin(const httplib::Request& req, httplib::Response& res,
                    const std::shared_ptr<Pending>& p, const Route& r, HubServer& self) {
    p->skip = true;
    res.status = 200;
    if (r.admin == "log") {
      std::string out;
      for (const auto& rec : self.log()) out += rec.to_json() + "\n";
      set_body(res, p, out, "application/x-ndjson");
    } else if (r.admin == "clear") {
      self.clear_log();
      set_body(res, p, "{}", "application/json");
    } else if (r.admin == "stats") {
      set_body(res, p, summarize(self.log()).to_json(), "application/json");
    } else if (r.admin == "set") {
      try {
        apply_admin_set(req, self);
        set_body(res, p, "{}", "application/json");
      } catch (const std::exception& e) {
        res.status = 400;
        set_body(res, p, json{{"error", e.what()}}.dump(), "application/json");
      }
    } else {
      res.status = 404;
      set_body(res, p, "unknown admin command", "text/plain");
    }
  }

  static void apply_admin_set(const httplib::Request& req, HubServer& self) {
    auto has = [&](const char* k) { return req.has_param(k); };
    auto str = [&](const char* k) { return req.get_param_value(k); };
    auto num = [&](const char* k, long long dflt) -> long long {
      if (!req.has_param(k)) return dflt;
      std::size_t used = 0;
      long long v = std::stoll(req.get_param_value(k), &used);
      if (used != req.get_param_value(k).size()) throw std::invalid_argument(k);
      return v;
    };
    std::string match = has("match") ? str("match") : "";
    int n = static_cast<int>(num("n", 1));
    if (has("reset")) self.reset_switches();
    if (has("latency_ms")) self.set_latency_ms(static_cast<int>(num("latency_ms", 0)));
    if (has("ignore_range")) self.set_ignore_range(num("ignore_range", 0) != 0);
    if (has("fail_next")) {
      self.fail_next(static_cast<int>(num("fail_next", 0)), static_cast<int>(num("status", 503)),
                     static_cast<int>(num("retry_after", 1)), num("ratelimit", 0) != 0, match);
    }
    if (has("drop_after"))
      self.drop_after(static_cast<std::uint64_t>(num("drop_after", 0)), n, match);
    if (has("stall_after")) {
      self.stall_after(static_cast<std::uint64_t>(num("stall_after", 0)), n, match,
                       static_cast<int>(num("stall_ms", -1)));
    }
    if (has("wrong_content_range")) {
      self.wrong_content_range(static_cast<int>(num("wrong_content_range", 1)), match,
                               num("shift", 1));
    }
    if (has("overlong")) {
      std::string mode = has("mode") ? str("mode") : "length";
      OverlongMode m = mode == "chunked" ? OverlongMode::Chunked
                       : mode == "close" ? OverlongMode::CloseDelimited
                                         : OverlongMode::ContentLength;
      self.overlong_body(static_cast<std::uint64_t>(num("overlong", 0)), n, match, m);
    }
    if (has("change_etag_after"))
      self.change_etag_after(static_cast<int>(num("change_etag_after", -1)));
    if (has("cdn_url_ttl_ms")) self.set_cdn_url_ttl_ms(num("cdn_url_ttl_ms", 0));
    if (has("drip")) {
      self.drip(static_cast<std::uint64_t>(num("drip", 1)), static_cast<int>(num("interval_ms", 1000)), n,
                match);
    }
    if (has("cdn_base")) self.set_cdn_base(str("cdn_base"));
    if (has("header")) self.set_header(str("header"), str("value"), n, match);
    if (has("token")) self.set_token(str("token"));
    if (has("hostile_commit")) self.set_hostile_commit(str("hostile_commit"));
    if (has("linked_etag")) self.set_linked_etag(str("linked_etag"), match);
    if (has("cdn_etag")) self.set_cdn_etag(str("cdn_etag"), match);
    if (has("unknown_repo_401")) self.set_unknown_repo_401(num("unknown_repo_401", 0) != 0);
  }

  void handle(const httplib::Request& req, httplib::Response& res, HubServer& self) {
    // Ranges are parsed here; httplib must not apply its own range logic (slicing, multipart
    // Content-Type) to our responses. The Request is not const inside httplib.
    const_cast<httplib::Request&>(req).ranges.clear();
    auto p = std::make_shared<Pending>();
    tl_pending = p;
    Route r = classify(req.target);
    if (r.kind == "admin") {
      p->rec.method = req.method;
      p->rec.target = req.target;
      p->rec.client_port = req.remote_port;
      handle_admin(req, res, p, r, self);
      return;
    }
    p->rec.seq = ++seq;
    p->rec.start_ms = now_ms();
    fill_request(p->rec, req);

    int latency;
    {
      std::lock_guard lk(sw_mu);
      latency = sw.latency_ms;
    }
    if (latency > 0 && sleep_or_stop(std::chrono::milliseconds(latency))) {
      error(res, p, 503, "", "server stopping");
      return;
    }
    {
      std::unique_lock lk(sw_mu);
      std::string file = r.repo.empty() ? std::string() : r.repo + "/" + r.file;
      if (sw.fail.take(req.target, file)) {
        int status = sw.fail_status;
        int secs = sw.fail_retry_after;
        bool rl = sw.fail_ratelimit;
        lk.unlock();
        p->rec.fault = "fail";
        if (rl) {
          res.set_header("RateLimit", "\"api\";r=0;t=" + std::to_string(secs));
          res.set_header("RateLimit-Policy", "\"fixed window\";\"api\";q=500;w=300");
        } else {
          res.set_header("Retry-After", std::to_string(secs));
        }
        error(res, p, status, "",
              status == 429 ? "Too Many Requests" : "Service Unavailable (injected)");
        return;
      }
    }
    if (r.kind == "resolve")
      handle_resolve(req, res, p, r);
    else if (r.kind == "cdn")
      handle_cdn(req, res, p, r);
    else if (r.kind == "api")
      handle_api(req, res, p, r);
    else
      error(res, p, 404, "", "Not Found");
    std::lock_guard lk(sw_mu);
    if (sw.header.take(req.target, p->rec.repo + "/" + p->rec.file)) {
      res.headers.erase(sw.header_name);
      res.set_header(sw.header_name, sw.header_value);
      p->rec.fault = "header";
    }
  }

  // ------------------------------------------------------------ stop helpers

  // Shuts down (without closing: httplib owns them) the accepted sockets of this server, so
  // idle keep-alive connections and blocked writes end now rather than after their timeouts.
  void shutdown_connections() const {
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
};

// ================================================================ records

std::string RequestRecord::to_json() const {
  json j = {{"seq", seq},
            {"start_ms", start_ms},
            {"end_ms", end_ms},
            {"method", method},
            {"host", host},
            {"target", target},
            {"range", range},
            {"if_match", if_match},
            {"authorization", authorization},
            {"authorization_sha256", authorization_sha256},
            {"user_agent", user_agent},
            {"client_port", client_port},
            {"kind", kind},
            {"repo", repo},
            {"revision", revision},
            {"file", file},
            {"status", status},
            {"content_range", content_range},
            {"content_length", content_length},
            {"body_bytes", body_bytes},
            {"etag", etag},
            {"location", location},
            {"error_code", error_code},
            {"retry_after", retry_after},
            {"dropped", dropped},
            {"fault", fault}};
  if (!authorization_value.empty()) j["authorization_value"] = authorization_value;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

RequestRecord RequestRecord::from_json(std::string_view line) {
  json j = json::parse(line);
  RequestRecord r;
  r.seq = j.at("seq").get<std::uint64_t>();
  r.start_ms = j.at("start_ms").get<double>();
  r.end_ms = j.at("end_ms").get<double>();
  r.method = j.at("method").get<std::string>();
  r.host = j.at("host").get<std::string>();
  r.target = j.at("target").get<std::string>();
  r.range = j.at("range").get<std::string>();
  r.if_match = j.at("if_match").get<std::string>();
  r.authorization = j.at("authorization").get<bool>();
  r.authorization_sha256 = j.at("authorization_sha256").get<std::string>();
  r.authorization_value = j.value("authorization_value", "");
  r.user_agent = j.at("user_agent").get<std::string>();
  r.client_port = j.at("client_port").get<int>();
  r.kind = j.at("kind").get<std::string>();
  r.repo = j.at("repo").get<std::string>();
  r.revision = j.at("revision").get<std::string>();
  r.file = j.at("file").get<std::string>();
  r.status = j.at("status").get<int>();
  r.content_range = j.at("content_range").get<std::string>();
  r.content_length = j.at("content_length").get<std::int64_t>();
  r.body_bytes = j.at("body_bytes").get<std::uint64_t>();
  r.etag = j.at("etag").get<std::string>();
  r.location = j.at("location").get<std::string>();
  r.error_code = j.at("error_code").get<std::string>();
  r.retry_after = j.at("retry_after").get<std::string>();
  r.dropped = j.at("dropped").get<bool>();
  r.fault = j.at("fault").get<std::string>();
  return r;
}

int round_trips(const std::vector<RequestRecord>& log) {
  std::vector<const RequestRecord*> v;
  v.reserve(log.size());
  for (const auto& r : log) v.push_back(&r);
  std::sort(v.begin(), v.end(), [](const RequestRecord* a, const RequestRecord* b) {
    return a->start_ms != b->start_ms ? a->start_ms < b->start_ms : a->end_ms < b->end_ms;
  });
  // Records ending at or before the current start may precede it in a chain; since starts
  // are visited in order, everything that ended earlier was visited before.
  using Item = std::pair<double, int>;  // end, chain length
  std::priority_queue<Item, std::vector<Item>, std::greater<>> open;
  int best_closed = 0, best = 0;
  for (const auto* r : v) {
    while (!open.empty() && open.top().first <= r->start_ms) {
      best_closed = std::max(best_closed, open.top().second);
      open.pop();
    }
    int len = best_closed + 1;
    best = std::max(best, len);
    open.push({r->end_ms, len});
  }
  return best;
}

LogSummary summarize(const std::vector<RequestRecord>& log) {
  LogSummary s;
  s.requests = log.size();
  std::set<int> ports;
  double first = 0, last = 0;
  for (std::size_t i = 0; i < log.size(); ++i) {
    const auto& r = log[i];
    if (r.kind == "resolve") ++s.resolve_requests;
    if (r.kind == "cdn") ++s.cdn_requests;
    ports.insert(r.client_port);
    s.body_bytes += r.body_bytes;
    if (i == 0 || r.start_ms < first) first = r.start_ms;
    if (i == 0 || r.end_ms > last) last = r.end_ms;
  }
  s.connections = ports.size();
  s.round_trips = round_trips(log);
  s.wall_ms = log.empty() ? 0 : std::round((last - first) * 1000.0) / 1000.0;
  return s;
}

std::string LogSummary::to_json() const {
  return json{{"requests", requests},
              {"resolve_requests", resolve_requests},
              {"cdn_requests", cdn_requests},
              {"connections", connections},
              {"round_trips", round_trips},
              {"body_bytes", body_bytes},
              {"wall_ms", wall_ms}}
      .dump();
}

std::vector<RequestRecord> read_log_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::vector<RequestRecord> out;
  std::map<std::uint64_t, std::size_t> index;  // seq → position (a later line amends)
  std::string line;
  while (std::getline(in, line)) {
    if (trim(line).empty()) continue;
    RequestRecord r = RequestRecord::from_json(line);
    auto [it, fresh] = index.emplace(r.seq, out.size());
    if (fresh)
      out.push_back(std::move(r));
    else
      out[it->second] = std::move(r);
  }
  return out;
}

std::string git_blob_sha1(std::string_view content) {
  std::string s = "blob " + std::to_string(content.size());
  s.push_back('\0');
  s.append(content);
  return sha1_hex(s);
}

std::string default_commit(std::string_view repo_id) { return sha1_hex(repo_id); }

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
      [&m](const httplib::Request& req, const httplib::Response& res) { m.finish(req, res); });
  m.svr->set_post_routing_handler(
      [&m](const httplib::Request& req, httplib::Response& res) { m.before_headers(req, res); });
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
        m.error(res, m.current(req), 500, "", "internal error: " + what);
      });
  m.svr->Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
    impl_->handle(req, res, *this);
  });

  if (!m.opt.log_file.empty()) {
    m.log_out.open(m.opt.log_file, std::ios::app);
    if (!m.log_out) throw std::runtime_error("cannot open log file " + m.opt.log_file.string());
  }
  m.t0 = Clock::now();
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
  std::lock_guard lk(m.log_mu);
  if (m.log_out.is_open()) m.log_out.close();
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

std::vector<RequestRecord> HubServer::log() const {
  std::lock_guard lk(impl_->log_mu);
  return impl_->records;
}

std::vector<RequestRecord> HubServer::take_log() {
  std::lock_guard lk(impl_->log_mu);
  std::vector<RequestRecord> out;
  out.swap(impl_->records);
  return out;
}

void HubServer::clear_log() {
  std::lock_guard lk(impl_->log_mu);
  impl_->records.clear();
}

std::size_t HubServer::request_count() const {
  std::lock_guard lk(impl_->log_mu);
  return impl_->records.size();
}

std::string HubServer::commit(std::string_view repo_id, std::string_view rev) const {
  return impl_->resolve_rev(std::string(repo_id), std::string(rev));
}

void HubServer::set_ref(std::string_view repo_id, std::string_view ref, std::string_view sha) {
  if (!is_hex40(sha)) throw std::invalid_argument("set_ref: not a 40-hex sha");
  std::lock_guard lk(impl_->refs_mu);
  RepoRefs* r = impl_->refs_of_locked(std::string(repo_id));
  if (!r) throw std::invalid_argument("set_ref: unknown repo " + std::string(repo_id));
  r->refs[std::string(ref)] = std::string(sha);
  r->shas.insert(std::string(sha));
}

std::size_t HubServer::warm_up() {
  Impl& m = *impl_;
  std::error_code ec;
  if (m.opt.root.empty() || !fs::is_directory(m.opt.root, ec)) return 0;
  std::vector<std::string> repos;
  auto add_repos = [&](const fs::path& base, const std::string& prefix) {
    for (const auto& org : fs::directory_iterator(base, ec)) {
      if (!org.is_directory(ec)) continue;
      std::string o = org.path().filename().string();
      if (prefix.empty() && o == "datasets") continue;
      for (const auto& name : fs::directory_iterator(org.path(), ec)) {
        if (name.is_directory(ec))
          repos.push_back(prefix + o + "/" + name.path().filename().string());
      }
    }
  };
  add_repos(m.opt.root, "");
  add_repos(m.opt.root / "datasets", "datasets/");
  std::size_t n = 0;
  for (const auto& repo : repos) {
    const fs::path dir = m.repo_dir(repo);
    for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
      if (!e.is_regular_file(ec)) continue;
      std::string rel = e.path().lexically_relative(dir).generic_string();
      if (rel == ".commit" || rel == ".refs") continue;
      if (m.is_lfs(rel, e.file_size(ec)))
        m.register_blob(e.path(), repo, rel);
      else
        m.cached_digest(e.path(), "gitblob");
      ++n;
    }
  }
  return n;
}

void HubServer::move_ref_after(std::string_view repo_id, std::string_view ref, std::string_view sha,
                               int requests) {
  if (!is_hex40(sha)) throw std::invalid_argument("move_ref_after: not a 40-hex sha");
  std::lock_guard lk(impl_->refs_mu);
  impl_->moves.push_back(
      {std::string(repo_id), std::string(ref), std::string(sha), std::max(requests, 0)});
}

std::string HubServer::file_sha256(std::string_view repo_id, std::string_view path) {
  fs::path p = impl_->repo_dir(std::string(repo_id)) / std::string(path);
  std::error_code ec;
  if (impl_->opt.root.empty() || !fs::is_regular_file(p, ec)) return {};
  return impl_->cached_digest(p, "sha256");
}

std::string HubServer::cdn_url(std::string_view repo_id, std::string_view path) {
  fs::path p = impl_->repo_dir(std::string(repo_id)) / std::string(path);
  std::error_code ec;
  if (impl_->opt.root.empty() || !fs::is_regular_file(p, ec)) return {};
  std::string sha = impl_->register_blob(p, std::string(repo_id), std::string(path));
  return impl_->make_cdn_url(sha);
}

void HubServer::set_latency_ms(int ms) {
  impl_->with_switches([&](Switches& sw) { sw.latency_ms = std::max(ms, 0); });
}
void HubServer::set_ignore_range(bool on) {
  impl_->with_switches([&](Switches& sw) { sw.ignore_range = on; });
}

void HubServer::fail_next(int n, int status, int retry_after_s, bool use_ratelimit_header,
                          std::string match) {
  impl_->with_switches([&](Switches& sw) {
    sw.fail = Trigger{n, std::move(match)};
    sw.fail_status = status;
    sw.fail_retry_after = retry_after_s;
    sw.fail_ratelimit = use_ratelimit_header;
  });
}

void HubServer::drop_after(std::uint64_t bytes, int n, std::string match) {
  impl_->with_switches([&](Switches& sw) {
    sw.drop = Trigger{n, std::move(match)};
    sw.drop_bytes = bytes;
  });
}

void HubServer::stall_after(std::uint64_t bytes, int n, std::string match, int stall_ms) {
  impl_->with_switches([&](Switches& sw) {
    sw.stall = Trigger{n, std::move(match)};
    sw.stall_bytes = bytes;
    sw.stall_ms = stall_ms;
  });
}

void HubServer::wrong_content_range(int n, std::string match, std::int64_t shift) {
  impl_->with_switches([&](Switches& sw) {
    sw.wrong_cr = Trigger{n, std::move(match)};
    sw.wrong_cr_shift = shift;
  });
}

void HubServer::overlong_body(std::uint64_t extra, int n, std::string match, OverlongMode mode) {
  impl_->with_switches([&](Switches& sw) {
    sw.overlong = Trigger{n, std::move(match)};
    sw.overlong_extra = extra;
    sw.overlong_mode = mode;
  });
}

void HubServer::change_etag_after(int cdn_requests) {
  impl_->with_switches([&](Switches& sw) {
    sw.etag_change_after = cdn_requests;
    sw.cdn_count = 0;
  });
}

void HubServer::set_token(std::string token) {
  impl_->with_switches([&](Switches& sw) { sw.token = std::move(token); });
}
void HubServer::set_gated_repos(std::vector<std::string> repos) {
  impl_->with_switches(
      [&](Switches& sw) { sw.gated = std::set<std::string>(repos.begin(), repos.end()); });
}
void HubServer::set_private_repos(std::vector<std::string> repos) {
  impl_->with_switches(
      [&](Switches& sw) { sw.priv = std::set<std::string>(repos.begin(), repos.end()); });
}
void HubServer::set_unknown_repo_401(bool on) {
  impl_->with_switches([&](Switches& sw) { sw.unknown_repo_401 = on; });
}
void HubServer::set_cdn_url_ttl_ms(std::int64_t ms) {
  impl_->with_switches([&](Switches& sw) { sw.cdn_url_ttl_ms = ms; });
}
void HubServer::drip(std::uint64_t bytes, int interval_ms, int n, std::string match) {
  impl_->with_switches([&](Switches& sw) {
    sw.drip = Trigger{n, std::move(match)};
    sw.drip_bytes = bytes;
    sw.drip_interval_ms = interval_ms;
  });
}
void HubServer::set_cdn_base(std::string base) {
  impl_->with_switches([&](Switches& sw) { sw.cdn_base = std::move(base); });
}
void HubServer::set_header(std::string name, std::string value, int n, std::string match) {
  impl_->with_switches([&](Switches& sw) {
    sw.header = Trigger{n, std::move(match)};
    sw.header_name = std::move(name);
    sw.header_value = std::move(value);
  });
}
void HubServer::set_hostile_commit(std::string value) {
  impl_->with_switches([&](Switches& sw) { sw.hostile_commit = std::move(value); });
}

void HubServer::set_linked_etag(std::string sha256, std::string match) {
  impl_->with_switches([&](Switches& sw) {
    sw.linked_lie = Trigger{sha256.empty() ? 0 : -1, std::move(match)};
    sw.linked_lie_sha256 = std::move(sha256);
  });
}

void HubServer::set_cdn_etag(std::string etag, std::string match) {
  impl_->with_switches([&](Switches& sw) {
    sw.cdn_etag = Trigger{etag.empty() ? 0 : -1, std::move(match)};
    sw.cdn_etag_value = std::move(etag);
  });
}

void HubServer::reset_switches() {
  impl_->with_switches([&](Switches& sw) { sw = Switches::from(impl_->opt); });
}

std::string HubServer::changed_etag(std::string_view sha256) {
  return "\"" + sha256_hex(std::string(sha256) + ":changed") + "\"";
}

}  // namespace tensorfetch::testing
