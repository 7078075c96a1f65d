// SPDX-License-Identifier: Apache-2.0
// The C API (include/tensorfetch/tensorfetch.h) on local checkpoints, called from C++ and linked
// against the shared library: stable codes, the reference checkpoints against MANIFEST.json, a
// generated sharded checkpoint against its files, what fetching, planning and publishing do for
// a local checkpoint, save_files, every error path of tf_open, and tf_cancel_token.
// (tests/capi/test_capi_smoke.c proves the header is C and links from C.)
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "capi_util.hpp"
#include "support/bytes.hpp"
#include "support/files.hpp"

using namespace capitest;

namespace {

// The fetch patterns the tests use, as the C API takes them.
const char* const kMlp[] = {"model.layers.*.mlp.*", "lm_head.weight"};
const char* const kMissing[] = {"model.layers.0.*", "nope.*"};
const char* const kWithNull[] = {"lm_head.weight", nullptr};

// A generated sharded checkpoint (hidden 64, vocab 256, 3 shards) in a directory of its own.
struct Generated {
  tftest::TempDir tmp{"tf-capi-local"};
  fs::path dir = tmp / "gen";
  Generated() { make_checkpoint(dir, 64, 256, 3); }
};

int count_progress(const tf_progress*, void* user) {
  ++*static_cast<int*>(user);
  return 0;
}

// Opens `location`, expecting `want`: the checkpoint is reset to NULL, the error carries the
// code, and its message mentions `mention`.
void expect_open_error(const char* location, const tf_open_options* options, tf_code want, const std::string& mention) {
  INFO("tf_open " << (location ? location : "(NULL)"));
  tf_checkpoint* ckpt = reinterpret_cast<tf_checkpoint*>(&ckpt);  // must be reset to NULL
  Error err;
  CHECK_CODE(tf_open(location, options, &ckpt, err.out()), want, err);
  CHECK(ckpt == nullptr);
  REQUIRE(err.get() != nullptr);
  CHECK(tf_error_code(err.get()) == want);
  CHECK_THAT(err.message(), Catch::Contains(mention));
}

// A safetensors file with this header (padded to 8 bytes with spaces) and `data_len` zero bytes.
fs::path crafted(const fs::path& dir, const std::string& name, std::string header, std::size_t data_len) {
  while (header.size() % 8 != 0) header.push_back(' ');
  const fs::path path = dir / name;
  tftest::write_file(path, tftest::make_safetensors(header, std::string(data_len, '\0')));
  return path;
}

}  // namespace

