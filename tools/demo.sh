#!/usr/bin/env bash
# The demo: install what is needed, build, generate a small sharded checkpoint, then
# inspect it and pull a few tensors (and a slice) out of it with `get`; then serve it with
# the Hub-like test server, inspect it over HTTP from its headers alone, get a few tensors
# from it through the cache, and download it whole.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
[[ -f build-demo/build.ninja ]] || meson setup build-demo --buildtype=release -Dtests=false -Dbench=false >/dev/null
ninja -C build-demo >/dev/null
tf=build-demo/tools/tensorfetch/tensorfetch
model=build-demo/demo-model
out=build-demo/demo-out
rm -rf "$model" "$out"
build-demo/tools/gen/tensorfetch-make-checkpoint -o "$model" --layers 6 --hidden 256 --shards 3

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
step "$tf" inspect "$model"
mkdir -p "$out"
printf '\n\033[1m$ %s\033[0m\n' "$tf inspect $model --json  (first lines)"
"$tf" inspect "$model" --json > "$out/inspect.json"
head -n 20 "$out/inspect.json"; echo "  ..."
step "$tf" get "$model" 'model.layers.2.*' 'lm_head.weight[0:16, :]' -o "$out/subset.safetensors"
step "$tf" inspect "$out/subset.safetensors" --all
step "$tf" get "$model" 'model.layers.[45].mlp.*' -o "$out/sharded/"
step ls -l "$out/sharded"
printf '\nThe same checkpoint served over HTTP by the Hub-like test server (50 ms latency per request),\n'
printf 'inspected from its headers alone as the Hub repo hf://demo/llama-tiny:\n'
mkdir -p "$out/hub/demo"
ln -sfn "$(realpath "$model")" "$out/hub/demo/llama-tiny"
build-demo/tools/hubserver/tensorfetch-test-server --root "$out/hub" --latency-ms 50 \
  --log "$out/hub.log" > "$out/endpoint" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -s $out/endpoint ]] && break; sleep 0.05; done
endpoint=$(head -n1 "$out/endpoint")
step "$tf" inspect hf://demo/llama-tiny --endpoint "$endpoint"
sleep 0.2
echo "requests the server saw: $(wc -l < "$out/hub.log") (3 + 2 per shard; no tensor data moved)"

printf '
Partial load: only the selected tensors (and a slice) travel, as parallel byte ranges, into a
'
printf 'crash-safe cache (here %s); a second run moves no tensor bytes:
' "$out/cache"
export TENSORFETCH_CACHE="$out/cache"
step "$tf" get hf://demo/llama-tiny 'model.layers.3.*' 'lm_head.weight[0:16, :]' -o "$out/remote-subset.safetensors" --endpoint "$endpoint"
step "$tf" get hf://demo/llama-tiny 'model.layers.3.*' 'lm_head.weight[0:16, :]' -o "$out/remote-subset.safetensors" --endpoint "$endpoint"
cmp "$out/remote-subset.safetensors" <("$tf" get "$model" 'model.layers.3.*' 'lm_head.weight[0:16, :]' -o "$out/local-subset.safetensors" -q && cat "$out/local-subset.safetensors") &&
  echo "identical to the same get from the local files"
step "$tf" download hf://demo/llama-tiny -o "$out/download" --endpoint "$endpoint"
step "$tf" cache ls
kill $server 2>/dev/null || true

printf '\nA file that breaks the format rules is refused with exit code 2:\n'
printf '\x10\x00\x00\x00\x00\x00\x00\x00 {"a":1}        ' > "$out/bad.safetensors"
set +e
"$tf" inspect "$out/bad.safetensors"
echo "exit code: $?"
