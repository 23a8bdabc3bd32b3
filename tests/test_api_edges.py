"""Every input at every edge (issue 57): numpy scalars and whole floats are numbers wherever numbers go, every public
constructor validates, every search is sized before work and names the largest size that fits, empty trees and
fractional counts are one clear error, huge ints are the library's own error, and rates of 0 and 1 work."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline as rf
from roofline import serving
from roofline.core.errors import SpecroofError
from roofline.core.validation import check_count, check_number
from roofline.speculation.trees import IIDAcceptance, Tree, _best_first, eagle2_tree, optimal_tree
from roofline.speculation.verification import verify_tree, verify_tree_greedy
from specroof.cli import did_you_mean, main

HW = "h100-sxm-80gb"
TARGET = "llama-3.1-8b"
REPO = Path(__file__).resolve().parents[1]


def _run(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals exit from inside parse_args
        code = exc.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


# -- the one validation layer ---------------------------------------------------------------------------------------


@given(st.integers(0, 10**6))
def test_a_count_is_the_same_in_every_numeric_type(n):
    for value in (n, float(n), np.int64(n), np.int32(min(n, 2**31 - 1)) if n < 2**31 else n, np.float64(n)):
        assert check_count("n", value) == n
        assert type(check_count("n", value)) is int


@pytest.mark.parametrize("bad", [2.5, math.nan, math.inf, -1, True, "3", None, 10**30, 10**400, np.float64(0.5)])
def test_a_count_refuses_what_is_not_a_whole_number_in_range(bad):
    with pytest.raises(SpecroofError, match="must be a whole number"):
        check_count("n", bad, 0, 10**6)


@pytest.mark.parametrize("bad", [math.nan, -math.inf, 10**400, "1", None, False, np.array([1.0, 2.0])])
def test_a_number_refuses_nan_infinity_past_a_float_and_non_numbers(bad):
    with pytest.raises(SpecroofError):
        check_number("x", bad)


# -- numpy scalars and whole floats at the serving simulator ----------------------------------------------------------


def _sim(**kw):
    args = dict(hardware=HW, target=TARGET, drafter="eagle3", policy="off", rates=[2.0], requests=6, input_len=32,
                output_len=16, seed=1) | kw  # fmt: skip
    return serving.simulate(**args)


def test_the_simulator_takes_numpy_rates_and_whole_float_lengths():
    res = _sim(rates=np.arange(2, 10, 4))  # np.int64(2), np.int64(6): refused as "got np.int64(2)" before
    assert sorted(res.summary["rate_req_s"]) == [2.0, 6.0]
    plain = _sim(output_len=16).summary
    for same in (_sim(output_len=16.0), _sim(output_len=np.int64(16)), _sim(requests=6.0), _sim(max_seqs=np.int64(256)),
                 _sim(rates=np.float32(2.0)), _sim(seed=np.int64(1))):  # fmt: skip
        pd.testing.assert_frame_equal(same.summary, plain)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(output_len=100.5), "output length must be a whole number"),
        (dict(requests=10**30), "requests must be a whole number in"),
        (dict(max_tokens=10**30), "max_tokens must be a whole number in"),
        (dict(replicas=2.5), "replicas must be a whole number"),
        (dict(block_size=True), "block_size must be"),
        (dict(memory_fraction=math.nan), "memory_fraction must be a number in"),
        (dict(rates=[np.float64(math.nan)]), "rate must be a positive"),
        (dict(rates="2"), "rates must be a number or a list"),
        (dict(round_host_s=math.nan), "round_host_s must be"),
        (dict(idle_start_s=-1.0), "idle_start_s must be >= 0"),
    ],
)
def test_the_simulator_refuses_bad_numbers_before_any_work(kw, match):
    with pytest.raises(SpecroofError, match=match):
        _sim(**kw)


@pytest.mark.parametrize("alpha", [0.0, 1.0, np.float64(0.0), np.float64(1.0)])
def test_the_simulator_takes_rates_of_0_and_1(alpha):
    res = _sim(policy="static:3", acceptance=alpha).summary
    assert res["acceptance_rate"].iloc[0] == pytest.approx(float(alpha))


# -- constructors validate --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf, 0, 0.0, 10**400, "3e12", None])
def test_hardware_replace_refuses_a_bandwidth_that_would_price_nonsense(bad):
    h = rf.load_hardware(HW)
    with pytest.raises(SpecroofError, match="bandwidth_bytes_per_s"):
        h.replace(bandwidth_bytes_per_s=bad)


@pytest.mark.parametrize(
    "field,bad",
    [
        ("peak_flop_per_s", {"bf16": math.nan}),
        ("peak_flop_per_s", [1e15]),
        ("memory_bytes", -1.0),
        ("efficiency_memory", 0.0),
        ("efficiency_compute", 1.5),
        ("launch_overhead_s", math.inf),
        ("interconnect_bytes_per_s", 0.0),
        ("efficiency_compute_dtype", {"fp8": 2.0}),
    ],
)
def test_every_hardware_figure_is_checked_where_it_is_made(field, bad):
    with pytest.raises(SpecroofError, match=field):
        rf.load_hardware(HW).replace(**{field: bad})


def test_hardware_takes_numpy_figures_as_floats_and_prices_them_alike():
    h = rf.load_hardware(HW)
    a = h.replace(bandwidth_bytes_per_s=np.float64(2e12))
    b = h.replace(bandwidth_bytes_per_s=2_000_000_000_000)
    assert type(a.bandwidth_bytes_per_s) is float and a.bandwidth_bytes_per_s == b.bandwidth_bytes_per_s
    ta = rf.pass_time(TARGET, rf.Pricing.of(a)).t_step_s
    tb = rf.pass_time(TARGET, rf.Pricing.of(b)).t_step_s
    assert float(ta) == float(tb)


@pytest.mark.parametrize("bad", [math.nan, -1.0, 0.0, 1e308, 10**400, True])
def test_offloaded_refuses_a_link_rate_that_is_not_a_rate(bad):
    with pytest.raises(SpecroofError, match="host link rate"):
        rf.load_hardware(HW).offloaded(bad)


def test_offloaded_takes_a_numpy_rate():
    h = rf.load_hardware(HW)
    assert h.offloaded(np.float64(3e10)).weights_link_bytes_per_s == h.offloaded(3e10).weights_link_bytes_per_s


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(tp=10**30), "tp must be an integer"),
        (dict(tp=1.5), "tp must be an integer"),
        (dict(tp=np.float64(math.nan)), "tp must be an integer"),
        (dict(overhead_s=math.nan), "overhead_s must be >= 0"),
        (dict(overhead_s=10**400), "overhead_s must be >= 0"),
        (dict(efficiency="yes"), "efficiency must be True, False or None"),
        (dict(offload=math.nan), "host link rate"),
    ],
)
def test_pricing_of_validates_its_options_at_the_entry(kw, match):
    with pytest.raises(SpecroofError, match=match):
        rf.Pricing.of(HW, **kw)


def test_pricing_of_takes_numpy_options():
    assert rf.Pricing.of(HW, tp=np.int64(2)) == rf.Pricing.of(HW, tp=2)
    assert rf.Pricing.of(HW, tp=2.0).tp == 2
    assert rf.Pricing.of(HW, overhead_s=np.float64(1e-3)).overhead_s == 1e-3


# -- searches are sized before work -----------------------------------------------------------------------------------


def _per_limit_table(model, n, d):
    """optimal_tree's product-form table the direct way: one best-first growth per depth limit."""
    table = np.full((n + 1, d + 1), np.nan)
    table[0, :] = 1.0
    for dd in range(1, d + 1):
        _, _, val = _best_first(model, n, dd)
        table[1 : len(val) + 1, dd] = 1.0 + np.cumsum(val)
    return table


