"""The serving engines' costs at batch (issue 47): per-step host time once per round, the step a round cannot hide,
per-sequence round host time, SGLang's cap on running requests while it speculates, the versioned profiles, and the
batch-trend and per-bucket tables of ``specroof validate published``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine, engine_data, engine_from_dict, load_engine
from roofline.costing.passtime import pass_time
from roofline.costing.pricing import Pricing
from roofline.evidence.published import (
    BUCKET_BOUNDS,
    TREND_TOLERANCE,
    UNFITTED,
    batch_trends,
    bucket_summary,
    load_published,
    predict_row,
    validation_table,
)
from roofline.speculation.predict import predict_speedup

HW, TARGET = "h100-sxm-80gb", "llama-3.1-8b"


def _round(engine: Engine, batch: int, gamma: int = 3, drafter: str = "eagle") -> object:
    return predict_speedup(hardware=HW, target=TARGET, drafter=drafter, mean_accepted=2.5, gamma=gamma, engine=engine,
                           batch=batch, context=512)  # fmt: skip


def _base(**host: float | bool) -> Engine:
    """A CUDA-graph engine (the compiled profile's device terms) with only the host terms under test."""
    compiled = load_engine("compiled")
    assert compiled is not None
    return dataclasses.replace(compiled, name="t", **host)  # type: ignore[arg-type]


# -- the per-step host time: once per round, not once per draft pass ---------------------------------------------


def test_drafts_inside_the_step_do_not_pay_the_steps_host_time():
    step = 2e-3
    per_pass = _base(host_step_s=step, draft_in_step=False)
    in_step = dataclasses.replace(per_pass, draft_in_step=True)
    a, b = _round(per_pass, 1), _round(in_step, 1)
    # the verify pass pays the step in both; only the three draft passes differ, by one step each
    assert a.t_verify_s == pytest.approx(b.t_verify_s)  # type: ignore[attr-defined]
    assert a.t_draft_s - b.t_draft_s == pytest.approx(3 * step, rel=1e-9)  # type: ignore[attr-defined]
    # and the plain decode pass it is compared with pays the step too (a synchronous scheduler)
    assert b.t_base_s == pytest.approx(_round(_base(), 1).t_base_s + step, rel=1e-9)  # type: ignore[attr-defined]


def test_a_step_hidden_in_plain_decoding_shows_in_a_round_that_cannot_hide_it():
    step, per_seq = 1e-3, 20e-6
    hidden = _base(host_step_s=step, host_step_per_seq_s=per_seq, step_overlap=True, draft_in_step=True)
    shown = dataclasses.replace(hidden, spec_step_overlap=False)
    for batch in (1, 32):
        h, s = _round(hidden, batch), _round(shown, batch)
        assert h.t_base_s == pytest.approx(s.t_base_s)  # type: ignore[attr-defined]
        assert s.t_round_host_s - h.t_round_host_s == pytest.approx(step + per_seq * batch)  # type: ignore[attr-defined]
        assert s.speedup < h.speedup  # type: ignore[attr-defined]


def test_round_host_time_per_sequence_grows_with_the_batch():
    e = _base(round_s=1e-4, round_per_seq_s=5e-6)
    assert _round(e, 64).t_round_host_s == pytest.approx(1e-4 + 64 * 5e-6)  # type: ignore[attr-defined]
    pr = Pricing.of(HW, engine=e)
    np.testing.assert_allclose(pr.round_host_at(np.array([1, 8])), [1e-4 + 5e-6, 1e-4 + 40e-6])
    assert Pricing.of(HW).round_host_at(64) == 0.0  # the pure roofline has no host time


def test_the_serving_simulator_prices_rounds_with_the_same_terms():
    from roofline.serving.prices import pricing_context, step_prices

    e = _base(host_step_s=1e-3, step_overlap=True, spec_step_overlap=False, round_per_seq_s=1e-5, draft_in_step=True)
    ctx = pricing_context(TARGET, HW, engine=e)
    p = step_prices(ctx, load_drafter("eagle"), max_gamma=3, max_batch=32, max_tokens=64, max_context=1024)
    j = int(np.searchsorted(p.b_grid, 8))
    alone = predict_speedup(hardware=HW, target=TARGET, drafter="eagle", mean_accepted=2.0, gamma=3, engine=e,
                            batch=8, context=0)  # fmt: skip
    # a chain of 3 at batch 8, context 0: the simulator's draft + verify + round is the predictor's round
    got = p.draft[3, j, 0] + p.verify[3, j, 0] + p.round_s
    assert got == pytest.approx(alone.t_round_s, rel=1e-6)


def load_drafter(name: str) -> object:
    from roofline.speculation.drafters import as_drafter

    return as_drafter(name)


# -- SGLang's cap on running requests while it speculates -------------------------------------------------------


def test_sglang_runs_at_most_48_requests_while_it_speculates():
    sglang = load_engine("sglang")
    assert sglang is not None and sglang.spec_max_running == 48 and sglang.spec_batch(64) == 48
    row = {"kind": "speculative", "model": TARGET, "hardware": HW, "weight_dtype": "bf16", "tp": 1, "context": 512,
           "drafter": "eagle3", "gamma": 3, "tree": None, "mean_accepted": 3.0, "published_speedup": 1.0,
           "published_tokens_per_s": None, "published_ttft_s": None, "prompt_tokens": 0}  # fmt: skip
    at48 = predict_row({**row, "batch": 48}, "sglang")["predicted"]
    at64 = predict_row({**row, "batch": 64}, "sglang")["predicted"]
    uncapped = predict_row({**row, "batch": 64}, dataclasses.replace(sglang, spec_max_running=0))["predicted"]
    # 48 sequences speculate where the plain engine runs 64: the speedup falls by about 48 / 64
    assert at64 < uncapped
    base48 = pass_time(TARGET, HW, 48, 1, 512, "bf16", engine=sglang).t_step_s[()]
    base64 = pass_time(TARGET, HW, 64, 1, 512, "bf16", engine=sglang).t_step_s[()]
    assert at64 == pytest.approx(at48 * (48 / base48) / (64 / base64), rel=1e-9)


# -- the profiles, read from their files ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, plain, rounds",
    [
        ("vllm", False, False),
        ("vllm-0.12", True, False),
        ("vllm-0.14", True, True),
        ("sglang", True, False),
        ("sglang-spec-v2", True, True),
    ],  # fmt: skip
)
def test_each_version_hides_the_step_where_its_scheduler_does(name, plain, rounds):
    e = load_engine(name)
    assert e is not None and e.draft_in_step
    assert e.step_overlap is plain
    assert (e.step_overlap if e.spec_step_overlap is None else e.spec_step_overlap) is rounds
    assert e.host_step_s > 0  # a step of host time, measured or fitted (docs/cost-model.md, section 32)


