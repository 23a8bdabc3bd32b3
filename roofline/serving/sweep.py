"""``simulate``: a serving sweep over request rates and speculation policies, one priced scheduler run per point."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.core.validation import RANGES, check_count, check_number, check_tp
from roofline.costing.engine import Engine
from roofline.costing.hardware import Hardware
from roofline.passes.dtypes import dtype_bytes
from roofline.passes.model import ModelSpec, get_model
from roofline.serving import split
from roofline.serving.disaggregated import simulate_disaggregated
from roofline.serving.metrics import (
    check_slo,
    goodput,
    latency_columns,
    speculation_pays,
    speculation_stops_paying_at_rate,
)
from roofline.serving.policies import ServingPolicy, parse_policy
from roofline.serving.prices import kv_capacity_tokens as device_kv_tokens
from roofline.serving.prices import pricing_context, step_prices
from roofline.serving.scheduler import RunResult, SchedulerConfig, simulate_run
from roofline.serving.workload import MAX_REQUESTS, Workload, check_rate, read_trace, synthetic
from roofline.speculation.acceptance import parse_acceptance as parse_acceptance_text
from roofline.speculation.acceptance_kinds import check_reused_modules, reused_step_limit
from roofline.speculation.drafters import DrafterLike, PromptLookup, as_drafter
from roofline.speculation.drafters.base import deepest
from roofline.speculation.gamma_policies import GammaPolicy

PolicyLike = str | ServingPolicy | GammaPolicy

#: what "pays" is judged on, by the name a user gives it (``serve --objective``), and the summary column measuring it
OBJECTIVES = {
    "tpot": "tpot_p50_s",
    "ttft": "ttft_p50_s",
    "e2e": "e2e_p50_s",
    "throughput": "throughput_tok_s",
    "goodput": "goodput_req_s",
}
#: the default: the median request's end-to-end latency sees both what speculation buys (a shorter decode) and what it
#: costs under load (verify tokens take the step budget prefills would use, so the queue and TTFT grow)
DEFAULT_OBJECTIVE = "e2e"


@dataclass(frozen=True)
class Verdict:
    """Where one policy pays against plain decoding on one metric, rate by rate, in words that match the table.

    ``kind``: ``always`` (pays at every rate swept), ``never``, ``stops`` (pays below one rate and at none above:
    ``stops_at`` is the interpolated crossing) or ``mixed`` (pays, loses and pays again: no single rate where it stops).
    """

    policy: str
    metric: str
    rates: tuple[float, ...]
    pays: tuple[bool, ...]
    stops_at: float | None

    @property
    def pays_at(self) -> tuple[float, ...]:
        return tuple(r for r, ok in zip(self.rates, self.pays, strict=True) if ok)

    @property
    def loses_at(self) -> tuple[float, ...]:
        return tuple(r for r, ok in zip(self.rates, self.pays, strict=True) if not ok)

    @property
    def kind(self) -> str:
        if all(self.pays):
            return "always"
        if not any(self.pays):
            return "never"
        first_loss = self.pays.index(False)
        return "stops" if not any(self.pays[first_loss:]) else "mixed"

    def sentence(self, where: str = "") -> str:
        """One sentence: the verdict, on which GPU, judged on which metric."""
        at = f" on {where}" if where else ""
        on = f"(on {self.metric})"
        if self.kind == "always":
            return f"speculation ({self.policy}) pays at every rate swept{at}, up to {max(self.rates):g} req/s {on}"
        if self.kind == "never":
            return (
                f"speculation ({self.policy}) does not pay at any rate swept{at}, from {min(self.rates):g} req/s {on}"
            )
        if self.kind == "stops":
            return (
                f"speculation ({self.policy}) pays up to {self.stops_at:.3g} req/s{at}; above that plain decoding "
                f"wins {on}"
            )
        return (
            f"speculation ({self.policy}) pays at {_rates(self.pays_at)} req/s and not at {_rates(self.loses_at)} "
            f"req/s{at} {on}: no single rate where it stops paying"
        )

    def words(self) -> str:
        """The verdict in a few words, for a table that judges every objective."""
        if self.kind == "always":
            return "pays at every rate"
        if self.kind == "never":
            return "pays at no rate"
        if self.kind == "stops":
            return f"pays up to {self.stops_at:.3g} req/s"
        return f"pays at {_rates(self.pays_at)} req/s only"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "metric": self.metric,
            "stops_at_rate": self.stops_at,
            "pays_at_rates": list(self.pays_at),
            "loses_at_rates": list(self.loses_at),
        }


def _rates(rates: Sequence[float]) -> str:
    return ", ".join(f"{r:g}" for r in rates)


def verdict(summary: pd.DataFrame, policy: str, metric: str = "e2e_p50_s", baseline: str = "off") -> Verdict:
    """Whether ``policy`` pays against ``baseline`` at each rate on ``metric``, as a :class:`Verdict`."""
    t = speculation_pays(summary, policy, baseline=baseline, metric=metric)
    pays = tuple(bool(x) for x in t["pays"])
    v = Verdict(policy, metric, tuple(float(r) for r in t["rate_req_s"]), pays, None)
    if v.kind == "stops":
        stop = speculation_stops_paying_at_rate(summary, policy, baseline=baseline, metric=metric)
        v = Verdict(policy, metric, v.rates, pays, stop)
    return v


@dataclass(frozen=True)
class ServingResult:
    """A serving sweep: ``requests`` (one row per request per point), ``summary`` (one row per policy and rate),
    ``traces`` (batch and KV utilisation over time per point) and the settings it ran with."""

    requests: pd.DataFrame
    summary: pd.DataFrame
    traces: dict[tuple[str, float], pd.DataFrame] = field(repr=False)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def policies(self) -> list[str]:
        return list(dict.fromkeys(self.summary["policy"]))

    def stops_paying(self, metric: str = "e2e_p50_s", baseline: str = "off") -> dict[str, float | None]:
        """Per speculating policy, :func:`speculation_stops_paying_at_rate` against ``baseline``."""
        return {
            p: speculation_stops_paying_at_rate(self.summary, p, baseline=baseline, metric=metric)
            for p in self.policies
            if p != baseline
        }

    def verdicts(self, metric: str = "e2e_p50_s", baseline: str = "off") -> dict[str, Verdict]:
        """Per speculating policy, its :class:`Verdict` against ``baseline`` on ``metric``."""
        return {p: verdict(self.summary, p, metric, baseline) for p in self.policies if p != baseline}


def parse_acceptance(acceptance: float | str, gamma: int | None) -> float:
    """Per-token alpha from ``0.7``, ``alpha:0.7``, ``mean:3.2@4`` (tokens per round at gamma 4), ...

    (:func:`roofline.speculation.acceptance.parse_acceptance`; a bare ``mean:3.2`` is taken at ``gamma``.)
    """
    return float(parse_acceptance_text(acceptance, gamma=gamma).alpha())


def draw_alphas(mean: float, n: int, concentration: float | None, rng: np.random.Generator) -> np.ndarray:
    """Each request's alpha: ``mean`` for all, or Beta(mean k, (1 - mean) k) with concentration k (mean ``mean``)."""
    if concentration is None or mean in (0.0, 1.0):
        return np.full(n, mean)
    if not (math.isfinite(concentration) and concentration > 0):
        raise SpecroofError(f"alpha concentration must be > 0 (got {concentration})")
    return rng.beta(mean * concentration, (1.0 - mean) * concentration, n)


