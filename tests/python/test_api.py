# SPDX-License-Identifier: Apache-2.0
"""The rest of issue 11's list: the progress bar (a terminal only), the token (to the endpoint
host only), download into the Hugging Face cache, devices, the mapping protocol of safe_open, and
the type stubs against the module."""
from __future__ import annotations

import ast
import hashlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tensorfetch
from conftest import cdn_requests

STUBS = Path(tensorfetch.__file__).with_name("__init__.pyi")

PREFETCH = """
import sys, tensorfetch
with tensorfetch.safe_open("hf://org/sharded", framework="np", endpoint=sys.argv[1], cache_dir=sys.argv[2]) as f:
    f.prefetch("model.layers.*")
print("done")
"""


def run_prefetch(hub, cache: Path, stderr_tty: bool) -> str:
    """Runs PREFETCH in a child whose stderr is a pseudo-terminal or a pipe; returns its stderr."""
    args = [sys.executable, "-c", PREFETCH, hub.endpoint, str(cache)]
    if not stderr_tty:
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr
        return r.stderr
    master, slave = os.openpty()
    try:
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert p.wait(timeout=120) == 0 and p.stdout is not None and p.stdout.read().strip() == "done"
        return out.decode(errors="replace")
    finally:
        os.close(master)


def test_prefetch_draws_a_progress_bar_on_a_terminal_only(hub, tmp_path):
    hub.set(latency_ms=50)  # long enough for a frame or two
    piped = run_prefetch(hub, tmp_path / "cache-pipe", stderr_tty=False)
    assert piped == ""
    tty = run_prefetch(hub, tmp_path / "cache-tty", stderr_tty=True)
    assert "tensorfetch:" in tty and "100%" in tty and "files 3/3" in tty, tty
    assert tty.endswith("\n") or tty.endswith("\r\n")


def test_a_progress_callable_gets_fetch_progress_objects(hub, remote):
    seen = []
    with tensorfetch.safe_open("hf://org/sharded", framework="np", **remote) as f:
        stats = f.prefetch("model.layers.1.*", progress=seen.append)
    assert seen and all(isinstance(p, tensorfetch.FetchProgress) for p in seen)
    last = seen[-1]
    assert last.bytes_done == last.bytes_total == stats["bytes_transferred"] > 0
    assert last.files_done == last.files_total >= 1 and last.waiting_seconds == 0


def test_the_token_goes_to_the_endpoint_host_only(hub, remote):
    token = "tf-python-token"
    with tensorfetch.safe_open("hf://org/single", framework="np", token=token, **remote) as f:
        f.prefetch("model.norm.weight", progress=False)
    log = hub.log()
    want = hashlib.sha256(f"Bearer {token}".encode()).hexdigest()
    resolves = [r for r in log if r["kind"] == "resolve"]
    assert resolves and all(r["authorization"] and r["authorization_sha256"] == want for r in resolves)
    assert cdn_requests(log) and not any(r["authorization"] for r in cdn_requests(log))


def test_download_into_the_hugging_face_cache(hub, remote, reference, tmp_path):
    hf = tmp_path / "hf-hub"
    result = tensorfetch.download("hf://org/sharded", tmp_path / "out", hf_cache=True, progress=False,
                                  hf_hub_cache=str(hf), **remote)
    assert result["published"] == 3 and result["unverified"] == []
    repo = hf / "models--org--sharded"
    commit = (repo / "refs" / "main").read_text().strip()
    snap = repo / "snapshots" / commit
    for f in reference.joinpath("llama-tiny-sharded").glob("*.safetensors"):
        assert (snap / f.name).is_symlink() and (snap / f.name).read_bytes() == f.read_bytes()
    assert (snap / "model.safetensors.index.json").is_file()
    # Opened offline from that cache: no request at all.
    hub.clear()
    with tensorfetch.safe_open("hf://org/sharded", framework="pt", offline=True, hf_hub_cache=str(hf),
                               cache_dir=remote["cache_dir"] + "-empty") as f:
        assert f.get_tensor("model.norm.weight").shape == (64,)
    assert hub.log() == []


def test_device_other_than_cpu_copies_with_to(reference):
    torch = pytest.importorskip("torch")
    path = reference / "dtypes/model.safetensors"
    with tensorfetch.safe_open(path, framework="pt", device="meta") as f:
        t = f.get_tensor("f32")
        assert t.device.type == "meta" and t.shape == (2, 3, 4) and t.dtype == torch.float32
        assert f.get_slice("big_f32")[:2].device.type == "meta"
    with pytest.raises(ValueError, match="only has the device \"cpu\""):
        tensorfetch.safe_open(path, framework="np", device="cuda")


def test_safe_open_is_a_mapping_of_names(reference):
    with tensorfetch.safe_open(reference / "llama-tiny-sharded", framework="np") as f:
        names = f.keys()
        assert list(f) == names and len(f) == len(names)
        assert "model.norm.weight" in f and "nope" not in f
    with tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="np") as f:
        with pytest.raises(tensorfetch.DtypeError):
            f.get_tensors()  # BF16 has no NumPy dtype: refused, never reinterpreted
    with tensorfetch.safe_open(reference / "llama-tiny-single", framework="pt") as f:
        pytest.importorskip("torch")
        all_ = f.get_tensors()
        assert list(all_) == f.keys() and all(list(all_[k].shape) == f.get_slice(k).get_shape() for k in all_)


def _stub_signatures():
    tree = ast.parse(STUBS.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            out[node.name] = node
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    out[f"{node.name}.{item.name}"] = item
    return out


def _params(fn: ast.FunctionDef):
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    names += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return names


def test_type_stubs_declare_every_public_name_with_the_modules_parameters():
    stubs = _stub_signatures()
    assert set(tensorfetch.__all__) <= set(stubs) | set(tensorfetch.errors.__all__)
    for name in tensorfetch.__all__:
        obj = getattr(tensorfetch, name)
        if name in tensorfetch.errors.__all__:
            continue
        members = [(name, obj)]
        if inspect.isclass(obj):
            members = [(f"{name}.{m}", f) for m, f in vars(obj).items()
                       if callable(f) and (not m.startswith("_") or m in ("__init__", "__getitem__", "__enter__"))]
        for qual, fn in members:
            if qual in ("SafeSlice.__init__", "TpSelection.__init__", "Mount.__init__"):
                continue  # made by safe_open.get_slice, safe_open.select_for_rank and mount, not by users
            assert qual in stubs, f"{qual} is missing from {STUBS.name}"
            if qual == "safe_open.__init__":
                continue  # the stub spells out **options as keyword-only arguments (below)
            real = []
            for p in inspect.signature(fn).parameters.values():
                real.append({p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name)
            assert _params(stubs[qual]) == real, qual
    # The keyword options of safe_open in the stub are the ones the module accepts.
    init = stubs["safe_open.__init__"]
    assert {a.arg for a in init.args.kwonlyargs} == set(tensorfetch._OPEN_OPTIONS) | set(tensorfetch._FETCH_OPTIONS)
