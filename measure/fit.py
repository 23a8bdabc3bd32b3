"""Fit the roofline to measured passes, and validate: predicted against measured, point by point.

The fitted parameters are the effective memory bandwidth, an effective FLOP/s
per dtype, the half-saturation tokens of small matrix products, the overlap of
memory and compute time, a one-token (matrix-vector) bandwidth and an attention
FLOP/s where the sweep can tell them apart, a fixed overhead per pass and one per
layer; the objective is the
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
from scipy.optimize import least_squares, minimize_scalar

from roofline.core.errors import SpecroofError
from roofline.costing.engine import HARNESS_ENGINE
from roofline.costing.hardware import FLOAT_DTYPES, Hardware, Measured, load_hardware, write_profile
from roofline.costing.passtime import combine, crossover_tokens, pass_time
from roofline.costing.timemodel import TimeModel
from roofline.passes.cost import PassCost, forward_cost
from roofline.passes.model import ModelSpec, get_model


def _curve(new_tokens: Sequence[float], t: Sequence[float], what: str) -> tuple[np.ndarray, np.ndarray]:
    """The measured points of one curve with a finite time, sorted by token count (at least 3)."""
    n = np.asarray(new_tokens, dtype=float)
    y = np.asarray(t, dtype=float)
    ok = np.isfinite(y)
    n, y = n[ok], y[ok]
    if n.size < 3:
        raise SpecroofError(f"{what} needs at least 3 measured points")
    order = np.argsort(n)
    return n[order], y[order]


def measured_knee(new_tokens: Sequence[float], t: Sequence[float], rise: float = 0.10) -> float:
    """Tokens per sequence a pass takes before its time rises ``rise`` above the smallest pass's.

    The verify width that costs at most 10% more than the narrowest pass, read off a
    measured curve by linear interpolation between its points. For an ideal roofline
    (flat at t0, then c n) it is K + rise t0 / c = (1 + rise) K; where memory and
    compute time add (overlap 0, CPUs) it is rise K. It hangs on two points and the
    first, so a pass's noise moves it by noise / slope tokens, which is many where the
    curve rises gently: :func:`measured_crossover` is the steady read-out of K.
    ``n.max()`` when the curve never rises.
    """
    n, y = _curve(new_tokens, t, "a knee")
    limit = (1.0 + rise) * y[0]
    above = np.nonzero(y > limit)[0]
    if above.size == 0:
        return float(n.max())
    i = int(above[0])
    return float(n[i - 1] + (limit - y[i - 1]) / (y[i] - y[i - 1]) * (n[i] - n[i - 1]))


def measured_crossover(new_tokens: Sequence[float], t: Sequence[float], overlap: float = 1.0) -> float:
    """Crossover K read off a measured curve: its memory time over its compute time per token.

    K = t_mem / t_compute_per_token, with both taken from the measurements
    instead of from datasheets. The curve is fitted, in relative error, by the
    roofline's own shape with two free numbers: t(n) = combine(M, M n / K, overlap),
    that is max(M, C n) + (1 - overlap) min(M, C n) with C = M / K. For overlap 1 it
    is the hinge flat-then-linear and K is where the two lines meet; for overlap 0 (a
    CPU whose cores both stream and compute) it is the line M + C n and K is its
    intercept over its slope, defined even when the sweep ends before K.

    ``overlap`` is the device's, from a fit over the whole sweep: below K only
    (1 - overlap) C is visible, so one curve cannot tell overlap and C apart. Every
    point weighs in, which is why this is steadier than reading where the curve
    first passes a threshold: there one pass's noise moves the answer by
    noise / slope tokens.

    Returns K in tokens per sequence, ``inf`` when the curve does not rise.
    """
    n, y = _curve(new_tokens, t, "a crossover")
    if np.any(y <= 0) or np.any(n <= 0):
        raise SpecroofError("pass times and token counts must be positive")
    if not 0.0 <= overlap <= 1.0:
        raise SpecroofError(f"overlap must lie in [0, 1] (got {overlap})")

    def err(k: np.ndarray) -> np.ndarray:
        # for each K the shape, its best scale M in closed form, and the summed squared relative error
        f = combine(np.ones((k.size, n.size)), n / k[:, None], overlap) / y
        m = f.sum(axis=1) / (f * f).sum(axis=1)
        return np.asarray(((m[:, None] * f - 1.0) ** 2).sum(axis=1))

    k = np.geomspace(n.min() / 64, 1e3 * n.max(), 4001)
    i = int(np.argmin(err(k)))
    if i == k.size - 1:
        return float("inf")
    lo, hi = np.log(k[max(i - 1, 0)]), np.log(k[min(i + 1, k.size - 1)])
    best = minimize_scalar(lambda x: float(err(np.exp(np.atleast_1d(x)))[0]), bounds=(lo, hi), method="bounded")
    return float(np.exp(best.x))


#: a crossover read off a curve that ends at ``widest`` tokens is reported as a figure up to this many times that
#: width (extrapolated past it where memory and compute time add, as on a CPU); beyond, the sweep cannot place it
EXTRAPOLATE_LIMIT = 4.0


def crossover_status(k: float, knee: float, widest: float) -> str:
    """Whether a crossover K read off a curve swept up to ``widest`` new tokens is a measurement.

    ``"flat"``: the curve never rose 10% above its narrowest pass (``knee`` at the widest: passes that cost
    the host's time, not the device's, are flat at every width), so K is not measured; ``"beyond"``: K lies
    more than :data:`EXTRAPOLATE_LIMIT` times past the widest pass (a curve that barely rose; an eager GPU sweep
    read 974 and 2858 where the roofline says about 200); ``"extrapolated"``: past the widest pass but within
    that limit (the line's intercept over its slope, defined before the curve bends); ``"measured"``: inside.
    """
    if not np.isfinite(k) or knee >= widest:
        return "flat"
    if k > EXTRAPOLATE_LIMIT * widest:
        return "beyond"
    return "extrapolated" if k > widest else "measured"


def _column(statistic: str) -> str:
    if statistic not in ("min", "median"):
        raise SpecroofError(f"statistic must be 'min' or 'median' (got {statistic!r})")
    return f"t_{statistic}_s"


def _costs(df: pd.DataFrame, specs: dict[str, ModelSpec]) -> dict[str, list[tuple[np.ndarray, PassCost]]]:
    """Per-point pass costs, grouped by dtype and model (vectorised per group): {dtype: [(row index, cost)]}."""
    out: dict[str, list[tuple[np.ndarray, PassCost]]] = {}
    keys = ["dtype", "model"] if len(specs) > 1 else ["dtype"]
    for key, g in df.groupby(keys, sort=False):
        dt = str(key[0] if isinstance(key, tuple) else key)
        spec = specs[str(key[1])] if len(specs) > 1 else next(iter(specs.values()))
        c = forward_cost(
            spec, g["batch"].to_numpy(), g["new_tokens"].to_numpy(), g["context"].to_numpy(), weight_dtype=dt
        )
        out.setdefault(dt, []).append((g.index.to_numpy(), c))
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
    #: free parameters the fit adjusted
    n_params: int = 0

    @property
    def warning(self) -> str | None:
        """A sentence when the fit had too few points to pin its parameters (its MAPE then flatters)."""
        if self.n_points < 2 * self.n_params:
            return (
                f"only {self.n_points} points for {self.n_params} free parameters: the fit can match almost any "
                f"curve, so its MAPE says little; measure at least {2 * self.n_params} points"
            )
        return None

    def residuals_by_rows(self) -> pd.DataFrame:
        """The fit's signed relative error grouped by the row counts the harness runs one kernel for.

        One row per range of pass rows (batch x new tokens: 1, 2, 3-16, more), with
        ``points``, ``err_mean`` (signed: above 0, the fit prices those passes high) and
        ``err_max_abs``. The harness picks a kernel per range (:func:`measure.models.rows_bucket`),
        and the fit gives each range with points its own streaming rate but one FLOP rate to
        all of them: where the ranges' errors have opposite signs, that is the model's shape
        missing, not the machine's noise.
        """
        from measure.models import ROWS_RANGES, rows_bucket

        t = self.table
        bucket = np.array([rows_bucket(int(r)) for r in (t["batch"] * t["new_tokens"]).to_numpy(dtype=int)])
        err = t["err_fitted"].to_numpy(dtype=float)
        out = []
        for b in sorted(set(bucket.tolist())):
            e = err[bucket == b]
            out.append(
                {
                    "rows": ROWS_RANGES[b],
                    "points": int(e.size),
                    "err_mean": float(e.mean()),
                    "err_max_abs": float(np.abs(e).max()),
                }
            )
        return pd.DataFrame(out)

    def write_toml(self, path: str | Path) -> Path:
        """Write the fitted profile: the starting profile's blocks plus a ``[measured]`` block with provenance."""
        m = self.hardware.measured
        assert m is not None
        prov = {
            **m.provenance,
            "date": _dt.datetime.now().isoformat(timespec="seconds"),
            "method": f"specroof measure fit: least squares on relative error over {self.n_points} verify passes",
            "fit_mape": self.mape,
        }
        prov.setdefault("engine", HARNESS_ENGINE)
        return write_profile(dataclasses.replace(self.hardware, measured=dataclasses.replace(m, provenance=prov)), path)


def fit(
    sweep_df: pd.DataFrame,
    spec: ModelSpec | str | dict[str, ModelSpec],
    hardware: Hardware | str,
    *,
    per_layer_overhead: bool = True,
    statistic: str = "min",
) -> FitResult:
    """Fit bandwidth, FLOP/s per dtype and overheads to the measured verify passes in ``sweep_df``.

    Where the sweep has one-token and longer passes, one-token passes get their own
    bandwidth (matrix-vector kernels), and so may each range of a few rows the harness
    runs its own kernel for (2, 3-16: ``measure.models.ROWS_TOPS``) where the sweep has
    two points or more in it and wider ones beside, if Akaike's criterion keeps the rate
    (the data must support it beyond their noise); where the context varies, the
    attention products get their own FLOP/s. All are :class:`roofline.costing.timemodel.TimeModel`
    refinements a datasheet profile does not have.

    ``spec`` may be a dict from the sweep's ``model`` names to specs: sweeping models
    of different depths (a target and its draft) is what separates the per-pass from
    the per-layer overhead. ``hardware`` provides the starting point; rows with status
    other than ``ok`` are ignored.

    ``statistic`` picks the measured time per point: ``"min"`` (default) or
    ``"median"`` over the repetitions. On a shared machine interference only ever
    adds time, so the minimum is the stable estimate of what the pass costs (Chen and
    Revels, "Robust benchmarking in noisy environments", 2016); on a quiet device the
    two agree.
    """
    specs = {k: get_model(v) for k, v in spec.items()} if isinstance(spec, dict) else {"": get_model(spec)}
    spec = next(iter(specs.values()))
    hw = load_hardware(hardware)
    df = sweep_df[sweep_df.get("status", "ok") == "ok"].reset_index(drop=True)
    if len(df) < 3:
        raise SpecroofError(f"the fit needs at least 3 measured points (got {len(df)})")
    if _column(statistic) not in df:
        raise SpecroofError(f"the sweep has no {_column(statistic)!r} column; pick statistic='median' or re-measure")
    t = df[_column(statistic)].to_numpy(dtype=float)
    costs = _costs(df, specs)
    dtypes = list(costs)
    if not hw.dtypes:
        raise SpecroofError(
            f"profile {hw.id!r} has no compute peaks to start the fit from: use a profile with them, or let "
            "`specroof measure bench` measure this device"
        )
    for d in dtypes:
        if d not in hw.dtypes and d not in FLOAT_DTYPES:
            raise SpecroofError(f"no starting FLOP/s for dtype {d!r} in {hw.id!r}")
    peak0 = [hw.peak(d) if d in hw.dtypes else hw.peak(hw.dtypes[0]) for d in dtypes]
    tokens = (df["batch"] * df["new_tokens"]).to_numpy(dtype=float)
    # One-token passes run matrix-vector kernels and get their own bandwidth when the sweep has
    # both kinds; the attention products get their own throughput when the context varies.
    gemv = bool((tokens == 1).any() and (tokens > 1).any())
    attn = df["context"].nunique() > 1
    # Log-parameters keep rates positive. One model streams the same weights at every point, so a
    # fixed overhead could stand in for the weight traffic: the bandwidth is held to a physical band
    # around the starting (measured) figure, the overheads to a fraction of the fastest pass, and a
    # light pull toward zero overhead decides the direction the data cannot.
    bw0 = hw.bandwidth()
    t_min = float(t.min())
    max_layers = max(sp.n_layers for sp in specs.values())
    layer_cap = 0.5 * t_min / max_layers if per_layer_overhead else 1e-15
    names = ["log_bw", *[f"log_flops_{d}" for d in dtypes], "half_tokens"]
    x0l = [np.log(bw0), *np.log(peak0), 1.0]
    lol = [np.log(bw0 / 3), *(np.log(peak0) - np.log(1e3)), 0.0]
    hil = [np.log(bw0 * 1.5), *(np.log(peak0) + np.log(1e3)), 4096.0]
    if gemv:  # matrix-vector kernels can read faster than a copy writes
        names.append("log_gemv_bw")
        x0l.append(np.log(bw0))
        lol.append(np.log(bw0 / 3))
        hil.append(np.log(bw0 * 2.5))
    if attn:
        names.append("log_attn_flops")
        x0l.append(np.log(peak0[0] / 4))
        lol.append(np.log(peak0[0]) - np.log(1e4))
        hil.append(np.log(peak0[0]) + np.log(10))
    # memory/compute overlap: from the starting profile (microbenchmarked), free within [0, 1]
    names.append("overlap")
    x0l.append(hw.overlap)
    lol.append(0.0)
    hil.append(1.0)
    names += ["pass_overhead", "layer_overhead"]
    x0 = np.array([*x0l, min(1e-5, 0.1 * t_min), 0.0])
    lo = np.array([*lol, 0.0, 0.0])
    hi = np.array([*hil, 0.5 * t_min, layer_cap])
    x0 = np.clip(x0, lo, np.nextafter(hi, -np.inf))
    at = {n: i for i, n in enumerate(names)}

    def model_of(x: np.ndarray, ranges: Sequence[int]) -> TimeModel:
        """The fit's parameter vector as the time model every prediction uses (``ranges``' rates at its end)."""
        return TimeModel(
            bandwidth_bytes_per_s=float(np.exp(x[0])),
            peak_flop_per_s={d: float(np.exp(x[1 + i])) for i, d in enumerate(dtypes)},
            gemv_bandwidth_bytes_per_s=float(np.exp(x[at["log_gemv_bw"]])) if gemv else None,
            rows_bandwidth_bytes_per_s=tuple((top, float(np.exp(x[len(names) + j]))) for j, top in enumerate(ranges)),
            attention_flop_per_s=float(np.exp(x[at["log_attn_flops"]])) if attn else None,
            matmul_half_tokens=float(x[at["half_tokens"]]),
            overlap=float(x[at["overlap"]]),
            pass_overhead_s=float(x[at["pass_overhead"]]),
            layer_overhead_s=float(x[at["layer_overhead"]]),
        )

    def predict(x: np.ndarray, ranges: Sequence[int]) -> np.ndarray:
        tm = model_of(x, ranges)
        pred = np.empty(len(df))
        for d in dtypes:
            for idx, c in costs[d]:
                pred[idx] = tm.pass_seconds(c, d)
        return pred

    def solve(ranges: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Least squares on relative error with a streaming rate of its own for each range of ``ranges``."""
        k = len(ranges)
        start = np.concatenate([x0, np.full(k, np.log(bw0))])
        bounds = (
            np.concatenate([lo, np.full(k, np.log(bw0 / 3))]),
            np.concatenate([hi, np.full(k, np.log(bw0 * 2.5))]),
        )

        def residuals(x: np.ndarray) -> np.ndarray:
            pull = 0.05 * np.array([x[at["pass_overhead"]], max_layers * x[at["layer_overhead"]]]) / t_min
            return np.concatenate([(predict(x, ranges) - t) / t, pull])

        x = least_squares(residuals, start, bounds=bounds, x_scale="jac", max_nfev=4000).x
        return x, predict(x, ranges)

    # The harness runs one kernel per range of pass rows (measure.models.rows_bucket), and a few-row kernel may
    # stream at a rate of its own (on a Zen 3 EPYC the fit with one rate for every pass wider than one token priced
    # the 2-row passes 17-32% high in five sweeps). A range with two points or more, below wider passes that pin
    # the bandwidth, gets its own rate where Akaike's criterion says the data support it: n ln(SSR) must drop by
    # more than 2 for the one parameter more, so a noisy sweep (a small draft model's) is not given rates that
    # only follow its noise. Ranges are tried in order, each kept or not given those kept before.
    from measure.models import ROWS_RANGES, ROWS_TOPS, rows_bucket

    def ssr(pred: np.ndarray) -> float:
        return max(float((((pred - t) / t) ** 2).sum()), 1e-300)

    ranges: list[int] = []
    x, pred = solve(ranges)
    lo_rows = 1
    for top in ROWS_TOPS:
        if int(((tokens > lo_rows) & (tokens <= top)).sum()) >= 2 and bool((tokens > top).any()):
            x_r, pred_r = solve([*ranges, top])
            if len(t) * np.log(ssr(pred_r) / ssr(pred)) + 2.0 < 0.0:
                ranges, x, pred = [*ranges, top], x_r, pred_r
        lo_rows = top
    err = (pred - t) / t
    params = {
        "bandwidth_bytes_per_s": float(np.exp(x[0])),
        **{f"flop_per_s_{d}": float(np.exp(x[1 + i])) for i, d in enumerate(dtypes)},
        "matmul_half_tokens": float(x[at["half_tokens"]]),
        "overlap": float(x[at["overlap"]]),
        "pass_overhead_s": float(x[at["pass_overhead"]]),
        "layer_overhead_s": float(x[at["layer_overhead"]]),
    }
    if gemv:
        params["gemv_bandwidth_bytes_per_s"] = float(np.exp(x[at["log_gemv_bw"]]))
    rows_bw = {top: float(np.exp(x[len(names) + j])) for j, top in enumerate(ranges)}
    for top, rate in rows_bw.items():
        params[f"bandwidth_bytes_per_s_rows_{ROWS_RANGES[rows_bucket(top)]}"] = rate
    if attn:
        params["attention_flop_per_s"] = float(np.exp(x[at["log_attn_flops"]]))
    measured = Measured(
        bandwidth_bytes_per_s=params["bandwidth_bytes_per_s"],
        peak_flop_per_s={d: params[f"flop_per_s_{d}"] for d in dtypes},
        pass_overhead_s=params["pass_overhead_s"],
        layer_overhead_s=params["layer_overhead_s"],
        matmul_half_tokens=params["matmul_half_tokens"],
        gemv_bandwidth_bytes_per_s=params.get("gemv_bandwidth_bytes_per_s"),
        rows_bandwidth_bytes_per_s=rows_bw,
        attention_flop_per_s=params.get("attention_flop_per_s"),
        overlap=params["overlap"],
        provenance={"method": "least squares on relative error", "points": len(df)},
    )
    fitted = dataclasses.replace(hw, name=f"{hw.name} (fitted)", measured=measured)
    table = df.assign(t_fitted_s=pred, err_fitted=err)
    return FitResult(
        fitted,
        params,
        float(np.mean(np.abs(err))),
        float(np.max(np.abs(err))),
        len(df),
        table,
        len(names) + len(ranges),
    )


@dataclass(frozen=True)
class HostFit:
    """The host's seconds per round (or per step) as a line in the batch: ``intercept_s + per_seq_s * batch``
    (docs/cost-model.md, section 39), fitted to ``points`` measured (batch, seconds) pairs."""

    intercept_s: float
    per_seq_s: float
    points: int

    def seconds(self, batch: Any) -> np.ndarray:
        """The line at ``batch`` (broadcasts), never below zero."""
        return np.maximum(0.0, self.intercept_s + self.per_seq_s * np.asarray(batch, dtype=float))


def fit_host_time(batch: Sequence[float], host_s: Sequence[float]) -> HostFit:
    """The host line through measured host seconds per round or step against their batch: least squares on
    the per-batch medians (each batch weighs as one point, however many rows it has), the slope 0 where one batch
    was measured. NaN rows are left out; none left is an error."""
    b = np.asarray(batch, dtype=float)
    h = np.asarray(host_s, dtype=float)
    ok = np.isfinite(b) & np.isfinite(h)
    if not ok.any():
        raise SpecroofError("the host line needs at least one measured host time")
    df = pd.DataFrame({"b": b[ok], "h": h[ok]}).groupby("b")["h"].median()
    if len(df) < 2:
        return HostFit(float(df.iloc[0]), 0.0, int(ok.sum()))
    slope, intercept = np.polyfit(df.index.to_numpy(float), df.to_numpy(float), 1)
    return HostFit(float(intercept), float(slope), int(ok.sum()))


def predict_times(df: pd.DataFrame, spec: ModelSpec | str, hardware: Hardware | str, *, tree: Any = None) -> np.ndarray:
    """Roofline time (s) of every row's pass on ``hardware`` (measured overrides and overheads included).

    One vectorised call per dtype: the sweep prices its points with it before measuring
    and the fit and validation price them with it after, so a prediction has one route.
    ``tree`` (node depths or a Tree) makes every row a tree-masked pass of that tree.
    Rows the profile cannot price (a dtype it has no peak for) are NaN.
    """
    spec, hw = get_model(spec), load_hardware(hardware)
    out = np.full(len(df), np.nan)
    for dt, g in df.groupby("dtype", sort=False):
        n = None if tree is not None else g["new_tokens"].to_numpy()
        try:
            st = pass_time(spec, hw, g["batch"].to_numpy(), n, g["context"].to_numpy(), str(dt), tree=tree)
        except SpecroofError:
            continue
        out[df.index.get_indexer(g.index)] = st.t_step_s
    return out


def validate(
    sweep_df: pd.DataFrame,
    spec: ModelSpec | str,
    apriori: Hardware | str,
    fitted: Hardware | str,
    *,
    statistic: str = "min",
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per point: measured, a-priori and fitted predictions and their errors; plus summary figures.

    The summary has ``apriori_mape``, ``fit_mape`` and, for every (dtype, batch,
    context) group swept over new tokens (at least 6 values): the crossover K read
    off the measured curve (:func:`measured_crossover`, with the fitted profile's
    overlap) against the same read-out of the fitted model's curve at the same token
    counts (``crossover_predicted``); the 10%-rise knees of both
    (:func:`measured_knee`); the pure roofline crossovers of the fitted and
    a-priori profiles; the widest pass swept and whether each read-out is a
    measurement (:func:`crossover_status`: a flat curve, or a K far past the sweep,
    is not one, and the page says so in words).
    """
    spec = get_model(spec)
    df = sweep_df[sweep_df.get("status", "ok") == "ok"].reset_index(drop=True)
    df = df.assign(
        t_measured_s=df[_column(statistic)],
        t_apriori_s=predict_times(df, spec, apriori),
        t_fitted_s=predict_times(df, spec, fitted),
    )
    df["err_apriori"] = (df["t_apriori_s"] - df["t_measured_s"]) / df["t_measured_s"]
    df["err_fitted"] = (df["t_fitted_s"] - df["t_measured_s"]) / df["t_measured_s"]
    knees = []
    fitted_hw, apriori_hw = load_hardware(fitted), load_hardware(apriori)
    # one-token passes on another kernel family (a fitted matrix-vector rate): the crossover is read
    # on the curve of the multi-token passes, where verify widths live
    gemv_apart = abs(fitted_hw.gemv_bandwidth() / fitted_hw.bandwidth() - 1.0) > 0.1
    for (dt, b, c), g in df.groupby(["dtype", "batch", "context"]):
        if gemv_apart and int(b) == 1:
            g = g[g["new_tokens"] > 1]
        if g["new_tokens"].nunique() < 6:
            continue
        # The predicted crossover is read off the fitted model's times at the same token counts, the
        # way the measured one is off the measurements: with overheads, a one-token bandwidth and
        # half-saturated matrix units, the model's visible curve is what a measurement can be compared
        # with. The pure roofline crossovers (memory time = compute time) are reported beside it.
        n = g["new_tokens"]
        k_m = measured_crossover(n, g["t_measured_s"], fitted_hw.overlap)
        k_p = measured_crossover(n, g["t_fitted_s"], fitted_hw.overlap)
        knee_m, knee_p = measured_knee(n, g["t_measured_s"]), measured_knee(n, g["t_fitted_s"])
        widest = float(n.max())
        knees.append(
            {
                "dtype": dt,
                "batch": int(b),
                "context": int(c),
                "crossover_measured": k_m,
                "crossover_predicted": k_p,
                "knee_measured": knee_m,
                "knee_predicted": knee_p,
                "crossover_roofline_fitted": int(crossover_tokens(spec, fitted_hw, int(b), int(c), str(dt))),
                "crossover_roofline_apriori": int(crossover_tokens(spec, apriori_hw, int(b), int(c), str(dt))),
                "widest_swept": widest,
                "crossover_measured_status": crossover_status(k_m, knee_m, widest),
                "crossover_predicted_status": crossover_status(k_p, knee_p, widest),
            }
        )
    summary = {
        "apriori_mape": float(np.mean(np.abs(df["err_apriori"]))),
        "fit_mape": float(np.mean(np.abs(df["err_fitted"]))),
        "points": len(df),
        "statistic": statistic,
        "crossover": knees,
    }
    return df, summary
