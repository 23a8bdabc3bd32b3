"""Models by the names people deploy with: Hugging Face ids, from the presets or the local cache, never the network."""

from __future__ import annotations

import json

import pytest

from roofline.errors import SpecroofError
from roofline.model import HF_IDS, PRESETS, get_model, hf_id


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


def test_an_unknown_id_is_one_line_naming_the_closest_preset(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(SpecroofError) as e:
        get_model("someone/llama-3.1-8b-finetune")
    msg = str(e.value)
    assert "\n" not in msg and "llama-3.1-8b" in msg and "config.json" in msg and "never downloads" in msg
