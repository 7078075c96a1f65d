// SPDX-License-Identifier: Apache-2.0
// Parameter counting as the Hub does it: unquantized, and each quantization method's packing
// factor and bookkeeping tensors, driven by config.json.
#include <catch2/catch.hpp>

#include <deque>
#include <string>
#include <vector>

#include "tensorfetch/parameters.hpp"

using namespace tensorfetch;

namespace {

struct Model {
  std::vector<TensorInfo> tensors;
  std::deque<std::string> names;  // what the TensorInfo views point to
  std::deque<std::vector<std::uint64_t>> shapes;
  void add(std::string name, DType dtype, std::vector<std::uint64_t> shape) {
    TensorInfo t;
    t.name = names.emplace_back(std::move(name));
    t.dtype = dtype;
    t.shape = shapes.emplace_back(std::move(shape));
    tensors.push_back(std::move(t));
  }
  ParameterCount count(std::optional<std::string_view> config) const {
    std::vector<const TensorInfo*> ptrs;
    for (const auto& t : tensors) ptrs.push_back(&t);
    return count_parameters(ptrs, config);
  }
};

}  // namespace

TEST_CASE("parameters: unquantized counts elements per dtype; scalars, empty tensors and E8M0 scales are not parameters", "[parameters]") {
  Model m;
  m.add("w", DType::BF16, {4, 8});
  m.add("b", DType::F32, {8});
  m.add("step", DType::I64, {});          // scalar
  m.add("empty", DType::F16, {0, 3});     // no elements
  m.add("blk.scale", DType::F8_E8M0, {2});  // exponent-only
  auto p = m.count(std::nullopt);
  CHECK(p.rule == "unquantized");
  CHECK(p.total == 40);
  CHECK(p.by_dtype == std::map<DType, std::uint64_t>{{DType::BF16, 32}, {DType::F32, 8}});
  CHECK(p.skipped_tensors == 1);
  // A config.json without quantization_config changes nothing.
  CHECK(m.count(R"({"model_type":"llama"})").total == 40);
}

TEST_CASE("parameters: GPTQ 4-bit multiplies qweight by 8, drops qzeros/g_idx/scales, keeps modules_to_not_convert as stored", "[parameters]") {
  Model m;
  m.add("model.layers.0.mlp.up_proj.qweight", DType::I32, {64, 256});  // 512 x 256 4-bit weights
  m.add("model.layers.0.mlp.up_proj.qzeros", DType::I32, {4, 32});
  m.add("model.layers.0.mlp.up_proj.scales", DType::F16, {4, 256});
  m.add("model.layers.0.mlp.up_proj.g_idx", DType::I32, {512});
  m.add("model.layers.0.mlp.up_proj.bias", DType::F16, {256});
  m.add("lm_head.weight", DType::F16, {100, 512});
  auto p = m.count(R"({"quantization_config":{"quant_method":"gptq","bits":4,"modules_to_not_convert":["lm_head"]}})");
  CHECK(p.by_dtype.at(DType::I32) == 64u * 256 * 8);
  CHECK(p.by_dtype.at(DType::F16) == 256u + 100 * 512);
  CHECK(p.skipped_tensors == 3);
  CHECK(p.packed_tensors == 1);
  CHECK(p.rule == "gptq 4-bit: qweight x8; qzeros, g_idx, scales not counted");
  // 8-bit GPTQ packs 4 per I32; AWQ follows the same rule.
  CHECK(m.count(R"({"quantization_config":{"quant_method":"gptq","bits":8}})").by_dtype.at(DType::I32) == 64u * 256 * 4);
  CHECK(m.count(R"({"quantization_config":{"quant_method":"awq","bits":4}})").by_dtype.at(DType::I32) == 64u * 256 * 8);
}

TEST_CASE("parameters: bitsandbytes 4-bit doubles U8 weights and drops absmax, quant_map and quant states", "[parameters]") {
  Model m;
  m.add("model.layers.0.self_attn.q_proj.weight", DType::U8, {2048, 1});
  m.add("model.layers.0.self_attn.q_proj.weight.absmax", DType::F32, {64});
  m.add("model.layers.0.self_attn.q_proj.weight.quant_map", DType::F32, {16});
  m.add("model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__nf4", DType::U8, {100});
  m.add("model.norm.weight", DType::BF16, {64});
  auto p = m.count(R"({"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true}})");
  CHECK(p.by_dtype.at(DType::U8) == 4096);
  CHECK(p.by_dtype.at(DType::BF16) == 64);
  CHECK(p.skipped_tensors == 3);
  CHECK(p.rule.starts_with("bitsandbytes 4-bit"));
}

