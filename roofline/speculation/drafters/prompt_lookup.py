"""Prompt lookup: n-gram drafts from the context on the host, verified where a request matched."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError
from roofline.costing.passtime import (
    pass_cost,
)
from roofline.speculation.drafters.base import (
    Array,
    Ctx,
    _no_memory,
    _verify,
)


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
        routed_flops=mix(one.routed_flops, many.routed_flops),
    )
    return pr.time_model.pass_seconds(cost, pr.dtype, overhead_s=pr.overhead_s, tp=ctx.tp)
