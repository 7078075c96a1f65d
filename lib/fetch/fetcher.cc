// SPDX-License-Identifier: Apache-2.0
#include "fetch/fetcher.h"

#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "base/trace.h"
#include "fetch/planner.h"
#include "fetch/recent_rate.h"
#include "hub/hub_errors.h"

namespace tensorfetch::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Commits finished byte ranges on its own thread, in batches, so that fdatasync never holds up
// the transfers.
class Committer {
 public:
  Committer(std::uint64_t batch_bytes, long interval_ms)
      : batch_bytes_(batch_bytes), interval_(interval_ms), thread_([this] { run(); }) {}
  ~Committer() { stop(); }

  // Queues `range` of `blob` for the next commit, and has the committer thread start writing it
  // to disk at once (`Blob::start_writeback`): the commit's fdatasync then waits for less (the
  // last commit of a 21-MB get took 45 ms, after the last byte).
  void add(Blob* blob, ByteRange range) {
    if (range.length == 0) return;
    std::lock_guard g(mutex_);
    pending_[blob].push_back(range);
    pending_bytes_ += range.length;
    writeback_.emplace_back(blob, range);
    cv_.notify_one();
  }

  // Commits everything still pending and stops the thread. Returns the first error.
  Result<void> stop() {
    {
      std::lock_guard g(mutex_);
      if (stopping_) return error_ ? Result<void>(fail(*error_)) : Result<void>();
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    if (error_) return fail(*error_);
    return {};
  }

  [[nodiscard]] bool failed() const {
    std::lock_guard g(mutex_);
    return error_.has_value();
  }

  [[nodiscard]] std::optional<Error> error() const {
    std::lock_guard g(mutex_);
    return error_;
  }

 private:
  void run() {
    trace::name_track(trace::thread_track(), "committer");
    std::unique_lock lock(mutex_);
    auto due = std::chrono::steady_clock::now() + interval_;
    while (true) {
      cv_.wait_until(lock, due, [this] { return stopping_ || pending_bytes_ >= batch_bytes_ || !writeback_.empty(); });
      if (!writeback_.empty()) {
        auto ranges = std::move(writeback_);
        writeback_.clear();
        lock.unlock();
        for (const auto& [blob, range] : ranges) blob->start_writeback(range);
        lock.lock();
      }
      if (!stopping_ && pending_bytes_ < batch_bytes_ && std::chrono::steady_clock::now() < due) continue;
      due = std::chrono::steady_clock::now() + interval_;
      auto batch = std::move(pending_);
      pending_.clear();
      pending_bytes_ = 0;
      const bool last = stopping_;
      lock.unlock();
      commit_batch(batch);
      lock.lock();
      if (last && pending_.empty()) return;
    }
  }

  // Commits each blob of `batch`, up to kCommitThreads blobs at once: a commit waits for the
  // disk (the blob's data, then its extent map and directory), and blobs wait independently, so
  // the last commit of a fetch of several files costs about one blob's flushes, not their sum.
  void commit_batch(std::map<Blob*, std::vector<ByteRange>>& batch) {
    if (batch.empty()) return;
    trace::Scope span("commit (write, fdatasync, record extents)", "commit");
    span.arg("files", std::to_string(batch.size()));
    std::vector<std::map<Blob*, std::vector<ByteRange>>::value_type*> items;
    items.reserve(batch.size());
    for (auto& item : batch) items.push_back(&item);
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      for (std::size_t i = next++; i < items.size(); i = next++) {
        Blob* blob = items[i]->first;
        auto r = blob->commit(normalize(std::move(items[i]->second)));
        if (r) r = blob->advance_hash();  // overlaps verification with the transfers
        if (!r) {
          std::lock_guard g(mutex_);
          if (!error_) error_ = r.error();
        }
      }
    };
    std::vector<std::thread> helpers;
    for (std::size_t t = 1; t < std::min(items.size(), kCommitThreads); ++t) helpers.emplace_back(work);
    work();
    for (auto& h : helpers) h.join();
  }

  static constexpr std::size_t kCommitThreads = 8;
  std::uint64_t batch_bytes_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<Blob*, std::vector<ByteRange>> pending_;
  std::vector<std::pair<Blob*, ByteRange>> writeback_;  // to start writing to disk (not yet committed)
  std::uint64_t pending_bytes_ = 0;
  bool stopping_ = false;
  std::optional<Error> error_;
  std::thread thread_;  // last: starts after the members it uses
};

struct Chunk {
  std::size_t file = 0;
  ByteRange range;             // still to transfer in this round (shortened by a split)
  std::uint64_t received = 0;  // of `range`, in this round
  std::uint64_t committed = 0; // of `received`, handed to the committer
};

struct State;

