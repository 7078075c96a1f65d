# SPDX-License-Identifier: Apache-2.0
"""Remote checkpoints through the Hub-like test server: results AND the requests made (which
ranges, how many bytes), prefetch, slices, plan, download, load, errors, threads."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tensorfetch
from conftest import cdn_requests, ranges_of, sha256


def tensor_range(info, name):
    """(file, first byte, last byte) of a tensor in its file, from inspect()'s object."""
    t = next(t for t in info["tensors"] if t["name"] == name)
    f = next(f for f in info["files"] if f["path"] == t["file"])
    base = 8 + f["header_size"]
    return t["file"], base + t["data_offsets"][0], base + t["data_offsets"][1] - 1


def test_remote_get_tensor_fetches_only_that_tensors_bytes(hub, remote, manifest):
    pytest.importorskip("torch")
    with tensorfetch.safe_open("hf://org/sharded", framework="pt", **remote) as f:
        assert f.remote and len(f.commit or "") == 40
        opened = hub.log()
        assert all(r["kind"] != "cdn" or r["body_bytes"] <= 256 * 1024 for r in opened)
        info = f.inspect()
        hub.clear()
        name = "model.layers.1.mlp.up_proj.weight"
        t = f.get_tensor(name)
        log = hub.log()
        cdn = cdn_requests(log)
        assert ranges_of(cdn) == [tensor_range(info, name)]
        assert sum(r["body_bytes"] for r in cdn) == t.numel() * 2
        assert [r for r in log if r["kind"] != "cdn"] == []  # resolved once, on open
        entry = manifest[f"llama-tiny-sharded/{tensor_range(info, name)[0]}"]["tensors"][name]
        assert sha256(t.view(__import__("torch").int16).numpy().tobytes()) == entry["sha256"]
        # Cached now: the same tensor again costs no request (a copy-on-write mapping of its own).
        hub.clear()
        assert __import__("torch").equal(f.get_tensor(name), t)
        assert hub.log() == []


def test_remote_slice_fetches_only_the_rows_asked_for(hub, remote, reference):
    with tensorfetch.safe_open("hf://org/dtypes", framework="np", **remote) as f:
        info = f.inspect()
        hub.clear()
        part = f.get_slice("big_f32")[16:48]
        cdn = cdn_requests(hub.log())
        _, first, _ = tensor_range(info, "big_f32")
        assert ranges_of(cdn) == [("model.safetensors", first + 16 * 4096, first + 48 * 4096 - 1)]
        assert sum(r["body_bytes"] for r in cdn) == 32 * 1024 * 4
        # Columns: one range per row, coalesced into one request across the small holes.
        hub.clear()
        cols = f.get_slice("big_f32")[100:104, 8:16]
        assert len(cdn_requests(hub.log())) == 1
    with tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="np") as g:
        full = g.get_tensor("big_f32")
        assert np.array_equal(part, full[16:48])
        assert np.array_equal(cols, full[100:104, 8:16])


def test_prefetch_of_a_glob_moves_only_the_matching_tensors_once(hub, remote):
    seen = []
    with tensorfetch.safe_open("hf://org/sharded", framework="pt", **remote) as f:
        info = f.inspect()
        hub.clear()
        stats = f.prefetch("model.layers.0.*", progress=lambda p: seen.append(p))
        wanted = [t for t in info["tensors"] if t["name"].startswith("model.layers.0.")]
        nbytes = sum(t["data_offsets"][1] - t["data_offsets"][0] for t in wanted)
        cdn = cdn_requests(hub.log())
        assert stats["bytes_transferred"] == nbytes == sum(r["body_bytes"] for r in cdn)
        assert stats["requests"] == len(cdn)
        for file, a, b in ranges_of(cdn):  # every byte moved belongs to a wanted tensor
            spans = [tensor_range(info, t["name"]) for t in wanted if t["file"] == file]
            covered = sum(min(b, hi) - max(a, lo) + 1 for _, lo, hi in spans if lo <= b and hi >= a)
            assert covered == b - a + 1, (file, a, b)
        assert seen and seen[-1].bytes_done == nbytes and isinstance(seen[-1], tensorfetch.FetchProgress)
        # Again: everything is cached, nothing moves.
        hub.clear()
        again = f.prefetch(["model.layers.0.*"], progress=False)
        assert again["bytes_transferred"] == 0 and again["bytes_cached"] == nbytes
        assert cdn_requests(hub.log()) == []
        hub.clear()
        for t in wanted:
            f.get_tensor(t["name"])
        assert hub.log() == []


