"""The scalar pricers are derived from the time model's one definition, not written beside it.

Every time-model rule lives once, on :class:`roofline.costing.timemodel.TimeModel` (the streaming rates, the memory and
compute sides of an operator, the small-pass factor, the overlap, the fixed overheads, the all-reduces, the host's
issuing and the step time, the engine's extra terms); the scalar pricers of :mod:`roofline.costing.passtime` tabulate
those functions on the cost of one unit of each variable and compose with them (docs/cost-model.md, section 47),
and the speedup and round formulas exist once in :mod:`roofline.speculation.speculative` and :mod:`roofline.speculation.drafters`. So
these tests check the derivation: a rule changed in its one place moves the scalar and the array results alike,
and a term added through the public extension point (:attr:`roofline.costing.engine.Engine.pass_terms`) reaches every
path. The reference is the same call with the scalar pricer and the plans switched off (``array_path``). No
timing here (benchmarks/bench_scalar.py times them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools

import numpy as np
import pytest

import roofline.costing.passtime as passtime
import roofline.costing.passtime.passes as passes
import roofline.costing.passtime.pricer as pricer
import roofline.speculation.drafters as drafters
import roofline.speculation.drafters.round as drafters_round
import roofline.speculation.predict as predict
import roofline.speculation.speculative as speculative
from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine, load_engine
from roofline.costing.pricing import Pricing
from roofline.costing.timemodel import TimeModel
from roofline.passes.model import PRESETS, get_model
from roofline.speculation.closed_forms import expected_tokens, expected_tokens_scalar
from roofline.speculation.drafters import TREE_PRESETS, as_drafter, round_time
from roofline.speculation.speculative import predict_speedup, speedup
from roofline.speculation.trees import Tree

REL = 1e-12


@pytest.fixture
def array_path(monkeypatch):
    """A context manager factory: inside it, no pass is priced by the scalar pricer."""

    @contextlib.contextmanager
    def off():
        with monkeypatch.context() as m:
            m.setattr(passes, "scalar_pricer", lambda *a, **k: None)
            m.setattr(pricer, "scalar_pricer", lambda *a, **k: None)
            m.setattr(speculative, "scalar_pricer", lambda *a, **k: None)
            # a draft model's chain plan holds pricers built before the switch: it steps aside too
            m.setattr(speculative, "chain_plan", lambda *a, **k: None)
            m.setattr(predict, "chain_plan", lambda *a, **k: None)
            # a tree plan holds the target's pricer: it steps aside, and none is built anew
            m.setattr(predict, "tree_plan", lambda *a, **k: None)
            m.setattr(drafters_round, "scalar_pricer", lambda *a, **k: None)
            yield

    return off


@pytest.fixture
def fresh_tables(monkeypatch):
    """Empty caches of pricers and plans for the test: tables built under a rule changed by the test stay in it."""
    for module, name in ((pricer, "_PRICERS"), (pricer, "_STEP_PRICERS"), (drafters_round, "_CHAIN_PLANS"),
                         (drafters_round, "_TREE_PLANS")):  # fmt: skip
        monkeypatch.setattr(module, name, {})


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


def _every_branch(engine, tp):
    """A Pricing (a copy: its own time model) whose time model takes every branch of every rule: a gemv rate, rates
    per range of rows, the attention products' own rate, small-pass saturation, partial overlap, a host floor and a
    per-step host time per sequence, the engine's paged-KV, sampling and fused-MoE terms where it has them."""
    pr = dataclasses.replace(Pricing.of("h100-sxm-80gb", engine=engine, tp=tp))
    e = pr.time_model.engine or load_engine("serving")
    e = dataclasses.replace(e, host_step_s=3e-5, host_step_per_seq_s=2e-6, step_overlap=engine == "vllm")
    tm = dataclasses.replace(pr.time_model, gemv_bandwidth_bytes_per_s=2.1e12, attention_flop_per_s=3.0e14,
                             matmul_half_tokens=7.0, overlap=0.35, rows_bandwidth_bytes_per_s=((2, 2.6e12), (16, 2.9e12)),
                             host_pass_s=2.5e-3, engine=e)  # fmt: skip
    pr.__dict__["time_model"] = tm
    return pr