// Streams one chunk's body into its blob.
class ChunkSink final : public BodySink {
 public:
  ChunkSink(State& state, Chunk& chunk) : state_(state), chunk_(chunk) {}
  Result<void> write(std::uint64_t offset, std::span<const std::byte> data) override;

 private:
  State& state_;
  Chunk& chunk_;
};

struct State {
  std::span<FetchFile> files;
  const FetchSettings& settings;
  Committer committer;
  FetchProgress progress;
  Clock::time_point started = Clock::now();
  Clock::time_point last_report{};
  std::vector<std::size_t> chunks_left;  // per file
  std::vector<FileProgress> per_file;
  bool cancelled = false;

  State(std::span<FetchFile> f, const FetchSettings& s)
      : files(f), settings(s), committer(s.commit_bytes, s.commit_interval_ms) {}

  Result<void> report(bool force) {
    if (settings.http.cancel.cancelled()) {
      cancelled = true;
      return fail(ErrorCode::Cancelled, "cancelled by the caller");
    }
    if (!settings.progress) return {};
    const auto now = Clock::now();
    if (!force && now - last_report < std::chrono::milliseconds(100)) return {};
    last_report = now;
    progress.seconds = std::chrono::duration<double>(now - started).count();
    progress.per_file = per_file;
    if (!settings.progress(progress)) {
      cancelled = true;
      return fail(ErrorCode::Cancelled, "cancelled by the caller");
    }
    return {};
  }

  // Hands what `c` received since the last time to the committer (blobs only).
  void commit_received(Chunk& c) {
    const FetchFile& f = files[c.file];
    if (!f.sink && c.received > c.committed) {
      const ByteRange range{c.range.offset + c.committed, c.received - c.committed};
      committer.add(f.blob, range);
      if (settings.on_received) settings.on_received(f.index, range);
    }
    c.committed = c.received;
  }
};

Result<void> ChunkSink::write(std::uint64_t offset, std::span<const std::byte> data) {
  if (auto e = state_.committer.error()) return fail(*e);
  FetchFile& f = state_.files[chunk_.file];
  if (f.sink) {
    if (!f.sink(offset, data)) {
      state_.cancelled = true;
      return fail(ErrorCode::Cancelled, f.what + ": the byte sink stopped the transfer");
    }
  } else if (auto r = f.blob->write_at(offset, data); !r) {
    return fail(r.error().with_context(f.what));
  }
  chunk_.received += data.size();
  if (chunk_.received - chunk_.committed >= state_.settings.commit_piece) state_.commit_received(chunk_);
  state_.progress.bytes_done += data.size();
  state_.per_file[chunk_.file].bytes_done += data.size();
  return state_.report(false);
}

// Where a file's ranges are read now: resolves `resolve_url` again (one small range request,
// redirects followed) after a signed CDN URL expired.
Result<void> re_resolve(HttpClient& client, FetchFile& f, const FetchSettings& s) {
  HttpRequest r;
  r.url = f.resolve_url;
  r.range = ByteRange{0, 1};
  r.max_body = 1;
  r.bearer_token = s.token;
  r.token_authority = s.token_authority;
  r.restart_after_redirect_fault = true;
  auto res = client.perform(std::span(&r, 1));
  if (!res[0]) return fail(res[0].error().with_context(f.what));
  const HttpResponse& resp = *res[0];
  // A CDN that keeps failing on the probe still gave a fresh URL: the chunk's own retries on it
  // decide (and report the fault with its range).
  const bool fresh_url_despite_fault = (resp.status == 400 || resp.status == 416) && !resp.redirects.empty();
  if (resp.status != 206 && resp.status != 200 && !fresh_url_despite_fault) {
    return fail(ErrorCode::BadResponse, f.what + ": resolving " + f.resolve_url + " again for a fresh download URL: HTTP " +
                                            std::to_string(resp.status));
  }
  std::string linked;
  for (const auto& hop : resp.redirects) {
    if (auto it = hop.headers.find("x-linked-etag"); it != hop.headers.end()) linked = it->second;
  }
  if (f.linked_etag && !linked.empty() && !same_etag(linked, *f.linked_etag)) {
    return fail(ErrorCode::Integrity, f.what + ": the file changed on the server (X-Linked-Etag " + linked +
                                          " instead of " + *f.linked_etag + "): " + f.resolve_url);
  }
  if (resp.content_range && resp.content_range->total != f.size) {
    return fail(ErrorCode::Integrity, f.what + ": the file's size changed to " + std::to_string(resp.content_range->total) +
                                          " from " + std::to_string(f.size) + ": " + resp.url);
  }
  f.url = resp.url;
  if (auto it = resp.headers.find("etag"); it != resp.headers.end() && f.if_match) f.if_match = it->second;
  return {};
}

