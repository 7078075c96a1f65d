// SPDX-License-Identifier: Apache-2.0
// Files of other formats (testdata/other-formats: GGUF, PyTorch zip and pickle, NumPy, HDF5,
// ONNX, archives, a Git LFS pointer, a web page): `inspect`, `get` and `download` exit 2 and
// say "PATH: this is a GGUF file, not safetensors", for local files, plain URLs and Hub files;
// remotely from the first window alone (one range request per file, asserted through the test
// server's log). A valid file whose first bytes are also pickle's opcode is read.
#include <cstdlib>
#include <utility>

#include "cli_util.hpp"
#include "hub_server.hpp"

using namespace clitest;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {

fs::path testdata() {
  const char* dir = std::getenv("TENSORFETCH_TESTDATA_DIR");
  REQUIRE(dir != nullptr);
  REQUIRE(fs::is_directory(dir));
  return dir;
}

// Each sample of testdata/other-formats and the words its message starts with.
const std::vector<std::pair<std::string, std::string>> kSamples = {
    {"model.gguf", "this is a GGUF file (version 3), not safetensors"},
    {"pytorch_model.bin", "this is a PyTorch checkpoint (zip), not safetensors"},
    {"pytorch_model-legacy.bin", "this is a PyTorch checkpoint (legacy pickle format), not safetensors"},
    {"state.pkl", "this is a Python pickle (protocol 4), not safetensors"},
    {"array.npy", "this is a NumPy .npy file, not safetensors"},
    {"arrays.npz", "this is a NumPy .npz archive (zip), not safetensors"},
    {"archive.zip", "this is a zip archive, not safetensors"},
    {"model.h5", "this is an HDF5 file, not safetensors"},
    {"userblock.h5", "this is an HDF5 file, not safetensors"},
    {"model.onnx", "this is an ONNX model (IR version 8), not safetensors"},
    {"model.safetensors.gz", "this is a gzip-compressed file, not safetensors"},
    {"model.safetensors.zst", "this is a Zstandard-compressed file, not safetensors"},
    {"model.safetensors.xz", "this is an xz-compressed file, not safetensors"},
    {"model.safetensors.bz2", "this is a bzip2-compressed file, not safetensors"},
    {"model.tar", "this is a tar archive, not safetensors"},
    {"lfs-pointer/model.safetensors", "this is a Git LFS pointer file (for a file of 292 bytes), not safetensors"},
    {"page.html", "this is a web page (HTML), not safetensors"},
    {"config.json", "this is a JSON document, not safetensors"},
};

constexpr const char* kTail = " (tensorfetch reads only safetensors)";

std::string log_text(const std::vector<RequestRecord>& log) {
  std::string s;
  for (const auto& r : log) s += r.to_json() + "\n";
  return s;
}

}  // namespace

TEST_CASE("cli formats: inspect, get and download of a local file of another format exit 2 and name the format",
          "[cli][formats]") {
  const fs::path dir = testdata() / "other-formats";
  TempDir work;
  for (const auto& [name, message] : kSamples) {
    const std::string path = (dir / name).string();
    const std::string expected = "tensorfetch: error: " + path + ": " + message + kTail;
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"inspect", path},
             {"inspect", path, "--json"},
             {"get", path, "-o", (work / "out.safetensors").string()},
             {"download", path, "-o", (work / "dir").string()}}) {
      auto res = run(args);
      INFO(describe(args) << "\nstderr: " << res.err);
      CHECK(res.exit_code == 2);
      CHECK(res.out.empty());
      CHECK_THAT(res.err, Catch::StartsWith(expected));
    }
    CHECK_FALSE(fs::exists(work / "out.safetensors"));
    CHECK(temp_files(work.path()).empty());
  }
}

