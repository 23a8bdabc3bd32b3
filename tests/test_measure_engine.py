"""`measure engine`: frameworks decode greedily as plain decoding does, the fit writes a profile that prices, bad ones exit 2."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import measure.engine_fit as ef  # noqa: E402
from measure.decode import autoregressive_generate  # noqa: E402
from measure.engine_fit import (  # noqa: E402
    EnginePlan,
    fit_engine,
    framework_module,
    measure_engine,
    profile_data,
    write_engine_profile,
)
from measure.frameworks import hf, torch_eager  # noqa: E402
from measure.pair import held_out_prompts, load_pair  # noqa: E402
from measure.specval import error_summary, machine_load, mark_noise  # noqa: E402
from roofline.core.errors import SpecroofError  # noqa: E402
from roofline.costing.hardware import load_hardware  # noqa: E402
from roofline.costing.measured_engine import load_measured_engine, measured_engine_from_dict  # noqa: E402
from roofline.costing.pricing import Pricing  # noqa: E402
from roofline.speculation.drafters import DraftModel  # noqa: E402
from roofline.speculation.speculative import predict_speedup  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pair():
    target, draft, _ = load_pair(dtype="fp32")
    return target, draft


@pytest.fixture(scope="module")
def prompts():
    return held_out_prompts(2, 24, seed=3)


def test_the_converted_hf_model_decodes_as_the_harness(pair, prompts):
    target, _ = pair
    ref = autoregressive_generate(target, prompts[:1], 20).tokens
    assert hf.generate(hf.from_harness(target, dtype="fp32"), prompts[:1], 20).tokens == ref


@pytest.mark.parametrize("gamma", [1, 3, "heuristic"])
def test_hf_assisted_generation_emits_plain_greedy_decoding(pair, prompts, gamma):
    target, draft = pair
    ht, hd = hf.from_harness(target, dtype="fp32"), hf.from_harness(draft, dtype="fp32")
    plain = hf.generate(ht, prompts[:1], 24)
    spec = hf.generate(ht, prompts[:1], 24, assistant=hd, gamma=gamma, count=True)
    assert spec.tokens == plain.tokens
    assert 1 <= spec.rounds < 24 and spec.draft_passes >= spec.rounds - 1  # it did speculate


def test_hf_assisted_generation_is_batch_one_only(pair, prompts):
    target, draft = pair
    with pytest.raises(SpecroofError, match="batch 1 only"):
        hf.generate(hf.from_harness(target, dtype="fp32"), prompts, 8, assistant=hf.from_harness(draft, dtype="fp32"))


@pytest.mark.parametrize("gamma", [2, "heuristic"])
def test_torch_eager_speculation_emits_plain_greedy_decoding_at_batch_2(pair, prompts, gamma):
    target, draft = pair
    plain = torch_eager.generate(target, prompts, 20)
    spec = torch_eager.generate(target, prompts, 20, assistant=draft, gamma=gamma)
    assert spec.tokens == plain.tokens and spec.rounds > 0


def test_torch_compile_speculation_emits_plain_greedy_decoding(prompts):
    from measure.frameworks import torch_compile

    if torch_compile.available():
        pytest.skip(torch_compile.available())
    target, draft, _ = load_pair(dtype="fp32")  # own copies: compiling patches the modules in place
    target, draft = torch_compile.build(target, "fp32", "cpu"), torch_compile.build(draft, "fp32", "cpu")
    plain = torch_compile.generate(target, prompts[:1], 12)
    assert plain.tokens == autoregressive_generate(load_pair(dtype="fp32")[0], prompts[:1], 12).tokens
    assert torch_compile.generate(target, prompts[:1], 12, assistant=draft, gamma=3).tokens == plain.tokens


def test_torch_compile_traces_the_layers_projections_as_f_linear():
    """oneDNN's inner product on a weight that is a graph input is what inductor cannot lower: none is left in a layer."""
    from measure.frameworks import torch_compile
    from measure.models import Linear

    target, _, _ = load_pair(dtype="fp32")
    for mod in target.modules():  # as if the harness had timed oneDNN fastest for every shape
        if isinstance(mod, Linear):
            mod.kernels = {1: "onednn", 5: "onednn", 64: "onednn"}
    head = dict(target.lm_head.kernels)
    target.auto_kernels = False
    torch_compile.build(target, "fp32", "cpu")
    layer_linears = [m for layer in target.layers for m in layer.modules() if isinstance(m, Linear)]
    assert layer_linears and all(m.kernels == {} for m in layer_linears)
    assert target.lm_head.kernels == head  # the eager head keeps its kernel
    target.setup_cache(1, 16)  # and setting up the cache does not choose the layers' kernels again
    assert all(m.kernels == {} for m in layer_linears)


