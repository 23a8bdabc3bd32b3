"""Expert parallelism: an MoE target's routed experts sharded over ``ep`` GPUs, priced on top of the one pass model.

The deployment (vLLM's ``--enable-expert-parallel`` with data-parallel attention, DeepSeek-V3's
and SGLang's "DP attention + EP MoE"): each of the ``ep`` GPUs holds every non-expert weight
(attention, dense layers, shared experts, router, embeddings) and ``n_experts / ep`` routed
experts; the batch's sequences are spread over the GPUs, each running attention for its own;
every MoE layer sends each token to the GPUs of its top-k experts (dispatch) and brings the
k results back (combine), two all-to-alls. The step ends when the busiest GPU is done, so a
step of ``B`` sequences costs what the GPU with ``ceil(B / ep)`` of them costs:

    t_ep(B, n, l) = t(ceil(B / ep), n, l)                      today's pass over that GPU's sequences
                  + [mlp(ceil(B / ep), touched_ep) - mlp(ceil(B / ep), touched)]   its own expert weights
                  + 2 m (ep - 1) / ep x T_gpu k d a / link            dispatch + combine, m MoE layers

``touched`` = E (1 - (1 - k / E)^T_gpu) is the experts today's pass streams for the GPU's
T_gpu tokens; ``touched_ep`` = (E / ep) (1 - (1 - k / E)^T) the share of the group's
E / ep experts that the whole step's T tokens touch (uniform routing). The MoE layer's
FLOPs are unchanged: with balanced routing each GPU's experts receive as many
token-expert pairs as its own tokens make. Derivation: docs/cost-model.md, section
"Expert parallelism in the serving simulator".

The all-to-all runs over the profile's interconnect (NVLink) within a node of
the profile's ``gpus_per_node`` GPUs (8: an HGX/DGX board; 72: an NVL72 rack); a group that spans nodes needs a
network bandwidth the profiles do not list, so it must be given (``ep_link_GB_per_s``).
A pass of another model (a draft model) runs data-parallel: each GPU drafts for its own
``ceil(B / ep)`` sequences.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError
from roofline.costing.hardware import GPUS_PER_NODE
from roofline.costing.passtime import pass_cost
from roofline.costing.timemodel import combine
from roofline.passes.cost import expected_experts_touched
from roofline.passes.dtypes import dtype_bytes
from roofline.passes.model import ModelSpec
from roofline.speculation.drafters import Ctx

Array = np.ndarray


def check_ep(spec: ModelSpec, ep: int, tp: int = 1) -> int:
    """``ep`` as a whole number the model's experts divide into (1: no expert parallelism)."""
    if not (isinstance(ep, (int, np.integer)) and ep >= 1):
        raise SpecroofError(f"ep must be a whole number of GPUs >= 1 (got {ep!r})")
    ep = int(ep)
    if ep == 1:
        return 1
    if not spec.is_moe:
        raise SpecroofError(f"ep={ep} shards MoE experts: {spec.name} is a dense model (use tp)")
    if spec.n_experts % ep:
        raise SpecroofError(
            f"ep must divide {spec.name}'s {spec.n_experts} routed experts (got {ep}): every GPU holds as many"
        )
    if tp > 1:
        raise SpecroofError(f"ep={ep} runs attention data-parallel, one GPU per rank: give tp=1 with it (got tp={tp})")
    return ep


def all_to_all_link_bytes_per_s(
    hw: Any, ep: int, link_GB_per_s: float | None = None, gpus_per_node: int | None = None
) -> float:
    """The bandwidth an all-to-all over ``ep`` GPUs runs at: ``link_GB_per_s`` if given, else the profile's
    interconnect within a node; a group wider than a node needs the network figure, given."""
    if link_GB_per_s is not None:
        if not (math.isfinite(link_GB_per_s) and link_GB_per_s > 0):
            raise SpecroofError(f"ep_link_GB_per_s must be a positive number (got {link_GB_per_s!r})")
        return float(link_GB_per_s) * 1e9
    if gpus_per_node is None:
        gpus_per_node = int(getattr(hw, "gpus_per_node", GPUS_PER_NODE))
    if ep > gpus_per_node:
        raise SpecroofError(
            f"ep={ep} spans nodes of {gpus_per_node} GPUs and {hw.id} lists no network bandwidth: give "
            "ep_link_GB_per_s (--ep-link-GB-s), the per-GPU bandwidth between nodes"
        )
    link = hw.interconnect_bytes_per_s
    if link is None or not link > 0:
        raise SpecroofError(f"{hw.id} lists no interconnect: give ep_link_GB_per_s (--ep-link-GB-s) for ep={ep}")
    return float(link)


def all_to_all_s(spec: ModelSpec, tokens_per_gpu: ArrayLike, ep: int, act_bytes: float, link: float) -> Array:
    """Dispatch and combine of every MoE layer for one GPU's ``tokens_per_gpu`` tokens: each token's k copies of
    d_model activations, of which (ep - 1) / ep leave the GPU under uniform routing, out and back over ``link``."""
    if ep <= 1:
        return np.zeros_like(np.asarray(tokens_per_gpu, dtype=float))
    out = np.asarray(tokens_per_gpu, dtype=float) * spec.experts_per_token * spec.d_model * act_bytes
    return 2.0 * spec.n_moe_layers * (ep - 1) / ep * out / link


