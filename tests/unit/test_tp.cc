// SPDX-License-Identifier: Apache-2.0
// Tensor-parallel placement (tensorfetch/tp.hpp): the Megatron/vLLM convention as tables of
// (config.json, tensor, rank) -> slice | whole | not held | error, for Llama, Mistral, Qwen2/3,
// Gemma, Phi-3 (fused: an error unless a rule says), DeepSeek-V3 (MLA + MoE, FP8 block scales);
// rules files; `R/N` parsing; and the property that the ranks' slices tile every tensor.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tensorfetch/tp.hpp"
#include "test_util.hpp"

namespace tf = tensorfetch;
using tf::ErrorCode;
using tf::TpModel;
using tf::TpRank;
using tf::TpRules;
using Shape = std::vector<std::uint64_t>;

namespace {

// Real configs, cut to what the convention reads (plus some fields it must ignore).
const std::map<std::string, std::string> kConfigs = {
    {"llama3-8b", R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,
                    "num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,
                    "vocab_size":128256,"rope_scaling":null})"},
    {"mistral-7b", R"({"model_type":"mistral","hidden_size":4096,"num_attention_heads":32,
                     "num_key_value_heads":8,"intermediate_size":14336,"vocab_size":32000})"},
    {"qwen2-7b", R"({"model_type":"qwen2","hidden_size":3584,"num_attention_heads":28,
                   "num_key_value_heads":4,"intermediate_size":18944,"vocab_size":152064})"},
    {"qwen3-8b", R"({"model_type":"qwen3","hidden_size":4096,"num_attention_heads":32,"num_key_value_heads":8,
                   "head_dim":128,"intermediate_size":12288,"vocab_size":151936})"},
    {"gemma-2b", R"({"model_type":"gemma","hidden_size":2048,"num_attention_heads":8,
                   "num_key_value_heads":1,"head_dim":256,"intermediate_size":16384,"vocab_size":256000})"},
    {"phi3-mini", R"({"model_type":"phi3","hidden_size":3072,"num_attention_heads":32,
                    "num_key_value_heads":32,"intermediate_size":8192,"vocab_size":32064})"},
    {"deepseek-v3", R"({"model_type":"deepseek_v3","hidden_size":7168,"num_attention_heads":128,
                      "num_key_value_heads":128,"n_routed_experts":256,"n_shared_experts":1,
                      "q_lora_rank":1536,"kv_lora_rank":512,"moe_intermediate_size":2048,
                      "vocab_size":129280,"quantization_config":{"quant_method":"fp8"}})"},
    {"bert", R"({"model_type":"bert","num_attention_heads":12})"},
};

TpModel model(const std::string& key) {
  auto m = tf::parse_tp_model(kConfigs.at(key));
  REQUIRE(m);
  return *m;
}

// A BF16 tensor by name and shape (its header entry: tftest::make_tensor).
struct Tensor {
  std::string name;
  Shape shape;
  tf::TensorInfo info() const { return tftest::make_tensor(name, tf::DType::BF16, shape); }
};

// What a row expects: a slice [start:stop] of `dim`, the whole tensor, nothing, or an error.
enum class Want { Slice, Whole, NotHeld, Error };

struct Row {
  const char* config;  // key of kConfigs; "" = no config.json
  const char* name;
  Shape shape;
  std::size_t rank, world;
  Want want;
  std::size_t dim = 0;
  std::uint64_t start = 0, stop = 0;
  const char* mention = "";  // in the rule (success) or in the error message
  bool expert_parallel = false;
};

