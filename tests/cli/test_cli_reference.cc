// SPDX-License-Identifier: Apache-2.0
// `inspect --json` and `get` on the reference checkpoints written by huggingface/safetensors,
// checked against MANIFEST.json (dtypes, shapes, sizes, sha256 of every tensor's bytes).
#include <set>

#include "cli_util.hpp"

using namespace clitest;

namespace {

struct ManifestTensor {
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t nbytes = 0;
  std::string sha256;
  std::string file;  ///< file name (last path segment)
};

struct ManifestFile {
  std::uint64_t header_len = 0;
  std::uint64_t size = 0;
  json metadata;
  std::set<std::string> tensor_names;
};

struct Expected {
  std::map<std::string, ManifestTensor> tensors;
  std::map<std::string, ManifestFile> files;  ///< by file name
};

// Collects the manifest entries of the files under `dir` ("llama-tiny-sharded", ...).
Expected load_manifest(const fs::path& ref, const std::string& dir) {
  const json manifest = json::parse(read_file(ref / "MANIFEST.json"));
  Expected e;
  for (const auto& [key, entry] : manifest.items()) {
    if (!key.starts_with(dir + "/")) continue;
    const std::string file = key.substr(dir.size() + 1);
    ManifestFile mf;
    mf.header_len = entry.at("header_len").get<std::uint64_t>();
    mf.size = entry.at("size").get<std::uint64_t>();
    mf.metadata = entry.at("metadata");
    for (const auto& [name, t] : entry.at("tensors").items()) {
      ManifestTensor mt;
      mt.dtype = t.at("dtype").get<std::string>();
      mt.shape = t.at("shape").get<std::vector<std::uint64_t>>();
      mt.nbytes = t.at("nbytes").get<std::uint64_t>();
      mt.sha256 = t.at("sha256").get<std::string>();
      mt.file = file;
      mf.tensor_names.insert(name);
      REQUIRE(e.tensors.emplace(name, mt).second);
    }
    e.files.emplace(file, std::move(mf));
  }
  REQUIRE(!e.files.empty());
  return e;
}

struct RefCase {
  std::string label;
  std::string manifest_dir;  ///< directory of the files in MANIFEST.json
  std::string location;      ///< relative to the reference dir
  bool sharded = false;
  std::string glob;          ///< a glob for a subset
  std::string glob_prefix;   ///< names it matches are exactly those with this prefix
};

const std::vector<RefCase>& ref_cases() {
  static const std::vector<RefCase> cases = {
      {"llama-tiny-single (directory)", "llama-tiny-single", "llama-tiny-single", false,
       "model.layers.1.*", "model.layers.1."},
      {"llama-tiny-single (file)", "llama-tiny-single", "llama-tiny-single/model.safetensors",
       false, "*.self_attn.q_proj.weight", ""},
      {"llama-tiny-sharded (directory)", "llama-tiny-sharded", "llama-tiny-sharded", true,
       "model.layers.4.*", "model.layers.4."},
      {"llama-tiny-sharded (index path)", "llama-tiny-sharded",
       "llama-tiny-sharded/model.safetensors.index.json", true, "model.layers.2.*",
       "model.layers.2."},
      {"dtypes/model.safetensors", "dtypes", "dtypes/model.safetensors", false, "f*", "f"},
  };
  return cases;
}

bool glob_selects(const RefCase& c, const std::string& name) {
  if (!c.glob_prefix.empty()) return name.starts_with(c.glob_prefix);
  return name.ends_with(".self_attn.q_proj.weight");  // the one suffix glob
}

// Checks every tensor of a file written by `get` against the manifest.
void check_written_tensors(const StFile& f, const Expected& e, const std::set<std::string>& want) {
  std::set<std::string> got;
  for (const auto& [name, t] : f.tensors) got.insert(name);
  CHECK(got == want);
  for (const auto& [name, t] : f.tensors) {
    INFO("tensor " << name);
    auto it = e.tensors.find(name);
    REQUIRE(it != e.tensors.end());
    CHECK(t.dtype == it->second.dtype);
    CHECK(t.shape == it->second.shape);
    CHECK(t.bytes.size() == it->second.nbytes);
    CHECK(sha256_hex(t.bytes) == it->second.sha256);
  }
}

std::map<std::string, std::string> metadata_of(const json& md) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : md.items()) out[k] = v.get<std::string>();
  return out;
}

}  // namespace

