"""The fast paths give the slow paths' numbers: scalar pass pricing against the array path, the policy simulator's
stream walk against its round-by-round loop, and the report's shared work against the work done again.

No timing here (benchmarks/bench_scalar.py and benchmarks/bench_report_profile.py time them)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.passtime import _step_time, device_memory, pass_cost, pass_seconds, pass_time
from roofline.costing.pricing import Pricing
from roofline.passes.cost import array_sum, forward_cost, scalar_count
from roofline.passes.model import PRESETS, get_model
from roofline.speculation.gamma_policies import (
    BatchSchedule,
    GammaPolicy,
    HeuristicSchedule,
    StaticGamma,
    _simulate_rounds,
    _simulate_stream,
    compare_policies,
)

REL = 1e-12
GPUS = ("h100-sxm-80gb", "a100-sxm-80gb", "mi300x-192gb", "l4-24gb")
ENGINES = (None, "serving", "compiled", "vllm", "sglang", "trtllm", "eager", "hf")


def _pricings(rng: np.random.Generator, n: int) -> list[Pricing]:
    out = []
    while len(out) < n:
        opts = {
            "engine": ENGINES[int(rng.integers(len(ENGINES)))],
            "dtype": ("bf16", "fp16", "int4", "fp8", "int8")[int(rng.integers(5))],
            "kv_dtype": (None, "fp8", "bf16")[int(rng.integers(3))],
            "tp": (1, 1, 2, 4)[int(rng.integers(4))],
            "efficiency": bool(rng.integers(2)),
            "overhead_s": (None, None, 3e-6)[int(rng.integers(3))],
            "offload": (None, None, None, "pcie4-x16")[int(rng.integers(4))],
        }
        try:
            pr = Pricing.of(GPUS[int(rng.integers(len(GPUS)))], **opts)
        except SpecroofError:  # no ceiling for the dtype, an engine the profile refuses: draw again
            continue
        spec = get_model("llama-3.2-1b")
        try:
            _array_seconds(spec, pr, 1, 1, 0)
        except SpecroofError as exc:  # TP without a link: the scalar path refuses it with the same words
            with pytest.raises(SpecroofError) as got:
                pass_seconds(spec, pr, 1, 1, 0)
            assert str(got.value) == str(exc)
            continue
        out.append(pr)
    return out


def _array_seconds(spec, pr, b, n, c, tree=None, tp=None):
    """The array path: 1-element arrays, so no scalar shortcut can be taken."""
    cost = pass_cost(spec, pr, np.array([b]), None if tree is not None else np.array([n]), np.array([c]), tree)
    return float(
        pr.time_model.pass_seconds(cost, pr.dtype, overhead_s=pr.overhead_s, tp=pr.tp if tp is None else tp)[0]
    )


def _config(rng: np.random.Generator, spec):
    b = int(rng.integers(1, 512))
    n = int(rng.integers(1, 300))
    c = int(rng.integers(0, min(spec.max_context - n, 64_000)))
    return b, n, c


def test_scalar_pass_seconds_matches_the_array_path_on_random_configurations():
    rng = np.random.default_rng(27)
    names = sorted(PRESETS)
    checked = 0
    for pr in _pricings(rng, 40):
        for name in rng.choice(names, 6, replace=False):
            spec = get_model(str(name))
            b, n, c = _config(rng, spec)
            fast = pass_seconds(spec, pr, b, n, c)
            assert fast.shape == ()
            assert float(fast) == pytest.approx(_array_seconds(spec, pr, b, n, c), rel=REL, abs=0)
            # a drafter's own passes run on one device (tp=1 over a TP pricing)
            assert float(pass_seconds(spec, pr, b, n, c, tp=1)) == pytest.approx(
                _array_seconds(spec, pr, b, n, c, tp=1), rel=REL, abs=0
            )
            checked += 1
    assert checked == 240
    moe = [n for n in names if get_model(n).is_moe]
    assert moe, "the presets should include a mixture-of-experts model"


def test_scalar_tree_pass_matches_the_array_path():
    rng = np.random.default_rng(5)
    spec = get_model("llama-3.1-8b")
    for pr in _pricings(rng, 12):
        depths = np.sort(rng.integers(1, 8, size=int(rng.integers(1, 60))))
        depths[0] = 1
        b, c = int(rng.integers(1, 64)), int(rng.integers(0, 8000))
        fast = float(pass_seconds(spec, pr, b, None, c, tree=depths))
        assert fast == pytest.approx(_array_seconds(spec, pr, b, None, c, tree=depths), rel=REL, abs=0)


def _measured_terms(**options):
    """An H100 Pricing whose time model has a measured profile's terms (gemv bandwidth, rates for passes of 2 and
    3-16 rows, attention rate, small-matmul saturation, partial overlap). A copy: Pricing.of hands out shared,
    cached objects, and only the copy's cached time model is replaced."""
    pr = dataclasses.replace(Pricing.of("h100-sxm-80gb", **options))
    pr.__dict__["time_model"] = dataclasses.replace(
        pr.time_model, gemv_bandwidth_bytes_per_s=2.1e12, attention_flop_per_s=3.0e14, matmul_half_tokens=7.0,
        overlap=0.35, rows_bandwidth_bytes_per_s=((2, 2.6e12), (16, 2.9e12)),
    )  # fmt: skip
    return pr


