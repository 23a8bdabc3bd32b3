"""Crossover K and intensity: where a pass stops being memory bound, and the KV cache's share of its time."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError, check_broadcast, check_min
from roofline.core.validation import check_count, check_tp
from roofline.costing.engine import Engine
from roofline.costing.passtime.step import (
    Array,
    HardwareLike,
    _step_time,
    pass_cost,
)
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing, pricing_of
from roofline.costing.timemodel import ATTENTION_OPERATORS
from roofline.passes.dtypes import dtype_bytes
from roofline.passes.model import ModelSpec, get_model


def weights_only_crossover(spec: ModelSpec | str, hardware: HardwareLike, dtype: str | None = None) -> float:
    """The back-of-the-envelope K = t_memory / t_compute_per_token, counting weights only (a float)."""
    pr = pricing_of(hardware, dtype=dtype)
    spec, hw = get_model(spec), pr.hardware
    t_mem = spec.weight_bytes(dtype_bytes(pr.stored_weight_dtype)) / hw.bandwidth()
    t_tok = 2.0 * spec.active_params / hw.peak(pr.dtype)
    return t_mem / t_tok


def crossover_tokens(
    spec: ModelSpec | str,
    hardware: HardwareLike,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    dtype: str | None = None,
    *,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    efficiency: bool | None = None,
    max_tokens: int = 1 << 20,
    engine: Engine | str | None = None,
    tp: int | None = None,
) -> npt.NDArray[np.int64]:
    """Largest number of new tokens per sequence for which the pass stays memory bound.

    Exact on the integer grid (vectorised bisection over batch x context). 0 means
    even a one-token pass is compute bound; ``max_tokens`` (capped by the model's
    context) means it never flips. Priced like :func:`pass_time` (engine, TP, dtypes).
    """
    # a token count is whole: 2.5 would come back as K = 2.5, 10**30 as an OverflowError from numpy
    max_tokens = check_count("max_tokens", max_tokens, 1)
    pr = pricing_of(
        hardware, dtype=dtype, weight_dtype=weight_dtype, kv_dtype=kv_dtype, efficiency=efficiency, engine=engine, tp=tp
    )
    spec = get_model(spec)
    if pr.tp > 1:
        check_tp(spec, pr.tp)
    check_broadcast(batch=batch, context=context)
    B = check_min("batch", batch, 1, integer=True)
    L = check_min("context", context, 0, integer=True)
    B, L = np.broadcast_arrays(B, L)
    cap = np.minimum(max_tokens, spec.max_context - L)
    if np.any(cap < 1):
        raise SpecroofError(f"context leaves no room for new tokens within max context {spec.max_context}")

    def mem_bound(n: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        return _step_time(pass_cost(spec, pr, B, n, L), pr).memory_bound

    lo = np.zeros(B.shape, dtype=np.int64)  # invariant: lo is memory bound (0 trivially)
    hi = cap.astype(np.int64) + 1  # invariant: hi is compute bound (or past the cap)
    top = mem_bound(cap.astype(np.int64))
    lo = np.where(top, cap, lo)
    hi = np.where(top, cap + 1, hi)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        mid_ok = np.where(hi - lo > 1, mid, np.maximum(lo, 1))
        ok = mem_bound(mid_ok)
        active = hi - lo > 1
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid, hi)
    return lo


def kv_share(
    spec: ModelSpec | str,
    hardware: HardwareLike,
    batch: ArrayLike = 1,
    new_tokens: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    dtype: str | None = None,
    *,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    efficiency: bool | None = None,
    engine: Engine | str | None = None,
    tp: int | None = None,
) -> Array:
    """The share of a pass's time its attention operators take: reading the cached K and V (at the engine's paged
    rate) and scoring the new tokens against them (docs/cost-model.md, section 31). At 0.5 and above the pass is
    *KV-bound*: a verify pass of ``new_tokens`` costs about what a one-token step costs, since both read the cache
    once. Priced like :func:`pass_time`; broadcasts over batch, new tokens and context."""
    pr = pricing_of(
        hardware, dtype=dtype, weight_dtype=weight_dtype, kv_dtype=kv_dtype, efficiency=efficiency, engine=engine, tp=tp
    )
    return _kv_share(get_model(spec), pr, batch, new_tokens, context)


def _kv_share(spec: ModelSpec, pr: Pricing, batch: ArrayLike, new_tokens: ArrayLike, context: ArrayLike) -> Array:
    B = check_min("batch", batch, 1, integer=True)
    n = check_min("new_tokens", new_tokens, 1, integer=True)
    L = check_min("context", context, 0, integer=True)
    B, n, L = np.broadcast_arrays(B, n, L)
    st = _step_time(pass_cost(spec, pr, B, n, L), pr)
    attn = np.isin(np.asarray(st.operators), ATTENTION_OPERATORS)
    return np.asarray(np.sum(st.op_time_s[attn], axis=0) / st.t_step_s, dtype=float)


def kv_bound_context(
    spec: ModelSpec | str,
    hardware: HardwareLike,
    batch: ArrayLike = 1,
    new_tokens: ArrayLike = 1,
    dtype: str | None = None,
    *,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    efficiency: bool | None = None,
    engine: Engine | str | None = None,
    tp: int | None = None,
) -> npt.NDArray[np.int64]:
    """The context (cached tokens per sequence) from which a pass of ``new_tokens`` per sequence at ``batch`` is
    KV-bound: its attention operators take at least half of its time (:func:`kv_share`; docs/cost-model.md,
    section 31). -1 where the pass stays weight-bound up to the model's context; 0 where it is KV-bound on an empty
    cache. The attention's time grows with the context and nothing else does, so the crossover is found exactly on
    the integer grid by bisection, vectorised over batch x new tokens. A verify pass of gamma + 1 tokens past this
    context reads the cache once for all its tokens: speculation's verify costs about a plain step."""
    pr = pricing_of(
        hardware, dtype=dtype, weight_dtype=weight_dtype, kv_dtype=kv_dtype, efficiency=efficiency, engine=engine, tp=tp
    )
    spec = get_model(spec)
    return _kv_bound_context(spec, pr, batch, new_tokens)


def _kv_bound_context(spec: ModelSpec, pr: Pricing, batch: ArrayLike, new_tokens: ArrayLike) -> npt.NDArray[np.int64]:
    B = check_min("batch", batch, 1, integer=True)
    n = check_min("new_tokens", new_tokens, 1, integer=True)
    B, n = np.broadcast_arrays(B, n)
    if spec.is_abstract:  # weights only: no cache to read
        return np.full(B.shape, -1, dtype=np.int64)
    cap = spec.max_context - n
    if np.any(cap < 0):
        raise SpecroofError(f"new_tokens exceeds {spec.name}'s max context of {spec.max_context} tokens")

    def bound(L: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        return _kv_share(spec, pr, B, n, L) >= 0.5

    at_zero = bound(np.zeros(B.shape, dtype=np.int64))
    at_cap = bound(cap.astype(np.int64))
    lo = np.zeros(B.shape, dtype=np.int64)  # invariant: not KV-bound at lo (where a crossover is searched)
    hi = cap.astype(np.int64)  # invariant: KV-bound at hi
    active = ~at_zero & at_cap
    while np.any(active & (hi - lo > 1)):
        mid = (lo + hi) // 2
        ok = bound(np.where(active, mid, lo))
        step = active & (hi - lo > 1)
        hi = np.where(step & ok, mid, hi)
        lo = np.where(step & ~ok, mid, lo)
    return np.where(at_zero, 0, np.where(at_cap, hi, -1)).astype(np.int64)
