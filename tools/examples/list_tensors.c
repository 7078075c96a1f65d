/* SPDX-License-Identifier: Apache-2.0 */
/*
 * list_tensors: opens a safetensors checkpoint and prints one line per tensor,
 *
 *     NAME <TAB> DTYPE <TAB> [D0, D1, ...] <TAB> FILE
 *
 * then a summary line. LOCATION is anything `tensorfetch inspect` accepts: a .safetensors
 * file, an index, a directory, an http(s) URL, or a Hub repo (hf://ORG/NAME, ORG/NAME);
 * remote checkpoints are read from their headers alone.
 *
 * A C program using nothing but the C header and the installed library:
 *
 *     cc list_tensors.c $(pkg-config --cflags --libs tensorfetch) -o list_tensors
 *
 * Exit codes are those of the tensorfetch command line (tf_code_exit_code).
 */
#include <inttypes.h>
#include <stdio.h>

#include <tensorfetch/tensorfetch.h>

int main(int argc, char** argv) {
  tf_checkpoint* checkpoint = NULL;
  tf_error* error = NULL;
  tf_code code;
  size_t i, n;

  if (argc != 2) {
    fprintf(stderr, "usage: %s LOCATION\n", argv[0]);
    return 1;
  }
  code = tf_open(argv[1], NULL, &checkpoint, &error);
  if (code != TF_OK) {
    int rc = tf_code_exit_code(code);
    fprintf(stderr, "list_tensors: error (%s): %s\n", tf_code_name(code), tf_error_message(error));
    tf_error_free(error);
    return rc;
  }

  n = tf_tensor_count(checkpoint);
  for (i = 0; i < n; ++i) {
    size_t ndim = 0, d;
    const uint64_t* shape = tf_tensor_shape(checkpoint, i, &ndim);
    printf("%s\t%s\t[", tf_tensor_name(checkpoint, i), tf_tensor_dtype(checkpoint, i));
    for (d = 0; d < ndim; ++d) printf("%s%" PRIu64, d > 0 ? ", " : "", shape[d]);
    printf("]\t%s\n", tf_tensor_file(checkpoint, i));
  }
  printf("%zu tensors in %zu file(s) (tensorfetch %s)\n", n, tf_file_count(checkpoint), tf_version());

  tf_close(checkpoint);
  return 0;
}
