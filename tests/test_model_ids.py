"""Models by the names people deploy with: Hugging Face ids, from the presets or the local cache, never the network."""

from __future__ import annotations

import json

import pytest

from roofline.core.errors import SpecroofError
from roofline.passes.model import HF_IDS, PRESETS, get_model, hf_id


def test_every_preset_lists_the_ids_it_stands_for():
    assert set(HF_IDS) == set(PRESETS)
    for preset, ids in HF_IDS.items():
        assert ids and all("/" in i for i in ids), preset
        for i in ids:
            assert get_model(i) is PRESETS[preset]
            assert get_model(i.upper()) is PRESETS[preset]  # ids are matched case-insensitively
        assert hf_id(preset) == ids[0]


def test_an_id_in_the_local_cache_is_read_from_its_snapshot(tmp_path, monkeypatch):
    snap = tmp_path / "models--acme--tiny-7b" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 3,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
    }
    (snap / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    spec = get_model("acme/tiny-7b")
    assert spec.n_layers == 3 and spec.d_model == 256 and spec.n_kv_heads == 2


def _cache_fixture(root, model_id, cfg, snapshot="abc123"):
    """A Hugging Face hub cache as huggingface_hub lays it out: models--ORG--NAME/snapshots/<hash>/config.json."""
    snap = root / ("models--" + model_id.replace("/", "--")) / "snapshots" / snapshot
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(cfg))
    return snap / "config.json"


QWEN3_8B = {  # Qwen/Qwen3-8B config.json (the fields the cost model reads)
    "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": False, "attention_bias": False,
}  # fmt: skip


def test_an_unknown_id_offline_is_one_line_naming_the_closest_preset(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpecroofError) as e:
        get_model("someone/llama-3.1-8b-finetune")
    msg = str(e.value)
    assert "\n" not in msg and "llama-3.1-8b" in msg and "config.json" in msg and "HF_HUB_OFFLINE" in msg


def test_a_finetune_in_the_cache_is_named_by_its_id_not_its_snapshot(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _cache_fixture(tmp_path, "acme/Qwen3-8B-finetune", QWEN3_8B, snapshot="0123abcd")
    spec = get_model("acme/Qwen3-8B-finetune")
    assert spec.name == "acme/Qwen3-8B-finetune" and "0123abcd" not in spec.name
    assert spec.total_params == PRESETS["qwen3-8b"].total_params
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "acme/Qwen3-8B-finetune" in err and "local Hugging Face cache" in err
    get_model("acme/Qwen3-8B-finetune")  # read once per process: announced once
    assert capsys.readouterr().err == ""


def test_the_cli_names_a_cached_id_by_its_id(tmp_path, monkeypatch):
    from specroof.cli import main

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _cache_fixture(tmp_path / "hub", "acme/tiny-qwen3", QWEN3_8B, snapshot="feedbeef")
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["roofline", "--model", "acme/tiny-qwen3", "--hardware", "h100-sxm-80gb"])
    assert rc in (0, None)
    assert "acme/tiny-qwen3" in out.getvalue() and "feedbeef" not in out.getvalue()


