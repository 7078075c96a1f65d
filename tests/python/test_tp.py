# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel selection from Python (issue 12, part A): safe_open.select_for_rank returns
each rank's tensors with their sliced shapes; the ranks' parts put together are the checkpoint;
remote, a rank's prefetch moves exactly its byte ranges (asserted through the server's log)."""
from __future__ import annotations

import re

import pytest

import tensorfetch
from conftest import cdn_requests

torch = pytest.importorskip("torch")

WORLD = 2


def part_of(full, text):
    """The part `text` ("[a:b]" on dim 0, "[:, a:b]" on dim 1, None: whole) names of `full`."""
    if text is None:
        return full
    m = re.fullmatch(r"\[(:, )?(\d+):(\d+)\]", text)
    assert m, text
    a, b = int(m.group(2)), int(m.group(3))
    return full[:, a:b] if m.group(1) else full[a:b]


def test_each_rank_holds_its_slices_and_together_they_are_the_checkpoint(reference):
    with tensorfetch.safe_open(reference / "llama-tiny-sharded", framework="pt") as f:
        ranks = [f.select_for_rank(r, WORLD) for r in range(WORLD)]
        for sel in ranks:
            assert "model_type=llama" in sel.rule
            assert sel.metadata() == {"tp_rank": str(sel.rank), "tp_world": "2", "tp_rule": sel.rule}
            assert sel.keys() == f.offset_keys() or sorted(sel.keys()) == f.keys()  # dense: every tensor
            assert sel.nbytes == sum(sel.get_tensor(n).numel() * 2 for n in sel)  # BF16
        slices = ranks[0].slices()
        # q_proj: column-parallel (dim 0, by heads); o_proj, down_proj: row-parallel (dim 1);
        # norms replicated.
        q, o = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"
        assert slices[q] == "[0:32]" and ranks[1].slices()[q] == "[32:64]"
        assert slices[o] == "[:, 0:32]"
        assert slices["model.layers.0.input_layernorm.weight"] is None
        assert ranks[0].get_shape(o) == [64, 32] and ranks[0].get_dtype(o) == "BF16"
        for name in f.keys():
            full = f.get_tensor(name)
            for sel in ranks:
                part = sel.get_tensor(name)
                assert list(part.shape) == sel.get_shape(name)
                assert torch.equal(part, part_of(full, sel.slices()[name])), (name, sel.rank)


def test_rules_names_and_errors(reference, tmp_path):
    with tensorfetch.safe_open(reference / "llama-tiny-sharded", framework="pt") as f:
        sel = f.select_for_rank(1, WORLD, rules={"*": "replicate"}, names_or_globs="model.layers.0.*")
        assert sel.keys() and all(k.startswith("model.layers.0.") for k in sel)
        assert set(sel.slices().values()) == {None}
        assert "rules=rules" in sel.rule
        rules = tmp_path / "tp.json"
        rules.write_text('{"*.q_proj.weight": {"dim": 1}}')
        sel = f.select_for_rank(0, WORLD, rules=rules, names_or_globs=["model.layers.0.self_attn.q_proj.weight"])
        assert sel.slices() == {"model.layers.0.self_attn.q_proj.weight": "[:, 0:32]"}
        assert str(rules) in sel.rule
        with pytest.raises(tensorfetch.TensorNotFoundError, match="rank 0 of 2 holds no tensor named 'nope'"):
            sel.get_tensor("nope")
        with pytest.raises(tensorfetch.TensorfetchError, match="rank 2 of 2"):
            f.select_for_rank(2, WORLD)
        with pytest.raises(tensorfetch.TensorNotFoundError, match="nothing"):
            f.select_for_rank(0, WORLD, names_or_globs="nothing.*")
        with pytest.raises(tensorfetch.TensorfetchError, match="x.weight"):
            f.select_for_rank(0, WORLD, rules={"x.weight": "sideways"})
        with pytest.raises(TypeError, match="rank must be"):
            f.select_for_rank(-1, WORLD)
    # A single file with no config.json beside it: only rules can place tensors.
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "model.safetensors").write_bytes((reference / "llama-tiny-single" / "model.safetensors").read_bytes())
    with tensorfetch.safe_open(lone / "model.safetensors", framework="pt") as f:
        with pytest.raises(tensorfetch.TensorfetchError) as e:
            f.select_for_rank(0, WORLD)
        assert e.value.code == "Unsplittable"


def test_remote_rank_moves_exactly_its_byte_ranges(hub, remote):
    with tensorfetch.safe_open("hf://org/sharded", framework="pt", coalesce_gap=0, **remote) as f:
        info = f.inspect()
        sel = f.select_for_rank(1, WORLD)
        planned = sel.plan()
        assert sum(t["length"] for t in planned) <= sel.nbytes
        hub.clear()
        stats = sel.prefetch(progress=False)
        cdn = cdn_requests(hub.log())
        headers = {fi["path"]: 8 + fi["header_size"] for fi in info["files"]}
        moved = 0
        for r in cdn:
            a, b = (int(x) for x in r["range"][len("bytes="):].split("-"))
            moved += b + 1 - max(a, headers[r["file"]]) if b >= headers[r["file"]] else 0
        # Every byte the rank holds, less what the open's header window brought: nothing else.
        assert moved == stats["bytes_transferred"] == sum(t["length"] for t in planned)
        assert moved + stats["bytes_cached"] == sel.nbytes
        assert len(cdn) == stats["requests"] == len(planned)
        # Now every part is served from the cache: no request.
        hub.clear()
        parts = sel.get_tensors()
        assert hub.log() == [] and len(parts) == len(sel)
        o = "model.layers.0.self_attn.o_proj.weight"
        assert list(parts[o].shape) == [64, 32]
