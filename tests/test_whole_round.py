"""Every drafter priced for its whole round (issue 55, Build 5; docs/cost-model.md, section 51).

Early exit's verify pass is LayerSkip's ``forward_remainder``: the last drafted token through the first layers,
then every token through the rest. A chain priced as a chain and as the chain-shaped tree is the same round, and a
drafter that drafts with the target's own weights cannot pay far past the ridge, where a round's FLOPs decide.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import roofline as rf
from roofline.costing.pricing import Pricing
from roofline.speculation.drafters import Eagle, EarlyExit, SlidingWindowSelfDraft, as_drafter, round_time
from roofline.speculation.trees import Tree

H100 = "h100-sxm-80gb"
T8B = "llama-3.1-8b"
#: MTP-style heads of Llama-3.1-8B's shape: the preset ships no MTP module (and is refused), a spec that does not say
#: how many it ships is priced with one head per draft step
MTP_STYLE = dataclasses.replace(rf.get_model(T8B), mtp_modules=None)
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

#: every kind of drafter in the grammar. EAGLE-2/3 with top_k 1: their tree mode expands top_k nodes at every level
#: whatever the verified tree keeps (section 13), so only at top_k 1 is their chain-shaped tree drafted as a chain
DRAFTERS = {
    "model:llama-3.2-1b": as_drafter("model:llama-3.2-1b"),
    "block:llama-160m": as_drafter("block:llama-160m"),
    "eagle": as_drafter("eagle"),
    "eagle3 top-1": Eagle(3, top_k=1),
    "mtp": as_drafter("mtp"),
    "medusa": as_drafter("medusa"),
    "hydra": as_drafter("hydra"),
    "prompt-lookup": as_drafter("prompt-lookup"),
    "window:256": as_drafter("window:256"),
    "early-exit:1": EarlyExit(1),
    "early-exit:8": EarlyExit(8),
    "early-exit:31": EarlyExit(31),
    "early-exit:8 recompute": EarlyExit(8, reuse_kv=False),
}
PRICINGS = {
    "roofline": Pricing.of(rf.load_hardware(H100)),
    "vllm tp2": Pricing.of(rf.load_hardware(H100), engine="vllm", tp=2),
    "hf": Pricing.of(rf.load_hardware(H100), engine="hf"),
}


def test_early_exit_speedup_equals_its_chain_shaped_tree():
    # the case: at batch 1 KV reuse saves almost nothing, so reuse and recompute price within a hair
    chain = float(rf.speedup(H100, T8B, "early-exit:8", 1.0, 1, batch=1).speedup)
    tree = rf.predict_speedup(hardware=H100, target=T8B, drafter="early-exit:8", mean_accepted=2.0, tree=Tree.chain(1))
    recompute = float(rf.speedup(H100, T8B, EarlyExit(8, reuse_kv=False), 1.0, 1, batch=1).speedup)
    assert tree.speedup == pytest.approx(chain, rel=0.01)
    assert chain == pytest.approx(recompute, rel=0.01)
    assert chain >= recompute  # reuse saves the first layers' KV reads and FLOPs, never adds


def test_the_remainder_pass_reads_every_layer_once():
    # memory-bound: the round's verify reads every layer's weights, as a full (gamma + 1)-token pass does
    pr = Pricing.of(rf.load_hardware(H100))
    for g in (1, 4):
        reuse = float(round_time(pr, T8B, EarlyExit(8), g, 1, 1024).t_verify_s)
        full = float(round_time(pr, T8B, EarlyExit(8, reuse_kv=False), g, 1, 1024).t_verify_s)
        rest = float(rf.pass_time(rf.get_model(T8B).replace(n_layers=24), H100, 1, g + 1, 1024).t_step_s)
        assert rest < reuse <= full
        assert reuse == pytest.approx(full, rel=0.01)


@pytest.mark.parametrize("name", sorted(DRAFTERS))
@SETTINGS
@given(
    pricing=st.sampled_from(sorted(PRICINGS)),
    gamma=st.integers(1, 4),
    batch=st.sampled_from([1, 3, 64, 512, 4096]),
    context=st.integers(1, 2000),  # llama-160m, the block drafter, holds 2048 tokens
)
def test_every_drafter_prices_a_chain_as_its_chain_shaped_tree(name, pricing, gamma, batch, context):
    pr, d = PRICINGS[pricing], DRAFTERS[name]
    target = MTP_STYLE if name == "mtp" else T8B
    chain = round_time(pr, target, d, gamma, batch, context)
    tree = round_time(pr, target, d, Tree.chain(gamma), batch, context)
    assert float(tree.t_round_s) == pytest.approx(float(chain.t_round_s), rel=0.01), (name, pricing)


SELF_DRAFTERS = [EarlyExit(1), EarlyExit(8), EarlyExit(16), EarlyExit(31), SlidingWindowSelfDraft(16)]


@SETTINGS
@given(
    drafter=st.sampled_from(SELF_DRAFTERS),
    alpha=st.floats(0.0, 1.0),
    gamma=st.integers(1, 8),
    batch=st.sampled_from([2048, 4096, 8192]),
    context=st.integers(1, 64),
    engine=st.sampled_from([None, "vllm"]),
)
def test_a_self_drafter_never_pays_far_past_the_ridge(drafter, alpha, gamma, batch, context, engine):
    # past the ridge a round costs its FLOPs: gamma + 1 tokens through every layer of the target's own weights,
    # for at most gamma + 1 tokens (no drafter that runs the target's weights can do better than plain decoding)
    s = rf.speedup(H100, T8B, drafter, alpha, gamma, batch=batch, context=context, engine=engine)
    assert float(s.speedup) <= 1.01


def test_no_self_drafter_exceeds_one_at_batch_4096_context_1():
    for d in ("early-exit:8", "early-exit:16", "early-exit:31", "window:256"):
        for g in (1, 4, 8):
            assert float(rf.speedup(H100, T8B, d, 1.0, g, batch=4096, context=1).speedup) <= 1.01, (d, g)


def test_early_exit_tree_verify_broadcasts_over_a_serving_grid():
    # the serving price tables ask the tree verify pass over a (batch, context) grid at once
    pr = Pricing.of(rf.load_hardware(H100))
    ctx = rf.drafters.Ctx.of(rf.get_model(T8B), pr)
    tree = rf.TREE_PRESETS["eagle2"]
    grid = EarlyExit(8).tree_verify_time(ctx, tree, np.array([[1], [8]]), np.array([[128, 1024]]))
    assert grid.shape == (2, 2)
    one = float(round_time(pr, T8B, EarlyExit(8), tree, 8, 1024).t_verify_s)
    assert grid[1, 1] == pytest.approx(one, rel=1e-9)
    assert EarlyExit(8, reuse_kv=False).tree_verify_time(ctx, tree, 1, 1024) is None


def test_the_harness_prices_what_it_runs_every_layer_and_agrees_at_batch_one():
    # specroof's harness verifies early exit with the whole target over gamma + 1 tokens (it shares the target's
    # cache and recomputes the first layers): its cost model is the recompute, which this section left unchanged
    from measure.decode import cost_model_of

    harness = cost_model_of(8)
    assert harness == EarlyExit(8, reuse_kv=False)
    pr = Pricing.of(rf.load_hardware(H100))
    for g in (1, 4):
        ran = round_time(pr, T8B, harness, g, 1, 1024)
        full = rf.pass_time(T8B, pr, 1, g + 1, 1024).t_step_s
        assert float(ran.t_verify_s) == pytest.approx(float(full), rel=1e-12)
        reuse = round_time(pr, T8B, EarlyExit(8), g, 1, 1024)
        assert float(reuse.t_round_s) == pytest.approx(float(ran.t_round_s), rel=0.01)
