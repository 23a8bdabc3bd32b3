"""``specroof measure engine``: time a framework's plain and speculative decoding here and fit its engine profile.

``--framework hf|torch-eager|torch-compile`` runs on this device (vllm and sglang are
detected and skipped with one line: their offline engines need a CUDA build). The profile is
written to ``--out`` with a ``[measured]`` block (framework and version, torch, device, host
CPU, date, command, the hardware profile it was fitted against) and priced anywhere an engine
is: ``--engine engine.toml --hardware <that profile>``. A CPU without a built-in profile gets
one of its measured streaming and matmul rates, written beside the engine
(``engine.hardware.toml``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from roofline.core.errors import SpecroofError
from specroof.cli import _add_json, _note, emit
from specroof.shell import add_list_flag

FRAMEWORK_CHOICES = ("hf", "torch-eager", "torch-compile", "vllm", "sglang")


def _out_paths(out: str) -> tuple[Path, Path, Path]:
    p = Path(out)
    if p.suffix != ".toml":
        raise SpecroofError(f"--out must name a .toml file (got {out!r})")
    if p.is_dir():
        raise SpecroofError(f"--out {out!r} is a folder: give a file name")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("a"):
            pass
    except OSError as exc:
        raise SpecroofError(f"cannot write --out {out!r}: {exc.strerror}") from None
    return p, p.with_suffix(".hardware.toml"), p.with_suffix(".csv")


def cmd_measure_engine(args: argparse.Namespace) -> int:
    import math

    from measure.budget import Budget

    if not (args.budget > 0 and math.isfinite(args.budget)):
        raise SpecroofError(f"--budget must be a finite number of seconds > 0 (got {args.budget})")
    # the budget counts from the process's start (the command's, when called in-process): the imports, the probe,
    # compiling, warming up and the fit are in it
    budget = Budget.for_command(args.budget, ["measure", "engine"])
    from measure.device import resolve_device
    from measure.engine_fit import (
        QUICK_PROFILE_BELOW_S,
        EnginePlan,
        base_engine,
        base_hardware,
        fit_engine,
        framework_module,
        measure_engine,
        profile_data,
        write_engine_profile,
    )
    from roofline.passes.model import get_model

    framework_module(args.framework)  # not importable here: one line before any work
    base_engine(args.framework)  # the shipped profile whose kernel counts the fit keeps loads, before any work
    if args.threads is not None and args.threads < 1:
        raise SpecroofError(f"--threads must be >= 1 (got {args.threads})")
    gammas = tuple(args.gamma)
    fit_gammas = tuple(args.fit_gamma) if args.fit_gamma else tuple(g for g in gammas[::2])
    plan = EnginePlan(
        depths=tuple(args.depth),
        batches=tuple(args.batch),
        gammas=gammas,
        fit_gammas=fit_gammas,
        heuristic=not args.no_heuristic,
        new_tokens=args.tokens,
        repeats=args.repeats,
    )
    if set(plan.fit_gammas) == set(plan.gammas) and not plan.heuristic:
        raise SpecroofError("--fit-gamma takes every --gamma and --no-heuristic is set: nothing is held out")
    out, hw_out, csv_out = _out_paths(args.out)
    shape = get_model(args.model) if args.model else None
    steps = {"imports": budget.elapsed_s}
    dev = resolve_device(args.device)
    quick = budget.limited and budget.remaining_s < QUICK_PROFILE_BELOW_S
    hw = base_hardware(args.hardware, dev, args.dtype, hw_out if args.hardware is None else None, quick=quick)
    hw_ref = args.hardware or (str(hw_out) if hw_out.exists() else hw.id)
    steps["hardware_profile"] = budget.elapsed_s - steps["imports"]
    m = measure_engine(
        args.framework,
        plan,
        device=dev,
        dtype=args.dtype,
        threads=args.threads if dev.type == "cpu" else None,
        budget=budget,
        progress=not args.json,
        log=lambda msg: _note(args, msg),
        model=shape,
        hardware=hw,
    )
    fit = fit_engine(m, hw, budget=budget)
    command = (
        "specroof " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "specroof measure engine"
    )
    t_write = budget.elapsed_s
    write_engine_profile(out, profile_data(fit, m, command, hw_ref))
    fit.table.to_csv(csv_out, index=False)
    steps |= {k: v for k, v in m.steps_s.items() if k != "before"} | fit.steps_s
    steps["writing"] = budget.elapsed_s - t_write
    spent = {"budget_s": budget.seconds, "spent_s": budget.elapsed_s, "steps_s": steps}
    emit(args, _payload(fit, m, out, hw_ref, csv_out, spent), _text(fit, m, out, hw_ref, spent))
    # the interpreter's last collection walks every object the models left (4.0 s at exit, 0.8 s frozen, at load
    # average 7.9 on 2 cores): frozen at exit (atexit runs before it), the exit stays inside what the budget kept
    import atexit
    import gc

    atexit.register(gc.freeze)
    return 0


def _payload(fit: Any, m: Any, out: Path, hw_ref: str, csv_out: Path, spent: dict[str, Any]) -> dict[str, Any]:
    return {
        "engine_profile": str(out),
        "hardware": hw_ref,
        "table": str(csv_out),
        "framework": m.framework,
        "framework_version": m.framework_version,
        "params_us": fit.params,
        "fit_error": fit.fit_error,
        "heldout_speedup_error": fit.validation,
        "load": m.load,
        "skipped": m.skipped,
        "dropped": m.dropped,
        "repeats": m.repeats,
        "fit_starts": list(fit.starts),
        **spent,
        "rows": fit.table.drop(columns=["fit"]).assign(fit=fit.table["fit"]).to_dict(orient="records"),
    }


def _budget_line(spent: dict[str, Any], fit: Any) -> str:
    """Where the seconds went, step by step, against the budget."""
    steps = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in spent["steps_s"].items())
    tried, of = fit.starts
    budget = "no budget" if spent["budget_s"] is None else f"budget {spent['budget_s']:.0f} s"
    return f"{budget}, {spent['spent_s']:.1f} s spent ({steps}); the fit tried {tried} of {of} starting points"


def _text(fit: Any, m: Any, out: Path, hw_ref: str, spent: dict[str, Any]) -> str:
    t = fit.table
    spec = t[t["kind"] == "spec"].copy()
    spec["gamma"] = spec.apply(lambda r: "heur." if r["schedule"] == "heuristic" else str(int(r["gamma"])), axis=1)
    spec["use"] = spec["fit"].map({True: "fit", False: "held out"})
    spec.loc[spec["noisy"].astype(bool), "use"] = "noisy"
    shown = spec[["gamma", "use", "mean_accepted", "speedup_measured", "speedup_predicted", "speedup_error", "spread"]]
    fe, va = fit.fit_error, fit.validation
    load = m.load
    lines = [
        f"{m.framework} {m.framework_version} on {m.device.get('name')} (torch {m.device.get('torch_version')}, "
        f"{m.threads or 'all'} thread(s), {load.get('clock')}); load average {load.get('load_avg_1m', float('nan')):.2f} "
        f"over {load.get('cpus')} CPUs, steal {load.get('steal_pct', float('nan')):.1f}%",
        f"dtype {m.dtype}" + (f": {m.dtype_reason}" if getattr(m, "dtype_reason", "") else ""),
        "fitted host terms: " + ", ".join(f"{k} = {v:.4g}" for k, v in fit.params.items()),
        f"fit: {fe['rows']} configurations, median |error| {fe['error_median']:.1%}, max {fe['error_max']:.1%}",
        f"held-out speedups: median |error| {va['error_median']:.1%}, max {va['error_max']:.1%} over {va['rows']} rows"
        + (f" ({va['noisy_rows']} noisy: left out)" if va["noisy_rows"] else ""),
        shown.round(3).to_string(index=False),
    ]
    if m.skipped:
        lines.append("not measured: " + "; ".join(m.skipped))
    lines.append(_budget_line(spent, fit))
    lines.append(f"wrote {out} (price with --engine {out} --hardware {hw_ref})")
    return "\n".join(lines)


def add_parser(msub: Any) -> None:
    """Register ``engine`` on the *measure* subparsers."""
    p = msub.add_parser(
        "engine", help="time a framework's plain and speculative decoding here; fit and write its engine profile"
    )
    p.add_argument("--framework", required=True, choices=FRAMEWORK_CHOICES)
    p.add_argument("--model", default=None, help="preset shape of the plain-decoding models (default: the pair's)")
    add_list_flag(p, "--depth", [2, 4, 8], "layers of the plain-decoding models")
    add_list_flag(p, "--batch", [1, 2, 4], "batch sizes of plain decoding")
    add_list_flag(p, "--gamma", [1, 2, 3, 4, 5, 6], "fixed speculation lengths")
    add_list_flag(p, "--fit-gamma", None, "gammas the fit sees", default_text="every other")
    p.add_argument("--no-heuristic", action="store_true", help="skip Hugging Face's heuristic schedule")
    p.add_argument("--tokens", type=int, default=96, help="new tokens per run (and half as many)")
    p.add_argument("--repeats", type=int, default=12, help="most repetitions (the budget may allow fewer)")
    p.add_argument(
        "--dtype",
        choices=["fp32", "bf16", "fp16"],
        default=None,
        help="the models' dtype (default: the device's fastest; bf16 on a CPU without bf16 units is emulated)",
    )
    p.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: one thread's host cost)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    p.add_argument("--hardware", default=None, help="datasheet profile to price passes on (default: this device's)")
    p.add_argument(
        "--budget",
        type=float,
        default=600.0,
        help="seconds for the whole command, from its start: imports, probe, compile, warm-up, repetitions, fit "
        "(default 600). What it cannot measure 3 times is dropped and named",
    )
    p.add_argument(
        "--out",
        default="engine.toml",
        help="engine profile to write (.toml; default ./engine.toml, git-ignored in a specroof checkout)",
    )
    _add_json(p)
    p.set_defaults(func=cmd_measure_engine)
