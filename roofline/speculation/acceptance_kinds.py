"""The acceptance kinds and their conversions (read from text and files by :mod:`roofline.speculation.acceptance`).

One module despite its length: one vocabulary, six kinds on one base class, each converting exactly to the others
(docs/cost-model.md, section 14), so they are read together.

One acceptance vocabulary: every way people state how often drafts are accepted, and the conversions.

"0.7" alone is ambiguous: a per-token rate in a plan, vLLM's *draft acceptance rate*
(accepted / drafted) in a server log, and an unconditional per-position rate in vLLM's
"Per-position acceptance rate". Each kind below says which one it is, converts to the
others exactly (docs/cost-model.md, section 14), and describes
itself in one line ("given X, converted to Y") so every table can say what it was fed.

* ``PerToken``: alpha = P(a draft is accepted | the one before was), the same at every
  position; written ``0.7`` or ``alpha:0.7``.
* ``PositionCurve``: a_1..a_g, conditional (a_i = P(i accepted | i - 1 was)) or
  unconditional (P(i accepted)); a JSON list or file, ``curve:0.9,0.8``, ``unconditional:...``.
* ``PositionCounts``: rounds and the accepted count per position (vLLM's
  ``num_accepted_tokens_per_pos``, a histogram of Spec-Bench's accept lengths).
* ``MeanAccepted``: tokens per round, bonus included (Spec-Bench's #MAT, vLLM's mean
  acceptance length, SGLang's accept len) at gamma G or on a tree of depth D; ``mean:3.2@5``.
* ``VllmDraftRate``: vLLM's accepted / drafted at k speculative tokens; ``vllm-rate:0.7@5``.
* ``SiblingRankVector``: Sequoia's p[k] = P(the rank-k child is the one accepted), read with
  or without Sequoia's leading 0 (``tree --acceptance-vector``).

Every kind answers ``tokens_per_round(gamma)``, ``curve(gamma)`` (conditional),
``alpha()``, ``draft_acceptance_rate(k)``, ``for_plan()`` (what ``roofline.deploy.planner.plan``
takes per drafter) and ``describe()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import INT_LIMIT, SpecroofError, as_array, check_min, check_range
from roofline.speculation.closed_forms import expected_tokens, expected_tokens_curve
from roofline.speculation.trees import SiblingRankAcceptance

Array = npt.NDArray[np.float64]

#: how the command line writes each kind (``--acceptance KEY=VALUE``)
GRAMMAR = "0.7 or alpha:0.7 (per-token), mean:3.2[@G] (tokens per round), vllm-rate:0.7@K, curve:0.9,0.8,... or a file"


# -- conversions -------------------------------------------------------------------------------


def alpha_for_tokens(tokens_per_round: ArrayLike, gamma: ArrayLike) -> Array:
    """The per-token rate alpha whose chain of ``gamma`` drafts emits ``tokens_per_round`` (inverse of E).

    E(alpha, gamma) = (1 - alpha^(gamma+1)) / (1 - alpha) rises strictly from 1 (alpha 0) to
    gamma + 1 (alpha 1), so the inverse is unique; bisection to float precision, broadcast.
    """
    e = as_array("tokens per round", tokens_per_round)
    g = check_min("gamma", gamma, 1, integer=True)
    e, g = np.broadcast_arrays(e, g)
    if np.any((e < 1.0) | (e > g + 1.0)):
        bad = np.argwhere((e < 1.0) | (e > g + 1.0))[0] if e.ndim else ()
        raise SpecroofError(
            f"tokens per round must lie in [1, gamma + 1] = [1, {int(g[tuple(bad)]) + 1}] "
            f"(got {float(e[tuple(bad)]):g})"
        )
    lo, hi = np.zeros(e.shape), np.ones(e.shape)
    for _ in range(64):  # each halving gains a bit; 64 reach float precision
        mid = (lo + hi) / 2
        above = expected_tokens(mid, g) >= e
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return np.where(e >= g + 1.0, 1.0, np.where(e <= 1.0, 0.0, (lo + hi) / 2))


def conditional_from_unconditional(unconditional: ArrayLike) -> Array:
    """a_i = u_i / u_{i-1} (u_0 = 1): P(i accepted | i - 1 accepted) from P(i accepted).

    Position i can only be accepted after i - 1, so u must not increase. Where u_{i-1} = 0
    the ratio is 0/0; 0 is returned (no later position adds a token either way).
    """
    u = check_range("unconditional per-position rates", unconditional, 0.0, 1.0)
    if u.ndim != 1 or u.size == 0:
        raise SpecroofError("unconditional per-position rates must be a non-empty 1-D list")
    if np.any(np.diff(u) > 1e-12):
        i = int(np.argmax(np.diff(u) > 1e-12))
        raise SpecroofError(
            f"unconditional per-position rates must not increase (position {i + 2}: {u[i + 1]:g} > {u[i]:g}): "
            "position i + 1 is accepted only after position i"
        )
    prev = np.concatenate([[1.0], u[:-1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(prev > 0, np.minimum(u / prev, 1.0), 0.0)


def unconditional_from_conditional(conditional: ArrayLike) -> Array:
    """P(position i accepted) = prod_{j<=i} a_j from the conditional curve."""
    a = check_range("acceptance curve", conditional, 0.0, 1.0)
    if a.ndim != 1 or a.size == 0:
        raise SpecroofError("acceptance curve must be a non-empty 1-D list")
    return np.cumprod(a)


def check_mean_accepted(
    mean: float, *, gamma: int | None = None, depth: int | None = None, speculative: bool = True
) -> float:
    """``mean`` (tokens per round, bonus included) checked against what a round can emit.

    A chain of gamma drafts emits at most gamma + 1 tokens, a tree of depth D at most
    D + 1 (one path is accepted); where speculation is priced a round must beat plain
    decoding's one token (``speculative=True``: mean > 1 strictly).
    """
    if (
        type(mean) is float
        and 1.0 <= mean < math.inf
        and not (speculative and mean == 1.0)
        and (gamma is None or (type(gamma) is int and 1 <= gamma <= INT_LIMIT and mean <= gamma + 1 + 1e-9))
        and (depth is None or (type(depth) is int and 1 <= depth <= INT_LIMIT and mean <= depth + 1 + 1e-9))
    ):
        return mean  # a valid float and whole-number bounds (a scalar call's case): every check below passes
    if isinstance(mean, np.ndarray) and mean.ndim == 0:
        mean = float(mean)
    if not (isinstance(mean, (int, float, np.floating, np.integer)) and math.isfinite(float(mean))):
        raise SpecroofError(f"mean accepted length must be a finite number of tokens per round (got {mean!r})")
    m = float(mean)
    if m < 1.0 or (speculative and m <= 1.0):
        raise SpecroofError(
            f"mean accepted length is tokens per round, bonus included: it must be "
            f"{'> 1' if speculative else '>= 1'} (got {m:g})"
        )
    if gamma is not None:
        g = int(check_min("gamma", gamma, 1, integer=True))
        if m > g + 1 + 1e-9:
            raise SpecroofError(f"mean accepted length {m:g} exceeds gamma + 1 = {g + 1}: a chain of {g} drafts")
    if depth is not None:
        d = int(check_min("tree depth", depth, 1, integer=True))
        if m > d + 1 + 1e-9:
            raise SpecroofError(f"mean accepted length {m:g} exceeds depth + 1 = {d + 1}: a tree of depth {d}")
    return m


# -- the kinds ------------------------------------------------------------------------------------


# -- a module reused past its own step ----------------------------------------------------------------------------


def reused_step_limit(drafter: Any, target: Any) -> int | None:
    """Draft steps a drafter covers with a module trained for that step (an MTP stack: its modules, DeepSeek-V3's
    one); None where drafting is autoregressive by design (a draft model, EAGLE's layer trained on its own features)."""
    trained = getattr(drafter, "trained_steps", None)
    return None if trained is None else trained(target)


def check_reused_modules(drafter: Any, target: Any, gamma: Any, measured_at: int | None = None) -> None:
    """Refuse one per-token rate stretched over draft steps whose module is reused (docs/cost-model.md, section 29).

    An MTP module predicts the token one step past the target's last hidden state; the engines chain it past that
    step on its own output (vLLM ``spec_step_idx % num_mtp_layers``, SGLang's NEXTN), where it was never trained,
    so its per-position acceptance falls with the step (vLLM warns: "may result in lower acceptance rate"). No
    published curve of that decay is specroof's to assume: a rate measured on the modules' own steps, or a mean
    measured at ``measured_at`` drafts, prices chains up to there, and a longer chain needs a per-position curve.
    """
    limit = reused_step_limit(drafter, target)
    if limit is None:
        return
    top = max(limit, measured_at or 0)
    g = int(np.max(gamma)) if np.size(gamma) else 0
    if g > top:
        name = getattr(target, "name", "the target")
        raise SpecroofError(
            f"one acceptance rate for {g} draft steps of {getattr(drafter, 'name', 'mtp')}: {name} ships {limit} MTP "
            f"module{'s' if limit > 1 else ''}, reused past step {limit} where its acceptance decays; give a "
            f"per-position curve (curve:a1,...,a{g}) or a mean measured at gamma {g} (mean:E@{g})"
        )


def reused_modules_note(drafter: Any, target: Any, measured_at: int | None = None) -> str | None:
    """The sentence a plan prints when it priced a reused-module drafter only up to its modules (or measured steps)."""
    limit = reused_step_limit(drafter, target)
    if limit is None:
        return None
    top = max(limit, measured_at or 0)
    return (
        f"{getattr(drafter, 'name', 'mtp')}: {getattr(target, 'name', 'the target')} ships {limit} MTP "
        f"module{'s' if limit > 1 else ''}; one per-token rate prices gamma <= {top} only (the engines reuse the "
        "module past its own step, where acceptance decays): give a per-position curve to price longer chains"
    )


def _fmt(values: Sequence[float] | Array, n: int = 6) -> str:
    v = [f"{float(x):.3f}" for x in list(values)[:n]]
    return "[" + ", ".join(v) + (", ..." if len(values) > n else "") + "]"


def _gamma(gamma: int | None, length: int | None, what: str) -> int:
    """The chain length a conversion uses: the caller's, else the acceptance's own."""
    if gamma is None:
        if length is None:
            raise SpecroofError(f"{what} holds for any chain length: give gamma")
        return length
    return int(check_min("gamma", gamma, 0, integer=True))


class _Kind:
    """What every kind answers; each defines ``curve`` and ``length`` (None: any gamma)."""

    kind: ClassVar[str] = ""
    source: str

    @property
    def length(self) -> int | None:
        raise NotImplementedError

    def curve(self, gamma: int | None = None) -> Array:
        """The conditional per-position curve a_1..a_gamma (the one ``plan`` and ``expected_tokens_curve`` take)."""
        raise NotImplementedError

    def tokens_per_round(self, gamma: int | None = None) -> float:
        """Expected tokens per round with ``gamma`` drafts, bonus included (default: the measured length)."""
        g = _gamma(gamma, self.length, self.kind)
        if g == 0:
            return 1.0
        return float(expected_tokens_curve(self.curve(g)))

    def alpha(self) -> float:
        """The per-token rate that emits the same tokens per round at the measured length."""
        g = _gamma(None, self.length, self.kind)
        return float(alpha_for_tokens(self.tokens_per_round(g), g))

    def draft_acceptance_rate(self, k: int | None = None) -> float:
        """vLLM's accepted / drafted with ``k`` speculative tokens per round: (E(k) - 1) / k."""
        g = _gamma(k, self.length, self.kind)
        if g < 1:
            raise SpecroofError("the draft acceptance rate needs at least one speculative token")
        return (self.tokens_per_round(g) - 1.0) / g

    def for_plan(self) -> float | list[float]:
        """What ``roofline.deploy.planner.plan`` takes for one drafter: a conditional curve, or one per-token rate."""
        return [float(x) for x in self.curve()]

    def given(self) -> str:
        raise NotImplementedError

    def converted(self) -> str:
        g = self.length
        e = self.tokens_per_round(g)
        parts = [f"{e:.3f} tokens per round at gamma {g}"]
        if g:
            parts.append(f"per-token rate {self.alpha():.4f}")
            parts.append(f"conditional curve {_fmt(self.curve(g))}")
        return ", ".join(parts)

    def describe(self) -> str:
        """One line: the kind it was given (and where from), and what it was converted to."""
        src = f" ({self.source})" if self.source else ""
        return f"given {self.given()}{src}; converted to {self.converted()}"

    def to_json(self) -> dict[str, Any]:
        """A JSON object that :func:`from_json` reads back, with the ``curve`` that ``plan`` reads."""
        raise NotImplementedError

    def _summary(self, out: dict[str, Any]) -> dict[str, Any]:
        g = self.length
        out = {"kind": self.kind, **out, "source": self.source, "describe": self.describe()}
        out["tokens_per_round"] = self.tokens_per_round(g) if g is not None else None
        if g:
            out["gamma"] = out.get("gamma", g)
            out["alpha"] = self.alpha()
            out["draft_acceptance_rate"] = self.draft_acceptance_rate(g)
            out["curve"] = [float(x) for x in self.curve(g)]
            out["per_position_unconditional"] = [float(x) for x in unconditional_from_conditional(out["curve"])]
        return out


@dataclass(frozen=True)
class PerToken(_Kind):
    """A per-token conditional rate alpha, the same at every position (the textbook model)."""

    value: float
    source: str = ""
    kind: ClassVar[str] = "alpha"

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", float(check_range("alpha", self.value, 0.0, 1.0)))

    @property
    def length(self) -> int | None:
        return None

    def curve(self, gamma: int | None = None) -> Array:
        return np.full(_gamma(gamma, None, "a per-token rate"), self.value)

    def tokens_per_round(self, gamma: int | None = None) -> float:
        return float(expected_tokens(self.value, _gamma(gamma, None, "a per-token rate")))

    def alpha(self) -> float:
        return self.value

    def for_plan(self) -> float:
        return self.value

    def given(self) -> str:
        return f"per-token rate alpha {self.value:g}"

    def converted(self) -> str:
        e = " / ".join(f"{self.tokens_per_round(g):.3f}" for g in (2, 4, 8))
        return f"tokens per round (1 - a^(g+1)) / (1 - a) = {e} at gamma 2 / 4 / 8"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "alpha": self.value, "source": self.source, "describe": self.describe()}


