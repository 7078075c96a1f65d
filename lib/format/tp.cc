// SPDX-License-Identifier: Apache-2.0
// Tensor-parallel placement (include/tensorfetch/tp.hpp): the Megatron/vLLM convention as a
// table of module names, a rules file, and the arithmetic of head-wise, even, vocabulary and
// expert splits. Pure; no I/O.
#include "tensorfetch/tp.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "base/text.h"
#include "format/json_internal.h"

namespace tensorfetch {

using detail::quote_name;

namespace {

// vLLM's DEFAULT_VOCAB_PADDING_SIZE: embeddings and the LM head are padded to a multiple of it
// before they are divided among the ranks.
constexpr std::uint64_t kVocabPadding = 64;

constexpr std::array<std::string_view, 13> kKnownTypes = {
    "llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral",
    "gemma", "gemma2", "gemma3_text", "phi3", "deepseek_v2", "deepseek_v3"};

template <std::size_t N>
bool one_of(std::string_view s, const std::array<std::string_view, N>& set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

// Module kinds of the convention.
enum class Kind { Unknown, Fused, Replicate, Vocab, ColumnHeads, ColumnKvHeads, Column, RowHeads, Row };

Kind module_kind(std::string_view module, std::string_view parent) {
  static constexpr std::array<std::string_view, 5> fused = {"qkv_proj", "gate_up_proj", "W_pack", "query_key_value",
                                                            "c_attn"};
  static constexpr std::array<std::string_view, 6> replicated = {
      "gate", "shared_expert_gate", "q_a_proj", "kv_a_proj_with_mqa", "eh_proj", "rotary_emb"};
  static constexpr std::array<std::string_view, 3> column_heads = {"q_proj", "q_b_proj", "kv_b_proj"};
  static constexpr std::array<std::string_view, 2> column_kv = {"k_proj", "v_proj"};
  static constexpr std::array<std::string_view, 4> column = {"gate_proj", "up_proj", "w1", "w3"};
  static constexpr std::array<std::string_view, 2> row = {"down_proj", "w2"};
  if (one_of(module, fused)) return Kind::Fused;
  if (module.find("norm") != std::string_view::npos || one_of(module, replicated)) return Kind::Replicate;
  if (module == "embed_tokens" || module == "lm_head" || (module == "head" && parent == "shared_head")) {
    return Kind::Vocab;
  }
  if (one_of(module, column_heads)) return Kind::ColumnHeads;
  if (one_of(module, column_kv)) return Kind::ColumnKvHeads;
  if (one_of(module, column)) return Kind::Column;
  if (module == "o_proj") return Kind::RowHeads;
  if (one_of(module, row)) return Kind::Row;
  return Kind::Unknown;
}

std::vector<std::string_view> components(std::string_view name) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = name.find('.', start);
    out.push_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return out;
    start = dot + 1;
  }
}

bool parse_number(std::string_view s, std::uint64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// The expert index: the number right after a component `experts`.
std::optional<std::uint64_t> expert_index(const std::vector<std::string_view>& parts) {
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    std::uint64_t e = 0;
    if (parts[i] == "experts" && parse_number(parts[i + 1], e)) return e;
  }
  return std::nullopt;
}

// Experts dealt out in contiguous blocks, as vLLM's expert map: the first E % n ranks one more.
std::size_t expert_owner(std::uint64_t expert, std::uint64_t experts, std::size_t world) {
  const std::uint64_t base = experts / world, extra = experts % world;
  const std::uint64_t boundary = extra * (base + 1);  // experts held by the ranks with one more
  if (expert < boundary) return static_cast<std::size_t>(expert / (base + 1));
  return static_cast<std::size_t>(extra + (expert - boundary) / base);
}

std::string tensor_text(const TensorInfo& t) { return "tensor " + quote_name(t.name); }

std::string shape_text(const TensorInfo& t) {
  std::string s = "[";
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

tl::unexpected<Error> unsplittable(const TensorInfo& t, const std::string& why) {
  return fail(ErrorCode::Unsplittable, tensor_text(t) + " (shape " + shape_text(t) + "): " + why +
                                           "; give a rule for it in a rules file (--tp-rules: glob -> "
                                           "{\"dim\": D} | \"replicate\" | \"expert\")");
}

// The slice `[:, ..., a:b]` selecting rows a..b of dimension `dim`.
SliceSpec slice_on(std::size_t dim, std::uint64_t start, std::uint64_t stop) {
  SliceSpec s;
  s.dims.resize(dim + 1);
  s.dims[dim].start = start;
  s.dims[dim].stop = stop;
  return s;
}

// Part `index` of `parts` equal parts of dimension `dim`.
Result<TpPlacement> equal_part(const TensorInfo& t, std::size_t dim, std::uint64_t parts, std::uint64_t index,
                               std::string rule) {
  if (dim >= t.shape.size()) {
    return unsplittable(t, "cannot split dim " + std::to_string(dim) + " of a tensor with " +
                               std::to_string(t.shape.size()) + " dimensions");
  }
  const std::uint64_t size = t.shape[dim];
  if (size % parts != 0) {
    return unsplittable(t, "dim " + std::to_string(dim) + " (" + std::to_string(size) + ") does not divide into " +
                               std::to_string(parts) + " parts");
  }
  const std::uint64_t step = size / parts;
  return TpPlacement{true, slice_on(dim, index * step, (index + 1) * step), std::move(rule)};
}

struct Heads {
  std::uint64_t parts = 0, index = 0;
};

// Whole heads per rank: `heads` % world == 0; with fewer heads than ranks (KV heads only, when
// `replicate_below`), world % heads == 0 and head r / (world / heads) on rank r.
Result<Heads> head_parts(const TensorInfo& t, std::uint64_t heads, const char* field, bool replicate_below,
                         TpRank r) {
  const std::uint64_t world = r.world;
  if (heads == 0) return unsplittable(t, std::string("config.json does not give ") + field);
  if (heads >= world || !replicate_below) {
    if (heads % world != 0) {
      return unsplittable(t, std::string(field) + " = " + std::to_string(heads) + " does not divide among " +
                                 std::to_string(world) + " ranks");
    }
    return Heads{world, r.rank};
  }
  if (world % heads != 0) {
    return unsplittable(t, std::to_string(world) + " ranks are not a multiple of " + field + " = " +
                               std::to_string(heads) + " (each KV head is replicated on world / heads ranks)");
  }
  return Heads{heads, r.rank / (world / heads)};
}

// The rows of a vocabulary-parallel tensor (vLLM's VocabParallelEmbedding / ParallelLMHead).
Result<TpPlacement> vocab_part(const TensorInfo& t, TpRank r) {
  if (t.shape.empty()) return unsplittable(t, "a scalar cannot be split by vocabulary rows");
  const std::uint64_t rows = t.shape[0];
  const std::uint64_t padded = (rows + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
  if (padded % r.world != 0) {
    return unsplittable(t, "the vocabulary (" + std::to_string(rows) + " rows, padded to " + std::to_string(padded) +
                               ") does not divide among " + std::to_string(r.world) + " ranks");
  }
  const std::uint64_t per = padded / r.world;
  const std::uint64_t start = std::min(rows, r.rank * per), stop = std::min(rows, (r.rank + 1) * per);
  return TpPlacement{true, slice_on(0, start, stop), "vocab-parallel dim 0 (padded to a multiple of 64)"};
}

Result<TpPlacement> replicate(std::string rule) { return TpPlacement{true, std::nullopt, std::move(rule)}; }

Result<TpPlacement> by_expert(const TensorInfo& t, const std::vector<std::string_view>& parts,
                              const std::optional<TpModel>& model, TpRank r, std::string rule) {
  const auto e = expert_index(parts);
  if (!e) return unsplittable(t, "expert parallelism needs an expert number ('experts.E.') in the name");
  const std::uint64_t n = model ? model->num_experts : 0;
  if (n == 0) return unsplittable(t, "expert parallelism needs the number of experts from config.json");
  if (*e >= n) {
    return unsplittable(t, "expert " + std::to_string(*e) + " beyond the " + std::to_string(n) +
                               " experts config.json names");
  }
  const std::size_t owner = expert_owner(*e, n, r.world);
  return TpPlacement{owner == r.rank, std::nullopt, rule + " (expert " + std::to_string(*e) + " on rank " +
                                                         std::to_string(owner) + ")"};
}

Result<TpPlacement> by_rule(const TensorInfo& t, const TpRule& rule, const std::vector<std::string_view>& parts,
                            const std::optional<TpModel>& model, const TpRules& rules, TpRank r) {
  const std::string what = "rule " + quote_name(rule.pattern) + " of " + rules.source;
  switch (rule.action) {
    case TpAction::Replicate: return replicate(what + ": replicate");
    case TpAction::Split: return equal_part(t, rule.dim, r.world, r.rank, what + ": dim " + std::to_string(rule.dim));
    case TpAction::Expert: return by_expert(t, parts, model, r, what + ": expert");
  }
  return unsplittable(t, "unknown rule");
}

Result<TpPlacement> by_convention(const TensorInfo& t, const std::vector<std::string_view>& parts,
                                  const TpModel& model, bool expert_parallel, TpRank r) {
  if (!model.known()) {
    return unsplittable(t, "model_type " + quote_name(model.model_type) + " has no built-in tensor-parallel convention");
  }
  if (parts.size() < 2) return unsplittable(t, "not a module's parameter (no '.')");
  const std::string_view param = parts.back(), module = parts[parts.size() - 2];
  const std::string_view parent = parts.size() >= 3 ? parts[parts.size() - 3] : std::string_view();
  const Kind kind = module_kind(module, parent);
  if (kind == Kind::Fused) {
    return unsplittable(t, "a fused layout (" + std::string(module) +
                               ": several projections in one tensor) cannot be split on one dimension");
  }
  if (kind == Kind::Unknown) {
    return unsplittable(t, "no tensor-parallel rule for module " + quote_name(module) + " (model_type " +
                               model.model_type + ")");
  }
  if (kind == Kind::Replicate) return replicate("replicated (" + std::string(module) + ")");
  if (t.num_elements() <= 1 && param != "weight" && param != "bias") {
    return replicate("replicated (" + std::string(param) + ": one element)");
  }
  if (param != "weight" && param != "bias" && param != "weight_scale_inv") {
    return unsplittable(t, "unknown parameter " + quote_name(param) + " of module " + quote_name(module));
  }
  const bool experts = expert_index(parts).has_value();
  if (experts && expert_parallel && (kind == Kind::Column || kind == Kind::Row)) {
    return by_expert(t, parts, model, r, "expert-parallel");
  }
  const std::string m(module);
  switch (kind) {
    case Kind::Vocab:
      if (param == "weight") return vocab_part(t, r);
      return unsplittable(t, "unknown parameter " + quote_name(param) + " of a vocabulary-parallel module");
    case Kind::ColumnHeads:
    case Kind::ColumnKvHeads: {
      const bool kv = kind == Kind::ColumnKvHeads;
      auto h = kv ? head_parts(t, model.num_key_value_heads, "num_key_value_heads", true, r)
                  : head_parts(t, model.num_attention_heads, "num_attention_heads", false, r);
      if (!h) return fail(h.error());
      const bool replicated_kv = kv && h->parts < r.world;
      return equal_part(t, 0, h->parts, h->index,
                        "column-parallel dim 0 (" + m + ", by heads" +
                            (replicated_kv ? ", KV head replicated on " + std::to_string(r.world / h->parts) + " ranks"
                                           : std::string()) +
                            ")");
    }
    case Kind::Column: return equal_part(t, 0, r.world, r.rank, "column-parallel dim 0 (" + m + ")");
    case Kind::RowHeads:
    case Kind::Row: {
      if (param == "bias") return replicate("replicated (" + m + ".bias of a row-parallel layer)");
      if (kind == Kind::RowHeads) {
        auto h = head_parts(t, model.num_attention_heads, "num_attention_heads", false, r);
        if (!h) return fail(h.error());
      }
      return equal_part(t, 1, r.world, r.rank,
                        "row-parallel dim 1 (" + m + (kind == Kind::RowHeads ? ", by heads)" : ")"));
    }
    default: break;
  }
  return unsplittable(t, "no tensor-parallel rule");
}

Result<std::uint64_t> positive_field(simdjson::dom::object obj, std::string_view key) {
  auto v = obj[key];
  if (v.error() == simdjson::NO_SUCH_FIELD) return std::uint64_t{0};
  std::uint64_t n = 0;
  if (v.error() || v.value().is_null()) return std::uint64_t{0};
  if (!detail::get_uint(v.value(), n) || n == 0) {
    return fail(ErrorCode::InvalidArgument, "config.json: " + std::string(key) + " must be a positive integer, not " +
                                                detail::excerpt(v.value()));
  }
  return n;
}

}  // namespace

Result<TpRank> parse_tp_rank(std::string_view text) {
  const auto bad = [&] {
    return fail(ErrorCode::InvalidArgument, "--tp " + quote_name(text) +
                                                ": expected RANK/WORLD, e.g. 0/4 (0 <= RANK < WORLD <= " +
                                                std::to_string(kMaxTpWorld) + ")");
  };
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos) return bad();
  std::uint64_t rank = 0, world = 0;
  if (!parse_number(text.substr(0, slash), rank) || !parse_number(text.substr(slash + 1), world)) return bad();
  if (world == 0 || world > kMaxTpWorld || rank >= world) return bad();
  return TpRank{static_cast<std::size_t>(rank), static_cast<std::size_t>(world)};
}

Result<TpRules> parse_tp_rules(std::string_view json, std::string_view source) {
  detail::JsonParser parser;
  const std::string where(source);
  auto doc = parser.parse(std::as_bytes(std::span(json.data(), json.size())), ErrorCode::InvalidArgument, where);
  if (!doc) return fail(doc.error());
  if (auto r = detail::check_no_duplicate_keys(*doc, where); !r) {
    return fail(ErrorCode::InvalidArgument, r.error().message);  // a usage error, not a bad checkpoint
  }
  simdjson::dom::object obj;
  if (doc->get(obj)) {
    return fail(ErrorCode::InvalidArgument,
                where + ": expected a JSON object of glob -> {\"dim\": D} | \"replicate\" | \"expert\"");
  }
  TpRules rules;
  rules.source = where;
  for (auto field : obj) {
    // Named copies, not structured bindings: clang 14 cannot capture those in a lambda.
    const std::string_view key = field.key;
    const simdjson::dom::element value = field.value;
    TpRule rule;
    rule.pattern = std::string(key);
    const auto bad = [&] {
      return fail(ErrorCode::InvalidArgument, where + ": rule " + quote_name(key) + ": expected {\"dim\": D}, " +
                                                  "\"replicate\" or \"expert\", not " + detail::excerpt(value));
    };
    if (rule.pattern.empty() || rule.pattern.find('\0') != std::string::npos) {
      return fail(ErrorCode::InvalidArgument, where + ": empty glob or a NUL byte in a glob");
    }
    std::string_view text;
    simdjson::dom::object dim_obj;
    if (!value.get(text)) {
      if (text == "replicate") {
        rule.action = TpAction::Replicate;
      } else if (text == "expert") {
        rule.action = TpAction::Expert;
      } else {
        return bad();
      }
    } else if (!value.get(dim_obj)) {
      std::uint64_t dim = 0;
      auto d = dim_obj["dim"];
      if (dim_obj.size() != 1 || d.error() || !detail::get_uint(d.value(), dim) || dim > 64) return bad();
      rule.action = TpAction::Split;
      rule.dim = static_cast<std::size_t>(dim);
    } else {
      return bad();
    }
    rules.rules.push_back(std::move(rule));
  }
  return rules;
}

bool TpModel::known() const noexcept { return one_of(model_type, kKnownTypes); }

Result<TpModel> parse_tp_model(std::string_view config_json) {
  detail::JsonParser parser;
  auto doc = parser.parse(std::as_bytes(std::span(config_json.data(), config_json.size())),
                          ErrorCode::InvalidArgument, "config.json");
  if (!doc) return fail(doc.error());
  simdjson::dom::object obj;
  if (doc->get(obj)) return fail(ErrorCode::InvalidArgument, "config.json is not a JSON object");
  TpModel m;
  std::string_view type;
  if (obj["model_type"].get(type)) {
    return fail(ErrorCode::InvalidArgument, "config.json: no model_type (a string) to choose a tensor-parallel convention");
  }
  m.model_type = std::string(type);
  auto heads = positive_field(obj, "num_attention_heads");
  if (!heads) return fail(heads.error());
  m.num_attention_heads = *heads;
  auto kv = positive_field(obj, "num_key_value_heads");
  if (!kv) return fail(kv.error());
  m.num_key_value_heads = *kv ? *kv : m.num_attention_heads;
  for (std::string_view key : {"n_routed_experts", "num_local_experts", "num_experts"}) {
    auto n = positive_field(obj, key);
    if (!n) return fail(n.error());
    if (*n) {
      m.num_experts = *n;
      break;
    }
  }
  return m;
}

Result<TpPlacement> place_tensor(const TensorInfo& tensor, const std::optional<TpModel>& model, const TpRules& rules,
                                 TpRank rank) {
  if (rank.world == 0 || rank.world > kMaxTpWorld || rank.rank >= rank.world) {
    return fail(ErrorCode::InvalidArgument, "rank " + std::to_string(rank.rank) + " of " + std::to_string(rank.world) +
                                                ": expected 0 <= rank < world <= " + std::to_string(kMaxTpWorld));
  }
  const auto parts = components(tensor.name);
  if (!rules.rules.empty()) {
    const std::string name(tensor.name);  // NUL-terminated for fnmatch
    for (const auto& rule : rules.rules) {
      if (rule.pattern == name || ::fnmatch(rule.pattern.c_str(), name.c_str(), 0) == 0) {
        return by_rule(tensor, rule, parts, model, rules, rank);
      }
    }
  }
  if (!model) return unsplittable(tensor, "no config.json (model_type unknown) and no rule matches");
  return by_convention(tensor, parts, *model, rules.expert_parallel, rank);
}

std::string describe_tp(const std::optional<TpModel>& model, const TpRules& rules) {
  std::string s = "megatron/vllm model_type=" + (model ? model->model_type : std::string("none"));
  s += rules.expert_parallel ? " experts=expert-parallel" : " experts=tensor-parallel";
  if (!rules.rules.empty()) s += " rules=" + rules.source;
  return s;
}

}  // namespace tensorfetch
