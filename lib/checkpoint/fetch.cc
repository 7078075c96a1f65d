// SPDX-License-Identifier: Apache-2.0
// Fetching tensor bytes of a remote checkpoint into the cache, serving views of them, and
// saving whole files (download).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/text.h"
#include "checkpoint/arrivals.h"
#include "checkpoint/checkpoint_internal.h"
#include "fetch/fetcher.h"
#include "base/trace.h"
#include "cache/hosts.h"
#include "hub/hf_cache.h"
#include "hub/location.h"
#include "net/url.h"

namespace tensorfetch {

using detail::quote_name;

namespace detail {

namespace {

// The data client's settings: HTTP/1.1, a connection per transfer; while warming, `n` at once,
// no retries, stopped by `stop`.
HttpOptions data_options(HttpOptions http, std::size_t n, const CancelToken& stop) {
  http.multiplex = false;
  http.max_parallel = std::max<std::size_t>(1, n);
  http.max_retries = 0;
  http.cancel = stop;
  http.on_wait = nullptr;
  return http;
}

}  // namespace

DataConnections::DataConnections(HttpOptions http, HttpRequest warm, std::size_t n)
    : client_(data_options(std::move(http), n, stop_)),
      warming_([this, warm = std::move(warm), n] {
        const std::vector<HttpRequest> requests(n, warm);
        (void)client_.perform(requests);  // failures only mean fewer warm connections
        std::lock_guard lock(mutex_);
        warmed_ = true;
        warmed_cv_.notify_all();
      }) {}

DataConnections::DataConnections(HttpOptions http) : client_(data_options(std::move(http), 1, stop_)) { warmed_ = true; }

DataConnections::~DataConnections() {
  stop_.cancel();
  if (warming_.joinable()) warming_.join();
}

HttpClient& DataConnections::client(const CancelToken& cancel) {
  if (!warming_.joinable()) return client_;
  {
    // In slices, so that a cancelled fetch stops waiting within one.
    const auto deadline = std::chrono::steady_clock::now() + kWarmWait;
    std::unique_lock lock(mutex_);
    while (!warmed_ && !cancel.cancelled() && std::chrono::steady_clock::now() < deadline) {
      warmed_cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
    if (!warmed_) stop_.cancel();
  }
  warming_.join();
  return client_;
}

std::size_t data_connections_to_start(Checkpoint::Impl& impl, std::string_view authority) {
  if (impl.connections != 0) return impl.connections;
  std::size_t n = kInitialConnections;
  if (auto cache = impl.open_cache(false)) {
    if (auto remembered = recall_host(**cache, authority)) n = remembered->connections;
  }
  return std::clamp<std::size_t>(n, 1, std::max<std::size_t>(1, impl.max_connections));
}

}  // namespace detail

namespace {

// Opens the cache blob of remote file `i` (creating it unless offline) and records the bytes
// `open` already read. Offline, a file the cache has no blob of is left without one. With
// `unrecorded`, those bytes are only written, and their range is added there for the caller's
// fetch to record with its first commit (the flushes then overlap the transfers instead of
// delaying the first request by one commit per file).
Result<void> ensure_blob(Checkpoint::Impl& impl, std::size_t i, std::vector<ByteRange>* unrecorded = nullptr) {
  auto& rf = impl.files[i].remote;
  if (!rf.local_path.empty()) return {};
  const auto& file = impl.files[i].info;
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
    // First met now (another process may have filled it since the open): its bytes must agree
    // with the header this open parsed, else they are not served with it.
    auto checked = checked_blob(impl, i, std::move(*blob), false);
    if (!checked) return fail(checked.error());
    std::unique_lock lock(impl.blob_mutex);
    rf.blob = std::move(*checked);
    rf.blob_error.reset();
  }
  if (impl.offline || rf.blob->shared_verified() || rf.blob->complete()) return {};
  const ByteRange head{0, std::min<std::uint64_t>(rf.prefix.size(), file.size)};
  auto held = head.length > 0 ? rf.blob->holds(head) : Result<bool>(true);
  if (!held) return fail(held.error().with_context(file.path));
  if (!*held) {
    if (auto w = rf.blob->write_at(0, std::as_bytes(std::span(rf.prefix)).first(head.length)); !w) {
      return fail(w.error().with_context(file.path));
    }
    if (unrecorded) {
      unrecorded->push_back(head);
    } else if (auto c = rf.blob->commit(std::span(&head, 1)); !c) {
      return fail(c.error().with_context(file.path));
    }
  }
  return {};
}

// The files and settings of a fetch of `wanted` (per file).
struct FetchJob {
  std::vector<detail::FetchFile> files;
  detail::FetchSettings settings;
};

// With `defer_records`, the bytes the open read are written into new blobs but recorded by the
// fetch (FetchFile::unrecorded), which must then run.
Result<FetchJob> make_job(Checkpoint::Impl& impl, std::vector<std::vector<ByteRange>> wanted, const FetchOptions& options,
                          bool defer_records = false) {
  FetchJob job;
  for (std::size_t i = 0; i < impl.files.size(); ++i) {
    auto& rf = impl.files[i].remote;
    // Only files whose bytes are wanted get a cache blob: a few tensors of a repo of thousands
    // of shards touch only the shards that hold them.
    if (wanted[i].empty()) continue;
    std::vector<ByteRange> unrecorded;  // the open's bytes written into a new blob, recorded by the fetch
    if (!options.sink) {
      if (!rf.local_path.empty()) continue;  // the HF cache holds it
      if (auto r = ensure_blob(impl, i, defer_records ? &unrecorded : nullptr); !r) return fail(r.error());
      if (!rf.blob) {  // offline, and never fetched
        const ByteRange& first = wanted[i].front();
        return fail(ErrorCode::NotFetched, impl.location + ": offline (HF_HUB_OFFLINE / --offline), and " +
                                               impl.files[i].info.path + " is not in the cache (bytes " +
                                               std::to_string(first.offset) + "-" +
                                               std::to_string(first.end() - (first.length ? 1 : 0)) + " wanted)");
      }
    }
    detail::FetchFile f;
    f.unrecorded = std::move(unrecorded);
    f.what = impl.files[i].info.path;
    {
      std::shared_lock lock(impl.blob_mutex);
      f.url = rf.range_url.empty() ? impl.files[i].info.url : rf.range_url;
    }
    f.resolve_url = f.url == rf.resolve_url ? std::string() : rf.resolve_url;
    if (impl.signer && !impl.offline) {
      // Signed afresh for every fetch (the chain refreshes temporary credentials); valid for
      // `presign_seconds`. Nothing to resolve again: a 403 is the store's answer.
      auto signed_url = impl.signer->presign(impl.files[i].info.url, detail::unix_now(), impl.presign_seconds);
      if (!signed_url) return fail(signed_url.error().with_context(impl.location));
      f.url = std::move(*signed_url);
      f.resolve_url.clear();
    }
    f.if_match = rf.range_etag;
    f.linked_etag = rf.linked_etag;
    f.size = impl.files[i].info.size;
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
  // Fixed (the fetch's or the open's number), or adaptive from what the cache remembers of the
  // host that serves the first file's data, up to the ceiling.
  if (const std::size_t fixed = options.connections ? options.connections : impl.connections; fixed != 0) {
    settings.http.max_parallel = fixed;
  } else {
    const std::string host = job.files.empty() ? std::string() : detail::url_authority(job.files.front().url);
    settings.http.max_parallel = detail::data_connections_to_start(impl, host);
    settings.max_connections = std::max<std::size_t>(settings.http.max_parallel, impl.max_connections);
  }
  settings.http.max_rate = impl.max_rate;  // one bucket for all connections (the data client's)
  settings.token = impl.token;
  settings.token_authority = impl.token_authority;
  settings.max_gap = options.coalesce_gap;
  settings.overfetch_percent = options.coalesce_overfetch_percent;
  settings.max_chunk = options.chunk_size;
  settings.progress = options.progress;
  if (options.on_wait) settings.on_wait = [cb = options.on_wait](const detail::HttpWait& w) { cb(server_wait(w)); };
  settings.http.cancel = options.cancel;
  return job;
}

// What a fetch tells a reader of its bytes while it runs (fetch_and_write): `ready` once the
// job is made (its files have their blobs; before any transfer), `received` as in FetchSettings.
struct FetchHooks {
  std::function<void(std::span<const detail::FetchFile> files)> ready;
  std::function<void(std::size_t index, ByteRange range)> received;
};

Result<FetchStats> run_fetch(Checkpoint::Impl& impl, std::vector<std::vector<ByteRange>> wanted,
                             const FetchOptions& options, const FetchHooks& hooks = {}) {
  detail::trace::Scope span("fetch", "fetch");
  FetchStats stats;
  if (!impl.remote) return stats;
  auto job = make_job(impl, std::move(wanted), options, !impl.offline);
  if (!job) return fail(job.error());
  job->settings.on_received = hooks.received;
  if (!impl.data) impl.data = std::make_unique<detail::DataConnections>(impl.http);
  job->settings.client = [&impl, cancel = options.cancel] { return &impl.data->client(cancel); };
  if (hooks.ready) hooks.ready(job->files);
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
    for (const auto& f : job->files) impl.files[f.index].remote.range_url = f.url;
  }
  if (!report && impl.signer) {
    Error e = report.error().with_context(impl.location);
    e.message = detail::redact_signed_urls(e.message);  // no signature or session token in messages
    return fail(e);
  }
  if (!report) return fail(report.error().with_context(impl.location));
  stats.bytes_transferred = report->bytes_transferred;
  stats.bytes_cached = report->bytes_cached;
  stats.requests = report->requests;
  stats.retries = report->retries;
  stats.chunks = report->chunks;
  stats.splits = report->splits;
  stats.stragglers = report->stragglers;
  stats.connections = report->connections;
  stats.peak_connections = report->peak_connections;
  // What the adaptive number settled on, measured, is where the next fetch from the host starts
  // (advice only: a cache that cannot take it loses nothing).
  if (report->learned && !job->files.empty()) {
    if (auto cache = impl.open_cache(false)) {
      (void)detail::remember_host(**cache, detail::url_authority(job->files.front().url),
                                  detail::HostMemory{report->connections, report->rate});
    }
  }
  if (!options.sink) {
    if (auto r = write_snapshot(impl); !r) return fail(r.error());
  }
  return stats;
}

std::vector<std::vector<ByteRange>> wanted_ranges(const Checkpoint::Impl& impl, std::span<const Selection> selection) {
  std::vector<std::vector<ByteRange>> wanted(impl.files.size());
  for (const auto& s : selection) {
    const ByteRange base = impl.files[s.ref.file].header.file_range(*s.ref.info);
    for (const auto& r : s.plan.ranges) {
      // An empty tensor (or slice) needs no byte: nothing is asked for it.
      if (r.length > 0) wanted[s.ref.file].push_back(ByteRange{base.offset + r.offset, r.length});
    }
  }
  return wanted;
}

// Creates the directory of `target` (and its parents) as needed and opens it.
Result<detail::UniqueFd> open_parent(const std::string& target) {
  std::error_code ec;
  auto parent = std::filesystem::path(target).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return fail(ErrorCode::Io, parent.string() + ": cannot create directory: " + ec.message());
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  detail::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return fail(detail::sys_error(dir, "cannot open directory", errno));
  return fd;
}

// Links (or copies) `source` to `target` through a temporary name (file and directory fsync'd).
Result<void> place_file(const std::string& source, const std::string& target, bool try_link) {
  auto dir = open_parent(target);
  if (!dir) return fail(dir.error());
  detail::UniqueFd in(::open(source.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return fail(detail::sys_error(source, "cannot open", errno));
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) return fail(detail::sys_error(source, "cannot stat", errno));
  const std::string name = std::filesystem::path(target).filename().string();
  const std::string shown = std::filesystem::path(target).parent_path().string();
  return detail::replace_with_link_or_copy_at(dir->get(), name, source, in.get(), static_cast<std::uint64_t>(st.st_size),
                                              try_link, 0644 & ~detail::current_umask(), shown.empty() ? "." : shown);
}

Result<void> place_text(const std::string& text, const std::string& target) {
  auto dir = open_parent(target);
  if (!dir) return fail(dir.error());
  const std::filesystem::path p(target);
  const std::string shown = p.parent_path().string();
  return detail::write_file_atomically_at(dir->get(), p.filename().string(), text, 0644 & ~detail::current_umask(),
                                          shown.empty() ? "." : shown);
}

}  // namespace

Result<std::shared_ptr<const detail::CacheDir>> Checkpoint::Impl::open_cache(bool create) {
  // An earlier open without `create` may have found the cache half made by another process
  // (blobs/ there, snapshots/ not yet): writing needs both, so open it again.
  if (cache && (!create || cache->complete())) return cache;
  auto opened = detail::CacheDir::open(cache_root, cache_sharing, create);
  if (!opened) return fail(opened.error());
  cache = *opened;
  return cache;
}

Result<std::unique_ptr<detail::Blob>> checked_blob(Checkpoint::Impl& impl, std::size_t i,
                                                   std::unique_ptr<detail::Blob> blob, bool at_open) {
  const OpenFile& f = impl.files[i];
  const RemoteFileState& rf = f.remote;
  if (!blob || rf.prefix.empty()) return blob;
  // Exactly the bytes both hold: the open's window (header, and tensor bytes when it reached
  // them) against the blob's committed extents inside it. A blob verified against its sha256
  // holds what that sha256 names, whatever a server claiming it sends: only its header must be
  // the one parsed (its tensor bytes are served in place of the server's).
  std::uint64_t compared = std::min<std::uint64_t>(rf.prefix.size(), f.info.size);
  if (blob->shared_verified()) compared = std::min(compared, f.header.data_offset());
  const auto n = static_cast<std::size_t>(compared);
  auto diff = blob->first_difference(0, std::as_bytes(std::span(rf.prefix)).first(n));
  if (!diff) return fail(diff.error().with_context(f.info.path));
  if (!*diff) return blob;
  const std::string at = "byte " + std::to_string(**diff);
  // (Without its query: a signed URL's signature stays out of messages and the cache.)
  const std::string& asked = rf.resolve_url.empty() ? f.info.url : rf.resolve_url;
  const std::string url = asked.substr(0, asked.find_first_of("?#"));
  if (at_open && rf.prefix_received && !blob->shared_verified()) {
    const std::string was = blob->id();
    auto retired = blob->retire("from " + at + " they differ from what " + url + " sent under the same identity");
    if (!retired) return fail(retired.error().with_context(f.info.path + ": retiring stale cached bytes"));
    const std::string where = impl.cache ? impl.cache->blobs_path() + "/" + *retired : *retired;
    StaleCache notice{f.info.path, url, **diff, *retired, {}};
    notice.message = f.info.path + ": the cache held other bytes than " + url + " sends now (from " + at +
                     "), under the same ETag and size: the file was rewritten on the server without its ETag "
                     "changing. The stale copy was retired (" + where + ", blob " + was +
                     ") and the file is fetched again";
    if (impl.on_stale_cache) impl.on_stale_cache(notice);
    return std::unique_ptr<detail::Blob>();
  }
  std::string why;
  if (blob->shared_verified()) {
    why = "the header " + url + " sent differs (from " + at + ") from that of the copy verified against its sha256 (" +
          blob->data_path() + "): the server does not serve what its X-Linked-Etag names";
  } else if (!rf.prefix_received) {
    why = "the cached bytes (" + blob->data_path() + ") differ (from " + at +
          ") from its header as the snapshot manifest recorded it: the file changed on the server since; open "
          "it again with network access to read it as it is now";
  } else {
    why = "the cache (" + blob->data_path() + ") now holds other bytes (from " + at + ") than this open read from " +
          url + ": the file changed on the server since it was opened; open it again";
  }
  return fail(ErrorCode::Integrity, f.info.path + ": " + why);
}

void open_existing_blobs(Checkpoint::Impl& impl) {
  // Opening needs no cache (inspecting creates nothing and reads only headers; it writes only to
  // retire stale bytes), so an error here does not fail the open: it is kept per file and is
  // what viewing that file's bytes reports, rather than "not in the cache" (a fetch opens the
  // cache again and reports its own error). A blob that disagrees with the open's window keeps
  // that error too (checked_blob), or, retired, leaves the file without a blob.
  auto cache = impl.open_cache(false);
  if (!cache && cache.error().code == ErrorCode::NotFound) return;  // none yet
  for (std::size_t i = 0; i < impl.files.size(); ++i) {
    auto& rf = impl.files[i].remote;
    if (rf.blob || !rf.local_path.empty()) continue;
    if (!cache) {
      rf.blob_error = cache.error();
      continue;
    }
    auto blob = detail::Blob::open(*cache, impl.blob_identity(i), impl.files[i].info.size, rf.resolve_url,
                                   impl.files[i].info.etag, detail::BlobCreate::No);
    if (blob) blob = checked_blob(impl, i, std::move(*blob), true);
    std::unique_lock lock(impl.blob_mutex);
    if (blob) {
      rf.blob = std::move(*blob);  // (null: stale, retired; a fetch makes a fresh one)
      rf.blob_error.reset();
    } else if (blob.error().code != ErrorCode::NotFound) {
      rf.blob_error = blob.error();  // not "never fetched": the cache could not be read
    }
  }
}

namespace {

// Fetches `selection` on this thread while `write` (on another) writes it out, each tensor as
// soon as its bytes arrived: the output is done moments after the last byte instead of a whole
// copy and flush later. A failed write stops the fetch; a failed fetch stops the write (which
// then renames nothing); the caller's cancel tokens stop both.
Result<FetchStats> fetch_while_writing(
    Checkpoint::Impl& impl, std::span<const Selection> selection, const FetchOptions& fetch, const WriteOptions& write,
    const std::function<Result<void>(detail::Arrivals*, const std::function<bool()>& stop)>& writer) {
  if (fetch.sink) {
    return fail(ErrorCode::InvalidArgument,
                "fetch_and_write: FetchOptions::sink is not supported (the bytes go through the cache)");
  }
  if (auto r = check_selection(impl, selection); !r) return fail(r.error());
  if (!impl.remote) {
    if (auto r = writer(nullptr, {}); !r) return fail(r.error());
    return FetchStats{};
  }
  detail::Arrivals arrivals;
  // The fetch's own token: the writer cancels it when the write fails or the caller cancels.
  const CancelToken fetch_cancel = CancelToken::make();
  const CancelToken user_fetch = fetch.cancel, user_write = write.cancel;
  const std::function<bool()> stop = [&] { return user_fetch.cancelled() || user_write.cancelled(); };
  FetchOptions options = fetch;
  options.cancel = fetch_cancel;
  std::optional<Result<void>> written;
  std::thread writing;
  FetchHooks hooks;
  hooks.ready = [&](std::span<const detail::FetchFile> files) {
    for (const auto& f : files) {
      if (!f.blob) continue;
      // Present for the writer: what the blob records, and the open's bytes the fetch will record.
      detail::RangeSet present = f.blob->extents();
      present.insert(present.end(), f.unrecorded.begin(), f.unrecorded.end());
      arrivals.track(f.index, detail::normalize(std::move(present)));
    }
    writing = std::thread([&] {
      auto r = writer(&arrivals, stop);
      if (!r) fetch_cancel.cancel();
      written = std::move(r);
    });
  };
  hooks.received = [&](std::size_t index, ByteRange range) { arrivals.add(index, range); };
  auto fetched = run_fetch(impl, wanted_ranges(impl, selection), options, hooks);
  arrivals.finish(fetched.has_value());
  if (writing.joinable()) writing.join();
  if (!fetched) {
    // The write's own failure (a full disk, ...) is what stopped the fetch.
    if (written && !*written && fetched.error().code == ErrorCode::Cancelled && !stop()) return fail(written->error());
    return fail(fetched.error());
  }
  if (!written) {  // the job was never made: nothing to wait for
    if (auto r = writer(nullptr, {}); !r) return fail(r.error());
  } else if (!*written) {
    return fail(written->error());
  }
  return fetched;
}

}  // namespace

Result<FetchStats> Checkpoint::fetch(std::span<const Selection> selection, const FetchOptions& options) {
  if (auto r = check_selection(*impl_, selection); !r) return fail(r.error());
  return run_fetch(*impl_, wanted_ranges(*impl_, selection), options);
}

Result<FetchStats> Checkpoint::fetch_and_write(std::span<const Selection> selection, const std::string& out,
                                               const FetchOptions& fetch, const WriteOptions& write) {
  return fetch_while_writing(*impl_, selection, fetch, write,
                             [&](detail::Arrivals* arrivals, const std::function<bool()>& stop) {
                               return detail::write_selection(*impl_, selection, out, write, arrivals, stop);
                             });
}

Result<FetchStats> Checkpoint::fetch_and_write_stream(std::span<const Selection> selection, int fd,
                                                      const FetchOptions& fetch, const WriteOptions& write) {
  return fetch_while_writing(*impl_, selection, fetch, write,
                             [&](detail::Arrivals* arrivals, const std::function<bool()>& stop) {
                               return detail::write_selection_stream(*impl_, selection, fd, write, arrivals, stop);
                             });
}

Result<std::vector<PlannedTransfer>> Checkpoint::plan(std::span<const Selection> selection, const FetchOptions& options) {
  std::vector<PlannedTransfer> out;
  if (auto r = check_selection(*impl_, selection); !r) return fail(r.error());
  if (!impl_->remote) return out;
  const std::int64_t signed_at = detail::unix_now();  // (make_job signs a store's URLs now)
  auto job = make_job(*impl_, wanted_ranges(*impl_, selection), options);
  if (!job) return fail(job.error());
  auto chunks = detail::plan_chunks(job->files, job->settings);
  if (!chunks) return fail(chunks.error());
  for (const auto& c : *chunks) {
    const auto& f = job->files[c.file];
    const bool token = !impl_->token.empty() && detail::url_authority(f.url) == impl_->token_authority;
    const std::int64_t expires = impl_->signer ? impl_->signer->expires_at(signed_at, impl_->presign_seconds) : 0;
    out.push_back(PlannedTransfer{f.index, f.url, c.range, f.if_match, token, expires});
  }
  return out;
}

Result<FetchStats> Checkpoint::fetch_all(const FetchOptions& options) {
  std::vector<std::vector<ByteRange>> wanted(impl_->files.size());
  for (std::size_t i = 0; i < impl_->files.size(); ++i) wanted[i].push_back(ByteRange{0, impl_->files[i].info.size});
  return run_fetch(*impl_, std::move(wanted), options);
}

namespace {

// Refuses a file position outside the checkpoint, or a range outside that file.
Result<void> check_file_range(const Checkpoint::Impl& impl, std::size_t file, ByteRange range) {
  if (file >= impl.files.size()) {
    return fail(ErrorCode::InvalidArgument, impl.location + ": no file " + std::to_string(file) + " (it has " +
                                                std::to_string(impl.files.size()) + ")");
  }
  const std::uint64_t size = impl.files[file].info.size;
  if (range.offset > size || range.length > size - range.offset) {
    return fail(ErrorCode::InvalidArgument, impl.files[file].info.path + ": bytes " + std::to_string(range.offset) +
                                                "-" + std::to_string(range.end()) + " lie outside the file (" +
                                                std::to_string(size) + " bytes)");
  }
  return {};
}

}  // namespace

Result<std::vector<ByteRange>> Checkpoint::cached(std::size_t file) const {
  if (auto r = check_file_range(*impl_, file, {}); !r) return fail(r.error());
  const OpenFile& f = impl_->files[file];
  if (!impl_->remote || !f.remote.local_path.empty()) {
    return std::vector<ByteRange>{ByteRange{0, f.info.size}};
  }
  std::shared_lock lock(impl_->blob_mutex);
  if (!f.remote.blob) {
    if (f.remote.blob_error) return fail(f.remote.blob_error->with_context(f.info.path));
    return std::vector<ByteRange>{};
  }
  if (f.remote.blob->complete()) return std::vector<ByteRange>{ByteRange{0, f.info.size}};
  auto extents = f.remote.blob->refresh();
  if (!extents) return fail(extents.error().with_context(f.info.path));
  return std::move(*extents);
}

Result<FetchStats> Checkpoint::fetch_ranges(std::span<const FileRanges> ranges, const FetchOptions& options) {
  std::vector<std::vector<ByteRange>> wanted(impl_->files.size());
  for (const auto& fr : ranges) {
    for (const auto& r : fr.ranges) {
      if (auto ok = check_file_range(*impl_, fr.file, r); !ok) return fail(ok.error());
      if (r.length > 0) wanted[fr.file].push_back(r);
    }
  }
  return run_fetch(*impl_, std::move(wanted), options);
}

Result<void> Checkpoint::read_cached(std::size_t file, std::uint64_t offset, std::span<std::byte> out) const {
  const ByteRange range{offset, out.size()};
  if (auto r = check_file_range(*impl_, file, range); !r) return fail(r.error());
  if (range.length == 0) return {};  // nothing to read (there may be no blob yet)
  auto bytes = impl_->served_bytes(file, std::span(&range, 1), "bytes " + std::to_string(offset) + "-" +
                                                                  std::to_string(range.end()));
  if (!bytes) {
    // The header, which the open read and validated, is served from memory (no blob may exist yet).
    const OpenFile& f = impl_->files[file];
    const std::uint64_t header_end = f.header.data_offset();
    if (bytes.error().code == ErrorCode::NotFetched && impl_->remote && range.end() <= header_end &&
        range.end() <= f.remote.prefix.size()) {
      std::memcpy(out.data(), f.remote.prefix.data() + offset, out.size());
      return {};
    }
    return fail(bytes.error());
  }
  if (range.end() > bytes->size()) {
    return fail(ErrorCode::Io, impl_->files[file].info.path + ": bytes " + std::to_string(offset) + "-" +
                                   std::to_string(range.end()) + " lie beyond the mapped file");
  }
  if (!out.empty()) std::memcpy(out.data(), bytes->data() + offset, out.size());
  return {};
}

Result<void> Checkpoint::store(std::size_t file, std::uint64_t offset, std::span<const std::byte> bytes) {
  if (auto r = check_file_range(*impl_, file, ByteRange{offset, bytes.size()}); !r) return fail(r.error());
  if (!impl_->remote || !impl_->files[file].remote.local_path.empty()) return {};  // on disk already
  if (auto r = ensure_blob(*impl_, file); !r) return fail(r.error());
  std::shared_lock lock(impl_->blob_mutex);
  auto* blob = impl_->files[file].remote.blob.get();
  if (!blob) {
    return fail(ErrorCode::NotFetched, impl_->files[file].info.path + ": offline, and the file has no cache blob");
  }
  if (blob->shared_verified() || blob->complete()) return {};  // verified whole: never written again
  if (auto r = blob->write_at(offset, bytes); !r) return fail(r.error().with_context(impl_->files[file].info.path));
  return {};
}

Result<void> Checkpoint::commit_stored(std::size_t file, std::span<const ByteRange> ranges) {
  for (const auto& r : ranges) {
    if (auto ok = check_file_range(*impl_, file, r); !ok) return fail(ok.error());
  }
  if (!impl_->remote || !impl_->files[file].remote.local_path.empty()) return {};
  std::shared_lock lock(impl_->blob_mutex);
  auto* blob = impl_->files[file].remote.blob.get();
  if (!blob) {
    return fail(ErrorCode::InvalidArgument, impl_->files[file].info.path + ": nothing was stored into this file");
  }
  if (blob->shared_verified() || blob->complete()) return {};
  if (auto r = blob->commit(ranges); !r) return fail(r.error().with_context(impl_->files[file].info.path));
  return {};
}

Result<void> Checkpoint::save_files(const std::string& dir) const {
  if (dir.find('\0') != std::string::npos) {
    return fail(ErrorCode::InvalidArgument, "directory " + quote_name(dir) + " contains a NUL byte");
  }
  for (std::size_t i = 0; i < impl_->files.size(); ++i) {
    const auto& file = impl_->files[i].info;
    const std::string target = dir + "/" + repo_path(i);
    std::string source;
    bool link = false;
    if (!impl_->remote) {
      source = impl_->local_path(i);
    } else if (!impl_->files[i].remote.local_path.empty()) {
      source = impl_->files[i].remote.local_path;
    } else {
      std::shared_lock lock(impl_->blob_mutex);
      const auto* blob = impl_->files[i].remote.blob.get();
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
  auto texts = text_files();
  if (!texts) return fail(texts.error());
  for (const auto& t : *texts) {
    if (auto r = place_text(t.text, dir + "/" + t.path); !r) return r;
  }
  return {};
}

std::string Checkpoint::repo_path(std::size_t file) const {
  if (file >= impl_->files.size()) return {};
  const auto slash = impl_->index_name.rfind('/');
  const std::string dir = impl_->index && slash != std::string::npos ? impl_->index_name.substr(0, slash + 1) : "";
  return dir + impl_->files[file].info.path;
}

Result<std::vector<CheckpointTextFile>> Checkpoint::text_files() const {
  std::vector<CheckpointTextFile> out;
  if (impl_->index) {
    std::string text = impl_->index_text;
    if (text.empty() && !impl_->remote) {
      auto map = detail::MappedFile::open(impl_->root.empty() ? impl_->index_name : impl_->root + "/" + impl_->index_name);
      if (!map) return fail(map.error());
      text.assign(reinterpret_cast<const char*>(map->bytes().data()), map->size());
    }
    out.push_back({impl_->index_name, std::move(text)});
  }
  if (impl_->config_json) out.push_back({"config.json", *impl_->config_json});
  return out;
}

Result<detail::Blob*> Checkpoint::Impl::blob_holding(std::size_t file, std::span<const ByteRange> needed,
                                                     const std::string& what) const {
  const OpenFile& f = files[file];
  detail::Blob* blob = f.remote.blob.get();
  // The cache could not be read when the blob was looked for: that error, not "not fetched".
  if (!blob && f.remote.blob_error) return fail(f.remote.blob_error->with_context(f.info.path));
  for (const auto& r : needed) {
    if (r.length == 0) continue;  // nothing to hold: an empty tensor needs no byte of the cache
    auto held = blob ? blob->holds(r) : Result<bool>(false);
    if (!held) return fail(held.error().with_context(f.info.path + ": " + what));
    if (!*held) {
      return fail(ErrorCode::NotFetched, f.info.path + ": " + what + " (bytes " + std::to_string(r.offset) + "-" +
                                             std::to_string(r.end()) + ") is not in the cache; fetch it first");
    }
  }
  return blob;
}

Result<std::span<const std::byte>> Checkpoint::Impl::received_bytes(std::size_t file) const {
  std::shared_lock lock(blob_mutex);
  detail::Blob* blob = files[file].remote.blob.get();
  if (!blob) return fail(ErrorCode::NotFetched, files[file].info.path + ": no cache blob to read");
  return blob->map();
}

Result<std::span<const std::byte>> Checkpoint::Impl::served_bytes(std::size_t file, std::span<const ByteRange> needed,
                                                                 const std::string& what) const {
  if (!remote || !files[file].remote.local_path.empty()) return files[file].map.bytes();
  // Only empty ranges (an empty tensor): no byte is needed, so neither is a blob (there may be
  // none yet: nothing of the file was fetched).
  if (std::all_of(needed.begin(), needed.end(), [](const ByteRange& r) { return r.length == 0; })) {
    return std::span<const std::byte>();
  }
  std::shared_lock lock(blob_mutex);
  auto blob = blob_holding(file, needed, what);
  if (!blob) return fail(blob.error());
  if (!*blob) return std::span<const std::byte>();
  return (*blob)->map();
}

Result<detail::PrivateBytes> Checkpoint::Impl::private_bytes(std::size_t file, ByteRange range,
                                                             const std::string& what) const {
  const OpenFile& f = files[file];
  if (!remote || !f.remote.local_path.empty()) {
    if (range.end() > f.map.size()) {
      return fail(ErrorCode::Io, f.info.path + ": " + what + " lies beyond the mapped file");
    }
    const std::string path = remote ? f.remote.local_path : local_path(file);
    return private_maps.get(file, f.map.fd(), f.map.size(), range, path);
  }
  if (range.length == 0) return detail::PrivateBytes{};  // an empty tensor: no byte, no blob needed
  std::shared_lock lock(blob_mutex);  // keeps the blob (and its descriptor) while it is mapped
  auto blob = blob_holding(file, std::span(&range, 1), what);
  if (!blob) return fail(blob.error());
  if (!*blob) return detail::PrivateBytes{};
  if (range.end() > (*blob)->size()) {
    return fail(ErrorCode::Io, f.info.path + ": " + what + " lies beyond the cache blob");
  }
  // The file's shared mapping only when every byte on the range's pages is committed (final):
  // a page copied there by a write keeps the bytes it held, which must never be a neighbour's
  // not yet fetched.
  auto final_pages = (*blob)->holds(detail::page_hull(range, (*blob)->size()));
  if (!final_pages) return fail(final_pages.error().with_context(f.info.path + ": " + what));
  if (*final_pages) return private_maps.get(file, (*blob)->fd(), (*blob)->size(), range, (*blob)->data_path());
  return detail::map_private((*blob)->fd(), range, (*blob)->data_path());
}

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
  auto writer = detail::HfCacheWriter::open(impl.hf_repo_dir);
  if (!writer) return fail(writer.error());
  std::size_t published = 0;
  for (std::size_t i = 0; i < impl.files.size(); ++i) {
    const auto& rf = impl.files[i].remote;
    const auto& file = impl.files[i].info;
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
  const ByteRange range = impl_->files[tensor.file].header.file_range(*tensor.info);
  auto bytes = impl_->served_bytes(tensor.file, std::span(&range, 1), "tensor " + quote_name(tensor.info->name));
  if (!bytes) return fail(bytes.error());
  if (range.length == 0) {  // an empty tensor: no bytes (a remote file may have no blob yet)
    return TensorView{tensor.info->name, tensor.info->dtype, tensor.info->shape, std::span<const std::byte>()};
  }
  if (range.end() > bytes->size()) {
    return fail(ErrorCode::Io, impl_->files[tensor.file].info.path + ": tensor " + quote_name(tensor.info->name) +
                                   " lies beyond the mapped file");
  }
  return TensorView{tensor.info->name, tensor.info->dtype, tensor.info->shape, bytes->subspan(range.offset, range.length)};
}

Result<PrivateTensorView> Checkpoint::private_view(const TensorRef& tensor) const {
  if (tensor.file >= impl_->files.size() || tensor.info == nullptr) {
    return fail(ErrorCode::InvalidArgument, "tensor reference does not belong to this checkpoint");
  }
  const ByteRange range = impl_->files[tensor.file].header.file_range(*tensor.info);
  auto mapped = impl_->private_bytes(tensor.file, range, "tensor " + quote_name(tensor.info->name));
  if (!mapped) return fail(mapped.error());
  return PrivateTensorView{tensor.info->name, tensor.info->dtype, tensor.info->shape, mapped->bytes,
                           std::move(mapped->owner)};
}

Result<void> Checkpoint::read(const Selection& selection, std::span<std::byte> out) const {
  const TensorRef& tensor = selection.ref;
  if (tensor.file >= impl_->files.size() || tensor.info == nullptr) {
    return fail(ErrorCode::InvalidArgument, "tensor reference does not belong to this checkpoint");
  }
  const std::string what = "tensor " + quote_name(tensor.info->name);
  if (out.size() != selection.plan.nbytes) {
    return fail(ErrorCode::InvalidArgument, impl_->files[tensor.file].info.path + ": " + what + ": the selection has " +
                                                std::to_string(selection.plan.nbytes) + " bytes, the buffer " +
                                                std::to_string(out.size()));
  }
  const ByteRange base = impl_->files[tensor.file].header.file_range(*tensor.info);
  std::vector<ByteRange> needed;
  needed.reserve(selection.plan.ranges.size());
  for (const auto& r : selection.plan.ranges) {
    if (r.end() > tensor.info->nbytes()) {
      return fail(ErrorCode::InvalidArgument, impl_->files[tensor.file].info.path + ": " + what + ": a planned range (bytes " +
                                                  std::to_string(r.offset) + "-" + std::to_string(r.end()) +
                                                  ") lies outside the tensor");
    }
    needed.push_back(ByteRange{base.offset + r.offset, r.length});
  }
  auto bytes = impl_->served_bytes(tensor.file, needed, what);
  if (!bytes) return fail(bytes.error());
  std::size_t at = 0;
  for (const auto& r : needed) {
    if (r.length == 0) continue;
    if (r.end() > bytes->size()) {
      return fail(ErrorCode::Io, impl_->files[tensor.file].info.path + ": " + what + " lies beyond the mapped file");
    }
    if (at + r.length > out.size()) {
      return fail(ErrorCode::InvalidArgument, impl_->files[tensor.file].info.path + ": " + what +
                                                  ": the planned ranges exceed the selection's size");
    }
    std::memcpy(out.data() + at, bytes->data() + r.offset, r.length);
    at += r.length;
  }
  return {};
}

}  // namespace tensorfetch
