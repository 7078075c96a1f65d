#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark of the Python package against the goals of issue 11.

1. get_tensor of a cached tensor: microseconds per call (NumPy and torch), for tensors of 4 KiB to
   256 MiB (zero copy: the time must not grow with the size; goal <= 20 us).
2. Remote prefetch throughput against the CLI's `get` of the same tensors, in the same run, from
   the Hub-like test server on loopback (plain HTTP), each run with a fresh cache, interleaved,
   best of RUNS (goal: prefetch >= 0.95 x the CLI).
3. RSS of a ~2 GB remote `load(framework="pt")`: the peak of RssAnon (sampled every 5 ms in the
   process) above the interpreter's own after importing torch and tensorfetch (goal <= 64 MiB):
   the tensors' bytes stay in the page cache (the mmap of the cache blob).

Usage: tools/bench/python.py [BUILD_DIR] [--runs R] [--size-gb G] [--keep]
  BUILD_DIR  default build (needs -Dpython=enabled: BUILD/lib/python, tensorfetch CLI, test server
             and tensorfetch-make-checkpoint). A release build gives the figures to report.
Data (~2 GB checkpoint + caches) goes to a temp dir under BUILD_DIR, removed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--size-gb", type=float, default=2.0)
ap.add_argument("--keep", action="store_true")
args = ap.parse_args()

build = Path(args.build).resolve()
pkg = build / "lib" / "python"
cli = build / "tools" / "tensorfetch" / "tensorfetch"
server_bin = build / "tools" / "hubserver" / "tensorfetch-test-server"
maker = build / "tools" / "gen" / "tensorfetch-make-checkpoint"
for p in (pkg / "tensorfetch", cli, server_bin, maker):
    if not p.exists():
        sys.exit(f"python.py: {p} is missing (meson setup {build} -Dpython=enabled && ninja -C {build})")
sys.path.insert(0, str(pkg))
import numpy as np  # noqa: E402

import tensorfetch  # noqa: E402

work = Path(tempfile.mkdtemp(prefix="bench-python-", dir=build))
env = dict(os.environ, PYTHONPATH=str(pkg), HF_HUB_OFFLINE="0")


def rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


