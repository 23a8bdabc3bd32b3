"""The product's own question in its deployment vocabulary: drafter grammar, acceptance kinds, the engines' flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specroof.cli import main

DATA = Path(__file__).parent / "data"
PLAN = ["plan", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--engine", "serving", "--batch", "1,8,32"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("drafter", "acceptance", "engine", "needle"),
    [
        ("eagle3", "eagle3=mean:3.2", "sglang", "--speculative-algorithm EAGLE3"),
        ("mtp", "mtp=mean:2.4", "sglang", "--speculative-algorithm NEXTN"),
        ("model:llama-3.2-1b", "model=0.75", "sglang", "--speculative-algorithm STANDALONE"),
        ("model:llama-3.2-1b", f"model={DATA / 'vllm_metrics.prom'}", "vllm", '"method": "draft_model"'),
        ("eagle3", "eagle3=vllm-rate:0.7@5", "vllm", '"method": "eagle3"'),
        ("eagle3", "eagle3=mean:3.2", "trtllm", "decoding_type: Eagle3"),
    ],
)
def test_plan_answers_per_batch_in_the_engines_flags(capsys, drafter, acceptance, engine, needle):
    # MTP drafts only for a target that ships a module (Llama ships none): Qwen3.5-9B ships one
    argv = [("qwen3.5-9b" if drafter == "mtp" and a == "llama-3.1-8b" else a) for a in PLAN]
    code, out, err = run(capsys, *argv, "--drafter", drafter, "--acceptance", acceptance, "--emit", engine, "--json")
    assert code == 0, err
    payload = json.loads(out)
    deploy = payload["deploy"]
    assert sorted(r["batch"] for r in deploy) == [1, 8, 32]
    assert all(needle in r["flags"] and r["speedup"] > 0 for r in deploy)
    assert payload["acceptance"] and "given" in payload["acceptance"][0]  # says what it was given and read as


def test_the_engine_tree_shrinks_as_the_batch_grows(capsys):
    code, out, _ = run(capsys, *PLAN, "--drafter", "eagle3", "--acceptance", "eagle3=mean:3.2", "--emit", "sglang",
                       "--json")  # fmt: skip
    assert code == 0
    nodes = {r["batch"]: r["num_draft_tokens"] for r in json.loads(out)["deploy"]}
    assert nodes[1] >= nodes[8] >= nodes[32] and nodes[1] > nodes[32]  # verify tokens cost more as the batch fills


def test_tree_with_a_drafter_shows_its_recommended_shape_and_flags(tmp_path, capsys):
    vec = tmp_path / "v.json"
    vec.write_text("[0.6, 0.2, 0.1, 0.05]")
    base = ["tree", "--drafter", "eagle2", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b",
            "--acceptance-vector", str(vec), "--budget", "32"]  # fmt: skip
    code, out, err = run(capsys, *base)
    assert code == 0, err
    assert "best tree (the fastest, not the largest)" in out and "nodes per level" in out.split("best tree")[1]
    code, out, err = run(capsys, *base, "--emit", "sglang", "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["hardware_choice"]["paths"] and "--speculative-num-steps" in payload["deploy"]["flags"]
    code, _, err = run(capsys, *base[:2], "model:llama-3.2-1b", *base[3:], "--emit", "sglang")
    assert code == 2 and "EAGLE-family" in err


def test_a_sequoia_vector_with_its_leading_zero_is_read_as_such_never_shifted(tmp_path, capsys):
    shifted = tmp_path / "s.json"
    shifted.write_text("[0, 0.62, 0.14, 0.06, 0.03, 0.02, 0.13]")  # Sequoia's saved layout: sums to 1
    code, out, _ = run(capsys, "tree", "--acceptance-vector", str(shifted), "--budget", "8", "--json")
    assert code == 0 and json.loads(out)["acceptance"]["layout"] == "sequoia"
    bad = tmp_path / "b.json"
    bad.write_text("[0, 0.6, 0.2]")  # starts at 0 but is not Sequoia's layout
    code, _, err = run(capsys, "tree", "--acceptance-vector", str(bad), "--budget", "8")
    assert code == 2 and "starts with 0" in err and "\n" not in err.strip()


def test_an_impossible_mean_accepted_length_is_one_line_naming_the_bound(capsys):
    code, _, err = run(capsys, "speedup", "--drafter", "eagle2", "--hardware", "h100-sxm-80gb", "--target",
                       "llama-3.1-8b", "--mean-accepted", "11.3")  # fmt: skip
    assert code == 2 and "depth + 1" in err and len(err.strip().splitlines()) == 1


def test_old_drafter_flags_are_aliases_of_the_grammar(capsys):
    base = ["plan", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--json"]
    code, old, _ = run(capsys, *base, "--draft", "llama-3.2-1b", "--acceptance", "draft=0.7")
    assert code == 0
    code, new, _ = run(capsys, *base, "--drafter", "model:llama-3.2-1b", "--acceptance", "model=0.7")
    assert code == 0
    assert json.loads(old)["recommendations"] == json.loads(new)["recommendations"]


def test_the_deployment_explorer_reads_every_acceptance_kind():
    from roofline.explore import EXPLORER_KINDS, deployment_figure

    titles = {k: deployment_figure(kind=k, value=0.7, measured_at=5).axes[0].get_title() for k in EXPLORER_KINDS}
    assert titles["alpha"].startswith("given per-token rate alpha 0.7")
    assert "vLLM draft acceptance rate 0.7 at 5" in titles["vllm-rate"] and "0.8834" in titles["vllm-rate"]
    assert "mean accepted length 4.5" in titles["mean"]
