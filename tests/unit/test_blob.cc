// SPDX-License-Identifier: Apache-2.0
// The persistent cache (lib/cache/blob.h and tensorfetch/cache.hpp) on a temporary directory:
// blob identities, sparse data files, committed extents in meta.json (persisted, merged between
// writers, never trusted when corrupted), finish() with sha256 verification, listing, removal,
// pruning, verification and a full disk.
//
// "Another process" is simulated by a second Blob object of the same id: each Blob owns its own
// file descriptors, and flock locks conflict between open file descriptions even in one process.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/blob.h"
#include "tensorfetch/cache.hpp"
#include "support/env.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
namespace tf = tensorfetch;
namespace td = tensorfetch::detail;
using tf::ByteRange;
using tf::ErrorCode;
using Ranges = std::vector<ByteRange>;

namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;

using tftest::TempDir;

/// Deterministic bytes: a different pattern for each seed.
std::string pattern(std::size_t size, unsigned seed = 1) {
  std::string out(size, '\0');
  std::uint32_t x = 2463534242u ^ seed;
  for (std::size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[i] = static_cast<char>(x & 0xff);
  }
  return out;
}

std::span<const std::byte> bytes(std::string_view s, std::size_t offset = 0, std::size_t length = std::string::npos) {
  s = s.substr(offset, length);
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

/// An identity whose sha256 is that of `content` (as the Hub's X-Linked-Etag names it).
td::BlobIdentity sha_identity(const std::string& content) {
  return td::blob_identity("https://cdn.example/x.safetensors", quoted(td::sha256_hex(content)), std::nullopt, content.size());
}

/// The cache at `root` (private; created when missing), failing the test if it cannot be opened.
std::shared_ptr<const td::CacheDir> cache_at(const std::string& root) {
  auto c = td::CacheDir::open(root, td::Sharing::Private, true);
  INFO("CacheDir::open: " << (c ? std::string("ok") : c.error().message));
  REQUIRE(c.has_value());
  return *c;
}

/// Opens a blob, failing the test (with the error message) if it cannot be opened.
std::unique_ptr<td::Blob> open_blob(const std::string& root, const td::BlobIdentity& id, std::uint64_t size,
                                    const std::string& url = "https://example.com/model.safetensors?sig=abc",
                                    const std::optional<std::string>& etag = std::nullopt) {
  auto b = td::Blob::open(cache_at(root), id, size, url, etag);
  INFO("Blob::open: " << (b ? std::string("ok") : b.error().message));
  REQUIRE(b.has_value());
  return std::move(*b);
}

/// Writes `content[r]` and commits `r`.
void write_commit(td::Blob& b, const std::string& content, ByteRange r) {
  auto w = b.write_at(r.offset, bytes(content, r.offset, r.length));
  INFO("write_at: " << (w ? std::string("ok") : w.error().message));
  REQUIRE(w.has_value());
  const Ranges rs{r};
  auto c = b.commit(rs);
  INFO("commit: " << (c ? std::string("ok") : c.error().message));
  REQUIRE(c.has_value());
}

struct stat stat_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st;
}

std::uint64_t disk_bytes_of(const std::string& path) {
  return static_cast<std::uint64_t>(stat_of(path).st_blocks) * 512;
}

