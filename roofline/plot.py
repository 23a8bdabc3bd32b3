"""Plots: roofline charts, batch sweeps (and, in other modules' terms, speedup maps, trees).

Every function accepts an optional matplotlib ``Axes`` and returns the ``Figure``,
labels axes with units and uses log axes where a quantity spans decades.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

from roofline.core.errors import SpecroofError
from roofline.costing.hardware import Hardware, load_hardware
from roofline.costing.passtime import batch_sweep, pass_time
from roofline.passes.model import ModelSpec, get_model

if TYPE_CHECKING:
    from roofline.speculation.speculative import DrafterLike
    from roofline.speculation.trees import Tree
    from roofline.speculation.verification import OneTokenVerdict


def _axes(ax: Axes | None, size: tuple[float, float] = (7.0, 4.5)) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax  # type: ignore[return-value]
    fig, new_ax = plt.subplots(figsize=size, layout="constrained")
    return fig, new_ax


def _as_list(hardware: Any) -> list[Hardware]:
    items = hardware if isinstance(hardware, (list, tuple)) else [hardware]
    return [load_hardware(h) for h in items]


def roofline_chart(
    hardware: Hardware | str | Sequence[Hardware | str],
    dtypes: Sequence[str] | None = None,
    *,
    spec: ModelSpec | str | None = None,
    seed_points: bool = True,
    points: Sequence[dict[str, Any]] = (),
    ax: Axes | None = None,
) -> Figure:
    """Log-log roofline: attainable TFLOP/s against intensity (FLOP/byte), one roof per dtype.

    With ``seed_points`` the worked example's points are marked on the first profile's first
    dtype: A (decode at batch 1 of ``spec``, default the 13B abstract model), B (the
    ridge) and C (far right, 10x the ridge). ``points`` adds user points, each a dict
    with ``label``, ``intensity`` (FLOP/byte) and optionally ``flop_per_s``.
    """
    hws = _as_list(hardware)
    fig, ax = _axes(ax)
    x = np.logspace(-1, 4, 400)
    styles = ["-", "--", ":", "-."]
    for i, hw in enumerate(hws):
        kinds: list[str] = list(dtypes) if dtypes else [d for d in ("fp32", "bf16", "fp8") if d in hw.dtypes]
        kinds = kinds or list(hw.dtypes)
        color = f"C{i % 10}"
        for j, d in enumerate(kinds):
            if d not in hw.dtypes:
                continue
            ax.plot(x, hw.attainable(x, d) / 1e12, styles[j % 4], color=color, label=f"{hw.name} {d}")
            ax.plot([hw.ridge(d)], [hw.peak(d) / 1e12], "o", color=color, ms=3)
    if seed_points and hws:
        hw = hws[0]
        prefer: list[str] = list(dtypes) if dtypes else [dd for dd in ("fp16", "bf16") if dd in hw.dtypes]
        d = (prefer or list(hw.dtypes))[0]
        model = get_model(spec) if spec is not None else ModelSpec.from_params(13e9)
        a = float(pass_time(model, hw, 1, 1, 0, d).intensity)
        ridge = hw.ridge(d)
        for label, xi in (("A: decode, batch 1", a), ("B: ridge", ridge), ("C: far right", 10 * ridge)):
            yi = float(hw.attainable(xi, d)) / 1e12
            ax.plot([xi], [yi], "s", color="k", ms=6)
            ax.annotate(label, (xi, yi), textcoords="offset points", xytext=(6, -12), fontsize=8)
    for p in points:
        xi = float(p["intensity"])
        yi = float(p.get("flop_per_s", hws[0].attainable(xi, (dtypes or ["bf16"])[0]))) / 1e12
        ax.plot([xi], [yi], "^", ms=7)
        ax.annotate(str(p.get("label", "")), (xi, yi), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable (TFLOP/s)")
    ax.set_title("Roofline")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def batch_sweep_chart(
    spec: ModelSpec | str,
    hardware: Hardware | str | Sequence[Hardware | str],
    batches: Sequence[int] | np.ndarray | None = None,
    context: int = 1024,
    dtype: str = "fp16",
    *,
    data: pd.DataFrame | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Total throughput (tokens/s, left) and per-user latency (ms/token, right) against batch.

    Batches whose KV cache does not fit in memory are drawn faded.
    """
    hws = _as_list(hardware)
    fig, ax = _axes(ax)
    ax2 = ax.twinx()
    b = np.unique(np.round(np.logspace(0, 9, 40, base=2))).astype(int) if batches is None else np.asarray(batches)
    for i, hw in enumerate(hws):
        df = data if data is not None else batch_sweep(spec, hw, b, context=context, dtype=dtype)
        fits = df["fits_in_memory"].to_numpy()
        c = f"C{i % 10}"
        ax.plot(df["batch"], df["tokens_per_s_total"], "-", color=c, label=f"{hw.name}: throughput")
        ax2.plot(df["batch"], df["latency_per_token_s"] * 1e3, "--", color=c, label=f"{hw.name}: latency")
        if (~fits).any():
            ax.plot(df["batch"][~fits], df["tokens_per_s_total"][~fits], "x", color=c, alpha=0.5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("total throughput (tokens/s), solid")
    ax2.set_ylabel("per-user latency (ms/token), dashed")
    ax.set_title(f"{get_model(spec).name}, context {context}, {dtype} (x: KV does not fit)")
    ax.grid(True, which="both", alpha=0.25)
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(lines, labels, fontsize=7, loc="upper left")
    return fig


def tokens_sweep_chart(
    spec: ModelSpec | str,
    hardware: Hardware | str | Sequence[Hardware | str],
    max_tokens: int = 512,
    batch: int = 1,
    context: int = 0,
    dtype: str = "fp16",
    *,
    ax: Axes | None = None,
) -> Figure:
    """Pass time against new tokens per pass: flat while memory bound, rising past the crossover."""
    from roofline.costing.passtime import crossover_tokens

    hws = _as_list(hardware)
    fig, ax = _axes(ax)
    n = np.arange(1, max_tokens + 1)
    for i, hw in enumerate(hws):
        st = pass_time(spec, hw, batch, n, context, dtype)
        k = int(crossover_tokens(spec, hw, batch, context, dtype))
        c = f"C{i % 10}"
        ax.plot(n, st.t_step_s * 1e3, color=c, label=f"{hw.name} (K = {k})")
        if 1 <= k <= max_tokens:
            ax.axvline(k, color=c, ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("new tokens per pass")
    ax.set_ylabel("pass time (ms)")
    ax.set_title(f"{get_model(spec).name}: batch {batch}, context {context}, {dtype}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    return fig


def _needs(table: Any, columns: Sequence[str], what: str, source: str) -> None:
    """Refuse a table that is not the one this chart reads: one sentence naming the columns it needs and where such a
    table comes from, instead of pandas' KeyError from inside the figure."""
    if not isinstance(table, pd.DataFrame):
        raise SpecroofError(f"{what} needs a DataFrame from {source} (got {type(table).__name__})")
    missing = [c for c in columns if c not in table.columns]
    if missing or table.empty:
        why = f"it has no column {', '.join(missing)}" if missing else "it has no rows"
        raise SpecroofError(f"{what} needs a table from {source} with columns {', '.join(columns)}: {why}")


def speedup_map(
    c: float,
    alphas: np.ndarray | None = None,
    max_gamma: int = 16,
    *,
    ax: Axes | None = None,
) -> Figure:
    """Idealised speedup E / (gamma c + 1) over (alpha, gamma), with the optimal-gamma ridge drawn."""
    from roofline.speculation.speculative import ideal_speedup, optimal_gamma

    fig, ax = _axes(ax)
    a = np.linspace(0.0, 0.99, 100) if alphas is None else np.asarray(alphas)
    g = np.arange(0, max_gamma + 1)
    s = ideal_speedup(a[None, :], g[:, None], c)
    mesh = ax.pcolormesh(a, g, s, shading="nearest", cmap="viridis")
    if a.size >= 2 and g.size >= 3:  # a contour needs a 2 x 2 grid: one alpha, or gamma up to 1, has no line to draw
        ax.contour(a, g[1:], s[1:], levels=[1.0], colors="w", linewidths=1.0, linestyles="--")
    best, _ = optimal_gamma(a, c, max_gamma)
    ax.plot(a, best, color="r", lw=2, label="optimal gamma")
    fig.colorbar(mesh, ax=ax, label="speedup (x)")
    ax.set_xlabel("acceptance rate alpha")
    ax.set_ylabel("speculation length gamma (tokens)")
    ax.set_title(f"Idealised speedup, draft cost c = {c:g} (dashed: speedup 1)")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def speedup_vs_batch(
    target: ModelSpec | str,
    drafter: DrafterLike,
    hardware: Hardware | str | Sequence[Hardware | str],
    acceptance: Any,
    context: int = 1024,
    batches: Sequence[int] | np.ndarray | None = None,
    gammas: Sequence[int] | range = range(0, 17),
    dtype: str = "bf16",
    *,
    ax: Axes | None = None,
) -> Figure:
    """Total tokens/s against batch with the best gamma (solid) and without speculation (dashed), per GPU."""
    from roofline.deploy.planner import plan

    hws = _as_list(hardware)
    fig, ax = _axes(ax)
    b = 2 ** np.arange(0, 11) if batches is None else np.asarray(batches)
    drawn = []
    for i, hw in enumerate(hws):
        t = plan(hw, target, drafter, acceptance, batch=b, context=context, gammas=gammas, dtype=dtype)
        t = t[t["fits_in_memory"]]
        if t.empty:
            continue
        drawn.append(hw.name)
        base = t[t["gamma"] == 0].sort_values("batch")
        best = t.sort_values("speedup", ascending=False).groupby("batch", as_index=False).first().sort_values("batch")
        c = f"C{i % 10}"
        ax.plot(best["batch"], best["tokens_per_s_total"], "-o", ms=3, color=c, label=f"{hw.name}: best gamma")
        ax.plot(base["batch"], base["tokens_per_s_total"], "--", color=c, label=f"{hw.name}: no speculation")
        for _, r in best.iterrows():
            ax.annotate(
                str(int(r["gamma"])),
                (r["batch"], r["tokens_per_s_total"]),
                fontsize=7,
                xytext=(0, 4),
                textcoords="offset points",
            )
    if not drawn:  # nothing to draw on log axes: say so on the figure instead
        ax.text(0.5, 0.5, f"{get_model(target).name} fits on none of {', '.join(h.name for h in hws)} at any batch\n"
                "(one GPU each: shard it with specroof plan --tp N)", ha="center", va="center",
                transform=ax.transAxes)  # fmt: skip
        ax.set_axis_off()
        return fig
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (sequences, only those whose KV fits)")
    ax.set_ylabel("total throughput (tokens/s)")
    ax.set_title(f"{get_model(target).name}, context {context}: best gamma annotated")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7)
    return fig


def optimal_gamma_vs_alpha(
    target: ModelSpec | str,
    drafter: DrafterLike,
    hardware: Hardware | str | Sequence[Hardware | str],
    alphas: np.ndarray | None = None,
    batch: int = 1,
    context: int = 1024,
    max_gamma: int = 16,
    dtype: str = "bf16",
    *,
    ax: Axes | None = None,
) -> Figure:
    """The roofline-optimal gamma against alpha, one line per GPU (real draft and verify costs)."""
    from roofline.speculation.speculative import speedup

    hws = _as_list(hardware)
    fig, ax = _axes(ax)
    a = np.linspace(0.3, 0.98, 69) if alphas is None else np.asarray(alphas)
    g = np.arange(0, max_gamma + 1)
    for i, hw in enumerate(hws):
        r = speedup(hw, target, drafter, a[:, None], g[None, :], batch=batch, context=context, dtype=dtype)
        best = np.argmax(r.speedup, axis=1)
        ax.step(a, g[best], where="mid", color=f"C{i % 10}", label=hw.name)
    ax.set_xlabel("acceptance rate alpha")
    ax.set_ylabel("optimal gamma (tokens)")
    ax.set_title(f"{get_model(target).name}: batch {batch}, context {context}")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8)
    return fig


def tree_budget_chart(
    acceptance: Any,
    max_budget: int = 64,
    max_depth: int = 8,
    *,
    ax: Axes | None = None,
) -> Figure:
    """Expected tokens against node budget: chains, full k-ary trees and the optimal tree."""
    from roofline.speculation.trees import AcceptanceModel, SiblingRankAcceptance, Tree, optimal_tree

    model = acceptance if isinstance(acceptance, AcceptanceModel) else SiblingRankAcceptance(acceptance)
    fig, ax = _axes(ax)
    opt = optimal_tree(model, max_budget, max_depth)
    n = np.arange(0, max_budget + 1)
    ax.plot(n, opt.table[:, max_depth], "-", lw=2, label=f"optimal tree (depth <= {max_depth})")
    chains = [Tree.chain(k).expected_tokens(model) for k in range(0, min(max_budget, max_depth) + 1)]
    ax.plot(np.arange(len(chains)), chains, "o-", ms=3, label="chain")
    for b in (2, 3, 4):
        pts = [
            (t.n_nodes, t.expected_tokens(model))
            for d in range(1, max_depth + 1)
            if (t := Tree.kary(b, d)).n_nodes <= max_budget
        ]
        if pts:
            ax.plot(*zip(*pts, strict=True), "s--", ms=4, label=f"{b}-ary full tree")
    ax.set_xlabel("draft nodes verified per round (budget)")
    ax.set_ylabel("expected tokens per round (bonus included)")
    ax.set_title("Chain vs tree under the same acceptance")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8)
    return fig


