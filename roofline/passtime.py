"""Time of a forward pass on a hardware profile: the roofline, crossover K, sweeps.

time(op) = max(bytes / bandwidth, flops / peak[dtype]); a pass is the sum over
operators plus a fixed overhead. A pass is *memory bound* when its total
memory time is at least its total compute time; the crossover K is the largest
number of new tokens for which that still holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.typing import ArrayLike

from roofline.cost import (
    LINEAR_VARIABLES,
    LinearTerms,
    PassCost,
    array_sum,
    expected_experts_touched,
    forward_cost,
    frozen,
    linear_terms,
    model_shape,
    moe_expert_rows,
    scalar_config,
    scalar_count,
)
from roofline.dtypes import activation_dtype, dtype_bytes
from roofline.engine import Engine
from roofline.errors import SpecroofError, check_min
from roofline.hardware import Hardware
from roofline.model import ModelSpec, get_model
from roofline.pricing import DEFAULT_CONTEXT, Pricing, pricing_for, pricing_of
from roofline.timemodel import ATTENTION_OPERATORS, combine, memory_regime
from roofline.validation import check_tp

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
    wb = dtype_bytes(pr.stored_weight_dtype) if expert_bytes_per_weight is None else float(expert_bytes_per_weight)
    slice_params = 3.0 * hidden * expert_width  # over tp devices: the rates below are tp devices' rates
    touched = expected_experts_touched(experts, experts_per_token, T)
    kernel = moe_kernel_of(pr)
    rows = moe_expert_rows(experts, experts_per_token, T, kernel)
    zero = np.zeros((1, *T.shape))
    # the routed experts as one MoE layer's MLP operator, priced by the time model's own rules at the weight
    # stream's rate: the weights' dtype rate (none for explicit bytes per weight), the fused kernel's time per expert
    layer = PassCost(
        operators=("mlp",),
        flops=(2.0 * np.asarray(rows, dtype=float) * slice_params)[None],
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
    )
    mem = tm.operator_memory(layer, tm.bandwidth_bytes_per_s * tp, tp)[0]
    comp = layer.flops[0] / tm.compute_rates(("mlp",), pr.dtype, tp)[0][0]
    floor = e.moe_layer_s if e is not None and kernel is not None else 0.0
    return np.asarray(floor + tm.operator_seconds(mem, comp), dtype=float)


# -- the scalar pricer: one configuration's seconds from the time model's own coefficients, tabulated once --------


def _unit_cost(spec: ModelSpec, pr: Pricing, lin: LinearTerms) -> PassCost:
    """The pass whose column j is one unit of the table's variable j (:data:`roofline.cost.LINEAR_VARIABLES`) and
    nothing else: the bytes and FLOPs of :func:`roofline.cost.linear_terms`, one token in the tokens column, one
    routed expert in the touched column. The time model's rules are linear in these for a given streaming rate, so
    :meth:`roofline.timemodel.TimeModel.operator_memory` on it is the seconds per unit of every variable
    (docs/cost-model.md, section 47)."""
    nv = len(LINEAR_VARIABLES)
    unit = np.eye(nv)
    s = None if spec.is_abstract else model_shape(spec)
    return PassCost(
        operators=lin.operators,
        flops=lin.flops.T,
        bytes_weights=lin.bytes_weights.T,
        bytes_kv_read=lin.bytes_kv_read.T,
        bytes_kv_write=lin.bytes_kv_write.T,
        bytes_act=lin.bytes_act.T,
        batch=unit[1].astype(
            np.int64
        ),  # tokens = batch x new tokens: 1 in the tokens column (the sampler's logits per token)
        new_tokens=np.ones(nv, dtype=np.int64),
        context=np.zeros(nv, dtype=np.int64),
        compute_dtype=pr.dtype,
        n_layers=s.nl if s is not None else 0,
        weight_dtype=pr.stored_weight_dtype,
        vocab_size=s.vocab if s is not None else 0,
        mlp_matrices=s.mlp_matrices if s is not None else 3,
        n_moe_layers=s.n_moe_layers if s is not None and s.moe else 0,
        routed_experts=unit[5],
    )


class _Pricer:
    """A pass's seconds as a function of (batch, new tokens, context) for one model, pricing and device count.

    Every FLOP and byte of a pass is a constant times one of the variables of :func:`roofline.cost.linear_terms`
    (1, the tokens T, the attention pairs, the cached tokens, the embedding's rows, a mixture's distinct experts
    and the rows its kernel runs), and every time-model rule is linear in them at a given streaming rate. So the
    seconds per unit of each variable are tabulated here once, per memory regime, by the array path's own
    functions (:meth:`roofline.timemodel.TimeModel.operator_memory` on :func:`_unit_cost`,
    :meth:`~roofline.timemodel.TimeModel.compute_rates`), and a pass evaluates them: each operator's two sides are
    dot products, then :meth:`~roofline.timemodel.TimeModel.operator_seconds` and :meth:`~roofline.timemodel.TimeModel.finish` compose
    them, the functions the array path calls (docs/cost-model.md, section 47). Nothing here restates a rule.

    The operators whose coefficients on the pairs and the cached tokens are all zero (all but attention) depend on
    T alone: their sum is kept per T (``memo``), since a decode step, a chain's draft steps and a tree's levels run
    at a few token counts call after call."""

    __slots__ = ("tm", "lin", "mem", "comp", "scaled", "tops", "vocab", "moe", "n_experts", "k",
                 "moe_kernel", "rest_ops", "call_ops", "fixed", "tp", "nl", "d_ab", "host", "finishing", "op",
                 "memo")  # fmt: skip

    def __init__(self, spec: ModelSpec, pr: Pricing, tp: int, lin: LinearTerms) -> None:
        tm = pr.time_model
        self.tm, self.lin, self.tp = tm, lin, tp
        self.op = tm.operator_seconds  # the overlap rule, looked up once
        unit = _unit_cost(spec, pr, lin)
        # seconds per unit of each variable (columns) and operator (rows): memory per regime, compute
        self.mem = [tm.operator_memory(unit, bw, tp) for bw in tm.stream_rates(tp)]
        rates, scaled = tm.compute_rates(lin.operators, pr.dtype, tp)
        self.comp, self.scaled = unit.flops / rates[:, None], scaled
        self.tops = tuple(top for top, _ in tm.rows_bandwidth_bytes_per_s)
        s = None if spec.is_abstract else model_shape(spec)
        self.moe = s is not None and s.moe
        self.vocab = float(s.vocab) if s is not None else 0.0
        self.n_experts, self.k = (s.n_experts, s.k) if self.moe else (0, 0)  # type: ignore[union-attr]
        self.moe_kernel = moe_kernel_of(pr) if self.moe else None
        # the operators of T alone, and the others (their coefficients on the pairs and the cached tokens), equal
        # rows counted once (attention's scores and values): per regime, plain floats
        self.rest_ops: list[list[tuple[list[float], list[float], bool]]] = []
        self.call_ops: list[list[tuple[int, int, float, float, float, float, bool]]] = []
        per_call = [bool(np.any(self.comp[i, 2:4]) or any(np.any(m[i, 2:4]) for m in self.mem))
                    for i in range(len(lin.operators))]  # fmt: skip
        for m in self.mem:
            self.rest_ops.append(
                [
                    (m[i].tolist(), self.comp[i].tolist(), bool(scaled[i]))
                    for i in range(len(per_call))
                    if not per_call[i]
                ]
            )
            groups: dict[tuple[Any, ...], list[Any]] = {}
            for i in range(len(per_call)):
                if per_call[i]:
                    key = (*m[i].tolist(), *self.comp[i].tolist(), bool(scaled[i]))
                    groups.setdefault(key, [0, i])[0] += 1
            self.call_ops.append(
                [
                    (
                        n,
                        i,
                        float(m[i, 2]),
                        float(m[i, 3]),
                        float(self.comp[i, 2]),
                        float(self.comp[i, 3]),
                        bool(scaled[i]),
                    )
                    for n, i in groups.values()
                ]
            )
        self.nl = s.nl if s is not None else 0
        n_moe = s.n_moe_layers if self.moe else 0  # type: ignore[union-attr]
        self.fixed = float(tm.overhead_s(self.nl, n_moe) if pr.overhead_s is None else pr.overhead_s)
        self.d_ab = s.d * dtype_bytes(pr.dtype) if s is not None else 0.0  # all-reduce bytes per token
        self.host = tm.host_s(self.nl)
        # whether TimeModel.finish changes a pass's device seconds at all (a host floor, a step time, extra terms):
        # asked of finish itself, at two probes, so that a pass skips it only where it returns its input unchanged
        self.finishing = any(tm.finish(t, self.host, T, B) != t for t, T, B in ((0.0, 1.0, 1.0), (1e-3, 3.0, 2.0)))
        self.memo: dict[float, tuple[Any, ...]] = {}

    def variables(self, T: float) -> list[float]:
        """The table's variables that are functions of T alone: 1, T, the embedding's rows (min(T, vocab)), a
        mixture's expected distinct experts and the rows its kernel runs (0 where the model has none)."""
        touched = float(expected_experts_touched(self.n_experts, self.k, T)) if self.moe else 0.0
        rows = float(moe_expert_rows(self.n_experts, self.k, T, self.moe_kernel)) if self.moe_kernel else 0.0
        return [1.0, T, 0.0, 0.0, T if T < self.vocab else self.vocab, touched, rows]

    def at(self, T: float) -> tuple[Any, ...]:
        """What a pass of T tokens needs beyond its pairs and cached tokens, kept per T: the regime's operators of T
        alone combined and summed (in the operators' order), the T-parts of the others' two sides, the small-pass
        factor and the all-reduces."""
        hit = self.memo.get(T)
        if hit is not None:
            return hit
        k = memory_regime(T, self.tops)
        v = self.variables(T)
        factor = self.tm.small_pass_factor(T)
        rest = 0.0
        for m, c, scaled in self.rest_ops[k]:
            mem = m[0] * v[0] + m[1] * v[1] + m[4] * v[4] + m[5] * v[5] + m[6] * v[6]
            comp = c[0] * v[0] + c[1] * v[1] + c[4] * v[4] + c[5] * v[5] + c[6] * v[6]
            rest += self.op(mem, comp * factor if scaled else comp)
        parts = []
        for _, i, *_ in self.call_ops[k]:
            m, c = self.mem[k][i], self.comp[i]
            parts.append((float(m[0] + m[1] * T + m[4] * v[4] + m[5] * v[5] + m[6] * v[6]),
                          float(c[0] + c[1] * T + c[4] * v[4] + c[5] * v[5] + c[6] * v[6])))  # fmt: skip
        comm = self.tm.allreduce_seconds(T * self.d_ab, self.nl, self.tp) if self.tp > 1 else 0.0
        hit = (rest, tuple(zip(self.call_ops[k], parts, strict=True)), factor, self.fixed + comm)
        if len(self.memo) > 4096:  # a sweep over many token counts: keep the table small
            self.memo.clear()
        self.memo[T] = hit
        return hit

    def pass_s(self, T: float, B: float, pairs: float, cached: float) -> float:
        """Seconds of one pass of T tokens over B sequences with ``pairs`` attention pairs over ``cached`` cached
        tokens: every operator's two sides through :meth:`roofline.timemodel.TimeModel.operator_seconds`, the fixed
        overheads and the all-reduces, then :meth:`~roofline.timemodel.TimeModel.finish` (the host's issuing, the
        step time, the engine's extra terms) where it changes anything."""
        hit = self.memo.get(T)
        rest, calls, factor, fixed = self.at(T) if hit is None else hit
        t = rest
        for (n, _, m2, m3, c2, c3, scaled), (mT, cT) in calls:
            comp = cT + c2 * pairs + c3 * cached
            t += n * self.op(mT + m2 * pairs + m3 * cached, comp * factor if scaled else comp)
        t += fixed
        return self.tm.finish(t, self.host, T, B) if self.finishing else t  # type: ignore[no-any-return]

    def seconds(self, B: int, n: int, L: int, vis: float) -> float:
        """One pass: ``B`` sequences of ``n`` new tokens (``vis`` visible pairs among them) over ``L`` cached."""
        Bf = float(B)
        return self.pass_s(float(B * n), Bf, Bf * (n * float(L) + vis), Bf * L)

    def levels(self, B: int, L: int, widths: list[int], max_context: float = math.inf) -> float | None:
        """One pass per tree level (``widths[l]`` new tokens over L and the levels before), summed as numpy sums
        them; None unless every width is a whole number >= 1 and the last level ends within ``max_context`` (the
        array path validates and names anything else)."""
        Bf, c, out = float(B), L, []
        for w in widths:
            if type(w) is not int or w < 1:
                return None
            out.append(self.pass_s(float(B * w), Bf, Bf * (w * float(c) + w * (w + 1) / 2.0), Bf * c))
            c += w
        return array_sum(out) if c <= max_context else None

    def chain(self, B: int, L: int, g: int) -> float:
        """``g`` one-token passes at contexts L, L + 1, ..., summed in order (a chain's draft steps)."""
        Bf, total = float(B), 0.0
        for c in range(L, L + g):
            total += self.pass_s(Bf, Bf, Bf * (c + 1.0), Bf * c)
        return total


