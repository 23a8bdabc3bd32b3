"""Mamba-2 hybrids by name: IBM Granite 4.0-H and NVIDIA Nemotron-H (docs/cost-model.md, section 52). Their presets'
sizes against the published ones, Nemotron-H's single-block layers (a Mamba-2 mixer, attention, an MLP or a mixture
of experts, each alone) counted by hand, its config.json read as the preset, the fields it cannot price refused, and
the state checkpoint a verify pays priced by the one rule every hybrid shares."""

from __future__ import annotations

import json

import numpy as np
import pytest

import roofline as rf
from roofline.core.errors import SpecroofError
from roofline.costing.passtime import pass_time
from roofline.passes.cost import forward_cost
from roofline.passes.model import HF_IDS, PRESETS, ModelSpec, get_model
from roofline.speculation.drafters import MTP, Eagle
from roofline.speculation.speculative import checkpoint_seconds
from specroof.cli import main

#: each preset's parameters (embeddings included, tied ones once) against the size its model card publishes, and the
#: MoE ones' active parameters. Granite: "3B", "7B" / "1B active", "32B" / "9B active" (the cards' tables); these
#: counts are 3.19B, 6.94B / 1.47B and 32.21B / 8.80B: the H-Micro's 3.19B and the H-Tiny's 1.47B active (1.31B
#: without the tied embedding) are what the cards round to 3B and 1B, so those two get the rounding as their band.
#: Nemotron-H: 8B, 47B, 56B (the Megatron-Bridge providers' names), Nano 9B v2 "9B", Nemotron 3 Nano "31.6B
#: parameters ... 3.2B activated per forward pass (3.6B including embeddings)" (its technical report, arXiv 2512.20848).
SIZES = {
    "granite-4.0-h-small": ((32e9, 0.03), (9e9, 0.03)),
    "granite-4.0-h-tiny": ((7e9, 0.03), (1.25e9, 0.2)),
    "granite-4.0-h-micro": ((3.15e9, 0.05), None),
    "nemotron-h-8b": ((8e9, 0.03), None),
    "nemotron-h-47b": ((47e9, 0.03), None),
    "nemotron-h-56b": ((56e9, 0.03), None),
    "nemotron-nano-9b-v2": ((9e9, 0.03), None),
    "nemotron-3-nano-30b-a3b": ((31.6e9, 0.01), (3.6e9, 0.03)),
}

#: NVIDIA-Nemotron-3-Nano-30B-A3B-BF16's config.json (the fields the cost model reads, as public copies give them)
NANO3 = {
    "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "hidden_size": 2688,
    "num_hidden_layers": 52, "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 1856,
    "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
    "expand": 2, "chunk_size": 128, "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
    "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 3712, "n_group": 1, "topk_group": 1,
    "norm_topk_prob": True, "routed_scaling_factor": 2.5, "mamba_ssm_cache_dtype": "float32",
    "max_position_embeddings": 262144, "mlp_bias": False, "mlp_hidden_act": "relu2", "mamba_hidden_act": "silu",
    "use_bias": False, "use_conv_bias": True, "attention_bias": False, "sliding_window": None,
    "tie_word_embeddings": False, "vocab_size": 131072, "torch_dtype": "bfloat16",
}  # fmt: skip


def _mamba2_layer(d: int, h: int, p: int, g: int, n: int, k: int) -> int:
    """One Mamba-2 mixer's weights as vLLM's MambaMixer2 holds them: in_proj d x (z, x, B, C, dt), the depthwise conv
    and its bias, dt_bias, A, D, the gated norm over h p and out_proj."""
    conv = h * p + 2 * g * n
    return d * (h * p + conv + h) + conv * k + conv + 3 * h + h * p + h * p * d


@pytest.mark.parametrize("name", sorted(SIZES))
def test_each_preset_has_its_published_size(name):
    m = get_model(name)
    (total, rel), active = SIZES[name]
    assert m.total_params == pytest.approx(total, rel=rel)
    if active is None:
        assert not m.is_moe and m.active_params == m.total_params
    else:
        assert m.is_moe and m.active_params == pytest.approx(active[0], rel=active[1])
    assert m.linear_kind == "mamba2" and m.mtp_modules == 0  # none of these checkpoints ships an MTP layer
    assert HF_IDS[name] and all(get_model(i) is m for i in HF_IDS[name])


