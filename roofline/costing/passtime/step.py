"""A pass's cost and step time from its operators' times: StepTime, the fused-MoE kernel, pass_cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine
from roofline.costing.hardware import Hardware
from roofline.costing.pricing import Pricing, pricing_of
from roofline.passes.cost import (
    PassCost,
    expected_experts_touched,
    forward_cost,
    fused_moe_tile_rows,
    moe_expert_rows,
)
from roofline.passes.dtypes import dtype_bytes
from roofline.passes.model import ModelSpec

HardwareLike = Pricing | Hardware | str


Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class StepTime:
    """Time of one pass (seconds) with its per-operator breakdown.

    ``op_*`` arrays have shape ``(n_operators, *shape)``; totals have ``shape``.
    """

    operators: tuple[str, ...]
    op_memory_s: Array
    op_compute_s: Array
    op_time_s: Array
    t_memory_s: Array
    t_compute_s: Array
    overhead_s: float
    t_step_s: Array
    tokens: npt.NDArray[np.int64]
    intensity: Array
    ridge: float
    #: device memory the configuration needs (weights on the device + KV cache of batch x (context + new
    #: tokens)), bytes, and whether it fits in the devices' memory: set by :func:`pass_time` (None from a bare cost)
    memory_bytes: Array | None = None
    fits_in_memory: npt.NDArray[np.bool_] | None = None
    #: the pass's bytes and FLOPs, for :meth:`to_frame`
    cost: PassCost | None = field(default=None, repr=False, compare=False)
    #: device seconds of the pass's tensor-parallel all-reduces (two per layer; 0 on one device), inside ``t_step_s``:
    #: NCCL's tabled time or the engine's latency plus the bytes over the link (docs/cost-model.md, section 60)
    t_allreduce_s: Any = 0.0

    @property
    def memory_bound(self) -> npt.NDArray[np.bool_]:
        """True where the pass moves bytes for longer than it computes."""
        return self.t_memory_s >= self.t_compute_s

    @property
    def tokens_per_s(self) -> Array:
        """Tokens processed per second (batch x new tokens over the pass time)."""
        return self.tokens / self.t_step_s

    @property
    def bound(self) -> npt.NDArray[np.str_]:
        return np.where(self.memory_bound, "memory", "compute")

    @property
    def pass_ridge(self) -> Array:
        """The intensity at which this pass's memory and compute times are equal, ``I x t_mem / t_comp``: the ridge
        its bound is read against when an engine prices each operator at its own rates (docs/cost-model.md, section
        64); the GPU's ``ridge`` without one. NaN where the pass computes nothing."""
        with np.errstate(divide="ignore", invalid="ignore"):
            t_comp = np.asarray(self.t_compute_s, dtype=float)
            return np.where(t_comp > 0, self.intensity * self.t_memory_s / t_comp, np.nan)

    def to_frame(self) -> pd.DataFrame:
        """One row per configuration of the sweep (batch, new tokens, context when known), unit-suffixed columns."""
        shape = np.shape(self.t_step_s)
        cols: dict[str, Any] = {}
        if self.cost is not None:
            for name in ("batch", "new_tokens", "context"):
                cols[name] = np.broadcast_to(getattr(self.cost, name), shape).ravel()
        cols |= {
            "tokens": np.broadcast_to(self.tokens, shape).ravel(),
            "t_step_s": np.ravel(self.t_step_s),
            "t_memory_s": np.broadcast_to(self.t_memory_s, shape).ravel(),
            "t_compute_s": np.broadcast_to(self.t_compute_s, shape).ravel(),
            "tokens_per_s": np.broadcast_to(self.tokens_per_s, shape).ravel(),
            "intensity_flop_per_byte": np.broadcast_to(self.intensity, shape).ravel(),
            "bound": np.broadcast_to(self.bound, shape).ravel(),
        }
        if np.any(self.t_allreduce_s):
            cols["t_allreduce_s"] = np.broadcast_to(self.t_allreduce_s, shape).ravel()
        if self.memory_bytes is not None and self.fits_in_memory is not None:
            cols["memory_bytes"] = np.broadcast_to(self.memory_bytes, shape).ravel()
            cols["fits_in_memory"] = np.broadcast_to(self.fits_in_memory, shape).ravel()
        return pd.DataFrame(cols)

    def breakdown(self) -> pd.DataFrame:
        """Per-operator times of one configuration, with the bound of each operator."""
        if self.t_step_s.size != 1:
            raise SpecroofError("breakdown() needs a single configuration; index the sweep first")
        k = len(self.operators)
        mem, comp, t = (a.reshape(k) for a in (self.op_memory_s, self.op_compute_s, self.op_time_s))
        return pd.DataFrame(
            {
                "operator": self.operators,
                "t_memory_s": mem,
                "t_compute_s": comp,
                "t_s": t,
                "bound": np.where(comp > mem, "compute", "memory"),
            }
        )


