#!/usr/bin/env bash
# The demo: install what is needed, build, generate a small sharded checkpoint, then
# inspect it and pull a few tensors (and a slice) out of it with `get`.
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
printf '\nA file that breaks the format rules is refused with exit code 2:\n'
printf '\x10\x00\x00\x00\x00\x00\x00\x00 {"a":1}        ' > "$out/bad.safetensors"
set +e
"$tf" inspect "$out/bad.safetensors"
echo "exit code: $?"
