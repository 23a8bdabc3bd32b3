"""The per-operator cost model: hand-checked counts, broadcasting, properties, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import (
    SpecroofError,
    batch_sweep,
    crossover_tokens,
    forward_cost,
    get_model,
    max_batch,
    memory_footprint,
    pass_time,
    prefill_vs_decode,
    step_time,
)
from roofline.passes.cost import expected_experts_touched

L8B = get_model("llama-3.1-8b")


def test_hand_counted_decode_of_llama_3_1_8b():
    c = forward_cost(L8B, batch=2, new_tokens=3, context=100, weight_dtype="bf16")
    ops = dict(zip(c.operators, range(len(c.operators)), strict=True))
    T = 6
    # lm_head FLOPs carry the factor 2 (the bug LLM-Viewer users report)
    assert c.flops[ops["lm_head"]] == 2 * T * 4096 * 128256
    # GQA: KV bytes use 8 KV heads, not 32 query heads; K half read in scores
    assert c.bytes_kv_read[ops["attn_scores"]] == 2 * 100 * 32 * 8 * 128 * 2
    assert c.bytes_kv_write[ops["qkv"]] == T * 32 * 2 * 8 * 128 * 2
    # causal visibility: each of 3 new tokens sees 100 cached + 1..3 new
    assert c.flops[ops["attn_scores"]] == 2 * 2 * (3 * 100 + 6) * 32 * 128 * 32
    # every weight except the untouched embedding rows is read once
    assert float(c.weight_bytes) == pytest.approx((L8B.total_params - 128256 * 4096 + T * 4096) * 2)


def test_breakdown_and_bounds():
    st_ = pass_time("llama-3.1-8b", "h100-sxm-80gb", 1, 1, 1024, "bf16")
    df = st_.breakdown()
    assert list(df["operator"])[0] == "embed" and set(df["bound"]) == {"memory"}
    assert df["t_s"].sum() == pytest.approx(float(st_.t_step_s))
    big = pass_time("llama-3.1-8b", "h100-sxm-80gb", 64, 64, 1024, "bf16").breakdown()
    assert big.set_index("operator").loc["mlp", "bound"] == "compute"


def test_sweep_broadcasts_to_the_grid():
    B = np.array([1, 2, 4])[:, None, None]
    n = np.array([1, 8])[None, :, None]
    L = np.array([0, 512, 4096, 8192])[None, None, :]
    st_ = pass_time(L8B, "h100-sxm-80gb", B, n, L, "bf16")
    assert st_.t_step_s.shape == (3, 2, 4)
    assert float(st_.t_step_s[1, 1, 2]) == pytest.approx(
        float(pass_time(L8B, "h100-sxm-80gb", 2, 8, 4096, "bf16").t_step_s), rel=1e-12
    )


def test_tree_attention_sees_ancestors_only():
    depths = np.array([1, 1, 2, 2, 2, 2])
    tree = forward_cost(L8B, 1, None, 50, weight_dtype="bf16", tree=depths)
    chain = forward_cost(L8B, 1, 6, 50, weight_dtype="bf16")
    i = tree.operators.index("attn_scores")
    assert tree.flops[i] == 2 * (6 * 50 + depths.sum()) * 32 * 128 * 32
    assert tree.flops[i] < chain.flops[i]
    assert float(tree.weight_bytes) == float(chain.weight_bytes)


def test_moe_touches_more_experts_with_more_tokens():
    assert float(expected_experts_touched(8, 2, 1)) == pytest.approx(2.0)
    assert float(expected_experts_touched(8, 2, 1000)) == pytest.approx(8.0)
    w1 = float(forward_cost("mixtral-8x7b", 1, 1, 0, weight_dtype="bf16").weight_bytes)
    w5 = float(forward_cost("mixtral-8x7b", 1, 5, 0, weight_dtype="bf16").weight_bytes)
    assert w5 > 1.5 * w1  # a 5-token verify reads far more expert weights than one step


def test_memory_footprint_and_max_batch():
    fp = memory_footprint("llama-2-13b", batch=8, context=4095, weight_dtype="fp16")
    assert fp.weights_bytes == pytest.approx(26.03e9, rel=1e-3)
    assert fp.kv_bytes == 8 * 4096 * 2 * 40 * 5120 * 2
    b = max_batch("llama-2-13b", "a100-sxm-80gb", 4095)
    assert (
        memory_footprint("llama-2-13b", b, 4095).total_bytes
        <= 80e9
        < memory_footprint("llama-2-13b", b + 1, 4095).total_bytes
    )


def test_batch_sweep_and_prefill_tables():
    df = batch_sweep("llama-2-13b", "a100-sxm-80gb", [1, 4, 16, 64], context=1024)
    assert list(df.columns)[:3] == ["batch", "t_step_s", "latency_per_token_s"]
    assert df["tokens_per_s_total"].is_monotonic_increasing
    assert df["latency_per_token_s"].is_monotonic_increasing
    pd_ = prefill_vs_decode("llama-2-13b", "a100-sxm-80gb", 2048).set_index("phase")
    assert pd_.loc["prefill", "bound"] == "compute" and pd_.loc["decode", "bound"] == "memory"


def test_crossover_shrinks_with_batch_and_grows_with_context():
    k = crossover_tokens(L8B, "h100-sxm-80gb", [1, 8, 64], 1024, "bf16")
    assert k[0] > k[1] > k[2] >= 1
    assert crossover_tokens(L8B, "h100-sxm-80gb", 64, 32768, "bf16") > k[2]
    for b, kk in zip([1, 8, 64], k, strict=True):  # exact: K stays memory bound, K+1 does not
        assert bool(pass_time(L8B, "h100-sxm-80gb", b, kk, 1024, "bf16").memory_bound)
        assert not bool(pass_time(L8B, "h100-sxm-80gb", b, kk + 1, 1024, "bf16").memory_bound)


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(1, 256),
    n=st.integers(1, 256),
    ctx=st.integers(0, 30000),
    db=st.integers(1, 64),
    dn=st.integers(1, 64),
    dc=st.integers(1, 2000),
)
def test_cost_is_monotone_in_batch_tokens_and_context(b, n, ctx, db, dn, dc):
    base = forward_cost(L8B, b, n, ctx, weight_dtype="bf16")
    for more in (
        forward_cost(L8B, b + db, n, ctx, weight_dtype="bf16"),
        forward_cost(L8B, b, n + dn, ctx, weight_dtype="bf16"),
        forward_cost(L8B, b, n, ctx + dc, weight_dtype="bf16"),
    ):
        assert float(more.total_flops) >= float(base.total_flops)
        assert float(more.total_bytes) >= float(base.total_bytes)
        assert float(step_time(more, "h100-sxm-80gb").t_step_s) >= float(step_time(base, "h100-sxm-80gb").t_step_s)


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 32))
def test_batch_decode_intensity_scales_with_batch_when_weights_dominate(b):
    # short context: weights dominate the bytes, so intensity ~ B x batch-1 intensity
    i1 = float(forward_cost(L8B, 1, 1, 16, weight_dtype="bf16").intensity)
    ib = float(forward_cost(L8B, b, 1, 16, weight_dtype="bf16").intensity)
    assert ib / i1 == pytest.approx(b, rel=0.05)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40))
def test_memory_bound_pass_time_is_flat_below_k(n, m13b, a100):
    k = int(crossover_tokens(m13b, a100))
    assert n <= k
    assert float(pass_time(m13b, a100, 1, n).t_step_s) == float(pass_time(m13b, a100, 1, 1).t_step_s)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch": -1}, "batch must be >= 1 .got -1"),
        ({"batch": 1.5}, "batch must be a whole number"),
        ({"new_tokens": 0}, "new_tokens must be >= 1"),
        ({"context": -5}, "context must be >= 0"),
        ({"context": 200000}, "exceeds llama-3.1-8b's max context of 131072"),
        ({"weight_dtype": "fp12"}, "unknown dtype 'fp12'"),
        ({"batch": float("nan")}, "batch must be finite"),
        ({"batch": "lots"}, "batch must be a number"),
    ],
)
def test_bad_input_names_the_field(kwargs, message):
    with pytest.raises(SpecroofError, match=message):
        forward_cost(L8B, **kwargs)


def test_step_time_bad_input():
    c = forward_cost(L8B)
    with pytest.raises(SpecroofError, match="overhead_s must be >= 0"):
        step_time(c, "h100-sxm-80gb", overhead_s=-1.0)
    with pytest.raises(SpecroofError, match="unknown dtype 'fp7'"):
        step_time(c, "h100-sxm-80gb", "fp7")


def test_measured_refinements_change_the_step_time_as_documented(tmp_path):
    from roofline.costing.hardware import Measured, load_hardware
    from roofline.costing.passtime import step_time

    base = load_hardware("h100-sxm-80gb")
    cost = forward_cost(L8B, 1, np.array([1, 8, 512]), 1024, weight_dtype="bf16")
    plain = step_time(cost, base)
    # overlap 0: every operator's memory and compute time add up instead of the max
    added = step_time(cost, base.replace(measured=Measured(overlap=0.0)))
    np.testing.assert_allclose(added.t_step_s, (plain.op_memory_s + plain.op_compute_s).sum(axis=0))
    # a one-token bandwidth applies to one-token passes only
    fast1 = step_time(cost, base.replace(measured=Measured(gemv_bandwidth_bytes_per_s=2 * base.bandwidth())))
    assert fast1.t_step_s[0] == pytest.approx(plain.t_step_s[0] / 2, rel=0.01)
    assert fast1.t_step_s[1:] == pytest.approx(plain.t_step_s[1:])
    # a slow attention only touches the attention operators
    slow = step_time(cost, base.replace(measured=Measured(attention_flop_per_s=base.peak("bf16") / 100)))
    ops = list(cost.operators)
    other = [i for i, o in enumerate(ops) if not o.startswith("attn")]
    np.testing.assert_allclose(slow.op_compute_s[other], plain.op_compute_s[other])
    assert (slow.op_compute_s[ops.index("attn_scores")] > 50 * plain.op_compute_s[ops.index("attn_scores")]).all()
    # and the profile round-trips through TOML
    p = tmp_path / "m.toml"
    from roofline.costing.hardware import Measured, write_profile

    write_profile(base.replace(measured=Measured(overlap=0.25, gemv_bandwidth_bytes_per_s=5e12)), p)
    hw = load_hardware(str(p))
    assert hw.overlap == 0.25 and hw.gemv_bandwidth() == 5e12
    p.write_text(p.read_text().replace("overlap = 0.25", "overlap = 1.5"))
    with pytest.raises(Exception, match="overlap"):
        load_hardware(str(p))


def test_rows_bandwidth_prices_each_range_of_rows_at_its_rate_and_round_trips(tmp_path):
    from roofline.costing.hardware import Measured, load_hardware, write_profile
    from roofline.costing.passtime import step_time

    base = load_hardware("h100-sxm-80gb")
    bw = base.bandwidth()
    # passes of 1, 2, 3, 16, 17 and 512 tokens (batch 1): one row each range's edge and past it
    cost = forward_cost(L8B, 1, np.array([1, 2, 3, 16, 17, 512]), 1024, weight_dtype="bf16")
    plain = step_time(cost, base)
    m = Measured(gemv_bandwidth_bytes_per_s=bw / 2, rows_bandwidth_bytes_per_s={2: bw / 4, 16: bw / 8})
    ranged = step_time(cost, base.replace(measured=m))
    # memory time scales with 1 / rate: 1 row at the gemv rate, 2 rows at the first range's, 3-16 at the second's,
    # wider passes at the bandwidth
    np.testing.assert_allclose(ranged.t_memory_s / plain.t_memory_s, [2, 4, 8, 8, 1, 1], rtol=1e-12)
    # the TOML block holds them as a table of max rows, and reads back
    p = tmp_path / "r.toml"
    write_profile(base.replace(measured=m), p)
    assert "[measured.rows_bandwidth_GB_per_s]" in p.read_text()
    back = load_hardware(str(p))
    assert back.measured.rows_bandwidth_bytes_per_s == pytest.approx({2: bw / 4, 16: bw / 8})
    np.testing.assert_allclose(step_time(cost, back).t_step_s, ranged.t_step_s, rtol=1e-12)
    text = p.read_text()
    for line, broken, words in (("2 = ", "1 = 5.0", "whole number >= 2"), ("16 = ", "16 = -3.0", "must be positive")):
        start = text.index("\n" + line) + 1
        p.write_text(text[:start] + broken + text[text.index("\n", start) :])
        with pytest.raises(SpecroofError, match=words):
            load_hardware(str(p))


def test_rows_bandwidth_prices_an_abstract_models_scalar_pass_as_the_array_path():
    # an abstract model (one operator) has no step pricer: its scalar passes take the plain-float path
    from roofline.costing.hardware import Measured, load_hardware
    from roofline.costing.passtime import pass_time
    from roofline.passes.model import ModelSpec

    base = load_hardware("h100-sxm-80gb")
    bw = base.bandwidth()
    hw = base.replace(measured=Measured(gemv_bandwidth_bytes_per_s=bw / 2, rows_bandwidth_bytes_per_s={2: bw / 4}))
    spec = ModelSpec.from_params(13e9)
    for n in (1, 2, 3, 64):
        one = pass_time(spec, hw, 1, n, 1024)
        arr = pass_time(spec, hw, np.array([1]), np.array([n]), np.array([1024]))
        assert float(one.t_step_s) == pytest.approx(float(arr.t_step_s[0]), rel=1e-12), n
