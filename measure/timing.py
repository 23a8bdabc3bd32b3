"""The one timer of specroof: warm-up, synchronisation, repetitions, median / min / IQR.

On CUDA each repetition is bracketed by CUDA events and the device is
synchronised before reading them; on the CPU ``perf_counter`` brackets the call
(CPU torch ops are synchronous). Anything the timed function does, hidden host
syncs included, stays inside the measured interval. On CUDA the wall time of each
repetition (the call and the sync after it) is kept beside the event time: their
difference is the host's share, what a graph replay leaves of the launch path.

:class:`PassTimer` times the passes inside a longer host-timed span (a decoding
round): CUDA events around each pass, read once after the span's own sync, so
the round's host work (acceptance, commit, scheduling) is its wall time less its
passes' device time (docs/cost-model.md, section 39).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from roofline.errors import SpecroofError


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``repeats`` calls after ``warmup`` discarded ones."""

    samples_s: tuple[float, ...]
    warmup: int
    device: str
    #: wall seconds of each repetition (the call and the sync after it): on CUDA only, where ``samples_s`` are
    #: the device's (events); empty on the CPU, where the two are one
    wall_samples_s: tuple[float, ...] = ()

    @property
    def repeats(self) -> int:
        return len(self.samples_s)

    @property
    def median_s(self) -> float:
        return float(np.median(self.samples_s))

    @property
    def min_s(self) -> float:
        return float(np.min(self.samples_s))

    @property
    def q25_s(self) -> float:
        return float(np.percentile(self.samples_s, 25))

    @property
    def q75_s(self) -> float:
        return float(np.percentile(self.samples_s, 75))

    @property
    def iqr_s(self) -> float:
        return self.q75_s - self.q25_s

    @property
    def host_median_s(self) -> float:
        """Median over the repetitions of wall minus device seconds (>= 0): the host's share of a call that the
        device did not overlap; NaN without wall samples (the CPU)."""
        if not self.wall_samples_s:
            return float("nan")
        return float(np.median(np.maximum(0.0, np.subtract(self.wall_samples_s, self.samples_s))))

    def as_row(self, prefix: str = "t") -> dict[str, float | int]:
        """Columns for a tidy DataFrame: ``t_median_s``, ``t_min_s``, ``t_iqr_s``, ``repeats``; on CUDA also
        ``t_host_median_s`` (:attr:`host_median_s`)."""
        row: dict[str, float | int] = {
            f"{prefix}_median_s": self.median_s,
            f"{prefix}_min_s": self.min_s,
            f"{prefix}_iqr_s": self.iqr_s,
            "repeats": self.repeats,
        }
        if self.wall_samples_s:
            row[f"{prefix}_host_median_s"] = self.host_median_s
        return row


@contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """Pin torch's intra-op thread count for the block (None leaves it alone)."""
    if n is None:
        yield
        return
    if n < 1:
        raise SpecroofError(f"threads must be >= 1 (got {n})")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def synchronize(device: str | torch.device) -> None:
    """Wait for all queued work on ``device`` (a no-op on the CPU)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_fn(
    fn: Callable[[], Any],
    *,
    warmup: int = 3,
    repeats: int = 10,
    device: str | torch.device = "cpu",
    threads: int | None = None,
    min_total_s: float = 0.0,
) -> Timing:
    """Time ``fn()``: ``warmup`` discarded calls, then at least ``repeats`` timed ones.

    ``min_total_s`` keeps repeating (beyond ``repeats``) until that much time was
    measured, so very short calls get enough samples for a stable median.
    """
    if warmup < 0 or repeats < 1:
        raise SpecroofError(f"warmup must be >= 0 and repeats >= 1 (got {warmup}, {repeats})")
    dev = torch.device(device)
    samples: list[float] = []
    with cpu_threads(threads):
        for _ in range(warmup):
            fn()
        synchronize(dev)
        walls: list[float] = []
        if dev.type == "cuda":
            while len(samples) < repeats or sum(samples) < min_total_s:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0 = time.perf_counter()
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize(dev)
                walls.append(time.perf_counter() - t0)
                samples.append(start.elapsed_time(end) / 1e3)
        else:
            while len(samples) < repeats or sum(samples) < min_total_s:
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
    return Timing(tuple(samples), warmup, str(dev), tuple(walls))


class PassTimer:
    """Device seconds of the passes inside a host-timed span, by name (``"draft"``, ``"verify"``, ``"step"``).

    On CUDA, ``with timer.span(name):`` records an event before and after the pass's launches and nothing
    waits; :meth:`read` waits for the last event (after the span's own sync it is done) and sums each name's
    elapsed times. On the CPU a pass is synchronous: ``perf_counter`` around it is its time. Either way the
    span's host share is its wall time less what :meth:`read` returns.
    """

    def __init__(self, device: str | torch.device) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self._events: list[tuple[str, Any, Any]] = []
        self._cpu: dict[str, float] = {}

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._events.append((name, start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._cpu[name] = self._cpu.get(name, 0.0) + time.perf_counter() - t0

    def read(self) -> dict[str, float]:
        """Seconds per name since the last read (then forgotten)."""
        out = dict(self._cpu)
        if self._events:
            self._events[-1][2].synchronize()
            for name, start, end in self._events:
                out[name] = out.get(name, 0.0) + start.elapsed_time(end) / 1e3
        self._events, self._cpu = [], {}
        return out
