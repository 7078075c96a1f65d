// SPDX-License-Identifier: Apache-2.0
/// @file
/// The public object: a checkpoint (one safetensors file or a sharded set with its index),
/// its tensors, selection by name or glob, zero-copy views and writing a subset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorfetch/cancel.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"
#include "tensorfetch/format.hpp"
#include "tensorfetch/index.hpp"
#include "tensorfetch/progress.hpp"
#include "tensorfetch/slice.hpp"
#include "tensorfetch/tp.hpp"

namespace tensorfetch {

/// One safetensors file of a checkpoint. A plain value owned by its `Checkpoint`.
struct CheckpointFile {
  std::string path;                 ///< name relative to the checkpoint (repo path, shard name)
  std::uint64_t size = 0;           ///< file size in bytes
  std::optional<std::string> etag;  ///< remote files: the pinned ETag (the sha256 for Hub LFS files)
  std::string url;                  ///< remote files: where byte ranges are read (after redirects)
  /// Remote files: the content's sha256 as the Hub names it (`X-Linked-Etag`), against which
  /// the file is verified when it has been fetched whole. Unset when nothing names it (a plain
  /// URL, a small git file): whole files are then checked by size and ETag only.
  std::optional<std::string> sha256;
};

/// A server asked tensorfetch to wait before it retries (HTTP 429 or 503 with `Retry-After` or
/// `RateLimit`; the Hub's rate limits use a fixed 5-minute window, so waits of minutes are
/// normal). A plain value, valid during the callback.
struct ServerWait {
  std::string url;      ///< the URL that answered
  int status = 0;       ///< 429 or 503
  double seconds = 0;   ///< how long the retry waits
  std::string detail;   ///< what the server said, e.g. "(0 of 3000 requests left in the ... window)"
};

/// Told about a wait (see `ServerWait`), on the thread that runs the open or fetch. A
/// cancellation (`CancelToken`) still ends the wait within about 100 ms.
using ServerWaitCallback = std::function<void(const ServerWait&)>;

/// The cache held bytes of a remote file that differ from the bytes its server sent to this
/// open, under the same identity (URL, ETag and size): the file was rewritten without its ETag
/// changing (nginx's ETag, for one, is the modification time in seconds and the size). Those
/// cached bytes were retired -- never served again, by any process -- and the file is fetched
/// afresh. A plain value, valid during the callback.
struct StaleCache {
  std::string file;          ///< the file's path in the checkpoint
  std::string url;           ///< where the open read it (without its query)
  std::uint64_t offset = 0;  ///< the first byte that differed
  std::string blob;          ///< the retired blob's name under the cache's `blobs/` (see `cache_list`)
  std::string message;       ///< all of the above in one line, for a user
};

/// Told about stale cached bytes (see `StaleCache`), on the thread that runs the open.
using StaleCacheCallback = std::function<void(const StaleCache&)>;

/// Data connections an adaptive fetch starts with when nothing is remembered of the host (see
/// `OpenOptions::connections`): 32, the fixed number of earlier versions, which carried 2.1x
/// what aria2c's 16 did on a CDN capping each flow; the first growth doubles it.
inline constexpr std::size_t kInitialConnections = 32;

/// The smallest non-zero `OpenOptions::max_rate`: 1 KiB/s.
inline constexpr std::uint64_t kMinMaxRate = 1024;

/// How to open a checkpoint. Defaults come from the environment, as the Hugging Face tools
/// read it. A plain value.
struct OpenOptions {
  /// Hub endpoint; empty: `$HF_ENDPOINT`, else `https://huggingface.co`. An endpoint (or any
  /// URL) with a space or a control character is refused (`InvalidArgument`).
  std::string endpoint;
  /// Access token; unset: `$HF_TOKEN`, else `$HUGGING_FACE_HUB_TOKEN`, else the file
  /// `$HF_TOKEN_PATH` (default `$HF_HOME/token`; HF_HOME defaults to
  /// `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`; surrounding whitespace is
  /// ignored). Sent as `Authorization: Bearer` to the endpoint host only. A token with a
  /// control character (CR, LF, ...) or a space is refused on open (`InvalidArgument`, naming
  /// its source, never the token).
  std::optional<std::string> token;
  /// CA bundle for TLS; empty: `$CURL_CA_BUNDLE`, else the system's. Verification is always on.
  std::string ca_file;
  /// Bytes asked for by the first range request of each file (W); a shard named by an index
  /// asks for less when the index says its header is smaller (its tensors' names + 160 bytes
  /// each, + 8 KiB, a quarter more; at least 16 KiB). A second request follows only when the
  /// header is larger.
  std::uint64_t header_window = 256 << 10;
  /// Parallel HTTP transfers of tensor data, each on its own TCP connection, fixed at this
  /// number. 0 (the default): the number adapts to the path while each fetch runs. It starts at
  /// `kInitialConnections` (or at what an earlier fetch from the same host settled on, kept in
  /// the cache's `hosts.json`), grows while new connections raise the aggregate rate (a CDN
  /// capping each TCP flow), stops growing when they do not (one flow filling the link needs no
  /// second), never beyond `max_connections`, and halves when the server pushes back (a 429 or
  /// 503, a refused, reset or stalled connection). See `FetchStats::connections`.
  std::size_t connections = 0;
  /// The most data connections toward one host when `connections` is 0 (adaptive): 128, because
  /// on a CDN capping each flow aria2c at its best settings (`-x16 -s16 -j4 -k1M`) runs 64
  /// flows on a 4-file checkpoint, beating it needs more, and 128 flows of 2 MiB/s still fill a
  /// 2 Gbit/s link; a path that cannot carry more stops the growth long before.
  std::size_t max_connections = 128;
  /// Open the data connections (`connections`, or the number the fetch will start with) while
  /// the open reads the index and headers, for
  /// a caller that fetches right after (`tensorfetch get` and `download` do): the first fetch's
  /// requests then go out on connections whose TCP and TLS handshakes are done, instead of
  /// waiting for them after the headers arrived. For a URL location only, toward its host
  /// unless that is the Hub endpoint; each connection is opened by one small request (a GET of
  /// the location's first byte, redirects not followed). Lost when the data lies elsewhere.
  /// The first fetch waits for warm-ups still running, at most 1 s, then stops them.
  bool warm_connections = false;
  /// Parallel HTTP transfers while reading headers on open: small requests, so every shard of
  /// a large checkpoint can be asked for at once (one round trip for all of them).
  std::size_t header_connections = 64;
  /// Retries of a failed request (429, 5xx, dropped or stalled connection).
  int max_retries = 5;
  /// First retry backoff in milliseconds (doubles, jittered).
  long retry_backoff_ms = 250;
  /// A transfer that receives nothing for this long is retried.
  long stall_timeout_ms = 30'000;
  /// Slowest acceptable transfer, in bytes per second, averaged over each window of
  /// `stall_timeout_ms`: a transfer slower than this (a server dripping bytes) is abandoned and
  /// retried from the last byte received; after `max_retries` it fails (`Network`) naming the
  /// URL, the byte range and the rate seen. 0: only a window without any byte fails.
  std::uint64_t min_rate = 1024;
  /// Cap on the bandwidth of every fetch of this checkpoint, in bytes per second, shared by all
  /// its connections together (not per connection), so that a loader leaves room for the
  /// node's other traffic. 0 (the default): no cap; otherwise at least `kMinMaxRate` (else
  /// `open` fails with `InvalidArgument`). Applies to tensor data (`fetch`, `fetch_all`,
  /// `fetch_ranges`, `fetch_and_write`, ...), whose connections share one token bucket for the
  /// checkpoint's life: a transfer that finds it empty is paused (the kernel's flow control then
  /// slows the server) and paused transfers resume in turn as it refills, so over a fetch the
  /// rate is the cap, within a tenth of a second's worth of bytes. Time paused by the cap counts
  /// neither toward `stall_timeout_ms` nor against `min_rate`. The open's own reads (headers,
  /// index, config.json: kilobytes per file) are not capped.
  std::uint64_t max_rate = 0;
  /// Connect (TCP + TLS) timeout.
  long connect_timeout_ms = 10'000;
  /// Root of the tensorfetch cache; empty: `$TENSORFETCH_CACHE`, else
  /// `$XDG_CACHE_HOME/tensorfetch`, else `~/.cache/tensorfetch`.
  std::string cache_dir;
  /// No network at all: open from what earlier fetches recorded in the cache (or from a
  /// Hugging Face cache snapshot). Unset: true when `$HF_HUB_OFFLINE` (else
  /// `$TRANSFORMERS_OFFLINE`) is `1`, `true`, `yes` or `on`.
  std::optional<bool> offline;
  /// The Hugging Face hub cache, whose files are used instead of downloading them; empty:
  /// `$HF_HUB_CACHE`, else `$HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`.
  std::string hf_hub_cache;
  /// A cache shared by the members of a group: true accepts cache directories owned by other
  /// users and writable by their group (never by all users), and creates directories 02770 and
  /// files 0660 (complete blobs 0440), so every member trusts every other member's bytes. False
  /// (private, the default): the cache must be the user's own and writable by no one else;
  /// directories 0700, files 0600 (complete blobs 0400). Unset: true when
  /// `$TENSORFETCH_SHARED_CACHE` is `1`, `true`, `yes` or `on`.
  std::optional<bool> shared_cache;
  /// Stops the open when cancelled (`Cancelled`), also in the middle of a stalled request.
  /// Applies to `open` only; fetches and writes take their own token.
  CancelToken cancel;
  /// Told when a server asks the open to wait (a rate limit); unset: nobody is told.
  ServerWaitCallback on_wait;
  /// A location without a scheme is always a local path, never a Hub repo id: the Hub must be
  /// named `hf://ORG/NAME`. False (the CLI's way): a bare `ORG/NAME` that is no local path is
  /// a Hub repo. The Python API sets it, as `safetensors.safe_open` reads a string as a path,
  /// so a missing file is `NotFound` without any request.
  bool bare_names_are_paths = false;
  /// Told when the open finds cached bytes of a file stale (see `StaleCache`); unset: nobody
  /// is told (they are retired all the same).
  StaleCacheCallback on_stale_cache;
  /// S3 (`s3://` locations): the endpoint, e.g. `http://127.0.0.1:9000` for MinIO or a test
  /// server (path-style addressing); empty: `$AWS_ENDPOINT_URL_S3`, else `$AWS_ENDPOINT_URL`, else
  /// the profile's `endpoint_url`, else AWS's own (`https://BUCKET.s3.REGION.amazonaws.com`).
  std::string s3_endpoint;
  /// S3 and Azure: send unsigned requests (a public bucket or container), as the AWS CLI's
  /// `--no-sign-request`; no credentials are looked for.
  bool s3_no_sign_request = false;
  /// S3 and Azure: how long the presigned URLs (the SAS made with an Azure account key) of
  /// requests and of `Checkpoint::plan` stay valid, in seconds (1 to 604800, SigV4's limit;
  /// temporary credentials may end them sooner).
  std::int64_t s3_presign_seconds = 3600;
};

/// Receives fetched bytes instead of the cache (see `FetchOptions::sink`): `bytes` of file
/// `file` (position in `Checkpoint::files()`) starting at byte `offset` of that file. Pieces of
/// one transfer arrive in order; transfers run in parallel, so pieces of different ranges
/// interleave. Return false to cancel the fetch.
using ByteSink = std::function<bool(std::size_t file, std::uint64_t offset, std::span<const std::byte> bytes)>;

/// A transfer a download manager can make itself (see `Checkpoint::plan`). A plain value.
struct PlannedTransfer {
  std::size_t file = 0;                 ///< position in `Checkpoint::files()`
  std::string url;                      ///< GET this URL (a signed CDN URL may expire: 403)
  ByteRange range;                      ///< with `Range: bytes=offset-(offset+length-1)`
  std::optional<std::string> if_match;  ///< send as `If-Match`; expect `206` and this exact range
  bool send_token = false;              ///< the URL is on the endpoint's host: send the token
  /// A presigned URL (S3) or a URL with a SAS (Azure): when it stops working, in seconds since the epoch (it needs no
  /// credentials until then); 0: no stated end.
  std::int64_t expires_at = 0;
};

/// How to fetch tensor bytes. A plain value.
struct FetchOptions {
  /// Two wanted ranges of a file separated by a hole of at most this many bytes are fetched
  /// as one request (H), within `coalesce_overfetch_percent`.
  std::uint64_t coalesce_gap = 1 << 20;
  /// The holes coalescing fetches add up to at most this percentage of the bytes to fetch (but
  /// may always add up to 64 KiB, or `coalesce_gap` if smaller): the smallest holes are joined first, the others stay
  /// separate requests. So a fetch of many small pieces with small holes between them (e.g. a
  /// row-parallel slice: one range per row) moves at most 1% more than it needs, at the cost
  /// of more requests; a fetch whose holes add up to little coalesces them all.
  std::uint32_t coalesce_overfetch_percent = 1;
  /// Transfers are split into chunks of about (bytes to transfer) / connections, so that every
  /// connection works on a fetch large or small, but of at most this many bytes (C; and at
  /// least 512 KiB unless C is smaller). An idle connection also takes over the tail of a
  /// running transfer that would finish last (see `FetchStats::splits`).
  std::uint64_t chunk_size = 64 << 20;
  /// Parallel transfers, each on a TCP connection of its own (HTTP/1.1; a CDN caps each flow),
  /// fixed at this number; a connection far slower than the others does not count (up to a
  /// quarter more run then). 0: `OpenOptions::connections` (0 there: adaptive).
  std::size_t connections = 0;
  /// Called on the fetching thread at most every 100 ms and at the end; return false to
  /// cancel (the fetch then fails with `Cancelled`; what arrived whole is kept).
  std::function<bool(const FetchProgress&)> progress;
  /// When set, the bytes go to this callback (called on the fetching thread) instead of the
  /// cache: every wanted byte is transferred, nothing is read from or written to the cache, and
  /// views of those tensors stay unavailable.
  ByteSink sink;
  /// Stops the fetch when cancelled (`Cancelled`) within about 100 ms, also while transfers are
  /// stalled or waiting to be retried; what arrived whole stays committed in the cache.
  CancelToken cancel;
  /// Told when a server asks the fetch to wait (a rate limit); `progress` is also called then,
  /// with `FetchProgress::waiting_seconds` set.
  ServerWaitCallback on_wait;
};

/// What a fetch did. A plain value.
struct FetchStats {
  std::uint64_t bytes_transferred = 0;  ///< bytes received over the network
  std::uint64_t bytes_cached = 0;       ///< wanted bytes already in the cache
  std::uint64_t requests = 0;           ///< HTTP requests sent (retries included)
  std::uint64_t retries = 0;            ///< of which retries
  std::size_t chunks = 0;               ///< planned transfers
  std::size_t splits = 0;               ///< running transfers shortened to hand their tail to an idle connection
  std::size_t stragglers = 0;           ///< transfers found far slower than the others (their work taken over)
  /// The data connections the fetch ran at the end: the fixed number, or where the adaptive
  /// number settled (0 when nothing was transferred).
  std::size_t connections = 0;
  std::size_t peak_connections = 0;     ///< most transfers in flight at once
};

/// A tensor of a checkpoint: its header entry and the file that holds it.
struct TensorRef {
  const TensorInfo* info = nullptr;  ///< entry in the file's header (owned by the Checkpoint)
  std::size_t file = 0;              ///< position in `Checkpoint::files()`
};

/// Bytes of one tensor. The views point into memory owned by the `Checkpoint` (a read-only
/// mmap of the local file or of its cache blob) and are valid until it is destroyed.
struct TensorView {
  std::string_view name;                 ///< the tensor's name
  DType dtype = DType::U8;               ///< element type
  std::span<const std::uint64_t> shape;  ///< dimensions
  std::span<const std::byte> bytes;      ///< row-major data; empty (data() null) for an empty tensor
};

/// Bytes of one tensor in a private copy-on-write mapping of the local file or of its cache blob
/// (see `Checkpoint::private_view`), for callers that hand out writable tensors (as PyTorch's
/// `UntypedStorage.from_file(..., shared=False)` does for safetensors). `bytes` may be written:
/// a write copies the page it touches into the process's anonymous memory and never reaches the
/// file, the cache blob, `view`s or other `Checkpoint`s. Pages never written stay the page
/// cache's (no copy, no anonymous memory). `owner` keeps the mapping: `bytes` stay valid while a
/// copy of it lives, also after the `Checkpoint` is destroyed; `name` and `shape` point into the
/// `Checkpoint` and are valid until it is destroyed. Movable and copyable (copies share the
/// mapping); writing it from several threads needs the caller's own synchronization.
struct PrivateTensorView {
  std::string_view name;                 ///< the tensor's name
  DType dtype = DType::U8;               ///< element type
  std::span<const std::uint64_t> shape;  ///< dimensions
  std::span<std::byte> bytes;            ///< row-major data, writable (copy-on-write)
  std::shared_ptr<void> owner;           ///< owns the mapping (null for an empty tensor)
};

/// What to select: a name or glob (fnmatch syntax, `*` also matches `.`), and optionally a
/// slice applied to every tensor it matches.
struct Selector {
  std::string pattern;             ///< exact name, or a glob when it contains `*?[`
  std::optional<SliceSpec> slice;  ///< slice of the leading dimensions, if any
};

/// A selected tensor, possibly sliced: its source and the plan of its bytes.
struct Selection {
  TensorRef ref;                          ///< the source tensor
  std::optional<SliceSpec> slice;         ///< as given
  SlicePlan plan;                         ///< shape and byte ranges within the tensor
};

/// Byte ranges of one file of a checkpoint (see `Checkpoint::fetch_ranges`). A plain value.
struct FileRanges {
  std::size_t file = 0;            ///< position in `Checkpoint::files()`
  std::vector<ByteRange> ranges;   ///< byte ranges of the whole file (header included)
};

/// A small file of a checkpoint's directory beside its safetensors files: the index, or the
/// repo's `config.json` (see `Checkpoint::text_files`). A plain value.
struct CheckpointTextFile {
  std::string path;  ///< where it lies in the checkpoint's directory (repo path), e.g. `config.json`
  std::string text;  ///< its bytes, as read from the server or the disk
};

/// One file of a checkpoint's directory: of the pinned revision of a Hub repo, any file (see
/// `Checkpoint::repo_files`). A plain value.
struct RepoFile {
  std::string path;                    ///< its repo path, `/`-separated, e.g. `tokenizer.json`
  std::uint64_t size = 0;              ///< its size in bytes
  std::optional<std::string> sha256;   ///< LFS/Xet files: the content's sha256 (64 hex digits)
  std::optional<std::string> git_oid;  ///< the git blob id (40 hex digits) the Hub names, if any
  /// Its position in `Checkpoint::files()` when it is one of the checkpoint's safetensors files.
  std::optional<std::size_t> checkpoint_file;
};

/// Options for `Checkpoint::write`.
struct WriteOptions {
  /// Write one file per source shard and an index into the output *directory*, instead of
  /// one file.
  bool sharded_output = false;
  /// Entries added to the source's `__metadata__` (replacing those with the same key) in every
  /// file written, e.g. the rank, world and rule of a tensor-parallel selection.
  Metadata metadata;
  /// Stops the write when cancelled (`Cancelled`): temporary files are removed, nothing is
  /// renamed into place. A stream keeps the bytes already written to it.
  CancelToken cancel;
};

/// A checkpoint opened from a local file or directory.
///
/// Locations: a `.safetensors` file; a `*.safetensors.index.json` file; a directory holding
/// `model.safetensors`, else `model.safetensors.index.json`, else the diffusers layouts
/// (`transformer/`, `unet/`, `diffusion_pytorch_model*`). Every file's header is validated
/// on open, and for a sharded checkpoint the index must agree with the shards exactly.
///
/// Thread-safety: after `open` returns, all const members may be called concurrently (also
/// while one thread runs `fetch`).
///
/// Errors: no member throws (allocation failure aside). Selections given to `fetch`, `plan`,
/// `write` and `write_stream` must come from `select` on this object: a tensor reference from
/// elsewhere, or a plan that disagrees with its tensor, is refused (`InvalidArgument`). Paths
/// with a NUL byte are refused (`InvalidArgument`).
/// Move-only; views handed out stay valid until the object is destroyed.
class TENSORFETCH_API Checkpoint {
 public:
  /// Opens and validates a checkpoint: local files are mapped read-only; remote ones (Hub repos,
  /// http(s) URLs of a file or an index) are read from their headers alone, in the fewest
  /// round trips: one range request per file, all files at once.
  [[nodiscard]] static Result<Checkpoint> open(std::string_view location, const OpenOptions& options = {});