// The error for a chunk's final response that is not a 206.
Error chunk_error(const FetchFile& f, const Chunk& c, const HttpResponse& r) {
  const std::string where = f.what + ": " + r.url + " (" + range_text(c.range) + ")";
  if (r.status == 412) {
    return {ErrorCode::Integrity, where + ": the file changed on the server (ETag no longer " +
                                      (f.if_match ? *f.if_match : std::string("the pinned one")) + ", HTTP 412)"};
  }
  if (r.status == 416 || r.status == 400) {
    // A 416 is believed only when the server says the file is now smaller than the range.
    if (r.status == 416) {
      auto it = r.headers.find("content-range");
      const std::string cr = it == r.headers.end() ? std::string() : it->second;
      if (cr.starts_with("bytes */")) {
        const std::uint64_t now = std::strtoull(cr.c_str() + 8, nullptr, 10);
        if (now != f.size && c.range.offset >= now) {
          return {ErrorCode::Integrity, where + ": the file has " + std::to_string(now) + " bytes now, not " +
                                            std::to_string(f.size) + " (HTTP 416): it changed on the server"};
        }
      }
    }
    return {ErrorCode::Network, where + ": HTTP " + std::to_string(r.status) + " for a range inside the " +
                                    std::to_string(f.size) + "-byte file, still after " + std::to_string(r.attempts) +
                                    " attempts and fresh download URLs (a CDN fault that persisted; try again later)"};
  }
  if (r.status == 401 || r.status == 403) return {ErrorCode::Unauthorized, where + ": HTTP " + std::to_string(r.status)};
  if (r.status == 404) return {ErrorCode::RemoteNotFound, where + ": the file is gone (HTTP 404)"};
  if (r.status == 429 || r.status == 503) {
    return {ErrorCode::RateLimited, where + ": HTTP " + std::to_string(r.status) + " after " + std::to_string(r.attempts) + " attempts"};
  }
  if (r.status >= 500) return {ErrorCode::Network, where + ": server error HTTP " + std::to_string(r.status)};
  return {ErrorCode::BadResponse, where + ": unexpected HTTP " + std::to_string(r.status)};
}

int error_rank(ErrorCode c) {
  if (c == ErrorCode::Integrity) return 3;
  if (c == ErrorCode::Cancelled) return 0;
  return exit_code(c) == 3 ? 2 : 1;
}

}  // namespace

Result<std::vector<PlannedChunk>> plan_chunks(std::span<FetchFile> files, const FetchSettings& settings,
                                              std::uint64_t* bytes_cached) {
  // Wanted minus held per file; coalesced over all files within the over-fetch budget; then
  // every range cut into chunks of about total / connections, so that all connections share the
  // work, small or large.
  std::vector<RangeSet> missing(files.size());
  std::uint64_t cached = 0, total = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    FetchFile& f = files[i];
    RangeSet have;
    if (!f.sink) {
      auto h = f.blob->refresh();
      if (!h) return fail(h.error().with_context(f.what));
      have = std::move(*h);
      if (!f.unrecorded.empty()) {
        std::vector<ByteRange> all(have.begin(), have.end());
        all.insert(all.end(), f.unrecorded.begin(), f.unrecorded.end());
        have = normalize(std::move(all));
      }
    }
    std::vector<ByteRange> wanted = f.wanted;  // clipped to the file (a range past its end is not fetched)
    for (auto& r : wanted) r = ByteRange{std::min(r.offset, f.size), std::min(r.end(), f.size) - std::min(r.offset, f.size)};
    std::uint64_t held = 0;
    missing[i] = plan_transfers(std::move(wanted), have, 0, 0, &held);  // max_gap 0: exactly the missing bytes
    total += total_bytes(missing[i]);
    cached += held;
  }
  const std::vector<RangeSet> ranges =
      coalesce_within(missing, settings.max_gap, overfetch_budget(total, settings.max_gap, settings.overfetch_percent));
  total = 0;
  for (const auto& r : ranges) total += total_bytes(r);
  std::vector<PlannedChunk> out;
  if (bytes_cached) *bytes_cached = cached;
  const std::size_t start_with = std::max<std::size_t>(1, settings.http.max_parallel);
  const bool adaptive = settings.max_connections > 0;
  // A small adaptive fetch (up to 2 minimum chunks per connection it starts with) is one round:
  // as many equal pieces as connections (fewer if a piece would fall under the minimum chunk),
  // shared among the ranges in proportion to their lengths. New connections would come up (3
  // round trips) when it is nearly done, and a second round of pieces costs each connection
  // another round trip and ends late on the ones whose flows were already slowed (a trace of a
  // 21-MB get: 42 pieces on 32 connections, data done at 253 ms but the 10 second-round pieces
  // at 357 ms).
  if (adaptive && total <= start_with * 2 * settings.min_chunk) {
    std::vector<std::uint64_t> lengths;
    std::vector<std::pair<std::size_t, ByteRange>> flat;
    for (std::size_t i = 0; i < files.size(); ++i) {
      for (const auto& r : ranges[i]) {
        lengths.push_back(r.length);
        flat.emplace_back(i, r);
      }
    }
    const std::uint64_t pieces =
        std::clamp<std::uint64_t>(total / std::max<std::uint64_t>(1, settings.min_chunk), 1, start_with);
    const auto counts = pieces_per_range(lengths, pieces);
    // Pieces over the chunk size asked for (FetchSettings::max_chunk) plan as below.
    bool within = true;
    for (std::size_t k = 0; k < flat.size() && settings.max_chunk != 0; ++k) {
      within = within && (lengths[k] + counts[k] - 1) / counts[k] <= settings.max_chunk;
    }
    if (within) {
      for (std::size_t k = 0; k < flat.size(); ++k) {
        for (const auto& r : split_into(flat[k].second, counts[k])) out.push_back(PlannedChunk{flat[k].first, r});
      }
      return out;
    }
  }
  // Adaptive connections may grow to the ceiling: pieces small enough for 4 per connection at
  // the ceiling, so that the last of them still spread over every connection (the scheduler
  // joins neighbours into longer ranges while more work is queued, see Scheduler::absorb).
  const std::size_t plan_for = adaptive ? std::max(start_with, settings.max_connections) * 4 : start_with;
  const std::uint64_t chunk = chunk_size_for(total, plan_for, settings.min_chunk, settings.max_chunk);
  for (std::size_t i = 0; i < files.size(); ++i) {
    for (const auto& r : split(ranges[i], chunk)) out.push_back(PlannedChunk{i, r});
  }
  return out;
}

