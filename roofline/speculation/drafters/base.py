"""What every drafter shares: the pricing context (Ctx), the Drafter protocol, and the pass-pricing helpers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError
from roofline.costing.passtime import (
    chain_seconds,
    levels_seconds,
    pass_seconds,
)
from roofline.costing.pricing import Pricing, pricing_of
from roofline.passes.cost import model_shape, scalar_count
from roofline.passes.model import ModelSpec, get_model

Array = npt.NDArray[np.float64]


@dataclass(frozen=True, init=False)
class Ctx:
    """What a drafter needs to price itself: the target and the :class:`roofline.costing.pricing.Pricing` of its passes.

    ``Ctx(target, pricing)``; ``Ctx(target, hardware, dtype, efficiency, overhead_s, tp, engine,
    weight_dtype)`` (the earlier form) builds the Pricing from those options.
    """

    target: ModelSpec
    pricing: Pricing
    #: devices a drafter's own passes are sharded over (1: whole on one device; the target's TP where the
    #: engine shards the draft like the target, or the drafter runs the target's own layers)
    draft_tp: int

    def __init__(
        self,
        target: ModelSpec,
        pricing: Any,
        dtype: str | None = None,
        efficiency: bool | None = None,
        overhead_s: float | None = None,
        tp: int | None = None,
        engine: Any = None,
        weight_dtype: str | None = None,
        draft_tp: int = 1,
    ) -> None:
        pr = pricing_of(
            pricing,
            dtype=dtype,
            efficiency=efficiency or None,
            overhead_s=overhead_s,
            tp=tp,
            engine=engine,
            weight_dtype=weight_dtype,
        )
        object.__setattr__(self, "target", get_model(target))
        object.__setattr__(self, "pricing", pr)
        object.__setattr__(self, "draft_tp", int(draft_tp))

    @classmethod
    def of(cls, target: ModelSpec, pricing: Pricing, draft_tp: int = 1) -> Ctx:
        """``Ctx(target, pricing, draft_tp=draft_tp)`` for a resolved model and Pricing, without re-resolving them
        (the round formula builds two per call)."""
        ctx: Ctx = object.__new__(cls)
        ctx.__dict__.update(target=target, pricing=pricing, draft_tp=draft_tp)
        return ctx

    @property
    def hw(self) -> Any:
        return self.pricing.hardware

    @property
    def dtype(self) -> str:
        return self.pricing.dtype

    @property
    def weight_dtype(self) -> str | None:
        return self.pricing.weight_dtype

    @property
    def engine(self) -> Any:
        return self.pricing.engine

    @property
    def tp(self) -> int:
        return self.pricing.tp

    def pass_s(
        self,
        spec: ModelSpec,
        batch: ArrayLike,
        new_tokens: ArrayLike | None,
        context: ArrayLike,
        *,
        tree: Any = None,
        tp: int | None = None,
    ) -> Array:
        """Seconds of one pass of ``spec`` priced with this pricing (the one place drafters call the roofline).

        Drafter passes run over ``draft_tp`` devices (default one); ``tp=ctx.tp`` is for the target's own passes.
        """
        return pass_seconds(
            spec, self.pricing, batch, new_tokens, context, tree=tree, tp=self.draft_tp if tp is None else tp
        )


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


def check_depth(drafter: Any, depth: int, why: str) -> None:
    """Refuse a chain or tree deeper than ``drafter.max_drafts`` (its heads), saying ``why`` the limit holds."""
    limit = max_drafts(drafter)
    if limit is not None and depth > limit:
        raise SpecroofError(f"{drafter.name} {why}: depth must lie in [0, {limit}] (got {depth})")


def max_drafts(drafter: Any) -> int | None:
    """The most tokens ``drafter`` can draft in a round, the depth of its deepest tree (None: no bound): Hydra's
    heads, one per level; a published block drafter's ``block_size - 1``. The searches of ``plan``, ``tree`` and
    ``serve``'s goodput policy stop there instead of asking for a draft the drafter cannot make."""
    limit = getattr(drafter, "max_drafts", None)
    return None if limit is None else int(limit)


def deepest(drafter: Any, limit: int) -> int:
    """``limit`` (a search's deepest gamma or tree depth), lowered to what ``drafter`` drafts (:func:`max_drafts`)."""
    most = max_drafts(drafter)
    return min(limit, most) if most else limit


#: what the speculation functions accept as a drafter: a Drafter, a name in the grammar, a draft model
#: (ModelSpec, preset name or config.json path), or None (prompt lookup)
DrafterLike = Drafter | ModelSpec | str | None


