// SPDX-License-Identifier: Apache-2.0
// Cancellation against the Hub-like test server (issue 14, item 6): SIGINT/SIGTERM to the CLI
// while the server stalls (during the header read of `inspect`, mid-`get`, mid-`download`) end
// the run within a second with exit 130/143, leave no output or temporary file, and keep in
// the cache only whole chunks holding the source's bytes, so that a re-run transfers only the
// rest (checked through the server's request log) and writes the exact bytes. The library's
// CancelToken does the same for open, fetch and write.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hub_server.hpp"
#include "support/files.hpp"
#include "support/process.hpp"
#include "support/ranges.hpp"
#include "tensorfetch/tensorfetch.hpp"

namespace fs = std::filesystem;
using namespace tensorfetch;
using namespace std::chrono_literals;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {

using tftest::intersects;
using tftest::parse_range;

constexpr const char* kRepo = "org/big";
constexpr const char* kFile = "model.safetensors";
constexpr std::uint64_t kWindow = 256 << 10;  // the header window of an open
constexpr std::uint64_t kChunk = 64 << 10;    // --chunk-size of the tests

// org/big/model.safetensors: 32 F32 tensors of 128 KiB (4 MiB), varied bytes.
const std::string& source() {
  static const std::string file = [] {
    std::vector<OutputTensor> tensors;
    for (int i = 0; i < 32; ++i) tensors.push_back({"layers." + std::to_string(i) + ".weight", DType::F32, {64, 512}});
    auto layout = layout_file(tensors, Metadata{{"format", "pt"}});
    REQUIRE(layout);
    std::string bytes = layout->prefix;
    bytes.resize(layout->file_size);
    std::uint64_t x = 88172645463325252ull;
    for (std::size_t i = layout->prefix.size(); i < bytes.size(); ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      bytes[i] = static_cast<char>(x);
    }
    return bytes;
  }();
  return file;
}

struct Extents {
  bool complete = false;
  std::vector<ByteRange> ranges;
  [[nodiscard]] std::uint64_t beyond_window() const {
    std::uint64_t n = 0;
    for (const auto& r : ranges) n += r.end() > kWindow ? r.end() - std::max(r.offset, kWindow) : 0;
    return n;
  }
};

// A server on a root holding org/big, a cache and a Hugging Face home of the test's own.
struct Fixture {
  tftest::TempDir tmp{"tf-signals"};
  fs::path cache = tmp / "cache";
  fs::path hf_home = tmp / "hf-home";
  std::unique_ptr<HubServer> server;
  std::string blob_id;

  explicit Fixture(int latency_ms = 0) {
    tftest::write_file(tmp / "root" / kRepo / kFile, source());
    tftest::write_file(tmp / "root" / kRepo / "config.json", "{\"model_type\": \"test\"}\n");
    fs::create_directories(hf_home / "hub");
    testing::Options o;
    o.root = tmp / "root";
    o.latency_ms = latency_ms;
    server = std::make_unique<HubServer>(o);
    server->start();
    blob_id = server->file_sha256(kRepo, kFile);
  }
  ~Fixture() { server->stop(); }

  [[nodiscard]] std::vector<std::string> env() const {
    return tftest::environment_with({"HF_", "TENSORFETCH_CACHE=", "XDG_CACHE_HOME=", "HUGGINGFACE_"},
                                    {"TENSORFETCH_CACHE=" + cache.string(), "HF_HOME=" + hf_home.string(),
                                     "HF_HUB_CACHE=" + (hf_home / "hub").string()});
  }
  [[nodiscard]] std::vector<std::string> remote_args() const {
    return {"--endpoint", server->endpoint(), "--chunk-size", std::to_string(kChunk), "--connections", "2",
            "--stall-timeout", "30000", "-q"};
  }

  // The blob of org/big's file: blobs/SHA256-ORIGIN while partial, blobs/SHA256 once verified.
  [[nodiscard]] fs::path blob_dir() const {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache / "blobs", ec)) {
      const std::string name = e.path().filename().string();
      if (name == blob_id || name.starts_with(blob_id + "-")) return e.path();
    }
    return cache / "blobs" / blob_id;
  }

  [[nodiscard]] Extents extents() const {
    Extents e;
    const std::string text = tftest::try_read_file(blob_dir() / "meta.json").value_or("");
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return e;
    e.complete = j.value("complete", false);
    for (const auto& x : j.at("extents")) e.ranges.push_back({x.at(0).get<std::uint64_t>(), x.at(1).get<std::uint64_t>()});
    return e;
  }

  // Every committed byte is the source's.
  void check_cache_holds_source() const {
    const std::string data = tftest::read_file(blob_dir() / "data");
    REQUIRE(data.size() == source().size());
    for (const auto& r : extents().ranges) {
      INFO("extent [" << r.offset << ", " << r.end() << ")");
      CHECK(data.compare(r.offset, r.length, source(), r.offset, r.length) == 0);
    }
  }

  [[nodiscard]] OpenOptions open_options() const {
    OpenOptions o;
    o.endpoint = server->endpoint();
    o.token = std::string();
    o.cache_dir = cache.string();
    o.hf_hub_cache = (hf_home / "hub").string();
    o.offline = false;
    return o;
  }
};

