// SPDX-License-Identifier: Apache-2.0
// `get` with slices: the output holds exactly the expected rows/columns of the original
// tensor bytes, computed here from the reference file.
#include "cli_util.hpp"

using namespace clitest;

namespace {

// The original bytes of one tensor of a safetensors file, by this test's own reader.
StTensor original_tensor(const fs::path& file, const std::string& name) {
  const StFile f = read_safetensors(file);
  auto it = f.tensors.find(name);
  REQUIRE(it != f.tensors.end());
  return it->second;
}

}  // namespace

TEST_CASE("get with slices of lm_head.weight (BF16 [1200, 64]) writes the expected rows and columns",
          "[cli][slice]") {
  auto ref = reference_dir();
  if (!ref) return;
  const fs::path src = *ref / "llama-tiny-single" / "model.safetensors";
  const StTensor lm = original_tensor(src, "lm_head.weight");
  REQUIRE(lm.dtype == "BF16");
  REQUIRE(lm.shape == std::vector<std::uint64_t>{1200, 64});
  constexpr std::size_t kRow = 64 * 2;  // bytes per row
  auto rows = [&](std::size_t first, std::size_t last) { return lm.bytes.substr(first * kRow, (last - first) * kRow); };
  auto cols = [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
    std::string out;
    for (std::size_t r = r0; r < r1; ++r) out += lm.bytes.substr(r * kRow + c0 * 2, (c1 - c0) * 2);
    return out;
  };

  struct SliceCase {
    std::string label;
    std::vector<std::string> selectors;  ///< arguments between LOCATION and -o
    std::vector<std::uint64_t> shape;
    std::string bytes;
  };
  const std::vector<SliceCase> cases = {
      {"NAME[0:2, :]", {"lm_head.weight[0:2, :]"}, {2, 64}, rows(0, 2)},
      {"NAME[1]", {"lm_head.weight[1]"}, {64}, rows(1, 2)},
      {"--slice NAME[:, 0:8]", {"--slice", "lm_head.weight[:, 0:8]"}, {1200, 8}, cols(0, 1200, 0, 8)},
      {"NAME[-1] (last row)", {"lm_head.weight[-1]"}, {64}, rows(1199, 1200)},
      {"NAME[1198:] (open stop)", {"lm_head.weight[1198:]"}, {2, 64}, rows(1198, 1200)},
      {"NAME[5:7, 10:20]", {"lm_head.weight[5:7, 10:20]"}, {2, 10}, cols(5, 7, 10, 20)},
      {"NAME[3, 60:64]", {"lm_head.weight[3, 60:64]"}, {4}, cols(3, 4, 60, 64)},
      {"NAME[7, 5] (scalar)", {"lm_head.weight[7, 5]"}, {}, cols(7, 8, 5, 6)},
      {"NAME[10:10] (empty)", {"lm_head.weight[10:10]"}, {0, 64}, ""},
      {"NAME[] (whole)", {"lm_head.weight[]"}, {1200, 64}, lm.bytes},
  };
  for (const auto& c : cases) {
    SECTION(c.label) {
      TempDir tmp;
      const auto out = tmp / "slice.safetensors";
      std::vector<std::string> args = {"get", src.string()};
      args.insert(args.end(), c.selectors.begin(), c.selectors.end());
      args.insert(args.end(), {"-o", out.string()});
      INFO(describe(args));
      auto r = run(args);
      INFO("stderr: " << r.err);
      REQUIRE(r.exit_code == 0);
      const StFile f = read_safetensors(out);
      REQUIRE(f.tensors.size() == 1);
      const auto& t = f.tensors.begin()->second;
      CHECK(f.tensors.begin()->first == "lm_head.weight");
      CHECK(t.dtype == "BF16");
      CHECK(t.shape == c.shape);
      CHECK(t.bytes.size() == c.bytes.size());
      CHECK((t.bytes == c.bytes));
    }
  }
}

TEST_CASE("get mixes sliced and whole tensors, and a slice applies to every tensor a glob matches",
          "[cli][slice]") {
  auto ref = reference_dir();
  if (!ref) return;
  const fs::path src = *ref / "llama-tiny-sharded";
  const StTensor norm = original_tensor(src / "model-00003-of-00003.safetensors", "model.norm.weight");
  TempDir tmp;
  const auto out = tmp / "mixed.safetensors";
  const std::vector<std::string> args = {"get", src.string(), "model.norm.weight",
                                         "model.layers.*.self_attn.k_proj.weight[0:1]", "-o", out.string()};
  INFO(describe(args));
  auto r = run(args);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const StFile f = read_safetensors(out);
  CHECK(f.tensors.size() == 1 + 6);
  CHECK((f.tensors.at("model.norm.weight").bytes == norm.bytes));
  for (int layer = 0; layer < 6; ++layer) {
    const std::string name = "model.layers." + std::to_string(layer) + ".self_attn.k_proj.weight";
    INFO(name);
    REQUIRE(f.tensors.count(name) == 1);
    const auto& t = f.tensors.at(name);
    CHECK(t.shape == std::vector<std::uint64_t>{1, 64});
    // Find the source shard of this tensor and compare the first row.
    bool found = false;
    for (const auto& e : fs::directory_iterator(src)) {
      if (e.path().extension() != ".safetensors") continue;
      const StFile shard = read_safetensors(e.path());
      auto it = shard.tensors.find(name);
      if (it == shard.tensors.end()) continue;
      found = true;
      CHECK((t.bytes == it->second.bytes.substr(0, 64 * 2)));
    }
    CHECK(found);
  }
}
