"""Time of a forward pass on a hardware profile: the roofline, crossover K, sweeps.

time(op) = max(bytes / bandwidth, flops / peak[dtype]); a pass is the sum over
operators plus a fixed overhead. A pass is *memory bound* when its total
memory time is at least its total compute time; the crossover K is the largest
number of new tokens for which that still holds.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.typing import ArrayLike

from roofline.cost import (
    LinearTerms,
    PassCost,
    ScalarTerms,
    array_sum,
    expected_experts_touched,
    forward_cost,
    frozen,
    linear_terms,
    model_shape,
    moe_expert_rows,
    scalar_config,
    scalar_count,
    scalar_terms,
)
from roofline.dtypes import activation_dtype, dtype_bytes
from roofline.engine import Engine
from roofline.errors import SpecroofError, check_min
from roofline.hardware import Hardware
from roofline.model import ModelSpec, get_model
from roofline.pricing import DEFAULT_CONTEXT, Pricing, pricing_for, pricing_of
from roofline.timemodel import ATTENTION_OPERATORS, combine, memory_regime
from roofline.validation import check_count, check_tp

HardwareLike = Pricing | Hardware | str

__all__ = [
    "ATTENTION_OPERATORS",
    "DEFAULT_CONTEXT",
    "Footprint",
    "StepTime",
    "batch_sweep",
    "combine",
    "crossover_tokens",
    "kv_bound_context",
    "kv_share",
    "max_batch",
    "memory_footprint",
    "pass_time",
    "prefill_vs_decode",
    "step_time",
    "weights_only_crossover",
]

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
    """Roofline time of the pass ``cost`` priced by ``hardware`` (a :class:`roofline.pricing.Pricing`, or a
    profile/name with the options below).

    ``dtype`` picks the compute ceiling (default: the pass's activation dtype, or the
    Pricing's). ``efficiency=True`` scales the datasheet ceilings by the profile's achievable
    fractions. ``overhead_s`` is the fixed time per pass; by default the profile's
    measured pass overhead plus per-layer overhead (zero for datasheet profiles).
    ``tp`` > 1 splits weights, KV and work over ``tp`` devices (tensor parallelism)
    and adds two ring all-reduces of the hidden state per layer over the profile's
    per-direction interconnect bandwidth, 2 (tp - 1) / tp x bytes / link each.
    ``engine`` (a name from ``engine_profiles/`` or an :class:`roofline.engine.Engine`)
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
    op_t = combine(op_mem, op_comp, tm.overlap)
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
    )


#: engines whose MoE layers run the fused-MoE kernel (tokens sorted by expert, rows padded to its tiles): vLLM's and
#: SGLang's Triton ``fused_moe``; TensorRT-LLM's grouped GEMMs tile the same way (docs/cost-model.md, section 28)
FUSED_MOE_ENGINES = ("vllm", "sglang", "trtllm", "serving")


def moe_kernel_of(pr: Pricing) -> str | None:
    """The MoE kernel a pricing's engine runs (roofline.cost.MOE_KERNELS): ``"fused"`` under a serving engine (a
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
    wdt = pr.stored_weight_dtype
    wb = dtype_bytes(wdt) if expert_bytes_per_weight is None else float(expert_bytes_per_weight)
    bw = tm.bandwidth_bytes_per_s * tp
    if expert_bytes_per_weight is None and (wdt in tm.weight_bandwidth_ratio or wdt in tm.weight_bytes_factor):
        per_byte = tm.weight_bytes_factor.get(wdt, 1.0) / (bw * tm.weight_bandwidth_ratio.get(wdt, 1.0))
    else:
        per_byte = 1.0 / bw
    slice_params = 3.0 * hidden * expert_width  # over tp devices: the rates above are tp devices' rates
    touched = expected_experts_touched(experts, experts_per_token, T)
    kernel = moe_kernel_of(pr)
    rows = moe_expert_rows(experts, experts_per_token, T, kernel)
    mem = touched * slice_params * wb * per_byte
    comp = 2.0 * np.asarray(rows, dtype=float) * slice_params / (tm.peak(pr.dtype) * tp)
    floor = 0.0
    if e is not None and kernel is not None:
        mem = mem + touched * e.moe_expert_s
        floor = e.moe_layer_s
    return np.asarray(floor + combine(mem, comp, tm.overlap), dtype=float)


def _scalar_times(
    terms: ScalarTerms, pr: Pricing, tp: int, weight_dtype: str
) -> tuple[list[float], list[float], list[float], float, float] | None:
    """Per-operator memory, compute and combined seconds, fixed overhead and pass seconds of one configuration, in
    plain floats: :meth:`roofline.timemodel.TimeModel.pass_seconds` term by term (docs/cost-model.md, sections 2
    and 6). None for an eager engine's kernel launches, whose pipeline only the array path prices."""
    tm = pr.time_model
    e = tm.engine
    if e is not None and e.launches:
        return None
    tokens = terms.batch * terms.new_tokens
    bw = tm.bandwidth_bytes_per_s * tp
    gemv = tm.gemv_bandwidth_bytes_per_s
    if gemv is not None and gemv != tm.bandwidth_bytes_per_s and tokens == 1:
        bw = gemv * tp
    elif tm.rows_bandwidth_bytes_per_s:  # a range's own rate (memory_regime: 2 + its index; 0 past them all)
        k = memory_regime(float(tokens), tuple(top for top, _ in tm.rows_bandwidth_bytes_per_s))
        if k >= 2:
            bw = tm.rows_bandwidth_bytes_per_s[k - 2][1] * tp
    factor = tm.weight_bytes_factor.get(weight_dtype, 1.0)
    w, kr, kw, a = terms.bytes_weights, terms.bytes_kv_read, terms.bytes_kv_write, terms.bytes_act
    total = [wi + ri + vi + ai for wi, ri, vi, ai in zip(w, kr, kw, a, strict=True)]
    link = tm.weights_link_bytes_per_s
    if link is not None:
        mem = [w[i] * factor / (link * tp) + (total[i] - w[i]) / bw for i in range(len(w))]
    elif weight_dtype in tm.weight_bandwidth_ratio or weight_dtype in tm.weight_bytes_factor:
        w_bw = bw * tm.weight_bandwidth_ratio.get(weight_dtype, 1.0)
        mem = [w[i] * factor / w_bw + (total[i] - w[i]) / bw for i in range(len(w))]
    else:
        mem = [t / bw for t in total]
    if tp > 1 and terms.kv_replicated:  # a latent cache (MLA) is whole on every rank (TimeModel.operator_times)
        mem = [mem[i] + (kr[i] + kw[i]) * (tp - 1) / bw for i in range(len(w))]
        kr = [r * tp for r in kr]
    if e is not None and e.kv_bandwidth_fraction != 1.0:
        extra = 1.0 / e.kv_bandwidth_fraction - 1.0
        mem = [mem[i] + kr[i] / bw * extra for i in range(len(w))]
    if e is not None and e.moe_expert_s and terms.n_moe_layers and "mlp" in terms.operators:
        # the fused-MoE kernel's time per distinct routed expert a layer touches (section 40)
        mlp = terms.operators.index("mlp")
        mem[mlp] = mem[mlp] + terms.n_moe_layers * e.moe_expert_s * terms.routed_experts
    if e is not None and e.sampling_passes and terms.vocab_size and "lm_head" in terms.operators:
        head = terms.operators.index("lm_head")
        mem[head] = mem[head] + tokens * float(terms.vocab_size) * 4.0 * e.sampling_passes / bw
    peak = tm.peak(pr.dtype)
    peak_tp = peak * tp
    comp = [f / peak_tp for f in terms.flops]
    if tm.matmul_half_tokens:
        scale = 1.0 + tm.matmul_half_tokens / tokens
        comp = [c * scale for c in comp]
    if tm.attention_flop_per_s is not None and tm.attention_flop_per_s != peak:
        for i, name in enumerate(terms.operators):
            if name in ATTENTION_OPERATORS:
                comp[i] = terms.flops[i] / (tm.attention_flop_per_s * tp)
    if tm.overlap >= 1.0:
        op_t = [m if m >= c else c for m, c in zip(mem, comp, strict=True)]
    else:
        op_t = [max(m, c) + (1.0 - tm.overlap) * min(m, c) for m, c in zip(mem, comp, strict=True)]
    nl = terms.n_layers
    fixed = tm.overhead_s(nl, terms.n_moe_layers) if pr.overhead_s is None else pr.overhead_s
    comm = 0.0
    if tp > 1:
        if tm.interconnect_bytes_per_s is None:
            tm.allreduce_s(terms.to_cost(pr.dtype, weight_dtype), tp)  # raises the error that names the profile
        per = 2.0 * (tp - 1) / tp * terms.allreduce_bytes / tm.interconnect_bytes_per_s  # type: ignore[operator]
        comm = 2 * nl * (tm.allreduce_latency_s + per)
    t = array_sum(op_t) + fixed + comm
    host = tm.host_s(nl)
    if host > 0:
        t = max(t, host)
    if e is not None and (e.host_step_s or e.host_step_per_seq_s):
        step = e.host_step_s + e.host_step_per_seq_s * float(terms.batch)
        t = max(t, step) if e.step_overlap else t + step
    return mem, comp, op_t, float(fixed), t