@dataclass(frozen=True)
class PositionCurve(_Kind):
    """A per-position curve a_1..a_g: conditional (P(i | i - 1 accepted)) or unconditional (P(i accepted))."""

    values: tuple[float, ...]
    conditional: bool = True
    source: str = ""
    kind: ClassVar[str] = "curve"

    def __post_init__(self) -> None:
        v = check_range("acceptance curve", list(self.values), 0.0, 1.0)
        if v.ndim != 1 or v.size == 0:
            raise SpecroofError("acceptance curve must be a non-empty list of probabilities, position 1 first")
        if not self.conditional:
            conditional_from_unconditional(v)  # checks that it does not increase
        object.__setattr__(self, "values", tuple(float(x) for x in v))

    @property
    def length(self) -> int:
        return len(self.values)

    def curve(self, gamma: int | None = None) -> Array:
        g = _gamma(gamma, self.length, "curve")
        if g > self.length:
            raise SpecroofError(
                f"gamma ({g}) exceeds the acceptance curve's {self.length} positions; measure more positions"
            )
        c = np.asarray(self.values) if self.conditional else conditional_from_unconditional(self.values)
        return c[:g]

    def given(self) -> str:
        which = "conditional" if self.conditional else "unconditional (P(position i accepted))"
        return f"{which} per-position curve {_fmt(self.values)}"

    def converted(self) -> str:
        g = self.length
        other = (
            f"unconditional P(position i accepted) {_fmt(unconditional_from_conditional(self.values))}"
            if self.conditional
            else f"conditional curve {_fmt(self.curve(g))}"
        )
        return (
            f"{self.tokens_per_round(g):.3f} tokens per round at gamma {g}, per-token rate {self.alpha():.4f}, {other}"
        )

    def to_json(self) -> dict[str, Any]:
        return self._summary({"values": list(self.values), "conditional": self.conditional})


