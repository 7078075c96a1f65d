// SPDX-License-Identifier: Apache-2.0
#include "fetch/fetcher.h"

#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "fetch/planner.h"
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

  void add(Blob* blob, ByteRange range) {
    if (range.length == 0) return;
    std::lock_guard g(mutex_);
    pending_[blob].push_back(range);
    pending_bytes_ += range.length;
    if (pending_bytes_ >= batch_bytes_) cv_.notify_one();
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
    std::unique_lock lock(mutex_);
    while (true) {
      cv_.wait_for(lock, interval_, [this] { return stopping_ || pending_bytes_ >= batch_bytes_; });
      auto batch = std::move(pending_);
      pending_.clear();
      pending_bytes_ = 0;
      const bool last = stopping_;
      lock.unlock();
      for (auto& [blob, ranges] : batch) {
        auto r = blob->commit(normalize(std::move(ranges)));
        if (r) r = blob->advance_hash();  // overlaps verification with the transfers
        if (!r) {
          std::lock_guard g(mutex_);
          if (!error_) error_ = r.error();
        }
      }
      lock.lock();
      if (last && pending_.empty()) return;
    }
  }

  std::uint64_t batch_bytes_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<Blob*, std::vector<ByteRange>> pending_;
  std::uint64_t pending_bytes_ = 0;
  bool stopping_ = false;
  std::optional<Error> error_;
  std::thread thread_;  // last: starts after the members it uses
};

struct Chunk {
  std::size_t file = 0;
  ByteRange range;            // still to transfer
  std::uint64_t received = 0; // of `range`, in the current round
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
  std::vector<PlannedChunk> out;
  std::uint64_t cached = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    FetchFile& f = files[i];
    RangeSet have;
    if (!f.sink) {
      auto h = f.blob->refresh();
      if (!h) return fail(h.error().with_context(f.what));
      have = std::move(*h);
    }
    std::vector<ByteRange> wanted = f.wanted;  // clipped to the file (a range past its end is not fetched)
    for (auto& r : wanted) r = ByteRange{std::min(r.offset, f.size), std::min(r.end(), f.size) - std::min(r.offset, f.size)};
    std::uint64_t held = 0;
    for (const auto& r : plan_transfers(std::move(wanted), have, settings.max_gap, settings.max_chunk, &held)) {
      out.push_back(PlannedChunk{i, r});
    }
    cached += held;
  }
  if (bytes_cached) *bytes_cached = cached;
  return out;
}

Result<FetchReport> fetch_ranges(std::span<FetchFile> files, const FetchSettings& settings) {
  FetchReport report;
  State state(files, settings);
  std::vector<Chunk> chunks;
  state.chunks_left.assign(files.size(), 0);
  state.per_file.resize(files.size());
  auto planned = plan_chunks(files, settings, &report.bytes_cached);
  if (!planned) return fail(planned.error());
  for (const auto& p : *planned) {
    chunks.push_back(Chunk{p.file, p.range, 0});
    state.progress.bytes_total += p.range.length;
    ++state.chunks_left[p.file];
    state.per_file[p.file].bytes_total += p.range.length;
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

  // A wait the server asks for (a rate limit) is said to the caller, and shown in the progress.
  HttpOptions http = settings.http;
  http.on_wait = [&](const HttpWait& w) {
    state.progress.waiting_seconds = static_cast<double>(w.wait_ms) / 1000.0;
    if (settings.on_wait) settings.on_wait(w);
    (void)state.report(true);
    state.progress.waiting_seconds = 0;
  };
  HttpClient client(http);
  std::optional<Error> error;
  auto note_error = [&](Error e) {
    if (!error || error_rank(e.code) > error_rank(error->code)) error = std::move(e);
  };
  std::vector<std::size_t> todo(chunks.size());
  for (std::size_t k = 0; k < chunks.size(); ++k) todo[k] = k;
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
  for (int round = 0; !todo.empty() && !error; ++round) {
    if (auto r = state.report(true); !r) {
      note_error(r.error());
      break;
    }
    std::vector<ChunkSink> sinks;
    sinks.reserve(todo.size());
    std::vector<HttpRequest> reqs;
    reqs.reserve(todo.size());
    for (std::size_t k : todo) {
      Chunk& c = chunks[k];
      c.received = 0;
      const FetchFile& f = files[c.file];
      sinks.emplace_back(state, c);
      HttpRequest r;
      r.url = f.url;
      r.range = c.range;
      r.if_match = f.if_match;
      r.bearer_token = settings.token;  // sent only if the URL's host is the endpoint's
      r.token_authority = settings.token_authority;
      r.sink = &sinks.back();
      r.expected_size = f.size;
      reqs.push_back(std::move(r));
    }
    std::vector<std::size_t> expired;  // positions in todo
    auto on_done = [&](std::size_t pos, const Result<HttpResponse>& res) -> bool {
      Chunk& c = chunks[todo[pos]];
      FetchFile& f = files[c.file];
      // What arrived in order before a transport failure (or a cancel, or a full disk) is kept:
      // a re-run resumes after it. A response that broke the protocol keeps nothing.
      const bool keep = res || res.error().code == ErrorCode::Network || res.error().code == ErrorCode::Cancelled ||
                        res.error().code == ErrorCode::RateLimited || res.error().code == ErrorCode::Io;
      if (keep && !f.sink) state.committer.add(f.blob, ByteRange{c.range.offset, c.received});
      if (res && (res->status == 206 || res->status == 200) && c.received == c.range.length) {
        if (--state.chunks_left[c.file] == 0) ++state.progress.files_done;
        return true;
      }
      if (res && (res->status == 403 || res->status == 410 || res->status == 416 || res->status == 400) &&
          !f.resolve_url.empty() && f.url != f.resolve_url && stale_resolves[c.file] < 3) {
        // The signed URL expired, or the CDN keeps failing on a valid range (its retries are
        // spent): resolve again, then resume.
        expired.push_back(pos);
        return true;
      }
      note_error(res ? chunk_error(f, c, *res) : res.error().with_context(f.what));
      return false;
    };
    auto results = client.perform(reqs, on_done);
    (void)results;
    // The client stops by itself when the token is cancelled (results it did not report).
    if (state.cancelled || settings.http.cancel.cancelled()) {
      note_error(Error{ErrorCode::Cancelled, "cancelled by the caller"});
    }
    if (error) break;
    std::vector<std::size_t> next;
    std::map<std::size_t, bool> resolved;
    for (std::size_t pos : expired) {
      Chunk& c = chunks[todo[pos]];
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
      next.push_back(todo[pos]);
    }
    todo = std::move(next);
  }
  auto committed = state.committer.stop();
  if (!committed) note_error(committed.error());
  report.bytes_transferred = state.progress.bytes_done;
  report.requests = client.stats().requests;
  report.retries = client.stats().retries;
  if (error) return fail(*error);
  (void)state.report(true);
  // Whole files present: verify and mark complete.
  for (auto& f : files) {
    if (!f.sink && covers(normalize(f.wanted), ByteRange{0, f.size})) {
      if (auto r = f.blob->finish(f.what); !r) return fail(r.error());
    }
  }
  return report;
}

}  // namespace tensorfetch::detail