TEST_CASE("cli formats: a directory whose model.safetensors is a Git LFS pointer says how to get the file",
          "[cli][formats]") {
  const fs::path dir = testdata() / "other-formats" / "lfs-pointer";
  auto res = run({"inspect", dir.string()});
  INFO(res.err);
  CHECK(res.exit_code == 2);
  CHECK_THAT(res.err, Catch::Contains("model.safetensors: this is a Git LFS pointer file"));
  CHECK_THAT(res.err, Catch::Contains("git lfs pull"));
  CHECK_THAT(res.err, Catch::Contains("hf://ORG/NAME"));
}

TEST_CASE("cli formats: a valid file whose header length starts with pickle's opcode is read", "[cli][formats]") {
  const fs::path file = testdata() / "safetensors" / "valid" / "length-640-pickle-prefix.safetensors";
  auto res = run({"inspect", file.string(), "--json"});
  INFO(res.err);
  REQUIRE(res.exit_code == 0);
  const auto j = json::parse(res.out);
  CHECK(j["files"][0]["header_size"] == 640);
  CHECK(j["tensors"].size() == 3);
  // And a truncated copy is a truncated safetensors file, not a pickle.
  TempDir work;
  write_file(work / "cut.safetensors", read_file(file).substr(0, 300));
  res = run({"inspect", (work / "cut.safetensors").string()});
  CHECK(res.exit_code == 2);
  CHECK_THAT(res.err, !Catch::Contains("pickle"));
  CHECK_THAT(res.err, Catch::Contains("past the end"));
}

TEST_CASE("cli formats: Hub files and plain URLs of another format exit 2 from their first window alone",
          "[cli][formats][remote]") {
  const fs::path dir = testdata() / "other-formats";
  TempDir root, hf_home, cache, work;
  tftest::ScopedEnv env;
  for (const char* v : {"HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "CURL_CA_BUNDLE", "XDG_CACHE_HOME"}) {
    env.set(v, std::nullopt);
  }
  env.set("HF_HOME", hf_home.path().string());
  env.set("TENSORFETCH_CACHE", cache.path().string());
  for (const auto& [name, message] : kSamples) {
    fs::create_directories((root / "org" / "formats" / name).parent_path());
    fs::copy_file(dir / name, root / "org" / "formats" / name);
  }
  tensorfetch::testing::Options o;
  o.root = root.path();
  HubServer server(o);
  server.start();

  for (const auto& [name, message] : kSamples) {
    const std::string url = server.endpoint() + "/org/formats/resolve/main/" + name;
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"inspect", "hf://org/formats/" + name, "--endpoint", server.endpoint()},
             {"get", "hf://org/formats/" + name, "-o", (work / "out.safetensors").string(), "--endpoint",
              server.endpoint()},
             {"download", url, "-o", (work / "dir").string()}}) {
      server.clear_log();
      auto res = run(args);
      const auto log = server.log();
      INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(log));
      CHECK(res.exit_code == 2);
      // The message names the location, the file and the URL it was read from, then the format.
      const std::string file = args[1].starts_with("hf://") ? name : fs::path(name).filename().string();
      CHECK_THAT(res.err, Catch::StartsWith("tensorfetch: error: " + args[1] + ": " + file + " (http://"));
      CHECK_THAT(res.err, Catch::Contains("): " + message + kTail));
      // One read of the file's first window (through the Hub's redirect when it is an LFS
      // file); nothing else of it was asked for.
      // (`download URL` also warms its data connections: a GET of the URL's first byte each,
      // redirects not followed; only there.)
      std::size_t bodies = 0, warm = 0;
      for (const auto& rec : log) {
        if (rec.file != name) continue;
        if (rec.range == "bytes=0-0" && args[0] == "download") {
          ++warm;
          CHECK(rec.kind == "resolve");
          continue;
        }
        CHECK(rec.range == "bytes=0-262143");
        if (rec.status == 200 || rec.status == 206) ++bodies;
      }
      CHECK(bodies == 1);
      CHECK(warm <= 32);
    }
    CHECK_FALSE(fs::exists(work / "out.safetensors"));
  }
}
