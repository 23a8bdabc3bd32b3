"""The serving simulator at scale (the fast paths give the same numbers), trace length presets, expert parallelism."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import roofline.serving.scheduler as scheduler
from roofline.core.errors import SpecroofError
from roofline.costing.hardware import load_hardware
from roofline.costing.passtime import device_memory, memory_footprint
from roofline.passes.dtypes import dtype_bytes
from roofline.passes.model import get_model
from roofline.serving import kv_capacity_tokens, pricing_context, simulate, step_prices
from roofline.serving.scheduler import _blocks, _Gaps, _isum, _LogUniforms
from roofline.serving.workload import TRACE_LENGTHS, Z90, draw_lengths, synthetic
from roofline.speculation.drafters import as_drafter
from roofline.speculation.parallel import EPCtx, all_to_all_link_bytes_per_s, all_to_all_s, ep_context

HW, TARGET, DRAFT, MOE = "h100-sxm-80gb", "llama-3.1-8b", "model:llama-3.2-1b", "mixtral-8x7b"


# -- the fast paths are the same arithmetic -----------------------------------------------


def test_log_uniforms_in_blocks_are_the_generators_own_stream():
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    lu = _LogUniforms(a)
    lu.SIZE = 5  # tiny blocks: requests straddle them
    sizes = [3, 1, 7, 2, 12, 4]
    got = np.concatenate([lu.take(n) for n in sizes])
    want = np.concatenate([np.log1p(-b.random(n)) for n in sizes])
    assert np.array_equal(got, want)


def test_log_uniforms_transform_each_block_elementwise():
    a, b = np.random.default_rng(11), np.random.default_rng(11)
    lu = _LogUniforms(a, lambda x: np.minimum(np.floor(x * -3.5), 4).astype(np.int64))
    lu.SIZE = 6
    got = np.concatenate([lu.take(n) for n in (4, 5, 1, 9, 3)])
    want = np.minimum(np.floor(np.log1p(-b.random(22)) * -3.5), 4).astype(np.int64)
    assert got.dtype == np.int64 and np.array_equal(got, want)


def test_unit_gaps_bin_as_gaps_of_weight_one():
    rng = np.random.default_rng(5)
    a, b = _Gaps(), _Gaps()
    a.SIZE = b.SIZE = 64  # tiny buffers: flushes and an oversized add on both paths
    for m in (10, 50, 3, 200, 7):
        g = rng.lognormal(-4, 1, m)
        a.add_ones(g)
        b.add(g, 1)
        w = rng.integers(1, 9, m)
        a.add(g, w)
        b.add(g, w)
    assert a.counts().sum() == b.counts().sum() > 0 and np.array_equal(a.counts(), b.counts())


def test_small_batch_sums_by_hand():
    kv = np.array([0, 15, 16, 31, 100], dtype=np.int64)
    assert _blocks(kv, 3 + 16, 16) == (19 // 16) + (34 // 16) + (35 // 16) + (50 // 16) + (119 // 16)
    assert _isum(kv) == 162 and _isum(np.arange(1000, dtype=np.int64)) == 499_500


def _frames(**kw):
    r = simulate(hardware=HW, target=TARGET, drafter=DRAFT, engine="serving", **kw)
    return r.requests, r.summary


_BUSY = dict(policy=["static:3", "by-batch:1=4,16=2,64=0", "goodput:4"], rates=[6.0, 150.0], requests=400,
             input_len="uniform:64-700", output_len="uniform:8-300", kv_capacity_tokens=40_000, max_seqs=96)  # fmt: skip


def _same_with_scheduler(setup=None, **patches):
    """The frames of ``setup`` (default: the busy one) with ``patches`` applied to the scheduler module equal the
    frames without them."""
    setup = _BUSY if setup is None else setup
    want = _frames(acceptance=0.7, **setup)
    mp = pytest.MonkeyPatch()
    for name, value in patches.items():
        mp.setattr(scheduler, name, value)
    try:
        got = _frames(acceptance=0.7, **setup)
    finally:
        mp.undo()
    for a, b in zip(want, got, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    return want


@pytest.mark.parametrize("small", [0, 10**9])
def test_python_sums_for_small_batches_change_no_number(small):
    """Below SMALL_BATCH the loop sums integers in Python, above it with numpy: either everywhere, the same run
    (light and preempting load, three policies)."""
    want = _same_with_scheduler(SMALL_BATCH=small)
    assert want[0]["preemptions"].sum() > 0  # the busy rate does preempt


_PLAIN = dict(policy=["off", "static:2"], rates=[2.0, 6.0, 14.0], requests=500, input_len="uniform:64-700",
              output_len="uniform:8-300", kv_capacity_tokens=5000, max_seqs=12)  # fmt: skip


@pytest.mark.parametrize("closed", [0, 48])
def test_closed_forms_of_plain_rounds_change_no_number(closed):
    """Plain rounds of up to CLOSED_FORM_BATCH requests are priced from closed forms (batch, context and blocks
    held per round from each request's finish round and block boundaries); the (rounds x requests) arrays give
    the same run, light and KV-bound (preempting, runs cut before a round that would not fit)."""
    want = _same_with_scheduler(_PLAIN, CLOSED_FORM_BATCH=closed)
    assert want[0]["preemptions"].sum() > 0  # the tight cache does preempt


def test_python_lists_for_a_few_decodes_in_a_prefill_step_change_no_number():
    """A prefill step's few decodes take their tokens left, emitted and who finishes from Python lists (plain and
    speculating rounds); numpy's arrays give the same run, light and KV-bound."""
    want = _same_with_scheduler(_PLAIN, SMALL_BATCH=0)
    assert want[0]["preemptions"].sum() > 0  # the tight cache does preempt (a prefill step re-admits)


