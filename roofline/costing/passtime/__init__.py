"""Time of a forward pass on a hardware profile: the roofline, crossover K, sweeps.

time(op) = max(bytes / bandwidth, flops / peak[dtype]); a pass is the sum over
operators plus a fixed overhead. A pass is *memory bound* when its total
memory time is at least its total compute time; the crossover K is the largest
number of new tokens for which that still holds.

One file per idea: ``step`` (a pass's cost and step time from its operators, the fused-MoE kernel),
``pricer`` (the scalar pricers, tabulated once from the array path), ``passes`` (``pass_seconds``,
``pass_time``), ``crossover`` (crossover K and the KV share), ``footprint`` (memory footprint and fit)
and ``sweeps`` (batch and phase sweeps).
"""

from roofline.core.errors import check_broadcast
from roofline.costing.passtime.crossover import crossover_tokens, kv_bound_context, kv_share, weights_only_crossover
from roofline.costing.passtime.footprint import Footprint, device_memory, max_batch, memory_footprint
from roofline.costing.passtime.passes import FEW, pass_seconds, pass_time
from roofline.costing.passtime.pricer import chain_seconds, levels_seconds, scalar_pricer, step_pricer, visible_seconds
from roofline.costing.passtime.step import (
    FUSED_MOE_ENGINES,
    Array,
    HardwareLike,
    StepTime,
    _step_time,
    fused_moe_layer_seconds,
    moe_kernel_of,
    pass_cost,
    step_time,
)
from roofline.costing.passtime.sweeps import batch_sweep, prefill_vs_decode
from roofline.costing.pricing import DEFAULT_CONTEXT
from roofline.costing.timemodel import ATTENTION_OPERATORS, combine

__all__ = [
    "ATTENTION_OPERATORS",
    "Array",
    "DEFAULT_CONTEXT",
    "FEW",
    "FUSED_MOE_ENGINES",
    "Footprint",
    "HardwareLike",
    "StepTime",
    "_step_time",
    "batch_sweep",
    "chain_seconds",
    "check_broadcast",
    "combine",
    "crossover_tokens",
    "device_memory",
    "fused_moe_layer_seconds",
    "kv_bound_context",
    "kv_share",
    "levels_seconds",
    "max_batch",
    "memory_footprint",
    "moe_kernel_of",
    "pass_cost",
    "pass_seconds",
    "pass_time",
    "prefill_vs_decode",
    "scalar_pricer",
    "step_pricer",
    "step_time",
    "visible_seconds",
    "weights_only_crossover",
]
