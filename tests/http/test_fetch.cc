// SPDX-License-Identifier: Apache-2.0
// Partial load (fetch) against the in-process Hub-like server: what arrives in the cache and
// what the library serves, and, through the server's request log, which requests carried it
// (counts, Range headers, If-Match, hosts, Authorization). Faults of the server (drops, stalls,
// 429/503 storms, ignored Range, wrong Content-Range, a file that changes, expiring CDN URLs),
// cancellation, crash safety and sharing of the cache by two processes (the CLI binary), and a
// full disk (a small tmpfs; skipped when it cannot be mounted).
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hub_server.hpp"
#include "support/bytes.hpp"
#include "support/env.hpp"
#include "support/files.hpp"
#include "support/process.hpp"
#include "support/ranges.hpp"
#include "tensorfetch/tensorfetch.hpp"

namespace fs = std::filesystem;
using namespace tensorfetch;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;
using tftest::le64;
using tftest::pattern_bytes;
using tftest::read_file;
using tftest::sha256_hex;
using tftest::write_file;

namespace {

// ------------------------------------------------------------------ test data

constexpr const char* kRepo = "org/big";
constexpr const char* kFile = "model.safetensors";
constexpr const char* kToken = "tf-fetch-test-token";
constexpr std::uint64_t kWindow = 256 << 10;  // OpenOptions::header_window (default)
constexpr std::uint64_t kChunk = 64 << 10;
constexpr int kLayers = 24;
constexpr std::uint64_t kRows = 64, kCols = 512;  // layers.N.weight: F32 [64, 512] = 128 KiB

// org/big/model.safetensors: for every layer N (0..23), layers.N.bias F32 [512] then
// layers.N.weight F32 [64, 512], contiguous: 24 x 130 KiB, about 3.05 MiB; random-looking bytes.
const std::string& big_model() {
  static const std::string file = [] {
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}, {"source", "tensorfetch test_fetch"}};
    std::uint64_t pos = 0;
    for (int i = 0; i < kLayers; ++i) {
      const std::string p = "layers." + std::to_string(i) + ".";
      header[p + "bias"] = {{"dtype", "F32"}, {"shape", {kCols}}, {"data_offsets", {pos, pos + kCols * 4}}};
      pos += kCols * 4;
      header[p + "weight"] = {
          {"dtype", "F32"}, {"shape", {kRows, kCols}}, {"data_offsets", {pos, pos + kRows * kCols * 4}}};
      pos += kRows * kCols * 4;
    }
    std::string text = header.dump();
    while (text.size() % 8 != 0) text.push_back(' ');
    return le64(text.size()) + text + pattern_bytes(pos, 7);
  }();
  return file;
}

// The reference checkpoints, or an empty path (the tests that need them skip).
fs::path reference() { return tftest::reference_dir().value_or(fs::path()); }

// ------------------------------------------------------------------ ranges

using tftest::covered;
using tftest::describe;
using tftest::intersects;
using tftest::minus;
using tftest::normalized;
using tftest::parse_range;
using tftest::plan;
using tftest::range_header;
using tftest::Ranges;
using tftest::total;

// ------------------------------------------------------------------ cache inspection

struct Meta {
  bool exists = false;
  bool complete = false;
  Ranges extents;
};

Meta read_meta(const fs::path& cache, const std::string& id) {
  Meta m;
  const std::string text = tftest::try_read_file(cache / "blobs" / id / "meta.json").value_or("");
  if (text.empty()) return m;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return m;
  m.exists = true;
  m.complete = j.value("complete", false);
  for (const auto& e : j.at("extents")) m.extents.push_back({e.at(0).get<std::uint64_t>(), e.at(1).get<std::uint64_t>()});
  return m;
}

// Every committed extent of the blob holds exactly the source's bytes.
void check_extents_hold_source(const fs::path& cache, const std::string& id, const std::string& source) {
  const Meta m = read_meta(cache, id);
  REQUIRE(m.exists);
  const std::string data = read_file(cache / "blobs" / id / "data");
  REQUIRE(data.size() == source.size());
  for (const auto& e : m.extents) {
    INFO("extent [" << e.offset << ", " << e.end() << ")");
    REQUIRE(e.end() <= source.size());
    CHECK(data.compare(e.offset, e.length, source, e.offset, e.length) == 0);
  }
}

// ------------------------------------------------------------------ request log

std::vector<RequestRecord> of_kind(const std::vector<RequestRecord>& log, const std::string& kind) {
  std::vector<RequestRecord> out;
  for (const auto& r : log) {
    if (r.kind == kind) out.push_back(r);
  }
  return out;
}

// CDN requests of tensor data: every CDN request except the header window of an open
// (`bytes=0-(W-1)`) and the one-byte probe of a re-resolve (`bytes=0-0`).
std::vector<RequestRecord> data_requests(const std::vector<RequestRecord>& log) {
  std::vector<RequestRecord> out;
  for (const auto& r : log) {
    if (r.kind != "cdn") continue;
    if (r.range == range_header({0, kWindow}) || r.range == "bytes=0-0") continue;
    out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return out;
}

// Waits until the server's log stops growing (150 ms without a new record, at most 3 s): the
// record of a response the client hung up on is completed when the server notices.
void settle(const HubServer& server) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto n = server.request_count();
  auto since = start;
  while (Clock::now() - since < std::chrono::milliseconds(150) && Clock::now() - start < std::chrono::seconds(3)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (auto m = server.request_count(); m != n) {
      n = m;
      since = Clock::now();
    }
  }
}

// Rules every request must follow: GETs only; the token to the Hub host only, never to the CDN
// host; range requests of tensor data carry If-Match with the pinned CDN ETag.
void check_request_rules(const std::vector<RequestRecord>& log, const std::string& cdn_etag) {
  for (const auto& r : log) {
    INFO(r.to_json());
    CHECK(r.method == "GET");
    CHECK((r.kind == "resolve" || r.kind == "cdn"));
    if (r.kind == "cdn") {
      CHECK_FALSE(r.authorization);
      CHECK(r.host.starts_with("127.0.0.1:"));
    }
    if (r.kind == "resolve") {
      CHECK(r.authorization);
      CHECK(r.host.starts_with("localhost:"));
    }
  }
  for (const auto& r : data_requests(log)) {
    INFO(r.to_json());
    CHECK_FALSE(r.range.empty());
    CHECK(r.if_match == cdn_etag);
  }
}

// A re-run asks only for what is missing: no tensor request of `log` touches a byte of
// `committed` (what the cache held before it).
void check_nothing_asked_twice(const std::vector<RequestRecord>& log, const Ranges& committed) {
  for (const auto& r : data_requests(log)) {
    INFO(r.to_json());
    auto rr = parse_range(r.range);
    REQUIRE(rr);
    CHECK_FALSE(intersects(committed, *rr));
  }
}

// ------------------------------------------------------------------ processes

// The environment of a child CLI: ours, without Hub settings, with a cache and HF home of the
// test's own.
std::vector<std::string> child_env(const fs::path& cache, const fs::path& hf_home) {
  return tftest::environment_with({"HF_", "TENSORFETCH_CACHE=", "XDG_CACHE_HOME=", "HUGGINGFACE_"},
                                  {"TENSORFETCH_CACHE=" + cache.string(), "HF_HOME=" + hf_home.string(),
                                   "HF_HUB_CACHE=" + (hf_home / "hub").string(), std::string("HF_TOKEN=") + kToken});
}

// `tensorfetch ARGS` in the background, its stderr to `err_file`, stdin and stdout /dev/null.
tftest::Child spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, const fs::path& err_file) {
  return tftest::Child(tftest::required_env("TENSORFETCH_BIN"), args, {"", "", err_file.string()}, env);
}

// ------------------------------------------------------------------ fixture

// A Hub root with org/big (model.safetensors made above, config.json) and
// org/llama-tiny-sharded (the reference checkpoint: 3 shards, index, config.json), a server on
// it, and per test a fresh cache directory and a Hugging Face home without a hub cache.
struct Fixture {
  tftest::TempDir tmp{"tf-fetch"};
  fs::path root = tmp / "root";
  fs::path cache = tmp / "cache";
  fs::path hf_home = tmp / "hf-home";
  std::unique_ptr<HubServer> server;
  std::string etag;  // the CDN ETag of org/big/model.safetensors: "\"<sha256>\""
  std::string sha;      // sha256 of org/big/model.safetensors: its blob id once verified whole
  std::string blob_id;  // its blob id while partial: SHA256-<hash of this server's origin>

  explicit Fixture(int latency_ms = 0, std::int64_t cdn_url_ttl_ms = 0) {
    write_file(root / kRepo / kFile, big_model());
    write_file(root / kRepo / "config.json", "{\"model_type\": \"test\", \"layers\": 24}\n");
    if (!reference().empty()) tftest::copy_files(reference() / "llama-tiny-sharded", root / "org" / "llama-tiny-sharded");
    fs::create_directories(hf_home / "hub");
    testing::Options o;
    o.root = root;
    o.latency_ms = latency_ms;
    o.cdn_url_ttl_ms = cdn_url_ttl_ms;
    o.token = kToken;
    server = std::make_unique<HubServer>(o);
    server->start();
    sha = server->file_sha256(kRepo, kFile);
    blob_id = sha + "-" + sha256_hex("origin\n" + server->endpoint()).substr(0, 16);
    etag = "\"" + sha + "\"";
  }
  ~Fixture() { server->stop(); }

  OpenOptions open_options() const {
    OpenOptions o;
    o.endpoint = server->endpoint();
    o.token = std::string(kToken);
    o.cache_dir = cache.string();
    o.hf_hub_cache = (hf_home / "hub").string();
    o.retry_backoff_ms = 10;
    o.stall_timeout_ms = 1000;
    o.offline = false;
    return o;
  }

  Checkpoint open(const std::string& location = std::string("hf://") + kRepo) {
    return open(location, open_options());
  }
  Checkpoint open(const std::string& location, const OpenOptions& o) {
    auto c = Checkpoint::open(location, o);
    INFO(location << ": " << (c ? std::string() : c.error().message));
    REQUIRE(c);
    return std::move(*c);
  }
};

FetchOptions small_chunks(std::size_t connections = 4) {
  FetchOptions o;
  o.chunk_size = kChunk;
  o.coalesce_gap = 0;
  o.connections = connections;
  return o;
}

std::vector<Selection> pick(const Checkpoint& c, const std::vector<std::string>& texts) {
  std::vector<Selector> sels;
  for (const auto& t : texts) {
    auto named = parse_named_slice(t);
    REQUIRE(named);
    sels.push_back(Selector{named->name, named->slice});
  }
  auto s = c.select(sels);
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s);
  return std::move(*s);
}

// The file byte ranges a selection wants (file 0 only: single-file checkpoints).
Ranges wanted_ranges(const Checkpoint& c, const std::vector<Selection>& sel) {
  Ranges out;
  for (const auto& s : sel) {
    const ByteRange base = c.header(s.ref.file)->file_range(*s.ref.info);
    for (const auto& r : s.plan.ranges) out.push_back({base.offset + r.offset, r.length});
  }
  return out;
}


// A view's bytes equal the source file's bytes of that tensor.
void check_view(const Checkpoint& c, const std::string& name, const std::string& source) {
  const TensorRef* ref = c.find(name);
  REQUIRE(ref != nullptr);
  auto v = c.view(*ref);
  INFO(name << ": " << (v ? std::string() : v.error().message));
  REQUIRE(v);
  const ByteRange r = c.header(ref->file)->file_range(*ref->info);
  REQUIRE(v->bytes.size() == r.length);
  CHECK(std::memcmp(v->bytes.data(), source.data() + r.offset, r.length) == 0);
  CHECK(v->name == name);
}

// Runs `tensorfetch get` on a local file (no network, no cache): the expected output of a write.
std::string local_get(const Fixture& f, const std::vector<std::string>& selection) {
  std::vector<std::string> args{"get", (f.root / kRepo / kFile).string()};
  args.insert(args.end(), selection.begin(), selection.end());
  const fs::path out = f.tmp / ("local-get-" + std::to_string(::getpid()) + ".safetensors");
  args.insert(args.end(), {"-o", out.string(), "-q"});
  tftest::Child c = spawn(args, child_env(f.tmp / "unused-cache", f.hf_home), f.tmp / "local-get.err");
  const int rc = c.wait();
  INFO(read_file(f.tmp / "local-get.err"));
  REQUIRE(rc == 0);
  std::string bytes = read_file(out);
  fs::remove(out);
  return bytes;
}