# -- the scalar pricer: one configuration's seconds with everything but (batch, tokens, context) resolved once -----


def memory_rates(tm: Any, wdt: str, tp: int) -> list[tuple[float, float]]:
    """(bytes/s for the bytes other than weights, seconds per weight byte) of many-token passes, then of one-token
    passes (matrix-vector: they may stream at the gemv rate), then of each range of ``rows_bandwidth_bytes_per_s``:
    TimeModel.operator_times' rates, resolved once, in :func:`roofline.timemodel.memory_regime`'s order."""
    gemv = tm.gemv_bandwidth_bytes_per_s
    base = tm.bandwidth_bytes_per_s
    rates = []
    for rate in (
        base,
        gemv if gemv is not None and gemv != base else base,
        *(r for _, r in tm.rows_bandwidth_bytes_per_s),
    ):
        bw = rate * tp
        factor = tm.weight_bytes_factor.get(wdt, 1.0)
        if tm.weights_link_bytes_per_s is not None:
            per_w = factor / (tm.weights_link_bytes_per_s * tp)
        elif wdt in tm.weight_bandwidth_ratio or wdt in tm.weight_bytes_factor:
            per_w = factor / (bw * tm.weight_bandwidth_ratio.get(wdt, 1.0))
        else:
            per_w = 1.0 / bw
        rates.append((bw, per_w))
    return rates


def _piecewise(terms: list[tuple[float, float, float]], half: float, overlap: float) -> tuple[list[float], ...]:
    """(knots, intercepts, slopes): sum_j op(w_j + t_j T, c_j (T + half)) over T > 0 as a piecewise-linear function.

    Each operator's time is the larger of its memory line w + t T and its compute line c (T + half) (or the
    overlap's blend of the two, also a line on each side), so the sum is linear between the points where an
    operator's two lines cross: on interval i (``knots[i - 1] <= T < knots[i]``) it is ``intercepts[i] + slopes[i] T``,
    a sum of non-negative terms regrouped (the per-operator sum to a few units in the last place)."""
    keep = 1.0 - overlap if overlap < 1.0 else 0.0  # the share of the shorter side that does not overlap
    lines = []
    for w, t, c in terms:
        # (intercept, slope) where memory is the longer side, m + (1 - o) c, and where compute is, c + (1 - o) m
        lines.append((w, t, c, (w + keep * c * half, t + keep * c), (c * half + keep * w, c + keep * t)))
    knots = sorted({(w - c * half) / (c - t) for w, t, c in terms if c != t and (w - c * half) / (c - t) > 0.0})
    if knots:
        probes = [knots[0] / 2.0] + [(lo + hi) / 2.0 for lo, hi in itertools.pairwise(knots)] + [2.0 * knots[-1] + 1.0]
    else:
        probes = [1.0]
    intercepts, slopes = [], []
    for p in probes:
        a = b = 0.0
        for w, t, c, mem, comp in lines:
            line = mem if w + t * p >= c * (p + half) else comp
            a, b = a + line[0], b + line[1]
        intercepts.append(a)
        slopes.append(b)
    return knots, intercepts, slopes


