// SPDX-License-Identifier: Apache-2.0
// Terminal injection (issue 14, item 8): tensor names, `__metadata__` and paths from a crafted
// checkpoint, and error messages, reach the terminal escaped (no raw control byte, bidi
// control or invalid UTF-8); `--json` stays exact.
#include <set>

#include "cli_util.hpp"

using namespace clitest;

namespace {

// Hostile strings: a screen clear, a carriage return (overwrites the line), a bell, a
// right-to-left override, a C1 CSI, an OSC title sequence, and a '#' (the grouping marker).
const std::vector<std::string> kHostileNames = {
    "clear\x1b[2Jscreen",           "over\rwrite",          "bell\x07",
    "evil\xe2\x80\xaegpj.weight",   "c1\xc2\x9b" "2Jcsi",   "osc\x1b]0;pwned\x07title",
    "plain.weight",                 "hash#.1.w",           "hash#.2.w",
};

// What must not reach a terminal: C0 controls other than the line ends this output is made
// of, DEL, C1 controls (UTF-8 C2 80..C2 9F), bidi controls, and bytes that are not UTF-8 here
// (0xFF, 0xFE: the test injects those).
void check_terminal_safe(const std::string& text, const char* what) {
  INFO(what << ":\n" << text);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    INFO("byte " << i << " = " << static_cast<int>(c));
    CHECK((c >= 0x20 || c == '\n'));
    CHECK(c != 0x7f);
    CHECK(c != 0xff);
    CHECK(c != 0xfe);
    if (c == 0xc2 && i + 1 < text.size()) {
      const auto d = static_cast<unsigned char>(text[i + 1]);
      CHECK_FALSE((d >= 0x80 && d <= 0x9f));
    }
  }
  for (const char* bidi : {"\xe2\x80\xae", "\xe2\x80\xad", "\xe2\x80\xab", "\xe2\x80\xaa", "\xe2\x80\xac",
                           "\xe2\x81\xa6", "\xe2\x81\xa7", "\xe2\x81\xa8", "\xe2\x81\xa9", "\xe2\x80\x8f"}) {
    CHECK(text.find(bidi) == std::string::npos);
  }
}

// A checkpoint whose tensors are named kHostileNames (U8 [2] each) plus `extra` more named
// "layers.N.w", with hostile `__metadata__`.
std::string crafted_checkpoint(std::size_t extra = 0) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}, {"note\x1b[31m", "red\r\xe2\x80\xae" "back"}};
  std::uint64_t pos = 0;
  auto add = [&](const std::string& name) {
    header[name] = {{"dtype", "U8"}, {"shape", {2}}, {"data_offsets", {pos, pos + 2}}};
    pos += 2;
  };
  for (const auto& n : kHostileNames) add(n);
  for (std::size_t i = 0; i < extra; ++i) add("layers." + std::to_string(i) + ".w");
  return make_safetensors(header.dump(), std::string(pos, '\x01'));
}

}  // namespace

TEST_CASE("inspect (text) escapes hostile tensor names, metadata and paths; --json keeps them exact",
          "[cli][escape]") {
  TempDir tmp;
  // A directory name with an escape sequence and bytes that are not UTF-8.
  const fs::path dir = tmp / "dir\x1b[2J\xff\xfe";
  fs::create_directories(dir);
  write_file(dir / "model.safetensors", crafted_checkpoint());

  for (const bool all : {false, true}) {
    std::vector<std::string> args = {"inspect", dir.string()};
    if (all) args.push_back("--all");
    auto r = run(args);
    INFO(describe(args) << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    check_terminal_safe(r.out, "stdout");
    // Readable escapes, in place of the raw bytes.
    for (const char* shown : {"dir\\x1b[2J\\xff\\xfe", "clear\\x1b[2Jscreen", "over\\rwrite", "bell\\x07",
                              "evil\\u202egpj.weight", "c1\\u009b2Jcsi", "osc\\x1b]0;pwned\\x07title",
                              "note\\x1b[31m=red\\r\\u202eback", "hash#.1.w", "plain.weight"}) {
      CHECK_THAT(r.out, Catch::Contains(shown));
    }
  }

  auto r = run({"inspect", dir.string(), "--json"});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = json::parse(r.out);  // parses: the JSON is valid (its own escaping)
  std::set<std::string> names;
  for (const auto& t : j.at("tensors")) names.insert(t.at("name").get<std::string>());
  CHECK(names == std::set<std::string>(kHostileNames.begin(), kHostileNames.end()));
  CHECK(j.at("metadata").at("note\x1b[31m").get<std::string>() == "red\r\xe2\x80\xae" "back");
}

TEST_CASE("inspect (text) groups more than 40 hostile names without crashing; '#' in a name stays itself",
          "[cli][escape]") {
  TempDir tmp;
  write_file(tmp / "m.safetensors", crafted_checkpoint(45));
  auto r = run({"inspect", (tmp / "m.safetensors").string()});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  check_terminal_safe(r.out, "stdout");
  CHECK_THAT(r.out, Catch::Contains("hash#.{1,2}.w"));
  CHECK_THAT(r.out, Catch::Contains("layers.{0-44}.w"));
  CHECK_THAT(r.out, Catch::Contains("clear\\x1b[2Jscreen"));
}

TEST_CASE("error messages on stderr are escaped: a hostile file name, a hostile duplicate key", "[cli][escape]") {
  TempDir tmp;
  SECTION("a file name with an escape sequence and invalid UTF-8, too short to be safetensors") {
    const fs::path bad = tmp / "bad\x1b[2J\x07\xff.safetensors";
    write_file(bad, "abc");
    auto r = run({"inspect", bad.string()});
    CHECK(r.exit_code == 2);
    check_terminal_safe(r.err, "stderr");
    CHECK_THAT(r.err, Catch::Contains("bad\\x1b[2J\\x07\\xff.safetensors"));
  }
  SECTION("a duplicate tensor name with an escape sequence") {
    const std::string entry = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
    const std::string header = "{\"\\u001b]0;pwned\\u0007\\u202e\":" + entry + ",\"\\u001b]0;pwned\\u0007\\u202e\":" +
                               entry + "}";
    write_file(tmp / "dup.safetensors", make_safetensors(header, "x"));
    auto r = run({"inspect", (tmp / "dup.safetensors").string()});
    CHECK(r.exit_code == 2);
    check_terminal_safe(r.err, "stderr");
    CHECK_THAT(r.err, Catch::Contains("tensorfetch: error: "));
  }
  SECTION("a usage error quoting a hostile argument") {
    auto r = run({"inspect", "x", "--retries", "\x1b[2J"});
    CHECK(r.exit_code == 1);
    check_terminal_safe(r.err, "stderr");
    CHECK_THAT(r.err, Catch::Contains("\\x1b[2J"));
  }
}
