// SPDX-License-Identifier: Apache-2.0
// testdata/ is what its README says: tools/gen/make_testdata.py regenerates it byte for byte
// (into a temporary directory, compared file by file), the README names every file, and the
// files are what their folder says (valid ones open, invalid ones fail with the code listed in
// codes.json).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "../support/process.hpp"
#include "tensorfetch/checkpoint.hpp"
#include "tensorfetch/format.hpp"
#include "tensorfetch/index.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
namespace tf = tensorfetch;
using tftest::to_bytes;

namespace {

fs::path testdata() {
  const char* dir = std::getenv("TENSORFETCH_TESTDATA_DIR");
  REQUIRE(dir != nullptr);
  REQUIRE(fs::is_directory(dir));
  return dir;
}

std::string file(const fs::path& path) {
  auto bytes = tftest::try_read_file(path);
  REQUIRE(bytes.has_value());
  return *bytes;
}

// Every regular file under `root`, as paths relative to it.
std::set<std::string> files_under(const fs::path& root) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) out.insert(fs::relative(e.path(), root).generic_string());
  }
  return out;
}

}  // namespace

TEST_CASE("testdata/ is exactly what tools/gen/make_testdata.py generates", "[testdata]") {
  const fs::path root = testdata();
  const char* python = std::getenv("TENSORFETCH_PYTHON");
  if (python == nullptr || !fs::exists(python)) {
    WARN("no Python interpreter (TENSORFETCH_PYTHON): skipped");
    return;
  }
  const fs::path generator = root.parent_path() / "tools" / "gen" / "make_testdata.py";
  REQUIRE(fs::exists(generator));
  tftest::TempDir tmp("tensorfetch-testdata");
  const fs::path out = tmp / "testdata";
  tftest::Child gen(python, {generator.string(), out.string()}, tftest::ChildIo{"", "", (tmp / "stderr").string()});
  const int status = gen.wait();
  INFO("generator stderr: " << tftest::try_read_file(tmp / "stderr").value_or(""));
  REQUIRE(status == 0);

  auto expected = files_under(out);
  auto present = files_under(root);
  present.erase("README.md");  // written by hand
  CHECK(expected == present);
  for (const auto& rel : expected) {
    INFO("testdata/" << rel << " differs from what the generator writes: run "
                        "/usr/bin/python3 tools/gen/make_testdata.py");
    CHECK(file(out / rel) == file(root / rel));
  }
}

TEST_CASE("testdata/README.md names every file", "[testdata]") {
  const fs::path root = testdata();
  const std::string readme = file(root / "README.md");
  for (const auto& rel : files_under(root)) {
    if (rel == "README.md") continue;
    INFO("testdata/" << rel);
    CHECK(readme.find(fs::path(rel).filename().string()) != std::string::npos);
  }
}

TEST_CASE("testdata/index: the sharded checkpoint opens; each bad index fails with its code", "[testdata]") {
  const fs::path root = testdata() / "index";
  auto ckpt = tf::Checkpoint::open((root / "sharded").string());
  REQUIRE(ckpt.has_value());
  CHECK(ckpt->sharded());
  CHECK(ckpt->files().size() == 2);
  CHECK(ckpt->tensors().size() == 4);

  const auto codes = nlohmann::json::parse(file(root / "invalid" / "codes.json"));
  REQUIRE(codes.size() >= 10);
  for (const auto& [name, code] : codes.items()) {
    INFO("index/invalid/" << name);
    auto r = tf::parse_index(to_bytes(file(root / "invalid" / name)));
    REQUIRE_FALSE(r.has_value());
    INFO("error: " << r.error().message);
    CHECK(tf::to_string(r.error().code) == code.get<std::string>());
  }
}
