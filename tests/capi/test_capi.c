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
 *                      callback and from another thread, fetch_all, save_files, remote errors;
 *                      a download manager (tf_plan_fetch, then the transfers made with libcurl),
 *                      the byte sink, one connection with per-file progress, and
 *                      tf_publish_to_hf_cache (the Hugging Face cache layout, then reused).
 *
 * Environment (set by tests/capi/meson.build): TENSORFETCH_REFERENCE_DIR,
 * TENSORFETCH_MAKE_CHECKPOINT_BIN, TENSORFETCH_TEST_SERVER_BIN.
 */
#define _XOPEN_SOURCE 700 /* POSIX.1-2008 with XSI: realpath */

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
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <strings.h>

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

/* The git blob id of some bytes: sha1("blob LEN\0" + bytes), as huggingface_hub names small
 * files' blobs. */
static void git_blob_sha1_hex(const void* data, size_t len, char out[41]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0, i;
  char prefix[64];
  int n = snprintf(prefix, sizeof prefix, "blob %zu", len);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  REQUIRE(ctx != NULL);
  REQUIRE(EVP_DigestInit_ex(ctx, EVP_sha1(), NULL) == 1);
  REQUIRE(EVP_DigestUpdate(ctx, prefix, (size_t)n + 1) == 1); /* with the NUL */
  REQUIRE(EVP_DigestUpdate(ctx, data, len) == 1);
  REQUIRE(EVP_DigestFinal_ex(ctx, md, &md_len) == 1);
  EVP_MD_CTX_free(ctx);
  for (i = 0; i < md_len && i < 20; ++i) snprintf(out + 2 * i, 3, "%02x", md[i]);
  out[40] = '\0';
}