  /// Opens a remote checkpoint from the snapshot manifest another process's open made
  /// (`manifest()`), without any request: its files, URLs, ETags, headers, index and
  /// config.json are the manifest's. `location` and `options` must be those of that open
  /// (endpoint, token, cache); fetches then go to the origin as usual. A local location is
  /// `InvalidArgument`; a manifest that does not parse is `Io`.
  [[nodiscard]] static Result<Checkpoint> open_manifest(std::string_view location, std::string_view manifest,
                                                        const OpenOptions& options = {});

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  /// The location as given to `open`.
  [[nodiscard]] const std::string& location() const noexcept;
  /// True when opened through an index.
  [[nodiscard]] bool sharded() const noexcept;
  /// The index, when sharded.
  [[nodiscard]] const std::optional<ShardIndex>& index() const noexcept;
  /// True when the files are remote (no bytes are mapped locally).
  [[nodiscard]] bool remote() const noexcept;
  /// The commit the Hub named (`X-Repo-Commit`) and every file was read at, if any.
  [[nodiscard]] const std::optional<std::string>& commit() const noexcept;
  /// The repo's `config.json`, when there is one (Hub repos and directories).
  [[nodiscard]] const std::optional<std::string>& config_json() const noexcept;
  /// Requests sent while opening (remote: every hop and retry; local or offline: 0).
  [[nodiscard]] std::uint64_t requests() const noexcept;
  /// The safetensors files, in index order (one for a single file).
  [[nodiscard]] const std::vector<CheckpointFile>& files() const noexcept;
  /// Header of file `file` (a position in `files()`), or nullptr when there is no such file.
  [[nodiscard]] const Header* header(std::size_t file) const noexcept;
  /// Every tensor, in natural name order (`layers.2` before `layers.10`).
  [[nodiscard]] const std::vector<TensorRef>& tensors() const noexcept;
  /// The tensor with exactly this name, or nullptr.
  [[nodiscard]] const TensorRef* find(std::string_view name) const;

