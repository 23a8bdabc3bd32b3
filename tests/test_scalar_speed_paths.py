"""The plain-float paths of pass_seconds, speedup and predict_speedup give the array paths' numbers and types.

The reference is the same call with the scalar pricer and a draft model's chain plan switched off
(``scalar_pricer`` and ``chain_plan`` answering None), which sends every pass through the numpy time model and
every round through its array formulas: every preset, chain, tree and n-gram drafters, the engines. No timing
here (benchmarks/bench_scalar.py times them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools

import numpy as np
import pytest

import roofline.drafters as drafters
import roofline.engine as engine_mod
import roofline.passtime as passtime
import roofline.predict as predict
import roofline.speculative as speculative
from roofline.closed_forms import expected_tokens, expected_tokens_scalar
from roofline.drafters import TREE_PRESETS, as_drafter, round_time
from roofline.errors import SpecroofError
from roofline.model import PRESETS, get_model
from roofline.pricing import Pricing
from roofline.speculative import predict_speedup, speedup
from roofline.trees import Tree

REL = 1e-12
DRAFTERS = ("llama-3.2-1b", "eagle3", "mtp", "medusa", "prompt-lookup", "prompt-lookup:0.4", "early-exit:8",
            "block:llama-3.2-1b", "window:256", "hydra")  # fmt: skip
ENGINES = (None, "hf", "vllm", "compiled")


@pytest.fixture
def array_path(monkeypatch):
    """A context manager factory: inside it, no pass is priced by the scalar pricer."""

    @contextlib.contextmanager
    def off():
        with monkeypatch.context() as m:
            m.setattr(passtime, "scalar_pricer", lambda *a, **k: None)
            m.setattr(speculative, "scalar_pricer", lambda *a, **k: None)
            # a draft model's chain plan holds pricers built before the switch: it steps aside too
            m.setattr(speculative, "chain_plan", lambda *a, **k: None)
            m.setattr(predict, "chain_plan", lambda *a, **k: None)
            # a tree plan holds the target's pricer and the draft model's: it steps aside, and none is built anew
            m.setattr(predict, "tree_plan", lambda *a, **k: None)
            m.setattr(drafters, "scalar_pricer", lambda *a, **k: None)
            yield

    return off


def _pricing(engine, tp):
    return Pricing.of("h100-sxm-80gb", engine=engine, tp=tp)


def _same(fast, slow, where):
    """Every field of two result dataclasses: the same type and shape, numbers within REL."""
    for f in dataclasses.fields(fast):
        a, b = getattr(fast, f.name), getattr(slow, f.name)
        assert type(a) is type(b), (where, f.name, type(a), type(b))
        if isinstance(b, (str, type(None))):
            assert a == b, (where, f.name)
            continue
        assert np.shape(a) == np.shape(b), (where, f.name)
        assert np.asarray(a).dtype == np.asarray(b).dtype, (where, f.name)
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=REL, atol=0,
                                   err_msg=f"{where} {f.name}")  # fmt: skip


@pytest.mark.parametrize("engine", ENGINES)
def test_scalar_speedup_equals_the_array_path_over_drafters_batches_and_tp(engine, array_path):
    target = get_model("llama-3.1-8b")
    checked = 0
    for tp, batch, name in itertools.product((1, 2), (1, 8), DRAFTERS):
        pr = _pricing(engine, tp)
        d = as_drafter(name)
        for alpha, gamma, context in ((0.8, 4, 1024), (0.55, 1, 0), (1.0, 3, 7000), (0.0, 2, 17), (0.7, 0, 512)):
            if name == "hydra" and gamma > 4:
                continue
            fast = speedup(pr, target, d, alpha, gamma, batch=batch, context=context)
            with array_path():
                slow = speedup(pr, target, d, alpha, gamma, batch=batch, context=context)
            _same(fast, slow, (engine, tp, batch, name, alpha, gamma, context))
            checked += 1
    assert checked == 2 * 2 * len(DRAFTERS) * 5


def test_scalar_speedup_with_its_options_equals_the_array_path(array_path):
    target = get_model("llama-3.1-8b")
    moe = get_model("mixtral-8x7b")
    cases = [
        (Pricing.of("h100-sxm-80gb", weight_dtype="int4", kv_dtype="fp8"), target, "llama-3.2-1b", {}),
        (Pricing.of("h100-sxm-80gb", offload="pcie4-x16"), target, "llama-3.2-1b", {}),
        (Pricing.of("a100-sxm-80gb", engine="serving"), target, "eagle", {"round_overhead_s": 2e-5}),
        (Pricing.of("h100-sxm-80gb"), target, "llama-3.2-1b", {"draft_hardware": "l4-24gb"}),
        (Pricing.of("h100-sxm-80gb", engine="vllm", tp=2), moe, "mtp:2", {}),
        (Pricing.of("h100-sxm-80gb", overhead_s=3e-6, efficiency=True), target, "medusa:3", {}),
    ]
    for pr, spec, name, kw in cases:
        for batch, gamma in ((1, 5), (16, 2)):
            fast = speedup(pr, spec, name, 0.75, gamma, batch=batch, context=2048, **kw)
            with array_path():
                slow = speedup(pr, spec, name, 0.75, gamma, batch=batch, context=2048, **kw)
            _same(fast, slow, (pr.describe(), spec.name, name, kw, batch, gamma))


@pytest.mark.parametrize("engine", ENGINES)
def test_scalar_predict_speedup_equals_the_array_path(engine, array_path):
    target = get_model("llama-3.1-8b")
    for tp, batch in itertools.product((1, 2), (1, 8)):
        pr = _pricing(engine, tp)
        calls = [
            {"drafter": "llama-3.2-1b", "alpha": 0.8, "gamma": 4},
            {"drafter": "llama-3.2-1b", "mean_accepted": 2.5, "gamma": 3},
            {"drafter": "prompt-lookup:0.5", "alpha": 0.6, "gamma": 5},
            {"drafter": "mtp", "mean_accepted": 1.8},
            {"drafter": "eagle3", "mean_accepted": 3.0},  # its own 59-node tree
            {"drafter": "eagle", "mean_accepted": 2.6},
            {"drafter": "medusa", "mean_accepted": 2.2},
            {"drafter": "hydra", "mean_accepted": 2.9},
            {"drafter": "eagle3", "mean_accepted": 2.0, "tree": "parents:-1,0,0,1"},
            {"drafter": "llama-3.2-1b", "mean_accepted": 2.0, "tree": "eagle"},
            {"drafter": "llama-3.2-1b", "mean_accepted": 2.4, "gamma": "heuristic"},
        ]
        for kw in calls:
            fast = predict_speedup(hardware=pr, target=target, batch=batch, context=1500, **kw)
            with array_path():
                slow = predict_speedup(hardware=pr, target=target, batch=batch, context=1500, **kw)
            _same(fast, slow, (engine, tp, batch, kw))


def test_tree_rounds_equal_the_array_path(array_path):
    target = get_model("llama-3.1-8b")
    for engine, name, tree in itertools.product((None, "vllm"), ("eagle3", "eagle", "llama-3.2-1b"), TREE_PRESETS):
        pr = Pricing.of("h100-sxm-80gb", engine=engine)
        fast = round_time(pr, target, name, TREE_PRESETS[tree], 4, 3000)
        with array_path():
            slow = round_time(pr, target, name, TREE_PRESETS[tree], 4, 3000)
        _same(fast, slow, (engine, name, tree))


def test_scalar_pass_seconds_over_engines_and_tp_equal_the_array_path(array_path):
    for engine, tp, name in itertools.product(ENGINES, (1, 2), ("llama-3.1-8b", "llama-3.2-1b")):
        pr = _pricing(engine, tp)
        spec = get_model(name)
        for b, n, c in ((1, 1, 1024), (8, 5, 0), (8, 1, 30000), (64, 33, 100)):
            fast = passtime.pass_seconds(spec, pr, b, n, c)
            chain = passtime.chain_seconds(spec, pr, b, c, 6, tp)
            with array_path():
                slow = passtime.pass_seconds(spec, pr, b, n, c)
                steps = passtime.pass_seconds(spec, pr, b, 1, c + np.arange(6))
            assert type(fast) is type(slow) and fast.shape == slow.shape == ()
            assert float(fast) == pytest.approx(float(slow), rel=REL, abs=0)
            if engine == "hf":  # an eager engine's kernel launches: only the array path prices them
                assert chain is None
            else:
                assert chain == pytest.approx(float(np.cumsum(steps)[-1]), rel=REL, abs=0)


def _numpy_has_simd_transcendentals() -> bool:
    """Whether numpy runs expm1/log1p through its own AVX-512 loops here rather than the C library's (which the
    scalar path calls through :mod:`math`): on a Zen 5 EPYC (AVX-512) 114 of 3304 values at gamma 1 came out
    1-2 ulps apart, on AVX2 machines none."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # another numpy layout: assume the loops may be its own
        return True
    return bool(__cpu_features__.get("AVX512_SKX", False))