@pytest.mark.parametrize("cells", [0, 10**9])
def test_finish_rounds_searched_in_lists_change_no_number(cells):
    """Up to PY_CELLS drawn tokens (of a few requests) a run searches each request's finish round in a Python list (and sums its
    accepted drafts there); numpy's comparison and sums give the same run (three speculating policies)."""
    _same_with_scheduler(PY_CELLS=cells)


def test_one_alpha_draws_in_bulk_are_the_per_request_draws():
    """With one alpha for all the draws become runs a block at a time; the general per-request arithmetic gives
    the same numbers."""
    _same_with_scheduler(_one_alpha=lambda alpha: False)


@pytest.fixture(scope="module")
def prices():
    ctx = pricing_context(TARGET, HW, engine="serving")
    return step_prices(ctx, as_drafter(DRAFT), max_gamma=3, max_batch=64, max_tokens=512, max_context=1500)


def test_scalar_decode_seconds_is_np_interp_bit_for_bit(prices):
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.uniform(-50, 1700, 500), prices.l_grid[:10], [prices.l_grid[-1], 1e9, 0.0]])
    for g in (0, 1, 3):
        for b in (1, 7, 33, 64):
            want = np.interp(xs, prices.l_grid, prices.decode_curve(g, b))
            got = np.array([prices.decode_seconds(g, b, float(x)) for x in xs])
            assert np.array_equal(got, want)
            assert np.array_equal(prices.decode_time(g, b, xs), want)  # (np.interp's compiled loop, called directly)


def test_varying_batch_prices_are_the_bilinear_interpolation_bit_for_bit(prices):
    rng = np.random.default_rng(1)
    b = rng.integers(1, 65, 300)
    x = rng.uniform(-10, 1600, 300)
    rows = prices._step_rows(3)
    lg = prices.l_grid
    i, wb = prices._b_cell[b], prices._b_weight[b]
    xc = np.clip(x, lg[0], lg[-1])
    k = np.minimum(np.searchsorted(lg, xc, side="right") - 1, lg.size - 2)
    wl = (xc - lg[k]) / (lg[k + 1] - lg[k])
    lo = rows[i, k] + wl * (rows[i, k + 1] - rows[i, k])
    hi = rows[i + 1, k] + wl * (rows[i + 1, k + 1] - rows[i + 1, k])
    assert np.array_equal(prices.decode_time_batches(3, b, x), lo + wb * (hi - lo))


