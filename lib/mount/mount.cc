// SPDX-License-Identifier: Apache-2.0
// `tensorfetch mount` (tensorfetch/mount.hpp) on libfuse3's low-level API, as libfuse's
// passthrough_hp does it: inode numbers the file system owns (a fixed table built at mount
// time: the tree never changes), a multithreaded session loop, short handlers that answer
// with -errno and never let an exception cross into C. Slow work -- fetching -- is the fetch
// queue's (fetch_queue.h); what to fetch is readahead.h's (both tested on their own).
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "mount/fetch_queue.h"
#include "mount/readahead.h"
#include "tensorfetch/mount.hpp"

extern char** environ;

namespace tensorfetch {

namespace {

// Dir: a directory; Tensors: a safetensors file of the checkpoint (tensor-aware reads);
// Text: the index or config.json, held in memory since the open; Plain: any other listed file of
// the repo (a tokenizer, a README, another format's weights), fetched through the cache by
// `Checkpoint::fetch_repo_file` -- a small one whole on first open, a large one by blocks with
// read-ahead.
enum class Kind { Dir, Tensors, Text, Plain };

// One entry of the tree; its inode number is its position in Impl::nodes plus one.
struct Node {
  std::string name;
  fuse_ino_t parent = FUSE_ROOT_ID;
  Kind kind = Kind::Dir;
  std::uint64_t size = 0;
  std::size_t file = 0;                     // Tensors: position in Checkpoint::files(); Plain: in Impl::plain
  std::string text;                         // Text: the bytes
  std::vector<ByteRange> tensors;           // Tensors: every tensor as a range of the file, by offset
  std::uint64_t data_offset = 0;            // Tensors: 8 + N (bytes before are the header)
  std::map<std::string, fuse_ino_t> children;  // Dir
};

// State of one open file (FUSE's `fh`): the read-ahead of its reader.
struct Handle {
  std::mutex mutex;
  mount::Readahead readahead;
  explicit Handle(const MountOptions& o) : readahead(o.readahead_trigger, o.readahead_initial, o.readahead_max) {}
};

std::string range_text(std::uint64_t offset, std::uint64_t length) {
  return "bytes " + std::to_string(offset) + "-" + std::to_string(offset + length);
}

}  // namespace

struct Mount::Impl {
  Checkpoint checkpoint;
  std::string dir;
  MountOptions options;
  std::vector<Node> nodes;  // inode i is nodes[i - 1]
  std::vector<std::string> plain;  // the Plain files' repo paths (the fetch queue's file nfiles + i)
  std::time_t mounted_at = std::time(nullptr);
  CancelToken cancel = CancelToken::make();
  mount::FetchQueue queue;
  fuse_session* session = nullptr;
  bool mounted = false;
  mutable std::mutex log_mutex;
  std::atomic<std::uint64_t> reads{0}, read_errors{0}, bytes_read{0}, bytes_from_cache{0};
  // The open files' handles (FUSE's `fh` points into them). Owned here: a mount that ends while
  // a reader still holds a file open (SIGTERM, a lazy unmount) gets no release for it.
  std::mutex handles_mutex;
  std::unordered_map<Handle*, std::unique_ptr<Handle>> handles;

  Impl(Checkpoint cp, std::string d, const MountOptions& o)
      : checkpoint(std::move(cp)), dir(std::move(d)), options(o),
        queue([this](const std::vector<FileRanges>& ranges) -> Result<std::uint64_t> {
          FetchOptions fetch = options.fetch;
          fetch.sink = nullptr;
          fetch.progress = nullptr;
          fetch.cancel = cancel;
          // The checkpoint's files in one fetch; the other listed files each their own.
          const std::size_t nfiles = checkpoint.files().size();
          std::vector<FileRanges> tensors;
          std::uint64_t moved = 0;
          for (const auto& r : ranges) {
            if (r.file < nfiles) tensors.push_back(r);
          }
          if (!tensors.empty()) {
            auto stats = checkpoint.fetch_ranges(tensors, fetch);
            if (!stats) return fail(stats.error());
            moved += stats->bytes_transferred;
          }
          for (const auto& r : ranges) {
            if (r.file < nfiles) continue;
            auto stats = checkpoint.fetch_repo_file(plain.at(r.file - nfiles), r.ranges, fetch);
            if (!stats) return fail(stats.error());
            moved += stats->bytes_transferred;
          }
          return moved;
        }) {}

