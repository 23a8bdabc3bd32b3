"""``specroof report``: the analytic story written to a folder (index.html, PNGs, CSVs, JSON).

Sections are functions that take the output folder and return a :class:`Section`
(title, HTML fragment, headline rows). The measured half (``measure``) adds its
own sections through the same type, so the page is assembled in one place.

The page is rewritten after every section, so whatever finished is on disk even if
a later section fails or the run is interrupted; a section that raises shows its
error on the page and the others go on.
"""

from __future__ import annotations

import base64
import html
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from roofline.core import interrupts
from roofline.core.errors import DoesNotFit, SpecroofError
from roofline.core.jsonio import dumps
from roofline.costing.hardware import load_hardware
from roofline.costing.passtime import crossover_tokens, pass_time, weights_only_crossover
from roofline.passes.model import ModelSpec, get_model

# the draft-tree sizes and depth the page searches: the answer, the tree section and `specroof tree --hardware` share
# one search (they used to search different budgets and could name different best trees for one question)
from specroof.commands.common import TREE_BUDGETS, TREE_DEPTH, band_for

# the engine the page prices its answers under unless told otherwise, the same as every recommending command's
from specroof.shell import DEFAULT_ENGINE, DEFAULT_ENGINE_WHY, number, percent

esc = html.escape

#: The data-center GPUs the default report covers.
DEFAULT_GPUS = ("a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200-180gb", "mi300x-192gb")


@dataclass
class Section:
    """One part of the report: a title, an HTML body and the files it wrote."""

    title: str
    body_html: str
    files: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    #: the error that stopped this section (its body then says what happened)
    error: str | None = None


#: a section maker: writes its files through the writer and returns its Section
SectionMaker = Callable[["ReportWriter"], Section]


#: seconds the measured section of ``specroof report`` may take by default (``--budget`` changes it; ``--quick``
#: keeps its 12 s). ``report --skip-measure`` took 6.6-10.5 s on the project's 2-core CPU at a load average of
#: about 5 (BENCHMARKS.md, "report profile"). The budget counts every step of the measured section (torch's import,
#: the probe, the microbenchmarks, the fits, its figure) from the section's start, so the page takes its analytic
#: part plus about this; on a slow or loaded machine the fixed steps and the first repetition (which always runs)
#: can overrun it, and the page says so.
MEASURED_BUDGET_S = 60.0

#: resolution of the page's figures
FIGURE_DPI = 110


def save_png(fig: Figure, path: Path, dpi: float) -> None:
    """Write ``fig`` as a PNG from one draw: the pixels ``fig.savefig(path, dpi=dpi)`` writes.

    ``savefig`` on a figure with a layout engine draws it twice (once without rendering, to
    place the axes; once to render); one Agg draw runs the layout first and renders with it,
    so the image is the same, pixel for pixel, for about a fifth less time (the batch-sweep
    chart: 0.61 s against 0.47 s on the 2-core CPU the benchmarks ran on).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.image import imsave

    if not isinstance(fig.canvas, FigureCanvasAgg):
        fig.savefig(path, dpi=dpi)
        return
    fig.set_dpi(dpi)
    fig.canvas.draw()
    imsave(path, np.asarray(fig.canvas.buffer_rgba()), format="png", dpi=dpi)  # RGBA bytes: written as they are


class ReportWriter:
    """Collects figures and tables into ``out_dir`` and keeps the page self-contained."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        #: perf_counter() when the section being made started (before its maker imported anything): a section
        #: with a time budget counts from here, so its imports and fixed steps are inside the budget
        self.section_started = time.perf_counter()

    def figure(self, fig: Figure, name: str, alt: str) -> str:
        """Save ``fig`` as ``name``.png and return an <img> tag with it embedded."""
        import matplotlib.pyplot as plt

        path = self.out / f"{name}.png"
        save_png(fig, path, FIGURE_DPI)
        plt.close(fig)
        data = base64.b64encode(path.read_bytes()).decode()
        return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"><figcaption>{html.escape(alt)}</figcaption></figure>'

    def table(self, df: pd.DataFrame, name: str, floatfmt: str = "{:.4g}", csv: pd.DataFrame | None = None) -> str:
        """Save ``df`` (or ``csv``, its numbers when ``df`` holds them as words) as ``name``.csv and return ``df`` as an
        HTML table (floats formatted, missing values blank)."""
        (df if csv is None else csv).to_csv(self.out / f"{name}.csv", index=False)

        def cell(v: Any) -> Any:
            if isinstance(v, (float, np.floating)):
                return "" if not np.isfinite(v) else floatfmt.format(v)
            return "" if v is None else v

        shown = df.map(cell)
        shown.columns = [column_words(str(c)) for c in df.columns]
        return '<div class="scroll">' + shown.to_html(index=False, classes="data", border=0) + "</div>"


#: column names of the CSVs (machine names, unit-suffixed) and the words the page shows for them
COLUMN_WORDS = {
    "hardware": "GPU",
    "best_strategy": "best strategy",
    "strategy": "strategy",
    "gamma": "gamma (draft tokens per round)",
    "chain_speedup": "chain speedup (x)",
    "tree_nodes": "best tree: nodes",
    "tree_depth": "best tree: depth",
    "tree_speedup": "tree speedup (x)",
    "tree_deployable": "tree deployable?",
    "break_even_alpha": "draft model pays from rate",
    "speedup": "speedup (x)",
    "n_nodes": "tree nodes",
    "depth": "tree depth",
    "expected_tokens": "tokens per round",
    "K_weights_only": "K, weights only (tokens)",
    "K_exact": "K, every byte (tokens)",
    "p": "acceptance p",
    "E_tree_14_nodes": "tokens per round: 14-node tree",
    "E_chain_3_nodes": "tokens per round: 3-token chain",
    "tree_over_chain": "tree / chain",
    "deploy_vllm": "vLLM: --speculative-config",
    "deploy_sglang": "SGLang: launch flags",
}

#: unit suffixes of column names, as the page writes them
_UNITS = (
    ("_tokens_per_s", "tokens/s"),
    ("_flop_per_byte", "FLOP/byte"),
    ("_per_s", "/s"),
    ("_ms", "ms"),
    ("_us", "us"),
    ("_s", "s"),
    ("_GB", "GB"),
    ("_pct", "%"),
)


def column_words(name: str) -> str:
    """A column's header in words with its unit: ``t_round_ms`` -> ``t round (ms)``; known names from COLUMN_WORDS."""
    if name in COLUMN_WORDS:
        return COLUMN_WORDS[name]
    for suffix, unit in _UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return f"{name[: -len(suffix)].replace('_', ' ')} ({unit})"
    return name.replace("_", " ")


