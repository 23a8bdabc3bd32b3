"""The CLI: tables, --json fields, exit status 2 with a one-line error and no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specroof.cli import main


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own refusals (bad types, out-of-range values)
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_hardware_list_and_show(capsys):
    code, out, _ = run(capsys, "hardware", "list")
    assert code == 0 and "h100-sxm-80gb" in out and "tpu-v6e" in out
    code, out, _ = run(capsys, "hardware", "show", "a100-sxm-80gb", "--json")
    info = json.loads(out)
    assert info["ridge_flop_per_byte"]["fp16"] == pytest.approx(153.0, abs=0.05)
    assert info["sources"]["memory"]


def test_roofline_json_has_the_seed_numbers(capsys):
    code, out, _ = run(
        capsys, "roofline", "--hardware", "a100-sxm-80gb", "--params", "13e9", "--dtype", "fp16", "--json"
    )
    d = json.loads(out)
    assert code == 0
    assert d["weight_bytes"] == 26e9
    assert d["t_memory_s"] == pytest.approx(12.75e-3, abs=5e-6)
    assert d["t_compute_s"] == pytest.approx(0.0833e-3, abs=5e-8)
    assert d["t_step_s"] == pytest.approx(12.75e-3, abs=5e-6)
    assert d["tokens_per_s"] == pytest.approx(78, abs=0.5)
    assert d["arithmetic_intensity"] == pytest.approx(1.0)
    assert d["ridge_flop_per_byte"] == pytest.approx(153, abs=0.5)
    assert d["crossover_tokens"] == 153


def test_roofline_table_and_plot(capsys, tmp_path):
    png = tmp_path / "r.png"
    code, out, _ = run(
        capsys,
        "roofline",
        "--hardware",
        "h100-sxm",
        "--model",
        "llama-3.1-8b",
        "--dtype",
        "bf16",
        "--batch",
        "8",
        "--context",
        "4096",
        "--plot",
        str(png),
    )
    assert code == 0 and "crossover K" in out and png.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["roofline", "--hardware", "h100", "--params", "13e9"], "ambiguous"),
        (["roofline", "--hardware", "a100-sxm-80gb", "--params", "13e9", "--batch", "-3"], "must lie in [1, 10000000]"),
        (["roofline", "--hardware", "a100-sxm-80gb", "--params", "13e9", "--dtype", "fp9"], "unknown dtype 'fp9'"),
        (["roofline", "--hardware", "a100-sxm-80gb", "--model", "llama-9"], "unknown model preset"),
        (["roofline", "--hardware", "a100-sxm-80gb", "--model", "llama-2-7b", "--context", "99999"], "exceeds"),
        (["hardware", "show", "nope-gpu"], "unknown hardware"),
    ],
)
def test_bad_input_exits_2_with_a_message(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_argparse_errors_exit_2_in_a_subprocess():
    p = subprocess.run(
        [sys.executable, "-m", "specroof.cli", "roofline", "--hardware", "x", "--batch", "many"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr and "expected a whole number, got 'many'" in p.stderr


def test_speedup_json_auto_and_fixed(capsys):
    code, out, _ = run(capsys, "speedup", "--alpha", "0.8", "--gamma", "auto", "--c", "0.05", "--json")
    d = json.loads(out)
    assert code == 0 and d["gamma"] == 8 and d["speedup"] == pytest.approx(3.092, abs=1e-3)
    code, out, _ = run(capsys, "speedup", "--alpha", "1", "--gamma", "4", "--c", "0", "--json")
    d = json.loads(out)
    assert d["expected_tokens"] == 5 and d["speedup"] == 5


def test_plan_with_alpha_and_with_a_curve_file(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "plan",
        "--hardware",
        "h100-sxm-80gb",
        "--target",
        "llama-3.1-8b",
        "--draft",
        "llama-3.2-1b",
        "--early-exit",
        "8",
        "--acceptance",
        "draft=0.8",
        "--acceptance",
        "early exit @8=0.6",
        "--batch",
        "1,64",
        "--context",
        "1024",
        "--json",
    )
    d = json.loads(out)
    assert code == 0 and len(d["recommendations"]) == 2
    assert d["recommendations"][0]["gamma"] >= 1 and "reason" in d["recommendations"][0]
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps({"curve": [0.9, 0.8, 0.7, 0.6]}))
    code, out, _ = run(
        capsys,
        "plan",
        "--hardware",
        "a100-sxm-80gb",
        "--target",
        "llama-2-7b",
        "--draft",
        "llama-68m",
        "--acceptance-curve",
        str(curve),
    )
    assert code == 0 and "gamma" in out


def test_several_drafters_need_their_own_acceptance(capsys):
    base = ["plan", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--heads", "4", "--prompt-lookup"]
    code, _, err = run(capsys, *base, "--alpha", "0.75")
    assert code == 2 and "would favour the cheapest" in err and "--same-alpha" in err
    code, out, _ = run(capsys, *base, "--alpha", "0.75", "--same-alpha", "--json")
    assert code == 0
    code, out, _ = run(capsys, *base, "--acceptance", "heads=0.6", "--acceptance", "prompt-lookup=0.2", "--json")
    best = json.loads(out)["recommendations"][0]
    assert code == 0 and best["strategy"] == "4 heads"  # at its own low acceptance, prompt lookup no longer wins
    code, _, err = run(capsys, *base, "--acceptance", "heads=0.6")
    assert code == 2 and "no --acceptance for drafter(s) prompt-lookup" in err
    # `--heads 4` is `--drafter medusa:4` in the drafter grammar, so `medusa=` names it; a drafter not asked for does not
    code, _, err = run(capsys, *base, "--acceptance", "eagle3=0.6", "--acceptance", "prompt-lookup=0.2")
    assert code == 2 and "KEY must be one of the drafters asked for (medusa, prompt-lookup)" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["speedup", "--alpha", "1.5", "--c", "0.1"], "alpha must lie in [0, 1]"),
        (["speedup", "--alpha", "0.5", "--c", "-1"], "--c must lie in [0, 1]"),
        (["speedup", "--alpha", "0.5", "--c", "0.1", "--gamma", "-2"], "gamma must be >= 0"),
        (["speedup", "--alpha", "0.5", "--c", "0.1", "--gamma", "many"], "--gamma must be a whole number"),
        (["plan", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--alpha", "0.8"], "choose a drafter"),
        (
            [
                "plan",
                "--hardware",
                "h100-sxm-80gb",
                "--target",
                "llama-3.1-8b",
                "--draft",
                "llama-3.1-70b",
                "--alpha",
                "0.8",
            ],
            "not smaller than the target",
        ),
        (
            [
                "plan",
                "--hardware",
                "h100-sxm-80gb",
                "--target",
                "llama-3.1-8b",
                "--draft",
                "llama-3.2-1b",
                "--acceptance-curve",
                "/nope",
            ],
            "does not exist",
        ),
    ],
)
def test_speculation_cli_errors_exit_2(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_tree_command_json_and_hardware(capsys, tmp_path):
    vec = tmp_path / "v.json"
    vec.write_text(json.dumps({"sequoia": [0, 0.6, 0.2, 0.1, 0.1]}))
    code, out, _ = run(capsys, "tree", "--acceptance-vector", str(vec), "--budget", "8", "--max-depth", "4", "--json")
    d = json.loads(out)
    assert code == 0 and d["n_nodes"] == 8 and len(d["parents"]) == 8 and d["depth"] <= 4
    from roofline.speculation.trees import SiblingRankAcceptance, Tree

    assert Tree(d["parents"]).expected_tokens(SiblingRankAcceptance([0.6, 0.2, 0.1])) == pytest.approx(
        d["expected_tokens"]
    )
    png = tmp_path / "t.png"
    code, out, _ = run(
        capsys,
        "tree",
        "--acceptance-vector",
        str(vec),
        "--budget",
        "16",
        "--hardware",
        "a100-sxm-80gb",
        "--target",
        "llama-2-13b",
        "--draft",
        "llama-68m",
        "--plot",
        str(png),
    )
    assert code == 0 and "on a100-sxm-80gb: best tree" in out and png.stat().st_size > 5000


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ("[0.8, 0.5]", [], "sum to at most 1"),
        ("{", [], "not valid JSON"),
        ("[0.5]", ["--budget", "-1"], "must lie in [1, 100000]"),
        ("[0.5]", ["--max-depth", "0"], "must lie in [1, 10000]"),
        ("[0.5]", ["--hardware", "a100-sxm-80gb"], "needs --target and --draft"),
    ],
)
def test_tree_command_errors(capsys, tmp_path, content, extra, message):
    vec = tmp_path / "v.json"
    vec.write_text(content)
    argv = ["tree", "--acceptance-vector", str(vec), "--budget", "4", *extra]
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_roofline_sweeps_lists_of_batch_tokens_and_context_in_one_call():
    r = subprocess.run(
        [sys.executable, "-m", "specroof.cli", "roofline", "--hardware", "a100-sxm-80gb", "--model", "llama-2-7b",
         "--batch", "1,8", "--tokens", "1-4", "--context", "0,1024", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert len(rows) == 2 * 4 * 2
    one = subprocess.run(
        [sys.executable, "-m", "specroof.cli", "roofline", "--hardware", "a100-sxm-80gb", "--model", "llama-2-7b",
         "--batch", "8", "--tokens", "3", "--context", "1024", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    same = [x for x in rows if (x["batch"], x["new_tokens"], x["context"]) == (8, 3, 1024)][0]
    assert same["t_step_s"] == pytest.approx(json.loads(one.stdout)["t_step_s"])
