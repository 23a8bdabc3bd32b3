"""Chain speculation in closed form (Leviathan et al. 2023), broadcasting over numpy arrays.

Expected tokens per round (bonus/correction included) for a per-token rate or a
per-position curve, Leviathan's idealised speedup E / (gamma c + 1), the gamma that
maximises it, the alpha at which speculation breaks even, and the acceptance rate of
two distributions. No pricing: :mod:`roofline.speculation.speculative` puts these against the cost
model's round times.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import INT_LIMIT, SpecroofError, as_array, check_broadcast, check_min, check_range
from roofline.core.validation import check_gamma

Array = npt.NDArray[np.float64]


def expected_tokens(alpha: ArrayLike, gamma: ArrayLike) -> Array:
    """Expected tokens per round, bonus/correction included: (1 - a^(g+1)) / (1 - a).

    Exact at a = 1 (g + 1) and accurate next to it: 1 - a^(g+1) is computed as
    -expm1((g+1) log1p(-(1-a))), so there is no cancellation as a -> 1.
    """
    if type(alpha) is float and type(gamma) is int and 0.0 <= alpha <= 1.0 and 0 <= gamma <= INT_LIMIT:
        return np.float64(expected_tokens_scalar(alpha, gamma))  # one configuration: plain floats, the same bits
    a = check_range("alpha", alpha, 0.0, 1.0)
    g = check_min("gamma", gamma, 0, integer=True)
    check_broadcast(alpha=a, gamma=g)
    a, g = np.broadcast_arrays(a, g)
    one_minus = 1.0 - a
    with np.errstate(divide="ignore", invalid="ignore"):
        power = a ** (g + 1)
        direct = (1.0 - power) / one_minus
        # near a = 1 the direct form cancels; expm1/log1p keeps full precision there
        near_one = -np.expm1((g + 1) * np.log1p(-one_minus)) / one_minus
        series = np.where(power < 0.5, direct, near_one)
    series = np.where(one_minus == 0.0, g + 1.0, series)
    return np.clip(series, 1.0, g + 1.0)  # the exact bounds; rounding must not cross them


def expected_tokens_scalar(alpha: float, gamma: int) -> float:
    """:func:`expected_tokens` of one valid (alpha in [0, 1], gamma >= 0) pair in plain floats, to the bit.

    numpy squares by multiplying (its power's fast path for an exponent of 2) and calls the C
    library's pow, expm1 and log1p otherwise, as Python's float operations and :mod:`math` do; a numpy
    built with AVX-512 runs expm1 and log1p through its own vector loops on such a CPU, and there the two
    may differ in the last 2 bits (seen on a Zen 5 EPYC).
    """
    one_minus = 1.0 - alpha
    if one_minus == 0.0:
        return gamma + 1.0
    power = alpha * alpha if gamma == 1 else alpha ** (gamma + 1)
    if power < 0.5:
        series = (1.0 - power) / one_minus
    else:
        series = -math.expm1((gamma + 1) * math.log1p(-one_minus)) / one_minus
    return min(max(series, 1.0), gamma + 1.0)


def expected_tokens_curve(curve: ArrayLike, gamma: ArrayLike | None = None) -> Array:
    """Expected tokens per round for per-position acceptance a_1..a_g: 1 + sum_j prod_{i<=j} a_i.

    ``curve`` has positions on its last axis (leading axes broadcast). With
    ``gamma`` the first ``gamma`` positions are used (gamma may be an array).
    """
    c = check_range("acceptance curve", curve, 0.0, 1.0)
    if c.ndim == 0 or c.shape[-1] == 0:
        raise SpecroofError("acceptance curve must have at least one position")
    cum = np.concatenate([np.ones((*c.shape[:-1], 1)), np.cumprod(c, axis=-1)], axis=-1)
    partial = np.cumsum(cum, axis=-1)  # partial[..., g] = E with gamma = g
    if gamma is None:
        return partial[..., -1]
    g = check_min("gamma", gamma, 0, integer=True)
    if np.any(g > c.shape[-1]):
        raise SpecroofError(
            f"gamma ({int(g.max())}) exceeds the acceptance curve's {c.shape[-1]} positions; measure more positions"
        )
    if c.ndim == 1:
        return partial[g]
    return np.take_along_axis(partial, np.broadcast_to(g, partial.shape[:-1])[..., None], axis=-1)[..., 0]


def ideal_speedup(alpha: ArrayLike, gamma: ArrayLike, c: ArrayLike) -> Array:
    """Leviathan's idealised speedup E / (gamma c + 1): verify costs one step, a draft step costs c."""
    cc = check_min("c", c, 0.0)
    g = check_min("gamma", gamma, 0, integer=True)
    check_broadcast(alpha=alpha, gamma=g, c=cc)
    return expected_tokens(alpha, g) / (g * cc + 1.0)


#: most speedups (points x gammas) optimal_gamma evaluates at once: 8 bytes each, a few arrays of it (~1 GB)
MAX_GAMMA_CELLS = 5e7


def optimal_gamma(alpha: ArrayLike, c: ArrayLike, max_gamma: int = 64) -> tuple[npt.NDArray[np.int64], Array]:
    """Integer gamma in [0, max_gamma] maximising :func:`ideal_speedup` (ties to the smaller), and that speedup."""
    max_gamma = check_gamma(max_gamma, "max_gamma")  # [0, 4096]: np.arange(10**12) is a MemoryError, not a search
    a = check_range("alpha", alpha, 0.0, 1.0)[..., None]
    cc = check_min("c", c, 0.0)[..., None]
    # the search holds (alpha x c) x (max_gamma + 1) speedups at once: checked before it is allocated
    points = int(np.prod(np.broadcast_shapes(a.shape, cc.shape)))  # the trailing axis of 1 is where gamma goes
    if points * (max_gamma + 1) > MAX_GAMMA_CELLS:
        fits = max(0, int(MAX_GAMMA_CELLS // max(points, 1)) - 1)
        raise SpecroofError(
            f"optimal_gamma over {points} (alpha, c) points and gamma 0..{max_gamma} needs "
            f"{points * (max_gamma + 1):.1e} cells, over the limit of {MAX_GAMMA_CELLS:.0e}: the largest max_gamma "
            f"that fits is {fits}; split the points into chunks"
        )
    g = np.arange(max_gamma + 1)
    s = ideal_speedup(a, g, cc)
    # the smaller gamma wins ties, and near-ties within float noise: at c = 0 the speedup creeps up to its
    # plateau in the last bits, so a bare argmax picked gamma 53 at alpha 0.5 and 52 just above it
    best = np.argmax(s >= s.max(axis=-1, keepdims=True) * (1 - 1e-12), axis=-1)
    return best.astype(np.int64), np.take_along_axis(s, best[..., None], axis=-1)[..., 0]


def break_even_alpha(gamma: ArrayLike, c: ArrayLike) -> Array:
    """Smallest alpha at which E(alpha, gamma) = gamma c + 1 (speculation breaks even); NaN if none."""
    g = check_min("gamma", gamma, 1, integer=True)
    cc = check_min("c", c, 0.0)
    g, cc = np.broadcast_arrays(g, cc)
    target = g * cc + 1.0
    lo, hi = np.zeros(g.shape), np.ones(g.shape)
    for _ in range(60):  # E is increasing in alpha: bisection to float precision
        mid = (lo + hi) / 2
        above = expected_tokens(mid, g) >= target
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return np.where(target > g + 1.0, np.nan, np.where(target <= 1.0, 0.0, hi))


def acceptance_rate(p: Any, q: Any, axis: int = -1) -> Array:
    """alpha = sum_x min(p(x), q(x)) = 1 - total variation distance, for arrays of distributions."""
    pp, qq = as_array("p", p), as_array("q", q)
    for name, d in (("p", pp), ("q", qq)):
        if np.any(d < 0):
            raise SpecroofError(f"{name} has negative probabilities")
        if not np.allclose(d.sum(axis=axis), 1.0, atol=1e-6):
            raise SpecroofError(f"{name} must sum to 1 along axis {axis} (sums: {np.unique(d.sum(axis=axis))[:3]})")
    return np.minimum(pp, qq).sum(axis=axis)
