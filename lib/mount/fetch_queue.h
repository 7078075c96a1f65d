// SPDX-License-Identifier: Apache-2.0
// Private to the mount binding: the fetch scheduler. `Checkpoint::fetch_ranges` must not run
// twice at once on one object, and readers of the same bytes must share one transfer; so one
// worker thread takes every range asked for since its last fetch and makes them one
// `fetch_ranges` call (which plans them together over all connections), while readers wait for
// the jobs that cover their bytes. A range asked for while an overlapping one is queued or in
// flight waits for that one and asks only for the rest: no byte range is requested twice.
//
// Why one worker batching rather than several Checkpoint objects (open_manifest): one fetch at
// a time spreads over every connection anyway (the planner splits it into chunks), local
// checkpoints have no manifest, and the in-flight table stays in one place; the cost is that a
// range asked for during a long fetch waits for it to end -- the tensor window (64 MiB by
// default) bounds how long.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tensorfetch/checkpoint.hpp"

namespace tensorfetch::mount {

/// Makes byte ranges present, all of them at once; returns the bytes it transferred. Called on
/// the queue's worker thread only, one call at a time.
using BatchFetcher = std::function<Result<std::uint64_t>(const std::vector<FileRanges>&)>;

/// One fetch asked for: some ranges of one file. Shared by the readers that wait for it.
struct FetchJob {
  std::size_t file = 0;
  std::vector<ByteRange> ranges;
  bool done = false;            // under the queue's mutex
  std::optional<Error> error;   // set when the fetch that carried it failed (under the mutex)
};

/// See the file comment. Thread-safe: `request`, `wait` and the counters from any thread.
class FetchQueue {
 public:
  /// A queue whose worker (started by `start`) calls `fetcher`.
  explicit FetchQueue(BatchFetcher fetcher);
  /// Stops (see `stop`) and joins the worker.
  ~FetchQueue();
  FetchQueue(const FetchQueue&) = delete;
  FetchQueue& operator=(const FetchQueue&) = delete;

  /// Starts the worker thread (it inherits the caller's signal mask).
  void start();

  /// Asks for `range` of `file`: returns the jobs to wait for (those already queued or in
  /// flight that overlap it, plus a new one for the rest, if any). After `stop`: one job, done,
  /// failed with `Cancelled`.
  [[nodiscard]] std::vector<std::shared_ptr<FetchJob>> request(std::size_t file, ByteRange range);

  /// Waits until every job is done; the first error among them, if any. Every `poll_ms` it
  /// asks `give_up` (may be empty) and returns `Cancelled` when that says true.
  [[nodiscard]] Result<void> wait(const std::vector<std::shared_ptr<FetchJob>>& jobs,
                                  const std::function<bool()>& give_up, int poll_ms = 100);

  /// Fails every queued job (`Cancelled`) and ends the worker after its current fetch (whose
  /// own cancellation is the fetcher's business). Idempotent.
  void stop();

  /// Bytes of the jobs queued or in flight (as asked: some may turn out cached).
  [[nodiscard]] std::uint64_t in_flight_bytes() const;
  /// Bytes the fetcher reported transferred, in total.
  [[nodiscard]] std::uint64_t fetched_bytes() const;
  /// Calls of the fetcher so far.
  [[nodiscard]] std::uint64_t fetches() const;

 private:
  void run();
  void finish(const std::vector<std::shared_ptr<FetchJob>>& jobs, const std::optional<Error>& error);

  BatchFetcher fetcher_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<FetchJob>> queued_;          // not yet handed to the fetcher
  std::vector<std::shared_ptr<FetchJob>> active_;         // queued or in flight
  bool stopping_ = false;
  std::uint64_t in_flight_bytes_ = 0, fetched_bytes_ = 0, fetches_ = 0;
  std::thread worker_;
};

}  // namespace tensorfetch::mount
