# SPDX-License-Identifier: Apache-2.0
"""Runs safetensors' own Python tests against tensorfetch.safe_open, locally and over HTTP, and
classifies the failures (see known.py). Called by tools/safetensors-tests.sh; run with
Debian's /usr/bin/python3 (numpy, torch 1.13, pytest)."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from known import CLASSES, ENV_PATTERNS, KNOWN, VACUOUS  # noqa: E402

FILES = ["test_simple.py", "test_pt_comparison.py", "test_pt_model.py", "test_handle.py",
         "test_multithreaded.py"]
MODES = ["local", "http"]


def bindings_dir(src):
    for cand in (os.path.join(src, "bindings", "python"), src):
        if os.path.isdir(os.path.join(cand, "tests")) and os.path.isdir(os.path.join(cand, "py_src", "safetensors")):
            return cand
    print(f"safetensors-tests: {src} is not a safetensors checkout (no bindings/python/tests "
          "and bindings/python/py_src/safetensors)", file=sys.stderr)
    sys.exit(2)


def assemble_package(bindings, root):
    """safetensors' own Python layer, unchanged, with the shim in place of the compiled module."""
    pkg = os.path.join(root, "pkg", "safetensors")
    os.makedirs(pkg)
    src = os.path.join(bindings, "py_src", "safetensors")
    for name in os.listdir(src):
        if name.endswith(".py"):
            shutil.copy(os.path.join(src, name), pkg)
    shutil.copy(os.path.join(HERE, "_safetensors_rust.py"), pkg)
    return os.path.dirname(pkg)


