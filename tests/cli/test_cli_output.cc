// SPDX-License-Identifier: Apache-2.0
// Output safety of `get -o`: unwritable destinations fail cleanly and leave nothing; an
// existing output is replaced only by a successful run.
#include <unistd.h>

#include "cli_util.hpp"

using namespace clitest;

namespace {

// A valid file: "wq" F32 [4, 8] and "b" U8 [3], with distinct bytes.
fs::path write_small(const fs::path& file) {
  std::string data(4 * 8 * 4 + 3, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 1);
  write_file(file, make_safetensors(R"({"wq":{"dtype":"F32","shape":[4,8],"data_offsets":[0,128]},)"
                                    R"("b":{"dtype":"U8","shape":[3],"data_offsets":[128,131]}})",
                                    data));
  return file;
}

}  // namespace

TEST_CASE("get -o into a directory that cannot be created fails with a clear message and leaves nothing",
          "[cli][output]") {
  TempDir tmp;
  const auto src = write_small(tmp / "src.safetensors");
  const auto blocker = tmp / "blocker";
  write_file(blocker, "not a directory");

  // Section names must not depend on the (random) temporary path.
  const std::vector<std::pair<std::string, std::string>> outputs = {
      {"BLOCKER/out.safetensors", (blocker / "out.safetensors").string()},
      {"BLOCKER/sub/out.safetensors", (blocker / "sub" / "out.safetensors").string()},
      {"BLOCKER/sub/", (blocker / "sub").string() + "/"},
      {"BLOCKER/", blocker.string() + "/"},
  };
  for (const auto& [label, out] : outputs) {
    SECTION("-o " + label) {
      const std::vector<std::string> args = {"get", src.string(), "-o", out};
      INFO(describe(args));
      auto r = run(args);
      INFO("stderr: " << r.err);
      CHECK(r.exit_code == 1);
      CHECK(r.err.find("tensorfetch: error:") != std::string::npos);
      CHECK(r.err.find(blocker.string()) != std::string::npos);
      CHECK(r.err.find("wrote") == std::string::npos);
      CHECK(read_file(blocker) == "not a directory");
      CHECK(list_dir(tmp.path()) == std::vector<std::string>{"blocker", "src.safetensors"});
    }
  }
}

TEST_CASE("get -o into a sharded output directory under a regular file fails and leaves nothing",
          "[cli][output]") {
  auto ref = reference_dir();
  if (!ref) return;
  TempDir tmp;
  const auto blocker = tmp / "blocker";
  write_file(blocker, "x");
  auto r = run({"get", (*ref / "llama-tiny-sharded").string(), "-o", (blocker / "out").string() + "/"});
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(blocker.string()) != std::string::npos);
  CHECK(list_dir(tmp.path()) == std::vector<std::string>{"blocker"});
  CHECK(read_file(blocker) == "x");
}

TEST_CASE("get -o into a read-only directory fails and leaves nothing", "[cli][output]") {
  if (::geteuid() == 0) {
    WARN("running as root: directory permissions are not enforced; skipping");
    return;
  }
  TempDir tmp;
  const auto src = write_small(tmp / "src.safetensors");
  const auto ro = tmp / "ro";
  fs::create_directory(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec, fs::perm_options::replace);
  auto r = run({"get", src.string(), "-o", (ro / "out.safetensors").string()});
  fs::permissions(ro, fs::perms::owner_all, fs::perm_options::replace);
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find((ro / "out.safetensors").string()) != std::string::npos);
  CHECK(list_dir(ro).empty());
}

