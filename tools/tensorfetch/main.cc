// SPDX-License-Identifier: Apache-2.0
// The `tensorfetch` command line. Exit codes: 0 ok, 1 usage or other, 2 not valid
// safetensors (or a bad index), 3 network/remote, 4 integrity.
#include <CLI/CLI.hpp>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "tensorfetch/trace.hpp"

#include "commands.h"
#include "escape.h"
#include "progress.h"

namespace tensorfetch::cli {

namespace {

// Every numeric option goes through this first (its messages are escaped where they are printed): a non-negative decimal integer (`sized`: with an
// optional unit after it, e.g. 8MiB), that fits 64 bits. CLI11 alone reads `-1` into an unsigned
// option as 2^64-1, an overflowing number as the largest value and `010` as octal 8.
CLI::Validator plain_number(bool sized) {
  return CLI::Validator(
      [sized](std::string& text) -> std::string {
        std::size_t begin = 0, end = text.size();
        while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
        while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
        std::size_t digits = begin;
        while (digits < end && text[digits] >= '0' && text[digits] <= '9') ++digits;
        std::size_t unit = digits;
        while (unit < end && text[unit] == ' ') ++unit;
        bool ok = digits > begin;
        for (std::size_t i = unit; ok && i < end; ++i) ok = sized && std::isalpha(static_cast<unsigned char>(text[i]));
        const std::string expected = sized ? "a size in bytes (a non-negative integer, optionally with a unit: 8MiB)"
                                           : "a non-negative integer";
        if (!ok) return "expected " + expected + ", not '" + text + "'";
        std::uint64_t value = 0;
        if (std::from_chars(text.data() + begin, text.data() + digits, value).ec != std::errc()) {
          return "'" + text + "' is too large";
        }
        // Canonical decimal (no leading zeros, which CLI11 would read as octal), unit kept.
        text = std::to_string(value) + text.substr(unit, end - unit);
        return {};
      },
      "", "NUMBER");
}

}  // namespace

void add_open_options(CLI::App& command, OpenOptions& options) {
  command.add_option("--endpoint", options.endpoint, "Hub endpoint (default: $HF_ENDPOINT or https://huggingface.co)");
  command.add_option("--s3-endpoint", options.s3_endpoint,
                     "S3 endpoint for s3:// locations, e.g. http://127.0.0.1:9000 (path-style; default: "
                     "$AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS)");
  command.add_flag("--no-sign-request", options.s3_no_sign_request,
                   "S3, Azure: send unsigned requests (a public bucket or container); no credentials are looked for");
  command.add_option("--presign-expires", options.s3_presign_seconds,
                     "S3, Azure: seconds the presigned URLs and SAS made with an account key (of requests and of "
                     "get --plan) stay valid (default 3600, at most 604800)")
      ->transform(plain_number(false))
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{604800}));
  command.add_option("--cacert", options.ca_file, "CA bundle for TLS (default: $CURL_CA_BUNDLE or the system's)");
  command.add_option("--window", options.header_window,
                     "Bytes asked for by the first range request of each file (default 262144; a shard of an index asks for what the index says its header needs, at most this)")
      ->transform(CLI::AsSizeValue(false))
      ->transform(plain_number(true))
      ->check(CLI::Range(std::uint64_t{64}, std::uint64_t{1} << 30));
  command.add_option("--connections", options.connections,
                     "Parallel HTTP transfers of tensor data, one TCP connection each, fixed at N (default: adaptive, "
                     "from 32 up to --max-connections while more connections raise the rate)")
      ->transform(plain_number(false))
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  command.add_option("--max-connections", options.max_connections,
                     "The most data connections toward one host when adaptive (default 128)")
      ->transform(plain_number(false))
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  command.add_option("--header-connections", options.header_connections,
                     "Parallel HTTP transfers while reading headers (default 64)")
      ->transform(plain_number(false))
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
  command.add_option("--retries", options.max_retries, "Retries of a failed request (default 5)")
      ->transform(plain_number(false))
      ->check(CLI::Range(0, 100));
  command.add_option("--stall-timeout", options.stall_timeout_ms,
                     "Milliseconds without a byte (or below --min-rate) before a transfer is retried (default 30000)")
      ->transform(plain_number(false))
      ->check(CLI::Range(1000L, 3'600'000L));
  command.add_option("--min-rate", options.min_rate,
                     "Slowest acceptable transfer in bytes per second, over each --stall-timeout window; "
                     "slower ones are retried, resuming (default 1KiB; 0: only a window without a byte)")
      ->transform(CLI::AsSizeValue(false))
      ->transform(plain_number(true))
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 40));
  command.add_option("--cache-dir", options.cache_dir,
                     "Cache root (default: $TENSORFETCH_CACHE, $XDG_CACHE_HOME/tensorfetch or ~/.cache/tensorfetch)");
  // Absent, it must stay unset (not false), so that HF_HUB_OFFLINE decides.
  command.add_flag_callback("--offline", [&options] { options.offline = true; },
                            "No network: use what earlier fetches left in the cache (also: HF_HUB_OFFLINE=1)");
  command.add_flag_callback("--shared-cache", [&options] { options.shared_cache = true; },
                            "The cache is shared by a group: accept directories of other members, create what is "
                            "new group-writable (also: TENSORFETCH_SHARED_CACHE=1)");
}

