// SPDX-License-Identifier: Apache-2.0
// What a fetch shared among processes (tensorfetch/mpi.hpp) is built on, without MPI, against the
// in-process Hub-like server: a second process opens from the first one's manifest without a
// request; `fetch_ranges` fetches exactly the ranges asked for; `cached` says what a cache holds;
// bytes `read_cached` in one cache, `store`d and `commit_stored` in another, are served there and
// never fetched again; a whole file assembled that way verifies against its sha256.
#include <catch2/catch.hpp>

#include "http_util.hpp"
#include "support/env.hpp"
#include "support/ranges.hpp"
#include "tensorfetch/tensorfetch.hpp"

using namespace hubtest;
using tensorfetch::ByteRange;
using tensorfetch::Checkpoint;
using tensorfetch::FileRanges;
using tensorfetch::OpenOptions;

namespace {

std::string show(const std::vector<ByteRange>& set) {
  std::string out;
  for (const auto& r : set) out += "[" + std::to_string(r.offset) + "," + std::to_string(r.end()) + ")";
  return out;
}

}  // namespace

TEST_CASE("manifest, open_manifest, fetch_ranges, cached, read_cached, store, commit_stored") {
  Fixture f;
  tftest::ScopedEnv env;
  env.set("HF_TOKEN", std::nullopt);
  env.set("HF_HUB_OFFLINE", std::nullopt);
  TempDir tmp;
  OpenOptions a_options, b_options;
  a_options.endpoint = b_options.endpoint = f.server->endpoint();
  a_options.header_window = b_options.header_window = 64;  // headers alone: no data byte on open
  a_options.cache_dir = (tmp / "a").string();
  b_options.cache_dir = (tmp / "b").string();
  // org/pair/model.safetensors: two F32 tensors of 64 KiB each.
  const std::string header = R"({"a":{"dtype":"F32","shape":[16384],"data_offsets":[0,65536]},)"
                             R"("b":{"dtype":"F32","shape":[16384],"data_offsets":[65536,131072]}})";
  const std::string model = tftest::make_safetensors(header, tftest::pattern_bytes(131072, 3));
  tftest::write_file(f.root.path() / "org" / "pair" / "model.safetensors", model);
  const std::string location = "hf://org/pair";

  auto a = Checkpoint::open(location, a_options);
  INFO((a ? std::string() : a.error().message));
  REQUIRE(a);
  auto text = a->manifest();
  REQUIRE(text);
  f.server->clear_log();
  auto b = Checkpoint::open_manifest(location, *text, b_options);
  REQUIRE(b);
  CHECK(f.server->log().empty());  // no request at all
  CHECK(b->requests() == 0);
  REQUIRE(b->files().size() == a->files().size());
  CHECK(b->files()[0].size == a->files()[0].size);
  CHECK(b->tensors().size() == a->tensors().size());
  CHECK(b->cached(0).value().empty());

  const std::uint64_t size = a->files()[0].size;
  const std::uint64_t data = a->header(0)->data_offset();
  const ByteRange first{data, (size - data) / 2};
  const ByteRange second{first.end(), size - first.end()};
  // a fetches exactly the first half of the data.
  const FileRanges want_first[] = {FileRanges{0, {first}}};
  auto fetched = a->fetch_ranges(want_first);
  REQUIRE(fetched);
  CHECK(fetched->bytes_transferred == first.length);
  std::uint64_t moved = 0;
  for (const auto& rec : f.server->take_log()) moved += rec.kind == "cdn" ? rec.body_bytes : 0;
  CHECK(moved == first.length);
  CHECK(show(a->cached(0).value()) == "[0," + std::to_string(first.end()) + ")");  // its header too

  // b receives that half from a (as over MPI): stored, then committed; served; not fetched again.
  std::string bytes(first.length, '\0');
  REQUIRE(a->read_cached(0, first.offset, std::as_writable_bytes(std::span(bytes))));
  CHECK(bytes == model.substr(first.offset, first.length));
  REQUIRE(b->store(0, first.offset, std::as_bytes(std::span(bytes))));
  const ByteRange committed[] = {first};
  REQUIRE(b->commit_stored(0, committed));
  CHECK(show(b->cached(0).value()) == "[0," + std::to_string(first.end()) + ")");
  auto all = b->fetch_all();
  REQUIRE(all);
  CHECK(all->bytes_transferred == second.length);  // only the rest
  CHECK(show(b->cached(0).value()) == "[0," + std::to_string(size) + ")");

  SECTION("bad arguments") {
    std::string out(16, '\0');
    CHECK(a->read_cached(0, second.offset, std::as_writable_bytes(std::span(out))).error().code ==
          tensorfetch::ErrorCode::NotFetched);
    CHECK(a->read_cached(3, 0, {}).error().code == tensorfetch::ErrorCode::InvalidArgument);
    const FileRanges beyond[] = {FileRanges{0, {ByteRange{size - 1, 2}}}};
    CHECK(a->fetch_ranges(beyond).error().code == tensorfetch::ErrorCode::InvalidArgument);
    CHECK(Checkpoint::open_manifest(location, "{", b_options).error().code == tensorfetch::ErrorCode::Io);
    // A manifest (as rank 0 broadcasts it over MPI) nested past 128 levels: refused while
    // parsing, naming the limit; no request is made.
    const auto before = f.server->log().size();
    for (std::size_t levels : {std::size_t{129}, std::size_t{100'000}}) {
      INFO(levels << " levels");
      const std::string deep = R"({"files":[],"x":)" + std::string(levels - 1, '[') + std::string(levels - 1, ']') + "}";
      auto r = Checkpoint::open_manifest(location, deep, b_options);
      REQUIRE(!r);
      CHECK(r.error().code == tensorfetch::ErrorCode::Io);
      CHECK_THAT(r.error().message, Catch::Contains("snapshot manifest") && Catch::Contains("deeper than 128 levels"));
    }
    CHECK(f.server->log().size() == before);
    CHECK(Checkpoint::open_manifest((f.root.path() / "org" / "pair" / "model.safetensors").string(), *text, b_options)
              .error()
              .code == tensorfetch::ErrorCode::InvalidArgument);
  }
}
