"""Results on disk: a tidy CSV appended row by row plus a JSON sidecar with provenance.

A crash or Ctrl-C loses at most the point in flight; ``done()`` tells a resumed
sweep which points are already saved.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

RESULTS = "results.csv"
META = "meta.json"


def git_revision(path: str | Path = ".") -> str | None:
    """The git commit of the code that produced the results (None outside a repository)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


class SweepStore:
    """``out_dir/results.csv`` (one row per measured point) and ``out_dir/meta.json``."""

    def __init__(self, out_dir: str | Path, key: Iterable[str]) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = tuple(key)
        self.path = self.dir / RESULTS

    def write_meta(self, meta: dict[str, Any]) -> None:
        """Write (or extend) the JSON sidecar; earlier runs' entries are kept under ``runs``."""
        path = self.dir / META
        old: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        runs = old.get("runs", [])
        runs.append(
            {**meta, "started": _dt.datetime.now().isoformat(timespec="seconds"), "git_revision": git_revision()}
        )
        path.write_text(json.dumps({**old, **meta, "runs": runs}, indent=2, default=str))

    def clear(self) -> None:
        """Start a new results file (the JSON sidecar keeps its history of runs)."""
        if self.path.exists():
            self.path.unlink()

    def read(self) -> pd.DataFrame:
        """Every saved row (an empty frame when nothing was saved yet)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return pd.DataFrame()
        return pd.read_csv(self.path)

    def done(self) -> set[tuple[str, ...]]:
        """Keys of the points already saved (as strings, so types read back from CSV compare equal)."""
        df = self.read()
        if df.empty:
            return set()
        return {tuple(str(v) for v in row) for row in df[list(self.key)].itertuples(index=False)}

    def key_of(self, row: dict[str, Any]) -> tuple[str, ...]:
        return tuple(str(row[k]) for k in self.key)

    def append(self, row: dict[str, Any]) -> None:
        """Append one row and flush it to disk before returning."""
        new = not self.path.exists() or self.path.stat().st_size == 0
        header = list(row) if new else list(pd.read_csv(self.path, nrows=0).columns)
        with self.path.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow(row)
            f.flush()