def test_scalar_path_reaches_every_time_model_branch():
    """gemv bandwidth, the attention rate, small-matmul saturation and partial overlap (a measured profile's terms)."""
    spec, moe = get_model("llama-3.1-8b"), get_model("mixtral-8x7b")
    for engine in (None, "serving"):
        pr = _measured_terms(engine=engine)
        for s in (spec, moe):
            for b, n, c in ((1, 1, 1024), (3, 1, 0), (8, 17, 4000), (64, 5, 100)):
                assert float(pass_seconds(s, pr, b, n, c)) == pytest.approx(
                    _array_seconds(s, pr, b, n, c), rel=REL, abs=0
                )


def _assert_same_breakdown(fast, slow):
    """The per-operator table and the pass's bytes and FLOPs of the scalar path are the array path's within REL."""
    a, b = fast.breakdown(), slow.breakdown()
    assert a.columns.tolist() == b.columns.tolist()
    assert a["operator"].tolist() == b["operator"].tolist() and a["bound"].tolist() == b["bound"].tolist()
    for col in ("t_memory_s", "t_compute_s", "t_s"):
        np.testing.assert_allclose(a[col], b[col], rtol=REL, atol=0, err_msg=col)
    for f in ("flops", "bytes_weights", "bytes_kv_read", "bytes_kv_write", "bytes_act", "bytes", "total_flops"):
        np.testing.assert_allclose(getattr(fast.cost, f), getattr(slow.cost, f), rtol=REL, atol=0, err_msg=f)
        assert np.shape(getattr(fast.cost, f)) == np.shape(getattr(slow.cost, f)), f
    for f in ("batch", "new_tokens", "context", "tokens", "n_layers", "vocab_size", "mlp_matrices", "n_moe_layers"):
        assert np.array_equal(getattr(fast.cost, f), getattr(slow.cost, f)), f
    for f in ("allreduce_bytes", "experts_touched"):
        np.testing.assert_allclose(getattr(fast.cost, f), getattr(slow.cost, f), rtol=REL, atol=0, err_msg=f)
    assert fast.cost.compute_dtype == slow.cost.compute_dtype and fast.cost.weight_dtype == slow.cost.weight_dtype
    assert fast.cost.kv_replicated == slow.cost.kv_replicated


def test_scalar_pass_time_equals_the_array_step_time(monkeypatch):
    import roofline.passes.cost as cost_mod

    rng = np.random.default_rng(9)
    for pr in _pricings(rng, 16):
        for name in ("llama-3.1-8b", "llama-3.2-1b", "mixtral-8x7b"):
            spec = get_model(name)
            b, n, c = _config(rng, spec)
            fast = pass_time(spec, pr, b, n, c)
            with monkeypatch.context() as m:  # the array path on 0-d arrays: forward_cost's shortcut off
                m.setattr(cost_mod, "scalar_config", lambda *a, **k: None)
                cost = pass_cost(spec, pr, np.array(b), np.array(n), np.array(c))
            slow = _step_time(cost, pr, device_memory(spec, pr, cost.batch, cost.context + cost.new_tokens))
            assert fast.operators == slow.operators
            for f in ("op_memory_s", "op_compute_s", "op_time_s", "t_memory_s", "t_compute_s", "t_step_s", "intensity"):
                np.testing.assert_allclose(getattr(fast, f), getattr(slow, f), rtol=REL, atol=0, err_msg=f)
                assert np.shape(getattr(fast, f)) == np.shape(getattr(slow, f)), f
            assert fast.overhead_s == pytest.approx(slow.overhead_s, rel=REL, abs=0)
            assert int(fast.tokens) == int(slow.tokens) and fast.ridge == slow.ridge
            assert float(fast.memory_bytes) == float(slow.memory_bytes)
            assert bool(fast.fits_in_memory) == bool(slow.fits_in_memory)
            assert fast.to_frame().columns.tolist() == slow.to_frame().columns.tolist()
            _assert_same_breakdown(fast, slow)