namespace {

// One round of transfers: N connections at work while chunks are queued; when connections run
// out of work, the running transfers that would finish last are split and the idle connections
// share their tails; a transfer far slower than the others (a straggler: a slow flow of a CDN, a bad path)
// does not count against N, so another connection takes over its work.
class Scheduler {
 public:
  Scheduler(State& state, HttpClient& client, std::deque<Chunk>& chunks, FlowControl& flows, FetchReport& report)
      : state_(state), client_(client), chunks_(chunks), flows_(flows), report_(report),
        adaptive_(state.settings.max_connections > 0), retries_seen_(client.stats().retries) {}

  // Starts the queued chunks `todo` (positions in `chunks`), N at a time, until they are done.
  // `on_done` decides about each finished chunk (false: stop all).
  void run(std::deque<std::size_t> todo, const std::function<bool(std::size_t chunk, const Result<HttpResponse>&)>& on_done) {
    queue_ = std::move(todo);
    queued_bytes_ = 0;
    for (std::size_t k : queue_) queued_bytes_ += chunks_[k].range.length;
    chunk_of_.clear();
    in_flight_.clear();
    sinks_.clear();
    fill();
    client_.run(
        [&](std::size_t id, const Result<HttpResponse>& res) {
          const std::size_t k = chunk_of_[id];
          in_flight_.erase(id);
          straggler_.erase(id);
          remember(id);
          rates_.erase(id);
          const bool go_on = on_done(k, res);
          if (go_on) fill();
          return go_on;
        },
        [&] { tick(); });
  }

 private:
  struct Measure {
    double rate = 0;        // bytes per second over the last second (see measure)
    double remaining = 0;   // seconds to the end at that rate
  };

  const FetchSettings& settings() const { return state_.settings; }

  // Transfers in flight that hold one of the N slots (stragglers do not).
  std::size_t holding() const { return in_flight_.size() - straggler_.size(); }

  // N: the connections the flow control wants now.
  std::size_t slots() const { return flows_.target(); }

  // Connections allowed beyond N while stragglers run: a quarter of N, at least one.
  std::size_t ceiling() const { return slots() + std::max<std::size_t>(1, slots() / 4); }

  bool room() const { return holding() < slots() && in_flight_.size() < ceiling(); }

  // Adaptive connections: the chunk `k` about to start takes in the queued chunks after it
  // (contiguous, same file) up to the queued bytes / the connections that may share them
  // (guided self-scheduling: the first transfers get long ranges, fewer requests and request
  // gaps; the later ones shorter, so that all end together), at most `max_chunk`. While the
  // number may still grow, the share is counted for 4 times the connections, so work is left
  // for the new ones.
  void absorb(std::size_t k) {
    Chunk& c = chunks_[k];
    queued_bytes_ -= std::min(queued_bytes_, c.range.length);
    if (!adaptive_) return;
    const std::size_t share_of = flows_.settled() ? slots() : std::min(slots() * 4, state_.settings.max_connections);
    const std::uint64_t want = queued_bytes_ / std::max<std::size_t>(1, share_of);
    const std::uint64_t cap = settings().max_chunk ? settings().max_chunk : ~std::uint64_t{0};
    while (!queue_.empty() && c.range.length < want) {
      Chunk& next = chunks_[queue_.front()];
      if (next.file != c.file || next.range.offset != c.range.end() || c.range.length + next.range.length > cap) break;
      c.range.length += next.range.length;
      queued_bytes_ -= std::min(queued_bytes_, next.range.length);
      next.range.length = 0;
      --state_.chunks_left[next.file];  // counted in `c` now
      queue_.pop_front();
    }
  }

