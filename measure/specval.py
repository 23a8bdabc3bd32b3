"""Predicted against measured speculative speedup, per drafter, gamma and batch.

The prediction is the roofline speedup of ``roofline.speculation.speculative`` with the pass
times of a profile fitted to verify passes on this device, the acceptance curve
measured in the same runs, and the round's host cost outside the passes
(acceptance, commit) as measured.

The measurement is throughput against the autoregressive baseline, same prompts.
A static batch keeps running until its slowest sequence is done, so the tail of a
batched speculative run has finished sequences riding along: that is a property
of static batching, not of speculation, and the roofline speedup does not model
it. The speedups are therefore taken over the steady state (rounds where every
sequence of the batch was still running), and the acceptance curve behind the
prediction comes from those same rounds. ``speedup_measured`` compares rounds and
baseline steps at one statistic of their times (by default the 10th percentile:
the machine without interference, as the minimum-fitted profile predicts);
``speedup_wall`` is wall-clock, each run against the two baseline probes that
bracket it; ``speedup_end_to_end`` includes the tail.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from measure.budget import Budget, WorkBar
from measure.decode import GenerationResult, autoregressive_generate, cost_model_of, speculative_generate
from measure.models import Transformer
from roofline.core.errors import SpecroofError, check_min
from roofline.costing.hardware import Hardware
from roofline.passes.model import ModelSpec
from roofline.speculation.speculative import speedup

#: a row whose bracketing baselines disagree by more than the error it would report (and by more than
#: this floor, below which every row is good whichever way the noise went) is noise, not a result
NOISE_FLOOR = 0.05


def _cpu_ticks() -> tuple[float, ...] | None:
    """(steal ticks, all ticks, idle ticks) of the whole machine from /proc/stat, and this process's CPU seconds
    (every thread of it); None where there is no /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu" or len(first) < 9:
        return None
    ticks = [float(v) for v in first[1:]]
    return ticks[7], sum(ticks[:8]), ticks[3] + ticks[4], time.process_time()


def machine_load(since: tuple[float, ...] | None = None) -> dict[str, Any]:
    """The load average now, and since ``since`` ticks the CPU steal (share of ticks a hypervisor took) and the
    cores' worth of work other processes did.

    Recorded with every run: a measurement taken while other work ran is not the machine's speed.
    Returns ``load_avg_1m``, ``load_avg_5m``, ``cpus``, ``steal_pct`` and ``others_cores`` (NaN without a
    start) and ``ticks`` (pass it back as ``since`` at the end of the run). ``others_cores`` is the busy
    time of the whole machine less this process's own CPU time, over the window's wall time: two busy
    loops beside a run give about 2 (a load average, an average over the last minute, lags a short run).
    """
    try:
        one, five = (float(v) for v in Path("/proc/loadavg").read_text().split()[:2])
    except (OSError, ValueError):
        one = five = float("nan")
    now = _cpu_ticks()
    steal = others = float("nan")
    cpus = os.cpu_count() or 1
    if since is not None and now is not None and len(since) == len(now) and now[1] > since[1]:
        all_ = now[1] - since[1]
        steal = 100.0 * (now[0] - since[0]) / all_
        hz = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        busy_s = (all_ - (now[2] - since[2])) / hz  # every core's busy seconds (the ticks sum over the cores)
        wall_s = all_ / hz / cpus
        others = max(0.0, (busy_s - (now[3] - since[3])) / wall_s) if wall_s > 0 else float("nan")
    return {"load_avg_1m": one, "load_avg_5m": five, "cpus": os.cpu_count(), "steal_pct": steal,
            "others_cores": others, "ticks": now}  # fmt: skip


def mark_noise(
    df: pd.DataFrame,
    spread: str = "probe_spread",
    error: str = "rel_error",
    repeats: str = "rep_spread",
    predicted: str = "pred_spread",
) -> pd.DataFrame:
    """``noisy`` per row: its baselines, its repetitions, or the pairs behind its prediction (``predicted``, where a
    paired prediction made one) disagreed by more than the error it reports (and than NOISE_FLOOR).

    The baselines are memory-bound one-token passes, so they miss a change in the machine's arithmetic speed,
    which moves the wider verify passes of a round (on a shared 2-core EPYC, over a minute, an in-cache matrix
    product's one-second medians ranged 51% and a weight stream's 32%, correlated 0.29: BENCHMARKS.md,
    "machine noise"). The repetitions' own disagreement (``repeats``, where the table has it) catches that. A row
    already flagged (above its physical bound) is noisy too. Such a row keeps its spreads and is left out of
    :func:`error_summary`.
    """
    out = df.copy()
    bar = np.maximum(out[error].abs(), NOISE_FLOOR)
    noisy = np.array(out[spread] > bar, dtype=bool)
    for col in (repeats, predicted):
        if col in out:  # NaN (one repetition, a fitted prediction): no evidence
            noisy = noisy | np.array(out[col].astype(float) > bar, dtype=bool)
    if "flag" in out:
        noisy = noisy | (out["flag"].astype(str).str.len().to_numpy() > 0)
    out["noisy"] = noisy
    return out


def error_summary(df: pd.DataFrame, error: str = "rel_error") -> dict[str, Any]:
    """Median and max |error| over the rows that are not noisy, and how many were left out."""
    noisy = df["noisy"] if "noisy" in df else pd.Series(False, index=df.index)
    good = df.loc[~noisy, error].abs()
    return {
        "error_median": float(good.median()) if len(good) else float("nan"),
        "error_max": float(good.max()) if len(good) else float("nan"),
        "rows": int(len(good)),
        "noisy_rows": int(noisy.sum()),
    }


