"""Property-based: whatever numbers the CLI's options and the API's public functions get, the answer is a
finite result or one SpecroofError line; never a traceback, never NaN or inf, exit status 0 or 2 only."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import roofline as rf
from specroof.cli import main

HW = "a100-sxm-80gb"
NAN_OR_INF = re.compile(r"\b(nan|NaN|inf|Inf|Infinity)\b")

#: deterministic (the suite must be), no deadline (two shared cores), a few dozen examples per property
SETTINGS = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

#: numbers as a user types them: ordinary, tiny, huge, negative, non-finite, integers past a float
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-10, max_value=10),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, -1, 0.5, 1e308, 1e-308, 10**400]),
)
as_text = numbers.map(lambda v: repr(v) if isinstance(v, float) else str(v))


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    cap = capsys.readouterr()
    assert code in (0, 2), f"{argv}: exit {code}\n{cap.err[-2000:]}"
    assert "Traceback" not in cap.err
    if code == 2:
        assert len([x for x in cap.err.splitlines() if x.strip()]) == 1, cap.err
    else:
        assert not NAN_OR_INF.search(cap.out), f"{argv}:\n{cap.out[-1500:]}"
    return code


@SETTINGS
@given(params=as_text, batch=as_text, tokens=as_text, context=as_text)
def test_roofline_options(params, batch, tokens, context, capsys):
    argv = ["roofline", "--hardware", HW, "--params", params, "--batch", batch, "--tokens", tokens]
    _run([*argv, "--context", context], capsys)


@SETTINGS
@given(alpha=as_text, c=as_text, gamma=as_text, max_gamma=as_text)
def test_speedup_options(alpha, c, gamma, max_gamma, capsys):
    _run(["speedup", "--alpha", alpha, "--c", c, "--max-gamma", max_gamma], capsys)
    _run(["speedup", "--alpha", alpha, "--c", c, "--gamma", gamma], capsys)


@SETTINGS
@given(alpha=as_text, batch=as_text, context=as_text, max_gamma=as_text)
def test_plan_options(alpha, batch, context, max_gamma, capsys):
    argv = ["plan", "--hardware", HW, "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", alpha]
    _run([*argv, "--batch", batch, "--context", context, "--max-gamma", max_gamma], capsys)


@SETTINGS
@given(budget=as_text, depth=as_text, p=st.lists(numbers, min_size=0, max_size=5))
def test_tree_options(budget, depth, p, tmp_path, capsys):
    vec = tmp_path / "v.json"
    vec.write_text(
        "[" + ", ".join("1e999" if isinstance(x, int) and abs(x) > 1e300 else repr(float(x)) for x in p) + "]"
    )
    _run(["tree", "--acceptance-vector", str(vec), "--budget", budget, "--max-depth", depth], capsys)


def _finite_or_refused(call):
    """The API's contract: a finite result, or a SpecroofError (the CLI's one line)."""
    try:
        out = call()
    except rf.SpecroofError:
        return
    values = [out] if not isinstance(out, tuple) else list(out)
    for v in values:
        v = getattr(v, "t_step_s", getattr(v, "total_params", v))
        arr = np.asarray(v, dtype=float)
        assert np.all(np.isfinite(arr)), (out, call)


@SETTINGS
@given(alpha=numbers, gamma=numbers, c=numbers)
def test_closed_forms(alpha, gamma, c):
    _finite_or_refused(lambda: rf.expected_tokens(alpha, gamma))
    _finite_or_refused(lambda: rf.ideal_speedup(alpha, gamma, c))
    _finite_or_refused(lambda: rf.optimal_gamma(alpha, c, max_gamma=16))


@SETTINGS
@given(params=numbers, batch=numbers, tokens=numbers, context=numbers)
def test_pricing_functions(params, batch, tokens, context):
    hw = rf.load_hardware(HW)
    _finite_or_refused(lambda: rf.ModelSpec.from_params(params))
    spec = rf.get_model("llama-3.1-8b")
    _finite_or_refused(lambda: rf.pass_time(spec, hw, batch, tokens, context, "bf16"))
    _finite_or_refused(lambda: rf.crossover_tokens(spec, hw, batch, context, "bf16"))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e308, -1.0, 10**400])
def test_the_model_refuses_what_cannot_be_priced(value):
    with pytest.raises(rf.SpecroofError):
        rf.ModelSpec.from_params(value)


# -- the API's array arguments: lists and arrays of any of the numbers above, empty ones, strings and flags where a
# number goes, arrays that do not broadcast together, tensor-parallel degrees of any kind --------------------------

#: what an API argument may be handed: a number, a list or array of numbers (empty included), a string, a flag
api_values = st.one_of(
    numbers,
    st.lists(numbers, min_size=0, max_size=4),
    st.lists(st.integers(min_value=-3, max_value=4096), min_size=0, max_size=4).map(np.asarray),
    st.sampled_from(["4", "", "1,8", "nan", True, False, None, [], [[1], [2]], np.array([]), np.array(["1", "2"])]),
)
tp_values = st.one_of(
    st.integers(min_value=-2, max_value=9), st.sampled_from(["2", 2.0, 2.5, True, None, float("nan")])
)


def _refused_or_finite(call):
    """As :func:`_finite_or_refused`, and a refusal is a ValueError whose message names an argument."""
    try:
        out = call()
    except rf.SpecroofError as e:
        assert str(e).strip() and "\n" not in str(e).strip(), repr(e)
        return
    values = [out] if not isinstance(out, tuple) else list(out)
    for v in values:
        for field in ("t_step_s", "total_bytes", "total_params"):
            v = getattr(v, field, v)
        arr = np.asarray(v, dtype=float)
        assert arr.size and np.all(np.isfinite(arr)), (out, call)


@SETTINGS
@given(batch=api_values, tokens=api_values, context=api_values, tp=tp_values)
def test_pass_time_array_arguments(batch, tokens, context, tp):
    _refused_or_finite(lambda: rf.pass_time("llama-3.1-8b", HW, batch, tokens, context, "bf16", tp=tp))


@SETTINGS
@given(batch=api_values, context=api_values, tp=tp_values)
def test_crossover_and_footprint_array_arguments(batch, context, tp):
    _refused_or_finite(lambda: rf.crossover_tokens("llama-3.1-8b", HW, batch, context, "bf16", tp=tp))
    _refused_or_finite(lambda: rf.passtime.memory_footprint("llama-3.1-8b", batch, context))
    _refused_or_finite(lambda: rf.forward_cost("llama-3.1-8b", batch, 1, context))


@SETTINGS
@given(alpha=api_values, gamma=api_values, c=api_values, params=api_values)
def test_closed_forms_and_the_model_take_arrays_or_refuse_them(alpha, gamma, c, params):
    for call in (
        lambda: rf.expected_tokens(alpha, gamma),
        lambda: rf.ideal_speedup(alpha, gamma, c),
        lambda: rf.ModelSpec.from_params(params),
    ):
        try:
            _refused_or_finite(call)
        except ValueError as e:  # numpy's broadcasting refusal for the closed forms' arrays: still a ValueError
            assert "broadcast" in str(e), repr(e)


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda: rf.pass_time("llama-3.1-8b", HW, 1, 1, 1024, tp=3), "--tp 3"),
        (lambda: rf.crossover_tokens("llama-3.1-8b", HW, 1, 1024, tp=3), "--tp 3"),
        (lambda: rf.pass_time("llama-3.1-8b", HW, batch="4"), "batch"),
        (lambda: rf.pass_time("llama-3.1-8b", HW, batch=[]), "batch is empty"),
        (lambda: rf.pass_time("llama-3.1-8b", HW, batch=np.array([])), "batch is empty"),
        (lambda: rf.pass_time("llama-3.1-8b", HW, context=True), "context"),
        (lambda: rf.pass_time("llama-3.1-8b", HW, [1, 2, 3], [1, 2]), "do not broadcast"),
        (lambda: rf.ModelSpec.from_params("13e9"), "params"),
        (lambda: rf.expected_tokens("0.7", 4), "alpha"),
        (lambda: rf.Pricing.of(HW, tp="2"), "tp"),
    ],
    ids=[
        "tp3",
        "crossover-tp3",
        "batch-str",
        "batch-empty-list",
        "batch-empty-array",
        "context-flag",
        "broadcast",
        "params-str",
        "alpha-str",
        "pricing-tp-str",
    ],  # fmt: skip
)
def test_each_api_family_is_refused_naming_its_argument(call, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        call()
