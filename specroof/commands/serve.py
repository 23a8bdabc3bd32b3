"""``specroof serve``: at what request rate does speculation stop paying on this GPU? (a simulated serving sweep)

Runs :func:`roofline.serving.simulate` for plain decoding (``off``) and each ``--policy`` at
every ``--rate``, prints the answer first, then one row per (rate, policy), and with
``--plot`` draws latency against throughput with and without speculation.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.serving.sweep import DEFAULT_OBJECTIVE, OBJECTIVES
from roofline.serving.workload import MAX_REQUESTS
from roofline.speculation.acceptance_defaults import (
    CURVE_ALPHAS,
    RESOLUTION,
    NoMatchedDefault,
    break_even,
    break_even_words,
    pays,
)
from specroof.commands.common import (
    add_engine_config,
    band_for,
    config_acceptance,
    config_rate,
    engine_config_from_args,
    single_acceptance,
)
from specroof.shell import GivenStore, _add_engine, _add_json, bounded_int, emit, engine_of, plot_path

#: the columns the table shows (the JSON has every column of the summary)
TABLE = (
    "rate_req_s",
    "policy",
    "ttft_p50_s",
    "ttft_p90_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "itl_p50_s",
    "e2e_p50_s",
    "throughput_tok_s",
    "goodput_req_s",
    "mean_batch",
    "kv_utilisation_max",
    "preemptions",
)
#: the table's latency columns (shown in ms)
LATENCIES = {c for c in TABLE if c.endswith("_s") and not c.endswith(("_req_s", "_tok_s"))}
#: the per-rate keys ``--json`` always carries
JSON_KEYS = ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s", "throughput_tok_s", "goodput_req_s")

#: "pays" is judged on the median request's end-to-end latency unless --objective names another (its reason:
#: roofline.serving.sweep.DEFAULT_OBJECTIVE)
DEFAULT_METRIC = OBJECTIVES[DEFAULT_OBJECTIVE]
#: the summary columns --metric may judge on: latencies (lower is better) and rates (higher is better)
JUDGEABLE = tuple(
    [
        f"{m}_{q}_s"
        for m in ("ttft", "tpot", "e2e", "itl")
        for q in ("p50", "p90", "p99", "mean")
        if (m, q) != ("itl", "mean")
    ]
    + ["throughput_tok_s", "request_throughput_req_s", "goodput_req_s"]
)

TERMS = (
    "TTFT: time to first token (arrival to first token). TPOT: time per output token after the first. "
    "ITL: gap between two emissions of one request. goodput: requests/s meeting the SLOs "
    "(every finished request when none is given). Speculation pays at a rate when its {metric} is "
    "better than plain decoding's."
)


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number (got {text!r})")
    return v


def _microseconds(text: str, *, signed: bool = False) -> float:
    """A host term in microseconds (>= 0, or any sign with ``signed``), returned in seconds."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected microseconds, got {text!r}") from None
    if not (math.isfinite(v) and (signed or v >= 0)):
        raise argparse.ArgumentTypeError(
            f"must be a finite number of microseconds{'' if signed else ' >= 0'} (got {text!r})"
        )
    return v * 1e-6


def _signed_microseconds(text: str) -> float:
    """A host correction in microseconds, either sign (negative: the profile overprices the engine's steps)."""
    return _microseconds(text, signed=True)


def _rates(text: str) -> list[float]:
    out = []
    for part in text.split(","):
        try:
            v = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected request rates like '1,2,4,8', got {text!r}") from None
        if not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(f"request rates must be positive req/s (got {part.strip()!r})")
        out.append(v)
    return out


def _progress(args: argparse.Namespace) -> tuple[Callable[[int, int, str], None] | None, Callable[[], None]]:
    """(the sweep's ``on_run``, close): progress over its (policy, rate) runs on stderr, shown once the sweep has
    taken a second (a tqdm bar when tqdm is installed, else a line per run); nothing under ``--json``."""
    if getattr(args, "json", False):
        return None, lambda: None
    t0 = time.perf_counter()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    bar: Any = None

    def on_run(done: int, total: int, label: str) -> None:
        nonlocal bar
        elapsed = time.perf_counter() - t0
        if tqdm is not None:
            if bar is None:
                bar = tqdm(total=total, desc="simulating", unit="run", file=sys.stderr, delay=1.0, leave=False)
            bar.set_postfix_str(label, refresh=False)
            bar.update(done - bar.n)
        elif elapsed > 1.0 and total > 1:
            print(f"simulated {done}/{total}: {label} ({elapsed:.0f} s)", file=sys.stderr, flush=True)

    def close() -> None:
        if bar is not None:
            bar.close()

    return on_run, close


