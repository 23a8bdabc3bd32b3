"""Chain speculative decoding: expected tokens, speedup, optimal gamma, drafter cost models.

Closed forms (Leviathan et al. 2023) broadcast over numpy arrays. The roofline
speedup prices every term with the cost model at the real batch and context:

    speedup = E x T_target(1) / (T_draft(gamma) + T_verify(gamma + 1) + T_overhead)

where the verify pass is a (gamma + 1)-token pass over the cache, not one step.
Times are seconds, memory is bytes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.typing import ArrayLike

from roofline.engine import Engine, load_engine
from roofline.errors import SpecroofError, as_array, check_min, check_range
from roofline.hardware import Hardware, dtype_bytes, load_hardware, weight_only
from roofline.model import ModelSpec, get_model
from roofline.passtime import memory_footprint, pass_time

Array = npt.NDArray[np.float64]


# -- closed forms ------------------------------------------------------------------


def expected_tokens(alpha: ArrayLike, gamma: ArrayLike) -> Array:
    """Expected tokens per round, bonus/correction included: (1 - a^(g+1)) / (1 - a).

    Exact at a = 1 (g + 1) and accurate next to it: 1 - a^(g+1) is computed as
    -expm1((g+1) log1p(-(1-a))), so there is no cancellation as a -> 1.
    """
    a = check_range("alpha", alpha, 0.0, 1.0)
    g = check_min("gamma", gamma, 0, integer=True)
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
    return expected_tokens(alpha, g) / (g * cc + 1.0)


def optimal_gamma(alpha: ArrayLike, c: ArrayLike, max_gamma: int = 64) -> tuple[npt.NDArray[np.int64], Array]:
    """Integer gamma in [0, max_gamma] maximising :func:`ideal_speedup` (ties to the smaller), and that speedup."""
    check_min("max_gamma", max_gamma, 0, integer=True)
    a = check_range("alpha", alpha, 0.0, 1.0)[..., None]
    cc = check_min("c", c, 0.0)[..., None]
    g = np.arange(max_gamma + 1)
    s = ideal_speedup(a, g, cc)
    best = np.argmax(s, axis=-1)  # first maximum: the smaller gamma wins ties
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


@dataclass(frozen=True)
class SpecMetrics:
    """Speculation metrics in vLLM / Spec-Bench units.

    ``acceptance_rate`` = accepted / drafted (no bonus token);
    ``mean_acceptance_length`` = 1 + accepted / rounds (bonus included);
    ``system_efficiency`` = emitted / (rounds x (gamma + 1));
    ``per_position`` = accepted at position i / rounds.
    """

    rounds: int
    acceptance_rate: float
    mean_acceptance_length: float
    system_efficiency: float
    per_position: Array | None = None


def metrics_from_counts(
    rounds: int,
    drafted: int,
    accepted: int,
    emitted: int,
    gamma: int,
    accepted_per_position: Any = None,
) -> SpecMetrics:
    """Summary metrics from the counters a serving system keeps (see :class:`SpecMetrics`)."""
    r = int(check_min("rounds", rounds, 1, integer=True))
    g = int(check_min("gamma", gamma, 0, integer=True))
    d = int(check_min("drafted", drafted, 0, integer=True))
    a = int(check_min("accepted", accepted, 0, integer=True))
    e = int(check_min("emitted", emitted, 0, integer=True))
    if a > d:
        raise SpecroofError(f"accepted ({a}) cannot exceed drafted ({d})")
    if e > r * (g + 1):
        raise SpecroofError(f"emitted ({e}) cannot exceed rounds x (gamma + 1) = {r * (g + 1)}")
    per = None
    if accepted_per_position is not None:
        per_counts = check_min("accepted_per_position", accepted_per_position, 0, integer=True)
        if per_counts.ndim != 1 or per_counts.size != g:
            raise SpecroofError(f"accepted_per_position must have gamma = {g} entries (got {per_counts.size})")
        if np.any(np.diff(per_counts) > 0):
            raise SpecroofError("accepted_per_position must not increase: position i+1 needs position i accepted")
        per = per_counts / r
    return SpecMetrics(r, a / d if d else float("nan"), 1.0 + a / r, e / (r * (g + 1)), per)


# -- drafter cost models -----------------------------------------------------------


@dataclass(frozen=True)
class Ctx:
    """What a drafter needs to price itself: target, hardware and pass options."""

    target: ModelSpec
    hw: Hardware
    dtype: str
    efficiency: bool
    overhead_s: float | None
    tp: int
    engine: Engine | None = None
    #: the weights' storage dtype when it differs from ``dtype`` (weight-only quantisation)
    weight_dtype: str | None = None

    def pass_s(
        self, spec: ModelSpec, batch: ArrayLike, new_tokens: ArrayLike | None, context: ArrayLike, **kw: Any
    ) -> Array:
        """Seconds of one pass of ``spec`` priced with these options (the one place drafters call the roofline).

        Drafter passes run on one device; ``tp=ctx.tp`` is for the target's own passes.
        """
        return pass_time(
            spec,
            self.hw,
            batch,
            new_tokens,
            context,
            self.dtype,
            efficiency=self.efficiency,
            overhead_s=self.overhead_s,
            engine=self.engine,
            weight_dtype=self.weight_dtype,
            **kw,
        ).t_step_s


class Drafter(Protocol):
    """A way of proposing tokens, priced by the cost model."""

    @property
    def name(self) -> str:
        """Label used in tables and as the key of per-drafter acceptance."""
        ...

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        """Seconds to propose ``gamma`` tokens for each of ``batch`` sequences."""
        ...

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        """Seconds of the target's verify pass over gamma + 1 tokens."""
        ...

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        """Device memory the drafter adds (weights + its own KV), bytes."""
        ...

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        """Seconds to draft a tree level by level (``widths[l]`` nodes at level l + 1)."""
        ...