@dataclass(frozen=True)
class PositionCounts(_Kind):
    """Rounds and accepted drafts per position (vLLM's per-position counter, a histogram of accept lengths).

    ``accepted[i]`` counts the rounds whose draft at position i + 1 was accepted; it cannot
    increase with i. Unconditional rates are accepted / rounds, the conditional curve
    accepted[i] / accepted[i - 1].
    """

    rounds: int
    accepted: tuple[int, ...]
    source: str = ""
    kind: ClassVar[str] = "counts"

    def __post_init__(self) -> None:
        r = int(check_min("rounds", self.rounds, 1, integer=True))
        c = check_min("accepted per position", list(self.accepted), 0, integer=True)
        if c.ndim != 1 or c.size == 0:
            raise SpecroofError("accepted per position must be a non-empty list of counts, position 1 first")
        if c[0] > r:
            raise SpecroofError(f"accepted at position 1 ({int(c[0])}) cannot exceed the rounds ({r})")
        if np.any(np.diff(c) > 0):
            raise SpecroofError("accepted per position must not increase: position i + 1 needs position i accepted")
        object.__setattr__(self, "rounds", r)
        object.__setattr__(self, "accepted", tuple(int(x) for x in c))

    @property
    def length(self) -> int:
        return len(self.accepted)

    @property
    def unconditional(self) -> Array:
        return np.asarray(self.accepted, dtype=float) / self.rounds

    def curve(self, gamma: int | None = None) -> Array:
        g = _gamma(gamma, self.length, "counts")
        if g > self.length:
            raise SpecroofError(f"gamma ({g}) exceeds the {self.length} positions that were counted")
        return conditional_from_unconditional(self.unconditional)[:g]

    def tokens_per_round(self, gamma: int | None = None) -> float:
        g = _gamma(gamma, self.length, "counts")
        if g > self.length:
            raise SpecroofError(f"gamma ({g}) exceeds the {self.length} positions that were counted")
        return 1.0 + float(np.sum(self.accepted[:g])) / self.rounds  # exact: no product of rounded ratios

    def given(self) -> str:
        return f"accepted per position {list(self.accepted[:6])}{' ...' if self.length > 6 else ''} over {self.rounds} rounds"

    def to_json(self) -> dict[str, Any]:
        return self._summary({"rounds": self.rounds, "accepted_per_position": list(self.accepted)})


