// SPDX-License-Identifier: Apache-2.0
// The plan of a fetch over MPI (lib/cluster/plan.h), by table: who fetches which chunk from the
// origin, who passes on what it holds, and which bytes each other rank receives (a broadcast only
// when every other rank wants the same); and its helpers clip and group.
#include <catch2/catch.hpp>

#include <sstream>

#include "cluster/plan.h"

using tensorfetch::ByteRange;
using tensorfetch::cluster::ClusterChunk;
using tensorfetch::cluster::RankState;
using Set = std::vector<ByteRange>;

namespace {

std::string show(const Set& s) {
  std::ostringstream o;
  for (const auto& r : s) o << "[" << r.offset << "," << r.end() << ")";
  return o.str();
}

// One chunk as text: "f0 [a,b) owner 1 origin -> 0:[a,b) 2:[c,d)" (a broadcast: "* -> 0,2:[a,b)").
std::string show(const ClusterChunk& c) {
  std::ostringstream o;
  o << "f" << c.file << " [" << c.range.offset << "," << c.range.end() << ") owner " << c.owner
    << (c.from_origin ? " origin" : " cache") << " ->";
  for (const auto& d : c.deliveries) {
    o << " ";
    for (std::size_t i = 0; i < d.ranks.size(); ++i) o << (i ? "," : "") << d.ranks[i];
    o << ":" << show(d.ranges);
  }
  return o.str();
}

RankState rank(Set need, Set held = {}) { return RankState{{std::move(need)}, {std::move(held)}}; }

}  // namespace

TEST_CASE("plan_cluster: chunks, owners and deliveries") {
  struct Row {
    const char* name;
    std::vector<RankState> ranks;
    std::uint64_t max_chunk;
    std::vector<std::string> expected;
  };
  const std::vector<Row> rows = {
      {"two ranks want it all: halves from the origin, each to the other",
       {rank({{0, 100}}), rank({{0, 100}})},
       50,
       {"f0 [0,50) owner 0 origin -> 1:[0,50)", "f0 [50,100) owner 1 origin -> 0:[50,100)"}},
      {"three ranks want it all: broadcasts",
       {rank({{0, 90}}), rank({{0, 90}}), rank({{0, 90}})},
       30,
       {"f0 [0,30) owner 0 origin -> 1,2:[0,30)", "f0 [30,60) owner 1 origin -> 0,2:[30,60)",
        "f0 [60,90) owner 2 origin -> 0,1:[60,90)"}},
      {"a rank's cache holds a part: it passes that on, the rest comes from the origin",
       {rank({{0, 90}}), rank({{0, 90}}), rank({{30, 60}}, {{0, 30}})},
       30,
       {"f0 [0,30) owner 2 cache -> 0,1:[0,30)", "f0 [30,60) owner 0 origin -> 1,2:[30,60)",
        "f0 [60,90) owner 1 origin -> 0,2:[60,90)"}},
      {"slices: each rank receives only its own bytes, point-to-point",
       {rank({{0, 10}, {20, 10}}), rank({{10, 10}, {30, 10}})},
       100,
       {"f0 [0,40) owner 0 origin -> 1:[10,20)[30,40)"}},
      {"a rank wanting nothing may still fetch for the others",
       {rank({{0, 60}}), rank({})},
       30,
       {"f0 [0,30) owner 0 origin ->", "f0 [30,60) owner 1 origin -> 0:[30,60)"}},
      {"nothing wanted: no chunk", {rank({}, {{0, 50}}), rank({})}, 30, {}},
      {"uneven cut: equal pieces", {rank({{0, 100}})}, 40, {"f0 [0,33) owner 0 origin ->", "f0 [33,66) owner 0 origin ->", "f0 [66,100) owner 0 origin ->"}},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    const auto plan = tensorfetch::cluster::plan_cluster(row.ranks, 1, row.max_chunk);
    std::vector<std::string> got;
    for (const auto& c : plan) got.push_back(show(c));
    CHECK(got == row.expected);
  }
}

TEST_CASE("plan_cluster: every wanted byte is planned once, every rank gets exactly what it lacks") {
  // 5 ranks, 2 files, needs and holdings from a fixed pattern.
  std::vector<RankState> ranks(5);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ranks[r].need.resize(2);
    ranks[r].held.resize(2);
    for (std::uint64_t k = 0; k < 20; ++k) {
      const std::uint64_t at = k * 100;
      if ((k + r) % 3 != 0) ranks[r].need[k % 2].push_back({at, 60});
      else ranks[r].held[k % 2].push_back({at, 100});
    }
  }
  const auto plan = tensorfetch::cluster::plan_cluster(ranks, 2, 64);
  for (std::size_t file = 0; file < 2; ++file) {
    std::vector<Set> received(ranks.size());
    Set planned;
    for (const auto& c : plan) {
      if (c.file != file) continue;
      planned.push_back(c.range);
      if (!c.from_origin) CHECK(tensorfetch::detail::covers(ranks[c.owner].held[file], c.range));
      for (const auto& d : c.deliveries) {
        for (auto to : d.ranks) received[to].insert(received[to].end(), d.ranges.begin(), d.ranges.end());
      }
    }
    Set all;
    for (const auto& r : ranks) all.insert(all.end(), r.need[file].begin(), r.need[file].end());
    CHECK(tensorfetch::detail::total_bytes(planned) == tensorfetch::detail::total_bytes(tensorfetch::detail::normalize(all)));
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      INFO("rank " << r << " file " << file);
      // What it lacks, minus what it fetched itself from the origin, is what it received.
      Set own;
      for (const auto& c : plan) {
        if (c.file == file && c.owner == r) own.push_back(c.range);
      }
      const auto expected = tensorfetch::detail::subtract(ranks[r].need[file], tensorfetch::detail::normalize(own));
      CHECK(show(tensorfetch::detail::normalize(received[r])) == show(expected));
    }
  }
}

TEST_CASE("clip and group") {
  const Set set = {{0, 10}, {20, 10}, {40, 10}};
  CHECK(show(tensorfetch::cluster::clip(set, {5, 20})) == "[5,10)[20,25)");
  CHECK(show(tensorfetch::cluster::clip(set, {10, 10})) == "");
  CHECK(show(tensorfetch::cluster::clip(set, {0, 100})) == show(set));
  const auto groups = tensorfetch::cluster::group(set, 15);
  REQUIRE(groups.size() == 2);
  CHECK(show(groups[0]) == "[0,10)[20,25)");
  CHECK(show(groups[1]) == "[25,30)[40,50)");
}
