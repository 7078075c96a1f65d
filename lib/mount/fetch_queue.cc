// SPDX-License-Identifier: Apache-2.0
#include "mount/fetch_queue.h"

#include <algorithm>
#include <chrono>

namespace tensorfetch::mount {

namespace {

// `pieces` without `cut` (both sorted, non-overlapping lists of ranges).
void subtract(std::vector<ByteRange>& pieces, ByteRange cut) {
  std::vector<ByteRange> out;
  for (const auto& p : pieces) {
    if (cut.end() <= p.offset || cut.offset >= p.end()) {
      out.push_back(p);
      continue;
    }
    if (p.offset < cut.offset) out.push_back(ByteRange{p.offset, cut.offset - p.offset});
    if (cut.end() < p.end()) out.push_back(ByteRange{cut.end(), p.end() - cut.end()});
  }
  pieces = std::move(out);
}

bool overlaps(ByteRange a, ByteRange b) { return a.offset < b.end() && b.offset < a.end(); }

std::uint64_t total(const std::vector<ByteRange>& ranges) {
  std::uint64_t n = 0;
  for (const auto& r : ranges) n += r.length;
  return n;
}

}  // namespace

FetchQueue::FetchQueue(BatchFetcher fetcher) : fetcher_(std::move(fetcher)) {}

FetchQueue::~FetchQueue() {
  stop();
  if (worker_.joinable()) worker_.join();
}

void FetchQueue::start() {
  if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
}

std::vector<std::shared_ptr<FetchJob>> FetchQueue::request(std::size_t file, ByteRange range) {
  std::vector<std::shared_ptr<FetchJob>> waits;
  std::lock_guard lock(mutex_);
  if (stopping_) {
    auto job = std::make_shared<FetchJob>();
    job->file = file;
    job->done = true;
    job->error = Error{ErrorCode::Cancelled, "the mount is stopping"};
    return {job};
  }
  std::vector<ByteRange> rest{range};
  if (range.length == 0) return waits;
  for (const auto& job : active_) {
    if (job->file != file) continue;
    bool shared = false;
    for (const auto& r : job->ranges) {
      if (!overlaps(r, range)) continue;
      shared = true;
      subtract(rest, r);
    }
    if (shared) waits.push_back(job);
  }
  if (!rest.empty()) {
    auto job = std::make_shared<FetchJob>();
    job->file = file;
    job->ranges = std::move(rest);
    in_flight_bytes_ += total(job->ranges);
    active_.push_back(job);
    queued_.push_back(job);
    waits.push_back(std::move(job));
    work_cv_.notify_one();
  }
  return waits;
}

Result<void> FetchQueue::wait(const std::vector<std::shared_ptr<FetchJob>>& jobs, const std::function<bool()>& give_up,
                              int poll_ms) {
  std::unique_lock lock(mutex_);
  for (const auto& job : jobs) {
    while (!job->done) {
      done_cv_.wait_for(lock, std::chrono::milliseconds(poll_ms));
      if (!job->done && give_up) {
        lock.unlock();
        const bool stop = give_up();
        lock.lock();
        if (stop && !job->done) return fail(ErrorCode::Cancelled, "the mount is stopping");
      }
    }
  }
  for (const auto& job : jobs) {
    if (job->error) return fail(*job->error);
  }
  return {};
}

void FetchQueue::stop() {
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  stopping_ = true;
  for (auto& job : queued_) {
    job->done = true;
    job->error = Error{ErrorCode::Cancelled, "the mount is stopping"};
    in_flight_bytes_ -= total(job->ranges);
    std::erase(active_, job);
  }
  queued_.clear();
  work_cv_.notify_all();
  done_cv_.notify_all();
}

std::uint64_t FetchQueue::in_flight_bytes() const {
  std::lock_guard lock(mutex_);
  return in_flight_bytes_;
}

std::uint64_t FetchQueue::fetched_bytes() const {
  std::lock_guard lock(mutex_);
  return fetched_bytes_;
}

std::uint64_t FetchQueue::fetches() const {
  std::lock_guard lock(mutex_);
  return fetches_;
}

void FetchQueue::finish(const std::vector<std::shared_ptr<FetchJob>>& jobs, const std::optional<Error>& error) {
  for (const auto& job : jobs) {
    job->done = true;
    job->error = error;
    in_flight_bytes_ -= total(job->ranges);
    std::erase(active_, job);
  }
  done_cv_.notify_all();
}

void FetchQueue::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    std::vector<std::shared_ptr<FetchJob>> batch(queued_.begin(), queued_.end());
    queued_.clear();
    // One FileRanges per file, in the order first asked.
    std::vector<FileRanges> ranges;
    for (const auto& job : batch) {
      auto it = std::find_if(ranges.begin(), ranges.end(), [&](const FileRanges& f) { return f.file == job->file; });
      if (it == ranges.end()) {
        ranges.push_back(FileRanges{job->file, {}});
        it = ranges.end() - 1;
      }
      it->ranges.insert(it->ranges.end(), job->ranges.begin(), job->ranges.end());
    }
    for (auto& f : ranges) {
      std::sort(f.ranges.begin(), f.ranges.end(),
                [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
    }
    lock.unlock();
    auto fetched = fetcher_(ranges);
    lock.lock();
    ++fetches_;
    if (fetched) fetched_bytes_ += *fetched;
    finish(batch, fetched ? std::nullopt : std::optional<Error>(fetched.error()));
  }
}

}  // namespace tensorfetch::mount
