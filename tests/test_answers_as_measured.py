"""Acceptance read as measured, defaults from matched pairs, the cheaper setting within the resolution, and memory as
engines reserve it (docs/cost-model.md, section 50)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.deploy.memory import SGLANG_MEM_FRACTION_STATIC, largest_fit, per_device_bytes, reserved_share
from roofline.speculation.acceptance_defaults import matched_default
from roofline.speculation.acceptance_positions import MeasuredCurve, decay_factors, extrapolation_note, runs
from specroof.cli import main

HW = "h100-sxm-80gb"
TARGET = "llama-3.1-8b"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- 50.1: a measured mean, exact where measured, decaying past it --------------------------------


def test_every_published_run_reproduces_its_own_mean_and_never_rises():
    for r in runs():
        u = np.asarray(r.unconditional)
        assert np.all(np.diff(u) <= 0) and np.allclose(np.cumprod(r.conditional), u)


@pytest.mark.parametrize("kind", ["eagle3", "mtp", "block", "model", "early-exit"])
@pytest.mark.parametrize(("mean", "g"), [(1.5, 1), (3.0, 3), (3.53, 7), (2.2, 5)])
def test_a_measured_curve_is_exact_at_its_length_and_decays_past_it(kind, mean, g):
    mc = MeasuredCurve(mean, g, kind, 16)
    c = mc.curve()
    assert 1 + np.sum(np.cumprod(c[:g])) == pytest.approx(mean, abs=1e-9)
    f = decay_factors(kind, 16)
    assert np.all(f <= 1.0) and np.all(f > 0)
    assert np.all(np.diff(c) <= 1e-12)  # the conditional rate never rises along the chain
    # past the measured length the decay gives at most what one i.i.d. rate with the same mean would
    from roofline.speculation.acceptance_kinds import alpha_for_tokens
    from roofline.speculation.closed_forms import expected_tokens

    a = float(alpha_for_tokens(mean, g)) if mean < g + 1 else 1.0
    assert 1 + np.sum(np.cumprod(c)) <= float(expected_tokens(a, 16)) + 1e-9


def test_a_mean_outside_its_length_is_one_line():
    with pytest.raises(SpecroofError, match=r"outside \[1, 4\] for 3 drafts"):
        MeasuredCurve(4.5, 3, "eagle3", 8)


def test_more_than_one_position_past_the_measured_length_says_so_with_the_engine_flag():
    assert extrapolation_note(4, 3, "vllm") is None  # one position past: marked, not a warning
    note = extrapolation_note(7, 3, "vllm")
    assert note.startswith("extrapolated: gamma 7 is 4 positions past the 3 measured")
    assert '"num_speculative_tokens": 7' in note
    assert "--speculative-num-steps 6" in extrapolation_note(6, 3, "sglang")


PLAN = ["plan", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--engine", "vllm", "--batch", "1,16,64"]


def test_the_issue_case_marks_every_gamma_past_four_and_says_why_batch_16_is_faster(capsys):
    code, out, err = run(capsys, *PLAN, "--acceptance", "eagle3=mean:3@3", "--json")
    assert code == 0, err
    d = json.loads(out)
    by_batch = {r["batch"]: r for r in d["recommendations"]}
    for r in d["recommendations"]:
        if r["gamma"] > 4:
            assert r["extrapolated"] and r["reason"].startswith("extrapolated: gamma")
        assert r["measured_at"] == 3
    if by_batch[16]["speedup"] > by_batch[1]["speedup"]:
        assert any(n.startswith("at batch 16 the speedup") for n in d["batch_notes"])
    assert all(row["extrapolated"] == (row["gamma"] > 3) for row in d["table"] if row["strategy"] == "eagle3")
    # the text's first line says what the mean was read as
    code, out, _ = run(capsys, *PLAN, "--acceptance", "eagle3=mean:3@3")
    assert "read as measured on vLLM's chain of num_speculative_tokens=3" in out.splitlines()[1]


def test_a_suffix_that_restates_vllms_reading_changes_nothing(capsys):
    answers = []
    for value in ("eagle3=mean:3", "eagle3=mean:3@3"):
        code, out, err = run(capsys, *PLAN, "--acceptance", value, "--json")
        assert code == 0, err
        answers.append([(r["gamma"], r["speedup"]) for r in json.loads(out)["recommendations"]])
    assert answers[0] == answers[1]


def test_speedup_at_another_gamma_takes_the_decay_and_says_extrapolated(capsys):
    argv = ["speedup", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--acceptance", "mean:3@3"]
    code, out, err = run(capsys, *argv, "--gamma", "6")
    assert code == 0, err
    assert "extrapolated 3 positions past the 3 measured" in out
    e6 = 1 + np.sum(np.cumprod(MeasuredCurve(3.0, 3, "eagle3", 6).curve()))
    assert f"{e6:.2f} tokens per round" in out


# -- 50.2: defaults from matched pairs only -------------------------------------------------------


def test_defaults_match_family_and_size_class_only():
    assert matched_default("eagle3", "llama-3.1-8b").url.endswith("issues/26191")
    assert matched_default("eagle3", "llama-3.1-70b") is None  # another size class: no borrowed figure
    assert matched_default("model", "llama-3.1-8b") is None
    assert matched_default("eagle", "vicuna-7b") is not None and matched_default("eagle", "llama-3.1-8b") is None
    assert matched_default("mtp", "deepseek-v3") is not None


# -- 50.3: within the resolution, the cheaper setting -------------------------------------------


def test_the_recommendation_is_the_cheapest_within_two_percent(capsys):
    code, out, err = run(capsys, *PLAN, "--acceptance", "eagle3=0.8", "--top", "1000", "--json")
    assert code == 0, err
    d = json.loads(out)
    for r in d["recommendations"]:
        rows = [t for t in d["table"] if t["batch"] == r["batch"] and t["fits_in_memory"]]
        best = max(t["speedup"] for t in rows)
        cheaper = [t for t in rows if t["gamma"] < r["gamma"] and t["speedup"] >= best * 0.98]
        assert r["speedup"] >= best * 0.98 and not cheaper


# -- 50.4: memory as engines reserve it ---------------------------------------------------------


def test_reserved_shares_are_the_engines_defaults_and_settable():
    assert reserved_share("vllm")[0] == 0.9
    assert [reserved_share("sglang", tp)[0] for tp in (1, 2, 4, 8, 16)] == [v for _, v in SGLANG_MEM_FRACTION_STATIC][
        ::-1
    ]
    assert reserved_share(None)[0] == 1.0 and reserved_share("vllm", 1, 0.8)[0] == 0.8
    with pytest.raises(SpecroofError, match="--memory-fraction must lie in"):
        reserved_share("vllm", 1, 1.5)


def test_largest_fit_is_the_edge_of_the_footprint():
    cap = 40e9
    got = largest_fit("llama-3.1-8b", cap, batch=8, context=4096)
    assert per_device_bytes("llama-3.1-8b", got.batch, 4096, 1, 1) <= cap
    assert per_device_bytes("llama-3.1-8b", got.batch + 1, 4096, 1, 1) > cap
    assert per_device_bytes("llama-3.1-8b", 8, got.context, 1, 1) <= cap
    assert per_device_bytes("llama-3.1-8b", 8, got.context + 1, 1, 1) > cap


def test_a_configuration_that_does_not_fit_carries_no_speedup(capsys):
    argv = ["plan", "--hardware", HW, "--target", "llama-3.1-70b", "--drafter", "eagle3", "--acceptance", "0.7",
            "--engine", "vllm", "--tp", "2", "--batch", "1", "--json"]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    d = json.loads(out)
    r = d["recommendations"][0]
    assert not r["fits_in_memory"] and r["speedup"] is None and r["gamma"] is None
    assert "per device (TP 2)" in r["reason"] and "gpu_memory_utilization default 0.9" in r["reason"]
    assert all(t["speedup"] is None for t in d["table"] if not t["fits_in_memory"])
    # the same configuration with the whole device allowed fits, and says whose share it took
    code, out, _ = run(capsys, *argv, "--memory-fraction", "1.0")
    d = json.loads(out)
    assert d["memory_share"]["source"] == "--memory-fraction 1" and d["recommendations"][0]["speedup"] is not None
    code, out, _ = run(capsys, *argv[:-1])
    assert "1.00x" not in out.split("does not fit")[1].splitlines()[0]


def test_speedup_gives_no_figure_for_what_the_engine_cannot_hold(capsys):
    argv = ["speedup", "--hardware", HW, "--target", "llama-3.1-70b", "--drafter", "eagle3", "--acceptance",
            "mean:3@3", "--engine", "vllm"]  # fmt: skip
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["speedup"] is None and not d["fits_in_memory"] and "tokens_per_s" not in d
    assert "gpu_memory_utilization default 0.9" in d["reason"] and d["largest_batch"] == 0
    code, out, _ = run(capsys, *argv)
    assert "does not fit in memory" in out and "x (" not in out


def test_speedup_under_vllm_prices_vllms_chain_at_the_measured_length(capsys):
    base = ["speedup", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--engine", "vllm", "--json"]
    got = {}
    for value in ("mean:3", "mean:3@3", "mean:3.53@7"):
        code, out, err = run(capsys, *base, "--acceptance", value)
        assert code == 0, err
        d = json.loads(out)
        assert d["tree_nodes"] is None  # a chain, as vLLM drafts it
        got[value] = (d["gamma"], d["speedup"])
    assert got["mean:3"] == got["mean:3@3"] and got["mean:3@3"][0] == 3 and got["mean:3.53@7"][0] == 7


def test_tree_ranks_the_searched_tree_and_the_engines_setting_in_one_labelled_table(capsys, tmp_path):
    vec = tmp_path / "vec.json"
    vec.write_text("[0.6, 0.2, 0.1]")
    argv = ["tree", "--acceptance-vector", str(vec), "--hardware", HW, "--target", TARGET, "--drafter", "eagle3",
            "--batch", "16", "--emit", "sglang", "--json"]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    rows = json.loads(out)["answers"]
    assert {r["answer"] for r in rows} == {"best tree searched", "SGLang's best setting"}
    searched = next(r for r in rows if r["answer"] == "best tree searched")
    assert searched["deployable"].startswith("not deployable in SGLang")
    top = max(r["speedup"] for r in rows)
    # a deployable setting within 2% of the fastest is ranked first; never the undeployable one over it
    if any(r["deployable"].startswith("deployable") and r["speedup"] >= top * 0.98 for r in rows):
        assert rows[0]["deployable"].startswith("deployable")


def test_plan_takes_one_drafters_bare_value_and_says_what_a_number_past_one_could_mean(capsys):
    base = ["plan", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--json"]
    code, out, err = run(capsys, *base, "--acceptance", "0.7")
    code2, out2, _ = run(capsys, *base, "--acceptance", "eagle3=0.7")
    assert code == 0 == code2, err
    assert json.loads(out)["recommendations"] == json.loads(out2)["recommendations"]
    code, out, err = run(capsys, *base, "--acceptance", "eagle3=1.3")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "a rate lies in [0, 1]" in err and "mean:1.3" in err
    code, out, err = run(capsys, *base[:-1], "--drafter", "model:llama-3.2-1b", "--acceptance", "0.7")
    assert code == 2 and "with 2 drafters write KEY=VALUE, KEY one of eagle3, model" in err
