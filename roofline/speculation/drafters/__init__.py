"""Drafters: every way of proposing tokens, priced by the cost model, named by one grammar.

A drafter knows what one round costs it: :meth:`draft_time` for a chain of ``gamma``
drafts, :meth:`tree_draft_time` for a tree drafted level by level, :meth:`verify_time`
for the target's pass over the drafts, and what it adds to device memory. Each prices
its passes through a :class:`Ctx` (the target and a :class:`roofline.costing.pricing.Pricing`),
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
  config.json path or a :class:`roofline.passes.model.ModelSpec` mean the same.
* ``early-exit:L``: the target's first L layers (LayerSkip); ``prompt-lookup[:MATCH]``: n-grams
  from the context on the host, MATCH the share of requests whose n-gram matched (default 1); ``block:NAME``: a DFlash-style block drafter (one pass of
  NAME drafts the whole block); ``dflash[:ID]``: a published DFlash drafter (the target's, or by its Hugging Face id or
  config.json, with the block size its config gives: :mod:`roofline.speculation.drafter_presets`); ``window:W``: the target drafting over its last W cached
  tokens (MagicDec/TriForce).

One file per drafter family, as vLLM keeps one file per proposer: ``base`` (the :class:`Ctx` every
drafter prices through, the :class:`Drafter` protocol), ``draft_model`` (a draft model, a block drafter),
``early_exit``, ``heads`` (Medusa), ``hydra``, ``eagle`` (EAGLE and MTP), ``prompt_lookup``,
``sliding_window``, ``tree_presets`` (the trees drafters ship with, the one tree parser), ``grammar``
(:func:`as_drafter`) and ``round`` (the one round formula and the tree and chain plans).
"""

from roofline.speculation.drafters.base import Array, Ctx, Drafter, DrafterLike
from roofline.speculation.drafters.draft_model import DraftModel, ParallelBlock, _SmallModel
from roofline.speculation.drafters.eagle import EAGLE3_HEADS, MTP, Eagle
from roofline.speculation.drafters.early_exit import EarlyExit
from roofline.speculation.drafters.grammar import (
    DRAFTER_GRAMMAR,
    as_drafter,
    default_gamma,
    default_tree,
    named_drafter,
    owns_weights,
)
from roofline.speculation.drafters.heads import Heads
from roofline.speculation.drafters.hydra import Hydra, SequentialHeads
from roofline.speculation.drafters.prompt_lookup import PromptLookup
from roofline.speculation.drafters.round import (
    ChainPlan,
    RoundTime,
    TreePlan,
    chain_plan,
    draft_pricing,
    draft_tp,
    round_seconds,
    round_time,
    tree_plan,
)
from roofline.speculation.drafters.sliding_window import SlidingWindowSelfDraft
from roofline.speculation.drafters.tree_presets import (
    EAGLE_TREE_PATHS,
    MEDUSA_TREE_PATHS,
    TREE_FORMS,
    TREE_PRESETS,
    tree_preset,
)

__all__ = [
    "Array",
    "ChainPlan",
    "Ctx",
    "DRAFTER_GRAMMAR",
    "DraftModel",
    "Drafter",
    "DrafterLike",
    "EAGLE3_HEADS",
    "EAGLE_TREE_PATHS",
    "Eagle",
    "EarlyExit",
    "Heads",
    "Hydra",
    "MEDUSA_TREE_PATHS",
    "MTP",
    "ParallelBlock",
    "PromptLookup",
    "RoundTime",
    "SequentialHeads",
    "SlidingWindowSelfDraft",
    "TREE_FORMS",
    "TREE_PRESETS",
    "TreePlan",
    "_SmallModel",
    "as_drafter",
    "chain_plan",
    "default_gamma",
    "default_tree",
    "draft_pricing",
    "draft_tp",
    "named_drafter",
    "owns_weights",
    "round_seconds",
    "round_time",
    "tree_plan",
    "tree_preset",
]
