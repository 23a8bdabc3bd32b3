"""EAGLE trees from engine knobs (SGLang, vLLM, TensorRT-LLM), their pricing, and the flags that deploy them."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.deploy.engine_flags import emit_flags
from roofline.deploy.engine_search import EngineDraft, engine_settings, plan_engine
from roofline.speculation.engine_trees import (
    SGLANG_DEFAULT,
    EngineSetting,
    candidates_from_scores,
    default_engine_tree,
    engine_tree,
    expected_scores,
    fit_acceptance,
    level_branching,
    select_tree,
)
from roofline.speculation.predict import predict_speedup
from roofline.speculation.trees import DepthRankAcceptance, IIDAcceptance, SiblingRankAcceptance, Tree

# SGLang's own fixture for its tree kernel (sgl-project/sglang python/sglang/srt/speculative/build_eagle_tree.py,
# test_build_tree_kernel_efficient: topk 4, 4 steps, 8 draft tokens; batch 0 and 1). Each step's cumulative scores.
SGLANG_SCORES = {
    0: [
        [7.1127e-01, 2.8292e-01, 2.2995e-03, 1.7357e-03],
        [
            [6.9142e-01, 1.2863e-02, 1.6873e-03, 1.1871e-03],
            [2.4787e-01, 1.8818e-02, 1.4204e-02, 9.2235e-04],
            [2.2971e-03, 1.6700e-06, 1.8737e-07, 8.3146e-08],
            [1.2771e-03, 2.4374e-04, 1.7832e-04, 1.1947e-05],
        ],
        [
            [6.6438e-01, 2.6997e-02, 2.4236e-05, 4.0821e-06],
            [2.4402e-01, 2.8409e-03, 5.0935e-04, 2.9022e-04],
            [1.6178e-02, 2.0567e-03, 4.5892e-04, 3.0034e-05],
            [1.3023e-02, 5.0497e-04, 3.6371e-04, 8.7750e-05],
        ],
        [
            [6.6420e-01, 1.0525e-04, 6.5864e-05, 1.2253e-06],
            [1.3019e-01, 1.0461e-01, 5.2083e-03, 1.6777e-03],
            [2.0103e-02, 6.7335e-03, 1.2625e-04, 1.0364e-05],
            [1.5142e-02, 7.0819e-04, 9.6595e-05, 8.7951e-05],
        ],
    ],
    1: [
        [9.7476e-01, 2.2219e-02, 6.5031e-04, 1.3212e-04],
        [
            [8.4832e-02, 6.6068e-02, 5.8304e-02, 5.7851e-02],
            [2.3616e-03, 1.1243e-03, 5.4368e-04, 2.7768e-04],
            [2.5286e-04, 1.5578e-04, 2.8817e-05, 1.2888e-05],
            [1.2834e-04, 2.5417e-06, 1.1279e-06, 1.6088e-08],
        ],
        [
            [2.3263e-02, 2.0054e-02, 9.3990e-03, 2.7783e-03],
            [6.4156e-02, 5.5506e-04, 1.0429e-04, 9.7211e-05],
            [4.9950e-02, 5.0630e-03, 9.0068e-04, 3.3656e-04],
            [7.5817e-03, 8.5731e-04, 6.9972e-04, 6.0793e-04],
        ],
        [
            [5.8608e-02, 1.8840e-03, 7.8535e-04, 4.4400e-04],
            [1.2185e-02, 2.0684e-03, 1.7418e-03, 1.4327e-03],
            [6.2455e-03, 6.1487e-03, 2.6862e-03, 1.8034e-03],
            [1.8590e-03, 1.6151e-03, 1.2481e-03, 3.6038e-04],
        ],
    ],
}
# the fixture's expected beams (parents_list[1:-1], flat candidate indices) and trees, read off its
# retrive_next_token / retrive_next_sibling (first child / next sibling of each verified token)
SGLANG_BEAMS = {0: [[4, 8, 9, 10], [20, 24, 21, 28]], 1: [[4, 5, 6, 7], [24, 28, 20, 21]]}
SGLANG_PARENTS = {0: [-1, -1, 0, 1, 2, 3, 4], 1: [-1, 0, 0, 0, 0, 2, 5]}


@pytest.mark.parametrize("b", [0, 1])
def test_selection_reproduces_sglangs_own_kernel_fixture(b):
    cands = candidates_from_scores(SGLANG_SCORES[b])
    for step, beam in zip((2, 3), SGLANG_BEAMS[b], strict=True):
        assert sorted(np.nonzero(cands.beam & (cands.step == step))[0].tolist()) == sorted(beam)
    tree, _ = select_tree(cands, 7)
    assert tree.parents.tolist() == SGLANG_PARENTS[b]


def test_a_small_sglang_tree_by_hand():
    # p = 0.5: rank 0 is accepted with 0.5, rank 1 with 0.25. Step 1: (0,) .5, (1,) .25; step 2 expands both:
    # (0,0) .25, (0,1) .125, (1,0) .125, (1,1) .0625. The best 3: (0,), then the .25 tie in index order.
    et = engine_tree(EngineSetting.sglang(2, 2, 4), IIDAcceptance(0.5))
    assert et.paths == ((0,), (1,), (0, 0))
    assert et.tree.parents.tolist() == [-1, -1, 0]
    assert et.expected_tokens == pytest.approx(1 + 0.5 + 0.25 + 0.25)


@pytest.mark.parametrize("p", [0.3, 0.7, 0.95])
@pytest.mark.parametrize("s", [1, 3, 6])
def test_chains_match_the_closed_form(p, s):
    closed = (1 - p ** (s + 1)) / (1 - p)
    for setting in (EngineSetting.sglang(s, 1, s + 1), EngineSetting.vllm(s), EngineSetting.trtllm(s)):
        et = engine_tree(setting, IIDAcceptance(p))
        assert et.tree == Tree.chain(s)
        assert et.expected_tokens == pytest.approx(closed, rel=1e-12)


@pytest.mark.parametrize("setting", [SGLANG_DEFAULT, EngineSetting.sglang(6, 8, 48), EngineSetting.trtllm(5, 4, 12)])
@pytest.mark.parametrize("p", [0.2, 0.6, 0.9])
def test_expected_tokens_agree_with_the_tree_module(setting, p):
    model = IIDAcceptance(p)
    et = engine_tree(setting, model)
    assert et.tree.n_nodes == setting.n_nodes
    assert et.tree.depth <= setting.num_steps
    # the kept ranks are contiguous among siblings, so the tree's own ranks are the draft's
    assert tuple(et.tree.paths()) == et.paths
    assert et.expected_tokens == pytest.approx(et.tree.expected_tokens(model), rel=1e-12)


def test_trtllm_dynamic_tree_keeps_only_each_layers_kept_nodes():
    model = IIDAcceptance(0.6)
    cands = candidates_from_scores(expected_scores(model, 5, 4))
    _, kept = select_tree(cands, 12, beams_only=True)
    assert cands.beam[kept].all()
    sgl = engine_tree(EngineSetting.sglang(5, 4, 13), model)
    trt = engine_tree(EngineSetting.trtllm(5, 4, 12), model)
    assert trt.expected_tokens <= sgl.expected_tokens + 1e-12  # a smaller pool never ranks better


def test_fit_acceptance_round_trips_and_is_monotone():
    es = [engine_tree(SGLANG_DEFAULT, IIDAcceptance(p)).expected_tokens for p in np.linspace(0, 1, 41)]
    assert np.all(np.diff(es) > 0)
    assert es[0] == 1.0 and es[-1] == pytest.approx(6.0)  # 5 steps: at most 5 accepted drafts + the bonus
    for mean in (1.5, 3.2, 5.9):
        model = fit_acceptance(mean)
        assert engine_tree(SGLANG_DEFAULT, model).expected_tokens == pytest.approx(mean, abs=1e-9)
    chain = EngineSetting.vllm(3)
    assert engine_tree(chain, fit_acceptance(2.5, chain)).expected_tokens == pytest.approx(2.5, abs=1e-9)


@pytest.mark.parametrize("mean", [1.0, 6.5, float("nan")])
def test_fit_acceptance_refuses_impossible_means(mean):
    with pytest.raises(SpecroofError, match="mean_accepted"):
        fit_acceptance(mean)


def test_acceptance_rising_with_rank_is_refused():
    with pytest.raises(SpecroofError, match="must not increase with sibling rank"):
        engine_tree(SGLANG_DEFAULT, DepthRankAcceptance([[0.2, 0.5, 0.1, 0.0]] * 5))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: EngineSetting.sglang(5, 1, 8), "num_steps \\+ 1 = 6"),
        (lambda: EngineSetting.sglang(2, 2, 8), "<= topk \\+ \\(num_steps - 1\\) x topk\\^2 = 6"),
        (lambda: EngineSetting.sglang(0, 4, 8), "num_steps must be a whole number >= 1"),
        (lambda: EngineSetting.sglang(5, 4, 1), "num_draft_tokens must be >= 2"),
        (lambda: EngineSetting("vllm", 3, 2, 8), "vLLM drafts a chain"),
        (lambda: EngineSetting.vllm(tree=[(0,), (1,), (0, 0)]), "same top-c children"),
        (lambda: EngineSetting.vllm(tree=[(0,), (0, 0, 0)]), "has no parent path"),
        (lambda: EngineSetting.vllm(3, tree=[(0,), (1,)]), "must equal the tree's 2 nodes"),
        (lambda: EngineSetting.trtllm(3, 4, 2), "\\[max_draft_len, dynamic_tree_max_topK x max_draft_len\\]"),
        (lambda: EngineSetting.trtllm(3, 4, 13), "= \\[3, 12\\]"),
        (lambda: EngineSetting("tgi", 3, 1, 4), "unknown engine 'tgi'"),
    ],
)
def test_each_engines_constraints(make, message):
    with pytest.raises(SpecroofError, match=message):
        make()


def test_vllm_trees_branch_uniformly_per_level():
    assert level_branching([(0,), (1,), (0, 0), (1, 0)]) == (2, 1)
    assert level_branching([(0,), (1,), (0, 0)]) is None
    s = EngineSetting.vllm(tree=[(1, 0), (0,), (1,), (0, 0)])  # any order: vLLM sorts breadth-first
    assert (s.num_steps, s.topk, s.num_draft_tokens, s.draft_pass_widths) == (2, 2, 5, (1, 2))
    assert s.knobs() == {"num_speculative_tokens": 4, "speculative_token_tree": "[(0,), (1,), (0, 0), (1, 0)]"}


def test_draft_passes_follow_the_setting_not_the_verified_tree():
    assert SGLANG_DEFAULT.draft_pass_widths == (1, 4, 4, 4, 4)
    assert EngineSetting.vllm(3).draft_pass_widths == (1, 1, 1)
    pl = plan_engine(
        hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter="eagle3", mean_accepted=3.2, batches=[4],
        settings=[EngineSetting.sglang(5, 4, 4), EngineSetting.sglang(5, 4, 32)],
    )  # fmt: skip
    t = pl.table
    assert t["t_draft_s"].iloc[0] == pytest.approx(t["t_draft_s"].iloc[1], rel=1e-12)
    assert t["t_verify_s"].iloc[0] < t["t_verify_s"].iloc[1]


@pytest.mark.parametrize("g", [1, 4])
def test_a_chain_setting_prices_like_the_chain_formula(g):
    pl = plan_engine(
        hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter="eagle3", acceptance=IIDAcceptance(0.7),
        framework="vllm", batches=[8], settings=[EngineSetting.vllm(g)], engine="serving",
    )  # fmt: skip
    row = pl.table.iloc[0]
    ref = predict_speedup(
        hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter="eagle3", gamma=g,
        mean_accepted=float(row["expected_tokens"]), engine="serving", batch=8,
    )  # fmt: skip
    assert row["t_draft_s"] == pytest.approx(ref.t_draft_s, rel=1e-9)
    assert row["t_verify_s"] == pytest.approx(ref.t_verify_s, rel=1e-9)
    assert row["speedup"] == pytest.approx(ref.speedup, rel=1e-9)


def test_engine_draft_is_eagles_layer():
    d = EngineDraft(3, top_k=4, name="eagle3", pass_widths=(1, 4))
    assert d.name == "eagle3" and d.top_k == 4


def test_plan_per_batch_with_sglang_flags():
    """The issue's case: h100, llama-3.1-8b, eagle3 at mean 3.2, serving engine, batches 1, 8, 32, --emit sglang."""
    pl = plan_engine(
        hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter="eagle3", framework="sglang",
        mean_accepted=3.2, engine="serving", batches=[1, 8, 32],
    )  # fmt: skip
    assert pl.best["batch"].tolist() == [1, 8, 32]
    for b, g in pl.table.groupby("batch"):
        assert pl.best.loc[pl.best["batch"] == b, "speedup"].item() == g["speedup"].max()
        assert g["best"].sum() == 1
    # wider batches fill the verify pass: the recommended tree shrinks (the priced physics, not a fixed answer)
    nodes = pl.best["n_nodes"].tolist()
    assert nodes[0] >= nodes[-1] and nodes[0] > 7
    recs = pl.records(target="llama-3.1-8b", drafter="eagle3")
    assert [r["batch"] for r in recs] == [1, 8, 32]
    for r, s in zip(recs, pl.best_settings, strict=True):
        argv = shlex.split(r["flags"])
        assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
        assert argv[argv.index("--speculative-num-steps") + 1] == str(s.num_steps)
        assert argv[argv.index("--speculative-eagle-topk") + 1] == str(s.topk)
        assert argv[argv.index("--speculative-num-draft-tokens") + 1] == str(s.num_draft_tokens)
        assert r["knobs"]["speculative_num_draft_tokens"] == s.num_draft_tokens
        json.dumps(r)  # the CLI prints these records as JSON


