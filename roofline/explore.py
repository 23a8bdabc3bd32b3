"""Interactive explorers for notebooks (ipywidgets), degrading to static figures without widgets.

``deployment_explorer()`` chooses GPU, model, drafter, engine and the kind of acceptance the user has (a per-token
rate, vLLM's draft acceptance rate, a mean accepted length) and shows speedup against gamma priced under that engine.
``speedup_explorer()`` shows, for one GPU, batch and context, the idealised
speedup E / (gamma c + 1) next to the roofline speedup of a real pairing, as
alpha, gamma, c, batch, context and the GPU change. ``accept_or_correct_explorer()``
is the one-token accept-or-correct demo of the worked examples: pick the draft's token and a uniform draw, see
whether it is kept and where the correction would come from.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from roofline.core.errors import SpecroofError
from roofline.plot import _axes
from roofline.speculation.speculative import expected_tokens, ideal_speedup, speedup
from roofline.speculation.verification import accept_or_correct


def speedup_figure(
    alpha: float = 0.8,
    gamma: int = 4,
    c: float = 0.05,
    batch: int = 1,
    context: int = 1024,
    gpu: str = "h100-sxm-80gb",
    target: str = "llama-3.1-8b",
    draft: str = "llama-3.2-1b",
) -> Figure:
    """Speedup against gamma: idealised (given c) and roofline (real pairing on ``gpu``); the chosen gamma marked."""
    fig, ax = _axes(None, (7.0, 4.0))
    g = np.arange(0, 17)
    ax.plot(g, ideal_speedup(alpha, g, c), "o-", ms=3, label=f"idealised E/(gamma c + 1), c = {c:g}")
    r = speedup(gpu, target, draft, alpha, g, batch=batch, context=context)
    ax.plot(g, r.speedup, "s-", ms=3, label=f"roofline: {target} + {draft} on {gpu}")
    ax.axvline(gamma, color="0.5", ls=":")
    ax.axhline(1.0, color="k", lw=0.8)
    e = float(expected_tokens(alpha, gamma))
    ax.set_title(f"alpha {alpha:.2f}, gamma {gamma}: E = {e:.2f} tokens/round; batch {batch}, context {context}")
    ax.set_xlabel("speculation length gamma (tokens)")
    ax.set_ylabel("speedup over plain decoding (x)")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8)
    return fig


def _widgets() -> Any | None:
    try:
        import ipywidgets
    except ImportError:
        return None
    return ipywidgets


def speedup_explorer(gpus: Sequence[str] = ("a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200-180gb")) -> Any:
    """Sliders for alpha, gamma, c, batch, context and a GPU menu; a static figure without ipywidgets."""
    w = _widgets()
    if w is None:
        return speedup_figure()
    return w.interactive(
        lambda **kw: speedup_figure(**kw),
        alpha=w.FloatSlider(value=0.8, min=0.0, max=0.99, step=0.01),
        gamma=w.IntSlider(value=4, min=0, max=16),
        c=w.FloatLogSlider(value=0.05, base=10, min=-3, max=0),
        batch=w.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256], value=1),
        context=w.SelectionSlider(options=[128, 512, 1024, 4096, 16384, 32768], value=1024),
        gpu=w.Dropdown(options=list(gpus), value=gpus[1] if len(gpus) > 1 else gpus[0]),
    )


#: what the deployment explorer offers (any name of the drafter grammar and any engine work in the figure itself)
EXPLORER_DRAFTERS = ("model:llama-3.2-1b", "eagle3", "eagle2", "mtp", "medusa", "early-exit:8", "prompt-lookup")
EXPLORER_ENGINES = ("none", "hf", "torch-eager", "compiled", "vllm", "sglang", "trtllm")
#: acceptance kinds as the command line writes them: per-token rate, tokens per round at G, vLLM's accepted/drafted at K
EXPLORER_KINDS = {"alpha": "{v:g}", "mean": "mean:{m:g}@{g}", "vllm-rate": "vllm-rate:{v:g}@{g}"}


def deployment_figure(
    gpu: str = "h100-sxm-80gb",
    target: str = "llama-3.1-8b",
    drafter: str = "model:llama-3.2-1b",
    engine: str = "vllm",
    kind: str = "alpha",
    value: float = 0.7,
    measured_at: int = 5,
    batch: int = 1,
    context: int = 1024,
) -> Figure:
    """Speedup against gamma for a deployment: a GPU, a model, a drafter (grammar), an engine and an acceptance given in
    any of its kinds (converted as ``specroof plan --acceptance`` converts it; the title says what it was read as).

    ``value`` is one slider for every kind, a share in [0, 1]: the per-token rate (``alpha``), the share of the
    ``measured_at`` drafts accepted (``mean``: a mean accepted length of 1 + value x measured_at) or vLLM's accepted
    over drafted (``vllm-rate``)."""
    from roofline.costing.pricing import Pricing
    from roofline.speculation.acceptance import parse_acceptance

    if kind not in EXPLORER_KINDS:
        raise SpecroofError(f"acceptance kind must be one of {', '.join(EXPLORER_KINDS)} (got {kind!r})")
    if not 0.0 <= value <= 1.0:  # mean:3.2 would read as 1 + 3.2 x 5 = 17 tokens a round, a figure never given
        raise SpecroofError(
            f"value is a share in [0, 1] for every kind (got {value!r}): for kind 'mean' the share of the "
            f"{measured_at} drafts accepted"
            + (
                f" (a mean of {value:g} at {measured_at} drafts is value {(value - 1) / measured_at:g})"
                if value >= 1
                else ""
            )
        )
    # a mean accepted length is 1 + value x measured_at tokens per round (value then reads as a share of the drafts)
    text = EXPLORER_KINDS[kind].format(v=value, m=1.0 + value * measured_at, g=measured_at)
    acc = parse_acceptance(text)
    pr = Pricing.of(gpu, engine=None if engine == "none" else engine)
    fig, ax = _axes(None, (7.0, 4.0))
    from roofline.passes.model import get_model
    from roofline.speculation.acceptance_kinds import reused_step_limit
    from roofline.speculation.drafters.base import deepest
    from roofline.speculation.drafters.grammar import as_drafter

    try:
        spec = get_model(target)
        d = as_drafter(drafter, spec)
        top = deepest(d, 16)  # Medusa's heads, a block's drafts
        rate: Any = acc.alpha()
        limit = reused_step_limit(d, spec)  # an MTP module reused past its own step: one rate covers its steps only
        if limit is not None:
            top = min(top, max(limit, 0 if kind == "alpha" else measured_at))
            rate = [rate] * top if top > limit else rate  # a mean measured at G covers G positions (plan's rule)
        g = np.arange(1, top + 1)
        r = speedup(pr, spec, d, rate, g, batch=batch, context=context, curve=isinstance(rate, list))
    except SpecroofError as e:  # a drafter this target cannot run (mtp on a model that ships no module): say why
        ax.text(0.5, 0.5, textwrap.fill(str(e), 70), ha="center", va="center", transform=ax.transAxes, fontsize=8)
        ax.set_axis_off()
        return fig
    best = int(g[int(np.argmax(r.speedup))])
    ax.plot(g, r.speedup, "s-", ms=3, label=f"{target} + {drafter}, {engine if engine != 'none' else 'roofline'}")
    ax.axvline(best, color="0.5", ls=":")
    ax.axhline(1.0, color="k", lw=0.8)
    said = textwrap.fill(acc.describe(), 110)
    ax.set_title(f"{said}\nbest gamma {best}: {float(np.max(r.speedup)):.2f}x on {gpu}, batch {batch}", fontsize=7)
    ax.set_xlabel("speculation length gamma (tokens)")
    ax.set_ylabel("speedup over plain decoding (x)")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8)
    return fig


def deployment_explorer(
    gpus: Sequence[str] = ("a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200-180gb", "mi300x-192gb"),
    targets: Sequence[str] = ("llama-3.1-8b", "qwen2.5-7b", "llama-3.1-70b", "mixtral-8x7b", "qwen3.5-9b"),
) -> Any:
    """Menus for GPU, model, drafter, engine and acceptance kind, sliders for the value, batch and context."""
    w = _widgets()
    if w is None:
        return deployment_figure()
    return w.interactive(
        lambda **kw: deployment_figure(**kw),
        gpu=w.Dropdown(options=list(gpus), value=gpus[1] if len(gpus) > 1 else gpus[0]),
        target=w.Dropdown(options=list(targets), value=targets[0]),
        drafter=w.Dropdown(options=list(EXPLORER_DRAFTERS), value=EXPLORER_DRAFTERS[0]),
        engine=w.Dropdown(options=list(EXPLORER_ENGINES), value="vllm"),
        kind=w.Dropdown(options=list(EXPLORER_KINDS), value="alpha"),
        value=w.FloatSlider(value=0.7, min=0.05, max=0.99, step=0.01),
        measured_at=w.IntSlider(value=5, min=1, max=16, description="at gamma"),
        batch=w.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256], value=1),
        context=w.SelectionSlider(options=[128, 512, 1024, 4096, 16384, 32768], value=1024),
    )


DEMO_VOCAB = ("hi", "hello", "hey", "howdy")
DEMO_P = (0.45, 0.3, 0.15, 0.1)
DEMO_Q = (0.2, 0.6, 0.1, 0.1)


def accept_or_correct_figure(
    token: int = 1,
    u: float = 0.5,
    p: Sequence[float] = DEMO_P,
    q: Sequence[float] = DEMO_Q,
    vocab: Sequence[str] = DEMO_VOCAB,
) -> Figure:
    """One draft token: p, q and the residual, and whether uniform ``u`` keeps the token."""
    v = accept_or_correct(p, q, token, vocab)
    from roofline.plot import verdict_chart

    fig = verdict_chart(v)
    kept = u < v.accept_probability
    fig.axes[0].set_title(
        f"draft proposed {vocab[token]!r}: accept if u < {v.accept_probability:.2f}; u = {u:.2f} -> "
        + ("kept" if kept else "rejected: sample from the residual"),
        fontsize=9,
    )
    return fig


def accept_or_correct_explorer() -> Any:
    """The interactive one-token accept-or-correct demo (static without ipywidgets)."""
    w = _widgets()
    if w is None:
        return accept_or_correct_figure()
    return w.interactive(
        lambda token, u: accept_or_correct_figure(token, u),
        token=w.Dropdown(options=[(name, i) for i, name in enumerate(DEMO_VOCAB)], value=1),
        u=w.FloatSlider(value=0.5, min=0.0, max=0.999, step=0.01),
    )
