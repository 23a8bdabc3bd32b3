"""One Pricing object, one set of defaults, one round formula, one drafter grammar, the top-level API (#22)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import roofline as rf
from roofline import SpecroofError
from roofline.costing.hardware import HOST_LINKS
from roofline.costing.pricing import Pricing, pricing_of
from roofline.deploy.planner import recommend
from roofline.deploy.tree_sizing import best_tree_size, trees_vs_batch
from roofline.speculation.drafters import (
    MTP,
    DraftModel,
    Eagle,
    EarlyExit,
    Heads,
    ParallelBlock,
    PromptLookup,
    SequentialHeads,
    SlidingWindowSelfDraft,
    as_drafter,
    named_drafter,
    round_time,
)
from roofline.speculation.speculative import predict_speedup, speedup
from roofline.speculation.trees import SiblingRankAcceptance, Tree, optimal_tree

H100 = "h100-sxm-80gb"
T8B = rf.get_model("llama-3.1-8b")
#: MTP-style heads of Llama-3.1-8B's shape: the preset ships no MTP module, a spec that does not say how many it ships
#: is priced with one head per draft step
T8B_MTP = dataclasses.replace(T8B, mtp_modules=None)


# -- the object --------------------------------------------------------------------------------


def test_a_pricing_is_resolved_once_frozen_and_hashable():
    pr = Pricing.of(H100, engine="compiled", weight_dtype="int4")
    assert isinstance(pr.hardware, rf.Hardware) and pr.engine is not None and pr.engine.name == "compiled"
    assert pr.time_model is pr.time_model  # built once
    assert Pricing.of(H100, engine="compiled", weight_dtype="int4") is pr  # names: one Pricing per distinct call
    assert {pr: 1}[Pricing.of(rf.load_hardware(H100), engine="compiled", weight_dtype="int4")] == 1
    with pytest.raises(AttributeError):
        pr.tp = 2  # type: ignore[misc]
    assert pr.dtype == "bf16" and pr.stored_weight_dtype == "int4"
    assert Pricing.of(H100, dtype="int4").weight_dtype == "int4"  # int4 alone is weight-only, bf16 arithmetic
    assert Pricing.of(H100, dtype="bf16", weight_dtype="bf16") == Pricing.of(H100)  # one spelling per pricing


def test_with_changes_options_and_applies_an_offload_link_once():
    pr = Pricing.of(H100).with_(offload="pcie4-x16")
    assert pr.offloaded and pr.hardware.weights_link_bytes_per_s == HOST_LINKS["pcie4-x16"][0]
    again = pr.with_(tp=2)
    assert again.tp == 2 and again.hardware.weights_link_bytes_per_s == HOST_LINKS["pcie4-x16"][0]
    assert again.hardware.id == pr.hardware.id and not pr.on_device().offloaded
    with pytest.raises(SpecroofError, match="unknown pricing option 'engin'"):
        pr.with_(engin="compiled")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"tp": 0}, "tp must be an integer >= 1"),
        ({"tp": 1.5}, "tp must be an integer >= 1"),
        ({"dtype": "fp7"}, "unknown dtype 'fp7'"),
        ({"engine": "turbo"}, "unknown engine 'turbo'"),
        ({"overhead_s": -1.0}, "overhead_s must be >= 0"),
        ({"offload": "carrier-pigeon"}, "unknown host link"),
    ],
)
def test_bad_pricing_options_name_the_field(options, match):
    with pytest.raises(SpecroofError, match=match):
        Pricing.of(H100, **options)


def test_a_pricing_and_a_conflicting_option_is_an_error_not_a_guess():
    pr = Pricing.of(H100, engine="compiled")
    for call in (
        lambda: rf.pass_time(T8B, pr, engine="eager"),
        lambda: speedup(pr, T8B, "eagle3", 0.8, 3, engine="eager"),
        lambda: predict_speedup(hardware=pr, target=T8B, drafter="eagle3", mean_accepted=3.0, engine="eager"),
        lambda: rf.plan(pr, T8B, "llama-3.2-1b", 0.7, engine="eager"),
        lambda: best_tree_size(pr, T8B, "llama-68m", [0.6, 0.2], engine="eager"),
    ):
        with pytest.raises(SpecroofError, match="give a Pricing or engine=, not both"):
            call()
    with pytest.raises(SpecroofError, match="give a Pricing or tp=, not both"):
        rf.pass_time(T8B, pr, tp=2)
    # the same value the Pricing holds is no conflict
    assert float(rf.pass_time(T8B, pr, engine="compiled").t_step_s) == float(rf.pass_time(T8B, pr).t_step_s)
    assert pricing_of(pr) is pr


def test_a_pricing_prices_exactly_what_the_keyword_options_price():
    kw = dict(engine="compiled", weight_dtype="int4", tp=2)
    pr = Pricing.of(H100, **kw)
    a = rf.pass_time(T8B, pr, [1, 8], 4, [0, 4096])
    b = rf.pass_time(T8B, H100, [1, 8], 4, [0, 4096], **kw)
    np.testing.assert_array_equal(a.t_step_s, b.t_step_s)
    s1 = speedup(pr, T8B, "llama-3.2-1b", 0.8, [1, 3, 5], batch=4)
    s2 = speedup(H100, T8B, "llama-3.2-1b", 0.8, [1, 3, 5], batch=4, **kw)
    np.testing.assert_array_equal(s1.speedup, s2.speedup)
    k1 = rf.crossover_tokens(T8B, pr, 4, 2048)
    k2 = rf.crossover_tokens(T8B, H100, 4, 2048, **kw)
    assert int(k1) == int(k2)


def test_one_set_of_defaults_bf16_and_context_1024():
    assert rf.DEFAULT_CONTEXT == 1024
    default = rf.pass_time(T8B, H100)
    explicit = rf.pass_time(T8B, H100, 1, 1, 1024, "bf16")
    assert float(default.t_step_s) == float(explicit.t_step_s) and int(default.cost.context) == 1024
    assert int(rf.crossover_tokens(T8B, H100)) == int(rf.crossover_tokens(T8B, H100, 1, 1024, "bf16"))
    s = speedup(H100, T8B, "llama-3.2-1b", 0.8, 3)
    assert float(s.t_base_s) == float(explicit.t_step_s)
    p = predict_speedup(hardware=H100, target=T8B, drafter="llama-3.2-1b", alpha=0.8, gamma=3)
    assert p.t_base_s == float(explicit.t_step_s)


def test_pass_time_flags_a_model_that_does_not_fit():
    one = rf.pass_time("mixtral-8x7b", H100)  # 46.7B weights in bf16: 93 GB on an 80 GB device
    assert not bool(one.fits_in_memory) and float(one.memory_bytes) > 80e9
    assert bool(rf.pass_time("mixtral-8x7b", H100, tp=2).fits_in_memory)
    assert bool(rf.pass_time(T8B, H100).fits_in_memory)
    # the KV cache counts: a huge batch of long contexts does not fit either
    assert not bool(rf.pass_time(T8B, H100, 512, 1, 8192).fits_in_memory)
    # offloaded weights live in host memory
    assert bool(rf.pass_time("mixtral-8x7b", Pricing.of(H100, offload="pcie5-x16")).fits_in_memory)


# -- one round formula --------------------------------------------------------------------------


def test_speedup_and_predict_speedup_price_the_round_with_round_time():
    pr = Pricing.of(H100, engine="compiled")
    rt = round_time(pr, T8B, as_drafter("llama-3.2-1b"), np.arange(1, 6), 4, 2048)
    s = speedup(pr, T8B, "llama-3.2-1b", 0.8, np.arange(1, 6), batch=4, context=2048)
    np.testing.assert_allclose(s.t_round_s, rt.t_round_s, rtol=1e-12)
    assert rt.t_round_host_s == pr.engine.round_s  # type: ignore[union-attr]
    p = predict_speedup(hardware=pr, target=T8B, drafter="llama-3.2-1b", alpha=0.8, gamma=3, batch=4, context=2048)
    assert p.t_round_s == pytest.approx(float(rt.t_round_s[2]), rel=1e-12)
    tree = predict_speedup(hardware=pr, target=T8B, drafter="eagle2", mean_accepted=3.5, batch=4, context=2048)
    rt_tree = round_time(pr, T8B, as_drafter("eagle2"), rf.TREE_PRESETS["eagle2"], 4, 2048)
    assert tree.t_round_s == pytest.approx(float(rt_tree.t_round_s), rel=1e-12)


def test_a_chain_priced_as_a_tree_costs_what_the_chain_costs():
    # a chain is the tree whose nodes are all first children: drafting it level by level and verifying it
    # tree-masked must cost what g draft steps and a causal (g + 1)-token pass cost
    pr = Pricing.of(H100)
    for d in ("llama-3.2-1b", "early-exit:8", "prompt-lookup"):
        drafter = as_drafter(d)
        for g in (1, 4, 9):
            chain = round_time(pr, T8B, drafter, g, 2, 1024)
            tree = round_time(pr, T8B, drafter, Tree.chain(g), 2, 1024)
            assert float(tree.t_draft_s) == pytest.approx(float(chain.t_draft_s), rel=1e-12), (d, g)
            # early exit's remainder pass too: the last drafted token through the first layers, all through the rest
            assert float(tree.t_verify_s) == pytest.approx(float(chain.t_verify_s), rel=1e-12), (d, g)


def test_best_tree_size_prices_each_tree_with_round_time():
    pr = Pricing.of(H100, engine="eager")
    assert pr.round_host_s > 0
    acc = [0.6, 0.2, 0.1]
    choice = best_tree_size(pr, T8B, "llama-68m", acc, 8, 1024, budgets=(4, 16), max_depth=4)
    row = choice.best
    rt = round_time(pr, T8B, as_drafter("llama-68m"), choice.tree, 8, 1024)
    assert row["t_round_s"] == pytest.approx(float(rt.t_round_s), rel=1e-12)
    # the engine's round host time is in it
    assert row["t_round_s"] == pytest.approx(row["t_draft_s"] + row["t_verify_s"] + pr.round_host_s, rel=1e-12)
    assert choice.to_frame() is choice.table


def test_trees_vs_batch_and_compare_policies_take_the_engine():
    acc = [0.6, 0.2, 0.1]
    kw = dict(batches=(1, 64), budgets=(2, 8), max_depth=3, max_gamma=4)
    plain = trees_vs_batch(H100, T8B, "llama-68m", acc, **kw)
    eager = trees_vs_batch(H100, T8B, "llama-68m", acc, engine="eager", **kw)
    assert not np.allclose(plain["tree_speedup"], eager["tree_speedup"])
    same = trees_vs_batch(Pricing.of(H100, engine="eager"), T8B, "llama-68m", acc, **kw)
    np.testing.assert_array_equal(same["tree_speedup"], eager["tree_speedup"])
    curve = [0.9, 0.8, 0.7]
    args = (H100, T8B, "llama-3.2-1b", curve, [rf.HeuristicSchedule(max_gamma=6)])
    a = rf.compare_policies(*args, rounds=500, max_gamma=6)
    b = rf.compare_policies(*args, rounds=500, max_gamma=6, engine="eager")
    assert a["speedup"].iloc[0] != b["speedup"].iloc[0]


def test_recommend_prices_its_crossover_k_with_the_engine_and_tp():
    pr = Pricing.of(H100, engine="compiled", tp=2)
    rec = recommend(pr, T8B, "llama-3.2-1b", 0.7, batch=16, context=2048, gammas=range(0, 6))
    k = int(rf.crossover_tokens(T8B, pr, 16, 2048))
    assert k != int(rf.crossover_tokens(T8B, H100, 16, 2048))  # the engine and TP move K
    assert f"K = {k}" in rec.reason
    assert rec.to_frame().iloc[0]["speedup"] == rec.row["speedup"]


def test_gamma_is_required_where_a_chain_is_priced():
    with pytest.raises(SpecroofError, match="gamma"):
        speedup(H100, T8B, "llama-3.2-1b", 0.8, None)  # type: ignore[arg-type]
    with pytest.raises(SpecroofError, match="gamma .draft tokens per round. is required"):
        predict_speedup(hardware=H100, target=T8B, drafter="llama-3.2-1b", mean_accepted=2.0)
    # drafters that know their shape still need none: EAGLE's tree, an MTP stack's module count
    assert predict_speedup(hardware=H100, target=T8B, drafter="eagle3", mean_accepted=3.0).tree_nodes == 59
    assert predict_speedup(hardware=H100, target=T8B_MTP, drafter="mtp:3", mean_accepted=2.5).gamma == 3


# -- one drafter grammar ------------------------------------------------------------------------


def test_every_form_of_the_grammar_resolves(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 32000,
             "max_position_embeddings": 2048}
        )
    )  # fmt: skip
    cases = {
        "eagle": (Eagle, "eagle"),
        "eagle2": (Eagle, "eagle2"),
        "EAGLE3": (Eagle, "eagle3"),
        "mtp": (MTP, "mtp"),
        "mtp:2": (MTP, "mtp:2"),
        "medusa": (Heads, "medusa"),
        "medusa:4": (Heads, "4 heads"),
        "hydra": (SequentialHeads, "hydra"),
        "model:llama-68m": (DraftModel, "draft llama-68m"),
        "llama-68m": (DraftModel, "draft llama-68m"),
        "early-exit:8": (EarlyExit, "early exit @8"),
        "prompt-lookup": (PromptLookup, "prompt lookup"),
        "block:llama-160m": (ParallelBlock, "block llama-160m"),
        "window:512": (SlidingWindowSelfDraft, "self-draft window 512"),
    }
    for text, (kind, name) in cases.items():
        d = as_drafter(text)
        assert isinstance(d, kind) and d.name == name, text
    assert as_drafter(f"model:{cfg}").spec.n_layers == 2
    assert as_drafter(str(cfg)).spec.n_layers == 2
    assert as_drafter(T8B).spec is T8B and isinstance(as_drafter(None), PromptLookup)
    assert named_drafter is as_drafter
    assert as_drafter("medusa:4").n_heads == 4 and as_drafter("mtp:2").default_gamma == 2


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("spec-magic", "unknown drafter 'spec-magic': use eagle|eagle2"),
        ("early-exit:eight", "early-exit:8"),
        ("early-exit", "early-exit needs a layer count"),
        ("mtp:0", "mtp must be >= 1"),
        ("medusa:x", "medusa:4"),
        ("window:", "window:512"),
        ("block:", "block needs a draft model"),
        ("model:", "model needs a draft model"),
        ("model:no-such-model", "unknown model preset 'no-such-model'"),
    ],
)
def test_a_bad_drafter_is_one_line_naming_the_grammar(text, match):
    with pytest.raises(SpecroofError, match=match):
        as_drafter(text)


def test_every_function_that_names_a_drafter_takes_the_grammar():
    # the issue: tree --draft eagle2 / best_tree_size(..., "eagle2") failed with "unknown model preset",
    # speedup(hw, target, "eagle", ...) failed while predict_speedup(drafter="eagle") worked
    acc = [0.6, 0.2, 0.1]
    assert best_tree_size(H100, T8B, "eagle2", acc, budgets=(4, 8), max_depth=3).best["speedup"] > 0
    assert float(speedup(H100, T8B, "eagle", 0.8, 3).speedup) > 1
    assert float(speedup(H100, T8B_MTP, "mtp:2", 0.8, 2).speedup) > 1
    table = rf.plan(H100, T8B, ["eagle3", "medusa", "window:256"], 0.7, gammas=range(0, 4))
    assert {"eagle3", "medusa", "self-draft window 256"} <= set(table["strategy"])
    assert trees_vs_batch(H100, T8B, "hydra", acc, batches=(1,), budgets=(4,), max_depth=2, max_gamma=2).shape[0] == 1
    an_mtp_stack_holds_its_modules = as_drafter("mtp:3").extra_memory_bytes(
        rf.drafters.Ctx(T8B_MTP, Pricing.of(H100)), 1, 0
    )
    assert float(an_mtp_stack_holds_its_modules) == pytest.approx(
        3 * float(as_drafter("mtp").extra_memory_bytes(rf.drafters.Ctx(T8B_MTP, Pricing.of(H100)), 1, 0))
    )


# -- the notebook face --------------------------------------------------------------------------


def test_the_top_level_api_and_to_frame():
    for name in ("plan", "recommend", "speedup", "predict_speedup", "Tree", "optimal_tree", "best_tree_size",
                 "Pricing", "as_drafter", "Eagle", "DraftModel", "IIDAcceptance", "SiblingRankAcceptance",
                 "round_time", "trees_vs_batch", "compare_policies", "PerToken", "MeanAccepted",
                 "parse_acceptance"):  # fmt: skip
        assert hasattr(rf, name), name
    pr = rf.Pricing.of(H100)
    st = rf.pass_time(T8B, pr, [[1], [4]], 1, [512, 1024, 2048])
    frame = st.to_frame()
    assert len(frame) == 6 and {"batch", "context", "t_step_s", "fits_in_memory"} <= set(frame.columns)
    s = rf.speedup(pr, T8B, "eagle3", 0.8, [1, 2, 3]).to_frame()
    assert len(s) == 3 and list(s["gamma"]) == [1, 2, 3] and (s["drafter"] == "eagle3").all()
    p = rf.predict_speedup(hardware=pr, target=T8B, drafter="medusa", mean_accepted=2.3).to_frame()
    assert len(p) == 1 and p["tree_nodes"].iloc[0] == 63
    opt = rf.optimal_tree(SiblingRankAcceptance([0.6, 0.2]), 8, 4)
    assert isinstance(opt.tree, rf.Tree)
    assert optimal_tree is rf.optimal_tree


def test_a_plan_on_a_pricing_builds_no_time_model(monkeypatch):
    # the issue: every pass_time rebuilt its TimeModel; with a Pricing the plan, its recommendation, the tree
    # sizing and a prediction reuse the one the Pricing holds
    pr = Pricing.of(H100, engine="compiled", tp=2)
    assert pr.time_model is not None
    built = []
    original = rf.Hardware.time_model

    def counting(self, *args, **kwargs):
        built.append(self.id)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(rf.Hardware, "time_model", counting)
    table = rf.plan(pr, T8B, ["llama-3.2-1b", "eagle3"], 0.7, batch=[1, 8], context=[512, 2048], gammas=range(0, 5))
    recommend(pr, T8B, ["llama-3.2-1b"], 0.7, batch=8, context=2048, table=table)
    best_tree_size(pr, T8B, "llama-68m", [0.6, 0.2], budgets=(2, 4), max_depth=2)
    predict_speedup(hardware=pr, target=T8B, drafter="eagle3", mean_accepted=3.0)
    assert built == []
    rf.pass_time(
        T8B, H100, engine="compiled", tp=4, efficiency=True
    )  # a new combination of options builds one (tp must divide the 32 heads)
    assert built == [rf.load_hardware(H100).id]


def test_a_profile_rewritten_on_disk_gets_a_new_pricing(tmp_path):
    import os
    from pathlib import Path

    src = Path(rf.load_hardware(H100).path or "")
    path = tmp_path / "gpu.toml"
    path.write_text(src.read_text())
    first = Pricing.of(str(path))
    assert Pricing.of(str(path)) is first
    text = src.read_text().replace("bandwidth_GB_per_s = 3350", "bandwidth_GB_per_s = 1675", 1)
    assert text != src.read_text()
    path.write_text(text)
    os.utime(path, ns=(1, 1))  # a new modification time whatever the clock's resolution
    second = Pricing.of(str(path))
    assert second.hardware.bandwidth_bytes_per_s == first.hardware.bandwidth_bytes_per_s / 2
