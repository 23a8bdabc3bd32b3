"""Sweeps: pass time over batch sizes, and prefill against decode."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from roofline.core.errors import check_min
from roofline.costing.passtime.footprint import memory_footprint
from roofline.costing.passtime.passes import pass_time
from roofline.costing.passtime.step import (
    HardwareLike,
)
from roofline.costing.pricing import DEFAULT_CONTEXT, pricing_of
from roofline.passes.model import ModelSpec, get_model


def batch_sweep(
    spec: ModelSpec | str,
    hardware: HardwareLike,
    batches: ArrayLike,
    *,
    new_tokens: int = 1,
    context: int = DEFAULT_CONTEXT,
    dtype: str | None = None,
    efficiency: bool | None = None,
) -> pd.DataFrame:
    """Per-user latency and total throughput against batch size (the classic batch graph)."""
    pr = pricing_of(hardware, dtype=dtype, efficiency=efficiency)
    spec = get_model(spec)
    B = check_min("batches", batches, 1, integer=True).ravel()
    st = pass_time(spec, pr, B, new_tokens, context)
    fp = memory_footprint(
        spec, B, context, weight_dtype=pr.stored_weight_dtype, act_dtype=pr.dtype, new_tokens=new_tokens
    )
    cap = pr.hardware.memory_bytes if pr.hardware.memory_bytes is not None else np.inf
    return pd.DataFrame(
        {
            "batch": B,
            "t_step_s": st.t_step_s,
            "latency_per_token_s": st.t_step_s / new_tokens,
            "tokens_per_s_per_user": new_tokens / st.t_step_s,
            "tokens_per_s_total": st.tokens_per_s,
            "intensity_flop_per_byte": st.intensity,
            "bound": st.bound,
            "memory_bytes": fp.total_bytes,
            "fits_in_memory": fp.total_bytes <= cap,
        }
    )


def prefill_vs_decode(
    spec: ModelSpec | str,
    hardware: HardwareLike,
    prompt_tokens: int,
    batch: int = 1,
    dtype: str | None = None,
) -> pd.DataFrame:
    """Prefill of ``prompt_tokens`` against one decode step after it: time, intensity, bound."""
    pr = pricing_of(hardware, dtype=dtype)
    rows = []
    for phase, n, ctx in (("prefill", prompt_tokens, 0), ("decode", 1, prompt_tokens)):
        st = pass_time(spec, pr, batch, n, ctx)
        rows.append(
            {
                "phase": phase,
                "new_tokens": n,
                "context": ctx,
                "t_step_s": float(st.t_step_s),
                "t_memory_s": float(st.t_memory_s),
                "t_compute_s": float(st.t_compute_s),
                "intensity_flop_per_byte": float(st.intensity),
                "tokens_per_s": float(st.tokens_per_s),
                "bound": str(st.bound),
            }
        )
    return pd.DataFrame(rows)
