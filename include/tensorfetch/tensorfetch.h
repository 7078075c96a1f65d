/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The C API of tensorfetch: open a safetensors checkpoint (a local file or directory, an
 * http(s) URL, or a Hugging Face Hub repo), list its tensors, fetch the ones you want into
 * the local cache over parallel range requests, and read their bytes from a read-only
 * memory map.
 *
 * Plain C (C99 or later); also usable from C++. Link with `pkg-config --libs tensorfetch`.
 *
 * Conventions, for every function below:
 * - Errors: fallible functions return a `tf_code` (`TF_OK` is 0) and, when `err` is not NULL,
 *   store a new `tf_error` in `*err` on failure (and NULL on success). The caller owns it and
 *   releases it with `tf_error_free`. Messages name the file, tensor, URL and byte range.
 * - Strings passed in are copied or only read during the call; the library keeps no pointer
 *   to them. Strings and arrays handed out are owned by the library: the lifetime is stated
 *   per function.
 * - Nothing is ever thrown or longjmp'd across this API; out of memory is `TF_ERR_INTERNAL`.
 * - Thread-safety is stated per function. "Any thread" functions are safe to call
 *   concurrently with each other and with a running `tf_fetch` on the same checkpoint.
 *
 * ABI: the option and stats structs begin with a `size` field; set it with the matching
 * `*_init` function (or to `sizeof`), so that a library built against a newer header reads
 * only the fields the caller knows about. Structs the library hands out (`tf_progress`) also
 * begin with `size`, set by the library: read a field only when `TF_HAS_FIELD(ptr, field)`,
 * so that a caller built against a newer header works with an older library. New fields are
 * only ever added at the end. Numeric values of `tf_code` never change.
 */
#ifndef TENSORFETCH_TENSORFETCH_H
#define TENSORFETCH_TENSORFETCH_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define TF_API __attribute__((visibility("default")))
#else
#define TF_API
#endif

/**
 * Non-zero when the struct at `ptr` (which begins with `size_t size`) holds `field`: its
 * `size` covers the field. E.g. `TF_HAS_FIELD(progress, files)` in a progress callback.
 */
#define TF_HAS_FIELD(ptr, field)                                                           \
  ((ptr)->size >= (size_t)((const char*)&(ptr)->field - (const char*)(ptr)) + sizeof((ptr)->field))