_PRICERS: dict[tuple[int, int, int], tuple[ModelSpec, Pricing, Any, _Pricer]] = {}


def scalar_pricer(spec: ModelSpec, pr: Pricing, tp: int) -> _Pricer | None:
    """The :class:`_Pricer` of ``spec`` on ``pr`` over ``tp`` devices, built once per (model, pricing, time model);
    None where only the array path prices (an eager engine's kernel launches; TP without a link: it names it;
    latent or sliding attention, whose terms are not the table's)."""
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
    if spec.n_linear_layers:  # a hybrid model's recurrent state, one per sequence (section 52)
        kv = kv + np.asarray(batch) * spec.state_bytes_per_sequence(dtype_bytes(pr.dtype))
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
    cost = pass_cost(spec, pr, batch, new_tokens, context, tree)
    return _step_time(cost, pr, device_memory(spec, pr, cost.batch, cost.context + cost.new_tokens))


# -- the scalar step pricer: a whole StepTime of one configuration from the scalar pricer's table -------------------


class _StepPricer:
    """One configuration's :class:`StepTime` for one model, pricing and device count, from the :class:`_Pricer`'s
    table: per memory regime a (7, 7 n_operators + 2) matrix holds the per-unit FLOPs, bytes, memory and compute
    seconds of every operator (the coefficients the array path's functions gave, section 47) and the FLOPs' and
    bytes' totals, so a pass is one vector-matrix product; the small-pass factor, :meth:`~roofline.timemodel.TimeModel.operator_seconds` and the sums
    over the operators are then the array path's own. The pass's total is :meth:`_Pricer.seconds`, the float
    pass_seconds and speedup use. Built only where :func:`scalar_pricer` would be and for concrete models
    (``step_pricer``)."""

    __slots__ = ("k", "mats", "scaled", "pricer", "tm", "weights_bytes", "kv_per_token", "capacity", "n_shared",
                 "rows", "cost_fields", "step_fields", "d_ab")  # fmt: skip

    def __init__(self, spec: ModelSpec, pr: Pricing, tp: int, pricer: _Pricer) -> None:
        tm, wdt = pr.time_model, pr.stored_weight_dtype
        wb, kb = dtype_bytes(wdt), dtype_bytes(pr.kv_dtype or pr.dtype)
        s = model_shape(spec)
        lin = pricer.lin
        names, k = lin.operators, len(lin.operators)
        flops, w, kr, kw, a = lin.flops, lin.bytes_weights, lin.bytes_kv_read, lin.bytes_kv_write, lin.bytes_act
        totals = np.stack([flops.sum(1), (w + kr + kw + a).sum(1)], axis=1)
        comp = pricer.comp.T
        self.mats = [np.ascontiguousarray(np.concatenate([flops, w, kr, kw, a, mem.T, comp, totals], axis=1))
                     for mem in pricer.mem]  # fmt: skip
        self.k, self.scaled, self.pricer, self.tm = k, pricer.scaled, pricer, tm
        self.weights_bytes = 0.0 if pr.offloaded else spec.weight_bytes(wb)
        self.kv_per_token = s.kv_elements_per_token * kb
        self.capacity, self.n_shared, self.d_ab = pr.memory_bytes, s.n_shared, pricer.d_ab
        # the seven per-operator rows of a result (slices made once cost less than slices made per call, or a reshape)
        self.rows = tuple(slice(i * k, (i + 1) * k) for i in range(7))
        # the results' fields that no configuration changes, in field order: a pass copies them and sets the rest
        # (a dict display of every field costs twice that)
        self.cost_fields = dict.fromkeys(f.name for f in fields(PassCost)) | {
            "operators": names, "compute_dtype": pr.dtype, "n_layers": s.nl, "weight_dtype": wdt,
            "vocab_size": int(s.vocab), "mlp_matrices": s.mlp_matrices, "n_moe_layers": s.n_moe_layers,
            "experts_touched": 0.0, "kv_replicated": False, "routed_experts": 0.0,
        }  # fmt: skip
        self.step_fields = dict.fromkeys(f.name for f in fields(StepTime)) | {
            "operators": names,
            "overhead_s": pricer.fixed,
            "ridge": tm.peak(pr.dtype) / tm.bandwidth_bytes_per_s,
        }  # fmt: skip

    def step_time(self, B: int, n: int, L: int, vis: float) -> StepTime:
        """What :func:`pass_time` returns for ``B`` sequences of ``n`` new tokens (``vis`` visible pairs among them)
        over ``L`` cached: every field filled, the numbers the array path's :func:`_step_time` gives within 1e-12."""
        p = self.pricer
        T, Bf = float(B * n), float(B)
        v = p.variables(T)
        v[2], v[3] = Bf * (n * float(L) + vis), Bf * L
        out = np.array(v).dot(self.mats[memory_regime(T, p.tops)])
        s_flops, s_w, s_kr, s_kw, s_a, s_mem, s_comp = self.rows  # views of the one result
        op_mem, op_comp = out[s_mem], out[s_comp]
        if self.tm.matmul_half_tokens:
            op_comp = np.where(self.scaled, op_comp * self.tm.small_pass_factor(T), op_comp)
        op_t = self.tm.operator_seconds(op_mem, op_comp)
        # the total is the scalar pricer's float, so pass_time, pass_seconds and speedup give one number to the bit
        t = p.seconds(B, n, L, vis)
        memory = self.weights_bytes + B * (L + n) * self.kv_per_token
        c = self.cost_fields.copy()
        c["flops"], c["bytes_weights"], c["bytes_kv_read"], c["bytes_kv_write"], c["bytes_act"] = (
            out[s_flops], out[s_w], out[s_kr], out[s_kw], out[s_a])  # fmt: skip
        c["batch"], c["new_tokens"], c["context"] = np.array(B), np.array(n), np.array(L)
        c["allreduce_bytes"] = T * self.d_ab
        if p.moe:
            c["experts_touched"] = v[5] + self.n_shared
            c["routed_experts"] = v[5]
        j = 7 * self.k
        f = self.step_fields.copy()
        f["op_memory_s"], f["op_compute_s"], f["op_time_s"], f["t_memory_s"], f["t_compute_s"] = (
            op_mem, op_comp, op_t, op_mem.sum(), op_comp.sum())  # fmt: skip
        # an np.int64 times a Python int is an np.int64: cheaper than the np.int64 constructor
        f["t_step_s"], f["tokens"], f["intensity"] = np.asarray(t), _INT64_ONE * (B * n), out[j] / out[j + 1]
        f["memory_bytes"], f["fits_in_memory"] = np.asarray(memory), np.asarray(memory <= self.capacity)
        f["cost"] = frozen(PassCost, c)
        result: StepTime = frozen(StepTime, f)
        return result


_INT64_ONE = np.int64(1)


_STEP_PRICERS: dict[tuple[int, int, int], tuple[ModelSpec, Pricing, Any, _StepPricer]] = {}


def step_pricer(spec: ModelSpec, pr: Pricing, tp: int) -> _StepPricer | None:
    """The :class:`_StepPricer` of ``spec`` on ``pr`` over ``tp`` devices, built once per (model, pricing, time
    model); None where :func:`scalar_pricer` steps aside (eager launches, TP without a link, latent or sliding
    attention) and for abstract models: the array path prices those."""
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
