"""benchmarks/gpu.sh runs on a lent GPU only: here, check that it parses, that every specroof
command in it is one the CLI accepts, that its CPU plumbing check and its --smoke run end to end and
write summary.json, that its preflight stops a run missing a module in one line before any step, and
that a run stopped by a signal keeps every finished step and a summary, so that it does not rot
between GPU sessions (DEVICE=cpu throughout)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
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
    text = re.sub(r'"\$\(fit_budget "?([^)"]*)"?\)"', r"\1", text)  # a budget cut to its step's limit: the stated one
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
    # the smoke's point, the main sweep, the eager one and the compiled one, spec and serve all say how their passes
    # run; every budget is a number the CLI accepts
    sweeps = [c for c in cmds if c[:2] == ["measure", "sweep"] and "--tp" not in c]
    assert [c[c.index("--graphs") + 1] for c in sweeps] == ["auto", "auto", "off", "auto"] and "--compile" in sweeps[3]
    assert all(float(c[c.index("--budget") + 1]) > 0 for c in cmds if "--budget" in c)
    parser = build_parser()
    for argv in cmds:
        args = parser.parse_args(argv)  # exits (SystemExit) on an unknown flag or a bad value
        assert callable(args.func)


NEEDS_SHELL = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("timeout") is None or shutil.which("tar") is None,
    reason="needs bash, timeout and tar",
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The script's CPU check as its header gives it, on a two-layer model (config.json)."""
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
        "SWEEP_BUDGET": "60",
        # the limits are sized for a GPU; this CPU may be shared (the budgets inside them stay as stated)
        "LIMIT_SCALE": "6",
        "DEADLINE_S": "3000",
        "PYTHON": sys.executable,
    }
    env.pop("OUT", None)
    return env | extra


def _archive(out: Path) -> set[str]:
    with tarfile.open(out / "gpu-run.tgz") as tar:
        return {m.name.removeprefix("./") for m in tar.getmembers()}


@pytest.mark.slow
@NEEDS_SHELL
def test_the_cpu_plumbing_check_runs_and_writes_the_summary(tmp_path):
    """The plumbing, the slow steps (spec, serve, compile, report) left out."""
    env = _env(tmp_path, STEPS="device bench sweep fit kernels eager")
    out = tmp_path / "gpu-out"
    run = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # at most 8 files come back from a device call: these four, every step inside the archive
    assert {p.name for p in out.iterdir()} == {"machine.txt", "summary.json", "all.log", "gpu-run.tgz"}
    assert {"device.out", "bench.out", "sweep.out", "fit.out", "kernels.out", "eager.out", "steps.tsv"} <= _archive(out)
    s = json.loads((out / "summary.json").read_text())
    assert [st["step"] for st in s["steps"]] == ["device", "bench", "sweep", "fit", "kernels", "eager"]
    assert all(st["exit"] == 0 for st in s["steps"])
    assert s["copy_bandwidth_GB_per_s"] > 0 and s["fit_mape"] is not None
    ws = s["weight_stream"]["graphs"]
    assert ws is not None and {p["new_tokens"] for p in ws["points"]} == {1, 2, 4, 8, 16}
    # each row names the slots a static pass reads: the bucket, at least context + n
    assert all(p["kv_slots"] >= p["context"] + p["new_tokens"] for p in ws["points"])
    assert 0 < ws["min_fraction_of_copy"]
    assert s["repeat_spread"]["median_over_min_max"] >= 0
    assert {c["batch"] for c in s["crossover"]} == {1, 2}
    # kernels per layer beside the pass time, and the same static pass uncaptured and replayed
    k = s["kernels"]
    assert [r["new_tokens"] for r in k["table"]] == [1, 4, 16, 6] and k["table"][-1]["tree"]
    assert all(r["static_per_layer"] > 0 for r in k["table"]) and k["table"][0]["t_min_ms"] > 0
    assert len(k["launch_overhead_2_layers"]) == 3
    # the steps left out are named, not invented
    assert {"spec", "serve", "compile", "report"} <= set(s["missing"])
    assert s["done_when"]["spec_rows_within_10pct"] is None and s["done_when"]["fit_mape_le_5pct"] is not None


