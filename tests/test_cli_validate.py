"""``specroof validate published`` prints the per-engine, per-batch-bucket table (issue 47): calibration and held-out
medians with the bare roofline's beside them, in the text and under ``--json``'s ``buckets``."""

from __future__ import annotations

import json

import pandas as pd

from specroof.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_validate_published_prints_and_returns_the_bucket_table(capsys):
    from roofline.evidence.published import bucket_summary

    d = json.loads(run(capsys, "validate", "published", "--json"))
    want = bucket_summary(pd.DataFrame(d["rows"]))
    got = pd.DataFrame(d["buckets"])
    assert len(got) == len(want) > 0
    assert {"use", "engine", "bucket", "median_abs_error_engine", "median_abs_error_roofline"} <= set(got.columns)
    pd.testing.assert_series_equal(got["median_abs_error_engine"], want["median_abs_error_engine"], check_names=False)
    assert d["kind_bands"] and d["error_bands"]
    text = run(capsys, "validate", "published")
    part = text.split("median |error| per engine and batch bucket", 1)[1]
    head = part.splitlines()[1].split()
    assert head[:2] == ["engine", "batch"] and "held_out_median" in head and "held_out_roofline" in head
    for _, r in want[want["use"] == "validation"].iterrows():  # every held-out group's median is on the page
        assert f"{100 * r['median_abs_error_engine']:.1f}%" in part
    assert "error bands every priced answer carries" in text


def test_the_bucket_text_marks_a_median_past_its_bound():
    from specroof.commands.validate import bucket_text

    rows = pd.DataFrame([{"use": "calibration", "engine": "vllm", "bucket": "1", "rows": 3, "median_abs_error_roofline": 0.4,
                          "median_abs_error_engine": 0.12, "max_abs_error_engine": 0.2, "within_bound": False}])  # fmt: skip
    text = bucket_text(rows)
    assert "12.0% (> 10%)" in text and "40.0%" in text
