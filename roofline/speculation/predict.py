"""A speedup from a measured acceptance: what one speculative configuration buys as an engine runs it.

Published speculative results report tokens per round (Spec-Bench's "#mean accepted
tokens", vLLM's mean acceptance length), not a per-token rate; :func:`predict_speedup`
takes that figure for a chain or a tree and prices the round with
:func:`roofline.speculation.drafters.round_time`, the same formula :func:`roofline.speculation.speculative.speedup`
and the tree sizing use. Hugging Face's heuristic schedule (:func:`alpha_for_heuristic`)
is simulated with :mod:`roofline.speculation.gamma_policies`. Also importable from
:mod:`roofline.speculation.speculative`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError, _short, check_min, check_range
from roofline.core.validation import check_number
from roofline.costing.engine import Engine
from roofline.costing.hardware import Hardware
from roofline.costing.passtime import memory_footprint, pass_seconds
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing, pricing_for
from roofline.passes.cost import frozen, scalar_count
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.acceptance_kinds import check_mean_accepted, check_reused_modules
from roofline.speculation.closed_forms import expected_tokens
from roofline.speculation.drafters import (
    Ctx,
    DrafterLike,
    as_drafter,
    chain_plan,
    default_gamma,
    default_tree,
    round_seconds,
    round_time,
    tree_plan,
    tree_preset,
)
from roofline.speculation.gamma_policies import HeuristicSchedule, PolicyRun, simulate_policy


@dataclass(frozen=True)
class PredictedSpeedup:
    """One prediction: the speedup and every term behind it.

    ``mean_accepted`` is the tokens per round (bonus included), ``t_base_s`` the base step
    (one plain decode pass), ``t_round_host_s`` the round host time; seconds per round.
    """

    speedup: float
    mean_accepted: float
    t_round_s: float
    t_draft_s: float
    t_verify_s: float
    t_round_host_s: float
    t_base_s: float
    tokens_per_s: float
    baseline_tokens_per_s: float
    drafter: str
    engine: str
    gamma: float | None
    tree_nodes: int | None
    #: bytes per device (the target's share over its ``tp`` devices plus the drafter's own) and whether they fit the
    #: device; a configuration that does not fit has no speedup in :meth:`to_dict` (docs/cost-model.md, 50.4)
    memory_bytes: float = 0.0
    fits_in_memory: bool = True

    #: the fields that carry a speed: blanked in :meth:`to_dict` where the configuration does not fit
    SPEED_FIELDS = ("speedup", "tokens_per_s", "baseline_tokens_per_s", "t_round_s")

    def to_dict(self) -> dict[str, Any]:
        """Every field; a configuration that does not fit the device carries no speed (None), only its bytes."""
        d = dataclasses.asdict(self)
        if not self.fits_in_memory:
            d.update(dict.fromkeys(self.SPEED_FIELDS))
        return d

    def to_frame(self) -> pd.DataFrame:
        """This prediction as a one-row table."""
        return pd.DataFrame([self.to_dict()])


@functools.lru_cache(maxsize=256)
def _heuristic_mix(mean_accepted: float, rounds: int = 2000) -> tuple[float, tuple[tuple[int, float], ...], float]:
    """Hugging Face's heuristic schedule at the i.i.d. acceptance that yields ``mean_accepted`` tokens per round.

    Returns the simulated tokens per round, the share of rounds at each draft length and
    that acceptance rate: which lengths the schedule picks does not depend on timing, so
    it is solved once.
    """

    def run(a: float) -> PolicyRun:
        return simulate_policy(HeuristicSchedule(), [a], lambda g: 1.0, 1.0, rounds=rounds)

    lo, hi = 0.0, 1.0
    # tokens per round grow with alpha: bisect to the published figure (16 halvings: alpha to 2e-5; the
    # simulation's own spread at 2000 rounds, about 1% of the tokens per round, is the limit, and a fixed seed
    # keeps it reproducible)
    for _ in range(16):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if run(mid).tokens_per_round < mean_accepted else (lo, mid)
    alpha = (lo + hi) / 2
    pr = run(alpha)
    gs, counts = np.unique(pr.gammas, return_counts=True)
    mix = tuple((int(g), float(c) / pr.rounds) for g, c in zip(gs, counts, strict=True))
    return pr.tokens_per_round, mix, alpha


def target_bytes_on_device(pr: Pricing, spec: ModelSpec, batch: Any, context: Any, new_tokens: Any) -> Any:
    """The target's bytes on its devices for a pass of ``new_tokens`` per sequence: weights (unless offloaded to host
    memory), KV cache, activations and a hybrid model's states, over all ``tp`` devices (the one rule both speedup
    paths use)."""
    fp = memory_footprint(
        spec,
        batch,
        context,
        weight_dtype=pr.stored_weight_dtype,
        kv_dtype=pr.kv_dtype,
        act_dtype=pr.dtype,
        new_tokens=new_tokens,
    )
    return fp.total_bytes - (fp.weights_bytes if pr.offloaded else 0.0)


_MEMORY: dict[tuple[int, int, int], tuple[Any, ...]] = {}


def _memory_table(spec: ModelSpec, pr: Pricing, d: Any) -> tuple[float, float, float, dict[tuple[int, int], Any]]:
    """:func:`memory_footprint` of the target tabulated once per (model, pricing): its weights, KV bytes per cached
    token and activation bytes per new token, from the function itself at one sequence, one new token and no
    context (it is linear in batch x (context + new tokens) and batch x new tokens, section 47); and the drafter's
    extra bytes, kept per (batch, context) as its own method gives them."""
    key = (id(spec), id(pr), id(d))
    hit = _MEMORY.get(key)
    if hit is not None and hit[0] is spec and hit[1] is pr and hit[2] is d:  # the entry holds them: ids not reused
        return hit[3]  # type: ignore[no-any-return]
    fp = memory_footprint(
        spec, 1, 0, weight_dtype=pr.stored_weight_dtype, kv_dtype=pr.kv_dtype, act_dtype=pr.dtype, new_tokens=1
    )
    table: tuple[float, float, float, dict[tuple[int, int], Any]] = (
        float(fp.weights_bytes),
        float(fp.kv_bytes),
        float(fp.activation_bytes),
        {},
    )
    if len(_MEMORY) > 256:
        _MEMORY.clear()
    _MEMORY[key] = (spec, pr, d, table)
    return table


def configuration_bytes(pr: Pricing, spec: ModelSpec, d: Any, B: int, L: int, n: int) -> tuple[float, Any]:
    """One configuration's bytes as floats: the target's on its devices (over all ``tp``) for a pass of ``n`` new
    tokens per sequence, and the drafter's own. The target's are :func:`memory_footprint`'s sum from its tabulated
    coefficients (weights, KV of B (L + n) tokens, activations of B n); a hybrid model's state slots are not in the
    table, so its bytes come from :func:`target_bytes_on_device` itself."""
    weights, kv, act, extra_of = _memory_table(spec, pr, d)
    if spec.n_linear_layers:
        on_device = float(target_bytes_on_device(pr, spec, B, L, n))
    else:
        total = weights + (B * (L + n)) * kv + (B * n) * act
        on_device = total - (weights if pr.offloaded else 0.0)
    extra = extra_of.get((B, L))
    if extra is None:
        extra = extra_of[(B, L)] = d.extra_memory_bytes(Ctx.of(spec, pr), B, L)
        if len(extra_of) > 1024:
            extra_of.clear()
    return on_device, extra  # as the drafter's method types it (the scalar path keeps that type)


def device_bytes(on_device: Any, extra: Any, tp: int) -> Any:
    """The bytes one device holds for a configuration: the target's share of its ``tp`` devices plus the drafter's own
    (:func:`configuration_bytes`' two parts; the one rule every speedup answer's memory reads). Floats or arrays."""
    return on_device / tp + extra


def alpha_for_heuristic(mean_accepted: float) -> float:
    """The per-token acceptance at which Hugging Face's schedule emits ``mean_accepted`` tokens per round."""
    return _heuristic_mix(float(mean_accepted))[2]