void add_rate_option(CLI::App& command, OpenOptions& options) {
  command.add_option("--max-rate", options.max_rate,
                     "Cap on the fetch's bandwidth in bytes per second, all connections together, e.g. 40M "
                     "(k, M, G: powers of 1000; KiB, MiB, GiB: of 1024); at least 1KiB (default 0: no cap)")
      ->transform(CLI::AsSizeValue(true))
      ->transform(plain_number(true))
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            const std::uint64_t value = std::stoull(text);
            if (value != 0 && value < kMinMaxRate) {
              return "must be 0 (no cap) or at least " + std::to_string(kMinMaxRate) +
                     " bytes per second (1KiB), not " + text;
            }
            if (value > (std::uint64_t{1} << 40)) return text + " is too large (at most 1TiB per second)";
            return {};
          },
          "", "RATE"));
}

void add_tp_options(CLI::App& command, CLI::Option* tp, std::optional<std::string>& rules, bool& expert_parallel) {
  command.add_option("--tp-rules", rules,
                     "Rules file for --tp, deciding before the built-in convention: a JSON object "
                     "glob -> {\"dim\": D} | \"replicate\" | \"expert\"")
      ->needs(tp);
  command.add_flag("--expert-parallel", expert_parallel,
                   "With --tp: deal out MoE experts whole among the ranks (expert parallel) instead of "
                   "splitting each expert (tensor parallel)")
      ->needs(tp);
}

void add_fetch_options(CLI::App& command, FetchOptions& options) {
  command.add_option("--chunk-size", options.chunk_size, "Largest single range transfer (default 64MiB; chunks are about total / connections)")
      ->transform(CLI::AsSizeValue(false))
      ->transform(plain_number(true))
      ->check(CLI::Range(std::uint64_t{4096}, std::uint64_t{1} << 34));
  command.add_option("--coalesce-gap", options.coalesce_gap,
                     "Holes up to this size between wanted ranges are fetched too, saving a request (default 1MiB), "
                     "within --coalesce-overfetch")
      ->transform(CLI::AsSizeValue(false))
      ->transform(plain_number(true))
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 34));
  command.add_option("--coalesce-overfetch", options.coalesce_overfetch_percent,
                     "The holes fetched add up to at most this percentage of the bytes to fetch (or to 64KiB), "
                     "smallest holes first (default 1)")
      ->transform(plain_number(false))
      ->check(CLI::Range(std::uint32_t{0}, std::uint32_t{1000}));
}

}  // namespace tensorfetch::cli

// When this process started (exec), on the steady clock: /proc/self/stat's start time (clock
// ticks since boot) against CLOCK_BOOTTIME now. Nullopt where /proc cannot tell.
static std::optional<std::chrono::steady_clock::time_point> process_start() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // Field 22, counted after the command name (field 2, in parentheses, may hold spaces).
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i != 22) continue;
    timespec boot{};
    const long ticks = ::sysconf(_SC_CLK_TCK);
    if (ticks <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &boot) != 0) return std::nullopt;
    const double started = std::strtod(field.c_str(), nullptr) / static_cast<double>(ticks);
    const double now = static_cast<double>(boot.tv_sec) + static_cast<double>(boot.tv_nsec) / 1e9;
    if (started > now) return std::nullopt;
    return std::chrono::steady_clock::now() -
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(now - started));
  }
  return std::nullopt;
}

