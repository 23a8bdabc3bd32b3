"""The drafters people run, by name, and the draft trees they ship with.

``named_drafter("eagle", target)`` and friends give :mod:`roofline.speculative` drafter
objects priced the way each method runs (docs/cost-model.md, section 7):

* ``eagle`` / ``eagle2`` / ``eagle3``: one decoder layer of the target's shape on the
  target's features, with an input projection (2d -> d) and the target's LM head,
  one pass per tree level. EAGLE-1 drafts a static tree (:data:`EAGLE_TREE`, 25 nodes);
  EAGLE-2/3 expand the top-k (10) nodes per level for ``depth`` levels and verify the
  best 59 (total_token = 60 with the root), the defaults of the EAGLE repository.
* ``medusa``: five heads (each a d x d residual block and its own d x vocab projection)
  evaluated once on the last hidden state; Medusa's ``mc_sim_7b_63`` tree (63 nodes).
* ``hydra``: heads like Medusa's, but each conditioned on the previous head's token, so
  they run one after another: one pass per tree level (Medusa's tree).
* ``mtp``: multi-token-prediction modules (DeepSeek-V3): priced as EAGLE's layer, one
  module pass per drafted token (a chain; MTP ships no tree).
* ``model:NAME``: a separate draft model (SpS); ``prompt-lookup``; ``early-exit:L``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.errors import SpecroofError
from roofline.model import ModelSpec, get_model
from roofline.speculative import (
    Ctx,
    DraftModel,
    EarlyExit,
    Heads,
    PromptLookup,
    _levels,
    _no_memory,
    _steps,
    _verify,
    as_drafter,
)
from roofline.trees import Tree

if TYPE_CHECKING:
    from roofline.speculative import DrafterLike

Array = npt.NDArray[np.float64]

#: EAGLE-1's default tree (EAGLE repository, model/choices.py ``mc_sim_7b_63``): 25 nodes, depth 5
EAGLE_TREE_PATHS = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]  # fmt: skip

#: Medusa's default tree (Medusa repository, medusa/model/medusa_choices.py ``mc_sim_7b_63``): 63 nodes, depth 4
MEDUSA_TREE_PATHS = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5],
    [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8],
    [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0],
    [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0],
    [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1],
    [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
]  # fmt: skip


def _dynamic_tree(n_nodes: int, depth: int, top_k: int) -> Tree:
    """A tree of ``n_nodes`` spread over ``depth`` levels, at most ``top_k`` children per node and
    at most ``top_k**l`` nodes at level l: the shape EAGLE-2 verifies after reranking (for pricing)."""
    per_level = [min(top_k**level, n_nodes // depth) for level in range(1, depth + 1)]
    per_level[-1] += n_nodes - sum(per_level)
    parents: list[int] = []
    prev = [-1]
    for width in per_level:
        level = [prev[i % len(prev)] for i in range(width)]
        start = len(parents)
        parents.extend(level)
        prev = list(range(start, start + width))
    return Tree(parents)


#: named trees: ``--tree NAME`` in the CLI, ``tree="NAME"`` in :func:`roofline.speculative.predict_speedup`
TREE_PRESETS: dict[str, Tree] = {
    "eagle": Tree.from_paths(EAGLE_TREE_PATHS),
    "medusa": Tree.from_paths(MEDUSA_TREE_PATHS),
    "eagle2": _dynamic_tree(59, 5, 10),
    "eagle3": _dynamic_tree(59, 7, 10),
}


def tree_preset(tree: Tree | str | Sequence[int]) -> Tree:
    """A :class:`Tree` from itself, a preset name (:data:`TREE_PRESETS`) or a parent array."""
    if isinstance(tree, Tree):
        return tree
    if isinstance(tree, str):
        if tree not in TREE_PRESETS:
            raise SpecroofError(f"unknown tree {tree!r}: choose one of {', '.join(TREE_PRESETS)}")
        return TREE_PRESETS[tree]
    return Tree(list(tree))


@dataclass(frozen=True)
class Eagle:
    """EAGLE-1/2/3: a one-layer draft on the target's features, one pass per tree level (see the module docstring)."""

    version: int = 1
    top_k: int = 10
    name: str = ""

    def __post_init__(self) -> None:
        if self.version not in (1, 2, 3):
            raise SpecroofError(f"EAGLE version must be 1, 2 or 3 (got {self.version})")
        object.__setattr__(self, "name", self.name or ("eagle" if self.version == 1 else f"eagle{self.version}"))

    def layer_spec(self, target: ModelSpec) -> ModelSpec:
        """One decoder layer of the target's shape, its LM head, and the 2d -> d input projection.

        The projection's 2 d^2 weights are counted as extra MLP width (2 d / 3 more columns in
        each of the three MLP matrices): the same bytes and FLOPs in one pass.
        """
        extra_ff = -(-2 * target.d_model // 3)
        return dataclasses.replace(
            target, name=f"{self.name} layer", n_layers=1, n_dense_layers=0, d_ff=target.d_ff + extra_ff
        )

    @property
    def default_tree(self) -> Tree:
        return TREE_PRESETS[self.name if self.name in TREE_PRESETS else "eagle"]

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _steps(ctx, self.layer_spec(ctx.target), gamma, batch, context)

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        layer = self.layer_spec(ctx.target)
        shared_head = ctx.target.d_model * ctx.target.vocab_size
        return _no_memory(batch, context) + (layer.total_params - shared_head) * 2.0

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        if self.version == 1:  # a static tree: each level's nodes in one pass
            return _levels(ctx, self.layer_spec(ctx.target), widths, batch, context)
        # EAGLE-2/3 expand the top-k of every level, whatever the verified tree keeps
        return _levels(ctx, self.layer_spec(ctx.target), [1] + [self.top_k] * (len(widths) - 1), batch, context)


@dataclass(frozen=True)
class SequentialHeads(Heads):
    """Hydra: Medusa-shaped heads run one after another (each sees the previous head's token)."""

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        one = float(self.draft_time(ctx, np.asarray(1), batch, context)) / self.n_heads
        return one * len(widths)


def default_tree(drafter: DrafterLike) -> Tree | None:
    """The tree a drafter ships with (EAGLE's, Medusa's), or None for chain drafters."""
    if isinstance(drafter, Eagle):
        return None if drafter.name == "mtp" else drafter.default_tree
    if isinstance(drafter, Heads):
        return TREE_PRESETS["medusa"]
    return None


def named_drafter(name: Any, target: ModelSpec | str | None = None) -> Any:
    """A drafter from a name: eagle, eagle2, eagle3, mtp, medusa, hydra, model:NAME, prompt-lookup, early-exit:L.

    A preset model name alone (``llama-68m``) is a separate draft model; a drafter object
    is returned as it is.
    """
    if not isinstance(name, str):
        return as_drafter(name)
    key = name.strip().lower()
    if key in ("eagle", "eagle1"):
        return Eagle(1)
    if key in ("eagle2", "eagle3"):
        return Eagle(int(key[-1]))
    if key == "mtp":  # DeepSeek-style MTP modules: one block + projection per extra token, shared embedding and head
        return Eagle(1, name="mtp")
    if key == "medusa":
        return Heads(5, name="medusa")
    if key == "hydra":
        return SequentialHeads(5, name="hydra")
    if key in ("prompt-lookup", "pld", "ngram"):
        return PromptLookup()
    if key.startswith("early-exit:"):
        try:
            layers = int(key.split(":", 1)[1])
        except ValueError:
            raise SpecroofError(f"early-exit needs a layer count, e.g. early-exit:8 (got {name!r})") from None
        return EarlyExit(layers)
    if key.startswith("model:"):
        return DraftModel(get_model(name.split(":", 1)[1]))
    try:
        return DraftModel(get_model(name))
    except SpecroofError:
        raise SpecroofError(
            f"unknown drafter {name!r}: use eagle, eagle2, eagle3, mtp, medusa, hydra, prompt-lookup, "
            "early-exit:L or model:NAME (a preset model or a config.json)"
        ) from None
