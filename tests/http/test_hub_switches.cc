// SPDX-License-Identifier: Apache-2.0
// The test server's switches: latency, ignored ranges, 429/503, dropped connections, stalls,
// wrong Content-Range, overlong bodies, ETag changes, gated/private repos, expiring CDN URLs,
// host enforcement, a hostile X-Repo-Commit, a lying X-Linked-Etag, a Xet-like CDN ETag; the
// real-Hub profile: LFS redirects without ETag, Xet ETags, the resolvers rate limit, CDN
// faults, disabled repos, the profile as a whole.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <thread>

#include "http_util.hpp"

using namespace hubtest;
using tensorfetch::testing::default_commit;
using tensorfetch::testing::git_blob_sha1;
using tensorfetch::testing::OverlongMode;
using tensorfetch::testing::round_trips;
using tensorfetch::testing::summarize;

namespace {

const std::string kShard1 = "model-00001-of-00003.safetensors";
const std::string kShard2 = "model-00002-of-00003.safetensors";

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string header_value(const std::string& headers, const std::string& name) {
  auto lower = [](std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::string h = lower(headers);
  auto p = h.find("\r\n" + lower(name) + ":");
  if (p == std::string::npos) return {};
  p += name.size() + 3;
  auto e = headers.find("\r\n", p);
  std::string v = headers.substr(p, e - p);
  while (!v.empty() && v.front() == ' ') v.erase(0, 1);
  return v;
}

std::string host_of(const HubServer& s, bool cdn) {
  return std::string(cdn ? "127.0.0.1:" : "localhost:") + std::to_string(s.port());
}

}  // namespace

TEST_CASE("latency delays every request but parallel requests overlap", "[switches]") {
  Options opt;
  opt.latency_ms = 300;
  Fixture f(opt);
  auto& s = *f.server;

  auto t0 = std::chrono::steady_clock::now();
  auto hub = f.hub();
  auto r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(ms_since(t0) >= 300);
  auto log = s.take_log();
  REQUIRE(log.size() == 1);
  CHECK(log[0].end_ms - log[0].start_ms >= 299);

  // 32 requests at once on 32 connections: about one latency, not 32.
  constexpr int kParallel = 32;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kParallel; ++i) {
    threads.emplace_back([&, i] {
      auto c = (i % 2) ? f.cdn() : f.hub();
      std::string target = (i % 2) ? "/org/small/resolve/main/config.json"
                                   : "/org/small/resolve/main/sub/dir/notes.txt";
      auto res = c.Get(target.c_str());
      if (res && res->status == 200) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  double wall = ms_since(t0);
  CHECK(ok == kParallel);
  CHECK(wall < 3000);
  log = s.take_log();
  REQUIRE(log.size() == kParallel);
  CHECK(round_trips(log) == 1);

  // Three in a row: three round trips.
  for (int i = 0; i < 3; ++i) REQUIRE(hub.Get("/org/small/resolve/main/config.json"));
  log = s.take_log();
  CHECK(round_trips(log) == 3);
  CHECK(summarize(log).connections == 1);  // keep-alive

  // Also on the CDN route; and it can be changed at run time.
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  s.set_latency_ms(0);
  auto cdn = f.cdn();
  t0 = std::chrono::steady_clock::now();
  REQUIRE(cdn.Get(target.c_str()));
  CHECK(ms_since(t0) < 250);
  s.set_latency_ms(200);
  t0 = std::chrono::steady_clock::now();
  REQUIRE(cdn.Get(target.c_str()));
  CHECK(ms_since(t0) >= 200);
}

TEST_CASE("without latency, sequential requests on one connection are quick", "[switches]") {
  // Guards against Nagle + delayed ACK (~40 ms per response) skewing round-trip figures.
  Fixture f;
  auto hub = f.hub();
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  auto cdn = f.cdn();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    REQUIRE(hub.Get("/org/small/resolve/main/config.json"));
    REQUIRE(cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}}));
  }
  CHECK(ms_since(t0) < 600);
  CHECK(summarize(f.server->log()).connections == 3);
}

TEST_CASE("ignore_range answers 200 with the whole body", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  s.set_ignore_range(true);
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  auto cdn = f.cdn();
  auto r = cdn.Get(target.c_str(), {{"Range", "bytes=0-99"}});
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == content);
  CHECK_FALSE(r->has_header("Content-Range"));
  auto hub = f.hub();
  r = hub.Get("/org/small/resolve/main/config.json", {{"Range", "bytes=0-1"}});
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body.size() > 2);
  auto log = s.log();
  REQUIRE(log.size() == 3);
  CHECK(log[1].fault == "ignore_range");
  CHECK(log[1].body_bytes == content.size());
  CHECK(log[2].fault == "ignore_range");
  s.set_ignore_range(false);
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-99"}});
  REQUIRE(r);
  CHECK(r->status == 206);
}

