"""The README is a user guide's front page: short, in order, its commands the ones CI runs, its links alive.

Its examples run, and their printed outputs are compared, in tests/test_docs.py with every other doc example.
The measurement diaries it used to hold are in BENCHMARKS.md (checked at the end of this module).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)


def test_readme_is_at_most_300_lines():
    assert len(README.splitlines()) <= 300


def test_the_two_commands_are_first_and_verbatim():
    lang, first = _blocks(README)[0]
    assert lang == "bash"
    lines = first.splitlines()
    one, two = lines.index("# 1. install and run the main job (writes ./specroof-report/index.html)"), None
    assert lines[one + 1] == (
        "python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 '.[measure]' && .venv/bin/specroof report"
    )
    two = lines.index("# 2. install everything and run the whole test suite (lint, types, tests), as CI does")
    assert lines[two + 1] == "bash .ci/run"
    # what specroof answers comes before them, in one paragraph
    intro = README.split("```bash", 1)[0]
    assert "speculative decoding" in intro and "gamma" in intro


def test_sections_come_in_the_user_guide_order():
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:3] == ["Install", "A five-minute tour", "How accurate is it"]
    assert headings[-1] == "Where next"


def test_install_says_how_to_get_cpu_and_cuda_torch_and_names_every_extra():
    install = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "download.pytorch.org/whl/cpu" in install and "whl/cu" in install and "torch==2.13.0" in install
    for extra in ("measure", "hf", "notebooks", "dev", "docs", "all"):
        assert f"| `{extra}` |" in install


#: the tour's questions (issue 46, item 7) and what each one's single command must name
TOUR = {
    "EAGLE-3 on an H100 under vLLM": ["specroof plan", "h100-sxm-80gb", "--drafter eagle3", "--engine vllm", "1,8,64"],
    "vLLM metrics call for on an H200": ["specroof plan", "h200-sxm-141gb", "docs/examples/vllm_metrics.prom"],
    "stop paying on 4xH100": ["specroof serve", "h100-sxm-80gb", "--tp 4", "--rate"],
    "EAGLE-2 tree on an A100": ["specroof tree", "--drafter eagle2", "a100-sxm-80gb"],
    "DeepSeek-V3 with its MTP module on 8xH200": ["specroof plan", "deepseek-v3", "--drafter mtp", "--tp 8", "h200"],
    "memory bound (crossover K)": ["specroof roofline", "h100-sxm-80gb"],
}


def test_each_tour_question_is_one_command_with_its_printed_output():
    tour = README.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    for question, needed in TOUR.items():
        assert question in tour, question
        after = tour.split(question, 1)[1]
        blocks = _blocks(after)
        (lang, cmd), (out_lang, out) = blocks[0], blocks[1]
        assert lang == "bash" and out_lang == "text", question
        commands = [c for c in cmd.replace("\\\n", " ").splitlines() if c.strip()]
        assert len(commands) == 1, f"{question}: one command"
        for flag in needed:
            assert flag in commands[0], f"{question}: {flag}"
        assert out.strip(), f"{question}: its output is shown"
    roofline_out = _blocks(tour.split("memory bound (crossover K)", 1)[1])[1][1]
    assert "crossover K" in roofline_out and "ridge" in roofline_out


def test_every_relative_link_resolves():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), target
    for path in re.findall(r"`((?:docs|tests)/[\w./-]+\.\w+)`", README):
        assert (ROOT / path).exists(), path


def test_the_diaries_moved_to_benchmarks_with_their_figures():
    """Nothing the README measured was lost: its notes are in BENCHMARKS.md, each with machine, date and command."""
    bench = (ROOT / "BENCHMARKS.md").read_text()
    notes = bench.split("<!-- notes moved from the README -->", 1)[1].split("<!-- /notes moved from the README -->")[0]
    for figure in (
        "1238 s from a fresh clone",  # CI
        "the whole command took 67.0 s and `--quick` 28.1 s",  # the report page
        "`pass_time`\ntook 13.7 us",  # scalar calls
        "13.9 / 15.9 CPU seconds",  # the serving simulator
        "four runs\non 2026-12-03",  # measure serve
        "budget 128, depth 10 takes 0.0066 s",  # the tree DP
        "fitted 296 us per gloo",  # tensor parallelism
        "4.5% / 8.6% median / max",  # measure engine
        "| distilled draft | 1 | 4 | 0.85 | 3.23x | 3.23x | +0% | 3.42x |",  # measure spec
        "fitted the verify passes to 1.2%",  # measure spec on the H200
    ):
        assert figure in notes, figure
    for command in ("bench_report_profile", "bench_scalar", "bench_serving", "bench_tree_dp", "bench_step_vs_peers"):
        assert f"python -m benchmarks.{command}" in notes
    # the README keeps no diary: no dated runs, no load averages
    assert not re.search(r"2026-1\d-\d\d|load average", README)