// Sends `sig` to a running child and returns how long it took to exit and its status.
std::pair<std::chrono::milliseconds, std::optional<int>> interrupt(tftest::Child& c, int sig) {
  REQUIRE(c.running());
  const auto start = std::chrono::steady_clock::now();
  c.signal(sig);
  auto rc = c.wait_for(5s);
  return {std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start), rc};
}

}  // namespace

TEST_CASE("signals: SIGTERM to `get` while transfers stall: exit 143 within 1 s, no output, only whole chunks cached; a re-run transfers the rest",
          "[signals][cli]") {
  Fixture f(60);
  const fs::path out_dir = f.tmp / "out";
  fs::create_directories(out_dir);
  const fs::path out = out_dir / "model.safetensors";
  std::vector<std::string> args{"get", std::string("hf://") + kRepo, "-o", out.string()};
  for (const auto& a : f.remote_args()) args.push_back(a);
  const fs::path err = f.tmp / "first.err";
  tftest::Child first(tftest::required_env("TENSORFETCH_BIN"), args, {"", "", err.string()}, f.env());
  // Some chunks committed, then the server stops sending: what is in flight stalls.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (f.extents().beyond_window() < 2 * kChunk && first.running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  f.server->stall_after(0, -1, "/cdn/", 4000);
  std::this_thread::sleep_for(400ms);
  auto [took, rc] = interrupt(first, SIGTERM);
  INFO(tftest::read_file(err));
  REQUIRE(rc.has_value());
  CHECK(*rc == 143);
  CHECK(took < 1000ms);
  CHECK_FALSE(fs::exists(out));
  CHECK(tftest::temp_files(out_dir).empty());
  const Extents before = f.extents();
  CHECK_FALSE(before.complete);
  CHECK(before.beyond_window() >= 2 * kChunk);
  CHECK(before.beyond_window() < source().size() - kWindow);
  f.check_cache_holds_source();

  // The re-run completes, transferring none of what was committed.
  f.server->reset_switches();
  f.server->set_latency_ms(0);
  f.server->clear_log();
  tftest::Child second(tftest::required_env("TENSORFETCH_BIN"), args, {"", "", (f.tmp / "second.err").string()}, f.env());
  REQUIRE(second.wait() == 0);
  {
    // What a local `get` of the source writes.
    auto local = Checkpoint::open((f.tmp / "root" / kRepo / kFile).string());
    REQUIRE(local);
    std::vector<Selector> all{{"*", std::nullopt}};
    auto sel = local->select(all);
    REQUIRE(sel);
    const fs::path expected = f.tmp / "expected.safetensors";
    REQUIRE(local->write(*sel, expected.string()));
    CHECK(tftest::read_file(out) == tftest::read_file(expected));
  }
  std::uint64_t moved = 0;
  for (const auto& r : f.server->log()) {
    // Tensor data only: an open always reads the header window again.
    if (r.kind != "cdn" || r.range.empty() || r.range == "bytes=0-" + std::to_string(kWindow - 1)) continue;
    auto range = parse_range(r.range);
    REQUIRE(range);
    INFO(r.to_json());
    moved += r.body_bytes;
    for (const auto& e : before.ranges) CHECK_FALSE(intersects(*range, e));
  }
  std::uint64_t committed = 0;
  for (const auto& e : before.ranges) committed += e.length;
  CHECK(moved == source().size() - committed);
}

TEST_CASE("signals: SIGINT to `inspect` while the header read stalls: exit 130 within 1 s", "[signals][cli]") {
  Fixture f;
  f.server->stall_after(0, -1, "/cdn/", 4000);
  const fs::path err = f.tmp / "inspect.err";
  tftest::Child c(tftest::required_env("TENSORFETCH_BIN"), {"inspect", std::string("hf://") + kRepo, "--endpoint", f.server->endpoint()},
                  {"", "", err.string()}, f.env());
  std::this_thread::sleep_for(500ms);
  auto [took, rc] = interrupt(c, SIGINT);
  INFO(tftest::read_file(err));
  REQUIRE(rc.has_value());
  CHECK(*rc == 130);
  CHECK(took < 1000ms);
  CHECK_THAT(tftest::read_file(err), Catch::Contains("cancelled"));
}

