"""The Qwen3.5 family by name: its presets' sizes, their published DFlash drafters, MTP, the state checkpoints a
verify pays whatever drafted it, and the four commands on a dense and a MoE member under each engine."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.passes.model import HF_IDS, get_model
from roofline.speculation.drafter_presets import published
from roofline.speculation.drafters import ParallelBlock, as_drafter, default_gamma
from roofline.speculation.speculative import checkpoint_seconds, speedup

#: each preset's language-model parameters (its text_config with the embeddings, without the vision encoder and the
#: MTP layer) against the size its name and model card publish: 0.8B, 2B, 4B, 9B, 27B, 35B-A3B, 122B-A10B, 397B-A17B
#: (the small ones' cards and public registries give the language model as 0.75B, 1.88B and 4.2B; the 9B's GGUF
#: metadata 8.95B). The MoE ones' active parameters (embeddings included) against their A-number.
SIZES = {
    "qwen3.5-0.8b": (0.75e9, None),
    "qwen3.5-2b": (1.88e9, None),
    "qwen3.5-4b": (4.2e9, None),
    "qwen3.5-9b": (8.95e9, None),
    "qwen3.5-27b": (27e9, None),
    "qwen3.5-35b-a3b": (35e9, 3e9),
    "qwen3.5-122b-a10b": (122e9, 10e9),
    "qwen3.5-397b-a17b": (397e9, 17e9),
}
#: the presets z-lab publishes a DFlash drafter for (the DFlash README; 397B-A17B "coming soon", 0.8B and 2B none)
DFLASH = {
    "qwen3.5-4b": "z-lab/Qwen3.5-4B-DFlash",
    "qwen3.5-9b": "z-lab/Qwen3.5-9B-DFlash",
    "qwen3.5-27b": "z-lab/Qwen3.5-27B-DFlash",
    "qwen3.5-35b-a3b": "z-lab/Qwen3.5-35B-A3B-DFlash",
    "qwen3.5-122b-a10b": "z-lab/Qwen3.5-122B-A10B-DFlash",
}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_each_preset_has_its_published_size_and_the_family_layout(name):
    m = get_model(name)
    total, active = SIZES[name]
    assert m.total_params == pytest.approx(total, rel=0.03)
    if active is None:
        assert not m.is_moe
    else:
        # the A-number is the active count rounded (3.45B reads A3B): within 20% above it, 3% below
        assert m.is_moe and 0.97 * active <= m.active_params <= 1.2 * active
        assert m.n_shared_experts == 1 and m.d_ff_shared == m.d_ff_expert
    # three Gated DeltaNet layers of four, gated attention heads of 256, the float32 state, one MTP layer, 256K
    assert m.linear_kind == "gdn" and m.n_linear_layers * 4 == m.n_layers * 3
    assert m.head_dim == 256 and m.attn_output_gate and m.state_dtype == "fp32"
    assert m.vocab_size == 248320 and m.max_context == 262144 and m.mtp_modules == 1
    assert m.tie_embeddings == (name in ("qwen3.5-0.8b", "qwen3.5-2b", "qwen3.5-4b"))


def test_the_27b_reads_as_its_config_json_gives_it():
    m = get_model("qwen3.5-27b")  # hidden 5120, 64 layers, MLP 17408, 24 query / 4 KV heads, 16 / 48 linear heads
    assert (m.d_model, m.n_layers, m.d_ff, m.n_heads, m.n_kv_heads) == (5120, 64, 17408, 24, 4)
    assert (m.linear_groups, m.linear_heads, m.linear_key_dim, m.linear_value_dim, m.linear_conv) == (
        16,
        48,
        128,
        128,
        4,
    )
    assert not m.tie_embeddings


def test_the_presets_answer_to_their_hugging_face_ids_and_short_names():
    for name in SIZES:
        assert HF_IDS[name][0].startswith("Qwen/Qwen3.5-")
        for hf in HF_IDS[name]:
            assert get_model(hf) is get_model(name)
    assert get_model("qwen3.5-122b") is get_model("qwen3.5-122b-a10b")
    assert get_model("Qwen/Qwen3.5-397B-A17B-FP8") is get_model("qwen3.5-397b-a17b")


@pytest.mark.parametrize("name", sorted(DFLASH))
def test_dflash_resolves_to_the_published_drafter_with_its_block(name):
    target = get_model(name)
    d = as_drafter("dflash", target)
    assert isinstance(d, ParallelBlock) and d.block_size == 16 and default_gamma(d) == 15
    assert d.spec.name == DFLASH[name] == published(name, "dflash").repo
    assert as_drafter(f"dflash:{DFLASH[name]}") == d
    assert d.spec.vocab_size == target.vocab_size and d.spec.head_dim == 128
    assert d.spec.total_params < target.total_params / 2


def test_the_drafters_shapes_match_their_published_file_sizes():
    """Layers plus fc (one d x d per tapped target layer), in BF16, against the published checkpoint sizes: the 4B's
    tensor count 634,425,856; the 9B's 2.1 GB; the 27B's 3.46 GB (3.22 GiB); the 122B-A10B's 1.5 GB."""

    def weights(repo: str, taps: int) -> float:
        s = as_drafter(f"dflash:{repo}").spec
        layers = s.total_params - s.embedding_params - s.norm_params
        return layers + taps * s.d_model * s.d_model

    assert weights("z-lab/Qwen3.5-4B-DFlash", 8) == pytest.approx(634_425_856, rel=0.001)
    assert 2 * weights("z-lab/Qwen3.5-9B-DFlash", 5) == pytest.approx(2.1e9, rel=0.03)
    assert 2 * weights("z-lab/Qwen3.5-27B-DFlash", 5) == pytest.approx(3.46e9, rel=0.01)
    assert 2 * weights("z-lab/Qwen3.5-122B-A10B-DFlash", 8) == pytest.approx(1.5e9, rel=0.05)
    four = as_drafter("dflash:z-lab/Qwen3.5-4B-DFlash").spec
    assert (four.n_layers, four.n_sliding_layers, four.sliding_window) == (6, 5, 4096)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_mtp_prices_the_one_mtp_layer_of_every_preset(name):
    r = speedup("b200-180gb", name, "mtp", [0.8], 1, context=1024, engine="vllm", tp=8 if "397b" in name else 1)
    assert float(r.speedup) > 0 and float(r.t_checkpoint_s) > 0 and float(r.t_draft_s) > 0
    with pytest.raises(Exception, match="ships 1 MTP module"):  # one rate over the reused module's steps: refused
        speedup("b200-180gb", name, "mtp", 0.8, 3, context=1024, engine="vllm")


