// SPDX-License-Identifier: Apache-2.0
// Fetching tensor bytes of a remote checkpoint into the cache, serving views of them, and
// saving whole files (download).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_internal.h"
#include "fetch/fetcher.h"
#include "format/json_internal.h"
#include "hub/location.h"

namespace tensorfetch {

using detail::quote_name;

namespace {

Error sys_error(const std::string& path, const std::string& what, int err) {
  return Error{err == ENOENT ? ErrorCode::NotFound : ErrorCode::Io, path + ": " + what + ": " + std::strerror(err)};
}

// Opens the cache blob of remote file `i` (creating it unless offline) and records the bytes
// `open` already read. Offline, a file the cache has no blob of is left without one.
Result<void> ensure_blob(Checkpoint::Impl& impl, std::size_t i) {
  auto& rf = impl.rfiles[i];
  if (!rf.local_path.empty()) return {};
  const auto& file = impl.files[i];
  if (!rf.blob || (rf.blob->shared_verified() && !rf.blob->complete())) {
    // (A verified blob shared by every origin that was discarded since, e.g. by `cache verify`,
    // is never written to: this origin's own blob is used instead.)
    auto cache = impl.open_cache(!impl.offline);
    if (!cache) {
      if (impl.offline && cache.error().code == ErrorCode::NotFound) return {};
      return fail(cache.error().with_context(file.path));
    }
    auto blob = detail::Blob::open(*cache, impl.blob_identity(i), file.size, rf.resolve_url, file.etag,
                                   impl.offline ? detail::BlobCreate::No : detail::BlobCreate::IfMissing);
    if (!blob) {
      if (impl.offline && blob.error().code == ErrorCode::NotFound) return {};
      return fail(blob.error().with_context(file.path));
    }
    std::unique_lock lock(impl.blob_mutex);
    rf.blob = std::move(*blob);
  }
  if (impl.offline || rf.blob->shared_verified() || rf.blob->complete()) return {};
  const ByteRange head{0, std::min<std::uint64_t>(rf.prefix.size(), file.size)};
  if (head.length > 0 && !rf.blob->has(head)) {
    if (auto w = rf.blob->write_at(0, std::as_bytes(std::span(rf.prefix)).first(head.length)); !w) {
      return fail(w.error().with_context(file.path));
    }
    if (auto c = rf.blob->commit(std::span(&head, 1)); !c) return fail(c.error().with_context(file.path));
  }
  return {};
}

// The files and settings of a fetch of `wanted` (per file).
struct FetchJob {
  std::vector<detail::FetchFile> files;
  detail::FetchSettings settings;
};

Result<FetchJob> make_job(Checkpoint::Impl& impl, std::vector<std::vector<ByteRange>> wanted, const FetchOptions& options) {
  FetchJob job;
  for (std::size_t i = 0; i < impl.files.size(); ++i) {
    auto& rf = impl.rfiles[i];
    // Only files whose bytes are wanted get a cache blob: a few tensors of a repo of thousands
    // of shards touch only the shards that hold them.
    if (wanted[i].empty()) continue;
    if (!options.sink) {
      if (!rf.local_path.empty()) continue;  // the HF cache holds it
      if (auto r = ensure_blob(impl, i); !r) return fail(r.error());
      if (!rf.blob) {  // offline, and never fetched
        const ByteRange& first = wanted[i].front();
        return fail(ErrorCode::NotFetched, impl.location + ": offline (HF_HUB_OFFLINE / --offline), and " +
                                               impl.files[i].path + " is not in the cache (bytes " +
                                               std::to_string(first.offset) + "-" +
                                               std::to_string(first.end() - (first.length ? 1 : 0)) + " wanted)");
      }
    }
    detail::FetchFile f;
    f.what = impl.files[i].path;
    {
      std::shared_lock lock(impl.blob_mutex);
      f.url = rf.range_url.empty() ? impl.files[i].url : rf.range_url;
    }
    f.resolve_url = f.url == rf.resolve_url ? std::string() : rf.resolve_url;
    f.if_match = rf.range_etag;
    f.linked_etag = rf.linked_etag;
    f.size = impl.files[i].size;
    f.blob = rf.blob.get();
    f.wanted = std::move(wanted[i]);
    f.index = i;
    if (options.sink) {
      f.sink = [sink = options.sink, i](std::uint64_t offset, std::span<const std::byte> bytes) {
        return sink(i, offset, bytes);
      };
    }
    job.files.push_back(std::move(f));
  }
  auto& settings = job.settings;
  settings.http = impl.http;  // as open resolved them (CA bundle from CURL_CA_BUNDLE, ...)
  settings.http.max_parallel = std::max<std::size_t>(1, options.connections ? options.connections : impl.connections);
  settings.token = impl.token;
  settings.token_authority = impl.token_authority;
  settings.max_gap = options.coalesce_gap;
  settings.max_chunk = options.chunk_size;
  settings.progress = options.progress;
  settings.on_wait = options.on_wait;
  settings.http.cancel = options.cancel;
  return job;
}

Result<FetchStats> run_fetch(Checkpoint::Impl& impl, std::vector<std::vector<ByteRange>> wanted,
                             const FetchOptions& options) {
  FetchStats stats;
  if (!impl.remote) return stats;
  auto job = make_job(impl, std::move(wanted), options);
  if (!job) return fail(job.error());
  if (impl.offline) {
    auto planned = detail::plan_chunks(job->files, job->settings);
    if (!planned) return fail(planned.error());
    if (!planned->empty()) {
      const auto& first = job->files[planned->front().file];
      return fail(ErrorCode::NotFetched, impl.location + ": offline (HF_HUB_OFFLINE / --offline), and " +
                                             std::to_string(planned->size()) + " ranges are not in the cache, e.g. " +
                                             first.what + " bytes " + std::to_string(planned->front().range.offset) +
                                             "-" + std::to_string(planned->front().range.end() - 1));
    }
  }
  auto report = detail::fetch_ranges(job->files, job->settings);
  // Expired URLs may have been resolved again: keep the new ones.
  {
    std::unique_lock lock(impl.blob_mutex);
    for (const auto& f : job->files) impl.rfiles[f.index].range_url = f.url;
  }
  if (!report) return fail(report.error().with_context(impl.location));
  stats.bytes_transferred = report->bytes_transferred;
  stats.bytes_cached = report->bytes_cached;
  stats.requests = report->requests;
  stats.retries = report->retries;
  stats.chunks = report->chunks;
  if (!options.sink) {
    if (auto r = write_snapshot(impl); !r) return fail(r.error());
  }
  return stats;
}

std::vector<std::vector<ByteRange>> wanted_ranges(const Checkpoint::Impl& impl, std::span<const Selection> selection) {
  std::vector<std::vector<ByteRange>> wanted(impl.files.size());
  for (const auto& s : selection) {
    const ByteRange base = impl.headers[s.ref.file].file_range(*s.ref.info);
    for (const auto& r : s.plan.ranges) wanted[s.ref.file].push_back(ByteRange{base.offset + r.offset, r.length});
  }
  return wanted;
}

Result<void> check_selection(const Checkpoint::Impl& impl, std::span<const Selection> selection) {
  for (const auto& s : selection) {
    if (s.ref.file >= impl.files.size() || s.ref.info == nullptr) {
      return fail(ErrorCode::InvalidArgument, "selection does not belong to this checkpoint");
    }
  }
  return {};
}

// Links (or copies) `source` to `target` through a temporary name.
Result<void> place_file(const std::string& source, const std::string& target, bool try_link) {
  std::error_code ec;
  auto parent = std::filesystem::path(target).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return fail(ErrorCode::Io, parent.string() + ": cannot create directory: " + ec.message());
  const std::string tmp = target + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  if (try_link && ::link(source.c_str(), tmp.c_str()) == 0) {
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      int err = errno;
      ::unlink(tmp.c_str());
      return fail(sys_error(target, "cannot rename into place", err));
    }
    return {};
  }
  int in = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return fail(sys_error(source, "cannot open", errno));
  int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    int err = errno;
    ::close(in);
    return fail(sys_error(tmp, "cannot create", err));
  }
  auto cleanup = [&](Error e) {
    ::close(in);
    ::close(out);
    ::unlink(tmp.c_str());
    return fail(std::move(e));
  };
  struct stat st {};
  ::fstat(in, &st);
  std::uint64_t left = static_cast<std::uint64_t>(st.st_size);
  while (left > 0) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, static_cast<std::size_t>(std::min<std::uint64_t>(left, 1 << 30)), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Fall back to read/write (e.g. file systems without copy_file_range).
      std::vector<char> buf(1 << 20);
      ssize_t r = ::read(in, buf.data(), buf.size());
      if (r <= 0) return cleanup(sys_error(source, "cannot read", r < 0 ? errno : EIO));
      for (ssize_t done = 0; done < r;) {
        ssize_t w = ::write(out, buf.data() + done, static_cast<std::size_t>(r - done));
        if (w < 0) return cleanup(sys_error(target, "cannot write", errno));
        done += w;
      }
      n = r;
    }
    left -= static_cast<std::uint64_t>(n);
  }
  if (::fsync(out) != 0) return cleanup(sys_error(target, "fsync failed", errno));
  ::close(in);
  ::close(out);
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail(sys_error(target, "cannot rename into place", err));
  }
  return {};
}

