// SPDX-License-Identifier: Apache-2.0
#include "cache/mapped_file.h"

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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(io_error(path, "cannot open", errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return fail(io_error(path, "cannot stat", err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(ErrorCode::Io, path + ": not a regular file");
  }
  MappedFile out;
  out.size_ = static_cast<std::size_t>(st.st_size);
  if (out.size_ > 0) {
    void* p = ::mmap(nullptr, out.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return fail(io_error(path, "cannot map", err));
    }
    out.data_ = p;
  }
  ::close(fd);  // the mapping keeps the file alive
  return out;
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
