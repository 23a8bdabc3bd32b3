"""The main job as a new user meets it: the page survives failures and interrupts, the CLI speaks plainly,
every extra installs what its code imports, and the README's commands are the ones CI runs."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

import specroof.report as report
from specroof.cli import main

ROOT = Path(__file__).resolve().parents[1]
TWO_GPUS = ["--hardware", "a100-sxm-80gb", "h100-sxm-80gb"]


def test_a_failing_section_shows_its_error_and_the_rest_stays(tmp_path, capsys, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("the plan exploded")

    monkeypatch.setattr(report, "speculation", boom)
    out = tmp_path / "rep"
    code = main(["report", "--out", str(out), *TWO_GPUS, "--skip-measure"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Speculative decoding: where it pays" in err and "the plan exploded" in err and "Traceback" not in err
    page = (out / "index.html").read_text()
    assert "This section failed: RuntimeError: the plan exploded" in page
    for title in ("The answer", "Worked example", "Rooflines of the data-center GPUs", "Draft trees"):
        assert title in page
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed"][0]["section"].startswith("Speculative decoding")


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if path.exists() and text in path.read_text():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the report ended early: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in {path}")


# the report with a last section that never ends: the finished ones must already be on disk
_SLOW = """
import signal, sys, time
# a shell's background job inherits SIGINT ignored, and Python then never raises KeyboardInterrupt:
# restore the default so Ctrl-C is what this test sends, wherever the suite runs
signal.signal(signal.SIGINT, signal.default_int_handler)
import specroof.report as r
real = r.trees_section
def slow(*a, **k):
    time.sleep(600)
r.trees_section = slow
from specroof.cli import main
sys.exit(main(["report", "--out", sys.argv[1], "--hardware", "a100-sxm-80gb", "--skip-measure"]))
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_a_report_stopped_half_way_keeps_its_finished_sections(tmp_path, sig):
    out = tmp_path / "rep"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for(out / "index.html", "Speculative decoding: where it pays", proc)
        time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    page = (out / "index.html").read_text()
    for title in ("The answer", "Worked example", "Rooflines", "Speculative decoding"):
        assert title in page
    assert "Draft trees: chain vs tree, and the tree size per GPU (not run yet)" in page
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "Traceback" not in err
        assert "Interrupted during" in page and "finished sections are in" in err


def test_report_for_a_model_with_a_32k_window(tmp_path, capsys):
    # the page's long-context column used to ask for 32768 + gamma tokens of a 32768-token model
    out = tmp_path / "q"
    args = ["report", "--out", str(out), *TWO_GPUS, "--skip-measure", "--target", "qwen2.5-7b", "--draft"]
    assert main([*args, "qwen2.5-0.5b"]) == 0
    contexts = {r["context"] for r in json.loads((out / "summary.json").read_text())["plan"]}
    assert max(contexts) <= 32768 - 64


def test_report_flags_mean_what_they_say(tmp_path, capsys):
    out = tmp_path / "a0"
    argv = ["report", "--out", str(out), *TWO_GPUS, "--skip-measure", "--alpha", "0.6", "--early-exit", "4"]
    assert main(argv) == 0
    page = (out / "index.html").read_text()
    # an early exit has no published acceptance: left out of the ranking (said) until one is given
    assert "draft llama-3.2-1b 0.6 (given per-token rate alpha 0.6)" in page and "early exit @4 (not compared" in page
    assert main([*argv, "--acceptance", "early-exit=0.5"]) == 0
    assert "early exit @4 0.5 (given per-token rate alpha 0.5" in (out / "index.html").read_text()
    for bad in ("1.5", "-0.1"):  # a rate lies in [0, 1]: 0 (E = 1) and 1 (E = gamma + 1) are rates
        assert main(["report", "--out", str(out), "--skip-measure", "--alpha", bad]) == 2
    assert main(["report", "--out", str(tmp_path / "bad"), "--hardware", "no-such-gpu", "--skip-measure"]) == 2
    assert not (tmp_path / "bad").exists()  # validated before anything was written
    assert "--alpha must lie in [0, 1]" in capsys.readouterr().err


def test_terminal_summary_answers_the_question_first(tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path / "r"), *TWO_GPUS, "--skip-measure"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("The answer")
    assert "gamma" in out and "tree_nodes" in out and "report written to" in out


def test_page_explains_its_terms(tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path / "r"), *TWO_GPUS, "--skip-measure"]) == 0
    page = re.sub(r"data:image/png;base64,[^\"]+", "", (tmp_path / "r" / "index.html").read_text())
    assert "seed" not in page.lower()
    for term in (
        "K_weights_only</code> counts",
        "A = decoding one token",
        "i.i.d.",
        "the chance each draft token is accepted",
    ):
        assert term in page
    assert "t_round_s" not in page  # one unit per page: milliseconds


def test_piping_into_head_is_not_an_error():
    cmd = f"{sys.executable} -m specroof.cli hardware list | head -1"
    res = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr


