// SPDX-License-Identifier: Apache-2.0
// fetch_over_mpi (tensorfetch/mpi.hpp): open on rank 0, the others from its manifest; every rank
// reports what it lacks and holds; one plan (plan.h); each rank fetches its share from the origin;
// the bytes are passed on over MPI into every other rank's cache; a final fetch on every rank
// finds everything present and verifies whole files. Each phase ends with an agreement.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <optional>

#include "cluster/comm.h"
#include "cluster/plan.h"
#include "tensorfetch/mpi.hpp"

namespace tensorfetch {

namespace {

using cluster::ClusterChunk;
using cluster::Comm;
using cluster::Delivery;
using cluster::RankState;

// One MPI message: bytes `ranges` of a chunk's delivery, packed (with a trailing status byte:
// 1 when the owner could read them from its cache).
struct Piece {
  const ClusterChunk* chunk = nullptr;
  const Delivery* delivery = nullptr;
  std::vector<ByteRange> ranges;
  int tag = 0;
  [[nodiscard]] bool broadcast() const { return delivery->ranks.size() > 1; }
};

class Session {
 public:
  Session(Comm& comm, MPI_Comm user_comm, const ClusterOptions& options)
      : comm_(comm), user_comm_(user_comm), options_(options) {}

  Result<ClusterReport> run(std::string_view location, const OpenOptions& open_options);

 private:
  // Runs `work` on a thread of its own while this one keeps the heartbeats going; a lost rank
  // sets `lost_` (which cancels a fetch through its progress callback).
  template <class F>
  auto beating(F work) -> decltype(work()) {
    auto future = std::async(std::launch::async, std::move(work));
    while (future.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready) {
      if (lost_) continue;
      if (auto r = comm_.pulse(); !r) {
        lost_error_ = r.error();
        lost_ = true;
      }
    }
    return future.get();
  }

  // What a collective step's failure means: after a lost rank, nothing more can be agreed on.
  Error fatal(const Error& error) {
    if (comm_.broken() && options_.abort_on_lost_rank) {
      if (options_.on_fatal) options_.on_fatal(error);
      MPI_Abort(user_comm_, 3);
    }
    return error;
  }

  FetchOptions fetch_options() {
    FetchOptions fetch = options_.fetch;
    fetch.coalesce_gap = 0;
    fetch.progress = [this, user = options_.fetch.progress](const FetchProgress& p) {
      if (lost_) return false;
      return user ? user(p) : true;
    };
    return fetch;
  }

  Result<void> open(std::string_view location, const OpenOptions& open_options);
  Result<void> select();
  Result<std::vector<ClusterChunk>> plan();
  Result<void> fetch_share(std::span<const ClusterChunk> plan);
  Result<void> pass_on(std::span<const ClusterChunk> plan);
  Result<void> pass_window(std::span<const Piece> window);
  Result<void> verify();
  Result<void> conclude(const Result<void>& mine, const std::string& phase);