void check_row(const Row& row, const TpRules& base_rules = {}) {
  INFO(row.config << " " << row.name << " rank " << row.rank << "/" << row.world);
  std::optional<TpModel> m;
  if (*row.config) m = model(row.config);
  TpRules rules = base_rules;
  rules.expert_parallel = row.expert_parallel;
  const Tensor t{row.name, row.shape};
  auto p = tf::place_tensor(t.info(), m, rules, TpRank{row.rank, row.world});
  if (row.want == Want::Error) {
    CHECK_ERROR(p, ErrorCode::Unsplittable, row.name, row.mention);
    return;
  }
  REQUIRE(p);
  INFO("rule: " << p->rule);
  CHECK_THAT(p->rule, Catch::Matchers::Contains(row.mention));
  switch (row.want) {
    case Want::NotHeld: CHECK_FALSE(p->held); break;
    case Want::Whole:
      CHECK(p->held);
      CHECK_FALSE(p->slice.has_value());
      break;
    case Want::Slice: {
      CHECK(p->held);
      REQUIRE(p->slice.has_value());
      REQUIRE(p->slice->dims.size() == row.dim + 1);
      for (std::size_t d = 0; d < row.dim; ++d) {  // leading dimensions whole
        CHECK_FALSE(p->slice->dims[d].start.has_value());
        CHECK_FALSE(p->slice->dims[d].stop.has_value());
      }
      CHECK(p->slice->dims[row.dim].start == row.start);
      CHECK(p->slice->dims[row.dim].stop == row.stop);
      break;
    }
    case Want::Error: break;
  }
}

}  // namespace