nlohmann::json read_json(const std::string& path) {
  auto j = nlohmann::json::parse(tftest::read_file(path), nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE(out.good());
  out << text;
  out.close();
  REQUIRE(out.good());
}

/// Sets a blob directory's modification time (what `cache ls`/prune call "last used").
void set_last_used(const std::string& root, const std::string& id, std::time_t when) {
  const std::string dir = root + "/blobs/" + id;
  struct timespec ts[2] = {{when, 0}, {when, 0}};
  REQUIRE(::utimensat(AT_FDCWD, dir.c_str(), ts, 0) == 0);
}

std::optional<tf::CacheEntry> find_entry(const std::vector<tf::CacheEntry>& entries, const std::string& id) {
  for (const auto& e : entries) {
    if (e.id == id) return e;
  }
  return std::nullopt;
}

std::string error_text(const tf::Result<void>& r) { return r ? std::string("ok") : r.error().message; }

/// Whether `b` holds `r` committed; a read error (Blob::holds failing) fails the test.
bool held(td::Blob& b, ByteRange r) {
  auto h = b.holds(r);
  INFO("holds: " << (h ? std::string("ok") : h.error().message));
  REQUIRE(h.has_value());
  return *h;
}

/// The bytes of `b`'s data file in `r`.
std::string read_data(const td::Blob& b, ByteRange r) {
  std::string out(r.length, '\0');
  REQUIRE(::pread(b.fd(), out.data(), out.size(), static_cast<off_t>(r.offset)) == static_cast<ssize_t>(r.length));
  return out;
}

const std::string kHexLower = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kHexUpper = "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF";

bool is_u_id(const std::string& id) {
  if (id.size() < 2 || id[0] != 'u') return false;
  for (std::size_t i = 1; i < id.size(); ++i) {
    const char c = id[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

// --------------------------------------------------------------------------------------------
// Identities

TEST_CASE("sha256_hex matches the standard test vectors", "[blob][identity]") {
  CHECK(td::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(td::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("blob_identity: a sha256 comes only from X-Linked-Etag (id SHA256-ORIGIN); an ETag never gives one",
          "[blob][identity]") {
  const std::string url = "https://cdn.example/repo/model.safetensors";
  const std::string origin_suffix = td::blob_identity(url, quoted(kHexLower), std::nullopt, 1234).id.substr(64);
  REQUIRE(origin_suffix.size() == 17);
  CHECK(origin_suffix[0] == '-');
  struct Row {
    const char* name;
    std::optional<std::string> tag;
    std::optional<std::string> want_sha;  // as X-Linked-Etag; nullopt: a 'u' id
  };
  const std::vector<Row> rows = {
      {"quoted 64-hex", quoted(kHexLower), kHexLower},
      {"weak W/ quoted 64-hex", "W/" + quoted(kHexLower), kHexLower},
      {"upper-case hex is normalised", quoted(kHexUpper), kHexLower},
      {"weak upper-case hex", "W/" + quoted(kHexUpper), kHexLower},
      {"unquoted 64-hex", kHexLower, kHexLower},
      {"63 hex digits", quoted(kHexLower.substr(1)), std::nullopt},
      {"65 hex digits", quoted(kHexLower + "0"), std::nullopt},
      {"64 characters, one not hex", quoted(kHexLower.substr(1) + "g"), std::nullopt},
      {"git blob ETag (40 hex)", quoted(kHexLower.substr(0, 40)), std::nullopt},
      {"S3 multipart ETag", "\"d41d8cd98f00b204e9800998ecf8427e-12\"", std::nullopt},
      {"none", std::nullopt, std::nullopt},
      {"empty", std::string(), std::nullopt},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name << " as X-Linked-Etag") {
      const auto id = td::blob_identity(url, row.tag, std::nullopt, 1234);
      INFO("id " << id.id);
      CHECK(id.origin == "https://cdn.example");
      if (row.want_sha) {
        CHECK(id.id == *row.want_sha + origin_suffix);
        REQUIRE(id.sha256.has_value());
        CHECK(*id.sha256 == *row.want_sha);
      } else {
        CHECK_FALSE(id.sha256.has_value());
        CHECK(is_u_id(id.id));
      }
      CHECK(id.id == td::blob_identity(url, row.tag, std::nullopt, 1234).id);  // stable
    }
    DYNAMIC_SECTION(row.name << " as ETag (the Xet CDN's is 64 hex and not the sha256)") {
      const auto id = td::blob_identity(url, std::nullopt, row.tag, 1234);
      INFO("id " << id.id);
      CHECK_FALSE(id.sha256.has_value());
      CHECK(is_u_id(id.id));
    }
  }
}

TEST_CASE("blob_identity: one sha256 from two origins gives two ids; scheme, host and port make the origin",
          "[blob][identity]") {
  const auto linked = std::optional<std::string>(quoted(kHexLower));
  const auto a = td::blob_identity("https://hub-a.example/org/m/resolve/main/x.safetensors", linked, std::nullopt, 10);
  struct Row {
    const char* name;
    std::string url;
    bool same;
  };
  const std::vector<Row> rows = {
      {"same origin, another path and query", "https://hub-a.example/other/m/resolve/abc/y.safetensors?x=1", true},
      {"host name case", "https://HUB-A.example/org/m/resolve/main/x.safetensors", true},
      {"another host", "https://hub-b.example/org/m/resolve/main/x.safetensors", false},
      {"another port", "https://hub-a.example:8443/org/m/resolve/main/x.safetensors", false},
      {"another scheme", "http://hub-a.example/org/m/resolve/main/x.safetensors", false},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      const auto b = td::blob_identity(row.url, linked, std::nullopt, 10);
      CHECK(b.sha256 == a.sha256);
      CHECK((b.id == a.id) == row.same);
      CHECK((b.origin == a.origin) == row.same);
    }
  }
}

TEST_CASE("blob_identity: 'u' ids depend on URL (without query), ETag and size", "[blob][identity]") {
  const std::string url = "https://host.example/a/model.safetensors";
  const std::optional<std::string> etag = "\"abc123\"";
  const std::string base = td::blob_identity(url, std::nullopt, etag, 100).id;
  REQUIRE(is_u_id(base));

  struct Row {
    const char* name;
    std::string url;
    std::optional<std::string> etag;
    std::uint64_t size;
    bool same;
  };
  const std::vector<Row> rows = {
      {"same inputs", url, etag, 100, true},
      {"query ignored", url + "?X-Amz-Signature=1&Expires=2", etag, 100, true},
      {"another query ignored", url + "?sig=zzz", etag, 100, true},
      {"fragment ignored", url + "#part", etag, 100, true},
      {"different URL", "https://host.example/b/model.safetensors", etag, 100, false},
      {"different host", "https://other.example/a/model.safetensors", etag, 100, false},
      {"different ETag", url, "\"abc124\"", 100, false},
      {"no ETag", url, std::nullopt, 100, false},
      {"different size", url, etag, 101, false},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      const auto id = td::blob_identity(row.url, std::nullopt, row.etag, row.size);
      CHECK_FALSE(id.sha256.has_value());
      CHECK(is_u_id(id.id));
      CHECK((id.id == base) == row.same);
    }
  }
}

// --------------------------------------------------------------------------------------------
// Blob: files, commits, persistence

TEST_CASE("Blob::open creates a sparse data file of the full size and a meta.json", "[blob]") {
  TempDir tmp;
  const std::uint64_t size = 64 * MiB;
  const auto id = td::blob_identity("https://example.com/m.safetensors?sig=secret", std::nullopt, std::string("\"etag-1\""), size);
  auto b = open_blob(tmp.path().string(), id, size, "https://example.com/m.safetensors?sig=secret", std::string("\"etag-1\""));

  const std::string dir = tmp.path().string() + "/blobs/" + id.id;
  CHECK(b->id() == id.id);
  CHECK(b->size() == size);
  CHECK(b->data_path() == dir + "/data");
  CHECK(b->fd() >= 0);
  CHECK(b->extents().empty());
  CHECK_FALSE(b->complete());
  CHECK_FALSE(held(*b, ByteRange{0, 1}));
  CHECK(held(*b, ByteRange{5, 0}));

  const auto st = stat_of(dir + "/data");
  CHECK(static_cast<std::uint64_t>(st.st_size) == size);
  INFO("st_blocks " << st.st_blocks);
  CHECK(static_cast<std::uint64_t>(st.st_blocks) * 512 < 64 * KiB);  // sparse: nothing allocated yet

  const auto meta = read_json(dir + "/meta.json");
  CHECK(meta.at("size").get<std::uint64_t>() == size);
  CHECK(meta.at("complete").get<bool>() == false);
  CHECK(meta.at("extents").empty());
  CHECK(meta.at("url").get<std::string>() == "https://example.com/m.safetensors");  // query (a secret) dropped
  CHECK(meta.at("etag").get<std::string>() == "\"etag-1\"");
  CHECK(meta.at("sha256").is_null());
  CHECK(fs::exists(dir + "/lock"));
}

TEST_CASE("Blob::open records the sha256 of a sha256 identity", "[blob]") {
  TempDir tmp;
  const auto id = td::blob_identity("https://cdn.example/x", quoted(kHexUpper), std::nullopt, 10);
  auto b = open_blob(tmp.path().string(), id, 10);
  const auto meta = read_json(tmp.path().string() + "/blobs/" + id.id + "/meta.json");
  CHECK(meta.at("sha256").get<std::string>() == kHexLower);
}

TEST_CASE("write_at + commit: extents are persisted and seen by a new Blob", "[blob]") {
  TempDir tmp;
  const std::uint64_t size = 1 * MiB;
  const std::string content = pattern(size);
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::string("\"e\""), size);

  {
    auto b = open_blob(tmp.path().string(), id, size);
    write_commit(*b, content, ByteRange{0, 4096});
    write_commit(*b, content, ByteRange{8192, 4096});
    write_commit(*b, content, ByteRange{4096, 4096});  // joins the two
    write_commit(*b, content, ByteRange{100 * KiB, 1000});
    CHECK(b->extents() == Ranges{{0, 12288}, {100 * KiB, 1000}});
    CHECK(held(*b, ByteRange{10, 12000}));
    CHECK_FALSE(held(*b, ByteRange{10, 13000}));

    auto view = b->map();
    REQUIRE(view.has_value());
    REQUIRE(view->size() == size);
    CHECK(std::memcmp(view->data(), content.data(), 12288) == 0);
  }
  // A new object (as another process would) sees what was committed, and the bytes.
  auto again = open_blob(tmp.path().string(), id, size);
  CHECK(again->extents() == Ranges{{0, 12288}, {100 * KiB, 1000}});
  CHECK(held(*again, ByteRange{100 * KiB, 1000}));
  CHECK_FALSE(again->complete());
  CHECK(read_data(*again, ByteRange{0, 12288}) == content.substr(0, 12288));
  CHECK(read_data(*again, ByteRange{100 * KiB, 1000}) == content.substr(100 * KiB, 1000));

  const auto meta = read_json(tmp.path().string() + "/blobs/" + id.id + "/meta.json");
  CHECK(meta.at("extents") == nlohmann::json::parse("[[0, 12288], [102400, 1000]]"));
}

TEST_CASE("commit merges with extents committed by another Blob of the same id", "[blob]") {
  TempDir tmp;
  const std::uint64_t size = 1000;
  const std::string content = pattern(size);
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::string("\"e\""), size);

  auto a = open_blob(tmp.path().string(), id, size);
  auto b = open_blob(tmp.path().string(), id, size);  // opened before a commits: its copy is empty
  write_commit(*a, content, ByteRange{0, 100});
  write_commit(*b, content, ByteRange{200, 100});
  CHECK(b->extents() == Ranges{{0, 100}, {200, 100}});  // b merged a's commit, not overwrote it
  CHECK(a->extents() == Ranges{{0, 100}});              // a has not looked yet
  CHECK(held(*a, ByteRange{200, 100}));                   // ... but holds() re-reads meta.json
  CHECK(a->extents() == Ranges{{0, 100}, {200, 100}});

  write_commit(*a, content, ByteRange{100, 100});
  auto r = b->refresh();
  REQUIRE(r.has_value());
  CHECK(*r == Ranges{{0, 300}});

  auto c = open_blob(tmp.path().string(), id, size);
  CHECK(c->extents() == Ranges{{0, 300}});
  CHECK(read_data(*c, ByteRange{0, 300}) == content.substr(0, 300));
}

TEST_CASE("uncommitted writes are not present after reopening", "[blob]") {
  TempDir tmp;
  const std::uint64_t size = 64 * KiB;
  const std::string content = pattern(size);
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::nullopt, size);
  {
    auto b = open_blob(tmp.path().string(), id, size);
    REQUIRE(b->write_at(0, bytes(content, 0, 8192)).has_value());
    const Ranges half{{0, 4096}};
    REQUIRE(b->commit(half).has_value());
    REQUIRE(b->write_at(32 * KiB, bytes(content, 32 * KiB, 1000)).has_value());  // never committed
    CHECK_FALSE(held(*b, ByteRange{32 * KiB, 1000}));
  }
  auto again = open_blob(tmp.path().string(), id, size);
  CHECK(again->extents() == Ranges{{0, 4096}});
  CHECK_FALSE(held(*again, ByteRange{4096, 1}));
  CHECK_FALSE(held(*again, ByteRange{32 * KiB, 1000}));

  auto entries = tf::cache_list(tmp.path().string());
  REQUIRE(entries.has_value());
  REQUIRE(entries->size() == 1);
  CHECK((*entries)[0].present == 4096);
}

TEST_CASE("a corrupted meta.json or data file is treated as holding nothing", "[blob][corrupt]") {
  const std::uint64_t size = 1000;
  const std::string content = pattern(size);
  struct Row {
    const char* name;
    std::string meta;  // written over meta.json; empty with data_len > 0: truncate the data file instead
    std::uint64_t data_len = 0;
  };
  const std::string ok_prefix = R"({"version":1,"size":1000,"sha256":null,"url":"u","etag":null,)";
  const std::vector<Row> rows = {
      {"garbage", "this is not json {{{"},
      {"empty file", ""},
      {"truncated JSON", R"({"version":1,"size":1000,"sha256":null,"url":"u","etag":null,"complete":false,"extents":[[0,1)"},
      {"not an object", "[[0, 1000]]"},
      {"size of the wrong type", R"({"version":1,"size":"1000","complete":false,"extents":[[0,1000]]})"},
      {"size missing", R"({"version":1,"complete":false,"extents":[[0,1000]]})"},
      {"extents missing", ok_prefix + R"("complete":false})"},
      {"extents not an array of pairs", ok_prefix + R"("complete":false,"extents":[0,1000]})"},
      {"extent with one number", ok_prefix + R"("complete":false,"extents":[[0]]})"},
      {"extent of the wrong type", ok_prefix + R"("complete":false,"extents":[["0","10"]]})"},
      {"extents beyond the size", ok_prefix + R"("complete":false,"extents":[[0,100],[900,101]]})"},
      {"extent starting beyond the size", ok_prefix + R"("complete":false,"extents":[[2000,1]]})"},
      {"extent end overflows", ok_prefix + R"("complete":false,"extents":[[18446744073709551615,2]]})"},
      {"complete=true with partial extents", ok_prefix + R"("complete":true,"extents":[[0,999]]})"},
      {"complete=true with two extents", ok_prefix + R"("complete":true,"extents":[[0,500],[501,499]]})"},
      {"complete=true with no extents", ok_prefix + R"("complete":true,"extents":[]})"},
      // Nested past the 128 levels every JSON reader keeps to: refused while parsing, no crash.
      {"extents nested 129 deep", ok_prefix + R"("complete":false,"extents":)" + std::string(128, '[') +
                                       std::string(128, ']') + "}"},
      {"extents nested 100,000 deep", ok_prefix + R"("complete":false,"extents":)" + std::string(100'000, '[') +
                                           std::string(100'000, ']') + "}"},
      {"data file shorter than recorded", "", 500},
      {"data file missing", "", 1},  // data_len 1: remove it
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      TempDir tmp;
      const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::string("\"e\""), size);
      const std::string dir = tmp.path().string() + "/blobs/" + id.id;
      {
        auto b = open_blob(tmp.path().string(), id, size);
        write_commit(*b, content, ByteRange{0, size});
      }
      if (row.data_len == 1) {
        REQUIRE(fs::remove(dir + "/data"));
      } else if (row.data_len > 0) {
        REQUIRE(::truncate((dir + "/data").c_str(), static_cast<off_t>(row.data_len)) == 0);
      } else {
        write_text(dir + "/meta.json", row.meta);
        // Listing never reports the bytes of an unreadable map as present.
        auto entries = tf::cache_list(tmp.path().string());
        REQUIRE(entries.has_value());
        REQUIRE(entries->size() == 1);
        CHECK((*entries)[0].present == 0);
        CHECK_FALSE((*entries)[0].complete);
      }

      auto b = open_blob(tmp.path().string(), id, size);
      CHECK(b->extents().empty());
      CHECK_FALSE(b->complete());
      CHECK_FALSE(held(*b, ByteRange{0, 1}));
      CHECK(static_cast<std::uint64_t>(stat_of(dir + "/data").st_size) == size);
      // ... and the blob is usable again: a commit is recorded.
      write_commit(*b, content, ByteRange{0, 10});
      CHECK(b->extents() == Ranges{{0, 10}});
      CHECK(read_json(dir + "/meta.json").at("extents") == nlohmann::json::parse("[[0, 10]]"));
    }
  }
}

TEST_CASE("Blob::open refuses an existing blob recorded with another size", "[blob]") {
  TempDir tmp;
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::string("\"e\""), 100);
  { auto b = open_blob(tmp.path().string(), id, 100); }
  auto again = td::Blob::open(cache_at(tmp.path().string()), id, 200, "https://example.com/a", std::string("\"e\""));
  CHECK_ERROR(again, ErrorCode::Integrity, "100", "200", id.id);
  // The blob itself is untouched.
  auto same = open_blob(tmp.path().string(), id, 100);
  CHECK(same->size() == 100);
}

// A commit is recorded as given. A range past the end of the blob makes meta.json unreadable for
// every later reader (parse_meta refuses extents beyond the size), so one bad commit silently
// drops every extent of the blob, including those other processes committed.
TEST_CASE("commit refuses a range beyond the blob's size and keeps the committed extents",
          "[blob]") {
  TempDir tmp;
  const std::string content = pattern(1000);
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::nullopt, 1000);
  auto b = open_blob(tmp.path().string(), id, 1000);
  write_commit(*b, content, ByteRange{0, 500});
  const Ranges past_end{{900, 200}};
  auto c = b->commit(past_end);
  CHECK_FALSE(c.has_value());
  auto again = open_blob(tmp.path().string(), id, 1000);
  CHECK(again->extents() == Ranges{{0, 500}});
}

