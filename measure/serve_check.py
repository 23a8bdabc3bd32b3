"""``measure serve``: replay one arrival trace through real continuous batching and through the simulator, side by side.

1. the offline pair (:mod:`measure.pair`) at its trained width, fp32, on ``threads`` CPU threads;
2. a short verify sweep of the target and of the draft (:func:`measure.sweep.sweep`) and one
   joint fit (:func:`measure.fit.fit`, the two depths separate the per-pass from the
   per-layer overhead) on the microbenchmarked profile: the device's fitted profile;
3. a calibration per policy, a burst (``6 x slots`` requests arriving at once) and a staircase
   (:data:`COLD_PROBES` single requests, then 1, 2, ... ``slots`` requests arriving together, each
   stair after an idle wait: :func:`staircase_arrivals`, so every batch size has rounds of its own,
   and the first prefill after a wait its own samples): the engine's own
   host time per decode round beyond the fitted passes (scheduling, acceptance, commit), a
   line in the round's batch through their per-batch median residuals (the engine does
   per-row work; :func:`engine_host_terms`), given to the simulator as ``round_host_s`` and
   ``round_host_per_seq_s`` on top of the fitted profile (which stays engine-free), its host
   time per prefill step beyond the priced passes (``prefill_host_s``: padding the prompts,
   the cache views of their rows), and the spread of acceptance between its requests
   (:func:`acceptance_concentration`, the simulator's ``alpha_concentration``);
4. per rate (light, near saturation, overloaded: fractions of the plain engine's capacity
   read off the calibration) and per policy, between two more calibrations of that policy (the
   host terms of step 3 as the machine runs just before and just after the replay, their mean
   given to the simulator: a shared machine's speed drifts over seconds): the same trace (arrival
   times, input and output lengths) replayed for real (:func:`measure.serve.serve`) and simulated
   (:func:`roofline.serving.simulate`) with ``max_seqs`` = the slots and the engine's loop:
   ``prefill="separate"`` (each iteration's decode round, then one pass of the newcomers' whole
   prompts through the target, then through the draft model when speculating), the fitted
   profile plus that host term, every price scaled by the speed the two calibrations ran at
   against those prices (:func:`steps_speed`, their mean: ``calibration_speed``), and the
   acceptance the real run measured;
5. TTFT and TPOT p50/p90 of both, their relative errors, and each side's verdict on whether
   speculation pays at each rate (``e2e_p50_s``, the simulator's default); a figure is noisy where
   the replays disagree by more than its error, or the simulator does under the calibration before
   the replays against the one after them (``*_calibration_drift``), or at the calibrations' speed
   against the replays' own (``*_speed_gap``); and TTFT split by what each arrival
   found (:func:`ttft_by_arrival`: the share that found the engine idle, and each group's p50);
6. each replay simulated again at the speed it ran itself (``replay_speed``, ``*_speed_matched_*``:
   read off the replay, so not a prediction), which parts the machine's drift from the
   scheduling model's own error.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from measure.budget import Budget, WorkBar
from measure.serve import ServeResult, engine_policy, serve
from measure.timing import cpu_threads
from roofline.core.errors import SpecroofError
from roofline.costing.hardware import Hardware
from roofline.serving import pricing_context, simulate, step_prices, synthetic
from roofline.serving.metrics import percentile
from roofline.serving.policies import ServingPolicy
from roofline.serving.workload import Workload

#: request rates as fractions of the plain engine's measured capacity: light, near saturation, overloaded
RATE_FRACTIONS = (0.3, 0.9, 1.5)
#: the latency columns compared
METRICS = ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s", "e2e_p50_s")
#: the metric a verdict (does speculation pay) is read on
VERDICT_METRIC = "e2e_p50_s"


@dataclass(frozen=True)
class ServeCheck:
    """The side-by-side: ``table`` (one row per rate and policy), ``verdicts`` (one row per rate), the per-request
    rows of both sides, the fitted profile, the host term per policy and the settings."""

    table: pd.DataFrame
    verdicts: pd.DataFrame
    measured: pd.DataFrame
    simulated: pd.DataFrame
    hardware: Hardware
    host_per_round_s: dict[str, float]
    settings: dict[str, Any]
    #: the host term's part per decoding sequence of a round, per policy
    host_per_seq_s: dict[str, float] = dataclasses.field(default_factory=dict)


def latency_summary(requests: pd.DataFrame) -> dict[str, float]:
    """TTFT, TPOT and E2E p50/p90 of one run's request rows (the simulator's definitions)."""
    out: dict[str, float] = {}
    for m in ("ttft", "tpot", "e2e"):
        for q in (50, 90):
            out[f"{m}_p{q}_s"] = percentile(requests[f"{m}_s"], q)
    return out


def ttft_by_arrival(requests: pd.DataFrame) -> dict[str, float]:
    """TTFT split by what each arrival found: ``idle_share`` (the share of requests that arrived after every earlier
    request had finished: no other in the system), and the TTFT p50 of those (``ttft_idle_p50_s``) and of the
    others (``ttft_busy_p50_s``; NaN where a group is empty).

    At a light load the two groups are two modes (a prefill alone, against a wait for the rounds in flight and the
    next one before it), and the overall p50 falls between them where about half the arrivals find the engine
    idle: it then moves with that share, which a few percent of service time shifts, more than with either mode.
    """
    df = requests.sort_values("arrival_s", kind="stable")
    a = df["arrival_s"].to_numpy(float)
    # the latest finish among the requests that arrived before each one (ties: in the order served)
    before = np.maximum.accumulate(np.concatenate(([-np.inf], df["finish_s"].to_numpy(float)[:-1])))
    busy = before > a
    t = df["ttft_s"].to_numpy(float)
    return {  # (percentile: NaN for an empty group)
        "idle_share": float(np.mean(~busy)) if len(a) else math.nan,
        "ttft_idle_p50_s": percentile(t[~busy], 50),
        "ttft_busy_p50_s": percentile(t[busy], 50),
    }


def found_columns(measured: Sequence[dict[str, float]], simulated: dict[str, float]) -> dict[str, float]:
    """The table's columns of :func:`ttft_by_arrival`, each side: ``idle_share_measured``,
    ``ttft_idle_p50_measured_s``, ... (the real side: the mean over its replays)."""
    out: dict[str, float] = {}
    for k, v in simulated.items():
        stem, unit = (k[:-2], "_s") if k.endswith("_s") else (k, "")
        out[f"{stem}_measured{unit}"] = float(np.mean([m[k] for m in measured]))
        out[f"{stem}_simulated{unit}"] = v
    return out


def _prices(
    hw: Hardware,
    target: Any,
    draft: Any,
    gamma: int,
    slots: int,
    max_tokens: int,
    ctx_top: int,
    dtype: str = "fp32",
) -> Any:
    from roofline.speculation.drafters import DraftModel

    ctx = pricing_context(target, hw, dtype=dtype)
    return step_prices(
        ctx,
        DraftModel(draft) if gamma else None,
        max_gamma=gamma,
        max_batch=slots,
        max_tokens=max_tokens,
        max_context=ctx_top,
        prefill="separate",
    )


def with_pass_overhead(hw: Hardware, extra_s: float) -> Hardware:
    """The profile with ``extra_s`` more fixed time per pass (its ``[measured]`` block)."""
    m = hw.measured
    if m is None:
        raise SpecroofError(f"{hw.id} has no [measured] block to add a host overhead to")
    return dataclasses.replace(
        hw, measured=dataclasses.replace(m, pass_overhead_s=(m.pass_overhead_s or 0.0) + extra_s)
    )


class HostResiduals(NamedTuple):
    """A calibration against the fitted prices: the median round residual per batch size (and the rounds behind
    it), the median residual of prefill steps that followed a step at once, and of those the engine started after
    waiting idle (seconds; NaN when it never waited)."""

    batch: np.ndarray
    median_s: np.ndarray
    rounds: np.ndarray
    prefill_s: float
    cold_prefill_s: float = math.nan


#: a gap between one step's end and the next one's start longer than this is the engine waiting idle
IDLE_GAP_S = 2e-3
#: the idle wait before each stair of the staircase calibration (a light load's gaps are of this order)
STAIR_GAP_S = 0.1
#: single requests the staircase opens with, each after an idle wait: the engine's cold start measured on the step a
#: light load's arrivals make (one prompt prefilled alone after a wait), not on the later stairs' multi-prompt
#: prefills, whose residual also holds the fitted profile's error at that size (a few ms at 3-4 prompts here)
COLD_PROBES = 3


def engine_host_terms(
    run: ServeResult,
    hw: Hardware,
    target: Any,
    draft: Any,
    gamma: int,
    max_tokens: int,
    dtype: str = "fp32",
) -> tuple[float, float, float]:
    """(host seconds per decode round, and per sequence of it, host seconds per prefill pass): a calibration run
    against the fitted prices (``dtype``: what the passes ran in).

    Each decode round's residual is its measured time minus the simulator's price of its passes
    (the round alone: the engine times it apart from the prefill after it); the host time of a
    round of ``b`` sequences is ``a + s b``, the line through the median residual at each batch
    size weighted by its rounds (``s = 0`` with one batch size). The prefill residual (the median over
    prefill steps of the measured time minus the target's pass, plus the draft model's when
    speculating) is the engine's host time per prefill step. Negative when the fitted passes cost
    more than the engine took: the simulator takes the terms as they are, a correction to the profile at the
    engine's operating points (docs/cost-model.md, section 24).
    """
    return host_terms(host_residuals(run, hw, target, draft, gamma, max_tokens, dtype))


class _PricedSteps(NamedTuple):
    """A run's decode rounds and prefill steps beside the simulator's price of their passes (seconds; no host
    terms), and which prefill steps the engine started cold (alone, after waiting idle)."""

    rounds: pd.DataFrame
    round_passes_s: np.ndarray
    prefills: pd.DataFrame
    prefill_passes_s: np.ndarray
    cold: np.ndarray


def _priced_steps(
    steps: pd.DataFrame, hw: Hardware, target: Any, draft: Any, gamma: int, max_tokens: int, dtype: str = "fp32"
) -> _PricedSteps:
    s = steps
    dec = s[s["decode_batch"] > 0]
    pre = s[s["prefills"] > 0]
    if dec.empty or pre.empty:
        raise SpecroofError("the run has no decode round or no prefill to price")
    top = int(dec["decode_context_tokens"].max() / max(1, dec["decode_batch"].min())) + gamma + 8
    slots = int(max(dec["decode_batch"].max(), pre["prefills"].max()))
    p0 = _prices(hw, target, draft, gamma, slots, max_tokens, max(top, int(pre["prefill_tokens"].max())), dtype)
    b = dec["decode_batch"].to_numpy()
    c = dec["decode_context_tokens"].to_numpy() / b
    pred = np.array([float(p0.decode_time(gamma, int(bb), cc)) for bb, cc in zip(b, c, strict=True)])
    pred_pre = np.array(
        [
            p0.prefill_time(int(m), int(n), 0.0, draft=gamma > 0)
            for m, n in zip(pre["prefills"], pre["prefill_tokens"], strict=True)
        ]
    )
    # a prefill the engine ran alone after waiting for its arrival (not a run's first step: nothing came before)
    if "start_s" in s and "end_s" in s:
        # pooled runs each have their own clock, from 0 at their start: where it starts again, the step is a run's
        # first, and the engine waited idle from 0 to its start (a staircase's first stair; a burst's starts at 0)
        start, prev_end = s["start_s"], s["end_s"].shift()
        gap = (start - prev_end).where(start >= prev_end, start)[pre.index].to_numpy()  # (first row: NaN, a new run)
    else:
        gap = np.full(len(pre), np.nan)
    cold = (gap > IDLE_GAP_S) & (pre["decode_batch"].to_numpy() == 0)
    return _PricedSteps(dec, pred, pre, pred_pre, cold)


def host_residuals(
    run: ServeResult, hw: Hardware, target: Any, draft: Any, gamma: int, max_tokens: int, dtype: str = "fp32"
) -> HostResiduals:
    """The residuals :func:`engine_host_terms` draws its lines through (computed once per burst)."""
    ps = _priced_steps(run.steps, hw, target, draft, gamma, max_tokens, dtype)
    dec, pre, cold = ps.rounds, ps.prefills, ps.cold
    b = dec["decode_batch"].to_numpy()
    r = pd.DataFrame({"b": b, "resid": dec["t_decode_s"].to_numpy() - ps.round_passes_s}).groupby("b")["resid"]
    med, cnt = r.median(), r.size()
    resid_pre = pre["t_prefill_s"].to_numpy() - ps.prefill_passes_s
    prefill_s = float(np.median(resid_pre[~cold] if (~cold).any() else resid_pre))
    # the cold start from single-prompt cold prefills where there are any (:data:`COLD_PROBES`): the step it is
    # added to at a light load, and the size the warm residual above is mostly made of
    single = cold & (pre["prefills"].to_numpy() == 1)
    cold_s = float(np.median(resid_pre[single if single.any() else cold])) if cold.any() else math.nan
    return HostResiduals(med.index.to_numpy(float), med.to_numpy(), cnt.to_numpy(float), prefill_s, cold_s)


def steps_speed(
    steps: pd.DataFrame,
    *,
    hw: Hardware,
    target: Any,
    draft: Any,
    gamma: int,
    max_tokens: int,
    terms: tuple[float, float, float, float],
    dtype: str = "fp32",
) -> float:
    """How slow the engine ran ``steps`` against the simulator's prices: the seconds its decode rounds and prefill
    steps took over the simulator's price of the same steps (their passes, and the host ``terms`` it is given:
    round, per sequence, prefill, idle start). 1.1: the machine ran them 10% slower than those prices say
    (docs/cost-model.md, section 27)."""
    return _speed(_priced_steps(steps, hw, target, draft, gamma, max_tokens, dtype), terms)


def _speed(ps: _PricedSteps, terms: tuple[float, float, float, float]) -> float:
    """:func:`steps_speed` of steps already priced (their passes do not depend on the host terms)."""
    a, per_seq, pre_host, idle = terms
    b = ps.rounds["decode_batch"].to_numpy()
    priced = float(np.sum(ps.round_passes_s + a + per_seq * b) + np.sum(ps.prefill_passes_s + pre_host))
    priced += idle * float(ps.cold.sum())
    took = float(ps.rounds["t_decode_s"].sum() + ps.prefills["t_prefill_s"].sum())
    return took / priced


def at_speed(w: Workload, f: float) -> Workload:
    """The trace as a simulator priced ``f`` times slower sees it, on its own clock: arrivals divided by ``f``. A
    run's events depend on their order and durations only, so the simulator on this trace, its times multiplied by
    ``f``, is the simulator with every price multiplied by ``f`` on the trace as it is."""
    return Workload(w.arrival_s / f, w.input_tokens, w.output_tokens)


def burst_times(steps: pd.DataFrame, slots: int) -> tuple[float, float]:
    """(median seconds of a decode-only round at the full batch, NaN if none; prefill seconds per request) of a
    calibration burst's steps."""
    full = steps[(steps["decode_batch"] == slots) & (steps["prefills"] == 0)]
    pre = steps[steps["prefills"] > 0]
    return float(full["t_decode_s"].median()), float(pre["t_prefill_s"].sum() / pre["prefills"].sum())


