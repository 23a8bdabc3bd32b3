"""Sparse-MoE verification (docs/cost-model.md, sections 28 and 29): experts touched, expert formats, the fused
kernel's tiles, MoE drafters as shipped, and one rate not stretched over a reused MTP module."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import roofline as rf
from roofline.core.errors import SpecroofError
from roofline.costing.passtime import moe_kernel_of, pass_seconds
from roofline.costing.pricing import Pricing
from roofline.deploy.planner import plan
from roofline.passes.cost import expected_experts_touched, forward_cost, fused_moe_tile_rows, moe_expert_rows
from roofline.passes.model import get_model
from roofline.speculation.acceptance import MeanAccepted, PositionCurve
from roofline.speculation.drafters import EAGLE3_HEADS, Ctx, as_drafter
from roofline.speculation.predict import predict_speedup
from roofline.speculation.speculative import speedup

H200 = "h200-sxm-141gb"
GIB = 2**30


def _simulated_rows(E: int, k: int, T: int, rng: np.random.Generator, trials: int = 400) -> float:
    """The fused kernel's padded rows by drawing each token's k distinct experts (the routing the formula assumes)."""
    bm = int(fused_moe_tile_rows(T, E, k))  # the kernel's BLOCK_SIZE_M by the tokens per expert (section 56)
    out = []
    for _ in range(trials):
        picks = np.argsort(rng.random((T, E)), axis=1)[:, :k].ravel()
        counts = np.bincount(picks, minlength=E)
        out.append(float(np.sum(np.ceil(counts / bm) * bm)))
    return float(np.mean(out))


@pytest.mark.parametrize("E, k, T", [(128, 4, 1), (128, 4, 4), (128, 4, 64), (128, 4, 300), (8, 2, 40)])
def test_padded_rows_match_a_simulated_routing(E: int, k: int, T: int) -> None:
    rng = np.random.default_rng(7)
    exact = float(moe_expert_rows(E, k, T, "fused"))
    assert exact == pytest.approx(_simulated_rows(E, k, T, rng), rel=0.02)


def test_padded_rows_bound_the_useful_rows_and_one_token_fills_k_tiles() -> None:
    T = np.array([1, 2, 3, 8, 31, 128, 129, 1000, 20000])
    rows = moe_expert_rows(128, 4, T, "fused")
    assert np.all(rows >= T * 4 - 1e-6)
    assert float(rows[0]) == pytest.approx(4 * 16)  # one token: its 4 experts, one 16-row tile each
    assert rows[-1] / (T[-1] * 4) < 1.10  # hundreds of tokens per expert: the padding is a remainder of a 128-row tile
    assert np.array_equal(moe_expert_rows(128, 4, T), T * 4.0)  # no kernel: the useful rows


def test_a_k_token_verify_reads_the_experts_it_touches_in_their_own_format() -> None:
    spec = rf.get_model("gpt-oss-120b")
    assert spec.expert_format == "mxfp4" and spec.mtp_modules == 0
    # the model card's checkpoint sizes: 60.8 GiB and 12.8 GiB (bf16 attention beside 4.25-bit experts)
    assert spec.weight_bytes(2.0) / GIB == pytest.approx(60.8, rel=0.005)
    assert rf.get_model("gpt-oss-20b").weight_bytes(2.0) / GIB == pytest.approx(12.8, rel=0.01)
    m, P = spec.n_moe_layers, spec.expert_params
    base, verify = (forward_cost(spec, 1, n, 1024, weight_dtype="bf16") for n in (1, 4))
    experts = [c.bytes_weights[list(c.operators).index("mlp")] for c in (base, verify)]
    assert experts[0] == pytest.approx(m * 4 * P * 4.25 / 8)
    assert experts[1] == pytest.approx(m * float(expected_experts_touched(128, 4, 4)) * P * 4.25 / 8)
    assert experts[1] / experts[0] == pytest.approx(15.3 / 4, rel=0.01)
    # the same checkpoint with its experts in bf16 reads 16 / 4.25 times those bytes
    bf16 = forward_cost(spec.replace(expert_format=""), 1, 1, 1024, weight_dtype="bf16")
    assert bf16.bytes_weights[list(bf16.operators).index("mlp")] / experts[0] == pytest.approx(16 / 4.25)


def test_only_the_serving_engines_run_the_fused_kernel_and_the_roofline_counts_useful_flops() -> None:
    assert moe_kernel_of(Pricing.of(H200)) is None
    assert moe_kernel_of(Pricing.of(H200, engine="hf")) is None
    assert {moe_kernel_of(Pricing.of(H200, engine=e)) for e in ("vllm", "sglang", "trtllm", "serving")} == {"fused"}
    plain = forward_cost("mixtral-8x7b", 4, 4, 512, weight_dtype="bf16")
    fused = forward_cost("mixtral-8x7b", 4, 4, 512, weight_dtype="bf16", moe_kernel="fused")
    mlp = list(plain.operators).index("mlp")
    assert fused.flops[mlp] > plain.flops[mlp] and np.array_equal(
        np.delete(fused.flops, mlp), np.delete(plain.flops, mlp)
    )
    with pytest.raises(SpecroofError, match="moe_kernel"):
        forward_cost("mixtral-8x7b", 1, 1, 0, moe_kernel="grouped")


@pytest.mark.parametrize("target", ["mixtral-8x7b", "gpt-oss-20b", "deepseek-v2-lite"])
def test_every_pricing_path_prices_the_fused_tiles_alike(target: str) -> None:
    """The scalar pricer's table, the per-operator scalar path and the array path give one number."""
    pr = Pricing.of("h100-sxm-80gb", engine="vllm")
    spec = rf.get_model(target)
    for b, n in ((1, 1), (4, 4), (32, 5), (64, 8)):
        one = float(pass_seconds(spec, pr, b, n, 700))
        arr = float(pass_seconds(spec, pr, np.array([b, b]), n, 700)[0])
        cost = forward_cost(spec, np.array([b]), n, 700, weight_dtype="bf16", moe_kernel="fused")
        slow = float(pr.time_model.pass_seconds(cost, pr.dtype)[0])
        st = rf.pass_time(spec, pr, b, n, 700)
        assert one == pytest.approx(slow, rel=1e-9) and arr == pytest.approx(slow, rel=1e-9)
        assert float(st.t_step_s) == pytest.approx(slow, rel=1e-9)
        assert float(st.t_compute_s) == pytest.approx(
            float(np.sum(pr.time_model.operator_times(cost, pr.dtype)[1])), rel=1e-9
        )