def _policies(given: list[str] | None) -> list[str]:
    """``off`` (always run, the baseline) and the speculating policies asked for (default goodput)."""
    from roofline.serving.policies import parse_policy

    asked = [p for p in (given or ["goodput"]) if parse_policy(p).name != "off"]  # static:0 is off too
    if not asked:
        raise SpecroofError(
            "--policy off alone compares nothing: plain decoding (off) is always run; give a speculating policy to "
            "set against it (static:G, by-batch:B=G,..., tree:NAME, goodput[:GMAX]) or leave --policy out (goodput)"
        )
    return ["off", *asked]


def _objective(args: argparse.Namespace) -> tuple[str, str]:
    """(the objective's name, the summary column judged): --objective, or --metric (a column), default e2e."""
    from roofline.core.validation import not_both

    not_both({"--objective": args.objective, "--metric": args.metric})
    if args.metric is not None:
        if args.metric not in JUDGEABLE:  # refused before the simulation, not after it
            raise SpecroofError(f"unknown metric {args.metric!r}: choose one of {', '.join(JUDGEABLE)}")
        named = [o for o, col in OBJECTIVES.items() if col == args.metric]
        return (named[0] if named else args.metric), args.metric
    objective = args.objective or DEFAULT_OBJECTIVE
    return objective, OBJECTIVES[objective]


def _config_policy(args: argparse.Namespace, config: Any, alpha: float) -> tuple[Any, float, str]:
    """The serving policy your engine's setting runs (a chain: ``static:G``; a tree: the tree the engine builds under
    this acceptance, every step), the per-token rate the simulator draws for it, and the sentence saying so.

    The simulator draws a request's accepted run as a chain at one rate, capped at the policy's depth: a tree enters
    with the chain rate over its depth that gives its tokens per round (as ``tree:NAME`` policies do)."""
    from roofline.serving.policies import ServingPolicy
    from roofline.speculation.acceptance_kinds import alpha_for_tokens
    from roofline.speculation.engine_trees import engine_tree
    from roofline.speculation.trees import IIDAcceptance

    st = config.setting
    if st.is_chain:
        return f"static:{st.num_steps}", alpha, f"your setting ({config.label}) runs as static:{st.num_steps}"
    if args.policy:
        raise SpecroofError(
            "--policy beside a tree --engine-config: the tree's acceptance is drawn as its own chain rate, which the "
            "other policies would share; compare them without --engine-config"
        )
    et = engine_tree(st, IIDAcceptance(alpha))
    depth = int(et.tree.depth)
    rate = float(alpha_for_tokens(et.expected_tokens, depth)) if depth > 0 else 0.0
    name = f"{config.engine}-tree:{st.num_steps}/{st.topk}/{st.num_draft_tokens}"
    policy = ServingPolicy("tree", tree=et.tree, label=name)
    return (
        policy,
        rate,
        (
            f"your setting ({config.label}) runs as {name}: the {et.tree.n_nodes}-node tree of depth {depth} "
            f"{config.engine} builds at {alpha:.3g} per candidate, {et.expected_tokens:.3f} tokens per round, drawn as a "
            f"chain of {depth} at {rate:.3f} per token"
        ),
    )


