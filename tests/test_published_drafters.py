"""Published drafters by name: the presets' EAGLE-3 heads and DFlash block drafters, and the flags they emit."""

from __future__ import annotations

import json
import re

import pytest

from roofline.core.errors import SpecroofError
from roofline.deploy.engine_flags import EngineSetting, emit_flags
from roofline.passes.model import HF_IDS, PRESETS, get_model
from roofline.speculation.drafter_presets import PUBLISHED_DRAFTERS, draft_repos, published
from roofline.speculation.drafters import ParallelBlock, as_drafter, default_gamma


def test_every_published_drafter_names_a_preset_target_and_a_method():
    for p in PUBLISHED_DRAFTERS:
        assert p.target in PRESETS and p.method in ("eagle3", "dflash", "dspark") and "/" in p.repo and p.source
        assert (p.spec is None) == (p.block_size == 0)  # a read config gives both the shape and the block


def test_dflash_on_its_target_is_the_published_block_drafter_with_its_block():
    d = as_drafter("dflash", get_model("qwen3-8b"))
    assert isinstance(d, ParallelBlock) and d.block_size == 16 and default_gamma(d) == 15
    assert d.spec.n_layers == 5 and d.spec.d_model == 4096  # z-lab/Qwen3-8B-DFlash-b16 config.json
    assert as_drafter("dflash:z-lab/Qwen3-8B-DFlash-b16") == d == as_drafter("z-lab/qwen3-8b-dflash-b16")


def test_dflash_without_a_published_drafter_is_one_line_naming_the_flag():
    for target in (get_model("qwen3-32b"), None):
        with pytest.raises(SpecroofError) as e:
            as_drafter("dflash", target)
        msg = str(e.value)
        assert "\n" not in msg and "--drafter dflash:" in msg and "qwen3-8b" in msg and "draft_model" not in msg


def test_a_dflash_config_file_gives_its_block_size(tmp_path):
    cfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
        "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 151936, "dflash_config": {"block_size": 8, "target_layer_ids": [1, 9]},
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    d = as_drafter(f"dflash:{path}")
    assert d.block_size == 8 and default_gamma(d) == 7 and d.spec.n_layers == 2


def test_the_plan_never_drafts_more_than_a_block_holds():
    from roofline import load_hardware
    from roofline.deploy.planner import plan

    d = as_drafter("dflash", get_model("qwen3-8b"))
    t = plan(load_hardware("h100-sxm-80gb"), "qwen3-8b", d, 0.7, batch=1, context=1024)
    assert int(t["gamma"].max()) == 15


def test_the_eagle3_70b_head_is_emitted_by_its_checkpoint_and_missing_ones_name_the_flag():
    assert published("llama-3.3-70b", "eagle3").repo == "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
    assert draft_repos()[("llama-3.3-70b", "eagle3")] == "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
    flags = emit_flags(EngineSetting("vllm", 3, 1, 4), target="llama-3.3-70b", drafter="eagle3")
    assert "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B" in flags and "meta-llama/Llama-3.3-70B-Instruct" in flags
    with pytest.raises(SpecroofError) as e:
        emit_flags(EngineSetting("vllm", 3, 1, 4), target="gemma-3-27b", drafter="eagle3")
    assert "--draft-model" in str(e.value) and "draft_model" not in str(e.value).replace("--draft-model", "")


def test_the_cli_plans_dflash_by_name_with_the_block_from_its_config(capsys):
    from specroof.cli import main

    rc = main(["plan", "--target", "qwen3-8b", "--drafter", "dflash", "--acceptance", "dflash=mean:3.7",
               "--hardware", "h100-sxm-80gb"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc in (0, None) and "z-lab/Qwen3-8B-DFlash-b16 (block 16)" in out
    # the block of 16 bounds the chain: the anchor and 15 drafts, never more (the cheapest within 2% may be shorter)
    gammas = [int(g) for g in re.findall(r"(?:with|at) gamma (\d+)", out)]
    assert gammas and max(gammas) <= 15 and "read as measured on a chain of 15 drafts" in out


def test_the_models_page_lists_every_preset_and_published_drafter():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "models.md").read_text()
    for name, ids in HF_IDS.items():
        assert f"| `{name}` | `{ids[0]}` |" in page, name
    for p in PUBLISHED_DRAFTERS:
        assert f"`{p.target}`" in page and (p.repo in page or p.spec is None), p.repo


def test_the_api_and_speedup_resolve_dflash_by_the_target():
    from roofline import load_hardware
    from roofline.speculation.predict import predict_speedup

    r = predict_speedup(hardware=load_hardware("h100-sxm-80gb"), target="qwen3-8b", drafter="dflash", alpha=0.7)
    assert r.gamma == 15  # the published block of 16: the anchor and 15 drafts


def test_serve_resolves_dflash_by_its_target(capsys):
    from specroof.cli import main

    rc = main(["serve", "--hardware", "h100-sxm-80gb", "--target", "qwen3-8b", "--drafter", "dflash",
               "--acceptance", "0.7", "--rate", "1", "--requests", "20", "--json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert rc in (0, None) and "z-lab/Qwen3-8B-DFlash-b16" in json.dumps(out)