def test_an_id_not_cached_is_fetched_through_huggingface_hub_config_only(tmp_path, monkeypatch):
    """Online, a hub id no preset or cache knows is fetched with hf_hub_download(repo_id, "config.json") alone."""
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls = []

    def fake_download(repo_id, filename, **kw):  # stands for the network: writes what the hub would cache
        calls.append((repo_id, filename))
        return str(_cache_fixture(tmp_path / "dl", repo_id, QWEN3_8B))

    monkeypatch.setattr(hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(hub, "get_hf_file_metadata", lambda url, **kw: None)  # the probe before it: online
    spec = get_model("acme/fetched-8b")
    assert calls == [("acme/fetched-8b", "config.json")] and spec.name == "acme/fetched-8b"


def test_without_huggingface_hub_one_line_says_what_to_install(tmp_path, monkeypatch):
    import sys

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if it were not installed
    with pytest.raises(SpecroofError) as e:
        get_model("acme/not-installed-7b")
    msg = str(e.value)
    assert "\n" not in msg and "pip install huggingface_hub" in msg and "config.json" in msg


NEW_PRESETS = [  # the names, and the total / active weights their model cards publish
    ("llama-3.3-70b", 70.6e9, None),
    ("qwen3-8b", 8.2e9, None),
    ("qwen3-32b", 32.8e9, None),
    ("qwen3-235b-a22b", 235e9, 22e9),
    ("qwen3-coder-30b-a3b", 30.5e9, 3.3e9),
    ("qwen3-coder-480b-a35b", 480e9, 35e9),
    ("gemma-3-27b", 27e9, None),
    ("llama-4-scout", 109e9, 17e9),  # 109B counts the vision encoder, which decode does not run
    ("llama-4-maverick", 400e9, 17e9),
    ("kimi-k2.5", 1.04e12, 32e9),
    ("minimax-m2", 229e9, 10e9),
    ("glm-4.5", 355e9, 32e9),  # 355B counts the MTP layer
    ("glm-4.5-air", 106e9, 12e9),
    ("mistral-small-3.1-24b", 24e9, None),
    ("mistral-large-2-123b", 123e9, None),
]


@pytest.mark.parametrize(("name", "total", "active"), NEW_PRESETS)
def test_the_served_presets_match_their_published_sizes(name, total, active):
    m = get_model(name)
    assert m.total_params == pytest.approx(total, rel=0.05)
    if active:
        assert m.active_params == pytest.approx(active, rel=0.12)


def test_the_served_presets_are_shaped_as_their_configs_say():
    g = get_model("gemma-3-27b")  # 62 layers, 5 local (1024-token window) to 1 global: 52 slide
    assert (g.n_sliding_layers, g.sliding_window, g.mlp_matrices, g.tie_embeddings) == (52, 1024, 3, True)
    s, m = get_model("llama-4-scout"), get_model("llama-4-maverick")
    assert (s.n_moe_layers, m.n_moe_layers, m.n_dense_layers) == (48, 24, 24)  # interleave_moe_layer_step 1 and 2
    assert s.n_sliding_layers == 36 and s.sliding_window == 8192  # chunked attention on 3 layers in 4
    assert get_model("kimi-k2.5").is_mla and get_model("minimax-m2").n_sliding_layers == 0
    assert get_model("minimax-m2").mtp_modules == 0  # declared in its config, absent from its weights
    assert get_model("glm-4.5").mtp_modules == 1 and get_model("glm-4.6").max_context == 202752
    assert (
        get_model("Qwen/Qwen3-8B") is PRESETS["qwen3-8b"]
        and get_model("mistral-large-2") is PRESETS["mistral-large-2-123b"]
    )


def test_multimodal_configs_are_read_from_their_text_config(tmp_path):
    from roofline.passes.model import ModelSpec

    gemma = {
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
            "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208,
            "sliding_window": 1024, "sliding_window_pattern": 6, "max_position_embeddings": 131072,
            "hidden_activation": "gelu_pytorch_tanh",
        },
    }  # fmt: skip
    assert ModelSpec.from_hf_config(gemma).total_params == PRESETS["gemma-3-27b"].total_params
    scout = {
        "model_type": "llama4",
        "text_config": {
            "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
            "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048, "num_local_experts": 16,
            "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
            "max_position_embeddings": 10485760,
        },
    }  # fmt: skip
    spec = ModelSpec.from_hf_config(scout)
    assert spec.total_params == PRESETS["llama-4-scout"].total_params and spec.n_sliding_layers == 36
    minimax = {
        "model_type": "minimax_m2", "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
        "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 200064,
        "num_local_experts": 256, "num_experts_per_tok": 8, "num_mtp_modules": 3, "max_position_embeddings": 196608,
    }  # fmt: skip
    assert ModelSpec.from_hf_config(minimax).total_params == PRESETS["minimax-m2"].total_params
    glm = {
        "model_type": "glm4_moe", "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
        "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151552,
        "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 1408,
        "first_k_dense_replace": 1, "num_nextn_predict_layers": 1, "attention_bias": True,
        "max_position_embeddings": 131072,
    }  # fmt: skip
    assert ModelSpec.from_hf_config(glm).total_params == PRESETS["glm-4.5-air"].total_params


def test_a_snapshot_path_is_named_by_its_model_id(tmp_path):
    from roofline.passes.model import ModelSpec

    path = _cache_fixture(tmp_path, "acme/Qwen3-8B-finetune", QWEN3_8B, snapshot="0123abcd")
    assert ModelSpec.from_hf_config(path).name == "acme/Qwen3-8B-finetune"
    assert ModelSpec.from_hf_config(path.parent).name == "acme/Qwen3-8B-finetune"
