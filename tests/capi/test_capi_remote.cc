// SPDX-License-Identifier: Apache-2.0
// The C API over HTTP, called from C++ and linked against the shared library, against the
// in-process Hub-like test server (20 ms per request): open, NOT_FETCHED before a fetch, fetch
// by glob with a progress callback, cancel from the callback and from another thread,
// fetch_all, save_files; a download manager (tf_plan_fetch, then the transfers made with
// libcurl), the byte sink, one connection with per-file progress, tf_publish_to_hf_cache (the
// Hugging Face cache layout, then reused, then offline), remote errors, tokens refused before
// any request (the server's log), and cancels of a stalled server.
#include <catch2/catch.hpp>

#include <curl/curl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "capi_util.hpp"
#include "hub_server.hpp"
#include "support/bytes.hpp"
#include "support/files.hpp"

using namespace capitest;
using tftest::ByteRange;
using tftest::coalesced;
using tftest::minus;
using tftest::min_pieces;
using tftest::total;

namespace {

// The most tf_open reads of a remote file (the header window, 256 KiB; a shard named by an
// index gets a smaller first read sized from the index): a fetch or a plan records what was
// read in the file's cache entry, so it is never planned again.
constexpr std::uint64_t kHeaderWindow = 256 << 10;

// The repos, made once per process: ref/tiny-sharded (the reference checkpoint: 3 shards,
// index, config.json) and gen/model (generated: hidden 128, vocab 2048, 2 shards).
struct Repos {
  tftest::TempDir tmp{"tf-capi-remote"};
  fs::path root = tmp / "root";
  fs::path ref = root / "ref" / "tiny-sharded";
  fs::path gen = root / "gen" / "model";
  fs::path dtypes = root / "ref" / "dtypes";  // the reference file of every dtype (an empty tensor too)
  Repos() {
    fs::create_directories(dtypes);
    fs::copy_file(reference() / "dtypes" / "model.safetensors", dtypes / "model.safetensors");
    for (const char* f : {"config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                          "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}) {
      fs::create_directories(ref);
      fs::copy_file(reference() / "llama-tiny-sharded" / f, ref / f);
    }
    make_checkpoint(gen, 128, 2048, 2);
  }
};

const Repos& repos() {
  static const Repos r;
  return r;
}

// A server on the repos (20 ms per request), and per test a directory for caches.
struct Fixture : ServerFixture {
  Fixture() : ServerFixture("tf-capi-test") {
    tensorfetch::testing::Options o;
    o.root = repos().root;
    o.latency_ms = 20;
    start(o);
  }
};

// The sum of the sets' bytes.
std::uint64_t bytes_of(const std::vector<Ranges>& sets) {
  std::uint64_t n = 0;
  for (const auto& s : sets) n += total(s);
  return n;
}

std::size_t pieces_of(const std::vector<Ranges>& sets, std::uint64_t chunk) {
  std::size_t n = 0;
  for (const auto& s : sets) n += min_pieces(s, chunk);
  return n;
}

// Per file of `c`: the bytes its open read (the first range the server's log shows the CDN
// answering for it, bytes=0-X), at most kHeaderWindow.
std::vector<std::uint64_t> opened_bytes(const ServerFixture& fx, tf_checkpoint* c) {
  std::vector<std::uint64_t> out;
  const auto log = fx.server->log();
  for (std::size_t f = 0; f < tf_file_count(c); ++f) {
    std::uint64_t n = 0;
    for (const auto& r : log) {
      if (r.kind == "cdn" && r.file == tf_file_path(c, f) && r.range.starts_with("bytes=0-")) {
        n = std::stoull(r.range.substr(8)) + 1;
        break;
      }
    }
    REQUIRE(n > 0);
    REQUIRE(n <= kHeaderWindow);
    out.push_back(std::min(n, tf_file_size(c, f)));
  }
  return out;
}

// Per file: `wanted` minus what open read (`opened`) and minus `cached` (in file
// `cached_file`), holes of at most `gap` joined.
std::vector<Ranges> expected_plan(const std::vector<Ranges>& wanted, const std::vector<std::uint64_t>& opened,
                                  std::size_t cached_file, const ByteRange& cached, std::uint64_t gap) {
  std::vector<Ranges> out;
  for (std::size_t f = 0; f < opened.size(); ++f) {
    Ranges have{{0, opened[f]}};
    if (f == cached_file) have.push_back(cached);
    out.push_back(coalesced(minus(wanted[f], have), gap));
  }
  return out;
}

// ---- progress as the callback saw it (fetch in the test's thread, cancel from another) ----

struct ProgressLog {
  int calls = 0;
  bool monotonic = true;
  int cancel_at = 0;  // return non-zero on this call (1-based); 0: never
  tf_progress last{};
  std::mutex mutex;
  std::condition_variable cond;
  bool saw_data = false;
};

int log_progress(const tf_progress* p, void* user) {
  auto* log = static_cast<ProgressLog*>(user);
  if (log->calls > 0 && p->bytes_done < log->last.bytes_done) log->monotonic = false;
  ++log->calls;
  log->last = *p;
  if (p->bytes_done > 0) {
    std::lock_guard lock(log->mutex);
    log->saw_data = true;
    log->cond.notify_all();
  }
  return log->cancel_at != 0 && log->calls >= log->cancel_at ? 1 : 0;
}

// ---- a download manager: the planned transfers made with libcurl ----

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* s) const { curl_slist_free_all(s); }
};

struct Body {
  std::string data;
  std::string content_range;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  static_cast<Body*>(user)->data.append(data, size * n);
  return size * n;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  const std::string line(data, size * n);
  if (line.size() > 14 && ::strncasecmp(line.c_str(), "Content-Range:", 14) == 0) {
    std::string v = line.substr(14);
    v.erase(0, v.find_first_not_of(' '));
    v.erase(v.find_last_not_of("\r\n") + 1);
    static_cast<Body*>(user)->content_range = v;
  }
  return size * n;
}

// The bytes of each file a download manager (or a sink) has: an image and a mask.
struct Images {
  std::vector<std::string> image;
  std::vector<std::vector<bool>> have;
  explicit Images(const Source& src) {
    for (std::size_t f = 0; f < src.files(); ++f) {
      image.emplace_back(src.size(f), '\0');
      have.emplace_back(src.size(f), false);
    }
  }
  void put(std::size_t f, std::uint64_t offset, const void* data, std::size_t len) {
    std::memcpy(image[f].data() + offset, data, len);
    std::fill(have[f].begin() + static_cast<std::ptrdiff_t>(offset), have[f].begin() + static_cast<std::ptrdiff_t>(offset + len), true);
  }
  // The first byte of [b, e) of file f that is missing or differs from the source; e if none.
  [[nodiscard]] std::uint64_t first_bad(const Source& src, std::size_t f, std::uint64_t b, std::uint64_t e) const {
    for (std::uint64_t x = b; x < e; ++x) {
      if (!have[f][x] || image[f][x] != src.bytes[f][x]) return x;
    }
    return e;
  }
};