// The file byte range of a tensor of org/big (read from the source file, locally).
ByteRange c_range(const Fixture& f, const std::string& name) {
  auto local = Checkpoint::open((f.root / kRepo / kFile).string());
  REQUIRE(local);
  const TensorRef* t = local->find(name);
  REQUIRE(t != nullptr);
  return local->header(t->file)->file_range(*t->info);
}

const std::vector<std::string> kSelection = {
    "layers.0.bias",                                  // inside the header window: no request
    "layers.5.bias", "layers.5.weight",               // adjacent: one run
    "layers.9.weight", "layers.10.bias",              // adjacent across layers
    "layers.15.weight", "layers.16.weight",           // a 2 KiB hole between them
    "layers.20.weight[0:8]",                          // a slice: the first 16 KiB
};

}  // namespace

// ======================================================================== selection

TEST_CASE("fetch: only the selected tensors' bytes travel, as 206s of exactly the planned chunks; views and write() are byte-exact",
          "[fetch]") {
  Fixture f;
  Checkpoint c = f.open();
  const auto open_log = f.server->take_log();
  CHECK(open_log.size() == 4);  // model.safetensors (302 + CDN window), the index (404), config.json
  CHECK(of_kind(open_log, "cdn").size() == 1);

  const auto sel = pick(c, kSelection);
  REQUIRE(sel.size() == 8);
  FetchOptions fo = small_chunks();
  fo.coalesce_gap = 4096;  // joins 15.weight and 16.weight across 16.bias (2 KiB)
  auto stats = c.fetch(sel, fo);
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  const auto log = f.server->log();
  const std::string& source = big_model();

  const Ranges wanted = wanted_ranges(c, sel);
  const Ranges header_window{{0, kWindow}};
  const Ranges planned = plan(wanted, header_window, fo.coalesce_gap, kChunk);
  INFO("planned: " << describe(planned));
  CHECK(planned.size() >= 8);
  CHECK(stats->chunks == planned.size());
  CHECK(stats->retries == 0);
  CHECK(stats->bytes_transferred == total(planned));
  CHECK(stats->requests == planned.size());
  CHECK(stats->bytes_cached == total(wanted) - total(minus(wanted, header_window)));

  // The log: only CDN range requests, each a 206 of exactly one planned chunk, each chunk once.
  CHECK(log.size() == planned.size());
  CHECK(of_kind(log, "resolve").empty());
  const auto data = data_requests(log);
  CHECK(data.size() == planned.size());
  std::multiset<std::string> asked, expected;
  std::uint64_t body = 0;
  for (const auto& r : data) {
    INFO(r.to_json());
    asked.insert(r.range);
    body += r.body_bytes;
    CHECK(r.status == 206);
    CHECK(r.fault.empty());
    auto rr = parse_range(r.range);
    REQUIRE(rr);
    CHECK(r.body_bytes == rr->length);
    CHECK(r.content_range ==
          "bytes " + std::to_string(rr->offset) + "-" + std::to_string(rr->end() - 1) + "/" + std::to_string(source.size()));
  }
  for (const auto& p : planned) expected.insert(range_header(p));
  CHECK(asked == expected);
  check_request_rules(log, f.etag);
  // Bytes that travelled, open included: the coalesced selection plus the header window.
  std::uint64_t all_body = body;
  for (const auto& r : open_log) all_body += r.kind == "cdn" ? r.body_bytes : 0;
  CHECK(body == total(planned));
  const Ranges coalesced = plan(wanted, {}, fo.coalesce_gap, std::uint64_t{1} << 40);
  CHECK(total(coalesced) == total(normalized(wanted)) + 2048);  // 16.bias, between 15 and 16
  CHECK(all_body <= total(coalesced) + kWindow);
  CHECK(total(planned) < source.size() / 3);

  // Views of the whole tensors are the source's bytes; the sliced one is not whole: NotFetched.
  for (const auto& name : {"layers.0.bias", "layers.5.bias", "layers.5.weight", "layers.9.weight",
                           "layers.10.bias", "layers.15.weight", "layers.16.weight"}) {
    check_view(c, name, source);
  }
  // 16.bias lies in the coalesced hole: it travelled, and is committed with its neighbours.
  check_view(c, "layers.16.bias", source);
  auto sliced = c.view(*c.find("layers.20.weight"));
  REQUIRE_FALSE(sliced);
  CHECK(sliced.error().code == ErrorCode::NotFetched);
  auto other = c.view(*c.find("layers.11.weight"));
  REQUIRE_FALSE(other);
  CHECK(other.error().code == ErrorCode::NotFetched);
  CHECK_THAT(other.error().message, Catch::Contains("layers.11.weight"));

  // The cache holds exactly the header window plus the planned chunks, all of them the source's.
  const Meta m = read_meta(f.cache, f.blob_id);
  CHECK(normalized(m.extents) == normalized([&] {
          Ranges r = planned;
          r.push_back({0, kWindow});
          return r;
        }()));
  CHECK_FALSE(m.complete);
  check_extents_hold_source(f.cache, f.blob_id, source);

  // write() gives the same file as a local `get` of the same selection.
  const fs::path out = f.tmp / "remote.safetensors";
  auto w = c.write(sel, out.string());
  INFO((w ? std::string() : w.error().message));
  REQUIRE(w);
  CHECK(f.server->log().size() == log.size());  // writing sends nothing
  const std::string written = read_file(out);
  const std::string expected_file = local_get(f, kSelection);
  CHECK(written.size() == expected_file.size());
  CHECK(sha256_hex(written) == sha256_hex(expected_file));
}

// ======================================================================== the data plane

// A fetch of every tensor of org/big (everything after the header window), as the data-plane
// tests make it: the open checkpoint, the fetch's figures, the bytes it had to transfer and its
// wall time.
struct WholeFetch {
  Checkpoint c;
  FetchStats stats;
  std::uint64_t total_bytes = 0;
  double wall = 0;
};

// Opens org/big, drops the open's requests from the server's log, runs `before` (e.g. to pace
// the connections), then fetches every tensor over `n` connections; REQUIREs success.
WholeFetch fetch_everything(Fixture& f, std::size_t n, const std::function<void()>& before = {}) {
  Checkpoint c = f.open();
  (void)f.server->take_log();
  if (before) before();
  FetchOptions fo;
  fo.connections = n;
  const auto t0 = std::chrono::steady_clock::now();
  auto stats = c.fetch(pick(c, {"*"}), fo);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  return WholeFetch{std::move(c), *stats, big_model().size() - kWindow, wall};
}

TEST_CASE("data plane: N connections each carry about total / N bytes, on N TCP connections of their own "
          "(chunks follow the work, not a fixed size)",
          "[fetch][data-plane]") {
  Fixture f;
  constexpr std::size_t kN = 4;
  auto [c, stats, total_bytes, wall] = fetch_everything(f, kN);
  // chunk = ceil(total / 4) (above the 512 KiB floor, below the 64 MiB ceiling): 4 chunks.
  CHECK(stats.chunks == kN);
  CHECK(stats.bytes_transferred == total_bytes);
  const auto data = data_requests(f.server->log());
  REQUIRE(data.size() == kN);
  std::set<int> ports;
  Ranges got;
  for (const auto& r : data) {
    INFO(r.to_json());
    CHECK(r.status == 206);
    ports.insert(r.client_port);
    auto rr = parse_range(r.range);
    REQUIRE(rr);
    got.push_back(*rr);
    // About total / N each (near-equal pieces).
    CHECK(rr->length >= total_bytes / kN - 1);
    CHECK(rr->length <= total_bytes / kN + 1);
  }
  CHECK(ports.size() == kN);  // four TCP connections at once, one per transfer
  CHECK(normalized(got) == Ranges{{kWindow, total_bytes}});
  const std::string& source = big_model();
  check_view(c, "layers.23.weight", source);
  check_view(c, "layers.0.bias", source);
}

TEST_CASE("data plane: a straggler connection does not decide the wall time: its tail is taken over by an idle "
          "connection, shortened not restarted, each byte sent about once",
          "[fetch][data-plane][straggler]") {
  Fixture f;
  // Every 4th TCP connection asking for file bodies from now on, from the 2nd, is paced at
  // 256 KiB/s: one of the four data flows is slow.
  constexpr std::uint64_t kSlow = 256 << 10;
  constexpr std::size_t kN = 4;
  auto [c, stats, total_bytes, wall] = fetch_everything(f, kN, [&] { f.server->slow_connections(kSlow, 4, 2); });
  const double slow_alone = static_cast<double>(total_bytes / kN) / kSlow;  // ~2.8 s
  // The server logs the cut request when its next paced write finds the connection closed.
  auto data = data_requests(f.server->log());
  for (int i = 0; i < 100 && std::none_of(data.begin(), data.end(), [](const auto& r) { return r.fault == "slow_connection"; }); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    data = data_requests(f.server->log());
  }
  std::string lines;
  for (const auto& r : data) lines += r.to_json() + "\n";
  INFO("wall " << wall << " s; the slow flow alone would take " << slow_alone << " s; splits " << stats.splits
               << ", stragglers " << stats.stragglers << "\n" << lines);
  CHECK(stats.splits >= 1);
  CHECK(wall < slow_alone / 2);
  CHECK(stats.bytes_transferred == total_bytes);
  // The slow request was cut short (not restarted: no request asks for its first bytes again).
  std::size_t slow = 0;
  std::uint64_t sent = 0;
  Ranges asked;
  for (const auto& r : data) {
    auto rr = parse_range(r.range);
    REQUIRE(rr);
    asked.push_back(*rr);
    sent += r.body_bytes;
    if (r.fault == "slow_connection") {
      ++slow;
      CHECK(r.body_bytes < rr->length);
    }
  }
  CHECK(slow >= 1);
  // The tail is shared: the slow request's cut-off bytes were handed out as several requests at
  // once (one per idle slot, within the minimum piece), not as one.
  for (const auto& r : data) {
    if (r.fault != "slow_connection") continue;
    const auto rr = parse_range(r.range);
    const auto helpers = std::count_if(data.begin(), data.end(), [&](const auto& o) {
      const auto orr = parse_range(o.range);
      return orr->offset > rr->offset && orr->offset < rr->end();
    });
    CHECK(helpers >= 2);
  }
  std::uint64_t asked_total = 0;
  for (const auto& r : asked) asked_total += r.length;
  CHECK(asked_total >= total_bytes);
  CHECK(normalized(asked) == Ranges{{kWindow, total_bytes}});
  // Bytes sent twice: at most what was in flight on the cut connections.
  CHECK(sent <= total_bytes + stats.splits * (256 << 10));
  const std::string& source = big_model();
  for (int i = 0; i < kLayers; ++i) check_view(c, "layers." + std::to_string(i) + ".weight", source);
  check_extents_hold_source(f.cache, f.blob_id, source);
}

TEST_CASE("data plane: a straggler's tail moves to another connection while work is still queued, not only "
          "at the end (small pieces on a slow flow would otherwise end the fetch last)",
          "[fetch][data-plane][straggler]") {
  Fixture f;
  Checkpoint c = f.open();
  (void)f.server->take_log();
  // Every flow trickles (32 KiB every 20 ms, about 1.6 MB/s), and connection 2 of every 4 runs
  // at 64 KiB/s; pieces of 128 KiB: about 22 of them for 4 connections, queued for ~0.7 s, while
  // one piece on the slow flow alone would take 2 s.
  f.server->drip(32 << 10, 20, -1, "/cdn/");
  f.server->slow_connections(64 << 10, 4, 2);
  FetchOptions fo;
  fo.connections = 4;
  fo.chunk_size = 128 << 10;
  auto stats = c.fetch(pick(c, {"*"}), fo);
  f.server->reset_switches();
  f.server->slow_connections(0, 4);
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  const std::uint64_t total_bytes = big_model().size() - kWindow;
  CHECK(stats->bytes_transferred == total_bytes);
  CHECK(stats->stragglers >= 1);
  CHECK(stats->splits >= 1);
  auto data = data_requests(f.server->log());
  // The server logs a cut request when its next paced write finds the connection closed.
  for (int i = 0; i < 100 && std::none_of(data.begin(), data.end(), [](const auto& r) { return r.dropped; }); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    data = data_requests(f.server->log());
  }
  std::string lines;
  for (const auto& r : data) lines += r.to_json() + "\n";
  INFO(lines);
  // The slow requests (the log names their fault "drip": the paced ones under 256 KiB/s), each
  // cut short; the helpers: requests that start inside one of them.
  const auto is_slow = [](const RequestRecord& r) {
    return r.end_ms > r.start_ms && static_cast<double>(r.body_bytes) * 1000 / (r.end_ms - r.start_ms) < (256 << 10);
  };
  std::vector<ByteRange> slow;
  for (const auto& r : data) {
    if (!is_slow(r)) continue;
    auto rr = parse_range(r.range);
    REQUIRE(rr);
    CHECK(r.body_bytes < rr->length);
    slow.push_back(*rr);
  }
  REQUIRE_FALSE(slow.empty());
  double first_helper = 1e18, last_planned = 0;
  for (const auto& r : data) {
    auto rr = parse_range(r.range);
    REQUIRE(rr);
    const bool helper = std::any_of(slow.begin(), slow.end(), [&](const ByteRange& s) {
      return rr->offset > s.offset && rr->offset < s.end();
    });
    if (helper) {
      first_helper = std::min(first_helper, r.start_ms);
    } else if (!is_slow(r)) {
      last_planned = std::max(last_planned, r.start_ms);
    }
  }
  // The first helper started before the queue ran dry (a planned piece started after it).
  CHECK(first_helper < last_planned);
  const std::string& source = big_model();
  for (int i = 0; i < kLayers; ++i) check_view(c, "layers." + std::to_string(i) + ".weight", source);
  check_extents_hold_source(f.cache, f.blob_id, source);
}

