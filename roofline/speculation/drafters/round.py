"""The one round formula (draft + verify + host) and the tabulated tree and chain plans built on it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError
from roofline.costing.passtime import (
    scalar_pricer,
    visible_seconds,
)
from roofline.costing.pricing import Pricing, pricing_of
from roofline.passes.cost import frozen
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.drafters.base import (
    Array,
    Ctx,
    _params,
)
from roofline.speculation.drafters.draft_model import DraftModel, _SmallModel
from roofline.speculation.drafters.grammar import (
    as_drafter,
    owns_weights,
)
from roofline.speculation.trees import Tree, TreeLevels

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
    ``context``) or a :class:`roofline.speculation.trees.Tree`: the drafter drafts it level by level and
    the target verifies every node plus the pending token (the root) in one tree-masked
    pass, each node attending to its ancestors. ``draft`` prices the draft passes (default:
    :func:`draft_pricing`). The host time is the engine's per-round time plus
    ``round_overhead_s``; ``verify_latency`` (nodes -> seconds, a measured table) replaces a
    tree's priced verify pass.
    """
    target = get_model(target)
    d = as_drafter(drafter, target)
    pricing = pricing if isinstance(pricing, Pricing) else pricing_of(pricing)
    ctx = Ctx.of(target, pricing)
    dctx = Ctx.of(target, draft if draft is not None else draft_pricing(pricing, d), draft_tp(pricing, d))
    host = pricing.round_host_at(batch, d) + round_overhead_s
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
        self.pricer, self.max_context = pricer, target.max_context
        self.host = functools.partial(pricing.round_host_at, drafter=drafter)  # the drafter's worker's round time
        # the target's Ctx, for a drafter that prices its own tree verify pass (round_time's tree branch)
        self.tctx = Ctx.of(target, pricing) if hasattr(drafter, "tree_verify_time") else None

    def base(self, batch: int, context: int) -> float | None:
        """Seconds of one plain decode pass of the target (:func:`roofline.costing.passtime.pass_seconds`' float); None
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
    the two scalar pricers (:func:`roofline.costing.passtime.scalar_pricer`: the target's, and the draft model's on
    :func:`draft_pricing` over :func:`draft_tp` devices) and the round host time, so that a round is the
    calls :func:`round_time` ends in (the pricers' ``chain`` and ``seconds``) without the lookups before them.
    Nothing here depends on the round's configuration."""

    __slots__ = ("target", "draft", "target_context", "draft_context", "host")

    def __init__(self, pricing: Pricing, target: ModelSpec, drafter: DraftModel, t_pricer: Any, d_pricer: Any) -> None:
        self.target, self.draft = t_pricer, d_pricer
        self.target_context, self.draft_context = target.max_context, drafter.spec.max_context
        self.host = functools.partial(pricing.round_host_at, drafter=drafter)  # the drafter's worker's round time

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
    if type(drafter) is not DraftModel or drafter.first_pass_tokens != 1 or drafter.kv_window is not None:
        return None  # a StreamingLLM draft's window (section 54): the array path prices it
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