TEST_CASE("parameters: mxfp4 doubles U8 *_blocks and drops U8 *_scales", "[parameters]") {
  Model m;
  m.add("model.layers.0.mlp.experts.gate_up_proj_blocks", DType::U8, {32, 90, 16});
  m.add("model.layers.0.mlp.experts.gate_up_proj_scales", DType::U8, {32, 90});
  m.add("model.layers.0.mlp.router.weight", DType::BF16, {32, 64});
  auto p = m.count(R"({"quantization_config":{"quant_method":"mxfp4"}})");
  CHECK(p.by_dtype.at(DType::U8) == 32u * 90 * 16 * 2);
  CHECK(p.by_dtype.at(DType::BF16) == 32u * 64);
  CHECK(p.skipped_tensors == 1);
}

TEST_CASE("parameters: compressed-tensors pack-quantized uses container bits / num_bits per group, honours ignore, drops scales and weight_shape", "[parameters]") {
  Model m;
  m.add("model.layers.0.mlp.down_proj.weight_packed", DType::I32, {128, 32});
  m.add("model.layers.0.mlp.down_proj.weight_scale", DType::BF16, {128, 8});
  m.add("model.layers.0.mlp.down_proj.weight_shape", DType::I64, {2});
  m.add("model.layers.0.self_attn.q_proj.weight_packed", DType::I32, {64, 16});
  m.add("lm_head.weight", DType::BF16, {100, 64});
  const char* config = R"({"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized",
    "ignore":["lm_head"],
    "config_groups":{
      "g8":{"targets":["re:.*self_attn.*"],"weights":{"num_bits":8}},
      "g4":{"targets":["re:.*mlp.*"],"weights":{"num_bits":4}}}}})";
  auto p = m.count(config);
  CHECK(p.by_dtype.at(DType::I32) == 128u * 32 * 8 + 64u * 16 * 4);
  CHECK(p.by_dtype.at(DType::BF16) == 100u * 64);
  CHECK(p.skipped_tensors == 2);
  // Nested under text_config (multimodal configs) it is found too.
  std::string nested = std::string(R"({"text_config":)") + config + "}";
  CHECK(m.count(nested).by_dtype.at(DType::I32) == 128u * 32 * 8 + 64u * 16 * 4);
}

TEST_CASE("parameters: fp8 counts weights as stored, routed experts packed as expert_dtype, shared experts as stored", "[parameters]") {
  Model m;
  m.add("model.layers.3.mlp.experts.7.w1.weight", DType::I8, {256, 64});
  m.add("model.layers.3.mlp.shared_experts.w1.weight", DType::F8_E4M3, {256, 128});
  m.add("model.layers.3.mlp.experts.7.w1.weight_scale_inv", DType::F32, {2, 1});
  auto p = m.count(R"({"quantization_config":{"quant_method":"fp8","expert_dtype":"fp4"}})");
  CHECK(p.by_dtype.at(DType::I8) == 256u * 64 * 2);
  CHECK(p.by_dtype.at(DType::F8_E4M3) == 256u * 128);
  CHECK(p.skipped_tensors == 1);
  CHECK(p.rule == "fp8: weights as stored; routed experts packed as fp4; scales not counted");
}

TEST_CASE("parameters: an unreadable config.json is reported and the count stays unquantized", "[parameters]") {
  Model m;
  m.add("w", DType::U8, {10});
  auto p = m.count("{not json");
  CHECK(p.total == 10);
  CHECK(p.rule == "unquantized");
  REQUIRE(p.config_warning);
  CHECK_THAT(*p.config_warning, Catch::Contains("config.json"));
}

TEST_CASE("header: '-0' in shape or data_offsets is refused like the reference does, naming the tensor", "[header]") {
  const std::string json = R"({"t":{"dtype":"F32","shape":[-0],"data_offsets":[-0,0]}})";
  auto r = parse_header(std::as_bytes(std::span(json)), 8 + json.size());
  REQUIRE_FALSE(r);
  CHECK(r.error().code == ErrorCode::InvalidShape);
  CHECK_THAT(r.error().message, Catch::Contains("'t'") && Catch::Contains("-0"));
  // A name containing "-0" does not trip the check.
  const std::string ok = R"({"w-0":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})";
  CHECK(parse_header(std::as_bytes(std::span(ok)), 8 + ok.size()));
}