def _one(args: tuple[Any, ...]) -> RunResult:
    w, prices, policy, alphas, cfg, seed, disagg = args
    if disagg is not None:
        p, d, kvb, link = disagg
        return simulate_disaggregated(
            w, prices, policy, alphas, cfg, seed, prefill_servers=p, decode_servers=d, kv_bytes_per_token=kvb,
            link_bytes_per_s=link,
        )  # fmt: skip
    return simulate_run(w, prices, policy, alphas, cfg, np.random.default_rng(seed))


def _task(task: tuple[int, bool, Any]) -> RunResult:
    """A whole run (a job's arguments) or, flagged, one chunk of a cut run (:func:`roofline.serving.split.chunk_args`)."""
    _, chunk, args = task
    return split.run_chunk(args) if chunk else _one(args)


def _pools(text: str | tuple[int, int]) -> tuple[int, int]:
    """(prefill servers, decode servers) from ``"P:D"`` or a pair."""
    try:
        p, d = (int(x) for x in (text.split(":") if isinstance(text, str) else text))
    except (ValueError, TypeError):
        raise SpecroofError(f"disaggregate takes P:D, prefill and decode servers, e.g. 1:3 (got {text!r})") from None
    if p < 1 or d < 1:
        raise SpecroofError(f"disaggregate P:D needs at least one server per pool (got {p}:{d})")
    return p, d