  void start(std::size_t k) {
    Chunk& c = chunks_[k];
    c.received = c.committed = 0;
    const FetchFile& f = state_.files[c.file];
    auto& sink = sinks_.emplace_back(std::make_unique<ChunkSink>(state_, c));
    HttpRequest r;
    r.url = f.url;
    r.range = c.range;
    r.if_match = f.if_match;
    r.bearer_token = settings().token;  // sent only if the URL's host is the endpoint's
    r.token_authority = settings().token_authority;
    r.sink = sink.get();
    r.expected_size = f.size;
    const std::size_t id = client_.submit(std::move(r));
    if (chunk_of_.size() <= id) chunk_of_.resize(id + 1);
    chunk_of_[id] = k;
    in_flight_.insert(id);
  }

  void fill() {
    while (room() && !queue_.empty()) {
      const std::size_t k = queue_.front();
      queue_.pop_front();
      absorb(k);
      start(k);
    }
    report_.peak_connections = std::max(report_.peak_connections, in_flight_.size());
  }

  // Feeds the flow control: the fetch's bytes so far, the transfers receiving, and whether the
  // server pushed back since the last tick (a retry: 429/503, a refused, reset or stalled
  // connection).
  void steer(const std::vector<double>& waits) {
    const double now = std::chrono::duration<double>(Clock::now() - state_.started).count();
    const std::uint64_t retries = client_.stats().retries;
    if (retries > retries_seen_) flows_.backoff(now);
    retries_seen_ = retries;
    std::size_t receiving = 0;
    for (std::size_t id : in_flight_) {
      if (straggler_.count(id)) continue;
      if (auto st = client_.state(id); st && st->running && st->receiving_seconds > 0) ++receiving;
    }
    // Under a max_rate that pauses transfers the cap sets the rate: more flows bring nothing.
    const bool work_bound = (queue_.empty() && holding() < slots()) || client_.throttled();
    const std::size_t steps = flows_.steps();
    flows_.sample(now, state_.progress.bytes_done, receiving, waits.empty() ? 0 : median(waits), work_bound);
    if (flows_.steps() != steps && flows_.last_step() && trace::on()) {
      const FlowStep& step = *flows_.last_step();
      char rate[32];
      std::snprintf(rate, sizeof rate, "%.1f MB/s", step.rate / 1e6);
      trace::instant("connections: " + std::to_string(step.connections) + " (" + step.why + ")", "flows",
                     {{"rate measured", rate}, {"gain", std::to_string(step.gain)}});
    }
  }

  // The rate is the transfer's recent one (RecentRate: its last second), sampled at every
  // balancing tick.
  std::optional<Measure> measure(std::size_t id, double* first_byte = nullptr) {
    auto st = client_.state(id);
    if (!st || !st->running) return std::nullopt;
    if (first_byte && st->receiving_seconds > 0) *first_byte = st->first_byte_seconds;
    auto& recent = rates_.try_emplace(id).first->second;
    if (st->receiving_seconds > 0) recent.add(st->receiving_seconds, st->attempt_bytes);
    if (st->receiving_seconds < 0.15 || st->attempt_bytes == 0) return std::nullopt;  // too early to tell
    Measure m;
    m.rate = std::max(1.0, recent.rate().value_or(1.0));  // a window without a byte: as slow as it gets
    m.remaining = static_cast<double>(st->end - st->next) / m.rate;
    return m;
  }

  // Keeps the rate and first-byte wait of a finished transfer: what a new request may expect.
  void remember(std::size_t id) {
    auto st = client_.state(id);
    if (!st || st->attempt_bytes < (64 << 10) || st->receiving_seconds <= 0) return;
    done_rates_.push_back(static_cast<double>(st->attempt_bytes) / st->receiving_seconds);
    done_waits_.push_back(st->first_byte_seconds);
    if (done_rates_.size() > 32) done_rates_.pop_front();
    if (done_waits_.size() > 32) done_waits_.pop_front();
  }

  static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }

