// SPDX-License-Identifier: Apache-2.0
// `get --tp R/N` and `inspect --tp N` (issue 12, part A) on checkpoints made by
// tensorfetch-make-checkpoint and crafted here: every rank's output holds its slices under the
// original names with `__metadata__` (tp_rank, tp_world, tp_rule, tp_slices); the ranks' outputs
// put together give back every original tensor byte for byte; `inspect --tp` says the bytes
// each rank writes; errors (bad R/N, fused layouts, rules files) exit 1 naming the tensor; and
// from the Hub-like server, each rank moves exactly its slices plus the replicated tensors
// (asserted through the server's request log).
#include <regex>
#include <set>

#include "cli_util.hpp"
#include "hub_server.hpp"
#include "support/process.hpp"
#include "support/ranges.hpp"

using namespace clitest;
using tensorfetch::testing::HubServer;
using tftest::Ranges;

namespace {

// A Llama-shaped checkpoint: 2 layers, hidden 128, 4 heads and 2 KV heads (GQA), MLP 256,
// vocabulary 200 (padded to 256: the last of 4 ranks holds 8 rows), BF16, in 2 shards.
fs::path make_llama(const fs::path& dir) {
  tftest::Child gen(tftest::required_env("TENSORFETCH_MAKE_CHECKPOINT_BIN"),
                    {"-o", dir.string(), "--layers", "2", "--hidden", "128", "--heads", "4", "--kv-heads", "2",
                     "--intermediate", "256", "--vocab", "200", "--shards", "2"},
                    {});
  REQUIRE(gen.wait() == 0);
  return dir;
}

// Every tensor of a checkpoint directory (single file or shards), with the file holding it.
struct Source {
  std::map<std::string, StTensor> tensors;
  std::map<std::string, std::string> file_of;
  std::map<std::string, std::uint64_t> data_start;  // 8 + N of each file
};

Source read_source(const fs::path& dir) {
  Source s;
  for (const auto& name : list_dir(dir)) {
    if (!name.ends_with(".safetensors")) continue;
    const StFile f = read_safetensors(dir / name);
    s.data_start[name] = 8 + f.header_size;
    for (const auto& [t, st] : f.tensors) {
      s.tensors[t] = st;
      s.file_of[t] = name;
    }
  }
  return s;
}

// A slice as `get --tp` records it in tp_slices: "[a:b]" (dim 0) or "[:, a:b]" (dim 1).
struct DimSlice {
  std::size_t dim = 0;
  std::uint64_t start = 0, stop = 0;
};

DimSlice parse_dim_slice(const std::string& text) {
  static const std::regex re(R"(^\[(:, )?(\d+):(\d+)\]$)");
  std::smatch m;
  INFO("slice " << text);
  REQUIRE(std::regex_match(text, m, re));
  return DimSlice{m[1].matched ? 1u : 0u, std::stoull(m[2]), std::stoull(m[3])};
}

// The bytes of `slice` of `t`, and their ranges within the tensor's data, by this test's own
// arithmetic (row-major; dims beyond the sliced one taken whole).
struct Piece {
  std::string bytes;
  Ranges ranges;  // relative to the tensor's first byte
};

Piece cut(const StTensor& t, const DimSlice& s) {
  const std::uint64_t elem = dtype_bits(t.dtype) / 8;
  std::uint64_t inner = elem;  // bytes of one index of dimension s.dim
  for (std::size_t d = s.dim + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
  std::uint64_t outer = 1;  // how many runs
  for (std::size_t d = 0; d < s.dim; ++d) outer *= t.shape[d];
  const std::uint64_t stride = inner * t.shape[s.dim];
  Piece p;
  for (std::uint64_t o = 0; o < outer; ++o) {
    const std::uint64_t at = o * stride + s.start * inner, len = (s.stop - s.start) * inner;
    p.bytes += t.bytes.substr(at, len);
    p.ranges.push_back({at, len});
  }
  p.ranges = tftest::normalized(p.ranges);
  return p;
}

std::map<std::string, std::string> slices_of(const StFile& out) {
  REQUIRE(out.metadata);
  const auto j = json::parse(out.metadata->at("tp_slices"));
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : j.items()) m[k] = v.get<std::string>();
  return m;
}

// Puts the ranks' outputs together again and compares every tensor with the source, byte for
// byte: sliced tensors concatenated along their dimension (a KV head replicated on several
// ranks taken once), replicated ones equal on every rank.
void check_reassembles(const Source& src, const std::vector<StFile>& ranks) {
  for (const auto& [name, orig] : src.tensors) {
    INFO("tensor " << name);
    std::vector<std::pair<DimSlice, const StTensor*>> parts;
    std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const auto slices = slices_of(ranks[r]);
      auto it = ranks[r].tensors.find(name);
      REQUIRE(it != ranks[r].tensors.end());
      auto sl = slices.find(name);
      if (sl == slices.end()) {  // replicated: whole, on every rank
        CHECK(it->second.shape == orig.shape);
        CHECK(it->second.bytes == orig.bytes);
        continue;
      }
      const DimSlice d = parse_dim_slice(sl->second);
      CHECK(it->second.bytes == cut(orig, d).bytes);
      if (seen.insert({d.start, d.stop}).second) parts.push_back({d, &it->second});
    }
    if (parts.empty()) continue;
    // Concatenate along the dimension: rows of each part interleaved per outer index.
    const DimSlice first = parts.front().first;
    std::uint64_t next = 0;
    for (const auto& [d, t] : parts) {
      CHECK(d.dim == first.dim);
      CHECK(d.start == next);
      next = d.stop;
    }
    CHECK(next == orig.shape[first.dim]);
    std::string joined;
    const std::uint64_t elem = dtype_bits(orig.dtype) / 8;
    std::uint64_t inner = elem, outer = 1;
    for (std::size_t k = first.dim + 1; k < orig.shape.size(); ++k) inner *= orig.shape[k];
    for (std::size_t k = 0; k < first.dim; ++k) outer *= orig.shape[k];
    for (std::uint64_t o = 0; o < outer; ++o) {
      for (const auto& [d, t] : parts) {
        const std::uint64_t len = (d.stop - d.start) * inner;
        joined += t->bytes.substr(o * len, len);
      }
    }
    CHECK(joined == orig.bytes);
  }
}

