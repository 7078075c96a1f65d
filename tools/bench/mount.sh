#!/usr/bin/env bash
# Benchmark of `tensorfetch mount` (issue 21's goals) over the path of real_network.sh: TLS 1.3 +
# HTTP/2 from nginx, a per-TCP-connection cap (nginx stream proxy_download_rate, a CDN's per-flow
# cap) and a round trip added by tensorfetch-latency-proxy; rclone mount (HTTP remote, --vfs-cache-
# mode full) as the peer over the same server and path, `tensorfetch get` / `download` as the
# floor. Every reader's bytes are checked against the same reader run on the local checkpoint.
#
#   client --> latency proxy (--rtt-ms) --> nginx stream proxy (--rate per flow) --> nginx https
#
# Cases (groups for --cases):
#   layers   a reader (Python, numpy.memmap of each shard through the mount, copying every tensor
#            of layers 0 and 7 out of the mapping) on a fresh tensorfetch mount of the index URL,
#            and on a fresh rclone mount of the server; `tensorfetch get` of the same tensors.
#            Reported: the reader's wall (after its imports; the mount already up) and the bytes
#            nginx sent (origin bytes) against those tensors' bytes + every shard's header.
#   all      the reader copying every tensor of every shard in file order (what safetensors'
#            load_file does) on fresh mounts of both; `tensorfetch download` of the checkpoint.
#            Reported as throughput (checkpoint bytes / wall).
#   readers4 4 reader processes of the layers case at once on one fresh tensorfetch mount: origin
#            bytes against one reader's.
#   ready    mount ready for a repo of --ready-shards shards (tensorfetch-make-checkpoint, 61
#            layers, as DeepSeek-V3's 163) served by tensorfetch-test-server (TLS, HTTP/1.1) behind
#            a latency proxy at --ready-rtt-ms: from the start of `tensorfetch mount` to the
#            directory being mounted, against `tensorfetch inspect` of the same repo (process
#            start to exit), both timed by the same Python helper.
# Each case runs --runs times (fresh caches and mounts each time), the best wall kept.
#
# Usage: tools/bench/mount.sh [BUILD_DIR] [options]
#   BUILD_DIR            default build-bench-release (meson setup --buildtype=release if missing)
#   --size-mb MB         checkpoint size, decimal MB (default 2000; hidden 576, vocab 32000)
#   --shards N           shards of the checkpoint (default 4)
#   --rate RATE          per-connection cap, nginx syntax (default 8m = 8 MiB/s)
#   --rtt-ms MS          round trip of the data path (default 20)
#   --ready-rtt-ms MS    round trip of the ready case's Hub (default 50)
#   --ready-shards N     shards of the ready case's repo (default 163)
#   --runs R             runs per case, best kept (default 1)
#   --cases LIST         comma-separated: layers,all,readers4,ready (default all four)
#   --no-rclone          skip the rclone runs
#   --keep               keep the temp dir (configs, logs) and print its path
# Needs: nginx-light, libnginx-mod-stream, rclone, fuse3, curl, openssl, jq, /usr/bin/python3 with
# numpy, FUSE (/dev/fuse; root or fusermount3), and a build with -Dbench=true (the default).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/bench/bench_lib.sh

build='build-bench-release'
size_mb=2000
shards=4
rate=8m
rtt_ms=20
ready_rtt_ms=50
ready_shards=163
runs=1
cases_arg=layers,all,readers4,ready
rclone_on=1
keep=0
hidden=576
vocab=32000
py=/usr/bin/python3
usage() { sed -n '/^# Usage:/,/^# Needs:/s/^# \{0,1\}//p' "$0"; }
die() { echo "mount.sh: $*" >&2; exit 1; }
while (( $# )); do
  case $1 in
    --size-mb) size_mb=${2:?}; shift 2 ;;
    --shards) shards=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --rtt-ms) rtt_ms=${2:?}; shift 2 ;;
    --ready-rtt-ms) ready_rtt_ms=${2:?}; shift 2 ;;
    --ready-shards) ready_shards=${2:?}; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    --cases) cases_arg=${2:?}; shift 2 ;;
    --no-rclone) rclone_on=0; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 1 ;;
    *) build=$1; shift ;;
  esac
