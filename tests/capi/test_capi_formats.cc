// SPDX-License-Identifier: Apache-2.0
// The C API on files of other formats (issue 13): tf_open of a GGUF file, a PyTorch checkpoint,
// a tar archive, ... fails with an invalid-safetensors code (exit code 2) whose message names
// the format, for a local file and for a Hub file served by the test server (one window read).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "hub_server.hpp"
#include "tensorfetch/tensorfetch.h"

namespace fs = std::filesystem;
using tensorfetch::testing::HubServer;

namespace {

fs::path testdata() {
  const char* dir = std::getenv("TENSORFETCH_TESTDATA_DIR");
  REQUIRE(dir != nullptr);
  return dir;
}

struct Opened {
  tf_code code = TF_OK;
  std::string message;
};

Opened open(const std::string& location, const tf_open_options* options) {
  tf_checkpoint* ckpt = nullptr;
  tf_error* err = nullptr;
  Opened r;
  r.code = tf_open(location.c_str(), options, &ckpt, &err);
  if (err != nullptr) r.message = tf_error_message(err);
  tf_error_free(err);
  tf_close(ckpt);
  return r;
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
    auto r = open(path, nullptr);
    INFO(path << ": " << tf_code_name(r.code) << ": " << r.message);
    CHECK(r.code == c.code);
    CHECK(tf_code_exit_code(r.code) == 2);
    CHECK(r.message.rfind(path + ": " + c.words, 0) == 0);
  }
}

TEST_CASE("C API: tf_open of a Hub file of another format names the format after one window read",
          "[capi][formats][remote]") {
  const char* tmp_env = std::getenv("TMPDIR");
  fs::path tmp = fs::path(tmp_env ? tmp_env : "/tmp") / ("tensorfetch-capi-formats-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp / "root" / "org" / "formats");
  for (const auto& c : kCases) fs::copy_file(testdata() / "other-formats" / c.file, tmp / "root" / "org" / "formats" / c.file);
  {
    tensorfetch::testing::Options o;
    o.root = tmp / "root";
    HubServer server(o);
    server.start();
    const std::string endpoint = server.endpoint();
    const std::string cache = (tmp / "cache").string();
    const std::string hf_cache = (tmp / "hf").string();
    tf_open_options options;
    tf_open_options_init(&options);
    options.endpoint = endpoint.c_str();
    options.cache_dir = cache.c_str();
    options.hf_hub_cache = hf_cache.c_str();
    options.token = "";
    options.offline = 0;
    for (const auto& c : kCases) {
      server.clear_log();
      auto r = open("hf://org/formats/" + c.file, &options);
      INFO(c.file << ": " << tf_code_name(r.code) << ": " << r.message);
      CHECK(r.code == c.code);
      CHECK(tf_code_exit_code(r.code) == 2);
      CHECK(r.message.find(c.file + " (http://") != std::string::npos);
      CHECK(r.message.find("): " + c.words) != std::string::npos);
      std::size_t bodies = 0;
      for (const auto& rec : server.log()) {
        if (rec.file != c.file) continue;
        CHECK(rec.range == "bytes=0-262143");
        if (rec.status == 200 || rec.status == 206) ++bodies;
      }
      CHECK(bodies == 1);
    }
  }
  fs::remove_all(tmp);
}
