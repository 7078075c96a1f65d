// SPDX-License-Identifier: Apache-2.0
// `OpenOptions::max_rate` (issue 20, item 3): one cap on a fetch's bandwidth, shared by all its
// connections, against the in-process Hub-like server on loopback (which is far faster than
// any cap here, so the cap alone sets the time). A fetch of N bytes at rate R takes about N / R
// however many connections carry it; time a transfer is paused by the cap is never taken for a
// stall or a slow server; a cap below 1 KiB/s is refused.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hub_server.hpp"
#include "one_file_repo.hpp"
#include "support/bytes.hpp"
#include "support/files.hpp"
#include "tensorfetch/tensorfetch.hpp"

namespace fs = std::filesystem;
using namespace tensorfetch;
using tensorfetch::testing::HubServer;
using tftest::data_connections;

namespace {

// The upper time bounds are for optimized builds; sanitized builds (ASan at -O0 in CI) get
// limits this many times looser (lower bounds stay: a cap is never made faster by a sanitizer).
#if defined(__SANITIZE_ADDRESS__)
constexpr double kSlack = 5.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kSlack = 5.0;
#else
constexpr double kSlack = 1.0;
#endif
#else
constexpr double kSlack = 1.0;
#endif

constexpr const char* kRepo = "org/rate";
constexpr std::uint64_t kTensor = 1 << 20;  // bytes per tensor (F32 [262144])
constexpr int kTensors = 9;                  // t0 holds the header window; t1..t8: 8 MiB to fetch

// org/rate/model.safetensors: tensors t0..t8 of 1 MiB each, random-looking bytes.
std::string rate_model() { return tftest::uniform_f32_model(kTensors, kTensor, 11); }

struct Fixture : tftest::OneFileRepo {
  Fixture() : OneFileRepo("tf-rate", kRepo, rate_model(), true) {}

  OpenOptions open_options(std::uint64_t max_rate) const {
    OpenOptions o = OneFileRepo::open_options();
    o.max_rate = max_rate;
    return o;
  }

  // Selectors of t1..t8 (8 MiB; t0 is partly in the open's header window).
  static std::vector<Selector> eight_mib() {
    std::vector<Selector> s;
    for (int i = 1; i < kTensors; ++i) s.push_back(Selector{"t" + std::to_string(i), std::nullopt});
    return s;
  }