_SIMD_TRANSCENDENTALS = _numpy_has_simd_transcendentals()


def test_scalar_expected_tokens_is_the_array_formula_to_the_bit():
    rng = np.random.default_rng(11)
    alphas = np.concatenate([rng.random(3000), 1.0 - rng.random(300) * 1e-7, [0.0, 0.5, 1.0, 1e-300]])
    for g in (0, 1, 2, 3, 4, 7, 8, 16, 100):
        fast = np.array([expected_tokens_scalar(float(a), g) for a in alphas])
        # to the bit against what a scalar call gave before (the array formula on 0-d arrays) ...
        one_by_one = np.array([float(expected_tokens(np.asarray(a), np.asarray(g))) for a in alphas])
        if _SIMD_TRANSCENDENTALS:  # numpy's own expm1/log1p loops: the same formula, the last 2 bits may differ
            np.testing.assert_allclose(fast, one_by_one, rtol=2 * np.finfo(float).eps, atol=0, err_msg=str(g))
        else:
            assert np.array_equal(fast, one_by_one), g
        # ... and to rounding against a sweep (numpy's vector power does not square by multiplying)
        np.testing.assert_allclose(fast, expected_tokens(alphas, np.full(alphas.shape, g)), rtol=1e-15, atol=0)
        assert type(expected_tokens(0.8, g)) is np.float64  # the array path's 0-d answer is a numpy scalar too


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"alpha_or_curve": 1.5}, r"alpha must lie in \[0, 1\] \(got 1.5\)"),
        ({"alpha_or_curve": float("nan")}, "alpha must be finite"),
        ({"gamma": -1}, r"gamma must be >= 0 \(got -1\)"),
        ({"gamma": 2.5}, "gamma must be a whole number"),
        ({"batch": 0}, r"batch must be >= 1 \(got 0\)"),
        ({"context": -3}, r"context must be >= 0 \(got -3\)"),
        ({"context": 131_070}, "exceeds"),
        ({"round_overhead_s": -1.0}, "round_overhead_s must be >= 0"),
        ({"drafter": "llama-3.1-70b"}, "is not smaller than the target"),
        ({"drafter": "early-exit:40"}, r"early-exit layers must lie in \[1, 31\]"),
    ],
)
def test_bad_scalars_raise_the_array_paths_words(kwargs, words, array_path):
    args = {"alpha_or_curve": 0.8, "gamma": 4, "drafter": "llama-3.2-1b", "batch": 1, "context": 1024, **kwargs}
    pr = Pricing.of("h100-sxm-80gb")

    def call():
        return speedup(pr, "llama-3.1-8b", args.pop("drafter"), args.pop("alpha_or_curve"), args.pop("gamma"), **args)

    with pytest.raises(SpecroofError, match=words) as fast:
        call()
    args = {"alpha_or_curve": 0.8, "gamma": 4, "drafter": "llama-3.2-1b", "batch": 1, "context": 1024, **kwargs}
    with array_path(), pytest.raises(SpecroofError) as slow:
        call()
    assert str(fast.value) == str(slow.value)


