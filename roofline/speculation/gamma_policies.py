"""Dynamic speculation length: the policies serving systems use to change gamma at run time.

A policy says how many tokens to draft in the next round, given what the last round
accepted. The same objects drive the Monte-Carlo simulator here (numpy) and real
decoding (``measure.decode.speculative_generate(..., gamma=policy)``):

* :class:`StaticGamma`: the same gamma every round (what the closed forms price).
* :class:`HeuristicSchedule`: Hugging Face assisted generation's "heuristic" schedule:
  start at 5, +2 after a round whose drafts were all accepted, -1 otherwise (at least 1).
* :class:`ConfidenceStop`: Hugging Face's ``assistant_confidence_threshold``: keep drafting
  up to ``max_gamma`` while the draft's probability of its own token stays at or above
  the threshold (needs the draft's distributions: real decoding, or the simulator fed
  per-position draft confidences).
* :class:`BatchSchedule`: gamma by batch size, as TensorRT-LLM's ``draft_len_schedule``
  (a table batch -> draft length) and vLLM's ``speculative_disable_by_batch_size``
  (gamma 0 from a batch size on).

:func:`simulate_policy` runs a policy over rounds drawn from a per-position acceptance
curve and prices every round with the cost model's round time for its gamma;
:func:`compare_policies` sets each policy against the best static gamma.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError, check_min, check_range
from roofline.costing.engine import Engine
from roofline.costing.hardware import Hardware
from roofline.costing.passtime import pass_seconds
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing, pricing_of
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.closed_forms import expected_tokens_curve
from roofline.speculation.drafters import DrafterLike, as_drafter, round_time


class GammaPolicy:
    """How many drafts the next round proposes; ``name`` labels it in tables."""

    name: str = "policy"
    #: stop a round's drafting early when the draft's confidence drops below this (None: never)
    confidence_threshold: float | None = None

    def start(self, batch: int) -> int:
        """Gamma of the first round."""
        raise NotImplementedError

    def next(self, gamma: int, accepted: npt.NDArray[np.int64], batch: int) -> int:
        """Gamma of the next round, after a round that drafted ``gamma`` and accepted ``accepted`` (per sequence)."""
        raise NotImplementedError


@dataclass(frozen=True)
class StaticGamma(GammaPolicy):
    gamma: int

    def __post_init__(self) -> None:
        check_min("gamma", self.gamma, 0, integer=True)

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"static gamma {self.gamma}"

    def start(self, batch: int) -> int:
        return int(self.gamma)

    def next(self, gamma: int, accepted: npt.NDArray[np.int64], batch: int) -> int:
        return int(self.gamma)


@dataclass(frozen=True)
class HeuristicSchedule(GammaPolicy):
    """Hugging Face's heuristic: +``up`` after an all-accepted round, -``down`` otherwise, within [1, max_gamma].

    In a batch the round counts as all-accepted only if every sequence accepted all
    (one gamma serves the whole batch's verify pass).
    """

    initial: int = 5
    up: int = 2
    down: int = 1
    max_gamma: int = 64

    def __post_init__(self) -> None:
        check_min("initial", self.initial, 1, integer=True)
        check_min("max_gamma", self.max_gamma, self.initial, integer=True)

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"heuristic (start {self.initial}, +{self.up}/-{self.down})"

    def start(self, batch: int) -> int:
        return int(self.initial)

    def next(self, gamma: int, accepted: npt.NDArray[np.int64], batch: int) -> int:
        if gamma > 0 and bool(np.all(np.asarray(accepted) >= gamma)):
            return min(self.max_gamma, gamma + self.up)
        return max(1, gamma - self.down)


@dataclass(frozen=True)
class ConfidenceStop(GammaPolicy):
    """Draft up to ``max_gamma`` tokens, stopping once the draft's probability of its token falls below ``threshold``."""

    threshold: float = 0.4
    max_gamma: int = 20

    def __post_init__(self) -> None:
        check_range("threshold", self.threshold, 0.0, 1.0)
        check_min("max_gamma", self.max_gamma, 1, integer=True)
        object.__setattr__(self, "confidence_threshold", float(self.threshold))

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"confidence >= {self.threshold:g} (up to {self.max_gamma})"

    def start(self, batch: int) -> int:
        return int(self.max_gamma)

    def next(self, gamma: int, accepted: npt.NDArray[np.int64], batch: int) -> int:
        return int(self.max_gamma)


@dataclass(frozen=True)
class BatchSchedule(GammaPolicy):
    """Gamma by batch size: the entry for the largest listed batch <= the running batch (0: no speculation)."""

    schedule: dict[int, int] = field(default_factory=dict)
    label: str = "batch schedule"

    def __post_init__(self) -> None:
        if not self.schedule:
            raise SpecroofError("a batch schedule needs at least one batch -> gamma entry")
        for b, g in self.schedule.items():
            check_min("schedule batch", b, 1, integer=True)
            check_min("schedule gamma", g, 0, integer=True)

    @classmethod
    def disable_from(cls, batch: int, gamma: int) -> BatchSchedule:
        """vLLM's ``speculative_disable_by_batch_size``: ``gamma`` below ``batch``, no speculation from it on."""
        return cls({1: gamma, batch: 0}, f"gamma {gamma}, off from batch {batch}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.label

    def gamma_for(self, batch: int) -> int:
        keys = sorted(b for b in self.schedule if b <= batch)
        return int(self.schedule[keys[-1]]) if keys else int(self.schedule[min(self.schedule)])

    def start(self, batch: int) -> int:
        return self.gamma_for(batch)

    def next(self, gamma: int, accepted: npt.NDArray[np.int64], batch: int) -> int:
        return self.gamma_for(batch)


@dataclass(frozen=True)
class PolicyRun:
    """A simulated run of a policy: tokens and seconds summed over rounds, and the gammas it chose."""

    policy: str
    rounds: int
    #: tokens per sequence, summed over rounds
    tokens: float
    seconds: float
    gammas: npt.NDArray[np.int64]
    t_step_s: float

    @property
    def tokens_per_round(self) -> float:
        return self.tokens / self.rounds

    @property
    def speedup(self) -> float:
        """Tokens per second against plain decoding's 1 / t_step_s."""
        return (self.tokens / self.seconds) * self.t_step_s

    @property
    def mean_gamma(self) -> float:
        return float(self.gammas.mean())


def simulate_policy(
    policy: GammaPolicy,
    curve: ArrayLike,
    t_round: Callable[[int], float],
    t_step_s: float,
    *,
    batch: int = 1,
    rounds: int = 20_000,
    rng: np.random.Generator | None = None,
    switch: float = 0.0,
    confidence: Callable[[np.random.Generator, int], tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]]
    | None = None,
) -> PolicyRun:
    """Run ``policy`` for ``rounds`` rounds; position i of a round is accepted with probability ``curve[i]``
    (given i - 1 accepted; positions beyond the curve use its last value).

    ``curve`` may be 2-D, one curve per regime (easy code, hard prose, ...): the text
    switches to another regime, uniformly, with probability ``switch`` after each round,
    so regimes last 1 / switch rounds on average. That is where a policy can beat every
    static gamma: it lengthens drafts in the easy stretches and shortens them in the hard.

    ``t_round(g)`` is the seconds of a round that drafts g tokens (g = 0: a plain step);
    ``batch`` sequences share each round's gamma and draw acceptances independently.
    For :class:`ConfidenceStop`, ``confidence(rng, g)`` returns per-position draft
    confidences and whether each would be accepted (correlated draws); without it the
    policy cannot be simulated from a curve alone.
    """
    c = check_range("acceptance curve", np.asarray(curve, dtype=float), 0.0, 1.0)
    c = c[None] if c.ndim == 1 else c
    if c.ndim != 2 or c.shape[1] == 0:
        raise SpecroofError("the acceptance curve needs at least one position (a 1-D curve, or one per regime)")
    check_range("switch", switch, 0.0, 1.0)
    n = int(check_min("rounds", rounds, 1, integer=True))
    gen = rng or np.random.default_rng(0)
    if policy.confidence_threshold is not None and confidence is None:
        raise SpecroofError(f"{policy.name} needs the draft's confidences: pass confidence=, or measure it")
    if c.shape[0] == 1 and policy.confidence_threshold is None:
        return _simulate_stream(policy, c[0].tolist(), t_round, t_step_s, batch, n, gen)
    return _simulate_rounds(policy, c, t_round, t_step_s, batch, n, gen, switch, confidence)


def _simulate_rounds(
    policy: GammaPolicy,
    c: npt.NDArray[np.float64],
    t_round: Callable[[int], float],
    t_step_s: float,
    batch: int,
    n: int,
    gen: np.random.Generator,
    switch: float,
    confidence: Callable[[np.random.Generator, int], tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]] | None,
) -> PolicyRun:
    """The simulation round by round: every regime switch and confidence draw (the general case)."""
    g = policy.start(batch)
    regime = 0
    tokens, seconds = 0.0, 0.0  # tokens per sequence: a round emits accepted + 1 for each of the batch
    gammas = np.empty(n, dtype=np.int64)
    cost: dict[int, float] = {}
    for r in range(n):
        if policy.confidence_threshold is not None and confidence is not None:
            conf, ok = confidence(gen, g)
            below = np.nonzero(conf[:g] < policy.confidence_threshold)[0]
            g_eff = int(below[0]) + 1 if below.size else g  # the token that fell below is still proposed
            accepted = np.atleast_1d(np.cumprod(ok[:g_eff]).sum())
        else:
            g_eff = g
            probs = c[regime, np.minimum(np.arange(g_eff), c.shape[1] - 1)]
            ok = gen.random((batch, g_eff)) < probs
            accepted = np.cumprod(ok, axis=1).sum(axis=1)
        gammas[r] = g_eff
        if g_eff not in cost:
            cost[g_eff] = float(t_round(g_eff))
        tokens += float(np.mean(accepted)) + 1.0 if g_eff > 0 else 1.0
        seconds += cost[g_eff]
        g = policy.next(g_eff, accepted, batch)
        if c.shape[0] > 1 and gen.random() < switch:
            regime = int((regime + gen.integers(1, c.shape[0])) % c.shape[0])
    return PolicyRun(policy.name, n, tokens, seconds, gammas, t_step_s)


