"""Static-shape passes and CUDA graphs (measure.graphs): the CPU runs the static path without capture, and its
greedy outputs must equal eager and plain decoding; a GPU captures and replays (gpu-marked tests)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from measure import graphs  # noqa: E402
from measure.decode import autoregressive_generate, speculative_generate  # noqa: E402
from measure.fit import crossover_status, fit_host_time  # noqa: E402
from measure.models import Transformer, context_bucket  # noqa: E402
from measure.serve import serve  # noqa: E402
from measure.timing import PassTimer, time_fn  # noqa: E402
from roofline import SpecroofError  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402
from roofline.speculation.trees import Tree  # noqa: E402
from roofline.speculation.verification import SamplingParams  # noqa: E402

SPEC = ModelSpec("target", 4, 64, 4, 2, 16, 128, 50, max_context=1024)
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3], [10, 11, 12, 10, 11, 12, 10, 11]]
TREE = Tree([-1, -1, 0, 0, 1, 2])


def _pair(device: str = "cpu") -> tuple[Transformer, Transformer]:
    torch.manual_seed(0)
    target = Transformer(SPEC, dtype="fp32", init_std=0.08, device=device)
    draft = Transformer(SPEC.replace(n_layers=1, name="draft"), dtype="fp32", init_std=0.08, device=device)
    with torch.no_grad():  # a draft that shares the target's embedding and first layer agrees often
        draft.embed_tokens.weight.copy_(target.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        draft.layers[0].load_state_dict(target.layers[0].state_dict())
    return target, draft


@pytest.fixture(scope="module")
def eager_runs():
    """Every decoding the static path must reproduce, run eagerly once."""
    target, draft = _pair()
    sp = SamplingParams(temperature=1.0)
    out = {
        "plain": autoregressive_generate(target, PROMPTS, 24).tokens,
        "draft": speculative_generate(target, draft, PROMPTS, 3, 24).tokens,
        "early exit": speculative_generate(target, 2, PROMPTS, 4, 24).tokens,
        "tree": speculative_generate(target, draft, PROMPTS, TREE, 24).tokens,
        "sampled chain": speculative_generate(target, draft, PROMPTS, 3, 24, sp, seed=3).tokens,
        "sampled tree": speculative_generate(target, draft, PROMPTS, TREE, 24, sp, seed=3).tokens,
    }
    return out


def _static_runs(target, draft) -> dict[str, list[list[int]]]:
    sp = SamplingParams(temperature=1.0)
    return {
        "plain": autoregressive_generate(target, PROMPTS, 24).tokens,
        "draft": speculative_generate(target, draft, PROMPTS, 3, 24).tokens,
        "early exit": speculative_generate(target, 2, PROMPTS, 4, 24).tokens,
        "tree": speculative_generate(target, draft, PROMPTS, TREE, 24).tokens,
        "sampled chain": speculative_generate(target, draft, PROMPTS, 3, 24, sp, seed=3).tokens,
        "sampled tree": speculative_generate(target, draft, PROMPTS, TREE, 24, sp, seed=3).tokens,
    }


def test_the_static_path_decodes_exactly_as_eager_on_the_cpu(eager_runs):
    target, draft = _pair()
    graphs.attach(target, capture=False)
    graphs.attach(draft, capture=False)
    got = _static_runs(target, draft)
    for kind, tokens in eager_runs.items():
        assert tokens == got[kind], kind
    # greedy speculation under the static path is plain decoding
    assert got["draft"] == got["plain"] == got["early exit"] == got["tree"]
    # the draft's chain ran as one static call per shape, not a call per step
    assert any(k[0] == "chain" for k in draft.runner.calls)
    assert any(k[0] == "tree" for k in draft.runner.calls)


def test_a_padded_batch_leaves_the_live_rows_as_eager_computes_them():
    target, _ = _pair()
    target.setup_cache(4, 64)
    target.cache.rollback([9, 4, 12, 30])
    tokens = torch.tensor([[5, 6], [7, 8], [9, 10]])
    with torch.inference_mode():
        eager = target(tokens).clone()
    kv_eager = [t[:3].clone() for t in target.cache.k]
    graphs.attach(target, capture=False)
    before_row3 = target.cache.k[0][3].clone()
    with torch.inference_mode():
        static = target(tokens)
    assert graphs.padded_batch(3, 4) == 4  # run as a batch of 4: row 3 is padding
    torch.testing.assert_close(static, eager, rtol=1e-5, atol=1e-5)
    for a, b in zip(kv_eager, target.cache.k, strict=True):
        torch.testing.assert_close(b[:3], a)  # the live rows hold what the eager pass wrote
    # the padding ran at length 0: it wrote its own row's first two slots only
    assert not torch.equal(target.cache.k[0][3][:, :2], before_row3[:, :2])
    assert torch.equal(target.cache.k[0][3][:, 2:], before_row3[:, 2:])


def test_serve_with_padded_batches_emits_what_eager_serving_does():
    arrivals = [0.0, 0.0, 0.0, 0.0, 0.0]
    outs = [6, 9, 4, 7, 5]
    prompts = [p for p in PROMPTS] + [[2, 4, 6, 8]]

    def clock():
        clock.t += 1e-3
        return clock.t

    clock.t = 0.0
    runs = {}
    for static in (False, True):
        target, draft = _pair()
        if static:
            graphs.attach(target, capture=False)
            graphs.attach(draft, capture=False)
        runs[static] = serve(
            target,
            prompts,
            arrivals,
            outs,
            policy="static:3",
            drafter=draft,
            slots=4,
            clock=clock,
            sleep=lambda s: None,
        ).tokens
    assert runs[True] == runs[False]
    # three requests left while others ran: batches of 3 and fewer were padded to the capture sizes
    assert len(runs[True]) == 5


def test_context_buckets_bound_the_over_read():
    prev = 0
    for need in range(1, 5000, 7):
        b = context_bucket(need, 1 << 20)
        assert b >= need and b % 64 == 0
        assert b >= prev  # monotone: a growing context crosses each step once
        prev = b
        if need > 256:
            assert (b - need) / need <= 0.25
    assert context_bucket(100, 96 + 8) == 104  # capped at the cache
    with pytest.raises(SpecroofError, match="exceed"):
        context_bucket(200, 128)


def test_capture_sizes_are_vllms_list_capped_at_the_cache():
    assert graphs.CAPTURE_SIZES[:6] == (1, 2, 4, 8, 16, 24)
    assert graphs.capture_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert [graphs.padded_batch(b, 64) for b in (1, 3, 5, 9, 17, 64)] == [1, 4, 8, 16, 24, 64]
    with pytest.raises(SpecroofError):
        graphs.padded_batch(5, 4)


def test_graphs_on_without_a_gpu_and_unknown_modes_are_refused():
    assert graphs.use_graphs("auto", "cpu") is False and graphs.use_graphs("off", "cpu") is False
    with pytest.raises(SpecroofError, match="needs a CUDA device"):
        graphs.use_graphs("on", "cpu")
    with pytest.raises(SpecroofError, match="auto, on, off"):
        graphs.use_graphs("yes", "cpu")
    assert graphs.inductor_missing("cpu") is None or "compile" in graphs.inductor_missing("cpu")


def test_compile_without_a_working_cxx_is_one_line_before_any_work(tmp_path):
    # inductor compiles with $CXX (else g++) and nothing else: a c++ elsewhere on PATH does not count. A fresh
    # interpreter, since inductor reads CXX when it is imported and caches its search.
    import os
    import subprocess
    import sys

    env = {**os.environ, "CXX": str(tmp_path / "no-such-cxx")}
    cmd = [sys.executable, "-m", "specroof", "measure", "sweep", "--model", "qwen2.5-0.5b", "--compile"]
    proc = subprocess.run([*cmd, "--budget", "60"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("specroof")]
    assert len(lines) == 1 and "no-such-cxx" in lines[0] and "C++ compiler" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_the_largest_batch_that_fits_is_a_function_of_memory_alone():
    gb = 1e9
    # 80 GB free, 16 GB of weights to load, 1 GiB aside, 0.5 GB of cache and 0.25 GB of graphs per sequence
    fits = graphs.largest_batch(80 * gb, 0.5 * gb, 0.25 * gb, weight_bytes=16 * gb)
    assert fits == int((80 * gb - 16 * gb - (1 << 30)) // (0.75 * gb))
    graphs.check_batch_fits(fits, 80 * gb, 0.5 * gb, 0.25 * gb, weight_bytes=16 * gb)
    with pytest.raises(SpecroofError, match=f"the largest batch that fits is {fits}"):
        graphs.check_batch_fits(fits + 1, 80 * gb, 0.5 * gb, 0.25 * gb, weight_bytes=16 * gb)
    with pytest.raises(SpecroofError, match="no batch fits"):
        graphs.check_batch_fits(1, 10 * gb, 0.5 * gb, 0.25 * gb, weight_bytes=16 * gb)


def test_a_sweep_refuses_graphs_on_without_a_gpu_before_measuring(tmp_path):
    from measure.sweep import sweep

    with pytest.raises(SpecroofError, match="needs a CUDA device"):
        sweep(SPEC, [1], [1, 2], [8], ["fp32"], device="cpu", graphs="on", out=tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


def test_the_pass_timer_times_passes_apart_from_the_host():
    timer = PassTimer("cpu")
    a = torch.ones(256, 256)
    with timer.span("verify"):
        for _ in range(20):
            a = a @ a / 256
    with timer.span("verify"):
        a = a @ a
    with timer.span("draft"):
        pass
    got = timer.read()
    assert got["verify"] > got["draft"] >= 0.0
    assert timer.read() == {}  # read once, then forgotten
    t = time_fn(lambda: None, warmup=0, repeats=2)
    assert np.isnan(t.host_median_s) and "t_host_median_s" not in t.as_row()  # (the CPU has no second clock)


def test_rounds_record_their_wall_and_host_seconds():
    target, draft = _pair()
    r = speculative_generate(target, draft, PROMPTS[:2], 3, 12).rounds
    assert (r["t_round_s"] >= r["t_draft_s"] + r["t_verify_s"] - 1e-9).all()
    np.testing.assert_allclose(r["t_host_s"], r["t_round_s"] - r["t_draft_s"] - r["t_verify_s"], atol=1e-9)
    base = autoregressive_generate(target, PROMPTS[:2], 6, step_times=True)
    assert len(base.step_device_s) == len(base.step_s) == 6
    assert all(0 < d <= w for d, w in zip(base.step_device_s, base.step_s, strict=True))


def test_the_host_line_is_fitted_through_per_batch_medians():
    # medians 1.1e-4, 1.4e-4, 2.6e-4 at batch 1, 4, 16 (the 9e-4 outlier is not one): 1e-4 + 1e-5 per sequence
    h = fit_host_time([1, 1, 1, 4, 4, 16], [1e-4, 1.1e-4, 9e-4, 1.4e-4, 1.4e-4, 2.6e-4])
    assert h.intercept_s == pytest.approx(1e-4, rel=1e-6) and h.per_seq_s == pytest.approx(0.1e-4, rel=1e-6)
    assert h.seconds(8) == pytest.approx(1.8e-4)
    one = fit_host_time([2, 2, np.nan], [1e-4, 3e-4, 5.0])
    assert one.per_seq_s == 0.0 and one.intercept_s == pytest.approx(2e-4) and one.points == 2
    with pytest.raises(SpecroofError):
        fit_host_time([np.nan], [1.0])


def test_a_crossover_is_a_figure_only_where_the_sweep_places_it():
    assert crossover_status(60.0, 20.0, 128.0) == "measured"
    assert crossover_status(200.0, 50.0, 128.0) == "extrapolated"
    # the eager H200 sweep: passes flat to 10% over 1-256 tokens read a K of 2858
    assert crossover_status(2858.0, 256.0, 256.0) == "flat"
    assert crossover_status(974.0, 40.0, 64.0) == "beyond"
    assert crossover_status(float("inf"), 5.0, 64.0) == "flat"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_graphs_replay_the_eager_decoding_on_a_gpu():
    target, draft = _pair("cuda")
    eager = {
        "plain": autoregressive_generate(target, PROMPTS, 24).tokens,
        "draft": speculative_generate(target, draft, PROMPTS, 3, 24).tokens,
        "tree": speculative_generate(target, draft, PROMPTS, TREE, 24).tokens,
    }
    graphs.attach(target, capture=True)
    graphs.attach(draft, capture=True)
    got = {
        "plain": autoregressive_generate(target, PROMPTS, 24).tokens,
        "draft": speculative_generate(target, draft, PROMPTS, 3, 24).tokens,
        "tree": speculative_generate(target, draft, PROMPTS, TREE, 24).tokens,
    }
    assert got == eager
    assert got["draft"] == got["plain"]
    assert target.runner.stats["captures"] >= 2 and draft.runner.stats["captures"] >= 1
    # a second run replays what the first captured
    before = target.runner.stats["captures"]
    assert speculative_generate(target, draft, PROMPTS, 3, 24).tokens == got["draft"]
    assert target.runner.stats["captures"] <= before + 2  # (a context bucket crossed at most)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_graphs_remove_launch_overhead_on_a_gpu():
    torch.manual_seed(0)
    model = Transformer(ModelSpec("small", 8, 256, 4, 2, 64, 512, 1000, max_context=1024), dtype="bf16", device="cuda")
    from measure.microbench import launch_overhead

    df = launch_overhead(model, [(1, 1, 64), (4, 8, 64)], repeats=10)
    assert {"batch", "new_tokens", "context", "t_uncaptured_s", "t_graph_s", "launch_overhead_s"} <= set(df.columns)
    assert (df["t_graph_s"] > 0).all()
    # eight layers of launches from Python against one replay of the same kernels: uncaptured is not faster
    assert (df["t_graph_s"] <= df["t_uncaptured_s"] * 1.05).all()


def test_the_cli_refuses_graphs_on_and_a_missing_inductor_in_one_line(monkeypatch, capsys, tmp_path):
    from specroof.cli import main

    for argv in (
        ["measure", "sweep", "--model", "llama-68m", "--graphs", "on"],
        ["measure", "spec", "--pair", "offline", "--graphs", "on", "--out", str(tmp_path / "s")],
        ["measure", "serve", "--graphs", "on", "--budget", "5"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--graphs on needs a CUDA device" in err, argv
    monkeypatch.setattr(graphs, "inductor_missing", lambda dev: "--compile needs torch's inductor (test)")
    assert main(["measure", "sweep", "--model", "llama-68m", "--compile", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--compile needs torch's inductor (test)" in err
    assert not (tmp_path / "c").exists() and not (tmp_path / "s").exists()  # nothing was written


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_sweep_with_graphs_times_replays_and_the_host_apart():
    from measure.sweep import sweep

    df = sweep(SPEC, [1, 4], [1, 4, 16], [64], ["bf16"], device="cuda", graphs="on", repeats=3, progress=False)
    assert df.attrs["passes"] == "graphs" and df.attrs["runner"]["captures"] >= 6
    assert (df["status"] == "ok").all() and (df["t_host_median_s"] >= 0).all()
    eager = sweep(SPEC, [1], [1, 4], [64], ["bf16"], device="cuda", graphs="off", repeats=3, progress=False)
    lo = eager.attrs["launch_overhead"]
    assert len(lo) >= 2 and (lo["t_graph_s"] > 0).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_serving_replayed_through_graphs_emits_what_eager_serving_does():
    prompts = [*PROMPTS, [2, 4, 6, 8]]
    runs = {}
    for capture in (False, True):
        target, draft = _pair("cuda")
        if capture:
            graphs.attach(target, capture=True)
            graphs.attach(draft, capture=True)
        runs[capture] = serve(target, prompts, [0.0, 0.0, 0.001, 0.002, 0.003], [6, 9, 4, 7, 5], policy="static:3",
                              drafter=draft, slots=4).tokens  # fmt: skip
    assert runs[True] == runs[False]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_layers_replayed_as_graphs_decode_as_eager():
    if graphs.inductor_missing("cuda"):
        pytest.skip(graphs.inductor_missing("cuda"))
    target, draft = _pair("cuda")
    base = speculative_generate(target, draft, PROMPTS, 3, 16).tokens
    graphs.attach(target, capture=True, compile=True)
    graphs.attach(draft, capture=True, compile=True)
    assert speculative_generate(target, draft, PROMPTS, 3, 16).tokens == base
    assert target.runner.stats["compile_s"] > 0