def test_granite_presets_read_as_their_config_json():
    small, tiny, micro = (get_model(f"granite-4.0-h-{s}") for s in ("small", "tiny", "micro"))
    for m in (small, tiny, micro):  # 40 layers: 4 attention, 36 Mamba-2, each followed by an MLP or a mixture
        assert (m.n_layers, m.n_linear_layers, m.n_attn_layers, m.n_mlp_layers) == (40, 36, 4, 40)
        assert (m.linear_key_dim, m.linear_value_dim, m.linear_groups, m.linear_conv) == (128, 64, 1, 4)
        assert m.linear_heads * m.linear_value_dim == 2 * m.d_model  # mamba_expand 2
        assert m.vocab_size == 100352 and m.tie_embeddings and m.max_context == 131072 and not m.has_single_blocks
    assert (small.d_model, small.n_heads, small.n_kv_heads, small.linear_heads) == (4096, 32, 8, 128)
    assert (small.n_experts, small.experts_per_token, small.d_ff_expert, small.d_ff_shared) == (72, 10, 768, 1536)
    assert (tiny.d_model, tiny.n_heads, tiny.n_kv_heads, tiny.linear_heads) == (1536, 12, 4, 48)
    assert (tiny.n_experts, tiny.experts_per_token, tiny.d_ff_expert, tiny.d_ff_shared) == (64, 6, 512, 1024)
    assert (micro.d_model, micro.n_heads, micro.n_kv_heads, micro.linear_heads, micro.d_ff) == (2048, 32, 8, 64, 8192)
    assert micro.head_dim == 64 and small.head_dim == tiny.head_dim == 128  # the cards' attention head sizes


def test_nemotron_h_8b_counted_by_hand():
    """52 single-block layers: 24 Mamba-2 mixers, 4 attention layers and 24 MLPs (up and down, squared ReLU), a norm
    before each and one at the end; untied embeddings."""
    m = get_model("nemotron-h-8b")
    d, ff, vocab = 4096, 21504, 131072
    assert (m.n_layers, m.n_linear_layers, m.n_attn_layers, m.n_mlp_layers) == (52, 24, 4, 24)
    assert (m.n_mixer_only_layers, m.n_mlp_only_layers, m.n_norms) == (28, 24, 53)
    assert m.mlp_matrices == 2 and m.dense_mlp_params == 2 * d * ff
    assert m.linear_params_per_layer == _mamba2_layer(d, 128, 64, 8, 128, 4)
    attn = d * 32 * 128 + 2 * d * 8 * 128 + 32 * 128 * d
    expected = 2 * vocab * d + 24 * _mamba2_layer(d, 128, 64, 8, 128, 4) + 4 * attn + 24 * 2 * d * ff + 53 * d
    assert m.total_params == expected
    assert m.kv_elements_per_token == 4 * 2 * 8 * 128  # the KV cache of the four attention layers only
    # a pass prices the 24 MLPs and the 53 norms, not an MLP and two norms per layer
    B, n, L = 2, 3, 512
    c = forward_cost(m, B, n, L, weight_dtype="bf16")
    T = B * n
    assert c.flops[c.operators.index("mlp")] == 2.0 * T * 24 * 2 * d * ff
    assert c.bytes_weights[c.operators.index("norms")] == 53 * d * 2
    assert c.flops[c.operators.index("qkv")] == 2.0 * T * d * (32 + 2 * 8) * 128 * 4
    assert c.n_layers == 26  # two blocks to a layer of the time model's per-layer terms: 52 all-reduces, not 104


