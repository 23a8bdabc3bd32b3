"""What a serving engineer reads off a run: latency percentiles, throughput, goodput, and where speculation stops paying.

Definitions (those of vLLM's serving benchmark and of DistServe's goodput):

* **TTFT**, time to first token: first token's time minus the request's arrival.
* **TPOT**, time per output token: (last token's time - first token's time) / (output tokens - 1);
  undefined for one-token outputs, which are left out of its percentiles.
* **ITL**, inter-token latency: the gap between two successive emissions of one request (a
  speculative round that emits several tokens is one emission, as a streaming client sees it).
* **E2E**: last token's time minus arrival.
* **throughput**: output tokens of all requests over the run's duration (first arrival to last token).
* **goodput**: requests per second that met every SLO given (TTFT <= ``slo_ttft_s`` and TPOT <=
  ``slo_tpot_s``), over the same duration; with no SLO, every completed request counts.

Percentiles interpolate linearly between order statistics (numpy's default, as vLLM's
benchmark computes them). ITL percentiles come from a log-spaced histogram (bins 0.5% wide),
so memory stays bounded however many tokens a run emits.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.core.validation import check_number

FloatArray = npt.NDArray[np.float64]

#: the ITL histogram: log-spaced bins from 100 ns to 10^4 s, each 0.5% wide
ITL_LO_S = 1e-7
ITL_RATIO = 1.005
ITL_BINS = int(math.ceil(math.log(1e4 / ITL_LO_S) / math.log(ITL_RATIO)))
_LOG_RATIO = math.log(ITL_RATIO)

#: percentiles reported per metric
PERCENTILES = (50, 90, 99)


def percentile(values: Any, q: float) -> float:
    """The ``q``-th percentile (0-100) of the finite values, linear between order statistics; NaN if none."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not 0 <= q <= 100:
        raise SpecroofError(f"percentile must lie in [0, 100] (got {q})")
    return float(np.percentile(v, q)) if v.size else float("nan")


def itl_bins(gaps: Any) -> npt.NDArray[np.int64]:
    """Histogram bin of each gap (seconds)."""
    g = np.maximum(np.asarray(gaps, dtype=float), ITL_LO_S)
    return np.minimum((np.log(g / ITL_LO_S) / _LOG_RATIO).astype(np.int64), ITL_BINS - 1)


def histogram_percentile(counts: Any, q: float) -> float:
    """The ``q``-th percentile of an ITL histogram: the geometric centre of the bin holding that rank; NaN if empty."""
    c = np.asarray(counts, dtype=float)
    total = c.sum()
    if total <= 0:
        return float("nan")
    cum = np.cumsum(c)
    i = int(np.searchsorted(cum, q / 100.0 * total, side="left"))
    i = min(max(i, int(np.argmax(c > 0))), c.size - 1)  # rank 0 falls in the first occupied bin
    return ITL_LO_S * ITL_RATIO ** (i + 0.5)


def goodput(ttft_s: Any, tpot_s: Any, duration_s: float, slo_ttft_s: float | None, slo_tpot_s: float | None) -> float:
    """Requests per second meeting every SLO given (a one-token output meets any TPOT SLO)."""
    check_slo("slo_ttft_s", slo_ttft_s)
    check_slo("slo_tpot_s", slo_tpot_s)
    ttft, tpot = np.asarray(ttft_s, dtype=float), np.asarray(tpot_s, dtype=float)
    ok = np.isfinite(ttft)
    if slo_ttft_s is not None:
        ok &= ttft <= slo_ttft_s
    if slo_tpot_s is not None:
        ok &= ~(tpot > slo_tpot_s)  # NaN (one-token output) passes
    if not duration_s > 0:
        raise SpecroofError(f"duration must be > 0 s (got {duration_s})")
    return float(ok.sum()) / duration_s


def check_slo(name: str, value: float | None) -> None:
    if value is None:
        return
    try:  # numpy scalars are numbers too
        check_number(name, value, 0.0, lo_open=True)
    except SpecroofError:
        raise SpecroofError(f"{name} must be a positive number of seconds (got {value!r})") from None


