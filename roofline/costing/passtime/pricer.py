"""The scalar pricers: one configuration's seconds (and StepTime) from the array path's coefficients, tabulated once."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import fields
from typing import Any

import numpy as np

from roofline.costing.passtime.footprint import device_weight_bytes
from roofline.costing.passtime.step import (
    StepTime,
    moe_kernel_of,
)
from roofline.costing.pricing import Pricing
from roofline.costing.timemodel import memory_regime
from roofline.passes.cost import (
    LINEAR_VARIABLES,
    LinearTerms,
    PassCost,
    array_sum,
    expected_experts_touched,
    frozen,
    fused_moe_tile_rows,
    linear_terms,
    model_shape,
    moe_expert_rows,
    scalar_count,
)
from roofline.passes.dtypes import dtype_bytes
from roofline.passes.model import ModelSpec

# -- the scalar pricer: one configuration's seconds from the time model's own coefficients, tabulated once --------


def _unit_cost(spec: ModelSpec, pr: Pricing, lin: LinearTerms) -> PassCost:
    """The pass whose column j is one unit of the table's variable j (:data:`roofline.passes.cost.LINEAR_VARIABLES`) and
    nothing else: the bytes and FLOPs of :func:`roofline.passes.cost.linear_terms`, one token in the tokens column, one
    routed expert in the touched column. The time model's rules are linear in these for a given streaming rate, so
    :meth:`roofline.costing.timemodel.TimeModel.operator_memory` on it is the seconds per unit of every variable
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

    Every FLOP and byte of a pass is a constant times one of the variables of :func:`roofline.passes.cost.linear_terms`
    (1, the tokens T, the attention pairs, the cached tokens, the embedding's rows, a mixture's distinct experts
    and the rows its kernel runs), and every time-model rule is linear in them at a given streaming rate. So the
    seconds per unit of each variable are tabulated here once, per memory regime, by the array path's own
    functions (:meth:`roofline.costing.timemodel.TimeModel.operator_memory` on :func:`_unit_cost`,
    :meth:`~roofline.costing.timemodel.TimeModel.compute_rates`), and a pass evaluates them: each operator's two sides are
    dot products, then :meth:`~roofline.costing.timemodel.TimeModel.operator_seconds` and :meth:`~roofline.costing.timemodel.TimeModel.finish` compose
    them, the functions the array path calls (docs/cost-model.md, section 47). Nothing here restates a rule.

    The operators whose coefficients on the pairs and the cached tokens are all zero (all but attention) depend on
    T alone: their sum is kept per T (``memo``), since a decode step, a chain's draft steps and a tree's levels run
    at a few token counts call after call."""

    __slots__ = ("tm", "lin", "mem", "comp", "scaled", "tops", "vocab", "moe", "n_experts", "k",
                 "moe_kernel", "rest_ops", "call_ops", "fixed", "tp", "nl", "d_ab", "host", "finishing", "op",
                 "memo", "kvr", "kvb", "kv_call", "rates", "kv_memo", "wdt")  # fmt: skip

    def __init__(self, spec: ModelSpec, pr: Pricing, tp: int, lin: LinearTerms) -> None:
        tm = pr.time_model
        self.tm, self.lin, self.tp = tm, lin, tp
        # the experts' dtype: whether their fused tiles take the tile's rate (section 56)
        self.wdt = pr.stored_weight_dtype
        self.op = tm.operator_seconds  # the overlap rule, looked up once
        unit = _unit_cost(spec, pr, lin)
        # the decode kernel's KV read (docs/cost-model.md, section 54) depends on the batch and the bytes per call, not
        # linearly on the variables: the table holds the KV bytes at the stream's rate, and each pass adds the
        # kernel's excess per KV byte from the time model's own function (kv_excess)
        self.kvr = tm.kv_read is not None
        flat = tm
        if self.kvr:
            e = tm.engine
            e = dataclasses.replace(e, kv_bandwidth_fraction=1.0) if e is not None else None
            flat = dataclasses.replace(tm, kv_read=None, engine=e)
        self.rates = tm.stream_rates(tp)
        # seconds per unit of each variable (columns) and operator (rows): memory per regime, compute
        self.mem = [flat.operator_memory(unit, bw, tp) for bw in self.rates]
        # per operator, the KV bytes it reads per cached token (over all devices)
        self.kvb = np.asarray(unit.bytes_kv_read, dtype=float)[:, 3]
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
        self.call_ops: list[list[tuple[int, int, float, float, float, float, bool, float]]] = []
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
                        float(self.kvb[i]),
                    )
                    for n, i in groups.values()
                ]
            )
        self.nl = s.nl if s is not None else 0
        self.kv_call = float(self.kvb.sum()) / (tp * max(self.nl, 1))  # KV bytes per device, layer and cached token
        n_moe = s.n_moe_layers if self.moe else 0  # type: ignore[union-attr]
        self.fixed = float(tm.overhead_s(self.nl, n_moe) if pr.overhead_s is None else pr.overhead_s)
        self.d_ab = s.d * dtype_bytes(pr.dtype) if s is not None else 0.0  # all-reduce bytes per token
        self.host = tm.host_s(self.nl)
        # whether TimeModel.finish changes a pass's device seconds at all (a host floor, a step time, extra terms):
        # asked of finish itself, at two probes, so that a pass skips it only where it returns its input unchanged
        self.finishing = any(tm.finish(t, self.host, T, B) != t for t, T, B in ((0.0, 1.0, 1.0), (1e-3, 3.0, 2.0)))
        self.memo: dict[float, tuple[Any, ...]] = {}
        self.kv_memo: dict[tuple[float, float, float], float] = {}

    def variables(self, T: float) -> list[float]:
        """The table's variables that are functions of T alone: 1, T, the embedding's rows (min(T, vocab)), a
        mixture's expected distinct experts and the rows its kernel runs (0 where the model has none)."""
        touched = float(expected_experts_touched(self.n_experts, self.k, T)) if self.moe else 0.0
        rows = float(moe_expert_rows(self.n_experts, self.k, T, self.moe_kernel)) if self.moe_kernel else 0.0
        return [1.0, T, 0.0, 0.0, T if T < self.vocab else self.vocab, touched, rows]

    def tile_rows(self, T: float) -> float:
        """The fused-MoE kernel's BLOCK_SIZE_M for a pass of T tokens (0 without that kernel)."""
        return float(fused_moe_tile_rows(T, self.n_experts, self.k)) if self.moe_kernel else 0.0

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
        # the fused-MoE tiles' FLOPs (the rows' only coefficients) at the tile's rate: the time model's rule (section 56)
        rows_comp = v[6] * (1.0 + float(self.tm.moe_tile_excess(self.tile_rows(T), self.wdt))) if v[6] else 0.0
        rest = 0.0
        for m, c, scaled in self.rest_ops[k]:
            mem = m[0] * v[0] + m[1] * v[1] + m[4] * v[4] + m[5] * v[5] + m[6] * v[6]
            comp = c[0] * v[0] + c[1] * v[1] + c[4] * v[4] + c[5] * v[5] + c[6] * rows_comp
            rest += self.op(mem, comp * factor if scaled else comp)
        parts = []
        for _, i, *_ in self.call_ops[k]:
            m, c = self.mem[k][i], self.comp[i]
            parts.append((float(m[0] + m[1] * T + m[4] * v[4] + m[5] * v[5] + m[6] * v[6]),
                          float(c[0] + c[1] * T + c[4] * v[4] + c[5] * v[5] + c[6] * rows_comp)))  # fmt: skip
        comm = self.tm.allreduce_seconds(T * self.d_ab, self.nl, self.tp) if self.tp > 1 else 0.0
        hit = (rest, tuple(zip(self.call_ops[k], parts, strict=True)), factor, self.fixed + comm, k)
        if len(self.memo) > 4096:  # a sweep over many token counts: keep the table small
            self.memo.clear()
        self.memo[T] = hit
        return hit

    def pass_s(self, T: float, B: float, pairs: float, cached: float) -> float:
        """Seconds of one pass of T tokens over B sequences with ``pairs`` attention pairs over ``cached`` cached
        tokens: every operator's two sides through :meth:`roofline.costing.timemodel.TimeModel.operator_seconds`, the fixed
        overheads and the all-reduces, then :meth:`~roofline.costing.timemodel.TimeModel.finish` (the host's issuing, the
        step time, the engine's extra terms) where it changes anything."""
        hit = self.memo.get(T)
        rest, calls, factor, fixed, k = self.at(T) if hit is None else hit
        t = rest
        kx = self.kv_excess(T, B, cached, k) if self.kvr and cached > 0 else 0.0
        for (n, _, m2, m3, c2, c3, scaled, kv), (mT, cT) in calls:
            comp = cT + c2 * pairs + c3 * cached
            t += n * self.op(mT + m2 * pairs + (m3 + kv * kx) * cached, comp * factor if scaled else comp)
        t += fixed
        return self.tm.finish(t, self.host, T, B) if self.finishing else t  # type: ignore[no-any-return]

    def kv_excess(self, T: float, B: float, cached: float, k: int) -> float:
        """Seconds per KV byte beyond the stream's rate for a pass of T tokens over B sequences and ``cached`` cached
        tokens in memory regime ``k``: :meth:`roofline.costing.timemodel.TimeModel.kv_read_excess_of`, the rule the
        array path prices with (docs/cost-model.md, section 54)."""
        key = (T, B, cached)  # T fixes the regime k
        hit = self.kv_memo.get(key)
        if hit is None:
            hit = float(self.tm.kv_read_excess_of(self.kv_call * cached, B, cached / B, T / B, self.rates[k], self.tp))
            if len(self.kv_memo) > 4096:  # a sweep over many contexts: keep the table small
                self.kv_memo.clear()
            self.kv_memo[key] = hit
        return hit

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
    summed as numpy sums them (:func:`roofline.passes.cost.array_sum`); None unless the widths are whole numbers >= 1 and
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