#: what the speculation functions accept as a drafter: a Drafter, a draft model (ModelSpec or preset name),
#: or None (prompt lookup); roofline.drafters.named_drafter adds the named methods (eagle, medusa, ...)
DrafterLike = Drafter | ModelSpec | str | None


def _steps(ctx: Ctx, spec: ModelSpec, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
    """Time of ``gamma`` one-token autoregressive steps of ``spec`` starting at ``context`` (exact sum)."""
    gmax = int(np.max(gamma)) if np.size(gamma) else 0
    if gmax == 0:
        return np.zeros(np.broadcast_shapes(np.shape(gamma), np.shape(batch), np.shape(context)))
    i = np.arange(gmax)
    B = np.asarray(batch)[..., None]
    L = np.asarray(context)[..., None] + i
    t = ctx.pass_s(spec, B, 1, L)
    cum = np.concatenate([np.zeros((*t.shape[:-1], 1)), np.cumsum(t, axis=-1)], axis=-1)
    shape = np.broadcast_shapes(np.shape(gamma), cum.shape[:-1])
    cum = np.broadcast_to(cum, (*shape, gmax + 1))
    idx = np.broadcast_to(np.asarray(gamma), shape)[..., None]
    return np.take_along_axis(cum, idx, axis=-1)[..., 0]


def _verify(ctx: Ctx, spec: ModelSpec, gamma: ArrayLike, batch: ArrayLike, context: ArrayLike) -> Array:
    return ctx.pass_s(spec, batch, np.asarray(gamma) + 1, context, tp=ctx.tp)


def _levels(ctx: Ctx, spec: ModelSpec, widths: Sequence[int], batch: int, context: int) -> float:
    """One pass of ``spec`` per tree level, each over that level's width of new tokens."""
    w = np.asarray(widths, dtype=np.int64)
    if w.size == 0:
        return 0.0
    ctxs = context + np.concatenate([[0], np.cumsum(w)[:-1]])
    t = ctx.pass_s(spec, batch, w, ctxs)
    return float(np.sum(t))


def _check_smaller(draft: ModelSpec, target: ModelSpec) -> None:
    if draft.total_params >= target.total_params:
        raise SpecroofError(
            f"drafter {draft.name} ({draft.total_params / 1e9:.2f}B params) is not smaller than "
            f"the target {target.name} ({target.total_params / 1e9:.2f}B)"
        )


def _no_memory(batch: ArrayLike, context: ArrayLike) -> Array:
    return np.zeros(np.broadcast_shapes(np.shape(batch), np.shape(context)))


@dataclass(frozen=True)
class _SmallModel:
    """A drafter that is a separate small model: its own weights and KV cache count as extra memory."""

    spec: ModelSpec
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", get_model(self.spec))
        object.__setattr__(self, "name", self.name or f"{self._label} {self.spec.name}")

    _label = "draft"

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        fp = memory_footprint(
            self.spec, batch, context, weight_dtype=ctx.weight_dtype or ctx.dtype, act_dtype=ctx.dtype
        )
        return np.asarray(fp.weights_bytes + fp.kv_bytes, dtype=float)


@dataclass(frozen=True)
class DraftModel(_SmallModel):
    """A separate small draft model: gamma autoregressive steps, its own weights and KV cache."""

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        _check_smaller(self.spec, ctx.target)
        return _steps(ctx, self.spec, gamma, batch, context)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        _check_smaller(self.spec, ctx.target)
        return _levels(ctx, self.spec, widths, batch, context)


@dataclass(frozen=True)
class EarlyExit:
    """Self-speculation (LayerSkip): the target's first ``layers`` layers plus its head draft.

    Verification reuses those layers' KV and activations, so the verify pass runs
    only the remaining layers over the gamma + 1 tokens (``reuse_kv=False`` prices
    an implementation that recomputes every layer). No extra weights or KV.
    """

    layers: int
    name: str = ""
    reuse_kv: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name or f"early exit @{self.layers}")

    def _check(self, ctx: Ctx) -> None:
        if not 1 <= self.layers < ctx.target.n_layers:
            raise SpecroofError(f"early-exit layers must lie in [1, {ctx.target.n_layers - 1}] (got {self.layers})")

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        self._check(ctx)
        return _steps(ctx, ctx.target.replace(n_layers=self.layers), gamma, batch, context)

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        self._check(ctx)
        verified = ctx.target.replace(n_layers=ctx.target.n_layers - self.layers) if self.reuse_kv else ctx.target
        return _verify(ctx, verified, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return _no_memory(batch, context)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        self._check(ctx)
        return _levels(ctx, ctx.target.replace(n_layers=self.layers), widths, batch, context)


@dataclass(frozen=True)
class Heads:
    """Medusa/EAGLE-style extra heads: one cheap step proposes the whole chain or tree.

    ``params`` is the weight count of all heads together (default: ``n_heads`` Medusa
    heads, each a d x d residual block plus its own d x vocab projection).
    """

    n_heads: int = 4
    params: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        check_min("n_heads", self.n_heads, 1, integer=True)
        object.__setattr__(self, "name", self.name or f"{self.n_heads} heads")

    def head_params(self, target: ModelSpec) -> float:
        if self.params is not None:
            return float(self.params)
        return self.n_heads * (target.d_model**2 + target.d_model * target.vocab_size)

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        heads = ModelSpec.from_params(self.head_params(ctx.target), name=self.name)
        t = ctx.pass_s(heads, batch, 1, 0)
        shape = np.broadcast_shapes(np.shape(gamma), np.shape(t), np.shape(context))
        return np.where(np.broadcast_to(gamma, shape) > 0, np.broadcast_to(t, shape), 0.0)

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return _no_memory(batch, context) + self.head_params(ctx.target) * dtype_bytes(ctx.dtype)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        # the heads see only the last hidden state: one pass proposes every level's top-k
        return float(self.draft_time(ctx, np.asarray(1 if len(widths) else 0), batch, context))


@dataclass(frozen=True)
class ParallelBlock(_SmallModel):
    """DFlash-style block drafter: one pass of a small model proposes the whole gamma-token block."""

    _label = "block"

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        _check_smaller(self.spec, ctx.target)
        g = np.maximum(gamma, 1)
        t = ctx.pass_s(self.spec, batch, g, context)
        return np.where(np.asarray(gamma) > 0, t, 0.0)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        # DDTree: one block pass gives every position's distribution; the tree is grown from them
        return float(self.draft_time(ctx, np.asarray(len(widths)), batch, context))


@dataclass(frozen=True)
class PromptLookup:
    """Prompt lookup / n-gram drafting: proposals come from the context on the host, at no device cost."""

    name: str = "prompt lookup"

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return np.zeros(np.broadcast_shapes(np.shape(gamma), np.shape(batch), np.shape(context)))

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return _no_memory(batch, context)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        return 0.0


@dataclass(frozen=True)
class SlidingWindowSelfDraft:
    """The target drafts for itself over only the last ``window`` cached tokens (MagicDec/TriForce style).

    At long context the KV read dominates a step, so a windowed self-draft is much
    cheaper than a full step while sharing the target's weights.
    """

    window: int
    name: str = ""

    def __post_init__(self) -> None:
        check_min("window", self.window, 1, integer=True)
        object.__setattr__(self, "name", self.name or f"self-draft window {self.window}")

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _steps(ctx, ctx.target, gamma, batch, np.minimum(context, self.window))

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return _no_memory(batch, context)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        return _levels(ctx, ctx.target, widths, batch, min(context, self.window))


def as_drafter(d: DrafterLike) -> Drafter:
    """A drafter from a Drafter, a ModelSpec/preset name (separate draft model), or None (prompt lookup)."""
    if d is None:
        return PromptLookup()
    if isinstance(d, (str, ModelSpec)):
        return DraftModel(get_model(d))
    if hasattr(d, "draft_time") and hasattr(d, "verify_time"):
        return d  # type: ignore[no-any-return]
    raise SpecroofError(f"cannot use {d!r} as a drafter: give a ModelSpec, a preset name or a drafter object")


# -- the roofline speedup ------------------------------------------------------------


@dataclass(frozen=True)
class SpeedupResult:
    """Every term of a speculative round (seconds) and what it buys. Arrays broadcast over inputs."""

    gamma: npt.NDArray[np.int64]
    expected_tokens: Array
    t_target_step_s: Array
    t_draft_s: Array
    t_verify_s: Array
    t_overhead_s: float
    t_round_s: Array
    speedup: Array
    tokens_per_s_per_user: Array
    tokens_per_s_total: Array
    baseline_tokens_per_s_per_user: Array
    extra_memory_bytes: Array
    memory_bytes: Array
    fits_in_memory: npt.NDArray[np.bool_]
    drafter: str = ""


def owns_weights(drafter: DrafterLike) -> bool:
    """Whether a drafter runs weights of its own (a draft model, heads, a block drafter), not the target's."""
    return isinstance(drafter, (DraftModel, ParallelBlock, Heads))


def speedup(
    hardware: Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike,
    alpha_or_curve: ArrayLike,
    gamma: ArrayLike,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = 1024,
    dtype: str = "bf16",
    curve: bool | None = None,
    efficiency: bool = False,
    overhead_s: float | None = None,
    round_overhead_s: float = 0.0,
    tp: int = 1,
    draft_hardware: Hardware | str | None = None,
    engine: Engine | str | None = None,
    weight_dtype: str | None = None,
) -> SpeedupResult:
    """Roofline speedup of chain speculation over plain decoding at the same batch and context.

    ``alpha_or_curve`` is a per-token acceptance rate (scalar or array, broadcast
    with the other arguments) or, for a 1-D input with ``curve=True`` (the default
    for lists), a measured per-position acceptance curve a_1..a_g. gamma = 0 is
    plain decoding (speedup 1). ``round_overhead_s`` adds a fixed cost per round
    (sampling, rollback) on top of the passes. ``draft_hardware`` prices the draft
    passes with another profile (e.g. one fitted to the draft model's own sweep:
    a model that sits in cache runs in another regime than the memory-bound target).
    ``engine`` prices every pass as that software runs it and adds its per-round host
    time (:mod:`roofline.engine`); None is the datasheet roofline. ``weight_dtype``
    (int8, int4, fp8) stores every model's weights quantised, arithmetic in ``dtype``.
    """
    spec, hw, eng = get_model(target), load_hardware(hardware), load_engine(engine)
    dtype, weight_dtype = weight_only(dtype, weight_dtype)
    d = as_drafter(drafter)
    g = check_min("gamma", gamma, 0, integer=True)
    B = check_min("batch", batch, 1, integer=True)
    L = check_min("context", context, 0, integer=True)
    if not (np.isfinite(round_overhead_s) and round_overhead_s >= 0):
        raise SpecroofError(f"round_overhead_s must be >= 0 and finite (got {round_overhead_s})")
    is_curve = isinstance(alpha_or_curve, (list, tuple)) if curve is None else curve
    E = expected_tokens_curve(alpha_or_curve, g) if is_curve else expected_tokens(alpha_or_curve, g)
    ctx = Ctx(spec, hw, dtype, efficiency, overhead_s, tp, eng, weight_dtype)
    if draft_hardware is None and hw.weights_link_bytes_per_s is not None and owns_weights(d):
        draft_hardware = hw.on_device()  # offloading moves the target's weights; a small draft stays on the device
    dctx = (
        ctx
        if draft_hardware is None
        else Ctx(spec, load_hardware(draft_hardware), dtype, efficiency, overhead_s, tp, eng, weight_dtype)
    )
    base = pass_time(
        spec,
        hw,
        B,
        1,
        L,
        dtype,
        efficiency=efficiency,
        overhead_s=overhead_s,
        tp=tp,
        engine=eng,
        weight_dtype=weight_dtype,
    ).t_step_s
    t_draft = d.draft_time(dctx, g, B, L)
    t_verify = d.verify_time(ctx, g, B, L)
    round_overhead_s = round_overhead_s + (eng.round_s if eng is not None else 0.0)
    spec_round = t_draft + t_verify + round_overhead_s
    # gamma = 0 is plain decoding: no draft, no verify overhead, one token per step
    t_round = np.where(g == 0, base, spec_round)
    E = np.where(g == 0, 1.0, E)
    extra = d.extra_memory_bytes(ctx, B, L)
    target_fp = memory_footprint(
        spec, B, L, weight_dtype=weight_dtype or dtype, act_dtype=dtype, new_tokens=np.maximum(g, 0) + 1
    )
    # offloaded weights live in host memory: only the KV cache and activations take device memory
    on_device = target_fp.total_bytes - (target_fp.weights_bytes if hw.weights_link_bytes_per_s else 0.0)
    mem = (on_device / tp) + extra
    cap = hw.memory_bytes if hw.memory_bytes is not None else np.inf
    return SpeedupResult(
        gamma=g,
        expected_tokens=E,
        t_target_step_s=base,
        t_draft_s=np.where(g == 0, 0.0, t_draft),
        t_verify_s=np.where(g == 0, base, t_verify),
        t_overhead_s=round_overhead_s,
        t_round_s=t_round,
        speedup=E * base / t_round,
        tokens_per_s_per_user=E / t_round,
        tokens_per_s_total=B * E / t_round,
        baseline_tokens_per_s_per_user=1.0 / base,
        extra_memory_bytes=extra,
        memory_bytes=mem,
        fits_in_memory=mem <= cap,
        drafter=d.name,
    )


def draft_cost_ratio(
    target: ModelSpec | str,
    drafter: DrafterLike,
    hardware: Hardware | str,
    batch: int = 1,
    context: int = 1024,
    dtype: str = "bf16",
) -> float:
    """Leviathan's c: one draft step over one target step, priced by the cost model."""
    spec, hw = get_model(target), load_hardware(hardware)
    ctx = Ctx(spec, hw, dtype, False, None, 1)
    d = as_drafter(drafter)
    one = np.asarray(1)
    return float(d.draft_time(ctx, one, batch, context) / pass_time(spec, hw, batch, 1, context, dtype).t_step_s)


# -- a prediction from a measured mean accepted length ------------------------------------


@dataclass(frozen=True)
class PredictedSpeedup:
    """One prediction: the speedup and every term behind it (seconds per round, tokens per round)."""

    speedup: float
    mean_accepted: float
    t_round_s: float
    t_draft_s: float
    t_verify_s: float
    t_round_host_s: float
    t_base_s: float
    tokens_per_s: float
    baseline_tokens_per_s: float
    drafter: str
    engine: str
    gamma: float | None
    tree_nodes: int | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=256)
