// SPDX-License-Identifier: Apache-2.0
// `tensorfetch mount` / `unmount` end to end (issue 21): the binary mounts a repo the in-process
// Hub-like server serves (or a local checkpoint); the test reads through the mount with
// read(), mmap, the CLI's inspect/get on the mounted path and Python's numpy.memmap, and checks
// the bytes against the source and the requests in the server's log: listing costs none, a
// 2-tensor read moves those tensors' byte ranges and nothing else, four concurrent readers of one
// tensor make one fetch, a failing server is EIO plus a log line naming file, URL and byte range,
// --offline serves the cache and EIO for the rest, SIGTERM during a read unmounts cleanly, and a
// checkpoint of 1,000 shards lists with no request. FUSE needs /dev/fuse (root here): a test
// that cannot mount FAILS, saying why.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "cli_util.hpp"
#include "hub_server.hpp"
#include "served_repo.hpp"
#include "support/process.hpp"

using namespace clitest;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;
using namespace std::chrono_literals;

namespace {

constexpr const char* kRepo = "org/llama";

// A byte range [begin, end) of a file.
struct Span {
  std::uint64_t begin = 0, end = 0;
};

bool is_mounted(const fs::path& dir) {
  struct stat a {}, b {};
  if (::stat(dir.c_str(), &a) != 0 || ::stat(dir.parent_path().c_str(), &b) != 0) return false;
  return a.st_dev != b.st_dev;
}

// The byte ranges a CDN request asked for ("bytes=a-b" → [a, b+1)).
std::optional<Span> asked(const RequestRecord& r) {
  std::uint64_t a = 0, b = 0;
  if (std::sscanf(r.range.c_str(), "bytes=%lu-%lu", &a, &b) != 2) return std::nullopt;
  return Span{a, b + 1};
}

// A `tensorfetch mount` process in the foreground, its stderr in a file; unmounted (SIGTERM) by
// the destructor when still running.
struct MountProcess {
  fs::path dir, err;
  std::unique_ptr<tftest::Child> child;

  MountProcess(const fs::path& mount_dir, const fs::path& err_file, std::vector<std::string> args)
      : dir(mount_dir), err(err_file) {
    fs::create_directories(dir);
    std::vector<std::string> all = {"mount"};
    all.insert(all.end(), args.begin(), args.end());
    child = std::make_unique<tftest::Child>(tensorfetch_bin(), all, tftest::ChildIo{"", "", err.string()});
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!is_mounted(dir) && child->running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    INFO("tensorfetch " << describe(all) << "\nstderr: " << stderr_text());
    // Not mounted is a failure, never a skip: this machine kind runs FUSE (as root, /dev/fuse).
    REQUIRE(is_mounted(dir));
  }
  ~MountProcess() {
    if (child->running()) {
      child->signal(SIGTERM);
      (void)child->wait_for(10s);
    }
    if (is_mounted(dir)) (void)run({"unmount", dir.string()});
  }
  std::string stderr_text() const { return tftest::try_read_file(err).value_or(""); }
  // SIGTERM; the exit status.
  int stop() {
    child->signal(SIGTERM);
    auto status = child->wait_for(15s);
    REQUIRE(status.has_value());
    return *status;
  }
};

// Reads `length` bytes at `offset` of `path` with pread, the kernel's read-ahead off (each
// read asks for the pages it needs only); errno on failure.
std::pair<std::string, int> pread_at(const fs::path& path, std::uint64_t offset, std::uint64_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return {"", errno};
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  std::string out(length, '\0');
  std::uint64_t done = 0;
  int err = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      err = errno;
      break;
    }
    if (n == 0) break;
    done += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return {out, err};
}

// The reference sharded checkpoint served as org/llama (served_repo.hpp): mount arguments and
// the CDN requests of its log.
struct Served : ServedRepo {
  using ServedRepo::ServedRepo;