def idle_start(res: HostResiduals) -> float:
    """Seconds the engine's first prefill after an idle wait takes beyond the others' (>= 0; 0 when it never
    waited): the simulator's ``idle_start_s``."""
    if not math.isfinite(res.cold_prefill_s):
        return 0.0
    return max(0.0, res.cold_prefill_s - res.prefill_s)


def host_terms(res: HostResiduals) -> tuple[float, float, float]:
    """(per round, per sequence of it, per prefill step) from a burst's residuals: :func:`engine_host_terms`."""
    if res.batch.size >= 2:
        fit_ = np.polyfit(res.batch, res.median_s, 1, w=np.sqrt(res.rounds))
        per_seq, round_s = float(fit_[0]), float(fit_[1])
    else:
        per_seq, round_s = 0.0, float(res.median_s[0])
    return round_s, per_seq, res.prefill_s


#: Beta concentrations the acceptance-spread fit tries (log-spaced); the top one reads "no spread this run can tell"
_K_GRID = np.geomspace(0.5, 5000.0, 241)


def acceptance_concentration(requests: pd.DataFrame) -> float | None:
    """The Beta concentration k of per-request acceptance that best explains a run's speculative rounds.

    A request of per-token acceptance alpha whose rounds accepted ``A`` drafts in all, ``F`` of
    them ending in a rejection, has likelihood alpha^A (1 - alpha)^F (a round accepting a < gamma
    drafts: alpha^a (1 - alpha); all gamma: alpha^gamma). With alpha ~ Beta(mu k, (1 - mu) k) it
    integrates to B(mu k + A, (1 - mu) k + F) / B(mu k, (1 - mu) k), mu the pooled A / (A + F):
    prompts that the draft model predicts well and prompts it does not are what makes TPOT spread
    beyond the geometric draws of one alpha. Maximum likelihood over a grid of k; None with fewer
    than 4 requests that speculated, or where the likelihood still rises at the grid's top (the run
    cannot tell its requests from one alpha).
    """
    q = requests[requests["spec_rounds"] > 0]
    A = q["accepted_drafts"].to_numpy(float)
    F = q["rejected_rounds"].to_numpy(float)
    if A.size < 4 or A.sum() == 0 or F.sum() == 0:
        return None
    mu = A.sum() / (A.sum() + F.sum())
    lg = np.vectorize(math.lgamma)
    a, b = mu * _K_GRID[:, None], (1.0 - mu) * _K_GRID[:, None]
    # log B(x, y) = lgamma(x) + lgamma(y) - lgamma(x + y), summed over requests per k
    ll = (lg(a + A) + lg(b + F) - lg(a + b + A + F) - (lg(a) + lg(b) - lg(a + b))).sum(axis=1)
    i = int(np.argmax(ll))
    return None if i == _K_GRID.size - 1 else float(_K_GRID[i])


