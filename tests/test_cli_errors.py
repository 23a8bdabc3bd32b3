"""Every bad input gets exit status 2 and one line naming the flag or file and what is wrong; never a traceback,
never a silent wrong answer."""

from __future__ import annotations

import json
import os

import pytest

from specroof.cli import main

HW = ["--hardware", "a100-sxm-80gb"]
PLAN = ["plan", *HW, "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b"]


def _config(tmp_path, **fields):
    cfg = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
    }
    cfg.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _run(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals exit from inside parse_args
        code = exc.code
    cap = capsys.readouterr()
    return code, cap.err


def _assert_one_line(code, err, message):
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert message in lines[0], lines[0]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"hidden_size": "big"}, "'hidden_size' must be a positive whole number (got 'big')"),
        ({"hidden_size": None}, "missing field 'hidden_size'"),
        ({"num_attention_heads": 0}, "'num_attention_heads' must be a positive whole number (got 0)"),
        ({"hidden_size": 256.7}, "'hidden_size' must be a whole number (got 256.7)"),
        ({"vocab_size": float("nan")}, "'vocab_size' must be a positive whole number"),
    ],
)
def test_bad_config_json(tmp_path, capsys, fields, message):
    path = _config(tmp_path, **fields)
    for argv in (
        ["roofline", *HW, "--model", path],
        [*PLAN[:3], "--target", path, "--draft", "llama-3.2-1b", "--alpha", "0.7"],
    ):
        _assert_one_line(*_run(capsys, argv), message)