@dataclass(frozen=True)
class MeanAccepted(_Kind):
    """Tokens per round, bonus included, measured with ``gamma`` drafts per round or a tree of ``depth``.

    Spec-Bench's "#Mean accepted tokens", vLLM's "Mean acceptance length" and SGLang's
    "accept len". A chain's per-token rate follows from its gamma; a tree's mean holds for
    that tree only (its acceptance has no single rate).
    """

    mean: float
    gamma: int | None = None
    depth: int | None = None
    source: str = ""
    #: measured on the default tree (``mean:X@tree``): SGLang's EAGLE tree, the one engine default that is a tree
    tree: bool = False
    kind: ClassVar[str] = "mean"

    def __post_init__(self) -> None:
        if self.gamma is not None and self.depth is not None:
            raise SpecroofError("a mean accepted length comes from a chain (gamma) or a tree (depth), not both")
        if self.tree and (self.gamma is not None or self.depth is not None):
            raise SpecroofError(
                "mean:X@tree is measured on SGLang's default EAGLE tree: give no gamma or depth with it"
            )
        g = None if self.gamma is None else int(check_min("gamma", self.gamma, 1, integer=True))
        d = None if self.depth is None else int(check_min("tree depth", self.depth, 1, integer=True))
        object.__setattr__(self, "mean", check_mean_accepted(self.mean, gamma=g, depth=d, speculative=False))
        object.__setattr__(self, "gamma", g)
        object.__setattr__(self, "depth", d)

    @property
    def length(self) -> int | None:
        return self.gamma

    def _chain(self) -> int:
        if self.depth is not None:
            raise SpecroofError(
                f"mean:{self.mean:g} was measured on a tree of depth {self.depth}: it prices that tree only "
                "(a tree's acceptance has no single per-token rate or chain curve)"
            )
        if self.gamma is None:
            raise SpecroofError(
                f"mean:{self.mean:g} needs the speculation length it was measured at to convert: "
                f"write mean:{self.mean:g}@G (G drafts per round)"
            )
        return self.gamma

    def alpha(self) -> float:
        return float(alpha_for_tokens(self.mean, self._chain()))

    def curve(self, gamma: int | None = None) -> Array:
        # a single mean knows one number per round: the i.i.d. rate that reproduces it is the only curve it implies
        return np.full(_gamma(gamma, self._chain(), "mean"), self.alpha())

    def tokens_per_round(self, gamma: int | None = None) -> float:
        if gamma is None or (gamma == self.gamma) or (self.depth is not None and gamma == self.depth):
            return self.mean
        return float(expected_tokens(self.alpha(), int(check_min("gamma", gamma, 0, integer=True))))

    def for_plan(self) -> float:
        return self.alpha()

    def given(self) -> str:
        at = f" at gamma {self.gamma}" if self.gamma else f" on a tree of depth {self.depth}" if self.depth else ""
        at = " on SGLang's default EAGLE tree (@tree)" if self.tree else at
        return f"mean accepted length {self.mean:g} tokens per round{at}"

    def converted(self) -> str:
        if self.gamma is None:
            return "itself (no chain length to convert at)"
        return (
            f"per-token rate {self.alpha():.4f} (the i.i.d. rate with that mean at gamma {self.gamma}), "
            f"draft acceptance rate {self.draft_acceptance_rate(self.gamma):.4f}"
        )

    def to_json(self) -> dict[str, Any]:
        out = {"mean": self.mean, "gamma": self.gamma, "depth": self.depth} | ({"tree": True} if self.tree else {})
        if self.gamma is None:
            return {"kind": self.kind, **out, "tokens_per_round": self.mean, "source": self.source,
                    "describe": self.describe()}  # fmt: skip
        return self._summary(out)