@settings(max_examples=40, deadline=None)
@given(p=st.sampled_from([0.0, 0.2, 0.5, 0.8, 0.95, 1.0]), n=st.integers(0, 40), d=st.integers(1, 12))
def test_growing_only_the_tighter_depth_limits_gives_the_same_table_and_trees(p, n, d):
    model = IIDAcceptance(p)
    opt = optimal_tree(model, n, d)
    np.testing.assert_array_equal(opt.table, _per_limit_table(model, n, d))
    for dd in range(1, d + 1):
        for nn in range(n + 1):
            if not np.isnan(opt.table[nn, dd]):
                t = opt.tree_for(nn, dd)
                assert t.n_nodes == nn and t.depth <= dd
                assert t.expected_tokens(model) == pytest.approx(opt.table[nn, dd])


def test_the_issues_search_is_answered_and_a_larger_one_refused_naming_what_fits():
    opt = optimal_tree(IIDAcceptance(0.5), 5000, 500)  # 19 s and 500 growths before: one per depth it reaches
    assert opt.tree.n_nodes == 5000
    with pytest.raises(SpecroofError, match=r"the largest that fits is budget \d+ at depth 1000000"):
        optimal_tree(IIDAcceptance(0.5), 10**7, 10**6)  # a MemoryError of 72.8 TiB before
    with pytest.raises(SpecroofError, match=r"largest depth that fits at budget 5000 is \d+"):
        optimal_tree(IIDAcceptance(0.99), 5000, 5000)  # a tree that grows hundreds of levels deep