class _Pricer:
    """A pass's seconds as a function of (batch, new tokens, context) for one model, pricing and device count.

    Every FLOP and byte of a pass is a constant or linear in the tokens T = batch x new tokens, the
    cached tokens batch x context or the attention pairs batch x (new x context + visible), except the
    embedding's rows (min(T, vocab)) and a mixture's distinct experts (:func:`roofline.cost.linear_terms`, the
    table :class:`_StepPricer` reads too); every time-model term is a rate applied to one of those
    (docs/cost-model.md, sections 2 and 6). So the per-operator coefficients in seconds are resolved here once:
    the operators outside attention, the embedding and a mixture's MLP sum to a piecewise-linear function of T
    (:func:`_piecewise`), and a pass costs a lookup and a few multiply-adds (:func:`_scalar_times` regrouped: the
    result agrees with the array path to a few units in the last place, not to the bit).
    """

    __slots__ = ("terms", "knots", "icpt", "slope", "embed_w", "embed_t", "moe", "mlp_w", "mlp_e", "mlp_r", "n_experts",
                 "n_experts_int", "k", "moe_kernel", "k_share", "n_attn", "attn_t", "attn_l", "attn_c", "attn_scaled", "vocab", "half", "overlap", "fixed",
                 "comm_0", "comm_t", "host", "step_s", "step_per_seq", "step_overlap", "tops", "rests")  # fmt: skip

    def __init__(self, spec: ModelSpec, pr: Pricing, tp: int, lin: LinearTerms) -> None:
        tm, e, wdt = pr.time_model, pr.time_model.engine, pr.stored_weight_dtype
        kv_extra = 1.0 / e.kv_bandwidth_fraction - 1.0 if e is not None and e.kv_bandwidth_fraction != 1.0 else 0.0
        regimes = memory_rates(tm, wdt, tp)
        # the max rows of the ranges with rates of their own (memory_regime): empty, the usual case, keeps a
        # pass's regime the one-token test alone
        self.tops = tuple(top for top, _ in tm.rows_bandwidth_bytes_per_s)
        peak = tm.peak(pr.dtype)
        peak_tp = peak * tp
        attn_rate = tm.attention_flop_per_s
        attn_own = attn_rate is not None and attn_rate != peak
        names = lin.operators
        self.terms = lin
        # per operator: weight bytes (constant), other bytes per token, KV bytes read per cached token, FLOPs per
        # token, FLOPs per attention pair, weight bytes per embedding row and per distinct expert (the table's rows)
        w, rows_w, touched_w = (lin.bytes_weights[j].tolist() for j in (0, 4, 5))
        per_t = (lin.bytes_act[1] + lin.bytes_kv_write[1]).tolist()
        per_l = lin.bytes_kv_read[3].tolist()
        f_t, f_p, f_r = lin.flops[1].tolist(), lin.flops[2].tolist(), lin.flops[6].tolist()
        s = None if spec.is_abstract else model_shape(spec)
        nl, vocab, moe = (s.nl, s.vocab, s.moe) if s is not None else (0, 0, False)
        d_ab = s.d * dtype_bytes(pr.dtype) if s is not None else 0.0
        self.n_experts = float(s.n_experts) if s is not None else 0.0
        self.k_share = 1.0 - s.k / s.n_experts if s is not None and moe else 0.0
        self.n_experts_int, self.k = (s.n_experts, s.k) if s is not None and moe else (0, 0)
        self.moe_kernel = moe_kernel_of(pr) if moe else None
        sampling = (e.sampling_passes if e is not None else 0.0) if vocab and "lm_head" in names else 0.0
        attn = [i for i, name in enumerate(names) if name in ATTENTION_OPERATORS]
        head = names.index("lm_head") if "lm_head" in names else -1
        mlp = names.index("mlp") if moe else -1
        embed = names.index("embed") if "embed" in names else -1
        # the embedding (its rows) and a mixture's MLP (its experts) have terms of their own: priced apart
        rest = [i for i in range(len(names)) if i not in attn and i != embed and i != mlp]
        # seconds per unit of each term, per memory regime
        per_t_s = [[per_t[i] / bw + (vocab * 4.0 * sampling / bw if i == head else 0.0) for i in range(len(names))]
                   for bw, _ in regimes]  # fmt: skip
        self.half = tm.matmul_half_tokens
        self.overlap = tm.overlap
        tables = [_piecewise([(w[i] * per_w, per_t_s[j][i], f_t[i] / peak_tp) for i in rest], self.half, self.overlap)
                  for j, (_, per_w) in enumerate(regimes)]  # fmt: skip
        self.knots, self.icpt, self.slope = ([t[j] for t in tables] for j in range(3))
        self.embed_w = [rows_w[embed] * per_w for _, per_w in regimes] if embed >= 0 else None
        self.embed_t = [per_t_s[j][embed] for j in range(len(regimes))] if embed >= 0 else [0.0] * len(regimes)
        self.moe = moe
        if moe:
            self.mlp_w = [(w[mlp] * r[1], per_t_s[j][mlp], f_t[mlp] / peak_tp) for j, r in enumerate(regimes)]
            # seconds per distinct expert: its bytes, and the fused-MoE kernel's time per expert in every MoE layer
            per_expert = s.n_moe_layers * e.moe_expert_s if e is not None and s is not None else 0.0
            self.mlp_e = [touched_w[mlp] * r[1] + per_expert for r in regimes]
            self.mlp_r = f_r[mlp] / peak_tp  # compute seconds per row the fused kernel runs (0: useful FLOPs only)
        self.n_attn = len(attn)
        a0 = attn[0] if attn else 0
        self.attn_t = [per_t[a0] / r[0] for r in regimes] if attn else [0.0] * len(regimes)
        self.attn_l = [per_l[a0] / r[0] * (1.0 + kv_extra) for r in regimes] if attn else [0.0] * len(regimes)
        self.attn_c = f_p[a0] / ((attn_rate * tp) if attn_own else peak_tp) if attn else 0.0  # type: ignore[operator]
        self.attn_scaled = not attn_own
        self.vocab = float(vocab)
        n_moe = s.n_moe_layers if s is not None and moe else 0
        self.fixed = float(tm.overhead_s(nl, n_moe) if pr.overhead_s is None else pr.overhead_s)
        self.comm_0 = self.comm_t = 0.0
        if tp > 1:
            link = tm.interconnect_bytes_per_s
            self.comm_0 = 2 * nl * tm.allreduce_latency_s
            self.comm_t = 2 * nl * (2.0 * (tp - 1) / tp * d_ab / link)  # type: ignore[operator]
        self.host = tm.host_s(nl)
        has_step = e is not None and bool(e.host_step_s or e.host_step_per_seq_s)
        self.step_s = e.host_step_s if has_step else 0.0  # type: ignore[union-attr]
        self.step_per_seq = e.host_step_per_seq_s if has_step else 0.0  # type: ignore[union-attr]
        self.step_overlap = has_step and bool(e.step_overlap)  # type: ignore[union-attr]
        if not has_step:
            self.step_s = -1.0  # no per-step host term
        self.rests: dict[float, float] = {}

    def _op(self, mem: float, comp: float) -> float:
        if self.overlap >= 1.0:
            return mem if mem >= comp else comp
        return max(mem, comp) + (1.0 - self.overlap) * min(mem, comp)

    def rest(self, T: float) -> float:
        """Seconds of every operator but the attention products at T tokens.

        Kept per T (``rests``, which the hot loops read first): it is a function of T alone for this pricer, and the
        few token counts a decode step, a chain's draft steps and a tree's levels run at come back call after call."""
        hit = self.rests.get(T)
        if hit is not None:
            return hit
        k = 1 if T == 1.0 else (memory_regime(T, self.tops) if self.tops else 0)
        i = bisect.bisect_right(self.knots[k], T)
        total = self.icpt[k][i] + self.slope[k][i] * T
        if self.embed_w is not None:  # the embedding reads min(T, vocab) rows and computes nothing
            total += (T if T < self.vocab else self.vocab) * self.embed_w[k] + T * self.embed_t[k]
        if self.moe:  # a mixture's MLP streams the distinct experts its tokens touch
            touched = self.n_experts * (1.0 - self.k_share**T)
            w, t, c = self.mlp_w[k]
            comp = (T + self.half) * c
            if self.moe_kernel is not None:  # the routed experts' padded tiles (section 28)
                rows = float(moe_expert_rows(self.n_experts_int, self.k, T, self.moe_kernel))
                comp += rows * self.mlp_r * (1.0 + self.half / T)
            total += self._op(w + touched * self.mlp_e[k] + T * t, comp)
        if len(self.rests) > 1024:  # a sweep over many token counts: keep the table small
            self.rests.clear()
        self.rests[T] = total
        return total

    def attention(self, T: float, cached: float, pairs: float) -> float:
        """Seconds of the attention products (scores and values, the same cost each)."""
        if not self.n_attn:
            return 0.0
        k = 1 if T == 1.0 else (memory_regime(T, self.tops) if self.tops else 0)
        comp = pairs * self.attn_c
        if self.half and self.attn_scaled:
            comp = comp * (1.0 + self.half / T)
        return self.n_attn * self._op(T * self.attn_t[k] + cached * self.attn_l[k], comp)

    def finish(self, ops: float, T: float, B: float) -> float:
        """The pass from its operators' seconds: fixed overheads, all-reduces, host issue and step time."""
        t = ops + self.fixed + (self.comm_0 + self.comm_t * T)
        if self.host > 0 and self.host > t:
            t = self.host
        if self.step_s >= 0.0:
            step = self.step_s + self.step_per_seq * B
            t = (t if t >= step else step) if self.step_overlap else t + step
        return t

    def seconds(self, B: int, n: int, L: int, vis: float) -> float:
        """One pass: ``B`` sequences of ``n`` new tokens (``vis`` visible pairs among them) over ``L`` cached.

        ``finish(rest + attention)`` written out (the same operations in the same order: a call costs more here)."""
        T, Bf = float(B * n), float(B)
        t = self.rests.get(T)
        if t is None:
            t = self.rest(T)
        if self.n_attn:
            k = 1 if T == 1.0 else (memory_regime(T, self.tops) if self.tops else 0)
            comp = Bf * (n * float(L) + vis) * self.attn_c
            if self.half and self.attn_scaled:
                comp = comp * (1.0 + self.half / T)
            mem = T * self.attn_t[k] + Bf * L * self.attn_l[k]
            if self.overlap >= 1.0:
                t += self.n_attn * (mem if mem >= comp else comp)
            else:
                t += self.n_attn * (max(mem, comp) + (1.0 - self.overlap) * min(mem, comp))
        t = t + self.fixed + (self.comm_0 + self.comm_t * T)
        if self.host > 0 and self.host > t:
            t = self.host
        if self.step_s >= 0.0:
            step = self.step_s + self.step_per_seq * Bf
            t = (t if t >= step else step) if self.step_overlap else t + step
        return t

    def levels(self, B: int, L: int, widths: list[int], max_context: float = math.inf) -> float | None:
        """One pass per tree level (``widths[l]`` new tokens over L and the levels before), summed as numpy sums
        them; the operators outside attention are priced once per distinct width (EAGLE-2/3's levels are all top-k).
        None unless every width is a whole number >= 1 and the last level ends within ``max_context`` (checked in
        the loop: the array path validates and names anything else)."""
        Bf, c = float(B), L
        out = []
        if not self.n_attn or self.overlap < 1.0 or self.host > 0 or self.step_s >= 0.0:
            for w in widths:
                if type(w) is not int or w < 1:
                    return None
                T = float(B * w)
                rest = self.rest(T)
                pairs = Bf * (w * float(c) + w * (w + 1) / 2.0)
                out.append(self.finish(rest + self.attention(T, Bf * c, pairs), T, Bf))
                c += w
            return array_sum(out) if c <= max_context else None
        # the common case (full overlap, no host floor or step time) written out: finish(rest + attention) per level,
        # the same operations in the same order (as in chain), the loop's constants in locals
        n_attn, per_pair, half = self.n_attn, self.attn_c, self.half if self.attn_scaled else 0.0
        fixed, comm_0, comm_t, rests = self.fixed, self.comm_0, self.comm_t, self.rests
        rest, pairs_new, scale, mem_new, per_cached, comm = 0.0, 0.0, 1.0, 0.0, 0.0, 0.0
        prev: int | None = None
        # array_sum adds fewer than 8 values one after another from 0.0: so does the loop, with no list to build
        few, total = len(widths) < 8, 0.0
        for w in widths:
            # a run of one width (EAGLE-2/3's top-k levels): checked, and its terms of w alone found, once per run; the
            # same int object stands for the run (an equal float width is another object: checked, and refused)
            if w is not prev:
                if type(w) is not int or w < 1:
                    return None
                T = float(B * w)
                hit = rests.get(T)
                rest = self.rest(T) if hit is None else hit
                k = 1 if T == 1.0 else (memory_regime(T, self.tops) if self.tops else 0)
                pairs_new, mem_new, per_cached = w * (w + 1) / 2.0, T * self.attn_t[k], self.attn_l[k]
                scale, comm, prev = (1.0 + half / T) if half else 1.0, comm_0 + comm_t * T, w
            fc = float(c)  # the double that Bf * c converts c to, made once for both products
            comp = Bf * (w * fc + pairs_new) * per_pair
            if half:
                comp = comp * scale
            mem = mem_new + Bf * fc * per_cached
            if few:
                total += rest + n_attn * (mem if mem >= comp else comp) + fixed + comm
            else:
                out.append(rest + n_attn * (mem if mem >= comp else comp) + fixed + comm)
            c += w
        if c > max_context:
            return None
        return total if few else array_sum(out)

    def chain(self, B: int, L: int, g: int) -> float:
        """``g`` one-token passes at contexts L, L + 1, ..., summed in order (a chain's draft steps)."""
        Bf = float(B)
        rest = self.rests.get(Bf)
        if rest is None:
            rest = self.rest(Bf)
        if not self.n_attn or self.overlap < 1.0 or self.host > 0 or self.step_s >= 0.0:
            total = 0.0
            for c in range(L, L + g):
                total += self.finish(rest + self.attention(Bf, Bf * c, Bf * (c + 1.0)), Bf, Bf)
            return total
        # the common case (full overlap, no host floor or step time) written out: finish(rest + attention) per step,
        # the same operations in the same order
        k = 1 if Bf == 1.0 else (memory_regime(Bf, self.tops) if self.tops else 0)
        n_attn, mem_t, mem_l, per_pair = self.n_attn, Bf * self.attn_t[k], self.attn_l[k], self.attn_c
        scale = 1.0 + self.half / Bf if self.half and self.attn_scaled else 0.0
        fixed, comm = self.fixed, self.comm_0 + self.comm_t * Bf
        total = 0.0
        for c in range(L, L + g):
            comp = Bf * (c + 1.0) * per_pair
            if scale:
                comp = comp * scale
            mem = mem_t + Bf * c * mem_l
            total += rest + n_attn * (mem if mem >= comp else comp) + fixed + comm
        return total