std::vector<StFile> get_all_ranks(const std::string& location, std::size_t world, const fs::path& out_dir,
                                  const std::vector<std::string>& extra = {}) {
  std::vector<StFile> outs;
  for (std::size_t r = 0; r < world; ++r) {
    const auto out = out_dir / ("rank" + std::to_string(r) + ".safetensors");
    std::vector<std::string> args = {"get", location, "--tp", std::to_string(r) + "/" + std::to_string(world), "-q",
                                     "-o", out.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    auto res = run(args);
    INFO(describe(args) << "\n" << res.err);
    REQUIRE(res.exit_code == 0);
    outs.push_back(read_safetensors(out));
    const auto& md = *outs.back().metadata;
    CHECK(md.at("tp_rank") == std::to_string(r));
    CHECK(md.at("tp_world") == std::to_string(world));
    CHECK_THAT(md.at("tp_rule"), Catch::Matchers::Contains("megatron/vllm model_type=llama"));
    CHECK(md.at("format") == "pt");  // the source's metadata is kept
  }
  return outs;
}

std::uint64_t data_bytes(const StFile& f) {
  std::uint64_t n = 0;
  for (const auto& [name, t] : f.tensors) n += t.bytes.size();
  return n;
}

const std::string kPhi3Config =
    R"({"model_type":"phi3","num_attention_heads":4,"num_key_value_heads":4})";

// A Phi-3-like file: fused qkv_proj [3*16, 16], o_proj, a norm.
fs::path make_phi3(const fs::path& dir) {
  fs::create_directories(dir);
  const std::string header =
      R"({"model.layers.0.self_attn.qkv_proj.weight":{"dtype":"F32","shape":[48,16],"data_offsets":[0,3072]},)"
      R"("model.layers.0.self_attn.o_proj.weight":{"dtype":"F32","shape":[16,16],"data_offsets":[3072,4096]},)"
      R"("model.norm.weight":{"dtype":"F32","shape":[16],"data_offsets":[4096,4160]}})";
  std::string data(4160, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + 1);
  write_file(dir / "model.safetensors", make_safetensors(header, data));
  write_file(dir / "config.json", kPhi3Config);
  return dir;
}

}  // namespace