  ~Impl() {
    if (session) {
      if (mounted) fuse_session_unmount(session);
      fuse_session_destroy(session);
    }
  }

  void log(const std::string& line) const {
    std::lock_guard lock(log_mutex);
    if (options.log) {
      options.log(line);
    } else {
      std::cerr << line << '\n' << std::flush;
    }
  }

  [[nodiscard]] const Node* node(fuse_ino_t ino) const {
    return ino >= 1 && ino <= nodes.size() ? &nodes[ino - 1] : nullptr;
  }

  // Adds `path` (a repo path, '/'-separated) as a file node, with its directories; returns it.
  Node& add_file(const std::string& path) {
    fuse_ino_t parent = FUSE_ROOT_ID;
    std::size_t begin = 0;
    for (;;) {
      const std::size_t slash = path.find('/', begin);
      const std::string name = path.substr(begin, slash == std::string::npos ? std::string::npos : slash - begin);
      auto& children = nodes[parent - 1].children;
      if (auto it = children.find(name); it != children.end()) {
        if (slash == std::string::npos) return nodes[it->second - 1];  // (a repeated path: the first kept)
        parent = it->second;
      } else {
        Node n;
        n.name = name;
        n.parent = parent;
        n.kind = slash == std::string::npos ? Kind::Text : Kind::Dir;
        nodes.push_back(std::move(n));
        const fuse_ino_t ino = nodes.size();
        nodes[parent - 1].children.emplace(name, ino);
        parent = ino;
        if (slash == std::string::npos) return nodes.back();
      }
      begin = slash + 1;
    }
  }

  // Every listed file (for a Hub repo, every file of the commit: one request, before the mount
  // is ready; none afterwards for listing or stat).
  Result<void> build_tree() {
    nodes.push_back(Node{});  // the root
    const auto& files = checkpoint.files();
    auto listed = checkpoint.repo_files();
    if (!listed) return fail(listed.error());
    auto texts = checkpoint.text_files();
    if (!texts) return fail(texts.error());
    for (const auto& f : *listed) {
      if (f.checkpoint_file) continue;
      if (std::any_of(texts->begin(), texts->end(), [&](const CheckpointTextFile& t) { return t.path == f.path; })) {
        continue;
      }
      Node& n = add_file(f.path);
      if (n.kind != Kind::Text || n.size != 0) continue;  // (a path that is also a directory: kept as one)
      n.kind = Kind::Plain;
      n.size = f.size;
      n.file = plain.size();
      plain.push_back(f.path);
    }
    for (std::size_t i = 0; i < files.size(); ++i) {
      Node& n = add_file(checkpoint.repo_path(i));
      n.kind = Kind::Tensors;
      n.file = i;
      n.size = files[i].size;
      const Header* header = checkpoint.header(i);
      if (!header) return fail(ErrorCode::InvalidArgument, files[i].path + ": no header");
      n.data_offset = header->data_offset();
      n.tensors.reserve(header->tensors().size());
      for (const auto& t : header->tensors()) n.tensors.push_back(header->file_range(t));
    }
    for (auto& t : *texts) {
      Node& n = add_file(t.path);
      if (n.kind != Kind::Text) continue;
      n.size = t.text.size();
      n.text = std::move(t.text);
    }
    return {};
  }

  [[nodiscard]] struct stat attributes(fuse_ino_t ino) const {
    struct stat st {};
    const Node& n = nodes[ino - 1];
    st.st_ino = ino;
    st.st_uid = ::getuid();
    st.st_gid = ::getgid();
    st.st_mtime = st.st_atime = st.st_ctime = mounted_at;
    if (n.kind == Kind::Dir) {
      st.st_mode = S_IFDIR | 0555;
      st.st_nlink = 2;
    } else {
      st.st_mode = S_IFREG | 0444;
      st.st_nlink = 1;
      st.st_size = static_cast<off_t>(n.size);
      st.st_blocks = static_cast<blkcnt_t>((n.size + 511) / 512);
    }
    st.st_blksize = 1 << 20;
    return st;
  }

  bool stopping() const { return stop_asked || session == nullptr || fuse_session_exited(session) != 0 || cancel.cancelled(); }

