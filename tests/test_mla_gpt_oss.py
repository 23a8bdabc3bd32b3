"""Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2) and gpt-oss (sliding/full layers, sinks, biased MoE):
presets against their published parameter counts, the real config.json files, and the cost model's KV terms
(docs/cost-model.md section 21)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.passes.cost import forward_cost
from roofline.passes.model import PRESETS, ModelSpec, get_model
from specroof.cli import main

# config.json of each model on the Hugging Face hub (the fields the cost model reads, as published)
DEEPSEEK_V3_CFG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "v_head_dim": 128,
    "vocab_size": 129280,
}  # fmt: skip
DEEPSEEK_V2_LITE_CFG = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "attention_bias": False,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408,
    "moe_layer_freq": 1,
    "n_group": 1,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_attention_heads": 16,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "tie_word_embeddings": False,
    "topk_method": "greedy",
    "v_head_dim": 128,
    "vocab_size": 102400,
}
KIMI_K2_CFG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 131072,
    "model_type": "kimi_k2",
    "moe_intermediate_size": 2048,
    "n_group": 1,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_attention_heads": 64,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 64,
    "num_nextn_predict_layers": 0,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "routed_scaling_factor": 2.827,
    "tie_word_embeddings": False,
    "topk_group": 1,
    "v_head_dim": 128,
    "vocab_size": 163840,
}


def _gpt_oss_cfg(layers: int, experts: int) -> dict:
    return {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "experts_per_token": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "initial_context_length": 4096,
        "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8,
        "num_local_experts": experts,
        "quantization_config": {
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                       "lm_head"],
            "quant_method": "mxfp4",
        },
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
        "rope_theta": 150000,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "vocab_size": 201088,
    }  # fmt: skip


CONFIGS = {
    "deepseek-v3": DEEPSEEK_V3_CFG,
    "deepseek-v2-lite": DEEPSEEK_V2_LITE_CFG,
    "kimi-k2": KIMI_K2_CFG,
    "gpt-oss-20b": _gpt_oss_cfg(24, 32),
    "gpt-oss-120b": _gpt_oss_cfg(36, 128),
}

#: published (total, active) parameters. Active counts leave out the input embedding (a lookup, no multiply):
#: DeepSeek's "36.6B activated, including 0.9B for the output head" (DeepSeek-V3 README_WEIGHTS.md) and OpenAI's
#: gpt-oss model card table (active 5.13B / 3.61B = MLP share + attention + unembedding) count it that way.
PUBLISHED = {
    "deepseek-v3": (671e9, 37e9),
    "deepseek-r1": (671e9, 37e9),
    "kimi-k2": (1.04e12, 32e9),
    "gpt-oss-120b": (117e9, 5.1e9),
    "gpt-oss-20b": (21e9, 3.6e9),
    "deepseek-v2-lite": (15.7e9, 2.4e9),
}
#: every count lies within 1.5% of its rounded published figure except V2-Lite's active (2.45B against "2.4B")
TOLERANCE = 0.025


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_presets_match_the_published_parameter_counts(name):
    spec = PRESETS[name]
    total, active = PUBLISHED[name]
    assert spec.total_params == pytest.approx(total, rel=TOLERANCE)
    assert spec.active_params - spec.embedding_params == pytest.approx(active, rel=TOLERANCE)


def test_exact_counts_the_model_cards_give():
    # the gpt-oss model card gives two decimals: 116.83B / 5.13B and 20.91B / 3.61B; DeepSeek-V3: 36.6B active
    for name, total, active in (("gpt-oss-120b", 116.83e9, 5.13e9), ("gpt-oss-20b", 20.91e9, 3.61e9)):
        spec = PRESETS[name]
        assert spec.total_params == pytest.approx(total, abs=0.005e9)
        assert spec.active_params - spec.embedding_params == pytest.approx(active, abs=0.005e9)
    v3 = PRESETS["deepseek-v3"]
    assert v3.active_params - v3.embedding_params == pytest.approx(36.6e9, abs=0.05e9)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_real_config_json_gives_the_preset(name, tmp_path):
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CONFIGS[name]))
    spec = ModelSpec.from_hf_config(path)
    assert spec.name == name
    assert spec.replace(name="x") == PRESETS[name].replace(name="x")


def test_hf_ids_resolve_to_the_presets():
    assert get_model("deepseek-ai/DeepSeek-R1").name == "deepseek-r1"
    assert get_model("openai/gpt-oss-120b").name == "gpt-oss-120b"
    assert get_model("moonshotai/Kimi-K2-Instruct").name == "kimi-k2"
    assert PRESETS["deepseek-r1"].replace(name="x") == PRESETS["deepseek-v3"].replace(name="x")


def test_mla_kv_cache_is_the_latent_and_rope_key():
    v3 = PRESETS["deepseek-v3"]
    assert v3.kv_elements_per_token == 61 * 576
    assert v3.kv_bytes(1, 2) == 61 * 576 * 2  # bf16
    assert v3.kv_bytes(1, 1) == 61 * 576  # fp8
    b, L = 3, 4096
    cost = forward_cost(v3, b, 1, L, weight_dtype="fp8", kv_dtype="fp8")
    assert float(cost.kv_read_bytes) == b * L * 61 * 576 * 1  # read once for all 128 heads
    assert float(cost.bytes_kv_write.sum()) == b * 61 * 576
    # the absorbed kernels: scores over the latent + rope width, values over the latent, per head
    i = cost.operators.index
    pairs = b * (L + 1) * 61
    assert float(cost.flops[i("attn_scores")]) == 2 * pairs * 128 * 576
    assert float(cost.flops[i("attn_values")]) == 2 * pairs * 128 * 512
    # the projections are the layer's weights once, times 2 T FLOPs (absorbed W_UK / W_UV included)
    attn_w = float(cost.bytes_weights[i("qkv")] + cost.bytes_weights[i("out_proj")])
    assert attn_w == 61 * v3.attn_params_per_layer * 1
    assert float(cost.flops[i("qkv")] + cost.flops[i("out_proj")]) == 2 * b * 61 * v3.attn_params_per_layer


def test_mla_kv_read_is_far_below_the_same_heads_with_full_k_and_v():
    v3 = PRESETS["deepseek-v3"]
    mha = v3.replace(kv_lora_rank=0, q_lora_rank=0, qk_rope_head_dim=0, v_head_dim=0)  # 128 KV heads of 192
    mla = float(forward_cost(v3, 8, 1, 32768).kv_read_bytes)
    full = float(forward_cost(mha, 8, 1, 32768).kv_read_bytes)
    assert mla / full == pytest.approx(576 / (2 * 128 * 192))


def test_gpt_oss_decode_at_32k_reads_far_less_kv_than_all_full_layers():
    oss = PRESETS["gpt-oss-120b"]
    full = oss.replace(n_sliding_layers=0, sliding_window=0)
    L, b = 32768, 4
    sliding = forward_cost(oss, b, 1, L)
    dense = forward_cost(full, b, 1, L)
    per_layer = 2 * 8 * 64 * 2  # K and V of 8 KV heads of 64, fp16
    assert float(sliding.kv_read_bytes) == b * (18 * L + 18 * 128) * per_layer
    assert float(dense.kv_read_bytes) == b * 36 * L * per_layer
    assert float(sliding.kv_read_bytes) < 0.51 * float(dense.kv_read_bytes)
    assert float(sliding.total_flops) < float(dense.total_flops)
    # within the window the layers are alike
    assert np.array_equal(forward_cost(oss, b, 3, 100).flops, forward_cost(full, b, 3, 100).flops)


def test_kv_capacity_of_sliding_layers():
    oss = PRESETS["gpt-oss-20b"]
    per = 2 * 8 * 64
    assert oss.kv_elements_per_token == 24 * per  # the rate up to the window (the capacity model's upper bound)
    assert oss.kv_cache_elements(100) == 100 * 24 * per
    assert oss.kv_cache_elements(32768) == (12 * 32768 + 12 * 128) * per
    assert np.array_equal(
        oss.kv_cache_elements(np.array([1, 128, 129])), np.array([24, 24 * 128, 12 * 129 + 12 * 128]) * per
    )
    v3 = PRESETS["deepseek-v3"]
    assert v3.kv_cache_elements(1000) == 1000 * 61 * 576


def test_bad_mla_and_sliding_fields_are_refused_with_their_names():
    cfg = {k: v for k, v in DEEPSEEK_V3_CFG.items() if k != "qk_rope_head_dim"}
    with pytest.raises(SpecroofError, match="multi-head latent attention.*'qk_rope_head_dim'"):
        ModelSpec.from_hf_config(cfg)
    with pytest.raises(SpecroofError, match="layer_types"):
        ModelSpec.from_hf_config({**CONFIGS["gpt-oss-20b"], "layer_types": ["full_attention"]})
    with pytest.raises(SpecroofError, match="sliding_window"):
        ModelSpec.from_hf_config({**CONFIGS["gpt-oss-20b"], "sliding_window": None})
    with pytest.raises(SpecroofError, match="n_sliding_layers"):
        PRESETS["gpt-oss-20b"].replace(n_sliding_layers=25)
    with pytest.raises(SpecroofError, match="qk_rope_head_dim"):
        PRESETS["deepseek-v3"].replace(qk_rope_head_dim=192)


def test_gpt_oss_layer_types_default_alternates():
    cfg = {k: v for k, v in CONFIGS["gpt-oss-20b"].items() if k != "layer_types"}
    assert ModelSpec.from_hf_config(cfg).n_sliding_layers == 12


@pytest.mark.parametrize("model,tp", [("deepseek-v3", 8), ("gpt-oss-120b", 1), ("kimi-k2", 8)])
def test_cli_roofline_prices_them(capsys, model, tp):
    code = main(["roofline", "--hardware", "h200-sxm-141gb", "--model", model, "--tp", str(tp), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["params"] == PRESETS[model].total_params
    assert out["t_step_s"] > 0 and out["bound"] == "memory"


def test_a_truncated_gpt_oss_keeps_its_share_of_sliding_layers():
    oss = PRESETS["gpt-oss-20b"]
    assert oss.replace(n_layers=1).n_sliding_layers == 1
    assert oss.replace(n_layers=6).n_sliding_layers == 3
    assert oss.replace(n_layers=6, n_sliding_layers=0).n_sliding_layers == 0
    # early exit's first and remaining layers price without error
    assert float(forward_cost(oss.replace(n_layers=5), 2, 4, 1000).total_flops) > 0


def test_the_harness_refuses_to_build_what_it_would_build_wrong():
    """The harness's Llama-style attention is not MLA or sliding-window attention: one line, not a wrong model."""
    pytest.importorskip("torch")
    from measure.models import Transformer
    from measure.tp import check_tp

    for name in ("deepseek-v2-lite", "gpt-oss-20b"):
        spec = get_model(name).replace(n_layers=2)
        with pytest.raises(SpecroofError, match="not built here"):
            Transformer(spec.replace(vocab_size=256), dtype="fp32")
    with pytest.raises(SpecroofError, match="full attention only"):
        check_tp(get_model("gpt-oss-20b").replace(n_experts=0, experts_per_token=0), 2)