// Makes every transfer of `plan` with libcurl, as a download manager with its own scheduler
// would: GET url, Range: bytes=OFFSET-(OFFSET+LENGTH-1), If-Match. Each answer must be 206 with
// exactly that Content-Range and the source's bytes at that offset; they go into `images`.
// Returns the bytes received.
std::uint64_t download_plan(const tf_plan* plan, const Source& src, Images& images) {
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  REQUIRE(curl);
  std::uint64_t received = 0;
  for (std::size_t i = 0; i < tf_plan_count(plan); ++i) {
    const std::size_t file = tf_plan_file(plan, i);
    const std::uint64_t offset = tf_plan_offset(plan, i), length = tf_plan_length(plan, i);
    REQUIRE(file < src.files());
    REQUIRE(offset + length <= src.size(file));
    const std::string range = std::to_string(offset) + "-" + std::to_string(offset + length - 1);
    curl_slist* raw = curl_slist_append(nullptr, ("Range: bytes=" + range).c_str());
    if (tf_plan_if_match(plan, i) != nullptr) raw = curl_slist_append(raw, (std::string("If-Match: ") + tf_plan_if_match(plan, i)).c_str());
    std::unique_ptr<curl_slist, SlistDeleter> headers(raw);
    Body body;
    curl_easy_setopt(curl.get(), CURLOPT_URL, tf_plan_url(plan, i));
    curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl.get(), CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl.get(), CURLOPT_HEADERDATA, &body);
    curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 0L);
    const CURLcode rc = curl_easy_perform(curl.get());
    long status = 0;
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
    INFO("GET " << tf_plan_url(plan, i) << " bytes " << range << ": curl " << rc << ", HTTP " << status << ", "
                << body.data.size() << " bytes, Content-Range " << body.content_range);
    CHECK(rc == CURLE_OK);
    CHECK(status == 206);
    CHECK(body.content_range == "bytes " + range + "/" + std::to_string(src.size(file)));
    if (body.data.size() != length) {
      FAIL_CHECK("body of " << body.data.size() << " bytes, want " << length);
      continue;
    }
    CHECK(body.data == src.bytes[file].substr(offset, length));
    images.put(file, offset, body.data.data(), length);
    received += length;
  }
  return received;
}

int count_calls(size_t, uint64_t, const void*, size_t, void* user) {
  ++*static_cast<int*>(user);
  return 0;
}

// ---- the byte sink ----

struct SinkLog {
  const Source* src;
  Images images;
  std::uint64_t bytes = 0;  // received
  int calls = 0;
  std::uint64_t overlaps = 0;  // bytes received twice
  int out_of_range = 0;        // pieces outside their file
  int cancel_at = 0;           // return non-zero on this call (1-based); 0: never
  int calls_after_cancel = 0;
  std::vector<std::pair<std::size_t, ByteRange>> runs;  // contiguous runs, in arrival order
  explicit SinkLog(const Source& s) : src(&s), images(s) {}
};

int collect(size_t file, uint64_t offset, const void* data, size_t len, void* user) {
  auto* log = static_cast<SinkLog*>(user);
  ++log->calls;
  if (log->cancel_at != 0 && log->calls > log->cancel_at) ++log->calls_after_cancel;
  if (file >= log->src->files() || offset > log->src->size(file) || len > log->src->size(file) - offset ||
      (len > 0 && data == nullptr)) {
    ++log->out_of_range;
    return 1;
  }
  for (std::size_t x = 0; x < len; ++x) log->overlaps += log->images.have[file][offset + x] ? 1 : 0;
  log->images.put(file, offset, data, len);
  log->bytes += len;
  if (!log->runs.empty() && log->runs.back().first == file && log->runs.back().second.end() == offset) {
    log->runs.back().second.length += len;
  } else {
    log->runs.push_back({file, ByteRange{offset, len}});
  }
  return log->cancel_at != 0 && log->calls >= log->cancel_at ? 1 : 0;
}

// The sink received exactly the bytes of `wanted`, each once, equal to the source.
void check_sink_bytes(const SinkLog& log, const std::vector<Ranges>& wanted) {
  CHECK(log.overlaps == 0);
  CHECK(log.out_of_range == 0);
  for (std::size_t f = 0; f < log.src->files(); ++f) {
    for (const auto& r : wanted[f]) {
      INFO("file " << f << " " << tftest::describe({r}));
      CHECK(log.images.first_bad(*log.src, f, r.offset, r.end()) == r.end());
    }
  }
  CHECK(log.bytes == bytes_of(wanted));  // and no byte twice: nothing else either
}

// ---- per-file progress ----

struct FileLog {
  int calls = 0;
  int bad = 0;          // calls whose figures broke a rule
  int max_partial = 0;  // most files seen at once with 0 < done < total
  std::vector<tf_file_progress> last;
  std::uint64_t bytes_done = 0, bytes_total = 0;
  std::string why;  // the first broken rule
};

int log_files(const tf_progress* p, void* user) {
  auto* log = static_cast<FileLog*>(user);
  ++log->calls;
  auto broke = [&](const std::string& rule) {
    if (log->why.empty()) log->why = "call " + std::to_string(log->calls) + ": " + rule;
    ++log->bad;
  };
  if (!TF_HAS_FIELD(p, files) || p->size != sizeof(tf_progress) || p->n_files != p->files_total ||
      (p->n_files > 0 && p->files == nullptr)) {
    broke("size " + std::to_string(p->size) + ", n_files " + std::to_string(p->n_files) + ", files_total " +
          std::to_string(p->files_total));
    return 0;
  }
  std::uint64_t done = 0, sum = 0;
  int partial = 0;
  for (std::size_t i = 0; i < p->n_files; ++i) {
    const tf_file_progress& fp = p->files[i];
    if (i > 0 && fp.file <= p->files[i - 1].file) broke("not in file order");
    if (fp.bytes_done > fp.bytes_total) broke("done beyond total");
    if (log->last.size() == p->n_files && (fp.file != log->last[i].file || fp.bytes_done < log->last[i].bytes_done ||
                                           fp.bytes_total != log->last[i].bytes_total)) {
      broke("the same files, done growing");
    }
    if (fp.bytes_done > 0 && fp.bytes_done < fp.bytes_total) ++partial;
    done += fp.bytes_done;
    sum += fp.bytes_total;
  }
  if (done != p->bytes_done || sum != p->bytes_total) broke("the files' sums are the totals");
  log->max_partial = std::max(log->max_partial, partial);
  log->last.assign(p->files, p->files + p->n_files);
  log->bytes_done = p->bytes_done;
  log->bytes_total = p->bytes_total;
  return 0;
}

// `snapshots/COMMIT/PATH` in `repo_dir` is a relative symlink to `blobs/BLOB`, a regular file
// with the bytes of `source`.
void check_published(const fs::path& repo_dir, const std::string& commit, const std::string& path,
                     const fs::path& source, const std::string& blob_name) {
  INFO("published " << path << " as blob " << blob_name);
  const fs::path blob = repo_dir / "blobs" / blob_name;
  const fs::path link = repo_dir / "snapshots" / commit / path;
  CHECK(fs::is_regular_file(fs::symlink_status(blob)));
  CHECK(tftest::try_read_file(blob) == tftest::read_file(source));
  REQUIRE(fs::is_symlink(fs::symlink_status(link)));
  // ../../blobs/BLOB from snapshots/COMMIT/, one more ../ per directory in PATH
  std::string want = "../../";
  for (char ch : path) {
    if (ch == '/') want += "../";
  }
  want += "blobs/" + blob_name;
  CHECK(fs::read_symlink(link).string() == want);
  CHECK(fs::canonical(link) == fs::canonical(blob));
}

// Fetch options with `connections`, `chunk` bytes per transfer and holes of `gap` bytes joined;
// kKeep leaves the library's default.
constexpr std::uint64_t kKeep = UINT64_MAX;
tf_fetch_options fetch_options(std::uint64_t connections, std::uint64_t chunk, std::uint64_t gap) {
  tf_fetch_options o;
  tf_fetch_options_init(&o);
  if (connections != kKeep) o.connections = static_cast<std::size_t>(connections);
  if (chunk != kKeep) o.chunk_size = chunk;
  if (gap != kKeep) o.coalesce_gap = gap;
  return o;
}