def acceptance_pairing(
    draft: str, exit_layer: int, model: Any = None, early_exit: Any = None, target: Any = "llama-3.1-8b"
) -> dict[str, Any]:
    """The page's acceptance per drafter, and the sentence naming where each came from.

    ``model`` / ``early_exit`` are (rate, sentence) pairs given by the user. Without one, the draft model takes its
    published figure (:func:`specroof.commands.common.published_acceptance`, as ``plan`` does); the early exit has
    none (LayerSkip's figures are for models trained to exit early), so it is compared only when given one.
    """
    from roofline.speculation.acceptance_defaults import NoMatchedDefault
    from specroof.commands.common import published_acceptance

    stand_in = False
    if model is None:  # the target's matched pair (docs/cost-model.md, 50.2), else a stand-in that says it is one
        try:
            acc, note = published_acceptance("model", target)
            model = (float(acc.alpha()), f"none given: {note}")
        except NoMatchedDefault as e:
            acc, note = published_acceptance("model")
            why = str(e).partition(": give")[0]
            model = (
                float(acc.for_plan()),
                f"none given, and {why}: priced at a stand-in from an unmatched pair, {note}; the answer's "
                "break-even column says from which rate speculation pays on each GPU",
            )
            stand_in = True
    keys = (f"draft {draft}", f"early exit @{exit_layer}")
    out: dict[str, Any] = {"acceptance": {keys[0]: float(model[0])}, "acceptance_notes": {keys[0]: model[1]},
                           "stand_in": stand_in}  # fmt: skip
    if early_exit is not None:
        out["acceptance"][keys[1]] = float(early_exit[0])
        out["acceptance_notes"][keys[1]] = early_exit[1]
    else:
        out["acceptance_notes"][keys[1]] = (
            "not compared: no published acceptance figure for an early exit of this model (--acceptance "
            "early-exit=VALUE compares it)"
        )
    return out


#: The pairing the default report plans for: Llama-3.1-8B with a separate 1B draft (its published acceptance) priced
#: under the default engine; the early exit after layer 8 joins the comparison when its acceptance is given
DEFAULT_PAIRING: dict[str, Any] = {
    "target": "llama-3.1-8b",
    "drafters": ("llama-3.2-1b", 8),
    **acceptance_pairing("llama-3.2-1b", 8),
    "engine": DEFAULT_ENGINE,
}

_TREE_CACHE: dict[tuple[Any, ...], Any] = {}

#: the page's tree columns are for a separate draft model, which vLLM and SGLang (the flags the page prints) draft as
#: a chain: the tree is what a tree-verifying runtime would gain, never the headline (docs/cost-model.md, 50.3)
TREE_NOT_DEPLOYABLE = "not deployable in vLLM or SGLang (a draft model drafts a chain there)"


def tree_choice(gpu: Any, target: str, draft: str, alpha: float, context: int, engine: str | None) -> Any:
    """The draft-tree size the page recommends on ``gpu`` (i.i.d. acceptance ``alpha``, batch 1): searched once."""
    from roofline.deploy.tree_sizing import best_tree_size
    from roofline.speculation.trees import IIDAcceptance, optimal_tree

    key = (str(gpu), str(target), str(draft), float(alpha), int(context), engine)
    if key not in _TREE_CACHE or not isinstance(gpu, str):
        opt_key = ("optimal", float(alpha))
        if opt_key not in _TREE_CACHE:
            _TREE_CACHE[opt_key] = optimal_tree(IIDAcceptance(alpha), max(TREE_BUDGETS), TREE_DEPTH)
        _TREE_CACHE[key] = best_tree_size(
            gpu,
            target,
            draft,
            IIDAcceptance(alpha),
            1,
            context,
            TREE_BUDGETS,
            max_depth=TREE_DEPTH,
            opt=_TREE_CACHE[opt_key],
            engine=engine,
        )  # fmt: skip
    return _TREE_CACHE[key]


def engine_words(engine: str | None) -> str:
    """How the page says what its numbers are priced under."""
    if not engine:
        return "the datasheet roofline: no engine's costs, an upper bound (see the engines section)"
    why = f", {DEFAULT_ENGINE_WHY}" if engine == DEFAULT_ENGINE else ""
    return (
        f"the roofline model with the <b>{esc(str(engine))}</b> engine's costs{why}; <code>--engine</code> changes it"
    )


def band_pct(band: dict[str, Any] | None) -> float:
    """A band's width in percent for a table cell (a kind band's coverage edge, else the per-kind median); NaN where
    there is none (the sentence beside the table says why)."""
    if band is None:
        return float("nan")
    return float(band.get("band_pct", band.get("median_abs_pct", float("nan"))))


def band_words(notes: dict[str, list[str]]) -> str:
    """The error bands a section's answers carry, one sentence each, with the answers it covers (HTML)."""
    if len(notes) == 1:
        return f"<p><b>Error band</b>: {esc(next(iter(notes)))}.</p>"
    items = "".join(f"<li>{esc(', '.join(where))}: {esc(note)}</li>" for note, where in notes.items())
    return f"<p><b>Error bands</b> (each answer carries the band of its group):</p><ul>{items}</ul>"


def _contexts(spec: ModelSpec, wanted: Sequence[int], room: int = 64) -> list[int]:
    """``wanted`` contexts clipped to what the model holds (leaving ``room`` for the new tokens)."""
    top = max(1, spec.max_context - room)
    return sorted({min(int(c), top) for c in wanted})


def _pairing(pairing: dict[str, Any] | None) -> dict[str, Any]:
    return pairing or DEFAULT_PAIRING


def _acceptance_words(cfg: dict[str, Any]) -> str:
    """Each drafter's acceptance on the page, with where it came from (and why a drafter without one is left out)."""
    notes, acc = cfg.get("acceptance_notes", {}), cfg["acceptance"]
    return "; ".join(
        f"{esc(k)} " + (f"{acc[k]:.3g} " if k in acc else "") + (f"({esc(notes[k])})" if k in notes else "")
        for k in dict.fromkeys([*acc, *notes])
    )


def _ranked(cfg: dict[str, Any]) -> list[Any]:
    """The drafters the page ranks: those with an acceptance (given, or published)."""
    from roofline.speculation.speculative import EarlyExit

    draft_name, exit_layer = cfg["drafters"]
    return [draft_name] + ([EarlyExit(exit_layer)] if f"early exit @{exit_layer}" in cfg["acceptance"] else [])


