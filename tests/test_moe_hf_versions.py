"""Transformers' MoE forward per major version, host reads of the device, the DFlash drafter of Qwen3-Coder-30B-A3B,
and the fused-MoE kernel past 128 tokens (docs/cost-model.md, section 53)."""

from __future__ import annotations

import dataclasses
import json
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofline.core.errors import SpecroofError
from roofline.costing import engine as engine_mod
from roofline.costing.engine import engine_group, hf_engine_name, installed_transformers_major, load_engine
from roofline.costing.passtime.passes import pass_time
from roofline.evidence.published_kernels import KERNELS_DIR, load_kernel_rows, predict_kernel_us
from roofline.passes.cost import expected_experts_touched
from roofline.passes.model import get_model
from roofline.speculation import drafter_presets
from specroof.cli import main

HW = "h200-sxm-141gb"
TARGET = "qwen3-coder-30b-a3b"
TOKENS = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 513, 1024, 2048])


def step_ms(engine, tokens=TOKENS, context=1024):
    return np.asarray(pass_time(TARGET, HW, batch=1, new_tokens=tokens, context=context, engine=engine).t_step_s) * 1e3


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(autouse=True)
def _fresh_major():
    """The installed major is read once per process: each test here reads it anew after patching the metadata, and
    leaves the real one behind."""
    installed_transformers_major.cache_clear()
    yield
    installed_transformers_major.cache_clear()


@pytest.fixture
def no_transformers(monkeypatch):
    """No transformers distribution installed: --engine hf prices the current major."""

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    installed_transformers_major.cache_clear()


# -- the Done-when numbers ----------------------------------------------------------------------------------------


def test_dflash_on_qwen3_coder_under_hf_pays_above_3x_at_accept_length_8(capsys, no_transformers):
    # the published DFlash drafter has a shape here: no hub lookup, and the plan pays as the published runs do
    for drafter, acceptance in (
        ("dflash", "dflash=mean:8"),
        ("block:z-lab/Qwen3-Coder-30B-A3B-DFlash", "block=mean:8@15"),
    ):
        code, out, err = run(capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", drafter, "--engine",
                             "hf", "--acceptance", acceptance, "--json")  # fmt: skip
        assert code == 0, err
        rec = json.loads(out)["recommendations"][0]
        assert rec["batch"] == 1 and rec["speedup"] > 3.0, (drafter, rec["speedup"])
        # a round costs about one decode step and a bit: the verify of gamma + 1 tokens stays host-bound
        assert rec["t_verify_s"] < 1.1 * float(step_ms("hf", 1)) / 1e3


def test_a_513_token_verify_under_transformers_costs_less_than_3_decode_steps(no_transformers):
    for engine in ("hf", "hf-5", "eager"):
        t = step_ms(engine, np.array([1, 513]))
        assert t[1] < 3 * t[0], (engine, t)


# -- per version, what the code does ------------------------------------------------------------------------------


def test_hf_names_the_installed_major_and_the_current_one_when_none(monkeypatch):
    assert hf_engine_name(4) == "hf-4" and hf_engine_name(5) == "hf" and hf_engine_name(None) in ("hf", "hf-4")
    assert hf_engine_name(9) == "hf"  # a major without a profile: the current one's
    monkeypatch.setattr(metadata, "version", lambda name: "4.57.1")
    installed_transformers_major.cache_clear()
    assert load_engine("hf").name == "hf-4" and load_engine("eager").name == "hf-4"
    monkeypatch.setattr(metadata, "version", lambda name: "5.25.0")
    installed_transformers_major.cache_clear()
    assert load_engine("hf").name == "hf" and load_engine("eager").name == "hf"
    assert engine_group("hf-4") == engine_group(load_engine("hf-4")) == "hf"


def test_hf_4_extends_hf_and_changes_only_the_moe_kernels():
    base, v4, v5 = load_engine("hf"), load_engine("hf-4"), load_engine("hf-5")
    skip = {"name", "description", "launches", "sources"}
    for f in dataclasses.fields(base):
        if f.name not in skip:
            assert getattr(v4, f.name) == getattr(base, f.name) == getattr(v5, f.name), f.name
    moe_keys = {"router", "expert", "moe_layer", "grouped_experts", "sync", "expert_sync"}
    assert {k for k in base.launches if base.launches[k] != v4.launches.get(k)} <= moe_keys
    assert v4.launches["expert_sync"] == 2 and v4.launches["sync"] == 1 and v4.launches["grouped_experts"] == 0
    assert base.launches["grouped_experts"] == 1 and base.launches["expert"] == 0 and not base.launches["sync"]