_DERIVED: dict[tuple[Any, ...], tuple[ModelSpec, ModelSpec]] = {}


def _derived(key: tuple[Any, ...], target: ModelSpec, build: Any) -> ModelSpec:
    """``build()``, a model derived from ``target`` (EAGLE's layer, the first L layers, the heads), once per target
    object and ``key``: deriving one validates a whole ModelSpec, which costs more than pricing its pass."""
    full = (*key, id(target))
    hit = _DERIVED.get(full)
    if hit is not None and hit[0] is target:  # the entry holds the target, so its id is not reused while cached
        return hit[1]
    spec: ModelSpec = build()
    if len(_DERIVED) > 256:
        _DERIVED.clear()
    _DERIVED[full] = (target, spec)
    return spec


def _params(spec: ModelSpec) -> float:
    """The model's parameter count (ModelSpec derives it on every access; the cost model's shape holds it)."""
    return spec.total_params if spec.is_abstract else model_shape(spec).total_params


def _steps(ctx: Ctx, spec: ModelSpec, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
    """Time of ``gamma`` one-token autoregressive steps of ``spec`` starting at ``context`` (exact sum)."""
    one = chain_seconds(spec, ctx.pricing, batch, context, gamma, ctx.draft_tp)
    if one is not None:  # one configuration: the steps summed in plain floats, in the same order
        return np.asarray(one)
    gmax = int(np.max(gamma)) if np.size(gamma) else 0
    if gmax == 0:
        return np.zeros(np.broadcast_shapes(np.shape(gamma), np.shape(batch), np.shape(context)))
    # the steps are priced once per distinct (batch, context): a plan's grid repeats each pair once per gamma, and
    # a step axis over the whole grid would hold gammas x pairs x gmax passes (gigabytes at --max-gamma 140)
    shape = np.broadcast_shapes(np.shape(gamma), np.shape(batch), np.shape(context))
    pairs = np.stack([np.broadcast_to(batch, shape).ravel(), np.broadcast_to(context, shape).ravel()], axis=-1)
    uniq, which = np.unique(pairs, axis=0, return_inverse=True)
    t = ctx.pass_s(spec, uniq[:, :1], 1, uniq[:, 1:] + np.arange(gmax))
    cum = np.concatenate([np.zeros((len(uniq), 1)), np.cumsum(t, axis=-1)], axis=-1)
    g = np.broadcast_to(np.asarray(gamma), shape).ravel()
    return cum[np.ravel(which), g].reshape(shape)


def _verify(ctx: Ctx, spec: ModelSpec, gamma: ArrayLike, batch: ArrayLike, context: ArrayLike) -> Array:
    g = scalar_count(gamma, 0)
    new = g + 1 if g is not None else np.asarray(gamma) + 1  # a whole-number scalar: no array arithmetic
    return ctx.pass_s(spec, batch, new, context, tp=ctx.tp)


def _levels(ctx: Ctx, spec: ModelSpec, widths: Sequence[int], batch: int, context: int) -> float:
    """One pass of ``spec`` per tree level, each over that level's width of new tokens."""
    levels = levels_seconds(spec, ctx.pricing, widths, batch, context, ctx.draft_tp)
    if levels is not None:  # whole-number widths, one batch and context: each level in plain floats
        return levels
    w = np.asarray(widths, dtype=np.int64)
    if w.size == 0:
        return 0.0
    ctxs = context + np.concatenate([[0], np.cumsum(w)[:-1]])
    t = ctx.pass_s(spec, batch, w, ctxs)
    return float(np.sum(t))


def _tree_levels(ctx: Ctx, passes: tuple[ModelSpec, Sequence[int], int], batch: int) -> float:
    """A tree drafted level by level: ``passes`` is a drafter's ``tree_passes`` (the model, the width of each
    level's pass and the context of the first), one pass per level (:func:`_levels`)."""
    spec, widths, context = passes
    return _levels(ctx, spec, widths, batch, context)


def _check_smaller(draft: ModelSpec, target: ModelSpec) -> None:
    if _params(draft) >= _params(target):
        raise SpecroofError(
            f"drafter {draft.name} ({draft.total_params / 1e9:.2f}B params) is not smaller than "
            f"the target {target.name} ({target.total_params / 1e9:.2f}B)"
        )


def _no_memory(batch: ArrayLike, context: ArrayLike) -> Array:
    sb, sc = np.shape(batch), np.shape(context)
    return np.zeros(sb if sb == sc else np.broadcast_shapes(sb, sc))