def validate_inputs(gpus: Sequence[str], pairing: dict[str, Any] | None) -> None:
    """Check every GPU and model name and every acceptance rate before anything is written."""
    if not gpus:
        raise SpecroofError("give at least one GPU (--hardware)")
    for g in gpus:
        hw = load_hardware(g)
        if "bf16" not in hw.dtypes:  # every section prices bf16: a GPU without it failed them one by one
            raise SpecroofError(
                f"the report prices bf16 and {hw.id} has no bf16 peak (it has: {', '.join(hw.dtypes)}): leave it out "
                f"of --hardware, and price it with speedup, plan or roofline --dtype {hw.dtypes[-1]}"
            )
    cfg = _pairing(pairing)
    target, draft = get_model(cfg["target"]), get_model(cfg["drafters"][0])
    if not target.is_abstract and not draft.is_abstract and draft.total_params >= target.total_params:
        raise SpecroofError(
            f"the draft model {draft.name} ({draft.total_params / 1e9:.3g}B weights) is not smaller than the target "
            f"{target.name} ({target.total_params / 1e9:.3g}B): give a smaller --draft"
        )
    layers = get_model(cfg["target"]).n_layers
    exit_layer = cfg["drafters"][1]
    if not 1 <= int(exit_layer) < max(2, layers):
        raise SpecroofError(f"--early-exit must lie in [1, {layers - 1}] for {cfg['target']} (got {exit_layer})")
    if cfg.get("engine") is not None:
        from roofline.costing.engine import load_engine

        load_engine(cfg["engine"])
    for name, a in cfg["acceptance"].items():
        if not 0.0 <= float(a) <= 1.0:  # 1: every draft accepted (E = gamma + 1), a rate like any other
            raise SpecroofError(f"acceptance of {name} must lie in [0, 1] (got {a})")


def answer(w: ReportWriter, gpus: Sequence[str], pairing: dict[str, Any] | None = None) -> Section:
    """The question first: on each GPU, speculate or not, with which gamma, and how big a draft tree."""
    from roofline.deploy.planner import recommend
    from roofline.speculation.acceptance_defaults import CURVE_ALPHAS, RESOLUTION, break_even, pays

    cfg = _pairing(pairing)
    target, (draft_name, exit_layer), acc = cfg["target"], cfg["drafters"], cfg["acceptance"]
    alpha = acc[f"draft {draft_name}"]
    engine = cfg.get("engine")
    context = _contexts(get_model(target), [1024])[0]
    rows = []
    notes: dict[str, list[str]] = {}
    for g in gpus:
        hw = load_hardware(g)
        rec = recommend(hw, target, _ranked(cfg), acc, batch=1, context=context, engine=engine, resolution=RESOLUTION)
        if not rec.row["fits_in_memory"]:  # marked, not ranked: a speedup on a GPU that cannot hold the model is none
            rows.append({"hardware": hw.id, "best_strategy": "does not fit in memory", "gamma": None,
                         "chain_speedup": np.nan, "tree_nodes": None, "tree_depth": None, "tree_speedup": np.nan,
                         "tree_deployable": None, "break_even_alpha": np.nan, "error_band_pct": np.nan})  # fmt: skip
            continue
        tree = tree_choice(g, target, draft_name, alpha, context, engine)
        band, note = band_for(engine, hw, speculative=True, batch=1, model=target, context=context)
        at = [recommend(hw, target, draft_name, a, batch=1, context=context, engine=engine).row for a in CURVE_ALPHAS]
        be = break_even(list(CURVE_ALPHAS), [r["gamma"] > 0 and pays(r["speedup"]) for r in at])  # plan's rule
        notes.setdefault(note, []).append(hw.id)
        rows.append(
            {
                "hardware": hw.id,
                "best_strategy": rec.row["strategy"],
                "gamma": int(rec.row["gamma"]),
                "chain_speedup": float(rec.row["speedup"]),
                "tree_nodes": int(tree.best["n_nodes"]),
                "tree_depth": int(tree.best["depth"]),
                "tree_speedup": float(tree.best["speedup"]),
                "tree_deployable": TREE_NOT_DEPLOYABLE,
                "break_even_alpha": be if be is not None else np.nan,
                "error_band_pct": band_pct(band),
            }
        )
    df = pd.DataFrame(rows)
    body = (
        f"<p><b>Question:</b> serving {esc(str(target))} at batch 1 and a {context}-token context, how much does "
        f"speculative decoding buy on each GPU, and with which speculation length (gamma: draft tokens proposed "
        f"per round) or draft-tree size? <b>Answer</b> (" + engine_words(engine) + ", before any measurement):</p>"
    )
    body += w.table(df, "answer", floatfmt="{:.2f}")
    body += band_words(notes) if notes else ""
    body += (
        f"<p>Drafters: {esc(str(draft_name))} (a separate draft model) and early exit after layer "
        f"{int(exit_layer)} (the target's own first layers). Acceptance (the chance each draft token is accepted): "
        + _acceptance_words(cfg)
        + ". The headline is the chain (gamma): vLLM and SGLang, whose flags follow, draft a chain for a separate "
        "draft model, so the tree columns are what a tree-verifying runtime would gain, not deployable in either. "
        "The break-even column is the lowest per-token rate (of 0.3, 0.4, 0.5, 0.55, ... 0.95) at which the draft "
        "model pays on that GPU. The tree column assumes every sibling of a tree node is "
        f"accepted independently with that same rate ({alpha:.3g}), which flatters wide trees: with a measured "
        "per-rank vector (<code>specroof tree --acceptance-vector</code>) the best tree is usually smaller. "
        "Speedup is tokens per second against plain decoding on the same GPU. Pass your own models and rates with "
        "<code>--target/--draft/--acceptance</code>.</p>"
    )
    body += _deploy_flags(rows, target, draft_name)
    summary = {"answer": rows, "answer_error_bands": [{"note": n, "hardware": h} for n, h in notes.items()]}
    return Section("The answer: gamma and tree size per GPU", body, ["answer.csv"], summary)


def _deploy_flags(rows: list[dict[str, Any]], target: str, draft_name: str) -> str:
    """The answer in the engines' own flags: a chain of a separate draft model at the chosen gamma, per GPU.

    Early exit has no switch in vLLM or SGLang, so a GPU whose best strategy is early exit gets a sentence saying so.
    """
    from roofline.deploy.engine_flags import emit_flags
    from roofline.passes.model import hf_id
    from roofline.speculation.engine_trees import EngineSetting

    items = []
    for r in rows:
        if r["gamma"] is None:
            items.append(f"<li>{esc(r['hardware'])}: {esc(str(r['best_strategy']))}: no flags</li>")
            continue
        g = int(r["gamma"])
        if g == 0:
            items.append(f"<li>{esc(r['hardware'])}: plain decoding (no speculative flags)</li>")
            continue
        if not str(r["best_strategy"]).startswith("draft"):
            items.append(
                f"<li>{esc(r['hardware'])}: {esc(str(r['best_strategy']))} at gamma {g}: no serving engine ships "
                "early-exit self-speculation; the best draft-model setting is in the plans below</li>"
            )
            continue
        flags = {
            e: emit_flags(EngineSetting(e, g, 1, g + 1), target=target, drafter="model", draft_model=hf_id(draft_name))
            for e in ("vllm", "sglang")
        }
        r["deploy_vllm"], r["deploy_sglang"] = flags["vllm"], flags["sglang"]
        items.append(
            f"<li>{esc(r['hardware'])}: vLLM <code>{esc(flags['vllm'])}</code><br>SGLang "
            f"<code>{esc(flags['sglang'])}</code></li>"
        )
    return (
        "<p><b>Deploying it</b> (the engines' own flags for the chain answer; "
        "<code>specroof plan ... --emit sglang|vllm|trtllm</code> also searches EAGLE's tree knobs):</p><ul>"
        + "".join(items)
        + "</ul>"
    )