def test_padded_tiles_make_a_batched_moe_verify_compute_bound_sooner() -> None:
    # 1024 tokens over 128 experts, 4 each: 32 per expert, 64-row tiles (the tile ladder of section 56)
    pr, spec = Pricing.of(H200, engine="sglang", tp=4), "gpt-oss-120b"
    fused = rf.pass_time(spec, pr, 64, 16, 1024)
    assert bool(fused.t_compute_s > fused.t_memory_s)
    useful = forward_cost(spec, np.array([64]), 16, 1024, weight_dtype="bf16")
    op_mem, op_comp = pr.time_model.operator_times(useful, pr.dtype, 4)
    assert float(np.sum(op_comp)) < float(np.sum(op_mem))  # counting useful FLOPs, the pass stayed memory bound


# -- the drafters the MoE models ship ---------------------------------------------------------------------------


def test_eagle3_heads_of_moe_targets_are_the_published_dense_heads() -> None:
    for name, shape in EAGLE3_HEADS.items():
        head = as_drafter("eagle3").layer_spec(rf.get_model(name))
        assert not head.is_moe and head.n_layers == 1 and head.vocab_size == shape["vocab"]
        assert head.d_model == shape["d_model"] and head.n_kv_heads == shape["n_kv_heads"]
    # a dense target keeps EAGLE's target-shaped layer and the target's head
    assert as_drafter("eagle3").layer_spec(rf.get_model("llama-3.1-8b")).vocab_size == 128256


def test_mtp_is_the_module_count_the_target_ships() -> None:
    v3 = rf.get_model("deepseek-v3")
    assert v3.mtp_modules == 1 and as_drafter("mtp").modules_for(v3) == 1
    layer = as_drafter("mtp").layer_spec(v3)
    own = layer.total_params - layer.embedding_params - layer.lm_head_params
    assert own / 1e9 == pytest.approx(11.6, abs=0.2)  # DeepSeek's README_WEIGHTS: 11.5B unique MTP parameters
    with pytest.raises(SpecroofError, match="ships 1 MTP module"):
        as_drafter("mtp:3").layer_spec(v3)
    with pytest.raises(SpecroofError, match="ships no multi-token-prediction module"):
        speedup(H200, "kimi-k2", "mtp", 0.8, 1, tp=8)
    cfg = {"model_type": "deepseek_v3", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 3,
           "vocab_size": 1000, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
           "num_nextn_predict_layers": 2}  # fmt: skip
    assert rf.ModelSpec.from_hf_config(cfg).mtp_modules == 2


