// SPDX-License-Identifier: Apache-2.0
// The mount's C entry points (tf_mount_start, tf_mount_get_stats, tf_mount_stop, tf_unmount;
// libtensorfetch_mount over libtensorfetch), as a download manager or loader written in C uses
// them: a checkpoint tf_open made, mounted on a directory served by threads of the library;
// reads through the kernel give the source's bytes (a Hub repo of the in-process test server:
// every file of the commit, only the tensors read fetched); tf_mount_stop unmounts; failures
// are codes with messages and the checkpoint is taken in every case. FUSE needs /dev/fuse (root
// here): a test that cannot mount FAILS, saying why.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "capi_util.hpp"
#include "hub_server.hpp"

using namespace capitest;

namespace {

bool is_mounted(const fs::path& dir) {
  struct stat a {}, b {};
  if (::stat(dir.c_str(), &a) != 0 || ::stat(dir.parent_path().c_str(), &b) != 0) return false;
  return a.st_dev != b.st_dev;
}

struct Lines {
  std::mutex mutex;
  std::vector<std::string> lines;
};

void collect(void* user, const char* line) {
  auto* l = static_cast<Lines*>(user);
  std::lock_guard lock(l->mutex);
  l->lines.emplace_back(line);
}

}  // namespace

TEST_CASE("C API mount: a Hub repo mounted by tf_mount_start reads as the source, every file listed; "
          "tf_mount_stop unmounts and logs the totals",
          "[capi][mount]") {
  ServerFixture fx("tf-capi-mount");
  const fs::path repo = fx.tmp / "root" / "org" / "llama";
  fs::create_directories(repo);
  const fs::path source = reference() / "llama-tiny-sharded";
  for (const auto& e : fs::directory_iterator(source)) fs::copy_file(e.path(), repo / e.path().filename());
  tftest::write_file(repo / "tokenizer.json", "{\"model\": {\"vocab\": {\"a\": 0}}}\n");
  tensorfetch::testing::Options so;
  so.root = fx.tmp / "root";
  fx.start(so);
  Checkpoint opened = fx.open("hf://org/llama", "cache");
  const fs::path dir = fx.tmp / "mnt";
  fs::create_directories(dir);

  Lines log;
  tf_mount_options mo;
  tf_mount_options_init(&mo);
  mo.log = collect;
  mo.log_user = &log;
  tf_checkpoint* ckpt = opened.release();
  tf_mount* mount = nullptr;
  Error err;
  CHECK_CODE(tf_mount_start(&ckpt, dir.c_str(), &mo, &mount, err.out()), TF_OK, err);
  REQUIRE(mount != nullptr);
  CHECK(ckpt == nullptr);  // taken
  REQUIRE(is_mounted(dir));

  fx.server->clear_log();
  std::map<std::string, std::uint64_t> listed, want;
  for (const auto& e : fs::directory_iterator(dir)) listed[e.path().filename().string()] = e.file_size();
  for (const auto& e : fs::directory_iterator(repo)) want[e.path().filename().string()] = e.file_size();
  CHECK(listed == want);
  CHECK(fx.server->log().empty());  // listing and stat: no request

  const std::string shard = "model-00002-of-00003.safetensors";
  CHECK(tftest::read_file(dir / shard) == tftest::read_file(source / shard));
  CHECK(tftest::read_file(dir / "tokenizer.json") == tftest::read_file(repo / "tokenizer.json"));
  for (const auto& r : fx.server->log()) CHECK((r.file == shard || r.file == "tokenizer.json"));

  tf_mount_stats stats;
  tf_mount_stats_init(&stats);
  tf_mount_get_stats(mount, &stats);
  CHECK(stats.reads > 0);
  CHECK(stats.bytes_read >= tftest::read_file(source / shard).size());
  CHECK(stats.bytes_fetched > 0);
  CHECK(stats.read_errors == 0);
  // A caller built against an older header (a smaller struct) gets the fields it knows only.
  struct {
    tf_mount_stats head;
    std::uint64_t guard;
  } older{};
  older.head.size = offsetof(tf_mount_stats, bytes_read);
  older.guard = 0x5a5a;
  older.head.bytes_read = 77;
  tf_mount_get_stats(mount, &older.head);
  CHECK(older.head.reads == stats.reads);
  CHECK(older.head.bytes_read == 77);
  CHECK(older.guard == 0x5a5a);

  CHECK_CODE(tf_mount_stop(mount, err.out()), TF_OK, err);
  CHECK_FALSE(is_mounted(dir));
  std::lock_guard lock(log.mutex);
  REQUIRE_FALSE(log.lines.empty());
  CHECK_THAT(log.lines.back(), Catch::Contains("bytes fetched in"));
}

TEST_CASE("C API mount: failures are codes with messages; the checkpoint is taken in every case; tf_unmount",
          "[capi][mount]") {
  const fs::path single = reference() / "llama-tiny-single";
  tftest::TempDir tmp("tf-capi-mount-errors");
  Error err;
  tf_mount* mount = nullptr;
  {
    tf_checkpoint* ckpt = open_ok(single.string()).release();
    const fs::path file = single / "model.safetensors";
    CHECK_CODE(tf_mount_start(&ckpt, file.c_str(), nullptr, &mount, err.out()), TF_ERR_INVALID_ARGUMENT, err);
    CHECK_THAT(err.message(), Catch::Contains("not a directory"));
    CHECK(ckpt == nullptr);
    CHECK(mount == nullptr);
  }
  CHECK_CODE(tf_mount_start(nullptr, tmp.path().c_str(), nullptr, &mount, err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_CODE(tf_mount_stop(nullptr, err.out()), TF_OK, err);
  CHECK_CODE(tf_unmount(tmp.path().c_str(), err.out()), TF_ERR_INVALID_ARGUMENT, err);
  CHECK_THAT(err.message(), Catch::Contains("not a mount point"));

  // A local checkpoint mounted with default options, ended by tf_unmount from outside (as
  // `tensorfetch unmount` would): tf_mount_stop then finds it ended and succeeds.
  const fs::path dir = tmp.path() / "mnt";
  fs::create_directories(dir);
  tf_checkpoint* ckpt = open_ok(single.string()).release();
  CHECK_CODE(tf_mount_start(&ckpt, dir.c_str(), nullptr, &mount, err.out()), TF_OK, err);
  REQUIRE(is_mounted(dir));
  CHECK(tftest::read_file(dir / "model.safetensors") == tftest::read_file(single / "model.safetensors"));
  CHECK_CODE(tf_unmount(dir.c_str(), err.out()), TF_OK, err);
  CHECK_CODE(tf_mount_stop(mount, err.out()), TF_OK, err);
  CHECK_FALSE(is_mounted(dir));
}
