"""The engines' default CUDA-graph capture size (docs/cost-model.md, section 62): a verify pass past it is named."""

from __future__ import annotations

import json

import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine, engine_data, engine_from_dict, load_engine
from roofline.evidence.published import load_published, validation_table


def test_vllm_profiles_capture_512_tokens_and_1024_on_data_centre_blackwell():
    for name in ("vllm", "vllm-0.12"):
        e = load_engine(name)
        assert e.graph_limit("h100-sxm-80gb") == 512
        assert e.graph_limit("b200-180gb") == 512  # before vLLM's SM100 default
    assert load_engine("vllm-rocm").graph_limit("mi300x-192gb") == 512  # vllm-0.14's code on ROCm: no SM100
    e = load_engine("vllm-0.14")
    assert e.graph_limit("h100-sxm-80gb") == 512
    assert all(e.graph_limit(h) == 1024 for h in ("b200-180gb", "b300-288gb", "gb200-186gb", "gb300-288gb"))
    # engines without a known limit name none
    assert load_engine("sglang").graph_limit("h100-sxm-80gb") == 0
    assert load_engine("compiled").graph_note("h100-sxm-80gb", 4096, 8) is None


def test_a_pass_is_named_only_past_the_limit():
    e = load_engine("vllm-0.14")
    assert e.graph_note("h100-sxm-80gb", 128, 4) is None  # 512: captured
    note = e.graph_note("h100-sxm-80gb", 128, 5)  # 640
    assert note is not None and "640 tokens" in note and "512 tokens" in note
    assert "max_cudagraph_capture_size" in note  # the knob that fixes it
    assert e.graph_note("b300-288gb", 128, 8) is None  # 1024 on SM100
    assert "2,048" in (e.graph_note("b300-288gb", 256, 8) or "")


def test_graphs_table_round_trips_and_bad_values_are_refused():
    e = load_engine("vllm-0.14")
    assert engine_from_dict(engine_data(e)) == e
    assert "graphs" not in engine_data(load_engine("sglang"))
    for bad in ({"max_tokens": -1}, {"max_tokens": 51.2}, {"max_tokens": True}, {"tokens": 512}):
        with pytest.raises(SpecroofError, match="graphs"):
            engine_from_dict({"name": "x", "graphs": bad})
    with pytest.raises(SpecroofError, match="graphs"):
        engine_from_dict({"name": "x", "graphs": 512})
    with pytest.raises(SpecroofError, match="graph_max_tokens"):
        Engine("x", graph_max_tokens=-5)


def test_plan_names_a_verify_pass_past_the_capture_size(capsys):
    from specroof.cli import main

    base = ["plan", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--drafter", "eagle3"]
    assert main([*base, "--engine", "vllm-0.14", "--batch", "8", "--json"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert not any("CUDA-graph" in n for n in small["batch_notes"])
    assert main([*base, "--engine", "vllm-0.14", "--batch", "256", "--json"]) == 0
    big = json.loads(capsys.readouterr().out)
    (rec,) = big["recommendations"]
    tokens = 256 * (rec["gamma"] + 1)
    assert tokens > 512
    assert any(f"{tokens:,} tokens" in n and "CUDA-graph" in n for n in big["batch_notes"])
    # the same plan under an engine with no known limit says nothing of graphs
    assert main([*base, "--engine", "compiled", "--batch", "256", "--json"]) == 0
    assert not any("CUDA-graph" in n for n in json.loads(capsys.readouterr().out)["batch_notes"])


def test_dspark_fixed_arms_at_256_are_marked_as_run_outside_the_graphs():
    rows = load_published()
    d = rows[rows["file"].astype(str).str.contains("vllm_blog_dspark_b300")]
    fixed = d[(d["batch"] == 256) & (d["kind"] == "speculative") & (d["published_speedup"] < 1)]
    assert len(fixed) == 3
    for r in fixed.itertuples():
        # the reason names the tokens the draft run verified per step, past its capture size of 1024
        assert f"{256 * (int(r.gamma) + 1)} tokens" in r.not_modelled and "1024" in r.not_modelled
    t = validation_table(d)
    assert t[t["note"].str.contains("max_cudagraph_capture_size")]["engine_aware"].isna().all()
    # the rows that ran inside the graphs are still priced
    priced = t[t["note"] == ""]
    assert len(priced) == 2 and priced["engine_aware"].notna().all()
