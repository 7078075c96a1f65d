// SPDX-License-Identifier: Apache-2.0
// The `tensorfetch` command line. Exit codes: 0 ok, 1 usage or other, 2 not valid
// safetensors (or a bad index), 3 network/remote, 4 integrity.
#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.h"

namespace tensorfetch::cli {

void add_open_options(CLI::App& command, OpenOptions& options) {
  command.add_option("--endpoint", options.endpoint, "Hub endpoint (default: $HF_ENDPOINT or https://huggingface.co)");
  command.add_option("--cacert", options.ca_file, "CA bundle for TLS (default: $CURL_CA_BUNDLE or the system's)");
  command.add_option("--window", options.header_window,
                     "Bytes asked for by the first range request of each file (default 262144)")
      ->check(CLI::Range(std::uint64_t{64}, std::uint64_t{1} << 30));
  command.add_option("--connections", options.connections, "Parallel HTTP transfers of tensor data (default 16)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  command.add_option("--header-connections", options.header_connections,
                     "Parallel HTTP transfers while reading headers (default 64)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
  command.add_option("--retries", options.max_retries, "Retries of a failed request (default 5)")
      ->check(CLI::Range(0, 100));
}

}  // namespace tensorfetch::cli

int main(int argc, char** argv) {
  using namespace tensorfetch::cli;
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
  add_open_options(*inspect_cmd, inspect.open);

  GetOptions get;
  auto* get_cmd = app.add_subcommand(
      "get", "Write the selected tensors (or slices) to a new safetensors file");
  get_cmd->add_option("location", get.location,
                      "A .safetensors file, a *.safetensors.index.json, or a directory")
      ->required();
  get_cmd->add_option("tensors", get.patterns,
                      "Names or globs (fnmatch: * ? [...]), each optionally with a slice: "
                      "'NAME[0:128, :]'. None: every tensor");
  get_cmd->add_option("--slice", get.slices, "A slice of one tensor or glob: 'NAME[0:128, :, 3]'");
  get_cmd->add_option("-o,--output", get.output,
                      "Output file; a directory (existing, or ending in '/') gets one file per "
                      "source shard plus an index")
      ->required();
  get_cmd->add_flag("-q,--quiet", get.quiet, "No summary on stderr");
  add_open_options(*get_cmd, get.open);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (argc > 1 && argv[1][0] != '-' && std::string(argv[1]) != "inspect" && std::string(argv[1]) != "get") {
      what = std::string("unknown command '") + argv[1] + "' (commands: inspect, get)";
    }
    std::cerr << "tensorfetch: usage error: " << what << "\nRun 'tensorfetch --help' for usage.\n";
    return 1;
  }
  try {
    if (*inspect_cmd) return run_inspect(inspect);
    if (*get_cmd) return run_get(get);
  } catch (const std::exception& e) {
    std::cerr << "tensorfetch: error: " << e.what() << '\n';
    return 1;
  }
  return 1;
}
