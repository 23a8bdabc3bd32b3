"""``specroof measure serve``: real continuous batching of the offline pair here, and the simulator on the same traces.

Replays one arrival trace per request rate (light, near saturation, overloaded unless
``--rate`` is given) through :func:`measure.serve.serve` (KV slots, prefill on arrival,
ragged speculative rounds) and through :func:`roofline.serving.simulate` priced by the
profile fitted here, and prints TTFT and TPOT p50/p90 of both with their relative errors
and each side's verdict on whether speculation pays (``measure.serve_check``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from roofline.core.errors import SpecroofError
from specroof.shell import _add_json, _note, add_list_flag, emit, float_list


def cmd_measure_serve(args: argparse.Namespace) -> int:
    if not (args.budget > 0 and math.isfinite(args.budget)):
        raise SpecroofError(f"--budget must be a positive number of seconds (got {args.budget})")
    from specroof.measure_cli import command_budget, freeze_at_exit

    # counted from the process's start when it was started for the command: the imports are inside it
    budget = command_budget(args, ["measure", "serve"])
    # every number refused before torch is imported
    if args.threads is not None and args.threads < 1:
        raise SpecroofError(f"--threads must be >= 1 (got {args.threads})")
    if not 1 <= args.replays <= 5:
        raise SpecroofError(f"--replays must be a whole number in [1, 5] (got {args.replays})")
    if args.requests is not None and args.requests < 2:
        raise SpecroofError(f"--requests must be >= 2 (got {args.requests})")
    if args.rate is not None and any(not (r > 0 and math.isfinite(r)) for r in args.rate):
        raise SpecroofError(f"--rate takes positive request rates (got {', '.join(f'{r:g}' for r in args.rate)})")
    if args.seed < 0:
        raise SpecroofError(f"--seed must be >= 0 (got {args.seed})")
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise SpecroofError(f"--out {args.out!r} is a file, not a folder")
    from measure.device import resolve_device
    from measure.serve_check import serve_check
    from specroof.measure_cli import check_graph_flags

    dev = resolve_device(args.device)
    check_graph_flags(args, dev)
    check = serve_check(
        policies=args.policy or ["off", "static:3"],
        rates=args.rate,
        slots=args.slots,
        requests=args.requests,
        input_len=args.input_len,
        output_len=args.output_len,
        budget_s=budget,
        threads=args.threads,
        seed=args.seed,
        replays=args.replays,
        progress=not args.json,
        log=lambda msg: _note(args, msg),
        device=dev,
        graphs=args.graphs,
        compile=args.compile,
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        check.table.to_csv(out / "side_by_side.csv", index=False)
        check.verdicts.to_csv(out / "verdicts.csv", index=False)
        check.measured.to_csv(out / "requests_measured.csv", index=False)
        check.simulated.to_csv(out / "requests_simulated.csv", index=False)
    payload: dict[str, Any] = {
        "table": check.table.to_dict(orient="records"),
        "verdicts": check.verdicts.to_dict(orient="records"),
        "host_per_round_s": check.host_per_round_s,
        "host_per_seq_s": check.host_per_seq_s,
        "settings": check.settings,
        "out": str(out) if out else None,
    }
    payload["spent_s"] = budget.elapsed_s
    emit(args, payload, text(check))
    freeze_at_exit()
    return 0


def text(check: Any) -> str:
    """The side-by-side as the terminal shows it: milliseconds, errors in percent, one verdict line per rate."""
    t = check.table
    rows = []
    for _, r in t.iterrows():
        row = {"rate req/s": r["rate_req_s"], "policy": r["policy"]}
        for m in ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"):
            row[f"{m} ms real"] = 1e3 * r[f"{m}_measured_s"]
            row[f"{m} ms sim"] = 1e3 * r[f"{m}_simulated_s"]
            noisy = bool(r.get(f"{m}_noisy", False))
            row[f"{m} err"] = f"{100 * r[f'{m}_rel_error']:+.0f}%" + ("~" if noisy else "")
        rows.append(row)
    import pandas as pd

    s = check.settings
    load = s.get("load", {})
    where = (
        f"{s.get('dtype', 'fp32')} on {s['device']}"
        if str(s.get("device", "cpu")).startswith("cuda")
        else f"{s.get('dtype', 'fp32')}, {s['threads'] or 'all'} thread(s)"
    )
    runner = s.get("runner") or {}
    lines = [
        f"offline pair ({s['target']} + {s['draft']}), {where}, {s['slots']} KV slots; "
        f"load average {load.get('load_avg_1m', float('nan')):.2f} over {load.get('cpus')} CPUs; passes: "
        f"{s.get('passes', 'eager')}"
        + (
            f" ({int(runner['captures'])} graphs captured in {runner['capture_s']:.1f} s)"
            if runner.get("captures")
            else ""
        ),
        f"fitted profile: MAPE {100 * s['fit_mape']:.1f}%; plain full-batch step {1e3 * s['plain_step_s']:.2f} ms, "
        f"prefill {1e3 * s['prefill_per_request_s']:.2f} ms per request -> capacity ~{s['capacity_req_s']:.1f} req/s",
        "host residual per decode round in the first burst (signed: negative where the fitted profile prices the "
        "engine's rounds above what they took): "
        + ", ".join(
            f"{k} {1e6 * v:+.0f} us + {1e6 * check.host_per_seq_s.get(k, 0.0):+.0f} us/seq"
            for k, v in check.host_per_round_s.items()
        ),
        "host time per prefill step in the first burst: "
        + ", ".join(f"{k} {1e6 * v:+.0f} us" for k, v in s.get("prefill_residual_per_pass_s", {}).items())
        + "; spread of acceptance between requests (Beta concentration, none: one alpha for all): "
        + ", ".join(f"{k} {'none' if v is None else f'{v:.3g}'}" for k, v in s.get("alpha_concentration", {}).items()),
    ]
    if "round_host_s" in t:  # the bursts re-run before each replay: how far the machine's speed moved meanwhile
        parts, flags = [], []
        for pol, g in t.groupby("policy", sort=False):
            a, seq, p_ = (
                1e6 * g["round_host_s"],
                1e6 * g["round_host_per_seq_s"],
                1e6 * g["prefill_host_s"],
            )
            part = (
                f"{pol} round {a.min():+.0f}..{a.max():+.0f} us {seq.min():+.0f}..{seq.max():+.0f} us/seq, "
                f"prefill {p_.min():+.0f}..{p_.max():+.0f} us"
            )
            # the median over the replays, as `specroof serve` takes them (one set for every policy it asks)
            f = f"--prefill separate --round-host-us {a.median():.0f} --round-host-per-seq-us {seq.median():.0f}"
            f += f" --prefill-host-us {p_.median():.0f}"
            if "idle_start_s" in g:  # the first prefill after an idle wait, beyond the others
                c = 1e6 * g["idle_start_s"]
                part += f", first prefill after idle +{c.min():.0f}..{c.max():.0f} us"
                f += f" --idle-start-us {c.median():.0f}"
            parts.append(part)
            flags.append(f"{pol}: {f}")
        lines.append(
            "given to the simulator, the mean of the calibrations before and after each replay: " + "; ".join(parts)
        )
        lines.append("this engine's terms for specroof serve (median over the replays): " + "; ".join(flags))
    lines += [
        pd.DataFrame(rows).round(2).to_string(index=False),
    ]
    if "idle_share_measured" in t:
        # at a light load the TTFT p50 lies between two modes, and follows the share of arrivals that find no one
        found = [
            f"  {r['rate_req_s']:g} req/s {r['policy']}: {100 * r['idle_share_measured']:.0f}% / "
            f"{100 * r['idle_share_simulated']:.0f}% of arrivals found it idle, TTFT p50 "
            f"{1e3 * r['ttft_idle_p50_measured_s']:.1f} / {1e3 * r['ttft_idle_p50_simulated_s']:.1f} ms; the others "
            f"{1e3 * r['ttft_busy_p50_measured_s']:.1f} / {1e3 * r['ttft_busy_p50_simulated_s']:.1f} ms"
            for _, r in t.iterrows()
            if r["idle_share_measured"] >= 0.05  # (overloaded, every arrival finds the engine busy)
        ]
        if found:
            lines += ["TTFT by what an arrival found the engine doing, real / sim:", *found]
    if "replay_speed" in t:
        # the scheduling model's own error: the simulator again at each replay's measured speed (not a prediction)
        lines.append(
            "at each replay's own speed (what its steps took over the simulator's price of them; read off the replay,"
            " so not a prediction: what is left is the scheduling model's error, the machine's drift taken out):"
        )
        for _, r in t.iterrows():
            errs = " ".join(
                f"{m} {100 * r[f'{m}_speed_matched_rel_error']:+.0f}%"
                + ("~" if bool(r.get(f"{m}_speed_matched_noisy", False)) else "")
                for m in ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")
            )
            cal = f" (the calibrations around them x{r['calibration_speed']:.2f})" if "calibration_speed" in r else ""
            lines.append(
                f"  {r['rate_req_s']:g} req/s {r['policy']}: the replays ran x{r['replay_speed']:.2f} the prices{cal}; "
                + errs
            )
    noisy_cols = [c for c in t.columns if c.endswith("_noisy") and "speed_matched" not in c]
    if noisy_cols and (int(t.get("replays", pd.Series([1])).max()) > 1 or t[noisy_cols].to_numpy(bool).any()):
        lines.append(
            "real: the mean of each trace's replays; ~: its replays disagreed by more than the error, or the "
            "simulator did under the calibration before the replays against the one after, or at the calibrations' "
            "speed against the replays' own (noise, not a result)"
        )
    for _, v in check.verdicts.iterrows():
        lines.append(
            f"rate {v['rate_req_s']:g} req/s, {v['policy']}: speculation pays (E2E p50) "
            f"real {'yes' if v['pays_measured'] else 'no'} ({v['ratio_measured']:.2f}x), "
            f"sim {'yes' if v['pays_simulated'] else 'no'} ({v['ratio_simulated']:.2f}x)"
            + ("" if v["agree"] else "  <- verdicts differ")
        )
    from specroof.measure_cli import budget_words

    lines.append(budget_words(s["seconds"], s.get("budget_s"), s.get("dropped") or {}))
    return "\n".join(lines)


def add_parser(msub: Any) -> None:
    """Register ``serve`` on the *measure* subparsers."""
    p = msub.add_parser(
        "serve",
        help="real continuous batching (KV slots, ragged speculative rounds) on a trace, beside the simulator",
    )
    p.add_argument(
        "--policy",
        action="append",
        default=None,
        help="a speculating chain static:G to set against plain decoding (repeatable; off, the baseline, always runs; "
        "default static:3)",
    )
    add_list_flag(
        p,
        "--rate",
        None,
        "request rates in requests per second",
        float_list,
        default_text="light, near saturation and overloaded for this device",
        forms="2,8,16 or 2 8 16",
    )
    p.add_argument("--slots", type=int, default=4, help="KV slots: the most requests decoding at once (default 4)")
    p.add_argument("--requests", type=int, default=None, help="requests per trace (default: as the budget allows)")
    p.add_argument("--input-len", default="32", help="prompt tokens: N, uniform:A-B or lognormal:MEDIAN,SIGMA")
    p.add_argument("--output-len", default="uniform:16-48", help="output tokens: N, uniform:A-B or lognormal:M,S")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the arrival trace and the lengths (default 0)")
    p.add_argument(
        "--replays",
        type=int,
        default=2,
        help="real replays of each trace (default 2): a figure they disagree on by more than its error is noisy",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=240.0,
        help="seconds for the whole command (default 240): the imports, loading, microbenchmarks, sweeps, "
        "calibrations and replays; rates and replays that do not fit are left out, and named",
    )
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    p.add_argument("--out", default=None, help="folder for the side-by-side and per-request CSVs")
    from specroof.measure_cli import add_graph_flags

    add_graph_flags(p)
    _add_json(p)
    p.set_defaults(func=cmd_measure_serve)
