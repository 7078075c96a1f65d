// SPDX-License-Identifier: Apache-2.0
// The request log: fields, ordering, the JSON-lines file, round trips, admin routes, threads.
#include <atomic>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "http_util.hpp"

using namespace hubtest;
using tensorfetch::testing::read_log_file;
using tensorfetch::testing::round_trips;
using tensorfetch::testing::summarize;

namespace {

RequestRecord rec(double start, double end, int port = 1) {
  RequestRecord r;
  r.start_ms = start;
  r.end_ms = end;
  r.client_port = port;
  return r;
}

}  // namespace

TEST_CASE("round_trips counts the longest chain of sequential requests", "[log]") {
  CHECK(round_trips({}) == 0);
  CHECK(round_trips({rec(0, 10)}) == 1);
  CHECK(round_trips({rec(0, 10), rec(1, 11), rec(2, 12)}) == 1);    // parallel
  CHECK(round_trips({rec(0, 10), rec(10, 20), rec(21, 30)}) == 3);  // sequential
  CHECK(round_trips({rec(21, 30), rec(0, 10), rec(10, 20)}) == 3);  // any order
  // open (3 parallel) → shards (2 parallel) → 1: three round trips, the long one overlaps.
  CHECK(round_trips({rec(0, 50), rec(1, 51), rec(2, 52), rec(53, 100), rec(54, 101), rec(102, 150),
                     rec(0, 140)}) == 3);
  auto s = summarize({rec(0, 50, 1), rec(60, 100, 2), rec(10, 20, 1)});
  CHECK(s.requests == 3);
  CHECK(s.connections == 2);
  CHECK(s.round_trips == 2);
  CHECK(s.wall_ms == 100);
  auto j = nlohmann::json::parse(s.to_json());
  CHECK(j["round_trips"] == 2);
}

TEST_CASE("a record has every field; JSON round trip", "[log]") {
  Fixture f;
  auto& s = *f.server;
  auto hub = f.hub();
  auto r = hub.Get("/org/small/resolve/main/config.json", {{"Range", "bytes=0-4"},
                                                           {"If-Match", "\"x\""},
                                                           {"Authorization", "Bearer t"},
                                                           {"User-Agent", "tf-test/1"}});
  REQUIRE(r);
  CHECK(r->status == 412);
  r = hub.Get("/org/small/resolve/main/config.json", {{"Range", "bytes=0-4"}});
  REQUIRE(r);
  auto log = s.log();
  REQUIRE(log.size() == 2);
  const auto& a = log[0];
  CHECK(a.seq == 1);
  CHECK(a.start_ms >= 0);
  CHECK(a.end_ms >= a.start_ms);
  CHECK(a.start_ms < 60000);
  CHECK(a.method == "GET");
  CHECK(a.host == "localhost:" + std::to_string(s.port()));
  CHECK(a.target == "/org/small/resolve/main/config.json");
  CHECK(a.range == "bytes=0-4");
  CHECK(a.if_match == "\"x\"");
  CHECK(a.authorization);
  CHECK(a.authorization_sha256 == sha256_hex("Bearer t"));
  CHECK(a.user_agent == "tf-test/1");
  CHECK(a.kind == "resolve");
  CHECK(a.repo == kSmall);
  CHECK(a.revision == "main");
  CHECK(a.file == "config.json");
  CHECK(a.status == 412);
  CHECK(a.content_length == 0);
  CHECK(a.body_bytes == 0);
  CHECK_FALSE(a.dropped);
  const auto& b = log[1];
  CHECK(b.seq == 2);
  CHECK(b.start_ms >= a.end_ms);
  CHECK(b.status == 206);
  CHECK(b.content_range.rfind("bytes 0-4/", 0) == 0);
  CHECK(b.content_length == 5);
  CHECK(b.body_bytes == 5);
  CHECK(b.etag.size() == 42);
  CHECK(b.client_port == a.client_port);  // one keep-alive connection
  CHECK_FALSE(b.authorization);

  for (const auto& x : log) {
    auto line = x.to_json();
    CHECK(line.find('\n') == std::string::npos);
    CHECK(RequestRecord::from_json(line).to_json() == line);
  }
  CHECK_THROWS(RequestRecord::from_json("{\"seq\": 1}"));
}

