"""benchmarks/gpu.sh runs on a lent GPU only: here, check that it parses, that every specroof
command in it is one the CLI accepts, that its CPU plumbing check runs end to end and writes
summary.json, and that the summary reads every step's output, so that it does not rot between
GPU sessions."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specroof.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu.sh"


def _commands() -> list[list[str]]:
    text = SCRIPT.read_text().replace("\\\n", " ")
    # shell values stand in as plain words: ${VAR:-default} -> default, "$name" -> the default
    # its assignment name=${VAR:-default} gives it, else x
    defaults = dict(re.findall(r"^(\w+)=\$\{\w+:-([^}]*)\}$", text, re.M))
    text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)
    text = re.sub(r'"?\$(\w+)/?[\w./-]*"?', lambda m: defaults.get(m.group(1), "x"), text)
    cmds = []
    for line in text.splitlines():
        line = line.strip()
        line = re.sub(r'^step \S+ ("[^"]*"|\S+) ', "", line)  # step NAME LIMIT_S COMMAND...
        if line.startswith("specroof "):
            words = shlex.split(line.split(">")[0].split("|")[0])
            cmds.append(words[1:])
    return cmds


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_every_specroof_command_in_the_gpu_script_parses():
    cmds = _commands()
    assert {c[1] for c in cmds if c[0] == "measure"} == {"device", "bench", "sweep", "fit", "spec", "serve"}
    # the main sweep, the eager one and the compiled one, spec and serve all say how their passes run
    sweeps = [c for c in cmds if c[:2] == ["measure", "sweep"] and "--tp" not in c]
    assert [c[c.index("--graphs") + 1] for c in sweeps] == ["auto", "off", "auto"] and "--compile" in sweeps[2]
    parser = build_parser()
    for argv in cmds:
        args = parser.parse_args(argv)  # exits (SystemExit) on an unknown flag or a bad value
        assert callable(args.func)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash, timeout")
def test_the_cpu_plumbing_check_runs_and_writes_the_summary(tmp_path):
    """The script's CPU check as its header gives it, on a two-layer model, the slow steps (spec, serve, compile,
    report) left out."""
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_hidden_layers": 2,
                "intermediate_size": 128,
                "vocab_size": 97,
                "max_position_embeddings": 512,
            }
        )
    )
    env = {
        **os.environ,
        "DEVICE": "cpu",
        "DTYPE": "fp32",
        "MODEL": str(cfg),
        "BATCH": "1,2",
        "TOKENS": "1,2,4,8,16,32,64",
        "CONTEXT": "64",
        "SWEEP_BUDGET": "20",
        "STEPS": "device bench sweep fit eager summary",
        "PYTHON": sys.executable,
    }
    out = tmp_path / "gpu-out"
    run = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert {p.name for p in out.iterdir()} == {"machine.txt", "summary.json", "all.log", "gpu-run.tgz"}
    s = json.loads((out / "summary.json").read_text())
    assert [st["step"] for st in s["steps"]] == ["device", "bench", "sweep", "fit", "eager"]
    assert all(st["exit"] == 0 for st in s["steps"])
    assert s["copy_bandwidth_GB_per_s"] > 0 and s["fit_mape"] is not None
    ws = s["weight_stream"]["graphs"]
    assert ws is not None and {p["new_tokens"] for p in ws["points"]} == {1, 2, 4, 8, 16}
    assert 0 < ws["min_fraction_of_copy"]
    assert s["repeat_spread"]["median_over_min_max"] >= 0
    assert {c["batch"] for c in s["crossover"]} == {1, 2}
    # the steps left out are named, not invented
    assert {"spec", "serve", "compile", "report"} <= set(s["missing"])
    assert s["done_when"]["spec_rows_within_10pct"] is None and s["done_when"]["fit_mape_le_5pct"] is not None