def staircase_arrivals(stair_s: Sequence[float], gap_s: float, sizes: Sequence[int] | None = None) -> np.ndarray:
    """Arrival times of a staircase calibration: stair ``i`` is ``sizes[i]`` requests arriving together (default:
    stair ``b`` = 1, 2, ... is ``b`` requests), ``gap_s`` after the stair before it is expected to end
    (``stair_s[i]``: its expected seconds), the first ``gap_s`` after the start.

    A burst of requests arriving at once decodes at the full batch nearly throughout, so its few
    rounds at smaller batches pin the host line's slope poorly, while a light load decodes one or
    two requests at a time; the stairs give every batch size its own run of rounds, each after the
    machine idled (as a light load's prefills come).
    """
    sizes = list(range(1, len(stair_s) + 1)) if sizes is None else list(sizes)
    if len(sizes) != len(stair_s) or any(not (isinstance(m, (int, np.integer)) and m >= 1) for m in sizes):
        raise SpecroofError(f"sizes must be one whole number >= 1 per stair (got {sizes!r} for {len(stair_s)})")
    t = gap_s
    out: list[float] = []
    for i, (m, d) in enumerate(zip(sizes, stair_s, strict=True), start=1):
        if not (d >= 0 and math.isfinite(d)):
            raise SpecroofError(f"stair {i}'s expected seconds must be finite and >= 0 (got {d!r})")
        out += [t] * int(m)
        t += d + gap_s
    return np.asarray(out)