_PRICERS: dict[tuple[int, int, int], tuple[ModelSpec, Pricing, Any, _Pricer]] = {}


def scalar_pricer(spec: ModelSpec, pr: Pricing, tp: int) -> _Pricer | None:
    """The :class:`_Pricer` of ``spec`` on ``pr`` over ``tp`` devices, built once per (model, pricing, time model);
    None where only the array path prices (an eager engine's kernel launches; TP without a link: it names it)."""
    tm = pr.time_model
    hit = _PRICERS.get((id(spec), id(pr), tp))
    if hit is not None and hit[0] is spec and hit[1] is pr and hit[2] is tm:  # the entry holds them: ids not reused
        return hit[3]
    e = tm.engine
    if (e is not None and e.launches) or (tp > 1 and tm.interconnect_bytes_per_s is None):
        return None
    wb, ab, kb = dtype_bytes(pr.stored_weight_dtype), dtype_bytes(pr.dtype), dtype_bytes(pr.kv_dtype or pr.dtype)
    lin = linear_terms(spec, wb, ab, kb, moe_kernel_of(pr))
    if lin is None:  # latent or sliding attention: the table's attention terms are standard full attention's
        return None
    pricer = _Pricer(spec, pr, tp, lin)
    if len(_PRICERS) > 256:  # early exit builds a truncated spec per call: keep the table small
        _PRICERS.clear()
    _PRICERS[(id(spec), id(pr), tp)] = (spec, pr, tm, pricer)
    return pricer


