// SPDX-License-Identifier: Apache-2.0
// The file-system helper for paths built from strings someone else chose (lib/cache/fs_util.h):
// name checks, directories and files opened without following symbolic links, links followed
// only while they stay inside a root, atomic replacement that never writes through a link, and
// removal that never leaves its tree. On a temporary directory; "outside" is a sibling
// directory whose every entry is compared before and after.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/fs.h"
#include "test_util.hpp"

namespace fs = std::filesystem;
namespace td = tensorfetch::detail;
using tensorfetch::ErrorCode;

namespace {

using tftest::TempDir;
using tftest::write_file;

std::string read_fd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

/// Every entry below `dir` (not following links): type, mode, size, content or link target.
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::none, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    REQUIRE(::lstat(it->path().c_str(), &st) == 0);
    std::string v = std::to_string(st.st_mode) + " ";
    if (S_ISLNK(st.st_mode)) {
      v += "-> " + fs::read_symlink(it->path()).string();
    } else if (S_ISREG(st.st_mode)) {
      v += tftest::try_read_file(it->path()).value_or("?");
    }
    out[fs::relative(it->path(), dir).string()] = v;
  }
  return out;
}

td::UniqueFd open_dir(const fs::path& p) {
  td::UniqueFd fd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(fd);
  return fd;
}

}  // namespace

TEST_CASE("fs_util: path components and relative paths named by others are checked before use", "[fs_util]") {
  for (const char* ok : {"a", "model.safetensors", "0123abc", "a b", "..a", "a..", ".hidden"}) {
    INFO(ok);
    CHECK(td::check_path_component(ok, "name"));
  }
  struct Row {
    std::string name;
    const char* why;
  };
  const std::vector<Row> bad = {
      {"", "empty"},           {".", "'.'"},         {"..", "'..'"},
      {"a/b", "'/'"},          {"a\nb", "control"},  {std::string("a\0b", 3), "control"},
      {"a\x7f", "control"},    {std::string(256, 'x'), "255"},
  };
  for (const auto& row : bad) {
    DYNAMIC_SECTION("component " << row.why) {
      auto r = td::check_path_component(row.name, "commit");
      CHECK_ERROR(r, ErrorCode::InvalidArgument, "commit", row.why);
      CHECK(r.error().message.find('\n') == std::string::npos);  // escaped
    }
  }
  CHECK(td::check_relative_path("snapshots/abc/model.safetensors", "path"));
  for (const char* r : {"", "/etc/passwd", "a//b", "a/../b", "../x", "a/./b", "a/", "a/\tb"}) {
    INFO(r);
    CHECK_ERROR(td::check_relative_path(r, "path"), ErrorCode::InvalidArgument, "path");
  }
}

