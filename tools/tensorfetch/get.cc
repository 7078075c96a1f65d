// SPDX-License-Identifier: Apache-2.0
// `tensorfetch get`: copy selected tensors (or slices) into a new safetensors file.
#include <sys/stat.h>

#include <filesystem>
#include <iostream>

#include "commands.h"
#include "progress.h"

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

int run_get(const GetOptions& options) {
  if (options.output.empty()) {
    return report(Error{ErrorCode::InvalidArgument, "-o/--output must name a file or directory"});
  }
  {
    // Where the output goes must be creatable before anything is fetched.
    const std::filesystem::path out_path(options.output);
    const auto dir = options.output.ends_with('/') ? out_path : out_path.parent_path();
    if (auto r = check_output_dir(dir.empty() ? std::string(".") : dir.string()); !r) return report(r.error());
  }
  auto ckpt = Checkpoint::open(options.location, options.open);
  if (!ckpt) return report(ckpt.error());
  auto sels = selectors(*ckpt, options);
  if (!sels) return report(sels.error());
  Result<std::vector<Selection>> selection = std::vector<Selection>{};
  if (sels->empty()) {
    // No names: every tensor (possibly none, which writes a valid empty file).
    for (const auto& t : ckpt->tensors()) sels->push_back(Selector{std::string(t.info->name), std::nullopt});
  }
  if (!sels->empty()) selection = ckpt->select(*sels);
  if (!selection) return report(selection.error());

  FetchStats fetched;
  if (ckpt->remote()) {
    install_interrupt_handler();
    FetchOptions fetch = options.fetch;
    fetch.progress = progress_callback(options.quiet);
    auto r = ckpt->fetch(*selection, fetch);
    finish_progress();
    if (!r) {
      report(r.error());
      return interrupted() ? 130 : exit_code(r.error().code);
    }
    fetched = *r;
    if (options.hf_cache) {
      auto n = ckpt->publish_to_hf_cache();
      if (!n) return report(n.error());
    }
  }

  WriteOptions write_options;
  std::string out = options.output;
  if (out.ends_with('/') || is_directory(out)) {
    write_options.sharded_output = true;
    while (out.size() > 1 && out.back() == '/') out.pop_back();
  }
  if (auto r = ckpt->write(*selection, out, write_options); !r) return report(r.error());

  if (!options.quiet) {
    std::uint64_t bytes = 0;
    for (const auto& s : *selection) bytes += s.plan.nbytes;
    std::cerr << "tensorfetch: wrote " << selection->size()
              << (selection->size() == 1 ? " tensor" : " tensors") << " (" << bytes
              << " bytes of tensor data) to " << options.output;
    if (ckpt->remote()) {
      std::cerr << "; fetched " << human_bytes(static_cast<double>(fetched.bytes_transferred)) << " in "
                << fetched.requests << " requests, " << human_bytes(static_cast<double>(fetched.bytes_cached))
                << " from the cache";
    }
    std::cerr << '\n';
  }
  return 0;
}

}  // namespace tensorfetch::cli