TEST_CASE("tp: Llama, Mistral, Qwen2, Gemma follow vLLM's column/row/vocab/replicated layout") {
  const std::vector<Row> rows = {
      // Llama 3 8B at TP 4: 32 heads -> 8 per rank (1024 rows); 8 KV heads -> 2 per rank.
      {"llama3-8b", "model.layers.0.self_attn.q_proj.weight", {4096, 4096}, 1, 4, Want::Slice, 0, 1024, 2048, "q_proj"},
      {"llama3-8b", "model.layers.0.self_attn.k_proj.weight", {1024, 4096}, 3, 4, Want::Slice, 0, 768, 1024, "by heads"},
      {"llama3-8b", "model.layers.0.self_attn.v_proj.weight", {1024, 4096}, 0, 4, Want::Slice, 0, 0, 256, "v_proj"},
      {"llama3-8b", "model.layers.0.self_attn.o_proj.weight", {4096, 4096}, 2, 4, Want::Slice, 1, 2048, 3072, "row-parallel"},
      {"llama3-8b", "model.layers.0.mlp.gate_proj.weight", {14336, 4096}, 1, 4, Want::Slice, 0, 3584, 7168, "column"},
      {"llama3-8b", "model.layers.0.mlp.up_proj.weight", {14336, 4096}, 3, 4, Want::Slice, 0, 10752, 14336, "up_proj"},
      {"llama3-8b", "model.layers.0.mlp.down_proj.weight", {4096, 14336}, 0, 4, Want::Slice, 1, 0, 3584, "row-parallel"},
      {"llama3-8b", "model.layers.0.input_layernorm.weight", {4096}, 2, 4, Want::Whole, 0, 0, 0, "replicated"},
      {"llama3-8b", "model.layers.0.post_attention_layernorm.weight", {4096}, 1, 4, Want::Whole, 0, 0, 0, "replicated"},
      {"llama3-8b", "model.norm.weight", {4096}, 3, 4, Want::Whole, 0, 0, 0, "norm"},
      {"llama3-8b", "model.embed_tokens.weight", {128256, 4096}, 1, 4, Want::Slice, 0, 32064, 64128, "vocab"},
      {"llama3-8b", "lm_head.weight", {128256, 4096}, 3, 4, Want::Slice, 0, 96192, 128256, "vocab"},
      {"llama3-8b", "model.layers.0.self_attn.rotary_emb.inv_freq", {64}, 0, 4, Want::Whole, 0, 0, 0, "rotary"},
      // GQA at TP 16 (8 KV heads < 16 ranks): each KV head on 2 consecutive ranks.
      {"llama3-8b", "model.layers.5.self_attn.k_proj.weight", {1024, 4096}, 0, 16, Want::Slice, 0, 0, 128, "replicated on 2"},
      {"llama3-8b", "model.layers.5.self_attn.k_proj.weight", {1024, 4096}, 1, 16, Want::Slice, 0, 0, 128, "replicated on 2"},
      {"llama3-8b", "model.layers.5.self_attn.v_proj.weight", {1024, 4096}, 15, 16, Want::Slice, 0, 896, 1024, "KV head"},
      {"llama3-8b", "model.layers.5.self_attn.q_proj.weight", {4096, 4096}, 15, 16, Want::Slice, 0, 3840, 4096, "q_proj"},
      // 32 heads among 3 ranks: not whole heads.
      {"llama3-8b", "model.layers.0.self_attn.q_proj.weight", {4096, 4096}, 0, 3, Want::Error, 0, 0, 0, "num_attention_heads = 32"},
      {"llama3-8b", "model.layers.0.self_attn.o_proj.weight", {4096, 4096}, 0, 3, Want::Error, 0, 0, 0, "among 3 ranks"},
      // 8 KV heads, 12 ranks: not a multiple.
      {"llama3-8b", "model.layers.0.self_attn.k_proj.weight", {1024, 4096}, 0, 12, Want::Error, 0, 0, 0, "num_key_value_heads = 8"},
      // Mistral: vocab 32000 padded to 32000 (a multiple of 64) over 8 ranks = 4000 rows each.
      {"mistral-7b", "model.embed_tokens.weight", {32000, 4096}, 7, 8, Want::Slice, 0, 28000, 32000, "vocab"},
      {"mistral-7b", "model.layers.31.self_attn.k_proj.weight", {1024, 4096}, 7, 8, Want::Slice, 0, 896, 1024, "k_proj"},
      // Qwen2 7B: q/k/v carry biases, split like their weights; o_proj has none.
      {"qwen2-7b", "model.layers.0.self_attn.q_proj.bias", {3584}, 1, 4, Want::Slice, 0, 896, 1792, "q_proj"},
      {"qwen2-7b", "model.layers.0.self_attn.k_proj.bias", {512}, 3, 4, Want::Slice, 0, 384, 512, "k_proj"},
      {"qwen2-7b", "model.layers.0.self_attn.v_proj.weight", {512, 3584}, 2, 4, Want::Slice, 0, 256, 384, "v_proj"},
      {"qwen2-7b", "model.layers.0.mlp.down_proj.weight", {3584, 18944}, 3, 4, Want::Slice, 1, 14208, 18944, "down_proj"},
      // Qwen2's vocabulary 152064 at TP 8: 19008 each.
      {"qwen2-7b", "lm_head.weight", {152064, 3584}, 7, 8, Want::Slice, 0, 133056, 152064, "vocab"},
      // 28 heads among 8 ranks: vLLM refuses too.
      {"qwen2-7b", "model.layers.0.self_attn.q_proj.weight", {3584, 3584}, 0, 8, Want::Error, 0, 0, 0, "28"},
      // A row-parallel bias is replicated (added once, after the all-reduce).
      {"qwen2-7b", "model.layers.0.self_attn.o_proj.bias", {3584}, 2, 4, Want::Whole, 0, 0, 0, "bias"},
      // Qwen3: per-head q/k norms (head_dim wide) are replicated like every norm.
      {"qwen3-8b", "model.layers.0.self_attn.q_norm.weight", {128}, 1, 4, Want::Whole, 0, 0, 0, "q_norm"},
      {"qwen3-8b", "model.layers.0.self_attn.k_norm.weight", {128}, 3, 4, Want::Whole, 0, 0, 0, "replicated"},
      {"qwen3-8b", "model.layers.0.self_attn.k_proj.weight", {1024, 4096}, 1, 4, Want::Slice, 0, 256, 512, "k_proj"},
      // Gemma 2B: multi-query attention (1 KV head): every rank holds the whole k/v.
      {"gemma-2b", "model.layers.0.self_attn.k_proj.weight", {256, 2048}, 3, 4, Want::Slice, 0, 0, 256, "replicated on 4"},
      {"gemma-2b", "model.layers.0.self_attn.q_proj.weight", {2048, 2048}, 3, 4, Want::Slice, 0, 1536, 2048, "q_proj"},
      {"gemma-2b", "model.layers.0.mlp.gate_proj.weight", {16384, 2048}, 0, 4, Want::Slice, 0, 0, 4096, "gate_proj"},
      {"gemma-2b", "model.embed_tokens.weight", {256000, 2048}, 2, 4, Want::Slice, 0, 128000, 192000, "vocab"},
      // An odd intermediate size: the dimension does not divide.
      {"gemma-2b", "model.layers.0.mlp.gate_proj.weight", {16383, 2048}, 0, 4, Want::Error, 0, 0, 0, "16383"},
  };
  for (const auto& row : rows) check_row(row);
}