def chain_seconds(spec: ModelSpec, pr: Pricing, batch: Any, context: Any, gamma: Any, tp: int) -> float | None:
    """Seconds of ``gamma`` one-token passes of ``spec`` at contexts context, context + 1, ... summed in order (a
    chain's draft steps) for whole-number scalars; None for anything else (the array path prices or refuses it)."""
    B, L, g = scalar_count(batch, 1), scalar_count(context, 0), scalar_count(gamma, 0)
    if B is None or L is None or g is None or L + g > spec.max_context:
        return None
    pricer = scalar_pricer(spec, pr, tp)
    return None if pricer is None else pricer.chain(B, L, g)


def levels_seconds(spec: ModelSpec, pr: Pricing, widths: Any, batch: Any, context: Any, tp: int) -> float | None:
    """Seconds of one pass per tree level, ``widths[l]`` new tokens each over the context and the levels before,
    summed as numpy sums them (:func:`roofline.cost.array_sum`); None unless the widths are whole numbers >= 1 and
    batch and context whole-number scalars."""
    B, L = scalar_count(batch, 1), scalar_count(context, 0)
    if B is None or L is None or not isinstance(widths, list):
        return None
    pricer = scalar_pricer(spec, pr, tp)
    if pricer is None:
        return None
    return pricer.levels(B, L, widths, spec.max_context)


def visible_seconds(
    spec: ModelSpec, pr: Pricing, batch: Any, n: int, context: Any, visible: float, tp: int
) -> float | None:
    """Seconds of one pass of ``n`` new tokens per sequence that see ``visible`` new tokens in all (a tree's verify
    pass: each node its ancestors and itself) for whole-number scalars; None otherwise."""
    B, L = scalar_count(batch, 1), scalar_count(context, 0)
    if B is None or L is None or n < 1 or L + n > spec.max_context:
        return None
    pricer = scalar_pricer(spec, pr, tp)
    return None if pricer is None else pricer.seconds(B, n, L, visible)


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