def _simulate_stream(
    policy: GammaPolicy,
    curve: list[float],
    t_round: Callable[[int], float],
    t_step_s: float,
    batch: int,
    n: int,
    gen: np.random.Generator,
) -> PolicyRun:
    """One regime, no confidences: :func:`_simulate_rounds`'s run from the same uniform draws, walked in plain Python.

    Each round of ``_simulate_rounds`` draws ``batch x gamma`` uniforms, row by row, and
    nothing else; a generator's uniforms come one after another whatever the size of each
    request, so drawing them in large blocks and reading them in order gives the same
    acceptances. The generator is then left exactly where the round-by-round loop leaves
    it (rewound, and the uniforms used drawn again), so a caller's next draws do not move.
    """
    state = gen.bit_generator.state
    p = list(curve)
    buf: list[float] = []
    pos = used = 0
    g = policy.start(batch)
    heuristic = type(policy) is HeuristicSchedule
    fixed = type(policy) in (StaticGamma, BatchSchedule)  # the same gamma every round
    tokens, seconds = 0.0, 0.0
    gammas = [0] * n
    cost: dict[int, float] = {}
    for r in range(n):
        need = batch * g
        if pos + need > len(buf):
            buf = buf[pos:] + gen.random(max(need, 8192)).tolist()
            pos = 0
        while len(p) < g:  # positions beyond the curve use its last value
            p.append(p[-1])
        if batch == 1:
            k = 0
            while k < g and buf[pos + k] < p[k]:
                k += 1
            ks = [k]
            mean = float(k)
        else:
            ks = []
            for j in range(batch):
                row = pos + j * g
                k = 0
                while k < g and buf[row + k] < p[k]:
                    k += 1
                ks.append(k)
            mean = float(sum(ks)) / batch  # np.mean of whole numbers: their exact sum over the count
        pos += need
        used += need
        gammas[r] = g
        if g not in cost:
            cost[g] = float(t_round(g))
        tokens += mean + 1.0 if g > 0 else 1.0
        seconds += cost[g]
        if fixed:
            continue
        if heuristic:
            h: HeuristicSchedule = policy  # type: ignore[assignment]
            g = min(h.max_gamma, g + h.up) if g > 0 and min(ks) >= g else max(1, g - h.down)
        else:
            g = policy.next(g, np.asarray(ks, dtype=np.int64), batch)
    gen.bit_generator.state = state
    gen.random(used)  # the generator where the round-by-round loop leaves it
    return PolicyRun(policy.name, n, tokens, seconds, np.asarray(gammas, dtype=np.int64), t_step_s)