def latency_columns(requests: pd.DataFrame, itl_counts: Any) -> dict[str, float]:
    """``ttft_p50_s`` ... ``e2e_p99_s`` and ``itl_*`` of one run."""
    out: dict[str, float] = {}
    for m in ("ttft", "tpot", "e2e"):
        for q in PERCENTILES:
            out[f"{m}_p{q}_s"] = percentile(requests[f"{m}_s"], q)
        out[f"{m}_mean_s"] = float(np.nanmean(requests[f"{m}_s"])) if requests[f"{m}_s"].notna().any() else math.nan
    for q in PERCENTILES:
        out[f"itl_p{q}_s"] = histogram_percentile(itl_counts, q)
    return out


def lower_is_better(metric: str) -> bool:
    """Latencies (seconds: ``*_s``) are better lower; rates (``*_req_s``, ``*_tok_s``: per second) higher."""
    return metric.endswith("_s") and not metric.endswith(("_req_s", "_tok_s"))


def speculation_pays(
    summary: pd.DataFrame, policy: str, *, baseline: str = "off", metric: str = "e2e_p50_s"
) -> pd.DataFrame:
    """Per rate: the policy's ``metric`` against the baseline's and whether speculation pays there.

    Pays means strictly better: a lower latency (``*_s``) or a higher throughput or goodput
    (``*_tok_s``, ``*_req_s``). ``ratio`` is policy / baseline.
    """
    for p in (policy, baseline):
        if p not in set(summary["policy"]):
            raise SpecroofError(f"policy {p!r} is not in the summary (has {', '.join(sorted(set(summary['policy'])))})")
    if metric not in summary.columns:
        raise SpecroofError(f"unknown metric {metric!r}; choose a column of the summary such as tpot_p50_s")
    a = summary[summary["policy"] == policy].set_index("rate_req_s")[metric]
    b = summary[summary["policy"] == baseline].set_index("rate_req_s")[metric]
    rates = sorted(set(a.index) & set(b.index))
    if not rates:
        raise SpecroofError(f"policies {policy!r} and {baseline!r} share no rate")
    num, den = (np.asarray([x[r] for r in rates], dtype=float) for x in (a, b))
    with np.errstate(divide="ignore", invalid="ignore"):  # 0 / 0 (no request met the SLOs under either): the same
        ratio = np.where((num == 0) & (den == 0), 1.0, num / den)
    lower = lower_is_better(metric)
    pays = ratio < 1.0 if lower else ratio > 1.0
    return pd.DataFrame({"rate_req_s": rates, "ratio": ratio, "pays": pays})


def speculation_stops_paying_at_rate(
    summary: pd.DataFrame, policy: str, *, baseline: str = "off", metric: str = "e2e_p50_s"
) -> float | None:
    """The request rate where ``policy`` stops beating ``baseline`` on ``metric``; None if it pays at every rate.

    Rates ascend; at the first rate where speculation does not pay, the crossing is
    interpolated on log(rate) between it and the rate before, where log(ratio) crosses 0.
    If it does not pay even at the lowest rate, that rate is returned (it stops at or below it).
    """
    t = speculation_pays(summary, policy, baseline=baseline, metric=metric)
    bad = np.nonzero(~t["pays"].to_numpy())[0]
    if bad.size == 0:
        return None
    i = int(bad[0])
    r = t["rate_req_s"].to_numpy(dtype=float)
    if i == 0:
        return float(r[0])
    y0, y1 = math.log(t["ratio"].iloc[i - 1]), math.log(t["ratio"].iloc[i])
    if not (math.isfinite(y0) and math.isfinite(y1)) or y0 == y1:
        return float(r[i])
    f = (0.0 - y0) / (y1 - y0)
    return float(math.exp(math.log(r[i - 1]) + f * (math.log(r[i]) - math.log(r[i - 1]))))