def test_plan_lists_the_transfers_without_making_them(hub, remote):
    with tensorfetch.safe_open("hf://org/sharded", framework="np", **remote) as f:
        info = f.inspect()
        hub.clear()
        plan = f.plan("lm_head.weight")
        assert hub.log() == []
        file, a, b = tensor_range(info, "lm_head.weight")
        a = max(a, remote["window"])  # the first read on open brought the start of the file
        assert [(p["file"], p["offset"], p["offset"] + p["length"] - 1) for p in plan] == [(file, a, b)]
        assert plan[0]["url"].startswith("http://127.0.0.1:") and plan[0]["if_match"]
        assert plan[0]["send_token"] is False
    assert len(tensorfetch.plan("hf://org/sharded", None, **remote)) >= 3


def test_cli_get_plan_prints_the_same_transfers_as_plan(hub, remote):
    """`tensorfetch get --plan` and `tensorfetch.plan()` give the same transfers (the CLI adds
    file_index and the Range header's text)."""
    from conftest import CLI
    import json
    import subprocess
    if not CLI.is_file():
        pytest.skip(f"no CLI at {CLI}")
    names = ["lm_head.weight", "model.layers.1.*"]
    plan = tensorfetch.plan("hf://org/sharded", names, **remote)
    hub.clear()
    out = subprocess.run([str(CLI), "get", "hf://org/sharded", *names, "--plan", "--endpoint", remote["endpoint"],
                          "--cache-dir", remote["cache_dir"], "--window", str(remote["window"])],
                         check=True, capture_output=True, text=True).stdout
    assert [r for r in hub.log() if r["kind"] == "cdn" and not r["range"].startswith("bytes=0-")] == []
    cli = json.loads(out)
    assert cli["location"] == "hf://org/sharded" and cli["bytes"] == sum(p["length"] for p in plan)
    assert len(cli["transfers"]) == len(plan) >= 2
    for c, p in zip(cli["transfers"], plan):
        # Each open was redirected to a freshly signed CDN URL: the same blob, another signature.
        assert c["url"].split("?")[0] == p["url"].split("?")[0]
        assert {k: c[k] for k in p if k != "url"} == {k: v for k, v in p.items() if k != "url"}
        assert c["range"] == f"bytes={p['offset']}-{p['offset'] + p['length'] - 1}"


def test_max_rate_caps_a_prefetch(hub, remote):
    """max_rate: about 1 MB of the dtypes file at 1 MiB/s takes most of a second, however many
    connections share it."""
    with tensorfetch.safe_open("hf://org/dtypes", framework="np", max_rate=1 << 20, connections=8,
                               chunk_size=65536, **remote) as f:
        start = time.monotonic()
        stats = f.prefetch(None, progress=False)
        seconds = time.monotonic() - start
    assert stats["bytes_transferred"] > 900_000
    expected = (stats["bytes_transferred"] - 0.1 * (1 << 20)) / (1 << 20)  # less the bucket's first tenth
    assert seconds >= 0.8 * expected, (seconds, stats)


def test_load_returns_a_state_dict_of_the_selected_tensors(hub, remote, reference):
    torch = pytest.importorskip("torch")
    sd = tensorfetch.load("hf://org/sharded", ["model.norm.weight", "model.layers.1.*"], progress=False, **remote)
    assert "model.norm.weight" in sd and all(k == "model.norm.weight" or k.startswith("model.layers.1.") for k in sd)
    with tensorfetch.safe_open(reference / "llama-tiny-single", framework="pt") as g:
        for k, v in sd.items():
            assert torch.equal(v, g.get_tensor(k)), k


def test_download_verifies_and_saves_every_file(hub, remote, reference, tmp_path):
    out = tmp_path / "out"
    result = tensorfetch.download("hf://org/sharded", out, progress=False, **remote)
    assert result["unverified"] == [] and result["published"] is None
    for f in reference.joinpath("llama-tiny-sharded").glob("*.safetensors"):
        assert (out / f.name).read_bytes() == f.read_bytes()
    assert (out / "model.safetensors.index.json").is_file()


def test_remote_errors_are_network_and_integrity_errors(hub, remote):
    with pytest.raises(tensorfetch.NetworkError) as e:
        tensorfetch.safe_open("hf://org/no-such-repo", **remote)
    assert e.value.exit_code == 3 and "org/no-such-repo" in str(e.value)
    with tensorfetch.safe_open("hf://org/dtypes", framework="np", **remote) as f:
        hub.set(change_etag_after=0)
        with pytest.raises(tensorfetch.IntegrityError) as e:
            f.get_slice("big_f32")[:4]
        assert e.value.exit_code == 4 and "model.safetensors" in str(e.value)


