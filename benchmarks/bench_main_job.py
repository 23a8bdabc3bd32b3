"""How long the main job takes here, on an idle machine and with another process keeping one core busy.

Times the commands a user runs (``specroof report``, ``--quick``, ``measure spec``),
each once idle and once beside a CPU hog, from a fresh output folder, and records
the wall-clock seconds (and whether the page came out complete) in BENCHMARKS.md.
``--ci`` times ``bash .ci/run`` both ways instead, into its own section.

    python -m benchmarks.bench_main_job [--ci | --reports]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.record import BENCHMARKS_MD, record

ROOT = Path(__file__).resolve().parents[1]
SECTION = "main job: wall-clock time, idle and loaded"


def _run(cmd: list[str], hog: bool, cwd: Path, log: Path) -> tuple[float, int]:
    """Wall seconds and exit code of ``cmd`` (its output in ``log``), with a busy-looping process beside it when ``hog``."""
    hog_proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if hog else None
    try:
        t0 = time.perf_counter()
        with log.open("w") as f:
            rc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode
        if rc != 0:  # a failed run is a finding: show why
            print(f"exit {rc}; the end of its output:\n" + log.read_text()[-3000:], file=sys.stderr)
        return time.perf_counter() - t0, rc
    finally:
        if hog_proc is not None:
            hog_proc.kill()
            hog_proc.wait()


def _earlier_rows(rerun: set[str]) -> list[str]:
    """The section's rows of commands not run this time, each marked with the date of the run that measured them."""
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else ""
    m = re.search(rf"<!-- bench:{re.escape(SECTION)} -->(.*?)<!-- /bench:{re.escape(SECTION)} -->", text, re.S)
    if not m:
        return []
    date = re.search(r"Date: (\S+)", m.group(1))
    rows = []
    for line in m.group(1).splitlines():
        cmd = re.match(r"\| `([^`]+)` \|", line)
        if cmd and cmd.group(1) not in rerun:
            rows.append(
                line if "(run of " in line else line.rstrip(" |") + f" (run of {date.group(1) if date else '?'}) |"
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ci", action="store_true", help="time bash .ci/run instead (about 15 minutes for both loads)")
    ap.add_argument(
        "--reports",
        action="store_true",
        help="time the two report commands only; the section keeps its other rows, marked with the date they ran",
    )
    args = ap.parse_args()
    exe = [sys.executable, "-m", "specroof.cli"]
    rows = []
    work = Path(tempfile.mkdtemp(prefix="specroof-bench-"))
    load0 = os.getloadavg()
    try:
        jobs = [
            ("specroof report", [*exe, "report", "--out", "{out}"], "report"),
            ("specroof report --quick", [*exe, "report", "--quick", "--out", "{out}"], "report"),
            (
                "specroof measure spec --pair offline --early-exit 1",
                [*exe, "measure", "spec", "--pair", "offline", "--early-exit", "1", "--out", "{out}", "--json"],
                "spec",
            ),
        ]
        if args.ci:  # CI alone, in its own section
            jobs = [("bash .ci/run", ["bash", str(ROOT / ".ci" / "run")], "ci")]
        elif args.reports:
            jobs = [j for j in jobs if j[2] == "report"]
        for label, cmd, kind in jobs:
            for hog in (False, True):
                out = work / f"{kind}-{int(hog)}"
                log = work / f"{kind}-{int(hog)}.log"
                seconds, rc = _run([c.replace("{out}", str(out)) for c in cmd], hog, ROOT, log)
                detail = ""
                if kind == "report" and (out / "summary.json").exists():
                    s = json.loads((out / "summary.json").read_text())
                    m = s.get("measurement", {})
                    detail = f"{len(s['sections'])} sections, {len(s['failed'])} failed; measured in {m.get('dtype')}"
                elif kind == "spec" and (out / "summary.json").exists():
                    s = json.loads((out / "summary.json").read_text())
                    sp = s["speedup"]
                    detail = (
                        f"{len(sp)} speedup rows, largest error {s['speedup_error_max']:.0%}, "
                        f"probe spread {s['noise'].get('probe_spread_median', float('nan')):.1%} median"
                    )
                rows.append((label, "one core busy" if hog else "idle", seconds, rc, detail))
                print(rows[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kept = _earlier_rows({label for label, *_ in jobs}) if args.reports else []
    body = (
        'Wall-clock seconds of the commands a user runs, from a fresh output folder, alone ("idle") and with '
        "another process busy-looping on one of the two cores (`python -c 'while True: pass'`). The host is shared: "
        f"the load average was {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} (1/5/15 min) at the start, so "
        '"idle" means no busy loop of ours, not an idle machine. Budgets: '
        "report 60 s for its measured section (it was 100 s before 2026-12-01), --quick 12 s, measure spec 300 s.\n\n"
        "| command | load | seconds | exit | what it wrote |\n|---|---|---|---|---|\n"
        + "\n".join(f"| `{c}` | {load} | {s:.0f} | {rc} | {d} |" for c, load, s, rc, d in rows)
        + "".join("\n" + r for r in kept)
    )
    load = os.getloadavg()
    body += f"\n\nLoad average at the end: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (1, 5, 15 min)."
    name = "CI: bash .ci/run, idle and loaded" if args.ci else SECTION
    record(
        name,
        body,
        "python -m benchmarks.bench_main_job" + (" --ci" if args.ci else " --reports" if args.reports else ""),
    )


if __name__ == "__main__":
    main()
