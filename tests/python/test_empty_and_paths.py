# SPDX-License-Identifier: Apache-2.0
"""Issue 19, items 2 and 4, through the Python API:

- Zero-length tensors (a zero in the shape) are served at once, local or remote, before any
  byte of their file is cached, as the empty tensor of the right dtype and shape, and no
  request is made for them (asserted through the test server's log): get_tensor, get_tensors,
  get_slice(...)[...], load, select_for_rank; also a file whose every tensor is empty.
- A string without a scheme is a local path, always: a missing one is FileNotFoundError with
  safetensors' message, and nothing is sent to any server (the Hub is hf://ORG/NAME).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensorfetch
from conftest import cdn_requests, safetensors_bytes


ALL_EMPTY = [("a", "F32", (0,), b""), ("b", "I64", (3, 0), b""), ("c", "F16", (0, 5, 2), b""), ("d", "U8", (0,), b"")]


@pytest.fixture
def all_empty_repo(hub):
    """org/all-empty: a model.safetensors whose every tensor is empty (its data section is 0 bytes)."""
    repo = Path(hub.root) / "org" / "all-empty"
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "model.safetensors").write_bytes(safetensors_bytes(ALL_EMPTY))
    return "org/all-empty"


def locations(hub, repo, path="model.safetensors"):
    """The same file as a Hub repo and as a plain URL."""
    return [f"hf://{repo}", f"{hub.endpoint}/{repo}/resolve/main/{path}"]


@pytest.mark.parametrize("kind", ["hub", "url"])
def test_an_empty_tensor_is_served_before_anything_is_cached_without_a_request(hub, remote, kind):
    torch = pytest.importorskip("torch")
    location = dict(zip(["hub", "url"], locations(hub, "org/dtypes")))[kind]
    with tensorfetch.safe_open(location, framework="pt", **remote) as f:
        hub.clear()
        t = f.get_tensor("empty")
        assert tuple(t.shape) == (0, 7) and t.dtype == torch.float32
        s = f.get_slice("empty")
        assert s.get_shape() == [0, 7] and s.get_dtype() == "F32"
        assert tuple(s[:].shape) == (0, 7)
        assert tuple(s[0:0, 2:5].shape) == (0, 3)
        assert tuple(s[:, 1].shape) == (0,)
        assert hub.log() == []  # no request at all, not even for zero bytes
    with tensorfetch.safe_open(location, framework="np", **remote) as f:
        hub.clear()
        a = f.get_tensor("empty")
        assert a.shape == (0, 7) and a.dtype == np.float32
        assert f.get_slice("empty")[:, 3:].shape == (0, 4)
        assert hub.log() == []


@pytest.mark.parametrize("kind", ["hub", "url"])
def test_a_file_of_only_empty_tensors_loads_whole_with_no_request_after_the_open(hub, remote, all_empty_repo, kind):
    location = dict(zip(["hub", "url"], locations(hub, all_empty_repo)))[kind]
    expected = {name: (np.dtype({"F32": "float32", "I64": "int64", "F16": "float16", "U8": "uint8"}[dt]), shape)
                for name, dt, shape, _ in ALL_EMPTY}
    with tensorfetch.safe_open(location, framework="np", **remote) as f:
        hub.clear()
        got = f.get_tensors()
        assert {k: (v.dtype, v.shape) for k, v in got.items()} == expected
        assert f.prefetch(None, progress=False)["requests"] == 0
        assert cdn_requests(hub.log()) == [] and hub.log() == []
    # load: the requests of its open (as a bare open makes them: the header's first bytes), none more.
    hub.clear()
    with tensorfetch.safe_open(location, framework="np", **remote):
        pass
    opening = sorted((r["kind"], r["range"]) for r in hub.log())  # (sent at once: in any order)
    hub.clear()
    loaded = tensorfetch.load(location, framework="np", progress=False, warm_connections=False, **remote)
    assert {k: (v.dtype, v.shape) for k, v in loaded.items()} == expected
    assert sorted((r["kind"], r["range"]) for r in hub.log()) == opening
    assert all(r["range"].startswith("bytes=0-") for r in hub.log() if r["range"])


def test_select_for_rank_of_an_empty_tensor_serves_its_empty_part(hub, remote):
    with tensorfetch.safe_open("hf://org/dtypes", framework="np", **remote) as f:
        hub.clear()
        for rules, shape in (({"empty": {"dim": 0}}, (0, 7)), ({"empty": "replicate"}, (0, 7))):
            sel = f.select_for_rank(1, 2, rules=rules, names_or_globs=["empty"])
            assert sel.keys() == ["empty"] and sel.get_shape("empty") == list(shape)
            sel.prefetch()
            assert sel.get_tensor("empty").shape == shape
            assert sel.get_tensors()["empty"].shape == shape
        assert hub.log() == []


def test_an_empty_tensor_of_a_local_file_is_served(reference):
    with tensorfetch.safe_open(reference / "dtypes" / "model.safetensors", framework="np") as f:
        assert f.get_tensor("empty").shape == (0, 7)
        assert f.get_slice("empty")[:].shape == (0, 7)


# -- locations: a string without a scheme is a local path -----------------------------------

@pytest.mark.parametrize("name", ["notafile", "org/model", "Org/Some-Model@main", "gpt2", "model.safetensors"])
def test_a_missing_path_is_file_not_found_with_safetensors_message_and_no_request(hub, monkeypatch, name):
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)  # were the Hub asked, the test server would see it
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub.clear()
    with pytest.raises(FileNotFoundError) as e:
        with tensorfetch.safe_open(name, framework="pt"):
            pass
    assert str(e.value) == f"No such file or directory: {name}"
    assert isinstance(e.value, tensorfetch.NotFoundError)
    for call in (lambda: tensorfetch.load(name, progress=False), lambda: tensorfetch.inspect(name),
                 lambda: tensorfetch.plan(name), lambda: tensorfetch.download(name, "/nonexistent-dir", progress=False)):
        with pytest.raises(FileNotFoundError, match="No such file or directory"):
            call()
    assert hub.log() == []


def test_the_hub_is_named_with_hf_scheme_and_an_existing_bare_path_is_local(hub, remote, reference, tmp_path,
                                                                              monkeypatch):
    with tensorfetch.safe_open("hf://org/single", framework="np", **remote) as f:
        assert f.remote
    # A local directory named like a repo id is that directory.
    local = tmp_path / "org" / "single"
    local.mkdir(parents=True)
    (local / "model.safetensors").write_bytes((reference / "llama-tiny-single" / "model.safetensors").read_bytes())
    monkeypatch.chdir(tmp_path)
    hub.clear()
    with tensorfetch.safe_open("org/single", framework="np", **remote) as f:
        assert not f.remote and "lm_head.weight" in f
    assert hub.log() == []