  std::vector<std::string> mount_args(const fs::path& dir, std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {std::string("hf://") + kRepo, dir.string(), "--endpoint", server->endpoint()};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // The CDN requests of the log (tensor bytes), by file.
  std::map<std::string, std::vector<Span>> cdn_ranges() const {
    std::map<std::string, std::vector<Span>> out;
    for (const auto& r : server->log()) {
      if (r.kind != "cdn") continue;
      auto s = asked(r);
      REQUIRE(s.has_value());
      out[r.file].push_back(*s);
    }
    return out;
  }
};

// The byte range of tensor `name` of the safetensors file `path` (the test's own reader).
Span tensor_span(const fs::path& path, const std::string& name) {
  StFile f = read_safetensors(path);
  const auto& t = f.tensors.at(name);
  return Span{8 + f.header_size + t.begin, 8 + f.header_size + t.end};
}

// Every range of `ranges` lies within one of `wanted` widened by a page on each side (the
// kernel reads whole pages: a neighbour's bytes on those pages may travel), and together they
// cover every byte of `wanted`.
void check_only(const std::vector<Span>& ranges, const std::vector<Span>& wanted) {
  std::uint64_t moved = 0, want = 0;
  for (const auto& r : ranges) {
    INFO("fetched bytes " << r.begin << "-" << r.end);
    moved += r.end - r.begin;
    bool inside = false;
    for (const auto& w : wanted) inside = inside || (r.begin + 4096 >= w.begin && r.end <= w.end + 4096);
    CHECK(inside);
  }
  for (const auto& w : wanted) {
    want += w.end - w.begin;
    std::uint64_t covered = 0;
    for (const auto& r : ranges) {
      const std::uint64_t b = std::max(r.begin, w.begin), e = std::min(r.end, w.end);
      if (b < e) covered += e - b;
    }
    INFO("wanted bytes " << w.begin << "-" << w.end);
    CHECK(covered == w.end - w.begin);
  }
  CHECK(moved <= want + 4 * 4096);
}

}  // namespace

