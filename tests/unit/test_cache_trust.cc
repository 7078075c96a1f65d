// SPDX-License-Identifier: Apache-2.0
// Symbolic links and permissions inside the cache (issue 14, item 3), on the local file system:
// a link planted at a blob's data, meta.json or lock, at a blob directory or at the cache root
// is refused and its target is left exactly as it was (content and mode); directories that
// another user owns or that group/others may write are refused (unless the cache is shared by
// a group); what tensorfetch creates is 0700/0600 (complete data 0400); `cache rm`, `prune`,
// `verify` and `ls` never follow a planted link.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cache/blob.h"
#include "tensorfetch/cache.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
namespace tf = tensorfetch;
namespace td = tensorfetch::detail;
using tf::ByteRange;
using tf::ErrorCode;

namespace {

using tftest::TempDir;
using tftest::write_file;

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

/// Every entry below `dir` (not following links): mode, content or link target.
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st {};
    REQUIRE(::lstat(it->path().c_str(), &st) == 0);
    std::string v = std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + " ";
    if (S_ISLNK(st.st_mode)) v += "-> " + fs::read_symlink(it->path()).string();
    if (S_ISREG(st.st_mode)) v += tftest::try_read_file(it->path()).value_or("?");
    out[fs::relative(it->path(), dir).string()] = v;
  }
  return out;
}

std::string content_of(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + 3);
  return s;
}

const std::string kUrl = "https://hub.example/org/m/resolve/main/model.safetensors";

td::BlobIdentity identity_of(const std::string& content) {
  return td::blob_identity(kUrl, "\"" + td::sha256_hex(content) + "\"", std::nullopt, content.size());
}

tf::Result<std::unique_ptr<td::Blob>> open_blob(const fs::path& root, const td::BlobIdentity& id, std::uint64_t size,
                                                td::Sharing sharing = td::Sharing::Private) {
  auto cache = td::CacheDir::open(root.string(), sharing, true);
  if (!cache) return tf::fail(cache.error());
  return td::Blob::open(*cache, id, size, kUrl, std::nullopt);
}

/// A cache holding one partial blob (the first 100 bytes of `content`); returns its directory.
fs::path make_blob(const fs::path& root, const std::string& content) {
  auto b = open_blob(root, identity_of(content), content.size());
  INFO((b ? std::string() : b.error().message));
  REQUIRE(b);
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(content.data()), 100);
  REQUIRE((*b)->write_at(0, bytes));
  const std::vector<ByteRange> r{{0, 100}};
  REQUIRE((*b)->commit(r));
  return root / "blobs" / identity_of(content).id;
}

}  // namespace

TEST_CASE("cache trust: a new cache is private: directories 0700, files 0600, complete data 0400",
          "[cache][trust][modes]") {
  TempDir tmp;
  const fs::path root = tmp / "cache";
  const std::string content = content_of(300);
  const mode_t old = ::umask(0);  // a permissive umask changes nothing
  {
    auto b = open_blob(root, identity_of(content), content.size());
    REQUIRE(b);
    const fs::path dir = root / "blobs" / identity_of(content).id;
    CHECK(mode_of(root) == 0700);
    CHECK(mode_of(root / "blobs") == 0700);
    CHECK(mode_of(root / "snapshots") == 0700);
    CHECK(mode_of(dir) == 0700);
    CHECK(mode_of(dir / "data") == 0600);
    CHECK(mode_of(dir / "meta.json") == 0600);
    CHECK(mode_of(dir / "lock") == 0600);
    std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(content.data()), content.size());
    REQUIRE((*b)->write_at(0, bytes));
    const std::vector<ByteRange> all{{0, content.size()}};
    REQUIRE((*b)->commit(all));
    REQUIRE((*b)->finish("m"));
    CHECK(mode_of((*b)->data_path()) == 0400);
    CHECK(mode_of(root / "blobs" / *identity_of(content).sha256 / "meta.json") == 0600);
  }
  ::umask(old);
}

TEST_CASE("cache trust: a shared cache (opt-in) is group-writable: directories 02770, files 0660, complete 0440",
          "[cache][trust][modes][shared]") {
  TempDir tmp;
  const fs::path root = tmp / "cache";
  const std::string content = content_of(200);
  const mode_t old = ::umask(022);  // the group bits are set whatever the umask
  auto b = open_blob(root, identity_of(content), content.size(), td::Sharing::Group);
  ::umask(old);
  REQUIRE(b);
  const fs::path dir = root / "blobs" / identity_of(content).id;
  CHECK(mode_of(root) == 02770);
  CHECK(mode_of(dir) == 02770);
  CHECK(mode_of(dir / "data") == 0660);
  CHECK(mode_of(dir / "meta.json") == 0660);
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(content.data()), content.size());
  REQUIRE((*b)->write_at(0, bytes));
  const std::vector<ByteRange> all{{0, content.size()}};
  REQUIRE((*b)->commit(all));
  REQUIRE((*b)->finish("m"));
  CHECK(mode_of((*b)->data_path()) == 0440);
  // The same cache opened as private is refused: it is group-writable.
  CHECK_ERROR(td::CacheDir::open(root.string(), td::Sharing::Private, false), ErrorCode::Io, "writable by its group",
              "--shared-cache");
}