def test_the_versions_of_vllm_share_its_fitted_host_terms():
    v, v12, v14 = (load_engine(n) for n in ("vllm", "vllm-0.12", "vllm-0.14"))
    assert v and v12 and v14
    assert v.host_step_s == v12.host_step_s == v14.host_step_s and v.round_s == v12.round_s == v14.round_s
    sglang = load_engine("sglang")
    assert sglang is not None and sglang.host_step_s != v.host_step_s  # its own, measured (PR #11398)


@pytest.mark.parametrize(
    "speculative, message",
    [
        ({"max_running_requests": -1}, "max_running_requests must be a whole number >= 0"),
        ({"max_running_requests": 4.5}, "max_running_requests must be a whole number"),
        ({"step_overlap": "no"}, "step_overlap must be true or false"),
        ({"draft_in_step": 1}, "draft_in_step must be true or false"),
        ({"round_per_seq_us": "x"}, "round_per_seq_us must be a number"),
        ({"round_per_seq_us": -1.0}, "round_per_seq_s must be >= 0"),
        ({"steps": 3}, "unknown key 'steps' in [speculative]"),
    ],
)
def test_bad_speculative_terms_are_one_line_each(speculative, message):
    with pytest.raises(SpecroofError, match=message.replace("[", r"\[").replace("]", r"\]")):
        engine_from_dict({"name": "x", "speculative": speculative})


@pytest.mark.parametrize("value", [[36.0, 19.0], [19.0], "19-36", [0.0, 5.0]])
def test_a_launch_range_is_two_costs_lowest_first(value):
    with pytest.raises(SpecroofError, match="launch_us_range"):
        engine_from_dict({"name": "x", "host": {"launch_us_range": value}})


def test_new_terms_round_trip_through_the_toml_layout():
    e = Engine("x", spec_step_overlap=False, round_per_seq_s=3e-6, draft_in_step=True, spec_max_running=48,
               host_launch_range_s=(19.11e-6, 36e-6))  # fmt: skip
    assert engine_from_dict(engine_data(e)) == e


# -- the tables validate published prints ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return validation_table()


