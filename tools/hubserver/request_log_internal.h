// SPDX-License-Identifier: Apache-2.0
// The request log of the test server: one RequestRecord per request, in memory and as JSON
// lines in a file. Private to tools/hubserver.
//
// A record must be in the log before the client can see the end of its response (tests look
// at the log right after a response). So it is committed just before the last bytes are
// written: by the post-routing hook (before_headers, called right before the headers are
// written) when there is no body, else by the body writer before its final write. A response
// that ends otherwise (dropped, stalled, client gone) is committed by finish(), httplib's
// logger, called before the connection closes; finish() also amends a record whose last write
// failed (written again to the file with the same seq).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hub_server.hpp"

namespace tensorfetch::testing::detail {

/// The state of one request while it is being answered (shared by the handler, the body
/// writer and httplib's hooks, all on the same worker thread).
struct Pending {
  RequestRecord rec;
  bool skip = false;         ///< admin: not logged
  bool committed = false;    ///< in the log
  std::string content_type;  ///< restored after httplib's multi-range rewrite
  std::uint64_t bytes = 0;   ///< body bytes written so far
  bool dropped = false;      ///< the body was cut short
};

/// The log. Thread-safe.
class RequestLog {
 public:
  /// `authorization_values`: also store raw Authorization values (Options).
  explicit RequestLog(bool authorization_values);

  /// Appends every record to `path` from now on. Throws std::runtime_error.
  void open_file(const std::filesystem::path& path);
  void close_file();
  /// Times are measured from now on.
  void restart_clock();
  /// ms since restart_clock(), rounded to µs.
  double now_ms() const;

  /// A new record for a request entering the handler (seq, start time, request fields).
  std::shared_ptr<Pending> begin(const httplib::Request& req);
  /// A request that is never logged (admin).
  std::shared_ptr<Pending> begin_unlogged(const httplib::Request& req);
  /// The record of this thread's current request (made here for a request that httplib
  /// answered without calling the handler).
  std::shared_ptr<Pending> current(const httplib::Request& req);
  /// Puts the record in the log, counting `about_to_write` more body bytes. Idempotent.
  void commit(Pending& p, std::uint64_t about_to_write = 0);
  /// httplib's post-routing hook: just before the status line and headers are written.
  void before_headers(const httplib::Request& req, httplib::Response& res);
  /// httplib's logger: after the body was written or the connection dropped.
  void finish(const httplib::Request& req, const httplib::Response& res);

  std::vector<RequestRecord> records() const;
  std::vector<RequestRecord> take();
  void clear();
  std::size_t size() const;

 private:
  void fill_request(RequestRecord& rec, const httplib::Request& req) const;
  void write_line(const RequestRecord& rec);  // caller holds mu_

  const bool authorization_values_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::atomic<std::uint64_t> seq_{0};
  mutable std::mutex mu_;
  std::vector<RequestRecord> records_;
  std::ofstream out_;
};

}  // namespace tensorfetch::testing::detail