  /// Resolves selectors to tensors, in natural name order without duplicates (a tensor
  /// matched by two selectors with different slices is an error). A selector matching
  /// nothing is `NotFound`; an invalid slice is reported with the tensor's name.
  [[nodiscard]] Result<std::vector<Selection>> select(std::span<const Selector> selectors) const;

  /// What tensor parallelism reads from the model's `config.json` (see tensorfetch/tp.hpp): the
  /// one `open` found (a Hub repo's, a directory's), else, for a local file or index, the one
  /// beside it, and for a plain http(s) URL the one beside it on the server (one request, made
  /// by the first call and remembered; a 404 means none); nothing when there is none. A `config.json` that is not a JSON object
  /// with a `model_type` is `InvalidArgument`.
  [[nodiscard]] Result<std::optional<TpModel>> tp_model() const;

  /// The selections of rank `rank` of a tensor-parallel group of `world` ranks: for every
  /// tensor (or, when `only` is not empty, every tensor its names and globs match; slices are
  /// refused there), the slice that rank holds under the Megatron/vLLM convention for the
  /// model's `config.json` (`tp_model()`), with `rules` deciding first. Tensors
  /// another rank holds whole (other ranks' experts, with `rules.expert_parallel`) are left
  /// out; replicated tensors are whole. A layout neither the convention nor the rules can split
  /// is `Unsplittable`, naming the tensor; a bad rank or world, or a bad `config.json`,
  /// `InvalidArgument`.
  [[nodiscard]] Result<std::vector<Selection>> select_for_rank(std::size_t rank, std::size_t world,
                                                               const TpRules& rules = {},
                                                               std::span<const Selector> only = {}) const;

