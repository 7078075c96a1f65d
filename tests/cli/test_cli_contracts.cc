// SPDX-License-Identifier: Apache-2.0
// Error contracts of the command line that need no server: a cache blob another process has
// open is `Busy` (exit 1, "in use") for `cache rm` and kept by `cache prune`; a disk error
// inside the cache is reported as one, naming the path, never taken for "no such blob".
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.hpp"

using namespace clitest;

namespace {

// A private cache root (0700, as the cache requires) holding blob `id` with a data file of
// `size` bytes and no meta.json (a blob an interrupted first fetch left).
fs::path make_cache_with_blob(const TempDir& tmp, const std::string& id, std::size_t size) {
  const fs::path root = tmp / "cache";
  for (const auto& d : {root, root / "blobs", root / "blobs" / id}) {
    REQUIRE(::mkdir(d.c_str(), 0700) == 0);
  }
  write_file(root / "blobs" / id / "data", std::string(size, 'x'));
  return root;
}

// A shared flock on a blob's data file: what a process reading or fetching the blob holds.
class InUse {
 public:
  explicit InUse(const fs::path& data) : fd_(::open(data.c_str(), O_RDONLY | O_CLOEXEC)) {
    REQUIRE(fd_ >= 0);
    REQUIRE(::flock(fd_, LOCK_SH) == 0);
  }
  ~InUse() { ::close(fd_); }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;

 private:
  int fd_;
};

}  // namespace

TEST_CASE("cli cache rm: a blob in use is refused as busy (exit 1, 'in use'), removed once released",
          "[cli][cache][busy]") {
  TempDir tmp;
  const std::string id = "u0123456789abcdef0123456789abcdef01234567";
  const fs::path root = make_cache_with_blob(tmp, id, 4096);
  {
    InUse held(root / "blobs" / id / "data");
    auto rm = run({"cache", "rm", id, "--cache-dir", root.string()});
    INFO(rm.err);
    CHECK(rm.exit_code == 1);
    CHECK_THAT(rm.err, Catch::Contains(id) && Catch::Contains("in use by another process"));
    CHECK(fs::exists(root / "blobs" / id / "data"));

    auto prune = run({"cache", "prune", "--max-size", "0", "--cache-dir", root.string()});
    INFO(prune.out << prune.err);
    CHECK(prune.exit_code == 0);
    CHECK_THAT(prune.out, Catch::Contains("removed 0 blobs") && Catch::Contains("1 in use, kept"));
    CHECK(fs::exists(root / "blobs" / id / "data"));
  }
  auto rm = run({"cache", "rm", id, "--cache-dir", root.string()});
  INFO(rm.err);
  CHECK(rm.exit_code == 0);
  CHECK_FALSE(fs::exists(root / "blobs" / id));
}