def seed_example(w: ReportWriter) -> Section:
    """The 13B-on-A100 worked example: 13B fp16 on A100 80GB SXM and H100 SXM."""
    m = ModelSpec.from_params(13e9, name="13B (worked example)")
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
    body = (
        "<p>A 13-billion-weight model in fp16 (2 bytes per weight) decoding one token at batch 1 must stream all "
        "26 GB of weights from memory for about 26 GFLOP of arithmetic: 1 FLOP per byte. The GPU can do far more "
        "arithmetic per byte than that (its <i>ridge</i>: peak FLOP/s over memory bandwidth), so the pass is "
        "memory bound and the arithmetic units sit mostly idle.</p>"
    )
    body += w.table(df, "seed_example")
    body += (
        "<p><b>K</b> is how many new tokens one pass can process before compute time catches up with memory time "
        "(the crossover): every token up to K is nearly free, which is the room speculative decoding fills with "
        "draft tokens to verify. <code>K_weights_only</code> counts only the weight bytes (ridge x bytes per "
        "weight / 2 FLOP per weight, the back-of-the-envelope figure); <code>K_exact</code> counts every byte and "
        "FLOP of the pass (KV cache, activations) and is what the planner uses.</p>"
        f"<p>Bandwidth alone (A100 to H100, peak held): {speed:.2f}x faster decode; "
        f"K falls from {rows[0]['K_exact']} to {rows[1]['K_exact']}: a faster memory leaves less free room.</p>"
    )
    return Section(
        "Worked example: a 13B model on an A100 and an H100", body, ["seed_example.csv"], {"seed_example": rows}
    )


def rooflines(w: ReportWriter, gpus: Sequence[str], pairing: dict[str, Any] | None = None) -> Section:
    """Roofline charts, decode batch sweeps and crossover K for the chosen GPUs."""
    from roofline.plot import batch_sweep_chart, roofline_chart, tokens_sweep_chart

    target = _pairing(pairing)["target"]
    spec = get_model(target)
    contexts = _contexts(spec, (1024, 32768))
    c0 = contexts[0]
    body = w.figure(
        roofline_chart(list(gpus), ["bf16"]),
        "roofline",
        "Roofline of each GPU (bf16): attainable TFLOP/s against arithmetic intensity (FLOP per byte moved). "
        "Square markers on the first GPU: A = decoding one token at batch 1 (intensity ~1, deep in the "
        "memory-bound slope), B = the ridge (memory and compute time equal), C = 10x the ridge (compute bound).",
    )
    body += w.figure(
        batch_sweep_chart(target, list(gpus), context=c0, dtype="bf16"),
        "batch_sweep",
        f"{spec.name} decode: throughput and per-user latency against batch (context {c0})",
    )
    body += w.figure(
        tokens_sweep_chart(target, list(gpus), c0, 1, 1024, "bf16"),
        "tokens_sweep",
        f"{spec.name} verify-pass time against new tokens per pass (batch 1, context {c0}): flat until K",
    )
    rows = []
    for g in gpus:
        hw = load_hardware(g)
        for b in (1, 8, 64):
            for ctx in contexts:
                rows.append(
                    {
                        "hardware": hw.id,
                        "batch": b,
                        "context": ctx,
                        "t_decode_ms": float(pass_time(spec, hw, b, 1, ctx, "bf16").t_step_s) * 1e3,
                        "crossover_K": int(crossover_tokens(spec, hw, b, ctx, "bf16")),
                    }
                )
    df = pd.DataFrame(rows)
    body += f"<h3>Crossover K ({esc(spec.name)}, bf16): new tokens per sequence that stay memory bound</h3>"
    body += w.table(df, "crossover")
    return Section(
        "Rooflines of the data-center GPUs",
        body,
        ["roofline.png", "batch_sweep.png", "crossover.csv"],
        {"crossover": rows},
    )


def speculation(w: ReportWriter, gpus: Sequence[str], pairing: dict[str, Any] | None = None) -> Section:
    """Speedup map, speedup against batch, and the plan for the pairing on every GPU."""
    from roofline.deploy.planner import recommend, speculation_stops_paying
    from roofline.plot import optimal_gamma_vs_alpha, speedup_map, speedup_vs_batch
    from roofline.speculation.acceptance_defaults import RESOLUTION
    from roofline.speculation.speculative import draft_cost_ratio

    cfg = _pairing(pairing)
    target = cfg["target"]
    spec = get_model(target)
    draft_name, exit_layer = cfg["drafters"]
    drafters = _ranked(cfg)
    acc = cfg["acceptance"]
    contexts = _contexts(spec, (1024, 32768))
    c = draft_cost_ratio(target, draft_name, gpus[0])
    body = (
        f"<p>Target {esc(str(target))}; drafters: {esc(str(draft_name))} and early exit after layer {int(exit_layer)}; "
    )
    body += "acceptance: " + _acceptance_words(cfg) + ". "
    body += f"Draft cost ratio c (one draft step over one target step) = {c:.3f} on {esc(str(gpus[0]))} at batch 1.</p>"
    body += w.figure(
        speedup_map(c), "speedup_map", f"Idealised speedup over (alpha, gamma) at c = {c:.3f}, optimal gamma in red"
    )
    first_alpha = acc[f"draft {draft_name}"]
    ctx_small = _contexts(spec, [128])[0]
    body += w.figure(
        speedup_vs_batch(target, draft_name, list(gpus[:3]), first_alpha, context=ctx_small),
        "speedup_vs_batch",
        f"Total throughput against batch with the best gamma and without speculation (context {ctx_small}, "
        f"alpha {first_alpha:.3g})",
    )
    body += w.figure(
        optimal_gamma_vs_alpha(target, draft_name, list(gpus), batch=64, context=contexts[0]),
        "optimal_gamma",
        f"Roofline-optimal gamma against alpha per GPU (batch 64, context {contexts[0]})",
    )
    rows = []
    notes: dict[str, list[str]] = {}
    for g in gpus:
        for batch in (1, 8, 64):
            for context in contexts:
                rec = recommend(
                    g,
                    target,
                    drafters,
                    acc,
                    batch=batch,
                    context=context,
                    engine=cfg.get("engine"),
                    resolution=RESOLUTION,
                )
                fits = bool(rec.row["fits_in_memory"])
                band, note = band_for(cfg.get("engine"), g, speculative=True, batch=batch, model=spec, context=context)
                if fits:
                    notes.setdefault(note, []).append(f"batch {batch}, context {context}")
                # a configuration that does not fit in memory is marked and not ranked: no strategy, no speedup
                rows.append(
                    {
                        "hardware": g,
                        "batch": batch,
                        "context": context,
                        "strategy": rec.row["strategy"] if fits else "does not fit in memory",
                        "gamma": int(rec.row["gamma"]) if fits else None,
                        "expected_tokens": rec.row["expected_tokens"] if fits else np.nan,
                        "t_round_ms": rec.row["t_round_s"] * 1e3 if fits else np.nan,
                        "tokens_per_s_per_user": rec.row["tokens_per_s_per_user"] if fits else np.nan,
                        "speedup": rec.row["speedup"] if fits else np.nan,
                        "error_band_pct": band_pct(band) if fits else np.nan,
                        "kv_bound_context": int(rec.row["kv_bound_context"]),
                        "fits_in_memory": fits,
                        "memory_GB": float(rec.row["memory_bytes"]) / 1e9,
                    }
                )
    stops = {g: speculation_stops_paying(g, target, draft_name, first_alpha, context=ctx_small) for g in gpus}
    body += "<h3>Plan per GPU (best strategy and gamma)</h3>" + w.table(pd.DataFrame(rows), "plan")
    body += band_words({n: sorted(set(where), key=where.index) for n, where in notes.items()}) if notes else ""
    body += _kv_bound_words(rows)
    body += f"<p>Batch at which speculation with the draft model stops paying (context {ctx_small}): "
    body += ", ".join(f"{esc(k)}: {v if v is not None else 'never (within memory)'}" for k, v in stops.items()) + "</p>"
    return Section(
        "Speculative decoding: where it pays and which gamma",
        body,
        ["plan.csv"],
        {"plan": rows, "stops_paying_batch": stops},
    )


