"""Drafters that run a smaller model of their own: a draft model (SpS), and a block drafter (DFlash)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError, check_min
from roofline.costing.passtime import (
    memory_footprint,
)
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.drafters.base import (
    Array,
    Ctx,
    _check_smaller,
    _steps,
    _tree_levels,
    _verify,
)


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
            self.spec, batch, context, weight_dtype=ctx.pricing.stored_weight_dtype, act_dtype=ctx.dtype
        )
        return np.asarray(fp.weights_bytes + fp.kv_bytes, dtype=float)


@dataclass(frozen=True)
class DraftModel(_SmallModel):
    """A separate small draft model: gamma autoregressive steps, its own weights and KV cache.

    ``first_pass_tokens``: tokens the first step of a round feeds the draft (1: the pending token alone). An
    implementation that re-feeds committed tokens its draft cache does not hold pays for them in that pass:
    specroof's harness re-feeds two each round (the pending token and the one before it, whose draft KV was
    written from a draft the target may have rejected), and its first draft step is a 2-token pass.
    """

    first_pass_tokens: int = 1
    #: a StreamingLLM cache of this many tokens (attention sinks and the most recent ones, MagicDec's standalone
    #: drafts): the draft reads and holds ``min(context, kv_window)`` cached tokens per sequence, not the context
    #: (docs/cost-model.md, section 54); None: the whole context
    kv_window: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.first_pass_tokens, bool) or not isinstance(self.first_pass_tokens, (int, np.integer)):
            raise SpecroofError(f"first_pass_tokens must be a whole number (got {self.first_pass_tokens!r})")
        if self.first_pass_tokens < 1:
            raise SpecroofError(f"first_pass_tokens must be at least 1 (got {self.first_pass_tokens})")
        if self.kv_window is not None:
            check_min("kv_window", self.kv_window, 1, integer=True)
            if self.name == f"{self._label} {self.spec.name}":
                object.__setattr__(self, "name", f"{self.name} (StreamingLLM {self.kv_window})")

    def _cached(self, context: ArrayLike) -> ArrayLike:
        """The cached tokens a draft step reads: the context, or the StreamingLLM window where it is shorter."""
        return context if self.kv_window is None else np.minimum(context, self.kv_window)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return super().extra_memory_bytes(ctx, batch, self._cached(context))

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        _check_smaller(self.spec, ctx.target)
        context = self._cached(context)
        steps = _steps(ctx, self.spec, gamma, batch, context)
        if self.first_pass_tokens == 1:
            return steps
        # the first step's pass runs first_pass_tokens tokens in place of one (none where gamma is 0)
        extra = ctx.pass_s(self.spec, batch, self.first_pass_tokens, context) - ctx.pass_s(self.spec, batch, 1, context)
        return np.asarray(steps + np.where(np.asarray(gamma) > 0, extra, 0.0))

    def tree_passes(self, ctx: Ctx, widths: Sequence[int], context: int) -> tuple[ModelSpec, Sequence[int], int]:
        _check_smaller(self.spec, ctx.target)
        return self.spec, widths, context if self.kv_window is None else min(context, self.kv_window)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        return _tree_levels(ctx, self.tree_passes(ctx, widths, context), batch)


@dataclass(frozen=True)
class ParallelBlock(_SmallModel):
    """DFlash-style block drafter: one pass of a small model proposes the whole gamma-token block."""

    _label = "block"
    #: an engine runs its round as one draft pass, the verify and the acceptance (SGLang's DFlashWorker: no draft
    #: loop, no tree built from draft steps, no draft-extend pass): it pays none of the EAGLE worker's fixed round
    #: time (``Pricing.round_fixed_for``, docs/cost-model.md, section 55)
    one_pass_round = True
    #: a published block drafter's positions per block (its config.json ``block_size``; 0: not known): a block
    #: verifies the anchor and ``block_size - 1`` drafts, the chain it is built for (:func:`default_gamma`)
    block_size: int = 0

    @property
    def default_gamma(self) -> int | None:
        return self.block_size - 1 if self.block_size > 1 else None

    @property
    def max_drafts(self) -> int | None:
        """A block of ``block_size`` positions drafts at most ``block_size - 1`` tokens (None: block not known)."""
        return self.block_size - 1 if self.block_size else None

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        _check_smaller(self.spec, ctx.target)
        g = np.maximum(gamma, 1)
        t = ctx.pass_s(self.spec, batch, g, context)
        return np.where(np.asarray(gamma) > 0, t, 0.0)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        # DDTree: one block pass gives every position's distribution; the tree is grown from them
        return float(self.draft_time(ctx, np.asarray(len(widths)), batch, context))