def test_serving_engines_are_detected_and_skipped_with_one_line():
    for name in ("vllm", "sglang"):
        with pytest.raises(SpecroofError) as e:
            framework_module(name)
        assert "\n" not in str(e.value) and name in str(e.value)
    with pytest.raises(SpecroofError, match="--framework must be one of"):
        framework_module("tensorflow")


SMALL = EnginePlan(
    depths=(1, 3), batches=(1, 2), gammas=(1, 2, 3), fit_gammas=(1, 3), new_tokens=16, repeats=1, remeasure=1
)


@pytest.fixture(scope="module")
def hf_fit():
    hw = load_hardware("epyc-9654")  # a datasheet CPU profile with an fp32 peak: the passes are host-bound anyway
    m = measure_engine("hf", SMALL, dtype="fp32")
    return m, fit_engine(m, hw), hw


def test_measure_engine_times_every_configuration_and_fits_the_host_terms(hf_fit):
    m, fit, _ = hf_fit
    t = fit.table
    assert len(t[t["kind"] == "plain"]) == 4 and set(t.loc[t["kind"] == "spec", "gamma"]) == {0, 1, 2, 3}
    assert (t["t_step_s"] > 0).all() and np.isfinite(t["t_predicted_s"]).all()
    assert fit.engine.host_launch_s > 0 and fit.engine.launches  # one kernel's cost, counts from the hf profile
    held = t[(t["kind"] == "spec") & ~t["fit"]]
    assert set(held["schedule"]) == {"constant", "heuristic"} and held["speedup_error"].notna().all()
    assert {"load_avg_1m", "steal_pct", "clock"} <= set(m.load)
    assert fit.validation["rows"] + fit.validation["noisy_rows"] == len(held)


def test_the_written_profile_loads_and_prices(hf_fit, tmp_path):
    m, fit, hw = hf_fit
    path = write_engine_profile(tmp_path / "engine.toml", profile_data(fit, m, "specroof measure engine", hw.id))
    data = tomllib.loads(path.read_text())
    assert data["measured"]["framework"] == "hf" and data["measured"]["framework_version"] == hf.version()
    assert data["measured"]["clock"] in ("thread CPU time", "wall-clock") and "load_avg_1m" in data["measured"]
    me = load_measured_engine(path)
    # the one schema: written through engine_data, read through engine_from_dict. Field by field: seconds travel in
    # microseconds (x / 1e-6 * 1e-6 can differ from x in its last bit), everything else comes back exactly
    for f in (f for f in dataclasses.fields(fit.engine) if f.compare):  # (as == compares them)
        got, want = getattr(me.engine, f.name), getattr(fit.engine, f.name)
        if isinstance(want, float):
            assert got == pytest.approx(want, rel=1e-12, abs=0.0), f.name
        else:
            assert got == want, f.name
    me.check_hardware(hw)
    kw = dict(target=m.target, drafter=DraftModel(m.draft), mean_accepted=2.5, gamma=2)
    ps = predict_speedup(hardware=Pricing(hardware=hw, engine=me.engine, dtype="fp32"), **kw)
    assert np.isfinite(ps.speedup) and ps.speedup > 0 and ps.t_base_s > 0
    # the written profile prices as the fit did: the held-out prediction of a row comes back from the file
    row = next(fit.table[(fit.table["kind"] == "spec") & (fit.table["gamma"] == 2)].itertuples())
    _, again = ef._spec_prediction(row, ef._pricing(hw, me.engine, "fp32"), m.target, m.draft)
    assert again == pytest.approx(row.speedup_predicted, rel=1e-9)
    # and a row that drafted exactly gamma per round is priced as predict_speedup prices that gamma
    exact = row._replace(draft_passes_per_round=2.0, mean_accepted=min(row.mean_accepted, 3.0))
    ps2 = predict_speedup(
        hardware=ef._pricing(hw, me.engine, "fp32"), target=m.target, drafter=DraftModel(m.draft),
        mean_accepted=exact.mean_accepted, gamma=2, context=int(exact.context),
    )  # fmt: skip
    assert ef._spec_prediction(exact, ef._pricing(hw, me.engine, "fp32"), m.target, m.draft)[1] == pytest.approx(
        ps2.speedup, rel=1e-9
    )
    with pytest.raises(SpecroofError, match="price it with --hardware epyc-9654"):
        me.check_hardware(load_hardware("h100-sxm-80gb"))


