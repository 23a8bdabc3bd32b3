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


def test_scalar_expected_tokens_is_the_array_formula_to_the_bit():
    rng = np.random.default_rng(11)
    alphas = np.concatenate([rng.random(3000), 1.0 - rng.random(300) * 1e-7, [0.0, 0.5, 1.0, 1e-300]])
    for g in (0, 1, 2, 3, 4, 7, 8, 16, 100):
        fast = np.array([expected_tokens_scalar(float(a), g) for a in alphas])
        # to the bit against what a scalar call gave before (the array formula on 0-d arrays) ...
        one_by_one = np.array([float(expected_tokens(np.asarray(a), np.asarray(g))) for a in alphas])
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
        drafter = "mtp" if spec.n_layers else "model:llama-3.2-1b"
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

    from roofline.hardware import _builtin_paths
    from roofline.passtime import pass_time
    from roofline.pricing import pricing_of

    spec = get_model("llama-3.1-8b")
    by_name = pass_time(spec, "h100-sxm-80gb", 1, 1, 1024)
    assert float(by_name.t_step_s) == float(pass_time(spec, Pricing.of("h100-sxm-80gb"), 1, 1, 1024).t_step_s)
    assert pricing_of("h100-sxm-80gb") is pricing_of("h100-sxm-80gb") is Pricing.of("h100-sxm-80gb")
    assert pricing_of("h100-sxm-80gb", engine="vllm") is Pricing.of("h100-sxm-80gb", engine="vllm")
    src = tmp_path / "mine.toml"
    text = _builtin_paths()["h100-sxm-80gb"].read_text()
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


@pytest.mark.parametrize(("overlap", "host"), [(1.0, False), (0.35, False), (1.0, True)])
def test_chains_levels_and_passes_under_every_time_model_branch_equal_the_array_path(overlap, host, array_path):
    """The pricer's written-out loops (a chain's steps, a tree's levels) and its piecewise-linear sum of the operators
    outside attention under a measured profile's terms: gemv bandwidth, the attention rate, small-matmul saturation
    and partial overlap, a per-step host time, one and two devices."""
    for engine, tp in itertools.product((None, "serving", "vllm"), (1, 2)):
        pr = dataclasses.replace(Pricing.of("h100-sxm-80gb", engine=engine, tp=tp))  # a copy: its own time model
        tm = dataclasses.replace(pr.time_model, gemv_bandwidth_bytes_per_s=2.1e12, attention_flop_per_s=3.0e14,
                                 matmul_half_tokens=7.0, overlap=overlap)  # fmt: skip
        if host:  # a host floor per pass that short passes hit, and a step time per sequence (in series or not)
            e = tm.engine or engine_mod.load_engine("serving")
            e = dataclasses.replace(e, host_step_s=3e-5, host_step_per_seq_s=2e-6, step_overlap=engine == "vllm")
            tm = dataclasses.replace(tm, host_pass_s=2.5e-3, engine=e)
        pr.__dict__["time_model"] = tm
        for name in ("llama-3.1-8b", "mixtral-8x7b", "llama-68m"):
            spec = get_model(name)
            assert passtime.scalar_pricer(spec, pr, tp) is not None
            for b, c, g, widths in ((1, 1024, 6, [1, 4, 4, 4]), (3, 0, 1, [2]), (16, 1500, 9, [10, 10, 10, 1])):
                chain = passtime.chain_seconds(spec, pr, b, c, g, tp)
                levels = passtime.levels_seconds(spec, pr, widths, b, c, tp)
                one = passtime.pass_seconds(spec, pr, b, 7, c)
                with array_path():
                    steps = passtime.pass_seconds(spec, pr, np.array([b]), 1, c + np.arange(g))
                    starts = c + np.concatenate([[0], np.cumsum(widths)[:-1]])
                    per_level = passtime.pass_seconds(spec, pr, b, np.array(widths), starts)
                    slow = passtime.pass_seconds(spec, pr, np.array([b]), np.array([7]), np.array([c]))
                where = (engine, tp, name, b, c)
                assert chain == pytest.approx(float(np.cumsum(steps)[-1]), rel=REL, abs=0), where
                assert levels == pytest.approx(float(np.sum(per_level)), rel=REL, abs=0), where
                assert float(one) == pytest.approx(float(slow[0]), rel=REL, abs=0), where