TEST_CASE("tp: vocabulary rows are padded to 64 as vLLM does; the last ranks get fewer, even none") {
  const std::vector<Row> rows = {
      // 1000 rows padded to 1024, 4 ranks of 256: the last holds 232 real rows.
      {"llama3-8b", "model.embed_tokens.weight", {1000, 16}, 3, 4, Want::Slice, 0, 768, 1000, "vocab"},
      // 100 rows padded to 128 over 64 ranks of 2: rank 50 holds rows 100..100 (none).
      {"llama3-8b", "lm_head.weight", {100, 16}, 50, 64, Want::Slice, 0, 100, 100, "vocab"},
      // 64 padded rows over 128 ranks: does not divide.
      {"llama3-8b", "lm_head.weight", {64, 16}, 0, 128, Want::Error, 0, 0, 0, "padded to 64"},
  };
  for (const auto& row : rows) check_row(row);
}

TEST_CASE("tp: Phi-3's fused qkv_proj and gate_up_proj are errors naming the tensor, unless a rule says") {
  const std::vector<Row> rows = {
      {"phi3-mini", "model.layers.0.self_attn.qkv_proj.weight", {9216, 3072}, 0, 4, Want::Error, 0, 0, 0, "fused"},
      {"phi3-mini", "model.layers.0.mlp.gate_up_proj.weight", {16384, 3072}, 1, 4, Want::Error, 0, 0, 0, "gate_up_proj"},
      // The rest of Phi-3 follows the convention.
      {"phi3-mini", "model.layers.0.self_attn.o_proj.weight", {3072, 3072}, 1, 4, Want::Slice, 1, 768, 1536, "o_proj"},
  };
  for (const auto& row : rows) check_row(row);
  auto rules = tf::parse_tp_rules(R"({"*.qkv_proj.weight": {"dim": 0}, "*.gate_up_proj.*": "replicate"})", "phi3.json");
  REQUIRE(rules);
  const std::vector<Row> ruled = {
      {"phi3-mini", "model.layers.0.self_attn.qkv_proj.weight", {9216, 3072}, 1, 4, Want::Slice, 0, 2304, 4608, "phi3.json"},
      {"phi3-mini", "model.layers.7.mlp.gate_up_proj.weight", {16384, 3072}, 1, 4, Want::Whole, 0, 0, 0, "replicate"},
  };
  for (const auto& row : ruled) check_row(row, *rules);
}