def test_the_sequoia_dp_names_the_largest_budget_that_fits():
    with pytest.raises(SpecroofError, match=r"the largest budget that fits at depth 100 is \d+ nodes"):
        optimal_tree([0.5, 0.2], 10**6, 100)
    v = np.full(100, 0.009)
    # a tree of 100 nodes is at most 100 deep: depth 20000 is depth 100's work and answer, not a refusal
    deep, at_budget = optimal_tree(v, 100, 20000), optimal_tree(v, 100, 100)
    assert deep.expected_tokens == at_budget.expected_tokens and deep.tree.n_nodes == at_budget.tree.n_nodes
    with pytest.raises(SpecroofError, match=r"table of .* cells.*largest budget that fits at depth 720 is \d+"):
        optimal_tree(v, 720, 20000)


def test_the_named_largest_size_fits():
    import re

    with pytest.raises(SpecroofError) as err:
        optimal_tree(IIDAcceptance(0.5), 20000, 5000)
    fits = int(re.search(r"largest that fits is budget (\d+)", str(err.value))[1])
    assert optimal_tree(IIDAcceptance(0.5), fits, 5000).tree.n_nodes == fits
    with pytest.raises(SpecroofError):
        optimal_tree(IIDAcceptance(0.5), fits + 1, 5000)


def test_eagle2_and_optimal_gamma_are_sized_before_work():
    calls = []

    def propose(path):
        calls.append(path)
        return [0.5, 0.3]

    with pytest.raises(SpecroofError, match="largest depth that fits at top_k 1000 is 1"):
        eagle2_tree(propose, 10, 1000, 5)
    assert calls == []  # refused before the first proposal
    with pytest.raises(SpecroofError, match=r"max_gamma must lie in \[0, 4096\]"):
        rf.optimal_gamma(0.8, 0.1, 10**9)
    with pytest.raises(SpecroofError, match="the largest max_gamma that fits is 499"):
        rf.optimal_gamma(np.linspace(0, 1, 100_000), 0.1, 4096)


# -- empty trees, fractional counts, huge ints --------------------------------------------------------------------------


def test_an_empty_tree_to_verify_is_one_clear_error():
    p = np.full((1, 4), 0.25)
    with pytest.raises(SpecroofError, match="the tree is empty"):
        verify_tree_greedy(p, Tree([]), [])
    with pytest.raises(SpecroofError, match="the tree is empty"):
        verify_tree(p, p, Tree([]), np.array([], dtype=int), np.random.default_rng(0))


def test_greedy_tree_verification_checks_shapes_and_tokens():
    p = np.full((2, 4), 0.25)
    with pytest.raises(SpecroofError, match="node_tokens must be integers in"):
        verify_tree_greedy(p, Tree([-1]), [7])
    with pytest.raises(SpecroofError, match="node_tokens must be integers in"):
        verify_tree_greedy(p, Tree([-1]), [1.5])
    with pytest.raises(SpecroofError, match="a 1-node tree needs"):
        verify_tree_greedy(np.full((3, 4), 0.25), Tree([-1]), [1])
    with pytest.raises(SpecroofError, match="p must be finite"):
        verify_tree_greedy(np.array([[np.nan, 1.0], [0.5, 0.5]]), Tree([-1]), [1])
    res = verify_tree_greedy(np.array([[0.1, 0.9], [0.8, 0.2]]), Tree([-1]), [1])
    assert int(res.n_accepted) == 1 and list(res.tokens) == [1, 0]


@pytest.mark.parametrize("bad", [10**30, 10**400, math.nan, "3", 0.5])
def test_predict_speedup_refuses_a_mean_accepted_that_is_not_one_in_its_own_words(bad):
    with pytest.raises(SpecroofError, match="mean.accepted"):  # 10**30: past what a round can emit, said so
        rf.predict_speedup(hardware=HW, target=TARGET, drafter="eagle3", mean_accepted=bad)


