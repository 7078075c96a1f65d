// SPDX-License-Identifier: Apache-2.0
#include "cache/blob.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace tensorfetch::detail {

namespace {

namespace fs = std::filesystem;

Error sys_error(const std::string& path, const std::string& what, int err) {
  std::string msg = path + ": " + what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) msg += " (the disk holding the cache is full)";
  return Error{err == ENOENT ? ErrorCode::NotFound : ErrorCode::Io, msg};
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool is_hex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string unquote_etag(std::string_view etag) {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return std::string(etag);
}

void sync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// An exclusive flock on a lock file, released on destruction.
class LockGuard {
 public:
  static Result<LockGuard> acquire(const std::string& path) {
    LockGuard g;
    g.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (g.fd_ < 0) return fail(sys_error(path, "cannot open lock file", errno));
    while (::flock(g.fd_, LOCK_EX) != 0) {
      if (errno != EINTR) return fail(sys_error(path, "cannot lock", errno));
    }
    return g;
  }
  LockGuard() = default;
  LockGuard(LockGuard&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  LockGuard& operator=(LockGuard&&) = delete;
  ~LockGuard() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }

 private:
  int fd_ = -1;
};

nlohmann::json to_json(const BlobMeta& m) {
  nlohmann::json extents = nlohmann::json::array();
  for (const auto& r : m.extents) extents.push_back({r.offset, r.length});
  return {{"version", 1},
          {"size", m.size},
          {"sha256", m.sha256 ? nlohmann::json(*m.sha256) : nlohmann::json(nullptr)},
          {"url", m.url},
          {"etag", m.etag ? nlohmann::json(*m.etag) : nlohmann::json(nullptr)},
          {"complete", m.complete},
          {"extents", extents}};
}

// A meta.json that cannot be read as written by us is treated as holding nothing: the blob is
// then fetched again, never served from.
std::optional<BlobMeta> parse_meta(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    BlobMeta m;
    m.size = j.at("size").get<std::uint64_t>();
    if (j.contains("sha256") && j["sha256"].is_string()) m.sha256 = j["sha256"].get<std::string>();
    m.url = j.value("url", "");
    if (j.contains("etag") && j["etag"].is_string()) m.etag = j["etag"].get<std::string>();
    m.complete = j.value("complete", false);
    std::vector<ByteRange> ranges;
    for (const auto& e : j.at("extents")) {
      ByteRange r{e.at(0).get<std::uint64_t>(), e.at(1).get<std::uint64_t>()};
      if (r.end() < r.offset || r.end() > m.size) return std::nullopt;
      ranges.push_back(r);
    }
    m.extents = normalize(std::move(ranges));
    if (m.complete && !(m.extents.size() == 1 && m.extents[0] == ByteRange{0, m.size}) && m.size > 0) {
      return std::nullopt;
    }
    return m;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

Result<std::optional<BlobMeta>> load_meta(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (errno == ENOENT) return std::optional<BlobMeta>();
    return fail(sys_error(path, "cannot read", errno));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_meta(ss.str());
}

Result<void> write_meta_file(const std::string& path, const BlobMeta& meta) {
  return write_file_atomically(path, to_json(meta).dump() + "\n");
}

std::string to_hex(const unsigned char* md, unsigned len) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

void punch_out(int fd, std::uint64_t size) {
  if (size > 0) ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(size));
}

}  // namespace

Result<void> write_file_atomically(const std::string& path, std::string_view text) {
  std::ostringstream tmp_name;
  tmp_name << path << ".tmp-" << ::getpid() << "-" << std::this_thread::get_id();
  const std::string tmp = tmp_name.str();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(sys_error(tmp, "cannot create", errno));
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return fail(sys_error(tmp, "cannot write", err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(sys_error(tmp, "fsync failed", err));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail(sys_error(path, "cannot replace", err));
  }
  const auto slash = path.rfind('/');
  sync_dir(slash == std::string::npos ? std::string(".") : path.substr(0, slash == 0 ? 1 : slash));
  return {};
}

std::string default_cache_root() {
  if (auto v = env("TENSORFETCH_CACHE"); !v.empty()) return v;
  if (auto v = env("XDG_CACHE_HOME"); !v.empty()) return v + "/tensorfetch";
  if (auto v = env("HOME"); !v.empty()) return v + "/.cache/tensorfetch";
  return ".tensorfetch-cache";
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  return to_hex(md, len);
}

std::string git_blob_sha1(std::string_view content) {
  const std::string head = "blob " + std::to_string(content.size()) + std::string(1, '\0');
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha1(), nullptr);
  EVP_DigestUpdate(ctx.get(), head.data(), head.size());
  EVP_DigestUpdate(ctx.get(), content.data(), content.size());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return to_hex(md, len);
}