def _answers(pr, tp):
    """Every scalar entry point on ``pr``, floats: passes (plain, verify, a StepTime's fields), a chain's draft steps,
    a tree's levels, speedups (a draft model's chain, EAGLE-3) and predicted speedups (a chain, a tree)."""
    out = []
    for name in ("llama-3.1-8b", "mixtral-8x7b", "llama-68m"):
        spec = get_model(name)
        for b, c in ((1, 1024), (3, 0), (16, 1500)):
            out.append(float(passtime.pass_seconds(spec, pr, b, 1, c)))
            out.append(float(passtime.pass_seconds(spec, pr, b, 7, c)))
            st = passtime.pass_time(spec, pr, b, 2, c)
            out += [float(st.t_step_s), float(st.t_memory_s), float(st.t_compute_s), *np.ravel(st.op_time_s)]
            chain = passtime.chain_seconds(spec, pr, b, c, 5, tp)
            levels = passtime.levels_seconds(spec, pr, [1, 4, 4, 4], b, c, tp)
            out += [chain, levels]
    target = get_model("llama-3.1-8b")
    for drafter in ("llama-3.2-1b", "eagle3"):
        r = speedup(pr, target, drafter, 0.8, 4, batch=2, context=700)
        out += [float(r.speedup), float(r.t_draft_s), float(r.t_verify_s), float(r.t_base_s)]
    r = predict_speedup(hardware=pr, target=target, drafter="llama-3.2-1b", mean_accepted=3.0, gamma=4)
    t = predict_speedup(hardware=pr, target=target, drafter="eagle3", mean_accepted=3.0)
    out += [r.speedup, r.t_round_s, t.speedup, t.t_draft_s, t.t_verify_s]
    return out


def _array_answers(pr, tp, array_path):
    """:func:`_answers` with every pass priced on the array path (None entries where the scalar path gives None)."""
    with array_path():
        out = []
        for name in ("llama-3.1-8b", "mixtral-8x7b", "llama-68m"):
            spec = get_model(name)
            for b, c in ((1, 1024), (3, 0), (16, 1500)):
                out.append(float(passtime.pass_seconds(spec, pr, b, 1, c)))
                out.append(float(passtime.pass_seconds(spec, pr, b, 7, c)))
                st = passtime.pass_time(spec, pr, b, 2, c)
                out += [float(st.t_step_s), float(st.t_memory_s), float(st.t_compute_s), *np.ravel(st.op_time_s)]
                steps = passtime.pass_seconds(spec, pr, np.array([b]), 1, c + np.arange(5))
                starts = c + np.array([0, 1, 5, 9])
                per_level = passtime.pass_seconds(spec, pr, b, np.array([1, 4, 4, 4]), starts)
                out += [float(np.cumsum(steps)[-1]), float(np.sum(per_level))]
        target = get_model("llama-3.1-8b")
        for drafter in ("llama-3.2-1b", "eagle3"):
            r = speedup(pr, target, drafter, 0.8, np.array(4), batch=np.array(2), context=700)
            out += [float(r.speedup), float(r.t_draft_s), float(r.t_verify_s), float(r.t_base_s)]
        r = predict_speedup(hardware=pr, target=target, drafter="llama-3.2-1b", mean_accepted=3.0, gamma=4)
        t = predict_speedup(hardware=pr, target=target, drafter="eagle3", mean_accepted=3.0)
        out += [r.speedup, r.t_round_s, t.speedup, t.t_draft_s, t.t_verify_s]
    return out


def _scale(method, factor):
    def changed(self, *args, **kwargs):
        return method(self, *args, **kwargs) * factor

    return changed


def _shift(method, seconds):
    def changed(self, *args, **kwargs):
        return method(self, *args, **kwargs) + seconds

    return changed


def _halve_rates(method):
    def changed(self, *args, **kwargs):
        rates, scaled = method(self, *args, **kwargs)
        return rates * 0.5, scaled

    return changed


#: each time-model rule, changed in its one place: (the TimeModel method, a changed version of it)
RULES = {
    "stream_rates": lambda m: lambda self, tp=1: tuple(r * 0.8 for r in m(self, tp)),
    "operator_memory": lambda m: _scale(m, 1.25),
    "compute_rates": _halve_rates,
    "small_pass_factor": lambda m: _scale(m, 1.5),
    "operator_seconds": lambda m: lambda self, mem, comp: m(self, mem, comp) + 0.1 * comp,
    "overhead_s": lambda m: _shift(m, 2e-5),
    "allreduce_seconds": lambda m: _scale(m, 3.0),
    "finish": lambda m: _shift(m, 1e-4),
}


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize(("engine", "tp"), [(None, 1), ("vllm", 2)])
def test_each_rule_changed_in_its_one_place_moves_the_scalar_and_array_paths_alike(rule, engine, tp, array_path,
                                                                                    fresh_tables, monkeypatch):  # fmt: skip
    """The scalar pricers hold no rule of their own: a TimeModel method changed (and nothing else) changes the
    scalar answers of every entry point exactly as it changes the array path's, under every branch of the rules."""
    before = _answers(_every_branch(engine, tp), tp)
    monkeypatch.setattr(TimeModel, rule, RULES[rule](getattr(TimeModel, rule)))
    pr = _every_branch(engine, tp)
    fast = _answers(pr, tp)
    slow = _array_answers(pr, tp, array_path)
    np.testing.assert_allclose(fast, slow, rtol=REL, atol=0, err_msg=rule)
    moved = np.abs(np.asarray(fast) - np.asarray(before)) > 1e-9 * np.abs(np.asarray(before))
    if rule == "allreduce_seconds" and tp == 1:  # one device: no all-reduce to move
        assert not moved.any()
    else:  # every rule moves the target's passes (the small model's sit under the host floor) and the speedups
        assert moved[:3].all() and moved[-9:].any(), (rule, moved)