@pytest.mark.parametrize("engine", (None, "vllm"))
def test_every_preset_prices_the_same_with_and_without_the_scalar_pricer(engine, array_path):
    """The pricer re-derives each operator's constants: a model kind it does not know (MLA, sliding layers) must make
    it step aside, never price silently with standard attention. Every preset, decode and verify, short and long."""
    pr = _pricing(engine, 1)
    for name in sorted(PRESETS):
        spec = get_model(name)
        for batch, n, context in ((1, 1, 1024), (4, 5, 6000), (1, 1, 64)):
            if context + n > spec.max_context:
                continue
            fast = passtime.pass_seconds(spec, pr, batch, n, context)
            with array_path():
                slow = passtime.pass_seconds(spec, pr, batch, n, context)
            np.testing.assert_allclose(float(fast), float(slow), rtol=REL, atol=0, err_msg=f"{name} {batch} {n}")
        # MTP where the target does not say how many modules it ships (DeepSeek ships one, refused over 3 steps with one
        # rate; Kimi K2 and gpt-oss ship none): their EAGLE-3 heads otherwise
        drafter = ("mtp" if spec.mtp_modules is None else "eagle3") if spec.n_layers else "model:llama-3.2-1b"
        fast_s = speedup(pr, spec, drafter, 0.7, 3, context=512).speedup
        with array_path():
            slow_s = speedup(pr, spec, drafter, 0.7, 3, context=512).speedup
        np.testing.assert_allclose(float(fast_s), float(slow_s), rtol=REL, atol=0, err_msg=name)


# -- every preset x drafter kinds x engines: the plans and pricers against the array path ----------------------------

GRID_ENGINES = (None, "hf", "vllm", "serving", "compiled")
#: (alpha, gamma, batch, context): a short and a long chain, one draft, a batch and an empty cache
ROUNDS = ((0.8, 4, 1, 1024), (0.6, 7, 8, 1900), (0.95, 1, 3, 0), (0.7, 0, 2, 512))


def _chain_model(spec):
    """A preset draft model smaller than ``spec`` (None for the smallest presets)."""
    for name in ("llama-3.2-1b", "llama-68m"):
        if get_model(name).total_params < spec.total_params:
            return "model:" + name
    return None


@pytest.mark.parametrize("engine", GRID_ENGINES)
def test_every_preset_speedup_over_drafters_equals_the_array_path(engine, array_path):
    pr = _pricing(engine, 1)
    checked = planned = 0
    for name in sorted(PRESETS):
        spec = get_model(name)
        for drafter in (_chain_model(spec), "eagle3", "prompt-lookup:0.5"):
            if drafter is None:
                continue
            d = as_drafter(drafter)
            planned += speculative.chain_plan(pr, spec, d) is not None
            for alpha, gamma, batch, context in ROUNDS:
                if context + gamma + 1 > min(spec.max_context, getattr(d, "spec", spec).max_context):
                    continue
                fast = speedup(pr, spec, d, alpha, gamma, batch=batch, context=context)
                with array_path():
                    slow = speedup(pr, spec, d, alpha, gamma, batch=batch, context=context)
                _same(fast, slow, (engine, name, drafter, alpha, gamma, batch, context))
                checked += 1
    assert checked >= len(PRESETS) * 2 * len(ROUNDS) - 12  # a few short-context presets skip the long chain
    # a draft model's chain takes its plan wherever both pricers price (standard attention, no eager launches)
    assert (planned == 0) == (engine == "hf")