TEST_CASE("an existing output file is replaced only when get succeeds", "[cli][output]") {
  TempDir tmp;
  const auto src = write_small(tmp / "src.safetensors");
  const auto bad = tmp / "bad.safetensors";
  write_file(bad, make_safetensors(R"({"wq":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "12345"));
  const auto out = tmp / "out.safetensors";

  auto first = run({"get", src.string(), "b", "-o", out.string()});
  INFO("first stderr: " << first.err);
  REQUIRE(first.exit_code == 0);
  const std::string original = read_file(out);
  REQUIRE(read_safetensors(out).tensors.size() == 1);

  struct Failing {
    std::string label;
    std::vector<std::string> args;
    int exit_code;
  };
  const std::vector<Failing> failing = {
      {"unknown tensor", {"get", src.string(), "nope", "-o", out.string()}, 1},
      {"glob matching nothing", {"get", src.string(), "q*", "-o", out.string()}, 1},
      {"slice out of range", {"get", src.string(), "wq[0:9]", "-o", out.string()}, 1},
      {"bad slice syntax", {"get", src.string(), "wq[0:1:2]", "-o", out.string()}, 1},
      {"invalid source file", {"get", bad.string(), "-o", out.string()}, 2},
      {"missing source file", {"get", (tmp / "missing.safetensors").string(), "-o", out.string()}, 1},
      {"output given as a directory that is an existing file", {"get", src.string(), "-o", out.string() + "/"}, 1},
  };
  for (const auto& f : failing) {
    SECTION(f.label) {
      INFO(describe(f.args));
      auto r = run(f.args);
      INFO("stderr: " << r.err);
      CHECK(r.exit_code == f.exit_code);
      CHECK((read_file(out) == original));
      CHECK(temp_files(tmp.path()).empty());
      CHECK(list_dir(tmp.path()) ==
            std::vector<std::string>{"bad.safetensors", "out.safetensors", "src.safetensors"});
    }
  }
  SECTION("a later successful get replaces it") {
    auto r = run({"get", src.string(), "wq[1:3]", "-o", out.string()});
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    const StFile f = read_safetensors(out);
    REQUIRE(f.tensors.size() == 1);
    CHECK(f.tensors.count("wq") == 1);
    CHECK(f.tensors.at("wq").shape == std::vector<std::uint64_t>{2, 8});
    CHECK((f.tensors.at("wq").bytes == read_file(src).substr(fs::file_size(src) - 131 + 32, 64)));
    CHECK(temp_files(tmp.path()).empty());
  }
}

TEST_CASE("get -o naming its own source file either refuses (exit 1, file untouched) or replaces it atomically",
          "[cli][output]") {
  TempDir tmp;
  const auto src = write_small(tmp / "src.safetensors");
  const std::string before = read_file(src);
  auto r = run({"get", src.string(), "b", "-o", src.string()});
  INFO("stderr: " << r.err);
  REQUIRE((r.exit_code == 0 || r.exit_code == 1));
  if (r.exit_code == 1) {
    CHECK((read_file(src) == before));
  } else {
    const StFile f = read_safetensors(src);
    REQUIRE(f.tensors.size() == 1);
    CHECK((f.tensors.at("b").bytes == before.substr(before.size() - 3)));
  }
  CHECK(list_dir(tmp.path()) == std::vector<std::string>{"src.safetensors"});
}

TEST_CASE("get -o '' fails with exit 1 and leaves nothing in the working directory", "[cli][output]") {
  TempDir tmp, cwd;
  const auto src = write_small(tmp / "src.safetensors");
  auto r = run({"get", src.string(), "-o", ""}, cwd.path());
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 1);
  CHECK(!r.err.empty());
  CHECK(list_dir(cwd.path()).empty());
  CHECK(list_dir(tmp.path()) == std::vector<std::string>{"src.safetensors"});
}

TEST_CASE("get -o with a relative path writes relative to the working directory", "[cli][output]") {
  TempDir tmp, cwd;
  const auto src = write_small(tmp / "src.safetensors");
  auto r = run({"get", src.string(), "wq*", "-o", "sub/out.safetensors"}, cwd.path());
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(read_safetensors(cwd / "sub/out.safetensors").tensors.size() == 1);
  auto s = run({"get", src.string(), "-o", "shards/"}, cwd.path());
  INFO("stderr: " << s.err);
  REQUIRE(s.exit_code == 0);
  CHECK(list_dir(cwd / "shards") == std::vector<std::string>{"src.safetensors"});
}

TEST_CASE("get into the directory of the checkpoint it reads refuses instead of overwriting the source",
          "[cli][output]") {
  // `tensorfetch get CKPT NAME -o CKPT` (CKPT an existing directory) writes sharded output
  // named as the source shards, i.e. over the source shards and index themselves. That must
  // not silently replace the checkpoint with a subset (leaving orphaned shards behind).
  auto ref = reference_dir();
  if (!ref) return;
  TempDir tmp;
  struct Layout {
    std::string label;
    std::string src_dir;
    std::string location;  ///< relative to the copy's directory ("" = the directory)
    std::string tensor;
  };
  const std::vector<Layout> layouts = {
      {"sharded, -o DIR", "llama-tiny-sharded", "", "model.norm.weight"},
      {"sharded via the index, -o DIR/", "llama-tiny-sharded", "model.safetensors.index.json", "model.norm.weight"},
      {"single file, -o its directory", "llama-tiny-single", "model.safetensors", "lm_head.weight"},
  };
  for (const auto& l : layouts) {
    SECTION(l.label) {
      const auto ck = tmp / "ck";
      fs::create_directory(ck);
      std::map<std::string, std::string> before;
      for (const auto& e : fs::directory_iterator(*ref / l.src_dir)) {
        const auto name = e.path().filename().string();
        if (!name.ends_with(".safetensors") && !name.ends_with(".index.json")) continue;
        before[name] = read_file(e.path());
        write_file(ck / name, before[name]);
      }
      const std::string location = l.location.empty() ? ck.string() : (ck / l.location).string();
      const std::string out = l.label.ends_with("DIR/") ? ck.string() + "/" : ck.string();
      const std::vector<std::string> args = {"get", location, l.tensor, "-o", out};
      INFO(describe(args));
      auto r = run(args);
      INFO("stderr: " << r.err);
      CHECK(r.exit_code == 1);
      for (const auto& [name, bytes] : before) {
        INFO("source file " << name);
        CHECK(sha256_hex(read_file(ck / name)) == sha256_hex(bytes));
      }
      CHECK(list_dir(ck).size() == before.size());
    }
  }
}