def ep_expert_weight_bytes(spec: ModelSpec, weight_bytes: float) -> float:
    """Bytes of every routed expert of every MoE layer (what EP shards), in the experts' own format where the model
    stores them in one (``weight_bytes`` is the other weights' bytes per weight)."""
    return float(spec.n_moe_layers * spec.n_experts * spec.expert_params * spec.expert_bytes(weight_bytes))


class EPCtx(Ctx):
    """A :class:`roofline.speculation.drafters.Ctx` whose target passes are priced under expert parallelism over ``ep`` GPUs.

    Build with :func:`ep_context`. The target's passes follow the module docstring; any other model's
    passes (a draft model) run at ``ceil(batch / ep)`` sequences, the busiest GPU's share.
    """

    ep: int
    link_bytes_per_s: float

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
        ep = self.ep
        per_gpu = np.ceil(np.asarray(batch, dtype=float) / ep).astype(np.int64)
        t = np.asarray(super().pass_s(spec, per_gpu, new_tokens, context, tree=tree, tp=tp), dtype=float)
        if not spec.is_moe or (spec is not self.target and spec != self.target):
            return t  # another model (a draft model): data-parallel, no experts of the target's to shard
        return t + self._moe_terms(batch, per_gpu, new_tokens, context, tree)

    def _moe_terms(self, batch: ArrayLike, per_gpu: Any, new_tokens: Any, context: Any, tree: Any) -> Array:
        cost, ep_cost = self.ep_costs(batch, per_gpu, new_tokens, context, tree)
        tm, pr = self.pricing.time_model, self.pricing
        i = cost.operators.index("mlp")
        mem0, comp0 = tm.operator_times(cost, pr.dtype, 1)
        mem1, comp1 = tm.operator_times(ep_cost, pr.dtype, 1)
        d_mlp = combine(mem1[i], comp1[i], tm.overlap) - combine(mem0[i], comp0[i], tm.overlap)
        ab = dtype_bytes(cost.compute_dtype)
        tokens_gpu = np.asarray(cost.batch * cost.new_tokens, dtype=float)
        return np.asarray(
            d_mlp + all_to_all_s(self.target, tokens_gpu, self.ep, ab, self.link_bytes_per_s), dtype=float
        )

    def ep_costs(
        self, batch: ArrayLike, per_gpu: Any, new_tokens: Any, context: Any, tree: Any = None
    ) -> tuple[Any, Any]:
        """(the busiest GPU's pass cost as one GPU would price it, the same with only its ``E / ep`` experts' share
        streamed): the MoE layer's weights of the second are the GPU's own experts that the whole step touches."""
        spec, pr, ep = self.target, self.pricing, self.ep
        cost = pass_cost(spec, pr, per_gpu, new_tokens, context, tree)
        tokens_gpu = np.asarray(cost.batch * cost.new_tokens, dtype=float)
        tokens_all = tokens_gpu / np.maximum(per_gpu, 1) * np.asarray(batch, dtype=float)
        E, k = spec.n_experts, spec.experts_per_token
        touched = expected_experts_touched(E, k, tokens_gpu)
        touched_ep = expected_experts_touched(E, k, tokens_all) / ep  # the group's experts, E / ep of them a GPU
        # the experts' bytes per weight: their own format's where the model stores them in one (gpt-oss: MXFP4,
        # 4.25 bits), not the other weights' dtype (docs/cost-model.md, section 55)
        ewb = spec.expert_bytes(dtype_bytes(cost.weight_dtype))
        i = cost.operators.index("mlp")
        saved = spec.n_moe_layers * (touched - touched_ep) * spec.expert_params * ewb
        w = np.array(cost.bytes_weights, dtype=float)
        w[i] = w[i] - saved
        # bytes in the experts' own format stream at the plain rate (section 51): the GPU's share of them is what
        # that rate now streams
        own = cost.expert_format_bytes
        own = own - saved if spec.expert_format else own
        return cost, replace(cost, bytes_weights=w, routed_experts=touched_ep, expert_format_bytes=own)


def ep_context(ctx: Ctx, ep: int, *, link_GB_per_s: float | None = None, gpus_per_node: int | None = None) -> Ctx:
    """``ctx`` priced over ``ep`` expert-parallel GPUs (``ctx`` itself at ep = 1: today's prices, unchanged)."""
    ep = check_ep(ctx.target, ep, ctx.tp)
    if ep == 1:
        return ctx
    link = all_to_all_link_bytes_per_s(ctx.pricing.hardware, ep, link_GB_per_s, gpus_per_node)
    out: EPCtx = object.__new__(EPCtx)
    out.__dict__.update(ctx.__dict__)
    out.__dict__.update(ep=ep, link_bytes_per_s=link)
    return out
