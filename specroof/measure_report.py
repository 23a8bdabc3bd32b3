"""The measured section of ``specroof report``: speculative decoding measured here, and the roofline's prediction.

Kept in ``measure`` (torch) and handed to ``specroof.report.write_report`` as an
extra section, so the analytic report never imports torch. It runs
:func:`measure.spec_check.spec_check` within a time budget: it looks at the device
first (dtype, model size), microbenchmarks it, sweeps verify passes, fits the
roofline, then decodes with and without speculation, every speculative run
bracketed by baseline runs, and shows predicted beside measured.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from specroof.report import MEASURED_BUDGET_S, ReportWriter, Section, esc

if TYPE_CHECKING:  # torch is imported when the section runs, not when report's parser is built
    from measure.spec_check import SpecCheck

#: seconds the measured section may take by default (the page's own figure: the whole page fits 90 s), and with --quick
DEFAULT_BUDGET_S = MEASURED_BUDGET_S
QUICK_BUDGET_S = 12.0
#: seconds of the section's budget kept for what follows the check: this section's figure and tables (about 1.5 s
#: beside a busy core on the project's 2-core CPU: the section's time less the check's)
PAGE_RESERVE_S = 1.5


def _pct(x: float) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.1%}"


#: why a column of the measured table can be blank in every row, said once instead of an empty column
_BLANK_COLUMN_WHY = {
    "rep_spread": "one repetition per point, so no spread between repetitions",
    "probe_spread": "no bracketing baseline runs to compare",
    "flag": "no row above its physical bound",
    "noise": "no row marked noisy",
    "speedup_wall": "no wall-clock baseline",
}


def drop_blank_columns(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``df`` without the columns blank in every row (NaN, None or empty text), and the names dropped.

    A column with nothing in it says nothing: the page names it once, with why, instead
    (:func:`blank_column_words`). An empty frame keeps its columns.
    """
    if df.empty:
        return df, []
    blank = [c for c in df.columns if df[c].map(lambda v: v is None or v != v or str(v).strip() == "").all()]
    return df.drop(columns=blank), blank


def blank_column_words(columns: list[str]) -> str:
    """One sentence naming the columns left out because every row was blank, each with why."""
    parts = [f"{c} ({_BLANK_COLUMN_WHY[c]})" if c in _BLANK_COLUMN_WHY else c for c in columns]
    return "Columns left out, blank in every row: " + "; ".join(parts)


def _graphs_flag(text: str) -> str:
    """``--graphs``'s value, ``on`` refused at parse time without a GPU (report has no --device: the device is the
    one found), in one line and before any section is written."""
    if text not in ("auto", "on", "off"):
        raise argparse.ArgumentTypeError(f"choose from auto, on, off (got {text!r})")
    if text == "on":
        from measure.device import default_device
        from measure.graphs import use_graphs
        from roofline.core.errors import SpecroofError

        try:
            use_graphs(text, default_device())
        except SpecroofError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


