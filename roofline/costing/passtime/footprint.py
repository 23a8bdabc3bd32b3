"""Memory footprint and fit: what a pass holds on the devices, and the largest batch that fits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError, check_min
from roofline.core.validation import check_count
from roofline.costing.passtime.step import (
    Array,
    HardwareLike,
)
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing, pricing_of
from roofline.passes.cost import (
    frozen,
    model_shape,
    scalar_count,
)
from roofline.passes.dtypes import activation_dtype, dtype_bytes
from roofline.passes.model import ModelSpec, get_model


def device_weight_bytes(spec: ModelSpec, pr: Pricing) -> float:
    """Bytes of weights the devices hold together (0 offloaded): the model's, plus, where the engine's tensor
    parallelism leaves the embedding and the LM head whole on every rank (gpt-fast's ``apply_tp``, docs/cost-model.md
    section 61), the copies the other ``tp - 1`` ranks keep of them (one matrix when tied)."""
    if pr.offloaded:
        return 0.0
    wb = dtype_bytes(pr.stored_weight_dtype)
    copies = 0.0
    if pr.tp > 1 and pr.engine is not None and pr.engine.lm_head_replicated:
        whole = spec.embedding_params + (0 if spec.tie_embeddings else spec.lm_head_params)
        copies = (pr.tp - 1) * whole * wb
    return spec.weight_bytes(wb) + copies


def device_memory(spec: ModelSpec, pr: Pricing, batch: ArrayLike, tokens_cached: ArrayLike) -> Array:
    """Bytes the target needs on the devices: its weights (unless offloaded) and the KV of ``tokens_cached`` per sequence."""
    weights = device_weight_bytes(spec, pr)
    kv = spec.kv_bytes(np.asarray(batch) * np.asarray(tokens_cached), dtype_bytes(pr.kv_dtype or pr.dtype))
    if spec.n_linear_layers:  # a hybrid model's recurrent state, one per sequence (section 52)
        kv = kv + np.asarray(batch) * spec.state_bytes_per_sequence(dtype_bytes(pr.dtype))
    return np.asarray(weights + kv, dtype=float)


# -- memory, batch and phase sweeps -------------------------------------------


@dataclass(frozen=True)
class Footprint:
    """Device memory of one configuration, in bytes."""

    weights_bytes: float
    kv_bytes: Any
    activation_bytes: Any
    #: a hybrid model's recurrent states: one slot per new token of each sequence, the running state and a
    #: checkpoint per verified position (docs/cost-model.md, section 52); 0 for a model without linear attention
    state_bytes: Any = 0.0

    @property
    def total_bytes(self) -> Any:
        return self.weights_bytes + self.kv_bytes + self.activation_bytes + self.state_bytes


def memory_footprint(
    spec: ModelSpec | str,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    *,
    weight_dtype: str = "bf16",
    kv_dtype: str | None = None,
    act_dtype: str | None = None,
    new_tokens: ArrayLike = 1,
) -> Footprint:
    """Weights + KV cache (``batch`` x ``context`` tokens) + peak activations of one pass."""
    spec = get_model(spec)
    act_dtype = act_dtype or activation_dtype(weight_dtype)
    kv_dtype = kv_dtype or act_dtype
    b, c, k = scalar_count(batch, 1), scalar_count(context, 0), scalar_count(new_tokens, 1)
    if b is not None and c is not None and k is not None and not spec.is_abstract and not spec.n_linear_layers:
        # one configuration: the same sums in plain numbers, numpy scalars as the array path's 0-d products give
        sh = model_shape(spec)
        widest = max(sh.d, sh.mlp_matrices * max(sh.d_ff, sh.d_ff_expert), sh.vocab)
        fp: Footprint = frozen(
            Footprint,
            {
                "weights_bytes": spec.weight_bytes(dtype_bytes(weight_dtype)),
                "kv_bytes": np.float64(b * (c + k) * sh.kv_elements_per_token * dtype_bytes(kv_dtype)),
                "activation_bytes": np.float64(b * k * 2 * widest * dtype_bytes(act_dtype)),
            },
        )
        return fp
    B = check_min("batch", batch, 1, integer=True)
    L = check_min("context", context, 0, integer=True)
    n = check_min("new_tokens", new_tokens, 1, integer=True)
    weights = spec.weight_bytes(dtype_bytes(weight_dtype))
    kv = spec.kv_bytes(B * (L + n), dtype_bytes(kv_dtype))
    widest = max(spec.d_model, spec.mlp_matrices * max(spec.d_ff, spec.d_ff_expert), spec.vocab_size)
    act = B * n * 2 * widest * dtype_bytes(act_dtype) if not spec.is_abstract else 0.0 * B
    if spec.n_linear_layers:  # a state slot per new token of each sequence (section 52)
        return Footprint(weights, kv, act, B * n * spec.state_bytes_per_sequence(dtype_bytes(act_dtype)))
    return Footprint(weights, kv, act)


def max_batch(
    spec: ModelSpec | str,
    hardware: HardwareLike,
    context: int,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    new_tokens: int = 1,
    limit: int = 1 << 20,
) -> int:
    """Largest batch whose weights + KV + activations fit in the device memory (0 if none); batches up to ``limit``
    (at most 2**24) are searched, so the search's table is sized before it is built."""
    limit = check_count("limit", limit, 1, 1 << 24)
    context = check_count("context", context, 0)
    new_tokens = check_count("new_tokens", new_tokens, 1)
    pr = pricing_of(hardware, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    hw = pr.hardware
    if hw.memory_bytes is None:
        raise SpecroofError(f"hardware {hw.id!r} has no memory capacity in its profile")
    batches = np.arange(1, limit + 1)
    fp = memory_footprint(
        spec, batches, context, weight_dtype=pr.stored_weight_dtype, kv_dtype=pr.kv_dtype, new_tokens=new_tokens
    )
    fits = np.nonzero(fp.total_bytes <= hw.memory_bytes)[0]
    return int(batches[fits[-1]]) if fits.size else 0
