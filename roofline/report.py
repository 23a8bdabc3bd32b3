"""``specroof report``: the analytic story written to a folder (index.html, PNGs, CSVs, JSON).

Sections are functions that take the output folder and return a :class:`Section`
(title, HTML fragment, headline rows). The measured half (``measure``) adds its
own sections through the same type, so the page is assembled in one place.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from roofline.hardware import load_hardware
from roofline.jsonio import dumps
from roofline.model import ModelSpec
from roofline.roofline import crossover_tokens, pass_time, weights_only_crossover

#: The data-center GPUs the default report covers.
DEFAULT_GPUS = ("a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200-180gb", "mi300x-192gb")


@dataclass
class Section:
    """One part of the report: a title, an HTML body and the files it wrote."""

    title: str
    body_html: str
    files: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


class ReportWriter:
    """Collects figures and tables into ``out_dir`` and keeps the page self-contained."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)

    def figure(self, fig: Figure, name: str, alt: str) -> str:
        """Save ``fig`` as ``name``.png and return an <img> tag with it embedded."""
        import matplotlib.pyplot as plt

        path = self.out / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        data = base64.b64encode(path.read_bytes()).decode()
        return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"><figcaption>{html.escape(alt)}</figcaption></figure>'

    def table(self, df: pd.DataFrame, name: str, floatfmt: str = "{:.4g}") -> str:
        """Save ``df`` as ``name``.csv and return it as an HTML table."""
        df.to_csv(self.out / f"{name}.csv", index=False)
        return df.to_html(index=False, float_format=lambda v: floatfmt.format(v), classes="data", border=0)


def seed_example(w: ReportWriter) -> Section:
    """The seeds' worked example: 13B fp16 on A100 80GB SXM and H100 SXM."""
    m = ModelSpec.from_params(13e9, name="13B (seed)")
    a100 = load_hardware("a100-sxm-80gb")
    h100 = load_hardware("h100-sxm-80gb")
    h100_iso = h100.replace(
        name=f"{h100.name} (peak held at A100's)", peak_flop_per_s={**h100.peak_flop_per_s, "fp16": a100.peak("fp16")}
    )
    rows: list[dict[str, Any]] = []
    for hw in (a100, h100_iso, h100):
        st = pass_time(m, hw, 1, 1, 0, "fp16")
        rows.append(
            {
                "hardware": hw.name,
                "weight_GB": float(st.t_memory_s) * hw.bandwidth() / 1e9,
                "t_memory_ms": float(st.t_memory_s) * 1e3,
                "t_compute_ms": float(st.t_compute_s) * 1e3,
                "tokens_per_s": float(st.tokens_per_s),
                "intensity_flop_per_byte": float(st.intensity),
                "ridge_flop_per_byte": hw.ridge("fp16"),
                "K_weights_only": weights_only_crossover(m, hw, "fp16"),
                "K_exact": int(crossover_tokens(m, hw, 1, 0, "fp16")),
            }
        )
    df = pd.DataFrame(rows)
    speed = rows[0]["t_memory_ms"] / rows[1]["t_memory_ms"]
    body = w.table(df, "seed_example") + (
        f"<p>Bandwidth alone (A100 to H100, peak held): {speed:.2f}x faster decode; "
        f"K falls from {rows[0]['K_exact']} to {rows[1]['K_exact']}.</p>"
    )
    return Section("Seed worked example: 13B fp16", body, ["seed_example.csv"], {"seed_example": rows})


