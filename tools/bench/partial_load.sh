#!/usr/bin/env bash
# Benchmark of the parallel partial load: tensorfetch `download` and `get` against curl, aria2c
# and a local dd copy. A generated Llama-shaped sharded checkpoint (default ~3 GB in ~500 MB
# shards, generated once into BUILD_DIR/bench-data and reused) is served over plain HTTP on
# 127.0.0.1 by nginx (sendfile, keep-alive) from a generated config in a temp dir, on two ports:
# one unthrottled, one with `limit_rate 50m` like a CDN edge. nginx's limit_rate applies per
# request (so per connection at a time): a client with 16 connections can get 16 x the cap, and
# 16 x 50 MiB/s is more than a 2-CPU loopback moves, so there the cap only binds single-connection
# clients (curl); --rate 5m makes it bind aria2c and tensorfetch too (16 x 5 MiB/s = 84 MB/s).
#
# For each server, best of R runs (interleaved: each round runs every case, alternating forward
# and reverse order; the checkpoint is read into the page cache first, so the disk is out of it):
#   curl -o              one shard
#   aria2c -x16 -s16 -k1M  the same shard
#   tensorfetch download the same shard URL, and the whole checkpoint (index URL)  -o DIR
#   tensorfetch get      the index URL, 'model.layers.0.*' 'model.layers.7.*' -o OUT.safetensors
# plus a local `dd bs=4M` copy of the shard (server-independent; once more with conv=fsync, for
# context). The build is of the working tree as it is (ninja is run first). Every
# tensorfetch run gets a fresh empty cache (TENSORFETCH_CACHE) and --quiet. Each run is timed with
# /usr/bin/time -v (peak RSS) and its output checked (cmp against the source, or against a local
# `tensorfetch get` of the same selection). The bytes the partial get moved are the sum of nginx's
# $body_bytes_sent over that run's requests, against the selected tensors' bytes + the headers
# (from `tensorfetch inspect URL --json`). A command that fails is reported as n/a with its error.
#
# Usage: tools/bench/partial_load.sh [BUILD_DIR] [--size-mb MB] [--shards N] [--runs R]
#                                    [--rate RATE] [--connections N] [--keep]
#   BUILD_DIR      default build-bench-release (meson setup --buildtype=release if missing)
#   --size-mb MB   checkpoint size, decimal MB (env SIZE_MB, default 3000)
#   --shards N     shard count (env SHARDS, default about one per 500 MB, at least 2)
#   --runs R       runs per case, best kept (env RUNS, default 3)
#   --rate RATE    nginx limit_rate of the capped server (env RATE, default 50m = 50 MiB/s)
#   --connections N  passed to `tensorfetch download` (env CONNECTIONS; default: its own)
#   --keep         keep the temp dir (nginx config and logs) and print its path
# Needs: nginx, aria2c, curl, GNU time, jq (or python3): tools/install-deps.sh --bench
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh

build='build-bench-release'
size_mb=${SIZE_MB:-3000}
shards=${SHARDS:-}
runs=${RUNS:-3}
rate=${RATE:-50m}
connections=${CONNECTIONS:-}
keep=0
hidden=1536    # Llama-shaped: 32 * hidden^2 bytes per BF16 layer (75.5 MB)
vocab=32000
usage() { sed -n '/^# Usage:/,/^# Needs:/s/^# \{0,1\}//p' "$0"; }
die() { echo "partial_load: $*" >&2; exit 1; }
while (( $# )); do
  case $1 in
    --size-mb) size_mb=${2:?--size-mb needs a value}; shift 2 ;;
    --shards) shards=${2:?--shards needs a value}; shift 2 ;;
    --runs) runs=${2:?--runs needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --connections) connections=${2:?--connections needs a value}; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 1 ;;
    *) build=$1; shift ;;
  esac
done
[[ $size_mb =~ ^[0-9]+$ && $runs =~ ^[1-9][0-9]*$ ]] || die "--size-mb and --runs take positive integers"
[[ -z $shards || $shards =~ ^[1-9][0-9]*$ ]] || die "--shards takes a positive integer"

for tool in nginx aria2c curl dd; do
  command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] ||
    die "$tool not found: run tools/install-deps.sh --bench"
