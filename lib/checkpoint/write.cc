// SPDX-License-Identifier: Apache-2.0
// Writing a selection of a checkpoint as new safetensors files. A regular file is written under
// a temporary name, flushed, and renamed into place; an index is renamed last, so a reader never
// sees an index naming a shard that is not complete. A FIFO or character device (or a
// descriptor the caller gives) is written as a stream, in place. Time and memory are linear in
// the tensors written: small tensors are gathered into one buffer per write, large ones are
// copied straight from the mapped source, whose pages are dropped behind the copy.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "base/fs.h"
#include "base/text.h"
#include "base/trace.h"
#include "checkpoint/arrivals.h"
#include "checkpoint/checkpoint_internal.h"
#include "format/writer_internal.h"
#include "hub/location.h"
#include "tensorfetch/writer.hpp"

namespace tensorfetch {

namespace {

Error cancelled_error(const std::string& path) {
  return Error{ErrorCode::Cancelled, path + ": write cancelled"};
}

/// Writes one output file's bytes in order to a descriptor: small pieces are gathered in a
/// buffer, large ones (mapped source bytes) written directly with their pages dropped from this
/// process afterwards. Checks the cancel token between pieces; waits with `poll` on a
/// descriptor that is not ready (non-blocking, or a stalled reader) so that cancellation is
/// seen within 100 ms. For regular files, starts writeback every few dozen MiB and waits for
/// the previous batch, so that dirty pages stay bounded and the final fsync is short.
class ByteWriter {
 public:
  ByteWriter(int fd, std::string what, CancelToken cancel, bool regular)
      : fd_(fd), what_(std::move(what)), cancel_(std::move(cancel)), regular_(regular) {
    buf_.reserve(kBuffer);
  }

  /// Appends bytes that are not mapped (the header): always buffered.
  Result<void> append(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const std::size_t n = std::min(bytes.size(), kBuffer - buf_.size());
      buf_.insert(buf_.end(), bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
      bytes = bytes.subspan(n);
      if (buf_.size() == kBuffer) {
        if (auto r = flush(); !r) return r;
      }
    }
    return {};
  }

  /// Appends bytes of a mapped source file.
  Result<void> append_mapped(std::span<const std::byte> bytes) {
    if (bytes.size() < kDirect) return append(bytes);
    if (auto r = flush(); !r) return r;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    while (!bytes.empty()) {
      auto piece = bytes.first(std::min(kPiece, bytes.size()));
      if (auto r = write_all(piece); !r) return r;
      auto begin = (reinterpret_cast<std::uintptr_t>(piece.data()) + page - 1) & ~(page - 1);
      auto end = reinterpret_cast<std::uintptr_t>(piece.data() + piece.size()) & ~(page - 1);
      if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
      bytes = bytes.subspan(piece.size());
    }
    return {};
  }

  /// Writes out what is buffered.
  Result<void> flush() {
    if (buf_.empty()) return {};
    auto r = write_all(buf_);
    buf_.clear();
    return r;
  }

 private:
  static constexpr std::size_t kBuffer = std::size_t{1} << 20;     // gathers small pieces
  static constexpr std::size_t kDirect = std::size_t{256} << 10;   // written unbuffered from here
  static constexpr std::size_t kPiece = std::size_t{8} << 20;      // one write() of mapped bytes
  static constexpr std::uint64_t kWriteback = std::uint64_t{4} << 20;

  Result<void> write_all(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      if (cancel_.cancelled()) return fail(cancelled_error(what_));
      if (!regular_) {
        // Streams: wait until the reader makes room, a little at a time, so that a reader that
        // stopped reading cannot keep a cancelled write waiting.
        pollfd p{fd_, POLLOUT, 0};
        const int ready = ::poll(&p, 1, 100);
        if (ready < 0 && errno != EINTR) return fail(detail::sys_error(what_, "poll failed", errno));
        if (ready <= 0) continue;
        if ((p.revents & (POLLERR | POLLNVAL)) != 0 && (p.revents & POLLOUT) == 0) {
          return fail(Error{ErrorCode::Io, what_ + ": the stream was closed by its reader"});
        }
      }
      const ssize_t n = ::write(fd_, bytes.data(), std::min<std::size_t>(bytes.size(), std::size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        if (errno == EPIPE) return fail(Error{ErrorCode::Io, what_ + ": the stream was closed by its reader"});
        return fail(detail::sys_error(what_, "write failed", errno));
      }
      bytes = bytes.subspan(static_cast<std::size_t>(n));
      written_ += static_cast<std::uint64_t>(n);
      if (regular_ && written_ - started_ >= kWriteback) start_writeback();
    }
    return {};
  }