TEST_CASE("inspect --json of the reference checkpoints matches MANIFEST.json", "[cli][reference]") {
  auto ref = reference_dir();
  if (!ref) return;
  for (const auto& c : ref_cases()) {
    SECTION(c.label) {
      const Expected e = load_manifest(*ref, c.manifest_dir);
      const std::string location = (*ref / c.location).string();
      const std::vector<std::string> args = {"inspect", location, "--json"};
      INFO(describe(args));
      auto r = run(args);
      INFO("stderr: " << r.err);
      REQUIRE(r.exit_code == 0);
      json doc;
      REQUIRE_NOTHROW(doc = json::parse(r.out));
      REQUIRE(doc.is_object());

      CHECK(doc.at("location") == location);
      CHECK(doc.at("sharded") == c.sharded);

      // files[]: one per safetensors file, sizes and header sizes as in the manifest.
      REQUIRE(doc.at("files").is_array());
      CHECK(doc.at("files").size() == e.files.size());
      std::set<std::string> seen_files;
      for (const auto& f : doc.at("files")) {
        const std::string path = f.at("path").get<std::string>();
        INFO("file " << path);
        auto it = e.files.find(path);
        REQUIRE(it != e.files.end());
        seen_files.insert(path);
        CHECK(f.at("size").get<std::uint64_t>() == it->second.size);
        CHECK(f.at("header_size").get<std::uint64_t>() == it->second.header_len);
        CHECK(f.at("etag").is_null());
        CHECK(fs::file_size(*ref / c.manifest_dir / path) == it->second.size);
      }
      CHECK(seen_files.size() == e.files.size());

      CHECK(doc.at("metadata") == e.files.begin()->second.metadata);

      // tensors[]: every manifest tensor, with its dtype, shape, file and byte length.
      REQUIRE(doc.at("tensors").is_array());
      CHECK(doc.at("tensors").size() == e.tensors.size());
      std::set<std::string> seen;
      std::map<std::string, std::uint64_t> params;
      std::uint64_t total_params = 0, total_bytes = 0;
      for (const auto& t : doc.at("tensors")) {
        const std::string name = t.at("name").get<std::string>();
        INFO("tensor " << name);
        auto it = e.tensors.find(name);
        REQUIRE(it != e.tensors.end());
        CHECK(seen.insert(name).second);
        CHECK(t.at("dtype") == it->second.dtype);
        CHECK(t.at("shape").get<std::vector<std::uint64_t>>() == it->second.shape);
        CHECK(t.at("file") == it->second.file);
        const auto off = t.at("data_offsets").get<std::vector<std::uint64_t>>();
        REQUIRE(off.size() == 2);
        CHECK(off[1] - off[0] == it->second.nbytes);
        const auto& mf = e.files.at(it->second.file);
        CHECK(off[1] <= mf.size - 8 - mf.header_len);
      }
      for (const auto& [name, t] : e.tensors) {
        total_bytes += t.nbytes;
        // Parameters as the Hub counts them: scalars and empty tensors are not listed.
        if (t.shape.empty() || elements(t.shape) == 0) continue;
        params[t.dtype] += elements(t.shape);
        total_params += elements(t.shape);
      }

      // parameters per dtype and the totals agree with the manifest and with each other.
      REQUIRE(doc.at("parameters").is_object());
      std::map<std::string, std::uint64_t> got_params;
      std::uint64_t sum = 0;
      for (const auto& [k, v] : doc.at("parameters").items()) {
        got_params[k] = v.get<std::uint64_t>();
        sum += v.get<std::uint64_t>();
      }
      CHECK(got_params == params);
      CHECK(doc.at("total_parameters").get<std::uint64_t>() == total_params);
      CHECK(sum == total_params);
      CHECK(doc.at("total_bytes").get<std::uint64_t>() == total_bytes);

      if (c.sharded) {
        // The index's own claims (written by transformers) are reported and agree.
        REQUIRE(doc.contains("index_metadata"));
        CHECK(doc.at("index_metadata").at("total_parameters").get<std::uint64_t>() == total_params);
        CHECK(doc.at("index_metadata").at("total_size").get<std::uint64_t>() == total_bytes);
        CHECK(total_params == 412480);
      }
    }
  }
}

