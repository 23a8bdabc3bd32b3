"""`specroof report` writes a self-contained page, PNGs, CSVs and a JSON summary."""

from __future__ import annotations

import json
import math

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
    # every priced answer carries its error band (issue 47), and the plans say where verification turns KV-bound
    from specroof.commands.common import band_for

    note = band_for("serving", "a100-sxm-80gb", speculative=True, batch=1, model="llama-3.1-8b", context=1024)[1]
    assert {b["note"] for b in summary["answer_error_bands"]} == {note}
    assert all(r["error_band_pct"] > 0 for r in summary["answer"])
    assert page.count("Error band") >= 4  # the answer, the plans, the trees, the serving section
    plan = summary["plan"]
    assert all("kv_bound_context" in r for r in plan) and "Where verification turns KV-bound" in page
    at_64 = next(r for r in plan if r["hardware"] == "h100-sxm-80gb" and r["batch"] == 64 and r["gamma"])
    at_1 = next(r for r in plan if r["hardware"] == "h100-sxm-80gb" and r["batch"] == 1)
    assert 0 < at_64["kv_bound_context"] < at_1["kv_bound_context"]  # a larger batch reads more cache per weight
    assert f"{at_64['kv_bound_context']:,} tokens" in page


def test_each_section_is_timed_from_its_own_start(tmp_path):
    """A section with a time budget counts from before its maker ran (its imports are inside the budget)."""
    import time

    import specroof.report as report

    seen = []

    def maker(w):
        seen.append((w.section_started, time.perf_counter()))
        return report.Section("probe", "<p>x</p>")

    before = time.perf_counter()
    report.write_report(tmp_path / "r", ["a100-sxm-80gb"], [("probe", maker), ("again", maker)])
    (s1, t1), (s2, t2) = seen
    assert before < s1 <= t1 < s2 <= t2  # restarted per section, never before the page began


def test_the_measured_budget_counts_from_the_section_start_and_keeps_room_for_the_page(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import specroof.measure_report as mr
    from measure.budget import Budget
    from specroof.report import ReportWriter

    class Stop(Exception):
        pass

    got = {}

    def fake_check(out, *, budget_s, **kw):
        got["budget"], got["tokens"] = budget_s, kw["tokens"]
        raise Stop

    monkeypatch.setattr(mr, "spec_check", fake_check)
    w = ReportWriter(tmp_path)
    w.section_started -= 5.0  # the section began 5 s ago (torch's import, say)
    with pytest.raises(Stop):
        mr.measurement_section(w, quick=True, progress=False)
    bud = got["budget"]
    assert isinstance(bud, Budget) and bud.start == w.section_started
    assert bud.seconds == pytest.approx(mr.QUICK_BUDGET_S - mr.PAGE_RESERVE_S)
    assert bud.remaining_s < mr.QUICK_BUDGET_S - mr.PAGE_RESERVE_S - 4.9  # the 5 s already spent count
    # a refusal inside the check names the page's --budget and asks for the page's share back
    assert bud.stated == mr.QUICK_BUDGET_S and bud.asking(20.0) == math.ceil(20 + mr.PAGE_RESERVE_S)
    assert got["tokens"] == 16


def test_a_quick_measured_section_says_what_it_left_out():
    pytest.importorskip("torch")
    from types import SimpleNamespace

    import pandas as pd

    import specroof.measure_report as mr

    steps = {"before_check": 3.0, "setup": 1.0, "microbenchmarks": 2.0, "decoding_runs": 5.0, "fit_and_predict": 0.5}
    check = SimpleNamespace(
        summary={"payload": {"seconds": 11.5, "steps_s": steps, "microbench_set": "short"}},
        plan={"batches": [1], "gammas": [2]},
        speedups=pd.DataFrame({"repetitions": [1, 1]}),
    )
    quick = mr._time_part(check, 10.5, True)
    assert "--quick" in quick and "short microbenchmark set" in quick and "16 new tokens" in quick
    assert "microbenchmarks 2.0 s" in quick and "loading torch" in quick and "1 repetition" in quick
    assert "Over budget" in quick  # 11.5 s spent where 10.5 - 1.5 were the check's
    full = mr._time_part(SimpleNamespace(**{**vars(check), "summary": {"payload": {**check.summary["payload"],
                                                                                  "microbench_set": "full"}}}),
                         60.0, False)  # fmt: skip
    assert "class='note'" not in full and "section's 60 s budget" in full and "Over budget" not in full