def _imports(folder: Path) -> set[str]:
    """Top-level modules imported by ``folder``'s files, except those guarded by ``except ImportError``."""
    names: set[str] = set()
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text())
        guarded = {
            id(n)
            for t in ast.walk(tree)
            if isinstance(t, ast.Try)
            and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in t.handlers
            )
            for stmt in t.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_every_extra_installs_what_its_code_imports():
    """measure/ needs only the base dependencies and the measure extra (transformers is the hf extra's)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    opt = meta["optional-dependencies"]

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    def dists(reqs: list[str]) -> set[str]:
        return {norm(re.split(r"[<>=\[; ]", r, maxsplit=1)[0]) for r in reqs}

    provided = dists(meta["dependencies"]) | dists(opt["measure"])
    local = {"roofline", "measure", "specroof", "hardware_profiles", "engine_profiles", "published"}
    stdlib = set(sys.stdlib_module_names)
    mapping = packages_distributions()
    for folder, allowed in (("roofline", dists(meta["dependencies"])), ("measure", provided), ("specroof", provided)):
        for mod in _imports(ROOT / folder) - local - stdlib:
            if mod == "transformers":  # the hf extra: imported only where a Hugging Face model is asked for
                continue
            names = {norm(d) for d in mapping.get(mod, [mod])}
            assert names & allowed, f"{folder}/ imports {mod} ({names}) but no extra it needs installs it"
    assert "jupyterlab>=4" in opt["notebooks"]  # a way to open the notebooks


def test_ci_runs_the_readme_commands_verbatim():
    first = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "readme_commands.py"), "1"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert (
        first
        == "python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 '.[measure]' && .venv/bin/specroof report"
    )
    ci = (ROOT / ".ci" / "run").read_text()
    assert "readme_commands.py 1" in ci and "check_report.py" in ci and "--measured" in ci
    assert 'rm -rf "$WORK"' in ci  # no GB-sized venv left in the temp folder


def test_ci_report_check_catches_a_missing_measured_section(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["report", "--out", str(out), *TWO_GPUS, "--skip-measure"]) == 0
    check = [sys.executable, str(ROOT / ".ci" / "check_report.py"), str(out)]
    assert subprocess.run(check, capture_output=True).returncode == 0
    res = subprocess.run([*check, "--measured"], capture_output=True, text=True)
    assert res.returncode != 0 and "measured section is missing" in res.stderr


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_measure_without_torch_says_so(tmp_path):
    # a Python where torch cannot be found: `specroof measure` refuses in one line
    code = "import sys, importlib.util as u; f = u.find_spec; u.find_spec = lambda n, *a: None if n == 'torch' else f(n, *a)\n"
    code += "from specroof.cli import main; sys.exit(main(['measure', 'device']))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 2 and "pip install 'specroof[measure]'" in res.stderr and "Traceback" not in res.stderr


def test_hostile_names_never_reach_the_page_raw(tmp_path, capsys):
    evil = "<svg onload=alert(1)>"
    src = (ROOT / "hardware_profiles" / "a100-sxm-80gb.toml").read_text()
    prof = tmp_path / f"{evil}.toml"  # its id (the file's stem) and its name both hostile
    prof.write_text(src.replace('name = "NVIDIA A100 80GB SXM"', f'name = "{evil}"', 1))
    out = tmp_path / "r"
    assert main(["report", "--out", str(out), "--hardware", str(prof), "a100-sxm-80gb", "--skip-measure"]) == 0
    page = (out / "index.html").read_text()
    assert evil not in page and "<svg" not in page
    assert "&lt;svg onload=alert(1)&gt;" in page  # shown, escaped


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed interrupt, on purpose
def test_a_ctrl_c_swallowed_by_a_finalizer_still_stops_the_report(tmp_path):
    """Python ignores a KeyboardInterrupt raised inside a weakref callback (matplotlib frees transforms that way):
    the report must still stop at the next section instead of running the rest."""
    import weakref

    from roofline.core import interrupts
    from specroof.report import write_report

    ran = []

    def swallowing(w):  # the interrupt lands in a finalizer, which prints it as "ignored" and goes on
        class Obj:
            pass

        o = Obj()
        weakref.finalize(o, lambda: interrupts._on_sigint(2, None))
        del o
        ran.append("first")
        from specroof.report import Section

        return Section("first", "<p>done</p>")

    def never(w):
        ran.append("second")
        raise AssertionError("ran after Ctrl-C")

    with pytest.raises(KeyboardInterrupt):
        write_report(tmp_path / "r", ["a100-sxm-80gb"], extra=[("first", swallowing), ("second", never)])
    interrupts.handled()
    assert "second" not in ran and "first" in ran
    assert "second (not run yet)" in (tmp_path / "r" / "index.html").read_text()


def test_a_remembered_ctrl_c_in_a_finalizer_prints_no_traceback_and_other_errors_still_do():
    """A Ctrl-C that lands in a finalizer is remembered and raised at the next boundary: Python's "Exception ignored"
    traceback for it is left out (the page says "interrupted"); a finalizer's other errors are still reported."""
    code = (
        "import signal, weakref, sys\n"
        # a background shell's job inherits SIGINT ignored, and install() then leaves Ctrl-C alone: restore the
        # default, as an interactive run has it, so the test sees the handler it is about
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from roofline import interrupts\n"
        "interrupts.install()\n"
        "class O: pass\n"
        "o = O(); weakref.finalize(o, lambda: interrupts._on_sigint(2, None)); del o\n"
        "print('pending', interrupts._pending)\n"
        "o = O(); weakref.finalize(o, lambda: 1 / 0); del o\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "pending True" in proc.stdout
    assert "KeyboardInterrupt" not in proc.stderr
    assert "ZeroDivisionError" in proc.stderr


def test_every_package_is_installed():
    # a package left out of pyproject works in the editable checkout and fails on a fresh machine's plain install
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    for top in ("roofline", "measure", "specroof"):
        for init in (ROOT / top).rglob("__init__.py"):
            name = ".".join(init.parent.relative_to(ROOT).parts)
            assert name in packages, f"{name} is not in pyproject's packages"
