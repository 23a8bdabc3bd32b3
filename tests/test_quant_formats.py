"""Weight formats (bits, groups, kernel families), the KV dtype rule, the drafter under TP and n-gram matching."""

from __future__ import annotations

import dataclasses

import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.passtime import pass_time
from roofline.costing.pricing import Pricing
from roofline.passes.dtypes import dtype_bytes, weight_format
from roofline.passes.model import get_model
from roofline.speculation.drafters import as_drafter, round_time


@pytest.mark.parametrize(
    ("text", "name", "bits"),
    [
        ("int4", "int4", 4.0),
        ("bits:4,group:128", "bits:4,group:128", 4.25),  # a 16-bit scale and a 16-bit zero per 128 weights
        ("INT4 , kernel:Marlin", "int4,group:128,kernel:marlin", 4.125),  # Marlin: one fp16 scale per group
        ("int4,kernel:awq", "int4,group:128,kernel:awq", 4.15625),  # fp16 scale + 4-bit zero
        ("bits:2.5,kernel:exl2", "bits:2.5,kernel:exl2", 2.5),  # EXL2's bpw counts its scales
        ("int4,kernel:gptfast", "int4,group:32,kernel:gptfast", 5.0),
    ],
)
def test_formats_parse_to_one_spelling_and_count_their_group_scales(text, name, bits):
    f = weight_format(text)
    assert (f.name, f.bits_per_weight) == (name, bits)
    assert dtype_bytes(text) == pytest.approx(bits / 8)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bits:20", r"must lie in \[1, 16\]"),
        ("bits:x", "must be a number"),
        ("int4,group:3", r"\[8, 65536\]"),
        ("int4,kernel:foo", "must be one of gptfast"),
        ("bits:3,group:64,kernel:exl2", "drop group:64"),
        ("int4,foo:1", "cannot read 'foo:1'"),
        ("int3", "must start with int8, int4, fp8 or bits:B"),
    ],
)
def test_bad_formats_name_the_field_and_the_range(text, message):
    with pytest.raises(SpecroofError, match=message):
        weight_format(text)
    with pytest.raises(SpecroofError):
        Pricing.of("h100-sxm-80gb", weight_dtype=text)


def test_plain_int4_keeps_the_engines_convention_and_gptfast_spelled_out_is_the_same():
    a = pass_time("llama-3.1-8b", "h100-sxm-80gb", engine="compiled", weight_dtype="int4")
    b = pass_time("llama-3.1-8b", "h100-sxm-80gb", engine="compiled", weight_dtype="int4,group:32,kernel:gptfast")
    assert float(a.t_step_s) == pytest.approx(float(b.t_step_s), rel=1e-12)


def test_a_marlin_kernel_streams_faster_than_gptfasts_and_fewer_bits_are_faster():
    def rate(w):
        return float(pass_time("llama-2-7b", "rtx-4090-24gb", engine="compiled", weight_dtype=w).tokens_per_s)

    assert rate("int4,group:128,kernel:marlin") > 1.2 * rate("int4")  # 1.0 vs the fitted 0.68 of the dense rate
    assert rate("bits:2.5,kernel:exl2") > rate("bits:4,kernel:exl2") > rate("bits:5,kernel:exl2")
    # the pure roofline applies no kernel ratio: only the bytes differ
    r = pass_time("llama-2-7b", "rtx-4090-24gb", weight_dtype="bits:4,group:128")
    m = pass_time("llama-2-7b", "rtx-4090-24gb", weight_dtype="int4,group:128,kernel:marlin")
    assert float(r.cost.weight_bytes) / float(m.cost.weight_bytes) == pytest.approx(4.25 / 4.125, rel=1e-3)


def test_fp8_weight_only_under_compiled_streams_at_torchaos_measured_share():
    bf16 = pass_time("llama-3.1-8b", "h100-sxm-80gb", engine="compiled")
    fp8 = pass_time("llama-3.1-8b", "h100-sxm-80gb", engine="compiled", weight_dtype="fp8")
    speedup = float(fp8.tokens_per_s / bf16.tokens_per_s)
    assert 1.2 < speedup < 1.5  # half the bytes at 0.70 of the rate, not 2x


def test_an_8bit_arithmetic_dtype_leaves_the_kv_cache_bf16_unless_asked():
    pr = Pricing.of("h100-sxm-80gb", dtype="fp8")
    assert pr.kv_dtype == "bf16"
    a = pass_time("llama-3.1-8b", pr, 8, 1, 8192)
    b = pass_time("llama-3.1-8b", "h100-sxm-80gb", 8, 1, 8192, "fp8", kv_dtype="fp8")
    assert float(a.cost.kv_read_bytes) == pytest.approx(2 * float(b.cost.kv_read_bytes))
    assert Pricing.of("h100-sxm-80gb").kv_dtype is None  # float dtypes: unchanged (the activations')


def test_the_draft_is_sharded_like_the_target_where_the_engine_does_so():
    target = get_model("llama-3.1-70b")
    sharded = Pricing.of("h100-sxm-80gb", engine="vllm", tp=4)
    assert sharded.engine.draft_tensor_parallel
    whole = sharded.with_(engine=dataclasses.replace(sharded.engine, draft_tensor_parallel=False))
    on_one = Pricing.of("h100-sxm-80gb", engine="vllm", tp=1)
    draft = "model:llama-3.2-3b"
    t_sharded = float(round_time(sharded, target, draft, 4, 1, 1024).t_draft_s)
    t_whole = float(round_time(whole, target, draft, 4, 1, 1024).t_draft_s)
    t_one = float(round_time(on_one, target, draft, 4, 1, 1024).t_draft_s)
    assert t_whole == pytest.approx(t_one)  # unsharded: the draft's passes as on one device
    assert t_sharded < 0.8 * t_whole  # four devices stream the draft's weights (its all-reduces added)
    # Hugging Face runs the assistant whole on one device; early exit runs the target's own sharded layers
    hf4 = Pricing.of("h100-sxm-80gb", engine="hf", tp=4)
    assert not hf4.engine.draft_tensor_parallel
    assert float(round_time(hf4, target, draft, 4, 1, 1024).t_draft_s) == pytest.approx(
        float(round_time(hf4.with_(tp=1), target, draft, 4, 1, 1024).t_draft_s)
    )
    ee4 = float(round_time(hf4.with_(engine=None), target, "early-exit:16", 4, 1, 1024).t_draft_s)
    ee1 = float(round_time(hf4.with_(engine=None, tp=1), target, "early-exit:16", 4, 1, 1024).t_draft_s)
    assert ee4 < 0.5 * ee1


def test_ngram_verifies_only_the_matched_share_of_the_batch():
    pr = Pricing.of("h100-sxm-80gb", engine="vllm")
    target = get_model("llama-3.1-8b")
    full = float(round_time(pr, target, "ngram", 4, 128, 1024).t_verify_s)
    half = float(round_time(pr, target, "ngram:0.5", 4, 128, 1024).t_verify_s)
    base = float(pass_time(target, pr, 128, 1, 1024).t_step_s)
    assert base < half < full
    assert float(round_time(pr, target, "ngram:1", 4, 128, 1024).t_verify_s) == pytest.approx(full)
    d = as_drafter("prompt-lookup:0.25")
    assert float(d.tokens_per_round(3.0)) == pytest.approx(1.5)  # 1 + 0.25 x (3 - 1)
    for bad in ("ngram:0", "ngram:1.5", "ngram:x"):
        with pytest.raises(SpecroofError, match="match"):
            as_drafter(bad)