def test_varying_batch_prices_promised_on_the_grid_are_the_same_numbers(prices):
    """``max_batch`` at or below the dense batch grid (weight 0 along batch) and ``inside`` (no clamp) skip work,
    not numbers; past the dense grid the promise changes nothing either."""
    rng = np.random.default_rng(2)
    x = rng.uniform(0, float(prices.l_grid[-1]), 400)
    for top in (1, 5, 16, 40, 64):
        b = rng.integers(1, top + 1, 400)
        for g in (0, 3):
            want = prices.decode_time_batches(g, b, x)
            got = prices.decode_time_batches(g, b, x, max_batch=top, inside=True)
            assert np.array_equal(got, want)
    assert prices._on_grid_to == 16  # every batch up to 16 is a grid point; 20 is the next


def test_pass_time_without_its_zero_weight_terms_is_the_trilinear_formula(prices):
    """A whole batch or token count on the grid leaves its term out of the trilinear interpolation: the full
    formula, written out here, gives the same bits."""
    rng = np.random.default_rng(4)
    from roofline.serving.prices import _lerp as lerp

    tab = prices.target
    bg, ng, lg = (list(map(float, a)) for a in (prices.b_grid, prices.n_grid, prices.l_grid))
    cases = [(int(b), float(n), float(c)) for b, n, c in zip(rng.integers(1, 65, 300), rng.integers(1, 40, 300),
                                                             rng.uniform(0, 1500, 300), strict=True)]  # fmt: skip
    cases += [(int(b), float(n) + 0.37, float(c)) for b, n, c in cases[:100]] + [(7, 3.0, 0.0), (64, 512.0, 1e9)]
    for b, n, c in cases:
        i, wi = lerp(bg, float(b))
        j, wj = lerp(ng, n)
        k, wk = lerp(lg, c)
        a0, a1, b0, b1 = tab[i, j], tab[i, j + 1], tab[i + 1, j], tab[i + 1, j + 1]
        lo = (1 - wj) * ((1 - wk) * a0[k] + wk * a0[k + 1]) + wj * ((1 - wk) * a1[k] + wk * a1[k + 1])
        hi = (1 - wj) * ((1 - wk) * b0[k] + wk * b0[k + 1]) + wj * ((1 - wk) * b1[k] + wk * b1[k + 1])
        assert prices.target_time(b, n, c) == float((1 - wi) * lo + wi * hi)


def test_a_long_light_run_takes_about_two_loop_iterations_per_request():
    """At light load every arrival costs one prefill step and one run of decode rounds; finishes inside a run
    do not cut it (``off``/``static``), so the loop's iterations stay near two per request."""
    import roofline.serving.sweep as sweep

    seen = []
    orig = sweep.simulate_run

    def spy(*a, **k):
        r = orig(*a, **k)
        seen.append(r)
        return r

    n = 4000
    mp = pytest.MonkeyPatch()
    mp.setattr(sweep, "simulate_run", spy)
    try:
        simulate(hardware=HW, target=TARGET, drafter=DRAFT, acceptance=0.75, policy=["static:3"], rates=[4.0],
                 requests=n, input_len="uniform:128-1024", output_len="uniform:16-256", engine="serving")  # fmt: skip
    finally:
        mp.undo()
    (r,) = seen
    assert 0.5 * n <= r.prefill_steps <= n  # each prompt fits the step budget: one step, at times shared
    assert r.decode_runs + r.prefill_steps <= 2.2 * n
    assert r.rounds > 20 * n  # many rounds each: the runs advanced many at once


# -- lengths from a named public trace ----------------------------------------------------