@dataclass(frozen=True)
class VllmDraftRate(_Kind):
    """vLLM's draft acceptance rate: accepted / drafted tokens with ``num_speculative_tokens`` per round.

    Tokens per round are 1 + rate x k (vLLM: mean acceptance length = 1 + accepted / drafts,
    drafted = drafts x k); the per-token rate is the alpha with that mean at gamma k.
    """

    rate: float
    num_speculative_tokens: int
    source: str = ""
    kind: ClassVar[str] = "vllm-rate"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", float(check_range("vLLM draft acceptance rate", self.rate, 0.0, 1.0)))
        k = int(check_min("num_speculative_tokens", self.num_speculative_tokens, 1, integer=True))
        object.__setattr__(self, "num_speculative_tokens", k)

    @property
    def length(self) -> int:
        return self.num_speculative_tokens

    def as_mean(self) -> MeanAccepted:
        return MeanAccepted(1.0 + self.rate * self.num_speculative_tokens, gamma=self.num_speculative_tokens)

    def alpha(self) -> float:
        return self.as_mean().alpha()

    def curve(self, gamma: int | None = None) -> Array:
        return self.as_mean().curve(gamma)

    def tokens_per_round(self, gamma: int | None = None) -> float:
        return self.as_mean().tokens_per_round(gamma)

    def for_plan(self) -> float:
        return self.alpha()

    def given(self) -> str:
        return f"vLLM draft acceptance rate {self.rate:g} at {self.num_speculative_tokens} speculative tokens"

    def converted(self) -> str:
        k = self.num_speculative_tokens
        return f"{self.tokens_per_round():.3f} tokens per round (1 + {self.rate:g} x {k}), per-token rate {self.alpha():.4f}"

    def to_json(self) -> dict[str, Any]:
        return self._summary({"rate": self.rate, "num_speculative_tokens": self.num_speculative_tokens})


