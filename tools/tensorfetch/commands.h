// SPDX-License-Identifier: Apache-2.0
// The CLI's subcommands. Each returns the process exit code (DESIGN.md, CLI contract).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tensorfetch/tensorfetch.hpp"

namespace tensorfetch::cli {

/// Options of `tensorfetch inspect`.
struct InspectOptions {
  std::string location;  ///< file, directory, index, URL or Hub repo
  bool json = false;     ///< print the documented JSON object
  bool all = false;      ///< list every tensor instead of grouping repeated layers
  OpenOptions open;      ///< endpoint, CA bundle, window, connections
  std::size_t tp_world = 0;               ///< --tp N: print the bytes each of N ranks needs (0: no)
  std::optional<std::string> tp_rules;    ///< --tp-rules FILE
  bool expert_parallel = false;           ///< --expert-parallel
};

/// Options of `tensorfetch get`.
struct GetOptions {
  std::string location;               ///< file, directory, index, URL or Hub repo
  OpenOptions open;                   ///< endpoint, CA bundle, window, connections
  std::vector<std::string> patterns;  ///< names or globs, each optionally NAME[SLICE]
  std::vector<std::string> slices;    ///< --slice 'NAME[...]'
  std::string output;                 ///< -o: a file, or a directory (ends in '/' or exists)
  bool quiet = false;                 ///< no progress or summary on stderr
  FetchOptions fetch;                 ///< chunk size, coalescing gap
  bool hf_cache = false;              ///< publish whole fetched files into the HF cache
  std::optional<std::string> tp;          ///< --tp R/N: rank R's tensor-parallel slices
  std::optional<std::string> tp_rules;    ///< --tp-rules FILE
  bool expert_parallel = false;           ///< --expert-parallel
  bool mpi = false;                       ///< --mpi: fetch once per cluster, under mpirun
  bool plan = false;                      ///< --plan: print the transfers as JSON, fetch nothing
};

/// Options of `tensorfetch download`.
struct DownloadOptions {
  std::string location;  ///< URL or Hub repo (or a local checkpoint, copied)
  OpenOptions open;      ///< endpoint, CA bundle, connections, cache
  std::string output;    ///< -o DIR
  bool quiet = false;    ///< no progress or summary on stderr
  FetchOptions fetch;    ///< chunk size, coalescing gap
  bool hf_cache = false; ///< also publish the files into the Hugging Face cache
  bool mpi = false;      ///< --mpi: fetch once per cluster, under mpirun
};

/// Options of `tensorfetch cache`.
struct CacheOptions {
  std::string action;            ///< ls, verify, rm, prune
  std::string dir;               ///< --cache-dir (default: TENSORFETCH_CACHE ...)
  std::vector<std::string> ids;  ///< blobs for verify/rm (verify: none = all)
  std::uint64_t max_size = 0;    ///< prune --max-size
  bool json = false;             ///< ls --json
  std::optional<bool> shared;    ///< --shared-cache (unset: TENSORFETCH_SHARED_CACHE)
};

/// Options of `tensorfetch mount` and `tensorfetch unmount`.
struct MountCliOptions {
  std::string location;         ///< file, directory, index, URL or Hub repo
  std::string dir;              ///< the mount point (an existing directory)
  bool daemon = false;          ///< --daemon: return once mounted, serve in the background
  std::string log;              ///< --log FILE: failures and totals there instead of stderr
  std::uint64_t tensor_window = 64 << 20;  ///< --tensor-window: largest piece of a tensor one read fetches
  std::uint64_t small_file = 16 << 20;     ///< --small-file: other files up to this size are fetched whole on open
  OpenOptions open;             ///< endpoint, cache, connections, offline
  FetchOptions fetch;           ///< chunk size, coalescing gap
};

/// Runs `mount` (FUSE builds; otherwise an error saying so): in the foreground until unmounted
/// or SIGINT/SIGTERM, or, with --daemon, in the background once mounted.
int run_mount(const MountCliOptions& options);

/// Runs `unmount DIR` (FUSE builds; otherwise an error saying so).
int run_unmount(const std::string& dir);

/// Runs `inspect`; prints to stdout, errors to stderr.
int run_inspect(const InspectOptions& options);

/// Runs `get`; prints a summary to stderr unless quiet.
int run_get(const GetOptions& options);

/// Runs `download`.
int run_download(const DownloadOptions& options);

/// Runs `get --mpi` on this rank (MPI builds; otherwise an error saying so).
int run_get_mpi(const GetOptions& options);

/// Runs `download --mpi` on this rank (MPI builds; otherwise an error saying so).
int run_download_mpi(const DownloadOptions& options);

/// Runs `cache ls|verify|rm|prune`.
int run_cache(const CacheOptions& options);

/// Adds --tp-rules and --expert-parallel, which need `tp` (the command's --tp option).
void add_tp_options(CLI::App& command, CLI::Option* tp, std::optional<std::string>& rules, bool& expert_parallel);

/// Adds --chunk-size and --coalesce-gap.
void add_fetch_options(CLI::App& command, FetchOptions& options);

/// Checks, without creating anything, that directory `dir` exists or can be created: it is a
/// directory, or its nearest existing ancestor is a writable directory.
Result<void> check_output_dir(const std::string& dir);

/// Prints `tensorfetch: error: MESSAGE` and returns the exit code for the error.
int report(const Error& error);

/// Adds the options shared by commands that open a location (--endpoint, --cacert, ...).
void add_open_options(CLI::App& command, OpenOptions& options);

/// Adds --max-rate (`OpenOptions::max_rate`) to a command that fetches (get, download).
void add_rate_option(CLI::App& command, OpenOptions& options);

}  // namespace tensorfetch::cli