  void tick() {
    fill();
    const auto now = Clock::now();
    if (now - last_balance_ < std::chrono::milliseconds(20)) return;
    last_balance_ = now;
    // Rates of the transfers that have been receiving long enough to tell, and of the last
    // finished ones.
    std::vector<double> rates(done_rates_.begin(), done_rates_.end()), waits(done_waits_.begin(), done_waits_.end());
    std::vector<std::pair<std::size_t, Measure>> measured;
    for (std::size_t id : in_flight_) {
      double fb = -1;
      if (auto m = measure(id, &fb)) {
        rates.push_back(m->rate);
        measured.emplace_back(id, *m);
      }
      if (fb >= 0) waits.push_back(fb);
    }
    steer(waits);
    fill();
    // Under a max_rate that is pausing transfers, the cap sets every rate: no transfer is slow
    // because of its link, and more connections would not bring a byte more.
    if (rates.size() < 2 || client_.throttled()) return;
    const double typical = median(rates);
    const double wait = waits.empty() ? 0 : median(waits);  // time to first byte: what a new request costs
    // A transfer at less than a third of the typical rate, receiving for 0.3 s, gives
    // up its slot.
    for (const auto& [id, m] : measured) {
      if (m.rate * 3 < typical && !straggler_.count(id) && client_.state(id)->receiving_seconds >= 0.3) {
        straggler_.insert(id);
        ++report_.stragglers;
      }
    }
    // A straggler's tail moves to a new connection at once, before queued work takes the slot
    // it gave up (the ceiling bounds the connections): it would otherwise end the fetch
    // long after the others, the more so as the pieces get small at the end, where a 512-KiB
    // piece on a flow at a tenth of the rate takes 10 times as long. What it keeps ends when
    // its helper does; the helper, if it lands on a slow connection too, is split in turn. Worth
    // it while it would still run 2 first-byte waits: the helper's wait plus its share of the
    // bytes at the typical rate is then shorter.
    for (auto& e : measured) {
      if (in_flight_.size() >= ceiling()) break;
      if (straggler_.count(e.first) && e.second.remaining >= 2 * wait) {
        (void)split(e, typical, wait, 1, settings().min_straggler_split);
      }
    }
    fill();
    // Idle slots and nothing queued: split the transfers that would finish last. The idle
    // slots are shared among the transfers worth splitting, so a long tail goes to several
    // connections at once (one helper each would keep most of it on one flow). A transfer at
    // under half the typical rate is worth it for 2 first-byte waits, as a straggler is.
    const auto slow = [&](const Measure& m) { return m.rate * 2 < typical; };
    const auto worth = [&](const Measure& m) {
      return slow(m) ? m.remaining >= 2 * wait : m.remaining >= std::max(settings().min_split_seconds, 4 * wait);
    };
    const std::size_t candidates = static_cast<std::size_t>(
        std::count_if(measured.begin(), measured.end(), [&](const auto& e) { return worth(e.second); }));
    const std::size_t idle = idle_slots();
    const std::size_t share = candidates == 0 ? 1 : std::max<std::size_t>(1, idle / candidates);
    while (room() && queue_.empty()) {
      std::pair<std::size_t, Measure>* victim = nullptr;
      for (auto& e : measured) {
        if (!victim || e.second.remaining > victim->second.remaining) victim = &e;
      }
      // Only a transfer that would still run long pays for the bytes already on their way past
      // the cut (socket buffers: megabytes on a fast link, read for nothing).
      if (!victim || !worth(victim->second)) return;
      const std::uint64_t min_piece = slow(victim->second) ? settings().min_straggler_split : settings().min_split;
      if (!split(*victim, typical, wait, std::min(share, idle_slots()), min_piece)) return;
    }
  }

  // Free slots now: holding slots under N, within the ceiling of connections.
  std::size_t idle_slots() const {
    if (!room()) return 0;
    return std::min(slots() - holding(), ceiling() - in_flight_.size());
  }

