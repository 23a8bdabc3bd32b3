"""The fit's residuals grouped by the harness's kernel row ranges: the model's missing shape, shown per range."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("torch")

from measure.fit import FitResult  # noqa: E402
from roofline import load_hardware  # noqa: E402


def test_residuals_by_rows_group_by_the_kernel_ranges():
    table = pd.DataFrame(
        {
            "batch": [1, 1, 1, 4, 1, 4, 4],
            "new_tokens": [1, 2, 4, 1, 32, 4, 8],
            "err_fitted": [0.01, 0.20, -0.10, -0.06, 0.05, 0.04, 0.08],
        }
    )
    fr = FitResult(load_hardware("h100-sxm-80gb"), {}, 0.0, 0.0, len(table), table)
    got = fr.residuals_by_rows().set_index("rows")
    assert list(got.index) == ["1", "2", "3-16", ">16"]
    assert got.loc["1", "points"] == 1 and got.loc["2", "err_mean"] == pytest.approx(0.20)
    # 4 rows (batch 1 x 4 tokens, batch 4 x 1 token) and 16 rows share one kernel range; 32 rows the next
    assert got.loc["3-16", "points"] == 3 and got.loc["3-16", "err_mean"] == pytest.approx((-0.10 - 0.06 + 0.04) / 3)
    assert got.loc["3-16", "err_max_abs"] == pytest.approx(0.10)
    assert got.loc[">16", "points"] == 2 and got.loc[">16", "err_mean"] == pytest.approx(0.065)


def _sweep(tokens, truth, spec):
    from measure.fit import predict_times

    rows = [
        dict(dtype="fp32", batch=b, new_tokens=n, context=c, status="ok")
        for b in (1, 4)
        for n in tokens
        for c in (64, 128)
    ]
    df = pd.DataFrame(rows)
    df["t_median_s"] = df["t_min_s"] = predict_times(df, spec, truth)
    return df


def test_the_fit_gives_each_few_row_kernel_range_its_own_rate_and_finds_it_again():
    # a CPU whose 2-row and 3-16-row kernels stream at rates of their own (the harness picks a kernel per range):
    # the fit must find both again, leaving no residual by range, and fit no rate to a range without two points
    from measure.fit import fit
    from roofline.costing.hardware import Measured
    from roofline.passes.model import ModelSpec

    m = Measured(
        bandwidth_bytes_per_s=9e9,
        peak_flop_per_s={"fp32": 1.2e11},
        gemv_bandwidth_bytes_per_s=15e9,
        rows_bandwidth_bytes_per_s={2: 11e9, 16: 8e9},
        pass_overhead_s=2e-4,
        overlap=0.0,
    )
    truth = load_hardware("a100-sxm-80gb").replace(measured=m)
    spec = ModelSpec("m", 4, 1024, 16, 16, 64, 3072, 256, max_context=4096)
    start = load_hardware("a100-sxm-80gb").replace(bandwidth_bytes_per_s=10e9, peak_flop_per_s={"fp32": 2e11})
    f = fit(_sweep((1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32), truth, spec), spec, start)
    assert f.mape < 0.005
    assert f.params["bandwidth_bytes_per_s_rows_2"] == pytest.approx(11e9, rel=0.03)
    assert f.params["bandwidth_bytes_per_s_rows_3-16"] == pytest.approx(8e9, rel=0.03)
    assert f.params["gemv_bandwidth_bytes_per_s"] == pytest.approx(15e9, rel=0.03)
    assert f.hardware.measured.rows_bandwidth_bytes_per_s == pytest.approx({2: 11e9, 16: 8e9}, rel=0.03)
    assert f.residuals_by_rows()["err_max_abs"].max() < 0.01
    # the same machine swept without one-sequence 2-token passes: batch 4's rows start at 4, so no 2-row rate
    g = fit(_sweep((1, 3, 4, 8, 16, 32), truth, spec), spec, start)
    assert "bandwidth_bytes_per_s_rows_2" not in g.params and "bandwidth_bytes_per_s_rows_3-16" in g.params
    # and without passes wider than 16 rows nothing pins the bandwidth apart from the 3-16 range: no rate of its own
    h = fit(_sweep((1, 2, 3, 4), truth, spec), spec, start)
    assert "bandwidth_bytes_per_s_rows_3-16" not in h.params and "bandwidth_bytes_per_s_rows_2" in h.params


def test_a_range_gets_its_own_rate_only_where_the_data_support_it():
    # 5% noise on every pass: where the 2-row kernel streams like the rest, Akaike's criterion seldom gives it a
    # rate (by chance about one decision in six); where it streams 30% faster, it does every time
    import numpy as np

    from measure.fit import fit
    from roofline.costing.hardware import Measured
    from roofline.passes.model import ModelSpec

    spec = ModelSpec("m", 4, 1024, 16, 16, 64, 3072, 256, max_context=4096)
    start = load_hardware("a100-sxm-80gb").replace(bandwidth_bytes_per_s=10e9, peak_flop_per_s={"fp32": 2e11})
    kept = {False: 0, True: 0}
    decisions = 0
    for own in (False, True):
        m = Measured(
            bandwidth_bytes_per_s=9e9,
            peak_flop_per_s={"fp32": 1.2e11},
            gemv_bandwidth_bytes_per_s=15e9,
            rows_bandwidth_bytes_per_s={2: 11.7e9} if own else {},
            overlap=0.0,
        )
        truth = load_hardware("a100-sxm-80gb").replace(measured=m)
        clean = _sweep((1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32), truth, spec)
        for seed in range(12):
            df = clean.copy()
            df["t_min_s"] = df["t_median_s"] = clean["t_min_s"] * np.exp(
                np.random.default_rng(seed).normal(0.0, 0.05, len(df))
            )
            f = fit(df, spec, start)
            kept[own] += "bandwidth_bytes_per_s_rows_2" in f.params
            if not own:
                decisions += 2
                kept[own] += "bandwidth_bytes_per_s_rows_3-16" in f.params
    assert kept[True] == 12
    assert kept[False] <= decisions // 3