  // Starts writeback of what was written since the last call and waits for the batch before
  // (best effort: errors surface at the final fsync).
  void start_writeback() {
    if (waited_ < started_) {
      ::sync_file_range(fd_, static_cast<off64_t>(waited_), static_cast<off64_t>(started_ - waited_),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      waited_ = started_;
    }
    ::sync_file_range(fd_, static_cast<off64_t>(started_), static_cast<off64_t>(written_ - started_),
                      SYNC_FILE_RANGE_WRITE);
    started_ = written_;
  }

  int fd_;
  std::string what_;
  CancelToken cancel_;
  bool regular_;
  std::vector<std::byte> buf_;
  std::uint64_t written_ = 0;  // bytes written to fd_ so far (streams: since we started)
  std::uint64_t started_ = 0;  // writeback was started for [0, started_)
  std::uint64_t waited_ = 0;   // and has completed for [0, waited_)
};

/// An output file written under a temporary name beside its final path (detail::PendingFile:
/// fsync'd, renamed into place, its directory fsync'd), through a ByteWriter. The temporary
/// file is removed unless `commit()` succeeded.
class PendingOutput {
 public:
  static Result<PendingOutput> create(const std::string& final_path, const CancelToken& cancel) {
    auto file = detail::PendingFile::create(final_path, 0644);
    if (!file) return fail(file.error());
    PendingOutput f(std::move(*file));
    f.writer_ = std::make_unique<ByteWriter>(f.file_.fd(), final_path, cancel, true);
    return f;
  }

  [[nodiscard]] ByteWriter& writer() { return *writer_; }

  /// Flushes the data to disk and closes the file (still under its temporary name).
  Result<void> finish() {
    if (auto r = writer_->flush(); !r) return r;
    return file_.finish();
  }

  /// Renames the finished file into place.
  Result<void> commit() { return file_.commit(); }

 private:
  explicit PendingOutput(detail::PendingFile file) : file_(std::move(file)) {}
  detail::PendingFile file_;
  std::unique_ptr<ByteWriter> writer_;
};

/// How an output path is written.
struct Target {
  enum class Kind { File, Stream } kind = Kind::File;
  std::string path;  ///< File: where the file goes (symbolic links resolved); Stream: as given
};

std::string describe_type(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISSOCK(mode)) return "is a socket";
  if (S_ISBLK(mode)) return "is a block device";
  return "is not a regular file, FIFO or character device";
}

/// What `path` is, and so how it is written: a regular file or a new one (temporary file and
/// rename; through symbolic links), or a FIFO or character device (a stream, in place).
/// Everything else is refused, as are streams when `allow_stream` is false.
Result<Target> classify_target(const std::string& path, bool allow_stream) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Target{Target::Kind::File, path};
    return fail(detail::sys_error(path, "cannot inspect the output", errno));
  }
  const bool link = S_ISLNK(st.st_mode);
  if (link && ::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return fail(ErrorCode::InvalidArgument,
                  path + ": is a symbolic link to a missing file; not writing through it");
    }
    return fail(detail::sys_error(path, "cannot inspect the output", errno));
  }
  if (S_ISREG(st.st_mode)) {
    if (!link) return Target{Target::Kind::File, path};
    // Replace the link's target, not the link (as root, `-o /dev/stdout` redirected to a file
    // must not turn /dev/stdout into a regular file).
    std::unique_ptr<char, decltype(&std::free)> resolved(::realpath(path.c_str(), nullptr), &std::free);
    if (!resolved) return fail(detail::sys_error(path, "cannot resolve the symbolic link", errno));
    return Target{Target::Kind::File, resolved.get()};
  }
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    if (!allow_stream) {
      return fail(ErrorCode::InvalidArgument,
                  path + ": is a " + (S_ISFIFO(st.st_mode) ? "FIFO" : "character device") +
                      "; a sharded output (one file per shard plus an index) cannot be written to a stream");
    }
    return Target{Target::Kind::Stream, path};
  }
  return fail(ErrorCode::InvalidArgument,
              path + ": " + describe_type(st.st_mode) +
                  "; the output must be a regular file (or a new one), a FIFO or a character device");
}