int main(int argc, char** argv) {
  using namespace tensorfetch::cli;
  const auto main_entered = std::chrono::steady_clock::now();
  CLI::App app{"tensorfetch: read safetensors checkpoints where they live, without downloading them whole"};
  app.name("tensorfetch");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tensorfetch ") + tensorfetch::version());
  app.footer(
      "Exit codes: 0 ok, 1 usage or other error, 2 not valid safetensors or a bad index,\n"
      "3 network or remote error, 4 integrity error.");

  InspectOptions inspect;
  auto* inspect_cmd = app.add_subcommand(
      "inspect", "List a checkpoint's tensors (name, dtype, shape, size, file) and totals, from headers alone");
  inspect_cmd->add_option("location", inspect.location,
                          "A .safetensors file, a *.safetensors.index.json, a directory, an http(s) URL of either, "
                          "or a Hub repo: hf://ORG/NAME[@REV][/PATH] or ORG/NAME")
      ->required();
  inspect_cmd->add_flag("--json", inspect.json, "Print one JSON object (see DESIGN.md, CLI contract)");
  inspect_cmd->add_flag("--all", inspect.all, "List every tensor; by default long listings group repeated layers");
  auto* inspect_tp = inspect_cmd->add_option("--tp", inspect.tp_world,
                                             "Also print the bytes each rank of N tensor-parallel ranks needs")
                         ->transform(plain_number(false))
                         ->check(CLI::Range(std::size_t{1}, tensorfetch::kMaxTpWorld));
  add_tp_options(*inspect_cmd, inspect_tp, inspect.tp_rules, inspect.expert_parallel);
  add_open_options(*inspect_cmd, inspect.open);

  GetOptions get;
  auto* get_cmd = app.add_subcommand(
      "get", "Write the selected tensors (or slices) to a new safetensors file");
  get_cmd->add_option("location", get.location,
                      "A .safetensors file, a *.safetensors.index.json, a directory, an http(s) URL of "
                      "either, or a Hub repo: hf://ORG/NAME[@REV][/PATH] or ORG/NAME")
      ->required();
  get_cmd->add_option("tensors", get.patterns,
                      "Names or globs (fnmatch: * ? [...]), each optionally with a slice: "
                      "'NAME[0:128, :]'. None: every tensor");
  get_cmd->add_option("--slice", get.slices, "A slice of one tensor or glob: 'NAME[0:128, :, 3]'");
  auto* get_output = get_cmd->add_option("-o,--output", get.output,
                                         "Output file; a directory (existing, or ending in '/') gets one file per "
                                         "source shard plus an index (required unless --plan)");
  auto* get_plan = get_cmd->add_flag("--plan", get.plan,
                                     "Fetch and write nothing: print the transfers a get would make as JSON on "
                                     "stdout (file, URL, byte range, If-Match, whether the token is sent), for a "
                                     "download manager to run; takes no -o");
  get_output->excludes(get_plan);
  get_cmd->add_flag("-q,--quiet", get.quiet, "No progress bar or summary on stderr");
  auto* get_tp = get_cmd->add_option("--tp", get.tp,
                                     "R/N: only what rank R of N tensor-parallel ranks holds (Megatron/vLLM "
                                     "convention from config.json): its slices and the replicated tensors; "
                                     "with --mpi: auto (or N, the number of ranks), each rank its own");
  add_tp_options(*get_cmd, get_tp, get.tp_rules, get.expert_parallel);
  add_open_options(*get_cmd, get.open);
  add_rate_option(*get_cmd, get.open);
  add_fetch_options(*get_cmd, get.fetch);
  get_cmd->add_flag("--mpi", get.mpi,
                    "Run under mpirun: fetch each byte from the origin once for the whole job and pass it on "
                    "over MPI to the ranks that want it; {rank} in -o and --cache-dir is replaced by the rank")
      ->excludes(get_plan);
  get_cmd->add_flag("--hf-cache", get.hf_cache,
                    "Also publish files fetched whole into the Hugging Face cache ($HF_HUB_CACHE or $HF_HOME/hub)")
      ->excludes(get_plan);

  DownloadOptions download;
  auto* download_cmd = app.add_subcommand(
      "download", "Download a whole checkpoint (safetensors files, index, config.json) into a directory");
  download_cmd->add_option("location", download.location,
                           "An http(s) URL of a .safetensors file or an index, a Hub repo (hf://ORG/NAME[@REV][/PATH] "
                           "or ORG/NAME), or a local checkpoint")
      ->required();
  download_cmd->add_option("-o,--output", download.output, "Directory to write into (created if needed)")->required();
  download_cmd->add_flag("-q,--quiet", download.quiet, "No progress bar or summary on stderr");
  add_open_options(*download_cmd, download.open);
  add_rate_option(*download_cmd, download.open);
  add_fetch_options(*download_cmd, download.fetch);
  download_cmd->add_flag("--mpi", download.mpi,
                         "Run under mpirun: every rank downloads the checkpoint, each byte fetched from the origin "
                         "once for the whole job and passed on over MPI; {rank} in -o and --cache-dir is replaced "
                         "by the rank");
  download_cmd->add_flag("--hf-cache", download.hf_cache,
                         "Also publish the files into the Hugging Face cache ($HF_HUB_CACHE or $HF_HOME/hub), "
                         "so transformers finds them with HF_HUB_OFFLINE=1");

  MountCliOptions mount;
  auto* mount_cmd = app.add_subcommand(
      "mount", "Show a checkpoint as a read-only directory (FUSE) whose files loaders read lazily, tensor by tensor");
  mount_cmd->add_option("location", mount.location,
                        "A .safetensors file, a *.safetensors.index.json, a directory, an http(s) URL of either, "
                        "or a Hub repo: hf://ORG/NAME[@REV][/PATH] or ORG/NAME")
      ->required();
  mount_cmd->add_option("dir", mount.dir, "The mount point: an existing directory")->required();
  mount_cmd->add_flag("--daemon", mount.daemon, "Return once the directory is mounted and serve in the background");
  mount_cmd->add_option("--log", mount.log, "Append failed reads and totals to this file instead of stderr");
  mount_cmd->add_option("--tensor-window", mount.tensor_window,
                        "A read in a larger tensor fetches the aligned pieces of this size it touches, else the whole "
                        "tensor (default 64MiB)")
      ->transform(CLI::AsSizeValue(false))
      ->transform(plain_number(true))
      ->check(CLI::Range(std::uint64_t{4096}, std::uint64_t{1} << 40));
  mount_cmd->add_option("--small-file", mount.small_file,
                        "Other files of the repo (tokenizers, README, ...) of at most this size are fetched whole on "
                        "first open, larger ones by 1MiB blocks as read (default 16MiB)")
      ->transform(CLI::AsSizeValue(false))
      ->transform(plain_number(true))
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 40));
  add_open_options(*mount_cmd, mount.open);
  add_rate_option(*mount_cmd, mount.open);
  add_fetch_options(*mount_cmd, mount.fetch);
  std::string unmount_dir;
  auto* unmount_cmd = app.add_subcommand("unmount", "Unmount a directory that 'tensorfetch mount' serves");
  unmount_cmd->add_option("dir", unmount_dir, "The mount point")->required();

  CacheOptions cache;
  auto* cache_cmd = app.add_subcommand("cache", "Inspect and manage the local cache");
  cache_cmd->require_subcommand(1);
  auto* cache_ls = cache_cmd->add_subcommand("ls", "List cached files: size, bytes present, disk use, last use");
  cache_ls->add_flag("--json", cache.json, "Print a JSON array");
  auto* cache_verify = cache_cmd->add_subcommand("verify", "Re-hash complete files against their sha256 (all, or the given)");
  cache_verify->add_option("ids", cache.ids, "Blob ids (see cache ls)");
  auto* cache_rm = cache_cmd->add_subcommand("rm", "Remove cached files (not while a process uses them)");
  cache_rm->add_option("ids", cache.ids, "Blob ids (see cache ls)")->required();
  auto* cache_prune = cache_cmd->add_subcommand(
      "prune", "Remove retired blobs (stale bytes), then least recently used files until the cache fits");
  cache_prune->add_option("--max-size", cache.max_size, "Largest total disk use to keep, e.g. 20GB or 500MiB")
      ->transform(CLI::AsSizeValue(true))
      ->transform(plain_number(true))
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 60))
      ->required();
  std::string trace_file;
  for (auto* sub : {inspect_cmd, get_cmd, download_cmd, cache_ls, cache_verify, cache_rm, cache_prune}) {
    sub->add_option("--trace", trace_file,
                    "Write a timeline of the run (process start, requests with connect/TLS/first-byte/receive "
                    "times, connections, commits, output) to FILE as Chrome trace-event JSON, for Perfetto "
                    "(ui.perfetto.dev) or chrome://tracing");
  }
  for (auto* sub : {cache_ls, cache_verify, cache_rm, cache_prune}) {
    sub->add_option("--cache-dir", cache.dir, "Cache root (default: $TENSORFETCH_CACHE, ...)");
    sub->add_flag_callback("--shared-cache", [&cache] { cache.shared = true; },
                           "The cache is shared by a group (also: TENSORFETCH_SHARED_CACHE=1)");
    sub->callback([&cache, sub] { cache.action = sub->get_name(); });
  }

  try {
    app.parse(argc, argv);
    // -o is required unless --plan (which excludes it): checked after parsing, as CLI11's
    // `required` cannot depend on another option.
    if (*get_cmd && !get.plan && get_output->count() == 0) {
      throw CLI::ValidationError("-o/--output", "required, unless --plan prints the transfers instead");
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    const std::string first = argc > 1 ? argv[1] : "";
    if (!first.empty() && first[0] != '-' && first != "inspect" && first != "get" && first != "download" &&
        first != "cache" && first != "mount" && first != "unmount") {
      what = "unknown command '" + first + "' (commands: inspect, get, download, cache, mount, unmount)";
    }
    std::cerr << "tensorfetch: usage error: " << escape_text(what) << "\nRun 'tensorfetch --help' for usage.\n";
    return 1;
  }
  // SIGINT/SIGTERM cancel these commands at any stage (open, fetch, write, output), which then
  // clean up and exit 130/143; `cache` keeps the default action.
  if (*inspect_cmd || *get_cmd || *download_cmd) install_interrupt_handler();
  // A rate limit's wait (minutes, on the Hub) is said on stderr, whatever the command.
  inspect.open.on_wait = get.open.on_wait = download.open.on_wait = mount.open.on_wait = wait_notice();
  get.fetch.on_wait = download.fetch.on_wait = wait_notice();
  // Stale cached bytes (a file rewritten without its ETag changing) are a warning, whatever -q.
  inspect.open.on_stale_cache = get.open.on_stale_cache = download.open.on_stale_cache = mount.open.on_stale_cache =
      stale_cache_notice();
  if (!trace_file.empty()) {
    if (auto r = tensorfetch::trace_start(trace_file); !r) {
      std::cerr << "tensorfetch: usage error: --trace: " << escape_text(r.error().message) << '\n';
      return 1;
    }
    if (auto started = process_start()) tensorfetch::trace_span("process start (exec to main)", "cli", *started, main_entered);
    tensorfetch::trace_span("parse the command line", "cli", main_entered, std::chrono::steady_clock::now());
  }
  const auto run = [&]() -> int {
    try {
      if (*inspect_cmd) return exit_status(run_inspect(inspect));
      if (*get_cmd) return exit_status(get.mpi ? run_get_mpi(get) : run_get(get));
      if (*download_cmd) return exit_status(download.mpi ? run_download_mpi(download) : run_download(download));
      if (*cache_cmd) return run_cache(cache);
      if (*mount_cmd) return run_mount(mount);
      if (*unmount_cmd) return run_unmount(unmount_dir);
    } catch (const std::exception& e) {
      std::cerr << "tensorfetch: error: " << escape_text(e.what()) << '\n';
      return 1;
    }
    return 1;
  };
  const auto command_started = std::chrono::steady_clock::now();
  int status = run();
  if (!trace_file.empty()) {
    tensorfetch::trace_span(app.get_subcommands().empty() ? "command" : app.get_subcommands().front()->get_name(),
                            "cli", command_started, std::chrono::steady_clock::now());
    if (auto r = tensorfetch::trace_stop(); !r) {
      std::cerr << "tensorfetch: error: --trace: " << escape_text(r.error().message) << '\n';
      if (status == 0) status = 1;
    }
  }
  return status;
}
