"""The engine terms `measure serve` gives the simulator: host time per prefill step, and the spread of acceptance
between requests read back from a run's per-request round counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from measure.serve_check import acceptance_concentration  # noqa: E402
from roofline.core.errors import SpecroofError  # noqa: E402


def _rounds(alphas: np.ndarray, gamma: int, rounds: int, rng: np.random.Generator) -> pd.DataFrame:
    """Per request: ``rounds`` chain rounds at its own alpha (accepted run geometric, capped at gamma)."""
    runs = np.minimum(rng.geometric(1.0 - alphas[:, None], size=(alphas.size, rounds)) - 1, gamma)
    return pd.DataFrame(
        {
            "spec_rounds": np.full(alphas.size, rounds),
            "accepted_drafts": runs.sum(axis=1),
            "rejected_rounds": (runs < gamma).sum(axis=1),
        }
    )


@pytest.mark.parametrize("k", [3.0, 12.0])
def test_a_beta_spread_of_alpha_is_recovered(k):
    rng = np.random.default_rng(1)
    mu = 0.7
    alphas = rng.beta(mu * k, (1 - mu) * k, 600)
    got = acceptance_concentration(_rounds(alphas, 3, 12, rng))
    assert got is not None
    assert k / 2 < got < 2 * k


def test_one_alpha_for_every_request_reads_as_no_spread():
    rng = np.random.default_rng(2)
    got = acceptance_concentration(_rounds(np.full(600, 0.7), 3, 12, rng))
    # one alpha: either the likelihood still rises at the grid's top, or the fit finds a concentration so high that
    # the Beta's spread is far below the geometric draws' own
    assert got is None or got > 200


def test_too_few_requests_or_no_rejection_tell_nothing():
    rng = np.random.default_rng(3)
    assert acceptance_concentration(_rounds(np.full(3, 0.7), 3, 12, rng)) is None
    every_draft_kept = pd.DataFrame({"spec_rounds": [5] * 8, "accepted_drafts": [15] * 8, "rejected_rounds": [0] * 8})
    assert acceptance_concentration(every_draft_kept) is None
    plain = pd.DataFrame({"spec_rounds": [0] * 8, "accepted_drafts": [0] * 8, "rejected_rounds": [0] * 8})
    assert acceptance_concentration(plain) is None


def test_the_prefill_host_term_adds_to_every_separate_prefill_step_and_nothing_else():
    from roofline.passes.model import get_model
    from roofline.serving import pricing_context, step_prices
    from roofline.speculation.drafters import DraftModel

    ctx = pricing_context("llama-3.1-8b", "h100-sxm-80gb")
    kw = dict(max_gamma=3, max_batch=8, max_tokens=2048, max_context=2048, prefill="separate")
    d = DraftModel(get_model("llama-3.2-1b"))
    p0 = step_prices(ctx, d, **kw)
    p1 = step_prices(ctx, d, prefill_host_s=2.5e-3, **kw)
    for m, n, draft in ((1, 300, True), (3, 900, False), (2, 64, True)):
        assert p1.prefill_time(m, n, 0.0, draft=draft) == pytest.approx(
            p0.prefill_time(m, n, 0.0, draft=draft) + 2.5e-3
        )
    assert p1.decode_seconds(3, 4, 500.0) == p0.decode_seconds(3, 4, 500.0)
    with pytest.raises(SpecroofError, match="prefill_host_s"):
        step_prices(ctx, d, prefill_host_s=-1.0, **kw)


def test_the_simulator_takes_the_prefill_host_term_into_time_to_first_token():
    from roofline.serving import simulate

    kw = dict(hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter=None, policy=["off"], rates=[0.01],
              requests=20, input_len=256, output_len=8, prefill="separate", seed=3)  # fmt: skip
    a = simulate(**kw).requests["ttft_s"].to_numpy()
    b = simulate(prefill_host_s=4e-3, **kw).requests["ttft_s"].to_numpy()
    # 0.01 req/s: every request finds the server idle, so its first token waits for its own prefill step alone
    assert np.allclose(b - a, 4e-3, rtol=1e-9, atol=1e-12)


def test_the_host_line_is_the_weighted_line_through_the_residuals_whatever_its_sign():
    """Falling residuals (+851 us at one sequence, -266 us per sequence more) are what the simulator takes: a
    non-negative line would have had to price every batch wrong (the best constant: +374 us at one, +374 at four,
    where the engine measured +851 and -47)."""
    from measure.serve_check import HostResiduals, host_terms

    b = np.array([1.0, 2.0, 3.0, 4.0])
    y = 851e-6 - 266e-6 * (b - 1)
    a, s, p = host_terms(HostResiduals(b, y, np.array([5.0, 5.0, 5.0, 20.0]), -3e-4))
    assert a == pytest.approx(851e-6 + 266e-6) and s == pytest.approx(-266e-6) and p == -3e-4
    # one batch size: its median
    assert host_terms(HostResiduals(np.array([4.0]), np.array([3e-4]), np.array([7.0]), 1e-4))[:2] == (3e-4, 0.0)


def test_a_negative_host_line_takes_its_time_off_each_round_and_one_that_leaves_a_round_no_time_is_refused():
    """One request at a time (0.01 req/s), plain rounds of one sequence: a line of -300 us + 50 us/seq takes exactly
    250 us off every round, so off the request's time per output token; a line that would take off more than a
    round's passes cost is refused with the batch it fails at, and so is a prefill term larger than a pass."""
    from roofline.serving import simulate

    kw = dict(hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter=None, policy=["off"], rates=[0.01],
              requests=6, input_len=256, output_len=40, prefill="separate", seed=3)  # fmt: skip
    a = simulate(**kw).requests
    b = simulate(round_host_s=-3e-4, round_host_per_seq_s=5e-5, **kw).requests
    assert np.allclose(a["tpot_s"] - b["tpot_s"], 2.5e-4, rtol=1e-9, atol=1e-12)
    assert np.allclose(a["ttft_s"], b["ttft_s"], rtol=1e-12)  # a prefill step is not a decode round
    with pytest.raises(SpecroofError, match=r"at b = 1\).* plain decode round of 1 sequences no time"):
        simulate(round_host_s=-1.0, **kw)
    with pytest.raises(SpecroofError, match=r"at b = \d+\).*no time"):
        simulate(round_host_per_seq_s=-1.0, **kw)  # (fine at one sequence, not at many)
    with pytest.raises(SpecroofError, match="prefill_host_s"):
        simulate(prefill_host_s=-1.0, **kw)
    with pytest.raises(SpecroofError, match="idle_start_s"):
        simulate(idle_start_s=-1e-3, **kw)


