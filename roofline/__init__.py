"""specroof's analytic half: roofline cost of LLM passes and the value of speculative decoding.

numpy/scipy/pandas/matplotlib only; never imports torch. SI units inside.
"""

from roofline.cost import PassCost, arithmetic_intensity, forward_cost
from roofline.errors import SpecroofError
from roofline.hardware import DTYPE_BYTES, Hardware, list_hardware, load_hardware
from roofline.model import PRESETS, ModelSpec, get_model
from roofline.passtime import (
    Footprint,
    StepTime,
    batch_sweep,
    crossover_tokens,
    max_batch,
    memory_footprint,
    pass_time,
    prefill_vs_decode,
    step_time,
    weights_only_crossover,
)

__all__ = [
    "DTYPE_BYTES",
    "PRESETS",
    "Footprint",
    "Hardware",
    "ModelSpec",
    "PassCost",
    "SpecroofError",
    "StepTime",
    "arithmetic_intensity",
    "batch_sweep",
    "crossover_tokens",
    "forward_cost",
    "get_model",
    "list_hardware",
    "load_hardware",
    "max_batch",
    "memory_footprint",
    "pass_time",
    "prefill_vs_decode",
    "step_time",
    "weights_only_crossover",
]
