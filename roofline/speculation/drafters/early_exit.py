"""Early exit (LayerSkip): the target's first layers draft, the remaining layers finish the verify pass."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError
from roofline.passes.model import ModelSpec
from roofline.speculation.drafters.base import (
    Array,
    Ctx,
    _derived,
    _no_memory,
    _steps,
    _tree_levels,
    _verify,
)
from roofline.speculation.trees import Tree


def _first_layers_s(
    ctx: Ctx, target: ModelSpec, rest: ModelSpec, batch: ArrayLike, new: ArrayLike, context: ArrayLike
) -> Array:
    """Seconds of the target's first layers alone over ``new`` tokens after ``context``: the whole target's pass
    less the pass of its remaining layers (``rest``) over the same tokens, so that the embedding, the head and the
    pass's own host time, which a layer range does not pay twice, cancel (docs/cost-model.md, section 51)."""
    full = ctx.pass_s(target, batch, new, context, tp=ctx.tp)
    return np.asarray(full - ctx.pass_s(rest, batch, new, context, tp=ctx.tp))


def _split(target: ModelSpec, exit_layer: int, first: bool) -> dict[str, int]:
    """The layer counts of the target's first ``exit_layer`` layers (``first``) or of those after them. A target whose
    first layers are dense (DeepSeek-V3's 3 before its MoE layers) keeps them among the first; single-block stacks
    (Nemotron-H) keep :meth:`ModelSpec.replace`'s shares."""
    n = exit_layer if first else target.n_layers - exit_layer
    out = {"n_layers": n}
    if target.n_dense_layers and not (target.n_mixer_only_layers or target.n_mlp_only_layers):
        dense = target.n_dense_layers
        out["n_dense_layers"] = min(dense, exit_layer) if first else max(dense - exit_layer, 0)
    return out


@dataclass(frozen=True)
class EarlyExit:
    """Self-speculation (LayerSkip): the target's first ``layers`` layers plus its head draft.

    The round's verification is LayerSkip's ``forward_remainder``: the last drafted token, which no draft step fed,
    runs through the first ``layers`` layers (one token, attending to the KV the draft steps wrote), then all
    gamma + 1 tokens run through the remaining layers from the exit layer's cached hidden states. Reusing the
    draft's KV saves only the first layers' KV reads and FLOPs over the other gamma tokens: the weights of every
    layer are read in the round's verify pass as in a full one (docs/cost-model.md, section 51).
    ``reuse_kv=False`` prices an implementation that recomputes every layer over the gamma + 1 tokens (specroof's
    own harness). No extra weights or KV.
    """

    layers: int
    name: str = ""
    reuse_kv: bool = True

    #: the draft passes are the target's own first layers: sharded like the target under TP, whatever the engine
    shares_target_layers = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name or f"early exit @{self.layers}")

    def _first(self, target: ModelSpec) -> ModelSpec:
        """The target's first ``layers`` layers (the drafter)."""
        return _derived(("first", self.layers), target, lambda: target.replace(**_split(target, self.layers, True)))

    def _rest(self, target: ModelSpec) -> ModelSpec:
        """The target's layers after the exit (the remainder's pass over every token of the round)."""
        return _derived(("rest", self.layers), target, lambda: target.replace(**_split(target, self.layers, False)))

    def _check(self, ctx: Ctx) -> None:
        if not 1 <= self.layers < ctx.target.n_layers:
            raise SpecroofError(f"early-exit layers must lie in [1, {ctx.target.n_layers - 1}] (got {self.layers})")

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        self._check(ctx)
        return _steps(ctx, self._first(ctx.target), gamma, batch, context)

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        self._check(ctx)
        t = ctx.target
        if not self.reuse_kv:
            return _verify(ctx, t, gamma, batch, context)
        rest = self._rest(t)
        # the remaining layers over the gamma + 1 tokens, and the first layers over the last drafted token alone
        # (after the context and the gamma tokens before it, whose first-layer KV the draft steps wrote)
        last = np.asarray(context) + np.asarray(gamma)
        return np.asarray(_verify(ctx, rest, gamma, batch, context) + _first_layers_s(ctx, t, rest, batch, 1, last))

    def tree_verify_time(self, ctx: Ctx, tree: Tree, batch: ArrayLike, context: ArrayLike) -> Array | None:
        """The tree round's remainder pass (:meth:`verify_time` for a tree): the last level's nodes, which no draft
        pass fed, through the first layers after the nodes the levels before fed, then the pending token and every
        node tree-masked through the remaining layers; None without KV reuse (the target's whole tree-masked pass,
        as for any drafter)."""
        if not self.reuse_kv:
            return None
        self._check(ctx)
        t, widths = ctx.target, tree.widths
        rest = self._rest(t)
        depths = np.concatenate([[1], tree.depths + 1])  # the pending token is the root
        t_rest = ctx.pass_s(rest, batch, None, context, tree=depths, tp=ctx.tp)
        if len(widths) == 0:  # no node: the pending token alone, through every layer
            return np.asarray(t_rest + _first_layers_s(ctx, t, rest, batch, 1, context))
        w = int(widths[-1])
        fed = np.asarray(context) + (int(tree.n_nodes) + 1 - w)
        return np.asarray(t_rest + _first_layers_s(ctx, t, rest, batch, w, fed))

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return _no_memory(batch, context)

    def tree_passes(self, ctx: Ctx, widths: Sequence[int], context: int) -> tuple[ModelSpec, Sequence[int], int]:
        self._check(ctx)
        return self._first(ctx.target), widths, context

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        return _tree_levels(ctx, self.tree_passes(ctx, widths, context), batch)
