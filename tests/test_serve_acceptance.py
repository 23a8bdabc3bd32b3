"""``specroof serve`` takes acceptance by the rule plan and report take it (issue 56): a matched published default
named in its first lines, and where no matched figure exists a curve over acceptance with the break-even rate."""

from __future__ import annotations

import json

import pytest

from roofline.speculation.acceptance_defaults import CURVE_ALPHAS, break_even, matched_default
from specroof.cli import main

HW = "h100-sxm-80gb"
SMALL = ["--requests", "40", "--input-len", "128", "--output-len", "32", "--rate", "1,8"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_break_even_is_the_lowest_rate_from_which_every_higher_one_pays():
    assert break_even([0.3, 0.5, 0.7, 0.9], [False, True, True, True]) == 0.5
    assert break_even([0.9, 0.3, 0.7, 0.5], [True, False, True, False]) == 0.7  # paying once below is no break-even
    assert break_even([0.3, 0.5], [True, False]) is None
    assert break_even([0.3, 0.5], [True, True]) == 0.3


def test_serve_names_the_matched_default_and_its_source_in_its_first_lines(capsys):
    pair = matched_default("eagle3", "llama-3.1-8b")
    assert pair is not None
    code, out, err = run(capsys, "serve", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter", "eagle3",
                         "--policy", "static:3", *SMALL)  # fmt: skip
    assert code == 0, err
    head = "\n".join(out.splitlines()[:3])
    assert pair.url in head and pair.value in head and "Spec-Bench" not in out
    code, js, _ = run(capsys, "serve", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter", "eagle3",
                      "--policy", "static:3", *SMALL, "--json")  # fmt: skip
    d = json.loads(js)
    assert code == 0 and pair.url in d["acceptance"]
    # the matched mean, drawn as the chain rate with its tokens per round at its own length (mean:3.53@7)
    from roofline.speculation.acceptance_kinds import alpha_for_tokens

    assert d["settings"]["alpha"] == pytest.approx(float(alpha_for_tokens(3.53, 7)), rel=1e-6)


def test_serve_without_a_matched_figure_answers_with_a_curve_and_its_break_even(capsys):
    assert matched_default("eagle3", "llama-3.1-70b") is None
    argv = ["serve", "--hardware", HW, "--target", "llama-3.1-70b", "--tp", "4", "--drafter", "eagle3",
            "--policy", "static:3", *SMALL]  # fmt: skip
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert "no published acceptance" in d["acceptance"] and "speculation_stops_paying_at_rate" not in d
    assert "per_rate" not in d  # not one number priced at a borrowed figure
    curve = [r for r in d["curve"] if r["policy"] == "static:3" and r["rate_req_s"] == 1.0]
    assert [r["alpha"] for r in curve] == list(CURVE_ALPHAS)
    assert all(r["speedup"] > 0 for r in curve) and curve[-1]["speedup"] > curve[0]["speedup"]
    be = {(b["rate_req_s"], b["policy"]): b["break_even_alpha"] for b in d["break_even"]}
    assert set(be) == {(1.0, "static:3"), (8.0, "static:3")}
    assert be[(1.0, "static:3")] == break_even([r["alpha"] for r in curve], [r["speedup"] > 1 for r in curve])
    # each point of the curve is the simulation at that rate given explicitly
    code, one, _ = run(capsys, *argv, "--acceptance", "0.7", "--json")
    p = json.loads(one)["per_rate"]
    spec = next(r for r in p if r["policy"] == "static:3" and r["rate_req_s"] == 1.0)["e2e_p50_s"]
    off = next(r for r in p if r["policy"] == "off" and r["rate_req_s"] == 1.0)["e2e_p50_s"]
    assert next(r for r in curve if r["alpha"] == 0.7)["speedup"] == pytest.approx(off / spec, rel=1e-9)
    code, text, err = run(capsys, *argv)
    assert code == 0, err
    first = text.splitlines()[0]
    assert first.startswith("acceptance: no published acceptance of eagle3") and "break-even" in first
    assert "1 req/s, static:3:" in text and "0.95: " in text


def test_under_vllm_a_mean_and_the_same_mean_at_vllms_reading_length_are_one_answer(capsys):
    from roofline.speculation.acceptance_positions import VLLM_READING_GAMMA

    base = ["serve", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter", "eagle3", "--engine", "vllm",
            "--policy", "static:3", *SMALL, "--json"]  # fmt: skip
    outs = []
    for value in ("eagle3=mean:3", f"eagle3=mean:3@{VLLM_READING_GAMMA}"):
        code, out, err = run(capsys, *base, "--acceptance", value)
        assert code == 0, err
        outs.append(json.loads(out))
    assert outs[0]["settings"]["alpha"] == pytest.approx(outs[1]["settings"]["alpha"], rel=1e-12)
    assert outs[0]["per_rate"] == outs[1]["per_rate"]


# -- one measured number, one answer: a suffix that restates the engine's default changes nothing --------------------


def _plan(capsys, engine, value, target="llama-3.1-8b"):
    code, out, err = run(capsys, "plan", "--hardware", HW, "--target", target, "--drafter", "eagle3",
                         "--acceptance", f"eagle3={value}", "--engine", engine, "--batch", "1,16,64", "--json")  # fmt: skip
    assert code == 0, err
    return [(r["batch"], r["gamma"], r["speedup"]) for r in json.loads(out)["recommendations"]]


def test_a_suffix_that_restates_the_engines_default_shape_gives_the_same_answer(capsys):
    from roofline.speculation.acceptance_positions import VLLM_READING_GAMMA

    assert _plan(capsys, "vllm", "mean:3") == _plan(capsys, "vllm", f"mean:3@{VLLM_READING_GAMMA}")
    assert _plan(capsys, "sglang", "mean:3") == _plan(capsys, "sglang", "mean:3@tree")
    # @tree says the tree explicitly under an engine whose default is a chain: a different reading, said so
    code, out, err = run(capsys, "plan", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter", "eagle3",
                         "--acceptance", "eagle3=mean:3@tree", "--engine", "vllm")  # fmt: skip
    assert code == 0 and "SGLang's default EAGLE tree" in out.splitlines()[1]


def test_mean_at_tree_is_parsed_and_refused_where_it_names_nothing():
    from roofline.speculation.acceptance import parse_acceptance

    acc = parse_acceptance("mean:3.2@tree")
    assert acc.tree and acc.gamma is None and acc.mean == 3.2 and "@tree" in acc.given()
    assert not parse_acceptance("mean:3.2@4").tree


def test_at_tree_for_a_chain_drafter_is_one_line(capsys):
    code, out, err = run(capsys, "plan", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter",
                         "model:llama-3.2-1b", "--acceptance", "model=mean:3@tree")  # fmt: skip
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "mean:3@G" in err


def test_the_report_names_where_its_acceptance_came_from_in_its_headline(capsys, tmp_path):
    code, out, err = run(capsys, "report", "--quick", "--skip-measure", "--hardware", HW, "--out", str(tmp_path / "r"))
    assert code == 0, err
    head = out.splitlines()[:3]
    assert head[0].startswith("The answer") and head[1].startswith("  acceptance of draft llama-3.2-1b: ")
    assert "no published acceptance of model drafting" in head[1] and "stand-in" in head[1]
    assert "break-even" in head[1]


def test_a_tree_that_does_not_fit_carries_no_speedup(capsys, tmp_path):
    vec = tmp_path / "v.json"
    vec.write_text("[0.6, 0.2, 0.1]")
    argv = ["tree", "--hardware", HW, "--target", "llama-3.1-70b", "--drafter", "model:llama-3.2-1b",
            "--acceptance-vector", str(vec)]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "does not fit in memory" in out and "speedup" not in out and "x (" not in out
    code, out, err = run(capsys, *argv, "--json")
    d = json.loads(out)
    assert d["hardware_choice"]["fits_in_memory"] is False and d["hardware_choice"]["speedup"] is None
    assert "speedup" not in {k for k, v in d.items() if v is not None and k != "hardware_choice"}
    code, out, _ = run(capsys, *argv, "--tp", "2")  # two devices hold it: the answer is back
    assert code == 0 and "best tree" in out and "does not fit" not in out


def test_the_apis_recommendation_that_does_not_fit_carries_no_speedup():
    import roofline as rf
    from roofline.deploy.planner import NOT_FIT_BLANK

    pr = rf.Pricing.of(HW, engine="vllm", dtype="bf16")
    rec = rf.recommend(pr, "llama-3.1-70b", "eagle3", 0.7, batch=1)
    assert rec.row["fits_in_memory"] is False or not rec.row["fits_in_memory"]
    assert all(rec.row[k] is None for k in NOT_FIT_BLANK)
    assert rec.reason.startswith("does not fit in memory") and "x (" not in rec.reason
    rec = rf.recommend(pr, "llama-3.1-8b", "eagle3", 0.7, batch=512, context=32768)
    assert rec.row["speedup"] is None and "the largest batch that fits at context 32768 is" in rec.reason
    two = rf.recommend(rf.Pricing.of(HW, engine="vllm", dtype="bf16", tp=2), "llama-3.1-70b", "eagle3", 0.7)
    assert two.row["fits_in_memory"] and two.row["speedup"] > 1


def test_the_largest_batch_that_fits_counts_the_drafters_memory_at_that_batch(capsys):
    """A draft model keeps a KV cache of its own: the largest batch that fits is read with it at that batch, not
    with the drafter's bytes at the batch that did not fit (which leaves no room for any)."""
    import roofline as rf
    from roofline.deploy.planner import largest_for_row

    drafters, acc = ["model:llama-3.2-1b"], {"draft llama-3.2-1b": 0.75}
    pr = rf.Pricing.of(HW)
    rec = rf.recommend(pr, "llama-3.1-8b", drafters, acc, batch=64, context=32768)
    assert rec.row["speedup"] is None and "not even one sequence fits" not in rec.reason
    top = {str(k): v for k, v in rec.table.iloc[0].items()}
    got = largest_for_row(pr, "llama-3.1-8b", drafters, top, pr.hardware.memory_bytes)
    assert 1 <= got.batch < 64 and 1024 <= got.context < 32768
    at = rf.plan(pr, "llama-3.1-8b", drafters, acc, batch=[got.batch, got.batch + 1], context=32768,
                 gammas=[int(top["gamma"])])  # fmt: skip
    fits = dict(zip(at["batch"], at["fits_in_memory"], strict=True))
    assert fits[got.batch] and not fits[got.batch + 1]  # the same footprint plan() prices, at the edge


def test_tree_takes_the_matched_default_or_answers_over_acceptance(capsys):
    pair = matched_default("eagle3", "llama-3.1-8b")
    code, out, err = run(capsys, "tree", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter", "eagle3")
    assert code == 0, err
    assert pair.url in out.splitlines()[0] and "Spec-Bench" not in out
    argv = ["tree", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter", "eagle2", "--batch", "1,16"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert "no published acceptance of eagle2" in d["acceptance"] and "--acceptance-vector" in d["acceptance"]
    assert [r["iid_p"] for r in d["curve"] if r["batch"] == 1] == list(CURVE_ALPHAS)
    one = [r for r in d["curve"] if r["batch"] == 16]
    assert d["break_even"][1]["break_even_p"] == break_even([r["iid_p"] for r in one], [r["speedup"] > 1 for r in one])
    code, text, _ = run(capsys, *argv)
    assert text.startswith("acceptance: no published acceptance") and "flags:" not in text
    code, out, err = run(capsys, *argv, "--budget", "8")  # one tree of a fixed size needs one acceptance
    assert code == 2 and not out and len(err.strip().splitlines()) == 1


def test_trees_table_never_ranks_the_undeployable_tree_first(capsys, tmp_path):
    vec = tmp_path / "vec.json"
    vec.write_text("[0.6, 0.2, 0.1]")
    argv = ["tree", "--acceptance-vector", str(vec), "--hardware", HW, "--target", "llama-3.1-8b", "--drafter",
            "eagle3", "--batch", "1", "--engine", "vllm", "--json"]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    rows = json.loads(out)["answers"]
    searched = next(r for r in rows if r["answer"] == "best tree searched")
    assert searched["speedup"] > rows[0]["speedup"] * 1.02  # the case: the searched tree is well ahead
    assert rows[0]["deployable"].startswith("deployable in vLLM") and rows[1] == searched


def test_speculation_paying_only_at_the_larger_batch_says_why(capsys):
    code, out, err = run(capsys, "plan", "--hardware", HW, "--target", "gpt-oss-120b", "--drafter", "eagle3",
                         "--acceptance", "eagle3=mean:2.56@3", "--batch", "1,32", "--engine", "sglang", "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    one, big = d["recommendations"]
    assert one["gamma"] == 0 and big["gamma"] and big["speedup"] > 1  # the case: paying only at batch 32
    note = next(n for n in d["batch_notes"] if n.startswith("speculation pays at batch 32"))
    assert "not at batch 1" in note and "the plain step grows" in note


def test_serve_sizes_its_kv_cache_in_the_engines_reserved_share(capsys):
    from roofline.deploy.memory import reserved_share

    base = ["serve", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter", "eagle3", "--acceptance", "0.7",
            "--policy", "static:3", "--rate", "1", "--requests", "20", "--json"]  # fmt: skip
    kv = {}
    for extra in ([], ["--engine", "sglang"], ["--memory-fraction", "0.5"]):
        code, out, err = run(capsys, *base, *extra)
        assert code == 0, err
        d = json.loads(out)
        kv[tuple(extra)] = (d["memory_share"]["fraction"], d["settings"]["kv_capacity_tokens"]["off"])
    assert kv[()][0] == 0.9 and kv[("--engine", "sglang")][0] == reserved_share("sglang", 1)[0]
    assert kv[("--memory-fraction", "0.5")][0] == 0.5
    assert kv[("--memory-fraction", "0.5")][1] < kv[("--engine", "sglang")][1] < kv[()][1]
    code, out, err = run(capsys, *base[:-1], "--memory-fraction", "1.5")
    assert code == 2 and not out and "--memory-fraction" in err and len(err.strip().splitlines()) == 1


def test_speedup_prices_a_chain_measured_default_on_its_chain_as_plan_does(capsys):
    code, out, err = run(capsys, "speedup", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter", "eagle3",
                         "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert d["gamma"] == 7 and not d.get("tree_nodes")  # mean:3.53@7, measured on vLLM's chain of 7
    code, out, _ = run(capsys, "plan", "--hardware", HW, "--target", "llama-3.1-8b", "--drafter", "eagle3",
                       "--batch", "1", "--top", "30", "--json")  # fmt: skip
    row = next(r for r in json.loads(out)["table"] if r["gamma"] == 7)
    assert d["speedup"] == pytest.approx(row["speedup"], rel=1e-6)


def test_serve_over_acceptance_refuses_a_plot_in_one_line(capsys, tmp_path):
    code, out, err = run(capsys, "serve", "--hardware", HW, "--target", "llama-3.1-70b", "--tp", "4", "--drafter",
                         "eagle3", *SMALL, "--plot", str(tmp_path / "p.png"))  # fmt: skip
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "--acceptance" in err
    assert not (tmp_path / "p.png").exists()