  Comm& comm_;
  MPI_Comm user_comm_;
  const ClusterOptions& options_;
  std::atomic<bool> lost_{false};
  std::optional<Error> lost_error_;
  std::optional<Checkpoint> ckpt_;
  std::vector<Selection> selection_;
  std::vector<std::vector<ByteRange>> wanted_;  // per file, normalized
  ClusterStats totals_;
};

// Ends a phase: this rank's outcome `mine`, agreed on by every rank (the first failing rank's
// error on all of them; after a lost rank, `fatal`).
Result<void> Session::conclude(const Result<void>& mine, const std::string& phase) {
  if (lost_) return fail(fatal(*lost_error_));
  auto agreed = comm_.agree(mine, phase);
  if (!agreed) return fail(comm_.broken() ? fatal(agreed.error()) : agreed.error());
  return {};
}

Result<void> Session::open(std::string_view location, const OpenOptions& open_options) {
  std::string manifest;  // empty: a local checkpoint, which every rank opens itself
  const std::string where(location);
  if (comm_.rank() == 0) {
    auto opened = beating([&] { return Checkpoint::open(location, open_options); });
    Result<void> mine;
    if (!opened) {
      mine = fail(opened.error());
    } else {
      ckpt_.emplace(std::move(*opened));
      totals_.open_requests = ckpt_->requests();
      if (ckpt_->remote()) {
        auto text = ckpt_->manifest();
        if (text) manifest = std::move(*text);
        else mine = fail(text.error());
      }
    }
    if (auto r = conclude(mine, "opening " + where); !r) return r;
  } else {
    if (auto r = conclude({}, "opening " + where); !r) return r;
  }
  if (auto r = comm_.broadcast(manifest, 0, "the manifest of " + where); !r) return fail(fatal(r.error()));
  Result<void> mine;
  if (comm_.rank() != 0) {
    auto opened = beating([&] {
      return manifest.empty() ? Checkpoint::open(location, open_options)
                              : Checkpoint::open_manifest(location, manifest, open_options);
    });
    if (opened) ckpt_.emplace(std::move(*opened));
    else mine = fail(opened.error());
  }
  return conclude(mine, "opening from rank 0's manifest");
}

Result<void> Session::select() {
  const Checkpoint& ckpt = *ckpt_;
  Result<void> mine;
  wanted_.assign(ckpt.files().size(), {});
  if (options_.whole_files) {
    for (std::size_t i = 0; i < ckpt.files().size(); ++i) {
      if (ckpt.files()[i].size > 0) wanted_[i].push_back(ByteRange{0, ckpt.files()[i].size});
    }
  } else {
    Result<std::vector<Selection>> chosen = std::vector<Selection>{};
    if (options_.select) {
      chosen = options_.select(ckpt, comm_.rank(), comm_.size());
    } else {
      for (const auto& t : ckpt.tensors()) {
        auto plan = plan_slice(*t.info, SliceSpec{});
        if (!plan) {
          chosen = fail(plan.error());
          break;
        }
        chosen->push_back(Selection{t, std::nullopt, std::move(*plan)});
      }
    }
    if (chosen) {
      selection_ = std::move(*chosen);
      for (const auto& s : selection_) {
        const ByteRange base = ckpt.header(s.ref.file)->file_range(*s.ref.info);
        for (const auto& r : s.plan.ranges) wanted_[s.ref.file].push_back(ByteRange{base.offset + r.offset, r.length});
      }
    } else {
      mine = fail(chosen.error());
    }
  }
  for (auto& w : wanted_) w = detail::normalize(std::move(w));
  return conclude(mine, "selecting");
}

// Every rank's needs and holdings, gathered, and the plan all of them compute alike.
Result<std::vector<ClusterChunk>> Session::plan() {
  Checkpoint& ckpt = *ckpt_;
  const std::size_t files = ckpt.files().size();
  std::vector<std::uint64_t> mine{files};
  auto add = [&mine](std::span<const ByteRange> set) {
    mine.push_back(set.size());
    for (const auto& r : set) {
      mine.push_back(r.offset);
      mine.push_back(r.length);
    }
  };
  Result<void> status;
  for (std::size_t i = 0; i < files && status; ++i) {
    std::vector<ByteRange> held;
    if (!wanted_[i].empty()) {
      // The bytes the open read (the header; on rank 0 the whole first window) go into the cache
      // first: they are never fetched again.
      if (auto r = ckpt.store(i, 0, {}); !r) status = fail(r.error());
      auto cached = ckpt.cached(i);
      if (cached) held = std::move(*cached);
      else status = fail(cached.error());
    }
    const auto need = detail::subtract(wanted_[i], held);
    totals_.cached_bytes += detail::total_bytes(wanted_[i]) - detail::total_bytes(need);
    add(need);
    add(held);
  }
  if (auto r = conclude(status, "reading the cache"); !r) return fail(r.error());
  auto gathered = comm_.allgather(mine, "what every rank lacks and holds");
  if (!gathered) return fail(fatal(gathered.error()));
  std::vector<RankState> ranks(comm_.size());
  std::uint64_t wanted_total = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto& v = (*gathered)[r];
    std::size_t at = 1;
    auto take = [&](std::vector<ByteRange>& set) {
      if (at >= v.size()) return false;
      const std::uint64_t n = v[at++];
      if (n > (v.size() - at) / 2) return false;
      for (std::uint64_t k = 0; k < n; ++k, at += 2) set.push_back(ByteRange{v[at], v[at + 1]});
      return true;
    };
    ranks[r].need.resize(files);
    ranks[r].held.resize(files);
    bool ok = !v.empty() && v[0] == files;
    for (std::size_t i = 0; ok && i < files; ++i) ok = take(ranks[r].need[i]) && take(ranks[r].held[i]);
    if (!ok) {
      return fail(ErrorCode::InvalidArgument, "rank " + std::to_string(r) + " opened another checkpoint (" +
                                                  std::to_string(v.empty() ? 0 : v[0]) + " files, rank " +
                                                  std::to_string(comm_.rank()) + " " + std::to_string(files) + ")");
    }
  }
  for (std::size_t i = 0; i < files; ++i) {
    std::vector<ByteRange> all;
    for (const auto& r : ranks) all.insert(all.end(), r.need[i].begin(), r.need[i].end());
    wanted_total += detail::total_bytes(detail::normalize(std::move(all)));
  }
  totals_.cluster_wanted_bytes = wanted_total;
  // Shares of about a quarter of each rank's part, at least 1 MiB, at most chunk_size.
  const std::uint64_t share = std::clamp<std::uint64_t>(wanted_total / (4 * comm_.size()), std::uint64_t{1} << 20,
                                                        std::max<std::uint64_t>(options_.chunk_size, 1 << 20));
  return cluster::plan_cluster(ranks, files, share);
}

Result<void> Session::fetch_share(std::span<const ClusterChunk> plan) {
  std::vector<FileRanges> share;
  for (const auto& c : plan) {
    if (c.owner != comm_.rank() || !c.from_origin) continue;
    if (share.empty() || share.back().file != c.file) share.push_back(FileRanges{c.file, {}});
    share.back().ranges.push_back(c.range);
  }
  Result<void> mine;
  if (!share.empty()) {
    auto stats = beating([&] { return ckpt_->fetch_ranges(share, fetch_options()); });
    if (stats) {
      totals_.origin_bytes += stats->bytes_transferred;
      totals_.origin_requests += stats->requests;
    } else {
      mine = fail(stats.error());
    }
  }
  return conclude(mine, "fetching its share from the origin");
}

Result<void> Session::pass_window(std::span<const Piece> window) {
  const std::size_t me = comm_.rank();
  std::vector<std::vector<std::byte>> buffers(window.size());
  std::vector<MPI_Request> requests;
  Result<void> local;  // this rank's own failure (reported at the agreement, after the window)
  for (std::size_t k = 0; k < window.size(); ++k) {
    const Piece& p = window[k];
    const ClusterChunk& c = *p.chunk;
    auto& buf = buffers[k];
    const std::uint64_t bytes = detail::total_bytes(p.ranges);
    buf.assign(bytes + 1, std::byte{0});
    if (c.owner == me) {
      Result<void> read;
      std::size_t at = 0;
      for (const auto& r : p.ranges) {
        if (read) read = ckpt_->read_cached(c.file, r.offset, std::span(buf).subspan(at, r.length));
        at += r.length;
      }
      buf.back() = read ? std::byte{1} : std::byte{0};
      if (!read && local) local = fail(read.error());
      totals_.sent_bytes += bytes * p.delivery->ranks.size();
    }
    const int count = static_cast<int>(buf.size());
    int rc = MPI_SUCCESS;
    requests.emplace_back();
    if (p.broadcast()) {
      rc = MPI_Ibcast(buf.data(), count, MPI_BYTE, static_cast<int>(c.owner), comm_.get(), &requests.back());
      ++totals_.broadcasts;
    } else if (c.owner == me) {
      const int to = static_cast<int>(p.delivery->ranks.front());
      rc = MPI_Isend(buf.data(), count, MPI_BYTE, to, p.tag, comm_.get(), &requests.back());
      ++totals_.messages;
    } else {
      rc = MPI_Irecv(buf.data(), count, MPI_BYTE, static_cast<int>(c.owner), p.tag, comm_.get(), &requests.back());
      ++totals_.messages;
    }
    if (auto r = comm_.check(rc, "passing bytes on over MPI"); !r) return fail(fatal(r.error()));
  }
  if (auto r = comm_.wait(requests, "passing bytes on over MPI"); !r) return fail(fatal(r.error()));
  // Received: written, then made durable and recorded, per file.
  std::vector<FileRanges> written;
  for (std::size_t k = 0; k < window.size() && local; ++k) {
    const Piece& p = window[k];
    const std::size_t file = p.chunk->file;
    if (p.chunk->owner == me) continue;
    if (buffers[k].back() != std::byte{1}) {
      local = fail(ErrorCode::Io, "rank " + std::to_string(p.chunk->owner) + " could not read bytes " +
                                      std::to_string(p.ranges.front().offset) + "-" +
                                      std::to_string(p.ranges.back().end()) + " of " + ckpt_->files()[file].path +
                                      " from its cache");
      break;
    }
    std::size_t at = 0;
    for (const auto& r : p.ranges) {
      if (auto w = ckpt_->store(file, r.offset, std::span(buffers[k]).subspan(at, r.length)); !w && local) {
        local = fail(w.error());
      }
      at += r.length;
    }
    totals_.received_bytes += at;
    if (written.empty() || written.back().file != file) written.push_back(FileRanges{file, {}});
    written.back().ranges.insert(written.back().ranges.end(), p.ranges.begin(), p.ranges.end());
  }
  for (const auto& w : written) {
    if (!local) break;
    if (auto r = ckpt_->commit_stored(w.file, w.ranges); !r) local = fail(r.error());
  }
  return local;
}

Result<void> Session::pass_on(std::span<const ClusterChunk> plan) {
  const std::size_t me = comm_.rank();
  const std::uint64_t piece_size = std::max<std::uint64_t>(options_.piece_size, 4096);
  const std::size_t in_flight = std::max<std::size_t>(options_.pieces_in_flight, 1);
  // Every rank walks the same pieces in the same order, taking part in the broadcasts (all of
  // them) and in the messages it sends or receives, a window of them at a time: the pieces a
  // rank waits for are always posted by their other ends (the earliest pending piece is in the
  // window of every rank it involves), so windows never wait on each other in a cycle.
  std::vector<Piece> window;
  Result<void> local;
  auto flush = [&]() -> bool {
    auto r = pass_window(window);
    window.clear();
    if (!r && local) local = r;
    return !comm_.broken();
  };
  int seq = 0;
  for (const auto& c : plan) {
    for (const auto& d : c.deliveries) {
      const bool involved = d.ranks.size() > 1 || c.owner == me || d.ranks.front() == me;
      for (auto& ranges : cluster::group(d.ranges, piece_size)) {
        const int tag = 2 + seq++ % 30000;
        if (!involved) continue;
        window.push_back(Piece{&c, &d, std::move(ranges), tag});
        if (window.size() == in_flight && !flush()) return local;
      }
    }
  }
  if (!window.empty() && !flush()) return local;
  return conclude(local, "passing bytes on over MPI");
}

Result<void> Session::verify() {
  // Everything wanted is in the cache now: the usual fetch finds it there (no request), and
  // verifies and marks complete every whole file.
  auto stats = beating([&] {
    FetchOptions fetch = fetch_options();
    fetch.coalesce_gap = options_.fetch.coalesce_gap;
    return options_.whole_files ? ckpt_->fetch_all(fetch) : ckpt_->fetch(selection_, fetch);
  });
  Result<void> mine;
  if (stats) {
    totals_.origin_bytes += stats->bytes_transferred;  // none, unless a cache lost bytes meanwhile
    totals_.origin_requests += stats->requests;
  } else {
    mine = fail(stats.error());
  }
  return conclude(mine, "verifying");
}

Result<ClusterReport> Session::run(std::string_view location, const OpenOptions& open_options) {
  if (auto r = open(location, open_options); !r) return fail(r.error());
  if (auto r = select(); !r) return fail(r.error());
  if (ckpt_->remote()) {
    auto planned = plan();
    if (!planned) return fail(planned.error());
    if (auto r = fetch_share(*planned); !r) return fail(r.error());
    if (auto r = pass_on(*planned); !r) return fail(r.error());
    if (auto r = verify(); !r) return fail(r.error());
  }
  auto origin = comm_.allgather({totals_.origin_bytes}, "the origin bytes of every rank");
  if (!origin) return fail(fatal(origin.error()));
  std::uint64_t cluster_origin = 0;
  for (const auto& v : *origin) cluster_origin += v.empty() ? 0 : v[0];
  totals_.rank = comm_.rank();
  totals_.world = comm_.size();
  totals_.cluster_origin_bytes = cluster_origin;
  return ClusterReport{std::move(*ckpt_), std::move(selection_), totals_};
}

}  // namespace

Result<ClusterReport> fetch_over_mpi(MPI_Comm comm, std::string_view location, const OpenOptions& open_options,
                                     const ClusterOptions& options) {
  const long stall = options.stall_timeout_ms > 0 ? options.stall_timeout_ms : open_options.stall_timeout_ms;
  auto c = Comm::open(comm, stall);
  if (!c) return fail(c.error());
  Session session(*c, comm, options);
  return session.run(location, open_options);
}

}  // namespace tensorfetch
