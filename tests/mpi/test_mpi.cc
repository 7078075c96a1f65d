// SPDX-License-Identifier: Apache-2.0
// `tensorfetch download|get --mpi` (issue 12, part B) under `mpirun -np 4` on loopback, against
// the in-process Hub-like server, each rank with a cache directory of its own (as if on its own
// node). Asserted through the server's request log: every origin byte fetched once for the
// whole job, the header requests made once; every rank's files byte-exact; `--tp auto` gives
// every rank what `get --tp R/4` alone gives it; an origin fault on one rank's share makes every
// rank exit 3 naming that rank, the URL and the byte range, within the stall timeout; a rerun
// resumes (only the missing bytes move); a rank killed mid-run ends the job, never a hang.
#include <signal.h>

#include <fstream>
#include <map>
#include <thread>

#include "cli_util.hpp"
#include "hub_server.hpp"
#include "support/process.hpp"
#include "support/ranges.hpp"

using namespace clitest;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;
using tftest::Ranges;

namespace {

constexpr int kRanks = 4;
constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

// A Llama-shaped checkpoint in 3 shards (~6 MB), pinned at kCommit.
fs::path make_model(const fs::path& root) {
  const fs::path dir = root / "org" / "llama";
  tftest::Child gen(tftest::required_env("TENSORFETCH_MAKE_CHECKPOINT_BIN"),
                    {"-o", dir.string(), "--layers", "4", "--hidden", "256", "--heads", "4", "--kv-heads", "2",
                     "--intermediate", "1024", "--vocab", "1000", "--shards", "3"},
                    {});
  REQUIRE(gen.wait() == 0);
  write_file(dir / ".commit", kCommit);
  return dir;
}

// A run of mpirun: its exit status (nullopt: still running at the deadline, then killed) and
// what the ranks printed on stderr.
struct MpiRun {
  std::optional<int> status;
  std::string err;
  double seconds = 0;
};

// `mpirun -np 4 tensorfetch ARGS` (loopback, as root too), bounded by `timeout`.
MpiRun mpirun(const std::vector<std::string>& args, const fs::path& tmp,
              std::chrono::milliseconds timeout = std::chrono::seconds(60),
              const std::function<void(tftest::Child&)>& meanwhile = {}) {
  // Under ASan, the ranks do not check for leaks: OpenMPI keeps allocations past MPI_Finalize,
  // in plugins whose frames have no names to suppress (the library's own code is leak-checked
  // by the other suites, and this test program still is).
  std::vector<std::string> argv = {"--allow-run-as-root", "--oversubscribe", "-np", std::to_string(kRanks),
                                   "--mca", "btl", "self,vader,tcp", "-x", "ASAN_OPTIONS=detect_leaks=0",
                                   tensorfetch_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  const fs::path err = tmp / "mpirun.err";
  const auto start = std::chrono::steady_clock::now();
  tftest::Child child(tftest::required_env("TENSORFETCH_MPIRUN"), argv, {"", (tmp / "mpirun.out").string(), err.string()});
  if (meanwhile) meanwhile(child);
  MpiRun run;
  run.status = child.wait_for(timeout);
  if (!run.status) child.signal(SIGKILL);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.err = tftest::try_read_file(err).value_or("");
  return run;
}

// The data bytes (past each file's header) the CDN sent with 206, per file.
std::map<std::string, Ranges> data_moved(const std::vector<RequestRecord>& log, const fs::path& model) {
  std::map<std::string, Ranges> moved;
  for (const auto& rec : log) {
    if (rec.kind != "cdn" || rec.status != 206) continue;
    auto range = tftest::parse_range(rec.range);
    REQUIRE(range);
    CHECK(rec.body_bytes == range->length);
    const std::uint64_t start = 8 + read_safetensors(model / rec.file).header_size;
    const std::uint64_t end = range->offset + range->length;
    if (end <= start) continue;  // a header read
    const std::uint64_t from = std::max(range->offset, start);
    moved[rec.file].push_back({from, end - from});
  }
  return moved;
}

// Every data byte of every shard moved exactly once over `moved` (several runs appended).
void check_once(const std::map<std::string, Ranges>& moved, const fs::path& model) {
  for (const auto& name : list_dir(model)) {
    if (!name.ends_with(".safetensors")) continue;
    INFO("file " << name);
    const std::uint64_t start = 8 + read_safetensors(model / name).header_size;
    const std::uint64_t size = fs::file_size(model / name);
    auto it = moved.find(name);
    REQUIRE(it != moved.end());
    CHECK(tftest::describe(tftest::normalized(it->second)) == tftest::describe(Ranges{{start, size - start}}));
    CHECK(tftest::total(it->second) == size - start);  // no byte twice
  }
}

// Requests other than CDN data ranges: the open's (resolves, index, config.json, headers).
std::size_t open_requests(const std::vector<RequestRecord>& log, const fs::path& model) {
  std::size_t n = 0;
  for (const auto& rec : log) {
    if (rec.kind != "cdn") {
      ++n;
      continue;
    }
    auto range = tftest::parse_range(rec.range);
    if (range && range->offset + range->length <= 8 + read_safetensors(model / rec.file).header_size) ++n;
  }
  return n;
}

struct Fixture {
  TempDir root, tmp;
  fs::path model = make_model(root.path());
  tftest::ScopedEnv env;
  std::unique_ptr<HubServer> server;

  Fixture() {
    for (const char* v : {"HF_TOKEN", "HF_ENDPOINT", "CURL_CA_BUNDLE", "HF_HUB_OFFLINE", "HF_HUB_CACHE"}) {
      env.set(v, std::nullopt);
    }
    env.set("HF_HOME", (tmp / "hf").string());
    tensorfetch::testing::Options options;
    options.root = root.path();
    server = std::make_unique<HubServer>(options);
    server->start();
  }
  // Options every run shares: the endpoint, a cache per rank, headers read alone (--window 64:
  // no data byte in a header request), short timeouts.
  std::vector<std::string> common(const std::string& cache = "cache") const {
    return {"--endpoint", server->endpoint(), "--cache-dir", (tmp / (cache + "{rank}")).string(),
            "--window", "64", "--retries", "1", "--stall-timeout", "3000", "-q", "--mpi"};
  }
  std::vector<std::string> with(std::vector<std::string> args, const std::string& cache = "cache") const {
    for (auto& a : common(cache)) args.push_back(a);
    return args;
  }
};

}  // namespace

TEST_CASE("download --mpi: every origin byte once, the headers once, every rank's files byte-exact") {
  Fixture f;
  // What one process opening alone asks for.
  auto alone = run({"inspect", "hf://org/llama", "--endpoint", f.server->endpoint(), "--window", "64",
                    "--cache-dir", (f.tmp / "inspect").string()});
  REQUIRE(alone.exit_code == 0);
  const std::size_t open_alone = open_requests(f.server->take_log(), f.model);

  auto r = mpirun(f.with({"download", "hf://org/llama", "-o", (f.tmp / "out{rank}").string()}), f.tmp.path());
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto log = f.server->take_log();
  check_once(data_moved(log, f.model), f.model);
  CHECK(open_requests(log, f.model) == open_alone);  // rank 0 only
  for (int rank = 0; rank < kRanks; ++rank) {
    for (const auto& name : list_dir(f.model)) {
      if (name.starts_with(".")) continue;
      INFO("rank " << rank << ": " << name);
      const fs::path got = f.tmp / ("out" + std::to_string(rank)) / name;
      REQUIRE(fs::exists(got));
      CHECK(sha256_hex(read_file(got)) == sha256_hex(read_file(f.model / name)));
    }
  }

  SECTION("a rerun moves nothing: every cache holds everything") {
    auto again = mpirun(f.with({"download", "hf://org/llama", "-o", (f.tmp / "again{rank}").string()}), f.tmp.path());
    INFO(again.err);
    REQUIRE(again.status == 0);
    CHECK(data_moved(f.server->take_log(), f.model).empty());
  }
}

TEST_CASE("get --tp auto --mpi: each rank its slices (point-to-point), each origin byte once") {
  Fixture f;
  auto r = mpirun(f.with({"get", "hf://org/llama", "--tp", "auto", "--coalesce-gap", "0", "-o",
                          (f.tmp / "tp{rank}.safetensors").string()}),
                  f.tmp.path());
  INFO(r.err);
  REQUIRE(r.status == 0);
  check_once(data_moved(f.server->take_log(), f.model), f.model);
  for (int rank = 0; rank < kRanks; ++rank) {
    INFO("rank " << rank);
    const auto alone = f.tmp / ("alone" + std::to_string(rank) + ".safetensors");
    auto one = run({"get", "hf://org/llama", "--tp", std::to_string(rank) + "/" + std::to_string(kRanks), "--endpoint",
                    f.server->endpoint(), "--cache-dir", (f.tmp / "alone-cache").string(), "-q", "-o", alone.string()});
    REQUIRE(one.exit_code == 0);
    CHECK(read_file(f.tmp / ("tp" + std::to_string(rank) + ".safetensors")) == read_file(alone));
  }

  SECTION("--tp R/N is refused under --mpi, and --tp needs {rank} in -o") {
    auto bad = mpirun(f.with({"get", "hf://org/llama", "--tp", "1/4", "-o", (f.tmp / "x{rank}").string()}), f.tmp.path());
    CHECK(bad.status == 1);
    CHECK(bad.err.find("--tp auto") != std::string::npos);
    auto same = mpirun(f.with({"get", "hf://org/llama", "--tp", "auto", "-o", (f.tmp / "x.safetensors").string()}),
                       f.tmp.path());
    CHECK(same.status == 1);
    CHECK(same.err.find("{rank}") != std::string::npos);
  }
}

TEST_CASE("download --mpi: an origin fault on one rank's share fails every rank; a rerun resumes") {
  Fixture f;
  const std::string pinned = std::string("hf://org/llama@") + kCommit;
  // Rank 0's cache learns the commit's headers (a one-tensor get): its --mpi open then asks the
  // origin for nothing of the shards, so the fault below hits only a rank's share of the data.
  auto warm = run({"get", pinned, "model.norm.weight", "--endpoint", f.server->endpoint(), "--window", "64",
                   "--cache-dir", (f.tmp / "cache0").string(), "-q", "-o", (f.tmp / "norm.safetensors").string()});
  INFO(warm.err);
  REQUIRE(warm.exit_code == 0);
  auto moved = data_moved(f.server->take_log(), f.model);

  // Every CDN request of model-00002's blob (its target names the blob's sha256) fails.
  f.server->fail_next(-1, 500, 0, false, sha256_hex(read_file(f.model / "model-00002-of-00003.safetensors")));
  auto r = mpirun(f.with({"download", pinned, "-o", (f.tmp / "out{rank}").string()}), f.tmp.path());
  INFO(r.err);
  CHECK(r.status == 3);
  CHECK(r.seconds < 30);
  // Every rank says which rank failed, fetching what, from where. The ranks' stderr reaches
  // mpirun's as it comes, so their lines may run into each other: each rank's message is found
  // by its own "rank K/N: " prefix, not by line.
  for (std::size_t rank = 0; rank < kRanks; ++rank) {
    const std::string prefix = "rank " + std::to_string(rank) + "/" + std::to_string(kRanks) + ": ";
    const auto at = r.err.find(prefix + "rank ");
    INFO(prefix);
    REQUIRE(at != std::string::npos);
    const std::string said = r.err.substr(at, r.err.find("HTTP 500", at) - at);
    CHECK(said.find("(fetching its share from the origin)") != std::string::npos);
    CHECK(said.find("model-00002") != std::string::npos);
    CHECK(said.find("/cdn/") != std::string::npos);
    CHECK(said.find("bytes") != std::string::npos);
  }
  for (auto& [file, rs] : data_moved(f.server->take_log(), f.model)) moved[file].insert(moved[file].end(), rs.begin(), rs.end());

  f.server->reset_switches();
  auto again = mpirun(f.with({"download", pinned, "-o", (f.tmp / "out{rank}").string()}), f.tmp.path());
  INFO(again.err);
  REQUIRE(again.status == 0);
  // Over the three runs, each data byte left the origin once: the rerun moved only what the
  // failed run had not.
  for (auto& [file, rs] : data_moved(f.server->take_log(), f.model)) moved[file].insert(moved[file].end(), rs.begin(), rs.end());
  check_once(moved, f.model);
  for (int rank = 0; rank < kRanks; ++rank) {
    const fs::path got = f.tmp / ("out" + std::to_string(rank)) / "model-00002-of-00003.safetensors";
    CHECK(sha256_hex(read_file(got)) == sha256_hex(read_file(f.model / "model-00002-of-00003.safetensors")));
  }
}

TEST_CASE("download --mpi: a rank killed or stopped mid-run ends the job, never a hang") {
  Fixture f;
  // SIGKILL: mpirun sees the rank die and ends the job. SIGSTOP: the rank hangs, alive; the
  // next rank finds its heartbeats missing for the stall timeout (3 s), says so and aborts.
  const int sig = GENERATE(SIGKILL, SIGSTOP);
  INFO("signal " << sig);
  // Slow (16 KiB per 100 ms per connection, 2 connections per rank): the job runs for seconds.
  f.server->drip(16 << 10, 100, -1, "/cdn/");
  auto r = mpirun(f.with({"download", "hf://org/llama", "--connections", "2", "-o", (f.tmp / "out{rank}").string()}),
                  f.tmp.path(), std::chrono::seconds(40), [sig](tftest::Child& mpirun_child) {
                    // Signal one rank (a child of mpirun running tensorfetch) once the ranks run.
                    std::this_thread::sleep_for(std::chrono::seconds(2));
                    std::vector<pid_t> ranks;
                    for (const auto& entry : fs::directory_iterator("/proc")) {
                      const std::string name = entry.path().filename().string();
                      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
                      // /proc/PID/stat: "PID (COMM) STATE PPID ..."
                      const std::string stat = tftest::try_read_file(entry.path() / "stat").value_or("");
                      const auto close = stat.rfind(')');
                      if (close == std::string::npos || stat.find("(tensorfetch)") == std::string::npos) continue;
                      std::istringstream rest(stat.substr(close + 1));
                      std::string state;
                      pid_t ppid = 0;
                      rest >> state >> ppid;
                      if (ppid == mpirun_child.pid()) ranks.push_back(std::stoi(name));
                    }
                    REQUIRE(ranks.size() == static_cast<std::size_t>(kRanks));
                    std::sort(ranks.begin(), ranks.end());
                    ::kill(ranks[1], sig);
                  });
  INFO(r.err);
  REQUIRE(r.status.has_value());  // ended, no hang
  CHECK(*r.status != 0);
  CHECK(r.seconds < 30);
  if (sig == SIGSTOP) CHECK(r.err.find("it died or hangs") != std::string::npos);
}