def compare_policies(
    hardware: Pricing | Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike,
    curve: ArrayLike,
    policies: Sequence[GammaPolicy],
    *,
    batch: int = 1,
    context: int = DEFAULT_CONTEXT,
    dtype: str | None = None,
    max_gamma: int | None = None,
    switch: float = 0.0,
    rounds: int = 20_000,
    seed: int = 0,
    engine: Engine | str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    tp: int | None = None,
) -> pd.DataFrame:
    """Each policy against the best static gamma for one GPU, target, drafter, curve, batch and context.

    ``hardware`` is a :class:`roofline.costing.pricing.Pricing` or a profile priced with ``engine``,
    ``dtype``, ``weight_dtype``, ``kv_dtype`` and ``tp``. Round times come from
    :func:`roofline.speculation.drafters.round_time` (the round formula at the real batch and context).
    ``curve`` is one per-position acceptance curve, or one per
    regime with ``switch`` the chance per round of moving to another (see
    :func:`simulate_policy`); the static gamma's closed form then averages the regimes'
    expected tokens. Rows: the best static gamma (closed form and simulated) and each
    policy (simulated), with ``speedup``, ``mean_gamma`` and ``vs_best_static`` (policy
    speedup / best static speedup - 1).
    """
    pr = pricing_of(hardware, dtype=dtype, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
    c = np.asarray(curve, dtype=float)
    c = c[None] if c.ndim == 1 else c
    top = int(max_gamma or max(c.shape[1], 1))  # static gammas searched
    reach = max(top, *(int(getattr(p, "max_gamma", 0)) for p in policies))  # gammas a policy may use
    ext = c[:, np.minimum(np.arange(reach), c.shape[1] - 1)]  # beyond the measured curve: its last value
    gs = np.arange(0, reach + 1)
    spec = get_model(target)
    t_step = float(pass_seconds(spec, pr, batch, 1, context))
    # gamma 0 is a plain step; every other gamma one round of the round formula
    t_rounds = np.where(gs == 0, t_step, round_time(pr, spec, as_drafter(drafter, spec), gs, batch, context).t_round_s)
    t_round = dict(zip(gs.tolist(), t_rounds.tolist(), strict=True))
    gs, t_rounds = gs[: top + 1], t_rounds[: top + 1]
    e_mix = np.mean([expected_tokens_curve(row[:top], gs) for row in ext], axis=0)  # regimes equally likely
    sp = np.where(gs == 0, 1.0, e_mix * t_step / t_rounds)
    g_best = int(np.argmax(sp))
    rng = np.random.default_rng(seed)
    kw: dict[str, Any] = dict(batch=batch, rounds=rounds, rng=rng, switch=switch)
    static = simulate_policy(StaticGamma(g_best), ext, t_round.__getitem__, t_step, **kw)
    rows = [
        {"policy": f"best static gamma {g_best} (closed form)", "speedup": float(sp[g_best]), "mean_gamma": g_best},
        {"policy": f"best static gamma {g_best} (simulated)", "speedup": static.speedup, "mean_gamma": g_best},
    ]
    for p in policies:
        run = simulate_policy(p, ext, t_round.__getitem__, t_step, **kw)
        rows.append({"policy": p.name, "speedup": run.speedup, "mean_gamma": run.mean_gamma})
    df = pd.DataFrame(rows)
    df["vs_best_static"] = df["speedup"] / float(sp[g_best]) - 1.0
    return df
