// SPDX-License-Identifier: Apache-2.0
// Helpers for the end-to-end CLI tests: run the `tensorfetch` binary (posix_spawn, no
// shell, output captured), and an independent minimal safetensors reader used to check what
// `get` wrote. Temporary directories, file I/O, sha256 and le64 come from tests/support.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/bytes.hpp"
#include "support/env.hpp"
#include "support/files.hpp"

namespace clitest {

namespace fs = std::filesystem;
using nlohmann::json;

/// What a run of the CLI produced.
struct RunResult {
  int exit_code = -1;  ///< exit status, or 128 + signal number
  std::string out;     ///< stdout
  std::string err;     ///< stderr
};

/// Path of the tensorfetch binary (TENSORFETCH_BIN); fails the test when unset.
std::string tensorfetch_bin();

/// Runs tensorfetch with `args` (argv[1..]), stdin from /dev/null, in directory `cwd`
/// (default: the test's own working directory).
RunResult run(const std::vector<std::string>& args, const std::optional<fs::path>& cwd = std::nullopt);

/// "tensorfetch a b c" for failure messages.
std::string describe(const std::vector<std::string>& args);

/// `tensorfetch cache ls --json` in this process's environment (the cache its
/// TENSORFETCH_CACHE names), parsed; REQUIREs exit 0.
json cache_ls();

/// The reference checkpoints directory, or nullopt (with a WARN) when it is missing.
std::optional<fs::path> reference_dir();

// Shared with every suite (tests/support).
using tftest::le64;
using tftest::make_safetensors;
using tftest::read_file;
using tftest::sha256_hex;
using tftest::temp_files;
using tftest::TempDir;
using tftest::write_file;

/// One tensor of a parsed safetensors file.
struct StTensor {
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;
  std::string bytes;  ///< the raw data bytes
};

/// A safetensors file as read by this test's own minimal reader.
struct StFile {
  std::uint64_t header_size = 0;
  std::uint64_t file_size = 0;
  std::optional<std::map<std::string, std::string>> metadata;
  std::map<std::string, StTensor> tensors;
};

/// Reads and checks a safetensors file independently of the library (prefix, JSON object,
/// contiguous offsets from 0 to the end of the file, sizes of the known dtypes) and, in
/// addition, with `tensorfetch inspect --json` (the strict reader). Checks are REQUIREs.
StFile read_safetensors(const fs::path& path);

/// Size in bits of a dtype name as this test knows it (0 when unknown).
unsigned dtype_bits(std::string_view dtype);

/// Product of a shape (1 for a scalar).
std::uint64_t elements(const std::vector<std::uint64_t>& shape);

/// Names of the regular files directly in `dir`, sorted.
std::vector<std::string> list_dir(const fs::path& dir);

}  // namespace clitest