TEST_CASE("fetch: slices fetch only the slice's byte ranges (rows, a row's columns, an index)", "[fetch][slice]") {
  Fixture f;
  Checkpoint c = f.open();
  f.server->clear_log();
  // layers.12.weight[10:12, 0:256]: two runs of 1 KiB, 1 KiB apart; [5]: one row of 2 KiB;
  // layers.14.weight[60:64]: the last 8 KiB of the tensor.
  const std::vector<std::string> texts = {"layers.12.weight[10:12, 0:256]", "layers.13.weight[5]",
                                          "layers.14.weight[60:64]"};
  const auto sel = pick(c, texts);
  REQUIRE(sel.size() == 3);
  CHECK(sel[0].plan.ranges.size() == 2);
  const Ranges wanted = wanted_ranges(c, sel);
  REQUIRE(wanted.size() == 4);
  auto stats = c.fetch(sel, small_chunks());
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  const auto log = f.server->log();
  const auto data = data_requests(log);
  std::set<std::string> asked;
  for (const auto& r : data) {
    INFO(r.to_json());
    CHECK(r.status == 206);
    asked.insert(r.range);
  }
  std::set<std::string> expected;
  for (const auto& r : wanted) expected.insert(range_header(r));
  CHECK(log.size() == 4);
  CHECK(asked == expected);
  CHECK(stats->bytes_transferred == total(wanted));
  CHECK(stats->bytes_transferred == 1024 + 1024 + 2048 + 8192);
  check_request_rules(log, f.etag);
  check_extents_hold_source(f.cache, f.blob_id, big_model());
  // Only bytes committed are handed out: the whole tensors are not there.
  auto v = c.view(*c.find("layers.13.weight"));
  REQUIRE_FALSE(v);
  CHECK(v.error().code == ErrorCode::NotFetched);
  // The written slices equal a local `get` of the same slices.
  const fs::path out = f.tmp / "slices.safetensors";
  REQUIRE(c.write(sel, out.string()));
  CHECK(sha256_hex(read_file(out)) == sha256_hex(local_get(f, texts)));
}

// ======================================================================== cache reuse

TEST_CASE("fetch: a second fetch of the same selection by a new Checkpoint moves no tensor bytes", "[fetch][cache]") {
  Fixture f;
  const fs::path first_out = f.tmp / "first.safetensors";
  {
    Checkpoint c = f.open();
    const auto sel = pick(c, kSelection);
    auto s = c.fetch(sel, small_chunks());
    REQUIRE(s);
    CHECK(s->bytes_transferred > 0);
    REQUIRE(c.write(sel, first_out.string()));
  }
  f.server->clear_log();
  Checkpoint c = f.open();
  const auto open_log = f.server->log();
  const auto sel = pick(c, kSelection);
  auto s = c.fetch(sel, small_chunks());
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s);
  CHECK(s->bytes_transferred == 0);
  CHECK(s->requests == 0);
  CHECK(s->chunks == 0);
  CHECK(s->bytes_cached == total(normalized(wanted_ranges(c, sel))));
  const auto log = f.server->log();
  CHECK(log.size() == open_log.size());  // the open's requests, nothing after
  CHECK(data_requests(log).empty());
  check_request_rules(log, f.etag);
  const fs::path out = f.tmp / "second.safetensors";
  REQUIRE(c.write(sel, out.string()));
  CHECK(read_file(out) == read_file(first_out));
  check_view(c, "layers.9.weight", big_model());
}

TEST_CASE("fetch: a new Checkpoint of a Hub repo views tensors fetched earlier (by this or another process) without a request",
          "[fetch][cache]") {
  // Checkpoint::view: "the tensor's bytes must have been fetched (into the cache, by this or any
  // process)".
  Fixture f;
  SECTION("fetched by another Checkpoint of this process") {
    Checkpoint c = f.open();
    REQUIRE(c.fetch(pick(c, {"layers.5.weight"}), small_chunks()));
    check_view(c, "layers.5.weight", big_model());
  }
  SECTION("fetched by another process (tensorfetch get)") {
    tftest::Child child = spawn({"get", std::string("hf://") + kRepo, "layers.5.weight", "-o", (f.tmp / "got.safetensors").string(),
                         "--endpoint", f.server->endpoint(), "-q"},
                        child_env(f.cache, f.hf_home), f.tmp / "get.err");
    const int rc = child.wait();
    INFO(read_file(f.tmp / "get.err"));
    REQUIRE(rc == 0);
  }
  REQUIRE(covered(read_meta(f.cache, f.blob_id).extents, c_range(f, "layers.5.weight")));
  f.server->clear_log();
  Checkpoint c = f.open();
  check_view(c, "layers.5.weight", big_model());
  CHECK(data_requests(f.server->log()).empty());
}

TEST_CASE("fetch: a new Checkpoint of an http(s) URL views tensors fetched earlier without fetching again",
          "[fetch][cache]") {
  // Fails today: for a URL location the cache blob is opened by fetch() only (a Hub location
  // finds it through the commit's snapshot manifest), so the new object's view() says
  // NotFetched until fetch() is called.
  Fixture f;
  const std::string url = f.server->endpoint() + "/" + kRepo + "/resolve/main/" + kFile;
  {
    Checkpoint c = f.open(url);
    REQUIRE(c.fetch(pick(c, {"layers.5.weight"}), small_chunks()));
    check_view(c, "layers.5.weight", big_model());
  }
  f.server->clear_log();
  Checkpoint c = f.open(url);
  auto v = c.view(*c.find("layers.5.weight"));
  INFO((v ? std::string() : v.error().message));
  CHECK(v);
  CHECK(data_requests(f.server->log()).empty());
}

TEST_CASE("fetch: a commit-pinned revision opened offline (option, or HF_HUB_OFFLINE=1) makes no request at all", "[fetch][offline]") {
  Fixture f;
  const std::string commit = f.server->commit(kRepo);
  REQUIRE(commit.size() == 40);
  const std::string location = std::string("hf://") + kRepo + "@" + commit;
  const fs::path online_out = f.tmp / "online.safetensors";
  {
    Checkpoint c = f.open(location);
    REQUIRE(c.commit());
    CHECK(*c.commit() == commit);
    const auto sel = pick(c, kSelection);
    REQUIRE(c.fetch(sel, small_chunks()));
    REQUIRE(c.write(sel, online_out.string()));
  }
  for (const auto& r : f.server->log()) {
    if (r.kind == "resolve") CHECK(r.revision == commit);
  }
  const std::string expected = read_file(online_out);
  REQUIRE_FALSE(expected.empty());

  SECTION("OpenOptions::offline = true") {
    f.server->clear_log();
    OpenOptions o = f.open_options();
    o.offline = true;
    Checkpoint c = f.open(location, o);
    CHECK(c.requests() == 0);
    const auto sel = pick(c, kSelection);
    auto s = c.fetch(sel, small_chunks());
    INFO((s ? std::string() : s.error().message));
    REQUIRE(s);
    CHECK(s->requests == 0);
    const fs::path out = f.tmp / "offline.safetensors";
    REQUIRE(c.write(sel, out.string()));
    CHECK(read_file(out) == expected);
    check_view(c, "layers.5.weight", big_model());
    CHECK(f.server->log().empty());
  }
  SECTION("HF_HUB_OFFLINE=1 (offline left unset)") {
    f.server->clear_log();
    tftest::ScopedEnv env("HF_HUB_OFFLINE", "1");
    OpenOptions o = f.open_options();
    o.offline.reset();
    Checkpoint c = f.open(location, o);
    CHECK(c.requests() == 0);
    const auto sel = pick(c, kSelection);
    auto s = c.fetch(sel, small_chunks());
    INFO((s ? std::string() : s.error().message));
    REQUIRE(s);
    const fs::path out = f.tmp / "offline-env.safetensors";
    REQUIRE(c.write(sel, out.string()));
    CHECK(read_file(out) == expected);
    CHECK(f.server->log().empty());
  }
}

TEST_CASE("fetch: offline, a tensor that was never fetched fails NotFetched without any request", "[fetch][offline]") {
  // OpenOptions::offline: "No network at all". Fails today: fetch() of an offline-opened
  // checkpoint sends range requests to the CDN URL recorded in the snapshot manifest (and
  // succeeds while the server is reachable).
  Fixture f;
  const std::string location = std::string("hf://") + kRepo + "@" + f.server->commit(kRepo);
  {
    Checkpoint c = f.open(location);
    REQUIRE(c.fetch(pick(c, {"layers.5.weight"}), small_chunks()));
  }
  f.server->clear_log();
  OpenOptions o = f.open_options();
  o.offline = true;
  Checkpoint c = f.open(location, o);
  auto s = c.fetch(pick(c, {"layers.6.weight"}), small_chunks());
  CHECK(f.server->log().empty());  // "offline: no network at all"
  REQUIRE_FALSE(s);
  CHECK(s.error().code == ErrorCode::NotFetched);
}

// ======================================================================== download

TEST_CASE("fetch: fetch_all + save_files of a sharded repo: files byte-identical, sha256 verified, complete, index and config saved",
          "[fetch][download]") {
  if (reference().empty()) {
    WARN("reference checkpoints not found: skipped");
    return;
  }
  Fixture f;
  const std::string repo = "org/llama-tiny-sharded";
  // A small header window (8 KiB), so that most of each shard travels in 64 KiB chunks.
  constexpr std::uint64_t window = 8192;
  OpenOptions o = f.open_options();
  o.header_window = window;
  Checkpoint c = f.open("hf://" + repo, o);
  REQUIRE(c.sharded());
  REQUIRE(c.files().size() == 3);
  f.server->clear_log();
  auto stats = c.fetch_all(small_chunks());
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  const auto log = f.server->log();
  // Every shard's bytes beyond its header window, once, in planned chunks.
  std::multiset<std::string> asked, expected;
  std::uint64_t expected_bytes = 0;
  for (std::size_t i = 0; i < c.files().size(); ++i) {
    const auto& file = c.files()[i];
    // What the open read: the window, or the whole header when it is larger.
    const std::uint64_t prefix = std::min(file.size, std::max(window, c.header(i)->data_offset()));
    const Ranges planned = plan({{0, file.size}}, {{0, prefix}}, 0, kChunk);
    expected_bytes += total(planned);
    for (const auto& p : planned) expected.insert(file.path + " " + range_header(p));
  }
  for (const auto& r : data_requests(log)) {
    INFO(r.to_json());
    CHECK(r.status == 206);
    CHECK(r.repo == repo);
    CHECK(r.if_match == "\"" + f.server->file_sha256(repo, r.file) + "\"");
    CHECK_FALSE(r.authorization);
    asked.insert(r.file + " " + r.range);
  }
  CHECK(asked == expected);
  CHECK(expected.size() >= 12);
  CHECK(log.size() == expected.size());
  CHECK(stats->bytes_transferred == expected_bytes);

  const fs::path out = f.tmp / "download";
  auto saved = c.save_files(out.string());
  INFO((saved ? std::string() : saved.error().message));
  REQUIRE(saved);
  for (const auto& e : fs::directory_iterator(reference() / "llama-tiny-sharded")) {
    const std::string name = e.path().filename().string();
    if (name == "generation_config.json") {
      CHECK_FALSE(fs::exists(out / name));  // not part of a download: safetensors, index, config
      continue;
    }
    INFO(name);
    REQUIRE(fs::exists(out / name));
    CHECK(sha256_hex(read_file(out / name)) == sha256_hex(read_file(e.path())));
  }
  auto list = cache_list(f.cache.string());
  REQUIRE(list);
  CHECK(list->size() == 3);
  for (const auto& e : *list) {
    INFO(e.id << " " << e.url);
    CHECK(e.complete);
    CHECK(e.present == e.size);
    REQUIRE(e.sha256);
    CHECK(*e.sha256 == e.id);
    CHECK(cache_verify(e.id, f.cache.string()));
  }
  CHECK(f.server->log().size() == log.size());  // saving sends nothing
}

