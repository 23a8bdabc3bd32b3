"""The fused-MoE kernel where its experts turn compute-bound (docs/cost-model.md, section 56): the tile ladder, the
tiles' rate, the wide kernel rows in the fit, and every pricing path pricing the tiles alike."""

import numpy as np
import pytest

import roofline as rf
from roofline.costing.engine import load_engine
from roofline.evidence.published_kernels import MAX_TOKENS, fit_moe_kernel, kernel_table, load_kernel_rows
from roofline.passes.cost import fused_moe_tile_rows


def test_tile_ladder_follows_the_tokens_per_expert():
    # Mixtral (8 experts, 2 per token): the tuned H100 table's ladder, 16 to 32 tokens, 32 to 96, 64 to 512, 128 on
    got = [int(fused_moe_tile_rows(t, 8, 2)) for t in (1, 32, 33, 96, 97, 512, 513, 2048)]
    assert got == [16, 16, 32, 32, 64, 64, 128, 128]
    # Qwen3-30B-A3B (128 experts, 8 per token): the tuned H200 table's 16 to 128 tokens, 32 at 256, 64 at 512
    assert list(fused_moe_tile_rows(np.array([64, 128, 256, 512]), 128, 8)) == [16, 16, 32, 64]
    # DeepSeek-V3 (256 experts, 8 per token) at a verify of 64 x 4 tokens: 8 per expert, 16-row tiles
    assert int(fused_moe_tile_rows(256, 256, 8)) == 16


def test_wide_rows_are_loaded_and_fitted():
    rows = load_kernel_rows()
    assert MAX_TOKENS >= 1536 and rows["tokens"].max() == 1536
    assert set(rows[rows["tokens"] > 128]["use"]) == {"calibration"}
    values, _ = fit_moe_kernel()
    e = load_engine("vllm")
    # the shipped profile holds the fit's values (what the fit writes), the tile term among them
    assert values["moe_tile_half_rows"] == pytest.approx(e.moe_tile_half_rows, rel=0.01)
    assert values["moe_layer_s"] == pytest.approx(e.moe_layer_s, rel=0.01)
    assert values["moe_expert_s"] == pytest.approx(e.moe_expert_s, rel=0.01)


def test_kernel_rows_across_the_knee():
    t = kernel_table()
    wide = t[t["tokens"] > 128]
    # Mixtral at 512 tokens was priced 21% fast by max(memory, compute at the engine's GEMM rate); every wide row is
    # within 10% with the tiles at their own rate
    assert wide["error_engine"].abs().max() < 0.10
    mixtral = wide[wide["series"].str.startswith("mixtral")].set_index("tokens")["error_engine"]
    assert mixtral[512] > -0.10
    # and the 1-128 token rows keep their accuracy (median 5.9%, max 11% before the tile term)
    narrow = t[(t["tokens"] <= 128) & (t["use"] == "calibration")]
    assert narrow["error_engine"].abs().median() < 0.065 and narrow["error_engine"].abs().max() < 0.115


@pytest.mark.parametrize("engine", ["vllm", "sglang-spec-v2"])
def test_every_path_prices_the_tiles_alike(engine):
    # the scalar step pricer and the array path agree on a wide MoE verify, and the tiles cost more than the engine's
    # GEMM rate would give where they are compute-bound (a wide prefill-sized call on one H100)
    kw = dict(batch=64, new_tokens=16, context=512, engine=engine)
    fast = rf.pass_time("qwen3-30b-a3b", "h100-sxm-80gb", **kw)
    slow = rf.pass_time("qwen3-30b-a3b", "h100-sxm-80gb", **{**kw, "batch": np.array([64])})
    assert float(fast.t_step_s) == pytest.approx(float(np.ravel(slow.t_step_s)[0]), rel=1e-9)
    assert float(fast.cost.routed_flops) == pytest.approx(float(np.ravel(slow.cost.routed_flops)[0]), rel=1e-12)
    assert float(fast.cost.routed_flops) > 0


def test_the_tile_rate_is_the_triton_tables_own():
    # 4-bit experts and gpt-oss's MXFP4 ones run other kernels than the tables time: no tile term for them (section 56)
    from roofline.costing.pricing import Pricing

    pr = Pricing.of("h100-sxm-80gb", engine="vllm")
    tm = pr.time_model
    assert tm.moe_tile_excess(512.0, "bf16") != 0.0 and tm.moe_tile_excess(512.0, "fp8") != 0.0
    assert tm.moe_tile_excess(512.0, "int4") == 0.0
    gpt = rf.pass_time("gpt-oss-120b", "h100-sxm-80gb", batch=64, new_tokens=8, context=512, engine="vllm")
    assert float(gpt.cost.routed_flops) == 0.0
    # at 128-row tiles the kernel beats the engine's GEMM rate, at 16-row ones it is far below it
    assert tm.moe_tile_excess(4096.0) < 0.0 < tm.moe_tile_excess(16.0)