TEST_CASE("tp: DeepSeek-V3: MLA projections, the router, shared experts, experts by TP or by expert index") {
  const std::vector<Row> rows = {
      {"deepseek-v3", "model.layers.0.self_attn.q_a_proj.weight", {1536, 7168}, 3, 8, Want::Whole, 0, 0, 0, "q_a_proj"},
      {"deepseek-v3", "model.layers.0.self_attn.q_a_layernorm.weight", {1536}, 3, 8, Want::Whole, 0, 0, 0, "replicated"},
      {"deepseek-v3", "model.layers.0.self_attn.q_b_proj.weight", {24576, 1536}, 1, 8, Want::Slice, 0, 3072, 6144, "q_b_proj"},
      {"deepseek-v3", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", {576, 7168}, 5, 8, Want::Whole, 0, 0, 0, "kv_a"},
      {"deepseek-v3", "model.layers.0.self_attn.kv_b_proj.weight", {32768, 512}, 7, 8, Want::Slice, 0, 28672, 32768, "kv_b_proj"},
      {"deepseek-v3", "model.layers.0.self_attn.o_proj.weight", {7168, 16384}, 2, 8, Want::Slice, 1, 4096, 6144, "o_proj"},
      // Dense layers (first_k_dense_replace) and shared experts: plain TP.
      {"deepseek-v3", "model.layers.0.mlp.gate_proj.weight", {18432, 7168}, 1, 8, Want::Slice, 0, 2304, 4608, "gate_proj"},
      {"deepseek-v3", "model.layers.3.mlp.shared_experts.down_proj.weight", {7168, 2048}, 1, 8, Want::Slice, 1, 256, 512, "down"},
      // The router and its correction bias are replicated.
      {"deepseek-v3", "model.layers.3.mlp.gate.weight", {256, 7168}, 6, 8, Want::Whole, 0, 0, 0, "gate"},
      {"deepseek-v3", "model.layers.3.mlp.gate.e_score_correction_bias", {256}, 6, 8, Want::Whole, 0, 0, 0, "gate"},
      // Experts, TP within each expert (the default).
      {"deepseek-v3", "model.layers.3.mlp.experts.17.gate_proj.weight", {2048, 7168}, 1, 8, Want::Slice, 0, 256, 512, "column"},
      {"deepseek-v3", "model.layers.3.mlp.experts.17.down_proj.weight", {7168, 2048}, 1, 8, Want::Slice, 1, 256, 512, "row"},
      // FP8 block scales ([ceil(out/128), ceil(in/128)]) split like their weight.
      {"deepseek-v3", "model.layers.3.mlp.experts.17.gate_proj.weight_scale_inv", {16, 56}, 1, 8, Want::Slice, 0, 2, 4, "column"},
      {"deepseek-v3", "model.layers.3.mlp.experts.17.down_proj.weight_scale_inv", {56, 16}, 7, 8, Want::Slice, 1, 14, 16, "row"},
      // Expert parallel: 256 experts over 8 ranks, 32 each, in blocks.
      {"deepseek-v3", "model.layers.3.mlp.experts.17.gate_proj.weight", {2048, 7168}, 0, 8, Want::Whole, 0, 0, 0,
       "expert 17 on rank 0", true},
      {"deepseek-v3", "model.layers.3.mlp.experts.17.up_proj.weight", {2048, 7168}, 1, 8, Want::NotHeld, 0, 0, 0,
       "expert 17 on rank 0", true},
      {"deepseek-v3", "model.layers.60.mlp.experts.255.down_proj.weight_scale_inv", {56, 16}, 7, 8, Want::Whole, 0, 0, 0,
       "expert 255 on rank 7", true},
      // 256 experts over 6 ranks: 43, 43, 43, 43, 42, 42.
      {"deepseek-v3", "model.layers.3.mlp.experts.171.down_proj.weight", {7168, 2048}, 3, 6, Want::Whole, 0, 0, 0,
       "expert 171 on rank 3", true},
      {"deepseek-v3", "model.layers.3.mlp.experts.172.down_proj.weight", {7168, 2048}, 4, 6, Want::Whole, 0, 0, 0,
       "expert 172 on rank 4", true},
      {"deepseek-v3", "model.layers.3.mlp.experts.255.down_proj.weight", {7168, 2048}, 5, 6, Want::Whole, 0, 0, 0,
       "expert 255 on rank 5", true},
      // Shared experts stay TP under expert parallelism; an expert beyond the count is refused.
      {"deepseek-v3", "model.layers.3.mlp.shared_experts.gate_proj.weight", {2048, 7168}, 2, 8, Want::Slice, 0, 512, 768,
       "gate_proj", true},
      {"deepseek-v3", "model.layers.3.mlp.experts.256.gate_proj.weight", {2048, 7168}, 0, 8, Want::Error, 0, 0, 0,
       "beyond the 256", true},
      // The MTP layer: eh_proj replicated, enorm/hnorm norms, shared_head.head vocab-parallel.
      {"deepseek-v3", "model.layers.61.eh_proj.weight", {7168, 14336}, 1, 8, Want::Whole, 0, 0, 0, "eh_proj"},
      {"deepseek-v3", "model.layers.61.enorm.weight", {7168}, 1, 8, Want::Whole, 0, 0, 0, "enorm"},
      {"deepseek-v3", "model.layers.61.shared_head.head.weight", {129280, 7168}, 0, 8, Want::Slice, 0, 0, 16160, "vocab"},
      // 128 heads among 3 ranks.
      {"deepseek-v3", "model.layers.0.self_attn.q_b_proj.weight", {24576, 1536}, 0, 3, Want::Error, 0, 0, 0, "128"},
  };
  for (const auto& row : rows) check_row(row);
}

TEST_CASE("tp: unknown modules, parameters, model types and a missing config.json are errors") {
  const std::vector<Row> rows = {
      {"llama3-8b", "model.layers.0.self_attn.rope.weight", {64, 64}, 0, 2, Want::Error, 0, 0, 0, "module 'rope'"},
      {"llama3-8b", "model.layers.0.mlp.gate_proj.qweight", {512, 4096}, 0, 2, Want::Error, 0, 0, 0, "parameter 'qweight'"},
      {"llama3-8b", "lonely", {4}, 0, 2, Want::Error, 0, 0, 0, "no '.'"},
      {"bert", "encoder.layer.0.attention.self.query.weight", {768, 768}, 0, 2, Want::Error, 0, 0, 0, "'bert'"},
      {"", "model.layers.0.self_attn.q_proj.weight", {64, 64}, 0, 2, Want::Error, 0, 0, 0, "no config.json"},
      // One element (a per-tensor FP8 scale) is replicated.
      {"llama3-8b", "model.layers.0.self_attn.q_proj.input_scale", {}, 1, 2, Want::Whole, 0, 0, 0, "one element"},
      // World 1: everything whole-sized.
      {"llama3-8b", "model.layers.0.self_attn.q_proj.weight", {4096, 4096}, 0, 1, Want::Slice, 0, 0, 4096, "q_proj"},
  };
  for (const auto& row : rows) check_row(row);
  // A bad rank.
  const Tensor t{"model.norm.weight", {8}};
  CHECK_ERROR(tf::place_tensor(t.info(), model("llama3-8b"), {}, TpRank{4, 4}), ErrorCode::InvalidArgument, "rank 4");
  CHECK_ERROR(tf::place_tensor(t.info(), model("llama3-8b"), {}, TpRank{0, 0}), ErrorCode::InvalidArgument, "world");
}

TEST_CASE("tp: rules files: first match wins, before the convention; bad files are refused by name") {
  auto rules = tf::parse_tp_rules(R"({
      "model.layers.0.*": "replicate",
      "*.q_proj.weight": {"dim": 1},
      "blocks.*.experts.*": "expert",
      "*": {"dim": 0}
  })",
                                  "r.json");
  REQUIRE(rules);
  REQUIRE(rules->rules.size() == 4);
  CHECK(rules->rules[0].action == tf::TpAction::Replicate);
  CHECK(rules->rules[1].action == tf::TpAction::Split);
  CHECK(rules->rules[1].dim == 1);
  CHECK(rules->rules[2].action == tf::TpAction::Expert);
  const std::vector<Row> rows = {
      // Without config.json the rules alone decide.
      {"", "model.layers.0.self_attn.q_proj.weight", {64, 64}, 1, 2, Want::Whole, 0, 0, 0, "model.layers.0.*"},
      {"", "model.layers.1.self_attn.q_proj.weight", {64, 64}, 1, 2, Want::Slice, 1, 32, 64, "*.q_proj.weight"},
      {"", "anything", {6, 3}, 2, 3, Want::Slice, 0, 4, 6, "'*'"},
      {"", "anything", {7, 3}, 2, 3, Want::Error, 0, 0, 0, "(7) does not divide into 3"},
      // "expert" needs the expert count from config.json.
      {"", "blocks.1.experts.3.w", {4}, 0, 2, Want::Error, 0, 0, 0, "number of experts"},
      {"deepseek-v3", "blocks.1.experts.3.w", {4}, 0, 2, Want::Whole, 0, 0, 0, "expert 3 on rank 0"},
      {"deepseek-v3", "blocks.1.experts.200.w", {4}, 0, 2, Want::NotHeld, 0, 0, 0, "expert 200 on rank 1"},
  };
  for (const auto& row : rows) check_row(row, *rules);
  // A split dimension the tensor does not have.
  auto dim3 = tf::parse_tp_rules(R"({"x": {"dim": 3}})", "d.json");
  REQUIRE(dim3);
  check_row({"", "x", {4, 4}, 0, 2, Want::Error, 0, 0, 0, "2 dimensions"}, *dim3);

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[]", "expected a JSON object"},
      {R"({"a": "split"})", "rule 'a'"},
      {R"({"a": {"dim": -1}})", "rule 'a'"},
      {R"({"a": {"dim": 0, "size": 2}})", "rule 'a'"},
      {R"({"a": {"dim": 1.5}})", "rule 'a'"},
      {R"({"a": 3})", "rule 'a'"},
      {R"({"a": "replicate", "a": "expert"})", "a"},
      {R"({"": "replicate"})", "empty glob"},
      {"{", "not valid JSON"},
  };
  for (const auto& [text, mention] : bad) {
    INFO(text);
    CHECK_ERROR(tf::parse_tp_rules(text, "bad.json"), ErrorCode::InvalidArgument, "bad.json", mention);
  }
}