TEST_CASE("get --tp R/N: every rank's slices under the original names; together they are the checkpoint",
          "[cli][tp]") {
  TempDir tmp;
  const fs::path ckpt = make_llama(tmp / "llama");
  const Source src = read_source(ckpt);
  for (std::size_t world : {1, 2, 4}) {
    DYNAMIC_SECTION("world " << world) {
      const fs::path outs = tmp / ("w" + std::to_string(world));
      fs::create_directories(outs);
      const auto ranks = get_all_ranks(ckpt.string(), world, outs);
      check_reassembles(src, ranks);
      const auto slices = slices_of(ranks[0]);
      if (world > 1) {
        // The shapes the convention gives: q rows by heads, k by KV heads, o on dim 1, norms whole.
        const auto& r0 = ranks[0].tensors;
        CHECK(r0.at("model.layers.0.self_attn.q_proj.weight").shape == std::vector<std::uint64_t>{128 / world, 128});
        // 2 KV heads of 32 rows: one per rank at TP 2; at TP 4 each is on two ranks.
        CHECK(r0.at("model.layers.0.self_attn.k_proj.weight").shape == std::vector<std::uint64_t>{32, 128});
        CHECK(r0.at("model.layers.1.self_attn.o_proj.weight").shape == std::vector<std::uint64_t>{128, 128 / world});
        CHECK(r0.at("model.layers.1.mlp.down_proj.weight").shape == std::vector<std::uint64_t>{128, 256 / world});
        CHECK(r0.at("model.norm.weight").shape == std::vector<std::uint64_t>{128});
        CHECK(slices.count("model.norm.weight") == 0);
        CHECK(slices.at("model.layers.1.self_attn.o_proj.weight") == "[:, 0:" + std::to_string(128 / world) + "]");
      }
      if (world == 4) {
        // 2 KV heads over 4 ranks: ranks 0 and 1 share head 0 (rows 0..32), ranks 2 and 3 head 1.
        CHECK(slices_of(ranks[1]).at("model.layers.0.self_attn.k_proj.weight") == "[0:32]");
        CHECK(slices_of(ranks[2]).at("model.layers.0.self_attn.v_proj.weight") == "[32:64]");
        // Vocabulary 200 padded to 256: 64 rows per rank, the last holds 8.
        CHECK(ranks[3].tensors.at("lm_head.weight").shape == std::vector<std::uint64_t>{8, 128});
      }

      // inspect --tp N: the bytes each rank writes, in text and JSON.
      auto js = run({"inspect", ckpt.string(), "--tp", std::to_string(world), "--json"});
      REQUIRE(js.exit_code == 0);
      const auto j = json::parse(js.out);
      REQUIRE(j["tp"]["world"] == world);
      CHECK_THAT(j["tp"]["rule"].get<std::string>(), Catch::Matchers::Contains("model_type=llama"));
      for (std::size_t r = 0; r < world; ++r) {
        INFO("rank " << r);
        const auto& jr = j["tp"]["ranks"][r];
        CHECK(jr["rank"] == r);
        CHECK(jr["bytes"] == data_bytes(ranks[r]));
        CHECK(jr["tensors"] == ranks[r].tensors.size());
        CHECK(jr["sliced_bytes"].get<std::uint64_t>() + jr["whole_bytes"].get<std::uint64_t>() == jr["bytes"]);
      }
      auto text = run({"inspect", ckpt.string(), "--tp", std::to_string(world)});
      REQUIRE(text.exit_code == 0);
      CHECK_THAT(text.out, Catch::Matchers::Contains("tensor parallel, " + std::to_string(world)));
      CHECK_THAT(text.out, Catch::Matchers::Contains("rank " + std::to_string(world - 1) + "  "));
    }
  }
}

