"""Every prediction under an engine carries the error band of its kind, read from the shipped held-out residuals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from roofline.error_bands import RESIDUALS_FILE, compute_residuals, error_band, prediction_kind
from specroof.cli import main


def test_the_shipped_residuals_are_what_the_published_table_gives_now():
    # stale residuals would state bands the model no longer has: `specroof validate published --write-bands` renews them
    shipped = pd.read_csv(RESIDUALS_FILE)
    fresh = compute_residuals()
    assert list(shipped["source"]) == list(fresh["source"]) and len(shipped) == len(fresh)
    np.testing.assert_allclose(shipped["error_engine"], fresh["error_engine"], rtol=1e-6)


def test_a_band_is_the_median_of_its_groups_held_out_errors():
    res = compute_residuals()
    sel = res[(res["family"] == "serving") & (res["kind"] == "batched") & ~res["on_calibration_gpu"]]
    band = error_band("vllm", "batched", "b200-180gb")
    if sel.empty:
        assert band is None
    else:
        assert band is not None and band.n == len(sel)
        assert abs(band.median_abs_pct - 100 * np.median(np.abs(sel["error_engine"]))) < 1e-6
        assert band.description.startswith(f"±{band.median_abs_pct:.0f}%")


def test_roofline_and_speedup_print_their_band(capsys):
    args = ["roofline", "--hardware", "h100-sxm-80gb", "--model", "llama-3.1-8b", "--engine", "vllm", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    kind = prediction_kind(batch=1)
    assert "error_band_note" in out and (out["error_band"] is None) == ("no error band" in out["error_band_note"])
    assert kind == "decode"
    assert main(["roofline", "--hardware", "h100-sxm-80gb", "--model", "llama-3.1-8b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["error_band"] is None and "upper bound" in out["error_band_note"]
    args = ["speedup", "--hardware", "a100-sxm-80gb", "--target", "vicuna-7b", "--drafter", "eagle", "--mean-accepted",
            "3.5", "--engine", "hf", "--json"]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["error_band"]["kind"] == "speculative" and out["error_band"]["n"] >= 1


def test_a_model_that_does_not_fit_is_flagged(capsys):
    assert main(["roofline", "--hardware", "h100-sxm-80gb", "--model", "mixtral-8x7b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits_in_memory"] is False
    assert main(["roofline", "--hardware", "h100-sxm-80gb", "--model", "mixtral-8x7b"]) == 0
    captured = capsys.readouterr()
    assert "DOES NOT FIT" in captured.out and "warning" in captured.err
    assert main(["roofline", "--hardware", "h100-sxm-80gb", "--model", "mixtral-8x7b", "--tp", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits_in_memory"] is True


def test_host_launch_us_prices_an_eager_engine_on_your_host(capsys):
    base = ["roofline", "--hardware", "h200-sxm-141gb", "--model", "llama-2-7b", "--engine", "hf", "--json"]
    assert main(base) == 0
    default = json.loads(capsys.readouterr().out)["tokens_per_s"]
    assert main([*base, "--host-launch-us", "45"]) == 0
    slow = json.loads(capsys.readouterr().out)["tokens_per_s"]
    assert slow < default  # a host whose kernels cost more issues them slower: eager decode is host-bound
    assert main(["roofline", "--hardware", "h200-sxm-141gb", "--model", "llama-2-7b", "--engine", "vllm",
                 "--host-launch-us", "45"]) == 2  # fmt: skip
    assert "launches whole graphs" in capsys.readouterr().err


def test_signed_errors_read_faster_for_rate_and_time_rows_alike():
    """A time row predicted 25% slow is the rate it implies 20% slow: both read "-" (the model is slower)."""
    from roofline.error_bands import faster_signed

    got = faster_signed(
        np.array([0.25, 0.25, -0.5, 0.1]), np.array(["ttft_s", "tokens_per_s", "e2e_mean_s", "speedup"])
    )
    assert got == pytest.approx([-0.2, 0.25, 1.0, 0.1])