TEST_CASE("tp: config.json fields") {
  auto m = tf::parse_tp_model(R"({"model_type":"qwen3_moe","num_attention_heads":32,"num_experts":128})");
  REQUIRE(m);
  CHECK(m->known());
  CHECK(m->num_key_value_heads == 32);  // defaults to the attention heads
  CHECK(m->num_experts == 128);
  auto mixtral = tf::parse_tp_model(R"({"model_type":"mixtral","num_attention_heads":32,"num_key_value_heads":8,
                                        "num_local_experts":8})");
  REQUIRE(mixtral);
  CHECK(mixtral->num_experts == 8);
  CHECK_FALSE(model("bert").known());
  CHECK_ERROR(tf::parse_tp_model(R"({"num_attention_heads":32})"), ErrorCode::InvalidArgument, "model_type");
  CHECK_ERROR(tf::parse_tp_model(R"({"model_type":"llama","num_attention_heads":0})"), ErrorCode::InvalidArgument,
              "num_attention_heads");
  CHECK_ERROR(tf::parse_tp_model(R"({"model_type":"llama","num_key_value_heads":"8"})"), ErrorCode::InvalidArgument,
              "num_key_value_heads");
  CHECK_ERROR(tf::parse_tp_model("[1]"), ErrorCode::InvalidArgument, "not a JSON object");
}

