"""A sweep on a machine whose speed drifts: the reference point reopens converged points when the machine speeds up,
so every minimum comes from the fastest period (the miss of a measure spec run whose one-token points stopped being
revisited before the machine got faster)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import measure.sweep as sweeps  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402

TINY = ModelSpec("tiny", 2, 64, 4, 2, 16, 128, 100, max_context=512)
GRID = dict(batch=[1], new_tokens=[1, 2, 4], context=[0], dtype=["fp32"], repeats=1, progress=False)


def test_reference_is_the_cheapest_point():
    rows = [
        {"batch": 2, "new_tokens": 1, "context": 0},
        {"batch": 1, "new_tokens": 1, "context": 64},
        {"batch": 1, "new_tokens": 1, "context": 0},
        {"batch": 1, "new_tokens": 4, "context": 0},
    ]
    assert sweeps.reference_point(rows) == 2


def _sped_up(log, point, ref):
    w = sweeps.ReferenceWatch(ref)
    for p, t in log:
        w.record(p, t)
    return w.sped_up_since(point)


def test_sped_up_since_compares_the_reference_then_and_now():
    # point 1 last visited at position 3, when the reference's best was 10.0
    log = [(0, 10.0), (1, 20.0), (0, 10.1), (1, 20.1)]
    assert not _sped_up(log, 1, 0)
    assert not _sped_up([*log, (0, 9.9)], 1, 0)  # 1% faster: within the tolerance
    assert _sped_up([*log, (0, 9.0)], 1, 0)  # 10% faster: reopen
    assert not _sped_up([*log, (0, 12.0)], 1, 0)  # slower: the old minimum stands
    # a visit after the speed-up is judged against the reference as it was then
    assert not _sped_up([*log, (0, 9.0), (1, 18.0)], 1, 0)
    # a point never visited, or no reference measured: nothing to say
    assert not _sped_up(log, 2, 0)
    assert not _sped_up([(1, 20.0), (0, float("nan"))], 1, 0)
    # the reference's first visit stands for "then" when the point came before it
    assert _sped_up([(1, 20.0), (0, 10.0), (0, 8.0)], 1, 0)
    assert not _sped_up([(1, 20.0), (0, 10.0), (0, 9.9)], 1, 0)


def _scripted(monkeypatch, speed):
    """Replace the timing of a visit by a scripted machine: every point's time is its token count x speed(visit no.)."""
    calls = {"n": 0}

    def fake_visit(runner, row, tokens, tree, dev, warmup, repeats, threads, allows=None, unchecked=0):
        calls["n"] += 1
        t = 1e-3 * row["new_tokens"] * speed(calls["n"])
        return {"status": "ok", "t_median_s": t, "t_min_s": t, "t_iqr_s": 0.0, "repeats": repeats}

    monkeypatch.setattr(sweeps, "_measure_visit", fake_visit)
    return calls


def test_points_converged_on_a_slow_machine_are_reopened_when_it_speeds_up(monkeypatch):
    # three points; the machine runs at 1.0 for the first 6 visits (two rounds), then 20% faster
    _scripted(monkeypatch, lambda n: 1.0 if n <= 6 else 0.8)
    df = sweeps.sweep(TINY, rounds=6, **GRID)
    t = df.set_index("new_tokens")["t_min_s"]
    # every point's minimum comes from the fast period, so their ratios are the machine's, not the drift's
    np.testing.assert_allclose(t.to_numpy(), 0.8e-3 * t.index.to_numpy(), rtol=1e-12)


def test_a_steady_machine_still_converges(monkeypatch):
    calls = _scripted(monkeypatch, lambda n: 1.0)
    df = sweeps.sweep(TINY, rounds=6, **GRID)
    # the two non-reference points stop after two visits; the reference is revisited every round
    assert df.set_index("new_tokens")["visits"].to_dict() == {1: 6, 2: 2, 4: 2}
    assert calls["n"] == 10


def test_without_the_reference_rule_the_slow_minima_would_stay(monkeypatch):
    # the counterfactual the rule exists for: a machine that slows, then speeds up past its first state
    _scripted(monkeypatch, lambda n: 1.0 if n <= 6 else 0.7)
    monkeypatch.setattr(sweeps.ReferenceWatch, "sped_up_since", lambda self, point: False)
    df = sweeps.sweep(TINY, rounds=6, **GRID)
    t = df.set_index("new_tokens")["t_min_s"]
    assert t.loc[1] == pytest.approx(0.7e-3) and t.loc[4] == pytest.approx(4e-3)  # the ratio is off by the drift


def test_sweep_drift_reads_the_reference_visits(tmp_path, monkeypatch):
    _scripted(monkeypatch, lambda n: 1.0 if n <= 3 else 0.9)
    out = tmp_path / "sw"
    sweeps.sweep(TINY, rounds=3, out=out, **GRID)
    visits = pd.read_csv(out / "results.csv")
    d = sweeps.sweep_drift(visits)
    assert d["drift"] == pytest.approx(1.0 / 0.9 - 1) and d["visits"] == 3
    assert sweeps.sweep_drift(visits[visits["visit"] == 0]) == {}
