"""Tensor parallelism (measure.tp): Megatron-style shards on 2 gloo ranks match the whole model, and the all-reduce fit.

The distributed tests spawn 2 CPU processes (gloo over localhost, a free port) with a
timeout on every launch, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from measure import tp as mtp  # noqa: E402
from roofline.core.errors import SpecroofError  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402

gloo = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is not available"
)

#: 2 layers, width 64, 4 query heads over 2 KV heads (GQA), q/k/v bias: every sharded slice has a part to get wrong
TINY = ModelSpec("tiny-tp", 2, 64, 4, 2, 16, 128, 256, qkv_bias=True, max_context=512)
TINY_SHAPE = "2x64x4x2x128x256"


def test_tp_that_does_not_divide_is_one_line(capsys):
    with pytest.raises(SpecroofError, match="does not divide .* 2 KV heads"):
        mtp.check_tp(TINY, 4)
    with pytest.raises(SpecroofError, match="does not divide .* 4 query heads"):
        mtp.check_tp(TINY, 3)
    with pytest.raises(SpecroofError, match="--tp must be >= 2"):
        mtp.check_tp(TINY, 1)
    moe = ModelSpec("moe", 2, 64, 4, 2, 16, 128, 256, n_experts=4, experts_per_token=2, d_ff_expert=64)
    with pytest.raises(SpecroofError, match="MoE"):
        mtp.check_tp(moe, 2)
    # the command refuses before any rank is started: one line, exit 2
    assert mtp.main(["sweep", "--tp", "3", "--model", TINY_SHAPE]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specroof: error: --tp 3 does not divide") and "\n" not in err


def _synthetic(latency_s: float, bw: float | None, sizes, repeats: int = 8, visits: int = 3, noise: float = 0.03):
    rng = np.random.default_rng(1)
    rows = []
    for v in range(visits):
        for s in sizes:
            t = latency_s + (s / bw if bw else 0.0)  # tp 2: 2 (p - 1) / p = 1
            samples = t * (1.0 + np.abs(rng.normal(0.0, noise, repeats)))  # noise only slows a call down
            rows.append({"bytes": int(s), "visit": v, "samples_s": samples.tolist()})
    return {"format": mtp.FORMAT, "measured": {"tp": 2, "backend": "gloo"}, "allreduce": rows}


def test_fit_recovers_latency_and_bandwidth():
    sizes = [1 << k for k in range(10, 23, 2)]  # 1 KiB .. 4 MiB
    fit = mtp.fit_allreduce(_synthetic(50e-6, 2e9, sizes))
    assert fit.latency_s == pytest.approx(50e-6, rel=0.1)
    assert fit.bandwidth_bytes_per_s == pytest.approx(2e9, rel=0.1)
    assert 0 < fit.latency_p05_s <= fit.latency_q25_s <= fit.latency_q75_s <= fit.latency_p95_s
    assert len(fit.latency_visits_s) == 3 and all(v > 0 for v in fit.latency_visits_s)
    assert fit.engine_toml().splitlines() == [
        "[collectives]",
        f"allreduce_latency_us = {fit.latency_s * 1e6:.4g}",
        'allreduce = "custom"',  # the measurement prices it, not the public NCCL tables (section 60)
    ]


def test_fit_reports_latency_alone_when_sizes_do_not_separate_bandwidth():
    fit = mtp.fit_allreduce(_synthetic(80e-6, 1e12, [256, 1024, 4096]))  # transfer is ~0.005% of the time
    assert fit.bandwidth_bytes_per_s is None
    assert fit.latency_s == pytest.approx(80e-6, rel=0.05)
    assert fit.latency_q25_s <= fit.latency_q75_s


def test_fit_refuses_what_is_not_a_tp_sweep(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(SpecroofError, match="is not a TP sweep"):
        mtp.fit_allreduce(bad)
    data = _synthetic(50e-6, None, [256, 1024])
    data["allreduce"][0]["samples_s"] = [-1.0]
    with pytest.raises(SpecroofError, match="positive, finite samples_s"):
        mtp.fit_allreduce(data)
    with pytest.raises(SpecroofError, match="2 or more ranks"):
        mtp.fit_allreduce({**data, "measured": {"tp": 1}})


@gloo
def test_sharded_passes_match_whole_model_and_greedy_speculation_equals_plain():
    res = mtp.tp_check(TINY, 2, device="cpu", new_tokens=12, timeout_s=150)
    assert set(res["max_abs_diff"]) == {"swiglu", "gelu"}
    for kind, diffs in res["max_abs_diff"].items():
        assert set(diffs) == set(mtp.CHECK_PASSES)
        assert max(diffs.values()) < 1e-4, (kind, diffs)
    plain = res["plain"]
    assert [len(t) for t in plain] == [12, 12]
    assert len({tok for row in plain for tok in row}) > 3  # a real sequence, not one token repeated
    assert res["plain_tp"] == plain  # sharded greedy decoding == the whole model's
    assert res["spec_tp"] == plain  # speculative (separate draft, gamma 3) under TP == plain decoding
    assert res["early_exit_tp"] == plain  # speculative (the sharded target's first layer drafts) == plain
    assert res["spec_tp_rounds"] >= 1


@gloo
def test_sweep_command_times_passes_and_fits_the_allreduce(tmp_path, capsys):
    out = tmp_path / "tp.json"
    args = ["sweep", "--tp", "2", "--model", TINY_SHAPE, "--tokens", "1,4,16", "--context", "32"]
    args += [
        "--repeats",
        "3",
        "--rounds",
        "2",
        "--budget",
        "60",
        "--threads",
        "1",
        "--timeout",
        "150",
        "--out",
        str(out),
    ]
    assert mtp.main(args) == 0
    printed = capsys.readouterr().out
    assert "allreduce_latency_us = " in printed
    data = mtp.load_tp_sweep(out)
    assert data["measured"]["backend"] == "gloo" and data["measured"]["tp"] == 2
    assert data["sharding"]["replicated"] == ["embed_tokens", "norms", "lm_head"]
    assert {r["new_tokens"] for r in data["verify"]} == {1, 4, 16}
    assert all(r["t_min_s"] > 0 and r["repeats"] == 3 for r in data["verify"])
    # the all-reduce is timed at exactly the message sizes the passes send (batch x tokens x d_model x 4 bytes)
    assert {r["bytes"] for r in data["allreduce"]} == {n * 64 * 4 for n in (1, 4, 16)}
    fit = mtp.fit_allreduce(out)
    assert fit.latency_s > 0 and fit.latency_p05_s > 0
    assert fit.latency_q25_s <= fit.latency_q75_s
    assert data["fit"]["latency_s"] == pytest.approx(fit.latency_s)
    shares = mtp.pass_shares(data, fit)
    assert (shares["t_allreduce_s"] > 0).all() and list(shares["new_tokens"]) == [1, 4, 16]
    assert mtp.main(["fit", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["fit"]["latency_s"] == pytest.approx(fit.latency_s) and len(printed["passes"]) == 3


@gloo
def test_a_budget_the_ranks_start_spends_measures_the_essentials_and_names_the_rest(tmp_path, capsys):
    # the ranks share the command's deadline: spawning them (seconds here) is inside it, so a 1 s budget leaves the
    # first visit's all-reduce sizes (the fit) and its cheapest verify pass (the table), and names the others
    out = tmp_path / "tp.json"
    args = ["sweep", "--tp", "2", "--model", TINY_SHAPE, "--tokens", "1,4,16", "--context", "32", "--repeats", "2"]
    assert mtp.main([*args, "--rounds", "3", "--budget", "1", "--threads", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    data = mtp.load_tp_sweep(out)
    assert [r["new_tokens"] for r in data["verify"]] == [1]
    assert {r["bytes"] for r in data["allreduce"]} == {n * 64 * 4 for n in (1, 4, 16)}
    assert sorted(data["dropped"]) == ["batch 1 x 16 new tokens", "batch 1 x 4 new tokens"]
    assert "dropped for the budget: " in printed and "batch 1 x 4 new tokens" in printed


@gloo
def test_sweep_under_torchrun(tmp_path):
    out = tmp_path / "tp.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["-m", "measure.tp", "sweep", "--tp", "2", "--model", TINY_SHAPE, "--tokens", "1,4", "--context", "16"]
    cmd += ["--repeats", "2", "--rounds", "1", "--timeout", "120", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("torchrun did not finish within 180 s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("allreduce_latency_us = ") == 1  # rank 0 alone reports
    data = mtp.load_tp_sweep(out)
    assert data["measured"]["tp"] == 2 and {r["new_tokens"] for r in data["verify"]} == {1, 4}


@gloo
def test_specroof_measure_sweep_tp_then_fit(tmp_path, capsys):
    """The documented command: `specroof measure sweep --tp 2`, then `specroof measure fit --sweep` on its folder."""
    from specroof.cli import main

    out = tmp_path / "tp"
    args = ["measure", "sweep", "--tp", "2", "--model", TINY_SHAPE, "--tokens", "1,4", "--context", "16"]
    assert main(args + ["--repeats", "2", "--budget", "3", "--out", str(out)]) == 0
    assert "allreduce_latency_us = " in capsys.readouterr().out
    assert main(["measure", "fit", "--sweep", str(out), "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["fit"]
    assert fit["tp"] == 2 and fit["latency_s"] > 0 and fit["latency_q25_s"] <= fit["latency_q75_s"]
    # a plain verify sweep still needs its starting profile: one line, not a traceback
    assert main(["measure", "fit", "--sweep", str(tmp_path)]) == 2
    assert "--hardware is required" in capsys.readouterr().err
