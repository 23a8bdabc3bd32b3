"""Medusa heads: heads on the target's last hidden state, all evaluated in one pass."""

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
    _derived,
    _no_memory,
    _verify,
    check_depth,
)


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

    @property
    def max_drafts(self) -> int:
        """Head i proposes the token i + 1 places ahead: a chain or tree at most ``n_heads`` deep."""
        return self.n_heads

    def _check_depth(self, depth: int) -> None:
        n = self.n_heads
        check_depth(
            self, depth, f"(Medusa's head i proposes the token i + 1 places ahead, so {n} heads draft {n} at most)"
        )

    def head_params(self, target: ModelSpec) -> float:
        if self.params is not None:
            return float(self.params)
        return self.n_heads * (target.d_model**2 + target.d_model * target.vocab_size)

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        if np.size(gamma):
            self._check_depth(int(np.max(gamma)))
        target = ctx.target
        heads = _derived(
            ("heads", self), target, lambda: ModelSpec.from_params(self.head_params(target), name=self.name)
        )
        t = ctx.pass_s(heads, batch, 1, 0)
        if np.ndim(gamma) == 0 and np.ndim(t) == 0 and np.ndim(context) == 0:  # one configuration
            return np.asarray(float(t) if gamma > 0 else 0.0)
        shape = np.broadcast_shapes(np.shape(gamma), np.shape(t), np.shape(context))
        return np.where(np.broadcast_to(gamma, shape) > 0, np.broadcast_to(t, shape), 0.0)

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return _no_memory(batch, context) + self.head_params(ctx.target) * dtype_bytes(ctx.dtype)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        # the heads see only the last hidden state: one pass proposes every level's top-k
        self._check_depth(len(widths))
        return float(self.draft_time(ctx, np.asarray(1 if len(widths) else 0), batch, context))
