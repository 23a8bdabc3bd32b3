"""Chain speculation: closed forms, metrics, roofline speedup, drafters, regimes, Monte-Carlo, planner."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import SpecroofError, get_model
from roofline.deploy.planner import plan, recommend, speculation_stops_paying
from roofline.speculation.simulate import simulate_chain, simulate_from_distributions
from roofline.speculation.speculative import (
    DraftModel,
    EarlyExit,
    Heads,
    ParallelBlock,
    PromptLookup,
    SlidingWindowSelfDraft,
    acceptance_rate,
    break_even_alpha,
    draft_cost_ratio,
    expected_tokens,
    expected_tokens_curve,
    ideal_speedup,
    metrics_from_counts,
    optimal_gamma,
    speedup,
)

# -- the seeds -------------------------------------------------------------------


def test_seed_round_examples():
    # seed 002: three drafts, two accepted, one correction -> 3 tokens; all four accepted -> 4 + bonus
    m = metrics_from_counts(rounds=1, drafted=3, accepted=2, emitted=3, gamma=3)
    assert m.mean_acceptance_length == 3
    m = metrics_from_counts(rounds=1, drafted=4, accepted=4, emitted=5, gamma=4)
    assert m.mean_acceptance_length == 5 and m.system_efficiency == 1.0
    assert float(expected_tokens(1.0, 4)) == 5.0


def test_section_9_series_and_its_limit():
    a, g = 0.7, 5
    series = sum(a**j for j in range(g + 1))
    assert float(expected_tokens(a, g)) == pytest.approx(series, rel=1e-14)
    assert float(expected_tokens(1.0, g)) == g + 1
    # next to 1 there is no cancellation: the limit is approached smoothly
    from fractions import Fraction

    for eps in (1e-3, 1e-6, 1e-9, 1e-12, 1e-15):
        a_ = 1 - eps
        exact = float(sum(Fraction(a_) ** j for j in range(g + 1)))  # the series, in exact rationals
        assert float(expected_tokens(a_, g)) == pytest.approx(exact, rel=4e-16)
    assert float(expected_tokens(0.0, 7)) == 1.0
    assert float(expected_tokens(0.5, 0)) == 1.0


def test_section_10_speedup():
    a, g, c = 0.8, 4, 0.05
    e = (1 - a ** (g + 1)) / (1 - a)
    assert float(ideal_speedup(a, g, c)) == pytest.approx(e / (g * c + 1))


def test_per_position_curve():
    curve = [0.9, 0.8, 0.5]
    assert float(expected_tokens_curve(curve)) == pytest.approx(1 + 0.9 + 0.72 + 0.36)
    assert float(expected_tokens_curve(curve, 2)) == pytest.approx(1 + 0.9 + 0.72)
    assert float(expected_tokens_curve([0.6] * 6)) == pytest.approx(float(expected_tokens(0.6, 6)))
    np.testing.assert_allclose(expected_tokens_curve(curve, np.array([0, 1, 3])), [1, 1.9, 2.98])


def test_optimal_gamma_and_break_even():
    g, s = optimal_gamma(0.8, 0.05, 32)
    brute = [float(ideal_speedup(0.8, k, 0.05)) for k in range(33)]
    assert int(g) == int(np.argmax(brute)) and float(s) == pytest.approx(max(brute))
    # ties go to the smaller gamma: with alpha = 0 every gamma >= 0 with c = 0 gives 1
    assert int(optimal_gamma(0.0, 0.0)[0]) == 0
    a = float(break_even_alpha(4, 0.1))
    assert float(ideal_speedup(a, 4, 0.1)) == pytest.approx(1.0, abs=1e-9)
    assert np.isnan(break_even_alpha(4, 1.5))  # a draft step dearer than a target step never pays


def test_acceptance_from_distributions():
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.2, 0.7, 0.1])
    assert float(acceptance_rate(p, q)) == pytest.approx(0.2 + 0.3 + 0.1)
    assert float(acceptance_rate(p, q)) == pytest.approx(1 - 0.5 * np.abs(p - q).sum())
    np.testing.assert_allclose(acceptance_rate(np.stack([p, q, q]), np.stack([q, q, p])), [0.6, 1.0, 0.6])
    with pytest.raises(SpecroofError, match="p must sum to 1"):
        acceptance_rate([0.5, 0.6], [0.5, 0.5])


def test_metrics_per_position_and_errors():
    m = metrics_from_counts(10, 40, 24, 33, 4, accepted_per_position=[9, 7, 5, 3])
    assert m.acceptance_rate == 0.6 and m.mean_acceptance_length == pytest.approx(3.4)
    assert m.system_efficiency == pytest.approx(33 / 50)
    np.testing.assert_allclose(m.per_position, [0.9, 0.7, 0.5, 0.3])
    with pytest.raises(SpecroofError, match="gamma = 4 entries"):
        metrics_from_counts(10, 40, 24, 33, 4, accepted_per_position=[9, 7, 5, 3, 1])
    with pytest.raises(SpecroofError, match="accepted .* cannot exceed drafted"):
        metrics_from_counts(1, 2, 3, 3, 2)


# -- properties ---------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(a=st.floats(0, 1), da=st.floats(0, 1), g=st.integers(0, 64), dg=st.integers(0, 8))
def test_expected_tokens_monotone_and_bounded(a, da, g, dg):
    a2 = min(1.0, a + da * (1 - a))
    e = float(expected_tokens(a, g))
    assert 1.0 <= e <= g + 1 + 1e-12
    assert float(expected_tokens(a2, g)) >= e - 1e-12
    assert float(expected_tokens(a, g + dg)) >= e - 1e-12


@settings(max_examples=100, deadline=None)
@given(c=st.floats(0.0, 1.0), a=st.floats(0, 0.99), da=st.floats(0, 0.99))
def test_optimal_gamma_non_decreasing_in_alpha(c, a, da):
    a2 = a + da * (0.99 - a)
    assert int(optimal_gamma(a2, c)[0]) >= int(optimal_gamma(a, c)[0])


@settings(max_examples=100, deadline=None)
@given(a=st.floats(0, 1), g=st.integers(1, 16), c=st.floats(0, 2))
def test_speedup_below_one_when_draft_costs_more_than_it_saves(a, g, c):
    saved = float(expected_tokens(a, g)) - 1.0  # tokens gained over one step
    s = float(ideal_speedup(a, g, c))
    if g * c > saved + 1e-12:
        assert s < 1.0
    else:
        assert s >= 1.0 - 1e-12


# -- the roofline speedup -------------------------------------------------------------

T8, D1 = "llama-3.1-8b", "llama-3.2-1b"


def test_roofline_speedup_terms_and_memory_bound_limit():
    r = speedup("h100-sxm-80gb", T8, D1, 0.8, np.arange(0, 9), batch=1, context=1024)
    assert float(r.speedup[0]) == 1.0  # gamma 0 is plain decoding
    np.testing.assert_allclose(r.t_round_s, r.t_draft_s + r.t_verify_s + r.t_overhead_s)
    np.testing.assert_allclose(r.speedup, r.expected_tokens * r.t_target_step_s / r.t_round_s)
    # batch 1 is memory bound: verifying 9 tokens costs hardly more than one step
    assert float(r.t_verify_s[8]) < 1.01 * float(r.t_target_step_s)
    # the verify pass is priced as a real gamma+1 pass, so it grows with gamma
    assert np.all(np.diff(r.t_verify_s[1:]) > 0)
    # c for a 1B draft of an 8B target in the memory-bound regime ~ weight ratio
    assert draft_cost_ratio(T8, D1, "h100-sxm-80gb") == pytest.approx(
        get_model(D1).total_params / get_model(T8).total_params, rel=0.15
    )


def test_compute_bound_batch_makes_speculation_a_net_loss():
    # short context, huge batch: a plain decode step is already compute bound on the H100
    from roofline import pass_time

    assert not bool(pass_time(T8, "h100-sxm-80gb", 2048, 1, 16, "bf16").memory_bound)
    r = speedup("h100-sxm-80gb", T8, D1, 0.95, np.arange(1, 9), batch=2048, context=16)
    assert np.all(r.speedup < 1.0)
    # even a perfect free drafter gains only what the few still memory-bound operators
    # (norms, the KV read, embedding rows) amortise: a few percent, not the 9x of gamma + 1
    r = speedup("h100-sxm-80gb", T8, PromptLookup(), 1.0, np.arange(1, 9), batch=2048, context=16)
    assert np.all(r.speedup < 1.05)


def test_speculation_stops_paying_where_batch_crosses_the_ridge():
    b = speculation_stops_paying("h100-sxm-80gb", T8, D1, 0.8, context=128)
    assert b is not None and 64 < b <= 1024
    # the stop batch times (gamma + 1) sits near the ridge (295 FLOP/byte for bf16 on H100)
    assert speculation_stops_paying("h100-sxm-80gb", T8, D1, 0.8, context=4096) is None  # KV keeps it memory bound


def test_long_context_keeps_large_batches_memory_bound_and_window_draft_helps():
    from roofline import pass_time

    assert bool(pass_time(T8, "h100-sxm-80gb", 64, 1, 32768, "bf16").memory_bound)
    full = speedup("h100-sxm-80gb", T8, D1, 0.8, 4, batch=64, context=32768)
    win = speedup("h100-sxm-80gb", T8, SlidingWindowSelfDraft(512), 0.8, 4, batch=64, context=32768)
    assert float(win.speedup) > 1.3
    assert float(win.t_draft_s) < 0.2 * 4 * float(full.t_target_step_s)


def test_moe_verify_touches_more_experts():
    from roofline import pass_time

    one = float(pass_time("mixtral-8x7b", "h100-sxm-80gb", 1, 1, 1024, "bf16").t_step_s)
    five = float(pass_time("mixtral-8x7b", "h100-sxm-80gb", 1, 5, 1024, "bf16").t_step_s)
    assert five > 1.5 * one  # a dense model's 5-token verify costs ~ one step
    dense1 = float(pass_time(T8, "h100-sxm-80gb", 1, 1, 1024, "bf16").t_step_s)
    dense5 = float(pass_time(T8, "h100-sxm-80gb", 1, 5, 1024, "bf16").t_step_s)
    assert dense5 < 1.01 * dense1


def test_tensor_parallel_splits_and_adds_allreduce():
    from roofline import pass_time

    t1 = float(pass_time("llama-3.1-70b", "h100-sxm-80gb", 1, 1, 1024, "bf16").t_step_s)
    t4 = float(pass_time("llama-3.1-70b", "h100-sxm-80gb", 1, 1, 1024, "bf16", tp=4).t_step_s)
    assert t1 / 4 < t4 < t1 / 3
    with pytest.raises(SpecroofError, match="interconnect"):
        pass_time(T8, "h100-nvl-94gb", tp=2)


def test_every_drafter_kind_prices_and_reports_memory():
    for d, extra in (
        (DraftModel(get_model(D1)), True),
        (EarlyExit(8), False),
        (Heads(5), True),  # five heads draft five tokens (gamma 0..5 below)
        (ParallelBlock(get_model(D1)), True),
        (PromptLookup(), False),
        (SlidingWindowSelfDraft(256), True),  # its StreamingLLM cache of 256 tokens, beside the target's (section 31)
    ):
        r = speedup("h100-sxm-80gb", T8, d, 0.7, np.arange(0, 6), batch=1, context=2048)
        assert np.all(np.isfinite(r.speedup)) and float(r.speedup[0]) == 1.0
        assert (float(np.max(r.extra_memory_bytes)) > 0) == extra
    ee = speedup("h100-sxm-80gb", T8, EarlyExit(8), 0.7, 3, batch=1, context=2048)
    full = speedup("h100-sxm-80gb", T8, PromptLookup(), 0.7, 3, batch=1, context=2048)
    assert float(ee.t_verify_s) < float(full.t_verify_s)  # verify reuses the first 8 layers
    blk = speedup("h100-sxm-80gb", T8, ParallelBlock(get_model(D1)), 0.7, np.array([2, 8]), batch=1, context=2048)
    assert float(blk.t_draft_s[1]) < 1.1 * float(blk.t_draft_s[0])  # one pass for the whole block


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: expected_tokens(1.2, 3), "alpha must lie in \\[0, 1\\]"),
        (lambda: expected_tokens(0.5, -1), "gamma must be >= 0"),
        (lambda: ideal_speedup(0.5, 3, -0.1), "c must be >= 0"),
        (lambda: expected_tokens_curve([0.9, 0.8], 3), "gamma \\(3\\) exceeds the acceptance curve's 2 positions"),
        (lambda: speedup("h100-sxm-80gb", T8, "llama-3.1-70b", 0.8, 4), "not smaller than the target"),
        (lambda: speedup("h100-sxm-80gb", T8, EarlyExit(40), 0.8, 4), "early-exit layers must lie in"),
        (lambda: speedup("h100-sxm-80gb", T8, D1, [0.9, 0.8], 4), "exceeds the acceptance curve"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(SpecroofError, match=message):
        call()


# -- Monte-Carlo agrees with the closed forms ----------------------------------------------


@pytest.mark.parametrize(("acc", "g"), [(0.6, 4), (0.9, 8), ([0.95, 0.8, 0.7, 0.5], 4)])
def test_simulated_rounds_match_expected_tokens(acc, g):
    sim = simulate_chain(acc, g, 200_000, np.random.default_rng(7))
    want = float(expected_tokens_curve(acc, g)) if isinstance(acc, list) else float(expected_tokens(acc, g))
    assert abs(sim.mean_tokens - want) < 4 * sim.stderr


def test_simulation_from_distributions_matches_alpha():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(6))
    q = rng.dirichlet(np.ones(6))
    alpha = float(acceptance_rate(p, q))
    sim = simulate_from_distributions(p, q, 5, 200_000, rng)
    assert abs(sim.mean_tokens - float(expected_tokens(alpha, 5))) < 4 * sim.stderr
    per = sim.accepted_per_position / 200_000
    np.testing.assert_allclose(per, alpha ** np.arange(1, 6), atol=0.01)


# -- planner ----------------------------------------------------------------------------------


def test_plan_is_ranked_and_complete():
    t = plan(
        ["h100-sxm-80gb", "a100-sxm-80gb"],
        T8,
        [D1, EarlyExit(8)],
        {"draft llama-3.2-1b": 0.8, "early exit @8": 0.6},
        batch=[1, 8],
        context=[1024],
        gammas=range(0, 9),
    )
    assert list(t.columns)[:3] == ["hardware", "strategy", "gamma"]
    # one baseline row per (hardware, batch) plus 8 gammas x 2 drafters
    assert len(t) == 2 * 2 * (1 + 2 * 8)
    assert t["speedup"].iloc[0] == t["speedup"].max()
    assert set(t.loc[t["gamma"] == 0, "strategy"]) == {"none"}
    rec = recommend("h100-sxm-80gb", T8, [D1, EarlyExit(8)], {"draft llama-3.2-1b": 0.8, "early exit @8": 0.6})
    assert rec.row["strategy"] == "draft llama-3.2-1b" and "x (" in rec.reason
    with pytest.raises(SpecroofError, match="no entry for drafter"):
        plan("h100-sxm-80gb", T8, [D1, EarlyExit(8)], {"draft llama-3.2-1b": 0.8})


def test_recommend_says_do_not_speculate_when_compute_bound():
    rec = recommend("h100-sxm-80gb", T8, D1, 0.7, batch=2048, context=16)
    assert rec.row["gamma"] == 0 and rec.reason.startswith("do not speculate")


def test_planner_with_a_measured_curve_skips_gammas_beyond_it():
    t = plan("h100-sxm-80gb", T8, D1, [0.9, 0.8, 0.7], gammas=range(0, 9))
    assert t["gamma"].max() == 3


def test_recommend_reads_the_plan_table_it_is_given_and_agrees_with_planning_afresh():
    from roofline.deploy.planner import plan, recommend

    kw = dict(gammas=range(0, 9), dtype="bf16")
    table = plan(["h100-sxm-80gb", "a100-sxm-80gb"], T8, D1, 0.75, batch=[1, 64], context=[512, 4096], **kw)
    for hw in ("h100-sxm-80gb", "a100-sxm-80gb"):
        for b in (1, 64):
            for c in (512, 4096):
                fresh = recommend(hw, T8, D1, 0.75, batch=b, context=c, **kw)
                read = recommend(hw, T8, D1, 0.75, batch=b, context=c, table=table, **kw)
                assert read.row == fresh.row and read.reason == fresh.reason
    with pytest.raises(SpecroofError, match="no row for"):
        recommend("h100-sxm-80gb", T8, D1, 0.75, batch=2, context=512, table=table, **kw)


def test_a_draft_that_re_feeds_tokens_pays_for_them_in_its_first_pass():
    """DraftModel(first_pass_tokens=k): gamma one-token steps with the first one a k-token pass, nothing at gamma 0;
    the harness's draft model (which re-feeds two committed tokens a round) is priced so."""
    from roofline.costing.passtime import pass_time
    from roofline.speculation.drafters import DraftModel

    target, draft = get_model("llama-2-7b"), get_model("llama-68m")
    plain, refed = DraftModel(draft), DraftModel(draft, first_pass_tokens=2)
    from roofline.costing.pricing import pricing_of

    hw = pricing_of("a100-sxm-80gb")  # one pricing for the speedups and the passes they are made of
    for g in (1, 4):
        a = speedup(hw, target, plain, 0.7, g, batch=4, context=512)
        b = speedup(hw, target, refed, 0.7, g, batch=4, context=512)
        extra = float(pass_time(draft, hw, 4, 2, 512).t_step_s) - float(pass_time(draft, hw, 4, 1, 512).t_step_s)
        assert extra > 0
        assert float(b.t_draft_s) == pytest.approx(float(a.t_draft_s) + extra, rel=1e-12)
        assert float(b.t_verify_s) == float(a.t_verify_s) and float(b.speedup) < float(a.speedup)
    gs = np.array([0, 1, 3])
    a, b = speedup(hw, target, plain, 0.7, gs), speedup(hw, target, refed, 0.7, gs)
    assert float(b.t_draft_s[0]) == float(a.t_draft_s[0]) == 0.0 and np.all(b.t_draft_s[1:] > a.t_draft_s[1:])
    for bad in (0, 1.5, True):
        with pytest.raises(SpecroofError, match="first_pass_tokens"):
            DraftModel(draft, first_pass_tokens=bad)
