# SPDX-License-Identifier: Apache-2.0
"""`tensorfetch mount` read from Python (issue 21): tensorfetch.safe_open and numpy.memmap on a
mounted Hub repo of the test server give the reference's bytes, and the server moves only the
tensors read. Needs a CLI built with the meson feature `fuse` and a machine that can mount FUSE
(/dev/fuse, root or fusermount3): without either the test FAILS, saying why."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import tensorfetch
from conftest import CLI, cdn_requests


def _mounted(path: Path) -> bool:
    try:
        return os.stat(path).st_dev != os.stat(path.parent).st_dev
    except OSError:
        return False


class Mounted:
    """`tensorfetch mount LOCATION DIR` in the foreground; SIGTERM on exit."""

    def __init__(self, location: str, path: Path, *options: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([str(CLI), "mount", location, str(path), *options], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not _mounted(path) and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if not _mounted(path):
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"tensorfetch mount did not mount {path} (needs /dev/fuse and a CLI built with "
                                 f"the meson feature fuse): {err}")

    def __enter__(self) -> "Mounted":
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=15)
        assert self.proc.returncode == 0, err
        assert not _mounted(self.path)


@pytest.mark.skipif(os.environ.get("TENSORFETCH_FUSE_BUILT") == "0",
                    reason="the CLI was built without the meson feature fuse: no `tensorfetch mount`")
def test_safe_open_and_memmap_on_a_mounted_repo_read_the_source_bytes_fetching_only_them(hub, remote, reference,
                                                                                         tmp_path):
    shard = "model-00002-of-00003.safetensors"
    name = "model.layers.3.mlp.up_proj.weight"
    with Mounted("hf://org/sharded", tmp_path / "mnt", "--endpoint", remote["endpoint"], "--cache-dir",
                 remote["cache_dir"]) as m:
        hub.clear()
        torch = pytest.importorskip("torch")  # (the tensor is BF16, which NumPy lacks)
        with tensorfetch.safe_open(str(m.path / shard), framework="pt") as mounted, \
                tensorfetch.safe_open(str(reference / "llama-tiny-sharded" / shard), framework="pt") as local:
            assert sorted(mounted.keys()) == sorted(local.keys())
            got = mounted.get_tensor(name)
            want = local.get_tensor(name)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got.view(torch.int16), want.view(torch.int16))
            nbytes = want.numel() * want.element_size()
        # Only that shard's bytes travelled, and little more than the tensor: safe_open maps the
        # file, and the kernel answers a page fault with a read-around of up to 128 KiB (FUSE's
        # default read-ahead), whose tensors the mount then fetches whole; the reference's
        # tensors are small (20 KiB), so the read-around shows here (not with large tensors).
        cdn = cdn_requests(hub.log())
        assert {r["file"] for r in cdn} == {shard}, cdn
        moved = sum(r["body_bytes"] for r in cdn)
        assert nbytes <= moved <= nbytes + 2 * 128 * 1024, cdn
        ranges = sorted((int(r["range"][6:].split("-")[0]), int(r["range"].split("-")[1])) for r in cdn)
        assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), ranges  # no byte asked twice
        # numpy.memmap of a whole shard: the source's bytes.
        source = (reference / "llama-tiny-sharded" / shard).read_bytes()
        mm = np.memmap(m.path / shard, dtype=np.uint8, mode="r")
        assert mm.tobytes() == source
        del mm