TEST_CASE("signals: SIGTERM to `download` while transfers stall: exit 143 within 1 s, nothing in the output directory",
          "[signals][cli]") {
  Fixture f(100);
  const fs::path out_dir = f.tmp / "download";
  std::vector<std::string> args{"download", std::string("hf://") + kRepo, "-o", out_dir.string()};
  for (const auto& a : f.remote_args()) args.push_back(a);
  const fs::path err = f.tmp / "download.err";
  tftest::Child c(tftest::required_env("TENSORFETCH_BIN"), args, {"", "", err.string()}, f.env());
  // The open goes through (its header window read is logged), then every transfer stalls.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  auto opened = [&] {
    for (const auto& r : f.server->log()) {
      if (r.kind == "cdn" && r.range == "bytes=0-" + std::to_string(kWindow - 1)) return true;
    }
    return false;
  };
  while (!opened() && c.running() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(2ms);
  f.server->stall_after(0, -1, "/cdn/", 4000);
  std::this_thread::sleep_for(500ms);
  auto [took, rc] = interrupt(c, SIGTERM);
  INFO(tftest::read_file(err));
  REQUIRE(rc.has_value());
  CHECK(*rc == 143);
  CHECK(took < 1000ms);
  CHECK_FALSE(fs::exists(out_dir / kFile));
  if (fs::exists(out_dir)) CHECK(tftest::temp_files(out_dir).empty());
  f.check_cache_holds_source();
}

TEST_CASE("cancel: a CancelToken stops a stalled open and a stalled fetch within 500 ms (Cancelled)", "[cancel]") {
  Fixture f;
  SECTION("open") {
    f.server->stall_after(0, -1, "/cdn/", 4000);
    OpenOptions o = f.open_options();
    o.cancel = CancelToken::make();
    auto canceller = std::async(std::launch::async, [token = o.cancel] {
      std::this_thread::sleep_for(300ms);
      token.cancel();
      return std::chrono::steady_clock::now();
    });
    auto c = Checkpoint::open(std::string("hf://") + kRepo, o);
    const auto returned = std::chrono::steady_clock::now();
    REQUIRE_FALSE(c);
    INFO(c.error().message);
    CHECK(c.error().code == ErrorCode::Cancelled);
    CHECK(returned - canceller.get() < 500ms);
  }
  SECTION("fetch, then a new fetch resumes") {
    auto c = Checkpoint::open(std::string("hf://") + kRepo, f.open_options());
    REQUIRE(c);
    std::vector<Selector> all{{"*", std::nullopt}};
    auto sel = c->select(all);
    REQUIRE(sel);
    f.server->stall_after(0, -1, "/cdn/", 4000);
    FetchOptions fo;
    fo.chunk_size = kChunk;
    fo.cancel = CancelToken::make();
    auto canceller = std::async(std::launch::async, [token = fo.cancel] {
      std::this_thread::sleep_for(300ms);
      token.cancel();
      return std::chrono::steady_clock::now();
    });
    auto stats = c->fetch(*sel, fo);
    const auto returned = std::chrono::steady_clock::now();
    REQUIRE_FALSE(stats);
    INFO(stats.error().message);
    CHECK(stats.error().code == ErrorCode::Cancelled);
    CHECK(returned - canceller.get() < 500ms);
    // The token stays cancelled until reset: a fetch given it fails at once.
    CHECK_FALSE(c->fetch(*sel, fo));
    fo.cancel.reset();
    f.server->reset_switches();
    auto again = c->fetch(*sel, fo);
    INFO((again ? std::string() : again.error().message));
    REQUIRE(again);
    const TensorRef* t = c->find("layers.31.weight");
    REQUIRE(t != nullptr);
    auto v = c->view(*t);
    REQUIRE(v);
    const ByteRange r = c->header(t->file)->file_range(*t->info);
    CHECK(std::memcmp(v->bytes.data(), source().data() + r.offset, r.length) == 0);
  }
}

TEST_CASE("cancel: a cancelled write leaves neither the output nor a temporary file", "[cancel]") {
  Fixture f;
  auto c = Checkpoint::open((f.tmp / "root" / kRepo / kFile).string());
  REQUIRE(c);
  std::vector<Selector> all{{"*", std::nullopt}};
  auto sel = c->select(all);
  REQUIRE(sel);
  WriteOptions wo;
  wo.cancel = CancelToken::make();
  wo.cancel.cancel();
  const fs::path out = f.tmp / "out" / "copy.safetensors";
  auto w = c->write(*sel, out.string(), wo);
  REQUIRE_FALSE(w);
  CHECK(w.error().code == ErrorCode::Cancelled);
  CHECK_FALSE(fs::exists(out));
  CHECK(tftest::temp_files(f.tmp.path()).empty());
  wo.cancel.reset();
  REQUIRE(c->write(*sel, out.string(), wo));
  CHECK(tftest::read_file(out).size() > source().size() - 4096);
}
