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


def _fake_machine(monkeypatch: pytest.MonkeyPatch, step_s, round_factor) -> None:
    """Replace both decoders by a machine on which speculation is exactly 2x the baseline's tokens/s.

    ``step_s(call, step)`` is a baseline step's seconds; ``round_factor(call, round)`` multiplies a
    round's seconds (a slower machine at that moment).
    """
    import measure.specval as sv

    calls = {"n": 0}

    def fake_base(model, prompts, max_new_tokens, *a, step_times=False, **k):
        calls["n"] += 1
        steps = [step_s(calls["n"], i) for i in range(max_new_tokens)]
        return GenerationResult([[1] * max_new_tokens for _ in prompts], sum(steps), 0.0, step_s=steps)

    def fake_spec(target, drafter, prompts, gamma, max_new_tokens, *a, **k):
        calls["n"] += 1
        n_rounds = max_new_tokens // (gamma + 1)
        # a round emits gamma + 1 tokens per sequence in half the time the baseline takes for them
        t = [(gamma + 1) * step_s(calls["n"], 0) / 2.0 * round_factor(calls["n"], r) for r in range(n_rounds)]
        rows = [
            {"round": r, "seq": q, "accepted": gamma, "emitted": gamma + 1, "t_draft_s": 0.0, "t_verify_s": t[r]}
            | {"t_accept_s": 0.0, "t_commit_s": 0.0}
            for r in range(n_rounds)
            for q in range(len(prompts))
        ]
        emitted = [[1] * (n_rounds * (gamma + 1)) for _ in prompts]
        return GenerationResult(emitted, sum(t), 0.0, pd.DataFrame(rows), gamma=gamma, drafted=gamma)

    monkeypatch.setattr(sv, "autoregressive_generate", fake_base)
    monkeypatch.setattr(sv, "speculative_generate", fake_spec)
    monkeypatch.setattr(sv, "_warm_up", lambda *a, **k: None)  # the fake machine has no first-use cost


def test_each_configuration_is_warmed_once_before_its_first_timed_run(monkeypatch: pytest.MonkeyPatch):
    """A first use of a shape costs more than a run on a GPU: one untimed run per configuration, then none."""
    import measure.specval as sv

    seen: list[tuple] = []
    _fake_machine(monkeypatch, lambda call, i: 0.05, lambda call, r: 1.0)
    monkeypatch.setattr(sv, "_warm_up", lambda target, drafter, prompts, g: seen.append((drafter, len(prompts), g)))
    from measure.specval import measure_speedups

    measure_speedups(None, {"a": 1, "b": 2}, {1: [[0], [0]], 2: [[0], [0]]}, [1, 3], max_new_tokens=8, repeats=2)
    # per batch size: the baseline once, and each (drafter, gamma) once, over both repetitions
    assert sorted(seen, key=str) == sorted(
        [(None, b, 0) for b in (1, 2)] + [(d, b, g) for d in (1, 2) for b in (1, 2) for g in (1, 3)], key=str
    )


def _measure(tokens: int, statistic: str = "min") -> pd.DataFrame:
    from measure.specval import measure_speedups

    prompts = {1: [[0], [0]], 2: [[0], [0]]}
    return measure_speedups(None, {"a": 1, "b": 2}, prompts, [1, 3], max_new_tokens=tokens, statistic=statistic)


def test_bracketing_probes_cancel_a_drifting_machine(monkeypatch: pytest.MonkeyPatch):
    """A machine that slows down steadily: every wall-clock ratio is taken against the probes around it."""
    _fake_machine(monkeypatch, lambda call, i: 0.05 * (1.0 + 0.25 * call), lambda call, r: 1.0)
    df = _measure(8)
    assert len(df) == 2 * 2 * 2 and set(df["batch"]) == {1, 2}
    # linear drift: the mean of the two probes' times is the machine's speed during the run between them
    assert df["speedup_wall"].to_numpy() == pytest.approx(2.0, rel=1e-9)
    assert df["speedup_end_to_end"].to_numpy() == pytest.approx(2.0, rel=1e-9)
    assert (df["acceptance_rate"] == 1.0).all()


def test_round_statistic_sees_through_bursts(monkeypatch: pytest.MonkeyPatch):
    """Interference that hits a few rounds and steps: the 10th percentile is the quiet machine's."""
    _fake_machine(
        monkeypatch,
        lambda call, i: 0.05 * (3.0 if i % 20 == 7 else 1.0),
        lambda call, r: 3.0 if r % 20 == 7 else 1.0,
    )
    df = _measure(60)
    assert df["speedup_measured"].to_numpy() == pytest.approx(2.0, rel=1e-9)
    assert df["base_ms_measured"].to_numpy() == pytest.approx(50.0)
    # the wall-clock ratios carry the bursts
    assert (abs(df["speedup_wall"] - 2.0) > 0.05).any()


def _one_config(statistic: str = "min", groups: int = 3) -> pd.DataFrame:
    from measure.specval import measure_speedups

    return measure_speedups(None, {"a": 1}, {1: [[0]] * groups}, [3], max_new_tokens=16, statistic=statistic, repeats=1)


def test_each_speculative_run_is_paired_with_the_baseline_runs_around_it(monkeypatch: pytest.MonkeyPatch):
    """Plain and speculative runs alternate (one pair per prompt group), and each pair gives its own ratio."""
    import measure.specval as sv

    kinds: list[str] = []
    _fake_machine(monkeypatch, lambda call, i: 0.05, lambda call, r: 1.0)
    base, spec = sv.autoregressive_generate, sv.speculative_generate
    monkeypatch.setattr(sv, "autoregressive_generate", lambda *a, **k: kinds.append("P") or base(*a, **k))
    monkeypatch.setattr(sv, "speculative_generate", lambda *a, **k: kinds.append("S") or spec(*a, **k))
    df = _one_config()
    assert "".join(kinds) == "PSPSPSP"
    assert df["pairs"].tolist() == [3] and df["rep_spread"].iloc[0] == pytest.approx(0.0)


def test_a_drifting_machine_cancels_in_each_pair(monkeypatch: pytest.MonkeyPatch):
    """A machine slowing 25% per run: every ratio is taken against the baselines around its own run, so the
    drift cancels (exactly, at the median statistic: the mean of the two baselines is the machine during the run)
    and the pairs agree."""
    _fake_machine(monkeypatch, lambda call, i: 0.05 * (1.0 + 0.25 * call), lambda call, r: 1.0)
    df = _one_config("median")
    assert df["speedup_measured"].iloc[0] == pytest.approx(2.0, rel=1e-9)
    assert df["rep_spread"].iloc[0] == pytest.approx(0.0, abs=1e-9)


def test_a_run_slowed_throughout_is_outvoted_by_the_other_pairs(monkeypatch: pytest.MonkeyPatch):
    """The second speculative run (call 4: P1 S2 P3 S4 ...) ran on a machine 1.5x slower throughout: its pair's
    ratio is 1.33, the median of the three pairs' is still 2, and their spread says the pairs disagreed."""
    _fake_machine(monkeypatch, lambda call, i: 0.05, lambda call, r: 1.5 if call == 4 else 1.0)
    df = _one_config()
    assert df["speedup_measured"].iloc[0] == pytest.approx(2.0, rel=1e-9)
    assert df["rep_spread"].iloc[0] > 0.05
