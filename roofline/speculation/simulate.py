"""Monte-Carlo of speculative rounds, to check the closed forms (seeded numpy Generators).

Rounds are simulated in one vectorised draw: a (rounds x gamma) matrix of
accept/reject outcomes, whose leading run of accepts is the accepted count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError, as_array, check_min, check_range
from roofline.speculation.verification import sample_from


@dataclass(frozen=True)
class SimResult:
    """Per-round outcomes: accepted drafts and emitted tokens (accepted + correction/bonus)."""

    accepted: npt.NDArray[np.int64]
    gamma: int

    @property
    def tokens(self) -> npt.NDArray[np.int64]:
        return self.accepted + 1

    @property
    def mean_tokens(self) -> float:
        return float(self.tokens.mean())

    @property
    def stderr(self) -> float:
        """Standard error of the mean tokens per round."""
        return float(self.tokens.std(ddof=1) / np.sqrt(self.tokens.size))

    @property
    def accepted_per_position(self) -> npt.NDArray[np.int64]:
        """How many rounds accepted at least i + 1 drafts, for i < gamma."""
        return (self.accepted[:, None] > np.arange(self.gamma)).sum(axis=0)


def simulate_chain(alpha_or_curve: ArrayLike, gamma: int, rounds: int, rng: np.random.Generator) -> SimResult:
    """Simulate ``rounds`` chain rounds with per-position acceptance (scalar alpha or a curve a_1..a_g)."""
    g = int(check_min("gamma", gamma, 0, integer=True))
    n = int(check_min("rounds", rounds, 1, integer=True))
    a = check_range("alpha_or_curve", alpha_or_curve, 0.0, 1.0)
    curve = np.full(g, float(a)) if a.ndim == 0 else a
    if curve.ndim != 1 or curve.size < g:
        raise SpecroofError(f"acceptance curve needs at least gamma = {g} positions (got {curve.size})")
    ok = rng.random((n, g)) < curve[:g]
    accepted = np.cumprod(ok, axis=1).sum(axis=1)
    return SimResult(accepted.astype(np.int64), g)


def simulate_from_distributions(
    p: ArrayLike, q: ArrayLike, gamma: int, rounds: int, rng: np.random.Generator
) -> SimResult:
    """Simulate rounds where every position has target ``p`` and draft ``q`` (1-D, same vocab).

    The draft samples x ~ q; the target accepts with probability min(1, p(x)/q(x)).
    The mean accepted length matches :func:`roofline.speculation.speculative.expected_tokens` with
    alpha = sum min(p, q).
    """
    pp, qq = as_array("p", p), as_array("q", q)
    if pp.shape != qq.shape or pp.ndim != 1:
        raise SpecroofError(f"p and q must be 1-D distributions of the same size (got {pp.shape} and {qq.shape})")
    for name, d in (("p", pp), ("q", qq)):
        if np.any(d < 0) or not np.isclose(d.sum(), 1.0, atol=1e-9):
            raise SpecroofError(f"{name} must be a probability distribution (non-negative, summing to 1)")
    g = int(check_min("gamma", gamma, 0, integer=True))
    n = int(check_min("rounds", rounds, 1, integer=True))
    x = sample_from(np.broadcast_to(qq, (n, g, qq.size)), rng.random((n, g)))
    ok = rng.random((n, g)) < np.minimum(1.0, pp[x] / qq[x])
    return SimResult(np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64), g)
