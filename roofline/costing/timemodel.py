"""The one time model: how the roofline turns a pass's bytes and FLOPs into seconds on one device.

``TimeModel`` holds every parameter of the composition (docs/cost-model.md, section 2)
in SI units; :meth:`TimeModel.step_time` is the only place the composition is written:

    t_op   = max(M, C) + (1 - overlap) min(M, C),  M = bytes / bandwidth, C = FLOPs / peak
    t_pass = max(sum_op t_op + pass_overhead + layers x layer_overhead + all-reduces,
                 host_pass + layers x host_layer)

A datasheet :class:`roofline.costing.hardware.Hardware` produces one (``hw.time_model()``:
measured figures where the profile has them), and the fit (``measure.fit``) builds
one from the parameters it optimises, so the time a fit minimises is the time every
prediction uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from roofline.core.errors import SpecroofError
from roofline.passes.cost import PassCost

if TYPE_CHECKING:
    from roofline.costing.collectives import NcclAllReduce
    from roofline.costing.engine import Engine
    from roofline.costing.kv_efficiency import KVRead

Array = npt.NDArray[np.float64]

#: the dense MLP's share of a decoder layer's device floor (docs/cost-model.md, section 40): three of the nine kernels
#: of a CUDA-graph decode layer (SGLang's and vLLM's Llama layer: fused add-and-norm, qkv GEMM, rotary, attention,
#: output GEMM, fused add-and-norm, merged gate/up GEMM, SiLU-and-mul, down GEMM), counted, not fitted
DENSE_MLP_FLOOR_SHARE = 3.0 / 9.0

#: Operators whose FLOPs are the attention products (their own throughput when fitted)
ATTENTION_OPERATORS = ("attn_scores", "attn_values")


def memory_regime(tokens: float, tops: tuple[int, ...]) -> int:
    """Which of a time model's streaming rates a pass of ``tokens`` rows reads at: 1 for one row (the gemv
    rate), 2 + j for the j-th range of ``rows_bandwidth_bytes_per_s`` (its max rows ``tops``), 0 past them all
    (the bandwidth). The order :meth:`TimeModel.stream_rates` lists the rates in."""
    if tokens == 1.0:
        return 1
    for j, top in enumerate(tops):
        if tokens <= top:
            return 2 + j
    return 0


class _Ops:
    """The two functions the composition needs beyond + and *, for one kind of operand: the time model's rules are
    written once over them and run on a sweep's arrays (numpy's) and on one configuration's floats (Python's: a
    numpy call costs a microsecond, the arithmetic of a scalar pass a few tens of nanoseconds)."""

    __slots__ = ("larger", "smaller")

    def __init__(self, larger: Any, smaller: Any) -> None:
        self.larger, self.smaller = larger, smaller


#: floats (one configuration, the scalar pricers) and numpy arrays (everything else)
FLOAT_OPS = _Ops(max, min)
ARRAY_OPS = _Ops(np.maximum, np.minimum)


def ops_for(*values: Any) -> _Ops:
    """:data:`FLOAT_OPS` when every value is a Python float, :data:`ARRAY_OPS` otherwise."""
    for v in values:
        if type(v) is not float:
            return ARRAY_OPS
    return FLOAT_OPS


#: the experts' stored dtypes whose fused-MoE tiles the kernel tables time (docs/cost-model.md, section 56): the
#: Triton fused_moe over bf16/fp16 experts and its w8a8 path over fp8/int8 ones
MOE_TILE_DTYPES = ("bf16", "fp16", "fp8", "int8")


def combine(op_mem: Any, op_comp: Any, overlap: float = 1.0) -> Any:
    """Operator time from its memory and compute time: max + (1 - overlap) x min.

    ``overlap`` = 1 is the roofline (the shorter side hides under the longer, as on GPUs
    whose copy engines and tensor cores run concurrently); 0 adds the two, which is what
    a CPU measures when the same cores stream the weights and do the arithmetic. Floats
    give a float (the scalar pricers), anything else an array.
    """
    ops = FLOAT_OPS if type(op_mem) is float and type(op_comp) is float else ARRAY_OPS
    hi = ops.larger(op_mem, op_comp)
    if overlap >= 1.0:
        return hi
    return hi + (1.0 - overlap) * ops.smaller(op_mem, op_comp)


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
    #: passes of a few rows (tokens) whose kernels stream at rates of their own: ``((max rows, bytes/s), ...)``
    #: in ascending max rows, each entry the passes of more rows than the entry before (than one, for the
    #: first: one-token passes are the gemv rate's) up to its own; wider passes stream at the bandwidth. A
    #: harness that picks a kernel per range of rows gets one rate per range from its fit
    rows_bandwidth_bytes_per_s: tuple[tuple[int, float], ...] = ()
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
    #: NCCL's all-reduce from public tables, for an engine that runs NCCL's (docs/cost-model.md, section 60); None:
    #: ``allreduce_latency_s`` plus the bytes over the link
    nccl: NcclAllReduce | None = None
    #: host seconds to issue a pass and each layer of it; the device's work overlaps them (an engine's)
    host_pass_s: float = 0.0
    host_layer_s: float = 0.0
    #: per quantised weight dtype: bandwidth relative to the dense rate, and bytes per weight byte
    weight_bandwidth_ratio: Mapping[str, float] = field(default_factory=dict)
    weight_bytes_factor: Mapping[str, float] = field(default_factory=dict)
    #: the engine whose per-kernel launches, per-step host time, paged-KV efficiency and sampling this
    #: composition prices (docs/cost-model.md, section 6); None: none of those terms
    engine: Engine | None = None
    #: the decode-attention kernel's KV read by batch, heads and GPU (docs/cost-model.md, section 54); None: the
    #: engine's flat ``kv_bandwidth_fraction``
    kv_read: KVRead | None = None
    #: label for errors
    name: str = field(default="", compare=False)

    def peak(self, dtype: str) -> float:
        if dtype not in self.peak_flop_per_s:
            have = ", ".join(self.peak_flop_per_s) or "none"
            raise SpecroofError(
                f"{self.name or 'this device'} has no {dtype} peak (it has: {have}): price it in one of those (--dtype)"
            )
        return float(self.peak_flop_per_s[dtype])

    def stream_rates(self, tp: int = 1) -> tuple[float, ...]:
        """Bytes/s of a pass's streams over ``tp`` devices in each memory regime, in :func:`memory_regime`'s order:
        many-token passes (the bandwidth), one-token passes (matrix-vector kernels: the gemv rate where the profile
        has its own), then each range of ``rows_bandwidth_bytes_per_s``."""
        base = self.bandwidth_bytes_per_s
        gemv = self.gemv_bandwidth_bytes_per_s
        one = gemv if gemv is not None and gemv != base else base
        return (base * tp, one * tp, *(rate * tp for _, rate in self.rows_bandwidth_bytes_per_s))

    def stream_rate(self, tokens: Any, tp: int = 1) -> Any:
        """The bytes/s a pass of ``tokens`` rows streams at (:meth:`stream_rates`, picked by :func:`memory_regime`);
        a float where every regime has the same rate, an array over ``tokens`` otherwise."""
        rates = self.stream_rates(tp)
        if len(set(rates)) == 1:
            return rates[0]
        t = np.asarray(tokens)
        regime = np.zeros(t.shape, dtype=np.intp)
        lo = 1
        for j, (top, _) in enumerate(self.rows_bandwidth_bytes_per_s):
            regime = np.where((t > lo) & (t <= top), 2 + j, regime)
            lo = top
        regime = np.where(t == 1, 1, regime)
        return np.asarray(rates)[regime]

    def operator_memory(self, cost: PassCost, bw: Any, tp: int = 1) -> Array:
        """Per-operator memory seconds of ``cost`` streamed at ``bw`` bytes/s: the weights at their own rate (a host
        link, a quantised dtype's kernels), a latent cache read whole on every rank, the paged KV's efficiency, the
        fused-MoE kernel's time per distinct expert and the sampler's passes over the logits.

        Linear in the cost's bytes, routed experts and tokens for a given ``bw``: the scalar pricers tabulate it on
        the cost of one unit of each of their variables (roofline.costing.passtime, docs/cost-model.md, section 47)."""
        wdt = cost.weight_dtype
        w_bytes = cost.bytes_weights * self.weight_bytes_factor.get(wdt, 1.0)
        if self.weights_link_bytes_per_s is not None:
            op_mem = w_bytes / (self.weights_link_bytes_per_s * tp) + (cost.bytes - cost.bytes_weights) / bw
        elif wdt in self.weight_bandwidth_ratio or wdt in self.weight_bytes_factor:
            w_bw = bw * self.weight_bandwidth_ratio.get(wdt, 1.0)
            op_mem = w_bytes / w_bw + (cost.bytes - cost.bytes_weights) / bw
        else:
            op_mem = cost.bytes / bw
        own = cost.expert_format_bytes
        if np.any(own) and "mlp" in cost.operators:
            # routed experts stored in their own format stream as bytes, not through the weight dtype's kernels
            op_mem = op_mem.copy()
            op_mem[cost.operators.index("mlp")] += own * self.own_format_excess(bw, wdt, tp)
        if tp > 1 and self.lm_head_replicated and "lm_head" in cost.operators:
            # every rank reads the whole LM head, not its 1/tp share (docs/cost-model.md, section 61), at the rate
            # the head's weights stream at
            head = cost.operators.index("lm_head")
            op_mem = op_mem.copy()
            op_mem[head] = op_mem[head] + (tp - 1) * self.weight_seconds(w_bytes[head], bw, wdt, tp)
        kv_read: Any = cost.bytes_kv_read
        if tp > 1 and getattr(cost, "kv_replicated", False):
            # a latent cache (MLA) is whole on every rank: each reads and writes all of it, not its 1/tp share
            op_mem = op_mem + (cost.bytes_kv_read + cost.bytes_kv_write) * (tp - 1) / bw
            kv_read = cost.bytes_kv_read * tp
        e = self.engine
        if self.kv_read is not None:
            # the split-KV kernel's time at this batch's occupancy of the SMs (section 54), in place of the flat share
            op_mem = op_mem + kv_read * self.kv_read_excess(cost, bw, tp)
        elif e is not None and e.kv_bandwidth_fraction != 1.0:
            # attention over the (paged) cache reads its KV at a share of the weight stream's rate
            op_mem = op_mem + kv_read / bw * (1.0 / e.kv_bandwidth_fraction - 1.0)
        if e is not None and e.moe_expert_s and cost.n_moe_layers and "mlp" in cost.operators:
            # the fused-MoE kernel's time per distinct routed expert a layer touches (section 40)
            mlp = cost.operators.index("mlp")
            op_mem = op_mem.copy()
            op_mem[mlp] = op_mem[mlp] + cost.n_moe_layers * e.moe_expert_s * np.asarray(cost.routed_experts)
        if e is not None and e.sampling_passes and cost.vocab_size and "lm_head" in cost.operators:
            # sampling reads and writes the fp32 logits of every token (softmax, top-k/p, the draw)
            head = cost.operators.index("lm_head")
            logits = cost.tokens * float(cost.vocab_size) * 4.0 * e.sampling_passes
            op_mem = op_mem.copy()
            op_mem[head] = op_mem[head] + logits / bw
        return op_mem

    def kv_read_excess(self, cost: PassCost, bw: Any, tp: int = 1) -> Any:
        """Seconds per KV byte read beyond ``1 / bw`` under :attr:`kv_read` for the pass ``cost``
        (:meth:`kv_read_excess_of` of its bytes per device and layer, batch, context and new tokens)."""
        call = np.asarray(cost.bytes_kv_read, dtype=float).sum(axis=0) / (tp * max(cost.n_layers, 1))
        return self.kv_read_excess_of(call, cost.batch, cost.context, cost.new_tokens, bw, tp)

    def kv_read_excess_of(self, call: Any, batch: Any, context: Any, new_tokens: Any, bw: Any, tp: int = 1) -> Any:
        """Seconds per KV byte read beyond ``1 / bw`` under :attr:`kv_read` (docs/cost-model.md, section 54) when each
        device's call of each layer reads ``call`` bytes for ``batch`` sequences of ``context`` cached and
        ``new_tokens`` new tokens: :meth:`roofline.costing.kv_efficiency.KVRead.call_read_seconds` for the call's
        work units, the (sequence, KV head) pairs counted from the bytes a sequence reads per token and layer on one
        device, times the query tiles of a wide pass. Floats or arrays (the scalar pricer calls it with floats)."""
        from roofline.costing.kv_efficiency import HEAD_BYTES, QUERY_TILE

        kv = self.kv_read
        assert kv is not None
        call = np.asarray(call, dtype=float)
        batch = np.asarray(batch, dtype=float)
        context = np.asarray(context, dtype=float)
        heads = np.maximum(np.round(call / np.maximum(batch * context, 1.0) / HEAD_BYTES), 1.0)
        # a pass of many new tokens per sequence runs a prefill kernel, one block per 64-row query tile as well
        tiles = np.ceil(np.asarray(new_tokens, dtype=float) / QUERY_TILE)
        read = kv.call_read_seconds(call, batch * heads * tiles, context, self.bandwidth_bytes_per_s)
        # a pass that reads no cache (the first token of a sequence) has no excess: where=call > 0
        per_byte = np.divide(read, call * tp, out=np.zeros(np.shape(read)), where=call > 0)
        return np.where(call > 0, per_byte - 1.0 / bw, 0.0)

    def compute_rates(self, operators: tuple[str, ...], dtype: str, tp: int = 1) -> tuple[Array, npt.NDArray[np.bool_]]:
        """Per operator the FLOP/s its products run at over ``tp`` devices (the attention products at their own
        throughput where the profile has one), and whether small passes scale its time (:meth:`small_pass_factor`:
        the matrix units' fill; the attention products' own throughput is measured at its sizes)."""
        peak = self.peak(dtype)
        rates = np.full(len(operators), peak * tp)
        scaled = np.ones(len(operators), dtype=bool)
        if self.attention_flop_per_s is not None and self.attention_flop_per_s != peak:
            attn = np.isin(np.asarray(operators), ATTENTION_OPERATORS)
            rates[attn] = self.attention_flop_per_s * tp
            scaled[attn] = False
        if tp > 1 and self.lm_head_replicated and "lm_head" in operators:
            # every rank computes the whole vocabulary's logits (docs/cost-model.md, section 61)
            rates[operators.index("lm_head")] = peak
        return rates, scaled

    def moe_tile_excess(self, tile_rows: Any, weight_dtype: str = "") -> Any:
        """Per FLOP of the fused-MoE kernel's padded tiles, the time beyond the engine's GEMM rate, in units of that
        rate's time per FLOP (docs/cost-model.md, section 56): a tile of ``bm = tile_rows`` rows (the kernel's
        BLOCK_SIZE_M, roofline.passes.cost.fused_moe_tile_rows) runs at ``bm / (bm + h)`` of the best-shape GEMM rate,
        which is the engine's rate over its ``compute_fraction``; so ``compute_fraction (1 + h / bm) - 1`` (below 0
        where the tile beats the engine's rate). 0 without the engine's ``moe_tile_half_rows``, where ``bm`` is 0, and
        for experts stored in a dtype the kernel tables do not time (:data:`MOE_TILE_DTYPES`: 4-bit experts run other
        kernels). Floats or arrays."""
        e = self.engine
        if e is None or not e.moe_tile_half_rows or (weight_dtype and weight_dtype not in MOE_TILE_DTYPES):
            return 0.0
        bm = np.asarray(tile_rows, dtype=float)
        per = np.divide(e.moe_tile_half_rows, bm, out=np.zeros(bm.shape), where=bm > 0)
        out = np.where(bm > 0, e.compute_fraction * (1.0 + per) - 1.0, 0.0)
        return float(out) if out.ndim == 0 else out

    def small_pass_factor(self, tokens: Any) -> Any:
        """Compute time x (1 + half / tokens): products of few rows do not fill the matrix units (1 without it)."""
        return 1.0 + self.matmul_half_tokens / tokens if self.matmul_half_tokens else 1.0

    def operator_seconds(self, op_mem: Any, op_comp: Any) -> Any:
        """An operator's seconds from its two sides under this model's overlap (:func:`combine`): floats or arrays."""
        return combine(op_mem, op_comp, self.overlap)

    def operator_times(self, cost: PassCost, dtype: str, tp: int = 1) -> tuple[Array, Array]:
        """Per-operator memory and compute seconds of ``cost``: the roofline's two sides, before combining."""
        op_mem = self.operator_memory(cost, self.stream_rate(cost.tokens, tp), tp)
        rates, scaled = self.compute_rates(cost.operators, dtype, tp)
        shape = (len(rates),) + (1,) * (np.ndim(cost.flops) - 1)
        op_comp = cost.flops / rates.reshape(shape)
        excess = self.moe_tile_excess(cost.moe_tile_rows, cost.weight_dtype)
        if np.any(excess) and np.any(cost.routed_flops) and "mlp" in cost.operators:
            # the fused-MoE tiles run their FLOPs at the tile's rate, not the engine's GEMM rate (section 56)
            mlp = cost.operators.index("mlp")
            op_comp = op_comp.copy()
            op_comp[mlp] = op_comp[mlp] + np.asarray(cost.routed_flops) * excess / rates[mlp]
        if self.matmul_half_tokens:
            op_comp = np.where(scaled.reshape(shape), op_comp * self.small_pass_factor(cost.tokens), op_comp)
        return op_mem, op_comp

    @property
    def lm_head_replicated(self) -> bool:
        """Whether the engine's tensor parallelism runs the whole LM head on every rank (section 61)."""
        return self.engine is not None and self.engine.lm_head_replicated

    def weight_seconds(self, w_bytes: Any, bw: Any, wdt: str, tp: int) -> Any:
        """Seconds to stream ``w_bytes`` of weights (the engine's bytes factor already applied) over ``tp`` devices at
        the rate :meth:`operator_memory` gives the weights (``bw`` is the devices' rate together): a host link, a
        quantised dtype's kernels, or ``bw``."""
        if self.weights_link_bytes_per_s is not None:
            return w_bytes / (self.weights_link_bytes_per_s * tp)
        return w_bytes / (bw * self.weight_bandwidth_ratio.get(wdt, 1.0))

    def own_format_excess(self, bw: Any, wdt: str, tp: int) -> Any:
        """Seconds per byte of a weight in its own format (routed experts in MXFP4) beyond what the pass priced it at:
        its bytes stream at the plain rate, where the weight dtype's bytes take that dtype's engine factor and rate
        (docs/cost-model.md, section 51); zero where the weight dtype has neither."""
        factor = self.weight_bytes_factor.get(wdt, 1.0)
        if self.weights_link_bytes_per_s is not None:
            return (1.0 - factor) / (self.weights_link_bytes_per_s * tp)
        if wdt in self.weight_bandwidth_ratio or wdt in self.weight_bytes_factor:
            return 1.0 / bw - factor / (bw * self.weight_bandwidth_ratio.get(wdt, 1.0))
        return 0.0

    def overhead_s(self, n_layers: int, n_moe_layers: int = 0) -> float:
        """Fixed seconds per pass outside the operators: per pass plus per layer, plus the engine's fused-MoE floor per
        MoE layer (docs/cost-model.md, section 40)."""
        t = self.pass_overhead_s + n_layers * self.layer_overhead_s
        e = self.engine
        if n_moe_layers and e is not None and e.moe_layer_s:
            # an MoE layer runs the fused call instead of the dense MLP's kernels, whose share of the per-layer floor
            # it does not pay (section 40): never less than the dense floor itself
            extra = e.moe_layer_s - DENSE_MLP_FLOOR_SHARE * self.layer_overhead_s
            t = t + n_moe_layers * max(extra, 0.0)
        return t

    def allreduce_s(self, cost: PassCost, tp: int) -> Any:
        """Two ring all-reduces of the hidden state per layer over ``tp`` devices: 2 (tp - 1) / tp x bytes / link."""
        return self.allreduce_seconds(np.asarray(cost.allreduce_bytes), cost.n_layers, tp)

    def allreduce_seconds(self, nbytes: Any, n_layers: int, tp: int) -> Any:
        """:meth:`allreduce_s` of ``nbytes`` per all-reduce (a float for a float): NCCL's tabled time where the
        engine runs NCCL's all-reduce on a GPU with tables, else the latency plus the bytes over the link."""
        if tp <= 1:
            return 0.0
        if self.nccl is not None:
            return 2 * n_layers * self.nccl.seconds(nbytes, tp)
        if self.interconnect_bytes_per_s is None:
            raise SpecroofError(f"tp={tp} needs an interconnect bandwidth, which {self.name!r} does not list")
        per = 2.0 * (tp - 1) / tp * nbytes / self.interconnect_bytes_per_s
        return 2 * n_layers * (self.allreduce_latency_s + per)

    def host_s(self, n_layers: int) -> float:
        """Host seconds to issue one pass (0 without an engine)."""
        return self.host_pass_s + n_layers * self.host_layer_s

    def extra_s(self, tokens: Any, batch: Any) -> Any:
        """The engine's extra per-pass terms (:attr:`roofline.costing.engine.Engine.pass_terms`) for a pass of ``tokens``
        tokens over ``batch`` sequences: device seconds added to the operators' (0.0 without any)."""
        e = self.engine
        if e is None or not e.pass_terms:
            return 0.0
        t: Any = 0.0
        for term in e.pass_terms:
            t = t + term(tokens, batch)
        return t

    def finish(self, device_s: Any, host_s: float, tokens: Any, batch: Any) -> Any:
        """A pass's seconds from its device work (operators, fixed overheads, all-reduces) and the host's time to
        issue it: the engine's extra terms join the device's work, the host launches ahead while the device works
        (the larger of the two), and the engine's per-step host time adds to the pass or hides under it
        (``step_overlap``). Floats give a float (the scalar pricers), arrays an array: written once for both."""
        e = self.engine
        if e is not None and e.pass_terms:
            device_s = device_s + self.extra_s(tokens, batch)
        ops = ops_for(device_s, batch)
        t = ops.larger(device_s, host_s) if host_s > 0 else device_s
        if e is not None and (e.host_step_s or e.host_step_per_seq_s):
            step = e.step_host_s(batch)
            t = ops.larger(t, step) if e.step_overlap else t + step
        return t

    def compose(
        self, op_time_s: Array, fixed_s: float, allreduce_s: Any, n_layers: int, cost: PassCost | None = None
    ) -> Array:
        """The pass time from its parts: the device's work, the host's issuing of it, and the step's host time.

        With ``cost`` an eager engine's kernels are issued one by one and the device runs each
        once it is issued and its predecessor is done (:func:`launch_pipeline`); without it the
        host's total is set against the device's (the issuing overlaps the device's work).
        The rest is :meth:`finish`: the engine's extra terms, and its per-step host time (scheduler,
        input preparation, the decoding loop), which adds to the pass, or hides under it where the
        engine overlaps it (``step_overlap``).
        """
        device = op_time_s.sum(axis=0) + fixed_s + allreduce_s
        e = self.engine
        tokens, batch = (cost.tokens, cost.batch) if cost is not None else (1, 1)
        if e is not None and e.launches and cost is not None and cost.n_layers > 0:
            # the pipeline's end is the device's last work: the extra terms follow it, no host floor is left
            t = self.finish(launch_pipeline(self, e, op_time_s, fixed_s, allreduce_s, cost), 0.0, tokens, batch)
        else:
            host = self.host_s(n_layers)
            if e is not None and e.launches:
                host = host + e.host_launch_s * (n_layers * _dense_layer_kernels(e) + _pass_kernels(e))
            t = self.finish(device, host, tokens, batch)
        return np.asarray(t, dtype=float)

    def pass_seconds(self, cost: PassCost, dtype: str, *, overhead_s: float | None = None, tp: int = 1) -> Array:
        """Seconds of the pass ``cost`` (the composition; ``overhead_s`` replaces the fixed overheads)."""
        op_mem, op_comp = self.operator_times(cost, dtype, tp)
        fixed = self.overhead_s(cost.n_layers, cost.n_moe_layers) if overhead_s is None else overhead_s
        op_t = self.operator_seconds(op_mem, op_comp)
        return self.compose(op_t, fixed, self.allreduce_s(cost, tp), cost.n_layers, cost=cost)


