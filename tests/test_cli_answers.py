"""Every command answers the question as asked (issue 46): no guessed budget, no guessed acceptance, one setting per
output, verdicts that agree with their tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specroof.cli import main

HW = "h100-sxm-80gb"
TARGET = "llama-3.1-8b"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def vec(tmp_path):
    p = tmp_path / "v.json"
    p.write_text("[0.6, 0.2, 0.1, 0.05]")
    return str(p)


# -- tree and plan answer without a guess (item 1) ----------------------------------------------------------------


def test_tree_without_a_budget_searches_the_pages_sizes_for_the_gpu(capsys, vec):
    from roofline.deploy.tree_sizing import best_tree_size
    from roofline.speculation.trees import SiblingRankAcceptance
    from specroof.commands.common import TREE_BUDGETS, TREE_DEPTH

    argv = ["tree", "--drafter", "eagle2", "--hardware", HW, "--target", TARGET, "--acceptance-vector", vec]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    d = json.loads(out)
    choice = d["hardware_choice"]
    assert choice["budgets_searched"] == list(TREE_BUDGETS) and choice["max_depth"] == TREE_DEPTH
    # the answer is the GPU's tree: the top-level shape is the chosen one, and it is what the search picks
    assert d["n_nodes"] == choice["n_nodes"] and d["parents"] == choice["parents"]
    direct = best_tree_size(HW, TARGET, "eagle2", SiblingRankAcceptance([0.6, 0.2, 0.1, 0.05]), 1, 1024,
                            TREE_BUDGETS, max_depth=TREE_DEPTH, engine=d["engine"])  # fmt: skip
    assert direct.tree.n_nodes == choice["n_nodes"] and direct.best["speedup"] == pytest.approx(choice["speedup"])
    assert "--speculative-config" in d["deploy"]["flags"]  # an EAGLE drafter: the engine's flags come with it
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "best tree (the fastest, not the largest)" in out and "nodes per level" in out
    assert "flags:" in out and "vllm serve" in out


def test_tree_budget_caps_the_search_and_a_chain_drafter_is_told_where_its_flags_are(capsys, vec):
    argv = ["tree", "--draft", "llama-3.2-1b", "--hardware", HW, "--target", TARGET, "--acceptance-vector", vec]
    code, out, err = run(capsys, *argv, "--budget", "16", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert max(d["hardware_choice"]["budgets_searched"]) == 16 and d["hardware_choice"]["n_nodes"] <= 16
    assert d["n_nodes"] == 16  # with --budget the top level is the fixed-size tree, as before
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "plan --emit" in out.split("flags:")[1]


def test_tree_without_a_budget_or_a_gpu_is_one_line(capsys, vec):
    code, out, err = run(capsys, "tree", "--acceptance-vector", vec)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "--budget" in err


def test_plan_without_acceptance_takes_a_matched_pair_or_answers_over_acceptance(capsys):
    # EAGLE-3 on a Llama-3 8B: the matched pair's figure (vLLM's measurement of that head on that target), named first
    code, out, err = run(
        capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--engine", "vllm"
    )
    assert code == 0, err
    first = out.splitlines()[:2]
    assert "none given: the matched pair's mean:3.53@7" in first[1] and "vllm-project/vllm/issues/26191" in first[1]
    # a Llama-3.2-1B draft of Llama-3.1-8B: no published matched figure, so no borrowed number: a curve and break-even
    argv = ["plan", "--hardware", HW, "--target", TARGET, "--drafter", "model:llama-3.2-1b", "--drafter", "eagle3"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["recommendations"] == [] and "no published acceptance of model drafting" in d["acceptance"][0]
    be = d["break_even"][0]["break_even_alpha"]
    curve = [r for r in d["curve"] if r["batch"] == 1]
    assert be is not None and all((r["speedup"] > 1 and r["gamma"] > 0) == (r["alpha"] >= be) for r in curve)
    assert [r["speedup"] for r in curve] == sorted(r["speedup"] for r in curve)  # more acceptance never slower
    code, out, err = run(capsys, *argv)
    assert code == 0 and out.splitlines()[0].startswith("acceptance: no published acceptance")
    code, out, err = run(capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", "early-exit:8")
    assert code == 0 and "no published acceptance of early-exit drafting" in out.splitlines()[0]


@pytest.mark.parametrize("kind", ["eagle", "medusa", "hydra", "prompt-lookup", "eagle2", "eagle3", "model", "mtp"])
def test_a_published_default_reproduces_its_figure(kind):
    """The default is the published row read back: priced on the run's own tree or gamma it gives that row's mean."""
    from roofline.evidence.published import load_published
    from roofline.speculation.acceptance import PerToken
    from roofline.speculation.drafters import as_drafter, default_tree
    from roofline.speculation.engine_trees import EngineSetting, engine_tree
    from roofline.speculation.speculative import expected_tokens
    from roofline.speculation.trees import IIDAcceptance
    from specroof.commands.common import MTP_ACCEPTANCE, SPEC_BENCH_EAGLE2, SPEC_BENCH_ROWS, published_acceptance

    acc, sentence = published_acceptance(kind)
    assert isinstance(acc, PerToken) and 0 < acc.for_plan() < 1
    if kind == "mtp":
        assert acc.for_plan() == MTP_ACCEPTANCE[0] and "DeepSeek-V3" in sentence
        return
    file, model, drafter = SPEC_BENCH_ROWS[kind]
    rows = load_published()
    row = rows[(rows["file"] == file) & (rows["model"] == model) & (rows["drafter"] == drafter)].iloc[0]
    mean, p = float(row["mean_accepted"]), acc.for_plan()
    assert f"{mean:g} tokens per round" in sentence
    if kind in ("eagle2", "eagle3"):
        got = engine_tree(EngineSetting(*SPEC_BENCH_EAGLE2), IIDAcceptance(p)).expected_tokens
    elif kind == "prompt-lookup":
        got = float(expected_tokens(p, int(row["gamma"])))
    elif kind == "model":
        from roofline.speculation.predict import alpha_for_heuristic

        assert p == pytest.approx(alpha_for_heuristic(mean))
        return
    else:
        got = default_tree(as_drafter(kind)).expected_tokens(IIDAcceptance(p))
    assert got == pytest.approx(mean, rel=1e-6)


# -- one acceptance grammar, every policy combination (item 2) ------------------------------------------------------

SERVE_AT = ["serve", "--hardware", HW, "--target", TARGET, "--drafter", "model:llama-3.2-1b", "--requests", "40",
            "--input-len", "128", "--output-len", "32"]  # fmt: skip
SERVE = [*SERVE_AT, "--rate", "4"]


def _per_rate(out):
    return json.loads(out)["per_rate"]


def test_serve_takes_key_value_acceptance_as_plan_does(capsys):
    code, bare, err = run(capsys, *SERVE, "--acceptance", "0.8", "--policy", "static:3", "--json")
    assert code == 0, err
    for form in ("model=0.8", "draft=0.8", "model=alpha:0.8"):  # the drafter's name, plan's old alias, a kind
        code, out, err = run(capsys, *SERVE, "--acceptance", form, "--policy", "static:3", "--json")
        assert code == 0, err
        assert _per_rate(out) == _per_rate(bare), form
    code, out, err = run(capsys, *SERVE, "--acceptance", "eagle3=0.8")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "KEY must be one of" in err


def test_serve_without_acceptance_takes_the_matched_figure_or_answers_over_acceptance(capsys):
    """No matched published figure for a 1B draft of Llama-3.1-8B: a curve over acceptance (issue 56), whose point
    at a rate is the simulation with that rate written out."""
    code, out, err = run(capsys, *SERVE, "--policy", "static:3", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert "no published acceptance" in d["acceptance"] and "Spec-Bench" not in d["acceptance"]
    point = next(r for r in d["curve"] if r["alpha"] == 0.75)
    code, out2, _ = run(capsys, *SERVE, "--policy", "static:3", "--acceptance", "model=0.75", "--json")
    rows = _per_rate(out2)
    spec, off = (next(r["e2e_p50_s"] for r in rows if r["policy"] == p) for p in ("static:3", "off"))
    assert code == 0 and point["speedup"] == pytest.approx(off / spec, rel=1e-9)


def test_a_vllm_rate_means_the_same_in_serve_and_plan(capsys):
    code, out, _ = run(capsys, *SERVE, "--policy", "static:4", "--acceptance", "model=vllm-rate:0.6@4", "--json")
    serve_alpha = json.loads(out)["settings"]["alpha"]
    code2, out2, _ = run(capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", "model:llama-3.2-1b",
                         "--acceptance", "model=vllm-rate:0.6@4", "--json")  # fmt: skip
    assert code == code2 == 0
    rows = json.loads(out2)["table"]
    g4 = next(r for r in rows if r["gamma"] == 4)
    from roofline.speculation.speculative import expected_tokens

    assert g4["expected_tokens"] == pytest.approx(float(expected_tokens(serve_alpha, 4)), rel=1e-6)


POLICIES = [["off"], ["static:0"], ["off", "static:0"], ["static:3"], ["by-batch:1=4,32=0"], ["by-batch:1=0"],
            ["goodput"], ["goodput:4"], ["tree:eagle"], ["static:3", "goodput"], ["tree:eagle", "static:2"],
            ["off", "static:2"], ["static:3", "static:3"], ["tree:eagle", "tree:medusa"], ["goodput:0"], ["bogus"],
            ["static:-1"], ["OFF", "Static:2"]]  # fmt: skip


@pytest.mark.parametrize("policies", POLICIES, ids=["+".join(p) for p in POLICIES])
def test_every_policy_combination_works_or_is_one_line(capsys, policies):
    argv = ["serve", "--hardware", HW, "--target", TARGET, "--drafter", "eagle", "--acceptance", "0.7", "--rate", "4",
            "--requests", "40", "--input-len", "128", "--output-len", "32"]  # fmt: skip
    for p in policies:
        argv += ["--policy", p]
    code, out, err = run(capsys, *argv)
    assert code in (0, 2), err
    if code == 2:
        assert not out and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    else:
        assert out.startswith("speculation (") and not err.strip()


def test_speedup_takes_the_shared_grammar_too(capsys):
    base = [
        "speedup",
        "--hardware",
        HW,
        "--target",
        TARGET,
        "--drafter",
        "model:llama-3.2-1b",
        "--gamma",
        "4",
        "--json",
    ]
    code, a, _ = run(capsys, *base, "--alpha", "0.7")
    code2, b, _ = run(capsys, *base, "--acceptance", "model=0.7")
    assert code == code2 == 0 and json.loads(a)["speedup"] == pytest.approx(json.loads(b)["speedup"])
    code, _, err = run(capsys, *base, "--acceptance", "0.7", "--alpha", "0.7")
    assert code == 2 and "not both" in err


# -- one answer per question (item 5) --------------------------------------------------------------------------------

METRICS = str(Path(__file__).parent / "data" / "vllm_metrics.prom")


@pytest.mark.parametrize("drafter", ["eagle3", "model:llama-3.2-1b"])
def test_plan_emits_the_gamma_it_ranks_first(capsys, drafter):
    key = drafter.split(":")[0]
    argv = ["plan", "--hardware", HW, "--target", TARGET, "--drafter", drafter, "--acceptance", f"{key}={METRICS}",
            "--emit", "vllm", "--json"]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    d = json.loads(out)
    rec, top, dep = d["recommendations"][0], d["table"][0], d["deploy"][0]
    assert rec["gamma"] == dep["knobs"]["num_speculative_tokens"] and rec["gamma"] <= top["gamma"]
    assert rec["speedup"] == pytest.approx(dep["speedup"]) and rec["speedup"] >= top["speedup"] * 0.98
    # the fastest row is the recommendation unless a cheaper one is within the 2% resolution, and then it says so
    assert rec["gamma"] == top["gamma"] or "within the 2% resolution: the cheaper setting wins" in rec["reason"]
    assert rec["deploy_setting"] == dep["label"]


def test_a_tree_the_engine_builds_replaces_the_chain_only_when_said(capsys):
    argv = ["plan", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--acceptance", "eagle3=mean:3.2",
            "--batch", "1", "64", "--emit", "sglang", "--json"]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    d = json.loads(out)
    for rec, dep in zip(d["recommendations"], d["deploy"], strict=True):
        assert rec["deploy_setting"] == dep["label"]
        if dep["label"] != f"speculative_num_steps={rec['gamma']} speculative_eagle_topk=1 " \
                           f"speculative_num_draft_tokens={rec['gamma'] + 1}":  # fmt: skip
            assert "that is the setting deployed" in rec["reason"] and dep["speedup"] > rec["speedup"]


def test_every_recommending_command_prices_under_serving_by_default_and_says_so(capsys, vec):
    code, out, _ = run(capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--json")
    assert code == 0 and json.loads(out)["engine"] == "serving"
    code, out, _ = run(capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3")
    assert "priced under the serving engine (the default" in out
    code, out, _ = run(capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--engine", "none")
    assert code == 0 and "datasheet roofline" in out
    code, out, _ = run(capsys, "speedup", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3", "--json")
    assert code == 0 and json.loads(out)["engine"] == "serving"
    code, out, _ = run(capsys, "tree", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3",
                       "--acceptance-vector", vec, "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["engine"] == "serving"
    code, out, _ = run(capsys, *SERVE, "--policy", "static:3", "--json")
    assert code == 0 and "vllm" in json.loads(out)["settings"]["pricing"]  # serving is an alias of vLLM's profile


def test_roofline_keeps_the_worked_example_first_with_the_engine_beside(capsys):
    code, out, _ = run(capsys, "roofline", "--hardware", "a100-sxm-80gb", "--params", "13e9", "--dtype", "fp16",
                       "--json")  # fmt: skip
    d = json.loads(out)
    assert code == 0 and d["engine"] == "roofline" and d["dtype"] == "fp16"
    assert d["weight_bytes"] == pytest.approx(26e9) and d["t_step_s"] == pytest.approx(12.75e-3, rel=1e-3)
    assert d["crossover_tokens"] in (152, 153) and d["ridge_flop_per_byte"] == pytest.approx(153.0, rel=0.01)
    assert d["engine_beside"]["engine"] == "serving" and d["engine_beside"]["t_step_s"] > d["t_step_s"]
    code, out, _ = run(capsys, "roofline", "--hardware", "a100-sxm-80gb", "--params", "13e9", "--json")
    assert json.loads(out)["dtype"] == "bf16"  # the one default dtype


def test_target_and_model_are_one_flag(capsys):
    a = run(capsys, "roofline", "--hardware", HW, "--target", TARGET, "--json")
    b = run(capsys, "roofline", "--hardware", HW, "--model", TARGET, "--json")
    assert a[0] == b[0] == 0 and a[1] == b[1]
    code, out, _ = run(capsys, "plan", "--hardware", HW, "--model", TARGET, "--drafter", "eagle3", "--json")
    assert code == 0 and json.loads(out)["recommendations"]
    code, out, err = run(capsys, "plan", "--hardware", HW, "--model", TARGET, "--target", TARGET, "--drafter", "eagle3")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "give it once" in err


@pytest.mark.parametrize("command", [["roofline", "--hardware", HW, "--target", TARGET],
                                     ["plan", "--hardware", HW, "--target", TARGET, "--drafter", "eagle3"]])  # fmt: skip
def test_batch_lists_by_comma_or_by_space(capsys, command):
    a = run(capsys, *command, "--batch", "1,8,64", "--json")
    b = run(capsys, *command, "--batch", "1", "8", "64", "--json")
    c = run(capsys, *command, "--batch", "1", "8,64", "--json")
    assert a[0] == b[0] == c[0] == 0 and a[1] == b[1] == c[1]


@pytest.mark.parametrize(
    "words, flag",
    [(["measure", "sweep", "--model", "qwen2.5-0.5b"], "--batch"), (["measure", "sweep", "--model", "x"], "--tokens"),
     (["measure", "sweep", "--model", "x"], "--context"), (["measure", "spec", "--pair", "offline"], "--gamma"),
     (["measure", "spec", "--pair", "offline"], "--batch"), (["measure", "engine", "--framework", "hf"], "--batch"),
     (["measure", "engine", "--framework", "hf"], "--gamma"), (["measure", "engine", "--framework", "hf"], "--fit-gamma"), (["measure", "engine", "--framework", "hf"], "--depth")],
)  # fmt: skip
def test_the_measuring_commands_take_lists_by_comma_or_by_space(words, flag):
    from specroof.cli import build_parser

    parser = build_parser()
    dest = flag.lstrip("-").replace("-", "_")
    got = [
        getattr(parser.parse_args([*words, flag, *form]), dest) for form in (["1,2,4"], ["1", "2", "4"], ["1", "2-4"])
    ]
    assert got[0] == got[1] == [1, 2, 4] and got[2] == [1, 2, 3, 4]


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"specroof {version('specroof')}"


# -- verdicts that agree with their tables ---------------------------------------------------------------------------


def _summary(rates, spec, off, metric="e2e_p50_s"):
    import pandas as pd

    rows = [{"policy": "static:3", "rate_req_s": r, metric: v} for r, v in zip(rates, spec, strict=True)]
    rows += [{"policy": "off", "rate_req_s": r, metric: v} for r, v in zip(rates, off, strict=True)]
    return pd.DataFrame(rows)


def test_a_verdict_that_flips_back_names_every_rate_and_no_stop():
    from roofline.serving.sweep import verdict

    # ahead at 1, 2 and 32 req/s, behind at 4, 8 and 16: "stops paying at ..." would contradict the 32 row
    v = verdict(_summary([1, 2, 4, 8, 16, 32], [1, 1, 3, 3, 3, 1], [2, 2, 2, 2, 2, 2]), "static:3")
    assert v.kind == "mixed" and v.stops_at is None
    assert v.pays_at == (1, 2, 32) and v.loses_at == (4, 8, 16)
    s = v.sentence("h100")
    assert "pays at 1, 2, 32 req/s and not at 4, 8, 16 req/s" in s and "up to" not in s
    stops = verdict(_summary([1, 2, 4], [1, 1, 3], [2, 2, 2]), "static:3")
    assert stops.kind == "stops" and 2 < stops.stops_at < 4 and "pays up to" in stops.sentence()
    up = verdict(_summary([1, 2], [3, 1], [2, 2], "throughput_tok_s"), "static:3", "throughput_tok_s")
    assert up.pays == (True, False)  # throughput: higher is better


def test_serve_judges_the_named_objective_and_shows_every_one(capsys):
    from roofline.serving.sweep import OBJECTIVES

    code, out, err = run(
        capsys, *SERVE_AT, "--rate", "2,16,64", "--policy", "static:4", "--objective", "ttft", "--acceptance", "0.7",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert d["objective"] == "ttft" and d["judged_on"] == "ttft_p50_s"
    assert set(d["verdicts_by_objective"]) == set(OBJECTIVES)
    rows = d["per_rate"]
    for objective, col in OBJECTIVES.items():
        v = d["verdicts_by_objective"][objective]["static:4"]
        for r in {x["rate_req_s"] for x in rows}:
            spec = next(x[col] for x in rows if x["rate_req_s"] == r and x["policy"] == "static:4")
            off = next(x[col] for x in rows if x["rate_req_s"] == r and x["policy"] == "off")
            better = spec < off if col.endswith("_p50_s") else spec > off
            assert (r in v["pays_at_rates"]) == better, (objective, r)  # the verdict is the table's own comparison
    code, out, _ = run(capsys, *SERVE_AT, "--rate", "2,16", "--policy", "static:4", "--acceptance", "0.7")
    assert "on every objective" in out and all(f"{o} pays" in out for o in OBJECTIVES)
    code, out, err = run(capsys, *SERVE, "--objective", "ttft", "--metric", "ttft_p90_s")
    assert code == 2 and "not both" in err
    code, out, err = run(capsys, *SERVE, "--metric", "nonsense")
    assert code == 2 and "unknown metric" in err and not out


# -- the page ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "r"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        code = main(["report", "--skip-measure", "--hardware", HW, "rtx-4090", "--out", str(out), "--json"])
    assert code == 0
    return out, json.loads(buf.getvalue())


def test_the_page_and_plan_give_one_answer(page, capsys):
    out, summary = page
    row = next(r for r in summary["answer"] if r["hardware"] == HW)
    from specroof.commands.common import published_acceptance

    # the page still prices its draft model at the named Spec-Bench figure; plan, with no matched pair for a
    # Llama-3.2-1B draft of Llama-3.1-8B, answers over acceptance unless given one: give it the page's
    alpha = published_acceptance("model")[0].for_plan()
    code, text, _ = run(capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", "model:llama-3.2-1b",
                        "--acceptance", f"model={alpha!r}", "--json")  # fmt: skip
    rec = json.loads(text)["recommendations"][0]
    assert code == 0 and row["gamma"] == rec["gamma"] and row["chain_speedup"] == pytest.approx(rec["speedup"])


def test_the_page_computes_where_chains_stop_and_ranks_no_row_that_does_not_fit(page):
    import pandas as pd

    out, _ = page
    stops = pd.read_csv(out / "trees_stop_paying.csv")
    assert stops["chains_stop_paying"].notna().all() and stops["trees_stop_paying"].notna().all()
    assert all(s.startswith(("batch ", "pays up to the memory limit")) for s in stops["chains_stop_paying"])
    plan = pd.read_csv(out / "plan.csv")
    over = plan[~plan["fits_in_memory"]]
    assert len(over) and over["speedup"].isna().all() and (over["strategy"] == "does not fit in memory").all()
    assert plan[plan["fits_in_memory"]]["speedup"].notna().all()


def test_the_page_judges_serving_on_the_objective_and_shows_every_one(page):
    import pandas as pd

    from roofline.serving.sweep import DEFAULT_OBJECTIVE, OBJECTIVES

    out, summary = page
    judged = pd.read_csv(out / "serving_verdicts.csv")
    assert set(OBJECTIVES) <= set(judged.columns)
    html = (out / "index.html").read_text()
    assert f"judged on <b>{DEFAULT_OBJECTIVE}</b> (the default" in html


def test_error_tables_never_print_exponents_or_minus_zero(page, capsys):
    from specroof.shell import number, percent

    assert number(2040.0) == "2,040" and number(12.345) == "12.3" and number(0.5) == "0.5"
    assert percent(-0.001) == "0%" and percent(0.004) == "0%" and percent(-0.2) == "-20%" and percent(0.25) == "+25%"
    out, _ = page
    html = (out / "index.html").read_text()
    import re

    cells = re.findall(r"<td>([^<]*)</td>", html)
    assert not [c for c in cells if re.fullmatch(r"-?[\d.]+e[+-]\d+", c.strip())], "a number in exponent form"
    assert "-0%" not in cells
    code, text, _ = run(capsys, "validate", "published")
    assert code == 0 and "-0%" not in text and not re.search(r"\d\.\d+e\+\d\d", text)
