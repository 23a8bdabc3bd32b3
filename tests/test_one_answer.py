"""One answer, one band (issue 55, Build 6; docs/cost-model.md, section 51).

The weight format is applied to the bytes it changes; ``roofline --tp`` prices every figure at its TP;
``roofline --json`` is self-consistent; every path looks its error band up with the answer's own group.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import roofline as rf
from roofline.costing.passtime import pass_cost
from roofline.costing.pricing import Pricing
from roofline.evidence.error_bands import band_for as kind_band
from specroof.cli import main


def _json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


# -- the weight format applied to the bytes it changes ----------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-oss-20b", "gpt-oss-120b"])
@pytest.mark.parametrize("hw", ["h100-sxm-80gb", "a100-sxm-80gb", "l40s-48gb"])
def test_quantising_the_other_weights_never_slows_mxfp4_experts(model, hw):
    # gpt-oss's experts stay MXFP4 whatever --weight-dtype says: int4 shrinks only the other weights, so the pass
    # can only get faster; the engine's int4 kernels (their bytes factor and rate) do not touch the experts' bytes
    for batch in (1, 8, 64, 256):
        bf16 = float(rf.pass_time(model, hw, batch, 1, 2048, engine="vllm").t_step_s)
        int4 = float(rf.pass_time(model, hw, batch, 1, 2048, weight_dtype="int4", engine="vllm").t_step_s)
        assert int4 < bf16, (batch, bf16, int4)


def test_own_format_bytes_are_the_routed_experts_and_every_path_agrees():
    spec = rf.get_model("gpt-oss-120b")
    pr = Pricing.of(rf.load_hardware("h100-sxm-80gb"), engine="vllm", weight_dtype="int4")
    cost = pass_cost(spec, pr, 8, 1, 2048)
    touched = float(cost.routed_experts)
    assert float(cost.expert_format_bytes) == pytest.approx(
        spec.n_moe_layers * touched * spec.expert_params * spec.expert_bytes(0.5)
    )
    # the scalar path (plain floats) and the array path price the same pass
    one = float(rf.pass_time(spec, pr, 8, 1, 2048).t_step_s)
    arr = rf.pass_time(spec, pr, np.array([8, 8]), 1, 2048).t_step_s
    assert np.allclose(arr, one, rtol=1e-12)
    # without an engine the roofline already priced the bytes as they are: nothing changes there
    plain = Pricing.of(rf.load_hardware("h100-sxm-80gb"), weight_dtype="int4")
    st = rf.pass_time(spec, plain, 8, 1, 2048)
    assert float(st.t_memory_s) == pytest.approx(float(st.cost.total_bytes) / plain.hardware.bandwidth(), rel=1e-9)


def test_a_model_without_an_expert_format_is_priced_as_before():
    pr = Pricing.of(rf.load_hardware("h100-sxm-80gb"), engine="vllm", weight_dtype="int4")
    cost = pass_cost(rf.get_model("qwen3-30b-a3b"), pr, 8, 1, 2048)
    assert float(np.max(cost.expert_format_bytes)) == 0.0


# -- roofline --tp and --json ------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_roofline_tp_prices_crossover_k_at_its_tp(capsys, engine):
    out = _json(capsys, "roofline", "--hardware", "h200", "--model", "deepseek-v3", "--tp", "8", "--engine", engine,
                "--batch", "256", "--context", "2048", "--json")  # fmt: skip
    api = int(rf.crossover_tokens("deepseek-v3", "h200", 256, 2048, engine=engine, tp=8))
    assert out["crossover_tokens"] == api
    assert api != int(rf.crossover_tokens("deepseek-v3", "h200", 256, 2048, engine=engine))  # TP moves it here


@pytest.mark.parametrize(
    ("model", "engine"),
    [("deepseek-v3", "vllm"), ("qwen3-30b-a3b", "sglang"), ("gpt-oss-20b", "vllm"), ("llama-3.1-8b", None)],
)
def test_roofline_json_flops_over_bytes_is_its_intensity(capsys, model, engine):
    argv = ["roofline", "--hardware", "h200", "--model", model, "--batch", "64", "--context", "1024", "--json"]
    if model == "deepseek-v3":
        argv += ["--tp", "8"]
    if engine:
        argv += ["--engine", engine]
    out = _json(capsys, *argv)
    assert out["flops"] / out["total_bytes"] == pytest.approx(out["arithmetic_intensity"], rel=1e-9)


# -- every path's band is the answer's own group -----------------------------------------------------------------


def test_the_plain_speedup_path_looks_its_band_up_with_its_batch_moe_and_context(capsys):
    argv = ["speedup", "--hardware", "h200", "--target", "qwen3-30b-a3b", "--drafter", "eagle3", "--mean-accepted",
            "3", "--gamma", "3", "--engine", "sglang", "--json"]  # fmt: skip
    for batch, context in ((32, 2048), (1, 2048), (1, 32768)):
        out = _json(capsys, *argv, "--batch", str(batch), "--context", str(context))
        own = kind_band("sglang", "speculative", "h200", batch=batch, model="qwen3-30b-a3b", context=context)
        assert own is not None
        assert out["error_band_note"] == own.description, (batch, context)
    dense_b1 = kind_band("sglang", "speculative", "h200", batch=1, model="llama-3.1-8b", context=0)
    out = _json(capsys, *argv, "--batch", "32")
    assert (
        out["error_band_note"] != dense_b1.description
    )  # a batch-32 MoE answer no longer prints the dense batch-1 band