def test_extends_refuses_an_unknown_base(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text('name = "x"\nextends = "no-such-engine"\n')
    with pytest.raises(SpecroofError, match="extends names 'no-such-engine'"):
        load_engine(str(bad))


def test_transformers_5_prices_the_experts_by_their_bytes_not_a_kernel_set_each():
    t = step_ms("hf-5")
    # host-bound throughout: a fixed kernel sequence per MoE layer, whatever the experts hit
    assert t[-1] / t[0] < 1.05
    assert np.all(np.diff(t) >= 0)


def test_transformers_4_pays_each_hit_expert_its_kernels_and_two_syncs():
    e = load_engine("hf-4")
    spec = get_model(TARGET)
    t = step_ms("hf-4", np.array([1, 16, 513]))
    u = expected_experts_touched(spec.n_experts, spec.experts_per_token, np.array([1, 16, 513]))
    # host-bound: each extra expert costs its kernels (3 GEMMs, 2 activation, 6 index) and 2 syncs, per MoE layer
    per_expert = (3 * e.launches["mlp_matrix"] + e.launches["activation"] + e.launches["expert"] + 2) * e.host_launch_s
    predicted = (u[1:] - u[0]) * spec.n_moe_layers * per_expert * 1e3
    assert t[1:] - t[0] == pytest.approx(predicted, rel=0.03)
    # the loop is what the code does: a 16-token verify is several decode steps, unlike the grouped forward
    assert t[1] > 5 * t[0]


def test_expected_experts_touched_matches_uniform_top_k_routing():
    rng = np.random.default_rng(0)
    E, k = 128, 8
    for T in (1, 16, 64, 513):
        hit = [len(np.unique(np.argsort(rng.random((T, E)), axis=1)[:, :k])) for _ in range(200)]
        assert float(expected_experts_touched(E, k, T)) == pytest.approx(np.mean(hit), rel=0.02, abs=0.3)
    assert float(expected_experts_touched(E, k, 513)) == pytest.approx(128.0, abs=1e-9)


@pytest.mark.parametrize("engine", ["hf-4", "hf-5", "torch-eager", "vllm", "sglang", "sglang-spec-v2", None])
def test_moe_verify_time_never_falls_as_tokens_grow(engine):
    t = step_ms(engine)
    assert np.all(np.diff(t) >= -1e-9), (engine, t)


# -- the drafter --------------------------------------------------------------------------------------------------


def test_the_qwen3_coder_dflash_drafter_has_its_config_shape_and_needs_no_hub(monkeypatch):
    row = drafter_presets.published(TARGET, "dflash")
    assert row is not None and row.block_size == 16 and "config.json" in row.source
    spec = row.spec
    target = get_model(TARGET)
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads) == (8, target.d_model, 32, 4)
    # its config.json copy's 8 layers (0.45B) and the fc projection over 5 taps (0.02B): the published 0.88 GiB in BF16
    layers = spec.total_params - spec.vocab_size * spec.d_model - spec.norm_params
    assert 0.43e9 < layers < 0.47e9, layers
    assert 0.45e9 < layers + 5 * spec.d_model * spec.d_model < 0.5e9

    def no_hub(*a, **k):
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(drafter_presets, "get_model", no_hub)
    assert drafter_presets.dflash("dflash", target)[1] == 16
    assert drafter_presets.published_spec("z-lab/Qwen3-Coder-30B-A3B-DFlash") is spec


# -- the fused-MoE kernel past 128 tokens: checked in section 53, fitted since section 56 --------------------------


def test_fused_moe_past_128_tokens_against_the_wide_tables():
    rows = load_kernel_rows(Path(KERNELS_DIR) / "wide")
    assert set(rows["tokens"]) >= {256, 512, 1024, 1536}
    err = pd.Series([predict_kernel_us(r, r["engine"]) / r["published_us"] - 1 for _, r in rows.iterrows()])
    rows = rows.assign(err=err)
    far = rows[rows["tokens"].isin([256, 1024])]
    assert far["err"].abs().max() < 0.07  # weight-bound and compute-bound ends hold
    # at the ridge the tiles' own rate (section 56) takes the 21% of section 53 to under 10%
    ridge = rows[(rows["tokens"] == 512)]
    assert ridge["err"].abs().max() < 0.10
    # the loader reads the wide folder with the 1-128-token tables
    assert load_kernel_rows()["tokens"].max() == 1536


def test_engine_layout_knows_the_new_launch_keys():
    assert {"moe_layer", "grouped_experts", "sync", "expert_sync"} <= set(engine_mod.LAUNCH_KEYS)
