"""The best engine setting per batch: every SGLang / vLLM / TensorRT-LLM EAGLE setting priced on a GPU.

For each setting of an engine's knobs (:class:`roofline.speculation.engine_trees.EngineSetting`) the
tree it builds in expectation (:func:`roofline.speculation.engine_trees.engine_tree`) is priced with
the one speedup formula of :func:`roofline.speculation.predict.predict_speedup`: the draft passes
the engine runs (``EngineSetting.draft_pass_widths``, one pass of the EAGLE layer each),
one tree-masked verify pass over ``num_draft_tokens`` tokens, and the engine profile's
round time. The answer is a tidy table, one row per (batch, setting), and the best
setting per batch, which :func:`roofline.deploy.engine_flags.emit_flags` turns into launch flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError, check_min
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing, pricing_of
from roofline.deploy.engine_flags import emit_flags
from roofline.speculation.drafters import Ctx, Eagle
from roofline.speculation.engine_trees import FRAMEWORKS, SGLANG_DEFAULT, EngineSetting, engine_tree, fit_acceptance
from roofline.speculation.predict import predict_speedup
from roofline.speculation.trees import AcceptanceModel

#: the draft passes per round searched (SGLang's steps, vLLM's chain length, TensorRT-LLM's max_draft_len)
STEPS = tuple(range(1, 9))
#: children per expanded node searched (SGLang's documented EAGLE settings use 1, 4 and 8)
TOPKS = (1, 2, 4, 8)
#: verify-pass sizes searched for trees (tokens, the pending token included)
DRAFT_TOKENS = (4, 6, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class EngineDraft(Eagle):
    """The EAGLE layer run as an engine runs it: one pass per entry of ``pass_widths`` (tokens per sequence).

    SGLang drafts ``num_steps`` passes over the top-k beam whatever the verified tree keeps,
    so the draft cost follows the setting, not the verified tree's shape.
    """

    pass_widths: tuple[int, ...] = (1,)

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        # a version-1 EAGLE prices one pass per given level: give it the engine's passes
        return Eagle(1, name=self.name).tree_draft_time(ctx, list(self.pass_widths), batch, context)


def _drafter_name(drafter: Any) -> str:
    name = str(getattr(drafter, "name", drafter)).strip().lower()
    if name == "eagle1":
        name = "eagle"
    if name.startswith("mtp:"):  # MTP modules reused in turn: the draft cost per pass is one module either way
        name = "mtp"
    if name not in ("eagle", "eagle2", "eagle3", "mtp"):
        raise SpecroofError(
            f"engine settings are searched for EAGLE-style drafters (eagle, eagle2, eagle3, mtp); got {drafter!r}"
        )
    return name


def engine_settings(
    framework: str,
    *,
    steps: Iterable[int] = STEPS,
    topks: Iterable[int] = TOPKS,
    draft_tokens: Iterable[int] = DRAFT_TOKENS,
    vllm_trees: bool = False,
) -> list[EngineSetting]:
    """Every setting of ``framework``'s knobs over the given grids that the engine accepts.

    SGLang: chains (topk 1, num_draft_tokens = steps + 1) and trees (topk > 1, every
    ``draft_tokens`` its candidates can fill). vLLM: chains of ``steps`` tokens, plus with
    ``vllm_trees`` the level-uniform trees (``speculative_token_tree``) of ``steps`` levels
    whose branching is one of ``topks`` at the first level and 1 or 2 below.
    TensorRT-LLM: linear trees and dynamic trees (``dynamic_tree_max_topK`` from ``topks``,
    ``max_total_draft_tokens`` from ``draft_tokens`` - 1 within its bounds).
    """
    if framework not in FRAMEWORKS:
        raise SpecroofError(f"unknown engine {framework!r}; choose one of {', '.join(FRAMEWORKS)}")
    ss = sorted({int(s) for s in check_min("steps", list(steps), 1, integer=True)})
    ks = sorted({int(k) for k in check_min("topks", list(topks), 1, integer=True)})
    ns = sorted({int(n) for n in check_min("draft_tokens", list(draft_tokens), 2, integer=True)})
    out: list[EngineSetting] = []
    for s in ss:
        out.append(EngineSetting(framework, s, 1, s + 1))
        for k in (k for k in ks if k > 1):
            if framework == "sglang":
                pool = k + (s - 1) * k * k
                out += [EngineSetting.sglang(s, k, n) for n in ns if n - 1 <= pool]
            elif framework == "trtllm":
                out += [EngineSetting.trtllm(s, k, n - 1) for n in ns if s <= n - 1 <= k * s]
            elif vllm_trees:
                for below in (1, 2):
                    level: list[tuple[int, ...]] = [()]
                    paths: list[tuple[int, ...]] = []
                    for d in range(s):
                        level = [(*p, r) for p in level for r in range(k if d == 0 else below)]
                        paths += level
                    if len(paths) + 1 <= max(ns):
                        out.append(EngineSetting.vllm(tree=paths))
    return list(dict.fromkeys(out))  # a vLLM tree with below = 1 at depth 1 repeats: keep one


@dataclass(frozen=True)
class EnginePlan:
    """Every priced (batch, setting) and the best setting per batch, with the acceptance used."""

    framework: str
    table: pd.DataFrame
    best: pd.DataFrame
    best_settings: tuple[EngineSetting, ...]
    acceptance: AcceptanceModel
    measured_at: EngineSetting | None
    settings: tuple[EngineSetting, ...] = field(repr=False)

    def records(
        self, *, target: Any, drafter: Any, draft_model: str | None = None, target_model: str | None = None
    ) -> list[dict[str, Any]]:
        """Per batch: the best setting in the engine's own names, its figures and the flags that deploy it."""
        out = []
        for (_, row), s in zip(self.best.iterrows(), self.best_settings, strict=True):
            rec = {str(k): (v.item() if isinstance(v, np.generic) else v) for k, v in row.items() if k != "setting"}
            rec["knobs"] = s.knobs()
            rec["flags"] = emit_flags(
                s, target=target, drafter=drafter, draft_model=draft_model, target_model=target_model
            )
            out.append(rec)
        return out


