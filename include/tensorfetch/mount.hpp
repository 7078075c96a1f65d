// SPDX-License-Identifier: Apache-2.0
/// @file
/// `tensorfetch mount`: a checkpoint as a read-only local directory (FUSE), whose files every
/// unmodified loader reads lazily. Reads are served from the shared cache; a miss fetches the
/// whole tensors it touches (a window of very large ones) through the checkpoint's fetcher, with
/// read-ahead for sequential readers; concurrent readers of the same bytes share one fetch; a
/// fetch that fails is `EIO`, never wrong bytes. Part of libtensorfetch_mount (the meson feature
/// `fuse`), so that libtensorfetch itself never needs libfuse; this header includes no libfuse
/// header.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "tensorfetch/checkpoint.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"

namespace tensorfetch {

/// How a mount serves its files. A plain value.
struct MountOptions {
  /// How misses are fetched (connections, chunk size, coalescing); `sink` and `progress` are
  /// ignored, `cancel` is the mount's own (`Mount::exit` cancels running fetches).
  FetchOptions fetch;
  /// A read inside a tensor of at most this many bytes fetches the whole tensor; in a larger one,
  /// the `tensor_window`-aligned pieces (from the tensor's first byte) that the read touches.
  std::uint64_t tensor_window = 64 << 20;
  /// Read-ahead of a sequential reader of one open file starts once it has read this many bytes
  /// in a row (so that a reader of one tensor, whose pages come as several reads, does not
  /// fetch the tensors after it).
  std::uint64_t readahead_trigger = 4 << 20;
  /// Read-ahead of a sequential reader of one open file: the first window, in bytes, doubling
  /// with each sequential read up to `readahead_max` (whole tensors in safetensors files, so
  /// a loader walking tensors in file order finds the next ones fetched); reset on a seek.
  std::uint64_t readahead_initial = 8 << 20;
  /// The largest read-ahead window.
  std::uint64_t readahead_max = 256 << 20;
  /// Files of the repo other than the checkpoint's safetensors files, its index and config.json
  /// (tokenizers, a README, ...) of at most this many bytes are fetched whole when first opened
  /// (one request, verified against the hash the Hub lists); larger ones by 1 MiB blocks as
  /// they are read, with read-ahead for a sequential reader.
  std::uint64_t small_file = 16 << 20;
  /// FUSE worker threads (readers blocked on a fetch each hold one).
  unsigned max_threads = 64;
  /// Told each line worth logging: a failed read (file, URL, byte range, reason), the totals on
  /// `Mount::log_totals` and at the end of `run`. Called from any of the mount's threads, one
  /// call at a time. Empty: stderr.
  std::function<void(std::string_view line)> log;
};

/// What a mount has served, in total. A plain value.
struct MountStats {
  std::uint64_t reads = 0;             ///< read requests answered with bytes
  std::uint64_t read_errors = 0;       ///< read requests answered with an error (EIO)
  std::uint64_t bytes_read = 0;        ///< bytes handed to readers
  std::uint64_t bytes_fetched = 0;     ///< bytes received from the origin by the mount's fetches
  std::uint64_t bytes_from_cache = 0;  ///< bytes handed to readers without waiting for a fetch
  std::uint64_t bytes_in_flight = 0;   ///< bytes of fetches queued or running now
  std::uint64_t fetches = 0;           ///< fetches made (each one `fetch_ranges` call)
};

/// A checkpoint mounted on a directory (FUSE, read-only). The directory shows every file
/// `Checkpoint::repo_files` lists under its repo path: for a Hub repo every file of the pinned
/// commit (`config.json`, tokenizer files, the index, every shard, ...), else the safetensors
/// files, the index and `config.json`. Listing and `stat` need no request once mounted. Files keep the kernel's page cache across opens (a pinned
/// revision never changes), so `mmap` works and repeated reads cost nothing.
///
/// Owns the checkpoint and the FUSE session. `run` serves on the calling thread (plus worker
/// threads) until unmounted or `exit`; the destructor unmounts when still mounted. `exit`,
/// `stats` and `log_totals` may be called from any thread while `run` runs.
class TENSORFETCH_API Mount {
 public:
  /// Mounts `checkpoint` on the existing directory `dir`. A stale mount point (a mount whose
  /// process died: `ENOTCONN`) is an `Io` error that names the command that clears it
  /// (`fusermount3 -u DIR`); a directory that is not one, or that cannot be mounted on (no
  /// /dev/fuse, no permission), `Io` with the reason.
  [[nodiscard]] static Result<std::unique_ptr<Mount>> create(Checkpoint checkpoint, const std::string& dir,
                                                             const MountOptions& options = {});
  ~Mount();
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  /// Serves requests until the directory is unmounted (`tensorfetch unmount`, `fusermount3
  /// -u`), `exit` is called, or SIGINT, SIGTERM or SIGHUP arrives (handled during `run`;
  /// SIGUSR1 then logs the totals). Readers still waiting for a fetch get `EIO`. Unmounts before
  /// it returns and logs the totals. Call once, from the thread that should receive those
  /// signals.
  [[nodiscard]] Result<void> run();

  /// Stops the mount, as SIGTERM does: fetches are cancelled, readers waiting get `EIO`, the
  /// directory is unmounted lazily (new opens fail; reads under way get `EIO`), and `run` returns
  /// when the last open file is closed, or after 10 s anyway. Returns when `run`'s loop has ended
  /// or those 10 s have passed. Thread-safe; not async-signal-safe (signals are `run`'s own).
  void exit();

  /// The totals so far. Thread-safe.
  [[nodiscard]] MountStats stats() const;

  /// Logs the totals (one line) through `MountOptions::log`. Thread-safe.
  void log_totals() const;

  /// The mount point.
  [[nodiscard]] const std::string& dir() const noexcept;

  /// Opaque state; defined inside the library only.
  struct Impl;

 private:
  explicit Mount(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Unmounts the FUSE file system on `dir` (`tensorfetch unmount DIR`): as root with umount2,
/// else through `fusermount3 -u`. A directory with no FUSE mount is `InvalidArgument`; a busy one
/// `Busy`.
[[nodiscard]] TENSORFETCH_API Result<void> unmount(const std::string& dir);

}  // namespace tensorfetch