TEST_CASE("default_cache_root: TENSORFETCH_CACHE, then XDG_CACHE_HOME, then HOME", "[blob]") {
  tftest::ScopedEnv env;
  env.set("TENSORFETCH_CACHE", "/tmp/tc");
  env.set("XDG_CACHE_HOME", "/tmp/xdg");
  env.set("HOME", "/tmp/home");
  CHECK(td::default_cache_root() == "/tmp/tc");
  CHECK(tf::cache_root() == "/tmp/tc");
  CHECK(tf::cache_root("/explicit") == "/explicit");
  env.unset("TENSORFETCH_CACHE");
  CHECK(td::default_cache_root() == "/tmp/xdg/tensorfetch");
  env.set("XDG_CACHE_HOME", "");
  CHECK(td::default_cache_root() == "/tmp/home/.cache/tensorfetch");
}

TEST_CASE("concurrent commits from several Blob objects and threads all end up recorded", "[blob][threads]") {
  TempDir tmp;
  constexpr int kThreads = 4, kChunks = 40;
  constexpr std::uint64_t kChunk = 100;
  const std::uint64_t size = kThreads * kChunks * kChunk;
  const std::string content = pattern(size);
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::nullopt, size);
  auto shared = open_blob(tmp.path().string(), id, size);  // two threads share this one, two have their own

  std::vector<std::unique_ptr<td::Blob>> own;
  for (int t = 0; t < 2; ++t) own.push_back(open_blob(tmp.path().string(), id, size));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    td::Blob* blob = t < 2 ? own[t].get() : shared.get();
    threads.emplace_back([&, t, blob] {
      for (int i = 0; i < kChunks; ++i) {  // chunk t, t + kThreads, ...: interleaved with the others
        const ByteRange r{(static_cast<std::uint64_t>(i) * kThreads + t) * kChunk, kChunk};
        if (auto w = blob->write_at(r.offset, bytes(content, r.offset, r.length)); !w) {
          errors[t] = w.error().message;
          return;
        }
        const Ranges rs{r};
        if (auto c = blob->commit(rs); !c) {
          errors[t] = c.error().message;
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) CHECK(e.empty());
  auto fresh = open_blob(tmp.path().string(), id, size);
  CHECK(fresh->extents() == Ranges{{0, size}});
  CHECK(read_data(*fresh, ByteRange{0, size}) == content);
}

// A complete blob's data file is made read-only (0400). When its meta.json is later found
// unreadable, Blob::open treats the blob as holding nothing, "fetched again" -- but a user who is
// not root can only open the read-only data file O_RDONLY, so every write_at fails (EBADF) and
// the blob can never be fetched again until `cache rm`. (Run as user `nobody` when root.)
TEST_CASE("a complete blob whose meta.json is corrupted can be fetched again by a normal user",
          "[blob][corrupt]") {
  TempDir tmp;
  const std::string content = pattern(4096, 11);
  const auto id = td::blob_identity("https://x/y", std::nullopt, std::string("\"e\""), content.size());
  const uid_t uid = ::geteuid() == 0 ? 65534 : ::geteuid();
  const gid_t gid = ::geteuid() == 0 ? 65534 : ::getegid();
  REQUIRE(::chown(tmp.path().string().c_str(), uid, gid) == 0);
  // The child reports: 0 refetch works, 1 write_at failed, 2 commit failed, 3+ setup failed.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::getuid() == 0 && (::setgid(gid) != 0 || ::setuid(uid) != 0)) ::_exit(10);
    auto cache = td::CacheDir::open(tmp.path().string(), td::Sharing::Private, true);
    if (!cache) ::_exit(14);
    {
      auto b = td::Blob::open(*cache, id, content.size(), "https://x/y", std::nullopt);
      if (!b || !(*b)->write_at(0, bytes(content)) || !(*b)->commit(Ranges{{0, content.size()}}) ||
          !(*b)->finish("y")) {
        ::_exit(11);
      }
    }
    {
      std::ofstream meta(tmp.path().string() + "/blobs/" + id.id + "/meta.json", std::ios::trunc);
      meta << "garbage";
    }
    auto b = td::Blob::open(*cache, id, content.size(), "https://x/y", std::nullopt);
    if (!b) ::_exit(12);
    if ((*b)->complete() || !(*b)->extents().empty()) ::_exit(13);
    if (!(*b)->write_at(0, bytes(content))) ::_exit(1);
    if (!(*b)->commit(Ranges{{0, content.size()}})) ::_exit(2);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  INFO("child exit code " << WEXITSTATUS(status) << " (1: write_at failed on the read-only data file)");
  REQUIRE(WEXITSTATUS(status) < 3);
  CHECK(WEXITSTATUS(status) == 0);
}

// --------------------------------------------------------------------------------------------
// finish(): verification and completion

TEST_CASE("an empty remote file: opens, finishes, stays complete", "[blob][finish]") {
  TempDir tmp;
  const auto id = sha_identity("");
  REQUIRE(id.sha256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  {
    auto b = open_blob(tmp.path().string(), id, 0);
    CHECK(held(*b, ByteRange{0, 0}));
    auto f = b->finish("empty");
    INFO(error_text(f));
    REQUIRE(f.has_value());
    CHECK(b->complete());
    auto view = b->map();
    REQUIRE(view.has_value());
    CHECK(view->empty());
  }
  auto again = open_blob(tmp.path().string(), id, 0);
  CHECK(again->complete());
  CHECK(again->extents().empty());
  CHECK(tf::cache_verify(*id.sha256, tmp.path().string()).has_value());
}

// finish() records `{ByteRange{0, size}}` as the extents of a complete blob; for an empty file
// that is `{0, 0}`, an empty range in what must be a RangeSet (and `[[0,0]]` in meta.json, which
// a reader then normalizes away).
TEST_CASE("an empty remote file: extents() stays a RangeSet after finish", "[blob][finish]") {
  TempDir tmp;
  auto b = open_blob(tmp.path().string(), sha_identity(""), 0);
  REQUIRE(b->finish("empty").has_value());
  CHECK(b->extents() == Ranges{});
  CHECK(read_json(tmp.path().string() + "/blobs/" + b->id() + "/meta.json").at("extents").empty());
}

TEST_CASE("finish: a complete blob with the right sha256 becomes complete and read-only", "[blob][finish]") {
  TempDir tmp;
  const std::string content = pattern(300 * KiB, 7);
  const auto id = sha_identity(content);
  REQUIRE(id.sha256.has_value());
  const std::string dir = tmp.path().string() + "/blobs/" + *id.sha256;  // where a verified blob goes
  {
    auto b = open_blob(tmp.path().string(), id, content.size());
    CHECK(b->id() == id.id);
    write_commit(*b, content, ByteRange{0, 100 * KiB});
    write_commit(*b, content, ByteRange{100 * KiB, content.size() - 100 * KiB});
    CHECK_FALSE(b->complete());
    auto f = b->finish("model.safetensors");
    INFO(error_text(f));
    REQUIRE(f.has_value());
    CHECK(b->complete());
    CHECK(b->extents() == Ranges{{0, content.size()}});
    // Verified: renamed from this origin's id to the bare sha256, which every origin may read.
    CHECK(b->id() == *id.sha256);
    CHECK(b->data_path() == dir + "/data");
    CHECK_FALSE(fs::exists(tmp.path().string() + "/blobs/" + id.id));
    CHECK((stat_of(dir + "/data").st_mode & 07777) == 0400);
    CHECK(b->finish("again").has_value());  // a no-op once complete
  }
  const auto meta = read_json(dir + "/meta.json");
  CHECK(meta.at("complete").get<bool>());
  CHECK(meta.at("sha256").get<std::string>() == *id.sha256);

  auto again = open_blob(tmp.path().string(), id, content.size());
  CHECK(again->complete());
  CHECK(again->extents() == Ranges{{0, content.size()}});
  CHECK(read_data(*again, ByteRange{0, content.size()}) == content);

  auto entries = tf::cache_list(tmp.path().string());
  REQUIRE(entries.has_value());
  REQUIRE(entries->size() == 1);
  CHECK((*entries)[0].complete);
  CHECK((*entries)[0].present == content.size());
  REQUIRE((*entries)[0].sha256.has_value());
  CHECK(*(*entries)[0].sha256 == *id.sha256);
}

TEST_CASE("finish: a blob without a known hash is marked complete without hashing", "[blob][finish]") {
  TempDir tmp;
  const std::string content = pattern(5000);
  const auto id = td::blob_identity("https://example.com/small.json", std::nullopt, std::string("\"gitblob\""), content.size());
  auto b = open_blob(tmp.path().string(), id, content.size());
  write_commit(*b, content, ByteRange{0, content.size()});
  REQUIRE(b->finish("small.json").has_value());
  CHECK(b->complete());
  CHECK((stat_of(b->data_path()).st_mode & 07777) == 0400);
}

TEST_CASE("finish: a wrong sha256 is an Integrity error and discards the bytes", "[blob][finish]") {
  TempDir tmp;
  const std::string content = pattern(512 * KiB, 1);
  const std::string expected = pattern(512 * KiB, 2);  // what the server said the file is
  const auto id = sha_identity(expected);
  const std::string dir = tmp.path().string() + "/blobs/" + id.id;
  {
    auto b = open_blob(tmp.path().string(), id, content.size());
    write_commit(*b, content, ByteRange{0, content.size()});
    REQUIRE(disk_bytes_of(dir + "/data") >= content.size());
    auto f = b->finish("model-00001.safetensors");
    CHECK_ERROR(f, ErrorCode::Integrity, "model-00001.safetensors", "sha256", *id.sha256,
                td::sha256_hex(content));
    CHECK(b->extents().empty());
    CHECK_FALSE(b->complete());
    CHECK_FALSE(held(*b, ByteRange{0, 1}));
    INFO("disk bytes after the mismatch " << disk_bytes_of(dir + "/data"));
    CHECK(disk_bytes_of(dir + "/data") < 64 * KiB);  // punched out
    CHECK((stat_of(dir + "/data").st_mode & 0222) != 0);  // not made read-only
  }
  const auto meta = read_json(dir + "/meta.json");
  CHECK_FALSE(meta.at("complete").get<bool>());
  CHECK(meta.at("extents").empty());
  {
    auto again = open_blob(tmp.path().string(), id, content.size());
    CHECK(again->extents().empty());
    CHECK_FALSE(again->complete());
    // The right bytes can still be fetched and verified afterwards.
    write_commit(*again, expected, ByteRange{0, expected.size()});
    auto f = again->finish("model-00001.safetensors");
    INFO(error_text(f));
    CHECK(f.has_value());
    CHECK(again->complete());
  }
}

TEST_CASE("finish: a partial blob is left as it is", "[blob][finish]") {
  TempDir tmp;
  const std::string content = pattern(10000, 3);
  const auto id = sha_identity(pattern(10000, 4));  // wrong hash: it must not even be checked
  auto b = open_blob(tmp.path().string(), id, content.size());
  write_commit(*b, content, ByteRange{0, 5000});
  write_commit(*b, content, ByteRange{5001, 4999});  // one byte missing
  auto f = b->finish("x");
  INFO(error_text(f));
  CHECK(f.has_value());
  CHECK_FALSE(b->complete());
  CHECK(b->extents() == Ranges{{0, 5000}, {5001, 4999}});
  CHECK((stat_of(b->data_path()).st_mode & 07777) == 0600);
  auto again = open_blob(tmp.path().string(), id, content.size());
  CHECK(again->extents() == Ranges{{0, 5000}, {5001, 4999}});
}

// A Blob object merges its own in-memory extents into every commit. When another object (another
// process) has meanwhile discarded the blob's extents because its sha256 did not match (and
// punched the bytes out), a later commit from the first object records the discarded extents as
// present again: zeros are then served as the file's bytes.
TEST_CASE("commit does not resurrect extents another Blob discarded after a hash mismatch",
          "[blob][finish]") {
  TempDir tmp;
  const std::string content = pattern(200, 1);
  const auto id = sha_identity(pattern(200, 2));  // the download is wrong
  auto a = open_blob(tmp.path().string(), id, content.size());
  auto b = open_blob(tmp.path().string(), id, content.size());
  write_commit(*a, content, ByteRange{0, 100});    // process A: first half
  write_commit(*b, content, ByteRange{100, 100});  // process B: second half; B now sees all
  CHECK_ERROR(b->finish("f"), ErrorCode::Integrity);  // B discards everything, punches it out
  REQUIRE(b->extents().empty());

  // A, unaware, commits a re-fetched chunk.
  write_commit(*a, content, ByteRange{150, 10});
  auto c = open_blob(tmp.path().string(), id, content.size());
  INFO("extents after A's commit: " << Catch::StringMaker<Ranges>::convert(c->extents()));
  CHECK(c->extents() == Ranges{{150, 10}});
  CHECK_FALSE(held(*c, ByteRange{0, 100}));  // these bytes were punched out: they read as zeros
}

// --------------------------------------------------------------------------------------------
// Listing, removal, pruning, verification (the public cache API)

TEST_CASE("cache_list: present and disk bytes, complete flag, in use", "[blob][cache_api]") {
  TempDir tmp;
  {
    auto none = tf::cache_list(tmp.path().string() + "/does-not-exist");
    REQUIRE(none.has_value());
    CHECK(none->empty());
  }
  const std::uint64_t size = 4 * MiB;
  const std::string content = pattern(size);
  const auto partial_id = td::blob_identity("https://example.com/partial?x=1", std::nullopt, std::string("\"p\""), size);
  const std::string small = pattern(3000, 9);
  const auto complete_id = sha_identity(small);

  auto partial = open_blob(tmp.path().string(), partial_id, size, "https://example.com/partial?x=1");
  write_commit(*partial, content, ByteRange{0, MiB});
  {
    auto c = open_blob(tmp.path().string(), complete_id, small.size());
    write_commit(*c, small, ByteRange{0, small.size()});
    REQUIRE(c->finish("small").has_value());
  }

  auto entries = tf::cache_list(tmp.path().string());
  REQUIRE(entries.has_value());
  CHECK(entries->size() == 2);
  auto p = find_entry(*entries, partial_id.id);
  auto c = find_entry(*entries, *complete_id.sha256);  // verified: renamed to its sha256
  REQUIRE(p.has_value());
  REQUIRE(c.has_value());

  CHECK(p->url == "https://example.com/partial");
  CHECK(p->size == size);
  CHECK(p->present == MiB);
  CHECK(p->disk_bytes >= MiB);
  CHECK(p->disk_bytes < 2 * MiB);  // sparse
  CHECK_FALSE(p->complete);
  CHECK_FALSE(p->sha256.has_value());
  CHECK(p->in_use);  // `partial` is open
  CHECK(p->last_used > 0);

  CHECK(c->size == small.size());
  CHECK(c->present == small.size());
  CHECK(c->complete);
  CHECK(c->disk_bytes >= small.size());
  CHECK_FALSE(c->in_use);  // closed

  // The private listing agrees.
  auto blobs = td::list_blobs(*cache_at(tmp.path().string()));
  REQUIRE(blobs.has_value());
  CHECK(blobs->size() == 2);

  partial.reset();
  entries = tf::cache_list(tmp.path().string());
  REQUIRE(entries.has_value());
  p = find_entry(*entries, partial_id.id);
  REQUIRE(p.has_value());
  CHECK_FALSE(p->in_use);
}

TEST_CASE("cache_list: least recently used first", "[blob][cache_api]") {
  TempDir tmp;
  const std::time_t now = std::time(nullptr);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const auto id = td::blob_identity("https://example.com/f" + std::to_string(i), std::nullopt, std::nullopt, 10);
    { auto b = open_blob(tmp.path().string(), id, 10); }
    ids.push_back(id.id);
  }
  set_last_used(tmp.path().string(), ids[0], now - 100);
  set_last_used(tmp.path().string(), ids[1], now - 300);
  set_last_used(tmp.path().string(), ids[2], now - 200);
  auto entries = tf::cache_list(tmp.path().string());
  REQUIRE(entries.has_value());
  REQUIRE(entries->size() == 3);
  CHECK((*entries)[0].id == ids[1]);
  CHECK((*entries)[1].id == ids[2]);
  CHECK((*entries)[2].id == ids[0]);
  CHECK((*entries)[0].last_used == now - 300);

  // Opening a blob makes it the most recently used.
  { auto b = open_blob(tmp.path().string(), td::blob_identity("https://example.com/f1", std::nullopt, std::nullopt, 10), 10); }
  entries = tf::cache_list(tmp.path().string());
  REQUIRE(entries.has_value());
  CHECK(entries->back().id == ids[1]);
}

TEST_CASE("cache_remove: refuses a blob in use, removes it once closed", "[blob][cache_api]") {
  TempDir tmp;
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::nullopt, 1000);
  const std::string dir = tmp.path().string() + "/blobs/" + id.id;
  auto b = open_blob(tmp.path().string(), id, 1000);
  write_commit(*b, pattern(1000), ByteRange{0, 1000});

  CHECK_ERROR(tf::cache_remove(id.id, tmp.path().string()), ErrorCode::Busy, "in use");
  CHECK(fs::exists(dir + "/data"));
  CHECK(fs::exists(dir + "/meta.json"));

  b.reset();
  auto r = tf::cache_remove(id.id, tmp.path().string());
  INFO(error_text(r));
  CHECK(r.has_value());
  CHECK_FALSE(fs::exists(dir));
  // Nothing left behind (no trash directory either).
  CHECK(fs::is_empty(tmp.path().string() + "/blobs"));
  auto entries = tf::cache_list(tmp.path().string());
  REQUIRE(entries.has_value());
  CHECK(entries->empty());

  SECTION("unknown and malformed ids") {
    CHECK_ERROR(tf::cache_remove(id.id, tmp.path().string()), ErrorCode::NotFound);
    CHECK_ERROR(tf::cache_remove("", tmp.path().string()), ErrorCode::InvalidArgument);
    CHECK_ERROR(tf::cache_remove("../blobs", tmp.path().string()), ErrorCode::InvalidArgument);
    CHECK_ERROR(tf::cache_remove(".", tmp.path().string()), ErrorCode::InvalidArgument);
    CHECK_ERROR(tf::cache_remove("..", tmp.path().string()), ErrorCode::InvalidArgument);
    CHECK(fs::exists(tmp.path().string() + "/blobs"));
  }
}

TEST_CASE("cache_prune: least recently used first, down to the limit, skipping blobs in use",
          "[blob][cache_api][prune]") {
  TempDir tmp;
  const std::time_t now = std::time(nullptr);
  const std::uint64_t size = 2 * MiB;
  const std::string content = pattern(MiB);
  std::vector<td::BlobIdentity> ids;
  for (int i = 0; i < 3; ++i) {  // three blobs holding 1 MiB each
    ids.push_back(td::blob_identity("https://example.com/shard" + std::to_string(i), std::nullopt, std::nullopt, size));
    auto b = open_blob(tmp.path().string(), ids.back(), size);
    write_commit(*b, content, ByteRange{0, MiB});
  }
  auto oldest_first = [&] {  // ids[0] oldest, ids[2] newest
    set_last_used(tmp.path().string(), ids[0].id, now - 3000);
    set_last_used(tmp.path().string(), ids[1].id, now - 2000);
    set_last_used(tmp.path().string(), ids[2].id, now - 1000);
  };
  auto exists = [&](int i) { return fs::exists(tmp.path().string() + "/blobs/" + ids[i].id); };
  oldest_first();

  auto entries = tf::cache_list(tmp.path().string());
  REQUIRE(entries.has_value());
  REQUIRE(entries->size() == 3);
  std::uint64_t total = 0;
  for (const auto& e : *entries) total += e.disk_bytes;
  const std::uint64_t newest_bytes = find_entry(*entries, ids[2].id)->disk_bytes;
  const std::uint64_t middle_bytes = find_entry(*entries, ids[1].id)->disk_bytes;

  SECTION("nothing to do under the limit") {
    auto r = tf::cache_prune(total, tmp.path().string());
    REQUIRE(r.has_value());
    CHECK(r->removed == 0);
    CHECK(r->freed_bytes == 0);
    CHECK(r->remaining_bytes == total);
    CHECK((exists(0) && exists(1) && exists(2)));
  }
  SECTION("removes the least recently used down to the limit") {
    auto r = tf::cache_prune(newest_bytes + middle_bytes / 2, tmp.path().string());
    REQUIRE(r.has_value());
    CHECK(r->removed == 2);
    CHECK(r->freed_bytes == total - newest_bytes);
    CHECK(r->remaining_bytes == newest_bytes);
    CHECK(r->skipped_in_use == 0);
    CHECK_FALSE(exists(0));
    CHECK_FALSE(exists(1));
    CHECK(exists(2));
  }
  SECTION("stops as soon as the cache fits") {
    auto r = tf::cache_prune(total - 1, tmp.path().string());
    REQUIRE(r.has_value());
    CHECK(r->removed == 1);
    CHECK_FALSE(exists(0));
    CHECK((exists(1) && exists(2)));
  }
  SECTION("skips the least recently used blob while it is in use") {
    auto in_use = open_blob(tmp.path().string(), ids[0], size);
    oldest_first();  // opening made ids[0] the newest; make it the oldest again
    auto r = tf::cache_prune(newest_bytes + middle_bytes / 2, tmp.path().string());
    REQUIRE(r.has_value());
    CHECK(r->skipped_in_use == 1);
    CHECK(r->removed == 2);
    CHECK(exists(0));
    CHECK_FALSE(exists(1));
    CHECK_FALSE(exists(2));
    CHECK(in_use->extents() == Ranges{{0, MiB}});
  }
  SECTION("limit 0 removes everything not in use") {
    auto in_use = open_blob(tmp.path().string(), ids[1], size);
    auto r = tf::cache_prune(0, tmp.path().string());
    REQUIRE(r.has_value());
    CHECK(r->removed == 2);
    CHECK(r->skipped_in_use == 1);
    CHECK(r->remaining_bytes == middle_bytes);
    CHECK(exists(1));
    CHECK_FALSE(exists(0));
    CHECK_FALSE(exists(2));
  }
}

TEST_CASE("cache_verify: a byte flipped in a complete blob is detected and discarded", "[blob][cache_api][verify]") {
  TempDir tmp;
  const std::string content = pattern(200 * KiB, 5);
  const auto id = sha_identity(content);
  const std::string data = tmp.path().string() + "/blobs/" + *id.sha256 + "/data";  // verified: renamed
  {
    auto b = open_blob(tmp.path().string(), id, content.size());
    write_commit(*b, content, ByteRange{0, content.size()});
    REQUIRE(b->finish("m").has_value());
  }
  {
    auto ok = tf::cache_verify(*id.sha256, tmp.path().string());
    INFO(error_text(ok));
    CHECK(ok.has_value());
  }

  // Flip one byte (the file is read-only once complete).
  fs::permissions(data, fs::perms::owner_write, fs::perm_options::add);
  {
    const int fd = ::open(data.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    char c = 0;
    REQUIRE(::pread(fd, &c, 1, 12345) == 1);
    c = static_cast<char>(c ^ 0x01);
    REQUIRE(::pwrite(fd, &c, 1, 12345) == 1);
    ::close(fd);
  }
  fs::permissions(data, fs::perms::owner_write, fs::perm_options::remove);

  CHECK_ERROR(tf::cache_verify(*id.sha256, tmp.path().string()), ErrorCode::Integrity, "sha256", *id.sha256);

  auto entries = tf::cache_list(tmp.path().string());
  REQUIRE(entries.has_value());
  REQUIRE(entries->size() == 1);
  CHECK((*entries)[0].present == 0);
  CHECK_FALSE((*entries)[0].complete);
  CHECK(disk_bytes_of(data) < 64 * KiB);  // punched out

  auto again = open_blob(tmp.path().string(), id, content.size());
  CHECK(again->extents().empty());
  CHECK_FALSE(again->complete());
  CHECK_FALSE(held(*again, ByteRange{0, 1}));
}

TEST_CASE("cache_verify: partial blobs and blobs without a hash only have their size checked",
          "[blob][cache_api][verify]") {
  TempDir tmp;
  const std::string content = pattern(5000, 5);
  const auto partial_id = sha_identity(content);
  const auto nohash_id = td::blob_identity("https://example.com/x", std::nullopt, std::nullopt, content.size());
  {
    auto b = open_blob(tmp.path().string(), partial_id, content.size());
    write_commit(*b, content, ByteRange{0, 1000});
    auto n = open_blob(tmp.path().string(), nohash_id, content.size());
    write_commit(*n, content, ByteRange{0, content.size()});
    REQUIRE(n->finish("x").has_value());
  }
  CHECK(tf::cache_verify(partial_id.id, tmp.path().string()).has_value());
  CHECK(tf::cache_verify(nohash_id.id, tmp.path().string()).has_value());

  // A data file of the wrong size is reported.
  REQUIRE(::truncate((tmp.path().string() + "/blobs/" + partial_id.id + "/data").c_str(), 10) == 0);
  CHECK_ERROR(tf::cache_verify(partial_id.id, tmp.path().string()), ErrorCode::Integrity, "size");
}

// `tensorfetch cache verify TYPO` should say the blob does not exist (exit 1), not that a blob
// failed its integrity check (exit 4): verify_blob reads ROOT/blobs/ID/meta.json, and a missing
// file is reported as "unreadable; the blob cannot be trusted" (Integrity).
TEST_CASE("cache_verify: an unknown id is NotFound, not an integrity failure",
          "[blob][cache_api][verify]") {
  TempDir tmp;
  { auto b = open_blob(tmp.path().string(), td::blob_identity("https://example.com/x", std::nullopt, std::nullopt, 10), 10); }
  CHECK_ERROR(tf::cache_verify("u0000000000000000000000000000000000000000", tmp.path().string()), ErrorCode::NotFound);
}

// --------------------------------------------------------------------------------------------
// A full disk

TEST_CASE("a full disk: write_at fails with an Io error saying so, and nothing is recorded", "[blob][disk_full]") {
  TempDir tmp;
  tftest::ScopedTmpfs fs_small(tmp / "disk", "1M");
  if (!fs_small.mounted()) {
    WARN("SKIPPED: cannot mount a 1 MiB tmpfs (" << fs_small.error() << "); the full-disk test needs root");
    return;
  }
  const std::string root = (fs_small.path() / "cache").string();
  const std::uint64_t size = 4 * MiB;
  const std::string content = pattern(size);
  const auto id = td::blob_identity("https://example.com/big", std::nullopt, std::string("\"e\""), size);
  {
    auto b = open_blob(root, id, size);  // a sparse 4 MiB file fits in 1 MiB
    auto w = b->write_at(0, bytes(content, 0, 2 * MiB));
    CHECK_ERROR(w, ErrorCode::Io, "full", b->data_path());
    CHECK(b->extents().empty());
    CHECK_FALSE(held(*b, ByteRange{0, 1}));

    // Committing on the full disk cannot replace meta.json; the old one stays intact.
    const Ranges some{{0, 4096}};
    auto c = b->commit(some);
    if (c) {
      WARN("commit succeeded on the full tmpfs (meta.json fit); bytes 0-4095 were really written");
      CHECK(b->extents() == some);
    } else {
      CHECK_ERROR(c, ErrorCode::Io, "full");
      CHECK(b->extents().empty());
      const auto meta = read_json(root + "/blobs/" + id.id + "/meta.json");
      CHECK(meta.at("extents").empty());
    }
  }
  if (fs::exists(root + "/blobs/" + id.id + "/meta.json")) {
    // Nothing of the failed write is present after reopening, and no temporary meta file is left.
    for (const auto& e : fs::directory_iterator(root + "/blobs/" + id.id)) {
      INFO("file " << e.path().filename().string());
      CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
    }
    auto b = td::Blob::open(cache_at(root), id, size, "https://example.com/big", std::string("\"e\""));
    REQUIRE(b.has_value());
    CHECK_FALSE(held(**b, ByteRange{4096, 1}));
    CHECK(td::total_bytes((*b)->extents()) <= 4096);
  }
}

// --------------------------------------------------------------------------------------------
// Provenance: one origin's bytes are never served to another; only verified blobs are shared

TEST_CASE("provenance: partial bytes of one origin are not seen by another claiming the same sha256",
          "[blob][provenance]") {
  TempDir tmp;
  const std::string honest = pattern(4096, 1);
  const std::string sha = td::sha256_hex(honest);
  const auto a = td::blob_identity("https://hub-a.example/o/m/resolve/main/x", quoted(sha), std::nullopt, honest.size());
  const auto b = td::blob_identity("https://hub-b.example/o/m/resolve/main/x", quoted(sha), std::nullopt, honest.size());
  REQUIRE(a.id != b.id);
  auto from_b = open_blob(tmp.path().string(), b, honest.size());
  const std::string lie = pattern(4096, 2);
  write_commit(*from_b, lie, ByteRange{0, 2048});
  auto from_a = open_blob(tmp.path().string(), a, honest.size());
  CHECK(from_a->extents().empty());
  CHECK_FALSE(held(*from_a, ByteRange{0, 1}));
  // B completing its lie fails verification and discards it; A's own fetch verifies and becomes
  // the blob every origin reads.
  write_commit(*from_b, lie, ByteRange{2048, 2048});
  CHECK_ERROR(from_b->finish("x"), ErrorCode::Integrity, "sha256");
  write_commit(*from_a, honest, ByteRange{0, honest.size()});
  REQUIRE(from_a->finish("x").has_value());
  CHECK(from_a->id() == sha);
  auto b_again = open_blob(tmp.path().string(), b, honest.size());
  CHECK(b_again->shared_verified());
  CHECK(b_again->complete());
  CHECK(read_data(*b_again, ByteRange{0, honest.size()}) == honest);
  CHECK_ERROR(b_again->write_at(0, bytes(lie, 0, 10)), ErrorCode::InvalidArgument, "never written");
}

TEST_CASE("provenance: a meta.json recorded for another origin (or none) holds nothing for this one",
          "[blob][provenance]") {
  TempDir tmp;
  const std::string content = pattern(1000, 3);
  const auto id = td::blob_identity("https://hub-a.example/x", quoted(td::sha256_hex(content)), std::nullopt, content.size());
  {
    auto blob = open_blob(tmp.path().string(), id, content.size());
    write_commit(*blob, content, ByteRange{0, 500});
  }
  const std::string meta_path = tmp.path().string() + "/blobs/" + id.id + "/meta.json";
  auto meta = read_json(meta_path);
  CHECK(meta.at("origin") == "https://hub-a.example");
  meta["origin"] = "https://elsewhere.example";
  write_text(meta_path, meta.dump());
  CHECK(open_blob(tmp.path().string(), id, content.size())->extents().empty());
  {
    auto blob = open_blob(tmp.path().string(), id, content.size());
    write_commit(*blob, content, ByteRange{0, 500});
  }
  meta = read_json(meta_path);
  meta.erase("origin");  // as an older cache wrote it
  write_text(meta_path, meta.dump());
  CHECK(open_blob(tmp.path().string(), id, content.size())->extents().empty());
}

TEST_CASE("provenance: a shared blob discarded by cache verify makes way for the next verified one",
          "[blob][provenance][verify]") {
  TempDir tmp;
  const std::string content = pattern(3000, 4);
  const auto id = sha_identity(content);
  {
    auto blob = open_blob(tmp.path().string(), id, content.size());
    write_commit(*blob, content, ByteRange{0, content.size()});
    REQUIRE(blob->finish("x").has_value());
    REQUIRE(blob->id() == *id.sha256);
  }
  const std::string data = tmp.path().string() + "/blobs/" + *id.sha256 + "/data";
  fs::permissions(data, fs::perms::owner_write, fs::perm_options::add);
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('\x7f');
  }
  CHECK_ERROR(tf::cache_verify(*id.sha256, tmp.path().string()), ErrorCode::Integrity);
  auto again = open_blob(tmp.path().string(), id, content.size());  // not the discarded shared one
  CHECK_FALSE(again->shared_verified());
  CHECK(again->id() == id.id);
  write_commit(*again, content, ByteRange{0, content.size()});
  REQUIRE(again->finish("x").has_value());
  CHECK(again->id() == *id.sha256);
  CHECK(tf::cache_verify(*id.sha256, tmp.path().string()).has_value());
}

// --------------------------------------------------------------------------------------------
// Stale bytes: first_difference and retire (issue 19, item 3)

TEST_CASE("first_difference compares exactly the committed bytes inside the given window", "[blob][stale]") {
  TempDir tmp;
  const std::uint64_t size = 64 * KiB;
  const std::string content = pattern(size);
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::string("\"e\""), size);
  auto b = open_blob(tmp.path().string(), id, size);
  write_commit(*b, content, ByteRange{0, 4096});
  write_commit(*b, content, ByteRange{16 * KiB, 4096});
  struct Row {
    const char* name;
    std::uint64_t offset;       // window start
    std::uint64_t length;       // window length
    std::uint64_t flip;         // byte of the window's copy changed (npos: none)
    std::optional<std::uint64_t> want;
  };
  constexpr auto npos = std::numeric_limits<std::uint64_t>::max();
  const Row rows[] = {
      {"the same bytes", 0, 32 * KiB, npos, std::nullopt},
      {"a difference in a committed extent", 0, 32 * KiB, 100, 100},
      {"a difference in the second extent", 0, 32 * KiB, 16 * KiB + 7, 16 * KiB + 7},
      {"a difference where nothing is committed", 0, 32 * KiB, 8 * KiB, std::nullopt},
      {"a window starting inside an extent", 2048, 4096, 3000, 3000},
      {"a window past every extent", 40 * KiB, 4096, 41 * KiB, std::nullopt},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    std::string window = content.substr(static_cast<std::size_t>(row.offset), static_cast<std::size_t>(row.length));
    if (row.flip != npos) window[static_cast<std::size_t>(row.flip - row.offset)] ^= 0x5A;
    auto d = b->first_difference(row.offset, bytes(window));
    REQUIRE(d.has_value());
    CHECK(*d == row.want);
  }
}

