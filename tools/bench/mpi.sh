#!/usr/bin/env bash
# Fetch once per cluster over MPI (issue 12, part B): nginx serves a generated Llama-shaped
# checkpoint (~2 GB, 4 shards, GQA) over plain HTTP with `limit_rate` on every connection (the
# origin's cap), and 4 ranks on this machine download it
#   alone      one process (`download`), the reference;
#   4 apart    4 processes at once, each its own cache, without --mpi;
#   4 --mpi    `mpirun -np 4 tensorfetch download --mpi`, each rank its own cache;
#   tp --mpi   `mpirun -np 4 tensorfetch get --tp auto --mpi`;
#   tp apart   `get --tp R/4` for each rank alone (its own cache, --coalesce-gap 0).
# Prints, for each case, the bytes nginx sent (its access log) as a ratio of the checkpoint's
# size (goal with --mpi: 1.00x, against 4x apart), the wall time and its ratio to one rank alone
# (goal: <= 1.3x), and for --tp the bytes each rank moved against what it needs (`inspect --tp 4`,
# goal <= 1.02x) and the bytes each rank received over MPI.
# Usage: tools/bench/mpi.sh [BUILD_DIR] [--layers N] [--rate RATE] [--connections N] [--keep]
#   BUILD_DIR      default build-bench (configured --buildtype=release when missing)
#   --layers N     decoder layers of the checkpoint (default 16: ~2.0 GB at hidden 2048)
#   --rate RATE    nginx limit_rate per connection (default 16m)
#   --connections  data connections of each process (default 8)
# Needs: nginx-light, openmpi-bin, jq; a build with the meson feature mpi; ~12 GB in /tmp.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh
build=build-bench layers=16 rate=16m connections=8 keep=0
while (( $# )); do
  case $1 in
    --layers) layers=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -*) echo "usage: tools/bench/mpi.sh [BUILD_DIR] [--layers N] [--rate RATE] [--connections N] [--keep]" >&2; exit 1 ;;
    *) build=$1; shift ;;
  esac
done
die() { echo "mpi.sh: $*" >&2; exit 1; }
for tool in nginx mpirun jq; do command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || die "$tool not found"; done
[[ -f $build/build.ninja ]] || meson setup "$build" --buildtype=release -Dmpi=enabled >/dev/null
ninja -C "$build" tools/tensorfetch/tensorfetch tools/gen/tensorfetch-make-checkpoint >/dev/null
tf=$PWD/$build/tools/tensorfetch/tensorfetch
"$tf" download --help | grep -q -- --mpi || die "$build has no --mpi (configure it with -Dmpi=enabled)"
"$tf" get x --mpi -o /dev/null 2>&1 | grep -q "built without MPI" && die "$build was built without MPI (-Dmpi=enabled)"
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

