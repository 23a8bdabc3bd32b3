"""Measure a framework's plain and speculative decoding on this device and fit its engine profile.

The engine terms (docs/cost-model.md, section 6: kernels x per-launch host cost, per-step host
time, per-round host time, device floors) are what decide the gamma, and they belong to the
framework, its version and the CPU that launches: only the user's machine gets them right.
:func:`measure_engine` times, under one framework (:mod:`measure.frameworks`):

* plain decoding of models of several depths (same width) over a few batch sizes: the
  per-layer and the per-pass terms separate because the depth changes one and not the other;
* speculative decoding of the offline pair (the target and its one-layer draft, converted to
  the framework's own format) at several fixed gammas and under Hugging Face's heuristic
  schedule, each run paired with a plain run of the target timed beside it.

Times are whole calls of the framework's decoding function, as its users time it; a token's
time is ``(T(N) - median T(N/4)) / (3N/4)`` (prefill and call setup cancel). A speedup is the
median of the per-pair ratios with its confidence interval (``spread``). :func:`fit_engine` fits the
framework's host terms so that the one pricing route (``Pricing`` -> ``TimeModel`` ->
``pass_seconds`` / ``predict_speedup``) reproduces the plain steps and the speculative runs at
the fit gammas; the other gammas and the heuristic schedule are held out and predicted with
the fitted engine, speedup against speedup. What the budget leaves adds repetitions to the
speculative rows whose interval is widest against what they must resolve, and the terms are
fitted again to the fit rows; a held-out row whose interval is still wider than the error it
would report is marked ``noisy`` and left out of the error summary, which counts it
(``measure.specval.mark_noise``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib
import math
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from measure.budget import Budget, WorkBar, apportion
from measure.device import describe, match_profile
from measure.models import Transformer
from measure.specval import NOISE_FLOOR, error_summary, machine_load, mark_noise
from measure.timing import cpu_threads
from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine, engine_data, load_engine
from roofline.costing.hardware import Hardware, load_hardware
from roofline.costing.passtime import pass_seconds
from roofline.costing.pricing import Pricing
from roofline.passes.model import ModelSpec
from roofline.speculation.drafters import DraftModel
from roofline.speculation.speculative import predict_speedup

#: framework name -> module under measure.frameworks, and the shipped engine profile whose kernel counts it uses
FRAMEWORKS = {
    "hf": ("hf", "hf"),
    "torch-eager": ("torch_eager", "torch-eager"),
    "torch-compile": ("torch_compile", None),
}
#: serving engines: detected, never run here (their offline engines need a GPU build)
SERVING = ("vllm", "sglang")

#: the terms fitted per framework (engine field, TOML key, starting value in seconds or as a share, upper bound)
_TERMS: dict[str, list[tuple[str, str, float, float]]] = {
    "eager": [
        ("host_launch_s", "host launch_us", 10e-6, 2e-3),
        ("host_step_s", "host step_us", 1e-3, 0.5),
        ("host_step_per_seq_s", "host step_per_seq_us", 1e-4, 0.1),
        ("round_s", "host round_us", 1e-3, 1.0),
        ("bandwidth_fraction", "device bandwidth_fraction", 1.0, 1.0),
    ],
    "graph": [
        ("device_layer_s", "device layer_us", 20e-6, 0.05),
        ("host_step_s", "host step_us", 1e-3, 0.5),
        ("host_step_per_seq_s", "host step_per_seq_us", 1e-4, 0.1),
        ("round_s", "host round_us", 1e-3, 1.0),
        ("bandwidth_fraction", "device bandwidth_fraction", 1.0, 1.0),
    ],
}
#: what each fitted device term is, for the profile's [device] source
_DEVICE_TERMS = {
    "bandwidth_fraction": "bandwidth_fraction, the share of the hardware profile's streaming rate the framework's "
    "kernels reach on this host (what prices a narrower model's passes below a layer of the target's width)",
    "device_layer_s": "layer_us, the floor of one compiled layer",
}
#: the streaming shares each fit starts from (one per decade: below the pass's balance point there is no gradient)
SHARE_STARTS = (1.0, 0.1, 0.01, 0.001)
#: why the streaming share is fitted on a CPU: one thread issues the kernels and runs them, on tensors that stream
#: far below the copy rate the hardware profile measured with every core, so a kernel's own time is a share of the
#: pass that grows with the model's width. The per-launch, per-layer and per-step terms do not see the width: fitted
#: to models of the target's width alone they priced the half-width draft's passes at the target's cost per layer,
#: and the heuristic schedule's long rounds (13-14 draft passes) came out slow in every run on this project's EPYC
#: (hf 6.1% and 7.6%, torch-compile 4.9%; with the share fitted 0.3%, 5.5% and 3.0%; the same runs, the same rows)
#: why the per-sequence step term is fitted on a CPU: there the thread that issues the kernels also runs
#: them, so a batch's extra arithmetic adds to the host's time instead of hiding under it


def framework_module(name: str) -> Any:
    """The :mod:`measure.frameworks` module of ``name``, importable here, or a one-line error."""
    if name in SERVING:
        raise SpecroofError(_serving_reason(name))
    if name not in FRAMEWORKS:
        raise SpecroofError(f"--framework must be one of {', '.join([*FRAMEWORKS, *SERVING])} (got {name!r})")
    mod = importlib.import_module(f"measure.frameworks.{FRAMEWORKS[name][0]}")
    why = mod.available()
    if why:
        raise SpecroofError(f"framework {name!r} is not usable here: {why}")
    return mod


def _serving_reason(name: str) -> str:
    try:
        importlib.import_module(name)
    except ImportError:
        return f"framework {name!r} is not installed here (its offline engine needs a CUDA build): skipped"
    return (
        f"framework {name!r} imports, but specroof does not drive its offline engine yet: time it with its own "
        "benchmark and give the figures to `specroof validate published`"
    )


@dataclass(frozen=True)
class EnginePlan:
    """What :func:`measure_engine` times: depths and batches of plain decoding, gammas of speculative decoding."""

    depths: tuple[int, ...] = (2, 4, 8)
    batches: tuple[int, ...] = (1, 2, 4)
    gammas: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
    #: gammas the fit sees; the others and the heuristic schedule are held out
    fit_gammas: tuple[int, ...] = (1, 3, 5)
    heuristic: bool = True
    new_tokens: int = 96
    prompt_len: int = 32
    #: most repetitions of every configuration (the budget may allow fewer)
    repeats: int = 12
    #: most repetitions added to one speculative row whose interval is too wide (:func:`_add_repetitions`)
    remeasure: int = 16
    #: share of the budget the repetitions of every configuration may take; the rest adds repetitions to the
    #: speculative rows whose interval is still too wide
    share: float = 0.7

    def __post_init__(self) -> None:
        for key in ("depths", "batches", "gammas"):
            v = getattr(self, key)
            if not v or any(int(x) < 1 for x in v):
                raise SpecroofError(f"{key} must be a non-empty list of integers >= 1 (got {list(v)})")
        if not set(self.fit_gammas) <= set(self.gammas):
            raise SpecroofError(f"fit gammas {list(self.fit_gammas)} must be among the gammas {list(self.gammas)}")
        if not 8 <= self.new_tokens <= 4096:
            raise SpecroofError(f"new_tokens must lie in [8, 4096] (got {self.new_tokens})")
        if not 2 <= self.prompt_len <= 1024:
            raise SpecroofError(f"prompt_len must lie in [2, 1024] (got {self.prompt_len})")
        if self.repeats < 1:
            raise SpecroofError(f"repeats must be >= 1 (got {self.repeats})")
        if self.remeasure < 0:
            raise SpecroofError(f"remeasure must be >= 0 (got {self.remeasure})")
        if not 0.0 < self.share <= 1.0:
            raise SpecroofError(f"share must lie in (0, 1] (got {self.share})")

    @property
    def short_tokens(self) -> int:
        """The short call's length: a quarter of the long one's.

        A token's time is the long call minus the short calls' median, over the tokens between
        them: the short calls' median is pooled over every repetition, so each repetition's
        noise is the long call's alone over three quarters of its tokens (a half-length short
        call, differenced per repetition, carried both calls' noise over half the tokens: about
        twice the error for 1.5x the work, measured by the bracket spreads of 10-33%).
        """
        return max(self.new_tokens // 4, 2)


@dataclass
class EngineMeasurement:
    """What was timed: one row per plain (depth, batch) and per speculative (gamma) configuration."""

    framework: str
    framework_version: str
    rows: pd.DataFrame
    target: ModelSpec
    draft: ModelSpec
    device: dict[str, Any]
    load: dict[str, Any]
    threads: int | None
    dtype: str
    skipped: list[str] = field(default_factory=list)
    #: the shape of the plain-decoding models (their depth is each row's ``n_layers``)
    shape: ModelSpec | None = None
    #: times one speculative schedule once more beside its baseline and returns the whole table again
    remeasure: Callable[[Any], pd.DataFrame] | None = field(default=None, repr=False)
    #: why ``dtype`` (the device's fastest, or asked for)
    dtype_reason: str = ""
    #: most repetitions one held-out row may get added (``EnginePlan.remeasure``)
    max_extra: int = 16
    #: the configurations the budget dropped, by name, and why (also in ``skipped``)
    dropped: dict[str, str] = field(default_factory=dict)
    #: seconds of the run's steps, as the budget's clock counted them ("before": spent before it began)
    steps_s: dict[str, float] = field(default_factory=dict)
    #: the budget the run was measured within (the fit goes on within it)
    budget: Budget | None = field(default=None, repr=False)
    #: seconds the run kept at the budget's end for the fit and writing
    fit_reserve_s: float = 0.0
    #: repetitions each configuration timed got, by name (dropped ones included)
    repeats: dict[str, int] = field(default_factory=dict)


def _depth_spec(base: ModelSpec, layers: int) -> ModelSpec:
    return dataclasses.replace(base, name=f"{base.name}-{layers}l", n_layers=layers)


def cpu_clock(device: torch.device, threads: int | None) -> Callable[[], float]:
    """The clock a run is timed with: this thread's CPU time on a one-thread CPU run, else wall-clock.

    With one thread every kernel runs on the calling thread, so its CPU time is what the work
    cost, without the seconds another process held the core: on a shared 2-core machine at load
    average 4, wall-clock steps of the same model varied 3x between repetitions. With more
    threads, or on a GPU, only wall-clock (around a synchronisation) is the time. CPU time is
    not the quiet machine's either: a neighbour busy on the other core slowed the same calls'
    CPU time by 20-40% over seconds (caches, and vCPUs that may share a physical core), which is
    why a speedup is taken per adjacent pair of calls (:func:`median_interval`).
    """
    return time.thread_time if device.type == "cpu" and threads == 1 else time.perf_counter


def fastest_dtype(device: torch.device) -> tuple[str, str]:
    """The dtype this device runs matrix products fastest in, and why (as ``measure spec`` picks it).

    On a CPU without bf16 units bf16 is emulated (about 10 GFLOP/s against fp32's 18 on one
    thread of this project's EPYC, measured by :func:`measure.choose.matmul_rate`): the engine
    terms are host terms, and a bf16 model would add the emulation to every pass.
    """
    from measure.choose import choose_dtype, cpu_bf16_units, matmul_rates

    return choose_dtype(matmul_rates(device), device.type, cpu_bf16_units(device))


#: two-sided confidence of the interval a measured figure carries
LEVEL = 0.9


def median_interval(x: Sequence[float] | np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The median of positive ``x`` and its interval's relative half-width (``inf`` below 2 values).

    On the log scale (a ratio's noise is multiplicative): the median's standard error from the
    median absolute deviation (1.4826 MAD estimates a normal sigma; the median's standard error
    is 1.2533 sigma / sqrt(k)), widened by Student's t for k - 1 degrees of freedom. Robust to
    one interrupted repetition, where a mean and its standard deviation are not.
    """
    from scipy.stats import t as student_t

    v = np.log(np.maximum(np.asarray(x, dtype=float), 1e-12))
    k = len(v)
    if k == 0:
        return float("nan"), float("inf")
    med = float(np.median(v))
    if k < 2:
        return float(np.exp(med)), float("inf")
    se = 1.2533 * 1.4826 * float(np.median(np.abs(v - med))) / np.sqrt(k)
    half = float(student_t.ppf(0.5 + level / 2, k - 1)) * se
    return float(np.exp(med)), float(np.expm1(half))


def _per_token(long: Sequence[float], short: Sequence[float], tokens: int) -> np.ndarray:
    """Seconds per token of each long call: minus the short calls' median, over the ``tokens`` between them.

    The difference cancels prefill and call setup; the short calls' median is pooled over every
    repetition of the configuration, so its noise shrinks with them and each repetition keeps
    only its long call's.
    """
    return np.maximum(np.asarray(long, dtype=float) - float(np.median(short)), 1e-9) / tokens


#: fewest repetitions that keep a configuration in the table: with fewer, its median and interval say little about
#: the spread a repetition has here, so a configuration the budget cannot repeat that often is dropped and named
MIN_REPEATS = 3
#: evaluations of the residuals one start of the fit takes: 54-127 (87 on average, the numerical Jacobian's
#: included) in the 8 starts of a default-plan fit on this project's EPYC, each within 0.1% of its final cost after
#: 30-69; a start that needs more is stopped at its deadline with the best point it reached
FIT_EVALS_PER_START = 120
#: starts of the fit the measurement keeps time for: one for the fit, one for the refit after the re-measurements
#: (a fit stops at its deadline with the best point it evaluated; more starts are tried while time is left)
FIT_STARTS_KEPT = 2
#: configurations taken whatever the budget (configuration_order's first: a plain row and a fit gamma)
ESSENTIAL = 2
#: seconds kept at the budget's end for writing the profile, its table and the text, and for the interpreter's exit
#: (0.8 s with the models alive and the heap frozen, at load average 7.9 on 2 cores; 4.0 s unfrozen)
CLOSING_S = 2.0
#: what the plan adds to the measured seconds when it decides what fits: a repetition's time moves by tens of
#: percent on a shared machine, and a configuration planned too tightly is dropped after repetitions it cannot use
PLAN_MARGIN = 1.25

#: why a configuration was dropped: its warm-up and minimum did not fit after those before it; its minimum did not
#: fit after its first repetition; the machine slowed and its minimum stopped fitting part-way
NOT_WARMED = "not warmed up: its warm-up and {minimum} repetitions did not fit after the configurations before it"
TIMED_ONCE = "timed once: {minimum} repetitions did not fit beside the others'"
CUT_SHORT = "{done} of {minimum} repetitions fitted"

#: a configuration: plain decoding (depth, batch), or a speculative schedule (a gamma, or "heuristic")
Config = Any


def config_name(key: Config) -> str:
    """A configuration as the command's output names it."""
    if isinstance(key, tuple):
        return f"plain {key[0]} layers batch {key[1]}"
    return "the heuristic schedule" if key == "heuristic" else f"gamma {key}"


def configuration_order(plan: EnginePlan) -> list[Config]:
    """Every configuration of ``plan``, most needed first: the order a short budget keeps them in.

    First what the fit cannot do without, the first ``ESSENTIAL`` always: the first fit gamma and
    plain decoding of the shallowest model (a speculative row and a plain one: the least a fit
    needs; the speculative one first, as it warms the most: what a framework does once, such as
    starting its compiler, is then paid where it is not mistaken for a cost per layer); then the deepest model (the per-layer and the per-pass terms separate on depth), the
    other fit gammas (only they see the per-round term), the deepest model at the largest batch (the
    per-sequence term); then the first held-out gamma and the heuristic schedule (the validation the
    command reports), the other plain rows (each sharpens the fit), and last the other held-out gammas.
    """
    depths, batches = sorted(set(plan.depths)), sorted(set(plan.batches))
    lo, hi, b1, bn = depths[0], depths[-1], batches[0], batches[-1]
    fit = [g for g in plan.gammas if g in plan.fit_gammas]
    held: list[Config] = [g for g in plan.gammas if g not in plan.fit_gammas]
    held = held[:1] + (["heuristic"] if plan.heuristic else []) + held[1:]
    plain_rest = sorted(((L, b) for L in depths for b in batches), key=lambda k: (k[1], -k[0]))
    order: list[Config] = [*fit[:1], (lo, b1), (hi, b1), *fit[1:], (hi, bn), *held[:2], *plain_rest, *held[2:]]
    return list(dict.fromkeys(order))  # in order, once each


def planned_repeats(key: Config, rounds: int, minimum: int) -> int:
    """Repetitions of ``key`` over ``rounds`` rounds: every round, but a plain row every other one past ``minimum``.

    Nine plain rows fit five terms, while each speculative row is one of the speedups the fit and the
    held-out check rest on: their repetitions go to the speculative rows.
    """
    if not isinstance(key, tuple):
        return rounds
    return min(rounds, minimum) + max(0, rounds - minimum) // 2


class RunCosts:
    """Wall seconds of each configuration's warm-up and repetition, and estimates for those not yet seen.

    A configuration's model is its depth (plain rows), ``"target"`` (the target's plain calls
    every speculative row is timed beside) or ``"pair"`` (the speculative calls); its size in
    *units* is its model's layers (a speculative repetition counts the target's twice: plain calls
    beside speculative ones). The first warm-up on a model pays what a framework does once per model
    (torch.compile compiles each model's layers on their first call, in proportion to their number);
    a later one on the same model costs what that model's latest did. A repetition not yet timed
    costs its units at the dearest rate a timed one reached.
    """

    def __init__(self, target_layers: int) -> None:
        self.target_layers = target_layers
        self.warm: dict[Any, float] = {}  # configuration (or "target") -> seconds of its warm-up calls
        self.rep: dict[Any, float] = {}  # configuration -> seconds of its latest repetition
        self.first_rate = 0.0  # the dearest first warm-up on a model, per unit
        self.models: dict[Any, float] = {}  # model -> seconds of its latest warm-up

    def model(self, key: Any) -> Any:
        return key[0] if isinstance(key, tuple) else ("target" if key == "target" else "pair")

    def units(self, key: Any) -> float:
        return float(key[0]) if isinstance(key, tuple) else float(self.target_layers)

    def rep_units(self, key: Any) -> float:
        return self.units(key) * (1.0 if isinstance(key, tuple) else 2.0)

    def warmed(self, key: Any, seconds: float) -> None:
        if self.model(key) not in self.models:
            self.first_rate = max(self.first_rate, seconds / self.units(key))
        self.models[self.model(key)] = seconds
        self.warm[key] = seconds

    def timed(self, key: Any, seconds: float) -> None:
        self.rep[key] = seconds

    def warm_estimate(self, key: Any) -> float:
        """Seconds ``key``'s warm-up should take: 0 once done, the first on a new model at the dearest rate seen."""
        if key in self.warm:
            return 0.0
        if self.model(key) in self.models:
            return self.models[self.model(key)]
        return self.units(key) * self.first_rate

    def rep_estimate(self, key: Any) -> float:
        """Seconds one repetition of ``key`` should take: its latest, else its units at the dearest rate timed."""
        if key in self.rep:
            return self.rep[key]
        rates = [s / self.rep_units(k) for k, s in self.rep.items()]
        return self.rep_units(key) * (max(rates) if rates else self.first_rate)

    def cost(self, keys: Sequence[Any], rounds: int, minimum: int, done: dict[Any, int]) -> float:
        """Seconds still to spend on ``keys`` over ``rounds`` rounds (:func:`planned_repeats`), warm-ups included."""
        total = 0.0
        for k in keys:
            total += self.warm_estimate(k)
            total += max(0, planned_repeats(k, rounds, minimum) - done.get(k, 0)) * self.rep_estimate(k)
        if any(not isinstance(k, tuple) for k in keys) and "target" not in self.warm:
            total += self.warm_estimate("target")
        return total


@dataclass(frozen=True)
class FitReserve:
    """Seconds kept at the budget's end for fitting the configurations kept, and for closing.

    The fit prices its rows about ``FIT_EVALS_PER_START`` times a start; pricing one plain and
    one speculative row took ``plain_row_s`` and ``spec_row_s`` here (on this machine, at its load
    then); ``FIT_STARTS_KEPT`` starts are kept, and ``CLOSING_S``.
    """

    plain_row_s: float
    spec_row_s: float

    def seconds(self, keys: Sequence[Config], fit_gammas: Sequence[int]) -> float:
        plain = sum(isinstance(k, tuple) for k in keys)
        spec = sum(not isinstance(k, tuple) and k in fit_gammas for k in keys)
        return FIT_STARTS_KEPT * FIT_EVALS_PER_START * (plain * self.plain_row_s + spec * self.spec_row_s) + CLOSING_S


def fit_reserve(
    plan: EnginePlan,
    target: ModelSpec,
    draft: ModelSpec,
    shape: ModelSpec,
    dtype: str,
    hardware: Hardware | None = None,
    framework: str = "hf",
    clock: Callable[[], float] = time.perf_counter,
) -> FitReserve:
    """What pricing one plain and one speculative fit row costs here, timed now on every row of ``plan``.

    ``hardware`` is what the rows are priced on (the time hardly depends on it; default: a shipped CPU profile).
    """
    if hardware is None:  # a shipped profile that prices this dtype: the timing is what matters here
        hw = next(h for h in map(load_hardware, ("epyc-9654", "h100-sxm-80gb")) if dtype in h.peak_flop_per_s)
    else:
        hw = hardware
    ctx = plan.prompt_len + (plan.short_tokens + plan.new_tokens) // 2
    plain = [{"kind": "plain", "n_layers": L, "batch": b, "gamma": 0, "context": ctx}
             for L in plan.depths for b in plan.batches]  # fmt: skip
    spec = [
        {"kind": "spec", "n_layers": target.n_layers, "batch": 1, "gamma": g, "context": ctx,
         "mean_accepted": g + 1.0, "draft_passes_per_round": float(g)}
        for g in plan.fit_gammas
    ]  # fmt: skip
    engine = base_engine(framework)
    per_row = []
    for rows in (plain, spec):
        best = math.inf
        for _ in range(2):  # the quicker of two: a neighbour's burst is not the fit's cost
            t0 = clock()  # a fresh Pricing, as each evaluation of the fit builds one (its first use prices dearer)
            _predict(pd.DataFrame(rows), _pricing(hw, engine, dtype), target, draft, shape)
            best = min(best, clock() - t0)
        per_row.append(best / max(len(rows), 1))
    return FitReserve(per_row[0], per_row[1])


def measure_engine(
    framework: str,
    plan: EnginePlan = EnginePlan(),
    *,
    device: str | torch.device = "cpu",
    dtype: str | None = None,
    threads: int | None = 1,
    budget: Budget | float | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    model: ModelSpec | None = None,
    hardware: Hardware | None = None,
) -> EngineMeasurement:
    """Time plain and speculative decoding under ``framework`` (see the module docstring).

    ``model`` is the shape of the plain-decoding models (random weights, its depth replaced by
    each of ``plan.depths``; default: the offline pair's target). ``dtype`` None: the device's
    fastest (:func:`fastest_dtype`). Each configuration is decoded to ``new_tokens`` and to
    :attr:`EnginePlan.short_tokens`, as whole calls of the framework's decoding function
    (:func:`_per_token`). A speculative run's speedup is the median over repetitions of the ratio
    of the target's plain call timed beside it (plain/spec/spec/plain, the order mirrored every
    other repetition so a drift cancels) to it, with :func:`median_interval`'s interval as its
    ``spread``. Tokens and draft passes per round are counted on untimed runs, between the two
    lengths as the times are. ``threads`` pins torch's CPU threads (default 1: the host cost being
    measured is one thread's, and on a shared 2-core machine 2 threads measured 90 ms per step
    where 1 measured 8); :func:`cpu_clock` picks the clock.

    ``budget`` (seconds, or a :class:`Budget` that may count from the process's start) bounds the
    whole run, the fit after it included: :func:`fit_reserve` keeps the fit's time at its end
    (priced on ``hardware``). The configurations are taken in :func:`configuration_order`; each is
    warmed up (untimed) and timed once right after, so what it costs is known, but only while its
    warm-up and ``MIN_REPEATS`` repetitions fit with those kept before it. Then :func:`apportion`
    keeps those the rest repeats ``MIN_REPEATS`` times, and rounds run until each kept one has them,
    re-planned before each round from the measured seconds. Further rounds, up to ``plan.repeats``,
    take at most ``plan.share`` of what was left after the warm-up (the rest re-measures the rows
    that need it, :func:`fit_engine`). A configuration without ``MIN_REPEATS`` repetitions is left
    out of the table and named, with why, in ``skipped`` (and ``dropped``); ``steps_s`` says where the
    seconds went.

    The interpreter's heap is frozen (:func:`gc.freeze`) for the timed calls, as SGLang advises
    after a few warm-up requests (``freeze_gc`` in sglang python/sglang/srt/utils.py): otherwise a
    full collection of every object the process holds (0.24 s with transformers imported,
    measured here) lands inside one call or another, by chance.
    """
    import gc

    from measure.pair import held_out_prompts, load_pair

    bud = budget if isinstance(budget, Budget) else Budget(budget)
    wall = bud.clock
    steps: dict[str, float] = {"before": bud.elapsed_s}
    mark = [wall()]

    def step_done(name: str) -> None:
        now = wall()
        steps[name] = steps.get(name, 0.0) + now - mark[0]
        mark[0] = now

    fw = framework_module(framework)
    dev = torch.device(device)
    say = log or (lambda _m: None)
    start = machine_load()
    n, h, p = plan.new_tokens, plan.short_tokens, plan.prompt_len
    minimum = min(MIN_REPEATS, plan.repeats)
    clock = cpu_clock(dev, threads)
    with cpu_threads(threads if dev.type == "cpu" else None), torch.no_grad():
        if dtype is None:
            dtype, why_dtype = fastest_dtype(dev)
        else:
            why_dtype = f"{dtype}: asked for"
        say(f"dtype {why_dtype}")
        step_done("probe")
        target_h, draft_h, _ = load_pair(device=dev, dtype=dtype)
        target, draft = fw.build(target_h, dtype, dev), fw.build(draft_h, dtype, dev)
        shape = model or target_h.spec
        fit_cost = fit_reserve(plan, target_h.spec, draft_h.spec, shape, dtype, hardware, framework, wall)

        def reserve(keys: Sequence[Config]) -> float:
            return fit_cost.seconds(keys, plan.fit_gammas)

        depth_models: dict[int, Any] = {}

        def depth_model(L: int) -> Any:  # built when first needed: a dropped depth costs nothing
            if L not in depth_models:
                depth_models[L] = fw.build(
                    Transformer(_depth_spec(shape, L), dtype=dtype, device=dev).eval(), dtype, dev
                )
            return depth_models[L]

        prompts = held_out_prompts(max(*plan.batches, 1), p, seed=1)
        one = prompts[:1]
        step_done("load")
        order = configuration_order(plan)
        if bud.limited:
            say(f"budget {bud.seconds:.0f} s: {bud.elapsed_s:.1f} s spent on imports, the probe and loading; "
                f"the fit of every configuration would take ~{reserve(order):.1f} s of it")  # fmt: skip

        costs = RunCosts(target_h.spec.n_layers)
        done: dict[Any, int] = dict.fromkeys(order, 0)
        dropped: dict[Any, str] = {}
        warmed: list[Config] = []
        plain: list[list[int]] = []
        counts: dict[Any, tuple[Any, Any]] = {}
        # per configuration: the (short, long) calls' seconds; per schedule also the plain calls timed beside it
        calls: dict[Any, tuple[list[float], list[float]]] = {}
        beside: dict[Any, list[float]] = {}
        probe_short: list[float] = []  # the target's plain short calls, pooled over every schedule
        rep_wall: dict[Any, float] = {}

        def timed(model_: Any, prompts_: list[list[int]], length: int, **kw: Any) -> float:
            return float(fw.generate(model_, prompts_, length, clock=clock, **kw).seconds)

        def spec_once(g: Any, mirrored: bool) -> None:
            w0 = wall()
            kw = {"assistant": draft, "gamma": g}
            short, long = calls.setdefault(g, ([], []))
            if not mirrored:
                probe_short.append(timed(target, one, h))
                beside.setdefault(g, []).append(timed(target, one, n))
                long.append(timed(target, one, n, **kw))
                short.append(timed(target, one, h, **kw))
            else:
                short.append(timed(target, one, h, **kw))
                long.append(timed(target, one, n, **kw))
                beside.setdefault(g, []).append(timed(target, one, n))
                probe_short.append(timed(target, one, h))
            rep_wall[g] = wall() - w0

        def plain_once(key: tuple[int, int], mirrored: bool) -> None:
            w0 = wall()
            L, b = key
            short, long = calls.setdefault(key, ([], []))
            m_ = depth_models[L]
            if mirrored:
                long.append(timed(m_, prompts[:b], n))
                short.append(timed(m_, prompts[:b], h))
            else:
                short.append(timed(m_, prompts[:b], h))
                long.append(timed(m_, prompts[:b], n))
            rep_wall[key] = wall() - w0

        def once(key: Config) -> None:
            """One repetition of ``key``, the heap frozen; the order mirrored every other one (drift cancels)."""
            gc.freeze()
            try:
                if isinstance(key, tuple):
                    plain_once(key, mirrored=done[key] % 2 == 1)
                else:
                    spec_once(key, mirrored=done[key] % 2 == 1)
            finally:
                gc.unfreeze()
            done[key] += 1
            costs.timed(key, rep_wall[key])

        def warm_up(key: Config) -> None:
            """Both timed lengths once, untimed; a speculative schedule's rounds and draft passes counted."""
            nonlocal plain
            if isinstance(key, tuple):
                L, b = key
                m_ = depth_model(L)
                w0 = wall()
                fw.generate(m_, prompts[:b], h)
                fw.generate(m_, prompts[:b], n)
                costs.warmed(key, wall() - w0)
                return
            if "target" not in costs.warm:
                w0 = wall()
                fw.generate(target, one, h)
                plain = fw.generate(target, one, n).tokens
                costs.warmed("target", wall() - w0)
            w0 = wall()
            pair = (fw.generate(target, one, h, assistant=draft, gamma=key, count=True),
                    fw.generate(target, one, n, assistant=draft, gamma=key, count=True))  # fmt: skip
            costs.warmed(key, wall() - w0)
            if pair[1].tokens != plain or pair[0].tokens[0] != plain[0][:h]:
                raise SpecroofError(
                    f"{framework}: greedy speculative decoding at {config_name(key)} emitted other tokens than plain "
                    "decoding"
                )
            counts[key] = pair

        # warm-up (untimed), then one timed repetition, configuration by configuration in the order of need.
        # Both lengths, because the cache is sized to the call's length and a compiled framework sees a new cache
        # shape as a new graph: warmed at 4 tokens only, torch.compile recompiled inside the first timed calls and
        # the short call outlasted the long one. A configuration is taken only while its warm-up and its minimum
        # repetitions fit, with those taken before it: a compiled framework's warm-up (tens of seconds a model) is
        # the budget's, not added to it; and its first repetition, right after, says what the others will cost
        if bud.remaining_s <= reserve(order[:ESSENTIAL]):
            raise SpecroofError(
                f"a budget of {bud.seconds:g} s is too short for measure engine --framework {framework} here: "
                f"{bud.elapsed_s:.0f} s went to imports, the probe and loading, and the fit needs "
                f"~{reserve(order[:ESSENTIAL]):.0f} s; give a larger --budget"
            )
        say(f"warming up {framework} {fw.version()} ...")
        wbar = WorkBar(sum(costs.units(k) for k in order), f"warm-up {framework}", progress, budget=bud,
                       tail_s=math.inf if bud.limited else 0.0)  # fmt: skip
        for i, key in enumerate(order):
            if 0 < i < ESSENTIAL:  # a fit needs it: if even its warm-up and one repetition cannot fit, say so now
                need = costs.cost([key], 1, 1, done) + reserve([*warmed, key])
                if not bud.allows(need):
                    raise SpecroofError(
                        f"a budget of {bud.seconds:g} s is too short for measure engine --framework {framework} here: "
                        f"{bud.elapsed_s:.0f} s are spent (imports, loading, the first model's warm-up), and "
                        f"{config_name(key)}, which a fit needs, would take ~{need:.0f} s more with the fit; give a "
                        f"--budget of at least {bud.elapsed_s + need:.0f} s"
                    )
            if i >= ESSENTIAL:
                need = PLAN_MARGIN * costs.cost([*warmed, key], minimum, minimum, done) + reserve([*warmed, key])
                if not bud.allows(need):
                    dropped[key] = NOT_WARMED.format(minimum=minimum)
                    say(
                        f"{config_name(key)} dropped: with those before it, ~{need:.0f} s of {bud.remaining_s:.0f} s left"
                    )
                    wbar.update(costs.units(key))
                    continue
            warm_up(key)
            once(key)
            warmed.append(key)
            wbar.update(costs.units(key))
        wbar.close()
        step_done("warm-up")

        # what the budget repeats, decided now from the timed repetitions: each kept configuration MIN_REPEATS times
        available = bud.remaining_s
        share = apportion(
            warmed, lambda ks, r: PLAN_MARGIN * costs.cost(ks, r, minimum, done) + reserve(ks), available,
            min_repeats=minimum, max_repeats=plan.repeats, share=plan.share, essential=ESSENTIAL,
        )  # fmt: skip
        kept = list(share.kept)
        for key in share.dropped:
            dropped[key] = TIMED_ONCE.format(minimum=minimum)
        if share.dropped:
            say(f"{len(share.dropped)} timed once dropped: the others' {minimum} repetitions take ~{share.seconds:.0f} s "
                f"of {available:.0f} s left")  # fmt: skip
        # rounds past the minimum take at most plan.share of what the fit leaves; the rest re-measures (fit_engine)
        for_reps = available - reserve(kept)
        extra = bud.keeping(reserve(kept) + (1.0 - plan.share) * for_reps) if bud.limited else bud
        tail = (1.0 - plan.share) * for_reps + reserve(kept) if bud.limited else 0.0
        rbar = WorkBar(share.seconds, f"measure engine {framework}", progress, budget=bud, tail_s=tail)

        def still_needed(ks: Sequence[Config]) -> float:
            return sum(max(0, minimum - done[k]) * costs.rep_estimate(k) for k in ks)

        rng = np.random.default_rng(0)
        extra_round = 0
        gc.collect()
        while True:
            left = bud.remaining_s - reserve(kept)
            # re-planned each round from the measured seconds: while the others' minimum does not fit, drop the
            # least needed short of it; take one timed only once back when its minimum fits with the others'
            while still_needed(kept) > left:
                short = [k for k in kept[ESSENTIAL:] if done[k] < minimum]
                if not short:
                    break
                kept.remove(short[-1])
                dropped[short[-1]] = CUT_SHORT.format(done=done[short[-1]], minimum=minimum)
                left = bud.remaining_s - reserve(kept)
            for k in warmed:
                if (
                    k not in kept
                    and done[k] == 1
                    and PLAN_MARGIN * still_needed([*kept, k]) <= bud.remaining_s - reserve([*kept, k])
                ):
                    kept = [x for x in warmed if x in kept or x == k]
                    dropped.pop(k, None)
            todo = [k for k in kept if done[k] < minimum]
            if todo:
                if still_needed(todo) > left and sum(costs.rep_estimate(k) for k in todo) > left:
                    break  # the essential ones' minimum does not fit, nor one more round: what they have is said below
            else:
                # past the minimum: speculative rows every round, plain rows every other one (as planned_repeats)
                todo = [k for k in kept if done[k] < planned_repeats(k, plan.repeats, minimum)]
                spec_left = [k for k in todo if not isinstance(k, tuple)]
                if spec_left and extra_round % 2 == 0:
                    todo = spec_left
                extra_round += 1
                round_s = sum(costs.rep_estimate(k) for k in todo)
                if not todo or not extra.allows(round_s) or not bud.allows(round_s + reserve(kept)):
                    break
            rbar.set_total(
                rbar.done
                + sum(
                    max(0, planned_repeats(k, share.repeats, minimum) - done[k]) * costs.rep_estimate(k) for k in kept
                )
            )
            for j in rng.permutation(len(todo)):  # shuffled: drift cannot line up with gamma or depth
                k = todo[int(j)]
                once(k)
                rbar.update(costs.rep[k])
        rbar.close()
        step_done("repetitions")

        final = [k for k in warmed if done[k] >= minimum]
        for k in warmed:
            if done[k] < minimum and k not in dropped:
                dropped[k] = CUT_SHORT.format(done=done[k], minimum=minimum)
        # the essential configurations stay whatever they got (a fit needs a plain row and a speculative one), said so
        thin = [k for k in order[:ESSENTIAL] if 0 < done[k] < minimum]
        final = [k for k in warmed if done[k] >= minimum or k in thin]
        for k in thin:
            dropped.pop(k, None)
        by_why: dict[str, list[str]] = {}
        for k, why in dropped.items():
            by_why.setdefault(why, []).append(config_name(k))
        skipped = [f"{why} (budget): {', '.join(names)}" for why, names in by_why.items()]
        if thin:
            skipped.append(
                f"fewer than {minimum} repetitions (budget), kept for the fit: "
                + ", ".join(f"{config_name(k)} ({done[k]})" for k in thin)
            )
        short_of_plan = [k for k in final if done[k] < planned_repeats(k, plan.repeats, minimum)]
        if short_of_plan:
            reps = sorted({done[k] for k in final})
            span = f"{reps[0]}-{reps[-1]}" if len(reps) > 1 else f"{reps[0]}"
            skipped.append(
                f"repetitions: {span} per configuration of the {plan.repeats} planned "
                f"({planned_repeats((1, 1), plan.repeats, minimum)} for a plain row) (budget)"
            )
        measured = set(final)

        def rows() -> pd.DataFrame:
            mine = {k: v for k, v in calls.items() if k in measured}
            return _rows(plan, target_h.spec, shape, mine, beside, probe_short, rep_wall, counts, n, h, p)

        def remeasure(g: Any) -> pd.DataFrame:
            with cpu_threads(threads if dev.type == "cpu" else None), torch.no_grad():
                once(g)
            return rows()

        table = rows()
    load = machine_load(start["ticks"])
    load.pop("ticks", None)
    load["clock"] = "thread CPU time" if clock is time.thread_time else "wall-clock"
    step_done("table")
    return EngineMeasurement(
        framework, fw.version(), table, target_h.spec, draft_h.spec, describe(dev), load, threads, dtype, skipped,
        shape=shape, remeasure=remeasure, dtype_reason=why_dtype, max_extra=plan.remeasure,
        dropped={config_name(k): why for k, why in dropped.items()}, steps_s=steps, budget=bud,
        fit_reserve_s=reserve(final), repeats={config_name(k): done[k] for k in warmed},
    )  # fmt: skip


def _rows(
    plan: EnginePlan,
    target: ModelSpec,
    shape: ModelSpec,
    calls: dict[Any, tuple[list[float], list[float]]],
    beside: dict[Any, list[float]],
    probe_short: list[float],
    rep_wall: dict[Any, float],
    counts: dict[Any, tuple[Any, Any]],
    n: int,
    h: int,
    p: int,
) -> pd.DataFrame:
    """The tidy table: one row per configuration, its seconds per token, and its interval (``spread``)."""
    ctx = int(p + 0.5 * (h + n))  # the mean context of the tokens between the two lengths
    out: list[dict[str, Any]] = []
    for key, (short, long) in calls.items():
        if not isinstance(key, tuple):
            continue
        L, b = key
        t_tok, spread = median_interval(_per_token(long, short, n - h))
        out.append(
            {"kind": "plain", "model": _depth_spec(shape, L).name, "n_layers": L, "batch": b, "gamma": 0,
             "schedule": "", "context": ctx, "t_step_s": t_tok, "spread": spread, "repeats": len(long),
             "rep_wall_s": rep_wall[key], "fit": True}
        )  # fmt: skip
    for g, (short, long) in calls.items():
        if isinstance(g, tuple):
            continue
        c_h, c_n = counts[g]
        # the rounds and draft passes between the two lengths, where the times are: the whole run's tokens per
        # round (n / rounds) counted the short call's rounds too: hf at gamma 4, 4.80 against the window's 5.14 (7%)
        rounds = max(int(c_n.rounds) - int(c_h.rounds), 1)
        drafts = max(int(c_n.draft_passes) - int(c_h.draft_passes), 0)
        t_spec = _per_token(long, short, n - h)
        t_plain = _per_token(beside[g], probe_short, n - h)
        speed, spread = median_interval(t_plain / t_spec)  # per pair: the plain call timed beside each run
        out.append(
            {"kind": "spec", "model": target.name, "n_layers": target.n_layers, "batch": 1,
             "gamma": 0 if g == "heuristic" else int(g), "schedule": "heuristic" if g == "heuristic" else "constant",
             "context": ctx, "t_step_s": float(np.median(t_spec)), "spread": spread, "repeats": len(long),
             "rep_wall_s": rep_wall[g], "rounds": rounds, "mean_accepted": (n - h) / rounds,
             "draft_passes_per_round": drafts / rounds, "t_base_s": float(np.median(t_plain)),
             "speedup_measured": speed, "fit": g != "heuristic" and int(g) in plan.fit_gammas}
        )  # fmt: skip
    return pd.DataFrame(out)


# -- the fit ------------------------------------------------------------------------------------


#: below this budget (seconds) a CPU without a built-in profile is microbenchmarked with the quick set (a capped
#: matmul search, fewer copies): on this project's 2-core EPYC at load average 8.3 the full set took 8.5-12.3 s
#: and the quick one 2.0 s; at load average 1.3 they found the same matmul rates within 1% (fp32 214 vs 215 GFLOP/s,
#: bf16 430 vs 428). Under that load both sets' figures are the load's (fp32 22-31 GFLOP/s), not the CPU's
QUICK_PROFILE_BELOW_S = 300.0


def base_hardware(
    hardware: str | Path | Hardware | None,
    device: str | torch.device,
    dtype: str | None,
    out: Path | None = None,
    *,
    quick: bool = False,
) -> Hardware:
    """The datasheet profile the engine's passes are priced on (the engine's terms come on top of it).

    ``hardware`` given: that profile (a measured one is refused: its figures already include
    an engine). Else the built-in profile matching this device; a CPU without one gets a
    profile of its achieved streaming rate and matmul rate (microbenchmarked now), written to
    ``out`` so the engine can be priced on it later; ``quick``: the quick set (``QUICK_PROFILE_BELOW_S``).
    """
    if hardware is not None:
        hw = load_hardware(hardware)
        if hw.measured is not None:
            raise SpecroofError(
                f"--hardware {hw.id!r} is a measured profile (its figures include the harness's engine): give the "
                "datasheet profile of this device, or leave --hardware out"
            )
        return hw
    dev = torch.device(device)
    info = describe(dev)
    match = match_profile(info)
    if match:
        return load_hardware(match)
    if dev.type != "cpu":
        raise SpecroofError(f"no built-in profile matches {info.get('name')!r}: give --hardware PROFILE")
    from measure.microbench import bandwidth, matmul_flops
    from roofline.costing.hardware import write_profile

    bw = bandwidth(dev, nbytes=256 * 2**20, repeats=3 if quick else 5)["copy"].value
    # the dtype measured in, and the two a CPU prices in, so the profile serves the commands' defaults too
    cap = 0.25 if quick else 1.0
    peaks = {d: matmul_flops(d, dev, cap_s=cap).value for d in dict.fromkeys((dtype or "fp32", "fp32", "bf16"))}
    hw = Hardware(
        id="this-cpu",
        name=str(info.get("name", "this CPU")),
        vendor=str(info.get("vendor", "")),
        kind="cpu",
        bandwidth_bytes_per_s=bw,
        peak_flop_per_s=peaks,
        sources={
            "memory": "no datasheet for this CPU: the copy bandwidth specroof measure engine measured on it",
            "compute": "no datasheet for this CPU: the best matmul rate per dtype specroof measure engine measured",
        },
    )
    if out is None:
        return hw
    write_profile(hw, out)
    return load_hardware(str(out))


def base_engine(framework: str) -> Engine:
    """The engine whose structure the fit keeps: the shipped profile's kernel counts (eager), none (compiled)."""
    shipped = FRAMEWORKS[framework][1]
    if shipped is None:  # compiled layers: no per-kernel launches to count, a device floor per layer instead
        return Engine(name=framework, description="torch.compile'd layers (inductor)")
    e = load_engine(shipped)
    assert e is not None
    return e


def _pricing(hw: Hardware, engine: Engine, dtype: str) -> Pricing:
    pr = Pricing(hardware=hw, engine=engine, dtype=dtype)
    tm = pr.time_model
    if tm.engine is None:
        # the time model prices launches and per-step host time only when it holds the engine; a
        # Hardware.time_model that does not hand it over yet is completed here (the same TimeModel)
        pr.__dict__["time_model"] = dataclasses.replace(tm, engine=engine)
    return pr


def _predict(
    rows: pd.DataFrame, pr: Pricing, target: ModelSpec, draft: ModelSpec, shape: ModelSpec | None = None
) -> pd.DataFrame:
    """Per row: the predicted step (plain) or seconds per token and speedup (spec), through the one pricing route."""
    t_step = np.full(len(rows), np.nan)
    speed = np.full(len(rows), np.nan)
    r: Any
    for i, r in enumerate(rows.itertuples()):
        if r.kind == "plain":
            spec = _depth_spec(shape or target, int(r.n_layers))
            t_step[i] = float(pass_seconds(spec, pr, int(r.batch), 1, int(r.context)))
        else:
            t_step[i], speed[i] = _spec_prediction(r, pr, target, draft)
    return rows.assign(t_predicted_s=t_step, speedup_predicted=speed)


def _spec_prediction(r: Any, pr: Pricing, target: ModelSpec, draft: ModelSpec) -> tuple[float, float]:
    """(seconds per token, speedup) of a speculative row: its measured tokens per round at its draft length.

    Every row is priced at the draft length it used between the two timed lengths (the measured
    draft passes per round, between the two neighbouring gammas). For the heuristic schedule
    that is its point: re-simulating it from an i.i.d. acceptance overshoots on text whose
    acceptance comes in runs, where the schedule keeps long drafts only while they are accepted.
    For a fixed gamma it is the window's bookkeeping: the short call's last round is cut short,
    so the rounds the long call adds drafted a little more than gamma each (hf at gamma 4:
    4.14 draft passes and 5.14 tokens per added round, which no round of gamma 4 can emit).
    """
    E = float(r.mean_accepted)
    drafted = float(getattr(r, "draft_passes_per_round", float("nan")))
    if not np.isfinite(drafted):
        drafted = float(r.gamma)
    g = max(drafted, E - 1.0, 1.0)
    lo = int(np.floor(g))
    gs, ws = ([lo], [1.0]) if g == lo else ([lo, lo + 1], [lo + 1 - g, g - lo])
    t_round = base = 0.0
    for g_, w in zip(gs, ws, strict=True):
        ps = predict_speedup(
            hardware=pr, target=target, drafter=DraftModel(draft), mean_accepted=min(E, g_ + 1.0), gamma=g_,
            context=int(r.context),
        )  # fmt: skip
        t_round += w * ps.t_round_s
        base = ps.t_base_s
    return t_round / E, E * base / t_round


@dataclass(frozen=True)
class EngineFit:
    """The fitted engine, the table (measured vs predicted per row) and the error summaries."""

    engine: Engine
    hardware: Hardware
    table: pd.DataFrame
    params: dict[str, float]
    fit_error: dict[str, Any]
    validation: dict[str, Any]
    #: starting points the fits tried, of how many (a short budget stops trying them)
    starts: tuple[int, int] = (0, 0)
    #: seconds the fit took: the first fit, the re-measurements, the refit
    steps_s: dict[str, float] = field(default_factory=dict)


class _OutOfTime(Exception):
    """The fit's deadline passed inside a start: the best point it evaluated stands."""


def fit_engine(m: EngineMeasurement, hardware: Hardware, *, budget: Budget | None = None) -> EngineFit:
    """Fit the framework's host terms to the plain steps and the fit-gamma speculative speedups (log error).

    The kernel counts per operator are the framework's shipped profile's (counted from its
    code); what is fitted is what one kernel, one step and one round cost on this host. What is
    left of ``budget`` then adds repetitions to the speculative rows whose interval is widest
    against what they must resolve (:func:`_add_repetitions`), the terms are fitted again to the
    fit rows (the held-out rows never enter a fit), and the held-out rows are predicted and
    compared speedup against speedup; one whose interval is still wider than its error is
    ``noisy`` and left out of the summary, which counts it.

    The fit is inside ``budget`` too: it takes at most half of what is left less ``CLOSING_S`` (the
    other half re-measures and refits); its first start always runs, a further one only while one
    more start (as long as the longest so far) still fits, and a start still running at its deadline
    stops there with the best point it evaluated. The re-measurements keep the refit's time (one
    start). The refit starts from the fit's terms first and takes what is left less ``CLOSING_S``.
    """
    bud = budget if budget is not None else Budget(None)
    wall = bud.clock
    t0 = wall()
    # the first fit takes at most half of what is left after the closing: the rest re-measures the rows that need it
    # and refits
    first_bud = bud
    if bud.limited and m.remeasure is not None:
        first_bud = bud.keeping(CLOSING_S + 0.5 * max(0.0, bud.remaining_s - CLOSING_S))
    fitted, params, best, tried, longest = _fit_terms(
        m, hardware, first_bud, keep_s=0.0 if first_bud is not bud else CLOSING_S
    )
    steps = {"fit": wall() - t0}
    starts = [tried, _n_starts(m)]
    if m.remeasure is not None:
        t1 = wall()
        more = _add_repetitions(
            m, _table(m, hardware, fitted), hardware, fitted, bud.keeping(longest + CLOSING_S) if bud.limited else None
        )
        steps["remeasure"] = wall() - t1
        if more:  # the fit rows gained repetitions: fit them again, from the fit's terms first
            t2 = wall()
            fitted, params, _, again, _ = _fit_terms(m, hardware, bud, keep_s=CLOSING_S, first=best)
            steps["refit"] = wall() - t2
            starts = [starts[0] + again, starts[1] + _n_starts(m) + 1]
    table = _marked(_table(m, hardware, fitted))
    held = table[(table["kind"] == "spec") & ~table["fit"]]
    return EngineFit(
        fitted,
        hardware,
        table,
        params,
        error_summary(table[table["fit"]].assign(noisy=False)),
        error_summary(held, error="speedup_error"),
        starts=(starts[0], starts[1]),
        steps_s=steps,
    )


def _n_starts(m: EngineMeasurement) -> int:
    """How many starting points a fit of ``m``'s framework tries when time allows."""
    kind = "graph" if m.framework == "torch-compile" else "eager"
    return 2 * (len(SHARE_STARTS) if any(t[0] == "bandwidth_fraction" for t in _TERMS[kind]) else 1)


def _fit_terms(
    m: EngineMeasurement,
    hardware: Hardware,
    budget: Budget | None = None,
    *,
    keep_s: float = 0.0,
    first: np.ndarray | None = None,
) -> tuple[Engine, dict[str, float], np.ndarray, int, float]:
    """The fitted engine, its terms (microseconds, by TOML key), the best point, the starts tried, the longest start's seconds.

    From the fit rows of ``m.rows`` only. Within ``budget`` less ``keep_s``: the first start always
    runs, the others while the longest start so far still fits; a start past the deadline stops with
    the best point it evaluated.
    ``first`` is tried before the usual starting points.
    """
    from scipy.optimize import least_squares

    kind = "graph" if m.framework == "torch-compile" else "eager"
    base = base_engine(m.framework)
    # kernel counts stay the shipped profile's; everything the host adds is refitted from zero here
    base = dataclasses.replace(
        base, host_pass_s=0.0, host_layer_s=0.0, device_pass_s=0.0, device_layer_s=0.0, host_step_s=0.0,
        round_s=0.0, step_overlap=False,
    )  # fmt: skip
    terms = _TERMS[kind]
    if kind == "eager" and not base.launches:
        raise SpecroofError(f"the {base.name!r} profile counts no kernels: cannot fit a per-launch cost")
    fit_rows = m.rows[m.rows["fit"]].reset_index(drop=True)
    bud = budget if budget is not None else Budget(None)
    wall = bud.clock

    def engine_of(x: np.ndarray) -> Engine:
        changes: dict[str, Any] = {t[0]: float(v) for t, v in zip(terms, x, strict=True)}
        return dataclasses.replace(base, **changes)

    is_spec = (fit_rows["kind"] == "spec").to_numpy()
    # the speculative rows count as much as the plain ones together (3 against 9 by default): they are what
    # the held-out rows are judged on, and only they see the per-round term
    weight = np.where(is_spec, np.sqrt(max((~is_spec).sum(), 1) / max(is_spec.sum(), 1)), 1.0)
    deadline = [float("inf")]
    seen: dict[str, Any] = {"cost": float("inf"), "x": None}

    def residuals(x: np.ndarray) -> np.ndarray:
        if wall() > deadline[0] and seen["x"] is not None:
            raise _OutOfTime
        pred = _predict(fit_rows, _pricing(hardware, engine_of(x), m.dtype), m.target, m.draft, m.shape)
        res = np.log(pred["t_predicted_s"].to_numpy() / fit_rows["t_step_s"].to_numpy())
        # a speculative row is fitted as it is judged, speedup against speedup: the plain calls timed beside it
        # measure its baseline, so an error in the plain rows' prediction of the target does not shift it
        speed = np.log(pred["speedup_predicted"].to_numpy() / fit_rows["speedup_measured"].to_numpy())
        out = weight * np.where(is_spec, speed, res)
        cost = 0.5 * float(np.sum(out**2))
        if np.isfinite(cost) and cost < seen["cost"]:
            seen["cost"], seen["x"] = cost, np.array(x, dtype=float)
        return out

    hi = np.array([t[3] for t in terms])
    # a fraction of the device's rate is a share in (0, 1]: never 0 (the Engine refuses it)
    lo = np.array([1e-3 if t[0].endswith("_fraction") else 0.0 for t in terms])
    # Where the host issues faster than the device runs, the per-launch cost has no gradient (the pass is
    # the device's): start also from the line through the plain steps (seconds per layer -> per kernel,
    # the intercept -> per step) and keep the best of the fits. The streaming share has none either where the
    # weights' time hides under the issue time, so each start is tried at a share per decade
    line = _line_start(fit_rows, base, kind, hi)
    line = np.concatenate([line, [t[2] for t in terms[len(line) :]]])
    share = [i for i, t in enumerate(terms) if t[0] == "bandwidth_fraction"]
    x0s: list[np.ndarray] = [] if first is None else [np.asarray(first, dtype=float)]
    for start in (np.array([t[2] for t in terms]), line):
        for f in SHARE_STARTS if share else (None,):
            x0 = start.copy()
            if f is not None:
                x0[share] = f
            x0s.append(x0)
    best_x: np.ndarray | None = None
    best_cost = float("inf")
    tried, longest = 0, 0.0
    for x0 in x0s:
        if tried and not bud.allows(longest + keep_s):
            break  # no time for another start
        deadline[0] = bud.end - keep_s
        seen["cost"], seen["x"] = float("inf"), None
        x0 = np.clip(x0, np.maximum(lo, 1e-9), hi * 0.999)
        t0 = wall()
        try:
            r = least_squares(residuals, x0, bounds=(lo, hi), x_scale=x0, max_nfev=200)
            x, cost = r.x, float(r.cost)
        except _OutOfTime:
            x, cost = seen["x"], seen["cost"]
        tried += 1
        longest = max(longest, wall() - t0)
        if cost < best_cost:
            best_x, best_cost = x, cost
    assert best_x is not None
    fitted = engine_of(best_x)
    stamp = _dt.date.today().isoformat()
    fitted = dataclasses.replace(
        fitted,
        name=f"{m.framework}-measured",
        description=f"{m.framework} {m.framework_version} on {m.device.get('name')} (torch {torch.__version__}), "
        f"fitted by specroof measure engine on {stamp}",
        sources={
            **dict(base.sources),
            "host": f"fitted: specroof measure engine --framework {m.framework} ({len(fit_rows)} timed configurations "
            f"on {m.device.get('name')})"
            + (f"; the kernel counts are the shipped {base.name!r} profile's" if base.launches else ""),
            "device": "fitted with the host terms: "
            + "; ".join(_DEVICE_TERMS[t[0]] for t in terms if t[0] in _DEVICE_TERMS)
            + "; the rest is the hardware profile's",
        },
    )
    params = {t[1]: float(v) * (1e6 if t[0].endswith("_s") else 1.0) for t, v in zip(terms, best_x, strict=True)}
    return fitted, params, best_x, tried, longest


def _table(m: EngineMeasurement, hardware: Hardware, engine: Engine) -> pd.DataFrame:
    """Every row measured against its prediction through ``engine``: step error, and speedup error (spec)."""
    table = _predict(m.rows, _pricing(hardware, engine, m.dtype), m.target, m.draft, m.shape)
    table["rel_error"] = table["t_predicted_s"] / table["t_step_s"] - 1.0
    spec = table["kind"] == "spec"
    table.loc[spec, "speedup_error"] = table.loc[spec, "speedup_predicted"] / table.loc[spec, "speedup_measured"] - 1
    return table


def _marked(t: pd.DataFrame) -> pd.DataFrame:
    """``noisy`` on the held-out rows whose interval is wider than their error (and than the floor)."""
    t = t.copy()
    held = (t["kind"] == "spec") & ~t["fit"]
    t["noisy"] = False
    t.loc[held, "noisy"] = mark_noise(t[held], spread="spread", error="speedup_error")["noisy"].to_numpy()
    return t


def _add_repetitions(
    m: EngineMeasurement, table: pd.DataFrame, hardware: Hardware, engine: Engine, budget: Budget | None
) -> bool:
    """Add repetitions to speculative rows while the budget lasts; True when a fit row got some.

    Wanted: a held-out row's interval at most half the error it reports (so the error is a
    result, not noise) and a fit row's at most the noise floor (its noise moves every held-out
    prediction), never below the floor. Each pass adds one repetition to every row still short
    of that (the one furthest from it first), until none is, none fits the budget, or each has
    had ``m.max_extra`` more. An unlimited budget stops at the first pass that leaves every row
    as it was wanted or capped, as a limited one does.
    """
    assert m.remeasure is not None
    added: dict[Any, int] = {}
    fit_added = False
    r: Any
    while True:
        spec = table[table["kind"] == "spec"]
        want = np.where(spec["fit"], NOISE_FLOOR, np.maximum(0.5 * spec["speedup_error"].abs(), NOISE_FLOOR))
        todo = spec.assign(_need=spec["spread"] / want)
        todo = todo[todo["_need"] > 1.0].sort_values("_need", ascending=False)
        did = False
        for r in todo.itertuples():
            g = "heuristic" if r.schedule == "heuristic" else int(r.gamma)
            if added.get(g, 0) >= m.max_extra or (budget is not None and not budget.allows(1.2 * float(r.rep_wall_s))):
                continue
            m.rows = m.remeasure(g)
            added[g] = added.get(g, 0) + 1
            fit_added = fit_added or bool(r.fit)
            did = True
        if not did:
            return fit_added
        table = _table(m, hardware, engine)


def _line_start(rows: pd.DataFrame, base: Engine, kind: str, hi: np.ndarray) -> np.ndarray:
    """A starting point from a straight line through the plain steps against depth."""
    plain = rows[rows["kind"] == "plain"]
    t = np.asarray(plain["t_step_s"], dtype=float)
    layers = np.asarray(plain["n_layers"], dtype=float)
    if len(np.unique(layers)) < 2:
        return np.array([h * 0.01 for h in hi])
    slope, intercept = np.polyfit(layers, t, 1)
    slope, intercept = max(slope, 1e-7), max(intercept, 1e-6)
    if kind == "eager":
        from roofline.costing.timemodel import _dense_layer_kernels

        per_layer = slope / max(_dense_layer_kernels(base), 1.0)
        return np.array([per_layer, 0.5 * intercept, 0.01 * intercept, 0.5 * intercept])
    return np.array([slope, 0.5 * intercept, 0.01 * intercept, 0.5 * intercept])


# -- the profile ---------------------------------------------------------------------------------


def profile_data(fit: EngineFit, m: EngineMeasurement, command: str, hardware_ref: str) -> dict[str, Any]:
    """The engine TOML (``engine_data``'s layout) with its ``[measured]`` block."""
    data = engine_data(fit.engine)
    measured: dict[str, Any] = {
        "framework": m.framework,
        "framework_version": m.framework_version,
        "torch": str(torch.__version__),
        "device": str(m.device.get("device", "cpu")),
        "host_cpu": _host_cpu(m.device),
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "command": command,
        "hardware": hardware_ref,
        "dtype": m.dtype,
        "dtype_reason": m.dtype_reason,
        "python": platform.python_version(),
    }
    if m.threads is not None:
        measured["threads"] = int(m.threads)
    for k, v in m.load.items():
        if isinstance(v, str):
            measured[k] = v
        elif isinstance(v, (int, float)) and np.isfinite(v):
            measured[k] = int(v) if isinstance(v, int) else float(v)
    if m.skipped:
        measured["not_measured"] = "; ".join(m.skipped)
    for prefix, summary in (("fit", fit.fit_error), ("heldout", fit.validation)):
        for k, v in summary.items():
            if isinstance(v, (int, float)) and np.isfinite(v):
                measured[f"{prefix}_{k}"] = float(v) if isinstance(v, float) else int(v)
    data["measured"] = measured
    return data


def _host_cpu(info: dict[str, Any]) -> str:
    if info.get("kind") == "cpu":
        return str(info.get("name", platform.processor() or platform.machine()))
    from measure.device import _cpu_info

    return str(_cpu_info().get("name", platform.machine()))


def write_engine_profile(path: str | Path, data: dict[str, Any]) -> Path:
    """Write the profile TOML (the same writer the hardware profiles use)."""
    import tomli_w

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(tomli_w.dumps(data))
    return p


def measured_frameworks(candidates: Sequence[str] = (*FRAMEWORKS, *SERVING)) -> dict[str, str | None]:
    """Per framework: None when ``measure engine`` can run it here, else the one-line reason it cannot."""
    out: dict[str, str | None] = {}
    for name in candidates:
        try:
            framework_module(name)
            out[name] = None
        except SpecroofError as exc:
            out[name] = str(exc)
    return out