Result<void> place_text(const std::string& text, const std::string& target) {
  std::error_code ec;
  auto parent = std::filesystem::path(target).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return fail(ErrorCode::Io, parent.string() + ": cannot create directory: " + ec.message());
  return detail::write_file_atomically(target, text);
}

}  // namespace

Result<std::shared_ptr<const detail::CacheDir>> Checkpoint::Impl::open_cache(bool create) {
  if (cache && (!create || cache->blobs_fd() >= 0)) return cache;
  auto opened = detail::CacheDir::open(cache_root, cache_sharing, create);
  if (!opened) return fail(opened.error());
  cache = *opened;
  return cache;
}

void open_existing_blobs(Checkpoint::Impl& impl) {
  auto cache = impl.open_cache(false);
  if (!cache) return;  // none yet (or refused: the fetch will say why)
  for (std::size_t i = 0; i < impl.files.size(); ++i) {
    auto& rf = impl.rfiles[i];
    if (rf.blob || !rf.local_path.empty()) continue;
    auto blob = detail::Blob::open(*cache, impl.blob_identity(i), impl.files[i].size, rf.resolve_url,
                                   impl.files[i].etag, detail::BlobCreate::No);
    if (blob) {
      std::unique_lock lock(impl.blob_mutex);
      rf.blob = std::move(*blob);
    }
  }
}