Result<std::string> sha256_of_fd(int fd, std::uint64_t length, const std::string& what) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return fail(ErrorCode::Io, what + ": cannot initialise sha256");
  }
  std::vector<unsigned char> buf(1 << 20);
  std::uint64_t pos = 0;
  while (pos < length) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), length - pos));
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(pos));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(sys_error(what, "read failed", errno));
    }
    if (n == 0) return fail(ErrorCode::Io, what + ": unexpected end of file at byte " + std::to_string(pos));
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(n));
    pos += static_cast<std::uint64_t>(n);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return to_hex(md, len);
}

BlobIdentity blob_identity(std::string_view url, const std::optional<std::string>& etag, std::uint64_t size) {
  if (etag) {
    std::string tag = unquote_etag(*etag);
    for (auto& c : tag) c = static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
    if (is_hex64(tag)) return BlobIdentity{tag, tag};
  }
  std::string_view base = url.substr(0, url.find_first_of("?#"));
  std::string key = std::string(base) + "\n" + (etag ? *etag : std::string()) + "\n" + std::to_string(size);
  return BlobIdentity{"u" + sha256_hex(key).substr(0, 40), std::nullopt};
}

Result<std::unique_ptr<Blob>> Blob::open(const std::string& root, const BlobIdentity& identity, std::uint64_t size,
                                         std::string_view url, const std::optional<std::string>& etag) {
  std::unique_ptr<Blob> b(new Blob());
  b->id_ = identity.id;
  b->size_ = size;
  b->dir_ = root + "/blobs/" + identity.id;
  b->data_path_ = b->dir_ + "/data";
  b->meta_path_ = b->dir_ + "/meta.json";
  b->lock_path_ = b->dir_ + "/lock";
  std::error_code ec;
  fs::create_directories(b->dir_, ec);
  if (ec) return fail(ErrorCode::Io, b->dir_ + ": cannot create cache directory: " + ec.message());
  bool writable = true;
  b->fd_ = ::open(b->data_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (b->fd_ < 0 && errno == EACCES) {  // complete blobs are read-only
    writable = false;
    b->fd_ = ::open(b->data_path_.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (b->fd_ < 0) return fail(sys_error(b->data_path_, "cannot open cache file", errno));
  while (::flock(b->fd_, LOCK_SH) != 0) {
    if (errno != EINTR) return fail(sys_error(b->data_path_, "cannot lock", errno));
  }
  ::utimensat(AT_FDCWD, b->dir_.c_str(), nullptr, 0);  // last used: now
  auto lock = LockGuard::acquire(b->lock_path_);
  if (!lock) return fail(lock.error());
  auto meta = load_meta(b->meta_path_);
  if (!meta) return fail(meta.error());
  if (*meta && (*meta)->size != size) {
    return fail(ErrorCode::Integrity, b->dir_ + ": the cache records a size of " + std::to_string((*meta)->size) +
                                          " bytes, but " + std::string(url) + " has " + std::to_string(size) +
                                          "; remove it with `tensorfetch cache rm " + identity.id + "`");
  }
  if (!writable && !(*meta && (*meta)->complete)) {
    // Read-only but not (any more) recorded complete: it must be writable to be fetched again.
    ::chmod(b->data_path_.c_str(), 0644);
    int fd = ::open(b->data_path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return fail(sys_error(b->data_path_, "cannot reopen the cache file for writing", errno));
    while (::flock(fd, LOCK_SH) != 0) {
      if (errno != EINTR) {
        ::close(fd);
        return fail(sys_error(b->data_path_, "cannot lock", errno));
      }
    }
    ::close(b->fd_);
    b->fd_ = fd;
  }
  struct stat st {};
  if (::fstat(b->fd_, &st) != 0) return fail(sys_error(b->data_path_, "cannot stat", errno));
  if (static_cast<std::uint64_t>(st.st_size) != size) {
    if (*meta && !(*meta)->extents.empty()) {
      // The data file lost bytes it was recorded to hold: nothing in it can be trusted.
      (*meta)->extents.clear();
      (*meta)->complete = false;
      if (auto w = write_meta_file(b->meta_path_, **meta); !w) return fail(w.error());
    }
    if (::ftruncate(b->fd_, static_cast<off_t>(size)) != 0) {
      return fail(sys_error(b->data_path_, "cannot size the cache file", errno));
    }
  }
  if (*meta) {
    b->meta_ = std::move(**meta);
  } else {
    b->meta_.size = size;
    b->meta_.sha256 = identity.sha256;
    b->meta_.url = std::string(url.substr(0, url.find_first_of("?#")));
    b->meta_.etag = etag;
    if (auto w = write_meta_file(b->meta_path_, b->meta_); !w) return fail(w.error());
  }
  return b;
}

struct Blob::Hasher {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx{EVP_MD_CTX_new(), EVP_MD_CTX_free};
  std::uint64_t hashed = 0;
  std::mutex mutex;
};

void Blob::enable_streaming_hash() {
  std::lock_guard g(mutex_);
  if (hasher_ || !meta_.sha256 || meta_.complete) return;
  auto h = std::make_unique<Hasher>();
  if (h->ctx && EVP_DigestInit_ex(h->ctx.get(), EVP_sha256(), nullptr) == 1) hasher_ = std::move(h);
}

Result<void> Blob::advance_hash() {
  if (!hasher_) return {};
  std::uint64_t end = 0;
  {
    std::lock_guard g(mutex_);
    if (!meta_.extents.empty() && meta_.extents[0].offset == 0) end = meta_.extents[0].end();
  }
  std::lock_guard g(hasher_->mutex);
  std::vector<unsigned char> buf;
  while (hasher_->hashed < end) {
    if (buf.empty()) buf.resize(1 << 20);
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), end - hasher_->hashed));
    ssize_t n = ::pread(fd_, buf.data(), want, static_cast<off_t>(hasher_->hashed));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(sys_error(data_path_, "read failed while hashing", n < 0 ? errno : EIO));
    EVP_DigestUpdate(hasher_->ctx.get(), buf.data(), static_cast<std::size_t>(n));
    hasher_->hashed += static_cast<std::uint64_t>(n);
  }
  return {};
}

Blob::~Blob() {
  if (map_) ::munmap(map_, static_cast<std::size_t>(size_));
  if (fd_ >= 0) ::close(fd_);
}

Result<void> Blob::write_at(std::uint64_t offset, std::span<const std::byte> data) {
  if (offset > size_ || data.size() > size_ - offset) {
    return fail(ErrorCode::InvalidArgument, data_path_ + ": bytes " + std::to_string(offset) + "+" +
                                                std::to_string(data.size()) + " lie beyond the " + std::to_string(size_) +
                                                "-byte file");
  }
  while (!data.empty()) {
    ssize_t n = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(sys_error(data_path_, "cannot write bytes " + std::to_string(offset) + "-" +
                                            std::to_string(offset + data.size() - 1),
                            errno));
    }
    if (n == 0) return fail(ErrorCode::Io, data_path_ + ": write returned 0 bytes");
    data = data.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

Result<void> Blob::reserve(ByteRange range) {
  if (range.length == 0) return {};
  if (::fallocate(fd_, 0, static_cast<off_t>(range.offset), static_cast<off_t>(range.length)) != 0) {
    const int err = errno;
    if (err == EOPNOTSUPP || err == ENOSYS || err == EINTR) return {};
    return fail(sys_error(data_path_, "cannot allocate bytes " + std::to_string(range.offset) + "-" +
                                          std::to_string(range.end() - 1) + " before fetching them",
                          err));
  }
  return {};
}

Result<BlobMeta> Blob::read_meta() const {
  auto meta = load_meta(meta_path_);
  if (!meta) return fail(meta.error());
  if (!*meta || (*meta)->size != size_) {
    BlobMeta m = meta_;
    m.extents.clear();
    m.complete = false;
    return m;
  }
  return std::move(**meta);
}

Result<void> Blob::commit(std::span<const ByteRange> ranges) {
  if (ranges.empty()) return {};
  for (const auto& r : ranges) {
    if (r.end() < r.offset || r.end() > size_) {
      return fail(ErrorCode::InvalidArgument, data_path_ + ": cannot record bytes " + std::to_string(r.offset) + "+" +
                                                  std::to_string(r.length) + " of a " + std::to_string(size_) +
                                                  "-byte file");
    }
  }
  if (::fdatasync(fd_) != 0) return fail(sys_error(data_path_, "cannot flush to disk", errno));
  auto lock = LockGuard::acquire(lock_path_);
  if (!lock) return fail(lock.error());
  auto disk = read_meta();
  if (!disk) return fail(disk.error());
  std::lock_guard g(mutex_);
  // Only what this call adds is merged into what the disk says: extents another process
  // discarded (a failed verification) must not come back from this object's memory.
  BlobMeta next = std::move(*disk);
  for (const auto& r : ranges) add_range(next.extents, r);
  if (auto w = write_meta_file(meta_path_, next); !w) return fail(w.error());
  meta_ = std::move(next);
  return {};
}

Result<RangeSet> Blob::refresh() {
  auto disk = read_meta();
  if (!disk) return fail(disk.error());
  std::lock_guard g(mutex_);
  meta_ = std::move(*disk);
  return meta_.extents;
}

RangeSet Blob::extents() const {
  std::lock_guard g(mutex_);
  return meta_.extents;
}

bool Blob::has(ByteRange range) {
  {
    std::lock_guard g(mutex_);
    if (covers(meta_.extents, range)) return true;
  }
  auto fresh = refresh();
  return fresh && covers(*fresh, range);
}

bool Blob::complete() const {
  std::lock_guard g(mutex_);
  return meta_.complete;
}

Result<void> Blob::finish(const std::string& what) {
  {
    std::lock_guard g(mutex_);
    if (meta_.complete) return {};
    if (!covers(meta_.extents, ByteRange{0, size_}) && size_ > 0) return {};
  }
  if (::fdatasync(fd_) != 0) return fail(sys_error(data_path_, "cannot flush to disk", errno));
  std::optional<std::string> expected;
  {
    std::lock_guard g(mutex_);
    expected = meta_.sha256;
  }
  std::optional<std::string> actual;
  if (expected && hasher_) {
    if (auto r = advance_hash(); !r) return fail(r.error());  // the whole file is committed now
    std::lock_guard g(hasher_->mutex);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (hasher_->hashed == size_ && EVP_DigestFinal_ex(hasher_->ctx.get(), md, &len) == 1) actual = to_hex(md, len);
  }
  hasher_.reset();
  if (expected && !actual) {
    auto h = sha256_of_fd(fd_, size_, data_path_);
    if (!h) return fail(h.error());
    actual = *h;
  }
  auto lock = LockGuard::acquire(lock_path_);
  if (!lock) return fail(lock.error());
  auto disk = read_meta();
  if (!disk) return fail(disk.error());
  BlobMeta next = std::move(*disk);
  if (expected && actual != expected) {
    next.extents.clear();
    next.complete = false;
    if (auto w = write_meta_file(meta_path_, next); !w) return fail(w.error());
    punch_out(fd_, size_);
    {
      std::lock_guard g(mutex_);
      meta_ = std::move(next);
    }
    return fail(ErrorCode::Integrity, what + ": sha256 of the downloaded file is " + *actual + ", expected " +
                                          *expected + "; the cached bytes were discarded");
  }
  next.extents = size_ ? RangeSet{ByteRange{0, size_}} : RangeSet{};
  next.complete = true;
  if (auto w = write_meta_file(meta_path_, next); !w) return fail(w.error());
  ::fchmod(fd_, 0444);
  std::lock_guard g(mutex_);
  meta_ = std::move(next);
  return {};
}

Result<std::span<const std::byte>> Blob::map() {
  std::lock_guard g(mutex_);
  if (size_ == 0) return std::span<const std::byte>();
  if (!map_) {
    void* p = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return fail(sys_error(data_path_, "cannot map", errno));
    map_ = p;
  }
  return std::span<const std::byte>(static_cast<const std::byte*>(map_), static_cast<std::size_t>(size_));
}

Result<std::vector<BlobEntry>> list_blobs(const std::string& root) {
  std::vector<BlobEntry> out;
  const std::string dir = root + "/blobs";
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".") || !entry.is_directory()) continue;
    BlobEntry e;
    e.id = name;
    auto meta = load_meta(entry.path().string() + "/meta.json");
    if (!meta) return fail(meta.error());
    if (*meta) e.meta = std::move(**meta);
    e.present = total_bytes(e.meta.extents);
    const std::string data = entry.path().string() + "/data";
    struct stat st {};
    if (::stat(data.c_str(), &st) == 0) e.disk_bytes = static_cast<std::uint64_t>(st.st_blocks) * 512;
    if (::stat(entry.path().c_str(), &st) == 0) e.last_used = st.st_mtim.tv_sec;
    int fd = ::open(data.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) e.in_use = true;
      ::close(fd);
    }
    out.push_back(std::move(e));
  }
  if (ec) return fail(ErrorCode::Io, dir + ": cannot list: " + ec.message());
  return out;
}

