// SPDX-License-Identifier: Apache-2.0
// Private: the state behind tensorfetch::Checkpoint, shared by its translation units.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/blob.h"
#include "cache/mapped_file.h"
#include "format/name_index.h"
#include "net/http_client.h"
#include "store/url_signer.h"
#include "tensorfetch/checkpoint.hpp"

namespace tensorfetch {

namespace detail {
class Arrivals;

/// The data connections of a checkpoint (`Checkpoint::Impl::data`): one HTTP client for every
/// fetch, whose idle connections the next fetch reuses, possibly warmed while the open runs
/// (`OpenOptions::warm_connections`) by small requests on a thread of its own. In fetch.cc.
class DataConnections {
 public:
  /// Starts `n` requests of `warm` (one byte each) on a thread, each opening a connection that
  /// `client()` then hands to the first fetch. Failures are ignored: warming is a guess.
  DataConnections(HttpOptions http, HttpRequest warm, std::size_t n);
  /// No warming: the client is made on first use.
  explicit DataConnections(HttpOptions http);
  /// Stops a warm-up still running (within about 100 ms) and joins its thread.
  ~DataConnections();
  DataConnections(const DataConnections&) = delete;
  DataConnections& operator=(const DataConnections&) = delete;

  /// The client, once the warm-up has ended. A warm-up still running is waited for up to
  /// kWarmWait (its connections are further along than new ones would be), or until `cancel`,
  /// then stopped (what it connected stays). Its settings are the caller's to change
  /// (`reconfigure`). Not thread-safe: one fetch at a time.
  [[nodiscard]] HttpClient& client(const CancelToken& cancel);

  /// The longest a fetch waits for warm-ups still running (a server that never answers them).
  static constexpr std::chrono::milliseconds kWarmWait{1000};