def requests_per_run(
    remaining_s: float | None, per_cal_s: float, rates: Sequence[float], capacity: float, policies: int, replays: int
) -> int:
    """Requests in each replayed trace: the replays (rates x policies x ``replays``) share 85% of the budget's
    ``remaining_s``, less a calibration of ``per_cal_s`` for every run (rate x policy); ``None``: 30 s of replays
    per run. Between 8 and 2,000.

    A replay of n requests at rate r lasts about n / min(r, capacity): its arrivals, or, overloaded, the plain
    engine's full-batch pace (speculation's is faster where it pays). Pricing every run at the lightest rate's
    pace, as this once did, left more than half of the budget unspent; a trace's percentiles are order
    statistics of its requests, so the requests the budget affords are noise taken out of both columns.
    """
    runs = len(rates) * policies
    replay_s = 0.85 * remaining_s - runs * per_cal_s if remaining_s is not None else 30.0 * runs
    per_request_s = replays * policies * sum(1.0 / min(r, capacity) for r in rates)
    return int(max(8, min(2000, max(1.0, replay_s) / per_request_s)))


#: the planning margin on a run's predicted seconds (docs/cost-model.md, sections 38 and 40)
PLAN_MARGIN = 1.25
#: seconds kept at the budget's end: the verdicts, the settings, the CSVs and the text (0.1-0.5 s on the project's
#: 2-core CPU beside a busy core), and the interpreter's exit
CLOSING_S = 1.5

#: how far past its budget a command may end (the measuring commands' promise: the budget, plus 10%)
OVERRUN = 1.1
#: the share of what is left after loading and the microbenchmarks that the verify sweeps (both models, both visits)
#: may take: the fit needs their points, the calibrations and the replays the rest
SWEEP_SHARE = 0.25


def calibration_shapes(slots: int, gammas: Sequence[int], shortest: int, longest: int, max_seq: int) -> int:
    """Distinct layer shapes (padded batch, new tokens, context bucket) a policy's calibrations decode through, over
    the policies' ``gammas`` (none: plain decoding only), for contexts from ``shortest`` to ``longest`` tokens:
    per padded batch and bucket a one-token step, and per gamma a verify pass and a draft chain's two first passes.
    What a compiled or captured ``measure serve`` compiles before its first replay (docs/cost-model.md, section 44).
    """
    from measure.graphs import capture_sizes
    from measure.models import context_bucket

    buckets = {context_bucket(min(n, max_seq), max_seq) for n in range(max(1, shortest), longest + 1)}
    widths = {1, *(g + 1 for g in gammas), *((2,) if gammas else ())}
    return len(capture_sizes(slots)) * len(buckets) * len(widths)


def rate_order(rates: Sequence[float]) -> list[float]:
    """The request rates, most needed first: the lightest and the heaviest (where speculation pays most and where it
    stops), then the middle ones, coarse to fine (:func:`measure.sweep.axis_levels`)."""
    from measure.sweep import axis_levels

    lv = axis_levels(list(rates))
    return sorted(rates, key=lambda r: (lv[r], r))


@dataclass(frozen=True)
class ReplayPlan:
    """What the budget replays: the rates kept (in the order of need), those dropped, replays per trace, whether
    each replay is bracketed by calibrations, and the seconds it is predicted to take (with the margin)."""

    rates: tuple[float, ...]
    dropped: tuple[float, ...]
    replays: int
    recalibrate: bool
    seconds: float


def serve_policies(policies: Sequence[str]) -> list[ServingPolicy]:
    """The policies a side-by-side runs: ``off`` first, always (the baseline every verdict compares against, as
    ``specroof serve`` runs it; ``static:0`` is off too), then the speculating chains asked for, each once."""
    asked = [q for q in (engine_policy(p) for p in policies) if q.kind != "off"]
    if not asked:
        raise SpecroofError(
            "--policy off alone compares nothing: plain decoding (off) is always run; give a speculating chain to set "
            "against it (static:G) or leave --policy out (static:3)"
        )
    if len({p.name for p in asked}) != len(asked):
        raise SpecroofError(f"policies repeat: {', '.join(p.name for p in asked)}")
    if any(p.kind == "tree" for p in asked):
        raise SpecroofError("the side-by-side compares off and static:G chains (measure.serve.serve runs trees)")
    return [engine_policy("off"), *asked]


def plan_replays(
    rates: Sequence[float],
    requests: int,
    capacity: float,
    policies: int,
    replays: int,
    per_cal_s: float,
    available_s: float,
    recalibrate: bool = True,
    scale: float = 1.0,
) -> ReplayPlan:
    """The rates (most needed first: :func:`rate_order`) and replays per trace that ``available_s`` seconds measure
    (docs/cost-model.md, section 44).

    A rate costs, per policy, a calibration before and after its replays (``per_cal_s`` each, with
    ``recalibrate``) and each replay about ``requests / min(rate, capacity)`` seconds (its arrivals, or
    overloaded the plain engine's full-batch pace), all times ``scale`` (what the runs so far took over their
    prices) and :data:`PLAN_MARGIN`. The lightest rate is kept whatever it costs (a verdict needs one); each other
    while the kept ones fit at one replay each, then the replays rise to ``replays`` while they fit. Where even the
    first rate with its calibrations does not fit, the replays go without them (the first calibration's terms).
    """
    from measure.budget import apportion

    order = rate_order(rates)

    def cost_with(recal: bool) -> Callable[[Sequence[float], int], float]:
        def cost(kept: Sequence[float], r: int) -> float:
            per = sum((2 * per_cal_s if recal else 0.0) + r * requests / min(x, capacity) for x in kept)
            return PLAN_MARGIN * scale * policies * per

        return cost

    recal = recalibrate
    if recal and cost_with(True)(order[:1], 1) > available_s:
        recal = False
    got = apportion(order, cost_with(recal), available_s, min_repeats=1, max_repeats=replays, essential=1)
    return ReplayPlan(tuple(got.kept), tuple(got.dropped), got.repeats, recal, got.seconds)


def _prompts(w: Workload, seed: int) -> list[list[int]]:
    from measure.pair import held_out_prompts

    top = int(w.input_tokens.max())
    base = held_out_prompts(w.n, length=top, seed=seed)
    return [p[: int(n)] for p, n in zip(base, w.input_tokens, strict=True)]