TEST_CASE("get of every tensor and of a glob subset writes a valid file whose bytes match MANIFEST sha256",
          "[cli][reference][get]") {
  auto ref = reference_dir();
  if (!ref) return;
  for (const auto& c : ref_cases()) {
    SECTION(c.label) {
      const Expected e = load_manifest(*ref, c.manifest_dir);
      const std::string location = (*ref / c.location).string();
      TempDir tmp;
      std::set<std::string> all, subset;
      for (const auto& [name, t] : e.tensors) {
        all.insert(name);
        if (glob_selects(c, name)) subset.insert(name);
      }
      REQUIRE(!subset.empty());
      REQUIRE(subset.size() < all.size());

      {
        const auto out = tmp / "all.safetensors";
        const std::vector<std::string> args = {"get", location, "-o", out.string()};
        INFO(describe(args));
        auto r = run(args);
        INFO("stderr: " << r.err);
        REQUIRE(r.exit_code == 0);
        CHECK(r.out.empty());
        CHECK(r.err.find("wrote " + std::to_string(all.size()) + " tensors") != std::string::npos);
        const StFile f = read_safetensors(out);
        check_written_tensors(f, e, all);
        REQUIRE(f.metadata.has_value());
        CHECK(*f.metadata == metadata_of(e.files.begin()->second.metadata));
      }
      {
        const auto out = tmp / "subset.safetensors";
        const std::vector<std::string> args = {"get", location, c.glob, "-o", out.string(), "-q"};
        INFO(describe(args));
        auto r = run(args);
        INFO("stderr: " << r.err);
        REQUIRE(r.exit_code == 0);
        CHECK(r.err.empty());  // -q
        check_written_tensors(read_safetensors(out), e, subset);
      }
      CHECK(list_dir(tmp.path()) == std::vector<std::string>{"all.safetensors", "subset.safetensors"});
    }
  }
}

TEST_CASE("get of the dtype zoo by exact names keeps the scalar and the empty tensor",
          "[cli][reference][get]") {
  auto ref = reference_dir();
  if (!ref) return;
  const Expected e = load_manifest(*ref, "dtypes");
  TempDir tmp;
  const auto out = tmp / "few.safetensors";
  auto r = run({"get", (*ref / "dtypes").string(), "scalar", "empty", "bool", "c64", "-o", out.string()});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const StFile f = read_safetensors(out);
  check_written_tensors(f, e, {"scalar", "empty", "bool", "c64"});
  CHECK(f.tensors.at("scalar").shape.empty());
  CHECK(f.tensors.at("empty").bytes.empty());
}