TEST_CASE("mount of a Hub repo: listing and stat cost no request; read and mmap give the source's bytes",
          "[mount]") {
  auto ref = reference_dir();
  REQUIRE(ref.has_value());
  Served s(*ref / "llama-tiny-sharded");
  MountProcess m(s.work / "mnt", s.work / "mount.err", s.mount_args(s.work / "mnt"));

  s.server->clear_log();
  // ls -lR and stat of every entry: zero requests.
  auto ls = run({"--version"});  // (the binary runs; ls itself below)
  tftest::Child lsr("/usr/bin/ls", {"-lR", m.dir.string()}, tftest::ChildIo{"", (s.work / "ls.out").string(), ""});
  CHECK(lsr.wait() == 0);
  std::map<std::string, std::uint64_t> listed;
  for (const auto& e : fs::recursive_directory_iterator(m.dir)) {
    listed[fs::relative(e.path(), m.dir).string()] = e.is_regular_file() ? e.file_size() : 0;
  }
  INFO(read_file(s.work / "ls.out"));
  CHECK(s.server->log().empty());
  // Every file of the repo (the safetensors files, the index, config.json and the others, e.g.
  // generation_config.json), with the source's sizes.
  std::map<std::string, std::uint64_t> source;
  for (const auto& e : fs::directory_iterator(s.reference)) source[e.path().filename().string()] = e.file_size();
  CHECK(listed == source);

  SECTION("a 2-tensor read moves those tensors' byte ranges and nothing else; the bytes are the source's") {
    const std::string shard = "model-00002-of-00003.safetensors";
    const Span a = tensor_span(s.reference / shard, "model.layers.2.mlp.gate_proj.weight");
    const Span b = tensor_span(s.reference / shard, "model.layers.3.self_attn.q_proj.weight");
    const std::string src = read_file(s.reference / shard);
    for (const Span& t : {a, b}) {
      auto [bytes, err] = pread_at(m.dir / shard, t.begin, t.end - t.begin);
      INFO(std::strerror(err) << "\nmount stderr: " << m.stderr_text());
      REQUIRE(err == 0);
      CHECK(bytes == src.substr(t.begin, t.end - t.begin));
    }
    auto ranges = s.cdn_ranges();
    CHECK(ranges.size() == 1);  // one file only
    check_only(ranges[shard], {a, b});
    // No resolve, API or header request: the open's headers serve the rest.
    for (const auto& r : s.server->log()) CHECK(r.kind == "cdn");
  }

  SECTION("read() and mmap of every file equal the source; inspect and get on the mounted path agree") {
    for (const auto& [name, size] : source) {
      INFO(name);
      CHECK(sha256_hex(read_file(m.dir / name)) == sha256_hex(read_file(s.reference / name)));
      const int fd = ::open((m.dir / name).c_str(), O_RDONLY);
      REQUIRE(fd >= 0);
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      REQUIRE(p != MAP_FAILED);
      CHECK(sha256_hex(std::string_view(static_cast<const char*>(p), size)) == sha256_hex(read_file(s.reference / name)));
      ::munmap(p, size);
      ::close(fd);
    }
    auto mounted = run({"inspect", "--json", m.dir.string()});
    auto local = run({"inspect", "--json", s.reference.string()});
    REQUIRE(mounted.exit_code == 0);
    REQUIRE(local.exit_code == 0);
    auto jm = json::parse(mounted.out), jl = json::parse(local.out);
    CHECK(jm["tensors"] == jl["tensors"]);
    CHECK(jm["total_bytes"] == jl["total_bytes"]);
    auto got = run({"get", m.dir.string(), "model.layers.1.*", "-o", (s.work / "m.safetensors").string(), "-q"});
    auto want = run({"get", s.reference.string(), "model.layers.1.*", "-o", (s.work / "l.safetensors").string(), "-q"});
    REQUIRE(got.exit_code == 0);
    REQUIRE(want.exit_code == 0);
    CHECK(read_file(s.work / "m.safetensors") == read_file(s.work / "l.safetensors"));
    // numpy.memmap over a mounted shard: the bytes of a tensor as the source has them.
    const std::string shard = "model-00001-of-00003.safetensors";
    const Span t = tensor_span(s.reference / shard, "model.embed_tokens.weight");
    const std::string script = "import numpy, hashlib, sys\nm = numpy.memmap(sys.argv[1], dtype=numpy.uint8, mode='r')\n"
                               "sys.stdout.write(hashlib.sha256(m[int(sys.argv[2]):int(sys.argv[3])].tobytes()).hexdigest())\n";
    write_file(s.work / "memmap.py", script);
    tftest::Child py("/usr/bin/python3", {(s.work / "memmap.py").string(), (m.dir / shard).string(),
                                          std::to_string(t.begin), std::to_string(t.end)},
                     tftest::ChildIo{"", (s.work / "py.out").string(), (s.work / "py.err").string()});
    INFO(tftest::try_read_file(s.work / "py.err").value_or(""));
    CHECK(py.wait() == 0);
    CHECK(read_file(s.work / "py.out") == sha256_hex(read_file(s.reference / shard).substr(t.begin, t.end - t.begin)));
  }

  SECTION("SIGUSR1 prints the totals; unmount ends the mount process with status 0 and prints them again") {
    (void)read_file(m.dir / "config.json");
    m.child->signal(SIGUSR1);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (m.stderr_text().find("failed reads") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    CHECK_THAT(m.stderr_text(), Catch::Contains("1 reads (720 bytes)") && Catch::Contains("bytes from the cache"));
    CHECK(m.child->running());
    auto u = run({"unmount", m.dir.string()});
    INFO(u.err);
    CHECK(u.exit_code == 0);
    auto status = m.child->wait_for(10s);
    REQUIRE(status.has_value());
    CHECK(*status == 0);
    CHECK_FALSE(is_mounted(m.dir));
    CHECK_THAT(m.stderr_text(), Catch::Contains("bytes fetched in") && Catch::Contains("bytes in flight"));
    auto again = run({"unmount", m.dir.string()});
    CHECK(again.exit_code == 1);
  }
}

TEST_CASE("mount of a Hub repo is a complete model directory: every file of the commit, listed in one request; "
          "other files read byte-exact through the cache, small ones whole on open, large ones by blocks",
          "[mount]") {
  auto ref = reference_dir();
  REQUIRE(ref.has_value());
  Served s(*ref / "llama-tiny-sharded");
  const fs::path repo = s.root.path() / "org" / "llama";
  // Files a from_pretrained-style loader looks for beside the weights: git files (served whole
  // by /resolve/) and an LFS one (.pth: through the CDN) larger than --small-file.
  std::string tokenizer = "{\"version\": \"1.0\", \"model\": {\"vocab\": {";
  for (int i = 0; i < 20000; ++i) tokenizer += "\"tok" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
  tokenizer += "\"end\": 0}}}";
  write_file(repo / "tokenizer.json", tokenizer);
  write_file(repo / "tokenizer_config.json", "{\"model_max_length\": 2048}\n");
  write_file(repo / "README.md", "# llama-tiny\nA test model.\n");
  fs::create_directories(repo / "original");
  write_file(repo / "original" / "params.json", "{\"dim\": 64}\n");
  const std::string pth = tftest::pattern_bytes(3 * 1024 * 1024 + 12345, 7);
  write_file(repo / "original" / "consolidated.00.pth", pth);
  std::map<std::string, std::uint64_t> source;
  for (const auto& e : fs::recursive_directory_iterator(repo)) {
    source[fs::relative(e.path(), repo).string()] = e.is_regular_file() ? e.file_size() : 0;
  }

  MountProcess m(s.work / "mnt", s.work / "mount.err", s.mount_args(s.work / "mnt", {"--small-file", "1MiB"}));
  // Before it was ready, the mount listed the files in one request (the Hub's model info with
  // file metadata).
  std::size_t listings = 0;
  for (const auto& r : s.server->log()) {
    if (r.kind != "api") continue;
    ++listings;
    CHECK_THAT(r.target, Catch::Contains("/api/models/org/llama/revision/") && Catch::Contains("blobs=true"));
  }
  CHECK(listings == 1);

  s.server->clear_log();
  tftest::Child lsr("/usr/bin/ls", {"-lR", m.dir.string()}, tftest::ChildIo{"", (s.work / "ls.out").string(), ""});
  CHECK(lsr.wait() == 0);
  std::map<std::string, std::uint64_t> listed;
  for (const auto& e : fs::recursive_directory_iterator(m.dir)) {
    listed[fs::relative(e.path(), m.dir).string()] = e.is_regular_file() ? e.file_size() : 0;
  }
  INFO(read_file(s.work / "ls.out"));
  CHECK(listed == source);
  CHECK(s.server->log().empty());  // ls -lR and stat: no request

  // Each small file: one resolve of the whole file on open, its bytes the source's.
  const std::vector<std::string> small = {"tokenizer.json", "tokenizer_config.json", "README.md",
                                          "original/params.json", "generation_config.json"};
  for (const auto& name : small) {
    INFO(name << "\nmount stderr: " << m.stderr_text());
    CHECK(read_file(m.dir / name) == read_file(repo / name));
  }
  std::map<std::string, int> resolves;
  for (const auto& r : s.server->log()) {
    INFO(r.to_json());
    CHECK(r.kind == "resolve");
    CHECK(r.range == "bytes=0-" + std::to_string(source.at(r.file) - 1));
    ++resolves[r.file];
  }
  for (const auto& name : small) CHECK(resolves[name] == 1);

  // The large file: a read in its middle moves the 1 MiB block it touches, nothing else.
  s.server->clear_log();
  const std::uint64_t mid = 2 * 1024 * 1024 + 100;
  auto [piece, err] = pread_at(m.dir / "original" / "consolidated.00.pth", mid, 5000);
  INFO("mount stderr: " << m.stderr_text());
  REQUIRE(err == 0);
  CHECK(piece == pth.substr(mid, 5000));
  std::vector<Span> cdn;
  for (const auto& r : s.server->log()) {
    if (r.kind != "cdn") continue;
    auto a = asked(r);
    REQUIRE(a.has_value());
    cdn.push_back(*a);
  }
  REQUIRE(cdn.size() == 1);
  CHECK(cdn[0].begin == 2 * 1024 * 1024);
  CHECK(cdn[0].end == 3 * 1024 * 1024);
  // Read whole, sequentially: the source's bytes; no byte was asked for twice.
  CHECK(sha256_hex(read_file(m.dir / "original" / "consolidated.00.pth")) == sha256_hex(pth));
  std::uint64_t moved = 0;
  std::vector<Span> all;
  for (const auto& r : s.server->log()) {
    if (r.kind != "cdn") continue;
    auto a = asked(r);
    REQUIRE(a.has_value());
    all.push_back(*a);
    moved += a->end - a->begin;
  }
  CHECK(moved == pth.size());
  std::sort(all.begin(), all.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < all.size(); ++i) CHECK(all[i - 1].end <= all[i].begin);

  // The shared cache: another mount of the repo (another process) serves these files with no
  // request once it is ready.
  MountProcess m2(s.work / "mnt2", s.work / "mount2.err", s.mount_args(s.work / "mnt2", {"--small-file", "1MiB"}));
  s.server->clear_log();
  for (const auto& name : small) CHECK(read_file(m2.dir / name) == read_file(repo / name));
  CHECK(sha256_hex(read_file(m2.dir / "original" / "consolidated.00.pth")) == sha256_hex(pth));
  for (const auto& r : s.server->log()) {
    INFO(r.to_json());
    FAIL_CHECK("a request for bytes the cache holds");
  }
}

TEST_CASE("mount: an mmap reader of one tensor pulls neither the large tensor before it nor the one after it "
          "(the kernel's read-around moves only the bytes it touches), nor the first tensor with the header",
          "[mount]") {
  TempDir root, cache, work;
  tftest::ScopedEnv env;
  env.set("TENSORFETCH_CACHE", cache.path().string());
  env.set("HF_TOKEN", std::nullopt);
  const fs::path repo = root / "org" / "three";
  fs::create_directories(repo);
  // t0 (2 MiB), t1 (40000 bytes), t2 (2 MiB): t1 sits between two tensors far larger than the
  // kernel's 128 KiB read-around.
  const std::string header = json{{"t0", {{"dtype", "U8"}, {"shape", {2 << 20}}, {"data_offsets", {0, 2 << 20}}}},
                                  {"t1", {{"dtype", "U8"}, {"shape", {40000}}, {"data_offsets", {2 << 20, (2 << 20) + 40000}}}},
                                  {"t2", {{"dtype", "U8"}, {"shape", {2 << 20}}, {"data_offsets", {(2 << 20) + 40000, (4 << 20) + 40000}}}}}
                                 .dump();
  const std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  const std::string file = make_safetensors(padded, tftest::pattern_bytes((4 << 20) + 40000, 5));
  write_file(repo / "model.safetensors", file);
  tensorfetch::testing::Options o;
  o.root = root.path();
  HubServer server(o);
  server.start();
  MountProcess m(work / "mnt", work / "mount.err", {"hf://org/three", (work / "mnt").string(), "--endpoint", server.endpoint()});
  const Span t1 = tensor_span(repo / "model.safetensors", "t1");
  server.clear_log();
  // The reader maps the file, parses the header (the first page), then copies t1 out.
  const int fd = ::open((m.dir / "model.safetensors").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  void* p = ::mmap(nullptr, file.size(), PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(p != MAP_FAILED);
  const char* bytes = static_cast<const char*>(p);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes, 8);
  CHECK(std::string(bytes + 8, 16) == file.substr(8, 16));
  CHECK(std::string(bytes + t1.begin, t1.end - t1.begin) == file.substr(t1.begin, t1.end - t1.begin));
  ::munmap(p, file.size());
  ::close(fd);
  std::uint64_t moved = 0;
  for (const auto& r : server.log()) {
    if (r.kind != "cdn") continue;
    auto a = asked(r);
    REQUIRE(a.has_value());
    INFO("fetched bytes " << a->begin << "-" << a->end);
    moved += a->end - a->begin;
  }
  INFO("mount stderr: " << m.stderr_text());
  // t1, and besides it only what the kernel's read-around touched near the header page and t1's
  // pages: 128 KiB each when quiet, but the window grows (781 KiB in all was seen under ASan on a
  // busy CI machine). The bound, 1 MiB, is half of t0 and of t2: neither was pulled whole.
  CHECK(moved >= t1.end - t1.begin);
  CHECK(moved <= (t1.end - t1.begin) + (1 << 20));
}

TEST_CASE("mount: four concurrent readers of one tensor share one fetch (no byte range asked twice)", "[mount]") {
  auto ref = reference_dir();
  REQUIRE(ref.has_value());
  Served s(*ref / "llama-tiny-sharded");
  MountProcess m(s.work / "mnt", s.work / "mount.err", s.mount_args(s.work / "mnt"));
  const std::string shard = "model-00003-of-00003.safetensors";
  const Span t = tensor_span(s.reference / shard, "model.layers.5.mlp.down_proj.weight");
  const std::string src = read_file(s.reference / shard);
  s.server->clear_log();
  s.server->set_latency_ms(300);  // the four reads arrive while the first fetch is under way
  std::vector<std::thread> readers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&, i] {
      // Reader i reads page-aligned piece i of the tensor's pages (different pages: the
      // kernel's page cache does not join them; the mount must).
      const std::uint64_t first_page = t.begin / 4096 + 1;
      const std::uint64_t off = std::min<std::uint64_t>((first_page + static_cast<std::uint64_t>(i)) * 4096, t.end - 1);
      const std::uint64_t len = std::min<std::uint64_t>(4096, t.end - off);
      auto [bytes, err] = pread_at(m.dir / shard, off, len);
      if (err == 0 && bytes == src.substr(off, len)) ++ok;
    });
  }
  for (auto& r : readers) r.join();
  s.server->set_latency_ms(0);
  INFO(m.stderr_text());
  CHECK(ok == 4);
  auto ranges = s.cdn_ranges()[shard];
  REQUIRE_FALSE(ranges.empty());
  // No byte asked twice.
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    for (std::size_t j = i + 1; j < ranges.size(); ++j) {
      INFO(ranges[i].begin << "-" << ranges[i].end << " and " << ranges[j].begin << "-" << ranges[j].end);
      CHECK((ranges[i].end <= ranges[j].begin || ranges[j].end <= ranges[i].begin));
    }
  }
  check_only(ranges, {t});
}