Result<FetchStats> Checkpoint::fetch(std::span<const Selection> selection, const FetchOptions& options) {
  if (auto r = check_selection(*impl_, selection); !r) return fail(r.error());
  return run_fetch(*impl_, wanted_ranges(*impl_, selection), options);
}

Result<std::vector<PlannedTransfer>> Checkpoint::plan(std::span<const Selection> selection, const FetchOptions& options) {
  std::vector<PlannedTransfer> out;
  if (auto r = check_selection(*impl_, selection); !r) return fail(r.error());
  if (!impl_->remote) return out;
  auto job = make_job(*impl_, wanted_ranges(*impl_, selection), options);
  if (!job) return fail(job.error());
  auto chunks = detail::plan_chunks(job->files, job->settings);
  if (!chunks) return fail(chunks.error());
  for (const auto& c : *chunks) {
    const auto& f = job->files[c.file];
    const bool token = !impl_->token.empty() && detail::url_authority(f.url) == impl_->token_authority;
    out.push_back(PlannedTransfer{f.index, f.url, c.range, f.if_match, token});
  }
  return out;
}

Result<FetchStats> Checkpoint::fetch_all(const FetchOptions& options) {
  std::vector<std::vector<ByteRange>> wanted(impl_->files.size());
  for (std::size_t i = 0; i < impl_->files.size(); ++i) wanted[i].push_back(ByteRange{0, impl_->files[i].size});
  return run_fetch(*impl_, std::move(wanted), options);
}

