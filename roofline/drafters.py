"""Drafters: every way of proposing tokens, priced by the cost model, named by one grammar.

A drafter knows what one round costs it: :meth:`draft_time` for a chain of ``gamma``
drafts, :meth:`tree_draft_time` for a tree drafted level by level, :meth:`verify_time`
for the target's pass over the drafts, and what it adds to device memory. Each prices
its passes through a :class:`Ctx` (the target and a :class:`roofline.pricing.Pricing`),
the one place drafters call the roofline; :func:`round_time` is the one round formula
every speculation function uses (docs/cost-model.md, sections 4, 5 and 7).

The grammar (:func:`as_drafter`, the only resolver; ``named_drafter`` is the same function):

* ``eagle`` / ``eagle2`` / ``eagle3``: one decoder layer of the target's shape on the
  target's features, with an input projection (2d -> d) and the target's LM head,
  one pass per tree level. EAGLE-1 drafts a static tree (25 nodes); EAGLE-2/3 expand the
  top-k (10) nodes per level for ``depth`` levels and verify the best 59 (total_token =
  60 with the root), the defaults of the EAGLE repository.
* ``mtp[:N]``: N multi-token-prediction modules (DeepSeek-V3 ships 1), each priced as
  EAGLE's layer, one module pass per drafted token; N is also the default draft length.
  More drafts than modules reuse them in turn, as vLLM does (``spec_step_idx %
  num_mtp_layers`` in vllm/model_executor/models/deepseek_mtp.py).
* ``medusa[:HEADS]``: HEADS (default 5) heads, each a d x d residual block and its own
  d x vocab projection, evaluated once on the last hidden state; Medusa's
  ``mc_sim_7b_63`` tree (63 nodes).
* ``hydra``: Hydra++ as released (:class:`Hydra`): a prefix decoder layer, then four
  heads (4-layer MLPs conditioned on the path's tokens, each with its own LM head) one
  after another, one per tree level over that level's expanded nodes; Hydra's default
  tree (``mc_sim_7b_63``, the same 63 nodes as Medusa's).
* ``model:NAME_OR_CONFIG``: a separate draft model (SpS); a bare preset name, a
  config.json path or a :class:`roofline.model.ModelSpec` mean the same.
* ``early-exit:L``: the target's first L layers (LayerSkip); ``prompt-lookup[:MATCH]``: n-grams
  from the context on the host, MATCH the share of requests whose n-gram matched (default 1); ``block:NAME``: a DFlash-style block drafter (one pass of
  NAME drafts the whole block); ``dflash[:ID]``: a published DFlash drafter (the target's, or by its Hugging Face id or
  config.json, with the block size its config gives: :mod:`roofline.drafter_presets`); ``window:W``: the target drafting over its last W cached
  tokens (MagicDec/TriForce).
"""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.cost import frozen, model_shape, scalar_count
from roofline.dtypes import dtype_bytes
from roofline.errors import SpecroofError, check_min
from roofline.model import ModelSpec, get_model
from roofline.passtime import (
    chain_seconds,
    levels_seconds,
    memory_footprint,
    pass_cost,
    pass_seconds,
    scalar_pricer,
    visible_seconds,
)
from roofline.pricing import Pricing, pricing_of
from roofline.timemodel import _dense_layer_kernels as dense_layer_kernels
from roofline.trees import Tree, TreeLevels

Array = npt.NDArray[np.float64]

#: the grammar, as the error messages and the CLI's help print it
DRAFTER_GRAMMAR = "eagle|eagle2|eagle3|mtp[:N]|medusa[:HEADS]|hydra|model:NAME_OR_CONFIG|early-exit:L|prompt-lookup[:MATCH]|block:NAME|dflash[:ID]|window:W"


@dataclass(frozen=True, init=False)
class Ctx:
    """What a drafter needs to price itself: the target and the :class:`roofline.pricing.Pricing` of its passes.

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

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.first_pass_tokens, bool) or not isinstance(self.first_pass_tokens, (int, np.integer)):
            raise SpecroofError(f"first_pass_tokens must be a whole number (got {self.first_pass_tokens!r})")
        if self.first_pass_tokens < 1:
            raise SpecroofError(f"first_pass_tokens must be at least 1 (got {self.first_pass_tokens})")

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        _check_smaller(self.spec, ctx.target)
        steps = _steps(ctx, self.spec, gamma, batch, context)
        if self.first_pass_tokens == 1:
            return steps
        # the first step's pass runs first_pass_tokens tokens in place of one (none where gamma is 0)
        extra = ctx.pass_s(self.spec, batch, self.first_pass_tokens, context) - ctx.pass_s(self.spec, batch, 1, context)
        return np.asarray(steps + np.where(np.asarray(gamma) > 0, extra, 0.0))

    def tree_passes(self, ctx: Ctx, widths: Sequence[int], context: int) -> tuple[ModelSpec, Sequence[int], int]:
        _check_smaller(self.spec, ctx.target)
        return self.spec, widths, context

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        return _tree_levels(ctx, self.tree_passes(ctx, widths, context), batch)


def _first_layers_s(
    ctx: Ctx, target: ModelSpec, rest: ModelSpec, batch: ArrayLike, new: ArrayLike, context: ArrayLike
) -> Array:
    """Seconds of the target's first layers alone over ``new`` tokens after ``context``: the whole target's pass
    less the pass of its remaining layers (``rest``) over the same tokens, so that the embedding, the head and the
    pass's own host time, which a layer range does not pay twice, cancel (docs/cost-model.md, section 51)."""
    full = ctx.pass_s(target, batch, new, context, tp=ctx.tp)
    return np.asarray(full - ctx.pass_s(rest, batch, new, context, tp=ctx.tp))


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
        return _derived(("first", self.layers), target, lambda: target.replace(n_layers=self.layers))

    def _rest(self, target: ModelSpec) -> ModelSpec:
        """The target's layers after the exit (the remainder's pass over every token of the round)."""
        return _derived(("rest", self.layers), target, lambda: target.replace(n_layers=target.n_layers - self.layers))

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
        return float(self.draft_time(ctx, np.asarray(1 if len(widths) else 0), batch, context))