def _dummy_term(tokens, batch):
    """An extra term of a pass: 20 us, plus 0.3 us per token and 1 us per sequence (floats or arrays alike)."""
    return 2e-5 + 3e-7 * tokens + 1e-6 * batch


def test_an_extra_pass_term_added_through_the_engine_moves_scalar_and_array_results_by_it(array_path, fresh_tables):
    """Engine.pass_terms is the public extension point: a term added there moves every pass by its value, on the
    scalar path (pass_time, pass_seconds, chain and levels, speedup, predict_speedup) and on the array path alike."""
    plain = Engine(name="plain")
    with_term = dataclasses.replace(plain, pass_terms=(_dummy_term,))
    base, more = Pricing.of("h100-sxm-80gb", engine=plain), Pricing.of("h100-sxm-80gb", engine=with_term)
    spec = get_model("llama-3.1-8b")
    for b, n, c in ((1, 1, 1024), (4, 5, 300), (32, 1, 8000)):
        T = b * n
        for path in (contextlib.nullcontext, array_path):
            with path():
                t0 = float(passtime.pass_time(spec, base, b, n, c).t_step_s)
                t1 = float(passtime.pass_time(spec, more, b, n, c).t_step_s)
                s0 = float(passtime.pass_seconds(spec, base, b, n, c))
                s1 = float(passtime.pass_seconds(spec, more, b, n, c))
            assert t1 - t0 == pytest.approx(_dummy_term(T, b), rel=1e-9), (b, n, c, path)
            assert s1 - s0 == pytest.approx(_dummy_term(T, b), rel=1e-9), (b, n, c, path)
        sweep0 = passtime.pass_seconds(spec, base, np.array([1, 2, 8]), np.array([1, 3, 1]), c)
        sweep1 = passtime.pass_seconds(spec, more, np.array([1, 2, 8]), np.array([1, 3, 1]), c)
        np.testing.assert_allclose(sweep1 - sweep0, _dummy_term(np.array([1, 6, 8]), np.array([1, 2, 8])), rtol=1e-9)
    # a round: gamma one-token draft passes, a verify pass of gamma + 1 tokens per sequence, the plain step
    g, b = 4, 2
    draft = get_model("llama-3.2-1b")
    chain0 = passtime.chain_seconds(draft, base, b, 500, g, 1)
    chain1 = passtime.chain_seconds(draft, more, b, 500, g, 1)
    assert chain1 - chain0 == pytest.approx(g * _dummy_term(b, b), rel=1e-9)
    lv0 = passtime.levels_seconds(draft, base, [1, 4, 4], b, 500, 1)
    lv1 = passtime.levels_seconds(draft, more, [1, 4, 4], b, 500, 1)
    assert lv1 - lv0 == pytest.approx(_dummy_term(b, b) + 2 * _dummy_term(4 * b, b), rel=1e-9)
    for path in (contextlib.nullcontext, array_path):
        with path():
            r0 = speedup(base, spec, "llama-3.2-1b", 0.8, g, batch=b, context=500)
            r1 = speedup(more, spec, "llama-3.2-1b", 0.8, g, batch=b, context=500)
            p0 = predict_speedup(hardware=base, target=spec, drafter="eagle3", mean_accepted=3.0)
            p1 = predict_speedup(hardware=more, target=spec, drafter="eagle3", mean_accepted=3.0)
        assert float(r1.t_base_s - r0.t_base_s) == pytest.approx(_dummy_term(b, b), rel=1e-9)
        assert float(r1.t_draft_s - r0.t_draft_s) == pytest.approx(g * _dummy_term(b, b), rel=1e-9)
        assert float(r1.t_verify_s - r0.t_verify_s) == pytest.approx(_dummy_term((g + 1) * b, b), rel=1e-9)
        nodes = TREE_PRESETS["eagle3"].n_nodes
        assert p1.t_verify_s - p0.t_verify_s == pytest.approx(_dummy_term(nodes + 1, 1), rel=1e-9)
        assert p1.t_draft_s > p0.t_draft_s and p1.speedup != p0.speedup


