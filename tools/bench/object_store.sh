#!/usr/bin/env bash
# Object stores (issue 22): tensorfetch against the stores' own tools, same server, same path,
# same run, every output verified, figures as ratios.
#
#   client --> nginx stream proxy --------------------> nginx https (TLS 1.3) --> s3rver (npm)
#              (proxy_download_rate --rate per TCP       proxy_pass, keepalive     --> azurite (npm)
#               connection: a CDN's / a store's per-flow cap)
#
# S3 cases (bucket `models`, a generated 4-shard checkpoint under ckpt/, uploaded with rclone):
#   tf-download   tensorfetch download s3://models/ckpt/ -o DIR
#   rclone        rclone copy s3:models/ckpt DIR --transfers 4 --multi-thread-streams 16
#   aws           aws s3 cp --recursive s3://models/ckpt/ DIR (config: s3 max_concurrent_requests = 32)
#   tf-get        tensorfetch get of layers 0 and 7: bytes nginx sent vs the tensors' bytes + headers
#   tf-inspect    tensorfetch inspect s3://models/ckpt/: requests (list, index, shard headers)
# Azure cases (azurite, container `models`, the same checkpoint; the account key by connection string):
#   az-tf-download, az-rclone (rclone's azureblob backend with a container SAS URL, as rclone 1.60
#   cannot be given a path-style https endpoint otherwise), az-tf-get
# Every download is compared byte for byte with the generated files. s3rver does not check
# signatures (the tests' botocore proxy does; it is left out here: it would be the bottleneck);
# azurite checks every SAS.
#
# Usage: tools/bench/object_store.sh [BUILD_DIR] [--size-mb MB] [--rate RATE] [--runs R] [--stores s3,azure] [--keep]
#   BUILD_DIR   default build (needs tools/tensorfetch/tensorfetch and tools/gen/tensorfetch-make-checkpoint)
#   --size-mb   checkpoint size in decimal MB (default 1000; the issue's goal is for >= 1000)
#   --rate      per-connection cap, nginx syntax (default 8m = 8 MiB/s)
#   --runs      runs per case, best kept (default 1)
# Needs: nginx-light + libnginx-mod-stream, openssl, rclone, awscli, jq, node (tools/node: npm ci).
set -euo pipefail
cd "$(dirname "$0")/../.."
root_dir=$PWD

build=build size_mb=1000 rate=8m runs=1 stores=s3,azure keep=0
args=("$@")
i=0
if (( ${#args[@]} > 0 )) && [[ ${args[0]} != --* ]]; then build=${args[0]}; i=1; fi
die() { echo "object_store: $*" >&2; exit 1; }
while (( i < ${#args[@]} )); do
  case ${args[i]} in
    --size-mb) size_mb=${args[i + 1]}; i=$((i + 2)) ;;
    --rate) rate=${args[i + 1]}; i=$((i + 2)) ;;
    --runs) runs=${args[i + 1]}; i=$((i + 2)) ;;
    --stores) stores=${args[i + 1]}; i=$((i + 2)) ;;
    --keep) keep=1; i=$((i + 1)) ;;
    *) die "unknown option ${args[i]}" ;;
  esac
done
for tool in nginx openssl rclone aws jq node; do
  command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || die "$tool not found (tools/install-deps.sh --bench; awscli, rclone)"
done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
stream_module=/usr/lib/nginx/modules/ngx_stream_module.so
[[ -f $stream_module ]] || die "$stream_module not found (libnginx-mod-stream)"
s3rver=$root_dir/tools/node/node_modules/s3rver/bin/s3rver.js
azurite=$root_dir/tools/node/node_modules/azurite/dist/src/blob/main.js
[[ -f $s3rver && -f $azurite ]] || die "s3rver or azurite missing: npm ci --prefix tools/node"
source tools/bench/bench_lib.sh
# Debian's awscli (v2) when installed, else the first `aws` on PATH.
aws_bin=/usr/bin/aws
[[ -x $aws_bin ]] || aws_bin=$(command -v aws)
tf=$(realpath "$build/tools/tensorfetch/tensorfetch")
gen=$(realpath "$build/tools/gen/tensorfetch-make-checkpoint")

# --- the checkpoint: Llama-shaped layers of 32 * hidden^2 bytes, 4 shards --------------------------
hidden=576 vocab=32000 shards=4
layer_bytes=$((32 * hidden * hidden)); embed_bytes=$((2 * 2 * vocab * hidden))
layers=$(( (size_mb * 1000000 - embed_bytes + layer_bytes / 2) / layer_bytes ))
(( layers >= 8 )) || layers=8
data=$(realpath "$build")/bench-data/object-store-l$layers-h$hidden-v$vocab-s$shards
if [[ ! -d $data ]]; then
  echo "object_store: generating $data (once)..." >&2
  mkdir -p "$(dirname "$data")"
  "$gen" -o "$data.tmp" --layers "$layers" --hidden "$hidden" --vocab "$vocab" --shards "$shards" >/dev/null
  mv "$data.tmp" "$data"
