// SPDX-License-Identifier: Apache-2.0
// Zero-length tensors through the C++ API (issue 19, item 2): a tensor with a zero in its shape
// needs no byte, so it is served at once -- view, private_view, read of a slice, write --
// local or remote, before any byte of its file is in the cache, and fetching it sends no
// request (the server's log stays empty after the open). A 0-rank scalar needs its bytes: one
// request of exactly them. A file whose every tensor is empty has a data section of 0 bytes.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "hub_server.hpp"
#include "support/bytes.hpp"
#include "support/files.hpp"
#include "tensorfetch/tensorfetch.hpp"

namespace fs = std::filesystem;
using namespace tensorfetch;
using tensorfetch::testing::HubServer;
using tftest::make_safetensors;
using tftest::TempDir;
using tftest::write_file;

namespace {

// a [0,7]; b, 280,000 bytes (past the open's first 256 KiB); c [3,0], a scalar s after it.
const std::string kMixed = R"({"a":{"dtype":"F32","shape":[0,7],"data_offsets":[0,0]},)"
                           R"("b":{"dtype":"F32","shape":[70000],"data_offsets":[0,280000]},)"
                           R"("c":{"dtype":"I64","shape":[3,0],"data_offsets":[280000,280000]},)"
                           R"("s":{"dtype":"F32","shape":[],"data_offsets":[280000,280004]}})";
const std::string kAllEmpty = R"({"x":{"dtype":"BF16","shape":[0],"data_offsets":[0,0]},)"
                              R"("y":{"dtype":"U8","shape":[2,0,3],"data_offsets":[0,0]}})";

std::string mixed_data() {
  std::string d(280004, '\0');
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<char>(i * 13);
  return d;
}

struct Fixture {
  TempDir tmp{"tf-empty"};
  std::unique_ptr<HubServer> server;
  Fixture() {
    write_file(tmp / "root" / "org" / "mixed" / "model.safetensors", make_safetensors(kMixed, mixed_data()));
    write_file(tmp / "root" / "org" / "all-empty" / "model.safetensors", make_safetensors(kAllEmpty, ""));
    testing::Options so;
    so.root = tmp / "root";
    server = std::make_unique<HubServer>(so);
    server->start();
  }
  OpenOptions options(const std::string& cache) const {
    OpenOptions o;
    o.endpoint = server->endpoint();
    o.token = std::string();
    o.cache_dir = (tmp / cache).string();
    o.hf_hub_cache = (tmp / "hf-none").string();
    o.offline = false;
    return o;
  }
  std::string log_text() const {
    std::string s;
    for (const auto& r : server->log()) s += r.to_json() + "\n";
    return s;
  }
};

Checkpoint open_ok(const std::string& location, const OpenOptions& o) {
  auto c = Checkpoint::open(location, o);
  INFO(location << ": " << (c ? std::string("opened") : c.error().message));
  REQUIRE(c);
  return std::move(*c);
}

std::vector<Selection> select_ok(const Checkpoint& c, std::vector<Selector> selectors) {
  auto s = c.select(selectors);
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s);
  return std::move(*s);
}

}  // namespace

