"""Inputs a fuzz of the command line found crashing or refused with an internal message, each answered now."""

from __future__ import annotations

import json

import roofline as rf
from roofline.passes.model import get_model
from roofline.speculation.drafters.early_exit import EarlyExit


def test_plan_with_offloaded_weights_prices_and_names_its_row(capsys):
    from specroof.cli import main

    args = ["plan", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-70b", "--drafter", "eagle3"]
    assert main([*args, "--offload", "pcie4-x16", "--alpha", "0.8", "--engine", "vllm-0.14", "--json"]) == 0
    (rec,) = json.loads(capsys.readouterr().out)["recommendations"]
    assert rec["hardware"] == "h100-sxm-80gb+offload-pcie4-x16" and rec["speedup"] > 1


def test_serve_with_one_running_sequence(capsys):
    from specroof.cli import main

    args = ["serve", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--drafter", "eagle3"]
    assert main([*args, "--acceptance", "0.7", "--requests", "50", "--rate", "2", "--max-seqs", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)


def test_early_exit_before_the_dense_prefix_of_an_moe_target():
    """DeepSeek-V3's first 3 layers are dense: an exit after 1 keeps one of them, the remainder the other 2."""
    v3 = get_model("deepseek-v3")
    assert v3.n_dense_layers == 3
    ee = EarlyExit(1)
    first, rest = ee._first(v3), ee._rest(v3)
    assert (first.n_layers, first.n_dense_layers) == (1, 1)
    assert (rest.n_layers, rest.n_dense_layers) == (v3.n_layers - 1, 2)
    # past the prefix the first layers hold all 3 and the rest none
    assert EarlyExit(8)._first(v3).n_dense_layers == 3 and EarlyExit(8)._rest(v3).n_dense_layers == 0
    r = rf.speedup("h100-sxm-80gb", "deepseek-v3", "early-exit:1", 0.7, 3, tp=8)
    assert float(r.speedup) > 0


def test_hydra_is_searched_only_as_deep_as_its_heads(capsys):
    """plan's gammas, tree's depths and serve's goodput policy stop at Hydra's 4 heads instead of refusing."""
    from roofline.speculation.drafters import as_drafter
    from roofline.speculation.drafters.base import max_drafts
    from specroof.cli import main

    assert max_drafts(as_drafter("hydra", get_model("llama-3.1-8b"))) == 4
    assert max_drafts(as_drafter("eagle3", get_model("llama-3.1-8b"))) is None
    assert max_drafts(as_drafter("dflash", get_model("qwen3-coder-30b-a3b"))) == 15  # a block of 16
    base = ["--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--drafter", "hydra"]
    assert main(["plan", *base, "--alpha", "0.7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert max(r["gamma"] for r in out["table"]) <= 4 and out["recommendations"][0]["gamma"] <= 4
    assert main(["tree", *base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["serve", *base, "--acceptance", "0.6", "--rate", "1", "--requests", "40", "--json"]) == 0
    assert "goodput:4" in capsys.readouterr().out


def test_an_engine_table_that_is_not_a_table_is_one_line():
    import pytest

    from roofline.core.errors import SpecroofError
    from roofline.costing.engine import engine_from_dict

    for table in ("device", "launches", "speculative", "graphs", "weight_only"):
        with pytest.raises(SpecroofError, match=rf"\[{table}\] must be a table"):
            engine_from_dict({"name": "x", table: 3})