def _scalar_terms(
    spec: ModelSpec, pr: Pricing, batch: Any, new_tokens: Any, context: Any, tree: Any
) -> ScalarTerms | None:
    one = scalar_config(spec, batch, new_tokens, context, tree)
    if one is None:
        return None
    return scalar_terms(
        spec, *one, dtype_bytes(pr.stored_weight_dtype), dtype_bytes(pr.dtype), dtype_bytes(pr.kv_dtype or pr.dtype),
        moe_kernel_of(pr),
    )  # fmt: skip


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


def device_memory(spec: ModelSpec, pr: Pricing, batch: ArrayLike, tokens_cached: ArrayLike) -> Array:
    """Bytes the target needs on the devices: its weights (unless offloaded) and the KV of ``tokens_cached`` per sequence."""
    weights = 0.0 if pr.offloaded else spec.weight_bytes(dtype_bytes(pr.stored_weight_dtype))
    kv = spec.kv_bytes(np.asarray(batch) * np.asarray(tokens_cached), dtype_bytes(pr.kv_dtype or pr.dtype))
    return np.asarray(weights + kv, dtype=float)


def check_broadcast(**named: Any) -> None:
    """Array arguments that numpy cannot broadcast together, refused with their names and shapes (a sweep over
    batch x context is a grid: ``batch[:, None]``, ``context[None, :]``)."""
    if all(v is None or type(v) in (int, float) for v in named.values()):  # scalars: the fast path's case
        return
    try:
        shapes = {k: np.shape(v) for k, v in named.items() if v is not None}
    except ValueError:  # a ragged list: the argument's own check names it
        return
    try:
        np.broadcast_shapes(*shapes.values())
    except ValueError:
        given = ", ".join(f"{k} {s}" for k, s in shapes.items() if s)
        raise SpecroofError(
            f"{given} do not broadcast together: give arrays of one shape, or a grid (batch[:, None], context[None, :])"
        ) from None


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
    terms = _scalar_terms(spec, pr, batch, new_tokens, context, tree)
    if terms is not None:
        times = _scalar_times(terms, pr, pr.tp, pr.stored_weight_dtype)
        if times is not None:
            return _scalar_step_time(spec, pr, terms, *times)
    cost = pass_cost(spec, pr, batch, new_tokens, context, tree)
    return _step_time(cost, pr, device_memory(spec, pr, cost.batch, cost.context + cost.new_tokens))


def _scalar_step_time(
    spec: ModelSpec,
    pr: Pricing,
    terms: ScalarTerms,
    mem: list[float],
    comp: list[float],
    op_t: list[float],
    fixed: float,
    t_step: float,
) -> StepTime:
    """The :class:`StepTime` of one configuration from its plain-float times (what :func:`_step_time` returns)."""
    # one array for the cost's five rows and the three rows of times: numpy's cost here is per call, not per number
    rows = (terms.flops, terms.bytes_weights, terms.bytes_kv_read, terms.bytes_kv_write, terms.bytes_act, mem, comp,
            op_t)  # fmt: skip
    k = len(mem)
    block = np.fromiter(itertools.chain.from_iterable(rows), float, 8 * k).reshape(8, k)  # faster than from lists
    cost = terms.to_cost(pr.dtype, pr.stored_weight_dtype, block)
    op_mem, op_comp, op_time = block[5], block[6], block[7]
    # device_memory's sum in plain numbers (its order of operations, so the same bytes)
    sh = model_shape(spec) if not spec.is_abstract else None
    weights = 0.0 if pr.offloaded else spec.weight_bytes(dtype_bytes(pr.stored_weight_dtype))
    cached = terms.batch * (terms.context + terms.new_tokens)
    kv = cached * (sh.kv_elements_per_token if sh else 0) * dtype_bytes(pr.kv_dtype or pr.dtype)
    memory = float(weights + kv)
    w, kr, kw, a = terms.bytes_weights, terms.bytes_kv_read, terms.bytes_kv_write, terms.bytes_act
    moved = array_sum([w[i] + kr[i] + kw[i] + a[i] for i in range(len(w))])
    tm = pr.time_model
    # numpy scalars where the array path's reductions give numpy scalars (its totals over the operators)
    t_mem: Any = np.float64(array_sum(mem))
    t_comp: Any = np.float64(array_sum(comp))
    tokens: Any = np.int64(terms.batch * terms.new_tokens)
    intensity: Any = np.float64(array_sum(terms.flops) / moved)
    result: StepTime = frozen(
        StepTime,
        {
            "operators": terms.operators,
            "op_memory_s": op_mem,
            "op_compute_s": op_comp,
            "op_time_s": op_time,
            "t_memory_s": t_mem,
            "t_compute_s": t_comp,
            "overhead_s": fixed,
            "t_step_s": np.asarray(t_step),
            "tokens": tokens,
            "intensity": intensity,
            "ridge": tm.peak(pr.dtype) / tm.bandwidth_bytes_per_s,
            "memory_bytes": np.asarray(memory),
            "fits_in_memory": np.asarray(memory <= pr.memory_bytes),
            "cost": cost,
        },
    )
    return result


# -- the scalar step pricer: a whole StepTime of one configuration from cached coefficient arrays -----------------


