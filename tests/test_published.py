"""Engines priced as they run (#23): eager as counted kernel launches, serving terms, error bands, the table's checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine, engine_from_dict, load_engine
from roofline.costing.hardware import load_hardware
from roofline.costing.timemodel import TimeModel
from roofline.evidence.published import load_published
from roofline.passes.cost import forward_cost


def _tm(hardware: str, engine: Engine | str) -> TimeModel:
    e = load_engine(engine)
    assert e is not None
    return dataclasses.replace(load_hardware(hardware).time_model(engine=e), engine=e)


def _step(model: str, hardware: str, engine: Engine | str, batch: int = 1, context: int = 512) -> float:
    cost = forward_cost(model, batch, 1, context, weight_dtype="bf16")
    return float(_tm(hardware, engine).pass_seconds(cost, "bf16"))


# -- eager: kernels counted from the model, issued one by one ---------------------------------


def test_eager_changes_with_the_gpu_and_the_model_size():
    for engine in ("hf", "torch-eager"):
        a100, h200 = _step("llama-2-70b", "a100-sxm-80gb", engine), _step("llama-2-70b", "h200-sxm-141gb", engine)
        assert h200 < 0.9 * a100  # big matmuls show through the launches: a faster HBM is faster
        assert _step("llama-2-70b", "h200-sxm-141gb", engine) > 1.5 * _step("llama-2-7b", "h200-sxm-141gb", engine)
    # a 32-layer 7B and a 32-layer 68M-wide stack are both launch-bound under HF: nearly the same step
    assert _step("llama-2-7b", "h200-sxm-141gb", "torch-eager") > _step("llama-68m", "h200-sxm-141gb", "torch-eager")


def test_the_launch_pipeline_is_the_device_alone_when_launching_is_free_and_the_host_alone_when_it_is_slow():
    base = load_engine("torch-eager")
    cost = forward_cost("llama-2-7b", 1, 1, 512, weight_dtype="bf16")
    free = dataclasses.replace(base, host_launch_s=1e-12)
    device = float(dataclasses.replace(_tm("h100-sxm-80gb", free), engine=None).pass_seconds(cost, "bf16"))
    assert float(_tm("h100-sxm-80gb", free).pass_seconds(cost, "bf16")) == pytest.approx(device, rel=1e-6)
    slow = dataclasses.replace(base, host_launch_s=1e-3)  # 1 ms a kernel: the host is all there is
    k = base.launches
    per_layer = 2 * k["norm"] + k["qkv"] + k["rotary"] + k["kv_update"] + k["attention"] + k["out_proj"]
    per_layer += 3 * k["mlp_matrix"] + k["activation"] + 2 * k["residual"]
    kernels = 32 * per_layer + k["embed"] + k["norm"] + k["lm_head"] + k["sampling"]
    t = float(_tm("h100-sxm-80gb", slow).pass_seconds(cost, "bf16"))
    assert kernels * 1e-3 * (1 - 1e-12) <= t < kernels * 1e-3 + 1e-3  # every issue, then the last kernels


def test_the_launch_pipeline_matches_a_kernel_by_kernel_simulation():
    """The closed form (maxima at a run's ends and the first or last layer) against the recurrence itself."""
    e = load_engine("hf")
    assert e is not None
    for h in (2e-6, 6e-6, 3e-5):
        eng = dataclasses.replace(e, host_launch_s=h)
        cost = forward_cost("llama-2-7b", 4, 1, 900, weight_dtype="bf16")
        tm = _tm("a100-sxm-80gb", eng)
        op_mem, op_comp = tm.operator_times(cost, "bf16")
        from roofline.costing.timemodel import combine

        op = dict(zip(cost.operators, np.maximum(op_mem, op_comp).reshape(len(cost.operators)), strict=True))
        k, nl = eng.launches, cost.n_layers
        norm = op["norms"] / (2 * nl + 1)
        layer = [
            (k["norm"], norm), (k["qkv"], op["qkv"] / nl), (k["rotary"], 0.0), (k["kv_update"], 0.0),
            (k["attention"], (op["attn_scores"] + op["attn_values"]) / nl), (k["out_proj"], op["out_proj"] / nl),
            (k["residual"], 0.0), (k["norm"], norm), (3 * k["mlp_matrix"], op["mlp"] / nl), (k["activation"], 0.0),
            (k["residual"], 0.0),
        ]  # fmt: skip
        kernels = [op["embed"] / k["embed"]] * int(k["embed"])
        for _ in range(nl):
            for n, d in layer:
                kernels += [d / n] * int(n)
        kernels += [norm / k["norm"]] * int(k["norm"]) + [op["lm_head"] / k["lm_head"]] * int(k["lm_head"])
        kernels += [0.0] * int(k["sampling"])
        issue, end = 0.0, 0.0
        for d in kernels:
            issue += h
            end = max(issue, end) + d  # a kernel starts once issued and once the one before is done
        fixed = tm.overhead_s(nl)
        closed = float(tm.compose(combine(op_mem, op_comp, tm.overlap), fixed, 0.0, nl, cost=cost))
        assert closed == pytest.approx(end + eng.host_step_s, rel=1e-9)


def test_a_users_own_launch_cost_replaces_the_profiles():
    e = load_engine("torch-eager")
    assert e is not None
    mine = e.with_host_launch(5.0)
    assert mine.host_launch_s == pytest.approx(5e-6) and mine.launches == e.launches
    assert _step("llama-2-7b", "h100-sxm-80gb", mine) < _step("llama-2-7b", "h100-sxm-80gb", e)
    with pytest.raises(SpecroofError, match="host_launch_us must lie in"):
        e.with_host_launch(-1.0)
    with pytest.raises(SpecroofError, match="launches whole graphs"):
        load_engine("compiled").with_host_launch(5.0)  # type: ignore[union-attr]


# -- serving terms ----------------------------------------------------------------------------


def test_a_step_host_time_adds_unless_the_engine_overlaps_it():
    cost = forward_cost("llama-3.1-8b", 8, 1, 512, weight_dtype="bf16")
    plain = Engine("p")
    serial = Engine("s", host_step_s=1e-3, host_step_per_seq_s=1e-5)
    hidden = dataclasses.replace(serial, step_overlap=True)
    t0, t1, t2 = (float(_tm("h100-sxm-80gb", e).pass_seconds(cost, "bf16")) for e in (plain, serial, hidden))
    assert t1 == pytest.approx(t0 + 1e-3 + 8e-5)
    assert t2 == pytest.approx(t0)  # 1.08 ms of scheduling hides under a ~6 ms pass


def test_paged_kv_reads_at_their_own_rate_and_sampling_reads_the_logits():
    cost = forward_cost("llama-3.1-8b", 64, 1, 2048, weight_dtype="bf16")
    base = float(_tm("h100-sxm-80gb", Engine("b")).pass_seconds(cost, "bf16"))
    slow_kv = float(_tm("h100-sxm-80gb", Engine("k", kv_bandwidth_fraction=0.5)).pass_seconds(cost, "bf16"))
    bw = _tm("h100-sxm-80gb", Engine("b")).bandwidth_bytes_per_s
    assert slow_kv - base == pytest.approx(float(cost.kv_read_bytes) / bw, rel=1e-6)
    sampled = float(_tm("h100-sxm-80gb", Engine("s", sampling_passes=3)).pass_seconds(cost, "bf16"))
    assert sampled - base == pytest.approx(64 * 128256 * 4 * 3 / bw, rel=1e-6)


def test_the_aliases_keep_their_meaning():
    assert load_engine("eager") == load_engine("hf") and load_engine("serving") == load_engine("vllm")
    assert load_engine("sglang").step_overlap and not load_engine("vllm").step_overlap  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "data, message",
    [
        ({"name": "x", "launches": {"softmax": 3}}, "unknown key 'softmax' in [launches]"),
        ({"name": "x", "launches": {"norm": 8}}, "launches are counted but host_launch_s is 0"),
        ({"name": "x", "host": {"launch_us": 5}, "launches": {"norm": -1}}, "launches['norm'] must be"),
        ({"name": "x", "host": {"step_overlap": "yes"}}, "step_overlap must be true or false"),
        ({"name": "x", "device": {"kv_bandwidth_fraction": 1.5}}, "kv_bandwidth_fraction must lie in (0, 1]"),
        ({"name": "x", "device": {"sampling_passes": -1}}, "sampling_passes must be >= 0"),
    ],
)
def test_a_bad_engine_field_is_one_clear_error(data, message):
    with pytest.raises(SpecroofError) as e:
        engine_from_dict(data)
    assert message in str(e.value)