done
[[ -x /usr/bin/time ]] || die "/usr/bin/time (GNU time) not found: run tools/install-deps.sh --bench"
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
if command -v jq >/dev/null; then json=jq
elif command -v python3 >/dev/null; then json=python3
else die "jq not found (nor python3): run tools/install-deps.sh --bench"; fi

# --- build -------------------------------------------------------------------------------------
tf=$build/tools/tensorfetch/tensorfetch
gen=$build/tools/gen/tensorfetch-make-checkpoint
mkdir -p "$build/bench-data"
build_note=""
if [[ ! -f $build/build.ninja ]]; then
  echo "partial_load: meson setup $build --buildtype=release" >&2
  meson setup "$build" --buildtype=release > "$build/bench-data/setup.log" 2>&1 ||
    { tail -n 20 "$build/bench-data/setup.log" >&2; die "meson setup $build failed"; }
fi
if ! ninja -C "$build" tools/tensorfetch/tensorfetch tools/gen/tensorfetch-make-checkpoint \
    > "$build/bench-data/ninja.log" 2>&1; then
  build_note=" (STALE: ninja failed, see $build/bench-data/ninja.log)"
  echo "partial_load: warning: ninja -C $build failed; using the binaries already there" >&2
fi
[[ -x $tf ]] || die "no tensorfetch binary at $tf (build log: $build/bench-data/ninja.log)"
[[ -x $gen ]] || die "no tensorfetch-make-checkpoint at $gen (see $build/bench-data/ninja.log)"
tf=$(realpath "$tf")
buildtype=$(grep -o '"name": "buildtype", "value": "[a-z]*"' "$build/meson-info/intro-buildoptions.json" 2>/dev/null |
  sed 's/.*"\([a-z]*\)"$/\1/' || true)

# --- checkpoint (generated once, reused) ----------------------------------------------------------
layer_bytes=$((32 * hidden * hidden))
embed_bytes=$((2 * 2 * vocab * hidden))
layers=$(( (size_mb * 1000000 - embed_bytes + layer_bytes / 2) / layer_bytes ))
(( layers >= 8 )) || layers=8                     # the partial get selects layers 0 and 7
[[ -n $shards ]] || shards=$(( (size_mb + 250) / 500 ))
(( shards >= 2 )) || shards=2
data=$(realpath "$build/bench-data")/partial-load-l${layers}-h${hidden}-v${vocab}-s${shards}
if [[ ! -d $data ]]; then
  need_kb=$(( (layers * layer_bytes + embed_bytes) / 1024 ))
  avail_kb=$(df -Pk "$build/bench-data" | awk 'NR==2 {print $4}')
  (( avail_kb > need_kb + 1048576 )) || die "not enough disk for the checkpoint in $build/bench-data"
  echo "partial_load: generating $data (once)..." >&2
  rm -rf "$data.tmp"
  "$gen" -o "$data.tmp" --layers "$layers" --hidden "$hidden" --vocab "$vocab" --shards "$shards" >/dev/null
  mv "$data.tmp" "$data"
fi
shard=$(find "$data" -maxdepth 1 -name 'model-0*-of-*.safetensors' -printf '%f\n' | sort | head -n1)
shard_bytes=$(stat -c %s "$data/$shard")
ckpt_bytes=$(cat "$data"/model-*.safetensors | wc -c)
nfiles=$(find "$data" -maxdepth 1 -name 'model-*.safetensors' | wc -l)