done
for v in size_mb shards runs ready_shards; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-} takes a positive integer (got '${!v}')"
done
for v in rtt_ms ready_rtt_ms; do
  [[ ${!v} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--${v//_/-} takes a number of ms (got '${!v}')"
done
[[ $rate =~ ^[1-9][0-9]*[kKmM]?$ ]] || die "--rate takes a size like 8m, 800k or 1000000"
case $rate in *[kK]) rate_b=$(( ${rate%?} * 1024 )) ;; *[mM]) rate_b=$(( ${rate%?} * 1048576 )) ;; *) rate_b=$rate ;; esac
declare -A want
IFS=, read -r -a groups <<< "$cases_arg"
for g in "${groups[@]}"; do
  case $g in layers|all|readers4|ready) want[$g]=1 ;; *) die "--cases: unknown case '$g'" ;; esac
done
for tool in nginx curl openssl jq; do
  command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || die "$tool not found: run tools/install-deps.sh --bench"
done
(( ! rclone_on )) || command -v rclone >/dev/null || die "rclone not found (Debian rclone), or pass --no-rclone"
"$py" -c 'import numpy' 2>/dev/null || die "$py has no numpy"
[[ -e /dev/fuse ]] || die "no /dev/fuse: FUSE mounts cannot run here"
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
stream_module=/usr/lib/nginx/modules/ngx_stream_module.so
[[ -f $stream_module ]] || die "$stream_module not found (libnginx-mod-stream)"

# --- build -------------------------------------------------------------------------------------
if [[ ! -f $build/build.ninja ]]; then
  meson setup "$build" --buildtype=release -Dtests=false -Dbench=true >/dev/null || die "meson setup $build failed"
fi
ninja -C "$build" tools/tensorfetch/tensorfetch tools/gen/tensorfetch-make-checkpoint \
  tools/hubserver/tensorfetch-test-server tools/bench/tensorfetch-latency-proxy >/dev/null || die "ninja -C $build failed"
tf=$(realpath "$build/tools/tensorfetch/tensorfetch")
gen=$(realpath "$build/tools/gen/tensorfetch-make-checkpoint")
hub=$(realpath "$build/tools/hubserver/tensorfetch-test-server")
lproxy=$(realpath "$build/tools/bench/tensorfetch-latency-proxy")
"$tf" mount --help >/dev/null 2>&1 || die "$tf has no mount command (a build without the meson feature fuse)"
buildtype=$(jq -r '.[] | select(.name == "buildtype") | .value' "$build/meson-info/intro-buildoptions.json" 2>/dev/null || true)

# --- the checkpoint (generated once, reused; the layout real_network.sh uses) ---------------------
layer_bytes=$((32 * hidden * hidden))
embed_bytes=$((2 * 2 * vocab * hidden))
layers=$(( (size_mb * 1000000 - embed_bytes + layer_bytes / 2) / layer_bytes ))
(( layers >= 8 )) || layers=8  # the readers select layers 0 and 7
mkdir -p "$build/bench-data"
data=$(realpath "$build/bench-data")/real-network-l$layers-h$hidden-v$vocab-s$shards
if [[ ! -d $data ]]; then
  echo "mount.sh: generating $data (once)..." >&2
  rm -rf "$data.tmp"
  "$gen" -o "$data.tmp" --layers "$layers" --hidden "$hidden" --vocab "$vocab" --shards "$shards" >/dev/null
  mv "$data.tmp" "$data"
fi
ckpt_bytes=$(cat "$data"/model-*.safetensors | wc -c)