@pytest.mark.parametrize("preset", sorted(TRACE_LENGTHS))
def test_trace_presets_reproduce_the_published_median_and_p90(preset):
    rng = np.random.default_rng(3)
    for col, name in zip(TRACE_LENGTHS[preset], ("input length", "output length"), strict=True):
        x = draw_lengths(preset, 100_000, rng, name)
        assert np.median(x) == pytest.approx(col.median, rel=0.05)
        assert np.percentile(x, 90) == pytest.approx(col.p90, rel=0.05)
        assert x.min() >= 1 and x.max() <= col.max
        assert col.sigma == pytest.approx(math.log(col.p90 / col.median) / Z90)


def test_azure_conversation_figures_are_the_trace_files():
    """The Azure 2023 conversation trace (19,366 requests): median prompt 1020 and output 129 tokens, the medians
    the Splitwise paper reports; p90 2734.5 and 424."""
    inp, out = TRACE_LENGTHS["azure-conv-2023"]
    assert (inp.median, inp.p90, out.median, out.p90) == (1020.0, 2734.5, 129.0, 424.0)
    assert "AzurePublicDataset" in inp.source and "ContextTokens" in inp.source and "GeneratedTokens" in out.source
    w = synthetic(50, "azure-conv-2023", "AZURE-CONV-2023", seed=1)  # case-insensitive, as the other forms
    assert w.input_tokens.max() <= inp.max and w.output_tokens.max() <= out.max


def test_an_unknown_preset_names_the_known_ones():
    with pytest.raises(SpecroofError, match="azure-code-2023"):
        draw_lengths("sharegpt-2099", 5, np.random.default_rng(0), "input length")


# -- expert parallelism -------------------------------------------------------------------


def _moe_ctx(ep: int = 1, **kw):
    return pricing_context(MOE, HW, ep=ep, **kw)


def test_ep_1_is_todays_pricing_and_todays_simulation():
    base = pricing_context(MOE, HW)
    assert type(_moe_ctx(1)) is type(base) and not isinstance(_moe_ctx(1), EPCtx)
    kw = dict(hardware=HW, target=MOE, drafter="eagle3", acceptance=0.7, policy=["off", "static:3"], rates=[4.0],
              requests=80, input_len=256, output_len=32, kv_capacity_tokens=200_000)  # fmt: skip
    a, b = simulate(**kw), simulate(**kw, ep=1)
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.summary, b.summary, check_exact=True)


def test_the_all_to_all_term_by_hand():
    spec = get_model(MOE)
    ab = dtype_bytes("bf16")
    # per GPU: 8 of 64 sequences, one token each; 2 copies of d_model = 4096 bf16 values a token, 7/8 leave the GPU,
    # out and back, in each of 32 MoE layers, over 450 GB/s NVLink
    want = 2 * 32 * (7 / 8) * (8 * 2 * 4096 * 2) / 450e9
    assert float(all_to_all_s(spec, 8, 8, ab, 450e9)) == pytest.approx(want, rel=1e-12)
    # and inside the priced pass: only the link changes between the two contexts
    fast, slow = _moe_ctx(8, ep_link_GB_per_s=900.0), _moe_ctx(8, ep_link_GB_per_s=450.0)
    t_fast = float(fast.pass_s(fast.target, 64, 1, 512, tp=1))
    t_slow = float(slow.pass_s(slow.target, 64, 1, 512, tp=1))
    assert t_slow - t_fast == pytest.approx(want / 2, rel=1e-9)
    assert float(_moe_ctx(8).pass_s(fast.target, 64, 1, 512)) == pytest.approx(t_slow, rel=1e-12)  # NVLink default