  // Cuts the running transfer `victim` so that it and `helpers` new transfers of its tail all
  // end together (the victim at its measured rate, each new one at `typical` after a first-byte
  // `wait`), and starts the new ones; no piece under `min_piece` bytes. False when there is
  // nothing worth cutting.
  bool split(std::pair<std::size_t, Measure>& victim, double typical, double wait, std::size_t helpers,
             std::uint64_t min_piece_bytes) {
    auto st = client_.state(victim.first);
    if (!st || !st->running) return false;
    const double p = static_cast<double>(st->next), e = static_cast<double>(st->end);
    const double rv = victim.second.rate, rn = std::max(typical, rv), min_piece = static_cast<double>(min_piece_bytes);
    // No helper's piece below the minimum.
    helpers = std::max<std::size_t>(1, std::min<std::size_t>(helpers, static_cast<std::size_t>((e - p) / min_piece)));
    const double k = static_cast<double>(helpers);
    // The victim keeps x bytes: x / rv = wait + (e - p - x) / (k rn).
    const double x = (rv * wait + rv * (e - p) / (k * rn)) / (1 + rv / (k * rn));
    const double lo = p + min_piece / 4, hi = e - min_piece * k;
    if (hi <= lo) return false;
    const double m = std::clamp(p + x, lo, hi);
    const std::uint64_t cut = (static_cast<std::uint64_t>(m) + 4095) / 4096 * 4096;  // page-aligned writes
    if (cut <= st->next || cut >= st->end || !client_.shorten(victim.first, cut)) return false;
    Chunk& old = chunks_[chunk_of_[victim.first]];
    const std::uint64_t old_end = old.range.end();
    old.range.length = cut - old.range.offset;
    ++report_.splits;
    // The tail, in `helpers` page-aligned pieces as equal as possible.
    const std::uint64_t tail = old_end - cut;
    std::uint64_t at = cut;
    for (std::size_t i = 0; i < helpers && at < old_end; ++i) {
      std::uint64_t end = i + 1 == helpers ? old_end : cut + tail * (i + 1) / helpers;
      if (end != old_end) end = std::min(old_end, (end + 4095) / 4096 * 4096);
      if (end <= at) continue;
      chunks_.push_back(Chunk{old.file, ByteRange{at, end - at}, 0, 0});
      ++state_.chunks_left[old.file];
      start(chunks_.size() - 1);
      at = end;
    }
    // The victim's estimate changes: it now ends at `cut`.
    victim.second.remaining = (m - p) / rv;
    return true;
  }

  State& state_;
  HttpClient& client_;
  std::deque<Chunk>& chunks_;  // grows on splits (a deque: sinks keep references)
  FlowControl& flows_;
  FetchReport& report_;
  bool adaptive_;
  std::uint64_t retries_seen_;
  std::deque<std::size_t> queue_;
  std::uint64_t queued_bytes_ = 0;     // of the chunks in queue_
  std::vector<std::size_t> chunk_of_;  // request id -> chunk
  std::set<std::size_t> in_flight_;    // request ids
  std::set<std::size_t> straggler_;    // request ids in flight found far slower than the others
  std::vector<std::unique_ptr<ChunkSink>> sinks_;
  Clock::time_point last_balance_{};
  std::deque<double> done_rates_, done_waits_;  // of the last finished transfers
  std::unordered_map<std::size_t, RecentRate> rates_;  // request id -> its recent progress
};

}  // namespace