TEST_CASE("fail_next answers 429/503 with Retry-After or RateLimit", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  auto hub = f.hub();
  s.fail_next(2, 429, 7);
  for (int i = 0; i < 2; ++i) {
    auto r = hub.Get("/org/small/resolve/main/config.json");
    REQUIRE(r);
    CHECK(r->status == 429);
    CHECK(r->get_header_value("Retry-After") == "7");
  }
  auto r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 200);

  s.fail_next(1, 429, 42, true);
  r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 429);
  CHECK_FALSE(r->has_header("Retry-After"));
  // The shape the Hub sends: bucket "resolvers" and its policy (the Hub's q and w while the
  // server's own rate limit is off), no Retry-After.
  CHECK(r->get_header_value("RateLimit") == "\"resolvers\";r=0;t=42");
  CHECK(r->get_header_value("RateLimit-Policy") == "\"fixed window\";\"resolvers\";q=3000;w=300");

  // Only matching requests: the CDN fails, the resolve does not.
  s.fail_next(1, 503, 1, false, "/cdn/");
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  auto cdn = f.cdn();
  r = cdn.Get(target.c_str());
  REQUIRE(r);
  CHECK(r->status == 503);
  CHECK(r->get_header_value("Retry-After") == "1");
  r = cdn.Get(target.c_str());
  REQUIRE(r);
  CHECK(r->status == 200);

  // n = -1: every request until reset.
  s.fail_next(-1, 503, 2);
  for (int i = 0; i < 4; ++i) {
    r = hub.Get("/org/small/resolve/main/config.json");
    REQUIRE(r);
    CHECK(r->status == 503);
  }
  s.reset_switches();
  r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 200);

  auto log = s.log();
  REQUIRE(log.size() == 12);
  CHECK(log[0].fault == "fail");
  CHECK(log[0].retry_after == "7");
  CHECK(log[2].fault.empty());
  CHECK(log[3].retry_after == "\"resolvers\";r=0;t=42");
  CHECK(log[4].status == 302);
  CHECK(log[5].status == 503);
  CHECK(log[5].kind == "cdn");
}

TEST_CASE("drop_after closes the connection after k body bytes", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  s.drop_after(1000);

  auto raw = raw_request(s.port(), raw_get(host_of(s, true), target));
  CHECK(raw.closed);
  CHECK(header_value(raw.headers(), "Content-Length") == std::to_string(content.size()));
  CHECK(raw.body() == content.substr(0, 1000));

  // Only once (n = 1): the next request is whole.
  auto cdn = f.cdn();
  auto r = cdn.Get(target.c_str());
  REQUIRE(r);
  CHECK(r->body == content);

  // The httplib client sees a read error.
  s.drop_after(0);
  r = cdn.Get(target.c_str());
  CHECK_FALSE(r);

  auto log = s.log();
  REQUIRE(log.size() == 4);
  CHECK(log[1].dropped);
  CHECK(log[1].fault == "drop");
  CHECK(log[1].body_bytes == 1000);
  CHECK(log[1].content_length == static_cast<std::int64_t>(content.size()));
  CHECK_FALSE(log[2].dropped);
  CHECK(log[3].dropped);
  CHECK(log[3].body_bytes == 0);
}

TEST_CASE("drop_after for a path pattern, on every matching request", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  s.drop_after(10, -1, "model-00001");
  const std::string t1 = f.cdn_target(kSharded, kShard1);
  const std::string t2 = f.cdn_target(kSharded, kShard2);
  for (int i = 0; i < 3; ++i) {
    auto raw = raw_request(s.port(), raw_get(host_of(s, true), t1, {"Range: bytes=0-99"}));
    CHECK(raw.closed);
    CHECK(raw.body().size() == 10);
  }
  auto cdn = f.cdn();
  auto r = cdn.Get(t2.c_str(), {{"Range", "bytes=0-99"}});
  REQUIRE(r);
  CHECK(r->body.size() == 100);
  auto log = s.log();
  REQUIRE(log.size() == 6);
  CHECK(log[0].status == 302);  // the redirect itself is never cut
  CHECK_FALSE(log[0].dropped);
  for (int i = 2; i < 5; ++i) {
    CHECK(log[i].dropped);
    CHECK(log[i].body_bytes == 10);
  }
  CHECK_FALSE(log[5].dropped);
}

TEST_CASE("stall_after sends k bytes, then stalls", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  s.stall_after(500, 1, "", 400);
  auto raw = raw_request(s.port(), raw_get(host_of(s, true), target));
  CHECK(raw.closed);
  CHECK(raw.body().size() == 500);
  CHECK(raw.elapsed_ms >= 400);
  auto log = s.log();
  REQUIRE(log.size() == 2);
  CHECK(log[1].fault == "stall");
  CHECK(log[1].dropped);
  CHECK(log[1].body_bytes == 500);
  CHECK(log[1].end_ms - log[1].start_ms >= 399);
}