  /// A zero-copy view of a whole tensor. For a remote checkpoint the tensor's bytes must have
  /// been fetched (into the cache, by this or any process): else `NotFetched`. Only bytes
  /// committed to the cache are ever handed out. An empty tensor (a zero in its shape) needs
  /// no byte: its view is served at once (empty bytes), remote or not, fetched or not.
  [[nodiscard]] Result<TensorView> view(const TensorRef& tensor) const;

  /// A writable, zero-copy view of a whole tensor in a private copy-on-write mapping (see
  /// `PrivateTensorView`): writes through it change neither the file nor the cache nor `view`s.
  /// Private views of one `Checkpoint` share one mapping per file, as safetensors' torch tensors
  /// of one file share one storage: a write is seen by later private views of the same tensor.
  /// Except for a remote tensor whose first or last page also holds bytes not yet in the cache:
  /// it gets a mapping of its own (seen by no other view), so that a page copied on write never
  /// keeps a neighbour's bytes from before they were fetched. Served under the same rules as
  /// `view` (remote: `NotFetched` unless its bytes are committed in the cache). Each mapping of
  /// its own is one memory area of the process (Linux: `vm.max_map_count`, 65530 by default);
  /// past that, `Io`. Thread-safe like `view`.
  [[nodiscard]] Result<PrivateTensorView> private_view(const TensorRef& tensor) const;

