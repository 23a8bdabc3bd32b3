"""Choose gamma (and strategy) for a GPU: a ranked table and a one-line recommendation.

Every (hardware, drafter) pair is one vectorised :func:`roofline.speculation.speculative.speedup`
call over gamma x batch x context; only hardware and drafters are looped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError, check_min
from roofline.core.validation import check_count
from roofline.costing.engine import Engine
from roofline.costing.hardware import Hardware
from roofline.costing.passtime import crossover_tokens, kv_bound_context
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing, pricing_of
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.acceptance_kinds import reused_modules_note, reused_step_limit
from roofline.speculation.drafters import DrafterLike, as_drafter
from roofline.speculation.drafters.base import max_drafts
from roofline.speculation.speculative import speedup

HardwareLike = Pricing | Hardware | str

PLAN_COLUMNS = [
    "hardware",
    "strategy",
    "gamma",
    "batch",
    "context",
    "expected_tokens",
    "t_draft_s",
    "t_verify_s",
    "t_checkpoint_s",
    "t_round_host_s",
    "t_round_s",
    "tokens_per_s_per_user",
    "tokens_per_s_total",
    "speedup",
    "memory_bytes",
    "fits_in_memory",
    "kv_bound_context",
]


def _listify(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def plan(
    hardware: HardwareLike | Sequence[HardwareLike],
    target: ModelSpec | str,
    drafter: DrafterLike | Sequence[DrafterLike],
    acceptance: Any,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = DEFAULT_CONTEXT,
    gammas: ArrayLike | range = range(0, 17),
    dtype: str | None = None,
    curve: bool | None = None,
    efficiency: bool | None = None,
    round_overhead_s: float = 0.0,
    tp: int | None = None,
    engine: Engine | str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
) -> pd.DataFrame:
    """Ranked table of every (hardware, strategy, gamma, batch, context), best speedup first.

    ``hardware`` is one or a list of :class:`roofline.costing.pricing.Pricing` objects or profiles
    (priced with ``engine``, ``dtype``, ``weight_dtype``, ``kv_dtype``, ``tp``, ``efficiency``;
    each resolved once). ``drafter`` may be one drafter or a list; ``acceptance`` a scalar
    alpha or a per-position curve (then gammas beyond its length are skipped), an acceptance
    kind (:mod:`roofline.speculation.acceptance`: a mean measured at G drafts covers gamma up to G), or a
    dict from drafter name to any of these. A drafter that reuses a module past its own step
    (an MTP stack) is priced with one rate only up to its modules or the measured drafts; the
    sentence saying so is in ``table.attrs["notes"]`` (docs/cost-model.md, section 29). gamma 0
    is plain decoding (strategy 'none'). Rows that do not fit in memory stay in the table with
    ``fits_in_memory`` False and are ranked last. ``kv_bound_context`` is the context from which the row's verify
    pass (gamma + 1 tokens at its batch) is KV-bound (:func:`roofline.costing.passtime.kv_bound_context`; -1: not within the
    model's context).
    """
    spec = get_model(target)
    g_all = check_min("gammas", np.atleast_1d(np.asarray(gammas)).ravel(), 0, integer=True)
    B = check_min("batch", np.atleast_1d(batch), 1, integer=True)
    L = check_min("context", np.atleast_1d(context), 0, integer=True)
    drafters = [as_drafter(d, spec) for d in _listify(drafter)]
    if not drafters:
        raise SpecroofError("give at least one drafter (an empty list prices nothing)")
    if isinstance(acceptance, dict):
        missing = [d.name for d in drafters if d.name not in acceptance]
        if missing:
            raise SpecroofError(f"acceptance has no entry for drafter(s) {missing}; keys: {list(acceptance)}")
    options = dict(
        dtype=dtype, efficiency=efficiency, tp=tp, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype
    )
    frames = []
    notes: list[str] = []
    for hw_ in _listify(hardware):
        pr = pricing_of(hw_, **options)
        # the context from which each row's verify pass (gamma + 1 tokens at its batch) is KV-bound (section 31)
        gb = np.unique(np.stack(np.meshgrid(np.maximum(g_all, 0) + 1, B, indexing="ij"), -1).reshape(-1, 2), axis=0)
        kv_at = dict(zip(map(tuple, gb.tolist()), kv_bound_context(spec, pr, gb[:, 1], gb[:, 0]).tolist(), strict=True))
        for d in drafters:
            acc = acceptance[d.name] if isinstance(acceptance, dict) else acceptance
            measured = None
            if hasattr(acc, "for_plan"):  # an acceptance kind: what the plan prices, and the drafts it was measured at
                measured, acc = acc.length, acc.for_plan()
            is_curve = isinstance(acc, (list, tuple, np.ndarray)) and np.ndim(acc) == 1 if curve is None else curve
            g = g_all[g_all <= len(acc)] if is_curve else g_all
            most = max_drafts(d)  # Hydra's heads, a published block's block - 1 tokens: no deeper draft is priced
            g = g[g <= most] if most is not None else g
            limit = None if is_curve else reused_step_limit(d, spec)
            if limit is not None:
                # one rate is not stretched over a reused module's steps (docs/cost-model.md, section 29): it prices
                # the modules' own steps, or the steps a mean was measured over (as that many positions of a curve)
                top = max(limit, measured or 0)
                if g.size and int(g.max()) > top:
                    g = g[g <= top]
                    note = reused_modules_note(d, spec, measured)
                    if note and note not in notes:
                        notes.append(note)
                if top > limit:
                    acc, is_curve = [float(acc)] * top, True
            if g.size == 0:
                asked = ", ".join(str(int(x)) for x in g_all)
                why = [f"the acceptance curve's {len(acc)} positions"] if is_curve else []
                why += [f"{d.name}'s {most} drafts a round"] if most is not None else []
                why += (
                    [f"one rate, which covers {d.name}'s {limit} trained steps (a per-position curve covers more)"]
                    if limit is not None
                    else []
                )
                raise SpecroofError(f"no gamma asked ({asked}) fits within {' and '.join(why) or 'the drafter'}")
            G, BB, LL = np.meshgrid(g, B, L, indexing="ij")
            r = speedup(pr, spec, d, acc, G, batch=BB, context=LL, curve=is_curve, round_overhead_s=round_overhead_s)
            frame = pd.DataFrame(
                {
                    "hardware": pr.hardware.id,
                    "strategy": np.where(G == 0, "none", d.name).ravel(),
                    "gamma": G.ravel(),
                    "batch": BB.ravel(),
                    "context": LL.ravel(),
                    "expected_tokens": np.broadcast_to(r.expected_tokens, G.shape).ravel(),
                    "t_draft_s": np.broadcast_to(r.t_draft_s, G.shape).ravel(),
                    "t_verify_s": np.broadcast_to(r.t_verify_s, G.shape).ravel(),
                    "t_checkpoint_s": np.broadcast_to(r.t_checkpoint_s, G.shape).ravel(),
                    "t_round_host_s": np.where(G == 0, 0.0, r.t_round_host_s).ravel(),
                    "t_round_s": np.broadcast_to(r.t_round_s, G.shape).ravel(),
                    "tokens_per_s_per_user": np.broadcast_to(r.tokens_per_s_per_user, G.shape).ravel(),
                    "tokens_per_s_total": np.broadcast_to(r.tokens_per_s_total, G.shape).ravel(),
                    "speedup": np.broadcast_to(r.speedup, G.shape).ravel(),
                    "memory_bytes": np.broadcast_to(r.memory_bytes, G.shape).ravel(),
                    "fits_in_memory": np.broadcast_to(r.fits_in_memory, G.shape).ravel(),
                    "kv_bound_context": [
                        kv_at[(int(gg) + 1, int(bb))] for gg, bb in zip(G.ravel(), BB.ravel(), strict=True)
                    ],
                }
            )
            frames.append(frame)
    df = pd.concat(frames, ignore_index=True)
    # the gamma-0 baseline is identical for every drafter: keep one copy
    df = df.drop_duplicates(subset=["hardware", "strategy", "gamma", "batch", "context"])
    df = df.sort_values(["fits_in_memory", "speedup", "gamma"], ascending=[False, False, True], kind="stable")
    out = df[PLAN_COLUMNS].reset_index(drop=True)
    out.attrs["notes"] = notes  # what the plan chose not to price, one sentence each (the CLI prints them)
    return out


#: a recommendation's fields that speak of speed: None where nothing fits, so no speedup is read off a configuration
#: the device cannot hold (docs/cost-model.md, section 50.4)
NOT_FIT_BLANK = ("strategy", "gamma", "speedup", "expected_tokens", "t_round_s", "tokens_per_s_per_user",
                 "tokens_per_s_total", "t_draft_s", "t_verify_s", "t_round_host_s")  # fmt: skip


@dataclass(frozen=True)
class Recommendation:
    """The best configuration of a plan and a one-line reason (where nothing fits: no speedup, the reason and the
    largest batch and context that fit)."""

    row: dict[str, Any]
    reason: str
    table: pd.DataFrame

    def to_frame(self) -> pd.DataFrame:
        """The ranked plan table this recommendation was read from (best first)."""
        return self.table


def recommend(
    hardware: HardwareLike,
    target: ModelSpec | str,
    drafter: DrafterLike | Sequence[DrafterLike],
    acceptance: Any,
    *,
    batch: int = 1,
    context: int = DEFAULT_CONTEXT,
    gammas: ArrayLike | range = range(0, 17),
    dtype: str | None = None,
    table: pd.DataFrame | None = None,
    efficiency: bool | None = None,
    tp: int | None = None,
    engine: Engine | str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    resolution: float = 0.0,
    crossover_k: int | None = None,
    **kwargs: Any,
) -> Recommendation:
    """Best strategy and gamma for one GPU, batch and context, with why.

    ``hardware`` is a Pricing or a profile priced with the keyword options; the crossover K
    in the reason is priced the same way (engine, TP, dtypes). ``table``: a :func:`plan`
    table that already covers this GPU, batch and context (the CLI plans every cell once
    and reads each recommendation out of it). ``resolution``: the relative speedup within which two settings are
    one answer (the CLI's 2%, docs/cost-model.md section 50.3): among the fitting rows within it of the fastest, the
    cheapest wins (fewest draft tokens per sequence, so the least KV and draft work). ``crossover_k``: the crossover K
    of this cell when the caller priced a grid of them at once (:func:`crossover_tokens` broadcasts). Other keywords go
    to :func:`plan`.
    """
    pr = pricing_of(
        hardware, dtype=dtype, efficiency=efficiency, tp=tp, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype
    )
    hw = pr.hardware
    if table is None:
        table = plan(pr, target, drafter, acceptance, batch=batch, context=context, gammas=gammas, **kwargs)
    else:
        table = table[(table["hardware"] == hw.id) & (table["batch"] == batch) & (table["context"] == context)]
        if table.empty:
            raise SpecroofError(f"the plan table has no row for {hw.id}, batch {batch}, context {context}")
        table = table.reset_index(drop=True)  # plan() ranked it already
    best = {str(k): v for k, v in table.iloc[0].items()}
    fastest = best
    if resolution > 0 and bool(best["fits_in_memory"]):
        # one answer within the band resolution: the fewest draft tokens (gamma 0, plain decoding, is the cheapest)
        near = table[table["fits_in_memory"].astype(bool) & (table["speedup"] >= best["speedup"] * (1 - resolution))]
        cheapest = near.sort_values(["gamma", "speedup"], ascending=[True, False], kind="stable").iloc[0]
        best = {str(k): v for k, v in cheapest.items()}
    k = int(crossover_tokens(target, pr, batch, context)) if crossover_k is None else int(crossover_k)
    if best["gamma"] == 0:
        reason = (
            f"do not speculate: at batch {batch}, context {context} no strategy beats plain decoding "
            f"(crossover K = {k} new tokens per sequence)"
        )
    else:
        reason = (
            f"{best['strategy']} with gamma {best['gamma']}: {best['speedup']:.2f}x "
            f"({best['expected_tokens']:.2f} tokens per {best['t_round_s'] * 1e3:.2f} ms round; "
            f"verify of {best['gamma'] + 1} tokens is {'under' if best['gamma'] + 1 <= k else 'past'} the crossover K = {k})"
        )
    if fastest["gamma"] != best["gamma"] or fastest["strategy"] != best["strategy"]:
        reason += (
            f"; {fastest['strategy']} at gamma {fastest['gamma']} gives {fastest['speedup']:.2f}x, within the "
            f"{resolution:.0%} resolution: the cheaper setting wins"
        )
    if not best["fits_in_memory"]:  # ranked last by plan(): here every row fails to fit
        reason = _does_not_fit(pr, target, drafter, best)
        return Recommendation(best | {k: None for k in NOT_FIT_BLANK}, reason, table)
    return Recommendation(best, reason, table)


def largest_for_row(pr: Pricing, target: ModelSpec | str, drafter: Any, row: dict[str, Any], capacity: float) -> Any:
    """The largest batch (at the row's context) and longest context (at its batch) whose footprint per device, the
    row's drafter's own memory included (weights, and a KV cache that grows with batch and context), is within
    ``capacity`` bytes (roofline.deploy.memory.largest_fit)."""
    from roofline.deploy.memory import largest_fit
    from roofline.speculation.speculative import Ctx

    spec = get_model(target)
    b, c, k, tp = int(row["batch"]), int(row["context"]), int(row["gamma"] or 0) + 1, max(1, int(pr.tp))
    d = next((x for x in (as_drafter(y, spec) for y in _listify(drafter)) if x.name == row["strategy"]), None)
    ctx = Ctx(spec, pr)

    def extra(bb: int, cc: int) -> float:  # the drafter's bytes on top of the target's (plain decoding: none)
        return 0.0 if d is None or int(row["gamma"] or 0) == 0 else float(d.extra_memory_bytes(ctx, bb, cc))

    return largest_fit(spec, capacity, batch=b, context=c, new_tokens=k, tp=tp, extra_bytes=extra,
                       weight_dtype=pr.stored_weight_dtype, kv_dtype=pr.kv_dtype, act_dtype=pr.dtype)  # fmt: skip


def _does_not_fit(pr: Pricing, target: ModelSpec | str, drafter: Any, row: dict[str, Any]) -> str:
    """The reason a row does not fit, per device, and the largest batch and context that fit its setting."""
    dev = pr.hardware.memory_bytes or float("inf")
    b, c, tp = int(row["batch"]), int(row["context"]), max(1, int(pr.tp))
    got = largest_for_row(pr, target, drafter, row, dev)
    fits = (
        f"the largest batch that fits at context {c} is {got.batch}, the longest context at batch {b} is {got.context:,}"
        if got.batch or got.context
        else "not even one sequence fits"
    )
    per = f" per device (TP {tp})" if tp > 1 else ""
    return (
        f"does not fit in memory: needs {float(row['memory_bytes']) / 1e9:.1f} GB{per}, more than the "
        f"{dev / 1e9:.0f} GB device; {fits}"
    )


def speculation_stops_paying(
    hardware: HardwareLike,
    target: ModelSpec | str,
    drafter: DrafterLike | Sequence[DrafterLike],
    acceptance: Any,
    *,
    context: int = DEFAULT_CONTEXT,
    gammas: ArrayLike | range = range(1, 17),
    dtype: str | None = None,
    max_batch: int = 4096,
    efficiency: bool | None = None,
    tp: int | None = None,
    engine: Engine | str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
) -> int | None:
    """Smallest power-of-two batch at which no gamma >= 1 gives a speedup above 1.

    Only batches whose KV cache fits in memory count; None when speculation pays
    at every batch that fits (at long context the KV read keeps even large
    batches memory bound). Priced like :func:`plan`.
    """
    pr = pricing_of(
        hardware, dtype=dtype, efficiency=efficiency, tp=tp, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype
    )
    # the batches searched are powers of two up to max_batch: a count, sized before the plan's table is built
    max_batch = check_count("max_batch", max_batch, 1, 1 << 24)
    batches = 2 ** np.arange(int(np.log2(max_batch)) + 1)
    table = plan(pr, target, drafter, acceptance, batch=batches, context=context, gammas=gammas)
    table = table[table["fits_in_memory"]]
    best = table[table["gamma"] > 0].groupby("batch")["speedup"].max()
    losing = best[best <= 1.0]
    return int(losing.index.min()) if len(losing) else None


# -- an engine's own configuration: its price, and the best setting beside it -----------------------------------------

#: drafters priced on the engine's tree knobs (roofline.deploy.engine_search); the others are chains of ``num_steps``
TREE_DRAFTERS = ("eagle", "eagle2", "eagle3", "mtp")


def _config_pricing(config: Any, hardware: Any, options: dict[str, Any]) -> Pricing:
    """The Pricing an engine configuration runs under: its engine's profile, its TP and dtypes unless given."""
    given = {k: v for k, v in options.items() if v is not None}
    if isinstance(hardware, Pricing):
        pr = pricing_of(hardware, **given)
        if config.tp is not None and config.tp != pr.tp:
            raise SpecroofError(f"the engine configuration runs --tp {config.tp}, the pricing tp {pr.tp}: give one")
        return pr
    opts = {"engine": config.engine, "tp": config.tp, "dtype": config.dtype, "weight_dtype": config.weight_dtype}
    opts.update(given)
    return pricing_of(hardware, **{k: v for k, v in opts.items() if v is not None})


def _tree_acceptance(acceptance: Any, mean_accepted: float | None) -> tuple[Any, float | None]:
    """(an AcceptanceModel or None, a mean) for the engine search: a per-token rate is the i.i.d. candidate model, a
    per-position curve a chain's; a mean stays a mean (fitted on the setting it was measured at)."""
    from roofline.speculation.trees import AcceptanceModel, ChainCurveAcceptance, IIDAcceptance

    if (acceptance is None) == (mean_accepted is None):
        raise SpecroofError("give acceptance (a rate, curve or acceptance kind) or mean_accepted, not both")
    if acceptance is None:
        return None, float(mean_accepted)  # type: ignore[arg-type]
    if isinstance(acceptance, AcceptanceModel):
        return acceptance, None
    if hasattr(acceptance, "for_plan"):  # an acceptance kind: a mean measured at the setting stays a mean
        if getattr(acceptance, "kind", "") == "mean" and acceptance.gamma is None:
            return None, float(acceptance.mean)
        acceptance = acceptance.for_plan()
    if isinstance(acceptance, (list, tuple, np.ndarray)):
        return ChainCurveAcceptance(np.asarray(acceptance, dtype=float)), None
    return IIDAcceptance(float(acceptance)), None


def _chain_acceptance(acceptance: Any, mean_accepted: float | None, gamma: int) -> tuple[Any, bool]:
    """(alpha or curve, is_curve) for a chain of ``gamma`` drafts; a mean measured at that chain gives its alpha."""
    from roofline.speculation.acceptance_kinds import alpha_for_tokens

    if (acceptance is None) == (mean_accepted is None):
        raise SpecroofError("give acceptance (a rate, curve or acceptance kind) or mean_accepted, not both")
    if acceptance is None:
        return float(alpha_for_tokens(float(mean_accepted), gamma)), False  # type: ignore[arg-type]
    if hasattr(acceptance, "for_plan"):
        acceptance = acceptance.for_plan()
    if isinstance(acceptance, (list, tuple, np.ndarray)):
        return [float(x) for x in acceptance], True
    return float(acceptance), False


def price_engine_config(
    config: Any,
    hardware: HardwareLike,
    *,
    acceptance: Any = None,
    mean_accepted: float | None = None,
    target: ModelSpec | str | None = None,
    batch: int = 1,
    context: int = DEFAULT_CONTEXT,
    engine: Engine | str | None = None,
    dtype: str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    tp: int | None = None,
) -> dict[str, Any]:
    """The speedup of an engine's own configuration (:func:`roofline.deploy.engine_flags.read_engine_config`) on a GPU.

    The pricing is ``hardware`` under the configuration's engine, TP and dtypes (each replaced by the keyword when
    given); the target is ``target`` or the one the configuration names. Acceptance is ``mean_accepted`` (tokens per
    round measured with this very setting: the engine's "accept length") or ``acceptance`` (a per-token rate, a
    per-position curve, an acceptance kind, or for trees an :class:`roofline.speculation.trees.AcceptanceModel`). EAGLE-family
    drafters are priced as :func:`roofline.deploy.engine_search.plan_engine` prices the setting (the tree the engine builds,
    its draft passes), the others as a chain of ``num_steps`` drafts (:func:`roofline.speculation.speculative.speedup`): the
    same numbers ``plan --emit`` chose the setting by. One row: the setting's knobs and its figures.
    """
    from roofline.deploy.engine_search import plan_engine
    from roofline.speculation.acceptance_kinds import check_reused_modules
    from roofline.speculation.trees import ChainCurveAcceptance

    pr = _config_pricing(config, hardware, {"engine": engine, "dtype": dtype, "weight_dtype": weight_dtype,
                                            "kv_dtype": kv_dtype, "tp": tp})  # fmt: skip
    spec = get_model(target) if target is not None else config.target_spec()
    s = config.setting
    if config.drafter in TREE_DRAFTERS:
        model, mean = _tree_acceptance(acceptance, mean_accepted)
        if model is not None and not isinstance(model, ChainCurveAcceptance):
            check_reused_modules(as_drafter(config.drafter, spec), spec, s.num_steps)
        ep = plan_engine(hardware=pr, target=spec, drafter=config.drafter, framework=config.engine, settings=[s],
                         acceptance=model, mean_accepted=mean, measured_at=s if mean is not None else None,
                         batches=[batch], context=context)  # fmt: skip
        row = {str(k): v for k, v in ep.best.iloc[0].items() if k != "setting"}
    else:
        acc, is_curve = _chain_acceptance(acceptance, mean_accepted, s.num_steps)
        r = speedup(pr, spec, config.drafter, acc, s.num_steps, batch=batch, context=context, curve=is_curve)
        row = {"framework": config.engine, "batch": int(batch), "context": int(context), "num_steps": s.num_steps,
               "topk": 1, "num_draft_tokens": s.num_draft_tokens, "n_nodes": s.n_nodes, "depth": s.num_steps,
               "expected_tokens": float(r.expected_tokens), "t_draft_s": float(r.t_draft_s),
               "t_verify_s": float(r.t_verify_s), "t_round_host_s": float(r.t_round_host_s),
               "t_round_s": float(r.t_round_s), "t_base_s": float(r.t_base_s),
               "tokens_per_s": float(r.tokens_per_s_total), "speedup": float(r.speedup), "label": _label(s, config.drafter)}  # fmt: skip
    row = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}
    row["drafter"], row["engine_profile"], row["knobs"] = config.drafter, pr.engine_name, s.knobs()
    return row


@dataclass(frozen=True)
class EngineVerdict:
    """An engine configuration priced beside the best setting of the same engine: "yours gives X; the best gives Y".

    ``yours`` and ``best`` are priced rows (:func:`price_engine_config`'s keys); ``flags`` deploys the best setting;
    ``table`` holds every setting searched, best first; ``notes`` what the search left out and why.
    """

    config: Any
    yours: dict[str, Any]
    best: dict[str, Any]
    best_setting: Any
    flags: str
    table: pd.DataFrame
    notes: tuple[str, ...] = ()
    #: the acceptance every setting was priced with (an AcceptanceModel for trees, a rate or curve for chains): a mean
    #: measured with your setting, fitted on it
    acceptance: Any = None

    @property
    def gain(self) -> float:
        """The best setting's speedup over yours (1: yours is the best)."""
        return float(self.best["speedup"]) / float(self.yours["speedup"])

    def sentence(self) -> str:
        """One line for the page and the CLI."""
        mine = f"yours ({self.config.engine} {self.yours['label']}) gives {self.yours['speedup']:.2f}x"
        if self.best_setting == self.config.setting or self.gain <= 1.0 + 1e-9:
            return f"{mine}: the best setting searched at batch {self.yours['batch']}"
        return (
            f"{mine}; the best setting gives {self.best['speedup']:.2f}x ({self.best['label']}, "
            f"{self.gain - 1.0:+.0%}), with these flags: {self.flags}"
        )

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config.to_json(), "yours": self.yours, "best": self.best, "flags": self.flags,
                "gain": self.gain, "sentence": self.sentence(), "notes": list(self.notes)}  # fmt: skip


def _label(setting: Any, drafter: Any) -> str:
    """A setting as its engine's own knobs for this drafter (SGLang's DFLASH: its block size)."""
    from roofline.deploy.engine_flags import knobs_for

    return " ".join(f"{k}={v}" for k, v in knobs_for(setting, drafter).items())


def compare_engine_config(
    config: Any,
    hardware: HardwareLike,
    *,
    acceptance: Any = None,
    mean_accepted: float | None = None,
    target: ModelSpec | str | None = None,
    batch: int = 1,
    context: int = DEFAULT_CONTEXT,
    settings: Sequence[Any] | None = None,
    engine: Engine | str | None = None,
    dtype: str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    tp: int | None = None,
    max_gamma: int = 16,
    resolution: float = 0.0,
) -> EngineVerdict:
    """ "Yours gives X; the best setting gives Y, with these flags": ``config`` priced beside every setting of its
    engine (:func:`roofline.deploy.engine_search.engine_settings` for EAGLE-family drafters, chains of 1..``max_gamma``
    drafts for the others; ``settings`` replaces the grid) under one acceptance (as :func:`price_engine_config`).

    A mean measured with your setting fits the acceptance model on your setting (EAGLE trees: the i.i.d. candidate
    rate of section 9; chains: the per-token rate), then prices the others with it. With ``resolution`` > 0 a setting
    within it of the fastest is the same answer: the cheapest such setting is "the best", and yours when it is one
    (section 50.3). A drafter that reuses a module
    (DeepSeek's one MTP module) is searched only up to the depth your acceptance covers (section 29).
    """
    from roofline.deploy.engine_flags import emit_flags
    from roofline.deploy.engine_search import engine_settings, plan_engine
    from roofline.speculation.acceptance_kinds import reused_step_limit
    from roofline.speculation.engine_trees import EngineSetting
    from roofline.speculation.trees import ChainCurveAcceptance

    opts = {"engine": engine, "dtype": dtype, "weight_dtype": weight_dtype, "kv_dtype": kv_dtype, "tp": tp}
    pr = _config_pricing(config, hardware, opts)
    spec = get_model(target) if target is not None else config.target_spec()
    yours = price_engine_config(config, pr, acceptance=acceptance, mean_accepted=mean_accepted, target=spec,
                                batch=batch, context=context)  # fmt: skip
    notes: list[str] = []
    d = as_drafter(config.drafter, spec)
    limit = reused_step_limit(d, spec)
    covered = config.setting.num_steps if mean_accepted is not None else None
    if config.drafter in TREE_DRAFTERS:
        model, mean = _tree_acceptance(acceptance, mean_accepted)
        grid = (
            list(settings)
            if settings is not None
            else engine_settings(config.engine, vllm_trees=config.setting.choices is not None)
        )
        if config.setting not in grid:
            grid.append(config.setting)
        if limit is not None and not isinstance(model, ChainCurveAcceptance):
            top = max(limit, covered or 0)
            kept = [s for s in grid if s.num_steps <= top]
            if len(kept) < len(grid):
                notes.append(f"{config.drafter}: settings deeper than {top} draft steps left out (one MTP module "
                             f"reused past its own step: section 29)")  # fmt: skip
            grid = kept
        if isinstance(model, ChainCurveAcceptance):  # a curve covers the positions it lists
            grid = [s for s in grid if s.num_steps <= (model.max_depth or 0)]
        ep = plan_engine(hardware=pr, target=spec, drafter=config.drafter, framework=config.engine, settings=grid,
                         acceptance=model, mean_accepted=mean, measured_at=config.setting if mean is not None else None,
                         batches=[batch], context=context, resolution=resolution)  # fmt: skip
        used: Any = ep.acceptance
        table = ep.table.sort_values(["speedup", "num_draft_tokens"], ascending=[False, True]).reset_index(drop=True)
        best_setting = ep.best_settings[0]
        best = {str(k): (v.item() if isinstance(v, np.generic) else v) for k, v in ep.best.iloc[0].items()}
        best.pop("setting", None)
    else:
        acc, is_curve = _chain_acceptance(acceptance, mean_accepted, config.setting.num_steps)
        used = acc
        top = len(acc) if is_curve else max_gamma  # type: ignore[arg-type]
        gs = [g for g in range(1, top + 1)] if settings is None else [s.num_steps for s in settings]
        block = getattr(d, "block_size", 0)  # a block drafter drafts at most block - 1 tokens a pass (as plan)
        gs = [g for g in gs if g < block or g == config.setting.num_steps] if block else gs
        rows = []
        for g in gs:
            one = EngineSetting(config.engine, g, 1, g + 1)
            r = speedup(pr, spec, config.drafter, acc, g, batch=batch, context=context, curve=is_curve)
            rows.append({"num_steps": g, "num_draft_tokens": g + 1, "speedup": float(r.speedup),
                         "expected_tokens": float(r.expected_tokens), "t_round_s": float(r.t_round_s),
                         "label": _label(one, config.drafter), "batch": int(batch), "context": int(context)})  # fmt: skip
        table = pd.DataFrame(rows).sort_values(["speedup", "num_steps"], ascending=[False, True]).reset_index(drop=True)
        # within the resolution of the fastest, the shortest chain (section 50.3)
        near = table[table["speedup"] >= float(table["speedup"].iloc[0]) * (1.0 - max(0.0, resolution))]
        pick = near.sort_values(["num_steps", "speedup"], ascending=[True, False]).iloc[0]
        best = {str(k): (v.item() if isinstance(v, np.generic) else v) for k, v in pick.items()}
        best_setting = EngineSetting(config.engine, int(best["num_steps"]), 1, int(best["num_steps"]) + 1)
    # yours is (one of) the best, or within the resolution of it: say so, do not churn flags for nothing
    if float(yours["speedup"]) >= float(best["speedup"]) * (1.0 - max(0.0, resolution)):
        best, best_setting = dict(yours), config.setting
    draft_model = config.draft_model
    flags = emit_flags(best_setting, target=config.target or spec.name, drafter=config.drafter.split(":", 1)[0],
                       draft_model=draft_model, target_model=config.target, tp=config.tp)  # fmt: skip
    return EngineVerdict(config, yours, best, best_setting, flags, table, tuple(notes), used)