@dataclass(frozen=True)
class ParallelBlock(_SmallModel):
    """DFlash-style block drafter: one pass of a small model proposes the whole gamma-token block."""

    _label = "block"
    #: a published block drafter's positions per block (its config.json ``block_size``; 0: not known): a block
    #: verifies the anchor and ``block_size - 1`` drafts, the chain it is built for (:func:`default_gamma`)
    block_size: int = 0

    @property
    def default_gamma(self) -> int | None:
        return self.block_size - 1 if self.block_size > 1 else None

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
    """Prompt lookup / n-gram drafting: proposals come from the context on the host, at no device cost.

    ``match_rate`` is the share of requests whose last n-gram is found in their context in a
    step. vLLM drafts and verifies only those (vllm/v1/spec_decode/ngram_proposer.py: a
    request without a match gets an empty draft list, and the scheduler gives it one token),
    so the verify pass carries ``gamma + 1`` tokens for that share of the batch and one token
    for the rest, and a round emits ``1 + match_rate x (E - 1)`` tokens per request where E
    is the mean accepted length of the matched ones (vLLM's, which counts drafted requests
    only). The default 1 (every request matched) is the earlier pricing: no published
    per-step match share was found to default to.
    """

    name: str = "prompt lookup"
    match_rate: float = 1.0

    def __post_init__(self) -> None:
        m = self.match_rate
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0.0 < m <= 1.0:
            raise SpecroofError(f"prompt-lookup match_rate must lie in (0, 1] (got {m!r})")
        if m != 1.0 and self.name == "prompt lookup":
            object.__setattr__(self, "name", f"prompt lookup ({m:.0%} matched)")

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        shapes = (np.shape(gamma), np.shape(batch), np.shape(context))
        return np.zeros(() if shapes == ((), (), ()) else np.broadcast_shapes(*shapes))

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        if self.match_rate == 1.0:
            return _verify(ctx, ctx.target, gamma, batch, context)
        return _mixed_verify(ctx, self.match_rate, gamma, batch, context)

    def tokens_per_round(self, mean_accepted: ArrayLike) -> Array:
        """Tokens a round emits per request, all requests together, from the matched requests' mean accepted length."""
        return 1.0 + self.match_rate * (np.asarray(mean_accepted, dtype=float) - 1.0)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return _no_memory(batch, context)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        return 0.0


def _mixed_verify(ctx: Ctx, share: float, gamma: ArrayLike, batch: ArrayLike, context: ArrayLike) -> Array:
    """The target's pass over a batch where ``share`` of the requests verify gamma + 1 tokens and the rest one.

    Every FLOP and byte of a pass is linear in the tokens each request carries, at a fixed
    batch and context (the weights and the KV read do not depend on them), so the mixed pass
    is the two uniform passes' costs blended per operator and then priced once through the
    roofline (not their times blended: the blend of two times would miss where the mixed pass
    crosses the ridge). MoE layers' distinct experts are blended too, a slight undercount (they
    grow concavely with the tokens).
    """
    pr = ctx.pricing
    g1 = np.asarray(gamma) + 1
    many = pass_cost(ctx.target, pr, batch, g1, context)
    one = pass_cost(ctx.target, pr, batch, np.ones_like(g1), context)
    w = float(share)

    def mix(a: Any, b: Any) -> Any:
        return (1.0 - w) * np.asarray(a, dtype=float) + w * np.asarray(b, dtype=float)

    cost = dataclasses.replace(
        many,
        flops=mix(one.flops, many.flops),
        bytes_weights=mix(one.bytes_weights, many.bytes_weights),
        bytes_kv_read=mix(one.bytes_kv_read, many.bytes_kv_read),
        bytes_kv_write=mix(one.bytes_kv_write, many.bytes_kv_write),
        bytes_act=mix(one.bytes_act, many.bytes_act),
        new_tokens=mix(one.new_tokens, many.new_tokens),
        allreduce_bytes=mix(one.allreduce_bytes, many.allreduce_bytes),
        experts_touched=mix(one.experts_touched, many.experts_touched),
        routed_experts=mix(one.routed_experts, many.routed_experts),
        expert_format_bytes=mix(one.expert_format_bytes, many.expert_format_bytes),
    )
    return pr.time_model.pass_seconds(cost, pr.dtype, overhead_s=pr.overhead_s, tp=ctx.tp)


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
    # Hydra's own default (hydra_choices = mc_sim_7b_63 in Spec-Bench's evaluation/inference_hydra.py and in
    # HydraModel.hydra_generate; model/hydra/hydra_choices.py): the same 63 rank paths as Medusa's file
    "hydra": Tree.from_paths(MEDUSA_TREE_PATHS),
}