TEST_CASE("get of the sharded reference into a directory writes shards named as the source plus an index",
          "[cli][reference][get][sharded]") {
  auto ref = reference_dir();
  if (!ref) return;
  const Expected e = load_manifest(*ref, "llama-tiny-sharded");
  const json source_index =
      json::parse(read_file(*ref / "llama-tiny-sharded" / "model.safetensors.index.json"));
  TempDir tmp;

  SECTION("every tensor, to a new directory given with a trailing '/'") {
    const auto out = tmp / "out";
    const std::vector<std::string> args = {"get", (*ref / "llama-tiny-sharded").string(), "-o",
                                           out.string() + "/"};
    INFO(describe(args));
    auto r = run(args);
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<std::string> want_files;
    for (const auto& [name, mf] : e.files) want_files.push_back(name);
    want_files.push_back("model.safetensors.index.json");
    std::sort(want_files.begin(), want_files.end());
    CHECK(list_dir(out) == want_files);

    for (const auto& [shard, mf] : e.files) {
      INFO("shard " << shard);
      const StFile f = read_safetensors(out / shard);
      check_written_tensors(f, e, mf.tensor_names);
      REQUIRE(f.metadata.has_value());
      CHECK(*f.metadata == metadata_of(mf.metadata));
    }
    const json index = json::parse(read_file(out / "model.safetensors.index.json"));
    CHECK(index.at("weight_map") == source_index.at("weight_map"));
    CHECK(index.at("metadata").at("total_size") == source_index.at("metadata").at("total_size"));
    if (index.at("metadata").contains("total_parameters")) {
      CHECK(index.at("metadata").at("total_parameters") ==
            source_index.at("metadata").at("total_parameters"));
    }

    // The output directory is itself a valid sharded checkpoint.
    auto again = run({"inspect", out.string(), "--json"});
    INFO("re-inspect stderr: " << again.err);
    REQUIRE(again.exit_code == 0);
    const json doc = json::parse(again.out);
    CHECK(doc.at("sharded") == true);
    CHECK(doc.at("tensors").size() == e.tensors.size());
    CHECK(doc.at("files").size() == e.files.size());
    CHECK(doc.at("total_parameters") == 412480);
    CHECK(temp_files(tmp.path()).empty());

    // And `get` from it reproduces the same bytes.
    const auto merged = tmp / "merged.safetensors";
    auto r2 = run({"get", (out / "model.safetensors.index.json").string(), "-o", merged.string()});
    INFO("get from output stderr: " << r2.err);
    REQUIRE(r2.exit_code == 0);
    std::set<std::string> all;
    for (const auto& [name, t] : e.tensors) all.insert(name);
    check_written_tensors(read_safetensors(merged), e, all);
  }

  SECTION("a subset, to an existing directory without a trailing '/': only the shards involved") {
    const auto out = tmp / "existing";
    fs::create_directory(out);
    const std::vector<std::string> args = {"get",  (*ref / "llama-tiny-sharded").string(),
                                           "model.layers.0.*", "lm_head.weight",
                                           "-o",   out.string()};
    INFO(describe(args));
    auto r = run(args);
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);

    std::set<std::string> want;
    std::map<std::string, std::set<std::string>> by_shard;
    for (const auto& [name, t] : e.tensors) {
      if (name.starts_with("model.layers.0.") || name == "lm_head.weight") {
        want.insert(name);
        by_shard[t.file].insert(name);
      }
    }
    std::vector<std::string> want_files = {"model.safetensors.index.json"};
    for (const auto& [shard, names] : by_shard) want_files.push_back(shard);
    std::sort(want_files.begin(), want_files.end());
    CHECK(list_dir(out) == want_files);
    for (const auto& [shard, names] : by_shard) {
      INFO("shard " << shard);
      check_written_tensors(read_safetensors(out / shard), e, names);
    }
    const json index = json::parse(read_file(out / "model.safetensors.index.json"));
    std::set<std::string> listed;
    for (const auto& [name, shard] : index.at("weight_map").items()) {
      listed.insert(name);
      CHECK(shard.get<std::string>() == e.tensors.at(name).file);
    }
    CHECK(listed == want);
    std::uint64_t bytes = 0;
    for (const auto& n : want) bytes += e.tensors.at(n).nbytes;
    CHECK(index.at("metadata").at("total_size").get<std::uint64_t>() == bytes);

    auto again = run({"inspect", out.string(), "--json"});
    INFO("re-inspect stderr: " << again.err);
    REQUIRE(again.exit_code == 0);
    CHECK(json::parse(again.out).at("tensors").size() == want.size());
  }
}

TEST_CASE("get of a single-file checkpoint into a directory writes a file named as the source and no index",
          "[cli][reference][get]") {
  auto ref = reference_dir();
  if (!ref) return;
  const Expected e = load_manifest(*ref, "llama-tiny-single");
  TempDir tmp;
  const auto out = tmp / "dir";
  auto r = run({"get", (*ref / "llama-tiny-single").string(), "model.norm.weight", "-o", out.string() + "/"});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(list_dir(out) == std::vector<std::string>{"model.safetensors"});
  check_written_tensors(read_safetensors(out / "model.safetensors"), e, {"model.norm.weight"});
}
