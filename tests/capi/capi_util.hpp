// SPDX-License-Identifier: Apache-2.0
// Helpers of the C API's behaviour tests (C++ calling include/tensorfetch/tensorfetch.h, linked
// against the shared library): owners for the API's handles, a CHECK of a returned tf_code that
// prints the error's message, and independent checks of a checkpoint's tensors against
// MANIFEST.json and against the files read here.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "hub_server.hpp"
#include "support/catch_strings.hpp"
#include "support/files.hpp"
#include "support/ranges.hpp"
#include "tensorfetch/tensorfetch.h"

namespace capitest {

namespace fs = std::filesystem;
using tftest::Ranges;

/// Owns a tf_error* (freed on destruction and before each reuse through out()).
class Error {
 public:
  Error() = default;
  ~Error() { tf_error_free(e_); }
  Error(const Error&) = delete;
  Error& operator=(const Error&) = delete;
  /// For a call's `tf_error** err`: frees what it held and returns the slot.
  tf_error** out() {
    tf_error_free(e_);
    e_ = nullptr;
    return &e_;
  }
  /// The held error (NULL when none).
  [[nodiscard]] const tf_error* get() const { return e_; }
  /// Its message ("" when none).
  [[nodiscard]] std::string message() const { return tf_error_message(e_); }

 private:
  tf_error* e_ = nullptr;
};

/// Owns a tf_checkpoint* (tf_close).
using Checkpoint = std::unique_ptr<tf_checkpoint, decltype(&tf_close)>;
/// Owns a tf_plan* (tf_plan_free).
using Plan = std::unique_ptr<tf_plan, decltype(&tf_plan_free)>;
/// Owns a tf_tp_selection* (tf_tp_free).
using TpSelection = std::unique_ptr<tf_tp_selection, decltype(&tf_tp_free)>;

/// CHECK_CODE(call, TF_X, err): the call returned TF_X; on failure the code's name and the
/// error's message are printed.
#define CHECK_CODE(call, want, err)                                                        \
  do {                                                                                     \
    const tf_code got_code_ = (call);                                                      \
    INFO("returned " << tf_code_name(got_code_) << ": " << (err).message());               \
    CHECK(got_code_ == (want));                                                            \
  } while (false)

/// What tf_open returned: its code, the error (if any) and the checkpoint (held only when it
/// handed one out).
struct Opened {
  tf_code code = TF_OK;
  bool has_error = false;  ///< tf_open set its `err`
  std::string message;     ///< the error's message ("" when none)
  Checkpoint ckpt{nullptr, &tf_close};
};

/// Opens `location`, successfully or not.
Opened try_open(const std::string& location, const tf_open_options* options = nullptr);

/// Opens `location`; REQUIREs success.
Checkpoint open_ok(const std::string& location, const tf_open_options* options = nullptr);

/// Options for the test server: its endpoint, a cache of the test's own, no token (whatever
/// the environment holds), no Hugging Face cache to reuse (an empty one at `hf_hub_cache`),
/// online. The strings must outlive the options.
tf_open_options remote_options(const std::string& endpoint, const std::string& cache, const std::string& hf_hub_cache);

/// A test of the C API against the in-process test server: a temporary directory for the
/// served repos and the test's caches, and the server (started by `start`, stopped on
/// destruction).
struct ServerFixture {
  tftest::TempDir tmpdir;
  fs::path tmp = tmpdir.path();
  std::unique_ptr<tensorfetch::testing::HubServer> server;
  std::string endpoint;                              ///< the server's, once started
  std::string hf_none = (tmp / "hf-none").string();  ///< an empty Hugging Face cache

  /// A temporary directory named after `name`; no server yet.
  explicit ServerFixture(const std::string& name) : tmpdir(name) {}
  ServerFixture(const ServerFixture&) = delete;
  ServerFixture& operator=(const ServerFixture&) = delete;
  ~ServerFixture();

  /// Starts the server with `options` (`root`: where its repos are).
  void start(const tensorfetch::testing::Options& options);

  /// The directory of this test's cache named `name`.
  [[nodiscard]] std::string cache(const std::string& name) const { return (tmp / name).string(); }

  /// remote_options for this server, the cache at `cache_dir` (which must outlive the options)
  /// and `token` ("": none).
  [[nodiscard]] tf_open_options options(const std::string& cache_dir, const char* token = "") const;