TEST_CASE("mount: a failing server is EIO plus a log line naming file, URL and byte range; never zeros",
          "[mount]") {
  auto ref = reference_dir();
  REQUIRE(ref.has_value());
  Served s(*ref / "llama-tiny-sharded");
  const fs::path log = s.work / "mount.log";
  MountProcess m(s.work / "mnt", s.work / "mount.err",
                 s.mount_args(s.work / "mnt", {"--retries", "0", "--log", log.string()}));
  const std::string shard = "model-00002-of-00003.safetensors";
  const Span t = tensor_span(s.reference / shard, "model.layers.4.mlp.up_proj.weight");
  s.server->fail_next(-1, 500, 0, false, "/cdn/");
  auto [bytes, err] = pread_at(m.dir / shard, t.begin, t.end - t.begin);
  CHECK(err == EIO);
  CHECK(bytes.empty());
  const std::string text = tftest::try_read_file(log).value_or("");
  INFO("log: " << text);
  // The file, the read's byte range, the URL asked and the HTTP range that failed.
  CHECK_THAT(text, Catch::Contains("error: " + shard + ": bytes ") && Catch::Contains("EIO") &&
                       Catch::Contains(" of " + s.server->cdn_endpoint() + "/cdn/") && Catch::Contains("(bytes="));
  // Once the server is back, the same read succeeds (nothing bad was cached).
  s.server->reset_switches();
  auto [again, err2] = pread_at(m.dir / shard, t.begin, t.end - t.begin);
  CHECK(err2 == 0);
  CHECK(again == read_file(s.reference / shard).substr(t.begin, t.end - t.begin));
}

