"""``specroof report``: the main job, the page (``specroof.report``) written section by section."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from roofline.core import interrupts
from roofline.core.errors import SpecroofError
from roofline.serving.sweep import DEFAULT_OBJECTIVE, OBJECTIVES
from specroof.commands.common import drafter_key, single_acceptance
from specroof.shell import (
    _add_json,
    _note,
    emit,
    engine_arg,
)


def _acceptance_items(args: argparse.Namespace, draft: str, exit_layer: int) -> dict[str, tuple[float, str]]:
    """The page's acceptances the user gave: --alpha (the draft model's) and --acceptance KEY=VALUE (model, early-exit),
    in the grammar every command shares; each as (per-token rate, what it was read as)."""
    from roofline.core.validation import not_both

    items: dict[str, str] = {}
    for item in args.acceptance or []:
        key = drafter_key(item.partition("=")[0])
        key = "model" if key == "draft" else key
        if key not in ("model", "early-exit") or "=" not in item:
            raise SpecroofError(
                f"--acceptance {item!r}: the page compares a draft model and an early exit: write model=VALUE or "
                "early-exit=VALUE"
            )
        if key in items:
            raise SpecroofError(f"--acceptance for {key!r} given twice: give one value each")
        items[key] = item.partition("=")[2]
    not_both({"--alpha": args.alpha, "--acceptance model=...": items.get("model")})
    out: dict[str, tuple[float, str]] = {}
    if args.alpha is not None:
        out["model"] = (float(args.alpha), f"given per-token rate alpha {args.alpha:g}")
    for key, value in items.items():
        spec = f"model:{draft}" if key == "model" else f"early-exit:{exit_layer}"
        acc, plan_value, note = single_acceptance(value, spec)
        rate = float(plan_value) if isinstance(plan_value, (int, float)) else float(acc.alpha())
        out[key] = (rate, note.partition(": ")[2] or note)
    return out


def check_out_folder(out: str) -> None:
    """The report's folder, refused before any work: a file, a folder that cannot be written, or one whose nearest
    existing parent cannot be written (the folders are made when the page is written)."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise SpecroofError(f"--out {out!r} is a file: the report is a folder (index.html, PNGs, CSVs)")
    existing = p
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SpecroofError(f"--out {out!r}: {str(existing)!r} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecroofError(
            f"--out {out!r}: cannot write in {str(existing)!r} (permission denied); choose another --out"
        )


def probe_out_folder(out: str) -> None:
    """Make the report's folder and write a probe file there: what permissions cannot tell (a read-only mount, a
    full disk, root on a read-only file system) fails here, in one line, before any section runs."""
    import tempfile

    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise SpecroofError(f"--out {out!r}: cannot write there ({e.strerror or e}); choose another --out") from None


