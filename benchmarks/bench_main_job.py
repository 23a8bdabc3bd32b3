"""How long the main job takes here, on an idle machine and with another process keeping one core busy.

Times the commands a user runs (``specroof report``, ``--quick``, ``measure spec``),
each once idle and once beside a CPU hog, from a fresh output folder, and records
the wall-clock seconds (and whether the page came out complete) in BENCHMARKS.md.
``--ci`` times ``bash .ci/run`` both ways instead, into its own section.

    python -m benchmarks.bench_main_job [--ci]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.record import record

ROOT = Path(__file__).resolve().parents[1]


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ci", action="store_true", help="time bash .ci/run instead (about 15 minutes for both loads)")
    args = ap.parse_args()
    exe = [sys.executable, "-m", "specroof.cli"]
    rows = []
    work = Path(tempfile.mkdtemp(prefix="specroof-bench-"))
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
    body = (
        "Wall-clock seconds of the commands a user runs, from a fresh output folder, on an idle machine and with "
        "another process busy-looping on one of the two cores (`python -c 'while True: pass'`). Budgets: "
        "report 100 s for its measured section, --quick 12 s, measure spec 300 s.\n\n"
        "| command | load | seconds | exit | what it wrote |\n|---|---|---|---|---|\n"
        + "\n".join(f"| `{c}` | {load} | {s:.0f} | {rc} | {d} |" for c, load, s, rc, d in rows)
    )
    name = "CI: bash .ci/run, idle and loaded" if args.ci else "main job: wall-clock time, idle and loaded"
    record(name, body, "python -m benchmarks.bench_main_job" + (" --ci" if args.ci else ""))


if __name__ == "__main__":
    main()