TEST_CASE("fs_util: open_dir_at creates missing directories with exactly the mode asked and refuses a symlink "
          "on the way", "[fs_util]") {
  TempDir tmp;
  const fs::path root = tmp.path() / "root";
  const fs::path outside = tmp.path() / "outside";
  fs::create_directories(root);
  fs::create_directories(outside / "keep");
  write_file(outside / "keep" / "file", "precious");
  const auto before = tree(outside);
  auto rootfd = open_dir(root);
  const mode_t old_umask = ::umask(0);  // the mode must not depend on the umask either way
  auto made = td::open_dir_at(rootfd.get(), "a/b/c", root.string(), true, 0700);
  ::umask(old_umask);
  REQUIRE(made);
  struct stat st {};
  REQUIRE(::stat((root / "a" / "b" / "c").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0700);
  REQUIRE(::stat((root / "a").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0700);

  fs::create_directory_symlink(outside, root / "a" / "link");
  auto through = td::open_dir_at(rootfd.get(), "a/link/keep", root.string(), true, 0700);
  CHECK_ERROR(through, ErrorCode::Io, "symbolic link", (root / "a" / "link").string());
  auto created = td::open_dir_at(rootfd.get(), "a/link/new", root.string(), true, 0700);
  CHECK_FALSE(created);
  CHECK(tree(outside) == before);
  CHECK_ERROR(td::open_dir_at(rootfd.get(), "a/missing", root.string(), false, 0700), ErrorCode::NotFound);
  CHECK_ERROR(td::open_dir_at(rootfd.get(), "a/../..", root.string(), true, 0700), ErrorCode::InvalidArgument);
}

TEST_CASE("fs_util: open_file_at refuses a symlink (also a dangling one with O_CREAT) and non-regular files, "
          "without blocking on a FIFO", "[fs_util]") {
  TempDir tmp;
  const fs::path dir = tmp.path() / "dir";
  const fs::path outside = tmp.path() / "outside";
  fs::create_directories(dir);
  fs::create_directories(outside);
  write_file(outside / "victim", "precious");
  ::chmod((outside / "victim").c_str(), 0444);
  fs::create_symlink(outside / "victim", dir / "data");
  fs::create_symlink(outside / "not-yet", dir / "dangling");
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  const auto before = tree(outside);
  auto dirfd = open_dir(dir);

  CHECK_ERROR(td::open_file_at(dirfd.get(), "data", O_RDWR | O_CREAT, 0600, dir.string()), ErrorCode::Io,
              "symbolic link", "data");
  CHECK_ERROR(td::open_file_at(dirfd.get(), "data", O_RDONLY, 0, dir.string()), ErrorCode::Io, "symbolic link");
  CHECK_ERROR(td::open_file_at(dirfd.get(), "dangling", O_RDWR | O_CREAT, 0600, dir.string()), ErrorCode::Io,
              "symbolic link");
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_ERROR(td::open_file_at(dirfd.get(), "fifo", O_RDONLY, 0, dir.string()), ErrorCode::Io, "not a regular file");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK(tree(outside) == before);
  CHECK_FALSE(fs::exists(outside / "not-yet"));

  const mode_t old_umask = ::umask(0);
  auto created = td::open_file_at(dirfd.get(), "new", O_RDWR | O_CREAT, 0600, dir.string());
  ::umask(old_umask);
  REQUIRE(created);
  struct stat st {};
  REQUIRE(::fstat(created->get(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK_ERROR(td::open_file_at(dirfd.get(), "absent", O_RDONLY, 0, dir.string()), ErrorCode::NotFound);
}

TEST_CASE("fs_util: write_file_atomically_at replaces a symlink at the name instead of writing through it",
          "[fs_util]") {
  TempDir tmp;
  const fs::path dir = tmp.path() / "dir";
  const fs::path outside = tmp.path() / "outside";
  fs::create_directories(dir);
  write_file(outside / "victim", "precious");
  fs::create_symlink(outside / "victim", dir / "meta.json");
  const auto before = tree(outside);
  auto dirfd = open_dir(dir);
  auto w = td::write_file_atomically_at(dirfd.get(), "meta.json", "{}\n", 0600, dir.string());
  INFO((w ? std::string() : w.error().message));
  REQUIRE(w);
  CHECK(tree(outside) == before);
  CHECK(fs::is_regular_file(fs::symlink_status(dir / "meta.json")));
  CHECK(tftest::try_read_file(dir / "meta.json") == "{}\n");
  struct stat st {};
  REQUIRE(::stat((dir / "meta.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  CHECK_ERROR(td::write_file_atomically_at(dirfd.get(), "../x", "", 0600, dir.string()), ErrorCode::InvalidArgument);
}

TEST_CASE("fs_util: open_file_within follows links that stay inside the root (the Hugging Face cache's "
          "snapshot links) and refuses any that lead outside", "[fs_util]") {
  TempDir tmp;
  const fs::path repo = tmp.path() / "hub" / "models--org--name";
  const fs::path outside = tmp.path() / "outside";
  const std::string sha(64, 'a');
  write_file(repo / "blobs" / sha, "inside bytes");
  write_file(outside / "secret", "outside bytes");
  fs::create_directories(repo / "snapshots" / "c1" / "sub");
  fs::create_symlink("../../blobs/" + sha, repo / "snapshots" / "c1" / "model.safetensors");
  fs::create_symlink("../../../blobs/" + sha, repo / "snapshots" / "c1" / "sub" / "deep.safetensors");
  fs::create_symlink("../../../../outside/secret", repo / "snapshots" / "c1" / "escape");
  fs::create_symlink(outside / "secret", repo / "snapshots" / "c1" / "absolute");
  fs::create_directory_symlink("../../../outside", repo / "snapshots" / "c1" / "dirlink");
  fs::create_symlink("loop", repo / "snapshots" / "c1" / "loop");
  fs::create_directory_symlink("../..", repo / "snapshots" / "c2");  // snapshots/c2 -> the repo's parent
  auto root = open_dir(repo);

  std::string resolved;
  auto in = td::open_file_within(root.get(), "snapshots/c1/model.safetensors", repo.string(), &resolved);
  INFO((in ? std::string() : in.error().message));
  REQUIRE(in);
  CHECK(read_fd(in->get()) == "inside bytes");
  CHECK(resolved == "blobs/" + sha);
  auto deep = td::open_file_within(root.get(), "snapshots/c1/sub/deep.safetensors", repo.string(), &resolved);
  REQUIRE(deep);
  CHECK(resolved == "blobs/" + sha);

  CHECK_ERROR(td::open_file_within(root.get(), "snapshots/c1/escape", repo.string()), ErrorCode::Io, "outside");
  CHECK_ERROR(td::open_file_within(root.get(), "snapshots/c1/absolute", repo.string()), ErrorCode::Io, "outside");
  CHECK_ERROR(td::open_file_within(root.get(), "snapshots/c1/dirlink/secret", repo.string()), ErrorCode::Io, "outside");
  CHECK_ERROR(td::open_file_within(root.get(), "snapshots/c1/loop", repo.string()), ErrorCode::Io, "too many");
  CHECK_ERROR(td::open_file_within(root.get(), "snapshots/c2/outside/secret", repo.string()), ErrorCode::Io, "outside");
  CHECK_ERROR(td::open_file_within(root.get(), "../outside/secret", repo.string()), ErrorCode::InvalidArgument);
  CHECK_ERROR(td::open_file_within(root.get(), "snapshots/c1/none", repo.string()), ErrorCode::NotFound);
  CHECK_ERROR(td::open_file_within(root.get(), "snapshots/c1", repo.string()), ErrorCode::Io, "directory");
}

TEST_CASE("fs_util: remove_tree_at removes links, never what they point to", "[fs_util]") {
  TempDir tmp;
  const fs::path dir = tmp.path() / "dir";
  const fs::path outside = tmp.path() / "outside";
  write_file(outside / "keep" / "file", "precious");
  write_file(dir / "victim" / "data", "x");
  fs::create_directory_symlink(outside / "keep", dir / "victim" / "linkdir");
  fs::create_symlink(outside / "keep" / "file", dir / "victim" / "linkfile");
  fs::create_directory_symlink(outside, dir / "top-link");
  const auto before = tree(outside);
  auto dirfd = open_dir(dir);
  REQUIRE(td::remove_tree_at(dirfd.get(), "victim", dir.string()));
  REQUIRE(td::remove_tree_at(dirfd.get(), "top-link", dir.string()));
  CHECK(td::remove_tree_at(dirfd.get(), "absent", dir.string()));
  CHECK(fs::is_empty(dir));
  CHECK(tree(outside) == before);
}

TEST_CASE("fs_util: open_root_dir creates the root and parents, refuses a root that is a symlink", "[fs_util]") {
  TempDir tmp;
  auto made = td::open_root_dir((tmp.path() / "x" / "y" / "cache").string(), true, 0700);
  REQUIRE(made);
  struct stat st {};
  REQUIRE(::stat((tmp.path() / "x" / "y" / "cache").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0700);
  fs::create_directory_symlink(tmp.path() / "x", tmp.path() / "link");
  CHECK_ERROR(td::open_root_dir((tmp.path() / "link").string(), true, 0700), ErrorCode::Io, "symbolic link",
              "link");
  CHECK(td::open_root_dir((tmp.path() / "link" / "y").string(), false, 0700));  // links above are the user's
  CHECK_ERROR(td::open_root_dir((tmp.path() / "none").string(), false, 0700), ErrorCode::NotFound);
}

TEST_CASE("fs_util: current_umask reads the umask without changing it", "[fs_util]") {
  const mode_t old = ::umask(027);
  CHECK(td::current_umask() == 027);
  CHECK(td::current_umask() == 027);
  ::umask(old);
  CHECK(td::current_umask() == old);
}
