// SPDX-License-Identifier: Apache-2.0
// Numeric options (issue 14, item 8): negative, overflowing, non-decimal and out-of-range
// values are refused with exit 1 and a message naming the option, before anything is read,
// fetched or written; sensible values (0 where it means something, units) are accepted.
#include "cli_util.hpp"

using namespace clitest;

namespace {

struct BadOption {
  std::string command;  // inspect, get, download, prune
  std::string option;
  std::string value;
};

// Every numeric option, with values that must be refused.
const std::vector<BadOption> kBad = {
    // shared: every command that opens a location
    {"inspect", "--window", "-1"},
    {"inspect", "--window", "63"},
    {"inspect", "--window", "2GiB"},
    {"inspect", "--window", "99999999999999999999"},
    {"inspect", "--window", "0x100"},
    {"inspect", "--window", "1.5"},
    {"inspect", "--window", ""},
    {"inspect", "--connections", "-1"},
    {"inspect", "--connections", "0"},
    {"inspect", "--connections", "257"},
    {"inspect", "--connections", "18446744073709551617"},
    {"inspect", "--connections", "4KiB"},
    {"inspect", "--header-connections", "-5"},
    {"inspect", "--header-connections", "0"},
    {"inspect", "--retries", "-1"},
    {"inspect", "--retries", "101"},
    {"inspect", "--retries", "4294967296"},
    {"inspect", "--retries", "+3"},
    {"inspect", "--stall-timeout", "-1000"},
    {"inspect", "--stall-timeout", "999"},
    {"inspect", "--stall-timeout", "9223372036854775808"},
    {"inspect", "--min-rate", "-1"},
    {"inspect", "--min-rate", "1e3"},
    {"inspect", "--min-rate", "2TiB"},
    {"get", "--retries", "-1"},
    {"download", "--connections", "-1"},
    // fetch options
    {"get", "--chunk-size", "-1"},
    {"get", "--chunk-size", "-1KiB"},
    {"get", "--chunk-size", "100"},
    {"get", "--chunk-size", "32GiB"},
    {"get", "--chunk-size", "16EiB"},
    {"get", "--coalesce-gap", "-1"},
    {"get", "--coalesce-gap", "-0"},
    {"get", "--coalesce-gap", "99999999999999999999"},
    {"get", "--coalesce-gap", "1EiB"},
    {"get", "--coalesce-gap", "lots"},
    {"download", "--coalesce-gap", "-1"},
    {"get", "--coalesce-overfetch", "-1"},
    {"get", "--coalesce-overfetch", "1001"},
    {"get", "--coalesce-overfetch", "1.5"},
    {"get", "--coalesce-overfetch", "1%"},
    {"download", "--coalesce-overfetch", "lots"},
    {"download", "--chunk-size", "-8MiB"},
    // --max-rate (get, download): 0 or at least 1 KiB/s, at most 1 TiB/s
    {"get", "--max-rate", "-1"},
    {"get", "--max-rate", "1023"},
    {"get", "--max-rate", "1k"},  // k is 1000
    {"get", "--max-rate", "1.5M"},
    {"get", "--max-rate", "2TiB"},
    {"get", "--max-rate", "99999999999999999999"},
    {"download", "--max-rate", "40 Mbit"},
    {"download", "--max-rate", "-40M"},
    // cache prune
    {"prune", "--max-size", "-1"},
    {"prune", "--max-size", "-1GB"},
    {"prune", "--max-size", "99999999999999999999"},
    {"prune", "--max-size", "2EiB"},
    {"prune", "--max-size", "20000000000EB"},
    {"prune", "--max-size", "0x10"},
};

std::vector<std::string> command_line(const std::string& command, const fs::path& file, const fs::path& out,
                                      const fs::path& cache) {
  if (command == "prune") return {"cache", "prune", "--cache-dir", cache.string()};
  if (command == "inspect") return {"inspect", file.string()};
  return {command, file.string(), "-o", out.string()};
}

}  // namespace

TEST_CASE("numeric options: bad values exit 1 naming the option, before anything happens", "[cli][options]") {
  TempDir tmp;
  const fs::path file = tmp / "m.safetensors";
  write_file(file, make_safetensors(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "ab"));
  const fs::path out = tmp / "out";
  const fs::path cache = tmp / "cache";
  for (const auto& row : kBad) {
    auto args = command_line(row.command, file, out / "x.safetensors", cache);
    args.push_back(row.option);
    args.push_back(row.value);
    auto r = run(args);
    INFO(describe(args) << "\nstdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::StartsWith("tensorfetch: usage error: ") && Catch::Contains(row.option));
    CHECK(r.out.empty());
    CHECK_FALSE(fs::exists(out));    // nothing written
    CHECK_FALSE(fs::exists(cache));  // the cache was not even created
  }
}

TEST_CASE("numeric options: meaningful values are accepted, with units", "[cli][options]") {
  TempDir tmp;
  const fs::path file = tmp / "m.safetensors";
  write_file(file, make_safetensors(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "ab"));
  const std::vector<std::vector<std::string>> good = {
      {"inspect", file.string(), "--window", "64", "--connections", "1", "--header-connections", "1024", "--retries",
       "0", "--stall-timeout", "1000", "--min-rate", "0"},
      {"inspect", file.string(), "--window", "256KiB", "--min-rate", "64KiB", "--retries", "007"},
      {"get", file.string(), "-o", (tmp / "a.safetensors").string(), "--coalesce-gap", "0", "--chunk-size", "8MiB",
       "--coalesce-overfetch", "0"},
      {"get", file.string(), "-o", (tmp / "c.safetensors").string(), "--coalesce-overfetch", "1000"},
      {"get", file.string(), "-o", (tmp / "b.safetensors").string(), "--coalesce-gap", " 16 MiB ", "--chunk-size",
       "4096"},
      {"get", file.string(), "-o", (tmp / "d.safetensors").string(), "--max-rate", "40M"},
      {"get", file.string(), "-o", (tmp / "e.safetensors").string(), "--max-rate", "0"},
      {"get", file.string(), "-o", (tmp / "f.safetensors").string(), "--max-rate", "1KiB"},
      {"get", file.string(), "--plan", "--max-rate", "1G"},
      {"download", file.string(), "-o", (tmp / "dl").string(), "--max-rate", "1024"},
      {"cache", "prune", "--cache-dir", (tmp / "cache").string(), "--max-size", "0"},
      {"cache", "prune", "--cache-dir", (tmp / "cache").string(), "--max-size", "20GB"},
  };
  for (const auto& args : good) {
    auto r = run(args);
    INFO(describe(args) << "\nstderr: " << r.err);
    CHECK(r.exit_code == 0);
  }
}
