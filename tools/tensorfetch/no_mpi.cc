// SPDX-License-Identifier: Apache-2.0
// `--mpi` in a build without the meson feature `mpi`: a clear error (exit 1, a usage error).
#include "commands.h"

namespace tensorfetch::cli {

namespace {

int without_mpi() {
  return report(Error{ErrorCode::InvalidArgument,
                      "--mpi: this tensorfetch was built without MPI (the meson feature `mpi`: install an MPI "
                      "library, e.g. Debian's libopenmpi-dev, and configure with -Dmpi=enabled)"});
}

}  // namespace

int run_get_mpi(const GetOptions&) { return without_mpi(); }

int run_download_mpi(const DownloadOptions&) { return without_mpi(); }

}  // namespace tensorfetch::cli
