"""ModelSpec: published parameter counts, HF config layouts, validation."""

from __future__ import annotations

import json

import pytest

from roofline import PRESETS, ModelSpec, SpecroofError, get_model


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("llama-2-7b", 6.74e9, None),
        ("llama-2-13b", 13.0e9, None),
        ("llama-3.1-8b", 8.03e9, None),
        ("llama-3.2-1b", 1.24e9, None),
        ("mixtral-8x7b", 46.7e9, 12.9e9),
        ("qwen2.5-7b", 7.62e9, None),
        ("llama-68m", 68e6, None),
        ("llama-160m", 162e6, None),
    ],
)
def test_published_parameter_counts(name, total, active):
    m = get_model(name)
    assert m.total_params == pytest.approx(total, rel=0.006)
    if active:
        assert m.active_params == pytest.approx(active, rel=0.006)


def test_presets_cover_the_usual_pairs():
    for name in (
        "llama-2-70b",
        "llama-3.1-70b",
        "llama-3.2-3b",
        "qwen2.5-0.5b",
        "qwen2.5-1.5b",
        "qwen2.5-72b",
        "mistral-7b",
        "vicuna-7b",
    ):
        assert name in PRESETS
        assert name == name.lower()


def test_gqa_kv_uses_kv_heads():
    m = get_model("llama-3.1-8b")
    assert m.kv_elements_per_token == 2 * 32 * 8 * 128
    assert get_model("llama-2-7b").kv_elements_per_token == 2 * 32 * 32 * 128


LLAMA_CFG = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
}


def test_from_hf_config_dict_file_and_folder(tmp_path):
    m = ModelSpec.from_hf_config(LLAMA_CFG)
    assert m.total_params == PRESETS["llama-3.1-8b"].total_params
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CFG))
    assert ModelSpec.from_hf_config(tmp_path).total_params == m.total_params
    assert ModelSpec.from_hf_config(tmp_path / "config.json").n_kv_heads == 8


def test_from_hf_config_moe_layouts():
    mixtral = {
        **LLAMA_CFG,
        "model_type": "mixtral",
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    }
    m = ModelSpec.from_hf_config(mixtral)
    assert m.total_params == pytest.approx(46.7e9, rel=0.003)
    qwen_moe = {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_hidden_layers": 24,
        "intermediate_size": 5632,
        "vocab_size": 151936,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "tie_word_embeddings": False,
    }
    q = ModelSpec.from_hf_config(qwen_moe)
    assert q.total_params == pytest.approx(14.3e9, rel=0.01)  # Qwen1.5-MoE-A2.7B: 14.3B total
    assert q.active_params == pytest.approx(2.7e9, rel=0.05)
    ds = {
        **qwen_moe,
        "model_type": "deepseek_v2",
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "first_k_dense_replace": 1,
        "num_experts_per_tok": 6,
    }
    d = ModelSpec.from_hf_config(ds)
    assert d.n_dense_layers == 1 and d.n_shared_experts == 2


def test_unsupported_and_malformed_configs(tmp_path):
    with pytest.raises(SpecroofError, match="unsupported architecture model_type='gpt2'"):
        ModelSpec.from_hf_config({"model_type": "gpt2"})
    with pytest.raises(SpecroofError, match="missing field 'hidden_size'"):
        ModelSpec.from_hf_config({"model_type": "llama"})
    with pytest.raises(SpecroofError, match="multi-head latent attention"):
        ModelSpec.from_hf_config({**LLAMA_CFG, "model_type": "deepseek_v3", "kv_lora_rank": 512})
    with pytest.raises(SpecroofError, match="no config.json"):
        ModelSpec.from_hf_config(tmp_path)


def test_spec_validation():
    with pytest.raises(SpecroofError, match="n_heads .* multiple of n_kv_heads"):
        get_model("llama-2-7b").replace(n_kv_heads=5)
    with pytest.raises(SpecroofError, match="unknown mlp_kind"):
        get_model("llama-2-7b").replace(mlp_kind="relu9")
    with pytest.raises(SpecroofError, match="params must be > 0"):
        ModelSpec.from_params(-1)
    with pytest.raises(SpecroofError, match="unknown model preset 'llama-3.1-9b'; closest: llama-3.1-8b"):
        get_model("llama-3.1-9b")
