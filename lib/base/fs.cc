// SPDX-License-Identifier: Apache-2.0
#include "base/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "base/text.h"

namespace tensorfetch::detail {

namespace {

std::string join(const std::string& dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  return dir.back() == '/' ? dir + std::string(name) : dir + "/" + std::string(name);
}

std::string octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// The error for a name that O_NOFOLLOW refused or that is not what was expected.
Error not_followed(int dirfd, std::string_view name, const std::string& path, const char* expected) {
  struct stat st {};
  if (::fstatat(dirfd, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    return Error{ErrorCode::Io, quote_name(path) +
                                    " is a symbolic link; tensorfetch does not follow links where it writes or "
                                    "reads its own files (one planted by someone else would redirect them): "
                                    "remove the link"};
  }
  if (::fstatat(dirfd, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
    return Error{ErrorCode::Io, quote_name(path) + " is a directory, not a " + expected};
  }
  return Error{ErrorCode::Io, quote_name(path) + " is not a " + expected + " (a device, FIFO or socket?); remove it"};
}

std::vector<std::string_view> split(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const auto slash = path.find('/', start);
    out.push_back(path.substr(start, slash == std::string_view::npos ? path.npos : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

}  // namespace

UniqueFd::UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(std::exchange(other.fd_, -1));
  return *this;
}

UniqueFd::~UniqueFd() { reset(); }

int UniqueFd::close() noexcept {
  const int fd = std::exchange(fd_, -1);
  return fd >= 0 ? ::close(fd) : 0;
}

int UniqueFd::release() noexcept { return std::exchange(fd_, -1); }

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Error sys_error(const std::string& path, std::string_view what, int err) {
  std::string msg = path + ": " + std::string(what) + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) msg += " (the disk is full)";
  return Error{err == ENOENT ? ErrorCode::NotFound : ErrorCode::Io, msg};
}

bool lock_file(int fd, int op) noexcept {
  while (::flock(fd, op) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

Result<std::vector<std::string>> list_dir_at(int dirfd, std::string_view name, const std::string& shown) {
  UniqueFd fd(::openat(dirfd, std::string(name).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail(sys_error(shown, "cannot open directory", errno));
  DIR* d = ::fdopendir(fd.get());
  if (!d) return fail(sys_error(shown, "cannot list", errno));
  (void)fd.release();  // now owned by `d`
  struct CloseDir {
    void operator()(DIR* dir) const noexcept { ::closedir(dir); }
  };
  const std::unique_ptr<DIR, CloseDir> owner(d);
  std::vector<std::string> out;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string_view n(e->d_name);
    if (n != "." && n != "..") out.emplace_back(n);
  }
  if (errno != 0) return fail(sys_error(shown, "cannot list", errno));
  return out;
}

mode_t current_umask() noexcept {
  // umask(2) cannot be read without setting it, which would race with other threads creating
  // files; Linux reports it in /proc/self/status.
  const UniqueFd fd(::open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  if (!fd) return 022;
  char buf[4096];
  const ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return 022;
  buf[n] = '\0';
  const char* p = std::strstr(buf, "Umask:");
  if (!p) return 022;
  return static_cast<mode_t>(std::strtoul(p + 6, nullptr, 8) & 0777);
}

Modes modes_for(Sharing sharing) noexcept {
  if (sharing == Sharing::Group) return Modes{02770, 0660, 0440};
  return Modes{0700, 0600, 0400};
}

Result<void> check_path_component(std::string_view name, std::string_view what) {
  auto bad = [&](const char* why) {
    return fail(ErrorCode::InvalidArgument, std::string(what) + " " + quote_name(name) + " cannot be used as a file name: " + why);
  };
  if (name.empty()) return bad("it is empty");
  if (name == "." || name == "..") return bad("it is '.' or '..'");
  if (name.size() > 255) return bad("it is longer than 255 bytes");
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/') return bad("it contains '/'");
    if (u < 0x20 || u == 0x7f) return bad("it contains a control character");
  }
  return {};
}

Result<void> check_relative_path(std::string_view path, std::string_view what) {
  if (path.empty()) return fail(ErrorCode::InvalidArgument, std::string(what) + " is empty");
  if (path.front() == '/') {
    return fail(ErrorCode::InvalidArgument, std::string(what) + " " + quote_name(path) + " is an absolute path");
  }
  for (auto segment : split(path)) {
    if (auto r = check_path_component(segment, what); !r) {
      return fail(ErrorCode::InvalidArgument, r.error().message + " (in " + quote_name(path) + ")");
    }
  }
  return {};
}

Result<void> check_trusted(int fd, const std::string& shown, Sharing sharing) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(sys_error(shown, "cannot stat", errno));
  const char* kind = S_ISDIR(st.st_mode) ? "directory" : "file";
  const uid_t me = ::geteuid();
  if (sharing == Sharing::Private && st.st_uid != me && st.st_uid != 0) {
    return fail(ErrorCode::Io, quote_name(shown) + ": refused: this " + kind + " is owned by uid " +
                                   std::to_string(st.st_uid) + ", not by you (uid " + std::to_string(me) +
                                   "), so its owner could change what tensorfetch reads and writes there. Use a "
                                   "cache of your own (--cache-dir, TENSORFETCH_CACHE), or, for a cache shared by "
                                   "a group, --shared-cache (TENSORFETCH_SHARED_CACHE=1)");
  }
  if (st.st_mode & S_IWOTH) {
    return fail(ErrorCode::Io, quote_name(shown) + ": refused: this " + kind + " is writable by every user (mode " +
                                   octal(st.st_mode) + "), so anyone could change what tensorfetch reads and "
                                   "writes there. Fix: chmod o-w " + shown);
  }
  if (sharing == Sharing::Private && (st.st_mode & S_IWGRP)) {
    return fail(ErrorCode::Io, quote_name(shown) + ": refused: this " + kind + " is writable by its group (mode " +
                                   octal(st.st_mode) + "). Fix: chmod g-w " + shown +
                                   ", or, for a cache shared by a group, use --shared-cache "
                                   "(TENSORFETCH_SHARED_CACHE=1)");
  }
  return {};
}

Result<UniqueFd> open_root_dir(const std::string& path_in, bool create, mode_t mode) {
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty()) return fail(ErrorCode::InvalidArgument, "empty directory path");
  const auto slash = path.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name == "." || name == ".." || path == "/") {
    // No last component to check: open as named.
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fail(sys_error(path, "cannot open directory", errno));
    return UniqueFd(fd);
  }
  UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd && errno == ENOENT && create) {
    auto p = open_root_dir(parent, true, mode);
    if (!p) return fail(p.error());
    parent_fd = std::move(*p);
  }
  if (!parent_fd) return fail(sys_error(parent, "cannot open directory", errno));
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::openat(parent_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) return UniqueFd(fd);
    const int err = errno;
    if (err == ENOENT && create && attempt == 0) {
      if (::mkdirat(parent_fd.get(), name.c_str(), mode) != 0 && errno != EEXIST) {
        return fail(sys_error(path, "cannot create directory", errno));
      }
      UniqueFd made(::openat(parent_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (made) {
        ::fchmod(made.get(), mode);  // exactly: the umask does not decide who may write here
        return made;
      }
      continue;
    }
    if (err == ELOOP || err == ENOTDIR) return fail(not_followed(parent_fd.get(), name, path, "directory"));
    return fail(sys_error(path, "cannot open directory", err));
  }
  return fail(sys_error(path, "cannot open directory", errno));
}

Result<UniqueFd> open_dir_at(int dirfd, std::string_view rel, const std::string& shown, bool create, mode_t mode) {
  if (auto r = check_relative_path(rel, "directory"); !r) return fail(r.error());
  UniqueFd current;
  int at = dirfd;
  std::string path = shown;
  for (auto segment : split(rel)) {
    const std::string name(segment);
    path = join(path, name);
    int fd = ::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(at, name.c_str(), mode) == 0) {
        fd = ::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) ::fchmod(fd, mode);
      } else if (errno == EEXIST) {
        fd = ::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      } else {
        return fail(sys_error(path, "cannot create directory", errno));
      }
    }
    if (fd < 0) {
      const int err = errno;
      if (err == ELOOP || err == ENOTDIR) return fail(not_followed(at, name, path, "directory"));
      return fail(sys_error(path, "cannot open directory", err));
    }
    current.reset(fd);
    at = current.get();
  }
  return current;
}

Result<UniqueFd> open_file_at(int dirfd, std::string_view name_in, int flags, mode_t mode, const std::string& shown) {
  const std::string name(name_in);
  const std::string path = join(shown, name);
  if (auto r = check_path_component(name, "file name"); !r) return fail(r.error());
  const int always = O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  bool created = false;
  int fd = -1;
  if ((flags & O_CREAT) && !(flags & O_EXCL)) {
    // Made here (then given exactly `mode`) or already there: O_EXCL tells which.
    fd = ::openat(dirfd, name.c_str(), flags | O_EXCL | always, mode);
    created = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = ::openat(dirfd, name.c_str(), (flags & ~O_CREAT) | always);
  } else {
    fd = ::openat(dirfd, name.c_str(), flags | always, mode);
    created = fd >= 0 && (flags & O_CREAT);
  }
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return fail(not_followed(dirfd, name, path, "regular file"));
    return fail(sys_error(path, "cannot open", err));
  }
  UniqueFd out(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(sys_error(path, "cannot stat", errno));
  if (!S_ISREG(st.st_mode)) return fail(not_followed(dirfd, name, path, "regular file"));
  // O_NONBLOCK has no effect on regular files; clear it anyway for the writes that follow.
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (created) ::fchmod(fd, mode);  // exactly `mode`: the umask does not decide who may write here
  return out;
}

Result<std::string> read_file_at(int dirfd, std::string_view name, std::uint64_t max_bytes, const std::string& shown) {
  auto fd = open_file_at(dirfd, name, O_RDONLY, 0, shown);
  if (!fd) return fail(fd.error());
  const std::string path = join(shown, name);
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd->get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(sys_error(path, "cannot read", errno));
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes) {
      return fail(ErrorCode::Io, path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

namespace {

// Calls `make(tmp)` with unique temporary names beside `name` until one does not exist yet
// (EEXIST: next name); `make` returns 0 or an errno. The name made is left in `tmp`.
template <typename Make>
int make_temp_name(const std::string& name, std::string& tmp, Make&& make) {
  static std::atomic<std::uint64_t> counter{0};
  int err = EEXIST;
  for (int attempt = 0; attempt < 100 && err == EEXIST; ++attempt) {
    tmp = name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    err = make(tmp);
  }
  return err;
}

// Renames `tmp` over `name` in `dirfd` and fsyncs the directory; removes `tmp` on failure.
Result<void> rename_into_place(int dirfd, const std::string& tmp, const std::string& name, const std::string& path) {
  if (::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dirfd, tmp.c_str(), 0);
    return fail(sys_error(path, "cannot rename into place", err));
  }
  ::fsync(dirfd);  // best effort: some file systems refuse fsync on a directory
  return {};
}

}  // namespace

Result<PendingFile> PendingFile::create(int dirfd, std::string_view name, mode_t mode, const std::string& shown) {
  if (auto r = check_path_component(name, "file name"); !r) return fail(r.error());
  PendingFile f;
  f.name_ = std::string(name);
  f.path_ = join(shown, f.name_);
  f.dir_.reset(::fcntl(dirfd, F_DUPFD_CLOEXEC, 0));
  if (!f.dir_) return fail(sys_error(shown, "cannot open directory", errno));
  const int err = make_temp_name(f.name_, f.tmp_, [&](const std::string& tmp) {
    f.fd_.reset(::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    return f.fd_ ? 0 : errno;
  });
  if (err != 0) {
    const std::string tmp_path = join(shown, f.tmp_);
    f.tmp_.clear();
    return fail(sys_error(tmp_path, "cannot create", err));
  }
  ::fchmod(f.fd_.get(), mode);  // exactly `mode`, past the umask
  return f;
}

Result<PendingFile> PendingFile::create(const std::string& path, mode_t mode) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  UniqueFd dirfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dirfd) return fail(sys_error(dir, "cannot open directory", errno));
  auto f = create(dirfd.get(), name, mode, dir);
  if (f) f->path_ = path;
  return f;
}

PendingFile::PendingFile(PendingFile&& other) noexcept
    : dir_(std::move(other.dir_)),
      fd_(std::move(other.fd_)),
      name_(std::move(other.name_)),
      tmp_(std::exchange(other.tmp_, std::string())),
      path_(std::move(other.path_)),
      finished_(other.finished_),
      committed_(other.committed_) {}

PendingFile::~PendingFile() {
  fd_.reset();
  if (!committed_ && !tmp_.empty() && dir_) ::unlinkat(dir_.get(), tmp_.c_str(), 0);
}

Result<void> PendingFile::write(std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(sys_error(path_, "cannot write", errno));
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Result<void> PendingFile::copy_from(int source_fd, std::uint64_t size, const std::string& source_shown) {
  std::vector<char> buf;
  for (std::uint64_t done = 0; done < size;) {
    off_t in_off = static_cast<off_t>(done);
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(size - done, 1 << 30));
    ssize_t n = ::copy_file_range(source_fd, &in_off, fd_.get(), nullptr, want, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // File systems without copy_file_range (or across devices on old kernels): read/write.
      buf.resize(1 << 20);
      n = ::pread(source_fd, buf.data(), std::min<std::size_t>(buf.size(), want), static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return fail(sys_error(source_shown, "cannot read", n < 0 ? errno : EIO));
      if (auto r = write(std::string_view(buf.data(), static_cast<std::size_t>(n))); !r) return r;
    }
    done += static_cast<std::uint64_t>(n);
  }
  return {};
}

Result<void> PendingFile::finish() {
  if (finished_) return {};
  if (::fsync(fd_.get()) != 0) return fail(sys_error(path_, "fsync failed", errno));
  if (fd_.close() != 0) return fail(sys_error(path_, "close failed", errno));
  finished_ = true;
  return {};
}

Result<void> PendingFile::commit() {
  if (auto r = finish(); !r) return r;
  auto r = rename_into_place(dir_.get(), tmp_, name_, path_);
  committed_ = true;  // renamed, or removed by rename_into_place
  return r;
}

Result<void> write_file_atomically_at(int dirfd, std::string_view name, std::string_view text, mode_t mode,
                                      const std::string& shown) {
  auto file = PendingFile::create(dirfd, name, mode, shown);
  if (!file) return fail(file.error());
  if (auto r = file->write(text); !r) return r;
  return file->commit();
}

Result<void> write_file_atomically(const std::string& path, std::string_view text) {
  auto file = PendingFile::create(path, 0644 & ~current_umask());
  if (!file) return fail(file.error());
  if (auto r = file->write(text); !r) return r;
  return file->commit();
}

Result<void> replace_with_link_or_copy_at(int dirfd, std::string_view name_in, const std::string& source_path,
                                          int source_fd, std::uint64_t size, bool try_link, mode_t mode,
                                          const std::string& shown) {
  const std::string name(name_in);
  if (auto r = check_path_component(name, "file name"); !r) return fail(r.error());
  if (try_link) {
    std::string tmp;
    const int err = make_temp_name(name, tmp, [&](const std::string& t) {
      return ::linkat(AT_FDCWD, source_path.c_str(), dirfd, t.c_str(), 0) == 0 ? 0 : errno;
    });
    if (err == 0) return rename_into_place(dirfd, tmp, name, join(shown, name));
    // EXDEV (another file system), EPERM (no hard links there), ...: a copy.
  }
  auto file = PendingFile::create(dirfd, name, mode, shown);
  if (!file) return fail(file.error());
  if (auto r = file->copy_from(source_fd, size, source_path); !r) return r;
  return file->commit();
}

Result<void> replace_with_symlink_at(int dirfd, std::string_view name_in, const std::string& target,
                                     const std::string& shown) {
  const std::string name(name_in);
  if (auto r = check_path_component(name, "file name"); !r) return fail(r.error());
  std::string tmp;
  const int err = make_temp_name(name, tmp, [&](const std::string& t) {
    return ::symlinkat(target.c_str(), dirfd, t.c_str()) == 0 ? 0 : errno;
  });
  if (err != 0) return fail(sys_error(join(shown, tmp), "cannot create symlink", err));
  return rename_into_place(dirfd, tmp, name, join(shown, name));
}

Result<UniqueFd> open_file_within(int rootfd, std::string_view rel, const std::string& shown, std::string* resolved) {
  if (auto r = check_relative_path(rel, "path"); !r) return fail(r.error());
  std::deque<std::string> pending;
  for (auto s : split(rel)) pending.emplace_back(s);
  std::vector<UniqueFd> stack;        // directories below the root, as opened so far
  std::vector<std::string> names;     // their names (for messages)
  int links = 0;
  auto here = [&] {
    std::string p = shown;
    for (const auto& n : names) p = join(p, n);
    return p;
  };
  auto top = [&] { return stack.empty() ? rootfd : stack.back().get(); };
  while (!pending.empty()) {
    const std::string name = std::move(pending.front());
    pending.pop_front();
    if (name.empty() || name == ".") continue;
    if (name == "..") {
      if (stack.empty()) {
        return fail(ErrorCode::Io, quote_name(join(shown, std::string(rel))) + ": a symbolic link on the way leads "
                                       "outside " + quote_name(shown) + "; refused");
      }
      stack.pop_back();
      names.pop_back();
      continue;
    }
    char target[4096];
    const ssize_t n = ::readlinkat(top(), name.c_str(), target, sizeof target - 1);
    if (n >= 0) {
      if (++links > 40) return fail(ErrorCode::Io, quote_name(join(here(), name)) + ": too many symbolic links");
      const std::string_view t(target, static_cast<std::size_t>(n));
      if (t.empty() || t.front() == '/') {
        return fail(ErrorCode::Io, quote_name(join(here(), name)) + " is a symbolic link to " + quote_name(t) +
                                       ", outside " + quote_name(shown) + "; refused");
      }
      auto parts = split(t);
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) pending.emplace_front(*it);
      continue;
    }
    const int err = errno;
    if (err != EINVAL) return fail(sys_error(join(here(), name), err == ENOENT ? "cannot open" : "cannot read", err));
    if (pending.empty()) {
      if (resolved) {
        resolved->clear();
        for (const auto& n : names) *resolved += n + "/";
        *resolved += name;
      }
      return open_file_at(top(), name, O_RDONLY, 0, here());
    }
    UniqueFd dir(::openat(top(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) {
      const int err = errno;
      if (err == ELOOP || err == ENOTDIR) return fail(not_followed(top(), name, join(here(), name), "directory"));
      return fail(sys_error(join(here(), name), "cannot open directory", err));
    }
    stack.push_back(std::move(dir));
    names.push_back(name);
  }
  return fail(ErrorCode::Io, quote_name(join(shown, std::string(rel))) + " names a directory, not a file");
}

namespace {

// Directories nested deeper than this under the tree's top are not removed (the cache's trees
// are 2 levels deep): the walk below recurses once per level.
constexpr int kMaxTreeDepth = 32;

Result<void> remove_tree_at(int dirfd, std::string_view name_in, const std::string& shown, int depth) {
  const std::string name(name_in);
  const std::string path = join(shown, name);
  if (depth > kMaxTreeDepth) {
    return fail(ErrorCode::Io, quote_name(path) + ": directories nested deeper than " + std::to_string(kMaxTreeDepth) +
                                   " levels; not removed");
  }
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return fail(sys_error(path, "cannot stat", errno));
  }
  if (S_ISDIR(st.st_mode)) {
    auto entries = list_dir_at(dirfd, name, path);
    if (!entries) return fail(entries.error());
    UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return fail(sys_error(path, "cannot open directory", errno));
    Result<void> result;
    for (const auto& e : *entries) {
      if (auto r = remove_tree_at(fd.get(), e, path, depth + 1); !r && result) result = r;
    }
    if (!result) return result;
    if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      return fail(sys_error(path, "cannot remove", errno));
    }
    return {};
  }
  if (::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT) return fail(sys_error(path, "cannot remove", errno));
  return {};
}

}  // namespace

Result<void> remove_tree_at(int dirfd, std::string_view name, const std::string& shown) {
  return remove_tree_at(dirfd, name, shown, 0);
}

}  // namespace tensorfetch::detail