@pytest.mark.parametrize("engine", GRID_ENGINES)
def test_every_preset_predict_speedup_over_drafters_equals_the_array_path(engine, array_path):
    pr = _pricing(engine, 1)
    checked = 0
    for name in sorted(PRESETS):
        spec = get_model(name)
        model = _chain_model(spec)
        calls = [
            {"drafter": "eagle3", "mean_accepted": 3.0},  # EAGLE-3's dynamic tree, EAGLE-1's static one
            {"drafter": "eagle", "mean_accepted": 2.6},
            {"drafter": "prompt-lookup:0.5", "alpha": 0.6, "gamma": 5},
        ]
        if model is not None:
            calls += [
                {"drafter": model, "alpha": 0.8, "gamma": 4},
                {"drafter": model, "mean_accepted": 2.5, "gamma": 6},
            ]
        for kw in calls:
            for batch, context in ((1, 1024), (4, 1800), (2, 0)):
                fast = predict_speedup(hardware=pr, target=spec, batch=batch, context=context, **kw)
                with array_path():
                    slow = predict_speedup(hardware=pr, target=spec, batch=batch, context=context, **kw)
                _same(fast, slow, (engine, name, kw, batch, context))
                checked += 1
    no_model = sum(_chain_model(get_model(n)) is None for n in PRESETS)  # the 68M presets: no smaller draft model
    assert checked == (len(PRESETS) * 5 - no_model * 2) * 3


def test_a_chain_plan_is_per_pricing_target_and_draft_model_not_per_round():
    """One plan serves every (gamma, batch, context): a string drafter resolves to the same plan, another pricing
    or draft model to another, and a round past a model's context is the array path's to refuse."""
    pr, spec = Pricing.of("h100-sxm-80gb"), get_model("llama-3.1-8b")
    plan = speculative.chain_plan(pr, spec, as_drafter("llama-3.2-1b"))
    assert plan is not None and speculative.chain_plan(pr, spec, as_drafter("model:llama-3.2-1b")) is plan
    assert speculative.chain_plan(Pricing.of("a100-sxm-80gb"), spec, as_drafter("llama-3.2-1b")) is not plan
    assert speculative.chain_plan(pr, spec, as_drafter("qwen2.5-0.5b")) is not plan
    assert speculative.chain_plan(pr, spec, as_drafter("eagle3")) is None  # not a separate draft model
    assert speculative.chain_plan(pr, spec, as_drafter("llama-3.1-70b")) is None  # not smaller: the formula says so
    assert plan.times(4, 1, spec.max_context - 4) is None and plan.times(4, 1, spec.max_context - 5) is not None
    a, b = plan.times(3, 2, 100), plan.times(5, 2, 100)
    assert a is not None and b is not None and a[0] == b[0] and a[1] < b[1] and a[2] < b[2]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"alpha": 1.5}, r"alpha must lie in \[0, 1\] \(got 1.5\)"),
        ({"gamma": 0}, r"gamma must be >= 1 \(got 0\)"),
        ({"gamma": 2.5}, "gamma must be a whole number"),
        ({"batch": 0}, r"batch must be >= 1 \(got 0\)"),
        ({"context": -3}, r"context must be >= 0 \(got -3\)"),
        ({"context": 131_070}, "exceeds"),
        ({"alpha": None, "mean_accepted": 6.5}, r"exceeds gamma \+ 1 = 5"),
        ({"drafter": "llama-3.1-70b"}, "is not smaller than the target"),
    ],
)
def test_bad_predict_scalars_raise_the_array_paths_words(kwargs, words, array_path):
    args = {"drafter": "llama-3.2-1b", "alpha": 0.8, "gamma": 4, "batch": 1, "context": 1024, **kwargs}
    pr = Pricing.of("h100-sxm-80gb")
    with pytest.raises(SpecroofError, match=words) as fast:
        predict_speedup(hardware=pr, target="llama-3.1-8b", **args)
    with array_path(), pytest.raises(SpecroofError) as slow:
        predict_speedup(hardware=pr, target="llama-3.1-8b", **args)
    assert str(fast.value) == str(slow.value)


