// SPDX-License-Identifier: Apache-2.0
// `tensorfetch download`: the whole checkpoint (every safetensors file, the index,
// config.json) into a directory, files named as in the repo.
#include <chrono>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "progress.h"

namespace tensorfetch::cli {

int run_download(const DownloadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.output == "-") {
    return report(Error{ErrorCode::InvalidArgument,
                        "-o -: download writes a directory of files, which cannot go to standard output "
                        "(use `get LOCATION -o -` for one file)"});
  }
  // The output directory must be usable before anything is downloaded.
  if (auto r = check_output_dir(options.output); !r) return report(r.error());
  OpenOptions open = options.open;
  open.cancel = interrupt_token();
  open.warm_connections = true;  // the fetch follows: its connections are opened meanwhile
  auto ckpt = Checkpoint::open(options.location, open);
  if (!ckpt) return report(ckpt.error());
  FetchOptions fetch = options.fetch;
  fetch.progress = progress_callback(options.quiet);
  fetch.cancel = interrupt_token();
  auto stats = ckpt->fetch_all(fetch);
  finish_progress();
  if (!stats) return report(stats.error());
  // save_files takes no cancel token yet: a signal during it takes effect once it returns (its
  // files appear complete or not at all).
  if (auto r = ckpt->save_files(options.output); !r) return report(r.error());
  if (interrupted()) return report(Error{ErrorCode::Cancelled, options.output + ": interrupted"});
  if (options.hf_cache) {
    auto n = ckpt->publish_to_hf_cache();
    if (!n) return report(n.error());
    if (!options.quiet) {
      std::cerr << "tensorfetch: published " << *n << (*n == 1 ? " file" : " files") << " into the Hugging Face cache\n";
    }
  }
  if (!options.quiet) {
    std::uint64_t total = 0;
    for (const auto& f : ckpt->files()) total += f.size;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << "tensorfetch: " << ckpt->files().size() << (ckpt->files().size() == 1 ? " file" : " files") << " ("
              << human_bytes(static_cast<double>(total)) << ") in " << options.output << "; fetched "
              << human_bytes(static_cast<double>(stats->bytes_transferred)) << " in " << stats->requests
              << " requests" << (stats->peak_connections > 0 ? " on " + std::to_string(stats->peak_connections) + " connections" : std::string())
              << ", " << human_bytes(static_cast<double>(stats->bytes_cached)) << " from the cache, "
              << s << " s\n";
  }
  // Say what was verified: a file without a sha256 from the server (a plain URL) is checked by
  // its size and ETag only.
  std::size_t unverified = 0;
  for (const auto& f : ckpt->files()) unverified += ckpt->remote() && !f.sha256 ? 1 : 0;
  if (!options.quiet && ckpt->remote()) {
    if (unverified == 0) {
      std::cerr << "tensorfetch: every file verified against the sha256 the Hub names\n";
    } else {
      std::cerr << "tensorfetch: " << unverified << (unverified == 1 ? " file has" : " files have")
                << " no sha256 from the server (X-Linked-Etag): checked by size and ETag only, the content "
                   "itself is not verified\n";
    }
  }
  return 0;
}

}  // namespace tensorfetch::cli