def test_scalar_forward_cost_equals_the_array_cost():
    for name in sorted(PRESETS)[:12] + ["llama-3.1-8b"]:
        spec = get_model(name)
        for b, n, c in ((1, 1, 0), (4, 9, 1024), (32, 64, 100)):
            fast = forward_cost(spec, b, n, c, weight_dtype="int4", kv_dtype="fp8")
            slow = forward_cost(spec, np.array(b), np.array(n), np.array(c), weight_dtype="int4", kv_dtype="fp8")
            assert fast.operators == slow.operators and fast.n_layers == slow.n_layers
            for f in ("flops", "bytes_weights", "bytes_kv_read", "bytes_kv_write", "bytes_act", "total_bytes"):
                np.testing.assert_allclose(getattr(fast, f), getattr(slow, f), rtol=REL, atol=0, err_msg=f)
            assert float(fast.experts_touched) == pytest.approx(float(slow.experts_touched), rel=REL, abs=0)
            assert float(fast.allreduce_bytes) == float(np.asarray(slow.allreduce_bytes))
    abstract = forward_cost(get_model("llama-3.1-8b").from_params(13e9), 1, 1, 0)
    assert abstract.operators == ("linear",) and float(abstract.total_flops) == 2 * 13e9


def test_bad_scalars_still_get_the_array_paths_errors():
    spec = get_model("llama-3.1-8b")
    pr = Pricing.of("h100-sxm-80gb")
    for kwargs, words in (
        ({"batch": 0}, "batch must be >= 1"),
        ({"batch": 1.5}, "batch must be a whole number"),
        ({"context": -1}, "context must be >= 0"),
        ({"new_tokens": float("nan")}, "new_tokens must be finite"),
        ({"context": spec.max_context}, "exceeds"),
    ):
        args = {"batch": 1, "new_tokens": 1, "context": 1024, **kwargs}
        with pytest.raises(SpecroofError, match=words):
            pass_time(spec, pr, args["batch"], args["new_tokens"], args["context"])
        with pytest.raises(SpecroofError, match=words):
            pass_seconds(spec, pr, args["batch"], args["new_tokens"], args["context"])
    assert scalar_count(True, 1) is None and scalar_count(np.int64(3), 1) == 3 and scalar_count(2.0, 1) == 2


def test_array_sum_is_numpys_sum_to_the_bit():
    rng = np.random.default_rng(3)
    for k in range(1, 20):
        v = (rng.random(k) * 10.0 ** rng.integers(-9, 9, size=k)).tolist()
        assert array_sum(v) == float(np.sum(np.array(v)))


class _Alternate(GammaPolicy):
    """A policy the stream walk knows nothing about: it must be asked each round, with the accepted counts."""

    name = "alternate"

    def start(self, batch: int) -> int:
        return 2

    def next(self, gamma: int, accepted, batch: int) -> int:
        assert accepted.dtype == np.int64 and accepted.shape == (batch,)
        return 6 if int(accepted.sum()) % 2 else max(1, gamma - 1)


@pytest.mark.parametrize("batch", [1, 3])
def test_policy_stream_walk_equals_the_round_by_round_loop(batch):
    curve = np.array([[0.9, 0.8, 0.7, 0.75]])
    for policy in (HeuristicSchedule(), HeuristicSchedule(initial=2, up=3, max_gamma=9), StaticGamma(4),
                   StaticGamma(0), BatchSchedule({1: 3, 2: 5}), _Alternate()):  # fmt: skip
        t_round = {g: 1.0 + 0.1 * g for g in range(70)}.__getitem__
        fast_rng, slow_rng = np.random.default_rng(11), np.random.default_rng(11)
        fast_rng.integers(0, 5)  # a buffered 32-bit draw before: the walk must leave it alone
        slow_rng.integers(0, 5)
        fast = _simulate_stream(policy, curve[0].tolist(), t_round, 1.0, batch, 3000, fast_rng)
        slow = _simulate_rounds(policy, curve, t_round, 1.0, batch, 3000, slow_rng, 0.0, None)
        assert (fast.tokens, fast.seconds, fast.rounds) == (slow.tokens, slow.seconds, slow.rounds), policy.name
        np.testing.assert_array_equal(fast.gammas, slow.gammas)
        assert fast_rng.bit_generator.state == slow_rng.bit_generator.state  # the caller's next draws agree
        assert fast_rng.integers(0, 1 << 40) == slow_rng.integers(0, 1 << 40)


