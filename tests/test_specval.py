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
