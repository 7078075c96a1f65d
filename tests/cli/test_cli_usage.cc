// SPDX-License-Identifier: Apache-2.0
// Usage errors exit 1 with a message on stderr and write nothing; --help exits 0.
#include "cli_util.hpp"

using namespace clitest;

namespace {

// A valid file with one F32 tensor "wq" of shape [4, 8] and one U8 "b" of shape [3].
fs::path write_small(const TempDir& dir) {
  const auto file = dir / "small.safetensors";
  std::string data(4 * 8 * 4 + 3, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i);
  std::string header = R"({"wq":{"dtype":"F32","shape":[4,8],"data_offsets":[0,128]},)"
                       R"("b":{"dtype":"U8","shape":[3],"data_offsets":[128,131]}})";
  write_file(file, make_safetensors(header, data));
  return file;
}

struct UsageCase {
  std::string label;
  std::vector<std::string> args;  ///< "@IN" is replaced by the input file, "@OUT" by the output
  std::string must_name;          ///< stderr must contain this (after substitution)
};

}  // namespace

TEST_CASE("usage errors exit 1 with a message and write nothing", "[cli][usage]") {
  const std::vector<UsageCase> cases = {
      {"no arguments", {}, ""},
      {"unknown subcommand", {"frobnicate", "@IN"}, ""},  // CLI11 says "A subcommand is required"
      {"unknown option", {"inspect", "@IN", "--bogus"}, "--bogus"},
      {"inspect without a location", {"inspect"}, ""},
      {"get without -o", {"get", "@IN", "wq"}, "--plan"},  // says -o is needed unless --plan
      {"get --plan with -o (a plan writes no file)", {"get", "@IN", "--plan", "-o", "@OUT"}, "--plan"},
      {"get --plan with --mpi", {"get", "@IN", "--plan", "--mpi"}, "--plan"},
      {"get --plan with --hf-cache", {"get", "@IN", "--plan", "--hf-cache"}, "--plan"},
      {"--max-rate below 1 KiB/s", {"get", "@IN", "--max-rate", "1000", "-o", "@OUT"}, "--max-rate"},
      {"--max-rate 1k (decimal: 1000 bytes/s)", {"download", "@IN", "--max-rate", "1k", "-o", "@OUT"}, "1000"},
      {"--max-rate negative", {"get", "@IN", "--max-rate", "-1", "-o", "@OUT"}, "--max-rate"},
      {"--max-rate not a size", {"get", "@IN", "--max-rate", "fast", "-o", "@OUT"}, "--max-rate"},
      {"--max-rate too large", {"get", "@IN", "--max-rate", "2T", "-o", "@OUT"}, "--max-rate"},
      {"--max-rate on inspect (it fetches no data)", {"inspect", "@IN", "--max-rate", "40M"}, "--max-rate"},
      {"get without a location", {"get", "-o", "@OUT"}, ""},
      {"unknown tensor name", {"get", "@IN", "no.such.tensor", "-o", "@OUT"}, "no.such.tensor"},
      {"one unknown name among known ones", {"get", "@IN", "wq", "missing_one", "-o", "@OUT"}, "missing_one"},
      {"glob matching nothing", {"get", "@IN", "zzz.*", "-o", "@OUT"}, "zzz.*"},
      {"bad slice syntax (step)", {"get", "@IN", "wq[0:1:2]", "-o", "@OUT"}, "0:1:2"},
      {"bad slice syntax (not a number)", {"get", "@IN", "wq[a:b]", "-o", "@OUT"}, "a:b"},
      {"unterminated bracket as a positional (a glob matching nothing)", {"get", "@IN", "wq[0:1", "-o", "@OUT"}, "wq[0:1"},
      {"bad slice syntax (missing ']')", {"get", "@IN", "--slice", "wq[0:1", "-o", "@OUT"}, ""},
      {"--slice without brackets", {"get", "@IN", "--slice", "wq", "-o", "@OUT"}, "--slice wq"},
      {"slice stop out of range", {"get", "@IN", "wq[0:5]", "-o", "@OUT"}, "'wq'"},
      {"slice index out of range", {"get", "@IN", "wq[4]", "-o", "@OUT"}, "'wq'"},
      {"negative slice index out of range", {"get", "@IN", "wq[-5]", "-o", "@OUT"}, "'wq'"},
      {"slice start after stop", {"get", "@IN", "wq[3:1]", "-o", "@OUT"}, "'wq'"},
      {"slice of more dimensions than the tensor has", {"get", "@IN", "b[0, 0]", "-o", "@OUT"}, "tensor 'b'"},
      {"slice out of range in the second dimension", {"get", "@IN", "--slice", "wq[:, 2:9]", "-o", "@OUT"}, "'wq'"},
      {"one tensor selected twice with different slices",
       {"get", "@IN", "wq[0:1]", "--slice", "wq[1:2]", "-o", "@OUT"},
       "'wq'"},
      {"nonexistent path (inspect)", {"inspect", "@IN.missing"}, "@IN.missing"},
      {"nonexistent path (get)", {"get", "@IN.missing", "-o", "@OUT"}, "@IN.missing"},
      {"directory without a checkpoint", {"inspect", "@EMPTYDIR"}, "@EMPTYDIR"},
  };
  for (const auto& c : cases) {
    SECTION(c.label) {
      TempDir in, out;
      const auto file = write_small(in);
      fs::create_directory(in / "emptydir");
      auto subst = [&](std::string s) {
        auto replace = [&](const std::string& from, const std::string& to) {
          for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
            s.replace(pos, from.size(), to);
          }
        };
        replace("@EMPTYDIR", (in / "emptydir").string());
        replace("@IN", file.string());
        replace("@OUT", (out / "out.safetensors").string());
        return s;
      };
      std::vector<std::string> args;
      for (const auto& a : c.args) args.push_back(subst(a));
      INFO(describe(args));
      auto r = run(args);
      INFO("stdout: " << r.out);
      INFO("stderr: " << r.err);
      CHECK(r.exit_code == 1);
      CHECK(!r.err.empty());
      if (!c.must_name.empty()) CHECK(r.err.find(subst(c.must_name)) != std::string::npos);
      CHECK(list_dir(out.path()).empty());
      CHECK(list_dir(in.path()) == std::vector<std::string>{"emptydir", "small.safetensors"});
    }
  }
}

TEST_CASE("--help and subcommand --help exit 0 and print usage", "[cli][usage]") {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, std::vector<std::string>{"-h"},
        std::vector<std::string>{"inspect", "--help"}, std::vector<std::string>{"get", "--help"}}) {
    INFO(describe(args));
    auto r = run(args);
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("Usage") != std::string::npos);
  }
  auto r = run({"--help"});
  CHECK(r.out.find("inspect") != std::string::npos);
  CHECK(r.out.find("get") != std::string::npos);
  auto v = run({"--version"});
  CHECK(v.exit_code == 0);
  CHECK(v.out.find("tensorfetch") != std::string::npos);
}

TEST_CASE("a remote location is refused by this local-only build without a crash", "[cli][usage]") {
  TempDir out;
  auto r = run({"inspect", "https://example.invalid/model.safetensors"});
  INFO("stderr: " << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 2);
  CHECK(r.exit_code < 128);
  CHECK(r.err.find("https://example.invalid/model.safetensors") != std::string::npos);
}