def _kv_bound_words(rows: list[dict[str, Any]]) -> str:
    """Where verification turns KV-bound on each GPU (the plan table's kv_bound_context), in words (HTML)."""
    per: dict[str, list[str]] = {}
    for r in rows:
        if r["gamma"] is None:  # does not fit: no verify pass to speak of
            continue
        where = (
            f"{int(r['kv_bound_context']):,} tokens"
            if r["kv_bound_context"] >= 0
            else "never within the model's context"
        )
        item = f"batch {r['batch']} at context {r['context']:,} (gamma {r['gamma']}): {where}"
        if item not in per.setdefault(str(r["hardware"]), []):
            per[str(r["hardware"])].append(item)
    items = "".join(f"<li>{esc(h)}: {esc('; '.join(v))}</li>" for h, v in per.items())
    return (
        "<p><b>Where verification turns KV-bound</b> (<code>kv_bound_context</code>): the context per sequence from "
        "which the verify pass of gamma + 1 tokens at that batch spends at least half its time reading and scoring the "
        "KV cache (docs/cost-model.md, section 31). Past it a longer draft costs little more than a plain step, and "
        "speculation pays more with batch, not less:</p><ul>" + items + "</ul>"
    )


def trees_section(w: ReportWriter, gpus: Sequence[str], pairing: dict[str, Any] | None = None) -> Section:
    """Chain vs tree (the worked example), expected tokens against budget, and the tree size each GPU should use."""
    from roofline.plot import tree_budget_chart, tree_size_per_gpu
    from roofline.speculation.trees import IIDAcceptance, Tree

    seed_rows = []
    for p in (0.6, 0.8):
        m = IIDAcceptance(p)
        e_tree, e_chain = Tree.kary(2, 3).expected_tokens(m), Tree.chain(3).expected_tokens(m)
        seed_rows.append(
            {"p": p, "E_tree_14_nodes": e_tree, "E_chain_3_nodes": e_chain, "tree_over_chain": e_tree / e_chain}
        )
    body = (
        "<p>A draft tree proposes several candidates per position; the target verifies all of them in one pass "
        "(a tree attention mask), and the longest accepted path is kept. Worked example: a full binary tree of "
        "depth 3 (14 nodes) against a 3-token chain, each token accepted independently with probability p; "
        "E = expected tokens per round.</p>"
    )
    body += w.table(pd.DataFrame(seed_rows), "seed_trees")
    cfg = _pairing(pairing)
    alpha = cfg["acceptance"][f"draft {cfg['drafters'][0]}"]
    spec = get_model(cfg["target"])
    context = _contexts(spec, [1024])[0]
    model = IIDAcceptance(alpha)
    body += w.figure(
        tree_budget_chart(model, 64, 8),
        "tree_budget",
        f"Expected tokens against node budget (i.i.d. acceptance {alpha:.3g})",
    )
    choices = {g: tree_choice(g, cfg["target"], cfg["drafters"][0], alpha, context, cfg.get("engine")) for g in gpus}
    body += w.figure(
        tree_size_per_gpu(choices),
        "tree_size_per_gpu",
        f"Tree size chosen per GPU for {spec.name} + {cfg['drafters'][0]} (batch 1, context {context})",
    )
    rows = [
        {
            "hardware": g,
            **{k: c.best[k] for k in ("n_nodes", "depth", "expected_tokens", "speedup")},
            "t_round_ms": float(c.best["t_round_s"]) * 1e3,
        }
        for g, c in choices.items()
    ]
    body += (
        f"<p>Assumption: every sibling is accepted independently with probability {alpha:.3g} (i.i.d.). Real drafts "
        "are not like that: the second-ranked candidate is accepted far less often than the first, so with a "
        "measured per-rank vector (Sequoia's format, <code>specroof tree --acceptance-vector</code>) the best "
        "trees are smaller and the speedups lower than below.</p>"
    )
    body += w.table(pd.DataFrame(rows), "tree_size")
    notes: dict[str, list[str]] = {}
    for g in gpus:
        note = band_for(cfg.get("engine"), g, speculative=True, batch=1, model=spec, context=context)[1]
        notes.setdefault(note, []).append(load_hardware(g).id)
    body += band_words(notes)
    body += _trees_at_scale(w, gpus, cfg, model, context)
    return Section(
        "Draft trees: chain vs tree, and the tree size per GPU",
        body,
        ["seed_trees.csv", "tree_size.csv", "trees_vs_batch.csv", "offload.csv"],
        {"seed_trees": seed_rows, "tree_size": rows},
    )


