"""The engines' own knobs as the question (issue 47, item 1): ``--engine-config`` on speedup, plan, tree and serve,
read before any work, the flags it answers filled in, and what ``plan --emit`` prints read back to the same price."""

from __future__ import annotations

import json

import pytest

from roofline.core.errors import SpecroofError
from roofline.deploy.engine_flags import read_engine_config
from specroof.cli import main

HW = "h100-sxm-80gb"
T8B = "llama-3.1-8b"
SGLANG = (
    "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --speculative-num-steps 5 "
    "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8"
)
SGLANG_FLAGS = "--speculative-algorithm EAGLE3 --speculative-num-steps 5 --speculative-eagle-topk 4 " + (
    "--speculative-num-draft-tokens 8"
)
VLLM_LINE = (
    "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --dtype bfloat16 --speculative-config "
    """'{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'"""
)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> bool:
    return err.startswith("specroof: error: ") and "\n" not in err.strip() and "Traceback" not in err


# -- knobs out, knobs in: what plan --emit prints prices to plan's own figure -------------------------------------


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
@pytest.mark.parametrize(
    "drafter, extra",
    [("eagle3", []), ("model:llama-3.2-1b", ["--tp", "2", "--acceptance", "model=0.75", "--batch", "4"])],
)
def test_speedup_reads_plans_emitted_output_and_prices_it_to_plans_number(capsys, engine, drafter, extra):
    plan = ["plan", "--hardware", HW, "--target", T8B, "--drafter", drafter, "--emit", engine, *extra]
    code, out, err = run(capsys, *plan, "--json")
    assert code == 0, err
    deploy = json.loads(out)["deploy"]
    assert len(deploy) == 1 and deploy[0]["speedup"] > 1.0
    code, text, err = run(capsys, *plan)  # the exact text a shell's $(specroof plan ...) captures
    assert code == 0, err
    acceptance = [extra[extra.index("--acceptance") + 1]] if "--acceptance" in extra else []
    for given in (text, out):  # plan's text, and its --json
        code, got, err = run(capsys, "speedup", "--engine-config", given, *(["--acceptance", *acceptance] if
                                                                             acceptance else []), "--json")  # fmt: skip
        assert code == 0, err
        d = json.loads(got)
        # plan's GPU, batch, engine and TP come with its output: the same setting, the same price
        assert d["hardware"] == HW and d["batch"] == deploy[0]["batch"]
        assert d["label"] == deploy[0]["label"]
        assert d["speedup"] == pytest.approx(deploy[0]["speedup"], rel=1e-9)
        assert d["engine_config"]["tp"] == (2 if "--tp" in extra else None)


def test_an_emitting_plan_prices_under_the_emitted_engine_unless_told(capsys):
    base = ["plan", "--hardware", HW, "--target", T8B, "--drafter", "eagle3", "--json"]
    code, out, _ = run(capsys, *base, "--emit", "sglang")
    assert code == 0 and json.loads(out)["engine"] == "sglang"  # SGLang's flags, SGLang's costs
    code, out, _ = run(capsys, *base, "--emit", "vllm")
    assert code == 0 and json.loads(out)["engine"] == "serving"  # the default is vLLM's already
    code, out, _ = run(capsys, *base, "--emit", "sglang", "--engine", "serving")
    assert code == 0 and json.loads(out)["engine"] == "serving"  # as told
    code, text, _ = run(capsys, *base[:-1], "--emit", "sglang")
    assert "priced under the sglang engine (--emit sglang's own costs" in text