def test_simulate_policy_takes_the_stream_walk_and_compare_policies_is_unchanged():
    """compare_policies shares one generator over several runs: the walk must leave it where the loop does."""
    pr = Pricing.of("h100-sxm-80gb")
    args = ("llama-3.1-8b", "llama-3.2-1b", [0.8, 0.7, 0.6], [HeuristicSchedule(), BatchSchedule({1: 2})])
    fast = compare_policies(pr, *args, rounds=4000)
    import roofline.speculation.gamma_policies as gp

    walk = gp._simulate_stream
    try:
        gp._simulate_stream = lambda policy, curve, t_round, t_step_s, batch, n, gen: gp._simulate_rounds(
            policy, np.asarray([curve]), t_round, t_step_s, batch, n, gen, 0.0, None
        )
        slow = compare_policies(pr, *args, rounds=4000)
    finally:
        gp._simulate_stream = walk
    assert fast.equals(slow)


def test_short_sweeps_priced_one_by_one_match_the_array_path():
    """A tree's levels and a chain's steps (short 1-D sweeps) take the plain-float path; long ones the array path."""
    from roofline.costing import passtime

    rng = np.random.default_rng(2)
    spec = get_model("llama-3.2-1b")
    for pr in _pricings(rng, 10):
        w = rng.integers(1, 40, size=int(rng.integers(1, passtime.FEW + 1)))
        ctx = 1024 + np.concatenate([[0], np.cumsum(w)[:-1]])
        b = int(rng.integers(1, 64))
        fast = pass_seconds(spec, pr, b, w, ctx)
        cost = pass_cost(spec, pr, np.array([b])[:, None], w[None, :], ctx[None, :])  # 2-D: never the short path
        slow = pr.time_model.pass_seconds(cost, pr.dtype, overhead_s=pr.overhead_s, tp=pr.tp)[0]
        assert fast.shape == w.shape
        np.testing.assert_allclose(fast, slow, rtol=REL, atol=0)
        # a scalar batch against an array of batches broadcast the same way
        np.testing.assert_allclose(pass_seconds(spec, pr, np.array([b]), w, ctx), slow, rtol=REL, atol=0)
    with pytest.raises(SpecroofError, match="new_tokens must be >= 1"):
        pass_seconds(spec, Pricing.of("h100-sxm-80gb"), 1, np.array([1, 0, 2]), np.array([5, 6, 7]))


def test_the_page_writes_each_figure_from_one_draw_with_savefigs_pixels(tmp_path):
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    from matplotlib.image import imread

    from roofline.plot import roofline_chart
    from specroof.report import FIGURE_DPI, save_png

    pngs = []
    for i in range(2):
        fig = roofline_chart(["a100-sxm-80gb", "h100-sxm-80gb"], ["bf16"])  # constrained layout
        path = tmp_path / f"{i}.png"
        fig.savefig(path, dpi=FIGURE_DPI) if i == 0 else save_png(fig, path, FIGURE_DPI)
        plt.close(fig)
        pngs.append(imread(path))
    assert pngs[0].shape == pngs[1].shape
    np.testing.assert_array_equal(pngs[0], pngs[1])


@pytest.fixture
def slow_paths(monkeypatch):
    """Every fast path off: passes through the array path, policies round by round, trees rebuilt each time."""
    import roofline.costing.passtime.passes as pt
    import roofline.deploy.tree_sizing as ts
    import roofline.passes.cost as cost
    import roofline.speculation.gamma_policies as gp
    import roofline.speculation.predict as pd_

    def slow():
        monkeypatch.setattr(cost, "scalar_config", lambda *a, **k: None)  # forward_cost's own scalar shortcut
        monkeypatch.setattr(pt, "_few_seconds", lambda *a, **k: None)
        monkeypatch.setattr(
            gp,
            "_simulate_stream",
            lambda policy, curve, t_round, t_step_s, batch, n, gen: gp._simulate_rounds(
                policy, np.asarray([curve]), t_round, t_step_s, batch, n, gen, 0.0, None
            ),
        )
        monkeypatch.setattr(ts, "_tree_for", lambda opt, n, depth: opt.tree_for(n, depth))
        pd_._heuristic_mix.cache_clear()

    yield slow
    pd_._heuristic_mix.cache_clear()