/// Opens a FIFO or character device for writing, non-blocking (a file description of our own,
/// so the flag affects no one else). A FIFO without a reader is waited for, checking `cancel`.
Result<detail::UniqueFd> open_stream(const std::string& path, const CancelToken& cancel) {
  while (true) {
    detail::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (fd.get() >= 0) return fd;
    if (errno != ENXIO && errno != EINTR) return fail(detail::sys_error(path, "cannot open the output", errno));
    // ENXIO: a FIFO nobody reads yet.
    if (cancel.cancelled()) return fail(cancelled_error(path));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// A descriptor to write a stream to: for a pipe, FIFO or terminal handed over by the caller,
/// a non-blocking file description of our own onto the same object (reopened through
/// /proc/self/fd), so that waiting for a stalled reader can be cancelled; otherwise `fd`
/// itself (regular files and /dev/null do not block; sockets are waited on with poll).
struct StreamFd {
  detail::UniqueFd owned;
  int fd = -1;
};

StreamFd stream_descriptor(int fd) {
  StreamFd out;
  out.fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK) == 0 && (flags & O_APPEND) == 0) {
      const std::string proc = "/proc/self/fd/" + std::to_string(fd);
      detail::UniqueFd reopened(::open(proc.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
      struct stat again {};
      if (reopened.get() >= 0 && ::fstat(reopened.get(), &again) == 0 && again.st_dev == st.st_dev &&
          again.st_ino == st.st_ino) {
        out.fd = reopened.get();
        out.owned = std::move(reopened);
      }
    }
  }
  return out;
}

// Everything a write of one or more files needs, shared by write() and write_stream().
struct WriteJob {
  struct OutputFile {
    std::string path;                       // as given (sharded: DIR/shard name)
    std::vector<const Selection*> tensors;  // in output order
    std::optional<Metadata> metadata;
  };
  std::vector<OutputFile> outputs;
  std::map<std::string, std::string> weight_map;  // sharded only
  std::uint64_t total_size = 0;
  std::uint64_t total_parameters = 0;
};

WriteJob plan_outputs(const Checkpoint::Impl& impl, std::span<const Selection> selection, const std::string& out,
                      bool sharded, const Metadata& extra) {
  WriteJob job;
  if (sharded) {
    std::vector<std::size_t> by_source(impl.files.size(), SIZE_MAX);  // source file -> output
    for (const auto& s : selection) {
      std::size_t& pos = by_source[s.ref.file];
      if (pos == SIZE_MAX) {
        pos = job.outputs.size();
        job.outputs.push_back({out + "/" + impl.files[s.ref.file].info.path, {}, impl.files[s.ref.file].header.metadata});
      }
      job.outputs[pos].tensors.push_back(&s);
      job.weight_map.emplace(std::string(s.ref.info->name), impl.files[s.ref.file].info.path);
    }
  } else {
    std::optional<Metadata> metadata;
    if (!selection.empty()) metadata = impl.files[selection.front().ref.file].header.metadata;
    job.outputs.push_back({out, {}, metadata});
    job.outputs.back().tensors.reserve(selection.size());
    for (const auto& s : selection) job.outputs.back().tensors.push_back(&s);
  }
  if (!extra.empty()) {  // the caller's entries, over the source's
    for (auto& o : job.outputs) {
      if (!o.metadata) o.metadata.emplace();
      for (const auto& [k, v] : extra) (*o.metadata)[k] = v;
    }
  }
  for (const auto& s : selection) {
    std::uint64_t elements = 1;
    for (auto d : s.plan.shape) elements *= d;
    job.total_parameters += elements;
    job.total_size += s.plan.nbytes;
  }
  return job;
}

// Where the tensors' bytes are read: the local files or the cache as they are; or, during a
// fetch (`arrivals`, from fetch_and_write), each as soon as the fetch has written it.
struct Source {
  const Checkpoint::Impl& impl;
  detail::Arrivals* arrivals = nullptr;
  std::function<bool()> stop;  // with `arrivals`: the caller cancelled

  // File `file`'s bytes, holding every range of `needed` (`what` names them in errors; `out`
  // is the output being written).
  Result<std::span<const std::byte>> bytes(std::size_t file, std::span<const ByteRange> needed, const std::string& what,
                                           const std::string& out) const {
    if (arrivals) {
      switch (arrivals->wait(file, needed, stop)) {
        case detail::Arrivals::Outcome::Here:
          return impl.received_bytes(file);
        case detail::Arrivals::Outcome::FetchFailed:
          return fail(ErrorCode::Cancelled, out + ": not written: the fetch of its tensors failed");
        case detail::Arrivals::Outcome::Stopped:
          return fail(cancelled_error(out));
        case detail::Arrivals::Outcome::NotTracked:
        case detail::Arrivals::Outcome::FetchEnded:
          break;
      }
    }
    return impl.served_bytes(file, needed, what);
  }
};

// Lays out one output file and writes it (header, then every tensor's bytes) through `writer`.
Result<void> write_file(const Source& source, const WriteJob::OutputFile& o, ByteWriter& writer,
                        const CancelToken& cancel) {
  const Checkpoint::Impl& impl = source.impl;
  auto laid = detail::layout_file_views(
      o.tensors.size(),
      [&](std::size_t i) {
        const Selection* s = o.tensors[i];
        return detail::OutputTensorView{s->ref.info->name, s->ref.info->dtype, s->plan.shape};
      },
      o.metadata);
  if (!laid) return fail(laid.error().with_context(o.path));
  FileLayout layout = std::move(*laid);
  if (auto r = writer.append(std::as_bytes(std::span(layout.prefix))); !r) return r;
  layout.prefix = std::string();  // up to 100 MB: not needed any more
  std::vector<ByteRange> needed;
  std::size_t count = 0;
  for (const Selection* s : o.tensors) {
    if ((++count & 1023) == 0 && cancel.cancelled()) return fail(cancelled_error(o.path));
    const ByteRange base = impl.files[s->ref.file].header.file_range(*s->ref.info);
    needed.clear();
    for (const auto& range : s->plan.ranges) needed.push_back(ByteRange{base.offset + range.offset, range.length});
    // What is gathered goes out before waiting for the fetch: a reader of the stream (or the
    // disk) gets it now.
    if (source.arrivals && !source.arrivals->here(s->ref.file, needed)) {
      if (auto r = writer.flush(); !r) return r;
    }
    auto bytes = source.bytes(s->ref.file, needed, "tensor " + detail::quote_name(s->ref.info->name), o.path);
    if (!bytes) return fail(bytes.error());
    for (const auto& range : needed) {
      if (range.end() > bytes->size()) {
        return fail(ErrorCode::Io, impl.files[s->ref.file].info.path + ": tensor " + detail::quote_name(s->ref.info->name) +
                                       " lies beyond the file");
      }
      if (auto r = writer.append_mapped(bytes->subspan(range.offset, range.length)); !r) return r;
    }
  }
  return writer.flush();
}

}  // namespace