// ======================================================================== faults

TEST_CASE("fetch: connections dropped mid-body are resumed from the bytes received; final bytes exact", "[fetch][faults]") {
  Fixture f;
  OpenOptions o = f.open_options();
  o.max_retries = 5;
  Checkpoint c = f.open(std::string("hf://") + kRepo, o);
  f.server->clear_log();
  // The first three CDN responses are cut after 20000 bytes.
  f.server->drop_after(20000, 3, "/cdn/");
  const auto sel = pick(c, {"layers.8.weight", "layers.9.weight"});
  auto stats = c.fetch(sel, small_chunks(1));
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  const auto data = data_requests(f.server->log());
  const Ranges planned = plan(wanted_ranges(c, sel), {{0, kWindow}}, 0, kChunk);
  CHECK(stats->retries == 3);
  CHECK(data.size() == planned.size() + 3);
  // Attempts of one chunk share its end (a resumed request asks for the rest of the chunk;
  // other chunks may start while one waits for its retry).
  std::map<std::uint64_t, std::vector<RequestRecord>> by_chunk;
  for (const auto& r : data) {
    auto rr = parse_range(r.range);
    REQUIRE(rr);
    by_chunk[rr->end()].push_back(r);
  }
  CHECK(by_chunk.size() == planned.size());
  int drops = 0;
  for (const auto& p : planned) {
    INFO("chunk " << range_header(p));
    REQUIRE(by_chunk.count(p.end()) == 1);
    const auto& attempts = by_chunk[p.end()];
    std::uint64_t received = 0;
    for (std::size_t k = 0; k < attempts.size(); ++k) {
      const auto& a = attempts[k];
      INFO(a.to_json());
      auto r = parse_range(a.range);
      REQUIRE(r);
      if (k > 0) CHECK(r->offset > parse_range(attempts[k - 1].range)->offset);
      CHECK(r->offset == p.offset + received);  // resumes exactly after what arrived
      CHECK(a.if_match == f.etag);
      if (k + 1 < attempts.size()) {
        CHECK(a.fault == "drop");
        CHECK(a.dropped);
        CHECK(a.body_bytes == 20000);
        ++drops;
      } else {
        CHECK(a.fault.empty());
        CHECK(a.status == 206);
        CHECK(a.body_bytes == p.length - received);
      }
      received += a.body_bytes;
    }
    CHECK(received == p.length);
  }
  CHECK(drops == 3);
  // Exactly the chunk's bytes travelled, nothing twice.
  std::uint64_t body = 0;
  for (const auto& r : data) body += r.body_bytes;
  CHECK(body == total(planned));
  CHECK(stats->bytes_transferred == total(planned));
  check_request_rules(f.server->log(), f.etag);
  check_view(c, "layers.8.weight", big_model());
  check_view(c, "layers.9.weight", big_model());
  check_extents_hold_source(f.cache, f.blob_id, big_model());
}

TEST_CASE("fetch: drops beyond the retries fail Network (exit 3); the bytes that arrived are kept and a re-run resumes after them",
          "[fetch][faults]") {
  Fixture f;
  OpenOptions o = f.open_options();
  o.max_retries = 1;
  Checkpoint c = f.open(std::string("hf://") + kRepo, o);
  f.server->clear_log();
  f.server->drop_after(20000, -1, "/cdn/");
  const auto sel = pick(c, {"layers.8.weight"});
  auto stats = c.fetch(sel, small_chunks(1));
  REQUIRE_FALSE(stats);
  INFO(stats.error().message);
  CHECK(stats.error().code == ErrorCode::Network);
  CHECK(exit_code(stats.error().code) == 3);
  CHECK_THAT(stats.error().message, Catch::Contains(kFile));
  CHECK_THAT(stats.error().message, Catch::Contains("/cdn/" + f.sha));
  settle(*f.server);
  const auto data = data_requests(f.server->log());
  for (const auto& r : data) {
    INFO(r.to_json());
    CHECK(r.fault == "drop");
    CHECK(r.body_bytes == 20000);
  }
  check_request_rules(f.server->log(), f.etag);
  // The chunk that failed the fetch: 2 x 20000 bytes arrived in order, and are committed.
  const Meta m = read_meta(f.cache, f.blob_id);
  const Ranges planned = plan(wanted_ranges(c, sel), {{0, kWindow}}, 0, kChunk);
  bool kept = false;
  for (const auto& p : planned) {
    if (covered(m.extents, {p.offset, 40000})) kept = true;
  }
  CHECK(kept);
  check_extents_hold_source(f.cache, f.blob_id, big_model());
  // A re-run asks only for what is missing.
  f.server->reset_switches();
  f.server->clear_log();
  auto again = c.fetch(sel, small_chunks(4));
  INFO((again ? std::string() : again.error().message));
  REQUIRE(again);
  CHECK(again->bytes_cached >= 40000);
  check_nothing_asked_twice(f.server->log(), m.extents);
  check_view(c, "layers.8.weight", big_model());
}

TEST_CASE("fetch: a 503 storm and a 429 storm (Retry-After) shorter than the retries succeed; attempts counted", "[fetch][faults]") {
  Fixture f;
  OpenOptions o = f.open_options();
  o.max_retries = 5;
  Checkpoint c = f.open(std::string("hf://") + kRepo, o);
  const auto sel = pick(c, {"layers.8.weight", "layers.9.weight", "layers.10.weight"});
  const Ranges planned = plan(wanted_ranges(c, sel), {{0, kWindow}}, 0, kChunk);
  int status = 0;
  bool ratelimit_header = false;
  SECTION("503, Retry-After: 0") { status = 503; }
  SECTION("429, Retry-After: 0") { status = 429; }
  SECTION("429, RateLimit: t=0") {
    status = 429;
    ratelimit_header = true;
  }
  f.server->clear_log();
  f.server->fail_next(4, status, 0, ratelimit_header, "/cdn/");
  auto stats = c.fetch(sel, small_chunks(4));
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  const auto log = f.server->log();
  const auto data = data_requests(log);
  CHECK(stats->retries == 4);
  CHECK(stats->requests == planned.size() + 4);
  CHECK(data.size() == planned.size() + 4);
  int failed = 0;
  for (const auto& r : data) {
    INFO(r.to_json());
    if (r.status == status) {
      ++failed;
      CHECK(r.fault == "fail");
      // Retried with the same Range, and that retry succeeded or failed again.
      bool retried = std::any_of(data.begin(), data.end(), [&](const auto& x) { return x.seq > r.seq && x.range == r.range; });
      CHECK(retried);
    } else {
      CHECK(r.status == 206);
    }
  }
  CHECK(failed == 4);
  std::set<std::string> ok;
  for (const auto& r : data) {
    if (r.status == 206) ok.insert(r.range);
  }
  CHECK(ok.size() == planned.size());
  check_request_rules(log, f.etag);
  for (const auto& name : {"layers.8.weight", "layers.9.weight", "layers.10.weight"}) check_view(c, name, big_model());
}

TEST_CASE("fetch: Retry-After is honoured: a chunk answered 503 with Retry-After: 1 is asked again after about a second",
          "[fetch][faults]") {
  Fixture f;
  Checkpoint c = f.open();
  f.server->clear_log();
  f.server->fail_next(1, 503, 1, false, "/cdn/");
  const auto sel = pick(c, {"layers.8.weight"});
  auto stats = c.fetch(sel, small_chunks(1));
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  const auto data = data_requests(f.server->log());
  REQUIRE(data.size() == 3);  // two chunks, one of them twice
  CHECK(data[0].status == 503);
  CHECK(data[0].retry_after == "1");
  std::vector<RequestRecord> again;
  for (const auto& r : data) {
    if (r.seq > data[0].seq && r.range == data[0].range) again.push_back(r);
  }
  REQUIRE(again.size() == 1);
  INFO(again[0].to_json());
  CHECK(again[0].status == 206);
  CHECK(again[0].start_ms - data[0].end_ms >= 900);
  CHECK(stats->retries == 1);
  check_view(c, "layers.8.weight", big_model());
}

TEST_CASE("fetch: a 429 storm longer than the retries fails RateLimited (exit 3) and serves nothing wrong", "[fetch][faults]") {
  Fixture f;
  OpenOptions o = f.open_options();
  o.max_retries = 2;
  Checkpoint c = f.open(std::string("hf://") + kRepo, o);
  f.server->clear_log();
  f.server->fail_next(-1, 429, 0, false, "/cdn/");
  const auto sel = pick(c, {"layers.8.weight", "layers.9.weight"});
  auto stats = c.fetch(sel, small_chunks(1));
  REQUIRE_FALSE(stats);
  INFO(stats.error().message);
  CHECK(stats.error().code == ErrorCode::RateLimited);
  CHECK(exit_code(stats.error().code) == 3);
  CHECK_THAT(stats.error().message, Catch::Contains("429"));
  CHECK_THAT(stats.error().message, Catch::Contains(kFile));
  f.server->stop();  // the records of the responses the client hung up on are complete
  const auto data = data_requests(f.server->log());
  // Every attempt was refused; no chunk was tried more than 1 + max_retries times, and the one
  // that failed the fetch exactly that often.
  std::map<std::string, int> attempts;
  for (const auto& r : data) {
    INFO(r.to_json());
    CHECK(r.status == 429);
    CHECK(r.body_bytes < 100);
    ++attempts[r.range];
  }
  int exhausted = 0;
  for (const auto& [range, n] : attempts) {
    INFO(range);
    CHECK(n <= 3);
    if (n == 3) {
      ++exhausted;
      CHECK_THAT(stats.error().message, Catch::Contains(range));
    }
  }
  CHECK(exhausted >= 1);
  CHECK(data.size() <= 4 * 3);  // the four chunks at most
  check_request_rules(f.server->log(), f.etag);
  // Nothing beyond the header window is recorded; the views say NotFetched.
  CHECK(normalized(read_meta(f.cache, f.blob_id).extents) == Ranges{{0, kWindow}});
  for (const auto& name : {"layers.8.weight", "layers.9.weight"}) {
    auto v = c.view(*c.find(name));
    REQUIRE_FALSE(v);
    CHECK(v.error().code == ErrorCode::NotFetched);
  }
}

namespace {

// A server that breaks the HTTP range protocol on CDN requests of tensor data: one row per
// fault. The fetch fails with `code` (never retried: a server that breaks the protocol once
// will again), the message names what `mentions` say, and nothing of a faulty response is
// committed.
struct ProtocolFault {
  std::string name;                          // what the server does (the section's name)
  std::function<void(HubServer&)> arm;       // the test server's switch
  std::vector<std::string> selection;        // what is fetched
  std::size_t connections;
  ErrorCode code;
  std::vector<std::string> mentions;         // message fragments; "{cdn}": the file's CDN path,
                                             // "{range}": the faulty request's Range header
  std::string fault;                         // the log's `fault` of the faulty responses
  int status;                                // their status
  bool every_request_faulty;                 // every data request is faulty (not just the first)
};

const std::vector<ProtocolFault>& protocol_faults() {
  static const std::vector<ProtocolFault> rows = {
      {"ignores Range (200 with the whole file)", [](HubServer& s) { s.set_ignore_range(true); },
       {"layers.8.weight", "layers.12.weight"}, 4, ErrorCode::BadResponse, {"{cdn}", "ignored the Range"},
       "ignore_range", 200, true},
      {"a wrong Content-Range (shifted by one byte)", [](HubServer& s) { s.wrong_content_range(1, "/cdn/", 1); },
       {"layers.8.weight", "layers.9.weight"}, 2, ErrorCode::BadResponse, {"Content-Range", "{cdn}", "{range}"},
       "wrong_content_range", 206, false},
      {"a body 1000 bytes longer than the range (chunked)",
       [](HubServer& s) { s.overlong_body(1000, 1, "/cdn/", testing::OverlongMode::Chunked); },
       {"layers.8.weight", "layers.9.weight"}, 1, ErrorCode::BadResponse, {"longer than"}, "overlong", 206, false},
      {"a body 1000 bytes longer than the range (no Content-Length, closed)",
       [](HubServer& s) { s.overlong_body(1000, 1, "/cdn/", testing::OverlongMode::CloseDelimited); },
       {"layers.8.weight", "layers.9.weight"}, 1, ErrorCode::BadResponse, {"longer than"}, "overlong", 206, false},
  };
  return rows;
}

}  // namespace

