// SPDX-License-Identifier: Apache-2.0
#include "files.hpp"

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace tftest {

TempDir::TempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = (fs::path(tmp && *tmp ? tmp : "/tmp") / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) {
    throw std::runtime_error("mkdtemp " + templ + ": " + std::strerror(errno));
  }
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  // Complete cache blobs (and directories made read-only by a test) cannot be removed as they
  // are: give the owner every permission first.
  for (auto it = fs::recursive_directory_iterator(path_, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_symlink(ec)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
  }
  fs::remove_all(path_, ec);
}

ScopedTmpfs::ScopedTmpfs(fs::path dir, const std::string& size) : dir_(std::move(dir)) {
  fs::create_directories(dir_);
  const std::string opts = "size=" + size;
  if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
    mounted_ = true;
  } else {
    error_ = std::strerror(errno);
  }
}

ScopedTmpfs::~ScopedTmpfs() {
  if (mounted_ && ::umount2(dir_.c_str(), 0) != 0) ::umount2(dir_.c_str(), MNT_DETACH);
}

std::optional<std::string> try_read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return std::nullopt;
  return bytes;
}

std::string read_file(const fs::path& path) {
  auto bytes = try_read_file(path);
  if (!bytes) throw std::runtime_error("cannot read " + path.string() + ": " + std::strerror(errno));
  return std::move(*bytes);
}

void write_file(const fs::path& path, std::string_view bytes) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void copy_files(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing);
  }
}

std::vector<fs::path> temp_files(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().find(".tmp-") != std::string::npos) out.push_back(it->path());
  }
  return out;
}

std::optional<fs::path> reference_dir() {
  const char* env = std::getenv("TENSORFETCH_REFERENCE_DIR");
  if (env == nullptr || *env == '\0') return std::nullopt;
  fs::path dir(env);
  std::error_code ec;
  if (!fs::is_regular_file(dir / "MANIFEST.json", ec)) return std::nullopt;
  return dir;
}

}  // namespace tftest
