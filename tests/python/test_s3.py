# SPDX-License-Identifier: Apache-2.0
"""s3:// locations from Python (issue 22): safe_open, inspect and plan against s3rver behind the
SigV4-verifying proxy of tests/http/s3/s3_fixture.py (botocore checks every signature).
Skipped when s3rver (tools/install-deps.sh, npm) or botocore is missing."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tensorfetch

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "http" / "s3" / "s3_fixture.py"
KEY_ID, SECRET, TOKEN = "AKIDPYTHONTEST", "py-secret-DO-NOT-LEAK", "py-token-DO-NOT-LEAK"

pytestmark = pytest.mark.skipif(
    not (ROOT / "tools" / "node" / "node_modules" / "s3rver" / "bin" / "s3rver.js").is_file()
    or not Path("/usr/lib/python3/dist-packages/botocore").is_dir(),
    reason="s3rver (tools/install-deps.sh) or python3-botocore missing")


def _safetensors(arrays):
    header, data = {}, b""
    for name, a in arrays.items():
        raw = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


@pytest.fixture
def s3(tmp_path, monkeypatch):
    tree = tmp_path / "tree" / "m"
    tree.mkdir(parents=True)
    arrays = {f"w{i}": np.arange(i * 1000, i * 1000 + 1000, dtype=np.float32).reshape(10, 100) for i in range(3)}
    (tree / "model.safetensors").write_bytes(_safetensors(arrays))
    ready, log = tmp_path / "ready", tmp_path / "log.jsonl"
    # (the fixture is a plain Python program: not under the sanitizer runtimes this suite may preload)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    proc = subprocess.Popen(["/usr/bin/python3", str(FIXTURE), "--root", str(tmp_path / "root"), "--ready", str(ready),
                             "--log", str(log), "--key", f"{KEY_ID}:{SECRET}:{TOKEN}",
                             "--upload", f"bkt={tmp_path / 'tree'}"], env=env)
    deadline = time.time() + 60
    while not ready.exists():
        assert proc.poll() is None and time.time() < deadline, "the S3 fixture did not start"
        time.sleep(0.05)
    port = int(ready.read_text().split()[0])
    for k, v in {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN,
                 "AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": str(tmp_path / "none"),
                 "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
              "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(k, raising=False)
    yield {"endpoint": f"http://127.0.0.1:{port}", "arrays": arrays, "log": log, "cache": tmp_path / "cache"}
    proc.terminate()
    proc.wait(timeout=10)


def test_safe_open_reads_tensors_from_s3_with_signed_requests(s3):
    with tensorfetch.safe_open("s3://bkt/m/", framework="np", s3_endpoint=s3["endpoint"],
                               cache_dir=str(s3["cache"])) as f:
        assert sorted(f.keys()) == ["w0", "w1", "w2"]
        np.testing.assert_array_equal(f.get_tensor("w1"), s3["arrays"]["w1"])
    requests = [json.loads(line) for line in s3["log"].read_text().splitlines()]
    assert requests and all(r["auth"] == "query" and r["status"] in (200, 206) for r in requests)
    for path in s3["cache"].rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert SECRET.encode() not in text and TOKEN.encode() not in text, path


def test_plan_gives_presigned_urls_that_need_no_credentials(s3):
    transfers = tensorfetch.plan("s3://bkt/m/model.safetensors", ["w2"], s3_endpoint=s3["endpoint"],
                                 cache_dir=str(s3["cache"]), presign_expires=120, window=4096)
    assert len(transfers) == 1
    t = transfers[0]
    assert time.time() + 100 < t["expires_at"] <= time.time() + 121
    request = urllib.request.Request(t["url"], headers={"Range": f"bytes={t['offset']}-{t['offset'] + t['length'] - 1}"})
    with urllib.request.urlopen(request) as r:
        assert r.status == 206
        assert r.read() == s3["arrays"]["w2"].tobytes()


def test_s3_errors_are_remote_errors_in_words(s3, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(tensorfetch.NetworkError) as e:
        tensorfetch.inspect("s3://bkt/m/model.safetensors", s3_endpoint=s3["endpoint"], cache_dir=str(s3["cache"]))
    assert "the secret key does not match the access key" in str(e.value)
    assert "not-the-secret" not in str(e.value)
