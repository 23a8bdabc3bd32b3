"""Choose gamma (and strategy) for a GPU: a ranked table and a one-line recommendation.

Every (hardware, drafter) pair is one vectorised :func:`roofline.speculative.speedup`
call over gamma x batch x context; only hardware and drafters are looped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from roofline.errors import SpecroofError, check_min
from roofline.hardware import Hardware, load_hardware, weight_only
from roofline.model import ModelSpec, get_model
from roofline.passtime import crossover_tokens
from roofline.speculative import as_drafter, speedup

if TYPE_CHECKING:
    from roofline.speculative import DrafterLike

PLAN_COLUMNS = [
    "hardware",
    "strategy",
    "gamma",
    "batch",
    "context",
    "expected_tokens",
    "t_draft_s",
    "t_verify_s",
    "t_overhead_s",
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
    hardware: Hardware | str | Sequence[Hardware | str],
    target: ModelSpec | str,
    drafter: DrafterLike | Sequence[DrafterLike],
    acceptance: Any,
    *,
    batch: ArrayLike = 1,
    context: ArrayLike = 1024,
    gammas: ArrayLike | range = range(0, 17),
    dtype: str = "bf16",
    curve: bool | None = None,
    efficiency: bool = False,
    round_overhead_s: float = 0.0,
    tp: int = 1,
    engine: Any = None,
    weight_dtype: str | None = None,
) -> pd.DataFrame:
    """Ranked table of every (hardware, strategy, gamma, batch, context), best speedup first.

    ``drafter`` may be one drafter or a list; ``acceptance`` a scalar alpha or a
    per-position curve (then gammas beyond its length are skipped), or a dict
    from drafter name to its own alpha or curve. gamma 0 is
    plain decoding (strategy 'none'). Rows that do not fit in memory stay in the
    table with ``fits_in_memory`` False and are ranked last. ``engine`` prices every pass
    and round as that software runs them (:mod:`roofline.engine`); ``weight_dtype``
    stores the weights quantised (int8, int4, fp8).
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
    frames = []
    for hw_ in _listify(hardware):
        hw = load_hardware(hw_)
        for d in drafters:
            acc = acceptance[d.name] if isinstance(acceptance, dict) else acceptance
            is_curve = isinstance(acc, (list, tuple, np.ndarray)) and np.ndim(acc) == 1 if curve is None else curve
            g = g_all[g_all <= len(acc)] if is_curve else g_all
            if g.size == 0:
                raise SpecroofError(f"no gamma fits within the acceptance curve's {len(acc)} positions")
            G, BB, LL = np.meshgrid(g, B, L, indexing="ij")
            r = speedup(
                hw,
                spec,
                d,
                acc,
                G,
                batch=BB,
                context=LL,
                dtype=dtype,
                curve=is_curve,
                efficiency=efficiency,
                round_overhead_s=round_overhead_s,
                tp=tp,
                engine=engine,
                weight_dtype=weight_dtype,
            )
            frame = pd.DataFrame(
                {
                    "hardware": hw.id,
                    "strategy": np.where(G == 0, "none", d.name).ravel(),
                    "gamma": G.ravel(),
                    "batch": BB.ravel(),
                    "context": LL.ravel(),
                    "expected_tokens": np.broadcast_to(r.expected_tokens, G.shape).ravel(),
                    "t_draft_s": np.broadcast_to(r.t_draft_s, G.shape).ravel(),
                    "t_verify_s": np.broadcast_to(r.t_verify_s, G.shape).ravel(),
                    "t_overhead_s": np.where(G == 0, 0.0, r.t_overhead_s).ravel(),
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
    return df[PLAN_COLUMNS].reset_index(drop=True)


@dataclass(frozen=True)
class Recommendation:
    """The best configuration of a plan and a one-line reason."""

    row: dict[str, Any]
    reason: str
    table: pd.DataFrame


def recommend(
    hardware: Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike | Sequence[DrafterLike],
    acceptance: Any,
    *,
    batch: int = 1,
    context: int = 1024,
    gammas: ArrayLike | range = range(0, 17),
    dtype: str = "bf16",
    table: pd.DataFrame | None = None,
    **kwargs: Any,
) -> Recommendation:
    """Best strategy and gamma for one GPU, batch and context, with why.

    ``table``: a :func:`plan` table that already covers this GPU, batch and context
    (the CLI plans every cell once and reads each recommendation out of it).
    """
    hw = load_hardware(hardware)
    if table is None:
        table = plan(
            hw, target, drafter, acceptance, batch=batch, context=context, gammas=gammas, dtype=dtype, **kwargs
        )
    else:
        table = table[(table["hardware"] == hw.id) & (table["batch"] == batch) & (table["context"] == context)]
        if table.empty:
            raise SpecroofError(f"the plan table has no row for {hw.id}, batch {batch}, context {context}")
        table = table.reset_index(drop=True)  # plan() ranked it already
    best = {str(k): v for k, v in table.iloc[0].items()}
    cdt, wdt = weight_only(dtype, kwargs.get("weight_dtype"))
    k = int(crossover_tokens(target, hw, batch, context, cdt, weight_dtype=wdt))
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
    hardware: Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike | Sequence[DrafterLike],
    acceptance: Any,
    *,
    context: int = 1024,
    gammas: ArrayLike | range = range(1, 17),
    dtype: str = "bf16",
    max_batch: int = 4096,
) -> int | None:
    """Smallest power-of-two batch at which no gamma >= 1 gives a speedup above 1.

    Only batches whose KV cache fits in memory count; None when speculation pays
    at every batch that fits (at long context the KV read keeps even large
    batches memory bound).
    """
    batches = 2 ** np.arange(int(np.log2(max_batch)) + 1)
    table = plan(hardware, target, drafter, acceptance, batch=batches, context=context, gammas=gammas, dtype=dtype)
    table = table[table["fits_in_memory"]]
    best = table[table["gamma"] > 0].groupby("batch")["speedup"].max()
    losing = best[best <= 1.0]
    return int(losing.index.min()) if len(losing) else None