def test_one_rate_is_not_stretched_over_a_reused_mtp_module() -> None:
    pr = Pricing.of(H200, engine="sglang", tp=8, weight_dtype="fp8")
    assert float(speedup(pr, "deepseek-v3", "mtp", 0.85, 1).speedup) > 1
    with pytest.raises(SpecroofError) as err:
        speedup(pr, "deepseek-v3", "mtp", 0.85, 3)
    assert "ships 1 MTP module" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SpecroofError, match="reused past step 1"):
        predict_speedup(hardware=pr, target="deepseek-v3", drafter="mtp", alpha=0.85, gamma=3)
    # a curve over the steps, or a mean measured at that gamma, prices them
    assert float(speedup(pr, "deepseek-v3", "mtp", [0.85, 0.6, 0.5], 3).speedup) > 0
    assert predict_speedup(hardware=pr, target="deepseek-v3", drafter="mtp", mean_accepted=2.4, gamma=3).gamma == 3
    # a target that does not say how many modules it ships keeps one rate over any chain (an MTP-style head); a
    # Llama preset says it ships none
    unsaid = dataclasses.replace(get_model("llama-3.1-8b"), mtp_modules=None)
    assert float(speedup(pr.with_(tp=1), unsaid, "mtp", 0.8, 4).speedup) > 0
    with pytest.raises(SpecroofError, match="ships no multi-token-prediction module"):
        speedup(pr.with_(tp=1), "llama-3.1-8b", "mtp", 0.8, 4)


def test_the_issue_plan_no_longer_grows_with_batch_on_a_stretched_rate() -> None:
    """plan --target deepseek-v3 --drafter mtp --tp 8 --engine sglang --weight-dtype fp8 --acceptance mtp=0.85
    --batch 1,32 on an H200 answered 2.55x at batch 1 (gamma 7) and 3.07x at batch 32 (gamma 12)."""
    pr = Pricing.of(H200, engine="sglang", tp=8, weight_dtype="fp8")
    table = plan(pr, "deepseek-v3", "mtp", {"mtp": 0.85}, batch=[1, 32])
    assert set(table["gamma"]) == {0, 1}
    assert "ships 1 MTP module" in table.attrs["notes"][0]
    best = table[table["gamma"] > 0].groupby("batch")["speedup"].max()
    assert best[32] < 2  # no longer 3.07x over 2.55x
    # what grows with batch now is SGLang's fixed time per round (section 41), paid once per round whatever the
    # batch: without it, what is left is the sparse-MoE effect itself (at batch 32 the other sequences already
    # touch most of the experts the second token reads, so a 2-token verify costs relatively less there)
    e = pr.engine
    no_fixed = pr.with_(engine=dataclasses.replace(e, round_fixed_s=0.0))
    flat = plan(no_fixed, "deepseek-v3", "mtp", {"mtp": 0.85}, batch=[1, 32])
    flat_best = flat[flat["gamma"] > 0].groupby("batch")["speedup"].max()
    assert flat_best[32] < 1.05 * flat_best[1]
    assert best[1] < flat_best[1] and best[32] / best[1] > flat_best[32] / flat_best[1]
    # a mean measured at 3 drafts prices the chains up to 3, a curve every position it covers
    measured = plan(pr, "deepseek-v3", "mtp", {"mtp": MeanAccepted(2.4, gamma=3)}, batch=1)
    assert set(measured["gamma"]) == {0, 1, 2, 3}
    curve = plan(pr, "deepseek-v3", "mtp", {"mtp": PositionCurve((0.85, 0.6, 0.45, 0.4))}, batch=1)
    assert set(curve["gamma"]) == {0, 1, 2, 3, 4} and curve.attrs["notes"] == []


def test_eagle3_extra_memory_counts_its_own_head() -> None:
    spec = rf.get_model("gpt-oss-120b")
    ctx = Ctx(spec, Pricing.of(H200))
    head = as_drafter("eagle3").layer_spec(spec)
    got = float(as_drafter("eagle3").extra_memory_bytes(ctx, 1, 0))
    assert got == pytest.approx((head.total_params - head.embedding_params) * 2.0)
