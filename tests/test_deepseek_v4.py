"""DeepSeek-V4 by name (docs/cost-model.md, section 58): the presets' sizes against the published ones, its
config.json read as the preset, what the reader refuses, and the compressed sparse attention's cache read counted by
hand from the section's formulas."""

from __future__ import annotations

import numpy as np
import pytest

import roofline as rf
from roofline.core.errors import SpecroofError
from roofline.costing.pricing import pricing_of
from roofline.passes.cost import forward_cost
from roofline.passes.model import ModelSpec, get_model

#: deepseek-ai/DeepSeek-V4-Pro config.json, as a public copy gives it (the fields the reader looks at)
PRO_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "expert_dtype": "fp4",
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "head_dim": 512, "hidden_act": "silu", "hidden_size": 7168,
    "index_head_dim": 128, "index_n_heads": 64, "index_topk": 1024, "max_position_embeddings": 1048576,
    "moe_intermediate_size": 3072, "n_routed_experts": 384, "n_shared_experts": 1, "num_attention_heads": 128,
    "num_experts_per_tok": 6, "num_hidden_layers": 61, "num_hash_layers": 3, "num_key_value_heads": 1,
    "num_nextn_predict_layers": 1, "o_groups": 16, "o_lora_rank": 1024, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "sliding_window": 128, "tie_word_embeddings": False, "vocab_size": 129280,
    "compress_ratios": [128, 128] + [4, 128] * 29 + [4, 0],
}  # fmt: skip


def test_the_presets_have_the_published_sizes() -> None:
    pro, flash = get_model("deepseek-v4-pro"), get_model("deepseek-v4-flash")
    # the model cards: Pro 1.6T parameters, 49B activated; Flash 284B, 13B activated (12.7B here without the
    # embedding and the head, 13.8B with them)
    assert pro.total_params == pytest.approx(1.6e12, rel=0.02)
    assert pro.active_params == pytest.approx(49e9, rel=0.03)
    assert flash.total_params == pytest.approx(284e9, rel=0.01)
    head = flash.embedding_params + flash.lm_head_params
    assert flash.active_params - head == pytest.approx(13e9, rel=0.03)
    # Pro-DSpark's safetensors: 892,727,580,904 bytes, Pro in fp8 with MXFP4 experts plus the DSpark drafter's three
    # MoE layers of the target's shape (its paper, section 5.1)
    dspark = pro.one_layer("dspark", n_layers=3, tie_embeddings=True)
    layers = dspark.weight_bytes(1.0) - dspark.embedding_params - dspark.norm_params - dspark.hc_params
    assert pro.weight_bytes(1.0) + layers == pytest.approx(892_727_580_904, rel=0.01)


def test_the_config_reads_as_the_preset() -> None:
    read = ModelSpec.from_hf_config(PRO_CONFIG, name="deepseek-v4-pro")
    preset = get_model("deepseek-v4-pro")
    assert read.total_params == preset.total_params
    for f in ("n_csa_layers", "n_hca_layers", "hca_ratio", "index_topk", "o_groups", "attn_window", "expert_format"):
        assert getattr(read, f) == getattr(preset, f), f
    assert (read.n_csa_layers, read.n_hca_layers) == (30, 31)
    flash = dict(PRO_CONFIG, compress_ratios=[0, 0] + [4, 128] * 20 + [4, 0], num_hidden_layers=43)
    f = ModelSpec.from_hf_config(flash)
    assert (f.n_csa_layers, f.n_hca_layers) == (21, 20)  # and two window-only layers


@pytest.mark.parametrize(
    "ratios, match",
    [
        ([4] * 60, "per layer"),  # shorter than the stack
        ([4, 128, 64] + [4] * 58, "mixes ratios"),
        ([4, -1] + [4] * 59, "per layer"),
    ],
)
def test_the_reader_refuses_ratios_it_cannot_price(ratios: list[int], match: str) -> None:
    with pytest.raises(SpecroofError, match=match):
        ModelSpec.from_hf_config(dict(PRO_CONFIG, compress_ratios=ratios))


def test_a_bad_shape_is_refused_in_one_line() -> None:
    pro = get_model("deepseek-v4-pro")
    with pytest.raises(SpecroofError, match="o_groups"):
        pro.replace(o_groups=7)
    with pytest.raises(SpecroofError, match="one key/value head"):
        pro.replace(n_kv_heads=2)


def test_the_cache_read_is_the_sections_count() -> None:
    pro = get_model("deepseek-v4-pro")
    kb, h, ihd = 1.0, 512, 128
    for L, n, B in ((1024, 1, 1), (100_000, 1, 4), (100_000, 4, 2), (64, 3, 1)):
        c = forward_cost(pro, batch=B, new_tokens=n, context=L, weight_dtype="fp8", kv_dtype="fp8")
        rows = 61 * min(L, 128) + n * 30 * min(L / 4, 1024) + 31 * L / 128
        want = B * (rows * h + 30 * (L / 4) * ihd) * kb
        assert float(np.sum(c.bytes_kv_read)) == pytest.approx(want, rel=1e-12)
        # every cached entry is stored once per context token: a CSA layer's entry and key per 4, an HCA's per 128
    assert pro.kv_elements_per_token == 30 * (512 + 128) // 4 + 31 * 512 // 128 == 4924


def test_the_window_caps_the_read_and_the_indexer_grows_with_the_context() -> None:
    flash = get_model("deepseek-v4-flash")

    def read(L: int) -> float:
        return float(np.sum(forward_cost(flash, context=L, kv_dtype="fp8").bytes_kv_read))

    # under the window every layer reads the whole context; past it the read grows by the compressed entries and the
    # indexer's keys only: 128 000 more tokens add far less than 128 000 tokens of a full cache (43 x 512 bytes each)
    assert read(200_000) - read(72_000) < 0.2 * 128_000 * 43 * 512
    assert read(200_000) > read(72_000)


def test_an_mtp_module_and_a_drafter_layer_are_window_only_layers() -> None:
    one = get_model("deepseek-v4-pro").one_layer("mtp layer")
    assert (one.n_layers, one.n_csa_layers, one.n_hca_layers, one.attn_window) == (1, 0, 0, 128)
    assert one.is_moe and one.expert_format == "mxfp4"


def test_the_cache_is_whole_on_every_rank() -> None:
    # one shared KV head: tensor parallelism splits the query heads, and each rank reads the whole cache
    c = forward_cost("deepseek-v4-pro", batch=8, context=65536)
    assert c.kv_replicated
    p1 = rf.pass_time("deepseek-v4-pro", pricing_of("b300-288gb", tp=8), batch=64, context=65536)
    p2 = rf.pass_time("deepseek-v4-pro", pricing_of("b300-288gb", tp=8), batch=64, context=131072)
    assert float(p2.t_step_s) > float(p1.t_step_s)


def test_plan_prices_its_mtp_module() -> None:
    from specroof.cli import main

    assert main(["plan", "--hardware", "b300-288gb", "--target", "deepseek-v4-flash", "--drafter", "mtp",
                 "--engine", "vllm", "--tp", "4", "--acceptance", "mtp=0.8", "--json"]) == 0  # fmt: skip
