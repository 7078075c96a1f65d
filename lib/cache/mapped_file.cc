// SPDX-License-Identifier: Apache-2.0
#include "cache/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace tensorfetch::detail {

namespace {

std::uint64_t page_size() {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(sys_error(path, "cannot open", errno));
  return map_owned(std::move(fd), path);
}

Result<MappedFile> MappedFile::open_within(const std::string& root_in, const std::string& path) {
  if (root_in.empty()) return open(path);
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (!path.starts_with(root + "/")) return fail(ErrorCode::Io, path + ": not inside " + root + "; refused");
  UniqueFd rootfd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rootfd) return fail(sys_error(root, "cannot open directory", errno));
  auto fd = open_file_within(rootfd.get(), std::string_view(path).substr(root.size() + 1), root);
  if (!fd) return fail(fd.error());
  return map_owned(std::move(*fd), path);
}

Result<MappedFile> MappedFile::map_fd(int fd, const std::string& path) {
  UniqueFd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!own) return fail(sys_error(path, "cannot duplicate descriptor", errno));
  return map_owned(std::move(own), path);
}

Result<MappedFile> MappedFile::map_owned(UniqueFd fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(sys_error(path, "cannot stat", errno));
  if (!S_ISREG(st.st_mode)) return fail(ErrorCode::Io, path + ": not a regular file");
  MappedFile out;
  out.size_ = static_cast<std::size_t>(st.st_size);
  if (out.size_ > 0) {
    void* p = ::mmap(nullptr, out.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) return fail(sys_error(path, "cannot map", errno));
    out.data_ = p;
  }
  out.fd_ = std::move(fd);
  return out;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : fd_(std::move(other.fd_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

Result<PrivateBytes> map_private(int fd, ByteRange range, const std::string& path) {
  if (range.length == 0) return PrivateBytes{};
  const std::uint64_t start = range.offset & ~(page_size() - 1);  // mmap offsets are page-aligned
  const auto length = static_cast<std::size_t>(range.end() - start);
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd,
                   static_cast<off_t>(start));
  if (p == MAP_FAILED) {
    const int err = errno;
    std::string what = "cannot map bytes " + std::to_string(range.offset) + "-" + std::to_string(range.end()) +
                       " privately (copy-on-write)";
    if (err == ENOMEM) what += " (too many mappings? see vm.max_map_count)";
    return fail(sys_error(path, what, err));
  }
  std::shared_ptr<void> owner(p, [length](void* q) { ::munmap(q, length); });
  return PrivateBytes{std::span(static_cast<std::byte*>(p) + (range.offset - start), static_cast<std::size_t>(range.length)),
                      std::move(owner)};
}

ByteRange page_hull(ByteRange range, std::uint64_t size) {
  const std::uint64_t page = page_size();
  const std::uint64_t begin = range.offset & ~(page - 1);
  const std::uint64_t end = std::min(size, (range.end() + page - 1) & ~(page - 1));
  return ByteRange{begin, end > begin ? end - begin : 0};
}

Result<PrivateBytes> PrivateMaps::get(std::size_t file, int fd, std::uint64_t size, ByteRange range,
                                      const std::string& path) {
  if (range.length == 0) return PrivateBytes{};
  if (range.end() > size) return fail(ErrorCode::Io, path + ": bytes " + std::to_string(range.offset) + "-" +
                                                         std::to_string(range.end()) + " lie beyond the file");
  MutexLock lock(mutex_);
  if (maps_.size() <= file) maps_.resize(file + 1);
  PrivateBytes& whole = maps_[file];
  if (!whole.owner) {
    auto mapped = map_private(fd, ByteRange{0, size}, path);
    if (!mapped) return fail(mapped.error());
    whole = std::move(*mapped);
  }
  if (range.end() > whole.bytes.size()) {
    return fail(ErrorCode::Io, path + ": bytes " + std::to_string(range.offset) + "-" + std::to_string(range.end()) +
                                   " lie beyond the file as first mapped (" + std::to_string(whole.bytes.size()) + " bytes)");
  }
  return PrivateBytes{whole.bytes.subspan(range.offset, range.length), whole.owner};
}

}  // namespace tensorfetch::detail
