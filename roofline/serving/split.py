"""One long run cut where its server stood empty, its pieces simulated in parallel processes.

A run of many requests at light load is a long chain of short steps, and the scheduler takes them
one at a time. But whenever the server stands empty (every request so far finished, nothing queued:
it waits for the next arrival), what follows depends only on the requests still to come and the
random numbers drawn from then on: the run starts afresh there (a regeneration point). So:

1. the requests are cut into chunks of :data:`CHUNK_REQUESTS`; each chunk is simulated from an empty
   server, with a random stream of its own, and a window of requests past its end (:func:`plan`);
2. the first request before whose arrival both a chunk and the next stood empty is the splice: the
   chunk's requests and totals up to it, the next chunk's from it on (the totals and ITL histograms are
   running sums taken at those moments: :class:`roofline.serving.scheduler.IdleMarks`).

The spliced run is a run of the same scheduler on the same requests. A splice is a stopping time of
both runs and the numbers drawn after it are fresh, so it has the law of an unsplit run, except when
some chunk and the next never stood empty together inside the window; that run is simulated unsplit
instead, and that chance bounds how far the law can move (total variation). Its random numbers are
not an unsplit run's: the same seed gives the same run for every number of workers above one.

A pilot decides whether to cut: the first :data:`PILOT_REQUESTS` requests simulated alone. A server
that stood empty before fewer than :data:`MIN_IDLE_SHARE` of their arrivals regenerates too rarely
(near saturation it never does) and the run is not cut. docs/cost-model.md, "Serving under load".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from roofline.serving.policies import ServingPolicy
from roofline.serving.prices import StepPrices
from roofline.serving.scheduler import MARK_TOTALS, FloatArray, RunResult, SchedulerConfig, Trace, simulate_run
from roofline.serving.workload import Workload

#: requests per chunk (a run is cut only when it has at least two)
CHUNK_REQUESTS = 10_000
#: requests a chunk runs past its end, within which it must meet the next chunk at an empty server: WINDOW_SCALE
#: over the pilot's share of arrivals that found the server empty (the mean gap between such arrivals is one over
#: it; the handovers measured took 2.6-7 such gaps), within [MIN_WINDOW_REQUESTS, WINDOW_REQUESTS]
WINDOW_SCALE = 20.0
MIN_WINDOW_REQUESTS = 200
WINDOW_REQUESTS = 2_000
#: requests of the pilot that decides whether a run is cut
PILOT_REQUESTS = 1_000
#: the share of the pilot's arrivals that must find the server empty
MIN_IDLE_SHARE = 0.01
#: stream tags of the pilot's and the chunks' random numbers (apart from the unsplit run's own seed)
_PILOT_STREAM, _CHUNK_STREAM = 17, 29


@dataclass(frozen=True)
class Plan:
    """Where a run is cut: the first request of each chunk, and the requests each runs past its end."""

    starts: tuple[int, ...]
    window: int


def plan(
    w: Workload,
    prices: StepPrices,
    policy: ServingPolicy,
    alpha: FloatArray,
    cfg: SchedulerConfig,
    seed: int,
) -> Plan | None:
    """Where to cut the run when it is worth cutting, else None (see the module docstring)."""
    if w.n < 2 * CHUNK_REQUESTS:
        return None
    idx = np.arange(PILOT_REQUESTS)
    pilot = simulate_run(
        w.subset(idx), prices, policy, alpha[idx], cfg, np.random.default_rng([seed, _PILOT_STREAM]), marks=()
    )
    assert pilot.idle is not None
    share = pilot.idle.request.size / PILOT_REQUESTS
    if share < MIN_IDLE_SHARE:
        return None
    starts = list(range(0, w.n, CHUNK_REQUESTS))
    if w.n - starts[-1] < CHUNK_REQUESTS // 2:
        starts.pop()  # a short last chunk joins the one before
    window = min(WINDOW_REQUESTS, max(MIN_WINDOW_REQUESTS, math.ceil(WINDOW_SCALE / share)))
    return Plan(tuple(starts), window)


def chunk_args(
    w: Workload,
    prices: StepPrices,
    policy: ServingPolicy,
    alpha: FloatArray,
    cfg: SchedulerConfig,
    seed: int,
    cut: Plan,
    c: int,
) -> tuple:
    """The arguments of :func:`run_chunk` for chunk ``c``: its requests and the window past its end."""
    starts = cut.starts
    s = starts[c]
    nxt = starts[c + 1] if c + 1 < len(starts) else w.n
    end = min(w.n, nxt + cut.window)
    windows = []
    if c > 0:
        windows.append((0, cut.window))  # where the chunk before may hand over
    if c + 1 < len(starts):
        windows.append((nxt - s, end - s))  # where it may hand over to the next
    idx = np.arange(s, end)
    return w.subset(idx), prices, policy, alpha[idx], cfg, [seed, _CHUNK_STREAM, c], tuple(windows)


def run_chunk(args: tuple) -> RunResult:
    """One chunk from an empty server, with its idle marks."""
    w, prices, policy, alpha, cfg, seed, windows = args
    return simulate_run(w, prices, policy, alpha, cfg, np.random.default_rng(seed), marks=windows)


def _handover(a: RunResult, b: RunResult, offset: int) -> int | None:
    """The first request (local to ``a``) at or after ``offset`` before which ``a`` and ``b`` (which starts at
    ``offset``) both stood empty, both with their histograms kept; None when there is none in the window."""
    assert a.idle is not None and b.idle is not None
    theirs = {int(j) + offset for j in b.idle.itl}
    for j in sorted(a.idle.itl):
        if j >= offset and j in theirs:
            return j
    return None


def _mark(r: RunResult, local: int) -> int:
    assert r.idle is not None
    return int(np.searchsorted(r.idle.request, local))


def _thin(trace: Trace, size: int) -> Trace:
    if trace.time_s.size <= size:
        return trace
    keep = np.linspace(0, trace.time_s.size - 1, size).round().astype(np.int64)
    return Trace(trace.time_s[keep], trace.batch[keep], trace.kv_utilisation[keep])


def splice(runs: list[RunResult], cut: Plan, arrival_s: FloatArray, trace_points: int) -> RunResult | None:
    """The chunks' runs as one run (requests renumbered, totals between the splices), or None where a chunk and
    the next never stood empty together inside the window."""
    starts = cut.starts
    cuts: list[int] = []  # global request of each handover
    for c in range(len(runs) - 1):
        j = _handover(runs[c], runs[c + 1], starts[c + 1] - starts[c])
        if j is None:
            return None
        cuts.append(starts[c] + j)
    frames, traces = [], []
    totals = np.zeros(len(MARK_TOTALS))
    itl = np.zeros_like(runs[0].itl_counts)
    max_kv, max_tokens = 0.0, 0
    for c, r in enumerate(runs):
        idle = r.idle
        assert idle is not None
        s = starts[c]
        lo = cuts[c - 1] - s if c > 0 else 0  # the chunk's own requests: [lo, hi) local
        hi = cuts[c] - s if c < len(cuts) else len(r.requests)
        # the totals at the marks that open and close its stretch (zero at the start; the run's end at the end)
        if c > 0:
            m_lo = _mark(r, lo)
            totals -= idle.totals[m_lo]
            itl -= idle.itl[lo]
        else:
            m_lo = -1
        if c < len(cuts):
            m_hi = _mark(r, hi)
            totals += idle.totals[m_hi]
            itl += idle.itl[hi]
            seg = slice(m_lo + 1, m_hi + 1)
        else:
            totals += [getattr(r, k) for k in MARK_TOTALS]
            itl += r.itl_counts
            seg = slice(m_lo + 1, None)
            max_kv, max_tokens = max(max_kv, idle.tail_max_kv), max(max_tokens, idle.tail_max_tokens)
        if idle.max_kv[seg].size:
            max_kv = max(max_kv, float(idle.max_kv[seg].max()))
            max_tokens = max(max_tokens, int(idle.max_tokens[seg].max()))
        q = r.requests.iloc[lo:hi]
        frames.append(q.assign(request=q["request"] + s))
        t0 = float(arrival_s[cuts[c - 1]]) if c > 0 else -np.inf
        t1 = float(arrival_s[cuts[c]]) if c < len(cuts) else np.inf
        keep = (r.trace.time_s >= t0) & (r.trace.time_s < t1)
        traces.append(Trace(r.trace.time_s[keep], r.trace.batch[keep], r.trace.kv_utilisation[keep]))
    tot = dict(zip(MARK_TOTALS, totals.tolist(), strict=True))
    trace = Trace(
        np.concatenate([t.time_s for t in traces]),
        np.concatenate([t.batch for t in traces]),
        np.concatenate([t.kv_utilisation for t in traces]),
    )
    return RunResult(
        requests=pd.concat(frames, ignore_index=True),
        itl_counts=itl,
        busy_s=tot["busy_s"],
        batch_seconds=tot["batch_seconds"],
        kv_block_seconds=tot["kv_block_seconds"],
        kv_blocks=runs[0].kv_blocks,
        max_kv_utilisation=max_kv,
        max_step_tokens=max_tokens,
        rounds=round(tot["rounds"]),
        draft_tokens=round(tot["draft_tokens"]),
        accepted_tokens=round(tot["accepted_tokens"]),
        trace=_thin(trace, trace_points),
        decode_runs=round(tot["decode_runs"]),
        prefill_steps=round(tot["prefill_steps"]),
        chunks=len(runs),
    )
