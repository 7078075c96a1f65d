// SPDX-License-Identifier: Apache-2.0
#include "cli_util.hpp"

#include "support/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

extern char** environ;

namespace clitest {

std::string tensorfetch_bin() {
  return tftest::required_env("TENSORFETCH_BIN");
}

std::string describe(const std::vector<std::string>& args) {
  std::string s = "tensorfetch";
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

json cache_ls() {
  auto r = run({"cache", "ls", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

RunResult run(const std::vector<std::string>& args, const std::optional<fs::path>& cwd) {
  const std::string bin = tensorfetch_bin();
  std::vector<std::string> storage;
  storage.reserve(args.size() + 1);
  storage.push_back(bin);
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  const std::string cwd_text = cwd ? cwd->string() : std::string();
  if (cwd) posix_spawn_file_actions_addchdir_np(&actions, cwd_text.c_str());
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, bin.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    FAIL("posix_spawn " << bin << ": " << std::strerror(rc));
  }

  RunResult result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_count = 2;
  char buf[65536];
  while (open_count > 0) {
    int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

std::optional<fs::path> reference_dir() {
  auto dir = tftest::reference_dir();
  if (!dir) WARN("TENSORFETCH_REFERENCE_DIR is unset or holds no MANIFEST.json; skipping");
  return dir;
}

unsigned dtype_bits(std::string_view d) {
  static const std::map<std::string_view, unsigned> bits = {
      {"BOOL", 8},   {"F4", 4},          {"F6_E2M3", 6},     {"F6_E3M2", 6},     {"U8", 8},
      {"I8", 8},     {"F8_E5M2", 8},     {"F8_E4M3", 8},     {"F8_E8M0", 8},     {"F8_E4M3FNUZ", 8},
      {"F8_E5M2FNUZ", 8}, {"I16", 16},   {"U16", 16},        {"F16", 16},        {"BF16", 16},
      {"I32", 32},   {"U32", 32},        {"F32", 32},        {"C64", 64},        {"F64", 64},
      {"I64", 64},   {"U64", 64},
  };
  auto it = bits.find(d);
  return it == bits.end() ? 0 : it->second;
}

std::uint64_t elements(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

StFile read_safetensors(const fs::path& path) {
  INFO("reading " << path);
  const std::string bytes = read_file(path);
  StFile f;
  f.file_size = bytes.size();
  REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  REQUIRE(n <= 100'000'000);
  REQUIRE(8 + n <= bytes.size());
  f.header_size = n;
  // The writer pads the header with spaces to a multiple of 8.
  CHECK(n % 8 == 0);
  const std::string header = bytes.substr(8, n);
  REQUIRE(!header.empty());
  REQUIRE(header.front() == '{');
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(header));
  REQUIRE(doc.is_object());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  const std::uint64_t data_size = bytes.size() - 8 - n;
  for (const auto& [key, value] : doc.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;
      REQUIRE(value.is_object());
      std::map<std::string, std::string> md;
      for (const auto& [k, v] : value.items()) {
        REQUIRE(v.is_string());
        md[k] = v.get<std::string>();
      }
      f.metadata = md;
      continue;
    }
    INFO("tensor " << key);
    REQUIRE(value.is_object());
    StTensor t;
    REQUIRE(value.at("dtype").is_string());
    t.dtype = value.at("dtype").get<std::string>();
    REQUIRE(dtype_bits(t.dtype) != 0);
    for (const auto& d : value.at("shape")) {
      REQUIRE(d.is_number_unsigned());
      t.shape.push_back(d.get<std::uint64_t>());
    }
    const auto& off = value.at("data_offsets");
    REQUIRE(off.size() == 2);
    REQUIRE(off[0].is_number_unsigned());
    REQUIRE(off[1].is_number_unsigned());
    t.begin = off[0].get<std::uint64_t>();
    t.end = off[1].get<std::uint64_t>();
    REQUIRE(t.begin <= t.end);
    REQUIRE(t.end <= data_size);
    REQUIRE(elements(t.shape) * dtype_bits(t.dtype) == 8 * (t.end - t.begin));
    t.bytes = bytes.substr(8 + n + t.begin, t.end - t.begin);
    ranges.emplace_back(t.begin, t.end);
    REQUIRE(f.tensors.emplace(key, std::move(t)).second);
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t expected = 0;
  for (const auto& [b, e] : ranges) {
    REQUIRE(b == expected);
    expected = e;
  }
  REQUIRE(expected == data_size);

  // And tensorfetch's own strict reader must accept it too.
  auto inspected = run({"inspect", "--json", path.string()});
  INFO("inspect of the written file: " << inspected.err);
  REQUIRE(inspected.exit_code == 0);
  REQUIRE(json::parse(inspected.out).at("tensors").size() == f.tensors.size());
  return f;
}

std::vector<std::string> list_dir(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace clitest