def test_a_plan_output_with_several_deployments_is_picked_by_gpu_batch_and_context(capsys, tmp_path):
    code, text, _ = run(capsys, "plan", "--hardware", HW, "--target", T8B, "--drafter", "eagle3", "--emit", "sglang",
                        "--batch", "1,64")  # fmt: skip
    assert code == 0
    f = tmp_path / "plan.txt"
    f.write_text(text)
    code, _, err = run(capsys, "speedup", "--engine-config", f"@{f}")
    assert code == 2 and one_line(err) and "2 deployments" in err and "--batch" in err
    code, out, err = run(capsys, "speedup", "--engine-config", f"@{f}", "--batch", "64", "--json")
    assert code == 0, err
    assert json.loads(out)["batch"] == 64
    code, _, err = run(capsys, "speedup", "--engine-config", f"@{f}", "--batch", "8")
    assert code == 2 and one_line(err) and "none at --batch 8" in err


def test_a_whole_vllm_serve_line_is_read_and_priced_as_the_api_prices_it(capsys):
    from roofline.costing.pricing import Pricing
    from roofline.deploy.planner import price_engine_config

    code, out, err = run(capsys, "speedup", "--hardware", HW, "--engine-config", VLLM_LINE, "--acceptance", "0.8",
                         "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    cfg = d["engine_config"]
    assert (cfg["engine"], cfg["tp"], cfg["dtype"], cfg["drafter"]) == ("vllm", 2, "bf16", "eagle3")
    assert d["target"] == T8B and d["engine"] == "vllm" and d["num_draft_tokens"] == 4
    config = read_engine_config(VLLM_LINE)
    want = price_engine_config(config, Pricing.of(HW, engine="vllm", tp=2), acceptance=0.8)
    assert d["speedup"] == pytest.approx(want["speedup"], rel=1e-12)
    code, text, _ = run(capsys, "speedup", "--hardware", HW, "--engine-config", VLLM_LINE)
    assert code == 0 and "as vllm runs it (num_speculative_tokens=3)" in text and "read from: vllm serve" in text


def test_a_mean_accepted_length_is_read_as_measured_with_your_setting(capsys):
    from roofline.deploy.planner import price_engine_config

    code, out, err = run(capsys, "speedup", "--hardware", HW, "--engine-config", SGLANG, "--acceptance",
                         "eagle3=mean:3.2", "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert d["expected_tokens"] == pytest.approx(3.2) and "measured with your setting" in d["acceptance"]
    want = price_engine_config(read_engine_config(SGLANG), HW, mean_accepted=3.2)
    assert d["speedup"] == pytest.approx(want["speedup"], rel=1e-12)


# -- filled where left out, refused where they differ -----------------------------------------------------------


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--target", "llama-3.1-70b"], "--target"),
        (["--tp", "4"], "--tp"),
        (["--engine", "sglang"], "--engine"),
        (["--engine", "compiled"], "--engine"),
        (["--drafter", "eagle"], "--drafter"),
        (["--dtype", "fp16"], "--dtype"),
        (["--gamma", "5"], "--gamma"),
        (["--tree", "eagle"], "--tree"),
    ],
)
def test_a_flag_that_contradicts_the_engine_config_is_refused_in_one_line(capsys, extra, flag):
    code, _, err = run(capsys, "speedup", "--hardware", HW, "--engine-config", VLLM_LINE, *extra)
    assert code == 2 and one_line(err) and flag in err


