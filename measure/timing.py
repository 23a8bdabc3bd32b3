"""The one timer of specroof: warm-up, synchronisation, repetitions, median / min / IQR.

On CUDA each repetition is bracketed by CUDA events and the device is
synchronised before reading them; on the CPU ``perf_counter`` brackets the call
(CPU torch ops are synchronous). Anything the timed function does, hidden host
syncs included, stays inside the measured interval.
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

    def as_row(self, prefix: str = "t") -> dict[str, float | int]:
        """Columns for a tidy DataFrame: ``t_median_s``, ``t_min_s``, ``t_iqr_s``, ``repeats``."""
        return {
            f"{prefix}_median_s": self.median_s,
            f"{prefix}_min_s": self.min_s,
            f"{prefix}_iqr_s": self.iqr_s,
            "repeats": self.repeats,
        }


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
        if dev.type == "cuda":
            while len(samples) < repeats or sum(samples) < min_total_s:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize(dev)
                samples.append(start.elapsed_time(end) / 1e3)
        else:
            while len(samples) < repeats or sum(samples) < min_total_s:
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
    return Timing(tuple(samples), warmup, str(dev))
