"""Tree size for a GPU: the draft tree that maximises tokens per second on one hardware, batch and context.

For each node budget n and depth limit D the optimal tree (:func:`roofline.speculation.trees.optimal_tree`)
is priced with the one round formula (:func:`roofline.speculation.drafters.round_time`): the drafter
drafts it level by level and the target verifies it in one tree-masked pass. The size
chosen is the argmax of E(tree) x t_base / t_round (docs/cost-model.md, section 5).
:func:`trees_vs_batch` sets the best tree against the best chain as the batch grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import check_min
from roofline.costing.engine import Engine
from roofline.costing.hardware import Hardware
from roofline.costing.passtime import pass_seconds
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing, pricing_of
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.drafters import DrafterLike, as_drafter, round_time
from roofline.speculation.drafters.base import deepest
from roofline.speculation.trees import AcceptanceModel, OptimalTree, SiblingRankAcceptance, Tree, optimal_tree

#: a tree "pays" over the best chain while it buys at least this much more speed
TREE_GAIN = 0.02


@dataclass(frozen=True)
class TreeSizeChoice:
    """Every (budget, depth) priced on the hardware, and the best one."""

    table: pd.DataFrame
    best: dict[str, Any]
    tree: Tree

    def to_frame(self) -> pd.DataFrame:
        """The priced (budget, depth) table, best first."""
        return self.table


_TREES: dict[int, tuple[OptimalTree, dict[tuple[int, int], Tree]]] = {}


def _tree_for(opt: OptimalTree, n: int, depth: int) -> Tree:
    """``opt.tree_for(n, depth)``, built once per table: a sweep over GPUs and batches prices the same trees."""
    hit = _TREES.get(id(opt))
    if hit is None or hit[0] is not opt:  # the entry holds the table, so its id is not reused while cached
        if len(_TREES) >= 8:
            _TREES.clear()
        hit = _TREES[id(opt)] = (opt, {})
    trees = hit[1]
    if (n, depth) not in trees:
        trees[n, depth] = opt.tree_for(n, depth)
    return trees[n, depth]


def best_tree_size(
    hardware: Pricing | Hardware | str,
    target: ModelSpec | str,
    drafter: DrafterLike,
    acceptance: AcceptanceModel | Sequence[float],
    batch: int = 1,
    context: int = DEFAULT_CONTEXT,
    budgets: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
    max_depth: int = 10,
    dtype: str | None = None,
    *,
    verify_latency: dict[int, float] | None = None,
    opt: OptimalTree | None = None,
    engine: Engine | str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    tp: int | None = None,
) -> TreeSizeChoice:
    """Choose the tree size that maximises expected tokens / round time on ``hardware``.

    ``hardware`` is a :class:`roofline.costing.pricing.Pricing` or a profile priced with ``dtype``,
    ``engine``, ``weight_dtype``, ``kv_dtype`` and ``tp``. For each budget n and depth d the
    optimal tree is priced: the drafter runs one pass per level over that level's nodes
    (a draft model or early exit), or one pass in all (heads, block drafters), and the
    target verifies the n nodes in one tree-masked pass (each node attends to its
    ancestors), from the cost model or from ``verify_latency`` (a measured table: nodes
    -> seconds). An engine adds its host time per round. ``opt`` reuses one optimal-tree
    table across GPUs and batches.
    """
    pr = pricing_of(hardware, dtype=dtype, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
    spec = get_model(target)
    d = as_drafter(drafter, spec)
    budgets = [int(b) for b in check_min("budgets", list(budgets), 1, integer=True)]
    max_depth = int(check_min("max_depth", max_depth, 1, integer=True))  # 8.0 or np.int64(8) is a depth; range() below
    max_depth = deepest(d, max_depth)  # no tree deeper than the drafter drafts (Medusa's, Hydra's heads)
    if opt is None or opt.table.shape[0] <= max(budgets) or opt.table.shape[1] <= max_depth:
        opt = optimal_tree(acceptance, max(budgets), max_depth)
    t1 = float(pass_seconds(spec, pr, batch, 1, context))
    rows = []
    for n in budgets:
        row = opt.table[n, : max_depth + 1]
        for depth in range(1, min(max_depth, n) + 1):  # a tree of n nodes is at most n deep
            e = opt.table[n, depth]
            if np.isnan(e):
                continue
            if depth > 1 and np.array_equal(row[depth - 1 :], np.full(len(row) - depth + 1, row[depth - 1])):
                break  # no deeper limit adds a token: the shallower tree, already priced, is as good and no slower
            tree = _tree_for(opt, n, depth)
            if tree.depth < depth:  # the same tree as a shallower limit: already priced
                continue
            rt = round_time(pr, spec, d, tree, batch, context, verify_latency=verify_latency)
            t_round = float(rt.t_round_s)
            rows.append(
                {
                    "n_nodes": tree.n_nodes,
                    "budget": n,
                    "depth": tree.depth,
                    "expected_tokens": float(e),
                    "t_draft_s": float(rt.t_draft_s),
                    "t_verify_s": float(rt.t_verify_s),
                    "t_round_s": t_round,
                    "tokens_per_s_per_user": e / t_round,
                    "speedup": e * t1 / t_round,
                }
            )
    table = pd.DataFrame(rows).drop_duplicates(subset=["n_nodes", "depth"]).sort_values("speedup", ascending=False)
    table = table.reset_index(drop=True)
    best = {str(k): v for k, v in table.iloc[0].items()}
    return TreeSizeChoice(table, best, opt.tree_for(int(best["budget"]), int(best["depth"])))


def trees_vs_batch(
    hardware: Pricing | Hardware | str | Sequence[Pricing | Hardware | str],
    target: ModelSpec | str,
    drafter: DrafterLike,
    acceptance: AcceptanceModel | Sequence[float],
    batches: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
    contexts: Sequence[int] = (DEFAULT_CONTEXT,),
    budgets: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
    max_depth: int = 10,
    dtype: str | None = None,
    max_gamma: int = 16,
    *,
    engine: Engine | str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    tp: int | None = None,
) -> pd.DataFrame:
    """Best tree and best chain per (GPU, batch, context): where trees, then chains, stop paying.

    A row per (hardware, batch, context) with the best tree (nodes, depth, speedup), the
    best chain (gamma, speedup; a chain is the tree whose nodes are all rank-0 children,
    priced the same way) and ``tree_gain`` = tree speedup / chain speedup - 1. As the
    batch grows the verify pass meets the ridge: wide trees stop paying first (their
    extra nodes cost compute), then chains (speedup <= 1). ``hardware`` may be a list
    (of Pricings or profiles priced with the keyword options).
    """
    hws: list[Pricing | Hardware | str] = list(hardware) if isinstance(hardware, (list, tuple)) else [hardware]  # type: ignore[list-item]
    spec = get_model(target)
    d = as_drafter(drafter, spec)
    model = acceptance if isinstance(acceptance, AcceptanceModel) else SiblingRankAcceptance(acceptance)
    chains = [(g, Tree.chain(g)) for g in range(1, deepest(d, max_gamma) + 1)]  # no chain longer than d drafts
    chain_tokens = [tree.expected_tokens(model) for _, tree in chains]
    budgets = [int(b) for b in check_min("budgets", list(budgets), 1, integer=True)]
    opt = optimal_tree(model, max(budgets), max_depth)  # one table for every GPU, batch and context
    rows = []
    for h in hws:
        pr = pricing_of(h, dtype=dtype, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
        for b in [int(x) for x in check_min("batches", list(batches), 1, integer=True)]:
            for c in [int(x) for x in check_min("contexts", list(contexts), 0, integer=True)]:
                best = best_tree_size(pr, spec, d, model, b, c, budgets, max_depth, opt=opt).best
                t1 = float(pass_seconds(spec, pr, b, 1, c))
                chain_speed = [
                    e * t1 / float(round_time(pr, spec, d, tree, b, c).t_round_s)
                    for e, (_, tree) in zip(chain_tokens, chains, strict=True)
                ]
                g_best = int(np.argmax(chain_speed))
                rows.append(
                    {
                        "hardware": pr.hardware.id,
                        "batch": b,
                        "context": c,
                        "tree_nodes": int(best["n_nodes"]),
                        "tree_depth": int(best["depth"]),
                        "tree_speedup": float(best["speedup"]),
                        "chain_gamma": chains[g_best][0],
                        "chain_speedup": float(chain_speed[g_best]),
                    }
                )
    df = pd.DataFrame(rows)
    df["tree_gain"] = df["tree_speedup"] / df["chain_speedup"] - 1.0
    return df


def stops_paying(df: pd.DataFrame) -> pd.DataFrame:
    """Per (hardware, context) of a :func:`trees_vs_batch` table: the first batch where trees stop buying
    ``TREE_GAIN`` over the best chain, and the first where the best chain stops beating plain decoding
    (NaN: not within the batches swept)."""
    out = []
    for (hw, c), g in df.sort_values("batch").groupby(["hardware", "context"], sort=False):
        tree_stop = g.loc[g["tree_gain"] < TREE_GAIN, "batch"]
        chain_stop = g.loc[g["chain_speedup"] <= 1.0, "batch"]
        out.append(
            {
                "hardware": hw,
                "context": c,
                "trees_stop_paying_batch": float(tree_stop.iloc[0]) if len(tree_stop) else np.nan,
                "chains_stop_paying_batch": float(chain_stop.iloc[0]) if len(chain_stop) else np.nan,
            }
        )
    return pd.DataFrame(out)