TEST_CASE("C API: codes keep their numbers, names and exit codes; NULL handles are safe; the version is the project's",
          "[capi][local]") {
  struct Row {
    tf_code code;
    int value;
    const char* name;
    int exit_code;
  };
  const Row rows[] = {
      {TF_OK, 0, "Ok", 0},
      {TF_ERR_FILE_TOO_SMALL, 1, "FileTooSmall", 2},
      {TF_ERR_HEADER_TOO_LARGE, 2, "HeaderTooLarge", 2},
      {TF_ERR_HEADER_START, 3, "HeaderStart", 2},
      {TF_ERR_HEADER_JSON, 4, "HeaderJson", 2},
      {TF_ERR_DUPLICATE_KEY, 5, "DuplicateKey", 2},
      {TF_ERR_INVALID_METADATA, 6, "InvalidMetadata", 2},
      {TF_ERR_INVALID_ENTRY, 7, "InvalidEntry", 2},
      {TF_ERR_INVALID_DTYPE, 8, "InvalidDtype", 2},
      {TF_ERR_INVALID_SHAPE, 9, "InvalidShape", 2},
      {TF_ERR_INVALID_OFFSETS, 10, "InvalidOffsets", 2},
      {TF_ERR_SIZE_MISMATCH, 11, "SizeMismatch", 2},
      {TF_ERR_OVERFLOW, 12, "Overflow", 2},
      {TF_ERR_HOLE_OR_OVERLAP, 13, "HoleOrOverlap", 2},
      {TF_ERR_DATA_SIZE_MISMATCH, 14, "DataSizeMismatch", 2},
      {TF_ERR_INVALID_INDEX, 15, "InvalidIndex", 2},
      {TF_ERR_UNSAFE_SHARD_NAME, 16, "UnsafeShardName", 2},
      {TF_ERR_INDEX_MISMATCH, 17, "IndexMismatch", 2},
      {TF_ERR_INVALID_ARGUMENT, 18, "InvalidArgument", 1},
      {TF_ERR_SLICE_OUT_OF_RANGE, 19, "SliceOutOfRange", 1},
      {TF_ERR_SLICE_MISALIGNED, 20, "SliceMisaligned", 1},
      {TF_ERR_NOT_FOUND, 21, "NotFound", 1},
      {TF_ERR_IO, 22, "Io", 1},
      {TF_ERR_CANCELLED, 23, "Cancelled", 1},
      {TF_ERR_NOT_FETCHED, 24, "NotFetched", 1},
      {TF_ERR_NETWORK, 25, "Network", 3},
      {TF_ERR_REMOTE_NOT_FOUND, 26, "RemoteNotFound", 3},
      {TF_ERR_UNAUTHORIZED, 27, "Unauthorized", 3},
      {TF_ERR_RATE_LIMITED, 28, "RateLimited", 3},
      {TF_ERR_BAD_RESPONSE, 29, "BadResponse", 3},
      {TF_ERR_INTEGRITY, 30, "Integrity", 4},
      {TF_ERR_BUSY, 31, "Busy", 1},
      {TF_ERR_UNSPLITTABLE, 32, "Unsplittable", 1},
      {TF_ERR_INTERNAL, 100, "Internal", 1},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    CHECK(static_cast<int>(row.code) == row.value);
    CHECK(std::string(tf_code_name(row.code)) == row.name);
    CHECK(tf_code_exit_code(row.code) == row.exit_code);
  }
  CHECK(std::string(tf_code_name(static_cast<tf_code>(77))) == "Unknown");
  CHECK(tf_code_exit_code(static_cast<tf_code>(77)) == 1);
  CHECK(tf_error_code(nullptr) == TF_OK);
  CHECK(std::string(tf_error_message(nullptr)).empty());
  tf_error_free(nullptr);
  tf_close(nullptr);
  CHECK(std::string(tf_version()) == EXPECTED_VERSION);
}

TEST_CASE("C API: the reference checkpoints (file, index, directory) open locally and every tensor matches MANIFEST.json",
          "[capi][local]") {
  struct Case {
    const char* location;  // under the reference dir
    const char* prefix;    // of the files in MANIFEST.json
    std::size_t files;
  };
  const Case cases[] = {
      {"llama-tiny-single", "llama-tiny-single", 1},
      {"llama-tiny-single/model.safetensors", "llama-tiny-single", 1},
      {"llama-tiny-sharded", "llama-tiny-sharded", 3},
      {"llama-tiny-sharded/model.safetensors.index.json", "llama-tiny-sharded", 3},
      {"dtypes/model.safetensors", "dtypes", 1},
  };
  for (const auto& c : cases) {
    INFO(c.location);
    Checkpoint ckpt = open_ok((reference() / c.location).string());
    CHECK(tf_is_remote(ckpt.get()) == 0);
    CHECK(tf_file_count(ckpt.get()) == c.files);
    check_against_manifest(ckpt.get(), manifest(), c.prefix);
  }
}

TEST_CASE("C API: a generated sharded checkpoint lists its tensors in natural order with bytes equal to its files",
          "[capi][local]") {
  Generated g;
  Checkpoint ckpt = open_ok(g.dir.string());
  CHECK(tf_file_count(ckpt.get()) == 3);
  CHECK(tf_tensor_count(ckpt.get()) == 2 * 9 + 3);
  CHECK(std::string(tf_tensor_name(ckpt.get(), 0)) == "lm_head.weight");  // natural name order
  std::size_t index = 0;
  REQUIRE(tf_find(ckpt.get(), "model.layers.1.mlp.up_proj.weight", &index) == 1);
  CHECK(std::string(tf_tensor_name(ckpt.get(), index)) == "model.layers.1.mlp.up_proj.weight");
  CHECK(std::string(tf_tensor_dtype(ckpt.get(), index)) == "BF16");
  check_against_files(ckpt.get(), g.dir);
}