fi
ckpt_bytes=$(cat "$data"/model-*.safetensors | wc -c)

work=$(mktemp -d "${TMPDIR:-/tmp}/tf-bench-store-XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if (( keep )); then echo "object_store: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# --- TLS -------------------------------------------------------------------------------------------
tls=$work/tls; mkdir -p "$tls"
(
  cd "$tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 \
    -subj '/CN=tensorfetch bench CA' -addext 'basicConstraints=critical,CA:TRUE' -addext 'keyUsage=critical,keyCertSign,cRLSign'
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key -out server.csr -subj '/CN=localhost'
  printf '%s\n' 'subjectAltName=DNS:localhost,IP:127.0.0.1' 'basicConstraints=critical,CA:FALSE' \
    'keyUsage=critical,digitalSignature' 'extendedKeyUsage=serverAuth' > server.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile server.ext
) > "$tls/openssl.log" 2>&1 || { cat "$tls/openssl.log" >&2; die "openssl failed"; }
ca=$tls/ca.pem

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { local i; for i in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
node_env=(env -u LD_PRELOAD -u ASAN_OPTIONS -u UBSAN_OPTIONS)

# --- the stores ------------------------------------------------------------------------------------
s3_port=$(free_port); az_port=$(free_port)
mkdir -p "$work/s3rver" "$work/azurite"
"${node_env[@]}" node --openssl-legacy-provider "$s3rver" -d "$work/s3rver" -p "$s3_port" -a 127.0.0.1 --silent \
  --no-vhost-buckets > "$work/s3rver.log" 2>&1 &
pids+=($!)
"${node_env[@]}" node "$azurite" --blobHost 127.0.0.1 --blobPort "$az_port" --location "$work/azurite" --silent \
  --disableTelemetry --disableProductStyleUrl > "$work/azurite.log" 2>&1 &
pids+=($!)
wait_port "$s3_port" || die "s3rver did not start"
wait_port "$az_port" || die "azurite did not start"

# --- nginx: https in front of each store, a capped stream proxy in front of that ---------------------
ng=$work/nginx; mkdir -p "$ng"; alog=$ng/access.log; touch "$alog"
base=$(free_port)
s3_tls=$((base)) ; s3_cap=$(free_port); az_tls=$(free_port); az_cap=$(free_port)
rate_b=$(case $rate in *[kK]) echo $(( ${rate%?} * 1024 ));; *[mM]) echo $(( ${rate%?} * 1048576 ));; *) echo "$rate";; esac)
{
  bench_nginx_conf_head "$ng" object_store.sh auto "load_module $stream_module;"
  cat <<EOF
  ssl_certificate $tls/server.pem;
  ssl_certificate_key $tls/server.key;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache shared:bench:1m;
  client_max_body_size 0;
  proxy_buffering off;
  proxy_request_buffering off;
  log_format bench '\$msec \$server_port \$connection \$status \$body_bytes_sent "\$http_range" "\$request_method \$uri"';
  access_log $alog bench;
  upstream s3rver { server 127.0.0.1:$s3_port; keepalive 64; }
  upstream azurite { server 127.0.0.1:$az_port; keepalive 64; }
  server { listen 127.0.0.1:$s3_tls ssl; location / { proxy_pass http://s3rver; proxy_http_version 1.1;
           proxy_set_header Connection ""; proxy_set_header Host \$http_host; } }
  server { listen 127.0.0.1:$az_tls ssl; location / { proxy_pass http://azurite; proxy_http_version 1.1;
           proxy_set_header Connection ""; proxy_set_header Host \$http_host; } }
}
stream {
  server { listen 127.0.0.1:$s3_cap; proxy_pass 127.0.0.1:$s3_tls; proxy_download_rate $rate_b; }
  server { listen 127.0.0.1:$az_cap; proxy_pass 127.0.0.1:$az_tls; proxy_download_rate $rate_b; }
}
EOF
} > "$ng/nginx.conf"
"$nginx_bin" -p "$ng" -c nginx.conf -e "$ng/error.log" > "$ng/stdout" 2>&1 &
pids+=($!)
wait_port "$s3_cap" || die "nginx did not start: $(cat "$ng/error.log")"
s3_url=https://127.0.0.1:$s3_cap
az_url=https://127.0.0.1:$az_cap/devstoreaccount1
az_key=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==