Result<FetchReport> fetch_ranges(std::span<FetchFile> files, const FetchSettings& settings) {
  trace::Scope span("fetch ranges", "fetch");
  FetchReport report;
  State state(files, settings);
  std::deque<Chunk> chunks;  // grows on splits; sinks keep references
  state.chunks_left.assign(files.size(), 0);
  state.per_file.resize(files.size());
  const auto plan_start = trace::Clock::now();
  auto planned = plan_chunks(files, settings, &report.bytes_cached);
  trace::span("plan (cache subtracted, coalesced, split)", "fetch", plan_start);
  if (!planned) return fail(planned.error());
  for (const auto& p : *planned) {
    chunks.push_back(Chunk{p.file, p.range, 0, 0});
    state.progress.bytes_total += p.range.length;
    ++state.chunks_left[p.file];
    state.per_file[p.file].bytes_total += p.range.length;
  }
  // What the caller wrote before the fetch is recorded with its first commit.
  for (auto& f : files) {
    if (f.sink) continue;
    for (const auto& r : f.unrecorded) state.committer.add(f.blob, r);
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    state.per_file[i].file = files[i].index;
    if (!files[i].sink && covers(normalize(files[i].wanted), ByteRange{0, files[i].size})) {
      files[i].blob->enable_streaming_hash();
    }
  }
  report.chunks = chunks.size();
  state.progress.files_total = files.size();
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (state.chunks_left[i] == 0) ++state.progress.files_done;
  }
  state.progress.bytes_cached = report.bytes_cached;

  // Bulk data: one TCP connection per transfer (not multiplexed), N holding slots plus room for
  // the connections that take over from stragglers.
  const std::size_t connections = std::max<std::size_t>(1, settings.http.max_parallel);
  const std::size_t most = std::max(connections, settings.max_connections);
  FlowSettings flow_settings;
  flow_settings.initial = connections;
  flow_settings.ceiling = most;
  FlowControl flows(flow_settings, settings.max_connections == 0);
  HttpOptions http = settings.http;
  http.multiplex = false;
  http.max_parallel = most + std::max<std::size_t>(1, most / 4);
  // A wait the server asks for (a rate limit) is said to the caller, and shown in the progress.
  http.on_wait = [&](const HttpWait& w) {
    state.progress.waiting_seconds = static_cast<double>(w.wait_ms) / 1000.0;
    if (settings.on_wait) settings.on_wait(w);
    (void)state.report(true);
    state.progress.waiting_seconds = 0;
  };
  std::optional<HttpClient> own;
  HttpClient* kept = chunks.empty() || !settings.client ? nullptr : settings.client();
  if (!kept || !kept->reconfigure(http)) own.emplace(http);
  HttpClient& client = own ? *own : *kept;
  const HttpStats before = client.stats();  // a kept client counts its earlier fetches too
  std::optional<Error> error;
  auto note_error = [&](Error e) {
    if (!error || error_rank(e.code) > error_rank(error->code)) error = std::move(e);
  };
  std::deque<std::size_t> todo;
  for (std::size_t k = 0; k < chunks.size(); ++k) todo.push_back(k);
  // Space for every planned byte is allocated before the first request: a disk that cannot hold
  // them fails now, not after transferring most of them.
  for (const auto& c : chunks) {
    const FetchFile& f = files[c.file];
    if (f.sink) continue;
    if (auto r = f.blob->reserve(c.range); !r) {
      note_error(r.error().with_context(f.what));
      break;
    }
  }
  // Re-resolves of a file since bytes last arrived for it: an URL that expires again and again
  // before anything arrives means the server will not serve it.
  std::vector<int> stale_resolves(files.size(), 0);
  std::vector<std::uint64_t> done_at_resolve(files.size(), 0);
  Scheduler scheduler(state, client, chunks, flows, report);
  while (!todo.empty() && !error) {
    if (auto r = state.report(true); !r) {
      note_error(r.error());
      break;
    }
    std::vector<std::size_t> expired;  // chunks whose URL expired
    scheduler.run(std::move(todo), [&](std::size_t k, const Result<HttpResponse>& res) -> bool {
      Chunk& c = chunks[k];
      FetchFile& f = files[c.file];
      // What arrived in order before a transport failure (or a cancel, or a full disk) is kept:
      // a re-run resumes after it. A response that broke the protocol keeps nothing.
      const bool keep = res || res.error().code == ErrorCode::Network || res.error().code == ErrorCode::Cancelled ||
                        res.error().code == ErrorCode::RateLimited || res.error().code == ErrorCode::Io;
      if (keep) state.commit_received(c);
      if (res && (res->status == 206 || res->status == 200) && c.received == c.range.length) {
        if (--state.chunks_left[c.file] == 0) ++state.progress.files_done;
        return true;
      }
      if (res && (res->status == 403 || res->status == 410 || res->status == 416 || res->status == 400) &&
          !f.resolve_url.empty() && f.url != f.resolve_url && stale_resolves[c.file] < 3) {
        // The signed URL expired, or the CDN keeps failing on a valid range (its retries are
        // spent): resolve again, then resume.
        expired.push_back(k);
        return true;
      }
      note_error(res ? chunk_error(f, c, *res) : res.error().with_context(f.what));
      return false;
    });
    todo.clear();
    // The client stops by itself when the token is cancelled (results it did not report).
    if (state.cancelled || settings.http.cancel.cancelled()) {
      note_error(Error{ErrorCode::Cancelled, "cancelled by the caller"});
    }
    if (error) break;
    std::map<std::size_t, bool> resolved;
    for (std::size_t k : expired) {
      Chunk& c = chunks[k];
      c.range = ByteRange{c.range.offset + c.received, c.range.length - c.received};
      if (!resolved.count(c.file)) {
        const std::uint64_t done = state.per_file[c.file].bytes_done;
        stale_resolves[c.file] = done == done_at_resolve[c.file] ? stale_resolves[c.file] + 1 : 0;
        done_at_resolve[c.file] = done;
        auto r = re_resolve(client, files[c.file], settings);
        if (!r) {
          note_error(r.error());
          break;
        }
        resolved[c.file] = true;
        ++report.re_resolves;
      }
      todo.push_back(k);
    }
  }
  auto committed = state.committer.stop();
  if (!committed) note_error(committed.error());
  report.bytes_transferred = state.progress.bytes_done;
  span.arg("bytes", std::to_string(report.bytes_transferred));
  span.arg("chunks", std::to_string(report.chunks));
  span.arg("connections at the end", std::to_string(flows.target()));
  report.connections = flows.target();
  report.learned = flows.learned();
  report.rate = flows.rate().value_or(0);
  report.requests = client.stats().requests - before.requests;
  report.retries = client.stats().retries - before.retries;
  if (error) return fail(*error);
  (void)state.report(true);
  // Whole files present: verify and mark complete.
  trace::Scope verify("verify whole files and mark them complete", "commit");
  for (auto& f : files) {
    if (!f.sink && covers(normalize(f.wanted), ByteRange{0, f.size})) {
      if (auto r = f.blob->finish(f.what); !r) return fail(r.error());
    }
  }
  return report;
}

}  // namespace tensorfetch::detail
