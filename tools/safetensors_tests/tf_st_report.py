# SPDX-License-Identifier: Apache-2.0
"""pytest plugin (``-p tf_st_report``) of tools/safetensors-tests.sh: writes one JSON object per
test to ``$TF_ST_REPORT``: id, outcome (passed/failed/skipped/error), the first line of the error
(or the skip reason), and whether the test opened anything through tensorfetch."""
import json
import os

import pytest

_results = {}


def _first_line(report):
    lr = report.longrepr
    if lr is None:
        return ""
    if isinstance(lr, tuple):  # skip: (file, line, reason)
        return str(lr[2]).splitlines()[0] if lr[2] else ""
    crash = getattr(lr, "reprcrash", None)
    text = crash.message if crash is not None else str(lr)
    errors = [l[1:].strip() for l in text.splitlines() if l.startswith("E ")]
    if crash is None and errors:  # collection errors: the exception line
        return errors[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if "PytestUnhandledThreadExceptionWarning" in lines[0]:  # the thread's exception is last
        return f"{lines[0]} | {lines[-1]}"
    return lines[0]


def _shim():
    try:
        from safetensors import _safetensors_rust as shim
    except Exception:
        return None
    return shim


def _opens():
    shim = _shim()
    return shim.opens() if shim is not None else 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _opens()
    yield
    entry = _results.get(item.nodeid)
    if entry is not None:
        entry["tensorfetch"] = _opens() > before


def pytest_runtest_logreport(report):
    entry = _results.setdefault(report.nodeid, {"id": report.nodeid, "outcome": "passed", "message": ""})
    if report.skipped and entry["outcome"] == "passed":
        entry.update(outcome="skipped", message=_first_line(report))
    elif report.failed:
        if report.when == "call":
            entry.update(outcome="failed", message=_first_line(report))
        elif entry["outcome"] in ("passed", "skipped"):
            entry.update(outcome="error", message=f"[{report.when}] {_first_line(report)}")


def pytest_collectreport(report):
    if report.failed:
        _results[report.nodeid or "<collection>"] = {
            "id": report.nodeid or "<collection>", "outcome": "error",
            "message": "[collect] " + _first_line(report), "tensorfetch": False}


def pytest_sessionfinish(session):
    path = os.environ.get("TF_ST_REPORT")
    if path:
        shim = _shim()
        with open(path, "w") as f:
            f.write(json.dumps({"session": True, "http_requests": shim.http_requests() if shim else 0}) + "\n")
            for entry in _results.values():
                entry.setdefault("tensorfetch", False)
                f.write(json.dumps(entry) + "\n")