def test_predict_speedup_takes_numpy_scalars_and_rates_0_and_1():
    kw = dict(hardware=HW, target=TARGET, drafter="eagle3")
    a = rf.predict_speedup(**kw, mean_accepted=np.float64(3.0)).speedup
    assert a == rf.predict_speedup(**kw, mean_accepted=3.0).speedup
    zero = rf.predict_speedup(**kw, alpha=np.float64(0.0), gamma=np.int64(4))
    one = rf.predict_speedup(**kw, alpha=1.0, gamma=4)
    assert zero.mean_accepted == 1.0 and one.mean_accepted == 5.0
    with pytest.raises(SpecroofError, match=r"alpha must lie in \[0, 1\]"):
        rf.predict_speedup(**kw, alpha=1.5, gamma=4)


@pytest.mark.parametrize("bad", [2.5, 0, 10**30, math.nan])
def test_crossover_tokens_refuses_a_token_count_that_is_not_one(bad):
    with pytest.raises(SpecroofError, match="max_tokens must be a whole number"):
        rf.crossover_tokens(TARGET, HW, max_tokens=bad)


def test_crossover_tokens_takes_numpy_and_whole_float_counts():
    k = int(rf.crossover_tokens(TARGET, HW, max_tokens=4096))
    assert int(rf.crossover_tokens(TARGET, HW, max_tokens=np.int64(4096))) == k
    assert int(rf.crossover_tokens(TARGET, HW, max_tokens=4096.0)) == k


# -- rates of 0 and 1 everywhere a rate is taken -----------------------------------------------------------------------


@pytest.mark.parametrize("alpha,gamma,tokens", [(0.0, 4, 1.0), (1.0, 4, 5.0), (np.float64(1.0), np.int64(3), 4.0)])
def test_the_closed_forms_take_rates_of_0_and_1(alpha, gamma, tokens):
    assert float(rf.expected_tokens(alpha, gamma)) == tokens
    g, s = rf.optimal_gamma(alpha, 0.1, 16)
    assert (int(g) == 0) if alpha == 0 else (int(g) == 16 and float(s) > 1)
    assert float(rf.speedup(HW, TARGET, "eagle3", alpha, gamma).expected_tokens) == tokens


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_trees_take_rates_of_0_and_1(p):
    opt = optimal_tree(IIDAcceptance(p), 8, 3)
    assert opt.expected_tokens == (1.0 if p == 0 else 4.0)


def test_report_takes_alpha_0_and_1(capsys, tmp_path):
    from specroof.report import DEFAULT_PAIRING, validate_inputs

    for alpha in (0.0, 1.0):  # the page's own check, which refused 1 after the command's refused both
        validate_inputs([HW], {**DEFAULT_PAIRING, "acceptance": {"draft llama-3.2-1b": alpha}})
    code, _, err = _run(capsys, ["report", "--alpha", "1.5", "--skip-measure", "--out", str(tmp_path / "r")])
    assert code == 2 and "--alpha must lie in [0, 1] (got 1.5)" in err


# -- CLI friction ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,suggestion",
    [
        (["plna"], "did you mean plan?"),
        (["hardware", "lst"], "did you mean list?"),
        (["speedp"], "did you mean speedup?"),
    ],
)
def test_a_subcommand_typo_names_the_closest_command(capsys, argv, suggestion):
    code, _, err = _run(capsys, argv)
    assert code == 2 and suggestion in err and len(err.strip().splitlines()) == 1


def test_did_you_mean_stays_quiet_when_nothing_is_close():
    msg = "argument command: invalid choice: 'zzz' (choose from 'plan', 'tree')"
    assert did_you_mean(msg) == msg


