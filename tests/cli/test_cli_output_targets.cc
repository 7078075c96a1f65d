// SPDX-License-Identifier: Apache-2.0
// Where `get -o` writes (issue 14, item 4), and SIGINT/SIGTERM during a long local write (item
// 6): a regular file goes to a temporary name and is renamed into place; a FIFO, a character
// device or `-` (standard output) is written in place as a stream and never replaced; sockets,
// block devices and directories where a file belongs are refused with exit 1 and leave nothing
// behind. A signal stops the write within a second, exit 128 + signal, and removes the
// temporary file.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "support/process.hpp"
#include "cli_util.hpp"

using namespace clitest;
using namespace std::chrono_literals;

namespace {

// A safetensors file of `count` F32 tensors `t.N` of `floats` elements each, with varied bytes.
std::string model_bytes(int count, std::size_t floats) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::uint64_t pos = 0;
  for (int i = 0; i < count; ++i) {
    header["t." + std::to_string(i)] = {{"dtype", "F32"}, {"shape", {floats}}, {"data_offsets", {pos, pos + floats * 4}}};
    pos += floats * 4;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::string data(pos, '\0');
  std::uint32_t x = 12345;
  for (auto& c : data) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 16);
  }
  return make_safetensors(text, data);
}

struct Source {
  TempDir dir;
  fs::path file = dir / "model.safetensors";
  std::string bytes;
  explicit Source(int count = 16, std::size_t floats = 1024) : bytes(model_bytes(count, floats)) {
    write_file(file, bytes);
  }
  // What `get SOURCE -o FILE` writes (the reference for streams).
  std::string regular_output() {
    const fs::path out = dir / "regular-output.safetensors";
    auto r = run({"get", file.string(), "-o", out.string(), "-q"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::string b = read_file(out);
    fs::remove(out);
    return b;
  }
};

struct stat stat_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st;
}

// Binds a UNIX socket at `path` (the socket file stays while `fd` is open).
int bind_unix_socket(const fs::path& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.string().size() < sizeof addr.sun_path);
  std::strcpy(addr.sun_path, path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// Reads a FIFO to its end on a thread.
struct FifoReader {
  std::string bytes;
  std::thread thread;
  explicit FifoReader(const fs::path& fifo) {
    thread = std::thread([this, fifo] {
      int fd = ::open(fifo.c_str(), O_RDONLY);
      if (fd < 0) return;
      char buf[65536];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        if (n > 0) bytes.append(buf, static_cast<std::size_t>(n));
      }
      ::close(fd);
    });
  }
  ~FifoReader() {
    if (thread.joinable()) thread.join();
  }
};

}  // namespace

TEST_CASE("output: -o /dev/null (a character device) is written through and stays a character device",
          "[cli][output]") {
  Source src;
  // A private node of the null device (c 1 3) where mknod is allowed (root): a regression would
  // then replace that node, not the machine's /dev/null. Elsewhere /dev/null itself, which an
  // unprivileged process could not replace anyway.
  fs::path null_dev = src.dir / "null";
  if (::mknod(null_dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) null_dev = "/dev/null";
  INFO("device: " << null_dev);
  const struct stat before = stat_of(null_dev);
  REQUIRE(S_ISCHR(before.st_mode));
  auto r = run({"get", src.file.string(), "-o", null_dev.string()});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("wrote 16 tensors"));
  const struct stat after = stat_of(null_dev);
  CHECK(S_ISCHR(after.st_mode));
  CHECK(after.st_rdev == before.st_rdev);
  CHECK(after.st_ino == before.st_ino);
  CHECK(temp_files(null_dev.parent_path()).empty());
  // Also through a symbolic link to it.
  const fs::path link = src.dir / "null-link";
  fs::create_symlink(null_dev, link);
  r = run({"get", src.file.string(), "-o", link.string(), "-q"});
  CHECK(r.exit_code == 0);
  CHECK(fs::is_symlink(link));
  CHECK(S_ISCHR(stat_of(null_dev).st_mode));
}