def _steady_rounds(run: GenerationResult, batch: int) -> pd.DataFrame:
    """One row per round in which all ``batch`` sequences were running: tokens emitted and seconds per phase.

    ``t_round_s`` is the round's wall time and ``t_host_s`` that less its passes' device time, as the run
    measured them (docs/cost-model.md, section 39); a run journalled before rounds had them takes the
    acceptance and commit seconds as the host's and the phases' sum as the round's.
    """
    rows = _full_rounds(run.rounds, batch)
    walled = "t_round_s" in rows and "t_host_s" in rows
    cols = {"t_draft_s": "t_draft_s", "t_verify_s": "t_verify_s"}
    cols |= {"t_host_s": "t_host_s", "t_round_s": "t_round_s"} if walled else {"t_host_s": "t_accept_s"}
    agg: dict[str, Any] = {"emitted": ("emitted", "sum"), **{k: (v, "first") for k, v in cols.items()}}
    if not walled:
        agg["t_commit_s"] = ("t_commit_s", "first")
    full = rows.groupby("round").agg(**agg)
    if not walled:
        full["t_host_s"] += full.pop("t_commit_s")
        full["t_round_s"] = full["t_draft_s"] + full["t_verify_s"] + full["t_host_s"]
    return full


def _steady(run: GenerationResult, batch: int) -> tuple[int, float]:
    """Tokens emitted and seconds spent in the rounds where all ``batch`` sequences were running."""
    full = _steady_rounds(run, batch)
    return int(full["emitted"].sum()), float(full["t_round_s"].sum())


def _full_rounds(rounds: pd.DataFrame, batch: int) -> pd.DataFrame:
    """The rows of the rounds in which all ``batch`` sequences were still running."""
    return rounds[rounds.groupby("round")["seq"].transform("size") == batch]


def _probe(target: Transformer, prompts: list[list[int]], max_new_tokens: int) -> GenerationResult:
    """A baseline run with every step timed: a probe of the machine's current speed.

    Greedy and of fixed length, the baseline's speed does not depend on the text, so
    one group of prompts is enough.
    """
    return autoregressive_generate(target, prompts, max_new_tokens, step_times=True)


#: The quantile of round and step times that stands for a pass "on the quiet machine" (statistic
#: "min"): a minimum over the hundreds of rounds of a decoding run is an extreme value, not a quiet
#: pass, while the 10th percentile is stable and still below the interference.
QUIET_QUANTILE = 0.1

#: new tokens of the untimed run before a configuration's first timed one
WARMUP_TOKENS = 8

#: a measured speedup may exceed its physical bound by this much before the row is flagged as noise
BOUND_SLACK = 0.02
#: the same for the wall-clock speedup, whose baseline steps carry host work the quiet statistic leaves out
WALL_SLACK = 0.25


@dataclass
class Run:
    """One decoding run as the journal keeps it: a baseline probe or a speculative run, seconds and rounds."""

    kind: str
    rep: int
    batch: int
    label: str
    gamma: int
    decode_s: float
    n_tokens: int
    step_s: list[float] = field(default_factory=list)
    rounds: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: each baseline step's pass, on the device (a probe's; empty in runs journalled before it was kept)
    step_device_s: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, kind: str, rep: int, batch: int, label: str, gamma: int, r: GenerationResult) -> Run:
        return cls(
            kind, rep, batch, label, gamma, r.decode_s, r.n_tokens, list(r.step_s), r.rounds, list(r.step_device_s)
        )

    def to_json(self) -> str:
        keys = ("kind", "rep", "batch", "label", "gamma", "decode_s", "n_tokens", "step_s", "step_device_s")
        d = {k: getattr(self, k) for k in keys}
        d["rounds"] = self.rounds.to_dict(orient="list")
        return json.dumps(d)

    @classmethod
    def from_json(cls, line: str) -> Run:
        d = json.loads(line)
        return cls(**{**d, "rounds": pd.DataFrame(d.get("rounds", {}))})


class Journal:
    """``runs.jsonl``: every decoding run appended (fsync'd) as it finishes, and a marker when a block is whole.

    A resumed measurement reuses the blocks (repetition, batch size) that finished and
    redoes the one that was cut short.
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None

    def write(self, line: str) -> None:
        if self.path is None:
            return
        with self.path.open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def run(self, run: Run) -> None:
        self.write(run.to_json())

    def end_block(self, rep: int, batch: int, seconds: float) -> None:
        self.write(json.dumps({"kind": "block_end", "rep": rep, "batch": batch, "seconds": seconds}))

    def load(self) -> tuple[dict[tuple[int, int], list[Run]], dict[tuple[int, int], float]]:
        """Finished blocks' runs and durations; a damaged last line (a run cut off) is skipped."""
        if self.path is None or not self.path.exists():
            return {}, {}
        pending: dict[tuple[int, int], list[Run]] = {}
        done: dict[tuple[int, int], list[Run]] = {}
        secs: dict[tuple[int, int], float] = {}
        lines = self.path.read_text().splitlines()
        for i, line in enumerate(lines, start=1):
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                if i == len(lines):
                    continue  # the run being written when the process stopped
                raise SpecroofError(f"{str(self.path)!r} line {i} is damaged (not JSON)") from None
            key = (int(d["rep"]), int(d["batch"]))
            if d["kind"] == "block_end":
                done[key], secs[key] = pending.pop(key, []), float(d["seconds"])
            else:
                pending.setdefault(key, []).append(Run.from_json(line))
        return done, secs


#: the planning margin on a unit's predicted seconds (docs/cost-model.md, sections 38 and 40)
PLAN_MARGIN = 1.25


