"""The one validation layer: every quantity a user gives, as an argument or a file field, is checked here.

The CLI and the API call the same functions, so a value refused by one command is
refused by every command that prices it. A quantity is finite, positive where it
is physical, whole where it is counted, and inside a physical range (:data:`RANGES`):
no accelerator streams 1e308 bytes/s, no vocabulary has 10**400 tokens. The ranges
are not measurements; they are limits set far beyond every shipped model and device
(the largest figures in ``hardware_profiles/`` are below a hundredth of them), so a
value outside is a typo or a unit slip, not a new GPU. Past them the arithmetic of
the cost model overflows or the dynamic programs for gamma and trees never return.

Every failure is a :class:`roofline.core.errors.SpecroofError` with a one-line message
naming the field and the allowed range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError


@dataclass(frozen=True)
class Range:
    """Allowed values of one kind of quantity: ``[lo, hi]``, whole numbers when ``integer``."""

    lo: float
    hi: float
    integer: bool = False
    unit: str = ""

    def describe(self) -> str:
        def f(v: float) -> str:
            return str(int(v)) if self.integer and float(v).is_integer() else f"{v:g}"

        return f"[{f(self.lo)}, {f(self.hi)}]" + (f" {self.unit}" if self.unit else "")


#: physical ranges, SI units; a counted kind takes whole numbers only
RANGES: dict[str, Range] = {
    # hardware
    "bandwidth": Range(1e6, 1e15, unit="bytes/s"),  # 1 MB/s .. 1 PB/s
    "flops": Range(1e6, 1e19, unit="FLOP/s"),  # 1 MFLOP/s .. 10 EFLOP/s on one device
    "memory": Range(1e6, 1e15, unit="bytes"),  # 1 MB .. 1 PB
    "power": Range(1e-3, 1e6, unit="W"),
    "latency": Range(0.0, 10.0, unit="s"),  # a per-pass or per-launch host cost
    "fraction": Range(0.0, 1.0),  # efficiencies, acceptance rates, probabilities
    # models
    "params": Range(1.0, 1e15, unit="weights"),  # 1e15: a thousand times the largest published LLM
    "layers": Range(1, 100_000, integer=True),
    "width": Range(1, 10**7, integer=True),  # d_model, d_ff, head_dim
    "heads": Range(1, 100_000, integer=True),
    "vocab": Range(1, 10**8, integer=True),
    "experts": Range(0, 100_000, integer=True),
    "context": Range(0, 10**9, integer=True, unit="tokens"),
    # workloads
    "batch": Range(1, 10**7, integer=True),
    "tokens": Range(1, 10**7, integer=True),
    "gamma": Range(0, 4096, integer=True),  # speculation length: the DP over gamma is O(gamma)
    "tree_nodes": Range(1, 100_000, integer=True),  # nodes of one draft tree (its mask is nodes x nodes: 10^10 cells)
    "tp": Range(1, 1024, integer=True),
    "tokens_per_s": Range(1e-6, 1e9, unit="tokens/s"),
    "seconds": Range(0.0, 1e7, unit="s"),
    "speedup": Range(1e-3, 1e3),
    "ratio": Range(0.0, 1e6),  # draft cost ratio c, and other dimensionless positive ratios
}


def _is_bool(value: Any) -> bool:
    """True for ``True``/``False`` and numpy's booleans (``np.True_``, a 0-d bool array): yes/no, not a quantity."""
    return isinstance(value, (bool, np.bool_)) or (isinstance(value, np.ndarray) and value.dtype == np.bool_)


def check_quantity(name: str, value: Any, kind: str) -> Any:
    """``value`` checked against ``RANGES[kind]``: a float, or an int for counted kinds."""
    rng = RANGES[kind]
    if _is_bool(value) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise SpecroofError(f"{name} must be a number in {rng.describe()} (got {value!r})")
    if np.ndim(value) > 0:  # float() of a one-element array is numpy's deprecation, then its TypeError
        raise SpecroofError(f"{name} must be one number in {rng.describe()} (got an array of shape {np.shape(value)})")
    try:
        v = float(value)
    except (OverflowError, ValueError, TypeError):  # an int of 10**400 digits has no float
        raise SpecroofError(f"{name} must lie in {rng.describe()} (got a number beyond 1e308)") from None
    if not math.isfinite(v):
        raise SpecroofError(f"{name} must be finite (got {value!r})")
    if rng.integer and not v.is_integer():
        raise SpecroofError(f"{name} must be a whole number (got {value!r})")
    if not rng.lo <= v <= rng.hi:
        shown = int(v) if rng.integer else f"{v:g}"
        if v < rng.lo:  # the same words as errors.check_min, so an API and a CLI refusal read alike
            lo = int(rng.lo) if rng.integer else f"{rng.lo:g}"
            raise SpecroofError(f"{name} must be >= {lo} (got {shown}; allowed {rng.describe()})")
        raise SpecroofError(f"{name} must lie in {rng.describe()} (got {shown})")
    return int(v) if rng.integer else v


def check_fields(record: Mapping[str, Any], kinds: Mapping[str, str], where: str) -> dict[str, Any]:
    """Every field of ``record`` named in ``kinds`` checked (missing fields skipped): for profile and table rows."""
    out = dict(record)
    for key, kind in kinds.items():
        if key in record and record[key] is not None:
            out[key] = check_quantity(f"{where}: {key}", record[key], kind)
    return out


