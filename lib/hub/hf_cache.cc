// SPDX-License-Identifier: Apache-2.0
#include "hub/hf_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "base/text.h"
#include "hub/hub_errors.h"

namespace tensorfetch::detail {

namespace {

// True when a regular file (not a link) of `size` bytes is `name` in `dirfd`.
bool has_file_of_size(int dirfd, const std::string& name, std::uint64_t size) {
  struct stat st {};
  return ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
         static_cast<std::uint64_t>(st.st_size) == size;
}

}  // namespace

std::string hf_repo_dir(const std::string& hub_cache, const HubRef& hub) {
  if (hub_cache.empty()) return {};
  std::string name = hub.repo_id;
  for (std::size_t p = name.find('/'); p != std::string::npos; p = name.find('/', p + 2)) name.replace(p, 1, "--");
  return hub_cache + "/" + (hub.dataset ? "datasets--" : "models--") + name;
}

std::string hf_snapshot_path(const std::string& commit, const std::string& path) {
  return "snapshots/" + commit + "/" + path;
}

std::string hf_blob_path(const std::string& name) { return "blobs/" + name; }

Result<UniqueFd> open_hf_repo(const std::string& repo_dir) {
  UniqueFd fd(::open(repo_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return fail(sys_error(repo_dir, "cannot open directory", errno));
  return fd;
}

Result<std::optional<std::string>> read_hf_ref(int repo, const std::string& repo_dir, const std::string& revision) {
  auto ref = open_file_within(repo, "refs/" + revision, repo_dir);
  if (!ref) return std::optional<std::string>();
  char buf[128];
  const ssize_t n = ::pread(ref->get(), buf, sizeof buf, 0);
  std::string commit(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
  if (!is_commit_id(commit)) {
    return fail(ErrorCode::Io, repo_dir + "/refs/" + revision + ": holds " + quote_name(commit) +
                                   ", not a commit id (40 lower-case hex digits)");
  }
  return std::optional<std::string>(std::move(commit));
}

bool has_hf_snapshot(int repo, const std::string& commit) {
  struct stat st {};
  return is_commit_id(commit) &&
         ::fstatat(repo, ("snapshots/" + commit).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

Result<HfCacheWriter> HfCacheWriter::open(const std::string& repo_dir) {
  HfCacheWriter w;
  const mode_t um = current_umask();
  w.dir_mode_ = 0777 & ~um;
  w.file_mode_ = 0666 & ~um;
  w.root_path_ = repo_dir;
  auto fd = open_root_dir(repo_dir, true, w.dir_mode_);
  if (!fd) return fail(fd.error().with_context("the Hugging Face cache"));
  w.root_ = std::move(*fd);
  return w;
}

Result<UniqueFd> HfCacheWriter::dir(const std::string& rel) const {
  return open_dir_at(root_.get(), rel, root_path_, true, dir_mode_);
}

Result<void> HfCacheWriter::blob(const std::string& name, const std::string& source, int source_fd,
                                 std::uint64_t size) const {
  auto blobs = dir("blobs");
  if (!blobs) return fail(blobs.error());
  if (has_file_of_size(blobs->get(), name, size)) return {};
  return replace_with_link_or_copy_at(blobs->get(), name, source, source_fd, size, true, file_mode_,
                                      root_path_ + "/blobs");
}

Result<void> HfCacheWriter::small_blob(const std::string& name, const std::string& text) const {
  auto blobs = dir("blobs");
  if (!blobs) return fail(blobs.error());
  if (has_file_of_size(blobs->get(), name, text.size())) return {};
  return write_file_atomically_at(blobs->get(), name, text, file_mode_, root_path_ + "/blobs");
}

Result<void> HfCacheWriter::link(const std::string& commit, const std::string& path, const std::string& name) const {
  if (auto r = check_relative_path(path, "file name in the repo"); !r) return r;
  const auto slash = path.rfind('/');
  const std::string parent = slash == std::string::npos ? "snapshots/" + commit : hf_snapshot_path(commit, path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  auto d = dir(parent);
  if (!d) return fail(d.error());
  std::string target;
  for (std::size_t i = 0, n = 2 + static_cast<std::size_t>(std::count(path.begin(), path.end(), '/')); i < n; ++i) {
    target += "../";
  }
  target += hf_blob_path(name);
  return replace_with_symlink_at(d->get(), base, target, root_path_ + "/" + parent);
}

Result<void> HfCacheWriter::ref(const std::string& revision, const std::string& commit) const {
  if (auto r = check_revision(revision); !r) return r;
  const auto slash = revision.rfind('/');
  auto d = dir(slash == std::string::npos ? std::string("refs") : "refs/" + revision.substr(0, slash));
  if (!d) return fail(d.error());
  return write_file_atomically_at(d->get(), slash == std::string::npos ? revision : revision.substr(slash + 1), commit,
                                  file_mode_, root_path_ + "/refs");
}

}  // namespace tensorfetch::detail
