// SPDX-License-Identifier: Apache-2.0
// What the cache remembers of data hosts (lib/cache/hosts.h): hosts.json round trips, is only
// rewritten when what it says changes, forgets the oldest hosts past its limit, and a missing,
// foreign or broken file is nothing remembered (advice, never an error).
#include <sys/stat.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cache/hosts.h"
#include "support/files.hpp"
#include "test_util.hpp"

namespace td = tensorfetch::detail;

namespace {

std::shared_ptr<const td::CacheDir> open_cache(const tftest::TempDir& tmp) {
  auto c = td::CacheDir::open((tmp.path() / "cache").string(), td::Sharing::Private, true);
  REQUIRE(c);
  return *c;
}

}  // namespace

TEST_CASE("hosts: what a fetch learned of a host is recalled; other hosts know nothing", "[cache][hosts]") {
  tftest::TempDir tmp;
  auto cache = open_cache(tmp);
  CHECK_FALSE(td::recall_host(*cache, "https://cdn.example:443"));
  REQUIRE(td::remember_host(*cache, "https://cdn.example:443", {96, 5.0e8}));
  auto m = td::recall_host(*cache, "https://cdn.example:443");
  REQUIRE(m);
  CHECK(m->connections == 96);
  CHECK(m->rate == Approx(5.0e8));
  CHECK_FALSE(td::recall_host(*cache, "https://other.example:443"));
  // Only what changes is written: the same number at a rate within a tenth leaves the file.
  struct stat before {};
  REQUIRE(::stat((tmp.path() / "cache" / "hosts.json").c_str(), &before) == 0);
  REQUIRE(td::remember_host(*cache, "https://cdn.example:443", {96, 5.2e8}));
  struct stat after {};
  REQUIRE(::stat((tmp.path() / "cache" / "hosts.json").c_str(), &after) == 0);
  CHECK(before.st_ino == after.st_ino);  // not replaced
  REQUIRE(td::remember_host(*cache, "https://cdn.example:443", {32, 5.0e8}));
  CHECK(td::recall_host(*cache, "https://cdn.example:443")->connections == 32);
}

TEST_CASE("hosts: a broken, foreign or absurd hosts.json is nothing remembered, and is replaced by the next fetch",
          "[cache][hosts]") {
  tftest::TempDir tmp;
  auto cache = open_cache(tmp);
  const auto file = tmp.path() / "cache" / "hosts.json";
  const char* bad[] = {
      "not json",
      "[1, 2]",
      R"({"hosts": []})",
      R"({"hosts": {"https://a:443": {"connections": 0, "rate": 1}}})",
      R"({"hosts": {"https://a:443": {"connections": 100000, "rate": 1}}})",
      R"({"hosts": {"https://a:443": {"connections": -3, "rate": 1}}})",
      R"({"hosts": {"https://a:443": {"connections": 8, "rate": "fast"}}})",
      R"({"hosts": {"https://a:443": {"connections": 8}}})",
  };
  for (const char* text : bad) {
    DYNAMIC_SECTION(text) {
      tftest::write_file(file, text);
      CHECK_FALSE(td::recall_host(*cache, "https://a:443"));
      REQUIRE(td::remember_host(*cache, "https://a:443", {8, 1e6}));
      CHECK(td::recall_host(*cache, "https://a:443")->connections == 8);
    }
  }
  // Nesting deeper than the project's JSON limit is refused while parsing, never walked.
  tftest::write_file(file, std::string(100000, '[') + std::string(100000, ']'));
  CHECK_FALSE(td::recall_host(*cache, "https://a:443"));
}

TEST_CASE("hosts: past the limit the hosts updated longest ago are forgotten", "[cache][hosts]") {
  tftest::TempDir tmp;
  auto cache = open_cache(tmp);
  nlohmann::json hosts = nlohmann::json::object();
  for (std::size_t i = 0; i < td::kMaxRememberedHosts; ++i) {
    hosts["https://h" + std::to_string(i) + ":443"] = {{"connections", 4}, {"rate", 1}, {"updated", 1000 + i}};
  }
  tftest::write_file(tmp.path() / "cache" / "hosts.json", nlohmann::json{{"version", 1}, {"hosts", hosts}}.dump());
  REQUIRE(td::remember_host(*cache, "https://new:443", {16, 1e6}));
  CHECK(td::recall_host(*cache, "https://new:443"));
  CHECK_FALSE(td::recall_host(*cache, "https://h0:443"));  // the oldest
  CHECK(td::recall_host(*cache, "https://h1:443"));
  auto doc = nlohmann::json::parse(tftest::read_file(tmp.path() / "cache" / "hosts.json"));
  CHECK(doc["hosts"].size() == td::kMaxRememberedHosts);
}