def test_an_extra_pass_term_under_a_host_floor_and_step_time_prices_alike_on_both_paths(array_path, fresh_tables):
    """With the engine's host floor and per-step host time the term joins the device's work before them: the scalar
    and array answers agree wherever that takes the pass."""
    for engine in ("vllm", "sglang", "serving"):
        e = dataclasses.replace(load_engine(engine), pass_terms=(_dummy_term,))
        pr = Pricing.of("h100-sxm-80gb", engine=e, tp=2)
        fast = _answers(pr, 2)
        slow = _array_answers(pr, 2, array_path)
        np.testing.assert_allclose(fast, slow, rtol=REL, atol=0, err_msg=engine)


@pytest.mark.parametrize("engine", (None, "vllm"))
def test_every_preset_prices_the_same_with_and_without_the_scalar_pricer(engine, array_path):
    """The pricer tabulates each operator from the model's coefficient table: a model kind the table does not hold
    (MLA, sliding layers) must make it step aside, never price silently with standard attention. Every preset,
    decode and verify, short and long."""
    pr = Pricing.of("h100-sxm-80gb", engine=engine)
    for name in sorted(PRESETS):
        spec = get_model(name)
        for batch, n, context in ((1, 1, 1024), (4, 5, 6000), (1, 1, 64)):
            if context + n > spec.max_context:
                continue
            fast = passtime.pass_seconds(spec, pr, batch, n, context)
            with array_path():
                slow = passtime.pass_seconds(spec, pr, batch, n, context)
            np.testing.assert_allclose(float(fast), float(slow), rtol=REL, atol=0, err_msg=f"{name} {batch} {n}")


def test_a_tree_round_is_one_definition_for_round_time_and_the_tree_plan(array_path):
    """round_time's tree branch and the tree plan call the same draft and verify functions: equal floats."""
    target = get_model("llama-3.1-8b")
    pairs = [(d, t) for d in ("eagle3", "eagle", "llama-3.2-1b") for t in ("eagle", "eagle3")] + [("hydra", "medusa")]
    for engine, (name, tree) in itertools.product((None, "vllm"), pairs):
        pr = Pricing.of("h100-sxm-80gb", engine=engine)
        plan = drafters.tree_plan(pr, target, as_drafter(name))
        rt = round_time(pr, target, name, TREE_PRESETS[tree], 4, 3000)
        assert plan is not None
        times = plan.times(TREE_PRESETS[tree], 4, 3000)
        assert times == (float(rt.t_draft_s), float(rt.t_verify_s), rt.t_round_host_s), (engine, name, tree)
        with array_path():
            slow = round_time(pr, target, name, TREE_PRESETS[tree], 4, 3000)
        np.testing.assert_allclose(times, (float(slow.t_draft_s), float(slow.t_verify_s), slow.t_round_host_s),
                                   rtol=REL, atol=0)  # fmt: skip


def test_one_speedup_formula_types_one_configuration_as_the_array_path(array_path):
    """The one speedup formula on a configuration's floats gives the array path's types (0-d arrays, numpy scalars)
    and numbers, gamma = 0 (plain decoding) included, for a draft model's chain and for other drafters."""
    pr, target = Pricing.of("h100-sxm-80gb", engine="vllm"), get_model("llama-3.1-8b")
    for drafter, g in itertools.product(("llama-3.2-1b", "eagle3", "prompt-lookup:0.5", "early-exit:8"), (0, 1, 5)):
        fast = speedup(pr, target, drafter, 0.75, g, batch=3, context=900)
        with array_path():
            slow = speedup(pr, target, drafter, 0.75, np.asarray(g), batch=np.asarray(3), context=900)
        _same(fast, slow, (drafter, g))
        if g == 0:
            assert float(fast.speedup) == 1.0 and float(fast.t_draft_s) == 0.0


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

    from roofline.costing.hardware import profile_path
    from roofline.costing.passtime import pass_time
    from roofline.costing.pricing import pricing_of

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
    import roofline.costing.pricing as pricing
    from roofline.costing.hardware import profile_path

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

    from roofline.costing.hardware import load_hardware, profile_path
    from roofline.costing.passtime import pass_time

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
    from roofline.deploy.engine_search import EngineDraft

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