def test_nemotron_3_nano_counted_by_hand():
    """52 layers: 23 Mamba-2, 23 mixtures of 128 two-matrix experts (6 per token) with one shared expert of 3712 and a
    sigmoid router, 6 attention layers with 2 KV heads; the state in float32."""
    m = get_model("nemotron-3-nano-30b-a3b")
    d, vocab, E, ff_e, shared = 2688, 131072, 128, 1856, 3712
    assert (m.n_linear_layers, m.n_attn_layers, m.n_moe_layers, m.n_dense_mlp_layers) == (23, 6, 23, 0)
    assert (m.n_experts, m.experts_per_token, m.expert_params, m.shared_expert_params) == (
        E, 6, 2 * d * ff_e, 2 * d * shared
    )  # fmt: skip
    assert m.state_dtype == "fp32" and m.n_kv_heads == 2 and m.max_context == 262144
    mamba = _mamba2_layer(d, 64, 64, 8, 128, 4)
    attn = d * 32 * 128 + 2 * d * 2 * 128 + 32 * 128 * d
    moe = E * 2 * d * ff_e + 2 * d * shared + d * E
    assert m.total_params == 2 * vocab * d + 23 * mamba + 6 * attn + 23 * moe + 53 * d
    assert m.active_params == m.total_params - 23 * (E - 6) * 2 * d * ff_e


def test_the_config_json_reads_as_the_preset_in_either_spelling():
    preset = PRESETS["nemotron-3-nano-30b-a3b"]
    assert ModelSpec.from_hf_config(NANO3, name=preset.name) == preset
    kinds = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    listed = {k: v for k, v in NANO3.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = [kinds[c] for c in NANO3["hybrid_override_pattern"]]  # transformers' later spelling
    assert ModelSpec.from_hf_config(listed, name=preset.name) == preset
    # the 8B's config.json names the attention head attention_head_dim and keeps the state at vLLM's default, float32
    eight = PRESETS["nemotron-h-8b"]
    cfg = {
        "model_type": "nemotron_h", "hidden_size": 4096, "num_hidden_layers": 52,
        "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", "num_attention_heads": 32,
        "num_key_value_heads": 8, "attention_head_dim": 128, "mamba_num_heads": 128, "mamba_head_dim": 64,
        "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "intermediate_size": [21504], "vocab_size": 131072,
        "max_position_embeddings": 8192, "tie_word_embeddings": False,
    }  # fmt: skip
    assert ModelSpec.from_hf_config(cfg, name=eight.name) == eight
    assert eight.state_dtype == "fp32"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"moe_latent_size": 1024}, "moe_latent_size"),
        ({"hybrid_override_pattern": "MEMEX" + "E" * 47}, "hybrid_override_pattern"),
        ({"hybrid_override_pattern": "ME*"}, "hybrid_override_pattern"),
        ({"intermediate_size": [1856, 3712]}, "intermediate_size"),
        ({"use_bias": True}, "use_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"sliding_window": 4096}, "sliding_window"),
        ({"mamba_num_heads": None}, "mamba_num_heads"),
        ({"num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E*E"}, "mtp_hybrid_override_pattern"),
        ({"num_nextn_predict_layers": 1}, "mtp_hybrid_override_pattern"),
    ],
)
def test_what_cannot_be_priced_is_refused_naming_the_field(change, field):
    with pytest.raises(SpecroofError) as e:
        ModelSpec.from_hf_config({**NANO3, **change})
    assert field in str(e.value) and "\n" not in str(e.value)


def test_an_mtp_module_is_one_attention_and_one_moe_layer():
    m = ModelSpec.from_hf_config(
        {**NANO3, "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E"}, name="nano3 with mtp"
    )
    assert m.mtp_modules == 1
    layer = MTP().layer_spec(m)
    assert (layer.n_layers, layer.n_attn_layers, layer.n_linear_layers, layer.n_moe_layers) == (1, 1, 0, 1)
    assert not layer.has_single_blocks and layer.n_norms == 3
    pr = rf.Pricing.of("h100-sxm-80gb", engine="vllm")
    r = rf.speedup(pr, m, "mtp", 0.7, 1, batch=8, context=1024)
    assert float(r.speedup) > 0 and float(r.t_checkpoint_s) > 0
    with pytest.raises(SpecroofError, match="ships no multi-token-prediction"):
        rf.speedup(pr, "nemotron-3-nano-30b-a3b", "mtp", 0.7, 1, batch=8, context=1024)