def _looks_sequoia(v: Array) -> bool:
    """Sequoia's saved vector: element 0 unused (0), the ranks, then the share of 'none accepted': sums to 1."""
    return v.size >= 3 and v[0] == 0.0 and abs(float(v.sum()) - 1.0) <= 1e-3 and bool(np.any(v[1:] > 0))


@dataclass(frozen=True)
class SiblingRankVector(_Kind):
    """Sequoia's sibling-rank vector: ``p[k]`` = P(the rank-k child is the one accepted), rank 0 first.

    Sequoia saves it with an unused leading 0 and a trailing 'none accepted' share
    (``tests/test_accept.py`` in Infini-AI-Lab/Sequoia: ``output_branch_prob[1:] = branch_prob``);
    :meth:`from_values` detects that layout (and says so) or refuses, never shifting ranks.
    A chain drafts only rank 0, so its per-token rate is ``p[0]``.
    """

    p: tuple[float, ...]
    layout: str = "ranks"
    source: str = ""
    kind: ClassVar[str] = "sibling-rank"

    def __post_init__(self) -> None:
        v = SiblingRankAcceptance(list(self.p)).p  # its checks: in [0, 1], non-empty, sums to at most 1
        if self.layout not in ("ranks", "sequoia"):
            raise SpecroofError(f"sibling-rank layout must be 'ranks' or 'sequoia' (got {self.layout!r})")
        object.__setattr__(self, "p", tuple(float(x) for x in v))

    @classmethod
    def from_values(cls, values: Any, *, sequoia: bool | None = None, source: str = "") -> SiblingRankVector:
        """From a list: rank 0 first, or Sequoia's saved layout (leading 0, trailing 'none'), detected.

        ``sequoia=True`` insists on Sequoia's layout, ``False`` on plain ranks; None detects it.
        A list that starts with 0 but is not Sequoia's layout is refused: rank 0 (the draft's
        top candidate) never accepted while lower ranks are is a shifted vector, not data.
        """
        if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):  # {"p": null}: nothing given
            raise SpecroofError(f"sibling-rank vector must be a list of rates, rank 0 first (got {values!r})")
        v = check_range("sibling-rank vector", values, 0.0, 1.0)
        if v.ndim != 1 or v.size == 0:
            raise SpecroofError("sibling-rank vector must be a non-empty 1-D list, rank 0 first")
        if sequoia and v.size >= 3 and v[0] == 0.0:
            # the layout is stated ({"sequoia": [...]}): element 0 unused, the last the 'none' share, as Sequoia saves
            # it; its sum is not checked (a vector written by hand may leave the 'none' share short)
            return cls(tuple(v[1:-1]), layout="sequoia", source=source)
        if sequoia or (sequoia is None and _looks_sequoia(v)):
            if not _looks_sequoia(v):
                raise SpecroofError(
                    "a Sequoia acceptance vector has element 0 unused (0), the ranks, and a last 'none accepted' "
                    f"entry, summing to 1 (got {_fmt(v)}, sum {v.sum():.4f})"
                )
            return cls(tuple(v[1:-1]), layout="sequoia", source=source)
        if v[0] == 0.0 and v.size > 1 and np.any(v[1:] > 0):
            raise SpecroofError(
                f"sibling-rank vector starts with 0 (rank 0 never accepted) but is not Sequoia's saved layout "
                f"(leading 0, ranks, 'none' share, summing to 1; this sums to {v.sum():.4f}): drop the leading 0 "
                "or give Sequoia's whole vector"
            )
        return cls(tuple(v), layout="ranks", source=source)

    def model(self) -> SiblingRankAcceptance:
        """The acceptance model ``roofline.speculation.trees.optimal_tree`` takes."""
        return SiblingRankAcceptance(list(self.p))

    @property
    def length(self) -> int | None:
        return None

    def curve(self, gamma: int | None = None) -> Array:
        return np.full(_gamma(gamma, None, "a sibling-rank vector"), self.p[0])

    def tokens_per_round(self, gamma: int | None = None) -> float:
        return float(expected_tokens(self.p[0], _gamma(gamma, None, "a sibling-rank vector")))

    def alpha(self) -> float:
        return self.p[0]

    def for_plan(self) -> float:
        return self.p[0]

    def given(self) -> str:
        how = "Sequoia's saved layout (leading 0 and trailing 'none' share removed)" if self.layout == "sequoia" else ""
        return f"sibling-rank vector {_fmt(self.p)}{' from ' + how if how else ''}"

    def converted(self) -> str:
        return f"ranks 0..{len(self.p) - 1} (sum {sum(self.p):.4f}); a chain's per-token rate is p[0] = {self.p[0]:.4f}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "p": list(self.p), "layout": self.layout, "source": self.source,
                "describe": self.describe()}  # fmt: skip