def run_one(bindings, pkg_path, tf_path, root, mode, test_file, timeout):
    work = os.path.join(root, mode, test_file[:-3])
    tests = os.path.join(work, "tests")
    shutil.copytree(os.path.join(bindings, "tests", "data"), os.path.join(tests, "data"))
    shutil.copy(os.path.join(bindings, "tests", test_file), tests)
    report = os.path.join(work, "report.jsonl")
    log = os.path.join(work, "pytest.log")
    env = dict(os.environ, TF_ST_MODE=mode, TF_ST_REPORT=report, PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([pkg_path, tf_path, HERE]))
    # A thread's exception fails its test (test_multithreaded asserts in threads, which pytest
    # would otherwise only report as a warning).
    cmd = [sys.executable, "-m", "pytest", "-p", "tf_st_report", "-p", "no:cacheprovider",
           "-W", "error::pytest.PytestUnhandledThreadExceptionWarning", "-q", "-rN",
           "--rootdir", work, os.path.join("tests", test_file)]
    with open(log, "w") as out:
        try:
            rc = subprocess.run(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    results, http_requests = [], 0
    if os.path.exists(report):
        with open(report) as f:
            results = [json.loads(line) for line in f if line.strip()]
        http_requests = sum(r.get("http_requests", 0) for r in results if r.get("session"))
        results = [r for r in results if not r.get("session")]
    for r in results:
        r["id"] = r["id"].split("tests/", 1)[-1]
    if rc not in (0, 1, 5) or not os.path.exists(report):
        with open(log) as f:
            tail = [l.strip() for l in f.read().splitlines() if l.strip()][-1:] or [""]
        results.append({"id": f"{test_file}::<run>", "outcome": "error", "tensorfetch": False,
                        "message": f"pytest exit {rc}: {tail[0]}"})
    return results, http_requests, log


def classify(mode, r):
    for test_id, modes, cls, pattern, reason in KNOWN:
        if test_id == r["id"] and mode in modes and re.search(pattern, r["message"]):
            return cls, reason, (test_id, mode)
    for pattern, cls, reason in ENV_PATTERNS:
        if re.search(pattern, r["message"]):
            return cls, reason, None
    return None, "unclassified: not in tools/safetensors_tests/known.py", None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--tensorfetch-python", required=True)
    ap.add_argument("--mode", choices=MODES + ["both"], default="both")
    ap.add_argument("--file", action="append", choices=FILES)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per test file and mode")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    bindings = bindings_dir(os.path.abspath(args.src))
    modes = MODES if args.mode == "both" else [args.mode]
    files = args.file or FILES
    for f in files:
        if not os.path.isfile(os.path.join(bindings, "tests", f)):
            sys.exit(f"safetensors-tests: {bindings}/tests/{f} is missing")
    root = tempfile.mkdtemp(prefix="tf-safetensors-tests-")
    pkg_path = assemble_package(bindings, root)

    rows, failures, used, vacuous = [], [], set(), []
    for mode in modes:
        for test_file in files:
            results, http_requests, log = run_one(bindings, pkg_path, os.path.abspath(args.tensorfetch_python),
                                   root, mode, test_file, args.timeout)
            count = {k: sum(r["outcome"] == k for r in results) for k in ("passed", "failed", "skipped", "error")}
            count["tf"] = sum(r["outcome"] == "passed" and r["tensorfetch"] for r in results)
            count["http"] = http_requests
            rows.append((test_file, mode, count))
            print(f"  ran {test_file:<24} {mode:<5}  {count['passed']} passed, {count['failed']} failed, "
                  f"{count['skipped']} skipped, {count['error']} errors", flush=True)
            for r in results:
                for test_id, cls, reason in VACUOUS:
                    if r["id"] == test_id and r["outcome"] == "passed" and not r["tensorfetch"]:
                        vacuous.append((mode, test_id, cls, reason))
                if r["outcome"] in ("failed", "error"):
                    cls, reason, key = classify(mode, r)
                    if key:
                        used.add(key)
                    failures.append((mode, r, cls, reason, log))

    print()
    print(f"safetensors' tests ({bindings}) against tensorfetch.safe_open")
    print(f"{'file':<24} {'mode':<6} {'passed':>6} {'failed':>6} {'skipped':>7} {'errors':>6}   {'via tf':>6} {'HTTP reqs':>9}")
    for test_file, mode, c in rows:
        print(f"{test_file:<24} {mode:<6} {c['passed']:>6} {c['failed']:>6} {c['skipped']:>7} {c['error']:>6}   {c['tf']:>6} {c['http']:>9}")
    total = {k: sum(c[k] for _, _, c in rows) for k in ("passed", "failed", "skipped", "error", "tf", "http")}
    print(f"{'total':<24} {'':<6} {total['passed']:>6} {total['failed']:>6} {total['skipped']:>7} {total['error']:>6}   {total['tf']:>6} {total['http']:>9}")
    print("('via tf': passed tests that opened something with tensorfetch; the other passes test "
          "safetensors' own Python helpers or the shim's writer. 'HTTP reqs': requests the loopback "
          "server answered.)")
    if vacuous:
        print("\nPasses that check nothing here (listed in known.py VACUOUS):")
        for mode, test_id, cls, reason in vacuous:
            print(f"  [{mode}] {test_id}: ({cls}) {CLASSES[cls]}: {reason}")

    if failures:
        print("\nFailures:")
        for mode, r, cls, reason, log in failures:
            label = f"({cls}) {CLASSES[cls]}" if cls else "(?) UNCLASSIFIED"
            print(f"  [{mode}] {r['id']}  [{r['outcome']}]")
            print(f"      first error: {r['message']}")
            print(f"      class: {label}: {reason}")
    by_class = {}
    for _, _, cls, _, _ in failures:
        by_class[cls] = by_class.get(cls, 0) + 1
    print("\nBy class: " + (", ".join(f"({c}) {CLASSES[c]}: {n}" for c, n in sorted(by_class.items()) if c)
                            or "no failures")
          + (f", UNCLASSIFIED: {by_class[None]}" if None in by_class else ""))
    for test_id, modes_, cls, _, reason in KNOWN:
        for m in modes_:
            if m in modes and test_id.split("::")[0] in files and (test_id, m) not in used:
                print(f"  stale entry in known.py: [{m}] {test_id} ({cls}) did not fail as listed")

    bad = by_class.get("a", 0) + by_class.get(None, 0)
    if args.keep or bad:
        print(f"\nwork directory (logs: <mode>/<file>/pytest.log): {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nresult: {'FAIL' if bad else 'OK'} ({bad} failures are tensorfetch bugs or unclassified)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
