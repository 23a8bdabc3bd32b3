"""Interactive explorers for notebooks (ipywidgets), degrading to static figures without widgets.

``speedup_explorer()`` shows, for one GPU, batch and context, the idealised
speedup E / (gamma c + 1) next to the roofline speedup of a real pairing, as
alpha, gamma, c, batch, context and the GPU change. ``accept_or_correct_explorer()``
is the one-token accept-or-correct demo of the worked examples: pick the draft's token and a uniform draw, see
whether it is kept and where the correction would come from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from roofline.plot import _axes
from roofline.speculative import expected_tokens, ideal_speedup, speedup
from roofline.verification import accept_or_correct


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
