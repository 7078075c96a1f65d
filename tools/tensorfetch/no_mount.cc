// SPDX-License-Identifier: Apache-2.0
// `tensorfetch mount` and `unmount` in a build without the meson feature `fuse`: a clear error.
#include <iostream>

#include "commands.h"

namespace tensorfetch::cli {

namespace {
int not_built() {
  std::cerr << "tensorfetch: error: this tensorfetch was built without FUSE support (the meson feature `fuse`: "
               "install libfuse3-dev and fuse3, then reconfigure)\n";
  return 1;
}
}  // namespace

int run_mount(const MountCliOptions&) { return not_built(); }
int run_unmount(const std::string&) { return not_built(); }

}  // namespace tensorfetch::cli