#ifdef __cplusplus
#define TF_NOEXCEPT noexcept
extern "C" {
#else
#define TF_NOEXCEPT
#endif

/**
 * What went wrong. The values mirror `tensorfetch::ErrorCode` (the C++ enumerator named in
 * each comment) and never change; new codes get new numbers. `tf_code_exit_code` gives the
 * exit code of the `tensorfetch` command line for each.
 */
typedef enum tf_code {
  TF_OK = 0, /**< success (exit 0) */

  /* The file is not valid safetensors, or the index is bad (exit 2). */
  TF_ERR_FILE_TOO_SMALL = 1,       /**< FileTooSmall: under 8 bytes, or 8 + N past the end */
  TF_ERR_HEADER_TOO_LARGE = 2,     /**< HeaderTooLarge: N above 100,000,000 */
  TF_ERR_HEADER_START = 3,         /**< HeaderStart: the header does not start with `{` */
  TF_ERR_HEADER_JSON = 4,          /**< HeaderJson: not well-formed UTF-8 JSON */
  TF_ERR_DUPLICATE_KEY = 5,        /**< DuplicateKey: a key twice in one JSON object */
  TF_ERR_INVALID_METADATA = 6,     /**< InvalidMetadata: `__metadata__` not string to string */
  TF_ERR_INVALID_ENTRY = 7,        /**< InvalidEntry: a tensor entry misses a field */
  TF_ERR_INVALID_DTYPE = 8,        /**< InvalidDtype: unknown dtype string */
  TF_ERR_INVALID_SHAPE = 9,        /**< InvalidShape: not non-negative integers */
  TF_ERR_INVALID_OFFSETS = 10,     /**< InvalidOffsets: not two integers with begin <= end */
  TF_ERR_SIZE_MISMATCH = 11,       /**< SizeMismatch: shape and dtype disagree with offsets */
  TF_ERR_OVERFLOW = 12,            /**< Overflow: a size overflows 64 bits */
  TF_ERR_HOLE_OR_OVERLAP = 13,     /**< HoleOrOverlap: tensors do not tile the data */
  TF_ERR_DATA_SIZE_MISMATCH = 14,  /**< DataSizeMismatch: data does not end at end of file */
  TF_ERR_INVALID_INDEX = 15,       /**< InvalidIndex: a bad `*.safetensors.index.json` */
  TF_ERR_UNSAFE_SHARD_NAME = 16,   /**< UnsafeShardName: a shard path that could escape */
  TF_ERR_INDEX_MISMATCH = 17,      /**< IndexMismatch: index and shard headers disagree */

  /* Usage or other (exit 1). */
  TF_ERR_INVALID_ARGUMENT = 18,    /**< InvalidArgument: a bad argument, option or pattern */
  TF_ERR_SLICE_OUT_OF_RANGE = 19,  /**< SliceOutOfRange: a slice outside the tensor's shape */
  TF_ERR_SLICE_MISALIGNED = 20,    /**< SliceMisaligned: a sub-byte slice off byte bounds */
  TF_ERR_NOT_FOUND = 21,           /**< NotFound: no such local file, or no such tensor */
  TF_ERR_IO = 22,                  /**< Io: a local read or write failed (also: disk full) */
  TF_ERR_CANCELLED = 23,           /**< Cancelled: by the progress callback or `tf_cancel` */
  TF_ERR_NOT_FETCHED = 24,         /**< NotFetched: remote bytes not in the cache yet */

  /* Network or remote (exit 3). */
  TF_ERR_NETWORK = 25,             /**< Network: connection, TLS, timeout (after retries) */
  TF_ERR_REMOTE_NOT_FOUND = 26,    /**< RemoteNotFound: repo, revision or file not found */
  TF_ERR_UNAUTHORIZED = 27,        /**< Unauthorized: 401/403/gated: token missing or refused */
  TF_ERR_RATE_LIMITED = 28,        /**< RateLimited: 429 still answered after every retry */
  TF_ERR_BAD_RESPONSE = 29,        /**< BadResponse: a response that breaks the protocol */

  /* Integrity (exit 4). */
  TF_ERR_INTEGRITY = 30,           /**< Integrity: hash mismatch, or the source changed */

  /* Added later: appended, so that no value above changes. */
  TF_ERR_BUSY = 31,                /**< Busy: a cache blob another process has open (exit 1) */
  TF_ERR_UNSPLITTABLE = 32,        /**< Unsplittable: tensor parallelism cannot split a tensor (exit 1) */

  /* The C API only (exit 1). */
  TF_ERR_INTERNAL = 100            /**< out of memory, or an unexpected failure inside */
} tf_code;

/** An open checkpoint. Opaque; created by `tf_open`, destroyed by `tf_close`. */
typedef struct tf_checkpoint tf_checkpoint;

/** An error: a code and a message. Opaque; owned by the caller, freed with `tf_error_free`. */
typedef struct tf_error tf_error;

/* ---------------------------------------------------------------------------------------- */
/* Version, codes and errors                                                                */

/**
 * The library's version, e.g. "0.1.0". A static string (never freed). Any thread.
 */
TF_API const char* tf_version(void) TF_NOEXCEPT;

/**
 * The stable name of a code, as `tensorfetch::to_string(ErrorCode)` spells it (e.g.
 * "HoleOrOverlap"); "Ok" for `TF_OK`, "Internal" for `TF_ERR_INTERNAL`, "Unknown" for a
 * value that is not a code. A static string (never freed). Any thread.
 */
TF_API const char* tf_code_name(tf_code code) TF_NOEXCEPT;

/**
 * The exit code the `tensorfetch` command line uses for a code: 0 for `TF_OK`, 2 format or
 * index, 3 network or remote, 4 integrity, 1 for anything else. Any thread.
 */
TF_API int tf_code_exit_code(tf_code code) TF_NOEXCEPT;

/**
 * The code of an error; `TF_OK` for NULL. Any thread, as long as the error is not freed
 * meanwhile.
 */
TF_API tf_code tf_error_code(const tf_error* error) TF_NOEXCEPT;

/**
 * The message of an error (UTF-8, self-contained: it names the file, tensor, URL or byte
 * range involved); "" for NULL. Owned by the error: valid until `tf_error_free(error)`.
 * Any thread, as long as the error is not freed meanwhile.
 */
TF_API const char* tf_error_message(const tf_error* error) TF_NOEXCEPT;

/**
 * Releases an error; NULL is ignored. Call it once per error the library handed out; the
 * error must not be in use by another thread.
 */
TF_API void tf_error_free(tf_error* error) TF_NOEXCEPT;

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                  */

/** Sentinel for `tf_open_options.offline`: decide from `$HF_HUB_OFFLINE`. */
#define TF_OFFLINE_FROM_ENV (-1)

/** Sentinel for `tf_open_options.shared_cache`: decide from `$TENSORFETCH_SHARED_CACHE`. */
#define TF_SHARED_CACHE_FROM_ENV (-1)

/**
 * A cancellation flag for an operation that has no checkpoint to `tf_cancel` yet: `tf_open`
 * (see `tf_open_options.cancel`). Opaque; created by `tf_cancel_token_new`, owned by the
 * caller until `tf_cancel_token_free`, which must not run while an operation uses it.
 */
typedef struct tf_cancel_token tf_cancel_token;

/** A new token, not cancelled; NULL when out of memory. Any thread. */
TF_API tf_cancel_token* tf_cancel_token_new(void) TF_NOEXCEPT;

/**
 * Cancels: an operation given the token stops within about 100 ms (also in the middle of a
 * stalled request) and fails with `TF_ERR_CANCELLED`; later operations given it fail at once
 * until `tf_cancel_token_reset`. NULL is ignored. Any thread; it only sets a lock-free atomic
 * flag, so it may also be called from a signal handler.
 */
TF_API void tf_cancel_token_cancel(tf_cancel_token* token) TF_NOEXCEPT;

/** Non-zero once the token was cancelled (and not reset since); 0 for NULL. Any thread. */
TF_API int tf_cancel_token_cancelled(const tf_cancel_token* token) TF_NOEXCEPT;

/** Clears a cancellation, so that the token can serve another operation. NULL is ignored. */
TF_API void tf_cancel_token_reset(tf_cancel_token* token) TF_NOEXCEPT;

/** Releases a token; NULL is ignored. No operation may be using it. */
TF_API void tf_cancel_token_free(tf_cancel_token* token) TF_NOEXCEPT;

/** What a `tf_notice` tells. */
typedef enum tf_notice_kind {
  /** The cache held bytes of a remote file that differ from those its server sent to this
   *  `tf_open` under the same identity (URL, ETag and size): the file was rewritten on the
   *  server without its ETag changing (nginx's ETag is the modification time in seconds and
   *  the size). Those bytes were retired (never served again, by any process sharing the
   *  cache) and the file is fetched afresh. */
  TF_NOTICE_STALE_CACHE = 1
} tf_notice_kind;

/**
 * Something a caller should tell its user, given to `tf_open_options.notice` during `tf_open`.
 * Owned by the library and valid during the callback only (copy what you keep). Fields after
 * `message` exist only when `TF_HAS_FIELD(notice, field)`.
 */
typedef struct tf_notice {
  size_t size;          /**< sizeof(tf_notice) as the library knows it */
  int kind;             /**< a `tf_notice_kind` */
  const char* file;     /**< the file's path in the checkpoint */
  const char* url;      /**< where `tf_open` read it (without its query) */
  uint64_t offset;      /**< the first byte that differed */
  const char* blob;     /**< the retired blob's name under the cache's `blobs/` */
  const char* message;  /**< all of the above in one line, for a user */
} tf_notice;

/**
 * Receives notices (see `tf_notice`), on the thread running `tf_open`, before it returns.
 * `user` is `tf_open_options.notice_user`. It must not call into the library for the
 * checkpoint being opened (there is none yet).
 */
typedef void (*tf_notice_fn)(const tf_notice* notice, void* user);

/**
 * How to open a checkpoint. A plain value owned by the caller; initialize it with
 * `tf_open_options_init`, then set what you need. Strings are copied by `tf_open`. NULL or
 * 0 means the default stated per field (defaults come from the environment, as the
 * Hugging Face tools read it).
 */
typedef struct tf_open_options {
  /** sizeof(tf_open_options), as set by `tf_open_options_init`. */
  size_t size;
  /** Cache root; NULL: `$TENSORFETCH_CACHE`, else `$XDG_CACHE_HOME/tensorfetch`, else
   *  `~/.cache/tensorfetch`. */
  const char* cache_dir;
  /** Parallel transfers of tensor data, each on a TCP connection of its own, fixed at this
   *  number; 0 (the default): adaptive, from 32 (or what the cache remembers of the host) up
   *  to `max_connections`, growing while new connections raise the rate (see the C++
   *  `OpenOptions::connections`). */
  size_t connections;
  /** Access token; NULL: `$HF_TOKEN`, else `$HUGGING_FACE_HUB_TOKEN`, else the file
   *  `$HF_TOKEN_PATH` (default `$HF_HOME/token`); "": send none. Sent as
   *  `Authorization: Bearer` to the endpoint host only, never to a redirect target. */
  const char* token;
  /** Hub endpoint; NULL: `$HF_ENDPOINT`, else https://huggingface.co. */
  const char* endpoint;
  /** CA bundle for TLS; NULL: `$CURL_CA_BUNDLE`, else the system's. Always verified. */
  const char* ca_file;
  /** The Hugging Face hub cache: files it holds (by sha256) are used instead of downloading
   *  them, and `tf_publish_to_hf_cache` writes into it. NULL: `$HF_HUB_CACHE`, else
   *  `$HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub` (`$HF_HOME` defaults to
   *  `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`). */
  const char* hf_hub_cache;
  /** 1: no network at all: open from what earlier fetches recorded in the cache, and fail
   *  fetches of bytes it does not hold with `TF_ERR_NOT_FETCHED`; 0: network;
   *  `TF_OFFLINE_FROM_ENV` (the default): 1 when `$HF_HUB_OFFLINE` (else
   *  `$TRANSFORMERS_OFFLINE`) is `1`, `true`, `yes` or `on` (any case). */
  int offline;
  /** 1: the cache is shared by the members of a group (directories owned by other members and
   *  writable by the group are accepted; what is created is group-writable: directories
   *  02770, files 0660, complete files 0440); 0: private (the user's own, writable by no one
   *  else: 0700/0600/0400); `TF_SHARED_CACHE_FROM_ENV` (the default): 1 when
   *  `$TENSORFETCH_SHARED_CACHE` is `1`, `true`, `yes` or `on`. Never accepted: cache
   *  directories writable by all users, or symbolic links inside the cache. */
  int shared_cache;
  /** Cancels this `tf_open` when cancelled (from any thread or a signal handler): it then
   *  fails with `TF_ERR_CANCELLED` within about 100 ms, also while a request is stalled.
   *  NULL: not cancellable. Not kept: use `tf_cancel` for the checkpoint's fetches. */
  tf_cancel_token* cancel;
  /** 1: open the `connections` data connections while `tf_open` reads the index and headers,
   *  for a caller that fetches right after (a download manager fetching a selection): the
   *  first fetch's requests then go out on connections whose TCP and TLS handshakes are done.
   *  For a URL location only, toward its host unless that is the Hub endpoint; each connection
   *  is opened by one GET of the location's first byte (redirects not followed); failures
   *  there change nothing; the first fetch waits for those still running, at most 1 s.
   *  0 (the default): none. Any other value is `TF_ERR_INVALID_ARGUMENT`. */
  int warm_connections;
  /** Told about what the user should know (`tf_notice`: stale cached bytes, retired and
   *  fetched again) during `tf_open`; NULL: nobody is told (they are retired all the same). */
  tf_notice_fn notice;
  /** Passed to `notice` unchanged. */
  void* notice_user;
  /** Cap on the bandwidth of every fetch of the checkpoint, in bytes per second, shared by all
   *  its connections together (not per connection), so that a loader leaves room for the
   *  node's other traffic; time a transfer is paused by the cap does not count as a stall. 0
   *  (the default): no cap. From 1 to 1023 (below 1 KiB/s): `TF_ERR_INVALID_ARGUMENT`. Added
   *  after `notice_user`: read only when `size` covers it. */
  uint64_t max_rate;
  /** The most data connections toward one host when `connections` is 0 (adaptive); 0: 128.
   *  Added after `max_rate`: read only when `size` covers it. */
  size_t max_connections;
} tf_open_options;

/**
 * Sets `options` to the defaults and `options->size` to sizeof(tf_open_options). NULL is
 * ignored. Any thread.
 */
TF_API void tf_open_options_init(tf_open_options* options) TF_NOEXCEPT;

/**
 * Opens and validates a checkpoint. `location`: a `.safetensors` file, a
 * `*.safetensors.index.json`, a directory holding a checkpoint, an http(s) URL of a file or
 * an index, or a Hub repo (`hf://ORG/NAME[@REV][/PATH]`, `ORG/NAME`). Remote checkpoints are
 * read from their headers alone (no tensor bytes); local files are mapped read-only.
 * `options` may be NULL (all defaults).
 *
 * On success stores a new checkpoint in `*out`, owned by the caller until `tf_close`. On
 * failure `*out` is NULL; e.g. a missing file is `TF_ERR_NOT_FOUND` with a message naming
 * the path. Any thread; several checkpoints may be opened concurrently.
 */
TF_API tf_code tf_open(const char* location, const tf_open_options* options, tf_checkpoint** out,
                       tf_error** err) TF_NOEXCEPT;

/**
 * Closes a checkpoint: unmaps its files and frees everything it handed out (names, shapes,
 * data pointers). NULL is ignored. No other call on this checkpoint may run meanwhile or
 * follow.
 */
TF_API void tf_close(tf_checkpoint* checkpoint) TF_NOEXCEPT;

/* ---------------------------------------------------------------------------------------- */
/* Files and tensors. All of these are "any thread" functions; every pointer they return is */
/* owned by the checkpoint and valid until `tf_close`. An index out of range (or a NULL     */
/* checkpoint) gives NULL / 0.                                                               */

/** Non-zero when the checkpoint is remote (a URL or a Hub repo). Any thread. */
TF_API int tf_is_remote(const tf_checkpoint* checkpoint) TF_NOEXCEPT;

/**
 * The commit every file was read at, when the Hub named one (`X-Repo-Commit`; 40 hex digits),
 * else NULL (local checkpoints, plain URLs). Owned by the checkpoint, valid until `tf_close`.
 * Any thread.
 */
TF_API const char* tf_commit(const tf_checkpoint* checkpoint) TF_NOEXCEPT;

/** Number of safetensors files (1, or the shards of an index). Any thread. */
TF_API size_t tf_file_count(const tf_checkpoint* checkpoint) TF_NOEXCEPT;

/**
 * Path of file `file`, relative to the checkpoint (the shard name of an index, the path in
 * a repo). Owned by the checkpoint, valid until `tf_close`. Any thread.
 */
TF_API const char* tf_file_path(const tf_checkpoint* checkpoint, size_t file) TF_NOEXCEPT;

/** Size in bytes of file `file`; 0 when out of range. Any thread. */
TF_API uint64_t tf_file_size(const tf_checkpoint* checkpoint, size_t file) TF_NOEXCEPT;

/** Number of tensors, over every file. Any thread. */
TF_API size_t tf_tensor_count(const tf_checkpoint* checkpoint) TF_NOEXCEPT;

/**
 * Name of tensor `index` (tensors are in natural name order: `layers.2` before `layers.10`).
 * Owned by the checkpoint, valid until `tf_close`. Any thread.
 */
TF_API const char* tf_tensor_name(const tf_checkpoint* checkpoint, size_t index) TF_NOEXCEPT;

/**
 * Dtype of tensor `index`, as the file spells it ("BF16", "F8_E4M3", ...). A static string.
 * Any thread.
 */
TF_API const char* tf_tensor_dtype(const tf_checkpoint* checkpoint, size_t index) TF_NOEXCEPT;

/**
 * Shape of tensor `index`: stores the number of dimensions in `*ndim` (0 for a scalar; may
 * be NULL) and returns the `*ndim` dimensions, owned by the checkpoint and valid until
 * `tf_close` (NULL when there are none). Any thread.
 */
TF_API const uint64_t* tf_tensor_shape(const tf_checkpoint* checkpoint, size_t index,
                                       size_t* ndim) TF_NOEXCEPT;

/**
 * The safetensors `data_offsets` of tensor `index`: its bytes are [begin, end) of the data
 * section of its file (which starts after the 8-byte prefix and the header). Either pointer
 * may be NULL. Returns `TF_OK`, or `TF_ERR_INVALID_ARGUMENT` when the index is out of range
 * (the outputs are then 0). Any thread.
 */
TF_API tf_code tf_tensor_data_offsets(const tf_checkpoint* checkpoint, size_t index,
                                      uint64_t* begin, uint64_t* end) TF_NOEXCEPT;

/** Position in the files (see `tf_file_path`) of the file holding tensor `index`. Any thread. */
TF_API size_t tf_tensor_file_index(const tf_checkpoint* checkpoint, size_t index) TF_NOEXCEPT;

/**
 * Path of the file (shard) holding tensor `index`, as `tf_file_path` gives it. Owned by the
 * checkpoint, valid until `tf_close`. Any thread.
 */
TF_API const char* tf_tensor_file(const tf_checkpoint* checkpoint, size_t index) TF_NOEXCEPT;

/**
 * Looks a tensor up by its exact name. Returns 1 and stores its position in `*index` (when
 * not NULL) if there is one, else 0. Any thread.
 */
TF_API int tf_find(const tf_checkpoint* checkpoint, const char* name, size_t* index) TF_NOEXCEPT;

/* ---------------------------------------------------------------------------------------- */
/* Fetching                                                                                 */

/**
 * Progress of one file in a fetch (an element of `tf_progress.files`). This struct never
 * grows: more per-file data would come as a new array in `tf_progress`.
 */
typedef struct tf_file_progress {
  size_t file;          /**< position in the files (see `tf_file_path`) */
  uint64_t bytes_done;  /**< bytes of this file transferred so far */
  uint64_t bytes_total; /**< bytes of this file to transfer */
} tf_file_progress;

/**
 * Progress of a fetch, handed to the callback. Owned by the library; valid during the call
 * only (copy what you keep, `files` included). `size` is set by the library: the fields
 * after `seconds` exist only when `TF_HAS_FIELD(progress, field)`.
 */
typedef struct tf_progress {
  size_t size;           /**< sizeof(tf_progress) as the library knows it */
  uint64_t bytes_done;   /**< bytes transferred so far */
  uint64_t bytes_total;  /**< bytes to transfer (what the cache did not hold) */
  uint64_t bytes_cached; /**< wanted bytes the cache already held (0 with a sink) */
  size_t files_done;     /**< files with nothing left to transfer */
  size_t files_total;    /**< files involved */
  double seconds;        /**< since the fetch started */
  /** Number of elements of `files`: the files involved (`files_total`). */
  size_t n_files;
  /** Per file involved, in file order: its bytes done and to transfer. The sums over the
   *  array are `bytes_done` and `bytes_total`. Owned by the library, valid during the call. */
  const tf_file_progress* files;
  /** When a server asked for a wait (an HTTP 429 rate limit, whose window on the Hub lasts up
   *  to 5 minutes): how long the retry waits, in seconds from now; else 0. The callback is
   *  called when such a wait starts; `tf_cancel` still ends it within about 100 ms. */
  double waiting_seconds;
} tf_progress;

/**
 * Progress callback: called on the fetching thread at most every 100 ms while data arrives,
 * and once at the end. Return 0 to go on, non-zero to cancel (the fetch then fails with
 * `TF_ERR_CANCELLED`; what arrived whole is kept in the cache). It must not call
 * `tf_fetch`, `tf_fetch_all`, `tf_plan_fetch`, `tf_save_files`, `tf_publish_to_hf_cache` or
 * `tf_close` on the same checkpoint.
 */
typedef int (*tf_progress_fn)(const tf_progress* progress, void* user);

/**
 * Byte sink: receives fetched bytes instead of the cache (see `tf_fetch_options.sink`):
 * `len` bytes at `data` of file `file` (position in the files, see `tf_file_path`), starting
 * at byte `offset` of that file (file offsets: the 8-byte prefix and the header come first;
 * a tensor's bytes start at 8 + header size + its `data_offsets` begin). `data` is owned by
 * the library and valid during the call only. Pieces of one transfer arrive in order;
 * transfers run in parallel (up to `connections`), so pieces of different ranges interleave,
 * but never overlap. Called on the fetching thread. Return 0 to go on, non-zero to cancel:
 * the sink is not called again, and the fetch fails with `TF_ERR_CANCELLED`. The same
 * restrictions as for the progress callback apply.
 */
typedef int (*tf_sink_fn)(size_t file, uint64_t offset, const void* data, size_t len, void* user);

/**
 * How to fetch. A plain value owned by the caller; initialize it with
 * `tf_fetch_options_init`. 0 means the default stated per field.
 */
typedef struct tf_fetch_options {
  /** sizeof(tf_fetch_options), as set by `tf_fetch_options_init`. */
  size_t size;
  /** The caller's concurrency limit: at most this many transfers (HTTP connections) at
   *  once; 1 transfers one range after the other. 0: `tf_open_options.connections`. */
  size_t connections;
  /** Largest single range transfer in bytes (chunks are about total / connections); 0: 64 MiB. */
  uint64_t chunk_size;
  /** Holes of at most this many bytes between wanted ranges are fetched too, saving a
   *  request, within `coalesce_overfetch_percent`; 0: 1 MiB. */
  uint64_t coalesce_gap;
  /** Progress callback, or NULL. */
  tf_progress_fn progress;
  /** Passed to `progress` and `sink` unchanged. */
  void* user;
  /** When not NULL, every selected byte goes to this callback instead of the cache: the
   *  cache is neither read nor written (bytes it holds are transferred again), the tensors
   *  stay `TF_ERR_NOT_FETCHED` for `tf_tensor_data`, and nothing is verified against a
   *  sha256 (hash the bytes yourself if you need to). For streaming loaders and for
   *  download managers that store bytes themselves. */
  tf_sink_fn sink;
  /** The holes coalescing fetches (see `coalesce_gap`) add up to at most this percentage of
   *  the bytes to fetch, but may always add up to 64 KiB (or `coalesce_gap` if smaller):
   *  the smallest holes are
   *  joined first, the others stay separate transfers. 0: 1 (%). */
  uint32_t coalesce_overfetch_percent;
} tf_fetch_options;

/**
 * What a fetch did. Owned by the caller; set `size` (with `tf_fetch_stats_init`) before
 * passing it: the library fills only the fields that fit in `size` bytes.
 */
typedef struct tf_fetch_stats {
  size_t size;                /**< sizeof(tf_fetch_stats), as set by `tf_fetch_stats_init` */
  uint64_t bytes_transferred; /**< bytes received over the network */
  uint64_t bytes_cached;      /**< wanted bytes already in the cache (0 with a sink) */
  uint64_t requests;          /**< HTTP requests sent (retries included) */
  uint64_t retries;           /**< of which retries */
  uint64_t chunks;            /**< planned transfers */
  /** The data connections at the end: the fixed number, or where the adaptive number settled
   *  (0: nothing transferred). Added after `chunks`: set only when `size` covers it. */
  uint64_t connections;
} tf_fetch_stats;

/** Sets `options` to the defaults (no callbacks). NULL is ignored. Any thread. */
TF_API void tf_fetch_options_init(tf_fetch_options* options) TF_NOEXCEPT;

/** Zeroes `stats` and sets its `size`. NULL is ignored. Any thread. */
TF_API void tf_fetch_stats_init(tf_fetch_stats* stats) TF_NOEXCEPT;

/**
 * Makes the bytes of the tensors matched by `patterns[0..n)` present in the local cache:
 * what the cache lacks is planned (coalesced, split into chunks), transferred over
 * parallel connections and committed durably. Each pattern is an exact tensor name or a
 * glob (fnmatch: `*`, `?`, `[...]`; `*` also matches `.`); a pattern that matches nothing
 * is `TF_ERR_NOT_FOUND` and nothing is fetched. `n` == 0 fetches nothing. A no-op for
 * local checkpoints (their bytes are already mapped). `options` and `stats` may be NULL.
 * With `options->sink`, the bytes go to the sink instead (every selected byte, cached or
 * not) and the cache is left alone.
 *
 * Thread-safety: blocks the calling thread. Fetches on one checkpoint run one at a time
 * (a second caller waits); the "any thread" functions may run meanwhile, and `tf_cancel`
 * stops it from another thread.
 */
TF_API tf_code tf_fetch(tf_checkpoint* checkpoint, const char* const* patterns, size_t n,
                        const tf_fetch_options* options, tf_fetch_stats* stats,
                        tf_error** err) TF_NOEXCEPT;

/**
 * Fetches every file of the checkpoint whole (a download); each is verified against its
 * sha256 when the server named one. Otherwise as `tf_fetch`.
 */
TF_API tf_code tf_fetch_all(tf_checkpoint* checkpoint, const tf_fetch_options* options,
                            tf_fetch_stats* stats, tf_error** err) TF_NOEXCEPT;

/* ---------------------------------------------------------------------------------------- */
/* Planning: the transfers a fetch would make, for download managers that make them        */

/**
 * A list of planned transfers. Opaque; created by `tf_plan_fetch`, owned by the caller and
 * destroyed by `tf_plan_free`. Independent of the checkpoint: it stays valid after
 * `tf_close`. Read-only once made: the accessors may be called from any thread.
 */
typedef struct tf_plan tf_plan;

/**
 * Plans what `tf_fetch(checkpoint, patterns, n, options, ...)` would transfer, without
 * transferring anything: the selected byte ranges minus what the cache holds (unless
 * `options->sink` is set: then every selected byte), holes of at most
 * `options->coalesce_gap` bytes coalesced (within `options->coalesce_overfetch_percent`), split into transfers of at most
 * `options->chunk_size` bytes, in file and offset order (never overlapping). The
 * callbacks and `connections` of `options` are not used; `options` may be NULL (defaults).
 * Patterns as for `tf_fetch`. Empty for local checkpoints.
 *
 * Make each transfer with `GET url`, `Range: bytes=OFFSET-(OFFSET+LENGTH-1)` and, when
 * `tf_plan_if_match` is not NULL, `If-Match: <that>`; expect `206` with exactly that
 * `Content-Range` (`412` means the file changed on the server: open the checkpoint again).
 * Send `Authorization: Bearer <token>` only when `tf_plan_send_token` says so. The bytes are
 * the file's bytes at that offset; they do not enter tensorfetch's cache. Signed CDN URLs
 * expire after a while (`403`): a plan does not renew them (`tf_fetch` does, for the
 * transfers it makes), so make the transfers soon after planning.
 *
 * On success stores a new plan in `*out` (NULL on failure). Thread-safety: blocks the
 * calling thread; runs one at a time with the fetches on the same checkpoint (waits for a
 * running one). It may create the cache entry of a file (recording the bytes `tf_open` read).
 */
TF_API tf_code tf_plan_fetch(tf_checkpoint* checkpoint, const char* const* patterns, size_t n,
                             const tf_fetch_options* options, tf_plan** out,
                             tf_error** err) TF_NOEXCEPT;

/** Number of transfers in the plan (0 for NULL). Any thread. */
TF_API size_t tf_plan_count(const tf_plan* plan) TF_NOEXCEPT;

/** Position in the files (see `tf_file_path`) of the file transfer `i` reads; 0 when out of
 *  range. Any thread. */
TF_API size_t tf_plan_file(const tf_plan* plan, size_t i) TF_NOEXCEPT;

/**
 * The URL to GET for transfer `i` (after redirects: for Hub files the CDN URL). Owned by the
 * plan, valid until `tf_plan_free`; NULL when out of range. Any thread.
 */
TF_API const char* tf_plan_url(const tf_plan* plan, size_t i) TF_NOEXCEPT;

/** First byte of transfer `i` in its file; 0 when out of range. Any thread. */
TF_API uint64_t tf_plan_offset(const tf_plan* plan, size_t i) TF_NOEXCEPT;

/** Bytes of transfer `i` (at least 1, at most the chunk size); 0 when out of range. Any
 *  thread. */
TF_API uint64_t tf_plan_length(const tf_plan* plan, size_t i) TF_NOEXCEPT;

/**
 * The ETag to send as `If-Match` for transfer `i` (quoted, as the server sent it), or NULL
 * when there is none (or `i` is out of range). Owned by the plan, valid until
 * `tf_plan_free`. Any thread.
 */
TF_API const char* tf_plan_if_match(const tf_plan* plan, size_t i) TF_NOEXCEPT;

/**
 * Non-zero when transfer `i`'s URL is on the endpoint's host, so the access token (the one
 * given in `tf_open_options.token`, else `$HF_TOKEN` or `$HF_HOME/token`) is to be sent; 0
 * otherwise (e.g. a CDN host, or no token). Any thread.
 */
TF_API int tf_plan_send_token(const tf_plan* plan, size_t i) TF_NOEXCEPT;

/**
 * When transfer `i`'s URL stops working, in seconds since the epoch: an `s3://` location's
 * presigned URL or an `az://` location's URL with a SAS, fetched with no credentials until then; 0 when it states no end (other
 * locations, or `i` out of range). Any thread.
 */
TF_API int64_t tf_plan_expires_at(const tf_plan* plan, size_t i) TF_NOEXCEPT;

/** Releases a plan; NULL is ignored. No accessor may run on it meanwhile or follow. */
TF_API void tf_plan_free(tf_plan* plan) TF_NOEXCEPT;

/* ---------------------------------------------------------------------------------------- */
/* Tensor parallelism: what one rank of a tensor-parallel group holds (`get --tp R/N`)       */

/**
 * The tensors (and slices) one rank of a tensor-parallel group holds. Opaque; created by
 * `tf_select_for_rank`, owned by the caller and destroyed by `tf_tp_free`. It refers to its
 * checkpoint's tensors: free it before `tf_close` of that checkpoint, and use it with that
 * checkpoint only. Read-only once made: the accessors may be called from any thread.
 */
typedef struct tf_tp_selection tf_tp_selection;

/**
 * Selects what rank `rank` of `world` tensor-parallel ranks holds (0 <= rank < world <=
 * 65536), as `tensorfetch get --tp RANK/WORLD` does: for every tensor, the slice the
 * Megatron/vLLM convention for the model's `config.json` gives that rank (column-parallel
 * weights split on dim 0, row-parallel on dim 1, norms replicated, GQA heads replicated when
 * there are fewer KV heads than ranks, MoE experts split within each expert), with the rules
 * deciding first. `rules_json` is the text of a rules file (a JSON object, glob ->
 * `{"dim": D}` | `"replicate"` | `"expert"`), or NULL for none; `expert_parallel` non-zero
 * deals out MoE experts whole instead. Tensors another rank holds whole are left out;
 * replicated tensors are whole. Reads no tensor bytes.
 *
 * Errors: `TF_ERR_UNSPLITTABLE` naming the tensor when a layout (fused, unknown, no
 * `config.json`, a dimension that does not divide) is not covered by the rules;
 * `TF_ERR_INVALID_ARGUMENT` for a bad rank, world, rules text or `config.json`.
 * On success stores a new selection in `*out` (NULL on failure). Any thread.
 */
TF_API tf_code tf_select_for_rank(const tf_checkpoint* checkpoint, size_t rank, size_t world,
                                  const char* rules_json, int expert_parallel, tf_tp_selection** out,
                                  tf_error** err) TF_NOEXCEPT;

/** Number of tensors the rank holds (0 for NULL), in natural name order. Any thread. */
TF_API size_t tf_tp_count(const tf_tp_selection* selection) TF_NOEXCEPT;

/** Name of tensor `i` of the selection (owned by the checkpoint); NULL when out of range. */
TF_API const char* tf_tp_name(const tf_tp_selection* selection, size_t i) TF_NOEXCEPT;

/** The rank's shape of tensor `i` (the sliced shape), `*ndim` dimensions; owned by the
 *  selection. NULL (and `*ndim` 0) when out of range. `ndim` may be NULL. */
TF_API const uint64_t* tf_tp_shape(const tf_tp_selection* selection, size_t i, size_t* ndim) TF_NOEXCEPT;

/** The rank's slice of tensor `i` as text (`"[0:128]"` on dim 0, `"[:, 256:512]"` on dim 1),
 *  owned by the selection; NULL when the rank holds it whole (or `i` is out of range). */
TF_API const char* tf_tp_slice(const tf_tp_selection* selection, size_t i) TF_NOEXCEPT;

/** Bytes of the rank's part of tensor `i` (what `tf_tp_read` copies); 0 when out of range. */
TF_API uint64_t tf_tp_nbytes(const tf_tp_selection* selection, size_t i) TF_NOEXCEPT;

/** The convention and rules applied, e.g. "megatron/vllm model_type=llama
 *  experts=tensor-parallel" (as `get --tp` records it in `tp_rule`); owned by the selection. */
TF_API const char* tf_tp_rule(const tf_tp_selection* selection) TF_NOEXCEPT;

/**
 * Makes the rank's bytes present in the cache: only the byte ranges of its slices and the
 * replicated tensors, planned and transferred as `tf_fetch` does (same options, stats,
 * cancellation and thread-safety). A no-op for local checkpoints.
 */
TF_API tf_code tf_tp_fetch(tf_checkpoint* checkpoint, const tf_tp_selection* selection,
                           const tf_fetch_options* options, tf_fetch_stats* stats, tf_error** err) TF_NOEXCEPT;

/**
 * Copies the rank's part of tensor `i` (row-major, the `tf_tp_shape` tensor) into `out`,
 * which must hold exactly `tf_tp_nbytes(selection, i)` bytes (`len`). Remote: its byte ranges
 * must be in the cache (`tf_tp_fetch`), else `TF_ERR_NOT_FETCHED`. Any thread, also during a
 * fetch.
 */
TF_API tf_code tf_tp_read(const tf_checkpoint* checkpoint, const tf_tp_selection* selection, size_t i,
                          void* out, uint64_t len, tf_error** err) TF_NOEXCEPT;

/** Releases a selection; NULL is ignored. No accessor may run on it meanwhile or follow. */
TF_API void tf_tp_free(tf_tp_selection* selection) TF_NOEXCEPT;

/* ---------------------------------------------------------------------------------------- */

/**
 * Starts recording a timeline of this process's tensorfetch work (opens, every HTTP request
 * with its connect, TLS, first-byte and receive times, the data connections, commits, output),
 * written by `tf_trace_stop` to `path` as Chrome trace-event JSON for Perfetto
 * (ui.perfetto.dev) or `chrome://tracing`. One trace per process at a time: a second start, a
 * NULL or empty path, is `TF_ERR_INVALID_ARGUMENT`. Any thread.
 */
TF_API tf_code tf_trace_start(const char* path, tf_error** err) TF_NOEXCEPT;

/**
 * Stops the trace `tf_trace_start` began and writes its file (replaced atomically). No trace
 * running: `TF_ERR_INVALID_ARGUMENT`; the file cannot be written: `TF_ERR_IO`. Any thread.
 */
TF_API tf_code tf_trace_stop(tf_error** err) TF_NOEXCEPT;

/* ---------------------------------------------------------------------------------------- */

/**
 * Asks the running fetch (`tf_fetch`, `tf_fetch_all`) on `checkpoint` to stop: it fails with
 * `TF_ERR_CANCELLED` within about 100 ms, also while its transfers are stalled, connecting or
 * waiting to be retried; what arrived whole stays committed in the cache (a later fetch resumes
 * from it). When no fetch is running, the next one to start is cancelled at once: a request
 * is consumed by the fetch it stops. NULL is ignored. Any thread; it only sets a lock-free
 * atomic flag, so it may also be called from a signal handler. (To cancel `tf_open`, give it a
 * `tf_cancel_token` in `tf_open_options.cancel`.)
 */
TF_API void tf_cancel(tf_checkpoint* checkpoint) TF_NOEXCEPT;

/**
 * The bytes of tensor `name` (exact name): stores a pointer into the read-only memory map of
 * the local file or of its cache blob in `*data` and the byte count in `*len`. The bytes
 * are owned by the checkpoint and valid until `tf_close`; they must not be written. Returns
 * `TF_ERR_NOT_FOUND` for an unknown name, `TF_ERR_NOT_FETCHED` when a remote tensor's bytes
 * are not all in the cache yet (fetch them first), `TF_ERR_INVALID_ARGUMENT` for NULL
 * arguments; `*data` is then NULL and `*len` 0. An empty tensor (a zero in its shape) gives
 * `TF_OK`, `*data` NULL and `*len` 0 at once, local or remote, before anything is fetched.
 * Any thread.
 */
TF_API tf_code tf_tensor_data(const tf_checkpoint* checkpoint, const char* name, const void** data,
                              size_t* len) TF_NOEXCEPT;

/**
 * Saves every file of the checkpoint into directory `dir` (created if needed), named as in
 * the repo: the safetensors files, the index, and `config.json` when there is one. Remote
 * files must have been fetched whole (`tf_fetch_all`), else `TF_ERR_NOT_FETCHED`; they are
 * hard-linked from the cache when it is on the same file system, else copied. Files appear
 * complete or not at all. Any thread; runs one at a time with the fetches on the same
 * checkpoint (waits for a running one).
 */
TF_API tf_code tf_save_files(const tf_checkpoint* checkpoint, const char* dir,
                             tf_error** err) TF_NOEXCEPT;

/**
 * Publishes every file that is complete and verified in the cache (fetched whole with
 * `tf_fetch_all`, or read from the Hugging Face cache) into the Hugging Face hub cache
 * (`tf_open_options.hf_hub_cache`, else `$HF_HUB_CACHE`, else `$HF_HOME/hub`), laid out as
 * huggingface_hub does: `models--ORG--NAME/blobs/<sha256>` (hard-linked from the cache when
 * it is on the same file system, else copied), `snapshots/<commit>/<path>` (relative
 * symlinks to the blobs), `refs/<revision>` (holding the commit), plus the index and
 * `config.json` (blobs named by their git blob sha1), so that transformers finds them with
 * `HF_HUB_OFFLINE=1`. Files without a sha256 (not LFS) or not whole in the cache are
 * skipped. Stores the number of safetensors files published in `*published` (may be NULL).
 * Hub repos only: else `TF_ERR_INVALID_ARGUMENT`. Any thread; runs one at a time with the
 * fetches on the same checkpoint (waits for a running one).
 */
TF_API tf_code tf_publish_to_hf_cache(const tf_checkpoint* checkpoint, size_t* published,
                                      tf_error** err) TF_NOEXCEPT;

/* ---------------------------------------------------------------------------------------- */
/* Mount (FUSE): in libtensorfetch_mount (`-ltensorfetch_mount`), built with the meson       */
/* feature `fuse`; libtensorfetch itself never needs libfuse.                                */

/** A checkpoint mounted on a directory. Opaque; made by `tf_mount_start`, ended and freed by
 *  `tf_mount_stop`. */
typedef struct tf_mount tf_mount;

/** Receives the mount's log lines (a failed read naming file, URL and byte range; the totals
 *  at the end), on any of the mount's threads, one call at a time; `line` is valid during the
 *  call only. `user` is `tf_mount_options.log_user`. It must not call `tf_mount_stop`. */
typedef void (*tf_mount_log_fn)(void* user, const char* line);

/**
 * How to mount. A plain value owned by the caller; initialize it with `tf_mount_options_init`.
 * 0 means the default stated per field.
 */
typedef struct tf_mount_options {
  /** sizeof(tf_mount_options), as set by `tf_mount_options_init`. */
  size_t size;
  /** A read in a tensor of at most this many bytes fetches the whole tensor, in a larger one
   *  the aligned pieces of this size it touches; 0: 64 MiB. */
  uint64_t tensor_window;
  /** Files of the repo other than its safetensors files, index and config.json of at most this
   *  many bytes are fetched whole on first open, larger ones by 1 MiB blocks; 0: 16 MiB. */
  uint64_t small_file;
  /** Data connections of each fetch (fixed); 0: `tf_open_options.connections`. */
  size_t connections;
  /** Largest single range transfer in bytes; 0: 64 MiB. */
  uint64_t chunk_size;
  /** FUSE worker threads (a reader blocked on a fetch holds one); 0: 64. */
  unsigned max_threads;
  /** Log lines go here; NULL: stderr. */
  tf_mount_log_fn log;
  /** Passed to `log` unchanged. */
  void* log_user;
} tf_mount_options;

/** Sets `options` to the defaults and `options->size` to sizeof(tf_mount_options). NULL is
 *  ignored. Any thread. */
TF_API void tf_mount_options_init(tf_mount_options* options) TF_NOEXCEPT;

/** What a mount served so far. Owned by the caller; set `size` (with `tf_mount_stats_init`):
 *  the library fills only the fields that fit. */
typedef struct tf_mount_stats {
  size_t size;               /**< sizeof(tf_mount_stats), as set by `tf_mount_stats_init` */
  uint64_t reads;            /**< read requests answered with bytes */
  uint64_t read_errors;      /**< read requests answered with EIO */
  uint64_t bytes_read;       /**< bytes handed to readers */
  uint64_t bytes_fetched;    /**< bytes received from the origin */
  uint64_t bytes_from_cache; /**< bytes handed to readers without waiting for a fetch */
  uint64_t bytes_in_flight;  /**< bytes of fetches queued or running now */
  uint64_t fetches;          /**< fetches made */
} tf_mount_stats;

/** Zeroes `stats` and sets `stats->size` to sizeof(tf_mount_stats). NULL is ignored. */
TF_API void tf_mount_stats_init(tf_mount_stats* stats) TF_NOEXCEPT;

/**
 * Mounts the checkpoint `*checkpoint` read-only on the existing directory `dir` (FUSE) and
 * serves it on threads of the mount's own, as `tensorfetch mount` does (for a Hub repo every
 * file of the commit; tensor-aware reads through the shared cache; a fetch that fails is `EIO`
 * to the reader). Returns once the directory is mounted, with the mount in `*out`. Takes the
 * checkpoint in every case, success or failure: `*checkpoint` is freed and set to NULL (no other
 * thread may use it meanwhile). Link with `-ltensorfetch_mount -ltensorfetch`. Errors: `TF_ERR_IO` when the directory
 * cannot be mounted (no /dev/fuse, no permission; a stale mount point names the command that
 * clears it), `TF_ERR_NOT_FOUND` / `TF_ERR_INVALID_ARGUMENT` for a missing directory or one
 * that is not; a Hub repo's listing that fails, its network code. While a mount runs, SIGPIPE is
 * ignored in the process and SIGUSR2 has a handler that does nothing (it wakes the serving
 * thread when the mount ends). Any thread.
 */
TF_API tf_code tf_mount_start(tf_checkpoint** checkpoint, const char* dir, const tf_mount_options* options,
                              tf_mount** out, tf_error** err) TF_NOEXCEPT;

/** The totals so far into `stats` (see `tf_mount_stats`); NULL arguments are ignored. Any
 *  thread while the mount exists. */
TF_API void tf_mount_get_stats(const tf_mount* mount, tf_mount_stats* stats) TF_NOEXCEPT;

/**
 * Ends the mount and frees it: fetches are cancelled, reads under way get `EIO`, the
 * directory is unmounted (lazily: a file still held open keeps the serving thread at most 10 s
 * more), and the totals are logged. Returns the serving loop's outcome (`TF_OK`, or `TF_ERR_IO`
 * when the FUSE session failed). NULL is `TF_OK`. Not concurrently with other calls on the same
 * mount.
 */
TF_API tf_code tf_mount_stop(tf_mount* mount, tf_error** err) TF_NOEXCEPT;

/** Unmounts whatever FUSE file system is mounted on `dir` (a mount of another process, or one
 *  left stale by a killed one), as `tensorfetch unmount` does. Not a FUSE mount:
 *  `TF_ERR_INVALID_ARGUMENT`; busy: `TF_ERR_BUSY`. Any thread. */
TF_API tf_code tf_unmount(const char* dir, tf_error** err) TF_NOEXCEPT;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TENSORFETCH_TENSORFETCH_H */