work=$(mktemp -d "${TMPDIR:-/tmp}/tf-bench-partial-XXXXXX")
nginx_pid=""
cleanup() {
  if [[ -n $nginx_pid ]]; then kill "$nginx_pid" 2>/dev/null || true; wait "$nginx_pid" 2>/dev/null || true; fi
  if (( keep )); then echo "partial_load: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
# Outputs of the runs go to the same file system as the temp dir; each is deleted after its run.
avail_kb=$(df -Pk "$work" | awk 'NR==2 {print $4}')
(( avail_kb > 2 * ckpt_bytes / 1024 + 1048576 )) || die "not enough free disk under $work for 2 x the checkpoint"

# --- nginx ------------------------------------------------------------------------------------
ng=$work/nginx
mkdir -p "$ng"
alog=$ng/access.log
start_nginx() {  # PORT_UNLIMITED PORT_CAPPED
  {
    bench_nginx_conf_head "$ng" partial_load.sh auto
    cat <<EOF
  log_format bench '\$msec \$server_port \$connection \$status \$body_bytes_sent "\$http_range" "\$request"';
  access_log $alog bench;
  server { listen 127.0.0.1:$1; root $data; }
  server { listen 127.0.0.1:$2; root $data; limit_rate $rate; }  # per request
}
EOF
  } > "$ng/nginx.conf"
  "$nginx_bin" -p "$ng" -c nginx.conf -e "$ng/error.log" > "$ng/stdout" 2>&1 &
  nginx_pid=$!
  local i
  for i in $(seq 100); do
    if ! kill -0 "$nginx_pid" 2>/dev/null; then wait "$nginx_pid" 2>/dev/null || true; nginx_pid=""; return 1; fi
    curl -sf -o /dev/null "http://127.0.0.1:$1/config.json" &&
      curl -sf -o /dev/null "http://127.0.0.1:$2/config.json" && return 0
    sleep 0.05
  done
  return 1
}
started=0
for _ in 1 2 3 4 5; do
  port_u=$((20000 + RANDOM % 40000)); port_c=$((port_u + 1))
  if start_nginx "$port_u" "$port_c"; then started=1; break; fi
done
(( started )) || { cat "$ng/error.log" "$ng/stdout" >&2 2>/dev/null || true; die "nginx did not start"; }
url_u=http://127.0.0.1:$port_u
url_c=http://127.0.0.1:$port_c

