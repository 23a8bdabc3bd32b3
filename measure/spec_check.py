"""Measure speculative decoding on this device and check the roofline's prediction of it: one call.

``spec_check`` is what ``specroof measure spec`` and the report's measured section
run, and what a notebook calls:

1. look at the device (``measure.choose``): the dtype it runs well and a target
   size that fits the time budget, unless given;
2. microbenchmark it: the a-priori profile (ceilings only, nothing fitted);
3. plan the configurations (batch sizes, gammas, new tokens) whose predicted time
   fits the budget;
4. a blocked design: before each (repetition, batch) block of decoding runs, one
   more visit of the target's and the draft's verify sweeps, so the fit sees the
   machine in the same periods as the decoding; repetitions go on while the budget
   allows (the first always runs);
5. fit a profile to each sweep, validate it point by point, and predict each
   measured speedup from its measured acceptance curve.

Everything lands in ``out`` as it is measured (``sweep-target/``, ``sweep-draft/``,
``runs.jsonl``); ``resume=True`` continues an interrupted check.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from measure.budget import Budget
from measure.choose import WIDTHS, DeviceChoice, fastest_decode_path, one_token_step_s, probe_and_choose
from measure.decode import cost_model_of
from measure.device import resolve_device
from measure.fit import FitResult, fit, validate
from measure.models import Transformer
from roofline.core.errors import SpecroofError, check_min
from roofline.core.jsonio import dumps
from roofline.core.validation import check_gamma, check_quantity
from roofline.costing.hardware import Hardware, load_hardware
from roofline.costing.passtime import crossover_tokens, pass_time
from roofline.speculation.speculative import EarlyExit, speedup

#: configuration ladders, smallest first: the planner takes the largest whose first repetition fits
LADDER: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((1,), (2,)),
    ((1,), (2, 4)),
    ((1, 4), (2, 4)),
    ((1, 4), (1, 2, 4)),
    ((1, 4), (1, 2, 4, 6)),
)

#: acceptance assumed when planning (before anything is measured): only sizes the plan
PLAN_ALPHA = {"draft": 0.7, "early exit": 0.5}

#: below this many seconds left of the budget the a-priori microbenchmarks run short (fewer repetitions, a capped
#: matmul search, a 4x-LLC streaming matrix): the full set took 6.4-10.4 s beside a busy core on the project's
#: 2-core CPU, and 18.3 s at load average 4.5 (2026-12-04), a third of a 60 s budget, the short set about a third
#: of that; the a-priori profile only starts the fit, which the verify sweeps measure anyway
SHORT_MICROBENCH_BELOW_S = 120.0

#: seconds kept back from the decoding runs for what follows them (two fits, the validation, the predictions):
#: 0.2-1.3 s on the project's 2-core CPU beside a busy core (the payload's ``steps_s["fit_and_predict"]``)
CLOSING_RESERVE_S = 2.0


@dataclass
class SpecCheck:
    """What a check measured and predicted; frames use unit-suffixed columns."""

    choice: DeviceChoice | None
    apriori: Hardware
    fitted: FitResult
    draft_fit: FitResult | None
    sweep: pd.DataFrame
    validation: pd.DataFrame
    summary: dict[str, Any]
    speedups: pd.DataFrame
    plan: dict[str, Any]
    pair: dict[str, Any] = field(default_factory=dict)
    #: how plain decoding runs its one-token passes here, and why (the baseline's speed)
    decode_path: str = ""

    @property
    def noise(self) -> dict[str, float]:
        """How noisy the machine was: the bracketing probes' and the repetitions' disagreement (median, max)."""
        out: dict[str, float] = {}
        for col in ("probe_spread", "rep_spread"):
            s = self.speedups.get(col, pd.Series(dtype=float)).dropna()
            if len(s):
                out |= {f"{col}_median": float(s.median()), f"{col}_max": float(s.max())}
        if self.summary.get("sweep_drift") is not None:  # the target sweep's reference point, visit to visit
            out["sweep_drift"] = float(self.summary["sweep_drift"])
        return out


def block_units(
    target: Any,
    drafters: dict[str, Any],
    hw: Hardware,
    dtype: str,
    batch: int,
    gammas: Sequence[int],
    tokens: int,
    groups: int,
    context: int,
    host_s: float = 0.0,
) -> dict[Any, float]:
    """Seconds each unit of a block should take at assumed acceptance: ``"probe"`` (one baseline probe) and
    ``(label, gamma)`` (that configuration's runs, every prompt group).

    Priced by ``hw`` with ``host_s`` added to every pass: the host cost of this harness's
    passes, which the a-priori profile (microbenchmarks of single operations) does not see.
    """
    base = speedup(hw, target.spec, EarlyExit(1), 0.0, 0, batch=batch, context=context, dtype=dtype, overhead_s=host_s)
    out: dict[Any, float] = {"probe": float(base.t_target_step_s) * tokens}
    for label, d in drafters.items():
        cost = cost_model_of(d)
        alpha = PLAN_ALPHA["draft" if isinstance(d, Transformer) else "early exit"]
        for g in gammas:
            r = speedup(hw, target.spec, cost, alpha, g, batch=batch, context=context, dtype=dtype, overhead_s=host_s)
            out[(label, g)] = groups * tokens / float(r.expected_tokens) * float(r.t_round_s)
    return out


def predicted_block_s(
    target: Any,
    drafters: dict[str, Any],
    hw: Hardware,
    dtype: str,
    batch: int,
    gammas: Sequence[int],
    tokens: int,
    groups: int,
    context: int,
    host_s: float = 0.0,
) -> float:
    """Seconds a block's decoding (probes, every drafter x gamma) should take at assumed acceptance: a probe
    before the first configuration and after each (:func:`block_units`).

    The verify-sweep visit before each block is priced apart (:func:`sweep_visit_s`).
    """
    units = block_units(target, drafters, hw, dtype, batch, gammas, tokens, groups, context, host_s)
    configs = [v for k, v in units.items() if k != "probe"]
    return units["probe"] * (1 + len(configs)) + sum(configs)


#: passes of a sweep point per visit: the first visit's 2 warm-ups and 3 repetitions (later visits warm up once)
SWEEP_PASSES_PER_VISIT = 5


def sweep_visit_s(
    specs: Sequence[Any],
    hw: Hardware,
    dtype: str,
    batches: Sequence[int],
    gammas: Sequence[int],
    contexts: Sequence[int],
    host_s: float = 0.0,
) -> float:
    """Seconds one visit of the verify sweeps (every model in ``specs``, batch, width and context) should take.

    Each point is priced at its own width: the sweeps reach 2x the crossover K (up to 128 new tokens per
    sequence), where a pass costs many decode steps; pricing them as one-token steps made the plan of the
    default page's 60 s budget predict 16 s for a repetition that took 85 s beside a busy core.
    """
    ks = [float(crossover_tokens(specs[0], hw, b, contexts[0], dtype)) for b in (min(batches), max(batches))]
    n = np.array(sweep_tokens(gammas, batches, ks), dtype=float)
    total = 0.0
    for spec in specs:
        for b in batches:
            for c in contexts:
                t = np.asarray(pass_time(spec, hw, b, n, c, dtype).t_step_s, dtype=float)
                total += SWEEP_PASSES_PER_VISIT * float(np.sum(t + host_s))
    return total


def staged_shapes(
    batches: Sequence[int],
    gammas: Sequence[int],
    tokens: int,
    sweep_new: Sequence[int],
    contexts: Sequence[int],
    max_seq: int,
    drafts: int = 1,
) -> int:
    """Distinct layer shapes (padded batch, new tokens, context bucket) a check with these configurations runs, per
    model summed over the target and ``drafts`` draft models: what ``--compile`` compiles (each on its first pass)
    and graphs capture (docs/cost-model.md, section 44).

    The verify sweeps' points (each new-token width at each context); a decoding run's prefill of its prompts, its
    one-token steps (the baseline's, a draft's chain past its first step) and verify passes of ``gamma + 1`` and its
    draft chain's first pass (one or two tokens), at every context bucket the run crosses: from the prompt to the
    prompt, the new tokens and a last round's overshoot (:func:`cache_sizes`).
    """
    from measure.models import context_bucket

    def bucket(need: int) -> int:
        return context_bucket(min(need, max_seq), max_seq)

    target: set[tuple[int, int, int]] = set()
    for b in batches:
        target |= {(b, n, bucket(c + n)) for n in sweep_new for c in contexts}
        top = PROMPT_TOKENS + tokens + 2 * max(gammas) + 6
        crossed = {bucket(need) for need in range(PROMPT_TOKENS + 1, top + 1)}
        target.add((b, PROMPT_TOKENS, bucket(PROMPT_TOKENS)))
        target |= {(b, n, k) for k in crossed for n in (1, *(g + 1 for g in gammas))}
    draft: set[tuple[int, int, int]] = set()
    for b in batches:
        draft |= {(b, n, bucket(c + n)) for n in sweep_new for c in contexts}
        top = PROMPT_TOKENS + tokens + 2 * max(gammas) + 6
        draft |= {(b, n, k) for k in {bucket(x) for x in range(PROMPT_TOKENS + 1, top + 1)} for n in (1, 2)}
        draft.add((b, PROMPT_TOKENS, bucket(PROMPT_TOKENS)))
    return len(target) + drafts * len(draft)


def time_staged_pass(model: Transformer) -> float:
    """Seconds a compiled (or captured) model's first pass of a new shape takes beyond its second: the one-off each
    new shape costs, timed on a second shape (a two-token pass at batch 1) after a first (a one-token pass, the
    baseline's step: it also pays the compiler's own start, once per process, which the shapes after it do not)."""
    import time

    import torch

    assert model.cache is not None
    model.cache.rollback([PROMPT_TOKENS] * model.cache.max_batch)
    extra = []
    with torch.inference_mode():
        for n in (1, 2):
            tokens = torch.zeros(1, n, dtype=torch.long, device=model.device)
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                model(tokens)
                if model.device.type == "cuda":
                    torch.cuda.synchronize(model.device)
                times.append(time.perf_counter() - t0)
            extra.append(max(0.0, times[0] - times[1]))
    model.cache.rollback([0] * model.cache.max_batch)
    return extra[1]


def plan_configs(
    target: Any,
    drafters: dict[str, Any],
    hw: Hardware,
    dtype: str,
    tokens: int,
    seconds: float | None,
    batches: Sequence[int] | None = None,
    gammas: Sequence[int] | None = None,
    context: int = 96,
    host_s: float = 0.0,
    shape_s: float = 0.0,
    shapes: Callable[[Sequence[int], Sequence[int]], int] | None = None,
) -> dict[str, Any]:
    """The largest ladder step (or the given batches/gammas) whose first repetition fits ``seconds`` / 3.

    A third, not all: the prediction is the a-priori roofline's, and on a loaded machine a
    repetition can take twice what it predicts; the fit and the page need time after it too.
    A compiled (or captured) check's first repetition also compiles every shape it runs:
    ``shapes(batches, gammas)`` of them, ``shape_s`` seconds each (``predicted_compile_s``).
    """
    if batches is not None and gammas is not None:
        ladder = [(tuple(batches), tuple(gammas))]
    else:
        ladder = [(tuple(batches or b), tuple(gammas or g)) for b, g in LADDER]
    chosen = ladder[0]
    est = 0.0
    specs = [target.spec] + [d.spec for d in drafters.values() if isinstance(d, Transformer)]
    contexts = [64, 64 + 2 * tokens]  # the sweeps' contexts (spec_check's kw)
    staged = 0.0
    for bs, gs in ladder:
        t = sum(predicted_block_s(target, drafters, hw, dtype, b, gs, tokens, _groups(b), context, host_s) for b in bs)
        t += len(bs) * sweep_visit_s(specs, hw, dtype, bs, gs, contexts, host_s)  # a visit before every block
        c = shape_s * shapes(bs, gs) if shapes is not None and shape_s > 0 else 0.0
        if seconds is None or t + c <= seconds / 3 or (bs, gs) == ladder[0]:
            chosen, est, staged = (bs, gs), t, c
        if seconds is None:
            break
    top = ladder[-1]
    left_out = {
        **{f"batch {b}": "" for b in top[0] if b not in chosen[0]},
        **{f"gamma {g}": "" for g in top[1] if g not in chosen[1]},
    }
    return {
        "batches": list(chosen[0]),
        "gammas": list(chosen[1]),
        "tokens": tokens,
        "predicted_rep_s": est,
        "predicted_compile_s": staged,
        "host_s_per_pass": host_s,
        # what the largest step measures and this plan does not: its first repetition would not fit a third
        "not_planned": list(left_out),
    }


# -- a noisy machine: look first, then fewer, longer pairs of the drafter asked for (docs/guide/measuring.md) --------

#: the noise probe: this many short baseline runs of this many new tokens each (a second or two on a CPU)
NOISE_PROBE_RUNS = 5
NOISE_PROBE_TOKENS = 8
#: new tokens per sequence of a timed run on a quiet machine (``--tokens``' default there)
QUIET_TOKENS = 32
#: the longest side of a pair (new tokens, over its runs) a plan asks for, and the shortest it falls back to
MAX_PLAN_TOKENS = 256
MIN_PLAN_TOKENS = 16
#: the most runs a pair's side is made of (each of the prompt groups in turn). Beside a busy core the noise came in
#: bursts of seconds: 12 pairs of 64-token sides disagreed by 1-6% in five rows of six, 3-4 pairs of 448-512-token
#: sides by 9% and 25% (the offline pair, 2026-12-07; BENCHMARKS.md), so a plan buys pairs before it buys length
MAX_RUNS_PER_SIDE = 4
#: fewest pairs a row's median and spread are taken over, and the most a plan asks for before adding a drafter
MIN_PAIRS = 5
MAX_PAIRS = 12
#: points of each verify sweep a noisy plan's one visit keeps whatever they cost: a fit of 8 free parameters to the
#: 3 a quiet check keeps (it revisits) matched anything (a 153 s check beside a busy core, 2026-12-07)
NOISY_SWEEP_POINTS = 8
#: gammas the noisy plan chooses its one per drafter from (the best predicted at the assumed acceptance)
NOISY_GAMMAS = (1, 2, 3, 4)


@dataclass(frozen=True)
class MachineLook:
    """The machine before the timed runs: its load, and how far short baseline runs disagreed.

    ``spread`` is the median over pairs of the probe's runs of |a - b| / their mean, per-token times of runs of
    ``probe_tokens`` new tokens (the same measure a row's pairs are judged by); ``step_s`` their median seconds
    per token; ``others_cores`` the cores' worth of other processes' work while it ran.
    """

    load_avg_1m: float
    cpus: int
    others_cores: float
    step_s: float
    spread: float
    probe_tokens: int = NOISE_PROBE_TOKENS

    @property
    def busy(self) -> list[str]:
        """What says the machine is not this check's alone (empty on a quiet one)."""
        out = []
        if np.isfinite(self.load_avg_1m) and self.load_avg_1m > self.cpus:
            out.append(f"load average {self.load_avg_1m:.1f} on {self.cpus} cores")
        if np.isfinite(self.others_cores) and self.others_cores > OTHERS_LIMIT:
            out.append(f"other processes kept {self.others_cores:.1f} cores busy")
        return out

    @property
    def noisy(self) -> bool:
        from measure.specval import NOISE_FLOOR

        return bool(self.busy) or (np.isfinite(self.spread) and self.spread > NOISE_FLOOR / 2)

    def tokens_needed(self) -> int:
        """New tokens a pair's side needs for two sides to agree within half the noise floor (NOISE_FLOOR / 2).

        A side's per-token time averages its steps, so where the machine disturbs steps independently its spread
        falls as 1 / sqrt(tokens): ``probe_tokens * (spread / target)^2`` tokens. On a busy machine at least twice
        the quiet default (a probe of a few seconds can miss what another process does next); within
        [QUIET_TOKENS, MAX_PLAN_TOKENS].
        """
        from measure.specval import NOISE_FLOOR

        spread = self.spread if np.isfinite(self.spread) else 0.0
        need = self.probe_tokens * (spread / (NOISE_FLOOR / 2)) ** 2
        floor = 2 * QUIET_TOKENS if self.noisy else QUIET_TOKENS
        return int(min(MAX_PLAN_TOKENS, max(floor, int(np.ceil(need)))))

    def describe(self) -> str:
        what = ", ".join(self.busy) if self.busy else f"load average {self.load_avg_1m:.1f} on {self.cpus} cores"
        return (
            f"the machine: {what}; {NOISE_PROBE_RUNS} baseline runs of {self.probe_tokens} tokens took "
            f"{1e3 * self.step_s:.1f} ms per token and disagreed by {self.spread:.1%}: "
            + ("noisy, so fewer, longer runs" if self.noisy else "quiet")
        )

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("load_avg_1m", "cpus", "others_cores", "step_s", "spread")} | {
            "noisy": self.noisy
        }


def look_at_machine(
    target: Any, prompt: list[int], runs: int = NOISE_PROBE_RUNS, tokens: int = NOISE_PROBE_TOKENS
) -> MachineLook:
    """Time ``runs`` short baseline runs of ``tokens`` new tokens: the machine's speed and noise now."""
    from measure.decode import autoregressive_generate
    from measure.specval import _pair_spread, machine_load

    start = machine_load()["ticks"]
    autoregressive_generate(target, [prompt], 2)  # a first use pays for itself
    per_token = []
    for _ in range(runs):
        r = autoregressive_generate(target, [prompt], tokens)
        per_token.append(r.decode_s / max(1, r.n_tokens))
    load = machine_load(start)
    return MachineLook(
        float(load["load_avg_1m"]),
        int(load["cpus"] or 1),
        float(load["others_cores"]),
        float(np.median(per_token)),
        _pair_spread(per_token),
        tokens,
    )


@dataclass(frozen=True)
class PairPlan:
    """What a check on a noisy machine measures: ``pairs`` pairs of each configuration (drafter, gamma) at batch 1,
    the drafter asked for first, a pair's side ``runs_per_side`` runs of ``tokens`` new tokens; ``predicted_s``
    with the planning margin.

    ``why_not`` is "" when the drafter asked for gets its MIN_PAIRS pairs as long as the noise needs; else what
    falls short, and what would work."""

    tokens: int
    pairs: int
    configs: tuple[tuple[str, int], ...]
    predicted_s: float
    left_out: dict[str, str]
    why_not: str = ""
    runs_per_side: int = 1
    #: seconds (margin included) that MIN_PAIRS pairs of the first drafter with the sides the noise needs would take
    needed_s: float = 0.0

    def line(self) -> str:
        n = len(self.configs)
        which = ", ".join(f"{label} at gamma {g}" for label, g in self.configs)
        side = f"{self.runs_per_side} runs x " if self.runs_per_side > 1 else ""
        return (
            f"planned: {n} drafter{'s' if n != 1 else ''} x {self.pairs} pairs of {side}{self.tokens} tokens a side "
            f"({which}; batch 1), ~{self.predicted_s:.0f} s with the sweeps"
        )


def plan_pairs(
    look: MachineLook,
    labels: Sequence[str],
    gamma: dict[str, int],
    speedup_guess: dict[str, float],
    sweep_s: dict[str, float],
    seconds: float | None,
    tokens: int | None = None,
    budget_words: str = "the budget",
    max_run: int | None = None,
) -> PairPlan:
    """The plan for a noisy machine, sized to ``seconds``: the first of ``labels`` (the drafter asked for) at
    ``gamma[label]``, MIN_PAIRS pairs whose sides are as long as the noise needs (``look.tokens_needed()`` new
    tokens), then more pairs of it (up to MAX_PAIRS) while they fit, then each other drafter at as many pairs.

    A side is runs of ``tokens`` new tokens where given, else of up to ``max_run`` (the longest a model decodes
    well), as many as make it long enough (up to MAX_RUNS_PER_SIDE). Prices: a baseline run of T tokens takes
    ``T * look.step_s`` (measured now), a speculative one that over ``speedup_guess[label]``; one more baseline side
    per block and a warm-up per configuration; ``sweep_s[label]`` the verify sweeps' visit that drafter brings
    (the target's with the first); all times PLAN_MARGIN. Where the first drafter's pairs do not fit, the sides
    shorten (to MIN_PLAN_TOKENS at least) and ``why_not`` says by how much; where not even those fit, ``pairs``
    is MIN_PAIRS all the same (the first block always runs) and ``why_not`` names the seconds that would fit.
    """
    from measure.specval import PLAN_MARGIN, WARMUP_TOKENS

    step = look.step_s

    def total(chosen: Sequence[str], n: int, t: int, r: int) -> float:
        runs = r * t * step
        runs += sum(WARMUP_TOKENS * step + n * r * t * step * (1 + 1 / speedup_guess[lab]) for lab in chosen)
        return sum(sweep_s[lab] for lab in chosen) + PLAN_MARGIN * runs

    def shape(side: int) -> tuple[int, int]:
        """(tokens per run, runs per side) for a side of ``side`` new tokens."""
        t = int(tokens) if tokens is not None else min(side, max_run or side)
        return t, int(min(MAX_RUNS_PER_SIDE, max(1, -(-side // t))))

    first = labels[0]
    want = look.tokens_needed()
    if tokens is not None:
        want = max(want, int(tokens))
    avail = float("inf") if seconds is None else float(seconds)
    t, r = shape(want)
    full = t * r  # the side asked for, as the runs can make it
    side = full
    while side > MIN_PLAN_TOKENS and total([first], MIN_PAIRS, t, r) > avail:
        side = max(MIN_PLAN_TOKENS, int(side * 0.8))
        t, r = shape(side)
        if tokens is not None and r == 1:
            break
    why = ""
    need = total([first], MIN_PAIRS, *shape(full))
    if total([first], MIN_PAIRS, t, r) > avail:
        why = (
            f"{budget_words} leaves ~{avail:.0f} s for the runs, and {MIN_PAIRS} pairs of {first} with "
            f"{full}-token sides (and its verify sweeps) need ~{need:.0f} s"
        )
    elif t * r < full:
        why = (
            f"a pair's side is {t * r} tokens, not the {full} this machine's noise needs: {MIN_PAIRS} pairs of "
            f"{first} with {full}-token sides need ~{need:.0f} s of the ~{avail:.0f} s left"
        )
    # the drafter asked for gets its pairs first: a median and a spread over more pairs outvote a burst of another
    # process's work that a few pairs would carry; another drafter comes in only at as many pairs
    n = MIN_PAIRS
    while n < MAX_PAIRS and total([first], n + 1, t, r) <= avail:
        n += 1
    chosen, left = [first], {}
    for lab in labels[1:]:
        if total([*chosen, lab], n, t, r) <= avail:
            chosen.append(lab)
        else:
            left[lab] = f"not planned: {n} pairs of it would not fit after {first}'s"
    configs = tuple((lab, gamma[lab]) for lab in chosen)
    return PairPlan(t, n, configs, total(chosen, n, t, r), left, why, r, need)


def noisy_plan(
    target: Any,
    drafters: dict[str, Any],
    hw: Hardware,
    dtype: str,
    host_s: float,
    look: MachineLook,
    bud: Budget,
    tokens: int | None,
    max_tokens: int | None = None,
) -> PairPlan:
    """:func:`plan_pairs` priced for this check: each drafter's gamma and speedup the a-priori roofline's best at
    the acceptance assumed (PLAN_ALPHA), its verify sweeps priced a-priori and rescaled by the baseline step the
    look measured against the one priced (a loaded machine runs slower than its microbenchmarks said).
    ``max_tokens``: the longest run the models decode well (the offline pair was trained on 128-byte sequences:
    past them its acceptance collapses, and a speedup measured there says nothing)."""
    from measure.specval import PLAN_MARGIN, pass_pairs_steps

    priced_step = float(pass_time(target.spec, hw, 1, 1, 64, dtype).t_step_s) + host_s
    scale = max(1.0, look.step_s / priced_step) if priced_step > 0 else 1.0
    gamma: dict[str, int] = {}
    guess: dict[str, float] = {}
    sweep_s: dict[str, float] = {}
    contexts = [64, 64 + 2 * QUIET_TOKENS]
    for k, (label, d) in enumerate(drafters.items()):
        alpha = PLAN_ALPHA["draft" if isinstance(d, Transformer) else "early exit"]
        cost = cost_model_of(d)
        by_g = {
            g: float(
                speedup(hw, target.spec, cost, alpha, g, batch=1, context=96, dtype=dtype, overhead_s=host_s).speedup
            )
            for g in NOISY_GAMMAS
        }
        gamma[label] = max(by_g, key=lambda g: by_g[g])
        guess[label] = max(1e-3, by_g[gamma[label]])
        specs = ([target.spec] if k == 0 else []) + ([d.spec] if isinstance(d, Transformer) else [])
        sweep_s[label] = sum(
            scale * sweep_visit_s([s], hw, dtype, [1], [gamma[label]], contexts, host_s) for s in specs
        )
        # and the prediction's passes timed in pairs with plain steps (measure.specval.time_pass_pairs)
        sweep_s[label] += PLAN_MARGIN * pass_pairs_steps(gamma[label], MIN_PAIRS) * look.step_s
    cap = (target.spec.max_context - PROMPT_TOKENS - 128) // 2  # the sweeps' widest pass at twice the new tokens
    cap = max(MIN_PLAN_TOKENS, min(cap, max_tokens) if max_tokens is not None else cap)
    stated = bud.stated
    words = f"--budget {stated:g}" if stated is not None else "the budget"
    seconds = bud.remaining_s if bud.limited else None
    return plan_pairs(look, list(drafters), gamma, guess, sweep_s, seconds, tokens, words, cap)


def _recorded_pair_plan(folder: Path) -> PairPlan | None:
    """The noisy-machine plan a check in ``folder`` measured with (a resume measures what it recorded)."""
    try:
        rec = json.loads((folder / "plan.json").read_text()).get("pair_plan")
    except (OSError, ValueError, AttributeError):
        return None
    if not rec:
        return None
    return PairPlan(
        int(rec["tokens"]), int(rec["pairs"]), tuple((str(a), int(b)) for a, b in rec["configs"]),
        float(rec["predicted_s"]), dict(rec["left_out"]), str(rec.get("why_not", "")), int(rec.get("runs_per_side", 1)), float(rec.get("needed_s", 0.0)),
    )  # fmt: skip


#: the largest |error| of a speedup row that is reported as the model's without evidence that the machine was quiet
ERROR_LIMIT = 0.25
#: CPU steal (percent of the session's ticks taken by the hypervisor) above which the machine was not ours alone
STEAL_LIMIT = 10.0
#: cores' worth of other processes' work during the session above which the machine was not ours alone
OTHERS_LIMIT = 0.5


def mark_unexplained_noise(df: pd.DataFrame, load: dict[str, Any]) -> pd.DataFrame:
    """Mark ``noisy`` the rows whose |error| exceeds ERROR_LIMIT while the machine was measurably noisy; say why.

    ``measure.specval.mark_noise`` calls a row noisy when its bracketing probes, or its repetitions, disagreed by
    more than its error. A loaded machine also shows up as a spread (either) above NOISE_FLOOR that is smaller
    than a large error, as more runnable processes than cores (``load_avg_1m`` above ``cpus``), as other
    processes' work during the session (``others_cores`` above OTHERS_LIMIT: what a load average, lagging by a
    minute, misses in a short check) or as steal: an error above ERROR_LIMIT measured then is not the model's to
    answer for, so it is marked noisy (and left out of the error summary and the best-gamma table) with its
    spreads beside it. A row above the limit on a quiet machine stays unmarked: that is a miss of the model.
    ``noise`` says why each noisy row is noisy ("" otherwise).
    """
    from measure.specval import NOISE_FLOOR

    out = df.copy()
    if out.empty:
        out["noise"] = pd.Series(dtype=str)
        return out
    cpus = load.get("cpus") or 1
    one, steal = float(load.get("load_avg_1m", np.nan)), float(load.get("steal_pct", np.nan))
    busy = []
    if np.isfinite(one) and one > cpus:
        busy.append(f"load average {one:.1f} on {cpus} cores")
    if np.isfinite(steal) and steal > STEAL_LIMIT:
        busy.append(f"CPU steal {steal:.0f}%")
    others = float(load.get("others_cores", np.nan))
    if np.isfinite(others) and others > OTHERS_LIMIT:
        busy.append(f"other processes kept {others:.1f} cores busy")
    spread = out["probe_spread"].astype(float)
    reps = out["rep_spread"].astype(float) if "rep_spread" in out else pd.Series(np.nan, index=out.index)
    # the spread of a paired prediction's own pairs (NaN for a fitted one): a prediction is noisy the same way
    preds = out["pred_spread"].astype(float) if "pred_spread" in out else pd.Series(np.nan, index=out.index)
    err = out["rel_error"].astype(float).abs()
    big = (err > ERROR_LIMIT).to_numpy()
    wide = (spread > NOISE_FLOOR).to_numpy()
    wide_reps = (reps > NOISE_FLOOR).to_numpy()  # NaN (one repetition) compares False
    wide_preds = (preds > NOISE_FLOOR).to_numpy()
    noisy = out["noisy"].to_numpy(dtype=bool, copy=True) if "noisy" in out else np.zeros(len(out), bool)
    reasons = []
    for i in range(len(out)):
        why = []
        if str(out["flag"].iloc[i]):
            why.append(str(out["flag"].iloc[i]))
        if noisy[i] and spread.iloc[i] > max(err.iloc[i], NOISE_FLOOR):
            why.append(f"baselines disagreed by {spread.iloc[i]:.0%}, more than the error")
        if noisy[i] and reps.iloc[i] > max(err.iloc[i], NOISE_FLOOR):
            why.append(f"repetitions disagreed by {reps.iloc[i]:.0%}, more than the error")
        if noisy[i] and preds.iloc[i] > max(err.iloc[i], NOISE_FLOOR):
            why.append(f"the prediction's pass pairs disagreed by {preds.iloc[i]:.0%}, more than the error")
        if big[i] and not noisy[i] and (wide[i] or wide_reps[i] or wide_preds[i] or busy):
            seen = [f"baselines disagreed by {spread.iloc[i]:.0%}"] if wide[i] else []
            seen += [f"repetitions disagreed by {reps.iloc[i]:.0%}"] if wide_reps[i] else []
            seen += [f"the prediction's pass pairs disagreed by {preds.iloc[i]:.0%}"] if wide_preds[i] else []
            why.append(
                f"error {err.iloc[i]:.0%} above {ERROR_LIMIT:.0%} while the machine was noisy ("
                + ", ".join(seen + busy)
                + ")"
            )
            noisy[i] = True
        reasons.append("; ".join(why) if noisy[i] else "")
    out["noisy"] = noisy
    out["noise"] = reasons
    return out


def _prediction_words(r: Any) -> str:
    """How a row's prediction was made, for the first line: a paired one's pairs and their spread ("" for a fit)."""
    if str(r.get("prediction", "")) != "paired passes":
        return ""
    n, spread = int(r.get("pred_pairs", 0)), float(r.get("pred_spread", np.nan))
    agree = f", disagreeing by {spread:.0%}" if np.isfinite(spread) else ""
    return f" (from {n} pairs of its passes and plain steps{agree})"


def verdict(df: pd.DataFrame, payload: dict[str, Any]) -> str:
    """The first line of ``measure spec``'s answer: the drafter asked for (``payload["requested"]``), its best row
    the check can stand behind (not noisy), or why there is none and what would work.

    What would work is named from what was seen: a quieter machine (with what made this one busy), a larger
    ``--budget`` where one would do, or a GPU. A pair's noise falls as the square root of its sides' length, so
    pairs that disagreed by ``spread`` agree within the error with sides (spread / error)^2 times as long (at
    least twice): the budget that buys them is the fixed steps' seconds plus the decoding's times that factor.
    Where those sides would be longer than a plan makes them (MAX_PLAN_TOKENS), no budget would do, and it says so.
    Where the pairs agreed and only the prediction missed (an error above ERROR_LIMIT on a busy machine), it gives
    the speedup measured, and the budget buys a further repetition (the verify sweeps revisited for the fit).
    """
    from measure.specval import NOISE_FLOOR

    req = str(payload.get("requested") or (df["drafter"].iloc[0] if len(df) else "the drafter"))
    rows = df[df["drafter"] == req] if len(df) and "drafter" in df else df.iloc[0:0]
    good = rows[~rows["noisy"].astype(bool) & rows["speedup_measured"].notna()] if len(rows) else rows
    if len(good):
        r = good.loc[good["speedup_measured"].idxmax()]
        spread = float(r.get("rep_spread", np.nan))
        pairs = int(r.get("pairs", r.get("repetitions", 1)))
        how = (
            f"their ratios disagreed by {spread:.0%}"
            if np.isfinite(spread)
            else f"its baselines by {r['probe_spread']:.0%}"
        )
        return (
            f"{req} at gamma {int(r['gamma'])}, batch {int(r['batch'])}: {r['speedup_measured']:.2f}x measured (the "
            f"median of {pairs} pair{'s' if pairs != 1 else ''}; {how}), {r['speedup_predicted']:.2f}x predicted"
            f"{_prediction_words(r)}, an error of {r['rel_error']:+.0%}"
        )
    plan = payload.get("plan") or {}
    why_plan = (plan.get("pair_plan") or {}).get("why_not") or ""
    dropped = {k: v for k, v in (payload.get("dropped") or {}).items() if k.startswith(req)}
    factor = 2.0
    found = False  # a spread and an error to size the --budget by
    what = "longer pairs"  # what a larger budget buys
    if len(rows):
        err = rows["rel_error"].abs().astype(float)
        nan = pd.Series(np.nan, index=rows.index)
        spread = np.fmax(rows.get("rep_spread", nan).astype(float), rows.get("probe_spread", nan).astype(float))
        spread = np.fmax(spread, rows.get("pred_spread", nan).astype(float))  # the prediction's pairs, where paired
        best = int(np.nanargmin(err.to_numpy())) if err.notna().any() else 0
        r = rows.iloc[best]
        reason = f"its rows are noise ({r['noise'] or 'noisy'})"
        ratio = float(spread.iloc[best]) / max(float(err.iloc[best]) if np.isfinite(err.iloc[best]) else 0.0,
                                               NOISE_FLOOR)  # fmt: skip
        if np.isfinite(ratio):
            factor, found = max(2.0, ratio**2), True
        steady = np.isfinite(ratio) and ratio <= 1.0 and np.isfinite(r.get("speedup_measured", np.nan))
        if steady and not str(r.get("flag", "")):
            # the pairs agreed: the measurement stands, and it is the prediction that missed on a busy machine (its
            # verify sweeps, visited once, are what a further repetition revisits)
            pairs = int(r.get("pairs", r.get("repetitions", 1)))
            paired = str(r.get("prediction", "")) == "paired passes"
            held = "a prediction on a busy machine" if paired else "a fit to a busy machine's sweeps"
            reason = (
                f"{r['speedup_measured']:.2f}x was measured at gamma {int(r['gamma'])} ({pairs} pairs agreeing within "
                f"{float(spread.iloc[best]):.0%}), but the {r['speedup_predicted']:.2f}x predicted"
                f"{_prediction_words(r)} is off by {r['rel_error']:+.0%}, more than the {ERROR_LIMIT:.0%} {held} is "
                "held to"
            )
            if not paired:
                what, found = "a further repetition: the verify sweeps revisited for the fit", False
    elif dropped:
        reason = "it was not measured (" + "; ".join(f"{k}: {v}" for k, v in dropped.items()) + ")"
    else:
        reason = "it was not measured"
    if why_plan:
        reason += f"; {why_plan}"
    load = payload.get("load") or {}
    machine = payload.get("machine") or {}
    seen = []
    one, cpus = float(load.get("load_avg_1m", np.nan)), load.get("cpus") or machine.get("cpus") or 1
    if np.isfinite(one):
        seen.append(f"load average {one:.1f} on {cpus} cores")
    others = float(load.get("others_cores", np.nan))
    if np.isfinite(others) and others > OTHERS_LIMIT:
        seen.append(f"other processes kept {others:.1f} cores busy")
    stated = payload.get("budget_s")
    steps = payload.get("steps_s") or {}
    decoding = float(steps.get("decoding_runs", 0.0))
    fixed = sum(float(v) for k, v in steps.items() if k != "decoding_runs")
    pp = plan.get("pair_plan") or {}
    side = int(pp.get("tokens", plan.get("tokens", QUIET_TOKENS))) * int(pp.get("runs_per_side", 1))
    quieter = f"a quieter machine ({', '.join(seen) or 'nothing else running'})"
    if found and side * factor > MAX_PLAN_TOKENS:
        budget = (
            f"no --budget would do here (its pairs would need {side * factor:.0f}-token sides, past the "
            f"{MAX_PLAN_TOKENS} a plan makes)"
        )
        return f"no speedup of {req} that this machine let the check stand behind: {reason}. What would work: " + (
            f"{quieter} or a GPU (--device cuda); {budget}"
        )
    if stated and decoding > 0:
        # the sides the pairs' spread asks for, or the ones the plan could not afford, whichever is dearer
        need = max(fixed + decoding * factor, fixed + float(pp.get("needed_s") or 0.0))
        budget = f"--budget {int(np.ceil(need))} ({what})"
    elif stated:
        budget = f"--budget {int(np.ceil(float(stated) * factor))}"
    else:
        budget = "a larger --budget"
    return (
        f"no speedup of {req} that this machine let the check stand behind: {reason}. What would work: {quieter}, "
        f"{budget}, or a GPU (--device cuda)"
    )


def apriori_profile(
    path: Path, dev: Any, dtype: str, nbytes: int | None, short: bool, stream_bytes_per_s: float | None = None
) -> Hardware:
    """Microbenchmark ``dev`` into the a-priori profile at ``path``; ``short``: the quick set (see SHORT_MICROBENCH_BELOW_S).

    The short set measures the roofline's own figures (copy bandwidth, the rate a one-row product streams weights,
    the best matmul rate of ``dtype``, dispatch) with fewer repetitions, and leaves the memory/compute overlap at
    the roofline's assumption (full): the overlap benchmark times four products of its own matrix, each through a
    kernel chosen by timing every candidate, and took 3.3 of the short set's 5.4 s on an AVX2 EPYC beside a busy
    core, while the fit to the verify sweeps measures the overlap anyway. Its streaming rate is
    ``stream_bytes_per_s``, the device probe's (the same one-row pass through the harness's kernel), or measured
    here the same way where no probe ran. Each figure is noisier, and the a-priori error on the page is that of a
    quicker look.
    """
    from measure.choose import stream_rate
    from measure.device import describe, match_profile
    from measure.microbench import (
        bandwidth,
        dispatch_overhead,
        matmul_flops,
        measure_profile,
        measured_hardware,
    )
    from roofline.costing.hardware import write_profile

    if not short:
        return measure_profile(path, dev, (dtype,), nbytes=nbytes)
    results = dict(bandwidth(dev, nbytes=nbytes, repeats=5))
    mm = matmul_flops(dtype, dev, repeats=3, cap_s=0.3)
    results[f"matmul_{dtype}"] = mm
    results["dispatch"] = dispatch_overhead(dev, repeats=50)
    stream = stream_bytes_per_s if stream_bytes_per_s is not None else stream_rate(dev, nbytes or 256 << 20, dtype)
    match = match_profile(describe(dev))
    base = load_hardware(match) if match else None
    path.parent.mkdir(parents=True, exist_ok=True)
    write_profile(measured_hardware(results, dev, base, stream_bytes_per_s=stream), path)
    return load_hardware(str(path))


def _groups(batch: int) -> int:
    """Prompt groups decoded per configuration: acceptance averaged over at least 4 prompts."""
    return max(1, 4 // batch)


def sweep_tokens(
    gammas: Sequence[int], batches: Sequence[int], crossovers: Sequence[float] = (), cap: int = 128
) -> list[int]:
    """New tokens per pass for the verify sweeps: every verify width the decoding runs, a few beyond, and
    half, one and two times each predicted crossover K (where the curve bends: what the read-out of K needs)."""
    top = max(batches) * (max(gammas) + 1)
    near = {int(round(f * k)) for k in crossovers if np.isfinite(k) for f in (0.5, 1.0, 2.0)}
    return sorted(
        {1, 2, 3, 4, 6, *[g + 1 for g in gammas], 12, 16, top // max(batches)} | {n for n in near if 1 <= n <= cap}
    )


#: the device choice a check measured with (width, dtype, threads), reused by a resume
CHOICE = "choice.json"


def _recorded_choice(folder: Path, width: int | None, dtype: str | None) -> tuple[int | None, str | None, int | None]:
    """(width, dtype, threads) recorded by the check in ``folder``; a different one asked for is an error."""
    path = folder / CHOICE
    if not path.is_file():
        return width, dtype, None
    try:
        rec = json.loads(path.read_text())
        w, d, t = rec.get("width"), rec.get("dtype"), rec.get("threads")
        ok = isinstance(w, int) and w >= 1 and d in ("fp32", "bf16") and (t is None or isinstance(t, int) and t >= 1)
    except (OSError, ValueError, AttributeError):
        ok = False
    if not ok:
        raise SpecroofError(f"{str(path)!r} is damaged: cannot tell what the check measured; --overwrite to restart")
    if width is not None and width != w:
        raise SpecroofError(f"cannot resume: {str(folder)!r} was measured at --width {w}, not {width}")
    if dtype is not None and dtype != d:
        raise SpecroofError(f"cannot resume: {str(folder)!r} was measured in {d}, not {dtype}")
    return w, d, t


#: bytes of every prompt the check decodes (measure.pair.held_out_prompts' default length)
PROMPT_TOKENS = 64


def cache_sizes(batches: Sequence[int] | None, gammas: Sequence[int] | None, tokens: int) -> tuple[int, int, int]:
    """(batch, slots per sequence, widest sweep pass) the check's caches must hold: the largest batch, and the longest
    of a decoding run (a prompt, its new tokens, and a last round that may overshoot by a full draft, with the draft
    running as far ahead: measure.decode.speculative_generate's headroom) and of the verify sweeps (a context of the
    prompt and twice the new tokens, then their widest pass)."""
    g = max(gammas) if gammas else max(max(gs) for _, gs in LADDER)
    b = max(batches) if batches else max(max(bs) for bs, _ in LADDER)
    new = max(128, g + 1)  # the verify sweeps' widest pass (sweep_tokens caps crossover points at 128)
    decode = PROMPT_TOKENS + tokens + 2 * g + 6
    return b, max(PROMPT_TOKENS + 2 * tokens + new, decode), new


def _check_sizes(
    spec: Any, dtype: str | None, batches: Sequence[int] | None, gammas: Sequence[int] | None, tokens: int, dev: Any
) -> None:
    """Before anything runs: the longest sequence must fit the model's context, the largest batch the memory."""
    from measure.device import device_memory
    from measure.sweep import footprint_bytes

    g = max(gammas) if gammas else max(max(gs) for _, gs in LADDER)
    b, seq, new = cache_sizes(batches, gammas, tokens)
    if PROMPT_TOKENS + tokens + 2 * g + 6 > spec.max_context:
        room = (spec.max_context - PROMPT_TOKENS - tokens - 6) // 2
        raise SpecroofError(
            f"--gamma {g}: {PROMPT_TOKENS}-token prompts, {tokens} new tokens and a last round that may run "
            f"{2 * g} tokens past them exceed {spec.name}'s max context {spec.max_context}; "
            + (f"use --gamma up to {room}" if room >= 1 else "use fewer --tokens")
        )
    if seq > spec.max_context:
        room = (spec.max_context - PROMPT_TOKENS - new) // 2
        raise SpecroofError(
            f"--tokens {tokens}: {PROMPT_TOKENS}-token prompts, {2 * tokens} tokens of context and {new}-token "
            f"verify passes exceed {spec.name}'s max context {spec.max_context}; use --tokens up to {max(1, room)}"
        )
    total, _ = device_memory(dev)
    f = footprint_bytes(spec, dtype or "fp32", b, new, 64 + 2 * tokens)
    if total is not None and f["total"] > total:
        raise SpecroofError(
            f"--batch {b}: {spec.name} in {dtype or 'fp32'} needs about {f['total'] / 1e9:.3g} GB "
            f"(KV cache {f['kv'] / 1e9:.3g}, activations {f['activations'] / 1e9:.3g}), more than this device's "
            f"{total / 1e9:.3g} GB; use a smaller --batch"
        )


def _check_capture_fits(models: Sequence[Transformer], batch: int, seq: int, dev: Any) -> None:
    """Refuse, before the caches are allocated, a batch whose caches and graphs do not fit the free device memory
    (the weights are there already), naming the largest batch that fits (measure.graphs.check_batch_fits)."""
    from measure.device import device_memory
    from measure.graphs import check_batch_fits
    from measure.models import dtype_name
    from measure.sweep import footprint_bytes

    _, free = device_memory(dev)
    if free is None:
        return
    kv = act = 0.0
    for m in models:
        f = footprint_bytes(m.spec, dtype_name(m.dtype), 1, 128, seq)
        el = m.embed_tokens.weight.element_size()
        kv += f["kv"]
        # the widest pass's activations, and the logits every captured pass keeps (a few dozen shapes of up to
        # 128 tokens: counted as 16 such passes)
        act += f["activations"] + 16 * 128 * m.spec.vocab_size * el
    check_batch_fits(batch, free, kv, act, what="the check's caches and CUDA graphs")


def host_fit_summary(measured: pd.DataFrame) -> dict[str, Any]:
    """The host lines fitted to the runs (measure.fit.fit_host_time): seconds of host time per round and per
    baseline step against the batch, and the host's share of a round as measured (docs/cost-model.md, section 39)."""
    from measure.fit import fit_host_time

    if measured.empty or "host_ms_per_round" not in measured:
        return {}
    rounds = fit_host_time(measured["batch"], measured["host_ms_per_round"] / 1e3)
    out: dict[str, Any] = {"round_s": rounds.intercept_s, "round_per_seq_s": rounds.per_seq_s}
    if "host_ms_per_step" in measured:
        steps = fit_host_time(measured["batch"], measured["host_ms_per_step"] / 1e3)
        out |= {"step_s": steps.intercept_s, "step_per_seq_s": steps.per_seq_s}
    if "host_share_measured" in measured:
        out["round_share_median"] = float(measured["host_share_measured"].median())
    return out


def spec_check(
    out: str | Path,
    *,
    budget_s: float | Budget | None = 120.0,
    device: Any = None,
    dtype: str | None = None,
    width: int | None = None,
    gammas: Sequence[int] | None = None,
    batches: Sequence[int] | None = None,
    tokens: int | None = 32,
    early_exit: int | None = 1,
    draft: bool = True,
    hardware: Hardware | str | None = None,
    statistic: str | None = "min",
    repeats: int = 5,
    resume: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    target_model: Transformer | None = None,
    draft_model: Transformer | None = None,
    graphs: str = "auto",
    compile: bool = False,
) -> SpecCheck:
    """Measure and predict speculative speedups on this device within ``budget_s`` seconds (None: no limit).

    The budget covers every step, the fixed ones included (the device probe, the microbenchmarks, the warm-ups,
    the fits): the decoding runs get what is left less CLOSING_RESERVE_S. A :class:`Budget` may be passed to
    count from an earlier start (``measure spec`` counts from the process's start, the report's section from
    before torch was imported). Every unit of the runs is bounded (docs/cost-model.md, section 44): the first
    block's sweep visit (3 points of each sweep at least), its probe and its first configuration always run,
    so a budget smaller than the fixed steps and those is overrun by them; every other point, block,
    configuration and repetition runs only while its price, rescaled by what the units so far took, fits. What
    was left out is named in the payload's ``dropped``.

    Uses the offline pair (``measure.pair``) unless ``target_model`` (and ``draft_model``)
    are given; ``width``/``dtype`` default to what ``measure.choose`` finds this device
    runs well. ``early_exit``: also an early-exit drafter after that many target layers
    (None: none); ``draft=False`` skips the separate draft model.

    ``graphs`` (auto, on, off) and ``compile``: every pass of the sweeps and the decoding runs, the draft's
    chain whole, captured as CUDA graphs (auto: on a GPU) and each layer compiled first
    (:mod:`measure.graphs`); capturing and compiling are spent inside the budget (the payload's
    ``steps_s["setup"]`` and ``runner``). On a GPU each round's host time is measured apart from
    its passes' device time, and the predictions price both (docs/cost-model.md, section 39).
    """
    from measure.pair import held_out_prompts, load_pair
    from measure.specval import (
        PASS_PAIRS,
        PLAN_MARGIN,
        UnitCosts,
        error_summary,
        measure_speedups,
        pass_pairs_steps,
        predict_speedups,
        time_pass_pairs,
    )
    from measure.sweep import pool_visits, sweep, unvisited_words

    say = log or (lambda _msg: None)
    bud = budget_s if isinstance(budget_s, Budget) else Budget(budget_s)
    budget_s = bud.seconds
    if tokens is not None:
        tokens = int(check_min("tokens", tokens, 1, integer=True))
        tokens = check_quantity("tokens", tokens, "tokens")
    # None: as the machine allows (look_at_machine); the checks before the look size for a quiet machine's runs
    size_tokens = tokens if tokens is not None else QUIET_TOKENS
    repeats = int(check_min("repeats", repeats, 1, integer=True))
    repeats = check_quantity("repeats", repeats, "batch")
    if gammas is not None:
        gammas = [int(g) for g in check_min("gamma", list(gammas), 1, integer=True)]
        gammas = [check_gamma(g) for g in gammas]
    if batches is not None:
        batches = [int(b) for b in check_min("batch", list(batches), 1, integer=True)]
        batches = [check_quantity("batch", b, "batch") for b in batches]
    if width is not None and (width < 1 or width & (width - 1) or width > max(WIDTHS)):
        raise SpecroofError(f"width must be a power of two in [1, {max(WIDTHS)}] (got {width})")
    if statistic not in ("min", "median", None):
        raise SpecroofError(f"statistic must be 'min' or 'median' (got {statistic!r})")
    if dtype is not None and dtype not in ("fp32", "bf16"):
        raise SpecroofError(f"dtype must be fp32 or bf16 (got {dtype!r})")
    dev = resolve_device(device)
    from measure.graphs import inductor_missing, use_graphs

    use_graphs(graphs, dev)  # --graphs on without a GPU: refused before any work
    if compile and (missing := inductor_missing(dev)):
        raise SpecroofError(missing)
    apriori_hw = load_hardware(hardware) if hardware is not None else None
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise SpecroofError(f"--out {str(folder)!r} is a file, not a folder")
    choice: DeviceChoice | None = None
    pair_info: dict[str, Any] = {}
    threads: int | None = None
    # the longest run the offline pair decodes within the length it was trained on (None: a checkpoint's own)
    trained_tokens: int | None = None
    if target_model is None:
        from measure.pair import PairConfig, widened_spec

        trained_tokens = PairConfig().seq_len - PROMPT_TOKENS

        if early_exit is not None and not 1 <= early_exit < PairConfig().target_layers:
            raise SpecroofError(f"--early-exit must lie in [1, {PairConfig().target_layers - 1}] (got {early_exit})")
        if resume:  # a resume measures what the store recorded, never a width re-chosen from today's load
            width, dtype, threads = _recorded_choice(folder, width, dtype)
        base = PairConfig().target_spec()
        _check_sizes(
            widened_spec(base, width) if width and width > 1 else base, dtype, batches, gammas, size_tokens, dev
        )
    else:
        _check_sizes(target_model.spec, dtype, batches, gammas, size_tokens, dev)
    folder.mkdir(parents=True, exist_ok=True)
    # where the budget went, step by step (the page shows it: the fixed steps are part of the budget)
    steps_s: dict[str, float] = {"before_check": bud.elapsed_s}
    mark = {"t": bud.elapsed_s}

    def step_done(name: str) -> None:
        now = bud.elapsed_s
        steps_s[name] = steps_s.get(name, 0.0) + now - mark["t"]
        mark["t"] = now

    if target_model is None:
        say("probing the device (dtype, streaming rate) ...")
        t_token = 0.02 if budget_s is None else float(np.clip(budget_s / 4000.0, 0.003, 0.04))
        choice = probe_and_choose(dev, t_token_s=t_token, dtype=dtype, width=width, threads=threads)
        (folder / CHOICE).write_text(
            dumps({"width": choice.width, "dtype": choice.dtype, "threads": choice.threads, "device": choice.device})
        )
        say(choice.describe())
        dtype = choice.dtype
        if choice.width > 1:  # the width the probe chose, before its weights are built
            _check_sizes(widened_spec(base, choice.width), dtype, batches, gammas, size_tokens, dev)
        target_model, dm, stats = load_pair(device=dev, dtype=dtype, width=choice.width)
        draft_model = dm if draft else None
        pair_info = {
            "target": target_model.spec.name,
            "target_params": target_model.spec.total_params,
            "draft": dm.spec.name,
            "held_out": stats["held_out"],
        }
    else:
        dtype = dtype or "bf16"
        if early_exit is not None and not 1 <= early_exit < target_model.spec.n_layers:
            raise SpecroofError(f"--early-exit must lie in [1, {target_model.spec.n_layers - 1}] (got {early_exit})")
    # the baseline must be the fastest plain decoding this device has: time both one-token paths
    use_mv, why_mv = fastest_decode_path(target_model)
    if draft_model is not None and use_mv is not None:  # None: each model keeps its own per-shape choice
        draft_model.set_matvec(use_mv)
    say(why_mv)
    decode_path = why_mv
    drafters: dict[str, Any] = {}
    if early_exit is not None:
        drafters[f"early exit @{early_exit}"] = early_exit
    if draft_model is not None:
        drafters[f"draft {draft_model.spec.name}"] = draft_model
    if not drafters:
        raise SpecroofError("no drafter: keep the draft model or give an early-exit layer")
    from measure.graphs import prepare, runner_stats

    models = [m for m in (target_model, draft_model) if m is not None]
    passes = prepare(models, dev, graphs, compile)
    if passes["passes"] != "eager" and tokens is None:
        tokens = QUIET_TOKENS  # the caches below are sized once, for the whole check: no longer runs planned later
    if passes["passes"] != "eager":
        # one cache per model for the whole check, sized for the largest decoding run and sweep pass: the graphs
        # read its buffers where they are, and a new cache would drop every graph captured
        b, seq, _ = cache_sizes(batches, gammas, tokens)
        if dev.type == "cuda" and passes["passes"].startswith("graphs"):
            _check_capture_fits(models, b, seq, dev)
        for m in models:
            m.setup_cache(b, min(seq + 8, m.spec.max_context))
        say(f"passes: {passes['passes']} (--graphs {graphs}{', --compile' if compile else ''})")
    shape_s = 0.0
    if passes["passes"] != "eager":
        # what a new shape costs to compile (or capture): a check compiles dozens, most in its first repetition
        shape_s = time_staged_pass(target_model)
        say(f"a new shape's first pass took {shape_s:.2f} s more than its second (compiling or capturing it)")
        if bud.limited:  # the smallest check's compiling alone would overrun the budget: refused now, in one line
            bs, gs = (batches or LADDER[0][0]), (gammas or LADDER[0][1])
            _, seq_, _ = cache_sizes(batches, gammas, tokens)
            fewest = staged_shapes(bs, gs, tokens, sweep_tokens(gs, bs), [64, 64 + 2 * tokens], seq_ + 8,
                                   int(draft_model is not None))  # fmt: skip
            need = PLAN_MARGIN * shape_s * fewest
            if need > bud.remaining_s - CLOSING_RESERVE_S:
                raise SpecroofError(
                    f"--budget {bud.stated:g} is too short for a compiled check here: its first repetition compiles "
                    f"~{fewest} shapes at ~{shape_s:.1f} s each (~{need:.0f} s) and {bud.remaining_s:.0f} s are "
                    f"left; give a --budget of at least {bud.asking(bud.elapsed_s + need + 3 * CLOSING_RESERVE_S)} s, or "
                    "drop --compile"
                )
    step_done("setup")  # the probe, the pair's weights, the decode-path timing
    microbench_set = "given" if apriori_hw is not None else "full"
    if apriori_hw is None:
        path = folder / "apriori-profile.toml"
        if resume and path.exists():
            apriori_hw = load_hardware(str(path))
            microbench_set = "resumed"
        else:
            short = bud.limited and bud.remaining_s < SHORT_MICROBENCH_BELOW_S
            say(f"microbenchmarks (a-priori profile{', short set' if short else ''}) ...")
            llc = choice.llc_bytes if choice is not None else None
            nbytes = int(max(4 * llc, (64 << 20) if short else (256 << 20))) if llc else None
            apriori_hw = apriori_profile(
                path, dev, dtype, nbytes, short, choice.stream_bytes_per_s if choice is not None else None
            )
            microbench_set = "short" if short else "full"
    step_done("microbenchmarks")
    # The a-priori roofline misses the host cost of each of this harness's passes (Python, dispatch), which
    # dominates small models: time one real step of the smallest model and add the gap to every pass.
    small = draft_model if draft_model is not None else target_model
    host_s = max(0.0, one_token_step_s(small) - float(pass_time(small.spec, apriori_hw, 1, 1, 64, dtype).t_step_s))
    # the decoding runs (and the sweep visits between them) get what the fixed steps left, less the closing steps
    runs_bud = bud.keeping(CLOSING_RESERVE_S)
    # look at the machine: on a noisy one, fewer and longer pairs of the drafter asked for (the first of drafters)
    requested = next(iter(drafters))
    look = look_at_machine(target_model, held_out_prompts(1, seed=7)[0])
    say(look.describe())
    pair_plan: PairPlan | None = None
    if batches is None and gammas is None:
        if resume and (folder / "plan.json").is_file():
            pair_plan = _recorded_pair_plan(folder)  # a resume measures what it planned (None: a quiet plan)
        elif look.noisy:
            pair_plan = noisy_plan(
                target_model, drafters, apriori_hw, dtype, host_s, look, runs_bud, tokens, trained_tokens
            )
    if pair_plan is not None:
        tokens = pair_plan.tokens
        for label in pair_plan.left_out:  # not planned: its model's sweep is not visited either
            if drafters.pop(label, None) is draft_model:
                draft_model = None
    elif tokens is None:
        tokens = QUIET_TOKENS
    if statistic is None:
        # the 10th percentile stands for the quiet machine; on a noisy one a pair's few dozen rounds hold no quiet
        # moment to find: the pairs' speedups at the 10th percentile disagreed by 37%, at the median by 10%
        # (the offline pair beside a busy core, 2026-12-07): medians throughout
        statistic = "median" if pair_plan is not None else "min"
    say(f"statistic: {statistic}" + (" (a noisy machine: medians throughout)" if statistic == "median" else ""))
    _check_sizes(target_model.spec, dtype, batches, gammas, tokens, dev)
    contexts = [64, 64 + 2 * tokens]
    n_drafts = int(draft_model is not None)

    def shapes(bs: Sequence[int], gs: Sequence[int]) -> int:
        ks = [float(crossover_tokens(target_model.spec, apriori_hw, b, 64, dtype)) for b in (min(bs), max(bs))]
        return staged_shapes(bs, gs, tokens, sweep_tokens(gs, bs, ks), contexts, seq_cap, n_drafts)

    seq_cap = target_model.cache.max_seq if target_model.cache is not None else cache_sizes(batches, gammas, tokens)[1]
    if pair_plan is not None:
        plan = {
            "batches": [1],
            "gammas": sorted({g for _, g in pair_plan.configs}),
            "tokens": tokens,
            "predicted_rep_s": pair_plan.predicted_s,
            "predicted_compile_s": 0.0,
            "host_s_per_pass": host_s,
            "not_planned": list(pair_plan.left_out),
            "pair_plan": dataclasses.asdict(pair_plan),
            "line": pair_plan.line(),
        }
        say(pair_plan.line())
        if pair_plan.why_not:
            say(f"short of what this machine needs: {pair_plan.why_not}")
    else:
        plan = plan_configs(
            target_model,
            drafters,
            apriori_hw,
            dtype,
            tokens,
            runs_bud.remaining_s if budget_s else None,
            batches,
            gammas,
            host_s=host_s,
            shape_s=shape_s,
            shapes=shapes,
        )
        n_configs = len(drafters) * len(plan["gammas"]) * len(plan["batches"])
        plan["line"] = (
            f"planned: {len(drafters)} drafter{'s' if len(drafters) != 1 else ''} x {len(plan['gammas'])} gammas x "
            f"batch {plan['batches']} ({n_configs} configurations, one pair per prompt group) of {tokens} tokens, "
            f"~{plan['predicted_rep_s']:.0f} s a repetition"
            + (f", and compiling its shapes ~{plan['predicted_compile_s']:.0f} s" if shape_s > 0 else "")
        )
        say(plan["line"])
    plan["requested"] = requested
    plan["machine"] = look.as_dict()
    (folder / "plan.json").write_text(dumps(plan | {"choice": choice.reasons if choice else None}))
    n_pairs = pair_plan.pairs if pair_plan is not None else None
    per_side = pair_plan.runs_per_side if pair_plan is not None else 1

    def runs_each(b: int) -> int:
        """Speculative runs of a configuration in a block at batch ``b`` (and as many baseline runs after them)."""
        return (n_pairs or _groups(b)) * per_side

    ks = [
        float(crossover_tokens(target_model.spec, apriori_hw, b, 64, dtype))
        for b in (min(plan["batches"]), max(plan["batches"]))
    ]
    kw = dict(
        batch=plan["batches"],
        new_tokens=sweep_tokens(plan["gammas"], plan["batches"], ks),
        context=[64, 64 + 2 * tokens],
        repeats=3,
        hardware=apriori_hw,
        progress=False,
        device=dev,
    )
    # what each unit of a repetition should cost (the plan's prices: docs/cost-model.md, section 44), rescaled as the
    # units run: a repetition's sweep visit, probes and configurations are bounded by the budget, the first ones
    # excepted
    per_block = {
        b: block_units(target_model, drafters, apriori_hw, dtype, b, plan["gammas"], tokens, runs_each(b), 96, host_s)
        for b in plan["batches"]
    }
    sweep_price = {
        name: sweep_visit_s([m.spec], apriori_hw, dtype, plan["batches"], plan["gammas"], contexts, host_s)
        for name, m in (("target", target_model), ("draft", draft_model))
        if m is not None
    }

    def unit_s(unit: tuple[Any, ...]) -> float:
        if unit[0] == "sweep":
            return sum(sweep_price.values())
        if unit[0] == "probe":
            return per_block[unit[1]]["probe"]
        return per_block[unit[1]][(unit[2], unit[3])]

    costs = UnitCosts(unit_s)
    sweeps_left: dict[str, Any] = {}  # each sweep's last table: its points a budget never visited

    def sweep_round(i: int) -> None:
        # one more visit of every (unconverged) point; visit i+1 of a sweep saved under out/. Bounded by the budget,
        # keeping what the block after it needs at least (its probe and one configuration, and the draft's sweep);
        # the first visit keeps 3 points of each sweep whatever they cost: a fit needs them
        b = plan["batches"][i % len(plan["batches"])]
        mean_config = float(np.mean([v for k, v in per_block[b].items() if k != "probe"]))
        block_need = PLAN_MARGIN * costs.scale * ((per_side + runs_each(b)) * per_block[b]["probe"] + mean_config)
        for name, model in (("target", target_model), ("draft", draft_model)):
            if model is not None:
                fresh = i == 0 and not resume
                after = sweep_price.get("draft", 0.0) if name == "target" else 0.0  # (the draft's sweep follows)
                keep = block_need + PLAN_MARGIN * costs.scale * after
                sweeps_left[name] = sweep(
                    model,
                    rounds=i + 1,
                    resume=not fresh,
                    overwrite=fresh,
                    out=folder / f"sweep-{name}",
                    budget=runs_bud,
                    keep_s=keep,
                    essential=3 if pair_plan is None else NOISY_SWEEP_POINTS,
                    **kw,
                )

    prompts = {b: held_out_prompts(_groups(b) * b, seed=b) for b in plan["batches"]}
    measured = measure_speedups(
        target_model,
        drafters,
        prompts,
        plan["gammas"],
        max_new_tokens=tokens,
        repeats=repeats,
        progress=progress,
        before_block=sweep_round,
        statistic=statistic,
        budget=bud,
        keep_s=CLOSING_RESERVE_S,
        costs=costs,
        journal=folder / "runs.jsonl",
        resume=resume,
        pairs=n_pairs,
        configs=list(pair_plan.configs) if pair_plan is not None else None,
        runs_per_side=pair_plan.runs_per_side if pair_plan is not None else 1,
    )
    step_done("decoding_runs")
    pass_ratios: dict[tuple[str, int, int], list[float]] = {}
    if pair_plan is not None and len(measured):
        # the prediction's passes timed in pairs with plain steps, as the measurement's runs were: the drafter asked
        # for always (its row is the answer), any other while its pairs fit what is left
        q_pred = 0.5 if statistic == "median" else 0.1
        for label, g in pair_plan.configs:
            rows_ = measured[(measured["drafter"] == label) & (measured["gamma"] == g)]
            if rows_.empty:
                continue
            # as many pairs as what is left buys, up to PASS_PAIRS (the drafter asked for: MIN_PAIRS at least, as
            # its measured pairs always run); priced at the baseline step the look measured, rescaled as the runs ran
            per_pair = PLAN_MARGIN * costs.scale * look.step_s * (pass_pairs_steps(g, 1) - pass_pairs_steps(g, 0))
            fixed = PLAN_MARGIN * costs.scale * look.step_s * pass_pairs_steps(g, 0)
            left = runs_bud.remaining_s - fixed if runs_bud.limited else float("inf")
            n_pp = int(min(PASS_PAIRS, max(0.0, left) // per_pair)) if np.isfinite(left) else PASS_PAIRS
            if label == requested:
                n_pp = max(n_pp, MIN_PAIRS)
            elif n_pp < MIN_PAIRS:
                dropped_pp = f"{label} gamma {g}: its prediction's pass pairs"
                measured.attrs.setdefault("dropped", {})[dropped_pp] = "not timed: out of time (the fit predicts it)"
                continue
            say(f"timing the passes of {label} at gamma {g} in {n_pp} pairs with plain steps (the prediction) ...")
            ctx = int(rows_["context"].iloc[0])
            pass_ratios[(label, g, 1)] = time_pass_pairs(target_model, drafters[label], g, ctx, pairs=n_pp, q=q_pred)
        step_done("prediction_pairs")
    dropped: dict[str, str] = {p: "not planned: the first repetition would not fit a third of the budget" for p in
                               plan.get("not_planned", [])}  # fmt: skip
    dropped |= measured.attrs.get("dropped", {})
    if pair_plan is not None:
        dropped |= pair_plan.left_out
    for name, sw in sweeps_left.items():
        never = unvisited_words(sw)
        if never:
            dropped[f"{name} verify sweep: {never}"] = "never visited: they did not fit what was left"
    launch = None
    if dev.type == "cuda" and passes["passes"] == "eager" and not target_model.spec.is_moe:
        # --graphs off on a GPU: what the graphs would remove, per pass of the target, at a few verify widths, while
        # their passes (priced a-priori, rescaled as the runs ran) fit what the closing leaves
        from measure.microbench import launch_overhead
        from measure.sweep import LAUNCH_PASSES

        pts = [
            (b, n, PROMPT_TOKENS + tokens) for b in sorted(set(plan["batches"])) for n in (1, max(plan["gammas"]) + 1)
        ][:4]
        kept_pts, total = [], 0.0
        for b, n, c in pts:
            t = float(pass_time(target_model.spec, apriori_hw, b, n, c, dtype).t_step_s) + host_s
            need = PLAN_MARGIN * costs.scale * LAUNCH_PASSES * t
            if runs_bud.allows(total + need):
                kept_pts.append((b, n, c))
                total += need
            else:
                dropped[f"launch overhead at batch {b} x {n} new tokens"] = "not timed both ways: out of time"
        launch = launch_overhead(target_model, kept_pts).to_dict(orient="records") if kept_pts else None
        step_done("launch_overhead")
    from measure.store import RESULTS
    from measure.sweep import read_sweep_rows, sweep_drift

    target_visits = read_sweep_rows(folder / "sweep-target" / RESULTS)
    df = pool_visits(target_visits)
    fitted = fit(df, target_model.spec, apriori_hw, statistic=statistic)
    fitted.write_toml(folder / "fitted-profile.toml")
    draft_hw: dict[str, Hardware] = {}
    draft_fit = None
    if draft_model is not None:
        ddf = pool_visits(read_sweep_rows(folder / "sweep-draft" / RESULTS))
        draft_fit = fit(ddf, draft_model.spec, apriori_hw, statistic=statistic)
        draft_fit.write_toml(folder / "fitted-profile-draft.toml")
        draft_hw = {f"draft {draft_model.spec.name}": draft_fit.hardware}
    table, summary = validate(df, target_model.spec, apriori_hw, fitted.hardware, statistic=statistic)
    table.to_csv(folder / "validation.csv", index=False)
    spec_df = predict_speedups(
        measured,
        target_model.spec,
        drafters,
        fitted.hardware,
        dtype=dtype,
        draft_hardware=draft_hw,
        pass_ratios=pass_ratios,
    )
    spec_df = mark_unexplained_noise(spec_df, measured.attrs.get("load", {}))
    spec_df.drop(columns=["curve"]).to_csv(folder / "speedup.csv", index=False)
    summary["fit_params"] = fitted.params
    summary["sweep_drift"] = sweep_drift(target_visits).get("drift")
    summary["fit_residuals_by_rows"] = fitted.residuals_by_rows().to_dict(orient="records")
    summary["host_fit"] = host_fit_summary(measured)
    step_done("fit_and_predict")
    check = SpecCheck(choice, apriori_hw, fitted, draft_fit, df, table, summary, spec_df, plan, pair_info, decode_path)
    payload = {
        "fit_mape": fitted.mape,
        "apriori_mape": summary["apriori_mape"],
        "crossover": summary["crossover"],
        "crossover_measured": [k["crossover_measured"] for k in summary["crossover"]],
        "crossover_predicted": [k["crossover_predicted"] for k in summary["crossover"]],
        "fit_params": fitted.params,
        "draft_fit_mape": draft_fit.mape if draft_fit is not None else None,
        "fit_residuals_by_rows": summary["fit_residuals_by_rows"],
        "speedup": spec_df.to_dict(orient="records"),
        "speedup_error_max": float(spec_df["rel_error"].abs().max()) if len(spec_df) else None,
        "speedup_error_max_wall": float(spec_df["rel_error_wall"].abs().max()) if len(spec_df) else None,
        # the same over the rows not marked noisy (the ones the page reports as the model's error), and how many
        "speedup_errors_quiet": error_summary(spec_df) if len(spec_df) else None,
        "noise": check.noise,
        "load": measured.attrs.get("load", {}),
        "statistic": statistic,
        "pair": pair_info,
        "plan": plan,
        "requested": requested,
        "machine": look.as_dict(),
        "choice": list(choice.reasons) if choice else None,
        "decode_path": decode_path,
        "dtype": dtype,
        "seconds": bud.elapsed_s,
        "budget_s": bud.seconds,
        "dropped": dropped,
        "steps_s": steps_s,
        "microbench_set": microbench_set,
        "passes": passes["passes"],
        "graphs": graphs,
        "compile": compile,
        "runner": runner_stats(models),
        "launch_overhead": launch,
        "host_fit": summary["host_fit"],
        "out": str(folder),
    }
    (folder / "summary.json").write_text(dumps(payload))
    check.summary["payload"] = json.loads(dumps(payload))
    return check