  // Stops the mount (SIGINT/SIGTERM/SIGHUP, `Mount::exit`); see run(). Any thread; once.
  void stop();
  std::atomic<bool> stop_asked{false}, stop_done{false};
  std::mutex loop_mutex;
  std::condition_variable loop_cv;
  bool loop_done = false;  // under loop_mutex
  pthread_t loop_thread{};

  // The fetch queue's number for file node `n`.
  std::size_t queue_file(const Node& n) const {
    return n.kind == Kind::Plain ? checkpoint.files().size() + n.file : n.file;
  }

  // Makes `ranges` of file node `n` present: asks the queue, waits.
  Result<void> fetch(const Node& n, const std::vector<ByteRange>& ranges) {
    std::vector<std::shared_ptr<mount::FetchJob>> jobs;
    for (const auto& r : ranges) {
      auto more = queue.request(queue_file(n), r);
      jobs.insert(jobs.end(), more.begin(), more.end());
    }
    return queue.wait(jobs, [this] { return stopping(); });
  }

  // Asks for the read-ahead a read of `read` calls for, without waiting; cached bytes are not asked.
  void read_ahead(const Node& n, Handle& handle, ByteRange read) {
    ByteRange ahead;
    {
      std::lock_guard lock(handle.mutex);
      ahead = handle.readahead.on_read(read, n.size);
    }
    if (ahead.length == 0 || !checkpoint.remote() || checkpoint.files()[n.file].url.empty()) return;
    auto cached = checkpoint.cached(n.file);
    for (const auto& piece : mount::tensor_ranges_for(n.tensors, ahead, options.tensor_window)) {
      bool present = false;
      if (cached) {
        for (const auto& c : *cached) present = present || (c.offset <= piece.offset && piece.end() <= c.end());
      }
      if (!present) (void)queue.request(n.file, piece);
    }
  }

  // How far the kernel's read-around reaches: a page fault in a mapped file reads up to 128 KiB
  // around the faulting page (half before it), sequential reads as much ahead.
  static constexpr std::uint64_t kReadAround = 128 << 10;

  // What a read of `read` (inside the data) fetches. Its middle page is the page a fault asked
  // for (the kernel reads around it, half before) or the bytes a reader wants: the tensors that
  // start on that page or cover it are fetched whole (a window of a large one); a tensor whose
  // tail ends there (the neighbour before the one asked for), and the other tensors the read
  // reaches into at its edges, only for the bytes touched -- so that a loader of one layer does
  // not pull the embedding before it or the first tensor of the next layer.
  std::vector<ByteRange> tensor_ranges(const Node& n, ByteRange read) const {
    auto ranges = mount::tensor_ranges_for(n.tensors, read, options.tensor_window, kReadAround);
    const std::uint64_t page = 4096;
    const std::uint64_t m = std::max(read.offset, (read.offset + read.length / 2) / page * page);
    const ByteRange middle{m, std::min(page, read.end() - m)};
    for (const auto& t : n.tensors) {
      if (t.end() <= middle.offset || t.length == 0) continue;
      if (t.offset >= middle.end()) break;
      if (t.offset < middle.offset && t.end() <= middle.end()) continue;  // a tail: the bytes only
      const ByteRange at{std::max(t.offset, middle.offset), 1};
      for (const auto& r : mount::tensor_ranges_for(n.tensors, at, options.tensor_window)) ranges.push_back(r);
    }
    return ranges;
  }

  // Bytes `offset .. offset + out.size()` of tensor file `n`, fetched first when not cached.
  Result<void> read_tensors(const Node& n, std::uint64_t offset, std::span<std::byte> out, Handle* handle) {
    bool waited = false;
    auto r = checkpoint.read_cached(n.file, offset, out);
    if (!r && r.error().code == ErrorCode::NotFetched) {
      // The header part (served from memory), then the tensors' part.
      const std::uint64_t split = std::clamp(n.data_offset, offset, offset + out.size());
      if (split > offset) {
        if (auto h = checkpoint.read_cached(n.file, offset, out.first(split - offset)); !h) return h;
      }
      const ByteRange data{split, offset + out.size() - split};
      auto tail = out.subspan(split - offset);
      r = checkpoint.read_cached(n.file, data.offset, tail);
      if (!r && r.error().code == ErrorCode::NotFetched) {
        // A read that starts in the header, or within the kernel's read-around of it (128 KiB
        // past its end: a loader parsing the header touches its first page, and the kernel reads
        // and reads ahead around it), reaches into the data only as that read-around: only those
        // bytes are fetched, not the first tensor whole (an embedding of hundreds of MB). Reads
        // of that tensor further in fetch it.
        auto ranges = offset < n.data_offset + kReadAround ? std::vector<ByteRange>{data}
                                                            : tensor_ranges(n, data);
        if (handle) read_ahead(n, *handle, ByteRange{offset, out.size()});
        handle = nullptr;
        if (auto f = fetch(n, ranges); !f) return f;
        waited = true;
        r = checkpoint.read_cached(n.file, data.offset, tail);
      }
    }
    if (handle) read_ahead(n, *handle, ByteRange{offset, out.size()});
    if (r && !waited) bytes_from_cache += out.size();
    return r;
  }

