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

namespace tensorfetch {

using detail::quote_name;

namespace {

Error sys_error(const std::string& path, const std::string& what, int err) {
  return Error{err == ENOENT ? ErrorCode::NotFound : ErrorCode::Io, path + ": " + what + ": " + std::strerror(err)};
}

// Opens the cache blob of remote file `i` and records the bytes `open` already read.
Result<void> ensure_blob(Checkpoint::Impl& impl, std::size_t i) {
  auto& rf = impl.rfiles[i];
  if (rf.blob || !rf.local_path.empty()) return {};
  const auto& file = impl.files[i];
  auto id = detail::blob_identity(rf.resolve_url, rf.linked_etag ? rf.linked_etag : rf.range_etag, file.size);
  auto blob = detail::Blob::open(impl.cache_root, id, file.size, rf.resolve_url, file.etag);
  if (!blob) return fail(blob.error().with_context(file.path));
  const ByteRange head{0, std::min<std::uint64_t>(rf.prefix.size(), file.size)};
  if (head.length > 0 && !(*blob)->has(head)) {
    if (auto w = (*blob)->write_at(0, std::as_bytes(std::span(rf.prefix)).first(head.length)); !w) {
      return fail(w.error().with_context(file.path));
    }
    if (auto c = (*blob)->commit(std::span(&head, 1)); !c) return fail(c.error().with_context(file.path));
  }
  rf.blob = std::move(*blob);
  return {};
}

Result<FetchStats> run_fetch(Checkpoint::Impl& impl, std::vector<std::vector<ByteRange>> wanted,
                             const FetchOptions& options) {
  FetchStats stats;
  if (!impl.remote) return stats;
  std::vector<detail::FetchFile> files;
  for (std::size_t i = 0; i < impl.files.size(); ++i) {
    if (auto r = ensure_blob(impl, i); !r) return fail(r.error());
    auto& rf = impl.rfiles[i];
    if (wanted[i].empty() || !rf.local_path.empty()) continue;  // nothing asked, or in the HF cache
    detail::FetchFile f;
    f.what = impl.files[i].path;
    f.url = impl.files[i].url;
    f.resolve_url = f.url == rf.resolve_url ? std::string() : rf.resolve_url;
    f.if_match = rf.range_etag;
    f.linked_etag = rf.linked_etag;
    f.size = impl.files[i].size;
    f.blob = rf.blob.get();
    f.wanted = std::move(wanted[i]);
    files.push_back(std::move(f));
  }
  detail::FetchSettings settings;
  const auto& o = impl.options;
  settings.http.max_parallel = std::max<std::size_t>(1, options.connections ? options.connections : o.connections);
  settings.http.max_retries = o.max_retries;
  settings.http.backoff_base_ms = o.retry_backoff_ms;
  settings.http.stall_timeout_ms = o.stall_timeout_ms;
  settings.http.connect_timeout_ms = o.connect_timeout_ms;
  settings.http.ca_file = !o.ca_file.empty() ? o.ca_file : [] {
    const char* v = std::getenv("CURL_CA_BUNDLE");
    return v ? std::string(v) : std::string();
  }();
  settings.token = impl.token;
  settings.token_authority = impl.token_authority;
  settings.max_gap = options.coalesce_gap;
  settings.max_chunk = options.chunk_size;
  settings.progress = options.progress;
  auto report = detail::fetch_ranges(files, settings);
  // Expired URLs may have been resolved again: keep the new ones.
  for (const auto& f : files) {
    for (auto& file : impl.files) {
      if (file.path == f.what) file.url = f.url;
    }
  }
  if (!report) return fail(report.error().with_context(impl.location));
  stats.bytes_transferred = report->bytes_transferred;
  stats.bytes_cached = report->bytes_cached;
  stats.requests = report->requests;
  stats.retries = report->retries;
  stats.chunks = report->chunks;
  if (auto r = write_snapshot(impl); !r) return fail(r.error());
  return stats;
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
  const std::string tmp = target + ".tmp-" + std::to_string(::getpid());
  int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return fail(sys_error(tmp, "cannot create", errno));
  bool ok = ::write(out, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(out) == 0;
  int err = errno;
  ::close(out);
  if (!ok || ::rename(tmp.c_str(), target.c_str()) != 0) {
    err = ok ? errno : err;
    ::unlink(tmp.c_str());
    return fail(sys_error(target, "cannot write", err));
  }
  return {};
}

}  // namespace

Result<FetchStats> Checkpoint::fetch(std::span<const Selection> selection, const FetchOptions& options) {
  std::vector<std::vector<ByteRange>> wanted(impl_->files.size());
  for (const auto& s : selection) {
    if (s.ref.file >= impl_->files.size() || s.ref.info == nullptr) {
      return fail(ErrorCode::InvalidArgument, "selection does not belong to this checkpoint");
    }
    const ByteRange base = impl_->headers[s.ref.file].file_range(*s.ref.info);
    for (const auto& r : s.plan.ranges) wanted[s.ref.file].push_back(ByteRange{base.offset + r.offset, r.length});
  }
  return run_fetch(*impl_, std::move(wanted), options);
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

}  // namespace tensorfetch