  // Every selected tensor's bytes, as the cache serves them, are the source's.
  void check_bytes(const Checkpoint& ckpt, const std::vector<Selection>& selection) const {
    const std::uint64_t data_start = file.size() - kTensor * kTensors;
    for (const auto& s : selection) {
      auto view = ckpt.view(s.ref);
      REQUIRE(view);
      const std::string_view got(reinterpret_cast<const char*>(view->bytes.data()), view->bytes.size());
      CHECK(got == std::string_view(file).substr(data_start + s.ref.info->begin, kTensor));
    }
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("max_rate: 8 MiB at 4 MiB/s takes about 2 s, all connections together under the one cap",
          "[http][fetch][max_rate]") {
  Fixture fx;
  auto connections = GENERATE(as<std::size_t>{}, 1, 16);
  INFO("connections: " << connections);
  auto options = fx.open_options(4 << 20);
  options.connections = connections;
  auto ckpt = Checkpoint::open(std::string("hf://") + kRepo, options);
  REQUIRE(ckpt);
  const auto sels = Fixture::eight_mib();
  auto selection = ckpt->select(sels);
  REQUIRE(selection);
  FetchOptions fetch;
  fetch.chunk_size = 512 << 10;  // 16 chunks: every connection has work
  const auto start = std::chrono::steady_clock::now();
  auto stats = ckpt->fetch(*selection, fetch);
  const double seconds = seconds_since(start);
  REQUIRE(stats);
  INFO("fetch took " << seconds << " s; " << stats->requests << " requests, " << data_connections(*fx.server)
                     << " connections");
  CHECK(stats->bytes_transferred == 8 * kTensor);
  CHECK(stats->retries == 0);
  // 8 MiB / 4 MiB/s = 2 s, less the bucket's first tenth of a second; were the cap per
  // connection, 16 connections would be done in an eighth of a second.
  CHECK(seconds >= 1.6);
  CHECK(seconds <= 3.0 * kSlack);
  if (connections > 1) CHECK(data_connections(*fx.server) >= 8);
  fx.check_bytes(*ckpt, *selection);
}

TEST_CASE("max_rate: the cap holds over consecutive fetches of one checkpoint (one bucket)", "[http][fetch][max_rate]") {
  Fixture fx;
  auto options = fx.open_options(4 << 20);
  options.connections = 8;
  auto ckpt = Checkpoint::open(std::string("hf://") + kRepo, options);
  REQUIRE(ckpt);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1; i < kTensors; ++i) {
    const std::vector<Selector> one = {Selector{"t" + std::to_string(i), std::nullopt}};
    auto selection = ckpt->select(one);
    REQUIRE(selection);
    REQUIRE(ckpt->fetch(*selection));
  }
  const double seconds = seconds_since(start);
  INFO("8 fetches of 1 MiB took " << seconds << " s");
  CHECK(seconds >= 1.6);
  CHECK(seconds <= 3.0 * kSlack);
}

TEST_CASE("max_rate: transfers paused by a low cap are not stalls, nor too slow for min_rate", "[http][fetch][max_rate]") {
  // 512 KiB in 8 chunks over 8 connections at 128 KiB/s: about 3.5 s, each connection waiting
  // its turn for seconds and averaging 16 KiB/s, with a stall timeout of 1 s and a minimum rate
  // of 32 KiB/s. Paused time does not count: no attempt fails, none is retried.
  Fixture fx;
  auto options = fx.open_options(128 << 10);
  options.connections = 8;
  options.stall_timeout_ms = 1000;
  options.min_rate = 32 << 10;
  options.max_retries = 0;  // a stall would fail the fetch at once
  auto ckpt = Checkpoint::open(std::string("hf://") + kRepo, options);
  REQUIRE(ckpt);
  auto named = parse_named_slice("t5[0:131072]");  // the first 512 KiB of t5
  REQUIRE(named);
  const std::vector<Selector> sels = {Selector{named->name, named->slice}};
  auto chosen = ckpt->select(sels);
  REQUIRE(chosen);
  const std::vector<Selection>& selection = *chosen;
  FetchOptions fetch;
  fetch.chunk_size = 64 << 10;
  const auto start = std::chrono::steady_clock::now();
  auto stats = ckpt->fetch(selection, fetch);
  const double seconds = seconds_since(start);
  INFO("fetch took " << seconds << " s");
  REQUIRE(stats);
  CHECK(stats->retries == 0);
  CHECK(stats->chunks == 8);
  CHECK(stats->bytes_transferred == 512 << 10);
  CHECK(seconds >= 3.0);
  CHECK(seconds <= 6.0 * kSlack);
  std::string got(512 << 10, '\0');
  REQUIRE(ckpt->read(selection[0], std::as_writable_bytes(std::span(got))));
  const std::uint64_t t5 = fx.file.size() - kTensor * kTensors + 5 * kTensor;
  CHECK(got == fx.file.substr(t5, 512 << 10));
}

TEST_CASE("max_rate: below 1 KiB/s is refused (InvalidArgument) before anything is read; 0 means no cap",
          "[http][max_rate]") {
  Fixture fx;
  for (std::uint64_t bad : {std::uint64_t{1}, std::uint64_t{1000}, kMinMaxRate - 1}) {
    auto r = Checkpoint::open(std::string("hf://") + kRepo, fx.open_options(bad));
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ErrorCode::InvalidArgument);
    CHECK_THAT(r.error().message, Catch::Contains("max_rate") && Catch::Contains(std::to_string(bad)));
  }
  CHECK(fx.server->request_count() == 0);
  CHECK(Checkpoint::open(std::string("hf://") + kRepo, fx.open_options(kMinMaxRate)));
  CHECK(Checkpoint::open(std::string("hf://") + kRepo, fx.open_options(0)));
}
