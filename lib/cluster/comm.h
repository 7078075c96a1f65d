// SPDX-License-Identifier: Apache-2.0
// Private: MPI for a fetch over MPI, never blocking. A `Comm` owns duplicates of the caller's
// communicator (one for the work, one for heartbeats) with MPI_ERRORS_RETURN; every wait is a
// test loop that also sends a heartbeat to the next rank and watches the previous one, so a rank
// that died or hangs is found within the stall timeout instead of blocking forever. `agree` ends
// a phase: every rank learns whether any failed, and the first failing rank's error.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensorfetch/error.hpp"

namespace tensorfetch::cluster {

/// Duplicates of a communicator and the heartbeat ring over them. Not copyable; MPI calls from
/// one thread only.
class Comm {
 public:
  /// Duplicates `comm` (collective). `stall_ms`: silence of the previous rank taken as its loss.
  [[nodiscard]] static Result<Comm> open(MPI_Comm comm, long stall_ms);
  Comm(Comm&& other) noexcept;
  Comm& operator=(Comm&&) = delete;
  Comm(const Comm&) = delete;
  ~Comm();

  [[nodiscard]] std::size_t rank() const noexcept { return rank_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm get() const noexcept { return work_; }

  /// Waits until every request completes: `Network` naming `what` when the previous rank is
  /// silent for the stall timeout (the requests are then left as they are: the job is broken),
  /// or an MPI error. Sends heartbeats meanwhile.
  [[nodiscard]] Result<void> wait(std::vector<MPI_Request>& requests, const std::string& what);

  /// Sends a heartbeat when one is due and reads the previous rank's (call it often while
  /// working without MPI). Never blocks; `Network` when the previous rank has been silent for
  /// the stall timeout.
  [[nodiscard]] Result<void> pulse() { return watch(); }

  /// True once a lost rank was found (nothing can be agreed on any more).
  [[nodiscard]] bool broken() const noexcept { return broken_; }

  /// Ends a phase: every rank learns the outcome of every other. Returns `mine` when every rank
  /// succeeded, else the first failing rank's error (its code; its message, prefixed with
  /// "rank K: "), on every rank. Only a lost rank makes it fail otherwise.
  [[nodiscard]] Result<void> agree(const Result<void>& mine, const std::string& phase);

  /// Rank `root`'s `text` on every rank.
  [[nodiscard]] Result<void> broadcast(std::string& text, std::size_t root, const std::string& what);

  /// Every rank's `mine`, in rank order.
  [[nodiscard]] Result<std::vector<std::vector<std::uint64_t>>> allgather(const std::vector<std::uint64_t>& mine,
                                                                           const std::string& what);

  /// The silence that counts as a lost rank.
  [[nodiscard]] long stall_ms() const noexcept { return stall_ms_; }

  /// `rc` of an MPI call made on `get()`: an error (which breaks the job) names `what`.
  [[nodiscard]] Result<void> check(int rc, const std::string& what);

 private:
  Comm() = default;
  Result<void> watch();

  MPI_Comm work_ = MPI_COMM_NULL;
  MPI_Comm beat_ = MPI_COMM_NULL;
  std::size_t rank_ = 0, size_ = 1;
  long stall_ms_ = 30'000;
  bool broken_ = false;
  std::chrono::steady_clock::time_point last_sent_{}, last_heard_{};
  std::vector<MPI_Request> beats_;  // heartbeats on their way
  int beat_out_ = 0, beat_in_ = 0;   // heartbeat payloads (unused values)
};

}  // namespace tensorfetch::cluster
