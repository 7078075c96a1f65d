#!/usr/bin/env bash
# Bytes each tensor-parallel rank moves (issue 12, part A): a generated Llama-shaped checkpoint
# (GQA, MLP 3.5 x hidden) served by the Hub-like test server; `tensorfetch get --tp R/N` for every
# rank, each with a fresh cache, with the default --coalesce-gap (1 MiB, within the default
# --coalesce-overfetch of 1%) and with 0. Prints, per rank, the tensor-data bytes moved (from the
# server's log, headers left out) against what the rank needs (`inspect --tp N --json`), the ratio (goal: <= 1.02), and the requests sent.
# Usage: tools/bench/tp_bytes.sh [BUILD_DIR] [WORLD] [LAYERS] [HIDDEN]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-bench}
world=${2:-4}
layers=${3:-4}
hidden=${4:-1024}
source tools/bench/bench_lib.sh
bench_build "$build"
bench_workdir tp
"$gen" -o "$work/root/bench/llama" --layers "$layers" --hidden "$hidden" \
  --intermediate $((hidden * 7 / 2)) --heads $((hidden / 64)) --kv-heads $((hidden / 256)) --vocab 32000 \
  --shards 2 >/dev/null
bench_start_server

"$tf" inspect hf://bench/llama --tp "$world" --json --endpoint "$endpoint" --cache-dir "$work/c-inspect" \
  > "$work/inspect.json"
echo "get --tp R/$world of a Llama-shaped checkpoint ($layers layers, hidden $hidden, GQA), test server on loopback"
for gap in 1MiB 0; do
  for rank in $(seq 0 $((world - 1))); do
    : > "$work/log.jsonl"
    start=$(date +%s.%N)
    "$tf" get hf://bench/llama --tp "$rank/$world" --endpoint "$endpoint" --cache-dir "$work/c-$gap-$rank" \
      --coalesce-gap "$gap" -q -o "$work/out.safetensors"
    end=$(date +%s.%N)
    sleep 0.2  # let the last log lines land
    python3 - "$work/log.jsonl" "$work/inspect.json" "$rank" "$gap" "$start" "$end" <<'PY'
import json, sys
log, inspect, rank, gap, start, end = sys.argv[1:]
info = json.load(open(inspect))
need = info["tp"]["ranks"][int(rank)]["bytes"]
data_start = {f["path"]: 8 + f["header_size"] for f in info["files"]}
rows = {}
for line in open(log):
    r = json.loads(line)
    rows[r["seq"]] = r
moved = 0
for r in rows.values():
    if r["kind"] != "cdn" or r["status"] != 206 or not r["range"].startswith("bytes="):
        continue
    a, b = (int(x) for x in r["range"][6:].split("-"))
    moved += max(0, b + 1 - max(a, data_start[r["file"]]))
ratio = moved / need if need else 0
print(f"  coalesce-gap {gap:>4s} rank {rank}: moved {moved:>11,} B, needs {need:>11,} B, ratio {ratio:5.3f} "
      f"({'PASS' if ratio <= 1.02 else 'over'} goal <= 1.02), {len(rows):>6} requests, "
      f"{float(end) - float(start):6.2f} s")
PY
  done
done
