# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C during a throttled fetch (a real SIGINT to a real interpreter), and a torch.nn.Module
loaded with load_state_dict(strict=True) from a remote partial fetch."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import tensorfetch
from conftest import cdn_requests

SCRIPT = textwrap.dedent("""
    import sys, time, tensorfetch
    f = tensorfetch.safe_open("hf://org/dtypes", framework="np", endpoint=sys.argv[1], cache_dir=sys.argv[2],
                              window=16384, connections=2, chunk_size=65536)
    print("fetching", flush=True)
    try:
        f.prefetch("big_f32", progress=False)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic(), flush=True)
        sys.exit(130)
""")


def test_ctrl_c_cancels_a_throttled_fetch_promptly_and_cleanly(hub, tmp_path, reference):
    cache = tmp_path / "cache"
    hub.set(drip=4096, interval_ms=100, n=-1, match="/cdn/")  # 40 KiB/s per transfer: 1 MiB takes ~13 s
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, hub.endpoint, str(cache)], stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout.readline().strip() == "fetching"
    time.sleep(2.5)  # two 64 KiB chunks arrive whole meanwhile
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 130, out
    line = out.strip().splitlines()[-1].split()
    assert line[0] == "interrupted"
    assert float(line[1]) - sent < 1.0, "KeyboardInterrupt took more than a second"
    # Nothing half-written is served: a new fetch completes the tensor, which then matches the
    # reference bit for bit.
    hub.set(reset=1)
    with tensorfetch.safe_open("hf://org/dtypes", framework="np", endpoint=hub.endpoint, cache_dir=str(cache),
                               window=16384) as f, \
            tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="np") as g:
        hub.clear()
        assert (f.get_tensor("big_f32") == g.get_tensor("big_f32")).all()
        moved = sum(r["body_bytes"] for r in cdn_requests(hub.log()) if r["range"] != "bytes=0-16383")
        assert 0 < moved <= 1024 * 1024 - 65536  # what had arrived whole was kept


def test_a_progress_callback_returning_false_cancels(hub, remote):
    with tensorfetch.safe_open("hf://org/dtypes", framework="np", **remote) as f:
        hub.set(latency_ms=200)
        with pytest.raises(tensorfetch.CancelledError):
            f.prefetch(None, progress=lambda p: False)


def _module_from_state(shapes, dtype):
    """A torch.nn.Module whose parameters are named and shaped as the given state dict."""
    import torch

    root = torch.nn.Module()
    for name, shape in shapes.items():
        *path, leaf = name.split(".")
        m = root
        for part in path:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        m.register_parameter(leaf, torch.nn.Parameter(torch.zeros(shape, dtype=dtype), requires_grad=False))
    return root


def _forward(model, ids):
    """A Llama-like pass through the loaded layers: embedding, then per layer an RMS-normed
    gated MLP and the attention projections; float32 math."""
    import torch

    m = model.model
    x = m.embed_tokens.weight.float()[ids]
    for layer in m.layers.children():
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * layer.input_layernorm.weight.float()
        q = h @ layer.self_attn.q_proj.weight.float().T
        k = h @ layer.self_attn.k_proj.weight.float().T
        v = h @ layer.self_attn.v_proj.weight.float().T
        att = torch.softmax(q[..., : k.shape[-1]] @ k.T / k.shape[-1] ** 0.5, -1) @ v
        x = x + (att @ layer.self_attn.o_proj.weight.float().T[: att.shape[-1]])
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * layer.post_attention_layernorm.weight.float()
        g = torch.nn.functional.silu(h @ layer.mlp.gate_proj.weight.float().T) * (h @ layer.mlp.up_proj.weight.float().T)
        x = x + g @ layer.mlp.down_proj.weight.float().T
    return x


def test_torch_module_loaded_strictly_from_a_remote_partial_fetch_matches_the_local_file(hub, remote, reference):
    torch = pytest.importorskip("torch")
    wanted = ["model.embed_tokens.weight", "model.layers.0.*"]
    with tensorfetch.safe_open("hf://org/sharded", framework="pt", **remote) as f:
        info = f.inspect()
    hub.clear()
    remote_sd = tensorfetch.load("hf://org/sharded", wanted, framework="pt", progress=False, **remote)
    local_sd = tensorfetch.load(reference / "llama-tiny-single/model.safetensors", wanted, framework="pt")
    assert remote_sd.keys() == local_sd.keys() and len(remote_sd) == 10
    shapes = {k: tuple(v.shape) for k, v in local_sd.items()}
    a, b = _module_from_state(shapes, torch.bfloat16), _module_from_state(shapes, torch.bfloat16)
    a.load_state_dict(remote_sd, strict=True)
    b.load_state_dict(local_sd, strict=True)
    ids = torch.tensor([1, 5, 42, 777, 1199])
    out_a, out_b = _forward(a, ids), _forward(b, ids)
    assert out_a.shape == (5, 64) and torch.isfinite(out_a).all()
    assert torch.equal(out_a, out_b)
    # Only the selected tensors' bytes moved (less what open's first read brought along).
    moved = sum(r["body_bytes"] for r in cdn_requests(hub.log()) if r["range"] and r["range"] != "bytes=0-16383")
    selected = [t for t in info["tensors"] if t["name"] in remote_sd]
    total = sum(t["data_offsets"][1] - t["data_offsets"][0] for t in info["tensors"])
    assert moved <= sum(t["data_offsets"][1] - t["data_offsets"][0] for t in selected) < total / 3
