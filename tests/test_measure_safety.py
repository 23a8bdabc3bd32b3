"""Nothing measured is lost: per-visit rows, damaged files, locks, refusals before writing, resumable decoding
runs; and the device probe's choices."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import measure.sweep as sweeps  # noqa: E402
from measure.budget import Budget  # noqa: E402
from measure.choose import bf16_units, choose_dtype, choose_width  # noqa: E402
from measure.fit import fit  # noqa: E402
from measure.pair import PairConfig  # noqa: E402
from measure.store import FolderLock, SweepStore, read_results  # noqa: E402
from roofline import SpecroofError, load_hardware  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402

TINY = ModelSpec("tiny", 2, 64, 4, 2, 16, 128, 100, max_context=512)
GRID = dict(batch=[1], new_tokens=[1, 2], context=[0], dtype=["fp32"], repeats=1, progress=False)


def test_every_visit_is_a_row_and_resume_adds_visits(tmp_path):
    out = tmp_path / "sw"
    df = sweeps.sweep(TINY, rounds=1, out=out, **GRID)
    assert len(df) == 2 and (df["visits"] == 1).all()
    df = sweeps.sweep(TINY, rounds=2, out=out, resume=True, **GRID)
    raw = pd.read_csv(out / "results.csv")
    assert len(raw) == 4 and sorted(raw["visit"]) == [0, 0, 1, 1]
    assert len(df) == 2 and (df["visits"] == 2).all() and (df["repeats"] == 2).all()


def test_results_are_never_cleared_implicitly(tmp_path):
    out = tmp_path / "sw"
    sweeps.sweep(TINY, out=out, **GRID)
    before = (out / "results.csv").read_text()
    with pytest.raises(SpecroofError, match="--resume to continue them, --overwrite"):
        sweeps.sweep(TINY, out=out, **GRID)
    for bad in (
        dict(dtype=["fp17"]),
        dict(context=[999999]),
        dict(device="cuda" if not torch.cuda.is_available() else "xyz"),
    ):
        with pytest.raises(SpecroofError):
            sweeps.sweep(TINY, out=out, **{**GRID, **bad})
    assert (out / "results.csv").read_text() == before
    sweeps.sweep(TINY, out=out, overwrite=True, **GRID)
    assert len(pd.read_csv(out / "results.csv")) == 2


def test_context_beyond_the_model_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(SpecroofError, match="exceeds llama-68m's max context 2048: use contexts up to"):
        sweeps.sweep("llama-68m", batch=[1], new_tokens=[64], context=[128, 2048], out=tmp_path / "x", progress=False)
    assert not (tmp_path / "x" / "meta.json").exists()
    # more new tokens than the model holds: no context fixes it, fewer tokens do (it said "contexts up to -67232")
    with pytest.raises(SpecroofError, match="max context 2048: use at most 1920 new tokens$"):
        sweeps.sweep("llama-68m", batch=[1], new_tokens=[4096], context=[128], progress=False)
    with pytest.raises(SpecroofError, match="max context 2048: new tokens and context together must stay within 2048$"):
        sweeps.sweep("llama-68m", batch=[1], new_tokens=[2049], context=[2048], progress=False)


def test_resume_refuses_another_models_rows(tmp_path):
    out = tmp_path / "sw"
    sweeps.sweep(TINY, out=out, **GRID)
    other = ModelSpec("tiny", 2, 128, 4, 2, 32, 256, 100, max_context=512)  # same name, another shape
    with pytest.raises(SpecroofError, match="cannot resume"):
        sweeps.sweep(other, out=out, resume=True, **GRID)


def test_a_cut_last_row_is_dropped_and_the_next_row_is_not_merged(tmp_path):
    st = SweepStore(tmp_path, ("a",))
    st.append({"a": 1, "t": 0.5})
    st.append({"a": 2, "t": 0.25})
    path = tmp_path / "results.csv"
    path.write_text(path.read_text()[:-4])  # a crash in the middle of the last row
    with pytest.warns(UserWarning, match="dropped"):
        assert list(read_results(path)["a"]) == [1]
    with pytest.warns(UserWarning):
        st.append({"a": 3, "t": 0.125})
    assert path.read_text().splitlines() == ["a,t", "1,0.5", "3,0.125"]


def test_a_damaged_line_is_an_error_naming_it(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("a,t\n1,0.5\ngarbage\n2,0.25\n")
    with pytest.raises(SpecroofError, match="line 3 has 1 fields, the header has 2"):
        read_results(path)


def test_a_second_run_on_the_same_folder_is_refused(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / ".lock").write_text(str(holder.pid))
        with pytest.raises(SpecroofError, match=f"in use by another run \\(pid {holder.pid}\\)"):
            sweeps.sweep(TINY, out=tmp_path, **GRID)
    finally:
        holder.kill()
        holder.wait()
    # its holder gone, the lock is stale and taken over
    sweeps.sweep(TINY, out=tmp_path, **GRID)
    assert not (tmp_path / ".lock").exists()
    with FolderLock(tmp_path) as lock:
        assert lock.held and (tmp_path / ".lock").read_text() == str(os.getpid())


def test_a_spent_budget_visits_the_reference_only_and_names_the_rest(tmp_path):
    # first visits are the budget's too: only the reference (the calibration, which an API caller gets whatever the
    # budget) runs; the others are rows with status "budget", never saved (a resume visits them), and named
    df = sweeps.sweep(TINY, rounds=50, budget=Budget(1e-6), out=tmp_path, **{**GRID, "new_tokens": [1, 2, 3]})
    assert len(df) == 3 and list(df["new_tokens"]) == [1, 2, 3]
    assert list(df["status"]) == ["ok", "budget", "budget"] and list(df["visits"]) == [1, 0, 0]
    assert sorted(df.attrs["dropped"]) == [f"fp32 batch 1 x {n} new tokens at context 0" for n in (2, 3)]
    assert len(read_results(tmp_path / "results.csv")) == 1
    again = sweeps.sweep(TINY, resume=True, out=tmp_path, **{**GRID, "new_tokens": [1, 2, 3]})
    assert (again["status"] == "ok").all() and not again.attrs["dropped"]


def test_dtype_choice_follows_the_rates():
    assert choose_dtype({"fp32": 58e9, "bf16": 11e9}, "cpu")[0] == "fp32"  # AVX2-only: bf16 emulated
    dt, why = choose_dtype({"fp32": 150e9, "bf16": 870e9}, "cpu")
    assert dt == "bf16" and "870 GFLOP/s" in why
    assert choose_dtype({"fp32": 1e12, "bf16": 1e11}, "cuda")[0] == "bf16"


def test_dtype_choice_trusts_the_cpu_flags_over_one_timing():
    # an AVX2 EPYC whose fp32 product was timed during another process's burst: its flags still say emulated
    dt, why = choose_dtype({"fp32": 15e9, "bf16": 18e9}, "cpu", units=False)
    assert dt == "fp32" and "no bf16 units" in why and "18 GFLOP/s" in why
    dt, why = choose_dtype({"fp32": 65e9, "bf16": 242e9}, "cpu", units=True)
    assert dt == "bf16" and "has bf16 units" in why
    # flags unread: the timing decides, and the reason claims nothing about the hardware
    dt, why = choose_dtype({"fp32": 15e9, "bf16": 18e9}, "cpu", units=None)
    assert dt == "bf16" and "units" not in why
    assert bf16_units(["avx2"]) is False and bf16_units(["avx2", "avx512f", "avx512_bf16"]) is True
    assert bf16_units(["asimd", "sve", "bf16"]) is True and bf16_units(None) is None


def test_matmul_rates_interleave_and_keep_each_dtypes_best(monkeypatch):
    import measure.choose as ch

    # fp32's first timing falls in a slow moment; interleaved rounds give it its real rate back
    script = iter([15e9, 18e9, 50e9, 17e9, 48e9, 18e9])
    order = []

    def fake(dtype, device):
        order.append(dtype)
        return next(script)

    monkeypatch.setattr(ch, "matmul_rate", fake)
    rates = ch.matmul_rates(torch.device("cpu"))
    assert rates == {"fp32": 50e9, "bf16": 18e9}
    assert order == ["fp32", "bf16"] * 3


def test_width_choice_fits_the_time_per_token():
    base = PairConfig().target_spec()
    assert choose_width(base, "bf16", 25e9, 0.02) == 8  # 0.44 GB at 25 GB/s: 18 ms
    assert choose_width(base, "fp32", 25e9, 0.02) == 4  # fp32 doubles the bytes
    assert choose_width(base, "bf16", 3e12, 0.02) == 32  # a GPU: the widest
    assert choose_width(base, "bf16", 3e12, 0.02, memory_bytes=24e9) == 16  # x32's 7 GB would not fit 24 GB / 8
    assert choose_width(base, "bf16", 1e6, 0.001) == 1  # never below the trained pair itself


def test_fit_warns_when_points_cannot_pin_the_parameters():
    hw = load_hardware("a100-sxm-80gb")
    rows = [dict(dtype="bf16", batch=1, new_tokens=n, context=0, status="ok") for n in (1, 8, 64)]
    df = pd.DataFrame(rows)
    from measure.fit import predict_times

    df["t_min_s"] = df["t_median_s"] = predict_times(df, TINY, hw)
    res = fit(df, TINY, hw)
    assert res.warning is not None and "only 3 points" in res.warning


def _fake_runs(monkeypatch, slow_probe_every: int = 0, slow_spec_after: int = 0):
    """Baseline steps of 50 ms; a speculative round emits gamma + 1 tokens in half the baseline's time for them
    (twice that once ``slow_spec_after`` speculative runs are done, where it is set: the arithmetic slowed)."""
    import measure.specval as sv
    from measure.decode import GenerationResult

    calls = {"n": 0, "spec": 0, "probe": 0}

    def fake_base(model, prompts, n, *a, step_times=False, **k):
        calls["n"] += 1
        calls["probe"] += 1
        slow = 10.0 if slow_probe_every and calls["probe"] % slow_probe_every == 0 else 1.0
        steps = [0.05 * slow] * n
        return GenerationResult([[1] * n for _ in prompts], sum(steps), 0.0, step_s=steps)

    def fake_spec(target, drafter, prompts, gamma, n, *a, **k):
        calls["n"] += 1
        calls["spec"] += 1
        rounds = n // (gamma + 1)
        t = (gamma + 1) * 0.05 / 2 * (2.0 if slow_spec_after and calls["spec"] > slow_spec_after else 1.0)
        rows = [
            {"round": r, "seq": q, "accepted": gamma, "emitted": gamma + 1, "t_draft_s": 0.0, "t_verify_s": t}
            | {"t_accept_s": 0.0, "t_commit_s": 0.0}
            for r in range(rounds)
            for q in range(len(prompts))
        ]
        return GenerationResult([[1] * rounds * (gamma + 1)] * len(prompts), rounds * t, 0.0, pd.DataFrame(rows), gamma)

    monkeypatch.setattr(sv, "autoregressive_generate", fake_base)
    monkeypatch.setattr(sv, "speculative_generate", fake_spec)
    monkeypatch.setattr(sv, "_warm_up", lambda *a, **k: None)  # counted runs are the timed ones
    return calls


def test_decoding_runs_are_journalled_and_resumed(tmp_path, monkeypatch):
    from measure.specval import measure_speedups

    calls = _fake_runs(monkeypatch)
    journal = tmp_path / "runs.jsonl"
    kw = dict(max_new_tokens=8, repeats=2, journal=journal)
    first = measure_speedups(None, {"a": 1}, {1: [[0, 1]]}, [1, 3], **kw)
    n = calls["n"]
    lines = journal.read_text().splitlines()
    assert sum(json.loads(x)["kind"] == "block_end" for x in lines) == 2
    # cut the journal inside the second repetition's block: resume redoes only that block
    keep = lines.index(next(x for x in lines if json.loads(x)["kind"] == "block_end")) + 1
    journal.write_text("\n".join(lines[:keep] + lines[keep : keep + 2]) + '\n{"kind": "sp')
    again = measure_speedups(None, {"a": 1}, {1: [[0, 1]]}, [1, 3], resume=True, **kw)
    assert calls["n"] - n == 5  # one probe + 2 configs x (run + probe)
    pd.testing.assert_frame_equal(first, again)


def test_a_speedup_above_its_physical_bound_is_flagged(monkeypatch):
    from measure.specval import measure_speedups

    _fake_runs(monkeypatch, slow_probe_every=2)  # every other baseline probe 10x slow: wall-clock ratios inflate
    df = measure_speedups(None, {"a": 1}, {1: [[0, 1]]}, [3], max_new_tokens=8, repeats=1)
    assert df["speedup_wall"].iloc[0] > df["mean_acceptance_length"].iloc[0]
    assert df["flag"].iloc[0].startswith("noise")
    assert df["speedup_measured"].iloc[0] == pytest.approx(2.0)
    assert df["probe_spread"].iloc[0] > 1.0
    assert np.isfinite(df["probe_spread"]).all()


def test_repetitions_that_disagree_make_a_row_noisy_though_its_baselines_agree(monkeypatch):
    """The arithmetic slows between repetitions while the memory-bound baseline probes do not move: the probes
    agree, the repetitions' own speedups (2.0, then 1.0) do not, and a row whose error is smaller than that is
    noise, with why."""
    from measure.spec_check import mark_unexplained_noise
    from measure.specval import mark_noise, measure_speedups

    _fake_runs(monkeypatch, slow_spec_after=1)
    df = measure_speedups(None, {"a": 1}, {1: [[0, 1]]}, [3], max_new_tokens=8, repeats=2)
    assert df["probe_spread"].iloc[0] == pytest.approx(0.0)
    assert df["rep_spread"].iloc[0] == pytest.approx((2.0 - 1.0) / 1.5)
    judged = mark_unexplained_noise(mark_noise(df.assign(rel_error=0.2)), {})
    assert judged["noisy"].iloc[0] and "repetitions disagreed by 67%" in judged["noise"].iloc[0]
    # an error larger than the repetitions' disagreement is the model's
    assert not mark_noise(df.assign(rel_error=0.8))["noisy"].iloc[0]
    # one repetition: no spread to judge by (NaN), and no row marked for want of one
    one = measure_speedups(None, {"a": 1}, {1: [[0, 1]]}, [3], max_new_tokens=8, repeats=1)
    assert np.isnan(one["rep_spread"].iloc[0])
    assert not mark_noise(one.assign(rel_error=0.2))["noisy"].iloc[0]


def test_the_repetitions_spread_is_the_typical_disagreement_of_two_and_does_not_grow_with_their_number():
    from measure.specval import _pair_spread

    assert _pair_spread([2.0, 1.0]) == pytest.approx(1.0 / 1.5)  # two: |a - b| / their mean, as two probes'
    # three at 1.0 and one at 2.0: three of the six pairs agree, so the median pair disagrees by half that much
    assert _pair_spread([1.0, 1.0, 1.0, 2.0]) == pytest.approx(0.5 * (1.0 / 1.5))
    steady = [1.0, 1.02, 0.98, 1.01, 0.99] * 4  # more repetitions of the same spread: about the same figure
    assert _pair_spread(steady) == pytest.approx(_pair_spread(steady[:5]), rel=0.5)
    assert np.isnan(_pair_spread([1.0])) and np.isnan(_pair_spread([1.0, float("nan")]))


# a sweep that dies by SIGKILL: after K rows, or in the middle of writing row K (half its bytes on disk)
_DYING = """
import os, signal, sys
import measure.store as st
import measure.sweep as sweeps
from roofline.passes.model import ModelSpec
k, mode, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
real = st.SweepStore.append
count = {"n": 0}
def append(self, row):
    count["n"] += 1
    if count["n"] == k:
        if mode == "mid-row":
            with self.path.open("a") as f:
                f.write(",".join(str(v) for v in row.values())[:17])
                f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real(self, row)
