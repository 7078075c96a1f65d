// SPDX-License-Identifier: Apache-2.0
// Writing a selection of a checkpoint as new safetensors files. Every file is written under
// a temporary name, flushed, and renamed into place; an index is renamed last, so a reader
// never sees an index naming a shard that is not complete.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "checkpoint/checkpoint_internal.h"
#include "format/json_internal.h"
#include "hub/location.h"
#include "tensorfetch/writer.hpp"

namespace tensorfetch {

namespace {

Error sys_error(const std::string& path, const char* what, int err) {
  return Error{ErrorCode::Io, path + ": " + what + ": " + std::strerror(err)};
}

/// A file being written under a temporary name beside its final path. Unlinks the
/// temporary file unless `commit()` succeeded.
class PendingFile {
 public:
  static Result<PendingFile> create(const std::string& final_path) {
    PendingFile f;
    f.final_ = final_path;
    f.temp_ = final_path + ".tmp-XXXXXX";
    f.fd_ = ::mkstemp(f.temp_.data());
    if (f.fd_ < 0) return fail(sys_error(final_path, "cannot create a temporary file", errno));
    ::fchmod(f.fd_, 0644);
    return f;
  }
  PendingFile() = default;
  PendingFile(PendingFile&& o) noexcept
      : final_(std::move(o.final_)), temp_(std::move(o.temp_)), fd_(std::exchange(o.fd_, -1)),
        committed_(std::exchange(o.committed_, true)) {}
  PendingFile& operator=(PendingFile&&) = delete;
  ~PendingFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  }

  Result<void> write(std::span<const std::byte> bytes) {
    const std::byte* p = bytes.data();
    std::size_t left = bytes.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, std::min<std::size_t>(left, std::size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail(sys_error(final_, "write failed", errno));
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    return {};
  }

  /// Writes mapped bytes in 8 MiB pieces, dropping each piece's pages from this process's
  /// resident set once written (the page cache keeps them), so memory stays flat however much
  /// is copied.
  Result<void> write_dropping(std::span<const std::byte> bytes) {
    constexpr std::size_t kPiece = 8 << 20;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    while (!bytes.empty()) {
      auto piece = bytes.first(std::min(kPiece, bytes.size()));
      if (auto r = write(piece); !r) return r;
      auto begin = (reinterpret_cast<std::uintptr_t>(piece.data()) + page - 1) & ~(page - 1);
      auto end = reinterpret_cast<std::uintptr_t>(piece.data() + piece.size()) & ~(page - 1);
      if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
      bytes = bytes.subspan(piece.size());
    }
    return {};
  }

  /// Flushes the data to disk and closes the file (still under its temporary name).
  Result<void> finish() {
    if (::fsync(fd_) != 0) return fail(sys_error(final_, "fsync failed", errno));
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) return fail(sys_error(final_, "close failed", errno));
    return {};
  }

  /// Renames the finished file into place.
  Result<void> commit() {
    if (::rename(temp_.c_str(), final_.c_str()) != 0) {
      return fail(sys_error(final_, "cannot rename into place", errno));
    }
    committed_ = true;
    return {};
  }

  [[nodiscard]] const std::string& final_path() const { return final_; }

