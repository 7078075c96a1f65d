// SPDX-License-Identifier: Apache-2.0
/// @file
/// Fetching a checkpoint once per cluster over MPI (built with the meson feature `mpi`; link
/// `libtensorfetch_mpi` and an MPI library, e.g. OpenMPI). Every rank of a communicator ends with
/// the bytes it asked for in its own cache, while each byte leaves the origin once: rank 0 opens
/// the checkpoint (the only header requests of the job) and broadcasts its snapshot manifest;
/// the ranks agree on one plan, each fetches its share of the bytes from the origin, and the
/// bytes are passed on over MPI (a broadcast for what every rank needs, point-to-point for what
/// only some need) straight into every other rank's cache, under the fetcher's durability rules.
/// Uses the C API of MPI only.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "tensorfetch/checkpoint.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"

namespace tensorfetch {

/// Chooses what one rank wants from the checkpoint, on that rank: called with the opened
/// checkpoint, the rank's position in the communicator and the communicator's size (e.g.
/// `ckpt.select_for_rank(rank, world, rules)` for tensor parallelism). Errors fail the whole job.
using ClusterSelect = std::function<Result<std::vector<Selection>>(const Checkpoint& checkpoint, std::size_t rank,
                                                                   std::size_t world)>;

/// How to fetch over MPI. A plain value.
struct ClusterOptions {
  /// Every file whole (a download: then `select` is not called and every file is verified
  /// against its sha256 and marked complete on every rank) instead of `select`'s tensors.
  bool whole_files = false;
  /// What this rank wants (when not `whole_files`); unset: every tensor, whole.
  ClusterSelect select;
  /// The fetch from the origin of each rank's share (connections, chunk size, progress,
  /// cancellation); `coalesce_gap` is not used: the ranks' shares never overlap.
  FetchOptions fetch;
  /// Largest share of bytes planned as one unit (one rank fetches it from the origin, then it is
  /// passed on); shares are about (bytes wanted) / (4 x ranks) so that every rank gets some.
  std::uint64_t chunk_size = 64 << 20;
  /// Largest single MPI message: bytes are passed on in pieces of at most this size, at most
  /// `pieces_in_flight` at once (the memory each rank uses for passing bytes on).
  std::uint64_t piece_size = 8 << 20;
  /// Pieces sent or received at once by each rank.
  std::size_t pieces_in_flight = 4;
  /// A rank that sends nothing (heartbeats included) for this long is taken as dead or hung
  /// (0: `OpenOptions::stall_timeout_ms`).
  long stall_timeout_ms = 0;
  /// When a rank is found dead or hung, the others cannot agree on anything any more: with this
  /// set, the rank that finds it calls `on_fatal` with the error and then `MPI_Abort` on the
  /// communicator with exit code 3 (which ends every rank of the job). Unset: the error is
  /// returned, and the caller must end the job itself (ranks still waiting would otherwise
  /// wait until their own stall timeout finds this rank gone).
  bool abort_on_lost_rank = true;
  /// Told the fatal error before `MPI_Abort` (e.g. to print it); may be unset.
  std::function<void(const Error&)> on_fatal;
};

/// What a fetch over MPI did on one rank. A plain value.
struct ClusterStats {
  std::size_t rank = 0;                    ///< this rank's position in the communicator
  std::size_t world = 0;                   ///< the communicator's size
  std::uint64_t open_requests = 0;         ///< requests of the open (0 except on rank 0)
  std::uint64_t origin_bytes = 0;          ///< bytes this rank fetched from the origin
  std::uint64_t origin_requests = 0;       ///< HTTP requests of those fetches
  std::uint64_t cached_bytes = 0;          ///< wanted bytes this rank's cache already held
  std::uint64_t sent_bytes = 0;            ///< bytes this rank passed on over MPI (once per receiver)
  std::uint64_t received_bytes = 0;        ///< bytes this rank received over MPI into its cache
  std::uint64_t cluster_origin_bytes = 0;  ///< origin bytes of every rank together
  std::uint64_t cluster_wanted_bytes = 0;  ///< distinct bytes some rank lacked (the plan's total)
  std::size_t broadcasts = 0;              ///< pieces broadcast (every rank takes part in each)
  std::size_t messages = 0;                ///< point-to-point pieces this rank sent or received
};

/// The result of a fetch over MPI on one rank. Move-only (owns the checkpoint).
struct ClusterReport {
  /// The checkpoint, opened on this rank (rank 0: from the origin; the others: from rank 0's
  /// manifest, without any request); every wanted byte is in this rank's cache.
  Checkpoint checkpoint;
  /// This rank's selection (empty with `whole_files`), of `checkpoint`.
  std::vector<Selection> selection;
  /// What it did.
  ClusterStats stats;
};

/// Fetches a checkpoint into the cache of every rank of `comm`, each origin byte once for the
/// whole communicator (see the file comment). Collective: every rank of `comm` calls it with the
/// same `location` and options (caches may differ: each rank's `OpenOptions::cache_dir`). A
/// local checkpoint is opened by every rank itself (nothing is passed on).
///
/// Every phase ends with the ranks agreeing on its outcome: when a rank fails (its origin
/// transfer after retries, its disk, its selection), every rank returns an error naming that
/// rank and its error (with the URL and byte range for a transfer), the failing rank's error
/// code. A rerun resumes: what any cache holds is passed on, not fetched again. Waits never
/// block: each is bounded by `stall_timeout_ms` of silence from a neighbouring rank (every rank
/// sends a heartbeat to the next one while it works), see `abort_on_lost_rank`.
///
/// `comm` is duplicated (it may be used for other work meanwhile) and its error handler left
/// alone; the duplicates return errors (`MPI_ERRORS_RETURN`). MPI must be initialized, at
/// `MPI_THREAD_FUNNELED` or above: MPI is called from the calling thread only, while the open and
/// the fetches run on a thread of their own (the calling one keeps the heartbeats going). Not
/// thread-safe.
[[nodiscard]] TENSORFETCH_API Result<ClusterReport> fetch_over_mpi(MPI_Comm comm, std::string_view location,
                                                                   const OpenOptions& open_options,
                                                                   const ClusterOptions& options);

}  // namespace tensorfetch