  /// Copies the bytes of one selection (a whole tensor, or the byte ranges of its slice,
  /// concatenated in row-major order: the `plan.shape` tensor) into `out`, which must hold
  /// exactly `selection.plan.nbytes` bytes (else `InvalidArgument`). For a remote checkpoint
  /// every range must have been fetched (by this or any process; else `NotFetched`), so a slice
  /// can be read without its whole tensor. Safe to call from several threads, also while one
  /// runs `fetch`.
  [[nodiscard]] Result<void> read(const Selection& selection, std::span<std::byte> out) const;

  /// Makes the selected tensors' bytes (only the slices' byte ranges, for sliced selections)
  /// present in the local cache: what the cache lacks is planned (coalesced, split into chunks)
  /// and transferred over parallel connections, then committed durably. A no-op for local
  /// checkpoints. Not to be called concurrently with another `fetch` on the same object;
  /// const members may run meanwhile.
  [[nodiscard]] Result<FetchStats> fetch(std::span<const Selection> selection, const FetchOptions& options = {});

  /// Fetches every file whole (a download); each is verified against its sha256 when the
  /// server named one, and marked complete.
  [[nodiscard]] Result<FetchStats> fetch_all(const FetchOptions& options = {});

  /// The transfers `fetch(selection, options)` would make, without making them: the selected
  /// byte ranges minus what the cache holds (unless `options.sink` is set), coalesced and split
  /// into chunks. For download managers that schedule transfers themselves. Empty for local
  /// checkpoints. Not concurrently with `fetch`.
  [[nodiscard]] Result<std::vector<PlannedTransfer>> plan(std::span<const Selection> selection,
                                                          const FetchOptions& options = {});