namespace detail {

Result<void> write_selection(const Checkpoint::Impl& impl, std::span<const Selection> selection, const std::string& out,
                             const WriteOptions& options, Arrivals* arrivals, const std::function<bool()>& stop) {
  trace::Scope span("write the output file", "write");
  const Source source{impl, arrivals, stop};
  if (auto r = check_selection(impl, selection); !r) return r;
  if (out.find('\0') != std::string::npos) {
    return fail(ErrorCode::InvalidArgument, "output path " + detail::quote_name(out) + " contains a NUL byte");
  }
  const WriteJob job = plan_outputs(impl, selection, out, options.sharded_output, options.metadata);

  // Where each file goes, and how. Never replace a file of the checkpoint being read (e.g. `-o`
  // naming its own directory).
  std::vector<std::pair<dev_t, ino_t>> sources;
  auto add_source = [&](const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) sources.emplace_back(st.st_dev, st.st_ino);
  };
  for (std::size_t i = 0; i < impl.files.size(); ++i) add_source(impl.local_path(i));
  if (impl.index) add_source(impl.root.empty() ? impl.index_name : impl.root + "/" + impl.index_name);
  auto target_of = [&](const std::string& path) -> Result<Target> {
    auto target = classify_target(path, !options.sharded_output);
    if (!target) return target;
    struct stat st {};
    if (target->kind == Target::Kind::File && ::stat(target->path.c_str(), &st) == 0) {
      for (const auto& [dev, ino] : sources) {
        if (st.st_dev == dev && st.st_ino == ino) {
          return fail(ErrorCode::InvalidArgument,
                      path + ": refusing to overwrite a file of the checkpoint being read; choose "
                             "another output");
        }
      }
    }
    return target;
  };
  std::vector<Target> targets;
  for (const auto& o : job.outputs) {
    auto t = target_of(o.path);
    if (!t) return fail(t.error());
    targets.push_back(std::move(*t));
  }
  std::optional<Target> index_target;
  if (options.sharded_output && impl.index) {
    auto t = target_of(out + "/" + impl.index_name);
    if (!t) return fail(t.error());
    index_target = std::move(*t);
  }

