#!/usr/bin/env bash
# Installs what is needed, builds from scratch and runs every test: the unit and CLI suites
# with warnings as errors, again under AddressSanitizer + UndefinedBehaviorSanitizer, and a
# short smoke run of every libFuzzer target. Ends with one line: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --fuzz || exit 1
# Several suites compare against files written by the reference libraries, beside the clone.
if [[ ! -f ../shared/reference-checkpoints/MANIFEST.json ]]; then
  echo "tools/test.sh: $(cd .. && pwd)/shared/reference-checkpoints/MANIFEST.json is missing: the" \
    "suites read the reference checkpoints there (see the README's Two commands); run from a clone" \
    "beside that shared/ directory, or by hand with meson setup -Dreference_dir=DIR" >&2
  exit 1
fi

passed=0 failed=0
report=""  # each failure ("stage: test", with the test's last lines), repeated at the end
run_suite() {  # NAME BUILD_DIR MESON_TEST_ARGS...
  local name=$1 dir=$2; shift 2
  echo "=== $name"
  meson test -C "$dir" --print-errorlogs "$@"
  local log="$dir/meson-logs/testlog.json"
  if [[ -f $log ]]; then
    local p f
    p=$(grep -c '"result": "OK"' "$log" || true)
    f=$(grep -c '"result": "\(FAIL\|TIMEOUT\|ERROR\|UNEXPECTEDPASS\)"' "$log" || true)
    passed=$((passed + p)); failed=$((failed + f))
    echo "--- $name: $p passed, $f failed"
    (( f > 0 )) && report+=$(failed_tests "$log" | sed "s/^[^ ]/$name: &/")$'\n'
  else
    failed=$((failed + 1)); report+="$name: no test log ($log)"$'\n'
  fi
}
# The names of a meson test log's failed tests, each followed by the lines that say why
# (indented), so that the end of a long CI log still says what failed and why.
failed_tests() {  # TESTLOG_JSON
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    t = json.loads(line)
    if t.get("result") in ("FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"):
        print(f'{t["name"]} ({t["result"]}, {t.get("duration", 0):.1f} s)')
        out = ((t.get("stdout") or "") + (t.get("stderr") or "")).splitlines()
        # Catch2 and pytest name the failed check: show from a little before the first one.
        first = next((i for i, o in enumerate(out) if "FAILED" in o or o.startswith("E ")), None)
        out = out[max(0, first - 15):first + 45] if first is not None else out[-40:]
        for o in out:
            print("      | " + o[:300])
PY
}
build() {  # DIR MESON_SETUP_ARGS...
  local dir=$1; shift
  rm -rf "$dir"
  if ! { meson setup "$dir" "$@" >/dev/null && ninja -C "$dir"; }; then
    echo "=== build $dir FAILED"; failed=$((failed + 1)); report+="build $dir failed"$'\n'; return 1
  fi
}

# 1. Warnings as errors, every suite (with the Python package and its pytest suite).
build build-ci --werror -Dbench=true -Dpython=enabled && run_suite "warnings-as-errors" build-ci

# 1b. The Python wheel as a user installs it (docs/python.md): pip install --no-build-isolation into a
#     venv that sees Debian's numpy/torch, then the package is imported from outside the tree.
wheel_check() {
  local tmp rc src=$PWD; tmp=$(mktemp -d)
  /usr/bin/python3 -m venv --system-site-packages "$tmp/venv" &&
    "$tmp/venv/bin/pip" install -q --no-build-isolation --no-deps . &&
    (cd "$tmp" && "$tmp/venv/bin/python" - "$src/../shared/reference-checkpoints" <<'PY'
import os, sys, tensorfetch
assert "venv" in tensorfetch.__file__, tensorfetch.__file__
ref = os.path.join(sys.argv[1], "dtypes", "model.safetensors")
if os.path.isfile(ref):
    with tensorfetch.safe_open(ref, framework="np") as f:
        assert f.get_tensor("f32").shape == (2, 3, 4)
print("wheel ok:", tensorfetch.__version__, tensorfetch.__file__)
PY
    )
  rc=$?
  rm -rf "$tmp"
  return $rc
}
echo "=== python wheel"
wheel_log=$(mktemp)
if wheel_check 2>&1 | tee "$wheel_log"; then passed=$((passed + 1)); else
  echo "--- python wheel FAILED"; failed=$((failed + 1))
  report+="python wheel: failed"$'\n'$(tail -n 40 "$wheel_log" | sed 's/^/      | /')$'\n'
fi
rm -f "$wheel_log"

# 2. AddressSanitizer + UndefinedBehaviorSanitizer (any report fails the test), at -O0: it
#    compiles about 7 times faster than -O2 under the sanitizers, and the tests stay fast (timed
#    checks loosen themselves under ASan). GCC 12's -Wmaybe-uninitialized gives false reports
#    under -fsanitize (e.g. inside <regex>); that warning stays an error in build 1, which
#    compiles the same code without sanitizers. The Python package is built too, and its pytest
#    suite runs with the sanitizer runtimes preloaded into the interpreter (tests/python/meson.build).
build build-asan --werror --buildtype=debug -Dbench=false -Dpython=enabled -Db_sanitize=address,undefined \
  "-Dcpp_args=['-fno-sanitize-recover=all','-Wno-maybe-uninitialized']" \
  -Dcpp_link_args=-fno-sanitize-recover=all &&
  run_suite "asan+ubsan" build-asan --timeout-multiplier 4

# 3. libFuzzer targets (clang), a short run of each from the seed corpus.
CXX=clang++-14 build build-fuzz -Dfuzz=true -Dtests=false -Dbench=false \
  -Db_sanitize=address,undefined -Db_lundef=false &&
  run_suite "fuzz smoke" build-fuzz --suite fuzz

echo
[[ -n $report ]] && printf '=== what failed\n%s\n' "$report"
echo "${passed} passed, ${failed} failed"
(( failed == 0 ))
