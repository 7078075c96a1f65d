// SPDX-License-Identifier: Apache-2.0
// tensorfetch-make-checkpoint: writes a deterministic Llama-shaped checkpoint (one file, or
// shards plus model.safetensors.index.json, plus config.json) for the demo, tests and
// benchmarks. Tensor bytes come from a seeded PRNG, so the same options give the same files.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "tensorfetch/tensorfetch.hpp"

namespace {

using tensorfetch::DType;
using tensorfetch::OutputTensor;

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t nbytes(const OutputTensor& t) {
  std::uint64_t n = 1;
  for (auto d : t.shape) n *= d;
  return n * tensorfetch::dtype_bits(t.dtype) / 8;
}

struct Options {
  std::string out;
  std::uint64_t tiny = 0;  // --tiny-tensors N: N F32 scalars-of-one instead of a model
  unsigned layers = 4;
  std::uint64_t hidden = 256;
  std::uint64_t intermediate = 0;  // default 4 x hidden
  std::uint64_t vocab = 1000;
  std::uint64_t heads = 0;     // attention heads (default hidden / 64, at least 1)
  std::uint64_t kv_heads = 0;  // key/value heads (default: heads; fewer: GQA)
  unsigned shards = 3;
  std::string dtype = "BF16";
  std::uint64_t seed = 1;
};

std::vector<OutputTensor> model_tensors(const Options& o, DType dtype) {
  const std::uint64_t h = o.hidden, f = o.intermediate ? o.intermediate : 4 * o.hidden;
  const std::uint64_t kv = o.kv_heads * (h / o.heads);  // rows of k_proj and v_proj
  std::vector<OutputTensor> t;
  t.push_back({"model.embed_tokens.weight", dtype, {o.vocab, h}});
  for (unsigned l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", dtype, {h}});
    t.push_back({p + "self_attn.q_proj.weight", dtype, {h, h}});
    t.push_back({p + "self_attn.k_proj.weight", dtype, {kv, h}});
    t.push_back({p + "self_attn.v_proj.weight", dtype, {kv, h}});
    t.push_back({p + "self_attn.o_proj.weight", dtype, {h, h}});
    t.push_back({p + "post_attention_layernorm.weight", dtype, {h}});
    t.push_back({p + "mlp.gate_proj.weight", dtype, {f, h}});
    t.push_back({p + "mlp.up_proj.weight", dtype, {f, h}});
    t.push_back({p + "mlp.down_proj.weight", dtype, {h, f}});
  }
  t.push_back({"model.norm.weight", dtype, {h}});
  t.push_back({"lm_head.weight", dtype, {o.vocab, h}});
  return t;
}

int write_file(const std::string& path, const std::vector<OutputTensor>& tensors, std::uint64_t& rng) {
  auto layout = tensorfetch::layout_file(tensors, tensorfetch::Metadata{{"format", "pt"}});
  if (!layout) {
    std::cerr << path << ": " << layout.error().message << '\n';
    return 1;
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(layout->prefix.data(), static_cast<std::streamsize>(layout->prefix.size()));
  std::vector<std::uint64_t> buf(1 << 17);  // 1 MiB of PRNG output at a time
  std::uint64_t left = layout->file_size - layout->prefix.size();
  while (left > 0 && f) {
    for (auto& w : buf) w = splitmix64(rng);
    auto n = std::min<std::uint64_t>(left, buf.size() * 8);
    f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(n));
    left -= n;
  }
  f.close();
  if (!f) {
    std::cerr << path << ": write failed\n";
    return 1;
  }
  return 0;
}

std::string shard_name(unsigned i, unsigned n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05u-of-%05u.safetensors", i, n);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Write a deterministic Llama-shaped safetensors checkpoint"};
  app.add_option("-o,--out", o.out, "Output directory")->required();
  app.add_option("--layers", o.layers, "Decoder layers")->capture_default_str();
  app.add_option("--hidden", o.hidden, "Hidden size")->capture_default_str();
  app.add_option("--intermediate", o.intermediate, "MLP size (default 4 x hidden)");
  app.add_option("--vocab", o.vocab, "Vocabulary size")->capture_default_str();
  app.add_option("--heads", o.heads, "Attention heads (default hidden / 64)");
  app.add_option("--kv-heads", o.kv_heads, "Key/value heads (default: --heads; fewer: grouped-query attention)");
  app.add_option("--shards", o.shards, "Number of shards; 1 writes model.safetensors")
      ->capture_default_str()
      ->check(CLI::Range(1u, 99999u));
  app.add_option("--dtype", o.dtype, "Element type")->capture_default_str();
  app.add_option("--seed", o.seed, "PRNG seed")->capture_default_str();
  app.add_option("--tiny-tensors", o.tiny,
                 "Instead of a model: one model.safetensors of N tiny F32 tensors t.0 .. t.N-1 (shape [1]), "
                 "for benchmarks of very many tensors")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{5'000'000}));
  CLI11_PARSE(app, argc, argv);

  if (o.tiny > 0) {
    std::filesystem::create_directories(o.out);
    std::vector<OutputTensor> tensors;
    tensors.reserve(o.tiny);
    for (std::uint64_t i = 0; i < o.tiny; ++i) tensors.push_back({"t." + std::to_string(i), DType::F32, {1}});
    std::uint64_t rng = o.seed;
    if (int rc = write_file(o.out + "/model.safetensors", tensors, rng)) return rc;
    std::cout << o.out << "/model.safetensors: " << o.tiny << " tensors\n";
    return 0;
  }

  auto dtype = tensorfetch::parse_dtype(o.dtype);
  if (!dtype) {
    std::cerr << "unknown dtype " << o.dtype << '\n';
    return 1;
  }
  if (o.heads == 0) o.heads = std::max<std::uint64_t>(1, o.hidden / 64);
  if (o.kv_heads == 0) o.kv_heads = o.heads;
  if (o.hidden % o.heads != 0 || o.heads % o.kv_heads != 0) {
    std::cerr << "--hidden must be a multiple of --heads, and --heads of --kv-heads\n";
    return 1;
  }
  std::filesystem::create_directories(o.out);
  auto tensors = model_tensors(o, *dtype);
  std::uint64_t total = 0, params = 0;
  for (const auto& t : tensors) {
    total += nbytes(t);
    params += nbytes(t) * 8 / tensorfetch::dtype_bits(t.dtype);
  }
  std::uint64_t rng = o.seed;
  if (o.shards == 1) {
    if (int rc = write_file(o.out + "/model.safetensors", tensors, rng)) return rc;
  } else {
    // Consecutive tensors per shard, about total / shards bytes each.
    const std::uint64_t target = (total + o.shards - 1) / o.shards;
    std::vector<std::vector<OutputTensor>> parts(1);
    std::uint64_t in_part = 0;
    for (const auto& t : tensors) {
      if (in_part > 0 && in_part + nbytes(t) > target && parts.size() < o.shards) {
        parts.emplace_back();
        in_part = 0;
      }
      parts.back().push_back(t);
      in_part += nbytes(t);
    }
    const auto n = static_cast<unsigned>(parts.size());
    std::map<std::string, std::string> weight_map;
    for (unsigned i = 0; i < n; ++i) {
      const std::string name = shard_name(i + 1, n);
      if (int rc = write_file(o.out + "/" + name, parts[i], rng)) return rc;
      for (const auto& t : parts[i]) weight_map[t.name] = name;
    }
    std::ofstream(o.out + "/model.safetensors.index.json")
        << tensorfetch::build_index_json(weight_map, total, params);
  }
  std::ofstream(o.out + "/config.json")
      << "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
      << "  \"hidden_size\": " << o.hidden << ",\n  \"intermediate_size\": "
      << (o.intermediate ? o.intermediate : 4 * o.hidden) << ",\n  \"num_hidden_layers\": " << o.layers
      << ",\n  \"num_attention_heads\": " << o.heads << ",\n  \"num_key_value_heads\": " << o.kv_heads
      << ",\n  \"vocab_size\": " << o.vocab << ",\n  \"torch_dtype\": \"bfloat16\"\n}\n";
  std::cout << o.out << ": " << tensors.size() << " tensors, " << total << " bytes of tensor data\n";
  return 0;
}
