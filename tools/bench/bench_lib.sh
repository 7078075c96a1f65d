# Shared start-up of the benches that drive the Hub-like test server (sourced, not run):
#   bench_build BUILD_DIR           builds the CLI, the checkpoint generator and the test server
#                                   in BUILD_DIR (a release build, set up if missing); sets $tf,
#                                   $gen and $server_bin
#   bench_workdir NAME              makes $work, a temporary directory removed on exit (the
#                                   server, if started, is stopped first)
#   bench_start_server [ARGS...]    starts the test server on $work/root with its request log at
#                                   $work/log.jsonl (more server arguments may follow); sets
#                                   $endpoint and $server_pid
# The caller runs `set -euo pipefail` and `cd` to the repository root first.

bench_build() {
  local build=$1
  [[ -f $build/build.ninja ]] || meson setup "$build" --buildtype=release >/dev/null
  ninja -C "$build" tools/tensorfetch/tensorfetch tools/gen/tensorfetch-make-checkpoint \
    tools/hubserver/tensorfetch-test-server >/dev/null
  tf=$build/tools/tensorfetch/tensorfetch
  gen=$build/tools/gen/tensorfetch-make-checkpoint
  server_bin=$build/tools/hubserver/tensorfetch-test-server
}

bench_workdir() {
  work=$(mktemp -d "/tmp/tf-bench-$1-XXXXXX")
  server_pid=""
  trap '[[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
}

bench_start_server() {
  "$server_bin" --root "$work/root" --log "$work/log.jsonl" "$@" > "$work/endpoint" &
  server_pid=$!
  for _ in $(seq 100); do [[ -s $work/endpoint ]] && break; sleep 0.05; done
  endpoint=$(head -n1 "$work/endpoint")
}