def _heuristic_mix(mean_accepted: float, rounds: int = 2000) -> tuple[float, tuple[tuple[int, float], ...], float]:
    """Hugging Face's heuristic schedule at the i.i.d. acceptance that yields ``mean_accepted`` tokens per round.

    Returns the simulated tokens per round, the share of rounds at each draft length and
    that acceptance rate: which lengths the schedule picks does not depend on timing, so
    it is solved once.
    """
    from roofline.gamma_policies import HeuristicSchedule, simulate_policy

    def run(a: float) -> Any:
        return simulate_policy(HeuristicSchedule(), [a], lambda g: 1.0, 1.0, rounds=rounds)

    lo, hi = 0.0, 1.0
    # tokens per round grow with alpha: bisect to the published figure (16 halvings: alpha to 2e-5; the
    # simulation's own spread at 2000 rounds, about 1% of the tokens per round, is the limit, and a fixed seed
    # keeps it reproducible)
    for _ in range(16):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if run(mid).tokens_per_round < mean_accepted else (lo, mid)
    alpha = (lo + hi) / 2
    pr = run(alpha)
    gs, counts = np.unique(pr.gammas, return_counts=True)
    mix = tuple((int(g), float(c) / pr.rounds) for g, c in zip(gs, counts, strict=True))
    return pr.tokens_per_round, mix, alpha