# -- the scalar step pricer: a whole StepTime of one configuration from the scalar pricer's table -------------------


class _StepPricer:
    """One configuration's :class:`StepTime` for one model, pricing and device count, from the :class:`_Pricer`'s
    table: per memory regime a (7, 7 n_operators + 2) matrix holds the per-unit FLOPs, bytes, memory and compute
    seconds of every operator (the coefficients the array path's functions gave, section 47) and the FLOPs' and
    bytes' totals, so a pass is one vector-matrix product; the small-pass factor, :meth:`~roofline.costing.timemodel.TimeModel.operator_seconds` and the sums
    over the operators are then the array path's own. The pass's total is :meth:`_Pricer.seconds`, the float
    pass_seconds and speedup use. Built only where :func:`scalar_pricer` would be and for concrete models
    (``step_pricer``)."""

    __slots__ = ("k", "mats", "scaled", "pricer", "tm", "weights_bytes", "kv_per_token", "capacity", "n_shared",
                 "rows", "cost_fields", "step_fields", "d_ab", "flops6")  # fmt: skip

    def __init__(self, spec: ModelSpec, pr: Pricing, tp: int, pricer: _Pricer) -> None:
        tm, wdt = pr.time_model, pr.stored_weight_dtype
        kb = dtype_bytes(pr.kv_dtype or pr.dtype)
        s = model_shape(spec)
        lin = pricer.lin
        names, k = lin.operators, len(lin.operators)
        flops, w, kr, kw, a = lin.flops, lin.bytes_weights, lin.bytes_kv_read, lin.bytes_kv_write, lin.bytes_act
        totals = np.stack([flops.sum(1), (w + kr + kw + a).sum(1)], axis=1)
        comp = pricer.comp.T
        self.mats = [np.ascontiguousarray(np.concatenate([flops, w, kr, kw, a, mem.T, comp, totals], axis=1))
                     for mem in pricer.mem]  # fmt: skip
        self.k, self.scaled, self.pricer, self.tm = k, pricer.scaled, pricer, tm
        self.flops6 = float(flops[6].sum())  # FLOPs per row of the fused-MoE tiles (0 without them)
        self.weights_bytes = device_weight_bytes(spec, pr)
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
            "routed_flops": 0.0, "moe_tile_rows": 0.0,
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
        if v[6]:
            # the fused-MoE tiles' FLOPs at the tile's rate, as TimeModel.operator_times prices them (section 56)
            op_comp = op_comp + p.comp[:, 6] * (v[6] * float(self.tm.moe_tile_excess(p.tile_rows(T), p.wdt)))
        if p.kvr and L > 0:
            # the decode kernel's KV excess, which the table leaves out (section 54)
            op_mem = op_mem + p.kvb * (Bf * L) * p.kv_excess(T, Bf, Bf * L, memory_regime(T, p.tops))
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
            c["routed_flops"] = float(self.flops6 * v[6])
            c["moe_tile_rows"] = float(p.tile_rows(T)) if v[6] else 0.0
        j = 7 * self.k
        f = self.step_fields.copy()
        f["op_memory_s"], f["op_compute_s"], f["op_time_s"], f["t_memory_s"], f["t_compute_s"] = (
            op_mem, op_comp, op_t, op_mem.sum(), op_comp.sum())  # fmt: skip
        # an np.int64 times a Python int is an np.int64: cheaper than the np.int64 constructor
        f["t_step_s"], f["tokens"], f["intensity"] = np.asarray(t), _INT64_ONE * (B * n), out[j] / out[j + 1]
        f["memory_bytes"], f["fits_in_memory"] = np.asarray(memory), np.asarray(memory <= self.capacity)
        f["t_allreduce_s"] = p.tm.allreduce_seconds(T * self.d_ab, p.nl, p.tp) if p.tp > 1 else 0.0
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
