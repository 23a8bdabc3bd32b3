"""Hydra priced as built (Hydra++: a prefix decoder layer, four 4-layer MLP heads in turn, the proposal loop's kernels)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.engine import load_engine
from roofline.costing.pricing import Pricing
from roofline.evidence.published import validation_table
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.drafters import (
    MEDUSA_TREE_PATHS,
    TREE_PRESETS,
    Ctx,
    Heads,
    Hydra,
    as_drafter,
    default_tree,
    round_time,
)
from roofline.speculation.predict import predict_speedup
from roofline.speculation.trees import Tree

V7 = get_model("vicuna-7b")
D, VOCAB = V7.d_model, V7.vocab_size


def test_the_grammar_gives_hydra_plus_plus_with_its_own_tree():
    h = as_drafter("hydra")
    assert isinstance(h, Hydra) and (h.n_heads, h.layers, h.name) == (4, 4, "hydra")
    tree = default_tree(h)
    # hydra_choices.py's mc_sim_7b_63 is the same list as Medusa's: 63 nodes over 4 levels, one per head
    assert tree is TREE_PRESETS["hydra"] and tree.n_nodes == 63 and tree.depth == 4
    assert Tree.from_paths(MEDUSA_TREE_PATHS).parents.tolist() == tree.parents.tolist()
    p = predict_speedup(hardware="a100-sxm-80gb", target="vicuna-7b", drafter="hydra", mean_accepted=3.0)
    assert p.tree_nodes == 63


def test_head_weights_follow_the_source():
    h = Hydra()
    # head i: ResBlock(d, i + 1) is two (i + 2) d x d matrices; the 3 further blocks are one shared d x d module
    # applied 3 times; then the head's own d x vocab projection
    assert h.head_read_params(V7, 0) == 7 * D * D + D * VOCAB
    assert h.head_read_params(V7, 3) == 13 * D * D + D * VOCAB
    assert h.head_params(V7) == (5 + 7 + 9 + 11) * D * D + 4 * D * VOCAB
    assert h.head_kernels == 14
    pr = Pricing.of("a100-sxm-80gb", dtype="fp16")
    ctx = Ctx(V7, pr)
    prefix = V7.replace(n_layers=1)
    expected = (prefix.total_params - prefix.lm_head_params + h.head_params(V7)) * 2
    kv_one_layer = 513 * 2 * V7.n_kv_heads * V7.head_dim * 2  # the context and the pending token, one layer
    assert float(h.extra_memory_bytes(ctx, 1, 512)) == pytest.approx(expected + kv_one_layer, rel=1e-6)


def _eager(host_launch_s: float) -> Pricing:
    eng = dataclasses.replace(load_engine("hf"), host_launch_s=host_launch_s)
    return Pricing.of("a100-sxm-80gb", engine=eng, dtype="fp16")


def test_an_issue_bound_draft_is_the_kernel_count_from_the_source():
    """With a one-second kernel the draft is its kernels: 52 for the prefix segment, 120 for the heads of mc_sim_7b_63."""
    pr = _eager(1.0)
    ctx = Ctx(V7, pr)
    e = pr.engine
    k = e.launches
    layer = 2 * k["norm"] + k["qkv"] + k["rotary"] + k["kv_update"] + k["attention"] + k["out_proj"]
    layer += 3 * k["mlp_matrix"] + k["activation"] + 2 * k["residual"]
    prefix = layer + k["norm"] + 3  # the final norm; argmax, the read, the first embedding
    # nodes with children per level: root 1, 10, 10, 1 (22 top-k and cat); 5 of them gather children's embeddings
    heads = 4 * 14 + 2 * 22 + 3 * 5 + 3 + 2
    t = Hydra().tree_draft_time_of(ctx, TREE_PRESETS["hydra"], 1, 512)
    assert t == pytest.approx(prefix + heads, rel=1e-6)
    # a chain of 2: rows 1 and 1, one gather (the root's child is expanded)
    chain = float(Hydra().draft_time(ctx, np.asarray(2), 1, 512))
    assert chain == pytest.approx(prefix + 2 * 14 + 2 * 2 + 3 * 1 + 1 + 2, rel=1e-6)


def test_on_the_roofline_the_draft_streams_the_heads_and_the_prefix_layer():
    pr = Pricing.of("a100-sxm-80gb", dtype="fp16")
    ctx = Ctx(V7, pr)
    h = Hydra()
    t = h.tree_draft_time_of(ctx, TREE_PRESETS["hydra"], 1, 512)
    prefix = V7.replace(n_layers=1)
    streamed = sum(h.head_read_params(V7, i) for i in range(4)) + prefix.total_params - 2 * prefix.lm_head_params
    # memory bound at these sizes: about the time to stream those weights (the prefix's KV adds a little)
    ref = float(ctx.pass_s(ModelSpec.from_params(streamed), 1, 1, 0))
    assert ref < t < 1.1 * ref
    # and more than Medusa's one pass of five smaller heads
    medusa = Heads(5, name="medusa").tree_draft_time(ctx, TREE_PRESETS["medusa"].widths.tolist(), 1, 512)
    assert t > 1.3 * medusa


def test_which_nodes_have_children_sets_the_rows():
    """The heads run over the nodes that have children, each with its own top-k: a bushy level costs more than the
    same widths under one node (issued kernels under an eager engine; rows of compute at a large batch)."""
    pr = Pricing.of("a100-sxm-80gb", engine="eager", dtype="fp16")
    ctx = Ctx(V7, pr)
    spread = Tree([-1, -1, -1, 0, 1, 2])  # three parents at level 1
    one = Tree([-1, -1, -1, 0, 0, 0])  # one parent at level 1
    h = Hydra()
    assert h.tree_draft_time_of(ctx, spread, 1, 512) > h.tree_draft_time_of(ctx, one, 1, 512)
    roof = Ctx(V7, Pricing.of("a100-sxm-80gb", dtype="fp16"))
    assert h.tree_draft_time_of(roof, spread, 512, 512) > h.tree_draft_time_of(roof, one, 512, 512)
    rt = round_time(pr, V7, h, one, 1, 512)
    assert float(rt.t_draft_s) == pytest.approx(h.tree_draft_time_of(ctx, one, 1, 512))


def test_chains_broadcast_and_depth_is_bounded_by_the_heads():
    pr = Pricing.of("a100-sxm-80gb", engine="eager", dtype="fp16")
    ctx = Ctx(V7, pr)
    h = Hydra()
    t = h.draft_time(ctx, np.array([0, 1, 2, 4]), np.array([[1], [4]]), 512)
    assert t.shape == (2, 4) and np.all(t[:, 0] == 0) and np.all(np.diff(t, axis=1) > 0)
    with pytest.raises(SpecroofError, match="4 heads"):
        h.draft_time(ctx, np.asarray(5), 1, 512)
    with pytest.raises(SpecroofError, match="depth must lie in"):
        h.tree_draft_time_of(ctx, Tree.chain(5), 1, 512)
    with pytest.raises(SpecroofError, match="hydra heads"):
        Hydra(n_heads=0)


def test_the_spec_bench_calibration_row_is_within_fifteen_percent():
    t = validation_table()
    row = t[(t["source"] == "spec_bench_a100") & t["setup"].str.contains("hydra")]
    assert len(row) == 1
    assert abs(float(row["error_engine"].iloc[0])) <= 0.15
