"""The one timer of specroof: warm-up, synchronisation, repetitions, median / min / IQR.

Device time is the device's work alone. Where a pass runs as a captured graph
(:class:`measure.graphs.StaticCall`), the static call brackets ``graph.replay()``
itself (:func:`replay_span`): the Python that copies the pass's inputs into the
graph's buffers, draws its uniforms and, on a shape's first use, warms up and
captures the graph runs before the start event and is host time. A span in which
no replay ran (an eager pass) is bracketed whole, as before. On the CPU the same
code runs with ``perf_counter`` in place of CUDA events (CPU torch ops are
synchronous), around the static call's function where there is one.

:func:`time_fn` times a call in repetitions; :class:`PassTimer` times the passes
inside a longer host-timed span (a decoding round), read once after the span's
own sync, so the round's host work (input copies, acceptance, commit,
scheduling) is its wall time less its passes' device time (docs/cost-model.md,
section 39).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from roofline.core.errors import SpecroofError

#: the host clock of every CPU span (a test replaces it with a fake one to check what a span covers)
_clock: Callable[[], float] = time.perf_counter


def _event() -> Any:
    """A CUDA timing event (a test replaces it with a fake one to check the plumbing on the CPU)."""
    return torch.cuda.Event(enable_timing=True)


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
    walls: list[float] = []
    timer = PassTimer(dev)
    with cpu_threads(threads):
        for _ in range(warmup):
            fn()  # a first use captures its graphs here, never inside a timed repetition
        synchronize(dev)
        while len(samples) < repeats or sum(samples) < min_total_s:
            t0 = time.perf_counter()
            with timer.span("call"):
                fn()
            synchronize(dev)
            wall = time.perf_counter() - t0
            samples.append(timer.read().get("call", 0.0))
            if timer.cuda:
                walls.append(wall)
    return Timing(tuple(samples), warmup, str(dev), tuple(walls))


class _Span:
    """An open :meth:`PassTimer.span`: its name, its timer and whether a replay inside it was bracketed."""

    def __init__(self, timer: PassTimer, name: str) -> None:
        self.timer, self.name, self.replays = timer, name, 0


#: the spans open now, innermost last: a replay is charged to the innermost
_OPEN: list[_Span] = []


class PassTimer:
    """Device seconds of the passes inside a host-timed span, by name (``"draft"``, ``"verify"``, ``"step"``).

    ``with timer.span(name):`` opens a span. A captured pass inside it brackets its own ``graph.replay()``
    (:func:`replay_span`) and only that is charged to the name: its input copies, uniforms and any first
    capture are host time. A span in which no replay ran (eager passes) is charged whole: on CUDA events before
    and after its launches, on the CPU ``perf_counter`` around it (a pass is synchronous). Nothing waits;
    :meth:`read` waits for the last event (after the span's own sync it is done) and sums each name's elapsed
    times. Either way a span's host share is its wall time less what :meth:`read` returns.
    """

    def __init__(self, device: str | torch.device) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self._events: list[tuple[str, Any, Any]] = []
        self._cpu: dict[str, float] = {}

    def _add(self, name: str, seconds: float) -> None:
        self._cpu[name] = self._cpu.get(name, 0.0) + seconds

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        sp = _Span(self, name)
        _OPEN.append(sp)
        try:
            if self.cuda:
                start = _event()
                start.record()
                yield
                if not sp.replays:  # an eager span: its launches are the pass
                    end = _event()
                    end.record()
                    self._events.append((name, start, end))
            else:
                t0 = _clock()
                yield
                if not sp.replays:
                    self._add(name, _clock() - t0)
        finally:
            _OPEN.remove(sp)

    def read(self) -> dict[str, float]:
        """Seconds per name since the last read (then forgotten)."""
        out = dict(self._cpu)
        if self._events:
            self._events[-1][2].synchronize()
            for name, start, end in self._events:
                out[name] = out.get(name, 0.0) + start.elapsed_time(end) / 1e3
        self._events, self._cpu = [], {}
        return out


@contextmanager
def replay_span() -> Iterator[None]:
    """Bracket a graph's replay (on the CPU: a static call's function) for the innermost open span, if any.

    The events are recorded immediately before and after the block, so the span's device time is the replay's
    alone; outside any span this does nothing."""
    if not _OPEN:
        yield
        return
    sp = _OPEN[-1]
    sp.replays += 1
    timer = sp.timer
    if timer.cuda:
        start, end = _event(), _event()
        start.record()
        yield
        end.record()
        timer._events.append((sp.name, start, end))
    else:
        t0 = _clock()
        yield
        timer._add(sp.name, _clock() - t0)