  // Whether the cache holds all of `range` of Plain file `n`.
  bool plain_holds(const Node& n, ByteRange range) const {
    auto cached = checkpoint.repo_file_cached(plain[n.file]);
    if (!cached) return false;
    return std::any_of(cached->begin(), cached->end(),
                       [&](const ByteRange& c) { return c.offset <= range.offset && range.end() <= c.end(); });
  }

  // The bytes a miss of `read` in Plain file `n` fetches: all of a small file, else the
  // `kPlainBlock`-aligned blocks it touches.
  ByteRange plain_span(const Node& n, ByteRange read) const {
    if (n.size <= options.small_file) return ByteRange{0, n.size};
    const std::uint64_t begin = read.offset / kPlainBlock * kPlainBlock;
    const std::uint64_t end = std::min(n.size, (read.end() + kPlainBlock - 1) / kPlainBlock * kPlainBlock);
    return ByteRange{begin, end - begin};
  }
  static constexpr std::uint64_t kPlainBlock = 1 << 20;

  // A small Plain file, fetched whole on open (when the cache lacks any of it).
  Result<void> open_plain(const Node& n) {
    if (n.size == 0 || n.size > options.small_file || plain_holds(n, ByteRange{0, n.size})) return {};
    return fetch(n, {ByteRange{0, n.size}});
  }

  // Bytes `offset .. offset + out.size()` of Plain file `n`, fetched first when not cached; a
  // sequential reader of a large one has the blocks ahead asked for without waiting.
  Result<void> read_plain(const Node& n, std::uint64_t offset, std::span<std::byte> out, Handle* handle) {
    const std::string& path = plain[n.file];
    const ByteRange read{offset, out.size()};
    bool waited = false;
    auto r = checkpoint.read_repo_file_cached(path, offset, out);
    if (!r && r.error().code == ErrorCode::NotFetched) {
      if (handle) read_ahead_plain(n, *handle, read);
      handle = nullptr;
      if (auto f = fetch(n, {plain_span(n, read)}); !f) return f;
      waited = true;
      r = checkpoint.read_repo_file_cached(path, offset, out);
    }
    if (handle) read_ahead_plain(n, *handle, read);
    if (r && !waited) bytes_from_cache += out.size();
    return r;
  }

  void read_ahead_plain(const Node& n, Handle& handle, ByteRange read) {
    if (n.size <= options.small_file) return;  // fetched whole anyway
    ByteRange ahead;
    {
      std::lock_guard lock(handle.mutex);
      ahead = handle.readahead.on_read(read, n.size);
    }
    if (ahead.length == 0) return;
    const ByteRange span = plain_span(n, ahead);
    if (!plain_holds(n, span)) (void)queue.request(queue_file(n), span);
  }

  void log_read_error(const Node& n, std::uint64_t offset, std::uint64_t length, const Error& e) const {
    if (n.kind == Kind::Plain) {
      log("tensorfetch mount: error: " + plain[n.file] + ": " + range_text(offset, length) + ": EIO: " + e.message);
      return;
    }
    const auto& f = checkpoint.files()[n.file];
    std::string url = f.url;
    if (auto q = url.find('?'); q != std::string::npos) url.resize(q);  // (signed URLs: no signature in logs)
    log("tensorfetch mount: error: " + checkpoint.repo_path(n.file) + ": " + range_text(offset, length) +
        (url.empty() ? "" : " of " + url) + ": EIO: " + e.message);
  }

