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