TEST_CASE("the log file holds the same records as JSON lines", "[log]") {
  TempDir tmp;
  Options opt;
  opt.log_file = tmp.path() / "requests.jsonl";
  Fixture f(opt);
  auto& s = *f.server;
  auto hub = f.hub();
  const std::string target = f.cdn_target(kSharded, "model-00003-of-00003.safetensors");
  auto cdn = f.cdn();
  REQUIRE(cdn.Get(target.c_str(), {{"Range", "bytes=0-262143"}}));
  REQUIRE(hub.Get("/org/none/resolve/main/x.json"));
  auto mem = s.log();
  auto file = read_log_file(opt.log_file);
  REQUIRE(mem.size() == 3);
  REQUIRE(file.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(file[i].to_json() == mem[i].to_json());
  CHECK(file[1].body_bytes == 241376);  // the shard is smaller than the range asked
  CHECK(file[2].error_code == "RepoNotFound");
  // Appended, not truncated, and clear_log() only clears memory.
  s.clear_log();
  CHECK(s.log().empty());
  CHECK(s.request_count() == 0);
  REQUIRE(hub.Get("/org/small/resolve/main/config.json"));
  CHECK(read_log_file(opt.log_file).size() == 4);
  CHECK(s.take_log().size() == 1);
  CHECK(s.log().empty());
}

TEST_CASE("a record amended after it entered the log: the last line wins", "[log]") {
  // An overlong body with Content-Length is logged before its first byte (the client may be
  // done before the extra bytes); the logger then amends the byte count.
  TempDir tmp;
  Options opt;
  opt.log_file = tmp.path() / "requests.jsonl";
  Fixture f(opt);
  auto& s = *f.server;
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  s.overlong_body(5, 1, "", tensorfetch::testing::OverlongMode::ContentLength);
  auto raw = raw_request(
      s.port(), raw_get("127.0.0.1:" + std::to_string(s.port()), target, {"Range: bytes=0-9"}));
  CHECK(raw.closed);
  auto mem = s.log();
  REQUIRE(mem.size() == 2);
  CHECK(mem[1].body_bytes == 15);
  CHECK(mem[1].content_length == 10);
  std::istringstream lines(read_file(opt.log_file));
  int n = 0;
  for (std::string line; std::getline(lines, line);) ++n;
  CHECK(n == 3);
  auto file = read_log_file(opt.log_file);
  REQUIRE(file.size() == 2);
  CHECK(file[1].to_json() == mem[1].to_json());
}

TEST_CASE("connections: one per client, reused with keep-alive", "[log]") {
  Fixture f;
  auto& s = *f.server;
  {
    auto a = f.hub();
    auto b = f.hub();
    for (int i = 0; i < 3; ++i) {
      REQUIRE(a.Get("/org/small/resolve/main/config.json"));
      REQUIRE(b.Get("/org/small/resolve/main/config.json"));
    }
  }
  {
    httplib::Client c("localhost", s.port());  // no keep-alive: a connection per request
    REQUIRE(c.Get("/org/small/resolve/main/config.json"));
    REQUIRE(c.Get("/org/small/resolve/main/config.json"));
  }
  auto log = s.log();
  REQUIRE(log.size() == 8);
  CHECK(summarize(log).connections == 4);
  std::set<int> first6;
  for (int i = 0; i < 6; ++i) first6.insert(log[static_cast<std::size_t>(i)].client_port);
  CHECK(first6.size() == 2);
}

TEST_CASE("admin routes: log, stats, set, clear; never logged", "[log]") {
  Fixture f;
  auto& s = *f.server;
  auto hub = f.hub();
  REQUIRE(hub.Get("/org/small/resolve/main/config.json"));
  REQUIRE(hub.Get("/org/small/resolve/main/model.safetensors"));
  auto l = hub.Get("/_admin/log");
  REQUIRE(l);
  CHECK(l->status == 200);
  std::vector<RequestRecord> lines;
  std::size_t pos = 0;
  while (pos < l->body.size()) {
    auto nl = l->body.find('\n', pos);
    lines.push_back(RequestRecord::from_json(l->body.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  REQUIRE(lines.size() == 2);
  CHECK(lines[1].status == 302);

  auto st = hub.Get("/_admin/stats");
  REQUIRE(st);
  auto j = nlohmann::json::parse(st->body);
  CHECK(j["requests"] == 2);
  CHECK(j["resolve_requests"] == 2);
  CHECK(j["connections"] == 1);

  auto set = hub.Get("/_admin/set?fail_next=1&status=429&retry_after=3&match=config");
  REQUIRE(set);
  CHECK(set->status == 200);
  auto r = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(r);
  CHECK(r->status == 302);
  r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 429);
  CHECK(r->get_header_value("Retry-After") == "3");
  REQUIRE(hub.Get("/_admin/set?latency_ms=150"));
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(hub.Get("/org/small/resolve/main/config.json"));
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(150));
  REQUIRE(hub.Get("/_admin/set?reset=1"));
  auto bad = hub.Get("/_admin/set?latency_ms=abc");
  REQUIRE(bad);
  CHECK(bad->status == 400);
  CHECK(s.log().size() == 5);
  REQUIRE(hub.Get("/_admin/clear"));
  CHECK(s.log().empty());
}

TEST_CASE("the log is thread-safe: concurrent requests get unique sequence numbers", "[log]") {
  Fixture f;
  auto& s = *f.server;
  const std::string target = f.cdn_target(kSharded, "model-00001-of-00003.safetensors");
  s.clear_log();
  constexpr int kThreads = 8, kEach = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto c = f.cdn();
      for (int i = 0; i < kEach; ++i) {
        std::string r = "bytes=" + std::to_string(i * 1000) + "-" + std::to_string(i * 1000 + t);
        auto res = c.Get(target.c_str(), {{"Range", r}});
        if (!res || res->status != 206) ++failures;
        if (i == kEach / 2) (void)s.log();  // readers while writers run
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  auto log = s.log();
  REQUIRE(log.size() == kThreads * kEach);
  std::set<std::uint64_t> seqs;
  std::uint64_t bytes = 0;
  for (const auto& r : log) {
    seqs.insert(r.seq);
    bytes += r.body_bytes;
    CHECK(r.end_ms >= r.start_ms);
  }
  CHECK(seqs.size() == log.size());
  std::uint64_t want = 0;
  for (int t = 0; t < kThreads; ++t) want += static_cast<std::uint64_t>((t + 1) * kEach);
  CHECK(bytes == want);
  CHECK(summarize(log).connections == kThreads);
}