def _one_rate(args: argparse.Namespace, acc: Any, value: Any) -> tuple[float, str]:
    """The per-token rate the simulator draws for a request, and the words to add when a per-position curve becomes
    it: the simulator draws one rate per request, so a curve enters as the chain rate that emits the same tokens per
    round over the positions it was measured at (past them the draws are i.i.d. at that rate)."""
    if isinstance(value, (int, float)):
        return float(value), ""
    import numpy as np

    from roofline.speculation.acceptance_kinds import alpha_for_tokens
    from roofline.speculation.acceptance_positions import engine_family, measured_length
    from specroof.commands.common import drafter_key

    curve = np.asarray(value, dtype=float)
    g = measured_length(drafter_key(args.drafter), acc, engine_family(args.engine)) or curve.size
    g = max(1, min(int(g), curve.size))
    tokens = 1.0 + float(np.sum(np.cumprod(curve[:g])))
    a = float(alpha_for_tokens(tokens, g))
    return a, (
        f"; the simulator draws one per-token rate per request: {a:.3f}, the chain rate with the same "
        f"{tokens:.3f} tokens per round at gamma {g} (past {g}, i.i.d. at that rate)"
    )


def _memory_share(args: argparse.Namespace) -> tuple[float, str]:
    """The share of each device the KV cache is sized in, and where it comes from: --memory-fraction, SGLang's
    mem_fraction_static under --engine sglang, else vLLM's gpu_memory_utilization (the simulator's default, 0.9;
    roofline.deploy.memory, docs/cost-model.md section 50.4)."""
    from roofline.deploy.memory import VLLM_GPU_MEMORY_UTILIZATION, reserved_share
    from roofline.speculation.acceptance_positions import engine_family

    family = engine_family(args.engine)
    if args.memory_fraction is not None or family == "sglang":
        return reserved_share(family, args.tp or 1, args.memory_fraction)
    return VLLM_GPU_MEMORY_UTILIZATION, (
        f"vLLM's gpu_memory_utilization default {VLLM_GPU_MEMORY_UTILIZATION:g}"
        + ("" if family == "vllm" else " (no engine of its own named: --memory-fraction for yours)")
    )


def _simulate(
    args: argparse.Namespace,
    policies: list[Any],
    alpha: float,
    on_run: Callable[[int, int, str], None] | None,
    measured_at: int | None = None,
) -> Any:
    """One serving sweep of ``policies`` at per-token rate ``alpha``, with every other setting from the flags."""
    from roofline.serving import simulate

    return simulate(
        measured_at=measured_at,
        hardware=args.hardware,
        target=args.target,
        drafter=args.drafter,
        acceptance=alpha,
        policy=policies,
        rates=args.rate,
        requests=args.requests,
        input_len=args.input_len,
        output_len=args.output_len,
        arrivals=args.arrivals,
        trace=args.trace,
        engine=engine_of(args),  # --host-launch-us applied, as speedup and plan apply it
        dtype=args.dtype,
        weight_dtype=args.weight_dtype,
        tp=args.tp,
        max_seqs=args.max_seqs,
        max_tokens=args.max_tokens,
        kv_capacity_tokens=args.kv_capacity_tokens,
        memory_fraction=_memory_share(args)[0],
        alpha_concentration=args.alpha_concentration,
        slo_ttft_s=args.slo_ttft,
        slo_tpot_s=args.slo_tpot,
        seed=args.seed,
        workers=args.workers,
        replicas=args.replicas,
        disaggregate=args.disaggregate,
        kv_link_GB_per_s=args.kv_link_GB_s,
        ep=args.ep,
        ep_link_GB_per_s=args.ep_link_GB_s,
        prefill=args.prefill,
        round_host_s=args.round_host_us,
        round_host_per_seq_s=args.round_host_per_seq_us,
        prefill_host_s=args.prefill_host_us,
        idle_start_s=args.idle_start_us,
        on_run=on_run,
    )


#: the summary columns whose speculation-against-plain ratio the curve over acceptance carries in --json
CURVE_KEYS = ("e2e_p50_s", "tpot_p50_s", "ttft_p50_s", "throughput_tok_s", "goodput_req_s")


def _speedup(spec: float, off: float, column: str) -> float:
    """Speculation's gain over plain decoding on one summary column: off / spec for a latency, spec / off for a rate
    (above 1: speculation is better)."""
    from roofline.serving.metrics import lower_is_better

    num, den = (off, spec) if lower_is_better(column) else (spec, off)
    return float(num / den) if den > 0 else float("nan")