def step_time(
    cost: PassCost,
    hardware: HardwareLike,
    dtype: str | None = None,
    *,
    efficiency: bool | None = None,
    overhead_s: float | None = None,
    tp: int | None = None,
    engine: Engine | str | None = None,
) -> StepTime:
    """Roofline time of the pass ``cost`` priced by ``hardware`` (a :class:`roofline.costing.pricing.Pricing`, or a
    profile/name with the options below).

    ``dtype`` picks the compute ceiling (default: the pass's activation dtype, or the
    Pricing's). ``efficiency=True`` scales the datasheet ceilings by the profile's achievable
    fractions. ``overhead_s`` is the fixed time per pass; by default the profile's
    measured pass overhead plus per-layer overhead (zero for datasheet profiles).
    ``tp`` > 1 splits weights, KV and work over ``tp`` devices (tensor parallelism)
    and adds two ring all-reduces of the hidden state per layer over the profile's
    per-direction interconnect bandwidth, 2 (tp - 1) / tp x bytes / link each.
    ``engine`` (a name from ``engine_profiles/`` or an :class:`roofline.costing.engine.Engine`)
    adds what the software running the model adds; None is the datasheet roofline.
    """
    if dtype is None and not isinstance(hardware, Pricing):
        dtype = cost.compute_dtype
    pr = pricing_of(hardware, dtype=dtype, efficiency=efficiency, overhead_s=overhead_s, tp=tp, engine=engine)
    return _step_time(cost, pr)


def _step_time(cost: PassCost, pr: Pricing, memory_bytes: Array | None = None) -> StepTime:
    tm, dtype = pr.time_model, pr.dtype
    fixed = tm.overhead_s(cost.n_layers, cost.n_moe_layers) if pr.overhead_s is None else pr.overhead_s
    op_mem, op_comp = tm.operator_times(cost, dtype, pr.tp)
    op_t = tm.operator_seconds(op_mem, op_comp)
    comm = tm.allreduce_s(cost, pr.tp)
    return StepTime(
        operators=cost.operators,
        op_memory_s=op_mem,
        op_compute_s=op_comp,
        op_time_s=op_t,
        t_memory_s=op_mem.sum(axis=0),
        t_compute_s=op_comp.sum(axis=0),
        overhead_s=float(fixed),
        t_step_s=tm.compose(op_t, fixed, comm, cost.n_layers, cost=cost),
        tokens=cost.tokens,
        intensity=cost.intensity,
        ridge=tm.peak(dtype) / tm.bandwidth_bytes_per_s,
        memory_bytes=memory_bytes,
        fits_in_memory=None if memory_bytes is None else np.asarray(memory_bytes <= pr.memory_bytes),
        cost=cost,
        t_allreduce_s=comm,
    )


#: engines whose MoE layers run the fused-MoE kernel (tokens sorted by expert, rows padded to its tiles): vLLM's and
#: SGLang's Triton ``fused_moe``; TensorRT-LLM's grouped GEMMs tile the same way (docs/cost-model.md, section 28)
FUSED_MOE_ENGINES = ("vllm", "sglang", "trtllm", "serving")


def moe_kernel_of(pr: Pricing) -> str | None:
    """The MoE kernel a pricing's engine runs (roofline.passes.cost.MOE_KERNELS): ``"fused"`` under a serving engine (a
    versioned profile ``vllm-0.10`` counts as ``vllm``), None for the pure roofline and the eager engines."""
    e = pr.engine
    if e is None:
        return None
    name = str(e.measured.get("framework", "") if e.measured else e.name).strip().lower()
    return "fused" if name.split("-")[0].split("_")[0] in FUSED_MOE_ENGINES else None


