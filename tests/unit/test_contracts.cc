// SPDX-License-Identifier: Apache-2.0
// Error contracts of the public API and the cache (issue 13): no public call throws on a bad
// argument (an out-of-range file, a selection from elsewhere or with a forged plan, a NUL in a
// path, a null tensor pointer); a disk error in the cache stays an error (never "not fetched",
// never an empty listing); the streaming hasher may be advanced from another thread while the
// blob is finished.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cache/blob.h"
#include "tensorfetch/cache.hpp"
#include "tensorfetch/checkpoint.hpp"
#include "tensorfetch/parameters.hpp"
#include "tensorfetch/writer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
namespace tf = tensorfetch;
namespace td = tensorfetch::detail;
using tf::ByteRange;
using tf::ErrorCode;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tf-contracts-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) FAIL("mkdtemp failed: " << std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// A valid safetensors file of two tensors: "a" F32 [4, 2] and "b" U8 [3].
fs::path write_checkpoint(const fs::path& path) {
  const std::vector<tf::OutputTensor> tensors = {{"a", tf::DType::F32, {4, 2}}, {"b", tf::DType::U8, {3}}};
  auto layout = tf::layout_file(tensors, std::nullopt);
  REQUIRE(layout.has_value());
  std::string bytes = layout->prefix;
  bytes.resize(layout->file_size, '\x07');
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

tf::Checkpoint open_checkpoint(const fs::path& path) {
  auto c = tf::Checkpoint::open(path.string());
  INFO((c ? std::string("ok") : c.error().message));
  REQUIRE(c.has_value());
  return std::move(*c);
}

std::vector<tf::Selection> select_all(const tf::Checkpoint& c) {
  const std::vector<tf::Selector> all = {{"*", std::nullopt}};
  auto s = c.select(all);
  REQUIRE(s.has_value());
  return std::move(*s);
}

std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::shared_ptr<const td::CacheDir> cache_at(const fs::path& root) {
  auto c = td::CacheDir::open(root.string(), td::Sharing::Private, true);
  INFO((c ? std::string("ok") : c.error().message));
  REQUIRE(c.has_value());
  return *c;
}

}  // namespace

// --------------------------------------------------------------------------------------------
// No throwing public call

TEST_CASE("contracts: Checkpoint::header of a file that does not exist is nullptr, never a throw",
          "[contracts][checkpoint]") {
  TempDir tmp;
  const auto c = open_checkpoint(write_checkpoint(tmp / "m.safetensors"));
  REQUIRE(c.header(0) != nullptr);
  CHECK(c.header(0)->tensors().size() == 2);
  CHECK_NOTHROW(c.header(1));
  CHECK(c.header(1) == nullptr);
  CHECK(c.header(static_cast<std::size_t>(-1)) == nullptr);
  static_assert(noexcept(c.header(0)));
}

TEST_CASE("contracts: fetch, plan, write and write_stream refuse selections that are not this checkpoint's "
          "(InvalidArgument, nothing written)",
          "[contracts][checkpoint]") {
  TempDir tmp;
  auto c = open_checkpoint(write_checkpoint(tmp / "m.safetensors"));
  const auto other = open_checkpoint(write_checkpoint(tmp / "other.safetensors"));
  const auto good = select_all(c);
  REQUIRE(good.size() == 2);

  struct Row {
    const char* what;
    std::vector<tf::Selection> selection;
    const char* mention;
  };
  std::vector<Row> rows;
  {
    auto s = good;
    s[1].ref.file = 7;
    rows.push_back({"a file index past the end", s, "file 7 of 1"});
  }
  {
    auto s = good;
    s[0].ref.info = nullptr;
    rows.push_back({"no tensor", s, "does not belong to this checkpoint"});
  }
  rows.push_back({"another checkpoint's tensor", select_all(other), "does not belong to this checkpoint"});
  {
    auto s = good;
    s[0].plan.ranges = {ByteRange{0, 1000}};
    s[0].plan.nbytes = 1000;
    rows.push_back({"a plan beyond the tensor", s, "lie outside its 32 bytes"});
  }
  {
    auto s = good;
    s[0].plan.ranges = {ByteRange{~std::uint64_t{0} - 2, 8}};
    rows.push_back({"a plan whose range wraps around", s, "lie outside"});
  }
  {
    auto s = good;
    s[0].plan.shape = {1000, 1000};
    rows.push_back({"a plan whose shape disagrees with its bytes", s, "disagrees with its shape and dtype"});
  }
  {
    auto s = good;
    s[1].plan.shape = {~std::uint64_t{0}, 3};
    rows.push_back({"a plan whose shape overflows", s, "disagrees with its shape and dtype"});
  }
  for (auto& row : rows) {
    DYNAMIC_SECTION(row.what) {
      const fs::path out = tmp / "out.safetensors";
      CHECK_ERROR(c.write(row.selection, out.string()), ErrorCode::InvalidArgument, row.mention);
      CHECK_FALSE(fs::exists(out));
      const fs::path stream = tmp / "stream.bin";
      {
        std::ofstream create(stream);
      }
      const int fd = ::open(stream.c_str(), O_WRONLY | O_CLOEXEC);
      REQUIRE(fd >= 0);
      CHECK_ERROR(c.write_stream(row.selection, fd), ErrorCode::InvalidArgument, row.mention);
      ::close(fd);
      CHECK(fs::file_size(stream) == 0u);
      CHECK_ERROR(c.fetch(row.selection), ErrorCode::InvalidArgument, row.mention);
      CHECK_ERROR(c.plan(row.selection), ErrorCode::InvalidArgument, row.mention);
    }
  }
  // The selection select() made is accepted by all four.
  CHECK(c.write(good, (tmp / "ok.safetensors").string()).has_value());
  CHECK(c.fetch(good).has_value());
  CHECK(c.plan(good).has_value());
}

TEST_CASE("contracts: view of a reference from elsewhere is InvalidArgument", "[contracts][checkpoint]") {
  TempDir tmp;
  const auto c = open_checkpoint(write_checkpoint(tmp / "m.safetensors"));
  tf::TensorRef bad = c.tensors()[0];
  bad.file = 3;
  CHECK_ERROR(c.view(bad), ErrorCode::InvalidArgument, "does not belong");
  CHECK_ERROR(c.view(tf::TensorRef{}), ErrorCode::InvalidArgument, "does not belong");
}

TEST_CASE("contracts: a path with a NUL byte is refused (open, write, save_files), never truncated",
          "[contracts][checkpoint]") {
  TempDir tmp;
  const fs::path file = write_checkpoint(tmp / "m.safetensors");
  const std::string with_nul = file.string() + std::string("\0.extra", 7);
  CHECK_ERROR(tf::Checkpoint::open(with_nul), ErrorCode::InvalidArgument, "NUL");
  const auto c = open_checkpoint(file);
  const std::string out = (tmp / "out.safetensors").string();
  CHECK_ERROR(c.write(select_all(c), out + std::string("\0x", 2)), ErrorCode::InvalidArgument, "NUL");
  CHECK_FALSE(fs::exists(out));
  CHECK_ERROR(c.save_files((tmp / "dir").string() + std::string("\0x", 2)), ErrorCode::InvalidArgument, "NUL");
  CHECK_FALSE(fs::exists(tmp / "dir"));
}

TEST_CASE("contracts: count_parameters skips null tensor pointers and reports an unreadable config",
          "[contracts][parameters]") {
  TempDir tmp;
  const auto c = open_checkpoint(write_checkpoint(tmp / "m.safetensors"));
  std::vector<const tf::TensorInfo*> ts = {nullptr, c.tensors()[0].info, nullptr, c.tensors()[1].info};
  tf::ParameterCount n;
  CHECK_NOTHROW(n = tf::count_parameters(ts, std::string_view("{not json")));
  CHECK(n.total == 8u + 3u);
  CHECK(n.config_warning.has_value());
}

// --------------------------------------------------------------------------------------------
// Disk errors stay errors

TEST_CASE("contracts: Blob::holds is an Io error naming meta.json when it cannot be read, never 'not committed'",
          "[contracts][blob][disk]") {
  TempDir tmp;
  const std::string content(4096, 'z');
  const auto id = td::blob_identity("https://example.com/m.safetensors", std::nullopt, std::string("\"e1\""),
                                    content.size());
  auto b = td::Blob::open(cache_at(tmp / "cache"), id, content.size(), "https://example.com/m.safetensors",
                          std::string("\"e1\""));
  REQUIRE(b.has_value());
  REQUIRE((*b)->write_at(0, bytes_of(content).first(1024)));
  const std::vector<ByteRange> first{{0, 1024}};
  REQUIRE((*b)->commit(first));
  auto held = (*b)->holds(ByteRange{0, 1024});
  REQUIRE(held.has_value());
  CHECK(*held);

  // A structural fault: meta.json is now a directory (reading it fails with EISDIR).
  const fs::path meta = tmp / "cache" / "blobs" / id.id / "meta.json";
  fs::remove(meta);
  fs::create_directory(meta);
  // What this object already knows is still answered from memory ...
  held = (*b)->holds(ByteRange{0, 1024});
  REQUIRE(held.has_value());
  CHECK(*held);
  // ... but a range it must re-read meta.json for is an error naming the file.
  CHECK_ERROR((*b)->holds(ByteRange{1024, 1}), ErrorCode::Io, meta.string());
  CHECK_ERROR((*b)->refresh(), ErrorCode::Io, meta.string());
}

TEST_CASE("contracts: cache ls and prune report a blob whose meta.json or data cannot be read, naming it",
          "[contracts][blob][disk]") {
  TempDir tmp;
  const fs::path root = tmp / "cache";
  const std::string content(2048, 'q');
  const auto id = td::blob_identity("https://example.com/x", std::nullopt, std::string("\"e\""), content.size());
  {
    auto b = td::Blob::open(cache_at(root), id, content.size(), "https://example.com/x", std::string("\"e\""));
    REQUIRE(b.has_value());
  }
  auto ok = tf::cache_list(root.string());
  REQUIRE(ok.has_value());
  REQUIRE(ok->size() == 1);

  SECTION("meta.json is a directory") {
    const fs::path meta = root / "blobs" / id.id / "meta.json";
    fs::remove(meta);
    fs::create_directory(meta);
    CHECK_ERROR(tf::cache_list(root.string()), ErrorCode::Io, meta.string());
    CHECK_ERROR(tf::cache_prune(0, root.string()), ErrorCode::Io, meta.string());
    CHECK(fs::exists(root / "blobs" / id.id / "data"));  // nothing removed on a guess
  }
  SECTION("data is a directory") {
    const fs::path data = root / "blobs" / id.id / "data";
    fs::remove(data);
    fs::create_directory(data);
    CHECK_ERROR(tf::cache_list(root.string()), ErrorCode::Io, data.string());
  }
  SECTION("a blob with no data file yet is listed, holding nothing") {
    fs::remove(root / "blobs" / id.id / "data");
    auto ls = tf::cache_list(root.string());
    REQUIRE(ls.has_value());
    REQUIRE(ls->size() == 1);
    CHECK(ls->front().disk_bytes == 0u);
  }
}

// --------------------------------------------------------------------------------------------
// The streaming hasher's locking

TEST_CASE("contracts: advance_hash may run on another thread while finish verifies the blob",
          "[contracts][blob][threads]") {
  TempDir tmp;
  std::string content(3 << 20, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>((i * 131) >> 7);
  const std::string url = "https://cdn.example/x.safetensors";
  const auto id = td::blob_identity(url, "\"" + td::sha256_hex(content) + "\"", std::nullopt, content.size());
  for (int round = 0; round < 5; ++round) {
    DYNAMIC_SECTION("round " << round) {
      auto b = td::Blob::open(cache_at(tmp / ("cache" + std::to_string(round))), id, content.size(), url,
                              std::nullopt);
      REQUIRE(b.has_value());
      td::Blob& blob = **b;
      blob.enable_streaming_hash();
      std::atomic<bool> stop{false};
      std::atomic<int> failures{0};
      std::thread hasher([&] {
        while (!stop.load()) {
          if (!blob.advance_hash()) failures.fetch_add(1);
        }
      });
      const std::size_t piece = 256 << 10;
      for (std::size_t off = 0; off < content.size(); off += piece) {
        REQUIRE(blob.write_at(off, bytes_of(content).subspan(off, piece)));
        const std::vector<ByteRange> r{{off, piece}};
        REQUIRE(blob.commit(r));
      }
      auto finished = blob.finish("x.safetensors");  // while the other thread keeps advancing
      stop.store(true);
      hasher.join();
      INFO((finished ? std::string("ok") : finished.error().message));
      CHECK(finished.has_value());
      CHECK(blob.complete());
      CHECK(failures.load() == 0);
      CHECK(blob.advance_hash().has_value());  // after finish: a no-op
    }
  }
}
