// SPDX-License-Identifier: Apache-2.0
// The human-readable `inspect` table: totals lines, grouping of repeated layers, --all.
#include <sstream>

#include "cli_util.hpp"

using namespace clitest;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The first line containing `needle`, or "".
std::string line_with(const std::string& text, const std::string& needle) {
  for (const auto& l : lines_of(text)) {
    if (l.find(needle) != std::string::npos) return l;
  }
  return "";
}

}  // namespace

TEST_CASE("inspect (text) of llama-tiny-single prints the parameter total", "[cli][inspect]") {
  auto ref = reference_dir();
  if (!ref) return;
  const std::string location = (*ref / "llama-tiny-single").string();
  auto r = run({"inspect", location});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  INFO("stdout:\n" << r.out);
  CHECK(r.err.empty());
  CHECK(lines_of(r.out).at(0).find(location) == 0);
  CHECK(lines_of(r.out).at(0).find("57 tensors in 1 file") != std::string::npos);
  const std::string params = line_with(r.out, "parameters");
  CHECK(params.find("412,480") != std::string::npos);
  CHECK(params.find("BF16 412,480") != std::string::npos);
  CHECK(line_with(r.out, "tensor data").find("824,960 bytes") != std::string::npos);
  CHECK(line_with(r.out, "files ").find("830,888 bytes") != std::string::npos);
  CHECK(line_with(r.out, "metadata").find("format=pt") != std::string::npos);
  CHECK(line_with(r.out, "lm_head.weight").find("[1200, 64]") != std::string::npos);
}

TEST_CASE("inspect (text) of llama-tiny-sharded groups repeated layers; --all lists every tensor",
          "[cli][inspect]") {
  auto ref = reference_dir();
  if (!ref) return;
  const std::string location = (*ref / "llama-tiny-sharded").string();

  SECTION("grouped") {
    auto r = run({"inspect", location});
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    INFO("stdout:\n" << r.out);
    CHECK(lines_of(r.out).at(0).find("57 tensors in 3 files (sharded)") != std::string::npos);
    const std::string grouped = line_with(r.out, "model.layers.{0-5}.mlp.down_proj.weight");
    CHECK(!grouped.empty());
    CHECK(grouped.find("x6") != std::string::npos);
    CHECK(grouped.find("[64, 160]") != std::string::npos);
    CHECK(grouped.find("3 files") != std::string::npos);
    CHECK(line_with(r.out, "model.layers.3.mlp.down_proj.weight").empty());
    CHECK(line_with(r.out, "parameters").find("412,480") != std::string::npos);
    CHECK(line_with(r.out, "total_parameters").find("412,480 (matches)") != std::string::npos);
    CHECK(line_with(r.out, "total_size").find("824,960 (matches)") != std::string::npos);
    CHECK(line_with(r.out, "model.norm.weight").find("model-00003-of-00003.safetensors") != std::string::npos);
  }
  SECTION("--all") {
    auto r = run({"inspect", location, "--all"});
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    INFO("stdout:\n" << r.out);
    CHECK(!line_with(r.out, "model.layers.3.mlp.down_proj.weight").empty());
    CHECK(line_with(r.out, "{0-5}").empty());
    std::size_t down_proj_lines = 0;
    for (const auto& l : lines_of(r.out)) {
      if (l.find(".mlp.down_proj.weight") != std::string::npos) ++down_proj_lines;
    }
    CHECK(down_proj_lines == 6);
    CHECK(line_with(r.out, "parameters").find("412,480") != std::string::npos);
  }
  SECTION("the index path gives the same table") {
    auto a = run({"inspect", location});
    auto b = run({"inspect", location + "/model.safetensors.index.json"});
    REQUIRE(a.exit_code == 0);
    REQUIRE(b.exit_code == 0);
    // Everything after the first line (which names the location) is identical.
    CHECK(a.out.substr(a.out.find('\n')) == b.out.substr(b.out.find('\n')));
  }
}

TEST_CASE("inspect (text) of the dtype zoo lists every tensor and the metadata", "[cli][inspect]") {
  auto ref = reference_dir();
  if (!ref) return;
  auto r = run({"inspect", (*ref / "dtypes" / "model.safetensors").string()});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  INFO("stdout:\n" << r.out);
  for (const char* name : {"f8e4m3", "f8e5m2", "c64", "bool", "scalar", "empty", "big_f32"}) {
    CHECK(!line_with(r.out, std::string(name) + " ").empty());
  }
  CHECK(line_with(r.out, "scalar ").find("[]") != std::string::npos);
  CHECK(line_with(r.out, "empty ").find("[0, 7]") != std::string::npos);
  CHECK(line_with(r.out, "metadata").find("note=dtype zoo") != std::string::npos);
  CHECK(line_with(r.out, "parameters").find("F8_E4M3 24") != std::string::npos);
}