def test_page_sections_give_the_slow_paths_rows(tmp_path, slow_paths):
    """The answer, the plan and the tree sections' summary rows, and the heuristic schedule's alpha, computed with
    the fast paths and again with every one of them off: the same rows (to floating-point noise)."""
    import roofline.speculation.predict as pd_
    from specroof import report

    gpus = ["a100-sxm-80gb", "h100-sxm-80gb"]

    def rows(out):
        report._TREE_CACHE.clear()
        w = report.ReportWriter(out)
        got = report.answer(w, gpus).summary | report.trees_section(w, gpus).summary
        return got, pd_.alpha_for_heuristic(2.28), pd_._heuristic_mix(3.1)

    fast = rows(tmp_path / "fast")
    pd_._heuristic_mix.cache_clear()
    slow_paths()
    slow = rows(tmp_path / "slow")
    assert fast[1] == slow[1] and fast[2] == slow[2]
    for key in ("answer", "tree_size"):
        assert len(fast[0][key]) == len(slow[0][key]) == 2
        for a, b in zip(fast[0][key], slow[0][key], strict=True):
            assert a.keys() == b.keys()
            for k in a:
                if isinstance(a[k], float):
                    assert a[k] == pytest.approx(b[k], rel=1e-9, abs=0), (key, k)
                else:
                    assert a[k] == b[k], (key, k)


def test_scalar_results_fill_every_field_of_their_dataclasses():
    """The scalar path fills PassCost and StepTime without their __init__: a field added later must be filled too."""
    st = pass_time("llama-3.1-8b", Pricing.of("h100-sxm-80gb"), 2, 3, 100)
    for obj in (st, st.cost):
        names = {f.name for f in dataclasses.fields(obj)}
        assert names <= set(vars(obj)), sorted(names - set(vars(obj)))
        assert obj == dataclasses.replace(obj)  # equal to one its own __init__ builds from the same fields


def test_scalar_memory_footprint_equals_the_array_one():
    from roofline.costing.passtime import memory_footprint

    for name in ("llama-3.1-8b", "mixtral-8x7b"):
        for b, c, n in ((1, 1024, 1), (7, 0, 5), (64, 30000, 17)):
            for kw in ({}, {"weight_dtype": "int4", "kv_dtype": "fp8"}):
                fast = memory_footprint(name, b, c, new_tokens=n, **kw)
                slow = memory_footprint(name, np.array([b]), np.array([c]), new_tokens=np.array([n]), **kw)
                assert type(fast.kv_bytes) is np.float64 and type(fast.total_bytes) is np.float64
                for f in ("weights_bytes", "kv_bytes", "activation_bytes", "total_bytes"):
                    assert float(getattr(fast, f)) == float(np.ravel(getattr(slow, f))[0]), f
    with pytest.raises(SpecroofError, match="batch must be >= 1"):
        memory_footprint("llama-3.1-8b", 0)


NEW_ATTENTION = ("deepseek-v3", "deepseek-v2-lite", "kimi-k2", "gpt-oss-20b", "gpt-oss-120b")


def test_scalar_cost_of_latent_and_sliding_attention_is_the_array_paths_to_the_last_bit():
    """MLA (absorbed) and sliding-window layers: forward_cost's scalar terms equal its array path's exactly, on both
    sides of the window (context below, at and above 128) and for trees."""
    rng = np.random.default_rng(21)
    fields = ("flops", "bytes_weights", "bytes_kv_read", "bytes_kv_write", "bytes_act")
    for name in NEW_ATTENTION:
        spec = get_model(name)
        configs = [(1, 1, 0), (1, 1, 127), (2, 3, 128), (5, 1, 129), (7, 9, 32768)]
        configs += [_config(rng, spec) for _ in range(8)]
        for b, n, c in configs:
            for kw in ({"weight_dtype": "bf16"}, {"weight_dtype": "fp8", "kv_dtype": "fp8"}, {"weight_dtype": "int4"}):
                fast = forward_cost(spec, b, n, c, **kw)
                slow = forward_cost(spec, np.array([b]), np.array([n]), np.array([c]), **kw)
                for f in fields:
                    assert np.array_equal(getattr(fast, f).ravel(), getattr(slow, f).ravel()), (name, b, n, c, f)
        depths = np.array([1, 2, 2, 3, 3, 3, 4])
        fast = forward_cost(spec, 4, None, 300, tree=depths)
        slow = forward_cost(spec, np.array([4]), None, np.array([300]), tree=depths)
        for f in fields:
            assert np.array_equal(getattr(fast, f).ravel(), getattr(slow, f).ravel()), (name, "tree", f)