def speedup_by_engine(
    *,
    hardware: Pricing | Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike,
    alpha: float,
    engines: Sequence[Engine | str | None] = (None, "eager", "compiled", "serving"),
    gammas: Sequence[int] = tuple(range(1, 13)),
    context: int = 512,
    dtype: str | None = "fp16",
) -> pd.DataFrame:
    """Speedup per (engine, gamma) for one chain drafter: where the best gamma lies under each engine (tidy).

    ``hardware`` may be a Pricing; each engine then replaces the Pricing's own.
    """
    rows = []
    spec = get_model(target)
    d = as_drafter(drafter, spec)
    for e in engines:
        if isinstance(hardware, Pricing):
            pr = hardware.with_(engine=e)
        else:
            pr = Pricing.of(hardware, engine=e, dtype=dtype)
        for g in gammas:
            p = predict_speedup(hardware=pr, target=spec, drafter=d, alpha=alpha, gamma=int(g), context=context)
            rows.append(
                {"engine": p.engine, "gamma": int(g), "speedup": p.speedup, "t_draft_s": p.t_draft_s,
                 "t_verify_s": p.t_verify_s, "t_round_host_s": p.t_round_host_s, "t_base_s": p.t_base_s}
            )  # fmt: skip
    df = pd.DataFrame(rows)
    df["best"] = df["speedup"] == df.groupby("engine")["speedup"].transform("max")
    return df