def _trees_at_scale(w: ReportWriter, gpus: Sequence[str], cfg: dict[str, Any], model: Any, context: int) -> str:
    """Trees as the batch grows, and trees when the weights stream from host memory (offloading)."""
    from roofline.deploy.tree_sizing import best_tree_size, stops_paying, trees_vs_batch
    from roofline.plot import trees_vs_batch_chart
    from roofline.speculation.trees import optimal_tree

    target, draft = cfg["target"], cfg["drafters"][0]
    engine = cfg.get("engine")
    budgets = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    table = trees_vs_batch(
        list(gpus), target, draft, model, (1, 4, 16, 64, 256), (context,), budgets, 10, engine=engine
    )
    body = (
        "<h3>Trees as the batch grows</h3><p>Every extra node of a tree is a token the verify pass computes for "
        "each sequence. At batch 1 that compute is free (the pass is memory bound), so wide trees pay; as batch x "
        "nodes approaches the ridge the extra nodes start to cost, the best tree shrinks to a chain, and then "
        "speculation itself stops paying.</p>"
    )
    body += w.figure(trees_vs_batch_chart(table), "trees_vs_batch", "Best tree and best chain speedup against batch")
    table.to_csv(w.out / "trees_vs_batch.csv", index=False)
    stops = _stop_batches(stops_paying(table), {load_hardware(g).id: g for g in gpus}, target, draft, model, context,
                          engine)  # fmt: skip
    body += w.table(stops, "trees_stop_paying", floatfmt="{:.0f}")
    body += (
        "<p>Trees stop paying at the first batch where the best tree buys under 2% over the best chain; chains stop "
        "paying where their best speedup is at most 1. Past batch 256 the batch doubles up to the largest one whose "
        "weights and KV cache (target and draft) fit in the GPU's memory; a drafter that still pays there pays at "
        "every batch the GPU can hold (at long context the KV read keeps even large batches memory bound).</p>"
    )
    rows = []
    opt = optimal_tree(model, 512, 12)  # one table serves every GPU, on device and offloaded
    for g in gpus:
        hw = load_hardware(g)
        if hw.memory_bytes is None:
            continue
        for where, h in (("device memory", hw), ("host memory, PCIe 4.0 x16", hw.offloaded("pcie4-x16"))):
            b = best_tree_size(h, target, draft, model, 1, context, (*budgets, 512), 12, opt=opt).best
            rows.append(
                {
                    "hardware": hw.id,
                    "weights_in": where,
                    "tree_nodes": int(b["n_nodes"]),
                    "tree_depth": int(b["depth"]),
                    "t_round_ms": float(b["t_round_s"]) * 1e3,
                    "speedup": float(b["speedup"]),
                }
            )
    body += (
        "<h3>Offloaded weights (Sequoia's regime)</h3><p>When the target's weights live in host memory and cross "
        "PCIe every pass, one pass costs the weight bytes over ~31.5 GB/s, tens of times a decode step from HBM, "
        "while the draft model stays on the GPU. Verifying hundreds of nodes then costs almost nothing more than "
        "verifying one, so the best tree grows to the budget's limit:</p>"
    )
    body += w.table(pd.DataFrame(rows), "offload", floatfmt="{:.3g}")
    return body


def max_batch(hw: Any, target: Any, draft: Any, context: int) -> int:
    """The largest batch whose weights and KV cache at ``context`` (target and draft model, bf16) fit in ``hw``'s
    memory; 0 when not even one sequence does."""
    from roofline.costing.passtime import memory_footprint

    def need(b: int) -> float:
        return float(memory_footprint(target, b, context).total_bytes + memory_footprint(draft, b, context).total_bytes)

    cap = float(hw.memory_bytes or 0.0)
    if need(1) > cap:
        return 0
    lo, hi = 1, 2
    while need(hi) <= cap:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid) <= cap else (lo, mid)
    return lo


