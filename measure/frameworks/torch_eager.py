"""The harness as it is: specroof's own Transformer (static KV cache, one launch per operator) in eager PyTorch.

Plain decoding is :func:`measure.decode.autoregressive_generate`, speculative decoding
:func:`measure.decode.speculative_generate` with a separate draft model, at a fixed gamma
or Hugging Face's heuristic schedule; any batch size.
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from measure.decode import autoregressive_generate, speculative_generate
from measure.frameworks.common import Clock, FrameworkRun, timed
from measure.models import Transformer
from roofline.speculation.gamma_policies import HeuristicSchedule

NAME = "torch-eager"


def available() -> str | None:
    return None  # the harness needs only torch


def version() -> str:
    import torch

    return str(torch.__version__)


def build(model: Transformer, dtype: str, device: Any) -> Transformer:
    """The harness's model runs as it is (already in ``dtype`` on ``device``)."""
    return model


def generate(
    model: Transformer,
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    assistant: Any = None,
    gamma: int | str = 0,
    count: bool = False,
    clock: Clock = time.perf_counter,
) -> FrameworkRun:
    """Plain (no ``assistant``) or speculative decoding; ``clock`` seconds around the call, as HF ``generate``."""
    if assistant is None:
        r: Any
        r, sec = timed(lambda: autoregressive_generate(model, prompts, max_new_tokens), model.device, clock)
        return FrameworkRun(r.tokens, sec)
    policy: Any = HeuristicSchedule() if gamma == "heuristic" else int(gamma)
    r, sec = timed(lambda: speculative_generate(model, assistant, prompts, policy, max_new_tokens), model.device, clock)
    per = r.rounds.groupby("round")["drafted"].first() if not r.rounds.empty else pd.Series(dtype=int)
    return FrameworkRun(r.tokens, sec, rounds=len(per), draft_passes=int(per.sum()))