// tf_plan_fetch; REQUIREs success.
Plan make_plan(tf_checkpoint* c, const char* const* patterns, std::size_t n, const tf_fetch_options* options) {
  tf_plan* raw = nullptr;
  Error err;
  CHECK_CODE(tf_plan_fetch(c, patterns, n, options, &raw, err.out()), TF_OK, err);
  REQUIRE(raw != nullptr);
  return Plan(raw, &tf_plan_free);
}

const char* const kAll[] = {"*"};
const char* const kLayer0[] = {"model.layers.0.*"};
const char* const kLmHead[] = {"lm_head.weight"};

}  // namespace

TEST_CASE("C API remote: the reference sharded checkpoint over HTTP: nothing fetched by open, a glob fetched exactly, "
          "then cached, then everything matches MANIFEST.json",
          "[capi][remote]") {
  Fixture fx;
  Checkpoint ckpt = fx.open("hf://ref/tiny-sharded", "cache-ref");
  tf_checkpoint* c = ckpt.get();
  CHECK(tf_is_remote(c) == 1);
  CHECK(tf_file_count(c) == 3);
  CHECK(std::string(tf_file_path(c, 0)) == "model-00001-of-00003.safetensors");
  CHECK(tf_file_size(c, 1) == 303040);

  // Nothing is fetched by open.
  const void* data = nullptr;
  std::size_t len = 0;
  CHECK(tf_tensor_data(c, "lm_head.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  CHECK(data == nullptr);

  ProgressLog log;
  tf_fetch_options fetch = fetch_options(4, 16384, 1);
  fetch.progress = log_progress;
  fetch.user = &log;
  tf_fetch_stats stats;
  tf_fetch_stats_init(&stats);
  Error err;
  CHECK_CODE(tf_fetch(c, kLayer0, 1, &fetch, &stats, err.out()), TF_OK, err);
  CHECK(log.calls >= 1);
  CHECK(log.monotonic);
  CHECK(log.last.bytes_done == log.last.bytes_total);
  CHECK(stats.bytes_transferred == log.last.bytes_total);
  CHECK(stats.requests >= stats.chunks);
  std::size_t fetched = 0;
  std::uint64_t wanted = 0;
  for (std::size_t i = 0; i < tf_tensor_count(c); ++i) {
    const std::string name = tf_tensor_name(c, i);
    if (!name.starts_with("model.layers.0.")) continue;
    ++fetched;
    std::uint64_t begin = 0, end = 0;
    CHECK_CODE(tf_tensor_data(c, name.c_str(), &data, &len), TF_OK, err);
    CHECK_CODE(tf_tensor_data_offsets(c, i, &begin, &end), TF_OK, err);
    wanted += end - begin;
  }
  CHECK(fetched == 9);
  // What open read (each file's first 256 KiB) is cached; the rest was transferred, exactly
  // (no coalescing across holes).
  CHECK(stats.bytes_transferred + stats.bytes_cached == wanted);

  // Again: everything is cached now.
  CHECK_CODE(tf_fetch(c, kLayer0, 1, nullptr, &stats, err.out()), TF_OK, err);
  CHECK(stats.bytes_transferred == 0);
  CHECK(stats.requests == 0);
  CHECK(stats.bytes_cached == wanted);

  // The rest, then every tensor against the manifest.
  CHECK_CODE(tf_fetch_all(c, nullptr, &stats, err.out()), TF_OK, err);
  check_against_manifest(c, manifest(), "llama-tiny-sharded");
}

TEST_CASE("C API remote: a generated checkpoint: only the tensor asked for travels; cancels from another thread and "
          "from the callback; fetch_all keeps what was committed; save_files equals the served files",
          "[capi][remote][cancel]") {
  Fixture fx;
  Checkpoint ckpt = fx.open("gen/model", "cache-gen");
  tf_checkpoint* c = ckpt.get();
  REQUIRE(tf_file_count(c) == 2);
  std::uint64_t size_sum = 0;
  for (std::size_t f = 0; f < tf_file_count(c); ++f) size_sum += tf_file_size(c, f);

  // Only the tensor asked for: lm_head (past the first 256 KiB of its shard), not its
  // neighbours, and not embed_tokens (at the start of the other shard).
  std::size_t index = 0;
  REQUIRE(tf_find(c, "lm_head.weight", &index));
  std::uint64_t begin = 0, end = 0;
  REQUIRE(tf_tensor_data_offsets(c, index, &begin, &end) == TF_OK);
  CHECK(begin > kHeaderWindow);
  Error err;
  {
    ProgressLog log;
    tf_fetch_options fetch = fetch_options(4, 65536, 1);
    fetch.progress = log_progress;
    fetch.user = &log;
    tf_fetch_stats stats;
    tf_fetch_stats_init(&stats);
    CHECK_CODE(tf_fetch(c, kLmHead, 1, &fetch, &stats, err.out()), TF_OK, err);
    CHECK(stats.bytes_transferred == end - begin);
    CHECK(stats.chunks >= (end - begin + 65535) / 65536);
    CHECK(stats.requests >= stats.chunks);
    CHECK(log.last.bytes_done == end - begin);
    CHECK(log.last.files_total == 1);
    CHECK(log.last.files_done == 1);
    const void* data = nullptr;
    std::size_t len = 0;
    CHECK(tf_tensor_data(c, "lm_head.weight", &data, &len) == TF_OK);
    CHECK(len == end - begin);
    CHECK(tf_tensor_data(c, "model.embed_tokens.weight", &data, &len) == TF_ERR_NOT_FETCHED);
    CHECK(tf_tensor_data(c, "model.layers.1.mlp.down_proj.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  }
  tf_fetch_options fetch = fetch_options(kKeep, kKeep, 1);
  fetch.progress = log_progress;
  {
    // Cancelled from another thread while data flows (16 KiB chunks over 2 connections with
    // 20 ms latency: the whole download takes well over a second).
    ProgressLog log;
    fetch.connections = 2;
    fetch.chunk_size = 16384;
    fetch.user = &log;
    auto canceller = std::async(std::launch::async, [&] {
      std::unique_lock lock(log.mutex);
      log.cond.wait(lock, [&] { return log.saw_data; });
      tf_cancel(c);
    });
    tf_fetch_stats stats;
    tf_fetch_stats_init(&stats);
    CHECK_CODE(tf_fetch_all(c, &fetch, &stats, err.out()), TF_ERR_CANCELLED, err);
    CHECK_THAT(err.message(), Catch::Contains("cancel"));
    {
      std::lock_guard lock(log.mutex);
      CHECK(log.saw_data);
      CHECK(log.last.bytes_done < log.last.bytes_total);
      log.saw_data = true;  // should the fetch have ended without data: release the thread
      log.cond.notify_all();
    }
    canceller.get();
  }
  {
    // Cancelled by the callback (on its first call).
    ProgressLog log;
    log.cancel_at = 1;
    fetch.user = &log;
    CHECK_CODE(tf_fetch_all(c, &fetch, nullptr, err.out()), TF_ERR_CANCELLED, err);
    CHECK_THAT(err.message(), Catch::Contains("cancel"));
  }
  // The whole checkpoint: what earlier fetches committed is not transferred again.
  tf_fetch_options_init(&fetch);
  fetch.chunk_size = 1 << 20;
  fetch.connections = 8;
  tf_fetch_stats stats;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch_all(c, &fetch, &stats, err.out()), TF_OK, err);
  CHECK(stats.bytes_cached >= end - begin);
  CHECK(stats.bytes_transferred < size_sum);
  CHECK(stats.bytes_transferred + stats.bytes_cached >= size_sum);
  check_against_files(c, repos().gen);

  // Saved as files, equal to the served ones.
  const fs::path saved = fx.tmp / "saved-remote";
  CHECK_CODE(tf_save_files(c, saved.c_str(), err.out()), TF_OK, err);
  for (std::size_t f = 0; f < tf_file_count(c); ++f) {
    INFO(tf_file_path(c, f));
    CHECK(tftest::read_file(saved / tf_file_path(c, f)) == tftest::read_file(repos().gen / tf_file_path(c, f)));
  }
  Checkpoint copy = open_ok(saved.string());
  CHECK(tf_tensor_count(copy.get()) == tf_tensor_count(c));
}

TEST_CASE("C API remote: a download manager plans a glob (tf_plan_fetch) and makes the transfers itself with libcurl; "
          "the plan leaves out what the cache holds, coalesces and splits as the options say",
          "[capi][remote][plan]") {
  Fixture fx;
  Checkpoint ckpt = fx.open("gen/model", "cache-plan");
  tf_checkpoint* c = ckpt.get();
  const Source src = load_sources(c, repos().gen);
  REQUIRE(src.files() == 2);
  const std::vector<Ranges> wanted = wanted_ranges(c, src, {"model.layers."});
  const std::vector<std::uint64_t> opened = opened_bytes(fx, c);
  CHECK(wanted[0].size() == 1);  // layer 0 in one file, layer 1 in the other
  CHECK(wanted[1].size() == 1);
  const char* const glob[] = {"model.layers.*"};
  Error err;

  // One tensor first, into the cache: in the middle of layer 0, past what open read.
  const char* const one[] = {"model.layers.0.self_attn.v_proj.weight"};
  std::size_t one_index = 0;
  REQUIRE(tf_find(c, one[0], &one_index));
  const std::size_t one_file = tf_tensor_file_index(c, one_index);
  const ByteRange one_range = tensor_range(c, src, one_index);
  REQUIRE(one_range.offset >= kHeaderWindow);
  REQUIRE(one_range.end() < src.size(one_file));
  CHECK_CODE(tf_fetch(c, one, 1, nullptr, nullptr, err.out()), TF_OK, err);
  const void* data = nullptr;
  std::size_t len = 0;
  CHECK(tf_tensor_data(c, one[0], &data, &len) == TF_OK);
  CHECK(len == one_range.length);

  SECTION("64 KiB transfers, no coalescing across holes: the selection minus the cache, made by the download manager") {
    tf_fetch_options fetch = fetch_options(kKeep, 65536, 1);
    Plan plan = make_plan(c, glob, 1, &fetch);
    const auto expected = expected_plan(wanted, opened, one_file, one_range, 1);
    CHECK(expected[one_file].size() == 2);  // the cached tensor is a hole
    const auto got = plan_ranges(plan.get(), src, 65536);
    CHECK(got == expected);
    CHECK_FALSE(tftest::intersects(got[one_file], one_range));
    CHECK(tf_plan_count(plan.get()) == pieces_of(expected, 65536));
    CHECK(tf_plan_count(plan.get()) > 4);

    // The download manager makes them; then every selected tensor is assembled from its own
    // transfers and what tensorfetch's cache serves, and equals the source. Only bytes of the
    // first 256 KiB (cached by open, not served alone) may be missing.
    Images images(src);
    CHECK(download_plan(plan.get(), src, images) == bytes_of(expected));
    std::uint64_t unknown = 0;
    for (std::size_t i = 0; i < tf_tensor_count(c); ++i) {
      const std::string name = tf_tensor_name(c, i);
      if (!name.starts_with("model.layers.")) continue;
      INFO(name);
      const std::size_t f = tf_tensor_file_index(c, i);
      const ByteRange r = tensor_range(c, src, i);
      if (tf_tensor_data(c, name.c_str(), &data, &len) == TF_OK) {
        REQUIRE(len == r.length);
        images.put(f, r.offset, data, len);
      }
      for (std::uint64_t x = std::max(r.offset, kHeaderWindow); x < r.end(); ++x) unknown += images.have[f][x] ? 0 : 1;
      // Every byte it has equals the source.
      std::uint64_t x = r.offset;
      while (x < r.end() && (!images.have[f][x] || images.image[f][x] == src.bytes[f][x])) ++x;
      CHECK(x == r.end());
    }
    CHECK(unknown == 0);
    // What the download manager fetched did not enter tensorfetch's cache.
    CHECK(tf_tensor_data(c, "model.layers.0.mlp.up_proj.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  }
  SECTION("coalescing: a gap one byte smaller than the cached hole keeps two ranges; a gap of the hole joins them") {
    // One connection: chunks of about total / 1, so each coalesced range is one transfer (with
    // more connections the ranges would be cut into about total / N).
    for (const std::uint64_t gap : {one_range.length - 1, one_range.length}) {
      INFO("coalesce_gap " << gap << ", hole " << one_range.length);
      tf_fetch_options fetch = fetch_options(1, kKeep, gap);
      Plan plan = make_plan(c, glob, 1, &fetch);
      const auto expected = expected_plan(wanted, opened, one_file, one_range, gap);
      const bool joined = gap == one_range.length;
      CHECK(expected[one_file].size() == (joined ? 1u : 2u));
      const auto got = plan_ranges(plan.get(), src, 8u << 20);
      CHECK(got == expected);
      CHECK(tf_plan_count(plan.get()) == expected[0].size() + expected[1].size());
      CHECK(tftest::intersects(got[one_file], one_range) == joined);
    }
  }
  SECTION("an odd chunk size (10007): still the fewest transfers, none longer") {
    tf_fetch_options fetch = fetch_options(kKeep, 10007, 1);
    Plan plan = make_plan(c, glob, 1, &fetch);
    const auto expected = expected_plan(wanted, opened, one_file, one_range, 0);
    CHECK(plan_ranges(plan.get(), src, 10007) == expected);
    CHECK(tf_plan_count(plan.get()) == pieces_of(expected, 10007));
  }
  SECTION("planned for a sink, the cache is not subtracted: the download manager assembles every selected tensor") {
    int sink_calls = 0;
    tf_fetch_options fetch = fetch_options(kKeep, 65536, 1);
    fetch.sink = count_calls;  // only its presence matters: a plan never calls it
    fetch.user = &sink_calls;
    Plan plan = make_plan(c, glob, 1, &fetch);
    std::vector<Ranges> expected;
    for (const auto& w : wanted) expected.push_back(coalesced(w, 1));
    CHECK(plan_ranges(plan.get(), src, 65536) == expected);
    CHECK(tf_plan_count(plan.get()) == pieces_of(expected, 65536));
    CHECK(sink_calls == 0);
    Images images(src);
    CHECK(download_plan(plan.get(), src, images) == bytes_of(wanted));
    for (std::size_t i = 0; i < tf_tensor_count(c); ++i) {
      const std::string name = tf_tensor_name(c, i);
      if (!name.starts_with("model.layers.")) continue;
      INFO(name);
      const ByteRange r = tensor_range(c, src, i);
      CHECK(images.first_bad(src, tf_tensor_file_index(c, i), r.offset, r.end()) == r.end());
    }
  }
  SECTION("a pattern that matches nothing: NotFound naming it, no plan") {
    const char* const none[] = {"model.layers.9.*"};
    tf_plan* plan = reinterpret_cast<tf_plan*>(&plan);
    CHECK_CODE(tf_plan_fetch(c, none, 1, nullptr, &plan, err.out()), TF_ERR_NOT_FOUND, err);
    CHECK(plan == nullptr);
    CHECK_THAT(err.message(), Catch::Contains("model.layers.9.*"));
  }
}

TEST_CASE("C API remote: fetching into a sink: exactly the selected bytes reach it (cached or not) and the cache is left "
          "alone; one connection delivers in plan order; non-zero cancels; an older options struct has no sink",
          "[capi][remote][sink]") {
  Fixture fx;
  Checkpoint ckpt = fx.open("gen/model", "cache-sink");
  tf_checkpoint* c = ckpt.get();
  const Source src = load_sources(c, repos().gen);
  const char* const patterns[] = {"model.layers.0.mlp.*", "lm_head.weight", "model.layers.1.input_layernorm.weight"};
  const std::vector<Ranges> wanted =
      wanted_ranges(c, src, {"model.layers.0.mlp.", "lm_head.weight", "model.layers.1.input_layernorm.weight"});
  const char* const up[] = {"model.layers.0.mlp.up_proj.weight"};
  Error err;
  // One of the tensors is in the cache already: the sink gets its bytes all the same.
  CHECK_CODE(tf_fetch(c, up, 1, nullptr, nullptr, err.out()), TF_OK, err);
  SinkLog log(src);
  tf_fetch_options fetch = fetch_options(4, 65536, 1);
  fetch.sink = collect;
  fetch.user = &log;
  const void* data = nullptr;
  std::size_t len = 0;

  SECTION("four connections: every selected byte once, nothing into the cache") {
    tf_fetch_stats stats;
    tf_fetch_stats_init(&stats);
    CHECK_CODE(tf_fetch(c, patterns, 3, &fetch, &stats, err.out()), TF_OK, err);
    check_sink_bytes(log, wanted);
    CHECK(stats.bytes_transferred == log.bytes);
    CHECK(stats.bytes_cached == 0);
    CHECK(tf_tensor_data(c, "lm_head.weight", &data, &len) == TF_ERR_NOT_FETCHED);
    CHECK(tf_tensor_data(c, "model.layers.0.mlp.gate_proj.weight", &data, &len) == TF_ERR_NOT_FETCHED);
    CHECK(tf_tensor_data(c, "model.layers.0.mlp.down_proj.weight", &data, &len) == TF_ERR_NOT_FETCHED);
    CHECK(tf_tensor_data(c, up[0], &data, &len) == TF_OK);
  }
  SECTION("one connection: one contiguous run per planned range, in file and offset order; the plan is what travelled") {
    fetch.connections = 1;
    Plan plan = make_plan(c, patterns, 3, &fetch);
    CHECK(log.calls == 0);
    std::vector<Ranges> expected;
    for (const auto& w : wanted) expected.push_back(coalesced(w, 1));
    CHECK(plan_ranges(plan.get(), src, 65536) == expected);
    tf_fetch_stats stats;
    tf_fetch_stats_init(&stats);
    CHECK_CODE(tf_fetch(c, patterns, 3, &fetch, &stats, err.out()), TF_OK, err);
    check_sink_bytes(log, wanted);
    CHECK(stats.chunks == tf_plan_count(plan.get()));
    std::vector<std::pair<std::size_t, ByteRange>> want_runs;
    for (std::size_t f = 0; f < src.files(); ++f) {
      for (const auto& r : expected[f]) want_runs.push_back({f, r});
    }
    CHECK(log.runs == want_runs);
  }
  SECTION("non-zero from the sink cancels: Cancelled naming the sink, never called again, nothing cached") {
    log.cancel_at = 3;
    CHECK_CODE(tf_fetch(c, patterns, 3, &fetch, nullptr, err.out()), TF_ERR_CANCELLED, err);
    CHECK_THAT(err.message(), Catch::Contains("sink"));
    CHECK(log.calls == 3);
    CHECK(log.calls_after_cancel == 0);
    CHECK(tf_tensor_data(c, "lm_head.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  }
  SECTION("a caller built before `sink` existed: the field is not read (its size says so), the bytes go to the cache") {
    fetch.size = offsetof(tf_fetch_options, sink);
    CHECK_CODE(tf_fetch(c, patterns, 3, &fetch, nullptr, err.out()), TF_OK, err);
    CHECK(log.calls == 0);
    REQUIRE(tf_tensor_data(c, "lm_head.weight", &data, &len) == TF_OK);
    std::size_t i = 0;
    REQUIRE(tf_find(c, "lm_head.weight", &i));
    const ByteRange r = tensor_range(c, src, i);
    CHECK(len == r.length);
    CHECK(std::string(static_cast<const char*>(data), len) == src.bytes[tf_tensor_file_index(c, i)].substr(r.offset, r.length));
  }
}

TEST_CASE("C API remote: one connection and per-file progress: the files' figures add up to the totals, grow, and one "
          "file at a time is in transfer",
          "[capi][remote][progress]") {
  Fixture fx;
  Checkpoint ckpt = fx.open("gen/model", "cache-progress");
  tf_checkpoint* c = ckpt.get();
  const Source src = load_sources(c, repos().gen);
  const std::vector<std::uint64_t> opened = opened_bytes(fx, c);
  Error err;
  tf_fetch_options fetch = fetch_options(1, 65536, kKeep);
  fetch.progress = log_files;

  // A tensor of one file: one element, for that file.
  std::size_t index = 0;
  REQUIRE(tf_find(c, kLmHead[0], &index));
  const ByteRange lm = tensor_range(c, src, index);
  {
    FileLog log;
    fetch.user = &log;
    tf_fetch_stats stats;
    tf_fetch_stats_init(&stats);
    CHECK_CODE(tf_fetch(c, kLmHead, 1, &fetch, &stats, err.out()), TF_OK, err);
    INFO(log.why);
    CHECK(log.calls >= 1);
    CHECK(log.bad == 0);
    CHECK(log.max_partial <= 1);
    REQUIRE(log.last.size() == 1);
    CHECK(log.last[0].file == tf_tensor_file_index(c, index));
    CHECK(log.last[0].bytes_done == lm.length);
    CHECK(log.last[0].bytes_total == lm.length);
    CHECK(stats.bytes_transferred == lm.length);
  }
  // Everything, one transfer at a time: the rest of each file past what open read.
  FileLog log;
  fetch.user = &log;
  tf_fetch_stats stats;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch_all(c, &fetch, &stats, err.out()), TF_OK, err);
  INFO(log.why);
  CHECK(log.calls >= 2);
  CHECK(log.bad == 0);
  CHECK(log.max_partial <= 1);
  REQUIRE(log.last.size() == src.files());
  std::vector<Ranges> rest;
  for (std::size_t f = 0; f < src.files(); ++f) {
    const std::uint64_t start = opened[f];
    Ranges r{{start, src.size(f) - start}};
    if (f == tf_tensor_file_index(c, index)) r = minus(r, {lm});
    rest.push_back(r);
    INFO("file " << f);
    CHECK(log.last[f].file == f);
    CHECK(log.last[f].bytes_done == log.last[f].bytes_total);
    CHECK(log.last[f].bytes_total == total(r));
  }
  CHECK(log.bytes_done == stats.bytes_transferred);
  CHECK(log.bytes_total == stats.bytes_transferred);
  CHECK(stats.chunks == pieces_of(rest, 65536));
  CHECK(stats.requests == stats.chunks);  // one request each, one after the other
  CHECK(stats.retries == 0);
  check_against_files(c, repos().gen);
}

TEST_CASE("C API remote: warm_connections = 1: tf_open opens the N data connections (a GET of the file's first byte "
          "each) and every request of the first fetch goes out on them; unset, tf_open sends no such request",
          "[capi][remote][warm]") {
  Fixture fx;
  // A file's URL on the "CDN" host (nothing is warmed toward the Hub endpoint).
  const std::string url = fx.server->cdn_url("gen/model", "model-00001-of-00002.safetensors");
  constexpr std::size_t kN = 4;
  const std::string dir = fx.cache("cache-warm");
  tf_open_options o = fx.options(dir);
  o.connections = kN;
  {  // Not asked for: the open reads the header and nothing else.
    Checkpoint plain = open_ok(url, &o);
    for (const auto& r : fx.server->log()) CHECK(r.range != "bytes=0-0");
  }
  fx.server->clear_log();
  o.warm_connections = 1;
  Checkpoint ckpt = open_ok(url, &o);
  // The fetch waits for warm-ups still running, so the log then holds them all.
  tf_fetch_options fetch = fetch_options(kN, 65536, 1);
  tf_fetch_stats stats;
  tf_fetch_stats_init(&stats);
  Error err;
  CHECK_CODE(tf_fetch_all(ckpt.get(), &fetch, &stats, err.out()), TF_OK, err);
  CHECK(stats.requests >= kN);
  const auto log = fx.server->log();
  std::string lines;
  for (const auto& r : log) lines += r.to_json() + "\n";
  INFO(lines);
  std::set<int> warm_ports;
  std::size_t warm = 0, fetched = 0;
  for (const auto& r : log) {
    CHECK(r.kind == "cdn");
    if (r.range == "bytes=0-0") {  // a warm-up
      ++warm;
      CHECK(r.status == 206);
      warm_ports.insert(r.client_port);
    }
  }
  CHECK(warm == kN);
  CHECK(warm_ports.size() == kN);  // each on a TCP connection of its own
  for (const auto& r : log) {
    if (r.range.starts_with("bytes=0-")) continue;  // a warm-up, or the open's header read
    ++fetched;
    CHECK(warm_ports.count(r.client_port) == 1);  // no new TCP connection
  }
  CHECK(fetched == stats.requests);
  REQUIRE(tf_file_count(ckpt.get()) == 1);
  check_against_file(ckpt.get(), 0, repos().gen / "model-00001-of-00002.safetensors");
}

TEST_CASE("C API remote: tf_publish_to_hf_cache writes the Hugging Face cache layout (blobs, relative symlinks, refs); "
          "tensorfetch then reads it with nothing to transfer, and opens offline",
          "[capi][remote][publish]") {
  Fixture fx;
  const std::string cache = fx.cache("cache-publish");
  const std::string cache2 = fx.cache("cache-publish-2");
  const std::string hub = fx.cache("hf-hub");
  const fs::path repo_dir = fs::path(hub) / "models--ref--tiny-sharded";
  const fs::path& repo = repos().ref;
  Error err;
  tf_open_options options = remote_options(fx.endpoint, cache, hub);
  std::string commit;
  {
    Checkpoint ckpt = open_ok("hf://ref/tiny-sharded", &options);
    tf_checkpoint* c = ckpt.get();
    REQUIRE(tf_commit(c) != nullptr);
    commit = tf_commit(c);
    CHECK(commit == fx.server->commit("ref/tiny-sharded"));
    CHECK(commit == tftest::sha1_hex("ref/tiny-sharded"));  // the test server's commit of a repo

    // Nothing whole in the cache yet: no safetensors file is published.
    std::size_t published = 99;
    CHECK_CODE(tf_publish_to_hf_cache(c, &published, err.out()), TF_OK, err);
    CHECK(published == 0);
    CHECK_FALSE(fs::exists(fs::symlink_status(repo_dir / "snapshots" / commit / tf_file_path(c, 0))));

    tf_fetch_stats stats;
    tf_fetch_stats_init(&stats);
    CHECK_CODE(tf_fetch_all(c, nullptr, &stats, err.out()), TF_OK, err);
    for (int round = 0; round < 2; ++round) {  // publishing again changes nothing
      INFO("publish #" << round + 1);
      published = 0;
      CHECK_CODE(tf_publish_to_hf_cache(c, &published, err.out()), TF_OK, err);
      CHECK(published == 3);
      for (std::size_t f = 0; f < tf_file_count(c); ++f) {
        const fs::path source = repo / tf_file_path(c, f);
        check_published(repo_dir, commit, tf_file_path(c, f), source, tftest::sha256_hex(tftest::read_file(source)));
      }
      for (const char* small : {"model.safetensors.index.json", "config.json"}) {
        const fs::path source = repo / small;
        check_published(repo_dir, commit, small, source, tftest::git_blob_sha1_hex(tftest::read_file(source)));
      }
      std::string ref = tftest::read_file(repo_dir / "refs" / "main");
      while (!ref.empty() && (ref.back() == '\n' || ref.back() == '\r')) ref.pop_back();
      CHECK(ref == commit);
    }
  }
  {
    // With an empty cache of its own and that hub cache, tensorfetch reads every file from the
    // published blobs: nothing to plan, nothing transferred, every tensor right.
    tf_open_options o2 = remote_options(fx.endpoint, cache2, hub);
    Checkpoint ckpt = open_ok("hf://ref/tiny-sharded", &o2);
    tf_plan* raw = nullptr;
    CHECK_CODE(tf_plan_fetch(ckpt.get(), kAll, 1, nullptr, &raw, err.out()), TF_OK, err);
    Plan plan(raw, &tf_plan_free);
    REQUIRE(plan);
    CHECK(tf_plan_count(plan.get()) == 0);
    tf_fetch_stats stats;
    tf_fetch_stats_init(&stats);
    CHECK_CODE(tf_fetch_all(ckpt.get(), nullptr, &stats, err.out()), TF_OK, err);
    CHECK(stats.bytes_transferred == 0);
    CHECK(stats.requests == 0);
    check_against_manifest(ckpt.get(), manifest(), "llama-tiny-sharded");
  }
  {
    // Offline (no request at all) from what the first fetch recorded.
    fx.server->clear_log();
    options.offline = 1;
    Checkpoint ckpt = open_ok("hf://ref/tiny-sharded", &options);
    REQUIRE(tf_commit(ckpt.get()) != nullptr);
    CHECK(std::string(tf_commit(ckpt.get())) == commit);
    check_against_manifest(ckpt.get(), manifest(), "llama-tiny-sharded");
    CHECK(fx.server->log().empty());
  }
}

TEST_CASE("C API remote: an unknown repo is RemoteNotFound (exit 3) naming it; a group-writable cache is refused unless "
          "shared_cache says so",
          "[capi][remote][errors]") {
  Fixture fx;
  const std::string cache = fx.cache("cache-err");
  tf_open_options options = remote_options(fx.endpoint, cache, fx.hf_none);
  tf_checkpoint* raw = nullptr;
  Error err;
  CHECK_CODE(tf_open("hf://nobody/missing", &options, &raw, err.out()), TF_ERR_REMOTE_NOT_FOUND, err);
  CHECK(raw == nullptr);
  CHECK(tf_code_exit_code(tf_error_code(err.get())) == 3);
  CHECK_THAT(err.message(), Catch::Contains("nobody/missing"));

  REQUIRE(::mkdir(cache.c_str(), 0770) == 0);
  REQUIRE(::chmod(cache.c_str(), 0770) == 0);
  options.shared_cache = 0;
  {
    Checkpoint ckpt = open_ok("hf://ref/tiny-sharded", &options);
    CHECK_CODE(tf_fetch(ckpt.get(), kLayer0, 1, nullptr, nullptr, err.out()), TF_ERR_IO, err);
    CHECK_THAT(err.message(), Catch::Contains("writable by its group"));
    CHECK_THAT(err.message(), Catch::Contains("shared"));
  }
  options.shared_cache = 1;
  Checkpoint ckpt = open_ok("hf://ref/tiny-sharded", &options);
  CHECK_CODE(tf_fetch(ckpt.get(), kLayer0, 1, nullptr, nullptr, err.out()), TF_OK, err);
}

TEST_CASE("C API remote: a token with CR/LF or another control character is refused before any request "
          "(InvalidArgument, exit 1), the message naming the option and never the token",
          "[capi][remote][hostile]") {
  Fixture fx;
  const std::string cache = fx.cache("cache-token");
  tf_open_options options = remote_options(fx.endpoint, cache, fx.hf_none);
  for (const char* token : {"hf_secret\r\nX-Evil: 1", "hf_secret\n", "hf_secret\x1b[2J"}) {
    INFO("token " << Catch::Detail::stringify(std::string(token)));
    fx.server->clear_log();
    options.token = token;
    tf_checkpoint* ckpt = reinterpret_cast<tf_checkpoint*>(&ckpt);
    Error err;
    CHECK_CODE(tf_open("hf://gen/model", &options, &ckpt, err.out()), TF_ERR_INVALID_ARGUMENT, err);
    CHECK(ckpt == nullptr);
    CHECK(tf_code_exit_code(tf_error_code(err.get())) == 1);
    CHECK_THAT(err.message(), Catch::Contains("tf_open_options.token"));
    CHECK_THAT(err.message(), Catch::Contains("control character"));
    CHECK_THAT(err.message(), !Catch::Contains("hf_secret") && !Catch::Contains("Evil"));
    CHECK(fx.server->log().empty());
  }
}

// Both return about 15-50 ms after the cancel here; the bound, 2 s, is half the server's 4-s stall
// (so a return that waited for the stall fails), loose for a loaded CI machine (606 ms was seen
// under load with a 500-ms bound).
TEST_CASE("C API remote: a stalled server: tf_open (through a tf_cancel_token) and tf_fetch (through tf_cancel) return "
          "Cancelled long before the 4-s stall ends; the cancel is consumed",
          "[capi][remote][cancel]") {
  using Clock = std::chrono::steady_clock;
  Fixture fx;
  const std::string cache = fx.cache("cache-cancel");
  tf_open_options options = remote_options(fx.endpoint, cache, fx.hf_none);
  Error err;
  // Cancels after 300 ms; returns when it did.
  auto cancel_later = [](auto cancel) {
    return std::async(std::launch::async, [cancel] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const auto at = Clock::now();
      cancel();
      return at;
    });
  };
  {
    // Every CDN response stalls before its first byte: the open's header read.
    fx.server->stall_after(0, -1, "/cdn/", 4000);
    tf_cancel_token* token = tf_cancel_token_new();
    REQUIRE(token != nullptr);
    options.cancel = token;
    auto at = cancel_later([token] { tf_cancel_token_cancel(token); });
    tf_checkpoint* ckpt = nullptr;
    const tf_code code = tf_open("hf://gen/model", &options, &ckpt, err.out());
    const auto took = std::chrono::duration<double, std::milli>(Clock::now() - at.get()).count();
    CHECK_CODE(code, TF_ERR_CANCELLED, err);
    CHECK(ckpt == nullptr);
    INFO("tf_open returned " << took << " ms after the cancel");
    CHECK(took < 2000.0);
    tf_close(ckpt);
    tf_cancel_token_free(token);
    options.cancel = nullptr;
  }
  // Open normally, then stall the tensor transfers and tf_cancel from another thread.
  fx.server->reset_switches();
  Checkpoint ckpt = open_ok("hf://gen/model", &options);
  tf_checkpoint* c = ckpt.get();
  fx.server->stall_after(0, -1, "/cdn/", 4000);
  {
    auto at = cancel_later([c] { tf_cancel(c); });
    const tf_code code = tf_fetch(c, kAll, 1, nullptr, nullptr, err.out());
    const auto took = std::chrono::duration<double, std::milli>(Clock::now() - at.get()).count();
    CHECK_CODE(code, TF_ERR_CANCELLED, err);
    INFO("tf_fetch returned " << took << " ms after tf_cancel");
    CHECK(took < 2000.0);
  }
  // The cancel was consumed: with the server answering again, the next fetch completes.
  fx.server->reset_switches();
  CHECK_CODE(tf_fetch(c, kAll, 1, nullptr, nullptr, err.out()), TF_OK, err);
}

TEST_CASE("C API remote: tf_tp_fetch moves a rank's byte ranges only (the server's log), then tf_tp_read serves them; "
          "a larger over-fetch budget coalesces more",
          "[capi][remote][tp]") {
  Fixture fx;
  Checkpoint ckpt = fx.open("gen/model", "cache-tp");
  tf_checkpoint* c = ckpt.get();
  const Source src = load_sources(c, repos().gen);
  TpSelection sel = select_rank(c, 1, 2);
  std::uint64_t need = 0;
  for (std::size_t i = 0; i < tf_tp_count(sel.get()); ++i) need += tf_tp_nbytes(sel.get(), i);
  Error err;
  // Nothing fetched yet: NotFetched.
  std::string part(tf_tp_nbytes(sel.get(), 0), '\0');
  CHECK_CODE(tf_tp_read(c, sel.get(), 0, part.data(), part.size(), err.out()), TF_ERR_NOT_FETCHED, err);

  fx.server->clear_log();
  tf_fetch_options fetch = fetch_options(kKeep, kKeep, 1);  // holes of 1 byte only: none here (F32/BF16)
  tf_fetch_stats stats;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_tp_fetch(c, sel.get(), &fetch, &stats, err.out()), TF_OK, err);
  std::uint64_t body = 0;
  for (const auto& r : fx.server->log()) body += r.kind == "cdn" ? r.body_bytes : 0;
  CHECK(body == stats.bytes_transferred);
  CHECK(stats.bytes_transferred + stats.bytes_cached == need);  // the header window holds the rest
  for (std::size_t i = 0; i < tf_tp_count(sel.get()); ++i) {
    const char* name = tf_tp_name(sel.get(), i);
    INFO(name);
    std::size_t index = 0, ndim = 0;
    REQUIRE(tf_find(c, name, &index));
    const uint64_t* d = tf_tensor_shape(c, index, &ndim);
    const ByteRange r = tensor_range(c, src, index);
    const std::string want = part_of(std::string_view(src.bytes[tf_tensor_file_index(c, index)]).substr(r.offset, r.length),
                                     std::vector<std::uint64_t>(d, d + ndim), tf_tp_slice(sel.get(), i));
    std::string got(tf_tp_nbytes(sel.get(), i), '\0');
    CHECK_CODE(tf_tp_read(c, sel.get(), i, got.data(), got.size(), err.out()), TF_OK, err);
    CHECK(got == want);
  }

  // Planned with the default gap (1 MiB) on a fresh cache: within the default budget (64 KiB
  // here); with 1000% every hole of at most the gap is fetched.
  Checkpoint fresh = fx.open("gen/model", "cache-tp-fresh");
  TpSelection again = select_rank(fresh.get(), 1, 2);
  std::uint64_t planned[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    tf_fetch_options o = fetch_options(kKeep, kKeep, kKeep);
    if (k == 1) o.coalesce_overfetch_percent = 1000;
    CHECK_CODE(tf_tp_fetch(fresh.get(), again.get(), &o, &stats, err.out()), TF_OK, err);
    planned[k] = stats.bytes_transferred + stats.bytes_cached;
    // Forget it again: a new cache each round.
    fresh = fx.open("gen/model", k == 0 ? "cache-tp-fresh2" : "cache-tp-fresh3");
    again = select_rank(fresh.get(), 1, 2);
  }
  CHECK(planned[0] <= need + (64 << 10));
  CHECK(planned[1] > planned[0]);
}

TEST_CASE("C API remote: an empty tensor is served before anything of its file is cached, and fetching it (whole or "
          "a rank's part) makes no request",
          "[capi][remote][empty]") {
  Fixture fx;
  for (const std::string& location : {std::string("hf://ref/dtypes"), fx.endpoint + "/ref/dtypes/resolve/main/model.safetensors"}) {
    INFO(location);
    Checkpoint ckpt = fx.open(location, "cache-empty-" + std::to_string(location.size()));
    tf_checkpoint* c = ckpt.get();
    fx.server->clear_log();
    std::size_t i = 0;
    REQUIRE(tf_find(c, "empty", &i) == 1);
    std::size_t ndim = 0;
    const std::uint64_t* shape = tf_tensor_shape(c, i, &ndim);
    REQUIRE(ndim == 2);
    CHECK((shape[0] == 0 && shape[1] == 7));
    const void* data = reinterpret_cast<const void*>(&ndim);  // must be overwritten
    std::size_t len = 99;
    Error err;
    CHECK_CODE(tf_tensor_data(c, "empty", &data, &len), TF_OK, err);
    CHECK(len == 0);
    CHECK(data == nullptr);

    const char* const empty[] = {"empty"};
    tf_fetch_options fetch = fetch_options(4, kKeep, kKeep);
    tf_fetch_stats stats;
    tf_fetch_stats_init(&stats);
    CHECK_CODE(tf_fetch(c, empty, 1, &fetch, &stats, err.out()), TF_OK, err);
    CHECK(stats.requests == 0);
    CHECK(stats.bytes_transferred == 0);
    Plan plan = make_plan(c, empty, 1, &fetch);
    CHECK(tf_plan_count(plan.get()) == 0);

    tf_tp_selection* raw = nullptr;
    CHECK_CODE(tf_select_for_rank(c, 1, 2, R"({"empty": {"dim": 0}, "*": "replicate"})", 0, &raw, err.out()), TF_OK,
               err);
    TpSelection sel(raw, &tf_tp_free);
    std::size_t k = tf_tp_count(sel.get());
    for (std::size_t j = 0; j < tf_tp_count(sel.get()); ++j) {
      if (std::string(tf_tp_name(sel.get(), j)) == "empty") k = j;
    }
    REQUIRE(k < tf_tp_count(sel.get()));
    CHECK(tf_tp_nbytes(sel.get(), k) == 0);
    std::byte none[1];
    CHECK_CODE(tf_tp_read(c, sel.get(), k, none, 0, err.out()), TF_OK, err);
    std::string seen;
    for (const auto& rec : fx.server->log()) seen += rec.to_json() + "\n";
    INFO("requests after the open:\n" << seen);
    // None for the file's bytes (a URL's selection looks for config.json beside it, once).
    for (const auto& rec : fx.server->log()) {
      CHECK(rec.file == "config.json");
      CHECK(rec.range.empty());
    }
  }
}

namespace {

// What tf_open told through tf_open_options.notice.
struct Notices {
  std::vector<tf_notice> seen;  // (strings copied below; the pointers are not kept)
  std::vector<std::string> file, url, blob, message;
};

void collect_notice(const tf_notice* n, void* user) {
  auto* out = static_cast<Notices*>(user);
  REQUIRE(TF_HAS_FIELD(n, message));
  out->seen.push_back(*n);
  out->file.emplace_back(n->file);
  out->url.emplace_back(n->url);
  out->blob.emplace_back(n->blob);
  out->message.emplace_back(n->message);
}

}  // namespace

TEST_CASE("C API remote: a plain URL rewritten with the same size and ETag: tf_open tells through its notice "
          "callback, the stale bytes are never served, the new ones are fetched",
          "[capi][remote][stale]") {
  ServerFixture fx("tf-capi-stale");
  const fs::path repo = fx.tmp / "root" / "org" / "llama";
  fs::create_directories(repo);
  const std::string original = tftest::read_file(reference() / "llama-tiny-single" / "model.safetensors");
  tftest::write_file(repo / "model.safetensors", original);
  tensorfetch::testing::Options so;
  so.root = fx.tmp / "root";
  fx.start(so);
  const std::string url = fx.server->cdn_url("org/llama", "model.safetensors");
  const std::string dir = fx.cache("cache-stale");
  Notices notices;
  tf_open_options o = fx.options(dir);
  o.notice = collect_notice;
  o.notice_user = &notices;
  const char* const wanted[] = {"model.layers.0.mlp.down_proj.weight"};
  const std::uint64_t data_start = 8 + header_length(original);

  std::uint64_t begin = 0, end = 0;
  {
    Checkpoint ckpt = open_ok(url, &o);
    Error err;
    CHECK_CODE(tf_fetch(ckpt.get(), wanted, 1, nullptr, nullptr, err.out()), TF_OK, err);
    std::size_t i = 0;
    REQUIRE(tf_find(ckpt.get(), wanted[0], &i));
    const TensorBytes t = tensor_bytes(ckpt.get(), i, wanted[0]);
    begin = t.begin;
    end = t.end;
    REQUIRE(t.data != nullptr);
    CHECK(std::string(static_cast<const char*>(t.data), t.length) == original.substr(data_start + begin, end - begin));
  }
  CHECK(notices.seen.empty());

  // The same size, URL and ETag; another header (the metadata's "pt" is "np") and other tensor bytes.
  std::string now = original;
  const auto at = now.find("\"format\":\"pt\"");
  REQUIRE(at < data_start);
  now.replace(at, 13, "\"format\":\"np\"");
  for (std::size_t k = data_start; k < now.size(); ++k) now[k] = static_cast<char>(now[k] ^ 0x5A);
  fx.server->rewrite_file_same_etag("org/llama", "model.safetensors", now);
  fx.server->clear_log();

  Checkpoint ckpt = open_ok(url, &o);
  REQUIRE(notices.seen.size() == 1);
  CHECK(notices.seen[0].size == sizeof(tf_notice));
  CHECK(notices.seen[0].kind == TF_NOTICE_STALE_CACHE);
  CHECK(notices.seen[0].offset == at + 10);  // the 'n' of "np"
  CHECK(notices.file[0] == tf_file_path(ckpt.get(), 0));  // (a URL's last segment)
  CHECK(notices.url[0] == url.substr(0, url.find('?')));  // (without the signed query)
  CHECK(notices.blob[0].find(".retired-") != std::string::npos);
  CHECK(notices.message[0].find("rewritten on the server without its ETag changing") != std::string::npos);
  CHECK(fs::is_directory(fs::path(dir) / "blobs" / notices.blob[0]));

  // The stale bytes are not served: the tensor is not in the cache until fetched again.
  const void* data = nullptr;
  std::size_t len = 0;
  CHECK(tf_tensor_data(ckpt.get(), wanted[0], &data, &len) == TF_ERR_NOT_FETCHED);
  Error err;
  tf_fetch_stats stats;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch(ckpt.get(), wanted, 1, nullptr, &stats, err.out()), TF_OK, err);
  CHECK(stats.bytes_transferred > 0);
  CHECK_CODE(tf_tensor_data(ckpt.get(), wanted[0], &data, &len), TF_OK, err);
  REQUIRE(len == end - begin);
  CHECK(std::string(static_cast<const char*>(data), len) == now.substr(data_start + begin, end - begin));
  // Every byte of the tensor came from the server after the rewrite (one URL, one ETag throughout).
  std::uint64_t data_bytes = 0;
  std::set<std::string> etags;
  for (const auto& r : fx.server->log()) {
    if (r.kind != "cdn") continue;
    etags.insert(r.etag);
    const auto eq = r.range.find('=');
    if (r.status == 206 && eq != std::string::npos && std::stoull(r.range.substr(eq + 1)) >= data_start) {
      data_bytes += r.body_bytes;
    }
  }
  CHECK(etags.size() == 1);
  REQUIRE(data_start + begin >= kHeaderWindow);  // (beyond what the open reads)
  CHECK(data_bytes >= end - begin);
}