def predict_speedup(
    *,
    hardware: Pricing | Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike,
    mean_accepted: float | None = None,
    alpha: float | None = None,
    gamma: int | str | None = None,
    tree: Any = None,
    engine: Engine | str | None = None,
    batch: int = 1,
    context: int = DEFAULT_CONTEXT,
    dtype: str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    tp: int | None = None,
) -> PredictedSpeedup:
    """Speedup of one speculative configuration as an engine runs it, from a measured acceptance.

    ``hardware`` is a :class:`roofline.costing.pricing.Pricing` or a profile priced with ``engine``,
    ``dtype``, ``weight_dtype``, ``kv_dtype`` and ``tp`` (not both). ``mean_accepted`` is
    the tokens per round (Spec-Bench's "#mean accepted tokens", vLLM's mean acceptance
    length; 1 for plain decoding), for a chain of ``gamma`` drafts or for ``tree`` (a
    :class:`roofline.speculation.trees.Tree`, a preset name, a parent array, rank paths, a Sequoia growmap,
    or text or a JSON file holding one: :func:`roofline.speculation.drafters.tree_preset`). ``alpha``
    (per-token acceptance) may stand in for it on chains. ``gamma="heuristic"`` is Hugging
    Face's schedule (+2 after an all-accepted round, -1 otherwise, from 5): the acceptance
    rate that yields ``mean_accepted`` under it is found and the run simulated.
    ``drafter``: a drafter object or a name in the grammar (:func:`roofline.speculation.drafters.as_drafter`);
    EAGLE and Medusa use their own trees and MTP its module count when neither ``gamma``
    nor ``tree`` is given; any other chain drafter needs ``gamma``.
    """
    pr = pricing_for(hardware, dtype, weight_dtype, kv_dtype, tp=tp, engine=engine)
    spec = get_model(target)
    d = as_drafter(drafter, spec)
    B, L = scalar_count(batch, 1), scalar_count(context, 0)  # a valid count as it is; anything else checked here
    if B is None:
        B = int(check_min("batch", batch, 1, integer=True))
    if L is None:
        L = int(check_min("context", context, 0, integer=True))
    if mean_accepted is None and alpha is None:
        raise SpecroofError("give mean_accepted (tokens per round) or alpha (per-token acceptance)")
    if mean_accepted is not None:  # numpy scalars are numbers; 10**30 or a string is this one line, not a TypeError
        try:
            mean_accepted = check_number("mean_accepted", mean_accepted, 1.0)
        except SpecroofError:
            raise SpecroofError(
                f"mean_accepted is tokens per round, a finite number at least 1 (got {_short(mean_accepted)})"
            ) from None
    if alpha is not None:  # 0 (nothing accepted) and 1 (everything) are rates too; the array path's words
        a = check_range("alpha", alpha, 0.0, 1.0)
        if a.ndim:
            raise SpecroofError(f"alpha must be one number in [0, 1] (got {_short(alpha)})")
        alpha = float(a)
    # a draft model's chain of a whole-number length: every pass from its plan's floats (round_time's numbers)
    times = None
    base = None
    tplan = None
    if tree is None and type(gamma) is int and gamma >= 1:
        plan = chain_plan(pr, spec, d)
        times = plan.times(gamma, B, L) if plan is not None else None
        base = times[0] if times is not None else None
    elif tree is not None or gamma is None:  # a tree round, likely: its plan prices the plain pass too
        tplan = tree_plan(pr, spec, d)
        base = tplan.base(B, L) if tplan is not None else None
    if base is None:
        base = float(pass_seconds(spec, pr, B, 1, L))
    t = tree_preset(tree) if tree is not None else (default_tree(d) if gamma is None else None)
    if t is not None:
        if mean_accepted is None:
            raise SpecroofError("a tree needs mean_accepted: its acceptance is not a single alpha")
        lv = t.levels()
        # one path of the tree is accepted: a round emits at most depth + 1 tokens
        E = check_mean_accepted(float(mean_accepted), depth=lv.depth, speculative=False)
        tt = tplan.times(t, B, L, lv) if tplan is not None else None
        if tt is not None:
            t_draft, t_verify, round_host = tt
        else:
            rt = round_time(pr, spec, d, t, B, L)
            t_draft, t_verify, round_host = float(rt.t_draft_s), float(rt.t_verify_s), float(rt.t_round_host_s)
        g_out, nodes = None, lv.n_nodes
    elif gamma == "heuristic":
        if mean_accepted is None:
            raise SpecroofError("gamma='heuristic' needs mean_accepted")
        E, mix, _ = _heuristic_mix(float(mean_accepted))
        gs = np.array([g for g, _ in mix])
        share = np.array([w for _, w in mix])
        rt = round_time(pr, spec, d, gs, B, L)  # every draft length the schedule picks, in one call
        t_draft, t_verify = float(share @ rt.t_draft_s), float(share @ rt.t_verify_s)
        round_host = float(rt.t_round_host_s)
        g_out, nodes = float(gs @ share), None
    else:
        if gamma is None:
            gamma = default_gamma(d)
        if gamma is None:
            raise SpecroofError(
                f"gamma (draft tokens per round) is required for the chain drafter {d.name!r}: give gamma= or tree="
            )
        g = int(check_min("gamma", gamma, 1, integer=True))
        if mean_accepted is None:  # one rate over a reused MTP module's steps is refused (section 29)
            check_reused_modules(d, spec, g)
        E = float(mean_accepted) if mean_accepted is not None else float(expected_tokens(float(alpha or 0.0), g))
        E = check_mean_accepted(E, gamma=g, speculative=False)
        # n-gram drafting verifies only the requests whose n-gram matched: the round's tokens are their share
        E = d.tokens_per_round(E) if hasattr(d, "tokens_per_round") else E
        if times is not None:
            t_draft, t_verify, round_host = times[1], times[2], times[3]
        else:
            rt = round_time(pr, spec, d, np.asarray(g), B, L)
            t_draft, t_verify, round_host = float(rt.t_draft_s), float(rt.t_verify_s), float(rt.t_round_host_s)
        g_out, nodes = float(g), None
    t_round = round_seconds(t_draft, t_verify, round_host)
    # memory as the array path counts it: the target's share of one device plus the drafter's own bytes
    new_tokens = (nodes if nodes is not None else int(round(g_out or 0))) + 1
    on_device, extra = configuration_bytes(pr, spec, d, B, L, new_tokens)
    mem = device_bytes(on_device, float(extra), pr.tp)
    cap = pr.hardware.memory_bytes if pr.hardware.memory_bytes is not None else math.inf
    # every field given: the instance without the frozen dataclass's per-field __setattr__ (cost.frozen)
    result: PredictedSpeedup = frozen(
        PredictedSpeedup,
        {
            "speedup": E * base / t_round, "mean_accepted": E, "t_round_s": t_round, "t_draft_s": t_draft,
            "t_verify_s": t_verify, "t_round_host_s": round_host, "t_base_s": base, "tokens_per_s": B * E / t_round,
            "baseline_tokens_per_s": B / base, "drafter": str(getattr(d, "name", drafter)), "engine": pr.engine_name,
            "gamma": g_out, "tree_nodes": nodes, "memory_bytes": mem, "fits_in_memory": bool(mem <= cap),
        },
    )  # fmt: skip
    return result
