"""Fit the roofline to measured passes, and validate: predicted against measured, point by point.

The fitted parameters are the effective memory bandwidth, an effective FLOP/s
per dtype, a fixed overhead per pass and one per layer; the objective is the
relative error of every point (``scipy.optimize.least_squares``). The result is a
hardware profile with a ``[measured]`` block, written back as TOML with provenance.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from roofline.cost import forward_cost
from roofline.errors import SpecroofError
from roofline.hardware import Hardware, Measured, load_hardware, profile_toml_lines
from roofline.model import ModelSpec, get_model
from roofline.roofline import crossover_tokens, pass_time


def measured_knee(new_tokens: Sequence[float], t: Sequence[float]) -> float:
    """Where a hinge t = a + c max(0, n - k) fits the measured times best (flat, then rising).

    Scans k over the measured n (and half-way points), solves a and c by least
    squares for each, returns the best k; n.max() when the curve never rises.
    """
    n = np.asarray(new_tokens, dtype=float)
    y = np.asarray(t, dtype=float)
    ok = np.isfinite(y)
    n, y = n[ok], y[ok]
    if n.size < 4:
        raise SpecroofError("a knee needs at least 4 measured points")
    order = np.argsort(n)
    n, y = n[order], y[order]
    cands = np.unique(np.concatenate([n, (n[1:] + n[:-1]) / 2]))
    best_k, best_err = float(n.max()), np.inf
    for k in cands[(cands >= n[1]) & (cands < n[-2])]:  # at least two points on each side
        X = np.stack([np.ones_like(n), np.maximum(0.0, n - k)], axis=1)
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        if coef[1] * (n[-1] - k) < 0.05 * coef[0]:  # a rise under 5% of the plateau is no knee
            continue
        err = float(np.sum(((X @ coef) - y) ** 2 / y**2))
        if err < best_err:
            best_k, best_err = float(k), err
    return best_k


def _costs(df: pd.DataFrame, specs: dict[str, ModelSpec]) -> dict[str, list[Any]]:
    """Per-point operator FLOPs, bytes and layer counts, grouped by dtype and model (vectorised per group)."""
    out: dict[str, list[Any]] = {}
    keys = ["dtype", "model"] if len(specs) > 1 else ["dtype"]
    for key, g in df.groupby(keys, sort=False):
        dt = str(key[0] if isinstance(key, tuple) else key)
        spec = specs[str(key[1])] if len(specs) > 1 else next(iter(specs.values()))
        c = forward_cost(spec, g["batch"].to_numpy(), g["new_tokens"].to_numpy(), g["context"].to_numpy(), dt)
        out.setdefault(dt, []).append((g.index.to_numpy(), c.flops, c.bytes, spec.n_layers))
    return out


@dataclass(frozen=True)
class FitResult:
    """Fitted hardware, the parameters in SI units, and the fit quality."""

    hardware: Hardware
    params: dict[str, float]
    mape: float
    max_abs_pct_error: float
    n_points: int
    table: pd.DataFrame

    def write_toml(self, path: str | Path) -> Path:
        """Write the fitted profile: the starting profile's blocks plus a ``[measured]`` block with provenance."""
        lines = profile_toml_lines(self.hardware)
        lines += ["", "[measured]"]
        lines.append(f"bandwidth_GB_per_s = {self.params['bandwidth_bytes_per_s'] / 1e9!r}")
        lines.append(f"pass_overhead_us = {self.params['pass_overhead_s'] * 1e6!r}")
        lines.append(f"layer_overhead_us = {self.params['layer_overhead_s'] * 1e6!r}")
        lines.append(f"matmul_half_tokens = {self.params['matmul_half_tokens']!r}")
        lines.append(f'date = "{_dt.datetime.now().isoformat(timespec="seconds")}"')
        lines.append(
            f'method = "specroof measure fit: least squares on relative error over {self.n_points} verify passes"'
        )
        lines.append(f"fit_mape = {self.mape!r}")
        lines += ["", "[measured.compute]"]
        for k, v in self.params.items():
            if k.startswith("flop_per_s_"):
                lines.append(f"{k.removeprefix('flop_per_s_')}_TFLOP_per_s = {v / 1e12!r}")
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n".join(lines) + "\n")
        return p