# --- the selection of the partial get, and its size -----------------------------------------------
globs=('model.layers.0.*' 'model.layers.7.*')
glob_re() {  # fnmatch glob -> anchored ERE (*, ?, [...], [!...])
  local g=$1 out="" c i
  for ((i = 0; i < ${#g}; i++)); do
    c=${g:i:1}
    case $c in
      '*') out+='.*' ;;
      '?') out+='.' ;;
      '[') if [[ ${g:i+1:1} == '!' ]]; then out+='[^'; i=$((i + 1)); else out+='['; fi ;;
      ']') out+=']' ;;
      [.+\(\)\{\}^\$\|\\]) out+="\\$c" ;;
      *) out+=$c ;;
    esac
  done
  printf '^%s$' "$out"
}
sel_re=""
for g in "${globs[@]}"; do sel_re+="${sel_re:+|}$(glob_re "$g")"; done
selection() {  # JSON on stdin -> "COUNT SELECTED_BYTES HEADER_BYTES FILES"
  if [[ $json == jq ]]; then
    jq -r --arg re "$sel_re" '([.tensors[] | select(.name | test($re))]) as $s
      | [($s | length), ($s | map(.data_offsets[1] - .data_offsets[0]) | add // 0),
         (.files | map(8 + .header_size) | add), (.files | length)] | @tsv'
  else
    python3 -c 'import json, re, sys
d = json.load(sys.stdin); r = re.compile(sys.argv[1])
s = [t for t in d["tensors"] if r.match(t["name"])]
print(len(s), sum(t["data_offsets"][1] - t["data_offsets"][0] for t in s),
      sum(8 + f["header_size"] for f in d["files"]), len(d["files"]))' "$sel_re"
  fi
}
inspect_src="$url_u/model.safetensors.index.json"
if ! "$tf" inspect "$inspect_src" --json > "$work/inspect.json" 2> "$work/inspect.err"; then
  echo "partial_load: remote inspect failed ($(head -n1 "$work/inspect.err")); inspecting $data" >&2
  inspect_src=$data
  "$tf" inspect "$data" --json > "$work/inspect.json" || die "tensorfetch inspect $data failed"
fi
read -r sel_count sel_bytes hdr_bytes _ < <(selection < "$work/inspect.json" | tr '\t' ' ')
(( sel_count > 0 )) || die "the selection ${globs[*]} matches no tensor"
meta_bytes=$(( $(stat -c %s "$data/model.safetensors.index.json") + $(stat -c %s "$data/config.json") ))
needed_bytes=$((sel_bytes + hdr_bytes + meta_bytes))
# The reference output of the partial get: a local get of the same selection (untimed).
ref_get=$work/ref-get.safetensors
"$tf" get "$data" "${globs[@]}" -o "$ref_get" > /dev/null 2> "$work/ref-get.err" || ref_get=""

# --- measuring ----------------------------------------------------------------------------------
declare -A best_s cpu_s peak_kb status nbytes served reqs conns run_served
n_runs=0
measure() {  # ID CMD... : one timed run; records the best time, the highest RSS, the server bytes
  local id=$1; shift
  local tfile=$work/time.txt off rc t0 t1
  off=$(stat -c %s "$alog")
  t0=$(date +%s.%N)
  /usr/bin/time -v -o "$tfile" "$@" > "$work/stdout.txt" 2> "$work/stderr.txt" && rc=0 || rc=$?
  t1=$(date +%s.%N)
  sleep 0.3  # nginx logs a request when it ends
  if (( rc != 0 )); then
    local msg
    msg=$(grep -v '^\s*$' "$work/stderr.txt" | head -n1 | sed 's/^tensorfetch: //; s/^error: //' | cut -c1-160)
    status[$id]="n/a (command failed: exit $rc: ${msg:-no message})"
    return
  fi
  local secs rss cpu line b n c
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tfile")
  cpu=$(awk -F': ' '/User time/ {u = $2} /System time/ {s = $2} END {printf "%.2f", u + s}' "$tfile")
  line=$(tail -c +$((off + 1)) "$alog" |
    awk '{b += $5; c[$3] = 1; n++} END {printf "%.0f %d %d", b, n, length(c)}')
  read -r b n c <<< "$line"
  run_served[$id]+="$b "
  if [[ -z ${best_s[$id]:-} ]] || awk -v a="$secs" -v b="${best_s[$id]}" 'BEGIN {exit !(a < b)}'; then
    best_s[$id]=$secs; cpu_s[$id]=$cpu; served[$id]=$b; reqs[$id]=$n; conns[$id]=$c
  fi
  (( ${peak_kb[$id]:-0} >= rss )) || peak_kb[$id]=$rss
  status[$id]=ok
}
verify() {  # ID EXPECTED_BYTES PAIRS...(output source): cmp each; sets nbytes or a failed status
  local id=$1 expected=$2 total=0; shift 2
  [[ ${status[$id]} == ok ]] || return 0
  while (( $# )); do
    if [[ ! -f $1 ]]; then status[$id]="FAIL: no output file ${2##*/}"; return; fi
    if [[ -n $2 ]] && ! cmp -s "$1" "$2"; then status[$id]="FAIL: ${1##*/} differs from ${2##*/}"; return; fi
    total=$((total + $(stat -c %s "$1"))); shift 2
  done
  (( expected == 0 || total == expected )) || { status[$id]="FAIL: $total bytes, expected $expected"; return; }
  nbytes[$id]=$total
}
tf_dl_args=(--quiet)
[[ -z $connections ]] || tf_dl_args+=(--connections "$connections")
run_case() {  # ID
  local id=$1 out=$work/out srv base
  [[ ${status[$id]:-ok} == ok ]] || return 0   # a failed case is not run again
  rm -rf "$out" "$work"/cache-*; mkdir -p "$out"
  case $id in
    dd)       measure "$id" dd if="$data/$shard" of="$out/$shard" bs=4M status=none
              verify "$id" "$shard_bytes" "$out/$shard" "$data/$shard" ;;
    dd-fsync) measure "$id" dd if="$data/$shard" of="$out/$shard" bs=4M conv=fsync status=none
              verify "$id" "$shard_bytes" "$out/$shard" "$data/$shard" ;;
    *)
      srv=${id##*-}; base=$url_u; [[ $srv == u ]] || base=$url_c
      n_runs=$((n_runs + 1))
      local cache=$work/cache-$n_runs
      case ${id%-*} in
        curl)  measure "$id" curl -sS -f -o "$out/$shard" "$base/$shard"
               verify "$id" "$shard_bytes" "$out/$shard" "$data/$shard" ;;
        aria2) measure "$id" aria2c -x16 -s16 -k1M -q --allow-overwrite=true --auto-file-renaming=false \
                 -d "$out" -o "$shard" "$base/$shard"
               verify "$id" "$shard_bytes" "$out/$shard" "$data/$shard" ;;
        tfshard) measure "$id" env TENSORFETCH_CACHE="$cache" "$tf" download "$base/$shard" -o "$out" "${tf_dl_args[@]}"
               verify "$id" "$shard_bytes" "$(find "$out" -name "$shard" -print -quit)" "$data/$shard" ;;
        tfall) measure "$id" env TENSORFETCH_CACHE="$cache" "$tf" download "$base/model.safetensors.index.json" \
                 -o "$out" "${tf_dl_args[@]}"
               local pairs=() f
               for f in "$data"/model-*.safetensors; do
                 pairs+=("$(find "$out" -name "${f##*/}" -print -quit)" "$f")
               done
               verify "$id" "$ckpt_bytes" "${pairs[@]}" ;;
        tfget) measure "$id" env TENSORFETCH_CACHE="$cache" "$tf" get "$base/model.safetensors.index.json" \
                 "${globs[@]}" -o "$out/partial.safetensors" --quiet
               verify "$id" 0 "$out/partial.safetensors" "$ref_get" ;;
      esac ;;
  esac
  rm -rf "$out" "$work"/cache-*
  sync
}

