"""Budgets are budgets: counted from the process's start, apportioned up front, what is dropped named; on a fake clock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from measure.budget import Budget, WorkBar, apportion, process_start

ROOT = Path(__file__).resolve().parents[1]


class FakeClock:
    """A clock that moves only when told: the seconds a fake framework's calls and a fake fit take."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += float(seconds)


def test_a_budget_runs_on_its_clock_and_keeps_time_for_what_follows():
    clock = FakeClock()
    b = Budget(60.0, clock=clock)
    clock.advance(20)
    assert b.elapsed_s == 20 and b.remaining_s == 40 and b.end == clock.t + 40
    kept = b.keeping(15.0)  # what the fit needs at the end is not the measurement's
    assert kept.start == b.start and kept.remaining_s == 25 and kept.allows(25) and not kept.allows(25.1)
    half = b.share(0.5)
    assert half.remaining_s == 20
    clock.advance(30)
    assert kept.expired() and not b.expired() and half.remaining_s == 0.0
    clock.advance(10)
    assert b.expired() and b.remaining_s == 0.0
    free = Budget(None, clock=clock)
    assert free.remaining_s == float("inf") and free.keeping(10).remaining_s == float("inf") and not free.limited
    with pytest.raises(ValueError, match="> 0 seconds"):
        Budget(0.0)


def test_a_share_of_the_users_budget_names_and_asks_for_the_users_budget():
    # the page keeps a little of `report --budget 3` for itself: a refusal inside the check says "--budget 3" and
    # asks for what the check needs plus what the page keeps, not for the check's own share
    clock = FakeClock()
    part = Budget(1.5, clock=clock, stated_s=3.0)
    assert part.stated == 3.0 and part.asking(19.0) == 21 and part.keeping(0.5).stated == 3.0
    assert part.keeping(0.5).asking(19.0) == 21  # 19 s from its start, and the 2 s kept after it (page and fit)
    own = Budget(60.0, clock=clock)
    assert own.stated == 60.0 and own.asking(18.2) == 19 and own.keeping(10).stated == 60.0
    assert own.keeping(10).asking(18.2) == 29