def merge_runs(runs: list[RunResult], replicas: int) -> RunResult:
    """One result for servers behind a round-robin balancer: requests back in arrival order, totals added."""
    if len(runs) == 1:
        return runs[0]
    parts = [r.requests.assign(server=i, request=r.requests["request"] * replicas + i) for i, r in enumerate(runs)]
    q = pd.concat(parts, ignore_index=True).sort_values("request").reset_index(drop=True)
    return RunResult(
        requests=q,
        itl_counts=np.sum([r.itl_counts for r in runs], axis=0),
        busy_s=sum(r.busy_s for r in runs),
        batch_seconds=sum(r.batch_seconds for r in runs),
        kv_block_seconds=sum(r.kv_block_seconds for r in runs),
        kv_blocks=runs[0].kv_blocks,
        max_kv_utilisation=max(r.max_kv_utilisation for r in runs),
        max_step_tokens=max(r.max_step_tokens for r in runs),
        rounds=sum(r.rounds for r in runs),
        draft_tokens=sum(r.draft_tokens for r in runs),
        accepted_tokens=sum(r.accepted_tokens for r in runs),
        trace=runs[0].trace,  # the first server's: every server sees the same share of the traffic
        decode_runs=sum(r.decode_runs for r in runs),
        prefill_steps=sum(r.prefill_steps for r in runs),
        chunks=sum(r.chunks for r in runs),
    )


def _summary_row(
    r: RunResult, policy: str, rate: float, slo_ttft_s: float | None, slo_tpot_s: float | None, servers: int = 1
) -> dict:
    q = r.requests
    duration = float(q["finish_s"].max() - q["arrival_s"].min())
    busy = max(r.busy_s, 1e-300)
    return {
        "policy": policy,
        "rate_req_s": rate,
        "requests": len(q),
        "duration_s": duration,
        **latency_columns(q, r.itl_counts),
        "throughput_tok_s": float(q["output_tokens"].sum()) / duration,
        "request_throughput_req_s": len(q) / duration,
        "goodput_req_s": goodput(q["ttft_s"], q["tpot_s"], duration, slo_ttft_s, slo_tpot_s),
        "mean_batch": r.batch_seconds / busy,
        "kv_utilisation_mean": r.kv_block_seconds / (r.kv_blocks * busy),
        "kv_utilisation_max": r.max_kv_utilisation,
        "busy_fraction": r.busy_s / (duration * servers),
        "preemptions": int(q["preemptions"].sum()),
        "acceptance_rate": r.accepted_tokens / r.draft_tokens if r.draft_tokens else math.nan,
        "mean_gamma": r.draft_tokens / r.rounds if r.rounds else 0.0,
        "max_step_tokens": r.max_step_tokens,
    }


