"""Time budgets, apportioned up front, and honest progress for measurements on a machine that may be busy.

A :class:`Budget` is a wall-clock deadline. A measuring command's budget counts from the
process's start (:func:`process_start`), so the imports, the device probe, compilation,
warm-up and the fit are inside it, not only the timed repetitions. Measurement loops ask it
before each unit of work (a sweep visit, a decoding run) whether there is time left, so a
loaded machine does fewer repetitions instead of taking ten times longer. Units are kept short
(seconds), so a run overshoots its budget by at most one unit.

:func:`apportion` decides before the repetitions start which configurations the budget can
measure enough times and which it drops, in a priority order the caller gives, so a short
budget measures fewer configurations properly instead of every configuration once.

:class:`WorkBar` is a progress bar over *predicted seconds of work* rather than over items:
points of a sweep differ in cost by orders of magnitude, so an ETA over items lies; one over
the predicted seconds, corrected by how fast the machine actually went so far, does not. Given
the budget, its estimate never promises more time than the budget has left.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Clock = Callable[[], float]

#: ``time.perf_counter()`` when this module was imported: the process's start where /proc cannot say
_IMPORTED = time.perf_counter()


def process_start(clock: Clock = time.perf_counter) -> float:
    """The ``clock`` reading at which this process started: a command's budget counts from there.

    On Linux the process's start time (``/proc/self/stat``, in clock ticks since boot) against the
    time since boot (``/proc/uptime``), so the interpreter's start and every import are counted
    (``import torch`` alone is 2-4 s on a busy CPU, transformers 1-2 s more). Elsewhere, the
    moment this module was imported (with the real clock; ``clock``'s now otherwise).
    """
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        # the command name (field 2) may hold spaces and parentheses: the fields after its last ')' start at 3
        start_ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        age = max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED if clock is time.perf_counter else clock()
    return clock() - age


def command_start(words: Sequence[str], clock: Clock = time.perf_counter) -> float:
    """When the command named by ``words`` (``["measure", "engine"]``) began, on ``clock``.

    The process's start (:func:`process_start`) when this process was started to run it (the words
    come, in order, among its arguments); else now: a notebook or a test calling the CLI in-process
    has a life before the command that is not the command's.
    """
    args = iter(sys.argv[1:])
    if all(any(a == w for a in args) for w in words):
        return process_start(clock)
    return clock()


@dataclass
class Budget:
    """A wall-clock allowance in seconds, started on creation or at ``start`` (``None``: unlimited).

    ``clock`` is the wall clock it runs on (``time.perf_counter``; a test passes a fake one).
    """

    seconds: float | None
    start: float = math.nan
    clock: Clock = field(default=time.perf_counter, repr=False, compare=False)
    #: the --budget the user gave, where this allowance is only part of it (the page keeps some for itself): what
    #: a refusal names and adds back to the budget it asks for. None: ``seconds`` is the user's
    stated_s: float | None = None

    def __post_init__(self) -> None:
        if self.seconds is not None and not self.seconds > 0:
            raise ValueError(f"a time budget must be > 0 seconds (got {self.seconds})")
        if math.isnan(self.start):
            self.start = self.clock()

    @classmethod
    def from_process_start(cls, seconds: float | None, clock: Clock = time.perf_counter) -> Budget:
        """A budget counted from the process's start (:func:`process_start`): a command's whole run."""
        return cls(seconds, start=process_start(clock), clock=clock)

    @classmethod
    def for_command(cls, seconds: float | None, words: Sequence[str], clock: Clock = time.perf_counter) -> Budget:
        """A budget counted from the start of the command ``words`` (:func:`command_start`)."""
        return cls(seconds, start=command_start(words, clock), clock=clock)

    @property
    def limited(self) -> bool:
        return self.seconds is not None

    @property
    def stated(self) -> float | None:
        """The --budget the user gave for the command this allowance belongs to."""
        return self.seconds if self.stated_s is None else self.stated_s

    def asking(self, seconds: float) -> int:
        """The --budget (whole seconds) to ask the user for when this allowance needs ``seconds`` in all."""
        kept = 0.0 if self.stated_s is None or self.seconds is None else self.stated_s - self.seconds
        return math.ceil(seconds + kept)

    @property
    def end(self) -> float:
        """The ``clock`` reading at which it runs out (``inf`` when unlimited)."""
        return float("inf") if self.seconds is None else self.start + self.seconds

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.start

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
            return Budget(None, clock=self.clock)
        return Budget(max(1e-3, fraction * self.remaining_s), clock=self.clock)

    def keeping(self, seconds: float) -> Budget:
        """This budget less ``seconds`` kept at its end for what follows (a fit, writing): same start and clock.

        Already past that point, it is spent (it allows nothing). Unlimited stays unlimited.
        """
        if self.seconds is None:
            return Budget(None, start=self.start, clock=self.clock)
        return Budget(
            max(1e-9, self.seconds - max(0.0, seconds)), start=self.start, clock=self.clock, stated_s=self.stated
        )


def unlimited() -> Budget:
    return Budget(None)


@dataclass(frozen=True)
class Apportionment:
    """What a budget measures: the items kept (in priority order), the items dropped, and the repetitions."""

    kept: tuple[Any, ...]
    dropped: tuple[Any, ...]
    repeats: int
    #: predicted seconds of the kept items at ``repeats``
    seconds: float
    #: the seconds they were apportioned from
    available_s: float


def apportion(
    items: Sequence[Any],
    cost: Callable[[Sequence[Any], int], float],
    available_s: float,
    *,
    min_repeats: int = 3,
    max_repeats: int | None = None,
    share: float = 1.0,
    essential: int = 0,
) -> Apportionment:
    """The items (most important first) that ``available_s`` seconds measure ``min_repeats`` times, and how often.

    ``cost(kept, repeats)`` predicts the seconds of measuring the items ``kept`` ``repeats`` times
    each (it may hold one-off costs too: a warm-up still to run). Each item in turn is kept when the
    kept items with it still fit ``min_repeats`` times, else dropped; a later, cheaper one is still
    tried. The first ``essential`` items are kept whatever they cost. The repetitions are then the
    most, up to ``max_repeats``, whose cost fits ``share`` of the seconds (at least ``min_repeats``:
    the minimum may take all of them; the rest of the share is left to the caller's refinements).
    """
    if min_repeats < 1:
        raise ValueError(f"min_repeats must be >= 1 (got {min_repeats})")
    if max_repeats is not None and max_repeats < min_repeats:
        raise ValueError(f"max_repeats ({max_repeats}) must be >= min_repeats ({min_repeats})")
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share must lie in (0, 1] (got {share})")
    kept: list[Any] = []
    dropped: list[Any] = []
    for i, item in enumerate(items):
        if i < essential or cost([*kept, item], min_repeats) <= available_s:
            kept.append(item)
        else:
            dropped.append(item)
    repeats = min_repeats
    top = max_repeats if max_repeats is not None else min_repeats
    if math.isinf(available_s):
        repeats = top
    else:
        while repeats < top and kept and cost(kept, repeats + 1) <= share * available_s:
            repeats += 1
    return Apportionment(tuple(kept), tuple(dropped), repeats, float(cost(kept, repeats)) if kept else 0.0, available_s)


class WorkBar:
    """A tqdm bar over predicted seconds of work; its ETA rescales by measured / predicted so far.

    ``update(predicted_s)`` marks a unit done. With a limited ``budget`` the estimate is the
    budget's: the work's rescaled ETA plus ``tail_s`` (what follows the bar's work: a fit, writing),
    never more than the budget has left, beside the budget's elapsed and total seconds. Without tqdm,
    or with ``enabled=False``, it prints nothing.
    """

    def __init__(
        self,
        total_predicted_s: float,
        desc: str,
        enabled: bool = True,
        *,
        budget: Budget | None = None,
        tail_s: float = 0.0,
    ) -> None:
        self.total = max(float(total_predicted_s), 1e-9)
        self.done = 0.0
        self.budget = budget
        self.tail_s = max(0.0, float(tail_s))
        self.clock: Clock = budget.clock if budget is not None else time.perf_counter
        self.t0 = self.clock()
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

    def set_total(self, total_predicted_s: float) -> None:
        """The work re-planned: a new total (what is done stays done)."""
        self.total = max(float(total_predicted_s), self.done, 1e-9)

    def eta_s(self) -> float:
        """Seconds the run still needs, as this bar estimates them (the budget's remaining caps it)."""
        frac = self.done / self.total
        elapsed = self.clock() - self.t0
        eta = elapsed * (1 - frac) / frac + self.tail_s if frac > 0 else float("nan")
        if self.budget is not None and self.budget.limited:
            left = self.budget.remaining_s
            eta = left if math.isnan(eta) else min(eta, left)
        return eta

    def postfix(self, note: str = "") -> str:
        b = self.budget
        if b is not None and b.limited:
            when = f"{b.elapsed_s:.0f}s of the {b.seconds:.0f}s budget"
        else:
            when = f"{self.clock() - self.t0:.0f}s elapsed"
        eta = self.eta_s()
        left = "" if math.isnan(eta) else f", ~{eta:.0f}s left"
        return f"{when}{left}{', ' + note if note else ''}"

    def update(self, predicted_s: float, note: str = "") -> None:
        self.done = min(self.total, self.done + max(0.0, float(predicted_s)))
        if self.bar is None:
            return
        self.bar.set_postfix_str(self.postfix(note), refresh=False)
        # the position set, not stepped: summed float steps overshoot 100% by a rounding (tqdm's "clamping frac")
        self.bar.n = min(100.0, 100.0 * self.done / self.total)
        self.bar.update(0)  # redraws at most every mininterval

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