  /// Opens `location` with this test's cache named `cache_name`, successfully or not.
  [[nodiscard]] Opened try_open(const std::string& location, const std::string& cache_name,
                                const char* token = "") const;

  /// Opens `location` with this test's cache named `cache_name`; REQUIREs success.
  [[nodiscard]] Checkpoint open(const std::string& location, const std::string& cache_name,
                                const char* token = "") const;
};

/// Every tensor of `ckpt` against MANIFEST.json (entries under `prefix`/FILE): dtype, shape,
/// tf_find, data offsets and the sha256 of the bytes tf_tensor_data hands out; the number of
/// tensors per file is the manifest's.
void check_against_manifest(tf_checkpoint* ckpt, const nlohmann::json& manifest, const std::string& prefix);

/// Every tensor's bytes against the checkpoint's own files in `dir`, read here; the tensors
/// tile each file's data section.
void check_against_files(tf_checkpoint* ckpt, const fs::path& dir);

/// The tensors of file `f` of `ckpt` against the file at `path` (e.g. a URL location's
/// original), read here; they tile its data section.
void check_against_file(tf_checkpoint* ckpt, std::size_t f, const fs::path& path);

/// Writes a deterministic checkpoint (2 layers) with tensorfetch-make-checkpoint
/// ($TENSORFETCH_MAKE_CHECKPOINT_BIN) into `dir`.
void make_checkpoint(const fs::path& dir, int hidden, int vocab, int shards);

/// MANIFEST.json of the reference checkpoints ($TENSORFETCH_REFERENCE_DIR); fails the test when
/// there is none.
const nlohmann::json& manifest();

/// The reference checkpoints directory; fails the test when there is none.
fs::path reference();

/// The 8-byte little-endian header length at the start of safetensors file `bytes` (which must
/// hold 8 bytes at least).
std::uint64_t header_length(std::string_view bytes);

/// A tensor's bytes as tf_tensor_data hands them out, and its data offsets; CHECKs both calls.
struct TensorBytes {
  const void* data = nullptr;
  std::size_t length = 0;
  std::uint64_t begin = 0, end = 0;  ///< tf_tensor_data_offsets
};

/// The bytes and offsets of tensor `i` (named `name`) of `ckpt`.
TensorBytes tensor_bytes(tf_checkpoint* ckpt, std::size_t i, const char* name);

/// The served files of a checkpoint, read here: bytes, where data offsets count from, sha256.
struct Source {
  std::vector<std::string> bytes;
  std::vector<std::uint64_t> data_start;  ///< 8 + header size
  std::vector<std::string> sha256;
  [[nodiscard]] std::size_t files() const { return bytes.size(); }
  [[nodiscard]] std::uint64_t size(std::size_t f) const { return bytes[f].size(); }
};

/// Reads the files of `ckpt` from `repo`; CHECKs their sizes against tf_file_size.
Source load_sources(tf_checkpoint* ckpt, const fs::path& repo);

/// The file byte range of tensor `i`.
tftest::ByteRange tensor_range(tf_checkpoint* ckpt, const Source& src, std::size_t i);

/// Per file, the byte ranges of the tensors whose names start with one of `prefixes`.
std::vector<Ranges> wanted_ranges(tf_checkpoint* ckpt, const Source& src, const std::vector<std::string>& prefixes);

/// The transfers of `plan`, per file, as sets. CHECKs what every transfer must be: in file
/// then offset order without overlap, 0 < length <= `chunk`, inside its file; the URL the
/// CDN's (127.0.0.1) naming the file's sha256; If-Match the quoted sha256; no token.
std::vector<Ranges> plan_ranges(const tf_plan* plan, const Source& src, std::uint64_t chunk);

/// The bytes of `slice` ("[a:b]" on dim 0, "[:, a:b]" on dim 1, as tf_tp_slice gives it; NULL:
/// the whole tensor) of a row-major tensor of `shape` whose bytes are `full`.
std::string part_of(std::string_view full, const std::vector<std::uint64_t>& shape, const char* slice);

/// Selects rank `rank` of `world` (tf_select_for_rank, no rules); REQUIREs success.
TpSelection select_rank(tf_checkpoint* ckpt, std::size_t rank, std::size_t world);

}  // namespace capitest
