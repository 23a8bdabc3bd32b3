"""The speculative validation measures and predicts over the same rounds: while the whole batch runs."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("torch")

from measure.decode import GenerationResult  # noqa: E402
from measure.specval import _full_rounds, _steady  # noqa: E402


def _run() -> GenerationResult:
    rows = []
    # rounds 0-1: both sequences run and accept a lot; rounds 2-3: sequence 0 is done, 1 struggles
    for rnd, seqs, acc in ((0, (0, 1), 3), (1, (0, 1), 3), (2, (1,), 0), (3, (1,), 0)):
        for s in seqs:
            rows.append(
                {"round": rnd, "seq": s, "accepted": acc, "emitted": acc + 1, "t_draft_s": 0.1, "t_verify_s": 0.2}
                | {"t_accept_s": 0.0, "t_commit_s": 0.0}
            )
    return GenerationResult([[1] * 8, [1] * 10], 1.2, 0.0, pd.DataFrame(rows), gamma=3, drafted=3)


def test_steady_state_counts_only_rounds_with_the_whole_batch():
    run = _run()
    assert list(_full_rounds(run.rounds, 2)["round"].unique()) == [0, 1]
    tokens, seconds = _steady(run, 2)
    assert tokens == 16 and seconds == pytest.approx(0.6)  # 2 rounds x 2 sequences x 4 tokens in 2 x 0.3 s
    # the tail rounds (one sequence left) are what a batch of one would count
    assert list(_full_rounds(run.rounds, 1)["round"]) == [2, 3] and _steady(run, 1)[0] == 2


def test_bracketing_probes_cancel_a_drifting_machine(monkeypatch: pytest.MonkeyPatch):
    """A machine that slows down steadily: every ratio is taken against the probes around it, so it stays exact."""
    import measure.specval as sv

    calls = {"n": 0}
    base_step_s, true_speedup, tokens = 0.05, 2.0, 8

    def slowdown() -> float:
        calls["n"] += 1
        return 1.0 + 0.25 * calls["n"]  # 25% slower at every call, far beyond any real drift

    def fake_base(model, prompts, max_new_tokens, *a, **k):
        return GenerationResult([[1] * max_new_tokens for _ in prompts], base_step_s * max_new_tokens * slowdown(), 0)

    def fake_spec(target, drafter, prompts, gamma, max_new_tokens, *a, **k):
        # one round per (gamma + 1) tokens, every sequence running, each round 2x the baseline's tokens/s
        s, n_rounds = slowdown(), max_new_tokens // (gamma + 1)
        t_round = (gamma + 1) * base_step_s * s / true_speedup
        rows = [
            {"round": r, "seq": q, "accepted": gamma, "emitted": gamma + 1, "t_draft_s": 0.0, "t_verify_s": t_round}
            | {"t_accept_s": 0.0, "t_commit_s": 0.0}
            for r in range(n_rounds)
            for q in range(len(prompts))
        ]
        emitted = [[1] * (n_rounds * (gamma + 1)) for _ in prompts]
        return GenerationResult(emitted, n_rounds * t_round, 0.0, pd.DataFrame(rows), gamma=gamma, drafted=gamma)

    monkeypatch.setattr(sv, "autoregressive_generate", fake_base)
    monkeypatch.setattr(sv, "speculative_generate", fake_spec)
    df = sv.measure_speedups(
        None, {"a": 1, "b": 2}, {1: [[0], [0]], 2: [[0], [0]]}, [1, 3], max_new_tokens=tokens, repeats=2
    )
    assert len(df) == 2 * 2 * 2 and set(df["batch"]) == {1, 2}
    # linear drift: the mean of the two probes is the machine's speed during the run between them
    assert df["speedup_measured"].to_numpy() == pytest.approx(true_speedup, rel=1e-9)
    assert df["speedup_end_to_end"].to_numpy() == pytest.approx(true_speedup, rel=1e-9)
    assert (df["acceptance_rate"] == 1.0).all()
    # the baseline's step time is the probes' median: each probe decodes one group at the batch size
    assert (df["base_ms_measured"] > 1e3 * base_step_s).all()
    assert df.groupby("batch")["base_ms_measured"].nunique().eq(1).all()