def test_a_named_profile_is_looked_up_by_its_file_and_mtime(tmp_path):
    """pass_time with a hardware name gives the Pricing.of answer; a profile file rewritten on disk is read again."""
    import os

    from roofline.hardware import profile_path
    from roofline.passtime import pass_time
    from roofline.pricing import pricing_of

    spec = get_model("llama-3.1-8b")
    by_name = pass_time(spec, "h100-sxm-80gb", 1, 1, 1024)
    assert float(by_name.t_step_s) == float(pass_time(spec, Pricing.of("h100-sxm-80gb"), 1, 1, 1024).t_step_s)
    assert pricing_of("h100-sxm-80gb") is pricing_of("h100-sxm-80gb") is Pricing.of("h100-sxm-80gb")
    assert pricing_of("h100-sxm-80gb", engine="vllm") is Pricing.of("h100-sxm-80gb", engine="vllm")
    src = tmp_path / "mine.toml"
    text = profile_path("h100-sxm-80gb").read_text()
    assert "bandwidth_GB_per_s = 3350" in text
    src.write_text(text)
    first = pricing_of(str(src))
    assert pricing_of(str(src)) is first and first.hardware.bandwidth_bytes_per_s == 3350e9
    src.write_text(text.replace("bandwidth_GB_per_s = 3350", "bandwidth_GB_per_s = 2000"))
    st = os.stat(src)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a new version, whatever the clock's tick
    second = pricing_of(str(src))
    assert second is not first and second.hardware.bandwidth_bytes_per_s == 2000e9
    with pytest.raises(SpecroofError, match="unknown hardware"):
        pricing_of("no-such-gpu-anywhere")


def test_a_builtin_profile_name_reads_its_mtime_at_most_every_recheck_interval(tmp_path, monkeypatch):
    """A built-in profile asked for by name has its file's mtime read at most every BUILTIN_RECHECK_S seconds, and a
    rewrite is seen at the next check; a profile given by path (a built-in one's file too) is checked on every call."""
    import roofline.pricing as pricing
    from roofline.hardware import profile_path

    clock, stats, moved = [1000.0], [], {}
    real = pricing._stamp

    def stamp(path):
        stats.append(path)
        return moved.get(path, real(path))

    monkeypatch.setattr(pricing, "monotonic", lambda: clock[0])
    monkeypatch.setattr(pricing, "_stamp", stamp)
    monkeypatch.setattr(pricing, "_NAMED", {})
    first = pricing.pricing_of("h100-sxm-80gb")
    builtin = str(profile_path("h100-sxm-80gb"))
    assert stats == [builtin]  # the first call reads it
    assert all(pricing.pricing_of("h100-sxm-80gb") is first for _ in range(3)) and len(stats) == 1
    clock[0] += pricing.BUILTIN_RECHECK_S
    assert pricing.pricing_of("h100-sxm-80gb") is first and len(stats) == 2  # due: read again, unchanged
    assert pricing.pricing_of("h100-sxm-80gb") is first and len(stats) == 2  # trusted for another interval
    moved[builtin] = real(builtin) + 1  # the package's file rewritten
    clock[0] += pricing.BUILTIN_RECHECK_S - 0.01
    pricing.pricing_of("h100-sxm-80gb")
    assert len(stats) == 2  # not due yet
    clock[0] += 0.01
    pricing.pricing_of("h100-sxm-80gb")
    assert pricing._NAMED["h100-sxm-80gb"][1] == moved[builtin]  # due: the new version is the one kept
    src = tmp_path / "mine.toml"
    src.write_text(profile_path("h100-sxm-80gb").read_text())
    for path in (str(src), builtin):  # given by path: one stat per call, whatever the clock says
        pricing.pricing_of(path)
        before = len(stats)
        pricing.pricing_of(path)
        pricing.pricing_of(path)
        assert stats[before:] == [path, path]


@pytest.mark.parametrize(("overlap", "host", "rows"), [(1.0, False, False), (0.35, False, False), (1.0, True, False),
                                                  (1.0, False, True), (0.35, True, True)])  # fmt: skip
def test_chains_levels_and_passes_under_every_time_model_branch_equal_the_array_path(overlap, host, rows, array_path):
    """The pricer's written-out loops (a chain's steps, a tree's levels) and its piecewise-linear sum of the operators
    outside attention under a measured profile's terms: gemv bandwidth, rates per range of rows (2, 3-16), the
    attention rate, small-matmul saturation and partial overlap, a per-step host time, one and two devices."""
    ranges = ((2, 2.6e12), (16, 2.9e12)) if rows else ()
    for engine, tp in itertools.product((None, "serving", "vllm"), (1, 2)):
        pr = dataclasses.replace(Pricing.of("h100-sxm-80gb", engine=engine, tp=tp))  # a copy: its own time model
        tm = dataclasses.replace(pr.time_model, gemv_bandwidth_bytes_per_s=2.1e12, attention_flop_per_s=3.0e14,
                                 matmul_half_tokens=7.0, overlap=overlap,
                                 rows_bandwidth_bytes_per_s=ranges)  # fmt: skip
        if host:  # a host floor per pass that short passes hit, and a step time per sequence (in series or not)
            e = tm.engine or engine_mod.load_engine("serving")
            e = dataclasses.replace(e, host_step_s=3e-5, host_step_per_seq_s=2e-6, step_overlap=engine == "vllm")
            tm = dataclasses.replace(tm, host_pass_s=2.5e-3, engine=e)
        pr.__dict__["time_model"] = tm
        for name in ("llama-3.1-8b", "mixtral-8x7b", "llama-68m"):
            spec = get_model(name)
            assert passtime.scalar_pricer(spec, pr, tp) is not None
            for b, c, g, widths in ((1, 1024, 6, [1, 4, 4, 4]), (3, 0, 1, [2]), (16, 1500, 9, [10, 10, 10, 1]),
                                    (2, 64, 3, [1, 8, 8])):  # fmt: skip
                chain = passtime.chain_seconds(spec, pr, b, c, g, tp)
                levels = passtime.levels_seconds(spec, pr, widths, b, c, tp)
                one = passtime.pass_seconds(spec, pr, b, 7, c)
                two = passtime.pass_time(spec, pr, b, 2, c)  # the step pricer's table for 2 b rows
                with array_path():
                    steps = passtime.pass_seconds(spec, pr, np.array([b]), 1, c + np.arange(g))
                    starts = c + np.concatenate([[0], np.cumsum(widths)[:-1]])
                    per_level = passtime.pass_seconds(spec, pr, b, np.array(widths), starts)
                    slow = passtime.pass_seconds(spec, pr, np.array([b]), np.array([7]), np.array([c]))
                    slow_two = passtime.pass_time(spec, pr, b, 2, c)
                where = (engine, tp, name, b, c)
                assert chain == pytest.approx(float(np.cumsum(steps)[-1]), rel=REL, abs=0), where
                assert levels == pytest.approx(float(np.sum(per_level)), rel=REL, abs=0), where
                assert float(one) == pytest.approx(float(slow[0]), rel=REL, abs=0), where
                for f in ("t_step_s", "t_memory_s", "t_compute_s", "op_memory_s", "op_time_s"):
                    np.testing.assert_allclose(np.asarray(getattr(two, f), dtype=float).ravel(),
                                               np.asarray(getattr(slow_two, f), dtype=float).ravel(), rtol=REL,
                                               atol=0, err_msg=f"{where} {f}")  # fmt: skip