 private:
  CancelToken stop_ = CancelToken::make();  // (declared first: the client's settings hold it)
  std::mutex mutex_;
  std::condition_variable warmed_cv_;
  bool warmed_ = false;  // under mutex_
  HttpClient client_;
  std::thread warming_;  // last: starts after the members it uses
};
}

/// A wait a server asked for (`HttpWait`), as the public API reports it (`ServerWait`), its
/// detail described by the hub layer. In remote.cc.
[[nodiscard]] ServerWait server_wait(const detail::HttpWait& wait);

/// Opens a remote checkpoint (Hub repo or http(s) URL) into `impl`. In remote.cc.
/// With `manifest`, the files and headers come from that snapshot manifest text (another
/// process's open, see `Checkpoint::open_manifest`): no request at all.
[[nodiscard]] Result<void> open_remote(Checkpoint::Impl& impl, std::string_view location,
                                       const OpenOptions& options, const std::string* manifest = nullptr);

/// A plain http(s) URL's model config: the `config.json` beside the file or index the location
/// names (one GET, asked once per checkpoint and remembered); nothing when the server has none
/// (404, 410) or the checkpoint is offline. Other answers are errors naming the URL. In remote.cc.
[[nodiscard]] Result<std::optional<std::string>> url_config_json(const Checkpoint::Impl& impl);

/// Opens a local file, index or directory (a checkpoint location on disk); stops between files
/// when `cancel` is cancelled. In checkpoint.cc.
[[nodiscard]] Result<void> open_local(Checkpoint::Impl& impl, const std::string& location,
                                      const CancelToken& cancel = {});

/// Opens a remote checkpoint from the cache alone (a manifest an earlier fetch recorded),
/// without any request. In snapshot.cc.
[[nodiscard]] Result<void> open_offline(Checkpoint::Impl& impl, const std::vector<std::string>& keys);

/// Fills `impl` (files, headers, index, config.json, commit) from the text of a snapshot
/// manifest (`snapshot_text`), without any request; `path` names it in messages. A version 1
/// manifest reads headers from the blobs of `cache` (null: refused). In snapshot.cc.
[[nodiscard]] Result<void> load_snapshot(Checkpoint::Impl& impl, std::string_view text, const std::string& path,
                                         const std::shared_ptr<const detail::CacheDir>& cache);

/// The snapshot manifest of `impl` (JSON: location, commit, index, config.json, every file with
/// its header), as `write_snapshot` records it. In snapshot.cc.
[[nodiscard]] Result<std::string> snapshot_text(const Checkpoint::Impl& impl);

/// Records what `impl` is made of (files, ETags, every header) under its snapshot keys, for
/// offline opens and for skipping header requests at a known commit. In snapshot.cc.
[[nodiscard]] Result<void> write_snapshot(Checkpoint::Impl& impl);

/// Opens, without creating anything, the cache blobs earlier fetches left for the files of
/// `impl` that have none open yet, so that their bytes can be viewed. Each is checked against
/// the bytes the open holds of its file (see `checked_blob`): stale ones are retired and the
/// file left without a blob (a fetch makes a fresh one). In fetch.cc.
void open_existing_blobs(Checkpoint::Impl& impl);

/// The cache blob `blob` just opened for remote file `file`, checked against the bytes the
/// open holds of that file (`RemoteFileState::prefix`: its first window, or its header from a
/// manifest): every byte both hold must agree (of a blob verified against its sha256, which
/// holds what that sha256 names whatever a server claiming it sends, the header only).
/// Returned as it is when they do. When they do
/// not, and `at_open` and the server sent those bytes to this open (`prefix_received`), the
/// cached bytes are stale: the blob is retired (`Blob::retire`; never served again, by any
/// process), `on_stale_cache` is told, and null is returned (a fetch makes a fresh blob).
/// Otherwise -- a header from a snapshot manifest, a blob first met after the open, whose
/// bytes may be the newer ones, or a blob verified against its sha256 -- header and bytes do
/// not belong together: an `Integrity` error naming the file and the byte. In fetch.cc.
[[nodiscard]] Result<std::unique_ptr<detail::Blob>> checked_blob(Checkpoint::Impl& impl, std::size_t file,
                                                                 std::unique_ptr<detail::Blob> blob, bool at_open);

/// Checks selections handed back by the caller before they are used: each must come from this
/// checkpoint (its file and header entry) with a plan inside its tensor whose shape, dtype
/// and byte count agree; else `InvalidArgument` naming the selection. In checkpoint.cc.
[[nodiscard]] Result<void> check_selection(const Checkpoint::Impl& impl, std::span<const Selection> selection);

/// What a remote file needs beyond CheckpointFile, to fetch its bytes.
struct RemoteFileState {
  std::string resolve_url;                  // the URL asked first (resolve URL or direct URL)
  std::optional<std::string> range_etag;    // ETag of the server answering ranges (If-Match)
  std::optional<std::string> linked_etag;   // X-Linked-Etag (the Hub's sha256)
  std::string prefix;                       // first bytes read by open (header and more; from
                                            // a snapshot manifest: the header only)
  bool prefix_received = false;             // `prefix` came from the server during this open (not
                                            // from a manifest): newer than what the cache holds
  std::unique_ptr<detail::Blob> blob;       // opened on first fetch (or offline open); see blob_mutex
  std::optional<Error> blob_error;          // why an existing blob could not be opened (not: absent)
  std::string range_url;                    // where ranges are read now ("" = CheckpointFile::url);
                                            // changes when an expired URL is resolved again
  std::string local_path;                   // a complete copy found in the HF cache, if any
};

/// Everything one safetensors file of an open checkpoint has: what the public API lists, its
/// parsed header, its bytes when they are on disk, and (remote) how to fetch them. Made whole by
/// the open that adds it (one push per file), so nothing about a file can fall out of step.
struct OpenFile {
  CheckpointFile info;        // path (relative to Impl::root), size, ETag, URL, sha256
  Header header;              // validated
  detail::MappedFile map;     // local: the file; remote: the Hugging Face cache's copy, if any
  RemoteFileState remote;     // remote only
};

/// A listed file of a Hub repo that is none of the checkpoint's safetensors files
/// (`Checkpoint::fetch_repo_file`), and how its bytes are fetched. In repo_files.cc.
struct ListedFile {
  RepoFile info;
  std::string resolve_url;                 // at the pinned commit
  std::string url;                         // where ranges are read once resolved ("" = not yet)
  std::optional<std::string> range_etag;   // the ETag of the server answering `url` (If-Match)
  std::optional<std::string> linked_etag;  // LFS files: "\"<sha256>\"", as X-Linked-Etag says it
  std::unique_ptr<detail::Blob> blob;      // opened on first use; never replaced once set
};

/// `Checkpoint::repo_files`' state: the listing, made once, and its other files' fetch state.
struct RepoListing {
  std::mutex fetch_mutex;                       // one listing or fetch_repo_file at a time (taken first)
  std::unique_ptr<detail::HttpClient> client;   // their requests' client (under fetch_mutex), kept
                                                // with its idle connections
  std::mutex mutex;                             // guards what follows
  bool listed = false;
  std::vector<RepoFile> files;                  // in path order
  std::map<std::string, ListedFile> others;     // by path: the files not in `Impl::files`
};

// Hidden: a nested class would otherwise take the exported visibility of Checkpoint.
struct __attribute__((visibility("hidden"))) Checkpoint::Impl {
  std::string location;                          // as given
  std::string root;                              // directory the file names are relative to
  std::string index_name;                        // index file name, when sharded
  std::optional<ShardIndex> index;               // when sharded
  std::vector<OpenFile> files;                   // in index order (one for a single file)
  // `Checkpoint::files()`: a copy of each OpenFile::info (which do not change after open), made
  // on its first call (see listed()), so that callers that never ask (a `get` of a few tensors
  // of 10,000 shards) do not hold every path and URL twice.
  mutable std::once_flag listing_once;
  mutable std::vector<CheckpointFile> listing;
  std::vector<TensorRef> tensors;                // natural name order
  detail::NameIndex by_name;                     // names of `tensors`, to their positions
  bool remote = false;
  std::optional<std::string> commit;             // X-Repo-Commit
  std::optional<std::string> config_json;        // config.json, when found
  std::uint64_t requests = 0;                    // HTTP requests sent by open
  // A plain URL's config.json beside it (url_config_json), once asked: unset until then.
  mutable std::mutex url_config_mutex;
  mutable std::optional<std::optional<std::string>> url_config;  // guarded by url_config_mutex
  // Remote only:
  detail::HttpOptions http;                      // retries, timeouts, CA as open resolved them
  // The open's HTTP client, kept with its idle connections until the checkpoint goes: libcurl
  // 7.88 frees a connection's TLS state without a close_notify, and OpenSSL then marks the
  // session it made not resumable, so closing them would make every fetch connection a full
  // handshake (certificate, signature) instead of resuming that session.
  std::unique_ptr<detail::HttpClient> open_client;
  // The fetches' HTTP client (HTTP/1.1, a TCP connection per transfer), kept between fetches
  // with its idle connections: one connection pool for every fetch of the checkpoint. Made on
  // the first fetch, or by the open when it warms connections (see DataConnections).
  std::unique_ptr<detail::DataConnections> data;
  std::size_t connections = 0;                   // OpenOptions::connections (data transfers; 0: adaptive)
  std::size_t max_connections = 128;             // OpenOptions::max_connections (the adaptive ceiling)
  std::uint64_t max_rate = 0;                    // OpenOptions::max_rate (data transfers; 0: no cap)
  // Guards RemoteFileState::blob and ::range_url of every file: `fetch` sets them while const
  // members (views, write) may read them on other threads.
  mutable std::shared_mutex blob_mutex;
  std::string index_text;                        // the index as received
  std::string token, token_authority, endpoint;  // resolved auth and endpoint
  // An object store (S3, Azure): signs each file's plain URL (CheckpointFile::url, no query)
  // into a presigned one for every request, valid `presign_seconds`; null for other locations.
  std::shared_ptr<const detail::UrlSigner> signer;
  std::int64_t presign_seconds = 3600;
  std::string cache_root;                        // tensorfetch cache
  detail::Sharing cache_sharing = detail::Sharing::Private;  // who may write it
  std::shared_ptr<const detail::CacheDir> cache; // opened on first use (see open_cache)
  std::vector<std::string> snapshot_keys;        // manifest names to record after a fetch
  bool hub = false;                              // a Hub repo (not a plain URL)
  bool offline = false;                          // no requests (HF_HUB_OFFLINE / --offline)
  StaleCacheCallback on_stale_cache;             // OpenOptions::on_stale_cache
  std::string revision;                          // Hub: the revision as given
  std::string canonical_repo;                    // Hub: the name a rename redirect gave ("" = none)
  std::string hf_repo_dir;                       // Hub: HF_HUB_CACHE/models--ORG--NAME
  std::string confine_root;                      // local files must lie inside this directory
                                                 // (links followed only within it; "" = any)
  mutable detail::PrivateMaps private_maps;      // private_view's shared mappings, per file
  std::string hub_repo_path;                     // Hub: `[datasets/]ORG/NAME` as asked (see canonical_repo)
  mutable RepoListing repo;                      // Checkpoint::repo_files and fetch_repo_file

