// SPDX-License-Identifier: Apache-2.0
#include "cache/mapped_file.h"

#include "base/fs.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace tensorfetch::detail {

namespace {

Error io_error(const std::string& path, const char* what, int err) {
  return Error{err == ENOENT ? ErrorCode::NotFound : ErrorCode::Io,
               path + ": " + what + ": " + std::strerror(err)};
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(io_error(path, "cannot open", errno));
  return map_fd(fd.get(), path);
}

Result<MappedFile> MappedFile::open_within(const std::string& root_in, const std::string& path) {
  if (root_in.empty()) return open(path);
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (!path.starts_with(root + "/")) return fail(ErrorCode::Io, path + ": not inside " + root + "; refused");
  UniqueFd rootfd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rootfd) return fail(io_error(root, "cannot open directory", errno));
  auto fd = open_file_within(rootfd.get(), std::string_view(path).substr(root.size() + 1), root);
  if (!fd) return fail(fd.error());
  return map_fd(fd->get(), path);
}

Result<MappedFile> MappedFile::map_fd(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(io_error(path, "cannot stat", errno));
  if (!S_ISREG(st.st_mode)) return fail(ErrorCode::Io, path + ": not a regular file");
  MappedFile out;
  out.size_ = static_cast<std::size_t>(st.st_size);
  if (out.size_ > 0) {
    void* p = ::mmap(nullptr, out.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) return fail(io_error(path, "cannot map", errno));
    out.data_ = p;
  }
  return out;  // the mapping keeps the file alive
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace tensorfetch::detail