#: how ``--tree`` / ``tree=`` may be written, for the error messages and the CLI's help
TREE_FORMS = (
    "a preset ({presets}), an inline parent array (parents:-1,0,0,1), rank paths (Medusa choices or vLLM's "
    "speculative_token_tree: [[0],[1],[0,0]] or [(0,), (1,), (0, 0)]), or a JSON file holding one of those, "
    '{{"parents": [...]}} or a Sequoia growmap {{"Successors": [...]}}'
)


def tree_preset(tree: Tree | str | Sequence[Any] | dict[str, Any]) -> Tree:
    """The one tree parser: a :class:`Tree` from itself or from any form in :data:`TREE_FORMS`.

    A list of integers is a parent array (-1: child of the committed prefix); a list of lists
    is rank paths (each node the sibling ranks on its path: Medusa's ``medusa_choices``,
    Hydra's ``hydra_choices``, EAGLE-1's ``choices.py``, vLLM's ``speculative_token_tree``); a
    mapping with ``Successors`` is a Sequoia growmap (children per node, node 0 the root), with
    ``parents`` the JSON :meth:`roofline.trees.Tree.to_json` writes, and with
    ``speculative_token_tree`` a vLLM speculative config. Text is a preset name, ``parents:``
    followed by the array, a literal of one of those, or a file holding one.
    """
    if isinstance(tree, Tree):
        return tree
    if isinstance(tree, str):
        return _tree_from_text(tree)
    return _tree_from_data(tree, "tree")


def _tree_forms() -> str:
    return TREE_FORMS.format(presets=", ".join(TREE_PRESETS))


def _tree_from_text(text: str) -> Tree:
    t = text.strip()
    if t in TREE_PRESETS:
        return TREE_PRESETS[t]
    kind, sep, rest = t.partition(":")
    if sep and kind.strip().lower() == "parents":
        items = rest.strip().strip("[]").replace(",", " ").split()
        try:
            parents = [int(x) for x in items]
        except ValueError:
            raise SpecroofError(
                f"parents: takes whole numbers separated by commas, e.g. parents:-1,0,0,1 (got {rest!r})"
            ) from None
        return Tree(parents)
    if t[:1] in "[({":
        return _tree_from_data(_literal(t, "tree"), "tree")
    path = Path(t).expanduser()
    if path.is_file():
        try:
            body = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecroofError(f"cannot read the tree file {t!r}: {exc}") from None
        return _tree_from_data(_literal(body, t), t)
    raise SpecroofError(f"unknown tree {t!r}: give {_tree_forms()}")