def serve_check(
    *,
    policies: Sequence[str] = ("off", "static:3"),
    rates: Sequence[float] | None = None,
    slots: int = 4,
    requests: int | None = None,
    input_len: str | int = 32,
    output_len: str | int = "uniform:16-48",
    budget_s: float | Budget | None = 240.0,
    threads: int | None = 1,
    seed: int = 0,
    statistic: str = "median",
    recalibrate: bool = True,
    replays: int = 2,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    device: Any = None,
    graphs: str = "auto",
    compile: bool = False,
) -> ServeCheck:
    """Measure serving on this device and simulate the same traces (module docstring); ``budget_s`` bounds the run.

    ``device`` (default: the GPU where there is one) runs the pair in fp32 on a CPU (on ``threads`` threads) and in
    bf16 on a GPU, where ``graphs`` (auto: on) replays every decode round's passes, the draft's chain whole, as CUDA
    graphs per padded batch (:mod:`measure.graphs`; prefills run eagerly, a shape per prompt length), each layer
    compiled first with ``compile``.

    ``replays`` replays each trace that many times (the measured figures are their mean; a figure
    whose replays disagree by more than its error is ``noisy``: the engine's own repeatability is
    coarser than the comparison). ``recalibrate`` runs each policy's calibration again just before
    and just after each replay and gives the simulator the mean of the host terms read off each (pooled
    with the first calibration: the table's ``round_host_s``, ``round_host_per_seq_s``, ``prefill_host_s``
    and ``idle_start_s``), and marks a figure noisy where the simulator under the two disagrees by more
    than its error; else the first calibration's terms serve every replay.

    ``budget_s`` (seconds from the call, or a :class:`Budget` that may count from the process's start) bounds
    everything (docs/cost-model.md, section 44): the microbenchmarks run their short set below 120 s left, the
    verify sweeps take at most a quarter of what is left after them (3 target points whatever they cost), and after
    the calibrations (one per policy, always) the rates and replays are apportioned (:func:`plan_replays`): the
    lightest rate always, the others in the order of need while they fit; a rate is started only while its
    replays, rescaled by what the runs so far took, still fit. What was left out is in ``settings["dropped"]``."""
    from measure.device import resolve_device
    from measure.fit import fit
    from measure.graphs import inductor_missing, prepare, runner_stats, use_graphs
    from measure.pair import load_pair
    from measure.spec_check import SHORT_MICROBENCH_BELOW_S, apriori_profile, sweep_tokens, time_staged_pass
    from measure.sweep import sweep, unvisited_words

    say = log or (lambda _m: None)
    dev = resolve_device(device)
    use_graphs(graphs, dev)  # --graphs on without a GPU: refused before any work
    if compile and (missing := inductor_missing(dev)):
        raise SpecroofError(missing)
    dtype = "fp32" if dev.type == "cpu" else "bf16"
    pols = serve_policies(policies)
    if not (isinstance(slots, int) and 1 <= slots <= 64):
        raise SpecroofError(f"slots must be a whole number in [1, 64] (got {slots!r})")
    if not (isinstance(replays, int) and 1 <= replays <= 5):
        raise SpecroofError(f"replays must be a whole number in [1, 5] (got {replays!r})")
    if statistic not in ("min", "median"):
        raise SpecroofError(f"statistic must be 'min' or 'median' (got {statistic!r})")
    from measure.specval import machine_load

    bud = budget_s if isinstance(budget_s, Budget) else Budget(budget_s)
    steps: dict[str, float] = {"before": bud.elapsed_s}
    mark = [bud.elapsed_s]

    def step_done(name: str) -> None:
        now = bud.elapsed_s
        steps[name] = steps.get(name, 0.0) + now - mark[0]
        mark[0] = now

    dropped: dict[str, str] = {}
    load0 = machine_load()
    gammas = sorted({p.gamma for p in pols if p.speculates})
    with cpu_threads(threads):
        target, draft, _ = load_pair(dtype=dtype, device=dev)
        passes = prepare([target, draft], dev, graphs, compile)["passes"]
        base = synthetic(requests or 100_000, input_len, output_len, seed=seed)
        max_in, max_out = int(base.input_tokens.max()), int(base.output_tokens.max())
        # a request's prompt, its output and a last round of drafts past it live in one cache: refused before any
        # measurement where the pair cannot hold them
        room = target.spec.max_context - 2 * max(gammas or [0]) - 4
        if max_in + max_out > room:
            raise SpecroofError(
                f"--input-len {input_len} and --output-len {output_len} reach {max_in} + {max_out} tokens, beyond "
                f"the {room} the offline pair holds with a last round of drafts (its max context "
                f"{target.spec.max_context}): keep prompt + output within {room}"
            )
        step_done("load")
        short = bud.limited and bud.remaining_s < SHORT_MICROBENCH_BELOW_S
        say(f"microbenchmarks (a-priori profile{', short set' if short else ''}) ...")
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            apriori = apriori_profile(Path(tmp) / "apriori.toml", dev, dtype, None, short)
        step_done("microbenchmarks")
        say("verify sweeps of the target and the draft, then one fit ...")
        # the sweeps' share of what is left (the target's two thirds of it): the fit needs their points, the
        # calibrations and the replays the rest
        after_sweeps = (1.0 - SWEEP_SHARE) * bud.remaining_s if bud.limited else 0.0
        draft_share = SWEEP_SHARE / 3 * bud.remaining_s if bud.limited else 0.0
        kw = dict(
            batch=sorted({1, max(1, slots // 2), slots}),
            context=[max_in, max_in + max_out],
            dtype=[dtype],
            device=dev,
            hardware=apriori,
            repeats=5,
            rounds=2,
            progress=False,
            budget=bud,
        )
        n_tok = sorted(set(sweep_tokens(gammas or [1], [slots])) | {max_in})
        if passes != "eager":
            # one cache per model for the sweeps and every replay, sized for the longest of them: the graphs read its
            # buffers where they are (a replay that needs more allocates anew, and its graphs are captured again)
            seq = max_in + max_out + max(max(n_tok), 2 * max(gammas or [0]) + 4) + 8
            for m in (target, draft):
                m.setup_cache(slots, min(seq, m.spec.max_context))
            if bud.limited:
                # the calibrations compile (or capture) every decode shape they run, whatever the budget: refused now,
                # in one line, where that alone would overrun it
                shape_s = time_staged_pass(target)
                fewest = calibration_shapes(slots, gammas, max_in, max_in + max_out, seq)
                need = PLAN_MARGIN * shape_s * fewest
                if need > bud.remaining_s - CLOSING_S:
                    raise SpecroofError(
                        f"--budget {bud.stated:g} is too short for measure serve with {passes} passes here: its "
                        f"calibrations compile ~{fewest} shapes at ~{shape_s:.1f} s each (~{need:.0f} s) and "
                        f"{bud.remaining_s:.0f} s are left; give a --budget of at least "
                        f"{bud.asking(bud.elapsed_s + 2 * need + 10 * CLOSING_S)} s, or drop --compile"
                    )
        swept = [
            sweep(target, new_tokens=n_tok, keep_s=after_sweeps + draft_share, essential=3, **kw),
            sweep(draft, new_tokens=[1, 2, 3, 4, max_in], keep_s=after_sweeps, **kw),
        ]
        for name, sw in zip(("target", "draft"), swept, strict=True):
            never = unvisited_words(sw)
            if never:
                dropped[f"{name} verify sweep: {never}"] = "never visited: beyond the sweeps' share of the budget"
        df = pd.concat(swept, ignore_index=True)
        specs = {target.spec.name: target.spec, draft.spec.name: draft.spec}
        fitted = fit(df, specs, apriori, statistic=statistic)
        say(f"fitted profile: MAPE {100 * fitted.mape:.1f}% over {fitted.n_points} passes")
        step_done("sweeps_and_fit")
        max_tokens = max(slots * (max(gammas or [0]) + 1), 1) + slots * max_in
        # calibration per policy: a burst of 6 x slots requests (full batches decoding together), then a staircase
        cal_w = synthetic(slots * 6, input_len, output_len, seed=seed + 7)
        cal_prompts = _prompts(cal_w, seed + 7)
        host: dict[str, float] = {}
        host_seq: dict[str, float] = {}
        pre_resid: dict[str, float] = {}
        spread: dict[str, float | None] = {}  # per speculating policy: the Beta concentration of its acceptance
        plain_step = prefill_s = math.nan

        first: dict[str, pd.DataFrame] = {}  # each policy's first calibration's steps (burst and staircase)
        stair_out = max(2, round(float(cal_w.output_tokens.mean())))  # one output length: a stair keeps its batch
        stair_sizes = [1] * COLD_PROBES + list(range(1, slots + 1))
        stair_w = synthetic(sum(stair_sizes), input_len, output_len, seed=seed + 11)
        stair_prompts = _prompts(stair_w, seed + 11)
        sim_terms: dict[str, tuple[float, float, float, float]] = {}  # what the simulator takes from it
        first_own: dict[str, pd.DataFrame] = {}  # each policy's first calibration's own steps

        def calibrate(p: Any) -> tuple[ServeResult, tuple[float, float, float, float], pd.DataFrame]:
            """A calibration of ``p``: a burst (``6 x slots`` requests at once), then a staircase of
            :data:`COLD_PROBES` single requests and 1, 2, ... ``slots`` requests (:func:`staircase_arrivals`,
            spaced by what the burst's rounds and prefills took),
            and the engine's host terms read off both, pooled with the policy's first calibration (a median over
            all their rounds: one calibration's rounds are few, and the machine drifts): the terms the simulator
            takes (the line and the prefill term, signed, and the first prefill after an idle wait:
            :func:`idle_start`). Returns the burst's run, those four, and this calibration's steps (burst and
            staircase, unpooled: what :func:`steps_speed` reads the machine's speed off)."""
            run = serve(
                target, cal_prompts, np.zeros(cal_w.n), cal_w.output_tokens, policy=p, drafter=draft, slots=slots
            )
            st = run.steps
            t_round, t_pre = burst_times(st, slots)
            if not math.isfinite(t_round):  # no full-batch round: the longest round bounds a stair's from above
                t_round = float(st["t_decode_s"].max())
            per_round = run.mean_tokens_per_round if p.speculates else 1.0
            # a stair's rounds at the full batch's round time (an upper bound) and its prefills, with a margin
            stair_s = [1.2 * (b * t_pre + math.ceil(stair_out / per_round) * t_round) for b in stair_sizes]
            arrivals = staircase_arrivals(stair_s, STAIR_GAP_S, stair_sizes)
            stairs = serve(
                target, stair_prompts, arrivals, np.full(stair_w.n, stair_out), policy=p, drafter=draft, slots=slots
            )
            # the single-request probes lend their cold prefills only: their rounds would weigh batch 1 four times
            # over in the host line, which is the stairs' and the burst's (the probes do not change it)
            ss = stairs.steps
            probe_rounds = (ss["start_s"] < arrivals[COLD_PROBES]) & (ss["decode_batch"] > 0)
            own = pd.concat([st, ss], ignore_index=True)
            steps = pd.concat([st, ss[~probe_rounds]], ignore_index=True)
            if p.name in first:
                steps = pd.concat([first[p.name], steps], ignore_index=True)
            else:
                first[p.name] = steps
            pooled = dataclasses.replace(run, steps=steps)
            res = host_residuals(pooled, fitted.hardware, target.spec, draft.spec, p.gamma, max_tokens, dtype)
            return run, (*host_terms(res), idle_start(res)), own

        t_cal = bud.elapsed_s
        for p in pols:
            run, sim_terms[p.name], first_own[p.name] = calibrate(p)
            host[p.name], host_seq[p.name], pre_resid[p.name] = sim_terms[p.name][:3]
            if p.speculates:
                spread[p.name] = acceptance_concentration(run.requests)
            if p.kind == "off":
                plain_step, prefill_s = burst_times(run.steps, slots)
        step_done("calibrations")
        mean_out = float(base.output_tokens.mean())
        # requests per second the plain engine serves with full batches: its decode share plus its own prefill
        capacity = 1.0 / (mean_out * plain_step / slots + prefill_s)
        rate_list = sorted(rates) if rates is not None else [round(f * capacity, 2) for f in RATE_FRACTIONS]
        if any(not (r > 0 and math.isfinite(r)) for r in rate_list):
            raise SpecroofError(f"rates must be positive request rates (got {rate_list})")
        # a calibration again before and after each run (rate x policy), then the replays share what is left
        one_cal = (bud.elapsed_s - t_cal) / len(pols)
        per_cal = 2 * one_cal if recalibrate else 0.0
        left = bud.remaining_s - CLOSING_S if bud.limited else None
        n = requests or requests_per_run(left, per_cal, rate_list, capacity, len(pols), replays)
        w0 = base.subset(np.arange(min(n, base.n)))
        prompts = _prompts(w0, seed)
        # the rates and replays that fit what is left, most needed first (the lightest rate always)
        plan = plan_replays(
            rate_list, w0.n, capacity, len(pols), replays, one_cal, left if left is not None else math.inf, recalibrate
        )
        finish_s = bud.elapsed_s + plan.seconds + CLOSING_S
        if bud.seconds is not None and finish_s > OVERRUN * bud.seconds:
            # even the lightest rate replayed once would end past the budget (and its 10%): refused, as a sweep
            # refuses a budget below its first point, with the budget that would do
            raise SpecroofError(
                f"--budget {bud.stated:g} is too short for measure serve here: {bud.elapsed_s:.0f} s went to the "
                f"imports, loading, microbenchmarks, sweeps, the fit and the calibrations, and one replay of "
                f"{w0.n} requests at {min(plan.rates):g} req/s needs ~{plan.seconds:.0f} s more; give a --budget of "
                f"at least {bud.asking(finish_s)} s"
            )
        for r in plan.dropped:
            dropped[f"rate {r:g} req/s"] = "not replayed: it did not fit with the rates before it"
        if plan.replays < replays:
            more = f"{plan.replays + 1}" if plan.replays + 1 == replays else f"{plan.replays + 1}-{replays}"
            dropped[f"replays {more} of {replays} of each trace"] = "they did not fit with every rate kept"
        if recalibrate and not plan.recalibrate:
            dropped["the calibrations around each replay"] = "the replays use the first calibration's terms"
        replays, recalibrate = plan.replays, plan.recalibrate
        if bud.limited:
            say(
                f"plan: rates {sorted(plan.rates)} req/s, {replays} replay(s) of {w0.n} requests each"
                f"{'' if recalibrate else ', no calibrations around them'}: ~{plan.seconds:.0f} s of the "
                f"{bud.remaining_s:.0f} s left (calibrations {one_cal:.1f} s per policy)"
            )
        say(
            f"plain full-batch step {1e3 * plain_step:.2f} ms -> capacity ~{capacity:.1f} req/s; rates {rate_list}; "
            f"{w0.n} requests per run; host per round: "
            + ", ".join(f"{k} {1e6 * v:+.0f} us {1e6 * host_seq[k]:+.0f} us/seq" for k, v in host.items())
            + "; prefill beyond its passes: "
            + ", ".join(f"{k} {1e6 * v:+.0f} us" for k, v in pre_resid.items())
            + "; acceptance concentration: "
            + ", ".join(f"{k} {'none' if v is None else f'{v:.3g}'}" for k, v in spread.items())
        )

        def price(r: float) -> float:
            """A run's (rate x policy) seconds as planned: its calibrations and replays."""
            return (2 * one_cal if recalibrate else 0.0) + replays * w0.n / min(r, capacity)

        predicted = sum(price(r) for r in plan.rates) * len(pols)
        bar = WorkBar(predicted, "measure serve", progress, budget=bud if bud.limited else None, tail_s=CLOSING_S)
        rows, meas_frames, sim_frames = [], [], []
        run_taken = run_priced = 0.0  # the runs' seconds against their prices: what the next rate should take
        first_rate = rate_order(plan.rates)[0]
        for r in sorted(plan.rates):
            w = w0.at_rate(r)
            need = PLAN_MARGIN * (run_taken / run_priced if run_priced > 0 else 1.0) * price(r) * len(pols)
            if r != first_rate and not bud.allows(need + CLOSING_S):
                dropped[f"rate {r:g} req/s"] = "not replayed: out of time (the runs took longer than planned)"
                bar.update(price(r) * len(pols))
                continue
            for p in pols:
                t_run = bud.elapsed_s
                # the host terms of a calibration run just before this replay and of one just after it, as measure
                # spec brackets each speculative run with baselines: on a shared machine the engine's speed moves
                # over seconds (a neighbour starting up slowed every pass ~25%), and the two bracket the replay's
                if recalibrate:
                    _, before, before_steps = calibrate(p)
                else:
                    before, before_steps = sim_terms[p.name], first_own[p.name]
                # the same trace replayed `replays` times: how far the engine disagrees with itself is the floor
                # under any error the simulator can be held to
                reps = [
                    serve(target, prompts, w.arrival_s, w.output_tokens, policy=p, drafter=draft, slots=slots)
                    for _ in range(replays)
                ]
                after, after_steps = calibrate(p)[1:] if recalibrate else (before, before_steps)
                terms = tuple(0.5 * (x + y) for x, y in zip(before, after, strict=True))
                h_round, h_seq, h_pre, h_idle = terms
                run = reps[0]
                e = float(np.mean([x.mean_tokens_per_round for x in reps])) if p.speculates else math.nan
                priced = functools.partial(_priced_steps, hw=fitted.hardware, target=target.spec, draft=draft.spec,
                                           gamma=p.gamma, max_tokens=max_tokens, dtype=dtype)  # fmt: skip
                ps_before, ps_after = priced(before_steps), priced(after_steps)  # (priced once, read twice)
                # the machine's speed in the calibrations around the replay, against the prices the simulator takes:
                # a neighbour that slows every pass by 30% for minutes moves the passes, which the additive host
                # terms only partly follow (docs/cost-model.md, section 27)
                f_cal = 0.5 * (_speed(ps_before, terms) + _speed(ps_after, terms))

                simulated = functools.partial(
                    _simulate_trace, fitted.hardware, target.spec, draft.spec, p, e, w=w, slots=slots, dtype=dtype,
                    max_tokens=max_tokens, seed=seed, concentration=spread.get(p.name),
                )  # fmt: skip
                sq = simulated(terms, speed=f_cal)
                # what the simulator says with each calibration alone: how far the engine's speed moved across the
                # replay, in the figure's own terms
                ends = (
                    [
                        latency_summary(simulated(t, speed=_speed(ps, t)))
                        for t, ps in ((before, ps_before), (after, ps_after))
                    ]
                    if recalibrate
                    else []
                )
                mq = run.requests
                each = [latency_summary(x.requests) for x in reps]
                ss = latency_summary(sq)
                # each replay simulated again at the speed it ran (not a prediction: read off the replay itself), to
                # part the machine's drift from the scheduling model's own error (docs/cost-model.md, section 27)
                speeds = [_speed(priced(x.steps), terms) for x in reps]
                matched = [latency_summary(simulated(terms, speed=f)) for f in speeds]
                row: dict[str, Any] = {"rate_req_s": r, "policy": p.name, "requests": w.n, "replays": replays}
                own = speed_matched_figures(each, matched, speeds)
                at_own = {k: float(own[f"{k.removesuffix('_s')}_speed_matched_s"]) for k in METRICS}
                row.update(compare_figures(each, ss, ends, at_own))
                row.update(found_columns([ttft_by_arrival(x.requests) for x in reps], ttft_by_arrival(sq)))
                row["calibration_speed"] = f_cal
                row.update(own)
                row["tokens_per_round"] = e
                row["round_host_s"], row["round_host_per_seq_s"], row["prefill_host_s"] = h_round, h_seq, h_pre
                row["idle_start_s"] = h_idle
                row["throughput_measured_tok_s"] = float(mq["output_tokens"].sum()) / run.duration_s
                row["mean_batch_measured"] = float(
                    np.average(run.steps["decode_batch"], weights=run.steps["end_s"] - run.steps["start_s"])
                )
                rows.append(row)
                meas_frames.append(mq.assign(rate_req_s=r, policy=p.name))
                sim_frames.append(sq.assign(rate_req_s=r, policy=p.name))
                run_taken += bud.elapsed_s - t_run
                run_priced += price(r)
                bar.update(price(r), f"rate {r} {p.name}")
        bar.close()
        step_done("replays")
    table = pd.DataFrame(rows)
    verdicts = _verdicts(table, [p.name for p in pols])
    settings = {
        "slots": slots,
        "threads": threads,
        "device": str(dev),
        "dtype": dtype,
        "passes": passes,
        "graphs": graphs,
        "compile": compile,
        "runner": runner_stats([target, draft]),
        "statistic": statistic,
        "fit_mape": fitted.mape,
        "fit_params": fitted.params,
        "capacity_req_s": capacity,
        "plain_step_s": plain_step,
        "host_per_round_s": host,
        "host_per_seq_s": host_seq,
        "prefill_residual_per_pass_s": pre_resid,
        "idle_start_s": {k: v[3] for k, v in sim_terms.items()},
        "alpha_concentration": spread,
        "input_len": str(input_len),
        "output_len": str(output_len),
        "target": target.spec.name,
        "draft": draft.spec.name,
        "prefill_per_request_s": prefill_s,
        "seconds": bud.elapsed_s,
        "budget_s": bud.seconds,
        "dropped": dropped,
        "steps_s": steps,
        "load": {k: v for k, v in machine_load(load0["ticks"]).items() if k != "ticks"},
    }
    return ServeCheck(
        table,
        verdicts,
        pd.concat(meas_frames, ignore_index=True),
        pd.concat(sim_frames, ignore_index=True),
        fitted.hardware,
        host,
        settings,
        host_seq,
    )


def compare_figures(
    replays: Sequence[dict[str, float]],
    simulated: dict[str, float],
    bracket: Sequence[dict[str, float]] = (),
    at_replay_speed: dict[str, float] | None = None,
) -> dict[str, float | bool]:
    """Per figure of :data:`METRICS`: the replays' mean (``*_measured_s``), the simulator's (``*_simulated_s``), its
    relative error, the replays' spread (range over mean), the calibrations' drift (how far the simulator moves
    between the calibration before the replays and the one after, ``bracket``, over the measured mean), the speed
    gap (how far it moves from the calibrations' speed to the speed the replays ran at themselves,
    ``at_replay_speed``: the machine changed during the replays in a way no calibration saw) and ``*_noisy``: the
    spread, the drift or the speed gap exceeds the error it would report (noise, not a result)."""
    out: dict[str, float | bool] = {}
    for k in METRICS:
        vals = np.array([m[k] for m in replays])
        mean = float(vals.mean())
        err = (simulated[k] - mean) / mean
        spread = float(np.ptp(vals) / mean) if len(replays) > 1 else math.nan
        drift = abs(bracket[0][k] - bracket[1][k]) / mean if len(bracket) == 2 else 0.0
        gap = abs(simulated[k] - at_replay_speed[k]) / mean if at_replay_speed is not None else 0.0
        name = k.removesuffix("_s")
        out[f"{name}_measured_s"] = mean
        out[f"{name}_simulated_s"] = simulated[k]
        out[f"{name}_rel_error"] = err
        out[f"{name}_replay_spread"] = spread
        out[f"{name}_calibration_drift"] = drift
        out[f"{name}_speed_gap"] = gap
        out[f"{name}_noisy"] = bool(spread > abs(err) or drift > abs(err) or gap > abs(err))
    return out


def speed_matched_figures(
    replays: Sequence[dict[str, float]], matched: Sequence[dict[str, float]], speeds: Sequence[float]
) -> dict[str, float | bool]:
    """Per figure of :data:`METRICS`, the simulator run at each replay's own speed (:func:`steps_speed`) against the
    replays: ``*_speed_matched_s`` (the mean over the replays of each one's matched simulation), its relative error
    against the replays' mean, and ``*_speed_matched_noisy`` where the replays' range over their mean exceeds that
    error; and ``replay_speed`` (the replays' mean speed against the simulator's prices)."""
    at_own = {k: float(np.mean([m[k] for m in matched])) for k in METRICS}
    fig = compare_figures(replays, at_own)  # (no bracket, no gap: the replays' spread alone makes it noisy)
    out: dict[str, float | bool] = {"replay_speed": float(np.mean(speeds))}
    for k in METRICS:
        name = k.removesuffix("_s")
        out[f"{name}_speed_matched_s"] = fig[f"{name}_simulated_s"]
        out[f"{name}_speed_matched_rel_error"] = fig[f"{name}_rel_error"]
        out[f"{name}_speed_matched_noisy"] = fig[f"{name}_noisy"]
    return out


#: the simulator's per-request columns that are times (seconds on its clock)
_TIME_COLUMNS = ("arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s")


def _simulate_trace(
    hw: Hardware,
    target: Any,
    draft: Any,
    policy: Any,
    tokens_per_round: float,
    terms: tuple[float, float, float, float],
    *,
    speed: float = 1.0,
    w: Workload,
    slots: int,
    max_tokens: int,
    seed: int,
    concentration: float | None,
    dtype: str = "fp32",
) -> pd.DataFrame:
    """The trace ``w`` through the simulator as the engine runs it (``max_seqs`` = slots, separate prefill), with
    host ``terms`` (round, per sequence, prefill, idle start; signed but the last: the engine's correction to the
    fitted profile), every price ``speed`` times over (:func:`at_speed`) and the acceptance the replays measured:
    its requests."""
    q = simulate(
        hardware=hw,
        target=target,
        drafter=draft if policy.speculates else None,
        acceptance=f"mean:{tokens_per_round}@{policy.gamma}" if policy.speculates else 0.7,
        policy=[policy],
        rates=None,
        trace=at_speed(w, speed),
        dtype=dtype,
        max_seqs=slots,
        max_tokens=max_tokens,
        kv_capacity_tokens=1 << 30,
        seed=seed,
        prefill="separate",
        round_host_s=terms[0],
        round_host_per_seq_s=terms[1],
        prefill_host_s=terms[2],
        idle_start_s=terms[3],
        alpha_concentration=concentration,
    ).requests
    if speed != 1.0:
        q[list(_TIME_COLUMNS)] *= speed
    return q


def _verdicts(table: pd.DataFrame, policies: list[str]) -> pd.DataFrame:
    """Per rate and speculating policy: does it beat off on ``VERDICT_METRIC``, measured and simulated."""
    out = []
    m = VERDICT_METRIC.removesuffix("_s")
    for r, grp in table.groupby("rate_req_s"):
        g = grp.set_index("policy")
        if "off" not in g.index:
            continue
        for p in policies:
            if p == "off" or p not in g.index:
                continue
            meas = bool(g.at[p, f"{m}_measured_s"] < g.at["off", f"{m}_measured_s"])
            simu = bool(g.at[p, f"{m}_simulated_s"] < g.at["off", f"{m}_simulated_s"])
            out.append(
                {
                    "rate_req_s": r,
                    "policy": p,
                    "pays_measured": meas,
                    "pays_simulated": simu,
                    "agree": meas == simu,
                    "ratio_measured": g.at[p, f"{m}_measured_s"] / g.at["off", f"{m}_measured_s"],
                    "ratio_simulated": g.at[p, f"{m}_simulated_s"] / g.at["off", f"{m}_simulated_s"],
                }
            )
    return pd.DataFrame(out)