def test_a_staircase_gives_every_batch_size_its_own_stair():
    from measure.serve_check import staircase_arrivals

    t = staircase_arrivals([0.1, 0.2, 0.3], 0.02)
    # stair b is b requests arriving together, the gap after the stair before is expected to end
    assert t.tolist() == pytest.approx([0.02, 0.14, 0.14, 0.36, 0.36, 0.36])
    assert np.all(np.diff(t) >= 0)
    with pytest.raises(SpecroofError, match="stair 2"):
        staircase_arrivals([0.1, float("nan")], 0.02)


def test_a_figure_is_noisy_where_the_replays_the_calibrations_or_the_replays_speed_disagree_by_more_than_its_error():
    """Replays 10.0 and 10.4 ms, simulated 11.0: error +7.8%, spread 3.9%. Calibrations before and after the replays
    putting the simulator at 10.9 and 11.1 (drift 2%): a result. At 10.2 and 12.0 (drift 17.6%, more than the
    error): noisy. Without a bracket (one calibration) only the spread counts. The simulator at the replays' own speed
    far from it at the calibrations' (a speed gap beyond the error): noisy."""
    from measure.serve_check import METRICS, compare_figures

    def fig(v):
        return dict.fromkeys(METRICS, v)

    reps = [fig(10.0), fig(10.4)]
    quiet = compare_figures(reps, fig(11.0), [fig(10.9), fig(11.1)])
    assert quiet["tpot_p50_rel_error"] == pytest.approx(0.8 / 10.2)
    assert quiet["tpot_p50_replay_spread"] == pytest.approx(0.4 / 10.2)
    assert quiet["tpot_p50_calibration_drift"] == pytest.approx(0.2 / 10.2)
    assert not quiet["tpot_p50_noisy"]
    moved = compare_figures(reps, fig(11.0), [fig(10.2), fig(12.0)])
    assert moved["ttft_p90_calibration_drift"] == pytest.approx(1.8 / 10.2) and moved["ttft_p90_noisy"]
    alone = compare_figures(reps, fig(11.0))
    assert alone["tpot_p90_calibration_drift"] == 0.0 and not alone["tpot_p90_noisy"]
    assert compare_figures(reps, fig(10.3))["tpot_p50_noisy"]  # an error of 1% under a 3.9% spread
    # the replays ran at a speed no calibration saw: the simulator at their own speed says 10.1, a gap of 8.8%, more
    # than the error: noisy; at 10.95 (0.5%) the error stands
    gapped = compare_figures(reps, fig(11.0), [fig(10.9), fig(11.1)], fig(10.1))
    assert gapped["ttft_p50_speed_gap"] == pytest.approx(0.9 / 10.2) and gapped["ttft_p50_noisy"]
    same = compare_figures(reps, fig(11.0), [fig(10.9), fig(11.1)], fig(10.95))
    assert same["ttft_p50_speed_gap"] == pytest.approx(0.05 / 10.2) and not same["ttft_p50_noisy"]


def test_a_staircase_may_open_with_single_requests():
    from measure.serve_check import staircase_arrivals

    t = staircase_arrivals([0.1, 0.1, 0.2], 0.02, sizes=[1, 1, 2])
    assert t.tolist() == pytest.approx([0.02, 0.14, 0.26, 0.26])
    for bad in ([1, 2], [1, 0, 2], [1, 1.5, 2]):
        with pytest.raises(SpecroofError, match="sizes"):
            staircase_arrivals([0.1, 0.1, 0.2], 0.02, sizes=bad)