TEST_CASE("C API: tf_fetch of a local checkpoint transfers nothing but checks its patterns and its options' size",
          "[capi][local]") {
  Generated g;
  Checkpoint ckpt = open_ok(g.dir.string());
  Error err;
  int progress_calls = 0;
  tf_fetch_options options;
  tf_fetch_options_init(&options);
  options.progress = count_progress;
  options.user = &progress_calls;
  tf_fetch_stats stats;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch(ckpt.get(), kMlp, 2, &options, &stats, err.out()), TF_OK, err);
  CHECK(err.get() == nullptr);
  CHECK(stats.size == sizeof stats);
  CHECK(stats.bytes_transferred == 0);
  CHECK(stats.requests == 0);
  CHECK_CODE(tf_fetch(ckpt.get(), nullptr, 0, nullptr, nullptr, err.out()), TF_OK, err);
  CHECK_CODE(tf_fetch_all(ckpt.get(), nullptr, nullptr, err.out()), TF_OK, err);

  // A pattern that matches nothing is named; a NULL pattern is named by its index.
  CHECK_CODE(tf_fetch(ckpt.get(), kMissing, 2, nullptr, nullptr, err.out()), TF_ERR_NOT_FOUND, err);
  CHECK_THAT(err.message(), Catch::Contains("nope.*"));
  CHECK_CODE(tf_fetch(ckpt.get(), kWithNull, 2, nullptr, nullptr, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_THAT(err.message(), Catch::Contains("patterns[1]"));
  CHECK(tf_fetch(ckpt.get(), nullptr, 1, nullptr, nullptr, nullptr) == TF_ERR_INVALID_ARGUMENT);

  // Options and stats whose size was never set are refused, naming the init function.
  options.size = 0;
  CHECK_CODE(tf_fetch(ckpt.get(), kMlp, 1, &options, nullptr, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_THAT(err.message(), Catch::Contains("tf_fetch_options_init"));
  stats.size = 0;
  CHECK_CODE(tf_fetch_all(ckpt.get(), nullptr, &stats, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_THAT(err.message(), Catch::Contains("tf_fetch_stats_init"));
}

TEST_CASE("C API: a tf_cancel while no fetch runs stops the next fetch (Cancelled), and only that one", "[capi][local]") {
  Generated g;
  Checkpoint ckpt = open_ok(g.dir.string());
  Error err;
  tf_cancel(ckpt.get());
  CHECK_CODE(tf_fetch(ckpt.get(), kMlp, 1, nullptr, nullptr, err.out()), TF_ERR_CANCELLED, err);
  CHECK_THAT(err.message(), Catch::Contains("cancel"));
  CHECK_CODE(tf_fetch(ckpt.get(), kMlp, 1, nullptr, nullptr, err.out()), TF_OK, err);
}

TEST_CASE("C API: out-of-range indexes, unknown names and NULL handles give NULL, 0 or a code, and clear the outputs",
          "[capi][local]") {
  Generated g;
  Checkpoint ckpt = open_ok(g.dir.string());
  tf_checkpoint* c = ckpt.get();
  const std::size_t i = tf_tensor_count(c);
  CHECK(tf_tensor_name(c, i) == nullptr);
  CHECK(tf_tensor_dtype(c, i) == nullptr);
  std::size_t ndim = 7;
  CHECK(tf_tensor_shape(c, i, &ndim) == nullptr);
  CHECK(ndim == 0);
  std::uint64_t b = 1, e = 1;
  CHECK(tf_tensor_data_offsets(c, i, &b, &e) == TF_ERR_INVALID_ARGUMENT);
  CHECK(b == 0);
  CHECK(e == 0);
  CHECK(tf_tensor_file(c, i) == nullptr);
  CHECK(tf_file_path(c, tf_file_count(c)) == nullptr);
  CHECK(tf_file_size(c, tf_file_count(c)) == 0);
  std::size_t index = 0;
  CHECK(tf_find(c, "model.layers.9.mlp.up_proj.weight", &index) == 0);
  CHECK(tf_find(c, nullptr, &index) == 0);
  const void* data = &ndim;
  std::size_t len = 5;
  CHECK(tf_tensor_data(c, "no.such.tensor", &data, &len) == TF_ERR_NOT_FOUND);
  CHECK(data == nullptr);
  CHECK(len == 0);
  CHECK(tf_tensor_data(c, nullptr, &data, &len) == TF_ERR_INVALID_ARGUMENT);
  CHECK(tf_tensor_count(nullptr) == 0);
  CHECK(tf_file_count(nullptr) == 0);
  CHECK(tf_tensor_name(nullptr, 0) == nullptr);
}

TEST_CASE("C API: a local checkpoint has no commit, plans no transfer and publishes nothing; the argument checks",
          "[capi][local]") {
  Generated g;
  Checkpoint ckpt = open_ok(g.dir.string());
  tf_checkpoint* c = ckpt.get();
  Error err;
  CHECK(tf_commit(c) == nullptr);
  CHECK(tf_commit(nullptr) == nullptr);

  tf_plan* plan = reinterpret_cast<tf_plan*>(&plan);  // must be set
  CHECK_CODE(tf_plan_fetch(c, kMlp, 2, nullptr, &plan, err.out()), TF_OK, err);
  REQUIRE(plan != nullptr);
  CHECK(tf_plan_count(plan) == 0);
  CHECK(tf_plan_url(plan, 0) == nullptr);
  CHECK(tf_plan_if_match(plan, 0) == nullptr);
  CHECK(tf_plan_length(plan, 0) == 0);
  tf_plan_free(plan);
  plan = reinterpret_cast<tf_plan*>(&plan);
  CHECK_CODE(tf_plan_fetch(c, kMissing, 2, nullptr, &plan, err.out()), TF_ERR_NOT_FOUND, err);
  CHECK(plan == nullptr);
  CHECK_THAT(err.message(), Catch::Contains("nope.*"));
  CHECK_CODE(tf_plan_fetch(c, kWithNull, 2, nullptr, &plan, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_THAT(err.message(), Catch::Contains("tf_plan_fetch: patterns[1]"));
  CHECK_CODE(tf_plan_fetch(c, kMlp, 1, nullptr, nullptr, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK(tf_plan_fetch(nullptr, kMlp, 1, nullptr, &plan, nullptr) == TF_ERR_INVALID_ARGUMENT);
  CHECK(plan == nullptr);
  tf_fetch_options options;
  tf_fetch_options_init(&options);
  options.size = 0;
  CHECK_CODE(tf_plan_fetch(c, kMlp, 1, &options, &plan, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_THAT(err.message(), Catch::Contains("tf_fetch_options_init"));
  tf_fetch_options_init(&options);
  CHECK(options.sink == nullptr);
  CHECK(options.progress == nullptr);
  CHECK(options.user == nullptr);
  CHECK(tf_plan_count(nullptr) == 0);
  CHECK(tf_plan_url(nullptr, 0) == nullptr);
  CHECK(tf_plan_send_token(nullptr, 0) == 0);
  CHECK(tf_plan_expires_at(nullptr, 0) == 0);
  tf_plan_free(nullptr);

  std::size_t published = 99;
  CHECK_CODE(tf_publish_to_hf_cache(c, &published, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK(published == 0);
  CHECK_THAT(err.message(), Catch::Contains("Hub"));
  CHECK_CODE(tf_publish_to_hf_cache(nullptr, nullptr, err.out()), TF_ERR_INVALID_ARGUMENT, err);
}

TEST_CASE("C API: tf_save_files copies a local checkpoint (shards and index) and the copy opens with the same tensors",
          "[capi][local]") {
  Generated g;
  Checkpoint ckpt = open_ok(g.dir.string());
  const fs::path saved = g.tmp / "saved";
  Error err;
  CHECK_CODE(tf_save_files(ckpt.get(), saved.c_str(), err.out()), TF_OK, err);
  for (std::size_t f = 0; f < tf_file_count(ckpt.get()); ++f) {
    INFO(tf_file_path(ckpt.get(), f));
    CHECK(tftest::read_file(saved / tf_file_path(ckpt.get(), f)) == tftest::read_file(g.dir / tf_file_path(ckpt.get(), f)));
  }
  CHECK(tftest::read_file(saved / "model.safetensors.index.json") ==
        tftest::read_file(g.dir / "model.safetensors.index.json"));
  Checkpoint copy = open_ok(saved.string());
  CHECK(tf_tensor_count(copy.get()) == tf_tensor_count(ckpt.get()));
  check_against_files(copy.get(), saved);
}

TEST_CASE("C API: tf_open errors: missing paths NotFound, invalid files their format code, bad arguments InvalidArgument; "
          "each message names the path or argument",
          "[capi][local]") {
  tftest::TempDir tmp("tf-capi-errors");
  const std::string missing = (tmp / "no-such-dir/model.safetensors").string();
  const fs::path empty_dir = tmp / "empty";
  const fs::path tiny = tmp / "tiny.safetensors";

  // A missing file or a directory without a checkpoint: NotFound (exit 1), naming the path.
  expect_open_error(missing.c_str(), nullptr, TF_ERR_NOT_FOUND, missing);
  CHECK(tf_code_exit_code(TF_ERR_NOT_FOUND) == 1);
  tf_checkpoint* ckpt = nullptr;
  CHECK(tf_open(missing.c_str(), nullptr, &ckpt, nullptr) == TF_ERR_NOT_FOUND);  // err may be NULL
  CHECK(ckpt == nullptr);
  fs::create_directories(empty_dir);
  expect_open_error(empty_dir.c_str(), nullptr, TF_ERR_NOT_FOUND, empty_dir.string());

  // Invalid files: format codes (exit 2), naming the file.
  tftest::write_file(tiny, "abc");
  expect_open_error(tiny.c_str(), nullptr, TF_ERR_FILE_TOO_SMALL, tiny.string());
  const fs::path leading = crafted(tmp.path(), "leading-space.safetensors", " {}", 0);
  expect_open_error(leading.c_str(), nullptr, TF_ERR_HEADER_START, leading.string());
  const fs::path hole =
      crafted(tmp.path(), "hole.safetensors", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2);
  expect_open_error(hole.c_str(), nullptr, TF_ERR_HOLE_OR_OVERLAP, hole.string());
  // JSON nested past the reference's 128 levels (here 100,000: a 200 KB header that once
  // overflowed the parser's stack): HeaderJson, naming the file and the limit, never a crash.
  const fs::path deep = crafted(tmp.path(), "deep.safetensors",
                                R"({"__metadata__":)" + std::string(100'000, '[') + std::string(100'000, ']') + "}", 0);
  expect_open_error(deep.c_str(), nullptr, TF_ERR_HEADER_JSON, deep.string());
  expect_open_error(deep.c_str(), nullptr, TF_ERR_HEADER_JSON, "deeper than 128 levels");

  // Bad arguments.
  expect_open_error(nullptr, nullptr, TF_ERR_INVALID_ARGUMENT, "location");
  Error err;
  CHECK(tf_open(missing.c_str(), nullptr, nullptr, err.out()) == TF_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err.message(), Catch::Contains("out"));
  tf_open_options options;
  std::memset(&options, 0, sizeof options);  // size never set
  expect_open_error(missing.c_str(), &options, TF_ERR_INVALID_ARGUMENT, "tf_open_options_init");
  tf_open_options_init(&options);
  CHECK(options.size == sizeof options);
  CHECK(options.offline == TF_OFFLINE_FROM_ENV);
  CHECK(options.cache_dir == nullptr);
  CHECK(options.token == nullptr);
  CHECK(options.connections == 0);
  options.offline = 7;
  expect_open_error(missing.c_str(), &options, TF_ERR_INVALID_ARGUMENT, "offline");
  tf_open_options_init(&options);
  CHECK(options.shared_cache == TF_SHARED_CACHE_FROM_ENV);
  options.shared_cache = 2;
  expect_open_error(missing.c_str(), &options, TF_ERR_INVALID_ARGUMENT, "shared_cache");
  tf_open_options_init(&options);
  CHECK(options.warm_connections == 0);
  options.warm_connections = 2;
  expect_open_error(missing.c_str(), &options, TF_ERR_INVALID_ARGUMENT, "warm_connections");
  // A caller built against an older header (its struct ends before warm_connections): the
  // field is not read, whatever lies beyond the size it set.
  options.size = offsetof(tf_open_options, warm_connections);
  expect_open_error(missing.c_str(), &options, TF_ERR_NOT_FOUND, missing);
  // A local file: nothing to warm; it opens as without.
  tf_open_options_init(&options);
  options.warm_connections = 1;
  Checkpoint local = open_ok((reference() / "dtypes" / "model.safetensors").string(), &options);
  CHECK(tf_is_remote(local.get()) == 0);
  // max_rate (added after notice_user): 0 is no cap; below 1 KiB/s is refused before
  // anything is opened, naming the field; a caller whose struct ends before it is not read.
  tf_open_options_init(&options);
  CHECK(options.max_rate == 0);
  options.max_rate = 1023;
  expect_open_error(missing.c_str(), &options, TF_ERR_INVALID_ARGUMENT, "max_rate");
  options.size = offsetof(tf_open_options, max_rate);
  expect_open_error(missing.c_str(), &options, TF_ERR_NOT_FOUND, missing);
  tf_open_options_init(&options);
  options.max_rate = 1024;
  Checkpoint capped = open_ok((reference() / "dtypes" / "model.safetensors").string(), &options);
  CHECK(tf_is_remote(capped.get()) == 0);
}

TEST_CASE("C API: a tf_cancel_token on its own, NULL-safe; tf_open with a cancelled token is Cancelled (exit 1) until reset",
          "[capi][local][cancel]") {
  const std::string single = (reference() / "llama-tiny-single").string();
  tf_cancel_token* token = tf_cancel_token_new();
  REQUIRE(token != nullptr);
  CHECK(tf_cancel_token_cancelled(token) == 0);
  CHECK(tf_cancel_token_cancelled(nullptr) == 0);
  tf_cancel_token_cancel(nullptr);
  tf_cancel_token_reset(nullptr);
  tf_cancel_token_free(nullptr);
  tf_open_options options;
  tf_open_options_init(&options);
  CHECK(options.cancel == nullptr);
  options.cancel = token;
  open_ok(single, &options);
  tf_cancel_token_cancel(token);
  CHECK(tf_cancel_token_cancelled(token) == 1);
  tf_checkpoint* ckpt = nullptr;
  Error err;
  CHECK_CODE(tf_open(single.c_str(), &options, &ckpt, err.out()), TF_ERR_CANCELLED, err);
  CHECK(ckpt == nullptr);
  CHECK(tf_code_exit_code(tf_error_code(err.get())) == 1);
  tf_cancel_token_reset(token);
  CHECK(tf_cancel_token_cancelled(token) == 0);
  open_ok(single, &options);
  tf_cancel_token_free(token);
}

TEST_CASE("C API: tf_select_for_rank: each rank's tensors with their sliced shapes and bytes; the ranks together are "
          "the checkpoint; rules, errors and NULL handles",
          "[capi][local][tp]") {
  Checkpoint ckpt = open_ok((reference() / "llama-tiny-sharded").string());
  tf_checkpoint* c = ckpt.get();
  Error err;
  constexpr std::size_t kWorld = 2;
  // Per tensor, the bytes the ranks hold, put back together along the split dimension.
  for (std::size_t rank = 0; rank < kWorld; ++rank) {
    INFO("rank " << rank);
    TpSelection sel = select_rank(c, rank, kWorld);
    CHECK(tf_tp_count(sel.get()) == tf_tensor_count(c));  // dense llama: every tensor, some sliced
    CHECK_THAT(tf_tp_rule(sel.get()), Catch::Contains("model_type=llama"));
    for (std::size_t i = 0; i < tf_tp_count(sel.get()); ++i) {
      const char* name = tf_tp_name(sel.get(), i);
      INFO(name);
      std::size_t index = 0;
      REQUIRE(tf_find(c, name, &index));
      const TensorBytes whole = tensor_bytes(c, index, name);
      std::size_t ndim = 0, part_ndim = 0;
      const uint64_t* full_dims = tf_tensor_shape(c, index, &ndim);
      const std::vector<std::uint64_t> full_shape(full_dims, full_dims + ndim);
      const std::uint64_t* dims = tf_tp_shape(sel.get(), i, &part_ndim);
      CHECK(part_ndim == ndim);
      const std::string_view full(static_cast<const char*>(whole.data), whole.length);
      const std::string want = part_of(full, full_shape, tf_tp_slice(sel.get(), i));
      std::string got(tf_tp_nbytes(sel.get(), i), '\0');
      CHECK(got.size() == want.size());
      CHECK_CODE(tf_tp_read(c, sel.get(), i, got.data(), got.size(), err.out()), TF_OK, err);
      CHECK(got == want);
      std::uint64_t elems = 1;
      for (std::size_t d = 0; d < part_ndim; ++d) elems *= dims[d];
      CHECK(elems * 2 == got.size());  // BF16
    }
  }
  TpSelection r0 = select_rank(c, 0, kWorld);
  std::size_t q = 0;
  while (q < tf_tp_count(r0.get()) && std::string(tf_tp_name(r0.get(), q)) != "model.layers.0.self_attn.o_proj.weight") ++q;
  REQUIRE(q < tf_tp_count(r0.get()));
  CHECK(std::string(tf_tp_slice(r0.get(), q)) == "[:, 0:32]");  // row-parallel: dim 1
  std::size_t nd = 0;
  const std::uint64_t* qd = tf_tp_shape(r0.get(), q, &nd);
  CHECK(std::vector<std::uint64_t>(qd, qd + nd) == std::vector<std::uint64_t>{64, 32});

  // Rules decide first; expert_parallel is taken (a dense model has no experts).
  tf_tp_selection* sel = nullptr;
  CHECK_CODE(tf_select_for_rank(c, 1, kWorld, R"({"*": "replicate"})", 1, &sel, err.out()), TF_OK, err);
  TpSelection all(sel, &tf_tp_free);
  for (std::size_t i = 0; i < tf_tp_count(all.get()); ++i) CHECK(tf_tp_slice(all.get(), i) == nullptr);
  CHECK_THAT(tf_tp_rule(all.get()), Catch::Contains("experts=expert-parallel"));

  // Errors.
  sel = reinterpret_cast<tf_tp_selection*>(&sel);
  CHECK_CODE(tf_select_for_rank(c, 2, kWorld, nullptr, 0, &sel, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK(sel == nullptr);
  CHECK_THAT(err.message(), Catch::Contains("rank 2 of 2"));
  CHECK_CODE(tf_select_for_rank(c, 0, kWorld, R"({"x.weight": "sideways"})", 0, &sel, err.out()),
             TF_ERR_INVALID_ARGUMENT, err);
  CHECK_THAT(err.message(), Catch::Contains("x.weight"));
  CHECK_CODE(tf_select_for_rank(c, 0, kWorld, R"({"*.q_proj.weight": {"dim": 5}})", 0, &sel, err.out()),
             TF_ERR_UNSPLITTABLE, err);
  CHECK_THAT(err.message(), Catch::Contains("q_proj.weight"));
  CHECK_CODE(tf_select_for_rank(nullptr, 0, kWorld, nullptr, 0, &sel, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_CODE(tf_select_for_rank(c, 0, kWorld, nullptr, 0, nullptr, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  // A file without a config.json beside it: Unsplittable naming a tensor.
  Checkpoint lone = open_ok((reference() / "dtypes" / "model.safetensors").string());
  CHECK_CODE(tf_select_for_rank(lone.get(), 0, kWorld, nullptr, 0, &sel, err.out()), TF_ERR_UNSPLITTABLE, err);
  // A selection is used with its own checkpoint only; indexes out of range; NULL handles.
  Checkpoint other = open_ok((reference() / "llama-tiny-sharded").string());
  char byte = 0;
  CHECK_CODE(tf_tp_read(other.get(), r0.get(), 0, &byte, 1, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_THAT(err.message(), Catch::Contains("another checkpoint"));
  CHECK_CODE(tf_tp_fetch(other.get(), r0.get(), nullptr, nullptr, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_CODE(tf_tp_read(c, r0.get(), tf_tp_count(r0.get()), &byte, 1, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_CODE(tf_tp_read(c, r0.get(), q, &byte, 1, err.out()), TF_ERR_INVALID_ARGUMENT, err);  // wrong size
  CHECK_CODE(tf_tp_fetch(c, r0.get(), nullptr, nullptr, err.out()), TF_OK, err);  // local: nothing to move
  CHECK(tf_tp_name(r0.get(), 1u << 30) == nullptr);
  CHECK(tf_tp_slice(r0.get(), 1u << 30) == nullptr);
  CHECK(tf_tp_nbytes(r0.get(), 1u << 30) == 0);
  nd = 7;
  CHECK(tf_tp_shape(r0.get(), 1u << 30, &nd) == nullptr);
  CHECK(nd == 0);
  CHECK(tf_tp_count(nullptr) == 0);
  CHECK(std::string(tf_tp_rule(nullptr)).empty());
  tf_tp_free(nullptr);
}