TEST_CASE("mount --offline serves what the cache holds and EIO for the rest, with no request", "[mount]") {
  auto ref = reference_dir();
  REQUIRE(ref.has_value());
  Served s(*ref / "llama-tiny-sharded");
  const std::string shard = "model-00002-of-00003.safetensors";
  const Span fetched = tensor_span(s.reference / shard, "model.layers.2.mlp.down_proj.weight");
  const Span missing = tensor_span(s.reference / shard, "model.layers.4.mlp.down_proj.weight");
  const std::string src = read_file(s.reference / shard);
  {
    MountProcess m(s.work / "mnt", s.work / "mount.err", s.mount_args(s.work / "mnt"));
    auto [bytes, err] = pread_at(m.dir / shard, fetched.begin, fetched.end - fetched.begin);
    REQUIRE(err == 0);
    CHECK(m.stop() == 0);
  }
  s.server->clear_log();
  MountProcess m(s.work / "mnt2", s.work / "mount2.err", s.mount_args(s.work / "mnt2", {"--offline"}));
  auto [bytes, err] = pread_at(m.dir / shard, fetched.begin, fetched.end - fetched.begin);
  INFO(m.stderr_text());
  CHECK(err == 0);
  CHECK(bytes == src.substr(fetched.begin, fetched.end - fetched.begin));
  auto [none, err2] = pread_at(m.dir / shard, missing.begin, missing.end - missing.begin);
  CHECK(err2 == EIO);
  CHECK(s.server->log().empty());
}

