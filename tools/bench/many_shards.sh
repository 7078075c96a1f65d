#!/usr/bin/env bash
# Benchmark of a 2-tensor `get` from a repo of many shards (issue 14, item 6): wall time, peak RSS,
# requests, and what the get left in the cache (blobs, apparent and on-disk size). The repo is
# generated (python3: N shards of two F32[64] tensors each, plus an index), served by
# tensorfetch-test-server on 127.0.0.1 without latency (512 worker threads: one per open
# connection, so the client's ~128 connections never wait for an idle one to time out), and each
# run starts with an empty cache.
#
# Usage: tools/bench/many_shards.sh [BUILD_DIR] [SHARDS ...]
#   BUILD_DIR  default build (its tensorfetch and tensorfetch-test-server are used)
#   SHARDS     default: 3000 10000
#   TF_BIN=path  another tensorfetch binary to measure (e.g. a build of an older commit)
# Prints one line per shard count:
#   shards=N wall_s=W rss_kb=R requests=Q blobs=B cache_bytes=A cache_disk_kb=D
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shift || true
counts=("$@")
(( ${#counts[@]} )) || counts=(3000 10000)
tf=${TF_BIN:-$build/tools/tensorfetch/tensorfetch}
server_bin=$build/tools/hubserver/tensorfetch-test-server
[[ -x $tf && -x $server_bin ]] || { echo "many_shards: build $build first (ninja -C $build)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/tf-many-shards-XXXXXX)
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

for n in "${counts[@]}"; do
  repo=$tmp/root-$n/org/many
  /usr/bin/python3 - "$repo" "$n" <<'PY'
import json, os, struct, sys
repo, n = sys.argv[1], int(sys.argv[2])
os.makedirs(repo, exist_ok=True)
weight_map = {}
for i in range(n):
    name = "model-%05d-of-%05d.safetensors" % (i + 1, n)
    header = {"layers.%d.a" % i: {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]},
              "layers.%d.b" % i: {"dtype": "F32", "shape": [64], "data_offsets": [256, 512]}}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(repo, name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes((k * 31 + i) & 255 for k in range(512)))
    weight_map["layers.%d.a" % i] = name
    weight_map["layers.%d.b" % i] = name
with open(os.path.join(repo, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": 512 * n}, "weight_map": weight_map}, f)
PY
  "$server_bin" --root "$tmp/root-$n" --port 0 --threads 512 --log "$tmp/log-$n.jsonl" >"$tmp/endpoint" 2>"$tmp/server.err" &
  server_pid=$!
  for _ in $(seq 100); do [[ -s $tmp/endpoint ]] && break; sleep 0.05; done
  ep=$(head -1 "$tmp/endpoint")
  cache=$tmp/cache-$n
  start=$(date +%s.%N)
  TENSORFETCH_CACHE=$cache HF_HOME=$tmp/hf-home HF_HUB_OFFLINE=0 /usr/bin/time -f '%M' -o "$tmp/rss" \
    "$tf" get hf://org/many "layers.7.a" "layers.$((n - 5)).b" -o "$tmp/out-$n.safetensors" --endpoint "$ep" -q
  end=$(date +%s.%N)
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
  blobs=$(find "$cache/blobs" -mindepth 1 -maxdepth 1 | wc -l)
  printf 'shards=%d wall_s=%.2f rss_kb=%d requests=%d blobs=%d cache_bytes=%d cache_disk_kb=%d\n' \
    "$n" "$(echo "$end - $start" | bc)" "$(tail -1 "$tmp/rss")" "$(wc -l <"$tmp/log-$n.jsonl")" "$blobs" \
    "$(du -sb "$cache" | cut -f1)" "$(du -sk "$cache" | cut -f1)"
  [[ -n ${KEEP_LOG:-} ]] && cp "$tmp/log-$n.jsonl" "$KEEP_LOG"
  rm -rf "$tmp/root-$n" "$cache"
done