Acceptance = PerToken | PositionCurve | PositionCounts | MeanAccepted | VllmDraftRate | SiblingRankVector
KINDS: dict[str, type[_Kind]] = {
    k.kind: k for k in (PerToken, PositionCurve, PositionCounts, MeanAccepted, VllmDraftRate, SiblingRankVector)
}


# -- reading ---------------------------------------------------------------------------------------


def _number(text: str, what: str) -> float:
    t = text.strip()
    pct = t.endswith("%")
    try:
        x = float(t[:-1] if pct else t)
    except ValueError:
        raise SpecroofError(f"{what}: expected a number (got {text!r}); write {GRAMMAR}") from None
    if not math.isfinite(x):
        raise SpecroofError(f"{what} must be finite (got {text!r})")
    return x / 100.0 if pct else x


def _at(text: str, what: str) -> tuple[str, int | None]:
    """``X@G`` -> (X, G); ``X`` -> (X, None)."""
    value, sep, at = text.partition("@")
    if not sep:
        return value, None
    g = _number(at, f"{what}'s speculation length after @")
    if g != int(g) or g < 1:
        raise SpecroofError(f"{what}: the length after @ must be a whole number >= 1 (got {at!r})")
    return value, int(g)


def from_json(data: Any, *, source: str = "", gamma: int | None = None) -> Acceptance:
    """An acceptance from parsed JSON: a list (a conditional curve) or an object naming its kind or fields."""
    if isinstance(data, list):
        return PositionCurve(tuple(data), conditional=True, source=source)
    if not isinstance(data, dict):
        raise SpecroofError(f"{source or 'acceptance JSON'}: expected a list or an object (got {type(data).__name__})")
    inner = str(data.get("source", ""))
    src = f"{source}, imported from {inner}" if source and inner else source or inner
    kind = data.get("kind")
    try:
        if kind == "alpha" or (kind is None and "alpha" in data and len(data) <= 2):
            return PerToken(data["alpha"], source=src)
        if kind == "vllm-rate":
            return VllmDraftRate(data["rate"], data["num_speculative_tokens"], source=src)
        if kind == "counts" or (kind is None and "accepted_per_position" in data):
            return PositionCounts(data["rounds"], tuple(data["accepted_per_position"]), source=src)
        if kind == "mean" or (kind is None and "mean" in data):
            return MeanAccepted(data["mean"], gamma=data.get("gamma", gamma), depth=data.get("depth"), source=src)
        if kind == "sibling-rank" or (kind is None and ("p" in data or "sequoia" in data)):
            if "sequoia" in data:
                return SiblingRankVector.from_values(data["sequoia"], sequoia=True, source=src)
            if data.get("layout") == "sequoia":  # written by to_json: the ranks are already unwrapped
                return SiblingRankVector(tuple(data["p"]), layout="sequoia", source=src)
            return SiblingRankVector.from_values(data["p"], source=src)
        if kind == "curve" and "values" in data:
            return PositionCurve(tuple(data["values"]), conditional=bool(data.get("conditional", True)), source=src)
        if kind is None and "unconditional" in data:
            return PositionCurve(tuple(data["unconditional"]), conditional=False, source=src)
        if kind in (None, "curve") and "curve" in data:
            return PositionCurve(tuple(data["curve"]), conditional=bool(data.get("conditional", True)), source=src)
    except KeyError as exc:
        raise SpecroofError(f"{source or 'acceptance JSON'}: kind {kind!r} needs the field {exc.args[0]!r}") from None
    except TypeError:
        raise SpecroofError(f"{source or 'acceptance JSON'}: a field has the wrong type (lists of numbers)") from None
    if kind is not None and kind not in KINDS:
        raise SpecroofError(f"{source or 'acceptance JSON'}: unknown kind {kind!r}; one of {', '.join(KINDS)}")
    raise SpecroofError(
        f"{source or 'acceptance JSON'}: expected a list, or an object with 'kind' or one of 'curve', "
        "'unconditional', 'accepted_per_position' + 'rounds', 'mean', 'alpha', 'p', 'sequoia'"
    )