work=$(mktemp -d /tmp/tf-bench-mpi-XXXXXX)
nginx_pid=""
cleanup() {
  [[ -n $nginx_pid ]] && kill "$nginx_pid" 2>/dev/null
  if (( keep )); then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
data=$work/data
"$build/tools/gen/tensorfetch-make-checkpoint" -o "$data" --layers "$layers" --hidden 2048 --intermediate 7168 \
  --heads 32 --kv-heads 8 --vocab 32000 --shards 4 >/dev/null
size=$(du -cb "$data"/*.safetensors | tail -n1 | cut -f1)
cat "$data"/* > /dev/null  # into the page cache: nginx serves from memory

ng=$work/nginx
mkdir -p "$ng"
port=$((20000 + RANDOM % 20000))
{
  bench_nginx_conf_head "$ng" mpi.sh 2
  cat <<EOF
  log_format bench '\$status \$body_bytes_sent "\$http_range" "\$request"';
  access_log $ng/access.log bench;
  server { listen 127.0.0.1:$port; root $data; limit_rate $rate; }
}
EOF
} > "$ng/nginx.conf"
"$nginx_bin" -p "$ng" -c nginx.conf -e "$ng/error.log" > "$ng/stdout" 2>&1 &
nginx_pid=$!
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/config.json" && break; sleep 0.05; done
url=http://127.0.0.1:$port/model.safetensors.index.json
mpi=(mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,vader,tcp)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
common=(--connections "$connections" -q)

origin_bytes() { sleep 0.5; awk '{ s += $2 } END { print s + 0 }' "$ng/access.log"; }
reset() { rm -rf "$work/run"; mkdir -p "$work/run"; : > "$ng/access.log"; }
now() { date +%s.%N; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

echo "tools/bench/mpi.sh: $(printf "%'d" "$size") B checkpoint ($layers layers, hidden 2048, GQA 32/8, 4 shards)," \
     "nginx limit_rate $rate per connection, $connections connections per process, 4 ranks, $(nproc) CPUs"

reset; t0=$(now)
"$tf" download "$url" -o "$work/run/out" --cache-dir "$work/run/cache" "${common[@]}"
t_alone=$(awk -v a="$(now)" -v b="$t0" 'BEGIN { print a - b }'); b_alone=$(origin_bytes)
printf "  alone      origin %6sx  wall %6.2f s (1.00x)\n" "$(ratio "$b_alone" "$size")" "$t_alone"

reset; t0=$(now)
"${mpi[@]}" "$tf" download "$url" --mpi -o "$work/run/out{rank}" --cache-dir "$work/run/cache{rank}" \
  --connections "$connections" 2> "$work/mpi.err" || { cat "$work/mpi.err"; die "download --mpi failed"; }
t_mpi=$(awk -v a="$(now)" -v b="$t0" 'BEGIN { print a - b }'); b_mpi=$(origin_bytes)
for r in 0 1 2 3; do
  for f in "$data"/*.safetensors*; do cmp -s "$f" "$work/run/out$r/$(basename "$f")" || die "rank $r: $(basename "$f") differs"; done
done
printf "  4 --mpi    origin %6sx  wall %6.2f s (%sx alone; goals 1.00x and <= 1.3x); every rank's files checked\n" \
  "$(ratio "$b_mpi" "$size")" "$t_mpi" "$(ratio "$t_mpi" "$t_alone")"
sed 's/^/    /' "$work/mpi.err"

reset; t0=$(now)
apart=()
for r in 0 1 2 3; do
  "$tf" download "$url" -o "$work/run/out$r" --cache-dir "$work/run/cache$r" "${common[@]}" &
  apart+=($!)
done
wait "${apart[@]}"
t_apart=$(awk -v a="$(now)" -v b="$t0" 'BEGIN { print a - b }'); b_apart=$(origin_bytes)
printf "  4 apart    origin %6sx  wall %6.2f s (%sx alone)\n" "$(ratio "$b_apart" "$size")" "$t_apart" "$(ratio "$t_apart" "$t_alone")"

# Tensor parallel: what each rank needs, then 4 ranks apart, then under --mpi. (A plain URL's
# open does not read config.json: the Llama convention is given as rules.)
cat > "$work/rules.json" <<'EOF'
{"*.q_proj.weight": {"dim": 0}, "*.k_proj.weight": {"dim": 0}, "*.v_proj.weight": {"dim": 0},
 "*.gate_proj.weight": {"dim": 0}, "*.up_proj.weight": {"dim": 0}, "model.embed_tokens.weight": {"dim": 0},
 "lm_head.weight": {"dim": 0}, "*.o_proj.weight": {"dim": 1}, "*.down_proj.weight": {"dim": 1},
 "*norm.weight": "replicate"}
EOF
"$tf" inspect "$url" --tp 4 --tp-rules "$work/rules.json" --json --cache-dir "$work/inspect" > "$work/inspect.json"
reset; t0=$(now)
for r in 0 1 2 3; do
  : > "$ng/access.log"
  "$tf" get "$url" --tp "$r/4" --tp-rules "$work/rules.json" --coalesce-gap 0 -o "$work/run/alone$r.safetensors" --cache-dir "$work/run/tpc$r" "${common[@]}"
  moved=$(origin_bytes)
  need=$(jq ".tp.ranks[$r].bytes" "$work/inspect.json")
  headers=$(jq '[.files[] | 8 + .header_size] | add' "$work/inspect.json")
  printf "  tp apart   rank %d moved %'15d B, needs %'15d B + headers: %sx (goal <= 1.02x)\n" "$r" "$moved" "$need" \
    "$(ratio "$((moved - headers))" "$need")"
done
: > "$ng/access.log"; t0=$(now)  # (the outputs of the ranks apart are kept, to compare)
"${mpi[@]}" "$tf" get "$url" --mpi --tp auto --tp-rules "$work/rules.json" --coalesce-gap 0 -o "$work/run/tp{rank}.safetensors" \
  --cache-dir "$work/run/tpm{rank}" --connections "$connections" 2> "$work/tp.err" || { cat "$work/tp.err"; die "get --tp auto --mpi failed"; }
t_tp=$(awk -v a="$(now)" -v b="$t0" 'BEGIN { print a - b }'); b_tp=$(origin_bytes)
for r in 0 1 2 3; do cmp -s "$work/run/alone$r.safetensors" "$work/run/tp$r.safetensors" || die "tp rank $r differs"; done
printf "  tp --mpi   origin %6sx  wall %6.2f s; each rank's output equals its get --tp R/4 alone\n" \
  "$(ratio "$b_tp" "$size")" "$t_tp"
sed 's/^/    /' "$work/tp.err"
