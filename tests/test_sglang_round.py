"""SGLang's EAGLE round beyond its passes (docs/cost-model.md, section 41): the fixed time per round, published rows
given in the engine's own knobs, and the sparse target they were measured on."""

from __future__ import annotations

import dataclasses

import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.engine import engine_data, engine_from_dict, load_engine
from roofline.costing.pricing import Pricing
from roofline.deploy.engine_flags import read_engine_config
from roofline.deploy.planner import price_engine_config
from roofline.evidence.published import load_published, predict_row, validation_table
from roofline.passes.model import get_model
from roofline.speculation.predict import predict_speedup

ROUND_SOURCES = ("sglang_pr11398", "specforge_issue339", "sglang_pr4716", "angelslim_issue163")


def test_the_fixed_round_time_is_paid_under_either_overlap_and_only_by_sglang():
    v1, v2 = load_engine("sglang"), load_engine("sglang-spec-v2")
    assert v1.round_fixed_s == v2.round_fixed_s > 1e-3
    for name in ("vllm", "vllm-0.12", "vllm-0.14", "trtllm", "compiled", "hf"):
        assert load_engine(name).round_fixed_s == 0.0, name
    # spec v2 hides the step and the host round terms, not the fixed time; spec v1 adds the step on top
    assert v2.round_host_s(8) == pytest.approx(v2.round_fixed_s)
    assert v1.round_host_s(8) == pytest.approx(v1.round_fixed_s + v1.host_step_s)
    pr = Pricing.of("h100-sxm-80gb", engine="sglang-spec-v2")
    assert pr.round_host_at(1) == pytest.approx(v2.round_fixed_s) and pr.round_host_s == pytest.approx(v2.round_fixed_s)
    # the round pays it once: a speculative prediction's host time is the term
    p = predict_speedup(hardware=pr, target="llama-3.1-8b", drafter="eagle3", mean_accepted=3.0, gamma=3)
    assert p.t_round_host_s == pytest.approx(v2.round_fixed_s)


def test_the_term_reads_and_writes_in_its_profile_table():
    e = dataclasses.replace(load_engine("sglang"), round_fixed_s=1.5e-3)
    back = engine_from_dict(engine_data(e))
    assert back.round_fixed_s == pytest.approx(1.5e-3)
    data = engine_data(load_engine("vllm"))
    assert "round_fixed_us" not in data["speculative"]
    bad = engine_data(e)
    bad["speculative"]["round_fixed_us"] = "fast"
    with pytest.raises(SpecroofError, match="round_fixed_us must be a number"):
        engine_from_dict(bad)
    bad["speculative"]["round_fixed_us"] = -1.0
    with pytest.raises(SpecroofError, match="round_fixed_s must be >= 0"):
        engine_from_dict(bad)


def test_a_row_in_the_engines_knobs_is_priced_as_engine_config_prices_them():
    rows = load_published()
    r = rows[rows["file"].str.startswith("specforge_issue339") & (rows["kind"] == "speculative")].iloc[1]
    cfg = read_engine_config(r["engine_config"], target=r["model"])
    assert (cfg.setting.num_steps, cfg.setting.topk, cfg.setting.num_draft_tokens) == (3, 3, 8)
    pr = Pricing.of(r["hardware"], engine="sglang", dtype="bf16", tp=int(r["tp"]))
    want = price_engine_config(cfg, pr, mean_accepted=float(r["mean_accepted"]), target=r["model"],
                               batch=int(r["batch"]), context=int(r["context"]))  # fmt: skip
    assert predict_row(r, load_engine("sglang"))["predicted"] == pytest.approx(want["speedup"], rel=1e-12)
    # the datasheet roofline prices the same knobs without the engine
    bare = Pricing.of(r["hardware"], dtype="bf16", tp=int(r["tp"]))
    want_bare = price_engine_config(cfg, bare, mean_accepted=float(r["mean_accepted"]), target=r["model"],
                                    batch=int(r["batch"]), context=int(r["context"]))  # fmt: skip
    assert predict_row(r, None)["predicted"] == pytest.approx(want_bare["speedup"], rel=1e-12)


def test_the_round_sources_keep_a_third_held_out_and_the_term_helps_both_halves():
    rows = load_published()
    mine = rows[rows["file"].str.startswith(ROUND_SOURCES)]
    assert (mine["use"] == "validation").mean() >= 1 / 3
    t = validation_table(mine)
    off = {n: dataclasses.replace(load_engine(n), round_fixed_s=0.0) for n in ("sglang", "sglang-spec-v2")}
    t0 = validation_table(mine, off)
    for use in ("calibration", "validation"):
        with_term = t.loc[t["use"] == use, "error_engine"].abs().median()
        without = t0.loc[t0["use"] == use, "error_engine"].abs().median()
        roof = t.loc[t["use"] == use, "error_roofline"].abs().median()
        assert with_term < without < roof, use
        assert with_term <= (0.10 if use == "calibration" else 0.15), use


def test_a_bad_engine_config_in_a_published_row_is_one_line_naming_the_row(tmp_path):
    (tmp_path / "x.toml").write_text(
        'source = "s"\nurl = "https://example.org/x"\nsetup = "one H100, a test"\nhardware = "h100-sxm-80gb"\n'
        'engine = "sglang"\nuse = "validation"\n[[row]]\nkind = "speculative"\nmodel = "llama-3.1-8b"\n'
        'drafter = "eagle3"\nmean_accepted = 2.0\ntokens_per_s = 100.0\nengine_config = "--speculative-algorithm '
        'EAGLE3 --speculative-num-steps 2 --speculative-eagle-topk 2 --speculative-num-draft-tokens 9"\n'
    )
    with pytest.raises(SpecroofError) as err:
        load_published(tmp_path)
    assert "x.toml: row 1: engine_config:" in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "x.toml").write_text((tmp_path / "x.toml").read_text().replace("mean_accepted = 2.0\n", ""))
    with pytest.raises(SpecroofError, match="engine_config is a speculative row's setting, with mean_accepted"):
        load_published(tmp_path)


def test_the_sparse_target_and_its_head_are_the_shipped_shapes():
    q = get_model("Qwen/Qwen3-30B-A3B")
    assert q.name == "qwen3-30b-a3b" and q.total_params == pytest.approx(30.53e9, rel=1e-3)
    assert (q.n_experts, q.experts_per_token, q.d_ff_expert, q.n_moe_layers) == (128, 8, 768, 48)
    from roofline.speculation.drafters import as_drafter

    head = as_drafter("eagle3").layer_spec(q)
    assert not head.is_moe and head.vocab_size == 32000 and head.n_layers == 1
