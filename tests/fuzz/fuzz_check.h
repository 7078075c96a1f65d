// SPDX-License-Identifier: Apache-2.0
// Private to the fuzz targets: an invariant check that survives NDEBUG and aborts with a
// message, so that libFuzzer records the input as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

/// Aborts with `file:line: invariant violated: COND (MSG)` when `cond` is false.
#define FUZZ_CHECK(cond, msg)                                                         \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: invariant violated: %s (%s)\n", __FILE__, __LINE__, \
                   #cond, std::string(msg).c_str());                                  \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
