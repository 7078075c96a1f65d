// SPDX-License-Identifier: Apache-2.0
#include "cluster/comm.h"

#include <time.h>

#include <limits>

namespace tensorfetch::cluster {

namespace {

constexpr int kBeatTag = 1;

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<std::size_t>(length));
}

void nap() {
  const timespec t{0, 50'000};  // 50 us: MPI progresses only inside its calls
  nanosleep(&t, nullptr);
}

}  // namespace

Result<void> Comm::check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return {};
  broken_ = true;
  return fail(ErrorCode::Network, "rank " + std::to_string(rank_) + ": MPI failed while " + what + ": " +
                                      mpi_error_text(rc));
}

Result<Comm> Comm::open(MPI_Comm comm, long stall_ms) {
  Comm c;
  c.stall_ms_ = stall_ms > 0 ? stall_ms : 30'000;
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  c.rank_ = static_cast<std::size_t>(rank);
  c.size_ = static_cast<std::size_t>(size);
  if (auto r = c.check(MPI_Comm_dup(comm, &c.work_), "duplicating the communicator"); !r) return fail(r.error());
  if (auto r = c.check(MPI_Comm_dup(comm, &c.beat_), "duplicating the communicator"); !r) return fail(r.error());
  MPI_Comm_set_errhandler(c.work_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(c.beat_, MPI_ERRORS_RETURN);
  c.last_heard_ = std::chrono::steady_clock::now();
  return c;
}

Comm::Comm(Comm&& other) noexcept
    : work_(other.work_), beat_(other.beat_), rank_(other.rank_), size_(other.size_), stall_ms_(other.stall_ms_),
      broken_(other.broken_), last_sent_(other.last_sent_), last_heard_(other.last_heard_),
      beats_(std::move(other.beats_)) {
  other.work_ = other.beat_ = MPI_COMM_NULL;
  other.beats_.clear();
}

Comm::~Comm() {
  if (broken_ || work_ == MPI_COMM_NULL) return;  // a lost rank: requests may still use them
  for (auto& r : beats_) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
  // Heartbeats that arrived and were not read yet.
  for (;;) {
    int flag = 0;
    MPI_Message message;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, kBeatTag, beat_, &flag, &message, &status) != MPI_SUCCESS || !flag) break;
    int ignored = 0;
    MPI_Mrecv(&ignored, 1, MPI_INT, &message, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&beat_);
  MPI_Comm_free(&work_);
}