@pytest.mark.slow
@NEEDS_SHELL
def test_the_smoke_run_checks_the_graph_path_and_one_point(tmp_path):
    env = _env(tmp_path)
    out = tmp_path / "smoke"
    t0 = time.perf_counter()
    run = subprocess.run(["bash", str(SCRIPT), "--smoke", str(out)], cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    print(f"gpu.sh --smoke on the CPU: {seconds:.1f} s")  # reported, never asserted (-s shows it)
    s = json.loads((out / "summary.json").read_text())
    assert [st["step"] for st in s["steps"]] == ["device", "smoke", "point"]
    assert s["smoke"]["ok"] and s["done_when"]["smoke_ok"] is True
    # greedy equality for every decoding, early exit included
    assert {"early exit: tokens equal eager", "early exit: mean accepted equal eager"} <= set(s["smoke"]["checks"])
    assert len(s["point"]) == 1 and s["point"][0]["status"] == "ok" and s["point"][0]["kv_slots"] >= 64 + 4
    assert {"smoke.out", "point.out", "device.out"} <= _archive(out)


@NEEDS_SHELL
def test_a_missing_module_stops_the_run_in_one_line_before_any_step(tmp_path):
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "tomli_w.py").write_text("raise ImportError(\"No module named 'tomli_w' (hidden by the test)\")\n")
    env = _env(tmp_path, PYTHONPATH=str(hidden))
    out = tmp_path / "out"
    run = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 3
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert len(lines) == 1 and "tomli_w" in lines[0] and "WHEELS=" in lines[0], lines
    # nothing ran: no machine description, no step, no summary
    assert {p.name for p in out.iterdir()} == {"preflight.txt"}


@NEEDS_SHELL
def test_carried_wheels_go_on_the_path(tmp_path):
    """WHEELS=dir: each wheel in it importable (a pure-Python wheel is a zip), so the preflight passes with a
    module the environment lacks; a folder that does not exist is one line."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    import zipfile

    with zipfile.ZipFile(wheels / "specroof_probe_mod-1.0-py3-none-any.whl", "w") as z:
        z.writestr("specroof_probe_mod.py", "VALUE = 42\n")
    env = _env(tmp_path, WHEELS=str(wheels), STEPS="none")
    code = 'import os; print(os.environ["PYTHONPATH"])'
    run = subprocess.run(
        ["bash", "-c", f"source <(sed -n \"/^extra=/,/^export PYTHONPATH/p\" {SCRIPT}); {sys.executable} -c '{code}'"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    path = run.stdout.strip().split(":")
    assert str(wheels) in path and str(wheels / "specroof_probe_mod-1.0-py3-none-any.whl") in path
    probe = subprocess.run(
        [sys.executable, "-c", "import specroof_probe_mod as m; print(m.VALUE)"],
        env={**env, "PYTHONPATH": ":".join(path)},
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "42"
    bad = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "o")],
        cwd=ROOT,
        env=_env(tmp_path, WHEELS=str(tmp_path / "nowhere")),
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 3 and len(bad.stdout.strip().splitlines()) == 1 and "WHEELS=" in bad.stdout


@pytest.mark.slow
@NEEDS_SHELL
def test_a_run_stopped_by_a_signal_keeps_every_finished_step_and_a_summary(tmp_path):
    # a sweep long enough to be stopped in: every point visited until its budget
    env = _env(tmp_path, STEPS="device bench sweep fit", SWEEP_BUDGET="120")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("== sweep (limit"):
            time.sleep(0.5)  # inside the sweep: its imports alone take longer
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=120)
    text = "".join(seen) + rest
    assert proc.returncode == 130, text[-3000:]
    assert {"machine.txt", "all.log", "gpu-run.tgz", "summary.json"} <= {p.name for p in out.iterdir()}
    assert {"device.out", "device.log", "bench.out", "apriori-profile.toml", "steps.tsv"} <= _archive(out)
    s = json.loads((out / "summary.json").read_text())
    steps = [(st["step"], st["exit"]) for st in s["steps"]]
    # the steps that finished kept exit 0, the one running when the signal came is recorded as stopped (143) and
    # nothing after it ran (on a quiet machine the sweep may finish first: then fit is the one stopped)
    assert steps[:2] == [("device", 0), ("bench", 0)] and steps[-1][1] == 143, steps
    assert all(code == 0 for _, code in steps[:-1]) and [name for name, _ in steps][2] == "sweep", steps
    assert s["copy_bandwidth_GB_per_s"] > 0  # the finished steps' figures are in the summary
    assert "fit" in s["missing"] or steps[-1] == ("fit", 143)
