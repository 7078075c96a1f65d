// SPDX-License-Identifier: Apache-2.0
// `tensorfetch get|download ... --mpi`, run under mpirun: every rank ends with its output, each
// byte fetched from the origin once for the whole job (tensorfetch/mpi.hpp). `{rank}` in -o and
// --cache-dir is replaced by the rank; `--tp auto` (or `--tp N`, N the number of ranks) takes
// the rank and world from MPI_COMM_WORLD. Built with the meson feature `mpi`.
#include <chrono>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "escape.h"
#include "get.h"
#include "progress.h"
#include "tensorfetch/mpi.hpp"
#include "tp.h"

namespace tensorfetch::cli {

namespace {

// MPI for the life of one command: initialized (the library calls MPI from this thread only),
// finalized at the end.
class MpiRun {
 public:
  MpiRun() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
  }
  ~MpiRun() { MPI_Finalize(); }
  MpiRun(const MpiRun&) = delete;
  MpiRun& operator=(const MpiRun&) = delete;
  [[nodiscard]] std::size_t rank() const { return static_cast<std::size_t>(rank_); }
  [[nodiscard]] std::size_t world() const { return static_cast<std::size_t>(world_); }
  /// "rank R/N: ", the prefix of this rank's messages.
  [[nodiscard]] std::string who() const { return "rank " + std::to_string(rank_) + "/" + std::to_string(world_) + ": "; }

 private:
  int rank_ = 0, world_ = 1;
};

// `text` with every `{rank}` replaced by `rank`.
std::string with_rank(std::string text, std::size_t rank) {
  const std::string key = "{rank}", value = std::to_string(rank);
  for (auto at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size())) {
    text.replace(at, key.size(), value);
  }
  return text;
}

// The options every rank gives fetch_over_mpi: its own cache, no progress bar (the ranks would
// draw over each other), and a lost rank printed before the job is ended.
ClusterOptions cluster_options(const FetchOptions& fetch, const MpiRun& mpi) {
  ClusterOptions options;
  options.fetch = fetch;
  options.fetch.cancel = interrupt_token();
  options.on_fatal = [who = mpi.who()](const Error& e) {
    std::cerr << "tensorfetch: error: " << escape_text(who + e.message) << " (ending the job)\n" << std::flush;
  };
  return options;
}

OpenOptions rank_open_options(const OpenOptions& given, const MpiRun& mpi) {
  OpenOptions open = given;
  open.cancel = interrupt_token();
  open.cache_dir = with_rank(open.cache_dir, mpi.rank());
  return open;
}

// One summary line per rank.
void summarize(const ClusterStats& s, double seconds, const std::string& what, const MpiRun& mpi) {
  std::ostringstream line;
  line << "tensorfetch: " << mpi.who() << what << "; fetched " << human_bytes(static_cast<double>(s.origin_bytes))
       << " from the origin (all ranks: " << human_bytes(static_cast<double>(s.cluster_origin_bytes))
       << "), received " << human_bytes(static_cast<double>(s.received_bytes)) << " and sent "
       << human_bytes(static_cast<double>(s.sent_bytes)) << " over MPI, "
       << human_bytes(static_cast<double>(s.cached_bytes)) << " from the cache, " << seconds << " s\n";
  std::cerr << line.str() << std::flush;
}

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// --tp under --mpi: `auto`, or N equal to the number of ranks; the rank is this process's.
Result<std::optional<TpRank>> mpi_tp(const std::optional<std::string>& tp, const MpiRun& mpi) {
  if (!tp) return std::optional<TpRank>{};
  const TpRank mine{mpi.rank(), mpi.world()};
  if (*tp == "auto" || *tp == std::to_string(mpi.world())) return std::optional<TpRank>{mine};
  return fail(ErrorCode::InvalidArgument,
              "--tp " + *tp + " with --mpi: the rank and world come from MPI (" + std::to_string(mpi.world()) +
                  " ranks): give --tp auto or --tp " + std::to_string(mpi.world()));
}

}  // namespace

int run_download_mpi(const DownloadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MpiRun mpi;
  const std::string output = with_rank(options.output, mpi.rank());
  if (output == "-") return report(Error{ErrorCode::InvalidArgument, "-o -: download writes a directory of files"});
  if (auto r = check_output_dir(output); !r) return report(r.error());
  ClusterOptions cluster = cluster_options(options.fetch, mpi);
  cluster.whole_files = true;
  auto done = fetch_over_mpi(MPI_COMM_WORLD, options.location, rank_open_options(options.open, mpi), cluster);
  if (!done) return report(done.error().with_context(mpi.who().substr(0, mpi.who().size() - 2)));
  const Checkpoint& ckpt = done->checkpoint;
  if (auto r = ckpt.save_files(output); !r) return report(r.error());
  if (options.hf_cache) {
    if (auto n = ckpt.publish_to_hf_cache(); !n) return report(n.error());
  }
  if (!options.quiet) {
    std::uint64_t total = 0;
    for (const auto& f : ckpt.files()) total += f.size;
    summarize(done->stats, since(start),
              std::to_string(ckpt.files().size()) + (ckpt.files().size() == 1 ? " file (" : " files (") +
                  human_bytes(static_cast<double>(total)) + ") in " + output,
              mpi);
  }
  return 0;
}

int run_get_mpi(const GetOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MpiRun mpi;
  if (options.output == "-") {
    return report(Error{ErrorCode::InvalidArgument, "-o - with --mpi: every rank writes its own output, which cannot "
                                                    "all go to one standard output; name a file (with {rank})"});
  }
  if (options.tp && options.output.find("{rank}") == std::string::npos) {
    return report(Error{ErrorCode::InvalidArgument, "--mpi --tp: every rank writes its own slices: put {rank} in -o, e.g. "
                                                    "-o out/rank{rank}.safetensors"});
  }
  auto output = prepare_output(with_rank(options.output, mpi.rank()));
  if (!output) return report(output.error());
  auto tp = mpi_tp(options.tp, mpi);
  if (!tp) return report(tp.error());
  auto rules = load_tp_rules(options.tp_rules, options.expert_parallel);
  if (!rules) return report(rules.error());
  ClusterOptions cluster = cluster_options(options.fetch, mpi);
  // Each rank chooses its own selection (its slices with --tp); the write options keep the
  // `__metadata__` of its output.
  WriteOptions& write = output->write;
  cluster.select = [&](const Checkpoint& ckpt, std::size_t, std::size_t) {
    return choose(ckpt, options, *tp, *rules, write);
  };
  auto done = fetch_over_mpi(MPI_COMM_WORLD, options.location, rank_open_options(options.open, mpi), cluster);
  if (!done) return report(done.error().with_context(mpi.who().substr(0, mpi.who().size() - 2)));
  if (options.hf_cache) {
    if (auto n = done->checkpoint.publish_to_hf_cache(); !n) return report(n.error());
  }
  if (auto r = write_output(done->checkpoint, done->selection, *output); !r) return report(r.error());
  if (!options.quiet) {
    summarize(done->stats, since(start),
              "wrote " + std::to_string(done->selection.size()) + " tensors (" +
                  human_bytes(static_cast<double>(selected_bytes(done->selection))) + ") to " + output->path,
              mpi);
  }
  return 0;
}

}  // namespace tensorfetch::cli
