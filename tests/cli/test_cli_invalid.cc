// SPDX-License-Identifier: Apache-2.0
// Files and indexes that are not valid safetensors: `inspect` and `get` refuse them with
// exit code 2, name the file, and `get` leaves nothing behind.
#include <cctype>
#include <functional>

#include "cli_util.hpp"

using namespace clitest;

namespace {

struct Crafted {
  std::string name;   ///< also the file name
  std::string bytes;  ///< whole file
  std::vector<std::string> reason = {};  ///< the message mentions one of these (any case)
};

std::string zeros(std::size_t n) { return std::string(n, '\0'); }

std::vector<Crafted> invalid_files() {
  const std::string f4 = R"("dtype":"F32","shape":[1])";
  std::vector<Crafted> v;
  v.push_back({"hole", make_safetensors(R"({"a":{)" + f4 + R"(,"data_offsets":[0,4]},"b":{)" + f4 +
                                            R"(,"data_offsets":[8,12]}})",
                                        zeros(12)), {"hole"}});
  v.push_back({"overlap", make_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                           zeros(12)), {"overlap"}});
  v.push_back({"hole-before-first", make_safetensors(R"({"a":{)" + f4 + R"(,"data_offsets":[4,8]}})",
                                                     zeros(8)), {"hole"}});
  v.push_back({"trailing-bytes", make_safetensors(R"({"a":{)" + f4 + R"(,"data_offsets":[0,4]}})",
                                                  zeros(6)), {"trailing"}});
  v.push_back({"truncated", make_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                                             zeros(10)), {"truncated", "past the end"}});
  v.push_back({"header-length-too-large", le64(100'000'001) + R"({"a":1})" + zeros(64), {"limit", "too large"}});
  v.push_back({"header-length-huge", le64(0xffffffffffffff00ULL) + "{}", {"limit", "too large"}});
  v.push_back({"header-length-past-eof", le64(1000) + R"({"a":{)" + f4 + R"(,"data_offsets":[0,4]}})", {"past the end", "beyond"}});
  v.push_back({"header-length-zero", le64(0) + zeros(4), {"'{'", "empty"}});
  v.push_back({"leading-space", make_safetensors(R"( {"a":{)" + f4 + R"(,"data_offsets":[0,4]}})", zeros(4)), {"'{'", "whitespace"}});
  v.push_back({"leading-newline", make_safetensors("\n{\"a\":{" + f4 + R"(,"data_offsets":[0,4]}})", zeros(4)), {"'{'", "whitespace"}});
  v.push_back({"duplicate-tensor-key", make_safetensors(R"({"a":{)" + f4 + R"(,"data_offsets":[0,4]},"a":{)" +
                                                            f4 + R"(,"data_offsets":[4,8]}})",
                                                        zeros(8)), {"duplicate"}});
  v.push_back({"duplicate-field-in-entry",
               make_safetensors(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", zeros(4)), {"duplicate"}});
  v.push_back({"duplicate-metadata-key",
               make_safetensors(R"({"__metadata__":{"k":"1","k":"2"},"a":{)" + f4 + R"(,"data_offsets":[0,4]}})",
                                zeros(4)), {"duplicate"}});
  v.push_back({"lowercase-dtype", make_safetensors(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})",
                                                   zeros(4)), {"dtype"}});
  v.push_back({"unknown-dtype", make_safetensors(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})",
                                                 zeros(16)), {"dtype"}});
  v.push_back({"float-in-shape", make_safetensors(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})",
                                                  zeros(4)), {"shape"}});
  v.push_back({"exponent-in-shape", make_safetensors(R"({"a":{"dtype":"U8","shape":[1e1],"data_offsets":[0,10]}})",
                                                     zeros(10)), {"shape"}});
  v.push_back({"negative-shape", make_safetensors(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""), {"shape"}});
  v.push_back({"string-in-shape", make_safetensors(R"({"a":{"dtype":"U8","shape":["4"],"data_offsets":[0,4]}})",
                                                   zeros(4)), {"shape"}});
  v.push_back({"misaligned-f4", make_safetensors(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})",
                                                 zeros(2)), {"byte"}});
  v.push_back({"size-mismatch", make_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
                                                 zeros(4)), {"bytes"}});
  v.push_back({"overflowing-shape",
               make_safetensors(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""), {"overflow"}});
  v.push_back({"overflowing-bits",
               make_safetensors(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""), {"overflow"}});
  v.push_back({"metadata-not-string",
               make_safetensors(R"({"__metadata__":{"k":1},"a":{)" + f4 + R"(,"data_offsets":[0,4]}})", zeros(4)), {"__metadata__"}});
  v.push_back({"metadata-not-object",
               make_safetensors(R"({"__metadata__":"x","a":{)" + f4 + R"(,"data_offsets":[0,4]}})", zeros(4)), {"__metadata__"}});
  v.push_back({"invalid-json", make_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", zeros(4)), {"json"}});
  v.push_back({"invalid-utf8", make_safetensors("{\"a\xff\":{" + f4 + R"(,"data_offsets":[0,4]}})", zeros(4)), {"json", "utf-8", "utf8"}});
  v.push_back({"header-not-object", make_safetensors("[]      ", ""), {"'{'", "object"}});
  v.push_back({"entry-not-object", make_safetensors(R"({"a":[1,2]})", ""), {"object"}});
  v.push_back({"missing-dtype", make_safetensors(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", zeros(4)), {"dtype"}});
  v.push_back({"missing-data-offsets", make_safetensors(R"({"a":{"dtype":"F32","shape":[1]}})", zeros(4)), {"data_offsets"}});
  v.push_back({"three-data-offsets",
               make_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}})", zeros(4)), {"data_offsets"}});
  v.push_back({"negative-data-offset",
               make_safetensors(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[-1,-1]}})", ""), {"data_offsets"}});
  v.push_back({"begin-after-end",
               make_safetensors(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", zeros(4)), {"begin"}});
  v.push_back({"garbage-after-json", make_safetensors(R"({"a":{)" + f4 + R"(,"data_offsets":[0,4]}} x)", zeros(4)), {"json", "trailing"}});
  v.push_back({"nul-padding", make_safetensors(R"({"a":{)" + f4 + R"(,"data_offsets":[0,4]}})" + zeros(3), zeros(4)), {"json", "trailing"}});
  // JSON nested deeper than the reference's 128 levels (serde_json's limit): refused, never a
  // stack overflow -- 129 levels, and 100,000 (a 200 KB header that once crashed the parser).
  const auto nested = [](std::size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  v.push_back({"metadata-nested-129-deep", make_safetensors(R"({"__metadata__":)" + nested(128) + "}", ""), {"128 levels"}});
  v.push_back({"metadata-nested-100000-deep", make_safetensors(R"({"__metadata__":)" + nested(100'000) + "}", ""),
               {"128 levels"}});
  v.push_back({"unknown-field-nested-129-deep",
               make_safetensors(R"({"a":{)" + f4 + R"(,"data_offsets":[0,4],"x":)" + nested(127) + "}}", zeros(4)),
               {"128 levels"}});
  v.push_back({"five-byte-file", std::string("\x05\0\0\0\0", 5), {"8-byte", "too small", "smaller"}});
  v.push_back({"empty-file", "", {"8-byte", "too small", "smaller"}});
  return v;
}

// Runs inspect and get on an invalid file; both must exit 2, name it, and leave nothing.
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool mentions_any(const std::string& text, const std::vector<std::string>& words) {
  const std::string t = lower(text);
  for (const auto& w : words) {
    if (t.find(lower(w)) != std::string::npos) return true;
  }
  return words.empty();
}

void check_refused(const fs::path& file, const std::vector<std::string>& reason, const TempDir& outdir) {
  const std::string path = file.string();
  {
    const std::vector<std::string> args = {"inspect", path};
    INFO(describe(args));
    auto r = run(args);
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find(path) != std::string::npos);
    INFO("the message gives the reason: one of " << Catch::Detail::stringify(reason));
    CHECK(mentions_any(r.err, reason));
  }
  {
    const std::vector<std::string> args = {"inspect", "--json", path};
    INFO(describe(args));
    auto r = run(args);
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
  }
  {
    const auto out = outdir / (file.filename().string() + ".out.safetensors");
    const std::vector<std::string> args = {"get", path, "-o", out.string()};
    INFO(describe(args));
    auto r = run(args);
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(path) != std::string::npos);
    CHECK(!fs::exists(out));
  }
  {
    const auto out = outdir / (file.filename().string() + ".dir");
    const std::vector<std::string> args = {"get", path, "-o", out.string() + "/"};
    INFO(describe(args));
    auto r = run(args);
    CHECK(r.exit_code == 2);
    CHECK(!fs::exists(out));
  }
  CHECK(list_dir(outdir.path()).empty());
  CHECK(temp_files(file.parent_path()).empty());
}

}  // namespace

TEST_CASE("crafted invalid safetensors files are refused with exit 2 by inspect and get", "[cli][invalid]") {
  const auto files = invalid_files();
  REQUIRE(files.size() >= 15);
  for (const auto& c : files) {
    SECTION(c.name) {
      TempDir in, out;
      const auto file = in / (c.name + ".safetensors");
      write_file(file, c.bytes);
      check_refused(file, c.reason, out);
    }
  }
}

TEST_CASE("a directory whose model.safetensors is invalid is refused with exit 2 naming the file",
          "[cli][invalid]") {
  TempDir in, out;
  write_file(in / "model.safetensors", make_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", ""));
  auto r = run({"inspect", in.path().string()});
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find((in / "model.safetensors").string()) != std::string::npos);
  auto g = run({"get", in.path().string(), "-o", (out / "x.safetensors").string()});
  CHECK(g.exit_code == 2);
  CHECK(list_dir(out.path()).empty());
}

TEST_CASE("valid crafted files are accepted: header padded with trailing spaces, scalar, empty tensor, F4",
          "[cli][invalid]") {
  TempDir in, out;
  std::string header = R"({"__metadata__":{"k":"v"},"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
                       R"("e":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]},)"
                       R"("n":{"dtype":"F4","shape":[2,3],"data_offsets":[4,7]},)"
                       R"("z":{"dtype":"U8","shape":[2],"data_offsets":[7,9],"extra":"ignored"}})";
  header += std::string(13, ' ');
  const std::string data = std::string("\x01\x02\x03\x04", 4) + "\x11\x22\x33" + "\xaa\xbb";
  const auto file = in / "padded.safetensors";
  write_file(file, make_safetensors(header, data));

  auto r = run({"inspect", file.string(), "--json"});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc.at("files").at(0).at("header_size").get<std::size_t>() == header.size());
  CHECK(doc.at("tensors").size() == 4);
  CHECK(doc.at("metadata") == json{{"k", "v"}});
  CHECK(doc.at("total_bytes") == 9);
  CHECK(doc.at("total_parameters") == 6 + 2);  // the scalar and the empty tensor are not parameters (Hub rule)

  auto h = run({"inspect", file.string()});
  CHECK(h.exit_code == 0);

  const auto copy = out / "copy.safetensors";
  auto g = run({"get", file.string(), "-o", copy.string()});
  INFO("get stderr: " << g.err);
  REQUIRE(g.exit_code == 0);
  const StFile f = read_safetensors(copy);
  REQUIRE(f.tensors.size() == 4);
  CHECK(f.tensors.at("s").bytes == "\x01\x02\x03\x04");
  CHECK(f.tensors.at("s").shape.empty());
  CHECK(f.tensors.at("e").bytes.empty());
  CHECK(f.tensors.at("e").shape == std::vector<std::uint64_t>{3, 0});
  CHECK(f.tensors.at("n").bytes == "\x11\x22\x33");
  CHECK(f.tensors.at("n").dtype == "F4");
  CHECK(f.tensors.at("z").bytes == "\xaa\xbb");
  REQUIRE(f.metadata.has_value());
  CHECK(f.metadata->at("k") == "v");
}

TEST_CASE("a file with no tensors at all is valid", "[cli][invalid]") {
  TempDir in;
  const auto file = in / "empty.safetensors";
  write_file(file, make_safetensors("{}      ", ""));
  auto r = run({"inspect", file.string(), "--json"});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc.at("tensors").empty());
  CHECK(doc.at("total_parameters") == 0);
  write_file(file, make_safetensors(R"({"__metadata__":null})", ""));
  CHECK(run({"inspect", file.string()}).exit_code == 0);
}

// ---------------------------------------------------------------------------------------
// Bad indexes: built from a copy of the sharded reference checkpoint.

namespace {

struct BadIndex {
  std::string label;
  std::string must_name;  ///< besides the index file, the message must contain this
  // Edits the copied directory (index JSON and shard files).
  std::function<void(json& index, const fs::path& dir)> edit;
  bool write_raw = false;
  std::string raw;  ///< index text when write_raw
  bool names_index = true;  ///< the message must name the index file
};

BadIndex edited(std::string label, std::string must_name,
                std::function<void(json& index, const fs::path& dir)> edit) {
  BadIndex b;
  b.label = std::move(label);
  b.must_name = std::move(must_name);
  b.edit = std::move(edit);
  return b;
}

BadIndex raw_index(std::string label, std::string raw) {
  BadIndex b;
  b.label = std::move(label);
  b.write_raw = true;
  b.raw = std::move(raw);
  return b;
}

std::vector<BadIndex> bad_indexes() {
  const std::string shard1 = "model-00001-of-00003.safetensors";
  const std::string shard2 = "model-00002-of-00003.safetensors";
  std::vector<BadIndex> v;
  v.push_back(edited("missing weight_map", "weight_map", [](json& j, const fs::path&) { j.erase("weight_map"); }));
  v.push_back(edited("weight_map not an object", "weight_map", [](json& j, const fs::path&) { j["weight_map"] = json::array(); }));
  v.push_back(edited("shard name not a string", "lm_head.weight",
               [](json& j, const fs::path&) { j["weight_map"]["lm_head.weight"] = 3; }));
  v.push_back(edited("unsafe shard name ../x.safetensors", "../x.safetensors", [](json& j, const fs::path& dir) {
                 j["weight_map"]["lm_head.weight"] = "../x.safetensors";
                 // Make the escape target exist, so only the name check can refuse it.
                 fs::copy_file(dir / "model-00003-of-00003.safetensors", dir.parent_path() / "x.safetensors",
                               fs::copy_options::overwrite_existing);
               }));
  v.push_back(edited("absolute shard name", "/etc/passwd",
               [](json& j, const fs::path&) { j["weight_map"]["lm_head.weight"] = "/etc/passwd"; }));
  v.push_back(edited("percent-encoded dot-dot shard name", "%2e%2e",
               [](json& j, const fs::path&) { j["weight_map"]["lm_head.weight"] = "%2e%2e/x.safetensors"; }));
  v.push_back(edited("backslash in shard name", "\\",
               [](json& j, const fs::path&) { j["weight_map"]["lm_head.weight"] = "a\\b.safetensors"; }));
  v.push_back(edited("empty shard name", "lm_head.weight",
               [](json& j, const fs::path&) { j["weight_map"]["lm_head.weight"] = ""; }));
  v.push_back(edited("index names a tensor its shard does not hold", "no.such.tensor",
               [shard1](json& j, const fs::path&) { j["weight_map"]["no.such.tensor"] = shard1; }));
  v.push_back(edited("shard holds a tensor the index does not list", "model.norm.weight",
               [](json& j, const fs::path&) { j["weight_map"].erase("model.norm.weight"); }));
  v.push_back(edited("index places a tensor in the wrong shard", "lm_head.weight",
               [shard1](json& j, const fs::path&) { j["weight_map"]["lm_head.weight"] = shard1; }));
  v.push_back(edited("missing shard file", shard2,
               [shard2](json&, const fs::path& dir) { fs::remove(dir / shard2); }));
  v.push_back(edited("shard file is not valid safetensors", shard2, [shard2](json&, const fs::path& dir) {
                 fs::resize_file(dir / shard2, fs::file_size(dir / shard2) - 1);
               }));
  v.back().names_index = false;  // the shard itself is at fault; the message names it
  v.push_back(raw_index("index is not JSON", "{\"weight_map\": {"));
  // Nested deeper than 128 levels (the reference's limit): refused, naming the limit.
  BadIndex deep = raw_index("index nested 100,000 deep",
                            R"({"weight_map":{"lm_head.weight":"model-00003-of-00003.safetensors"},"x":)" +
                                std::string(100'000, '[') + std::string(100'000, ']') + "}");
  deep.must_name = "128 levels";
  v.push_back(std::move(deep));
  v.push_back(raw_index("duplicate key in weight_map",
               R"({"weight_map":{"lm_head.weight":"model-00003-of-00003.safetensors",)"
               R"("lm_head.weight":"model-00003-of-00003.safetensors"}})"));
  return v;
}

}  // namespace

TEST_CASE("bad indexes are refused with exit 2 naming the index and the shard", "[cli][invalid][index]") {
  auto ref = reference_dir();
  if (!ref) return;
  const fs::path src = *ref / "llama-tiny-sharded";
  const json original = json::parse(read_file(src / "model.safetensors.index.json"));
  for (const auto& c : bad_indexes()) {
    SECTION(c.label) {
      TempDir tmp, out;
      const fs::path dir = tmp / "ckpt";
      fs::create_directory(dir);
      for (const auto& e : fs::directory_iterator(src)) {
        if (e.path().extension() == ".safetensors") {
          fs::copy_file(e.path(), dir / e.path().filename());
          fs::permissions(dir / e.path().filename(), fs::perms::owner_read | fs::perms::owner_write,
                          fs::perm_options::add);
        }
      }
      const fs::path index_path = dir / "model.safetensors.index.json";
      if (c.write_raw) {
        write_file(index_path, c.raw);
      } else {
        json index = original;
        c.edit(index, dir);
        write_file(index_path, index.dump(2));
      }
      for (const std::string& location : {dir.string(), index_path.string()}) {
        {
          const std::vector<std::string> args = {"inspect", location};
          INFO(describe(args));
          auto r = run(args);
          INFO("stderr: " << r.err);
          CHECK(r.exit_code == 2);
          CHECK(r.out.empty());
          if (c.names_index) CHECK(r.err.find("model.safetensors.index.json") != std::string::npos);
          if (!c.must_name.empty()) CHECK(r.err.find(c.must_name) != std::string::npos);
        }
        {
          const auto o = out / "out.safetensors";
          const std::vector<std::string> args = {"get", location, "-o", o.string()};
          INFO(describe(args));
          auto r = run(args);
          INFO("stderr: " << r.err);
          CHECK(r.exit_code == 2);
          if (c.names_index) CHECK(r.err.find("model.safetensors.index.json") != std::string::npos);
          if (!c.must_name.empty()) CHECK(r.err.find(c.must_name) != std::string::npos);
          CHECK(list_dir(out.path()).empty());
        }
      }
      CHECK(temp_files(tmp.path()).empty());
    }
  }
}