work=$(mktemp -d "${TMPDIR:-/tmp}/tf-bench-mount-XXXXXX")
pids=()
mounts=()
cleanup() {
  local p m
  for m in "${mounts[@]}"; do fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if (( keep )); then echo "mount.sh: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# --- the readers --------------------------------------------------------------------------------
cat > "$work/reader.py" <<'PY'
# reader.py MODE DIR: copies tensors out of numpy.memmap mappings of DIR's shards, as a loader
# does; MODE layers: every tensor of layers 0 and 7; all: every tensor of every shard in file
# order. Prints "WALL_S SHA256" (wall after the imports; sha256 over the bytes in read order).
import hashlib, json, os, re, struct, sys, time
import numpy as np
mode, d = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
shards = sorted(set(index["weight_map"].values()))
pick = re.compile(r"^model\.layers\.(0|7)\.")
h = hashlib.sha256()
for shard in shards:
    names = [n for n, s in index["weight_map"].items() if s == shard and (mode == "all" or pick.match(n))]
    if not names:
        continue
    mm = np.memmap(os.path.join(d, shard), dtype=np.uint8, mode="r")
    n = struct.unpack("<Q", mm[:8].tobytes())[0]
    header = json.loads(mm[8:8 + n].tobytes())
    base = 8 + n
    for name in sorted(names, key=lambda x: header[x]["data_offsets"][0]):
        b, e = header[name]["data_offsets"]
        h.update(np.array(mm[base + b:base + e]).tobytes())
    del mm
print("%.4f %s" % (time.perf_counter() - t0, h.hexdigest()))
PY
cat > "$work/timed.py" <<'PY'
# timed.py MODE DIR -- CMD...: runs CMD; MODE exit: seconds until it exits (its status must be
# 0); MODE mounted: seconds until DIR is a mount point (CMD keeps running; its pid on line 2).
import os, subprocess, sys, time
mode, d, cmd = sys.argv[1], sys.argv[2], sys.argv[4:]
def mounted():
    try:
        return os.stat(d).st_dev != os.stat(os.path.dirname(d.rstrip("/"))).st_dev
    except OSError:
        return False
t0 = time.perf_counter()
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(d.rstrip("/") + ".err", "w") if mode == "mounted" else None)
if mode == "exit":
    rc = p.wait()
    print("%.4f" % (time.perf_counter() - t0))
    sys.exit(rc)
while not mounted():
    if p.poll() is not None:
        sys.exit("not mounted: the command exited with %d" % p.returncode)
    time.sleep(0.001)
print("%.4f" % (time.perf_counter() - t0))
print(p.pid)
PY
read -r _ want_layers < <("$py" "$work/reader.py" layers "$data")
read -r _ want_all < <("$py" "$work/reader.py" all "$data")
sel_bytes=$("$tf" inspect "$data" --json |
  jq '[.tensors[] | select(.name | test("^model\\.layers\\.(0|7)\\.")) | .data_offsets[1] - .data_offsets[0]] | add')
header_bytes=$("$tf" inspect "$data" --json | jq '[.files[] | 8 + .header_size] | add')

# --- TLS, nginx, proxies ------------------------------------------------------------------------
tls=$work/tls
bench_make_tls "$tls" || die "openssl could not make the certificates"
ca=$tls/ca.pem
ng=$work/nginx
mkdir -p "$ng"
alog=$ng/access.log
touch "$alog"
ready_root=$work/hub-root
if [[ -n ${want[ready]:-} ]]; then
  "$gen" -o "$ready_root/bench/ds" --layers 61 --hidden 64 --vocab 256 --shards "$ready_shards" >/dev/null