def test_mla_cache_is_whole_on_every_tensor_parallel_rank():
    """TP splits MLA's heads, not its latent cache: each of 8 ranks reads all of it, so the attention products' memory
    time is the one-GPU time, while a GQA model's KV read splits 8 ways. Scalar and array paths agree."""
    from roofline.costing.hardware import load_hardware
    from roofline.costing.passtime import pass_time

    tm = load_hardware("h200-sxm-141gb").time_model()
    for name, split in (("deepseek-v3", False), ("llama-3.1-70b", True)):
        cost = forward_cost(name, 8, 1, 30000, weight_dtype="bf16")
        zero = np.zeros_like(cost.bytes_act)  # the KV cache's bytes alone
        cost = dataclasses.replace(cost, bytes_act=zero, bytes_weights=zero, bytes_kv_write=zero)
        attn = [i for i, o in enumerate(cost.operators) if o == "attn_scores"]
        one, _ = tm.operator_times(cost, "bf16", 1)
        eight, _ = tm.operator_times(cost, "bf16", 8)
        ratio = eight[attn] / one[attn]
        assert np.allclose(ratio, 1 / 8 if split else 1.0, rtol=1e-9), (name, ratio)
    scalar = pass_time("deepseek-v3", "h200-sxm-141gb", 8, 1, 30000, "bf16", tp=8)
    array = pass_time("deepseek-v3", "h200-sxm-141gb", np.array([8]), 1, 30000, "bf16", tp=8)
    assert float(scalar.t_step_s) == pytest.approx(float(array.t_step_s[0]), rel=1e-12)