st.SweepStore.append = append
spec = ModelSpec("tiny", 2, 64, 4, 2, 16, 128, 100, max_context=512)
sweeps.sweep(spec, batch=[1, 2], new_tokens=[1, 2, 3], context=[0, 8], dtype=["fp32"], repeats=1, rounds=2,
             out=out, resume=os.path.exists(os.path.join(out, "meta.json")), progress=False)
"""


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume_loses_nothing_and_duplicates_nothing(tmp_path):
    rng = np.random.default_rng(2026)
    out = tmp_path / "sw"
    for _ in range(20):  # 20 kills, each after at most one more saved row: the sweep never completes in between
        k = int(rng.integers(1, 3))
        mode = "mid-row" if rng.random() < 0.5 else "between-rows"
        res = subprocess.run([sys.executable, "-c", _DYING, str(k), mode, str(out)], capture_output=True, text=True)
        assert res.returncode == -9, res.stderr[-2000:]
    res = subprocess.run([sys.executable, "-c", _DYING, "0", "none", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]  # the last run resumes and finishes
    with _quiet():
        raw = read_results(out / "results.csv")
    keys = ["batch", "new_tokens", "context", "visit"]
    assert not raw.duplicated(keys).any()
    assert len(raw) == 2 * 3 * 2 * 2  # every point, both visits, exactly once
    assert raw["status"].eq("ok").all() and raw["t_min_s"].notna().all()


class _quiet:
    def __enter__(self):
        import warnings

        self.cm = warnings.catch_warnings()
        self.cm.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *a):
        self.cm.__exit__(*a)


def test_cpu_out_of_memory_becomes_a_row_and_the_rest_is_measured(tmp_path, monkeypatch):
    real = sweeps.ModelRunner.prepare

    def prepare(self, batch, context, new_tokens=0):
        if batch * (context + new_tokens) > 40:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes")
        real(self, batch, context, new_tokens)

    monkeypatch.setattr(sweeps.ModelRunner, "prepare", prepare)
    df = sweeps.sweep(TINY, batch=[1, 4], new_tokens=[1, 8], context=[16], dtype=["fp32"], repeats=1, progress=False)
    status = df.set_index(["batch", "new_tokens"])["status"]
    assert status[(1, 1)] == "ok" and status[(1, 8)] == "ok"
    assert status[(4, 1)] == "oom" and status[(4, 8)] == "oom"


def test_measure_cli_checks_outputs_before_measuring(tmp_path, capsys):
    from specroof.cli import main

    (tmp_path / "f").write_text("x")
    for argv, msg in (
        (["measure", "bench", "--out", "/proc/x.toml"], "cannot write --out"),
        (["measure", "bench", "--out", str(tmp_path)], "is a folder"),
        (["measure", "sweep", "--model", "llama-68m", "--out", str(tmp_path / "f")], "is a file, not a folder"),
        (["measure", "sweep", "--model", "llama-68m", "--resume"], "--resume needs --out"),
        (["measure", "sweep", "--model", "llama-68m", "--dtype", "fp17"], "unknown dtype 'fp17'"),
        (["measure", "sweep", "--model", "llama-68m", "--device", "xyz"], "unknown device"),
        (["measure", "spec", "--pair", "offline", "--early-exit", "99"], "--early-exit must lie in [1, 3]"),
        (["measure", "spec", "--pair", "offline", "--gamma", "0"], "gamma must be >= 1"),
        (["measure", "spec", "--pair", "offline", "--batch", "0"], "batch must be >= 1"),
        (["measure", "spec", "--pair", "offline", "--tokens", "0"], "tokens must be >= 1"),
        (["measure", "spec", "--pair", "offline", "--repeats", "0"], "repeats must be >= 1"),
        (["measure", "spec", "--pair", "offline", "--width", "0"], "--width must be a power of two"),
    ):
        given = "--out" in argv or "--resume" in argv  # --resume is tested without an --out
        code = main([*argv, *([] if given else ["--out", str(tmp_path / "o")])])
        err = capsys.readouterr().err
        assert code == 2 and msg in err and "Traceback" not in err, (argv, err)


def test_thread_choice_interleaves_its_timings(monkeypatch):
    import measure.choose as ch

    monkeypatch.setattr(ch.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    calls = {"n": 0}

    def fake(dtype, device):
        calls["n"] += 1
        two = torch.get_num_threads() == 2
        # the first all-cores timing lands in another process's burst; the later ones run at twice one thread
        return (9e9 if calls["n"] == 1 else 20e9) if two else 10e9

    monkeypatch.setattr(ch, "matmul_rate", fake)
    n, why = ch.choose_threads(torch.device("cpu"))
    assert n == 2 and "2.0x" in why and calls["n"] == 10  # five interleaved tries each
