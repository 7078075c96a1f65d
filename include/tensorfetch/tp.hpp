// SPDX-License-Identifier: Apache-2.0
/// @file
/// Tensor parallelism: which slice of each tensor a rank of a tensor-parallel group holds,
/// following the Megatron-LM / vLLM convention for the architectures the Hub is full of
/// (Llama, Mistral, Qwen2/3 and their MoE variants, Mixtral, Gemma 1-3, Phi-3, DeepSeek-V2/V3),
/// read from the model's `config.json`, and overridden by a rules file. Pure functions; no I/O.
///
/// The convention, per tensor (the module is the name's second-to-last component):
/// - column-parallel, split on dim 0: `q_proj`, `k_proj`, `v_proj`, `q_b_proj`, `kv_b_proj`
///   (by attention heads), `gate_proj`, `up_proj`, `w1`, `w3` (evenly), with their biases;
/// - vocabulary-parallel, split on dim 0 as vLLM's `VocabParallelEmbedding`: `embed_tokens`,
///   `lm_head`, `shared_head.head`; the rows are padded to a multiple of 64, divided by the
///   world size, and the last ranks get fewer (possibly no) real rows;
/// - row-parallel, split on dim 1: `o_proj` (by heads), `down_proj`, `w2` (evenly); their
///   biases are replicated (added after the all-reduce);
/// - replicated: norms (any module whose name contains `norm`), the MoE router (`gate`,
///   `shared_expert_gate`), DeepSeek's `q_a_proj`, `kv_a_proj_with_mqa` and `eh_proj`,
///   `rotary_emb`, and any parameter of at most one element (a per-tensor scale);
/// - GQA: with fewer KV heads than ranks (`num_key_value_heads` < world, which must divide
///   it), each KV head is replicated on world / num_key_value_heads consecutive ranks;
/// - MoE experts (`...experts.E.{gate,up,down}_proj`, `w1/w2/w3`): tensor-parallel within each
///   expert by default; with `TpRules::expert_parallel`, whole experts are dealt out in
///   contiguous blocks (rank r of n gets E/n experts, the first E%n ranks one more) and a rank
///   holds only its own;
/// - FP8 block scales (`weight_scale_inv`) are split like their weight, on the same dimension.
/// Fused layouts (`qkv_proj`, `gate_up_proj`, `W_pack`, `query_key_value`, `c_attn`), unknown
/// modules or parameters, a model type without a built-in convention, a missing `config.json`
/// and a dimension that does not divide are errors (`Unsplittable`) naming the tensor, unless
/// a rule of the rules file matches it first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"
#include "tensorfetch/format.hpp"
#include "tensorfetch/slice.hpp"

namespace tensorfetch {

/// One rank of a tensor-parallel group. A plain value.
struct TpRank {
  std::size_t rank = 0;   ///< 0 .. world-1
  std::size_t world = 1;  ///< the group's size (tensor-parallel degree)
};

/// Largest world size accepted.
inline constexpr std::size_t kMaxTpWorld = 65536;

/// Parses `R/N` (rank R of N, decimal, 0 <= R < N <= kMaxTpWorld); anything else is
/// `InvalidArgument` with a message saying what was expected.
[[nodiscard]] TENSORFETCH_API Result<TpRank> parse_tp_rank(std::string_view text);

/// What a rule does with the tensors it matches.
enum class TpAction {
  Split,      ///< split evenly on `dim` (the size there must divide by the world size)
  Replicate,  ///< every rank holds the whole tensor
  Expert,     ///< the tensor belongs to the expert numbered after `experts.` in its name; only
              ///< the rank that owns that expert holds it (whole)
};

/// One rule of a rules file: a glob (fnmatch syntax, `*` also matches `.`) and what to do.
struct TpRule {
  std::string pattern;                 ///< exact name or glob
  TpAction action = TpAction::Replicate;  ///< what to do with a matching tensor
  std::size_t dim = 0;                 ///< the dimension, for `Split`
};

/// The user's rules. The first rule whose pattern matches a tensor decides, before the built-in
/// convention. A plain value.
struct TpRules {
  std::vector<TpRule> rules;     ///< in the order given
  bool expert_parallel = false;  ///< MoE experts by expert index instead of TP within each
  std::string source;            ///< where the rules came from (a file name), for messages
};

/// Parses a rules file: one JSON object, glob -> `{"dim": D}` | `"replicate"` | `"expert"`, in
/// file order; `source` names the file in messages. Anything else (another value, a key twice,
/// another field) is `InvalidArgument` naming the glob.
[[nodiscard]] TENSORFETCH_API Result<TpRules> parse_tp_rules(std::string_view json, std::string_view source = "rules");

/// What the convention needs from a model's `config.json`. A plain value.
struct TpModel {
  std::string model_type;                 ///< e.g. "llama", "deepseek_v3"
  std::uint64_t num_attention_heads = 0;  ///< 0: not given
  std::uint64_t num_key_value_heads = 0;  ///< defaults to num_attention_heads
  std::uint64_t num_experts = 0;          ///< routed experts (n_routed_experts, num_local_experts, num_experts)
  /// True when the model type has a built-in convention (see the file comment).
  [[nodiscard]] TENSORFETCH_API bool known() const noexcept;
};

/// Reads a `config.json` (a JSON object; `model_type` required, the head and expert counts as
/// above, must be positive integers when present). Errors are `InvalidArgument` naming the field.
[[nodiscard]] TENSORFETCH_API Result<TpModel> parse_tp_model(std::string_view config_json);

/// Where one tensor goes on one rank. A plain value.
struct TpPlacement {
  bool held = true;                ///< false: this rank holds nothing of it (another rank's expert)
  std::optional<SliceSpec> slice;  ///< the rank's slice; unset: the whole tensor
  std::string rule;                ///< which rule decided, e.g. "column-parallel (q_proj, by heads)"
};

/// The placement of `tensor` on `rank`: the rules first, then the built-in convention for
/// `model` (none: no `config.json`, only the rules apply). Errors are `Unsplittable` (a layout
/// the rules cannot split, naming the tensor and why) or `InvalidArgument` (a bad rank).
[[nodiscard]] TENSORFETCH_API Result<TpPlacement> place_tensor(const TensorInfo& tensor,
                                                               const std::optional<TpModel>& model,
                                                               const TpRules& rules, TpRank rank);

/// A one-line description of the convention applied, for `__metadata__` and listings, e.g.
/// "megatron/vllm model_type=llama experts=tensor-parallel rules=tp.json".
[[nodiscard]] TENSORFETCH_API std::string describe_tp(const std::optional<TpModel>& model, const TpRules& rules);

}  // namespace tensorfetch