TEST_CASE("retire: no bytes served any more, by this or another Blob; the identity's next open is a fresh blob; "
          "commits into the retired one fail; ls and prune see it",
          "[blob][stale]") {
  TempDir tmp;
  const std::string root = tmp.path().string();
  const std::uint64_t size = 64 * KiB;
  const std::string content = pattern(size);
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::string("\"e\""), size);
  auto stale = open_blob(root, id, size);
  auto other = open_blob(root, id, size);  // another process using it
  write_commit(*stale, content, ByteRange{0, size});
  REQUIRE(stale->finish("a").has_value());
  REQUIRE(stale->complete());

  auto name = stale->retire("test");
  INFO((name ? std::string("ok") : name.error().message));
  REQUIRE(name.has_value());
  CHECK(name->starts_with(id.id + ".retired-"));
  CHECK(td::is_retired_name(*name));
  CHECK(stale->id() == *name);
  CHECK(stale->retired());
  CHECK_FALSE(stale->complete());
  CHECK_FALSE(held(*stale, ByteRange{0, 1}));
  const auto meta = read_json(root + "/blobs/" + *name + "/meta.json");
  CHECK(meta.at("retired") == "test");
  CHECK(meta.at("extents").empty());
  CHECK_FALSE(fs::exists(root + "/blobs/" + id.id));

  // The other process: nothing served from it any more, and nothing recorded into it.
  CHECK_FALSE(held(*other, ByteRange{0, 1}));
  const Ranges some{{0, 4096}};
  auto c = other->commit(some);
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().code == ErrorCode::Integrity);
  CHECK(c.error().message.find("retired") != std::string::npos);

  // The identity's next open makes a fresh blob.
  auto fresh = open_blob(root, id, size);
  CHECK(fresh->id() == id.id);
  CHECK(fresh->extents().empty());
  CHECK_FALSE(fresh->retired());
  write_commit(*fresh, pattern(size, 2), ByteRange{0, 4096});

  stale.reset();
  other.reset();
  fresh.reset();
  auto listed = tf::cache_list(root, false);
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == 2);
  auto r = find_entry(*listed, *name);
  REQUIRE(r.has_value());
  CHECK(r->retired);
  CHECK(r->present == 0);
  auto f = find_entry(*listed, id.id);
  REQUIRE(f.has_value());
  CHECK_FALSE(f->retired);
  // Prune removes the retired blob whatever the limit, and keeps the fresh one.
  auto pruned = tf::cache_prune(std::uint64_t{1} << 40, root, false);
  REQUIRE(pruned.has_value());
  CHECK(pruned->removed == 1);
  CHECK_FALSE(fs::exists(root + "/blobs/" + *name));
  CHECK(fs::exists(root + "/blobs/" + id.id));
}

