"""gpt-fast-style tensor parallelism runs the whole LM head on every rank (docs/cost-model.md, section 61)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.engine import engine_data, engine_from_dict, load_engine
from roofline.costing.hardware import load_hardware
from roofline.costing.passtime import pass_time
from roofline.passes.model import get_model

GPU = "a100-sxm-80gb"


def _pair(model: str, tp: int, batch=1, tokens=1, context=0):
    rep = load_engine("compiled")
    shard = dataclasses.replace(rep, lm_head_replicated=False)
    return tuple(pass_time(model, GPU, batch, tokens, context, "bf16", tp=tp, engine=e) for e in (rep, shard))


def test_which_engines_replicate_the_head():
    assert load_engine("compiled").lm_head_replicated  # gpt-fast's apply_tp shards the blocks only
    for name in ("vllm", "sglang", "trtllm", "hf", "torch-eager", "vllm-rocm"):
        assert not load_engine(name).lm_head_replicated, name


def test_every_rank_reads_the_whole_head():
    rep, shard = _pair("llama-3.1-8b", 8)
    head = rep.operators.index("lm_head")
    spec = get_model("llama-3.1-8b")
    per_device = load_hardware(GPU).time_model(engine=load_engine("compiled")).bandwidth_bytes_per_s
    extra = 7 * spec.vocab_size * spec.d_model * 2 / (8 * per_device)  # the 7/8 of the head a rank used to skip
    assert float(rep.op_memory_s[head] - shard.op_memory_s[head]) == pytest.approx(extra, rel=1e-9)
    assert float(rep.op_compute_s[head]) == pytest.approx(8 * float(shard.op_compute_s[head]))
    others = [i for i in range(len(rep.operators)) if i != head]
    assert np.allclose(rep.op_memory_s[others], shard.op_memory_s[others])
    # Llama 3's 128k vocabulary: the head is 1.05 GB, 60% of a rank's 1.75 GB of layers at TP 8
    assert float(rep.t_step_s) > 1.1 * float(shard.t_step_s)


def test_one_device_and_the_sharding_engines_are_unchanged():
    rep, shard = _pair("llama-3.1-8b", 1)
    assert float(rep.t_step_s) == float(shard.t_step_s)
    v = load_engine("vllm")
    a = pass_time("llama-3.1-8b", GPU, 1, 1, 0, "bf16", tp=8, engine=v)
    b = pass_time("llama-3.1-8b", GPU, 1, 1, 0, "bf16", tp=8, engine=dataclasses.replace(v, lm_head_replicated=True))
    assert float(b.t_step_s) > float(a.t_step_s)  # the flag, not the engine's name, decides


def test_the_scalar_and_array_paths_agree():
    one = _pair("llama-3.1-8b", 8, batch=32, tokens=4, context=4096)[0]
    sweep = pass_time("llama-3.1-8b", GPU, np.array([1, 32]), 4, 4096, "bf16", tp=8, engine=load_engine("compiled"))
    assert float(one.t_step_s) == pytest.approx(float(sweep.t_step_s[1]), rel=1e-12)


def test_the_profile_key_round_trips_and_bad_values_are_refused():
    e = engine_from_dict({"name": "x", "collectives": {"lm_head": "replicated"}})
    assert e.lm_head_replicated and engine_from_dict(engine_data(e)) == e
    assert not engine_from_dict({"name": "x", "collectives": {"lm_head": "sharded"}}).lm_head_replicated
    with pytest.raises(SpecroofError, match="lm_head must be 'replicated' or 'sharded'"):
        engine_from_dict({"name": "x", "collectives": {"lm_head": "whole"}})


def test_every_rank_holds_the_embedding_and_head_in_memory():
    rep, shard = _pair("llama-3.1-8b", 8)
    spec = get_model("llama-3.1-8b")
    copies = 7 * 2 * spec.vocab_size * spec.d_model * 2  # untied: embedding and head, bf16, on 7 more ranks
    assert float(rep.memory_bytes) - float(shard.memory_bytes) == pytest.approx(copies)
    sweep = pass_time("llama-3.1-8b", GPU, np.array([1, 2]), 1, 0, "bf16", tp=8, engine=load_engine("compiled"))
    assert float(sweep.memory_bytes[0]) == pytest.approx(float(rep.memory_bytes))  # the scalar path's, too