TEST_CASE("empty tensors: served at once, remote or local, before anything is cached, and fetched with no request",
          "[empty][remote]") {
  Fixture fx;
  const std::vector<std::string> locations = {"hf://org/mixed",
                                              fx.server->endpoint() + "/org/mixed/resolve/main/model.safetensors",
                                              (fx.tmp / "root" / "org" / "mixed" / "model.safetensors").string()};
  for (std::size_t k = 0; k < locations.size(); ++k) {
    const std::string& location = locations[k];
    // Named without the server's port, which changes each time the test case runs again.
    DYNAMIC_SECTION((k == 0 ? "a Hub repo" : k == 1 ? "a URL" : "a local file")) {
      INFO(location);
      Checkpoint c = open_ok(location, fx.options("cache-" + std::to_string(k)));
      fx.server->clear_log();
      for (const char* name : {"a", "c"}) {
        INFO(name);
        const TensorRef* t = c.find(name);
        REQUIRE(t);
        auto v = c.view(*t);
        INFO((v ? std::string() : v.error().message));
        REQUIRE(v);
        CHECK(v->bytes.empty());
        CHECK(v->dtype == t->info->dtype);
        CHECK(std::vector<std::uint64_t>(v->shape.begin(), v->shape.end()) ==
              std::vector<std::uint64_t>(t->info->shape.begin(), t->info->shape.end()));
        auto pv = c.private_view(*t);
        INFO((pv ? std::string() : pv.error().message));
        REQUIRE(pv);
        CHECK(pv->bytes.empty());
      }
      // A slice of an empty tensor: empty too, read without a byte.
      auto sliced = select_ok(c, {{"a", parse_slice("[0:0, 2:5]").value()}, {"c", parse_slice("[1:3]").value()}});
      for (const auto& s : sliced) {
        CHECK(s.plan.nbytes == 0);
        std::vector<std::byte> none;
        auto r = c.read(s, none);
        INFO((r ? std::string() : r.error().message));
        CHECK(r);
      }
      auto both = select_ok(c, {{"a", std::nullopt}, {"c", std::nullopt}});
      auto planned = c.plan(both);
      REQUIRE(planned);
      CHECK(planned->empty());
      auto st = c.fetch(both);
      INFO((st ? std::string() : st.error().message));
      REQUIRE(st);
      CHECK(st->requests == 0);
      CHECK(st->bytes_transferred == 0);
      const fs::path out = fx.tmp / ("out-" + std::to_string(k) + ".safetensors");
      auto w = c.fetch_and_write(both, out.string());
      INFO((w ? std::string() : w.error().message));
      REQUIRE(w);
      CHECK(w->requests == 0);
      INFO("requests after the open:\n" << fx.log_text());
      CHECK(fx.server->log().empty());
      auto back = open_ok(out.string(), fx.options("cache-out"));
      REQUIRE(back.tensors().size() == 2);
      CHECK(back.find("c")->info->shape.size() == 2);

      // A 0-rank scalar needs its 4 bytes: one request of exactly them when remote.
      auto scalar = select_ok(c, {{"s", std::nullopt}});
      auto sst = c.fetch(scalar);
      REQUIRE(sst);
      const TensorRef* s = c.find("s");
      auto sv = c.view(*s);
      REQUIRE(sv);
      CHECK(sv->shape.empty());
      REQUIRE(sv->bytes.size() == 4);
      const std::string data = mixed_data();
      CHECK(std::memcmp(sv->bytes.data(), data.data() + 280000, 4) == 0);
      if (c.remote()) {
        const auto log = fx.server->log();
        INFO(fx.log_text());
        REQUIRE(log.size() == 1);
        const std::uint64_t at = c.header(0)->data_offset() + 280000;
        CHECK(log[0].range == "bytes=" + std::to_string(at) + "-" + std::to_string(at + 3));
      }
    }
  }
}

TEST_CASE("empty tensors: a file of only empty tensors (0 data bytes) opens, fetches whole with no request and "
          "writes back",
          "[empty][remote]") {
  Fixture fx;
  for (const std::string& location :
       {std::string("hf://org/all-empty"), fx.server->endpoint() + "/org/all-empty/resolve/main/model.safetensors"}) {
    INFO(location);
    Checkpoint c = open_ok(location, fx.options("cache-all-" + std::to_string(location.size())));
    CHECK(c.header(0)->data_size == 0);
    fx.server->clear_log();
    auto st = c.fetch_all();
    INFO((st ? std::string() : st.error().message));
    REQUIRE(st);
    CHECK(st->requests == 0);
    for (const auto& t : c.tensors()) {
      auto v = c.view(t);
      REQUIRE(v);
      CHECK(v->bytes.empty());
    }
    const auto all = select_ok(c, {{"*", std::nullopt}});
    const fs::path out = fx.tmp / "all.safetensors";
    auto w = c.fetch_and_write(all, out.string());
    INFO((w ? std::string() : w.error().message));
    REQUIRE(w);
    INFO(fx.log_text());
    CHECK(fx.server->log().empty());
    auto back = open_ok(out.string(), fx.options("cache-back"));
    CHECK(back.tensors().size() == 2);
  }
}