# ---------------------------------------------------------------------------------------------
# 1. get_tensor of a cached tensor
def write_safetensors(path: Path, sizes: dict) -> None:
    header = {}
    offset = 0
    for name, n in sizes.items():
        header[name] = {"dtype": "F32", "shape": [n // 4], "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, n in sizes.items():
            f.write(np.arange(n // 4, dtype=np.float32).tobytes())


sizes = {f"t{n}": n for n in (4 << 10, 1 << 20, 16 << 20, 256 << 20)}
local = work / "sizes.safetensors"
write_safetensors(local, sizes)
print("1. get_tensor of a cached tensor (us per call, best of 5 x 2000 calls)")
results = {}
for framework in ("np", "pt"):
    try:
        f = tensorfetch.safe_open(local, framework=framework)
    except Exception as e:  # noqa: BLE001
        print(f"   {framework}: n/a ({e})")
        continue
    for name, n in sizes.items():
        f.get_tensor(name)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                f.get_tensor(name)
            best = min(best, time.perf_counter() - t0)
        us = best / 2000 * 1e6
        results[(framework, n)] = us
        print(f"   {framework}  {n / 1024:>10.0f} KiB  {us:6.2f} us")
worst = max(results.values())
print(f"   worst {worst:.2f} us per call (goal <= 20 us, independent of size)")

# ---------------------------------------------------------------------------------------------
# 2 and 3: a ~2 GB checkpoint served by the test server
hidden = 2048
layers = max(1, round(args.size_gb * 1e9 / (16 * hidden * hidden * 2)))
root = work / "root"
subprocess.run([str(maker), "-o", str(root / "org" / "big"), "--layers", str(layers), "--hidden", str(hidden),
                "--shards", "4"], check=True, stdout=subprocess.DEVNULL)
total = sum(p.stat().st_size for p in (root / "org" / "big").glob("*.safetensors"))
for p in (root / "org" / "big").glob("*.safetensors"):  # into the page cache: the disk is out of it
    with open(p, "rb") as fh:
        while fh.read(64 << 20):
            pass
server = subprocess.Popen([str(server_bin), "--root", str(root), "--port", "0"], stdout=subprocess.PIPE, text=True)
endpoint = server.stdout.readline().strip()
try:
    sel = [f"model.layers.{i}.*" for i in range(min(layers, max(1, layers // 2)))]
    info = tensorfetch.inspect("hf://org/big", endpoint=endpoint, cache_dir=str(work / "c0"))
    import fnmatch

    sel_bytes = sum(t["data_offsets"][1] - t["data_offsets"][0] for t in info["tensors"]
                    if any(fnmatch.fnmatchcase(t["name"], p) for p in sel))
    print(f"\n2. remote prefetch vs CLI get of the same {sel_bytes / 2**20:.0f} MiB ({len(sel)} layers of "
          f"{total / 1e9:.2f} GB), test server on loopback, fresh cache each run, best of {args.runs}")
    prefetch_script = textwrap.dedent("""
        import sys, time, tensorfetch
        t0 = time.perf_counter()
        with tensorfetch.safe_open("hf://org/big", framework="pt", endpoint=sys.argv[1], cache_dir=sys.argv[2]) as f:
            f.prefetch(sys.argv[3:], progress=False)
        print(time.perf_counter() - t0)
    """)
    times = {"cli get": [], "prefetch": []}
    for r in range(args.runs):
        order = ["cli get", "prefetch"] if r % 2 == 0 else ["prefetch", "cli get"]
        for case in order:
            cache = work / f"cache-{case.replace(' ', '-')}-{r}"
            if case == "cli get":
                t0 = time.perf_counter()
                subprocess.run([str(cli), "get", "hf://org/big", *sel, "-o", "/dev/null", "-q", "--endpoint", endpoint,
                                "--cache-dir", str(cache)], check=True, env=env)
                times[case].append(time.perf_counter() - t0)
            else:
                # Timed inside the interpreter, from open to the end of prefetch (the interpreter's
                # start and numpy's import are not tensorfetch's cost; the CLI has none).
                out = subprocess.run([sys.executable, "-c", prefetch_script, endpoint, str(cache), *sel], check=True,
                                     env=env, capture_output=True, text=True).stdout
                times[case].append(float(out.split()[-1]))
            shutil.rmtree(cache, ignore_errors=True)
    for case, ts in times.items():
        print(f"   {case:9s} best {min(ts):.2f} s  {sel_bytes / min(ts) / 2**20:7.0f} MiB/s  (runs: "
              + ", ".join(f"{t:.2f}" for t in ts) + ")")
    ratio = min(times["cli get"]) / min(times["prefetch"])
    print(f"   prefetch / CLI throughput: {ratio:.2f} (goal >= 0.95; the CLI's time is its process's wall time, "
          "including writing its output to /dev/null; prefetch's is open + prefetch inside the interpreter)")

    print(f"\n3. RSS of a {total / 1e9:.2f} GB remote load(framework=\"pt\"), fresh cache")
    rss_script = textwrap.dedent("""
        import sys, threading, time
        import torch, tensorfetch
        def anon():
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
        base = anon(); peak = [base]; done = threading.Event()
        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], anon()); time.sleep(0.005)
        th = threading.Thread(target=sample); th.start()
        t0 = time.perf_counter()
        sd = tensorfetch.load("hf://org/big", framework="pt", progress=False, endpoint=sys.argv[1], cache_dir=sys.argv[2])
        secs = time.perf_counter() - t0
        n = sum(t.numel() * t.element_size() for t in sd.values())
        s = sum(float(t.float().sum()) for t in list(sd.values())[:2])  # touch some of them
        done.set(); th.join()
        peak[0] = max(peak[0], anon())
        print(base, peak[0], n, secs)
    """)
    out = subprocess.run([sys.executable, "-c", rss_script, endpoint, str(work / "cache-rss")], check=True, env=env,
                         capture_output=True, text=True).stdout.split()
    base, peak, n, secs = int(out[0]), int(out[1]), int(out[2]), float(out[3])
    print(f"   loaded {n / 2**30:.2f} GiB of tensors in {secs:.1f} s; RssAnon after imports {base / 1024:.0f} MiB, "
          f"peak {peak / 1024:.0f} MiB: +{(peak - base) / 1024:.1f} MiB (goal <= 64 MiB)")
finally:
    server.terminate()
    server.wait()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")
