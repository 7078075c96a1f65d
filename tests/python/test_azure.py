# SPDX-License-Identifier: Apache-2.0
"""az:// locations from Python (issue 22): safe_open, inspect and plan against azurite (which
checks every SAS signature) behind the logging proxy of tests/http/azure/azure_fixture.py.
Skipped when azurite (tools/install-deps.sh, npm) is missing."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tensorfetch

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "http" / "azure" / "azure_fixture.py"
ACCOUNT = "devstoreaccount1"
# azurite's published account key: what it checks signatures with.
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

pytestmark = pytest.mark.skipif(
    not (ROOT / "tools" / "node" / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js").is_file(),
    reason="azurite (tools/install-deps.sh) missing")


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
def azure(tmp_path, monkeypatch):
    tree = tmp_path / "tree" / "m"
    tree.mkdir(parents=True)
    arrays = {f"w{i}": np.arange(i * 1000, i * 1000 + 1000, dtype=np.float32).reshape(10, 100) for i in range(3)}
    (tree / "model.safetensors").write_bytes(_safetensors(arrays))
    ready, log = tmp_path / "ready", tmp_path / "log.jsonl"
    # (the fixture is a plain Python program: not under the sanitizer runtimes this suite may preload)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    proc = subprocess.Popen(["/usr/bin/python3", str(FIXTURE), "--root", str(tmp_path / "root"), "--ready", str(ready),
                             "--log", str(log), "--upload", f"models={tmp_path / 'tree'}"], env=env)
    deadline = time.time() + 90
    while not ready.exists():
        assert proc.poll() is None and time.time() < deadline, "the Azure fixture did not start"
        time.sleep(0.05)
    endpoint = f"http://127.0.0.1:{int(ready.read_text().split()[0])}/{ACCOUNT}"
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={endpoint};")
    for k in ("AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    yield {"endpoint": endpoint, "arrays": arrays, "log": log, "cache": tmp_path / "cache"}
    proc.terminate()
    proc.wait(timeout=10)


def test_safe_open_reads_tensors_from_azure_with_a_sas_on_every_request(azure):
    with tensorfetch.safe_open(f"az://{ACCOUNT}/models/m/", framework="np", cache_dir=str(azure["cache"])) as f:
        assert sorted(f.keys()) == ["w0", "w1", "w2"]
        np.testing.assert_array_equal(f.get_tensor("w1"), azure["arrays"]["w1"])
    requests = [json.loads(line) for line in azure["log"].read_text().splitlines()]
    assert requests and all(r["auth"] == "sas" and r["status"] in (200, 206) for r in requests)
    assert requests[0]["query"]["comp"] == "list"
    for path in azure["cache"].rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert KEY.encode() not in text and b"sig=" not in text, path


def test_plan_gives_sas_urls_that_need_no_credentials(azure):
    transfers = tensorfetch.plan(f"az://{ACCOUNT}/models/m/model.safetensors", ["w2"], cache_dir=str(azure["cache"]),
                                 presign_expires=120, window=4096)
    assert len(transfers) == 1
    t = transfers[0]
    assert time.time() + 100 < t["expires_at"] <= time.time() + 121
    request = urllib.request.Request(t["url"], headers={"Range": f"bytes={t['offset']}-{t['offset'] + t['length'] - 1}"})
    with urllib.request.urlopen(request) as r:
        assert r.status == 206
        assert r.read() == azure["arrays"]["w2"].tobytes()
    # Without its SAS the same URL is refused.
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(t["url"].split("?")[0])
    assert e.value.code in (403, 404)


def test_azure_errors_are_remote_errors_in_words(azure, monkeypatch):
    wrong = "d3Jvbmcta2V5LURPLU5PVC1MRUFLLTAxMjM0NTY3ODk="
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       f"AccountName={ACCOUNT};AccountKey={wrong};BlobEndpoint={azure['endpoint']}")
    with pytest.raises(tensorfetch.NetworkError) as e:
        tensorfetch.inspect(f"az://{ACCOUNT}/models/m/model.safetensors", cache_dir=str(azure["cache"]))
    assert "the account key does not match" in str(e.value)
    assert wrong not in str(e.value) and "sig=" not in str(e.value)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", f"AccountName={ACCOUNT};AccountKey={KEY};"
                       f"BlobEndpoint={azure['endpoint']}")
    with pytest.raises(tensorfetch.TensorfetchError) as e:
        tensorfetch.inspect(f"az://{ACCOUNT}/models/m/absent.safetensors", cache_dir=str(azure["cache"]))
    assert "BlobNotFound" in str(e.value)