TEST_CASE("get --tp with names: only the named tensors, sliced; a slice, a bad R/N or a lone option is usage (1)",
          "[cli][tp]") {
  TempDir tmp;
  const fs::path ckpt = make_llama(tmp / "llama");
  const auto out = tmp / "out.safetensors";
  auto r = run({"get", ckpt.string(), "--tp", "1/2", "model.layers.0.*", "lm_head.weight", "-q", "-o", out.string()});
  REQUIRE(r.exit_code == 0);
  const StFile f = read_safetensors(out);
  CHECK(f.tensors.size() == 10);  // 9 of layer 0 + lm_head
  CHECK(f.tensors.at("lm_head.weight").shape == std::vector<std::uint64_t>{72, 128});  // rows 128..200
  CHECK(f.tensors.at("model.layers.0.mlp.gate_proj.weight").shape == std::vector<std::uint64_t>{128, 128});

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--tp", "2/2"}, "RANK/WORLD"},
      {{"--tp", "1"}, "RANK/WORLD"},
      {{"--tp", "a/b"}, "RANK/WORLD"},
      {{"--tp", "0/2", "lm_head.weight[0:2]"}, "without a slice"},
      {{"--tp-rules", (tmp / "none.json").string()}, "--tp"},
      {{"--expert-parallel"}, "--tp"},
      {{"--tp", "0/2", "--tp-rules", (tmp / "none.json").string()}, "none.json"},
      {{"--tp", "0/2", "no.such.tensor"}, "no.such.tensor"},
  };
  for (const auto& [extra, mention] : bad) {
    std::vector<std::string> args = {"get", ckpt.string(), "-q", "-o", (tmp / "bad.safetensors").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    auto res = run(args);
    INFO(describe(args) << "\n" << res.err);
    CHECK(res.exit_code == 1);
    CHECK_THAT(res.err, Catch::Matchers::Contains(mention));
    CHECK_FALSE(fs::exists(tmp / "bad.safetensors"));
  }
  auto ins = run({"inspect", ckpt.string(), "--tp", "0"});
  CHECK(ins.exit_code == 1);
}