def test_the_bucket_table_keeps_the_roofline_column_and_issue_47s_bounds(table):
    s = bucket_summary(table)
    assert {"median_abs_error_roofline", "median_abs_error_engine", "within_bound"} <= set(s.columns)
    assert set(s["bucket"]) <= {"1", "2-16", "17-64", ">64"}
    assert set(s["engine"]) >= {"vllm", "sglang", "hf", "compiled"}  # versions count as their engine
    # calibration: median <= 10% per engine and batch bucket for decode, batched and speculative rows of the sources
    # a fit reads; a calibration source no fit reads (fit = false: the vLLM DSpark post's DeepSeek-V4-Pro on eight
    # B300s, priced since section 58: its decode at batch 256 and its DSpark row at concurrency 1; the fixed arms at
    # 256 ran outside the CUDA graphs and are not priced, section 62) is its own use, shown, not bounded
    cal = s[s["use"] == "calibration"]
    assert (cal["median_abs_error_engine"] <= BUCKET_BOUNDS["calibration"]).all(), cal.to_string()
    unfitted = s[s["use"] == UNFITTED]
    assert set(unfitted["engine"]) == {"vllm"} and unfitted["rows"].sum() == 2, unfitted.to_string()
    # the engine-aware model beats the bare roofline in every group but two held-out groups, named here so that a new
    # loss fails: SGLang at batch 17-64, AngelSlim issue #163's Qwen3-30B-A3B EAGLE-3 tree at batch 32 (+88%; its
    # plain run's throughput, 1128 tok/s, is what the harness's whole run gave, prompts included) and 64 (+16%); and
    # compiled above batch 64, one row: MagicDec's Llama-3.1-8B self-speculation at batch 128 and 32k tokens on eight
    # A100s (both predictions far above its 1.47x: +81% engine-aware, +72% roofline)
    lost = s[s["median_abs_error_engine"] >= s["median_abs_error_roofline"]]
    # ... and, since section 58, vLLM above batch 64 among the calibration rows no fit reads: DeepSeek-V4-Pro on eight
    # B300s (the vLLM DSpark post, fit = false), which the bare roofline misses by less (its decode at batch 256 is 174%
    # optimistic, the engine-aware one 44%, but its fixed DSpark arms 99% to 193% against 154% to 275%)
    assert {(u, e, b) for u, e, b in zip(lost["use"], lost["engine"], lost["bucket"], strict=True)} <= {
        ("validation", "sglang", "17-64"),
        ("validation", "compiled", ">64"),
        (UNFITTED, "vllm", ">64"),
    }


def _series(factor_at_4: float) -> pd.DataFrame:
    """One speculative series at batch 1 and 4 whose published speedups are the model's own, the batch-4 one times
    ``factor_at_4`` (a published trend the model misses by 1 / factor - 1)."""
    rows = load_published()
    one = rows[rows["file"] == "vllm_pr16035_eagle_h100.toml"].iloc[[0]].copy()
    four = one.copy()
    four["batch"] = 4
    s = pd.concat([one, four], ignore_index=True)
    s["use"] = "calibration"
    for i in range(len(s)):
        pred = predict_row({**dict(s.iloc[i]), "published_speedup": 1.0}, "vllm")["predicted"]
        s.loc[i, "published_speedup"] = pred * (factor_at_4 if s.loc[i, "batch"] == 4 else 1.0)
    return s


@pytest.mark.parametrize("factor, holds", [(1.05, True), (0.95, True), (1.15, False), (0.85, False)])
def test_a_batch_trend_is_checked_against_the_published_one(factor, holds):
    t = batch_trends(_series(factor))
    at4 = t[t["batch"] == 4].iloc[0]
    assert at4["published_trend"] == pytest.approx(factor * at4["predicted_trend"], rel=1e-9)
    assert bool(abs(at4["trend_error"]) <= TREND_TOLERANCE) == holds
    assert t[t["batch"] == 1]["trend_error"].abs().max() < 1e-12  # the batch-1 row is the trend's own anchor


def test_a_series_without_acceptance_is_anchored_at_batch_1_and_its_drift_reported():
    s = _series(0.8)
    s["mean_accepted"] = np.nan  # no acceptance published: the batch-1 row's implied one prices the series
    t = batch_trends(s)
    at4 = t[t["batch"] == 4].iloc[0]
    # the published batch-4 speedup is 20% below the model's at the batch-1 acceptance: it implies 20% less
    assert at4["implied_acceptance_drift"] == pytest.approx(-0.2, rel=1e-6)
    assert at4["trend_error"] == pytest.approx(1 / 0.8 - 1, rel=1e-6)


def test_a_round_that_overlaps_its_host_work_hides_its_round_terms():
    v14, v = load_engine("vllm-0.14"), load_engine("vllm")
    assert v14 is not None and v is not None and v14.round_s == v.round_s > 0
    assert _round(v14, 8).t_round_host_s == 0.0  # type: ignore[attr-defined]
    assert _round(v, 8).t_round_host_s == pytest.approx(v.round_s)  # type: ignore[attr-defined]