TEST_CASE("retire: a crash before the rename leaves a retired meta.json under the identity's name; the next open "
          "moves it away and makes a fresh blob",
          "[blob][stale][crash]") {
  TempDir tmp;
  const std::string root = tmp.path().string();
  const std::uint64_t size = 8 * KiB;
  const std::string content = pattern(size);
  const auto id = td::blob_identity("https://example.com/a", std::nullopt, std::string("\"e\""), size);
  {
    auto b = open_blob(root, id, size);
    write_commit(*b, content, ByteRange{0, size});
  }
  // What retire writes first (extents dropped, "retired" set), without the rename that follows.
  const std::string meta_path = root + "/blobs/" + id.id + "/meta.json";
  auto meta = read_json(meta_path);
  meta["extents"] = nlohmann::json::array();
  meta["retired"] = "crashed";
  write_text(meta_path, meta.dump());
  // Offline (no creation): nothing there any more.
  auto none = td::Blob::open(cache_at(root), id, size, "https://example.com/a", std::nullopt, td::BlobCreate::No);
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().code == ErrorCode::NotFound);
  auto fresh = open_blob(root, id, size);
  CHECK(fresh->extents().empty());
  CHECK_FALSE(fresh->retired());
  auto listed = tf::cache_list(root, false);
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == 2);
  std::size_t retired = 0;
  for (const auto& e : *listed) retired += e.retired ? 1 : 0;
  CHECK(retired == 1);
}