  /// The snapshot manifest of a remote checkpoint: JSON text recording its location, commit,
  /// index, config.json and every file (size, URLs, ETags, header), as fetches record it in the
  /// cache for offline opens. For `open_manifest` in another process. Local: `InvalidArgument`.
  [[nodiscard]] Result<std::string> manifest() const;

  /// The byte ranges of file `file` present in the cache (committed by any process), normalized;
  /// a local file, or one read from the Hugging Face cache: the whole file. Thread-safe.
  [[nodiscard]] Result<std::vector<ByteRange>> cached(std::size_t file) const;

  /// Makes exactly these byte ranges present in the cache (what it lacks is transferred, holes up
  /// to `options.coalesce_gap` coalesced, as `fetch` does); whole files are verified and
  /// marked complete. A range outside its file is `InvalidArgument`. Not concurrently with `fetch`.
  [[nodiscard]] Result<FetchStats> fetch_ranges(std::span<const FileRanges> ranges, const FetchOptions& options = {});

  /// Copies bytes `offset .. offset + out.size()` of file `file` from the local file or the
  /// cache into `out`; every byte must be committed (else `NotFetched`), except the file's
  /// header (its first 8 + N bytes), which the open read and validated and which is served
  /// from memory when the cache does not hold it. Thread-safe.
  [[nodiscard]] Result<void> read_cached(std::size_t file, std::uint64_t offset, std::span<std::byte> out) const;

