"""Formatting of SI quantities for people ("2.04 TB/s", "12.8 ms", "312 TFLOP/s").

Everything inside specroof is SI: bytes, bytes/s, FLOP, FLOP/s, seconds. Human
units appear only at the edges (profiles, CLI, plots); profiles carry their units
in their key names (``bandwidth_GB_per_s``).
"""

from __future__ import annotations


def format_quantity(value: float, unit: str, digits: int = 3) -> str:
    """``format_quantity(2.039e12, "B/s") -> '2.04 TB/s'`` (SI prefixes; seconds get ms/us/ns)."""
    if unit == "s":
        for name, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
            if abs(value) >= scale or name == "ns":
                return f"{value / scale:.{digits}g} {name}"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"
