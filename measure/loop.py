"""The whole measured loop in one call: predict -> measure a verify sweep -> fit -> validate.

It sits above ``measure.sweep`` (which prices its points with ``measure.fit.predict_times``) and ``measure.fit``,
so neither imports the other's orchestration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from measure.device import default_device
from measure.fit import FitResult, fit, validate
from measure.microbench import measure_profile
from measure.sweep import sweep
from roofline.costing.hardware import Hardware, load_hardware
from roofline.passes.model import ModelSpec


@dataclass(frozen=True)
class LoopResult:
    """Everything one predict -> measure -> fit -> validate run produced."""

    sweep: pd.DataFrame
    validation: pd.DataFrame
    summary: dict[str, Any]
    apriori: Hardware
    fitted: FitResult


def sweep_fit_validate(
    spec: ModelSpec | str,
    *,
    apriori: Hardware | str | None = None,
    batch: Sequence[int] = (1, 4),
    new_tokens: Sequence[int] = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64),
    context: Sequence[int] = (256, 2048),
    dtype: str = "bf16",
    device: Any = None,
    repeats: int = 3,
    rounds: int = 3,
    out: str | Path | None = None,
    progress: bool = True,
    statistic: str = "min",
    resume: bool = False,
    budget: Any = None,
) -> LoopResult:
    """Measure a verify sweep, fit the roofline to it and validate both predictions against it.

    ``apriori`` is the profile used before any fit (default: the microbenchmarked
    profile of this device, measured now). With ``out``, a sweep saved there is
    replaced (this function's job is a fresh measurement) unless ``resume``
    continues it. ``budget`` (seconds) stops further visits of the points once spent.
    """
    dev = device if device is not None else default_device()
    outdir = Path(out) if out is not None else None
    if apriori is None:
        path = (outdir or Path.cwd() / ".specroof") / "apriori-profile.toml"
        apriori_hw = measure_profile(path, dev, dtypes=("fp32", dtype) if dtype != "fp32" else ("fp32",))
    else:
        apriori_hw = load_hardware(apriori)
    df = sweep(
        spec,
        batch,
        new_tokens,
        context,
        [dtype],
        device=dev,
        hardware=apriori_hw,
        repeats=repeats,
        rounds=rounds,  # shuffled visits per point: noise on a shared machine spreads out
        out=outdir / "sweep" if outdir else None,
        resume=resume and outdir is not None,
        overwrite=not resume and outdir is not None,
        budget=budget,
        progress=progress,
    )
    fitted = fit(df, spec, apriori_hw, statistic=statistic)
    table, summary = validate(df, spec, apriori_hw, fitted.hardware, statistic=statistic)
    summary["fit_params"] = fitted.params
    if outdir is not None:
        table.to_csv(outdir / "validation.csv", index=False)
        fitted.write_toml(outdir / "fitted-profile.toml")
    return LoopResult(df, table, summary, apriori_hw, fitted)
