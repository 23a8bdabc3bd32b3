"""Speculative decoding priced: the roofline speedup, and the speedup from a measured acceptance.

The roofline speedup prices every term with the cost model at the real batch and
context, through the one round formula (:func:`roofline.speculation.drafters.round_time`):

    speedup = E x t_base / (t_draft(gamma) + t_verify(gamma + 1) + t_round_host)

where E is the tokens per round, t_base the base step (one plain decode pass) and the
verify pass a (gamma + 1)-token pass over the cache, not one step. :func:`predict_speedup`
takes a measured tokens per round (Spec-Bench's "#mean accepted tokens", vLLM's mean
acceptance length) for a chain or a tree; Hugging Face's heuristic schedule is
simulated with :mod:`roofline.speculation.gamma_policies`. The closed forms (Leviathan et al. 2023)
live in :mod:`roofline.speculation.closed_forms`, the drafters in :mod:`roofline.speculation.drafters` and
:func:`predict_speedup` in :mod:`roofline.speculation.predict`; all are re-exported here. Times are seconds, memory is bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError, check_min
from roofline.costing.engine import Engine
from roofline.costing.hardware import Hardware
from roofline.costing.passtime import pass_seconds, pass_time, scalar_pricer
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing, pricing_for, pricing_of, replace_hardware
from roofline.passes.cost import frozen, scalar_count
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.acceptance_kinds import check_reused_modules
from roofline.speculation.closed_forms import (
    acceptance_rate,
    break_even_alpha,
    expected_tokens,
    expected_tokens_curve,
    expected_tokens_scalar,
    ideal_speedup,
    optimal_gamma,
)
from roofline.speculation.drafters import (
    Ctx,
    Drafter,
    DrafterLike,
    DraftModel,
    EarlyExit,
    Heads,
    ParallelBlock,
    PromptLookup,
    SlidingWindowSelfDraft,
    as_drafter,
    chain_plan,
    draft_pricing,
    owns_weights,
    round_seconds,
    round_time,
)
from roofline.speculation.predict import (
    PredictedSpeedup,
    alpha_for_heuristic,
    configuration_bytes,
    device_bytes,
    predict_speedup,
    speedup_by_engine,
    target_bytes_on_device,
)

#: with the closed forms (roofline.speculation.closed_forms), the drafters (roofline.speculation.drafters) and the prediction from a
#: measured acceptance (roofline.speculation.predict), re-exported here
__all__ = [
    "Ctx",
    "DraftModel",
    "Drafter",
    "DrafterLike",
    "EarlyExit",
    "Heads",
    "ParallelBlock",
    "PromptLookup",
    "SlidingWindowSelfDraft",
    "PredictedSpeedup",
    "SpecMetrics",
    "SpeedupResult",
    "acceptance_rate",
    "alpha_for_heuristic",
    "as_drafter",
    "break_even_alpha",
    "draft_cost_ratio",
    "expected_tokens",
    "expected_tokens_curve",
    "ideal_speedup",
    "metrics_from_counts",
    "optimal_gamma",
    "owns_weights",
    "predict_speedup",
    "speedup",
    "speedup_by_engine",
]

Array = npt.NDArray[np.float64]


# -- the counters serving systems keep ------------------------------------------------


@dataclass(frozen=True)
class SpecMetrics:
    """Speculation metrics in vLLM / Spec-Bench units, from the counters of ``rounds`` verify rounds.

    ``acceptance_rate``: vLLM's *draft acceptance rate*, accepted / drafted (no bonus token).
    ``mean_acceptance_length``: *tokens per round*, 1 + accepted / rounds (bonus included;
    Spec-Bench's #MAT, vLLM's mean acceptance length).
    ``system_efficiency``: emitted / (rounds x (gamma + 1)), the share of verified slots used.
    ``per_position_unconditional[i]``: P(position i + 1 accepted) = accepted there / rounds,
    what vLLM's log calls "Per-position acceptance rate"; they sum to tokens per round - 1.
    ``per_position_conditional[i]``: P(position i + 1 accepted | position i was) = accepted
    there / accepted at the position before, the *per-position curve* ``plan`` and
    :func:`expected_tokens_curve` take (1 + sum of its running products = tokens per round).
    Unconditional [.9, .8, .7, .6, .5] is conditional [.9, .889, .875, .857, .833]: 4.5
    tokens per round either way; fed as a conditional curve it would give 3.58.
    """

    rounds: int
    acceptance_rate: float
    mean_acceptance_length: float
    system_efficiency: float
    per_position_unconditional: Array | None = None
    per_position_conditional: Array | None = None

    @property
    def per_position(self) -> Array | None:
        """The old name of :attr:`per_position_unconditional` (accepted at position i / rounds)."""
        return self.per_position_unconditional


def metrics_from_counts(
    rounds: int,
    drafted: int,
    accepted: int,
    emitted: int,
    gamma: int,
    accepted_per_position: Any = None,
) -> SpecMetrics:
    """Summary metrics (:class:`SpecMetrics`) from the counters a serving system keeps.

    ``rounds``: verify rounds (vLLM's drafts); ``drafted``: draft tokens proposed;
    ``accepted``: draft tokens accepted; ``emitted``: tokens the rounds produced (accepted
    plus one correction or bonus each); ``gamma``: drafts per round (a tree: its depth);
    ``accepted_per_position[i]``: rounds whose draft at position i + 1 was accepted
    (vLLM's ``num_accepted_tokens_per_pos``), which cannot increase with i.
    """
    r = int(check_min("rounds", rounds, 1, integer=True))
    g = int(check_min("gamma", gamma, 0, integer=True))
    d = int(check_min("drafted", drafted, 0, integer=True))
    a = int(check_min("accepted", accepted, 0, integer=True))
    e = int(check_min("emitted", emitted, 0, integer=True))
    if a > d:
        raise SpecroofError(f"accepted ({a}) cannot exceed drafted ({d})")
    if e > r * (g + 1):
        raise SpecroofError(f"emitted ({e}) cannot exceed rounds x (gamma + 1) = {r * (g + 1)}")
    uncond = cond = None
    if accepted_per_position is not None:
        from roofline.speculation.acceptance import conditional_from_unconditional  # it builds on this module

        per_counts = check_min("accepted_per_position", accepted_per_position, 0, integer=True)
        if per_counts.ndim != 1 or per_counts.size != g:
            raise SpecroofError(f"accepted_per_position must have gamma = {g} entries (got {per_counts.size})")
        if np.any(np.diff(per_counts) > 0):
            raise SpecroofError("accepted_per_position must not increase: position i+1 needs position i accepted")
        if g and per_counts[0] > r:
            raise SpecroofError(f"accepted_per_position[0] ({int(per_counts[0])}) cannot exceed rounds ({r})")
        uncond = per_counts / r
        cond = conditional_from_unconditional(uncond) if g else np.zeros(0)
    return SpecMetrics(r, a / d if d else float("nan"), 1.0 + a / r, e / (r * (g + 1)), uncond, cond)


# -- the roofline speedup ------------------------------------------------------------


@dataclass(frozen=True)
class SpeedupResult:
    """Every term of a speculative round (seconds) and what it buys. Arrays broadcast over inputs.

    ``expected_tokens`` is the tokens per round (bonus included), ``t_base_s`` the base step
    (one plain decode pass), ``t_round_host_s`` the round host time (docs/cost-model.md, glossary).
    """

    gamma: npt.NDArray[np.int64]
    expected_tokens: Array
    t_base_s: Array
    t_draft_s: Array
    t_verify_s: Array
    t_round_host_s: float
    t_round_s: Array
    speedup: Array
    tokens_per_s_per_user: Array
    tokens_per_s_total: Array
    baseline_tokens_per_s_per_user: Array
    extra_memory_bytes: Array
    memory_bytes: Array
    fits_in_memory: npt.NDArray[np.bool_]
    drafter: str = ""
    #: seconds of the verify pass a hybrid model's state checkpoints take, part of ``t_verify_s`` (the engines write
    #: every verified position's recurrent state: docs/cost-model.md, section 52); 0 for a model without them
    t_checkpoint_s: Any = 0.0

    @property
    def t_target_step_s(self) -> Array:
        """The earlier name of :attr:`t_base_s`."""
        return self.t_base_s

    @property
    def t_overhead_s(self) -> float:
        """The earlier name of :attr:`t_round_host_s`."""
        return self.t_round_host_s

    def to_frame(self) -> pd.DataFrame:
        """One row per configuration (the arrays broadcast together), unit-suffixed columns."""
        cols = {
            "gamma": self.gamma,
            "expected_tokens": self.expected_tokens,
            "t_base_s": self.t_base_s,
            "t_draft_s": self.t_draft_s,
            "t_verify_s": self.t_verify_s,
            "t_checkpoint_s": np.asarray(self.t_checkpoint_s),
            "t_round_host_s": np.asarray(self.t_round_host_s),
            "t_round_s": self.t_round_s,
            "speedup": self.speedup,
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "tokens_per_s_total": self.tokens_per_s_total,
            "memory_bytes": self.memory_bytes,
            "fits_in_memory": self.fits_in_memory,
        }
        arrays = np.broadcast_arrays(*(np.asarray(v) for v in cols.values()))
        df = pd.DataFrame({k: a.ravel() for k, a in zip(cols, arrays, strict=True)})
        df.insert(0, "drafter", self.drafter)
        return df


def speedup(
    hardware: Pricing | Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike,
    alpha_or_curve: ArrayLike,
    gamma: ArrayLike,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    dtype: str | None = None,
    curve: bool | None = None,
    efficiency: bool | None = None,
    overhead_s: float | None = None,
    round_overhead_s: float = 0.0,
    tp: int | None = None,
    draft_hardware: Pricing | Hardware | str | None = None,
    engine: Engine | str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
) -> SpeedupResult:
    """Roofline speedup of chain speculation over plain decoding at the same batch and context.

    ``hardware`` is a :class:`roofline.costing.pricing.Pricing` or a profile (name, path, object)
    priced with the keyword options (``engine``, ``dtype``, ``weight_dtype``, ``kv_dtype``,
    ``tp``, ``efficiency``, ``overhead_s``; not both). ``alpha_or_curve`` is a per-token
    acceptance rate (scalar or array, broadcast with the other arguments) or, for a 1-D
    input with ``curve=True`` (the default for lists), a per-position acceptance curve
    a_1..a_g. ``gamma`` (draft tokens per round) is required; gamma = 0 is plain decoding
    (speedup 1). ``round_overhead_s`` adds a fixed cost per round (sampling, rollback) on
    top of the passes and the engine's round host time. ``draft_hardware`` prices the draft
    passes with another profile (e.g. one fitted to the draft model's own sweep: a model
    that sits in cache runs in another regime than the memory-bound target).
    """
    pr = pricing_for(hardware, dtype, weight_dtype, kv_dtype, efficiency, overhead_s, tp, engine)
    spec = get_model(target)
    d = as_drafter(drafter, spec)  # the target names its published drafter ("dflash")
    if (
        gamma is not None
        and getattr(d, "modules_for", None) is not None
        and not (curve or (curve is None and isinstance(alpha_or_curve, (list, tuple))))
    ):  # one rate over a reused MTP module's steps is refused (docs/cost-model.md, section 29)
        check_reused_modules(d, spec, gamma)
    if type(alpha_or_curve) is float and not curve and type(round_overhead_s) is float:
        # one configuration, every input a valid scalar: the round in plain floats (the checks below pass)
        g1, b1, c1 = scalar_count(gamma, 0), scalar_count(batch, 1), scalar_count(context, 0)
        if g1 is not None and b1 is not None and c1 is not None and 0.0 <= round_overhead_s < math.inf:
            fast = _scalar_speedup(pr, spec, d, alpha_or_curve, g1, b1, c1, draft_hardware, round_overhead_s)
            if fast is not None:
                return fast
    if gamma is None:
        raise SpecroofError("gamma (draft tokens per round) is required: give an integer >= 0, or an array of them")
    g = check_min("gamma", gamma, 0, integer=True)
    B = check_min("batch", batch, 1, integer=True)
    L = check_min("context", context, 0, integer=True)
    overhead: Any = round_overhead_s
    if type(overhead) is not float:  # a bool is yes/no, not seconds; an array is checked element-wise
        overhead = check_min("round_overhead_s", overhead, 0.0)
    elif not (math.isfinite(overhead) and overhead >= 0):
        raise SpecroofError(f"round_overhead_s must be >= 0 and finite (got {overhead})")
    is_curve = isinstance(alpha_or_curve, (list, tuple)) if curve is None else curve
    E = expected_tokens_curve(alpha_or_curve, g) if is_curve else expected_tokens(alpha_or_curve, g)
    if hasattr(d, "tokens_per_round"):  # n-gram drafting: only the requests whose n-gram matched gain tokens
        E = d.tokens_per_round(E)
    draft = None if draft_hardware is None else replace_hardware(pr, draft_hardware)
    base = pass_seconds(spec, pr, B, 1, L)
    rt = round_time(pr, spec, d, g, B, L, draft=draft, round_overhead_s=overhead)
    extra = d.extra_memory_bytes(Ctx(spec, pr), B, L)
    on_device = target_bytes_on_device(pr, spec, B, L, np.maximum(g, 0) + 1)
    # a hybrid model: the verify pass's state checkpoints, shown apart (section 52)
    ckpt = checkpoint_seconds(pr, spec, g, B, L) if spec.n_linear_layers else 0.0
    return _speedup_result(
        pr, g, E, base, rt.t_draft_s, rt.t_verify_s, rt.t_round_host_s, B, extra, on_device, d.name, ckpt
    )


def checkpoint_seconds(pr: Pricing, spec: ModelSpec, gamma: Any, batch: Any, context: Any) -> Any:
    """Seconds the target's verify pass of ``gamma`` + 1 tokens spends writing a hybrid model's state checkpoints:
    the time model's own seconds of that pass's ``state_checkpoint`` operator (docs/cost-model.md, section 52);
    0 at gamma 0 and for a model without linear-attention layers."""
    if not spec.n_linear_layers:
        return 0.0
    g = np.asarray(gamma)
    st = pass_time(spec, pr, batch, g + 1, context, tp=pr.tp)
    ops = st.cost.operators if st.cost is not None else st.operators
    t = st.op_time_s[ops.index("state_checkpoint")]
    return np.where(g == 0, 0.0, t)


def _where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond``, else ``b``: a conditional for one configuration's bool, numpy's for arrays."""
    return (a if cond else b) if type(cond) is bool else np.where(cond, a, b)


def _speedup_result(
    pr: Pricing,
    g: Any,
    E: Any,
    base: Any,
    t_draft: Any,
    t_verify: Any,
    host: Any,
    B: Any,
    extra: Any,
    on_device: Any,
    name: str,
    checkpoint: Any = 0.0,
) -> SpeedupResult:
    """What a round buys (docs/cost-model.md, section 4), from its terms: the one speedup formula, on one
    configuration's floats (``g`` an int) and on arrays alike. gamma = 0 is plain decoding: no draft, no verify
    overhead, one token per step. ``on_device`` is the target's bytes on its devices, ``extra`` the drafter's."""
    plain = g == 0
    t_round = _where(plain, base, round_seconds(t_draft, t_verify, host))
    E = _where(plain, 1.0, E)
    mem = device_bytes(on_device, extra, pr.tp)
    cap = pr.hardware.memory_bytes if pr.hardware.memory_bytes is not None else np.inf
    speed, per_user, total, baseline = E * base / t_round, E / t_round, B * E / t_round, 1.0 / base
    t_draft, t_verify, fits = _where(plain, 0.0, t_draft), _where(plain, base, t_verify), mem <= cap
    if type(plain) is bool:  # one configuration's floats, typed as the array path types them
        a, f = np.asarray, np.float64
        g, E, base, t_draft, t_verify, t_round = (
            a(g, dtype=np.int64),
            a(E),
            a(base),
            a(t_draft),
            a(t_verify),
            a(t_round),
        )
        speed, per_user, total, baseline, mem, fits = (
            f(speed),
            f(per_user),
            f(total),
            f(baseline),
            f(mem),
            np.bool_(fits),
        )
    fields = {
        "gamma": g, "expected_tokens": E, "t_base_s": base, "t_draft_s": t_draft, "t_verify_s": t_verify,
        "t_round_host_s": host, "t_round_s": t_round, "speedup": speed, "tokens_per_s_per_user": per_user,
        "tokens_per_s_total": total, "baseline_tokens_per_s_per_user": baseline, "extra_memory_bytes": extra,
        "memory_bytes": mem, "fits_in_memory": fits, "drafter": name, "t_checkpoint_s": checkpoint,
    }  # fmt: skip
    # every field given: the instance without the frozen dataclass's per-field __setattr__ (cost.frozen)
    result: SpeedupResult = frozen(SpeedupResult, fields)
    return result


def _scalar_speedup(
    pr: Pricing,
    spec: ModelSpec,
    d: Any,
    alpha: float,
    g: int,
    B: int,
    L: int,
    draft_hardware: Pricing | Hardware | str | None,
    round_overhead_s: float,
) -> SpeedupResult | None:
    """:func:`speedup` of one configuration in plain floats: the round's terms from a draft model's
    :class:`roofline.speculation.drafters.ChainPlan` where it has one, from :func:`round_time` otherwise, then
    :func:`_speedup_result` as the array path calls it; None where the array path must price or refuse it (alpha
    outside [0, 1], a pass past the model's context, an eager engine's kernel launches)."""
    if not 0.0 <= alpha <= 1.0 or L + g + 1 > spec.max_context:
        return None
    plan = chain_plan(pr, spec, d) if draft_hardware is None else None
    times = plan.times(g, B, L, round_overhead_s) if plan is not None else None
    if times is None:
        pricer = scalar_pricer(spec, pr, pr.tp)
        if pricer is None:
            return None
        draft = None if draft_hardware is None else replace_hardware(pr, draft_hardware)
        gg = np.asarray(g, dtype=np.int64)
        rt = round_time(pr, spec, d, gg, B, L, draft=draft, round_overhead_s=round_overhead_s)
        times = (pricer.seconds(B, 1, L, 1.0), float(rt.t_draft_s), float(rt.t_verify_s), rt.t_round_host_s)
    E = expected_tokens_scalar(alpha, g)
    if hasattr(d, "tokens_per_round"):
        E = float(d.tokens_per_round(E))
    on_device, extra = configuration_bytes(pr, spec, d, B, L, g + 1)
    base, t_draft, t_verify, host = times
    # a hybrid model's state checkpoints, shown apart by the one rule the array path applies (section 52)
    ckpt = float(checkpoint_seconds(pr, spec, g, B, L)) if spec.n_linear_layers else 0.0
    return _speedup_result(pr, g, E, base, t_draft, t_verify, host, B, extra, on_device, d.name, ckpt)


def draft_cost_ratio(
    target: ModelSpec | str,
    drafter: DrafterLike,
    hardware: Pricing | Hardware | str,
    batch: int = 1,
    context: int = DEFAULT_CONTEXT,
    dtype: str | None = None,
) -> float:
    """Leviathan's c: one draft step over one target step, priced by the cost model."""
    pr = pricing_of(hardware, dtype=dtype)
    spec = get_model(target)
    d = as_drafter(drafter, spec)
    one = np.asarray(1)
    return float(
        d.draft_time(Ctx(spec, draft_pricing(pr, d)), one, batch, context) / pass_seconds(spec, pr, batch, 1, context)
    )
