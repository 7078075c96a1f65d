/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C API (include/tensorfetch/tensorfetch.h), driven from C and linked against the shared
 * library, as a download manager or loader would use it.
 *
 *   test_capi local    reference checkpoints (every tensor's dtype, shape and sha256 against
 *                      MANIFEST.json), a generated sharded checkpoint (bytes against the files
 *                      read here with stdio), save_files, and every error path of the API.
 *   test_capi remote   the Hub-like test server as a process: open over HTTP, NOT_FETCHED
 *                      before a fetch, fetch by glob with a progress callback, cancel from the
 *                      callback and from another thread, fetch_all, save_files, remote errors.
 *
 * Environment (set by tests/capi/meson.build): TENSORFETCH_REFERENCE_DIR,
 * TENSORFETCH_MAKE_CHECKPOINT_BIN, TENSORFETCH_TEST_SERVER_BIN.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "tensorfetch/tensorfetch.h"

extern char** environ;

/* ---- checks ------------------------------------------------------------------------------ */

static int g_checks = 0;
static int g_failures = 0;

static int check_(int ok, const char* what, const char* file, int line) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, what);
  }
  return ok;
}

#define CHECK(cond) check_((cond) ? 1 : 0, #cond, __FILE__, __LINE__)
#define REQUIRE(cond)                                   \
  do {                                                  \
    if (!CHECK(cond)) {                                 \
      fprintf(stderr, "a required check failed: stop\n"); \
      exit(1);                                          \
    }                                                   \
  } while (0)

/* CHECK that a call returned `want`; prints the error's message otherwise. */
#define CHECK_CODE(got, want, err)                                                              \
  do {                                                                                          \
    tf_code got_ = (got);                                                                       \
    if (!CHECK(got_ == (want))) {                                                               \
      fprintf(stderr, "  got %s (%d): %s\n", tf_code_name(got_), (int)got_, tf_error_message(err)); \
    }                                                                                           \
  } while (0)

/* ---- helpers ----------------------------------------------------------------------------- */

static char g_tmp[256];
static pid_t g_server = -1;

static void cleanup(void) {
  if (g_server > 0) {
    kill(g_server, SIGTERM);
    waitpid(g_server, NULL, 0);
    g_server = -1;
  }
  if (g_tmp[0] != '\0') {
    char* argv[] = {"rm", "-rf", g_tmp, NULL};
    pid_t pid;
    if (posix_spawnp(&pid, "rm", NULL, NULL, argv, environ) == 0) waitpid(pid, NULL, 0);
  }
}

static char* path_join(const char* a, const char* b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char* p = malloc(n);
  REQUIRE(p != NULL);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

static const char* env_or_die(const char* name) {
  const char* v = getenv(name);
  if (v == NULL || *v == '\0') {
    fprintf(stderr, "%s is not set (run through meson test)\n", name);
    exit(1);
  }
  return v;
}

/* The whole file, NUL-terminated; NULL if it cannot be read. */
static char* read_file(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  char* data;
  long size;
  if (f == NULL) return NULL;
  if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return NULL;
  }
  data = malloc((size_t)size + 1);
  REQUIRE(data != NULL);
  if (fread(data, 1, (size_t)size, f) != (size_t)size) {
    fclose(f);
    free(data);
    return NULL;
  }
  fclose(f);
  data[size] = '\0';
  if (len != NULL) *len = (size_t)size;
  return data;
}

static void write_file(const char* path, const void* data, size_t len) {
  FILE* f = fopen(path, "wb");
  REQUIRE(f != NULL);
  REQUIRE(fwrite(data, 1, len, f) == len);
  REQUIRE(fclose(f) == 0);
}

static void copy_file(const char* from, const char* to) {
  size_t len = 0;
  char* data = read_file(from, &len);
  REQUIRE(data != NULL);
  write_file(to, data, len);
  free(data);
}

static int files_equal(const char* a, const char* b) {
  size_t la = 0, lb = 0;
  char* da = read_file(a, &la);
  char* db = read_file(b, &lb);
  int same = da != NULL && db != NULL && la == lb && memcmp(da, db, la) == 0;
  free(da);
  free(db);
  return same;
}

static void make_dirs(const char* path) {
  char buf[1024];
  size_t i;
  snprintf(buf, sizeof buf, "%s", path);
  for (i = 1; buf[i] != '\0'; ++i) {
    if (buf[i] == '/') {
      buf[i] = '\0';
      mkdir(buf, 0755);
      buf[i] = '/';
    }
  }
  REQUIRE(mkdir(buf, 0755) == 0 || errno == EEXIST);
}