TEST_CASE("fetch: a server that breaks the range protocol (table) fails BadResponse (exit 3) naming the URL; "
          "the faulty response is not retried and nothing of it is committed",
          "[fetch][faults]") {
  for (const auto& row : protocol_faults()) {
    DYNAMIC_SECTION(row.name) {
      Fixture f;
      Checkpoint c = f.open();
      REQUIRE(c.fetch(pick(c, {"layers.3.weight"}), small_chunks()));  // something already there
      const Ranges before = normalized(read_meta(f.cache, f.blob_id).extents);
      f.server->clear_log();
      row.arm(*f.server);
      auto stats = c.fetch(pick(c, row.selection), small_chunks(row.connections));
      REQUIRE_FALSE(stats);
      INFO(stats.error().message);
      CHECK(stats.error().code == row.code);
      CHECK(exit_code(stats.error().code) == 3);
      f.server->stop();  // the records of the responses the client hung up on are complete

      const auto data = data_requests(f.server->log());
      std::vector<RequestRecord> faulty;
      for (const auto& r : data) {
        INFO(r.to_json());
        if (r.fault == row.fault) {
          faulty.push_back(r);
          CHECK(r.status == row.status);
          CHECK(r.body_bytes < big_model().size());  // the client hung up instead of reading on
        } else {
          CHECK_FALSE(row.every_request_faulty);
          CHECK(r.fault.empty());
        }
      }
      REQUIRE_FALSE(faulty.empty());
      if (!row.every_request_faulty) CHECK(faulty.size() == 1);  // the switch fires once
      for (std::string m : row.mentions) {
        if (m == "{cdn}") m = "/cdn/" + f.sha;
        if (m == "{range}") m = faulty[0].range;
        CHECK_THAT(stats.error().message, Catch::Contains(m));
      }
      // Not retried, and none of a faulty response's bytes recorded as present.
      const Ranges after = normalized(read_meta(f.cache, f.blob_id).extents);
      for (const auto& bad : faulty) {
        INFO(bad.to_json());
        CHECK(std::count_if(data.begin(), data.end(), [&](const auto& r) { return r.range == bad.range; }) == 1);
        const auto bad_range = parse_range(bad.range);
        REQUIRE(bad_range);
        CHECK_FALSE(intersects(minus(after, before), *bad_range));
      }
      if (row.every_request_faulty) CHECK(after == before);
      check_extents_hold_source(f.cache, f.blob_id, big_model());
      check_request_rules(f.server->log(), f.etag);
      check_view(c, "layers.3.weight", big_model());
      if (row.every_request_faulty) {
        for (const auto& name : row.selection) {
          auto v = c.view(*c.find(name));
          REQUIRE_FALSE(v);
          CHECK(v.error().code == ErrorCode::NotFetched);
        }
      }
    }
  }
}

TEST_CASE("fetch: the file changing on the server mid-load fails Integrity (exit 4); the cache holds only original bytes",
          "[fetch][faults]") {
  Fixture f;
  Checkpoint c = f.open();
  f.server->clear_log();
  f.server->change_etag_after(3);  // three more CDN requests see the original, then it changes
  const std::vector<std::string> names = {"layers.8.weight", "layers.9.weight", "layers.10.weight"};
  auto stats = c.fetch(pick(c, names), small_chunks(1));
  REQUIRE_FALSE(stats);
  INFO(stats.error().message);
  CHECK(stats.error().code == ErrorCode::Integrity);
  CHECK(exit_code(stats.error().code) == 4);
  CHECK_THAT(stats.error().message, Catch::Contains(kFile));
  CHECK_THAT(stats.error().message, Catch::Contains("changed"));
  f.server->stop();  // the records of the responses the client hung up on are complete
  const auto data = data_requests(f.server->log());
  REQUIRE(data.size() == 4);  // one connection: 3 chunks, then the 412 that stops the fetch
  for (int k = 0; k < 3; ++k) {
    INFO(data[k].to_json());
    CHECK(data[k].status == 206);
    CHECK(data[k].etag == f.etag);
  }
  INFO(data[3].to_json());
  CHECK(data[3].status == 412);
  CHECK(data[3].fault == "etag_changed");
  CHECK(data[3].body_bytes == 0);
  CHECK(data[3].if_match == f.etag);
  check_request_rules(f.server->log(), f.etag);
  // Every committed byte is the original's: what arrived before the change, nothing after.
  const Meta m = read_meta(f.cache, f.blob_id);
  std::uint64_t committed = total(minus(m.extents, {{0, kWindow}}));
  CHECK(committed == 3 * kChunk);
  check_extents_hold_source(f.cache, f.blob_id, big_model());
  f.server->change_etag_after(-1);
  // The first two chunks were layers.8.weight (whole and original); the others are not served.
  check_view(c, "layers.8.weight", big_model());
  for (const auto& name : {"layers.9.weight", "layers.10.weight"}) {
    auto v = c.view(*c.find(name));
    REQUIRE_FALSE(v);
    CHECK(v.error().code == ErrorCode::NotFetched);
  }
}

namespace {

// A CDN response that stalls after `bytes` body bytes (the server holds it for `server_stall_ms`,
// then closes); the client's stall timeout is 1 s. The transfer must be retried after about the
// stall timeout, resuming after the bytes received, and the fetch complete.
void check_stall(std::uint64_t bytes, int server_stall_ms) {
  Fixture f;
  OpenOptions o = f.open_options();
  o.stall_timeout_ms = 1000;
  Checkpoint c = f.open(std::string("hf://") + kRepo, o);
  f.server->clear_log();
  f.server->stall_after(bytes, 1, "/cdn/", server_stall_ms);
  const auto sel = pick(c, {"layers.8.weight", "layers.9.weight"});
  const auto t0 = std::chrono::steady_clock::now();
  auto stats = c.fetch(sel, small_chunks(2));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  CHECK(stats->retries == 1);
  check_view(c, "layers.8.weight", big_model());
  check_view(c, "layers.9.weight", big_model());
  // The stalled response's record is complete once the server gives up: stop it.
  f.server->stop();
  const auto data = data_requests(f.server->log());
  const Ranges planned = plan(wanted_ranges(c, sel), {{0, kWindow}}, 0, kChunk);
  CHECK(data.size() == planned.size() + 1);
  std::vector<RequestRecord> stalled;
  for (const auto& r : data) {
    if (r.fault == "stall") stalled.push_back(r);
  }
  REQUIRE(stalled.size() == 1);
  const auto s = parse_range(stalled[0].range);
  REQUIRE(s);
  CHECK(stalled[0].body_bytes == bytes);
  std::vector<RequestRecord> resumed;
  for (const auto& r : data) {
    auto rr = parse_range(r.range);
    if (r.seq > stalled[0].seq && rr && rr->end() == s->end()) resumed.push_back(r);
  }
  REQUIRE(resumed.size() == 1);
  INFO(resumed[0].to_json());
  const auto rr = parse_range(resumed[0].range);
  if (bytes > 0) CHECK(rr->offset > s->offset);
  CHECK(rr->offset == s->offset + bytes);
  CHECK(resumed[0].status == 206);
  CHECK(resumed[0].body_bytes == rr->length);
  CHECK(resumed[0].start_ms - stalled[0].start_ms >= 900);
  check_request_rules(f.server->log(), f.etag);
  check_extents_hold_source(f.cache, f.blob_id, big_model());
  // Last: the time taken. The retry comes after about the stall timeout (1 s), long before the
  // server gives up the stalled response.
  INFO("fetch took " << seconds << " s; the server held the stalled response " << server_stall_ms << " ms");
  CHECK(seconds >= 0.9);
  CHECK(seconds < 2.5);
}

}  // namespace

TEST_CASE("fetch: a transfer that stalls before its first byte is retried after the stall timeout and completes",
          "[fetch][faults]") {
  check_stall(0, 10000);
}

TEST_CASE("fetch: a transfer that stalls mid-body is retried after the stall timeout, resuming after the bytes received",
          "[fetch][faults]") {
  // Fails today: the retry comes after about 6-7 s, not 1 s (libcurl's low-speed check averages
  // over a window of seconds, so bytes received before the stall hide it); the server holds the
  // stall 5 s, so the fetch completes through the server's close instead.
  check_stall(16384, 5000);
}

TEST_CASE("fetch: an expired CDN URL is resolved again (without the token going to the CDN) and the fetch completes",
          "[fetch][faults]") {
  // URLs live 500 ms and every request takes 50 ms; the fetch starts after the URL the open
  // was given expired.
  Fixture f(50, 500);
  Checkpoint c = f.open();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  f.server->clear_log();
  const auto sel = pick(c, {"layers.8.weight", "layers.9.weight"});
  auto stats = c.fetch(sel, small_chunks(1));
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  check_view(c, "layers.8.weight", big_model());
  check_view(c, "layers.9.weight", big_model());
  const auto log = f.server->log();
  const auto resolves = of_kind(log, "resolve");
  CHECK(resolves.size() >= 1);
  for (const auto& r : resolves) {
    INFO(r.to_json());
    CHECK(r.file == kFile);
    CHECK(r.status == 302);
    CHECK(r.authorization);
  }
  std::size_t expired = 0;
  for (const auto& r : of_kind(log, "cdn")) {
    INFO(r.to_json());
    if (r.fault == "expired") {
      ++expired;
      CHECK(r.status == 403);
    }
  }
  CHECK(expired >= 1);
  check_request_rules(log, f.etag);
  check_extents_hold_source(f.cache, f.blob_id, big_model());
}

TEST_CASE("fetch: an expired URL is resolved again at the commit the open pinned, even after the branch moved",
          "[fetch][faults]") {
  // DESIGN.md: "Once one response names the commit, resolve every other file at that commit".
  // Fails today: the re-resolve asks for the revision as given ("main"), so a branch that moved
  // during a load (to a commit where the file changed) aborts it with Integrity instead of
  // reading on at the pinned commit.
  Fixture f(50, 500);
  const std::string commit = f.server->commit(kRepo);
  Checkpoint c = f.open();
  REQUIRE(c.commit() == commit);
  f.server->set_ref(kRepo, "main", std::string(40, 'b'));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  f.server->clear_log();
  auto stats = c.fetch(pick(c, {"layers.8.weight"}), small_chunks(1));
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  const auto resolves = of_kind(f.server->log(), "resolve");
  REQUIRE_FALSE(resolves.empty());
  for (const auto& r : resolves) {
    INFO(r.to_json());
    CHECK(r.revision == commit);
  }
}

TEST_CASE("fetch: a long load whose CDN URL expires many times keeps re-resolving and completes", "[fetch][faults]") {
  // URLs live 250 ms, requests take 60 ms, one connection, 20 chunks: the URL expires about
  // five times during the load (a multi-hour download with 1-hour URLs). Fails today: the
  // fetcher re-resolves in at most 3 rounds (fetcher.cc, `round < 3`), then fails with the 403.
  Fixture f(60, 250);
  Checkpoint c = f.open();
  f.server->clear_log();
  const auto sel = pick(c, {"layers.8.weight", "layers.9.weight", "layers.10.weight", "layers.11.weight",
                              "layers.12.weight", "layers.13.weight", "layers.14.weight", "layers.15.weight",
                              "layers.16.weight", "layers.17.weight"});
  auto stats = c.fetch(sel, small_chunks(1));
  INFO((stats ? std::string() : stats.error().message));
  const auto resolves = of_kind(f.server->log(), "resolve");
  INFO("re-resolves: " << resolves.size());
  CHECK(resolves.size() >= 4);
  REQUIRE(stats);
  check_view(c, "layers.17.weight", big_model());
}

