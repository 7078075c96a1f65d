/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A C smoke test of the C API: include/tensorfetch/tensorfetch.h compiles as C11 (with
 * -Wpedantic -Werror), the shared library links from C, one open/inspect/fetch round trip
 * works on a reference checkpoint (its bytes compared with the file read here with stdio), and
 * error paths return their codes. The behaviour of the API is tested from C++ (Catch2) in
 * test_capi_local.cc and test_capi_remote.cc.
 *
 * Environment (set by tests/capi/meson.build): TENSORFETCH_REFERENCE_DIR.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorfetch/tensorfetch.h"

static int g_failures = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      ++g_failures;                                                          \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)

/* The whole file; NULL if it cannot be read. */
static unsigned char* read_file(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  unsigned char* data = NULL;
  long size;
  if (f == NULL) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    data = malloc((size_t)size + 1);
    if (data != NULL && fread(data, 1, (size_t)size, f) != (size_t)size) {
      free(data);
      data = NULL;
    }
    *len = (size_t)size;
  }
  fclose(f);
  return data;
}

int main(void) {
  const char* ref = getenv("TENSORFETCH_REFERENCE_DIR");
  char location[4096], file[4096];
  const char* all[] = {"*"};
  const char* missing_pattern[] = {"no.such.*"};
  tf_checkpoint* ckpt = NULL;
  tf_error* err = NULL;
  tf_open_options options;
  tf_fetch_stats stats;
  unsigned char* bytes;
  size_t len = 0, i, ndim = 0, index = 0;
  uint64_t header = 0;
  int k;
  tf_code code;

  if (ref == NULL || *ref == '\0') {
    fprintf(stderr, "TENSORFETCH_REFERENCE_DIR is not set (run through meson test)\n");
    return 1;
  }
  CHECK(strcmp(tf_version(), EXPECTED_VERSION) == 0);
  CHECK(strcmp(tf_code_name(TF_ERR_INTEGRITY), "Integrity") == 0 && tf_code_exit_code(TF_ERR_INTEGRITY) == 4);

  /* open, inspect, fetch, read: llama-tiny-single */
  snprintf(location, sizeof location, "%s/llama-tiny-single/model.safetensors", ref);
  code = tf_open(location, NULL, &ckpt, &err);
  if (code != TF_OK) {
    fprintf(stderr, "tf_open %s: %s: %s\n", location, tf_code_name(code), tf_error_message(err));
    return 1;
  }
  CHECK(err == NULL);
  CHECK(tf_file_count(ckpt) == 1 && tf_tensor_count(ckpt) == 57 && tf_is_remote(ckpt) == 0);
  CHECK(tf_find(ckpt, "lm_head.weight", &index) == 1);
  CHECK(strcmp(tf_tensor_dtype(ckpt, index), "BF16") == 0);
  CHECK(tf_tensor_shape(ckpt, index, &ndim) != NULL && ndim == 2);
  tf_fetch_stats_init(&stats);
  code = tf_fetch(ckpt, all, 1, NULL, &stats, &err);
  CHECK(code == TF_OK && stats.bytes_transferred == 0);

  bytes = read_file(location, &len);
  CHECK(bytes != NULL && len >= 8 && tf_file_size(ckpt, 0) == len);
  if (bytes != NULL && len >= 8) {
    for (k = 7; k >= 0; --k) header = (header << 8) | bytes[k];
    for (i = 0; i < tf_tensor_count(ckpt); ++i) {
      const void* data = NULL;
      size_t n = 0;
      uint64_t begin = 0, end = 0;
      CHECK(tf_tensor_data(ckpt, tf_tensor_name(ckpt, i), &data, &n) == TF_OK);
      CHECK(tf_tensor_data_offsets(ckpt, i, &begin, &end) == TF_OK && end - begin == n);
      CHECK(8 + header + end <= len && (n == 0 || memcmp(data, bytes + 8 + header + begin, n) == 0));
    }
  }
  free(bytes);

  /* error paths return codes (and an error whose code and message say so) */
  code = tf_fetch(ckpt, missing_pattern, 1, NULL, NULL, &err);
  CHECK(code == TF_ERR_NOT_FOUND && tf_error_code(err) == TF_ERR_NOT_FOUND);
  CHECK(strstr(tf_error_message(err), "no.such.*") != NULL);
  tf_error_free(err);
  err = NULL;
  tf_close(ckpt);

  snprintf(file, sizeof file, "%s/no-such-file.safetensors", ref);
  ckpt = (tf_checkpoint*)&ckpt;
  CHECK(tf_open(file, NULL, &ckpt, &err) == TF_ERR_NOT_FOUND && ckpt == NULL);
  CHECK(err != NULL && strstr(tf_error_message(err), file) != NULL);
  tf_error_free(err);
  err = NULL;
  CHECK(tf_open(NULL, NULL, &ckpt, NULL) == TF_ERR_INVALID_ARGUMENT);
  memset(&options, 0, sizeof options); /* size never set */
  CHECK(tf_open(location, &options, &ckpt, NULL) == TF_ERR_INVALID_ARGUMENT && ckpt == NULL);
  tf_open_options_init(&options);
  CHECK(options.size == sizeof options);

  if (g_failures == 0) printf("C smoke test: all checks passed\n");
  return g_failures == 0 ? 0 : 1;
}