  // One non-sharded output that is a stream: written in place.
  if (targets.size() == 1 && targets[0].kind == Target::Kind::Stream) {
    auto fd = open_stream(targets[0].path, options.cancel);
    if (!fd) return fail(fd.error());
    ByteWriter writer(fd->get(), targets[0].path, options.cancel, false);
    if (auto r = write_file(source, job.outputs[0], writer, options.cancel); !r) return r;
    if (fd->close() != 0) return fail(detail::sys_error(targets[0].path, "close failed", errno));
    return {};
  }

  std::vector<PendingOutput> pending;
  for (std::size_t i = 0; i < job.outputs.size(); ++i) {
    const std::string& path = targets[i].path;
    std::error_code ec;
    auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) return fail(ErrorCode::Io, parent.string() + ": cannot create directory: " + ec.message());
    auto file = PendingOutput::create(path, options.cancel);
    if (!file) return fail(file.error());
    if (auto r = write_file(source, job.outputs[i], file->writer(), options.cancel); !r) return r;
    if (auto r = file->finish(); !r) return r;
    pending.push_back(std::move(*file));
  }
  if (index_target) {
    std::string text = build_index_json(job.weight_map, job.total_size, job.total_parameters);
    auto file = PendingOutput::create(index_target->path, options.cancel);
    if (!file) return fail(file.error());
    if (auto r = file->writer().append(std::as_bytes(std::span(text))); !r) return r;
    if (auto r = file->finish(); !r) return r;
    pending.push_back(std::move(*file));
  }
  // Nothing is renamed into place before the fetch that brought the bytes succeeded.
  if (arrivals && !arrivals->wait_end(stop)) {
    return fail(options.cancel.cancelled() ? cancelled_error(out)
                                           : Error{ErrorCode::Cancelled, out + ": not written: the fetch of its tensors failed"});
  }
  // The last moment a cancellation removes everything: after it, every file is renamed.
  if (options.cancel.cancelled()) return fail(cancelled_error(out));
  // Shards first, the index last.
  for (auto& f : pending) {
    if (auto r = f.commit(); !r) return r;
  }
  return {};
}

Result<void> write_selection_stream(const Checkpoint::Impl& impl, std::span<const Selection> selection, int fd,
                                    const WriteOptions& options, Arrivals* arrivals, const std::function<bool()>& stop) {
  trace::Scope span("write the output stream", "write");
  if (options.sharded_output) {
    return fail(ErrorCode::InvalidArgument,
                "a sharded output (one file per shard plus an index) cannot be written to a stream");
  }
  if (fd < 0) return fail(ErrorCode::InvalidArgument, "write_stream: invalid file descriptor " + std::to_string(fd));
  if (auto r = check_selection(impl, selection); !r) return r;
  const std::string what = "output stream (descriptor " + std::to_string(fd) + ")";
  const WriteJob job = plan_outputs(impl, selection, what, false, options.metadata);
  StreamFd stream = stream_descriptor(fd);
  // Also a regular file is written as a stream here: at its offset, no rename, no fsync.
  ByteWriter writer(stream.fd, what, options.cancel, false);
  return write_file(Source{impl, arrivals, stop}, job.outputs[0], writer, options.cancel);
}

}  // namespace detail

Result<void> Checkpoint::write(std::span<const Selection> selection, const std::string& out,
                               const WriteOptions& options) const {
  return detail::write_selection(*impl_, selection, out, options, nullptr, {});
}

Result<void> Checkpoint::write_stream(std::span<const Selection> selection, int fd, const WriteOptions& options) const {
  return detail::write_selection_stream(*impl_, selection, fd, options, nullptr, {});
}

}  // namespace tensorfetch