  MountStats totals() const {
    MountStats s;
    s.reads = reads;
    s.read_errors = read_errors;
    s.bytes_read = bytes_read;
    s.bytes_from_cache = bytes_from_cache;
    s.bytes_fetched = queue.fetched_bytes();
    s.bytes_in_flight = queue.in_flight_bytes();
    s.fetches = queue.fetches();
    return s;
  }
};

namespace {

Mount::Impl& state(fuse_req_t req) { return *static_cast<Mount::Impl*>(fuse_req_userdata(req)); }

constexpr double kForever = 86400.0;  // a pinned revision never changes: cache names and attributes

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto& m = state(req);
  const Node* dir = m.node(parent);
  if (!dir || dir->kind != Kind::Dir) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  fuse_entry_param e{};
  e.attr_timeout = e.entry_timeout = kForever;
  if (auto it = dir->children.find(name); it != dir->children.end()) {
    e.ino = it->second;
    e.attr = m.attributes(it->second);
  }  // else ino 0: a negative entry the kernel keeps (no request for it again)
  fuse_reply_entry(req, &e);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  auto& m = state(req);
  if (!m.node(ino)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  const struct stat st = m.attributes(ino);
  fuse_reply_attr(req, &st, kForever);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto& m = state(req);
  const Node* n = m.node(ino);
  if (!n) {
    fuse_reply_err(req, ENOENT);
  } else if (n->kind != Kind::Dir) {
    fuse_reply_err(req, ENOTDIR);
  } else {
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
  }
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  auto& m = state(req);
  const Node* n = m.node(ino);
  if (!n || n->kind != Kind::Dir) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  std::vector<char> buf(size);
  std::size_t used = 0;
  std::size_t index = 0;
  auto add = [&](const std::string& name, fuse_ino_t child) {
    if (static_cast<off_t>(index++) < off) return true;
    struct stat st {};
    st.st_ino = child;
    st.st_mode = m.nodes[child - 1].kind == Kind::Dir ? S_IFDIR : S_IFREG;
    const std::size_t want = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st,
                                               static_cast<off_t>(index));
    if (want > size - used) return false;
    used += want;
    return true;
  };
  if (add(".", ino) && add("..", n->parent)) {
    for (const auto& [name, child] : n->children) {
      if (!add(name, child)) break;
    }
  }
  fuse_reply_buf(req, buf.data(), used);
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto& m = state(req);
  const Node* n = m.node(ino);
  if (!n) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  if (n->kind == Kind::Dir) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  if (n->kind == Kind::Plain) {
    if (auto r = m.open_plain(*n); !r) {
      ++m.read_errors;
      m.log_read_error(*n, 0, n->size, r.error());
      fuse_reply_err(req, EIO);
      return;
    }
  }
  fi->keep_cache = 1;  // the page cache outlives opens: the revision is pinned
  Handle* handle = nullptr;
  try {
    auto owned = std::make_unique<Handle>(m.options);
    handle = owned.get();
    std::lock_guard lock(m.handles_mutex);
    m.handles.emplace(handle, std::move(owned));
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  fi->fh = reinterpret_cast<std::uint64_t>(handle);
  if (fuse_reply_open(req, fi) != 0) {  // interrupted open: no release follows
    std::lock_guard lock(m.handles_mutex);
    m.handles.erase(handle);
  }
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  auto& m = state(req);
  {
    std::lock_guard lock(m.handles_mutex);
    m.handles.erase(reinterpret_cast<Handle*>(fi->fh));
  }
  fuse_reply_err(req, 0);
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  auto& m = state(req);
  const Node* n = m.node(ino);
  if (!n || n->kind == Kind::Dir) {
    fuse_reply_err(req, n ? EISDIR : ENOENT);
    return;
  }
  const auto offset = static_cast<std::uint64_t>(off);
  if (offset >= n->size || size == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  const std::size_t length = static_cast<std::size_t>(std::min<std::uint64_t>(size, n->size - offset));
  if (n->kind == Kind::Text) {
    ++m.reads;
    m.bytes_read += length;
    m.bytes_from_cache += length;
    fuse_reply_buf(req, n->text.data() + offset, length);
    return;
  }
  try {
    std::vector<std::byte> buf(length);
    auto* handle = reinterpret_cast<Handle*>(fi->fh);
    auto r = n->kind == Kind::Plain ? m.read_plain(*n, offset, buf, handle) : m.read_tensors(*n, offset, buf, handle);
    if (!r) {
      ++m.read_errors;
      m.log_read_error(*n, offset, length, r.error());
      fuse_reply_err(req, EIO);
      return;
    }
    ++m.reads;
    m.bytes_read += length;
    fuse_reply_buf(req, reinterpret_cast<const char*>(buf.data()), length);
  } catch (const std::exception& e) {
    ++m.read_errors;
    m.log_read_error(*n, offset, length, Error{ErrorCode::Io, e.what()});
    fuse_reply_err(req, EIO);
  }
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  auto& m = state(req);
  struct statvfs st {};
  st.f_bsize = st.f_frsize = 4096;
  std::uint64_t bytes = 0;
  for (const auto& n : m.nodes) bytes += n.size;
  st.f_blocks = (bytes + 4095) / 4096;
  st.f_files = m.nodes.size();
  st.f_namemax = 255;
  st.f_flag = ST_RDONLY;
  fuse_reply_statfs(req, &st);
}

const fuse_lowlevel_ops kOps = [] {
  fuse_lowlevel_ops ops{};
  ops.lookup = op_lookup;
  ops.getattr = op_getattr;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.open = op_open;
  ops.release = op_release;
  ops.read = op_read;
  ops.statfs = op_statfs;
  return ops;
}();

// The stale-mount check: a mount point whose FUSE process died answers ENOTCONN.
Result<void> check_mount_point(const std::string& dir) {
  struct stat st {};
  const std::string stale =
      dir + ": a stale mount point (its tensorfetch mount process is gone); clear it with: fusermount3 -u " + dir;
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOTCONN) return fail(ErrorCode::Io, stale);
    return fail(err == ENOENT ? ErrorCode::NotFound : ErrorCode::Io, dir + ": " + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) return fail(ErrorCode::InvalidArgument, dir + ": not a directory");
  // stat may be answered from the kernel's cache of a dead mount's attributes; statfs always
  // asks the file system.
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0 && errno == ENOTCONN) return fail(ErrorCode::Io, stale);
  return {};
}

}  // namespace

