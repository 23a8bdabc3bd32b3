"""``specroof measure ...``: the measuring subcommands, registered by ``specroof.cli`` when torch is installed.

Handlers import torch-using modules lazily, so building the parser costs nothing.
Every argument and output path is checked before the first measurement.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roofline.core.errors import SpecroofError
from roofline.core.units import format_quantity
from roofline.core.validation import check_quantity, not_both
from roofline.costing.hardware import load_hardware
from roofline.passes.model import ModelSpec, get_model
from specroof.shell import _add_json, _note, add_list_flag, emit


def _writable_file(path: str, what: str) -> Path:
    """``path`` as a file we may write, proven by opening it now (before minutes of measuring), not at the end."""
    p = Path(path)
    if p.is_dir():
        raise SpecroofError(f"{what} {path!r} is a folder: give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    existed = p.exists()
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with p.open("a"):
            pass
    except OSError as exc:
        raise SpecroofError(f"cannot write {what} {path!r}: {exc.strerror}") from None
    if not existed:
        p.unlink(missing_ok=True)
    return p


def _writable_dir(path: str, what: str) -> Path:
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise SpecroofError(f"{what} {path!r} is a file, not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecroofError(f"cannot create {what} {path!r}: {exc.strerror}") from None
    probe = p / f".specroof-write-test-{os.getpid()}"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise SpecroofError(f"cannot write into {what} {path!r}: {exc.strerror}") from None
    return p


def _keeps_on_interrupt(command: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[..., int]]:
    """A measuring command whose Ctrl-C says what was saved and exits 130 instead of a traceback."""

    def wrap(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        def handler(args: argparse.Namespace) -> int:
            try:
                return run(args)
            except KeyboardInterrupt:
                return _interrupted(args.out, command)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or args.out is None:
                    raise
                print(
                    f"specroof: error: no space left on the device writing {exc.filename or args.out!r}: "
                    f"saved {_saved(args.out)} to {args.out}; free some space and rerun with --resume to continue",
                    file=sys.stderr,
                )
                return 2

        return handler

    return wrap


def _interrupted(out: str | Path | None, command: str) -> int:
    """Ctrl-C: say what is on disk and how to continue; exit 130 (the shell's code for SIGINT)."""
    if out is None:
        print(f"\ninterrupted: nothing was saved (no --out); rerun `specroof {command}` with --out", file=sys.stderr)
        return 130
    print(f"\ninterrupted: saved {_saved(out)} to {out}; rerun with --resume to continue", file=sys.stderr)
    return 130


def _saved(out: str | Path) -> str:
    """What a measuring run has on disk in ``out``, in words."""
    from measure.store import RESULTS, read_results

    folder = Path(out)
    rows = 0
    for f in [folder / RESULTS, *folder.glob(f"sweep-*/{RESULTS}")]:
        try:
            rows += len(read_results(f))
        except (SpecroofError, OSError):
            pass
    runs = folder / "runs.jsonl"
    n_runs = sum(1 for line in runs.open() if '"spec"' in line) if runs.exists() else 0
    return f"{rows} measured sweep visits" + (f" and {n_runs} speculative decoding runs" if n_runs else "")


#: --graphs: CUDA graphs where there is a GPU (auto), always (refused without one), never (eager, to compare)
GRAPH_CHOICES = ("auto", "on", "off")


def add_graph_flags(p: argparse.ArgumentParser) -> None:
    """``--graphs auto|on|off`` and ``--compile`` on a measuring command (checked by :func:`check_graph_flags`)."""
    p.add_argument(
        "--graphs",
        choices=GRAPH_CHOICES,
        default="auto",
        help="capture every verify and draft pass as a CUDA graph and replay it, timed on the device (auto: on a "
        "GPU; off: eager passes, and the launch overhead graphs remove is shown)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="run each layer through torch.compile (inductor) before capture: fused kernels closer to the engines'; "
        "the compile time is reported and counted in --budget",
    )


def check_graph_flags(args: argparse.Namespace, dev: Any) -> None:
    """Refuse, before any work, ``--graphs on`` without a GPU and ``--compile`` where inductor cannot run."""
    from measure.graphs import inductor_missing, use_graphs

    use_graphs(args.graphs, dev)
    if args.compile:
        missing = inductor_missing(dev)
        if missing:
            raise SpecroofError(missing)


def graph_lines(passes: str, runner: dict[str, float], launch: Any = None) -> list[str]:
    """How passes ran, what capturing and compiling cost, and (graphs off on a GPU) what the graphs would remove."""
    lines = [f"passes: {passes}"]
    if runner.get("captures"):
        lines[0] += (
            f" ({int(runner['captures'])} graphs captured in {runner['capture_s']:.1f} s"
            + (f", compiled in {runner['compile_s']:.1f} s" if runner.get("compile_s") else "")
            + ")"
        )
    elif runner.get("compile_s"):
        lines[0] += f" (compiled in {runner['compile_s']:.1f} s)"
    if launch is not None and len(launch):
        lines.append("launch overhead CUDA graphs remove (the same static pass uncaptured minus replayed, per pass):")
        for _, r in launch.iterrows():
            lines.append(
                f"  batch {int(r['batch'])} x {int(r['new_tokens'])} new tokens at context {int(r['context'])}: "
                f"uncaptured {1e3 * r['t_uncaptured_s']:.3f} ms, graph {1e3 * r['t_graph_s']:.3f} ms, "
                f"overhead {1e3 * r['launch_overhead_s']:.3f} ms"
            )
    return lines


def cmd_measure_device(args: argparse.Namespace) -> int:
    from measure.device import describe, match_profile

    info = describe(args.device)
    info["matched_profile"] = match_profile(info)
    lines = [f"{k:<22} {v}" for k, v in info.items() if k != "caches_bytes"]
    if info.get("matched_profile") is None:
        lines.append("no built-in profile matches this device: `specroof measure bench` writes a measured one")
    emit(args, info, "\n".join(lines))
    return 0


def cmd_measure_bench(args: argparse.Namespace) -> int:
    from measure.device import resolve_device
    from measure.microbench import measure_profile
    from measure.models import TORCH_DTYPES

    dtypes = [d.strip() for d in args.dtype.split(",")]
    for d in dtypes:
        if d not in TORCH_DTYPES:
            raise SpecroofError(f"unknown --dtype {d!r}; choose from {', '.join(TORCH_DTYPES)}")
    if not Path(args.out).is_dir() and Path(args.out).suffix.lower() != ".toml":  # (a folder: said below)
        raise SpecroofError(f"--out {args.out!r} must name a .toml file: the measured profile is written as TOML")
    out = _writable_file(args.out, "--out")
    dev = resolve_device(args.device)
    hw = measure_profile(out, dev, dtypes=dtypes, progress=lambda name: _note(args, f"  measuring {name} ..."))
    m = hw.measured
    assert m is not None
    payload = {
        "profile": str(out),
        "bandwidth_bytes_per_s": m.bandwidth_bytes_per_s,
        "peak_flop_per_s": m.peak_flop_per_s,
        "pass_overhead_s": m.pass_overhead_s,
        "copy_bandwidth_bytes_per_s": float(m.provenance.get("copy_bandwidth_GB_per_s", 0.0)) * 1e9,
        "overlap": hw.overlap,
    }
    lines = [
        f"wrote {out} (load it with --hardware {out})",
        f"  weight streaming {format_quantity(m.bandwidth_bytes_per_s or 0, 'B/s')} (one-row GEMM)",
        f"  copy bandwidth   {format_quantity(payload['copy_bandwidth_bytes_per_s'], 'B/s')}",
        f"  overlap          {hw.overlap:.2f} (memory/compute, at the ridge)",
    ]
    lines += [f"  {d} matmul      {format_quantity(v, 'FLOP/s')}" for d, v in m.peak_flop_per_s.items()]
    lines.append(f"  dispatch         {format_quantity(m.pass_overhead_s or 0, 's')}")
    emit(args, payload, "\n".join(lines))
    return 0


def _check_counts(args: argparse.Namespace, kinds: dict[str, str]) -> None:
    """Every numeric option (one value or a list) inside its physical range, before any work starts."""
    for flag, kind in kinds.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        for v in value if isinstance(value, list) else [] if value is None else [value]:
            check_quantity(flag, v, kind)


def command_budget(args: argparse.Namespace, words: list[str]) -> Any:
    """``--budget`` as a :class:`measure.budget.Budget` counted from the command's start (docs/cost-model.md, section
    38): the process's, when it was started for the command, so the imports, the device probe, loading, compiling
    and writing are inside it; ``inf`` is no limit. Refused in one line unless > 0."""
    from measure.budget import Budget

    if args.budget is not None and not args.budget > 0:
        raise SpecroofError(f"--budget must be > 0 seconds (got {args.budget})")
    seconds = None if args.budget is None or args.budget == float("inf") else float(args.budget)
    return Budget.for_command(seconds, words)


def freeze_at_exit() -> None:
    """Freeze the heap at exit: the interpreter's last collection walks every object the models left (4.0 s
    unfrozen, 0.8 s frozen at load average 7.9 on 2 cores, measured for measure engine), which the budget's closing
    reserve would not cover."""
    import atexit
    import gc

    atexit.register(gc.freeze)


def budget_words(spent_s: float, budget_s: float | None, dropped: dict[str, str]) -> str:
    """The seconds spent against the budget, and what it dropped (grouped by why), as one paragraph."""
    spent = f"{spent_s:.1f} s spent" + ("" if budget_s is None else f" of the {budget_s:g} s budget")
    if not dropped:
        return spent + ("; nothing dropped" if budget_s is not None else "")
    by_why: dict[str, list[str]] = {}
    for name, why in dropped.items():
        by_why.setdefault(why, []).append(name)
    return spent + "; dropped for the budget: " + "; ".join(f"{', '.join(n)}: {why}" for why, n in by_why.items())


def budget_line(budget: Any, dropped: dict[str, str]) -> str:
    """:func:`budget_words` of a :class:`measure.budget.Budget` now."""
    return budget_words(budget.elapsed_s, budget.seconds, dropped)


@_keeps_on_interrupt("measure sweep")
def cmd_measure_sweep(args: argparse.Namespace) -> int:
    budget = command_budget(args, ["measure", "sweep"])
    if args.resume and not args.out:
        raise SpecroofError("--resume needs --out (the folder to resume)")
    if args.tp != 1:
        return _measure_sweep_tp(args, budget)
    if not (args.hf or args.spec or args.model):  # before torch is imported: a usage error answers at once
        raise SpecroofError("give a model: --model PRESET, --spec config.json or --hf CHECKPOINT_FOLDER")
    from measure.device import resolve_device
    from measure.sweep import sweep, unvisited_words

    _check_counts(
        args,
        {"--batch": "batch", "--tokens": "tokens", "--context": "context", "--repeats": "batch", "--rounds": "batch"},
    )
    dev = resolve_device(args.device)
    check_graph_flags(args, dev)
    if args.out:
        _writable_dir(args.out, "--out")
    if args.hf:
        from measure.models import Transformer

        target: Any = Transformer.from_hf(args.hf, dtype=args.dtype.split(",")[0], device=dev)
    elif args.spec:
        target = ModelSpec.from_hf_config(args.spec)
    else:
        target = get_model(args.model)
    df = sweep(
        target,
        args.batch,
        args.tokens,
        args.context,
        args.dtype.split(","),
        device=dev,
        hardware=args.hardware,
        repeats=args.repeats,
        rounds=args.rounds,
        out=args.out,
        resume=args.resume,
        overwrite=args.overwrite,
        budget=budget,
        progress=not args.json,
        graphs=args.graphs,
        compile=args.compile,
        refuse_short=True,
    )
    freeze_at_exit()
    cols = [
        c
        for c in (
            "dtype",
            "batch",
            "new_tokens",
            "context",
            "status",
            "t_min_s",
            "t_median_s",
            "t_host_median_s",
            "t_predicted_s",
            "visits",
        )
        if c in df
    ]
    if "t_predicted_s" in cols and df["t_predicted_s"].isna().all():
        cols.remove("t_predicted_s")  # no profile matches this device: nothing to predict with (give --hardware)
    shown = df[cols].astype(object).where(df[cols].notna(), "-")
    launch = df.attrs.get("launch_overhead")
    runner = df.attrs.get("runner", {})
    dropped = dict(df.attrs.get("dropped", {}))
    payload = {
        "out": args.out,
        "points": len(df),
        "dropped": dropped,
        "budget_s": budget.seconds,
        "rows": df[cols].to_dict(orient="records"),
        "passes": df.attrs.get("passes", "eager"),
        "runner": runner,
        "launch_overhead": launch.to_dict(orient="records") if launch is not None else None,
    }
    payload["spent_s"] = budget.elapsed_s
    never = unvisited_words(df)
    words = {k: v for k, v in dropped.items() if " new tokens at context " not in k}  # (the points: in a line)
    if never:
        words[f"{int((df['status'] == 'budget').sum())} of {len(df)} points never visited ({never})"] = (
            "they did not fit what was left"
        )
    if args.out:
        (Path(args.out) / "sweep-summary.json").write_text(_json_text(payload))
    lines = graph_lines(payload["passes"], runner, launch)
    emit(
        args,
        payload,
        "\n".join(lines)
        + "\n"
        + shown.to_string(index=False)
        + "\n"
        + budget_line(budget, words)
        + (f"\nsaved to {args.out}" if args.out else ""),
    )
    return 0


def _json_text(payload: Any) -> str:
    from roofline.core.jsonio import dumps

    return dumps(payload)


def _measure_sweep_tp(args: argparse.Namespace, budget: Any) -> int:
    """``measure sweep --tp N``: the target sharded over N ranks (measure/tp.py spawns them, or joins torchrun's)."""
    from measure.tp import DEFAULT_SHAPE, report, tp_sweep

    if args.tp < 2:
        raise SpecroofError(f"--tp must be >= 1 (got {args.tp}): 1 runs the target whole, 2 or more shard it")
    if args.graphs == "on" or args.compile:
        raise SpecroofError("--tp sweeps run eagerly (their all-reduces are not captured): drop --graphs on/--compile")
    if args.hf:
        raise SpecroofError("--tp shards a model built from its shape: give --model or --spec, not --hf")
    if args.resume or args.overwrite:
        raise SpecroofError("--tp sweeps are written whole: --resume/--overwrite do not apply")
    out = None
    if args.out:
        _writable_dir(args.out, "--out")
        out = str(Path(args.out) / "tp-sweep.json")
    # gloo reduces fp32 on the CPU; the default bf16 is the GPU's dtype
    dtype = None if args.dtype == "bf16" and args.device in (None, "cpu") else args.dtype.split(",")[0]
    data = tp_sweep(
        args.spec or args.model or DEFAULT_SHAPE,
        args.tp,
        batch=args.batch,
        tokens=args.tokens,
        context=args.context[0],
        dtype=dtype,
        device=args.device,
        repeats=args.repeats,
        rounds=args.rounds,
        budget_s=budget,
        out=out,
        command="specroof " + " ".join(sys.argv[1:]),
    )
    if data is not None:  # under torchrun only rank 0 reports
        print(report(data, as_json=args.json))
    return 0


def cmd_measure_fit(args: argparse.Namespace) -> int:
    from measure.fit import fit, validate
    from measure.sweep import load_sweep

    if not Path(args.sweep).exists():
        raise SpecroofError(f"--sweep {args.sweep!r}: no such folder (give the folder `measure sweep --out` wrote)")
    tp_file = Path(args.sweep) if Path(args.sweep).is_file() else Path(args.sweep) / "tp-sweep.json"
    if tp_file.is_file():  # a --tp sweep: fit the all-reduce latency (measure/tp.py)
        from measure.tp import load_tp_sweep, report

        print(report(load_tp_sweep(tp_file), args.statistic, as_json=args.json))
        return 0
    if not args.hardware:
        raise SpecroofError("--hardware is required to fit a verify sweep (the profile `measure bench` wrote)")

    df = load_sweep(args.sweep)
    if args.spec:
        spec = ModelSpec.from_hf_config(args.spec)
    else:
        name = str(df["model"].iloc[0]) if "model" in df and not args.model else args.model
        spec = get_model(name)
    out = _writable_file(args.out or str(Path(args.sweep) / "fitted-profile.toml"), "--out")
    apriori = load_hardware(args.hardware)
    res = fit(df, spec, apriori, statistic=args.statistic)
    res.write_toml(out)
    _, summary = validate(df, spec, apriori, res.hardware, statistic=args.statistic)
    payload = {
        "fitted_profile": str(out),
        "fit_mape": res.mape,
        "apriori_mape": summary["apriori_mape"],
        "params": res.params,
        "crossover": summary["crossover"],
        "warning": res.warning,
    }
    lines = [
        f"fitted {res.n_points} points: MAPE {res.mape:.1%} (a-priori {summary['apriori_mape']:.1%})",
        *(f"  {k} = {v:.4g}" for k, v in res.params.items()),
        f"wrote {out}",
    ]
    if res.warning:
        print(f"specroof: warning: {res.warning}", file=sys.stderr)
    emit(args, payload, "\n".join(lines))
    return 0


@_keeps_on_interrupt("measure spec")
def cmd_measure_spec(args: argparse.Namespace) -> int:
    budget = command_budget(args, ["measure", "spec"])
    # the flags checked before torch is imported: a usage error answers at once
    not_both({"--pair": args.pair, "--hf": args.hf})
    not_both({"--pair": args.pair, "--draft-hf": args.draft_hf})  # the offline pair brings its own draft
    not_both({"--early-exit-only": args.early_exit_only or None, "--draft-hf": args.draft_hf})
    if args.pair != "offline" and not args.hf:
        raise SpecroofError(
            "give --pair offline or --hf TARGET_FOLDER (with --draft-hf DRAFT_FOLDER or --early-exit L)"
        )
    from measure.device import resolve_device
    from measure.spec_check import spec_check, verdict

    counted = {"--gamma": "gamma", "--batch": "batch", "--repeats": "batch"}
    _check_counts(args, counted | ({"--tokens": "tokens"} if args.tokens is not None else {}))
    if args.width is not None and (args.width < 1 or args.width & (args.width - 1)):
        raise SpecroofError(f"--width must be a power of two >= 1 (got {args.width})")
    if args.early_exit_only and args.early_exit is None:
        raise SpecroofError("--early-exit-only needs --early-exit L")
    dev = resolve_device(args.device)
    check_graph_flags(args, dev)
    out = _writable_dir(args.out, "--out")
    if not args.resume and (out / "runs.jsonl").exists() and not args.overwrite:
        raise SpecroofError(
            f"{args.out!r} already holds a speculative check: --resume to continue it, --overwrite to replace it"
        )
    target = draft = None
    if args.hf:
        from measure.models import Transformer

        target = Transformer.from_hf(args.hf, dtype=args.dtype or "bf16", device=dev)
        draft = Transformer.from_hf(args.draft_hf, dtype=args.dtype or "bf16", device=dev) if args.draft_hf else None
    check = spec_check(
        out,
        budget_s=budget,
        device=dev,
        dtype=args.dtype,
        width=args.width,
        gammas=args.gamma,
        batches=args.batch,
        tokens=args.tokens,
        early_exit=args.early_exit,
        draft=not args.early_exit_only,
        hardware=args.hardware or None,
        statistic=args.statistic,
        repeats=args.repeats,
        resume=args.resume,
        progress=not args.json,
        log=lambda m: _note(args, m),
        target_model=target,
        draft_model=draft,
        graphs=args.graphs,
        compile=args.compile,
    )
    payload = check.summary["payload"]
    spec_df = check.speedups
    cols = ["drafter", "batch", "gamma", "acceptance_rate", "speedup_measured", "speedup_predicted", "rel_error"]
    cols += [
        c for c in ("speedup_wall", "pairs", "flag", "noisy", "probe_spread", "rep_spread", "noise") if c in spec_df
    ]
    shown = spec_df[cols]
    noise = check.noise

    text = (
        verdict(spec_df, payload)
        + "\n"
        + summary_sentences(payload | {"fit_mape": check.fitted.mape}, noise)
        + "\n"
        + (f"{(payload.get('plan') or {}).get('line')}\n" if (payload.get("plan") or {}).get("line") else "")
        + (
            "fit error by pass rows (batch x new tokens): "
            + ", ".join(f"{r['rows']}: {r['err_mean']:+.0%}" for r in payload.get("fit_residuals_by_rows") or [])
            + "\n"
            if payload.get("fit_residuals_by_rows")
            else ""
        )
        + "\n".join(graph_lines(payload.get("passes", "eager"), payload.get("runner") or {}))
        + "\n"
        + host_line(payload.get("host_fit") or {})
        + shown.round(3).to_string(index=False)
        + f"\n{budget_line(budget, payload.get('dropped') or {})}"
        + f"\nwritten to {out}"
    )
    if check.fitted.warning:
        print(f"specroof: warning: {check.fitted.warning}", file=sys.stderr)
    emit(args, payload, text)
    freeze_at_exit()
    return 0


def summary_sentences(payload: dict[str, Any], noise: dict[str, float]) -> str:
    """What the check found, in sentences: the fit's error, how many speedup rows the noise leaves standing and
    their largest error, and how noisy the machine was."""

    def pct(value: Any) -> str:  # an error that may be missing (no row left): NaN, or None once made JSON-safe
        return "-" if value is None or value != value else f"{value:.0%}"

    quiet = payload.get("speedup_errors_quiet") or {}
    kept, noisy = int(quiet.get("rows") or 0), int(quiet.get("noisy_rows") or 0)
    total = kept + noisy
    text = f"The fitted roofline times the verify passes within {payload.get('fit_mape', float('nan')):.1%} "
    text += f"(a priori {payload['apriori_mape']:.1%}). "
    if total == 0:
        text += "No speedup row was measured."
    elif kept == 0:
        text += (
            f"None of the {total} speedup row{'s' if total != 1 else ''} stands above the machine's noise "
            f"(their largest error {pct(payload.get('speedup_error_max'))}), so no error is the model's to report."
        )
    else:
        text += (
            f"{kept} of {total} speedup row{'s' if total != 1 else ''} stand above the machine's noise, the largest "
            f"error among them {pct(quiet.get('error_max'))}"
            + (f"; {noisy} noisy row{'s' if noisy != 1 else ''} left out." if noisy else ".")
        )
    parts = []
    if "rep_spread_median" in noise:
        parts.append(
            f"a row's pairs disagreed by {noise['rep_spread_median']:.1%} (median), {noise['rep_spread_max']:.1%} (worst)"
        )
    if "probe_spread_median" in noise:
        parts.append(
            f"the baselines around a run by {noise['probe_spread_median']:.1%} (median), {noise['probe_spread_max']:.1%} (worst)"
        )
    if "sweep_drift" in noise:
        parts.append(f"the sweep's reference pass ranged {noise['sweep_drift']:.1%} visit to visit")
    if parts:
        text += " On this machine " + ", ".join(parts) + "."
    return text


def host_line(host: dict[str, Any]) -> str:
    """The host's time per round and per baseline step, fitted against the batch (a line, or nothing)."""
    if not host:
        return ""
    text = f"host time per round {1e6 * host['round_s']:.0f} us + {1e6 * host['round_per_seq_s']:.1f} us/seq"
    if "step_s" in host:
        text += f", per baseline step {1e6 * host['step_s']:.0f} us + {1e6 * host['step_per_seq_s']:.1f} us/seq"
    if "round_share_median" in host:
        text += f"; the host's share of a round {host['round_share_median']:.0%} (median over rows)"
    return text + "\n"


#: measure subcommands with a module of their own, each exposing ``add_parser(msub)``
MEASURE_COMMAND_MODULES = ("measure_engine", "measure_serve")


def register(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``measure device|bench|sweep|fit|spec`` to the top-level subparsers ``sub``."""
    meas = sub.add_parser("measure", help="measure this device (needs specroof[measure])")
    msub = meas.add_subparsers(dest="measure_command", required=True, parser_class=parser_class)
    p = msub.add_parser("device", help="what device is this and which profile matches")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    _add_json(p)
    p.set_defaults(func=cmd_measure_device)

    p = msub.add_parser("bench", help="microbenchmarks -> a measured hardware profile TOML")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    p.add_argument("--dtype", default="fp32,bf16", help="dtypes to measure matmul FLOP/s for")
    p.add_argument(
        "--out",
        default="measured-profile.toml",
        help="profile to write (default ./measured-profile.toml, git-ignored in a specroof checkout)",
    )
    _add_json(p)
    p.set_defaults(func=cmd_measure_bench)

    p = msub.add_parser("sweep", help="time verify passes over batch x new tokens x context x dtype")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", help="preset (random weights)")
    g.add_argument("--spec", help="a config.json (random weights)")
    g.add_argument("--hf", help="a Hugging Face checkpoint folder")
    add_list_flag(p, "--batch", [1], "sequences per verify pass")
    add_list_flag(p, "--tokens", [1, 2, 4, 8, 16, 32, 64], "new tokens per sequence in each pass (what K verifies)")
    add_list_flag(p, "--context", [128], "tokens already in each sequence's KV cache")
    p.add_argument("--dtype", default="bf16", help="dtypes to sweep, comma-separated: fp32, bf16, fp16 (default bf16)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    p.add_argument("--hardware", default=None, help="profile for the predicted column (e.g. a measured TOML)")
    p.add_argument("--repeats", type=int, default=5, help="timed passes per visit of a point")
    p.add_argument("--rounds", type=int, default=1, help="most shuffled visits of the grid (samples pooled)")
    p.add_argument(
        "--budget",
        type=float,
        default=600.0,
        help="seconds for the whole command (default 600; inf: no limit): the imports, loading and building the "
        "models, compiling and every visit; points that do not fit are not visited, and named",
    )
    p.add_argument("--out", default=None, help="folder for results.csv + meta.json (every visit saved as measured)")
    p.add_argument(
        "--tp",
        type=int,
        default=1,
        help="shard the target Megatron-style over N ranks and fit the all-reduce (gloo on CPU, NCCL on GPUs; "
        "spawns the ranks, or joins torchrun's: torchrun --nproc-per-node N -m specroof measure sweep --tp N)",
    )
    add_graph_flags(p)
    g2 = p.add_mutually_exclusive_group()
    g2.add_argument("--resume", action="store_true", help="continue the sweep saved in --out")
    g2.add_argument("--overwrite", action="store_true", help="replace the results saved in --out")
    _add_json(p)
    p.set_defaults(func=cmd_measure_sweep)

    p = msub.add_parser("fit", help="fit the roofline to a saved sweep; write the fitted profile")
    p.add_argument("--sweep", required=True, help="folder written by `measure sweep --out`")
    p.add_argument(
        "--hardware", default=None, help="starting profile (e.g. the one `measure bench` wrote); not for a --tp sweep"
    )
    p.add_argument("--model", help="preset the sweep measured (default: the name in the results)")
    p.add_argument("--spec", help="config.json the sweep measured")
    p.add_argument("--out", help="where to write the fitted profile (default SWEEP/fitted-profile.toml)")
    p.add_argument("--statistic", choices=["min", "median"], default="min", help="per-point time to fit (min)")
    _add_json(p)
    p.set_defaults(func=cmd_measure_fit)

    p = msub.add_parser(
        "spec", help="look, microbenchmark, sweep, fit, then baseline vs speculative decoding: predicted vs measured"
    )
    p.add_argument("--pair", choices=["offline"], help="the shipped byte-level pair (measure.pair)")
    p.add_argument("--hf", help="target: a Hugging Face checkpoint folder")
    p.add_argument("--draft-hf", help="draft: a Hugging Face checkpoint folder")
    p.add_argument("--early-exit", type=int, help="also an early-exit drafter after L target layers")
    p.add_argument("--early-exit-only", action="store_true", help="skip the separate draft model")
    add_list_flag(p, "--gamma", None, "speculation lengths", default_text="as the budget allows")
    add_list_flag(p, "--batch", None, "batch sizes", default_text="as the budget allows")
    p.add_argument(
        "--tokens",
        type=int,
        default=None,
        help="new tokens per sequence of each timed run (default: 32 on a quiet machine; on a noisy one as many as "
        "its measured noise needs, within the budget)",
    )
    p.add_argument("--width", type=int, default=None, help="widen the offline target (default: chosen for the device)")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default=None, help="default: what the device runs well")
    p.add_argument("--repeats", type=int, default=5, help="most interleaved baseline/speculative repetitions")
    p.add_argument(
        "--budget",
        type=float,
        default=300.0,
        help="seconds for the whole command (default 300; inf: no limit): the imports, the probe, loading, compiling, "
        "the microbenchmarks, sweeps, runs and fits; what does not fit is left out, and named",
    )
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    p.add_argument(
        "--statistic",
        choices=["min", "median"],
        default=None,
        help="min: fits to each sweep point's minimum, rounds and steps at their 10th percentile (the quiet machine); "
        "median: medians throughout (default: min, median on a machine the check finds noisy)",
    )
    p.add_argument(
        "--hardware", default=None, help="a-priori profile and fit start (default: microbenchmark this device now)"
    )
    p.add_argument(
        "--out",
        default="specroof-spec",
        help="folder for the check's results and page (default ./specroof-spec, git-ignored in a specroof checkout)",
    )
    add_graph_flags(p)
    g3 = p.add_mutually_exclusive_group()
    g3.add_argument("--resume", action="store_true", help="continue the check saved in --out")
    g3.add_argument("--overwrite", action="store_true", help="replace the check saved in --out")
    _add_json(p)
    p.set_defaults(func=cmd_measure_spec)
    # commands that live in a module of their own (specroof/commands/measure_*.py)
    for name in MEASURE_COMMAND_MODULES:
        importlib.import_module(f"specroof.commands.{name}").add_parser(msub)
