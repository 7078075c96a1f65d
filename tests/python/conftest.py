# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python tests: the reference checkpoints, and the Hub-like test server
(tools/hubserver, `tensorfetch-test-server`) run as a subprocess, with its request log.

Environment (set by tests/python/meson.build; defaults for a run from the repository root):
PYTHONPATH (the package: BUILD/lib/python), TENSORFETCH_TEST_SERVER, TENSORFETCH_CLI,
TENSORFETCH_REFERENCE_DIR.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _path_from_env(var: str, default: Path) -> Path:
    return Path(os.environ.get(var) or default)


REFERENCE = _path_from_env("TENSORFETCH_REFERENCE_DIR", ROOT.parent / "shared" / "reference-checkpoints")
SERVER = _path_from_env("TENSORFETCH_TEST_SERVER", ROOT / "build" / "tools" / "hubserver" / "tensorfetch-test-server")
CLI = _path_from_env("TENSORFETCH_CLI", ROOT / "build" / "tools" / "tensorfetch" / "tensorfetch")

# Repos the server serves: name -> reference directory.
REPOS = {"org/sharded": "llama-tiny-sharded", "org/single": "llama-tiny-single", "org/dtypes": "dtypes"}


@pytest.fixture(scope="session")
def reference() -> Path:
    if not (REFERENCE / "MANIFEST.json").is_file():
        pytest.skip(f"no reference checkpoints at {REFERENCE}")
    return REFERENCE


@pytest.fixture(scope="session")
def manifest(reference: Path) -> Dict[str, Any]:
    return json.loads((reference / "MANIFEST.json").read_text())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def safetensors_bytes(tensors) -> bytes:
    """A safetensors file of (name, dtype, shape, raw bytes), laid out in order."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


class Hub:
    """A running tensorfetch-test-server; `log()` is its request log (one dict per request)."""

    def __init__(self, root: Path) -> None:
        self.root = root  # repos are read from here per request: a test may add one
        if not SERVER.is_file():
            pytest.skip(f"no test server at {SERVER} (build tools/hubserver)")
        self.proc = subprocess.Popen([str(SERVER), "--root", str(root), "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        self.endpoint = self.proc.stdout.readline().strip()
        assert self.endpoint.startswith("http://"), f"the test server printed {self.endpoint!r}"

    def admin(self, path: str, **params: Any) -> str:
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        with urllib.request.urlopen(f"{self.endpoint}/_admin/{path}{query}", timeout=10) as r:
            return r.read().decode()

    def log(self) -> List[Dict[str, Any]]:
        return [json.loads(line) for line in self.admin("log").splitlines() if line.strip()]

    def clear(self) -> None:
        self.admin("clear")

    def set(self, **switches: Any) -> None:
        self.admin("set", **switches)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def hub_session(reference: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("hub-root")
    for repo, ref in REPOS.items():
        shutil.copytree(reference / ref, root / repo)
    hub = Hub(root)
    yield hub
    hub.stop()


@pytest.fixture
def hub(hub_session: Hub):
    """The server with its switches reset and its log cleared."""
    hub_session.set(reset=1)
    hub_session.clear()
    yield hub_session
    hub_session.set(reset=1)


@pytest.fixture
def remote(hub: Hub, tmp_path: Path) -> Dict[str, Any]:
    """Open options for the test server with a cache of the test's own. The header window is
    small (the reference files are smaller than the default 256 KiB, whose first read would
    bring tensor bytes along), so that the data moved is the tensors' alone."""
    return {"endpoint": hub.endpoint, "cache_dir": str(tmp_path / "cache"), "retries": 2, "window": 16384}


def cdn_requests(log: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [r for r in log if r["kind"] == "cdn"]


def ranges_of(records: List[Dict[str, Any]]) -> List[tuple]:
    """(file, first, last) of each ranged request, sorted."""
    out = []
    for r in records:
        assert r["range"].startswith("bytes="), r
        a, b = r["range"][len("bytes="):].split("-")
        out.append((r["file"], int(a), int(b)))
    return sorted(out)