def test_scalar_tree_levels_check_every_run_of_widths(array_path):
    """levels_seconds takes whole-number widths >= 1 only (the array path names anything else), wherever the bad one
    stands: a run of one width is checked once, by its object (an equal float, a bool or a 0 is checked and refused);
    eight levels and more are summed as numpy sums them."""
    spec, pr = get_model("llama-3.1-8b"), Pricing.of("h100-sxm-80gb")
    assert passtime.levels_seconds(spec, pr, [1, 10, 10], 1, 1024, 1) is not None
    for widths in ([0, 1], [1, 0], [1, 10, 10.0], [1, 1, True], [1, -1, -1], [1.0], [2, 2, 0]):
        assert passtime.levels_seconds(spec, pr, widths, 1, 1024, 1) is None, widths
    shared = [1] + [300] * 3  # one int object for the run
    apart = [1, *(int(text) for text in ("300", "300", "300"))]  # equal ints, each its own object
    assert apart[1] is not apart[2]
    assert passtime.levels_seconds(spec, pr, shared, 2, 512, 1) == passtime.levels_seconds(spec, pr, apart, 2, 512, 1)
    for widths in ([1] + [4] * 6, [1] + [4] * 7, [1] + [4] * 11, [3, 1, 3, 1, 3, 1, 3, 1, 3]):
        levels = passtime.levels_seconds(spec, pr, widths, 2, 900, 1)
        with array_path():
            starts = 900 + np.concatenate([[0], np.cumsum(widths)[:-1]])
            per_level = passtime.pass_seconds(spec, pr, 2, np.array(widths), starts)
        assert levels == pytest.approx(float(np.sum(per_level)), rel=REL, abs=0), widths


# -- tree rounds: the tree plan and the tree's cached levels against the array path ------------------------------------

#: (drafter, tree): the drafters' own trees (EAGLE-1's static one, EAGLE-2/3's dynamic ones, Medusa's and Hydra's 63
#: nodes) and explicit trees for drafters that draft level by level (a draft model, early exit, a windowed self-draft)
TREE_CALLS = (("eagle", None), ("eagle2", None), ("eagle3", None), ("medusa", None), ("hydra", None),
              ("eagle3", "parents:-1,0,0,1,1,4"), ("early-exit:2", "eagle2"), ("window:256", "medusa"),
              ("MODEL", "eagle"))  # fmt: skip
#: (batch, context, mean accepted): one sequence, a batch, an empty cache and plain decoding's one token
TREE_ROUNDS = ((1, 1024, 3.0), (4, 1800, 2.2), (2, 0, 1.0), (1, 1990, 1.7))


def _outcome(call, **kwargs):
    """``call(**kwargs)``'s result, or the words of the SpecroofError it raised (both paths must refuse alike)."""
    try:
        return call(**kwargs)
    except SpecroofError as exc:
        return f"SpecroofError: {exc}"


def _same_outcome(fast, slow, where):
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow, where
    else:
        _same(fast, slow, where)


