// SPDX-License-Identifier: Apache-2.0
// Private: executes a fetch plan. Byte ranges of remote files are transferred over one libcurl
// multi client, N transfers at once, each on a TCP connection of its own (HTTP/1.1: a CDN caps
// every flow), each chunk streamed straight into its cache blob at its offset. Chunks are about
// total / N, so every connection works; when a connection runs out of work while another is
// far from done, the running transfer is shortened and the rest of its range handed to the idle
// one; a connection far slower than the others (a straggler) does not hold a slot. A committer
// thread makes received bytes durable and records them while transfers go on.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/blob.h"
#include "fetch/flow_control.h"
#include "net/http_client.h"
#include "tensorfetch/progress.hpp"

namespace tensorfetch::detail {

/// One remote file to fetch ranges of.
struct FetchFile {
  std::string what;                     ///< its name in messages (repo path)
  std::string url;                      ///< where ranges are read (the CDN URL after redirects)
  std::string resolve_url;              ///< asked again when `url` expires (403/410); "" = never
  std::optional<std::string> if_match;  ///< ETag of the server answering `url`
  std::optional<std::string> linked_etag;  ///< X-Linked-Etag (must not change on re-resolve)
  std::uint64_t size = 0;               ///< file size
  Blob* blob = nullptr;                 ///< destination (unless `sink`)
  /// Bytes already written into `blob` but not yet recorded as present (the open's first read):
  /// counted as held by the plan, and recorded with the fetch's first commit.
  std::vector<ByteRange> unrecorded;
  std::vector<ByteRange> wanted;        ///< byte ranges the caller wants present
  /// Instead of the blob: every wanted byte goes here (the cache is neither read nor written).
  /// Return false to cancel.
  std::function<bool(std::uint64_t offset, std::span<const std::byte> bytes)> sink;
  std::size_t index = 0;                ///< position in Checkpoint::files(), for progress
};

/// How to fetch.
struct FetchSettings {
  /// Retries, timeouts, TLS, cancel; `max_parallel`: the connections (fixed), or with
  /// `max_connections` the number to start with.
  HttpOptions http;
  /// > 0: the number of connections adapts while the fetch runs (see FlowControl), from
  /// `http.max_parallel` up to this ceiling. 0: always `http.max_parallel`.
  std::size_t max_connections = 0;
  std::string token;                 ///< bearer token (re-resolves only, to `token_authority`)
  std::string token_authority;       ///< scheme://host[:port] allowed to receive the token
  std::uint64_t max_gap = 1 << 20;   ///< coalesce holes up to this size...
  /// ...while the holes fetched add up to at most this percentage of the missing bytes (or
  /// `max_gap`, if more); the smallest holes first (see `coalesce_within`).
  std::uint32_t overfetch_percent = 1;
  /// Transfers are split into chunks of about (bytes to transfer) / connections, at most this
  /// (0: no limit) and at least `min_chunk`.
  std::uint64_t max_chunk = 64 << 20;
  std::uint64_t min_chunk = 512 << 10;  ///< smallest chunk the split above makes
  /// Received bytes are handed to the committer every this many bytes of a transfer (and at its
  /// end): a crash loses at most this much per connection.
  std::uint64_t commit_piece = 8 << 20;
  /// Rebalancing: a transfer is split for an idle connection only when it would still run at
  /// least this long (and 4 first-byte waits), and never into pieces smaller than `min_split`.
  /// The bytes already on their way past the cut (socket buffers: megabytes on a fast link) are
  /// read for nothing, which only a long remainder pays for.
  double min_split_seconds = 1.0;
  std::uint64_t min_split = 256 << 10;
  /// A straggler (a transfer at under a third of the typical rate, receiving for 0.3 s; or
  /// under half of it when the queue is empty) is split whenever a connection may be added and
  /// it would still run 2 first-byte waits: its socket holds few bytes, so the cut wastes
  /// little, and neither `min_split_seconds` nor `min_split` applies; its pieces are at least
  /// this.
  std::uint64_t min_straggler_split = 64 << 10;
  std::uint64_t commit_bytes = 64 << 20;  ///< commit when this much is waiting...
  long commit_interval_ms = 500;          ///< ...or this long has passed
  std::function<bool(const FetchProgress&)> progress;     ///< false: cancel
  std::function<void(const HttpWait&)> on_wait;           ///< a server asked for a wait
  /// Told, on the fetch's thread, of every range written to a blob (`FetchFile::index`), as soon
  /// as it is written (before it is durable): a reader can copy it out of the page cache while
  /// the rest arrives. Not for files with a sink.
  std::function<void(std::size_t index, ByteRange range)> on_received;
  /// The client to run on, reconfigured to `http` (multiplex off) and its idle connections
  /// reused, e.g. a checkpoint's kept between fetches. Called once, and only when there is
  /// something to transfer (it may wait for connections being opened); unset or null: a new
  /// client for this fetch.
  std::function<HttpClient*()> client;
};

/// What a fetch did.
struct FetchReport {
  std::uint64_t bytes_transferred = 0;  ///< body bytes received into blobs
  std::uint64_t bytes_cached = 0;       ///< wanted bytes that were already present
  std::uint64_t requests = 0;           ///< HTTP requests (hops and retries included)
  std::uint64_t retries = 0;
  std::size_t chunks = 0;               ///< planned transfers
  std::size_t re_resolves = 0;          ///< expired URLs resolved again
  std::size_t splits = 0;               ///< running transfers split for an idle connection
  std::size_t stragglers = 0;           ///< transfers found far slower than the others
  std::size_t connections = 0;          ///< connections the fetch ran at the end (its target)
  std::size_t peak_connections = 0;     ///< most transfers in flight at once
  /// Adaptive: the number was measured to be right for the path (not fixed, not cut short by the
  /// work running out or a server pushing back), with `rate` the aggregate it carried.
  bool learned = false;
  double rate = 0;                      ///< aggregate bytes per second at `connections`, if measured
};

/// One planned transfer: `range` of `files[file]`.
struct PlannedChunk {
  std::size_t file = 0;
  ByteRange range;
};

/// The transfers `fetch_ranges` would make: wanted minus what the blobs hold (unless the file
/// has a sink), coalesced and split. Also returns the wanted bytes already present.
[[nodiscard]] Result<std::vector<PlannedChunk>> plan_chunks(std::span<FetchFile> files, const FetchSettings& settings,
                                                            std::uint64_t* bytes_cached = nullptr);

/// Makes `wanted` of every file present in its blob: plans (cache subtracted, coalesced,
/// split), transfers in parallel, commits durably. Files whose whole content ends up present
/// are verified (sha256) and marked complete. On error, what was received completely is still
/// committed (a re-run resumes), and the error names the file, URL and byte range.
[[nodiscard]] Result<FetchReport> fetch_ranges(std::span<FetchFile> files, const FetchSettings& settings);

}  // namespace tensorfetch::detail
