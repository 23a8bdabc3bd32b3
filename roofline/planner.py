"""Choose gamma (and strategy) for a GPU: a ranked table and a one-line recommendation.

Every (hardware, drafter) pair is one vectorised :func:`roofline.speculative.speedup`
call over gamma x batch x context; only hardware and drafters are looped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from roofline.acceptance_kinds import reused_modules_note, reused_step_limit
from roofline.drafters import DrafterLike, as_drafter
from roofline.engine import Engine
from roofline.errors import SpecroofError, check_min
from roofline.hardware import Hardware
from roofline.model import ModelSpec, get_model
from roofline.passtime import crossover_tokens
from roofline.pricing import DEFAULT_CONTEXT, Pricing, pricing_of
from roofline.speculative import speedup

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
    "t_round_host_s",
    "t_round_s",
    "tokens_per_s_per_user",
    "tokens_per_s_total",
    "speedup",
    "memory_bytes",
    "fits_in_memory",
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

    ``hardware`` is one or a list of :class:`roofline.pricing.Pricing` objects or profiles
    (priced with ``engine``, ``dtype``, ``weight_dtype``, ``kv_dtype``, ``tp``, ``efficiency``;
    each resolved once). ``drafter`` may be one drafter or a list; ``acceptance`` a scalar
    alpha or a per-position curve (then gammas beyond its length are skipped), an acceptance
    kind (:mod:`roofline.acceptance`: a mean measured at G drafts covers gamma up to G), or a
    dict from drafter name to any of these. A drafter that reuses a module past its own step
    (an MTP stack) is priced with one rate only up to its modules or the measured drafts; the
    sentence saying so is in ``table.attrs["notes"]`` (docs/cost-model.md, section 29). gamma 0
    is plain decoding (strategy 'none'). Rows that do not fit in memory stay in the table with
    ``fits_in_memory`` False and are ranked last.
    """
    spec = get_model(target)
    g_all = check_min("gammas", np.atleast_1d(np.asarray(gammas)).ravel(), 0, integer=True)
    B = check_min("batch", np.atleast_1d(batch), 1, integer=True)
    L = check_min("context", np.atleast_1d(context), 0, integer=True)
    drafters = [as_drafter(d) for d in _listify(drafter)]
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
        for d in drafters:
            acc = acceptance[d.name] if isinstance(acceptance, dict) else acceptance
            measured = None
            if hasattr(acc, "for_plan"):  # an acceptance kind: what the plan prices, and the drafts it was measured at
                measured, acc = acc.length, acc.for_plan()
            is_curve = isinstance(acc, (list, tuple, np.ndarray)) and np.ndim(acc) == 1 if curve is None else curve
            g = g_all[g_all <= len(acc)] if is_curve else g_all
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
                raise SpecroofError(f"no gamma fits within the acceptance curve's {len(acc)} positions")
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
                    "t_round_host_s": np.where(G == 0, 0.0, r.t_round_host_s).ravel(),
                    "t_round_s": np.broadcast_to(r.t_round_s, G.shape).ravel(),
                    "tokens_per_s_per_user": np.broadcast_to(r.tokens_per_s_per_user, G.shape).ravel(),
                    "tokens_per_s_total": np.broadcast_to(r.tokens_per_s_total, G.shape).ravel(),
                    "speedup": np.broadcast_to(r.speedup, G.shape).ravel(),
                    "memory_bytes": np.broadcast_to(r.memory_bytes, G.shape).ravel(),
                    "fits_in_memory": np.broadcast_to(r.fits_in_memory, G.shape).ravel(),
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


@dataclass(frozen=True)
class Recommendation:
    """The best configuration of a plan and a one-line reason."""

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
    **kwargs: Any,
) -> Recommendation:
    """Best strategy and gamma for one GPU, batch and context, with why.

    ``hardware`` is a Pricing or a profile priced with the keyword options; the crossover K
    in the reason is priced the same way (engine, TP, dtypes). ``table``: a :func:`plan`
    table that already covers this GPU, batch and context (the CLI plans every cell once
    and reads each recommendation out of it). Other keywords go to :func:`plan`.
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
    k = int(crossover_tokens(target, pr, batch, context))
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
    if not best["fits_in_memory"]:
        cap = f" of {hw.memory_bytes / 1e9:.0f} GB" if hw.memory_bytes else ""
        reason += f"; warning: needs {best['memory_bytes'] / 1e9:.0f} GB, more than the device{cap}"
    return Recommendation(best, reason, table)


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
    batches = 2 ** np.arange(int(np.log2(max_batch)) + 1)
    table = plan(pr, target, drafter, acceptance, batch=batches, context=context, gammas=gammas)
    table = table[table["fits_in_memory"]]
    best = table[table["gamma"] > 0].groupby("batch")["speedup"].max()
    losing = best[best <= 1.0]
    return int(losing.index.min()) if len(losing) else None