def fit(
    sweep_df: pd.DataFrame,
    spec: ModelSpec | str | dict[str, ModelSpec],
    hardware: Hardware | str,
    *,
    per_layer_overhead: bool = True,
) -> FitResult:
    """Fit bandwidth, FLOP/s per dtype and overheads to the measured verify passes in ``sweep_df``.

    ``spec`` may be a dict from the sweep's ``model`` names to specs: sweeping models
    of different depths (a target and its draft) is what separates the per-pass from
    the per-layer overhead. ``hardware`` provides the starting point; rows with status
    other than ``ok`` are ignored.
    """
    specs = {k: get_model(v) for k, v in spec.items()} if isinstance(spec, dict) else {"": get_model(spec)}
    spec = next(iter(specs.values()))
    hw = load_hardware(hardware)
    df = sweep_df[sweep_df.get("status", "ok") == "ok"].reset_index(drop=True)
    if len(df) < 3:
        raise SpecroofError(f"the fit needs at least 3 measured points (got {len(df)})")
    t = df["t_median_s"].to_numpy(dtype=float)
    costs = _costs(df, specs)
    dtypes = list(costs)
    for d in dtypes:
        if d not in hw.dtypes and d not in ("fp32", "bf16", "fp16"):
            raise SpecroofError(f"no starting FLOP/s for dtype {d!r} in {hw.id!r}")
    peak0 = [hw.peak(d) if d in hw.dtypes else hw.peak(hw.dtypes[0]) for d in dtypes]
    # Log-parameters keep rates positive. One model streams the same weights at every point, so a
    # fixed overhead could stand in for the weight traffic: the bandwidth is held to a physical band
    # around the starting (measured) figure, the overheads to a fraction of the fastest pass, and a
    # light pull toward zero overhead decides the direction the data cannot.
    # Parameters: log bandwidth, log FLOP/s per dtype, half-saturation tokens, pass and layer overheads.
    bw0 = hw.bandwidth()
    t_min = float(t.min())
    x0 = np.array([np.log(bw0), *np.log(peak0), 8.0, min(1e-5, 0.1 * t_min), 0.0])
    lo = np.array([np.log(bw0 / 3), *(np.log(peak0) - np.log(1e3)), 0.0, 0.0, 0.0])
    max_layers = max(sp.n_layers for sp in specs.values())
    layer_cap = 0.5 * t_min / max_layers if per_layer_overhead else 1e-15
    hi = np.array([np.log(bw0 * 1.5), *(np.log(peak0) + np.log(1e3)), 4096.0, 0.5 * t_min, layer_cap])
    x0 = np.clip(x0, lo, np.nextafter(hi, -np.inf))
    tokens = (df["batch"] * df["new_tokens"]).to_numpy(dtype=float)

    def predict(x: np.ndarray) -> np.ndarray:
        bw = np.exp(x[0])
        pred = np.empty(len(df))
        for i, d in enumerate(dtypes):
            for idx, flops, nbytes, layers in costs[d]:
                comp = flops / np.exp(x[1 + i]) * (1.0 + x[-3] / tokens[idx])
                pred[idx] = np.maximum(nbytes / bw, comp).sum(axis=0) + x[-2] + layers * x[-1]
        return pred

    def residuals(x: np.ndarray) -> np.ndarray:
        pull = 0.05 * np.array([x[-2], max_layers * x[-1]]) / t_min
        return np.concatenate([(predict(x) - t) / t, pull])

    res = least_squares(residuals, x0, bounds=(lo, hi), x_scale="jac", max_nfev=4000)
    x = res.x
    pred = predict(x)
    err = (pred - t) / t
    params = {
        "bandwidth_bytes_per_s": float(np.exp(x[0])),
        **{f"flop_per_s_{d}": float(np.exp(x[1 + i])) for i, d in enumerate(dtypes)},
        "matmul_half_tokens": float(x[-3]),
        "pass_overhead_s": float(x[-2]),
        "layer_overhead_s": float(x[-1]),
    }
    measured = Measured(
        bandwidth_bytes_per_s=params["bandwidth_bytes_per_s"],
        peak_flop_per_s={d: params[f"flop_per_s_{d}"] for d in dtypes},
        pass_overhead_s=params["pass_overhead_s"],
        layer_overhead_s=params["layer_overhead_s"],
        matmul_half_tokens=params["matmul_half_tokens"],
        provenance={"method": "least squares on relative error", "points": len(df)},
    )
    fitted = dataclasses.replace(hw, name=f"{hw.name} (fitted)", measured=measured)
    table = df.assign(t_fitted_s=pred, err_fitted=err)
    return FitResult(fitted, params, float(np.mean(np.abs(err))), float(np.max(np.abs(err))), len(df), table)


