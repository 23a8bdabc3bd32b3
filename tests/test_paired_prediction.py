"""The paired prediction of ``measure spec`` on a noisy machine: pass ratios timed in pairs, priced from ratios only.

Fake timings throughout (a virtual clock): nothing here reads the wall clock.
"""

import numpy as np
import pandas as pd
import pytest

from measure.spec_check import mark_unexplained_noise, verdict
from measure.specval import mark_noise, paired_prediction, pass_pair_ratios


class DriftingMachine:
    """A virtual clock whose speed drifts linearly: a pass of ``work`` seconds at time t takes work * (1 + slope t)."""

    def __init__(self, slope: float, burst: dict[int, float] | None = None) -> None:
        self.t, self.slope, self.calls, self.burst = 0.0, slope, 0, burst or {}

    def run(self, work: float) -> float:
        took = work * (1 + self.slope * self.t) * self.burst.get(self.calls, 1.0)
        self.calls += 1
        self.t += took
        return took


def test_the_paired_ratio_cancels_linear_drift():
    step_s, round_s = 0.010, 0.025  # a round's passes cost 2.5 plain steps on a steady machine
    m = DriftingMachine(slope=0.5)  # the machine slows by half its speed per second
    ratios = pass_pair_ratios(lambda: m.run(step_s), lambda: m.run(round_s), 12, 9, 3)
    assert m.slope * m.t > 0.9  # it ran twice as slow at the end as at the start...
    # ...and in each pair's ratio the drift cancels to first order (what is left: the sides' medians sit a sample
    # off their midpoints)
    assert np.median(ratios) == pytest.approx(2.5, rel=1e-2)
    # the same passes timed apart (all the rounds after all the steps, as a fit to a sweep visited before the runs)
    # carry the drift between them
    m2 = DriftingMachine(slope=0.5)
    steps = [m2.run(step_s) for _ in range(12 * 9)]
    rounds = [m2.run(round_s) for _ in range(12 * 3)]
    assert np.median(rounds) / np.median(steps) > 2.5 * 1.1


def test_a_burst_moves_one_pair_and_the_median_outvotes_it():
    step_s, round_s = 0.010, 0.030
    # a burst of another process's work: three passes in a row of one pair's round side run 3x slower
    m = DriftingMachine(slope=0.0, burst={9 + 12 + 0: 3.0, 9 + 12 + 1: 3.0, 9 + 12 + 2: 3.0})
    ratios = pass_pair_ratios(lambda: m.run(step_s), lambda: m.run(round_s), 12, 9, 3)
    assert max(ratios) == pytest.approx(9.0)
    assert np.median(ratios) == pytest.approx(3.0)


def _row(**kw):
    row = {
        "drafter": "early exit @1",
        "gamma": 1,
        "batch": 1,
        "tokens_per_round": 1.8,
        "round_ratio": 1.8 / 1.35,
        "host_round_ratio": 0.05,
        "step_device_ratio": 0.95,
        "speedup_measured": 1.35,
    }
    return row | kw


def test_the_paired_prediction_prices_ratios_with_the_measured_tokens_per_round():
    row = _row()
    out = paired_prediction(row, [1.30, 1.32, 1.31, 1.29, 1.33])
    # t_round / t_step = passes x the step's device share + the round's host time, in baseline steps
    assert out["speedup_predicted"] == pytest.approx(1.8 / (1.31 * 0.95 + 0.05))
    assert out["pass_ratio_predicted"] == pytest.approx(1.31)
    assert out["pred_pairs"] == 5
    assert 0 < out["pred_spread"] < 0.05
    # the acceptance is the measured half's: twice the tokens per round, twice the speedup, the same error sign
    assert paired_prediction(_row(tokens_per_round=3.6), [1.31])["speedup_predicted"] == pytest.approx(
        2 * out["speedup_predicted"]
    )


def _table(pred_spread: float, error: float) -> pd.DataFrame:
    return pd.DataFrame(
        [
            _row(
                probe_spread=0.02,
                rep_spread=0.02,
                pred_spread=pred_spread,
                rel_error=error,
                speedup_predicted=1.35 * (1 + error),
                pairs=12,
                pred_pairs=12,
                prediction="paired passes",
                flag="",
                context=96,
            )
        ]
    )


def test_a_prediction_whose_pairs_disagree_more_than_the_error_is_noisy_with_its_spread():
    df = mark_unexplained_noise(mark_noise(_table(pred_spread=0.20, error=0.08)), {"cpus": 2})
    assert bool(df["noisy"].iloc[0])
    assert "prediction's pass pairs disagreed by 20%" in df["noise"].iloc[0]
    line = verdict(df, {"requested": "early exit @1", "load": {"cpus": 2}})
    assert line.startswith("no speedup of early exit @1")
    assert "20%" in line


def test_a_prediction_whose_pairs_agree_leaves_the_row_standing_and_says_so():
    df = mark_unexplained_noise(mark_noise(_table(pred_spread=0.03, error=0.08)), {"cpus": 2, "load_avg_1m": 3.5})
    assert not bool(df["noisy"].iloc[0])
    line = verdict(df, {"requested": "early exit @1"})
    assert line.startswith("early exit @1 at gamma 1, batch 1: 1.35x measured")
    assert "from 12 pairs of its passes and plain steps, disagreeing by 3%" in line


def test_a_busy_machines_large_error_stays_noisy_with_a_paired_prediction():
    # the flagging rule keeps its meaning: above 25% on a busy machine is not the model's to answer for
    df = mark_unexplained_noise(mark_noise(_table(pred_spread=0.02, error=0.30)), {"cpus": 2, "load_avg_1m": 3.5})
    assert bool(df["noisy"].iloc[0])
    line = verdict(df, {"requested": "early exit @1", "load": {"cpus": 2, "load_avg_1m": 3.5}})
    assert "more than the 25% a prediction on a busy machine is held to" in line


def test_threads_follow_the_typical_try_not_the_one_pause_of_a_busy_core(monkeypatch):
    import torch

    import measure.choose as ch

    monkeypatch.setattr(ch.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    calls = {"n": 0}

    def fake(dtype, device):
        calls["n"] += 1
        two = torch.get_num_threads() == 2
        # the busy process leaves its core once (the first all-cores try); otherwise both threads wait for it
        return (25e9 if calls["n"] == 1 else 4e9) if two else 10e9

    monkeypatch.setattr(ch, "matmul_rate", fake)
    n, why = ch.choose_threads(torch.device("cpu"))
    assert n == 1 and "Threads: 1, not 2" in why