def rooflines(w: ReportWriter, gpus: Sequence[str]) -> Section:
    """Roofline charts, decode batch sweeps and crossover K for the chosen GPUs."""
    from roofline.plot import batch_sweep_chart, roofline_chart, tokens_sweep_chart

    body = w.figure(
        roofline_chart(list(gpus), ["bf16"]), "roofline", "Roofline of each GPU (bf16) with the seeds' points A, B, C"
    )
    body += w.figure(
        batch_sweep_chart("llama-3.1-8b", list(gpus), context=1024, dtype="bf16"),
        "batch_sweep",
        "Llama-3.1-8B decode: throughput and per-user latency against batch (context 1024)",
    )
    body += w.figure(
        tokens_sweep_chart("llama-3.1-8b", list(gpus), 1024, 1, 1024, "bf16"),
        "tokens_sweep",
        "Llama-3.1-8B verify-pass time against new tokens per pass (batch 1, context 1024): flat until K",
    )
    rows = []
    for g in gpus:
        hw = load_hardware(g)
        for b in (1, 8, 64):
            for ctx in (1024, 32768):
                rows.append(
                    {
                        "hardware": hw.id,
                        "batch": b,
                        "context": ctx,
                        "t_decode_ms": float(pass_time("llama-3.1-8b", hw, b, 1, ctx, "bf16").t_step_s) * 1e3,
                        "crossover_K": int(crossover_tokens("llama-3.1-8b", hw, b, ctx, "bf16")),
                    }
                )
    df = pd.DataFrame(rows)
    body += "<h3>Crossover K (Llama-3.1-8B, bf16): new tokens per sequence that stay memory bound</h3>"
    body += w.table(df, "crossover")
    return Section(
        "Rooflines of the data-center GPUs",
        body,
        ["roofline.png", "batch_sweep.png", "crossover.csv"],
        {"crossover": rows},
    )


#: The pairing the default report plans for, with assumed acceptance rates (replace with measured ones).
DEFAULT_PAIRING: dict[str, Any] = {
    "target": "llama-3.1-8b",
    "drafters": ("llama-3.2-1b", 8),  # a separate 1B draft, and early exit after layer 8
    "acceptance": {"draft llama-3.2-1b": 0.75, "early exit @8": 0.5},
}


def speculation(w: ReportWriter, gpus: Sequence[str], pairing: dict[str, Any] | None = None) -> Section:
    """Speedup map, speedup against batch, and the plan for the pairing on every GPU."""
    from roofline.planner import recommend, speculation_stops_paying
    from roofline.plot import optimal_gamma_vs_alpha, speedup_map, speedup_vs_batch
    from roofline.speculative import EarlyExit, draft_cost_ratio

    cfg = pairing or DEFAULT_PAIRING
    target = cfg["target"]
    draft_name, exit_layer = cfg["drafters"]
    drafters = [draft_name, EarlyExit(exit_layer)]
    acc = cfg["acceptance"]
    c = draft_cost_ratio(target, draft_name, gpus[0])
    body = f"<p>Target {target}; drafters: {draft_name} and early exit after layer {exit_layer}; "
    body += f"assumed acceptance {acc}. Draft cost ratio c = {c:.3f} on {gpus[0]} at batch 1.</p>"
    body += w.figure(
        speedup_map(c), "speedup_map", f"Idealised speedup over (alpha, gamma) at c = {c:.3f}, optimal gamma in red"
    )
    first_alpha = acc[f"draft {draft_name}"]
    body += w.figure(
        speedup_vs_batch(target, draft_name, list(gpus[:3]), first_alpha, context=128),
        "speedup_vs_batch",
        f"Total throughput against batch with the best gamma and without speculation (context 128, alpha {first_alpha})",
    )
    body += w.figure(
        optimal_gamma_vs_alpha(target, draft_name, list(gpus), batch=64, context=1024),
        "optimal_gamma",
        "Roofline-optimal gamma against alpha per GPU (batch 64, context 1024)",
    )
    rows = []
    for g in gpus:
        for batch in (1, 8, 64):
            for context in (1024, 32768):
                rec = recommend(g, target, drafters, acc, batch=batch, context=context)
                rows.append(
                    {
                        "hardware": g,
                        "batch": batch,
                        "context": context,
                        "strategy": rec.row["strategy"],
                        "gamma": int(rec.row["gamma"]),
                        "expected_tokens": rec.row["expected_tokens"],
                        "t_round_ms": rec.row["t_round_s"] * 1e3,
                        "tokens_per_s_per_user": rec.row["tokens_per_s_per_user"],
                        "speedup": rec.row["speedup"],
                        "fits_in_memory": bool(rec.row["fits_in_memory"]),
                    }
                )
    stops = {g: speculation_stops_paying(g, target, draft_name, first_alpha, context=128) for g in gpus}
    body += "<h3>Plan per GPU (best strategy and gamma)</h3>" + w.table(pd.DataFrame(rows), "plan")
    body += "<p>Batch at which speculation with the draft model stops paying (context 128): "
    body += ", ".join(f"{k}: {v if v is not None else 'never (within memory)'}" for k, v in stops.items()) + "</p>"
    return Section(
        "Speculative decoding: where it pays and which gamma",
        body,
        ["plan.csv"],
        {"plan": rows, "stops_paying_batch": stops},
    )