def fused_moe_layer_seconds(
    pr: Pricing,
    experts: int,
    experts_per_token: int,
    hidden: int,
    expert_width: int,
    tokens: ArrayLike,
    *,
    expert_bytes_per_weight: float | None = None,
) -> Array:
    """Seconds of one MoE layer's routed experts for ``tokens`` tokens as a pass under ``pr`` prices them (docs/cost-model.md,
    sections 28 and 36): the engine's fused-MoE floor per layer, then the larger of the distinct experts' slices
    streamed (their bytes at the weight stream's rate, plus the engine's time per expert) and the padded tiles' FLOPs.

    An expert is a gated MLP (``3 hidden expert_width`` weights) split over ``pr.tp`` devices; its weights take the
    pricing's stored weight dtype unless ``expert_bytes_per_weight`` says otherwise (MXFP4: 4.25 / 8). This is the
    term the pass adds per MoE layer, priced alone: what a kernel benchmark (vLLM's ``benchmark_moe.py``, SGLang's
    ``tuning_fused_moe_triton.py``) times. Broadcasts over ``tokens``."""
    tm, e, tp = pr.time_model, pr.time_model.engine, pr.tp
    T = np.asarray(tokens, dtype=float)
    wb = dtype_bytes(pr.stored_weight_dtype) if expert_bytes_per_weight is None else float(expert_bytes_per_weight)
    slice_params = 3.0 * hidden * expert_width  # over tp devices: the rates below are tp devices' rates
    touched = expected_experts_touched(experts, experts_per_token, T)
    kernel = moe_kernel_of(pr)
    rows = moe_expert_rows(experts, experts_per_token, T, kernel)
    zero = np.zeros((1, *T.shape))
    layer_flops = 2.0 * np.asarray(rows, dtype=float) * slice_params
    # the routed experts as one MoE layer's MLP operator, priced by the time model's own rules at the weight
    # stream's rate: the weights' dtype rate (none for explicit bytes per weight), the fused kernel's time per expert
    layer = PassCost(
        operators=("mlp",),
        flops=layer_flops[None],
        bytes_weights=(touched * slice_params * wb)[None],
        bytes_kv_read=zero,
        bytes_kv_write=zero,
        bytes_act=zero,
        batch=np.ones(T.shape, dtype=np.int64),
        new_tokens=np.ones(T.shape, dtype=np.int64),
        context=np.zeros(T.shape, dtype=np.int64),
        compute_dtype=pr.dtype,
        n_layers=1,
        weight_dtype=pr.stored_weight_dtype if expert_bytes_per_weight is None else "",
        n_moe_layers=1 if kernel is not None else 0,
        routed_experts=touched,
        routed_flops=layer_flops if kernel is not None and expert_bytes_per_weight is None else 0.0,
        moe_tile_rows=fused_moe_tile_rows(T, experts, experts_per_token) if kernel is not None else 0.0,
    )
    mem = tm.operator_memory(layer, tm.bandwidth_bytes_per_s * tp, tp)[0]
    rate = tm.compute_rates(("mlp",), pr.dtype, tp)[0][0]
    # the fused kernel's tiles at their own rate (section 56): the time model's rule for the padded tiles' FLOPs
    excess = (
        tm.moe_tile_excess(layer.moe_tile_rows, layer.weight_dtype)
        if kernel is not None and expert_bytes_per_weight is None
        else 0.0
    )
    comp = layer.flops[0] * (1.0 + excess) / rate
    floor = e.moe_layer_s if e is not None and kernel is not None else 0.0
    return np.asarray(floor + tm.operator_seconds(mem, comp), dtype=float)


def pass_cost(
    spec: ModelSpec,
    pr: Pricing,
    batch: ArrayLike,
    new_tokens: ArrayLike | None,
    context: ArrayLike,
    tree: Any = None,
) -> PassCost:
    """The bytes and FLOPs of one pass of ``spec`` in the pricing's dtypes."""
    return forward_cost(
        spec,
        batch,
        new_tokens,
        context,
        weight_dtype=pr.stored_weight_dtype,
        kv_dtype=pr.kv_dtype,
        act_dtype=pr.dtype,
        tree=tree,
        moe_kernel=moe_kernel_of(pr),
    )