TEST_CASE("cache trust: a symlink planted at a blob's data, meta.json or lock is refused; its target keeps its "
          "content and mode", "[cache][trust][symlink]") {
  for (const char* name : {"data", "meta.json", "lock"}) {
    DYNAMIC_SECTION(name) {
      TempDir tmp;
      const fs::path root = tmp / "cache";
      const std::string content = content_of(4096);
      const fs::path dir = make_blob(root, content);
      // The victim: a read-only file of the user's, outside the cache.
      const fs::path victim = tmp / "outside" / "victim.txt";
      write_file(victim, "precious bytes that must not change");
      ::chmod(victim.c_str(), 0444);
      const auto before = tree(tmp / "outside");
      fs::remove(dir / name);
      fs::create_symlink(victim, dir / name);

      auto b = open_blob(root, identity_of(content), content.size());
      CHECK_ERROR(b, ErrorCode::Io, "symbolic link", (dir / name).string());
      // Neither a fetch (open) nor cache verify wrote through it or chmod'ed it.
      (void)tf::cache_verify(identity_of(content).id, root.string());
      CHECK(tree(tmp / "outside") == before);
      CHECK(mode_of(victim) == 0444);
      CHECK(fs::is_symlink(dir / name));
    }
  }
}

TEST_CASE("cache trust: a read-only target behind a planted data link of a complete blob is never made writable",
          "[cache][trust][symlink]") {
  TempDir tmp;
  const fs::path root = tmp / "cache";
  const std::string content = content_of(512);
  const auto id = td::blob_identity(kUrl, std::nullopt, std::string("\"e\""), content.size());
  fs::path dir;
  {
    auto b = open_blob(root, id, content.size());
    REQUIRE(b);
    std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(content.data()), content.size());
    REQUIRE((*b)->write_at(0, bytes));
    const std::vector<ByteRange> all{{0, content.size()}};
    REQUIRE((*b)->commit(all));
    REQUIRE((*b)->finish("m"));
    dir = fs::path((*b)->data_path()).parent_path();
  }
  const fs::path victim = tmp / "outside" / "readonly.bin";
  write_file(victim, std::string(content.size(), 'v'));
  ::chmod(victim.c_str(), 0444);
  const auto before = tree(tmp / "outside");
  fs::permissions(dir / "data", fs::perms::owner_write, fs::perm_options::add);
  fs::remove(dir / "data");
  fs::create_symlink(victim, dir / "data");
  write_file(dir / "meta.json", "garbage: no longer complete, so the blob would be fetched again");
  auto b = open_blob(root, id, content.size());
  CHECK_ERROR(b, ErrorCode::Io, "symbolic link");
  CHECK(tree(tmp / "outside") == before);
  CHECK(mode_of(victim) == 0444);
}

TEST_CASE("cache trust: a blob directory, blobs/ or the cache root that is a symlink is refused; nothing is "
          "created through it", "[cache][trust][symlink]") {
  TempDir tmp;
  const std::string content = content_of(1000);
  const auto id = identity_of(content);
  const fs::path outside = tmp / "outside";
  write_file(outside / "keep.txt", "keep");
  const auto before = tree(outside);
  SECTION("blobs/ID") {
    const fs::path root = tmp / "cache";
    make_blob(root, content_of(200));  // the cache exists
    fs::create_directory_symlink(outside, root / "blobs" / id.id);
    CHECK_ERROR(open_blob(root, id, content.size()), ErrorCode::Io, "symbolic link", id.id);
  }
  SECTION("blobs/") {
    const fs::path root = tmp / "cache";
    fs::create_directories(root);
    ::chmod(root.c_str(), 0700);
    fs::create_directory_symlink(outside, root / "blobs");
    CHECK_ERROR(open_blob(root, id, content.size()), ErrorCode::Io, "symbolic link", "blobs");
  }
  SECTION("the cache root") {
    fs::create_directory_symlink(outside, tmp / "cache");
    CHECK_ERROR(open_blob(tmp / "cache", id, content.size()), ErrorCode::Io, "symbolic link", "TENSORFETCH_CACHE");
    CHECK_ERROR(tf::cache_list((tmp / "cache").string()), ErrorCode::Io, "symbolic link");
  }
  CHECK(tree(outside) == before);
}