 private:
  std::string final_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

void sync_directory(const std::string& file_path) {
  auto dir = std::filesystem::path(file_path).parent_path();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

Result<void> Checkpoint::write(std::span<const Selection> selection, const std::string& out,
                               const WriteOptions& options) const {
  // Group the selection by output file.
  struct OutputFile {
    std::string path;
    std::vector<const Selection*> tensors;
    std::optional<Metadata> metadata;
  };
  std::vector<OutputFile> outputs;
  std::map<std::string, std::string> weight_map;
  if (options.sharded_output) {
    std::map<std::size_t, std::size_t> by_source;  // source file -> output position
    for (const auto& s : selection) {
      auto [it, inserted] = by_source.emplace(s.ref.file, outputs.size());
      if (inserted) {
        const auto& name = impl_->files[s.ref.file].path;
        outputs.push_back(OutputFile{out + "/" + name, {}, impl_->headers[s.ref.file].metadata});
      }
      outputs[it->second].tensors.push_back(&s);
      weight_map.emplace(std::string(s.ref.info->name), impl_->files[s.ref.file].path);
    }
  } else {
    std::optional<Metadata> metadata;
    if (!selection.empty()) metadata = impl_->headers[selection.front().ref.file].metadata;
    outputs.push_back(OutputFile{out, {}, metadata});
    for (const auto& s : selection) outputs.back().tensors.push_back(&s);
  }

  // Never replace a file of the checkpoint being read (e.g. `-o` naming its own directory).
  std::vector<std::pair<dev_t, ino_t>> sources;
  auto add_source = [&](const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) sources.emplace_back(st.st_dev, st.st_ino);
  };
  for (std::size_t i = 0; i < impl_->files.size(); ++i) add_source(impl_->local_path(i));
  if (impl_->index) add_source(impl_->root.empty() ? impl_->index_name : impl_->root + "/" + impl_->index_name);
  auto check_target = [&](const std::string& path) -> Result<void> {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {};
    for (const auto& [dev, ino] : sources) {
      if (st.st_dev == dev && st.st_ino == ino) {
        return fail(ErrorCode::InvalidArgument,
                    path + ": refusing to overwrite a file of the checkpoint being read; choose "
                           "another output");
      }
    }
    if (S_ISDIR(st.st_mode)) return fail(ErrorCode::InvalidArgument, path + ": is a directory");
    return {};
  };
  for (const auto& o : outputs) {
    if (auto r = check_target(o.path); !r) return r;
  }
  if (options.sharded_output && impl_->index) {
    if (auto r = check_target(out + "/" + impl_->index_name); !r) return r;
  }

  std::vector<PendingFile> pending;
  std::uint64_t total_size = 0, total_parameters = 0;
  for (const auto& o : outputs) {
    std::vector<OutputTensor> tensors;
    tensors.reserve(o.tensors.size());
    for (const Selection* s : o.tensors) {
      tensors.push_back(OutputTensor{std::string(s->ref.info->name), s->ref.info->dtype, s->plan.shape});
      std::uint64_t elements = 1;
      for (auto d : s->plan.shape) elements *= d;
      total_parameters += elements;
      total_size += s->plan.nbytes;
    }
    auto layout = layout_file(tensors, o.metadata);
    if (!layout) return fail(layout.error().with_context(o.path));

    std::error_code ec;
    auto parent = std::filesystem::path(o.path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) return fail(ErrorCode::Io, parent.string() + ": cannot create directory: " + ec.message());

    auto file = PendingFile::create(o.path);
    if (!file) return fail(file.error());
    if (auto r = file->write(std::as_bytes(std::span(layout->prefix))); !r) return r;
    for (const Selection* s : o.tensors) {
      const ByteRange base = impl_->headers[s->ref.file].file_range(*s->ref.info);
      std::vector<ByteRange> needed;
      for (const auto& range : s->plan.ranges) needed.push_back(ByteRange{base.offset + range.offset, range.length});
      auto bytes = impl_->served_bytes(s->ref.file, needed, "tensor " + detail::quote_name(s->ref.info->name));
      if (!bytes) return fail(bytes.error());
      for (const auto& range : needed) {
        if (range.end() > bytes->size()) {
          return fail(ErrorCode::Io, impl_->files[s->ref.file].path + ": tensor " +
                                         detail::quote_name(s->ref.info->name) + " lies beyond the file");
        }
        if (auto r = file->write_dropping(bytes->subspan(range.offset, range.length)); !r) return r;
      }
    }
    if (auto r = file->finish(); !r) return r;
    pending.push_back(std::move(*file));
  }

  if (options.sharded_output && impl_->index) {
    std::string text = build_index_json(weight_map, total_size, total_parameters);
    auto file = PendingFile::create(out + "/" + impl_->index_name);
    if (!file) return fail(file.error());
    if (auto r = file->write(std::as_bytes(std::span(text))); !r) return r;
    if (auto r = file->finish(); !r) return r;
    pending.push_back(std::move(*file));
  }
  // Shards first, the index last.
  for (auto& f : pending) {
    if (auto r = f.commit(); !r) return r;
  }
  for (const auto& f : pending) sync_directory(f.final_path());
  return {};
}

}  // namespace tensorfetch
