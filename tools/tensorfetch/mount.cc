// SPDX-License-Identifier: Apache-2.0
// `tensorfetch mount LOCATION DIR` and `tensorfetch unmount DIR` (tensorfetch/mount.hpp), built
// with the meson feature `fuse`. The mount runs in the foreground until unmounted or
// SIGINT/SIGTERM (then unmounts); --daemon forks once the mount is ready, and the parent returns.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "escape.h"
#include "tensorfetch/mount.hpp"

namespace tensorfetch::cli {

namespace {

// Serves in a child process; the parent exits 0 (the mount is ready: the kernel queues requests
// until the child reads them). The child leaves the terminal: new session, standard streams on
// /dev/null (its log goes to --log).
bool daemonize() {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid > 0) ::_exit(0);
  ::setsid();
  if (int null = ::open("/dev/null", O_RDWR); null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    if (null > 2) ::close(null);
  }
  return true;
}

}  // namespace

int run_mount(const MountCliOptions& options) {
  MountOptions mount;
  mount.fetch = options.fetch;
  mount.tensor_window = options.tensor_window;
  mount.small_file = options.small_file;
  std::shared_ptr<std::ofstream> log_file;
  if (!options.log.empty()) {
    log_file = std::make_shared<std::ofstream>(options.log, std::ios::app);
    if (!*log_file) {
      std::cerr << "tensorfetch: error: " << escape_text(options.log) << ": cannot open the log file\n";
      return 1;
    }
    mount.log = [log_file](std::string_view line) { *log_file << line << '\n' << std::flush; };
  } else {
    mount.log = [](std::string_view line) { std::cerr << escape_text(std::string(line)) << '\n' << std::flush; };
  }
  auto checkpoint = Checkpoint::open(options.location, options.open);
  if (!checkpoint) return report(checkpoint.error());
  auto mounted = Mount::create(std::move(*checkpoint), options.dir, mount);
  if (!mounted) return report(mounted.error());
  if (options.daemon) {
    if (!daemonize()) {
      std::cerr << "tensorfetch: error: cannot fork the mount into the background\n";
      return 1;
    }
  } else {
    std::cerr << "tensorfetch: mounted " << escape_text(options.location) << " on " << escape_text(options.dir)
              << " (Ctrl-C or 'tensorfetch unmount " << escape_text(options.dir) << "' to end)\n"
              << std::flush;
  }
  auto r = (*mounted)->run();
  mounted->reset();
  if (!r) return report(r.error());
  return 0;
}

int run_unmount(const std::string& dir) {
  auto r = unmount(dir);
  if (!r) return report(r.error());
  return 0;
}

}  // namespace tensorfetch::cli