def test_offline_open_from_the_cache_then_not_fetched_for_missing_bytes(hub, remote):
    pytest.importorskip("torch")
    with tensorfetch.safe_open("hf://org/single", framework="pt", **remote) as f:
        f.prefetch("model.norm.weight", progress=False)
        commit = f.commit
    hub.clear()
    offline = {**remote, "offline": True}
    with tensorfetch.safe_open(f"hf://org/single@{commit}", framework="pt", **offline) as f:
        assert f.get_tensor("model.norm.weight").shape == (64,)
        with pytest.raises(tensorfetch.NotFetchedError, match="not in the cache"):
            f.get_tensor("lm_head.weight")
    assert hub.log() == []


def test_remote_get_tensor_from_many_threads_fetches_each_byte_once(hub, remote, reference):
    torch = pytest.importorskip("torch")
    with tensorfetch.safe_open("hf://org/sharded", framework="pt", **remote) as f, \
            tensorfetch.safe_open(reference / "llama-tiny-single", framework="pt") as g:
        names = f.keys()
        hub.clear()
        errors = []

        def worker(k):
            try:
                for n in names[k::2] + names:
                    assert torch.equal(f.get_tensor(n), g.get_tensor(n)), n
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        info = f.inspect()
        moved = sum(r["body_bytes"] for r in cdn_requests(hub.log()))
        # Every tensor byte beyond what open's first read (the header window) brought along.
        window = remote["window"]
        expected = 0
        for t in info["tensors"]:
            _, lo, hi = tensor_range(info, t["name"])
            expected += max(0, hi + 1 - max(lo, window))
        assert moved == expected


def test_the_gil_is_released_during_a_fetch(hub, remote):
    with tensorfetch.safe_open("hf://org/dtypes", framework="np", **remote) as f:
        hub.set(latency_ms=400)
        done = threading.Event()
        th = threading.Thread(target=lambda: (f.get_tensor("big_f32"), done.set()))
        start = time.monotonic()
        th.start()
        ticks = 0
        while not done.is_set() and time.monotonic() - start < 20:
            ticks += 1  # runs only while the fetching thread has let go of the GIL
            time.sleep(0.001)
        th.join()
        assert done.is_set() and time.monotonic() - start >= 0.35 and ticks > 50


def test_writing_into_a_remote_torch_tensor_changes_neither_the_cache_nor_other_readers(hub, remote, reference):
    torch = pytest.importorskip("torch")
    name = "model.layers.2.mlp.up_proj.weight"
    with tensorfetch.safe_open("hf://org/sharded", framework="pt", **remote) as f:
        t = f.get_tensor(name)
        original = t.clone()
        t.fill_(3.0)  # a write into a copy-on-write mapping of the cache blob
        assert (t == 3.0).all()
        # Its neighbours are not in the cache: the tensor has a mapping of its own (one shared by
        # the handle could keep a neighbour's bytes from before their fetch), so a second
        # get_tensor does not see the write.
        assert torch.equal(f.get_tensor(name), original)
        with tensorfetch.safe_open("hf://org/sharded", framework="pt", **remote) as g:
            assert torch.equal(g.get_tensor(name), original)  # another reader of the cache
        commit = f.commit
    blobs = [p for p in (Path(remote["cache_dir"]) / "blobs").glob("*/data")]
    assert blobs, "the tensor is in the cache"
    hub.clear()
    with tensorfetch.safe_open(f"hf://org/sharded@{commit}", framework="pt", **{**remote, "offline": True}) as f:
        assert torch.equal(f.get_tensor(name), original)  # the cache holds the fetched bytes
    assert hub.log() == []
    with tensorfetch.safe_open(reference / "llama-tiny-sharded", framework="pt") as local:
        assert torch.equal(local.get_tensor(name), original)
    assert (t == 3.0).all()  # and the written tensor keeps its write


