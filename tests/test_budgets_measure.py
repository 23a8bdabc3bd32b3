"""Budgets are budgets in measure sweep, spec, serve and the TP sweep: first visits, blocks, configurations and rates
are the budget's too, what is dropped is named, and the bars' estimates stay within it; on a fake clock."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from measure.budget import Budget

torch = pytest.importorskip("torch")

import measure.specval as sv  # noqa: E402
import measure.sweep as sweeps  # noqa: E402
from measure.serve_check import plan_replays, rate_order  # noqa: E402
from measure.specval import UnitCosts, measure_speedups  # noqa: E402
from measure.sweep import VisitCosts, axis_levels, point_order  # noqa: E402
from measure.tp import rank_budget  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402

TINY = ModelSpec("tiny", 2, 64, 4, 2, 16, 128, 100, max_context=1024)


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += float(seconds)


# -- the order of need ---------------------------------------------------------------------------------------------


def test_axis_levels_go_coarse_to_fine():
    assert axis_levels([1, 2, 4, 8, 16, 32, 64]) == {1: 0, 64: 0, 8: 1, 2: 2, 16: 2, 4: 3, 32: 3}
    assert axis_levels([5]) == {5: 0}
    assert axis_levels([128, 512]) == {128: 0, 512: 0}


def test_point_order_opens_with_the_reference_then_the_ends_of_every_axis():
    rows = [{"batch": b, "new_tokens": n, "context": c} for b in (1, 4) for n in (1, 2, 4, 8, 16) for c in (128, 512)]
    order = point_order(rows)
    assert sorted(order) == list(range(len(rows)))
    assert rows[order[0]] == {"batch": 1, "new_tokens": 1, "context": 128}  # the reference: it calibrates
    corners = {(b, n, c) for b in (1, 4) for n in (1, 16) for c in (128, 512)}
    first = [(rows[i]["batch"], rows[i]["new_tokens"], rows[i]["context"]) for i in order[: len(corners)]]
    assert set(first) == corners  # every end of every axis before any middle
    assert (rows[order[len(corners)]]["new_tokens"]) == 4  # then the middle of the token axis


def test_rates_are_taken_lightest_and_heaviest_first():
    assert rate_order([3.0, 9.0, 15.0]) == [3.0, 15.0, 9.0]
    assert rate_order([1.0, 2.0, 3.0, 4.0, 5.0]) == [1.0, 5.0, 3.0, 2.0, 4.0]


# -- what a visit costs, learned -----------------------------------------------------------------------------------


def test_visit_costs_learn_the_host_time_and_the_scale():
    c = VisitCosts(warmup=2, repeats=3)
    assert c.visit_s(1.0, first=True) == pytest.approx(5.0)  # nothing learned: the price itself
    c.record(1.0, 2.0, 5, 11.0, first=True)  # one visit: the scale alone (2x), and 1 s beyond its passes
    assert c.pass_s(3.0) == pytest.approx(6.0) and c.visit_s(1.0, first=True) == pytest.approx(11.0)
    for price in (2.0, 4.0, 8.0):  # passes of 0.5 + 1.5 x price: the host's 0.5 s and the machine's 1.5 x
        c.record(price, 0.5 + 1.5 * price, 4, 4 * (0.5 + 1.5 * price) + 0.2, first=False)
    c.record(1.0, 2.0, 5, 11.0, first=True)
    assert c.a == pytest.approx(0.5, rel=1e-6) and c.s == pytest.approx(1.5, rel=1e-6)
    assert c.visit_s(10.0, first=False) == pytest.approx(4 * 15.5 + 0.2)  # a later visit: 1 + 3 passes


# -- measure sweep on a fake clock ---------------------------------------------------------------------------------


def _fake_visits(monkeypatch, clock, pass_s, calls=None, compile_s=0.0):
    """``sweep``'s visits on the fake clock: each pass of a point takes ``pass_s(row)`` fake seconds; a visit given
    ``allows`` first times one warm-up pass, as the real one does."""

    def visit(runner, row, tokens, tree, dev, warmup, repeats, threads, allows=None, unchecked=0):
        t = pass_s(row)
        if calls is not None:
            calls.append((row["batch"], row["new_tokens"], row["context"]))
        clock.advance(compile_s if unchecked else 0.0)  # a shape's first pass compiles it
        if allows is not None:
            for k in range(warmup):
                clock.advance(t)
                if k >= unchecked and not allows((warmup - k - 1 + repeats) * t):
                    return {"status": sweeps.ABANDONED, "t_probe_s": t, "passes": k + 1}
            warmup = 0
        clock.advance((warmup + repeats) * t)
        return {"status": "ok", "t_median_s": t, "t_min_s": t, "t_iqr_s": 0.0, "repeats": repeats}

    monkeypatch.setattr(sweeps, "_measure_visit", visit)


GRID = dict(batch=[1, 4], new_tokens=[1, 2, 4, 8, 16, 32, 64], context=[128, 512], dtype=["fp32"], progress=False)


def _pass_s(row):  # a CPU-like pass: a floor, then the tokens' compute
    return 0.05 + 0.004 * row["batch"] * row["new_tokens"] * (1 + row["context"] / 1024)


def test_a_short_budget_visits_what_fits_in_the_order_of_need_and_names_the_rest(monkeypatch):
    clock = FakeClock()
    _fake_visits(monkeypatch, clock, _pass_s)
    everything = sum((2 + 5) * _pass_s({"batch": b, "new_tokens": n, "context": c})
                     for b in GRID["batch"] for n in GRID["new_tokens"] for c in GRID["context"])  # fmt: skip
    seconds = 0.4 * everything
    bud = Budget(seconds, clock=clock)
    df = sweeps.sweep(TINY, budget=bud, repeats=5, **GRID)
    assert bud.elapsed_s <= seconds  # every visit inside the budget, the closing kept
    ok, never = df[df["status"] == "ok"], df[df["status"] == "budget"]
    assert len(ok) >= 4 and len(never) >= 1 and len(ok) + len(never) == len(df) == 28
    assert (never["visits"] == 0).all() and never["t_min_s"].isna().all()
    assert set(df.attrs["dropped"]) == {sweeps.point_name(r) for r in never.to_dict("records")}
    # the reference and both ends of the token axis at batch 1 were measured: what a fit of the curve needs first
    got = {(r["batch"], r["new_tokens"], r["context"]) for r in ok.to_dict("records")}
    assert {(1, 1, 128), (1, 64, 128), (1, 1, 512)} <= got
    groups = never.groupby(["batch", "context"]).ngroups
    assert sweeps.unvisited_words(df).count("new tokens") == groups  # a line names each batch and context's widths


def test_a_point_far_dearer_than_its_price_is_given_up_after_its_warm_up(monkeypatch):
    clock = FakeClock()
    calls = []

    def pass_s(row):  # the widest point costs 40x what its neighbours suggest: the plan cannot see it coming
        return 3.0 if row["new_tokens"] == 64 and row["batch"] == 4 else 0.02

    _fake_visits(monkeypatch, clock, pass_s, calls)
    bud = Budget(12.0, clock=clock)
    df = sweeps.sweep(TINY, budget=bud, repeats=5, **{**GRID, "batch": [1, 4], "new_tokens": [1, 64]})
    assert bud.elapsed_s <= 12.0
    heavy = df[(df["batch"] == 4) & (df["new_tokens"] == 64)]
    assert (heavy["status"] == "budget").all()
    assert any("given up after a warm-up pass" in why for why in df.attrs["dropped"].values())
    assert calls.count((4, 64, 128)) <= 1  # tried once, not again


def test_a_compiled_sweep_prices_each_new_shapes_compile_and_ends_within_its_budget(monkeypatch):
    from measure.graphs import inductor_missing

    if inductor_missing("cpu"):
        pytest.skip("inductor cannot run here")
    clock = FakeClock()
    # every shape's first pass compiles it for 2 s (a one-off the plan learns as the first visits' extra seconds)
    _fake_visits(monkeypatch, clock, _pass_s, compile_s=2.0)
    bud = Budget(20.0, clock=clock)
    df = sweeps.sweep(TINY, budget=bud, repeats=5, compile=True, **GRID)
    assert bud.elapsed_s <= 20.0
    assert df.attrs["passes"] == "static+compile" and 3 <= (df["status"] == "ok").sum() < 28
    assert len(df.attrs["dropped"]) == (df["status"] == "budget").sum()


def test_an_ample_budget_still_visits_every_point_every_round(monkeypatch):
    clock = FakeClock()
    _fake_visits(monkeypatch, clock, _pass_s)
    df = sweeps.sweep(TINY, budget=Budget(1e6, clock=clock), repeats=5, **{**GRID, "new_tokens": [1, 8]})
    assert (df["status"] == "ok").all() and not df.attrs["dropped"] and len(df) == 8
    # in the grid's order, whatever order the visits ran in
    assert list(zip(df["batch"], df["new_tokens"], df["context"], strict=True)) == [
        (b, n, c) for b in (1, 4) for n in (1, 8) for c in (128, 512)
    ]


def test_each_dtype_gets_its_most_needed_points_before_any_gets_its_least(monkeypatch):
    clock = FakeClock()
    _fake_visits(monkeypatch, clock, _pass_s)
    bud = Budget(4.0, clock=clock)
    df = sweeps.sweep(TINY, budget=bud, repeats=5, **{**GRID, "dtype": ["fp32", "bf16"]})
    assert bud.elapsed_s <= 4.0
    ok = df[df["status"] == "ok"]
    assert set(ok["dtype"]) == {"fp32", "bf16"}  # the reference of each, at least


def test_the_sweep_bar_never_promises_more_than_the_budget(monkeypatch):
    clock = FakeClock()
    _fake_visits(monkeypatch, clock, _pass_s)
    seen = []
    real = sweeps.WorkBar.update

    def update(self, predicted_s, note=""):
        real(self, predicted_s, note)
        seen.append((self.eta_s(), self.budget.remaining_s if self.budget is not None else math.inf))

    monkeypatch.setattr(sweeps.WorkBar, "update", update)
    sweeps.sweep(TINY, budget=Budget(10.0, clock=clock), repeats=5, **GRID)
    assert seen and all(eta <= left + 1e-9 for eta, left in seen if np.isfinite(eta))


# -- measure spec's repetitions on a fake clock --------------------------------------------------------------------


def _fake_decoding(monkeypatch, clock, probe_s, spec_s):
    def result(seconds):
        return SimpleNamespace(decode_s=seconds, n_tokens=8, step_s=[seconds / 8] * 8, rounds=pd.DataFrame(),
                               step_device_s=[])  # fmt: skip

    def probe(target, prompts, n):
        clock.advance(probe_s)
        return result(probe_s)

    def spec(target, drafter, prompts, gamma, n):
        clock.advance(spec_s(gamma))
        return result(spec_s(gamma))

    monkeypatch.setattr(sv, "_probe", probe)
    monkeypatch.setattr(sv, "speculative_generate", spec)
    monkeypatch.setattr(sv, "_warm_up", lambda *a: clock.advance(0.1))
    monkeypatch.setattr(
        sv,
        "_summarise",
        lambda runs, drafters, gammas, *a: pd.DataFrame(
            [
                {"drafter": lab, "batch": b, "gamma": g}
                for lab, b, g in sorted({(r.label, r.batch, r.gamma) for r in runs if r.kind == "spec"})
            ]
        ),  # fmt: skip
    )


def test_spec_runs_stop_at_the_budget_and_name_the_configurations_left_out(monkeypatch):
    clock = FakeClock()
    # the plan prices a configuration at gamma x 0.5 s and a probe at 0.5 s; the machine takes twice that
    _fake_decoding(monkeypatch, clock, probe_s=1.0, spec_s=lambda g: 1.0 * g)
    swept = []

    def before_block(i):
        swept.append(i)
        clock.advance(3.0)

    def unit_s(u):
        return {"sweep": 1.5, "probe": 0.5}.get(u[0], 0.5 * (u[3] if len(u) > 3 else 1))

    bud = Budget(40.0, clock=clock)
    prompts = {1: [[1]] * 2, 4: [[1]] * 4}
    df = measure_speedups(
        object(), {"d": object()}, prompts, [1, 2, 4, 6], repeats=5, before_block=before_block, budget=bud,
        keep_s=2.0, costs=UnitCosts(unit_s),
    )  # fmt: skip
    assert bud.elapsed_s <= 40.0 - 2.0  # what was kept for the fits is left
    dropped = df.attrs["dropped"]
    assert dropped and any(k.startswith("repetitions") for k in dropped)
    measured = {sv.config_name(r.drafter, r.gamma, r.batch) for r in df.itertuples()}
    assert measured and not measured & set(dropped)
    every = {sv.config_name("d", g, b) for b in (1, 4) for g in (1, 2, 4, 6)}
    assert every - measured <= set(dropped)  # nothing left out unnamed
    assert swept[0] == 0  # the first block's sweep visit always runs


def test_spec_runs_keep_the_first_configuration_whatever_it_costs(monkeypatch):
    clock = FakeClock()
    _fake_decoding(monkeypatch, clock, probe_s=1.0, spec_s=lambda g: 5.0)
    bud = Budget(3.0, clock=clock)
    df = measure_speedups(object(), {"d": object()}, {1: [[1]]}, [2, 4], repeats=3, budget=bud,
                          costs=UnitCosts(lambda u: 1.0))  # fmt: skip
    assert len(df) == 1  # something is measured: one configuration, with its two probes
    assert sv.config_name("d", 4 if df["gamma"].iloc[0] == 2 else 2, 1) in df.attrs["dropped"]


def test_unit_costs_rescale_by_what_the_runs_took_and_a_sweep_by_its_last_visit():
    c = UnitCosts(lambda u: {"sweep": 10.0, "probe": 1.0}.get(u[0], 2.0))
    assert c.need([("probe", 1)]) == pytest.approx(1.25)
    c.done(("probe", 1), 3.0)
    c.done(("spec", 1, "d", 2), 6.0)  # 9 s taken for 3 s priced: 3x
    assert c.scale == pytest.approx(3.0) and c.need([("spec", 1, "d", 4)]) == pytest.approx(1.25 * 6.0)
    assert c.need([("sweep", 1)]) == pytest.approx(1.25 * 3.0 * 10.0)
    c.done(("sweep", 1), 4.0)  # a sweep visit: expected to take what the last one took
    assert c.need([("sweep", 4)]) == pytest.approx(1.25 * 4.0) and c.scale == pytest.approx(3.0)


# -- measure serve's plan --------------------------------------------------------------------------------------------


def test_the_replay_plan_keeps_the_lightest_rate_then_fits_the_rest_and_their_replays():
    kw = dict(requests=10, capacity=10.0, policies=2, per_cal_s=1.0)
    roomy = plan_replays([2.0, 6.0, 15.0], replays=2, available_s=1e4, **kw)
    assert roomy.rates == (2.0, 15.0, 6.0) and roomy.replays == 2 and roomy.recalibrate and not roomy.dropped
    # one rate at 2 req/s and one replay: 1.25 x 2 policies x (2 + 5) = 17.5 s; the heaviest adds 1.25 x 2 x 3
    tight = plan_replays([2.0, 6.0, 15.0], replays=2, available_s=26.0, **kw)
    assert tight.rates == (2.0, 15.0) and tight.dropped == (6.0,) and tight.replays == 1
    assert tight.seconds == pytest.approx(17.5 + 7.5) and tight.seconds <= 26.0
    # not even the lightest with its calibrations: it is kept without them
    bare = plan_replays([2.0, 6.0, 15.0], replays=2, available_s=5.0, **kw)
    assert bare.rates == (2.0,) and not bare.recalibrate
    assert plan_replays([2.0], replays=1, available_s=1e4, recalibrate=False, **kw).recalibrate is False


# -- the TP sweep's ranks --------------------------------------------------------------------------------------------


def test_a_rank_budget_ends_at_the_parents_deadline():
    assert not rank_budget(None).limited
    b = rank_budget(time.time() + 30.0)
    assert 29.0 < b.remaining_s <= 30.0
    assert rank_budget(time.time() - 5.0).remaining_s < 0.01  # spent before the rank started: nothing fits


# -- the commands -------------------------------------------------------------------------------------------------


def _tiny_config(tmp_path):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                               "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
                               "max_position_embeddings": 512, "model_type": "llama"}))  # fmt: skip
    return cfg


def test_measure_sweep_says_what_its_budget_dropped(tmp_path, monkeypatch, capsys):
    import specroof.measure_cli as mc
    from specroof.cli import main

    clock = FakeClock()
    _fake_visits(monkeypatch, clock, lambda row: 0.1 * row["new_tokens"])
    monkeypatch.setattr(mc, "command_budget", lambda args, words: Budget(args.budget, clock=clock))
    rc = main(["measure", "sweep", "--spec", str(_tiny_config(tmp_path)), "--dtype", "fp32", "--tokens", "1,2,4,8",
               "--context", "16", "--budget", "12", "--out", str(tmp_path / "sw"), "--json"])  # fmt: skip
    assert rc == 0 and clock.t - 1000.0 <= 12.0
    pay = json.loads(capsys.readouterr().out)
    status = {r["new_tokens"]: r["status"] for r in pay["rows"]}
    assert status[1] == "ok" and "budget" in status.values() and pay["budget_s"] == 12.0
    assert len(pay["dropped"]) == list(status.values()).count("budget")
    saved = json.loads((tmp_path / "sw" / "sweep-summary.json").read_text())
    assert saved["dropped"] == pay["dropped"]
    # the text names them in a line
    capsys.readouterr()
    rc = main(["measure", "sweep", "--spec", str(_tiny_config(tmp_path)), "--dtype", "fp32", "--tokens", "1,2,4,8",
               "--context", "16", "--budget", "12"])  # fmt: skip
    assert rc == 0 and "dropped for the budget: " in capsys.readouterr().out


def test_measure_sweep_refuses_a_budget_its_least_point_cannot_fit(tmp_path, monkeypatch, capsys):
    import specroof.measure_cli as mc
    from specroof.cli import main

    clock = FakeClock()
    _fake_visits(monkeypatch, clock, lambda row: 1.0)  # a pass of 1 s: the reference's 7 passes take 7 s
    monkeypatch.setattr(mc, "command_budget", lambda args, words: Budget(args.budget, clock=clock))
    rc = main(["measure", "sweep", "--spec", str(_tiny_config(tmp_path)), "--dtype", "fp32", "--tokens", "1,2",
               "--context", "16", "--budget", "4", "--json"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "give a --budget of at least" in err
    assert clock.t - 1000.0 <= 4.0  # refused after one pass of the reference, inside the budget


@pytest.mark.parametrize("bad", ["0", "-1", "nan"])
def test_a_budget_that_is_no_budget_is_refused_before_any_work(bad, capsys):
    from specroof.cli import main

    for cmd in (["measure", "sweep", "--model", "llama-68m"], ["measure", "spec", "--pair", "offline"]):
        assert main([*cmd, "--budget", bad, "--out", "/nonexistent/never-written"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--budget" in err
    assert not Path("/nonexistent/never-written").exists()


def test_budget_words_name_what_was_dropped_and_why():
    from specroof.measure_cli import budget_words

    assert budget_words(12.34, 60.0, {}) == "12.3 s spent of the 60 s budget; nothing dropped"
    assert budget_words(5.0, None, {}) == "5.0 s spent"
    text = budget_words(59.0, 60.0, {"rate 9 req/s": "too long", "rate 15 req/s": "too long", "replay 2": "short"})
    assert text == (
        "59.0 s spent of the 60 s budget; dropped for the budget: rate 9 req/s, rate 15 req/s: too long; replay 2: short"
    )


# -- measure spec's plan under --compile ------------------------------------------------------------------------------


def test_a_compiled_check_counts_the_shapes_it_compiles_and_plans_for_them():
    from measure.pair import PairConfig
    from measure.spec_check import LADDER, plan_configs, staged_shapes, sweep_tokens
    from roofline.costing.hardware import load_hardware

    counts = [staged_shapes(bs, gs, 32, sweep_tokens(gs, bs, [20.0]), [64, 128], 256) for bs, gs in LADDER]
    assert counts == sorted(counts) and counts[0] > 10  # dozens of shapes: every sweep width, every bucket crossed
    assert staged_shapes((1,), (2,), 32, [1, 2], [64], 256, drafts=0) < staged_shapes((1,), (2,), 32, [1, 2], [64], 256)
    target = SimpleNamespace(spec=PairConfig().target_spec())
    hw, drafters = load_hardware("epyc-9654"), {"early exit @1": 1}

    def shapes(bs, gs):
        return staged_shapes(bs, gs, 32, sweep_tokens(gs, bs, [20.0]), [64, 128], 256)

    free = plan_configs(target, drafters, hw, "fp32", 32, 60.0)
    assert (free["batches"], free["gammas"]) == (list(LADDER[-1][0]), list(LADDER[-1][1]))
    assert free["predicted_compile_s"] == 0.0 and free["not_planned"] == []
    # a shape costs 0.2 s to compile: the largest step's ~100 shapes no longer fit a third of 60 s
    compiled = plan_configs(target, drafters, hw, "fp32", 32, 60.0, shape_s=0.2, shapes=shapes)
    assert len(compiled["batches"]) * len(compiled["gammas"]) < len(LADDER[-1][0]) * len(LADDER[-1][1])
    assert 0 < compiled["predicted_compile_s"] <= 20.0 and compiled["not_planned"]
