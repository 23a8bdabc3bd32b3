"""Where the analytic page's time goes: each section of ``specroof report --skip-measure``, its figures apart, and
the functions that cost the most (issue #27 item 2: the page's analytic part is what the measured budget is left).

Runs the page's sections in this process, first untouched (wall seconds per section, and of that the seconds spent
drawing and writing figures), then under cProfile (the functions of roofline/ and specroof/ with the most
cumulative time, and the call counts of the pricing functions). ``--hog`` runs everything beside a process that
busy-loops on one core, as the main-job benchmark's loaded rows do.

    python -m benchmarks.bench_report_profile [--hog] [--no-record]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.record import record

#: the functions whose call counts the profile reports (how many passes the page prices, and how)
COUNTED = ("pass_seconds", "pass_time", "forward_cost", "round_time", "simulate_policy", "save_png")


def _forget() -> None:
    """Drop what an earlier page in this process left cached (the heuristic schedule's solution, built trees)."""
    from roofline import predict, tree_sizing

    predict._heuristic_mix.cache_clear()
    tree_sizing._TREES.clear()


def timed_run(out: Path) -> tuple[list[tuple[str, float, float]], float]:
    """(section, wall seconds, figure seconds) per section, and the total, of one page written to ``out``."""
    import specroof.report as report

    _forget()

    figure_s = {"s": 0.0}
    save = report.save_png

    def save_timed(fig: Any, path: Path, dpi: float) -> None:
        t0 = time.perf_counter()
        save(fig, path, dpi)
        figure_s["s"] += time.perf_counter() - t0

    rows: list[tuple[str, float, float]] = []
    mark = {"t": time.perf_counter(), "fig": 0.0}

    def on_section(sec: Any) -> None:
        now = time.perf_counter()
        rows.append((sec.title, now - mark["t"], figure_s["s"] - mark["fig"]))
        mark["t"], mark["fig"] = now, figure_s["s"]

    report.save_png = save_timed  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        mark["t"] = t0
        report.write_report(out, pairing=dict(report.DEFAULT_PAIRING), on_section=on_section)
        total = time.perf_counter() - t0
    finally:
        report.save_png = save  # type: ignore[assignment]
    return rows, total


def profiled_run(out: Path) -> tuple[list[tuple[str, float]], dict[str, int], float]:
    """The ten functions of roofline/ and specroof/ with the most cumulative time, call counts, and the total."""
    import specroof.report as report

    _forget()
    prof = cProfile.Profile()
    prof.enable()
    report.write_report(out, pairing=dict(report.DEFAULT_PAIRING))
    prof.disable()
    stats = pstats.Stats(prof)
    entries = stats.stats  # type: ignore[attr-defined]
    total = max(ct for (_, _, _), (_, _, _, ct, _) in entries.items())
    ours = []
    counts: dict[str, int] = {}
    for (path, _line, name), (_cc, nc, _tt, ct, _) in entries.items():
        if name in COUNTED and ("roofline" in path or "specroof" in path):
            counts[name] = counts.get(name, 0) + nc
        if ("/roofline/" in path or "/specroof/" in path) and name not in ("write_report", "<lambda>"):
            ours.append((f"{Path(path).parent.name}/{Path(path).name}:{name}", ct))
    ours.sort(key=lambda r: -r[1])
    return ours[:10], counts, total


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hog", action="store_true", help="keep one core busy with another process meanwhile")
    ap.add_argument("--no-record", action="store_true", help="print, do not write BENCHMARKS.md")
    args = ap.parse_args(argv)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    load0 = os.getloadavg()
    try:
        t0 = time.perf_counter()
        import specroof.report  # noqa: F401  (imports counted apart: numpy, pandas, matplotlib)

        import_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            rows, total = timed_run(Path(tmp) / "timed")
            top, counts, prof_total = profiled_run(Path(tmp) / "profiled")
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    load1 = os.getloadavg()
    fig_total = sum(f for _, _, f in rows)
    lines = [
        "The analytic sections of `specroof report` (the default GPUs and pairing, `serving` engine), written in one "
        f"process{' beside a process busy-looping on one core' if args.hog else ''}. Load average "
        f"{load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} (1/5/15 min) at the start, "
        f"{load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} at the end.",
        "",
        f"Imports (numpy, pandas, matplotlib, roofline): {import_s:.2f} s. Page: {total:.2f} s, of which figures "
        f"(one Agg draw each, PNG written) {fig_total:.2f} s.",
        "",
        "| section | seconds | of which figures |",
        "|---|---|---|",
        *(f"| {title} | {s:.2f} | {f:.2f} |" for title, s, f in rows),
        "",
        f"Under cProfile ({prof_total:.1f} s; the profiler slows Python code most): calls "
        + ", ".join(f"`{k}` {counts.get(k, 0):,}" for k in COUNTED)
        + ". The functions of roofline/ and specroof/ with the most cumulative time:",
        "",
        "| function | cumulative s (profiled) |",
        "|---|---|",
        *(f"| `{name}` | {ct:.2f} |" for name, ct in top),
    ]
    text = "\n".join(lines)
    if args.no_record:
        print(text)
    else:
        name = "report profile (analytic sections)" + (", one core busy" if args.hog else "")
        record(name, text, "python -m benchmarks.bench_report_profile" + (" --hog" if args.hog else ""))


if __name__ == "__main__":
    main()