def test_no_dflash_drafter_where_none_is_published():
    for name in ("qwen3.5-0.8b", "qwen3.5-2b", "qwen3.5-397b-a17b"):
        assert published(name, "dflash") is None


@pytest.mark.parametrize("name", ["qwen3.5-9b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b"])
def test_dflash_and_mtp_verify_pay_the_same_state_checkpoints(name):
    from roofline.costing.pricing import pricing_for

    pr = pricing_for("b200-180gb", None, None, None, None, None, None, "sglang")
    for g in (1, 3):
        ckpt = float(checkpoint_seconds(pr, get_model(name), g, 1, 2048))
        assert ckpt > 0
        # a per-position curve: one rate over a reused MTP module's steps is refused (section 29)
        rows = {d: speedup(pr, name, d, [0.8] * g, g, context=2048) for d in ("mtp", "dflash")}
        for d, r in rows.items():  # one rule, whatever drafted the tokens the target verifies
            assert float(r.t_checkpoint_s) == pytest.approx(ckpt, rel=1e-9), d
        assert float(rows["dflash"].t_verify_s) == pytest.approx(float(rows["mtp"].t_verify_s), rel=1e-9)
    arr = speedup(pr, name, "dflash", 0.8, np.array([0, 1, 3]), context=2048)  # the array path: the same rule
    assert np.asarray(arr.t_checkpoint_s)[0] == 0 and np.all(np.asarray(arr.t_checkpoint_s)[1:] > 0)


def test_the_python_api_resolves_dflash_by_the_target():
    r = speedup("b200-180gb", "qwen3.5-27b", "dflash", 0.8, 15, engine="vllm")
    assert r.drafter == "dflash z-lab/Qwen3.5-27B-DFlash (block 16)" and float(r.speedup) > 1


COMMANDS = ("plan", "tree", "speedup", "serve")


@pytest.mark.parametrize("target", ["qwen3.5-9b", "qwen3.5-35b-a3b"])
@pytest.mark.parametrize("drafter", ["dflash", "mtp"])
@pytest.mark.parametrize("engine", ["hf", "sglang", "vllm"])
def test_the_commands_run_on_a_dense_and_a_moe_member(target, drafter, engine, capsys):
    from specroof.cli import main

    acc = "dflash=mean:5" if drafter == "dflash" else "mtp=mean:1.8@1"
    base = ["--hardware", "b200-180gb", "--target", target, "--drafter", drafter, "--engine", engine]
    runs = {
        "plan": ["plan", *base, "--acceptance", acc],
        "tree": ["tree", *base],
        "speedup": ["speedup", *base, "--acceptance", acc],
        "serve": ["serve", *base, "--acceptance", acc, "--rate", "2", "--requests", "16"],
    }
    for cmd in COMMANDS:
        assert main(runs[cmd]) in (0, None), cmd
        out = capsys.readouterr().out
        assert target in out or cmd == "plan", cmd
        if drafter == "dflash" and cmd in ("plan", "speedup"):
            assert "z-lab/Qwen3.5-" in out


def test_plan_shows_the_checkpoint_of_a_dflash_round_on_a_hybrid(capsys):
    import json

    from specroof.cli import main

    rc = main(["plan", "--hardware", "b200-180gb", "--target", "qwen3.5-35b-a3b", "--drafter", "dflash",
               "--engine", "sglang", "--acceptance", "dflash=mean:5", "--json"])  # fmt: skip
    assert rc in (0, None)
    rows = json.loads(capsys.readouterr().out)["table"]
    spec = [r for r in rows if r["strategy"] != "none"]
    assert spec and all(r["t_checkpoint_s"] > 0 for r in spec)
    assert all(r["gamma"] <= 15 for r in spec)
