"""`specroof measure engine` for every framework that runs here: fit error and held-out speedup error per framework.

For each framework (``hf``, ``torch-eager``, ``torch-compile``; the serving engines are
listed with the reason they are skipped) it runs :func:`measure.engine_fit.measure_engine`
and :func:`measure.engine_fit.fit_engine` as the command does, and records, with the CPU
model, ISA, load average, CPU steal and date: the fitted host terms, the fit's median and max
error over the fitted configurations, and per held-out speculative row the measured and the
predicted speedup (rows whose bracketing baselines disagreed by more than their error are
marked noisy and left out of the summary, which says how many).

``--budget`` is per framework and counts everything from the process's start (imports, the hardware
profile, loading, warm-up and compiling, repetitions, fits): the whole run gets the frameworks' budgets
together, apportioned up front in equal shares, a framework's share being what is left over the
frameworks still to run (what one leaves goes to the next). What a framework's share cannot measure
3 times is dropped and named.

    python -m benchmarks.bench_measure_engine [--framework hf,torch-eager] [--budget 400] [--json out.json]
    python -m benchmarks.bench_measure_engine --record-from out.json   (figures measured elsewhere)
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from benchmarks.record import machine, record

FRAMEWORKS = ("hf", "torch-eager", "torch-compile")


def run(framework: str, bud: Any, hw: Any, dtype: str | None, dev: Any) -> dict[str, Any]:
    """One framework measured and fitted within ``bud`` (a :class:`measure.budget.Budget`), priced on ``hw``."""
    from measure.engine_fit import EnginePlan, fit_engine, measure_engine

    m = measure_engine(
        framework, EnginePlan(), device=dev, dtype=dtype, budget=bud, progress=True, log=print, hardware=hw
    )
    fit = fit_engine(m, hw, budget=bud)
    t = fit.table
    spec = t[t["kind"] == "spec"]
    rows = [
        {
            "gamma": "heuristic" if r["schedule"] == "heuristic" else int(r["gamma"]),
            "use": "fit" if r["fit"] else ("noisy" if r["noisy"] else "held out"),
            "mean_accepted": float(r["mean_accepted"]),
            "speedup_measured": float(r["speedup_measured"]),
            "speedup_predicted": float(r["speedup_predicted"]),
            "error": float(r["speedup_error"]),
            "spread": float(r["spread"]),
            "repeats": int(r["repeats"]),
            "t_step_s": float(r["t_step_s"]),
            "t_predicted_s": float(r["t_predicted_s"]),
            "t_base_s": float(r["t_base_s"]),
            "draft_passes_per_round": float(r["draft_passes_per_round"]),
        }
        for _, r in spec.iterrows()
    ]
    plain = [
        {k: (v if isinstance(v, str) else float(v) if isinstance(v, float) else int(v)) for k, v in r.items()}
        for r in t.loc[
            t["kind"] == "plain", ["model", "n_layers", "batch", "t_step_s", "t_predicted_s", "spread", "repeats"]
        ].to_dict(orient="records")
    ]
    return {
        "framework": framework,
        "plain": plain,
        "version": m.framework_version,
        "device": m.device.get("name"),
        "hardware": hw.id,
        "load": {k: v for k, v in m.load.items() if k != "ticks"},
        "threads": m.threads,
        "dtype": m.dtype,
        "dtype_reason": m.dtype_reason,
        "seconds": bud.elapsed_s,
        "budget_s": bud.seconds,
        "steps_s": {**{k: v for k, v in m.steps_s.items() if k != "before"}, **fit.steps_s},
        "dropped": m.dropped,
        "fit_starts": list(fit.starts),
        "params_us": fit.params,
        "fit_error": fit.fit_error,
        "heldout": fit.validation,
        "rows": rows,
        "skipped": m.skipped,
    }


def body(results: list[dict[str, Any]], skipped: dict[str, str]) -> str:
    lines = [
        "Per framework: the engine terms fitted to plain decoding (models of 2, 4 and 8 layers of the offline pair's "
        "width, batch 1, 2, 4) and to speculative decoding of the offline pair at gammas 1, 3, 5; gammas 2, 4, 6 "
        "and Hugging Face's heuristic schedule are held out and predicted through the fitted profile. Times are "
        "one thread's CPU time (the time another process holds the core does not count; contention for caches and "
        "memory still does), in the device's fastest dtype. A measured speedup is the median over repetitions of "
        "the ratio of a plain call of the target to the speculative call timed beside it (96 tokens, less the "
        "median of 24-token calls); its interval is the median's 90% confidence half-width. What the budget left after "
        "every configuration's repetitions went to the speculative rows whose interval was widest against what they "
        "must resolve (a fit row: 5%; a held-out row: half its error), and the terms were fitted again to the fit "
        "rows only; a held-out row whose interval is still wider than its error is left out of the summary as noisy. The "
        "fitted terms are the per-launch (eager) or per-layer (compiled) cost, the per-step and per-sequence host "
        "time, the per-round host time, and the share of the hardware profile's streaming rate that one thread's "
        "kernels reach (bandwidth_fraction: what makes a narrow draft's pass cheaper than a layer of the target's "
        "width). A framework's budget covers all it does (imports, the hardware profile, loading, warm-up and "
        "compiling, repetitions, fits); what its share could not measure 3 times is named below the tables. "
        "The load average is the machine's during the run (2 cores here: "
        "other work at load 1 slows even one thread's CPU time).",
        "",
        "| framework | dtype | load avg (1 min) | steal | seconds (of budget) | fitted host terms | fit error median / max "
        "| held-out speedup error median / max (rows, noisy) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        fe, va, ld = r["fit_error"], r["heldout"], r["load"]
        terms = ", ".join(f"{k} {v:.3g}" for k, v in r["params_us"].items())
        lines.append(
            f"| {r['framework']} {r['version']} | {r.get('dtype', '')} | {ld.get('load_avg_1m', float('nan')):.2f} | "
            f"{ld.get('steal_pct', float('nan')):.1f}% | {_seconds(r)} | {terms} | {fe['error_median']:.1%} / {fe['error_max']:.1%} | "
            f"{va['error_median']:.1%} / {va['error_max']:.1%} ({va['rows']}, {va['noisy_rows']} noisy) |"
        )
    for r in results:
        lines += ["", f"{r['framework']}: speculative rows", "", "| gamma | use | tokens/round | draft passes/round "
                  "| measured | predicted | error | interval (90%) | repetitions |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        order = sorted(
            r["rows"], key=lambda x: (x["gamma"] == "heuristic", x["gamma"] if x["gamma"] != "heuristic" else 0)
        )
        for x in order:
            lines.append(
                f"| {x['gamma']} | {x['use']} | {x['mean_accepted']:.2f} | {x.get('draft_passes_per_round', float('nan')):.2f} "
                f"| {x['speedup_measured']:.2f}x | {x['speedup_predicted']:.2f}x | {x['error']:+.1%} | "
                f"±{x['spread']:.1%} | {x.get('repeats', '')} |"
            )
    for r in results:
        if r.get("skipped"):
            lines += ["", f"{r['framework']}, not measured: " + "; ".join(r["skipped"])]
        if r.get("steps_s"):
            lines += [
                "",
                f"{r['framework']}, seconds by step: " + ", ".join(f"{k} {v:.1f}" for k, v in r["steps_s"].items()),
            ]
    if skipped:
        lines += ["", "Not measured here: " + "; ".join(f"{k}: {v}" for k, v in skipped.items())]
    return "\n".join(lines)


def _seconds(r: dict[str, Any]) -> str:
    spent = f"{r.get('seconds', float('nan')):.0f}"
    return spent if r.get("budget_s") is None else f"{spent} ({r['budget_s']:.0f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", default=",".join(FRAMEWORKS))
    ap.add_argument("--budget", type=float, default=400.0, help="seconds per framework")
    ap.add_argument("--dtype", default=None, help="default: the device's fastest (bf16 only where it is native)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument("--record-from", default=None, help="record figures measured elsewhere (a --json file)")
    ap.add_argument("--no-record", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args(argv)
    given = list(argv if argv is not None else sys.argv[1:])
    for flag in ("--json", "--record-from"):  # where this run's files went is not part of how to reproduce it
        if flag in given:
            i = given.index(flag)
            del given[i : i + 2]
    given = [a for a in given if a != "--no-record"]  # nor whether it was recorded (a later --record-from may)
    command = "python -m benchmarks.bench_measure_engine " + " ".join(shlex.quote(a) for a in given)
    if args.record_from:
        data = json.loads(Path(args.record_from).read_text())
        record("measure engine: fitted engine profiles", body(data["results"], data["skipped"]), data["command"],
               machine_line=data["machine"], date=data.get("date"))  # fmt: skip
        return 0
    from measure.budget import Budget
    from measure.device import resolve_device
    from measure.engine_fit import QUICK_PROFILE_BELOW_S, base_hardware, measured_frameworks
    from roofline.core.errors import SpecroofError

    usable = measured_frameworks()
    results, skipped = [], {k: v for k, v in usable.items() if v is not None}
    names = [n.strip() for n in args.framework.split(",") if usable.get(n.strip()) is None]
    unknown = [n for n in names if n not in FRAMEWORKS]
    if unknown or not args.budget > 0:
        print(
            f"bench_measure_engine: --framework takes {', '.join(FRAMEWORKS)} and --budget seconds > 0", file=sys.stderr
        )
        return 2
    # the frameworks' budgets together, from the process's start; each framework's share taken when it starts
    seconds = args.budget * len(names) if names else None
    total = Budget.from_process_start(seconds) if argv is None else Budget(seconds)  # in-process: from the call
    dev = resolve_device(args.device)
    hw = base_hardware(None, dev, args.dtype, quick=total.remaining_s < QUICK_PROFILE_BELOW_S * max(len(names), 1))
    print(
        f"budget {total.seconds:.0f} s for {', '.join(names)} ({total.elapsed_s:.0f} s spent on imports and the "
        f"hardware profile): a share of what is left each, what one leaves going to the next"
    )
    for i, name in enumerate(names):
        share = total.share(1.0 / (len(names) - i))
        try:
            results.append(run(name, share, hw, args.dtype, dev))
        except SpecroofError as exc:  # a share too short even for the fit: said, and the next framework runs
            skipped[name] = str(exc)
    text = body(results, skipped)
    print(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"results": results, "skipped": skipped, "command": command, "machine": machine()}, indent=1)
        )
    if not args.no_record:
        record("measure engine: fitted engine profiles", text, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