TEST_CASE("a stall until stop() ends when the server stops", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  s.stall_after(100, 1);  // forever
  RawResult raw;
  std::thread client([&] {
    raw = raw_request(s.port(), raw_get(host_of(s, true), target), std::chrono::seconds(20));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A second, idle keep-alive connection must not hold stop() either.
  auto idle = f.hub();
  REQUIRE(idle.Get("/org/small/resolve/main/config.json"));
  auto t0 = std::chrono::steady_clock::now();
  s.stop();
  CHECK(ms_since(t0) < 2000);
  client.join();
  CHECK(raw.closed);
  CHECK(raw.body().size() == 100);
  CHECK(raw.elapsed_ms < 5000);
  CHECK_FALSE(s.running());
  auto log = s.log();
  REQUIRE(log.size() == 3);
  CHECK(find(log, "/cdn/")[0].dropped);
}

TEST_CASE("wrong_content_range shifts the Content-Range of 206 answers", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string size = std::to_string(content.size());
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  s.wrong_content_range(1);
  auto cdn = f.cdn();
  auto r = cdn.Get(target.c_str());  // a 200 is not touched and does not count
  REQUIRE(r);
  CHECK(r->status == 200);
  r = cdn.Get(target.c_str(), {{"Range", "bytes=10-19"}});
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->get_header_value("Content-Range") == "bytes 11-20/" + size);
  CHECK(r->body == content.substr(10, 10));
  r = cdn.Get(target.c_str(), {{"Range", "bytes=10-19"}});
  REQUIRE(r);
  CHECK(r->get_header_value("Content-Range") == "bytes 10-19/" + size);
  s.wrong_content_range(1, "", -1);
  r = cdn.Get(target.c_str(), {{"Range", "bytes=10-19"}});
  REQUIRE(r);
  CHECK(r->get_header_value("Content-Range") == "bytes 9-18/" + size);
  auto log = s.log();
  REQUIRE(log.size() == 5);
  CHECK(log[2].fault == "wrong_content_range");
  CHECK(log[2].content_range == "bytes 11-20/" + size);
  CHECK(log[3].fault.empty());
}

TEST_CASE("overlong_body sends more than declared, in each framing", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string size = std::to_string(content.size());
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  const auto get = [&] {
    return raw_request(s.port(), raw_get(host_of(s, true), target, {"Range: bytes=0-9"}));
  };

  SECTION("Content-Length") {
    s.overlong_body(5, 1, "", OverlongMode::ContentLength);
    auto raw = get();
    CHECK(raw.closed);
    CHECK(header_value(raw.headers(), "Content-Length") == "10");
    CHECK(header_value(raw.headers(), "Content-Range") == "bytes 0-9/" + size);
    CHECK(raw.body() == content.substr(0, 15));
  }
  SECTION("chunked") {
    s.overlong_body(5, 1, "", OverlongMode::Chunked);
    auto raw = raw_request(
        s.port(), raw_get(host_of(s, true), target, {"Range: bytes=0-9", "Connection: close"}));
    CHECK(header_value(raw.headers(), "Transfer-Encoding") == "chunked");
    CHECK(header_value(raw.headers(), "Content-Length").empty());
    CHECK(header_value(raw.headers(), "Content-Range") == "bytes 0-9/" + size);
    CHECK(raw.body() == "f\r\n" + content.substr(0, 15) + "\r\n0\r\n\r\n");
  }
  SECTION("close-delimited, past the end of the file") {
    s.overlong_body(5, 1, "", OverlongMode::CloseDelimited);
    auto raw = raw_request(s.port(), raw_get(host_of(s, true), target, {"Range: bytes=-3"}));
    CHECK(raw.closed);
    CHECK(header_value(raw.headers(), "Content-Length").empty());
    CHECK(raw.body() == content.substr(content.size() - 3) + "XXXXX");
  }
  auto log = s.log();
  REQUIRE(log.size() == 2);
  CHECK(log[1].fault == "overlong");
  CHECK_FALSE(log[1].dropped);
  CHECK((log[1].body_bytes == 15 || log[1].body_bytes == 8));
}

TEST_CASE("change_etag_after: the blob changes after n CDN requests", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string sha = sha256_hex(content);
  const std::string etag = "\"" + sha + "\"";
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  s.change_etag_after(2);
  auto cdn = f.cdn();
  httplib::Headers h{{"Range", "bytes=0-99"}, {"If-Match", etag}};
  for (int i = 0; i < 2; ++i) {
    auto r = cdn.Get(target.c_str(), h);
    REQUIRE(r);
    CHECK(r->status == 206);
    CHECK(r->get_header_value("ETag") == etag);
  }
  auto r = cdn.Get(target.c_str(), h);
  REQUIRE(r);
  CHECK(r->status == 412);
  CHECK(r->get_header_value("ETag") == HubServer::changed_etag(sha));
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-99"}});
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->get_header_value("ETag") == HubServer::changed_etag(sha));
  REQUIRE(r->body.size() == 100);
  CHECK(r->body != content.substr(0, 100));
  CHECK(static_cast<unsigned char>(r->body[0]) ==
        (static_cast<unsigned char>(content[0]) ^ HubServer::kChangedXor));
  // The Hub still names the old sha256.
  auto hub = f.hub();
  auto res = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(res);
  CHECK(res->get_header_value("X-Linked-Etag") == etag);

  s.change_etag_after(-1);
  r = cdn.Get(target.c_str(), h);
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->body == content.substr(0, 100));

  auto log = s.log();
  REQUIRE(log.size() == 7);
  CHECK(log[2].fault.empty());
  CHECK(log[3].status == 412);
  CHECK(log[3].fault == "etag_changed");
  CHECK(log[3].if_match == etag);
}

TEST_CASE("hostile_commit: every X-Repo-Commit is the value given; the revision still resolves", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string real = s.commit(kSmall);
  REQUIRE(real.size() == 40);
  s.set_hostile_commit("../../../../tmp/x");
  auto hub = f.hub();
  auto lfs = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(lfs);
  CHECK(lfs->status == 302);
  CHECK(lfs->get_header_value("X-Repo-Commit") == "../../../../tmp/x");
  auto small = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(small);
  CHECK(small->status == 200);
  CHECK(small->get_header_value("X-Repo-Commit") == "../../../../tmp/x");
  auto api = hub.Get("/api/models/org/small");
  REQUIRE(api);
  CHECK(api->get_header_value("X-Repo-Commit") == "../../../../tmp/x");
  CHECK(api->body.find(real) != std::string::npos);  // the body still names the real commit
  auto log = s.log();
  REQUIRE(log.size() == 3);
  for (const auto& rec : log) CHECK(rec.fault == "hostile_commit");
  // Through /_admin/set, percent-encoded; "" turns it off.
  auto admin = hub.Get("/_admin/set?hostile_commit=abc%2Fdef");
  REQUIRE(admin);
  CHECK(admin->status == 200);
  CHECK(hub.Get("/org/small/resolve/main/config.json")->get_header_value("X-Repo-Commit") == "abc/def");
  s.set_hostile_commit("");
  CHECK(hub.Get("/org/small/resolve/main/config.json")->get_header_value("X-Repo-Commit") == real);
}

