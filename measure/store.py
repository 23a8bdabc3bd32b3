"""Results on disk: a tidy CSV appended row by row plus a JSON sidecar with provenance.

Every row is written, flushed and fsync'd before the next measurement starts, so
a crash, a kill or Ctrl-C loses at most the row being written. On reading, an
incomplete last line (a row cut off mid-write) is dropped with a warning; any
other line that does not parse is an error naming its line number, never a
silent change of the data. ``done()`` tells a resumed sweep which rows are saved.
A lock file (holder's pid) keeps two runs from writing one folder at once.

A store given its columns (:class:`Column`) also checks what each row holds, on
resume and when a sweep is fitted: a damaged header or a value of the wrong type,
not finite or out of range is an error naming its line, and nothing is appended
to such a file. A write that fails (a full disk) is undone to the last whole row
and the error says how many rows are saved and how to continue.
"""

from __future__ import annotations

import csv
import datetime as _dt
import errno
import io
import json
import os
import subprocess
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError

RESULTS = "results.csv"
META = "meta.json"
LOCK = ".lock"


def git_revision(path: str | Path = ".") -> str | None:
    """The git commit of the code that produced the results (None outside a repository)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FolderLock:
    """An exclusive lock on a results folder: ``.lock`` holds the holder's pid; a dead holder's lock is taken over."""

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / LOCK
        self.held = False

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(self.path.read_text().strip() or 0)
                except (OSError, ValueError):
                    pid = 0
                if pid and pid != os.getpid() and _pid_alive(pid):
                    raise SpecroofError(
                        f"{str(self.path.parent)!r} is in use by another run (pid {pid}); wait for it or use another --out"
                    ) from None
                self.path.unlink(missing_ok=True)  # stale: its holder is gone
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            self.held = True
            return
        raise SpecroofError(f"could not lock {str(self.path.parent)!r}")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class Column:
    """What one column of a results file may hold.

    ``kind``: ``"count"`` (a whole number in [lo, hi]), ``"number"`` (a finite number in
    [lo, hi]; empty allowed when ``optional``), or ``"text"`` (non-empty; one of
    ``choices`` when given).
    """

    kind: str
    lo: float = 0.0
    hi: float = 1e12
    optional: bool = False
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "text":
            return f"one of {', '.join(self.choices)}" if self.choices else "a non-empty text"
        what = "a whole number" if self.kind == "count" else "a finite number"
        return f"{what} in [{self.lo:g}, {self.hi:g}]" + (" or empty" if self.optional else "")


def check_columns(df: pd.DataFrame, columns: Mapping[str, Column], where: str, header: list[str] | None = None) -> None:
    """Refuse a results table whose header lacks a column or whose values do not fit their :class:`Column`.

    ``header``: the file's header as written (pandas renames a repeated name). Line
    numbers count the header as line 1, as an editor shows them.
    """
    header = [str(c) for c in (header if header is not None else df.columns)]
    missing = [c for c in columns if c not in header]
    dup = sorted({c for c in header if header.count(c) > 1})
    if missing or dup or any(not c.strip() or c.startswith("Unnamed:") for c in header):
        what = f"lacks the column(s) {missing}" if missing else f"repeats {dup}" if dup else "has an empty name"
        raise SpecroofError(
            f"{where} line 1 (the header) {what}: the file was damaged or is not a results file of this kind; "
            "restore it, or start again with --overwrite"
        )
    for name, col in columns.items():
        raw = df[name]
        empty = raw.isna().to_numpy()
        if col.kind == "text":
            text = raw.astype(str)
            bad = empty | (text.str.strip() == "").to_numpy()
            if col.choices:
                bad |= ~text.isin(col.choices).to_numpy()
        else:
            num = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
            ok = np.isfinite(num) & (num >= col.lo) & (num <= col.hi)
            if col.kind == "count":
                ok &= num == np.round(num)
            bad = ~(ok | (empty & col.optional))
        if bad.any():
            i = int(np.argmax(bad))
            value = raw.iloc[i]
            value = value.item() if hasattr(value, "item") else value
            raise SpecroofError(
                f"{where} line {2 + i}: {name} = {value!r} is not {col.describe()}: the file was "
                "damaged; fix or remove that line (nothing was appended to it)"
            )


def read_results(path: str | Path, columns: Mapping[str, Column] | None = None) -> pd.DataFrame:
    """Read a results CSV written row by row, tolerating only a cut-off last row.

    A last line without its newline, or with fewer fields than the header, is a row
    that was being written when the writer died: it is dropped with a warning. A
    damaged line anywhere else raises :class:`SpecroofError` naming the line; so
    does, with ``columns``, a header without them or a value that does not fit.
    """
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return pd.DataFrame()
    try:
        text = p.read_text()
    except UnicodeDecodeError as exc:
        raise SpecroofError(f"{str(p)!r} is not a text CSV ({exc.reason})") from None
    lines = text.split("\n")
    complete = text.endswith("\n")
    if complete:
        lines = lines[:-1]
    header = next(csv.reader([lines[0]]))
    rows_ok = [lines[0]]
    for i, line in enumerate(lines[1:], start=2):
        fields = next(csv.reader([line])) if line else []
        last = i == len(lines)
        if len(fields) != len(header):
            if last:
                warnings.warn(
                    f"{p}: dropped an incomplete last row (line {i}): it was being written when a run stopped",
                    stacklevel=2,
                )
                continue
            raise SpecroofError(
                f"{str(p)!r} line {i} has {len(fields)} fields, the header has {len(header)}: "
                "the file was damaged; fix or remove that line"
            )
        if last and not complete:
            warnings.warn(f"{p}: dropped a last row without its newline (line {i}): it may be cut off", stacklevel=2)
            continue
        rows_ok.append(line)
    try:
        df = pd.read_csv(io.StringIO("\n".join(rows_ok) + "\n"))
    except (ValueError, csv.Error) as exc:  # pandas' ParserError is a ValueError
        raise SpecroofError(f"{str(p)!r} cannot be read as CSV ({exc}); the file was damaged") from None
    if columns is not None:
        check_columns(df, columns, repr(str(p)), header)
    return df


def _drop_cut_row(path: Path) -> None:
    """Truncate a last row that a crash cut off (no newline), so the next row is not merged into it."""
    with path.open("rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return
        f.seek(max(0, size - 65536))
        tail = f.read()
        cut = tail.rfind(b"\n")
        keep = size - len(tail) + cut + 1 if cut >= 0 else 0
        f.truncate(keep)
    warnings.warn(f"{path}: dropped a last row cut off by an earlier run", stacklevel=3)


class SweepStore:
    """``out_dir/results.csv`` (one row per measured visit of a point) and ``out_dir/meta.json``."""

    def __init__(self, out_dir: str | Path, key: Iterable[str], columns: Mapping[str, Column] | None = None) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = tuple(key)
        self.columns = columns
        self.path = self.dir / RESULTS

    def write_meta(self, meta: dict[str, Any]) -> None:
        """Write (or extend) the JSON sidecar; earlier runs' entries are kept under ``runs``."""
        path = self.dir / META
        try:
            old: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise SpecroofError(f"{str(path)!r} is damaged (not JSON); remove it or use another --out") from None
        runs = old.get("runs", [])
        runs.append(
            {**meta, "started": _dt.datetime.now().isoformat(timespec="seconds"), "git_revision": git_revision()}
        )
        tmp = path.with_suffix(".json.tmp")
        try:
            tmp.write_text(json.dumps({**old, **meta, "runs": runs}, indent=2, default=str))
            tmp.replace(path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise SpecroofError(f"cannot write {str(path)!r}: {exc.strerror}; nothing was measured yet") from None

    def has_results(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def clear(self) -> None:
        """Start a new results file (the JSON sidecar keeps its history of runs)."""
        if self.path.exists():
            self.path.unlink()

    def read(self) -> pd.DataFrame:
        """Every saved row (an empty frame when nothing was saved yet), each checked; see :func:`read_results`."""
        return read_results(self.path, self.columns)

    def done(self) -> set[tuple[str, ...]]:
        """Keys of the rows already saved (as strings, so types read back from CSV compare equal)."""
        df = self.read()
        if df.empty:
            return set()
        missing = [k for k in self.key if k not in df.columns]
        if missing:
            raise SpecroofError(f"{str(self.path)!r} lacks the key column(s) {missing}: not a sweep of this kind")
        return {tuple(str(v) for v in row) for row in df[list(self.key)].itertuples(index=False)}

    def key_of(self, row: dict[str, Any]) -> tuple[str, ...]:
        return tuple(str(row[k]) for k in self.key)

    def append(self, row: dict[str, Any]) -> None:
        """Append one row, flushed and fsync'd before returning (a crash loses at most this row)."""
        if self.has_results():
            _drop_cut_row(self.path)
        new = not self.has_results()
        header = list(row) if new else next(csv.reader([self.path.open().readline()]), [])
        if not new and sorted(header) != sorted(row):
            raise SpecroofError(
                f"{str(self.path)!r} line 1 (the header) does not hold this run's columns: "
                "the file was damaged or written by another kind of run; nothing was appended"
            )
        size = self.path.stat().st_size if not new else 0
        try:
            with self.path.open("a", newline="") as f:
                w = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
                if new:
                    w.writeheader()
                w.writerow(row)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            self._undo(size)
            saved = max(0, len(self.path.read_bytes().splitlines()) - 1) if self.path.exists() else 0
            what = "no space left on the device" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)
            raise SpecroofError(
                f"{what} writing {str(self.path)!r}: the {saved} rows measured before are saved; "
                "free some space and rerun with --resume to continue"
            ) from None

    def _undo(self, size: int) -> None:
        """Cut a row a failed write left half on disk (the file as it was before the write)."""
        try:
            if size == 0:
                self.path.unlink(missing_ok=True)
            else:
                os.truncate(self.path, size)
        except OSError:
            pass  # the next append's _drop_cut_row removes a cut row as well