TEST_CASE("cache trust: a FIFO planted at data is refused at once (the open does not block)", "[cache][trust]") {
  TempDir tmp;
  const fs::path root = tmp / "cache";
  const std::string content = content_of(1000);
  const fs::path dir = make_blob(root, content);
  fs::remove(dir / "data");
  REQUIRE(::mkfifo((dir / "data").c_str(), 0600) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_ERROR(open_blob(root, identity_of(content), content.size()), ErrorCode::Io, "not a regular file");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
}

TEST_CASE("cache trust: directories writable by group or others are refused (others: even when shared)",
          "[cache][trust][perms]") {
  TempDir tmp;
  const fs::path root = tmp / "cache";
  const std::string content = content_of(1000);
  const fs::path dir = make_blob(root, content);
  SECTION("group-writable root") {
    ::chmod(root.c_str(), 0770);
    CHECK_ERROR(open_blob(root, identity_of(content), content.size()), ErrorCode::Io, root.string(), "group",
                "chmod g-w");
    CHECK(open_blob(root, identity_of(content), content.size(), td::Sharing::Group));
  }
  SECTION("group-writable blob directory") {
    ::chmod(dir.c_str(), 0770);
    CHECK_ERROR(open_blob(root, identity_of(content), content.size()), ErrorCode::Io, dir.string(), "group");
    CHECK_ERROR(tf::cache_verify(identity_of(content).id, root.string()), ErrorCode::Io, "group");
  }
  SECTION("world-writable blob directory") {
    ::chmod(dir.c_str(), 0777);
    CHECK_ERROR(open_blob(root, identity_of(content), content.size()), ErrorCode::Io, "every user", "chmod o-w");
    CHECK_ERROR(open_blob(root, identity_of(content), content.size(), td::Sharing::Group), ErrorCode::Io,
                "every user");
  }
  SECTION("world-writable root with the sticky bit (like /tmp)") {
    ::chmod(root.c_str(), 01777);
    CHECK_ERROR(tf::cache_list(root.string(), true), ErrorCode::Io, "every user");
  }
}

TEST_CASE("cache trust: a cache directory owned by another user is refused unless the cache is shared",
          "[cache][trust][owner]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: changing a directory's owner needs root");
    return;
  }
  TempDir tmp;
  const fs::path root = tmp / "cache";
  const std::string content = content_of(1000);
  const fs::path dir = make_blob(root, content);
  SECTION("the blob directory") {
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    CHECK_ERROR(open_blob(root, identity_of(content), content.size()), ErrorCode::Io, "owned by uid 65534", dir.string());
  }
  SECTION("the root") {
    REQUIRE(::chown(root.c_str(), 65534, 65534) == 0);
    CHECK_ERROR(open_blob(root, identity_of(content), content.size()), ErrorCode::Io, "owned by uid 65534",
                "--cache-dir");
    CHECK(open_blob(root, identity_of(content), content.size(), td::Sharing::Group));
  }
}

TEST_CASE("cache trust: cache rm, prune, verify and ls never follow a link planted in blobs/", "[cache][trust][api]") {
  TempDir tmp;
  const fs::path root = tmp / "cache";
  make_blob(root, content_of(5000));
  const fs::path outside = tmp / "outside";
  write_file(outside / "dir" / "data", "precious");
  write_file(outside / "dir" / "meta.json", R"({"size":8,"complete":true,"extents":[[0,8]]})");
  write_file(outside / "file", "precious too");
  fs::create_directory_symlink(outside / "dir", root / "blobs" / "planted-dir");
  fs::create_symlink(outside / "file", root / "blobs" / "planted-file");
  const auto before = tree(outside);

  auto ls = tf::cache_list(root.string());
  REQUIRE(ls);
  CHECK(ls->size() == 3);
  for (const auto& e : *ls) {
    if (e.id.starts_with("planted")) {
      CHECK(e.present == 0);  // nothing read through the link
      CHECK_FALSE(e.complete);
    }
  }
  CHECK_ERROR(tf::cache_verify("planted-dir", root.string()), ErrorCode::Io, "symbolic link");
  auto rm = tf::cache_remove("planted-dir", root.string());
  INFO((rm ? std::string() : rm.error().message));
  CHECK(rm);
  CHECK_FALSE(fs::exists(fs::symlink_status(root / "blobs" / "planted-dir")));
  auto pruned = tf::cache_prune(0, root.string());
  REQUIRE(pruned);
  CHECK(pruned->removed == 1);  // the real blob; the link takes no space, so the cache fits
  CHECK(tf::cache_remove("planted-file", root.string()));
  CHECK(fs::is_empty(root / "blobs"));
  CHECK(tree(outside) == before);
}
