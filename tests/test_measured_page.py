"""The measured section's words (issue 46 item 4): the page never shows an empty or meaningless measured figure, and
report's --graphs/--compile flags refuse bad input while parsing, without importing torch to build the parser."""

from __future__ import annotations

import argparse
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

import specroof.measure_report as mr


def _rows(**cols) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    base = {
        "drafter": ["d"] * n,
        "batch": [1] * n,
        "gamma": list(range(1, n + 1)),
        "flag": [""] * n,
        "noisy": [False] * n,
    }
    return pd.DataFrame(base | cols)


def test_the_best_gamma_is_words_when_no_row_stands():
    good = _rows(speedup_measured=[1.2, 1.4, 1.3])
    assert mr.best_measured_text(good) == "d batch 1: 2 (1.40x)"
    noisy = _rows(speedup_measured=[0.9, 1.1], noisy=[True, True])
    text = mr.best_measured_text(noisy)
    assert text.startswith("not measured: ") and "2 of 2 row(s) noisy" in text
    bound = _rows(speedup_measured=[np.nan], flag=["noise: above its physical bound"])
    assert "1 row(s) above their physical bound" in mr.best_measured_text(bound)
    assert mr.best_measured_text(pd.DataFrame()) == "none: no speculative run finished within the budget"
    for df in (good, noisy, bound, pd.DataFrame()):
        assert mr.best_measured_text(df).strip()  # never an empty figure


def test_a_crossover_the_sweep_cannot_place_is_said_in_words():
    row = {"crossover_measured": 2858.0, "crossover_measured_status": "beyond", "widest_swept": 256.0}
    text = mr.crossover_words(row)
    assert text.startswith("not measured: above 256 new tokens") and "2.86e+03" in text
    flat = {"crossover_measured": 300.0, "crossover_measured_status": "flat", "widest_swept": 64.0}
    assert "stayed within 10% of the narrowest up to 64" in mr.crossover_words(flat)
    assert (
        mr.crossover_words({"crossover_predicted": 12.3456, "crossover_predicted_status": "measured"}, "predicted")
        == "12.3"
    )
    ext = {"crossover_measured": 150.0, "crossover_measured_status": "extrapolated", "widest_swept": 128.0}
    assert mr.crossover_words(ext).startswith("150 (past the widest pass swept, 128")


def test_the_speculation_tables_raise_no_pandas_deprecation_warning(tmp_path):
    from types import SimpleNamespace

    from specroof.report import ReportWriter

    df = _rows(
        speedup_measured=[1.2, np.nan],
        speedup_predicted=[1.1, 1.3],
        rel_error=[-0.08, np.nan],
        curve=[[0.8], [0.7, np.nan]],
        noise=["", ""],
    )
    check = SimpleNamespace(speedups=df, pair={}, noise={})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a FutureWarning (fillna's downcast) fails the test
        body = mr._speculation_part(ReportWriter(tmp_path), check)
    assert "best_gamma" not in body or "1.2" in body
    noisy = SimpleNamespace(speedups=df.assign(noisy=True), pair={}, noise={})
    assert "measured: not measured: 2 of 2 row(s) noisy" in mr._speculation_part(ReportWriter(tmp_path), noisy)


def test_reports_flags_are_added_without_importing_torch_and_refuse_at_parse_time():
    code = (
        "import argparse, sys; import specroof.measure_report as m; p = argparse.ArgumentParser(); "
        "m.add_measured_flags(p); print('torch' in sys.modules); a = p.parse_args([]); print(m.measured_options(a))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "False" and out[1] == "{'graphs': 'auto', 'compile': False}"
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks the refusal where there is no GPU")
    p = argparse.ArgumentParser(prog="specroof report")
    mr.add_measured_flags(p)
    assert mr.measured_options(p.parse_args(["--graphs", "off"])) == {"graphs": "off", "compile": False}
    with pytest.raises(SystemExit) as exc:
        p.parse_args(["--graphs", "on"])
    assert exc.value.code == 2
