# SPDX-License-Identifier: Apache-2.0
"""Issue 20, items 1 and 2, through the Python API:

- ``tensorfetch.trace(path)`` records the timeline of the work inside the block as Chrome
  trace-event JSON: the open, one ``GET`` per request the server logged (on its connection's
  row, with its phases), the fetch and its commits; a second trace at once is refused.
- ``connections`` fixes the number of data connections (the fetch's figures say it) and
  ``max_connections`` bounds the adaptive number; both are checked like the CLI's options.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import tensorfetch


def test_trace_records_the_open_every_request_and_the_fetch(hub, remote, tmp_path: Path):
    path = tmp_path / "run.trace.json"
    with tensorfetch.trace(path):
        with tensorfetch.safe_open("hf://org/sharded", framework="np", **remote) as f:
            f.prefetch("model.layers.0.*")
    log = hub.log()
    doc = json.loads(path.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    names = {e["name"] for e in events}
    assert "open (index, headers, config.json)" in names
    assert "fetch" in names and "fetch ranges" in names
    gets = [e for e in events if e["name"].startswith("GET")]
    assert len(gets) == len(log), (len(gets), len(log))
    assert all(e["tid"] > 1000 and "status" in e["args"] and "url" in e["args"] for e in gets)
    assert any(e["name"] == "receive" for e in events)
    assert any(e["cat"] == "commit" for e in events)
    rows = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "connection 1" in rows.values()


def test_a_second_trace_at_once_is_refused_and_the_first_still_written(tmp_path: Path):
    with tensorfetch.trace(tmp_path / "a.json"):
        with pytest.raises(tensorfetch.TensorfetchError, match="already"):
            with tensorfetch.trace(tmp_path / "b.json"):
                pass
    assert json.loads((tmp_path / "a.json").read_text())["traceEvents"]
    assert not (tmp_path / "b.json").exists()


def test_fixed_connections_are_kept_and_reported(hub, remote):
    with tensorfetch.safe_open("hf://org/sharded", framework="np", connections=3, **remote) as f:
        stats = f.prefetch("model.layers.*")
    assert stats["connections"] == 3
    ports = {r["client_port"] for r in hub.log() if r["kind"] == "cdn" and not r["range"].startswith("bytes=0-")}
    assert 1 <= len(ports) <= 4  # 3, and one more only to take over a straggler's work


@pytest.mark.parametrize("bad", [0, 257, -1, "8"])
def test_max_connections_is_checked(remote, bad):
    with pytest.raises((ValueError, TypeError)):
        tensorfetch.safe_open("hf://org/sharded", framework="np", max_connections=bad, **remote)