Mount::Mount(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mount::~Mount() = default;

const std::string& Mount::dir() const noexcept { return impl_->dir; }

Result<std::unique_ptr<Mount>> Mount::create(Checkpoint checkpoint, const std::string& dir, const MountOptions& options) {
  if (auto r = check_mount_point(dir); !r) return fail(r.error());
  auto impl = std::make_unique<Impl>(std::move(checkpoint), dir, options);
  if (auto r = impl->build_tree(); !r) return fail(r.error());
  std::vector<std::string> argv = {"tensorfetch", "-o", "ro,default_permissions,fsname=tensorfetch,subtype=tensorfetch"};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(args.size()), args.data());
  impl->session = fuse_session_new(&fargs, &kOps, sizeof(kOps), impl.get());
  fuse_opt_free_args(&fargs);
  if (!impl->session) return fail(ErrorCode::Io, dir + ": cannot start a FUSE session (libfuse refused the options)");
  if (fuse_session_mount(impl->session, dir.c_str()) != 0) {
    return fail(ErrorCode::Io, dir + ": cannot mount (FUSE): is /dev/fuse there, and fusermount3 installed and allowed? "
                               "(libfuse said why above)");
  }
  impl->mounted = true;
  return std::unique_ptr<Mount>(new Mount(std::move(impl)));
}

namespace {
void wake(int) {}  // SIGUSR2: interrupts the loop's wait (see Impl::stop)
}  // namespace

void Mount::Impl::stop() {
  if (stop_asked.exchange(true)) return;
  cancel.cancel();  // running fetches end within ~100 ms; waiting readers get EIO
  queue.stop();
  // A lazy unmount: new opens fail at once; reads already on their way get EIO (the loop still
  // answers them); the connection ends, and with it the loop, when the last open file closes.
  if (auto r = unmount(dir); !r) log("tensorfetch mount: " + r.error().message);
  std::unique_lock lock(loop_mutex);
  if (!loop_cv.wait_for(lock, std::chrono::seconds(10), [this] { return loop_done; })) {
    // A reader holds a file open: end the loop anyway (its next reads fail with ENOTCONN).
    fuse_session_exit(session);
    pthread_kill(loop_thread, SIGUSR2);
  }
  stop_done = true;
}