fi
wait_for() {  # PID WHAT CMD...
  local pid=$1 what=$2 i; shift 2
  for i in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || { echo "mount.sh: $what exited" >&2; return 1; }
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "mount.sh: $what did not come up" >&2
  return 1
}
start_all() {  # BASE: +0 nginx https, +1 stream proxy (cap), +2 latency proxy (data), +3 Hub (ready)
  local b=$1 half ihalf
  {
    bench_nginx_conf_head "$ng" mount.sh auto "load_module $stream_module;"
    cat <<EOF
  ssl_certificate $tls/server.pem;
  ssl_certificate_key $tls/server.key;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache shared:bench:1m;
  log_format bench '\$msec \$connection \$status \$body_bytes_sent "\$http_range" "\$request"';
  access_log $alog bench;
  server { listen 127.0.0.1:$b ssl http2; root $data; autoindex on; }  # autoindex: rclone's HTTP remote lists it
}
stream {
  server { listen 127.0.0.1:$((b + 1)); proxy_pass 127.0.0.1:$b; proxy_download_rate $rate_b; }
}
EOF
  } > "$ng/nginx.conf"
  "$nginx_bin" -p "$ng" -c nginx.conf -e "$ng/error.log" > "$ng/stdout" 2>&1 &
  pids+=($!)
  wait_for "$!" nginx curl -sf --cacert "$ca" -o /dev/null "https://127.0.0.1:$b/config.json" || return 1
  half=$(awk -v r="$rtt_ms" 'BEGIN {print r / 2}')
  "$lproxy" --listen 127.0.0.1:$((b + 2)) --target 127.0.0.1:$((b + 1)) --delay-ms "$half" \
    > "$work/proxy-data.out" 2> "$work/proxy-data.err" &
  pids+=($!)
  wait_for "$!" "latency proxy" test -s "$work/proxy-data.out" || return 1
  if [[ -n ${want[ready]:-} ]]; then
    "$hub" --root "$ready_root" --bind 127.0.0.2 --port $((b + 3)) --threads 512 --hub-host localhost --cdn-host 127.0.0.1 \
      --tls-cert "$tls/server.pem" --tls-key "$tls/server.key" > "$work/hub.out" 2> "$work/hub.err" &
    pids+=($!)
    wait_for "$!" "test server" test -s "$work/hub.out" || return 1
    ihalf=$(awk -v r="$ready_rtt_ms" 'BEGIN {print r / 2}')
    "$lproxy" --listen 127.0.0.1:$((b + 3)) --target 127.0.0.2:$((b + 3)) --delay-ms "$ihalf" \
      > "$work/proxy-hub.out" 2> "$work/proxy-hub.err" &
    pids+=($!)
    wait_for "$!" "latency proxy (Hub)" test -s "$work/proxy-hub.out" || return 1
  fi
}
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
started=0
for _ in 1 2 3 4 5; do
  base=$((20000 + RANDOM % 40000))
  if start_all "$base"; then started=1; break; fi
  stop_all
