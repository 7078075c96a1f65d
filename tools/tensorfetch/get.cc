// SPDX-License-Identifier: Apache-2.0
// `tensorfetch get`: copy selected tensors (or slices) into a new safetensors file, a stream
// (`-o -`, a FIFO, a character device) or a directory of shards.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "get.h"
#include "json_stream.h"
#include "progress.h"
#include "tp.h"

namespace tensorfetch::cli {

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A text that is exactly a tensor's name selects that tensor, even if it looks like a glob
// or ends in brackets; otherwise it is NAME or GLOB, optionally followed by [SLICE].
Result<Selector> selector(const Checkpoint& ckpt, const std::string& text, bool need_slice) {
  if (!need_slice && ckpt.find(text)) return Selector{text, std::nullopt};
  auto named = parse_named_slice(text);
  if (!named) return fail(named.error());
  if (need_slice && !named->slice) {
    return fail(ErrorCode::InvalidArgument,
                "--slice " + text + ": expected NAME[SLICE], e.g. 'w[0:128, :]'");
  }
  return Selector{named->name, named->slice};
}

Result<std::vector<Selector>> selectors(const Checkpoint& ckpt, const GetOptions& options) {
  std::vector<Selector> out;
  for (const auto& text : options.patterns) {
    auto s = selector(ckpt, text, false);
    if (!s) return fail(s.error());
    out.push_back(std::move(*s));
  }
  for (const auto& text : options.slices) {
    auto s = selector(ckpt, text, true);
    if (!s) return fail(s.error());
    out.push_back(std::move(*s));
  }
  return out;
}

}  // namespace