def _stop_batches(
    stops: pd.DataFrame, gpus: dict[str, Any], target: Any, draft: Any, model: Any, context: int, engine: str | None
) -> pd.DataFrame:
    """Fill the batches where trees and chains stop paying that batch 256 did not reach: the batch doubles up to the
    memory limit; what still pays there is said to pay up to the limit (a number in words, never a blank)."""
    from roofline.deploy.tree_sizing import stops_paying, trees_vs_batch

    out = []
    for _, r in stops.iterrows():
        hw = load_hardware(gpus[r["hardware"]])  # the GPU as given (a profile id, alias or TOML path)
        limit = max_batch(hw, target, draft, int(r["context"]))
        row = {"hardware": r["hardware"], "context": int(r["context"]), "memory_limit_batch": limit}
        found = {k: r[k] for k in ("trees_stop_paying_batch", "chains_stop_paying_batch")}
        if any(pd.isna(v) for v in found.values()) and limit > 256:
            batches = sorted({b for b in (2**k for k in range(9, 31)) if b < limit} | {limit})
            ext = trees_vs_batch(
                hw, target, draft, model, batches, (int(r["context"]),), (1, 2, 4, 8, 16), 10, engine=engine
            )
            more = stops_paying(ext).iloc[0]
            found = {k: (v if not pd.isna(v) else more[k]) for k, v in found.items()}
        for k, v in found.items():
            within = not pd.isna(v) and int(v) <= limit  # a batch past the memory limit is no answer
            row[k.replace("_batch", "")] = (
                f"batch {int(v):,}" if within else f"pays up to the memory limit (batch {limit:,})"
            )
        out.append(row)
    return pd.DataFrame(out)


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
.scroll{max-width:100%;overflow-x:auto}
table.data{border-collapse:collapse;font-size:13px;margin:1em 0}
table.data th{white-space:normal;max-width:11em;vertical-align:bottom}
table.data td,table.data th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}
figure{margin:1em 0}img{max-width:100%}figcaption{font-size:13px;color:#555}
h2{border-bottom:2px solid #444;padding-bottom:4px;margin-top:2em}
.error{background:#fee;border:1px solid #c00;padding:.5em 1em}
code{overflow-wrap:anywhere}
.note{background:#ffd;border:1px solid #cc0;padding:.5em 1em}
"""


_LOADED = """<script>
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  document.body.dataset.imagesTotal = imgs.length;
  document.body.dataset.imagesLoaded = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.tables = document.querySelectorAll("table").length;
});
</script>"""


#: the serving sweep the page runs: request rates (req/s), policies, requests per point (a few seconds in all)
SERVING_RATES = (1.0, 4.0, 16.0, 32.0, 64.0, 96.0)
SERVING_POLICIES = ("off", "static:4", "goodput")
SERVING_REQUESTS = 300


def _serving_sweep(gpu: str, target: str, draft: str, alpha: float, engine: str | None) -> Any:
    from roofline.serving import simulate

    return simulate(
        hardware=gpu,
        target=target,
        drafter=f"model:{draft}",
        acceptance=alpha,
        policy=SERVING_POLICIES,
        rates=SERVING_RATES,
        requests=SERVING_REQUESTS,
        input_len="uniform:128-1024",
        output_len="uniform:16-256",
        engine=engine,
        seed=0,
    )


def serving_section(w: ReportWriter, gpus: Sequence[str], pairing: dict[str, Any] | None = None) -> Section:
    """At what request rate does speculation stop paying? The serving simulator on the first GPU, under the engine."""
    from roofline.plot import serving_curves

    cfg = _pairing(pairing)
    gpu, target, draft = gpus[0], cfg["target"], cfg["drafters"][0]
    alpha = cfg["acceptance"][f"draft {draft}"]
    engine = cfg.get("engine")
    try:
        res = _serving_sweep(gpu, target, draft, alpha, engine)
    except DoesNotFit as e:  # a model larger than one GPU: the page says so instead of failing the section
        body = (
            f"<p><b>Question:</b> up to which request rate does speculative decoding make {esc(str(target))} serve "
            f"better on the {esc(load_hardware(gpu).name)}? <b>Answer:</b> not on one such GPU: {esc(str(e))}. "
            "<code>specroof serve --tp N</code> (or <code>--ep N</code> for an MoE) simulates it sharded.</p>"
        )
        return Section("Serving under load: when speculation stops paying", body, [], {"serving": []})
    from roofline.serving.sweep import DEFAULT_OBJECTIVE, OBJECTIVES

    objective = cfg.get("objective") or DEFAULT_OBJECTIVE
    stops = res.stops_paying(OBJECTIVES[objective])
    every = {o: res.verdicts(col) for o, col in OBJECTIVES.items()}
    hw_name = load_hardware(gpu).name
    verdicts = "".join(f"<li>{esc(v.sentence())}</li>" for v in every[objective].values())
    judged = pd.DataFrame([{"policy": p, **{o: every[o][p].words() for o in OBJECTIVES}} for p in every[objective]])
    said = "the default, " if objective == DEFAULT_OBJECTIVE else ""
    body = (
        f"<p><b>Question:</b> requests arrive at a rate; a continuous-batching scheduler mixes their prefills and "
        f"decodes. Up to which request rate does speculative decoding make {esc(str(target))} with {esc(str(draft))} "
        f"(acceptance {alpha:.3g}) serve better on the {esc(hw_name)}? <b>Answer</b> (" + engine_words(engine) + ", "
        f"{SERVING_REQUESTS} simulated requests per point, prompts 128-1024 and outputs 16-256 tokens; judged on "
        f"<b>{esc(objective)}</b> ({said}{esc(OBJECTIVES[objective])}; <code>--objective "
        f"{'|'.join(OBJECTIVES)}</code> names another):</p><ul>" + verdicts + "</ul>"
        "<p>Every objective, so no verdict hides another (p50 latencies lower is better, throughput and goodput "
        "higher):</p>" + w.table(judged, "serving_verdicts")
    )
    body += w.figure(
        serving_curves(res.summary, title=f"{target} + {draft} on {hw_name}"),
        "serving_curves",
        "Time per output token against throughput, and time to first token against request rate, per policy",
    )
    cols = ["rate_req_s", "policy", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s", "e2e_p50_s",
            "throughput_tok_s", "goodput_req_s", "mean_batch"]  # fmt: skip
    shown = res.summary[[c for c in cols if c in res.summary.columns]]
    body += w.table(shown, "serving_summary")
    body += band_words({band_for(engine, gpu, kind="serving", model=target)[1]: [hw_name]})
    body += (
        "<p>TTFT: arrival to first token; TPOT: time per output token after the first; static:4 drafts 4 tokens "
        "every round, goodput chooses gamma per step as SmartSpec does (lower as the batch fills). "
        + esc(_static_tpot_words(res.summary))
        + " Near saturation a static gamma's verify tokens take the step budget prefills need, so queues and TTFT "
        "grow. <code>specroof serve</code> runs any sweep; <code>specroof measure serve</code> checks the simulator "
        "against real continuous batching on this machine.</p>"
    )
    rows = [
        {"policy": p, "objective": objective, "stops_paying_at_rate": r, **every[objective][p].to_dict()}
        for p, r in stops.items()
    ]
    return Section(
        "Serving under load: when speculation stops paying",
        body,
        ["serving_summary.csv", "serving_verdicts.csv", "serving_curves.png"],
        {"serving": rows},
    )


def _static_tpot_words(summary: Any, policy: str = "static:4", baseline: str = "off") -> str:
    """What the table beside it shows of a static gamma's TPOT against plain decoding, read off the sweep (a sentence
    written once said 'at every rate' beside a table where it did not)."""
    a = summary[summary["policy"] == policy].set_index("rate_req_s")["tpot_p50_s"]
    b = summary[summary["policy"] == baseline].set_index("rate_req_s")["tpot_p50_s"]
    rates = sorted(set(a.index) & set(b.index))
    if not rates:
        return ""
    worse = [r for r in rates if not a[r] < b[r]]
    if not worse:
        return f"{policy} lowers TPOT p50 at every rate swept."
    if len(worse) == len(rates):
        return f"{policy} lowers TPOT p50 at no rate swept."
    return f"{policy} lowers TPOT p50 at every rate swept but {', '.join(f'{r:g}' for r in worse)} req/s."


def engines_section(w: ReportWriter) -> Section:
    """How close the model comes to published GPU measurements, with and without an engine, and what an engine changes."""
    from roofline.evidence.published import error_summary, load_published, validation_table
    from roofline.plot import gamma_by_engine_chart, published_scatter
    from roofline.speculation.speculative import alpha_for_heuristic, speedup_by_engine

    rows = load_published()
    # the serving rows are simulated sweeps (seconds each): `specroof validate published` prices them; the page's
    # serving section shows the simulator itself
    table = validation_table(rows[rows["kind"] != "serving"])
    summ = error_summary(table)
    body = (
        "<p>The roofline prices bytes and FLOPs; the software that runs the model adds its own time: kernel "
        "launches issued from Python (<b>eager</b> PyTorch, Hugging Face), or one CUDA-graph launch per pass "
        "(<b>compiled</b>, gpt-fast; <b>serving</b>, vLLM/SGLang), a fraction of the datasheet bandwidth, the "
        "bookkeeping of every speculative round. Each published figure below is predicted twice: by the datasheet "
        "roofline alone and with its engine. Engines are fitted only to the <i>calibration</i> rows (gpt-fast's "
        "README, Spec-Bench's A100 leaderboard for Vicuna-7B); <i>validation</i> rows were never fitted to.</p>"
    )
    pct = summ.copy()
    for c in pct.columns:
        if "error" in c:
            pct[c] = (100 * pct[c]).round(1)
    pct.columns = [c.replace("abs_error", "abs_error_pct") for c in pct.columns]
    pct_words = pct.assign(**{c: pct[c].map(number) for c in pct.columns if "error" in c})
    body += w.table(pct_words, "published_summary", csv=pct)
    body += w.figure(published_scatter(table), "published_scatter", "Predicted against published (log-log, y = x)")
    shown = table[["source", "use", "kind", "engine", "setup", "published", "roofline", "error_roofline",
                   "engine_aware", "error_engine", "note"]]  # fmt: skip
    # figures with 3 significant digits written out (2,040 tok/s, never 2.04e+03), errors as whole percentages (a
    # -0.3% error is 0%, never -0%); the CSV keeps the numbers
    words = shown.assign(
        **{c: shown[c].map(number) for c in ("published", "roofline", "engine_aware")},
        **{c: shown[c].map(percent) for c in ("error_roofline", "error_engine")},
    )
    body += "<details><summary>Every row</summary>" + w.table(words, "published_rows", csv=shown)
    body += "</details>"
    alpha = alpha_for_heuristic(2.28)
    by = speedup_by_engine(hardware="a100-sxm-80gb", target="vicuna-7b", drafter="model:vicuna-68m", alpha=alpha)
    best: dict[str, dict[str, float]] = {
        str(r["engine"]): {k: float(r[k]) for k in ("gamma", "speedup", "t_draft_s", "t_base_s")}
        for _, r in by[by["best"]].iterrows()
    }
    eager = best.get("eager", best.get("hf"))  # `eager` is Hugging Face's eager engine, `hf`, by its old name
    if eager is None:
        raise SpecroofError(f"speedup_by_engine returned no eager engine (got {', '.join(best)})")
    body += (
        f"<h3>Which gamma for a 68M draft of Vicuna-7B on an A100?</h3><p>At the acceptance Spec-Bench measured for "
        f"this pair (2.28 tokens per round under Hugging Face's schedule: alpha = {alpha:.2f}), the best gamma is "
        + ", ".join(f"{e} {int(r['gamma'])} ({r['speedup']:.2f}x)" for e, r in best.items())
        + ". Under eager PyTorch each draft step of the 2-layer draft costs "
        f"{1e3 * eager['t_draft_s'] / eager['gamma']:.1f} ms of host time (against a "
        f"{1e3 * eager['t_base_s']:.0f} ms target step), so long drafts stop paying early; compiled into "
        f"CUDA graphs it costs {1e3 * best['compiled']['t_draft_s'] / best['compiled']['gamma']:.2f} ms "
        "and longer drafts pay. The serving engines (vLLM, SGLang, TensorRT-LLM) share the compiled engine's device "
        "terms and add their own per-step, paged-attention and sampling costs, fitted to SGLang's and torchao's "
        "published H100 rows.</p>"
    )
    body += w.figure(gamma_by_engine_chart(by, "vicuna-7b + vicuna-68m on an A100"), "gamma_by_engine",
                     "Speedup against gamma under each engine")  # fmt: skip
    return Section(
        "Engines: predictions against published GPU measurements",
        body,
        ["published_summary.csv", "published_rows.csv", "published_scatter.png", "gamma_by_engine.png"],
        {"published": summ.to_dict(orient="records")},
    )


def _page(sections: Sequence[Section], pending: Sequence[str], note: str = "") -> str:
    toc = "".join(f"<li><a href='#s{i}'>{esc(s.title)}</a></li>" for i, s in enumerate(sections))
    toc += "".join(f"<li>{esc(t)} (not run yet)</li>" for t in pending)
    parts = [f"<h2 id='s{i}'>{esc(s.title)}</h2>\n{s.body_html}" for i, s in enumerate(sections)]
    banner = f"<p class='note'>{esc(note)}</p>" if note else ""
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>specroof report</title>"
        f"<style>{_CSS}</style>{_LOADED}</head><body><h1>specroof report</h1>{banner}<ol>{toc}</ol>\n"
        + "\n".join(parts)
        + "</body></html>"
    )


def _failed(title: str, exc: BaseException, debug: bool) -> Section:
    detail = "".join(traceback.format_exception(exc)) if debug else f"{type(exc).__name__}: {exc}"
    body = (
        f"<div class='error'><p>This section failed: {esc(f'{type(exc).__name__}: {exc}')}</p>"
        + (f"<pre>{esc(detail)}</pre>" if debug else "<p>Rerun with <code>--debug</code> for the traceback.</p>")
        + "</div>"
    )
    return Section(title, body, error=f"{type(exc).__name__}: {exc}")


def analytic_sections(
    gpus: Sequence[str] = DEFAULT_GPUS, pairing: dict[str, Any] | None = None
) -> list[tuple[str, SectionMaker]]:
    """The report's analytic sections, in page order (the measured half appends its own)."""
    return [
        ("The answer: gamma and tree size per GPU", lambda w: answer(w, gpus, pairing)),
        ("Worked example: a 13B model on an A100 and an H100", seed_example),
        ("Rooflines of the data-center GPUs", lambda w: rooflines(w, gpus, pairing)),
        ("Speculative decoding: where it pays and which gamma", lambda w: speculation(w, gpus, pairing)),
        ("Draft trees: chain vs tree, and the tree size per GPU", lambda w: trees_section(w, gpus, pairing)),
        ("Serving under load: when speculation stops paying", lambda w: serving_section(w, gpus, pairing)),
        ("Engines: predictions against published GPU measurements", engines_section),
    ]


def write_report(
    out_dir: str | Path = "specroof-report",
    gpus: Sequence[str] = DEFAULT_GPUS,
    extra: Sequence[tuple[str, SectionMaker]] = (),
    pairing: dict[str, Any] | None = None,
    *,
    debug: bool = False,
    on_section: Callable[[Section], None] | None = None,
) -> dict[str, Any]:
    """Build every section, rewriting ``index.html`` and ``summary.json`` after each; return the summary.

    ``pairing`` overrides the default target, drafters and acceptance (see ``DEFAULT_PAIRING``);
    ``extra`` appends (title, maker) sections (the measured half). Inputs are validated
    before anything is written. A section that raises is shown with its error (traceback
    with ``debug``) and listed under ``summary["failed"]``; on Ctrl-C the page keeps the
    finished sections and the interrupt propagates. ``on_section`` is called as each
    section finishes (the CLI prints progress with it).
    """
    validate_inputs(gpus, pairing)
    _TREE_CACHE.clear()  # a profile path may name another file than in the last run of this process
    w = ReportWriter(out_dir)
    makers: list[tuple[str, SectionMaker]] = [*analytic_sections(gpus, pairing), *extra]
    sections: list[Section] = []
    summary: dict[str, Any] = {"gpus": list(gpus), "sections": [], "failed": []}

    def flush(note: str = "", pending: Sequence[str] = ()) -> None:
        (w.out / "index.html").write_text(_page(sections, pending, note))
        (w.out / "summary.json").write_text(dumps(summary))

    for i, (title, make) in enumerate(makers):
        try:
            interrupts.check()  # a Ctrl-C a finalizer swallowed during the last section stops here
            w.section_started = time.perf_counter()
            sec = make(w)
        except KeyboardInterrupt:
            summary["interrupted"] = title
            flush(
                f"Interrupted during '{title}': the sections above finished and are kept.", [t for t, _ in makers[i:]]
            )
            raise
        except Exception as exc:  # one failing section must not take the finished ones with it
            sec = _failed(title, exc, debug)
            summary["failed"].append({"section": title, "error": sec.error})
        sections.append(sec)
        summary["sections"].append(sec.title)
        summary.update(sec.summary)
        flush(pending=[t for t, _ in makers[i + 1 :]])
        if on_section is not None:
            on_section(sec)
    return summary