class _StepPricer:
    """One configuration's :class:`StepTime` for one model, pricing and device count, from coefficient arrays.

    Each per-operator FLOP count, byte count and memory or compute second of a standard-attention pass is a
    sum of constants times the pass's variables (1, T = batch x new tokens, attention pairs, cached tokens,
    embedding rows min(T, vocab), distinct experts touched, the rows a fused-MoE kernel runs): the table
    :func:`roofline.cost.linear_terms` (the one :class:`_Pricer` reads) priced at :func:`_scalar_times`' rates
    (docs/cost-model.md, sections 2, 6 and 28). So a (7, 7 n_operators + 5) matrix per memory regime holds every row and the totals, and a pass is one
    vector-matrix product and a maximum, not a Python loop per operator (every term is non-negative: the
    regrouped sums agree with the array path to a few units in the last place). The pass's total is
    :meth:`_Pricer.seconds`, the float pass_seconds and speedup use. Built only where
    :func:`scalar_pricer` would be and for concrete models (``step_pricer``)."""

    __slots__ = ("k", "mats", "half", "scaled", "overlap", "seconds", "vocab", "n_experts", "k_share", "moe", "moe_rows",
                 "d_ab", "weights_bytes", "kv_per_token", "capacity", "n_shared", "tops", "rows", "cost_fields",
                 "step_fields")  # fmt: skip

    def __init__(self, spec: ModelSpec, pr: Pricing, tp: int, pricer: _Pricer) -> None:
        tm, e, wdt = pr.time_model, pr.time_model.engine, pr.stored_weight_dtype
        wb, ab, kb = dtype_bytes(wdt), dtype_bytes(pr.dtype), dtype_bytes(pr.kv_dtype or pr.dtype)
        s = model_shape(spec)
        nl, d, moe, vocab = s.nl, s.d, s.moe, s.vocab
        # per variable (1, T, pairs, cached, rows, touched, expert rows) and operator: the scalar pricer's table
        lin = pricer.terms
        names, k = lin.operators, len(lin.operators)
        flops, w, kr, kw, a = lin.flops, lin.bytes_weights, lin.bytes_kv_read, lin.bytes_kv_write, lin.bytes_act
        ix = {name: i for i, name in enumerate(names)}
        # compute seconds: the attention products at their own rate (and not saturating) where the profile has one
        peak = tm.peak(pr.dtype)
        attn = np.isin(np.asarray(names), ATTENTION_OPERATORS)
        own = tm.attention_flop_per_s is not None and tm.attention_flop_per_s != peak
        rate = np.where(attn & own, (tm.attention_flop_per_s or peak) * tp, peak * tp)
        comp = flops / rate
        scaled = ~(attn & own)
        sampling = (e.sampling_passes if e is not None else 0.0) if vocab else 0.0
        self.mats = []
        for bw, per_w in memory_rates(tm, wdt, tp):
            mem = w * per_w + (kr + kw + a) / bw
            if e is not None and e.kv_bandwidth_fraction != 1.0:
                mem = mem + kr / bw * (1.0 / e.kv_bandwidth_fraction - 1.0)
            if sampling:  # the fp32 logits of every token, read and written by the sampler
                mem[1, ix["lm_head"]] += vocab * 4.0 * sampling / bw
            if moe and e is not None and e.moe_expert_s:  # the fused-MoE kernel's time per distinct expert (36)
                mem[5, ix["mlp"]] += s.n_moe_layers * e.moe_expert_s
            totals = np.stack([mem.sum(1), (comp * scaled).sum(1), (comp * ~scaled).sum(1), flops.sum(1),
                               (w + kr + kw + a).sum(1)], axis=1)  # fmt: skip
            self.mats.append(np.ascontiguousarray(np.concatenate([flops, w, kr, kw, a, mem, comp, totals], axis=1)))
        self.k, self.tops = k, pricer.tops
        self.half, self.scaled, self.overlap = tm.matmul_half_tokens, scaled.astype(float), tm.overlap
        self.seconds = pricer.seconds
        self.vocab, self.moe, self.d_ab = float(vocab), moe, d * ab
        self.n_experts, self.k_share = float(s.n_experts), (1.0 - s.k / s.n_experts if moe else 0.0)
        kernel = moe_kernel_of(pr) if moe else None
        # the rows the routed experts' kernel runs (section 28), a variable of the table only for the fused kernel
        self.moe_rows = (lambda T: float(moe_expert_rows(s.n_experts, s.k, T, kernel))) if kernel else None
        self.weights_bytes = 0.0 if pr.offloaded else spec.weight_bytes(wb)
        self.kv_per_token = s.kv_elements_per_token * kb
        self.capacity, self.n_shared = pr.memory_bytes, s.n_shared
        # the seven per-operator rows of a result (slices made once cost less than slices made per call, or a reshape)
        self.rows = tuple(slice(i * k, (i + 1) * k) for i in range(7))
        # the results' fields that no configuration changes, in field order: a pass copies them and sets the rest
        # (a dict display of every field costs twice that)
        self.cost_fields = dict.fromkeys(f.name for f in fields(PassCost)) | {
            "operators": names, "compute_dtype": pr.dtype, "n_layers": nl, "weight_dtype": wdt,
            "vocab_size": int(vocab), "mlp_matrices": s.mlp_matrices, "n_moe_layers": s.n_moe_layers,
            "experts_touched": 0.0, "kv_replicated": False, "routed_experts": 0.0,
        }  # fmt: skip
        self.step_fields = dict.fromkeys(f.name for f in fields(StepTime)) | {
            "operators": names,
            "overhead_s": float(tm.overhead_s(nl, s.n_moe_layers if moe else 0) if pr.overhead_s is None else pr.overhead_s),
            "ridge": peak / tm.bandwidth_bytes_per_s,
        }  # fmt: skip

    def step_time(self, B: int, n: int, L: int, vis: float) -> StepTime:
        """What :func:`pass_time` returns for ``B`` sequences of ``n`` new tokens (``vis`` visible pairs among them)
        over ``L`` cached: every field filled, the numbers the array path's :func:`_step_time` gives within 1e-12."""
        T, Bf = float(B * n), float(B)
        touched = self.n_experts * (1.0 - self.k_share**T) if self.moe else 0.0
        rows = self.moe_rows(T) if self.moe_rows is not None else 0.0
        v = np.array((1.0, T, Bf * (n * float(L) + vis), Bf * L, T if T < self.vocab else self.vocab, touched, rows))
        out = v.dot(self.mats[1 if T == 1.0 else (memory_regime(T, self.tops) if self.tops else 0)])
        s_flops, s_w, s_kr, s_kw, s_a, s_mem, s_comp = self.rows  # views of the one result
        op_mem, op_comp = out[s_mem], out[s_comp]
        j = 7 * self.k  # the totals: numpy scalars, as the array path's reductions give
        t_comp = out[j + 1] + out[j + 2]
        if self.half:  # small matmuls do not saturate the compute ceiling
            op_comp = op_comp * (1.0 + (self.half / T) * self.scaled)
            t_comp = out[j + 1] * (1.0 + self.half / T) + out[j + 2]
        if self.overlap >= 1.0:
            op_t = np.maximum(op_mem, op_comp)
        else:
            op_t = np.maximum(op_mem, op_comp) + (1.0 - self.overlap) * np.minimum(op_mem, op_comp)
        # the total is the scalar pricer's float, so pass_time, pass_seconds and speedup give one number to the bit
        t = self.seconds(B, n, L, vis)
        memory = self.weights_bytes + B * (L + n) * self.kv_per_token
        c = self.cost_fields.copy()
        c["flops"], c["bytes_weights"], c["bytes_kv_read"], c["bytes_kv_write"], c["bytes_act"] = (
            out[s_flops], out[s_w], out[s_kr], out[s_kw], out[s_a])  # fmt: skip
        c["batch"], c["new_tokens"], c["context"] = np.array(B), np.array(n), np.array(L)
        c["allreduce_bytes"] = T * self.d_ab
        if self.moe:
            c["experts_touched"] = touched + self.n_shared
            c["routed_experts"] = touched
        f = self.step_fields.copy()
        f["op_memory_s"], f["op_compute_s"], f["op_time_s"], f["t_memory_s"], f["t_compute_s"] = (
            op_mem, op_comp, op_t, out[j], t_comp)  # fmt: skip
        # an np.int64 times a Python int is an np.int64: cheaper than the np.int64 constructor
        f["t_step_s"], f["tokens"], f["intensity"] = np.asarray(t), _INT64_ONE * (B * n), out[j + 3] / out[j + 4]
        f["memory_bytes"], f["fits_in_memory"] = np.asarray(memory), np.asarray(memory <= self.capacity)
        f["cost"] = frozen(PassCost, c)
        result: StepTime = frozen(StepTime, f)
        return result


