"""Kernel benchmark tables checked against the pass's terms: the fused-MoE layer call (docs/cost-model.md, section 40).

``published/kernels/*.toml`` holds one file per source: a kernel benchmark a maintainer or user posted (vLLM's
``benchmarks/kernels/benchmark_moe.py``, SGLang's ``tuning_fused_moe_triton.py``), its GPU, and per layer shape
(``[[series]]``: experts, experts per token, hidden and expert width, TP, the experts' dtype) the kernel time at each
token count. :func:`kernel_table` prices every row with :func:`roofline.costing.passtime.fused_moe_layer_seconds`, the term a
pass adds per MoE layer, twice: with the datasheet roofline and with the row's serving engine. :func:`fit_moe_kernel`
fits the engine's three fused-MoE terms (its floor per layer, its time per distinct expert and its tiles' half rows,
section 56) to the calibration rows only; the held-out rows check them.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine, load_engine
from roofline.costing.passtime import fused_moe_layer_seconds
from roofline.costing.pricing import Pricing

KERNELS_DIR = Path(__file__).resolve().parents[2] / "published" / "kernels"

#: the fields of a ``[[series]]`` table: the layer's shape and the figures
SERIES_KEYS = ("name", "command", "experts", "experts_per_token", "hidden", "moe_intermediate", "tp", "weight_dtype",
               "tokens", "kernel_us")  # fmt: skip

#: the experts' dtypes a kernel row may name, and the arithmetic the kernel runs them at (w8a8: fp8 products)
KERNEL_DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}

#: the engine terms the kernel rows fit: (lower bound, start, upper bound), seconds (the tile's half rows: rows)
MOE_KERNEL_PARAMETERS: dict[str, tuple[float, float, float]] = {
    "moe_layer_s": (0.0, 2e-5, 2e-4),
    "moe_expert_s": (0.0, 3e-7, 1e-5),
    "moe_tile_half_rows": (0.0, 50.0, 1000.0),
}

#: the largest token count a row may have: a verify of up to 128 sequences x 16 tokens (docs/cost-model.md, section
#: 56; a wider call is a prefill's)
MAX_TOKENS = 2048

#: the folders :func:`load_kernel_rows` reads by default: the tables of 1-128 tokens and those of wider calls
KERNEL_FOLDERS = (KERNELS_DIR, KERNELS_DIR / "wide")


def load_kernel_rows(folder: str | Path | None = None) -> pd.DataFrame:
    """Every kernel row, one per (source, layer shape, token count), with its source's fields (tidy): of ``folder``,
    else of :data:`KERNEL_FOLDERS`."""
    rows = []
    paths = (
        sorted(Path(folder).glob("*.toml")) if folder else [p for f in KERNEL_FOLDERS for p in sorted(f.glob("*.toml"))]
    )
    for path in paths:
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise SpecroofError(f"{path}: {e}") from None
        for key in ("source", "url", "hardware", "use", "series"):
            if key not in data:
                raise SpecroofError(f"{path.name}: missing {key!r}")
        if data["use"] not in ("calibration", "validation"):
            raise SpecroofError(f"{path.name}: use must be 'calibration' or 'validation' (got {data['use']!r})")
        for s in data["series"]:
            where = f"{path.name}: series {s.get('name', '?')!r}"
            unknown = sorted(set(s) - set(SERIES_KEYS))
            missing = sorted(set(SERIES_KEYS) - set(s))
            if unknown or missing:
                what = f"unknown field {unknown[0]!r}" if unknown else f"missing {missing[0]!r}"
                raise SpecroofError(f"{where}: {what} (fields: {', '.join(SERIES_KEYS)})")
            if s["weight_dtype"] not in KERNEL_DTYPES:
                raise SpecroofError(f"{where}: weight_dtype must be one of {', '.join(KERNEL_DTYPES)}")
            tokens, times = s["tokens"], s["kernel_us"]
            if len(tokens) != len(times) or not tokens:
                raise SpecroofError(f"{where}: tokens and kernel_us must be lists of one length")
            for key in ("experts", "experts_per_token", "hidden", "moe_intermediate", "tp"):
                if not isinstance(s[key], int) or isinstance(s[key], bool) or s[key] < 1:
                    raise SpecroofError(f"{where}: {key} must be a whole number >= 1 (got {s[key]!r})")
            if s["experts_per_token"] > s["experts"] or s["moe_intermediate"] % s["tp"]:
                raise SpecroofError(f"{where}: experts_per_token <= experts and a TP that divides the expert width")
            for t, us in zip(tokens, times, strict=True):
                if not (isinstance(t, int) and 1 <= t <= MAX_TOKENS):
                    raise SpecroofError(f"{where}: tokens must be whole numbers in [1, {MAX_TOKENS}] (got {t!r})")
                if not (isinstance(us, (int, float)) and math.isfinite(us) and us > 0):
                    raise SpecroofError(f"{where}: kernel_us must be finite numbers > 0 (got {us!r})")
                rows.append({
                    "file": path.name, "source": data["source"], "url": data["url"], "use": data["use"],
                    "hardware": data["hardware"], "engine": data.get("engine", "vllm"), "series": s["name"],
                    "experts": s["experts"], "experts_per_token": s["experts_per_token"], "hidden": s["hidden"],
                    "expert_width": s["moe_intermediate"] // s["tp"], "tp": s["tp"],
                    "weight_dtype": s["weight_dtype"], "tokens": int(t), "published_us": float(us),
                })  # fmt: skip
    return pd.DataFrame(rows)


def _pricing(r: Any, engine: Engine | None) -> Pricing:
    # the kernel runs on one device: its expert slice (the width over TP) is the shape, priced at one device's rates
    dt = KERNEL_DTYPES[r["weight_dtype"]]
    return Pricing.of(r["hardware"], engine=engine, dtype=dt)


def predict_kernel_us(r: Any, engine: Engine | str | None) -> float:
    """The row's kernel time in microseconds as a pass under ``engine`` prices one MoE layer (None: the datasheet)."""
    e = load_engine(engine) if isinstance(engine, str) else engine
    t = fused_moe_layer_seconds(_pricing(r, e), int(r["experts"]), int(r["experts_per_token"]), int(r["hidden"]),
                                int(r["expert_width"]), int(r["tokens"]))  # fmt: skip
    return float(t) * 1e6