TEST_CASE("output: -o - writes exactly the bytes a file output gets, to a pipe and to a redirected file",
          "[cli][output]") {
  Source src;
  const std::string expected = src.regular_output();
  REQUIRE(expected.size() > 8);

  SECTION("standard output is a pipe") {
    auto r = run({"get", src.file.string(), "-o", "-", "-q"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.size() == expected.size());
    CHECK(r.out == expected);
  }
  SECTION("standard output is a regular file (written at its offset, not replaced)") {
    const fs::path out = src.dir / "stdout.bin";
    tftest::Child c(tensorfetch_bin(), {"get", src.file.string(), "t.3", "t.1*", "-o", "-", "-q"},
                    {"", out.string(), (src.dir / "err.txt").string()});
    REQUIRE(c.wait() == 0);
    auto r = run({"get", src.file.string(), "t.3", "t.1*", "-o", (src.dir / "sel.safetensors").string(), "-q"});
    REQUIRE(r.exit_code == 0);
    CHECK(read_file(out) == read_file(src.dir / "sel.safetensors"));
  }
  SECTION("a sharded source written to standard output is one file") {
    auto ref = reference_dir();
    if (!ref) return;
    const fs::path sharded = *ref / "llama-tiny-sharded";
    auto r = run({"get", sharded.string(), "-o", "-", "-q"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const fs::path out = src.dir / "sharded-as-one.safetensors";
    auto f = run({"get", sharded.string(), "-o", out.string(), "-q"});
    REQUIRE(f.exit_code == 0);
    CHECK(r.out == read_file(out));
  }
}

TEST_CASE("output: a FIFO with a reader receives the exact bytes and stays a FIFO", "[cli][output]") {
  Source src(64, 4096);  // 1 MiB of tensor data: more than a pipe holds
  const std::string expected = src.regular_output();
  const fs::path fifo = src.dir / "out.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  {
    FifoReader reader(fifo);
    auto r = run({"get", src.file.string(), "-o", fifo.string(), "-q"});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    reader.thread.join();
    received = reader.bytes;
  }
  CHECK(received.size() == expected.size());
  CHECK(received == expected);
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(temp_files(src.dir.path()).empty());
}

TEST_CASE("output: SIGTERM while a FIFO's reader has stopped reading ends get within 1 s (exit 143)",
          "[cli][output][signals]") {
  Source src(64, 16384);  // 4 MiB: the pipe fills and the writer waits
  const fs::path fifo = src.dir / "stuck.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  tftest::Child c(tensorfetch_bin(), {"get", src.file.string(), "-o", fifo.string(), "-q"},
                  {"", "", (src.dir / "err.txt").string()});
  // A reader that opens the FIFO and never reads.
  const int reader = ::open(fifo.c_str(), O_RDONLY);
  REQUIRE(reader >= 0);
  std::this_thread::sleep_for(500ms);
  REQUIRE(c.running());
  const auto start = std::chrono::steady_clock::now();
  c.signal(SIGTERM);
  auto rc = c.wait_for(3s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  ::close(reader);
  INFO(read_file(src.dir / "err.txt"));
  REQUIRE(rc.has_value());
  CHECK(*rc == 143);
  CHECK(took < 1000ms);
  CHECK_THAT(read_file(src.dir / "err.txt"), Catch::Contains("cancelled"));
}

TEST_CASE("output: a UNIX socket, a block device, a directory and a dangling link are refused (exit 1); nothing is written",
          "[cli][output]") {
  Source src;
  SECTION("a UNIX socket") {
    const fs::path sock = src.dir / "out.sock";
    const int fd = bind_unix_socket(sock);
    auto r = run({"get", src.file.string(), "-o", sock.string()});
    ::close(fd);
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("out.sock") && Catch::Contains("socket"));
    struct stat st {};
    REQUIRE(::lstat(sock.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
  }
  SECTION("a block device (made with mknod; skipped when that is not allowed)") {
    const fs::path dev = src.dir / "blockdev";
    if (::mknod(dev.c_str(), S_IFBLK | 0600, makedev(7, 200)) != 0) {
      WARN("mknod of a block device is not allowed here: skipped");
      return;
    }
    auto r = run({"get", src.file.string(), "-o", dev.string()});
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("block device"));
    struct stat st {};
    REQUIRE(::lstat(dev.c_str(), &st) == 0);
    CHECK(S_ISBLK(st.st_mode));
  }
  SECTION("a directory where a shard file goes (-o DIR/)") {
    auto ref = reference_dir();
    if (!ref) return;
    const fs::path out = src.dir / "shards";
    fs::create_directories(out / "model-00002-of-00003.safetensors");
    auto r = run({"get", (*ref / "llama-tiny-sharded").string(), "-o", out.string() + "/"});
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("model-00002-of-00003.safetensors") && Catch::Contains("directory"));
    // Only the directory that was there: no shard, no index.
    CHECK(list_dir(out) == std::vector<std::string>{"model-00002-of-00003.safetensors"});
  }
  SECTION("a symbolic link to nothing") {
    const fs::path link = src.dir / "dangling.safetensors";
    fs::create_symlink(src.dir / "missing" / "target.safetensors", link);
    auto r = run({"get", src.file.string(), "-o", link.string()});
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("symbolic link"));
    CHECK(fs::is_symlink(link));
    CHECK_FALSE(fs::exists(src.dir / "missing"));
  }
  CHECK(temp_files(src.dir.path()).empty());
  CHECK_FALSE(fs::exists(src.dir / "regular-output.safetensors"));
}