Result<void> remove_blob(const std::string& root, const std::string& id) {
  if (id.empty() || id.find('/') != std::string::npos || id.starts_with(".")) {
    return fail(ErrorCode::InvalidArgument, "'" + id + "' is not a cache blob id");
  }
  const std::string dir = root + "/blobs/" + id;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return fail(ErrorCode::NotFound, dir + ": no such cache blob");
  int fd = ::open((dir + "/data").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return fail(ErrorCode::InvalidArgument, dir + ": in use by another process; not removed");
  }
  // Renamed away first, so no process can open a half-deleted blob.
  const std::string trash = root + "/blobs/.trash-" + id + "-" + std::to_string(::getpid());
  if (::rename(dir.c_str(), trash.c_str()) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    return fail(sys_error(dir, "cannot remove", err));
  }
  if (fd >= 0) ::close(fd);
  fs::remove_all(trash, ec);
  if (ec) return fail(ErrorCode::Io, trash + ": cannot remove: " + ec.message());
  return {};
}

Result<void> verify_blob(const std::string& root, const std::string& id) {
  if (id.empty() || id.find('/') != std::string::npos || id.starts_with(".")) {
    return fail(ErrorCode::InvalidArgument, "'" + id + "' is not a cache blob id");
  }
  const std::string dir = root + "/blobs/" + id;
  std::error_code dir_ec;
  if (!fs::is_directory(dir, dir_ec)) return fail(ErrorCode::NotFound, dir + ": no such cache blob");
  auto meta = load_meta(dir + "/meta.json");
  if (!meta) return fail(meta.error());
  if (!*meta) return fail(ErrorCode::Integrity, dir + "/meta.json: unreadable; the blob cannot be trusted");
  const std::string data = dir + "/data";
  int fd = ::open(data.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(sys_error(data, "cannot open", errno));
  struct stat st {};
  ::fstat(fd, &st);
  if (static_cast<std::uint64_t>(st.st_size) != (*meta)->size) {
    ::close(fd);
    return fail(ErrorCode::Integrity, data + ": size " + std::to_string(st.st_size) + ", expected " +
                                          std::to_string((*meta)->size));
  }
  if (!(*meta)->complete || !(*meta)->sha256) {
    ::close(fd);
    return {};
  }
  auto h = sha256_of_fd(fd, (*meta)->size, data);
  ::close(fd);
  if (!h) return fail(h.error());
  if (*h != *(*meta)->sha256) {
    auto lock = LockGuard::acquire(dir + "/lock");
    if (!lock) return fail(lock.error());
    BlobMeta m = **meta;
    m.extents.clear();
    m.complete = false;
    if (auto w = write_meta_file(dir + "/meta.json", m); !w) return fail(w.error());
    ::chmod(data.c_str(), 0644);
    int wfd = ::open(data.c_str(), O_RDWR | O_CLOEXEC);
    if (wfd >= 0) {
      punch_out(wfd, m.size);
      ::close(wfd);
    }
    return fail(ErrorCode::Integrity, data + ": sha256 is " + *h + ", expected " + *(*meta)->sha256 +
                                          "; its extents were discarded");
  }
  return {};
}

}  // namespace tensorfetch::detail
