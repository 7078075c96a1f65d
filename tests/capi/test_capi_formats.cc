// SPDX-License-Identifier: Apache-2.0
// The C API on files of other formats (issue 13): tf_open of a GGUF file, a PyTorch checkpoint,
// a tar archive, ... fails with an invalid-safetensors code (exit code 2) whose message names
// the format, for a local file and for a Hub file served by the test server (one window read).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "capi_util.hpp"
#include "hub_server.hpp"

namespace fs = std::filesystem;

namespace {

fs::path testdata() {
  const char* dir = std::getenv("TENSORFETCH_TESTDATA_DIR");
  REQUIRE(dir != nullptr);
  return dir;
}

struct Case {
  std::string file;
  tf_code code;  // the code of the safetensors rule the file breaks first
  std::string words;
};

const std::vector<Case> kCases = {
    {"model.gguf", TF_ERR_HEADER_TOO_LARGE, "this is a GGUF file (version 3), not safetensors"},
    {"pytorch_model.bin", TF_ERR_HEADER_TOO_LARGE, "this is a PyTorch checkpoint (zip), not safetensors"},
    {"pytorch_model-legacy.bin", TF_ERR_HEADER_TOO_LARGE, "this is a PyTorch checkpoint (legacy pickle format)"},
    {"model.safetensors.gz", TF_ERR_FILE_TOO_SMALL, "this is a gzip-compressed file"},
    {"model.tar", TF_ERR_HEADER_START, "this is a tar archive"},
};

}  // namespace

TEST_CASE("C API: tf_open of a local file of another format fails with exit code 2 and names the format",
          "[capi][formats]") {
  for (const auto& c : kCases) {
    const std::string path = (testdata() / "other-formats" / c.file).string();
    auto r = capitest::try_open(path, nullptr);
    INFO(path << ": " << tf_code_name(r.code) << ": " << r.message);
    CHECK(r.code == c.code);
    CHECK(tf_code_exit_code(r.code) == 2);
    CHECK(r.message.rfind(path + ": " + c.words, 0) == 0);
  }
}

TEST_CASE("C API: tf_open of a Hub file of another format names the format after one window read",
          "[capi][formats][remote]") {
  capitest::ServerFixture fx("tf-capi-formats");
  const fs::path repo = fx.tmp / "root" / "org" / "formats";
  fs::create_directories(repo);
  for (const auto& c : kCases) fs::copy_file(testdata() / "other-formats" / c.file, repo / c.file);
  tensorfetch::testing::Options o;
  o.root = fx.tmp / "root";
  fx.start(o);
  for (const auto& c : kCases) {
    fx.server->clear_log();
    auto r = fx.try_open("hf://org/formats/" + c.file, "cache");
    INFO(c.file << ": " << tf_code_name(r.code) << ": " << r.message);
    CHECK(r.code == c.code);
    CHECK(tf_code_exit_code(r.code) == 2);
    CHECK(r.message.find(c.file + " (http://") != std::string::npos);
    CHECK(r.message.find("): " + c.words) != std::string::npos);
    std::size_t bodies = 0;
    for (const auto& rec : fx.server->log()) {
      if (rec.file != c.file) continue;
      CHECK(rec.range == "bytes=0-262143");
      if (rec.status == 200 || rec.status == 206) ++bodies;
    }
    CHECK(bodies == 1);
  }
}