def test_engine_settings_grids_are_valid_and_distinct():
    for fw in ("sglang", "vllm", "trtllm"):
        grid = engine_settings(fw)
        assert len(grid) == len(set(grid)) and all(s.framework == fw for s in grid)
    assert all(s.is_chain for s in engine_settings("vllm"))
    trees = [s for s in engine_settings("vllm", vllm_trees=True) if s.choices is not None]
    assert trees and all(level_branching(s.choices) for s in trees)


def test_flags_for_each_engine():
    sgl = emit_flags(SGLANG_DEFAULT, target="llama-3.1-8b", drafter="eagle3")
    assert sgl == (
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --speculative-num-steps 5 "
        "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8"
    )
    v = shlex.split(emit_flags(EngineSetting.vllm(3), target="llama-3.1-8b", drafter="eagle3"))
    assert v[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert json.loads(v[v.index("--speculative-config") + 1]) == {
        "method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3,
    }  # fmt: skip
    vt = shlex.split(emit_flags(EngineSetting.vllm(tree=[(0,), (1,)]), target="x/y", drafter="eagle", draft_model="d"))
    assert json.loads(vt[vt.index("--speculative-config") + 1])["speculative_token_tree"] == "[(0,), (1,)]"
    assert vt[-2:] == ["--attention-backend", "TREE_ATTN"]
    trt = emit_flags(EngineSetting.trtllm(4, 8, 20), target="llama-3.1-8b", drafter="eagle3").splitlines()
    assert trt[1:] == [
        "speculative_config:", "  decoding_type: Eagle3", "  max_draft_len: 4", "  use_dynamic_tree: true",
        "  dynamic_tree_max_topK: 8", "  max_total_draft_tokens: 20",
        "  speculative_model: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    ]  # fmt: skip
    mtp = emit_flags(EngineSetting.sglang(3, 1, 4), "trtllm", target="deepseek-ai/DeepSeek-V3", drafter="mtp")
    assert "decoding_type: MTP" in mtp and "num_nextn_predict_layers: 3" in mtp and "speculative_model" not in mtp


def test_flags_refuse_what_an_engine_cannot_take():
    with pytest.raises(SpecroofError, match="has no vllm equivalent"):
        emit_flags(SGLANG_DEFAULT, "vllm", target="llama-3.1-8b", drafter="eagle3")
    with pytest.raises(SpecroofError, match="no known eagle3 draft checkpoint for target 'llama-2-7b'"):
        emit_flags(SGLANG_DEFAULT, target="llama-2-7b", drafter="eagle3")
    with pytest.raises(SpecroofError, match="drafter 'medusa' has no sglang method"):
        emit_flags(SGLANG_DEFAULT, target="llama-3.1-8b", drafter="medusa")
    with pytest.raises(SpecroofError, match="unknown engine 'tgi'"):
        emit_flags(SGLANG_DEFAULT, "tgi", target="llama-3.1-8b", drafter="eagle3")
    with pytest.raises(SpecroofError, match="engine settings are searched for EAGLE-style drafters"):
        plan_engine(hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter="medusa", mean_accepted=2.0)


def test_default_engine_tree_yields_the_measured_mean_and_mtp_names_plan():
    et = default_engine_tree(3.2)
    assert et.setting == SGLANG_DEFAULT and et.tree.n_nodes == 7
    assert et.expected_tokens == pytest.approx(3.2, abs=1e-9)
    pl = plan_engine(
        hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter="mtp:2", mean_accepted=2.0, framework="vllm",
    )  # fmt: skip
    assert pl.best["n_nodes"].item() >= 1 and "setting" not in pl.records(target="x", drafter="mtp")[0]


def test_a_sequoia_vector_prices_engine_settings_as_tree_emit_does():
    acc = SiblingRankAcceptance([0.6, 0.15, 0.05, 0.03])
    pl = plan_engine(
        hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter="eagle2", acceptance=acc, framework="trtllm",
        batches=[1, 16],
    )  # fmt: skip
    for (_, row), s in zip(pl.best.iterrows(), pl.best_settings, strict=True):
        assert row["expected_tokens"] == pytest.approx(engine_tree(s, acc).tree.expected_tokens(acc), rel=1e-12)
    flags = pl.records(target="llama-3.1-8b", drafter="eagle2")[0]["flags"]
    assert "decoding_type: Eagle\n" in flags + "\n" and "yuhuili/EAGLE-LLaMA3.1-Instruct-8B" in flags