def test_tree_needs_no_vector_and_takes_a_list_of_batches(capsys):
    # eagle3 on Llama-3.1-8B has a matched published default (an unmatched drafter answers with a curve instead)
    base = ["tree", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--json"]
    code, out, _ = _run(capsys, [*base, "--batch", "1,16"])
    assert code == 0
    data = json.loads(out)
    assert data["acceptance"]["given"] is False and "matched pair" in data["acceptance"]["source"]
    assert [b["batch"] for b in data["by_batch"]] == [1, 16]
    assert data["hardware_choice"] == data["by_batch"][0]["hardware_choice"]
    code, out2, _ = _run(capsys, [*base, "--batch", "1", "16"])
    assert code == 0 and json.loads(out2)["by_batch"] == data["by_batch"]
    # one batch: the answer as before, without a per-batch list
    code, out3, _ = _run(capsys, [*base, "--batch", "16"])
    assert code == 0 and "by_batch" not in json.loads(out3)
    assert json.loads(out3)["hardware_choice"] == data["by_batch"][1]["hardware_choice"]


def test_tree_names_its_default_acceptance_in_words(capsys):
    code, out, _ = _run(capsys, ["tree", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3"])
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("acceptance: eagle3: none given: ") and "--acceptance-vector FILE for yours" in first


@pytest.mark.parametrize(
    "argv,match",
    [
        (["tree", "--budget", "8"], "give --acceptance-vector FILE"),
        (["tree", "--hardware", HW, "--target", TARGET, "--drafter", "eagle2", "--batch", "1,0"], "--batch"),
    ],
)
def test_tree_refuses_in_one_line(capsys, argv, match):
    code, _, err = _run(capsys, argv)
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1


def test_no_raw_empty_dataframe_is_printed(capsys):
    import argparse

    from specroof.shell import NO_ROWS, emit, frame_text

    empty = pd.DataFrame(columns=["a", "b"])
    emit(argparse.Namespace(json=False), {}, "head\n" + empty.to_string(index=False) + "\ntail")
    emit(argparse.Namespace(json=False), {}, empty)
    out = capsys.readouterr().out
    assert "Empty DataFrame" not in out and out.count(NO_ROWS) == 2
    assert frame_text(empty, "nothing measured") == "nothing measured"
    assert "a" in frame_text(pd.DataFrame({"a": [1]}))


def test_the_measured_table_leaves_out_blank_columns_and_says_why():
    from specroof.measure_report import blank_column_words, drop_blank_columns

    df = pd.DataFrame({"gamma": [1, 2], "rep_spread": [np.nan, np.nan], "flag": ["", ""], "noise": ["", "noisy"]})
    shown, dropped = drop_blank_columns(df)
    assert list(shown) == ["gamma", "noise"] and dropped == ["rep_spread", "flag"]
    words = blank_column_words(dropped)
    assert "rep_spread (one repetition per point" in words and "flag (no row above its physical bound)" in words


@pytest.mark.parametrize(
    "path", ["specroof-spec/index.html", "measured-profile.toml", "engine.toml", "specroof-report/x"]
)
def test_default_output_folders_are_git_ignored(path):
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    hit = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO, check=False)
    assert hit.returncode == 0, f"{path} is not git-ignored"
    tracked = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", "benchmarks/data/h200-2026-11-30/measured-profile.toml"],
        cwd=REPO,
        check=False,
    )
    assert tracked.returncode == 1  # the anchored patterns leave a profile kept elsewhere tracked


# -- docs ------------------------------------------------------------------------------------------------------------------


def test_sphinx_roles_render_as_code_names():
    pytest.importorskip("griffe")
    import importlib.util

    spec = importlib.util.spec_from_file_location("griffe_roles", REPO / ".ci" / "griffe_roles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = "See :func:`as_drafter`, :meth:`with_`, :class:`~roofline.speculation.trees.Tree` and :py:mod:`roofline.serving`."
    assert mod.plain_roles(text) == "See `as_drafter`, `with_`, `Tree` and `roofline.serving`."


def test_report_runs_at_alpha_1_end_to_end(capsys, tmp_path):
    out = tmp_path / "page"
    code, _, err = _run(capsys, ["report", "--alpha", "1", "--skip-measure", "--out", str(out)])
    assert code == 0, err
    assert "given per-token rate alpha 1" in (out / "index.html").read_text()


# -- the searches and constructors left after the first pass of this file ------------------------------------------


@pytest.mark.parametrize("limit", [10**30, float("nan"), 2.5, 0])
def test_max_batch_sizes_its_search_before_building_it(limit):
    with pytest.raises(rf.SpecroofError, match="limit must be a whole number in"):
        rf.max_batch("llama-3.1-8b", "h100-sxm-80gb", 1024, limit=limit)
    assert rf.max_batch("llama-3.1-8b", "h100-sxm-80gb", 1024, limit=np.int64(64)) == 64


@pytest.mark.parametrize("max_batch", [10**30, float("nan"), 0])
def test_speculation_stops_paying_takes_its_largest_batch_as_a_count(max_batch):
    from roofline.deploy.planner import speculation_stops_paying

    with pytest.raises(rf.SpecroofError, match="max_batch must be a whole number in"):
        speculation_stops_paying("h100-sxm-80gb", "llama-3.1-8b", "model:llama-3.2-1b", 0.7, max_batch=max_batch)


def test_mtp_says_how_to_give_its_module_count():
    with pytest.raises(rf.SpecroofError, match=r"MTP\(modules=8\)"):
        rf.MTP(8)
    m = rf.MTP(modules=np.int64(2))
    assert m.modules == 2 and type(m.modules) is int and m.name == "mtp:2"
    with pytest.raises(rf.SpecroofError, match="mtp modules must be a whole number"):
        rf.MTP(modules=2.5)