class _CompileFlag(argparse.Action):
    """``--compile``, refused at parse time where inductor cannot run on the device found."""

    def __init__(self, option_strings: list[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, *_: Any) -> None:
        from measure.device import default_device
        from measure.graphs import inductor_missing

        missing = inductor_missing(default_device())
        if missing:
            parser.error(f"argument --compile: {missing}")
        setattr(namespace, self.dest, True)


def add_measured_flags(p: argparse.ArgumentParser) -> None:
    """``--graphs auto|on|off`` and ``--compile`` for report's measured section (what ``measure spec`` takes).

    Building the parser imports nothing heavy; ``--graphs on`` without a GPU and ``--compile`` where inductor
    cannot run are refused while the arguments are parsed (one line, exit 2, nothing written).
    """
    p.add_argument(
        "--graphs",
        type=_graphs_flag,
        default="auto",
        metavar="{auto,on,off}",
        help="the measured section's passes as CUDA graphs (auto: on a GPU; off: eager, and the launch overhead "
        "graphs remove is shown)",
    )
    p.add_argument(
        "--compile",
        action=_CompileFlag,
        help="the measured section's layers through torch.compile (inductor) before capture; its compile time is "
        "counted in --budget",
    )


def measured_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments :func:`measurement_section` takes from report's parsed flags."""
    return {"graphs": getattr(args, "graphs", "auto"), "compile": bool(getattr(args, "compile", False))}


def spec_check(*args: Any, **kw: Any) -> SpecCheck:
    """:func:`measure.spec_check.spec_check`, imported when the section runs (torch with it), not with this module."""
    from measure.spec_check import spec_check as run

    return run(*args, **kw)


def measurement_section(
    w: ReportWriter,
    quick: bool = False,
    *,
    budget_s: float | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    graphs: str = "auto",
    compile: bool = False,
) -> Section:
    """Measure this device within ``budget_s`` seconds, fit the roofline to it and show predicted against measured.

    The budget counts from the start of the section (``w.section_started``: before torch was imported) and
    covers every step of the check, the fixed ones included (capturing CUDA graphs and compiling too).
    ``graphs`` and ``compile``: as ``measure spec --graphs/--compile`` (:func:`measure.spec_check.spec_check`).
    """
    from measure.budget import Budget
    from measure.device import default_device, describe

    budget = budget_s if budget_s is not None else (QUICK_BUDGET_S if quick else DEFAULT_BUDGET_S)
    start = getattr(w, "section_started", None)
    check_s = max(1.0, budget - PAGE_RESERVE_S)  # the check's share: the page's figure comes after it
    # refusals inside the check name the page's --budget, not the check's share of it
    bud = Budget(check_s, stated_s=budget) if start is None else Budget(check_s, start=start, stated_s=budget)
    dev = default_device()
    info = describe(dev)
    check = spec_check(
        w.out / "measure",
        budget_s=bud,
        device=dev,
        tokens=16 if quick else 32,
        progress=progress,
        log=log,
        graphs=graphs,
        compile=compile,
    )
    body = _time_part(check, budget, quick)
    body += _device_part(w, check, info)
    body += _sweep_part(w, check)
    body += _speculation_part(w, check)
    s = check.summary
    return Section(
        f"Measured on this device: {info['name']}",
        body,
        ["measure/validation.csv", "measure/speedup.csv"],
        {
            "measurement": {
                "device": info["name"],
                "dtype": check.choice.dtype if check.choice else None,
                "apriori_mape": s["apriori_mape"],
                "fit_mape": check.fitted.mape,
                "points": s["points"],
                "crossover": s["crossover"],
                "noise": check.noise,
                "seconds": s["payload"]["seconds"],
                "speedup_rows": len(check.speedups),
                "flagged_rows": int((check.speedups.get("flag", pd.Series(dtype=str)) != "").sum()),
                "best_measured": _best(check.speedups, "speedup_measured"),
                "best_predicted": _best(check.speedups, "speedup_predicted"),
                # the best gammas in words, or why none could be measured (never an empty figure)
                "best_measured_text": best_measured_text(check.speedups),
                "passes": s["payload"].get("passes", "eager"),
                "runner": s["payload"].get("runner", {}),
                "launch_overhead": s["payload"].get("launch_overhead"),
                "host_fit": s["payload"].get("host_fit", {}),
            }
        },
    )


def best_measured_text(df: pd.DataFrame) -> str:
    """The gamma measured best per drafter and batch, as a line of words; where no row could stand as a measured
    result, why (no run finished, every row was noise, or none was above its physical bound)."""
    best = _best(df, "speedup_measured")
    if best:
        return ", ".join(
            f"{b['drafter']} batch {b['batch']}: {b['gamma']} ({b['speedup_measured']:.2f}x)" for b in best
        )
    if df.empty:
        return "none: no speculative run finished within the budget"
    noisy = int(df["noisy"].astype(bool).sum()) if "noisy" in df else 0
    flagged = int((df["flag"].astype(str) != "").sum()) if "flag" in df else 0
    why = []
    if flagged:
        why.append(f"{flagged} row(s) above their physical bound")
    if noisy:
        why.append(f"{noisy} of {len(df)} row(s) noisy (baselines or repetitions disagreed by more than the error)")
    return (
        "not measured: "
        + ("; ".join(why) if why else "no row kept a measured speedup")
        + ("; rerun with a longer --budget on a quieter machine")
    )


def _best(df: pd.DataFrame, col: str) -> list[dict[str, Any]]:
    """Per (drafter, batch): the gamma with the highest ``col``."""
    if df.empty:
        return []
    ok = df[df["flag"] == ""] if "flag" in df else df
    if "noisy" in ok:  # a row whose bracketing baselines disagree by more than its error is noise, not a result
        ok = ok[~ok["noisy"].astype(bool)]
    ok = ok[ok[col].notna()]  # a speedup above its round's physical bound is not reported as measured
    if ok.empty:
        return []
    idx = ok.groupby(["drafter", "batch"])[col].idxmax()
    return [
        {"drafter": r["drafter"], "batch": int(r["batch"]), "gamma": int(r["gamma"]), col: float(r[col])}
        for _, r in ok.loc[idx].iterrows()
    ]


#: the steps of a check as the page names them (keys of the payload's ``steps_s``)
STEP_WORDS = {
    "before_check": "loading torch and the harness",
    "setup": "probing the device, loading the pair, timing the decode paths",
    "microbenchmarks": "microbenchmarks",
    "decoding_runs": "decoding runs and the verify sweeps between them",
    "launch_overhead": "a few passes timed eager and as CUDA graphs",
    "fit_and_predict": "fits, validation and predictions",
}


def _passes_part(pay: dict[str, Any]) -> str:
    """How the passes ran (eager, CUDA graphs, compiled), what capturing and compiling cost, the host's share of a
    round, and, eager on a GPU, the launch overhead graphs would remove."""
    passes = pay.get("passes", "eager")
    words = {
        "eager": "eagerly, one kernel launch at a time from Python",
        "graphs": "as CUDA graphs (one per shape, replayed; timed by CUDA events)",
        "graphs+compile": "as CUDA graphs of torch.compile'd layers (inductor's fused kernels, replayed)",
        "static+compile": "with static shapes through torch.compile'd layers",
    }
    runner = pay.get("runner") or {}
    cost = ""
    if runner.get("captures"):
        cost = f" ({int(runner['captures'])} graphs captured in {runner['capture_s']:.1f} s"
        cost += f", layers compiled in {runner['compile_s']:.1f} s" if runner.get("compile_s") else ""
        cost += ", inside the budget)"
    body = f"<p>Passes ran {esc(words.get(passes, passes))}{esc(cost)}.</p>"
    host = pay.get("host_fit") or {}
    if host:
        body += (
            f"<p>The host's time (acceptance, commit, scheduling: a round's wall time less its passes' device time) "
            f"fitted against the batch: {1e6 * host['round_s']:.0f} us + {1e6 * host['round_per_seq_s']:.1f} us "
            "per sequence per round"
            + (
                f", {1e6 * host['step_s']:.0f} us + {1e6 * host['step_per_seq_s']:.1f} us per sequence per baseline "
                "step"
                if "step_s" in host
                else ""
            )
            + (
                f"; the host's share of a round was {_pct(host['round_share_median'])} (median over the rows)"
                if "round_share_median" in host
                else ""
            )
            + ". The predictions price it beside the fitted passes.</p>"
        )
    launch = pay.get("launch_overhead")
    if launch:
        parts = ", ".join(
            f"batch {r['batch']} x {r['new_tokens']} tokens: {1e3 * r['launch_overhead_s']:.2f} ms "
            f"({1e3 * r['t_uncaptured_s']:.2f} uncaptured, {1e3 * r['t_graph_s']:.2f} as a graph)"
            for r in launch
        )
        body += f"<p>What CUDA graphs remove here (the same static pass uncaptured minus replayed, per pass of the target): {esc(parts)}.</p>"
    return body


def _time_part(check: SpecCheck, budget: float, quick: bool) -> str:
    """Where this section's budget went, step by step, and what --quick leaves out (so a short page says so)."""
    pay = check.summary["payload"]
    steps = pay.get("steps_s", {})
    spent = ", ".join(f"{STEP_WORDS.get(k, k)} {v:.1f} s" for k, v in steps.items())
    reps = int(check.speedups["repetitions"].max()) if "repetitions" in check.speedups and len(check.speedups) else 0
    body = (
        f"<p>Time: the check took {pay['seconds']:.0f} s of this section's {budget:.0f} s budget, which counts every "
        f"step ({spent}) and keeps {PAGE_RESERVE_S:g} s for this page's figure and tables; "
        f"the plan fitted batch {check.plan['batches']} and gamma {check.plan['gammas']}, {reps} repetition(s)"
        + (
            "; left out for the budget: "
            + "; ".join(f"{esc(k)} ({esc(v)})" for k, v in (pay.get("dropped") or {}).items())
            if pay.get("dropped")
            else ""
        )
        + ".</p>"
    )
    if pay["seconds"] > budget - PAGE_RESERVE_S + 0.5:
        body += (
            "<p class='note'>Over budget: on this machine now, the fixed steps and the least a result needs (three "
            "points of each verify sweep, a baseline probe and one configuration, which always run) took longer than "
            "the budget allows; the load average was "
            f"{pay.get('load', {}).get('load_avg_1m', float('nan')):.1f} on {pay.get('load', {}).get('cpus', '?')} "
            "cores at the end.</p>"
        )
    short = pay.get("microbench_set") == "short"
    if quick or short:
        left = (["16 new tokens per sequence (32 on the full page)"] if quick else []) + (
            [
                "the short microbenchmark set (fewer repetitions, and no overlap benchmark: the a-priori column "
                "assumes compute fully hides weight streaming, the roofline's own assumption, so it is further off "
                "than the full page's on a CPU, where the two add; the fit measures the overlap)"
            ]
            if short
            else []
        )
        body += (
            f"<p class='note'>{'--quick' if quick else 'A short budget'}: "
            + "; ".join(left)
            + "; and the largest plan "
            "that fits the budget, so fewer gammas and batches are measured than on the full page "
            "(<code>specroof report</code>, or <code>--budget</code> for a longer look).</p>"
        )
    return body + _passes_part(pay)


def _device_part(w: ReportWriter, check: SpecCheck, info: dict[str, Any]) -> str:
    ap = check.apriori
    m = ap.measured
    isa = ", ".join(info.get("isa", [])) or "n/a"
    rows = pd.DataFrame(
        [
            {
                "device": info["name"],
                "isa": isa if info["kind"] == "cpu" else info.get("kind"),
                "torch": info["torch_version"],
                "dtype_measured": check.choice.dtype if check.choice else "",
                "weight_streaming_GB_per_s": ap.bandwidth() / 1e9,
                "copy_GB_per_s": m.provenance.get("copy_bandwidth_GB_per_s") if m else None,
                "matmul_TFLOP_per_s": ", ".join(f"{d} {v / 1e12:.3f}" for d, v in m.peak_flop_per_s.items())
                if m
                else "",
                "overlap": round(float(ap.overlap), 2),
                "dispatch_us": ap.pass_overhead_s * 1e6,
            }
        ]
    )
    body = "<h3>What was measured, and why</h3>"
    if check.choice is not None:
        body += f"<p>{esc(check.choice.describe())} {esc(check.decode_path)}</p>"
    body += (
        "<p>The microbenchmarks below are the a-priori profile: the rate at which a one-row matrix product streams "
        "weights (the memory ceiling a decode step meets), the best matrix-product rate, the cost of one tiny "
        "operation (dispatch) and how much memory traffic hides under arithmetic (overlap: 1 as on a GPU, 0 when "
        "the two times add).</p>"
    )
    return body + w.table(rows, "device", floatfmt="{:.3g}")


def _sweep_part(w: ReportWriter, check: SpecCheck) -> str:
    s = check.summary
    spec_name = check.sweep["model"].iloc[0] if "model" in check.sweep and len(check.sweep) else "the target"
    body = (
        f"<h3>Verify passes: measured against the roofline</h3><p>{s['points']} verify passes of {esc(str(spec_name))} "
        "(batch x new tokens x context), each point's fastest time over its visits. Mean absolute percentage error "
        f"of the predicted pass time: a-priori (microbenchmark ceilings only) {_pct(s['apriori_mape'])}, after "
        f"fitting the profile to these passes {_pct(check.fitted.mape)}.</p>"
    )
    by_rows = s.get("fit_residuals_by_rows") or []
    if len(by_rows) > 1:
        parts = ", ".join(f"{r['rows']}: {r['err_mean']:+.0%} ({r['points']} points)" for r in by_rows)
        body += (
            "<p>The fit's mean signed error by the rows of a pass (batch x new tokens; the harness runs one kernel "
            f"per range, and the fit gives each range with points its own streaming rate but one FLOP rate to all "
            f"of them): {parts}. Noise spreads errors of both signs within every range; a range whose mean is far "
            "from zero while the others' are near it is a kernel the fitted rates miss (above 0: the fit prices "
            "those passes high).</p>"
        )
    fp = check.fitted.params
    ranged = [(k.rsplit("_rows_", 1)[1], v) for k, v in fp.items() if k.startswith("bandwidth_bytes_per_s_rows_")]
    if ranged:
        rates = ", ".join(f"{rows} rows {v / 1e9:.1f} GB/s" for rows, v in ranged)
        body += (
            f"<p>Fitted weight-streaming rates by the rows of a pass: 1 row "
            f"{fp.get('gemv_bandwidth_bytes_per_s', fp['bandwidth_bytes_per_s']) / 1e9:.1f} GB/s, {rates}, wider "
            f"{fp['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s (each range's kernel, as the harness picks it).</p>"
        )
    if "gemv_bandwidth_bytes_per_s" in fp and fp["gemv_bandwidth_bytes_per_s"] < 0.9 * fp["bandwidth_bytes_per_s"]:
        body += (
            f"<p>On this device a one-token pass streams weights at {fp['gemv_bandwidth_bytes_per_s'] / 1e9:.0f} GB/s, "
            f"slower than a pass of several tokens ({fp['bandwidth_bytes_per_s'] / 1e9:.0f} GB/s): its matrix-vector "
            "kernels are less efficient than its matrix products. A verify pass of a few tokens can then cost less "
            "than one decode step, and a speedup can exceed the mean accepted length; the fitted roofline models "
            "both rates.</p>"
        )
    if check.fitted.warning:
        body += f"<p class='note'>{esc(check.fitted.warning)}</p>"
    from roofline.plot import fit_overlay

    body += w.figure(
        fit_overlay(check.validation),
        "measured_vs_predicted",
        "Verify pass time against new tokens: measured (dots), a-priori roofline (dashed), fitted (solid)",
    )
    if s["crossover"]:
        df = pd.DataFrame(s["crossover"])
        shown = df[["batch", "context"]].copy()
        for side in ("measured", "predicted"):
            shown[f"crossover_{side}"] = [crossover_words(r, side) for r in s["crossover"]]
        body += (
            "<p>Crossover K read off the measured curve and off the fitted model's: memory time over compute time "
            "per token, from the roofline's shape fitted to each (batch, context) curve. A curve that stays flat, or "
            "whose K would lie far past the widest pass swept, does not place K: the table says why instead of a "
            "figure.</p>"
        )
        body += w.table(shown, "crossover_measured", floatfmt="{:.3g}")
    return body


def crossover_words(row: dict[str, Any], side: str = "measured") -> str:
    """A crossover K of the validation summary as the page shows it: the figure where it was measured, else why
    not (:func:`measure.fit.crossover_status`)."""
    k = float(row[f"crossover_{side}"])
    widest = int(row.get("widest_swept", 0) or 0)
    status = row.get(f"crossover_{side}_status", "measured")
    if status == "measured":
        return f"{k:.3g}"
    if status == "extrapolated":
        return f"{k:.3g} (past the widest pass swept, {widest}: read off the line's slope)"
    curve = "measured passes" if side == "measured" else "fitted model's passes"
    if status == "flat":
        return (
            f"not measured: the {curve} stayed within 10% of the narrowest up to {widest} new tokens (a pass that "
            "costs the host's time costs the same at every width)"
        )
    return (
        f"not measured: above {widest} new tokens, the widest pass swept; the {curve} barely rose, and "
        f"reading K off them would put it at {k:.3g}, more than 4x past the sweep"
    )


def _speculation_part(w: ReportWriter, check: SpecCheck) -> str:
    df = check.speedups
    pair = check.pair
    body = "<h3>Speculative decoding on this device: measured and predicted</h3>"
    if pair:
        held = pair["held_out"]
        body += (
            f"<p>The offline pair: a byte-level target ({esc(pair['target'])}, {pair['target_params'] / 1e9:.2f}e9 "
            f"weights) and a one-layer distilled draft, trained on the Python standard library's source; held-out "
            f"cross-entropy {held['target']:.2f} (target), {held['draft']:.2f} (draft), {held['early_exit']:.2f} "
            "(early exit) nats/byte. Greedy decoding of held-out text.</p>"
        )
    if df.empty:
        return body + "<p>No speculative run finished within the budget.</p>"
    from measure.spec_check import ERROR_LIMIT

    noise = check.noise
    body += (
        "<p><code>speedup_measured</code> compares the quiet machine with the quiet machine (10th percentile of "
        "round and step times); <code>speedup_wall</code> is wall-clock against the two baseline runs that "
        "bracket each speculative run; <code>speedup_predicted</code> is the roofline with the fitted profile and "
        "the acceptance measured in the same rounds. "
        f"The bracketing baseline runs disagreed by {_pct(noise.get('probe_spread_median'))} (median) and "
        f"{_pct(noise.get('probe_spread_max'))} (worst): the machine's noise during this run"
        + (
            f"; the repetitions' own measured speedups disagreed by {_pct(noise.get('rep_spread_median'))} "
            f"(median) and {_pct(noise.get('rep_spread_max'))} (worst), which also catches a change in arithmetic "
            "speed that the memory-bound baselines do not feel"
            if noise.get("rep_spread_median") is not None
            else ""
        )
        + (
            f"; the verify sweep's reference pass (its cheapest point, timed before every block) ranged "
            f"{_pct(noise.get('sweep_drift'))} from its fastest visit to its slowest, and every point was "
            "re-timed whenever that pass got faster"
            if noise.get("sweep_drift") is not None
            else ""
        )
        + ". A row whose speedup "
        "exceeds tokens per round x step time / verify time, which no round can beat, is flagged as noise and its "
        "measured speedup left blank; a row whose baselines or repetitions disagreed by more than its error, or whose error "
        f"exceeds {ERROR_LIMIT:.0%} while the machine was noisy, is marked in the noise column (with why) and left out of the "
        "best-gamma table below.</p>"
    )
    cols = [
        "drafter",
        "batch",
        "gamma",
        "acceptance_rate",
        "mean_acceptance_length",
        "speedup_measured",
        "speedup_predicted",
        "rel_error",
        "speedup_wall",
        "repetitions",
        "probe_spread",
        "rep_spread",
        "flag",
        "noise",
    ]
    shown, dropped = drop_blank_columns(df[[c for c in cols if c in df]])
    if dropped:
        body += f"<p>{esc(blank_column_words(dropped))}.</p>"
    body += w.table(shown, "speculative_run", floatfmt="{:.3g}")  # (a NaN left in a kept column shows blank)
    best_m = {(b["drafter"], b["batch"]): b for b in _best(df, "speedup_measured")}
    best_p = {(b["drafter"], b["batch"]): b for b in _best(df, "speedup_predicted")}
    rows = [
        {
            "drafter": k[0],
            "batch": k[1],
            "best_gamma_measured": v["gamma"],
            "speedup_measured": v["speedup_measured"],
            "best_gamma_predicted": best_p[k]["gamma"] if k in best_p else None,
            "speedup_predicted": best_p[k]["speedup_predicted"] if k in best_p else None,
        }
        for k, v in best_m.items()
    ]
    if rows:
        body += "<p>The gamma this device should use, measured and as the roofline predicted it:</p>"
        body += w.table(pd.DataFrame(rows), "best_gamma_measured", floatfmt="{:.3g}")
    else:
        body += f"<p>The gamma this device should use, measured: {esc(best_measured_text(df))}.</p>"
    curves = df.groupby(["drafter", "batch"]).apply(lambda g: g.loc[g["gamma"].idxmax(), "curve"], include_groups=False)
    curve_rows = [
        {"drafter": d, "batch": b, **{f"a_{i + 1}": v for i, v in enumerate(c)}} for (d, b), c in curves.items()
    ]
    body += "<p>Measured acceptance per position (P(position i accepted | i - 1 accepted)), at the longest gamma:</p>"
    body += w.table(pd.DataFrame(curve_rows), "acceptance_curve", floatfmt="{:.2f}")  # (NaN shows blank)
    return body