  /// Writes bytes of file `file` at `offset` that another process fetched from this
  /// checkpoint's origin (and passed on, e.g. over MPI) into this process's cache blob, made
  /// if missing (the bytes `open` read are recorded in it first; `bytes` may be empty for just
  /// that). Not yet recorded as present: `commit_stored` does that after they are durable. A
  /// no-op for local files and for blobs already complete. Not concurrently with `fetch`.
  [[nodiscard]] Result<void> store(std::size_t file, std::uint64_t offset, std::span<const std::byte> bytes);

  /// Makes every stored byte of file `file` durable, then records `ranges` as present (the
  /// fetcher's rule: written, flushed, then recorded). Fetching or `fetch_all` afterwards
  /// verifies whole files. Not concurrently with `fetch`.
  [[nodiscard]] Result<void> commit_stored(std::size_t file, std::span<const ByteRange> ranges);

  /// Where file `file` (a position in `files()`) lies in the checkpoint's directory: its repo
  /// path (the index's folder, then its shard name), as `save_files` and `tensorfetch mount`
  /// name it; empty when there is no such file. Thread-safe.
  [[nodiscard]] std::string repo_path(std::size_t file) const;

  /// The checkpoint's small files beside its safetensors files, as the directory or repo holds
  /// them: the index (when sharded) under its repo path, and `config.json` when `open` found
  /// one. A local index is read from the disk (`Io` when it cannot be). Thread-safe.
  [[nodiscard]] Result<std::vector<CheckpointTextFile>> text_files() const;

  /// Every file of the checkpoint's directory. For a Hub repo (online), every file of the
  /// pinned commit with its size and hashes, as the Hub lists them in one request (`GET
  /// {endpoint}/api/{models|datasets}/{repo}/revision/{commit}?blobs=true`, made by the first
  /// call and remembered; a listing that disagrees with the files the open read is
  /// `BadResponse`). Otherwise (local, plain URLs, object stores, offline): the safetensors
  /// files and `text_files()`. In repo path order. Thread-safe.
  [[nodiscard]] Result<std::vector<RepoFile>> repo_files() const;

  /// Makes `ranges` of a file `repo_files()` listed present in the cache, for the files that are
  /// neither in `files()` nor `text_files()` (a tokenizer, a README, another format's weights).
  /// The file's first fetch resolves it (its first range goes through `/resolve/` at the pinned
  /// commit; the answer must name that commit, the listed size and, for LFS files, the listed
  /// sha256, else `Integrity`); later ones ask the server that answered, at its ETag
  /// (`If-Match`), over the checkpoint's data settings. A file present whole is verified (its
  /// sha256, else its git blob id) and marked complete; a mismatch is `Integrity` and nothing
  /// of it is served. A path not listed is `NotFound`; a range outside the file
  /// `InvalidArgument`; offline, bytes the cache lacks are `NotFetched`. Thread-safe (fetches of
  /// these files run one at a time; `fetch` and `fetch_ranges` may run meanwhile).
  [[nodiscard]] Result<FetchStats> fetch_repo_file(const std::string& path, std::span<const ByteRange> ranges,
                                                   const FetchOptions& options = {});