def plan_engine(
    *,
    hardware: Any,
    target: Any,
    drafter: Any,
    framework: str = "sglang",
    mean_accepted: float | None = None,
    acceptance: AcceptanceModel | None = None,
    measured_at: EngineSetting | None = None,
    batches: Sequence[int] = (1,),
    settings: Sequence[EngineSetting] | None = None,
    engine: Any = None,
    context: int = DEFAULT_CONTEXT,
    dtype: str | None = None,
    weight_dtype: str | None = None,
    tp: int | None = None,
    resolution: float = 0.0,
) -> EnginePlan:
    """Price every setting of ``framework`` at each batch and pick the fastest per batch (with ``resolution`` > 0,
    the cheapest of those within it of the fastest: fewest draft tokens, then fewest draft passes; section 50.3).

    Acceptance is ``acceptance`` (an :class:`roofline.speculation.trees.AcceptanceModel`) or
    ``mean_accepted`` tokens per round measured with ``measured_at`` (default: SGLang's
    own default setting), read as the i.i.d. model of
    :func:`roofline.speculation.engine_trees.fit_acceptance`. ``engine`` is the cost profile that runs
    the passes (eager, compiled, serving; None = the pure roofline); ``hardware`` may be a
    :class:`roofline.costing.pricing.Pricing` carrying it and the dtypes instead. ``settings``
    replaces the searched grid (:func:`engine_settings`).
    """
    pr: Pricing = pricing_of(hardware, engine=engine, dtype=dtype, weight_dtype=weight_dtype, tp=tp)
    name = _drafter_name(drafter)
    if (mean_accepted is None) == (acceptance is None):
        raise SpecroofError("give mean_accepted (tokens per round) or acceptance (an AcceptanceModel), not both")
    ref = None
    if acceptance is None:
        ref = measured_at if measured_at is not None else SGLANG_DEFAULT
        acceptance = fit_acceptance(float(mean_accepted or 0.0), ref)
    grid = tuple(settings) if settings is not None else tuple(engine_settings(framework))
    if not grid:
        raise SpecroofError("settings must hold at least one EngineSetting")
    bad = [s for s in grid if s.framework != framework]
    if bad:
        raise SpecroofError(f"setting {bad[0].label} is for {bad[0].framework}, not {framework}")
    bs = [int(b) for b in check_min("batches", list(batches), 1, integer=True)]
    trees = [engine_tree(s, acceptance) for s in grid]  # one tree per setting, whatever the batch
    version = 1 if name in ("eagle", "mtp") else int(name[-1])
    rows = []
    for b in bs:
        for i, (s, et) in enumerate(zip(grid, trees, strict=True)):
            d = EngineDraft(version, top_k=s.topk, name=name, pass_widths=s.draft_pass_widths)
            p = predict_speedup(
                hardware=pr, target=target, drafter=d, mean_accepted=et.expected_tokens, tree=et.tree,
                batch=b, context=context,
            )  # fmt: skip
            rows.append(
                {
                    "framework": framework,
                    "batch": b,
                    "context": int(context),
                    "setting": i,
                    "num_steps": s.num_steps,
                    "topk": s.topk,
                    "num_draft_tokens": s.num_draft_tokens,
                    "n_nodes": s.n_nodes,
                    "depth": et.tree.depth,
                    "expected_tokens": et.expected_tokens,
                    "t_draft_s": p.t_draft_s,
                    "t_verify_s": p.t_verify_s,
                    "t_round_host_s": p.t_round_host_s,
                    "t_round_s": p.t_round_s,
                    "t_base_s": p.t_base_s,
                    "tokens_per_s": p.tokens_per_s,
                    "speedup": p.speedup,
                    "label": s.label,
                }
            )
    table = pd.DataFrame(rows)
    # ties (equal speedups) go to the smaller verify pass, then fewer draft passes: less to run for the same gain;
    # within the answer's resolution every speedup is a tie (docs/cost-model.md, section 50.3)
    top = table.groupby("batch")["speedup"].transform("max")
    near = table["speedup"] >= top * (1.0 - max(0.0, float(resolution)))
    order = (
        table.assign(_near=near)
        .sort_values(
            ["batch", "_near", "num_draft_tokens", "num_steps", "speedup"]
            if resolution > 0
            else ["batch", "speedup", "num_draft_tokens", "num_steps"],
            ascending=[True, False, True, True, False] if resolution > 0 else [True, False, True, True],
        )
        .drop(columns="_near")
    )
    best = order.groupby("batch", sort=True).head(1).reset_index(drop=True)
    table["best"] = table.index.isin(order.groupby("batch", sort=True).head(1).index)
    chosen = tuple(grid[int(i)] for i in best["setting"])
    return EnginePlan(framework, table, best, chosen, acceptance, ref, grid)