class UnitCosts:
    """What the units of a repetition cost here: the plan's prices (``unit_s``), rescaled by how long the units
    done so far took against their prices (docs/cost-model.md, section 44).

    A unit is ``("sweep", batch)`` (the verify sweeps' visit before a block), ``("probe", batch)`` (a baseline
    probe) or ``("spec", batch, label, gamma)`` (a configuration's runs, every group, its warm-up included). The
    scale is the decoding units' seconds taken over their seconds priced: on a loaded machine a plan priced on the
    a-priori profile ran 2-4 times long (a 60 s budget: 8 s priced, 35 s taken). A sweep visit is expected to take
    what the last one took (a first visit, every point warmed up and timed, costs more than a later one, which
    skips the points that converged), or its price rescaled before any.
    """

    def __init__(self, unit_s: Callable[[tuple[Any, ...]], float]) -> None:
        self.unit_s = unit_s
        self.taken_s = 0.0
        self.priced_s = 0.0
        self.sweep_s: float | None = None

    @property
    def scale(self) -> float:
        return self.taken_s / self.priced_s if self.priced_s > 0 else 1.0

    def need(self, units: Sequence[tuple[Any, ...]]) -> float:
        """Seconds to keep for ``units``: their prices, rescaled, with the margin."""
        total = 0.0
        for u in units:
            if u[0] == "sweep" and self.sweep_s is not None:
                total += self.sweep_s
            else:
                total += self.scale * float(self.unit_s(u))
        return PLAN_MARGIN * total

    def done(self, unit: tuple[Any, ...], seconds: float) -> None:
        if unit[0] == "sweep":
            self.sweep_s = max(0.0, float(seconds))
            return
        self.taken_s += max(0.0, float(seconds))
        self.priced_s += max(0.0, float(self.unit_s(unit)))


def config_name(label: str, gamma: int, batch: int) -> str:
    """A configuration as the output names it: ``draft pair-draft gamma 4 at batch 1``."""
    return f"{label} gamma {gamma} at batch {batch}"


