// SPDX-License-Identifier: Apache-2.0
// Checkpoint::select_for_rank: the tensor-parallel placement of the format layer (format/tp.cc)
// applied to every tensor of an open checkpoint, with the model read from its config.json.
// Built on the public members (config_json, tensors, select), plus, for a plain http(s) URL,
// the config.json beside it (url_config_json, remote.cc).
#include <filesystem>
#include <fstream>
#include <iterator>

#include "checkpoint/checkpoint_internal.h"
#include "net/url.h"
#include "tensorfetch/checkpoint.hpp"

namespace tensorfetch {

namespace {

constexpr std::uintmax_t kMaxConfigSize = 16u << 20;  // as open reads config.json

// config.json as open found it (a Hub repo, a directory), else, for a local file or index, the
// one beside it.
Result<std::optional<TpModel>> model_of(const Checkpoint& ckpt) {
  std::optional<std::string> text = ckpt.config_json();
  std::string where = ckpt.location();
  if (!text && !ckpt.remote()) {
    const auto beside = std::filesystem::path(ckpt.location()).parent_path() / "config.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(beside, ec) && std::filesystem::file_size(beside, ec) <= kMaxConfigSize &&
        !ec) {
      std::ifstream in(beside, std::ios::binary);
      text = std::string(std::istreambuf_iterator<char>(in), {});
      if (in.bad()) return fail(ErrorCode::Io, beside.string() + ": read failed");
      where = beside.string();
    }
  }
  if (!text) return std::optional<TpModel>{};
  auto m = parse_tp_model(*text);
  if (!m) return fail(m.error().with_context(where));
  return std::optional<TpModel>(std::move(*m));
}

}  // namespace

Result<std::optional<TpModel>> Checkpoint::tp_model() const {
  if (!config_json()) {  // a plain URL: the config.json beside it, when the server has one
    auto text = url_config_json(*impl_);
    if (!text) return fail(text.error());
    if (*text) {
      auto m = parse_tp_model(**text);
      if (!m) return fail(m.error().with_context(detail::sibling_url(location(), "config.json")));
      return std::optional<TpModel>(std::move(*m));
    }
  }
  return model_of(*this);
}

Result<std::vector<Selection>> Checkpoint::select_for_rank(std::size_t rank, std::size_t world, const TpRules& rules,
                                                           std::span<const Selector> only) const {
  const TpRank where{rank, world};
  if (world == 0 || world > kMaxTpWorld || rank >= world) {
    return fail(ErrorCode::InvalidArgument, "rank " + std::to_string(rank) + " of " + std::to_string(world) +
                                                ": expected 0 <= rank < world <= " + std::to_string(kMaxTpWorld));
  }
  auto model = tp_model();
  if (!model) return fail(model.error());
  std::vector<TensorRef> refs;
  if (only.empty()) {
    refs = tensors();
  } else {
    for (const auto& s : only) {
      if (s.slice) {
        return fail(ErrorCode::InvalidArgument, "'" + s.pattern + to_string(*s.slice) +
                                                    "': with tensor parallelism the rank's slices are chosen by the "
                                                    "convention or the rules; give names or globs without a slice");
      }
    }
    auto chosen = select(only);
    if (!chosen) return fail(chosen.error());
    refs.reserve(chosen->size());
    for (const auto& s : *chosen) refs.push_back(s.ref);
  }
  std::vector<Selection> out;
  out.reserve(refs.size());
  for (const auto& ref : refs) {
    auto placed = place_tensor(*ref.info, *model, rules, where);
    if (!placed) return fail(placed.error());
    if (!placed->held) continue;
    auto plan = plan_slice(*ref.info, placed->slice.value_or(SliceSpec{}));
    if (!plan) return fail(plan.error().with_context("tensor '" + std::string(ref.info->name) + "'"));
    out.push_back(Selection{ref, std::move(placed->slice), std::move(*plan)});
  }
  return out;
}

}  // namespace tensorfetch