def cmd_report(args: argparse.Namespace) -> int:
    import time

    from specroof.report import DEFAULT_PAIRING, analytic_sections, validate_inputs, write_report

    if args.budget is not None and not (math.isfinite(args.budget) and args.budget > 0):
        raise SpecroofError(f"--budget must be a finite number of seconds > 0 (got {args.budget})")
    check_out_folder(args.out)
    if args.alpha is not None and not 0.0 <= args.alpha <= 1.0:  # 0 (E = 1) and 1 (E = gamma + 1) are rates; nan fails
        raise SpecroofError(f"--alpha must lie in [0, 1] (got {args.alpha})")
    extra: list[Any] = []
    measured = not args.skip_measure
    if measured:
        import importlib.util

        if importlib.util.find_spec("torch") is None:  # checked without importing: roofline stays torch-free
            print(
                "torch is not installed: the measured section is skipped (pip install 'specroof[measure]')",
                file=sys.stderr,
            )
            measured = False
    if measured:

        def measured_section(w: Any) -> Any:
            from specroof.measure_report import measured_options, measurement_section

            return measurement_section(
                w,
                quick=args.quick,
                budget_s=args.budget,
                progress=not args.json,
                log=lambda m: _note(args, m),
                **measured_options(args),
            )

        extra.append(("Measured on this device", measured_section))
    pairing = dict(DEFAULT_PAIRING)
    for spec in args.drafter or []:  # the drafter grammar: the page compares one draft model and one early exit
        kind, _, value = spec.partition(":")
        kind = kind.strip().lower()
        if kind == "model" and value and args.draft is None:
            args.draft = value.strip()
        elif kind == "early-exit" and value.strip().isdigit() and args.early_exit is None:
            args.early_exit = int(value)
        else:
            raise SpecroofError(
                f"--drafter {spec!r}: the page compares one draft model (model:NAME) and one early exit (early-exit:L), "
                "each once; price other drafters with specroof plan --drafter SPEC"
            )
    if args.target or args.draft or args.alpha is not None or args.early_exit is not None or args.acceptance:
        from specroof.report import acceptance_pairing

        draft = args.draft or DEFAULT_PAIRING["drafters"][0]
        exit_layer = args.early_exit if args.early_exit is not None else DEFAULT_PAIRING["drafters"][1]
        given = _acceptance_items(args, draft, exit_layer)
        pairing = {
            "target": args.target or DEFAULT_PAIRING["target"],
            "drafters": (draft, exit_layer),
            **acceptance_pairing(
                draft,
                exit_layer,
                given.get("model"),
                given.get("early-exit"),
                target=args.target or DEFAULT_PAIRING["target"],
            ),  # fmt: skip
        }
    pairing["objective"] = args.objective
    pairing["engine"] = args.engine  # None: --engine none, the datasheet roofline
    t0 = time.perf_counter()
    n_sections = len(analytic_sections()) + len(extra)
    done = {"n": 0}

    def on_section(sec: Any) -> None:
        done["n"] += 1
        state = "FAILED: " + sec.error if sec.error else "done"
        _note(args, f"[{done['n']}/{n_sections}] {sec.title}: {state} ({time.perf_counter() - t0:.0f} s)")

    validate_inputs(args.hardware, pairing)  # every check before the first line of work is printed
    probe_out_folder(args.out)  # a read-only mount, a full disk: found by writing, before "writing" is said
    _note(args, f"writing {args.out}/index.html section by section ...")
    try:
        summary = write_report(args.out, args.hardware, extra, pairing, debug=args.debug, on_section=on_section)
    except KeyboardInterrupt:
        interrupts.handled()
        print(f"\ninterrupted: the finished sections are in {args.out}/index.html", file=sys.stderr)
        return 130
    summary["seconds"] = time.perf_counter() - t0
    how = f"roofline + {pairing['engine']} engine" if pairing["engine"] else "datasheet roofline, no engine"
    lines = [f"The answer ({how}, batch 1): best strategy and gamma per GPU, and the best draft-tree size"]
    # where each acceptance came from, in the headline: the matched pair's source, or the stand-in said to be one
    rates, notes = pairing.get("acceptance", {}), pairing.get("acceptance_notes", {})
    summary["acceptance_notes"] = dict(notes)
    lines += [f"  acceptance of {k}: " + (f"{rates[k]:.3g}, " if k in rates else "") + notes[k] for k in notes]
    if "answer" in summary:
        table = pd.DataFrame(summary["answer"])
        deploy = [c for c in table.columns if c.startswith("deploy_")]
        shown = table.drop(columns=deploy).round(2).astype(object)
        # a GPU the model does not fit has no gamma, speedup or tree: blanks, not None and NaN
        lines.append(shown.where(shown.notna(), "-").to_string(index=False))
        bands = summary.get("answer_error_bands", [])
        lines += [
            "error band" + (f" ({', '.join(b['hardware'])})" if len(bands) > 1 else "") + f": {b['note']}"
            for b in bands
        ]
        if "deploy_vllm" in table:
            lines.append("deploy the chain answer with vLLM:")
            lines += [
                f"  {r['hardware']}: {r['deploy_vllm']}"
                for _, r in table.iterrows()
                if isinstance(r["deploy_vllm"], str)
            ]
    meas = summary.get("measurement")
    if meas:
        lines.append(
            f"\nmeasured on {meas['device']} ({meas['dtype']}): verify-pass error a-priori {meas['apriori_mape']:.1%}, "
            f"fitted {meas['fit_mape']:.1%}; best gamma measured here: {meas['best_measured_text']}"
        )
    lines.append(f"\nreport written to {args.out}/index.html in {summary['seconds']:.0f} s")
    emit(args, summary, "\n".join(lines))
    if summary["failed"]:
        names = "; ".join(f"{f['section']} ({f['error']})" for f in summary["failed"])
        print(f"specroof: error: section(s) failed: {names}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: Any) -> None:
    """Register ``specroof report``."""
    from specroof.report import DEFAULT_ENGINE, DEFAULT_GPUS

    p = sub.add_parser(
        "report", help="the main job: which gamma and tree size per GPU, rooflines, plans, and a measurement here"
    )
    p.add_argument("--out", default="specroof-report", help="output folder (default ./specroof-report)")
    p.add_argument("--hardware", nargs="+", default=list(DEFAULT_GPUS), help="GPUs to cover")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small measured section: a 12 s budget that counts every step (torch import, microbenchmarks, fit)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds the measured section may take, every step included (default 60, --quick 12)",
    )
    p.add_argument("--skip-measure", action="store_true", help="analytic sections only")
    p.add_argument("--target", "--model", dest="target", help="target preset for the plans (default llama-3.1-8b)")
    p.add_argument(
        "--drafter",
        action="append",
        metavar="SPEC",
        help="model:NAME (the draft model) and/or early-exit:L (the self-drafter), in the drafter grammar",
    )
    p.add_argument("--draft", help="same as --drafter model:NAME (default llama-3.2-1b)")
    p.add_argument("--early-exit", type=int, default=None, help="early-exit layer of the self-drafter (default 8)")
    p.add_argument(
        "--alpha", type=float, help="per-token acceptance of the draft model (default: its published figure, named)"
    )
    p.add_argument(
        "--acceptance",
        action="append",
        metavar="KEY=VALUE",
        help="acceptance of the draft model (model=VALUE) or the early exit (early-exit=VALUE), as plan takes it: "
        "0.7, mean:3.2@G, vllm-rate:0.7@K, curve:..., a metrics file (default: the draft model's published figure; "
        "the early exit's 0.5, said to be assumed)",
    )
    p.add_argument(
        "--objective",
        choices=tuple(OBJECTIVES),
        default=DEFAULT_OBJECTIVE,
        help=f"what the serving section judges 'pays' on (default {DEFAULT_OBJECTIVE}: the median request's "
        "end-to-end latency); every objective's verdict is shown",
    )
    p.add_argument("--debug", action="store_true", help="tracebacks of failed sections on the page")
    p.add_argument(
        "--engine",
        type=engine_arg,
        default=DEFAULT_ENGINE,
        help=f"price the answers as this software runs them (default {DEFAULT_ENGINE}: what deployments run; "
        "'none' is the datasheet roofline)",
    )
    from specroof.measure_report import add_measured_flags

    add_measured_flags(p)
    _add_json(p)
    p.set_defaults(func=cmd_report)