_INT64_ONE = np.int64(1)


_STEP_PRICERS: dict[tuple[int, int, int], tuple[ModelSpec, Pricing, Any, _StepPricer]] = {}


def step_pricer(spec: ModelSpec, pr: Pricing, tp: int) -> _StepPricer | None:
    """The :class:`_StepPricer` of ``spec`` on ``pr`` over ``tp`` devices, built once per (model, pricing, time
    model); None where :func:`scalar_pricer` steps aside (eager launches, TP without a link, latent or sliding
    attention) and for abstract models: the per-operator scalar path prices those."""
    tm = pr.time_model
    hit = _STEP_PRICERS.get((id(spec), id(pr), tp))
    if hit is not None and hit[0] is spec and hit[1] is pr and hit[2] is tm:  # the entry holds them: ids not reused
        return hit[3]
    scalar = None if spec.is_abstract else scalar_pricer(spec, pr, tp)
    if scalar is None:
        return None
    pricer = _StepPricer(spec, pr, tp, scalar)
    if len(_STEP_PRICERS) > 256:  # early exit builds a truncated spec per call: keep the table small
        _STEP_PRICERS.clear()
    _STEP_PRICERS[(id(spec), id(pr), tp)] = (spec, pr, tm, pricer)
    return pricer


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


# -- memory, batch and phase sweeps -------------------------------------------


@dataclass(frozen=True)
class Footprint:
    """Device memory of one configuration, in bytes."""

    weights_bytes: float
    kv_bytes: Any
    activation_bytes: Any

    @property
    def total_bytes(self) -> Any:
        return self.weights_bytes + self.kv_bytes + self.activation_bytes


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
    if b is not None and c is not None and k is not None and not spec.is_abstract:
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
    """Largest batch whose weights + KV + activations fit in the device memory (0 if none)."""
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


def batch_sweep(
    spec: ModelSpec | str,
    hardware: HardwareLike,
    batches: ArrayLike,
    *,
    new_tokens: int = 1,
    context: int = DEFAULT_CONTEXT,
    dtype: str | None = None,
    efficiency: bool | None = None,
) -> pd.DataFrame:
    """Per-user latency and total throughput against batch size (the classic batch graph)."""
    pr = pricing_of(hardware, dtype=dtype, efficiency=efficiency)
    spec = get_model(spec)
    B = check_min("batches", batches, 1, integer=True).ravel()
    st = pass_time(spec, pr, B, new_tokens, context)
    fp = memory_footprint(
        spec, B, context, weight_dtype=pr.stored_weight_dtype, act_dtype=pr.dtype, new_tokens=new_tokens
    )
    cap = pr.hardware.memory_bytes if pr.hardware.memory_bytes is not None else np.inf
    return pd.DataFrame(
        {
            "batch": B,
            "t_step_s": st.t_step_s,
            "latency_per_token_s": st.t_step_s / new_tokens,
            "tokens_per_s_per_user": new_tokens / st.t_step_s,
            "tokens_per_s_total": st.tokens_per_s,
            "intensity_flop_per_byte": st.intensity,
            "bound": st.bound,
            "memory_bytes": fp.total_bytes,
            "fits_in_memory": fp.total_bytes <= cap,
        }
    )


def prefill_vs_decode(
    spec: ModelSpec | str,
    hardware: HardwareLike,
    prompt_tokens: int,
    batch: int = 1,
    dtype: str | None = None,
) -> pd.DataFrame:
    """Prefill of ``prompt_tokens`` against one decode step after it: time, intensity, bound."""
    pr = pricing_of(hardware, dtype=dtype)
    rows = []
    for phase, n, ctx in (("prefill", prompt_tokens, 0), ("decode", 1, prompt_tokens)):
        st = pass_time(spec, pr, batch, n, ctx)
        rows.append(
            {
                "phase": phase,
                "new_tokens": n,
                "context": ctx,
                "t_step_s": float(st.t_step_s),
                "t_memory_s": float(st.t_memory_s),
                "t_compute_s": float(st.t_compute_s),
                "intensity_flop_per_byte": float(st.intensity),
                "tokens_per_s": float(st.tokens_per_s),
                "bound": str(st.bound),
            }
        )
    return pd.DataFrame(rows)
