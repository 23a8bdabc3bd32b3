"""Hydra++: a prefix decoder layer, then sequential heads conditioned on the path's tokens, one per tree level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import check_min
from roofline.costing.passtime import (
    memory_footprint,
    pass_cost,
)
from roofline.costing.timemodel import _dense_layer_kernels as dense_layer_kernels
from roofline.passes.dtypes import dtype_bytes
from roofline.passes.model import ModelSpec
from roofline.speculation.drafters.base import (
    Array,
    Ctx,
    _verify,
    check_depth,
)
from roofline.speculation.drafters.tree_presets import (
    TREE_PRESETS,
)
from roofline.speculation.trees import Tree


@dataclass(frozen=True)
class Hydra:
    """Hydra++ as released for Vicuna (``hydra_head_arch = "prefix-mlp"``, ``grounded_heads``), priced as built.

    From the Hydra source (zankner/Hydra README's Hydra++ training command: 4 heads, 4 MLP
    layers, prefix-mlp, grounded; the copy Spec-Bench runs, hemingkx/Spec-Bench
    model/hydra/hydra_heads/prefix_mlp_head.py, ``_grounded_proposal``):

    * a **prefix layer**: one decoder layer of the target's shape (its own KV cache, no LM
      head; its embedding table is allocated but never read) runs over the round's accepted
      tokens' hidden states;
    * **head i** (0-based, one per tree level) takes the prefix output concatenated with the
      embeddings of the i + 1 tokens on the path so far: a residual block of two
      ``(i + 2) d x d`` matrices, then ``layers - 1`` applications of one shared ``d x d``
      block (``[Dropout, ResBlock] * (layers - 1)`` repeats the same module), and its own
      ``d x vocab`` head. It runs over one row per node of level i that has children (the
      root for head 0), so the heads run one after another;
    * a Python loop over those nodes takes each one's top-k and gathers the embeddings of the
      children that are themselves expanded, kernel by kernel; ``torch.tensor([argmax])``
      reads the device once, after the prefix layer.

    The draft is two kernel streams, each the larger of its device time (bytes and FLOPs
    through the roofline) and its issue time (kernels x the engine's per-kernel host cost):
    the prefix layer up to the read, then the heads (docs/cost-model.md, section 17).
    """

    n_heads: int = 4
    layers: int = 4
    name: str = "hydra"

    def __post_init__(self) -> None:
        check_min("hydra heads", self.n_heads, 1, integer=True)
        check_min("hydra head layers", self.layers, 1, integer=True)

    #: kernels of one head from the source: the conditioned block (two matrices, SiLU, add), each shared block
    #: (matrix, SiLU, add) and the head's matrix
    @property
    def head_kernels(self) -> int:
        return 4 + 3 * (self.layers - 1) + 1

    def head_read_params(self, target: ModelSpec, i: int) -> float:
        """Weights head ``i`` streams per evaluation (the shared block once per application)."""
        d = target.d_model
        return (2 * (i + 2) + (self.layers - 1)) * d * d + d * target.vocab_size

    def head_params(self, target: ModelSpec) -> float:
        """Weights every head holds (the shared block once)."""
        d = target.d_model
        shared = 1 if self.layers > 1 else 0
        return float(sum((2 * (i + 2) + shared) * d * d + d * target.vocab_size for i in range(self.n_heads)))

    def prefix_spec(self, target: ModelSpec) -> ModelSpec:
        return target.one_layer(f"{self.name} prefix layer")

    @property
    def default_tree(self) -> Tree:
        return TREE_PRESETS["hydra"]

    @property
    def max_drafts(self) -> int:
        """One head per draft level: a chain or tree at most ``n_heads`` deep."""
        return self.n_heads

    def _check_depth(self, depth: int) -> None:
        check_depth(self, depth, f"has {self.n_heads} heads, one per draft level")

    def _draft_s(self, ctx: Ctx, tree: Tree, batch: ArrayLike, context: ArrayLike) -> Array:
        """Seconds of one proposal of ``tree`` (broadcast over ``batch`` and ``context``)."""
        shape = np.broadcast_shapes(np.shape(batch), np.shape(context))
        if tree.n_nodes == 0:
            return np.zeros(shape)
        self._check_depth(tree.depth)
        pr, target = ctx.pricing, ctx.target
        e = pr.engine
        h = float(e.host_launch_s) if e is not None and e.launches else 0.0
        # the nodes that have children, per level (level 0: the root), and those with a child that has children
        has_children = np.zeros(tree.n_nodes + 1, dtype=bool)
        has_children[tree.parents + 1] = True  # index 0 is the root
        level = np.concatenate([[0], tree.depths])
        parents = np.bincount(level[has_children], minlength=tree.depth)[: tree.depth]
        parent_of = np.concatenate([[-1], tree.parents + 1])
        grand = np.zeros_like(has_children)
        grand[parent_of[has_children][parent_of[has_children] >= 0]] = True
        expands = np.bincount(level[grand], minlength=tree.depth)[: tree.depth]
        # 1. the prefix layer over the accepted tokens (at most depth + 1; at these sizes memory bound), then the read
        prefix = _device_s(ctx, self.prefix_spec(target), batch, tree.depth + 1, context, skip=("embed", "lm_head"))
        prefix = prefix + pr.time_model.layer_overhead_s
        k_prefix = (
            _layer_kernels(e) + (e.launches.get("norm", 0.0) if e is not None and h else 0.0) + 3
        )  # the layer and the final norm; then argmax, the read (torch.tensor of it) and its embedding
        seg_prefix = np.maximum(prefix, h * k_prefix)
        # 2. the heads, one per level over that level's expanded nodes, and the loop's top-k and gathers
        heads = sum(
            _device_s(ctx, ModelSpec.from_params(self.head_read_params(target, i)), batch, int(r), 0)
            for i, r in enumerate(parents.tolist())
        )
        k_heads = (
            tree.depth * self.head_kernels + 2 * int(parents.sum()) + 3 * int(expands.sum())
            + int(np.count_nonzero(expands)) + 2
        )  # fmt: skip
        seg_heads = np.maximum(heads, h * k_heads)
        return np.broadcast_to(seg_prefix + seg_heads, shape).astype(float)

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        g = np.asarray(gamma, dtype=np.int64)
        gmax = int(np.max(g)) if g.size else 0
        self._check_depth(gmax)
        # a chain of g drafts is a g-level tree: at most n_heads + 1 distinct values to price
        per = np.stack([self._draft_s(ctx, Tree.chain(k), batch, context) for k in range(gmax + 1)], axis=-1)
        shape = np.broadcast_shapes(g.shape, per.shape[:-1])
        per = np.broadcast_to(per, (*shape, gmax + 1))
        return np.take_along_axis(per, np.broadcast_to(g, shape)[..., None], axis=-1)[..., 0]

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        t = ctx.target
        prefix = self.prefix_spec(t)
        # the prefix layer's weights with its (unused) embedding and final norm, its KV cache, and the heads
        fp = memory_footprint(prefix, batch, context, weight_dtype=ctx.dtype, act_dtype=ctx.dtype)
        prefix_params = prefix.total_params - (0 if t.tie_embeddings else t.lm_head_params)
        weights = (prefix_params + self.head_params(t)) * dtype_bytes(ctx.dtype)
        return np.asarray(fp.kv_bytes, dtype=float) + weights

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        # widths alone do not say which nodes have children: price the widest-first tree of those widths
        return float(self._draft_s(ctx, _tree_of_widths(widths), batch, context))

    def tree_draft_time_of(self, ctx: Ctx, tree: Tree, batch: int, context: int) -> float:
        """Seconds to draft exactly ``tree`` (which nodes have children sets the heads' rows)."""
        return float(self._draft_s(ctx, tree, batch, context))


#: the earlier name of :class:`Hydra`
SequentialHeads = Hydra


def _device_s(
    ctx: Ctx, spec: ModelSpec, batch: ArrayLike, tokens: ArrayLike, context: ArrayLike, skip: tuple[str, ...] = ()
) -> Array:
    """Device seconds of one pass of ``spec`` without the engine's host terms, leaving out the operators in ``skip``."""
    pr = ctx.pricing
    cost = pass_cost(spec, pr, batch, tokens, context)
    op_mem, op_comp = pr.time_model.operator_times(cost, pr.dtype, ctx.draft_tp)
    op_t = pr.time_model.operator_seconds(op_mem, op_comp)
    keep = np.array([name not in skip for name in cost.operators])
    return np.asarray(np.sum(op_t[keep], axis=0), dtype=float)


def _layer_kernels(engine: Any) -> float:
    """Kernels an eager engine issues for one dense decoder layer (0 for an engine without a launch table)."""
    if engine is None or not engine.launches:
        return 0.0
    return float(dense_layer_kernels(engine))


def _tree_of_widths(widths: Sequence[int]) -> Tree:
    """A tree with ``widths[l]`` nodes at level l + 1, each level's nodes handed to the nodes above in turn."""
    parents: list[int] = []
    start, prev = 0, [-1]
    for w in (int(x) for x in widths):
        parents.extend(prev[i % len(prev)] for i in range(w))
        prev, start = list(range(start, start + w)), start + w
    return Tree(parents)
