"""Parsing and formatting of human quantities ("80 GB", "2039 GB/s", "312 TFLOP/s").

Everything inside specroof is SI: bytes, bytes/s, FLOP, FLOP/s, seconds. Human
units appear only at the edges (profiles, CLI, plots) and pass through here.
"""

from __future__ import annotations

import re

from roofline.errors import SpecroofError

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

# kind -> regex of the unit part after the prefix
_KINDS = {
    "bytes/s": re.compile(r"^(?P<p>Ki|Mi|Gi|Ti|[kKMGTP]?)B(/s|ps)$"),
    "bytes": re.compile(r"^(?P<p>Ki|Mi|Gi|Ti|[kKMGTP]?)B$"),
    "flop/s": re.compile(r"^(?P<p>[kKMGTP]?)(FLOP/s|FLOPS|flop/s|OPS|OP/s)$"),
    "flop": re.compile(r"^(?P<p>[kKMGTP]?)(FLOP|flop|FLOPs|OP)$"),
}

_QUANTITY = re.compile(r"^\s*(?P<num>[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>\S*)\s*$")


def unit_kind(unit: str) -> str | None:
    """Which kind of quantity a unit string measures ('bytes', 'bytes/s', 'flop/s', 'flop', 's')."""
    if unit in _TIME:
        return "s"
    for kind, rx in _KINDS.items():
        if rx.match(unit):
            return kind
    return None


def parse_quantity(text: str | float | int, expect: str | None = None) -> float:
    """Parse ``"2039 GB/s"`` into SI (``2.039e12``); plain numbers pass through.

    ``expect`` is one of 'bytes', 'bytes/s', 'flop', 'flop/s', 's'; a quantity of
    another kind raises :class:`SpecroofError` naming both kinds.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    m = _QUANTITY.match(str(text))
    if not m:
        raise SpecroofError(f"cannot read {text!r} as a quantity like '80 GB' or '2039 GB/s'")
    value = float(m.group("num"))
    unit = m.group("unit")
    if unit == "":
        return value
    kind = unit_kind(unit)
    if kind is None:
        raise SpecroofError(f"unknown unit {unit!r} in {text!r}")
    if expect is not None and kind != expect:
        raise SpecroofError(f"{text!r} is in {kind}, expected {expect}")
    if kind == "s":
        return value * _TIME[unit]
    prefix = _KINDS[kind].match(unit).group("p")  # type: ignore[union-attr]
    scale = _BINARY[prefix] if prefix in _BINARY else _PREFIX[prefix]
    return value * scale


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