def trees_section(w: ReportWriter, gpus: Sequence[str], pairing: dict[str, Any] | None = None) -> Section:
    """The seeds' chain vs tree, expected tokens against budget, and the tree size each GPU should use."""
    from roofline.plot import tree_budget_chart, tree_size_per_gpu
    from roofline.trees import IIDAcceptance, Tree, best_tree_size

    seed_rows = []
    for p in (0.6, 0.8):
        m = IIDAcceptance(p)
        e_tree, e_chain = Tree.kary(2, 3).expected_tokens(m), Tree.chain(3).expected_tokens(m)
        seed_rows.append(
            {"p": p, "E_tree_14_nodes": e_tree, "E_chain_3_nodes": e_chain, "tree_over_chain": e_tree / e_chain}
        )
    body = "<p>Seed 001: full binary tree of depth 3 (14 nodes) against a 3-token chain, i.i.d. acceptance p.</p>"
    body += w.table(pd.DataFrame(seed_rows), "seed_trees")
    cfg = pairing or DEFAULT_PAIRING
    alpha = cfg["acceptance"][f"draft {cfg['drafters'][0]}"]
    model = IIDAcceptance(alpha)
    body += w.figure(
        tree_budget_chart(model, 64, 8),
        "tree_budget",
        f"Expected tokens against node budget (i.i.d. acceptance {alpha})",
    )
    budgets = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    choices = {
        g: best_tree_size(g, cfg["target"], cfg["drafters"][0], model, 1, 1024, budgets, max_depth=10) for g in gpus
    }
    body += w.figure(
        tree_size_per_gpu(choices),
        "tree_size_per_gpu",
        f"Tree size chosen per GPU for {cfg['target']} + {cfg['drafters'][0]} (batch 1, context 1024)",
    )
    rows = [
        {"hardware": g, **{k: c.best[k] for k in ("n_nodes", "depth", "expected_tokens", "t_round_s", "speedup")}}
        for g, c in choices.items()
    ]
    body += w.table(pd.DataFrame(rows), "tree_size")
    return Section(
        "Draft trees: chain vs tree, and the tree size per GPU",
        body,
        ["seed_trees.csv", "tree_size.csv"],
        {"seed_trees": seed_rows, "tree_size": rows},
    )


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table.data{border-collapse:collapse;font-size:13px;margin:1em 0}
table.data td,table.data th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}
figure{margin:1em 0}img{max-width:100%}figcaption{font-size:13px;color:#555}
h2{border-bottom:2px solid #444;padding-bottom:4px;margin-top:2em}
"""


_LOADED = """<script>
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  document.body.dataset.imagesTotal = imgs.length;
  document.body.dataset.imagesLoaded = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.tables = document.querySelectorAll("table").length;
});
</script>"""


def write_report(
    out_dir: str | Path = "specroof-report",
    gpus: Sequence[str] = DEFAULT_GPUS,
    extra: Sequence[Callable[[ReportWriter], Section]] = (),
    pairing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build every section, write ``index.html`` and ``summary.json``; return the summary.

    ``pairing`` overrides the default target, drafters and acceptance (see ``DEFAULT_PAIRING``).
    """
    w = ReportWriter(out_dir)
    sections = [seed_example(w), rooflines(w, gpus), speculation(w, gpus, pairing), trees_section(w, gpus, pairing)]
    sections += [make(w) for make in extra]
    toc = "".join(f"<li><a href='#s{i}'>{html.escape(s.title)}</a></li>" for i, s in enumerate(sections))
    parts = [f"<h2 id='s{i}'>{html.escape(s.title)}</h2>\n{s.body_html}" for i, s in enumerate(sections)]
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>specroof report</title>"
        f"<style>{_CSS}</style>{_LOADED}</head><body><h1>specroof report</h1><ol>{toc}</ol>\n"
        + "\n".join(parts)
        + "</body></html>"
    )
    (w.out / "index.html").write_text(page)
    summary: dict[str, Any] = {"gpus": list(gpus), "sections": [s.title for s in sections]}
    for s in sections:
        summary.update(s.summary)
    (w.out / "summary.json").write_text(dumps(summary))
    return summary
