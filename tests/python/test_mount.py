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


_needs_fuse_cli = pytest.mark.skipif(os.environ.get("TENSORFETCH_FUSE_BUILT") == "0",
                                     reason="the CLI was built without the meson feature fuse: no `tensorfetch mount`")


@_needs_fuse_cli
def test_mount_context_manager_serves_open_memmap_and_safe_open_then_unmounts(hub, remote, reference, tmp_path):
    shard = "model-00001-of-00003.safetensors"
    source_dir = reference / "llama-tiny-sharded"
    with tensorfetch.mount("hf://org/sharded", tmp_path / "mnt", cli=CLI, **remote) as m:
        path = Path(m.path)
        assert _mounted(path) and os.fspath(m) == str(tmp_path / "mnt")
        # Every file of the repo is there, with the source's sizes; listing made no request.
        hub.clear()
        assert sorted(p.name for p in path.iterdir()) == sorted(p.name for p in source_dir.iterdir())
        assert all((path / p.name).stat().st_size == p.stat().st_size for p in source_dir.iterdir())
        assert hub.log() == []
        # open/read of a small file, numpy.memmap of a shard, safe_open on the mounted path.
        assert (path / "generation_config.json").read_bytes() == (source_dir / "generation_config.json").read_bytes()
        mm = np.memmap(path / shard, dtype=np.uint8, mode="r")
        assert mm.tobytes() == (source_dir / shard).read_bytes()
        del mm
        torch = pytest.importorskip("torch")
        name = "model.embed_tokens.weight"
        with tensorfetch.safe_open(str(path / shard), framework="pt") as mounted, \
                tensorfetch.safe_open(str(source_dir / shard), framework="pt") as local:
            assert torch.equal(mounted.get_tensor(name).view(torch.int16), local.get_tensor(name).view(torch.int16))
        # What travelled: the small file (one whole resolve) and that shard's bytes, once each.
        log = hub.log()
        assert {r["file"] for r in cdn_requests(log)} == {shard}
        assert [r["file"] for r in log if r["kind"] == "resolve"] == ["generation_config.json"]
    assert not _mounted(path)
    assert m.returncode == 0
    assert "reads (" in m.log()  # the totals the mount printed as it ended


@_needs_fuse_cli
def test_mount_context_manager_unmounts_when_the_block_raises(hub, remote, tmp_path):
    with pytest.raises(RuntimeError, match="raised inside"):
        with tensorfetch.mount("hf://org/sharded", tmp_path / "mnt", cli=CLI, **remote) as m:
            assert _mounted(Path(m.path))
            raise RuntimeError("raised inside the with block")
    assert not _mounted(tmp_path / "mnt")
    assert m.returncode == 0  # a clean SIGTERM unmount


@_needs_fuse_cli
def test_mount_that_cannot_start_raises_the_cli_error_and_leaves_nothing_mounted(hub, remote, tmp_path):
    (tmp_path / "mnt").mkdir()
    with pytest.raises(tensorfetch.NetworkError, match="org/no-such-repo") as e:
        tensorfetch.mount("hf://org/no-such-repo", tmp_path / "mnt", cli=CLI, **remote)
    assert e.value.exit_code == 3
    assert not _mounted(tmp_path / "mnt")
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(tensorfetch.TensorfetchError, match="not a directory") as e:
        tensorfetch.mount("hf://org/sharded", tmp_path / "a-file", cli=CLI, **remote)
    assert e.value.exit_code == 1


def test_mount_refuses_unknown_or_bad_options_before_starting_anything(tmp_path):
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        tensorfetch.mount("hf://org/sharded", tmp_path, cli=CLI, colour="red")
    with pytest.raises(ValueError, match="tensor_window"):
        tensorfetch.mount("hf://org/sharded", tmp_path, cli=CLI, tensor_window=1)