TEST_CASE("linked_etag: matching LFS files claim another sha256 while serving their own bytes", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string own = sha256_hex(read_file(f.root.file(kSharded, kShard1)));
  const std::string claimed(64, 'a');
  s.set_linked_etag(claimed, kShard1);
  auto hub = f.hub();
  auto lie = hub.Get(("/" + std::string(kSharded) + "/resolve/main/" + kShard1).c_str());
  REQUIRE(lie);
  CHECK(lie->status == 302);
  CHECK(lie->get_header_value("X-Linked-Etag") == "\"" + claimed + "\"");
  CHECK(lie->get_header_value("Location").find("/cdn/" + own) != std::string::npos);  // real bytes
  auto honest = hub.Get(("/" + std::string(kSharded) + "/resolve/main/" + kShard2).c_str());
  REQUIRE(honest);
  CHECK(honest->get_header_value("X-Linked-Etag") == "\"" + sha256_hex(read_file(f.root.file(kSharded, kShard2))) + "\"");
  auto log = s.log();
  REQUIRE(log.size() == 2);
  CHECK(log[0].fault == "linked_etag");
  CHECK(log[1].fault.empty());
  REQUIRE(hub.Get(("/_admin/set?linked_etag=" + std::string(64, 'b') + "&match=" + kShard2).c_str()));
  auto again = hub.Get(("/" + std::string(kSharded) + "/resolve/main/" + kShard2).c_str());
  REQUIRE(again);
  CHECK(again->get_header_value("X-Linked-Etag") == "\"" + std::string(64, 'b') + "\"");
}

TEST_CASE("cdn_etag: the CDN sends another ETag (Xet-like, 64 hex that is not the sha256) and checks If-Match "
          "against it", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string xet(64, 'c');
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  s.set_cdn_etag(xet);
  auto cdn = f.cdn();
  auto r = cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}, {"If-Match", "\"" + xet + "\""}});
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->get_header_value("ETag") == "\"" + xet + "\"");
  CHECK(r->body == content.substr(0, 10));
  auto stale = cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}, {"If-Match", "\"" + sha256_hex(content) + "\""}});
  REQUIRE(stale);
  CHECK(stale->status == 412);
  // The Hub still names the real sha256 in X-Linked-Etag.
  auto hub = f.hub();
  auto res = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(res);
  CHECK(res->get_header_value("X-Linked-Etag") == "\"" + sha256_hex(content) + "\"");
  auto log = s.log();
  CHECK(log[log.size() - 2].fault == "cdn_etag");  // the second CDN request
  REQUIRE(cdn.Get("/_admin/set?cdn_etag="));
  auto off = cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}});
  REQUIRE(off);
  CHECK(off->get_header_value("ETag") == "\"" + sha256_hex(content) + "\"");
}

TEST_CASE("gated repos need the token; the token is logged as a hash", "[switches]") {
  Options opt;
  opt.token = "hf_secret";
  opt.gated_repos = {kSmall};
  Fixture f(opt);
  auto& s = *f.server;
  auto hub = f.hub();
  auto r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 403);
  CHECK(r->get_header_value("X-Error-Code") == "GatedRepo");
  r = hub.Get("/org/small/resolve/main/config.json", {{"Authorization", "Bearer wrong"}});
  REQUIRE(r);
  CHECK(r->status == 403);
  r = hub.Get("/org/small/resolve/main/model.safetensors", {{"Authorization", "Bearer hf_secret"}});
  REQUIRE(r);
  CHECK(r->status == 302);
  // The CDN URL is signed: no token needed there.
  auto cdn = f.cdn();
  auto b = cdn.Get(target_of(r->get_header_value("Location")).c_str());
  REQUIRE(b);
  CHECK(b->status == 200);
  // Other repos are open.
  r = hub.Get("/org/llama-tiny-sharded/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 200);
  // At run time.
  s.set_gated_repos({});
  r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 200);

  auto log = s.log();
  REQUIRE(log.size() == 6);
  CHECK_FALSE(log[0].authorization);
  CHECK(log[0].authorization_sha256.empty());
  CHECK(log[0].error_code == "GatedRepo");
  CHECK(log[1].authorization);
  CHECK(log[1].authorization_sha256 == sha256_hex("Bearer wrong"));
  CHECK(log[1].authorization_value.empty());  // values only on request
  CHECK(log[2].authorization_sha256 == sha256_hex("Bearer hf_secret"));
  CHECK_FALSE(log[3].authorization);  // the CDN request
}

TEST_CASE("private repos answer 401 without the token", "[switches]") {
  Options opt;
  opt.log_authorization_values = true;
  Fixture f(opt);
  auto& s = *f.server;
  s.set_token("tok");
  s.set_private_repos({kDataset});
  auto hub = f.hub();
  auto r = hub.Get("/datasets/org/ds/resolve/main/README.md");
  REQUIRE(r);
  CHECK(r->status == 401);
  r = hub.Get("/datasets/org/ds/resolve/main/README.md", {{"Authorization", "Bearer nope"}});
  REQUIRE(r);
  CHECK(r->status == 401);
  r = hub.Get("/datasets/org/ds/resolve/main/README.md", {{"Authorization", "Bearer tok"}});
  REQUIRE(r);
  CHECK(r->status == 200);
  auto a = hub.Get("/api/datasets/org/ds");
  REQUIRE(a);
  CHECK(a->status == 401);
  auto log = s.log();
  REQUIRE(log.size() == 4);
  CHECK(log[1].authorization_value == "Bearer nope");
  CHECK(log[2].authorization_value == "Bearer tok");
}