def test_scalar_pass_seconds_of_latent_and_sliding_attention_matches_the_array_path():
    rng = np.random.default_rng(23)
    checked = 0
    for pr in _pricings(rng, 16):
        for name in NEW_ATTENTION:
            spec = get_model(name)
            b, n, c = _config(rng, spec)
            assert float(pass_seconds(spec, pr, b, n, c)) == pytest.approx(
                _array_seconds(spec, pr, b, n, c), rel=REL, abs=0
            )
            checked += 1
    assert checked == 80


@pytest.mark.parametrize("engine", [None, "vllm", "compiled", "hf"])
def test_scalar_pass_time_over_presets_dtypes_tp_trees_and_chains_equals_the_array_step_time(engine, monkeypatch):
    """Every preset, three dtypes, one and two devices, a chain's verify pass and a tree's: StepTime field by field."""
    import roofline.passes.cost as cost_mod
    from roofline.costing.passtime import step_pricer

    tree = np.array([1, 2, 2, 3, 3, 3, 4])
    took_the_coefficients = 0
    for dtype in ("bf16", "fp8", "int4"):
        for tp in (1, 2):
            pr = Pricing.of("h100-sxm-80gb", dtype=dtype, engine=engine, tp=tp)
            for name in sorted(PRESETS):
                spec = get_model(name)
                took_the_coefficients += step_pricer(spec, pr, tp) is not None
                for b, n, c, t in ((1, 5, 1000, None), (3, None, 300, tree), (1, 1, 0, None)):
                    fast = pass_time(spec, pr, b, n, c, tree=t)
                    with monkeypatch.context() as m:
                        m.setattr(cost_mod, "scalar_config", lambda *a, **k: None)
                        cost = pass_cost(spec, pr, np.array(b), None if n is None else np.array(n), np.array(c), t)
                    slow = _step_time(cost, pr, device_memory(spec, pr, cost.batch, cost.context + cost.new_tokens))
                    assert fast.operators == slow.operators, name
                    for f in ("op_memory_s", "op_compute_s", "op_time_s", "t_memory_s", "t_compute_s", "t_step_s",
                              "intensity", "memory_bytes"):  # fmt: skip
                        np.testing.assert_allclose(getattr(fast, f), getattr(slow, f), rtol=REL, atol=0, err_msg=name)
                        assert np.shape(getattr(fast, f)) == np.shape(getattr(slow, f)), (name, f)
                    assert fast.overhead_s == pytest.approx(slow.overhead_s, rel=REL, abs=0)
                    assert int(fast.tokens) == int(slow.tokens) and fast.ridge == slow.ridge
                    assert bool(fast.fits_in_memory) == bool(slow.fits_in_memory)
                    _assert_same_breakdown(fast, slow)
    # eager launches price only on the array path; the others take the coefficient arrays for standard attention
    assert (took_the_coefficients == 0) == (engine == "hf")


def test_scalar_pass_time_reaches_every_time_model_branch(monkeypatch):
    """pass_time's coefficient arrays under a measured profile's terms: gemv bandwidth, the attention rate,
    small-matmul saturation and partial overlap, with and without an engine, over one and two devices."""
    import roofline.passes.cost as cost_mod
    from roofline.costing.passtime import step_pricer

    for engine in (None, "serving", "vllm"):
        for tp in (1, 2):
            pr = _measured_terms(engine=engine, tp=tp)
            for name in ("llama-3.1-8b", "mixtral-8x7b"):
                spec = get_model(name)
                assert step_pricer(spec, pr, tp) is not None
                for b, n, c in ((1, 1, 1024), (3, 1, 0), (8, 17, 4000), (64, 5, 100)):
                    fast = pass_time(spec, pr, b, n, c)
                    with monkeypatch.context() as m:
                        m.setattr(cost_mod, "scalar_config", lambda *a, **k: None)
                        cost = pass_cost(spec, pr, np.array(b), np.array(n), np.array(c))
                    slow = _step_time(cost, pr, device_memory(spec, pr, cost.batch, cost.context + cost.new_tokens))
                    for f in ("op_memory_s", "op_compute_s", "op_time_s", "t_memory_s", "t_compute_s", "t_step_s"):
                        np.testing.assert_allclose(getattr(fast, f), getattr(slow, f), rtol=REL, atol=0, err_msg=f)
                    _assert_same_breakdown(fast, slow)
