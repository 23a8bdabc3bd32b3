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


def test_medusa_drafts_no_deeper_than_its_heads(capsys):
    """Medusa's head i proposes the token i + 1 places ahead: a chain of 8 from 5 heads is refused in one line, and
    plan and tree search only the depths its heads reach (they priced gamma 8 before)."""
    import pytest

    from roofline.core.errors import SpecroofError
    from roofline.speculation.drafters import as_drafter
    from roofline.speculation.drafters.base import max_drafts
    from specroof.cli import main

    assert max_drafts(as_drafter("medusa", get_model("vicuna-7b"))) == 5
    assert max_drafts(as_drafter("medusa:3", get_model("vicuna-7b"))) == 3
    with pytest.raises(SpecroofError, match=r"medusa \(Medusa.s head i .* 5 heads draft 5 at most\)"):
        rf.speedup("h100-sxm-80gb", "vicuna-7b", "medusa", 0.6, 8)
    assert float(rf.speedup("h100-sxm-80gb", "vicuna-7b", "medusa", 0.6, 5).speedup) > 0
    base = ["--hardware", "h100-sxm-80gb", "--target", "vicuna-7b", "--drafter", "medusa"]
    assert main(["plan", *base, "--alpha", "0.7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert max(r["gamma"] for r in out["table"]) == 5
    assert main(["tree", *base, "--json"]) == 0
    choice = json.loads(capsys.readouterr().out)["hardware_choice"]
    assert choice["max_depth"] == 5 and choice["depth"] <= 5


def test_tree_search_past_its_largest_budget_costs_no_more(capsys):
    """A tree of n nodes is at most n deep: --max-depth 1000 on a sibling-rank vector searches what depth 512
    does (it built about 10,000 trees for 34 s before) and gives the same answer as the default depth."""
    import time

    from roofline.deploy.tree_sizing import best_tree_size
    from roofline.speculation.trees import optimal_tree

    vec = [0.6, 0.15, 0.05, 0.02]
    deep, shallow = optimal_tree(vec, 8, 1000), optimal_tree(vec, 8, 8)
    # table[n, depth]: the limits past 8 nodes repeat depth 8's column
    assert deep.table.shape == (9, 1001) and deep.expected_tokens == shallow.expected_tokens
    assert (deep.table[1:, 8:] == deep.table[1:, 8:9]).all()
    t0 = time.process_time()
    far = best_tree_size("h100-sxm-80gb", "llama-3.1-8b", "eagle3", vec, max_depth=1000)
    near = best_tree_size("h100-sxm-80gb", "llama-3.1-8b", "eagle3", vec, max_depth=10)
    assert time.process_time() - t0 < 30  # CPU seconds, not wall time: about 2 on a 2.6 GHz Xeon, 34 before
    assert far.best["expected_tokens"] >= near.best["expected_tokens"] - 1e-12


def test_serve_with_one_output_token_says_why_there_is_no_tpot(capsys):
    from specroof.cli import main

    args = ["serve", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--drafter", "eagle3"]
    assert main([*args, "--acceptance", "0.7", "--output-len", "1", "--rate", "1", "--requests", "30"]) == 0
    out = capsys.readouterr().out
    assert "every request ends at its first token" in out and "NaN" not in out and " n/a " in out


def test_a_report_on_a_target_larger_than_one_gpu_says_so_in_every_section(tmp_path, capsys):
    """DeepSeek-V3 on one H200: the throughput plot had no point to draw on log axes and the serving section raised;
    the page now says where the model does not fit, and the terminal table prints blanks, not None and NaN."""
    from specroof.cli import main

    out = tmp_path / "page"
    args = ["report", "--skip-measure", "--out", str(out), "--hardware", "h200-sxm-141gb", "--target", "deepseek-v3"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "FAILED" not in text and "None" not in text and "NaN" not in text
    page = (out / "index.html").read_text()
    assert "leaves no room for a KV cache" in page


def test_plan_refuses_in_words_what_it_cannot_price():
    import pytest

    from roofline.core.errors import SpecroofError

    pr = rf.Pricing.of("h200-sxm-141gb")
    with pytest.raises(SpecroofError, match=r"no gamma asked \(4\) fits within one rate, which covers mtp's 1"):
        rf.plan(pr, "qwen3.5-9b", "mtp", 0.7, gammas=[4])
    with pytest.raises(SpecroofError, match=r"no gamma asked \(10\) fits within hydra's 4 drafts"):
        rf.plan(pr, "llama-3.1-8b", "hydra", 0.7, gammas=[10])
    with pytest.raises(SpecroofError, match="at least one drafter"):
        rf.plan(pr, "llama-3.1-8b", [], 0.7)


def test_speedup_reads_a_rate_and_a_curve_as_plan_does(capsys):
    """--alpha on a drafter's tree is i.i.d. candidates as --acceptance RATE is (it was refused); an engine profile
    given as its file drafts as the engine it names; a per-position curve prices a reused MTP module position by
    position (it was refused with a message asking for that curve)."""
    from pathlib import Path

    from specroof.cli import main

    def ask(*extra: str) -> dict:
        assert main(["speedup", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    base = ["--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--drafter", "eagle3"]
    by_alpha, by_rate = ask(*base, "--alpha", "0.7"), ask(*base, "--acceptance", "0.7")
    assert by_alpha["speedup"] == by_rate["speedup"] and by_alpha["tree_nodes"] == by_rate["tree_nodes"]
    toml = Path(__file__).resolve().parents[1] / "engine_profiles" / "vllm.toml"
    named, as_file = (
        ask(*base, "--alpha", "0.7", "--engine", "vllm"),
        ask(*base, "--alpha", "0.7", "--engine", str(toml)),
    )
    assert named["gamma"] == as_file["gamma"] and named["speedup"] == _same(as_file["speedup"])
    mtp = ["--hardware", "h200-sxm-141gb", "--target", "qwen3.5-27b", "--drafter", "mtp"]
    curve = "mtp=curve:0.9,0.8,0.7,0.6"
    one = ask(*mtp, "--acceptance", curve, "--gamma", "4")
    assert main(["plan", *mtp, "--acceptance", curve, "--batch", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["table"]
    (at4,) = [r for r in rows if r["gamma"] == 4]
    assert (
        abs(one["speedup"] - at4["speedup"]) < 1e-9
        and abs(one["mean_accepted"] - 1 - 0.9 - 0.72 - 0.504 - 0.3024) < 1e-9
    )


def _same(x: float):
    import pytest

    return pytest.approx(x, rel=1e-12)


def test_serve_stretches_one_rate_no_further_than_plan_does(capsys):
    """Qwen3.5 ships one MTP module: one per-token rate covers its one trained step (goodput:1), a mean measured on a
    chain of 3 covers 3, and a static gamma past them is refused as plan and speedup refuse it."""
    import pytest

    from roofline.core.errors import SpecroofError
    from roofline.serving import simulate

    kw = dict(hardware="h200-sxm-141gb", target="qwen3.5-9b", drafter="mtp", rates=[4.0], requests=40)
    assert simulate(acceptance=0.6, policy=["off", "goodput"], **kw).summary["policy"].unique().tolist() == [
        "off", "goodput:1"]  # fmt: skip
    assert "goodput:3" in simulate(acceptance="mean:2.5@3", policy=["off", "goodput"], **kw).summary["policy"].tolist()
    with pytest.raises(SpecroofError, match="one acceptance rate for 4 draft steps of mtp"):
        simulate(acceptance=0.6, policy=["off", "static:4"], **kw)
    eagle = simulate(**{**kw, "target": "llama-3.1-8b", "drafter": "eagle3"}, acceptance=0.6, policy=["off", "goodput"])
    assert "goodput:8" in eagle.summary["policy"].tolist()  # EAGLE's layer is trained on its own output: no cap


def test_imported_counters_that_cannot_be_counts_are_refused():
    import pytest

    from roofline.core.errors import SpecroofError
    from roofline.speculation.importers import import_sglang, import_vllm_prometheus

    nan = (
        'vllm:spec_decode_num_drafts_total{model_name="m"} NaN\n'
        'vllm:spec_decode_num_draft_tokens_total{model_name="m"} +Inf\n'
        'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 5\n'
    )
    with pytest.raises(SpecroofError, match="num_drafts_total is nan: a counter must be a finite number >= 0"):
        import_vllm_prometheus(nan, num_speculative_tokens=3)
    log = "Decode batch. #running-req: 1, #token: 100, token usage: 0.00, accept len: 0.50, cuda graph: True\n"
    with pytest.raises(SpecroofError, match="'accept len: 0.50' is below 1"):
        import_sglang(log, gamma=3)


def test_closed_forms_name_arrays_that_do_not_broadcast():
    import numpy as np
    import pytest

    from roofline.core.errors import SpecroofError

    with pytest.raises(SpecroofError, match=r"alpha \(2,\), gamma \(3,\) do not broadcast together"):
        rf.expected_tokens(np.array([0.5, 0.7]), np.arange(3))
    with pytest.raises(SpecroofError, match="do not broadcast together"):
        rf.ideal_speedup(np.array([0.5, 0.7]), np.arange(3), 0.1)
    assert rf.expected_tokens(np.array([0.5, 0.7])[:, None], np.arange(3)[None, :]).shape == (2, 3)


def test_tensor_parallelism_is_priced_within_one_node_only(capsys):
    """A TP all-reduce is priced over one node's link (section 63): --tp 16 on an H100 is refused where the pricing is
    built, as --ep 16 asks for the network's bandwidth; an NVL72 rack joins 72 GPUs, a TPU slice is not a node."""
    import pytest

    from roofline.core.errors import SpecroofError
    from roofline.costing.pricing import pricing_of
    from specroof.cli import main

    with pytest.raises(SpecroofError, match=r"tp 16 spans 2 nodes of 8 GPUs \(h100-sxm-80gb\)"):
        pricing_of("h100-sxm-80gb", tp=16)
    assert pricing_of("h100-sxm-80gb", tp=8).tp == 8
    assert pricing_of("gb200-186gb", tp=16).tp == 16 and pricing_of("gb300-288gb", tp=72).tp == 72
    with pytest.raises(SpecroofError, match="spans 2 nodes of 72 GPUs"):
        pricing_of("gb300-288gb", tp=144)
    assert pricing_of("tpu-v5p", tp=16).tp == 16
    assert main(["roofline", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-70b", "--tp", "16"]) == 2
    assert "across nodes it runs over the network" in capsys.readouterr().err
    # a configuration that does not fit on a full node is not told to raise --tp
    assert main(["roofline", "--hardware", "h100-sxm-80gb", "--target", "deepseek-v3", "--tp", "8"]) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "raise --tp" not in out and "--tp 8 fills a node" in out
    assert main(["roofline", "--hardware", "h100-sxm-80gb", "--target", "deepseek-v3", "--tp", "4"]) == 0
    assert "raise --tp" in capsys.readouterr().out


def test_an_all_to_all_within_an_nvl72_rack_runs_over_its_link():
    import pytest

    from roofline.core.errors import SpecroofError
    from roofline.costing.hardware import load_hardware
    from roofline.speculation.parallel import all_to_all_link_bytes_per_s

    gb = load_hardware("gb200-186gb")
    assert all_to_all_link_bytes_per_s(gb, 64) == gb.interconnect_bytes_per_s
    with pytest.raises(SpecroofError, match="ep=16 spans nodes of 8 GPUs"):
        all_to_all_link_bytes_per_s(load_hardware("h100-sxm-80gb"), 16)


def test_a_plan_grid_prices_each_draft_chain_once_and_as_each_cell_alone():
    """The draft steps of a plan's grid are priced once per distinct (batch, context) (a grid of gammas x pairs x
    steps held gigabytes at --max-gamma 140), and each cell equals the same configuration priced alone."""
    import numpy as np

    from roofline.costing.pricing import pricing_of
    from roofline.speculation.drafters import Ctx
    from roofline.speculation.drafters.eagle import Eagle
    from roofline.speculation.drafters.sliding_window import SlidingWindowSelfDraft

    spec, pr = get_model("llama-3.1-8b"), pricing_of("h100-sxm-80gb", engine="vllm")
    ctx = Ctx(spec, pr)
    G, B, L = np.meshgrid(np.arange(0, 9), [1, 3, 64], [0, 700, 4096], indexing="ij")
    for d in (Eagle(3), SlidingWindowSelfDraft(512)):
        grid = d.draft_time(ctx, G, B, L)
        alone = [float(d.draft_time(ctx, np.array([g]), np.array([b]), np.array([c]))[0])
                 for g, b, c in zip(G.ravel(), B.ravel(), L.ravel(), strict=True)]  # fmt: skip
        np.testing.assert_allclose(grid.ravel(), alone, rtol=1e-12)


def test_plan_at_a_wide_grid_reads_each_cell_once(capsys):
    """plan --max-gamma 140 over 64 batches took a minute and 12 GB; each recommendation now reads its own cell and
    its crossover K from one priced grid, with the same answers as recommend() prices alone."""
    from specroof.cli import main

    args = ["plan", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--drafter", "eagle3", "--json",
            "--max-gamma", "140", "--batch", "1-64", "--context", "512,4096"]  # fmt: skip
    assert main(args) == 0
    recs = json.loads(capsys.readouterr().out)["recommendations"]
    assert len(recs) == 128
    for r in (recs[0], recs[77], recs[-1]):
        alone = rf.recommend("h100-sxm-80gb", "llama-3.1-8b", "eagle3", 0.7, batch=r["batch"], context=r["context"],
                             gammas=range(0, 141), engine="sglang")  # fmt: skip
        k = int(rf.crossover_tokens("llama-3.1-8b", "h100-sxm-80gb", r["batch"], r["context"], engine="sglang"))
        assert f"crossover K = {k}" in r["reason"] and f"crossover K = {k}" in alone.reason


def test_imported_counts_that_no_run_could_write_are_refused():
    """The second fuzz: more accepted than drafted, a rate above 1, an accept length no draft can reach, a NaN mean."""
    from pathlib import Path

    import pytest

    from roofline.core.errors import SpecroofError
    from roofline.speculation.importers import import_sglang, import_text

    data = Path(__file__).parent / "data"
    prom = (data / "vllm_metrics.prom").read_text()
    few = prom.replace("} 1800.0", "} 100.0").replace("} 1200.0", "} 100.0")  # 200 drafted, 1700 accepted
    with pytest.raises(SpecroofError, match="1700 tokens accepted of 200 drafted: a draft token is accepted at most"):
        import_text(few, "vllm")
    log = (data / "vllm_spec_decode.log").read_text().replace("rate: 0.850, 0.520", "rate: 1.5, 0.520", 1)
    with pytest.raises(SpecroofError, match="acceptance rate of 1.5 in the log"):
        import_text(log, "vllm")
    answers = (data / "spec_bench_answers.jsonl").read_text().replace('"accept_lengths": [1, 2, 3, 3]',
                                                                      '"accept_lengths": [10000000, 2]', 1)  # fmt: skip
    with pytest.raises(SpecroofError, match="line 1: an accept length of 1e\\+07 tokens"):
        import_text(answers, "spec-bench")
    nan = "Decode batch. #running-req: 1, #token: 100, token usage: 0.00, accept len: nan, cuda graph: True\n"
    with pytest.raises(SpecroofError, match="'accept len: nan' is not a number of tokens"):
        import_sglang(nan, gamma=3)
    # the histogram of accept lengths is counted as before: position i accepted in every step that emitted more than i
    counts = import_text((data / "spec_bench_answers.jsonl").read_text(), "spec-bench")
    assert counts.accepted[0] >= counts.accepted[-1] and len(counts.accepted) >= 2


def test_numbers_that_are_yes_or_no_or_arrays_are_refused_in_words():
    import numpy as np
    import pytest

    from roofline.core.errors import SpecroofError

    for flag in (np.bool_(True), np.array(True)):
        with pytest.raises(SpecroofError, match="max_gamma must be a number"):
            rf.optimal_gamma(0.7, 0.1, flag)
    with pytest.raises(SpecroofError, match=r"max_gamma must be one number in \[0, 4096\] \(got an array of shape"):
        rf.optimal_gamma(0.7, 0.1, np.array([4]))
    for flag in (True, np.bool_(True)):
        with pytest.raises(SpecroofError, match="round_overhead_s must be a number"):
            rf.speedup("h100-sxm-80gb", "llama-3.1-8b", "eagle3", 0.7, 3, round_overhead_s=flag)
    both = rf.speedup("h100-sxm-80gb", "llama-3.1-8b", "eagle3", 0.7, 3, round_overhead_s=np.array([0.0, 1e-3]))
    one = rf.speedup("h100-sxm-80gb", "llama-3.1-8b", "eagle3", 0.7, 3, round_overhead_s=1e-3)
    assert float(both.speedup[1]) == pytest.approx(float(one.speedup), rel=1e-12)


def test_an_answers_band_is_its_own_targets_in_any_order(capsys):
    """band_for's cache keyed a hybrid target's band as a dense one's: the band depended on the previous call."""
    from specroof.commands.common import BAND_CACHE, band_for

    BAND_CACHE.clear()
    dense = band_for("sglang", "h100-sxm-80gb", batch=1, speculative=True, model="llama-3.1-8b")[1]
    hybrid = band_for("sglang", "h100-sxm-80gb", batch=1, speculative=True, model="qwen3.5-9b")[1]
    assert "hybrid" in hybrid and "hybrid" not in dense
    BAND_CACHE.clear()
    assert band_for("sglang", "h100-sxm-80gb", batch=1, speculative=True, model="qwen3.5-9b")[1] == hybrid
    assert band_for("sglang", "h100-sxm-80gb", batch=1, speculative=True, model="llama-3.1-8b")[1] == dense


def test_a_roofline_sweep_says_which_configurations_do_not_fit(capsys):
    from specroof.cli import main

    args = ["roofline", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-70b", "--batch", "1", "2"]
    assert main([*args, "--context", "1000"]) == 0
    out = capsys.readouterr()
    assert "2 of 2 configurations DO NOT FIT in 80 GB" in out.out and "fits_in_memory" in out.out
    assert "2 of 2 configurations of llama-3.1-70b need more than" in out.err
    assert main([*args, "--context", "1000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["fits_in_memory"] for r in rows] == [False, False] and rows[0]["memory_footprint_bytes"] > 80e9
    assert main([*args, "--context", "1000", "--tp", "2", "--json"]) == 0
    assert all(r["fits_in_memory"] for r in json.loads(capsys.readouterr().out)["rows"])


def test_the_bound_printed_agrees_with_the_ridge_printed_beside_it(capsys):
    """Under an engine each operator has its own rates: the pass's own ridge is printed where it differs from the
    GEMMs', and the bound follows it (a pass of intensity 291 against a GEMM ridge of 166 was memory bound)."""
    from specroof.cli import main

    args = ["roofline", "--hardware", "b200-180gb", "--target", "qwen3-0.6b", "--context", "16", "--engine", "trtllm"]
    assert main([*args, "--batch", "4096", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["arithmetic_intensity"] < d["pass_ridge_flop_per_byte"]) == (d["bound"] == "memory")
    assert d["arithmetic_intensity"] > d["ridge_flop_per_byte"] and d["bound"] == "memory"  # the case the fuzz found
    assert main([*args, "--batch", "4096"]) == 0
    assert "for the GEMMs, 312.2 for this pass at trtllm's rates per operator" in capsys.readouterr().out
    assert main([*args, "--batch", "1,512,4096", "--json"]) == 0
    for r in json.loads(capsys.readouterr().out)["rows"]:
        assert (r["intensity_flop_per_byte"] < r["pass_ridge_flop_per_byte"]) == (r["bound"] == "memory")


def test_mtp_is_refused_on_targets_that_ship_no_module(capsys):
    """Llama-style presets ship no MTP module: plan refused nothing and emitted a vLLM `"method": "mtp"` command that
    vLLM would refuse to load."""
    from specroof.cli import main

    for target in ("llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b"):
        assert get_model(target).mtp_modules == 0
        args = ["plan", "--hardware", "h100-sxm-80gb", "--target", target, "--drafter", "mtp:3", "--emit", "vllm"]
        assert main([*args, "--acceptance", "mtp=0.7"]) == 2
        assert "ships no multi-token-prediction module" in capsys.readouterr().err


def test_tree_takes_its_acceptance_vector_inline_as_its_help_says(capsys, tmp_path):
    from specroof.cli import main

    assert main(["tree", "--acceptance-vector", "[0.6, 0.2, 0.1]", "--budget", "16", "--json"]) == 0
    inline = json.loads(capsys.readouterr().out)
    (tmp_path / "v.json").write_text("[0.6, 0.2, 0.1]")
    assert main(["tree", "--acceptance-vector", str(tmp_path / "v.json"), "--budget", "16", "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert inline["expected_tokens"] == from_file["expected_tokens"]
    (tmp_path / "null.json").write_text('{"p": null}')
    assert main(["tree", "--acceptance-vector", str(tmp_path / "null.json"), "--budget", "16"]) == 2
    assert "must be a list of rates, rank 0 first (got None)" in capsys.readouterr().err
    assert main(["acceptance", "show", "curve:,0.5"]) == 2
    assert "position 1 is empty" in capsys.readouterr().err


def test_validate_fits_an_engine_given_as_its_profile_file(capsys):
    from pathlib import Path

    from specroof.cli import main

    toml = Path(__file__).parents[1] / "engine_profiles" / "vllm.toml"
    assert main(["validate", "published", "--fit", str(toml), "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["fitted"]) >= {"kv_bandwidth_fraction", "compute_fraction"}


def test_speculation_pays_by_more_than_the_resolution_plan_recommends_by():
    """serve printed 'pays at every per-token rate of the range, from 0.3' beside '0.3: 1.00x': 1.01x is the same
    answer as plain decoding (plan recommends plain decoding within 2%), so no command calls it paying."""
    from roofline.speculation.acceptance_defaults import RESOLUTION, break_even, break_even_words, pays

    assert RESOLUTION == 0.02 and not pays(1.0) and not pays(1.01) and pays(1.03)
    speedups = {0.3: 1.004, 0.4: 1.01, 0.5: 1.05, 0.6: 1.2}
    be = break_even(list(speedups), [pays(s) for s in speedups.values()])
    assert be == 0.5 and break_even_words(be) == "pays from a per-token rate of 0.5"


def test_the_third_fuzz_plots_refuse_in_words_and_draw_what_they_can():
    import numpy as np
    import pandas as pd
    import pytest

    import roofline.plot as pl
    from roofline.core.errors import SpecroofError

    for kw in ({"alphas": np.array([0.7])}, {"max_gamma": 1}, {"max_gamma": 0}):
        assert pl.speedup_map(0.05, **kw).axes  # one alpha or gamma <= 1 has no contour, and draws without it
    for name in ("serving_curves", "published_scatter", "trees_vs_batch_chart", "gamma_by_engine_chart"):
        with pytest.raises(SpecroofError, match=f"{name} needs a table from .* with columns"):
            getattr(pl, name)(pd.DataFrame())
    from roofline.explore import deployment_figure

    with pytest.raises(SpecroofError, match="a mean of 3.2 at 5 drafts is value 0.44"):
        deployment_figure(kind="mean", value=3.2, measured_at=5)


def test_the_third_fuzz_workloads_and_policies(tmp_path):
    import warnings

    import numpy as np
    import pandas as pd
    import pytest

    from roofline.core.errors import SpecroofError
    from roofline.serving.metrics import speculation_pays
    from roofline.serving.policies import parse_policy
    from roofline.serving.workload import MAX_REQUESTS, check_rate, draw_lengths, read_trace

    rng = np.random.default_rng(0)
    with pytest.raises(SpecroofError, match="lognormal:100,50 draws lengths up to .* lower SIGMA"):
        draw_lengths("lognormal:100,50", 50, rng, "output length")
    with pytest.raises(SpecroofError, match="uniform:A-B needs 1 <= A <= B"):  # was swallowed as a parse failure
        draw_lengths("uniform:5-2", 5, rng, "output length")
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n0,1e30,50\n1,10,10\n")
    with pytest.raises(SpecroofError, match=r"input_tokens must be whole numbers in \[1, 2,147,483,648\]"):
        read_trace(tmp_path / "t.csv")
    with pytest.raises(SpecroofError, match="rate must be at least 1e-06 requests per second"):
        check_rate(1e-15)
    assert MAX_REQUESTS == 1_000_000
    with pytest.raises(SpecroofError, match="by-batch gives batch 1 twice"):
        parse_policy("by-batch:1=4,1=2")
    for text in ("goodput:0", "goodput:100"):
        with pytest.raises(SpecroofError, match=r"goodput max gamma must lie in \[1, 32\]"):
            parse_policy(text)
    zero = pd.DataFrame({"policy": ["off", "goodput:8"], "rate_req_s": [4.0, 4.0], "goodput_req_s": [0.0, 0.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning: no request met the SLOs under either policy
        out = speculation_pays(zero, "goodput:8", metric="goodput_req_s")
    assert out["ratio"].tolist() == [1.0] and not out["pays"].any()


def test_the_third_fuzz_command_line(capsys, tmp_path):
    import pytest

    from roofline.core.errors import SpecroofError
    from specroof.cli import build_parser, main
    from specroof.report import _static_tpot_words, validate_inputs

    serve = ["serve", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--drafter", "eagle3"]
    args = build_parser().parse_args([*serve, "--rate", "4", "--round-host-us", "-1e3"])
    assert args.round_host_us == pytest.approx(-1e-3)  # -1e3 us, in seconds: a number, not an unknown option
    # serve prices --host-launch-us as speedup does (it ignored the flag)
    run = [*serve, "--rate", "4", "--requests", "10", "--engine", "hf", "--acceptance", "0.7", "--json"]
    assert main(run) == 0
    plain = json.loads(capsys.readouterr().out)["per_rate"]
    assert main([*run, "--host-launch-us", "500"]) == 0
    slow = json.loads(capsys.readouterr().out)["per_rate"]
    assert slow[0]["tpot_p50_s"] > 5 * plain[0]["tpot_p50_s"]
    assert main([*run, "--host-launch-us", "-500"]) == 2
    # a shipped engine file that extends another is an engine given by path
    from pathlib import Path

    hf4 = Path(__file__).parents[1] / "engine_profiles" / "hf-4.toml"
    assert main(["speedup", "--hardware", "h100-sxm-80gb", "--engine", str(hf4), "--target", "llama-3.1-8b",
                 "--drafter", "eagle3", "--alpha", "0.7"]) == 0  # fmt: skip
    capsys.readouterr()
    with pytest.raises(SpecroofError, match="the report prices bf16 and apple-m4-max has no bf16 peak"):
        validate_inputs(["apple-m4-max"], None)
    import pandas as pd

    table = pd.DataFrame({"policy": ["off", "static:4"] * 3, "rate_req_s": [1, 1, 32, 32, 64, 64],
                          "tpot_p50_s": [2, 1, 2, 3, 2, 1]})  # fmt: skip
    assert _static_tpot_words(table) == "static:4 lowers TPOT p50 at every rate swept but 32 req/s."
