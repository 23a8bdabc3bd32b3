"""A pass's time: seconds through the scalar pricer where a table serves, the array path otherwise; pass_time."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from roofline.core.errors import check_broadcast
from roofline.core.validation import check_tp
from roofline.costing.engine import Engine
from roofline.costing.passtime.footprint import device_memory
from roofline.costing.passtime.pricer import (
    scalar_pricer,
    step_pricer,
)
from roofline.costing.passtime.step import (
    Array,
    HardwareLike,
    StepTime,
    _step_time,
    pass_cost,
)
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing, pricing_for
from roofline.passes.cost import (
    scalar_config,
    scalar_count,
)
from roofline.passes.model import ModelSpec, get_model

#: up to this many configurations (a draft tree's levels, a chain's steps) are priced one by one in plain floats:
#: below it numpy's per-call overhead on the operators' arrays costs more than the arithmetic
FEW = 32


def _few_seconds(spec: ModelSpec, pr: Pricing, batch: Any, new_tokens: Any, context: Any, tp: int) -> Array | None:
    """Seconds of a short 1-D sweep of whole numbers, each configuration on the scalar path; None otherwise."""
    sizes = []
    for v in (batch, new_tokens, context):
        if isinstance(v, np.ndarray):
            if v.ndim != 1 or v.dtype.kind not in "iu":
                return None
            sizes.append(v.size)
        elif scalar_count(v, 0) is None:
            return None
    if not sizes or max(sizes) > FEW or min(sizes) < 1 or any(n not in (1, max(sizes)) for n in sizes):
        return None
    size = max(sizes)
    cols = [
        v.tolist() * (size // len(v)) if isinstance(v, np.ndarray) else [v] * size for v in (batch, new_tokens, context)
    ]
    pricer = scalar_pricer(spec, pr, tp)
    if pricer is None:
        return None
    out = []
    for b, n, c in zip(*cols, strict=True):
        one = scalar_config(spec, b, n, c, None)
        if one is None:  # out of range somewhere: the array path says where
            return None
        out.append(pricer.seconds(*one))
    return np.array(out)


def pass_seconds(
    spec: ModelSpec,
    pr: Pricing,
    batch: ArrayLike,
    new_tokens: ArrayLike | None,
    context: ArrayLike,
    *,
    tree: Any = None,
    tp: int | None = None,
) -> Array:
    """Seconds of one pass of ``spec`` (just the total: the drafters' and rounds' fast path).

    ``tp`` overrides the pricing's (a drafter's own passes run on one device).
    """
    tp = pr.tp if tp is None else tp
    one = scalar_config(spec, batch, new_tokens, context, tree)
    if one is not None:  # one configuration (a notebook's question, a tree's verify pass): plain floats
        pricer = scalar_pricer(spec, pr, tp)
        if pricer is not None:
            return np.asarray(pricer.seconds(*one))
    elif tree is None:
        few = _few_seconds(spec, pr, batch, new_tokens, context, tp)
        if few is not None:
            return few
    cost = pass_cost(spec, pr, batch, new_tokens, context, tree)
    return pr.time_model.pass_seconds(cost, pr.dtype, overhead_s=pr.overhead_s, tp=tp)


def pass_time(
    spec: ModelSpec | str,
    hardware: HardwareLike,
    batch: ArrayLike = 1,
    new_tokens: ArrayLike | None = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    dtype: str | None = None,
    *,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    tree: Any = None,
    efficiency: bool | None = None,
    overhead_s: float | None = None,
    tp: int | None = None,
    engine: Engine | str | None = None,
) -> StepTime:
    """Time of one pass of ``spec``: :func:`forward_cost` priced by ``hardware`` (a Pricing, or a profile with options).

    ``dtype`` is the compute/activation dtype (default bf16). ``dtype="int4"`` with no
    ``weight_dtype`` means weight-only int4 (no GPU multiplies in int4): the weights are
    stored in int4 and the arithmetic runs in bf16. int8 and fp8 stay compute dtypes
    (W8A8); weight-only int8 is ``weight_dtype="int8", dtype="bf16"``. The result's
    ``fits_in_memory`` says whether the weights and the KV cache of ``batch`` x
    (``context`` + new tokens) fit in the devices' memory (a pass that does not fit is
    still priced: the flag is the warning).
    """
    pr = pricing_for(hardware, dtype, weight_dtype, kv_dtype, efficiency, overhead_s, tp, engine)
    spec = get_model(spec)
    if pr.tp > 1:  # tp must shard this model's heads: 3 devices do not split 32 heads
        check_tp(spec, pr.tp)
    check_broadcast(batch=batch, new_tokens=new_tokens, context=context)
    one = scalar_config(spec, batch, new_tokens, context, tree)
    if one is not None:
        fast = step_pricer(spec, pr, pr.tp)
        if fast is not None:
            return fast.step_time(*one)
    cost = pass_cost(spec, pr, batch, new_tokens, context, tree)
    return _step_time(cost, pr, device_memory(spec, pr, cost.batch, cost.context + cost.new_tokens))