def measure_speedups(
    target: Transformer,
    drafters: dict[str, Any],
    prompts_by_batch: dict[int, list[list[int]]],
    gammas: Sequence[int],
    *,
    max_new_tokens: int = 64,
    repeats: int = 3,
    progress: bool = False,
    before_block: Callable[[int], None] | None = None,
    seed: int = 0,
    statistic: str = "min",
    budget: Budget | float | None = None,
    journal: str | Path | None = None,
    resume: bool = False,
    keep_s: float = 0.0,
    costs: UnitCosts | None = None,
    pairs: int | None = None,
    configs: Sequence[tuple[str, int]] | None = None,
    runs_per_side: int = 1,
) -> pd.DataFrame:
    """Measured half: one row per (drafter, batch, gamma) with the speedups, acceptance and pass times.

    ``drafters`` maps a label to a draft :class:`Transformer` or an early-exit layer
    count. ``prompts_by_batch[b]`` holds a multiple of ``b`` prompts, decoded ``b`` at a
    time (more prompts at batch 1 average acceptance over more text). Each repetition
    runs, per batch size, every configuration (``configs``: (drafter, gamma) pairs; default every drafter at every
    gamma), the drafters in the order given and each one's gammas shuffled, as ``pairs`` pairs of a speculative
    run and a baseline run (one group of prompts, decoded autoregressively, every step timed) after it, with one
    more baseline run before the first: plain and speculative runs alternate (:func:`_measure_block`). ``before_block(i)`` runs before each (repetition, batch
    size) block, numbered from 0 (the CLI measures a round of its verify sweeps there,
    so the fit sees the machine in the same periods as the decoding).

    ``repeats`` is the most repetitions; with a ``budget`` (seconds or a
    :class:`Budget`, less ``keep_s`` kept for what follows) a further repetition starts
    only if the last one's duration still fits. With ``costs`` (:class:`UnitCosts`, the
    plan's prices) the first repetition is bounded too: its first block's sweep visit, probe
    and first configuration always run; every later block, and every later configuration
    (with the probe after it), only while its rescaled price fits. What the budget left out
    is named in ``attrs["dropped"]`` (name: why). ``journal`` (a ``runs.jsonl`` path) receives
    every run as it finishes; ``resume`` reuses the finished blocks found there.

    Three speedups per row, all over the steady rounds (the whole batch running):

    * ``speedup_measured``: tokens per round over the round time, against the
      baseline's tokens per step over its step time, both times taken at the same
      ``statistic``: ``"min"`` (the default) uses the 10th percentile of the rounds'
      and the steps' seconds, the machine without interference, which is what a
      profile fitted to each sweep point's minimum predicts; ``"median"`` the medians.
    * ``speedup_wall``: wall-clock tokens per second over the steady rounds of a run,
      against the mean time per token of the two baseline probes that bracket it (a
      machine whose speed drifts over minutes moves both sides); median over
      repetitions.
    * ``speedup_end_to_end``: the same with the whole run, tail included.

    ``probe_spread`` is how far the two probes around a run disagreed (relative, median
    over pairs): the machine's noise during that configuration. ``rep_spread`` is how far the
    pairs' own ratios of round time to baseline step (each pair's rounds against the baseline
    runs on either side, at the statistic) disagreed: the median over every two of them of
    |a - b| / their mean, NaN with one pair (``pairs`` counts them). It is the noise the probes
    cannot see, a change in arithmetic speed that moves wide passes only. ``speedup_measured`` is
    the tokens per round of every pair's rounds over the median of those ratios. ``flag`` marks a row whose speedup exceeds its physical bound, mean tokens per
    round x baseline step / verify pass (a round costs at least its verify pass): such a figure
    is noise, not speed; a ``speedup_measured`` above the bound is NaN (the figure stays in
    ``speedup_measured_raw`` beside ``speedup_bound``). The table's ``attrs["load"]`` records
    the load average at the end of the session and the CPU steal over it (``load_avg_1m``,
    ``steal_pct``); :func:`predict_speedups` adds ``noisy``.
    """
    start = machine_load()["ticks"]
    q = {"min": QUIET_QUANTILE, "median": 0.5}.get(statistic)
    if q is None:
        raise SpecroofError(f"statistic must be 'min' or 'median' (got {statistic!r})")
    repeats = int(check_min("repeats", repeats, 1, integer=True))
    configs = list(configs) if configs is not None else [(label, g) for label in drafters for g in gammas]
    gammas = sorted({g for _, g in configs})
    groups: dict[int, list[list[list[int]]]] = {}
    for batch, prompts in prompts_by_batch.items():
        if not prompts or len(prompts) % batch:
            raise SpecroofError(f"batch {batch} needs a non-zero multiple of {batch} prompts (got {len(prompts)})")
        groups[batch] = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    bud = budget if isinstance(budget, Budget) else Budget(budget)
    limit = bud.keeping(keep_s)  # what the runs may take: the rest is the caller's (the fits, writing)
    clock = bud.clock
    jr = Journal(journal)
    if jr.path is not None and not resume and jr.path.exists():
        jr.path.unlink()
    blocks, block_s = jr.load() if resume else ({}, {})
    per_rep = len(groups) * (1 + 2 * len(configs))
    bar = WorkBar(repeats * per_rep, "speculative runs", progress, budget=bud if bud.limited else None, tail_s=keep_s)
    rng = np.random.default_rng(seed)
    runs: list[Run] = [r for rs in blocks.values() for r in rs]
    warmed: set[tuple[str, int, int]] = set()
    dropped: dict[str, str] = {}
    reps_run = 0
    try:
        for rep in range(repeats):
            perm = {b: priority_order(configs, rng) for b in groups}  # drawn even when resumed: same order
            rep_s = sum(v for (r, _), v in block_s.items() if r == rep - 1)
            if rep > 0 and not all((rep, b) in blocks for b in groups) and not limit.allows(rep_s):
                break  # the next repetition would not fit: stop with what is measured
            reps_run = rep + 1
            for k, (batch, grps) in enumerate(groups.items()):
                if (rep, batch) in blocks:
                    bar.update(1 + 2 * len(configs))
                    continue
                first_block = rep == 0 and k == 0
                one = [("sweep", batch), ("probe", batch), ("spec", batch, *configs[perm[batch][0]])]
                one += [("probe", batch)] * (pairs or len(grps)) * runs_per_side
                if costs is not None and limit.limited and not first_block and not limit.allows(costs.need(one)):
                    for label, g in configs:  # not even its sweep visit, a probe and one configuration fit
                        dropped[config_name(label, g, batch)] = f"not measured in repetition {rep + 1}: out of time"
                    bar.update(1 + 2 * len(configs))
                    continue
                t0 = clock()
                if before_block is not None:
                    before_block(rep * len(groups) + k)
                    if costs is not None:
                        costs.done(("sweep", batch), clock() - t0)

                def fits(units: list[tuple[Any, ...]]) -> bool:
                    return costs is None or not limit.limited or limit.allows(costs.need(units))

                block = _measure_block(
                    target, drafters, configs, perm[batch], grps, rep, batch, max_new_tokens, jr, bar, warmed,
                    fits=fits, costs=costs, clock=clock, dropped=dropped, pairs=pairs, runs_per_side=runs_per_side,
                )  # fmt: skip
                block_s[(rep, batch)] = clock() - t0
                jr.end_block(rep, batch, block_s[(rep, batch)])
                blocks[(rep, batch)] = block
                runs.extend(block)
            if rep == 0 and bud.seconds is not None:  # the bar's total: the repetitions the budget will allow
                first = sum(v for (r, _), v in block_s.items() if r == 0)
                fit = 1 + int(limit.remaining_s // max(first, 1e-9))
                bar.set_total(min(repeats, fit) * per_rep)
    finally:
        bar.close()
    if limit.limited and reps_run < repeats:
        later = f"{reps_run + 1}" if reps_run + 1 == repeats else f"{reps_run + 1}-{repeats}"
        dropped[f"repetitions {later} of {repeats}"] = "a further repetition would not fit what was left"
    df = _summarise(runs, drafters, gammas, prompts_by_batch, max_new_tokens, statistic, q)
    measured = {config_name(r.drafter, int(r.gamma), int(r.batch)) for r in df.itertuples()} if len(df) else set()
    df.attrs["dropped"] = {k: v for k, v in dropped.items() if k not in measured}
    load = machine_load(start)
    # the machine while this session measured (a resumed table is the same table: it goes in attrs, not columns)
    df.attrs["load"] = {k: v for k, v in load.items() if k != "ticks"}
    return df


def _warm_up(target: Transformer, drafter: Any, prompts: list[list[int]], gamma: int) -> None:
    """An untimed short run of a configuration (``drafter`` None: the baseline), a few rounds long."""
    if drafter is None:
        autoregressive_generate(target, prompts, WARMUP_TOKENS)
    else:
        speculative_generate(target, drafter, prompts, gamma, max(WARMUP_TOKENS, 3 * (gamma + 1)))


def _measure_block(
    target: Transformer,
    drafters: dict[str, Any],
    configs: list[tuple[str, int]],
    order: Sequence[int],
    grps: list[list[list[int]]],
    rep: int,
    batch: int,
    max_new_tokens: int,
    jr: Journal,
    bar: WorkBar,
    warmed: set[tuple[str, int, int]],
    *,
    fits: Callable[[list[tuple[Any, ...]]], bool] | None = None,
    costs: UnitCosts | None = None,
    clock: Callable[[], float] = time.perf_counter,
    dropped: dict[str, str] | None = None,
    pairs: int | None = None,
    runs_per_side: int = 1,
) -> list[Run]:
    """One (repetition, batch) block: a baseline probe, then each configuration in ``order`` as ``pairs`` pairs
    (default: one per prompt group), each a speculative run and the baseline run after it, all journalled.

    A pair's side is ``runs_per_side`` runs, pair k's of prompt groups k r .. k r + r - 1 (mod the groups), the same
    on both sides, so the baselines and the speculative runs alternate: every speculative side sits between two
    baseline sides, and its own ratio is taken against them (:func:`_summarise`), so a machine drifting over the
    block moves both sides of every ratio. Several runs a side make a pair longer (less noisy) without decoding
    past the length a model was trained on.

    Every configuration's first run in this process is preceded by a short untimed one
    (``warmed`` remembers which ran): a first use of a shape loads kernels and picks
    algorithms, which on a GPU costs more than the whole timed run. ``fits(units)`` says
    whether a configuration (with its baseline runs) still fits the budget: the block's
    first always runs; one that does not fit is left out and named in ``dropped``.
    """
    n_pairs = int(pairs) if pairs else len(grps)
    r = max(1, int(runs_per_side))
    if ("probe", batch, 0) not in warmed:
        _warm_up(target, None, grps[0], 0)
        warmed.add(("probe", batch, 0))
    out: list[Run] = []
    for u in range(r):
        t0 = clock()
        out.append(Run.of("probe", rep, batch, "", 0, _probe(target, grps[u % len(grps)], max_new_tokens)))
        jr.run(out[-1])
        if costs is not None:
            costs.done(("probe", batch), clock() - t0)
    bar.update(1)
    for pos, j in enumerate(order):
        label, g = configs[j]
        unit = ("spec", batch, label, g)
        if pos > 0 and fits is not None and not fits([unit] + [("probe", batch)] * n_pairs * r):
            if dropped is not None:
                dropped[config_name(label, g, batch)] = f"not measured in repetition {rep + 1}: out of time"
            bar.update(2)
            continue
        spec_s = 0.0
        t0 = clock()
        if (label, batch, g) not in warmed:
            _warm_up(target, drafters[label], grps[0], g)
            warmed.add((label, batch, g))
        for k in range(n_pairs):
            side = [grps[(k * r + u) % len(grps)] for u in range(r)]
            for grp in side:
                run = speculative_generate(target, drafters[label], grp, g, max_new_tokens)
                out.append(Run.of("spec", rep, batch, label, g, run))
                jr.run(out[-1])
            spec_s += clock() - t0
            for grp in side:
                t1 = clock()
                out.append(Run.of("probe", rep, batch, "", 0, _probe(target, grp, max_new_tokens)))
                jr.run(out[-1])
                if costs is not None:
                    costs.done(("probe", batch), clock() - t1)
            bar.update(2.0 / n_pairs)
            t0 = clock()
        if costs is not None:
            costs.done(unit, spec_s)
    return out


def priority_order(configs: Sequence[tuple[str, int]], rng: np.random.Generator) -> list[int]:
    """The order a block runs ``configs`` in: the drafters in the order given (the one asked for first, so a
    budget that runs out leaves the others out, not it), each drafter's gammas shuffled (drift cannot line up
    with gamma)."""
    order: list[int] = []
    for label in dict.fromkeys(c[0] for c in configs):
        mine = [i for i, c in enumerate(configs) if c[0] == label]
        order += [mine[i] for i in rng.permutation(len(mine))]
    return order


def _quiet_speedup(rounds: pd.DataFrame, t_base: float, batch: int, q: float) -> float:
    """``speedup_measured`` of steady ``rounds``: their tokens per round over their ``q``-quantile round time, against
    ``batch`` tokens per baseline step of ``t_base`` seconds; NaN without rounds."""
    if rounds.empty:
        return float("nan")
    return float(rounds["emitted"].mean() / float(rounds["t_round_s"].quantile(q)) / (batch / t_base))


def _pair_spread(values: list[float]) -> float:
    """How far two repeated measurements of one figure typically disagree: the median over every pair of
    |a - b| / their mean (NaN below two). The same measure as two bracketing probes' spread, and one that, unlike a
    range, does not grow with the number of repetitions."""
    v = np.asarray([x for x in values if np.isfinite(x) and x > 0], dtype=float)
    if len(v) < 2:
        return float("nan")
    i, j = np.triu_indices(len(v), 1)
    return float(np.median(np.abs(v[i] - v[j]) / ((v[i] + v[j]) / 2)))


def _summarise(
    runs: list[Run],
    drafters: dict[str, Any],
    gammas: Sequence[int],
    prompts_by_batch: dict[int, list[list[int]]],
    max_new_tokens: int,
    statistic: str,
    q: float,
) -> pd.DataFrame:
    """The speedup table from journalled runs: each speculative run against the baseline runs around it (a pair),
    a row's speedup the median of its pairs' ratios (docs/guide/measuring.md, "A noisy machine")."""
    rows = []
    for batch, prompts in prompts_by_batch.items():
        mine = [r for r in runs if r.batch == batch]
        if not mine:
            continue
        context = int(np.mean([len(p) for p in prompts]) + max_new_tokens / 2)
        # the host's share of a baseline step: its wall time less its pass's device time (probes that kept both)
        step_host = [
            w - d for r in mine if r.kind == "probe" and len(r.step_device_s) == len(r.step_s)
            for w, d in zip(r.step_s, r.step_device_s, strict=True)
        ]  # fmt: skip
        host_step = float(np.median(np.maximum(0.0, step_host))) if step_host else 0.0
        per: dict[tuple[str, int], dict[str, list[Any]]] = {}
        for rep in sorted({r.rep for r in mine}):
            seq = [r for r in mine if r.rep == rep]
            i = 0
            while i < len(seq):
                if seq[i].kind != "spec":
                    i += 1
                    continue
                j = i
                while j < len(seq) and seq[j].kind == "spec":
                    j += 1
                # the baseline runs on either side: as many in a row as the pair's side has (runs_per_side)
                b0 = i
                while b0 > 0 and seq[b0 - 1].kind == "probe":
                    b0 -= 1
                a1 = j
                while a1 < len(seq) and seq[a1].kind == "probe":
                    a1 += 1
                before, after = seq[b0:i], seq[j:a1]
                spec_runs = seq[i:j]
                i = j
                if not before or not after:
                    continue
                tpt = [sum(p.decode_s for p in side) / sum(p.n_tokens for p in side) for side in (before, after)]
                base_tps = 2.0 / sum(tpt)
                # this repetition's steady rounds: its wall-clock speedup, its own quiet one (against the two
                # probes around it: the repetitions' spread), and the pooled rows below
                steady_rounds = pd.concat(
                    [_steady_rounds(GenerationResult([], 0.0, 0.0, r.rounds, r.gamma), batch) for r in spec_runs],
                    ignore_index=True,
                )
                tok, sec = int(steady_rounds["emitted"].sum()), float(steady_rounds["t_round_s"].sum())
                acc = per.setdefault(
                    (spec_runs[0].label, spec_runs[0].gamma),
                    {"wall": [], "e2e": [], "runs": [], "spread": [], "rep": [], "steady": [], "base": [],
                     "bound": [], "host": [], "dev": []},
                )  # fmt: skip
                probe_steps = [t for p in (*before, *after) for t in p.step_s]
                if probe_steps and not steady_rounds.empty:
                    # the pair's own ratio of times: its rounds' (and their verify passes') over the baseline steps
                    # on either side, at the statistic. Times, not tokens: each pair decodes its own prompts, whose
                    # acceptance differs, so the pairs' speedups would disagree by the text as well as the machine
                    base = float(np.quantile(probe_steps, q))
                    acc["base"].append(base)
                    acc["rep"].append(float(steady_rounds["t_round_s"].quantile(q)) / base)
                    acc["bound"].append(float(steady_rounds["t_verify_s"].quantile(q)) / base)
                    # what a paired prediction prices beside the passes, each a ratio to this pair's own baseline:
                    # the round's host time, and the share of a baseline step its pass is (the rest is host)
                    acc["host"].append(float(steady_rounds["t_host_s"].quantile(q)) / base)
                    dev = [
                        d for p in (*before, *after) if len(p.step_device_s) == len(p.step_s) for d in p.step_device_s
                    ]
                    if len(dev) == len(probe_steps) and base > 0:
                        acc["dev"].append(min(1.0, float(np.quantile(dev, q)) / base))
                acc["steady"].append(steady_rounds)
                acc["wall"].append((tok / sec) / base_tps if sec > 0 else np.nan)
                acc["e2e"].append(sum(r.n_tokens for r in spec_runs) / sum(r.decode_s for r in spec_runs) / base_tps)
                acc["spread"].append(abs(tpt[0] - tpt[1]) / np.mean(tpt))
                acc["runs"].extend(spec_runs)
        for label in drafters:
            for g in gammas:
                acc = per.get((label, g))
                if acc is None:
                    continue
                # The acceptance the prediction uses comes from the same rounds the measured speedup
                # does: while the whole batch runs. Easy sequences finish first, so the tail's
                # acceptance is lower, and mixing it in biased batched predictions low by 10-40%.
                rounds = pd.concat([_full_rounds(r.rounds, batch) for r in acc["runs"]], ignore_index=True)
                every = pd.concat([r.rounds for r in acc["runs"]], ignore_index=True)
                steady = GenerationResult([], 0.0, 0.0, rounds, g)  # the pooled steady rounds, as one run
                m = steady.metrics()
                curve = np.nan_to_num(steady.acceptance_curve(), nan=0.0)  # unreached positions: 0
                per_round = pd.concat(acc["steady"], ignore_index=True)
                t = per_round[["t_round_s", "t_draft_s", "t_verify_s", "t_host_s"]].quantile(q)
                if not acc["rep"]:
                    continue
                # tokens per round (every pair's rounds pooled, as the prediction's acceptance curve is) over the
                # median of the pairs' round-to-step ratios: each ratio's two sides ran seconds apart, so a machine
                # that drifts moves both; pooling every baseline step against every round put the drift in it
                tokens_per_round = float(per_round["emitted"].mean()) / batch
                measured = tokens_per_round / float(np.median(acc["rep"]))
                t_base = float(np.median(acc["base"]))
                wall = float(np.nanmedian(acc["wall"]))
                # a round costs at least its verify pass: no speedup beats tokens per round x step / verify pass;
                # wall-clock ratios carry host work and drift too, so they get more slack
                bound = tokens_per_round / float(np.median(acc["bound"]))
                noisy = measured > bound * (1 + BOUND_SLACK) or wall > bound * (1 + WALL_SLACK)
                flag = "noise: above its physical bound" if noisy else ""
                raw = measured
                if measured > bound * (1 + BOUND_SLACK):  # impossible: never shown as a measurement, kept aside
                    measured = float("nan")
                rows.append(
                    {
                        "drafter": label,
                        "batch": batch,
                        "gamma": g,
                        "context": context,
                        "acceptance_rate": m.acceptance_rate,
                        "mean_acceptance_length": m.mean_acceptance_length,
                        "acceptance_rate_all_rounds": float(every["accepted"].sum() / (len(every) * g)),
                        "curve": curve.tolist(),
                        "speedup_measured": measured,
                        "speedup_measured_raw": raw,
                        "speedup_bound": bound,
                        "speedup_wall": wall,
                        "speedup_end_to_end": float(np.median(acc["e2e"])),
                        "repetitions": len({r.rep for r in acc["runs"]}),
                        "pairs": len(acc["rep"]),
                        "probe_spread": float(np.median(acc["spread"])),
                        "rep_spread": _pair_spread(acc["rep"]),
                        "flag": flag,
                        "statistic": statistic,
                        "base_ms_measured": 1e3 * t_base,
                        "verify_ms_measured": 1e3 * float(t["t_verify_s"]),
                        "draft_step_ms_measured": 1e3 * float(t["t_draft_s"]) / g,
                        "host_ms_per_round": 1e3 * float(t["t_host_s"]),
                        "host_ms_per_step": 1e3 * host_step,
                        "host_share_measured": float(t["t_host_s"]) / float(t["t_round_s"]),
                        # the measured half in the ratios a paired prediction prices (:func:`paired_prediction`)
                        "tokens_per_round": tokens_per_round,
                        "round_ratio": float(np.median(acc["rep"])),
                        "host_round_ratio": float(np.median(acc["host"])),
                        "step_device_ratio": float(np.median(acc["dev"])) if acc["dev"] else 1.0,
                    }
                )
    return pd.DataFrame(rows)


#: pairs of pass timings behind a paired prediction, and rounds of passes a side: the pairs' median outvotes a
#: burst of another process's work the way the measured side's median of pairs does (docs/guide/measuring.md)
PASS_PAIRS = 12
PASS_ROUNDS_PER_SIDE = 3


def pass_pair_ratios(
    step: Callable[[], float], round_passes: Callable[[], float], pairs: int, steps_per_side: int,
    rounds_per_side: int, q: float = 0.5,
) -> list[float]:  # fmt: skip
    """Ratios of a round's passes to one plain decode step, timed in pairs: a side of ``steps_per_side`` plain steps
    (``step()`` returns one's seconds), then ``pairs`` times a side of ``rounds_per_side`` rounds' passes
    (``round_passes()``: the draft chain and the verify pass) and another plain side.

    Each ratio is its side's ``q``-quantile over the mean of the plain sides' on either side of it: a machine whose
    speed drifts linearly moves both by as much at the round side's midpoint, so the drift cancels (to first order)
    instead of landing in the ratio, as it would in a ratio of passes timed minutes apart (a fit to a sweep)."""
    before = float(np.quantile([step() for _ in range(steps_per_side)], q))
    out = []
    for _ in range(int(pairs)):
        passes = float(np.quantile([round_passes() for _ in range(rounds_per_side)], q))
        after = float(np.quantile([step() for _ in range(steps_per_side)], q))
        out.append(passes / ((before + after) / 2))
        before = after
    return out


def pass_pairs_steps(gamma: int, pairs: int = PASS_PAIRS, rounds_per_side: int = PASS_ROUNDS_PER_SIDE) -> float:
    """Plain decode steps' worth of time :func:`time_pass_pairs` takes at ``gamma`` (a round's passes priced as
    ``gamma + 1`` steps, its first use of each shape included): what a plan prices it at."""
    side = rounds_per_side * (gamma + 2)
    return float((2 * pairs + 1) * side + gamma + 2)


def time_pass_pairs(
    target: Transformer,
    drafter: Any,
    gamma: int,
    context: int,
    *,
    pairs: int = PASS_PAIRS,
    rounds_per_side: int = PASS_ROUNDS_PER_SIDE,
    q: float = 0.5,
) -> list[float]:
    """:func:`pass_pair_ratios` of this harness's own passes at batch 1 and ``context`` cached tokens: a plain step is
    the target's one-token pass (the span a baseline step times), a round's passes the drafter's chain of ``gamma``
    (the same ``propose`` a speculative round runs) and the target's verify pass of ``gamma + 1`` tokens. A plain
    side has as many steps as a round side's passes, so the two sides of a pair last about as long."""
    from measure.decode import as_drafter
    from measure.timing import synchronize
    from roofline.speculation.verification import SamplingParams

    d: Any = as_drafter(drafter, target)
    sp = SamplingParams(temperature=0.0)
    dev = target.device
    gen = torch.Generator(device=dev).manual_seed(0)
    target.setup_cache(1, context + gamma + 8)  # the KV's values do not change a pass's time: only its length
    if isinstance(drafter, Transformer):
        drafter.setup_cache(1, context + gamma + 8)
    tok = torch.zeros(1, 1, dtype=torch.long, device=dev)
    last2 = torch.zeros(1, 2, dtype=torch.long, device=dev)
    committed = np.array([context], dtype=np.int64)

    def step() -> float:
        target.cache.rollback([context])  # type: ignore[union-attr]
        synchronize(dev)
        t0 = time.perf_counter()
        target(tok)[:, -1]
        synchronize(dev)
        return time.perf_counter() - t0

    def round_passes() -> float:
        synchronize(dev)
        t0 = time.perf_counter()
        x, _ = d.propose(last2, committed, gamma, sp, gen)
        target.cache.rollback(committed - 1)  # type: ignore[union-attr]
        target(torch.cat([tok, x.view(1, -1)], 1))
        synchronize(dev)
        return time.perf_counter() - t0

    with torch.inference_mode():
        step(), round_passes()  # a first use of each shape pays for itself
        return pass_pair_ratios(step, round_passes, pairs, rounds_per_side * (gamma + 2), rounds_per_side, q)


def paired_prediction(row: dict[str, Any], ratios: Sequence[float]) -> dict[str, float]:
    """The speedup a measured row's passes predict, priced from ratios only (docs/guide/measuring.md, "A noisy
    machine"): the cost model's speedup, tokens per round x t_step / t_round with t_round = draft + verify + host.

    In units of the baseline step: the round's passes cost the median of ``ratios`` (:func:`time_pass_pairs`) times
    the share of a baseline step its pass is (``step_device_ratio``), and its host time ``host_round_ratio``; the
    tokens per round are the ones the measured half observed, so the error is the time model's, not the
    acceptance's. ``pred_spread`` is how far the pairs' ratios disagreed (the measured half's ``rep_spread``)."""
    passes = float(np.median(ratios))
    t_round = passes * float(row.get("step_device_ratio", 1.0)) + float(row.get("host_round_ratio", 0.0))
    return {
        "speedup_predicted": float(row["tokens_per_round"]) / t_round,
        "pass_ratio_predicted": passes,
        "pred_spread": _pair_spread(list(ratios)),
        "pred_pairs": float(len(ratios)),
    }


def predict_speedups(
    measured: pd.DataFrame,
    target: ModelSpec,
    drafters: dict[str, Any],
    fitted: Hardware,
    *,
    dtype: str = "bf16",
    draft_hardware: dict[str, Hardware] | None = None,
    pass_ratios: dict[tuple[str, int, int], Sequence[float]] | None = None,
) -> pd.DataFrame:
    """Predicted half: the roofline speedup for every measured row, from its acceptance curve and host cost.

    ``pass_ratios`` ((drafter, gamma, batch): :func:`time_pass_pairs`' ratios) replace a row's prediction by the
    paired one (:func:`paired_prediction`, ``prediction`` "paired passes"), the fitted profile's kept beside it
    (``speedup_predicted_fit``, ``rel_error_fit``): on a busy machine a fit to sweeps visited minutes before the
    runs carries the drift between them, which the pairs cancel.

    ``fitted`` prices the target's passes (and an early exit's); ``draft_hardware``
    maps a drafter's label to the profile its passes are priced with (one fitted to
    that draft model's own sweep), by default ``fitted`` too. ``noisy`` marks the rows whose
    bracketing probes disagreed by more than the error they report (:func:`mark_noise`):
    :func:`error_summary` leaves them out and says how many.
    """
    out = []
    for row in measured.to_dict(orient="records"):
        # each measure-side drafter names the roofline drafter that prices what it runs
        model_drafter = cost_model_of(drafters[row["drafter"]])
        g = int(row["gamma"])
        pred = speedup(
            fitted,
            target,
            model_drafter,
            list(row["curve"]),
            g,
            batch=int(row["batch"]),
            context=int(row["context"]),
            dtype=dtype,
            round_overhead_s=row["host_ms_per_round"] / 1e3,
            draft_hardware=(draft_hardware or {}).get(row["drafter"]),
        )
        # the host's time priced on both sides (docs/cost-model.md, section 39): a round's host time is in the
        # round (round_overhead_s), a baseline step's is added to the fitted pass, which is the device's alone
        host_step = float(row.get("host_ms_per_step", 0.0) or 0.0) / 1e3
        t_round = float(pred.t_round_s)
        predicted = float(pred.expected_tokens) * (float(pred.t_base_s) + host_step) / t_round
        row.update(
            speedup_predicted=predicted,
            rel_error=predicted / row["speedup_measured"] - 1.0,
            rel_error_wall=predicted / row["speedup_wall"] - 1.0,
            host_share_predicted=row["host_ms_per_round"] / 1e3 / t_round,
            base_ms_predicted=1e3 * (float(pred.t_target_step_s) + host_step),
            verify_ms_predicted=1e3 * float(pred.t_verify_s),
            draft_step_ms_predicted=1e3 * float(pred.t_draft_s) / g,
            prediction="fit",
        )
        ratios = (pass_ratios or {}).get((row["drafter"], g, int(row["batch"])))
        if ratios:
            row.update(speedup_predicted_fit=predicted, rel_error_fit=row["rel_error"], prediction="paired passes")
            row.update(paired_prediction(row, ratios))
            row["rel_error"] = row["speedup_predicted"] / row["speedup_measured"] - 1.0
            row["rel_error_wall"] = row["speedup_predicted"] / row["speedup_wall"] - 1.0
        out.append(row)
    return mark_noise(pd.DataFrame(out)) if out else pd.DataFrame(out)


def speedup_validation(
    target: Transformer,
    drafters: dict[str, Any],
    prompts_by_batch: dict[int, list[list[int]]],
    gammas: Sequence[int],
    fitted: Hardware,
    *,
    max_new_tokens: int = 64,
    dtype: str = "bf16",
    repeats: int = 3,
    progress: bool = False,
    draft_hardware: dict[str, Hardware] | None = None,
    statistic: str = "min",
) -> pd.DataFrame:
    """Measure (:func:`measure_speedups`) then predict (:func:`predict_speedups`) with an already fitted profile.

    ``statistic`` should be the one ``fitted`` was fitted with (``"min"``: the quiet machine).
    """
    measured = measure_speedups(
        target,
        drafters,
        prompts_by_batch,
        gammas,
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        progress=progress,
        statistic=statistic,
    )
    return predict_speedups(measured, target.spec, drafters, fitted, dtype=dtype, draft_hardware=draft_hardware)