TEST_CASE("fetch: a progress callback returning false cancels (Cancelled); completed chunks stay committed", "[fetch][cancel]") {
  Fixture f(20);
  Checkpoint c = f.open();
  f.server->clear_log();
  const auto sel = pick(c, {"layers.8.weight", "layers.9.weight", "layers.10.weight", "layers.11.weight",
                              "layers.12.weight", "layers.13.weight"});
  const Ranges planned = plan(wanted_ranges(c, sel), {{0, kWindow}}, 0, kChunk);
  REQUIRE(planned.size() == 12);
  FetchOptions fo = small_chunks(1);
  std::uint64_t done_at_cancel = 0;
  int calls = 0;
  fo.progress = [&](const FetchProgress& p) {
    ++calls;
    CHECK(p.bytes_total == total(planned));
    if (p.bytes_done >= 4 * kChunk) {
      if (done_at_cancel == 0) done_at_cancel = p.bytes_done;
      return false;
    }
    return true;
  };
  auto stats = c.fetch(sel, fo);
  REQUIRE_FALSE(stats);
  INFO(stats.error().message);
  CHECK(stats.error().code == ErrorCode::Cancelled);
  CHECK(exit_code(stats.error().code) == 1);
  REQUIRE(done_at_cancel >= 4 * kChunk);
  CHECK(done_at_cancel < total(planned));
  // One connection, chunks in order: every chunk that had fully arrived when the callback said
  // stop is committed (and what is committed is the source's).
  settle(*f.server);
  const Meta m = read_meta(f.cache, f.blob_id);
  std::uint64_t end = 0;
  for (const auto& p : planned) {
    end += p.length;
    if (end > done_at_cancel) break;
    INFO("chunk " << range_header(p));
    CHECK(covered(m.extents, p));
  }
  CHECK(total(minus(m.extents, {{0, kWindow}})) <= done_at_cancel);
  check_extents_hold_source(f.cache, f.blob_id, big_model());
  // Later chunks were never asked for.
  const auto data = data_requests(f.server->log());
  CHECK(data.size() < planned.size());
  check_request_rules(f.server->log(), f.etag);
  // A new fetch resumes: only what is missing travels.
  f.server->clear_log();
  auto again = c.fetch(sel, small_chunks(4));
  REQUIRE(again);
  CHECK(again->bytes_cached >= total(minus(m.extents, {{0, kWindow}})));
  check_nothing_asked_twice(f.server->log(), m.extents);
  for (const auto& name : {"layers.8.weight", "layers.13.weight"}) check_view(c, name, big_model());
}

TEST_CASE("fetch: a progress callback that says stop on its first call sends no tensor request", "[fetch][cancel]") {
  // Fails today: the first report of a round (before any request) ignores the callback's false
  // (`(void)state.report(true)`), so transfers run until the next report, 100 ms later.
  Fixture f(30);
  Checkpoint c = f.open();
  f.server->clear_log();
  const auto sel = pick(c, {"layers.8.weight", "layers.9.weight", "layers.10.weight", "layers.11.weight"});
  FetchOptions fo = small_chunks(1);
  fo.progress = [](const FetchProgress&) { return false; };
  auto stats = c.fetch(sel, fo);
  REQUIRE_FALSE(stats);
  CHECK(stats.error().code == ErrorCode::Cancelled);
  f.server->stop();  // the records of the responses the client hung up on are complete
  const auto data = data_requests(f.server->log());
  INFO("tensor requests after the cancel: " << data.size());
  CHECK(data.empty());
}

// ======================================================================== processes (CLI)

TEST_CASE("fetch: kill -9 of `tensorfetch download` mid-load, re-run: no committed byte fetched again, files byte-exact",
          "[fetch][crash][cli]") {
  Fixture f(120);
  const std::vector<std::string> args = {"download", std::string("hf://") + kRepo, "-o", (f.tmp / "out").string(),
                                         "--endpoint", f.server->endpoint(), "--chunk-size", "65536",
                                         "--connections", "2", "--stall-timeout", "2000", "-q"};
  const auto env = child_env(f.cache, f.hf_home);
  tftest::Child first = spawn(args, env, f.tmp / "first.err");
  // Wait until some tensor chunks are committed (beyond the header window), then kill -9.
  Meta seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    seen = read_meta(f.cache, f.blob_id);
    if (total(minus(seen.extents, {{0, kWindow}})) >= 3 * kChunk) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(first.running());
  first.signal(SIGKILL);
  const int first_rc = first.wait();
  INFO(read_file(f.tmp / "first.err"));
  REQUIRE(first_rc == 128 + SIGKILL);  // killed mid-load, not finished
  const Meta before = read_meta(f.cache, f.blob_id);
  REQUIRE(before.exists);
  CHECK_FALSE(before.complete);
  const std::uint64_t committed = total(minus(before.extents, {{0, kWindow}}));
  INFO("committed before the kill: " << describe(before.extents));
  CHECK(committed >= 3 * kChunk);
  CHECK(committed < big_model().size() - kWindow);
  check_extents_hold_source(f.cache, f.blob_id, big_model());
  CHECK_FALSE(fs::exists(f.tmp / "out" / kFile));

  f.server->set_latency_ms(0);
  f.server->clear_log();
  tftest::Child second = spawn(args, env, f.tmp / "second.err");
  const int second_rc = second.wait();
  INFO(read_file(f.tmp / "second.err"));
  REQUIRE(second_rc == 0);
  const auto log = f.server->log();
  std::uint64_t moved = 0;
  for (const auto& r : data_requests(log)) {
    INFO(r.to_json());
    CHECK(r.status == 206);
    auto rr = parse_range(r.range);
    REQUIRE(rr);
    moved += r.body_bytes;
    for (const auto& e : before.extents) CHECK_FALSE(intersects(*rr, e));
  }
  CHECK(moved == big_model().size() - total(normalized(before.extents)));
  check_request_rules(log, f.etag);
  CHECK(sha256_hex(read_file(f.tmp / "out" / kFile)) == f.sha);
  CHECK(read_file(f.tmp / "out" / "config.json") == read_file(f.root / kRepo / "config.json"));
  const Meta after = read_meta(f.cache, f.sha);  // verified whole: renamed to its sha256
  CHECK(after.complete);
  CHECK_FALSE(read_meta(f.cache, f.blob_id).exists);
  CHECK(cache_verify(f.sha, f.cache.string()));
}

TEST_CASE("fetch: two CLI processes fetching overlapping tensors into one cache at once: both exit 0, outputs exact, cache verifies",
          "[fetch][concurrency][cli]") {
  Fixture f(15);
  std::vector<std::string> a_names, b_names;
  for (int i = 2; i < 16; ++i) a_names.push_back("layers." + std::to_string(i) + ".weight");
  for (int i = 8; i < 22; ++i) b_names.push_back("layers." + std::to_string(i) + ".weight");
  b_names.push_back("layers.9.bias");
  auto args = [&](const std::vector<std::string>& names, const std::string& out) {
    std::vector<std::string> a = {"get", std::string("hf://") + kRepo};
    a.insert(a.end(), names.begin(), names.end());
    a.insert(a.end(), {"-o", (f.tmp / out).string(), "--endpoint", f.server->endpoint(), "--chunk-size", "65536",
                       "--connections", "3", "-q"});
    return a;
  };
  const auto env = child_env(f.cache, f.hf_home);
  tftest::Child a = spawn(args(a_names, "a.safetensors"), env, f.tmp / "a.err");
  tftest::Child b = spawn(args(b_names, "b.safetensors"), env, f.tmp / "b.err");
  const int rc_a = a.wait();
  const int rc_b = b.wait();
  INFO("a: " << read_file(f.tmp / "a.err"));
  INFO("b: " << read_file(f.tmp / "b.err"));
  CHECK(rc_a == 0);
  CHECK(rc_b == 0);
  CHECK(sha256_hex(read_file(f.tmp / "a.safetensors")) == sha256_hex(local_get(f, a_names)));
  CHECK(sha256_hex(read_file(f.tmp / "b.safetensors")) == sha256_hex(local_get(f, b_names)));
  const auto log = f.server->log();
  check_request_rules(log, f.etag);
  for (const auto& r : data_requests(log)) {
    INFO(r.to_json());
    CHECK(r.status == 206);
  }
  auto list = cache_list(f.cache.string());
  REQUIRE(list);
  REQUIRE(list->size() == 1);
  CHECK(list->front().id == f.blob_id);
  CHECK(cache_verify(f.blob_id, f.cache.string()));
  check_extents_hold_source(f.cache, f.blob_id, big_model());
  // Both selections are recorded as present: fetching their union moves nothing.
  Checkpoint c = f.open();
  std::vector<std::string> both = a_names;
  both.insert(both.end(), b_names.begin(), b_names.end());
  std::sort(both.begin(), both.end());
  both.erase(std::unique(both.begin(), both.end()), both.end());
  f.server->clear_log();
  auto s = c.fetch(pick(c, both), small_chunks());
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s);
  CHECK(s->bytes_transferred == 0);
  CHECK(s->requests == 0);
  CHECK(f.server->log().empty());
  for (const auto& n : {"layers.2.weight", "layers.12.weight", "layers.21.weight", "layers.9.bias"}) {
    check_view(c, n, big_model());
  }
}

TEST_CASE("fetch: a cache another process is still making (blobs/ there, snapshots/ not yet) when the Checkpoint "
          "opens: the fetch makes the rest and records its snapshot",
          "[fetch][concurrency][cache]") {
  // The race the two-process test above can hit: one process has made ROOT/blobs but not yet
  // ROOT/snapshots when the other opens the cache to look for blobs; its later fetch must not
  // write the snapshot manifest into a directory it never opened (EBADF).
  Fixture f;
  fs::create_directories(f.cache / "blobs");
  fs::permissions(f.cache, fs::perms::owner_all, fs::perm_options::replace);
  fs::permissions(f.cache / "blobs", fs::perms::owner_all, fs::perm_options::replace);
  REQUIRE_FALSE(fs::exists(f.cache / "snapshots"));
  Checkpoint c = f.open();
  const auto sel = pick(c, kSelection);
  auto s = c.fetch(sel, small_chunks());
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s);
  CHECK(s->bytes_transferred > 0);
  CHECK(fs::is_directory(f.cache / "snapshots"));
  CHECK_FALSE(fs::is_empty(f.cache / "snapshots"));
  check_view(c, "layers.9.weight", big_model());
}

// ======================================================================== full disk

TEST_CASE("fetch: a full disk fails fetch_all with Io naming the file and the full disk; only durable extents are recorded",
          "[fetch][disk]") {
  Fixture f;
  const fs::path disk = f.tmp / "small-disk";
  tftest::ScopedTmpfs tmpfs(disk, "2M");
  if (!tmpfs.mounted()) {
    WARN("cannot mount a tmpfs on " << disk << " (" << tmpfs.error() << "): skipped");
    return;
  }
  // (A tmpfs is mounted 1777: the cache, which must be writable by the user only, lives below.)
  const fs::path cache = disk / "cache";
  REQUIRE(big_model().size() > 2u << 20);
  {
    OpenOptions o = f.open_options();
    o.cache_dir = cache.string();
    Checkpoint c = f.open(std::string("hf://") + kRepo, o);
    f.server->clear_log();
    auto stats = c.fetch_all(small_chunks(4));
    REQUIRE_FALSE(stats);
    INFO(stats.error().message);
    CHECK(stats.error().code == ErrorCode::Io);
    CHECK(exit_code(stats.error().code) == 1);
    CHECK_THAT(stats.error().message, Catch::Contains("full"));
    CHECK_THAT(stats.error().message, Catch::Contains(kFile));
    check_request_rules(f.server->log(), f.etag);
    const Meta m = read_meta(cache, f.blob_id);
    REQUIRE(m.exists);
    CHECK_FALSE(m.complete);
    INFO("recorded: " << describe(m.extents));
    CHECK(total(m.extents) < (2u << 20));
    check_extents_hold_source(cache, f.blob_id, big_model());
    // Views of tensors inside the recorded extents are exact; others are NotFetched.
    for (const auto& t : c.tensors()) {
      const ByteRange r = c.header(0)->file_range(*t.info);
      auto v = c.view(t);
      if (covered(m.extents, r)) {
        REQUIRE(v);
        CHECK(std::memcmp(v->bytes.data(), big_model().data() + r.offset, r.length) == 0);
      } else {
        REQUIRE_FALSE(v);
        CHECK(v.error().code == ErrorCode::NotFetched);
      }
    }
  }
}


