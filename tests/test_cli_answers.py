"""Every command answers the question as asked (issue 46): no guessed budget, no guessed acceptance, one setting per
output, verdicts that agree with their tables."""

from __future__ import annotations

import json

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
    from roofline.tree_sizing import best_tree_size
    from roofline.trees import SiblingRankAcceptance
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


def test_plan_without_acceptance_takes_each_drafters_published_figure_and_names_it(capsys):
    argv = ["plan", "--hardware", HW, "--target", TARGET, "--drafter", "model:llama-3.2-1b", "--drafter", "eagle3"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    notes = json.loads(out)["acceptance"]
    assert len(notes) == 2 and all("none given" in n and "Spec-Bench" in n for n in notes)
    code, out, err = run(capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", "early-exit:8")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "--acceptance" in err


@pytest.mark.parametrize("kind", ["eagle", "medusa", "hydra", "prompt-lookup", "eagle2", "eagle3", "model", "mtp"])
def test_a_published_default_reproduces_its_figure(kind):
    """The default is the published row read back: priced on the run's own tree or gamma it gives that row's mean."""
    from roofline.acceptance import PerToken
    from roofline.drafters import as_drafter, default_tree
    from roofline.engine_trees import EngineSetting, engine_tree
    from roofline.published import load_published
    from roofline.speculative import expected_tokens
    from roofline.trees import IIDAcceptance
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
        from roofline.predict import alpha_for_heuristic

        assert p == pytest.approx(alpha_for_heuristic(mean))
        return
    else:
        got = default_tree(as_drafter(kind)).expected_tokens(IIDAcceptance(p))
    assert got == pytest.approx(mean, rel=1e-6)


# -- one acceptance grammar, every policy combination (item 2) ------------------------------------------------------

SERVE = ["serve", "--hardware", HW, "--target", TARGET, "--drafter", "model:llama-3.2-1b", "--rate", "4",
         "--requests", "40", "--input-len", "128", "--output-len", "32"]  # fmt: skip


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


def test_serve_without_acceptance_takes_the_published_figure_and_says_so(capsys):
    from specroof.commands.common import published_acceptance

    code, out, err = run(capsys, *SERVE, "--policy", "static:3", "--json")
    assert code == 0, err
    d = json.loads(out)
    alpha = published_acceptance("model")[0].for_plan()
    assert d["settings"]["alpha"] == pytest.approx(alpha) and "Spec-Bench" in d["acceptance"]
    # the same figure written out gives the same simulation
    code, out2, _ = run(capsys, *SERVE, "--policy", "static:3", "--acceptance", f"model={alpha!r}", "--json")
    assert code == 0 and _per_rate(out2) == _per_rate(out)


def test_a_vllm_rate_means_the_same_in_serve_and_plan(capsys):
    code, out, _ = run(capsys, *SERVE, "--policy", "static:4", "--acceptance", "model=vllm-rate:0.6@4", "--json")
    serve_alpha = json.loads(out)["settings"]["alpha"]
    code2, out2, _ = run(capsys, "plan", "--hardware", HW, "--target", TARGET, "--drafter", "model:llama-3.2-1b",
                         "--acceptance", "model=vllm-rate:0.6@4", "--json")  # fmt: skip
    assert code == code2 == 0
    rows = json.loads(out2)["table"]
    g4 = next(r for r in rows if r["gamma"] == 4)
    from roofline.speculative import expected_tokens

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