TEST_CASE("tp: R/N parsing") {
  auto r = tf::parse_tp_rank("3/8");
  REQUIRE(r);
  CHECK(r->rank == 3);
  CHECK(r->world == 8);
  for (const char* bad : {"", "3", "8/8", "9/8", "0/0", "-1/4", "1/-4", " 1/4", "1/4 ", "a/4", "1/4/2", "0/65537",
                          "99999999999999999999/1"}) {
    INFO(bad);
    CHECK_ERROR(tf::parse_tp_rank(bad), ErrorCode::InvalidArgument, "RANK/WORLD");
  }
}

TEST_CASE("tp: the ranks' slices tile every tensor exactly (KV heads: each head once per replica group)") {
  struct Case {
    const char* config;
    Tensor tensor;
  };
  const std::vector<Case> cases = {
      {"llama3-8b", {"model.layers.0.self_attn.q_proj.weight", {4096, 4096}}},
      {"llama3-8b", {"model.layers.0.self_attn.k_proj.weight", {1024, 4096}}},
      {"llama3-8b", {"model.layers.0.mlp.down_proj.weight", {4096, 14336}}},
      {"llama3-8b", {"model.embed_tokens.weight", {128256, 4096}}},
      {"mistral-7b", {"lm_head.weight", {32000, 4096}}},
      {"qwen2-7b", {"model.layers.0.self_attn.k_proj.bias", {512}}},
      {"deepseek-v3", {"model.layers.3.mlp.experts.5.gate_proj.weight_scale_inv", {16, 56}}},
  };
  for (const auto& c : cases) {
    for (std::size_t world : {1, 2, 4, 8, 16}) {
      INFO(c.tensor.name << " world " << world);
      std::set<std::pair<std::uint64_t, std::uint64_t>> pieces;
      std::size_t dim = 0;
      bool all_ok = true;
      for (std::size_t r = 0; r < world; ++r) {
        auto p = tf::place_tensor(c.tensor.info(), model(c.config), {}, TpRank{r, world});
        if (!p) {
          all_ok = false;  // e.g. 8 KV heads and 16 ranks is fine, 16 > 16 scales is not
          break;
        }
        REQUIRE(p->slice);
        dim = p->slice->dims.size() - 1;
        pieces.insert({*p->slice->dims[dim].start, *p->slice->dims[dim].stop});
      }
      if (!all_ok) continue;
      std::uint64_t next = 0;
      for (const auto& [a, b] : pieces) {
        if (a == b && a == next) continue;  // an empty slice (vocab padding)
        CHECK(a == next);
        next = b;
      }
      CHECK(next == c.tensor.shape[dim]);
    }
  }
}
