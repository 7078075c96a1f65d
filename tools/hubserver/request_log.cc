// SPDX-License-Identifier: Apache-2.0
// The request log (see request_log_internal.h) and the public log functions of
// hub_server.hpp: RequestRecord JSON, round_trips, summarize, read_log_file.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <stdexcept>

#include "hash_internal.h"
#include "request_internal.h"
#include "request_log_internal.h"

namespace tensorfetch::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ================================================================ the recorder

namespace detail {

namespace {

thread_local std::shared_ptr<Pending> tl_pending;

void capture_response(RequestRecord& rec, const httplib::Response& res) {
  rec.status = res.status;
  rec.content_range = res.get_header_value("Content-Range");
  rec.content_length = -1;
  if (res.has_header("Content-Length")) {
    rec.content_length = std::strtoll(res.get_header_value("Content-Length").c_str(), nullptr, 10);
  }
  rec.etag = res.get_header_value("ETag");
  rec.location = res.get_header_value("Location");
  rec.error_code = res.get_header_value("X-Error-Code");
  rec.retry_after = res.has_header("Retry-After") ? res.get_header_value("Retry-After")
                                                  : res.get_header_value("RateLimit");
}

}  // namespace

RequestLog::RequestLog(bool authorization_values) : authorization_values_(authorization_values) {}

void RequestLog::open_file(const fs::path& path) {
  std::lock_guard lk(mu_);
  out_.open(path, std::ios::app);
  if (!out_) throw std::runtime_error("cannot open log file " + path.string());
}

void RequestLog::close_file() {
  std::lock_guard lk(mu_);
  if (out_.is_open()) out_.close();
}

void RequestLog::restart_clock() { t0_ = std::chrono::steady_clock::now(); }

double RequestLog::now_ms() const {
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  return static_cast<double>(static_cast<std::int64_t>(ms * 1000.0)) / 1000.0;
}

void RequestLog::fill_request(RequestRecord& rec, const httplib::Request& req) const {
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
    if (authorization_values_) rec.authorization_value = v;
  }
  Route r = classify(req.target);
  rec.kind = r.kind == "admin" ? "other" : r.kind;
  rec.repo = r.repo;
  rec.revision = r.revision;
  rec.file = r.file;
}

std::shared_ptr<Pending> RequestLog::begin(const httplib::Request& req) {
  auto p = std::make_shared<Pending>();
  p->rec.seq = ++seq_;
  p->rec.start_ms = now_ms();
  fill_request(p->rec, req);
  tl_pending = p;
  return p;
}

std::shared_ptr<Pending> RequestLog::begin_unlogged(const httplib::Request& req) {
  auto p = std::make_shared<Pending>();
  p->skip = true;
  p->rec.method = req.method;
  p->rec.target = req.target;
  p->rec.client_port = req.remote_port;
  tl_pending = p;
  return p;
}

std::shared_ptr<Pending> RequestLog::current(const httplib::Request& req) {
  std::shared_ptr<Pending> p = tl_pending;
  if (p && (p->rec.method != req.method || p->rec.target != req.target ||
            p->rec.client_port != req.remote_port)) {
    p.reset();  // stale: belonged to an earlier request on this thread
  }
  return p ? p : begin(req);
}

void RequestLog::commit(Pending& p, std::uint64_t about_to_write) {
  if (p.skip || p.committed) return;
  p.rec.end_ms = now_ms();
  p.rec.body_bytes = p.bytes + about_to_write;
  p.rec.dropped = p.dropped;
  p.committed = true;
  std::lock_guard lk(mu_);
  records_.push_back(p.rec);
  write_line(p.rec);
}

void RequestLog::write_line(const RequestRecord& rec) {
  if (!out_.is_open()) return;
  out_ << rec.to_json() << '\n';
  out_.flush();
}

void RequestLog::before_headers(const httplib::Request& req, httplib::Response& res) {
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

void RequestLog::finish(const httplib::Request& req, const httplib::Response& res) {
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
    std::lock_guard lk(mu_);
    for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
      if (it->seq == p->rec.seq) {
        *it = p->rec;
        break;
      }
    }
    write_line(p->rec);  // the same seq again: read_log_file keeps the last
  }
}

std::vector<RequestRecord> RequestLog::records() const {
  std::lock_guard lk(mu_);
  return records_;
}

std::vector<RequestRecord> RequestLog::take() {
  std::lock_guard lk(mu_);
  std::vector<RequestRecord> out;
  out.swap(records_);
  return out;
}

void RequestLog::clear() {
  std::lock_guard lk(mu_);
  records_.clear();
}

std::size_t RequestLog::size() const {
  std::lock_guard lk(mu_);
  return records_.size();
}

}  // namespace detail

// ================================================================ records

namespace {

// Calls f(name, member) for every field of a record (authorization_value aside: it is
// written only when set).
template <class Record, class F>
void for_each_field(Record& r, F f) {
  f("seq", r.seq);
  f("start_ms", r.start_ms);
  f("end_ms", r.end_ms);
  f("method", r.method);
  f("host", r.host);
  f("target", r.target);
  f("range", r.range);
  f("if_match", r.if_match);
  f("authorization", r.authorization);
  f("authorization_sha256", r.authorization_sha256);
  f("user_agent", r.user_agent);
  f("client_port", r.client_port);
  f("kind", r.kind);
  f("repo", r.repo);
  f("revision", r.revision);
  f("file", r.file);
  f("status", r.status);
  f("content_range", r.content_range);
  f("content_length", r.content_length);
  f("body_bytes", r.body_bytes);
  f("etag", r.etag);
  f("location", r.location);
  f("error_code", r.error_code);
  f("retry_after", r.retry_after);
  f("dropped", r.dropped);
  f("fault", r.fault);
}

}  // namespace

std::string RequestRecord::to_json() const {
  json j = json::object();
  for_each_field(*this, [&](const char* name, const auto& v) { j[name] = v; });
  if (!authorization_value.empty()) j["authorization_value"] = authorization_value;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

RequestRecord RequestRecord::from_json(std::string_view line) {
  json j = json::parse(line);
  RequestRecord r;
  for_each_field(r, [&](const char* name, auto& v) { j.at(name).get_to(v); });
  r.authorization_value = j.value("authorization_value", "");
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
    if (detail::trim(line).empty()) continue;
    RequestRecord r = RequestRecord::from_json(line);
    auto [it, fresh] = index.emplace(r.seq, out.size());
    if (fresh)
      out.push_back(std::move(r));
    else
      out[it->second] = std::move(r);
  }
  return out;
}

}  // namespace tensorfetch::testing
