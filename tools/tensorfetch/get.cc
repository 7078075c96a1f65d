// SPDX-License-Identifier: Apache-2.0
// `tensorfetch get`: copy selected tensors (or slices) into a new safetensors file.
#include <sys/stat.h>

#include <iostream>

#include "commands.h"

namespace tensorfetch::cli {

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<std::vector<Selector>> selectors(const GetOptions& options) {
  std::vector<Selector> out;
  for (const auto& text : options.patterns) {
    auto named = parse_named_slice(text);
    if (!named) return fail(named.error());
    out.push_back(Selector{named->name, named->slice});
  }
  for (const auto& text : options.slices) {
    auto named = parse_named_slice(text);
    if (!named) return fail(named.error());
    if (!named->slice) {
      return fail(ErrorCode::InvalidArgument,
                  "--slice " + text + ": expected NAME[SLICE], e.g. 'w[0:128, :]'");
    }
    out.push_back(Selector{named->name, named->slice});
  }
  if (out.empty()) out.push_back(Selector{"*", std::nullopt});  // everything
  return out;
}

}  // namespace

int run_get(const GetOptions& options) {
  auto sels = selectors(options);
  if (!sels) return report(sels.error());
  auto ckpt = Checkpoint::open(options.location);
  if (!ckpt) return report(ckpt.error());
  auto selection = ckpt->select(*sels);
  if (!selection) return report(selection.error());

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
              << " bytes of tensor data) to " << options.output << '\n';
  }
  return 0;
}

}  // namespace tensorfetch::cli