TEST_CASE("output: a sharded output (-o DIR/) cannot go to a stream: a FIFO among its files is refused, nothing left",
          "[cli][output]") {
  auto ref = reference_dir();
  if (!ref) return;
  TempDir dir;
  const fs::path out = dir / "shards";
  fs::create_directories(out);
  REQUIRE(::mkfifo((out / "model-00003-of-00003.safetensors").c_str(), 0600) == 0);
  auto r = run({"get", (*ref / "llama-tiny-sharded").string(), "-o", out.string() + "/"});
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("FIFO") && Catch::Contains("sharded"));
  CHECK(list_dir(out) == std::vector<std::string>{"model-00003-of-00003.safetensors"});  // the FIFO alone
  CHECK(temp_files(out).empty());
}

TEST_CASE("output: a symbolic link to a file: the file it points to is replaced, the link stays",
          "[cli][output]") {
  Source src;
  const fs::path target = src.dir / "real.safetensors";
  write_file(target, "old contents");
  const fs::path link = src.dir / "link.safetensors";
  fs::create_symlink(target, link);
  auto r = run({"get", src.file.string(), "t.2", "-o", link.string(), "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(fs::is_symlink(link));
  CHECK(fs::read_symlink(link) == target);
  const auto st = read_safetensors(target);
  CHECK(st.tensors.size() == 1);
  CHECK(st.tensors.count("t.2") == 1);
  CHECK(temp_files(src.dir.path()).empty());
}

TEST_CASE("download: -o - is refused (a download is a directory of files)", "[cli][output]") {
  Source src;
  auto r = run({"download", src.file.string(), "-o", "-"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("-o -"));
  CHECK_FALSE(fs::exists(fs::current_path() / "-"));
}

TEST_CASE("signals: SIGTERM or SIGINT during a long local write: exit 143/130 within 1 s, no output, no temporary file",
          "[cli][signals]") {
  // 1 GiB of tensor data in a sparse source: the write runs for a while on any disk, and the
  // signal arrives within milliseconds of the temporary file appearing.
  TempDir dir;
  const fs::path source = dir / "big.safetensors";
  {
    const std::uint64_t half = std::uint64_t{1} << 29;
    json header = {{"a", {{"dtype", "U8"}, {"shape", {half}}, {"data_offsets", {0, half}}}},
                   {"b", {{"dtype", "U8"}, {"shape", {half}}, {"data_offsets", {half, 2 * half}}}}};
    std::string text = header.dump();
    while (text.size() % 8 != 0) text += ' ';
    write_file(source, le64(text.size()) + text);
    fs::resize_file(source, 8 + text.size() + 2 * half);
  }
  for (const int sig : {SIGTERM, SIGINT}) {
    INFO("signal " << sig);
    const fs::path out_dir = dir / ("out-" + std::to_string(sig));
    fs::create_directories(out_dir);
    const fs::path out = out_dir / "copy.safetensors";
    tftest::Child c(tensorfetch_bin(), {"get", source.string(), "-o", out.string(), "-q"},
                    {"", "", (dir / "err.txt").string()});
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (tftest::temp_files(out_dir).empty() && c.running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    REQUIRE(c.running());  // still writing: 1 GiB takes far longer than noticing its start
    const auto start = std::chrono::steady_clock::now();
    c.signal(sig);
    auto rc = c.wait_for(5s);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    INFO(read_file(dir / "err.txt"));
    REQUIRE(rc.has_value());
    CHECK(*rc == 128 + sig);
    CHECK(took < 1000ms);
    CHECK_FALSE(fs::exists(out));
    CHECK(tftest::temp_files(out_dir).empty());
  }
}
