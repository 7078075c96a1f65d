#!/usr/bin/env bash
# Benchmark of remote inspect (issue 3): a generated 30-shard repo (and a single-file one) served
# by the Hub-like test server with 50 ms latency per request; `tensorfetch inspect`, cold (there
# is no cache to warm). Prints wall time, round trips and requests, read from the server's log,
# against the goals: <= 3 round trips sharded, <= 2 single-file, <= 2 requests per shard + 3.
# Usage: tools/bench/remote_inspect.sh [BUILD_DIR] [SHARDS] [LATENCY_MS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-bench}
shards=${2:-30}
latency=${3:-50}
runs=${4:-5}
source tools/bench/bench_lib.sh
bench_build "$build"
bench_workdir remote
"$gen" -o "$work/root/bench/sharded" --layers 60 --hidden 64 --vocab 256 --shards "$shards" >/dev/null
"$gen" -o "$work/root/bench/single" --layers 4 --hidden 64 --vocab 256 --shards 1 >/dev/null
bench_start_server --latency-ms "$latency"

measure() {  # REPO GOAL_ROUND_TRIPS GOAL_REQUESTS
  local repo=$1 goal_rt=$2 goal_req=$3 best=""
  for run in $(seq "$runs"); do
    : > "$work/log.jsonl"
    local start end
    start=$(date +%s.%N)
    "$tf" inspect "hf://bench/$repo" --endpoint "$endpoint" > /dev/null
    end=$(date +%s.%N)
    sleep 0.2  # let the last log lines land
    python3 - "$work/log.jsonl" "$start" "$end" "$repo" "$run" "$goal_rt" "$goal_req" "$latency" <<'PY'
import json, sys
path, start, end, repo, run, goal_rt, goal_req, latency = sys.argv[1:]
rows = {}
for line in open(path):
    r = json.loads(line)
    rows[r["seq"]] = r  # the last line for a seq wins
rows = sorted(rows.values(), key=lambda r: r["start_ms"])
# Round trips: the longest chain of requests each starting after the previous one ended.
chain = {}
for r in rows:
    chain[r["seq"]] = 1 + max([chain[p["seq"]] for p in rows if p["end_ms"] <= r["start_ms"]] or [0])
rt = max(chain.values())
span = (max(r["end_ms"] for r in rows) - min(r["start_ms"] for r in rows)) / 1000
wall = float(end) - float(start)
ok = rt <= int(goal_rt) and len(rows) <= int(goal_req)
print(f"  {repo:8s} run {run}: wall {wall*1000:6.0f} ms (requests span {span*1000:5.0f} ms = "
      f"{span*1000/int(latency):4.1f} x latency), round trips {rt} (goal <= {goal_rt}), "
      f"requests {len(rows)} (goal <= {goal_req}), resolve {sum(r['kind']=='resolve' for r in rows)}, "
      f"cdn {sum(r['kind']=='cdn' for r in rows)}: {'PASS' if ok else 'FAIL'}")
PY
  done
}
echo "remote inspect, ${latency} ms latency per request, $runs runs each (endpoint $endpoint)"
measure sharded 3 $((2 * shards + 3))
measure single 2 5
echo "for scale (issue 3): huggingface_hub ~10 round trips / 63 requests, huggingface.js ~26 / 126 for 30 shards"