  /// Indexes `tensors` of every header by natural name order; checks the index when sharded.
  [[nodiscard]] Result<void> finish_open();

  /// The bytes of file `file` (a local mapping, or the mapped cache blob), after checking that
  /// every range of `needed` is present (`NotFetched` naming `what` otherwise).
  [[nodiscard]] Result<std::span<const std::byte>> served_bytes(std::size_t file, std::span<const ByteRange> needed,
                                                                const std::string& what) const;

  /// Remote file `file`'s cache blob, mapped, without checking what it holds: for bytes a
  /// running fetch reported written (`Arrivals`). Fails when the file has no blob.
  [[nodiscard]] Result<std::span<const std::byte>> received_bytes(std::size_t file) const;

  /// `range` of file `file` (the local file, or the cache blob) in a private copy-on-write
  /// mapping, under the same check as `served_bytes` (`NotFetched` naming `what`): the file's
  /// shared one (`private_maps`) when every byte on its pages is final, else one of its own.
  [[nodiscard]] Result<detail::PrivateBytes> private_bytes(std::size_t file, ByteRange range,
                                                           const std::string& what) const;

  /// For remote files served from the cache, with `blob_mutex` held (shared) by the caller: the
  /// blob holding every range of `needed` (null when the file has no blob and `needed` is empty),
  /// else `NotFetched` naming `what` (or the error that kept the cache from being read).
  [[nodiscard]] Result<detail::Blob*> blob_holding(std::size_t file, std::span<const ByteRange> needed,
                                                   const std::string& what) const;