TEST_CASE("mount: SIGTERM during a read unmounts cleanly; the reader gets EIO or the bytes; the cache stays valid",
          "[mount]") {
  auto ref = reference_dir();
  REQUIRE(ref.has_value());
  Served s(*ref / "llama-tiny-sharded");
  const std::string shard = "model-00001-of-00003.safetensors";
  const Span t = tensor_span(s.reference / shard, "model.embed_tokens.weight");
  const std::string src = read_file(s.reference / shard);
  {
    MountProcess m(s.work / "mnt", s.work / "mount.err", s.mount_args(s.work / "mnt"));
    s.server->stall_after(1000, -1, "/cdn/", 20000);  // the fetch hangs after 1000 bytes
    std::pair<std::string, int> result;
    std::thread reader([&] { result = pread_at(m.dir / shard, t.begin, t.end - t.begin); });
    std::this_thread::sleep_for(500ms);
    const auto start = std::chrono::steady_clock::now();
    const int stopped = m.stop();
    INFO("mount stderr: " << m.stderr_text());
    CHECK(stopped == 0);  // (under ASan also: nothing leaked, e.g. the handle of the file still open)
    reader.join();
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    CHECK_FALSE(is_mounted(m.dir));
    CHECK(result.second == EIO);
    CHECK_THAT(m.stderr_text(), Catch::Contains("reads"));
  }
  s.server->reset_switches();
  MountProcess m(s.work / "mnt2", s.work / "mount2.err", s.mount_args(s.work / "mnt2"));
  CHECK(sha256_hex(read_file(m.dir / shard)) == sha256_hex(src));
  auto verify = run({"cache", "verify"});
  INFO(verify.err);
  CHECK(verify.exit_code == 0);
}