def simulate(
    *,
    hardware: Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike = None,
    acceptance: float | str = 0.7,
    policy: PolicyLike | Sequence[PolicyLike] = ("off", "static:3"),
    rates: Sequence[float] | float | None = (1.0, 2.0, 4.0, 8.0, 16.0),
    requests: int = 1000,
    input_len: str | int = 512,
    output_len: str | int = 128,
    arrivals: str = "poisson",
    trace: str | Path | Workload | None = None,
    engine: Engine | str | None = None,
    dtype: str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    tp: int | None = None,
    max_seqs: int = 256,
    max_tokens: int = 2048,
    block_size: int = 16,
    kv_capacity_tokens: int | None = None,
    memory_fraction: float = 0.9,
    alpha_concentration: float | None = None,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
    seed: int = 0,
    workers: int = 1,
    trace_points: int = 2048,
    replicas: int = 1,
    disaggregate: str | tuple[int, int] | None = None,
    kv_link_GB_per_s: float | None = None,
    prefill: str = "fused",
    round_host_s: float = 0.0,
    round_host_per_seq_s: float = 0.0,
    prefill_host_s: float = 0.0,
    idle_start_s: float = 0.0,
    ep: int = 1,
    ep_link_GB_per_s: float | None = None,
    on_run: Callable[[int, int, str], None] | None = None,
    measured_at: int | None = None,
) -> ServingResult:
    """Simulate continuous-batching serving of ``target`` on ``hardware`` at each request rate, per policy.

    ``policy``: one or several of ``off``, ``static:G``, ``by-batch:B=G,...``, ``tree:NAME``, ``goodput[:GMAX]``
    (:mod:`roofline.serving.policies`) or :mod:`roofline.speculation.gamma_policies` objects. ``drafter``:
    a drafter object or name (:func:`roofline.speculation.drafters.as_drafter`: ``model:NAME``, ``eagle3``,
    ``mtp``, ``early-exit:L``, ...). ``acceptance``: per-token alpha (``0.7``, ``alpha:0.7``) or
    tokens per round ``mean:3.2@G``; ``alpha_concentration`` k draws each request's own alpha
    from Beta(alpha k, (1 - alpha) k) (default: every request at alpha).

    Workload: ``requests`` requests with ``input_len``/``output_len`` (``N``, ``uniform:A-B``,
    ``lognormal:MEDIAN,SIGMA``) arriving by ``arrivals`` (``poisson``, ``gamma:K``), or a
    ``trace`` (CSV/JSON-lines file with arrival_s, input_tokens, output_tokens, or a
    :class:`Workload`) replayed as it is (``rates=None``) or rescaled to each rate.

    Scheduler: ``max_seqs`` running sequences, ``max_tokens`` tokens per step (chunked
    prefill), KV blocks of ``block_size`` tokens; ``prefill="separate"`` prices an engine without chunked
    prefill (whole prompts in a pass of their own after each decode round, the draft model's prefill
    too: :mod:`roofline.serving.scheduler`); ``round_host_s + round_host_per_seq_s b`` adds host seconds to
    every decode round of ``b`` sequences, plain or speculative, on top of the profile (an engine's own
    loop, measured apart from its passes), ``prefill_host_s`` to every separate prefill step, ``idle_start_s``
    to the first prefill step after the server idled (a cold start: :mod:`roofline.serving.prices`);
    ``kv_capacity_tokens`` defaults to what
    fits in ``memory_fraction`` of the device after weights, drafter and activations.
    ``workers`` > 1 runs the (policy, rate, server) runs in that many processes, and cuts a run of 20,000
    requests or more whose server often stands empty (light load) into chunks simulated in parallel and spliced
    where it stood empty (:mod:`roofline.serving.split`: the same distribution, other random numbers; the
    summary's ``settings["chunks"]`` says how each point ran). ``replicas`` > 1
    serves the traffic from that many identical servers behind a round-robin load balancer
    (request i goes to server i mod replicas); each server is priced as ``hardware`` with ``tp``.
    ``disaggregate="P:D"`` runs prefill on P servers and decoding on D others, the prompt's KV
    crossing ``kv_link_GB_per_s`` (default: the profile's interconnect) between them
    (:mod:`roofline.serving.disaggregated`). ``ep`` > 1 serves an MoE target from ``ep`` GPUs with its
    routed experts sharded over them and attention data-parallel, each MoE layer paying a dispatch and a
    combine all-to-all over the profile's interconnect within a node (``ep_link_GB_per_s`` across nodes):
    :mod:`roofline.speculation.parallel`; one such group is one server. ``on_run(done, total, label)`` is called as each
    (policy, rate, server) run finishes, in order (a progress bar: 100,000 requests take seconds per run).
    A drafter that reuses a module past its trained step (an MTP stack) takes the one rate drawn only up to those
    steps or ``measured_at`` (the drafts the acceptance was measured over; read from a ``mean:E@G`` text when not
    given): ``goodput`` stops there and a static gamma past it is refused, as ``plan`` prices it (section 29).

    Returns a :class:`ServingResult`; ``summary`` has ``ttft_p50_s`` ... ``e2e_p99_s``,
    ``itl_p*_s``, ``throughput_tok_s``, ``goodput_req_s`` (under ``slo_ttft_s``/``slo_tpot_s``),
    ``mean_batch`` and ``kv_utilisation_*`` per policy and rate.
    """
    check_slo("slo_ttft_s", slo_ttft_s)
    check_slo("slo_tpot_s", slo_tpot_s)
    # every count and number once, before any work: numpy scalars and whole floats (8.0) are numbers, 2.5
    # sequences or 10**30 requests are the library's one-line error, not a TypeError from range() below
    requests = check_count("requests", requests, 1, MAX_REQUESTS)
    max_seqs = check_count("max_seqs", max_seqs, 1, int(RANGES["batch"].hi))
    max_tokens = check_count("max_tokens", max_tokens, 1, int(RANGES["tokens"].hi))
    block_size = check_count("block_size", block_size, 1, int(RANGES["tokens"].hi))
    trace_points = check_count("trace_points", trace_points, 2, int(RANGES["tokens"].hi))
    seed = check_count("seed", seed, 0)
    workers = check_count("workers", workers, 1, 1024)
    replicas = check_count("replicas", replicas, 1, 100_000)
    ep = check_count("ep", ep, 1, int(RANGES["tp"].hi))
    if tp is not None:
        tp = check_count("tp", tp, 1, int(RANGES["tp"].hi))
    if kv_capacity_tokens is not None:
        kv_capacity_tokens = check_count("kv_capacity_tokens", kv_capacity_tokens, block_size)
    memory_fraction = check_number("memory_fraction", memory_fraction, 0.0, 1.0, lo_open=True)
    host = {"round_host_s": round_host_s, "round_host_per_seq_s": round_host_per_seq_s}
    host |= {"prefill_host_s": prefill_host_s, "idle_start_s": idle_start_s}
    # the host line is signed (a correction to the profile: prices.py refuses one that leaves a step no time, and a
    # negative cold start): here each is a finite number of seconds, numpy or not
    lim = RANGES["seconds"].hi
    host = {k: check_number(k, v, -lim, lim, unit="seconds") for k, v in host.items()}
    round_host_s, round_host_per_seq_s = host["round_host_s"], host["round_host_per_seq_s"]
    prefill_host_s, idle_start_s = host["prefill_host_s"], host["idle_start_s"]
    if alpha_concentration is not None:
        alpha_concentration = check_number("alpha_concentration", alpha_concentration, 0.0, lo_open=True)
    if kv_link_GB_per_s is not None:
        kv_link_GB_per_s = check_number("kv_link_GB_per_s", kv_link_GB_per_s, 0.0, lo_open=True)
    if ep_link_GB_per_s is not None:
        ep_link_GB_per_s = check_number("ep_link_GB_per_s", ep_link_GB_per_s, 0.0, lo_open=True)
    if isinstance(acceptance, (np.integer, np.floating, np.ndarray)):
        acceptance = check_number("acceptance", acceptance, 0.0, 1.0)
    spec = get_model(target)
    if tp is not None and tp != 1:  # 3 devices do not split 32 heads
        check_tp(spec, tp)
    pols = [parse_policy(p) for p in ([policy] if isinstance(policy, (str, ServingPolicy, GammaPolicy)) else policy)]
    if not pols:
        raise SpecroofError("give at least one policy (off, static:G, by-batch:B=G,..., goodput)")
    names = [p.name for p in pols]
    if len(set(names)) != len(names):
        raise SpecroofError(f"policies repeat: {', '.join(names)}")
    speculating = [p for p in pols if p.speculates]
    if speculating and drafter is None:
        raise SpecroofError(
            f"policy {speculating[0].name} speculates: give a drafter (e.g. model:llama-3.2-1b, eagle3)"
        )
    d = as_drafter(drafter, spec) if drafter is not None else None  # dflash: the target's published drafter
    if ep != 1 and isinstance(d, PromptLookup):
        # its verify pass blends two passes' costs and prices them directly, past the context's expert-parallel pass
        raise SpecroofError("ep > 1 is not priced for the n-gram drafter (prompt lookup): use a model or head drafter")
    alpha = parse_acceptance(acceptance, speculating[0].top_gamma if speculating else None)
    # goodput chooses gamma up to its top: no deeper than the drafter drafts (Medusa's, Hydra's heads), and one
    # per-token rate (the simulator draws one) not stretched over an MTP module's reused steps (docs/cost-model.md,
    # section 29), as plan and speedup do not stretch it: the trained steps, or the drafts a mean was measured over;
    # a static gamma past those is refused
    top = 1 << 30
    limit = reused_step_limit(d, spec) if d is not None and speculating else None
    if limit is not None:
        measured = measured_at or getattr(
            parse_acceptance_text(acceptance, gamma=speculating[0].top_gamma), "length", None
        )
        top = max(limit, measured or 0)
        for p in pols:
            if p.speculates and p.kind != "goodput" and p.top_gamma > top:
                check_reused_modules(d, spec, p.top_gamma, measured)
    top = deepest(d, top) if d is not None else top
    pols = [dataclasses.replace(p, max_gamma=top) if p.kind == "goodput" and p.max_gamma > top else p for p in pols]

    if trace is not None:
        base = trace if isinstance(trace, Workload) else read_trace(trace)
    else:
        base = synthetic(requests, input_len, output_len, arrivals=arrivals, seed=seed)
    if rates is None:
        if trace is None:
            raise SpecroofError("rates=None replays a trace as it is: give a trace, or the rates to sweep")
        rate_list: list[float | None] = [None]
    else:
        if isinstance(rates, (str, bytes)):
            raise SpecroofError(f"rates must be a number or a list of numbers of requests per second (got {rates!r})")
        given = np.ravel(rates).tolist() if np.ndim(rates) == 0 else list(rates)  # type: ignore[arg-type]
        rate_list = [check_rate(r) for r in given]
        if not rate_list:
            raise SpecroofError("give at least one request rate")
        rate_list = sorted(set(rate_list))  # type: ignore[type-var]
    too_long = base.input_tokens + base.output_tokens > spec.max_context
    if too_long.any():
        i = int(np.argmax(too_long))
        raise SpecroofError(
            f"request {i}: input {int(base.input_tokens[i])} + output {int(base.output_tokens[i])} tokens exceed "
            f"{spec.name}'s context window of {spec.max_context}"
        )

    ctx = pricing_context(
        spec, hardware, dtype=dtype, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine, tp=tp, ep=ep,
        ep_link_GB_per_s=ep_link_GB_per_s,
    )  # fmt: skip
    ep = int(getattr(ctx, "ep", 1))
    if kv_capacity_tokens is None:
        # a draft model's weights and KV take memory from the target's cache: speculating runs get less
        cap_off = device_kv_tokens(ctx, None, max_tokens=max_tokens, memory_fraction=memory_fraction, ep=ep)
        cap_spec = (
            device_kv_tokens(ctx, d, max_tokens=max_tokens, memory_fraction=memory_fraction, ep=ep)
            if speculating
            else cap_off
        )
    else:
        cap_off = cap_spec = int(kv_capacity_tokens)
    max_ctx = int(np.max(base.input_tokens + base.output_tokens))
    trees = {id(p.tree): p.tree for p in pols if p.tree is not None}
    if len(trees) > 1:
        raise SpecroofError("one tree policy per simulation (its prices are one table)")
    tree = next(iter(trees.values()), None)
    chain_g = max([p.top_gamma for p in pols if p.tree is None], default=0)
    if tree is not None and tree.n_nodes + 1 > max_tokens:
        raise SpecroofError(f"a tree of {tree.n_nodes} nodes needs max_tokens >= {tree.n_nodes + 1} (got {max_tokens})")
    prices = step_prices(
        ctx, d, max_gamma=chain_g, max_batch=max_seqs, max_tokens=max_tokens, max_context=max_ctx, tree=tree,
        prefill=prefill, round_host_s=round_host_s, round_host_per_seq_s=round_host_per_seq_s,
        prefill_host_s=prefill_host_s, idle_start_s=idle_start_s,
    )  # fmt: skip
    rng = np.random.default_rng([seed, 1])
    alphas = draw_alphas(alpha, base.n, alpha_concentration, rng)

    replicas = int(replicas)
    if replicas < 1:
        raise SpecroofError(f"replicas must be >= 1 (got {replicas})")
    disagg = None
    if disaggregate is not None:
        if replicas != 1:
            raise SpecroofError("give replicas or disaggregate=P:D (servers per pool), not both")
        pd_ = _pools(disaggregate)
        link = kv_link_GB_per_s * 1e9 if kv_link_GB_per_s is not None else ctx.pricing.hardware.interconnect_bytes_per_s
        if link is None or not link > 0:
            raise SpecroofError(
                f"{ctx.pricing.hardware.id} lists no interconnect: give kv_link_GB_per_s for the KV transfer between pools"
            )
        kvb = float(spec.kv_bytes(1, dtype_bytes(ctx.pricing.kv_dtype or ctx.pricing.dtype)))
        disagg = (pd_[0], pd_[1], kvb, float(link))
    jobs, keys, labels = [], [], []
    for ri, rate in enumerate(rate_list):
        w = base.at_rate(rate)
        shown = rate if rate is not None else (w.n - 1) / max(float(w.arrival_s[-1] - w.arrival_s[0]), 1e-300)
        for p in pols:
            cfg = SchedulerConfig(
                max_seqs, max_tokens, block_size, cap_spec if p.speculates else cap_off, trace_points, prefill
            )
            for rep in range(min(replicas, w.n)):
                part = w.subset(np.arange(rep, w.n, replicas))
                jobs.append(
                    (part, prices, p, alphas[rep::replicas], cfg, (seed * 1_000_003 + ri) * 1_009 + rep, disagg)
                )
                keys.append((p.name, float(shown), rep))
                server = f", server {rep + 1}/{replicas}" if replicas > 1 else ""
                labels.append(f"{p.name} at {shown:.4g} req/s{server}")
    workers = int(workers)
    if workers < 1:
        raise SpecroofError(f"workers must be >= 1 (got {workers})")
    done: list[RunResult] = []

    def finished(r: RunResult) -> None:
        done.append(r)
        if on_run is not None:
            on_run(len(done), len(jobs), labels[len(done) - 1])

    # with processes to spare, a long run at light load is cut where its server stood empty and its pieces run
    # in parallel (roofline.serving.split); a run near saturation, or any run with one worker, runs whole
    plans = [
        split.plan(*job[:6]) if workers > 1 and job[6] is None else None  # (not the disaggregated pools)
        for job in jobs
    ]
    tasks: list[tuple[int, bool, Any]] = []
    for ji, (job, cut) in enumerate(zip(jobs, plans, strict=True)):
        if cut is None:
            tasks.append((ji, False, job))
        else:
            tasks.extend((ji, True, split.chunk_args(*job[:6], cut, c)) for c in range(len(cut.starts)))
    pieces: list[RunResult] = []

    def collected(ji: int, r: RunResult) -> None:
        pieces.append(r)
        cut = plans[ji]
        if cut is None:
            finished(r)
        elif len(pieces) == len(cut.starts):
            w = jobs[ji][0]
            whole = split.splice(pieces, cut, w.arrival_s, jobs[ji][4].trace_points)
            finished(whole if whole is not None else _one(jobs[ji]))  # (no handover in a window: run it whole)
        else:
            return
        pieces.clear()

    if workers > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks), os.cpu_count() or 1)) as ex:
            # whole runs first, the chunks after them: the small tasks fill the processes' ends (longest first)
            futures = {i: ex.submit(_task, tasks[i]) for i in sorted(range(len(tasks)), key=lambda i: tasks[i][1])}
            for i, t in enumerate(tasks):  # (collected in the tasks' order, each as soon as it is done)
                collected(t[0], futures[i].result())
    else:
        for t in tasks:
            collected(t[0], _task(t))
    merged: dict[tuple[str, float], list[RunResult]] = {}
    for (name, rate, _), r in zip(keys, done, strict=True):
        merged.setdefault((name, rate), []).append(r)
    results = {k: merge_runs(v, replicas) for k, v in merged.items()}

    rows, frames, traces = [], [], {}
    for (name, rate), r in results.items():
        rows.append(_summary_row(r, name, rate, slo_ttft_s, slo_tpot_s, len(merged[(name, rate)])))
        frames.append(r.requests.assign(policy=name, rate_req_s=rate))
        traces[(name, rate)] = r.trace.to_frame()
    settings = {
        "hardware": ctx.pricing.hardware.id,
        "target": spec.name,
        "drafter": "" if d is None else str(getattr(d, "name", drafter)),
        "alpha": alpha,
        "pricing": ctx.pricing.describe(),
        "engine": ctx.pricing.engine_name,
        "max_seqs": max_seqs,
        "max_tokens": max_tokens,
        "block_size": block_size,
        "prefill": prefill,
        "round_host_s": round_host_s,
        "round_host_per_seq_s": round_host_per_seq_s,
        "prefill_host_s": prefill_host_s,
        "idle_start_s": idle_start_s,
        "kv_capacity_tokens": {"off": cap_off, "speculating": cap_spec},
        "slo_ttft_s": slo_ttft_s,
        "slo_tpot_s": slo_tpot_s,
        "seed": seed,
        "replicas": replicas,
        "disaggregate": None if disagg is None else f"{disagg[0]}:{disagg[1]}",
        "ep": ep,
        # pieces each (policy, rate) point was simulated in: 1 whole, more when cut where its server stood empty
        "chunks": {f"{name}@{rate:g}": r.chunks for (name, rate), r in results.items()},
    }
    return ServingResult(pd.concat(frames, ignore_index=True), pd.DataFrame(rows), traces, settings)
