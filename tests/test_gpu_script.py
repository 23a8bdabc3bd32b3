"""benchmarks/gpu.sh runs on a lent GPU only: here, check that it parses and that every
specroof command in it is one the CLI accepts, so that it does not rot between GPU sessions."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from specroof.cli import build_parser

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.sh"


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
    assert {c[1] for c in cmds if c[0] == "measure"} == {"device", "bench", "sweep", "fit", "spec"}
    parser = build_parser()
    for argv in cmds:
        args = parser.parse_args(argv)  # exits (SystemExit) on an unknown flag or a bad value
        assert callable(args.func)
