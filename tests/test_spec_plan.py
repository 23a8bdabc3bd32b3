"""`measure spec` on the machine at hand (issue 56): look first, plan pairs for a noisy machine, the drafter asked
for first, and a first line that says what was measured or why not. Fake timings throughout: no wall clock."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from measure.spec_check import (  # noqa: E402
    MAX_PAIRS,
    MAX_PLAN_TOKENS,
    MIN_PAIRS,
    QUIET_TOKENS,
    MachineLook,
    PairPlan,
    plan_pairs,
    verdict,
)
from measure.specval import PLAN_MARGIN, priority_order  # noqa: E402

QUIET = MachineLook(load_avg_1m=0.3, cpus=2, others_cores=0.1, step_s=0.03, spread=0.01)
BUSY = MachineLook(load_avg_1m=3.1, cpus=2, others_cores=1.0, step_s=0.03, spread=0.10)


def test_the_look_tells_a_quiet_machine_from_a_noisy_one():
    assert not QUIET.noisy and QUIET.tokens_needed() == QUIET_TOKENS
    assert BUSY.noisy and "load average 3.1 on 2 cores" in BUSY.describe()
    # short runs that disagree by 10% at 8 tokens need 8 x (10% / 2.5%)^2 = 128 tokens a side
    assert BUSY.tokens_needed() == 128
    # a busy machine whose short runs happened to agree still gets longer runs than a quiet one
    calm_but_busy = MachineLook(3.1, 2, 1.0, 0.03, 0.0)
    assert calm_but_busy.noisy and calm_but_busy.tokens_needed() == 2 * QUIET_TOKENS
    # and a spread alone, on an idle machine, makes it noisy too
    assert MachineLook(0.1, 2, 0.0, 0.03, 0.2).noisy
    assert MachineLook(0.1, 2, 0.0, 0.03, 1.0).tokens_needed() == MAX_PLAN_TOKENS


def _plan(look=BUSY, seconds=120.0, **kw) -> PairPlan:
    labels = kw.pop("labels", ["early exit @1", "draft pair-draft"])
    return plan_pairs(
        look,
        labels,
        {"early exit @1": 2, "draft pair-draft": 4},
        {"early exit @1": 1.5, "draft pair-draft": 2.0},
        {"early exit @1": 10.0, "draft pair-draft": 5.0},
        seconds,
        kw.pop("tokens", None),
        "--budget 180",
        kw.pop("max_run", 64),
    )


def _seconds(plan: PairPlan, sweeps: float, guesses: list[float], step: float = 0.03) -> float:
    """What the plan should cost, recomputed from its own terms (one more baseline side, a warm-up per drafter)."""
    side = plan.tokens * plan.runs_per_side * step
    runs = side + sum(8 * step + plan.pairs * side * (1 + 1 / s) for s in guesses)
    return sweeps + PLAN_MARGIN * runs


def test_a_noisy_plan_measures_the_drafter_asked_for_first_in_long_pairs_within_the_budget():
    plan = _plan(seconds=60.0)
    assert plan.configs[0] == ("early exit @1", 2)  # the drafter asked for, at its gamma
    # 128 tokens a side, made of runs the pair decodes well (64 tokens) rather than one run past them
    assert (plan.tokens, plan.runs_per_side) == (64, 2)
    assert MIN_PAIRS <= plan.pairs <= MAX_PAIRS
    assert plan.predicted_s <= 60.0 and not plan.why_not
    assert plan.predicted_s == pytest.approx(_seconds(plan, 10.0 + (5.0 if len(plan.configs) > 1 else 0.0),
                                                     [1.5, 2.0][: len(plan.configs)]))  # fmt: skip
    # the other drafter is left out, and named, where its pairs would not fit after the first's
    assert len(plan.configs) == 1 and "draft pair-draft" in plan.left_out
    assert plan.line().startswith(f"planned: 1 drafter x {plan.pairs} pairs of 2 runs x 64 tokens a side")


def test_a_long_budget_adds_the_other_drafter_once_the_first_has_its_pairs():
    plan = _plan(seconds=600.0)
    assert plan.pairs == MAX_PAIRS and [c[0] for c in plan.configs] == ["early exit @1", "draft pair-draft"]
    assert plan.predicted_s <= 600.0 and not plan.left_out


def test_a_quiet_machine_plans_short_runs():
    plan = _plan(QUIET, seconds=600.0)
    assert (plan.tokens, plan.runs_per_side) == (QUIET_TOKENS, 1)


def test_a_budget_too_short_for_the_noise_shortens_the_sides_and_says_so():
    plan = _plan(seconds=25.0)
    assert plan.tokens * plan.runs_per_side < 128 and plan.pairs == MIN_PAIRS
    assert "not the 128 this machine's noise needs" in plan.why_not


def test_a_budget_too_short_for_any_pairs_says_what_they_need():
    plan = _plan(seconds=5.0)
    assert plan.pairs == MIN_PAIRS  # the first block runs all the same
    assert plan.why_not.startswith("--budget 180 leaves ~5 s for the runs") and "need ~" in plan.why_not
    assert plan.needed_s > 5.0


def test_given_tokens_set_the_run_length():
    plan = _plan(seconds=600.0, tokens=16)
    assert plan.tokens == 16 and plan.runs_per_side == 4  # 128 tokens a side wanted, in at most 4 runs of 16


def test_a_resume_measures_the_plan_it_recorded(tmp_path):
    import dataclasses

    from measure.spec_check import _recorded_pair_plan
    from roofline.core.jsonio import dumps

    plan = _plan(seconds=60.0)
    (tmp_path / "plan.json").write_text(dumps({"batches": [1], "pair_plan": dataclasses.asdict(plan)}))
    assert _recorded_pair_plan(tmp_path) == plan
    (tmp_path / "plan.json").write_text(dumps({"batches": [1, 4]}))  # a quiet machine's plan: none to reuse
    assert _recorded_pair_plan(tmp_path) is None


def test_blocks_run_the_drafter_asked_for_first():
    configs = [("ee", 1), ("ee", 2), ("draft", 1), ("draft", 2), ("ee", 4)]
    for seed in range(5):
        order = priority_order(configs, np.random.default_rng(seed))
        assert sorted(order) == list(range(len(configs)))
        assert [configs[i][0] for i in order] == ["ee"] * 3 + ["draft"] * 2


def _rows(**cols) -> pd.DataFrame:
    base = {"drafter": ["early exit @1"], "batch": [1], "gamma": [2], "speedup_measured": [1.5],
            "speedup_predicted": [1.6], "rel_error": [0.0667], "noisy": [False], "noise": [""], "pairs": [9],
            "probe_spread": [0.03], "rep_spread": [0.02]}  # fmt: skip
    return pd.DataFrame(base | cols)


PAYLOAD = {
    "requested": "early exit @1",
    "budget_s": 180.0,
    "steps_s": {"before_check": 10.0, "setup": 20.0, "microbenchmarks": 10.0, "decoding_runs": 100.0},
    "load": {"load_avg_1m": 3.2, "cpus": 2, "others_cores": 1.0},
    "plan": {"tokens": 64, "pair_plan": {"tokens": 64, "runs_per_side": 1, "why_not": ""}},
}


def test_the_first_line_is_the_requested_drafters_row_it_stands_behind():
    line = verdict(_rows(), PAYLOAD)
    assert line.startswith("early exit @1 at gamma 2, batch 1: 1.50x measured (the median of 9 pairs")
    assert "1.60x predicted" in line and "+7%" in line


def test_the_first_line_says_why_not_and_what_would_work():
    # pairs 10% apart, an error of 7%: sides (10/7)^2 = 2.04 times as long would do, within what a plan makes
    rows = _rows(noisy=[True], rep_spread=[0.10], noise=["repetitions disagreed by 10%, more than the error"])
    line = verdict(rows, PAYLOAD)
    assert line.startswith("no speedup of early exit @1 that this machine let the check stand behind")
    assert "repetitions disagreed by 10%" in line and "load average 3.2 on 2 cores" in line
    factor = (0.10 / 0.0667) ** 2
    assert f"--budget {int(np.ceil(40.0 + 100.0 * factor))}" in line and "GPU" in line


def test_the_budget_offered_covers_the_sides_the_plan_could_not_afford():
    rows = _rows(noisy=[True], rep_spread=[0.10], noise=["repetitions disagreed by 10%"])
    dear = PAYLOAD | {"plan": {"pair_plan": {"tokens": 64, "runs_per_side": 1, "needed_s": 500.0}}}
    assert "--budget 540 (longer pairs)" in verdict(rows, dear)  # the fixed 40 s and the 500 s the plan needed


def test_no_budget_is_offered_where_no_plan_could_make_the_pairs_agree():
    rows = _rows(noisy=[True], rep_spread=[0.30], rel_error=[0.05], noise=["repetitions disagreed by 30%"])
    line = verdict(rows, PAYLOAD)
    assert "no --budget would do here" in line and "a quieter machine" in line and "--device cuda" in line


def test_pairs_that_agree_keep_their_measurement_when_only_the_prediction_missed():
    rows = _rows(noisy=[True], rel_error=[0.292], speedup_measured=[1.347], speedup_predicted=[1.741],
                 rep_spread=[0.038], probe_spread=[0.039], flag=[""],
                 noise=["error 29% above 25% while the machine was noisy (load average 3.4 on 2 cores)"])  # fmt: skip
    line = verdict(rows, PAYLOAD)
    assert line.startswith("no speedup of early exit @1 that this machine let the check stand behind: 1.35x was")
    assert "12 pairs" not in line and "9 pairs agreeing within 4%" in line and "1.74x predicted is off by +29%" in line
    assert "--budget 240 (a further repetition" in line  # the fixed 40 s and twice the decoding's 100 s


def test_another_drafters_good_row_does_not_stand_in_for_the_one_asked_for():
    rows = pd.concat([_rows(noisy=[True], noise=["baselines disagreed by 20%"]), _rows(drafter=["draft d"])])
    assert verdict(rows.reset_index(drop=True), PAYLOAD).startswith("no speedup of early exit @1")


def test_a_drafter_never_measured_names_why():
    payload = PAYLOAD | {"dropped": {"early exit @1 gamma 2 at batch 1": "not measured in repetition 1: out of time"}}
    line = verdict(_rows(drafter=["draft d"]), payload)
    assert "it was not measured (early exit @1 gamma 2 at batch 1: not measured in repetition 1" in line


def test_the_summary_reads_as_sentences():
    from specroof.measure_cli import summary_sentences

    noise = {"rep_spread_median": 0.04, "rep_spread_max": 0.3, "probe_spread_median": 0.02, "probe_spread_max": 0.9}
    pay = {"fit_mape": 0.086, "apriori_mape": 0.383, "speedup_error_max": 0.27,
           "speedup_errors_quiet": {"error_max": 0.22, "rows": 3, "noisy_rows": 5}}  # fmt: skip
    text = summary_sentences(pay, noise)
    assert text.startswith("The fitted roofline times the verify passes within 8.6% (a priori 38.3%).")
    assert "3 of 8 speedup rows stand above the machine's noise, the largest error among them 22%; 5 noisy rows" in text
    none = summary_sentences(pay | {"speedup_errors_quiet": {"error_max": None, "rows": 0, "noisy_rows": 2}}, {})
    assert "None of the 2 speedup rows stands above the machine's noise (their largest error 27%)" in none


@pytest.mark.slow
def test_measure_spec_end_to_end_answers_for_the_drafter_asked_for_in_its_first_line(tmp_path, capsys):
    """The real command on the offline pair with a small budget: whatever the machine, its first line is the
    requested drafter's row or why there is none, and the plan it made is printed."""
    from specroof.cli import main

    out = tmp_path / "spec"
    assert main(["measure", "spec", "--pair", "offline", "--early-exit", "1", "--budget", "40", "--out", str(out)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith(("early exit @1 at gamma", "no speedup of early exit @1 that"))
    assert any(line.startswith("planned: ") for line in text[:4])
    assert (out / "plan.json").is_file() and (out / "speedup.csv").is_file()