TEST_CASE("fetch: a download whose bytes do not hash to the sha256 the Hub named is Integrity (exit 4) and discarded",
          "[fetch][verify]") {
  Fixture f;  // the server hashed org/big/model.safetensors on start (sha)
  // The file changes on disk after the server named its sha256, keeping its size and mtime (the
  // server's hash cache key): it now serves other bytes under the same X-Linked-Etag and ETag,
  // as a corrupt CDN would.
  const fs::path served = f.root / kRepo / kFile;
  const auto mtime = fs::last_write_time(served);
  std::string changed = big_model();
  changed[changed.size() - 100] = static_cast<char>(changed[changed.size() - 100] ^ 0x01);
  write_file(served, changed);
  fs::last_write_time(served, mtime);
  REQUIRE(f.server->file_sha256(kRepo, kFile) == f.sha);
  Checkpoint c = f.open();
  f.server->clear_log();
  auto stats = c.fetch_all(small_chunks());
  REQUIRE_FALSE(stats);
  INFO(stats.error().message);
  CHECK(stats.error().code == ErrorCode::Integrity);
  CHECK(exit_code(stats.error().code) == 4);
  CHECK_THAT(stats.error().message, Catch::Contains("sha256") && Catch::Contains(f.sha) &&
                                        Catch::Contains(kFile) && Catch::Contains("discarded"));
  // Every byte was transferred once (the hash needs all of them), with the pinned ETag.
  settle(*f.server);
  std::uint64_t moved = 0;
  for (const auto& r : data_requests(f.server->log())) {
    CHECK(r.status == 206);
    CHECK(r.if_match == f.etag);
    moved += r.body_bytes;
  }
  CHECK(moved == changed.size() - std::min<std::uint64_t>(changed.size(), kWindow));
  // Nothing of it is served: no extent recorded, not complete, views refused.
  const Meta meta = read_meta(f.cache, f.blob_id);
  CHECK(meta.extents.empty());
  auto list = cache_list(f.cache.string());
  REQUIRE(list);
  REQUIRE(list->size() == 1);
  CHECK_FALSE(list->front().complete);
  CHECK(list->front().present == 0);
  const TensorRef* t = c.find("layers.23.weight");
  REQUIRE(t);
  auto view = c.view(*t);
  REQUIRE_FALSE(view);
  CHECK(view.error().code == ErrorCode::NotFetched);
  // save_files refuses what is not complete.
  auto saved = c.save_files((f.tmp / "out").string());
  REQUIRE_FALSE(saved);
  CHECK(saved.error().code == ErrorCode::NotFetched);
  CHECK_FALSE(fs::exists(f.tmp / "out" / kFile));
}

TEST_CASE("fetch: a cache blob that cannot be read is reported by view as that error, not as 'not fetched'; the open "
          "still succeeds",
          "[fetch][cache][disk]") {
  Fixture f;
  {
    Checkpoint c = f.open();
    REQUIRE(c.fetch(pick(c, {"layers.5.weight"}), small_chunks()));
  }
  // A structural disk fault: the blob's meta.json is a directory (reading it fails, EISDIR).
  const fs::path meta = f.cache / "blobs" / f.blob_id / "meta.json";
  REQUIRE(fs::exists(meta));
  fs::remove(meta);
  fs::create_directory(meta);
  Checkpoint c = f.open();  // inspecting needs no blob
  auto v = c.view(*c.find("layers.5.weight"));
  REQUIRE_FALSE(v);
  INFO(v.error().message);
  CHECK(v.error().code == ErrorCode::Io);
  CHECK_THAT(v.error().message, Catch::Contains(meta.string()) && Catch::Contains(kFile));
}

// ======================================================================== private views and read

namespace {

// A private (copy-on-write) view of the tensor `name`; fails the test when there is none.
PrivateTensorView private_view_of(const Checkpoint& c, const std::string& name) {
  const TensorRef* ref = c.find(name);
  REQUIRE(ref != nullptr);
  auto v = c.private_view(*ref);
  INFO(name << ": " << (v ? std::string() : v.error().message));
  REQUIRE(v);
  CHECK(v->name == name);
  return std::move(*v);
}

// The bytes `v` shows equal the source file's bytes of range `r`.
bool shows(const PrivateTensorView& v, const std::string& source, ByteRange r) {
  return v.bytes.size() == r.length && std::memcmp(v.bytes.data(), source.data() + r.offset, r.length) == 0;
}

// Writes `fill` over every byte of `v`; the view reads it back.
void scribble(const PrivateTensorView& v, unsigned char fill) {
  std::memset(v.bytes.data(), fill, v.bytes.size());
  CHECK(std::all_of(v.bytes.begin(), v.bytes.end(), [&](std::byte b) { return b == std::byte{fill}; }));
}

// org/big's layers.N.weight (F32 [64, 512]) rows [r0, r1) x columns [c0, c1), row-major, as the
// source file holds them (independent of the slice planner).
std::string weight_block(const Fixture& f, int layer, std::uint64_t r0, std::uint64_t r1, std::uint64_t c0,
                         std::uint64_t c1) {
  const ByteRange base = c_range(f, "layers." + std::to_string(layer) + ".weight");
  std::string out;
  for (std::uint64_t r = r0; r < r1; ++r) out += big_model().substr(base.offset + (r * kCols + c0) * 4, (c1 - c0) * 4);
  return out;
}

// Checkpoint::read of `sel` into a buffer of its exact size.
Result<std::string> read_selection(const Checkpoint& c, const Selection& sel) {
  std::string out(sel.plan.nbytes, '\0');
  auto r = c.read(sel, std::as_writable_bytes(std::span(out.data(), out.size())));
  if (!r) return fail(r.error());
  return out;
}

const std::uint64_t kPage = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));

}  // namespace

TEST_CASE("views: a private view of a local file is writable copy-on-write; the file, view() and other Checkpoints keep "
          "the original bytes; private views of one Checkpoint share the write; they outlive the Checkpoint",
          "[views][private]") {
  Fixture f;
  const fs::path path = f.root / kRepo / kFile;
  const std::string& source = big_model();
  const std::string name = "layers.3.weight";
  const ByteRange r = c_range(f, name);
  std::optional<PrivateTensorView> kept;
  {
    Checkpoint c = f.open(path.string());
    PrivateTensorView a = private_view_of(c, name);
    CHECK(a.dtype == DType::F32);
    CHECK(std::vector<std::uint64_t>(a.shape.begin(), a.shape.end()) == std::vector<std::uint64_t>{kRows, kCols});
    CHECK(shows(a, source, r));
    scribble(a, 0xAB);
    // Another private view of the same tensor shares the file's private mapping (as safetensors'
    // tensors share one torch storage): it sees the write.
    PrivateTensorView b = private_view_of(c, name);
    CHECK(b.bytes.data() == a.bytes.data());
    CHECK(std::all_of(b.bytes.begin(), b.bytes.end(), [](std::byte x) { return x == std::byte{0xAB}; }));
    // The shared view, and the neighbours on the written pages (private or not), are unchanged.
    check_view(c, name, source);
    check_view(c, "layers.3.bias", source);
    check_view(c, "layers.4.bias", source);
    CHECK(shows(private_view_of(c, "layers.3.bias"), source, c_range(f, "layers.3.bias")));
    CHECK(shows(private_view_of(c, "layers.4.bias"), source, c_range(f, "layers.4.bias")));
    Checkpoint other = f.open(path.string());
    check_view(other, name, source);
    CHECK(shows(private_view_of(other, name), source, r));
    kept = a;  // a copy shares the mapping
  }
  // The bytes stay valid (and keep the write) after the Checkpoint is gone; the file never changed.
  REQUIRE(kept);
  CHECK(std::all_of(kept->bytes.begin(), kept->bytes.end(), [](std::byte b) { return b == std::byte{0xAB}; }));
  CHECK(read_file(path) == source);
  // An empty tensor has an empty view and no mapping.
  const fs::path empty_file = f.tmp / "empty.safetensors";
  const std::string header = R"({"e":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]}})";
  write_file(empty_file, le64(header.size()) + header);
  Checkpoint e = f.open(empty_file.string());
  PrivateTensorView ev = private_view_of(e, "e");
  CHECK(ev.bytes.empty());
  CHECK(ev.owner == nullptr);
}

TEST_CASE("views: a private view of a cache blob is writable copy-on-write; the blob and other readers keep the fetched "
          "bytes; a tensor whose pages are not all in the cache is mapped on its own, so a neighbour fetched after a write "
          "into a shared page is served exactly",
          "[views][private]") {
  Fixture f;
  const std::string& source = big_model();
  Checkpoint c = f.open();
  const std::string a_name = "layers.7.weight", b_name = "layers.8.bias";
  const ByteRange ra = c_range(f, a_name), rb = c_range(f, b_name);
  REQUIRE(ra.end() == rb.offset);
  REQUIRE((ra.end() - 1) / kPage == rb.offset / kPage);  // b starts on a's last page
  // Only bytes committed to the cache are handed out.
  auto early = c.private_view(*c.find(a_name));
  REQUIRE_FALSE(early);
  CHECK(early.error().code == ErrorCode::NotFetched);
  CHECK_THAT(early.error().message, Catch::Contains(a_name) && Catch::Contains("not in the cache"));

  REQUIRE(c.fetch(pick(c, {a_name}), small_chunks()));
  const fs::path data = f.cache / "blobs" / f.blob_id / "data";
  const std::string blob_before = read_file(data);
  PrivateTensorView a = private_view_of(c, a_name);
  CHECK(shows(a, source, ra));
  // a's first and last pages hold bytes of its neighbours, not in the cache: a has a mapping of
  // its own, so the write below (which copies a's last page, with the first bytes of b) is seen
  // by no other view.
  scribble(a, 0x5A);
  CHECK(read_file(data) == blob_before);
  check_view(c, a_name, source);
  PrivateTensorView a2 = private_view_of(c, a_name);
  CHECK(a2.bytes.data() != a.bytes.data());
  CHECK(shows(a2, source, ra));

  f.server->clear_log();
  REQUIRE(c.fetch(pick(c, {b_name}), small_chunks()));
  CHECK_FALSE(data_requests(f.server->log()).empty());
  // b is served from the cache's bytes, not from a's copied page.
  CHECK(shows(private_view_of(c, b_name), source, rb));
  check_view(c, b_name, source);
  check_extents_hold_source(f.cache, f.blob_id, source);
  // A new Checkpoint (another reader of the cache) sees the fetched bytes; `a` keeps its write.
  Checkpoint other = f.open();
  check_view(other, a_name, source);
  CHECK(shows(private_view_of(other, a_name), source, ra));
  CHECK(std::all_of(a.bytes.begin(), a.bytes.end(), [](std::byte x) { return x == std::byte{0x5A}; }));

  // Once every byte on its pages is in the cache, a tensor's private views share the file's
  // private mapping: a write is seen by the next private view, never by the blob or view().
  REQUIRE(c.fetch(pick(c, {"layers.6.weight", "layers.7.bias", "layers.8.weight"}), small_chunks()));
  PrivateTensorView s1 = private_view_of(c, a_name);
  CHECK(shows(s1, source, ra));
  scribble(s1, 0x33);
  PrivateTensorView s2 = private_view_of(c, a_name);
  CHECK(s2.bytes.data() == s1.bytes.data());
  CHECK(std::all_of(s2.bytes.begin(), s2.bytes.end(), [](std::byte x) { return x == std::byte{0x33}; }));
  CHECK(shows(private_view_of(c, b_name), source, rb));
  check_view(c, a_name, source);
  check_extents_hold_source(f.cache, f.blob_id, source);
  CHECK(shows(private_view_of(other, a_name), source, ra));
}

TEST_CASE("views: Checkpoint::read copies a whole tensor or a slice (local, and remote from the cache without a request); "
          "a buffer of the wrong size is InvalidArgument; remote bytes not fetched are NotFetched",
          "[views][read]") {
  Fixture f;
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"layers.2.weight", weight_block(f, 2, 0, kRows, 0, kCols)},
      {"layers.2.weight[10:12, 128:256]", weight_block(f, 2, 10, 12, 128, 256)},
      {"layers.2.weight[5]", weight_block(f, 2, 5, 6, 0, kCols)},
      {"layers.2.bias[100:104]", big_model().substr(c_range(f, "layers.2.bias").offset + 400, 16)},
  };
  Checkpoint local = f.open((f.root / kRepo / kFile).string());
  Checkpoint remote = f.open();
  for (const auto& k : cases) {
    INFO(k.text);
    const Selection l = pick(local, {k.text}).at(0);
    REQUIRE(l.plan.nbytes == k.expected.size());
    auto got = read_selection(local, l);
    INFO((got ? std::string() : got.error().message));
    REQUIRE(got);
    CHECK(*got == k.expected);
  }
  // Remote: nothing is read before it is in the cache; a fetched slice is read without its tensor.
  const Selection slice = pick(remote, {cases[1].text}).at(0);
  const Selection whole = pick(remote, {cases[0].text}).at(0);
  auto missing = read_selection(remote, slice);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == ErrorCode::NotFetched);
  REQUIRE(remote.fetch(std::vector<Selection>{slice}, small_chunks()));
  f.server->clear_log();
  auto got = read_selection(remote, slice);
  INFO((got ? std::string() : got.error().message));
  REQUIRE(got);
  CHECK(*got == cases[1].expected);
  auto not_whole = read_selection(remote, whole);
  REQUIRE_FALSE(not_whole);
  CHECK(not_whole.error().code == ErrorCode::NotFetched);
  REQUIRE(remote.fetch(pick(remote, {cases[0].text, cases[3].text}), small_chunks()));
  f.server->clear_log();
  for (const auto& k : cases) {
    INFO(k.text);
    auto r = read_selection(remote, pick(remote, {k.text}).at(0));
    INFO((r ? std::string() : r.error().message));
    REQUIRE(r);
    CHECK(*r == k.expected);
  }
  CHECK(f.server->log().empty());  // read never sends a request
  // A buffer one byte too small or too large, or empty, is refused naming the tensor and sizes.
  for (const Checkpoint* c : {&local, &remote}) {
    const Selection s = pick(*c, {cases[1].text}).at(0);
    for (const std::size_t size : {s.plan.nbytes - 1, s.plan.nbytes + 1, std::size_t{0}}) {
      INFO("buffer of " << size << " bytes");
      std::string buf(size, '\x7f');
      auto r = c->read(s, std::as_writable_bytes(std::span(buf.data(), buf.size())));
      REQUIRE_FALSE(r);
      CHECK(r.error().code == ErrorCode::InvalidArgument);
      CHECK_THAT(r.error().message, Catch::Contains("'layers.2.weight'") &&
                                        Catch::Contains(std::to_string(s.plan.nbytes) + " bytes, the buffer " +
                                                        std::to_string(size)));
      CHECK(buf == std::string(size, '\x7f'));  // nothing written
    }
  }
}