@pytest.mark.parametrize("engine", GRID_ENGINES)
def test_every_preset_tree_predict_speedup_over_tree_drafters_equals_the_array_path(engine, array_path):
    pr = _pricing(engine, 1)
    checked = refused = 0
    for name in sorted(PRESETS):
        spec = get_model(name)
        for drafter, tree in TREE_CALLS:
            if drafter == "MODEL":
                drafter = _chain_model(spec)
                if drafter is None:
                    continue
            for batch, context, mean in TREE_ROUNDS:
                kw = {"drafter": drafter, "tree": tree, "mean_accepted": mean, "batch": batch, "context": context}
                fast = _outcome(predict_speedup, hardware=pr, target=spec, **kw)
                with array_path():
                    slow = _outcome(predict_speedup, hardware=pr, target=spec, **kw)
                _same_outcome(fast, slow, (engine, name, kw))
                checked += 1
                refused += isinstance(fast, str)
    no_model = sum(_chain_model(get_model(n)) is None for n in PRESETS)
    assert checked == (len(PRESETS) * len(TREE_CALLS) - no_model) * len(TREE_ROUNDS)
    assert refused < checked // 4  # the 2k-context presets refuse the long rounds; everything else is priced


@pytest.mark.parametrize("engine", (None, "vllm", "hf"))
def test_tree_predict_speedup_over_alphas_tp_and_bad_inputs_equals_the_array_path(engine, array_path):
    """Over TP and the refusals too: alpha on a tree, a mean past depth + 1, a context past the model's."""
    target = get_model("llama-3.1-8b")
    calls = [
        {"drafter": "eagle3", "mean_accepted": 3.0},
        {"drafter": "eagle", "mean_accepted": 6.0},  # its 5 levels: the most a round can emit
        {"drafter": "eagle", "mean_accepted": 6.5},
        {"drafter": "eagle3", "alpha": 0.8},
        {"drafter": "eagle3", "alpha": 0.8, "tree": "eagle"},
        {"drafter": "eagle3", "mean_accepted": 2.0, "context": 131_040},
        {"drafter": "eagle3", "mean_accepted": 2.0, "context": 131_000},
        {"drafter": "llama-3.1-70b", "mean_accepted": 2.0, "tree": "eagle"},  # not smaller than the target
        {"drafter": "early-exit:40", "mean_accepted": 2.0, "tree": "eagle"},
    ]
    for tp, kw in itertools.product((1, 2), calls):
        pr = _pricing(engine, tp)
        fast = _outcome(predict_speedup, hardware=pr, target=target, **kw)
        with array_path():
            slow = _outcome(predict_speedup, hardware=pr, target=target, **kw)
        _same_outcome(fast, slow, (engine, tp, kw))
        if kw == calls[0]:
            assert not isinstance(fast, str)


def _levels_of(t):
    return (t.n_nodes, t.depth, tuple(t.widths.tolist()), int(t.depths.sum()))


@pytest.mark.parametrize("drafter", ("eagle", "eagle3", "llama-3.2-1b"))
def test_a_tree_mutated_after_a_call_is_priced_as_the_array_path_prices_it(drafter, array_path):
    """Tree's arrays are public: a write into them, a replaced array or the tree re-initialised in place after a
    call changes the next call's answer exactly as the array path (which reads them on every call) changes it."""
    pr, target = Pricing.of("h100-sxm-80gb"), get_model("llama-3.1-8b")
    t = Tree.from_paths([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])

    def both():
        fast = predict_speedup(hardware=pr, target=target, drafter=drafter, tree=t, mean_accepted=2.0, context=900)
        with array_path():
            slow = predict_speedup(hardware=pr, target=target, drafter=drafter, tree=t, mean_accepted=2.0, context=900)
        _same(fast, slow, (drafter, t.parents.tolist(), t.depths.tolist()))
        assert tuple(t.levels()) == _levels_of(t)
        return fast

    r0 = both()
    assert both() == r0  # unchanged: the same answer again
    t.depths[-1] += 1  # written in place: the last node two levels below its parent, level 3 left empty
    args = {"hardware": pr, "target": target, "drafter": drafter, "tree": t, "mean_accepted": 2.0}
    fast = _outcome(predict_speedup, **args)
    with array_path():
        slow = _outcome(predict_speedup, **args)
    _same_outcome(fast, slow, (drafter, "an empty level"))
    t.depths[4:] = (3, 4)  # written in place: levels of 2, 2, 1 and 1 nodes (what the array path reads)
    r1 = both()
    assert r1.t_draft_s > r0.t_draft_s and r1.tree_nodes == r0.tree_nodes  # one more level drafted
    t.parents, t.depths = np.append(t.parents, 0), np.append(t.depths, 2)  # replaced: one more node
    r2 = both()
    assert r2.tree_nodes == r1.tree_nodes + 1 and r2.t_verify_s > r1.t_verify_s
    t.depths = t.depths.astype(np.int32)  # another dtype, the same depths: the same answer
    assert both() == r2
    t.__init__([-1, 0, 1])  # re-initialised in place as a chain of three
    r3 = both()
    assert r3 == predict_speedup(hardware=pr, target=target, drafter=drafter, tree=Tree([-1, 0, 1]),
                                 mean_accepted=2.0, context=900)  # fmt: skip
    assert r3.tree_nodes == 3 and r3 != r2