TEST_CASE("signed CDN URLs expire after cdn_url_ttl_ms", "[switches]") {
  Options opt;
  opt.cdn_url_ttl_ms = 300;
  Fixture f(opt);
  auto& s = *f.server;
  std::string target = f.cdn_target(kSmall, "model.safetensors");
  auto cdn = f.cdn();
  auto r = cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}});
  REQUIRE(r);
  CHECK(r->status == 206);
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}});
  REQUIRE(r);
  CHECK(r->status == 403);
  CHECK(r->body.find("expired") != std::string::npos);
  // Resolving again gives a fresh URL.
  target = f.cdn_target(kSmall, "model.safetensors");
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}});
  REQUIRE(r);
  CHECK(r->status == 206);
  auto log = s.log();
  REQUIRE(log.size() == 5);
  CHECK(log[2].fault == "expired");
  CHECK(log[2].status == 403);
  s.set_cdn_url_ttl_ms(0);
}

TEST_CASE("enforce_hosts: Hub routes on the Hub name, blobs on the CDN name", "[switches]") {
  Options opt;
  opt.enforce_hosts = true;
  Fixture f(opt);
  auto hub = f.hub();
  auto cdn = f.cdn();
  auto r = cdn.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->status == 421);
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  r = hub.Get(target.c_str());
  REQUIRE(r);
  CHECK(r->status == 421);
  r = cdn.Get(target.c_str());
  REQUIRE(r);
  CHECK(r->status == 200);
  auto log = f.server->log();
  REQUIRE(log.size() == 4);
  CHECK(log[0].fault == "misdirected");
}

TEST_CASE("switches are off by default and reset_switches restores the options", "[switches]") {
  Options opt;
  opt.latency_ms = 50;
  Fixture f(opt);
  auto& s = *f.server;
  s.set_latency_ms(0);
  s.fail_next(-1);
  s.drop_after(1, -1);
  s.stall_after(1, -1);
  s.wrong_content_range(-1);
  s.overlong_body(1, -1);
  s.set_ignore_range(true);
  s.change_etag_after(0);
  s.set_hostile_commit("x");
  s.set_linked_etag(std::string(64, 'a'));
  s.set_cdn_etag(std::string(64, 'b'));
  s.reset_switches();
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  auto cdn = f.cdn();
  auto t0 = std::chrono::steady_clock::now();
  auto r = cdn.Get(target.c_str(), {{"Range", "bytes=5-9"}});
  REQUIRE(r);
  CHECK(ms_since(t0) >= 50);
  CHECK(r->status == 206);
  CHECK(r->body == content.substr(5, 5));
  CHECK(r->get_header_value("ETag") == "\"" + sha256_hex(content) + "\"");
  for (const auto& rec : s.log()) CHECK(rec.fault.empty());
}

TEST_CASE("drip trickles a body: k bytes per interval (also through /_admin/set)", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  s.drip(4, 100, 1, "/cdn/");
  auto t0 = std::chrono::steady_clock::now();
  auto cdn = f.cdn();
  auto r = cdn.Get(target.c_str(), {{"Range", "bytes=0-19"}});
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->body == content.substr(0, 20));
  CHECK(ms_since(t0) >= 400);  // 5 pieces of 4 bytes, 4 pauses of 100 ms
  // n = 1: the next one is quick.
  t0 = std::chrono::steady_clock::now();
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-19"}});
  REQUIRE(r);
  CHECK(ms_since(t0) < 300);
  auto hub = f.hub();
  REQUIRE(hub.Get("/_admin/set?drip=10&interval_ms=50&n=1"));
  t0 = std::chrono::steady_clock::now();
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-29"}});
  REQUIRE(r);
  CHECK(r->body == content.substr(0, 30));
  CHECK(ms_since(t0) >= 100);
  auto log = s.log();
  REQUIRE(log.size() == 4);
  CHECK(log[1].fault == "drip");
  CHECK(log[1].body_bytes == 20);
  CHECK_FALSE(log[1].dropped);
  CHECK(log[1].end_ms - log[1].start_ms >= 399);
  CHECK(log[2].fault.empty());
  CHECK(log[3].fault == "drip");
}

TEST_CASE("set_cdn_base points CDN redirects elsewhere, e.g. plain http behind a TLS Hub", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  s.set_cdn_base("http://127.0.0.1:1");
  auto hub = f.hub();
  auto r = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(r);
  CHECK(r->status == 302);
  CHECK_THAT(r->get_header_value("Location"), Catch::StartsWith("http://127.0.0.1:1/cdn/"));
  REQUIRE(hub.Get("/_admin/set?cdn_base="));  // back to the server's own CDN host
  r = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(r);
  CHECK_THAT(r->get_header_value("Location"),
             Catch::StartsWith("http://127.0.0.1:" + std::to_string(s.port()) + "/cdn/"));
  REQUIRE(hub.Get("/_admin/set?cdn_base=http%3A%2F%2Fexample.invalid%3A9"));
  r = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(r);
  CHECK_THAT(r->get_header_value("Location"), Catch::StartsWith("http://example.invalid:9/cdn/"));
  auto log = s.log();
  REQUIRE(log.size() == 3);
  CHECK_THAT(log[0].location, Catch::StartsWith("http://127.0.0.1:1/cdn/"));
}

TEST_CASE("set_header replaces a response header with a hostile value on matching responses", "[switches]") {
  Fixture f;
  auto& s = *f.server;
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  const std::string hostile = "bytes \x1b[2J\x07 0-9/100000";
  s.set_header("Content-Range", hostile, 1, "/cdn/");
  auto raw = raw_request(s.port(), raw_get(host_of(s, true), target, {"Range: bytes=0-9"}));
  CHECK(header_value(raw.headers(), "Content-Range") == hostile);
  CHECK(raw.headers().find("Content-Range", raw.headers().find("Content-Range") + 1) == std::string::npos);
  auto hub = f.hub();
  REQUIRE(hub.Get("/_admin/set?header=X-Repo-Commit&value=not-a-commit&n=1&match=config.json"));
  auto r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->get_header_value("X-Repo-Commit") == "not-a-commit");
  r = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(r);
  CHECK(r->get_header_value("X-Repo-Commit") != "not-a-commit");
  auto log = s.log();
  REQUIRE(log.size() == 4);
  CHECK(log[1].fault == "header");
  CHECK(log[1].content_range == hostile);
  CHECK(log[2].fault == "header");
  CHECK(log[3].fault.empty());
}