def _serve_over_acceptance(
    args: argparse.Namespace, config: Any, policies: list[Any], objective: str, metric: str, why: str
) -> int:
    """No matched published acceptance: at each request rate, speculation's gain over plain decoding on the judged
    metric over a range of per-token rates (the rule plan answers with: roofline.speculation.acceptance_defaults),
    and the break-even rate, instead of one verdict priced at a number borrowed from another pair."""
    from roofline.passes.model import get_model

    if args.plot:  # one simulation's latency against throughput: it needs one acceptance
        raise SpecroofError(f"{why.partition(': give')[0]}: --plot draws one simulation, give --acceptance for one")
    on_run, close_bar = _progress(args)
    n = len(CURVE_ALPHAS)
    off = None
    rows: list[dict[str, Any]] = []
    settings: dict[str, Any] = {}
    notes: list[str] = []
    try:
        for i, a in enumerate(CURVE_ALPHAS):
            pols = [p for p in policies if p != "off"]
            if config is not None:  # the engine's setting at this rate (a tree is built under it)
                policy, _, _ = _config_policy(args, config, float(a))
                pols = [policy]
                notes = [f"your setting ({config.label}) simulated at each per-token rate (read from {config.source})"]
            if off is None:
                pols = ["off", *pols]

            def step(done: int, total: int, label: str, i: int = i, a: float = a) -> None:
                if on_run is not None:
                    on_run(i * total + done, n * total, f"alpha {a:g}: {label}")

            res = _simulate(args, pols, float(a), step)
            s = res.summary
            if off is None:
                off = s[s["policy"] == "off"].set_index("rate_req_s")
                settings = dict(res.settings)
            for p in [x for x in res.policies if x != "off"]:
                for _, r in s[s["policy"] == p].iterrows():
                    base = off.loc[r["rate_req_s"]]
                    rows.append(
                        {
                            "rate_req_s": float(r["rate_req_s"]),
                            "policy": str(p),
                            "alpha": float(a),
                            "speedup": _speedup(float(r[metric]), float(base[metric]), metric),
                            **{f"speedup_{c}": _speedup(float(r[c]), float(base[c]), c) for c in CURVE_KEYS},
                            metric: float(r[metric]),
                            f"off_{metric}": float(base[metric]),
                        }  # fmt: skip
                    )
    finally:
        close_bar()
    hw = settings.get("hardware", args.hardware)
    lines = [
        f"acceptance: {why}; the answer is speculation's {metric} against plain decoding over a range of per-token "
        "rates, with the break-even rate",
        f"  on {hw}, each rate swept, by per-token rate (above 1x: speculation is better on {metric}; it pays past "
        f"the {RESOLUTION:.0%} resolution):",
    ]
    breakeven = []
    cells: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["rate_req_s"], r["policy"]), []).append(r)
    for (rate, p), rs in sorted(cells.items()):
        be = break_even([r["alpha"] for r in rs], [pays(r["speedup"]) for r in rs])
        breakeven.append({"rate_req_s": rate, "policy": p, "break_even_alpha": be})
        where = break_even_words(be)
        curve = ", ".join(f"{r['alpha']:g}: {r['speedup']:.2f}x" for r in rs)
        lines.append(f"  {rate:g} req/s, {p}: {where}; {curve}")
    lines += [f"  {x}" for x in notes]
    band = band_for(args.engine, hw, kind="serving", model=get_model(args.target))
    lines.append(f"  error band: {band[1]}")
    lines.append(
        f"  {settings.get('target', args.target)} + {settings.get('drafter', args.drafter)}, "
        f"{settings.get('pricing', '')}; {args.requests} requests per point"
    )
    lines += ["", TERMS.format(metric=metric)]
    payload = {
        "acceptance": why,
        "judged_on": metric,
        "objective": objective,
        "break_even": breakeven,
        "curve": rows,
        "off_per_rate": off.reset_index().to_dict(orient="records") if off is not None else [],
        "error_band": band[0],
        "error_band_note": band[1],
        "settings": settings,
        "memory_share": dict(zip(("fraction", "source"), _memory_share(args), strict=True)),
    }
    emit(args, payload, "\n".join(lines))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    config = engine_config_from_args(args, fill_hardware=True)  # read before any work
    if not args.target:
        raise SpecroofError("give --target (a preset or config.json), or an --engine-config naming it")
    if not args.drafter:
        raise SpecroofError("give --drafter (eagle3, model:NAME, ...), or an --engine-config naming it")
    objective, metric = _objective(args)

    policies: list[Any] = _policies(args.policy) if config is None or args.policy else ["off"]
    if args.tp is not None:  # tp must shard the target's heads: refused before the simulation
        from roofline.core.validation import check_tp
        from roofline.passes.model import get_model

        check_tp(get_model(args.target), args.tp)
    if args.trace is None and args.rate is None:
        raise SpecroofError("give --rate R1,R2,... (req/s), or --trace FILE to replay a trace")
    try:  # none given: the target's matched pair only, as plan and report take it (docs/cost-model.md, 50.2)
        acc, value, acceptance_note = single_acceptance(args.acceptance, args.drafter, args.target, args)
    except NoMatchedDefault as e:  # no published figure for this pair: the answer is a curve over acceptance
        return _serve_over_acceptance(args, config, policies, objective, metric, str(e))
    config_note = ""
    if config is not None:
        rate, drawn = _one_rate(args, acc, value)  # a per-position curve enters as its chain rate, and says so
        kw, acceptance_note = config_acceptance(config, acc, rate, acceptance_note + drawn)
        policy, alpha, config_note = _config_policy(args, config, config_rate(config, kw))
        if isinstance(policy, str) and policy in policies:
            policies.remove(policy)  # --policy static:G as well: one run
        policies.insert(1, policy)
    else:
        alpha, drawn = _one_rate(args, acc, value)
        acceptance_note += drawn
    on_run, close_bar = _progress(args)
    try:
        res = _simulate(args, policies, alpha, on_run, getattr(acc, "length", None))
    finally:
        close_bar()
    s = res.summary
    stops = res.stops_paying(metric=metric)
    spec_names = [p for p in res.policies if p != "off"]
    first = spec_names[0]
    verdicts = res.verdicts(metric)
    every = {o: res.verdicts(col) for o, col in OBJECTIVES.items()}  # every objective judged, the named one first
    hw = res.settings["hardware"]
    if args.plot:
        from roofline.plot import serving_curves

        fig = serving_curves(s, title=f"{res.settings['target']} on {hw}: serving with and without speculation")
        fig.savefig(args.plot, dpi=120)
    per_rate = s.to_dict(orient="records")  # every column; JSON_KEYS among them
    share, share_why = _memory_share(args)
    payload: dict[str, Any] = {
        "memory_share": {"fraction": share, "source": share_why},
        "speculation_stops_paying_at_rate": stops[first],
        "stops_paying_by_policy": stops,
        "judged_on": metric,
        "objective": objective,
        "verdicts": {p: v.to_dict() for p, v in verdicts.items()},
        "verdicts_by_objective": {o: {p: v.to_dict() for p, v in vs.items()} for o, vs in every.items()},
        "per_rate": per_rate,
        "settings": res.settings,
    }
    if args.plot:
        payload["plot"] = args.plot
    lines = [verdicts[p].sentence(hw) for p in spec_names]
    st = res.settings
    lines.append(f"  acceptance: {acceptance_note}")
    payload["acceptance"] = acceptance_note
    if config is not None:
        payload["engine_config"] = config.to_json() | {"policy": spec_names[0]}
        lines.append(f"  {config_note} (read from {config.source})")
        lines += [f"  note: {n}" for n in config.notes]
    from roofline.passes.model import get_model

    band = band_for(args.engine, hw, kind="serving", model=get_model(args.target))
    payload["error_band"], payload["error_band_note"] = band
    lines.append(f"  error band: {band[1]}")
    lines.append(
        f"  {st['target']} + {st['drafter']} at alpha {st['alpha']:.3g}, {st['pricing']}; "
        f"{len(res.requests) // max(1, len(s))} requests per point, scheduler {st['max_seqs']} seqs / "
        f"{st['max_tokens']} tokens per step, KV {st['kv_capacity_tokens']['off']} tokens"
        + (f", experts over {st['ep']} GPUs (EP, attention data-parallel)" if st.get("ep", 1) > 1 else "")
    )
    table = pd.DataFrame({c.removesuffix("_s") + "_ms" if c in LATENCIES else c: s[c] for c in TABLE})
    table[[c for c in table.columns if c.endswith("_ms")]] *= 1e3
    table = table.sort_values(["rate_req_s", "policy"]).round(3)
    if table["tpot_p50_ms"].isna().all():
        lines.append(
            "  note: every request ends at its first token (the prefill emits it): no request has a decode step for "
            "speculation to speed up, and TPOT and ITL (n/a) are not defined"
        )
    lines += [
        "",
        table.to_string(index=False, na_rep="n/a"),
        "",
        "on every objective (p50 latencies; --objective names the one judged):",
    ]
    for p in spec_names:
        lines.append(f"  {p}: " + "; ".join(f"{o} {every[o][p].words()}" for o in OBJECTIVES))
    lines += ["", TERMS.format(metric=metric)]
    cut = {k: n for k, n in st.get("chunks", {}).items() if n > 1}
    if cut:
        lines.append(
            "Cut where the server stood empty and simulated in parallel (same distribution, other random numbers; "
            "docs/cost-model.md, section 26): " + ", ".join(f"{k} in {n} chunks" for k, n in cut.items()) + "."
        )
    if args.plot:
        lines.append(f"plot: {args.plot}")
    emit(args, payload, "\n".join(lines))
    return 0