def test_an_eagle_layer_and_a_shorter_stack_stay_whole_layers():
    m = get_model("nemotron-h-47b")
    layer = Eagle(3).layer_spec(m)
    assert (layer.n_layers, layer.n_attn_layers, layer.n_mlp_layers, layer.n_linear_layers) == (1, 1, 1, 0)
    first = m.replace(n_layers=20)  # early exit's first layers keep each kind's share
    assert first.n_linear_layers + first.n_attn_layers + first.n_mlp_only_layers == 20
    assert first.n_mixer_only_layers + first.n_mlp_only_layers <= 20
    moe = get_model("nemotron-3-nano-30b-a3b").replace(n_layers=10)
    assert moe.n_moe_layers <= moe.n_mlp_layers and moe.n_attn_layers >= 0


@pytest.mark.parametrize("name", ["granite-4.0-h-small", "granite-4.0-h-micro", "nemotron-3-nano-30b-a3b",
                                  "nemotron-h-8b"])  # fmt: skip
def test_the_state_checkpoint_is_the_shared_rule(name):
    m = get_model(name)
    B, g = 16, 4
    c = forward_cost(m, B, g + 1, 1024, weight_dtype="bf16")
    sb = 4 if m.state_dtype == "fp32" else 2  # Granite: the model's dtype; Nemotron-H: float32
    per_position = m.linear_heads * m.linear_key_dim * m.linear_value_dim * sb + m.linear_conv_dim * 2
    written = c.bytes_kv_write[c.operators.index("state_checkpoint")]
    assert written == B * g * m.n_linear_layers * per_position
    pr = rf.Pricing.of("h100-sxm-80gb", engine="vllm")
    r = rf.speedup(pr, m, "eagle3", 0.7, g, batch=B, context=1024)
    st = pass_time(m, pr, B, g + 1, 1024, tp=1)
    t = float(st.op_time_s[st.cost.operators.index("state_checkpoint")])
    assert 0 < float(r.t_checkpoint_s) == t == float(checkpoint_seconds(pr, m, g, B, 1024)) < float(r.t_verify_s)


def test_scalar_and_array_answers_agree_on_a_single_block_hybrid():
    m = get_model("nemotron-nano-9b-v2")
    pr = rf.Pricing.of("h100-sxm-80gb", engine="vllm")
    s = rf.speedup(pr, m, "eagle3", 0.7, 3, batch=4, context=512)
    a = rf.speedup(pr, m, "eagle3", np.array([0.7, 0.7]), 3, batch=np.array([4, 4]), context=512)
    for f in ("speedup", "t_verify_s", "t_checkpoint_s", "memory_bytes"):
        assert float(getattr(s, f)) == pytest.approx(float(np.asarray(getattr(a, f))[0]), rel=1e-12)


def test_the_commands_on_a_granite_and_a_nemotron_preset(capsys):
    plan = ["plan", "--hardware", "h100-sxm-80gb", "--target", "nemotron-3-nano-30b-a3b", "--drafter", "eagle3",
            "--acceptance", "eagle3=0.7", "--batch", "16", "--json"]  # fmt: skip
    assert main(plan) == 0
    rows = [r for r in json.loads(capsys.readouterr().out)["table"] if r["strategy"] == "eagle3"]
    assert rows and all(r["t_checkpoint_s"] > 0 for r in rows)
    speedup = ["speedup", "--hardware", "h100-sxm-80gb", "--target", "granite-4.0-h-small", "--drafter",
               "model:granite-4.0-h-micro", "--acceptance", "model=0.7", "--gamma", "4"]  # fmt: skip
    assert main(speedup) == 0
    assert "granite-4.0-h-small" in capsys.readouterr().out
    tree = ["tree", "--hardware", "h100-sxm-80gb", "--target", "nemotron-h-8b", "--drafter", "eagle3", "--batch", "1"]
    assert main(tree) == 0
    assert "speedup" in capsys.readouterr().out
