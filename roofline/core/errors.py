"""One error type for bad input, and the small checks that raise it.

Every public function validates its arguments with these helpers so that a user
sees ``batch must be >= 1 (got -3)`` instead of a traceback from deep inside
numpy. The CLI catches :class:`SpecroofError` and exits with status 2.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt


class SpecroofError(ValueError):
    """Bad input to a specroof function: the message names the field and the problem."""


class DoesNotFit(SpecroofError):
    """The model (with its drafter) leaves no memory for a KV cache on the GPU asked for: a fact about the deployment,
    which a page that sweeps GPUs reports in its place instead of failing."""


#: the largest whole number a counted argument may be: int64 arithmetic on it (times a few) cannot overflow
INT_LIMIT = 2**53


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def as_array(name: str, value: Any, *, integer: bool = False) -> npt.NDArray[Any]:
    """Return ``value`` as a numpy array, rejecting NaN, inf, non-numbers and numbers past a float (or int64)."""
    if type(value) is int or type(value) is float:  # the scalar fast path: notebooks call these in loops
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an int beyond a float
            finite = False
        if not finite:
            raise SpecroofError(f"{name} must be finite (got {_short(value)})")
        if integer:
            if value != int(value):
                raise SpecroofError(f"{name} must be a whole number (got {value!r})")
            if abs(value) > INT_LIMIT:
                raise SpecroofError(f"{name} must lie within +-2**53 (got {_short(value)})")
            return np.asarray(int(value), dtype=np.int64)
        return np.asarray(float(value))
    # numpy reads '4' as 4.0 and True as 1.0: a string or a flag where a number goes is refused, not converted
    if isinstance(value, (str, bytes, bool, np.bool_)):
        raise SpecroofError(f"{name} must be a number or an array of numbers (got {_short(value)})")
    try:
        raw = np.asarray(value)
        if raw.dtype.kind in "USb" or (
            raw.dtype.kind == "O" and any(isinstance(v, (str, bytes, bool)) for v in raw.flat)
        ):
            raise TypeError(f"{raw.dtype.kind} elements")
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SpecroofError(f"{name} must be a number or an array of finite numbers (got {_short(value)})") from exc
    if arr.size == 0:
        raise SpecroofError(f"{name} is empty: give at least one value")
    if not np.all(np.isfinite(arr)):
        raise SpecroofError(f"{name} must be finite (got {_short(value)})")
    if integer:
        if not np.all(arr == np.round(arr)):
            raise SpecroofError(f"{name} must be a whole number (got {_short(value)})")
        if np.any(np.abs(arr) > INT_LIMIT):
            raise SpecroofError(f"{name} must lie within +-2**53 (got {_short(value)})")
        return arr.astype(np.int64)
    return arr


def _fmt(value: Any) -> str:
    v = float(value)
    return str(int(v)) if v.is_integer() else f"{v:g}"


def check_min(name: str, value: Any, minimum: float, *, integer: bool = False) -> npt.NDArray[Any]:
    """Array of ``value`` checked element-wise to be ``>= minimum``."""
    if type(value) is int and minimum <= value <= INT_LIMIT:  # a valid count: as_array's answer, no numpy compare
        return np.asarray(value, dtype=np.int64) if integer else np.asarray(float(value))
    arr = as_array(name, value, integer=integer)
    if arr.ndim == 0:
        if arr < minimum:
            raise SpecroofError(f"{name} must be >= {minimum:g} (got {_fmt(arr)})")
        return arr
    if np.any(arr < minimum):
        bad = arr[arr < minimum].flat[0] if arr.ndim else arr
        raise SpecroofError(f"{name} must be >= {minimum:g} (got {_fmt(bad)})")
    return arr


def check_range(name: str, value: Any, lo: float, hi: float) -> npt.NDArray[Any]:
    """Array of ``value`` checked element-wise to lie in ``[lo, hi]``."""
    arr = as_array(name, value)
    if np.any((arr < lo) | (arr > hi)):
        bad = arr[(arr < lo) | (arr > hi)].flat[0] if arr.ndim else arr
        raise SpecroofError(f"{name} must lie in [{lo:g}, {hi:g}] (got {_fmt(bad)})")
    return arr


def check_choice(name: str, value: str, choices: tuple[str, ...] | list[str]) -> str:
    """``value`` if it is one of ``choices``; otherwise an error listing them."""
    if value not in choices:
        raise SpecroofError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
    return value


def check_broadcast(**named: Any) -> None:
    """Array arguments that numpy cannot broadcast together, refused with their names and shapes (a sweep over two
    arguments is a grid: ``x[:, None]`` beside ``y[None, :]``)."""
    if all(v is None or type(v) in (int, float) for v in named.values()):  # scalars: the fast path's case
        return
    try:
        shapes = {k: np.shape(v) for k, v in named.items() if v is not None}
    except ValueError:  # a ragged list: the argument's own check names it
        return
    try:
        np.broadcast_shapes(*shapes.values())
    except ValueError:
        given = ", ".join(f"{k} {s}" for k, s in shapes.items() if s)
        raise SpecroofError(
            f"{given} do not broadcast together: give arrays of one shape, or a grid (one as x[:, None], the other as y[None, :])"
        ) from None