def _dense_layer_kernels(e: Engine) -> float:
    """Kernels an eager engine issues for one dense (SwiGLU) layer, from its per-operator counts."""
    k = e.launches
    return (
        2 * k.get("norm", 0) + k.get("qkv", 0) + k.get("rotary", 0) + k.get("kv_update", 0) + k.get("attention", 0)
        + k.get("out_proj", 0) + 3 * k.get("mlp_matrix", 0) + k.get("activation", 0) + 2 * k.get("residual", 0)
    )  # fmt: skip


def _pass_kernels(e: Engine) -> float:
    """Kernels issued once per pass: the embedding, the final norm, the LM head and the decoding loop's."""
    k = e.launches
    return k.get("embed", 0) + k.get("norm", 0) + k.get("lm_head", 0) + k.get("sampling", 0)


def launch_pipeline(tm: TimeModel, e: Engine, op_t: Array, fixed_s: Any, allreduce_s: Any, cost: PassCost) -> Array:
    """Seconds until the last kernel of an eagerly issued pass finishes.

    The host issues kernel i at ``I_i`` (``host_launch_s`` after the one before; the per-pass and
    per-layer host terms come on top) and the device runs kernels in order, each once issued
    and once its predecessor is done, so the pass ends at ``max_i (I_i + S_i)`` with ``S_i``
    the device time of kernel i and all after it (docs/cost-model.md, section 6). The kernels
    come in runs of equal cost (a norm's 8 elementwise kernels, a layer's projections), and
    the layers repeat: within a run and across layers the term is linear in the index, so its
    maximum lies at a run's first or last kernel and at the first or last layer. That makes the
    exact answer a handful of array operations, whatever the number of kernels.
    """
    k, h, nl = e.launches, e.host_launch_s, cost.n_layers
    shape = np.shape(op_t[0])
    ops = {name: op_t[i] for i, name in enumerate(cost.operators)}
    zero = np.zeros(shape)

    def dev(name: str) -> Any:
        return ops.get(name, zero)

    moe = cost.n_moe_layers / nl if nl else 0.0
    experts = np.asarray(cost.experts_touched, dtype=float)  # distinct experts per MoE layer (shared included)
    # grouped experts kernels (Transformers 5, section 53): the routed experts run in the layer's own kernels, only a
    # shared expert as an MLP of its own; a loop (Transformers 4) issues each hit expert's matrices
    grouped = k.get("grouped_experts", 0) > 0
    loop_experts = experts - np.asarray(cost.routed_experts, dtype=float) if grouped else experts
    per_layer_mats = cost.mlp_matrices * ((1.0 - moe) + moe * loop_experts)
    mlp_dev = dev("mlp") / nl
    moe_dev = mlp_dev if grouped and moe and k.get("moe_layer", 0) else zero
    norm_dev = dev("norms") / (2 * nl + 1)
    layer_floor = tm.layer_overhead_s if np.ndim(fixed_s) == 0 and fixed_s >= nl * tm.layer_overhead_s else 0.0
    pass_floor = fixed_s - nl * layer_floor
    layer = [
        (k.get("norm", 0), norm_dev),
        (k.get("qkv", 0), dev("qkv") / nl),
        (k.get("rotary", 0), zero),
        (k.get("kv_update", 0), zero),
        (k.get("attention", 0), (dev("attn_scores") + dev("attn_values")) / nl),
        (k.get("out_proj", 0), dev("out_proj") / nl),
        (k.get("residual", 0), zero),
        (k.get("norm", 0), norm_dev),
        (k.get("router", 0) * moe, dev("router") / nl),
        (k.get("moe_layer", 0) * moe, moe_dev),
        (k.get("mlp_matrix", 0) * per_layer_mats, mlp_dev - moe_dev),
        (k.get("activation", 0) * per_layer_mats / max(cost.mlp_matrices, 1), zero),
        (k.get("expert", 0) * moe * loop_experts, zero),
        (k.get("residual", 0), zero),
        # device work issued with the layer's last kernel; a hybrid model's linear-attention layers and state
        # checkpoints (docs/cost-model.md, section 52) by their device time
        (0.0, layer_floor + (np.asarray(allreduce_s) + dev("linear_attn") + dev("state_checkpoint")) / nl),
    ]
    prologue = [(k.get("embed", 0), dev("embed"))]
    epilogue = [
        (k.get("norm", 0), norm_dev),
        (k.get("lm_head", 0), dev("lm_head")),
        (k.get("sampling", 0), zero),
        (0.0, pass_floor + zero),
    ]

    def runs(segments: list[tuple[Any, Any]]) -> tuple[Any, Any, list[tuple[Any, Any, Any, Any]]]:
        """(host time, device time, [(host before the run, device from the run on, kernels, device per kernel)])."""
        n = [np.asarray(c, dtype=float) + zero for c, _ in segments]
        d = [np.asarray(t, dtype=float) + zero for _, t in segments]
        host_before, out = zero.copy(), []
        suffix = [sum(d[i:], zero) for i in range(len(d))]
        for i in range(len(d)):
            out.append((host_before, suffix[i], n[i], np.divide(d[i], n[i], out=np.zeros(shape), where=n[i] > 0)))
            host_before = host_before + n[i] * h
        return host_before, suffix[0] if d else zero, out

    def end(a: Any, s: Any, n: Any, dk: Any) -> Any:
        # issue of the run's first kernel + device from it on; the last kernel instead where issuing is the slower
        v = a + h + s + np.maximum(0.0, (n - 1) * (h - dk))
        return np.where(n > 0, v, -np.inf)

    h_pro, d_pro, pro = runs(prologue)
    h_lay, d_lay, lay = runs(layer)
    h_epi, d_epi, epi = runs(epilogue)
    h_pro = h_pro + tm.host_pass_s
    h_lay = h_lay + tm.host_layer_s
    finish = np.asarray(d_pro + nl * d_lay + d_epi, dtype=float)  # the device's work alone, at the least
    for a, s, n, dk in pro:
        finish = np.maximum(finish, end(tm.host_pass_s + a, s + nl * d_lay + d_epi, n, dk))
    steady = (nl - 1) * np.maximum(h_lay, d_lay)  # the other layers: issue-bound or device-bound
    for a, s, n, dk in lay:
        finish = np.maximum(finish, end(h_pro + tm.host_layer_s + a, s + d_epi, n, dk) + steady)
    for a, s, n, dk in epi:
        finish = np.maximum(finish, end(h_pro + nl * h_lay + a, s, n, dk))
    syncs = moe * (k.get("sync", 0) + k.get("expert_sync", 0) * loop_experts)
    if np.any(syncs):
        # host reads of a device value (section 53): the host issues the copy (one more launch) and waits for the device
        # to drain, so it cannot run ahead across them. A layer is then its segments one after another, each
        # max(host, first issue + device): the rest of the layer, and one segment per expert hit
        per_expert = cost.mlp_matrices * k.get("mlp_matrix", 0) + k.get("activation", 0) + k.get("expert", 0)
        hits = moe * loop_experts
        h_exp = per_expert * h
        d_exp = np.divide(mlp_dev, hits, out=np.zeros(shape), where=hits > 0)
        h_rest = h_lay - hits * h_exp
        d_rest = d_lay - mlp_dev
        t_layer = np.maximum(h_rest, h + d_rest) + hits * np.maximum(h_exp, h + d_exp) + syncs * h
        finish = np.maximum(finish, h_pro + d_pro + nl * t_layer + np.maximum(h_epi, d_epi))
    return finish