TEST_CASE("mount of a local checkpoint; a stale mount point is reported with the command that clears it",
          "[mount]") {
  auto ref = reference_dir();
  REQUIRE(ref.has_value());
  TempDir work;
  const fs::path single = *ref / "llama-tiny-single";
  {
    MountProcess m(work / "mnt", work / "mount.err", {single.string(), (work / "mnt").string()});
    CHECK(read_file(m.dir / "model.safetensors") == read_file(single / "model.safetensors"));
    // A killed mount process leaves a stale mount point (ENOTCONN).
    m.child->signal(SIGKILL);
    (void)m.child->wait_for(5s);
    auto again = run({"mount", single.string(), (work / "mnt").string()});
    CHECK(again.exit_code != 0);
    CHECK_THAT(again.err, Catch::Contains("stale mount point") && Catch::Contains("fusermount3 -u"));
    auto u = run({"unmount", (work / "mnt").string()});
    CHECK(u.exit_code == 0);
  }
  auto notdir = run({"mount", single.string(), (single / "model.safetensors").string()});
  CHECK(notdir.exit_code == 1);
  CHECK_THAT(notdir.err, Catch::Contains("not a directory"));
}

TEST_CASE("mount of a checkpoint of 1,000 shards: ls -lR with no request, any shard's bytes", "[mount]") {
  TempDir root, cache, work;
  tftest::ScopedEnv env;
  env.set("TENSORFETCH_CACHE", cache.path().string());
  env.set("HF_TOKEN", std::nullopt);
  const fs::path repo = root / "org" / "many";
  fs::create_directories(repo);
  json weight_map = json::object();
  constexpr int kShards = 1000;
  for (int i = 0; i < kShards; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, kShards);
    const std::string tensor = "layers." + std::to_string(i) + ".weight";
    const std::string header = json{{tensor, {{"dtype", "U8"}, {"shape", {64}}, {"data_offsets", {0, 64}}}}}.dump();
    write_file(repo / name, make_safetensors(header, tftest::pattern_bytes(64, static_cast<std::uint32_t>(i + 1))));
    weight_map[tensor] = name;
  }
  write_file(repo / "model.safetensors.index.json", json{{"metadata", {{"total_size", 64 * kShards}}}, {"weight_map", weight_map}}.dump());
  tensorfetch::testing::Options o;
  o.root = root.path();
  HubServer server(o);
  server.start();
  MountProcess m(work / "mnt", work / "mount.err", {"hf://org/many", (work / "mnt").string(), "--endpoint", server.endpoint()});
  server.clear_log();
  tftest::Child lsr("/usr/bin/ls", {"-lR", m.dir.string()}, tftest::ChildIo{"", (work / "ls.out").string(), ""});
  CHECK(lsr.wait() == 0);
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(m.dir)) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == kShards + 1);
  CHECK(server.log().empty());
  CHECK(read_file(m.dir / "model-00777-of-01000.safetensors") == read_file(repo / "model-00777-of-01000.safetensors"));
}

TEST_CASE("mount --daemon returns once the directory is mounted; unmount ends the background process", "[mount]") {
  auto ref = reference_dir();
  REQUIRE(ref.has_value());
  TempDir work;
  const fs::path single = *ref / "llama-tiny-single";
  fs::create_directories(work / "mnt");
  auto d = run({"mount", single.string(), (work / "mnt").string(), "--daemon", "--log", (work / "mount.log").string()});
  INFO(d.err);
  REQUIRE(d.exit_code == 0);
  REQUIRE(is_mounted(work / "mnt"));  // at once: the parent returned after the mount
  CHECK(read_file(work / "mnt" / "model.safetensors") == read_file(single / "model.safetensors"));
  auto u = run({"unmount", (work / "mnt").string()});
  CHECK(u.exit_code == 0);
  CHECK_FALSE(is_mounted(work / "mnt"));
  // The background process logs its totals into --log as it ends.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (tftest::try_read_file(work / "mount.log").value_or("").find("failed reads") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  CHECK_THAT(tftest::try_read_file(work / "mount.log").value_or(""), Catch::Contains("0 failed reads"));
}