def _literal(text: str, where: str) -> Any:
    """JSON, or a Python literal (vLLM's tuples, a list pasted from a choices file)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise SpecroofError(f"{where}: not JSON or a list literal; give {_tree_forms()}") from None


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _tree_from_data(data: Any, where: str) -> Tree:
    if isinstance(data, Tree):
        return data
    if isinstance(data, str):  # vLLM's speculative_token_tree is a string of tuples
        return _tree_from_data(_literal(data, where), where)
    if isinstance(data, dict):
        if "Successors" in data:
            return Tree.from_sequoia(data)
        if "parents" in data:
            return Tree(_int_list(data["parents"], f"{where}: parents"), data.get("tokens"))
        if "speculative_token_tree" in data:
            return _tree_from_data(data["speculative_token_tree"], f"{where}: speculative_token_tree")
        raise SpecroofError(f"{where}: a tree object needs 'parents', 'Successors' or 'speculative_token_tree'")
    if isinstance(data, np.ndarray):
        data = data.tolist()
    if not isinstance(data, (list, tuple)):
        raise SpecroofError(f"{where}: give {_tree_forms()} (got a {type(data).__name__})")
    items = list(data)
    if all(_is_int(x) for x in items):
        return Tree([int(x) for x in items])
    if all(isinstance(x, (list, tuple)) and x and all(_is_int(r) for r in x) for x in items):
        return Tree.from_paths(items)
    raise SpecroofError(f"{where}: a list must be a parent array of integers or rank paths such as [[0], [1], [0, 0]]")


def _int_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(_is_int(x) for x in value):
        raise SpecroofError(f"{where} must be a list of whole numbers (-1 for a child of the prefix)")
    return [int(x) for x in value]


#: EAGLE-3 draft heads of the sparse-MoE targets as their published training configs shape them: one dense
#: Llama-style decoder layer (``LlamaForCausalLMEagle3``: the first layer's q/k/v read the 2d-wide concatenation of
#: the token's embedding and the fused hidden state, an ``fc`` fuses three of the target's hidden states, 3d -> d)
#: and its own LM head over a 32,000-token draft vocabulary. From sgl-project/SpecForge ``configs/``:
#: ``deepseek-v3-671b-eagle3.json``, ``deepseek-r1-671b-eagle3.json``, ``kimi-k2-eagle3.json`` and
#: ``gpt-oss-20B-eagle3-dense.json`` (gpt-oss-120b has the same width, 2880: the 20B head's shape stands for it)
EAGLE3_HEADS: dict[str, dict[str, int]] = {
    "deepseek-v3": {"d_model": 7168, "n_heads": 56, "n_kv_heads": 8, "head_dim": 128, "d_ff": 40960, "vocab": 32000},
    "deepseek-r1": {"d_model": 7168, "n_heads": 32, "n_kv_heads": 8, "head_dim": 224, "d_ff": 29568, "vocab": 32000},
    "kimi-k2": {"d_model": 7168, "n_heads": 64, "n_kv_heads": 64, "head_dim": 128, "d_ff": 18432, "vocab": 32000},
    "gpt-oss-20b": {"d_model": 2880, "n_heads": 64, "n_kv_heads": 8, "head_dim": 64, "d_ff": 17280, "vocab": 32000},
    "gpt-oss-120b": {"d_model": 2880, "n_heads": 64, "n_kv_heads": 8, "head_dim": 64, "d_ff": 17280, "vocab": 32000},
    # SpecForge configs/qwen3-30B-A3B-eagle3.1.json: one dense Llama layer, a 32,000-token draft head
    "qwen3-30b-a3b": {"d_model": 2048, "n_heads": 32, "n_kv_heads": 4, "head_dim": 128, "d_ff": 12288, "vocab": 32000},
}


def _eagle3_head(target: ModelSpec, shape: dict[str, int]) -> ModelSpec:
    """The shipped EAGLE-3 head of ``target`` as a one-layer ModelSpec: the doubled q/k/v input (d (H + 2 KV) hd more
    weights) and the fc (3 d^2) counted as extra MLP width, so one pass reads and computes the same."""
    d, H, KV, hd = shape["d_model"], shape["n_heads"], shape["n_kv_heads"], shape["head_dim"]
    extra = d * (H + 2 * KV) * hd + 3 * d * d
    return ModelSpec(
        f"{target.name} eagle3 head", 1, d, H, KV, hd, shape["d_ff"] + -(-extra // (3 * d)), shape["vocab"],
        max_context=target.max_context,
    )  # fmt: skip


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
        each of the three MLP matrices; in an MoE layer, of its always-on shared expert): the same
        bytes and FLOPs in one pass. An EAGLE-3 head of a sparse-MoE target with a published head
        (:data:`EAGLE3_HEADS`) is that dense head instead.
        """
        if self.version == 3 and target.name in EAGLE3_HEADS:
            return _derived(("eagle3 head",), target, lambda: _eagle3_head(target, EAGLE3_HEADS[target.name]))
        extra_ff = -(-2 * target.d_model // 3)

        def build() -> ModelSpec:
            changes: dict[str, Any] = {"d_ff": target.d_ff + extra_ff}
            if target.is_moe:  # the projection runs on every token: priced as (more) shared-expert width
                base = (target.d_ff_shared or target.d_ff_expert) * target.n_shared_experts
                changes = {"n_shared_experts": 1, "d_ff_shared": base + extra_ff}
            return dataclasses.replace(
                target,
                name=f"{self.name} layer",
                n_layers=1,
                n_dense_layers=0,
                n_sliding_layers=0,  # the draft layer attends to its whole context (EAGLE-3 heads of gpt-oss do)
                n_linear_layers=0,  # a hybrid's MTP module is a full-attention layer (section 52)
                mtp_modules=None,
                **changes,
            )

        return _derived(("eagle layer", self.name), target, build)

    def own_head(self, target: ModelSpec) -> bool:
        """Whether the draft layer has an LM head of its own (an EAGLE-3 head's draft vocabulary), not the target's."""
        return self.version == 3 and target.name in EAGLE3_HEADS

    @property
    def default_tree(self) -> Tree:
        return TREE_PRESETS["eagle" if self.version == 1 else f"eagle{self.version}"]

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _steps(ctx, self.layer_spec(ctx.target), gamma, batch, context)

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        layer = self.layer_spec(ctx.target)
        # an EAGLE-3 head keeps its own draft-vocabulary LM head and reads the target's embedding; EAGLE's layer
        # shares the target's LM head
        own = self.own_head(ctx.target)
        shared = layer.embedding_params if own else ctx.target.d_model * ctx.target.vocab_size
        return _no_memory(batch, context) + (_params(layer) - shared) * 2.0

    def tree_passes(self, ctx: Ctx, widths: Sequence[int], context: int) -> tuple[ModelSpec, Sequence[int], int]:
        if self.version == 1:  # a static tree: each level's nodes in one pass
            return self.layer_spec(ctx.target), widths, context
        # EAGLE-2/3 expand the top-k of every level, whatever the verified tree keeps
        return self.layer_spec(ctx.target), [1] + [self.top_k] * (len(widths) - 1), context

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        return _tree_levels(ctx, self.tree_passes(ctx, widths, context), batch)


@dataclass(frozen=True)
class MTP(Eagle):
    """Multi-token prediction (DeepSeek-V3): ``modules`` MTP modules, each priced as EAGLE's layer; a chain.

    Each drafted token is one module pass (a target-shaped block, for DeepSeek-V3 an MLA layer
    with all 256 experts, and the 2d -> d projection; the target's embedding and head shared).
    ``modules`` None (``mtp``) is what the target ships (``ModelSpec.mtp_modules``: DeepSeek-V3/R1
    ship one; one when the target does not say); a target that ships none (Kimi K2, gpt-oss) is
    refused. More drafts than modules reuse them in turn, as the engines do (vLLM
    ``spec_step_idx % num_mtp_layers``, SGLang's NEXTN as an EAGLE chain): a module reused past
    its own step was not trained for that step, so one per-token rate is not stretched over them
    (:func:`roofline.acceptance_kinds.check_reused_modules`). The default draft length is the modules.
    """

    modules: int | None = None

    def __post_init__(self) -> None:
        if self.modules is not None:
            check_min("mtp modules", self.modules, 1, integer=True)
        n = self.modules
        object.__setattr__(self, "name", self.name or ("mtp" if n is None or n == 1 else f"mtp:{n}"))
        super().__post_init__()

    @property
    def default_gamma(self) -> int:
        return int(self.modules or 1)

    def modules_for(self, target: ModelSpec) -> int:
        """The modules this drafter runs on ``target``: its own count, checked against what the target ships."""
        ships = target.mtp_modules
        if ships == 0:
            raise SpecroofError(
                f"{target.name} ships no multi-token-prediction module (num_nextn_predict_layers 0): draft it with "
                "eagle3 or a draft model instead of mtp"
            )
        if self.modules is None:
            return int(ships or 1)
        if ships is not None and self.modules > ships:
            raise SpecroofError(
                f"{target.name} ships {ships} MTP module{'s' if ships > 1 else ''}: {self.name} needs {self.modules}; "
                f"use mtp (the engines chain the shipped module over gamma steps) with a per-position curve"
            )
        return int(self.modules)

    def trained_steps(self, target: ModelSpec) -> int | None:
        """Draft steps covered by a module trained for that step: the modules the target ships (its config's
        ``num_nextn_predict_layers``); None where the target does not say (``mtp`` then stands for MTP-style heads
        of the target's shape, one per draft step, as before)."""
        if target.mtp_modules is None:
            return None
        return self.modules_for(target)

    def layer_spec(self, target: ModelSpec) -> ModelSpec:
        self.modules_for(target)  # a target that ships no module, or fewer, is refused before it is priced
        return super().layer_spec(target)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return super().extra_memory_bytes(ctx, batch, context) * self.modules_for(ctx.target)


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
        return dataclasses.replace(
            target,
            name=f"{self.name} prefix layer",
            n_layers=1,
            n_dense_layers=0,
            n_sliding_layers=0,
            n_linear_layers=0,
        )

    @property
    def default_tree(self) -> Tree:
        return TREE_PRESETS["hydra"]

    def _check_depth(self, depth: int) -> None:
        if depth > self.n_heads:
            raise SpecroofError(
                f"{self.name} has {self.n_heads} heads, one per draft level: depth must lie in [0, {self.n_heads}] (got {depth})"
            )

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


def default_tree(drafter: Any) -> Tree | None:
    """The tree a drafter ships with (EAGLE's, Medusa's), or None for chain drafters."""
    if isinstance(drafter, MTP):
        return None
    if isinstance(drafter, (Eagle, Hydra)):
        return drafter.default_tree
    if isinstance(drafter, Heads):
        return TREE_PRESETS["medusa"]
    return None


def default_gamma(drafter: Any) -> int | None:
    """The chain length a drafter is built for (an MTP stack: its module count), or None."""
    g = getattr(drafter, "default_gamma", None)
    return int(g) if g is not None else None


def owns_weights(drafter: Any) -> bool:
    """Whether a drafter runs weights of its own (a draft model, heads, a block drafter), not the target's."""
    return isinstance(drafter, (DraftModel, ParallelBlock, Heads, Hydra))


def _count(name: str, text: str, example: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SpecroofError(f"{name} needs a whole number, e.g. {example} (got {text!r})") from None
    check_min(name, value, 1, integer=True)
    return value


def _share(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecroofError(
            f"{name}:MATCH takes the share of requests whose n-gram matched, in (0, 1], e.g. {name}:0.4 (got {text!r})"
        ) from None
    if not 0.0 < value <= 1.0:
        raise SpecroofError(f"{name} match rate must lie in (0, 1] (got {value:g})")
    return value


def as_drafter(d: Any, target: Any = None) -> Any:
    """The one drafter resolver: a drafter from a name in the grammar (module docstring), a draft model
    (ModelSpec, preset name or config.json path), None (prompt lookup), or a drafter object as it is.

    ``target`` picks a published drafter where the name leaves it to the target (``dflash``).
    """
    if d is None:
        return PromptLookup()
    if isinstance(d, ModelSpec):
        return DraftModel(d)
    if not isinstance(d, str):
        if hasattr(d, "draft_time") and hasattr(d, "verify_time"):
            return d
        raise SpecroofError(f"cannot use {d!r} as a drafter: give a name ({DRAFTER_GRAMMAR}), a ModelSpec or a drafter")
    from roofline import drafter_presets  # published drafters by name (a data table)

    if drafter_presets.is_dflash_name(d.lower()):  # dflash (the target's), dflash:ID, or a published DFlash id
        spec, block, label = drafter_presets.dflash(d, target)
        return ParallelBlock(spec, name=label, block_size=block)
    hit = _BY_NAME.get(d)
    if hit is not None:
        return hit
    out = _from_name(d)
    if not isinstance(out, _SmallModel):  # a draft model's name resolves a model (its config file may change): not kept
        if len(_BY_NAME) > 256:
            _BY_NAME.clear()
        _BY_NAME[d] = out
    return out


#: drafters by their name in the grammar: every drafter is a frozen dataclass, so one object per name is shared
_BY_NAME: dict[str, Any] = {}


def _from_name(d: str) -> Any:
    """:func:`as_drafter` of a name (the grammar, or a draft model's preset name or config.json path)."""
    key = d.strip().lower()
    kind, sep, arg = key.partition(":")
    arg_raw = d.strip().partition(":")[2].strip()
    if kind in ("eagle", "eagle1") and not sep:
        return Eagle(1)
    if kind in ("eagle2", "eagle3") and not sep:
        return Eagle(int(kind[-1]))
    if kind == "mtp":
        return MTP(modules=_count("mtp", arg, "mtp:2") if sep else None)
    if kind == "medusa":
        # bare "medusa" is the method as shipped (5 heads, its name); medusa:H is H such heads ("H heads")
        return Heads(_count("medusa heads", arg, "medusa:4")) if sep else Heads(5, name="medusa")
    if kind == "hydra" and not sep:
        return Hydra()
    if kind in ("prompt-lookup", "pld", "ngram"):
        return PromptLookup(match_rate=_share(kind, arg) if sep else 1.0)
    if kind == "early-exit":
        if not sep:
            raise SpecroofError("early-exit needs a layer count, e.g. early-exit:8")
        return EarlyExit(_count("early-exit layers", arg, "early-exit:8"))
    if kind == "window":
        if not sep:
            raise SpecroofError("window needs a token count, e.g. window:512")
        return SlidingWindowSelfDraft(_count("window", arg, "window:512"))
    if kind == "block":
        if not arg_raw:
            raise SpecroofError("block needs a draft model, e.g. block:llama-3.2-1b")
        return ParallelBlock(get_model(arg_raw))
    if kind == "model":
        if not arg_raw:
            raise SpecroofError("model needs a draft model, e.g. model:llama-3.2-1b or model:path/config.json")
        return DraftModel(get_model(arg_raw))
    try:
        return DraftModel(get_model(d))
    except SpecroofError:
        raise SpecroofError(
            f"unknown drafter {d!r}: use {DRAFTER_GRAMMAR} (NAME: a preset model or a config.json)"
        ) from None


#: the earlier name of :func:`as_drafter`
named_drafter = as_drafter


# -- the one round formula ---------------------------------------------------------------------


@dataclass(frozen=True)
class RoundTime:
    """Seconds of one speculative round: drafting, the verify pass, and host time outside the passes."""

    t_draft_s: Array
    t_verify_s: Array
    t_round_host_s: Any  # seconds: a float, or an array over batch where the engine prices per sequence

    @property
    def t_round_s(self) -> Array:
        return round_seconds(self.t_draft_s, self.t_verify_s, self.t_round_host_s)


def round_seconds(t_draft: Any, t_verify: Any, t_round_host: Any) -> Any:
    """The round formula (docs/cost-model.md, sections 4-7): t_round = t_draft + t_verify + round host time, on one
    round's floats and on arrays alike (:class:`RoundTime`, the speedup, the plans' rounds)."""
    return t_draft + t_verify + t_round_host


def _scalar(x: ArrayLike) -> int:
    """A tree round is priced one (batch, context) at a time: its levels are a Python list."""
    a = np.asarray(x)
    if a.size != 1:
        raise SpecroofError(f"a tree round takes one batch and one context at a time (got shape {a.shape})")
    return int(a.reshape(()))


def draft_pricing(pricing: Pricing, drafter: Any) -> Pricing:
    """The pricing of the draft passes: with the target's weights offloaded, a drafter's own weights stay on the device;
    under an engine that runs the drafts inside the verify pass's step, without the per-step host time."""
    return (pricing.on_device() if owns_weights(drafter) else pricing).draft_passes


def draft_tp(pricing: Pricing, drafter: Any) -> int:
    """Devices the draft passes are sharded over: the target's TP where the engine shards its drafter like the target
    (``[speculative] draft_tensor_parallel``: vLLM, SGLang, TensorRT-LLM, gpt-fast) or where the drafter runs the
    target's own layers (early exit, a windowed self-draft); one device otherwise (Hugging Face, the pure roofline)."""
    if pricing.tp <= 1:
        return 1
    if getattr(drafter, "shares_target_layers", False):
        return pricing.tp
    e = pricing.engine
    return pricing.tp if e is not None and e.draft_tensor_parallel else 1


def round_time(
    pricing: Pricing,
    target: ModelSpec,
    drafter: Any,
    shape: ArrayLike | Tree,
    batch: ArrayLike,
    context: ArrayLike,
    *,
    draft: Pricing | None = None,
    round_overhead_s: float = 0.0,
    verify_latency: dict[int, float] | None = None,
) -> RoundTime:
    """The round formula: t_round = t_draft + t_verify + round host time (docs/cost-model.md, sections 4-7).

    ``shape`` is a chain length ``gamma`` (int or array, broadcast with ``batch`` and
    ``context``) or a :class:`roofline.trees.Tree`: the drafter drafts it level by level and
    the target verifies every node plus the pending token (the root) in one tree-masked
    pass, each node attending to its ancestors. ``draft`` prices the draft passes (default:
    :func:`draft_pricing`). The host time is the engine's per-round time plus
    ``round_overhead_s``; ``verify_latency`` (nodes -> seconds, a measured table) replaces a
    tree's priced verify pass.
    """
    d = as_drafter(drafter)
    target = get_model(target)
    pricing = pricing if isinstance(pricing, Pricing) else pricing_of(pricing)
    ctx = Ctx.of(target, pricing)
    dctx = Ctx.of(target, draft if draft is not None else draft_pricing(pricing, d), draft_tp(pricing, d))
    host = pricing.round_host_at(batch) + round_overhead_s
    if isinstance(shape, Tree):
        lv = shape.levels()
        t_draft = np.asarray(_tree_draft_s(d, dctx, shape, lv, _scalar(batch), _scalar(context)))
        n = lv.n_nodes
        # a drafter whose verify pass is not the target's whole tree-masked pass prices its own (early exit's remainder)
        own = (
            d.tree_verify_time(ctx, shape, batch, context)
            if verify_latency is None and hasattr(d, "tree_verify_time")
            else None
        )
        if verify_latency is not None:
            if n + 1 not in verify_latency and n not in verify_latency:
                raise SpecroofError(f"verify_latency has no entry for a {n}-node tree")
            t_verify = np.asarray(float(verify_latency.get(n + 1, verify_latency.get(n, np.nan))))
        elif own is not None:
            t_verify = np.asarray(own)
        else:
            tokens, visible = _tree_verify(lv)
            one = visible_seconds(target, pricing, batch, tokens, context, visible, pricing.tp)
            if one is not None:
                t_verify = np.asarray(one)
            else:
                depths = np.concatenate([[1], shape.depths + 1])
                t_verify = ctx.pass_s(target, batch, None, context, tree=depths, tp=pricing.tp)
        return RoundTime(t_draft, np.asarray(t_verify), host)
    g = np.asarray(shape)
    # every field given: the instance without the frozen dataclass's per-field __setattr__ (cost.frozen)
    result: RoundTime = frozen(
        RoundTime,
        {"t_draft_s": d.draft_time(dctx, g, batch, context), "t_verify_s": d.verify_time(ctx, g, batch, context),
         "t_round_host_s": host},
    )  # fmt: skip
    return result


def _tree_verify(lv: TreeLevels) -> tuple[int, float]:
    """A tree's verify pass: its tokens and the new tokens they see, summed. The pending token is the root (depth 1)
    and every node one deeper: n + 1 tokens; the root sees itself (1), a node at depth k its k ancestors, the root
    and itself (k + 1)."""
    return lv.n_nodes + 1, 1.0 + float(lv.depth_sum) + lv.n_nodes


def _tree_draft_s(d: Any, dctx: Ctx, tree: Tree, lv: TreeLevels, batch: int, context: int) -> float:
    """Seconds to draft ``tree`` (``lv``: its levels): the drafter's own method, by which nodes have children for a
    drafter whose cost depends on it (Hydra), by the levels' widths otherwise."""
    if hasattr(d, "tree_draft_time_of"):
        return float(d.tree_draft_time_of(dctx, tree, batch, context))
    return float(d.tree_draft_time(dctx, list(lv.widths), batch, context))


# -- a tree round on scalars: everything but (tree, batch, context) resolved once per (pricing, target, drafter) ----


class TreePlan:
    """:func:`round_time`'s tree rounds for one (pricing, target, drafter) on whole-number scalars, resolved once.

    Holds the draft :class:`Ctx` the round formula builds, the target's scalar pricer (its plain pass and its
    tree-masked verify pass) and the round host time; the draft and the verify pass are :func:`round_time`'s own
    (:func:`_tree_draft_s`, :func:`_tree_verify`), so a plan only skips the lookups before them. Nothing here
    depends on the tree or the round's configuration."""

    __slots__ = ("drafter", "dctx", "pricer", "max_context", "host", "tctx")

    def __init__(self, pricing: Pricing, target: ModelSpec, drafter: Any, pricer: Any) -> None:
        self.drafter = drafter
        self.dctx = Ctx.of(target, draft_pricing(pricing, drafter), draft_tp(pricing, drafter))
        self.pricer, self.max_context, self.host = pricer, target.max_context, pricing.round_host_at
        # the target's Ctx, for a drafter that prices its own tree verify pass (round_time's tree branch)
        self.tctx = Ctx.of(target, pricing) if hasattr(drafter, "tree_verify_time") else None

    def base(self, batch: int, context: int) -> float | None:
        """Seconds of one plain decode pass of the target (:func:`roofline.passtime.pass_seconds`' float); None
        past its context (the array path names it)."""
        return None if context + 1 > self.max_context else float(self.pricer.seconds(batch, 1, context, 1.0))

    def times(
        self, tree: Tree, batch: int, context: int, levels: TreeLevels | None = None
    ) -> tuple[float, float, float] | None:
        """(t_draft, t_verify, t_round_host) of a round drafting ``tree`` (``levels``: its :meth:`Tree.levels`, when
        the caller holds them), :func:`round_time`'s floats; None where the verify pass runs past the target's
        context (the array path names it)."""
        lv = tree.levels() if levels is None else levels
        tokens, visible = _tree_verify(lv)
        if context + tokens > self.max_context:
            return None
        t_draft = _tree_draft_s(self.drafter, self.dctx, tree, lv, batch, context)
        own = None if self.tctx is None else self.drafter.tree_verify_time(self.tctx, tree, batch, context)
        if own is not None:
            return t_draft, float(own), self.host(batch)
        return t_draft, self.pricer.seconds(batch, tokens, context, visible), self.host(batch)


_TREE_PLANS: dict[tuple[Any, ...], tuple[Pricing, ModelSpec, Any, TreePlan | None]] = {}


def tree_plan(pricing: Pricing, target: ModelSpec, drafter: Any) -> TreePlan | None:
    """The :class:`TreePlan` of ``drafter`` drafting trees for ``target`` under ``pricing``, built once per
    (pricing, target) object and drafter (a frozen drafter by value: ``as_drafter("eagle3")`` gives equal ones;
    a draft model by its spec object; any other by identity); None where the target's scalar pricer steps aside."""
    ref: Any = None  # an object keyed by its id, held by the entry so that the id is not reused while cached
    if isinstance(drafter, _SmallModel):  # hashing a draft model hashes its whole ModelSpec
        dkey: Any = (type(drafter), id(drafter.spec), drafter.name)
        ref = drafter.spec
    else:
        dkey = drafter  # equal frozen drafters price alike: the key compares them by value
    key = (id(pricing), id(target), dkey)
    try:
        hit = _TREE_PLANS.get(key)
    except TypeError:  # a drafter object of the caller's own that cannot be hashed: this object
        ref = drafter
        key = (id(pricing), id(target), id(drafter))
        hit = _TREE_PLANS.get(key)
    if hit is not None and hit[0] is pricing and hit[1] is target and hit[2] is ref:
        return hit[3]
    pricer = None if target.is_abstract else scalar_pricer(target, pricing, pricing.tp)
    plan = TreePlan(pricing, target, drafter, pricer) if pricer is not None else None
    if len(_TREE_PLANS) > 256:
        _TREE_PLANS.clear()
    _TREE_PLANS[key] = (pricing, target, ref, plan)
    return plan


# -- a draft model's chain round on scalars: everything but (gamma, batch, context) resolved once -------------------


class ChainPlan:
    """A separate draft model's chain rounds priced for one (pricing, target, draft model), resolved once.

    :func:`round_time` on a :class:`DraftModel` and a whole-number chain length, batch and context is
    ``gamma`` one-token draft passes, one (gamma + 1)-token verify pass and the round host time; this holds
    the two scalar pricers (:func:`roofline.passtime.scalar_pricer`: the target's, and the draft model's on
    :func:`draft_pricing` over :func:`draft_tp` devices) and the round host time, so that a round is the
    calls :func:`round_time` ends in (the pricers' ``chain`` and ``seconds``) without the lookups before them.
    Nothing here depends on the round's configuration."""

    __slots__ = ("target", "draft", "target_context", "draft_context", "host")

    def __init__(self, pricing: Pricing, target: ModelSpec, drafter: DraftModel, t_pricer: Any, d_pricer: Any) -> None:
        self.target, self.draft = t_pricer, d_pricer
        self.target_context, self.draft_context = target.max_context, drafter.spec.max_context
        self.host = pricing.round_host_at

    def times(self, gamma: int, batch: int, context: int, round_overhead_s: float = 0.0) -> tuple[float, ...] | None:
        """(t_base, t_draft, t_verify, t_round_host) of one round in seconds, :func:`round_time`'s floats; None where
        a pass runs past a model's context (the array path names it)."""
        if context + gamma + 1 > self.target_context or context + gamma > self.draft_context:
            return None
        n = gamma + 1
        return (
            self.target.seconds(batch, 1, context, 1.0),
            self.draft.chain(batch, context, gamma),
            self.target.seconds(batch, n, context, n * (n + 1) / 2.0),
            self.host(batch) + round_overhead_s,
        )


_CHAIN_PLANS: dict[tuple[int, int, int], tuple[Pricing, ModelSpec, ModelSpec, ChainPlan | None]] = {}


def chain_plan(pricing: Pricing, target: ModelSpec, drafter: Any) -> ChainPlan | None:
    """The :class:`ChainPlan` of a :class:`DraftModel` drafting for ``target`` under ``pricing``, built once per
    (pricing, target, draft model) object; None for any other drafter, an abstract model, a draft model not smaller
    than the target (the round formula raises that), one whose first pass re-feeds tokens (the array path prices
    it) and where a scalar pricer steps aside."""
    if type(drafter) is not DraftModel or drafter.first_pass_tokens != 1:
        return None
    spec = drafter.spec
    key = (id(pricing), id(target), id(spec))
    hit = _CHAIN_PLANS.get(key)
    if hit is not None and hit[0] is pricing and hit[1] is target and hit[2] is spec:  # held: ids not reused
        return hit[3]
    plan = None
    if not (target.is_abstract or spec.is_abstract) and _params(spec) < _params(target):
        t_pricer = scalar_pricer(target, pricing, pricing.tp)
        d_pricer = scalar_pricer(spec, draft_pricing(pricing, drafter), draft_tp(pricing, drafter))
        if t_pricer is not None and d_pricer is not None:
            plan = ChainPlan(pricing, target, drafter, t_pricer, d_pricer)
    if len(_CHAIN_PLANS) > 256:
        _CHAIN_PLANS.clear()
    _CHAIN_PLANS[key] = (pricing, target, spec, plan)
    return plan