static void sha1_hex(const void* data, size_t len, char out[41]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0, i;
  REQUIRE(EVP_Digest(data, len, md, &md_len, EVP_sha1(), NULL) == 1);
  for (i = 0; i < md_len && i < 20; ++i) snprintf(out + 2 * i, 3, "%02x", md[i]);
  out[40] = '\0';
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
      {TF_ERR_BUSY, 31, "Busy", 1},
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

  /* Plans, publishing and the commit of a local checkpoint: nothing to transfer, nothing to
   * publish, no commit; and the argument checks. */
  CHECK(tf_commit(ckpt) == NULL && tf_commit(NULL) == NULL);
  {
    tf_plan* plan = (tf_plan*)&plan; /* must be set */
    size_t published = 99;
    CHECK_CODE(tf_plan_fetch(ckpt, mlp, 2, NULL, &plan, &err), TF_OK, err);
    CHECK(plan != NULL && tf_plan_count(plan) == 0);
    CHECK(tf_plan_url(plan, 0) == NULL && tf_plan_if_match(plan, 0) == NULL && tf_plan_length(plan, 0) == 0);
    tf_plan_free(plan);
    plan = (tf_plan*)&plan;
    CHECK_CODE(tf_plan_fetch(ckpt, missing, 2, NULL, &plan, &err), TF_ERR_NOT_FOUND, err);
    CHECK(plan == NULL && contains(tf_error_message(err), "nope.*"));
    tf_error_free(err);
    CHECK_CODE(tf_plan_fetch(ckpt, with_null, 2, NULL, &plan, &err), TF_ERR_INVALID_ARGUMENT, err);
    CHECK(contains(tf_error_message(err), "tf_plan_fetch: patterns[1]"));
    tf_error_free(err);
    CHECK_CODE(tf_plan_fetch(ckpt, mlp, 1, NULL, NULL, &err), TF_ERR_INVALID_ARGUMENT, err);
    tf_error_free(err);
    CHECK_CODE(tf_plan_fetch(NULL, mlp, 1, NULL, &plan, NULL), TF_ERR_INVALID_ARGUMENT, NULL);
    CHECK(plan == NULL);
    options.size = 0;
    CHECK_CODE(tf_plan_fetch(ckpt, mlp, 1, &options, &plan, &err), TF_ERR_INVALID_ARGUMENT, err);
    CHECK(contains(tf_error_message(err), "tf_fetch_options_init"));
    tf_error_free(err);
    tf_fetch_options_init(&options);
    CHECK(options.sink == NULL && options.progress == NULL && options.user == NULL);
    CHECK(tf_plan_count(NULL) == 0 && tf_plan_url(NULL, 0) == NULL && tf_plan_send_token(NULL, 0) == 0);
    tf_plan_free(NULL);

    CHECK_CODE(tf_publish_to_hf_cache(ckpt, &published, &err), TF_ERR_INVALID_ARGUMENT, err);
    CHECK(published == 0 && contains(tf_error_message(err), "Hub"));
    tf_error_free(err);
    CHECK_CODE(tf_publish_to_hf_cache(NULL, NULL, &err), TF_ERR_INVALID_ARGUMENT, err);
    tf_error_free(err);
    err = NULL;
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
  tf_open_options_init(&options);
  CHECK(options.shared_cache == TF_SHARED_CACHE_FROM_ENV);
  options.shared_cache = 2;
  expect_open_error(missing, &options, TF_ERR_INVALID_ARGUMENT, "shared_cache");

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

/* ---- byte ranges per file: what a plan must hold ----------------------------------------- */

#define MAX_FILES 4
#define MAX_RANGES 256
/* Bytes tf_open reads of each remote file (OpenOptions::header_window, 256 KiB): a fetch or a
 * plan records them in the file's cache entry, so they are never planned again. */
#define HEADER_WINDOW ((uint64_t)256 << 10)

struct range {
  uint64_t begin, end;
};

/* Sorted, disjoint, non-adjacent ranges. */
struct range_set {
  struct range r[MAX_RANGES];
  size_t n;
};

static int range_cmp(const void* a, const void* b) {
  const struct range* x = a;
  const struct range* y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Adds [begin, end), merging overlapping and adjacent ranges. */
static void rs_add(struct range_set* s, uint64_t begin, uint64_t end) {
  size_t i, k = 0;
  if (begin >= end) return;
  REQUIRE(s->n < MAX_RANGES);
  s->r[s->n].begin = begin;
  s->r[s->n].end = end;
  ++s->n;
  qsort(s->r, s->n, sizeof s->r[0], range_cmp);
  for (i = 1; i < s->n; ++i) {
    if (s->r[i].begin <= s->r[k].end) {
      if (s->r[i].end > s->r[k].end) s->r[k].end = s->r[i].end;
    } else {
      s->r[++k] = s->r[i];
    }
  }
  s->n = k + 1;
}

/* Removes [begin, end). */
static void rs_subtract(struct range_set* s, uint64_t begin, uint64_t end) {
  static struct range_set out;
  size_t i;
  out.n = 0;
  for (i = 0; i < s->n; ++i) {
    const struct range x = s->r[i];
    REQUIRE(out.n + 2 <= MAX_RANGES);
    if (x.end <= begin || x.begin >= end) {
      out.r[out.n++] = x;
      continue;
    }
    if (x.begin < begin) {
      out.r[out.n].begin = x.begin;
      out.r[out.n++].end = begin;
    }
    if (x.end > end) {
      out.r[out.n].begin = end;
      out.r[out.n++].end = x.end;
    }
  }
  *s = out;
}

/* Merges ranges separated by holes of at most `gap` bytes (tf_fetch_options.coalesce_gap). */
static void rs_coalesce(struct range_set* s, uint64_t gap) {
  size_t i, k = 0;
  if (s->n == 0) return;
  for (i = 1; i < s->n; ++i) {
    if (s->r[i].begin - s->r[k].end <= gap) {
      s->r[k].end = s->r[i].end;
    } else {
      s->r[++k] = s->r[i];
    }
  }
  s->n = k + 1;
}

static int rs_equal(const struct range_set* a, const struct range_set* b) {
  size_t i;
  if (a->n != b->n) return 0;
  for (i = 0; i < a->n; ++i) {
    if (a->r[i].begin != b->r[i].begin || a->r[i].end != b->r[i].end) return 0;
  }
  return 1;
}

static int rs_intersects(const struct range_set* s, uint64_t begin, uint64_t end) {
  size_t i;
  for (i = 0; i < s->n; ++i) {
    if (s->r[i].begin < end && begin < s->r[i].end) return 1;
  }
  return 0;
}

static uint64_t rs_bytes(const struct range_set* s) {
  uint64_t n = 0;
  size_t i;
  for (i = 0; i < s->n; ++i) n += s->r[i].end - s->r[i].begin;
  return n;
}

static void rs_print(const char* label, size_t file, const struct range_set* s) {
  size_t i;
  fprintf(stderr, "  %s, file %zu:", label, file);
  for (i = 0; i < s->n; ++i) fprintf(stderr, " [%" PRIu64 ", %" PRIu64 ")", s->r[i].begin, s->r[i].end);
  fprintf(stderr, "\n");
}

/* CHECKs that the sets of every file are equal, printing both on failure. */
static void check_sets(const struct range_set* got, const struct range_set* want, size_t files, const char* what) {
  size_t f;
  for (f = 0; f < files; ++f) {
    if (!CHECK(rs_equal(&got[f], &want[f]))) {
      fprintf(stderr, "  %s:\n", what);
      rs_print("got", f, &got[f]);
      rs_print("want", f, &want[f]);
    }
  }
}

/* The fewest transfers of at most `chunk` bytes that cover the sets. */
static size_t min_transfers(const struct range_set* sets, size_t files, uint64_t chunk) {
  size_t f, i, n = 0;
  for (f = 0; f < files; ++f) {
    for (i = 0; i < sets[f].n; ++i) n += (size_t)((sets[f].r[i].end - sets[f].r[i].begin + chunk - 1) / chunk);
  }
  return n;
}

/* ---- the served files, read here with stdio ------------------------------------------------ */

struct source {
  size_t files;
  char* bytes[MAX_FILES];
  size_t len[MAX_FILES];
  uint64_t data_start[MAX_FILES]; /* 8 + header size: where data_offsets count from */
  char sha256[MAX_FILES][65];
};

static void load_sources(tf_checkpoint* ckpt, const char* repo, struct source* src) {
  size_t f;
  int k;
  memset(src, 0, sizeof *src);
  src->files = tf_file_count(ckpt);
  REQUIRE(src->files > 0 && src->files <= MAX_FILES);
  for (f = 0; f < src->files; ++f) {
    char* path = path_join(repo, tf_file_path(ckpt, f));
    uint64_t header = 0;
    src->bytes[f] = read_file(path, &src->len[f]);
    REQUIRE(src->bytes[f] != NULL && src->len[f] >= 8);
    CHECK(tf_file_size(ckpt, f) == src->len[f]);
    for (k = 7; k >= 0; --k) header = (header << 8) | (unsigned char)src->bytes[f][k];
    src->data_start[f] = 8 + header;
    sha256_hex(src->bytes[f], src->len[f], src->sha256[f]);
    free(path);
  }
}

static void free_sources(struct source* src) {
  size_t f;
  for (f = 0; f < src->files; ++f) free(src->bytes[f]);
}

/* The file offsets [*begin, *end) of tensor `i`. */
static void tensor_range(tf_checkpoint* ckpt, const struct source* src, size_t i, uint64_t* begin, uint64_t* end) {
  uint64_t b = 0, e = 0;
  REQUIRE(tf_tensor_data_offsets(ckpt, i, &b, &e) == TF_OK);
  *begin = src->data_start[tf_tensor_file_index(ckpt, i)] + b;
  *end = src->data_start[tf_tensor_file_index(ckpt, i)] + e;
}

static int starts_with(const char* s, const char* prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* The byte ranges of the tensors whose names start with one of `prefixes`, per file. */
static void wanted_ranges(tf_checkpoint* ckpt, const struct source* src, const char* const* prefixes, size_t n,
                          struct range_set* sets) {
  size_t i, p, f;
  for (f = 0; f < MAX_FILES; ++f) sets[f].n = 0;
  for (i = 0; i < tf_tensor_count(ckpt); ++i) {
    for (p = 0; p < n; ++p) {
      if (starts_with(tf_tensor_name(ckpt, i), prefixes[p])) {
        uint64_t b, e;
        tensor_range(ckpt, src, i, &b, &e);
        rs_add(&sets[tf_tensor_file_index(ckpt, i)], b, e);
        break;
      }
    }
  }
}

/*
 * The transfers of `plan`, per file, merged where one ends where the next begins. CHECKs
 * what every transfer must be: in file then offset order without overlap, 0 < length <=
 * `chunk`, inside the file; the URL is the CDN's (the redirect target) and If-Match the
 * file's sha256 (the CDN's ETag), quoted; no token (none was given). Returns the count.
 */
static size_t plan_ranges(const tf_plan* plan, const struct source* src, uint64_t chunk, struct range_set* sets) {
  size_t i, f, n = tf_plan_count(plan);
  size_t last_file = 0;
  uint64_t last_end = 0;
  for (f = 0; f < MAX_FILES; ++f) sets[f].n = 0;
  for (i = 0; i < n; ++i) {
    const size_t file = tf_plan_file(plan, i);
    const uint64_t offset = tf_plan_offset(plan, i), length = tf_plan_length(plan, i);
    const char* url = tf_plan_url(plan, i);
    const char* if_match = tf_plan_if_match(plan, i);
    char want_etag[80];
    if (!CHECK(file < src->files)) continue;
    CHECK(length > 0 && length <= chunk);
    CHECK(offset + length <= src->len[file]);
    if (!CHECK(i == 0 || file > last_file || (file == last_file && offset >= last_end))) {
      fprintf(stderr, "  transfer %zu (file %zu, offset %" PRIu64 ") out of order\n", i, file, offset);
    }
    last_file = file;
    last_end = offset + length;
    CHECK(url != NULL && starts_with(url, "http://127.0.0.1:") && contains(url, src->sha256[file]));
    snprintf(want_etag, sizeof want_etag, "\"%s\"", src->sha256[file]);
    CHECK(if_match != NULL && strcmp(if_match, want_etag) == 0);
    CHECK(tf_plan_send_token(plan, i) == 0);
    rs_add(&sets[file], offset, offset + length);
  }
  return n;
}

/* ---- a download manager: the planned transfers made with libcurl ---------------------------- */

struct body {
  unsigned char* buf;
  uint64_t cap, len;
  int overflow;
  char content_range[128];
};

static size_t on_body(char* data, size_t size, size_t n, void* user) {
  struct body* b = user;
  const size_t len = size * n;
  if (b->len + len > b->cap) {
    b->overflow = 1;
    return 0;
  }
  memcpy(b->buf + b->len, data, len);
  b->len += len;
  return len;
}

static size_t on_header(char* data, size_t size, size_t n, void* user) {
  struct body* b = user;
  const size_t len = size * n;
  if (len > 14 && strncasecmp(data, "Content-Range:", 14) == 0) {
    size_t i = 14, k = 0;
    while (i < len && data[i] == ' ') ++i;
    while (i < len && data[i] != '\r' && data[i] != '\n' && k + 1 < sizeof b->content_range) {
      b->content_range[k++] = data[i++];
    }
    b->content_range[k] = '\0';
  }
  return len;
}

/*
 * Makes every transfer of `plan` with libcurl, as a download manager with its own scheduler
 * would: GET url, Range: bytes=OFFSET-(OFFSET+LENGTH-1), If-Match. Each answer must be 206
 * with exactly that Content-Range and the source file's bytes at that offset. The bytes are
 * stored into `image[file]` (a buffer of the file's size) and marked in `have[file]`. Returns
 * the bytes received.
 */
static uint64_t download_plan(const tf_plan* plan, const struct source* src, unsigned char** image,
                              unsigned char** have) {
  CURL* curl = curl_easy_init();
  size_t i;
  uint64_t total = 0;
  REQUIRE(curl != NULL);
  for (i = 0; i < tf_plan_count(plan); ++i) {
    const size_t file = tf_plan_file(plan, i);
    const uint64_t offset = tf_plan_offset(plan, i), length = tf_plan_length(plan, i);
    struct curl_slist* headers = NULL;
    struct body b;
    char line[256], want_range[128];
    long status = 0;
    CURLcode rc;
    REQUIRE(file < src->files && offset + length <= src->len[file]);
    memset(&b, 0, sizeof b);
    b.buf = malloc(length);
    b.cap = length;
    REQUIRE(b.buf != NULL);
    snprintf(line, sizeof line, "Range: bytes=%" PRIu64 "-%" PRIu64, offset, offset + length - 1);
    headers = curl_slist_append(headers, line);
    if (tf_plan_if_match(plan, i) != NULL) {
      snprintf(line, sizeof line, "If-Match: %s", tf_plan_if_match(plan, i));
      headers = curl_slist_append(headers, line);
    }
    curl_easy_setopt(curl, CURLOPT_URL, tf_plan_url(plan, i));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &b);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    snprintf(want_range, sizeof want_range, "bytes %" PRIu64 "-%" PRIu64 "/%zu", offset, offset + length - 1,
             src->len[file]);
    if (!CHECK(rc == CURLE_OK && status == 206 && !b.overflow && b.len == length &&
               strcmp(b.content_range, want_range) == 0)) {
      fprintf(stderr, "  GET %s (%s): curl %d, HTTP %ld, %" PRIu64 " bytes, Content-Range \"%s\"\n",
              tf_plan_url(plan, i), want_range, (int)rc, status, b.len, b.content_range);
    } else {
      CHECK(memcmp(b.buf, src->bytes[file] + offset, length) == 0);
      memcpy(image[file] + offset, b.buf, length);
      memset(have[file] + offset, 1, length);
      total += length;
    }
    free(b.buf);
  }
  curl_easy_cleanup(curl);
  return total;
}

static void alloc_images(const struct source* src, unsigned char** image, unsigned char** have) {
  size_t f;
  for (f = 0; f < src->files; ++f) {
    image[f] = calloc(1, src->len[f]);
    have[f] = calloc(1, src->len[f]);
    REQUIRE(image[f] != NULL && have[f] != NULL);
  }
}

static void free_images(const struct source* src, unsigned char** image, unsigned char** have) {
  size_t f;
  for (f = 0; f < src->files; ++f) {
    free(image[f]);
    free(have[f]);
  }
}

static int g_sink_calls = 0;

static int count_sink_calls(size_t file, uint64_t offset, const void* data, size_t len, void* user) {
  (void)file;
  (void)offset;
  (void)data;
  (void)len;
  ++*(int*)user;
  return 0;
}

/*
 * A download manager on tensorfetch: plan a selection, make the transfers itself (libcurl),
 * assemble the tensors. The plan leaves out what the cache holds (a tensor fetched before, and
 * what open read), coalesces holes and splits transfers exactly as the fetch options say.
 */
static void test_remote_plan(const char* endpoint, const char* repo) {
  char* cache = path_join(g_tmp, "cache-plan");
  tf_open_options options;
  tf_fetch_options fetch;
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;
  tf_plan* plan = NULL;
  const char* glob[] = {"model.layers.*"};
  const char* prefixes[] = {"model.layers."};
  const char* one[] = {"model.layers.0.self_attn.v_proj.weight"};
  static struct range_set wanted[MAX_FILES], expected[MAX_FILES], got[MAX_FILES];
  struct source src;
  unsigned char* image[MAX_FILES] = {NULL};
  unsigned char* have[MAX_FILES] = {NULL};
  const void* data = NULL;
  size_t len = 0, f, i, one_index = 0, one_file, n, unknown = 0;
  uint64_t one_begin = 0, one_end = 0, hole, gaps[2];
  int k;

  remote_options(&options, endpoint, cache);
  CHECK_CODE(tf_open("gen/model", &options, &ckpt, &err), TF_OK, err);
  REQUIRE(ckpt != NULL);
  load_sources(ckpt, repo, &src);
  wanted_ranges(ckpt, &src, prefixes, 1, wanted);

  /* One tensor first, into the cache: in the middle of layer 0, past what open read. */
  REQUIRE(tf_find(ckpt, one[0], &one_index));
  one_file = tf_tensor_file_index(ckpt, one_index);
  tensor_range(ckpt, &src, one_index, &one_begin, &one_end);
  REQUIRE(one_begin >= HEADER_WINDOW && one_end < src.len[one_file]);
  CHECK_CODE(tf_fetch(ckpt, one, 1, NULL, NULL, &err), TF_OK, err);
  CHECK(tf_tensor_data(ckpt, one[0], &data, &len) == TF_OK && len == one_end - one_begin);

  /* The plan of a glob that includes it (two files), in 64 KiB transfers, no coalescing across
   * holes: the selected bytes minus that tensor and minus each file's first 256 KiB. */
  tf_fetch_options_init(&fetch);
  fetch.chunk_size = 65536;
  fetch.coalesce_gap = 1;
  CHECK_CODE(tf_plan_fetch(ckpt, glob, 1, &fetch, &plan, &err), TF_OK, err);
  REQUIRE(plan != NULL);
  for (f = 0; f < src.files; ++f) {
    expected[f] = wanted[f];
    rs_subtract(&expected[f], 0, src.len[f] < HEADER_WINDOW ? src.len[f] : HEADER_WINDOW);
    if (f == one_file) rs_subtract(&expected[f], one_begin, one_end);
    rs_coalesce(&expected[f], 1);
  }
  CHECK(src.files == 2 && wanted[0].n == 1 && wanted[1].n == 1); /* layer 0 in one file, layer 1 in the other */
  CHECK(expected[one_file].n == 2);                                /* the cached tensor is a hole */
  n = plan_ranges(plan, &src, 65536, got);
  check_sets(got, expected, src.files, "plan minus the cache, 64 KiB chunks, gap 1");
  CHECK(!rs_intersects(&got[one_file], one_begin, one_end));
  CHECK(n == min_transfers(expected, src.files, 65536));
  CHECK(n > 4);

  /* The download manager makes them; then every selected tensor is assembled from its own
   * transfers and what tensorfetch's cache serves, and equals the source. Only bytes of the
   * first 256 KiB (cached by open, not served alone) may be missing. */
  alloc_images(&src, image, have);
  CHECK(download_plan(plan, &src, image, have) == rs_bytes(&expected[0]) + rs_bytes(&expected[1]));
  for (i = 0; i < tf_tensor_count(ckpt); ++i) {
    uint64_t b, e, x;
    const char* name = tf_tensor_name(ckpt, i);
    f = tf_tensor_file_index(ckpt, i);
    if (!starts_with(name, prefixes[0])) continue;
    tensor_range(ckpt, &src, i, &b, &e);
    if (tf_tensor_data(ckpt, name, &data, &len) == TF_OK) {
      REQUIRE(len == e - b);
      memcpy(image[f] + b, data, len);
      memset(have[f] + b, 1, len);
    }
    for (x = b; x < e; ++x) {
      if (!have[f][x] && x >= HEADER_WINDOW) ++unknown;
    }
    for (x = b; x < e && (!have[f][x] || image[f][x] == (unsigned char)src.bytes[f][x]); ++x) {
    }
    if (!CHECK(x == e)) fprintf(stderr, "  %s differs from the source at byte %" PRIu64 "\n", name, x);
  }
  CHECK(unknown == 0);
  /* What the download manager fetched did not enter tensorfetch's cache. */
  CHECK(tf_tensor_data(ckpt, "model.layers.0.mlp.up_proj.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  free_images(&src, image, have);
  tf_plan_free(plan);

  /* Coalescing: the cached tensor is a hole of exactly `hole` bytes. A gap one byte smaller
   * keeps the two ranges apart; a gap of `hole` bytes fetches across it (one range). With the
   * default chunk size (8 MiB) each coalesced range is one transfer. */
  hole = one_end - one_begin;
  gaps[0] = hole - 1;
  gaps[1] = hole;
  for (k = 0; k < 2; ++k) {
    tf_fetch_options_init(&fetch);
    fetch.coalesce_gap = gaps[k];
    CHECK_CODE(tf_plan_fetch(ckpt, glob, 1, &fetch, &plan, &err), TF_OK, err);
    REQUIRE(plan != NULL);
    for (f = 0; f < src.files; ++f) {
      expected[f] = wanted[f];
      rs_subtract(&expected[f], 0, src.len[f] < HEADER_WINDOW ? src.len[f] : HEADER_WINDOW);
      if (f == one_file) rs_subtract(&expected[f], one_begin, one_end);
      rs_coalesce(&expected[f], gaps[k]);
    }
    CHECK(expected[one_file].n == (k == 0 ? 2u : 1u));
    n = plan_ranges(plan, &src, 8u << 20, got);
    check_sets(got, expected, src.files, k == 0 ? "gap = hole - 1" : "gap = hole");
    CHECK(n == expected[0].n + expected[1].n);
    CHECK(rs_intersects(&got[one_file], one_begin, one_end) == k);
    tf_plan_free(plan);
  }

  /* An odd chunk size: still the fewest transfers, none longer. */
  tf_fetch_options_init(&fetch);
  fetch.chunk_size = 10007;
  fetch.coalesce_gap = 1;
  CHECK_CODE(tf_plan_fetch(ckpt, glob, 1, &fetch, &plan, &err), TF_OK, err);
  REQUIRE(plan != NULL);
  for (f = 0; f < src.files; ++f) {
    expected[f] = wanted[f];
    rs_subtract(&expected[f], 0, src.len[f] < HEADER_WINDOW ? src.len[f] : HEADER_WINDOW);
    if (f == one_file) rs_subtract(&expected[f], one_begin, one_end);
  }
  n = plan_ranges(plan, &src, 10007, got);
  check_sets(got, expected, src.files, "10007-byte chunks");
  CHECK(n == min_transfers(expected, src.files, 10007));
  tf_plan_free(plan);

  /* Planned for a sink, the cache is not subtracted: every selected byte. A download manager
   * that stores the bytes itself assembles every selected tensor from its own transfers. */
  tf_fetch_options_init(&fetch);
  fetch.chunk_size = 65536;
  fetch.coalesce_gap = 1;
  fetch.sink = count_sink_calls; /* only its presence matters: a plan never calls it */
  fetch.user = &g_sink_calls;
  CHECK_CODE(tf_plan_fetch(ckpt, glob, 1, &fetch, &plan, &err), TF_OK, err);
  REQUIRE(plan != NULL);
  for (f = 0; f < src.files; ++f) {
    expected[f] = wanted[f];
    rs_coalesce(&expected[f], 1);
  }
  n = plan_ranges(plan, &src, 65536, got);
  check_sets(got, expected, src.files, "plan for a sink: every selected byte");
  CHECK(n == min_transfers(expected, src.files, 65536));
  CHECK(g_sink_calls == 0);
  alloc_images(&src, image, have);
  CHECK(download_plan(plan, &src, image, have) == rs_bytes(&wanted[0]) + rs_bytes(&wanted[1]));
  for (i = 0; i < tf_tensor_count(ckpt); ++i) {
    uint64_t b, e, x;
    f = tf_tensor_file_index(ckpt, i);
    if (!starts_with(tf_tensor_name(ckpt, i), prefixes[0])) continue;
    tensor_range(ckpt, &src, i, &b, &e);
    for (x = b; x < e && have[f][x] && image[f][x] == (unsigned char)src.bytes[f][x]; ++x) {
    }
    if (!CHECK(x == e)) fprintf(stderr, "  %s: byte %" PRIu64 " missing or different\n", tf_tensor_name(ckpt, i), x);
  }
  free_images(&src, image, have);
  tf_plan_free(plan);

  /* Errors: a pattern that matches nothing; options never initialized. */
  plan = (tf_plan*)&plan;
  CHECK_CODE(tf_plan_fetch(ckpt, (const char* const[]){"model.layers.9.*"}, 1, NULL, &plan, &err), TF_ERR_NOT_FOUND,
             err);
  CHECK(plan == NULL && contains(tf_error_message(err), "model.layers.9.*"));
  tf_error_free(err);

  free_sources(&src);
  tf_close(ckpt);
  free(cache);
}

/* ---- the byte sink ---------------------------------------------------------------------- */

struct sink_log {
  const struct source* src;
  unsigned char* image[MAX_FILES];
  unsigned char* have[MAX_FILES];
  uint64_t bytes;         /* received */
  int calls;
  uint64_t overlaps;      /* bytes received twice */
  int out_of_range;       /* pieces outside their file */
  int cancel_at;          /* return non-zero on this call (1-based); 0: never */
  int calls_after_cancel; /* calls after that one */
  /* Contiguous runs, in arrival order. */
  size_t run_file[MAX_RANGES];
  struct range run[MAX_RANGES];
  size_t n_runs;
};

static void sink_log_init(struct sink_log* log, const struct source* src) {
  size_t f;
  memset(log, 0, sizeof *log);
  log->src = src;
  for (f = 0; f < src->files; ++f) {
    log->image[f] = calloc(1, src->len[f]);
    log->have[f] = calloc(1, src->len[f]);
    REQUIRE(log->image[f] != NULL && log->have[f] != NULL);
  }
}

static void sink_log_destroy(struct sink_log* log) {
  size_t f;
  for (f = 0; f < log->src->files; ++f) {
    free(log->image[f]);
    free(log->have[f]);
  }
}

static int collect(size_t file, uint64_t offset, const void* data, size_t len, void* user) {
  struct sink_log* log = user;
  size_t x;
  ++log->calls;
  if (log->cancel_at != 0 && log->calls > log->cancel_at) ++log->calls_after_cancel;
  if (file >= log->src->files || offset > log->src->len[file] || len > log->src->len[file] - offset ||
      (len > 0 && data == NULL)) {
    ++log->out_of_range;
    return 1;
  }
  for (x = 0; x < len; ++x) log->overlaps += log->have[file][offset + x];
  memcpy(log->image[file] + offset, data, len);
  memset(log->have[file] + offset, 1, len);
  log->bytes += len;
  if (log->n_runs > 0 && log->run_file[log->n_runs - 1] == file && log->run[log->n_runs - 1].end == offset) {
    log->run[log->n_runs - 1].end += len;
  } else if (log->n_runs < MAX_RANGES) {
    log->run_file[log->n_runs] = file;
    log->run[log->n_runs].begin = offset;
    log->run[log->n_runs].end = offset + len;
    ++log->n_runs;
  }
  return log->cancel_at != 0 && log->calls >= log->cancel_at;
}

/* CHECKs that the sink received exactly the bytes of `wanted`, each once, equal to the source. */
static void check_sink_bytes(const struct sink_log* log, const struct range_set* wanted) {
  size_t f, i;
  uint64_t total = 0;
  CHECK(log->overlaps == 0 && log->out_of_range == 0);
  for (f = 0; f < log->src->files; ++f) {
    for (i = 0; i < wanted[f].n; ++i) {
      uint64_t x;
      const struct range r = wanted[f].r[i];
      for (x = r.begin; x < r.end && log->have[f][x] && log->image[f][x] == (unsigned char)log->src->bytes[f][x]; ++x) {
      }
      if (!CHECK(x == r.end)) fprintf(stderr, "  file %zu: byte %" PRIu64 " missing or different\n", f, x);
    }
    total += rs_bytes(&wanted[f]);
  }
  CHECK(log->bytes == total); /* and no byte twice: nothing else either */
}

/* Fetching into a sink: exactly the selected bytes reach it (cached or not), the cache is left
 * alone; with one connection they arrive in plan order; non-zero from the sink cancels. */
static void test_remote_sink(const char* endpoint, const char* repo) {
  char* cache = path_join(g_tmp, "cache-sink");
  tf_open_options options;
  tf_fetch_options fetch;
  tf_fetch_stats stats;
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;
  tf_plan* plan = NULL;
  const char* patterns[] = {"model.layers.0.mlp.*", "lm_head.weight", "model.layers.1.input_layernorm.weight"};
  const char* prefixes[] = {"model.layers.0.mlp.", "lm_head.weight", "model.layers.1.input_layernorm.weight"};
  const char* up[] = {"model.layers.0.mlp.up_proj.weight"};
  static struct range_set wanted[MAX_FILES], expected[MAX_FILES], got[MAX_FILES];
  struct source src;
  struct sink_log log;
  const void* data = NULL;
  size_t len = 0, f, i, k;

  remote_options(&options, endpoint, cache);
  CHECK_CODE(tf_open("gen/model", &options, &ckpt, &err), TF_OK, err);
  REQUIRE(ckpt != NULL);
  load_sources(ckpt, repo, &src);
  wanted_ranges(ckpt, &src, prefixes, 3, wanted);

  /* One of the tensors is in the cache already: the sink gets its bytes all the same. */
  CHECK_CODE(tf_fetch(ckpt, up, 1, NULL, NULL, &err), TF_OK, err);

  sink_log_init(&log, &src);
  tf_fetch_options_init(&fetch);
  fetch.connections = 4;
  fetch.chunk_size = 65536;
  fetch.coalesce_gap = 1;
  fetch.sink = collect;
  fetch.user = &log;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch(ckpt, patterns, 3, &fetch, &stats, &err), TF_OK, err);
  check_sink_bytes(&log, wanted);
  CHECK(stats.bytes_transferred == log.bytes && stats.bytes_cached == 0);
  /* Nothing of it went into the cache. */
  CHECK(tf_tensor_data(ckpt, "lm_head.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  CHECK(tf_tensor_data(ckpt, "model.layers.0.mlp.gate_proj.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  CHECK(tf_tensor_data(ckpt, "model.layers.0.mlp.down_proj.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  CHECK(tf_tensor_data(ckpt, up[0], &data, &len) == TF_OK);
  sink_log_destroy(&log);

  /* One connection: one transfer at a time, in the plan's order, so the pieces arrive as one
   * contiguous run per planned range, in file and offset order. The plan for the same options
   * is exactly what the fetch transferred. */
  sink_log_init(&log, &src);
  fetch.connections = 1;
  fetch.user = &log;
  CHECK_CODE(tf_plan_fetch(ckpt, patterns, 3, &fetch, &plan, &err), TF_OK, err);
  REQUIRE(plan != NULL);
  CHECK(log.calls == 0);
  for (f = 0; f < src.files; ++f) {
    expected[f] = wanted[f];
    rs_coalesce(&expected[f], 1);
  }
  plan_ranges(plan, &src, 65536, got);
  check_sets(got, expected, src.files, "plan for the sink");
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch(ckpt, patterns, 3, &fetch, &stats, &err), TF_OK, err);
  check_sink_bytes(&log, wanted);
  CHECK(stats.chunks == tf_plan_count(plan));
  k = 0;
  for (f = 0; f < src.files; ++f) {
    for (i = 0; i < expected[f].n; ++i, ++k) {
      if (!CHECK(k < log.n_runs && log.run_file[k] == f && log.run[k].begin == expected[f].r[i].begin &&
                 log.run[k].end == expected[f].r[i].end)) {
        fprintf(stderr, "  run %zu differs from file %zu [%" PRIu64 ", %" PRIu64 ")\n", k, f, expected[f].r[i].begin,
                expected[f].r[i].end);
      }
    }
  }
  CHECK(log.n_runs == k);
  tf_plan_free(plan);
  sink_log_destroy(&log);

  /* Non-zero from the sink cancels: TF_ERR_CANCELLED, and the sink is not called again. */
  sink_log_init(&log, &src);
  log.cancel_at = 3;
  fetch.connections = 4;
  fetch.user = &log;
  CHECK_CODE(tf_fetch(ckpt, patterns, 3, &fetch, NULL, &err), TF_ERR_CANCELLED, err);
  CHECK(contains(tf_error_message(err), "sink"));
  tf_error_free(err);
  err = NULL;
  CHECK(log.calls == 3 && log.calls_after_cancel == 0);
  CHECK(tf_tensor_data(ckpt, "lm_head.weight", &data, &len) == TF_ERR_NOT_FETCHED);
  sink_log_destroy(&log);

  /* A caller built against the header before `sink` existed: the field is not read (its
   * size says so), and the bytes go into the cache. */
  sink_log_init(&log, &src);
  fetch.size = offsetof(tf_fetch_options, sink);
  fetch.user = &log;
  CHECK_CODE(tf_fetch(ckpt, patterns, 3, &fetch, NULL, &err), TF_OK, err);
  CHECK(log.calls == 0);
  CHECK(tf_tensor_data(ckpt, "lm_head.weight", &data, &len) == TF_OK);
  if (tf_find(ckpt, "lm_head.weight", &i)) {
    uint64_t b, e;
    tensor_range(ckpt, &src, i, &b, &e);
    CHECK(len == e - b && memcmp(data, src.bytes[tf_tensor_file_index(ckpt, i)] + b, len) == 0);
  }
  sink_log_destroy(&log);

  free_sources(&src);
  tf_close(ckpt);
  free(cache);
}

/* ---- per-file progress ---------------------------------------------------------------------- */

struct file_log {
  int calls;
  int bad;         /* calls whose data broke a rule (printed) */
  int max_partial; /* most files seen at once with 0 < done < total */
  size_t n_files;
  tf_file_progress last[MAX_FILES];
  uint64_t bytes_done, bytes_total;
};

static int log_files(const tf_progress* p, void* user) {
  struct file_log* log = user;
  uint64_t done = 0, total = 0;
  size_t i;
  int partial = 0, bad = 0;
  ++log->calls;
  if (!TF_HAS_FIELD(p, files) || p->size != sizeof(tf_progress) || p->n_files != p->files_total ||
      p->n_files > MAX_FILES || (p->n_files > 0 && p->files == NULL)) {
    fprintf(stderr, "  progress: size %zu, n_files %zu, files_total %zu\n", p->size, p->n_files, p->files_total);
    ++log->bad;
    return 0;
  }
  for (i = 0; i < p->n_files; ++i) {
    const tf_file_progress* fp = &p->files[i];
    if (i > 0 && fp->file <= p->files[i - 1].file) bad = 1;        /* in file order */
    if (fp->bytes_done > fp->bytes_total) bad = 1;
    if (log->n_files == p->n_files &&                               /* the same files; done grows */
        (fp->file != log->last[i].file || fp->bytes_done < log->last[i].bytes_done ||
         fp->bytes_total != log->last[i].bytes_total)) {
      bad = 1;
    }
    if (fp->bytes_done > 0 && fp->bytes_done < fp->bytes_total) ++partial;
    done += fp->bytes_done;
    total += fp->bytes_total;
  }
  if (done != p->bytes_done || total != p->bytes_total) bad = 1; /* the sums are the totals */
  if (bad) {
    fprintf(stderr, "  progress call %d: %" PRIu64 "/%" PRIu64 " bytes; per file:", log->calls, p->bytes_done,
            p->bytes_total);
    for (i = 0; i < p->n_files; ++i) {
      fprintf(stderr, " #%zu %" PRIu64 "/%" PRIu64, p->files[i].file, p->files[i].bytes_done, p->files[i].bytes_total);
    }
    fprintf(stderr, "\n");
    ++log->bad;
  }
  if (partial > log->max_partial) log->max_partial = partial;
  log->n_files = p->n_files;
  for (i = 0; i < p->n_files; ++i) log->last[i] = p->files[i];
  log->bytes_done = p->bytes_done;
  log->bytes_total = p->bytes_total;
  return 0;
}

/* connections = 1 and per-file progress: the files' figures add up to the totals, grow, and
 * only one file is in transfer at a time. */
static void test_remote_progress(const char* endpoint, const char* repo) {
  char* cache = path_join(g_tmp, "cache-progress");
  tf_open_options options;
  tf_fetch_options fetch;
  tf_fetch_stats stats;
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;
  const char* lm_head[] = {"lm_head.weight"};
  static struct range_set rest[MAX_FILES];
  struct source src;
  struct file_log log;
  size_t f, index = 0;
  uint64_t b = 0, e = 0;

  remote_options(&options, endpoint, cache);
  CHECK_CODE(tf_open("gen/model", &options, &ckpt, &err), TF_OK, err);
  REQUIRE(ckpt != NULL);
  load_sources(ckpt, repo, &src);

  /* A tensor of one file: one element, for that file. */
  memset(&log, 0, sizeof log);
  tf_fetch_options_init(&fetch);
  fetch.connections = 1;
  fetch.chunk_size = 65536;
  fetch.progress = log_files;
  fetch.user = &log;
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch(ckpt, lm_head, 1, &fetch, &stats, &err), TF_OK, err);
  REQUIRE(tf_find(ckpt, lm_head[0], &index));
  tensor_range(ckpt, &src, index, &b, &e);
  CHECK(log.calls >= 1 && log.bad == 0 && log.max_partial <= 1);
  CHECK(log.n_files == 1 && log.last[0].file == tf_tensor_file_index(ckpt, index));
  CHECK(log.last[0].bytes_done == e - b && log.last[0].bytes_total == e - b);
  CHECK(stats.bytes_transferred == e - b);

  /* Everything, one transfer at a time: the rest of each file past what open read. */
  memset(&log, 0, sizeof log);
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch_all(ckpt, &fetch, &stats, &err), TF_OK, err);
  CHECK(log.calls >= 2 && log.bad == 0);
  CHECK(log.max_partial <= 1);
  CHECK(log.n_files == src.files);
  for (f = 0; f < src.files && f < log.n_files; ++f) {
    rest[f].n = 0;
    rs_add(&rest[f], src.len[f] < HEADER_WINDOW ? src.len[f] : HEADER_WINDOW, src.len[f]);
    if (f == tf_tensor_file_index(ckpt, index)) rs_subtract(&rest[f], b, e);
    CHECK(log.last[f].file == f);
    CHECK(log.last[f].bytes_done == log.last[f].bytes_total);
    if (!CHECK(log.last[f].bytes_total == rs_bytes(&rest[f]))) {
      fprintf(stderr, "  file %zu: %" PRIu64 " bytes to transfer, want %" PRIu64 "\n", f, log.last[f].bytes_total,
              rs_bytes(&rest[f]));
    }
  }
  CHECK(log.bytes_done == stats.bytes_transferred && log.bytes_total == stats.bytes_transferred);
  CHECK(stats.chunks == min_transfers(rest, src.files, 65536));
  CHECK(stats.requests == stats.chunks && stats.retries == 0); /* one request each, one after the other */
  check_against_files(ckpt, repo);

  free_sources(&src);
  tf_close(ckpt);
  free(cache);
}

/* ---- publishing into the Hugging Face cache ------------------------------------------------- */

/* `snapshots/COMMIT/PATH` in `repo_dir` is a relative symlink to `blobs/BLOB`, a regular file
 * with the bytes of `source`. */
static void check_published(const char* repo_dir, const char* commit, const char* path, const char* source,
                            const char* blob_name) {
  char blob[1024], link[1024], target[1024], want[1024], real_link[4096], real_blob[4096];
  struct stat st;
  ssize_t n;
  const char* p;
  size_t w = 0;
  snprintf(blob, sizeof blob, "%s/blobs/%s", repo_dir, blob_name);
  snprintf(link, sizeof link, "%s/snapshots/%s/%s", repo_dir, commit, path);
  if (!CHECK(stat(blob, &st) == 0 && S_ISREG(st.st_mode))) fprintf(stderr, "  no blob %s\n", blob);
  if (!CHECK(files_equal(blob, source))) fprintf(stderr, "  %s differs from %s\n", blob, source);
  if (!CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode))) {
    fprintf(stderr, "  no symlink %s\n", link);
    return;
  }
  n = readlink(link, target, sizeof target - 1);
  REQUIRE(n > 0);
  target[n] = '\0';
  /* ../../blobs/BLOB from snapshots/COMMIT/, one more ../ per directory in PATH */
  w += (size_t)snprintf(want + w, sizeof want - w, "../../");
  for (p = path; *p != '\0'; ++p) {
    if (*p == '/') w += (size_t)snprintf(want + w, sizeof want - w, "../");
  }
  snprintf(want + w, sizeof want - w, "blobs/%s", blob_name);
  if (!CHECK(strcmp(target, want) == 0)) fprintf(stderr, "  %s -> %s, want %s\n", link, target, want);
  CHECK(realpath(link, real_link) != NULL && realpath(blob, real_blob) != NULL && strcmp(real_link, real_blob) == 0);
}

/* tf_fetch_all, then tf_publish_to_hf_cache into a fresh hub cache: the layout huggingface_hub
 * reads; then tensorfetch itself reads the published files (no transfer) and opens offline. */
static void test_remote_publish(const char* endpoint, const char* repo, const char* manifest) {
  char* cache = path_join(g_tmp, "cache-publish");
  char* cache2 = path_join(g_tmp, "cache-publish-2");
  char* hub = path_join(g_tmp, "hf-hub");
  char* repo_dir = path_join(hub, "models--ref--tiny-sharded");
  static const char* small_files[] = {"model.safetensors.index.json", "config.json"};
  tf_open_options options;
  tf_fetch_stats stats;
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;
  tf_plan* plan = NULL;
  const char* all[] = {"*"};
  char want_commit[41], path[1024];
  const char* commit;
  char* ref;
  size_t published = 99, f, i;
  struct stat st;

  remote_options(&options, endpoint, cache);
  options.hf_hub_cache = hub;
  CHECK_CODE(tf_open("hf://ref/tiny-sharded", &options, &ckpt, &err), TF_OK, err);
  REQUIRE(ckpt != NULL);
  commit = tf_commit(ckpt);
  sha1_hex("ref/tiny-sharded", strlen("ref/tiny-sharded"), want_commit); /* the test server's commit */
  REQUIRE(commit != NULL);
  CHECK(strcmp(commit, want_commit) == 0);

  /* Nothing whole in the cache yet: no safetensors file is published. */
  CHECK_CODE(tf_publish_to_hf_cache(ckpt, &published, &err), TF_OK, err);
  CHECK(published == 0);
  snprintf(path, sizeof path, "%s/snapshots/%s/%s", repo_dir, commit, tf_file_path(ckpt, 0));
  CHECK(lstat(path, &st) != 0);

  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch_all(ckpt, NULL, &stats, &err), TF_OK, err);
  for (i = 0; i < 2; ++i) { /* publishing again changes nothing */
    published = 0;
    CHECK_CODE(tf_publish_to_hf_cache(ckpt, &published, &err), TF_OK, err);
    CHECK(published == 3);
    for (f = 0; f < tf_file_count(ckpt); ++f) {
      char* source = path_join(repo, tf_file_path(ckpt, f));
      size_t len = 0;
      char* bytes = read_file(source, &len);
      char sha[65];
      REQUIRE(bytes != NULL);
      sha256_hex(bytes, len, sha);
      check_published(repo_dir, commit, tf_file_path(ckpt, f), source, sha);
      free(bytes);
      free(source);
    }
    for (f = 0; f < sizeof small_files / sizeof small_files[0]; ++f) {
      char* source = path_join(repo, small_files[f]);
      size_t len = 0;
      char* bytes = read_file(source, &len);
      char sha1[41];
      REQUIRE(bytes != NULL);
      git_blob_sha1_hex(bytes, len, sha1);
      check_published(repo_dir, commit, small_files[f], source, sha1);
      free(bytes);
      free(source);
    }
    snprintf(path, sizeof path, "%s/refs/main", repo_dir);
    ref = read_file(path, NULL);
    if (CHECK(ref != NULL)) {
      size_t n = strlen(ref);
      while (n > 0 && (ref[n - 1] == '\n' || ref[n - 1] == '\r')) ref[--n] = '\0';
      CHECK(strcmp(ref, commit) == 0);
    }
    free(ref);
  }
  tf_close(ckpt);

  /* With an empty cache of its own and that hub cache, tensorfetch reads every file from the
   * published blobs: nothing to plan, nothing transferred, every tensor right. */
  remote_options(&options, endpoint, cache2);
  options.hf_hub_cache = hub;
  CHECK_CODE(tf_open("hf://ref/tiny-sharded", &options, &ckpt, &err), TF_OK, err);
  REQUIRE(ckpt != NULL);
  CHECK_CODE(tf_plan_fetch(ckpt, all, 1, NULL, &plan, &err), TF_OK, err);
  CHECK(plan != NULL && tf_plan_count(plan) == 0);
  tf_plan_free(plan);
  tf_fetch_stats_init(&stats);
  CHECK_CODE(tf_fetch_all(ckpt, NULL, &stats, &err), TF_OK, err);
  CHECK(stats.bytes_transferred == 0 && stats.requests == 0);
  check_against_manifest(ckpt, manifest, "llama-tiny-sharded");
  tf_close(ckpt);

  /* Offline (no request at all) from what the first fetch recorded. */
  remote_options(&options, endpoint, cache);
  options.hf_hub_cache = hub;
  options.offline = 1;
  CHECK_CODE(tf_open("hf://ref/tiny-sharded", &options, &ckpt, &err), TF_OK, err);
  if (ckpt != NULL) {
    CHECK(tf_commit(ckpt) != NULL && strcmp(tf_commit(ckpt), want_commit) == 0);
    check_against_manifest(ckpt, manifest, "llama-tiny-sharded");
    tf_close(ckpt);
  }

  free(cache);
  free(cache2);
  free(hub);
  free(repo_dir);
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
  err = NULL;

  /* A group-writable cache: refused unless the options say it is shared by a group. */
  {
    const char* layer0[] = {"model.layers.0.*"};
    REQUIRE(mkdir(cache, 0770) == 0);
    REQUIRE(chmod(cache, 0770) == 0);
    remote_options(&options, endpoint, cache);
    options.shared_cache = 0;
    CHECK_CODE(tf_open("hf://ref/tiny-sharded", &options, &ckpt, &err), TF_OK, err);
    CHECK_CODE(tf_fetch(ckpt, layer0, 1, NULL, NULL, &err), TF_ERR_IO, err);
    CHECK(contains(tf_error_message(err), "writable by its group"));
    CHECK(contains(tf_error_message(err), "shared"));
    tf_error_free(err);
    err = NULL;
    tf_close(ckpt);
    options.shared_cache = 1;
    CHECK_CODE(tf_open("hf://ref/tiny-sharded", &options, &ckpt, &err), TF_OK, err);
    CHECK_CODE(tf_fetch(ckpt, layer0, 1, NULL, NULL, &err), TF_OK, err);
    tf_close(ckpt);
  }
  free(cache);
}

/* GETs `endpoint` + `path` (an admin route of the test server) into `out` (NUL-terminated, at
 * most `cap` - 1 bytes). Returns the HTTP status. */
static long admin_get(const char* endpoint, const char* path, char* out, size_t cap) {
  struct body b;
  char url[512];
  long status = 0;
  CURL* curl = curl_easy_init();
  REQUIRE(curl != NULL);
  memset(&b, 0, sizeof b);
  b.buf = (unsigned char*)out;
  b.cap = cap - 1;
  snprintf(url, sizeof url, "%s%s", endpoint, path);
  curl_easy_setopt(curl, CURLOPT_URL, url);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  out[b.len] = '\0';
  return status;
}

/* Issue 14, item 5: a token with CR/LF (or any control character) given in
 * tf_open_options.token is refused before any request: TF_ERR_INVALID_ARGUMENT (exit 1), a
 * message naming the option and never the token; the server's log stays empty. */
static void test_remote_token_injection(const char* endpoint) {
  static const char* bad_tokens[] = {"hf_secret\r\nX-Evil: 1", "hf_secret\n", "hf_secret\x1b[2J"};
  char* cache = path_join(g_tmp, "cache-token");
  char log[4096];
  size_t i;
  tf_open_options options;
  remote_options(&options, endpoint, cache);
  for (i = 0; i < sizeof bad_tokens / sizeof bad_tokens[0]; ++i) {
    tf_checkpoint* ckpt = (tf_checkpoint*)&ckpt;
    tf_error* err = NULL;
    REQUIRE(admin_get(endpoint, "/_admin/clear", log, sizeof log) == 200);
    options.token = bad_tokens[i];
    CHECK_CODE(tf_open("hf://gen/model", &options, &ckpt, &err), TF_ERR_INVALID_ARGUMENT, err);
    CHECK(ckpt == NULL);
    CHECK(tf_code_exit_code(tf_error_code(err)) == 1);
    CHECK(contains(tf_error_message(err), "tf_open_options.token"));
    CHECK(contains(tf_error_message(err), "control character"));
    CHECK(!contains(tf_error_message(err), "hf_secret") && !contains(tf_error_message(err), "Evil"));
    tf_error_free(err);
    REQUIRE(admin_get(endpoint, "/_admin/log", log, sizeof log) == 200);
    if (!CHECK(log[0] == '\0')) fprintf(stderr, "  requests were sent:\n%s\n", log);
  }
  free(cache);
}

/* ---- cancellation (tf_cancel_token, tf_cancel) ------------------------------------------- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* The token on its own, and a tf_open given a token that is already cancelled. */
static void test_cancel_token(const char* ref) {
  char* single = path_join(ref, "llama-tiny-single");
  tf_cancel_token* token = tf_cancel_token_new();
  tf_open_options options;
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;
  REQUIRE(token != NULL);
  CHECK(tf_cancel_token_cancelled(token) == 0);
  CHECK(tf_cancel_token_cancelled(NULL) == 0);
  tf_cancel_token_cancel(NULL);
  tf_cancel_token_reset(NULL);
  tf_cancel_token_free(NULL);
  tf_open_options_init(&options);
  CHECK(options.cancel == NULL);
  options.cancel = token;
  CHECK_CODE(tf_open(single, &options, &ckpt, &err), TF_OK, err);
  tf_close(ckpt);
  ckpt = NULL;
  tf_cancel_token_cancel(token);
  CHECK(tf_cancel_token_cancelled(token) == 1);
  CHECK_CODE(tf_open(single, &options, &ckpt, &err), TF_ERR_CANCELLED, err);
  CHECK(ckpt == NULL);
  CHECK(tf_code_exit_code(tf_error_code(err)) == 1);
  tf_error_free(err);
  err = NULL;
  tf_cancel_token_reset(token);
  CHECK(tf_cancel_token_cancelled(token) == 0);
  CHECK_CODE(tf_open(single, &options, &ckpt, &err), TF_OK, err);
  tf_close(ckpt);
  tf_cancel_token_free(token);
  free(single);
}

/* GETs `endpoint`/_admin/set?`query` (a switch of the test server). */
static void server_switch(const char* endpoint, const char* query) {
  char url[512];
  CURL* curl = curl_easy_init();
  long status = 0;
  REQUIRE(curl != NULL);
  snprintf(url, sizeof url, "%s/_admin/set?%s", endpoint, query);
  curl_easy_setopt(curl, CURLOPT_URL, url);
  curl_easy_setopt(curl, CURLOPT_NOBODY, 0L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, NULL);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, stderr);
  CHECK(curl_easy_perform(curl) == CURLE_OK);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  CHECK(status == 200);
  curl_easy_cleanup(curl);
}

struct delayed_cancel {
  tf_cancel_token* token; /* cancels this, */
  tf_checkpoint* ckpt;    /* or else tf_cancel(ckpt) */
  int delay_ms;
  double at_ms; /* when it cancelled */
};

static void* cancel_later(void* arg) {
  struct delayed_cancel* d = arg;
  struct timespec ts = {d->delay_ms / 1000, (long)(d->delay_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  d->at_ms = now_ms();
  if (d->token != NULL) {
    tf_cancel_token_cancel(d->token);
  } else {
    tf_cancel(d->ckpt);
  }
  return NULL;
}

/* A server that stops sending: tf_open (through a tf_cancel_token) and tf_fetch (through
 * tf_cancel) return TF_ERR_CANCELLED well within a second of the cancel, long before the stall
 * timeout (30 s by default). */
static void test_remote_cancel_stalled(const char* endpoint, const char* repo) {
  char* cache = path_join(g_tmp, "cache-cancel");
  char location[512];
  tf_open_options options;
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;
  pthread_t thread;
  struct delayed_cancel d;
  tf_code code;
  double took;
  const char* all[] = {"*"};
  snprintf(location, sizeof location, "hf://%s", repo);

  /* Every CDN response stalls before its first byte: the open's header read. */
  server_switch(endpoint, "stall_after=0&n=-1&match=/cdn/&stall_ms=4000");
  remote_options(&options, endpoint, cache);
  options.cancel = tf_cancel_token_new();
  REQUIRE(options.cancel != NULL);
  memset(&d, 0, sizeof d);
  d.token = options.cancel;
  d.delay_ms = 300;
  REQUIRE(pthread_create(&thread, NULL, cancel_later, &d) == 0);
  code = tf_open(location, &options, &ckpt, &err);
  took = now_ms() - d.at_ms;
  pthread_join(thread, NULL);
  CHECK_CODE(code, TF_ERR_CANCELLED, err);
  CHECK(ckpt == NULL);
  if (!CHECK(took < 500.0)) fprintf(stderr, "  tf_open returned %.0f ms after the cancel\n", took);
  tf_error_free(err);
  err = NULL;
  tf_cancel_token_free(options.cancel);
  options.cancel = NULL;

  /* Open normally, then stall the tensor transfers and tf_cancel from another thread. */
  server_switch(endpoint, "reset=1");
  CHECK_CODE(tf_open(location, &options, &ckpt, &err), TF_OK, err);
  REQUIRE(ckpt != NULL);
  server_switch(endpoint, "stall_after=0&n=-1&match=/cdn/&stall_ms=4000");
  memset(&d, 0, sizeof d);
  d.ckpt = ckpt;
  d.delay_ms = 300;
  REQUIRE(pthread_create(&thread, NULL, cancel_later, &d) == 0);
  code = tf_fetch(ckpt, all, 1, NULL, NULL, &err);
  took = now_ms() - d.at_ms;
  pthread_join(thread, NULL);
  CHECK_CODE(code, TF_ERR_CANCELLED, err);
  if (!CHECK(took < 500.0)) fprintf(stderr, "  tf_fetch returned %.0f ms after tf_cancel\n", took);
  tf_error_free(err);
  err = NULL;
  /* The cancel was consumed: with the server answering again, the next fetch completes. */
  server_switch(endpoint, "reset=1");
  CHECK_CODE(tf_fetch(ckpt, all, 1, NULL, NULL, &err), TF_OK, err);
  tf_close(ckpt);
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
    test_cancel_token(ref);
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
    REQUIRE(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
    test_remote_reference(endpoint, manifest);
    test_remote_generated(endpoint, gen_repo);
    test_remote_plan(endpoint, gen_repo);
    test_remote_sink(endpoint, gen_repo);
    test_remote_progress(endpoint, gen_repo);
    test_remote_publish(endpoint, ref_repo, manifest);
    test_remote_errors(endpoint);
    test_remote_token_injection(endpoint);
    test_remote_cancel_stalled(endpoint, "gen/model");
    curl_global_cleanup();
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