  /// The byte ranges of listed file `path` (see `fetch_repo_file`) present in the cache,
  /// normalized (any process's commits). Thread-safe.
  [[nodiscard]] Result<std::vector<ByteRange>> repo_file_cached(const std::string& path) const;

  /// Copies bytes `offset .. offset + out.size()` of listed file `path` (see
  /// `fetch_repo_file`) from the cache into `out`; every byte must be committed, else
  /// `NotFetched`. Thread-safe.
  [[nodiscard]] Result<void> read_repo_file_cached(const std::string& path, std::uint64_t offset,
                                                   std::span<std::byte> out) const;

  /// Publishes every file that is complete and verified in the cache into the Hugging Face hub
  /// cache (`OpenOptions::hf_hub_cache`), as huggingface_hub lays it out:
  /// `models--ORG--NAME/blobs/<sha256>` (hard link or copy), `snapshots/<commit>/<path>` (a
  /// relative symlink), `refs/<revision>`, plus the index and config.json, so that transformers
  /// finds them with `HF_HUB_OFFLINE=1`. Hub repos only (`InvalidArgument` otherwise). Returns
  /// the number of safetensors files published.
  [[nodiscard]] Result<std::size_t> publish_to_hf_cache() const;

  /// Saves every file of the checkpoint into `dir`, named as in the repo: the safetensors
  /// files, the index, and `config.json` when there is one. Remote files must have been
  /// fetched whole (`fetch_all`); they are hard-linked from the cache (read-only) when it is
  /// on the same file system, else copied. Files appear complete or not at all.
  [[nodiscard]] Result<void> save_files(const std::string& dir) const;

  /// Writes the selection as a new valid safetensors file at `out` (or, with
  /// `sharded_output`, a directory of shards named as the source plus an index).
  /// `__metadata__` of the source is kept. Time and memory are linear in the tensors written.
  ///
  /// A regular file (new, or existing: replaced) is written under a temporary name beside it,
  /// flushed to disk and renamed into place, so a failed or cancelled write never leaves a file
  /// that looks complete; a symbolic link is followed (its target is replaced; a link to
  /// nothing is refused). An existing FIFO or character device (`/dev/null`, a terminal,
  /// `/dev/stdout` when that is a pipe) is written in place as a stream, as `write_stream`
  /// does, and is never replaced. Other targets (directories, sockets, block devices) are
  /// refused with `InvalidArgument`, and so are streams in a `sharded_output` directory.
  [[nodiscard]] Result<void> write(std::span<const Selection> selection, const std::string& out,
                                   const WriteOptions& options = {}) const;

  /// Writes the selection as one safetensors file to the open descriptor `fd` (a pipe, FIFO,
  /// terminal, socket, `/dev/null`, or a regular file at its current offset), as a stream: the
  /// bytes go out in file order and nothing is renamed; on failure or cancellation the bytes
  /// already written stay written. The descriptor stays the caller's (not closed). A
  /// non-blocking descriptor is waited on with `poll`. `sharded_output` is refused.
  [[nodiscard]] Result<void> write_stream(std::span<const Selection> selection, int fd,
                                          const WriteOptions& options = {}) const;

  /// `fetch` and `write` at once: each tensor is written as soon as its bytes have arrived (a
  /// writer thread copies them out of the cache while the rest is still on its way), so the
  /// output is complete moments after the last byte rather than after a second pass over all
  /// of them. The output appears only when the fetch succeeded, as `write` says; a failed fetch
  /// leaves no output, a failed write (a full disk) stops the fetch (what arrived stays cached),
  /// and cancelling either options' token stops both. `fetch.sink` is refused. For local
  /// checkpoints, `write` alone. Not concurrently with another `fetch` on this object.
  [[nodiscard]] Result<FetchStats> fetch_and_write(std::span<const Selection> selection, const std::string& out,
                                                   const FetchOptions& fetch = {}, const WriteOptions& write = {});

  /// `fetch_and_write` to the open descriptor `fd`, as `write_stream` writes: a stream's bytes
  /// go out as they arrive (in file order); a failure leaves what was written written.
  [[nodiscard]] Result<FetchStats> fetch_and_write_stream(std::span<const Selection> selection, int fd,
                                                          const FetchOptions& fetch = {},
                                                          const WriteOptions& write = {});

  /// Opaque state; defined inside the library only.
  struct Impl;

 private:
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Natural ordering of names: runs of digits compare as numbers.
[[nodiscard]] TENSORFETCH_API bool natural_less(std::string_view a, std::string_view b) noexcept;

}  // namespace tensorfetch
