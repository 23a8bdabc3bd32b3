"""The fused-MoE kernel's floor and time per expert (docs/cost-model.md, section 40): the kernel tables, the fit that
sets the serving profiles' terms, and the terms in every pricing path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.engine import load_engine
from roofline.costing.passtime import fused_moe_layer_seconds, pass_seconds, pass_time
from roofline.costing.pricing import Pricing
from roofline.costing.timemodel import DENSE_MLP_FLOOR_SHARE
from roofline.evidence.published_kernels import (
    KERNELS_DIR,
    fit_moe_kernel,
    kernel_summary,
    kernel_table,
    load_kernel_rows,
)
from roofline.passes.cost import expected_experts_touched
from roofline.passes.model import get_model

SERVING = ("vllm", "vllm-0.12", "vllm-0.14", "sglang", "sglang-spec-v2")


@pytest.fixture(scope="module")
def fitted():
    return fit_moe_kernel()


def test_kernel_rows_keep_a_third_of_their_sources_and_rows_held_out():
    # the split of the 1-128-token tables, chosen before any row was priced (the wide rows of section 56 calibrate)
    rows = load_kernel_rows(KERNELS_DIR)
    assert len(rows) >= 30
    held = rows[rows["use"] == "validation"]
    assert len(held) / len(rows) >= 0.25  # rows (the held-out tables are shorter)
    files = rows.groupby("file")["use"].first()
    assert (files == "validation").sum() / len(files) >= 1 / 3  # sources
    assert rows["tokens"].max() <= 128


def test_the_serving_profiles_hold_the_fitted_terms(fitted):
    values, _ = fitted
    for name in SERVING:
        e = load_engine(name)
        assert e.moe_layer_s == pytest.approx(values["moe_layer_s"], rel=2e-3), name
        assert e.moe_expert_s == pytest.approx(values["moe_expert_s"], rel=2e-3), name
    # engines without a kernel table keep none
    assert load_engine("trtllm").moe_layer_s == 0.0 and load_engine("compiled").moe_layer_s == 0.0


def test_the_terms_price_calibration_and_held_out_tables_and_beat_the_bare_roofline(fitted):
    _, table = fitted
    s = kernel_summary(table).set_index("use")
    assert s.loc["calibration", "median_engine"] <= 0.10
    assert s.loc["validation", "median_engine"] <= 0.15
    for use in ("calibration", "validation"):
        assert s.loc[use, "median_engine"] < s.loc[use, "median_roofline"] / 3


def test_the_shipped_table_is_the_fitted_one(fitted):
    _, table = fitted
    shipped = kernel_table()  # under the profiles as shipped
    assert np.allclose(shipped["engine_us"], table["engine_us"], rtol=2e-3)


def test_one_layer_is_the_floor_plus_each_expert_streamed_and_its_time():
    pr = Pricing.of("h100-sxm-80gb", engine="sglang", dtype="bf16")
    e, tm = pr.engine, pr.time_model
    E, k, d, f = 128, 8, 2048, 768
    for T in (1, 4, 16):
        U = float(expected_experts_touched(E, k, T))
        mem = U * 3 * d * f * 2.0 / tm.bandwidth_bytes_per_s + U * e.moe_expert_s
        assert float(fused_moe_layer_seconds(pr, E, k, d, f, T)) == pytest.approx(e.moe_layer_s + mem, rel=1e-12)
    # the datasheet roofline has neither term: the experts' bytes alone
    bare = Pricing.of("h100-sxm-80gb", dtype="bf16")
    U1 = float(expected_experts_touched(E, k, 1))
    assert float(fused_moe_layer_seconds(bare, E, k, d, f, 1)) == pytest.approx(
        U1 * 3 * d * f * 2.0 / bare.time_model.bandwidth_bytes_per_s, rel=1e-12
    )


@pytest.mark.parametrize("model", ["deepseek-v2-lite", "mixtral-8x7b", "gpt-oss-120b"])
def test_a_pass_pays_the_floor_per_moe_layer_and_the_time_per_expert_in_every_path(model):
    spec = get_model(model)
    pr = Pricing.of("h200-sxm-141gb", engine="sglang", tp=2)
    e = pr.engine
    off = pr.with_(engine=dataclasses.replace(e, moe_layer_s=0.0, moe_expert_s=0.0))
    m = spec.n_moe_layers
    # the fused call's floor, less the dense MLP kernels' share of the layer floor it replaces (section 40)
    floor = e.moe_layer_s - DENSE_MLP_FLOOR_SHARE * pr.time_model.layer_overhead_s
    assert 0 < floor < e.moe_layer_s
    for B, n in ((1, 1), (1, 4), (8, 4)):
        T = B * n
        U = float(expected_experts_touched(spec.n_experts, spec.experts_per_token, T))
        want = m * (floor + U * e.moe_expert_s)
        fast = pass_seconds(spec, pr, B, n, 1024) - pass_seconds(spec, off, B, n, 1024)
        full = float(pass_time(spec, pr, B, n, 1024).t_step_s) - float(pass_time(spec, off, B, n, 1024).t_step_s)
        array = float(pass_time(spec, pr, np.array([B]), n, 1024).t_step_s[0])
        array_off = float(pass_time(spec, off, np.array([B]), n, 1024).t_step_s[0])
        # memory-bound MoE operator at these token counts: the terms add as they are
        assert float(fast) == pytest.approx(want, rel=1e-6), (model, B, n)
        assert full == pytest.approx(want, rel=1e-6)
        assert array - array_off == pytest.approx(want, rel=1e-6)


def test_a_dense_model_and_the_pure_roofline_are_untouched():
    pr = Pricing.of("h100-sxm-80gb", engine="sglang")
    off = pr.with_(engine=dataclasses.replace(pr.engine, moe_layer_s=0.0, moe_expert_s=0.0))
    spec = get_model("llama-3.1-8b")
    assert pass_seconds(spec, pr, 4, 4, 1024) == pass_seconds(spec, off, 4, 4, 1024)


def test_a_kernel_table_out_of_range_is_refused_naming_the_field(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'source = "s"\nurl = "u"\nhardware = "h100-sxm-80gb"\nuse = "calibration"\n[[series]]\nname = "x"\n'
        'command = "c"\nexperts = 8\nexperts_per_token = 2\nhidden = 64\nmoe_intermediate = 64\ntp = 1\n'
        'weight_dtype = "bf16"\ntokens = [1, 4096]\nkernel_us = [1.0, 2.0]\n'
    )
    with pytest.raises(SpecroofError, match="tokens must be whole numbers in"):
        load_kernel_rows(tmp_path)
    bad.write_text(bad.read_text().replace('weight_dtype = "bf16"', 'weight_dtype = "int3"'))
    with pytest.raises(SpecroofError, match="weight_dtype must be one of"):
        load_kernel_rows(tmp_path)