# -- the published table's checks -------------------------------------------------------------

_HEAD = 'source = "s"\nurl = "https://example.org/x"\nsetup = "a setup of twenty chars"\nhardware = "a100-sxm-80gb"\n'


@pytest.mark.parametrize(
    "row, message",
    [
        ('kind = "decode"\nmodel = "m"\nengine = "warp"\ntokens_per_s = 5', "engine 'warp' is not shipped"),
        ('kind = "decode"\nmodel = "m"\nengine = "hf"\ntokens_per_s = -5', "tokens_per_s must be a finite number > 0"),
        ('kind = "decode"\nmodel = "m"\nengine = "hf"\ntokens_per_s = nan', "tokens_per_s must be a finite number"),
        ('kind = "decode"\nmodel = "m"\nengine = "hf"', "give tokens_per_s or speedup"),
        ('kind = "batched"\nmodel = "m"\nengine = "vllm"\nbatch = 8\ntokens_per_s = 5', "gives prompt_tokens >= 1"),
        ('kind = "decode"\nmodel = "m"\nengine = "hf"\nbatch = 0\ntokens_per_s = 5', "batch must lie in [1, 4096]"),
    ],
)
def test_a_bad_published_row_names_its_file_row_and_field(tmp_path, row, message):
    (tmp_path / "bad.toml").write_text(_HEAD + 'use = "validation"\n[[row]]\n' + row + "\n")
    with pytest.raises(SpecroofError) as e:
        load_published(tmp_path)
    assert "bad.toml: row 1" in str(e.value) and message in str(e.value)
    assert len(str(e.value).splitlines()) == 1


def test_every_shipped_published_row_passes_the_checks():
    rows = load_published()
    assert len(rows) >= 40 and rows["url"].str.len().min() > 10