Result<void> Checkpoint::save_files(const std::string& dir) const {
  const std::string index_dir = [&] {
    auto slash = impl_->index_name.rfind('/');
    return slash == std::string::npos ? std::string() : impl_->index_name.substr(0, slash + 1);
  }();
  for (std::size_t i = 0; i < impl_->files.size(); ++i) {
    const auto& file = impl_->files[i];
    const std::string target = dir + "/" + index_dir + file.path;
    std::string source;
    bool link = false;
    if (!impl_->remote) {
      source = impl_->local_path(i);
    } else if (!impl_->rfiles[i].local_path.empty()) {
      source = impl_->rfiles[i].local_path;
    } else {
      std::shared_lock lock(impl_->blob_mutex);
      const auto* blob = impl_->rfiles[i].blob.get();
      if (!blob || !blob->complete()) {
        return fail(ErrorCode::NotFetched, file.path + ": not completely in the cache; fetch it first");
      }
      source = blob->data_path();
      link = true;
    }
    struct stat a {}, b {};
    if (::stat(source.c_str(), &a) == 0 && ::stat(target.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
      continue;  // already that very file
    }
    if (auto r = place_file(source, target, link); !r) return r;
  }
  if (impl_->index) {
    std::string text = impl_->index_text;
    if (text.empty() && !impl_->remote) {
      auto map = detail::MappedFile::open(impl_->root.empty() ? impl_->index_name : impl_->root + "/" + impl_->index_name);
      if (!map) return fail(map.error());
      text.assign(reinterpret_cast<const char*>(map->bytes().data()), map->size());
    }
    if (auto r = place_text(text, dir + "/" + impl_->index_name); !r) return r;
  }
  if (impl_->config_json) {
    if (auto r = place_text(*impl_->config_json, dir + "/config.json"); !r) return r;
  }
  return {};
}

Result<std::span<const std::byte>> Checkpoint::Impl::served_bytes(std::size_t file, std::span<const ByteRange> needed,
                                                                 const std::string& what) const {
  if (!remote || !rfiles[file].local_path.empty()) return maps[file].bytes();
  std::shared_lock lock(blob_mutex);
  const auto& blob = rfiles[file].blob;
  for (const auto& r : needed) {
    if (!blob || !blob->has(r)) {
      return fail(ErrorCode::NotFetched, files[file].path + ": " + what + " (bytes " + std::to_string(r.offset) + "-" +
                                             std::to_string(r.end()) + ") is not in the cache; fetch it first");
    }
  }
  if (!blob) return std::span<const std::byte>();
  return blob->map();
}

namespace {

// The Hugging Face cache of one repo (models--ORG--NAME), written as huggingface_hub lays it
// out. Everything below that directory is reached with O_NOFOLLOW from directory descriptors,
// and every name comes from a checked string (a 40-hex commit, a sha256, a checked revision and
// shard names), so nothing lands outside it; modes follow the umask, as huggingface_hub's do.
struct HfCacheWriter {
  detail::UniqueFd root;
  std::string root_path;
  mode_t dir_mode = 0755;
  mode_t file_mode = 0644;

  static Result<HfCacheWriter> open(const std::string& repo_dir) {
    HfCacheWriter w;
    const mode_t um = detail::current_umask();
    w.dir_mode = 0777 & ~um;
    w.file_mode = 0666 & ~um;
    w.root_path = repo_dir;
    auto fd = detail::open_root_dir(repo_dir, true, w.dir_mode);
    if (!fd) return fail(fd.error().with_context("the Hugging Face cache"));
    w.root = std::move(*fd);
    return w;
  }

  // The directory `rel` below the repo directory, created as needed.
  Result<detail::UniqueFd> dir(const std::string& rel) const {
    return detail::open_dir_at(root.get(), rel, root_path, true, dir_mode);
  }

  // blobs/NAME from the file at `source` (hard link, else a copy of `source_fd`), unless a
  // regular file of that size is there.
  Result<void> blob(const std::string& name, const std::string& source, int source_fd, std::uint64_t size) const {
    auto blobs = dir("blobs");
    if (!blobs) return fail(blobs.error());
    struct stat st {};
    if (::fstatat(blobs->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::uint64_t>(st.st_size) == size) {
      return {};
    }
    const std::string shown = root_path + "/blobs/" + name;
    const std::string tmp = name + ".tmp-" + std::to_string(::getpid());
    ::unlinkat(blobs->get(), tmp.c_str(), 0);
    if (::linkat(AT_FDCWD, source.c_str(), blobs->get(), tmp.c_str(), 0) != 0) {
      auto out = detail::open_file_at(blobs->get(), tmp, O_WRONLY | O_CREAT | O_EXCL, file_mode, root_path + "/blobs");
      if (!out) return fail(out.error());
      for (std::uint64_t done = 0; done < size;) {
        off_t in_off = static_cast<off_t>(done);
        const ssize_t n = ::copy_file_range(source_fd, &in_off, out->get(), nullptr,
                                            static_cast<std::size_t>(std::min<std::uint64_t>(size - done, 1 << 30)), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          std::vector<char> buf(1 << 20);
          const ssize_t r = ::pread(source_fd, buf.data(), std::min<std::size_t>(buf.size(), size - done),
                                    static_cast<off_t>(done));
          if (r <= 0 || ::write(out->get(), buf.data(), static_cast<std::size_t>(r)) != r) {
            const int err = r < 0 ? errno : EIO;
            ::unlinkat(blobs->get(), tmp.c_str(), 0);
            return fail(sys_error(shown, "cannot copy " + source + " here", err));
          }
          done += static_cast<std::uint64_t>(r);
          continue;
        }
        done += static_cast<std::uint64_t>(n);
      }
      if (::fsync(out->get()) != 0) {
        const int err = errno;
        ::unlinkat(blobs->get(), tmp.c_str(), 0);
        return fail(sys_error(shown, "fsync failed", err));
      }
    }
    if (::renameat(blobs->get(), tmp.c_str(), blobs->get(), name.c_str()) != 0) {
      const int err = errno;
      ::unlinkat(blobs->get(), tmp.c_str(), 0);
      return fail(sys_error(shown, "cannot rename into place", err));
    }
    return {};
  }

  // blobs/NAME holding `text`.
  Result<void> small_blob(const std::string& name, const std::string& text) const {
    auto blobs = dir("blobs");
    if (!blobs) return fail(blobs.error());
    struct stat st {};
    if (::fstatat(blobs->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::uint64_t>(st.st_size) == text.size()) {
      return {};
    }
    return detail::write_file_atomically_at(blobs->get(), name, text, file_mode, root_path + "/blobs");
  }

  // snapshots/COMMIT/PATH -> ../../(..)/blobs/NAME, a relative symlink replaced atomically.
  Result<void> link(const std::string& commit, const std::string& path, const std::string& name) const {
    if (auto r = detail::check_relative_path(path, "file name in the repo"); !r) return r;
    const auto slash = path.rfind('/');
    const std::string parent = "snapshots/" + commit + (slash == std::string::npos ? "" : "/" + path.substr(0, slash));
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    auto d = dir(parent);
    if (!d) return fail(d.error());
    std::string target;
    for (std::size_t i = 0, n = 2 + static_cast<std::size_t>(std::count(path.begin(), path.end(), '/')); i < n; ++i) {
      target += "../";
    }
    target += "blobs/" + name;
    const std::string tmp = base + ".tmp-" + std::to_string(::getpid());
    ::unlinkat(d->get(), tmp.c_str(), 0);
    if (::symlinkat(target.c_str(), d->get(), tmp.c_str()) != 0 ||
        ::renameat(d->get(), tmp.c_str(), d->get(), base.c_str()) != 0) {
      const int err = errno;
      ::unlinkat(d->get(), tmp.c_str(), 0);
      return fail(sys_error(root_path + "/" + parent + "/" + base, "cannot create symlink", err));
    }
    return {};
  }

  // refs/REVISION holding the commit.
  Result<void> ref(const std::string& revision, const std::string& commit) const {
    if (auto r = detail::check_revision(revision); !r) return r;
    const auto slash = revision.rfind('/');
    auto d = dir(slash == std::string::npos ? std::string("refs") : "refs/" + revision.substr(0, slash));
    if (!d) return fail(d.error());
    return detail::write_file_atomically_at(d->get(), slash == std::string::npos ? revision : revision.substr(slash + 1),
                                            commit, file_mode, root_path + "/refs");
  }
};

}  // namespace

Result<std::size_t> Checkpoint::publish_to_hf_cache() const {
  const Impl& impl = *impl_;
  if (!impl.remote || !impl.hub || !impl.commit) {
    return fail(ErrorCode::InvalidArgument,
                impl.location + ": only Hub repos (with a commit) can be published into the Hugging Face cache");
  }
  if (impl.hf_repo_dir.empty()) return fail(ErrorCode::InvalidArgument, "no Hugging Face cache directory (set HF_HOME)");
  const std::string& commit = *impl.commit;
  if (auto r = detail::check_path_component(commit, "commit"); !r || commit.size() != 40) {
    return fail(ErrorCode::BadResponse, impl.location + ": commit " + quote_name(commit) + " is not a commit id");
  }
  const auto slash = impl.index_name.rfind('/');
  const std::string dir = impl.index && slash != std::string::npos ? impl.index_name.substr(0, slash + 1) : "";
  auto writer = HfCacheWriter::open(impl.hf_repo_dir);
  if (!writer) return fail(writer.error());
  std::size_t published = 0;
  for (std::size_t i = 0; i < impl.files.size(); ++i) {
    const auto& rf = impl.rfiles[i];
    const auto& file = impl.files[i];
    const auto sha = detail::sha256_of_linked_etag(rf.linked_etag);
    if (!sha) continue;  // huggingface_hub names LFS blobs by sha256; without one, skip
    if (!rf.local_path.empty()) {
      // Read from the Hugging Face cache: its blob is there already; the snapshot link may not be.
    } else if (std::shared_lock lock(impl.blob_mutex); rf.blob && rf.blob->complete() && rf.blob->fd() >= 0) {
      if (auto r = writer->blob(*sha, rf.blob->data_path(), rf.blob->fd(), file.size); !r) return fail(r.error());
    } else {
      continue;  // not whole in the cache
    }
    if (auto r = writer->link(commit, dir + file.path, *sha); !r) return fail(r.error());
    ++published;
  }
  auto small_file = [&](const std::string& text, const std::string& path) -> Result<void> {
    const std::string name = detail::git_blob_sha1(text);
    if (auto r = writer->small_blob(name, text); !r) return r;
    return writer->link(commit, path, name);
  };
  if (impl.index && !impl.index_text.empty()) {
    if (auto r = small_file(impl.index_text, impl.index_name); !r) return fail(r.error());
  }
  if (impl.config_json) {
    if (auto r = small_file(*impl.config_json, "config.json"); !r) return fail(r.error());
  }
  if (impl.revision != commit) {
    if (auto r = writer->ref(impl.revision, commit); !r) return fail(r.error());
  }
  return published;
}

Result<TensorView> Checkpoint::view(const TensorRef& tensor) const {
  if (tensor.file >= impl_->files.size() || tensor.info == nullptr) {
    return fail(ErrorCode::InvalidArgument, "tensor reference does not belong to this checkpoint");
  }
  const ByteRange range = impl_->headers[tensor.file].file_range(*tensor.info);
  auto bytes = impl_->served_bytes(tensor.file, std::span(&range, 1), "tensor " + quote_name(tensor.info->name));
  if (!bytes) return fail(bytes.error());
  if (range.end() > bytes->size()) {
    return fail(ErrorCode::Io, impl_->files[tensor.file].path + ": tensor " + quote_name(tensor.info->name) +
                                   " lies beyond the mapped file");
  }
  return TensorView{tensor.info->name, tensor.info->dtype, tensor.info->shape, bytes->subspan(range.offset, range.length)};
}

Result<void> Checkpoint::read(const Selection& selection, std::span<std::byte> out) const {
  const TensorRef& tensor = selection.ref;
  if (tensor.file >= impl_->files.size() || tensor.info == nullptr) {
    return fail(ErrorCode::InvalidArgument, "tensor reference does not belong to this checkpoint");
  }
  const std::string what = "tensor " + quote_name(tensor.info->name);
  if (out.size() != selection.plan.nbytes) {
    return fail(ErrorCode::InvalidArgument, impl_->files[tensor.file].path + ": " + what + ": the selection has " +
                                                std::to_string(selection.plan.nbytes) + " bytes, the buffer " +
                                                std::to_string(out.size()));
  }
  const ByteRange base = impl_->headers[tensor.file].file_range(*tensor.info);
  std::vector<ByteRange> needed;
  needed.reserve(selection.plan.ranges.size());
  for (const auto& r : selection.plan.ranges) {
    if (r.end() > tensor.info->nbytes()) {
      return fail(ErrorCode::InvalidArgument, impl_->files[tensor.file].path + ": " + what + ": a planned range (bytes " +
                                                  std::to_string(r.offset) + "-" + std::to_string(r.end()) +
                                                  ") lies outside the tensor");
    }
    needed.push_back(ByteRange{base.offset + r.offset, r.length});
  }
  auto bytes = impl_->served_bytes(tensor.file, needed, what);
  if (!bytes) return fail(bytes.error());
  std::size_t at = 0;
  for (const auto& r : needed) {
    if (r.end() > bytes->size()) {
      return fail(ErrorCode::Io, impl_->files[tensor.file].path + ": " + what + " lies beyond the mapped file");
    }
    if (at + r.length > out.size()) {
      return fail(ErrorCode::InvalidArgument, impl_->files[tensor.file].path + ": " + what +
                                                  ": the planned ranges exceed the selection's size");
    }
    std::memcpy(out.data() + at, bytes->data() + r.offset, r.length);
    at += r.length;
  }
  return {};
}

}  // namespace tensorfetch
