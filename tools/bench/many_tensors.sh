#!/usr/bin/env bash
# Benchmark of very many tensors (issue 14, item 6): checkpoints of N tiny F32 tensors made by
# tensorfetch-make-checkpoint --tiny-tensors, then `inspect`, `inspect --json` and `get` of
# every tensor, each timed with GNU time (wall seconds, peak RSS). One line per case, with the
# header size and RSS / header, against the goals: 100,000 tensors: get <= 2 s, inspect <= 1 s;
# 1,000,000 tensors: inspect (also --json) <= 10 s with RSS <= 4 x the header size.
# Usage: tools/bench/many_tensors.sh [BUILD_DIR] [N ...]      (default: build-bench 100000 1000000)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-bench}
shift || true
counts=("$@")
[[ ${#counts[@]} -gt 0 ]] || counts=(100000 1000000)
[[ -x /usr/bin/time ]] || { echo "many_tensors.sh: needs GNU time (apt-get install time)" >&2; exit 1; }
[[ -f $build/build.ninja ]] || meson setup "$build" --buildtype=release -Dtests=false >/dev/null
ninja -C "$build" tools/tensorfetch/tensorfetch tools/gen/tensorfetch-make-checkpoint >/dev/null
tf=$build/tools/tensorfetch/tensorfetch
work=$(mktemp -d /tmp/tf-bench-many-XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "many tensors: $(nproc) cores, build $build ($(meson introspect "$build" --buildoptions 2>/dev/null |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="buildtype"))' 2>/dev/null || echo '?'))"
for n in "${counts[@]}"; do
  dir=$work/n$n
  "$build/tools/gen/tensorfetch-make-checkpoint" -o "$dir" --tiny-tensors "$n" >/dev/null
  file=$dir/model.safetensors
  header=$(python3 -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read(8))[0])' "$file")
  run() {  # NAME GOAL_S GOAL_RSS_RATIO(or -) COMMAND...
    local name=$1 goal_s=$2 goal_ratio=$3
    shift 3
    rm -f "$work/out.safetensors"
    /usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/err" || {
      echo "  n=$n $name: FAILED: $(tail -n 3 "$work/err")"
      return
    }
    read -r secs kb <"$work/time"
    python3 - "$n" "$name" "$secs" "$kb" "$header" "$goal_s" "$goal_ratio" <<'PY'
import sys
n, name, secs, kb, header, goal_s, goal_ratio = sys.argv[1:]
secs, rss, header = float(secs), int(kb) * 1024, int(header)
ratio = rss / header
ok = True
goals = []
if goal_s != "-":
    goals.append(f"<= {goal_s} s")
    ok = ok and secs <= float(goal_s)
if goal_ratio != "-":
    goals.append(f"RSS <= {goal_ratio} x header")
    ok = ok and ratio <= float(goal_ratio)
verdict = ("PASS" if ok else "FAIL") if goals else "(no goal)"
print(f"  n={int(n):>9,} {name:15s} {secs:6.2f} s  peak RSS {rss/1e6:7.1f} MB  header {header/1e6:6.1f} MB"
      f"  RSS/header {ratio:4.2f}  goal {', '.join(goals) or '-'}: {verdict}")
PY
  }
  if [[ $n -le 100000 ]]; then
    run inspect 1 - "$tf" inspect "$file"
    run "inspect --json" - - "$tf" inspect --json "$file"
    run "get (all)" 2 - "$tf" get "$file" -o "$work/out.safetensors" -q
  else
    run inspect 10 4 "$tf" inspect "$file"
    run "inspect --json" 10 4 "$tf" inspect --json "$file"
    run "get (all)" - - "$tf" get "$file" -o "$work/out.safetensors" -q
  fi
  rm -rf "$dir"
done