static void sha256_hex(const void* data, size_t len, char out[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  unsigned int i;
  REQUIRE(EVP_Digest(data, len, md, &md_len, EVP_sha256(), NULL) == 1);
  for (i = 0; i < md_len && i < 32; ++i) snprintf(out + 2 * i, 3, "%02x", md[i]);
  out[64] = '\0';
}

/* Runs argv[0] with stdout to /dev/null; returns its exit status (-1 if it did not exit). */
static int run(char* const argv[]) {
  posix_spawn_file_actions_t fa;
  pid_t pid;
  int status = 0;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  REQUIRE(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Writes a deterministic sharded checkpoint with tensorfetch-make-checkpoint. */
static void make_checkpoint(const char* dir, const char* hidden, const char* vocab, const char* shards) {
  char* argv[] = {(char*)env_or_die("TENSORFETCH_MAKE_CHECKPOINT_BIN"), "-o", (char*)dir, "--layers", "2",
                  "--hidden", (char*)hidden, "--vocab", (char*)vocab, "--shards", (char*)shards, NULL};
  REQUIRE(run(argv) == 0);
}

static int contains(const char* haystack, const char* needle) {
  return haystack != NULL && needle != NULL && strstr(haystack, needle) != NULL;
}

/* ---- MANIFEST.json (written by Python's json.dump with indent=1) --------------------------- */

struct manifest_tensor {
  char dtype[32];
  uint64_t shape[8];
  size_t ndim;
  char sha256[65];
};

/* The section of file `key` ("llama-tiny-single/model.safetensors"): [*begin, *end). */
static int manifest_section(const char* manifest, const char* key, const char** begin, const char** end) {
  char pattern[512];
  const char* p;
  const char* next;
  snprintf(pattern, sizeof pattern, "\"%s\": {", key);
  p = strstr(manifest, pattern);
  if (p == NULL) return 0;
  p += strlen(pattern);
  next = strstr(p, ".safetensors\": {"); /* the next file's key */
  *begin = p;
  *end = next != NULL ? next : p + strlen(p);
  return 1;
}

static size_t manifest_count(const char* begin, const char* end) {
  size_t n = 0;
  const char* p = begin;
  while ((p = strstr(p, "\"sha256\": \"")) != NULL && p < end) {
    ++n;
    ++p;
  }
  return n;
}

/* Finds `field` ("dtype") inside [p, end) and returns a pointer just after it, or NULL. */
static const char* after(const char* p, const char* end, const char* field) {
  const char* q = strstr(p, field);
  return q != NULL && q < end ? q + strlen(field) : NULL;
}

static int manifest_tensor(const char* manifest, const char* file_key, const char* name,
                           struct manifest_tensor* out) {
  const char *begin, *end, *entry, *entry_end, *q;
  char pattern[512];
  size_t i;
  memset(out, 0, sizeof *out);
  if (!manifest_section(manifest, file_key, &begin, &end)) return 0;
  snprintf(pattern, sizeof pattern, "\"%s\": {", name);
  entry = strstr(begin, pattern);
  if (entry == NULL || entry >= end) return 0;
  entry_end = strchr(entry + strlen(pattern), '}');
  if (entry_end == NULL) return 0;
  if ((q = after(entry, entry_end, "\"dtype\": \"")) == NULL) return 0;
  for (i = 0; q[i] != '"' && i + 1 < sizeof out->dtype; ++i) out->dtype[i] = q[i];
  if ((q = after(entry, entry_end, "\"shape\": [")) == NULL) return 0;
  while (*q != ']') {
    char* stop;
    while (*q == ' ' || *q == '\n' || *q == ',') ++q;
    if (*q == ']') break;
    if (out->ndim == 8) return 0;
    out->shape[out->ndim++] = strtoull(q, &stop, 10);
    if (stop == q) return 0;
    q = stop;
  }
  if ((q = after(entry, entry_end, "\"sha256\": \"")) == NULL) return 0;
  memcpy(out->sha256, q, 64);
  out->sha256[64] = '\0';
  return 1;
}

/* ---- shared checks ---------------------------------------------------------------------- */

/*
 * Every tensor of `ckpt` against MANIFEST.json (entries under `prefix`/FILE): dtype, shape,
 * data offsets, tf_find, and the sha256 of the bytes tf_tensor_data hands out. The number of
 * tensors per file must match the manifest's.
 */
static void check_against_manifest(tf_checkpoint* ckpt, const char* manifest, const char* prefix) {
  size_t n = tf_tensor_count(ckpt), i, f;
  CHECK(n > 0);
  for (f = 0; f < tf_file_count(ckpt); ++f) {
    char key[512];
    const char *begin, *end;
    size_t in_file = 0;
    snprintf(key, sizeof key, "%s/%s", prefix, tf_file_path(ckpt, f));
    REQUIRE(manifest_section(manifest, key, &begin, &end));
    for (i = 0; i < n; ++i) in_file += tf_tensor_file_index(ckpt, i) == f;
    CHECK(in_file == manifest_count(begin, end));
  }
  for (i = 0; i < n; ++i) {
    const char* name = tf_tensor_name(ckpt, i);
    struct manifest_tensor want;
    char key[512];
    char sha[65];
    size_t ndim = 99, d, found = 0;
    const uint64_t* shape = tf_tensor_shape(ckpt, i, &ndim);
    const void* data = NULL;
    size_t len = 0;
    uint64_t begin = 0, end = 0;
    REQUIRE(name != NULL);
    CHECK(strcmp(tf_tensor_file(ckpt, i), tf_file_path(ckpt, tf_tensor_file_index(ckpt, i))) == 0);
    snprintf(key, sizeof key, "%s/%s", prefix, tf_tensor_file(ckpt, i));
    if (!CHECK(manifest_tensor(manifest, key, name, &want))) {
      fprintf(stderr, "  tensor %s of %s is not in MANIFEST.json\n", name, key);
      continue;
    }
    CHECK(strcmp(tf_tensor_dtype(ckpt, i), want.dtype) == 0);
    CHECK(ndim == want.ndim);
    CHECK(ndim == 0 ? shape == NULL : shape != NULL);
    for (d = 0; d < ndim && d < want.ndim; ++d) CHECK(shape[d] == want.shape[d]);
    CHECK(tf_find(ckpt, name, &found) == 1 && found == i);
    CHECK_CODE(tf_tensor_data(ckpt, name, &data, &len), TF_OK, NULL);
    CHECK_CODE(tf_tensor_data_offsets(ckpt, i, &begin, &end), TF_OK, NULL);
    CHECK(end - begin == len);
    CHECK(len == 0 || data != NULL);
    sha256_hex(data, len, sha);
    if (!CHECK(strcmp(sha, want.sha256) == 0)) fprintf(stderr, "  sha256 of %s differs\n", name);
  }
}

/* Every tensor's bytes against the checkpoint's own files in `dir`, read here with stdio. */
static void check_against_files(tf_checkpoint* ckpt, const char* dir) {
  size_t files = tf_file_count(ckpt), f, i;
  for (f = 0; f < files; ++f) {
    char* path = path_join(dir, tf_file_path(ckpt, f));
    size_t size = 0;
    char* bytes = read_file(path, &size);
    uint64_t header = 0, data_total = 0;
    int k;
    REQUIRE(bytes != NULL && size >= 8);
    CHECK(tf_file_size(ckpt, f) == size);
    for (k = 7; k >= 0; --k) header = (header << 8) | (unsigned char)bytes[k];
    for (i = 0; i < tf_tensor_count(ckpt); ++i) {
      const char* name = tf_tensor_name(ckpt, i);
      const void* data = NULL;
      size_t len = 0;
      uint64_t begin = 0, end = 0;
      if (tf_tensor_file_index(ckpt, i) != f) continue;
      CHECK_CODE(tf_tensor_data(ckpt, name, &data, &len), TF_OK, NULL);
      CHECK_CODE(tf_tensor_data_offsets(ckpt, i, &begin, &end), TF_OK, NULL);
      REQUIRE(len == end - begin && 8 + header + end <= size);
      if (!CHECK(len == 0 || memcmp(data, bytes + 8 + header + begin, len) == 0)) {
        fprintf(stderr, "  bytes of %s differ from %s\n", name, path);
      }
      data_total += len;
    }
    CHECK(data_total == size - 8 - header); /* the tensors tile the data section */
    free(bytes);
    free(path);
  }
}

/* ---- local ------------------------------------------------------------------------------- */

static void test_codes(void) {
  /* Stable numbers, names and exit codes: a table, so any change shows up here. */
  static const struct {
    tf_code code;
    int value;
    const char* name;
    int exit_code;
  } rows[] = {
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
      {TF_ERR_INTERNAL, 100, "Internal", 1},
  };
  size_t i;
  for (i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
    CHECK((int)rows[i].code == rows[i].value);
    if (!CHECK(strcmp(tf_code_name(rows[i].code), rows[i].name) == 0)) fprintf(stderr, "  %s\n", rows[i].name);
    CHECK(tf_code_exit_code(rows[i].code) == rows[i].exit_code);
  }
  CHECK(strcmp(tf_code_name((tf_code)77), "Unknown") == 0);
  CHECK(tf_code_exit_code((tf_code)77) == 1);
  CHECK(tf_error_code(NULL) == TF_OK);
  CHECK(strcmp(tf_error_message(NULL), "") == 0);
  tf_error_free(NULL);
  tf_close(NULL);
  CHECK(strcmp(tf_version(), EXPECTED_VERSION) == 0);
}

static void test_reference(const char* ref) {
  char* manifest_path = path_join(ref, "MANIFEST.json");
  char* manifest = read_file(manifest_path, NULL);
  static const struct {
    const char* location; /* under the reference dir */
    const char* prefix;   /* of the files in MANIFEST.json */
    size_t files;
  } cases[] = {
      {"llama-tiny-single", "llama-tiny-single", 1},
      {"llama-tiny-single/model.safetensors", "llama-tiny-single", 1},
      {"llama-tiny-sharded", "llama-tiny-sharded", 3},
      {"llama-tiny-sharded/model.safetensors.index.json", "llama-tiny-sharded", 3},
      {"dtypes/model.safetensors", "dtypes", 1},
  };
  size_t c;
  REQUIRE(manifest != NULL);
  for (c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    char* location = path_join(ref, cases[c].location);
    tf_checkpoint* ckpt = NULL;
    tf_error* err = NULL;
    tf_code code = tf_open(location, NULL, &ckpt, &err);
    CHECK_CODE(code, TF_OK, err);
    CHECK(err == NULL);
    if (code == TF_OK) {
      CHECK(tf_is_remote(ckpt) == 0);
      CHECK(tf_file_count(ckpt) == cases[c].files);
      check_against_manifest(ckpt, manifest, cases[c].prefix);
      tf_close(ckpt);
    }
    tf_error_free(err);
    free(location);
  }
  free(manifest);
  free(manifest_path);
}

static int g_local_progress_calls = 0;

static int count_progress(const tf_progress* progress, void* user) {
  (void)progress;
  ++*(int*)user;
  return 0;
}

static void test_generated(void) {
  char* dir = path_join(g_tmp, "gen");
  char* saved = path_join(g_tmp, "saved");
  tf_checkpoint* ckpt = NULL;
  tf_checkpoint* copy = NULL;
  tf_error* err = NULL;
  tf_fetch_options options;
  tf_fetch_stats stats;
  const char* mlp[] = {"model.layers.*.mlp.*", "lm_head.weight"};
  const char* missing[] = {"model.layers.0.*", "nope.*"};
  const char* with_null[] = {"lm_head.weight", NULL};
  size_t i, index = 0, f;

  make_checkpoint(dir, "64", "256", "3");
  CHECK_CODE(tf_open(dir, NULL, &ckpt, &err), TF_OK, err);
  REQUIRE(ckpt != NULL);
  CHECK(tf_file_count(ckpt) == 3);
  CHECK(tf_tensor_count(ckpt) == 2 * 9 + 3);
  /* natural name order */
  CHECK(strcmp(tf_tensor_name(ckpt, 0), "lm_head.weight") == 0);
  CHECK(tf_find(ckpt, "model.layers.1.mlp.up_proj.weight", &index) == 1);
  CHECK(strcmp(tf_tensor_name(ckpt, index), "model.layers.1.mlp.up_proj.weight") == 0);
  CHECK(strcmp(tf_tensor_dtype(ckpt, index), "BF16") == 0);
  check_against_files(ckpt, dir);

  /* Fetching a local checkpoint is a no-op that still checks the patterns. */
  tf_fetch_options_init(&options);
  options.progress = count_progress;
  options.user = &g_local_progress_calls;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch(ckpt, mlp, 2, &options, &stats, &err), TF_OK, err);
  CHECK(err == NULL);
  CHECK(stats.size == sizeof stats && stats.bytes_transferred == 0 && stats.requests == 0);
  CHECK_CODE(tf_fetch(ckpt, NULL, 0, NULL, NULL, &err), TF_OK, err);
  CHECK_CODE(tf_fetch_all(ckpt, NULL, NULL, &err), TF_OK, err);

  CHECK_CODE(tf_fetch(ckpt, missing, 2, NULL, NULL, &err), TF_ERR_NOT_FOUND, err);
  CHECK(contains(tf_error_message(err), "nope.*"));
  tf_error_free(err);
  err = NULL;
  CHECK_CODE(tf_fetch(ckpt, with_null, 2, NULL, NULL, &err), TF_ERR_INVALID_ARGUMENT, err);
  CHECK(contains(tf_error_message(err), "patterns[1]"));
  tf_error_free(err);
  CHECK_CODE(tf_fetch(ckpt, NULL, 1, NULL, NULL, NULL), TF_ERR_INVALID_ARGUMENT, NULL);

  /* Options and stats whose size was never set are refused, naming the init function. */
  options.size = 0;
  CHECK_CODE(tf_fetch(ckpt, mlp, 1, &options, NULL, &err), TF_ERR_INVALID_ARGUMENT, err);
  CHECK(contains(tf_error_message(err), "tf_fetch_options_init"));
  tf_error_free(err);
  stats.size = 0;
  CHECK_CODE(tf_fetch_all(ckpt, NULL, &stats, &err), TF_ERR_INVALID_ARGUMENT, err);
  CHECK(contains(tf_error_message(err), "tf_fetch_stats_init"));
  tf_error_free(err);

  /* A cancel requested while no fetch runs stops the next one, and only that one. */
  tf_cancel(ckpt);
  CHECK_CODE(tf_fetch(ckpt, mlp, 1, NULL, NULL, &err), TF_ERR_CANCELLED, err);
  CHECK(contains(tf_error_message(err), "cancel"));
  tf_error_free(err);
  CHECK_CODE(tf_fetch(ckpt, mlp, 1, NULL, NULL, &err), TF_OK, err);

  /* Out-of-range indexes and unknown names. */
  i = tf_tensor_count(ckpt);
  CHECK(tf_tensor_name(ckpt, i) == NULL);
  CHECK(tf_tensor_dtype(ckpt, i) == NULL);
  {
    size_t ndim = 7;
    uint64_t b = 1, e = 1;
    const void* data = &ndim;
    size_t len = 5;
    CHECK(tf_tensor_shape(ckpt, i, &ndim) == NULL && ndim == 0);
    CHECK(tf_tensor_data_offsets(ckpt, i, &b, &e) == TF_ERR_INVALID_ARGUMENT && b == 0 && e == 0);
    CHECK(tf_tensor_file(ckpt, i) == NULL);
    CHECK(tf_file_path(ckpt, tf_file_count(ckpt)) == NULL);
    CHECK(tf_file_size(ckpt, tf_file_count(ckpt)) == 0);
    CHECK(tf_find(ckpt, "model.layers.9.mlp.up_proj.weight", &index) == 0);
    CHECK(tf_find(ckpt, NULL, &index) == 0);
    CHECK(tf_tensor_data(ckpt, "no.such.tensor", &data, &len) == TF_ERR_NOT_FOUND && data == NULL && len == 0);
    CHECK(tf_tensor_data(ckpt, NULL, &data, &len) == TF_ERR_INVALID_ARGUMENT);
    CHECK(tf_tensor_count(NULL) == 0 && tf_file_count(NULL) == 0 && tf_tensor_name(NULL, 0) == NULL);
  }

  /* save_files copies the checkpoint: the files, the index and config.json. */
  CHECK_CODE(tf_save_files(ckpt, saved, &err), TF_OK, err);
  for (f = 0; f < tf_file_count(ckpt); ++f) {
    char* a = path_join(dir, tf_file_path(ckpt, f));
    char* b = path_join(saved, tf_file_path(ckpt, f));
    CHECK(files_equal(a, b));
    free(a);
    free(b);
  }
  {
    char* a = path_join(dir, "model.safetensors.index.json");
    char* b = path_join(saved, "model.safetensors.index.json");
    CHECK(files_equal(a, b));
    free(a);
    free(b);
  }
  CHECK_CODE(tf_open(saved, NULL, &copy, &err), TF_OK, err);
  if (copy != NULL) {
    CHECK(tf_tensor_count(copy) == tf_tensor_count(ckpt));
    check_against_files(copy, saved);
    tf_close(copy);
  }
  tf_close(ckpt);
  free(dir);
  free(saved);
}

/* Opens `location`, expecting `want`; the message must contain `mention`. */
static void expect_open_error(const char* location, const tf_open_options* options, tf_code want,
                              const char* mention) {
  tf_checkpoint* ckpt = (tf_checkpoint*)&ckpt; /* must be reset to NULL */
  tf_error* err = NULL;
  CHECK_CODE(tf_open(location, options, &ckpt, &err), want, err);
  CHECK(ckpt == NULL);
  CHECK(err != NULL && tf_error_code(err) == want);
  if (!CHECK(contains(tf_error_message(err), mention))) {
    fprintf(stderr, "  message \"%s\" does not mention \"%s\"\n", tf_error_message(err), mention);
  }
  tf_error_free(err);
}

/* A safetensors file with this header (padded to 8 bytes with spaces) and data. */
static char* crafted(const char* name, const char* header, size_t data_len) {
  char* path = path_join(g_tmp, name);
  size_t n = strlen(header), padded = (n + 7) / 8 * 8, i;
  unsigned char* bytes = calloc(1, 8 + padded + data_len);
  REQUIRE(bytes != NULL);
  for (i = 0; i < 8; ++i) bytes[i] = (unsigned char)(((uint64_t)padded >> (8 * i)) & 0xff);
  memcpy(bytes + 8, header, n);
  memset(bytes + 8 + n, ' ', padded - n);
  write_file(path, bytes, 8 + padded + data_len);
  free(bytes);
  return path;
}

static void test_errors(void) {
  char* missing = path_join(g_tmp, "no-such-dir/model.safetensors");
  char* empty_dir = path_join(g_tmp, "empty");
  char* tiny = path_join(g_tmp, "tiny.safetensors");
  char* leading = crafted("leading-space.safetensors", " {}", 0);
  char* hole = crafted("hole.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2);
  tf_open_options options;
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;

  /* A missing file: NotFound (exit 1), the message names the path. */
  expect_open_error(missing, NULL, TF_ERR_NOT_FOUND, missing);
  CHECK(tf_code_exit_code(TF_ERR_NOT_FOUND) == 1);
  CHECK(tf_open(missing, NULL, &ckpt, NULL) == TF_ERR_NOT_FOUND && ckpt == NULL); /* err may be NULL */

  make_dirs(empty_dir);
  expect_open_error(empty_dir, NULL, TF_ERR_NOT_FOUND, empty_dir);

  /* Invalid files: format codes (exit 2) naming the file. */
  write_file(tiny, "abc", 3);
  expect_open_error(tiny, NULL, TF_ERR_FILE_TOO_SMALL, tiny);
  expect_open_error(leading, NULL, TF_ERR_HEADER_START, leading);
  expect_open_error(hole, NULL, TF_ERR_HOLE_OR_OVERLAP, hole);

  /* Bad arguments. */
  expect_open_error(NULL, NULL, TF_ERR_INVALID_ARGUMENT, "location");
  CHECK(tf_open(missing, NULL, NULL, &err) == TF_ERR_INVALID_ARGUMENT);
  CHECK(contains(tf_error_message(err), "out"));
  tf_error_free(err);
  memset(&options, 0, sizeof options); /* size never set */
  expect_open_error(missing, &options, TF_ERR_INVALID_ARGUMENT, "tf_open_options_init");
  tf_open_options_init(&options);
  CHECK(options.size == sizeof options && options.offline == TF_OFFLINE_FROM_ENV);
  CHECK(options.cache_dir == NULL && options.token == NULL && options.connections == 0);
  options.offline = 7;
  expect_open_error(missing, &options, TF_ERR_INVALID_ARGUMENT, "offline");

  free(missing);
  free(empty_dir);
  free(tiny);
  free(leading);
  free(hole);
}

/* ---- remote ------------------------------------------------------------------------------ */

/* Starts tensorfetch-test-server on `root`; returns its endpoint (http://localhost:PORT). */
static char* start_server(const char* root) {
  char* argv[] = {(char*)env_or_die("TENSORFETCH_TEST_SERVER_BIN"), "--root", (char*)root, "--port", "0",
                  "--latency-ms", "20", NULL};
  posix_spawn_file_actions_t fa;
  int fds[2];
  static char line[256];
  FILE* out;
  size_t n;
  REQUIRE(pipe(fds) == 0);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  REQUIRE(posix_spawn(&g_server, argv[0], &fa, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  out = fdopen(fds[0], "r");
  REQUIRE(out != NULL);
  REQUIRE(fgets(line, sizeof line, out) != NULL);
  fclose(out);
  n = strlen(line);
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
  REQUIRE(strncmp(line, "http://", 7) == 0);
  return line;
}

static void remote_options(tf_open_options* options, const char* endpoint, const char* cache) {
  tf_open_options_init(options);
  options->endpoint = endpoint;
  options->cache_dir = cache;
  options->token = "";                 /* none, whatever the environment holds */
  options->hf_hub_cache = g_tmp;       /* no Hugging Face cache to reuse */
  options->offline = 0;
}

/* Progress as the callback saw it. */
struct progress_log {
  int calls;
  int monotonic;
  int cancel_at; /* return non-zero on this call (1-based); 0: never */
  tf_progress last;
  /* for the cross-thread cancel */
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int saw_data;
};

static int log_progress(const tf_progress* p, void* user) {
  struct progress_log* log = user;
  if (log->calls > 0 && p->bytes_done < log->last.bytes_done) log->monotonic = 0;
  ++log->calls;
  log->last = *p;
  if (p->bytes_done > 0) {
    pthread_mutex_lock(&log->mutex);
    log->saw_data = 1;
    pthread_cond_signal(&log->cond);
    pthread_mutex_unlock(&log->mutex);
  }
  return log->cancel_at != 0 && log->calls >= log->cancel_at;
}

static void progress_log_init(struct progress_log* log) {
  memset(log, 0, sizeof *log);
  log->monotonic = 1;
  pthread_mutex_init(&log->mutex, NULL);
  pthread_cond_init(&log->cond, NULL);
}

static void progress_log_destroy(struct progress_log* log) {
  pthread_mutex_destroy(&log->mutex);
  pthread_cond_destroy(&log->cond);
}

struct canceller {
  tf_checkpoint* ckpt;
  struct progress_log* log;
};

/* Waits until data flows, then cancels the fetch from this thread. */
static void* cancel_when_data_flows(void* arg) {
  struct canceller* c = arg;
  pthread_mutex_lock(&c->log->mutex);
  while (!c->log->saw_data) pthread_cond_wait(&c->log->cond, &c->log->mutex);
  pthread_mutex_unlock(&c->log->mutex);
  tf_cancel(c->ckpt);
  return NULL;
}

/* The reference sharded checkpoint over HTTP: bytes checked against MANIFEST.json. */
static void test_remote_reference(const char* endpoint, const char* manifest) {
  char* cache = path_join(g_tmp, "cache-ref");
  tf_open_options options;
  tf_fetch_options fetch;
  tf_fetch_stats stats;
  struct progress_log log;
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;
  const char* layer0[] = {"model.layers.0.*"};
  const void* data = NULL;
  size_t len = 0, i, fetched = 0;
  uint64_t wanted = 0;

  remote_options(&options, endpoint, cache);
  CHECK_CODE(tf_open("hf://ref/tiny-sharded", &options, &ckpt, &err), TF_OK, err);
  REQUIRE(ckpt != NULL);
  CHECK(tf_is_remote(ckpt) == 1);
  CHECK(tf_file_count(ckpt) == 3);
  CHECK(strcmp(tf_file_path(ckpt, 0), "model-00001-of-00003.safetensors") == 0);
  CHECK(tf_file_size(ckpt, 1) == 303040);

  /* Nothing is fetched by open. */
  CHECK(tf_tensor_data(ckpt, "lm_head.weight", &data, &len) == TF_ERR_NOT_FETCHED && data == NULL);

  progress_log_init(&log);
  tf_fetch_options_init(&fetch);
  fetch.connections = 4;
  fetch.chunk_size = 16384;
  fetch.coalesce_gap = 1;
  fetch.progress = log_progress;
  fetch.user = &log;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch(ckpt, layer0, 1, &fetch, &stats, &err), TF_OK, err);
  CHECK(log.calls >= 1 && log.monotonic);
  CHECK(log.last.bytes_done == log.last.bytes_total);
  CHECK(stats.bytes_transferred == log.last.bytes_total);
  CHECK(stats.requests >= stats.chunks);
  for (i = 0; i < tf_tensor_count(ckpt); ++i) {
    const char* name = tf_tensor_name(ckpt, i);
    uint64_t begin = 0, end = 0;
    if (strncmp(name, "model.layers.0.", 15) != 0) continue;
    ++fetched;
    CHECK_CODE(tf_tensor_data(ckpt, name, &data, &len), TF_OK, NULL);
    CHECK_CODE(tf_tensor_data_offsets(ckpt, i, &begin, &end), TF_OK, NULL);
    wanted += end - begin;
  }
  CHECK(fetched == 9);
  /* What open already read (each file's first 256 KiB) is cached; the rest was transferred,
   * exactly (no coalescing across holes). */
  CHECK(stats.bytes_transferred + stats.bytes_cached == wanted);

  /* Again: everything is cached now. */
  CHECK_CODE(tf_fetch(ckpt, layer0, 1, NULL, &stats, &err), TF_OK, err);
  CHECK(stats.bytes_transferred == 0 && stats.requests == 0 && stats.bytes_cached == wanted);

  /* The rest, then every tensor against the manifest. */
  CHECK_CODE(tf_fetch_all(ckpt, NULL, &stats, &err), TF_OK, err);
  check_against_manifest(ckpt, manifest, "llama-tiny-sharded");
  tf_close(ckpt);
  progress_log_destroy(&log);
  free(cache);
}

/* A generated checkpoint over HTTP: selective fetch, both ways to cancel, fetch_all, save. */
static void test_remote_generated(const char* endpoint, const char* root_repo) {
  char* cache = path_join(g_tmp, "cache-gen");
  char* saved = path_join(g_tmp, "saved-remote");
  tf_open_options options;
  tf_fetch_options fetch;
  tf_fetch_stats stats;
  struct progress_log log;
  struct canceller canceller;
  pthread_t thread;
  tf_checkpoint* ckpt = NULL;
  tf_checkpoint* copy = NULL;
  tf_error* err = NULL;
  const char* lm_head[] = {"lm_head.weight"};
  const void* data = NULL;
  size_t len = 0, f;
  uint64_t begin = 0, end = 0, size_sum = 0;
  size_t index = 0;

  remote_options(&options, endpoint, cache);
  CHECK_CODE(tf_open("gen/model", &options, &ckpt, &err), TF_OK, err);
  REQUIRE(ckpt != NULL);
  CHECK(tf_file_count(ckpt) == 2);
  for (f = 0; f < tf_file_count(ckpt); ++f) size_sum += tf_file_size(ckpt, f);

  /* Only the tensor asked for: lm_head (past the first 256 KiB of its shard), not its
   * neighbours, and not embed_tokens (at the start of the other shard). */
  REQUIRE(tf_find(ckpt, "lm_head.weight", &index));
  CHECK(tf_tensor_data_offsets(ckpt, index, &begin, &end) == TF_OK && begin > (256u << 10));
  progress_log_init(&log);
  tf_fetch_options_init(&fetch);
  fetch.connections = 4;
  fetch.chunk_size = 65536;
  fetch.coalesce_gap = 1;
  fetch.progress = log_progress;
  fetch.user = &log;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch(ckpt, lm_head, 1, &fetch, &stats, &err), TF_OK, err);
  CHECK(stats.bytes_transferred == end - begin);
  CHECK(stats.chunks >= (end - begin + 65535) / 65536 && stats.requests >= stats.chunks);
  CHECK(log.last.bytes_done == end - begin && log.last.files_total == 1 && log.last.files_done == 1);
  CHECK(tf_tensor_data(ckpt, "lm_head.weight", &data, &len) == TF_OK && len == end - begin);
  CHECK(tf_tensor_data(ckpt, "model.embed_tokens.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  CHECK(tf_tensor_data(ckpt, "model.layers.1.mlp.down_proj.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  progress_log_destroy(&log);

  /* Cancelled from another thread while data flows (16 KiB chunks over 2 connections with
   * 20 ms latency: the whole download takes well over a second). */
  progress_log_init(&log);
  fetch.connections = 2;
  fetch.chunk_size = 16384;
  fetch.user = &log;
  canceller.ckpt = ckpt;
  canceller.log = &log;
  REQUIRE(pthread_create(&thread, NULL, cancel_when_data_flows, &canceller) == 0);
  CHECK_CODE(tf_fetch_all(ckpt, &fetch, &stats, &err), TF_ERR_CANCELLED, err);
  CHECK(contains(tf_error_message(err), "cancel"));
  CHECK(log.saw_data && log.last.bytes_done < log.last.bytes_total);
  pthread_mutex_lock(&log.mutex); /* should the fetch have ended without data: release the thread */
  log.saw_data = 1;
  pthread_cond_signal(&log.cond);
  pthread_mutex_unlock(&log.mutex);
  pthread_join(thread, NULL);
  tf_error_free(err);
  err = NULL;
  progress_log_destroy(&log);

  /* Cancelled by the callback (on its first call). */
  progress_log_init(&log);
  log.cancel_at = 1;
  fetch.user = &log;
  CHECK_CODE(tf_fetch_all(ckpt, &fetch, &stats, &err), TF_ERR_CANCELLED, err);
  CHECK(contains(tf_error_message(err), "cancel"));
  tf_error_free(err);
  err = NULL;
  progress_log_destroy(&log);

  /* The whole checkpoint: what earlier fetches committed is not transferred again. */
  tf_fetch_options_init(&fetch);
  fetch.chunk_size = 1 << 20;
  fetch.connections = 8;
  CHECK_CODE(tf_fetch_all(ckpt, &fetch, &stats, &err), TF_OK, err);
  CHECK(stats.bytes_cached >= end - begin);
  CHECK(stats.bytes_transferred < size_sum);
  CHECK(stats.bytes_transferred + stats.bytes_cached >= size_sum);
  check_against_files(ckpt, root_repo);

  /* Saved as files, equal to the served ones. */
  CHECK_CODE(tf_save_files(ckpt, saved, &err), TF_OK, err);
  for (f = 0; f < tf_file_count(ckpt); ++f) {
    char* a = path_join(root_repo, tf_file_path(ckpt, f));
    char* b = path_join(saved, tf_file_path(ckpt, f));
    CHECK(files_equal(a, b));
    free(a);
    free(b);
  }
  CHECK_CODE(tf_open(saved, NULL, &copy, &err), TF_OK, err);
  if (copy != NULL) {
    CHECK(tf_tensor_count(copy) == tf_tensor_count(ckpt));
    tf_close(copy);
  }
  tf_close(ckpt);
  free(cache);
  free(saved);
}

static void test_remote_errors(const char* endpoint) {
  char* cache = path_join(g_tmp, "cache-err");
  tf_open_options options;
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;
  remote_options(&options, endpoint, cache);
  CHECK_CODE(tf_open("hf://nobody/missing", &options, &ckpt, &err), TF_ERR_REMOTE_NOT_FOUND, err);
  CHECK(ckpt == NULL);
  CHECK(tf_code_exit_code(tf_error_code(err)) == 3);
  CHECK(contains(tf_error_message(err), "nobody/missing"));
  tf_error_free(err);
  free(cache);
}

/* ---- main -------------------------------------------------------------------------------- */

int main(int argc, char** argv) {
  const char* ref = env_or_die("TENSORFETCH_REFERENCE_DIR");
  const char* mode = argc > 1 ? argv[1] : "local";
  char* manifest_path = path_join(ref, "MANIFEST.json");
  char* manifest = read_file(manifest_path, NULL);

  snprintf(g_tmp, sizeof g_tmp, "%s", "/tmp/tensorfetch-capi-XXXXXX");
  REQUIRE(mkdtemp(g_tmp) != NULL);
  atexit(cleanup);
  REQUIRE(manifest != NULL);

  if (strcmp(mode, "local") == 0) {
    test_codes();
    test_reference(ref);
    test_generated();
    test_errors();
  } else if (strcmp(mode, "remote") == 0) {
    char* root = path_join(g_tmp, "root");
    char* ref_repo = path_join(root, "ref/tiny-sharded");
    char* gen_repo = path_join(root, "gen/model");
    static const char* files[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                                  "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"};
    const char* endpoint;
    size_t i;
    make_dirs(ref_repo);
    for (i = 0; i < sizeof files / sizeof files[0]; ++i) {
      char* from = path_join(ref, "llama-tiny-sharded");
      char* from_file = path_join(from, files[i]);
      char* to_file = path_join(ref_repo, files[i]);
      copy_file(from_file, to_file);
      free(from);
      free(from_file);
      free(to_file);
    }
    make_checkpoint(gen_repo, "128", "2048", "2");
    endpoint = start_server(root);
    test_remote_reference(endpoint, manifest);
    test_remote_generated(endpoint, gen_repo);
    test_remote_errors(endpoint);
    free(root);
    free(ref_repo);
    free(gen_repo);
  } else {
    fprintf(stderr, "usage: %s local|remote\n", argv[0]);
    return 1;
  }
  free(manifest);
  free(manifest_path);
  printf("%d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