TEST_CASE("get --tp: a fused layout exits 1 naming the tensor, unless a rules file says how to split it",
          "[cli][tp]") {
  TempDir tmp;
  const fs::path dir = make_phi3(tmp / "phi3");
  const auto out = tmp / "out.safetensors";
  for (const std::string& location : {dir.string(), (dir / "model.safetensors").string()}) {
    INFO(location);  // a directory, and a file with config.json beside it
    auto r = run({"get", location, "--tp", "0/2", "-q", "-o", out.string()});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Matchers::Contains("model.layers.0.self_attn.qkv_proj.weight"));
    CHECK_THAT(r.err, Catch::Matchers::Contains("fused"));
    CHECK_THAT(r.err, Catch::Matchers::Contains("--tp-rules"));
    CHECK_FALSE(fs::exists(out));
    auto ins = run({"inspect", location, "--tp", "2"});
    CHECK(ins.exit_code == 1);
    CHECK(ins.out.empty());
    CHECK_THAT(ins.err, Catch::Matchers::Contains("qkv_proj"));
  }
  write_file(tmp / "rules.json", R"({"*.qkv_proj.weight": {"dim": 0}})");
  auto r = run({"get", dir.string(), "--tp", "1/2", "--tp-rules", (tmp / "rules.json").string(), "-q", "-o",
                out.string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const StFile f = read_safetensors(out);
  CHECK(f.tensors.at("model.layers.0.self_attn.qkv_proj.weight").shape == std::vector<std::uint64_t>{24, 16});
  CHECK(f.tensors.at("model.layers.0.self_attn.o_proj.weight").shape == std::vector<std::uint64_t>{16, 8});
  CHECK_THAT(f.metadata->at("tp_rule"), Catch::Matchers::Contains("rules.json"));
  // A rules file that is not valid: exit 1 naming it and the rule.
  write_file(tmp / "bad.json", R"({"*.qkv_proj.weight": {"dim": "0"}})");
  auto b = run({"get", dir.string(), "--tp", "1/2", "--tp-rules", (tmp / "bad.json").string(), "-q", "-o",
                out.string()});
  CHECK(b.exit_code == 1);
  CHECK_THAT(b.err, Catch::Matchers::Contains("bad.json"));
  CHECK_THAT(b.err, Catch::Matchers::Contains("*.qkv_proj.weight"));
}

TEST_CASE("get --tp --expert-parallel: each rank holds whole experts of its own block, the router replicated",
          "[cli][tp]") {
  TempDir tmp;
  const fs::path dir = tmp / "moe";
  fs::create_directories(dir);
  // A Mixtral-like layer: 4 experts (w1/w2/w3 of [8,4] / [4,8]), a router, a norm.
  std::string header = "{";
  std::uint64_t off = 0;
  auto add = [&](const std::string& name, std::uint64_t a, std::uint64_t b) {
    header += (off ? "," : "") + std::string("\"") + name + R"(":{"dtype":"F32","shape":[)" + std::to_string(a) +
              "," + std::to_string(b) + R"(],"data_offsets":[)" + std::to_string(off) + "," +
              std::to_string(off + a * b * 4) + "]}";
    off += a * b * 4;
  };
  for (int e = 0; e < 4; ++e) {
    const std::string p = "model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".";
    add(p + "w1.weight", 8, 4);
    add(p + "w2.weight", 4, 8);
    add(p + "w3.weight", 8, 4);
  }
  add("model.layers.0.block_sparse_moe.gate.weight", 4, 4);
  add("model.layers.0.post_attention_layernorm.weight", 1, 4);
  header += "}";
  std::string data(off, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  write_file(dir / "model.safetensors", make_safetensors(header, data));
  write_file(dir / "config.json",
             R"({"model_type":"mixtral","num_attention_heads":4,"num_key_value_heads":2,"num_local_experts":4})");

  for (std::size_t r = 0; r < 2; ++r) {
    const auto out = tmp / ("ep" + std::to_string(r) + ".safetensors");
    auto res = run({"get", dir.string(), "--tp", std::to_string(r) + "/2", "--expert-parallel", "-q", "-o",
                    out.string()});
    INFO(res.err);
    REQUIRE(res.exit_code == 0);
    const StFile f = read_safetensors(out);
    CHECK(f.tensors.size() == 2 * 3 + 2);
    for (int e = 0; e < 4; ++e) {
      const std::string name = "model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".w2.weight";
      CHECK(f.tensors.count(name) == (static_cast<std::size_t>(e) / 2 == r ? 1u : 0u));
    }
    CHECK(f.tensors.count("model.layers.0.block_sparse_moe.gate.weight") == 1);
    CHECK(slices_of(f).empty());
    CHECK_THAT(f.metadata->at("tp_rule"), Catch::Matchers::Contains("experts=expert-parallel"));
  }
  // Without --expert-parallel: every expert, split (w1 rows, w2 columns).
  const auto out = tmp / "tp.safetensors";
  REQUIRE(run({"get", dir.string(), "--tp", "1/2", "-q", "-o", out.string()}).exit_code == 0);
  const StFile f = read_safetensors(out);
  CHECK(f.tensors.size() == 14);
  CHECK(f.tensors.at("model.layers.0.block_sparse_moe.experts.3.w1.weight").shape == std::vector<std::uint64_t>{4, 4});
  CHECK(f.tensors.at("model.layers.0.block_sparse_moe.experts.3.w2.weight").shape == std::vector<std::uint64_t>{4, 4});
}

// The Hub-like server over `root`, for a user with a clean environment: no token, endpoint, CA
// bundle, offline mode or Hugging Face cache from the developer's shell.
struct Served {
  TempDir hf_home;
  tftest::ScopedEnv env;
  std::unique_ptr<HubServer> server;
  explicit Served(const fs::path& root) {
    for (const char* v : {"HF_TOKEN", "HF_ENDPOINT", "CURL_CA_BUNDLE", "HF_HUB_OFFLINE", "HF_HUB_CACHE"}) {
      env.set(v, std::nullopt);
    }
    env.set("HF_HOME", hf_home.path().string());
    tensorfetch::testing::Options options;
    options.root = root;
    server = std::make_unique<HubServer>(options);
    server->start();
  }
};

// What moved of each file beyond its header, from the server's log of CDN range requests.
struct Moved {
  std::map<std::string, Ranges> ranges;
  std::map<std::string, std::uint64_t> bytes;  // counting a byte as often as it moved
  std::size_t requests = 0;                    // CDN range requests
};

Moved moved_data(const std::vector<tensorfetch::testing::RequestRecord>& log, const Source& src) {
  Moved m;
  for (const auto& rec : log) {
    if (rec.kind != "cdn" || rec.status != 206) continue;
    ++m.requests;
    auto range = tftest::parse_range(rec.range);
    REQUIRE(range);
    CHECK(rec.body_bytes == range->length);
    const std::uint64_t start = src.data_start.at(rec.file);
    const std::uint64_t end = range->offset + range->length;
    if (end <= start) continue;  // a header read
    const std::uint64_t from = std::max(range->offset, start);
    m.ranges[rec.file].push_back({from, end - from});
    m.bytes[rec.file] += end - from;
  }
  return m;
}

TEST_CASE("get --tp from the Hub-like server: each rank moves exactly its slices and the replicated tensors",
          "[cli][tp][remote]") {
  TempDir root, tmp;
  make_llama(root / "org" / "llama");
  const Source src = read_source(root / "org" / "llama");
  Served served(root.path());
  HubServer& server = *served.server;

  constexpr std::size_t kWorld = 4;
  std::vector<StFile> ranks;
  for (std::size_t r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    server.clear_log();
    const auto out = tmp / ("rank" + std::to_string(r) + ".safetensors");
    // Each rank with its own cache (as on its own node); no coalescing across the holes between
    // a row-parallel slice's rows, so that what moves is exactly what the rank needs.
    const std::vector<std::string> args = {
        "get", "hf://org/llama", "--tp", std::to_string(r) + "/" + std::to_string(kWorld), "--endpoint",
        server.endpoint(), "--cache-dir", (tmp / ("cache" + std::to_string(r))).string(), "--coalesce-gap", "0",
        "--window", "64", "-q", "-o", out.string()};
    auto res = run(args);
    INFO(describe(args) << "\n" << res.err);
    REQUIRE(res.exit_code == 0);
    ranks.push_back(read_safetensors(out));
    const auto slices = slices_of(ranks.back());

    // What this rank must move, per file: each of its tensors' slice ranges (or the whole tensor).
    std::map<std::string, Ranges> want;
    for (const auto& [name, t] : ranks.back().tensors) {
      const StTensor& orig = src.tensors.at(name);
      const std::string& file = src.file_of.at(name);
      const std::uint64_t base = src.data_start.at(file) + orig.begin;
      auto sl = slices.find(name);
      Ranges rel = sl == slices.end() ? Ranges{{0, orig.bytes.size()}} : cut(orig, parse_dim_slice(sl->second)).ranges;
      for (const auto& x : rel) want[file].push_back({base + x.offset, x.length});
    }
    const Moved exact = moved_data(server.log(), src);
    std::uint64_t rank_bytes = 0;
    for (auto& [file, rs] : want) {
      INFO("file " << file);
      rs = tftest::normalized(rs);
      rank_bytes += tftest::total(rs);
      const Ranges got = tftest::normalized(exact.ranges.count(file) ? exact.ranges.at(file) : Ranges{});
      CHECK(tftest::describe(got) == tftest::describe(rs));
      CHECK(exact.bytes.count(file) == 1);
      CHECK(exact.bytes.at(file) == tftest::total(rs));  // no byte twice
    }
    CHECK(rank_bytes == data_bytes(ranks.back()));
    for (const auto& [file, rs] : exact.ranges) CHECK(want.count(file) == 1);  // no other file's data

    // With the default --coalesce-gap, holes travel only within the over-fetch budget (1% of the
    // bytes, or 64 KiB): every wanted byte moves, and at most that much more, in fewer requests.
    server.clear_log();
    std::vector<std::string> again = args;
    again[7] = (tmp / ("cache-default" + std::to_string(r))).string();
    again.erase(again.begin() + 8, again.begin() + 10);  // no --coalesce-gap
    REQUIRE(run(again).exit_code == 0);
    const Moved coalesced = moved_data(server.log(), src);
    std::uint64_t total = 0;
    for (const auto& [file, rs] : want) {
      const Ranges got = coalesced.ranges.count(file) ? coalesced.ranges.at(file) : Ranges{};
      for (const auto& x : rs) CHECK(tftest::covered(tftest::normalized(got), x));
    }
    for (const auto& [file, n] : coalesced.bytes) total += n;
    CHECK(total >= rank_bytes);
    CHECK(total <= rank_bytes + std::max<std::uint64_t>(rank_bytes / 100, 64 << 10));
    CHECK(coalesced.requests < exact.requests);
  }
  check_reassembles(src, ranks);

  // inspect --tp over HTTP agrees, from the headers alone (no tensor data moves).
  server.clear_log();
  auto js = run({"inspect", "hf://org/llama", "--tp", std::to_string(kWorld), "--json", "--endpoint",
                 server.endpoint(), "--cache-dir", (tmp / "cache-inspect").string()});
  REQUIRE(js.exit_code == 0);
  const auto j = json::parse(js.out);
  for (std::size_t r = 0; r < kWorld; ++r) CHECK(j["tp"]["ranks"][r]["bytes"] == data_bytes(ranks[r]));
}

TEST_CASE("get --tp of a plain http URL reads the config.json beside it (one request); without one, the error asks "
          "for --tp-rules",
          "[cli][tp][remote]") {
  TempDir root, tmp;
  make_llama(root / "org" / "llama");
  fs::create_directories(root / "org" / "bare");
  for (const auto& name : list_dir(root / "org" / "llama")) {
    if (name != "config.json") fs::copy_file(root / "org" / "llama" / name, root / "org" / "bare" / name);
  }
  Served served(root.path());
  HubServer& server = *served.server;
  auto config_requests = [&] {
    std::size_t n = 0;
    for (const auto& rec : server.log()) n += rec.target.find("config.json") != std::string::npos ? 1 : 0;
    return n;
  };

  const std::string url = server.endpoint() + "/org/llama/resolve/main/model.safetensors.index.json";
  const auto out = tmp / "rank1.safetensors";
  auto res = run({"get", url, "--tp", "1/2", "--cache-dir", (tmp / "cache").string(), "-q", "-o", out.string()});
  INFO(res.err);
  REQUIRE(res.exit_code == 0);
  CHECK(config_requests() == 1);
  const StFile f = read_safetensors(out);
  CHECK_THAT(f.metadata->at("tp_rule"), Catch::Matchers::Contains("model_type=llama"));
  CHECK(f.tensors.at("model.layers.0.self_attn.o_proj.weight").shape == std::vector<std::uint64_t>{128, 64});
  // The same as from the directory.
  const auto local = tmp / "local1.safetensors";
  REQUIRE(run({"get", (root / "org" / "llama").string(), "--tp", "1/2", "-q", "-o", local.string()}).exit_code == 0);
  CHECK(tftest::read_file(local) == tftest::read_file(out));

  // inspect --tp of the single-file URL of a repo without config.json: one request for it (404),
  // then the error naming --tp-rules; with a rules file, no config.json is needed.
  server.clear_log();
  const std::string bare = server.endpoint() + "/org/bare/resolve/main/model.safetensors.index.json";
  auto ins = run({"inspect", bare, "--tp", "2", "--cache-dir", (tmp / "cache").string()});
  CHECK(ins.exit_code == 1);
  CHECK_THAT(ins.err, Catch::Matchers::Contains("--tp-rules"));
  CHECK(config_requests() == 1);
  // It went out on a connection the open had made (its index or header reads): no handshake.
  std::set<int> open_ports;
  int config_port = -1;
  for (const auto& rec : server.log()) {
    if (rec.target.find("config.json") != std::string::npos) config_port = rec.client_port;
    else if (config_port < 0) open_ports.insert(rec.client_port);
  }
  CHECK(open_ports.count(config_port) == 1);
  write_file(tmp / "rules.json", R"({"*": "replicate"})");
  auto ruled = run({"inspect", bare, "--tp", "2", "--tp-rules", (tmp / "rules.json").string(), "--cache-dir",
                    (tmp / "cache").string()});
  CHECK(ruled.exit_code == 0);
}
