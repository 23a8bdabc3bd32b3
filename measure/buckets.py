"""The context buckets a static-shape pass attends over: torch-free, so that a summary of a GPU run can name the KV
slots each pass read without importing torch (benchmarks/gpu_summary.py); :mod:`measure.models` re-exports it."""

from __future__ import annotations

from roofline.core.errors import SpecroofError


def context_bucket(need: int, cap: int, granule: int = 64) -> int:
    """The number of cache slots a static-shape pass attends over when its longest sequence needs ``need``.

    ``need`` rounded up to a ladder of four steps per octave (64, 128, 192, 256, 320, 384, 448, 512, 640, ...,
    each a multiple of ``granule``) and capped at ``cap`` (the cache's length). A captured pass reads a fixed slice
    of the cache, so its key length cannot follow the context token by token; the ladder bounds the slots read
    beyond the longest sequence to a quarter of its context (a granule below 256 slots), while a cache that grows
    by a few tokens per round crosses a step only every few dozen rounds, so few shapes are captured. Slots past a
    sequence's own length are masked: they cost reads, never change a result. ``need`` beyond ``cap`` is an error.
    """
    need, cap = int(need), int(cap)
    if need > cap:
        raise SpecroofError(f"{need} tokens exceed the cache's max_seq {cap}")
    if need <= granule:
        return min(granule, cap)
    octave = 1 << (need - 1).bit_length() - 1  # the largest power of two below need
    step = max(granule, octave // 4)
    return min(cap, -(-need // step) * step)