// ======================================================================== fetch and write at once

namespace {

// Files in `dir` whose names start with `prefix` (an output's temporary names).
std::vector<fs::path> files_starting(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().starts_with(prefix)) out.push_back(e.path());
  }
  return out;
}

}  // namespace

TEST_CASE("fetch_and_write: the output is written while the fetch runs, equals a local get, travels the same "
          "requests as fetch(); a re-run from the cache sends nothing",
          "[fetch][fetch-and-write]") {
  Fixture f;
  Checkpoint c = f.open();
  f.server->clear_log();
  const auto sel = pick(c, kSelection);
  const Ranges planned = plan(wanted_ranges(c, sel), {{0, kWindow}}, 0, kChunk);
  REQUIRE(planned.size() >= 8);
  // One slow connection, chunks in file order: the first tensors are complete long before the
  // last, so a writer that waits for the whole fetch would write nothing meanwhile.
  f.server->slow_connections(512 << 10, 1);
  const fs::path out = f.tmp / "both.safetensors";
  FetchOptions fo = small_chunks(1);
  std::uint64_t max_tmp_size_before_end = 0;
  std::uint64_t total_to_fetch = 0;
  fo.progress = [&](const FetchProgress& p) {
    total_to_fetch = p.bytes_total;
    if (p.bytes_done < p.bytes_total) {
      for (const auto& t : files_starting(f.tmp.path(), "both.safetensors.tmp")) {
        std::error_code ec;
        max_tmp_size_before_end = std::max<std::uint64_t>(max_tmp_size_before_end, fs::file_size(t, ec));
      }
    }
    return true;
  };
  auto stats = c.fetch_and_write(sel, out.string(), fo);
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  f.server->slow_connections(0, 1);
  const std::string expected = local_get(f, kSelection);
  INFO("largest temporary output seen while bytes were still arriving: " << max_tmp_size_before_end << " of "
                                                                        << expected.size() << " bytes");
  CHECK(max_tmp_size_before_end > expected.size() / 4);
  CHECK(read_file(out) == expected);
  CHECK(files_starting(f.tmp.path(), "both.safetensors.tmp").empty());
  // The requests are exactly the plan's, each chunk once, as fetch() sends them.
  settle(*f.server);
  const auto data = data_requests(f.server->log());
  CHECK(stats->requests == planned.size());
  CHECK(data.size() == planned.size());
  std::multiset<std::string> asked, wanted;
  for (const auto& r : data) asked.insert(r.range);
  for (const auto& p : planned) wanted.insert(range_header(p));
  CHECK(asked == wanted);
  CHECK(total_to_fetch == total(planned));
  check_request_rules(f.server->log(), f.etag);
  // The cache holds them (committed, durable): a new Checkpoint writes the same file without a
  // tensor request.
  Checkpoint again = f.open();
  f.server->clear_log();
  const fs::path out2 = f.tmp / "again.safetensors";
  auto cached = again.fetch_and_write(pick(again, kSelection), out2.string(), small_chunks(1));
  REQUIRE(cached);
  CHECK(cached->requests == 0);
  CHECK(data_requests(f.server->log()).empty());
  CHECK(read_file(out2) == expected);
}

TEST_CASE("fetch_and_write: a failed fetch leaves no output and no temporary file, and reports the fetch's error "
          "(URL, exit 3); a failed write stops the fetch and reports the write's error",
          "[fetch][fetch-and-write][faults]") {
  Fixture f;
  const fs::path out = f.tmp / "out.safetensors";
  SECTION("the fetch fails: drops beyond the retries") {
    OpenOptions o = f.open_options();
    o.max_retries = 1;
    Checkpoint c = f.open(std::string("hf://") + kRepo, o);
    f.server->drop_after(20000, -1, "/cdn/");
    auto stats = c.fetch_and_write(pick(c, kSelection), out.string(), small_chunks(2));
    REQUIRE_FALSE(stats);
    INFO(stats.error().message);
    CHECK(stats.error().code == ErrorCode::Network);
    CHECK(exit_code(stats.error().code) == 3);
    CHECK_THAT(stats.error().message, Catch::Contains("/cdn/" + f.sha));
    CHECK_FALSE(fs::exists(out));
    CHECK(files_starting(f.tmp.path(), "out.safetensors").empty());
    check_extents_hold_source(f.cache, f.blob_id, big_model());
  }
  SECTION("the write fails: the output is a directory") {
    Checkpoint c = f.open();
    f.server->clear_log();
    fs::create_directories(out);
    f.server->slow_connections(64 << 10, 1);  // the whole selection would take seconds
    const auto t0 = std::chrono::steady_clock::now();
    auto stats = c.fetch_and_write(pick(c, kSelection), out.string(), small_chunks(1));
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    f.server->slow_connections(0, 1);
    REQUIRE_FALSE(stats);
    INFO(stats.error().message << " (after " << wall << " s)");
    CHECK(stats.error().code == ErrorCode::InvalidArgument);
    CHECK_THAT(stats.error().message, Catch::Contains("is a directory"));
    CHECK(wall < 1.5);
    settle(*f.server);
    CHECK(data_requests(f.server->log()).size() <= 2);  // stopped at its first chunk
    CHECK(fs::is_directory(out));
    CHECK(fs::is_empty(out));
  }
}

TEST_CASE("fetch_and_write: the caller's cancel token stops the fetch and the write (Cancelled); no output is left",
          "[fetch][fetch-and-write][cancel]") {
  Fixture f;
  Checkpoint c = f.open();
  f.server->slow_connections(64 << 10, 1);
  const fs::path out = f.tmp / "cancelled.safetensors";
  FetchOptions fo = small_chunks(1);
  WriteOptions wo;
  const bool through_write = GENERATE(false, true);
  const CancelToken token = CancelToken::make();
  (through_write ? wo.cancel : fo.cancel) = token;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    token.cancel();
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto stats = c.fetch_and_write(pick(c, kSelection), out.string(), fo, wo);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  canceller.join();
  f.server->slow_connections(0, 1);
  INFO("token of the " << (through_write ? "write" : "fetch") << " options; after " << wall << " s");
  REQUIRE_FALSE(stats);
  INFO(stats.error().message);
  CHECK(stats.error().code == ErrorCode::Cancelled);
  CHECK(wall < 1.0);
  CHECK_FALSE(fs::exists(out));
  CHECK(files_starting(f.tmp.path(), "cancelled.safetensors").empty());
  check_extents_hold_source(f.cache, f.blob_id, big_model());
}

TEST_CASE("fetch_and_write_stream: a pipe receives the bytes a local get writes, while they arrive",
          "[fetch][fetch-and-write][stream]") {
  Fixture f;
  Checkpoint c = f.open();
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::string received;
  std::thread reader([&] {
    char buf[65536];
    while (true) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      received.append(buf, static_cast<std::size_t>(n));
    }
  });
  auto stats = c.fetch_and_write_stream(pick(c, kSelection), fds[1], small_chunks(2));
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  CHECK(stats->requests >= 8);
  CHECK(received == local_get(f, kSelection));
}

// ======================================================================== warm data connections

TEST_CASE("data plane: warm_connections opens the N data connections during the open (one GET of the location's "
          "first byte each); the first fetch's requests all go out on them, none on a new TCP connection",
          "[fetch][data-plane][warm]") {
  Fixture f;
  // The file straight from the "CDN" host (not the Hub endpoint, toward which nothing is warmed).
  const std::string url = f.server->cdn_url(kRepo, kFile);
  constexpr std::size_t kN = 4;
  OpenOptions o = f.open_options();
  o.connections = kN;
  o.warm_connections = true;
  Checkpoint c = f.open(url, o);
  const auto sel = pick(c, kSelection);
  FetchOptions fo = small_chunks(kN);
  auto stats = c.fetch(sel, fo);
  INFO((stats ? std::string() : stats.error().message));
  REQUIRE(stats);
  settle(*f.server);
  const auto log = f.server->log();
  std::string lines;
  for (const auto& r : log) lines += r.to_json() + "\n";
  INFO(lines);
  // The warm-ups: N requests of the location's first byte, each on a connection of its own.
  std::set<int> warm_ports;
  std::size_t warm = 0;
  for (const auto& r : of_kind(log, "cdn")) {
    if (r.range != "bytes=0-0") continue;
    ++warm;
    CHECK(r.status == 206);
    CHECK(r.body_bytes == 1);
    warm_ports.insert(r.client_port);
  }
  CHECK(warm == kN);
  CHECK(warm_ports.size() == kN);
  // The fetch: every tensor request on one of those connections; it counts only its own.
  const auto data = data_requests(log);
  const Ranges planned = plan(wanted_ranges(c, sel), {{0, kWindow}}, 0, kChunk);
  CHECK(stats->requests == planned.size());
  std::size_t tensor_requests = 0;
  for (const auto& r : data) {
    if (r.range == "bytes=0-0") continue;
    ++tensor_requests;
    INFO(r.to_json());
    CHECK(warm_ports.count(r.client_port) == 1);
  }
  CHECK(tensor_requests == planned.size());
  for (const auto& name : {"layers.5.weight", "layers.15.weight"}) check_view(c, name, big_model());
  // A second fetch reuses the same connections (one pool per checkpoint).
  f.server->clear_log();
  auto again = c.fetch(pick(c, {"layers.11.weight", "layers.12.weight"}), small_chunks(kN));
  REQUIRE(again);
  settle(*f.server);
  for (const auto& r : data_requests(f.server->log())) {
    INFO(r.to_json());
    CHECK(warm_ports.count(r.client_port) == 1);
  }
}

TEST_CASE("data plane: warming is best effort: a server that fails the warm-ups, or never answers them, changes "
          "nothing but the time; a checkpoint destroyed while they run goes at once",
          "[fetch][data-plane][warm]") {
  Fixture f;
  const std::string url = f.server->cdn_url(kRepo, kFile);
  OpenOptions o = f.open_options();
  o.connections = 3;
  o.warm_connections = true;
  SECTION("the warm-ups fail (503, not retried; the open's own requests retry): the open and the fetch succeed") {
    f.server->fail_next(3, 503, 0, false);
    Checkpoint c = f.open(url, o);
    auto stats = c.fetch(pick(c, kSelection), small_chunks(3));
    INFO((stats ? std::string() : stats.error().message));
    REQUIRE(stats);
    check_view(c, "layers.5.weight", big_model());
  }
  SECTION("every CDN body stalls: an open cancelled meanwhile returns at once, its warm-ups stopped with it") {
    f.server->stall_after(0, -1, "/cdn/", 10000);
    o.stall_timeout_ms = 20000;
    o.cancel = CancelToken::make();
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      o.cancel.cancel();
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto c = Checkpoint::open(url, o);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    canceller.join();
    f.server->reset_switches();
    REQUIRE_FALSE(c);
    INFO(c.error().message << " after " << wall << " s");
    CHECK(c.error().code == ErrorCode::Cancelled);
    CHECK(wall < 1.5);
  }
}

TEST_CASE("data plane: nothing is warmed toward the Hub endpoint (a resolve URL given as a URL location): its "
          "resolves count against a rate limit", "[fetch][data-plane][warm]") {
  Fixture f;
  OpenOptions o = f.open_options();
  o.warm_connections = true;
  Checkpoint c = f.open(f.server->endpoint() + "/" + kRepo + "/resolve/main/" + kFile, o);
  REQUIRE(c.fetch(pick(c, {"layers.5.weight"}), small_chunks(2)));
  settle(*f.server);
  for (const auto& r : f.server->log()) {
    INFO(r.to_json());
    CHECK(r.range != "bytes=0-0");
  }
  CHECK(of_kind(f.server->log(), "resolve").size() == 1);  // the open's, once
}
