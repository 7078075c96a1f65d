// SPDX-License-Identifier: Apache-2.0
// The CLI on remote locations, end to end: `get` and `download` from the in-process Hub-like
// server into a cache of the test's own, `cache ls | verify | rm | prune`, reuse of a Hugging
// Face cache (no transfer, asserted through the server's log), and the progress bar on a
// terminal. The reference sharded checkpoint is the repo served.
#include <sys/stat.h>

#include <cstdlib>
#include <map>

#include "cli_util.hpp"
#include "hub_server.hpp"
#include "served_repo.hpp"

using namespace clitest;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {

constexpr const char* kRepo = "org/llama";


// The reference sharded checkpoint served as org/llama (served_repo.hpp), and its CDN requests.
struct Served : ServedRepo {
  using ServedRepo::ServedRepo;

  std::size_t cdn_requests(const std::string& file) const {
    std::size_t n = 0;
    for (const auto& r : server->log()) n += (r.kind == "cdn" && r.file == file) ? 1 : 0;
    return n;
  }
};

}  // namespace

TEST_CASE("cli get/download from a Hub repo into the cache; cache ls, verify, rm, prune", "[cli][cache]") {
  auto ref = reference_dir();
  if (!ref) return;
  Served s(*ref / "llama-tiny-sharded");

  // A partial get: only some tensors' bytes travel; the output equals a local get.
  const auto get_args = s.with_endpoint({"get", "hf://org/llama", "model.layers.0.*", "-o", (s.work / "part.safetensors").string()});
  auto got = run(get_args);
  INFO(describe(get_args) << "\nstderr: " << got.err);
  REQUIRE(got.exit_code == 0);
  auto local = run({"get", s.reference.string(), "model.layers.0.*", "-o", (s.work / "local.safetensors").string(), "-q"});
  REQUIRE(local.exit_code == 0);
  CHECK(read_file(s.work / "part.safetensors") == read_file(s.work / "local.safetensors"));
  CHECK_THAT(got.err, Catch::Contains("fetched"));

  json ls = cache_ls();
  // Blobs only for the shards holding selected tensors (model.layers.0.* lies in the first).
  REQUIRE(ls.size() == 1);
  std::uint64_t present = 0, size = 0;
  for (const auto& b : ls) {
    CHECK_FALSE(b["complete"].get<bool>());
    CHECK_FALSE(b["in_use"].get<bool>());
    REQUIRE(b["sha256"].is_string());
    // This origin's bytes: SHA256-ORIGINHASH, with the endpoint as origin.
    CHECK(b["id"].get<std::string>().starts_with(b["sha256"].get<std::string>() + "-"));
    CHECK(b["origin"] == s.server->endpoint());
    present += b["present"].get<std::uint64_t>();
  }
  for (const auto& e : fs::directory_iterator(s.reference)) {
    if (e.path().extension() == ".safetensors") size += fs::file_size(e.path());
  }
  CHECK(present < size);

  // download: every file whole, verified, named as in the repo.
  s.server->clear_log();
  // (--coalesce-gap 0: the plan does not join the missing ranges across the bytes already present.)
  const auto dl_args =
      s.with_endpoint({"download", "hf://org/llama", "-o", (s.work / "dl").string(), "--coalesce-gap", "0"});
  auto dl = run(dl_args);
  INFO(describe(dl_args) << "\nstderr: " << dl.err);
  REQUIRE(dl.exit_code == 0);
  for (const auto& e : fs::directory_iterator(s.reference)) {
    const std::string name = e.path().filename().string();
    if (name == "generation_config.json") continue;  // not part of a download
    INFO(name);
    REQUIRE(fs::exists(s.work / "dl" / name));
    CHECK(sha256_hex(read_file(s.work / "dl" / name)) == sha256_hex(read_file(e.path())));
  }
  // The bytes the partial get fetched did not travel again, nor the headers of the other shards
  // (recorded in the snapshot manifest, so this open read none): the CDN moved only the rest.
  std::uint64_t moved = 0, other_headers = 0;
  for (const auto& r : s.server->log()) {
    if (r.kind == "cdn") moved += r.body_bytes;
  }
  for (const auto& e : fs::directory_iterator(s.reference)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".safetensors" || ls[0]["url"].get<std::string>().ends_with(name)) continue;
    const std::string bytes = read_file(e.path());
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
    other_headers += 8 + n;
  }
  CHECK(moved == size - present - other_headers);
  ls = cache_ls();
  REQUIRE(ls.size() == 3);
  for (const auto& b : ls) {
    CHECK(b["complete"].get<bool>());
    CHECK(b["present"] == b["size"]);
    CHECK(b["id"] == b["sha256"]);  // verified whole: readable by every origin
  }
  auto text = run({"cache", "ls"});
  CHECK(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("3 blobs") && Catch::Contains("done"));

  auto verify = run({"cache", "verify"});
  INFO(verify.err);
  CHECK(verify.exit_code == 0);
  for (const auto& b : ls) CHECK_THAT(verify.out, Catch::Contains(b["id"].get<std::string>() + ": ok"));

  // A flipped byte in a complete blob: verify says so (exit 4) and discards the blob's bytes.
  const std::string victim = ls[0]["id"].get<std::string>();
  const fs::path data = s.cache / "blobs" / victim / "data";
  ::chmod(data.c_str(), 0644);
  std::string bytes = read_file(data);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  write_file(data, bytes);
  auto bad = run({"cache", "verify", victim});
  INFO(bad.err);
  CHECK(bad.exit_code == 4);
  CHECK_THAT(bad.err, Catch::Contains("sha256") && Catch::Contains(victim));
  for (const auto& b : cache_ls()) {
    if (b["id"] == victim) {
      CHECK(b["present"] == 0);
      CHECK_FALSE(b["complete"].get<bool>());
    }
  }

  // rm: one blob; an unknown id is an error (exit 1) that names it.
  auto rm = run({"cache", "rm", victim});
  CHECK(rm.exit_code == 0);
  CHECK_FALSE(fs::exists(s.cache / "blobs" / victim));
  auto rm_unknown = run({"cache", "rm", "0123abcd"});
  CHECK(rm_unknown.exit_code == 1);
  CHECK_THAT(rm_unknown.err, Catch::Contains("0123abcd"));

  // prune to 0: everything not in use goes.
  auto prune = run({"cache", "prune", "--max-size", "0"});
  INFO(prune.out << prune.err);
  CHECK(prune.exit_code == 0);
  CHECK_THAT(prune.out, Catch::Contains("removed 2 blobs"));
  CHECK(cache_ls().empty());
  auto prune_bad = run({"cache", "prune", "--max-size", "lots"});
  CHECK(prune_bad.exit_code == 1);
}