def _cdn_url(hub, repo, path):
    """Where the server's resolve URL redirects: the file on its "CDN" host."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(f"{hub.endpoint}/{repo}/resolve/main/{path}", timeout=10)
    except urllib.error.HTTPError as e:
        assert e.code == 302
        return e.headers["Location"]
    raise AssertionError("the resolve URL did not redirect")


def test_warm_connections_opens_the_data_connections_during_the_open_and_the_fetch_uses_them(hub, remote):
    url = _cdn_url(hub, "org/single", "model.safetensors")
    hub.clear()
    with tensorfetch.safe_open(url, framework="np", connections=4, warm_connections=True, **remote) as f:
        stats = f.prefetch(None, progress=False)  # waits for warm-ups still running
        log = cdn_requests(hub.log())
        warm = [r for r in log if r["range"] == "bytes=0-0"]
        assert len(warm) == 4 and all(r["status"] == 206 for r in warm)
        ports = {r["client_port"] for r in warm}
        assert len(ports) == 4  # a TCP connection each
        data = [r for r in log if not r["range"].startswith("bytes=0-")]  # not the open's header read
        assert len(data) == stats["requests"] >= 1
        assert {r["client_port"] for r in data} <= ports  # no new connection
    # Not asked for: no warm-up request.
    hub.clear()
    with tensorfetch.safe_open(url, framework="np", connections=4, **remote):
        pass
    assert [r for r in hub.log() if r.get("range") == "bytes=0-0"] == []
    with pytest.raises(TypeError, match="warm_connections"):
        tensorfetch.safe_open(url, framework="np", warm_connections=1, **remote)
    # load() fetches right after the open: it warms by default.
    hub.clear()
    pytest.importorskip("torch")
    state = tensorfetch.load(url, framework="pt", connections=2, progress=False, cache_dir=remote["cache_dir"] + "-load",
                             **{k: v for k, v in remote.items() if k != "cache_dir"})
    assert len(state) > 0
    assert len([r for r in cdn_requests(hub.log()) if r["range"] == "bytes=0-0"]) == 2


def test_a_plain_url_rewritten_with_the_same_size_and_etag_warns_once_and_serves_the_new_bytes(reference, tmp_path):
    """A file rewritten in place (same size; its URL and ETag unchanged, as nginx's ETag within one
    second): the next open warns (StaleCacheWarning), retires the stale cached bytes, and the
    tensor's new bytes are fetched and served."""
    import json
    import struct
    import warnings

    from conftest import Hub

    torch = pytest.importorskip("torch")  # (the tensors are BF16)

    def raw(t):
        return t.contiguous().view(torch.int16).numpy().tobytes()

    root = tmp_path / "root"
    (root / "org" / "stale").mkdir(parents=True)
    original = (reference / "llama-tiny-single" / "model.safetensors").read_bytes()
    served = root / "org" / "stale" / "model.safetensors"
    served.write_bytes(original)
    (n,) = struct.unpack("<Q", original[:8])
    data_start = 8 + n
    header = json.loads(original[8:data_start])
    name = "model.layers.0.mlp.down_proj.weight"
    a, b = (data_start + x for x in header[name]["data_offsets"])
    # The same size: the metadata's "pt" written "np", every tensor byte XOR 0x5A.
    at = original.index(b'"format":"pt"')
    now = bytearray(original)
    now[at:at + 13] = b'"format":"np"'
    now[data_start:] = bytes(x ^ 0x5A for x in original[data_start:])
    now = bytes(now)

    hub = Hub(root)
    try:
        url = _cdn_url(hub, "org/stale", "model.safetensors")
        opts = {"endpoint": hub.endpoint, "cache_dir": str(tmp_path / "cache"), "retries": 2, "window": 16384}
        with warnings.catch_warnings():
            warnings.simplefilter("error", tensorfetch.StaleCacheWarning)  # none while the bytes agree
            with tensorfetch.safe_open(url, framework="pt", **opts) as f:
                assert raw(f.get_tensor(name)) == original[a:b]
        with open(served, "r+b") as out:  # in place: the server keeps the URL and its ETag
            out.write(now)
        hub.clear()
        with pytest.warns(tensorfetch.StaleCacheWarning, match="rewritten on the server without its ETag") as told:
            with tensorfetch.safe_open(url, framework="pt", **opts) as f:
                assert raw(f.get_tensor(name)) == now[a:b]
        assert len([w for w in told if issubclass(w.category, tensorfetch.StaleCacheWarning)]) == 1
        path = url.split("?")[0]
        assert str(told[0].message).startswith(path.rsplit("/", 1)[1] + ": ")  # the file (the URL's last segment)
        assert path in str(told[0].message) and "retired" in str(told[0].message)
        assert told[0].filename == __file__  # attributed to the caller of safe_open
        log = [r for r in cdn_requests(hub.log()) if r["range"]]
        assert len({r["etag"] for r in log}) == 1  # one ETag throughout
        # The tensor's bytes came from the server again, not from the stale cache.
        assert any(r["status"] == 206 and int(r["range"][len("bytes="):].split("-")[0]) <= a <
                   int(r["range"].split("-")[1]) + 1 for r in log)
        # Once retired, never told again: the fresh blob holds the new bytes.
        hub.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error", tensorfetch.StaleCacheWarning)
            with tensorfetch.safe_open(url, framework="pt", **opts) as f:
                assert raw(f.get_tensor(name)) == now[a:b]
        assert [r for r in cdn_requests(hub.log()) if r["range"] and not r["range"].startswith("bytes=0-")] == []
    finally:
        hub.stop()
