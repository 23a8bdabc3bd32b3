"""roofline/ never imports torch: the analytic package and every analytic subcommand run without it."""

from __future__ import annotations

import subprocess
import sys

ANALYTIC = [
    ["hardware", "list"],
    ["hardware", "show", "a100-sxm-80gb"],
    ["roofline", "--hardware", "a100-sxm-80gb", "--params", "13e9"],
    ["speedup", "--alpha", "0.8", "--c", "0.05"],
    ["plan", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.7"],
    ["tree", "--acceptance-vector", "{vec}", "--budget", "8"],
    ["report", "--skip-measure", "--hardware", "a100-sxm-80gb", "--out", "{out}"],
]


def test_roofline_and_every_analytic_subcommand_never_import_torch(tmp_path):
    vec = tmp_path / "v.json"
    vec.write_text("[0.6, 0.2]")
    code = [
        "import sys, roofline, specroof.cli as cli",
        "from roofline import plot, planner, speculative, trees, gamma_policies; from specroof import report",
        f"for argv in {ANALYTIC!r}:",
        f"    argv = [a.replace('{{vec}}', {str(vec)!r}).replace('{{out}}', {str(tmp_path / 'r')!r}) for a in argv]",
        "    assert cli.main(argv) == 0, argv",
        "    assert 'torch' not in sys.modules, ('torch imported by', argv)",
        "print('ok')",
    ]
    res = subprocess.run([sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]