def tree_size_per_gpu(
    choices: dict[str, Any],
    *,
    ax: Axes | None = None,
) -> Figure:
    """Bar chart of the chosen tree size (and its speedup) per GPU, from ``best_tree_size`` results."""
    fig, ax = _axes(ax)
    names = list(choices)
    sizes = [int(choices[k].best["n_nodes"]) for k in names]
    bars = ax.bar(names, sizes, color=[f"C{i % 10}" for i in range(len(names))])
    for bar, k in zip(bars, names, strict=True):
        c = choices[k].best
        ax.annotate(
            f"{c['speedup']:.2f}x, depth {int(c['depth'])}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("chosen tree size (draft nodes)")
    ax.set_title("Hardware-aware tree size: argmax expected tokens / round time")
    ax.tick_params(axis="x", labelrotation=20)
    return fig


def fit_overlay(
    validation: pd.DataFrame,
    *,
    ax: Axes | None = None,
) -> Figure:
    """Measured verify-pass time against new tokens, with the a-priori and fitted roofline predictions.

    ``validation`` is the table of ``measure.fit.validate`` (columns new_tokens,
    t_measured_s (or t_median_s), t_apriori_s, t_fitted_s, batch, context, dtype).
    """
    fig, ax = _axes(ax)
    groups = list(validation.groupby(["dtype", "batch", "context"]))
    for i, ((dt, b, c), g) in enumerate(groups):
        g = g.sort_values("new_tokens")
        col = f"C{i % 10}"
        lab = f"{dt}, batch {b}, context {c}"
        meas = g["t_measured_s"] if "t_measured_s" in g else g["t_median_s"]
        ax.plot(g["new_tokens"], meas * 1e3, "o", color=col, ms=4, label=f"measured: {lab}")
        ax.plot(g["new_tokens"], g["t_fitted_s"] * 1e3, "-", color=col, lw=1.5)
        ax.plot(g["new_tokens"], g["t_apriori_s"] * 1e3, ":", color=col, lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("new tokens per sequence in the verify pass")
    ax.set_ylabel("pass time (ms)")
    ax.set_title("Verify pass: measured (dots), fitted roofline (solid), a-priori roofline (dotted)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7)
    return fig


def trees_vs_batch_chart(table: pd.DataFrame) -> Figure:
    """One panel per GPU: best draft-tree and best chain speedup against batch (from ``trees.trees_vs_batch``).

    Each tree point is labelled with its size; the shaded span is where the tree no longer
    buys 2% over the chain.
    """
    import matplotlib.pyplot as plt

    _needs(table, ("hardware", "batch", "tree_speedup", "chain_speedup"), "trees_vs_batch_chart", "trees_vs_batch")
    gpus = list(dict.fromkeys(table["hardware"]))
    cols = min(3, len(gpus))
    rows = (len(gpus) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, sharey=True)
    for ax, gpu in zip(axes.ravel(), gpus, strict=False):
        for i, (c, g) in enumerate(table[table["hardware"] == gpu].groupby("context")):
            g = g.sort_values("batch")
            ax.plot(g["batch"], g["tree_speedup"], "-o", color=f"C{i}", ms=3, label=f"best tree, context {c}")
            ax.plot(g["batch"], g["chain_speedup"], "--", color=f"C{i}", label=f"best chain, context {c}")
            for _, r in g.iterrows():
                ax.annotate(
                    str(int(r["tree_nodes"])),
                    (r["batch"], r["tree_speedup"]),
                    fontsize=6,
                    xytext=(2, 3),
                    textcoords="offset points",
                )
        ax.axhline(1.0, color="k", lw=0.6)
        ax.set_xscale("log", base=2)
        ax.set_title(gpu, fontsize=9)
        ax.set_xlabel("batch")
        ax.grid(True, alpha=0.25)
    for ax in axes.ravel()[len(gpus) :]:
        ax.axis("off")
    axes[0, 0].set_ylabel("speedup over plain decoding")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Trees against chains as the batch grows (labels: tree size in draft nodes)", fontsize=10)
    fig.tight_layout()
    return fig


def gamma_policies_chart(results: dict[str, pd.DataFrame], *, ax: Axes | None = None) -> Figure:
    """Grouped bars: each policy's speedup against the best static gamma, one group per scenario.

    ``results`` maps a scenario label (e.g. "regimes last 50 rounds") to the table of
    ``roofline.speculation.gamma_policies.compare_policies``; the closed-form static row is the reference.
    """
    fig, ax = _axes(ax)
    labels = list(results)
    policies = [p for p in results[labels[0]]["policy"] if "closed form" not in p]
    width = 0.8 / max(1, len(policies))
    x = np.arange(len(labels))
    for i, pol in enumerate(policies):
        vals = [float(results[lab].set_index("policy")["speedup"].get(pol, np.nan)) for lab in labels]
        name = "best static gamma" if pol.startswith("best static") else pol
        bars = ax.bar(x + i * width, vals, width, label=name, color=f"C{i}")
        for bar, lab in zip(bars, labels, strict=True):
            rel = float(results[lab].set_index("policy")["vs_best_static"].get(pol, np.nan))
            if not pol.startswith("best static") and np.isfinite(rel):
                ax.annotate(
                    f"{rel:+.0%}",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
    ax.set_xticks(x + width * (len(policies) - 1) / 2, labels, fontsize=8)
    ax.set_ylabel("speedup over plain decoding")
    ax.set_title("Dynamic gamma against the best static gamma (labels: relative to it)")
    ax.legend(fontsize=8)
    return fig


def published_scatter(table: pd.DataFrame) -> Figure:
    """Predicted against published, log-log with y = x: roofline-only (hollow) and engine-aware (filled), per kind."""
    _needs(table, ("engine_aware", "roofline", "published", "metric", "use"), "published_scatter",
           "roofline.evidence.published.validation_table")  # fmt: skip
    t = table.dropna(subset=["engine_aware"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    for ax, metric, unit in zip(
        axes, ("tokens_per_s", "speedup"), ("decode tokens/s", "speculative speedup"), strict=True
    ):
        m = t[t["metric"] == metric]
        if m.empty:
            ax.set_visible(False)
            continue
        lo = 0.8 * min(m["published"].min(), m["engine_aware"].min(), m["roofline"].min())
        hi = 1.25 * max(m["published"].max(), m["engine_aware"].max(), m["roofline"].max())
        ax.plot([lo, hi], [lo, hi], color="0.5", lw=1, label="y = x")
        for j, (kind, grp) in enumerate(m.groupby("kind")):
            color = f"C{j}"
            held = grp["use"] == "validation"
            ax.scatter(grp["published"], grp["roofline"], facecolors="none", edgecolors=color, s=36,
                       label=f"{kind}: roofline only")  # fmt: skip
            ax.scatter(grp.loc[~held, "published"], grp.loc[~held, "engine_aware"], color=color, s=36,
                       label=f"{kind}: engine-aware (calibration)")  # fmt: skip
            if held.any():
                ax.scatter(grp.loc[held, "published"], grp.loc[held, "engine_aware"], color=color, marker="^", s=44,
                           label=f"{kind}: engine-aware (held out)")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not 2 x 10^0
            if metric == "speedup":  # less than a decade: name a few speedups
                axis.set_major_locator(FixedLocator([1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0]))
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"published {unit}")
        ax.set_ylabel(f"predicted {unit}")
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("Predictions against published measurements")
    fig.tight_layout()
    return fig


def gamma_by_engine_chart(table: pd.DataFrame, title: str = "", ax: Axes | None = None) -> Figure:
    """Speedup against gamma, one line per engine (a :func:`roofline.speculation.speculative.speedup_by_engine` table), best marked."""
    _needs(table, ("engine", "gamma", "speedup"), "gamma_by_engine_chart", "speedup_by_engine")
    fig, ax = _axes(ax, (7.5, 4.5))
    for j, (engine, grp) in enumerate(table.groupby("engine", sort=False)):
        grp = grp.sort_values("gamma")
        best = grp.iloc[int(np.argmax(grp["speedup"].to_numpy()))]
        style = {"roofline": "--", "serving": ":"}.get(str(engine), "-")
        ax.plot(grp["gamma"], grp["speedup"], style, marker="o", ms=3, color=f"C{j}",
                label=f"{engine}: best gamma {int(best['gamma'])} ({best['speedup']:.2f}x)")  # fmt: skip
        ax.plot([best["gamma"]], [best["speedup"]], marker="*", ms=14, color=f"C{j}")
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_xlabel("gamma (draft tokens per round)")
    ax.set_ylabel("speedup over plain decoding")
    ax.set_title(title or "Speedup against gamma under each engine")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return fig


def tree_chart(tree: Tree, ax: Axes | None = None, labels: Sequence[str] | None = None, values: Any = None) -> Figure:
    """Draw a draft tree, prefix at the top; ``values`` (one per node, in [0, 1]) colour the nodes."""
    fig, ax = _axes(ax, (min(12.0, 2 + 0.45 * max(tree.n_nodes, 1)), 1.5 + 0.9 * tree.depth))
    x = np.zeros(tree.n_nodes)
    leaves = 0.0

    def place(node: int) -> float:
        nonlocal leaves
        kids = tree.children(node)
        if kids.size == 0:
            pos = leaves
            leaves += 1.0
        else:
            pos = float(np.mean([place(int(k)) for k in kids]))
        if node >= 0:
            x[node] = pos
        return pos

    root_x = place(-1)
    ax.plot([root_x], [0], "s", color="k", ms=9)
    ax.annotate("prefix", (root_x, 0), xytext=(8, 0), textcoords="offset points", va="center", fontsize=8)
    for i, par in enumerate(tree.parents.tolist()):
        px, py = (root_x, 0) if par < 0 else (x[par], tree.depths[par])
        ax.plot([px, x[i]], [-py, -tree.depths[i]], "-", color="0.6", lw=1)
    sc = ax.scatter(x, -tree.depths, c=values, cmap="viridis", s=120, zorder=3, vmin=0, vmax=1)
    if values is not None:
        fig.colorbar(sc, ax=ax, label="P(on accepted path)")
    names = labels if labels is not None else [str(i) for i in range(tree.n_nodes)]
    for i in range(tree.n_nodes):
        ax.annotate(names[i], (x[i], -tree.depths[i]), ha="center", va="center", fontsize=7,
                    color="w" if values is not None else "k")  # fmt: skip
    ax.set_yticks(-np.arange(tree.depth + 1), ["prefix", *[f"depth {d}" for d in range(1, tree.depth + 1)]])
    ax.set_xticks([])
    ax.set_title(f"draft tree: {tree.n_nodes} nodes, depth {tree.depth}")
    return fig


def verdict_chart(v: OneTokenVerdict, ax: Axes | None = None) -> Figure:
    """Bars of p, q and the residual per token for one accept-or-correct verdict."""
    fig, ax = _axes(ax, (6.0, 3.5))
    xs = np.arange(len(v.vocab))
    ax.bar(xs - 0.25, v.p, 0.25, label="target p")
    ax.bar(xs, v.q, 0.25, label="draft q")
    ax.bar(xs + 0.25, v.residual, 0.25, label="residual norm(max(p - q, 0))")
    ax.set_xticks(xs, v.vocab)
    ax.set_ylabel("probability")
    ax.set_title(f"draft proposed {v.vocab[v.token]!r}: accept with p/q = {v.accept_probability:.2f}")
    ax.legend(fontsize=8)
    return fig


def serving_curves(summary: pd.DataFrame, *, title: str = "") -> Figure:
    """Latency against throughput per speculation policy, one point per request rate (a serving sweep's summary).

    Left: TPOT p50 and p90 against output tokens/s; right: TTFT p50 against the request rate.
    Each point is labelled with its rate (req/s).
    """
    _needs(summary, ("policy", "rate_req_s", "throughput_tok_s", "tpot_p50_s", "tpot_p90_s", "ttft_p50_s"),
           "serving_curves", "a serving sweep's summary (roofline.serving.simulate(...).summary)")  # fmt: skip
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11.0, 4.3), layout="constrained")
    for i, (policy, g) in enumerate(summary.groupby("policy", sort=False)):
        g = g.sort_values("rate_req_s")
        color = f"C{i}"
        ax.plot(g["throughput_tok_s"], g["tpot_p50_s"] * 1e3, "o-", color=color, label=f"{policy} p50")
        ax.plot(g["throughput_tok_s"], g["tpot_p90_s"] * 1e3, ":", color=color, label=f"{policy} p90")
        for x, y, r in zip(g["throughput_tok_s"], g["tpot_p50_s"] * 1e3, g["rate_req_s"], strict=True):
            ax.annotate(f"{r:g}", (x, y), xytext=(3, 3), textcoords="offset points", fontsize=7, color=color)
        ax2.plot(g["rate_req_s"], g["ttft_p50_s"] * 1e3, "o-", color=color, label=policy)
    ax.set_xlabel("output tokens/s (all requests)")
    ax.set_ylabel("TPOT (ms per output token)")
    ax.set_title("latency vs throughput (labels: req/s)")
    ax.legend(fontsize=7)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("request rate (req/s)")
    ax2.set_ylabel("TTFT p50 (ms)")
    ax2.set_title("time to first token")
    ax2.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return fig