def test_each_gpu_streams_its_share_of_the_experts():
    """A decode step where every expert is touched: EP 8 reads the non-expert weights and one expert per layer per
    GPU, so the step is much cheaper than one GPU's pass over its 8 sequences with all experts, and the all-to-all
    is paid on top."""
    base, ep8 = _moe_ctx(1), _moe_ctx(8)
    t1 = float(base.pass_s(base.target, 8, 1, 512))  # one GPU, its 8 sequences, all 8 experts streamed
    t8 = float(ep8.pass_s(ep8.target, 64, 1, 512))  # 64 sequences over 8 GPUs
    a2a = float(all_to_all_s(ep8.target, 8, 8, dtype_bytes("bf16"), ep8.link_bytes_per_s))
    spec = ep8.target
    expert_bytes = spec.n_moe_layers * spec.n_experts * spec.expert_params * 2
    assert t8 < t1 and t8 - a2a < t1 * (1 - 0.5 * expert_bytes / (spec.total_params * 2))
    # a draft model's passes run data-parallel: the busiest GPU's ceil(64 / 8) sequences
    small = get_model("mistral-7b")
    assert float(ep8.pass_s(small, 64, 1, 512)) == float(base.pass_s(small, 8, 1, 512))


def test_kv_capacity_over_ep_gpus_by_hand():
    ctx = _moe_ctx(8)
    pr, spec = ctx.pricing, ctx.target
    per_token = float(spec.kv_bytes(1, dtype_bytes(pr.kv_dtype or pr.dtype)))
    fp = memory_footprint(spec, 1, 0, weight_dtype=pr.stored_weight_dtype, act_dtype=pr.dtype, new_tokens=2048)
    experts = spec.n_moe_layers * spec.n_experts * spec.expert_params * dtype_bytes(pr.stored_weight_dtype)
    fixed = float(device_memory(spec, pr, 1, 0)) + float(np.asarray(fp.activation_bytes)) - experts * 7 / 8
    want = 8 * math.floor((pr.memory_bytes * 0.9 - fixed) / per_token)
    assert kv_capacity_tokens(ctx, None, max_tokens=2048, ep=8) == want
    with pytest.raises(SpecroofError, match="leaves no room"):  # 93 GB of bf16 Mixtral on one 80 GB GPU
        kv_capacity_tokens(_moe_ctx(1), None, max_tokens=2048)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(target=TARGET, ep=2), "dense model"),
        (dict(target=MOE, ep=3), "must divide"),
        (dict(target=MOE, ep=0), "ep must be a whole number"),
        (dict(target=MOE, ep=4, tp=2), "give tp=1"),
        (dict(target=MOE, ep=2, ep_link_GB_per_s=-1.0), "ep_link_GB_per_s must be a positive"),
    ],
)
def test_bad_ep_settings_are_one_clear_error(kw, match):
    with pytest.raises(SpecroofError, match=match):
        pricing_context(kw.pop("target"), HW, **kw)


def test_ep_past_one_node_needs_a_network_figure_and_a_profile_needs_an_interconnect():
    hw = load_hardware(HW)
    with pytest.raises(SpecroofError, match="spans nodes of 8 GPUs"):
        all_to_all_link_bytes_per_s(hw, 16)
    assert all_to_all_link_bytes_per_s(hw, 16, 50.0) == 50e9
    assert all_to_all_link_bytes_per_s(hw, 8) == hw.interconnect_bytes_per_s
    no_link = load_hardware("apple-m4-max")
    if no_link.interconnect_bytes_per_s is None:
        with pytest.raises(SpecroofError, match="lists no interconnect"):
            all_to_all_link_bytes_per_s(no_link, 2)


def test_ep_context_keeps_the_pricing_and_the_target():
    base = pricing_context(MOE, HW)
    ep = ep_context(base, 8)
    assert isinstance(ep, EPCtx) and ep.target is base.target and ep.pricing is base.pricing and ep.ep == 8


def test_ep_refuses_the_drafter_whose_verify_pass_it_cannot_see():
    with pytest.raises(SpecroofError, match="n-gram drafter"):
        simulate(hardware=HW, target=MOE, drafter="prompt-lookup", policy=["static:3"], rates=[1.0], requests=5,
                 input_len=64, output_len=8, ep=8)  # fmt: skip