// ---------------------------------------------------------------- the real Hub (issue 9)

namespace {

// r and t of a `RateLimit: "resolvers";r=R;t=T` value ({-1, -1} if it is not of that shape).
std::pair<int, int> rate_rt(const std::string& v) {
  int r = -1, t = -1;
  if (std::sscanf(v.c_str(), "\"resolvers\";r=%d;t=%d", &r, &t) != 2) return {-1, -1};
  return {r, t};
}

std::string shard_path(const std::string& shard) {
  return "/" + std::string(kSharded) + "/resolve/main/" + shard;
}

}  // namespace

TEST_CASE("lfs_without_etag: an LFS 302 has Location, X-Repo-Commit, X-Linked-Etag, X-Linked-Size "
          "and no ETag",
          "[switches][real_hub]") {
  Options opt;
  opt.lfs_without_etag = true;
  Fixture f(opt);
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSharded, kShard1));
  const std::string sha = sha256_hex(content);
  auto hub = f.hub();
  auto r = hub.Get(shard_path(kShard1).c_str());
  REQUIRE(r);
  CHECK(r->status == 302);
  CHECK_THAT(r->get_header_value("Location"),
             Catch::StartsWith(s.cdn_endpoint() + "/cdn/" + sha + "?expires="));
  CHECK(r->get_header_value("X-Repo-Commit") == default_commit(kSharded));
  CHECK(r->get_header_value("X-Linked-Etag") == "\"" + sha + "\"");
  CHECK(r->get_header_value("X-Linked-Size") == std::to_string(content.size()));
  CHECK_FALSE(r->has_header("ETag"));
  // Small files keep their git-blob ETag.
  auto small = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(small);
  CHECK(small->status == 200);
  CHECK(small->get_header_value("ETag") == "\"" + git_blob_sha1(read_file(f.root.file(kSmall, "config.json"))) + "\"");
  // Off at run time (the pointer's git id again), on through /_admin/set.
  s.set_lfs_without_etag(false);
  r = hub.Get(shard_path(kShard1).c_str());
  REQUIRE(r);
  CHECK(r->get_header_value("ETag").size() == 42);
  REQUIRE(hub.Get("/_admin/set?lfs_without_etag=1")->status == 200);
  r = hub.Get(shard_path(kShard1).c_str());
  REQUIRE(r);
  CHECK_FALSE(r->has_header("ETag"));
  auto log = s.log();
  REQUIRE(log.size() == 4);
  CHECK(log[0].status == 302);
  CHECK(log[0].etag.empty());
  CHECK(log[0].fault.empty());
  CHECK(log[2].etag.size() == 42);
  CHECK(log[3].etag.empty());
}

TEST_CASE("xet_etags: the CDN's 200/206 carry a 64-hex ETag that is not the sha256; If-Match is "
          "checked against it",
          "[switches][real_hub]") {
  Fixture f;
  auto& s = *f.server;
  s.set_xet_etags(true);
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string sha = sha256_hex(content);
  const std::string xet = HubServer::xet_etag(sha);
  CHECK(xet == "\"" + sha256_hex("xet:" + sha) + "\"");
  CHECK(xet.size() == 66);
  CHECK(xet != "\"" + sha + "\"");
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  auto cdn = f.cdn();
  auto r = cdn.Get(target.c_str());
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("ETag") == xet);
  CHECK(r->body == content);
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}, {"If-Match", xet}});
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->get_header_value("ETag") == xet);
  CHECK(r->get_header_value("Content-Range") == "bytes 0-9/" + std::to_string(content.size()));
  CHECK(r->body == content.substr(0, 10));
  // The sha256 is no CDN ETag: If-Match with it fails.
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}, {"If-Match", "\"" + sha + "\""}});
  REQUIRE(r);
  CHECK(r->status == 412);
  CHECK(r->get_header_value("ETag") == xet);
  // The Hub still names the sha256 in X-Linked-Etag.
  auto hub = f.hub();
  auto res = hub.Get("/org/small/resolve/main/model.safetensors");
  REQUIRE(res);
  CHECK(res->get_header_value("X-Linked-Etag") == "\"" + sha + "\"");
  auto log = s.log();
  REQUIRE(log.size() == 5);
  CHECK(log[1].etag == xet);
  CHECK(log[2].etag == xet);
  CHECK(log[2].if_match == xet);
  CHECK(log[3].status == 412);
  for (const auto& rec : log) CHECK(rec.fault.empty());
  REQUIRE(hub.Get("/_admin/set?xet_etags=0")->status == 200);
  r = cdn.Get(target.c_str(), {{"Range", "bytes=0-9"}});
  REQUIRE(r);
  CHECK(r->get_header_value("ETag") == "\"" + sha + "\"");
}