Result<void> Mount::run() {
  Impl& m = *impl_;
  // Signals are taken by a thread of their own (sigwait): SIGUSR1 logs the totals, SIGINT,
  // SIGTERM and SIGHUP stop the mount (Impl::stop). They are blocked in every thread, this one
  // and those it starts (the fetch worker, libcurl's, FUSE's workers) included; SIGUSR2, whose
  // handler does nothing, only interrupts this thread's wait inside the FUSE loop.
  sigset_t handled, old;
  sigemptyset(&handled);
  for (int sig : {SIGUSR1, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
  pthread_sigmask(SIG_BLOCK, &handled, &old);
  struct sigaction wake_action {}, old_wake {}, old_pipe {}, ignore {};
  wake_action.sa_handler = wake;  // (no SA_RESTART: the wait returns EINTR)
  sigemptyset(&wake_action.sa_mask);
  ::sigaction(SIGUSR2, &wake_action, &old_wake);
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old_pipe);
  m.loop_thread = pthread_self();
  m.queue.start();
  std::atomic<bool> done{false};
  std::thread signals([&] {
    for (;;) {
      int sig = 0;
      if (sigwait(&handled, &sig) != 0 || done) return;
      if (sig == SIGUSR1) {
        log_totals();
      } else {
        std::thread([&m] { m.stop(); }).detach();
      }
    }
  });

  int rc = -1;
  if (fuse_loop_config* config = fuse_loop_cfg_create()) {
    fuse_loop_cfg_set_max_threads(config, m.options.max_threads);
    rc = fuse_session_loop_mt(m.session, config);
    fuse_loop_cfg_destroy(config);
  }
  {
    std::lock_guard lock(m.loop_mutex);
    m.loop_done = true;
  }
  m.loop_cv.notify_all();
  // Stop fetching, unmount (when nobody did), then say what was done.
  m.cancel.cancel();
  m.queue.stop();
  if (m.mounted) {
    fuse_session_unmount(m.session);
    m.mounted = false;
  }
  done = true;
  pthread_kill(signals.native_handle(), SIGUSR1);
  signals.join();
  // A stop still running (it was told: loop_done) ends before its state goes.
  while (m.stop_asked && !m.stop_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::sigaction(SIGUSR2, &old_wake, nullptr);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  log_totals();
  if (rc < 0) return fail(ErrorCode::Io, m.dir + ": the FUSE session failed (" + std::strerror(-rc) + ")");
  return {};
}

void Mount::exit() { impl_->stop(); }

MountStats Mount::stats() const { return impl_->totals(); }

void Mount::log_totals() const {
  const MountStats s = impl_->totals();
  impl_->log("tensorfetch mount: " + impl_->dir + ": " + std::to_string(s.reads) + " reads (" +
             std::to_string(s.bytes_read) + " bytes), " + std::to_string(s.bytes_fetched) + " bytes fetched in " +
             std::to_string(s.fetches) + " fetches, " + std::to_string(s.bytes_from_cache) + " bytes from the cache, " +
             std::to_string(s.bytes_in_flight) + " bytes in flight, " + std::to_string(s.read_errors) + " failed reads");
}

Result<void> unmount(const std::string& dir) {
  if (::geteuid() == 0) {
    if (::umount2(dir.c_str(), MNT_DETACH) == 0) return {};
    const int err = errno;
    if (err == EINVAL) return fail(ErrorCode::InvalidArgument, dir + ": not a mount point");
    if (err == EBUSY) return fail(ErrorCode::Busy, dir + ": busy");
    return fail(ErrorCode::Io, dir + ": cannot unmount: " + std::strerror(err));
  }
  // Not root: the setuid helper does it (and checks that the mount is this user's).
  std::vector<std::string> argv = {"fusermount3", "-u", "-z", dir};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  if (int e = posix_spawnp(&pid, "fusermount3", nullptr, nullptr, args.data(), environ); e != 0) {
    return fail(ErrorCode::Io, dir + ": cannot run fusermount3: " + std::strerror(e));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fail(ErrorCode::InvalidArgument, dir + ": fusermount3 -u failed (not a FUSE mount of this user?)");
  }
  return {};
}

}  // namespace tensorfetch