done
(( started )) || { cat "$ng/error.log" "$work"/*.err >&2 2>/dev/null || true; die "the servers did not start"; }
negotiated=$(curl -sS --cacert "$ca" -o /dev/null -w '%{http_version}' "https://127.0.0.1:$base/config.json")
[[ $negotiated == 2 ]] || die "nginx did not negotiate HTTP/2 (got HTTP/$negotiated)"
url=https://127.0.0.1:$((base + 2))
index_url=$url/model.safetensors.index.json
hub_ep=https://localhost:$((base + 3))

# --- helpers ------------------------------------------------------------------------------------
origin_bytes() { sleep 0.3; awk '{s += $4} END {print s + 0}' "$alog"; }  # (nginx logs a request as it ends)
n=0
fresh() { n=$((n + 1)); d=$work/run$n; mkdir -p "$d"; }  # sets $d: a new directory (fresh caches and mounts)
tf_mount() {  # DIR CACHE: mounts the index URL; prints the mount process's pid
  local out
  out=$("$py" "$work/timed.py" mounted "$1" -- "$tf" mount "$index_url" "$1" --cacert "$ca" --cache-dir "$2") ||
    die "tensorfetch mount failed: $(cat "$1.err")"
  mounts+=("$1")
  sed -n 2p <<<"$out"
}
rclone_cmd() {  # DIR CACHE
  echo rclone mount :http: "$1" --http-url "$url/" --ca-cert "$ca" --vfs-cache-mode full --cache-dir "$2" \
    --read-only --config /dev/null
}
rclone_mount() {  # DIR CACHE
  local out
  # shellcheck disable=SC2046
  out=$("$py" "$work/timed.py" mounted "$1" -- $(rclone_cmd "$1" "$2")) || die "rclone mount failed: $(cat "$1.err")"
  mounts+=("$1")
  sed -n 2p <<<"$out"
}
end_mount() {  # PID DIR
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 200); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  fusermount3 -u -z "$2" 2>/dev/null || true
}
check_sha() {  # GOT WANT WHAT
  [[ $1 == "$2" ]] || die "$3: the bytes read differ from the local checkpoint's"
}
best() { sort -g | head -n1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }
mbps() { awk -v bytes="$1" -v s="$2" 'BEGIN {if (s > 0) printf "%.1f", bytes / s / 1e6; else print "-"}'; }
declare -A wall origin

run_reader_on() {  # KIND(tf|rclone) MODE: one run; sets last_wall last_origin
  local kind=$1 mode=$2 pid out w sha
  fresh
  mkdir -p "$d/mnt"
  if [[ $kind == tf ]]; then pid=$(tf_mount "$d/mnt" "$d/cache"); else pid=$(rclone_mount "$d/mnt" "$d/cache"); fi
  : > "$alog"
  out=$("$py" "$work/reader.py" "$mode" "$d/mnt") || die "$kind reader ($mode) failed"
  read -r w sha <<<"$out"
  last_origin=$(origin_bytes)
  cp "$alog" "$d/access.log"  # (what this run asked the origin for, for --keep)
  end_mount "$pid" "$d/mnt"
  check_sha "$sha" "$( [[ $mode == layers ]] && echo "$want_layers" || echo "$want_all")" "$kind mount, $mode"
  last_wall=$w
}
measure() {  # KEY KIND MODE: best of --runs
  local key=$1 walls=() origins=() i
  for ((i = 0; i < runs; i++)); do
    run_reader_on "$2" "$3"
    walls+=("$last_wall"); origins+=("$last_origin")
  done
  wall[$key]=$(printf '%s\n' "${walls[@]}" | best)
  origin[$key]=$(printf '%s\n' "${origins[@]}" | best)
}
measure_cmd() {  # KEY CMD...: best wall of --runs (a fresh cache each: {CACHE} and {OUT} replaced)
  local key=$1 walls=() origins=() i args a w; shift
  for ((i = 0; i < runs; i++)); do
    fresh
    args=()
    for a in "$@"; do a=${a//\{CACHE\}/$d/cache}; args+=("${a//\{OUT\}/$d/out}"); done
    : > "$alog"
    w=$("$py" "$work/timed.py" exit "$d" -- "${args[@]}") || die "$key failed: ${args[*]}"
    walls+=("$w")
    origins+=("$(origin_bytes)")
  done
  wall[$key]=$(printf '%s\n' "${walls[@]}" | best)
  origin[$key]=$(printf '%s\n' "${origins[@]}" | best)
}

echo "mount.sh: build $build ($buildtype), checkpoint $data: $ckpt_bytes bytes, $shards shards, layers 0+7 =" \
  "$sel_bytes bytes + $header_bytes header bytes; path: TLS + HTTP/2, $rate per connection, $rtt_ms ms RTT" >&2

if [[ -n ${want[layers]:-} ]]; then
  measure layers-tf tf layers
  measure_cmd layers-get "$tf" get "$index_url" 'model.layers.0.*' 'model.layers.7.*' -o '{OUT}.safetensors' \
    --cacert "$ca" --cache-dir '{CACHE}' -q
  (( ! rclone_on )) || measure layers-rclone rclone layers
fi
if [[ -n ${want[all]:-} ]]; then
  measure all-tf tf all
  measure_cmd all-download "$tf" download "$index_url" -o '{OUT}' --cacert "$ca" --cache-dir '{CACHE}' -q
  (( ! rclone_on )) || measure all-rclone rclone all
fi
if [[ -n ${want[readers4]:-} ]]; then
  [[ -n ${origin[layers-tf]:-} ]] || measure layers-tf tf layers
  fresh
  mkdir -p "$d/mnt"
  pid=$(tf_mount "$d/mnt" "$d/cache")
  : > "$alog"
  rpids=()
  for i in 1 2 3 4; do "$py" "$work/reader.py" layers "$d/mnt" > "$d/reader$i.out" & rpids+=($!); done
  for p in "${rpids[@]}"; do wait "$p" || die "a reader of readers4 failed"; done
  origin[readers4]=$(origin_bytes)
  end_mount "$pid" "$d/mnt"
  for i in 1 2 3 4; do check_sha "$(cut -d' ' -f2 "$d/reader$i.out")" "$want_layers" "readers4 reader $i"; done
  wall[readers4]=$(cut -d' ' -f1 "$d"/reader?.out | sort -g | tail -n1)
fi
if [[ -n ${want[ready]:-} ]]; then
  ready_walls=(); inspect_walls=()
  for ((i = 0; i < runs; i++)); do
    fresh
    inspect_walls+=("$("$py" "$work/timed.py" exit "$d" -- "$tf" inspect hf://bench/ds --endpoint "$hub_ep" \
      --cacert "$ca" --cache-dir "$d/cache-i")")
    mkdir -p "$d/mnt"
    out=$("$py" "$work/timed.py" mounted "$d/mnt" -- "$tf" mount hf://bench/ds "$d/mnt" --endpoint "$hub_ep" \
      --cacert "$ca" --cache-dir "$d/cache") || die "mount of hf://bench/ds failed: $(cat "$d/mnt.err")"
    mounts+=("$d/mnt")
    ready_walls+=("$(sed -n 1p <<<"$out")")
    [[ $(find "$d/mnt" -maxdepth 1 -name 'model-*.safetensors' | wc -l) == "$ready_shards" ]] ||
      die "the mount of hf://bench/ds does not show $ready_shards shards"
    end_mount "$(sed -n 2p <<<"$out")" "$d/mnt"
  done
  wall[ready]=$(printf '%s\n' "${ready_walls[@]}" | best)
  wall[inspect]=$(printf '%s\n' "${inspect_walls[@]}" | best)
fi

# --- report -------------------------------------------------------------------------------------
echo
echo "tensorfetch mount benchmark: $ckpt_bytes-byte checkpoint ($shards shards), TLS 1.3 + HTTP/2, $rate per TCP"\
  "connection, $rtt_ms ms RTT; build $build ($buildtype); best of $runs"
echo "peer: $(rclone_cmd DIR CACHE | sed "s|$work|WORK|g; s|$url|URL|")"
printf '%-44s %10s %14s %s\n' case wall_s origin_bytes note
line() { printf '%-44s %10s %14s %s\n' "$1" "${wall[$2]:--}" "${origin[$2]:--}" "${3:-}"; }
if [[ -n ${want[layers]:-} ]]; then
  want_b=$((sel_bytes + header_bytes))
  line "layers 0+7, mmap reader on tensorfetch mount" layers-tf \
    "origin/(tensors+headers) = $(ratio "${origin[layers-tf]}" "$want_b") (goal <= 1.05)"
  line "layers 0+7, tensorfetch get (floor)" layers-get \
    "mount wall / get wall = $(ratio "${wall[layers-tf]}" "${wall[layers-get]}") (goal <= 1.25)"
  (( ! rclone_on )) || line "layers 0+7, mmap reader on rclone mount" layers-rclone \
    "rclone wall / mount wall = $(ratio "${wall[layers-rclone]}" "${wall[layers-tf]}") (goal >= 3)"
fi
if [[ -n ${want[all]:-} ]]; then
  line "every tensor in file order, tensorfetch mount" all-tf "$(mbps "$ckpt_bytes" "${wall[all-tf]}") MB/s"
  line "tensorfetch download (floor)" all-download \
    "$(mbps "$ckpt_bytes" "${wall[all-download]}") MB/s; mount/download throughput = $(ratio "${wall[all-download]}" "${wall[all-tf]}") (goal >= 0.8)"
  (( ! rclone_on )) || line "every tensor in file order, rclone mount" all-rclone \
    "$(mbps "$ckpt_bytes" "${wall[all-rclone]}") MB/s; mount/rclone throughput = $(ratio "${wall[all-rclone]}" "${wall[all-tf]}") (goal >= 2)"
fi
if [[ -n ${want[readers4]:-} ]]; then
  line "4 processes, layers 0+7, one tensorfetch mount" readers4 \
    "origin / one reader's = $(ratio "${origin[readers4]}" "${origin[layers-tf]}") (goal 1.00)"
fi
if [[ -n ${want[ready]:-} ]]; then
  line "mount ready, $ready_shards shards, $ready_rtt_ms ms RTT" ready \
    "ready - inspect = $(awk -v a="${wall[ready]}" -v b="${wall[inspect]}" -v r="$ready_rtt_ms" 'BEGIN {printf "%.1f ms = %.2f RTT", (a - b) * 1000, (a - b) * 1000 / r}') (goal <= 2 RTT)"
  line "tensorfetch inspect, same repo" inspect ""
fi