  /// The cache, opened on first use; with `create`, made if missing (a fetch), else `NotFound`
  /// when absent (inspecting writes nothing). Refusals (a symlinked or foreign root) are errors.
  [[nodiscard]] Result<std::shared_ptr<const detail::CacheDir>> open_cache(bool create);

  /// The cache identity of remote file `file` (its sha256 and origin when the Hub named one).
  [[nodiscard]] detail::BlobIdentity blob_identity(std::size_t file) const {
    const OpenFile& f = files[file];
    return detail::blob_identity(f.remote.resolve_url, f.remote.linked_etag, f.remote.range_etag, f.info.size);
  }

  /// `listing`, made on the first call; thread-safe.
  [[nodiscard]] const std::vector<CheckpointFile>& listed() const {
    std::call_once(listing_once, [this] {
      listing.reserve(files.size());
      for (const auto& f : files) listing.push_back(f.info);
    });
    return listing;
  }

  /// Where local file `file` is on disk (its name under `root`).
  [[nodiscard]] std::string local_path(std::size_t file) const {
    return root.empty() ? files[file].info.path : root + "/" + files[file].info.path;
  }
};

namespace detail {

/// The data connections a fetch from `authority` (`scheme://host:port`) starts with: the fixed
/// `connections`, else what the cache remembers of the host (hosts.json), else
/// `kInitialConnections`; at most `max_connections`. In fetch.cc.
[[nodiscard]] std::size_t data_connections_to_start(Checkpoint::Impl& impl, std::string_view authority);

/// `Checkpoint::write`. With `arrivals` (a fetch running on another thread, see
/// `Checkpoint::fetch_and_write`), each tensor is written as soon as the fetch has written its
/// bytes, and no file is renamed into place before the fetch succeeded; `stop` (asked while
/// waiting) returning true cancels. In write.cc.
[[nodiscard]] Result<void> write_selection(const Checkpoint::Impl& impl, std::span<const Selection> selection,
                                           const std::string& out, const WriteOptions& options, Arrivals* arrivals,
                                           const std::function<bool()>& stop);

/// `Checkpoint::write_stream`, with `arrivals` and `stop` as `write_selection`. In write.cc.
[[nodiscard]] Result<void> write_selection_stream(const Checkpoint::Impl& impl, std::span<const Selection> selection,
                                                  int fd, const WriteOptions& options, Arrivals* arrivals,
                                                  const std::function<bool()>& stop);

}  // namespace detail

}  // namespace tensorfetch