Result<void> Comm::watch() {
  if (size_ < 2) return {};
  const auto now = std::chrono::steady_clock::now();
  const int prev = static_cast<int>((rank_ + size_ - 1) % size_);
  for (;;) {
    int flag = 0;
    MPI_Message message;
    if (auto r = check(MPI_Improbe(prev, kBeatTag, beat_, &flag, &message, MPI_STATUS_IGNORE), "reading heartbeats");
        !r) {
      return r;
    }
    if (!flag) break;
    if (auto r = check(MPI_Mrecv(&beat_in_, 1, MPI_INT, &message, MPI_STATUS_IGNORE), "reading heartbeats"); !r) {
      return r;
    }
    last_heard_ = now;
  }
  const auto interval = std::chrono::milliseconds(std::max(100L, stall_ms_ / 5));
  if (now - last_sent_ >= interval) {
    // Heartbeats already delivered are forgotten.
    std::erase_if(beats_, [](MPI_Request& r) {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
    MPI_Request request;
    const int next = static_cast<int>((rank_ + 1) % size_);
    if (auto r = check(MPI_Isend(&beat_out_, 1, MPI_INT, next, kBeatTag, beat_, &request), "sending a heartbeat"); !r) {
      return r;
    }
    beats_.push_back(request);
    last_sent_ = now;
  }
  if (now - last_heard_ > std::chrono::milliseconds(stall_ms_)) {
    broken_ = true;
    return fail(ErrorCode::Network, "rank " + std::to_string(prev) + " sent nothing for " +
                                        std::to_string(stall_ms_ / 1000.0).substr(0, 5) +
                                        " s (the stall timeout): it died or hangs; rank " + std::to_string(rank_) +
                                        " gives up");
  }
  return {};
}

Result<void> Comm::wait(std::vector<MPI_Request>& requests, const std::string& what) {
  int spins = 0;
  for (;;) {
    int done = 0;
    if (auto r = check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
                       what);
        !r) {
      return r;
    }
    if (done) return {};
    if (auto r = watch(); !r) return fail(r.error().with_context("while " + what));
    if (++spins > 200) nap();
  }
}

Result<void> Comm::agree(const Result<void>& mine, const std::string& phase) {
  int code = mine ? 0 : static_cast<int>(mine.error().code) + 1;
  std::vector<int> codes(size_, 0);
  std::vector<MPI_Request> request(1);
  if (auto r = check(MPI_Iallgather(&code, 1, MPI_INT, codes.data(), 1, MPI_INT, work_, request.data()),
                     "agreeing on " + phase);
      !r) {
    return r;
  }
  if (auto r = wait(request, "the other ranks to finish " + phase); !r) return r;
  std::size_t first = 0;
  while (first < size_ && codes[first] == 0) ++first;
  if (first == size_) return mine;
  std::string message = first == rank_ ? mine.error().message : std::string();
  if (auto r = broadcast(message, first, "the error of rank " + std::to_string(first)); !r) return r;
  return fail(static_cast<ErrorCode>(codes[first] - 1), "rank " + std::to_string(first) + " (" + phase + "): " + message);
}

Result<void> Comm::broadcast(std::string& text, std::size_t root, const std::string& what) {
  std::uint64_t length = text.size();
  std::vector<MPI_Request> request(1);
  const int from = static_cast<int>(root);
  if (auto r = check(MPI_Ibcast(&length, 1, MPI_UINT64_T, from, work_, request.data()), "broadcasting " + what); !r) {
    return r;
  }
  if (auto r = wait(request, "broadcasting " + what); !r) return r;
  if (length > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
    return fail(ErrorCode::InvalidArgument, what + " is too large for one MPI message (" + std::to_string(length) +
                                                " bytes)");
  }
  text.resize(static_cast<std::size_t>(length));
  if (auto r = check(MPI_Ibcast(text.data(), static_cast<int>(length), MPI_CHAR, from, work_, request.data()),
                     "broadcasting " + what);
      !r) {
    return r;
  }
  return wait(request, "broadcasting " + what);
}

Result<std::vector<std::vector<std::uint64_t>>> Comm::allgather(const std::vector<std::uint64_t>& mine,
                                                                const std::string& what) {
  if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    return fail(ErrorCode::InvalidArgument, what + ": too many values for one MPI message");
  }
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(size_, 0), offsets(size_, 0);
  std::vector<MPI_Request> request(1);
  if (auto r = check(MPI_Iallgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, work_, request.data()),
                     "gathering " + what);
      !r) {
    return fail(r.error());
  }
  if (auto r = wait(request, "gathering " + what); !r) return fail(r.error());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < size_; ++i) {
    offsets[i] = static_cast<int>(total);
    total += static_cast<std::uint64_t>(counts[i]);
    if (total > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
      return fail(ErrorCode::InvalidArgument, what + ": too many values for one MPI message");
    }
  }
  std::vector<std::uint64_t> all(total);
  if (auto r = check(MPI_Iallgatherv(mine.data(), count, MPI_UINT64_T, all.data(), counts.data(), offsets.data(),
                                     MPI_UINT64_T, work_, request.data()),
                     "gathering " + what);
      !r) {
    return fail(r.error());
  }
  if (auto r = wait(request, "gathering " + what); !r) return fail(r.error());
  std::vector<std::vector<std::uint64_t>> out(size_);
  for (std::size_t i = 0; i < size_; ++i) {
    out[i].assign(all.begin() + offsets[i], all.begin() + offsets[i] + counts[i]);
  }
  return out;
}

}  // namespace tensorfetch::cluster