def test_a_budget_from_the_process_start_counts_what_came_before():
    clock = FakeClock()
    b = Budget.from_process_start(60.0, clock=clock)
    assert b.start <= clock.t  # the process started before now: those seconds are already spent
    # in a fresh interpreter: the budget already counts the interpreter's start, a sleep and the imports before it
    code = (
        "import time; time.sleep(0.3)\n"
        "from measure.budget import Budget\n"
        "print(Budget.from_process_start(60.0).elapsed_s)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert float(r.stdout) >= 0.3
    assert process_start() <= Budget(1.0).start


def test_a_command_counts_from_the_process_start_only_when_the_process_runs_it(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(sys, "argv", ["specroof", "measure", "engine", "--framework", "hf"])
    started = Budget.for_command(60.0, ["measure", "engine"], clock=clock).start
    # the process's start (the real uptime moves between the two readings: by less than a second), before now
    assert started == pytest.approx(process_start(clock), abs=0.5) and started < clock.t
    monkeypatch.setattr(sys, "argv", ["pytest", "tests/test_budgets.py"])  # called in-process: from the call
    assert Budget.for_command(60.0, ["measure", "engine"], clock=clock).start == clock.t
    monkeypatch.setattr(sys, "argv", ["specroof", "engine", "measure"])  # the words out of order: not this command
    assert Budget.for_command(60.0, ["measure", "engine"], clock=clock).start == clock.t


def test_apportion_keeps_items_in_priority_order_and_names_the_dropped():
    cost_of = {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0}

    def cost(kept, r):  # r repetitions each, and a one-off 1 s
        return 1.0 + r * sum(cost_of[k] for k in kept)

    # 3 repetitions of a, c and d take 1 + 3 x 4 = 13 s; b would take 15 more: dropped, and the cheaper later ones kept
    got = apportion(list("abcd"), cost, 14.0, min_repeats=3, max_repeats=12)
    assert got.kept == ("a", "c", "d") and got.dropped == ("b",) and got.repeats == 3
    assert got.seconds == pytest.approx(13.0)
    # with room, the repetitions grow up to the share of the seconds
    roomy = apportion(list("abcd"), cost, 100.0, min_repeats=3, max_repeats=12, share=0.7)
    assert roomy.dropped == () and roomy.repeats == 7 and roomy.seconds <= 70.0 < cost(roomy.kept, 8)
    assert apportion(list("abcd"), cost, float("inf"), max_repeats=12).repeats == 12
    # essential items are kept whatever they cost
    tight = apportion(list("abcd"), cost, 2.0, essential=2)
    assert tight.kept == ("a", "b") and tight.dropped == ("c", "d")
    with pytest.raises(ValueError, match="min_repeats"):
        apportion(list("ab"), cost, 10.0, min_repeats=0)


def test_the_bar_estimate_is_the_budgets():
    clock = FakeClock()
    b = Budget(60.0, clock=clock)
    bar = WorkBar(100.0, "x", enabled=False, budget=b, tail_s=5.0)
    clock.advance(10)
    bar.update(50.0)  # half the work in 10 s: 10 s more, and the 5 s after it
    assert bar.eta_s() == pytest.approx(15.0)
    assert "10s of the 60s budget" in bar.postfix() and "~15s left" in bar.postfix()
    clock.advance(35)
    bar.update(1.0)  # the machine slowed: the rescaled estimate (~46 s) is more than the budget has left
    assert bar.eta_s() == pytest.approx(b.remaining_s) == pytest.approx(15.0)
    unlimited = WorkBar(10.0, "x", enabled=False)
    unlimited.update(5.0)
    assert np.isfinite(unlimited.eta_s())


# -- measure engine on a fake framework and a fake clock --------------------------------------------------------

torch = pytest.importorskip("torch")

import measure.engine_fit as ef  # noqa: E402
from measure.engine_fit import EnginePlan, configuration_order, fit_engine, measure_engine  # noqa: E402
from roofline.core.errors import SpecroofError  # noqa: E402
from roofline.costing.hardware import load_hardware  # noqa: E402


class ClockedFramework:
    """Decoding that takes synthetic seconds, on the fake clock: a plain step costs per layer and per sequence,
    a speculative round per draft step; a model's first call also pays ``compile_s`` per layer (as torch.compile)."""

    def __init__(self, clock: FakeClock, compile_s: float = 0.0) -> None:
        self.clock = clock
        self.compile_s = compile_s
        self.compiled: set[int] = set()

    def available(self):
        return None

    def version(self):
        return "0"

    def build(self, model, dtype, device):
        return model

    def generate(self, model, prompts, n, *, assistant=None, gamma=0, count=False, clock=None):
        from measure.frameworks.common import FrameworkRun

        layers = model.spec.n_layers
        for m in (model, assistant) if assistant is not None else (model,):
            if id(m) not in self.compiled:
                self.compiled.add(id(m))
                self.clock.advance(self.compile_s * m.spec.n_layers)
        if assistant is None:
            sec = 0.01 + n * (2e-3 + 1e-3 * layers) * (1 + 0.2 * (len(prompts) - 1))
            self.clock.advance(sec)
            return FrameworkRun([[1] * n for _ in prompts], sec)
        g = 5 if gamma == "heuristic" else int(gamma)
        rounds = int(np.ceil(n / (g + 1)))
        sec = 0.01 + rounds * (g * 2.5e-3 + 2e-3 + 1e-3 * layers + 3e-3)
        self.clock.advance(sec)
        return FrameworkRun([[1] * n], sec, rounds=rounds, draft_passes=rounds * g)


PLAN = EnginePlan(depths=(1, 2, 4), batches=(1, 2), gammas=(1, 2, 3, 4), fit_gammas=(1, 3), new_tokens=32, repeats=8)


def _run(monkeypatch, seconds, compile_s=0.0, price_s=2e-3, plan=PLAN):
    """measure_engine and fit_engine on the fake clock; pricing a row takes ``price_s`` fake seconds."""
    clock = FakeClock()
    fw = ClockedFramework(clock, compile_s)
    monkeypatch.setattr(ef, "framework_module", lambda name: fw)
    predict = ef._predict

    def priced(rows, *a, **k):
        clock.advance(price_s * len(rows))
        return predict(rows, *a, **k)

    monkeypatch.setattr(ef, "_predict", priced)
    bud = Budget(seconds, clock=clock)
    m = measure_engine("torch-eager", plan, dtype="fp32", budget=bud)
    fit = fit_engine(m, load_hardware("epyc-9654"), budget=bud)
    return m, fit, bud, clock


def test_an_ample_budget_measures_everything_and_names_nothing(monkeypatch):
    m, fit, bud, _ = _run(monkeypatch, 1e5)
    assert m.dropped == {} and m.skipped == []
    spec = m.rows[m.rows["kind"] == "spec"]
    plain = m.rows[m.rows["kind"] == "plain"]
    assert len(spec) == 5 and len(plain) == 6
    assert (spec["repeats"] == PLAN.repeats).all()
    assert (plain["repeats"] == ef.planned_repeats((1, 1), PLAN.repeats, ef.MIN_REPEATS)).all()
    assert bud.elapsed_s < 1e5 and set(m.steps_s) >= {"probe", "load", "warm-up", "repetitions"}


@pytest.mark.parametrize("compile_s", [0.0, 0.5])
def test_a_short_budget_drops_the_least_needed_configurations_says_so_and_ends_within_it(monkeypatch, compile_s):
    """Every kept configuration has 3 repetitions; the dropped ones are named, the fit included in the seconds."""
    full, _, used, _ = _run(monkeypatch, 1e5, compile_s)
    whole = used.elapsed_s
    seconds = 0.35 * whole  # about a third of what everything would take
    m, fit, bud, clock = _run(monkeypatch, seconds, compile_s)
    assert bud.elapsed_s <= seconds  # the warm-ups (and compiling), the repetitions and the fit, all inside
    assert m.dropped, "a third of the time cannot measure everything"
    assert (m.rows["repeats"] >= ef.MIN_REPEATS).all()
    names = {ef.config_name(k) for k in configuration_order(PLAN)}
    measured = set(m.repeats) - set(m.dropped)
    assert set(m.dropped) <= names and measured and not (measured & set(m.dropped))
    for name, why in m.dropped.items():  # each named in what the command prints, with why
        head = f"{why} (budget): "
        assert any(s.startswith(head) and name in s[len(head) :].split(", ") for s in m.skipped)
    # the most needed come first: a plain row and the first fit gamma are measured
    assert "plain 1 layers batch 1" in measured and "gamma 1" in measured
    assert np.isfinite(fit.fit_error["error_median"])


def test_the_dropped_are_the_least_needed(monkeypatch):
    m, _, _, _ = _run(monkeypatch, 1e5)
    whole = m.budget.elapsed_s
    short, _, _, _ = _run(monkeypatch, 0.3 * whole)
    order = configuration_order(PLAN)
    name = {ef.config_name(k): k for k in order}
    kept = [name[x] for x in set(short.repeats) - set(short.dropped)]
    gone = [name[x] for x in short.dropped]
    assert kept and gone and set(order[: ef.ESSENTIAL]) <= set(kept)
    t = m.rows.set_index(["kind", "n_layers", "batch", "gamma", "schedule"])["rep_wall_s"]

    def rep_s(k):  # what one repetition costs, from the ample run
        if isinstance(k, tuple):
            return float(t.loc[("plain", k[0], k[1], 0, "")])
        g, sched = (0, "heuristic") if k == "heuristic" else (k, "constant")
        return float(t.loc[("spec", m.target.n_layers, 1, g, sched)])

    # a configuration is dropped before one less needed is kept only where the one kept costs less
    for d in gone:
        for k in kept:
            if order.index(k) > order.index(d):
                assert rep_s(k) < rep_s(d), (k, d)


def test_a_budget_too_short_for_the_fit_is_one_line_and_one_too_short_for_3_repetitions_says_so(monkeypatch):
    with pytest.raises(SpecroofError, match="too short for measure engine") as e:
        _run(monkeypatch, 0.05)
    assert "\n" not in str(e.value)
    # room for the fit (its starts' pricings of the 2 rows at 2 ms each, and the closing) and for compiling the
    # essential rows' models (3 s a layer: the 1-layer plain model, the 4-layer target, the 1-layer draft) and
    # timing them once (1.3 s of warm-up and first repetitions), not for a second repetition (0.65 s)
    fit_s = ef.FIT_STARTS_KEPT * ef.FIT_EVALS_PER_START * 2 * 2e-3 + ef.CLOSING_S
    m, fit, _, _ = _run(monkeypatch, fit_s + 3.0 * 6 + 1.3 + 0.3, compile_s=3.0)
    assert m.repeats == {"gamma 1": 1, "plain 1 layers batch 1": 1} and len(m.rows) == ef.ESSENTIAL
    assert "fewer than 3 repetitions (budget), kept for the fit: gamma 1 (1), plain 1 layers batch 1 (1)" in m.skipped
    assert all(x in m.dropped for x in ("gamma 3", "plain 4 layers batch 1"))
    # room for the speculative row's compile, not for the plain row's too: said once that is known, not overrun
    with pytest.raises(SpecroofError, match=r"plain 1 layers batch 1, which a fit needs, would take ~\d+ s more") as e:
        _run(monkeypatch, fit_s + 3.0 * 5 + 1.0, compile_s=3.0)
    assert "\n" not in str(e.value) and "give a --budget of at least" in str(e.value)


def test_the_fit_stops_at_its_deadline_with_the_best_point_it_reached(monkeypatch):
    m, fit, _, _ = _run(monkeypatch, 1e5)
    tried, of = fit.starts
    assert tried == of  # unlimited: every start
    clock = m.budget.clock
    spent = Budget(1.0, clock=clock)
    clock.advance(0.5)
    short = fit_engine(m, load_hardware("epyc-9654"), budget=spent)  # half a second left: one start, cut short
    assert short.starts[0] == 1 and np.isfinite(short.fit_error["error_median"])
    assert spent.elapsed_s <= 1.0 + 0.2  # the start in flight stopped at its deadline (one pricing past it at most)


def test_the_order_of_need_starts_with_what_a_fit_cannot_do_without():
    order = configuration_order(PLAN)
    assert order[: ef.ESSENTIAL] == [1, (1, 1)]
    assert order.index((4, 1)) < order.index(3) < order.index((4, 2)) < order.index(2) < order.index("heuristic")
    assert order[-1] == 4 and len(order) == len(set(order)) == 6 + 5


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_bad_budget_is_one_line_and_exit_2_before_any_work(value, tmp_path, capsys):
    from specroof.cli import main

    out = tmp_path / "engine.toml"
    code = main(["measure", "engine", "--framework", "hf", "--budget", value, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--budget" in err
    assert not out.exists()  # refused before anything was written


def test_the_command_says_where_its_seconds_went(monkeypatch, tmp_path, capsys):
    import json

    from specroof.cli import main

    fw = ClockedFramework(FakeClock())  # its calls take no real time: the command's seconds are its own
    monkeypatch.setattr(ef, "framework_module", lambda name: fw)
    out = tmp_path / "engine.toml"
    argv = ["measure", "engine", "--framework", "torch-eager", "--hardware", "epyc-9654", "--dtype", "fp32",
            "--depth", "1,2", "--batch", "1", "--gamma", "1,2,3", "--tokens", "16", "--repeats", "3",
            "--budget", "600", "--out", str(out), "--json"]  # fmt: skip
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["budget_s"] == 600 and 0 < payload["spent_s"] < 600
    steps = payload["steps_s"]
    assert list(steps)[:3] == ["imports", "hardware_profile", "probe"] and "fit" in steps and "writing" in steps
    assert payload["spent_s"] >= sum(steps.values()) - 1e-6  # the steps are inside what was spent, imports included
    assert payload["dropped"] == {} and set(payload["repeats"].values()) == {3} and out.exists()