def test_profiles_missing_measured_fields_are_one_line_errors(hf_fit):
    m, fit, hw = hf_fit
    data = profile_data(fit, m, "cmd", hw.id)
    for key in ("device", "framework_version", "hardware"):
        bad = {**data, "measured": {k: v for k, v in data["measured"].items() if k != key}}
        with pytest.raises(SpecroofError, match=f"missing '{key}'"):
            measured_engine_from_dict(bad)
    with pytest.raises(SpecroofError, match="needs a \\[measured\\] block"):
        measured_engine_from_dict({k: v for k, v in data.items() if k != "measured"})
    with pytest.raises(SpecroofError, match="framework must be one of"):
        measured_engine_from_dict({**data, "measured": {**data["measured"], "framework": "jax"}})


def test_a_bad_engine_profile_on_the_cli_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[measured]\nframework = "hf"\n')
    r = subprocess.run(
        [sys.executable, "-m", "specroof.cli", "speedup", "--hardware", "h100-sxm-80gb", "--target", "llama-2-7b",
         "--drafter", "model:llama-68m", "--mean-accepted", "2", "--gamma", "3", "--engine", str(bad)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "measured" in r.stderr


def test_the_command_registers_on_the_measure_subparsers():
    from specroof.commands.measure_engine import add_parser

    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["engine", "--framework", "hf", "--gamma", "1,2,3", "--out", "e.toml"])
    assert args.gamma == [1, 2, 3] and args.fit_gamma is None and callable(args.func)


def test_noise_marks_rows_whose_brackets_disagree_more_than_their_error():
    df = pd.DataFrame(
        {"probe_spread": [0.01, 0.30, 0.03, 0.20], "rel_error": [0.04, 0.10, -0.02, 0.40], "flag": ["", "", "", ""]}
    )
    out = mark_noise(df)
    assert out["noisy"].tolist() == [False, True, False, False]  # 3% spread on a 2% error: under the 5% floor
    s = error_summary(out)
    assert s["noisy_rows"] == 1 and s["rows"] == 3 and s["error_max"] == pytest.approx(0.40)
    flagged = mark_noise(df.assign(flag=["", "", "noise: above its physical bound", ""]))
    assert flagged["noisy"].tolist() == [False, True, True, False]


def test_machine_load_reads_load_average_and_steal():
    start = machine_load()
    sum(i * i for i in range(200_000))
    end = machine_load(start["ticks"])
    assert end["load_avg_1m"] >= 0 and end["cpus"] >= 1
    assert start["ticks"] is None or 0.0 <= end["steal_pct"] <= 100.0


class _FakeFramework:
    """A framework whose decoding takes synthetic seconds: plain steps cost per layer, rounds per draft step.

    The baseline probe after every ``noisy_every``-th speculative call is slowed down, so the brackets
    of some configurations disagree; ``calls`` counts the speculative calls (re-measurements included).
    """

    NAME = "fake"

    def __init__(self, noisy_every: int = 3) -> None:
        self.calls = 0
        self.noisy_every = noisy_every
        self.slow_next = False

    def available(self):
        return None

    def version(self):
        return "0"

    def build(self, model, dtype, device):
        return model

    def generate(self, model, prompts, n, *, assistant=None, gamma=0, count=False, clock=None):
        from measure.frameworks.common import FrameworkRun

        layers = model.spec.n_layers
        if assistant is None:
            slow = 1.6 if self.slow_next and n >= 16 else 1.0
            if n >= 16:
                self.slow_next = False
            sec = 0.01 + n * (2e-4 + 1e-4 * layers) * slow * len(prompts)
            return FrameworkRun([[1] * n for _ in prompts], sec)
        g = 5 if gamma == "heuristic" else int(gamma)
        rounds = int(np.ceil(n / (g + 1)))
        if not count and n >= 16:
            self.calls += 1
            self.slow_next = self.calls % self.noisy_every == 0
        sec = 0.01 + rounds * (g * 2.5e-4 + 2e-4 + 1e-4 * layers + 3e-4)
        return FrameworkRun([[1] * n], sec, rounds=rounds, draft_passes=rounds * g)


def test_rows_whose_brackets_disagree_are_remeasured_within_budget_or_marked_noisy(monkeypatch):
    import measure.engine_fit as ef
    from measure.budget import Budget

    fake = _FakeFramework()
    monkeypatch.setattr(ef, "framework_module", lambda name: fake)
    monkeypatch.setattr(ef, "base_engine", lambda name: ef.load_engine("torch-eager"))
    plan = EnginePlan(depths=(1, 3), batches=(1,), gammas=(1, 2, 3, 4), fit_gammas=(1, 3), new_tokens=32, repeats=2)
    hw = load_hardware("epyc-9654")
    m = measure_engine("torch-eager", plan, dtype="fp32")
    held = m.rows[(m.rows["kind"] == "spec") & ~m.rows["fit"]]
    assert (held["spread"] > 0.05).any()  # the slowed probes made some brackets disagree
    before = fake.calls
    fit = fit_engine(m, hw, budget=Budget(3600))
    t = fit.table[(fit.table["kind"] == "spec") & ~fit.table["fit"]]
    rule = t["spread"] > np.maximum(t["speedup_error"].abs(), 0.05)
    assert (t["noisy"] == rule).all()  # the rule, applied after the re-measurements
    assert fake.calls > before  # noisy rows were timed again while the budget allowed
    assert fit.validation["noisy_rows"] == int(t["noisy"].sum())
    assert fit.validation["rows"] == int((~t["noisy"]).sum())
    # the fit rows got repetitions too, until their interval was within the floor or they were capped
    fit_spec = fit.table[(fit.table["kind"] == "spec") & fit.table["fit"]]
    assert ((fit_spec["spread"] <= 0.05) | (fit_spec["repeats"] == plan.repeats + plan.remeasure)).all()
    # no budget left: nothing is re-measured, the rows are only marked
    m2 = measure_engine("torch-eager", plan, dtype="fp32")
    spent = Budget(1e-3)
    calls = fake.calls
    fit_engine(m2, hw, budget=spent)
    assert fake.calls == calls


def test_a_measured_speedup_above_its_bound_is_never_reported(monkeypatch):
    import measure.specval as sv
    from measure.decode import GenerationResult
    from measure.specval import measure_speedups

    def base(model, prompts, n, *a, step_times=False, **k):  # 10 ms a step
        return GenerationResult([[1] * n for _ in prompts], 0.01 * n, 0.0, step_s=[0.01] * n)

    def spec(target, drafter, prompts, gamma, n, *a, **k):  # 2 tokens in 4 ms a round whose verify took 8: impossible
        rows = [{"round": r, "seq": 0, "accepted": 1, "emitted": 2, "t_draft_s": -0.004, "t_verify_s": 0.008}
                | {"t_accept_s": 0.0, "t_commit_s": 0.0} for r in range(n // 2)]  # fmt: skip
        return GenerationResult([[1] * n], 0.002 * n, 0.0, pd.DataFrame(rows), gamma=gamma, drafted=gamma)

    monkeypatch.setattr(sv, "autoregressive_generate", base)
    monkeypatch.setattr(sv, "speculative_generate", spec)
    df = measure_speedups(None, {"a": 1}, {1: [[0, 1]]}, [1], max_new_tokens=8, repeats=1)
    r = df.iloc[0]
    assert r["speedup_measured_raw"] > r["speedup_bound"] and np.isnan(r["speedup_measured"])
    assert r["flag"].startswith("noise") and {"load_avg_1m", "steal_pct"} <= set(df.attrs["load"])


class _RecordingFramework(_FakeFramework):
    """The fake framework, recording each call's shape and whether it was timed (a clock passed)."""

    def __init__(self) -> None:
        super().__init__(noisy_every=10**9)
        self.log: list[tuple[tuple[Any, ...], bool]] = []

    def generate(self, model, prompts, n, *, assistant=None, gamma=0, count=False, clock=None):
        shape = (model.spec.name, len(prompts), n, assistant is not None, gamma if assistant is not None else 0)
        self.log.append((shape, clock is not None))
        return super().generate(model, prompts, n, assistant=assistant, gamma=gamma, count=count, clock=clock)


def test_every_timed_call_was_warmed_at_its_own_shape_first(monkeypatch):
    """A compiled framework compiles on a call's first shape (the cache is sized to its length): never while timed."""
    fake = _RecordingFramework()
    monkeypatch.setattr(ef, "framework_module", lambda name: fake)
    plan = EnginePlan(depths=(1, 2), batches=(1, 2), gammas=(1, 2), fit_gammas=(1,), new_tokens=16, repeats=1)
    measure_engine("torch-eager", plan, dtype="fp32")
    warmed: set[tuple[Any, ...]] = set()
    timed_shapes = []
    for shape, timed in fake.log:  # each configuration is warmed, then timed: every timed shape was warmed before
        if timed:
            assert shape in warmed, shape
            timed_shapes.append(shape)
        else:
            warmed.add(shape)
    assert timed_shapes


def test_median_interval_is_robust_and_narrows_with_repetitions():
    med, half = ef.median_interval([2.0])
    assert med == pytest.approx(2.0) and half == float("inf")  # one pair says nothing about its spread
    assert ef.median_interval([1.5, 1.5, 1.5])[1] == 0.0
    few = ef.median_interval([1.8, 2.0, 2.2, 1.9, 2.1])
    many = ef.median_interval([1.8, 2.0, 2.2, 1.9, 2.1] * 4)
    assert few[0] == pytest.approx(2.0) and many[0] == pytest.approx(2.0) and 0 < many[1] < few[1]
    # one interrupted repetition moves neither the median nor, much, the interval (a mean and sd would jump)
    hit = ef.median_interval([1.8, 2.0, 2.2, 1.9, 2.1] * 4 + [9.0])
    assert hit[0] == pytest.approx(2.0) and hit[1] < 2 * many[1]


def test_a_token_is_the_long_call_less_the_short_calls_median():
    t = ef._per_token([1.0, 1.2], [0.2, 0.3, 10.0], 8)  # an outlying short call does not move the median much
    assert t == pytest.approx([(1.0 - 0.3) / 8, (1.2 - 0.3) / 8])
    assert EnginePlan(new_tokens=96).short_tokens == 24 and EnginePlan(new_tokens=8).short_tokens == 2


def test_the_default_dtype_is_the_devices_fastest(monkeypatch):
    import measure.choose as choose

    monkeypatch.setattr(choose, "matmul_rate", lambda d, dev: {"fp32": 18e9, "bf16": 10e9}[d])
    monkeypatch.setattr(choose, "cpu_bf16_units", lambda dev: None)  # flags unread: the timings decide
    dtype, why = ef.fastest_dtype(torch.device("cpu"))
    assert dtype == "fp32" and "emulated" in why
    monkeypatch.setattr(choose, "matmul_rate", lambda d, dev: {"fp32": 18e9, "bf16": 60e9}[d])
    monkeypatch.setattr(choose, "cpu_bf16_units", lambda dev: True)  # a CPU whose flags name bf16 units
    assert ef.fastest_dtype(torch.device("cpu"))[0] == "bf16"
    monkeypatch.setattr(choose, "cpu_bf16_units", lambda dev: False)  # no units: a faster timing is not believed
    assert ef.fastest_dtype(torch.device("cpu"))[0] == "fp32"


class _CountingFramework(_FakeFramework):
    """The fake framework that records whether the heap was frozen during each timed call."""

    def __init__(self) -> None:
        super().__init__(noisy_every=10**9)
        self.frozen: list[bool] = []

    def generate(self, model, prompts, n, *, assistant=None, gamma=0, count=False, clock=None):
        import gc

        if clock is not None:
            self.frozen.append(gc.get_freeze_count() > 0)
        return super().generate(model, prompts, n, assistant=assistant, gamma=gamma, count=count, clock=clock)


def test_rows_count_the_rounds_between_the_two_lengths_and_record_the_dtype(monkeypatch):
    import gc

    fake = _CountingFramework()
    monkeypatch.setattr(ef, "framework_module", lambda name: fake)
    monkeypatch.setattr(ef, "fastest_dtype", lambda dev: ("fp32", "fp32: the fake's fastest"))
    plan = EnginePlan(depths=(1, 2), batches=(1,), gammas=(1, 3), fit_gammas=(1,), new_tokens=32, repeats=3)
    m = measure_engine("torch-eager", plan)
    assert m.dtype == "fp32" and m.dtype_reason == "fp32: the fake's fastest"
    assert fake.frozen and all(fake.frozen) and gc.get_freeze_count() == 0  # frozen while timed, thawed after
    spec = m.rows[m.rows["kind"] == "spec"].set_index("gamma")
    for g in (1, 3):  # the fake's rounds: ceil(n / (g + 1)) at each length
        added = int(np.ceil(32 / (g + 1))) - int(np.ceil(8 / (g + 1)))
        assert spec.loc[g, "rounds"] == added and spec.loc[g, "mean_accepted"] == pytest.approx(24 / added)
        assert spec.loc[g, "draft_passes_per_round"] == pytest.approx(g)
        assert spec.loc[g, "repeats"] == 3 and spec.loc[g, "spread"] == 0.0  # synthetic: every pair agrees
    # a deterministic framework: the measured speedup is exactly its ratio of per-token times
    per_token = 2e-4 + 1e-4 * m.target.n_layers
    assert spec.loc[1, "t_base_s"] == pytest.approx(per_token)
    assert spec.loc[1, "speedup_measured"] == pytest.approx(per_token / spec.loc[1, "t_step_s"])


class _PricedFramework(_FakeFramework):
    """A framework whose calls take exactly what a known engine prices them at (the fit's own route, noise-free).

    Plain calls cost ``n`` steps of the model at the rows' mean context; a speculative call costs its rounds
    (every draft accepted: ``ceil(n / (g + 1))``) of the round priced at that gamma.
    """

    def __init__(self, pricing: Pricing, context: int) -> None:
        super().__init__(noisy_every=10**9)
        self.pr, self.context = pricing, context

    def generate(self, model, prompts, n, *, assistant=None, gamma=0, count=False, clock=None):
        from measure.frameworks.common import FrameworkRun
        from roofline.costing.passtime import pass_seconds

        if assistant is None:
            step = float(pass_seconds(model.spec, self.pr, len(prompts), 1, self.context))
            return FrameworkRun([[1] * n for _ in prompts], 0.01 + n * step)
        g = 5 if gamma == "heuristic" else int(gamma)
        rounds = int(np.ceil(n / (g + 1)))
        ps = predict_speedup(
            hardware=self.pr, target=model.spec, drafter=DraftModel(assistant.spec), mean_accepted=g + 1.0, gamma=g,
            context=self.context,
        )  # fmt: skip
        return FrameworkRun([[1] * n], 0.01 + rounds * ps.t_round_s, rounds=rounds, draft_passes=rounds * g)


def test_the_fit_recovers_the_kernels_streaming_share_that_prices_the_narrow_draft(monkeypatch):
    """Timings priced by a known engine whose kernels stream at a small share of the profile's rate.

    There a pass's time depends on the model's width as well as its depth: the target's 256-wide layers are
    bound by their weights' streaming, the 128-wide draft's by the kernels' issue, so a draft pass costs less
    than a layer of the target's width would. Fitted to the plain rows (the target's width) and the fit gammas,
    the share is recovered and the held-out gammas and the heuristic schedule's long rounds are predicted; with
    the share held at the profile's rate (the terms fitted before) the same rows are not.
    """

    hw = load_hardware("epyc-9654")
    true = dataclasses.replace(
        ef.base_engine("hf"), host_launch_s=15e-6, host_step_s=4e-4, host_step_per_seq_s=1e-4, round_s=2e-3,
        bandwidth_fraction=0.002,
    )  # fmt: skip
    plan = EnginePlan(depths=(1, 2, 4), batches=(1, 2), gammas=(1, 2, 3, 4), fit_gammas=(1, 3), new_tokens=32,
                      repeats=1)  # fmt: skip
    context = plan.prompt_len + (plan.short_tokens + plan.new_tokens) // 2
    monkeypatch.setattr(ef, "framework_module", lambda name: _PricedFramework(ef._pricing(hw, true, "fp32"), context))
    m = measure_engine("hf", plan, dtype="fp32")
    fit = fit_engine(m, hw)
    assert fit.engine.bandwidth_fraction == pytest.approx(0.002, rel=0.05)
    assert fit.params["device bandwidth_fraction"] == pytest.approx(fit.engine.bandwidth_fraction)
    assert fit.fit_error["error_max"] < 0.01 and fit.validation["error_max"] < 0.01
    # the fitted profile writes the share and reads it back
    data = profile_data(fit, m, "specroof measure engine --framework hf", "epyc-9654")
    assert data["device"]["bandwidth_fraction"] == pytest.approx(fit.engine.bandwidth_fraction)
    assert measured_engine_from_dict(data).engine.bandwidth_fraction == fit.engine.bandwidth_fraction
    # the share held at the profile's rate: the width is not priced, and the long rounds are mispredicted
    monkeypatch.setitem(ef._TERMS, "eager", [x for x in ef._TERMS["eager"] if x[0] != "bandwidth_fraction"])
    old = fit_engine(m, hw)
    assert old.engine.bandwidth_fraction == 1.0
    held = old.table[(old.table["kind"] == "spec") & ~old.table["fit"]]
    assert held["speedup_error"].abs().max() > max(0.03, 3 * fit.validation["error_max"])