def alpha_for_heuristic(mean_accepted: float) -> float:
    """The per-token acceptance at which Hugging Face's schedule emits ``mean_accepted`` tokens per round."""
    return _heuristic_mix(float(mean_accepted))[2]


def speedup_by_engine(
    *,
    hardware: Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike,
    alpha: float,
    engines: Sequence[Engine | str | None] = (None, "eager", "compiled", "serving"),
    gammas: Sequence[int] = tuple(range(1, 13)),
    context: int = 512,
    dtype: str = "fp16",
) -> pd.DataFrame:
    """Speedup per (engine, gamma) for one chain drafter: where the best gamma lies under each engine (tidy)."""
    rows = []
    for e in engines:
        for g in gammas:
            p = predict_speedup(
                hardware=hardware, target=target, drafter=drafter, alpha=alpha, gamma=int(g), engine=e,
                context=context, dtype=dtype,
            )  # fmt: skip
            rows.append(
                {"engine": p.engine, "gamma": int(g), "speedup": p.speedup, "t_draft_s": p.t_draft_s,
                 "t_verify_s": p.t_verify_s, "t_round_host_s": p.t_round_host_s, "t_base_s": p.t_base_s}
            )  # fmt: skip
    df = pd.DataFrame(rows)
    df["best"] = df["speedup"] == df.groupby("engine")["speedup"].transform("max")
    return df