def kernel_table(rows: pd.DataFrame | None = None, engines: dict[str, Engine] | None = None) -> pd.DataFrame:
    """Published against predicted kernel time per row: the datasheet roofline's and the engine-aware one's errors."""
    df = load_kernel_rows() if rows is None else rows
    out = []
    for _, r in df.iterrows():
        eng = (engines or {}).get(r["engine"]) or load_engine(r["engine"])
        roof, aware = predict_kernel_us(r, None), predict_kernel_us(r, eng)
        out.append({
            "source": r["file"].removesuffix(".toml"), "use": r["use"], "hardware": r["hardware"],
            "engine": r["engine"], "series": r["series"], "tokens": int(r["tokens"]),
            "published_us": r["published_us"], "roofline_us": roof, "engine_us": aware,
            "error_roofline": roof / r["published_us"] - 1.0, "error_engine": aware / r["published_us"] - 1.0,
        })  # fmt: skip
    return pd.DataFrame(out)


def kernel_summary(table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Median and max |error| per use, the bare roofline's beside the engine-aware one's."""
    t = kernel_table() if table is None else table
    g = t.groupby("use")
    return pd.DataFrame({
        "rows": g.size(), "median_roofline": g["error_roofline"].apply(lambda e: e.abs().median()),
        "median_engine": g["error_engine"].apply(lambda e: e.abs().median()),
        "max_engine": g["error_engine"].apply(lambda e: e.abs().max()),
    }).reset_index()  # fmt: skip


def fit_moe_kernel(
    rows: pd.DataFrame | None = None, engine: Engine | str = "vllm"
) -> tuple[dict[str, float], pd.DataFrame]:
    """Fit the fused-MoE floor per layer, time per distinct expert and tile half rows (:data:`MOE_KERNEL_PARAMETERS`)
    to the calibration rows: least squares on log(predicted / published), under ``engine``'s device rates (the serving
    family shares them). Returns the fitted values (seconds) and the table of every row (held out included) under them.
    """
    from scipy.optimize import least_squares

    base = load_engine(engine)
    assert base is not None
    df = load_kernel_rows() if rows is None else rows
    cal = df[df["use"] == "calibration"]
    names = list(MOE_KERNEL_PARAMETERS)
    if len(cal) < len(names) + 2:
        raise SpecroofError(f"{len(cal)} calibration kernel rows for {len(names)} parameters: too few")
    lo = np.array([MOE_KERNEL_PARAMETERS[n][0] for n in names])
    hi = np.array([MOE_KERNEL_PARAMETERS[n][2] for n in names])
    x0 = np.array([MOE_KERNEL_PARAMETERS[n][1] for n in names]) / hi

    def build(x: np.ndarray, name: str) -> Engine:
        e = load_engine(name)
        assert e is not None
        values: dict[str, Any] = {n: float(v) for n, v in zip(names, x * hi, strict=True)}
        return dataclasses.replace(e, **values)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.array([math.log(predict_kernel_us(r, build(x, r["engine"])) / r["published_us"])
                         for _, r in cal.iterrows()])  # fmt: skip

    fit = least_squares(residuals, x0, bounds=(lo / hi, hi / hi), x_scale="jac", xtol=1e-12, ftol=1e-12)
    values = {n: float(v) for n, v in zip(names, fit.x * hi, strict=True)}
    engines = {name: build(fit.x, name) for name in set(df["engine"])}
    return values, kernel_table(df, engines)
