// SPDX-License-Identifier: Apache-2.0
// Responses of the test server: small bodies, errors, and file bodies (ranges, If-Match,
// and the body faults: drops, stalls, drips, overlong bodies, shifted Content-Range).
//
// Every body is sent through a content provider *without* a length, with Content-Length
// (and Content-Range) set by us: cpp-httplib then neither slices ranges nor compresses, so
// the server controls every byte (needed for the faults) and counts what it wrote.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "server_internal.h"

namespace tensorfetch::testing {

namespace fs = std::filesystem;
using detail::Pending;

namespace {

// An owned file descriptor.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

// What one file body sends: which bytes, changed or not, and its faults.
struct HubServer::Impl::BodyPlan {
  std::shared_ptr<Fd> file;
  std::uint64_t offset = 0, length = 0, file_size = 0;
  bool xor_change = false;
  detail::BodyFaults faults;
};

bool HubServer::Impl::final_write(httplib::DataSink& sink, Pending& p, const char* d, std::size_t n,
                                  bool payload) {
  log.commit(p, payload ? n : 0);
  if (n > 0 && !sink.write(d, n)) {
    p.dropped = true;
    return false;
  }
  if (payload) p.bytes += n;
  return true;
}

void HubServer::Impl::set_body(httplib::Response& res, const PendingPtr& p, std::string body,
                               const char* content_type) {
  res.set_header("Content-Length", std::to_string(body.size()));
  p->content_type = content_type;
  auto data = std::make_shared<std::string>(std::move(body));
  res.set_content_provider(content_type, [this, data, p](std::size_t, httplib::DataSink& sink) {
    if (!final_write(sink, *p, data->data(), data->size(), true)) {
      return false;
    }
    sink.done();
    return true;
  });
}

void HubServer::Impl::error(httplib::Response& res, const PendingPtr& p, int status,
                            const std::string& code, const std::string& message) {
  res.status = status;
  if (!code.empty()) res.set_header("X-Error-Code", code);
  res.set_header("X-Error-Message", message);
  set_body(res, p, nlohmann::json{{"error", message}}.dump(), "application/json");
}

bool HubServer::Impl::write_body(const BodyPlan& plan, Pending& p, httplib::DataSink& sink) {
  const detail::BodyFaults& f = plan.faults;
  const bool chunked = f.overlong == OverlongMode::Chunked;
  std::uint64_t total = plan.length + f.extra;
  std::uint64_t limit = total;
  if (f.drop_at) limit = std::min(limit, *f.drop_at);
  if (f.stall_at) limit = std::min(limit, *f.stall_at);
  std::vector<char> buf(256 * 1024);
  std::uint64_t sent = 0;
  const auto paced_start = std::chrono::steady_clock::now();
  while (sent < limit) {
    if (stopping) {
      p.dropped = true;
      return false;
    }
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), limit - sent));
    if (f.pace_rate > 0) {  // a slow flow: rate bytes per second, in pieces of 1/20 s
      want = static_cast<std::size_t>(std::min<std::uint64_t>(want, std::max<std::uint64_t>(1, f.pace_rate / 20)));
      const auto due = paced_start + std::chrono::microseconds(sent * 1'000'000 / f.pace_rate);
      if (due > std::chrono::steady_clock::now() &&
          sleep_or_stop(std::chrono::duration_cast<std::chrono::milliseconds>(due - std::chrono::steady_clock::now()))) {
        p.dropped = true;
        return false;
      }
    }
    if (f.drip_bytes > 0) {
      want = static_cast<std::size_t>(std::min<std::uint64_t>(want, f.drip_bytes));
      if (sent > 0 && sleep_or_stop(std::chrono::milliseconds(f.drip_ms))) {
        p.dropped = true;
        return false;
      }
    }
    std::uint64_t pos = plan.offset + sent;
    std::size_t got = 0;
    if (pos < plan.file_size) {
      std::size_t from_file =
          static_cast<std::size_t>(std::min<std::uint64_t>(want, plan.file_size - pos));
      while (got < from_file) {
        ssize_t n = ::pread(plan.file->fd, buf.data() + got, from_file - got,
                            static_cast<off_t>(pos + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      if (got < from_file) {  // file shrank under us
        p.dropped = true;
        return false;
      }
      if (plan.xor_change) {
        for (std::size_t i = 0; i < got; ++i) buf[i] = static_cast<char>(buf[i] ^ kChangedXor);
      }
    }
    if (got < want) {  // overlong bytes past the end of the file
      std::fill(buf.begin() + static_cast<std::ptrdiff_t>(got),
                buf.begin() + static_cast<std::ptrdiff_t>(want), 'X');
      got = want;
    }
    // With an overlong body the client is done (or has failed) as soon as it has the declared
    // bytes: the record must be in the log before they go out (finish() amends its counts).
    if (f.overlong && sent + got >= plan.length) log.commit(p);
    bool ok;
    if (chunked) {
      char head[32];
      std::snprintf(head, sizeof head, "%zx\r\n", got);
      ok = sink.write(head, std::strlen(head)) && sink.write(buf.data(), got) &&
           sink.write("\r\n", 2);
      if (ok) p.bytes += got;
    } else if (sent + got == total) {  // completes the response
      ok = final_write(sink, p, buf.data(), got, true);
    } else {
      ok = sink.write(buf.data(), got);
      if (ok) p.bytes += got;
    }
    if (!ok) {
      p.dropped = true;
      return false;
    }
    sent += got;
  }
  if (f.stall_at && sent >= *f.stall_at && sent < total) {
    if (f.stall_ms < 0)
      wait_for_stop();
    else
      sleep_or_stop(std::chrono::milliseconds(f.stall_ms));
    p.dropped = true;
    return false;
  }
  if (f.drop_at && sent >= *f.drop_at && sent < total) {
    p.dropped = true;
    return false;
  }
  if (chunked && !final_write(sink, p, "0\r\n\r\n", 5, false)) {
    p.dropped = true;
    return false;
  }
  sink.done();
  return !(f.overlong && !chunked);  // close: the extra bytes poison the connection
}

void HubServer::Impl::serve_file(const httplib::Request& req, httplib::Response& res,
                                 const PendingPtr& p, const fs::path& path, const std::string& etag,
                                 bool xor_change, const std::string& content_type,
                                 const std::string& match_file) {
  auto file = std::make_shared<Fd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (file->fd < 0 || ::fstat(file->fd, &st) != 0) {
    error(res, p, 500, "", "cannot read " + path.filename().string());
    return;
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  res.set_header("ETag", etag);
  res.set_header("Accept-Ranges", "bytes");

  if (req.has_header("If-Match") && !detail::etag_matches(req.get_header_value("If-Match"), etag)) {
    res.status = 412;
    set_body(res, p, "", content_type.c_str());
    return;
  }

  detail::RangeSpec range;
  bool ignore_range = switches.with([](detail::Switches& sw) { return sw.ignore_range; });
  if (req.has_header("Range")) {
    bool if_range_ok =
        !req.has_header("If-Range") || detail::trim(req.get_header_value("If-Range")) == etag;
    if (ignore_range) {
      p->rec.fault = "ignore_range";
    } else if (if_range_ok) {
      range = detail::parse_range(req.get_header_value("Range"), size);
    }
  }
  if (range.kind == detail::RangeSpec::Unsatisfiable) {
    res.status = 416;
    res.set_header("Content-Range", "bytes */" + std::to_string(size));
    set_body(res, p, "", content_type.c_str());
    return;
  }

  BodyPlan plan;
  plan.file = file;
  plan.file_size = size;
  plan.xor_change = xor_change;
  if (range.kind == detail::RangeSpec::Ok) {
    plan.offset = range.first;
    plan.length = range.last - range.first + 1;
    res.status = 206;
  } else {
    plan.offset = 0;
    plan.length = size;
    res.status = 200;
  }
  if (req.method != "HEAD") {
    plan.faults = switches.with([&](detail::Switches& sw) {
      return sw.take_body_faults(req.target, match_file, res.status == 206, req.remote_port);
    });
    if (!plan.faults.fault.empty()) p->rec.fault = plan.faults.fault;
  }
  const detail::BodyFaults& f = plan.faults;
  if (res.status == 206) {
    auto a = static_cast<std::int64_t>(plan.offset) + f.content_range_shift;
    auto b = static_cast<std::int64_t>(plan.offset + plan.length - 1) + f.content_range_shift;
    res.set_header("Content-Range", "bytes " + std::to_string(a) + "-" + std::to_string(b) + "/" +
                                        std::to_string(size));
  }
  if (!f.overlong || *f.overlong == OverlongMode::ContentLength) {
    res.set_header("Content-Length", std::to_string(plan.length));
  }
  if (f.overlong == OverlongMode::Chunked) res.set_header("Transfer-Encoding", "chunked");
  if (f.overlong && *f.overlong != OverlongMode::Chunked) res.set_header("Connection", "close");
  p->content_type = content_type;
  res.set_content_provider(
      content_type.c_str(),
      [this, plan, p](std::size_t, httplib::DataSink& sink) { return write_body(plan, *p, sink); });
}

}  // namespace tensorfetch::testing