cases=(dd dd-fsync)
for s in u c; do cases+=("curl-$s" "aria2-$s" "tfshard-$s" "tfall-$s" "tfget-$s"); done
cat "$data"/* > /dev/null   # into the page cache: nginx and dd read from memory
sync                        # and nothing left to write back from generating it
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
awk -v l="${load_start%% *}" -v n="$(nproc)" 'BEGIN {exit !(l > n / 2)}' &&
  echo "partial_load: warning: load average $load_start on $(nproc) CPUs: other work will skew the figures" >&2
echo "partial load benchmark: $nfiles shards, $ckpt_bytes bytes (layers $layers, hidden $hidden, BF16), $data"
echo "  tensorfetch $tf (buildtype ${buildtype:-?})$build_note"
echo "  nginx $("$nginx_bin" -v 2>&1 | sed 's/.*nginx\///'), sendfile, keep-alive; u = unthrottled :$port_u," \
  "c = limit_rate $rate per request :$port_c; $(nproc) CPUs shared by server and client"
echo "  shard $shard: $shard_bytes bytes; best of $runs runs, every case once per round, rounds in" \
  "alternating order, checkpoint pre-read into the page cache; outputs deleted + sync between runs"
for r in $(seq "$runs"); do
  order=("${cases[@]}")
  if (( r % 2 == 0 )); then
    order=(); for ((i = ${#cases[@]} - 1; i >= 0; i--)); do order+=("${cases[i]}"); done
  fi
  for id in "${order[@]}"; do
    [[ $id != dd-fsync || $r -eq 1 ]] || continue   # context only: once
    [[ ! -t 2 ]] || printf '  round %d/%d: %-10s\r' "$r" "$runs" "$id" >&2
    run_case "$id"
  done
done
[[ ! -t 2 ]] || printf '%40s\r' "" >&2

load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report -------------------------------------------------------------------------------------
mbps() { [[ ${status[$1]:-} == ok ]] && awk -v b="${nbytes[$1]}" -v s="${best_s[$1]}" 'BEGIN {printf "%.1f", b / s / 1e6}'; }
ratio() {  # A B [DECIMALS]
  awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {if (a == "" || b == "" || b == 0) print "-"; else printf "%.*f", d, a / b}'
}
dd_mbps=$(mbps dd || true)
describe() {
  case ${1%-*} in
    dd) [[ $1 == dd ]] && echo "dd bs=4M|local copy of the shard" || echo "dd conv=fsync|local copy (context)" ;;
    curl) echo "curl|shard" ;;
    aria2) echo "aria2c -x16|shard" ;;
    tfshard) echo "tf download|shard" ;;
    tfall) echo "tf download|checkpoint ($nfiles files)" ;;
    tfget) echo "tf get|2 layers (${#globs[@]} globs)" ;;
  esac
}
printf '\n%-3s %-15s %-22s %12s %8s %8s %6s %6s %8s %7s %s\n' srv tool what bytes seconds MB/s x_aria x_dd \
  'RSS MiB' 'cpu s' 'served (requests/connections)'
for id in "${cases[@]}"; do
  srv=-; [[ $id == dd* ]] || srv=${id##*-}
  IFS='|' read -r tool what <<< "$(describe "$id")"
  if [[ ${status[$id]:-} != ok ]]; then
    printf '%-3s %-15s %-22s %s\n' "$srv" "$tool" "$what" "${status[$id]:-not run}"
    continue
  fi
  m=$(mbps "$id"); xa=-
  [[ $srv == - ]] || xa=$(ratio "$m" "$(mbps "aria2-$srv" || true)")
  srvd=-; [[ $srv == - ]] || srvd="${served[$id]} (${reqs[$id]}/${conns[$id]})"
  printf '%-3s %-15s %-22s %12d %8.3f %8s %6s %6s %8.1f %7s %s\n' "$srv" "$tool" "$what" "${nbytes[$id]}" \
    "${best_s[$id]}" "$m" "$xa" "$(ratio "$m" "$dd_mbps")" "$(awk -v k="${peak_kb[$id]}" 'BEGIN {print k / 1024}')" \
    "${cpu_s[$id]}" "$srvd"
done
echo "  MB = 10^6 bytes; x_aria: MB/s over aria2c's on the same server; x_dd: over the local dd copy;"
echo "  RSS: the highest of the runs; served: nginx \$body_bytes_sent summed over the best run's requests"
echo "  load average before: $load_start, after: $load_end on $(nproc) CPUs (other work running makes the numbers noisy)"

echo
echo "partial get: ${globs[*]} = $sel_count tensors, $sel_bytes bytes; + headers $hdr_bytes (8 + N for" \
  "$nfiles shards) + index and config.json $meta_bytes = $needed_bytes bytes needed (from inspect $inspect_src)"
get_moved=""
for s in u c; do
  if [[ ${status[tfget-$s]:-} == ok ]]; then
    for b in ${run_served[tfget-$s]}; do (( ${get_moved:-0} >= b )) || get_moved=$b; done
    echo "  server $s: moved ${run_served[tfget-$s]}bytes (nginx \$body_bytes_sent, one figure per run)"
  else
    echo "  server $s: moved n/a (${status[tfget-$s]:-not run})"
  fi
done

echo
echo "goals:"
goal() {  # TEXT VALUE OP LIMIT
  local verdict
  if [[ -z $2 || $2 == - ]]; then verdict="n/a"
  else verdict=$(awk -v v="$2" -v l="$4" -v op="$3" 'BEGIN {ok = (op == ">=") ? v >= l : v <= l; print ok ? "PASS" : "FAIL"}'); fi
  printf '  %-62s %8s  %s\n' "$1" "${2:--}" "$verdict"
}
why() { [[ ${status[$1]:-} == ok ]] || echo "    ($1: ${status[$1]:-not run})"; }
for what in shard all; do
  goal "capped: tf download $what >= 1.2 x aria2c MB/s" \
    "$(ratio "$(mbps "tf$what-c" || true)" "$(mbps aria2-c || true)" 3)" ">=" 1.2
  why "tf$what-c"
done
for what in shard all; do
  goal "unthrottled: tf download $what >= 0.8 x local dd MB/s" \
    "$(ratio "$(mbps "tf$what-u" || true)" "$dd_mbps" 3)" ">=" 0.8
  why "tf$what-u"
done
max_rss=""
for id in "${cases[@]}"; do
  [[ $id == tf* && ${status[$id]:-} == ok ]] || continue
  (( ${max_rss:-0} >= peak_kb[$id] )) || max_rss=${peak_kb[$id]}
done
goal "peak RSS of tensorfetch (MiB) <= 64" "$([[ -z $max_rss ]] || awk -v k="$max_rss" 'BEGIN {printf "%.1f", k / 1024}')" "<=" 64
[[ -n $max_rss ]] || echo "    (no tensorfetch download or get succeeded)"
goal "partial get bytes moved / (selected + headers) <= 1.01" "$(ratio "$get_moved" "$needed_bytes" 4)" "<=" 1.01
why tfget-u
