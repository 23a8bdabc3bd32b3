"""What every framework's decoding run returns, so the engine measurement treats them alike."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from measure.timing import synchronize

Clock = Callable[[], float]


@dataclass(frozen=True)
class FrameworkRun:
    """One decoding call: tokens per sequence and seconds around the whole call (prefill included).

    ``rounds`` are a speculative run's rounds (one verify pass each; 0 for plain decoding or
    when not counted) and ``draft_passes`` the draft model's forward passes, when counted.
    """

    tokens: list[list[int]]
    seconds: float
    rounds: int = 0
    draft_passes: int = 0


def timed(fn: Callable[[], object], device: torch.device, clock: Clock = time.perf_counter) -> tuple[object, float]:
    """``fn()`` and the ``clock`` seconds it took, the device synchronised on both sides."""
    synchronize(device)
    t0 = clock()
    out = fn()
    synchronize(device)
    return out, clock() - t0