def predict_speedup(
    *,
    hardware: Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike,
    mean_accepted: float | None = None,
    alpha: float | None = None,
    gamma: int | str | None = None,
    tree: Any = None,
    engine: Engine | str | None = None,
    batch: int = 1,
    context: int = 1024,
    dtype: str = "bf16",
    weight_dtype: str | None = None,
    tp: int = 1,
) -> PredictedSpeedup:
    """Speedup of one speculative configuration as an engine runs it, from a measured acceptance.

    ``mean_accepted`` is the mean number of tokens a round emits (Spec-Bench's "#mean
    accepted tokens", vLLM's mean acceptance length; 1 for plain decoding), for a
    chain of ``gamma`` drafts or for ``tree`` (a :class:`roofline.trees.Tree`, a preset
    name: eagle, eagle2, eagle3, medusa). ``alpha`` (per-token acceptance) may stand in
    for it on chains. ``gamma="heuristic"`` is Hugging Face's schedule (+2 after an
    all-accepted round, -1 otherwise, from 5): the acceptance rate that yields
    ``mean_accepted`` under it is found and the run simulated. ``drafter``: a drafter
    object or a name (:func:`roofline.drafters.named_drafter`); EAGLE and Medusa use
    their own trees when neither ``gamma`` nor ``tree`` is given.
    """
    from roofline.drafters import default_tree, named_drafter, tree_preset

    spec, hw, eng = get_model(target), load_hardware(hardware), load_engine(engine)
    d = named_drafter(drafter, spec)
    dtype, weight_dtype = weight_only(dtype, weight_dtype)
    B = int(check_min("batch", batch, 1, integer=True))
    L = int(check_min("context", context, 0, integer=True))
    if mean_accepted is None and alpha is None:
        raise SpecroofError("give mean_accepted (tokens per round) or alpha (per-token acceptance)")
    if mean_accepted is not None and not (np.isfinite(mean_accepted) and mean_accepted >= 1.0):
        raise SpecroofError(f"mean_accepted is tokens per round, at least 1 (got {mean_accepted})")
    ctx = Ctx(spec, hw, dtype, False, None, tp, eng, weight_dtype)
    base = float(pass_time(spec, hw, B, 1, L, dtype, tp=tp, engine=eng, weight_dtype=weight_dtype).t_step_s)
    round_host = eng.round_s if eng is not None else 0.0
    t = tree_preset(tree) if tree is not None else (default_tree(d) if gamma is None else None)
    if t is not None:
        if mean_accepted is None:
            raise SpecroofError("a tree needs mean_accepted: its acceptance is not a single alpha")
        t_draft = float(d.tree_draft_time(ctx, t.widths.tolist(), B, L))
        # the verify pass holds the tree plus the pending token as its root
        t_verify = float(ctx.pass_s(spec, B, None, L, tree=np.concatenate([[1], t.depths + 1]), tp=tp))
        t_round = t_draft + t_verify + round_host
        E, g_out, nodes = float(mean_accepted), None, t.n_nodes
    elif gamma == "heuristic":
        if mean_accepted is None:
            raise SpecroofError("gamma='heuristic' needs mean_accepted")
        E, mix, _ = _heuristic_mix(float(mean_accepted))
        parts = [(w, d.draft_time(ctx, np.asarray(g), B, L), d.verify_time(ctx, np.asarray(g), B, L)) for g, w in mix]
        t_draft = float(sum(w * dr for w, dr, _ in parts))
        t_verify = float(sum(w * v for w, _, v in parts))
        t_round = t_draft + t_verify + round_host
        g_out, nodes = float(sum(g * w for g, w in mix)), None
    else:
        g = int(check_min("gamma", 1 if gamma is None else gamma, 1, integer=True))
        E = float(mean_accepted) if mean_accepted is not None else float(expected_tokens(float(alpha or 0.0), g))
        if E > g + 1:
            raise SpecroofError(f"mean_accepted {E} exceeds gamma + 1 = {g + 1}")
        gg = np.asarray(g)
        t_draft = float(d.draft_time(ctx, gg, B, L))
        t_verify = float(d.verify_time(ctx, gg, B, L))
        t_round = t_draft + t_verify + round_host
        g_out, nodes = float(g), None
    return PredictedSpeedup(
        speedup=E * base / t_round,
        mean_accepted=E,
        t_round_s=t_round,
        t_draft_s=t_draft,
        t_verify_s=t_verify,
        t_round_host_s=round_host,
        t_base_s=base,
        tokens_per_s=B * E / t_round,
        baseline_tokens_per_s=B / base,
        drafter=str(getattr(d, "name", drafter)),
        engine=eng.name if eng is not None else "roofline",
        gamma=g_out,
        tree_nodes=nodes,
    )
