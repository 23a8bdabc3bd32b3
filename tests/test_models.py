"""The measurement model: cache, ragged batches, tree masks and commit, Hugging Face parity (fp32, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from measure.models import Transformer  # noqa: E402
from roofline import SpecroofError  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402
from roofline.speculation.trees import Tree  # noqa: E402

SPEC = ModelSpec("tiny", 2, 64, 4, 2, 16, 128, 97, max_context=256)
ATOL = 2e-5


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Transformer(SPEC, dtype="fp32")
    m.eval()
    return m


def fresh(model, batch=1, seq=64):
    model.setup_cache(batch, seq)
    return model


@torch.no_grad()
def causal_logits(model, tokens):
    """Logits of a plain causal pass over ``tokens`` (1-D) from an empty cache."""
    fresh(model, 1, 64)
    return model(torch.as_tensor(tokens).view(1, -1))[0]


@torch.no_grad()
def test_incremental_passes_equal_one_full_pass(model):
    toks = torch.randint(0, 97, (1, 20), generator=torch.Generator().manual_seed(1))
    full = causal_logits(model, toks[0])
    fresh(model)
    parts = []
    for a, b in ((0, 7), (7, 8), (8, 15), (15, 20)):
        parts.append(model(toks[:, a:b])[0])
        model.advance(b - a)
    torch.testing.assert_close(torch.cat(parts), full, atol=ATOL, rtol=0)


@torch.no_grad()
def test_rollback_then_recompute(model):
    g = torch.Generator().manual_seed(2)
    toks = torch.randint(0, 97, (1, 12), generator=g)
    fresh(model)
    model(toks[:, :10])
    model.advance(10)
    model(torch.randint(0, 97, (1, 5), generator=g))  # rejected drafts, written then abandoned
    model.advance(5)
    model.cache.rollback([10])
    out = model(toks[:, 10:12])[0]
    torch.testing.assert_close(out, causal_logits(model, toks[0])[10:12], atol=ATOL, rtol=0)


@torch.no_grad()
def test_ragged_batch_matches_each_sequence_alone(model):
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 97, (n,), generator=g) for n in (5, 11, 8)]
    new = torch.randint(0, 97, (3, 4), generator=g)
    fresh(model, 3, 64)
    lengths = [len(s) for s in seqs]
    # prefill each sequence to its own length with one padded pass per sequence length
    for b, s in enumerate(seqs):
        model.cache.rollback([0] * 3)
        batch = torch.zeros(3, len(s), dtype=torch.long)
        batch[b] = s
        model(batch)  # writes every row; only row b's prefix is kept below
        saved = [(k[b].clone(), v[b].clone()) for k, v in zip(model.cache.k, model.cache.v, strict=True)]
        for (k, v), (sk, sv) in zip(zip(model.cache.k, model.cache.v, strict=True), saved, strict=True):
            k[b].copy_(sk)
            v[b].copy_(sv)
        if b == 0:
            store = [[None] * 3 for _ in model.cache.k]
        for i, (sk, sv) in enumerate(saved):
            store[i][b] = (sk, sv)
    for i in range(len(model.cache.k)):
        for b in range(3):
            model.cache.k[i][b].copy_(store[i][b][0])
            model.cache.v[i][b].copy_(store[i][b][1])
    model.cache.rollback(lengths)
    out = model(new)
    for b, s in enumerate(seqs):
        want = causal_logits(model, torch.cat([s, new[b]]))[len(s) :]
        torch.testing.assert_close(out[b], want, atol=ATOL, rtol=0)


@torch.no_grad()
def test_tree_pass_gives_each_node_its_paths_logits(model):
    g = torch.Generator().manual_seed(4)
    prefix = torch.randint(0, 97, (6,), generator=g)
    tree = Tree([-1, -1, 0, 0, 1, 2, 2])
    node_tokens = torch.randint(0, 97, (tree.n_nodes,), generator=g)
    fresh(model)
    model(prefix.view(1, -1))
    model.advance(len(prefix))
    out = model(node_tokens.view(1, -1), tree)[0]
    for i, path in enumerate(tree.node_paths()):
        want = causal_logits(model, torch.cat([prefix, node_tokens[path]]))[-1]
        torch.testing.assert_close(out[i], want, atol=ATOL, rtol=0)


@torch.no_grad()
def test_commit_of_an_accepted_tree_path(model):
    g = torch.Generator().manual_seed(5)
    prefix = torch.randint(0, 97, (2, 6), generator=g)
    tree = Tree([-1, -1, 0, 1, 3])
    node_tokens = torch.randint(0, 97, (2, tree.n_nodes), generator=g)
    fresh(model, 2, 64)
    model(prefix)
    model.advance(6)
    model(node_tokens, tree)
    paths = torch.tensor([[1, 3, 4], [0, 2, -1]])  # sequence 0 accepts 3 nodes, sequence 1 two
    n_acc = torch.tensor([3, 2])
    model.cache.commit_paths(paths, n_acc)
    assert model.cache.lengths[:2].tolist() == [9, 8]
    nxt = torch.randint(0, 97, (2, 1), generator=g)
    out = model(nxt)
    for b in range(2):
        kept = node_tokens[b, paths[b, : n_acc[b]]]
        want = causal_logits(model, torch.cat([prefix[b], kept, nxt[b]]))[-1]
        torch.testing.assert_close(out[b, 0], want, atol=ATOL, rtol=0)


@torch.no_grad()
def test_branching_factor_one_tree_equals_the_chain(model):
    toks = torch.randint(0, 97, (1, 5), generator=torch.Generator().manual_seed(6))
    fresh(model)
    a = model(toks, Tree.chain(5))
    b = model(toks)
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_cache_errors(model):
    fresh(model, 1, 8)
    with pytest.raises(SpecroofError, match="exceed the cache's max_seq 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(SpecroofError, match="batch 2 exceeds"):
        model(torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(SpecroofError, match="tree has 2 nodes but 3 tokens"):
        model(torch.zeros(1, 3, dtype=torch.long), Tree([-1, 0]))
    with pytest.raises(SpecroofError, match="abstract"):
        Transformer(ModelSpec.from_params(1e6))


def test_moe_layers_run_and_route():
    spec = ModelSpec(
        "tiny-moe",
        2,
        32,
        4,
        4,
        8,
        0,
        50,
        max_context=64,
        n_experts=4,
        experts_per_token=2,
        d_ff_expert=48,
        n_shared_experts=1,
    )
    torch.manual_seed(0)
    m = Transformer(spec, dtype="fp32")
    m.setup_cache(2, 16)
    out = m(torch.randint(0, 50, (2, 5)))
    assert out.shape == (2, 5, 50) and torch.isfinite(out).all()


# -- Hugging Face parity ---------------------------------------------------------------------------------


def _hf_model(kind: str):
    transformers = pytest.importorskip("transformers")
    common = dict(
        vocab_size=101,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
    )
    if kind == "llama":
        cfg = transformers.LlamaConfig(**common, tie_word_embeddings=False)
        return transformers.LlamaForCausalLM(cfg)
    if kind == "llama3-rope":
        cfg = transformers.LlamaConfig(
            **common,
            tie_word_embeddings=True,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
        return transformers.LlamaForCausalLM(cfg)
    if kind == "qwen2":
        cfg = transformers.Qwen2Config(**common, tie_word_embeddings=True)
        return transformers.Qwen2ForCausalLM(cfg)
    cfg = transformers.MistralConfig(**common, sliding_window=None)
    return transformers.MistralForCausalLM(cfg)


@pytest.mark.parametrize("kind", ["llama", "llama3-rope", "qwen2", "mistral"])
def test_logits_match_transformers(kind, tmp_path):
    torch.manual_seed(0)
    hf = _hf_model(kind).float().eval()
    if kind == "qwen2":  # random biases so the qkv bias path is exercised
        with torch.no_grad():
            for layer in hf.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.1)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    ours = Transformer.from_hf(tmp_path, dtype="fp32")
    ids = torch.randint(0, 101, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(ids).logits
        ours.setup_cache(2, 64)
        got = ours(ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_from_hf_errors(tmp_path):
    with pytest.raises(SpecroofError, match="no config.json"):
        Transformer.from_hf(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(SpecroofError, match="supports llama, mistral and qwen2"):
        Transformer.from_hf(tmp_path)


def test_weight_bytes_excludes_the_embedding(model):
    emb = SPEC.vocab_size * SPEC.d_model * 4
    assert model.weight_bytes(include_embedding=True) - model.weight_bytes() == emb
    assert np.isclose(model.weight_bytes(include_embedding=True), SPEC.total_params * 4)
