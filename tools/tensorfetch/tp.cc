// SPDX-License-Identifier: Apache-2.0
#include "tp.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tensorfetch::cli {

Result<TpRules> load_tp_rules(const std::optional<std::string>& path, bool expert_parallel) {
  TpRules rules;
  if (path) {
    std::ifstream in(*path, std::ios::binary);
    if (!in) return fail(ErrorCode::NotFound, "--tp-rules " + *path + ": cannot be opened");
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return fail(ErrorCode::Io, "--tp-rules " + *path + ": read failed");
    auto parsed = parse_tp_rules(text.str(), *path);
    if (!parsed) return fail(parsed.error());
    rules = std::move(*parsed);
  }
  rules.expert_parallel = expert_parallel;
  return rules;
}

Result<std::vector<RankBytes>> rank_bytes(const Checkpoint& ckpt, std::size_t world, const TpRules& rules) {
  std::vector<RankBytes> out;
  out.reserve(world);
  for (std::size_t r = 0; r < world; ++r) {
    auto sel = ckpt.select_for_rank(r, world, rules);
    if (!sel) return fail(sel.error());
    RankBytes b{r, sel->size(), 0, 0, 0};
    for (const auto& s : *sel) {
      b.bytes += s.plan.nbytes;
      (s.slice ? b.sliced_bytes : b.whole_bytes) += s.plan.nbytes;
    }
    out.push_back(b);
  }
  return out;
}

Metadata tp_metadata(const std::optional<TpModel>& model, TpRank rank, const TpRules& rules,
                     std::span<const Selection> selection) {
  nlohmann::ordered_json slices = nlohmann::ordered_json::object();
  for (const auto& s : selection) {
    if (s.slice) slices[std::string(s.ref.info->name)] = to_string(*s.slice);
  }
  return Metadata{{"tp_rank", std::to_string(rank.rank)},
                  {"tp_world", std::to_string(rank.world)},
                  {"tp_rule", describe_tp(model, rules)},
                  {"tp_slices", slices.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)}};
}

}  // namespace tensorfetch::cli