TEST_CASE("cli get: a shard the Hugging Face cache holds for the commit is read from there, with no request for it",
          "[cli][hf-cache]") {
  auto ref = reference_dir();
  if (!ref) return;
  Served s(*ref / "llama-tiny-sharded");
  const std::string commit = s.server->commit(kRepo);
  REQUIRE(commit.size() == 40);
  // huggingface_hub's layout: blobs/<sha256> and snapshots/<commit>/<name> -> ../../blobs/<sha256>.
  const std::string shard = "model-00001-of-00003.safetensors";
  const fs::path repo_dir = s.hf_home / "hub" / "models--org--llama";
  const std::string sha = s.server->file_sha256(kRepo, shard);
  fs::create_directories(repo_dir / "blobs");
  fs::create_directories(repo_dir / "snapshots" / commit);
  fs::copy_file(s.reference / shard, repo_dir / "blobs" / sha);
  fs::create_symlink("../../blobs/" + sha, repo_dir / "snapshots" / commit / shard);

  s.server->clear_log();
  const auto args = s.with_endpoint({"download", "hf://org/llama", "-o", (s.work / "dl").string()});
  auto r = run(args);
  INFO(describe(args) << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(s.cdn_requests(shard) == 0);
  for (const auto& rec : s.server->log()) CHECK(rec.file != shard);  // not even resolved
  CHECK(s.cdn_requests("model-00002-of-00003.safetensors") > 0);
  for (const char* name : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors", "model.safetensors.index.json"}) {
    INFO(name);
    CHECK(sha256_hex(read_file(s.work / "dl" / name)) == sha256_hex(read_file(s.reference / name)));
  }
}

TEST_CASE("cli get: a progress bar on a terminal (bytes, percent, rate, files), none when not a terminal or with -q",
          "[cli][progress]") {
  auto ref = reference_dir();
  if (!ref) return;
  if (std::system("command -v script >/dev/null 2>&1") != 0) {
    WARN("util-linux `script` not found: terminal case skipped");
    return;
  }
  Served s(*ref / "llama-tiny-sharded");
  // Through `script`, stderr is a pseudo-terminal.
  const fs::path out = s.work / "tty.txt";
  const std::string cmd = "script -qec '" + tensorfetch_bin() + " get hf://org/llama \"model.layers.*\" -o " +
                          (s.work / "a.safetensors").string() + " --endpoint " + s.server->endpoint() + "' " +
                          out.string() + " >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string tty = read_file(out);
  INFO(tty);
  CHECK_THAT(tty, Catch::Contains("100.0%") && Catch::Contains("files ") && Catch::Contains("/s") &&
                      Catch::Contains("ETA"));
  // Not a terminal: only the one-line summary; -q: nothing at all.
  auto plain = run(s.with_endpoint({"get", "hf://org/llama", "model.norm.weight", "-o", (s.work / "b.safetensors").string()}));
  CHECK(plain.exit_code == 0);
  CHECK_THAT(plain.err, !Catch::Contains("%") && Catch::Contains("wrote 1 tensor"));
  auto quiet = run(s.with_endpoint({"get", "hf://org/llama", "lm_head.weight", "-o", (s.work / "c.safetensors").string(), "-q"}));
  CHECK(quiet.exit_code == 0);
  CHECK(quiet.err.empty());
}

TEST_CASE("cli with HF_HUB_OFFLINE=1: a repo only in the Hugging Face cache opens from its snapshot; otherwise "
          "a clear error; no request either way",
          "[cli][offline]") {
  auto ref = reference_dir();
  if (!ref) return;
  Served s(*ref / "llama-tiny-sharded");
  const std::string commit = s.server->commit(kRepo);
  // Neither cache holds it: a clear error, and the server never hears of it.
  s.env.set("HF_HUB_OFFLINE", "1");
  auto none = run(s.with_endpoint({"inspect", "hf://org/llama"}));
  INFO(none.err);
  CHECK(none.exit_code == 1);
  CHECK_THAT(none.err, Catch::Contains("offline"));
  CHECK(s.server->log().empty());
  // The Hugging Face cache holds the snapshot (as huggingface_hub lays it out: refs/main,
  // snapshots/<commit>/<name> -> ../../blobs/<id>).
  const fs::path repo_dir = s.hf_home / "hub" / "models--org--llama";
  fs::create_directories(repo_dir / "refs");
  write_file(repo_dir / "refs" / "main", commit);
  for (const auto& e : fs::directory_iterator(s.reference)) {
    const std::string name = e.path().filename().string();
    const std::string blob = sha256_hex(read_file(e.path()));
    fs::create_directories(repo_dir / "blobs");
    fs::create_directories(repo_dir / "snapshots" / commit);
    fs::copy_file(e.path(), repo_dir / "blobs" / blob);
    fs::create_symlink("../../blobs/" + blob, repo_dir / "snapshots" / commit / name);
  }
  const auto args = s.with_endpoint({"get", "hf://org/llama", "model.layers.1.*", "-o", (s.work / "off.safetensors").string()});
  auto got = run(args);
  INFO(describe(args) << "\nstderr: " << got.err);
  REQUIRE(got.exit_code == 0);
  auto local = run({"get", s.reference.string(), "model.layers.1.*", "-o", (s.work / "local.safetensors").string(), "-q"});
  REQUIRE(local.exit_code == 0);
  CHECK(read_file(s.work / "off.safetensors") == read_file(s.work / "local.safetensors"));
  auto inspect = run(s.with_endpoint({"inspect", "hf://org/llama@" + commit, "--json"}));
  CHECK(inspect.exit_code == 0);
  CHECK(s.server->log().empty());
  // --offline does the same without the variable.
  s.env.set("HF_HUB_OFFLINE", std::nullopt);
  auto flag = run(s.with_endpoint({"inspect", "hf://org/llama", "--offline"}));
  CHECK(flag.exit_code == 0);
  CHECK(s.server->log().empty());
}
