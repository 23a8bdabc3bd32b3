"""Sliding-window self-drafting (MagicDec/TriForce): the target drafts over its last W cached tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import check_min
from roofline.passes.dtypes import dtype_bytes
from roofline.passes.model import ModelSpec
from roofline.speculation.drafters.base import (
    Array,
    Ctx,
    _steps,
    _tree_levels,
    _verify,
)


@dataclass(frozen=True)
class SlidingWindowSelfDraft:
    """The target drafts for itself over only the last ``window`` cached tokens (MagicDec/TriForce style).

    At long context the KV read dominates a step, so a windowed self-draft is much
    cheaper than a full step while sharing the target's weights. Every draft step reads the
    window's cache (a StreamingLLM budget: attention sinks and the most recent tokens,
    ``window`` in all) and the target's weights, sharded like the target's; the verify pass
    reads the whole context. The window is a cache of its own (MagicDec keeps the draft's
    StreamingLLM cache beside the target's: ``draft_cachelens``), so it adds ``batch x
    min(context, window)`` tokens of KV to the devices (docs/cost-model.md, section 31).
    """

    window: int
    name: str = ""

    #: the target drafting for itself: its passes are sharded like the target's
    shares_target_layers = True

    def __post_init__(self) -> None:
        check_min("window", self.window, 1, integer=True)
        object.__setattr__(self, "name", self.name or f"self-draft window {self.window}")

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _steps(ctx, ctx.target, gamma, batch, np.minimum(context, self.window))

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        # the window's own cache, heads split over the target's devices like its KV (per device, as speedup adds it)
        pr = ctx.pricing
        tokens = np.asarray(batch) * np.minimum(np.asarray(context), self.window)
        kv = ctx.target.kv_bytes(tokens, dtype_bytes(pr.kv_dtype or pr.dtype))
        return np.asarray(kv, dtype=float) / pr.tp

    def tree_passes(self, ctx: Ctx, widths: Sequence[int], context: int) -> tuple[ModelSpec, Sequence[int], int]:
        return ctx.target, widths, min(context, self.window)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        return _tree_levels(ctx, self.tree_passes(ctx, widths, context), batch)


#: EAGLE-1's default tree (EAGLE repository, model/choices.py ``mc_sim_7b_63``): 25 nodes, depth 5