TEST_CASE("rate limit: every resolve response carries RateLimit and RateLimit-Policy; past the quota "
          "a 429 without Retry-After; a fixed window; CDN requests do not count",
          "[switches][real_hub]") {
  Fixture f;
  auto& s = *f.server;
  s.set_resolve_cache(true);
  s.set_rate_limit(3, 2);
  const std::string policy = "\"fixed window\";\"resolvers\";q=3;w=2";
  auto hub = f.hub();
  auto cdn = f.cdn();
  auto lfs = hub.Get(shard_path(kShard1).c_str());  // a 302
  REQUIRE(lfs);
  CHECK(lfs->status == 302);
  auto small = hub.Get("/org/small/resolve/main/config.json");  // a 307
  REQUIRE(small);
  CHECK(small->status == 307);
  auto missing = hub.Get("/org/small/resolve/main/missing.json");  // an error
  REQUIRE(missing);
  CHECK(missing->status == 404);
  int r = 2;
  for (const auto* res : {&lfs, &small, &missing}) {
    auto [rr, t] = rate_rt((*res)->get_header_value("RateLimit"));
    CHECK(rr == r--);
    CHECK((t >= 1 && t <= 2));
    CHECK((*res)->get_header_value("RateLimit-Policy") == policy);
  }
  // Not counted: the CDN, the resolve cache, the API.
  auto blob = cdn.Get(target_of(lfs->get_header_value("Location")).c_str(), {{"Range", "bytes=0-9"}});
  REQUIRE(blob);
  CHECK(blob->status == 206);
  CHECK_FALSE(blob->has_header("RateLimit"));
  auto cached = hub.Get(small->get_header_value("Location").c_str());
  REQUIRE(cached);
  CHECK(cached->status == 200);
  CHECK_FALSE(cached->has_header("RateLimit"));
  auto api = hub.Get("/api/models/org/small");
  REQUIRE(api);
  CHECK_FALSE(api->has_header("RateLimit"));
  // The fourth resolve of the window.
  auto limited = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(limited);
  CHECK(limited->status == 429);
  auto [r0, left] = rate_rt(limited->get_header_value("RateLimit"));
  CHECK(r0 == 0);
  CHECK((left >= 1 && left <= 2));
  CHECK(limited->get_header_value("RateLimit-Policy") == policy);
  CHECK_FALSE(limited->has_header("Retry-After"));
  CHECK_FALSE(limited->has_header("X-Error-Code"));
  CHECK_FALSE(limited->get_header_value("X-Error-Message").empty());
  CHECK(limited->get_header_value("Content-Type") == "application/json");
  // After the window: a fresh quota.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000 * left + 150));
  auto again = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(again);
  CHECK(again->status == 307);
  CHECK(rate_rt(again->get_header_value("RateLimit")).first == 2);

  auto log = s.log();
  REQUIRE(log.size() == 8);
  CHECK(log[0].retry_after == lfs->get_header_value("RateLimit"));  // the log shows RateLimit
  CHECK(log[6].status == 429);
  CHECK(log[6].kind == "resolve");
  CHECK(log[6].fault == "ratelimit");
  CHECK(log[6].error_code.empty());
  CHECK(log[6].retry_after == "\"resolvers\";r=0;t=" + std::to_string(left));
  CHECK(log[7].fault.empty());

  // Off; then a quota of 1 per second through /_admin/set.
  s.set_rate_limit(0);
  CHECK_FALSE(hub.Get("/org/small/resolve/main/config.json")->has_header("RateLimit"));
  REQUIRE(hub.Get("/_admin/set?rate_limit=1&window_s=1")->status == 200);
  CHECK(rate_rt(hub.Get("/org/small/resolve/main/config.json")->get_header_value("RateLimit")).first == 0);
  auto second = hub.Get("/org/small/resolve/main/config.json");
  REQUIRE(second);
  CHECK(second->status == 429);
  CHECK(second->get_header_value("RateLimit") == "\"resolvers\";r=0;t=1");
  CHECK(second->get_header_value("RateLimit-Policy") == "\"fixed window\";\"resolvers\";q=1;w=1");
}

TEST_CASE("cdn_fault: valid CDN requests answered 416 (Content-Range with the real size), 400, or 403 "
          "SignatureError, without the URL being expired",
          "[switches][real_hub]") {
  Fixture f;
  auto& s = *f.server;
  const std::string content = read_file(f.root.file(kSmall, "model.safetensors"));
  const std::string size = std::to_string(content.size());
  const std::string target = f.cdn_target(kSmall, "model.safetensors");
  auto cdn = f.cdn();
  const httplib::Headers range{{"Range", "bytes=0-9"}};
  s.cdn_fault(416);
  auto r = cdn.Get(target.c_str(), range);
  REQUIRE(r);
  CHECK(r->status == 416);
  CHECK(r->get_header_value("Content-Range") == "bytes */" + size);
  CHECK(r->body.find("<Code>InvalidRange</Code>") != std::string::npos);
  r = cdn.Get(target.c_str(), range);  // n = 1: the same URL works again
  REQUIRE(r);
  CHECK(r->status == 206);
  CHECK(r->body == content.substr(0, 10));

  s.cdn_fault(400, 2, "model.safetensors");
  auto hub = f.hub();
  CHECK(hub.Get("/org/small/resolve/main/model.safetensors")->status == 302);  // the Hub is fine
  for (int i = 0; i < 2; ++i) {
    r = cdn.Get(target.c_str(), range);
    REQUIRE(r);
    CHECK(r->status == 400);
  }
  CHECK(cdn.Get(target.c_str(), range)->status == 206);

  s.cdn_fault(403);
  r = cdn.Get(target.c_str(), range);
  REQUIRE(r);
  CHECK(r->status == 403);
  CHECK(r->body.find("SignatureError") != std::string::npos);
  CHECK(r->body.find("expired") == std::string::npos);
  CHECK(cdn.Get(target.c_str(), range)->status == 206);

  // Through /_admin/set; status 0 turns it off; other statuses are refused.
  REQUIRE(hub.Get("/_admin/set?cdn_fault=416&n=-1&match=/cdn/")->status == 200);
  CHECK(cdn.Get(target.c_str(), range)->status == 416);
  CHECK(cdn.Get(target.c_str(), range)->status == 416);
  s.cdn_fault(0);
  CHECK(cdn.Get(target.c_str(), range)->status == 206);
  CHECK_THROWS_AS(s.cdn_fault(500), std::invalid_argument);
  CHECK(hub.Get("/_admin/set?cdn_fault=404")->status == 400);
  Options bad;
  bad.cdn_fault_status = 502;
  CHECK_THROWS_AS(HubServer(bad), std::invalid_argument);

  auto log = s.log();
  REQUIRE(log.size() == 12);
  CHECK(log[1].kind == "cdn");
  CHECK(log[1].repo == kSmall);
  CHECK(log[1].status == 416);
  CHECK(log[1].fault == "cdn_fault");
  CHECK(log[1].content_range == "bytes */" + size);
  CHECK(log[2].fault.empty());
  CHECK(log[3].fault.empty());  // the resolve
  CHECK(log[4].fault == "cdn_fault");
  CHECK(log[4].status == 400);
  CHECK(log[7].status == 403);
  CHECK(log[7].fault == "cdn_fault");
}

