#!/usr/bin/env bash
# Long libFuzzer runs of every fuzz target (not part of CI, whose tools/test.sh runs each for
# 20 s): builds build-fuzz with clang, AddressSanitizer + UndefinedBehaviorSanitizer and
# coverage feedback from the library (-fsanitize=fuzzer-no-link), then runs each target for
# SECONDS (default 600) from its seeds (tests/fuzz/corpus, testdata/) into a work corpus under
# build-fuzz/, replays the regressions first, and ends with one line per target and
# "N passed, N failed". A crash leaves its input as build-fuzz/tests/fuzz/crash-TARGET-*.
# Usage: tools/fuzz.sh [SECONDS] [TARGET...]     (targets: header index slice)
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
(( ${#targets[@]} )) || targets=(header index slice)
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: tools/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 1; }
tools/install-deps.sh --fuzz || exit 1

dir=build-fuzz-long
if [[ ! -f $dir/build.ninja ]]; then
  CXX=clang++-14 meson setup "$dir" -Dfuzz=true -Dtests=false -Dbench=false -Dpython=disabled -Dmpi=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false \
    "-Dcpp_args=['-fsanitize=fuzzer-no-link','-fno-sanitize-recover=undefined']" >/dev/null || exit 1
fi
ninja -C "$dir" || exit 1

export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
passed=0 failed=0 summary=""
for t in "${targets[@]}"; do
  exe=$dir/tests/fuzz/fuzz-$t
  [[ -x $exe ]] || { echo "tools/fuzz.sh: no target '$t' ($exe)" >&2; exit 1; }
  seeds=(tests/fuzz/corpus/"$t")
  case $t in
    header) seeds+=(testdata/safetensors testdata/other-formats) ;;
    index) seeds+=(testdata/index) ;;
  esac
  work=$dir/corpus-$t
  mkdir -p "$work"
  log=$dir/fuzz-$t.log
  echo "=== fuzz-$t: regressions, then ${seconds} s (log: $log)"
  if "$exe" "tests/fuzz/regressions/$t" -runs=0 >"$log" 2>&1 &&
     "$exe" "$work" "${seeds[@]}" -dict="tests/fuzz/$t.dict" -max_total_time="$seconds" -max_len=65536 \
       -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/tests/fuzz/crash-$t-" \
       >>"$log" 2>&1; then
    passed=$((passed + 1))
    line="fuzz-$t: ok, $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs in ${seconds} s, corpus $(ls "$work" | wc -l) inputs"
  else
    failed=$((failed + 1))
    line="fuzz-$t: FAILED (see $log; the input is $dir/tests/fuzz/crash-$t-*)"
    tail -n 30 "$log"
  fi
  echo "$line"
  summary+="$line"$'\n'
done
echo
printf '%s' "$summary"
echo "${passed} passed, ${failed} failed"
(( failed == 0 ))