# --- clients' configuration (nothing of the machine's own) ----------------------------------------
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
export AWS_SHARED_CREDENTIALS_FILE=$work/aws-credentials AWS_CONFIG_FILE=$work/aws-config
printf '[default]\ns3 =\n  max_concurrent_requests = 32\n' > "$AWS_CONFIG_FILE"
: > "$AWS_SHARED_CREDENTIALS_FILE"
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_CA_BUNDLE || true
export RCLONE_CONFIG=$work/rclone.conf
cat > "$RCLONE_CONFIG" <<EOF
[s3]
type = s3
provider = Other
env_auth = false
access_key_id = S3RVER
secret_access_key = S3RVER
endpoint = $s3_url
force_path_style = true

[s3up]
type = s3
provider = Other
env_auth = false
access_key_id = S3RVER
secret_access_key = S3RVER
endpoint = http://127.0.0.1:$s3_port
force_path_style = true

[azup]
type = azureblob
use_emulator = true
EOF
export AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=https;AccountName=devstoreaccount1;AccountKey=$az_key;BlobEndpoint=$az_url;"
export CURL_CA_BUNDLE=$ca
export AWS_ENDPOINT_URL_S3=$s3_url  # tensorfetch and the AWS CLI (rclone has its own config)

# --- upload (uncapped, plain HTTP to the stores) ----------------------------------------------------
want_s3=0; want_az=0
[[ ,$stores, == *,s3,* ]] && want_s3=1
[[ ,$stores, == *,azure,* ]] && want_az=1
if (( want_s3 )); then
  rclone mkdir s3up:models
  rclone copy "$data" s3up:models/ckpt --transfers 4 -q || die "upload to s3rver failed"
fi
if (( want_az )); then
  # rclone's emulator mode talks to 127.0.0.1:10000: upload through a one-off port map instead.
  sas=$(python3 - "$az_key" <<'EOF'
import base64, hashlib, hmac, sys, time, urllib.parse
key = base64.b64decode(sys.argv[1])
se = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 6 * 3600))
fields = ["racwdl", "", se, "/blob/devstoreaccount1/models", "", "", "", "2022-11-02", "c", "", "", "", "", "", "", ""]
sig = base64.b64encode(hmac.new(key, "\n".join(fields).encode(), hashlib.sha256).digest()).decode()
print("sv=2022-11-02&sr=c&sp=racwdl&se=%s&sig=%s" % (urllib.parse.quote(se, safe=""), urllib.parse.quote(sig, safe="")))
EOF
)
  python3 - "$az_port" "$az_key" <<'EOF' || die "creating the Azure container failed"
import base64, email.utils, hashlib, hmac, http.client, sys
port, key = int(sys.argv[1]), base64.b64decode(sys.argv[2])
date = email.utils.formatdate(usegmt=True)
to_sign = "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:%s\nx-ms-version:2021-08-06\n/devstoreaccount1/devstoreaccount1/models\nrestype:container" % date
sig = base64.b64encode(hmac.new(key, to_sign.encode(), hashlib.sha256).digest()).decode()
c = http.client.HTTPConnection("127.0.0.1", port)
c.request("PUT", "/devstoreaccount1/models?restype=container", headers={"x-ms-date": date, "x-ms-version": "2021-08-06",
          "Authorization": "SharedKey devstoreaccount1:" + sig, "Content-Length": "0"})
r = c.getresponse()
sys.exit(0 if r.status in (201, 409) else r.status)
EOF
  rclone copy "$data" ":azureblob,sas_url='http://127.0.0.1:$az_port/devstoreaccount1/models?$sas':models/ckpt" --transfers 4 -q ||
    die "upload to azurite failed"
  az_sas_url="$az_url/models?$sas"
fi