TEST_CASE("disabled repos answer 403 'Access to this resource is disabled.' without X-Error-Code",
          "[switches][real_hub]") {
  Options opt;
  opt.disabled_repos = {kSmall};
  Fixture f(opt);
  auto& s = *f.server;
  auto hub = f.hub();
  for (const char* target : {"/org/small/resolve/main/config.json", "/api/models/org/small"}) {
    auto r = hub.Get(target);
    REQUIRE(r);
    CHECK(r->status == 403);
    CHECK_FALSE(r->has_header("X-Error-Code"));
    CHECK(r->get_header_value("X-Error-Message") == "Access to this resource is disabled.");
    CHECK(r->body == "{\"error\":\"Access to this resource is disabled.\"}");
  }
  CHECK(hub.Get("/org/llama-tiny-sharded/resolve/main/config.json")->status == 200);
  REQUIRE(hub.Get("/_admin/set?disabled=org%2Fllama-tiny-sharded,datasets%2Forg%2Fds")->status == 200);
  CHECK(hub.Get("/org/llama-tiny-sharded/resolve/main/config.json")->status == 403);
  CHECK(hub.Get("/datasets/org/ds/resolve/main/README.md")->status == 403);
  CHECK(hub.Get("/org/small/resolve/main/config.json")->status == 200);
  s.set_disabled_repos({});
  CHECK(hub.Get("/datasets/org/ds/resolve/main/README.md")->status == 200);
  auto log = s.log();
  REQUIRE(log.size() == 7);
  CHECK(log[0].status == 403);
  CHECK(log[0].error_code.empty());
}

TEST_CASE("real_hub turns on every behaviour; set_real_hub and reset_switches", "[switches][real_hub]") {
  Options opt;
  opt.real_hub = true;
  Fixture f(opt);
  auto& s = *f.server;
  const std::string sha = sha256_hex(read_file(f.root.file(kSmall, "model.safetensors")));
  auto hub = f.hub();
  auto cdn = f.cdn();
  const auto check_on = [&] {
    auto lfs = hub.Get("/org/small/resolve/main/model.safetensors");
    REQUIRE(lfs);
    CHECK(lfs->status == 302);
    CHECK_FALSE(lfs->has_header("ETag"));
    CHECK(rate_rt(lfs->get_header_value("RateLimit")).first >= 2990);
    CHECK(lfs->get_header_value("RateLimit-Policy") == "\"fixed window\";\"resolvers\";q=3000;w=300");
    auto blob = cdn.Get(target_of(lfs->get_header_value("Location")).c_str(), {{"Range", "bytes=0-0"}});
    REQUIRE(blob);
    CHECK(blob->get_header_value("ETag") == HubServer::xet_etag(sha));
    auto small = hub.Get("/org/small/resolve/main/config.json");
    REQUIRE(small);
    CHECK(small->status == 307);
    CHECK_THAT(small->get_header_value("Location"), Catch::StartsWith("/api/resolve-cache/models/org/small/"));
    auto unknown = hub.Get("/org/nope/resolve/main/config.json");
    REQUIRE(unknown);
    CHECK(unknown->status == 401);
    CHECK(unknown->get_header_value("X-Error-Code") == "RepoNotFound");
    auto bad = hub.Get("/org/small/resolve/main/config.json", {{"Authorization", "Bearer hf_bad"}});
    REQUIRE(bad);
    CHECK(bad->status == 401);
    CHECK(bad->get_header_value("X-Error-Message") == "Invalid credentials in Authorization header");
  };
  const auto check_off = [&] {
    auto lfs = hub.Get("/org/small/resolve/main/model.safetensors");
    REQUIRE(lfs);
    CHECK(lfs->get_header_value("ETag").size() == 42);
    CHECK_FALSE(lfs->has_header("RateLimit"));
    auto blob = cdn.Get(target_of(lfs->get_header_value("Location")).c_str(), {{"Range", "bytes=0-0"}});
    REQUIRE(blob);
    CHECK(blob->get_header_value("ETag") == "\"" + sha + "\"");
    CHECK(hub.Get("/org/small/resolve/main/config.json")->status == 200);
    CHECK(hub.Get("/org/nope/resolve/main/config.json")->status == 404);
    CHECK(hub.Get("/org/small/resolve/main/config.json", {{"Authorization", "Bearer hf_bad"}})->status == 200);
  };
  SECTION("from Options, off and on at run time") {
    check_on();
    s.set_real_hub(false);
    check_off();
    s.set_real_hub(true);
    check_on();
  }
  SECTION("through /_admin/set; reset_switches restores the Options") {
    REQUIRE(hub.Get("/_admin/set?real_hub=0")->status == 200);
    check_off();
    s.reset_switches();
    check_on();
  }
}
