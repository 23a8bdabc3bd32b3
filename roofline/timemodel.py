"""The one time model: how the roofline turns a pass's bytes and FLOPs into seconds on one device.

``TimeModel`` holds every parameter of the composition (docs/cost-model.md, section 2)
in SI units; :meth:`TimeModel.step_time` is the only place the composition is written:

    t_op   = max(M, C) + (1 - overlap) min(M, C),  M = bytes / bandwidth, C = FLOPs / peak
    t_pass = max(sum_op t_op + pass_overhead + layers x layer_overhead + all-reduces,
                 host_pass + layers x host_layer)

A datasheet :class:`roofline.hardware.Hardware` produces one (``hw.time_model()``:
measured figures where the profile has them), and the fit (``measure.fit``) builds
one from the parameters it optimises, so the time a fit minimises is the time every
prediction uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from roofline.cost import PassCost
from roofline.errors import SpecroofError

Array = npt.NDArray[np.float64]

#: Operators whose FLOPs are the attention products (their own throughput when fitted)
ATTENTION_OPERATORS = ("attn_scores", "attn_values")


def combine(op_mem: Array, op_comp: Array, overlap: float = 1.0) -> Array:
    """Operator time from its memory and compute time: max + (1 - overlap) x min.

    ``overlap`` = 1 is the roofline (the shorter side hides under the longer, as on GPUs
    whose copy engines and tensor cores run concurrently); 0 adds the two, which is what
    a CPU measures when the same cores stream the weights and do the arithmetic.
    """
    hi = np.maximum(op_mem, op_comp)
    if overlap >= 1.0:
        return hi
    return hi + (1.0 - overlap) * np.minimum(op_mem, op_comp)


@dataclass(frozen=True)
class TimeModel:
    """Every parameter of a pass's time on one device, SI units (bytes/s, FLOP/s, seconds).

    ``peak_flop_per_s`` maps a dtype to its matrix-product ceiling; the optional fields are
    refinements a measurement or a fit supplies (None/0: the pure roofline).
    """

    bandwidth_bytes_per_s: float
    peak_flop_per_s: Mapping[str, float]
    #: one-token passes run matrix-vector kernels, which may stream at another rate
    gemv_bandwidth_bytes_per_s: float | None = None
    #: the attention products' own throughput (None: the dtype's peak)
    attention_flop_per_s: float | None = None
    #: compute time x (1 + half / tokens): small products do not fill the matrix units
    matmul_half_tokens: float = 0.0
    #: share of the shorter of memory and compute time hidden under the longer, in [0, 1]
    overlap: float = 1.0
    pass_overhead_s: float = 0.0
    layer_overhead_s: float = 0.0
    #: weights streamed from host memory over this link every pass (None: in device memory)
    weights_link_bytes_per_s: float | None = None
    #: per-direction device-to-device link, for tensor-parallel all-reduces
    interconnect_bytes_per_s: float | None = None
    #: latency of one all-reduce on top of its bytes over the link (an engine's collectives)
    allreduce_latency_s: float = 0.0
    #: host seconds to issue a pass and each layer of it; the device's work overlaps them (an engine's)
    host_pass_s: float = 0.0
    host_layer_s: float = 0.0
    #: per quantised weight dtype: bandwidth relative to the dense rate, and bytes per weight byte
    weight_bandwidth_ratio: Mapping[str, float] = field(default_factory=dict)
    weight_bytes_factor: Mapping[str, float] = field(default_factory=dict)
    #: label for errors
    name: str = field(default="", compare=False)

    def peak(self, dtype: str) -> float:
        if dtype not in self.peak_flop_per_s:
            have = ", ".join(self.peak_flop_per_s) or "none"
            raise SpecroofError(f"{self.name or 'this device'} has no {dtype} peak (it has: {have})")
        return float(self.peak_flop_per_s[dtype])

    def operator_times(self, cost: PassCost, dtype: str, tp: int = 1) -> tuple[Array, Array]:
        """Per-operator memory and compute seconds of ``cost``: the roofline's two sides, before combining."""
        bw: Any = self.bandwidth_bytes_per_s * tp
        if (
            self.gemv_bandwidth_bytes_per_s is not None
            and self.gemv_bandwidth_bytes_per_s != self.bandwidth_bytes_per_s
        ):
            bw = np.where(cost.tokens == 1, self.gemv_bandwidth_bytes_per_s * tp, bw)
        wdt = cost.weight_dtype
        w_bytes = cost.bytes_weights * self.weight_bytes_factor.get(wdt, 1.0)
        if self.weights_link_bytes_per_s is not None:
            op_mem = w_bytes / (self.weights_link_bytes_per_s * tp) + (cost.bytes - cost.bytes_weights) / bw
        elif wdt in self.weight_bandwidth_ratio or wdt in self.weight_bytes_factor:
            w_bw = bw * self.weight_bandwidth_ratio.get(wdt, 1.0)
            op_mem = w_bytes / w_bw + (cost.bytes - cost.bytes_weights) / bw
        else:
            op_mem = cost.bytes / bw
        peak = self.peak(dtype) * tp
        op_comp = cost.flops / peak
        if self.matmul_half_tokens:
            op_comp = op_comp * (1.0 + self.matmul_half_tokens / cost.tokens)
        if self.attention_flop_per_s is not None and self.attention_flop_per_s != self.peak(dtype):
            attn = np.isin(np.asarray(cost.operators), ATTENTION_OPERATORS)
            op_comp[attn] = cost.flops[attn] / (self.attention_flop_per_s * tp)
        return op_mem, op_comp

    def overhead_s(self, n_layers: int) -> float:
        """Fixed seconds per pass outside the operators: per pass plus per layer."""
        return self.pass_overhead_s + n_layers * self.layer_overhead_s

    def allreduce_s(self, cost: PassCost, tp: int) -> Any:
        """Two ring all-reduces of the hidden state per layer over ``tp`` devices: 2 (tp - 1) / tp x bytes / link."""
        if tp <= 1:
            return 0.0
        if self.interconnect_bytes_per_s is None:
            raise SpecroofError(f"tp={tp} needs an interconnect bandwidth, which {self.name!r} does not list")
        per = 2.0 * (tp - 1) / tp * np.asarray(cost.allreduce_bytes) / self.interconnect_bytes_per_s
        return 2 * cost.n_layers * (self.allreduce_latency_s + per)

    def host_s(self, n_layers: int) -> float:
        """Host seconds to issue one pass (0 without an engine)."""
        return self.host_pass_s + n_layers * self.host_layer_s

    def compose(self, op_time_s: Array, fixed_s: float, allreduce_s: Any, n_layers: int) -> Array:
        """The pass time from its parts: the device's work, or the host's when issuing takes longer."""
        device = op_time_s.sum(axis=0) + fixed_s + allreduce_s
        host = self.host_s(n_layers)
        return np.maximum(device, host) if host > 0 else device

    def pass_seconds(self, cost: PassCost, dtype: str, *, overhead_s: float | None = None, tp: int = 1) -> Array:
        """Seconds of the pass ``cost`` (the composition; ``overhead_s`` replaces the fixed overheads)."""
        op_mem, op_comp = self.operator_times(cost, dtype, tp)
        fixed = self.overhead_s(cost.n_layers) if overhead_s is None else overhead_s
        op_t = combine(op_mem, op_comp, self.overlap)
        return self.compose(op_t, fixed, self.allreduce_s(cost, tp), cost.n_layers)