def predict_times(df: pd.DataFrame, spec: ModelSpec | str, hardware: Hardware | str) -> np.ndarray:
    """Roofline time (s) of every row's pass on ``hardware`` (measured overrides and overheads included)."""
    spec, hw = get_model(spec), load_hardware(hardware)
    out = np.empty(len(df))
    for dt, g in df.groupby("dtype", sort=False):
        st = pass_time(spec, hw, g["batch"].to_numpy(), g["new_tokens"].to_numpy(), g["context"].to_numpy(), str(dt))
        out[df.index.get_indexer(g.index)] = st.t_step_s
    return out


def validate(
    sweep_df: pd.DataFrame,
    spec: ModelSpec | str,
    apriori: Hardware | str,
    fitted: Hardware | str,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per point: measured, a-priori and fitted predictions and their errors; plus summary figures.

    The summary has ``apriori_mape``, ``fit_mape`` and, for every (dtype, batch,
    context) group swept over new tokens, the measured knee against the crossover
    K the fitted and a-priori models predict.
    """
    spec = get_model(spec)
    df = sweep_df[sweep_df.get("status", "ok") == "ok"].reset_index(drop=True)
    df = df.assign(
        t_apriori_s=predict_times(df, spec, apriori),
        t_fitted_s=predict_times(df, spec, fitted),
    )
    df["err_apriori"] = (df["t_apriori_s"] - df["t_median_s"]) / df["t_median_s"]
    df["err_fitted"] = (df["t_fitted_s"] - df["t_median_s"]) / df["t_median_s"]
    knees = []
    for (dt, b, c), g in df.groupby(["dtype", "batch", "context"]):
        if g["new_tokens"].nunique() < 6:
            continue
        k_meas = measured_knee(g["new_tokens"], g["t_median_s"])
        knees.append(
            {
                "dtype": dt,
                "batch": int(b),
                "context": int(c),
                "crossover_measured": k_meas,
                "crossover_fitted": int(crossover_tokens(spec, load_hardware(fitted), int(b), int(c), str(dt))),
                "crossover_apriori": int(crossover_tokens(spec, load_hardware(apriori), int(b), int(c), str(dt))),
                "crossover_fitted_curve": measured_knee(g["new_tokens"], g["t_fitted_s"]),
            }
        )
    summary = {
        "apriori_mape": float(np.mean(np.abs(df["err_apriori"]))),
        "fit_mape": float(np.mean(np.abs(df["err_fitted"]))),
        "points": len(df),
        "crossover": knees,
    }
    return df, summary


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
    repeats: int = 9,
    out: str | Path | None = None,
    progress: bool = True,
) -> LoopResult:
    """Measure a verify sweep, fit the roofline to it and validate both predictions against it.

    ``apriori`` is the profile used before any fit (default: the microbenchmarked
    profile of this device, measured now).
    """
    from measure.device import default_device
    from measure.microbench import measure_profile
    from measure.verify import sweep

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
        repeats=max(1, repeats // 3),
        rounds=3,  # three shuffled visits per point: noise on a shared machine spreads out
        out=outdir / "sweep" if outdir else None,
        progress=progress,
    )
    fitted = fit(df, spec, apriori_hw)
    table, summary = validate(df, spec, apriori_hw, fitted.hardware)
    summary["fit_params"] = fitted.params
    if outdir is not None:
        table.to_csv(outdir / "validation.csv", index=False)
        fitted.write_toml(outdir / "fitted-profile.toml")
    return LoopResult(df, table, summary, apriori_hw, fitted)
