"""Where the analytic page's time goes: each section of ``specroof report --skip-measure``, its figures apart, and
the functions that cost the most (issue #27 item 2: the page's analytic part is what the measured budget is left).

Runs the page's sections in this process, first untouched (wall seconds per section, and of that the seconds spent
drawing and writing figures), then under cProfile (the functions of roofline/ and specroof/ with the most
cumulative time, and the call counts of the pricing functions). ``--hog`` runs everything beside a process that
busy-loops on one core, as the main-job benchmark's loaded rows do. ``--pages`` also times the whole commands,
``specroof report --quick`` and ``specroof report`` (measured section included), each in a fresh process and
folder: wall seconds, seconds per section, and where the measured section's budget went step by step.

    python -m benchmarks.bench_report_profile [--hog] [--pages] [--no-record]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import re
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


#: the whole commands as the main-job benchmark timed them before the measured budget counted its fixed steps
#: (BENCHMARKS.md, "main job: wall-clock time, idle and loaded", 2026-12-01, seconds): the targets are 30 s for
#: --quick and 90 s for the default page with one core busy
BEFORE_S = {("--quick", "idle"): 32, ("--quick", "one core busy"): 57, ("", "idle"): 55, ("", "one core busy"): 82}

_SECTION_LINE = re.compile(r"^\[(\d+)/(\d+)\] (.*): (done|FAILED.*) \((\d+) s\)$")


def page_run(quick: bool, out: Path) -> dict[str, Any]:
    """``specroof report [--quick]`` in a fresh process: wall seconds, (section, seconds) and the measured steps."""
    cmd = [sys.executable, "-m", "specroof", "report", "--out", str(out), *(["--quick"] if quick else [])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    sections, last = [], 0
    for line in proc.stderr.splitlines() + proc.stdout.splitlines():
        m = _SECTION_LINE.match(line.strip())
        if m:
            at = int(m.group(5))
            sections.append((m.group(3), at - last, m.group(4) == "done"))
            last = at
    summary = out / "measure" / "summary.json"
    pay = json.loads(summary.read_text()) if summary.is_file() else {}
    return {"wall_s": wall, "exit": proc.returncode, "sections": sections, "measured": pay}


def pages_text(runs: dict[str, dict[str, Any]], load: str) -> list[str]:
    """The markdown of the whole-command rows: before, after, and the measured section's steps."""
    lines = [
        "",
        f"The whole commands, each in a fresh process and output folder, {load}: wall seconds now against the main-job "
        "benchmark's figures of 2026-12-01 (before the measured section's budget counted its fixed steps: torch's "
        "import, the device probe, the microbenchmarks, the fits).",
        "",
        "| command | before (idle / one core busy) | now | exit | measured section: budget, spent, steps |",
        "|---|---|---|---|---|",
    ]
    for flag, r in runs.items():
        pay = r["measured"]
        steps = ", ".join(f"{k} {v:.1f}" for k, v in pay.get("steps_s", {}).items())
        budget = "12" if flag else "60"
        spent = f"{pay['seconds']:.1f} s" if "seconds" in pay else "not run"
        lines.append(
            f"| `{f'specroof report {flag}'.strip()}` | {BEFORE_S[(flag, 'idle')]} / {BEFORE_S[(flag, 'one core busy')]} s "
            f"| {r['wall_s']:.1f} s | {r['exit']} | {budget} s, {spent} ({steps}; microbenchmarks: "
            f"{pay.get('microbench_set', 'n/a')}) |"
        )
    for flag, r in runs.items():
        lines += [
            "",
            f"`{f'specroof report {flag}'.strip()}`: seconds per section (the CLI's whole-second marks): "
            + ", ".join(f"{t} {s}" + ("" if ok else " FAILED") for t, s, ok in r["sections"])
            + ".",
        ]
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hog", action="store_true", help="keep one core busy with another process meanwhile")
    ap.add_argument("--no-record", action="store_true", help="print, do not write BENCHMARKS.md")
    ap.add_argument("--pages", action="store_true", help="also time `specroof report --quick` and `specroof report`")
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
            pages = {f: page_run(bool(f), Path(tmp) / f"page{f}") for f in ("--quick", "")} if args.pages else {}
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
    if pages:
        lines += pages_text(pages, "beside a process busy-looping on one core" if args.hog else "no busy loop of ours")
    text = "\n".join(lines)
    if args.no_record:
        print(text)
    else:
        name = "report profile (analytic sections)" + (", one core busy" if args.hog else "")
        flags = (" --hog" if args.hog else "") + (" --pages" if args.pages else "")
        record(name, text, "python -m benchmarks.bench_report_profile" + flags)


if __name__ == "__main__":
    main()