def check_tp(spec: Any, tp: int) -> int:
    """``tp`` a degree that shards ``spec``: it must divide the attention heads (and the KV heads, or be a multiple).

    Called wherever tensor parallelism is priced, so ``--tp 3`` for 32 heads is refused
    by every command, not only by ``plan``.
    """
    tp = check_quantity("tp", tp, "tp")
    if tp == 1 or getattr(spec, "is_abstract", False) or not getattr(spec, "n_heads", 0):
        return int(tp)
    name = getattr(spec, "name", "the model")
    if spec.n_heads % tp:
        raise SpecroofError(f"--tp {tp} does not divide {name}'s {spec.n_heads} attention heads")
    kv = spec.n_kv_heads
    if kv % tp and tp % kv:  # KV heads are split, or replicated in whole copies (vLLM's rule)
        raise SpecroofError(f"--tp {tp} neither divides nor is a multiple of {name}'s {kv} KV heads")
    return int(tp)


def tree_node_count(branching: int, depth: int) -> int:
    """Nodes of a full ``branching``-ary tree of ``depth`` levels, computed without building it."""
    b = check_quantity("branching", branching, "heads")
    d = check_quantity("depth", depth, "layers")
    return d if b == 1 else (b ** (d + 1) - b) // (b - 1)


def check_tree_size(branching: int, depth: int) -> int:
    """Refuse a k-ary tree larger than a draft tree can be (``Tree.kary(2, 40)`` has 2.2e12 nodes)."""
    n = tree_node_count(branching, depth)
    top = int(RANGES["tree_nodes"].hi)
    if n > top:
        raise SpecroofError(
            f"a {branching}-ary tree of depth {depth} has {n:.3g} nodes; a draft tree may have at most {top}"
        )
    return n


def check_gamma(gamma: Any, name: str = "gamma") -> int:
    """A speculation length in [0, 4096] (above it neither the DP nor a verify pass makes sense)."""
    return int(check_quantity(name, gamma, "gamma"))


def not_both(given: Mapping[str, Any]) -> None:
    """Refuse contradictory options: at most one of ``given`` (flag name -> value, None = not given) is set."""
    set_ = [k for k, v in given.items() if v is not None and v is not False]
    if len(set_) > 1:
        raise SpecroofError(f"give {' or '.join(set_)}, not both")


def no_repeats(name: str, keys: Iterable[str]) -> None:
    """Refuse an option repeated for the same key (``--acceptance draft=0.7 --acceptance draft=0.6``)."""
    seen: set[str] = set()
    for k in keys:
        if k in seen:
            raise SpecroofError(f"{name} given twice for {k!r}: give one value each")
        seen.add(k)


def check_footprint(need_bytes: float, have_bytes: float | None, what: str, hint: str = "") -> None:
    """Refuse work whose memory footprint exceeds the device's before anything is allocated."""
    if have_bytes is None or not have_bytes > 0:
        return
    if need_bytes > have_bytes:
        raise SpecroofError(
            f"{what} needs about {need_bytes / 1e9:.3g} GB, more than the device's {have_bytes / 1e9:.3g} GB"
            + (f": {hint}" if hint else "")
        )


def _as_real(name: str, value: Any, accepted: str) -> float:
    """``value`` as a float when it is a real number of any kind a notebook hands over.

    Python ints and floats, numpy integer and floating scalars and 0-d arrays are numbers;
    a bool, a string or an array of several values is not. An int past a float (10**400)
    is the library's own error, not an OverflowError.
    """
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise SpecroofError(f"{name} must be {accepted} (got {value!r})")
    try:
        v = float(value)
    except OverflowError:
        raise SpecroofError(f"{name} must be {accepted} (got a number beyond 1e308)") from None
    if not math.isfinite(v):
        raise SpecroofError(f"{name} must be {accepted} (got {value!r})")
    return v


def check_count(name: str, value: Any, lo: int = 0, hi: int = 2**53) -> int:
    """A whole number in ``[lo, hi]`` as a Python int: ``8``, ``8.0``, ``np.int64(8)`` and ``np.float32(8)`` alike.

    A count that is a float with a fraction (2.5 tokens), a bool, NaN, or a number past ``hi`` (an
    int of 30 digits where int64 arithmetic follows) is refused with one line naming the range.
    """
    accepted = f"a whole number in [{lo}, {hi}]" if hi < 2**53 else f"a whole number >= {lo}"
    if type(value) is int or isinstance(value, np.integer):  # exact: no float rounding of a large int
        v = int(value)
    else:
        x = _as_real(name, value, accepted)
        if not x.is_integer():
            raise SpecroofError(f"{name} must be {accepted} (got {value!r})")
        v = int(x)
    if not lo <= v <= hi:
        shown = str(v) if abs(v) < 10**15 else f"a number of {len(str(abs(v)))} digits"
        raise SpecroofError(f"{name} must be {accepted} (got {shown})")
    return v


def check_number(
    name: str, value: Any, lo: float = -math.inf, hi: float = math.inf, *, lo_open: bool = False, unit: str = ""
) -> float:
    """A finite real number in ``[lo, hi]`` (``(lo, hi]`` when ``lo_open``) as a Python float; numpy scalars accepted."""
    left = "(" if lo_open else "["
    if math.isinf(lo) and math.isinf(hi):
        accepted = "a finite number"
    elif math.isinf(hi):
        accepted = f"a finite number {'>' if lo_open else '>='} {lo:g}"
    else:
        accepted = f"a number in {left}{lo:g}, {hi:g}]"
    accepted += f" {unit}" if unit else ""
    v = _as_real(name, value, accepted)
    if v < lo or v > hi or (lo_open and v == lo):
        raise SpecroofError(f"{name} must be {accepted} (got {v:g})")
    return v
