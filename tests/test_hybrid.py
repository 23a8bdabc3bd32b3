"""Hybrid linear-attention models (docs/cost-model.md, section 52): loading, state bytes, scan FLOPs, the KV of the
attention layers only, the state checkpoints of a verify pass, and the CLI on a hybrid config.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import roofline as rf
from roofline.core.errors import SpecroofError
from roofline.costing.passtime import memory_footprint, pass_seconds, pass_time
from roofline.passes.cost import RECURRENT_MAX_TOKENS, forward_cost
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.speculative import checkpoint_seconds
from specroof.cli import main

DATA = Path(__file__).parent / "data" / "hybrid"
NEXT = DATA / "qwen3-next-80b-a3b.json"
Q35_MOE = DATA / "qwen3.5-35b-a3b.json"
Q35_DENSE = DATA / "qwen3.5-9b.json"
GRANITE = DATA / "granitemoehybrid-example.json"

# Qwen3-Next's Gated DeltaNet, by hand from its config.json: 32 value heads, 16 key heads, 128 x 128 per head, conv 4
H, G, DK, DV, K = 32, 16, 128, 128, 4
CONV = 2 * G * DK + H * DV  # 8192 conv channels
IN_PROJ = CONV + H * DV + 2 * H  # q, k, v, the gate z, beta and a: 12352
STATE_LAYER = H * DK * DV * 4 + CONV * (K - 1) * 2  # fp32 state, bf16 conv state: 2,146,304 bytes
CHECKPOINT_LAYER = H * DK * DV * 4 + CONV * 2  # a position's checkpoint: the state and one more conv input
N_LIN, N_ATTN, D = 36, 12, 2048


def test_qwen3_next_config_loads_as_the_preset():
    m = ModelSpec.from_hf_config(NEXT)
    p = get_model("qwen3-next-80b-a3b")
    assert (m.linear_kind, m.n_linear_layers, m.n_attn_layers) == ("gdn", N_LIN, N_ATTN)
    assert (m.linear_heads, m.linear_groups, m.linear_key_dim, m.linear_value_dim, m.linear_conv) == (H, G, DK, DV, K)
    assert (m.n_experts, m.experts_per_token, m.d_ff_expert, m.n_shared_experts, m.d_ff_shared) == (
        512,
        10,
        512,
        1,
        512,
    )
    assert m.state_dtype == "fp32" and m.attn_output_gate and m.mtp_modules == 1
    assert m.replace(name=p.name) == p
    # the published safetensors hold 79,674,391,296 weights: the 104,448 left out are the shared expert's gate
    # (2048 in each of 48 layers) and the attention layers' q/k norms (2 x 256 in each of 12)
    assert m.total_params == 79_674_391_296 - 48 * 2048 - 12 * 2 * 256


def test_qwen3_5_configs_load_wrapped_and_flat():
    moe = ModelSpec.from_hf_config(Q35_MOE)
    assert (moe.n_layers, moe.n_linear_layers, moe.n_experts, moe.experts_per_token) == (40, 30, 256, 8)
    assert moe.vocab_size == 248320 and moe.mtp_modules == 1 and moe.state_dtype == "fp32"
    assert moe.replace(name="qwen3.5-35b-a3b") == get_model("qwen3.5-35b-a3b")
    dense = ModelSpec.from_hf_config(Q35_DENSE)
    assert (dense.n_layers, dense.n_linear_layers, dense.is_moe, dense.d_ff, dense.n_kv_heads) == (
        32,
        24,
        False,
        12288,
        4,
    )
    text = json.loads(Q35_DENSE.read_text())["text_config"]
    flat = ModelSpec.from_hf_config({**text, "model_type": "qwen3_5"}, name=dense.name)  # a flattened copy
    assert flat == dense


def test_granite_mamba2_hybrid_loads():
    m = ModelSpec.from_hf_config(GRANITE)
    assert (m.linear_kind, m.n_linear_layers, m.n_attn_layers) == ("mamba2", 6, 2)
    assert (m.linear_heads, m.linear_groups, m.linear_key_dim, m.linear_value_dim) == (8, 1, 128, 128)
    assert (m.n_experts, m.experts_per_token, m.d_ff_expert, m.d_ff_shared) == (8, 2, 1024, 512)
    assert m.state_dtype == "" and m.mtp_modules == 0
    # transformers' GraniteMoeHybridMambaLayer: in_proj d x (2 d_inner + 2 g N + h), conv (with bias), out_proj, norm,
    # A_log, D, dt_bias
    d_inner, conv = 8 * 128, 8 * 128 + 2 * 128
    assert (
        m.linear_params_per_layer == 512 * (2 * d_inner + 2 * 128 + 8) + conv * 4 + conv + d_inner * 512 + d_inner + 24
    )


def test_bad_hybrid_configs_name_the_field():
    cfg = json.loads(NEXT.read_text())
    with pytest.raises(SpecroofError, match="linear_num_value_heads"):
        ModelSpec.from_hf_config({k: v for k, v in cfg.items() if k != "linear_num_value_heads"})
    with pytest.raises(SpecroofError, match="layer_types"):
        ModelSpec.from_hf_config({**cfg, "layer_types": ["linear_attention"] * 3})
    granite = json.loads(GRANITE.read_text())
    with pytest.raises(SpecroofError, match="layer_types"):
        ModelSpec.from_hf_config({**granite, "layer_types": ["mamba"] * 7 + ["ssm"]})


def test_state_bytes_and_scan_flops_by_hand():
    m = get_model("qwen3-next-80b-a3b")
    assert m.state_bytes_per_layer(2.0) == STATE_LAYER == 2_146_304
    assert m.state_bytes_per_sequence(2.0) == N_LIN * STATE_LAYER
    per_token = 2 * D * IN_PROJ + 2 * H * DV * D + 2 * CONV * K
    B, n = 2, 4
    c = forward_cost(m, B, n, 1000, weight_dtype="bf16")
    i = c.operators.index("linear_attn")
    assert c.flops[i] == pytest.approx(N_LIN * B * n * (per_token + 7 * H * DK * DV), rel=1e-12)
    # the state: read once and written once per sequence, whatever the context
    assert c.bytes_kv_read[i] == c.bytes_kv_write[i] == N_LIN * B * STATE_LAYER
    assert forward_cost(m, B, n, 50_000, weight_dtype="bf16").bytes_kv_read[i] == c.bytes_kv_read[i]
    # a prefill (past the recurrent path's 64 tokens) is the chunked scan: 6 d_k d_v + 2 C (3 d_k + 2 d_v), C = 64
    p = forward_cost(m, 1, 100, 0, weight_dtype="bf16")
    chunked = H * (6 * DK * DV + 2 * 64 * (3 * DK + 2 * DV))
    assert p.flops[i] == pytest.approx(N_LIN * 100 * (per_token + chunked), rel=1e-12)


def test_kv_counts_only_the_attention_layers():
    m = get_model("qwen3-next-80b-a3b")
    assert m.kv_elements_per_token == N_ATTN * 2 * 2 * 256
    c = forward_cost(m, 3, 1, 4096, weight_dtype="bf16")
    assert c.bytes_kv_read[c.operators.index("attn_scores")] == 3 * 4096 * N_ATTN * 2 * 256 * 2
    fp = memory_footprint(m, 3, 4096, weight_dtype="bf16", new_tokens=4)
    assert fp.kv_bytes == 3 * (4096 + 4) * N_ATTN * 2 * 2 * 256 * 2
    assert fp.state_bytes == 3 * 4 * N_LIN * STATE_LAYER  # a slot per verified position
    dense = m.replace(n_linear_layers=0, linear_kind="")  # every layer attention: four times the cache
    assert dense.kv_elements_per_token == 4 * m.kv_elements_per_token


def test_checkpoints_in_the_verify_pass_and_the_round():
    m = get_model("qwen3-next-80b-a3b")
    for n, expected in ((1, 0.0), (4, 3), (RECURRENT_MAX_TOKENS, RECURRENT_MAX_TOKENS - 1), (100, 0.0)):
        c = forward_cost(m, 5, n, 1024, weight_dtype="bf16")
        assert c.bytes_kv_write[c.operators.index("state_checkpoint")] == 5 * expected * N_LIN * CHECKPOINT_LAYER
    pr = rf.Pricing.of("h200-sxm-141gb", engine="vllm", tp=2)
    rows = [rf.speedup(pr, m, "mtp", [0.8] * g, g, batch=16, context=1024) for g in (1, 2, 3, 4)]
    ckpt = [float(r.t_checkpoint_s) for r in rows]
    assert all(b > a > 0 for a, b in zip(ckpt, ckpt[1:], strict=False))
    for g, r in zip((1, 2, 3, 4), rows, strict=True):
        assert 0 < float(r.t_checkpoint_s) < float(r.t_verify_s)
        st = pass_time(m, pr, 16, g + 1, 1024, tp=2)
        assert float(r.t_checkpoint_s) == float(st.op_time_s[st.cost.operators.index("state_checkpoint")])
    assert float(checkpoint_seconds(pr, m, 0, 16, 1024)) == 0.0
    assert "t_checkpoint_s" in rows[0].to_frame().columns
    plain = rf.speedup(pr, "qwen3-30b-a3b", "eagle3", 0.8, 3, batch=16, context=1024)
    assert float(plain.t_checkpoint_s) == 0.0


def test_scalar_and_array_paths_agree_on_a_hybrid_model():
    m = get_model("qwen3.5-35b-a3b")
    pr = rf.Pricing.of("h100-sxm-80gb", engine="vllm")
    for B, n, L in ((1, 1, 1024), (8, 4, 2048), (2, 70, 0)):
        one = float(pass_seconds(m, pr, B, n, L))
        many = pass_seconds(m, pr, np.array([B, B]), np.array([n, n]), np.array([L, L]))
        assert one == float(many[0]) == float(many[1])
        assert one == float(pass_time(m, pr, B, n, L).t_step_s)
    s = rf.speedup(pr, m, "mtp", 0.7, 1, batch=4, context=512)
    a = rf.speedup(pr, m, "mtp", np.array([0.7, 0.7]), 1, batch=np.array([4, 4]), context=512)
    for f in ("speedup", "t_verify_s", "t_checkpoint_s", "memory_bytes"):
        assert float(getattr(s, f)) == pytest.approx(float(np.asarray(getattr(a, f))[0]), rel=1e-12)


def test_plan_on_a_hybrid_config_shows_the_checkpoint(capsys):
    argv = ["plan", "--hardware", "h200-sxm-141gb", "--target", str(NEXT), "--drafter", "mtp", "--tp", "2",
            "--engine", "vllm", "--batch", "16", "--acceptance", "mtp=curve:0.8,0.7,0.6"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "unsupported architecture" not in out and "t_checkpoint_s" in out and "mtp with gamma" in out
    assert main([*argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    rows = [r for r in payload["table"] if r["strategy"] == "mtp"] if "table" in payload else None
    assert rows, payload.keys()
    assert all(r["t_checkpoint_s"] > 0 for r in rows)
    by_gamma = sorted((r["gamma"], r["t_checkpoint_s"]) for r in rows)
    assert [c for _, c in by_gamma] == sorted(c for _, c in by_gamma)