def test_tree_levels_are_derived_once_per_content():
    t = Tree.kary(3, 3)
    first = t.levels()
    assert t.levels() is first and tuple(first) == _levels_of(t) == (39, 3, (3, 9, 27), 3 + 18 + 81)
    t.depths[0] = 2  # a write in place: derived again
    assert t.levels() is not first and tuple(t.levels()) == _levels_of(t) == (39, 3, (2, 10, 27), 3 + 18 + 81 + 1)
    assert Tree([]).levels() == (0, 0, (), 0)


def test_a_tree_plan_is_per_pricing_target_and_drafter_not_per_tree_or_round():
    pr, spec = Pricing.of("h100-sxm-80gb"), get_model("llama-3.1-8b")
    plan = drafters.tree_plan(pr, spec, as_drafter("eagle3"))
    assert plan is not None and drafters.tree_plan(pr, spec, drafters.Eagle(3)) is plan  # equal drafters: one plan
    assert as_drafter("eagle3") is as_drafter("eagle3")  # a name in the grammar is parsed once
    assert drafters.tree_plan(pr, spec, as_drafter("eagle2")) is not plan
    assert drafters.tree_plan(Pricing.of("a100-sxm-80gb"), spec, as_drafter("eagle3")) is not plan
    assert drafters.tree_plan(pr, get_model("llama-3.2-1b"), as_drafter("eagle3")) is not plan
    model = drafters.tree_plan(pr, spec, as_drafter("llama-3.2-1b"))
    assert model is not None and drafters.tree_plan(pr, spec, as_drafter("model:llama-3.2-1b")) is model
    assert drafters.tree_plan(Pricing.of("h100-sxm-80gb", engine="hf"), spec, as_drafter("eagle3")) is None  # launches
    small, big = TREE_PRESETS["eagle"], TREE_PRESETS["eagle3"]
    a, b = plan.times(small, 2, 100), plan.times(big, 2, 100)
    assert a is not None and b is not None and a[1] < b[1] and a[2] == b[2]  # one plan, any tree
    # a draft model drafts the tree's own levels: the verify pass's n + 1 tokens are the first past the context
    assert model.times(big, 1, spec.max_context - big.n_nodes - 1) is not None
    assert model.times(big, 1, spec.max_context - big.n_nodes) is None  # past the context: the array path refuses it
    assert plan.base(1, spec.max_context - 1) is not None and plan.base(1, spec.max_context) is None


def test_a_rewritten_profile_file_is_read_again_by_every_scalar_call(tmp_path):
    """A profile given by path: pass_time, speedup and predict_speedup read it again once it is rewritten, and give
    what a fresh Pricing of the new file gives; profile_path finds the file load_hardware reads."""
    import os

    from roofline.hardware import load_hardware, profile_path
    from roofline.passtime import pass_time

    spec = get_model("llama-3.1-8b")
    builtin = profile_path("h100-sxm-80gb")
    assert builtin.is_file() and profile_path("H100 SXM") == builtin and load_hardware(builtin).id == "h100-sxm-80gb"
    with pytest.raises(SpecroofError, match="unknown hardware"):
        profile_path("no-such-gpu-anywhere")
    text = builtin.read_text()
    src = tmp_path / "mine.toml"
    src.write_text(text)
    assert profile_path(str(src)) == src

    def calls(hw):
        return (float(pass_time(spec, hw, 1, 1, 1024).t_step_s), speedup(hw, spec, "llama-3.2-1b", 0.8, 4).speedup,
                predict_speedup(hardware=hw, target=spec, drafter="eagle3", mean_accepted=3.0).speedup)  # fmt: skip

    first = calls(str(src))
    assert first == calls(str(src))
    src.write_text(text.replace("bandwidth_GB_per_s = 3350", "bandwidth_GB_per_s = 2000"))
    st = os.stat(src)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a new version, whatever the clock's tick
    second = calls(str(src))
    assert second[0] > first[0] and second != first
    assert load_hardware(str(src)).bandwidth_bytes_per_s == 2000e9
    fresh = tmp_path / "fresh.toml"  # a file never seen: nothing cached
    fresh.write_text(src.read_text())
    assert second == calls(str(fresh))


def test_a_drafter_whose_tree_draft_time_is_its_own_is_priced_by_it(array_path):
    """A subclass that replaces tree_draft_time (the engine search's EAGLE layer run as SGLang runs it) keeps its own
    draft cost on the scalar path: the tree plan calls it, not the passes its parent class would draft."""
    from roofline.engine_search import EngineDraft

    pr, target = Pricing.of("h100-sxm-80gb"), get_model("llama-3.1-8b")
    for widths in ((1, 4, 4), (1, 4, 4, 4, 4, 4)):
        d = EngineDraft(3, top_k=4, name="eagle3", pass_widths=widths)
        fast = predict_speedup(hardware=pr, target=target, drafter=d, tree="eagle", mean_accepted=2.5)
        with array_path():
            slow = predict_speedup(hardware=pr, target=target, drafter=d, tree="eagle", mean_accepted=2.5)
        _same(fast, slow, widths)
    short = predict_speedup(hardware=pr, target=target, drafter=EngineDraft(3, top_k=4, pass_widths=(1, 4)),
                            tree="eagle", mean_accepted=2.5)  # fmt: skip
    assert short.t_draft_s < fast.t_draft_s