# --- timing ---------------------------------------------------------------------------------------
now() { date +%s.%N; }
declare -A best
nginx_bytes() { awk -v p="$1" '$2 == p { s += $5 } END { printf "%.0f\n", s }' "$alog"; }
nginx_requests() { awk -v p="$1" '$2 == p { n++ } END { print n + 0 }' "$alog"; }
verify_dir() {  # DIR: every shard and the index byte for byte
  local f
  for f in "$data"/model-*.safetensors "$data"/model.safetensors.index.json; do
    cmp -s "$f" "$1/${f##*/}" || cmp -s "$f" "$(find "$1" -name "${f##*/}" | head -n1)" || die "$1: ${f##*/} differs"
  done
}
run_case() {  # NAME OUTDIR CMD...: best wall of $runs runs, output verified
  local name=$1 out=$2 r t0 t1 wall; shift 2
  for r in $(seq "$runs"); do
    rm -rf "$out" "$work/cache"; mkdir -p "$out"
    sync; t0=$(now)
    "$@" > "$work/$name.out" 2> "$work/$name.err" || die "$name failed: $(tail -n3 "$work/$name.err")"
    t1=$(now)
    wall=$(echo "$t1 - $t0" | bc -l)
    verify_dir "$out"
    if [[ -z ${best[$name]:-} ]] || (( $(echo "$wall < ${best[$name]}" | bc -l) )); then best[$name]=$wall; fi
  done
  printf '  %-14s %7.2f s  %7.1f MB/s\n' "$name" "${best[$name]}" "$(echo "$ckpt_bytes / ${best[$name]} / 1000000" | bc -l)"
}
export TENSORFETCH_CACHE=$work/cache
globs=('model.layers.0.*' 'model.layers.7.*')
sel_bytes=$("$tf" inspect "$data" --json |
  jq '[.tensors[] | select(.name | test("^model\\.layers\\.(0|7)\\.")) | .data_offsets[1] - .data_offsets[0]] | add')
header_bytes=$("$tf" inspect "$data" --json | jq '[.files[] | .header_size + 8] | add')
"$tf" get "$data" "${globs[@]}" -o "$work/ref-get.safetensors" > /dev/null 2>&1

echo "object_store: $(( ckpt_bytes / 1000000 )) MB in $shards shards ($layers layers), per-connection cap $rate, TLS via nginx, best of $runs"
echo "  tensorfetch $("$tf" --version 2>/dev/null | head -n1), $(rclone version | head -n1), $("$aws_bin" --version 2>&1)"
partial() {  # NAME PORT LOCATION: bytes moved by a get of two layers
  local name=$1 port=$2 loc=$3 before after
  rm -rf "$work/cache"; before=$(nginx_bytes "$port"); sleep 0.3
  "$tf" get "$loc" "${globs[@]}" -o "$work/$name.safetensors" > /dev/null 2> "$work/$name.err" || die "$name failed: $(tail -n2 "$work/$name.err")"
  sleep 0.5; after=$(nginx_bytes "$port")
  cmp -s "$work/$name.safetensors" "$work/ref-get.safetensors" || die "$name: output differs from the local get"
  printf '  %-14s moved %d bytes for %d tensor bytes + %d header bytes: %.4fx\n' "$name" $((after - before)) "$sel_bytes" \
    "$header_bytes" "$(echo "($after - $before) / ($sel_bytes + $header_bytes)" | bc -l)"
}
inspect_case() {  # NAME PORT LOCATION
  local name=$1 port=$2 loc=$3 before after t0 t1
  rm -rf "$work/cache"; before=$(nginx_requests "$port"); t0=$(now)
  "$tf" inspect "$loc" > /dev/null 2> "$work/$name.err" || die "$name failed: $(tail -n2 "$work/$name.err")"
  t1=$(now); sleep 0.5; after=$(nginx_requests "$port")
  printf '  %-14s %d requests (listing, index, %d shard headers: 3 rounds), %.2f s\n' "$name" $((after - before)) "$shards" \
    "$(echo "$t1 - $t0" | bc -l)"
}

if (( want_s3 )); then
  echo "S3 (s3rver):"
  run_case tf-download "$work/dl-tf" "$tf" download s3://models/ckpt/ -o "$work/dl-tf"
  run_case rclone "$work/dl-rclone" rclone copy s3:models/ckpt "$work/dl-rclone" --transfers 4 --multi-thread-streams 16 --ca-cert "$ca"
  run_case aws "$work/dl-aws" "$aws_bin" s3 cp --recursive s3://models/ckpt/ "$work/dl-aws" --endpoint-url "$s3_url" --ca-bundle "$ca" --only-show-errors
  faster=$(echo "if (${best[rclone]} < ${best[aws]}) ${best[rclone]} else ${best[aws]}" | bc -l)
  printf '  ratio: tensorfetch %.2fx the faster peer (rclone %.2fx, aws %.2fx)\n' "$(echo "$faster / ${best[tf-download]}" | bc -l)" \
    "$(echo "${best[rclone]} / ${best[tf-download]}" | bc -l)" "$(echo "${best[aws]} / ${best[tf-download]}" | bc -l)"
  partial tf-get "$s3_tls" s3://models/ckpt/
  inspect_case tf-inspect "$s3_tls" s3://models/ckpt/
fi
if (( want_az )); then
  echo "Azure (azurite):"
  run_case az-tf-download "$work/dl-aztf" "$tf" download az://devstoreaccount1/models/ckpt/ -o "$work/dl-aztf"
  run_case az-rclone "$work/dl-azrc" rclone copy ":azureblob,sas_url='$az_sas_url':models/ckpt" "$work/dl-azrc" --transfers 4 \
    --multi-thread-streams 16 --ca-cert "$ca"
  printf '  ratio: tensorfetch %.2fx rclone azureblob\n' "$(echo "${best[az-rclone]} / ${best[az-tf-download]}" | bc -l)"
  partial az-tf-get "$az_tls" az://devstoreaccount1/models/ckpt/
  inspect_case az-tf-inspect "$az_tls" az://devstoreaccount1/models/ckpt/
fi