def add_parser(sub: Any) -> None:
    """Register ``specroof serve`` on the top-level subcommands."""
    from roofline.serving.workload import TRACE_LENGTHS
    from roofline.speculation.drafters import DRAFTER_GRAMMAR

    p = sub.add_parser(
        "serve",
        help="simulate serving under load: at what request rate does speculation stop paying on this GPU?",
    )
    p.add_argument("--hardware", required=True, help="profile id, alias or .toml path")
    p.add_argument(
        "--target",
        "--model",
        dest="target",
        help="target model: preset or config.json (required unless --engine-config names it)",
    )
    p.add_argument("--drafter", help=f"the drafter: {DRAFTER_GRAMMAR} (required unless --engine-config names it)")
    p.add_argument(
        "--acceptance",
        metavar="[KEY=]VALUE",
        help="the drafter's acceptance, as plan takes it (KEY its name: model=0.8, eagle3=mean:3.5): 0.7 or alpha:0.7 "
        "(per-token), mean:3.2[@G] (tokens per round), vllm-rate:0.7@K, curve:0.9,0.8,... or a metrics file "
        "(default: the published figure of this drafter class on a target of the same family and size class, named "
        "on the output; where none exists, the answer is a curve over acceptance with its break-even rate)",
    )
    p.add_argument("--rate", type=_rates, help="request rates to sweep, req/s: 1,2,4,8,16")
    p.add_argument(
        "--policy",
        action="append",
        help="speculation per step: static:G, by-batch:B=G,... (vLLM's disable-by-batch: by-batch:1=4,32=0), "
        "tree:NAME (eagle, eagle2, eagle3, medusa), goodput[:GMAX] (SmartSpec); repeat to compare several; "
        "off is always run (default goodput)",
    )
    p.add_argument("--requests", type=bounded_int(1, MAX_REQUESTS), default=1000, help="requests per rate")
    presets = ", ".join(TRACE_LENGTHS)
    p.add_argument(
        "--input-len",
        default="512",
        help=f"prompt tokens: N, uniform:A-B, lognormal:MEDIAN,SIGMA or a public trace's lengths ({presets})",
    )
    p.add_argument(
        "--output-len",
        default="128",
        help=f"output tokens: N, uniform:A-B, lognormal:MEDIAN,SIGMA or a public trace's lengths ({presets})",
    )
    p.add_argument("--arrivals", default="poisson", help="poisson or gamma:K (K = burstiness, vLLM's; 1 = Poisson)")
    p.add_argument(
        "--trace", help="CSV or JSON lines with arrival_s, input_tokens, output_tokens (replayed; --rate rescales it)"
    )
    p.add_argument("--slo-ttft", type=_positive_float, help="SLO on time to first token, seconds (for goodput)")
    p.add_argument("--slo-tpot", type=_positive_float, help="SLO on time per output token, seconds (for goodput)")
    p.add_argument(
        "--objective",
        choices=tuple(OBJECTIVES),
        help=f"what 'pays' is judged on: tpot, ttft, e2e (p50 latencies, lower is better), throughput (tokens/s) or "
        f"goodput (requests/s within the SLOs) (default {DEFAULT_OBJECTIVE}: {OBJECTIVES[DEFAULT_OBJECTIVE]}); every "
        "objective's verdict is shown",
    )
    p.add_argument(
        "--metric",
        default=None,
        help="instead of --objective: any summary column (ttft_p90_s, e2e_p99_s, ...), lower is better for latencies",
    )
    p.add_argument("--max-seqs", type=bounded_int(1, 1 << 16), default=256, help="running sequences at most")
    p.add_argument("--max-tokens", type=bounded_int(1, 1 << 20), default=2048, help="tokens per step (chunked prefill)")
    p.add_argument(
        "--kv-capacity-tokens", type=bounded_int(1, 1 << 40), help="KV cache size (default: the memory model)"
    )
    p.add_argument(
        "--memory-fraction",
        type=_positive_float,
        default=None,
        help="the share of each device the engine may use for weights, activations and the KV cache (vLLM's "
        "--gpu-memory-utilization, SGLang's --mem-fraction-static; default: SGLang's under --engine sglang, else "
        "vLLM's 0.9)",
    )
    p.add_argument("--alpha-concentration", type=_positive_float, help="per-request alpha ~ Beta around the mean")
    p.add_argument("--dtype", action=GivenStore, default="bf16", help="compute/activation dtype (default bf16)")
    p.add_argument("--weight-dtype", default=None, help="weights stored as int8, int4 or fp8 (weight-only)")
    p.add_argument("--tp", type=bounded_int(1, 1024), action=GivenStore, default=None, help="tensor-parallel degree")
    p.add_argument(
        "--replicas", type=bounded_int(1, 4096), default=1, help="identical servers behind a round-robin balancer"
    )
    p.add_argument(
        "--disaggregate", metavar="P:D", help="prefill on P servers, decode on D others (the KV cache moves between)"
    )
    p.add_argument(
        "--kv-link-GB-s",
        type=_positive_float,
        help="KV transfer bandwidth between the pools (default: the interconnect)",
    )
    p.add_argument(
        "--ep",
        type=bounded_int(1, 4096),
        default=1,
        help="expert parallelism: an MoE target's experts over EP GPUs, attention data-parallel (one server)",
    )
    p.add_argument(
        "--ep-link-GB-s",
        type=_positive_float,
        help="all-to-all bandwidth per GPU for --ep (default: the interconnect; required past 8 GPUs, across nodes)",
    )
    # an engine's own loop, as `specroof measure serve` measures it ("given to the simulator" in its output); one set
    # for every policy
    p.add_argument(
        "--prefill",
        choices=("fused", "separate"),
        default="fused",
        help="fused: chunked prefill rides in the decodes' pass (vLLM, SGLang); separate: whole prompts in a pass of "
        "their own after each decode round (an engine without chunked prefill, as measure serve's)",
    )
    p.add_argument(
        "--round-host-us",
        type=_signed_microseconds,
        default=0.0,
        help="host time added to every decode round (negative: the profile overprices this engine's rounds; a round "
        "keeps a positive time)",
    )
    p.add_argument(
        "--round-host-per-seq-us", type=_signed_microseconds, default=0.0, help="and per sequence of that round"
    )
    p.add_argument(
        "--prefill-host-us",
        type=_signed_microseconds,
        default=0.0,
        help="host time added to every separate prefill step (either sign, as --round-host-us)",
    )
    p.add_argument(
        "--idle-start-us",
        type=_microseconds,
        default=0.0,
        help="time added to the first prefill step after the server idled (an engine's cold start)",
    )
    p.add_argument("--seed", type=bounded_int(0, 2**31 - 1), default=0)
    p.add_argument(
        "--workers",
        type=bounded_int(1, 256),
        default=1,
        help="processes for the (rate, policy) points, and for the pieces of a long run at light load, cut where its "
        "server stood empty (docs/cost-model.md, section 26)",
    )
    _add_engine(p)
    add_engine_config(p)
    p.add_argument("--plot", type=plot_path, help="write latency-vs-throughput curves here (.png, .svg, .pdf)")
    _add_json(p)
    p.set_defaults(func=cmd_serve)
