// SPDX-License-Identifier: Apache-2.0
#include "cache/blob.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <nlohmann/json.hpp>

#include "base/text.h"
#include "format/json_depth.h"
#include "net/url.h"

namespace tensorfetch::detail {

namespace {

constexpr std::uint64_t kMaxMetaSize = 256 << 20;

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

// An exclusive flock on a blob's lock file, released on destruction.
class LockGuard {
 public:
  static Result<LockGuard> acquire(int dirfd, const std::string& dir_path, mode_t mode) {
    LockGuard g;
    auto fd = open_file_at(dirfd, "lock", O_RDWR | O_CREAT, mode, dir_path);
    if (!fd) return fail(fd.error());
    if (!lock_file(fd->get(), LOCK_EX)) return fail(sys_error(dir_path + "/lock", "cannot lock", errno));
    g.fd_ = std::move(*fd);
    return g;
  }

 private:
  UniqueFd fd_;  // closing releases the flock
};

nlohmann::json to_json(const BlobMeta& m) {
  nlohmann::json extents = nlohmann::json::array();
  for (const auto& r : m.extents) extents.push_back({r.offset, r.length});
  return {{"version", 2},
          {"size", m.size},
          {"sha256", m.sha256 ? nlohmann::json(*m.sha256) : nlohmann::json(nullptr)},
          {"url", m.url},
          {"origin", m.origin ? nlohmann::json(*m.origin) : nlohmann::json(nullptr)},
          {"etag", m.etag ? nlohmann::json(*m.etag) : nlohmann::json(nullptr)},
          {"complete", m.complete},
          {"extents", extents},
          {"retired", m.retired ? nlohmann::json(*m.retired) : nlohmann::json(nullptr)},
          {"retired_at", m.retired_at}};
}

// A meta.json that cannot be read as written by us is treated as holding nothing: the blob is
// then fetched again, never served from.
std::optional<BlobMeta> parse_meta(const std::string& text) {
  auto parsed = detail::parse_json(text, ErrorCode::Io, "meta.json");
  if (!parsed || !parsed->is_object()) return std::nullopt;
  const nlohmann::json& j = *parsed;
  try {
    BlobMeta m;
    m.size = j.at("size").get<std::uint64_t>();
    if (j.contains("sha256") && j["sha256"].is_string()) m.sha256 = j["sha256"].get<std::string>();
    m.url = j.value("url", "");
    if (j.contains("origin") && j["origin"].is_string()) m.origin = j["origin"].get<std::string>();
    if (j.contains("etag") && j["etag"].is_string()) m.etag = j["etag"].get<std::string>();
    m.complete = j.value("complete", false);
    if (j.contains("retired") && j["retired"].is_string()) m.retired = j["retired"].get<std::string>();
    if (j.contains("retired_at") && j["retired_at"].is_number_integer()) m.retired_at = j["retired_at"].get<std::int64_t>();
    std::vector<ByteRange> ranges;
    for (const auto& e : j.at("extents")) {
      ByteRange r{e.at(0).get<std::uint64_t>(), e.at(1).get<std::uint64_t>()};
      if (r.end() < r.offset || r.end() > m.size) return std::nullopt;
      ranges.push_back(r);
    }
    m.extents = normalize(std::move(ranges));
    if (m.retired && (m.complete || !m.extents.empty())) return std::nullopt;  // never written so
    if (m.complete && !(m.extents.size() == 1 && m.extents[0] == ByteRange{0, m.size}) && m.size > 0) {
      return std::nullopt;
    }
    return m;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// meta.json of the blob directory `dirfd`: nothing when absent or unreadable as ours.
Result<std::optional<BlobMeta>> load_meta(int dirfd, const std::string& dir_path) {
  auto text = read_file_at(dirfd, "meta.json", kMaxMetaSize, dir_path);
  if (!text) {
    if (text.error().code == ErrorCode::NotFound) return std::optional<BlobMeta>();
    return fail(text.error());
  }
  return parse_meta(*text);
}

Result<void> write_meta(int dirfd, const std::string& dir_path, const BlobMeta& meta, mode_t mode) {
  return write_file_atomically_at(dirfd, "meta.json", to_json(meta).dump() + "\n", mode, dir_path);
}

void punch_out(int fd, std::uint64_t size) {
  if (size > 0) ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(size));
}

// Removes blobs/NAME when it is a directory whose meta.json does not record it complete and no
// process has its data open. True when it is gone.
bool discard_unverified(const CacheDir& cache, const std::string& name) {
  const std::string dir_path = cache.blobs_path() + "/" + name;
  UniqueFd dir(::openat(cache.blobs_fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return false;
  auto meta = load_meta(dir.get(), dir_path);
  if (!meta || (*meta && (*meta)->complete)) return false;
  auto data = open_file_at(dir.get(), "data", O_RDONLY, 0, dir_path);
  if (data && !lock_file(data->get(), LOCK_EX | LOCK_NB)) return false;
  const std::string trash = ".trash-" + name + "-" + std::to_string(::getpid());
  if (::renameat(cache.blobs_fd(), name.c_str(), cache.blobs_fd(), trash.c_str()) != 0) return false;
  (void)remove_tree_at(cache.blobs_fd(), trash, cache.blobs_path());
  return true;
}

bool same_file(int a, int b) {
  struct stat sa {}, sb {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Whether blobs/NAME is (still) the directory `dirfd`.
bool names_dir(int blobs_fd, const std::string& name, int dirfd) {
  struct stat named {}, ours {};
  return ::fstatat(blobs_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && ::fstat(dirfd, &ours) == 0 &&
         named.st_dev == ours.st_dev && named.st_ino == ours.st_ino;
}

// Moves the retired blob directory `dirfd`, found as blobs/ID, out of its identity's name to
// `ID.retired-SECONDS-PID-N` (never replacing anything), then fsyncs blobs/. Returns the new
// name, or nothing when blobs/ID is no longer that directory (another process moved it). Only
// a name is at stake: whatever directory a race moves, its meta.json says whether its bytes are
// served, and a blob that was not retired merely leaves its identity's name (it is fetched again).
Result<std::optional<std::string>> move_retired(const CacheDir& cache, const std::string& id, int dirfd) {
  const int blobs = cache.blobs_fd();
  if (!names_dir(blobs, id, dirfd)) return std::optional<std::string>();
  const std::string base = id + ".retired-" + std::to_string(::time(nullptr)) + "-" + std::to_string(::getpid());
  for (int n = 0; n < 100; ++n) {
    const std::string name = base + "-" + std::to_string(n);
    if (::renameat2(blobs, id.c_str(), blobs, name.c_str(), RENAME_NOREPLACE) == 0) {
      ::fsync(blobs);
      return std::optional<std::string>(name);
    }
    if (errno == ENOENT) return std::optional<std::string>();  // moved by another process meanwhile
    if (errno != EEXIST) {
      return fail(sys_error(cache.blobs_path() + "/" + id, "cannot move the retired cache blob out of the way", errno));
    }
  }
  return fail(ErrorCode::Io, cache.blobs_path() + "/" + id + ": cannot find a free name for the retired cache blob");
}

// A writable descriptor of the data file `fd` refers to (read-only once complete): made
// writable through the descriptor (fchmod, never chmod on a path), reopened by name without
// following links, and checked to be the very same file.
Result<UniqueFd> reopen_writable(int dirfd, const std::string& dir_path, int fd, mode_t mode) {
  const std::string path = dir_path + "/data";
  if (::fchmod(fd, mode) != 0) return fail(sys_error(path, "cannot make the cache file writable", errno));
  auto rw = open_file_at(dirfd, "data", O_RDWR, 0, dir_path);
  if (!rw) return fail(rw.error());
  if (!same_file(fd, rw->get())) return fail(ErrorCode::Io, path + ": replaced while being opened; refused");
  return std::move(*rw);
}

// Opens (creating with `create`) blob directory `id`; checks it can be trusted.
Result<UniqueFd> open_blob_dir(const CacheDir& cache, const std::string& id, bool create) {
  if (auto r = check_path_component(id, "cache blob id"); !r) return fail(r.error());
  if (cache.blobs_fd() < 0) return fail(ErrorCode::NotFound, cache.blobs_path() + ": no such directory");
  auto dir = open_dir_at(cache.blobs_fd(), id, cache.blobs_path(), create, cache.modes().dir);
  if (!dir) return fail(dir.error());
  if (auto t = check_trusted(dir->get(), cache.blobs_path() + "/" + id, cache.sharing()); !t) return fail(t.error());
  return dir;
}

}  // namespace

std::string default_cache_root() {
  if (auto v = env("TENSORFETCH_CACHE"); !v.empty()) return v;
  if (auto v = env("XDG_CACHE_HOME"); !v.empty()) return v + "/tensorfetch";
  if (auto v = env("HOME"); !v.empty()) return v + "/.cache/tensorfetch";
  return ".tensorfetch-cache";
}

Sharing default_cache_sharing() {
  const std::string v = ascii_lower(env("TENSORFETCH_SHARED_CACHE"));
  return v == "1" || v == "true" || v == "yes" || v == "on" ? Sharing::Group : Sharing::Private;
}

Result<std::shared_ptr<const CacheDir>> CacheDir::open(const std::string& path, Sharing sharing, bool create) {
  auto dir = std::shared_ptr<CacheDir>(new CacheDir());
  dir->path_ = path;
  dir->sharing_ = sharing;
  dir->modes_ = modes_for(sharing);
  auto root = open_root_dir(path, create, dir->modes_.dir);
  if (!root) {
    Error e = root.error().with_context("the tensorfetch cache");
    if (e.code == ErrorCode::Io && e.message.find("symbolic link") != std::string::npos) {
      e.message += "; if you made it, point --cache-dir or TENSORFETCH_CACHE at the directory it leads to";
    }
    return fail(e);
  }
  if (auto t = check_trusted(root->get(), path, sharing); !t) return fail(t.error());
  dir->root_ = std::move(*root);
  auto sub = [&](const char* name, UniqueFd& out) -> Result<void> {
    auto fd = open_dir_at(dir->root_.get(), name, path, create, dir->modes_.dir);
    if (!fd) {
      if (fd.error().code == ErrorCode::NotFound && !create) return {};
      return fail(fd.error());
    }
    if (auto t = check_trusted(fd->get(), path + "/" + name, sharing); !t) return fail(t.error());
    out = std::move(*fd);
    return {};
  };
  if (auto r = sub("blobs", dir->blobs_); !r) return fail(r.error());
  if (auto r = sub("snapshots", dir->snapshots_); !r) return fail(r.error());
  return std::shared_ptr<const CacheDir>(std::move(dir));
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

std::optional<std::string> sha256_of_linked_etag(const std::optional<std::string>& linked_etag) {
  if (!linked_etag) return std::nullopt;
  std::string tag = unquote_etag(*linked_etag);
  for (auto& c : tag) c = static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
  if (!is_hex64(tag)) return std::nullopt;
  return tag;
}

BlobIdentity blob_identity(std::string_view url, const std::optional<std::string>& linked_etag,
                           const std::optional<std::string>& etag, std::uint64_t size) {
  BlobIdentity out;
  out.origin = url_authority(url);
  if (auto sha = sha256_of_linked_etag(linked_etag)) {
    out.id = *sha + "-" + sha256_hex("origin\n" + out.origin).substr(0, 16);
    out.sha256 = std::move(sha);
    return out;
  }
  const auto& tag = linked_etag ? linked_etag : etag;
  std::string_view base = url.substr(0, url.find_first_of("?#"));
  std::string key = std::string(base) + "\n" + (tag ? *tag : std::string()) + "\n" + std::to_string(size);
  out.id = "u" + sha256_hex(key).substr(0, 40);
  return out;
}

Result<std::unique_ptr<Blob>> Blob::open(std::shared_ptr<const CacheDir> cache, const BlobIdentity& identity,
                                         std::uint64_t size, std::string_view url,
                                         const std::optional<std::string>& etag, BlobCreate create) {
  if (!cache) return fail(ErrorCode::InvalidArgument, "Blob::open: no cache");
  // A retired blob under the identity's name is moved away, then the name is opened again
  // (a few times: other processes may retire what they find there meanwhile).
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto b = open_once(cache, identity, size, url, etag, create);
    if (!b || *b) return b;
  }
  return fail(ErrorCode::Io, cache->blobs_path() + "/" + identity.id +
                                 ": keeps being a retired cache blob; remove it with `tensorfetch cache rm " +
                                 identity.id + "`");
}

// Not analysed for locking: it fills in a blob no other thread can see yet.
Result<std::unique_ptr<Blob>> Blob::open_once(const std::shared_ptr<const CacheDir>& cache,
                                              const BlobIdentity& identity, std::uint64_t size, std::string_view url,
                                              const std::optional<std::string>& etag,
                                              BlobCreate create) TF_NO_THREAD_SAFETY_ANALYSIS {
  const Modes& modes = cache->modes();
  std::unique_ptr<Blob> b(new Blob());
  b->cache_ = cache;
  b->size_ = size;
  if (identity.sha256) {
    // A blob verified whole against this sha256 may be read by any origin. Anything else there
    // (an old cache's partial blob of unknown origin) is never used.
    auto dir = open_blob_dir(*cache, *identity.sha256, false);
    if (!dir && dir.error().code != ErrorCode::NotFound) return fail(dir.error());
    if (dir) {
      const std::string dir_path = cache->blobs_path() + "/" + *identity.sha256;
      auto meta = load_meta(dir->get(), dir_path);
      if (!meta) return fail(meta.error());
      if (*meta && (*meta)->complete && (*meta)->size == size && (*meta)->sha256 == identity.sha256) {
        auto fd = open_file_at(dir->get(), "data", O_RDONLY, 0, dir_path);
        if (!fd) return fail(fd.error());
        if (auto t = check_trusted(fd->get(), dir_path + "/data", cache->sharing()); !t) return fail(t.error());
        struct stat st {};
        if (::fstat(fd->get(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) == size &&
            lock_file(fd->get(), LOCK_SH)) {
          b->dir_fd_ = std::move(*dir);
          b->id_ = *identity.sha256;
          b->dir_path_ = dir_path;
          b->data_path_ = dir_path + "/data";
          b->fd_ = std::move(*fd);
          b->meta_ = std::move(**meta);
          b->shared_verified_ = true;
          ::futimens(b->dir_fd_.get(), nullptr);  // last used: now
          return b;
        }
      }
    }
    b->promote_to_ = identity.sha256;
  }
  b->id_ = identity.id;
  b->dir_path_ = cache->blobs_path() + "/" + identity.id;
  b->data_path_ = b->dir_path_ + "/data";
  if (create == BlobCreate::IfMissing && cache->blobs_fd() < 0) {
    return fail(ErrorCode::Io, cache->blobs_path() + ": missing; the cache was opened read-only");
  }
  auto dir = open_blob_dir(*cache, identity.id, create == BlobCreate::IfMissing);
  if (!dir) return fail(dir.error());
  b->dir_fd_ = std::move(*dir);
  const int dirfd = b->dir_fd_.get();
  if (create == BlobCreate::No) {
    // Only an existing blob: one that has its meta.json.
    struct stat st {};
    if (::fstatat(dirfd, "meta.json", &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) return fail(sys_error(b->dir_path_ + "/meta.json", "cannot stat", errno));
      return fail(ErrorCode::NotFound, b->dir_path_ + "/meta.json: no such file");
    }
  }
  // Complete blobs are read-only (no owner write bit): opened for reading, and made writable
  // again below only if they are not recorded complete any more.
  struct stat data_st {};
  const bool writable = !(::fstatat(dirfd, "data", &data_st, AT_SYMLINK_NOFOLLOW) == 0 &&
                          S_ISREG(data_st.st_mode) && !(data_st.st_mode & S_IWUSR));
  auto data = writable ? open_file_at(dirfd, "data", O_RDWR | O_CREAT, modes.file, b->dir_path_)
                       : open_file_at(dirfd, "data", O_RDONLY, 0, b->dir_path_);
  if (!data) return fail(data.error());
  if (auto t = check_trusted(data->get(), b->data_path_, cache->sharing()); !t) return fail(t.error());
  b->fd_ = std::move(*data);
  if (!lock_file(b->fd_.get(), LOCK_SH)) return fail(sys_error(b->data_path_, "cannot lock", errno));
  ::futimens(dirfd, nullptr);  // last used: now
  auto lock = LockGuard::acquire(dirfd, b->dir_path_, modes.file);
  if (!lock) return fail(lock.error());
  auto meta = load_meta(dirfd, b->dir_path_);
  if (!meta) return fail(meta.error());
  if (*meta && (*meta)->retired) {
    // Stale bytes another process retired (and crashed, or is about to move them away): never
    // served. Out of the identity's name with them; the caller opens the name again.
    auto moved = move_retired(*cache, identity.id, dirfd);
    if (!moved) return fail(moved.error());
    return std::unique_ptr<Blob>();
  }
  const std::string origin = identity.origin;
  bool rewrite = false;
  if (*meta && (*meta)->size != size) {
    return fail(ErrorCode::Integrity, b->dir_path_ + ": the cache records a size of " + std::to_string((*meta)->size) +
                                          " bytes, but " + std::string(url) + " has " + std::to_string(size) +
                                          "; remove it with `tensorfetch cache rm " + identity.id + "`");
  }
  if (*meta && (((*meta)->origin && *(*meta)->origin != origin) ||
                (!(*meta)->origin && identity.sha256))) {
    // Bytes another origin sent (or an unknown one) are never served to this one.
    (*meta)->extents.clear();
    (*meta)->complete = false;
    (*meta)->origin = origin;
    (*meta)->sha256 = identity.sha256;
    rewrite = true;
  }
  if (!writable && !(*meta && (*meta)->complete)) {
    // Read-only but not (any more) recorded complete: it must be writable to be fetched again.
    auto rw = reopen_writable(dirfd, b->dir_path_, b->fd_.get(), modes.file);
    if (!rw) return fail(rw.error());
    if (!lock_file(rw->get(), LOCK_SH)) return fail(sys_error(b->data_path_, "cannot lock", errno));
    b->fd_ = std::move(*rw);
  }
  struct stat st {};
  if (::fstat(b->fd_.get(), &st) != 0) return fail(sys_error(b->data_path_, "cannot stat", errno));
  if (static_cast<std::uint64_t>(st.st_size) != size) {
    if (*meta && !(*meta)->extents.empty()) {
      // The data file lost bytes it was recorded to hold: nothing in it can be trusted.
      (*meta)->extents.clear();
      (*meta)->complete = false;
      rewrite = true;
    }
    if (::ftruncate(b->fd_.get(), static_cast<off_t>(size)) != 0) {
      return fail(sys_error(b->data_path_, "cannot size the cache file", errno));
    }
  }
  if (*meta) {
    b->meta_ = std::move(**meta);
    if (!b->meta_.origin) {  // a 'u' blob of an older cache: its bytes came from its URL's origin
      b->meta_.origin = origin;
      rewrite = true;
    }
  } else {
    b->meta_.size = size;
    b->meta_.sha256 = identity.sha256;
    b->meta_.url = std::string(url.substr(0, url.find_first_of("?#")));
    b->meta_.origin = origin;
    b->meta_.etag = etag;
    rewrite = true;
  }
  if (rewrite) {
    if (auto w = write_meta(dirfd, b->dir_path_, b->meta_, modes.file); !w) return fail(w.error());
  }
  return b;
}

struct Blob::Hasher {
  Mutex mutex;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx TF_GUARDED_BY(mutex) = {EVP_MD_CTX_new(), EVP_MD_CTX_free};
  std::uint64_t hashed TF_GUARDED_BY(mutex) = 0;
  bool finished TF_GUARDED_BY(mutex) = false;  // finish() took the digest: hash nothing more
};

std::string Blob::id() const {
  MutexLock g(mutex_);
  return id_;
}

std::string Blob::data_path() const {
  MutexLock g(mutex_);
  return data_path_;
}

std::string Blob::dir_path() const {
  MutexLock g(mutex_);
  return dir_path_;
}

void Blob::enable_streaming_hash() {
  auto h = std::make_shared<Hasher>();
  {
    MutexLock hg(h->mutex);
    if (!h->ctx || EVP_DigestInit_ex(h->ctx.get(), EVP_sha256(), nullptr) != 1) return;
  }
  MutexLock g(mutex_);
  if (hasher_ || !meta_.sha256 || meta_.complete) return;
  hasher_ = std::move(h);
}

std::uint64_t Blob::hashable_end() const {
  return !meta_.extents.empty() && meta_.extents[0].offset == 0 ? meta_.extents[0].end() : 0;
}

Result<void> Blob::advance_hash() {
  std::shared_ptr<Hasher> h;
  {
    MutexLock g(mutex_);
    h = hasher_;
  }
  return h ? advance(*h) : Result<void>();
}

Result<void> Blob::advance(Hasher& h) {
  std::uint64_t end = 0;
  {
    MutexLock g(mutex_);
    end = hashable_end();
  }
  MutexLock g(h.mutex);
  std::vector<unsigned char> buf;
  while (!h.finished && h.hashed < end) {
    if (buf.empty()) buf.resize(1 << 20);
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), end - h.hashed));
    ssize_t n = ::pread(fd_.get(), buf.data(), want, static_cast<off_t>(h.hashed));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(sys_error(data_path(), "read failed while hashing", n < 0 ? errno : EIO));
    EVP_DigestUpdate(h.ctx.get(), buf.data(), static_cast<std::size_t>(n));
    h.hashed += static_cast<std::uint64_t>(n);
  }
  return {};
}

Blob::~Blob() {
  MutexLock g(mutex_);  // (no other thread may use a blob being destroyed; the lock costs nothing)
  if (map_) ::munmap(map_, static_cast<std::size_t>(size_));
}

Result<void> Blob::write_at(std::uint64_t offset, std::span<const std::byte> data) {
  if (shared_verified_) {
    return fail(ErrorCode::InvalidArgument, data_path() + ": a verified blob shared by every origin is never written");
  }
  if (offset > size_ || data.size() > size_ - offset) {
    return fail(ErrorCode::InvalidArgument, data_path() + ": bytes " + std::to_string(offset) + "+" +
                                                std::to_string(data.size()) + " lie beyond the " + std::to_string(size_) +
                                                "-byte file");
  }
  while (!data.empty()) {
    ssize_t n = ::pwrite(fd_.get(), data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(sys_error(data_path(), "cannot write bytes " + std::to_string(offset) + "-" +
                                             std::to_string(offset + data.size() - 1),
                            errno));
    }
    if (n == 0) return fail(ErrorCode::Io, data_path() + ": write returned 0 bytes");
    data = data.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

Result<void> Blob::reserve(ByteRange range) {
  if (range.length == 0 || shared_verified_) return {};
  if (::fallocate(fd_.get(), 0, static_cast<off_t>(range.offset), static_cast<off_t>(range.length)) != 0) {
    const int err = errno;
    if (err == EOPNOTSUPP || err == ENOSYS || err == EINTR) return {};
    return fail(sys_error(data_path(), "cannot allocate bytes " + std::to_string(range.offset) + "-" +
                                           std::to_string(range.end() - 1) + " before fetching them",
                          err));
  }
  return {};
}

Result<BlobMeta> Blob::read_meta() const {
  auto meta = load_meta(dir_fd_.get(), dir_path());
  if (!meta) return fail(meta.error());
  MutexLock g(mutex_);
  if (!*meta || (*meta)->size != size_ || (*meta)->origin != meta_.origin ||
      (shared_verified_ && !(*meta)->complete)) {
    BlobMeta m = meta_;
    m.extents.clear();
    m.complete = false;
    return m;
  }
  return std::move(**meta);
}

void Blob::start_writeback(ByteRange range) const noexcept {
  if (range.length == 0 || shared_verified_) return;
  (void)::sync_file_range(fd_.get(), static_cast<off_t>(range.offset), static_cast<off_t>(range.length),
                          SYNC_FILE_RANGE_WRITE);
}

Result<void> Blob::commit(std::span<const ByteRange> ranges) {
  if (ranges.empty()) return {};
  if (shared_verified_) {
    return fail(ErrorCode::InvalidArgument, data_path() + ": a verified blob shared by every origin is never written");
  }
  for (const auto& r : ranges) {
    if (r.end() < r.offset || r.end() > size_) {
      return fail(ErrorCode::InvalidArgument, data_path() + ": cannot record bytes " + std::to_string(r.offset) + "+" +
                                                  std::to_string(r.length) + " of a " + std::to_string(size_) +
                                                  "-byte file");
    }
  }
  if (::fdatasync(fd_.get()) != 0) return fail(sys_error(data_path(), "cannot flush to disk", errno));
  // Only what this call adds is merged into what the disk says: extents another process
  // discarded (a failed verification) must not come back from this object's memory.
  return update_meta([&](BlobMeta& m) {
    for (const auto& r : ranges) add_range(m.extents, r);
  });
}

Result<void> Blob::update_meta(const std::function<void(BlobMeta&)>& change, const std::function<void()>& while_locked) {
  const std::string dir_path = this->dir_path();
  auto lock = LockGuard::acquire(dir_fd_.get(), dir_path, cache_->modes().file);
  if (!lock) return fail(lock.error());
  auto disk = read_meta();
  if (!disk) return fail(disk.error());
  if (disk->retired) {
    MutexLock g(mutex_);
    meta_ = std::move(*disk);
    return fail(ErrorCode::Integrity, dir_path + ": these cached bytes were found stale (" + *meta_.retired +
                                          ") and retired; nothing more is recorded in them. Open the checkpoint "
                                          "again to read the file as it is now");
  }
  BlobMeta next = std::move(*disk);
  change(next);
  if (auto w = write_meta(dir_fd_.get(), dir_path, next, cache_->modes().file); !w) return fail(w.error());
  if (while_locked) while_locked();
  MutexLock g(mutex_);
  meta_ = std::move(next);
  return {};
}

Result<RangeSet> Blob::refresh() {
  auto disk = read_meta();
  if (!disk) return fail(disk.error());
  MutexLock g(mutex_);
  meta_ = std::move(*disk);
  return meta_.extents;
}

RangeSet Blob::extents() const {
  MutexLock g(mutex_);
  return meta_.extents;
}

Result<bool> Blob::holds(ByteRange range) {
  {
    MutexLock g(mutex_);
    if (covers(meta_.extents, range)) return true;
  }
  auto fresh = refresh();
  if (!fresh) return fail(fresh.error());
  return covers(*fresh, range);
}

bool Blob::complete() const {
  MutexLock g(mutex_);
  return meta_.complete;
}

bool Blob::retired() const {
  MutexLock g(mutex_);
  return meta_.retired.has_value();
}

Result<std::optional<std::uint64_t>> Blob::first_difference(std::uint64_t offset, std::span<const std::byte> bytes) {
  auto extents = refresh();
  if (!extents) return fail(extents.error());
  const std::uint64_t end = offset + bytes.size();
  std::vector<std::byte> buf;
  for (const auto& e : *extents) {
    const std::uint64_t from = std::max(e.offset, offset), to = std::min(e.end(), end);
    for (std::uint64_t at = from; at < to;) {
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(to - at, 1 << 20));
      buf.resize(want);
      ssize_t n = ::pread(fd_.get(), buf.data(), want, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return fail(sys_error(data_path(), "cannot read cached bytes " + std::to_string(at) + "-" +
                                                         std::to_string(at + want - 1),
                                        n < 0 ? errno : EIO));
      const std::byte* theirs = bytes.data() + (at - offset);
      if (std::memcmp(buf.data(), theirs, static_cast<std::size_t>(n)) != 0) {
        std::size_t k = 0;
        while (buf[k] == theirs[k]) ++k;
        return std::optional<std::uint64_t>(at + k);
      }
      at += static_cast<std::uint64_t>(n);
    }
  }
  return std::optional<std::uint64_t>();
}

Result<std::string> Blob::retire(const std::string& reason) {
  if (shared_verified_) {
    return fail(ErrorCode::InvalidArgument, data_path() + ": a blob verified against its sha256 is never retired");
  }
  const std::string dir_path = this->dir_path();
  {
    auto lock = LockGuard::acquire(dir_fd_.get(), dir_path, cache_->modes().file);
    if (!lock) return fail(lock.error());
    auto disk = read_meta();
    if (!disk) return fail(disk.error());
    BlobMeta next = std::move(*disk);
    if (!next.retired) {
      next.retired = reason;
      next.retired_at = static_cast<std::int64_t>(::time(nullptr));
      next.extents.clear();
      next.complete = false;
      if (auto w = write_meta(dir_fd_.get(), dir_path, next, cache_->modes().file); !w) return fail(w.error());
    }
    MutexLock g(mutex_);
    meta_ = std::move(next);
  }
  std::string id;
  {
    MutexLock g(mutex_);
    id = id_;
  }
  if (is_retired_name(id)) return id;
  auto moved = move_retired(*cache_, id, dir_fd_.get());
  if (!moved) return fail(moved.error());
  if (!*moved) return id;  // another process moved it (its new name is not known here)
  MutexLock g(mutex_);
  id_ = **moved;
  dir_path_ = cache_->blobs_path() + "/" + id_;
  data_path_ = dir_path_ + "/data";
  return id_;
}

void Blob::promote() {
  // Verified whole against its sha256: every origin may read it now. Renamed only when no blob
  // of that name exists (RENAME_NOREPLACE), and only if the directory of that name is still ours.
  const std::string sha = *promote_to_;
  std::string id;
  {
    MutexLock g(mutex_);
    id = id_;
  }
  const int blobs = cache_->blobs_fd();
  struct stat named {}, ours {};
  if (id == sha || blobs < 0 || ::fstatat(blobs, id.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
      ::fstat(dir_fd_.get(), &ours) != 0 || named.st_ino != ours.st_ino || named.st_dev != ours.st_dev) {
    return;
  }
  if (::renameat2(blobs, id.c_str(), blobs, sha.c_str(), RENAME_NOREPLACE) != 0) {
    // A blob of that name that is not (any more) complete -- discarded by `cache verify`, or a
    // partial one of an older cache, of unknown origin -- is never read: it makes way, unless a
    // process has it open.
    if (errno != EEXIST || !discard_unverified(*cache_, sha) ||
        ::renameat2(blobs, id.c_str(), blobs, sha.c_str(), RENAME_NOREPLACE) != 0) {
      return;
    }
  }
  ::fsync(blobs);
  MutexLock g(mutex_);
  id_ = sha;
  dir_path_ = cache_->blobs_path() + "/" + sha;
  data_path_ = dir_path_ + "/data";
}

Result<void> Blob::finish(const std::string& what) {
  {
    MutexLock g(mutex_);
    if (meta_.complete) return {};
    if (!covers(meta_.extents, ByteRange{0, size_}) && size_ > 0) return {};
  }
  if (::fdatasync(fd_.get()) != 0) return fail(sys_error(data_path(), "cannot flush to disk", errno));
  std::optional<std::string> expected;
  {
    MutexLock g(mutex_);
    expected = meta_.sha256;
  }
  std::optional<std::string> actual;
  std::shared_ptr<Hasher> hasher;
  {
    MutexLock g(mutex_);
    hasher = std::move(hasher_);  // taken: no advance_hash starts on it any more
  }
  if (expected && hasher) {
    if (auto r = advance(*hasher); !r) return fail(r.error());  // the whole file is committed now
    MutexLock g(hasher->mutex);  // waits for an advance_hash that started before
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!hasher->finished && hasher->hashed == size_ && EVP_DigestFinal_ex(hasher->ctx.get(), md, &len) == 1) {
      actual = to_hex(md, len);
    }
    hasher->finished = true;
  }
  if (expected && !actual) {
    auto h = sha256_of_fd(fd_.get(), size_, data_path());
    if (!h) return fail(h.error());
    actual = *h;
  }
  if (expected && actual != expected) {
    auto r = update_meta(
        [](BlobMeta& m) {
          m.extents.clear();
          m.complete = false;
        },
        [&] { punch_out(fd_.get(), size_); });
    if (!r) return r;
    return fail(ErrorCode::Integrity, what + ": sha256 of the downloaded file is " + *actual + ", expected " +
                                          *expected + "; the cached bytes were discarded");
  }
  return update_meta(
      [&](BlobMeta& m) {
        m.extents = size_ ? RangeSet{ByteRange{0, size_}} : RangeSet{};
        m.complete = true;
      },
      [&] {
        ::fchmod(fd_.get(), cache_->modes().readonly);
        if (promote_to_ && expected && actual == expected) promote();
      });
}

Result<std::span<const std::byte>> Blob::map() {
  MutexLock g(mutex_);
  if (size_ == 0) return std::span<const std::byte>();
  if (!map_) {
    void* p = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_SHARED, fd_.get(), 0);
    if (p == MAP_FAILED) return fail(sys_error(data_path_, "cannot map", errno));
    map_ = p;
  }
  return std::span<const std::byte>(static_cast<const std::byte*>(map_), static_cast<std::size_t>(size_));
}

Result<std::vector<BlobEntry>> list_blobs(const CacheDir& cache) {
  std::vector<BlobEntry> out;
  if (cache.blobs_fd() < 0) return out;
  const std::string blobs_path = cache.blobs_path();
  auto listed = list_dir_at(cache.blobs_fd(), ".", blobs_path);
  if (!listed) return fail(listed.error());
  std::vector<std::string> names;
  for (auto& name : *listed) {
    if (!name.starts_with(".")) names.push_back(std::move(name));
  }
  for (const auto& name : names) {
    BlobEntry e;
    e.id = name;
    const std::string dir_path = blobs_path + "/" + name;
    struct stat st {};
    if (::fstatat(cache.blobs_fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // gone meanwhile
      return fail(sys_error(dir_path, "cannot stat", errno));
    }
    e.last_used = st.st_mtim.tv_sec;
    if (!S_ISDIR(st.st_mode)) {
      out.push_back(std::move(e));  // not a blob (a planted link?): listed empty, never followed
      continue;
    }
    UniqueFd dir(::openat(cache.blobs_fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) {
      if (errno == ENOENT) continue;  // gone meanwhile
      return fail(sys_error(dir_path, "cannot open", errno));
    }
    // A blob whose files cannot be read is an error naming them, never listed as holding nothing
    // (nor left out of a prune's count). A meta.json that reads but is not ours holds nothing.
    auto meta = load_meta(dir.get(), dir_path);
    if (!meta) return fail(meta.error());
    if (*meta) e.meta = std::move(**meta);
    e.present = total_bytes(e.meta.extents);
    e.retired = e.meta.retired.has_value() || is_retired_name(name);
    auto data = open_file_at(dir.get(), "data", O_RDONLY, 0, dir_path);
    if (!data && data.error().code != ErrorCode::NotFound) return fail(data.error());
    if (data) {
      if (::fstat(data->get(), &st) != 0) return fail(sys_error(dir_path + "/data", "cannot stat", errno));
      e.disk_bytes = static_cast<std::uint64_t>(st.st_blocks) * 512;
      if (!lock_file(data->get(), LOCK_EX | LOCK_NB)) {
        if (errno != EWOULDBLOCK) return fail(sys_error(dir_path + "/data", "cannot lock", errno));
        e.in_use = true;
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

bool is_retired_name(std::string_view name) noexcept { return name.find(".retired-") != std::string_view::npos; }

Result<void> remove_blob(const CacheDir& cache, const std::string& id) {
  if (id.empty() || id.find('/') != std::string::npos || id.starts_with(".") ||
      !check_path_component(id, "cache blob id")) {
    return fail(ErrorCode::InvalidArgument, quote_name(id) + " is not a cache blob id");
  }
  const std::string dir_path = cache.blobs_path() + "/" + id;
  struct stat st {};
  if (cache.blobs_fd() < 0 || ::fstatat(cache.blobs_fd(), id.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return fail(ErrorCode::NotFound, dir_path + ": no such cache blob");
  }
  if (!S_ISDIR(st.st_mode)) {
    // Not a blob (e.g. a symbolic link planted there): the entry goes, whatever it points to stays.
    if (::unlinkat(cache.blobs_fd(), id.c_str(), 0) != 0) return fail(sys_error(dir_path, "cannot remove", errno));
    return {};
  }
  UniqueFd dir(::openat(cache.blobs_fd(), id.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return fail(sys_error(dir_path, "cannot open", errno));
  auto data = open_file_at(dir.get(), "data", O_RDONLY, 0, dir_path);
  if (data && !lock_file(data->get(), LOCK_EX | LOCK_NB)) {
    return fail(ErrorCode::Busy, dir_path + ": in use by another process; not removed");
  }
  // Renamed away first, so no process can open a half-deleted blob.
  const std::string trash = ".trash-" + id + "-" + std::to_string(::getpid());
  if (::renameat(cache.blobs_fd(), id.c_str(), cache.blobs_fd(), trash.c_str()) != 0) {
    return fail(sys_error(dir_path, "cannot remove", errno));
  }
  return remove_tree_at(cache.blobs_fd(), trash, cache.blobs_path());
}

Result<void> verify_blob(const CacheDir& cache, const std::string& id) {
  if (id.empty() || id.find('/') != std::string::npos || id.starts_with(".")) {
    return fail(ErrorCode::InvalidArgument, quote_name(id) + " is not a cache blob id");
  }
  const std::string dir_path = cache.blobs_path() + "/" + id;
  auto dir = open_blob_dir(cache, id, false);
  if (!dir) {
    if (dir.error().code == ErrorCode::NotFound) return fail(ErrorCode::NotFound, dir_path + ": no such cache blob");
    return fail(dir.error());
  }
  auto meta = load_meta(dir->get(), dir_path);
  if (!meta) return fail(meta.error());
  if (!*meta) return fail(ErrorCode::Integrity, dir_path + "/meta.json: unreadable; the blob cannot be trusted");
  const std::string data = dir_path + "/data";
  auto fd = open_file_at(dir->get(), "data", O_RDONLY, 0, dir_path);
  if (!fd) return fail(fd.error());
  struct stat st {};
  ::fstat(fd->get(), &st);
  if (static_cast<std::uint64_t>(st.st_size) != (*meta)->size) {
    return fail(ErrorCode::Integrity, data + ": size " + std::to_string(st.st_size) + ", expected " +
                                          std::to_string((*meta)->size));
  }
  if (!(*meta)->complete || !(*meta)->sha256) return {};
  auto h = sha256_of_fd(fd->get(), (*meta)->size, data);
  if (!h) return fail(h.error());
  if (*h != *(*meta)->sha256) {
    auto lock = LockGuard::acquire(dir->get(), dir_path, cache.modes().file);
    if (!lock) return fail(lock.error());
    BlobMeta m = **meta;
    m.extents.clear();
    m.complete = false;
    if (auto w = write_meta(dir->get(), dir_path, m, cache.modes().file); !w) return fail(w.error());
    if (auto rw = reopen_writable(dir->get(), dir_path, fd->get(), cache.modes().file)) punch_out(rw->get(), m.size);
    return fail(ErrorCode::Integrity, data + ": sha256 is " + *h + ", expected " + *(*meta)->sha256 +
                                          "; its extents were discarded");
  }
  return {};
}

}  // namespace tensorfetch::detail