def test_flags_that_agree_with_the_engine_config_are_taken(capsys):
    code, out, err = run(capsys, "speedup", "--hardware", HW, "--engine-config", VLLM_LINE, "--target", T8B, "--tp",
                         "2", "--engine", "vllm-0.12", "--drafter", "eagle3", "--dtype", "bf16", "--gamma", "3",
                         "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["engine_profile"] == "vllm-0.12"  # a version of the configuration's engine


def test_a_flag_string_is_given_with_an_equals_sign_and_the_target_where_it_names_none(capsys):
    code, _, err = run(capsys, "speedup", "--hardware", HW, f"--engine-config={SGLANG_FLAGS}")
    assert code == 2 and one_line(err) and "--target" in err  # flags alone name no model
    code, out, err = run(capsys, "speedup", "--hardware", HW, f"--engine-config={SGLANG_FLAGS}", "--target", T8B,
                         "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["engine"] == "sglang"


# -- bad knobs: one line naming the knob, exit 2, before any work, in both forms ------------------------------------

BAD_KNOBS = {
    "unknown method": ('{"method": "eagle9", "num_speculative_tokens": 3}', '"method"'),
    "draft tokens past SGLang's candidates": (
        "--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 2 "
        "--speculative-num-draft-tokens 16",
        "--speculative-num-draft-tokens",
    ),
    "a tree path without its parent": (
        '{"method": "eagle", "num_speculative_tokens": 3, "speculative_token_tree": "[(0,), (1,), (2, 0)]"}',
        "speculative_token_tree",
    ),
    "a TP the model cannot split": (
        "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 3 --speculative-config "
        """'{"method": "eagle3", "num_speculative_tokens": 3}'""",
        "--tensor-parallel-size 3",
    ),
}
COMMANDS = {
    "speedup": ["speedup", "--hardware", HW, "--target", T8B],
    "plan": ["plan", "--hardware", HW, "--target", T8B],
    "tree": ["tree", "--hardware", HW, "--target", T8B, "--acceptance-vector", "ACC"],
    "serve": ["serve", "--hardware", HW, "--target", T8B, "--rate", "1"],
}


@pytest.fixture
def no_work(monkeypatch):
    """Any pricing or simulation is work: a check that runs after it would exit 1 (a bug), not 2."""
    import roofline.serving
    from roofline.costing.pricing import Pricing

    def refuse(*a, **k):
        raise AssertionError("work started before the engine configuration was checked")

    monkeypatch.setattr(Pricing, "of", refuse)
    monkeypatch.setattr(roofline.serving, "simulate", refuse)


def test_the_work_detector_detects_work(capsys, no_work):
    for command in ("speedup", "plan", "serve"):
        code, _, err = run(capsys, *COMMANDS[command], f"--engine-config={SGLANG_FLAGS}")
        assert code == 1 and "work started" in err, command


@pytest.mark.parametrize("form", ["equals", "file"])
@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(BAD_KNOBS))
def test_bad_knobs_are_one_line_naming_the_knob_before_any_work(capsys, tmp_path, no_work, form, command, case):
    text, knob = BAD_KNOBS[case]
    vec = tmp_path / "v.json"
    vec.write_text("[0.6, 0.2, 0.1]")
    argv = [str(vec) if a == "ACC" else a for a in COMMANDS[command]]
    if form == "file":
        f = tmp_path / "engine.txt"
        f.write_text(text + "\n")
        argv.append(f"--engine-config=@{f}")
    else:
        argv.append(f"--engine-config={text}")
    code, _, err = run(capsys, *argv)
    assert code == 2, err
    assert one_line(err) and knob in err


def test_the_reader_and_the_cli_refuse_the_same_knobs():
    for text, knob in BAD_KNOBS.values():
        with pytest.raises(SpecroofError, match=knob.replace("(", r"\(").replace(")", r"\)")):
            read_engine_config(text, target=T8B)


# -- plan: yours against the best, per cell -----------------------------------------------------------------------


def test_plan_says_yours_gives_x_and_the_best_gives_y_per_cell(capsys):
    from roofline.costing.pricing import Pricing
    from roofline.deploy.planner import compare_engine_config

    argv = ["plan", "--hardware", HW, "--batch", "1,64", "--engine-config", SGLANG, "--acceptance", "eagle3=mean:3.2"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert [c["batch"] for c in d["verdicts"]] == [1, 64]
    config = read_engine_config(SGLANG)
    for cell in d["verdicts"]:
        v = compare_engine_config(
            config, Pricing.of(HW, engine="sglang"), mean_accepted=3.2, batch=cell["batch"], resolution=0.02
        )  # plan answers within its 2% resolution (section 50.3)
        assert cell["sentence"] == v.sentence() and cell["flags"] == v.flags
        assert cell["yours"]["speedup"] == pytest.approx(v.yours["speedup"], rel=1e-12)
        assert cell["error_band_note"] and cell["kv_bound_context"] > 0
    assert d["engine"] == "sglang" and d["engine_config"]["label"] == config.setting.label
    assert sum(r["yours"] for r in d["table"]) == 2  # your setting is in the table of each cell, marked
    code, text, _ = run(capsys, *argv)
    assert code == 0
    cells = [line for line in text.splitlines() if line.startswith(f"{HW}  batch")]
    assert len(cells) == 2 and all("yours (sglang " in c for c in cells)
    assert "the best setting gives" in cells[1] and "with these flags: python -m sglang.launch_server" in cells[1]
    assert "kv_bound_context" in text


def test_plan_refuses_a_second_engine_or_drafter_beside_the_engine_config(capsys):
    base = ["plan", "--hardware", HW, "--engine-config", SGLANG]
    code, _, err = run(capsys, *base, "--emit", "vllm")
    assert code == 2 and one_line(err) and "--emit" in err
    code, _, err = run(capsys, *base, "--drafter", "eagle3", "--drafter", "model:llama-3.2-1b")
    assert code == 2 and one_line(err) and "one drafter" in err
    code, _, err = run(capsys, "plan", "--hardware", HW, "--drafter", "eagle3")
    assert code == 2 and one_line(err) and "--target" in err


# -- tree and serve ------------------------------------------------------------------------------------------------


def test_tree_prices_the_engines_tree_under_the_acceptance_vector(capsys, tmp_path):
    from roofline.costing.pricing import Pricing
    from roofline.deploy.planner import price_engine_config
    from roofline.speculation.acceptance import read_sibling_vector
    from roofline.speculation.engine_trees import engine_tree

    vec = tmp_path / "v.json"
    vec.write_text("[0.6, 0.2, 0.1, 0.05]")
    argv = ["tree", "--hardware", HW, "--acceptance-vector", str(vec), "--engine-config", SGLANG]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    d = json.loads(out)
    acc = read_sibling_vector(str(vec)).model()
    config = read_engine_config(SGLANG)
    want = price_engine_config(config, Pricing.of(HW, engine="sglang"), acceptance=acc)
    assert d["verdict"]["yours"]["speedup"] == pytest.approx(want["speedup"], rel=1e-12)
    assert d["engine_config"]["tree"]["n_nodes"] == engine_tree(config.setting, acc).tree.n_nodes == 7
    assert d["engine"] == "sglang" and "--speculative-num-steps" in d["deploy"]["flags"]
    code, text, _ = run(capsys, *argv)
    assert code == 0 and "your setting (sglang EAGLE3" in text and "flags: yours (sglang" in text
    chain = '{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3}'
    code, _, err = run(capsys, "tree", "--hardware", HW, "--acceptance-vector", str(vec), "--target", T8B,
                       "--engine-config", chain)  # fmt: skip
    assert code == 2 and one_line(err) and "chain" in err


def test_serve_simulates_the_setting_with_its_engine_and_tp(capsys):
    base = ["serve", "--hardware", HW, "--rate", "4", "--requests", "60", "--json"]
    code, out, err = run(capsys, *base, "--engine-config", VLLM_LINE, "--acceptance", "0.8")
    assert code == 0, err
    d = json.loads(out)
    assert {r["policy"] for r in d["per_rate"]} == {"off", "static:3"}
    assert d["settings"]["engine"] == "vllm" and "TP2" in d["settings"]["pricing"].replace(" ", "").upper()
    assert d["engine_config"]["policy"] == "static:3" and d["error_band_note"]
    code, out, err = run(capsys, *base, "--engine-config", SGLANG)
    assert code == 0, err
    d = json.loads(out)
    assert {r["policy"] for r in d["per_rate"]} == {"off", "sglang-tree:5/4/8"}
    code, _, err = run(capsys, *base, "--engine-config", SGLANG, "--policy", "static:3")
    assert code == 2 and one_line(err) and "--policy" in err