def test_config_json_that_is_not_an_object_or_not_json(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text("[1, 2]")
    _assert_one_line(*_run(capsys, ["roofline", *HW, "--model", str(p)]), "must hold a JSON object")
    p.write_text('{"hidden_size": 4')
    _assert_one_line(*_run(capsys, ["roofline", *HW, "--model", str(p)]), "is not valid JSON")
    p.write_bytes(b"\xff\xfe\x00garbage")
    _assert_one_line(*_run(capsys, ["roofline", *HW, "--model", str(p)]), "is not a text file")


def test_your_own_model_works_where_a_preset_does(tmp_path, capsys):
    path = _config(tmp_path, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=32)
    path = _config(
        tmp_path,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        num_hidden_layers=32,
        intermediate_size=14336,
        vocab_size=128256,
    )
    assert main([*PLAN[:3], "--target", str(tmp_path), "--draft", "llama-68m", "--alpha", "0.6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recommendations"]
    assert main(["roofline", *HW, "--model", path, "--json"]) == 0


def test_non_utf8_files(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_bytes(b"\xff\xfe\xfa")
    toml = tmp_path / "x.toml"
    toml.write_bytes(b"\xff\xfe\xfa")
    _assert_one_line(*_run(capsys, [*PLAN, "--acceptance-curve", str(bad)]), "is not a text file")
    _assert_one_line(*_run(capsys, ["tree", "--acceptance-vector", str(bad), "--budget", "4"]), "is not a text file")
    _assert_one_line(*_run(capsys, ["roofline", "--hardware", str(toml), "--params", "1e9"]), "not a text file")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("bandwidth_GB_per_s", "inf", "must be a finite number"),
        ("bandwidth_GB_per_s", "nan", "must be a finite number"),
        ("bandwidth_GB_per_s", "-5", "must be positive"),
    ],
)
def test_non_finite_profile_values(tmp_path, capsys, field, value, message):
    from pathlib import Path

    import roofline

    src = (Path(roofline.__file__).parents[1] / "hardware_profiles" / "a100-sxm-80gb.toml").read_text()
    p = tmp_path / "p.toml"
    p.write_text(src.replace("bandwidth_GB_per_s = 2039", f"{field} = {value}", 1))
    _assert_one_line(*_run(capsys, ["roofline", "--hardware", str(p), "--params", "1e9"]), message)


@pytest.mark.parametrize("block", ["pass_overhead_us = nan", "layer_overhead_us = -500"])
def test_non_finite_measured_values(tmp_path, capsys, block):
    from pathlib import Path

    import roofline

    src = (Path(roofline.__file__).parents[1] / "hardware_profiles" / "a100-sxm-80gb.toml").read_text()
    p = tmp_path / "p.toml"
    p.write_text(src + f"\n[measured]\nbandwidth_GB_per_s = 1500\n{block}\n")
    code, err = _run(capsys, ["roofline", "--hardware", str(p), "--params", "1e9"])
    assert code == 2 and ("finite" in err or "negative" in err) and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["roofline", *HW, "--params", "inf"], "expected a finite number"),
        (["roofline", *HW, "--params", "-3"], "--params must be a positive number"),
        (["roofline", *HW, "--params", "1e9", "--batch", "100000000000000000000"], "must lie in [1, 10000000]"),
        (["roofline", *HW, "--params", "1e9", "--plot", "/no/such/folder/x.png"], "does not exist"),
        (["roofline", *HW, "--params", "1e9", "--plot", "chart.toml"], "written as .png, .svg or .pdf"),
        ([*PLAN, "--alpha", "0.7", "--max-gamma", "-1"], "must lie in [0, 256]"),
        (["speedup", "--alpha", "0.8", "--c", "0.05", "--max-gamma", "100000000"], "must lie in [1, 4096]"),
        ([*PLAN, "--alpha", "0.7", "--batch", "1-1000000"], "has over 100000 values"),
        ([*PLAN, "--alpha", "0.7", "--batch", "1-3000"], "over 2,000: narrow --batch/--context"),
        (
            [*PLAN, "--alpha", "0.7", "--batch", "1-45", "--context", "1-44", "--max-gamma", "256"]
            + ["--early-exit", "8", "--heads", "4", "--prompt-lookup", "--same-alpha"],
            "over 2,000,000",
        ),
        ([*PLAN, "--alpha", "0.7", "--batch", "5-1"], "empty range"),
        ([*PLAN, "--alpha", "0.7", "--batch", "1e20"], "expected a whole number"),
        ([*PLAN, "--alpha", "0.7", "--top", "0"], "must lie in [1, 1000000]"),
        ([*PLAN, "--alpha", "0.7", "--tp", "3"], "--tp 3 does not divide"),
        ([*PLAN, "--alpha", "0.7", "--early-exit", "0"], "must lie in [1, 10000]"),
        (["plan", *HW, "--target", "llama-3.1-8b", "--window", "0", "--alpha", "0.5"], "must lie in [1, 10000000]"),
        (["speedup", "--alpha", "nan", "--c", "0.05"], "expected a finite number"),
    ],
)
def test_bad_flags(capsys, argv, message):
    _assert_one_line(*_run(capsys, argv), message)


def test_contradictions_are_errors(tmp_path, capsys):
    curve = tmp_path / "c.json"
    curve.write_text("[0.8, 0.7]")
    _assert_one_line(*_run(capsys, [*PLAN, "--alpha", "0.7", "--acceptance-curve", str(curve)]), "not both")
    vec = tmp_path / "v.json"
    vec.write_text("[0.6, 0.2]")
    _assert_one_line(
        *_run(capsys, ["tree", "--acceptance-vector", str(vec), "--budget", "4", "--target", "llama-3.1-8b"]),
        "give --hardware too",
    )


def test_tree_size_limit_and_zero_ranks(tmp_path, capsys):
    vec = tmp_path / "v.json"
    vec.write_text(json.dumps({"sequoia": [0, 0.62, 0.0, 0.14, 0.0, 0.03, 0.0]}))
    _assert_one_line(
        *_run(capsys, ["tree", "--acceptance-vector", str(vec), "--budget", "10000", "--max-depth", "100"]),
        "over the limit",
    )
    assert main(["tree", "--acceptance-vector", str(vec), "--budget", "16", "--max-depth", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_nodes"] == 16 and out["expected_tokens"] > 1.0


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_plot_folder(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    _assert_one_line(*_run(capsys, ["roofline", *HW, "--params", "1e9", "--plot", str(ro / "x.png")]), "cannot write")