Result<GetOutput> prepare_output(const std::string& output) {
  if (output.empty()) return fail(ErrorCode::InvalidArgument, "-o/--output must name a file or directory");
  GetOutput o;
  o.to_stdout = output == "-";
  o.write.cancel = interrupt_token();
  o.path = output;
  if (!o.to_stdout && (o.path.ends_with('/') || is_directory(o.path))) {
    o.write.sharded_output = true;
    while (o.path.size() > 1 && o.path.back() == '/') o.path.pop_back();
  }
  // Where the output goes must be creatable before anything is fetched (an existing FIFO or
  // device is written in place, and the library refuses other non-regular targets).
  struct stat st {};
  const bool existing_special = ::stat(o.path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
  if (!o.to_stdout && !existing_special) {
    const std::filesystem::path out_path(o.path);
    const auto dir = o.write.sharded_output ? out_path : out_path.parent_path();
    if (auto r = check_output_dir(dir.empty() ? std::string(".") : dir.string()); !r) return fail(r.error());
  }
  return o;
}

Result<std::vector<Selection>> choose(const Checkpoint& ckpt, const GetOptions& options, const std::optional<TpRank>& tp,
                                      const TpRules& rules, WriteOptions& write_options) {
  auto sels = selectors(ckpt, options);
  if (!sels) return fail(sels.error());
  if (tp) {
    auto model = ckpt.tp_model();
    if (!model) return fail(model.error());
    auto selection = ckpt.select_for_rank(tp->rank, tp->world, rules, *sels);
    if (!selection) return fail(selection.error());
    write_options.metadata = tp_metadata(*model, *tp, rules, *selection);
    return selection;
  }
  if (!sels->empty()) return ckpt.select(*sels);
  // No names: every tensor, whole (possibly none, which writes a valid empty file), without a
  // selector per tensor.
  std::vector<Selection> selection;
  selection.reserve(ckpt.tensors().size());
  for (const auto& t : ckpt.tensors()) {
    auto plan = plan_slice(*t.info, SliceSpec{});
    if (!plan) return fail(plan.error());
    selection.push_back(Selection{t, std::nullopt, std::move(*plan)});
  }
  return selection;
}

Result<void> write_output(const Checkpoint& ckpt, std::span<const Selection> selection, const GetOutput& output) {
  return output.to_stdout ? ckpt.write_stream(selection, STDOUT_FILENO, output.write)
                          : ckpt.write(selection, output.path, output.write);
}

std::uint64_t selected_bytes(std::span<const Selection> selection) {
  std::uint64_t bytes = 0;
  for (const auto& s : selection) bytes += s.plan.nbytes;
  return bytes;
}

namespace {

// A get's checkpoint and what it selects.
struct Chosen {
  Checkpoint ckpt;
  std::vector<Selection> selection;
};

// --tp and its rules, checked before anything is opened; then the open (`warm`: its data
// connections are opened meanwhile, for a fetch that follows) and the selection (--tp's
// metadata into `write`).
Result<Chosen> open_and_choose(const GetOptions& options, bool warm, WriteOptions& write) {
  std::optional<TpRank> tp;
  if (options.tp) {
    auto r = parse_tp_rank(*options.tp);
    if (!r) return fail(r.error());
    tp = *r;
  }
  auto rules = load_tp_rules(options.tp_rules, options.expert_parallel);
  if (!rules) return fail(rules.error());
  OpenOptions open = options.open;
  open.cancel = interrupt_token();
  open.warm_connections = warm;
  auto ckpt = Checkpoint::open(options.location, open);
  if (!ckpt) return fail(ckpt.error());
  auto selection = choose(*ckpt, options, tp, *rules, write);
  if (!selection) return fail(selection.error());
  return Chosen{std::move(*ckpt), std::move(*selection)};
}

// `get --plan`: the transfers `Checkpoint::plan` gives for the selection, as one JSON object on
// stdout (docs/cli.md, "get --plan"), and nothing fetched or written. The open warms no connections:
// the only requests are the open's own (and a plain URL's config.json for --tp).
int run_get_plan(const GetOptions& options) {
  WriteOptions unused;  // (--tp's metadata goes into an output; there is none)
  auto chosen = open_and_choose(options, /*warm=*/false, unused);
  if (!chosen) return report(chosen.error());
  Checkpoint& ckpt = chosen->ckpt;
  FetchOptions fetch = options.fetch;
  fetch.cancel = interrupt_token();
  auto planned = ckpt.plan(chosen->selection, fetch);
  if (!planned) return report(planned.error());

  using nlohmann::ordered_json;
  JsonObjectStream out(stdout);
  out.member("location", ckpt.location());
  std::uint64_t bytes = 0;
  out.begin_array("transfers");
  for (const auto& t : *planned) {
    bytes += t.range.length;
    out.element(ordered_json{
        {"file", ckpt.files()[t.file].path},
        {"file_index", t.file},
        {"url", t.url},
        {"offset", t.range.offset},
        {"length", t.range.length},
        {"range", "bytes=" + std::to_string(t.range.offset) + "-" + std::to_string(t.range.end() - 1)},
        {"if_match", t.if_match ? ordered_json(*t.if_match) : ordered_json(nullptr)},
        {"send_token", t.send_token},
        {"expires_at", t.expires_at != 0 ? ordered_json(t.expires_at) : ordered_json(nullptr)}});
  }
  out.end_array();
  out.member("bytes", bytes);
  if (!out.end()) return report(Error{ErrorCode::Io, "writing the plan to standard output failed"});
  return 0;
}

}  // namespace

int run_get(const GetOptions& options) {
  if (options.plan) return run_get_plan(options);
  auto output = prepare_output(options.output);
  if (!output) return report(output.error());
  // The fetch follows: its connections are opened while the headers are read.
  auto chosen = open_and_choose(options, /*warm=*/true, output->write);
  if (!chosen) return report(chosen.error());
  Checkpoint& ckpt = chosen->ckpt;
  const std::vector<Selection>& selection = chosen->selection;

  // The fetch and the write run at once: each tensor is written as soon as its bytes arrived.
  FetchOptions fetch = options.fetch;
  fetch.progress = progress_callback(options.quiet);
  fetch.cancel = interrupt_token();
  auto written = output->to_stdout ? ckpt.fetch_and_write_stream(selection, STDOUT_FILENO, fetch, output->write)
                                   : ckpt.fetch_and_write(selection, output->path, fetch, output->write);
  finish_progress();
  if (!written) return report(written.error());
  const FetchStats fetched = *written;
  if (ckpt.remote() && options.hf_cache) {
    auto n = ckpt.publish_to_hf_cache();
    if (!n) return report(n.error());
  }

  if (!options.quiet) {
    std::cerr << "tensorfetch: wrote " << selection.size()
              << (selection.size() == 1 ? " tensor" : " tensors") << " (" << selected_bytes(selection)
              << " bytes of tensor data) to " << options.output;
    if (ckpt.remote()) {
      std::cerr << "; fetched " << human_bytes(static_cast<double>(fetched.bytes_transferred)) << " in "
                << fetched.requests << " requests";
      if (fetched.peak_connections > 0) std::cerr << " on " << fetched.peak_connections << " connections";
      std::cerr << ", " << human_bytes(static_cast<double>(fetched.bytes_cached)) << " from the cache";
    }
    std::cerr << '\n';
  }
  return 0;
}

}  // namespace tensorfetch::cli
