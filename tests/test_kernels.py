"""Kernels fit for the roofline (issue 53): the attention mask built once per pass (expanded for grouped-query
attention, additive) gives exactly what SDPA computed from a bool mask in every layer; the profiler's count of
kernels per layer; and what graphs remove, timed on one static pass captured and uncaptured."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from measure import microbench  # noqa: E402
from measure.models import Transformer, attend, attention_mask, context_bucket  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402
from roofline.speculation.trees import Tree  # noqa: E402

SPEC = ModelSpec("gqa", 2, 64, 4, 2, 16, 128, 50, max_context=1024)
TREE = Tree([-1, -1, 0, 0, 1, 2])


def _model(layers: int = 2) -> Transformer:
    torch.manual_seed(0)
    return Transformer(SPEC.replace(n_layers=layers), dtype="fp32", init_std=0.08, device="cpu", matvec=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["sdpa", "matmul"])
def test_the_additive_mask_gives_exactly_what_the_bool_mask_gave(dtype, kind):
    g = torch.Generator().manual_seed(1)
    B, kv, group, n, keys, hd = 2, 2, 2, 5, 37, 16
    q = torch.randn(B, kv, group * n, hd, generator=g).to(dtype)
    k = torch.randn(B, kv, keys, hd, generator=g).to(dtype)
    v = torch.randn(B, kv, keys, hd, generator=g).to(dtype)
    visible = torch.rand(B, 1, n, keys, generator=g) < 0.7
    visible[..., 0] = True  # every query sees a key
    # what the layer did before: the bool mask expanded for the g query heads of a KV head, on each call
    old = visible.unsqueeze(2).expand(B, 1, group, n, keys).reshape(B, 1, group * n, keys)
    new = attention_mask(visible, group, dtype)
    assert new.shape == old.shape and new.dtype == dtype
    assert torch.equal(attend(kind, q, k, v, old), attend(kind, q, k, v, new))
    if kind == "sdpa":
        assert torch.equal(F.scaled_dot_product_attention(q, k, v, attn_mask=old), attend(kind, q, k, v, new))


def _layer_ops(model: Transformer, n: int, tree: Tree | None = None) -> Counter:
    """Every ATen op (nested ones too) the second layer of a static pass adds to the first alone."""
    from torch.profiler import ProfilerActivity, profile

    model.setup_cache(2, 100 + n)
    model.cache.rollback([100, 100])
    tokens = torch.randint(0, 50, (2, n), generator=torch.Generator().manual_seed(0))
    lengths = torch.full((2,), 100)
    among = None if tree is None else torch.as_tensor(tree.ancestors_matrix())
    offsets = None if tree is None else torch.as_tensor(tree.depths - 1)
    counts = []
    for layers in (1, 2):
        with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
            model.forward_static(tokens, lengths, context_bucket(100 + n, 100 + n), among, offsets, layers)
        counts.append(Counter(e.name for e in prof.events()))
    return counts[1] - counts[0]


def test_no_layer_builds_converts_or_expands_a_mask():
    m = _model()
    for n, tree in ((4, None), (6, TREE), (1, None)):
        ops = _layer_ops(m, n, tree)
        assert ops["aten::scaled_dot_product_attention"] == 1
        # SDPA turned a bool mask into an additive one (a negation and a select) in every layer, and the layer's
        # expansion for GQA copied it: the pass does both once now
        assert not {"aten::logical_not", "aten::bitwise_not", "aten::where", "aten::masked_fill"} & set(ops), ops


def test_kernels_per_layer_do_not_depend_on_the_depth_and_a_tree_costs_a_chain_s():
    two, three = _model(2), _model(3)
    for n in (1, 4):
        a, b = microbench.pass_kernels(two, 1, n, 100), microbench.pass_kernels(three, 1, n, 100)
        assert a["static_per_layer"] == b["static_per_layer"] > 0
        assert a["eager_per_layer"] == b["eager_per_layer"] > 0
        assert a["kv_slots"] == context_bucket(100 + n, 100 + n)
    chain, tree = microbench.pass_kernels(two, 1, 6, 100), microbench.pass_kernels(two, 1, 6, 100, tree=TREE)
    assert chain["static_per_layer"] == tree["static_per_layer"]  # the tree's mask is built outside the layers
    with pytest.raises(Exception, match="at least two layers"):
        microbench.pass_kernels(_model(1), 1, 1, 10)


def test_launch_overhead_times_one_static_pass_both_ways(monkeypatch):
    """Both legs run forward_static over the same bucket (never the eager path with its unmasked attention over the
    exact key length); on the CPU neither is captured, so the same calls are timed twice."""
    m = _model()
    calls: list[tuple] = []
    static, eager = Transformer.forward_static, Transformer._layers

    def spy_static(self, tokens, lengths, bucket, *a, **k):
        calls.append((tuple(tokens.shape), bucket))
        return static(self, tokens, lengths, bucket, *a, **k)

    eager_calls = []

    def spy_layers(self, *a, **k):
        eager_calls.append(1)
        return eager(self, *a, **k)

    monkeypatch.setattr(Transformer, "forward_static", spy_static)
    df = microbench.launch_overhead(m, [(1, 1, 40), (2, 4, 40)], repeats=2, warmup=1)
    assert list(df["kv_slots"]) == [context_bucket(41, 44), context_bucket(44, 44)]
    assert (df["kernels"] > 0).all() and df["t_uncaptured_s"].gt(0).all() and df["t_graph_s"].gt(0).all()
    assert set(calls) == {((1, 1), 44), ((2, 4), 44)}  # the batch is padded: 1 runs at 1, 2 at 2
    monkeypatch.setattr(Transformer, "_layers", spy_layers)
    n_static = len(calls)
    microbench.launch_overhead(m, [(1, 1, 40)], repeats=2, warmup=1)
    # every pass of both legs went through forward_static, none through forward's eager masks
    assert len(eager_calls) == len(calls) - n_static > 0
    assert m.runner is None and m.cache is None
