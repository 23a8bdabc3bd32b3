"""Predicted against measured speculative speedup, per drafter, gamma and batch.

The prediction is the roofline speedup of ``roofline.speculative`` with the pass
times of a profile fitted to the target's verify passes on this device, the
acceptance curve measured in the same run, and the round's fixed host cost
(sampling, acceptance, commit) as measured. The measurement is the speculative
run's decode time against the autoregressive baseline's, same prompts, same
number of tokens (decode only, prefill excluded).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from measure.decode import autoregressive_generate, speculative_generate
from measure.models import Transformer
from roofline.hardware import Hardware
from roofline.speculative import DraftModel, EarlyExit, speedup


def speedup_validation(
    target: Transformer,
    drafters: dict[str, Any],
    prompts_by_batch: dict[int, list[list[int]]],
    gammas: Sequence[int],
    fitted: Hardware,
    *,
    max_new_tokens: int = 64,
    dtype: str = "fp32",
    repeats: int = 2,
) -> pd.DataFrame:
    """One row per (drafter, batch, gamma): measured and predicted speedup and the acceptance behind them.

    ``drafters`` maps a label to a draft :class:`Transformer` or an early-exit layer count.
    """
    rows = []
    for batch, prompts in prompts_by_batch.items():
        base = min(
            (autoregressive_generate(target, prompts, max_new_tokens) for _ in range(repeats)), key=lambda r: r.decode_s
        )
        context = int(np.mean([len(p) for p in prompts]) + max_new_tokens / 2)
        for label, d in drafters.items():
            # measure.decode's early exit recomputes every layer in verify: price exactly that
            model_drafter = DraftModel(d.spec) if isinstance(d, Transformer) else EarlyExit(int(d), reuse_kv=False)
            for g in gammas:
                runs = [speculative_generate(target, d, prompts, g, max_new_tokens) for _ in range(repeats)]
                run = min(runs, key=lambda r: r.decode_s)
                curve = np.nan_to_num(run.acceptance_curve(), nan=0.0)
                per_round = run.rounds.groupby("round")[["t_accept_s", "t_commit_s"]].first().sum(axis=1).median()
                pred = speedup(
                    target.spec,
                    model_drafter,
                    fitted,
                    list(curve),
                    g,
                    batch,
                    context,
                    dtype,
                    round_overhead_s=float(per_round),
                )
                measured = base.decode_s / run.decode_s
                m = run.metrics()
                rows.append(
                    {
                        "drafter": label,
                        "batch": batch,
                        "gamma": g,
                        "acceptance_rate": m.acceptance_rate,
                        "mean_acceptance_length": m.mean_acceptance_length,
                        "speedup_measured": measured,
                        "speedup_predicted": float(pred.speedup),
                        "rel_error": float(pred.speedup) / measured - 1.0,
                        "baseline_tokens_per_s": base.tokens_per_s,
                        "spec_tokens_per_s": run.tokens_per_s,
                    }
                )
    return pd.DataFrame(rows)
