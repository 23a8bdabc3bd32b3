"""Time budgets and honest progress for measurements on a machine that may be busy.

A :class:`Budget` is a wall-clock deadline. Measurement loops ask it before each
unit of work (a sweep visit, a decoding run) whether there is time left, so a
loaded machine does fewer repetitions instead of taking ten times longer. Units
are kept short (seconds), so a run overshoots its budget by at most one unit.

:class:`WorkBar` is a progress bar over *predicted seconds of work* rather than
over items: points of a sweep differ in cost by orders of magnitude, so an ETA
over items lies; one over the roofline's predicted seconds, corrected by how fast
the machine actually went so far, does not.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Budget:
    """A wall-clock allowance in seconds, started on creation (``None``: unlimited)."""

    seconds: float | None
    start: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        if self.seconds is not None and not self.seconds > 0:
            raise ValueError(f"a time budget must be > 0 seconds (got {self.seconds})")

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start

    @property
    def remaining_s(self) -> float:
        """Seconds left (``inf`` when unlimited, never below 0)."""
        if self.seconds is None:
            return float("inf")
        return max(0.0, self.seconds - self.elapsed_s)

    def expired(self) -> bool:
        return self.remaining_s <= 0.0

    def allows(self, seconds: float) -> bool:
        """Whether a unit of work expected to take ``seconds`` still fits."""
        return seconds <= self.remaining_s

    def share(self, fraction: float) -> Budget:
        """A sub-budget: ``fraction`` of what is left now (unlimited stays unlimited)."""
        if self.seconds is None:
            return Budget(None)
        return Budget(max(1e-3, fraction * self.remaining_s))


def unlimited() -> Budget:
    return Budget(None)


class WorkBar:
    """A tqdm bar over predicted seconds of work; its ETA rescales by measured / predicted so far.

    ``update(predicted_s)`` marks a unit done. Without tqdm, or with ``enabled=False``,
    it prints nothing.
    """

    def __init__(self, total_predicted_s: float, desc: str, enabled: bool = True) -> None:
        self.total = max(float(total_predicted_s), 1e-9)
        self.done = 0.0
        self.t0 = time.perf_counter()
        self.bar: Any = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self.bar = tqdm(
                total=100.0,
                desc=desc,
                unit="%",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix}",
                file=sys.stderr,
                mininterval=0.5,
            )

    def update(self, predicted_s: float, note: str = "") -> None:
        self.done = min(self.total, self.done + max(0.0, float(predicted_s)))
        if self.bar is None:
            return
        elapsed = time.perf_counter() - self.t0
        frac = self.done / self.total
        eta = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
        self.bar.set_postfix_str(
            f"{elapsed:.0f}s elapsed, ~{eta:.0f}s left{', ' + note if note else ''}", refresh=False
        )
        self.bar.update(100.0 * frac - self.bar.n)  # redraws at most every mininterval

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
