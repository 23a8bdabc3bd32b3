"""`specroof report` writes a self-contained page, PNGs, CSVs and a JSON summary."""

from __future__ import annotations

import json

import pytest

from specroof.cli import main


def test_report_writes_page_images_tables_and_summary(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", "--out", str(out), "--hardware", "a100-sxm-80gb", "h100-sxm-80gb", "--skip-measure"]) == 0
    assert "report written" in capsys.readouterr().out
    page = (out / "index.html").read_text()
    assert page.count("data:image/png;base64,") >= 3 and "<table" in page
    for name in ("roofline.png", "batch_sweep.png", "seed_example.csv", "crossover.csv"):
        assert (out / name).stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    a100 = summary["seed_example"][0]
    assert a100["t_memory_ms"] == pytest.approx(12.75, abs=0.005)
    assert a100["K_exact"] == 153
