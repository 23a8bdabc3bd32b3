"""The decode-attention kernel's KV read by batch, heads and GPU (docs/cost-model.md, section 54)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import roofline as rf
from roofline.costing import kv_efficiency as kve
from roofline.costing.passtime import pass_time
from roofline.costing.pricing import Pricing

ATTN = ("attn_scores", "attn_values")


def _kv_seconds(hw: str, batch: int, context: int, engine: str = "compiled") -> float:
    """Memory seconds of the attention operators of one plain step of Llama-3.1-8B over eight GPUs."""
    st = pass_time("llama-3.1-8b", Pricing.of(hw, engine=engine, tp=8), batch=batch, new_tokens=1, context=context)
    ops = list(st.operators)
    return float(sum(np.asarray(st.op_memory_s)[ops.index(o)] for o in ATTN))


def test_fit_reproduces_the_shipped_constants() -> None:
    fit = kve.fit_flash_decoding()
    assert fit["ceiling"] == pytest.approx(kve.AMPERE_CEILING, rel=1e-6)
    assert fit["tail"] == pytest.approx(kve.TAIL)
    assert fit["floor"] == pytest.approx(kve.FLOOR_S, rel=1e-5)
    assert fit["rms_log_error"] < 0.06  # the ten rows within a few percent


def test_flash_decoding_rows_order_by_waves() -> None:
    # batch 64 of the blog's table (128 units on 108 SMs) is its slowest call; the curve says so too
    s = kve.load_attention_rows()[0]["series"][0]
    t = kve.call_seconds(
        np.asarray(s["batch"]) * np.asarray(s["context"]) * 2 * 2 * 128 * 2,
        np.asarray(s["batch"]) * 2,
        np.asarray(s["context"]),
        108,
        2039e9,
        kve.AMPERE_CEILING,
    )
    assert int(np.argmax(t[:-1])) == int(np.argmax(s["kernel_us"][:-1])) == 2


def test_a100_partial_wave_reads_slower_per_sequence() -> None:
    # 128 sequences of one KV head on 108 SMs run 1.19 waves; 216 run two full ones: per sequence the first is dearer
    per_128 = _kv_seconds("a100-sxm-80gb", 128, 32768) / 128
    per_216 = _kv_seconds("a100-sxm-80gb", 216, 32768) / 216
    assert per_128 > 1.3 * per_216


def test_long_context_slower_on_a100_not_on_h100() -> None:
    for hw, lo, hi in (("a100-sxm-80gb", 1.3, 2.0), ("h100-sxm-80gb", 1.0, 1.06)):
        pr = Pricing.of(hw, engine="compiled", tp=8)
        flat = dataclasses.replace(pr.time_model, kv_read=None)
        assert pr.time_model.kv_read is not None
        new = float(pass_time("llama-3.1-8b", pr, batch=128, new_tokens=1, context=100000).t_step_s)
        old_pr = dataclasses.replace(pr)  # a new object: Pricing.of hands out one shared pricing per arguments
        old_pr.__dict__["time_model"] = flat  # the same pricing with the flat KV share of before section 54
        old = float(pass_time("llama-3.1-8b", old_pr, batch=128, new_tokens=1, context=100000).t_step_s)
        assert lo <= new / old <= hi, (hw, new / old)


def test_only_split_kv_engines_on_gpus_with_a_curve() -> None:
    assert Pricing.of("a100-sxm-80gb", engine="vllm").time_model.kv_read is None
    assert Pricing.of("a100-sxm-80gb", engine="hf").time_model.kv_read is None
    assert Pricing.of("v100-sxm2-32gb", engine="compiled", dtype="fp16").time_model.kv_read is None
    assert Pricing.of("b200-180gb", engine="compiled").time_model.kv_read.generation == "blackwell"


def test_scalar_and_array_speedups_agree() -> None:
    pr = Pricing.of("a100-sxm-80gb", engine="compiled", tp=8)
    one = rf.speedup(pr, "llama-3.1-8b", "window:512", 0.8, 3, batch=128, context=32768).speedup
    many = rf.speedup(pr, "llama-3.1-8b", "window:512", 0.8, 3, batch=np.array([64, 128]), context=32768).speedup
    assert float(one) == pytest.approx(float(np.asarray(many)[1]), rel=1e-12)


def test_the_tables_peak_is_the_profiles() -> None:
    from roofline.costing.hardware import load_hardware

    for src in kve.load_attention_rows():
        peak = src["series"][0]["peak_GB_per_s"] * 1e9
        assert peak == pytest.approx(load_hardware(src["hardware"]).bandwidth_bytes_per_s, rel=0.001)


def test_efficiency_reports_the_curve_with_its_floor() -> None:
    from roofline.costing.hardware import load_hardware

    a100, h100 = load_hardware("a100-sxm-80gb"), load_hardware("h100-sxm-80gb")
    # a small call is floor-bound; at 32k tokens and 32 sequences of one KV head the stream dominates
    assert float(kve.efficiency(4096, 1, 1, a100)) < 0.1 < float(kve.efficiency(32768, 32, 1, a100))
    # 128 sequences: 1.2 waves on an A100's 108 SMs, one wave on an H100's 132
    assert float(kve.efficiency(32768, 128, 1, a100)) < 0.5 < 0.8 < float(kve.efficiency(32768, 128, 1, h100))


def test_a_streaming_llm_draft_prices_its_window() -> None:
    from roofline.speculation.drafters import Ctx, DraftModel

    pr = Pricing.of("a100-sxm-80gb", engine="compiled", tp=8)
    ctx = Ctx.of(rf.get_model("llama-3.1-8b"), pr)
    full, window = DraftModel("llama-3.2-1b"), DraftModel("llama-3.2-1b", kv_window=512)
    g = np.asarray(3)
    # the window's draft steps at 100k tokens cost what the full draft's cost at 512
    assert float(window.draft_time(ctx, g, 64, 100000)) == pytest.approx(float(full.draft_time(ctx, g, 64, 512)))
    assert float(window.draft_time(ctx, g, 64, 100000)) < 0.2 * float(full.draft_time(ctx, g, 64, 100000))
    # it holds the window's KV, not the context's
    assert float(window.extra_memory_bytes(ctx, 64, 100000)) == float(full.extra_memory_bytes(ctx, 64, 512))
    assert window.name == "draft llama-3.2-1b (StreamingLLM 512)"
    # the scalar speedup (a chain plan steps aside for the window) and the array one agree
    one = rf.speedup(pr, "llama-3.1-8b", window, 0.8, 3, batch=64, context=32768).speedup
    many = rf.speedup(pr, "llama-3.1-8b", window, 0.8, 3, batch=np.array([64, 32]), context=32768).speedup
    assert float(one) == pytest.approx(float(np.asarray(many)[0]), rel=1e-12)
    with pytest.raises(rf.SpecroofError, match="kv_window"):
        DraftModel("llama-3.2-1b", kv_window=0)


def test_a_prefill_over_a_long_cache_fills_the_gpu() -> None:
    # 2048 new tokens per sequence: 32 query tiles per sequence-head, the GPU is full and the ceiling's rate holds
    pr = Pricing.of("a100-sxm-80gb", engine="compiled", tp=8)
    flat = dataclasses.replace(pr)
    flat.__dict__["time_model"] = dataclasses.replace(pr.time_model, kv_read=None)
    for n, lo, hi in ((1, 1.5, 2.5), (2048, 1.0, 1.05)):
        new = float(pass_time("llama-3.1-8b", pr, batch=128, new_tokens=n, context=32768).t_step_s)
        old = float(pass_time("llama-3.1-8b", flat, batch=128, new_tokens=n, context=32768).t_step_s)
        assert lo <= new / old <= hi, (n, new / old)


@pytest.mark.parametrize("hw", ["a100-sxm-80gb", "h100-sxm-80gb"])
def test_the_scalar_pricer_adds_the_kernels_excess_as_the_array_path_does(hw: str) -> None:
    from roofline.costing.passtime import pass_seconds
    from roofline.costing.passtime.pricer import scalar_pricer

    spec = rf.get_model("llama-3.1-8b")
    for tp in (1, 8):
        pr = Pricing.of(hw, engine="compiled", tp=tp)
        assert scalar_pricer(spec, pr, tp) is not None  # the fast path prices compiled
        for B, n, L in ((1, 1, 0), (8, 1, 100), (64, 4, 32768), (128, 1, 100000), (128, 70, 4096)):
            arr = pass_time(spec, pr, np.array([B, B + 1]), n, L)
            one = pass_time(spec, pr, B, n, L)
            assert float(pass_seconds(spec, pr, B, n, L)) == pytest.approx(float(arr.t_step_s[0]), rel=1e-12)
            assert np.allclose(np.asarray(one.op_memory_s), np.asarray(arr.op_memory_s)[:, 0], rtol=1e-12, atol=0)


def test_compiled_reads_the_cache_with_flashattention_splits() -> None:
    # MagicDec's published long-context tables ran FlashAttention-2's flash_attn_with_kvcache (section 54): at batch
    # 64 with one KV head per A100 it splits each sequence in three (1.78 waves, q 0.89), where flex-decoding's rule
    # (two splits, 1.19 waves, q 0.59) would price the read a third slower
    assert kve.KV_ENGINES["compiled"] == "fa2"
    fa2 = float(kve.occupancy(64, 32768 / kve.KEY_BLOCK, 108, rule="fa2"))
    flex = float(kve.occupancy(64, 32768 / kve.KEY_BLOCK, 108, rule="flex"))
    assert fa2 == pytest.approx(0.89, abs=0.01) and flex == pytest.approx(0.59, abs=0.01)
    hw = rf.load_hardware("a100-sxm-80gb")
    read = kve.KVRead(hw.bandwidth_bytes_per_s, 108, kve.AMPERE_CEILING, "ampere")
    assert read.split_rule == "fa2"
    slow = dataclasses.replace(read, split_rule="flex")
    nbytes = 64 * 32768 * kve.HEAD_BYTES
    assert float(slow.call_read_seconds(nbytes, 64, 32768, 1e15)) > 1.3 * float(
        read.call_read_seconds(nbytes, 64, 32768, 1e15)
    )
